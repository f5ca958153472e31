"""What to do after a CUDA out-of-memory error: save, explain, and propose a config that fits.

The training loop calls :func:`handle_oom` for every exception :func:`is_oom` recognises
(``torch.OutOfMemoryError``, and the plain ``RuntimeError("CUDA out of memory")`` that kernels
outside torch raise)::

    try:
        trainer.train()
    except Exception as exc:
        if not is_oom(exc):
            raise
        return handle_oom(trainer, cfg, exc, estimate)

It saves a checkpoint (LoRA weights, optimizer, scheduler, RNG and trainer state, so the
run can resume), prints the estimate the run was planned with, the measured peak, and a
smaller config as ``key=value`` overrides, writes the same as ``oom_report.json`` in the
output directory, and returns :data:`OOM_EXIT_CODE`.
"""

from __future__ import annotations

import gc
import inspect
import json
from pathlib import Path
from typing import Any, Callable

from unsloth_grpo.hardware import architecture, memory, planner
from unsloth_grpo.hardware.launch import detect

#: Exit status of a run that stopped on CUDA out-of-memory (distinct from 1 = error, 2 = bad config).
OOM_EXIT_CODE = 3

#: Where each setting of :func:`suggest_smaller` lives in a recipe config.
OVERRIDE_KEYS = {
    "num_generations": "training.num_generations",
    "per_device_train_batch_size": "training.per_device_train_batch_size",
    "gradient_accumulation_steps": "training.gradient_accumulation_steps",
    "steps_per_generation": "training.steps_per_generation",
    "max_completion_length": "training.max_completion_length",
    "max_prompt_length": "data.max_prompt_tokens",
    "lora_rank": "lora.r",
    "load_in_4bit": "model.load_in_4bit",
    "gpu_memory_utilization": "model.gpu_memory_utilization",
}

#: A completion is never shortened below this by the first shortening step.
_SHORT_COMPLETION = 256


