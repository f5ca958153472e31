"""``unsloth-grpo plot OUTPUT_DIR``: PNG plots of a run (:mod:`unsloth_grpo.evaluation.plots`)."""

from __future__ import annotations

import sys
from pathlib import Path

from unsloth_grpo.evaluation.plots import METRICS_FILE, plot_run


def add_parser(subparsers) -> None:
    p = subparsers.add_parser("plot", help="Write PNG plots of a run (reward, each reward, std, KL, length).",
                              description="Read OUTPUT_DIR/metrics.jsonl (and health.jsonl) and write PNGs "
                                          "into OUTPUT_DIR/plots.")
    p.add_argument("output_dir", help="The run's output directory (holds metrics.jsonl).")
    p.add_argument("--out", default=None, help="Write the PNGs here instead of OUTPUT_DIR/plots.")
    p.set_defaults(func=run)


def run(args) -> int:
    try:
        paths = plot_run(args.output_dir, out_dir=getattr(args, "out", None))
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
