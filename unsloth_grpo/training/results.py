"""What a training run gives back: its result, its ``metrics.jsonl`` rows, or why it stopped.

Shared by the single GRPO run (:mod:`unsloth_grpo.training.train`), the stage runner and the
per-rank logs, so none of them imports another for these few names.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass
class TrainResult:
    output_dir: Path
    metrics: list[dict] = field(default_factory=list)
    backend: dict = field(default_factory=dict)
    seconds: float = 0.0
    global_step: int = 0
    #: The before/after evaluation on held-out problems (:func:`held_out_summary`), when the run made one.
    evaluation: dict | None = None
    #: GRPO's headroom on training prompts, ``{"before": ..., "after": ...}``
    #: (:func:`unsloth_grpo.training.held_out.headroom_end`), when the run measured it.
    headroom: dict | None = None
    #: A multi-stage run's summary, one entry per stage (what it changed; ``stages_summary.json``).
    stages: list[dict] = field(default_factory=list)

    def evaluation_line(self) -> str | None:
        """``held-out (64 problems): strict 0.000 -> 0.594, lenient 0.172 -> 0.594``, or None; for a
        multi-stage run it says that the change is the whole run's, from the base model to the last stage."""
        if self.evaluation is None:
            return None
        line = held_out_line(self.evaluation)
        return f"whole run (base model -> last stage), {line}" if self.stages else line

    def headroom_line(self) -> str | None:
        """pass@1 after training against pass@K before, on the same training prompts
        (:func:`unsloth_grpo.evaluation.headroom.after_line`), or None."""
        if not self.headroom:
            return None
        from unsloth_grpo.evaluation.headroom import after_line

        return after_line(self.headroom["before"], self.headroom["after"])

    def curriculum_line(self) -> str | None:
        """Each curriculum dataset's level over the run from ``curriculum/<dataset>/level``:
        ``curriculum: chain_sum level 2 -> 0 (lowest 0, highest 2, 3 moves)``, or None without a curriculum."""
        names = sorted({k.split("/")[1] for m in self.metrics for k in m
                        if k.startswith("curriculum/") and k.endswith("/level")})
        parts = []
        for name in names:
            levels = [m[f"curriculum/{name}/level"] for m in self.metrics if f"curriculum/{name}/level" in m]
            moves = sum(a != b for a, b in zip(levels, levels[1:]))
            parts.append(f"{name} level {levels[0]:g} -> {levels[-1]:g} (lowest {min(levels):g}, highest "
                         f"{max(levels):g}, {moves} move{'' if moves == 1 else 's'})")
        return "curriculum: " + "; ".join(parts) if parts else None

    def mean_reward(self, first: int | None = None, last: int | None = None, key: str = "reward") -> float:
        """The mean of ``key`` (the summed reward; ``rewards/<function>/mean`` for one function) over the
        first or last logged steps that have it."""
        rows = [m[key] for m in self.metrics if key in m]
        if first is not None:
            rows = rows[:first]
        if last is not None:
            rows = rows[-last:]
        return sum(rows) / len(rows) if rows else float("nan")


#: Logged steps at each end of a run or stage that its closing words compare (the first 5 against the last 5).
ENDS = 5


def ends_compared(values: list[float], k: int = ENDS) -> dict:
    """The mean of the first and of the last ``k`` values and their difference, with the count
    (``logged``). With fewer than ``2k`` values the two ends would share steps (a 5-step stage: the same
    five, "2.14 -> 2.14"), so only the mean and the count: the run was too short to compare."""
    n = len(values)
    if n < 2 * k:
        return {"mean": round(sum(values) / n, 6) if n else float("nan"), "logged": n}
    a, b = sum(values[:k]) / k, sum(values[-k:]) / k
    return {"first5": round(a, 6), "last5": round(b, 6), "delta": round(b - a, 6), "logged": n}


def ends_words(key: str, m: dict, fmt: str = ".3f") -> str:
    """``reward 0.120 -> 0.450`` for an :func:`ends_compared` entry, or the mean and why there is no change."""
    if "first5" not in m:
        return (f"{key} {m['mean']:{fmt}} over {m['logged']} logged steps (too short to compare its first and last "
                f"{ENDS})")
    return f"{key} {m['first5']:{fmt}} -> {m['last5']:{fmt}}"


def held_out_summary(before: dict, after: dict, report: dict | None = None) -> dict:
    """What the one closing line of a run says about two evaluations of the same held-out problems."""
    return {"n": after["n"], "strict": [before["accuracy"], after["accuracy"]],
            "lenient": [before.get("lenient_accuracy"), after.get("lenient_accuracy")],
            "worse_categories": [w["category"] for w in (report or {}).get("worse_categories") or []],
            "stalled_categories": list((report or {}).get("stalled_categories") or [])}


def held_out_line(summary: dict) -> str:
    """The run's closing line on held-out accuracy: strict and lenient, before -> after."""
    strict = summary["strict"]
    text = f"held-out ({summary['n']} problems): strict {strict[0]:.3f} -> {strict[1]:.3f}"
    lenient = summary.get("lenient") or [None, None]
    if None not in lenient:
        text += f", lenient {lenient[0]:.3f} -> {lenient[1]:.3f}"
    worse = list(dict.fromkeys(summary.get("worse_categories") or []))
    stalled = [c for c in summary.get("stalled_categories") or [] if c not in worse]
    if worse:
        text += f"; worse on: {', '.join(worse)}"
    if stalled:
        text += f"; no gain on: {', '.join(stalled)}"
    return text


class TrainingStopped(RuntimeError):
    """Training ended early on purpose (out of memory, a signal); ``code`` is the exit status."""

    def __init__(self, code: int, message: str):
        super().__init__(message)
        self.code = code


def metrics_row(state, logs: dict | None) -> dict | None:
    """One ``metrics.jsonl`` row for a training (or periodic eval) log; None for anything else."""
    if not logs:
        return None
    if "reward" not in logs and not any(k.startswith("eval/") for k in logs):
        return None  # the end-of-training summary, not a step
    return {"step": state.global_step, **{k: v for k, v in logs.items() if jsonable(v)}}


def jsonable(v: Any) -> bool:
    """A plain finite scalar that a metrics row can hold."""
    return isinstance(v, (int, float, str, bool)) and not (isinstance(v, float) and not math.isfinite(v))
