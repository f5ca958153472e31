"""Worked rewards: pay the calculation written out, not only the number in the answer block.

``correctness`` pays the final number. On a 135M model that left a GRPO stage free to answer some problems
with a quantity copied from the question (``<reasoning> 6 minutes </reasoning>``, answered 6) on wordings
it had not trained on (issue 52, docs/real_model.md). ``worked_calculation`` pays a final answer that is
the stated result of a right calculation on the question's numbers
(:func:`unsloth_grpo.grading.calculations.answer_is_worked`); it does not check that the calculation is the
one the problem asks for, which is what ``correctness`` pays, so give it a smaller weight.

Example::

    >>> fn = worked_calculation()
    >>> prompt = [{"role": "user", "content": "Nadia read for 6 minutes and then 9 minutes. How long in all?"}]
    >>> fn(["<reasoning>6 + 9 = 15</reasoning><answer>15</answer>",
    ...     "<reasoning>6 minutes</reasoning><answer>6</answer>",
    ...     "<reasoning>6 + 9 = 14</reasoning><answer>14</answer>",
    ...     "<reasoning>1 + 5 = 6</reasoning><answer>6</answer>"], prompts=[prompt] * 4)
    [0.5, 0.0, 0.0, 0.0]
"""

from __future__ import annotations

from typing import Any, Sequence

from ..grading import DEFAULT_IGNORE_INSIDE
from ..grading.calculations import answer_is_worked
from ..grading.copying import prompt_texts
from ._registry import RewardFunc, per_sample, register, texts


def _questions(prompts: Any, question: Any, n: int) -> list[str]:
    if question is not None:
        return [str(q) for q in per_sample(question, n, "question")]
    if prompts is None:
        raise ValueError("reward 'worked_calculation' needs the questions: TRL passes them as prompts; called "
                         "by hand, pass prompts=[...] or a question column (or set from_question: false)")
    return [prompt_texts(p)[1] for p in per_sample(prompts, n, "prompts")]


@register("worked_calculation", family="worked", low=0.0, high=0.5)
def worked_calculation(
    *,
    reward: float = 0.5,
    from_question: bool = True,
    arithmetic: bool = True,
    tag: str | Sequence[str] = "answer",
    ignore_inside: Sequence[str] = DEFAULT_IGNORE_INSIDE,
) -> RewardFunc:
    """`reward` when the final answer is the result of a right calculation written out (``6 + 9 = 15``).

    Every number the calculation uses must be one the question states, or the result of an earlier right
    calculation in the completion (``from_question``; off, any right calculation counts). The question is
    the prompt's user text (or a ``question`` column). With ``arithmetic`` off the calculation's own
    arithmetic is not checked: the answer need only be the result it states (``18 + 5 = 13`` answered 13 is
    paid), so only an answer that no calculation leads to goes unpaid. It pays consistency, not the right
    operation: keep ``correctness`` beside it, with the larger weight.
    """
    if isinstance(tag, list):
        tag = tuple(tag)
    ignore = tuple(tuple(t) if isinstance(t, list) else t for t in ignore_inside)

    def reward_fn(completions, prompts=None, question=None, **kwargs) -> list[float]:
        n = len(completions)
        asked = _questions(prompts, question, n) if from_question else [""] * n
        return [reward if answer_is_worked(t, q, tag=tag, from_question=from_question, arithmetic=arithmetic,
                                           ignore_inside=ignore)
                else 0.0 for t, q in zip(texts(completions), asked)]

    return reward_fn
