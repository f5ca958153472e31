"""GSM8K recipe: teach a model to reason in <reasoning> and answer in <answer> with GRPO.

    python -m unsloth_grpo.recipes.gsm8k                          # Qwen2.5-1.5B 4-bit, a consumer GPU
    python -m unsloth_grpo.recipes.gsm8k --preset smoke --output-dir outputs/smoke   # offline, CPU, ~1 min
    python -m unsloth_grpo.recipes.gsm8k --preset smollm2     # a real 135M model (SmolLM2), offline after its first use, CPU
    python -m unsloth_grpo.recipes.gsm8k --config recipes/gsm8k.yaml training.max_steps=50
"""

from __future__ import annotations

import sys

from unsloth_grpo.cli.recipe import run_recipe
from unsloth_grpo.tasks.gsm8k import RECIPE


def main(argv: list[str] | None = None) -> int:
    return run_recipe(RECIPE, argv)


if __name__ == "__main__":
    sys.exit(main())
