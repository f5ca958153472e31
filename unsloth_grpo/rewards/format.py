"""Format rewards: does the completion follow ``<reasoning>...</reasoning><answer>...</answer>``.

Three strengths: ``strict_format`` (the whole completion is exactly the two blocks),
``soft_format`` (the two blocks appear in order somewhere) and ``xml_count`` (partial
credit per tag, so a model that writes only some tags still gets a gradient).

Tags are configurable: ``reasoning_tag="think"`` / ``answer_tag="SOLUTION"``, or literal
marker pairs such as ``reasoning_tag=["<start_working_out>", "<end_working_out>"]``.

Example::

    >>> xml_count()(["<reasoning>\\n3 + 4 = 7\\n</reasoning>\\n<answer>\\n7\\n</answer>\\n"])
    [0.5]
"""

from __future__ import annotations

from typing import Sequence

from ..grading import matches_format, tag_markers
from ._registry import RewardFunc, register, texts


def _tag(tag: str | Sequence[str]) -> str | tuple[str, str]:
    return tag if isinstance(tag, str) else tuple(tag)


@register("strict_format", family="format", low=0.0, high=0.5)
def strict_format(
    *,
    reward: float = 0.5,
    reasoning_tag: str | Sequence[str] = "reasoning",
    answer_tag: str | Sequence[str] = "answer",
) -> RewardFunc:
    """`reward` when the completion is exactly one reasoning block then one answer block.

    Only whitespace may surround the blocks, both must be non-empty and each tag appears
    once (see :func:`~unsloth_grpo.grading.matches_format`).
    """
    reasoning, answer = _tag(reasoning_tag), _tag(answer_tag)
    tag_markers(reasoning), tag_markers(answer)  # reject malformed tags at construction

    def reward_fn(completions, **kwargs) -> list[float | None]:
        return [
            reward if matches_format(t, reasoning_tag=reasoning, answer_tag=answer) else 0.0
            for t in texts(completions)
        ]

    return reward_fn


@register("soft_format", family="format", low=0.0, high=0.5)
def soft_format(
    *,
    reward: float = 0.5,
    reasoning_tag: str | Sequence[str] = "reasoning",
    answer_tag: str | Sequence[str] = "answer",
) -> RewardFunc:
    """`reward` when a reasoning block is followed by an answer block anywhere in the completion.

    Text before, between (whitespace or not) and after the blocks is allowed.
    """
    markers = (*tag_markers(_tag(reasoning_tag)), *tag_markers(_tag(answer_tag)))

    def in_order(text: str) -> bool:
        # the earliest occurrence of each marker after the previous one: found iff any order exists
        pos = 0
        for marker in markers:
            pos = text.find(marker, pos)
            if pos == -1:
                return False
            pos += len(marker)
        return True

    def reward_fn(completions, **kwargs) -> list[float | None]:
        return [reward if in_order(t) else 0.0 for t in texts(completions)]

    return reward_fn


@register("xml_count", family="format", low=-0.125, high=0.5)
def xml_count(
    *,
    per_tag: float = 0.125,
    trailing_penalty: float = 0.001,
    max_trailing_penalty: float = 0.25,
    reasoning_tag: str | Sequence[str] = "reasoning",
    answer_tag: str | Sequence[str] = "answer",
    once: bool = True,
) -> RewardFunc:
    """`per_tag` for each of the four tags present exactly once, minus a penalty for text after the answer.

    The penalty is ``trailing_penalty`` per non-whitespace-trimmed character after the
    closing answer tag (only when that tag appears once), capped at ``max_trailing_penalty``.
    With ``once=False`` a tag earns its credit whenever it is present, repeated or not: a
    denser signal for a model that has never seen the format (it cannot discourage repeats).
    """
    markers = (*tag_markers(_tag(reasoning_tag)), *tag_markers(_tag(answer_tag)))
    answer_close = markers[3]

    def score(text: str) -> float:
        value = sum(per_tag for m in markers if (text.count(m) == 1 if once else m in text))
        if text.count(answer_close) == 1:
            trailing = len(text[text.index(answer_close) + len(answer_close) :].strip())
            value -= min(trailing * trailing_penalty, max_trailing_penalty)
        return value

    def reward_fn(completions, **kwargs) -> list[float | None]:
        return [score(t) for t in texts(completions)]

    return reward_fn
