"""What the grader decides: a :class:`Verdict`, and the rules (:data:`RULES`) it names.

The limits the grader keeps (:data:`MAX_ANSWER_CHARS`, :data:`MAX_BLOCKS`, :data:`MAX_DIGITS`) and
the reasoning blocks whose answers do not count (:data:`DEFAULT_IGNORE_INSIDE`) are here too.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

#: Reasoning blocks whose inner ``<answer>`` tags do not count as the final answer.
DEFAULT_IGNORE_INSIDE = ("reasoning", "think")

#: Longest answer region, after collapsing whitespace, that is read as a number.
MAX_ANSWER_CHARS = 200
#: Most answer blocks (or fallback candidates) a completion may hold; more is a degenerate
#: completion, refused without reading further.
MAX_BLOCKS = 32
#: Most digits one number may have (more is no answer to a word problem, and Python refuses
#: to convert integers of more than 4,300 digits).
MAX_DIGITS = 40

Number = Fraction | int | float

#: Every rule :func:`grade` can name, and what it means. Reading rules are joined with ``+``
#: (``label+number+unit``) in :attr:`Verdict.rule`.
RULES = {
    # where the answer came from (Verdict.source)
    "tag": "the <answer> block(s) outside the reasoning",
    "boxed": "fallback: \\boxed{...} outside the reasoning",
    "hashes": "fallback: a '#### X' line outside the reasoning",
    "answer_is": "fallback: an 'The answer is X' sentence outside the reasoning",
    # how an answer was read
    "same_text": "the answer is the gold text itself",
    "number": "one number (currency, separators, trailing period, delimiters allowed)",
    "label": "a label before the number ('Answer:', 'The answer is')",
    "unit": "unit words after the number ('dollars', 'years old')",
    "sign_word": "'minus' / 'negative' before the number",
    "scale": "a scale word multiplied the value ('18 thousand' = 18000)",
    "percent": "a percent sign or word",
    "boxed_answer": "the number inside one \\boxed{}",
    "equation": "read after the last '=' of a consistent equation or a label",
    "text": "the gold is not a number: equal as text (case and spacing ignored)",
    "math_verify": "math-verify found the expressions equal",
    # why an answer was not paid
    "no_answer": "no complete answer block outside the reasoning",
    "several_answers": "several different answers (blocks, boxes or sentences)",
    "too_many_answers": f"more than {MAX_BLOCKS} answer blocks or candidates: a degenerate completion",
    "too_long": f"the answer region is longer than {MAX_ANSWER_CHARS} characters",
    "huge_number": f"a number with more than {MAX_DIGITS} digits",
    "negation": "a negation ('not 18', '18 is wrong')",
    "hedge": "a hedge or bound ('18 or so', 'about 18', 'at least 18')",
    "several_numbers": "more than one number ('18 or 20', '2(3)', '18 - 1')",
    "many_candidates": "a text gold with more words beside it, or more lines than it has (hedge_refusal)",
    "wrong_expression": "an equation whose arithmetic does not give its result",
    "not_a_number": "no number this reader accepts (words, other text around it, LaTeX it cannot read)",
    "mismatch": "a readable answer that differs from the gold (after the rules that read it)",
    # evaluation only (lenient accuracy), never a reward
    "lenient": "lenient grading: the last number anywhere in the completion (lm-eval's flexible extraction)",
}


@dataclass(slots=True)
class Verdict:
    """What :func:`grade` decided for one completion, and why.

    ``status`` is ``correct``, ``wrong`` (an answer that differs), ``unparseable`` (the gold is a
    number and no number was read) or ``missing`` (no answer at all). ``source`` says where the
    answer came from, ``rule`` which rule paid or refused it (keys of :data:`RULES`, reading
    rules joined by ``+``), ``answer`` is the answer region and ``value`` the number read.
    """

    status: str
    rule: str
    source: str | None = None
    answer: str | None = None
    value: Number | None = None

    @property
    def correct(self) -> bool:
        return self.status == "correct"

    def __bool__(self) -> bool:  # a grader's verdict reads as "is it right?"
        return self.status == "correct"
