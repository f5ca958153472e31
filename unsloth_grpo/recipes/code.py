"""Code recipe: write a Python function in a fenced block, rewarded by the unit tests it passes in a sandbox.

    python -m unsloth_grpo.recipes.code                          # Qwen2.5-Coder-1.5B 4-bit, a consumer GPU
    python -m unsloth_grpo.recipes.code --preset smoke --output-dir outputs/code-smoke  # offline, CPU
    python -m unsloth_grpo.recipes.code --config recipes/code.yaml data.source=mbpp_train.jsonl
    unsloth-grpo eval --task code --dataset humaneval --model outputs/code/adapter --samples 10
"""

from __future__ import annotations

import sys

from unsloth_grpo.cli.recipe import run_recipe
from unsloth_grpo.tasks.code import RECIPE


def main(argv: list[str] | None = None) -> int:
    return run_recipe(RECIPE, argv)


if __name__ == "__main__":
    sys.exit(main())
