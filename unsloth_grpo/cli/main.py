"""The ``unsloth-grpo`` command: one subcommand per module, imported only when used.

    unsloth-grpo train --recipe gsm8k --preset smoke --output-dir outputs/smoke
    unsloth-grpo train --config recipes/gsm8k.yaml training.max_steps=50
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys

#: Modules that contribute a subcommand through ``add_parser(subparsers)``. A module that is
#: missing (an optional part not installed) is skipped rather than breaking the whole CLI.
COMMAND_MODULES = [
    "unsloth_grpo.cli.train",
    "unsloth_grpo.cli.rewards",
    "unsloth_grpo.cli.evaluate",
    "unsloth_grpo.cli.plot",
    "unsloth_grpo.cli.plan",
    "unsloth_grpo.cli.doctor",
    "unsloth_grpo.cli.export",
    "unsloth_grpo.cli.generate",
    "unsloth_grpo.cli.serve",
]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="unsloth-grpo", description="GRPO training on one consumer GPU.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMAND_MODULES:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name == name:
                continue
            raise
        add = getattr(module, "add_parser", None)
        if add is not None:
            add(sub)
    return parser


def importable_cwd() -> None:
    """Put the current directory first on ``sys.path``, where ``python -m`` puts it.

    The console script starts with its own ``bin/`` folder there instead, so without this
    ``unsloth-grpo train`` could not import a reward module named by import path
    (``my_rewards:correctness``) that ``python -m unsloth_grpo.recipes.<task>`` finds in the same folder.
    """
    cwd = os.getcwd()
    if not any(entry in ("", ".", cwd) for entry in sys.path):
        sys.path.insert(0, cwd)


def main(argv: list[str] | None = None) -> int:
    from unsloth_grpo.hardware.console import quiet_third_party

    importable_cwd()
    quiet_third_party()
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if extra:  # `train`'s KEY=VALUE overrides after an option; anything else is refused as argparse would
        from unsloth_grpo.cli.arguments import with_later_overrides

        args = with_later_overrides(parser, args, extra)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt as exc:
        if getattr(args, "debug", False):
            raise
        return interrupted(exc)


def interrupted(exc: KeyboardInterrupt) -> int:
    """Ctrl-C outside a training loop (which saves a checkpoint itself): one line, exit code 130."""
    print(f"stopped: {exc}" if str(exc) else "stopped by Ctrl-C", file=sys.stderr)
    return 130


if __name__ == "__main__":
    sys.exit(main())
