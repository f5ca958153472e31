"""The one check a run passes before any model loads: every problem of a config, in one list,
then this machine, then the run's one decision.

``unsloth_grpo.config`` parses and checks shapes and names on its own (it imports nothing above
the ground floor). What needs the rest of the package is checked here, in this order:

1. the config's own shape checks (:func:`unsloth_grpo.config.validate`), after the types of a config
   changed in Python (:func:`python_problems`: what a config file could not hold);
2. the task exists and finds nothing wrong with the config (:meth:`unsloth_grpo.tasks.Task.config_problems`),
   a ``builtin:`` model name is one of the built-in models, and every reward builds with its parameters;
3. the health monitor's settings, the process layout and TRL's batch rules;
4. the stages, each checked as the single-stage config it runs as;
5. TRL's fields: every ``training`` key is a field of the installed ``GRPOConfig`` (a stage's own
   keys, of the trainer it runs) with a value of the type TRL declares, read from TRL's field
   table (:mod:`unsloth_grpo.training.trl_schema`) without importing TRL;
6. the machine, looked at once (its cards read once): the recipe on this machine (a GPU for a GPU
   recipe, the model on disk or in the cache: :func:`unsloth_grpo.hardware.doctor.recipe.recipe_problems`),
   then the environment (packages, bf16, disk: :func:`unsloth_grpo.hardware.doctor.checks.preflight`);
7. the run's decision: backend, device, dtype, 4-bit and vLLM for this card
   (:func:`unsloth_grpo.hardware.backend.prepare_backend`, which imports Unsloth when it is the
   backend, before TRL, transformers and peft);
8. TRL's own checks: TRL's dataclass is built from the config for that decision as the run will
   build it (:func:`unsloth_grpo.training.trainer_args.grpo_args`), and what its ``__post_init__``
   refuses is reported. This imports TRL, and with it transformers and torch (seconds).

``--check`` (which may run on another machine than the one that trains) stops after step 5.
A run makes this check once, the recipe runner or :func:`unsloth_grpo.training.train.train`,
and everything after it receives the decision it returns instead of deciding again::

    problems = config_problems(cfg)          # steps 1-5 as lines (build=True: and step 8)
    decision = check_before_loading(cfg)     # raises ConfigError, RecipeCannotRunHere, EnvironmentProblem

Once the data is loaded (still before the model), :func:`check_rewards_on_data` calls every reward
the way training will (:func:`reward_trial_problems`): a reward that raises, returns the wrong
number of values or something that is not a number stops the run there, not at step 1.
"""

from __future__ import annotations

import difflib

from unsloth_grpo.config import ConfigError, RecipeConfig, format_problems, validate
from unsloth_grpo.models.ref import BUILTIN_MODELS, UNKNOWN_BUILTIN, ModelRef, model_ref


def config_problems(cfg: RecipeConfig, *, build: bool = False) -> list[str]:
    """Every problem of ``cfg`` that can be found without touching the machine, one line each.

    ``build`` adds TRL's own checks (step 7) when nothing else was found; it imports TRL.
    """
    typed = python_problems(cfg)
    if typed:  # the checks below read these values as the types they should be
        return typed
    model = model_ref(cfg.model.name)  # what the name means, decided once for every check below
    problems = validate(cfg)
    problems += _task_problems(cfg)
    problems += _model_problems(model)
    problems += _reward_problems(cfg.rewards, "rewards", _task_or_none(cfg.task))
    problems += _monitor_problems(cfg)
    problems += _layout_problems(cfg)
    if cfg.tools.functions or cfg.tools.environment:
        from unsloth_grpo.tools import tool_problems

        problems += tool_problems(cfg, model)
    if cfg.stages:
        problems += _stage_problems(cfg)
    problems += _held_out_problems(cfg)
    problems += trainer_problems(cfg, build=build and not problems)
    return list(dict.fromkeys(problems))  # a problem shared by several stages is said once


