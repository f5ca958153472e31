"""PNG plots of a run from ``metrics.jsonl``, with the health warnings marked on the step axis.

``plot_run("outputs/run")`` writes ``outputs/run/plots/*.png`` and returns their paths; the
``unsloth-grpo plot OUTPUT_DIR`` subcommand does the same. Example::

    from unsloth_grpo.evaluation.plots import plot_run
    for path in plot_run("outputs/gsm8k"):
        print(path)
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

METRICS_FILE = "metrics.jsonl"

#: (file stem, title, y-axis label, metric keys) for the single-series plots.
_SINGLE = [
    ("reward", "Total reward (weighted sum)", "reward", ["reward"]),
    ("reward_std", "Reward std within groups", "std", ["reward_std"]),
    ("kl", "KL to the reference model", "kl", ["kl"]),
    ("completion_length", "Completion length", "tokens", ["completions/mean_length"]),
]
#: Every file :func:`plot_run` may write: a PNG per single-series plot, each reward's mean, the held-out evaluation,
#: the curriculum's level of each dataset.
PLOT_FILES = tuple(f"{stem}.png" for stem in [*(row[0] for row in _SINGLE), "rewards", "eval", "curriculum"])


def read_metrics(output_dir: str | Path) -> list[dict[str, Any]]:
    """Rows of ``OUTPUT_DIR/metrics.jsonl``; a missing file is an error that says what writes it."""
    path = Path(output_dir) / METRICS_FILE
    if not path.exists():
        raise FileNotFoundError(
            f"{path} does not exist: plot needs the metrics.jsonl that a training run writes into its "
            "output_dir (pass the run's output directory)"
        )
    rows = []
    for n, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError as exc:
            raise ValueError(f"{path} line {n} is not JSON ({exc}); was the run interrupted mid-write? "
                             "Delete that line and plot again") from exc
    return rows


def _series(rows: list[dict[str, Any]], key: str) -> tuple[list[float], list[float]]:
    xs, ys = [], []
    for i, row in enumerate(rows):
        v = row.get(key)
        if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v):
            xs.append(row.get("step", i + 1))
            ys.append(float(v))
    return xs, ys


def _rolling_mean(ys: list[float], window: int) -> list[float]:
    """Trailing mean over ``window`` points (fewer at the start)."""
    out, total = [], 0.0
    for i, y in enumerate(ys):
        total += y
        if i >= window:
            total -= ys[i - window]
        out.append(total / min(i + 1, window))
    return out


def _plot_series(ax, xs, ys, label, *, marker=None) -> None:
    """Raw values thin; for noisy per-step series a trailing mean on top, in the same colour."""
    window = max(2, len(ys) // 15)
    if len(ys) < 10 or marker:
        ax.plot(xs, ys, linewidth=1.2, label=label, marker=marker, markersize=3)
        return
    (raw,) = ax.plot(xs, ys, linewidth=0.8, alpha=0.35)
    ax.plot(xs, _rolling_mean(ys, window), linewidth=1.6, color=raw.get_color(),
            label=f"{label} (mean of {window})")


def _mark_warnings(ax, warnings: list[dict[str, Any]]) -> None:
    for w in warnings:
        ax.axvline(w["step"], color="tab:red", linestyle="--", linewidth=1, alpha=0.8)
        ax.annotate(w["name"], xy=(w["step"], 1.0), xycoords=("data", "axes fraction"),
                    xytext=(2, -2), textcoords="offset points", rotation=90, va="top",
                    fontsize=7, color="tab:red")


def _figure(title: str, ylabel: str):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.2), dpi=80)
    ax.set_title(title, fontsize=10)
    ax.set_xlabel("step", fontsize=9)
    ax.set_ylabel(ylabel, fontsize=9)
    ax.tick_params(labelsize=8)
    ax.grid(alpha=0.3)
    return fig, ax


def _save(fig, path: Path) -> Path:
    import matplotlib.pyplot as plt

    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path


def build_figures(rows: list[dict[str, Any]], warnings: list[dict[str, Any]]) -> list[tuple[str, Any]]:
    """``(file stem, matplotlib figure)`` for every plot whose metric was logged."""
    figures = []
    keys = {k for row in rows for k in row}
    for stem, title, ylabel, series in _SINGLE:
        data = [(k, *_series(rows, k)) for k in series]
        if not any(xs for _, xs, _ in data):
            continue
        fig, ax = _figure(title, ylabel)
        for key, xs, ys in data:
            _plot_series(ax, xs, ys, key)
        if len(data[0][1]) >= 10:
            ax.legend(fontsize=7, loc="best")
        _mark_warnings(ax, warnings)
        figures.append((stem, fig))

    groups = [("rewards", "Each reward's mean", "score",
               sorted(k for k in keys if k.startswith("rewards/") and k.endswith("/mean"))),
              ("eval", "Held-out evaluation", "value",
               sorted(k for k in keys if k.startswith("eval/") and not k.endswith("_chars")
                      and not k.endswith("_tokens"))),
              ("curriculum", "Curriculum level of each dataset", "level",
               sorted(k for k in keys if k.startswith("curriculum/") and k.endswith("/level")))]
    for stem, title, ylabel, series in groups:
        data = [(k, *_series(rows, k)) for k in series]
        data = [d for d in data if d[1]]
        if not data:
            continue
        fig, ax = _figure(title, ylabel)
        for key, xs, ys in data:
            label = key.split("/")[1] if stem != "eval" else key[len("eval/"):]
            _plot_series(ax, xs, ys, label, marker="o" if stem == "eval" else None)
        if stem == "eval":  # accuracy, compliance, pass@k and ratios are shares
            ax.set_ylim(-0.02, 1.02)
        ax.legend(fontsize=7, loc="best")
        _mark_warnings(ax, warnings)
        figures.append((stem, fig))
    return figures


def plot_run(output_dir: str | Path, *, out_dir: str | Path | None = None) -> list[Path]:
    """Write the plots of a run into ``OUTPUT_DIR/plots`` (or ``out_dir``); returns the PNG paths.

    Plots: total reward, each reward function's mean (one line each), reward std, KL (runs with
    beta > 0), completion length, evaluation metrics (``eval/...``) when periodic evaluation
    ran, and each dataset's level when a curriculum ran (``curriculum/<dataset>/level``); a plot whose metric was never logged is skipped. Health warnings from ``health.jsonl``
    are dashed red lines labelled with their name.
    """
    from unsloth_grpo.runs import read_health

    rows = read_metrics(output_dir)
    target = Path(out_dir) if out_dir is not None else Path(output_dir) / "plots"
    target.mkdir(parents=True, exist_ok=True)
    return [_save(fig, target / f"{stem}.png") for stem, fig in build_figures(rows, read_health(output_dir))]
