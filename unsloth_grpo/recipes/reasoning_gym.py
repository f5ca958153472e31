"""reasoning-gym recipe: one of its generated datasets or a weighted mixture, graded strictly.

    python -m unsloth_grpo.recipes.reasoning_gym                     # Qwen2.5-1.5B 4-bit, a consumer GPU
    python -m unsloth_grpo.recipes.reasoning_gym --preset smoke --output-dir outputs/reasoning_gym-smoke  # offline, CPU
    python -m unsloth_grpo.recipes.reasoning_gym --preset smollm2    # the real SmolLM2-135M on a CPU, minutes
    python -m unsloth_grpo.recipes.reasoning_gym --config recipes/reasoning_gym.yaml training.max_steps=50

Needs the reasoning-gym extra: pip install 'unsloth-grpo[reasoning_gym]' (docs/reasoning-gym.md).
"""

from __future__ import annotations

import sys

from unsloth_grpo.cli.recipe import run_recipe
from unsloth_grpo.tasks.reasoning_gym import RECIPE


def main(argv: list[str] | None = None) -> int:
    return run_recipe(RECIPE, argv)


if __name__ == "__main__":
    sys.exit(main())
