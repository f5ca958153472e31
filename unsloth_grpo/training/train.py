"""A training run: decide, read the data, then train its stages (one GRPO stage, or the config's list).

:func:`train` reads top to bottom as the run: the one check (config, machine, backend: the decision),
the data and the rewards tried on it, the run lock, then the stages: one GRPO training
(:func:`train_grpo`) or the config's list of stages on one model (:func:`_train_stages`, SFT stages by
:func:`unsloth_grpo.training.stages.train_sft`, the stages' bookkeeping in that module, which needs
nothing from this one). Everything that can be checked without a model is checked first, so a typo
costs seconds, not a model load. Outputs land in ``cfg.output_dir``:

- the LoRA adapter with its tokenizer (``adapter_config.json``, ``adapter_model.safetensors``, ...),
- ``metrics.jsonl``: one JSON object per logged step, with TRL's keys plus ``step``,
- ``config.yaml``: the resolved config, loadable with ``--config``,
- ``run_info.json``: backend, device, dtype, package versions, dataset size.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Callable

from unsloth_grpo.config import ConfigError, RecipeConfig, dump_config
from unsloth_grpo.data import DataError
from unsloth_grpo.hardware.launch import detect
from unsloth_grpo.runs import package_versions
from unsloth_grpo.training import generation_hooks, sft_replay
from unsloth_grpo.training.checks import check_before_loading, check_rewards_on_data
from unsloth_grpo.training.held_out import (eval_kwargs, evaluate_held_out, headroom_end, headroom_start,
                                            held_out_rows, load_task_dataset, report_before_after)
from unsloth_grpo.training.loop import DISK_FULL_EXIT_CODE, REWARD_FAILED_EXIT_CODE, disk_full
from unsloth_grpo.training.results import TrainingStopped, TrainResult, metrics_row
from unsloth_grpo.training.resume import check_output_dir, generation_round_steps, resume_point, stage_plan
from unsloth_grpo.training.trainer_args import grpo_args

__all__ = ["DISK_FULL_EXIT_CODE", "REWARD_FAILED_EXIT_CODE", "TrainResult", "TrainingStopped", "build_grpo_args",
           "check_output_dir", "disk_full", "drop_reference_adapter", "is_main_process", "load_task_dataset",
           "metrics_row", "train", "train_grpo"]

#: The name TRL's GRPOTrainer gives the frozen copy of an already trained adapter it measures the KL against.
REFERENCE_ADAPTER = "ref"


def is_main_process() -> bool:
    """Rank 0 of a torchrun/accelerate launch, or the only process."""
    return detect().is_main


def train(cfg: RecipeConfig, *, callbacks: list | None = None, log: Callable[[str], None] = print,
          dataset=None, resume=None, loaded=None, decision=None,
          warmup_categories: list[str] | None = None) -> TrainResult:
    """Run the training described by ``cfg`` and return its metrics and outputs.

    ``resume``: None (a fresh run; refused when the output directory holds checkpoints), True
    (the latest complete checkpoint, or a fresh start when there is none) or a run/checkpoint path.
    A config with ``stages`` runs them in order (:func:`_train_stages`), on one model.
    ``decision``: the run's decision, from the check the caller made already
    (:func:`unsloth_grpo.training.checks.check_before_loading`, as the recipe runner does); when
    None, that check is made here, once. ``loaded`` reuses a model loaded already (its config is
    checked, not the machine). SIGINT/SIGTERM save a checkpoint and raise :class:`TrainingStopped`
    with exit code 130/143 (:func:`unsloth_grpo.training.loop.run_trainer`). ``warmup_categories``: the
    kinds kept by the SFT warm-up that one GRPO training continues (the real-model benchmark's arms).
    """
    from unsloth_grpo.hardware.console import quiet_third_party
    from unsloth_grpo.training import checkpoint as ckpt

    quiet_third_party()
    if loaded is not None and loaded.trained_in is not None:
        raise ValueError(ckpt.trained_already(loaded.trained_in))
    if decision is None:  # every config problem, this machine, the backend, TRL's own checks: once
        decision = check_before_loading(cfg, environment=loaded is None)
    # malformed data, and a reward that fails on it, stop the run here: before the run lock, the
    # output directory and the model
    data = dataset if dataset is not None else load_task_dataset(cfg)
    check_rewards_on_data(cfg, data)
    if cfg.evaluation.before_after or cfg.evaluation.every:
        held_out_rows(cfg)  # read once now: a held-out file that does not load stops the run before the model
    stage_rows = _stage_rows(cfg, data)
    # One training per output directory, every stage included: while this one runs (rank 0 holds the
    # lock), a second is refused. Taken at once when the directory exists, so the second run hears it
    # before any work; else as soon as the run makes the directory.
    lock = ckpt.RunLock(cfg.output_dir) if is_main_process() else None
    refused, given, trains = False, loaded, True
    try:
        if lock is not None and Path(cfg.output_dir).is_dir():
            lock.acquire()
        if cfg.stages:
            from unsloth_grpo.training.stages import prepare_stages, stage_config

            # every refusal of the resume comes before the directory is laid out (config.yaml included)
            plan = first, resume_from = stage_plan(cfg, resume)
            prepare_stages(cfg, resume, dataset=data, lock=lock, log=log, plan=plan)
            trains = first <= len(cfg.stages)
            if loaded is None and trains:  # one model for every stage
                loaded = _load(stage_config(cfg, first), decision, log)
            return _train_stages(cfg, loaded, first=first, resume_from=resume_from, decision=decision,
                              callbacks=callbacks, log=log, dataset=data, stage_rows=stage_rows)
        return train_grpo(cfg, decision=decision, callbacks=callbacks, log=log, dataset=data, resume=resume,
                          loaded=loaded, lock=lock, warmup_categories=warmup_categories)
    except (ConfigError, DataError, ckpt.CheckpointError):
        refused = True  # bad input: the directory is left as it was found, lock file included
        raise
    finally:
        if given is not None and trains and not refused:  # the caller's model holds this run's adapter now
            given.trained_in = str(cfg.output_dir)
        if lock is not None:  # the run is over: its lock file goes with it (one found there is kept on a refusal)
            lock.release(remove=lock.created or not refused)


def _stage_rows(cfg: RecipeConfig, data) -> dict[int, object]:
    """The prompts of each GRPO stage that sets ``data.*`` of its own (its rows, by stage number), read and
    tried on the stage's rewards now, before the run lock and the model; an SFT stage with ``data.*`` of its
    own has its worked examples made now for the same reason. The other stages train on ``data``."""
    from unsloth_grpo.training.stages import sft_dataset_for, stage_config

    rows = {}
    for i, stage in enumerate(cfg.stages, 1):
        if not stage.data:
            continue
        scfg = stage_config(cfg, i)
        if stage.kind == "sft":
            sft_dataset_for(scfg, stage.num_examples)
        else:
            rows[i] = load_task_dataset(scfg)
            check_rewards_on_data(scfg, rows[i])
    return rows


def _train_stages(cfg: RecipeConfig, loaded, *, first: int, resume_from, decision=None,
                  callbacks: list | None = None, log: Callable[[str], None] = print, dataset=None,
                  stage_rows: dict | None = None) -> TrainResult:
    """Run ``cfg.stages`` from stage ``first`` on, in order, on one loaded model and its adapter
    (:func:`~unsloth_grpo.training.stages.prepare_stages` says where to start and lays out the
    directory; ``resume_from`` is the checkpoint it found); return the combined TrainResult.

    ``loaded`` is the run's model (None only when no stage is left to run); a GRPO stage is
    :func:`train_grpo`, an SFT stage :func:`~unsloth_grpo.training.stages.train_sft`, each through
    the same loop, under the run's lock, which the caller holds until the last stage ends;
    ``decision`` is the run's, made by its one check. The stages' bookkeeping (directories, summary,
    combined metrics, the held-out evaluation around them) is :mod:`unsloth_grpo.training.stages`'.
    """
    from unsloth_grpo.training import checkpoint as ckpt
    from unsloth_grpo.training import stages as st

    run = Path(cfg.output_dir)
    n = len(cfg.stages)
    main = detect().is_main
    start = time.time()
    hint = ckpt.resume_hint(run)
    held_out, graded_start = st.evaluation_start(cfg, loaded, first, resume_from, log) if main else (None, None)
    summary = st.read_summary(run)[: first - 1]
    total_steps = sum(s["steps"] for s in summary)
    headroom = None  # the last GRPO stage's, before and after
    for i in range(first, n + 1):
        stage = cfg.stages[i - 1]
        scfg = st.stage_config(cfg, i)
        step_resume = resume_from if (resume_from is not None and i == resume_from.stage) else None
        # one model for every stage: the adapter carries over in memory, and from disk into the first (also
        # into a stage resumed mid-way, whose start is graded with it before its checkpoint replaces it)
        if i == first and i > 1:
            st.load_adapter_weights(loaded.model, st.stage_dir(cfg, i - 1))
            log(f"stage {i}: starting from the adapter of stage {i - 1} ({st.stage_dir(cfg, i - 1)})")
        before = st.lora_state(loaded.model)
        log(f"--- stage {i}/{n}: {stage.name} ({stage.kind}, {stage.max_steps} steps, "
            f"lr {scfg.training.learning_rate:g})")
        if stage.kind == "sft":
            result = st.train_sft(scfg, loaded, num_examples=stage.num_examples, callbacks=callbacks, log=log,
                               resume=step_resume, stage=(i, stage.name), hint=hint, decision=decision)
        else:
            rows = (stage_rows or {}).get(i) if stage.data else dataset  # None: train_grpo reads the stage's own
            result = train_grpo(scfg, decision=decision, callbacks=callbacks, log=log, dataset=rows,
                                resume=step_resume, loaded=loaded, stage=(i, stage.name), hint=hint,
                                warmup_categories=st.warmup_categories(cfg, i))
            headroom = result.headroom or headroom
        change = st.change_l2(before, st.lora_state(loaded.model)) if step_resume is None else None
        entry = st.summarize_stage(i, stage, result, change, scfg)
        summary.append(entry)
        total_steps += result.global_step
        if main:
            d = st.stage_dir(cfg, i)
            (d / st.STAGE_COMPLETE).write_text(json.dumps({"stage": i, "name": stage.name, "kind": stage.kind,
                                                        "steps": result.global_step}))
            (run / st.SUMMARY_FILE).write_text(json.dumps(summary, indent=2))
            st.write_combined(cfg)
    evaluation = None
    if main and n:
        st.copy_adapter(st.stage_dir(cfg, n), run)
        st.write_combined(cfg)
        (run / st.SUMMARY_FILE).write_text(json.dumps(summary, indent=2))
        log("stages summary:\n" + st.describe_summary(summary))
        if graded_start is not None and first <= n:
            evaluation = st.evaluation_end(cfg, loaded, held_out, graded_start, log, headroom=headroom)
        (run / st.SUMMARY_FILE).write_text(json.dumps(st.add_held_out(cfg, summary), indent=2))
    metrics = st.combined_metrics(cfg)
    backend = loaded.info.to_dict() if loaded is not None else {}
    return TrainResult(run, metrics, backend, time.time() - start, total_steps, evaluation=evaluation,
                       headroom=headroom, stages=summary)


def train_grpo(cfg: RecipeConfig, *, decision=None, callbacks=None, log: Callable[[str], None] = print,
               dataset=None, resume=None, loaded=None, stage: tuple[int, str | None] = (0, None),
               hint: str | None = None, lock=None, warmup_categories: list[str] | None = None) -> TrainResult:
    """One GRPO training (a run, or a stage of one) on a checked config, under the run lock.

    ``decision`` is the run's (None only for a model loaded already); ``loaded`` reuses a loaded
    model (the stage runner's, a notebook's); ``stage`` and ``hint`` label checkpoints and the
    resume message; ``lock`` (the run's, when this training makes the run directory) is taken as
    soon as the directory exists; ``warmup_categories``: the kinds its warm-up kept, for the trick watcher's
    fixes (:func:`~unsloth_grpo.training.stages.warmup_categories`).
    """
    from unsloth_grpo.training import checkpoint as ckpt
    from unsloth_grpo.training import distributed
    from unsloth_grpo.training.loop import run_trainer

    resume_from = resume_point(cfg, resume, stage[0], log)
    _say_where_training_starts(cfg, resume_from, resume, log)
    layout = distributed.detect()
    if layout.is_main:  # per-device and global batch numbers, once per launch
        log(distributed.describe_layout(cfg, layout))
    reward_funcs, weights, tool_kwargs = _rewards_and_tools(cfg)
    if dataset is None:  # a stage of a multi-stage run
        dataset = load_task_dataset(cfg)
    _memory_warnings(cfg, log, decision)
    replay = sft_replay.replay_examples(cfg, warmup_categories) if cfg.training.sft_replay else None
    out, main_process = Path(cfg.output_dir), layout.is_main
    fresh_dir = not out.exists()
    if main_process:  # under torchrun/accelerate only rank 0 writes outputs
        if lock is not None and not lock.held:
            lock.acquire()  # a new directory: nobody could have held it before it existed
        _prepare_output_dir(cfg, resume_from, log)
    start = time.time()
    loaded, dataset = _load_for_training(cfg, decision, loaded, dataset, log,
                                         remove_on_failure=fresh_dir and main_process)
    args = build_grpo_args(cfg, loaded.info, weights=weights)
    if main_process:
        _write_run_info(cfg, loaded, dataset)
    saver = ckpt.make_checkpoint_callback(out, keep_last=cfg.run.keep_last, stage=stage[0],
                                          stage_name=stage[1], log=log,
                                          round_steps=generation_round_steps(cfg))
    trainer, health = _make_trainer(cfg, loaded, args, dataset, reward_funcs, weights, tool_kwargs,
                                    [saver, *(callbacks or [])], resume_from, main_process, log,
                                    warmup_categories=warmup_categories)
    generation_hooks.attach(cfg, trainer, loaded, health, main_process, log)
    if replay is not None:
        sft_replay.attach(trainer, replay, weight=cfg.training.sft_replay, seed=cfg.seed, log=log,
                          batch_size=cfg.training.get("per_device_train_batch_size", 8))
    if cfg.training.skip_flat_steps:  # imported here: it imports transformers
        from unsloth_grpo.training import flat_steps

        flat_steps.attach(trainer, log=log if main_process else None)
    held_out, before = _held_out_start(cfg, trainer, loaded, stage, main_process)
    headroom = headroom_start(cfg, trainer.model, loaded.tokenizer, dataset, out, log,
                              resumed=resume_from is not None) if main_process else None
    log(f"training: {len(dataset)} prompts, {cfg.training.max_steps} steps, "
        f"{cfg.training.num_generations} generations per prompt -> {out}")
    try:
        run_trainer(trainer, cfg, saver, resume_from=resume_from, stage=stage, hint=hint, log=log,
                    fresh_dir=fresh_dir, decision=decision)
    finally:
        drop_reference_adapter(loaded.model)
    generation_hooks.release(trainer)
    trainer.save_model(str(out))  # rank 0 only, inside the Trainer
    summary = None
    if trainer.is_world_process_zero():
        summary, headroom = _finish_run(cfg, trainer, loaded, held_out, before, headroom, log)
    metrics_path = out / "metrics.jsonl"
    metrics = [json.loads(line) for line in metrics_path.read_text().splitlines()] if metrics_path.exists() else []
    return TrainResult(out, metrics, loaded.info.to_dict(), time.time() - start, trainer.state.global_step,
                       evaluation=summary, headroom=headroom)


def drop_reference_adapter(model) -> None:
    """Remove the frozen copy TRL's GRPOTrainer adds to an adapter it is given already trained (``beta > 0``).

    With a KL term (``training.beta``) and a model that already holds a LoRA adapter, as every stage after
    the first does, TRL copies the adapter at the trainer's start into a second one named ``ref`` and takes
    the reference log-probabilities from it: the KL is measured against the previous stage's end (a warm-up,
    say), not against the base model. The copy outlives the trainer, and the next GRPO training on the same
    model (a second stage, a benchmark's next arm, a notebook's next call) would fail to add its own
    (``Adapter with name 'ref' already exists``); it would also be saved beside the adapter. So it goes when
    the training ends, however it ends.
    """
    peft_config = getattr(model, "peft_config", None)
    if isinstance(peft_config, dict) and REFERENCE_ADAPTER in peft_config and hasattr(model, "delete_adapter"):
        model.delete_adapter(REFERENCE_ADAPTER)


def _say_where_training_starts(cfg: RecipeConfig, resume_from, resume, log: Callable[[str], None]) -> None:
    if resume_from is not None:
        log(f"resume: continuing from {resume_from.path} (step {resume_from.step} of {cfg.training.max_steps})")
        redone = _steps_redone(cfg, resume_from)
        if redone is not None:
            log(redone)
    elif resume:
        log(f"resume: {cfg.output_dir} holds no checkpoint yet; training starts at step 0")


def _steps_redone(cfg: RecipeConfig, resume_from) -> str | None:
    """The warning a resume gets when it trains again steps this run has done already (the run went
    past its latest checkpoint: it was killed, or finished between two saves), or None."""
    from unsloth_grpo.training import checkpoint as ckpt

    out = Path(cfg.output_dir)
    if ckpt.run_dir_of(resume_from.path).resolve() != out.resolve():
        return None  # a checkpoint continued in another folder: nothing done there is redone
    done = ckpt.last_logged_step(out)
    finished = ckpt.finished_run(out)
    if finished is not None:
        done = max(done, int(finished.get("step") or 0))
    if done <= resume_from.step:
        return None
    later = [c.step for c in ckpt.list_checkpoints(out) if c.stage == resume_from.stage and c.step > resume_from.step]
    why = (f"An earlier checkpoint was chosen: the later ones (up to step {max(later)}) are moved to "
           f"{ckpt.ABANDONED_DIR}/." if later else
           f"They were never saved as a checkpoint (training.save_steps={cfg.training.save_steps}).")
    return (f"WARNING: this run has trained to step {done}, but its checkpoint {resume_from.path} is at step "
            f"{resume_from.step}: steps {resume_from.step + 1}-{done} are trained again (their rows in metrics.jsonl "
            f"are replaced{', and so is the final adapter of step ' + str(done) if finished else ''}). {why} "
            "To keep the run as it is, stop now (Ctrl-C) and train further in a new --output-dir instead")


def _rewards_and_tools(cfg: RecipeConfig) -> tuple[list, list[float], dict]:
    """The reward functions with their weights, and the trainer's tool arguments ({} without tools)."""
    import unsloth_grpo.tasks  # noqa: F401 - the task registry, through which a task's reward name is found
    from unsloth_grpo.rewards import build_reward_functions
    from unsloth_grpo.tools import build_tools, with_tool_metrics

    reward_funcs, weights = build_reward_functions(cfg.rewards)
    tool_kwargs = build_tools(cfg.tools)  # guarded tools / environment factory; {} without tools
    if tool_kwargs:
        reward_funcs = with_tool_metrics(reward_funcs)  # tools/used_share etc. from the transcripts
    return reward_funcs, weights, tool_kwargs


def _load_for_training(cfg: RecipeConfig, decision, loaded, dataset, log: Callable[[str], None], *,
                       remove_on_failure: bool):
    """The model (``loaded`` when given) and the dataset without the prompts too long for it. A failed
    start, a failed load or every prompt too long, leaves no half output folder behind when
    ``remove_on_failure`` (the run made the folder)."""
    from unsloth_grpo.data import filter_long_prompts, repeated_rows_note

    def remove_folder() -> None:
        if remove_on_failure:
            import shutil

            shutil.rmtree(cfg.output_dir, ignore_errors=True)

    if loaded is None:
        try:
            loaded = _load(cfg, decision, log)
        except BaseException:
            remove_folder()
            raise
    repeated = repeated_rows_note(dataset)
    if repeated:
        log(repeated)
    try:
        return loaded, filter_long_prompts(dataset, loaded.tokenizer, cfg.data.max_prompt_tokens, log=log)
    except DataError:
        remove_folder()  # every prompt too long: the run never started, so no folder either
        raise


def _make_trainer(cfg: RecipeConfig, loaded, args, dataset, reward_funcs: list, weights: list[float],
                  tool_kwargs: dict, callbacks: list, resume_from, main_process: bool, log: Callable[[str], None],
                  warmup_categories: list[str] | None = None):
    """TRL's GRPOTrainer with the run's callbacks (metrics, health, rank logs, then ``callbacks``: the
    checkpoint saver first) and rewards watched (samples, tricks); without vLLM when TRL's colocated
    engine fails to start and the config allows it. Returns the trainer and its health monitor."""
    from trl import GRPOTrainer

    from unsloth_grpo.training import distributed
    from unsloth_grpo.training.monitor import HealthThresholds, make_health_callback
    from unsloth_grpo.training.progress import SampleRecorder, make_progress_callback, use_progress_line

    out = Path(cfg.output_dir)
    if cfg.run.samples_every and main_process:
        recorder = SampleRecorder(out, every=cfg.run.samples_every, num_samples=2, weights=weights,
                                  resume_step=resume_from.step if resume_from is not None else None)
        reward_funcs = recorder.wrap(reward_funcs)  # same names, so the same rewards/<name>/mean keys
    thresholds = HealthThresholds.from_dict(cfg.monitor)
    health = make_health_callback(out if main_process else None, thresholds)
    reward_funcs = _watch_for_tricks(cfg, thresholds, health, reward_funcs, warmup_categories)
    trainer_kwargs = dict(
        model=loaded.model,
        processing_class=loaded.tokenizer,
        reward_funcs=reward_funcs,
        train_dataset=dataset,
        **tool_kwargs,
        callbacks=[
            _metrics_callback(out / "metrics.jsonl"),
            health,
            *distributed.rank_log_callbacks(),  # only when UNSLOTH_GRPO_RANK_LOG_DIR is set
            *callbacks,  # the saver: atomic checkpoints, keep_last rotation, SIGINT/SIGTERM -> save and stop
        ],
    )
    trainer, failure = None, None
    try:
        with generation_hooks.engine_for(loaded.info, log, cfg.output_dir):
            trainer = GRPOTrainer(args=args, **trainer_kwargs)
    except Exception as exc:  # noqa: BLE001 - TRL starts its colocated vLLM engine here
        if not _may_fall_back(cfg, args):
            raise
        failure = f"{type(exc).__name__}: {_first_line(exc)}"
    if trainer is None:  # outside the except block, so the failed engine's frames can be freed first
        from unsloth_grpo.hardware.backend import without_vllm

        loaded.info = without_vllm(loaded.info, failure, log, record=False)
        trainer = GRPOTrainer(args=build_grpo_args(cfg, loaded.info, weights=weights), **trainer_kwargs)
    # one readable line per log, in a terminal and in a notebook; the run's own closing line (the recipe's
    # "done in", a notebook's summary of the TrainResult) says when it ended, so the callback does not
    use_progress_line(trainer, make_progress_callback(end_line=False))
    return trainer, health


def _held_out_start(cfg: RecipeConfig, trainer, loaded, stage: tuple[int, str | None], main_process: bool):
    """The held-out rows (None without evaluation), the periodic evaluation callback, and the
    before-training evaluation (None unless ``evaluation.before_after``, on rank 0)."""
    held_out = held_out_rows(cfg) if (cfg.evaluation.every or cfg.evaluation.before_after) else None
    if cfg.evaluation.every and held_out is not None:
        from unsloth_grpo.evaluation.evaluate import make_eval_callback

        trainer.add_callback(make_eval_callback(trainer, held_out, **eval_kwargs(cfg), every=cfg.evaluation.every))
    before = evaluate_held_out(cfg, trainer.model, loaded.tokenizer, held_out, Path(cfg.output_dir) / "eval_before",
                               name=_starting_model(loaded.info.model_name, stage)) \
        if cfg.evaluation.before_after and held_out is not None and main_process else None
    return held_out, before


def build_grpo_args(cfg: RecipeConfig, info, *, weights: list[float]):
    """TRL's GRPOConfig for this run (see :mod:`unsloth_grpo.training.trainer_args`)."""
    return grpo_args(cfg, info, weights=weights)


def _may_fall_back(cfg: RecipeConfig, args) -> bool:
    """Whether a failed start of TRL's colocated vLLM may be answered by generating without it."""
    return bool(getattr(args, "use_vllm", False)) and getattr(args, "vllm_mode", "") == "colocate" \
        and cfg.model.fast_inference == "auto"


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]


