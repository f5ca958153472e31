"""Format rewards: does the completion follow ``<reasoning>...</reasoning><answer>...</answer>``.

Three strengths: ``strict_format`` (the whole completion is exactly the two blocks),
``soft_format`` (the two blocks appear in order somewhere) and ``xml_count`` (partial
credit per tag, so a model that writes only some tags still gets a gradient).

Tags are configurable: ``reasoning_tag="think"`` / ``answer_tag="SOLUTION"``, or literal
marker pairs such as ``reasoning_tag=["<start_working_out>", "<end_working_out>"]``.

None of them pays for an answer block that holds no answer (``require_answer=True``, the default):
an empty block, one of punctuation only, a repeated block, or the prompt's own placeholder
(``<answer>the final number</answer>`` copied from the system prompt's template). A policy paid for
the tags alone learns to copy the template: a real 135M model did (docs/real_model.md).
:func:`~unsloth_grpo.grading.copying.answer_block_problem` says which case a completion is.

Example::

    >>> xml_count()(["<reasoning>\\n3 + 4 = 7\\n</reasoning>\\n<answer>\\n7\\n</answer>\\n"])
    [0.5]
"""

from __future__ import annotations

from typing import Sequence

from ..grading import matches_format, tag_markers
from ..grading.copying import NO_ANSWER_BLOCK, answer_block_problem
from ._registry import RewardFunc, register, texts


def _tag(tag: str | Sequence[str]) -> str | tuple[str, str]:
    return tag if isinstance(tag, str) else tuple(tag)


def _answer_problems(completions, prompts, answer_tag, required: bool) -> list[str | None]:
    """Per completion: why its answer block holds no answer, None when it holds one (always None when
    not ``required``)."""
    if not required:
        return [None] * len(completions)
    prompts = prompts if prompts is not None else [None] * len(completions)
    return [answer_block_problem(c, p, answer_tag=answer_tag) for c, p in zip(completions, prompts)]


@register("strict_format", family="format", low=0.0, high=0.5)
def strict_format(
    *,
    reward: float = 0.5,
    reasoning_tag: str | Sequence[str] = "reasoning",
    answer_tag: str | Sequence[str] = "answer",
    require_answer: bool = True,
) -> RewardFunc:
    """`reward` when the completion is exactly one reasoning block then one answer block.

    Only whitespace may surround the blocks, both must be non-empty and each tag appears
    once (see :func:`~unsloth_grpo.grading.matches_format`); with ``require_answer`` the answer
    block must not be the prompt's placeholder or punctuation only.
    """
    reasoning, answer = _tag(reasoning_tag), _tag(answer_tag)
    tag_markers(reasoning), tag_markers(answer)  # reject malformed tags at construction

    def reward_fn(completions, prompts=None, **kwargs) -> list[float | None]:
        problems = _answer_problems(completions, prompts, answer, require_answer)
        return [
            reward if why is None and matches_format(t, reasoning_tag=reasoning, answer_tag=answer) else 0.0
            for t, why in zip(texts(completions), problems)
        ]

    return reward_fn


@register("soft_format", family="format", low=0.0, high=0.5)
def soft_format(
    *,
    reward: float = 0.5,
    reasoning_tag: str | Sequence[str] = "reasoning",
    answer_tag: str | Sequence[str] = "answer",
    require_answer: bool = True,
) -> RewardFunc:
    """`reward` when a reasoning block is followed by an answer block anywhere in the completion.

    Text before, between (whitespace or not) and after the blocks is allowed; with
    ``require_answer`` the answer block must hold an answer (one block, not empty, not the
    prompt's placeholder).
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

    def reward_fn(completions, prompts=None, **kwargs) -> list[float | None]:
        problems = _answer_problems(completions, prompts, _tag(answer_tag), require_answer)
        return [reward if why is None and in_order(t) else 0.0 for t, why in zip(texts(completions), problems)]

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
    require_answer: bool = True,
) -> RewardFunc:
    """`per_tag` for each of the four tags present exactly once, minus a penalty for text after the answer.

    The penalty is ``trailing_penalty`` per non-whitespace-trimmed character after the
    closing answer tag (only when that tag appears once), capped at ``max_trailing_penalty``.
    With ``once=False`` a tag earns its credit whenever it is present, repeated or not: a
    denser signal for a model that has never seen the format (it cannot discourage repeats).
    With ``require_answer`` a completion whose answer block holds no answer (repeated, empty,
    punctuation, the prompt's placeholder) earns nothing at all; one that has not written a closed
    answer block yet keeps its credit for the tags it has. ``require_answer=False`` pays tags alone,
    for a model that cannot write an answer yet (the smoke presets' random model).
    """
    markers = (*tag_markers(_tag(reasoning_tag)), *tag_markers(_tag(answer_tag)))
    answer_close = markers[3]

    def score(text: str, why: str | None) -> float:
        if why is not None and why != NO_ANSWER_BLOCK:
            return 0.0
        value = sum(per_tag for m in markers if (text.count(m) == 1 if once else m in text))
        if text.count(answer_close) == 1:
            trailing = len(text[text.index(answer_close) + len(answer_close) :].strip())
            value -= min(trailing * trailing_penalty, max_trailing_penalty)
        return value

    def reward_fn(completions, prompts=None, **kwargs) -> list[float | None]:
        problems = _answer_problems(completions, prompts, _tag(answer_tag), require_answer)
        return [score(t, why) for t, why in zip(texts(completions), problems)]

    return reward_fn
