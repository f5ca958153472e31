"""Learning per second: plain GRPO against GRPO with dynamic sampling, from the same start and seeds.

    python benchmarks/learning_efficiency.py                            # arith demo, seeds 0 1, all arms
    python benchmarks/learning_efficiency.py --seeds 0 1 2 3 4          # the documented run (docs/dynamic-sampling.md)
    python benchmarks/learning_efficiency.py --arms off refill --eval-every 10 training.max_sampling_rounds=4
    python benchmarks/learning_efficiency.py --steps 40 --seeds 0       # a quick look (no claim)
    python benchmarks/learning_efficiency.py --combine a/results.json b/results.json --out both   # seeds run apart

For each seed the arith recipe's SFT stage is trained once. From that adapter each arm trains the
GRPO stage: ``off`` (plain GRPO, the stage's steps), then ``drop`` and ``refill``
(``training.dynamic_sampling``), each given the same training wall time as ``off`` took for that
seed (they stop when their summed step time reaches it; at most ``--max-step-factor`` times the
steps). Every ``--eval-every`` steps and at the end, the adapter is graded greedily on the same
held-out problems, strict and lenient. Time is the CPU time the process spends in training steps
(generation, scoring, backward and optimizer; evaluation is not counted): with one torch thread it
equals the wall time on an idle machine, and unlike wall time it does not grow when other jobs share
the cores (on a shared 2-core machine the same 200 steps took from 105 to 175 wall seconds). The
wall time of the same steps is recorded beside it. Tokens are the completion tokens generated,
refill rounds included.

It prints, per arm: steps, training seconds, generated tokens, final strict and lenient accuracy
(mean over seeds), the difference from plain GRPO at the same wall time, and the share of plain
GRPO's wall time each arm needed to reach plain GRPO's final accuracy. It writes ``results.json``
and ``efficiency.png`` (accuracy against wall time and against generated tokens) to ``--out``.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from unsloth_grpo.config import DYNAMIC_SAMPLING_MODES, ConfigError  # noqa: E402
from unsloth_grpo.recipes.arith import RECIPE  # noqa: E402
from unsloth_grpo.experiments.controls import check_two_stage  # noqa: E402

COLORS = {"off": "#2a7ab0", "drop": "#d98c2b", "refill": "#3a9a4a"}
LABELS = {"off": "plain GRPO", "drop": "dynamic sampling: drop", "refill": "dynamic sampling: refill"}


def _curve_callback(start, arm_cfg, *, every: int, budget: float | None, max_steps: int):
    """A TrainerCallback that sums step time and generated tokens, grades the held-out set every
    ``every`` steps and at the end, and stops training once ``budget`` training seconds are spent."""
    from transformers import TrainerCallback

    from unsloth_grpo.evaluation.evaluate import evaluate
    from unsloth_grpo.training.held_out import eval_kwargs

    kwargs = eval_kwargs(arm_cfg)
    kwargs.update(samples=1)
    rows_per_generation = arm_cfg.training.per_device_train_batch_size * (arm_cfg.training.steps_per_generation or 1)

    class Curve(TrainerCallback):
        def __init__(self) -> None:
            self.seconds, self.wall, self.tokens, self.points, self.flat = 0.0, 0.0, 0.0, [], []
            self._begin = None

        def grade(self, step: int, model, tokenizer) -> None:
            result = evaluate(model, tokenizer, start.held_out, **kwargs)
            self.points.append({"step": step, "seconds": round(self.seconds, 2), "wall": round(self.wall, 2),
                                "tokens": int(self.tokens), "accuracy": result["accuracy"],
                                "lenient_accuracy": result["lenient_accuracy"]})

        def on_train_begin(self, args, state, control, model=None, processing_class=None, **kw):
            self.grade(0, model, processing_class)

        def on_step_begin(self, args, state, control, **kw):
            self._begin = (time.process_time(), time.perf_counter())

        def on_step_end(self, args, state, control, **kw):
            cpu, wall = self._begin
            self.seconds += time.process_time() - cpu
            self.wall += time.perf_counter() - wall

        def on_log(self, args, state, control, logs=None, model=None, processing_class=None, **kw):
            if not logs or ("loss" not in logs and "reward" not in logs):  # a training step's log
                return control
            if "dynamic_sampling/generated_tokens" in logs:
                self.tokens += logs["dynamic_sampling/generated_tokens"]
            elif "completions/mean_length" in logs:
                self.tokens += logs["completions/mean_length"] * rows_per_generation
            if "frac_reward_zero_std" in logs:
                self.flat.append(logs["frac_reward_zero_std"])
            stop = budget is not None and self.seconds >= budget or state.global_step >= max_steps
            if stop:
                control.should_training_stop = True
            if stop or state.global_step % every == 0:
                self.grade(state.global_step, model, processing_class)
            return control

    return Curve()


def run_seed(cfg, arms: list[str], *, every: int, steps: int, max_step_factor: float, log=print) -> dict:
    """One seed: the SFT start, then each arm from it; their accuracy curves."""
    from unsloth_grpo.experiments.controls import train_sft_start
    from unsloth_grpo.training.train import train

    start = train_sft_start(cfg, log=log)
    log(f"seed {cfg.seed}: SFT start {start.graded['accuracy']:.3f} strict, "
        f"{start.graded['lenient_accuracy']:.3f} lenient ({start.seconds:.0f}s)")
    budget, out = None, {}
    for arm in arms:
        start.reset()
        limit = steps if budget is None else int(steps * max_step_factor)
        arm_cfg = start.sub(start.grpo_cfg, arm, max_steps=limit, dynamic_sampling=arm, logging_steps=1,
                            save_steps=0)
        curve = _curve_callback(start, arm_cfg, every=every, budget=budget, max_steps=limit)
        t0 = time.perf_counter()
        result = train(arm_cfg, loaded=start.loaded, dataset=start.train_rows, callbacks=[curve],
                       log=lambda _m: None)
        out[arm] = {"points": curve.points, "steps": result.global_step, "seconds": round(curve.seconds, 2),
                    "train_wall_seconds": round(curve.wall, 2), "tokens": int(curve.tokens),
                    "wall_seconds": round(time.perf_counter() - t0, 1),
                    "frac_reward_zero_std": statistics.fmean(curve.flat) if curve.flat else None}
        if budget is None:
            budget = curve.seconds  # the first arm (plain GRPO) sets the training time the others get
        last = curve.points[-1]
        log(f"seed {cfg.seed} {arm}: {result.global_step} steps, {curve.seconds:.0f} CPU s training "
            f"({curve.wall:.0f} s wall), "
            f"{curve.tokens:.0f} tokens -> {last['accuracy']:.3f} strict, {last['lenient_accuracy']:.3f} lenient "
            f"(flat groups {out[arm]['frac_reward_zero_std']:.0%})")
    import shutil

    shutil.rmtree(cfg.output_dir, ignore_errors=True)
    return {"seed": cfg.seed, "sft": {k: start.graded[k] for k in ("accuracy", "lenient_accuracy")}, "arms": out}


def reach_share(points: list[dict], target: float, total_seconds: float) -> float | None:
    """Share of ``total_seconds`` at the first evaluation reaching ``target`` accuracy (None: never)."""
    for p in points:
        if p["accuracy"] >= target - 1e-12 and p["step"] > 0:
            return p["seconds"] / total_seconds
    return None


def summarize(runs: list[dict], arms: list[str]) -> dict[str, dict]:
    base = arms[0]
    rows = {}
    for arm in arms:
        finals = [r["arms"][arm]["points"][-1] for r in runs]
        shares = [reach_share(r["arms"][arm]["points"], r["arms"][base]["points"][-1]["accuracy"],
                              r["arms"][base]["seconds"]) for r in runs]
        rows[arm] = {
            "steps": statistics.fmean(r["arms"][arm]["steps"] for r in runs),
            "seconds": statistics.fmean(r["arms"][arm]["seconds"] for r in runs),
            "train_wall_seconds": statistics.fmean(r["arms"][arm].get("train_wall_seconds", 0.0) for r in runs),
            "tokens": statistics.fmean(r["arms"][arm]["tokens"] for r in runs),
            "accuracy": statistics.fmean(p["accuracy"] for p in finals),
            "lenient_accuracy": statistics.fmean(p["lenient_accuracy"] for p in finals),
            "per_seed": [p["accuracy"] for p in finals],
            "delta_vs_plain": [f["accuracy"] - r["arms"][base]["points"][-1]["accuracy"] for f, r in zip(finals, runs)],
            "reach_share": shares,
            "frac_reward_zero_std": statistics.fmean(r["arms"][arm]["frac_reward_zero_std"] or 0.0 for r in runs),
        }
    return rows


def table(rows: dict[str, dict], n_seeds: int, n_problems: int) -> str:
    lines = [f"held-out accuracy after the same training time, {n_problems} problems, greedy, {n_seeds} seed(s); "
             "train s: CPU seconds of the training steps (one thread), wall s: their wall time",
             f"{'':26s} {'steps':>6s} {'train s':>8s} {'wall s':>7s} {'gen tokens':>11s} {'strict':>7s} "
             f"{'lenient':>8s} {'vs plain':>9s} {'flat':>5s}  reached plain's final at"]
    for arm, r in rows.items():
        base = arm == next(iter(rows))
        delta = "" if base else f"{100 * statistics.fmean(r['delta_vs_plain']):+8.1f}"
        reached = [s for s in r["reach_share"] if s is not None]
        share = "" if base else (
            f"{100 * statistics.median(reached) if reached else float('nan'):.0f}% of its time, median "
            f"({len(reached)}/{len(r['reach_share'])} seeds; each: "
            f"{', '.join('never' if s is None else f'{100 * s:.0f}%' for s in r['reach_share'])})")
        lines.append(f"{LABELS[arm]:26s} {r['steps']:6.0f} {r['seconds']:8.0f} {r['train_wall_seconds']:7.0f} "
                     f"{r['tokens']:11.0f} "
                     f"{100 * r['accuracy']:6.1f}% {100 * r['lenient_accuracy']:7.1f}% {delta:>9s} "
                     f"{100 * r['frac_reward_zero_std']:4.0f}%  {share}")
    return "\n".join(lines)


def _mean_curve(runs: list[dict], arm: str, base: str, x: str, key: str, grid: list[float]) -> list[float]:
    """Mean over seeds of ``key`` at each grid point, x measured as a share of plain GRPO's total
    (each seed's curve read at its last evaluation at or before the point)."""
    means = []
    for g in grid:
        vals = []
        for r in runs:
            total = r["arms"][base][x] or 1.0
            pts = [p for p in r["arms"][arm]["points"] if p[x] / total <= g + 1e-9]
            vals.append(pts[-1][key])
        means.append(100 * statistics.fmean(vals))
    return means


def plot(runs: list[dict], arms: list[str], path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    base = arms[0]
    fig, axes = plt.subplots(1, 2, figsize=(10, 4.2), dpi=90, sharey=True)
    for ax, x, name in zip(axes, ("seconds", "tokens"), ("training time (CPU s, one thread)",
                                                        "generated completion tokens")):
        end = max(r["arms"][a][x] / (r["arms"][base][x] or 1.0) for r in runs for a in arms)
        grid = [end * i / 100 for i in range(101)]
        for arm in arms:
            stop = min(r["arms"][arm][x] / (r["arms"][base][x] or 1.0) for r in runs)  # where every seed has data
            xs = [g for g in grid if g < stop - 1e-9] + [stop]
            ax.plot([100 * g for g in xs], _mean_curve(runs, arm, base, x, "accuracy", xs), color=COLORS[arm],
                    label=f"{LABELS[arm]} (strict)", drawstyle="steps-post")
            ax.plot([100 * g for g in xs], _mean_curve(runs, arm, base, x, "lenient_accuracy", xs),
                    color=COLORS[arm], linestyle=":", label=f"{LABELS[arm]} (lenient)", drawstyle="steps-post")
        mean_total = statistics.fmean(r["arms"][base][x] for r in runs)
        ax.set_xlabel(f"{name}, % of plain GRPO's (mean {mean_total:,.0f} {'s' if x == 'seconds' else 'tokens'})",
                      fontsize=8)
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("held-out accuracy (%), mean over seeds", fontsize=8)
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, fontsize=7, loc="lower center", ncol=3)
    fig.suptitle(f"Arith: plain GRPO vs dynamic sampling, same start, {len(runs)} seed(s)", fontsize=10)
    fig.tight_layout(rect=(0, 0.12, 1, 1))
    fig.savefig(path)
    plt.close(fig)
    return path


def report(runs: list[dict], arms: list[str], out: Path, n_problems: int, **info) -> None:
    """Print the table, write results.json and the plot to ``out``."""
    rows = summarize(runs, arms)
    print()
    print(table(rows, len(runs), n_problems))
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps({**info, "arms": arms, "n_problems": n_problems, "summary": rows,
                                                  "runs": runs}, indent=2))
    print(f"wrote {out / 'results.json'} and {plot(runs, arms, out / 'efficiency.png')}")


