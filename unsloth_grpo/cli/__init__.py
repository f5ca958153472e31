"""The command line: the ``unsloth-grpo`` console script, the recipe runner and ``plan``.

This wing sits on top: it parses arguments and calls into training, evaluation and the hardware
layer. Nothing below it imports it.
"""

from unsloth_grpo.cli.main import build_parser, main

__all__ = ["build_parser", "main"]
