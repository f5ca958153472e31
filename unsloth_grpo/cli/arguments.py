"""What the command lines share in parsing: option values with a range, and overrides after options.

``type=in_range(...)`` makes a value out of range (or ``nan``, ``inf``) argparse's own usage error:
exit code 2, ``error: argument --vram-gb: ...`` naming the option, what it takes and an example,
before the command does anything. :func:`with_later_overrides` takes the ``KEY=VALUE`` words that
argparse leaves over after an option (the recipe modules and ``unsloth-grpo train``).
"""

from __future__ import annotations

import argparse
import math
from typing import Callable


def in_range(kind: type, low: float, high: float | None, what: str, example: str, *,
             above_low: bool = False, why: str = "") -> Callable[[str], float]:
    """An argparse ``type``: ``kind`` (int or float) from ``low`` (excluded when ``above_low``) to
    ``high`` (None: no upper end). ``what`` names the value, ``example`` is a good one, ``why`` (if
    given) says where the range comes from."""
    number = "a whole number" if kind is int else "a number"
    if above_low:
        span = f"above {low:g}" + ("" if high is None else f", at most {high:g}")
    else:
        span = f"at least {low:g}" if high is None else f"from {low:g} to {high:g}"
    rule = f"{what} is {number} {span}" + (f" ({why})" if why else "") + f"; e.g. {example}"

    def parse(text: str):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not {number}: {rule}") from None
        if not math.isfinite(value) or value < low or (above_low and value == low) or (high is not None and value > high):
            raise argparse.ArgumentTypeError(f"{text} is out of range: {rule}")
        return value

    parse.__name__ = kind.__name__  # argparse names the type by it in its own messages
    return parse


def with_later_overrides(parser: argparse.ArgumentParser, args: argparse.Namespace,
                         extra: list[str]) -> argparse.Namespace:
    """``args`` with the ``KEY=VALUE`` words of ``extra`` added to its overrides, in the order typed;
    any other word of ``extra`` is argparse's usual "unrecognized arguments" error."""
    later = [w for w in extra if "=" in w and not w.startswith("-")] if hasattr(args, "overrides") else []
    rest = [w for w in extra if w not in later]
    if rest:
        parser.error(f"unrecognized arguments: {' '.join(rest)}")
    if later:
        args.overrides = [*args.overrides, *later]
    return args