def python_problems(cfg: RecipeConfig) -> list[str]:
    """What a config changed in Python holds that a config file could not, one line each: an entry of
    the wrong kind (a dict appended to ``cfg.rewards`` where a RewardSpec belongs), then a value of the
    wrong type (``RewardSpec("xml_count", weight="high")``), found by reading the config back as a
    file would be read."""
    from unsloth_grpo.config import config_from_dict, config_to_dict

    wrong = _wrong_kinds(cfg, "")
    if wrong:
        return wrong
    try:
        config_from_dict(config_to_dict(cfg))
    except ConfigError as exc:
        lines = str(exc).splitlines()  # format_problems: one problem, or a heading and "  - " lines
        return [line.strip().removeprefix("- ") for line in lines[1:]] if len(lines) > 1 else lines
    return []


def _wrong_kinds(obj, where: str) -> list[str]:
    """Each section or list entry under ``obj`` that is not of its declared dataclass, named by its key."""
    import dataclasses
    import typing

    out = []
    hints = typing.get_type_hints(type(obj))
    for f in dataclasses.fields(obj):
        tp, value = hints[f.name], getattr(obj, f.name)
        entries = [(f"{where}{f.name}", value, tp)]
        if typing.get_origin(tp) is list and isinstance(value, list):
            entries = [(f"{where}{f.name}[{i}]", v, typing.get_args(tp)[0]) for i, v in enumerate(value)]
        for key, v, kind in entries:
            if not (isinstance(kind, type) and dataclasses.is_dataclass(kind)):
                continue
            if isinstance(v, kind):
                out += _wrong_kinds(v, f"{key}.")
                continue
            fix = f"{kind.__name__}(**{v!r})" if isinstance(v, dict) else f"a {kind.__name__}(...)"
            out.append(f"{key}: expected a {kind.__name__}, got {type(v).__name__} {v!r}; write {fix} "
                       f"(from unsloth_grpo.config import {kind.__name__})")
    return out


def rows_to_train(cfg: RecipeConfig, dataset) -> tuple[int, list[str]]:
    """How many rows of ``dataset`` the run will train on, and what to say about them: rows that repeat
    an earlier one, and prompts over ``data.max_prompt_tokens`` that the run drops (counted with the
    model's tokenizer where it is here without the network, by the rule the run uses; otherwise the
    count is the rows read, and a note says the lengths are counted when the model loads). Raises
    DataError when every prompt is too long, as the run would."""
    from unsloth_grpo.data import filter_long_prompts, repeated_rows_note

    notes = [n for n in [repeated_rows_note(dataset)] if n]
    tokenizer = model_ref(cfg.model.name).local_tokenizer()
    if tokenizer is None:
        notes.append(f"prompt lengths not counted: {cfg.model.name}'s tokenizer is not here without the network; "
                     f"prompts over data.max_prompt_tokens={cfg.data.max_prompt_tokens} are dropped when it loads")
        return len(dataset), notes
    kept = filter_long_prompts(dataset, tokenizer, cfg.data.max_prompt_tokens, log=notes.append)
    return len(kept), notes


