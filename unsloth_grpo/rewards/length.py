"""Length rewards: aim for a length, prefer short right answers, punish running over the limit.

Lengths are counted in ``unit``: ``"tokens"`` (from TRL's ``completion_ids`` column, the
default), ``"chars"`` or ``"words"``.

Example::

    >>> fn = length_target(target=4, unit="words")
    >>> fn(["one two three four", "one two", "one two three four five six seven eight"])
    [1.0, 0.5, 0.0]
"""

from __future__ import annotations

import math
from typing import Any, Sequence

from ..grading import DEFAULT_IGNORE_INSIDE, is_correct
from ._registry import RewardFunc, per_sample, register, texts

UNITS = ("tokens", "chars", "words")


def _check_unit(reward: str, unit: str) -> None:
    if unit not in UNITS:
        raise ValueError(f"{reward}: unit={unit!r}; choose one of {UNITS}")


def _lengths(reward: str, completions: Sequence[Any], completion_ids: Any, unit: str) -> list[int]:
    if unit == "tokens":
        if completion_ids is None:
            raise ValueError(
                f"reward {reward!r} counts tokens but got no completion_ids (TRL passes them during "
                "training); set params unit: chars or unit: words to score plain texts"
            )
        ids = per_sample(completion_ids, len(completions), "completion_ids")
        return [len(x) for x in ids]
    if unit == "chars":
        return [len(t) for t in texts(completions)]
    return [len(t.split()) for t in texts(completions)]


@register("length_target", family="length", low=0.0, high=1.0)
def length_target(*, target: int = 200, unit: str = "tokens", reward: float = 1.0) -> RewardFunc:
    """`reward` at exactly `target` length, falling linearly to 0 at 0 and at twice the target.

    Score ``reward * max(0, 1 - |length - target| / target)``.
    """
    _check_unit("length_target", unit)
    if not target > 0:
        raise ValueError(f"length_target: target={target} must be > 0")

    def reward_fn(completions, completion_ids=None, **kwargs) -> list[float | None]:
        return [
            reward * max(0.0, 1.0 - abs(n - target) / target)
            for n in _lengths("length_target", completions, completion_ids, unit)
        ]

    return reward_fn


@register("cosine_length", family="length", low=-1.0, high=1.0)
def cosine_length(
    *,
    max_length: int = 1000,
    min_value_correct: float = 0.5,
    max_value_correct: float = 1.0,
    min_value_wrong: float = -1.0,
    max_value_wrong: float = -0.5,
    unit: str = "tokens",
    tag: str | Sequence[str] = "answer",
    fallback: bool = False,
    ignore_inside: Sequence[str] = DEFAULT_IGNORE_INSIDE,
) -> RewardFunc:
    """Correctness scaled by length on a cosine: short right answers best, short wrong answers worst.

    A right answer gets ``max_value_correct`` at length 0 falling to ``min_value_correct`` at
    ``max_length``; a wrong (or missing) one ``min_value_wrong`` at 0 rising to
    ``max_value_wrong`` (open-r1's cosine-scaled reward). Lengths above ``max_length`` count
    as ``max_length``. Needs the gold ``answer`` column; samples with a None gold get None.
    """
    _check_unit("cosine_length", unit)
    if not max_length > 0:
        raise ValueError(f"cosine_length: max_length={max_length} must be > 0")
    tag = tuple(tag) if isinstance(tag, list) else tag

    def value(n: int, correct: bool) -> float:
        cosine = math.cos(min(n / max_length, 1.0) * math.pi)
        if correct:
            low, high = min_value_correct, max_value_correct
        else:  # swapped: longer wrong answers are punished less
            low, high = max_value_wrong, min_value_wrong
        return low + 0.5 * (high - low) * (1.0 + cosine)

    def reward_fn(completions, answer=None, completion_ids=None, **kwargs) -> list[float | None]:
        if answer is None:
            raise ValueError(
                "reward 'cosine_length' needs the gold answers: the dataset must have an 'answer' column"
            )
        golds = per_sample(answer, len(completions), "answer")
        lengths = _lengths("cosine_length", completions, completion_ids, unit)
        out: list[float | None] = []
        for text, gold, n in zip(texts(completions), golds, lengths):
            if gold is None:
                out.append(None)
                continue
            correct = is_correct(
                text, gold, tag=tag, fallback=fallback, ignore_inside=tuple(ignore_inside)
            )
            out.append(value(n, correct))
        return out

    return reward_fn


@register("overlong", family="length", low=-1.0, high=0.0)
def overlong(*, max_length: int | None = None, cache: int = 256, penalty: float = 1.0) -> RewardFunc:
    """DAPO's soft overlong punishment: 0 up to `max_length - cache` tokens, then down to -`penalty` at `max_length`.

    ``max_length`` must be the training's ``max_completion_length`` (required). Counts
    tokens from ``completion_ids``; a completion longer than ``max_length`` gets -``penalty``.
    """
    if max_length is None:
        raise ValueError(
            "overlong needs max_length: set params max_length to training.max_completion_length"
        )
    if not 0 < cache <= max_length:
        raise ValueError(f"overlong: need 0 < cache ({cache}) <= max_length ({max_length})")
    start = max_length - cache

    def value(n: int) -> float:
        if n <= start:
            return 0.0
        if n <= max_length:
            return -penalty * (n - start) / cache
        return -penalty

    def reward_fn(completions, completion_ids=None, **kwargs) -> list[float | None]:
        return [value(n) for n in _lengths("overlong", completions, completion_ids, "tokens")]

    return reward_fn
