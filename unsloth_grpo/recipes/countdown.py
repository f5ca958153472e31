"""Countdown recipe: reach a target number with given numbers and + - * / (the TinyZero task).

    python -m unsloth_grpo.recipes.countdown                     # Qwen2.5-3B 4-bit, a consumer GPU
    python -m unsloth_grpo.recipes.countdown --preset smoke --output-dir outputs/countdown-smoke  # offline, CPU
    python -m unsloth_grpo.recipes.countdown --config recipes/countdown.yaml training.max_steps=50
"""

from __future__ import annotations

import sys

from unsloth_grpo.cli.recipe import Recipe, run_recipe, smoke_preset
from unsloth_grpo.tasks.countdown import DEFAULT_REWARDS

DEFAULTS = {
    "task": "countdown",
    "output_dir": "outputs/countdown",
    # TinyZero saw the search behaviour appear from 3B up; smaller models mostly learn the format.
    "model": {"name": "unsloth/Qwen2.5-3B-Instruct-bnb-4bit", "max_seq_length": 768, "load_in_4bit": True},
    "lora": {"r": 16, "alpha": 32},
    "data": {"source": "synthetic", "subset": None, "num_synthetic": 4096, "max_prompt_tokens": 256},
    "rewards": DEFAULT_REWARDS,
    "training": {"max_steps": 400, "max_completion_length": 512},
}

PRESETS = {
    # Offline on CPU with the tiny random model. It cannot search for equations, so the
    # answer tags carry the rising reward; countdown_equation is still computed and logged.
    "smoke": smoke_preset(
        output_dir="outputs/countdown-smoke",
        task_rewards=[{"name": "countdown_equation", "weight": 1.0}],
    ),
    # Colab T4 (16 GB, no bf16).
    "t4": {"model": {"dtype": "fp16"}},  # the vLLM pool is standby's: Unsloth sizes it from the card
}

RECIPE = Recipe("countdown", DEFAULTS, PRESETS, description=__doc__.splitlines()[0])


def main(argv: list[str] | None = None) -> int:
    return run_recipe(RECIPE, argv)


if __name__ == "__main__":
    sys.exit(main())
