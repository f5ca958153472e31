"""Correctness rewards: is the final answer right, and is it a number at all.

Each reward is the grader's verdict turned into a number: ``correctness`` builds
:func:`unsloth_grpo.grading.make_grader` from its own parameters and scores what it decides,
and the same grader is ``fn.grader`` on the returned function, which evaluation, ``compare``
and the reward lab call (a task's ``grader(cfg)``, :class:`unsloth_grpo.tasks.Task`). So training cannot pay
for an answer evaluation counts as wrong.

Example::

    >>> fn = correctness()
    >>> fn(["<reasoning>6 * 3 = 18</reasoning>\\n<answer>$18</answer>",
    ...     "<reasoning>6 * 3 = 17</reasoning>\\n<answer>17</answer>",
    ...     "<reasoning>6 * 3</reasoning>\\n<answer>not 18</answer>"], answer=["18", "18", "18"])
    [2.0, 0.0, 0.0]
    >>> fn.grader("<answer>18 thousand</answer>", "18").rule
    'number+scale+mismatch'
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any, Sequence

from ..grading import (
    DEFAULT_IGNORE_INSIDE,
    Verdict,
    extract_answer,
    find_answer,
    make_grader,
    parse_number,
    read_answer,
)
from ._registry import RewardFunc, per_sample, register, texts


def _gold_column(answer: Any, n: int, reward: str) -> list:
    if answer is None:
        raise ValueError(
            f"reward {reward!r} needs the gold answers: the dataset must have an 'answer' column "
            "(or drop this reward from the recipe)"
        )
    return per_sample(answer, n, "answer")


def _partial_table(partial: Any) -> list[tuple[float, float]]:
    if partial is None:
        return []
    if isinstance(partial, dict):
        partial = list(partial.items())
    table = []
    for item in partial:
        try:
            tol, score = float(item[0]), float(item[1])
        except (TypeError, ValueError, IndexError):
            raise ValueError(
                f"correctness: partial entry {item!r} must be a pair [relative_tolerance, score], "
                "e.g. partial: [[0.1, 1.0], [0.2, 0.5]]"
            ) from None
        if not tol > 0:
            raise ValueError(f"correctness: partial tolerance {tol} must be > 0")
        table.append((tol, score))
    return sorted(table)


def _relative_error(pred: Fraction | float, gold: Fraction | float) -> float:
    if gold == 0:
        return abs(float(pred))
    return abs(float(pred - gold)) / abs(float(gold))


def below_reward(name: str, reward: float, **others: float | None) -> None:
    """Refuse settings that pay the full ``reward`` for an answer the grader calls wrong."""
    for key, value in others.items():
        if value is not None and value >= reward:
            raise ValueError(
                f"{name}: {key}={value:g} is not below reward={reward:g}, so an answer the grader calls "
                f"wrong would earn as much as a right one; lower {key} or raise reward"
            )


@register("correctness", family="correctness", low=0.0, high=2.0)
def correctness(
    *,
    reward: float = 2.0,
    wrong: float = 0.0,
    missing: float = 0.0,
    unparseable: float | None = None,
    partial: Sequence[Sequence[float]] | None = None,
    tag: str | Sequence[str] = "answer",
    fallback: bool = False,
    ignore_inside: Sequence[str] = DEFAULT_IGNORE_INSIDE,
    use_math_verify: bool = False,
) -> RewardFunc:
    """`reward` when the final answer equals the gold `answer` column (numerically where it is a number).

    The grader (:func:`unsloth_grpo.grading.grade`) is strict: one final answer, no hedges,
    negations or scale slips. ``wrong`` for a different answer, ``missing`` when no answer is
    found, ``unparseable`` for an answer that is not a number when the gold is one (default:
    ``wrong``). ``partial`` grants credit for near misses, as pairs ``[relative_tolerance,
    score]`` tried from the tightest: ``[[0.1, 1.0], [0.2, 0.5]]`` gives 1.0 within 10% and 0.5
    within 20% of the gold number (the Unsloth Qwen3 notebook's graded ``check_answer`` is
    ``reward=5, wrong=-2.5, missing=-2, unparseable=-4.5, partial=[[0.1, 2], [0.2, 1.5]]``).
    ``tag``, ``fallback``, ``ignore_inside`` and ``use_math_verify`` configure the grader,
    which evaluation uses too. Samples whose gold answer is None get None.
    """
    table = _partial_table(partial)
    below_reward("correctness", reward, wrong=wrong, missing=missing, unparseable=unparseable,
                 partial=max((credit for _, credit in table), default=None))
    grader = make_grader(tag=tag, fallback=fallback, ignore_inside=ignore_inside, use_math_verify=use_math_verify)
    no_number = wrong if unparseable is None else unparseable

    def score(text: str, gold: Any) -> float | None:
        if gold is None:
            return None
        verdict = grader(text, gold)
        status = verdict.status
        if status == "correct":
            return reward
        if status == "missing":
            return missing
        if status == "unparseable":
            return no_number
        if table and verdict.value is not None:
            gold_value = parse_number(gold)
            if gold_value is not None:
                error = _relative_error(verdict.value, gold_value)
                for tol, credit in table:
                    if error <= tol:
                        return credit
        return wrong

    def reward_fn(completions, answer=None, **kwargs) -> list[float | None]:
        golds = _gold_column(answer, len(completions), "correctness")
        return [score(t, g) for t, g in zip(texts(completions), golds)]

    reward_fn.grader = grader  # type: ignore[attr-defined]
    return reward_fn


@register("exact_match", family="correctness", low=0.0, high=2.0)
def exact_match(
    *,
    reward: float = 2.0,
    wrong: float = 0.0,
    case_sensitive: bool = False,
    tag: str | Sequence[str] = "answer",
    fallback: bool = False,
    ignore_inside: Sequence[str] = DEFAULT_IGNORE_INSIDE,
) -> RewardFunc:
    """`reward` when the final answer's text equals the gold `answer` text (whitespace-normalised).

    For non-numeric answers (names, labels, short phrases); ``case_sensitive`` decides
    whether ``Paris`` equals ``paris``. A missing answer scores ``wrong``.
    """
    if isinstance(tag, list):
        tag = tuple(tag)
    ignore = tuple(tuple(t) if isinstance(t, list) else t for t in ignore_inside)
    make_grader(tag=tag, ignore_inside=ignore)  # a malformed tag fails here
    below_reward("exact_match", reward, wrong=wrong)

    def norm(s: str) -> str:
        s = " ".join(str(s).split())
        return s if case_sensitive else s.casefold()

    def grader(text: Any, gold: Any) -> Verdict:
        predicted, source = find_answer(text, tag, fallback=fallback, ignore_inside=ignore)
        if predicted is None:
            return Verdict("missing" if source == "no_answer" else "wrong", source)
        if norm(predicted) == norm(gold):
            return Verdict("correct", "text", source, predicted)
        return Verdict("wrong", "mismatch", source, predicted)

    def reward_fn(completions, answer=None, **kwargs) -> list[float | None]:
        golds = _gold_column(answer, len(completions), "exact_match")
        return [None if g is None else reward if grader(t, g).correct else wrong
                for t, g in zip(texts(completions), golds)]

    reward_fn.grader = grader  # type: ignore[attr-defined]
    return reward_fn


@register("integer_answer", family="correctness", low=0.0, high=0.5, weight=1.0)
def integer_answer(
    *,
    reward: float = 0.5,
    integer_only: bool = True,
    tag: str | Sequence[str] = "answer",
    ignore_inside: Sequence[str] = DEFAULT_IGNORE_INSIDE,
) -> RewardFunc:
    """`reward` when the final answer reads as a whole number (any number with integer_only=false).

    A shaping reward that needs no gold answer: ``18``, ``-5``, ``$1,000`` and ``18.00``
    count; ``3/4``, ``2.5`` only with ``integer_only=false``; words and a missing answer score 0.
    """
    if isinstance(tag, list):
        tag = tuple(tag)
    ignore = tuple(tuple(t) if isinstance(t, list) else t for t in ignore_inside)

    def score(text: str) -> float:
        predicted = extract_answer(text, tag, ignore_inside=ignore)
        value = None if predicted is None else read_answer(predicted)[0]
        if value is None:
            return 0.0
        if integer_only and not isinstance(value, int):
            return reward if Fraction(value).denominator == 1 else 0.0
        return reward

    def reward_fn(completions, **kwargs) -> list[float | None]:
        return [score(t) for t in texts(completions)]

    return reward_fn