def check_before_loading(cfg: RecipeConfig, *, environment: bool = True, report=None, profile=None,
                         cpu_presets=None):
    """The one check before loading; returns the run's decision (None with ``environment=False``).

    Raises :class:`ConfigError` listing every config problem; then, with ``environment``, looks at
    this machine once: :class:`unsloth_grpo.hardware.doctor.recipe.RecipeCannotRunHere` for a recipe that
    cannot run here (no GPU for a GPU recipe, a missing model), :class:`EnvironmentProblem` for what
    the environment lacks (a package, bf16, disk), BackendError for a setting the card cannot run.
    The backend is then prepared (Unsloth imported when it is the backend, before TRL's checks import
    TRL, transformers and peft) and TRL's config is checked for that decision, which is returned: a
    :class:`unsloth_grpo.hardware.backend.Decision` for everything that follows.
    ``environment=False`` stops after the config (``--check``, which may run on another machine than
    the one that trains, and a run on a model loaded already). ``report`` and ``profile`` describe
    another machine (the GPU truth kit checks the GPU image from here): its packages and its card
    replace this machine's, and nothing is imported for it. ``cpu_presets`` (preset name -> what it
    trains) are the recipe's presets that a machine without the GPU a recipe needs is sent to.
    """
    problems = config_problems(cfg)  # reads TRL's field table: TRL itself is not imported
    if problems:
        raise ConfigError(format_problems(problems))
    if not environment:
        return None
    import os

    from unsloth_grpo.hardware.backend import decide, unsloth_imported, use_backend
    from unsloth_grpo.hardware.doctor.recipe import preflight_recipe
    from unsloth_grpo.hardware.profiles import cuda_devices, measure

    here = report is None and profile is None
    cards = cuda_devices() if here else None  # the one look at this machine's cards; the rest is told
    profile = measure(cards) if here else (profile or measure())
    # no GPU for a GPU recipe, a missing model, an output directory that cannot be written, the hub off
    preflight_recipe(cfg, profile=profile, cpu_presets=cpu_presets)
    decision = decide(cfg.model, profile,
                      environment=(dict(os.environ), unsloth_imported()) if here else ({}, False))
    # a server the adapter goes to is checked whole below (a server of TRL's own layout: by the doctor)
    _preflight(cfg, report, cards, backend=decision.backend, server=not decision.vllm.adapter_sync)
    if decision.vllm.adapter_sync and here:
        _adapter_server_check(cfg)
    if here:
        use_backend(decision)  # Unsloth, when it is the backend, before TRL's checks import TRL
    # TRL's checks look at the hardware of the process that builds its config: for another machine,
    # its config is built for no particular device
    problems = trainer_problems(cfg, info=decision.info(cfg.model.name) if here else None)
    if problems:
        raise ConfigError(format_problems(problems))
    return decision


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
    from unsloth_grpo.tasks import available_tasks, get_task, unknown_task_message

    if cfg.task not in available_tasks():
        return [unknown_task_message(cfg.task)]
    return get_task(cfg.task).config_problems(cfg)


def _held_out_problems(cfg: RecipeConfig) -> list[str]:
    """Held-out evaluation without held-out problems (:func:`~unsloth_grpo.training.held_out.held_out_problem`),
    for the run and for each GRPO stage with data of its own (a GRPO stage grades its own start and end)."""
    from unsloth_grpo.training.held_out import held_out_problem
    from unsloth_grpo.training.stages import stage_config

    runs = [cfg]
    for i, stage in enumerate(cfg.stages, 1):
        if stage.kind == "grpo" and stage.data:
            try:
                runs.append(stage_config(cfg, i))
            except ConfigError:
                continue  # said by the stage checks
    return [p for run in runs if (p := held_out_problem(run)) is not None]


def _model_problems(model: ModelRef) -> list[str]:
    """A ``builtin:`` model name that names no built-in model (it would fail only after the imports)."""
    if model.kind != UNKNOWN_BUILTIN:
        return []
    name = model.name
    close = difflib.get_close_matches(name, BUILTIN_MODELS, n=1)
    hint = f"did you mean '{close[0]}'? " if close else ""
    return [f"model.name='{name}' is not a built-in model; {hint}choose one of: {', '.join(BUILTIN_MODELS)}, "
            "or a hub id or local model directory"]


def _task_or_none(name: str):
    from unsloth_grpo.tasks import available_tasks, get_task

    return get_task(name) if name in available_tasks() else None


def _reward_problems(specs, where: str, task=None) -> list[str]:
    """Build every reward once, so unknown names and bad parameters surface before loading; with the
    run's ``task``, a built-in reward that grades answers (it has a grader) must grade them as the task
    does: one of its ``grading_rewards``. Another task's grader pays for another kind of answer (gsm8k's
    ``correctness`` on countdown pays the gold JSON of the numbers, and 0 for a right equation)."""
    from unsloth_grpo.rewards import REGISTRY, get_reward

    out = []
    for i, spec in enumerate(specs):
        try:
            fn = get_reward(spec.name, **spec.params)
        except Exception as exc:  # noqa: BLE001 - report whatever the reward's constructor says
            out.append(f"{where}[{i}] ({spec.name}): {exc}")
            continue
        if task is not None and getattr(fn, "grader", None) is not None and spec.name in REGISTRY \
                and spec.name not in task.grading_rewards:
            out.append(f"{where}[{i}] ({spec.name}): grades another task's answers, not task {task.name}'s, so it "
                       f"would pay for the wrong thing; task {task.name} is graded by "
                       + (" or ".join(task.grading_rewards) or "its own grade()")
                       + f". Use the recipe of task {task.name} (python -m unsloth_grpo.recipes.{task.name}), or "
                       f"list its rewards instead")
    return out


