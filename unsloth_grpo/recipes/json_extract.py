"""JSON extraction recipe: answer with a JSON object of the requested keys, read from a short text.

    python -m unsloth_grpo.recipes.json_extract                  # Qwen2.5-1.5B 4-bit, a consumer GPU
    python -m unsloth_grpo.recipes.json_extract --preset smoke --output-dir outputs/json-smoke  # offline, CPU
    python -m unsloth_grpo.recipes.json_extract --preset smollm2   # a real 135M model on a CPU, minutes
    python -m unsloth_grpo.recipes.json_extract --config recipes/json_extract.yaml training.max_steps=50
"""

from __future__ import annotations

import sys

from unsloth_grpo.cli.recipe import REAL_MODEL_PRESET, Recipe, real_model_preset, run_recipe, smoke_preset
from unsloth_grpo.tasks.json_extract import DEFAULT_REWARDS, EXAMPLE_SYSTEM_PROMPT

DEFAULTS = {
    "task": "json_extract",
    "output_dir": "outputs/json_extract",
    "model": {"name": "unsloth/Qwen2.5-1.5B-Instruct-bnb-4bit", "max_seq_length": 640, "load_in_4bit": True},
    "lora": {"r": 16, "alpha": 32},
    "data": {"source": "synthetic", "subset": None, "num_synthetic": 2048, "max_prompt_tokens": 256},
    "rewards": DEFAULT_REWARDS,
    "training": {"max_steps": 200},
}

PRESETS = {
    # Offline on CPU with the tiny random model. JSON is spelled in sub-word pieces it cannot
    # assemble by chance, so the answer tags carry the rising reward; the JSON rewards are
    # still computed and logged.
    "smoke": smoke_preset(
        output_dir="outputs/json-smoke",
        task_rewards=[
            {"name": "json_extract_valid", "weight": 0.5},
            {"name": "json_extract_keys", "weight": 0.5},
            {"name": "json_extract_values", "weight": 1.0},
        ],
        data={"max_prompt_tokens": 320},
    ),
    # The real built-in model (SmolLM2-135M-Instruct) on a CPU: the format shown by an example, each tag
    # paid on its own, and the task's JSON rewards, which a real model can earn.
    REAL_MODEL_PRESET: real_model_preset(
        output_dir="outputs/json-smollm2",
        system_prompt=EXAMPLE_SYSTEM_PROMPT,
        rewards=[{"name": "xml_count", "weight": 1.0, "params": {"per_tag": 0.25, "once": False}},
                 {"name": "json_extract_valid", "weight": 0.5},
                 {"name": "json_extract_keys", "weight": 0.5},
                 {"name": "json_extract_values", "weight": 1.0}],
        data={"max_prompt_tokens": 320},
        training={"max_completion_length": 64},
    ),
    # Colab T4 (16 GB, no bf16).
    "t4": {"model": {"dtype": "fp16"}},  # the vLLM pool is standby's: Unsloth sizes it from the card
}

RECIPE = Recipe("json_extract", DEFAULTS, PRESETS, description=__doc__.splitlines()[0])


def main(argv: list[str] | None = None) -> int:
    return run_recipe(RECIPE, argv)


if __name__ == "__main__":
    sys.exit(main())
