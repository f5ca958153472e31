"""Where a GRPO step's time goes: generation, reward scoring, the loss's forward and backward, the optimizer.

    python benchmarks/step_time.py                                  # arith GRPO stage + GSM8K smoke, both backends
    python benchmarks/step_time.py --runs arith --backends transformers --steps 30
    python benchmarks/step_time.py --runs smoke training.dynamic_sampling=refill

Each run trains a few GRPO steps with the trainer's methods timed on the instance (nothing in the
trainer changes): ``model.generate`` (TRL's ``_generate_single_turn``), the rest of generation
(chat template, tokenizing, decoding), ``_calculate_rewards``, the rest of scoring (padding,
advantages, the old log-probs forward when TRL needs one), the loss forward (``compute_loss``), the
backward pass (the rest of ``training_step``), and the optimizer step (between transformers'
``on_pre_optimizer_step`` and ``on_optimizer_step``). The first ``--warmup`` steps are left out.
It prints milliseconds per step for each part and its share of the step.

- ``arith``: the arith recipe's GRPO stage (4 prompts x 16 completions of at most 8 tokens, the
  tiny-digits model), started from the untrained adapter: the timing, not the learning, is measured.
- ``smoke``: the GSM8K smoke preset (1 prompt x 8 completions of 12 tokens, the tiny model).

``--shared-prefill off`` generates as TRL does, each row's prompt prefilled on its own
(unsloth_grpo.training.shared_prefill is what training uses by default), to measure the difference.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

PARTS = ("generate", "generate_other", "rewards", "scoring_other", "loss_forward", "backward", "optimizer")
LABELS = {
    "generate": "generation: model.generate",
    "generate_other": "generation: template, tokenize, decode",
    "rewards": "reward scoring",
    "scoring_other": "scoring: padding, advantages, old log-probs",
    "loss_forward": "loss: forward",
    "backward": "loss: backward",
    "optimizer": "optimizer step (clip + AdamW)",
}


class StepTimer:
    """Times the parts of each optimizer step of a built GRPOTrainer (methods wrapped on the instance)."""

    def __init__(self, trainer, *, shared_prefill: bool = True) -> None:
        self.trainer = trainer
        self.shared_prefill = shared_prefill
        self.current: dict[str, float] = defaultdict(float)
        self.steps: list[dict[str, float]] = []
        for name in ("_generate_single_turn", "_generate", "_calculate_rewards", "_generate_and_score_completions",
                     "_prepare_inputs", "compute_loss", "training_step"):
            self._wrap(name)
        trainer.add_callback(self._callback())

    def _wrap(self, name: str) -> None:
        inner = getattr(self.trainer, name)

        def timed(*args, **kwargs):
            t0 = time.perf_counter()
            try:
                return inner(*args, **kwargs)
            finally:
                self.current[name] += time.perf_counter() - t0

        setattr(self.trainer, name, timed)

    def _callback(self):
        from transformers import TrainerCallback

        timer = self

        class Marks(TrainerCallback):
            def on_train_begin(self, args, state, control, **kwargs):
                if getattr(timer.trainer, "shared_prefill", None) is not None:
                    timer.trainer.shared_prefill.enabled = timer.shared_prefill

            def on_step_begin(self, args, state, control, **kwargs):
                timer.current.clear()
                timer.current["_start"] = time.perf_counter()

            def on_pre_optimizer_step(self, args, state, control, **kwargs):
                timer.current["_opt"] = time.perf_counter()

            def on_optimizer_step(self, args, state, control, **kwargs):
                timer.current["optimizer"] += time.perf_counter() - timer.current.pop("_opt")

            def on_step_end(self, args, state, control, **kwargs):
                c = timer.current
                total = time.perf_counter() - c.pop("_start")
                parts = {
                    "generate": c["_generate_single_turn"],
                    "generate_other": c["_generate"] - c["_generate_single_turn"],
                    "rewards": c["_calculate_rewards"],
                    "scoring_other": c["_generate_and_score_completions"] - c["_generate"] - c["_calculate_rewards"],
                    "loss_forward": c["compute_loss"],
                    "backward": c["training_step"] - c["_prepare_inputs"] - c["compute_loss"],
                    "optimizer": c["optimizer"],
                }
                parts["other"] = total - sum(parts.values())
                parts["total"] = total
                timer.steps.append(parts)

        return Marks()

    def summary(self, warmup: int) -> dict[str, float]:
        """Mean seconds per step of each part, the first ``warmup`` steps left out."""
        kept = self.steps[warmup:] or self.steps
        return {k: statistics.fmean(s[k] for s in kept) for k in (*PARTS, "other", "total")}


def config_for(run: str, backend: str, overrides: list[str]):
    """The GRPO config of ``run`` ('arith': the arith recipe's GRPO stage; 'smoke': GSM8K's smoke preset)."""
    if run == "arith":
        from unsloth_grpo.recipes.arith import RECIPE
        from unsloth_grpo.training.stages import stage_config

        cfg = RECIPE.resolve(output_dir="outputs/step-time/arith", overrides=[f"model.backend={backend}", *overrides])
        return stage_config(cfg, 2)
    from unsloth_grpo.recipes.gsm8k import RECIPE

    return RECIPE.resolve(preset="smoke", output_dir="outputs/step-time/smoke",
                          overrides=[f"model.backend={backend}", "run.samples_every=0", *overrides])


def ab_generation(trainer, reps: int) -> dict:
    """``model.generate`` on one training batch, with the shared prefill and without, in turn (same
    seed each call): median milliseconds of each, and whether the completions were the same tokens."""
    import torch

    handle = getattr(trainer, "shared_prefill", None)
    if handle is None or reps < 1:
        return {}
    G = trainer.num_generations
    rows = [trainer.train_dataset[i] for i in range(trainer.args.per_device_train_batch_size // G)]
    prompts = [r["prompt"] for r in rows for _ in range(G)]
    prompt_ids, images, fields = trainer._tokenize_prompts(prompts)
    times, outs = {True: [], False: []}, {}
    trainer.model.train()
    for _ in range(reps):
        for enabled in (True, False):
            handle.enabled = enabled
            torch.manual_seed(1234)
            t0 = time.perf_counter()
            completion_ids, _ = trainer._generate_single_turn(prompt_ids, images, fields, G)
            times[enabled].append(time.perf_counter() - t0)
            outs[enabled] = completion_ids
    handle.enabled = True
    shared, plain = (statistics.median(times[k]) for k in (True, False))
    return {"shared_ms": 1000 * shared, "plain_ms": 1000 * plain, "ratio": shared / plain,
            "pair_ratios": [a / b for a, b in zip(times[True], times[False])],
            "same_tokens": outs[True] == outs[False], "rows": len(prompts)}


def measure(run: str, backend: str, steps: int, warmup: int, overrides: list[str], *, shared_prefill: bool = True,
            ab_reps: int = 0) -> dict:
    import dataclasses
    import shutil

    from unsloth_grpo.training.train import train

    cfg = config_for(run, backend, overrides)
    cfg = dataclasses.replace(cfg, training=cfg.training.updated(max_steps=steps + warmup, save_steps=0,
                                                                 logging_steps=1))
    shutil.rmtree(cfg.output_dir, ignore_errors=True)
    timers = []
    import trl

    original = trl.GRPOTrainer.__init__

    def init(self, *a, **kw):  # the trainer train() builds, timed from its first step
        original(self, *a, **kw)
        timers.append(StepTimer(self, shared_prefill=shared_prefill))

    trl.GRPOTrainer.__init__ = init
    try:
        result = train(cfg, log=lambda _m: None)
    finally:
        trl.GRPOTrainer.__init__ = original
    shutil.rmtree(cfg.output_dir, ignore_errors=True)
    timer = timers[-1]
    ab = ab_generation(timer.trainer, ab_reps)
    lengths = [m["completions/mean_length"] for m in result.metrics if "completions/mean_length" in m]
    return {"run": run, "backend": backend,
            "steps": len(timer.steps), "warmup": warmup, "seconds": timer.summary(warmup),
            "mean_completion_length": statistics.fmean(lengths[warmup:] or lengths),
            "shared_prefill": shared_prefill, "generate_ab": ab,
            "per_step": timer.steps}


def table(results: list[dict]) -> str:
    lines = []
    for r in results:
        s = r["seconds"]
        lines.append(f"{r['run']} ({r['backend']}, shared prefill {'on' if r['shared_prefill'] else 'off'}): "
                     f"{1000 * s['total']:.0f} ms a step over {r['steps'] - r['warmup']} steps "
                     f"(mean completion {r['mean_completion_length']:.1f} tokens)")
        for k in (*PARTS, "other"):
            lines.append(f"  {LABELS.get(k, 'other (callbacks, logging, data)'):46s} {1000 * s[k]:8.1f} ms "
                         f"{100 * s[k] / s['total']:5.1f}%")
        ab = r.get("generate_ab")
        if ab:
            lines.append(f"  model.generate on one batch of {ab['rows']} rows, in turn: shared prefill "
                         f"{ab['shared_ms']:.1f} ms, plain {ab['plain_ms']:.1f} ms (median; shared/plain "
                         f"{ab['ratio']:.2f}), same tokens: {ab['same_tokens']}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", nargs="+", choices=("arith", "smoke"), default=["arith", "smoke"])
    p.add_argument("--backends", nargs="+", choices=("transformers", "unsloth"), default=["transformers", "unsloth"])
    p.add_argument("--steps", type=int, default=20, help="Steps measured per run (after the warm-up).")
    p.add_argument("--warmup", type=int, default=3, help="First steps left out.")
    p.add_argument("--shared-prefill", choices=("on", "off"), default="on",
                   help="off: generate as TRL does, every row's prompt prefilled (to measure what sharing saves).")
    p.add_argument("--ab-reps", type=int, default=10,
                   help="After training, time model.generate on one batch this many times with the shared prefill "
                        "and as many without, in turn (0: skip).")
    p.add_argument("--out", default="outputs/step-time", help="Where results.json goes.")
    p.add_argument("overrides", nargs="*", metavar="KEY=VALUE", help="Config overrides for every run.")
    args = p.parse_args(argv)
    results = []
    for run in args.runs:
        for backend in args.backends:
            if backend == "unsloth":
                try:
                    import unsloth  # noqa: F401
                except ImportError:
                    print("unsloth is not installed: its backend is skipped", file=sys.stderr)
                    continue
            results.append(measure(run, backend, args.steps, args.warmup, args.overrides,
                                   shared_prefill=args.shared_prefill == "on", ab_reps=args.ab_reps))
            print(table(results[-1:]), flush=True)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps({"results": results, "platform": platform.platform(),
                                                   "shared_prefill": args.shared_prefill,
                                                   "overrides": args.overrides}, indent=2))
    print(f"wrote {out / 'results.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