#: Completions every reward is tried on, beside the task's gold answer written out: what an
#: untrained model writes (nothing at all, text without the tags) and a well-formed wrong answer.
PROBE_TEXTS = ("", "I am not sure.", "<reasoning>\nA guess.\n</reasoning>\n<answer>\n0\n</answer>")
#: Dataset rows the probe completions are written for.
PROBE_ROWS = 2


def _probe_batch(cfg: RecipeConfig, dataset) -> tuple[list, dict] | None:
    """Completions and TRL's keywords for the first rows of ``dataset``, shaped as training passes
    them: chat messages after a chat prompt, every dataset column by name, ``completion_ids``
    (stand-ins: one id per byte of the text, as no tokenizer is loaded yet), the environments."""
    from unsloth_grpo.rewards.calling import as_completion, trl_keywords
    from unsloth_grpo.tasks import get_task

    rows = [dict(dataset[i]) for i in range(min(PROBE_ROWS, len(dataset)))]
    if not rows:
        return None
    task = get_task(cfg.task)
    pairs = []
    for row in rows:
        written = task.gold_completion(row)
        pairs += [(row, text) for text in ([written] if written else []) + list(PROBE_TEXTS)]
    prompts = [row["prompt"] for row, _ in pairs]
    columns = {k: [row.get(k) for row, _ in pairs] for k in rows[0] if k not in ("prompt", "completion", "completion_ids")}
    environments = _probe_environments(cfg, [row for row, _ in pairs])
    if environments is False:
        return None
    kwargs = trl_keywords(prompts, completion_ids=[list(text.encode()) for _, text in pairs], columns=columns,
                          environments=environments, max_steps=cfg.training.max_steps)
    return [as_completion(text, prompt) for (_, text), prompt in zip(pairs, prompts)], kwargs


def _probe_environments(cfg: RecipeConfig, rows: list[dict]):
    """One environment per probe completion, reset with its row as TRL does; None without an
    environment, False when one cannot be made (the tool checks report that)."""
    if not cfg.tools.environment:
        return None
    try:
        from unsloth_grpo.tools import build_tools

        factory = build_tools(cfg.tools)["environment_factory"]
        environments = [factory() for _ in rows]
        for env, row in zip(environments, rows):
            env.reset(**row)
    except Exception:  # noqa: BLE001 - not a reward's problem
        return False
    return environments