def _metrics_callback(path: Path):
    from transformers import TrainerCallback

    class MetricsJsonl(TrainerCallback):
        """Append each logged training step to ``metrics.jsonl`` (rank 0 only)."""

        def on_log(self, args, state, control, logs=None, **kwargs):
            row = metrics_row(state, logs)
            if state.is_world_process_zero and row is not None:
                with path.open("a") as fh:
                    fh.write(json.dumps(row) + "\n")

    return MetricsJsonl()


def _config_changes(old_path: Path, cfg: RecipeConfig) -> list[str]:
    """Dotted keys whose value differs between a run's saved config.yaml and ``cfg`` (max_steps aside)."""
    from unsloth_grpo.config import ConfigError, config_to_dict, load_config

    try:
        old = config_to_dict(load_config(old_path))
    except (ConfigError, OSError):
        return []
    new = config_to_dict(cfg)

    def flat(d: dict, prefix: str = "") -> dict:
        out = {}
        for k, v in d.items():
            if isinstance(v, dict) and k != "params":
                out.update(flat(v, f"{prefix}{k}."))
            else:
                out[f"{prefix}{k}"] = v
        return out

    a, b = flat(old), flat(new)
    return sorted(k for k in a.keys() | b.keys() if a.get(k) != b.get(k) and k != "training.max_steps")


