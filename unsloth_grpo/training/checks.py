"""The one check a run passes before any model loads: every problem of a config, in one list.

``unsloth_grpo.config`` parses and checks shapes and names on its own (it imports nothing above
the ground floor). What needs the rest of the package is checked here, in this order:

1. the config's own shape checks (:func:`unsloth_grpo.config.validate`);
2. the task exists and every reward builds with its parameters;
3. the health monitor's settings, the process layout and TRL's batch rules;
4. the stages, each checked as the single-stage config it runs as;
5. TRL's fields: every ``training`` key is a field of the installed ``GRPOConfig`` (a stage's own
   keys, of the trainer it runs) with a value of the type TRL declares, read from TRL's field
   table (:mod:`unsloth_grpo.training.trl_schema`) without importing TRL;
6. the machine: the doctor's preflight (:func:`unsloth_grpo.hardware.doctor.preflight`);
7. TRL's own checks: TRL's dataclass is built from the config as the run will build it
   (:func:`unsloth_grpo.training.trainer_args.grpo_args`), and what its ``__post_init__`` refuses
   is reported. This imports TRL, and with it transformers and torch (seconds), so it runs when
   the run is about to start on this machine (``environment=True``), after the backend is
   prepared (Unsloth, when it is the backend, must be imported before transformers and TRL);
   ``--check`` stops after step 5.

The recipe runner, ``--check`` and :func:`unsloth_grpo.training.train.train` all call
:func:`check_before_loading`, so a typo costs the same seconds whichever way a run starts::

    problems = config_problems(cfg)          # steps 1-5 as lines (build=True: and step 7)
    check_before_loading(cfg)                # raises ConfigError, or the doctor's EnvironmentProblem
"""

from __future__ import annotations

import difflib

from unsloth_grpo.config import ConfigError, RecipeConfig, format_problems, validate


def config_problems(cfg: RecipeConfig, *, build: bool = False) -> list[str]:
    """Every problem of ``cfg`` that can be found without touching the machine, one line each.

    ``build`` adds TRL's own checks (step 7) when nothing else was found; it imports TRL.
    """
    problems = validate(cfg)
    problems += _task_problems(cfg)
    problems += _reward_problems(cfg.rewards, "rewards")
    problems += _monitor_problems(cfg)
    problems += _layout_problems(cfg)
    if cfg.tools.functions or cfg.tools.environment:
        from unsloth_grpo.tools import tool_problems

        problems += tool_problems(cfg)
    if cfg.stages:
        problems += _stage_problems(cfg)
    problems += trainer_problems(cfg, build=build and not problems)
    return list(dict.fromkeys(problems))  # a problem shared by several stages is said once


def check_before_loading(cfg: RecipeConfig, *, environment: bool = True, report=None,
                         backend_first: bool = False) -> None:
    """Raise :class:`ConfigError` listing every config problem, then run the doctor's preflight and TRL's checks.

    The preflight raises :class:`unsloth_grpo.hardware.doctor.EnvironmentProblem` for what this
    machine cannot do (a missing package, no bf16, no disk); then TRL's dataclass is built from the
    config, so that its own checks run. ``environment=False`` skips both (``--check``, which may run
    on another machine than the one that trains, the runner's first look, and the stage runner's
    inner runs, checked with the whole run). ``report`` replaces the doctor's look at this machine
    (the GPU truth kit checks another one). ``backend_first`` (a run about to train here): the
    backend is prepared before TRL's checks import TRL, transformers and peft, since Unsloth patches
    them when it is imported and warns when it comes second; TRL's config is then checked for the
    loader's decision. Without it, for no particular device.
    """
    problems = config_problems(cfg)  # reads TRL's field table: TRL itself is not imported
    if problems:
        raise ConfigError(format_problems(problems))
    if environment:
        _preflight(cfg, report)
        problems = trainer_problems(cfg, info=_decision(cfg) if backend_first else None)
        if problems:
            raise ConfigError(format_problems(problems))


def _decision(cfg: RecipeConfig):
    """The loader's decision for ``cfg`` on this machine, Unsloth imported when it is the backend;
    None for a setting this card cannot run (the loader names it, with the fix)."""
    from unsloth_grpo.hardware.backend import BackendError, prepare_backend

    try:
        return prepare_backend(cfg.model).info(cfg.model.name)
    except BackendError:
        return None


# ---------------------------------------------------------------- TRL's own config


