"""``unsloth-grpo train``: the console twin of ``python -m unsloth_grpo.recipes.<task>``."""

from __future__ import annotations

import argparse


def available_recipes() -> list[str]:
    """Every task has its recipe (``python -m unsloth_grpo.recipes.<task>`` is its entry point)."""
    from unsloth_grpo.tasks import available_tasks

    return available_tasks()


def load_recipe(name: str):
    """The recipe of task ``name``, kept by the task (the recipe modules sit above the CLI and hand it in)."""
    from unsloth_grpo.tasks import get_recipe

    return get_recipe(name)


def add_parser(subparsers) -> None:
    from unsloth_grpo.cli.recipe import add_train_arguments

    p = subparsers.add_parser("train", help="Train with GRPO (a recipe, a preset, a config file).")
    p.add_argument("--recipe", default=None, choices=available_recipes(),
                   help="Recipe whose defaults and presets to start from (default: the config's task, else gsm8k).")
    add_train_arguments(p, None)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from unsloth_grpo.cli.recipe import run_from_args

    name = args.recipe
    if name is None and args.config:
        from pathlib import Path

        import yaml

        try:
            loaded = yaml.safe_load(Path(args.config).read_bytes())  # bytes: YAML reads UTF-16 with a BOM too
            name = loaded.get("task") if isinstance(loaded, dict) else None
        except (OSError, yaml.YAMLError):
            name = None  # the config loader reports the problem with the file
    if name is None and args.resume is not None:
        # `train --resume RUN`: the recipe that made the run (its config.yaml's task), not gsm8k's; a
        # --preset is not applied to a run that goes on (cli/recipe.py), so it does not choose either
        from unsloth_grpo.cli.recipe import _resume_and_overrides, resumed_run
        from unsloth_grpo.runs import recorded_task

        resume, _ = _resume_and_overrides(args)
        run = resumed_run(resume) if isinstance(resume, str) else args.output_dir
        name = recorded_task(run) if run is not None else None
    name = name or "gsm8k"
    if name not in available_recipes():
        print(f"error: no recipe named '{name}'; available: {', '.join(available_recipes())}")
        return 2
    return run_from_args(load_recipe(name), args)
