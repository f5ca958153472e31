"""What every recipe's command line shares: parsing, the run itself, and how its faults end.

A recipe (:class:`unsloth_grpo.tasks._recipe.Recipe`) belongs to its task; a recipe module
(``unsloth_grpo/recipes/<task>.py``) hands its task's recipe to :func:`run_recipe`.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Callable

from unsloth_grpo.cli.arguments import with_later_overrides
from unsloth_grpo.config import ConfigError, RecipeConfig, describe
from unsloth_grpo.tasks._recipe import AUTO_PRESET, Recipe


class _Once(argparse.Action):
    """An option that may be given once: argparse keeps the last of two ``--preset`` flags without a
    word, so ``--preset smoke ... --preset smollm2`` would silently drop one of them."""

    def __call__(self, parser, namespace, values, option_string=None):
        if getattr(namespace, self.dest, None) is not None:
            parser.error(f"{option_string} is given twice ({getattr(namespace, self.dest)!r}, then {values!r}); "
                         "give it once: they do not combine")
        setattr(namespace, self.dest, values)


def add_train_arguments(parser: argparse.ArgumentParser, presets: list[str] | None) -> None:
    parser.add_argument("--config", action=_Once, help="YAML recipe config (see recipes/).")
    choices = [*presets, AUTO_PRESET] if presets else None
    parser.add_argument("--preset", choices=choices, action=_Once,
                        help="Named preset of the recipe" + (f": {', '.join(choices)}" if choices else "")
                        + "; 'auto' plans settings for the GPU in this machine")
    parser.add_argument("--auto-shrink", action="store_true",
                        help="After a CUDA out-of-memory, resume from its checkpoint with the smaller config it suggests.")
    parser.add_argument("--output-dir", action=_Once, help="Where the adapter, metrics and config are written.")
    parser.add_argument("--check", action="store_true", help="Validate the config and data, then stop.")
    parser.add_argument("--resume", nargs="?", const=True, default=None, metavar="PATH", action=_Once,
                        help="Continue from the latest complete checkpoint of the output directory, or from PATH "
                             "(a run directory or one of its checkpoints). The run goes on with its own config.yaml "
                             "and the KEY=VALUE overrides on top; a --preset or another --config is not applied.")
    parser.add_argument("--print-config", action="store_true", help="Print the resolved config and stop.")
    parser.add_argument("--help-config", action="store_true",
                        help="List every config key with its help, and the installed TRL's GRPOConfig fields.")
    parser.add_argument("--debug", action="store_true", help="Show the full traceback of an error.")
    parser.add_argument("overrides", nargs="*", metavar="KEY=VALUE",
                        help="Overrides such as training.max_steps=50 model.name=Qwen/Qwen2.5-0.5B-Instruct")


def parse_train_args(parser: argparse.ArgumentParser, argv: list[str] | None = None) -> argparse.Namespace:
    """``parser.parse_args`` where ``KEY=VALUE`` overrides may stand on both sides of an option.

    argparse fills the ``overrides`` list from one run of words only, and calls the next run
    (``--preset smoke a=1 --output-dir X b=2``: ``b=2``) unrecognized; those come back from
    ``parse_known_args`` in the order typed and are overrides too. (``parse_intermixed_args`` does the
    same for one parser, but refuses a parser with subcommands, such as ``unsloth-grpo``'s.)
    """
    args, extra = parser.parse_known_args(argv)
    return with_later_overrides(parser, args, extra)


def help_config_rows(cfg: RecipeConfig | None = None) -> list[tuple[str, str, str]]:
    """``--help-config``: the toolkit's keys with ``cfg``'s values (the recipe's defaults), then
    every field of the installed TRL's GRPOConfig under ``training.``, with the recipe's value where
    it sets one (TRL's default otherwise) and TRL's own help text."""
    from unsloth_grpo.training.trainer_args import OWNED_ELSEWHERE, TOOLKIT_NOTES, field_table

    rows = describe(RecipeConfig, instance=cfg)
    training = (cfg or RecipeConfig()).training
    for name, f in sorted(field_table().items()):
        if name in OWNED_ELSEWHERE:
            continue
        note = f" [toolkit: {TOOLKIT_NOTES[name]}]" if name in TOOLKIT_NOTES else ""
        rows.append((f"training.{name}", repr(training.get(name, f.default)), f"(TRL) {f.help}{note}"))
    return rows


def _resume_and_overrides(args: argparse.Namespace) -> tuple[object, list[str]]:
    """``--resume`` takes an optional path, so ``--resume training.max_steps=5`` would read the
    override as the path: a value with ``=`` that is no directory is an override after all."""
    resume, overrides = getattr(args, "resume", None), list(args.overrides)
    if isinstance(resume, str) and "=" in resume and not Path(resume).exists():
        return True, [resume, *overrides]
    return resume, overrides


def resumed_run(resume) -> Path | None:
    """The run directory ``--resume PATH`` names: PATH itself, or the run a checkpoint PATH belongs to
    (None for ``--resume`` without a path)."""
    from unsloth_grpo.runs import is_checkpoint_dir, run_dir_of

    if not isinstance(resume, str):
        return None
    return run_dir_of(resume) if is_checkpoint_dir(resume) else Path(resume)


def run_from_args(recipe: Recipe, args: argparse.Namespace,
                  train_fn: Callable | None = None) -> int:
    """Run the command; bad input ends with one paragraph on stderr and exit code 2 (the
    traceback only with ``--debug``), before any model is loaded."""
    from unsloth_grpo.data import DataError
    from unsloth_grpo.training.checkpoint import CheckpointError

    try:
        return _run_from_args(recipe, args, train_fn)
    except (ConfigError, DataError, CheckpointError) as exc:
        if getattr(args, "debug", False):
            raise
        print(f"error: {getattr(exc, 'command_line', exc)}", file=sys.stderr)  # the flags' words, where they differ
        return 2


def _run_from_args(recipe: Recipe, args: argparse.Namespace, train_fn: Callable | None) -> int:
    """The run from the command line, top to bottom: read the config, then (unless asked only to show
    it or to check it) decide and train, stages, held-out evaluation and outputs included, then say
    what the run did. Each step is one call; a run that stops or cannot start returns its exit code."""
    if args.help_config:
        return _print_help_config(recipe, args)
    cfg, resume, resumed = _read_config(recipe, args)
    if args.print_config:
        from unsloth_grpo.config import dump_config

        print(dump_config(cfg), end="")
        return 0
    if resume is not None:
        _refuse_another_tasks_run(recipe, cfg, resumed)
    if args.check:
        return _check_config_and_data(cfg)
    result = _decide_and_train(recipe, args, cfg, resume, train_fn)
    if isinstance(result, int):
        return result
    return _report(result)


def _print_help_config(recipe: Recipe, args: argparse.Namespace) -> int:
    defaults = recipe.resolve(preset=args.preset, config=args.config)
    for key, default, help_text in help_config_rows(defaults):
        print(f"{key:42s} {default:28s} {help_text}")
    return 0


def _read_config(recipe: Recipe, args: argparse.Namespace) -> tuple[RecipeConfig, object, Path | None]:
    """The run's config (the recipe's defaults, preset, file and overrides; for a resume, the run's own
    config.yaml with the overrides on top), what ``--resume`` asks for, and the run directory it names."""
    resume, overrides = _resume_and_overrides(args)
    if isinstance(resume, str):  # said before the run's config is looked for, and before the machine's checks
        from unsloth_grpo.runs import not_a_run
        from unsloth_grpo.training.checkpoint import CheckpointError, no_such_resume_path

        if not Path(resume).exists():
            raise CheckpointError(no_such_resume_path(resume))
        why = not_a_run(resume)
        if why is not None:
            raise CheckpointError(why)
    resumed = resumed_run(resume)
    # `--resume RUN` trains RUN, wherever its config.yaml says it was first trained: a copied run is
    # continued in the copy, never in the folder it was copied from
    output_dir = args.output_dir if args.output_dir is not None or resumed is None else str(resumed)
    if resume is not None:
        run = resumed if resumed is not None else Path(output_dir) if output_dir is not None else None
        if run is None:  # `--preset smoke --resume`: the run is the preset's output_dir
            run = Path(recipe.resolve(preset=args.preset, config=args.config, overrides=overrides).output_dir)
        if (run / "config.yaml").is_file():
            return _resumed_config(recipe, args, run, overrides), resume, resumed
    cfg = recipe.resolve(preset=args.preset, config=args.config, output_dir=output_dir, overrides=overrides)
    return cfg, resume, resumed


def _resumed_config(recipe: Recipe, args: argparse.Namespace, run: Path, overrides: list[str]) -> RecipeConfig:
    """A resume goes on with the settings the run was made with: its own config.yaml, and the
    command's ``key=value`` overrides on top. A preset or another config file set up a run when it
    began; applied again they would undo what the run was made with (``--preset smoke`` would put back
    ``training.save_steps: 0`` over a run's 2), so they are not, and the command says so."""
    own = run / "config.yaml"
    skipped = [f"--preset {args.preset}"] if args.preset is not None else []
    if args.config is not None and Path(args.config).resolve() != own.resolve():
        skipped.append(f"--config {args.config}")
    print(f"resume: using the run's config {own}" + (f" with {' '.join(overrides)} on top" if overrides else ""))
    if skipped:
        print(f"resume: {' and '.join(skipped)} not applied: a run goes on with the settings it was made with "
              "(a setting to change goes on the command line as key=value)", file=sys.stderr)
    return recipe.resolve(config=str(own), output_dir=args.output_dir if args.output_dir is not None else str(run),
                          overrides=overrides)


def _refuse_another_tasks_run(recipe: Recipe, cfg: RecipeConfig, resumed: Path | None) -> None:
    from unsloth_grpo.runs import other_task
    from unsloth_grpo.training.checkpoint import CheckpointError

    why = other_task(resumed if resumed is not None else cfg.output_dir, cfg.task, recipe=recipe.name)
    if why is not None:
        raise CheckpointError(why)


def _check_config_and_data(cfg: RecipeConfig) -> int:
    """``--check``: the config, the data and the rewards tried on it, without the machine or a model:
    the rows counted as the run will train them (prompts too long dropped, where the model's tokenizer
    is here to count them), and rows that repeat an earlier one said."""
    from unsloth_grpo.training.checks import check_before_loading, check_rewards_on_data, rows_to_train
    from unsloth_grpo.training.train import load_task_dataset

    check_before_loading(cfg, environment=False)
    ds = load_task_dataset(cfg)
    check_rewards_on_data(cfg, ds)
    rows, notes = rows_to_train(cfg, ds)
    print(f"config and data OK: {rows} training rows, rewards "
          + ", ".join(f"{r.name} x{r.weight:g}" for r in cfg.rewards)
          + " (each tried on sample completions of the first rows)")
    for note in notes:
        print(f"note: {note}")
    return 0


def _decide_and_train(recipe: Recipe, args: argparse.Namespace, cfg: RecipeConfig, resume, train_fn: Callable | None):
    """Decide (the run's one check) and train; the TrainResult, or the exit code of a run that cannot
    run here (2, 1 for the environment) or stopped (its own code). With ``--auto-shrink`` an
    out-of-memory stop resumes with the smaller config it suggested, at most three times."""
    from unsloth_grpo.hardware.backend import BackendError
    from unsloth_grpo.hardware.doctor.checks import EnvironmentProblem
    from unsloth_grpo.hardware.doctor.recipe import RecipeCannotRunHere
    from unsloth_grpo.training.checks import check_before_loading
    from unsloth_grpo.training.results import TrainingStopped

    if train_fn is None:
        from unsloth_grpo.training.train import train as train_fn

    if resume is True:  # a mistyped folder is said as such, before the machine's checks talk of GPUs
        from unsloth_grpo.training.checkpoint import CheckpointError, nothing_to_resume

        why = nothing_to_resume(cfg.output_dir, stages=bool(cfg.stages))
        if why is not None:
            raise CheckpointError(why)
    shrinks = 0
    while True:
        try:
            # the run's one check: the config, this machine (no GPU, a missing model, the hub off),
            # the backend, TRL's own checks; all before the trainer imports. Training receives the
            # decision it returns and does not ask again.
            decision = check_before_loading(cfg, cpu_presets=recipe.cpu_presets())
            return train_fn(cfg, resume=resume, decision=decision)
        except (RecipeCannotRunHere, BackendError) as exc:
            if getattr(args, "debug", False):
                raise
            print(f"error: {exc}", file=sys.stderr)
            return 2
        except EnvironmentProblem as exc:
            if getattr(args, "debug", False):
                raise
            print(f"error: {exc}", file=sys.stderr)
            return 1
        except TrainingStopped as exc:
            print(f"stopped: {exc}", file=sys.stderr)
            smaller = _shrunk_after_oom(cfg, exc) if getattr(args, "auto_shrink", False) and shrinks < 3 else None
            if smaller is None:
                return exc.code
            cfg, resume, shrinks = smaller, True, shrinks + 1


def _report(result) -> int:
    """The run's last words, on the main process: steps, the reward's first and last steps, where the
    outputs are, and what it did on held-out problems."""
    from unsloth_grpo.hardware.launch import detect

    if not detect().is_main:
        return 0
    stages = getattr(result, "stages", None)
    if stages:  # each stage's own change: a run's first and last steps would mix the stages' rewards
        from unsloth_grpo.training.stages import closing_lines

        print(f"done in {result.seconds:.1f}s: {result.global_step} steps in {len(stages)} stages; outputs in "
              f"{result.output_dir}")
        for line in closing_lines(stages):
            print(f"  {line}")
    else:
        from unsloth_grpo.training.results import ends_compared, ends_words

        m = ends_compared([r["reward"] for r in result.metrics if isinstance(r.get("reward"), (int, float))])
        change = f"mean reward first 5 logged steps {m['first5']:.3f} -> last 5 {m['last5']:.3f}" if "first5" in m \
            else ends_words("mean reward", m)
        print(f"done in {result.seconds:.1f}s: {result.global_step} steps, {change}; outputs in {result.output_dir}")
    headroom = getattr(result, "headroom_line", lambda: None)()
    if headroom:  # pass@1 after GRPO against the pass@K it started from, on training prompts
        print(headroom)
    levels = getattr(result, "curriculum_line", lambda: None)()
    if levels:  # where each curriculum dataset started and ended
        print(levels)
    held_out = getattr(result, "evaluation_line", lambda: None)()
    if held_out:  # the last word of the run: what it did on problems it never trained on
        print(held_out)
    return 0


def _shrunk_after_oom(cfg: RecipeConfig, exc) -> RecipeConfig | None:
    """The smaller config an out-of-memory stop suggested (``oom_report.json``), or None."""
    import json

    from unsloth_grpo.training import oom

    report_path = Path(cfg.output_dir) / "oom_report.json"
    if exc.code != oom.OOM_EXIT_CODE or not report_path.exists():
        return None
    report = json.loads(report_path.read_text())
    if not report.get("changes"):
        print("auto-shrink: no smaller config left to try", file=sys.stderr)
        return None
    report_path.rename(report_path.with_name(f"oom_report.step{report['step']}.json"))
    print("auto-shrink: resuming from the checkpoint with " + " ".join(report["overrides"]))
    return oom.shrunk_config(cfg, report["changes"])


def run_recipe(recipe: Recipe, argv: list[str] | None = None) -> int:
    from unsloth_grpo.hardware.console import quiet_third_party

    quiet_third_party()
    parser = argparse.ArgumentParser(prog=f"python -m unsloth_grpo.recipes.{recipe.name}",
                                     description=recipe.description)
    add_train_arguments(parser, list(recipe.presets))
    args = parse_train_args(parser, argv)
    try:
        return run_from_args(recipe, args)
    except KeyboardInterrupt as exc:
        if args.debug:
            raise
        from unsloth_grpo.cli.main import interrupted

        return interrupted(exc)
