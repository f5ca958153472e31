"""GRPO training: config -> data -> model -> rewards -> TRL's GRPOTrainer -> outputs.

Everything that can be checked without a model (config, rewards, dataset) is checked first,
so a typo costs seconds, not a model load. Outputs land in ``cfg.output_dir``:

- the LoRA adapter with its tokenizer (``adapter_config.json``, ``adapter_model.safetensors``, ...),
- ``metrics.jsonl``: one JSON object per logged step, with TRL's keys plus ``step``,
- ``config.yaml``: the resolved config, loadable with ``--config``,
- ``run_info.json``: backend, device, dtype, package versions, dataset size.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from unsloth_grpo.config import RecipeConfig, check, dump_config

#: GRPOConfig fields this module sets itself; ``training.extra`` may not override them silently.
_MANAGED = {
    "output_dir", "max_steps", "learning_rate", "lr_scheduler_type", "warmup_steps", "weight_decay",
    "max_grad_norm", "optim", "num_generations", "per_device_train_batch_size",
    "gradient_accumulation_steps", "max_completion_length", "temperature", "top_p", "beta",
    "loss_type", "scale_rewards", "logging_steps", "save_steps", "save_total_limit", "seed",
    "bf16", "fp16", "use_cpu", "report_to", "reward_weights", "gradient_checkpointing",
}


@dataclass
class TrainResult:
    output_dir: Path
    metrics: list[dict] = field(default_factory=list)
    backend: dict = field(default_factory=dict)
    seconds: float = 0.0
    global_step: int = 0

    def mean_reward(self, first: int | None = None, last: int | None = None) -> float:
        rows = [m["reward"] for m in self.metrics if "reward" in m]
        if first is not None:
            rows = rows[:first]
        if last is not None:
            rows = rows[-last:]
        return sum(rows) / len(rows) if rows else float("nan")


def load_task_dataset(cfg: RecipeConfig):
    """The training rows for ``cfg.task``; raises DataError before any model is loaded."""
    import importlib

    try:
        task = importlib.import_module(f"unsloth_grpo.tasks.{cfg.task}")
    except ModuleNotFoundError:
        from unsloth_grpo.tasks import available_tasks

        raise ValueError(f"task='{cfg.task}' is unknown; available: {', '.join(available_tasks())}") from None
    return task.load_dataset_for(cfg)


def build_grpo_args(cfg: RecipeConfig, info, *, n_reward_funcs: int, weights: list[float]):
    """Map the recipe config onto TRL's GRPOConfig for the chosen device and backend."""
    from trl import GRPOConfig

    t = cfg.training
    cpu = info.device == "cpu"
    optim = t.optim
    if cpu and "8bit" in optim:
        optim = "adamw_torch"  # bitsandbytes' 8-bit optimizers need CUDA
    kwargs: dict[str, Any] = dict(
        output_dir=cfg.output_dir,
        max_steps=t.max_steps,
        learning_rate=t.learning_rate,
        lr_scheduler_type=t.lr_scheduler_type,
        # transformers 5 folds the ratio into warmup_steps (a float in [0, 1) is a share of steps)
        warmup_steps=float(t.warmup_ratio) if t.warmup_ratio else 0,
        weight_decay=t.weight_decay,
        max_grad_norm=t.max_grad_norm,
        optim=optim,
        num_generations=t.num_generations,
        per_device_train_batch_size=t.per_device_train_batch_size,
        gradient_accumulation_steps=t.gradient_accumulation_steps,
        max_completion_length=t.max_completion_length,
        temperature=t.temperature,
        top_p=t.top_p,
        beta=t.beta,
        loss_type=t.loss_type,
        scale_rewards=t.scale_rewards,
        logging_steps=t.logging_steps,
        save_strategy="steps" if t.save_steps > 0 else "no",
        save_steps=t.save_steps if t.save_steps > 0 else 500,
        save_total_limit=t.save_total_limit,
        seed=cfg.seed,
        data_seed=cfg.seed,
        bf16=info.dtype == "bf16",
        fp16=info.dtype == "fp16",
        use_cpu=cpu,
        report_to=list(t.report_to) or "none",
        reward_weights=weights,
        # Unsloth does its own (offloaded) checkpointing inside the model; TRL's would repeat it.
        gradient_checkpointing=t.gradient_checkpointing and info.backend == "transformers" and not cpu,
        disable_tqdm=True,
    )
    if t.steps_per_generation:
        kwargs["steps_per_generation"] = t.steps_per_generation
    if info.use_vllm and info.backend == "transformers":
        kwargs.update(use_vllm=True, vllm_mode="colocate",
                      vllm_gpu_memory_utilization=cfg.model.gpu_memory_utilization)
    valid = set(GRPOConfig.__dataclass_fields__)
    for key, value in t.extra.items():
        if key in _MANAGED:
            raise ValueError(f"training.extra.{key}: set it as training.{key} (or the config field that owns it) instead")
        if key not in valid:
            import difflib

            close = difflib.get_close_matches(key, sorted(valid), n=1)
            raise ValueError(f"training.extra.{key} is not a GRPOConfig field of the installed TRL"
                             + (f"; did you mean '{close[0]}'?" if close else ""))
        kwargs[key] = value
    return GRPOConfig(**kwargs)


