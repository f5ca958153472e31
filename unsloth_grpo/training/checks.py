"""The one check a run passes before any model loads: every problem of a config, in one list.

``unsloth_grpo.config`` parses and checks shapes and names on its own (it imports nothing above
the ground floor). What needs the rest of the package is checked here, in this order:

1. the config's own shape checks (:func:`unsloth_grpo.config.validate`);
2. TRL's trainer arguments: every ``training`` key is a field of the installed ``GRPOConfig``;
3. the task exists, a ``builtin:`` model name is one of the built-in models, every reward builds
   with its parameters;
4. the health monitor's settings, the process layout and TRL's batch rules;
5. the stages, each checked as the single-stage config it runs as;
6. the machine: the doctor's preflight (:func:`unsloth_grpo.hardware.doctor.preflight`).

The recipe runner, ``--check`` and :func:`unsloth_grpo.training.train.train` all call
:func:`check_before_loading`, so a typo costs the same seconds whichever way a run starts::

    problems = config_problems(cfg)          # steps 1-5 as lines, nothing imported but trl
    check_before_loading(cfg)                # raises ConfigError, then the doctor's EnvironmentProblem
"""

from __future__ import annotations

import difflib

from unsloth_grpo.config import (
    TRAINER_FIELDS_OWNED_ELSEWHERE,
    ConfigError,
    RecipeConfig,
    format_problems,
    validate,
)


def config_problems(cfg: RecipeConfig) -> list[str]:
    """Every problem of ``cfg`` that can be found without touching the machine, one line each."""
    problems = validate(cfg)
    problems += trainer_field_problems(cfg.training.passthrough, "GRPOConfig", "training")
    problems += _task_problems(cfg)
    problems += _model_problems(cfg)
    problems += _reward_problems(cfg.rewards, "rewards")
    problems += _monitor_problems(cfg)
    problems += _layout_problems(cfg)
    if cfg.tools.functions or cfg.tools.environment:
        from unsloth_grpo.tools import tool_problems

        problems += tool_problems(cfg)
    if cfg.stages:
        problems += _stage_problems(cfg)
    return list(dict.fromkeys(problems))  # a problem shared by several stages is said once


def check_before_loading(cfg: RecipeConfig, *, environment: bool = True, report=None,
                         backend_first: bool = False) -> None:
    """Raise :class:`ConfigError` listing every config problem, then run the doctor's preflight.

    The preflight raises :class:`unsloth_grpo.hardware.doctor.EnvironmentProblem` for what this
    machine cannot do (a missing package, no bf16, no disk). ``environment=False`` skips it
    (``--check`` on another machine than the one that trains, and the stage runner's inner runs).
    ``report`` replaces the doctor's look at this machine (the GPU truth kit checks another one).
    ``backend_first`` (a run about to train): when the checks are about to import TRL (a ``training:``
    key passed through to its GRPOConfig), Unsloth is imported first, so that it patches TRL,
    transformers and peft before anything else imports them; a config without such keys is checked
    without that import, so a typo still costs seconds.
    """
    if backend_first and _checks_import_trl(cfg):
        from unsloth_grpo.hardware.backend import import_backend_first

        import_backend_first(cfg.model)
    problems = config_problems(cfg)
    if problems:
        raise ConfigError(format_problems(problems))
    if environment:
        _preflight(cfg, report)


def _checks_import_trl(cfg: RecipeConfig) -> bool:
    """Whether :func:`config_problems` reads TRL's config classes for ``cfg`` (pass-through keys)."""
    return bool(cfg.training.passthrough) or any(stage.training for stage in cfg.stages)


# ---------------------------------------------------------------- TRL's own fields


def trainer_fields(kind: str = "GRPOConfig") -> dict:
    """The dataclass fields of the installed TRL's ``GRPOConfig`` or ``SFTConfig`` by name."""
    import dataclasses

    import trl

    return {f.name: f for f in dataclasses.fields(getattr(trl, kind))}


def trainer_field_problems(values: dict, kind: str, where: str) -> list[str]:
    """Keys of ``values`` that the installed TRL's ``kind`` does not have, or that the toolkit sets."""
    if not values:
        return []
    valid = trainer_fields(kind)
    out = []
    for key, value in values.items():
        if key in TRAINER_FIELDS_OWNED_ELSEWHERE:
            out.append(f"{where}.{key}={value!r}: the toolkit sets this {kind} field from "
                       f"{TRAINER_FIELDS_OWNED_ELSEWHERE[key]}; set that instead and remove {where}.{key}")
        elif key not in valid:
            close = difflib.get_close_matches(key, sorted(valid), n=1)
            hint = f"did you mean '{where}.{close[0]}'? " if close else ""
            out.append(f"{where}.{key} is not a field of the installed TRL's {kind}; {hint}"
                       f"`--help-config` lists them all")
    return out


# ---------------------------------------------------------------- the rest of the package


def _task_problems(cfg: RecipeConfig) -> list[str]:
    from unsloth_grpo.tasks import available_tasks

    if cfg.task in available_tasks():
        return []
    close = difflib.get_close_matches(cfg.task, available_tasks(), n=1)
    hint = f"did you mean '{close[0]}'? " if close else ""
    return [f"task='{cfg.task}' is not a task of this package; {hint}choose one of: {', '.join(available_tasks())}"]


def _model_problems(cfg: RecipeConfig) -> list[str]:
    """A ``builtin:`` model name that names no built-in model (it would fail only after the imports)."""
    from unsloth_grpo.hardware.backend import BUILTIN_MODELS

    name = str(cfg.model.name)
    if not name.startswith("builtin:") or name in BUILTIN_MODELS:
        return []
    close = difflib.get_close_matches(name, BUILTIN_MODELS, n=1)
    hint = f"did you mean '{close[0]}'? " if close else ""
    return [f"model.name='{name}' is not a built-in model; {hint}choose one of: {', '.join(BUILTIN_MODELS)}, "
            "or a hub id or local model directory"]


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
    import dataclasses

    from unsloth_grpo.training.stages import stage_config, stage_problems

    problems = stage_problems(cfg)
    named = {f.name for f in dataclasses.fields(cfg.training)}
    for i, stage in enumerate(cfg.stages, 1):
        where = f"stages[{i - 1}] ({stage.name})"
        if any(p.startswith(where + ":") for p in problems):
            continue  # its own settings are wrong already; the deeper checks would repeat them
        sub = stage_config(cfg, i)
        own = {k: v for k, v in stage.training.items() if k not in named}  # the recipe's were checked
        found = trainer_field_problems(own, "SFTConfig" if stage.kind == "sft" else "GRPOConfig", "training")
        if stage.kind != "sft":
            found += _reward_problems(sub.rewards, "rewards") + _layout_problems(sub)
        problems += [f"{where}: {p}" for p in found]
    return problems


def _preflight(cfg: RecipeConfig, report=None) -> None:
    from unsloth_grpo.hardware.doctor import preflight
    from unsloth_grpo.training.distributed import parse_vllm_server

    server = parse_vllm_server(cfg.model.vllm_server)[1:] if cfg.model.vllm_server else None
    preflight(cfg.model.backend, need_bf16=cfg.model.dtype == "bf16" or None,
              fast_inference=cfg.model.fast_inference, output_dir=cfg.output_dir, vllm_server=server,
              load_in_4bit=cfg.model.load_in_4bit, report=report)


__all__ = ["check_before_loading", "config_problems", "trainer_field_problems", "trainer_fields"]