def _load(cfg: RecipeConfig, decision, log: Callable[[str], None]):
    """The run's model with its LoRA adapter, loaded as the run's ``decision`` says: the one place a
    training loads it."""
    from unsloth_grpo.hardware.backend import load_model

    return load_model(cfg.model, cfg.lora, seed=cfg.seed, decision=decision,
                      gradient_checkpointing=cfg.training.gradient_checkpointing, log=log)


def _memory_warnings(cfg: RecipeConfig, log: Callable[[str], None], decision=None) -> None:
    """The memory planner's warnings for this config on the run's card (``decision``'s); the
    doctor's blocking checks ran before."""
    try:
        from unsloth_grpo.hardware.planner import check_config

        for warning in check_config(cfg, decision=decision):
            log(f"memory: {warning}")
    except Exception as exc:  # noqa: BLE001 - the planner must never block a run it cannot model
        log(f"memory: no estimate ({exc})")


def _prepare_output_dir(cfg: RecipeConfig, resume_from, log: Callable[[str], None]) -> None:
    """Create the run directory, write the resolved config, and line up metrics with the resume point."""
    from unsloth_grpo.training import checkpoint as ckpt

    out = Path(cfg.output_dir)
    metrics_path = out / "metrics.jsonl"
    out.mkdir(parents=True, exist_ok=True)
    if resume_from is not None:
        if ckpt.run_dir_of(resume_from.path).resolve() == out.resolve():
            ckpt.set_aside_later(out, resume_from.step, log)  # a rewind: the later saves are another branch
        changed = _config_changes(out / "config.yaml", cfg)
        if changed:
            log(f"note: resuming with settings that differ from the checkpointed run: {', '.join(changed)}")
        ckpt.trim_metrics(metrics_path, resume_from.step)  # the steps after it are logged again
    elif metrics_path.exists():
        metrics_path.unlink()
    dump_config(cfg, out / "config.yaml")
    ckpt.clean_staging(out)  # half-written saves of a run that died mid-checkpoint