def trainer_problems(cfg: RecipeConfig, *, build: bool = True, info=None) -> list[str]:
    """TRL's verdict on ``cfg``'s ``training`` keys, and with ``build`` on the config TRL's dataclass makes.

    The keys are checked against ``GRPOConfig``; a stage's own keys against the trainer it runs
    (``SFTConfig`` for ``kind: sft``). With ``build`` and no problem found, each run's TRL config is
    then built as the run builds it (:func:`unsloth_grpo.training.trainer_args.grpo_args`) for the
    loader's decision ``info`` (a device-neutral one when None), and what TRL's ``__post_init__``
    refuses is reported.
    """
    from unsloth_grpo.training.trainer_args import GRPO, SFT, checking_info, grpo_args, sft_args, trl_values

    problems = trl_values(cfg.training.trl, GRPO)[1]
    own = set(cfg.training.__dataclass_fields__)  # the toolkit's own options, not TRL's
    for i, stage in enumerate(cfg.stages):
        keys = {k: v for k, v in stage.training.items() if k not in own}
        found = trl_values(keys, SFT if stage.kind == "sft" else GRPO)[1]
        problems += [f"stages[{i}] ({stage.name}): {p}" for p in found]
    if problems or not build:
        return problems
    for where, run, kind in _runs(cfg):
        decided = info if info is not None else checking_info(run.model.name)
        try:
            if kind == SFT:
                sft_args(run, decided, checking=True)
            else:
                grpo_args(run, decided, weights=[r.weight for r in run.rewards], checking=True)
        except ConfigError as exc:
            problems.append(where + str(exc))
    return problems


def _runs(cfg: RecipeConfig) -> list[tuple[str, RecipeConfig, str]]:
    """(label, the single config it trains with, TRL's config class) for every training of ``cfg``."""
    from unsloth_grpo.training.trainer_args import GRPO, SFT

    if not cfg.stages:
        return [("", cfg, GRPO)]
    from unsloth_grpo.training.stages import stage_config

    return [(f"stages[{i - 1}] ({stage.name}): ", stage_config(cfg, i), SFT if stage.kind == "sft" else GRPO)
            for i, stage in enumerate(cfg.stages, 1)]


# ---------------------------------------------------------------- the rest of the package


def _task_problems(cfg: RecipeConfig) -> list[str]:
    from unsloth_grpo.tasks import available_tasks

    if cfg.task in available_tasks():
        return []
    close = difflib.get_close_matches(cfg.task, available_tasks(), n=1)
    hint = f"did you mean '{close[0]}'? " if close else ""
    return [f"task='{cfg.task}' is not a task of this package; {hint}choose one of: {', '.join(available_tasks())}"]


def _reward_problems(specs, where: str) -> list[str]:
    """Build every reward once, so unknown names and bad parameters surface before loading."""
    from unsloth_grpo.rewards import get_reward

    out = []
    for i, spec in enumerate(specs):
        try:
            get_reward(spec.name, **spec.params)
        except Exception as exc:  # noqa: BLE001 - report whatever the reward's constructor says
            out.append(f"{where}[{i}] ({spec.name}): {exc}")
    return out


def _monitor_problems(cfg: RecipeConfig) -> list[str]:
    from unsloth_grpo.training.monitor import HealthThresholds

    try:
        HealthThresholds.from_dict(cfg.monitor)
    except (ValueError, TypeError) as exc:
        return [f"monitor: {exc}"]
    return []


def _layout_problems(cfg: RecipeConfig) -> list[str]:
    from unsloth_grpo.training import distributed

    try:
        layout = distributed.detect()  # WORLD_SIZE etc. from torchrun / accelerate launch
    except ValueError as exc:
        return [str(exc)]
    return distributed.batch_problems(cfg.training, layout.world_size) + distributed.layout_problems(cfg, layout)


def _stage_problems(cfg: RecipeConfig) -> list[str]:
    """The stage list's own problems, then each stage checked as the single-stage config it runs as."""
    from unsloth_grpo.training.stages import stage_config, stage_problems

    problems = stage_problems(cfg)
    for i, stage in enumerate(cfg.stages, 1):
        where = f"stages[{i - 1}] ({stage.name})"
        if stage.kind == "sft" or any(p.startswith(where + ":") for p in problems):
            continue  # its own settings are wrong already; the deeper checks would repeat them
        sub = stage_config(cfg, i)
        problems += [f"{where}: {p}" for p in _reward_problems(sub.rewards, "rewards") + _layout_problems(sub)]
    return problems


def _preflight(cfg: RecipeConfig, report=None) -> None:
    from unsloth_grpo.hardware.doctor import preflight
    from unsloth_grpo.training.distributed import parse_vllm_server

    server = parse_vllm_server(cfg.model.vllm_server)[1:] if cfg.model.vllm_server else None
    preflight(cfg.model.backend, need_bf16=cfg.model.dtype == "bf16" or None,
              fast_inference=cfg.model.fast_inference, output_dir=cfg.output_dir, vllm_server=server,
              load_in_4bit=cfg.model.load_in_4bit, report=report)


__all__ = ["check_before_loading", "config_problems", "trainer_problems"]
