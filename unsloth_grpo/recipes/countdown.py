"""Countdown recipe: reach a target number with given numbers and + - * / (the TinyZero task).

    python -m unsloth_grpo.recipes.countdown                     # Qwen2.5-3B 4-bit, a consumer GPU
    python -m unsloth_grpo.recipes.countdown --preset smoke --output-dir outputs/countdown-smoke  # offline, CPU
    python -m unsloth_grpo.recipes.countdown --config recipes/countdown.yaml training.max_steps=50
"""

from __future__ import annotations

import sys

from unsloth_grpo.cli.recipe import run_recipe
from unsloth_grpo.tasks.countdown import RECIPE


def main(argv: list[str] | None = None) -> int:
    return run_recipe(RECIPE, argv)


if __name__ == "__main__":
    sys.exit(main())
