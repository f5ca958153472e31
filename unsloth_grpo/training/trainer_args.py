"""The recipe config as TRL's own arguments: ``GRPOConfig`` for GRPO runs, ``SFTConfig`` for SFT stages.

One rule for both: every field of ``training`` goes to TRL under its own name, when the target
dataclass has it (an SFT stage ignores GRPO-only fields such as ``num_generations``, and
``loss_type``, whose GRPO values mean nothing to SFT); the fields
the toolkit decides itself (:data:`unsloth_grpo.config.TRAINER_FIELDS_OWNED_ELSEWHERE`) come from
the config key that owns them, adjusted for the device and backend that were loaded.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from unsloth_grpo.config import RecipeConfig, TrainingConfig


def trainer_kwargs(cfg: RecipeConfig, info, valid: set[str], training: TrainingConfig | None = None) -> dict[str, Any]:
    """Keyword arguments for a TRL config class whose field names are ``valid``."""
    t = cfg.training if training is None else training
    cpu = info.device == "cpu"
    named = {f.name: getattr(t, f.name) for f in dataclasses.fields(t) if f.name != "passthrough"}
    kwargs: dict[str, Any] = {k: v for k, v in named.items() if k in valid}
    kwargs.update(
        # transformers 5 dropped warmup_ratio: a float below 1 in warmup_steps is a share of max_steps
        warmup_steps=float(t.warmup_ratio) if t.warmup_ratio else 0,
        optim="adamw_torch" if cpu and "8bit" in t.optim else t.optim,  # bitsandbytes' 8-bit needs CUDA
        save_strategy="steps" if t.save_steps > 0 else "no",
        save_steps=t.save_steps if t.save_steps > 0 else 500,
        save_total_limit=None,  # checkpoint.py moves each save under checkpoints/ and keeps run.keep_last
        report_to=list(t.report_to) or "none",
        # Unsloth does its own (offloaded) checkpointing inside the model; TRL's would repeat it.
        gradient_checkpointing=t.gradient_checkpointing and info.backend == "transformers" and not cpu,
        output_dir=cfg.output_dir,
        seed=cfg.seed,
        data_seed=cfg.seed,
        bf16=info.dtype == "bf16",
        fp16=info.dtype == "fp16",
        use_cpu=cpu,
        disable_tqdm=True,
    )
    if kwargs.get("steps_per_generation") is None:
        kwargs.pop("steps_per_generation", None)
    kwargs.update({k: v for k, v in t.passthrough.items() if k in valid})
    return kwargs


def grpo_args(cfg: RecipeConfig, info, *, weights: list[float]):
    """TRL's ``GRPOConfig`` for this run on the loaded device and backend."""
    from trl import GRPOConfig

    from unsloth_grpo.training.distributed import vllm_server_kwargs

    kwargs = trainer_kwargs(cfg, info, {f.name for f in dataclasses.fields(GRPOConfig)})
    kwargs["reward_weights"] = weights
    if cfg.tools.functions or cfg.tools.environment:  # the tools section owns TRL's tool-loop bound
        kwargs["max_tool_calling_iterations"] = cfg.tools.max_tool_calling_iterations
    if cfg.model.vllm_server:  # generation on a separate `trl vllm-serve`, any number of training processes
        kwargs.update(vllm_server_kwargs(cfg.model.vllm_server))
    elif info.use_vllm and info.backend == "transformers":
        # without a length vLLM sizes its KV cache for the model's whole context (131k for Llama 3.1);
        # asleep while the model trains, its pool goes back to the card (TRL re-sends the weights on waking)
        kwargs.update(use_vllm=True, vllm_mode="colocate",
                      vllm_gpu_memory_utilization=cfg.model.gpu_memory_utilization,
                      vllm_max_model_length=cfg.model.max_seq_length,
                      vllm_enable_sleep_mode=bool(getattr(info, "vllm_standby", False)))
    return GRPOConfig(**kwargs)


def sft_args(cfg: RecipeConfig, info):
    """TRL's ``SFTConfig`` for an SFT stage: the same fields by the same rule, plus the sequence length."""
    from trl import SFTConfig

    # loss_type names GRPO's loss ("dapo", ...); SFTConfig's field of that name means another thing
    kwargs = trainer_kwargs(cfg, info, {f.name for f in dataclasses.fields(SFTConfig)} - {"loss_type"})
    kwargs.setdefault("max_length", cfg.model.max_seq_length)
    return SFTConfig(**kwargs)
