"""The one trainer loop: a TRL trainer run to its end, or stopped with nothing complete lost.

GRPO runs and stages (TRL's ``GRPOTrainer``) and SFT stages (``SFTTrainer``) all train through
:func:`run_trainer`, so every guarantee holds for both:

- SIGINT/SIGTERM: the step in flight finishes and is saved (the checkpoint callback's doing), then
  :class:`TrainingStopped` with exit code 130/143 and the resume command;
- a full disk during a save: the half-written save is removed, the older checkpoints stay, exit
  :data:`DISK_FULL_EXIT_CODE` naming the newest complete checkpoint;
- CUDA out of memory: a checkpoint, the estimate against the measured peak and a smaller config
  (:func:`unsloth_grpo.training.oom.handle_oom`), exit 3;
- a reward that fails on real completions: the reward, the sample and a checkpoint to resume from,
  exit :data:`REWARD_FAILED_EXIT_CODE`;
- logits gone NaN while generating (a training that diverged): the step named, with the newest
  checkpoint to resume from, exit :data:`DIVERGED_EXIT_CODE`;
- the vLLM server a CPU run generates on stops answering: its address, a checkpoint to resume from once
  it runs again, exit :data:`SERVER_LOST_EXIT_CODE`;
- a checkpoint file that would run code when read back: refused unread;
- the signal handlers of before training are back however the run ends.

The run lock (one training per output directory) is held around the whole run by
:func:`unsloth_grpo.training.train.train`, every stage included. ::

    saver = ckpt.make_checkpoint_callback(out, ...)       # one of the trainer's callbacks
    run_trainer(trainer, cfg, saver, resume_from=..., stage=(i, name), hint=hint)
    trainer.save_model(out)                                # only a run that finished gets here
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Callable

from unsloth_grpo.config import RecipeConfig
from unsloth_grpo.hardware.launch import detect
from unsloth_grpo.training import checkpoint as ckpt
from unsloth_grpo.training.results import TrainingStopped

#: Exit status of a run stopped by a full disk (a save failed; the older checkpoints are intact).
DISK_FULL_EXIT_CODE = 4
#: Exit status of a run stopped by a reward that failed on real completions (a checkpoint is kept).
REWARD_FAILED_EXIT_CODE = 5
#: Exit status of a run whose model's logits went NaN while it generated (the training diverged).
DIVERGED_EXIT_CODE = 6
#: Exit status of a run whose vLLM server stopped answering (a checkpoint is kept).
SERVER_LOST_EXIT_CODE = 7


def run_trainer(trainer, cfg: RecipeConfig, saver, *, resume_from: ckpt.CheckpointInfo | None = None,
                stage: tuple[int, str | None] = (0, None), hint: str | None = None,
                log: Callable[[str], None] = print, fresh_dir: bool = False, decision=None) -> None:
    """``trainer.train()``, resumed from ``resume_from`` when given, with the guarantees above.

    ``saver`` is the trainer's checkpoint callback (:func:`unsloth_grpo.training.checkpoint.
    make_checkpoint_callback`), writing under ``cfg.output_dir``; ``stage`` and ``hint`` label the
    checkpoints and the resume command; ``fresh_dir`` says this run made its output directory (a
    reward that fails before the first step leaves none behind); ``decision`` is the run's
    (:class:`unsloth_grpo.hardware.backend.Decision`), for the out-of-memory report. Returns when
    training finished; raises :class:`TrainingStopped` (or ``CheckpointError``) otherwise.
    """
    out = Path(cfg.output_dir)
    main_process = detect().is_main
    cpu_ranks = detect().world_size > 1 and bool(getattr(trainer.args, "use_cpu", False))

    def finalize(staged: Path) -> Path:  # under checkpoints/, where --resume looks
        return ckpt.finalize_checkpoint(staged, out, step=trainer.state.global_step, stage=stage[0],
                                        stage_name=stage[1], keep_last=cfg.run.keep_last)

    try:
        with _cpu_resume_fix() if cpu_ranks else contextlib.nullcontext():
            trainer.train(resume_from_checkpoint=str(resume_from.path) if resume_from is not None else None)
    except Exception as exc:
        stop = _stopped(exc, trainer, cfg, resume_from=resume_from, finalize=finalize, hint=hint, log=log,
                        fresh_dir=fresh_dir, main_process=main_process, decision=decision)
        if stop is exc:
            raise
        if isinstance(stop, ckpt.CheckpointError):  # the file's own words say it all
            raise stop from None
        raise stop from exc
    finally:
        saver.restore_signals()  # also when training raised: Ctrl-C must work again afterwards
    if saver.interrupted:  # the checkpoint is saved; the run is not finished, so no final adapter
        raise TrainingStopped(ckpt.EXIT_CODES[saver.interrupted],
                              f"{saver.interrupted} at step {trainer.state.global_step}; checkpoint: "
                              f"{saver.last_checkpoint or ckpt.latest_checkpoint(out)}; resume with: "
                              f"{hint or ckpt.resume_hint(out)}")


def _cpu_resume_fix():
    from unsloth_grpo.training.distributed import cpu_resume_fix

    return cpu_resume_fix()


def _stopped(exc: Exception, trainer, cfg: RecipeConfig, *, resume_from, finalize, hint, log, fresh_dir,
             main_process, decision) -> BaseException:
    """What a failed ``trainer.train()`` becomes: a stop with its exit code, a refused checkpoint,
    or ``exc`` itself (an error this loop has no answer for)."""
    out = Path(cfg.output_dir)
    if resume_from is not None and _refused_pickle(exc):
        return ckpt.CheckpointError(
            f"{resume_from.path} holds a file that is not plain tensor data ({str(exc).splitlines()[0]}); "
            "it was refused unread, because loading it could run code. Resume only from checkpoints "
            "that this tool wrote; start a new run otherwise")
    if disk_full(exc):
        half = ckpt.clean_staging(out) if main_process else []
        last = ckpt.latest_checkpoint(out)
        return TrainingStopped(
            DISK_FULL_EXIT_CODE,
            f"the disk is full ({exc}) at step {trainer.state.global_step}; "
            + (f"the half-written save {half[0].name} was removed; " if half else "")
            + (f"the newest complete checkpoint {last} is untouched. Free some space, then resume with: "
               f"{hint or ckpt.resume_hint(out)}" if last else
               "no checkpoint was completed. Free some space and start again"))
    from unsloth_grpo.rewards import RewardError
    from unsloth_grpo.training.cdf_sampling import NonFiniteProbabilities

    reward_error = _in_chain(exc, RewardError)
    if reward_error is not None:  # a reward failed on real completions: no traceback from deep in TRL
        return _stopped_by_reward(reward_error, trainer, out, finalize=finalize, fresh_dir=fresh_dir,
                                  main_process=main_process, hint=hint, log=log)
    lost = _in_chain(exc, _server_error_class()) or _silent_server(exc, cfg)
    if lost is not None:  # the server went away mid-run: no traceback from deep in TRL
        return _stopped_by_server(lost, trainer, cfg, finalize=finalize, main_process=main_process, hint=hint,
                                  log=log)
    nan = _in_chain(exc, NonFiniteProbabilities) or (_in_chain(exc, RuntimeError) if _MULTINOMIAL_NAN in str(exc)
                                                     else None)
    if nan is not None:  # the model's logits went NaN: generating on would train on noise
        last = ckpt.latest_checkpoint(out)
        return TrainingStopped(
            DIVERGED_EXIT_CODE,
            f"{nan} -- while generating the completions of step {int(trainer.state.global_step) + 1}: the training "
            "diverged. " + (f"The newest checkpoint {last} was saved before; resume from it with a lower "
                            f"training.learning_rate: {hint or ckpt.resume_hint(out)} training.learning_rate=..."
                            if last else "No checkpoint was kept; start again with a lower training.learning_rate"))
    from unsloth_grpo.training import oom

    # torch.OutOfMemoryError, and the RuntimeError("CUDA out of memory") that kernels of
    # bitsandbytes, Unsloth or vLLM raise instead
    if not oom.is_oom(exc):
        return exc
    from unsloth_grpo.hardware import planner

    try:
        estimate = planner.estimate_for_config(cfg, decision=decision)
    except Exception:  # noqa: BLE001 - an unknown architecture has no estimate
        estimate = None
    gpu = decision.card.as_gpu() if decision is not None else None
    code = oom.handle_oom(trainer, cfg, exc, estimate, gpu=gpu, finalize=finalize)
    log(f"resume with: {hint or ckpt.resume_hint(out)}")
    return TrainingStopped(code, "CUDA ran out of memory; a checkpoint and a smaller config were written")


def disk_full(exc: BaseException) -> bool:
    """True for ENOSPC/EDQUOT, also when a library (safetensors) wraps it in its own error."""
    import errno

    for _ in range(8):  # the exception, its cause, their causes
        if exc is None:
            return False
        if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT):
            return True
        text = str(exc)
        if "No space left on device" in text or "os error 28" in text or "Disk quota exceeded" in text:
            return True
        exc = exc.__cause__ or exc.__context__
    return False


#: What ``torch.multinomial`` says of a row of NaN (training.cdf_sampling off).
_MULTINOMIAL_NAN = "probability tensor contains either `inf`, `nan` or element < 0"


def _in_chain(exc: BaseException | None, kind: type) -> BaseException | None:
    """The exception of type ``kind`` behind ``exc`` (itself, its cause, their causes), or None."""
    for _ in range(8):
        if exc is None:
            return None
        if isinstance(exc, kind):
            return exc
        exc = exc.__cause__ or exc.__context__
    return None


def _stopped_by_reward(error, trainer, out: Path, *, finalize: Callable[[Path], Path],
                       fresh_dir: bool, main_process: bool, hint: str | None, log: Callable[[str], None]):
    """The :class:`TrainingStopped` for a reward that failed mid-run: the reward, the sample and the
    checkpoint to resume from once the reward is fixed (saved now, as Ctrl-C saves, when the newest
    one is older than this step). Before the first step there is nothing to keep: a directory this
    run made is removed, as after a failed start."""
    step = int(trainer.state.global_step)
    where = f"{error} -- while scoring the completions of step {step + 1}"
    if step == 0:
        if fresh_dir and main_process:
            import shutil

            shutil.rmtree(out, ignore_errors=True)
        return TrainingStopped(REWARD_FAILED_EXIT_CODE, f"{where}, before any step was trained, so nothing was kept. "
                               "Fix the reward (`unsloth-grpo rewards check` scores it on real completions) and "
                               "start again")
    saved = _checkpoint_now(trainer, out, finalize=finalize, main_process=main_process, log=log)
    if not saved:
        return TrainingStopped(REWARD_FAILED_EXIT_CODE, f"{where}; no checkpoint could be kept. Fix the reward and "
                               "start again")
    return TrainingStopped(REWARD_FAILED_EXIT_CODE, f"{where}; checkpoint {saved[-1].path} holds the run at step "
                           f"{saved[-1].step}. Fix the reward, then resume with: {hint or ckpt.resume_hint(out)}")


def _checkpoint_now(trainer, out: Path, *, finalize: Callable[[Path], Path], main_process: bool,
                    log: Callable[[str], None]) -> list:
    """The run's checkpoints, with one of the current step saved now (as Ctrl-C saves) when the newest is older."""
    step = int(trainer.state.global_step)
    saved = ckpt.list_checkpoints(out)
    if (not saved or saved[-1].step != step) and step > 0 and main_process and detect().world_size == 1:
        from unsloth_grpo.training import oom

        staged = oom.save_checkpoint(trainer, log)
        if staged is not None and Path(staged).name.startswith(ckpt.PREFIX):
            finalize(Path(staged))
            saved = ckpt.list_checkpoints(out)
    return saved


def _server_error_class():
    from unsloth_grpo.hardware.vllm_server import ServerError

    return ServerError


def _silent_server(exc: BaseException, cfg: RecipeConfig):
    """A :class:`ServerUnreachable` when the run generates on a vLLM server that no longer answers: whatever
    failed first (an answer cut short, a library's own HTTP call), the lost server is what the user must fix,
    and the run ends as a lost server does. None when there is no server or it still answers."""
    if not cfg.model.vllm_server:
        return None
    from unsloth_grpo.hardware.launch import parse_vllm_server
    from unsloth_grpo.hardware.vllm_server import ServerClient, ServerUnreachable

    url = parse_vllm_server(cfg.model.vllm_server)[0]
    try:
        ServerClient(url, timeout=5).get("/health")
        return None
    except ServerUnreachable as gone:
        return ServerUnreachable(url, f"{gone} (the run failed first with {type(exc).__name__}: "
                                 f"{str(exc).splitlines()[0] if str(exc) else ''})")
    except Exception:  # noqa: BLE001 - it answers, if not with health: the failure is not the server's
        return None


def _stopped_by_server(error, trainer, cfg: RecipeConfig, *, finalize: Callable[[Path], Path], main_process: bool,
                       hint: str | None, log: Callable[[str], None]) -> TrainingStopped:
    """The :class:`TrainingStopped` for a vLLM server that failed mid-run (killed, restarted without the adapter,
    refusing a request): what it said, the checkpoint kept (saved now when the newest is older), and the two
    commands that continue the run: the server's start, then the resume."""
    from unsloth_grpo.hardware.launch import parse_vllm_server
    from unsloth_grpo.training.vllm_server import server_start_line

    out = Path(cfg.output_dir)
    saved = _checkpoint_now(trainer, out, finalize=finalize, main_process=main_process, log=log)
    served = getattr(getattr(getattr(trainer, "vllm_generation", None), "vllm_client", None), "root", None)
    start = server_start_line(cfg, served, *parse_vllm_server(cfg.model.vllm_server)[1:]) \
        if cfg.model.vllm_server and served else None
    kept = (f"the newest checkpoint {saved[-1].path} holds the run at step {saved[-1].step}" if saved else
            "no checkpoint was kept (nothing trained yet)")
    again = f"start the server again ({start})" if start else "start the server again"
    return TrainingStopped(SERVER_LOST_EXIT_CODE,
                           f"{error} -- at step {int(trainer.state.global_step) + 1}; {kept}. To continue: {again}, "
                           f"then resume with: {hint or ckpt.resume_hint(out)}")


def _refused_pickle(exc: BaseException) -> bool:
    """``torch.load(..., weights_only=True)`` (what transformers uses to resume) refused a pickle
    that asks to build arbitrary objects: a checkpoint file someone else crafted or damaged."""
    import pickle

    return isinstance(exc, pickle.UnpicklingError) and "weights only" in str(exc).lower()


__all__ = ["DISK_FULL_EXIT_CODE", "DIVERGED_EXIT_CODE", "REWARD_FAILED_EXIT_CODE", "SERVER_LOST_EXIT_CODE",
           "disk_full", "run_trainer"]