def _metrics_callback(path: Path):
    from transformers import TrainerCallback

    class MetricsJsonl(TrainerCallback):
        """Append each logged training step to ``metrics.jsonl`` (rank 0 only)."""

        def on_log(self, args, state, control, logs=None, **kwargs):
            if not state.is_world_process_zero or not logs or "reward" not in logs:
                return
            row = {"step": state.global_step, **{k: v for k, v in logs.items() if _jsonable(v)}}
            with path.open("a") as fh:
                fh.write(json.dumps(row) + "\n")

    return MetricsJsonl()


def _jsonable(v: Any) -> bool:
    return isinstance(v, (int, float, str, bool)) and not (isinstance(v, float) and not math.isfinite(v))


def package_versions() -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    out = {}
    for name in ("unsloth-grpo", "torch", "transformers", "trl", "peft", "datasets", "accelerate",
                 "unsloth", "unsloth_zoo", "bitsandbytes", "vllm"):
        try:
            out[name] = version(name)
        except PackageNotFoundError:
            pass
    return out


def train(cfg: RecipeConfig, *, callbacks: list | None = None, log: Callable[[str], None] = print,
          dataset=None) -> TrainResult:
    """Run one GRPO training job described by ``cfg`` and return its metrics and outputs."""
    from unsloth_grpo.backend import select_backend

    check(cfg)  # every config problem at once, before anything heavy
    from unsloth_grpo.rewards import build_reward_functions

    reward_funcs, weights = build_reward_functions(cfg.rewards)
    if dataset is None:
        dataset = load_task_dataset(cfg)  # malformed data fails here, before the model
    select_backend(cfg.model.backend)  # imports unsloth first when it is the one chosen

    out = Path(cfg.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    dump_config(cfg, out / "config.yaml")
    metrics_path = out / "metrics.jsonl"
    if metrics_path.exists():
        metrics_path.unlink()

    from unsloth_grpo.backend import load_model
    from unsloth_grpo.data import filter_long_prompts

    start = time.time()
    loaded = load_model(cfg.model, cfg.lora, seed=cfg.seed,
                        gradient_checkpointing=cfg.training.gradient_checkpointing, log=log)
    dataset = filter_long_prompts(dataset, loaded.tokenizer, cfg.data.max_prompt_tokens, log=log)
    args = build_grpo_args(cfg, loaded.info, n_reward_funcs=len(reward_funcs), weights=weights)
    (out / "run_info.json").write_text(json.dumps({
        "backend": loaded.info.to_dict(), "versions": package_versions(), "seed": cfg.seed,
        "dataset": {"source": cfg.data.source, "rows": len(dataset)},
    }, indent=2))

    from trl import GRPOTrainer

    trainer = GRPOTrainer(
        model=loaded.model,
        processing_class=loaded.tokenizer,
        reward_funcs=reward_funcs,
        args=args,
        train_dataset=dataset,
        callbacks=[_metrics_callback(metrics_path), *(callbacks or [])],
    )
    log(f"training: {len(dataset)} prompts, {cfg.training.max_steps} steps, "
        f"{cfg.training.num_generations} generations per prompt -> {out}")
    trainer.train()
    trainer.save_model(str(out))
    loaded.tokenizer.save_pretrained(str(out))
    metrics = [json.loads(line) for line in metrics_path.read_text().splitlines()] if metrics_path.exists() else []
    return TrainResult(out, metrics, loaded.info.to_dict(), time.time() - start, trainer.state.global_step)