def _write_run_info(cfg: RecipeConfig, loaded, dataset) -> None:
    """``run_info.json`` (backend, versions) and the reproducibility bundle."""
    from unsloth_grpo.runs import collect_bundle, write_bundle

    out = Path(cfg.output_dir)
    (out / "run_info.json").write_text(json.dumps({
        "backend": loaded.info.to_dict(), "versions": package_versions(), "seed": cfg.seed,
        "dataset": {"source": cfg.data.source, "rows": len(dataset)},
        "world_size": detect().world_size,
    }, indent=2))
    write_bundle(out, collect_bundle(cfg, dataset=dataset, backend=loaded.info.to_dict()))


def _starting_model(model: str, stage: tuple[int, str | None]) -> str:
    """What the before-training evaluation evaluates, in words: the base model, or in a later stage of
    a multi-stage run the base with the adapter the stages before this one trained."""
    if stage[0] > 1:
        return f"{model} + the adapter of the stages before '{stage[1]}' (stage {stage[0]} at its start)"
    return f"{model} (before training)"


def _watch_for_tricks(cfg: RecipeConfig, thresholds, health, reward_funcs: list,
                      warmup_categories: list[str] | None = None) -> list:
    """The reward functions wrapped by a :class:`~unsloth_grpo.training.tricks.TrickWatcher` that hands
    what it sees (a copied prompt or quantity, one pattern for every problem, a kind never paid) to the health
    monitor; same names and scores; its fixes respect the kinds a warm-up kept (``warmup_categories``)."""
    from unsloth_grpo.tasks import get_task
    from unsloth_grpo.training.tricks import TrickWatcher

    task = get_task(cfg.task)
    watcher = TrickWatcher(health.report, grading=task.grading_rewards, fixes=task.trick_fixes,
                           category_column=thresholds.category_column, window=max(1, thresholds.trick_window // 2),
                           ignore=thresholds.ignore, warmup_categories=warmup_categories)
    return watcher.wrap(reward_funcs)


def _finish_run(cfg: RecipeConfig, trainer, loaded, held_out, before, headroom,
                log: Callable[[str], None]) -> tuple[dict | None, dict | None]:
    """Rank 0 after training: tokenizer beside the adapter, the headroom sampled again, the before/after
    report, the plots. Returns the held-out summary (:func:`~unsloth_grpo.training.results.held_out_summary`)
    and the headroom before and after (:func:`~unsloth_grpo.training.held_out.headroom_end`), each or None."""
    out = Path(cfg.output_dir)
    loaded.tokenizer.save_pretrained(str(out))
    summary = None
    headroom = headroom_end(cfg, trainer.model, loaded.tokenizer, headroom, out, log)
    if before is not None:
        after = evaluate_held_out(cfg, trainer.model, loaded.tokenizer, held_out, out / "eval_after",
                                  name=f"{loaded.info.model_name} + the adapter trained in {out}")
        summary = report_before_after(before, after, out, log, headroom=headroom)
    try:
        from unsloth_grpo.evaluation.plots import plot_run

        plot_run(out)
    except Exception as exc:  # noqa: BLE001 - a plot must never cost the user the trained adapter
        log(f"plots: skipped ({exc})")
    from unsloth_grpo.export.card import write_model_card

    write_model_card(out, base_model=loaded.info.model_name)  # replaces PEFT's empty template

    from unsloth_grpo.training import checkpoint as ckpt

    ckpt.mark_finished(out, step=trainer.state.global_step, max_steps=cfg.training.max_steps)
    return summary, headroom
