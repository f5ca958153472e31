"""``unsloth-grpo plot OUTPUT_DIR``: PNG plots of a run (:mod:`unsloth_grpo.evaluation.plots`)."""

from __future__ import annotations

import sys
from pathlib import Path

from unsloth_grpo.evaluation.plots import METRICS_FILE, PLOT_FILES, plot_run
from unsloth_grpo.runs import output_problem


def add_parser(subparsers) -> None:
    p = subparsers.add_parser("plot", help="Write PNG plots of a run (reward, each reward, std, KL, length).",
                              description="Read OUTPUT_DIR/metrics.jsonl (and health.jsonl) and write PNGs "
                                          "into OUTPUT_DIR/plots.")
    p.add_argument("output_dir", help="The run's output directory (holds metrics.jsonl).")
    p.add_argument("--out", default=None, help="Write the PNGs here instead of OUTPUT_DIR/plots.")
    p.add_argument("--force", action="store_true",
                   help="Replace PNGs an earlier plot left in --out (never files of a run; OUTPUT_DIR/plots, the "
                        "run's own plots, is always redrawn).")
    p.set_defaults(func=run)


def run(args) -> int:
    out = getattr(args, "out", None)
    if out is not None and Path(out).resolve() == (Path(args.output_dir) / "plots").resolve():
        out = None  # the run's own plots, which plot (and the training) draws again each time
    problem = output_problem(out, "--out", writes=PLOT_FILES, force=getattr(args, "force", False)) if out else None
    if problem is not None:
        print(f"error: {problem}", file=sys.stderr)
        return 2
    try:
        paths = plot_run(args.output_dir, out_dir=out)
    except (FileNotFoundError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if not paths:
        print(f"error: no plottable metrics in {Path(args.output_dir) / METRICS_FILE} (no reward, std, KL, "
              "length or eval keys)", file=sys.stderr)
        return 1
    for path in paths:
        print(path)
    return 0
