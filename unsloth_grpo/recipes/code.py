"""Code recipe: write a Python function in a fenced block, rewarded by the unit tests it passes in a sandbox.

    python -m unsloth_grpo.recipes.code                          # Qwen2.5-Coder-1.5B 4-bit, a consumer GPU
    python -m unsloth_grpo.recipes.code --preset smoke --output-dir outputs/code-smoke  # offline, CPU
    python -m unsloth_grpo.recipes.code --config recipes/code.yaml data.source=mbpp_train.jsonl
    unsloth-grpo eval --task code --dataset humaneval --model outputs/code/adapter --samples 10
"""

from __future__ import annotations

import sys

from unsloth_grpo.cli.recipe import Recipe, run_recipe, smoke_preset
from unsloth_grpo.config import merge_dicts
from unsloth_grpo.tasks.code import DEFAULT_REWARDS

DEFAULTS = {
    "task": "code",
    "output_dir": "outputs/code",
    "model": {"name": "unsloth/Qwen2.5-Coder-1.5B-Instruct-bnb-4bit", "max_seq_length": 1024, "load_in_4bit": True},
    "lora": {"r": 16, "alpha": 32},
    "data": {"source": "synthetic", "subset": None, "num_synthetic": 2048, "max_prompt_tokens": 384},
    "rewards": DEFAULT_REWARDS,
    "training": {"max_steps": 300, "max_completion_length": 512},
}

PRESETS = {
    # Offline on CPU with the tiny random model, whose tokenizer keeps the fences ```python and
    # ``` whole (builtin:tiny-code). It cannot write Python, so the rise is the fenced-block
    # format (code_block_format); code_compiles and tests_passed are computed and logged (and
    # stay at 0: random text never parses as a function of the right name). Two fence tokens
    # are a sparser signal than the four answer tags of the other smoke presets: with 8
    # completions of 12 tokens some seeds saw no fence in 30 steps, so each step samples 16 of 16.
    "smoke": merge_dicts(
        smoke_preset(output_dir="outputs/code-smoke", task_rewards=[],
                     training={"num_generations": 16, "per_device_train_batch_size": 16,
                               "max_completion_length": 16}),
        {"model": {"name": "builtin:tiny-code"},
         "rewards": [{"name": "code_block_format", "weight": 1.0},
                     {"name": "code_compiles", "weight": 0.5},
                     {"name": "tests_passed", "weight": 1.0, "params": {"timeout": 3.0}}]},
    ),
    # Colab T4 (16 GB, no bf16).
    "t4": {"model": {"dtype": "fp16"}},  # the vLLM pool is standby's: Unsloth sizes it from the card
}

RECIPE = Recipe("code", DEFAULTS, PRESETS, description=__doc__.splitlines()[0])


def main(argv: list[str] | None = None) -> int:
    return run_recipe(RECIPE, argv)


if __name__ == "__main__":
    sys.exit(main())
