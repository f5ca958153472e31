"""Guess the number: a stateful tool environment (TRL's environment_factory) trained with GRPO.

    python -m unsloth_grpo.recipes.guess_number --preset smoke --output-dir outputs/guess-smoke   # offline, CPU
    python -m unsloth_grpo.recipes.guess_number --config recipes/guess_number.yaml
"""

from __future__ import annotations

import sys

from unsloth_grpo.cli.recipe import run_recipe
from unsloth_grpo.tasks.guess_number import RECIPE


def main(argv: list[str] | None = None) -> int:
    return run_recipe(RECIPE, argv)


if __name__ == "__main__":
    sys.exit(main())