def combine(paths: list[Path], out: Path) -> int:
    """The seeds of several runs of this benchmark as one table and plot (each run's settings must match)."""
    parts = [json.loads(p.read_text()) for p in paths]
    keys = ("arms", "steps", "eval_every", "config_overrides")
    differ = [k for k in keys if any(part.get(k) != parts[0].get(k) for part in parts)]
    if differ:
        print(f"error: the runs differ in {', '.join(differ)}; combine runs of the same settings", file=sys.stderr)
        return 2
    runs = [r for part in parts for r in part["runs"]]
    seeds = [r["seed"] for r in runs]
    if len(set(seeds)) != len(seeds):
        print(f"error: a seed appears twice ({seeds}); combine runs of different seeds", file=sys.stderr)
        return 2
    report(runs, parts[0]["arms"], out, parts[0].get("n_problems", 500), seeds=seeds,
           **{k: parts[0].get(k) for k in keys if k != "arms"}, combined_from=[str(p) for p in paths],
           wall_seconds=sum(part.get("wall_seconds", 0) for part in parts),
           platforms=sorted({part.get("platform") for part in parts}))
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1], help="Seeds (5 for the documented claim).")
    p.add_argument("--arms", nargs="+", choices=DYNAMIC_SAMPLING_MODES, default=list(DYNAMIC_SAMPLING_MODES),
                   help="training.dynamic_sampling values to compare; the first sets the wall-time budget.")
    p.add_argument("--steps", type=int, help="GRPO steps of the first arm (default: the recipe's GRPO stage).")
    p.add_argument("--eval-every", type=int, default=20, help="Steps between held-out evaluations.")
    p.add_argument("--max-step-factor", type=float, default=3.0,
                   help="The later arms stop at the first arm's wall time, or at this many times its steps.")
    p.add_argument("--config", help="Arith recipe YAML (default: the recipe's built-in settings).")
    p.add_argument("--out", default="outputs/learning-efficiency", help="Where results.json and efficiency.png go.")
    p.add_argument("--combine", nargs="+", metavar="RESULTS_JSON",
                   help="Train nothing: print and plot the seeds of several earlier runs' results.json together "
                        "(same arms, steps and settings).")
    p.add_argument("overrides", nargs="*", metavar="KEY=VALUE", help="Config overrides, as for the recipe.")
    args = p.parse_args(argv)
    out = Path(args.out)
    if args.combine:
        return combine([Path(f) for f in args.combine], out)
    try:
        cfgs = [RECIPE.resolve(config=args.config, output_dir=str(out / f"seed{s}"),
                               overrides=[*args.overrides, f"seed={s}"]) for s in args.seeds]
        for cfg in cfgs:
            check_two_stage(cfg)
            problems = cfg.problems()
            if problems:
                raise ConfigError("; ".join(problems))
        if args.eval_every < 1 or args.max_step_factor < 1:
            raise ConfigError("--eval-every must be >= 1 and --max-step-factor >= 1")
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    steps = args.steps or cfgs[0].stages[1].max_steps
    start = time.time()
    runs = [run_seed(cfg, args.arms, every=args.eval_every, steps=steps, max_step_factor=args.max_step_factor)
            for cfg in cfgs]
    wall = time.time() - start
    n_problems = cfgs[0].evaluation.limit
    report(runs, args.arms, out, n_problems, seeds=args.seeds, steps=steps, eval_every=args.eval_every,
           config_overrides=args.overrides, wall_seconds=round(wall, 1),
           platform=platform.platform())
    print(f"total wall time {wall / 60:.1f} min on {platform.machine()} ({platform.processor() or 'cpu'}), "
          f"python {platform.python_version()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
