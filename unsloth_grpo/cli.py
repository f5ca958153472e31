"""The ``unsloth-grpo`` command: one subcommand per module, imported only when used.

    unsloth-grpo train --recipe gsm8k --preset smoke --output-dir outputs/smoke
    unsloth-grpo train --config recipes/gsm8k.yaml training.max_steps=50
"""

from __future__ import annotations

import argparse
import importlib
import sys

#: Modules that contribute a subcommand through ``add_parser(subparsers)``. A module that is
#: missing (an optional part not installed) is skipped rather than breaking the whole CLI.
COMMAND_MODULES = [
    "unsloth_grpo.cli_train",
    "unsloth_grpo.lab",
    "unsloth_grpo.evaluate",
    "unsloth_grpo.plots",
    "unsloth_grpo.planner_cli",
    "unsloth_grpo.doctor",
    "unsloth_grpo.export",
    "unsloth_grpo.inference",
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


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
