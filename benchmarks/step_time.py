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
- ``real``: the GRPO stage of the gsm8k ``smollm2`` preset on the real SmolLM2-135M-Instruct, started
  from the preset's SFT warm-up (trained once and kept in ``--out``; later runs reuse it), so the
  completions are the ones the preset's GRPO stage really sees. Add ``--profile`` for the tokens
  and FLOPs of each part set against this machine's measured matrix-multiply throughput and memory
  bandwidth (``benchmarks/machine_limits.py``).

``--shared-prefill off`` generates as TRL does, each row's prompt prefilled on its own
(unsloth_grpo.training.shared_prefill is what training uses by default), to measure the difference.
``--sampling multinomial`` draws each token with ``torch.multinomial`` as transformers does, instead of
the one uniform number per row of unsloth_grpo.training.cdf_sampling (the default with the shared prefill).
``--merged-generation off`` generates through LoRA's side products as peft does, instead of each adapted
layer's merged weight (unsloth_grpo.models.merged_generation, the default on a CPU).
``--packing off`` keeps those merged weights (and the LM head) in torch's plain layout instead of oneDNN's
packed one (the default where torch has oneDNN).
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

#: What StepTimer counts per step besides seconds (see StepTimer._count_tokens).
COUNTS = ("gen_calls", "gen_rows", "prompt_tokens", "distinct_prompt_tokens", "new_tokens", "decode_steps",
          "decode_row_tokens",
          "loss_rows", "loss_tokens", "loss_real_tokens", "loss_completion_tokens")
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

    def __init__(self, trainer, *, shared_prefill: bool = True, shared_prompt_loss: bool = True,
                 cdf_sampling: bool = True, merged_generation: bool = True, packing: bool = True,
                 clock=time.perf_counter) -> None:
        self.trainer = trainer
        self.clock = clock
        self.shared_prefill = shared_prefill
        self.shared_prompt_loss = shared_prompt_loss
        self.cdf_sampling = cdf_sampling
        self.merged_generation = merged_generation
        self.packing = packing
        self.current: dict[str, float] = defaultdict(float)
        self.steps: list[dict[str, float]] = []
        for name in ("_generate_single_turn", "_generate", "_calculate_rewards", "_generate_and_score_completions",
                     "_prepare_inputs", "compute_loss", "training_step"):
            self._wrap(name)
        self._count_tokens()
        trainer.add_callback(self._callback())

    def _count_tokens(self) -> None:
        """Add to ``current`` the tokens each part processes: generation's prompt rows and distinct prompts,
        its new tokens and decode steps (the longest completion of a call); the loss's padded rows x length."""
        turn, loss = self.trainer._generate_single_turn, self.trainer.compute_loss
        c = self.current

        def counted_turn(prompt_ids, *args, **kwargs):
            out = turn(prompt_ids, *args, **kwargs)
            completions = out[0]
            c["gen_calls"] += 1
            c["gen_rows"] += len(prompt_ids)
            c["prompt_tokens"] += sum(len(p) for p in prompt_ids)
            c["distinct_prompt_tokens"] += sum(len(p) for p in {tuple(p) for p in prompt_ids})
            c["new_tokens"] += sum(len(x) for x in completions)
            c["decode_steps"] += max((len(x) for x in completions), default=0)
            c["decode_row_tokens"] += len(prompt_ids) * max((len(x) for x in completions), default=0)
            return out

        def counted_loss(model, inputs, *args, **kwargs):
            rows, width = inputs["prompt_ids"].shape[0], inputs["prompt_ids"].shape[1] + inputs["completion_ids"].shape[1]
            c["loss_rows"] += rows
            c["loss_tokens"] += rows * width
            c["loss_real_tokens"] += int(inputs["prompt_mask"].sum() + inputs["completion_mask"].sum())
            c["loss_completion_tokens"] += int(inputs["completion_mask"].sum())
            return loss(model, inputs, *args, **kwargs)

        self.trainer._generate_single_turn = counted_turn
        self.trainer.compute_loss = counted_loss

    def _wrap(self, name: str) -> None:
        inner = getattr(self.trainer, name)

        def timed(*args, **kwargs):
            t0 = self.clock()
            try:
                return inner(*args, **kwargs)
            finally:
                self.current[name] += self.clock() - t0

        setattr(self.trainer, name, timed)

    def _callback(self):
        from transformers import TrainerCallback

        timer = self

        class Marks(TrainerCallback):
            def on_train_begin(self, args, state, control, **kwargs):
                if getattr(timer.trainer, "shared_prefill", None) is not None:
                    timer.trainer.shared_prefill.enabled = timer.shared_prefill
                    timer.trainer.shared_prefill.cdf_sampling = timer.cdf_sampling
                    if not timer.merged_generation:
                        timer.trainer.shared_prefill.merged_weights = None
                    elif not timer.packing and timer.trainer.shared_prefill.merged_weights is not None:
                        timer.trainer.shared_prefill.merged_weights.packed = False
                if getattr(timer.trainer, "shared_prompt_loss", None) is not None:
                    timer.trainer.shared_prompt_loss.enabled = timer.shared_prompt_loss

            def on_step_begin(self, args, state, control, **kwargs):
                timer.current.clear()
                timer.current["_start"] = timer.clock()
                timer.current["_cpu_start"] = time.process_time()

            def on_pre_optimizer_step(self, args, state, control, **kwargs):
                timer.current["_opt"] = timer.clock()

            def on_optimizer_step(self, args, state, control, **kwargs):
                timer.current["optimizer"] += timer.clock() - timer.current.pop("_opt")

            def on_step_end(self, args, state, control, **kwargs):
                c = timer.current
                total = timer.clock() - c.pop("_start")
                cpu = time.process_time() - c.pop("_cpu_start")
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
                parts["cpu"] = cpu
                parts.update({k: c[k] for k in COUNTS})
                timer.steps.append(parts)

        return Marks()

    def summary(self, warmup: int) -> dict[str, float]:
        """Mean seconds per step of each part, the first ``warmup`` steps left out."""
        kept = self.steps[warmup:] or self.steps
        return {k: statistics.fmean(s.get(k, 0.0) for s in kept) for k in (*PARTS, "other", "total", "cpu", *COUNTS)}


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