def _halve_batch(s: dict) -> dict | None:
    """Half the micro-batch, twice the accumulation: same groups, about half the training memory."""
    b = s["per_device_train_batch_size"]
    if b < 2 or b % 2:
        return None
    out = {"per_device_train_batch_size": b // 2, "gradient_accumulation_steps": s["gradient_accumulation_steps"] * 2}
    if s.get("steps_per_generation"):
        out["steps_per_generation"] = s["steps_per_generation"] * 2  # keep the generation batch whole
    return out


def _shorten_completions(s: dict) -> dict | None:
    c = s["max_completion_length"]
    return {"max_completion_length": max(_SHORT_COMPLETION, c // 2)} if c > _SHORT_COMPLETION else None


def _smaller_vllm_pool(s: dict) -> dict | None:
    util = s.get("gpu_memory_utilization")
    if not s.get("use_vllm") or util is None or util <= 0.3:
        return None
    if s.get("vllm_standby"):  # Unsloth sets the standby pool from the card; a smaller setting is ignored
        return None
    return {"gpu_memory_utilization": round(max(0.3, util - 0.1), 2)}


def _halve_generations(s: dict) -> dict | None:
    """Half the group; the generation round shrinks with it (one group per optimizer step)."""
    g = s["num_generations"]
    if g <= 2:
        return None
    g2 = max(2, g // 2)
    b2 = max(d for d in range(1, min(s["per_device_train_batch_size"], g2) + 1) if g2 % d == 0)
    new = {"num_generations": g2, "per_device_train_batch_size": b2, "gradient_accumulation_steps": g2 // b2}
    if s.get("steps_per_generation"):
        new["steps_per_generation"] = g2 // b2
    return {k: v for k, v in new.items() if s.get(k) != v}


def _quarter_completions(s: dict) -> dict | None:
    c = s["max_completion_length"]
    return {"max_completion_length": max(64, c // 2)} if c > 64 else None


def _four_bit(s: dict) -> dict | None:
    return {"load_in_4bit": True} if not s.get("load_in_4bit") and s.get("lora_rank", 16) > 0 else None


def _halve_rank(s: dict) -> dict | None:
    r = s.get("lora_rank", 16)
    return {"lora_rank": r // 2} if r > 8 else None


#: The order in which settings are given up: what costs the run least comes first. The
#: micro-batch only changes speed; then completion length before the group size (a large
#: group matters more to GRPO than long completions), then precision and rank.
SHRINK_STEPS: list[Callable[[dict], dict | None]] = [
    _halve_batch, _smaller_vllm_pool, _shorten_completions, _halve_generations, _quarter_completions,
    _four_bit, _halve_rank,
]


def suggest_smaller(settings: dict, *, model_config: Any = None, target_gb: float | None = None,
                    max_rounds: int = 12) -> dict:
    """A smaller version of ``settings`` (the flat :func:`memory.estimate_memory` keywords).

    Returns only the keys that change, with their new values. Without ``model_config`` one
    step of :data:`SHRINK_STEPS` is taken (the first that applies). With it, steps that do
    not lower the estimate are skipped and steps are taken until the estimate is at most
    ``target_gb`` (default: the CUDA context plus 75% of what the current settings
    allocate) or nothing is left to give up.

    >>> suggest_smaller({"num_generations": 8, "per_device_train_batch_size": 1,
    ...                  "gradient_accumulation_steps": 8, "max_completion_length": 512})
    {'max_completion_length': 256}
    """
    current = dict(settings)
    changes: dict[str, Any] = {}
    estimate = None
    if model_config is not None:
        shape = architecture.model_shape(model_config)
        estimate = lambda s: memory.estimate_memory(shape, **_estimate_kwargs(s)).total_gb  # noqa: E731
        now = estimate(current)
        # by default cut what the run allocates (not the fixed CUDA context) by a quarter
        target = target_gb if target_gb is not None else memory.CUDA_CONTEXT_GB + 0.75 * (now - memory.CUDA_CONTEXT_GB)
    for _ in range(max_rounds):
        progressed = False
        for step in SHRINK_STEPS:
            update = step(current)
            if not update:
                continue
            trial = {**current, **update}
            if estimate is not None:
                new = estimate(trial)
                if new >= now - 1e-9:
                    continue
                now = new
            current = trial
            changes.update(update)
            progressed = True
            break
        if not progressed or estimate is None or now <= target:
            break
    return changes


def _estimate_kwargs(s: dict) -> dict:
    keys = inspect.signature(memory.estimate_memory).parameters
    return {k: v for k, v in s.items() if k in keys and k != "config"}


def overrides_for(changes: dict) -> list[str]:
    """``{'num_generations': 4}`` -> ``['training.num_generations=4']`` (recipe-config keys)."""
    out = []
    for key, value in changes.items():
        if key not in OVERRIDE_KEYS:
            raise KeyError(f"no recipe-config key for setting '{key}'; known: {', '.join(OVERRIDE_KEYS)}")
        out.append(f"{OVERRIDE_KEYS[key]}={planner._yaml_scalar(value)}")
    return out


def shrunk_config(cfg: Any, changes: dict) -> Any:
    """A copy of the recipe config with ``changes`` (from :func:`suggest_smaller`) applied."""
    from unsloth_grpo.config import config_to_dict, load_config

    return load_config(config_to_dict(cfg), overrides=overrides_for(changes))


def measured_peak_gb() -> float | None:
    """``torch.cuda.max_memory_allocated`` in GiB, or None without CUDA."""
    try:
        import torch
    except ImportError:
        return None
    if not torch.cuda.is_available():
        return None
    return torch.cuda.max_memory_allocated() / memory.GiB


def _free_memory(trainer: Any) -> None:
    """Drop gradients and cached blocks so that saving the checkpoint has room."""
    for obj in (getattr(trainer, "model", None), getattr(trainer, "optimizer", None)):
        zero = getattr(obj, "zero_grad", None)
        if zero is not None:
            try:
                zero(set_to_none=True)
            except Exception:  # noqa: BLE001 - best effort before saving
                pass
    gc.collect()
    try:
        import torch

        if torch.cuda.is_available():
            torch.cuda.empty_cache()
    except ImportError:
        pass


def save_checkpoint(trainer: Any, log: Callable[[str], None] = print) -> str | None:
    """Save a resumable checkpoint; fall back to the adapter alone; return its path or None.

    ``GRPOTrainer._save_checkpoint`` (TRL 1.14 over transformers' ``Trainer``) writes
    ``output_dir/checkpoint-<step>`` with the adapter, optimizer, scheduler, RNG state and
    ``trainer_state.json``: what ``trainer.train(resume_from_checkpoint=...)`` reads. If that
    fails (for instance because the optimizer state cannot be gathered), ``save_model``
    writes the adapter and tokenizer to ``output_dir/oom-checkpoint-<step>``.
    """
    out = Path(trainer.args.output_dir)
    step = int(getattr(trainer.state, "global_step", 0))
    try:
        trainer._save_checkpoint(trainer.model, trial=None)
        path = out / f"checkpoint-{step}"
        if path.exists():
            return str(path)
    except Exception as exc:  # noqa: BLE001 - try the lighter save next
        log(f"resumable checkpoint failed ({type(exc).__name__}: {exc}); saving the adapter only")
    path = out / f"oom-checkpoint-{step}"
    try:
        trainer.save_model(str(path))
        return str(path)
    except Exception as exc:  # noqa: BLE001
        log(f"saving the adapter failed too ({type(exc).__name__}: {exc})")
        return None


def handle_oom(trainer: Any, cfg: Any, exc: BaseException, estimate: memory.MemoryEstimate | None = None, *,
               gpu: dict | None = None, log: Callable[[str], None] = print,
               finalize: Callable[[Path], Path] | None = None) -> int:
    """Save a checkpoint, explain the OOM, print a smaller config, return :data:`OOM_EXIT_CODE`.

    ``estimate`` is the :class:`memory.MemoryEstimate` the run was planned with; when None it
    is recomputed from ``cfg`` (if the model is known to the planner). The smaller config is
    found by :func:`suggest_smaller`; everything printed is also written to
    ``<output_dir>/oom_report.json`` for ``--auto-shrink``. ``finalize`` moves the resumable
    checkpoint from the Trainer's staging directory to where it stays
    (:func:`unsloth_grpo.training.checkpoint.finalize_checkpoint`); the report names that place.
    """
    _free_memory(trainer)
    peak = measured_peak_gb()
    gpu = gpu if gpu is not None else planner.detect_gpu()
    checkpoint = save_checkpoint(trainer, log)
    if checkpoint is not None and finalize is not None and Path(checkpoint).name.startswith("checkpoint-"):
        try:
            checkpoint = str(finalize(Path(checkpoint)))
        except OSError as err:  # the staged copy is still whole; say where it is
            log(f"could not move the checkpoint into place ({err}); it stays at {checkpoint}")
    settings = planner.settings_from_config(cfg, gpu)
    model_config = None
    try:
        model_config = architecture.load_model_config(cfg.model.name)
        if estimate is None:
            estimate = memory.estimate_memory(model_config, **settings)
    except (architecture.UnknownModelError, ValueError):
        model_config = None
    target = None
    if estimate is not None and gpu is not None and estimate.total_gb > 0.9 * gpu["total_gb"]:
        target = 0.9 * gpu["total_gb"]  # the estimate itself said it would not fit: aim at the card
    changes = suggest_smaller(settings, model_config=model_config, target_gb=target)
    overrides = overrides_for(changes)
    step = int(getattr(trainer.state, "global_step", 0))

    first_line = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    log(f"CUDA out of memory at step {step}: {first_line}")
    if estimate is not None:
        parts = ", ".join(f"{k} {v:.2f}" for k, v in estimate.breakdown.items() if v > 0)
        log(f"estimate used: {estimate.total_gb:.2f} GB peak ({estimate.peak_phase} phase; {parts})")
    else:
        log(f"estimate used: none (model '{cfg.model.name}' is unknown to the planner)")
    if peak is not None:
        card = f" of {gpu['total_gb']:.1f} GB on {gpu['name']}" if gpu else ""
        log(f"measured peak: {peak:.2f} GB allocated by torch{card}")
    else:
        log("measured peak: unavailable (no CUDA device)")
    log(f"checkpoint: {checkpoint}" if checkpoint else "checkpoint: not saved")
    if overrides:
        config_path = Path(cfg.output_dir) / "config.yaml"
        if not config_path.exists():
            try:
                from unsloth_grpo.config import dump_config

                dump_config(cfg, config_path)
            except OSError as err:
                log(f"could not write {config_path}: {err}")
        log("smaller config: " + " ".join(overrides))
        log(f"retry with: unsloth-grpo train --config {config_path} " + " ".join(overrides))
    else:
        log("smaller config: none left to suggest; use a smaller model or a larger GPU")
    report = {
        "step": step, "error": first_line, "checkpoint": checkpoint,
        "estimate": estimate.to_dict() if estimate is not None else None,
        "measured_peak_gb": peak, "gpu": gpu, "changes": changes, "overrides": overrides,
    }
    if detect().is_main:  # under torchrun every rank reports; one writes
        try:
            Path(cfg.output_dir).mkdir(parents=True, exist_ok=True)
            (Path(cfg.output_dir) / "oom_report.json").write_text(json.dumps(report, indent=2, default=str))
        except OSError as err:
            log(f"could not write oom_report.json: {err}")
    return OOM_EXIT_CODE


def is_oom(exc: BaseException) -> bool:
    """True for ``torch.OutOfMemoryError`` and the CUDA OOM RuntimeErrors older code raises."""
    try:
        import torch

        if isinstance(exc, torch.OutOfMemoryError):
            return True
    except (ImportError, AttributeError):
        pass
    return isinstance(exc, RuntimeError) and "out of memory" in str(exc).lower()


__all__ = ["OOM_EXIT_CODE", "OVERRIDE_KEYS", "SHRINK_STEPS", "handle_oom", "is_oom", "measured_peak_gb",
           "overrides_for", "save_checkpoint", "shrunk_config", "suggest_smaller"]

