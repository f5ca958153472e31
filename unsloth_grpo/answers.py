"""The grader: where a completion's final answer is, what it says, and whether it is right.

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

import bisect
import math
import re
from dataclasses import dataclass
from fractions import Fraction
from functools import lru_cache
from typing import Any, Callable, Iterable

__all__ = [
    "RULES",
    "Verdict",
    "completion_text",
    "extract_answer",
    "extract_tag",
    "find_answer",
    "read_answer",
    "parse_number",
    "numbers_equal",
    "answers_match",
    "grade",
    "make_grader",
    "is_correct",
    "matches_format",
    "lenient_answer",
    "lenient",
]

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


# ---------------------------------------------------------------- completions and tags


def completion_text(completion: Any) -> str:
    """The text of one completion as TRL passes it: a string or a list of chat messages.

    For a chat list the contents of the assistant messages are joined (TRL passes
    ``[{"role": "assistant", "content": text}]``); content given as a list of parts
    (``[{"type": "text", "text": ...}]``) is joined too.
    """
    if isinstance(completion, str):
        return completion
    if isinstance(completion, dict):
        return _content_text(completion.get("content"))
    if isinstance(completion, (list, tuple)):
        messages = [m for m in completion if isinstance(m, dict)]
        assistant = [m for m in messages if m.get("role", "assistant") == "assistant"]
        return "".join(_content_text(m.get("content")) for m in (assistant or messages))
    if completion is None:
        return ""
    raise TypeError(
        f"a completion must be a string or a list of chat messages, got {type(completion).__name__}"
    )


def _content_text(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p.get("text", "") if isinstance(p, dict) else str(p) for p in content)
    return str(content)


def _markers(tag: str | tuple[str, str] | list[str]) -> tuple[str, str]:
    """``"answer"`` -> ``("<answer>", "</answer>")``; a pair of literal markers is kept."""
    return _markers_of(tuple(tag) if isinstance(tag, list) else tag)


@lru_cache(maxsize=256)
def _markers_of(tag: str | tuple[str, ...]) -> tuple[str, str]:
    if isinstance(tag, str):
        if tag.startswith("<"):
            raise ValueError(
                f"tag {tag!r}: give the bare name (tag='answer') or a pair of literal markers "
                "(tag=('<answer>', '</answer>'))"
            )
        if not tag:
            raise ValueError("tag '': give a tag name such as 'answer'")
        return f"<{tag}>", f"</{tag}>"
    if len(tag) != 2 or not all(isinstance(t, str) and t for t in tag):
        raise ValueError(f"tag {tag!r}: a pair of markers must be two non-empty strings")
    return tag[0], tag[1]


def _key(tag: Any) -> Any:
    return tuple(tag) if isinstance(tag, list) else tag


@lru_cache(maxsize=256)
def _hidden_markers(tag: Any, ignore_inside: tuple) -> tuple[tuple[str, str], ...]:
    own = _markers_of(tag)
    return tuple(m for m in (_markers_of(_key(t)) for t in ignore_inside) if m != own)


def _hidden_spans(text: str, blocks: tuple[tuple[str, str], ...]) -> list[tuple[int, int]]:
    """Sorted, merged ``(start, end)`` spans of the reasoning blocks; an unclosed one runs to the end."""
    spans: list[tuple[int, int]] = []
    for open_, close in blocks:
        pos = text.find(open_)
        while pos != -1:
            end = text.find(close, pos + len(open_))
            if end == -1:
                spans.append((pos, len(text)))
                break
            spans.append((pos, end + len(close)))
            pos = text.find(open_, end + len(close))
    if len(spans) > 1:
        spans.sort()
        merged = [spans[0]]
        for start, end in spans[1:]:
            if start <= merged[-1][1]:
                merged[-1] = (merged[-1][0], max(end, merged[-1][1]))
            else:
                merged.append((start, end))
        spans = merged
    return spans


def _is_hidden(pos: int, spans: list[tuple[int, int]]) -> bool:
    if not spans:
        return False
    i = bisect.bisect_right(spans, (pos, math.inf)) - 1
    return i >= 0 and spans[i][0] <= pos < spans[i][1]


def _inside(text: str, pos: int, hidden: tuple[tuple[str, str], ...]) -> bool:
    """True when ``pos`` lies in a reasoning block: one opens before ``pos`` and is not closed before it.

    The scans are short for the usual layout (reasoning first, answer last): the first opening
    is found at the start, the last closing just before ``pos``.
    """
    for open_, close in hidden:
        first = text.find(open_, 0, pos)
        if first == -1:
            continue
        last_close = text.rfind(close, first, pos)
        if last_close == -1 or text.find(open_, last_close + len(close), pos) != -1:
            return True
    return False


class _TooMany(Exception):
    """More than :data:`MAX_BLOCKS` answer blocks or fallback candidates: a degenerate completion."""


def _tag_blocks(text: str, open_: str, close: str, hidden: tuple[tuple[str, str], ...]) -> list[str]:
    """Contents of the complete ``open_...close`` blocks outside the ``hidden`` blocks, in order.

    Linear in the text: a few blocks are checked one by one (the common case, and cheap); many
    blocks against the reasoning spans computed once.
    """
    pos = text.find(open_)
    if pos == -1:
        return []
    end = text.find(close, pos + len(open_))
    if end == -1:
        return []
    after = text.find(open_, end + len(close))
    if after == -1:  # one block: the common case
        return [] if hidden and _inside(text, pos, hidden) else [text[pos + len(open_) : end]]
    found: list[tuple[int, str]] = [(pos, text[pos + len(open_) : end])]
    pos = after
    while pos != -1:
        end = text.find(close, pos + len(open_))
        if end == -1:
            break
        if len(found) == MAX_BLOCKS:  # a degenerate completion; reading on would cost time, not sense
            raise _TooMany
        found.append((pos, text[pos + len(open_) : end]))
        pos = text.find(open_, end + len(close))
    if not hidden:
        return [content for _, content in found]
    if len(found) <= 4:
        return [content for start, content in found if not _inside(text, start, hidden)]
    spans = _hidden_spans(text, hidden)
    return [content for start, content in found if not _is_hidden(start, spans)]


def _one(candidates: list[str]) -> tuple[str | None, str | None]:
    """The single answer among ``candidates`` (stripped), or the rule that refuses them."""
    if not candidates:
        return None, "no_answer"
    first = candidates[0].strip()
    if len(candidates) > 1 and len({" ".join(c.split()) for c in candidates}) > 1:
        return None, "several_answers"
    return first, None


def extract_tag(
    text: str,
    tag: str | tuple[str, str] = "answer",
    *,
    ignore_inside: Iterable[str | tuple[str, str]] = DEFAULT_IGNORE_INSIDE,
) -> str | None:
    """Content of the ``tag`` block(s) outside the ``ignore_inside`` blocks, stripped.

    None when there is no complete block (an unclosed tag at the end of a truncated completion
    does not count) or when several blocks hold different contents.
    """
    key = _key(tag)
    open_, close = _markers_of(key)
    try:
        return _one(_tag_blocks(text, open_, close, _hidden_markers(key, _ignore_key(ignore_inside))))[0]
    except _TooMany:
        return None


def _ignore_key(ignore_inside: Iterable) -> tuple:
    if isinstance(ignore_inside, tuple) and all(isinstance(t, str) for t in ignore_inside):
        return ignore_inside
    return tuple(_key(t) for t in ignore_inside)


_BOXED = re.compile(r"\\(?:boxed|fbox)\s*\{")
_HASHES = re.compile(r"####[ \t]*([^\n]{1,300})")
# matched on the lower-cased text, so that the search can jump from one "answer" to the next
_ANSWER_IS = re.compile(r"answer[ \t]*(?:is|:|=)[ \t]*(?::[ \t]*)?([^\n]{1,300})")
_ANSWER_IS_ANY_CASE = re.compile(_ANSWER_IS.pattern, re.IGNORECASE)


def _braced(text: str, start: int, limit: int = 1000) -> tuple[str, int] | None:
    """``(content, end)`` of the brace group whose ``{`` is just before ``start``; None if unbalanced
    within ``limit`` characters (no answer is that long)."""
    depth = 1
    i = start
    n = min(len(text), start + limit)
    while i < n:
        c = text[i]
        if c == "{":
            depth += 1
        elif c == "}":
            depth -= 1
            if depth == 0:
                return text[start:i], i + 1
        i += 1
    return None


def _boxed_candidates(text: str, spans: list[tuple[int, int]]) -> list[str]:
    found = []
    pos = 0
    while True:
        m = _BOXED.search(text, pos)
        if m is None:
            return found
        group = _braced(text, m.end())
        if group is None:
            return found
        if not _is_hidden(m.start(), spans):
            if len(found) == MAX_BLOCKS:
                raise _TooMany
            found.append(group[0])
        pos = group[1]


#: Where a sentence ends inside a line: a stop, then a space (``2.5`` and ``$1,000.00`` go on).
_SENTENCE_END = re.compile(r"[.!?](?=\s)")


def _sentence(candidate: str) -> str:
    """An "The answer is X" candidate up to the end of its sentence, when the rest of its line holds
    no other number: real models go on talking on the same line ("The answer is 60. Please refer to
    the problem."), which is no second answer; "60. Or maybe 56." still reads as two numbers."""
    m = _SENTENCE_END.search(candidate)
    if m is None or any(c.isdigit() for c in candidate[m.end():]):
        return candidate
    return candidate[: m.end()]


def _answer_sentences(text: str, spans: list[tuple[int, int]]) -> list[str]:
    lower = text.lower()
    if len(lower) != len(text):  # a few characters change length when lower-cased
        return [_sentence(m.group(1)) for m in _outside(_ANSWER_IS_ANY_CASE.finditer(text), spans)]
    return [_sentence(text[m.start(1) : m.end(1)]) for m in _outside(_ANSWER_IS.finditer(lower), spans)]


def _outside(matches: Iterable[re.Match], spans: list[tuple[int, int]]) -> list[re.Match]:
    """The matches that start outside ``spans``; more than :data:`MAX_BLOCKS` raise ``_TooMany``."""
    found = []
    for m in matches:
        if not _is_hidden(m.start(), spans):
            if len(found) == MAX_BLOCKS:
                raise _TooMany
            found.append(m)
    return found


def find_answer(
    text: Any,
    tag: str | tuple[str, str] = "answer",
    *,
    fallback: bool = False,
    ignore_inside: Iterable[str | tuple[str, str]] = DEFAULT_IGNORE_INSIDE,
) -> tuple[str | None, str]:
    """``(answer region, source)`` or ``(None, why)``: :func:`extract_answer` with its reasons.

    ``source`` is ``tag``, ``boxed``, ``hashes`` or ``answer_is``; ``why`` is ``no_answer``,
    ``several_answers`` or ``too_many_answers``.
    """
    key = _key(tag)
    open_, close = _markers_of(key)
    return _find(completion_text(text), open_, close, _hidden_markers(key, _ignore_key(ignore_inside)), fallback)


def _find(
    text: str, open_: str, close: str, hidden: tuple[tuple[str, str], ...], fallback: bool
) -> tuple[str | None, str]:
    try:
        blocks = _tag_blocks(text, open_, close, hidden)
        if len(blocks) == 1:
            return blocks[0].strip(), "tag"
        if blocks or not fallback:
            found, why = _one(blocks)
            return (found, "tag") if why is None else (None, why)
        spans = _hidden_spans(text, hidden)
        for source, candidates in (
            ("boxed", lambda: _boxed_candidates(text, spans)),
            ("hashes", lambda: [m.group(1) for m in _outside(_HASHES.finditer(text), spans)]),
            ("answer_is", lambda: _answer_sentences(text, spans)),
        ):
            found_all = candidates()
            if found_all:
                found, why = _one(found_all)
                return (found, source) if why is None else (None, why)
    except _TooMany:
        return None, "too_many_answers"
    return None, "no_answer"


def extract_answer(
    text: Any,
    tag: str | tuple[str, str] = "answer",
    *,
    fallback: bool = False,
    ignore_inside: Iterable[str | tuple[str, str]] = DEFAULT_IGNORE_INSIDE,
) -> str | None:
    """The final answer in ``text``, as a string, or None.

    The ``<tag>...</tag>`` block(s) outside the ``ignore_inside`` blocks (so an ``<answer>``
    written inside ``<reasoning>`` does not count); several blocks must agree. When
    ``fallback`` is set and there is no such block: ``\\boxed{...}``, then a ``#### X`` line,
    then "The (final) answer is X", each outside the reasoning and agreeing.
    """
    return find_answer(text, tag, fallback=fallback, ignore_inside=ignore_inside)[0]


# ---------------------------------------------------------------- reading one number

_SIMPLE = re.compile(r"-?[0-9]{1,%d}" % MAX_DIGITS)
_PLAIN = re.compile(r"(-?)\$?(-?)([0-9]{1,3}(?:,[0-9]{3})+|[0-9]{1,%d})(?:\.([0-9]{0,%d}))?\.?" % (MAX_DIGITS, MAX_DIGITS))
_CORE = re.compile(
    r"""
    (?P<sign>[-+])?[ ]?(?P<cur>\$|€|£|¥|₹)?[ ]?(?P<sign2>-)?
    (?:
        (?P<whole>[0-9]+)[ ](?P<mnum>[0-9]+)[ ]?/[ ]?(?P<mden>[0-9]+)(?![0-9.,/])
      | (?P<num>[0-9]+(?:\.[0-9]+)?)[ ]?/[ ]?(?P<den>[0-9]+(?:\.[0-9]+)?)
      | (?P<int>[0-9]{1,3}(?:,[0-9]{3})+(?![0-9])|[0-9]+)(?:\.(?P<frac>[0-9]+))?(?:[eE](?P<exp>[-+]?[0-9]{1,2})(?![0-9]))?
      | \.(?P<frac2>[0-9]+)
    )
    (?P<pct>[ ]?%)?
    """,
    re.VERBOSE,
)
_DIGIT = re.compile(r"[0-9]")
_LATEX_CHARS = re.compile(r"[\\{}]")
#: The commonest phrasings, read without the general path when no word in them needs weighing.
_QUICK = re.compile(
    r"(?:([A-Za-z][A-Za-z ,']{0,60}?)(?::| is| are| was| equals) )?\$?(-?)\$?"
    r"([0-9]{1,3}(?:,[0-9]{3})+|[0-9]{1,%d})(?:\.([0-9]{1,%d}))?(?: ([A-Za-z]+(?: [A-Za-z]+){0,5}))?\.?"
    % (MAX_DIGITS, MAX_DIGITS)
)
_FORMATTING = re.compile(r"[*_`$\\(){}\u2212]")
_LATEX_FRAC = re.compile(
    r"\\[dt]?frac\s*\{\s*(-?[0-9]+(?:\.[0-9]+)?)\s*\}\s*\{\s*([0-9]+(?:\.[0-9]+)?)\s*\}"
)
_LATEX_TEXT = re.compile(r"\\(?:text|textbf|textrm|mathrm|mbox|operatorname)\s*\{([^{}]*)\}")
_LATEX_SPACE = re.compile(r"\\(?:[,;!: ]|quad|qquad|left|right|displaystyle)")
_LATEX_DEGREE = re.compile(r"\^\s*\{?\s*\\circ\s*\}?")
_TIMES_X = re.compile(r"(?<=[0-9)])\s*[xX×·]\s*(?=[0-9(])")
_WORD = re.compile(r"[A-Za-z]+(?:'[A-Za-z]+)?")
_LABEL_CHARS = re.compile(r"[A-Za-z ,'\-]*")
_UNIT_CHARS = re.compile(r"[A-Za-z °'./\-$€£¥₹]*")
_ARITH_CHARS = re.compile(r"[0-9.,$ +\-*/×÷·()]+")
_ARITH_TOKEN = re.compile(r"\s*(?:([0-9]+(?:\.[0-9]+)?)|(.))")

#: A label before the number ends with one of these words (or with ':' or '=').
_LEAD_VERBS = {"is", "are", "was", "were", "equals", "be", "makes", "gives", "totals"}
_NEGATIONS = {"not", "no", "never", "none", "nor", "neither", "without", "except", "wrong", "incorrect",
              "false", "cannot", "isnt", "wasnt", "arent"}
_HEDGES = {"or", "maybe", "perhaps", "probably", "possibly", "likely", "unlikely", "guess", "approximately",
           "approx", "about", "around", "roughly", "nearly", "almost", "estimate", "estimated", "between",
           "either", "could", "might", "may", "would", "unsure", "unclear", "than", "least", "most", "over",
           "under", "above", "below", "upto", "ish", "somewhere", "range"}
#: Words that make text after a number more than a unit: a verb, a conjunction, an operation.
_NOT_UNIT = {"is", "are", "was", "were", "be", "been", "seems", "and", "but", "plus", "minus", "point", "if",
             "so", "then", "divided", "multiplied", "added", "subtracted", "answer", "check", "wait"}
_SIGN_WORDS = {"minus": -1, "negative": -1, "plus": 1, "positive": 1}
_SCALES = {"hundred": 100, "thousand": 1000, "k": 1000, "million": 10**6, "mn": 10**6, "billion": 10**9,
           "bn": 10**9, "trillion": 10**12, "dozen": 12, "lakh": 10**5, "crore": 10**7}
_PERCENT_WORDS = ("percentage", "percent", "per cent")
#: Words that send a phrase to the general path, which weighs them (or refuses the phrase).
_QUICK_STOP = _NEGATIONS | _HEDGES | set(_SIGN_WORDS) | set(_SCALES) | {"percent", "percentage", "cent", "n't"}
_UNIT_SYMBOLS = set("°$€£¥₹ ")


@dataclass(slots=True)
class _Reading:
    value: Number | None
    percent: bool
    rule: str


def read_answer(s: Any) -> tuple[Number | None, bool, str]:
    """``(value, had a percent sign, rule)`` for an answer region; value None when refused.

    The rules are those of the module docstring; ``rule`` names the one that read or refused
    the answer (keys of :data:`RULES`, reading rules joined by ``+``).

    >>> read_answer("The answer is $18.00.")
    (18, False, 'label+number')
    >>> read_answer("18 is wrong")
    (None, False, 'negation')
    """
    r = _read(s if isinstance(s, str) else str(s))
    return r.value, r.percent, r.rule


def _read(s: str) -> _Reading:
    if len(s) <= MAX_ANSWER_CHARS:
        return _read_short(s)
    s = " ".join(s.split())
    if len(s) > MAX_ANSWER_CHARS:
        return _Reading(None, False, "too_long")
    return _read_short(s)


_NO = {rule: _Reading(None, False, rule) for rule in RULES}


@lru_cache(maxsize=65536)
def _read_short(s: str) -> _Reading:
    s = s.strip()
    if _SIMPLE.fullmatch(s):  # the common case, kept cheap; an int compares exactly with Fractions
        return _Reading(int(s), False, "number")
    plain = _PLAIN.fullmatch(s)
    if plain and not (plain.group(1) and plain.group(2)):  # "$1,234.50", "-18", "18.00", "18."
        digits, decimals = plain.group(3).replace(",", ""), (plain.group(4) or "").rstrip("0")
        value: Number = int(digits) + Fraction(int(decimals), 10 ** len(decimals)) if decimals else int(digits)
        return _Reading(-value if plain.group(1) or plain.group(2) else value, False, "number")
    s = " ".join(s.split())
    if s[:7] == "\\boxed{" and s[-1] == "}" and not _LATEX_CHARS.search(s, 7, len(s) - 1):
        inner = _read_short(s[7:-1])  # \boxed{18}, \boxed{18 dollars}: what is inside, read alone
        return inner if inner.value is None else _Reading(inner.value, inner.percent, "boxed_answer+" + inner.rule)
    quick = _QUICK.fullmatch(s)
    if quick and _QUICK_STOP.isdisjoint(_WORD.findall(s.lower().replace("n't", " n't"))) and (
        not quick.group(5) or _NOT_UNIT.isdisjoint(quick.group(5).lower().split())
    ):  # "The answer is 18.", "18 dollars": no word in them needs weighing
        label, sign, digits, decimals, unit = quick.groups()
        value = int(digits.replace(",", ""))
        decimals = (decimals or "").rstrip("0")
        if decimals:
            value = value + Fraction(int(decimals), 10 ** len(decimals))
        rule = ("label+number" if label is not None else "number") + ("+unit" if unit else "")
        return _Reading(-value if sign else value, False, rule)
    notes: list[str] = []
    s = _unwrap(s, notes)
    if s is None:
        return _NO[notes[-1]]
    if "=" in s:
        return _read_equation(s, notes)
    return _read_phrase(s, notes, allow_label=True)


def _unwrap(s: str, notes: list[str]) -> str | None:
    """Remove formatting around the answer (Markdown, math delimiters, one box, simple LaTeX)."""
    if not _FORMATTING.search(s):
        return s
    s = s.replace("**", "").replace("`", "").replace("__", "").replace("\u2212", "-")
    for _ in range(3):
        t = s.strip()
        if len(t) > 1 and t[0] == t[-1] and t[0] in "*_":
            t = t[1:-1]
        if t.startswith("$$") and t.endswith("$$") and len(t) > 4:
            t = t[2:-2]
        elif len(t) > 2 and t[0] == "$" and t[-1] == "$" and t[-2] != "\\":
            t = t[1:-1]
        if t[:2] in ("\\(", "\\[") and t[-2:] in ("\\)", "\\]"):
            t = t[2:-2]
        t = t.strip()
        if len(t) > 2 and t[0] == "(" and t[-1] == ")" and "(" not in t[1:-1] and ")" not in t[1:-1]:
            t = t[1:-1].strip()
        if t == s:
            break
        s = t
    if "\\" in s or "{" in s:
        boxes = list(_BOXED.finditer(s))
        if len(boxes) > 1:
            notes.append("several_answers")
            return None
        if boxes:
            group = _braced(s, boxes[0].end())
            if group is None:
                notes.append("not_a_number")
                return None
            s = f"{s[: boxes[0].start()]} {group[0]} {s[group[1]:]}".strip()
            notes.append("boxed_answer")
        s = _LATEX_FRAC.sub(r"\1/\2", s)
        s = _LATEX_TEXT.sub(r" \1 ", s)
        s = _LATEX_SPACE.sub(" ", s)
        s = _LATEX_DEGREE.sub("°", s)
        s = (s.replace("\\%", "%").replace("\\$", "$").replace("{,}", ",")
             .replace("\\cdot", "*").replace("\\times", "*").replace("\\div", "/"))
        if "\\" in s or "{" in s or "}" in s:
            notes.append("not_a_number")
            return None
        s = " ".join(s.split())
        if len(s) > 2 and s[0] == "$" and s[-1] == "$":
            s = s[1:-1].strip()
    return s


def _bad_words(words: list[str]) -> str | None:
    for w in words:
        if w in _NEGATIONS or w.endswith("n't"):
            return "negation"
    for w in words:
        if w in _HEDGES:
            return "hedge"
    return None


def _words(s: str) -> list[str]:
    return [w.lower() for w in _WORD.findall(s)]


def _read_phrase(s: str, notes: list[str], *, allow_label: bool) -> _Reading:
    """One number, with an optional label before it and unit or scale words after it."""
    digit = _DIGIT.search(s)
    # a number starts at most 4 characters before its first digit ("- $ -5", ".5")
    m = None if digit is None else _CORE.search(s, max(0, digit.start() - 4))
    if m is None:
        return _NO[_bad_words(_words(s)) or "not_a_number"]
    if _DIGIT.search(s, m.end()):  # any digit after the number belongs to a second one
        return _NO[_bad_words(_words(s)) or "several_numbers"]
    before, after = s[: m.start()].strip(), s[m.end() :].strip()
    words_before, words_after = _words(before), _words(after)
    bad = _bad_words(words_before) or _bad_words(words_after)
    if bad:
        return _NO[bad]
    if len(_DIGIT.findall(m.group())) > MAX_DIGITS:
        return _NO["huge_number"]
    sign = -1 if (m.group("sign") == "-") != (m.group("sign2") == "-") else 1
    if before:
        last = words_before[-1] if words_before else ""
        if last in _SIGN_WORDS and before.lower().endswith(last):
            if m.group("sign") or m.group("sign2"):
                return _NO["several_numbers"]
            sign = _SIGN_WORDS[last]
            before = before[: -len(last)].strip()
            notes.append("sign_word")
        if before:
            if not allow_label or not _is_label(before):
                return _NO["not_a_number"]
            notes.append("label")
    value = _core_value(m)
    if value is None:
        return _NO["not_a_number"]
    notes.append("number")
    percent = bool(m.group("pct"))
    if after:
        after_l = after.lower()
        for word in _PERCENT_WORDS:
            if after_l.startswith(word) and not percent:
                percent = True
                after = after[len(word) :].strip()
                after_l = after.lower()
                words_after = words_after[len(word.split()) :]
                break
        word = words_after[0] if words_after else ""
        scale = _SCALES.get(word) or (_SCALES.get(word[:-1]) if word.endswith("s") else None)
        if scale and after_l.startswith(word):
            value = value * scale
            after = after[len(word) :].strip()
            words_after = words_after[1:]
            notes.append("scale")
        if after:
            if after[-1] in ".!":
                after = after[:-1].strip()
            if after:
                if not _UNIT_CHARS.fullmatch(after) or len(words_after) > 6:
                    return _NO["not_a_number"]
                if not words_after and not set(after) <= _UNIT_SYMBOLS:
                    return _NO["not_a_number"]
                if any(w in _NOT_UNIT for w in words_after):
                    return _NO["not_a_number"]
                notes.append("unit")
    if percent:
        notes.append("percent")
    return _Reading(-value if sign < 0 else value, percent, "+".join(notes))


def _is_label(before: str) -> bool:
    if before.endswith(":"):
        body = before[:-1]
    else:
        words = before.split()
        if not words or words[-1].lower() not in _LEAD_VERBS:
            return False
        body = before[: before.lower().rfind(words[-1].lower())]
    return bool(_LABEL_CHARS.fullmatch(body)) and len(body.split()) <= 8


def _core_value(m: re.Match) -> Number | None:
    try:
        if m.group("whole") is not None:
            den = int(m.group("mden"))
            return None if den == 0 else int(m.group("whole")) + Fraction(int(m.group("mnum")), den)
        if m.group("num") is not None:
            den = Fraction(m.group("den"))
            return None if den == 0 else Fraction(m.group("num")) / den
        if m.group("frac2") is not None:
            return Fraction(int(m.group("frac2")), 10 ** len(m.group("frac2")))
        digits = m.group("int").replace(",", "")
        decimals = (m.group("frac") or "").rstrip("0")
        value: Number = int(digits)
        if decimals:
            value = value + Fraction(int(decimals), 10 ** len(decimals))
        if m.group("exp"):
            value = value * Fraction(10) ** int(m.group("exp"))
        return value
    except (ValueError, ZeroDivisionError):
        return None


def _read_equation(s: str, notes: list[str]) -> _Reading:
    """``Total = 18`` or ``5 + 13 = 18``: the last side, when every earlier side agrees with it."""
    sides = s.split("=")
    if len(sides) > 8 or not all(side.strip() for side in sides):
        return _NO["not_a_number"]
    result = _read_phrase(sides[-1].strip(), notes, allow_label=False)
    if result.value is None:
        return result
    for side in sides[:-1]:
        side = side.strip()
        words = _words(side)
        bad = _bad_words(words)
        if bad:
            return _NO[bad]
        if not _DIGIT.search(side):
            if not _LABEL_CHARS.fullmatch(side):
                return _NO["not_a_number"]
            continue
        value = _arithmetic(side)
        if value is None:
            return _NO["several_numbers"]
        # "37 / 40 = 92.5%": a percent result may also equal its hundredth
        if value != result.value and not (result.percent and value == Fraction(result.value) / 100):
            return _NO["wrong_expression"]
    notes.insert(0, "equation")
    return _Reading(result.value, result.percent, "+".join(dict.fromkeys(notes)))


def _arithmetic(expr: str) -> Fraction | None:
    """Value of an expression of numbers, ``+ - * /`` and parentheses; None for anything else."""
    expr = _TIMES_X.sub("*", expr)
    if len(expr) > 120 or not _ARITH_CHARS.fullmatch(expr):
        return None
    expr = expr.replace("$", "").replace(",", "").replace("×", "*").replace("·", "*").replace("÷", "/")
    tokens: list[Any] = []
    for number, op in _ARITH_TOKEN.findall(expr):
        if number:
            if len(number) > MAX_DIGITS:
                return None
            tokens.append(Fraction(number))
        elif op.strip():
            tokens.append(op)
    pos = 0

    def peek():
        return tokens[pos] if pos < len(tokens) else None

    def factor(depth: int) -> Fraction:
        nonlocal pos
        tok = peek()
        if depth > 20:
            raise ValueError
        if isinstance(tok, Fraction):
            pos += 1
            return tok
        if tok == "-":
            pos += 1
            return -factor(depth + 1)
        if tok == "(":
            pos += 1
            value = expression(depth + 1)
            if peek() != ")":
                raise ValueError
            pos += 1
            return value
        raise ValueError

    def term(depth: int) -> Fraction:
        nonlocal pos
        value = factor(depth)
        while peek() in ("*", "/"):
            op = tokens[pos]
            pos += 1
            right = factor(depth)
            value = value * right if op == "*" else value / right
        return value

    def expression(depth: int) -> Fraction:
        nonlocal pos
        value = term(depth)
        while peek() in ("+", "-"):
            op = tokens[pos]
            pos += 1
            right = term(depth)
            value = value + right if op == "+" else value - right
        return value

    try:
        value = expression(0)
    except (ValueError, ZeroDivisionError):
        return None
    return value if pos == len(tokens) else None


# ---------------------------------------------------------------- numbers


def parse_number(s: Any) -> Number | None:
    """The number a grader reads in ``s`` (see the module docstring), or None.

    Strings give an exact :class:`~fractions.Fraction` (``"18.00"`` -> 18, ``"3/4"`` -> 3/4);
    ints and Fractions are returned as Fractions, floats as floats. A percent sign is dropped
    (``"50%"`` -> 50).
    """
    if s is None or isinstance(s, bool):
        return None
    if isinstance(s, (int, Fraction)):
        return Fraction(s)
    if isinstance(s, float):
        return s if math.isfinite(s) else None
    value = _read(str(s)).value
    return None if value is None else Fraction(value)


def _with_percent(x: Any) -> tuple[Number, bool] | None:
    if isinstance(x, str):
        r = _read(x)
        return None if r.value is None else (r.value, r.percent)
    value = parse_number(x)
    return None if value is None else (value, False)


def _close(a: Number, b: Number, rel_tol: float) -> bool:
    if isinstance(a, (int, Fraction)) and isinstance(b, (int, Fraction)):
        return a == b
    return math.isclose(float(a), float(b), rel_tol=rel_tol, abs_tol=rel_tol)


def _values_equal(pa: tuple[Number, bool], pb: tuple[Number, bool], rel_tol: float = 1e-9) -> bool:
    (va, pct_a), (vb, pct_b) = pa, pb
    if _close(va, vb, rel_tol):
        return True
    # X% read as X/100 only against a number that is not whole: "50%" = 0.5, but "4800%"
    # is not an answer to a question whose gold is 48 (GSM8K writes percentages as 48).
    if pct_a and not pct_b and not _whole(vb) and _close(_percent(va), vb, rel_tol):
        return True
    return bool(pct_b and not pct_a and not _whole(va) and _close(va, _percent(vb), rel_tol))


def numbers_equal(a: Any, b: Any, *, rel_tol: float = 1e-9) -> bool:
    """True when ``a`` and ``b`` (strings or numbers) denote the same number.

    Exact for strings and ints (``"3/4"`` == ``"0.75"``); floats compare within ``rel_tol``. A
    percentage equals the same number (``"50%"`` == ``"50"``) and, against a number that is
    not whole, its hundredth (``"50%"`` == ``"0.5"``; but ``"4800%"`` != ``"48"``). Text the
    reader refuses (``"not 18"``, ``"18 or 20"``) is never equal to anything.
    """
    pa, pb = _with_percent(a), _with_percent(b)
    return pa is not None and pb is not None and _values_equal(pa, pb, rel_tol)


def _whole(x: Number) -> bool:
    if isinstance(x, int):
        return True
    if isinstance(x, Fraction):
        return x.denominator == 1
    return float(x).is_integer()


def _percent(x: Number) -> Number:
    return x / 100 if isinstance(x, float) else Fraction(x, 100)


def _normalise_text(s: str) -> str:
    return " ".join(s.casefold().split()).rstrip(".")


# ---------------------------------------------------------------- grading

#: LaTeX commands and single letters are fine for math-verify; a word of two letters or more is not.
_PROSE_WORD = re.compile(r"(?<![\\A-Za-z])[A-Za-z]{2,}")


def _math_only(answer: str) -> bool:
    return len(answer) <= MAX_ANSWER_CHARS and not _PROSE_WORD.search(answer)


@lru_cache(maxsize=4096)
def _math_verify_parse(text: str):
    try:
        import math_verify
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError(
            "use_math_verify=True needs the optional 'math-verify' package: "
            "pip install 'unsloth-grpo[math]' (or set use_math_verify: false)"
        ) from exc
    wrapped = text if text.startswith("$") else f"${text}$"
    try:
        return math_verify.parse(wrapped)
    except Exception:  # math-verify's own failures (sympy, timeouts) mean "cannot read"
        return []


def _math_verify(predicted: str, gold: str) -> bool:
    gold_parsed, pred_parsed = _math_verify_parse(gold), _math_verify_parse(predicted)
    if not (gold_parsed and pred_parsed):
        return False
    import math_verify

    try:
        return bool(math_verify.verify(gold_parsed, pred_parsed))
    except Exception:
        return False


def _judge(answer: str, gold: Any, use_math_verify: bool) -> tuple[str, str, Number | None]:
    """``(status, rule, value)`` of an answer region against the gold answer."""
    gold_str = gold if isinstance(gold, str) else str(gold)
    if answer == gold_str:  # identical text is right under every rule below; most right answers stop here
        if _SIMPLE.fullmatch(answer):
            return "correct", "number", int(answer)
        return "correct", "same_text", None
    reading = _read(answer)
    gold_reading = _with_percent(gold)
    if gold_reading is not None:
        if reading.value is not None:
            if _values_equal((reading.value, reading.percent), gold_reading):
                return "correct", reading.rule, reading.value
            return "wrong", f"{reading.rule}+mismatch", reading.value
        if use_math_verify and reading.rule == "not_a_number" and _math_only(answer):
            if _math_verify(answer, gold_str):
                return "correct", "math_verify", None
        return "unparseable", reading.rule, None
    if _normalise_text(answer) == _normalise_text(gold_str):
        return "correct", "text", reading.value
    if use_math_verify and _math_only(answer) and _math_verify(answer, gold_str):
        return "correct", "math_verify", reading.value
    return "wrong", "mismatch", reading.value


def grade(
    text: Any,
    gold: Any,
    *,
    tag: str | tuple[str, str] = "answer",
    fallback: bool = False,
    ignore_inside: Iterable[str | tuple[str, str]] = DEFAULT_IGNORE_INSIDE,
    use_math_verify: bool = False,
) -> Verdict:
    """The verdict on one completion against its gold answer: the grader every caller uses.

    Numeric when the gold answer reads as a number (a prediction that does not is
    ``unparseable``), otherwise a case- and spacing-insensitive text comparison; ``tag``,
    ``fallback`` and ``ignore_inside`` say where the answer is (see the module docstring).

    >>> grade("<answer>18 thousand</answer>", "18").status
    'wrong'
    >>> v = grade("<reasoning>6*3</reasoning><answer>The answer is 18.</answer>", "18")
    >>> v.correct, v.source, v.rule
    (True, 'tag', 'label+number')
    """
    return _grader(_key(tag), fallback, _ignore_key(ignore_inside), use_math_verify)(text, gold)


def make_grader(
    *,
    tag: str | tuple[str, str] | list[str] = "answer",
    fallback: bool = False,
    ignore_inside: Iterable[str | tuple[str, str] | list[str]] = DEFAULT_IGNORE_INSIDE,
    use_math_verify: bool = False,
) -> Callable[[Any, Any], Verdict]:
    """:func:`grade` with its settings fixed and checked now: ``grader(completion, gold) -> Verdict``.

    A malformed tag raises ``ValueError`` here, at construction, not at the first training step;
    ``use_math_verify=True`` without the package raises ``ImportError`` saying how to install it.
    """
    if use_math_verify:
        try:
            import math_verify  # noqa: F401
        except ImportError:
            raise ImportError(
                "use_math_verify=True needs the optional 'math-verify' package: "
                "pip install 'unsloth-grpo[math]' (or set use_math_verify: false)"
            ) from None
    return _grader(_key(tag), bool(fallback), tuple(_key(t) for t in ignore_inside), bool(use_math_verify))


@lru_cache(maxsize=64)
def _grader(key: Any, fallback: bool, ignore: tuple, use_math_verify: bool) -> Callable[[Any, Any], Verdict]:
    open_, close = _markers_of(key)
    hidden = _hidden_markers(key, ignore)
    n_open, n_close = len(open_), len(close)

    def grader(completion: Any, gold: Any) -> Verdict:
        text = completion if type(completion) is str else completion_text(completion)
        # the usual completion, one answer block after the reasoning, without the general path
        pos = text.find(open_)
        end = -1 if pos == -1 else text.find(close, pos + n_open)
        if end != -1 and text.find(open_, end + n_close) == -1 and not (hidden and _inside(text, pos, hidden)):
            answer, source = text[pos + n_open : end].strip(), "tag"
        elif pos == -1 and not fallback:
            return Verdict("missing", "no_answer")
        else:
            answer, source = _find(text, open_, close, hidden, fallback)
        if answer is None:
            if source != "no_answer":  # several_answers, too_many_answers
                return Verdict("unparseable" if _with_percent(gold) is not None else "wrong", source)
            return Verdict("missing", source)
        status, rule, value = _judge(answer, gold, use_math_verify)
        return Verdict(status, rule, source, answer, value)

    grader.settings = {"tag": key, "fallback": fallback, "ignore_inside": ignore,  # type: ignore[attr-defined]
                       "use_math_verify": use_math_verify}
    return grader


def answers_match(predicted: str | None, gold: Any, *, use_math_verify: bool = False) -> bool:
    """Grade an extracted answer against the gold answer (the comparison half of :func:`grade`)."""
    if predicted is None or gold is None:
        return False
    return _judge(predicted, gold, use_math_verify)[0] == "correct"


def is_correct(
    text: Any,
    gold: Any,
    *,
    tag: str | tuple[str, str] = "answer",
    fallback: bool = False,
    ignore_inside: Iterable[str | tuple[str, str]] = DEFAULT_IGNORE_INSIDE,
    use_math_verify: bool = False,
) -> bool:
    """True when :func:`grade` says the final answer in ``text`` equals ``gold``."""
    if gold is None:
        return False
    return grade(text, gold, tag=tag, fallback=fallback, ignore_inside=ignore_inside,
                 use_math_verify=use_math_verify).correct


def matches_format(
    text: Any,
    *,
    reasoning_tag: str | tuple[str, str] = "reasoning",
    answer_tag: str | tuple[str, str] = "answer",
) -> bool:
    """Strict format: ``<reasoning>R</reasoning>`` then ``<answer>A</answer>`` and nothing else.

    Whitespace may surround the blocks; R and A must be non-empty; each tag appears
    exactly once. Tags are configurable (``reasoning_tag="think"``, ``answer_tag="SOLUTION"``).
    """
    text = completion_text(text).strip()
    (r_open, r_close), (a_open, a_close) = _markers(reasoning_tag), _markers(answer_tag)
    if not (text.startswith(r_open) and text.endswith(a_close)):
        return False
    if any(text.count(m) != 1 for m in (r_open, r_close, a_open, a_close)):
        return False
    r_end, a_start = text.find(r_close), text.find(a_open)
    return (
        len(r_open) <= r_end < a_start
        and not text[r_end + len(r_close) : a_start].strip()
        and bool(text[len(r_open) : r_end].strip())
        and bool(text[a_start + len(a_open) : len(text) - len(a_close)].strip())
    )


# ---------------------------------------------------------------- lenient (evaluation only)

#: lm-evaluation-harness's GSM8K "flexible-extract" pattern: a run of two or more characters of
#: digits, ``$``, ``.`` and ``,``, or a single digit, each with an optional leading minus. Its
#: filter keeps the *last* match in the whole response (``group_select: -1``).
_FLEXIBLE = re.compile(r"(-?[$0-9.,]{2,})|(-?[0-9]+)")


def lenient_answer(text: Any) -> str | None:
    """The final answer as a lenient reader takes it: the last number anywhere in the completion.

    The extraction of lm-evaluation-harness's GSM8K ``flexible-extract`` filter: the last match of
    ``-?[$0-9.,]{2,}`` or ``-?[0-9]+``, with the characters its exact-match metric ignores
    removed (``,`` and ``$``) and one trailing period dropped. Tags, reasoning blocks and words do
    not matter; a completion that ends in a stray number (``... in 2 steps``) yields that number,
    and one that ends in a lone ``...`` yields ``..``, which is no number, as it is there.

    >>> lenient_answer("Tom has 3 + 15 = 18 apples.")
    '18'
    >>> lenient_answer("<answer>$1,200.</answer>"), lenient_answer("no digits") is None
    ('1200', True)
    """
    last = None
    for last in _FLEXIBLE.finditer(completion_text(text)):
        pass
    if last is None:
        return None
    found = last.group(0).strip().replace(",", "").replace("$", "")
    return found[:-1] if found.endswith(".") else found


def lenient(text: Any, gold: Any) -> Verdict:
    """Lenient verdict (evaluation only): is the last number anywhere in ``text`` equal to ``gold``?

    The answer is :func:`lenient_answer`'s, compared with ``gold`` as :func:`grade` compares
    numbers (``0049`` = ``49``, ``18.00`` = ``18``). ``source`` is ``lenient``.

    This is how a right answer written out of format is still counted (the answer without its
    ``<answer>`` tags, or after them), so that a before/after report can tell a gain in format
    from a gain in answers. It is never a reward: a policy paid this way learns to end every
    completion with a list of likely numbers, and the last one is right often enough.

    >>> lenient("3 + 15 = 18, so she has 18 apples", "18").correct
    True
    >>> grade("3 + 15 = 18, so she has 18 apples", "18").correct
    False
    """
    answer = lenient_answer(text)
    if answer is None:
        return Verdict("missing", "no_answer", "lenient")
    if gold is None:
        return Verdict("wrong", "mismatch", "lenient", answer)
    status, rule, value = _judge(answer, gold, False)
    if status == "unparseable":
        status = "wrong"
    return Verdict(status, rule, "lenient", answer, value)
