"""Custom Q&A recipe: GRPO on your own file of questions and reference answers, configured in YAML only.

    python -m unsloth_grpo.recipes.custom --config recipes/custom.yaml        # your CSV/JSONL, a consumer GPU
    python -m unsloth_grpo.recipes.custom --preset smoke --output-dir outputs/custom-smoke  # offline, CPU
    python -m unsloth_grpo.recipes.custom --config recipes/custom.yaml data.source=kb.csv \\
        data.answer_column=expert_answer 'rewards=[{name: qa_correctness, params: {mode: f1}}]'
"""

from __future__ import annotations

import sys

from unsloth_grpo.cli.recipe import Recipe, run_recipe, smoke_preset
from unsloth_grpo.tasks.custom import DEFAULT_REWARDS

DEFAULTS = {
    "task": "custom",
    "output_dir": "outputs/custom",
    "model": {"name": "unsloth/Qwen2.5-1.5B-Instruct-bnb-4bit", "max_seq_length": 1024, "load_in_4bit": True},
    "lora": {"r": 16, "alpha": 32},
    # Without a config this trains on the offline handbook questions; set data.source to your file.
    "data": {"source": "synthetic", "subset": None, "max_prompt_tokens": 256},
    "rewards": DEFAULT_REWARDS,
    "training": {"max_completion_length": 512},
}

PRESETS = {
    # Offline on CPU with the tiny random model and the handbook questions: the answer tags
    # carry the rising reward; qa_correctness is still computed and logged.
    "smoke": smoke_preset(
        output_dir="outputs/custom-smoke",
        task_rewards=[{"name": "qa_correctness", "weight": 1.0, "params": {"mode": "f1"}}],
        data={"source": "synthetic", "max_prompt_tokens": 320},
    ),
    # Colab T4 (16 GB, no bf16).
    "t4": {"model": {"dtype": "fp16"}},  # the vLLM pool is standby's: Unsloth sizes it from the card
}

RECIPE = Recipe("custom", DEFAULTS, PRESETS, description=__doc__.splitlines()[0])


def main(argv: list[str] | None = None) -> int:
    return run_recipe(RECIPE, argv)


if __name__ == "__main__":
    sys.exit(main())
