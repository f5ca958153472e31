"""Custom Q&A recipe: GRPO on your own file of questions and reference answers, configured in YAML only.

    python -m unsloth_grpo.recipes.custom --config recipes/custom.yaml        # your CSV/JSONL, a consumer GPU
    python -m unsloth_grpo.recipes.custom --preset smoke --output-dir outputs/custom-smoke  # offline, CPU
    python -m unsloth_grpo.recipes.custom --config recipes/custom.yaml data.source=kb.csv \\
        data.answer_column=expert_answer 'rewards=[{name: qa_correctness, params: {mode: f1}}]'
"""

from __future__ import annotations

import sys

from unsloth_grpo.cli.recipe import run_recipe
from unsloth_grpo.tasks.custom import RECIPE


def main(argv: list[str] | None = None) -> int:
    return run_recipe(RECIPE, argv)


if __name__ == "__main__":
    sys.exit(main())
