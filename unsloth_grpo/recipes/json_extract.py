"""JSON extraction recipe: answer with a JSON object of the requested keys, read from a short text.

    python -m unsloth_grpo.recipes.json_extract                  # Qwen2.5-1.5B 4-bit, a consumer GPU
    python -m unsloth_grpo.recipes.json_extract --preset smoke --output-dir outputs/json-smoke  # offline, CPU
    python -m unsloth_grpo.recipes.json_extract --config recipes/json_extract.yaml training.max_steps=50
"""

from __future__ import annotations

import sys

from unsloth_grpo.recipe import Recipe, run_recipe
from unsloth_grpo.tasks.json_extract import DEFAULT_REWARDS

DEFAULTS = {
    "task": "json_extract",
    "output_dir": "outputs/json_extract",
    "model": {"name": "unsloth/Qwen2.5-1.5B-Instruct-bnb-4bit", "max_seq_length": 640, "load_in_4bit": True},
    "lora": {"r": 16, "alpha": 32},
    "data": {"source": "synthetic", "subset": None, "num_synthetic": 2048, "max_prompt_tokens": 256},
    "rewards": DEFAULT_REWARDS,
    "training": {
        "max_steps": 200, "learning_rate": 5e-6, "num_generations": 8, "per_device_train_batch_size": 8,
        "max_completion_length": 256, "temperature": 1.0,
    },
}

PRESETS = {
    # Offline on CPU with the tiny random model. JSON is spelled in sub-word pieces it cannot
    # assemble by chance, so the answer tags carry the rising reward; the JSON rewards are
    # still computed and logged.
    "smoke": {
        "output_dir": "outputs/json-smoke",
        "seed": 0,
        "model": {"name": "builtin:tiny", "max_seq_length": 512, "load_in_4bit": False, "dtype": "fp32",
                  "device": "cpu"},
        "lora": {"r": 16, "alpha": 32},
        "data": {"num_synthetic": 256, "max_prompt_tokens": 320},
        "rewards": [
            {"name": "xml_count", "weight": 1.0, "params": {"per_tag": 0.25, "once": False}},
            {"name": "json_extract_valid", "weight": 0.5},
            {"name": "json_extract_keys", "weight": 0.5},
            {"name": "json_extract_values", "weight": 1.0},
        ],
        "training": {
            "max_steps": 40, "learning_rate": 2e-2, "lr_scheduler_type": "constant", "warmup_ratio": 0.0,
            "weight_decay": 0.0, "max_grad_norm": 1.0, "num_generations": 8, "per_device_train_batch_size": 8,
            "max_completion_length": 12, "temperature": 1.0, "samples_every": 20, "save_steps": 0,
        },
        # completions are cut at 12 tokens on purpose: that warning would only be noise here
        "monitor": {"ignore": ["length_clipped"]},
    },
    # Colab T4 (16 GB, no bf16).
    "t4": {"model": {"dtype": "fp16", "gpu_memory_utilization": 0.5}},
}

RECIPE = Recipe("json_extract", DEFAULTS, PRESETS, description=__doc__.splitlines()[0])


def main(argv: list[str] | None = None) -> int:
    return run_recipe(RECIPE, argv)


if __name__ == "__main__":
    sys.exit(main())
