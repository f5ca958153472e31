"""Checkpoints a crash cannot corrupt, rotation, Ctrl-C that saves, and finding what to resume.

A checkpoint is written in two moves. The Trainer first writes everything it needs to resume
(adapter, optimizer, scheduler, RNG states, ``trainer_state.json``) into a staging directory;
then :func:`finalize_checkpoint` adds a completeness marker listing every file and its size, and
renames the directory into ``RUN/checkpoints/checkpoint-<step>``. A rename within one file
system is atomic, so a checkpoint under ``checkpoints/`` is either whole or absent, and
:func:`latest_checkpoint` re-checks the marker and the sizes anyway (a copy interrupted half-way,
a file truncated by a full disk). Layout of a run directory::

    RUN/checkpoints/checkpoint-20/            # single-stage run
    RUN/stages/02-format/checkpoints/checkpoint-10/   # multi-stage run (see unsloth_grpo.training.stages)

:class:`CheckpointCallback` plugs this into TRL/transformers through the Trainer's ``on_save``
hook (composition, no subclass: the Trainer keeps its own complete save logic) and installs
SIGINT/SIGTERM handlers: the current step finishes, a checkpoint is saved, training stops, and
the run prints the command that resumes it. A second Ctrl-C aborts at once.

Example::

    from unsloth_grpo.training.checkpoint import latest_checkpoint
    latest_checkpoint("outputs/smoke")   # Path('outputs/smoke/checkpoints/checkpoint-40') or None
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from unsloth_grpo.training.distributed import detect

CHECKPOINTS_DIR = "checkpoints"
STAGES_DIR = "stages"
PREFIX = "checkpoint-"
MARKER = "checkpoint_complete.json"
_NAME = re.compile(rf"^{PREFIX}(\d+)$")
_STAGE_NAME = re.compile(r"^(\d+)-")

#: Exit codes a shell expects after SIGINT / SIGTERM (128 + signal number).
EXIT_CODES = {"SIGINT": 130, "SIGTERM": 143}


class CheckpointError(ValueError):
    """A checkpoint path cannot be resumed from; the message says which one to use instead."""


@dataclass(frozen=True)
class CheckpointInfo:
    path: Path
    step: int
    stage: int  # 0 for a single-stage run; 1, 2, ... for the stages of a multi-stage run
    stage_name: str | None
    created: float

    def describe(self) -> str:
        where = f"stage {self.stage} ({self.stage_name}) " if self.stage_name else ""
        return f"{where}step {self.step}: {self.path}"


# ---------------------------------------------------------------- writing


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _manifest(directory: Path) -> dict[str, int]:
    """Every file below ``directory`` (relative path -> size in bytes), the marker excluded."""
    files = {}
    for p in sorted(directory.rglob("*")):
        if p.is_file() and p.name != MARKER:
            files[p.relative_to(directory).as_posix()] = p.stat().st_size
    return files


def write_marker(directory: str | os.PathLike, *, step: int, stage: int = 0, stage_name: str | None = None,
                 extra: dict | None = None) -> Path:
    """Write the completeness marker (file list with sizes) into ``directory``, flushed to disk."""
    directory = Path(directory)
    for p in directory.rglob("*"):  # the data must reach the disk before the marker that vouches for it
        if p.is_file():
            try:
                with p.open("rb") as fh:
                    os.fsync(fh.fileno())
            except OSError:
                pass
    info = {"step": int(step), "stage": int(stage), "stage_name": stage_name, "created": time.time(),
            "files": _manifest(directory), **(extra or {})}
    marker = directory / MARKER
    tmp = directory / (MARKER + ".tmp")
    with tmp.open("w") as fh:
        json.dump(info, fh, indent=1)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, marker)
    _fsync_dir(directory)
    return marker


def checkpoints_root(run_dir: str | os.PathLike) -> Path:
    return Path(run_dir) / CHECKPOINTS_DIR


def finalize_checkpoint(staged: str | os.PathLike, run_dir: str | os.PathLike, *, step: int, stage: int = 0,
                        stage_name: str | None = None, keep_last: int | None = None,
                        extra: dict | None = None) -> Path:
    """Mark ``staged`` complete and move it to ``run_dir/checkpoints/checkpoint-<step>`` atomically.

    An older checkpoint of the same step (a resumed run saving again) is replaced. Afterwards only
    the newest ``keep_last`` complete checkpoints are kept (None or 0 keeps all).
    """
    staged = Path(staged)
    if not staged.is_dir():
        raise CheckpointError(f"cannot finalize checkpoint: '{staged}' is not a directory")
    write_marker(staged, step=step, stage=stage, stage_name=stage_name, extra=extra)
    root = checkpoints_root(run_dir)
    root.mkdir(parents=True, exist_ok=True)
    target = root / f"{PREFIX}{int(step)}"
    if target.exists():
        old = root / f".replaced-{PREFIX}{int(step)}-{os.getpid()}"
        os.replace(target, old)
        os.replace(staged, target)
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.replace(staged, target)
    _fsync_dir(root)
    if keep_last:
        rotate(run_dir, keep_last)
    return target


def rotate(run_dir: str | os.PathLike, keep_last: int) -> list[Path]:
    """Delete all but the newest ``keep_last`` complete checkpoints of ``run_dir/checkpoints``.

    Incomplete directories there (no valid marker) are deleted too: they can only be leftovers
    of a crash. Returns the deleted paths.
    """
    if keep_last < 1:
        raise ValueError(f"keep_last={keep_last}: keep at least 1 checkpoint (or leave it unset to keep all)")
    root = checkpoints_root(run_dir)
    if not root.is_dir():
        return []
    complete, broken = [], []
    for d in root.iterdir():
        if not d.is_dir():
            continue
        if _NAME.match(d.name):
            ok, _ = check_checkpoint(d)
            (complete if ok else broken).append(d)
        elif d.name.startswith(".replaced-"):
            broken.append(d)
    complete.sort(key=lambda d: int(_NAME.match(d.name).group(1)))
    doomed = complete[:-keep_last] + broken
    for d in doomed:
        shutil.rmtree(d, ignore_errors=True)
    return doomed


# ---------------------------------------------------------------- reading


def read_marker(directory: str | os.PathLike) -> dict | None:
    try:
        return json.loads((Path(directory) / MARKER).read_text())
    except (OSError, ValueError):
        return None


def check_checkpoint(directory: str | os.PathLike) -> tuple[bool, str]:
    """(True, "") for a complete checkpoint; (False, why) otherwise. Reads sizes, not contents."""
    directory = Path(directory)
    if not directory.is_dir():
        return False, f"'{directory}' is not a directory"
    info = read_marker(directory)
    if info is None:
        return False, f"'{directory}' has no readable {MARKER}: it was being written when the run stopped"
    files = info.get("files")
    if not isinstance(files, dict) or not files:
        return False, f"'{directory}/{MARKER}' lists no files"
    for rel, size in files.items():
        p = directory / rel
        if not p.is_file():
            return False, f"'{directory}' lacks {rel}, which its marker lists"
        if p.stat().st_size != size:
            return False, f"'{directory}/{rel}' is {p.stat().st_size} bytes, its marker says {size}: truncated"
    return True, ""


def _info(directory: Path) -> CheckpointInfo | None:
    ok, _ = check_checkpoint(directory)
    if not ok:
        return None
    m = read_marker(directory) or {}
    return CheckpointInfo(directory, int(m.get("step", 0)), int(m.get("stage", 0)), m.get("stage_name"),
                          float(m.get("created", 0.0)))


def list_checkpoints(run_dir: str | os.PathLike) -> list[CheckpointInfo]:
    """Complete checkpoints of a run, oldest first: by stage, then step. Broken ones are skipped."""
    run_dir = Path(run_dir)
    roots = [checkpoints_root(run_dir)]
    stages = run_dir / STAGES_DIR
    if stages.is_dir():
        roots += [checkpoints_root(d) for d in sorted(stages.iterdir()) if d.is_dir()]
    found = []
    for root in roots:
        if not root.is_dir():
            continue
        for d in root.iterdir():
            if d.is_dir() and _NAME.match(d.name):
                info = _info(d)
                if info is not None:
                    found.append(info)
    found.sort(key=lambda c: (c.stage, c.step, c.created))
    return found


def latest_checkpoint(run_dir: str | os.PathLike) -> Path | None:
    """The newest complete checkpoint of ``run_dir`` (last stage, highest step), or None."""
    found = list_checkpoints(run_dir)
    return found[-1].path if found else None


def is_checkpoint_dir(path: str | os.PathLike) -> bool:
    p = Path(path)
    return bool(_NAME.match(p.name)) or (p / MARKER).exists() or (p / "trainer_state.json").exists()


def resolve_resume(resume: bool | str | os.PathLike | None, run_dir: str | os.PathLike) -> CheckpointInfo | None:
    """What ``--resume`` means: None/False -> None; True -> the run's latest complete checkpoint
    (None when there is none yet, so a notebook can always pass it); a path -> that run's latest,
    or that checkpoint, which must be complete.
    """
    if resume is None or resume is False:
        return None
    if resume is True or str(resume) == "latest":
        path = latest_checkpoint(run_dir)
        return _info(path) if path is not None else None
    p = Path(resume)
    if not p.exists():
        raise CheckpointError(f"--resume {p}: no such directory; pass a run directory or one of its "
                              f"checkpoints/checkpoint-N directories")
    if is_checkpoint_dir(p):
        ok, why = check_checkpoint(p)
        if not ok:
            hint = latest_checkpoint(_run_of(p))
            raise CheckpointError(f"--resume {p}: {why}. "
                                  + (f"The latest complete checkpoint is {hint}" if hint else
                                     "This run has no complete checkpoint; start without --resume"))
        return _info(p)
    path = latest_checkpoint(p)
    if path is None:
        raise CheckpointError(f"--resume {p}: no complete checkpoint under {p}/{CHECKPOINTS_DIR}; "
                              "start without --resume (or set training.save_steps so checkpoints get written)")
    return _info(path)


def _run_of(checkpoint: Path) -> Path:
    """RUN for RUN/checkpoints/checkpoint-N and for RUN/stages/NN-x/checkpoints/checkpoint-N."""
    parent = checkpoint.parent.parent if checkpoint.parent.name == CHECKPOINTS_DIR else checkpoint.parent
    if parent.parent.name == STAGES_DIR:
        return parent.parent.parent
    return parent


def run_dir_of(checkpoint: str | os.PathLike) -> Path:
    return _run_of(Path(checkpoint))


def stage_index_of(dirname: str) -> int | None:
    m = _STAGE_NAME.match(dirname)
    return int(m.group(1)) if m else None


def trim_metrics(path: str | os.PathLike, last_step: int) -> int:
    """Keep only rows with ``step <= last_step`` in a metrics.jsonl (a resumed run re-logs the rest).

    Returns the number of rows kept. A torn last line (the run died mid-write) is dropped.
    """
    path = Path(path)
    if not path.exists():
        return 0
    kept = []
    for line in path.read_text().splitlines():
        try:
            row = json.loads(line)
        except ValueError:
            continue
        if int(row.get("step", 0)) <= last_step:
            kept.append(json.dumps(row))
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text("".join(line + "\n" for line in kept))
    os.replace(tmp, path)
    return len(kept)


# ---------------------------------------------------------------- the Trainer callback


def resume_hint(run_dir: str | os.PathLike) -> str:
    """The command that continues a run from its latest checkpoint."""
    config = Path(run_dir) / "config.yaml"
    return f"unsloth-grpo train --config {config} --resume"


def make_checkpoint_callback(run_dir: str | os.PathLike, *, keep_last: int | None = None, stage: int = 0,
                             stage_name: str | None = None, handle_signals: bool = True,
                             hint: str | None = None, log: Callable[[str], None] = print):
    """A ``TrainerCallback`` that finalizes every Trainer save atomically and saves on SIGINT/SIGTERM.

    Give the Trainer ``output_dir=run_dir``: it writes ``run_dir/checkpoint-<step>`` (the staging
    directory), and ``on_save`` moves it under ``run_dir/checkpoints/``. After ``trainer.train()``
    returns, ``callback.interrupted`` names the signal (or is None) and ``callback.last_checkpoint``
    is the newest finalized checkpoint.
    """
    from transformers import TrainerCallback

    class CheckpointCallback(TrainerCallback):
        def __init__(self):
            self.run_dir = Path(run_dir)
            self.interrupted: str | None = None
            self.last_checkpoint: Path | None = None
            self._previous: dict[int, Any] = {}

        # -- signals: the handler only raises a flag; the step in flight finishes first
        def _on_signal(self, signum, frame):
            name = signal.Signals(signum).name
            if self.interrupted is not None:  # second signal: give up at once
                self._restore()
                log(f"{name} again: stopping now without saving (the last complete checkpoint is kept)")
                raise KeyboardInterrupt
            self.interrupted = name
            log(f"{name} received: finishing this step, saving a checkpoint, then stopping "
                "(press Ctrl-C again to stop at once without saving)")

        def _install(self):
            import threading

            if not handle_signals or threading.current_thread() is not threading.main_thread():
                return
            for sig in (signal.SIGINT, signal.SIGTERM):
                self._previous[sig] = signal.getsignal(sig)
                signal.signal(sig, self._on_signal)

        def _restore(self):
            for sig, handler in self._previous.items():
                signal.signal(sig, handler)
            self._previous.clear()

        def on_train_begin(self, args, state, control, **kwargs):
            self._install()

        def on_train_end(self, args, state, control, **kwargs):
            self._restore()

        def on_step_end(self, args, state, control, **kwargs):
            if _any_rank(self.interrupted is not None) and self.interrupted is None:
                self.interrupted = "SIGTERM"  # another rank was signalled: every rank must save at this step
            if self.interrupted is not None:
                control.should_save = True
                control.should_training_stop = True
            return control

        def on_save(self, args, state, control, **kwargs):
            staged = Path(args.output_dir) / f"{PREFIX}{state.global_step}"
            _wait_for_everyone()
            if state.is_world_process_zero and staged.is_dir():
                self.last_checkpoint = finalize_checkpoint(
                    staged, self.run_dir, step=state.global_step, stage=stage, stage_name=stage_name,
                    keep_last=keep_last)
            _wait_for_everyone()
            if self.interrupted is not None and state.is_world_process_zero:
                where = self.last_checkpoint or latest_checkpoint(self.run_dir)
                log(f"stopped by {self.interrupted} at step {state.global_step}; checkpoint: {where}")
                log(f"resume with: {hint or resume_hint(self.run_dir)}")
            return control

    return CheckpointCallback()


def _any_rank(flag: bool) -> bool:
    """True on every rank when ``flag`` is True on any (a signal may reach the ranks steps apart,
    and a save taken at different steps would deadlock). One scalar all-reduce; free alone."""
    if not detect().distributed:
        return flag
    try:
        import torch
        import torch.distributed as dist
        from accelerate import PartialState

        if not (dist.is_available() and dist.is_initialized()):
            return flag
        t = torch.tensor([1 if flag else 0], device=PartialState().device)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        return bool(t.item())
    except Exception:  # noqa: BLE001 - no process group after all
        return flag


def _wait_for_everyone() -> None:
    """A barrier under torchrun/accelerate (other ranks write their RNG state into the staging dir)."""
    if not detect().distributed:
        return
    try:
        from accelerate import PartialState

        PartialState().wait_for_everyone()
    except Exception:  # noqa: BLE001 - no process group: a single process after all
        pass


def save_now(trainer, run_dir: str | os.PathLike, *, stage: int = 0, stage_name: str | None = None,
             keep_last: int | None = None) -> Path:
    """Save a resumable checkpoint of ``trainer`` right now (e.g. before reporting an OOM)."""
    trainer._save_checkpoint(trainer.model, trial=None)
    staged = Path(trainer.args.output_dir) / f"{PREFIX}{trainer.state.global_step}"
    return finalize_checkpoint(staged, run_dir, step=trainer.state.global_step, stage=stage,
                               stage_name=stage_name, keep_last=keep_last)


def finalize_staged(run_dir: str | os.PathLike, step: int, **kwargs) -> Path | None:
    """Finalize ``run_dir/checkpoint-<step>`` if a save outside ``on_save`` left it there (the OOM path)."""
    staged = Path(run_dir) / f"{PREFIX}{int(step)}"
    if not staged.is_dir():
        return None
    return finalize_checkpoint(staged, run_dir, step=step, **kwargs)


def clean_staging(run_dir: str | os.PathLike) -> list[Path]:
    """Remove ``run_dir/checkpoint-*`` leftovers: staging directories of a save that never finished."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        return []
    gone = [d for d in run_dir.iterdir() if d.is_dir() and _NAME.match(d.name)]
    for d in gone:
        shutil.rmtree(d, ignore_errors=True)
    return gone


__all__ = [
    "CHECKPOINTS_DIR", "EXIT_CODES", "MARKER", "CheckpointError", "CheckpointInfo", "check_checkpoint",
    "clean_staging", "finalize_checkpoint", "finalize_staged", "latest_checkpoint", "list_checkpoints", "make_checkpoint_callback",
    "read_marker", "resolve_resume", "resume_hint", "rotate", "run_dir_of", "save_now", "trim_metrics",
    "write_marker",
]
