"""JSON extraction recipe: answer with a JSON object of the requested keys, read from a short text.

    python -m unsloth_grpo.recipes.json_extract                  # Qwen2.5-1.5B 4-bit, a consumer GPU
    python -m unsloth_grpo.recipes.json_extract --preset smoke --output-dir outputs/json-smoke  # offline, CPU
    python -m unsloth_grpo.recipes.json_extract --preset smollm2   # a real 135M model on a CPU, minutes
    python -m unsloth_grpo.recipes.json_extract --config recipes/json_extract.yaml training.max_steps=50
"""

from __future__ import annotations

import sys

from unsloth_grpo.cli.recipe import run_recipe
from unsloth_grpo.tasks.json_extract import RECIPE


def main(argv: list[str] | None = None) -> int:
    return run_recipe(RECIPE, argv)


if __name__ == "__main__":
    sys.exit(main())