def warmup_file(backend: str, sft_cfg) -> str:
    """The kept warm-up's file name: the backend, the seed and a digest of the SFT stage's whole configuration
    (output folder and later stages aside), so that an override that changes the warm-up (another system
    prompt, another learning rate) trains its own instead of reusing one made for other settings."""
    from unsloth_grpo.training.stages import stage_digest

    return f"real-warmup-{backend}-seed{sft_cfg.seed}-{stage_digest(sft_cfg)[:12]}.pt"


def real_start(backend: str, overrides: list[str], out: Path, log=print, preset: str = "smollm2"):
    """The gsm8k ``smollm2`` preset's GRPO stage, its model loaded with the preset's SFT warm-up done:
    ``(grpo_cfg, loaded, rows)``. The warm-up's adapter is kept in ``out`` and reused by later runs."""
    import dataclasses

    import torch
    from peft import set_peft_model_state_dict

    from unsloth_grpo.hardware.backend import load_model, prepare_backend
    from unsloth_grpo.recipes.gsm8k import RECIPE
    from unsloth_grpo.training.stages import lora_state, stage_config, train_sft
    from unsloth_grpo.training.train import load_task_dataset

    cfg = RECIPE.resolve(preset=preset, output_dir=str(out / "real"),  # steps only: no held-out grading
                         overrides=[f"model.backend={backend}", "run.samples_every=0", "evaluation.before_after=false",
                                    *overrides])
    sft_stage = cfg.stages[0]
    sft_cfg, grpo_cfg = stage_config(cfg, 1), stage_config(cfg, 2)
    decision = prepare_backend(cfg.model)
    loaded = load_model(cfg.model, cfg.lora, seed=cfg.seed, gradient_checkpointing=cfg.training.gradient_checkpointing,
                        log=lambda _m: None, decision=decision)
    warm = out / warmup_file(backend, sft_cfg)
    if warm.exists():
        set_peft_model_state_dict(loaded.model, torch.load(warm))
    else:
        log(f"training the preset's SFT warm-up once ({sft_stage.max_steps} steps); kept in {warm}")
        train_sft(dataclasses.replace(sft_cfg, output_dir=str(out / "real-sft")), loaded,
                  num_examples=sft_stage.num_examples, log=lambda _m: None)
        warm.parent.mkdir(parents=True, exist_ok=True)
        torch.save(lora_state(loaded.model), warm)
    return grpo_cfg, loaded, load_task_dataset(grpo_cfg)


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
    # the same draws and the same weights on both sides, to compare tokens
    cdf, merged, handle.cdf_sampling, handle.merged_weights = handle.cdf_sampling, handle.merged_weights, False, None
    for _ in range(reps):
        for enabled in (True, False):
            handle.enabled = enabled
            torch.manual_seed(1234)
            t0 = time.perf_counter()
            completion_ids, _ = trainer._generate_single_turn(prompt_ids, images, fields, G)
            times[enabled].append(time.perf_counter() - t0)
            outs[enabled] = completion_ids
    handle.enabled, handle.cdf_sampling, handle.merged_weights = True, cdf, merged
    shared, plain = (statistics.median(times[k]) for k in (True, False))
    return {"shared_ms": 1000 * shared, "plain_ms": 1000 * plain, "ratio": shared / plain,
            "pair_ratios": [a / b for a, b in zip(times[True], times[False])],
            "same_tokens": outs[True] == outs[False], "rows": len(prompts)}


