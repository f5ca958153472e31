"""GSM8K with a calculator tool: GRPO where the model calls calculate(expression) between turns.

    python -m unsloth_grpo.recipes.gsm8k_tools                       # Qwen2.5-1.5B 4-bit, a consumer GPU
    python -m unsloth_grpo.recipes.gsm8k_tools --preset smoke --output-dir outputs/tools-smoke   # offline, CPU
    python -m unsloth_grpo.recipes.gsm8k_tools --config recipes/gsm8k_tools.yaml training.max_steps=50
"""

from __future__ import annotations

import sys

from unsloth_grpo.cli.recipe import Recipe, run_recipe, smoke_preset
from unsloth_grpo.config import merge_dicts
from unsloth_grpo.tasks.gsm8k_tools import DEFAULT_REWARDS

DEFAULTS = {
    "task": "gsm8k_tools",
    "output_dir": "outputs/gsm8k_tools",
    # Qwen2.5's chat template is one TRL knows how to parse tool calls from.
    "model": {"name": "unsloth/Qwen2.5-1.5B-Instruct-bnb-4bit", "max_seq_length": 1536, "load_in_4bit": True},
    "lora": {"r": 16, "alpha": 32},
    "data": {"source": "openai/gsm8k", "split": "train", "max_prompt_tokens": 512},
    "rewards": DEFAULT_REWARDS,
    "tools": {"functions": ["calculate"], "max_tool_calling_iterations": 4, "timeout": 5.0},
    "training": {"max_completion_length": 768},
}

PRESETS = {
    # Offline on CPU: the tiny model whose tokenizer holds the call markers as whole tokens. A
    # random model cannot do GSM8K, so the smoke run teaches the call itself: tool_call_format
    # gives stepped credit up to 1.0 for a call that ran; correctness is logged and stays ~0.
    # Measured on seeds 0/1/2: 40 steps at lr 2e-2 left seed 2 below a 0.2 rise (0.19); these
    # settings rose by 0.30/0.26/0.27 (docs/tools.md).
    "smoke": merge_dicts(
        smoke_preset(output_dir="outputs/tools-smoke", task_rewards=[], data={"source": "synthetic"},
                     training={"max_steps": 60, "learning_rate": 1e-2, "temperature": 1.2,
                               "max_completion_length": 32}, run={"samples_every": 20}),
        {"model": {"name": "builtin:tiny-tools"},
         "rewards": [{"name": "tool_call_format", "weight": 1.0},
                     {"name": "tool_call_budget", "weight": 1.0},
                     {"name": "correctness", "weight": 1.0}],
         "tools": {"max_tool_calling_iterations": 1, "timeout": 2.0}},
    ),
}

RECIPE = Recipe("gsm8k_tools", DEFAULTS, PRESETS, description=__doc__.splitlines()[0])


def main(argv: list[str] | None = None) -> int:
    return run_recipe(RECIPE, argv)


if __name__ == "__main__":
    sys.exit(main())
