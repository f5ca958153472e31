"""GSM8K recipe: teach a model to reason in <reasoning> and answer in <answer> with GRPO.

    python -m unsloth_grpo.recipes.gsm8k                          # Qwen2.5-1.5B 4-bit, a consumer GPU
    python -m unsloth_grpo.recipes.gsm8k --preset smoke --output-dir outputs/smoke   # offline, CPU, ~1 min
    python -m unsloth_grpo.recipes.gsm8k --preset smollm2     # a real 135M model (SmolLM2), offline after its first use, CPU
    python -m unsloth_grpo.recipes.gsm8k --config recipes/gsm8k.yaml training.max_steps=50
"""

from __future__ import annotations

import sys

from unsloth_grpo.cli.recipe import REAL_MODEL_PRESET, Recipe, real_model_preset, run_recipe, smoke_preset
from unsloth_grpo.tasks.gsm8k import DEFAULT_REWARDS, EXAMPLE_SYSTEM_PROMPT

DEFAULTS = {
    "task": "gsm8k",
    "output_dir": "outputs/gsm8k",
    "model": {"name": "unsloth/Qwen2.5-1.5B-Instruct-bnb-4bit", "max_seq_length": 1024, "load_in_4bit": True},
    "lora": {"r": 16, "alpha": 32},
    "data": {"source": "openai/gsm8k", "split": "train", "max_prompt_tokens": 256},
    "rewards": DEFAULT_REWARDS,
    "training": {"max_completion_length": 512},
}

PRESETS = {
    # The embedded offline default: a tiny model built locally, synthetic problems, CPU.
    # The random tiny model cannot do arithmetic, so the smoke run trains the format: each of
    # the four tags earns 0.25 when present (once=False gives the dense signal a random model
    # needs). correctness is still computed and logged; it stays at 0 on a random model.
    # Settings measured to lift the reward by ~0.5 within a minute on two cores (see README).
    "smoke": smoke_preset(
        output_dir="outputs/smoke",
        task_rewards=[{"name": "correctness", "weight": 1.0}],
        data={"source": "synthetic"},
        # measured on this model: a longer run at a gentler rate and a warmer temperature
        training={"max_steps": 100, "learning_rate": 1e-2, "temperature": 1.2},
        run={"samples_every": 25},
    ),
    # The real built-in model (SmolLM2-135M-Instruct) on a CPU. Rewarded for the format alone, it learned
    # to copy the old prompt's template, and with one worked addition to add every pair of numbers
    # (docs/real_model.md). So: worked examples of both operations, a short SFT warm-up on worked answers
    # of the training set (the format and both operations), then GRPO paying correctness above a format
    # that counts only with an answer inside; held-out accuracy before and after, broken down by operation.
    REAL_MODEL_PRESET: real_model_preset(
        output_dir="outputs/gsm8k-smollm2",
        system_prompt=EXAMPLE_SYSTEM_PROMPT,
        data={"subset": "easy"},  # one-step, one-digit problems: the base model is right on some of them
        rewards=[{"name": "correctness", "weight": 2.0}, {"name": "strict_format", "weight": 0.5}],
        # After the warm-up most groups of 8 agree (all right): refill replaces them with groups that differ;
        # sampling at 1.0 gives the groups their differences. GRPO at the warm-up's rate (2e-4) undid the
        # warm-up's subtractions; at 5e-5 it kept them and fixed some (docs/real_model.md).
        training={"dynamic_sampling": "refill", "temperature": 1.0},
        stages=[{"name": "sft", "kind": "sft", "max_steps": 20, "learning_rate": 2e-4, "num_examples": 160},
                {"name": "grpo", "kind": "grpo", "max_steps": 30, "learning_rate": 5e-5}],
        evaluation={"before_after": True, "limit": 32, "batch_size": 32},
    ),
    # Colab T4 (16 GB, no bf16): 0.5B-1.5B 4-bit fits with 8 generations of 512 tokens.
    "t4": {"model": {"dtype": "fp16"}},  # the vLLM pool is standby's: Unsloth sizes it from the card
}

RECIPE = Recipe("gsm8k", DEFAULTS, PRESETS, description=__doc__.splitlines()[0])


def main(argv: list[str] | None = None) -> int:
    return run_recipe(RECIPE, argv)


if __name__ == "__main__":
    sys.exit(main())
