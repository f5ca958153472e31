"""Guess the number: a stateful tool environment (TRL's environment_factory) trained with GRPO.

    python -m unsloth_grpo.recipes.guess_number --preset smoke --output-dir outputs/guess-smoke   # offline, CPU
    python -m unsloth_grpo.recipes.guess_number --config recipes/guess_number.yaml
"""

from __future__ import annotations

import sys

from unsloth_grpo.cli.recipe import Recipe, run_recipe, smoke_preset
from unsloth_grpo.config import merge_dicts
from unsloth_grpo.tasks.guess_number import DEFAULT_REWARDS

DEFAULTS = {
    "task": "guess_number",
    "output_dir": "outputs/guess_number",
    "model": {"name": "unsloth/Qwen2.5-1.5B-Instruct-bnb-4bit", "max_seq_length": 1024, "load_in_4bit": True},
    "data": {"source": "synthetic", "num_synthetic": 512, "max_prompt_tokens": 256},
    "rewards": DEFAULT_REWARDS,
    "tools": {"environment": "guess_number", "max_tool_calling_iterations": 6, "timeout": 5.0},
    "training": {"max_steps": 200, "max_completion_length": 384},
}

PRESETS = {
    # Offline on CPU with the tiny tool-capable model: shows the environment loop running, not skill.
    "smoke": merge_dicts(
        smoke_preset(output_dir="outputs/guess-smoke", task_rewards=[], data={"source": "synthetic"},
                     training={"max_steps": 10, "max_completion_length": 48}, run={"samples_every": 5}),
        {"model": {"name": "builtin:tiny-tools"}, "rewards": DEFAULT_REWARDS,
         "tools": {"max_tool_calling_iterations": 3, "timeout": 2.0}},
    ),
}

RECIPE = Recipe("guess_number", DEFAULTS, PRESETS, description=__doc__.splitlines()[0])


def main(argv: list[str] | None = None) -> int:
    return run_recipe(RECIPE, argv)


if __name__ == "__main__":
    sys.exit(main())
