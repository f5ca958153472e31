"""What the run attaches to a built GRPO trainer's generation and loss: where TRL's colocated vLLM is built
(on a CPU, vLLM's CPU build), the rollout checks, the shared prompt prefill of generation and its twin in
the loss, a task's curriculum, and dynamic sampling. Each piece lives in its own module; this one decides
which apply."""

from __future__ import annotations

from typing import Callable

from unsloth_grpo.config import RecipeConfig, is_transformers
from unsloth_grpo.tasks import get_task


def engine_for(info, log: Callable[[str], None], output_dir: str = "."):
    """Where TRL's vLLM generation is built for the decision (:func:`unsloth_grpo.hardware.profiles.vllm_choice`):
    on a CPU, colocated, float32, eager and the whole-model weight sync of :mod:`unsloth_grpo.training.vllm_cpu`;
    on a server from a CPU, the adapter sync of :mod:`unsloth_grpo.training.vllm_server` (adapters under
    ``output_dir``); elsewhere TRL's own."""
    import contextlib

    if getattr(info, "vllm_adapter_sync", False):
        from unsloth_grpo.training.vllm_server import served_on_cpu

        return served_on_cpu(output_dir, log)
    if info.use_vllm and info.device == "cpu":
        from unsloth_grpo.training.vllm_cpu import colocated_on_cpu

        return colocated_on_cpu(log)
    return contextlib.nullcontext()


def attach(cfg: RecipeConfig, trainer, loaded, health, main_process: bool, log: Callable[[str], None]) -> None:
    """What watches and shapes generation: the rollout checks (the first rounds; after every weight sync
    of vLLM's CPU engine), the shared prefill (HF generate) and its twin in the loss (each group's prompt
    run once), and dynamic sampling when the config asks for it."""
    from unsloth_grpo.training.rollouts import watch_rollouts
    from unsloth_grpo.training.vllm_cpu import watch_sync

    watch_rollouts(trainer, health, log=log)  # the first rounds' completions must come from the trained weights
    watch_sync(trainer, health, log=log)  # vLLM's CPU engine scores fixed completions as the policy does
    if is_transformers(loaded.info.backend) or loaded.info.device == "cpu":  # HF generate, not Unsloth's GPU path
        from unsloth_grpo.training import shared_prefill

        shared_prefill.attach(trainer, log=log)  # one prompt prefill per group; same completions
        from unsloth_grpo.training import shared_prompt_loss

        shared_prompt_loss.attach(trainer, log=log)  # one prompt forward per group in the loss; same log-probs
    levels = get_task(cfg.task).curriculum(cfg)
    if levels is not None:  # before dynamic sampling, so that every refill round reads the step's levels
        from unsloth_grpo.training import curriculum

        curriculum.attach(trainer, levels, log=log if main_process else None)
    if cfg.training.dynamic_sampling != "off":
        from unsloth_grpo.training import dynamic_sampling

        try:
            dynamic_sampling.attach(trainer, cfg.training.dynamic_sampling, max_rounds=cfg.training.max_sampling_rounds,
                                    log=log)
            if main_process:
                log(dynamic_sampling.describe(cfg.training.dynamic_sampling, cfg.training.max_sampling_rounds))
        except dynamic_sampling.DynamicSamplingError as exc:  # a trainer class without TRL's methods
            if main_process:
                log(f"dynamic sampling: off for this run ({exc})")


def release(trainer) -> None:
    """After a finished run: a vLLM server's adapter is unloaded and its folder under the run removed."""
    client = getattr(getattr(trainer, "vllm_generation", None), "vllm_client", None)
    if hasattr(client, "close") and hasattr(client, "sync"):  # the adapter sync's client, not TRL's NCCL one
        client.close()


__all__ = ["attach", "engine_for", "release"]
