"""Watching a run: one readable progress line per log, and sample generations every N steps.

Both print plain lines (no live regions), so they read the same in a terminal, a log file and a
Jupyter notebook.

* :func:`make_progress_callback` - a ``TrainerCallback`` printing, per log::

      step   40/250 ( 16%) | reward 0.512 ± 0.231 | kl 0.0132 | len 87 | 1.84 s/step | ETA 6m26s

* :class:`SampleRecorder` - wraps the reward functions. TRL calls every reward function with the
  prompts, the completions and the dataset columns; the wrappers pass the call through unchanged
  and, every ``every`` steps, print a few completions with each reward's score and append them to
  ``OUTPUT_DIR/samples.jsonl``. Example::

      funcs, weights = build_reward_functions(cfg.rewards)
      recorder = SampleRecorder("outputs/run", every=10, weights=weights)
      trainer = GRPOTrainer(..., reward_funcs=recorder.wrap(funcs))
"""

from __future__ import annotations

import functools
import json
import math
import os
import sys
import time
from collections import deque
from pathlib import Path
from typing import Any, Callable, Sequence

SAMPLES_FILE = "samples.jsonl"

# Keyword arguments TRL passes to reward functions that are not per-sample dataset columns.
_NOT_COLUMNS = {"prompts", "completions", "completion_ids", "trainer_state", "log_extra", "log_metric",
                "environments"}