def measure(run: str, backend: str, steps: int, warmup: int, overrides: list[str], *, shared_prefill: bool = True,
            shared_prompt_loss: bool = True, cdf_sampling: bool = True, merged_generation: bool = True, packing: bool = True, ab_reps: int = 0, out: str = "outputs/step-time",
            clock: str = "wall", real_preset: str = "smollm2") -> dict:
    import dataclasses
    import shutil

    from unsloth_grpo.training.train import train

    loaded = rows = None
    if run == "real":
        cfg, loaded, rows = real_start(backend, overrides, Path(out), preset=real_preset)
    else:
        cfg = config_for(run, backend, overrides)
    cfg = dataclasses.replace(cfg, training=cfg.training.updated(max_steps=steps + warmup, save_steps=0,
                                                                 logging_steps=1))
    shutil.rmtree(cfg.output_dir, ignore_errors=True)
    timers = []
    import trl

    original = trl.GRPOTrainer.__init__

    def init(self, *a, **kw):  # the trainer train() builds, timed from its first step
        original(self, *a, **kw)
        timers.append(StepTimer(self, shared_prefill=shared_prefill, shared_prompt_loss=shared_prompt_loss,
                                cdf_sampling=cdf_sampling, merged_generation=merged_generation, packing=packing,
                                clock=time.process_time if clock == "cpu" else time.perf_counter))

    trl.GRPOTrainer.__init__ = init
    try:
        result = train(cfg, log=lambda _m: None, loaded=loaded, dataset=rows)
    finally:
        trl.GRPOTrainer.__init__ = original
    shutil.rmtree(cfg.output_dir, ignore_errors=True)
    timer = timers[-1]
    ab = ab_generation(timer.trainer, ab_reps)
    lengths = [m["completions/mean_length"] for m in result.metrics if "completions/mean_length" in m]
    rewards = [m["reward"] for m in result.metrics if "reward" in m]
    return {"run": run if run != "real" else f"real ({real_preset})", "backend": backend,
            "steps": len(timer.steps), "warmup": warmup, "seconds": timer.summary(warmup),
            "mean_completion_length": statistics.fmean(lengths[warmup:] or lengths),
            "shared_prefill": shared_prefill, "shared_prompt_loss": shared_prompt_loss, "clock": clock,
            "cdf_sampling": cdf_sampling and shared_prefill,  # the draw rides on the shared prefill's call
            "merged_generation": merged_generation and shared_prefill
            and getattr(getattr(timer.trainer, "shared_prefill", None), "merged_weights", None) is not None,
            "packed": bool(getattr(getattr(getattr(timer.trainer, "shared_prefill", None), "merged_weights", None),
                                   "packed", False)) and merged_generation and shared_prefill,
            "shared_prompt_loss_served": getattr(getattr(timer.trainer, "shared_prompt_loss", None), "served", None),
            "generate_ab": ab, "model": model_info(timer.trainer.model),
            "reward_first_last": [statistics.fmean(rewards[:5]), statistics.fmean(rewards[-5:])] if rewards else None,
            "per_step": timer.steps}


