"""Correctness rewards: is the final answer right, and is it a number at all.

All of them read the answer with :func:`unsloth_grpo.answers.extract_answer` and grade it
with :func:`unsloth_grpo.answers.answers_match`, the functions evaluation uses.

Example::

    >>> fn = correctness()
    >>> fn(["<reasoning>6 * 3 = 18</reasoning>\\n<answer>$18</answer>",
    ...     "<reasoning>6 * 3 = 17</reasoning>\\n<answer>17</answer>"], answer=["18", "18"])
    [2.0, 0.0]
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any, Sequence

from ..answers import DEFAULT_IGNORE_INSIDE, _parse, answers_match, extract_answer, parse_number
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

    ``wrong`` for a different answer, ``missing`` when no answer is found. ``partial`` grants
    credit for near misses, as pairs ``[relative_tolerance, score]`` tried from the tightest:
    ``[[0.1, 1.0], [0.2, 0.5]]`` gives 1.0 within 10% and 0.5 within 20% of the gold number
    (the Unsloth Qwen3 notebook's graded ``check_answer`` is ``reward=5, wrong=-2.5,
    missing=-2, unparseable=-4.5, partial=[[0.1, 2], [0.2, 1.5]]``). ``unparseable``: score
    for an answer that is not a number when the gold is one (default: ``wrong``). ``tag``,
    ``fallback`` and ``ignore_inside`` are :func:`~unsloth_grpo.answers.extract_answer`'s.
    Samples whose gold answer is None get None.
    """
    table = _partial_table(partial)
    if isinstance(tag, list):
        tag = tuple(tag)
    ignore = tuple(tuple(t) if isinstance(t, list) else t for t in ignore_inside)
    no_number = wrong if unparseable is None else unparseable

    def score(text: str, gold: Any) -> float | None:
        if gold is None:
            return None
        predicted = extract_answer(text, tag, fallback=fallback, ignore_inside=ignore)
        if predicted is None:
            return missing
        # identical text is a match under every rule below; most right answers take this path
        if predicted == gold:
            return reward
        if isinstance(gold, str) and not use_math_verify:
            # the common case, answers_match without its generality: two plain numbers
            pred_num, gold_num = _parse(predicted), _parse(gold)
            if pred_num is not None and gold_num is not None and not (pred_num[1] or gold_num[1]):
                if pred_num[0] == gold_num[0]:
                    return reward
                return _partial(pred_num[0], gold_num[0])
        if answers_match(predicted, gold, use_math_verify=use_math_verify):
            return reward
        if not table and unparseable is None:
            return wrong
        gold_value = parse_number(gold)
        if gold_value is None:
            return wrong
        value = parse_number(predicted)
        if value is None:
            return no_number
        return _partial(value, gold_value)

    def _partial(value, gold_value) -> float:
        if table:
            error = _relative_error(value, gold_value)
            for tol, credit in table:
                if error <= tol:
                    return credit
        return wrong

    def reward_fn(completions, answer=None, **kwargs) -> list[float | None]:
        golds = _gold_column(answer, len(completions), "correctness")
        return [score(t, g) for t, g in zip(texts(completions), golds)]

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

    def norm(s: str) -> str:
        s = " ".join(str(s).split())
        return s if case_sensitive else s.casefold()

    def reward_fn(completions, answer=None, **kwargs) -> list[float | None]:
        golds = _gold_column(answer, len(completions), "exact_match")
        out: list[float | None] = []
        for text, gold in zip(texts(completions), golds):
            if gold is None:
                out.append(None)
                continue
            predicted = extract_answer(text, tag, fallback=fallback, ignore_inside=ignore)
            out.append(reward if predicted is not None and norm(predicted) == norm(gold) else wrong)
        return out

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
        parsed = None if predicted is None else _parse(predicted)
        if parsed is None:
            return 0.0
        value = parsed[0]
        if integer_only and not isinstance(value, int):
            whole = value.denominator == 1 if isinstance(value, Fraction) else value.is_integer()
            return reward if whole else 0.0
        return reward

    def reward_fn(completions, **kwargs) -> list[float | None]:
        return [score(t) for t in texts(completions)]

    return reward_fn
