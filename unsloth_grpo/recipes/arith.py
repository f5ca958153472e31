"""Arith recipe: SFT on solved sums, then GRPO on correctness, offline on a CPU (the accuracy demo).

    python -m unsloth_grpo.recipes.arith --output-dir outputs/arith           # SFT then GRPO, CPU, ~2 minutes
    python -m unsloth_grpo.recipes.arith --preset smoke                       # the same, cut short (seconds)
    python -m unsloth_grpo.recipes.arith --config recipes/arith.yaml seed=1
    python benchmarks/accuracy_demo.py                                        # GRPO against its controls

The built-in ``tiny-digits`` model (~0.7M parameters, one token per digit) first learns the
answer format and some addition from a small fixed set of solved problems (SFT), then GRPO
rewards exact sums on fresh training problems. Held-out accuracy is measured on problems no
stage ever trained on (docs/accuracy_demo.md has the figures).
"""

from __future__ import annotations

import sys

from unsloth_grpo.cli.recipe import run_recipe
from unsloth_grpo.tasks.arith import RECIPE


def main(argv: list[str] | None = None) -> int:
    return run_recipe(RECIPE, argv)


if __name__ == "__main__":
    sys.exit(main())
