"""Grading: where a completion's final answer is, what it says, and whether it is right.

GRPO optimises whatever the reward pays for, and a policy finds every answer a lax grader
accepts. So the correctness reward, evaluation, ``compare`` and the reward lab all call one
function, :func:`grade` (built once per setting by :func:`make_grader`), and its rules are
strict: when in doubt, an answer is not right.

Where the answer is
    The content of the ``<answer>...</answer>`` blocks (the tag is configurable) that are not
    inside a reasoning block (``<reasoning>``, ``<think>``; an unclosed reasoning block hides
    everything after it). An unclosed ``<answer>`` does not count. Several blocks must say the
    same thing: two different answers are a hedge, and a hedge is never right. With
    ``fallback=True`` and no block, the answer may come from ``\\boxed{...}``, then a ``#### X``
    line, then an "The answer is X" sentence, outside the reasoning and again all agreeing.
    There is no "last number in the text" fallback: it pays any text that merely contains the
    number.

What counts as a number (:func:`read_answer`)
    One number, alone or with what a person writes around a single value: a currency sign
    (``$18``, ``\\$18``, ``18 USD``), thousands separators in groups of three (``1,000``,
    ``1{,}000``), a trailing period, Markdown or math delimiters (``**18**``, ``$18$``), a unit
    after it (``18 dollars``, ``18 years old``), a label before it that ends in ``:``, ``=``
    or a verb such as ``is`` (``Answer: 18``, ``The answer is 18.``), a sign (``-5``, ``minus 5``),
    a fraction, mixed number or decimal (``3/4``, ``3 1/2``, ``\\frac{3}{4}``, ``.5``), a percent
    (``50%``, ``50 percent``), one ``\\boxed{}`` around it, and a scale word, which changes the
    value (``18 thousand`` is 18000, ``2 dozen`` is 24). An equation is read at its last ``=``
    when every earlier side is a label (``Total = 18``) or arithmetic that evaluates to the same
    value (``5 + 13 = 18``; ``20 - 3 = 18`` is rejected).

What does not
    Two numbers (``18 or 20``, ``2(3)``, ``18 - 1``), a negation (``not 18``, ``18 is wrong``),
    a hedge or a bound (``about 18``, ``18 or so``, ``at least 18``, ``probably 18``), a sentence
    that merely contains the number (``I counted 18 apples``), number words (``eighteen``),
    non-ASCII digits, more than 40 digits, or an answer region longer than 200 characters once
    its whitespace is collapsed. Each refusal has a name (:data:`RULES`), so the reward lab can
    show which rule paid a completion or turned it down.

Comparison (:func:`numbers_equal`)
    Exact with fractions (``3/4`` = ``0.75``). ``X%`` equals ``X`` (GSM8K writes percentages as
    plain numbers) and, against a number that is not whole, ``X/100`` (``50%`` = ``0.5``; but
    ``4800%`` is not ``48``). A gold answer that is not a number is compared as text (case and
    spacing ignored). ``use_math_verify=True`` lets the optional ``math-verify`` package decide
    expressions and LaTeX the number reader cannot (``\\sqrt{8}`` = ``2\\sqrt{2}``), for answers
    with no words in them only, so it never sees a hedge.

Cost
    Every step is linear in the completion's length; a completion of 32k characters is graded in
    well under a millisecond, and a plain integer answer takes a few microseconds.

Example::

    >>> text = "<reasoning>3 + 15 = 18</reasoning>\\n<answer>$18.00</answer>"
    >>> extract_answer(text)
    '$18.00'
    >>> is_correct(text, "18")
    True
    >>> numbers_equal("3/4", "0.75"), numbers_equal("not 18", "18"), numbers_equal("18 thousand", "18000")
    (True, False, True)
    >>> grade("<answer>18 or 20</answer>", "18").rule
    'hedge'
"""

from __future__ import annotations

from unsloth_grpo.grading.grader import answers_match, grade, is_correct, lenient, lenient_answer, make_grader, matches_format
from unsloth_grpo.grading.locate import completion_text, content_text, extract_answer, extract_tag, find_answer, tag_markers
from unsloth_grpo.grading.numbers import hedge_refusal, numbers_equal, parse_number, read_answer
from unsloth_grpo.grading.verdict import DEFAULT_IGNORE_INSIDE, RULES, Verdict

__all__ = [
    "DEFAULT_IGNORE_INSIDE",
    "RULES",
    "Verdict",
    "completion_text",
    "content_text",
    "extract_answer",
    "extract_tag",
    "find_answer",
    "read_answer",
    "hedge_refusal",
    "parse_number",
    "numbers_equal",
    "answers_match",
    "grade",
    "make_grader",
    "is_correct",
    "matches_format",
    "lenient_answer",
    "lenient",
    "tag_markers",
]
