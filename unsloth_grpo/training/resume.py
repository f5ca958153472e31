"""Where a run continues: the checkpoint a resume starts from, and every refusal of a resume, raised
before the run's directory is touched (a refused command leaves the run as it was found)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Callable

from unsloth_grpo.config import RecipeConfig
from unsloth_grpo.training.held_out import refuse_other_held_out


def check_output_dir(cfg: RecipeConfig, resume=None) -> None:
    """Raise now what :func:`~unsloth_grpo.training.train.train` would raise about ``cfg.output_dir`` with this ``resume``: an earlier
    run there (:class:`~unsloth_grpo.training.checkpoint.EarlierRun`), a resume that cannot go on. It
    changes nothing: a notebook asks it before it writes its own files (the baseline's evaluation) into
    the run's folder, so a second "Run all" leaves the first run as it was."""
    if cfg.stages:
        stage_plan(cfg, resume)
    else:
        resume_point(cfg, resume, 0, log=lambda _m: None)


def stage_plan(cfg: RecipeConfig, resume) -> tuple[int, object]:
    """(first stage to run, checkpoint to resume it from) of a run with stages, every refusal of the
    resume raised first; nothing is written."""
    from unsloth_grpo.training.stages import plan_resume, stage_config

    first, resume_from = plan_resume(cfg, resume)
    if resume_from is not None:
        refuse_resume_from(stage_config(cfg, first), resume_from, resume, first)
    if resume_from is not None or 1 < first <= len(cfg.stages):  # the start read back must match the end
        refuse_other_held_out(cfg, Path(cfg.output_dir) / "eval_before")
    return first, resume_from


def resume_point(cfg: RecipeConfig, resume, stage_index: int, log: Callable[[str], None] = print):
    """The checkpoint to continue from (None for a fresh run), refusing mismatched resumes."""
    from unsloth_grpo.training import checkpoint as ckpt

    resume_from = resume if isinstance(resume, ckpt.CheckpointInfo) else ckpt.resolve_resume(resume, cfg.output_dir, log=log)
    refuse_resume_from(cfg, resume_from, resume, stage_index)
    return resume_from


def refuse_resume_from(cfg: RecipeConfig, resume_from, resume, stage_index: int) -> None:
    """Raise CheckpointError when training ``cfg`` (stage ``stage_index`` of a multi-stage run, 0 for a
    run without stages) cannot continue from ``resume_from`` (None: a fresh start, which an earlier
    run's checkpoints or finished adapter refuse). It changes nothing, so a run with stages asks it
    before it lays out its directory: a refused resume leaves the run as it was."""
    from unsloth_grpo.training import checkpoint as ckpt
    from unsloth_grpo.runs import other_task

    why = other_task(ckpt.run_dir_of(resume_from.path), cfg.task) if resume_from is not None else None
    if why is not None:
        raise ckpt.CheckpointError(why)
    if resume_from is not None and resume_from.stage != stage_index:
        raise ckpt.CheckpointError(
            f"{resume_from.path} belongs to stage {resume_from.stage} of a multi-stage run; resume it with that "
            f"run's config, which lists the stages ({ckpt.resume_hint(ckpt.run_dir_of(resume_from.path))})")
    if resume_from is None and not resume and ckpt.list_checkpoints(cfg.output_dir):
        raise ckpt.EarlierRun.over(cfg.output_dir, "checkpoints of an earlier run (latest: "
                                   f"{ckpt.latest_checkpoint(cfg.output_dir)})")
    round_steps = generation_round_steps(cfg)
    if resume_from is not None and resume_from.step % round_steps:
        aligned = [c for c in ckpt.list_checkpoints(ckpt.run_dir_of(resume_from.path))
                   if c.step % round_steps == 0 and c.step < resume_from.step and c.stage == resume_from.stage]
        raise ckpt.CheckpointError(
            f"{resume_from.path} was saved at step {resume_from.step}, inside a generation round: with "
            f"training.steps_per_generation={cfg.training.steps_per_generation} one round of completions serves "
            f"{round_steps} optimizer steps, and TRL does not save the completions it still holds, so this run "
            "could not continue exactly. "
            + (f"Resume from {aligned[-1].path} (step {aligned[-1].step}, a round boundary) instead"
               if aligned else f"No checkpoint of this run is at a round boundary (a multiple of {round_steps}); "
                               "start again with training.save_steps a multiple of it"))
    max_steps = cfg.training.max_steps
    if resume_from is not None and resume_from.step >= max_steps:
        key = f"stages.{stage_index - 1}.max_steps" if stage_index else "training.max_steps"  # the key the user sets
        raise ckpt.CheckpointError(
            f"{resume_from.path} is at step {resume_from.step} and {key} is {max_steps}: there is "
            f"nothing left to train. To train further, add {key}=N with N > {resume_from.step} "
            "to the resume command")
    finished = ckpt.finished_run(cfg.output_dir) if stage_index == 0 and resume_from is None else None
    if finished is not None:  # a stage directory is rewritten by the stage runner on purpose
        if resume:
            raise ckpt.CheckpointError(ckpt.finished_without_checkpoint(cfg.output_dir, finished["step"]))
        earlier = (f"{cfg.output_dir} holds a run that finished at step {finished['step']} (adapter, metrics.jsonl); "
                   "a new run there would overwrite it. Nothing was changed: ")
        raise ckpt.EarlierRun(earlier + ckpt.own_directory_hint(cfg.output_dir) + ", or move that directory away",
                              earlier + "choose another --output-dir, or move that directory away to start over")


def generation_round_steps(cfg: RecipeConfig) -> int:
    """Optimizer steps served by one round of generation: TRL generates every
    ``steps_per_generation x num_iterations`` micro-batches and steps the optimizer every
    ``gradient_accumulation_steps`` of them. Resume is exact only at a round boundary."""
    from unsloth_grpo.training.trl_schema import field_table

    t = cfg.training
    iterations = t.get("num_iterations", field_table()["num_iterations"].default)  # TRL's default: 1
    micro = (t.steps_per_generation or t.gradient_accumulation_steps) * int(iterations)
    return micro // math.gcd(micro, t.gradient_accumulation_steps)


__all__ = ["check_output_dir", "generation_round_steps", "refuse_resume_from", "resume_point", "stage_plan"]
