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

    def mean_reward(self, first: int | None = None, last: int | None = None) -> float:
        rows = [m["reward"] for m in self.metrics if "reward" in m]
        if first is not None:
            rows = rows[:first]
        if last is not None:
            rows = rows[-last:]
        return sum(rows) / len(rows) if rows else float("nan")


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