def model_info(model) -> dict:
    """The frozen matrix-multiply weights of ``model`` (every ``nn.Linear`` that is not trained: the layers
    and the LM head, not LoRA's matrices): their parameters (a token's forward costs twice that in FLOPs),
    the LM head's share of them (applied only where logits are needed) and their bytes (what a decode step
    reads), and the trained parameters."""
    import torch

    frozen = [m.weight for m in model.modules() if isinstance(m, torch.nn.Linear) and not m.weight.requires_grad]
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    return {"matmul_params": sum(w.numel() for w in frozen),
            "head_params": head.weight.numel() if head is not None else 0,
            "matmul_bytes": sum(w.numel() * w.element_size() for w in frozen),
            "trained_params": sum(p.numel() for p in model.parameters() if p.requires_grad)}


def profile(r: dict, limits: dict) -> str:
    """Tokens and FLOPs of each part of ``r``'s mean step against ``limits`` (benchmarks/machine_limits.py).
    FLOPs count the frozen matrix multiplies of the plain computation (TRL's: every row's prompt in the loss)
    only: 2 per weight per token, the LM head only where logits are taken; a LoRA backward computes the
    input's gradient through them, about as many again. Attention's scores and LoRA's own products are left
    out. With the shared prompt in the loss the same work takes less time: a higher GFLOP/s."""
    s, m = r["seconds"], r["model"]
    peak = limits["matmul_gflops"]["square 2048"]
    bw = limits["memory_gbps"]["read"]
    body, head = 2 * (m["matmul_params"] - m.get("head_params", 0)), 2 * m.get("head_params", 0)
    prefill = s["distinct_prompt_tokens"] if r["shared_prefill"] else s["prompt_tokens"]
    logits = s["loss_completion_tokens"] + s["loss_rows"]  # the loss's logits: each row's completion, and one more
    rows = [
        ("generation (prefill + decode)", s["generate"], prefill + s["decode_row_tokens"],
         f"{s['gen_calls']:.1f} calls, {s['gen_rows']:.0f} rows, {prefill:.0f} prompt tokens prefilled, "
         f"{s['decode_steps']:.0f} decode steps x rows = {s['decode_row_tokens']:.0f} tokens; weights read "
         f"per decode step {m['matmul_bytes'] / 1e9:.2f} GB: at {bw:.0f} GB/s at least "
         f"{1000 * s['decode_steps'] * m['matmul_bytes'] / 1e9 / bw:.0f} ms"),
        ("loss: forward", s["loss_forward"], s["loss_tokens"],
         f"{s['loss_rows']:.0f} rows, {s['loss_tokens']:.0f} tokens padded ({s['loss_real_tokens']:.0f} real, "
         f"{s['loss_completion_tokens']:.0f} of them completion tokens)"),
        ("loss: backward", s["backward"], s["loss_tokens"], "input gradients through the frozen weights"),
    ]
    lines = [f"  against this machine ({limits['threads']} thread(s)): matmul {peak:.0f} GFLOP/s (square 2048), "
             f"memory read {bw:.0f} GB/s; {m['matmul_params'] / 1e6:.0f}M frozen matmul weights, "
             f"{m['trained_params'] / 1e6:.1f}M trained",
             f"  {'part':32s} {'ms':>8s} {'tokens':>8s} {'GFLOP':>8s} {'GFLOP/s':>8s} {'of peak':>8s}  what"]
    for name, sec, tokens, what in rows:
        # a prefill needs only its last token's logits; a decoded token and a loss position need theirs
        gflop = (body * tokens + head * (s["decode_row_tokens"] + s["gen_calls"] if name.startswith("generation")
                                         else logits)) / 1e9
        rate = gflop / sec if sec else float("nan")
        lines.append(f"  {name:32s} {1000 * sec:8.0f} {tokens:8.0f} {gflop:8.1f} {rate:8.1f} {100 * rate / peak:7.0f}%  {what}")
    return "\n".join(lines)


