"""The calculations a completion writes out (``6 + 9 = 15``): what each computes, whether its stated result
is right, and whether it starts from the question's numbers.

A reward that pays the final number alone cannot tell ``6 + 9 = 15`` answered 15 from a lucky guess, and a
policy under GRPO may find an answer that skips the calculation: a 135M model learned to answer with the
first quantity of the question on wordings it had not trained on (``<reasoning> 6 minutes </reasoning>``,
answered 6; issue 52). :func:`worked_calculations` reads the calculations, and :func:`answer_is_worked` says
whether the final answer is the result of one that is right and grounded: every operand is a number of the
question or the result of an earlier right calculation, so ``1 + 5 = 6`` does not make 6 a worked answer
to a question about 6 and 9 minutes.

A unit between a number and its sign is read through (``4 cm + 5 cm = 9 cm``). Chained equations are read
one ``=`` at a time from the left: ``2 + 3 = 5`` in ``2 + 3 = 5 + 1 = 6`` (the rest has no number before
its sign and is not read).

    >>> question = "Nadia read for 6 minutes before lunch and 9 minutes after lunch. How long in all?"
    >>> [str(c) for c in worked_calculations("6 minutes + 9 minutes = 15 minutes, so 15", question)]
    ['6 + 9 = 15 (right, from the question)']
    >>> answer_is_worked("<reasoning>6 + 9 = 15</reasoning><answer>15</answer>", question)
    True
    >>> answer_is_worked("<reasoning>6 minutes</reasoning><answer>6</answer>", question)
    False
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from unsloth_grpo.grading.locate import completion_text, extract_answer
from unsloth_grpo.grading.numbers import _arithmetic, read_answer

_NUMBER = r"(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?"
_OPERAND = rf"\(?\s*{_NUMBER}\s*\)?"
_SIGN = r"[-+*/×÷xX·]"
#: A left side of numbers, signs and brackets with at least one sign, ``=``, and a stated result.
_CALCULATION = re.compile(rf"(?<![\d.,])(?P<left>{_OPERAND}(?:\s*{_SIGN}\s*{_OPERAND})+)\s*=\s*\$?\s*"
                          rf"(?P<result>-?{_NUMBER})")
#: A number as a question states it (``6``, ``1,200``, ``2.5``), not part of a longer one.
_QUANTITY = re.compile(rf"(?<![\d.,]){_NUMBER}")
#: A unit between a number and a sign or ``=`` (``4 cm + 5 cm = 9 cm``), read through.
_UNIT_BEFORE_SIGN = re.compile(r"(?<=\d)\s*[A-Za-z]+\.?(?=\s*[-+*/×÷=])")


def _value(text: str) -> Fraction:
    return Fraction(text.replace(",", ""))


@dataclass(frozen=True)
class Calculation:
    """One calculation as written: its left side, the numbers in it, its stated result and what the left
    side computes (None where it cannot be read, e.g. a division by zero)."""

    left: str
    operands: tuple[Fraction, ...]
    stated: Fraction
    computed: Fraction | None
    grounded: bool

    @property
    def right(self) -> bool:
        return self.computed is not None and self.computed == self.stated

    def __str__(self) -> str:
        verdict = "right" if self.right else "wrong"
        where = "from the question" if self.grounded else "not from the question"
        return f"{self.left} = {self.stated} ({verdict}, {where})"


def quantity_texts(question: str) -> list[str]:
    """The numbers ``question`` states, as written (``1,200``), in order."""
    return _QUANTITY.findall(question or "")


def question_quantities(question: str) -> set[Fraction]:
    """The numbers ``question`` states, as values."""
    return {_value(q) for q in quantity_texts(question)}


def worked_calculations(completion: Any, question: str, *, arithmetic: bool = True) -> list[Calculation]:
    """Every calculation ``completion`` writes, in order. ``grounded``: each operand is a number of
    ``question`` or the stated result of an earlier grounded calculation, a right one unless ``arithmetic``
    is off."""
    text = _UNIT_BEFORE_SIGN.sub("", completion_text(completion))
    known = question_quantities(question)
    out = []
    for match in _CALCULATION.finditer(text):
        left = " ".join(match.group("left").split())
        operands = tuple(_value(n) for n in _QUANTITY.findall(left))
        stated = _value(match.group("result"))
        computed = _arithmetic(left)
        grounded = all(o in known for o in operands)
        calculation = Calculation(left, operands, stated, computed, grounded)
        if grounded and (calculation.right or not arithmetic):
            known.add(stated)
        out.append(calculation)
    return out


def answer_is_worked(completion: Any, question: str, *, tag: str | tuple[str, str] = "answer",
                     from_question: bool = True, arithmetic: bool = True, **locate: Any) -> bool:
    """True when the final answer (read as the grader reads it) is the stated result of a calculation the
    completion writes: a right one (any, with ``arithmetic`` off: ``18 + 5 = 13`` answered 13 then counts),
    grounded in the question's numbers unless ``from_question`` is off."""
    answer = extract_answer(completion_text(completion), tag, **locate)
    value = None if answer is None else read_answer(answer)[0]
    if value is None:
        return False
    return any((c.right or not arithmetic) and (c.grounded or not from_question) and c.stated == value
               for c in worked_calculations(completion, question, arithmetic=arithmetic))


__all__ = ["Calculation", "answer_is_worked", "quantity_texts", "question_quantities", "worked_calculations"]
