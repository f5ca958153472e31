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

    from unsloth_grpo.training.checkpoint import resolve_resume
    resolve_resume(True, "outputs/smoke")   # the newest intact checkpoint to resume from, or None

Reading a run directory back (its layout, the completeness markers, the newest complete
checkpoint) is :mod:`unsloth_grpo.runs`'s: export and inference read runs too.
"""

from __future__ import annotations

import itertools
import json
import os
import shutil
import signal
import time
from pathlib import Path
from typing import Any, Callable

from unsloth_grpo.hardware.launch import detect
from unsloth_grpo.runs import (
    CHECKPOINT_NAME,
    CHECKPOINTS_DIR,
    LOCK_FILE,
    MARKER,
    PREFIX,
    RUN_COMPLETE,
    STAGES_DIR,
    CheckpointInfo,
    check_checkpoint,
    checkpoint_info,
    checkpoints_root,
    is_checkpoint_dir,
    last_logged_step,
    latest_checkpoint,
    list_checkpoints,
    run_dir_of,
    sha256_of,
    trim_metrics,
)

#: Exit codes a shell expects after SIGINT / SIGTERM (128 + signal number).
EXIT_CODES = {"SIGINT": 130, "SIGTERM": 143}


class CheckpointError(ValueError):
    """A checkpoint path cannot be resumed from; the message says which one to use instead."""


class EarlierRun(CheckpointError):
    """The output directory holds an earlier run that a new one would overwrite. Its text is for a
    Python caller (a notebook's second "Run all" reaches ``train(cfg)``): what to change in Python;
    ``command_line`` is the same refusal in the flags of the recipe's command line."""

    def __init__(self, python: str, command_line: str):
        super().__init__(python)
        self.command_line = command_line

    @classmethod
    def over(cls, output_dir: str | Path, what: str) -> "EarlierRun":
        """The refusal of a new run into ``output_dir``, which holds ``what`` (its first words say what)."""
        earlier = f"{output_dir} holds {what}; "
        return cls(earlier + "nothing was changed. Continue that run with train(cfg, resume=True), or "
                   + own_directory_hint(output_dir),
                   earlier + "pass --resume to continue it, or choose another --output-dir (or delete that directory) "
                             "to start over")


def own_directory_hint(output_dir: str | Path) -> str:
    """How a Python caller gives a new run a directory of its own (the fix of :class:`EarlierRun`): the
    first of ``OUTPUT-2``, ``OUTPUT-3``, ... that names nothing yet."""
    path = Path(output_dir)
    free = next(p for n in itertools.count(2) if not (p := path.with_name(f"{path.name}-{n}")).exists())
    return (f"give this run a directory of its own: cfg.output_dir = '{free}' before train(cfg) (a model passed as "
            f"train(cfg, loaded=...) that trained already is refused: load it again), or output_dir='{free}' in "
            "RECIPE.resolve (in this package's notebooks: OUTPUT_DIR in the parameters cell, then Run all, which "
            "loads the model again)")


def trained_already(run: str) -> str:
    """Why ``train(cfg, loaded=loaded)`` refuses a model that a train() trained already, and what to do."""
    return (f"loaded: this model was trained already, into {run}; its adapter holds that training, so a second "
            "train() would continue it while the new run's config.yaml and reproducibility.json describe a fresh "
            "start. Nothing was changed. Load the model again for this run (loaded = load_model(cfg.model, "
            "cfg.lora, seed=cfg.seed)), or call train(cfg) without loaded= and it loads its own; to continue "
            f"{run}, resume it there: train(cfg, resume=True) with cfg.output_dir = '{run}' and a model loaded again")


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
    files = _manifest(directory)
    info = {"step": int(step), "stage": int(stage), "stage_name": stage_name, "created": time.time(),
            "files": files, "sha256": {rel: sha256_of(directory / rel) for rel in files}, **(extra or {})}
    marker = directory / MARKER
    tmp = directory / (MARKER + ".tmp")
    with tmp.open("w") as fh:
        json.dump(info, fh, indent=1)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, marker)
    _fsync_dir(directory)
    return marker


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
        rotate(run_dir, keep_last, keep=target)
    return target


