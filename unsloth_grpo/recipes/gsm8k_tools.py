"""GSM8K with a calculator tool: GRPO where the model calls calculate(expression) between turns.

    python -m unsloth_grpo.recipes.gsm8k_tools                       # Qwen2.5-1.5B 4-bit, a consumer GPU
    python -m unsloth_grpo.recipes.gsm8k_tools --preset smoke --output-dir outputs/tools-smoke   # offline, CPU
    python -m unsloth_grpo.recipes.gsm8k_tools --config recipes/gsm8k_tools.yaml training.max_steps=50
"""

from __future__ import annotations

import sys

from unsloth_grpo.cli.recipe import run_recipe
from unsloth_grpo.tasks.gsm8k_tools import RECIPE


def main(argv: list[str] | None = None) -> int:
    return run_recipe(RECIPE, argv)


if __name__ == "__main__":
    sys.exit(main())
