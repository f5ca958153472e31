"""Accuracy demo: does GRPO raise held-out accuracy, and is it the reward that does it?

    python benchmarks/accuracy_demo.py                        # 3 seeds, the arith recipe's settings
    python benchmarks/accuracy_demo.py --seeds 0 1 2 3 --out outputs/accuracy-demo
    python benchmarks/accuracy_demo.py --config recipes/arith.yaml training.learning_rate=5e-4
    python benchmarks/accuracy_demo.py --arms grpo            # GRPO against its SFT start only (the slow test)

For each seed the arith recipe's SFT stage is trained once; from that same adapter three arms
are trained (GRPO with the correctness reward; as many extra SFT steps instead; GRPO with the
gold answers shuffled across prompts) and each is graded greedily on the same 500 held-out
problems with the task's own grader (the function its reward calls). It prints one row per arm:
mean strict accuracy over the seeds, the spread (min..max and standard deviation), the pooled 95%
Wilson interval, the change from the SFT start, the mean lenient accuracy (the right sum anywhere
in the completion, not only in the answer block) and the wall time, then writes ``results.json``
and ``accuracy.png`` to ``--out``. See docs/accuracy_demo.md.
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

from unsloth_grpo.config import ConfigError  # noqa: E402
from unsloth_grpo.recipes.arith import RECIPE  # noqa: E402
from unsloth_grpo.training.controls import ARMS, check_two_stage, run_controls, wilson_interval  # noqa: E402

LABELS = {"sft": "after SFT (start)", "grpo": "after GRPO", "extra_sft": "after extra SFT (control)",
          "shuffled_grpo": "after shuffled-gold GRPO (control)"}


def summarize(runs: list[dict]) -> dict[str, dict]:
    """Per arm: mean, min, max and standard deviation of accuracy over seeds, pooled interval, wall time."""
    rows = {}
    for arm in ("sft", *ARMS):
        if not all(arm in r["accuracy"] for r in runs):
            continue
        accs = [r["accuracy"][arm] for r in runs]
        correct = sum(r["evals"][arm]["correct"] for r in runs)
        n = sum(r["evals"][arm]["n"] for r in runs)
        rows[arm] = {
            "mean": statistics.fmean(accs), "min": min(accs), "max": max(accs),
            "stdev": statistics.stdev(accs) if len(accs) > 1 else 0.0,
            "ci95_pooled": list(wilson_interval(correct, n)), "per_seed": accs,
            "delta_vs_sft": [r["accuracy"][arm] - r["accuracy"]["sft"] for r in runs],
            "seconds_mean": statistics.fmean(r["seconds"][arm] for r in runs),
        }
        lenient = [r.get("lenient_accuracy", {}).get(arm) for r in runs]
        if None not in lenient:
            rows[arm]["lenient_mean"] = statistics.fmean(lenient)
            rows[arm]["lenient_per_seed"] = lenient
    return rows


def table(rows: dict[str, dict], n_seeds: int, n_problems: int) -> str:
    lines = [f"held-out accuracy, {n_problems} problems, greedy, {n_seeds} seeds "
             "(strict: the sum in the answer block; lenient: the sum as the last number anywhere)",
             f"{'':38s} {'strict':>6s} {'min..max':>13s} {'sd':>5s} {'pooled 95% CI':>14s} "
             f"{'vs SFT':>7s} {'lenient':>7s} {'wall s':>7s}"]
    for arm, r in rows.items():
        delta = "" if arm == "sft" else f"{100 * statistics.fmean(r['delta_vs_sft']):+6.1f}"
        lenient = f"{100 * r['lenient_mean']:6.1f}%" if "lenient_mean" in r else ""
        lines.append(f"{LABELS[arm]:38s} {100 * r['mean']:5.1f}% {100 * r['min']:5.1f}..{100 * r['max']:5.1f}% "
                     f"{100 * r['stdev']:5.1f} {100 * r['ci95_pooled'][0]:6.1f}..{100 * r['ci95_pooled'][1]:5.1f}% "
                     f"{delta:>7s} {lenient:>7s} {r['seconds_mean']:7.0f}")
    return "\n".join(lines)


def plot(rows: dict[str, dict], path: Path) -> Path:
    """Bars: mean accuracy per arm, the per-seed values as dots."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    arms = list(rows)
    fig, ax = plt.subplots(figsize=(6.4, 3.4), dpi=90)
    means = [100 * rows[a]["mean"] for a in arms]
    colors = {"sft": "#999999", "grpo": "#2a7ab0", "extra_sft": "#d98c2b", "shuffled_grpo": "#b04a4a"}
    ax.bar(range(len(arms)), means, color=[colors[a] for a in arms], alpha=0.8)
    for i, a in enumerate(arms):
        ax.scatter([i] * len(rows[a]["per_seed"]), [100 * v for v in rows[a]["per_seed"]], color="black", s=12,
                   zorder=3)
    ax.set_xticks(range(len(arms)), [LABELS[a].replace(" (", "\n(").replace("after ", "") for a in arms],
                  fontsize=8)
    ax.set_ylabel("held-out accuracy (%)", fontsize=9)
    ax.set_title("Arith: GRPO vs its controls (bars: mean; dots: seeds)", fontsize=10)
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2], help="Seeds to run (at least 3 for the claim).")
    p.add_argument("--config", help="Arith recipe YAML (default: the recipe's built-in settings).")
    p.add_argument("--out", default="outputs/accuracy-demo", help="Where results.json and accuracy.png go.")
    p.add_argument("--arms", nargs="+", choices=ARMS, default=list(ARMS),
                   help="Arms trained from each SFT start (default: all three; the SFT start is always graded).")
    p.add_argument("overrides", nargs="*", metavar="KEY=VALUE", help="Config overrides, as for the recipe.")
    args = p.parse_args(argv)
    out = Path(args.out)
    try:
        cfgs = [RECIPE.resolve(config=args.config, output_dir=str(out / f"seed{s}"),
                               overrides=[*args.overrides, f"seed={s}"]) for s in args.seeds]
        for cfg in cfgs:
            check_two_stage(cfg)
            problems = cfg.problems()
            if problems:
                raise ConfigError("; ".join(problems))
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    start = time.time()
    runs = [run_controls(cfg, arms=tuple(args.arms)) for cfg in cfgs]
    wall = time.time() - start
    rows = summarize(runs)
    n_problems = runs[0]["evals"]["sft"]["n"]
    print()
    print(table(rows, len(runs), n_problems))
    print(f"total wall time {wall / 60:.1f} min on {platform.machine()} ({platform.processor() or 'cpu'}), "
          f"python {platform.python_version()}")
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps({
        "seeds": args.seeds, "summary": rows, "runs": runs, "wall_seconds": round(wall, 1),
        "platform": platform.platform(), "config_overrides": args.overrides, "arms": args.arms,
    }, indent=2))
    print(f"wrote {out / 'results.json'} and {plot(rows, out / 'accuracy.png')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