def rotate(run_dir: str | os.PathLike, keep_last: int, *, keep: Path | None = None) -> list[Path]:
    """Delete all but the newest ``keep_last`` complete checkpoints of ``run_dir/checkpoints``.

    Incomplete directories there (no valid marker) are deleted too: they can only be leftovers
    of a crash. ``keep`` (the checkpoint just written) is never deleted, even when higher steps
    of another branch are present. Returns the deleted paths.
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
        if CHECKPOINT_NAME.match(d.name):
            ok, _ = check_checkpoint(d)
            (complete if ok else broken).append(d)
        elif d.name.startswith(".replaced-"):
            broken.append(d)
    complete.sort(key=lambda d: int(CHECKPOINT_NAME.match(d.name).group(1)))
    doomed = [d for d in complete[:-keep_last] + broken if keep is None or d != keep]
    for d in doomed:
        shutil.rmtree(d, ignore_errors=True)
    return doomed


ABANDONED_DIR = "abandoned"


def set_aside_later(run_dir: str | os.PathLike, resume_step: int, log: Callable[[str], None] = print, *,
                    why: str | None = None) -> Path | None:
    """Move the checkpoints newer than ``resume_step`` out of ``run_dir/checkpoints``.

    Resuming from an earlier checkpoint starts a new branch of the run. The later checkpoints
    belong to the abandoned branch: left in place, one of them would stay "latest" (a later
    ``--resume`` would continue the wrong branch) and keep_last rotation would delete the new
    branch's first save. They are moved, not deleted, to ``run_dir/abandoned/after-step-<N>-<time>/``;
    the path is logged and returned (None when there was nothing to move).

    A multi-stage run calls it on each stage directory that runs again: ``resume_step=0`` sets
    aside every checkpoint of a later stage when the run is taken back to an earlier one, and
    ``why`` replaces the "resuming from step N" that starts the logged line.
    """
    root = checkpoints_root(run_dir)
    if not root.is_dir():
        return None
    later = sorted((d for d in root.iterdir() if d.is_dir() and CHECKPOINT_NAME.match(d.name)
                    and int(CHECKPOINT_NAME.match(d.name).group(1)) > resume_step),
                   key=lambda d: int(CHECKPOINT_NAME.match(d.name).group(1)))
    if not later:
        return None
    stamp = time.strftime("%Y%m%d-%H%M%S")
    target = Path(run_dir) / ABANDONED_DIR / f"after-step-{int(resume_step)}-{stamp}"
    n = 1
    while target.exists():  # two rewinds within one second
        n += 1
        target = target.with_name(f"after-step-{int(resume_step)}-{stamp}-{n}")
    target.mkdir(parents=True)
    for d in later:
        os.replace(d, target / d.name)
    _fsync_dir(root)
    log(f"{why or f'resuming from step {resume_step}'}: moved the later checkpoints of the abandoned branch "
        f"({', '.join(d.name for d in later)}) to {target}")
    return target


# ---------------------------------------------------------------- reading


def newest_intact(run_dir: str | os.PathLike) -> tuple[CheckpointInfo | None, list[str]]:
    """The newest checkpoint of ``run_dir`` whose files match their checksums, and why each newer
    one was passed over (truncated, corrupted, half-written)."""
    skipped = []
    root = checkpoints_root(run_dir)
    if root.is_dir():  # broken directories are not listed as checkpoints, but the user must hear of them
        for d in sorted(root.iterdir(), key=lambda d: -int(CHECKPOINT_NAME.match(d.name).group(1)) if CHECKPOINT_NAME.match(d.name) else 0):
            if d.is_dir() and CHECKPOINT_NAME.match(d.name):
                ok, why = check_checkpoint(d)
                if not ok:
                    skipped.append((int(CHECKPOINT_NAME.match(d.name).group(1)), why))
    for info in reversed(list_checkpoints(run_dir)):
        ok, why = check_checkpoint(info.path, contents=True)
        if ok:
            return info, [w for step, w in skipped if step > info.step or info.stage > 0]
        skipped.append((info.step, why))
    return None, [w for _, w in sorted(skipped, key=lambda x: -x[0])]


def no_such_resume_path(path: str | os.PathLike) -> str:
    return (f"--resume {path}: no such directory; pass a run directory or one of its checkpoints/checkpoint-N "
            "directories")


def resolve_resume(resume: bool | str | os.PathLike | None, run_dir: str | os.PathLike, *,
                   log: Callable[[str], None] = print) -> CheckpointInfo | None:
    """What ``--resume`` means: None/False -> None; True -> the run's newest intact checkpoint
    (None when the run has none yet, so a notebook can always pass it); a path -> that run's newest
    intact one, or that checkpoint, which must be intact. A damaged newer checkpoint is passed over
    with a note saying why; a run whose every checkpoint is damaged is refused, never restarted.
    """
    if resume is None or resume is False:
        return None
    if resume is True or str(resume) == "latest":
        return _newest_or_refuse(Path(run_dir), log, missing_ok=True)
    p = Path(resume)
    if not p.exists():
        raise CheckpointError(no_such_resume_path(p))
    if is_checkpoint_dir(p):
        ok, why = check_checkpoint(p, contents=True)
        if not ok:
            hint, _ = newest_intact(run_dir_of(p))
            raise CheckpointError(f"--resume {p}: {why}. "
                                  + (f"The newest intact checkpoint is {hint.path}" if hint else
                                     "This run has no intact checkpoint; start without --resume"))
        return checkpoint_info(p)
    return _newest_or_refuse(p, log, missing_ok=False)


def finished_without_checkpoint(run_dir: str | os.PathLike, step: int) -> str:
    """What ``--resume`` of a finished run that kept no checkpoint is told (one message, every path)."""
    return (f"{run_dir} holds a run that finished at step {step} and has no checkpoint to continue from; its "
            "adapter is final. Nothing was changed. To train more, start a new run with another --output-dir "
            "(with training.save_steps > 0 its checkpoints let a finished run go on later: --resume "
            "training.max_steps=N)")


def nothing_to_resume(run_dir: str | os.PathLike, *, stages: bool = False) -> str | None:
    """Why ``--resume`` of ``run_dir`` (the output directory, no path given) has nothing to continue, or
    None when it has. The library's ``resume=True`` starts fresh in that case (a notebook may always
    pass it); on the command line a mistyped directory must not train from step 0 without a word."""
    run = Path(run_dir)
    if not run.is_dir():
        return (f"--resume: {run} does not exist, so there is no run to continue (a mistyped --output-dir?). "
                "Check the path, or start without --resume to begin a new run there")
    if finished_run(run) is not None or list_checkpoints(run) or newest_intact(run)[1]:
        return None  # what to do with those is decided (and explained) by the resume itself
    if stages and (run / STAGES_DIR).is_dir():
        return None  # a stage with no checkpoint restarts from the previous stage's adapter
    if not (run / "config.yaml").is_file():
        return (f"--resume: {run} holds no run to continue (no config.yaml, no checkpoints). Check the path, "
                "or start without --resume to begin a new run there")
    return (f"--resume: the run in {run} has no checkpoint to continue from (it stopped before its first save, "
            "or training.save_steps is 0). Start without --resume to train it again from step 0")


def _newest_or_refuse(run_dir: Path, log: Callable[[str], None], *, missing_ok: bool) -> CheckpointInfo | None:
    info, skipped = newest_intact(run_dir)
    if info is None and skipped:
        raise CheckpointError(f"--resume: {run_dir} has no intact checkpoint to continue from: "
                              + "; ".join(skipped) + ". Start a new run with another --output-dir")
    finished = finished_run(run_dir) if info is None and not missing_ok else None
    if finished is not None:  # "start without --resume" would be refused too: it would overwrite the run
        raise CheckpointError(f"--resume {run_dir}: " + finished_without_checkpoint(run_dir, finished["step"]))
    if info is None and not missing_ok:
        raise CheckpointError(f"--resume {run_dir}: no complete checkpoint under {run_dir}/{CHECKPOINTS_DIR}; "
                              "start without --resume (or set training.save_steps so checkpoints get written)")
    for why in skipped:
        log(f"resume: passing over a damaged checkpoint: {why}")
    return info


# ---------------------------------------------------------------- finished runs and the run lock


def mark_finished(run_dir: str | os.PathLike, *, step: int, max_steps: int) -> Path:
    """Record that the run in ``run_dir`` finished (its final adapter is written)."""
    path = Path(run_dir) / RUN_COMPLETE
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps({"step": int(step), "max_steps": int(max_steps), "finished": time.time()}) + "\n")
    os.replace(tmp, path)
    return path


def finished_run(run_dir: str | os.PathLike) -> dict | None:
    """``{"step": N, ...}`` when ``run_dir`` holds a finished run, else None.

    Runs written before the marker existed count as finished when their final adapter is there
    (an interrupted run never writes one); their step is the last row of ``metrics.jsonl``.
    """
    run_dir = Path(run_dir)
    try:
        return json.loads((run_dir / RUN_COMPLETE).read_text())
    except (OSError, ValueError):
        pass
    if not (run_dir / "adapter_model.safetensors").is_file():
        return None
    return {"step": last_logged_step(run_dir), "max_steps": None}


class RunLocked(CheckpointError):
    """Another live process is training into the same output directory."""


class RunLock:
    """An exclusive lock on a run directory for as long as one training writes into it.

    ``fcntl.flock`` on ``RUN/.run.lock``: the kernel drops it when the holder exits, so a run
    killed with SIGKILL leaves no stale lock behind. The file records the holder's pid and start
    time for the message a second run gets.
    """

    def __init__(self, run_dir: str | os.PathLike):
        self.path = Path(run_dir) / LOCK_FILE
        self._fh = None
        self._created = False  # this lock made the file (so a run refused on its input may take it away)

    @property
    def held(self) -> bool:
        return self._fh is not None

    @property
    def created(self) -> bool:
        """Whether this lock made the lock file (none was there when it was taken)."""
        return self._created

    def acquire(self) -> "RunLock":
        import fcntl

        self.path.parent.mkdir(parents=True, exist_ok=True)
        while True:
            created = not self.path.exists()
            fh = self.path.open("a+")
            try:
                fcntl.flock(fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                fh.seek(0)
                holder = fh.read().strip() or "another process"
                fh.close()
                raise RunLocked(f"{self.path.parent} is in use by a training that is still running ({holder}); "
                                "wait for it to finish or stop it, or choose another --output-dir") from None
            try:  # the holder may have removed the file between our open and our flock: lock the new one
                if os.stat(self.path).st_ino == os.fstat(fh.fileno()).st_ino:
                    break
            except FileNotFoundError:
                pass
            fh.close()
        self._created = created
        fh.seek(0)
        fh.truncate()
        fh.write(f"pid {os.getpid()}, started {time.strftime('%Y-%m-%d %H:%M:%S')}")
        fh.flush()
        self._fh = fh
        return self

    def release(self, *, remove: bool = False) -> None:
        """Unlock; with ``remove``, also delete the lock file (a run that ends takes it away; one refused
        on its input removes it only when it :attr:`created` it, leaving the directory as it found it).
        It is removed while still held, and :meth:`acquire` checks that it locked the file that is there
        (filelock's Unix lock does the same: a lock taken on a file unlinked meanwhile is taken again), so
        no two runs can both hold one."""
        if self._fh is not None:
            import fcntl

            if remove:
                self.path.unlink(missing_ok=True)
            fcntl.flock(self._fh.fileno(), fcntl.LOCK_UN)
            self._fh.close()
            self._fh = None

    def __enter__(self) -> "RunLock":
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()


# ---------------------------------------------------------------- the Trainer callback


def resume_hint(run_dir: str | os.PathLike) -> str:
    """The command that continues a run from its latest checkpoint."""
    config = Path(run_dir) / "config.yaml"
    return f"unsloth-grpo train --config {config} --resume"


def make_checkpoint_callback(run_dir: str | os.PathLike, *, keep_last: int | None = None, stage: int = 0,
                             stage_name: str | None = None, handle_signals: bool = True,
                             log: Callable[[str], None] = print,
                             round_steps: int = 1):
    """A ``TrainerCallback`` that finalizes every Trainer save atomically and saves on SIGINT/SIGTERM.

    Give the Trainer ``output_dir=run_dir``: it writes ``run_dir/checkpoint-<step>`` (the staging
    directory), and ``on_save`` moves it under ``run_dir/checkpoints/``. After ``trainer.train()``
    returns, ``callback.interrupted`` names the signal (or is None) and ``callback.last_checkpoint``
    is the newest finalized checkpoint. With ``round_steps > 1`` (one generation round serves
    several optimizer steps) a signal saves at the end of the round, the only place a resume can
    continue exactly.
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

        def restore_signals(self):
            """Put back the SIGINT/SIGTERM handlers of before training (idempotent)."""
            self._restore()

        def on_train_begin(self, args, state, control, **kwargs):
            self._install()

        def on_train_end(self, args, state, control, **kwargs):
            self._restore()

        def on_step_end(self, args, state, control, **kwargs):
            if _any_rank(self.interrupted is not None) and self.interrupted is None:
                self.interrupted = "SIGTERM"  # another rank was signalled: every rank must save at this step
            if self.interrupted is not None and state.global_step % round_steps == 0:
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
            _wait_for_everyone()  # the stop and its resume command are said once, by the TrainingStopped it ends in
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


def clean_staging(run_dir: str | os.PathLike) -> list[Path]:
    """Remove ``run_dir/checkpoint-*`` leftovers: staging directories of a save that never finished."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        return []
    gone = [d for d in run_dir.iterdir() if d.is_dir() and CHECKPOINT_NAME.match(d.name)]
    for d in gone:
        shutil.rmtree(d, ignore_errors=True)
    return gone


__all__ = [
    "RUN_COMPLETE", "RunLock", "RunLocked", "finished_run", "mark_finished", "EXIT_CODES", "CheckpointError", "EarlierRun",
    "clean_staging", "finalize_checkpoint", "make_checkpoint_callback", "newest_intact", "resolve_resume",
    "resume_hint", "rotate", "set_aside_later", "trim_metrics", "write_marker",
]