def format_duration(seconds: float) -> str:
    """``75`` -> ``'1m15s'``, ``3725`` -> ``'1h02m'``, ``9.4`` -> ``'9s'``."""
    if seconds is None or not math.isfinite(seconds) or seconds < 0:
        return "?"
    s = int(round(seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{(s % 3600) // 60:02d}m"


def _num(logs, key):
    v = logs.get(key)
    if isinstance(v, bool) or not isinstance(v, (int, float)) or math.isnan(v):
        return None
    return float(v)


class ProgressLine:
    """Turns (step, logs, time) into one progress line; pure, so it is tested without a trainer.

    Seconds per step are measured from the wall clock over the last ``window`` logs, so a slow
    first step (compilation, model warm-up) stops mattering after a few logs.
    """

    def __init__(self, max_steps: int | None = None, *, window: int = 10,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.max_steps = max_steps
        self.clock = clock
        self._marks: deque[tuple[float, int]] = deque(maxlen=window + 1)

    def start(self, step: int = 0) -> None:
        self._marks.clear()
        self._marks.append((self.clock(), step))

    def seconds_per_step(self) -> float | None:
        if len(self._marks) < 2:
            return None
        (t0, s0), (t1, s1) = self._marks[0], self._marks[-1]
        return (t1 - t0) / (s1 - s0) if s1 > s0 else None

    def line(self, step: int, logs: dict[str, Any]) -> str:
        now = self.clock()
        if not self._marks:  # never started: measure from this log on
            self._marks.append((now, step))
        if step > self._marks[-1][1]:
            self._marks.append((now, step))
        width = len(str(self.max_steps)) if self.max_steps else 1
        if self.max_steps:
            parts = [f"step {step:>{width}}/{self.max_steps} ({step / self.max_steps:4.0%})"]
        else:
            parts = [f"step {step}"]
        reward, std = _num(logs, "reward"), _num(logs, "reward_std")
        if reward is not None:
            parts.append(f"reward {reward:.3f}" + (f" ± {std:.3f}" if std is not None else ""))
        flat = _num(logs, "frac_reward_zero_std")
        if flat is not None:  # groups whose rewards all agree: no gradient from them
            parts.append(f"flat {flat:.0%}")
        rounds = _num(logs, "dynamic_sampling/rounds")
        if rounds is not None:
            parts.append(f"rounds {rounds:g}")
        kl = _num(logs, "kl")
        if kl is not None:
            parts.append(f"kl {kl:.4f}")
        length = _num(logs, "completions/mean_length")
        if length is not None:
            parts.append(f"len {length:.0f}")
        sps = self.seconds_per_step()
        if sps is not None:
            parts.append(f"{sps:.2f} s/step")
            if self.max_steps:
                parts.append(f"ETA {format_duration(sps * max(self.max_steps - step, 0))}")
        return " | ".join(parts)


def _eval_line(step: int, logs: dict[str, Any]) -> str:
    shown = ", ".join(f"{k[len('eval/'):]} {v:.3f}" for k, v in logs.items()
                      if k.startswith("eval/") and isinstance(v, (int, float)) and not isinstance(v, bool))
    return f"eval at step {step}: {shown}"


def make_progress_callback(max_steps: int | None = None, *, file=None, end_line: bool = True):
    """A ``TrainerCallback`` printing one :class:`ProgressLine` per training log.

    ``max_steps`` defaults to the trainer's ``state.max_steps``. Evaluation logs (``eval/...``
    keys) get their own line, and the end of training prints the total time (unless ``end_line``
    is False: the toolkit's own runs end with one closing line of their own). Only the main
    process prints. Pair it with ``disable_tqdm=True`` and :func:`use_progress_line`, which removes
    transformers' own printer so the logs are not printed twice.
    """
    from transformers import TrainerCallback

    class ProgressLineCallback(TrainerCallback):
        def __init__(self) -> None:
            self.progress = ProgressLine(max_steps)
            self.file = file
            self._t0 = None

        def _print(self, text: str) -> None:
            print(text, file=self.file or sys.stdout, flush=True)

        def on_train_begin(self, args, state, control, **kwargs):
            if self.progress.max_steps is None:
                self.progress.max_steps = state.max_steps or None
            self.progress.start(state.global_step)
            self._t0 = time.monotonic()

        def on_log(self, args, state, control, logs=None, **kwargs):
            if not logs or not state.is_world_process_zero:
                return
            if "reward" in logs or "loss" in logs:
                self._print(self.progress.line(state.global_step, logs))
            elif any(k.startswith("eval/") for k in logs):
                self._print(_eval_line(state.global_step, logs))

        def on_train_end(self, args, state, control, **kwargs):
            if end_line and state.is_world_process_zero and self._t0 is not None:
                self._print(f"done: {state.global_step} steps in {format_duration(time.monotonic() - self._t0)}")

    return ProgressLineCallback()


def use_progress_line(trainer, callback=None) -> Any:
    """Replace transformers' tqdm bar / raw-dict printer on ``trainer`` with a progress line.

    Returns the callback that was added (``callback`` or a new :func:`make_progress_callback`).
    """
    from transformers.trainer_callback import PrinterCallback, ProgressCallback

    for cls in (PrinterCallback, ProgressCallback):
        trainer.remove_callback(cls)
    try:  # the notebook bar is a ProgressCallback subclass only in some versions
        from transformers.utils.notebook import NotebookProgressCallback

        trainer.remove_callback(NotebookProgressCallback)
    except ImportError:
        pass
    callback = callback or make_progress_callback()
    trainer.add_callback(callback)
    return callback


# ---------------------------------------------------------------------------- samples

def _text(x: Any) -> str:
    """A prompt or completion as text: chat messages are joined as ``role: content`` lines."""
    if isinstance(x, str):
        return x
    if isinstance(x, (list, tuple)):
        msgs = [m for m in x if isinstance(m, dict)]
        if any(m.get("tool_calls") or m.get("role") == "tool" for m in msgs):
            from unsloth_grpo.tools.transcript import render

            return render(msgs)  # the whole exchange: model turn, call, tool result, next turn
        if len(msgs) == 1:
            return str(msgs[0].get("content", ""))
        return "\n".join(f"{m.get('role', '?')}: {m.get('content', '')}" for m in msgs)
    if isinstance(x, dict):
        return str(x.get("content", ""))
    return str(x)


def _last_user(prompt: Any) -> str:
    if isinstance(prompt, (list, tuple)):
        users = [m for m in prompt if isinstance(m, dict) and m.get("role") == "user"]
        if users:
            return str(users[-1].get("content", ""))
    return _text(prompt)


def _short(text: str, limit: int) -> str:
    text = text.strip()
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _keep_samples_before(path: Path, step: int) -> int | None:
    """Keep the rows of ``samples.jsonl`` recorded before ``step``; return the last kept row's step.

    A row's step is the trainer's step count when its completions were scored, so rows at ``step``
    and after came from training beyond the checkpoint at ``step``. A torn last line is dropped.
    """
    if not path.exists():
        return None
    kept, last = [], None
    for line in path.read_text().splitlines():
        try:
            row = json.loads(line)
        except ValueError:
            continue
        if int(row.get("step", 0)) < step:
            kept.append(line)
            last = int(row.get("step", 0))
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text("".join(line + "\n" for line in kept))
    os.replace(tmp, path)
    return last


class SampleRecorder:
    """Sees every reward call and, every ``every`` steps, records a few samples with their scores.

    ``wrap(funcs)`` returns wrappers that keep each function's ``__name__`` (TRL names the logged
    ``rewards/<name>/mean`` after it) and return its scores unchanged. When the last wrapped function
    of a batch has run, ``num_samples`` completions spread over the batch are printed and appended to
    ``output_dir/samples.jsonl`` as ``{"step", "prompt", "completion", "rewards": {name: score},
    "total", <dataset columns such as "answer">}``. ``total`` is the weighted sum TRL optimises
    (None scores left out), present when ``weights`` are given. An existing ``samples.jsonl`` is
    replaced unless ``resume=True`` (appended to) or ``resume_step=S`` (a run resumed from its
    checkpoint at step S: the samples of steps before S are kept, the later ones, which the resumed
    run records again, are dropped, and the every-``every``-steps rhythm goes on from the last kept).
    """

    def __init__(self, output_dir: str | Path | None, *, every: int = 10, num_samples: int = 2,
                 weights: Sequence[float] | None = None, print_samples: bool = True,
                 max_chars: int = 300, file=None, resume: bool = False, resume_step: int | None = None) -> None:
        if every < 1:
            raise ValueError(f"samples every={every}: use an integer >= 1 (steps between sample dumps)")
        if num_samples < 1:
            raise ValueError(f"num_samples={num_samples}: use an integer >= 1")
        self.path = None if output_dir is None else Path(output_dir) / SAMPLES_FILE
        self._last_step: int | None = None
        if self.path is not None and self._is_main_process():
            if resume_step is not None:
                self._last_step = _keep_samples_before(self.path, resume_step)
            elif not resume and self.path.exists():
                self.path.unlink()  # a new run starts a new file; resume=True appends
        self.every = every
        self.num_samples = num_samples
        self.weights = list(weights) if weights is not None else None
        self.print_samples = print_samples
        self.max_chars = max_chars
        self.file = file
        self.names: list[str] = []
        self.records_written = 0
        self._calls = 0
        self._batch_key = None
        self._scores: dict[int, list] = {}

    def wrap(self, funcs: Sequence[Callable]) -> list[Callable]:
        """Wrappers for ``funcs`` (same order, same names); call once per trainer."""
        if self.weights is not None and len(self.weights) != len(funcs):
            raise ValueError(f"SampleRecorder got {len(self.weights)} weights for {len(funcs)} reward functions")
        self.names = [getattr(f, "__name__", type(f).__name__) for f in funcs]
        return [self._wrap_one(i, f) for i, f in enumerate(funcs)]

    def _wrap_one(self, index: int, func: Callable) -> Callable:
        @functools.wraps(func)
        def wrapper(*args, **kwargs):
            scores = func(*args, **kwargs)
            self._observe(index, scores, kwargs)
            return scores

        wrapper.__name__ = self.names[index]  # callable objects have no __name__ for wraps to copy
        return wrapper

    def _observe(self, index: int, scores, kwargs: dict[str, Any]) -> None:
        completions = kwargs.get("completions")
        if completions is None:
            return
        key = (id(completions), len(completions))
        if key != self._batch_key:
            self._batch_key, self._scores = key, {}
            self._calls += 1
        self._scores[index] = list(scores)
        if len(self._scores) == len(self.names):
            state = kwargs.get("trainer_state")
            step = int(state.global_step) if state is not None else self._calls - 1
            if self._last_step is None or step - self._last_step >= self.every:
                self._last_step = step
                self._record(step, kwargs)

    def _is_main_process(self) -> bool:
        from unsloth_grpo.hardware.launch import detect

        return detect().is_main

    def _record(self, step: int, kwargs: dict[str, Any]) -> None:
        prompts, completions = kwargs.get("prompts"), kwargs["completions"]
        n = len(completions)
        picks = sorted({(k * n) // self.num_samples for k in range(min(self.num_samples, n))})
        columns = {k: v for k, v in kwargs.items()
                   if k not in _NOT_COLUMNS and isinstance(v, (list, tuple)) and len(v) == n}
        records = []
        for i in picks:
            rewards = {name: self._scores[j][i] for j, name in enumerate(self.names)}
            rec: dict[str, Any] = {
                "step": step,
                "prompt": prompts[i] if prompts is not None else None,
                "completion": _text(completions[i]),
                "rewards": rewards,
            }
            if self.weights is not None:
                parts = [w * s for w, s in zip(self.weights, rewards.values()) if s is not None]
                rec["total"] = sum(parts) if parts else None
            for k, v in columns.items():
                rec.setdefault(k, v[i])
            records.append(rec)
        if not self._is_main_process():
            return
        if self.path is not None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with self.path.open("a") as fh:
                for rec in records:
                    fh.write(json.dumps(rec, default=str) + "\n")
        self.records_written += len(records)
        if self.print_samples:
            out = self.file or sys.stdout
            for rec in records:
                scores = ", ".join(f"{k} {v:.2f}" if isinstance(v, (int, float)) else f"{k} {v}"
                                   for k, v in rec["rewards"].items())
                total = f" | total {rec['total']:.2f}" if rec.get("total") is not None else ""
                print(f"--- sample at step {step}: {scores}{total}", file=out)
                print(f"prompt: {_short(_last_user(rec['prompt']), self.max_chars)}", file=out)
                print(f"completion: {_short(rec['completion'], self.max_chars)}", file=out, flush=True)