def table(results: list[dict], limits: dict | None = None) -> str:
    lines = []
    for r in results:
        s = r["seconds"]
        lines.append(f"{r['run']} ({r['backend']}, {r.get('clock', 'wall')} clock, shared prefill {'on' if r['shared_prefill'] else 'off'}, "
                     f"shared prompt in the loss {'on' if r.get('shared_prompt_loss', False) else 'off'}, "
                     f"sampling {'cdf' if r.get('cdf_sampling', False) else 'multinomial'}, "
                     f"merged generation {'on' if r.get('merged_generation', False) else 'off'}"
                     f"{', packed' if r.get('packed', False) else ''}): "
                     f"{1000 * s['total']:.0f} ms a step ({1000 * s['cpu']:.0f} ms of CPU time) over "
                     f"{r['steps'] - r['warmup']} steps "
                     f"(mean completion {r['mean_completion_length']:.1f} tokens)")
        for k in (*PARTS, "other"):
            lines.append(f"  {LABELS.get(k, 'other (callbacks, logging, data)'):46s} {1000 * s[k]:8.1f} ms "
                         f"{100 * s[k] / s['total']:5.1f}%")
        ab = r.get("generate_ab")
        if ab:
            lines.append(f"  model.generate on one batch of {ab['rows']} rows, in turn: shared prefill "
                         f"{ab['shared_ms']:.1f} ms, plain {ab['plain_ms']:.1f} ms (median; shared/plain "
                         f"{ab['ratio']:.2f}), same tokens: {ab['same_tokens']}")
        if limits is not None:
            lines.append(profile(r, limits))
        if r.get("reward_first_last"):
            first, last = r["reward_first_last"]
            lines.append(f"  reward: first 5 steps {first:.3f}, last 5 {last:.3f}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", nargs="+", choices=("arith", "smoke", "real"), default=["arith", "smoke"])
    p.add_argument("--backends", nargs="+", choices=("transformers", "unsloth"), default=["transformers", "unsloth"])
    p.add_argument("--real-preset", choices=("smollm2", "gemma3"), default="smollm2",
                   help="The gsm8k preset the real run's GRPO stage comes from (gemma3: builtin:gemma3-270m).")
    p.add_argument("--steps", type=int, default=20, help="Steps measured per run (after the warm-up).")
    p.add_argument("--warmup", type=int, default=3, help="First steps left out.")
    p.add_argument("--shared-prefill", choices=("on", "off"), default="on",
                   help="off: generate as TRL does, every row's prompt prefilled (to measure what sharing saves).")
    p.add_argument("--shared-prompt-loss", choices=("on", "off"), default="on",
                   help="off: the loss runs every row's prompt, as TRL does (to measure what sharing it saves).")
    p.add_argument("--sampling", choices=("cdf", "multinomial"), default="cdf",
                   help="multinomial: draw tokens as transformers does (to measure what one uniform a row saves).")
    p.add_argument("--merged-generation", choices=("on", "off"), default="on",
                   help="off: generate through LoRA's side products, as peft does (to measure what merged weights save).")
    p.add_argument("--packing", choices=("on", "off"), default="on",
                   help="off: keep the merged weights and the LM head in the plain layout, not oneDNN's packed one "
                        "(to measure what packing saves).")
    p.add_argument("--ab-reps", type=int, default=10,
                   help="After training, time model.generate on one batch this many times with the shared prefill "
                        "and as many without, in turn (0: skip).")
    p.add_argument("--profile", action="store_true",
                   help="Measure this machine's matmul throughput and memory bandwidth first, and set each part's "
                        "tokens and FLOPs against them.")
    p.add_argument("--clock", choices=("wall", "cpu"), default="wall",
                   help="cpu: time every part in this process's CPU time (with OMP_NUM_THREADS=1, what a step costs "
                        "whatever else runs on the machine); wall: seconds as they pass.")
    p.add_argument("--out", default="outputs/step-time", help="Where results.json goes.")
    p.add_argument("overrides", nargs="*", metavar="KEY=VALUE", help="Config overrides for every run.")
    args = p.parse_args(argv)
    results = []
    limits = None
    if args.profile:
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        import machine_limits

        limits = machine_limits.measure()
    for run in args.runs:
        for backend in args.backends:
            if backend == "unsloth":
                try:
                    import unsloth  # noqa: F401
                except ImportError:
                    print("unsloth is not installed: its backend is skipped", file=sys.stderr)
                    continue
            results.append(measure(run, backend, args.steps, args.warmup, args.overrides,
                                   shared_prefill=args.shared_prefill == "on",
                                   shared_prompt_loss=args.shared_prompt_loss == "on",
                                   cdf_sampling=args.sampling == "cdf",
                                   merged_generation=args.merged_generation == "on",
                                   packing=args.packing == "on",
                                   ab_reps=args.ab_reps,
                                   clock=args.clock,
                                   real_preset=args.real_preset,
                                   out=args.out))
            print(table(results[-1:], limits), flush=True)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps({"results": results, "platform": platform.platform(), "limits": limits,
                                                   "shared_prefill": args.shared_prefill,
                                                   "overrides": args.overrides}, indent=2))
    print(f"wrote {out / 'results.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