def reward_trial_problems(cfg: RecipeConfig, dataset) -> list[str]:
    """Each reward of ``cfg`` (and of its GRPO stages) called as training calls it, on a few
    completions for the first rows of ``dataset``: the task's gold answer written as a correct
    completion (where the task has one), an empty completion, text without the tags and a
    well-formed wrong answer. Inside its wrapper, so a reward with ``on_error: zero`` passes as it
    would in training. One line per reward that raises or returns values TRL cannot use."""
    import contextlib
    import io

    import unsloth_grpo.tasks  # noqa: F401 - the task registry, through which a task's reward name is found
    from unsloth_grpo.rewards import RewardError, build_reward_functions, keyword_problem
    from unsloth_grpo.rewards.calling import call_reward

    batch = _probe_batch(cfg, dataset)
    if batch is None:
        return []
    completions, kwargs = batch
    groups = [("rewards", cfg.rewards)]
    groups += [(f"stages[{i}] ({s.name}): rewards", s.rewards) for i, s in enumerate(cfg.stages)
               if s.kind != "sft" and s.rewards]
    how = (f"tried before loading the model on {len(completions)} completions for the first "
           f"{min(PROBE_ROWS, len(dataset))} rows of the data, passed as training passes them")
    out = []
    for where, specs in groups:
        try:
            funcs, _ = build_reward_functions(specs)
        except Exception:  # noqa: BLE001 - a reward that does not build is reported by config_problems
            continue
        for i, (fn, spec) in enumerate(zip(funcs, specs)):
            refused = keyword_problem(spec.name, kwargs)
            if refused is not None:  # on every call, so not a case for on_error: zero
                out.append(f"{where}[{i}] ({spec.name}): {refused}")
                continue
            try:
                with contextlib.redirect_stdout(io.StringIO()):  # a copied reward may print every call
                    call_reward(fn, completions, **kwargs)
            except RewardError as exc:
                out.append(f"{where}[{i}] ({spec.name}): {exc} ({how}). Fix the reward, or give it "
                           "params: {on_error: zero} to score such completions 0 and go on")
    return out


def check_rewards_on_data(cfg: RecipeConfig, dataset) -> None:
    """Raise :class:`ConfigError` when :func:`reward_trial_problems` finds a reward training would
    stop on; called with the loaded data, before the output directory or the model is touched."""
    problems = reward_trial_problems(cfg, dataset)
    if problems:
        raise ConfigError(format_problems(problems))


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
        problems += [f"{where}: {p}" for p in _reward_problems(sub.rewards, "rewards", _task_or_none(sub.task))
                     + _layout_problems(sub)]
    return problems


def _preflight(cfg: RecipeConfig, report=None, cards=None, backend: str | None = None, server: bool = True) -> None:
    """The doctor's blocking checks of this environment for ``cfg`` on the decided ``backend``
    (``cards`` as read already; ``server``: probe ``model.vllm_server`` too)."""
    from unsloth_grpo.hardware.doctor.checks import preflight
    from unsloth_grpo.hardware.doctor.probes import probe_torch
    from unsloth_grpo.hardware.doctor.report import collect_report
    from unsloth_grpo.hardware.launch import parse_vllm_server

    server = parse_vllm_server(cfg.model.vllm_server)[1:] if cfg.model.vllm_server and server else None
    if report is None:
        report = collect_report(output_dir=cfg.output_dir, check_hub=False, vllm_server=server,
                                torch_info=probe_torch(cards))
    preflight(backend or cfg.model.backend, need_bf16=cfg.model.dtype == "bf16" or None,
              fast_inference=cfg.model.fast_inference, output_dir=cfg.output_dir, vllm_server=server,
              load_in_4bit=cfg.model.load_in_4bit, report=report)


def _adapter_server_check(cfg: RecipeConfig) -> None:
    """The vLLM server a CPU run sends its adapter to: it answers, it is vLLM of this environment's version,
    it serves the run's model, it loads adapters at run time. Each problem names the command that starts the
    right server; :class:`RecipeCannotRunHere` (the CLI exits with 2) when there is one."""
    from unsloth_grpo.hardware.doctor.checks import ERROR, Problem
    from unsloth_grpo.hardware.doctor.recipe import RecipeCannotRunHere
    from unsloth_grpo.hardware.launch import parse_vllm_server
    from unsloth_grpo.hardware.profiles import installed_vllm
    from unsloth_grpo.hardware.vllm_server import ServerClient, server_problems
    from unsloth_grpo.training.vllm_server import server_start_line

    base, host, port = parse_vllm_server(cfg.model.vllm_server)
    model = model_ref(cfg.model.name).served_path
    problems = server_problems(ServerClient(base), model_path=model, vllm_version=installed_vllm()[0],
                               start=server_start_line(cfg, model, host, port))
    if problems:
        raise RecipeCannotRunHere([Problem(ERROR, "vllm", what, fix) for what, fix in problems])


__all__ = ["check_before_loading", "check_rewards_on_data", "config_problems", "reward_trial_problems",
           "trainer_problems"]
