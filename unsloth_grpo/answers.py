"""Answer extraction and numeric equivalence, shared by the rewards and the evaluation.

The correctness reward and the evaluator both call :func:`is_correct`, so training and
evaluation can never disagree about what counts as the right answer.

Extraction (:func:`extract_answer`) takes the content of the last ``<answer>...</answer>``
block that is not inside a reasoning block (``<reasoning>`` / ``<think>``). The tag is
configurable (``tag="SOLUTION"`` or a literal pair such as ``("<ans>", "</ans>")``). With
``fallback=True`` an answer is also taken from ``\\boxed{...}``, a ``#### 18`` line, a
"The answer is 18" sentence, or finally the last number in the text.

Comparison (:func:`numbers_equal`) reads numbers the way a grader would: ``$18``,
``18.00``, ``1,000``, ``18 dollars``, ``18.``, ``\\boxed{18}``, ``3/4`` (= ``0.75``),
``\\frac{3}{4}``, ``-5`` and ``50%`` (equal to ``50`` and to ``0.5``, while ``4800%`` is
not ``48``). Text holding several numbers is read through its last ``=`` (``5 + 13 = 18``)
or not at all.

Example::

    >>> text = "<reasoning>3 + 15 = 18</reasoning>\\n<answer>$18.00</answer>"
    >>> extract_answer(text)
    '$18.00'
    >>> is_correct(text, "18")
    True
    >>> numbers_equal("3/4", "0.75"), numbers_equal("17", "18")
    (True, False)
"""

from __future__ import annotations

import math
import re
from fractions import Fraction
from functools import lru_cache
from typing import Any, Iterable

__all__ = [
    "completion_text",
    "extract_answer",
    "extract_tag",
    "parse_number",
    "numbers_equal",
    "answers_match",
    "is_correct",
    "matches_format",
]

#: Reasoning blocks whose inner ``<answer>`` tags do not count as the final answer.
DEFAULT_IGNORE_INSIDE = ("reasoning", "think")

Number = Fraction | float  # _parse also yields plain ints for plain integers


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
        return f"<{tag}>", f"</{tag}>"
    if len(tag) != 2 or not all(isinstance(t, str) and t for t in tag):
        raise ValueError(f"tag {tag!r}: a pair of markers must be two non-empty strings")
    return tag[0], tag[1]


def _hashable(tags: Iterable[str | tuple[str, str] | list[str]]) -> tuple:
    return tuple(tuple(t) if isinstance(t, list) else t for t in tags)


@lru_cache(maxsize=256)
def _blocks_of(
    tag: str | tuple[str, ...], ignore_inside: tuple
) -> tuple[tuple[str, str], tuple[tuple[str, str], ...]]:
    """Markers of ``tag`` and of the blocks to look outside of, computed once per setting."""
    own = _markers_of(tag)
    blocks = tuple(m for m in map(_markers, ignore_inside) if m != own)
    return own, blocks


def _inside_block(text: str, pos: int, blocks: Iterable[tuple[str, str]]) -> bool:
    """True when position ``pos`` lies inside an open...close block (or an unclosed one)."""
    for open_, close in blocks:
        start = text.rfind(open_, 0, pos)
        if start != -1:
            end = text.find(close, start + len(open_))
            if end == -1 or end > pos:
                return True
    return False


def extract_tag(
    text: str,
    tag: str | tuple[str, str] = "answer",
    *,
    ignore_inside: Iterable[str | tuple[str, str]] = DEFAULT_IGNORE_INSIDE,
) -> str | None:
    """Content of the last complete ``tag`` block outside the ``ignore_inside`` blocks.

    Returns the stripped content, or None when there is no such block (an unclosed tag at
    the end of a truncated completion does not count).
    """
    key = tuple(tag) if isinstance(tag, list) else tag
    ignore = ignore_inside if isinstance(ignore_inside, tuple) else _hashable(ignore_inside)
    (open_, close), blocks = _blocks_of(key, ignore)
    end = len(text)
    while True:
        close_at = text.rfind(close, 0, end)
        if close_at == -1:
            return None
        open_at = text.rfind(open_, 0, close_at)
        if open_at == -1:
            return None
        if not blocks or not _inside_block(text, open_at, blocks):
            return text[open_at + len(open_) : close_at].strip()
        end = open_at


_BOXED = re.compile(r"\\(?:boxed|fbox)\s*\{")
_HASHES = re.compile(r"####\s*([^\n]+)")
_ANSWER_IS = re.compile(
    r"(?:final answer|the answer|answer)\s*(?:is|:|=)\s*:?\s*([^\n]+)", re.IGNORECASE
)


def _last_boxed(text: str) -> str | None:
    """Content of the last ``\\boxed{...}``, braces balanced."""
    matches = list(_BOXED.finditer(text))
    if not matches:
        return None
    start = matches[-1].end()
    depth = 1
    for i in range(start, len(text)):
        c = text[i]
        if c == "{":
            depth += 1
        elif c == "}":
            depth -= 1
            if depth == 0:
                return text[start:i].strip()
    return None


def extract_answer(
    text: str,
    tag: str | tuple[str, str] = "answer",
    *,
    fallback: bool = False,
    ignore_inside: Iterable[str | tuple[str, str]] = DEFAULT_IGNORE_INSIDE,
) -> str | None:
    """The final answer in ``text``, as a string, or None.

    First the last ``<tag>...</tag>`` block outside the ``ignore_inside`` blocks (so an
    ``<answer>`` written inside ``<reasoning>`` does not count). When ``fallback`` is set
    and there is no such block: the last ``\\boxed{...}``, then a ``#### X`` line, then
    "The (final) answer is X", then the last number in the text.
    """
    text = completion_text(text)
    found = extract_tag(text, tag, ignore_inside=ignore_inside)
    if found is not None or not fallback:
        return found
    boxed = _last_boxed(text)
    if boxed is not None:
        return boxed
    for pattern in (_HASHES, _ANSWER_IS):
        matches = pattern.findall(text)
        if matches:
            return matches[-1].strip()
    numbers = _NUMBER.findall(_normalise(text))
    return numbers[-1].strip() if numbers else None


# --- numbers -------------------------------------------------------------------------

_INT = r"(?:\d{1,3}(?:,\d{3})+(?!\d)|\d+)"
_NUMBER = re.compile(
    rf"(?<![\w.])-?(?:{_INT}\s+\d+\s*/\s*\d+|{_INT}(?:\.\d+)?\s*/\s*{_INT}(?:\.\d+)?"
    rf"|{_INT}(?:\.\d*)?(?:[eE][-+]?\d+)?|\.\d+)%?"
)
_LATEX_FRAC = re.compile(r"\\[dt]?frac\s*\{([^{}]*)\}\s*\{([^{}]*)\}")
_LATEX_TEXT = re.compile(r"\\(?:text|textbf|mathrm|mbox)\s*\{([^{}]*)\}")
_LATEX_DROP = re.compile(r"\\[,;!: ]|\\left|\\right|\^\s*\{?\\circ\}?|\\\(|\\\)|\\\[|\\\]")
_CURRENCY = re.compile(r"\\\$|[$€£¥₹]|\b(?:USD|EUR|GBP|Rs\.?)\b")
_SIMPLE = re.compile(r"-?\d+")
# Words around a number are fine ("18 dollars"); math around it is not ("x^2", "2*y").
_NOT_PROSE = re.compile(r"[\^*+/<>_{}\[\]|#@&~]")


def _normalise(s: str) -> str:
    """Rewrite LaTeX and currency so that numbers stand alone."""
    if "\\" in s:
        boxed = _last_boxed(s)
        if boxed is not None:
            s = boxed
        s = _LATEX_FRAC.sub(r"(\1)/(\2)", s)
        s = _LATEX_TEXT.sub(r" \1", s)
        s = _LATEX_DROP.sub("", s).replace("\\%", "%")
        s = s.replace("\\", " ")
    s = _CURRENCY.sub("", s).replace("{,}", ",")
    return s.replace("\u2212", "-").replace("(", "").replace(")", "")


def _to_number(token: str) -> tuple[Number, bool] | None:
    """Value of one number token and whether it carried a percent sign."""
    percent = token.endswith("%")
    token = token.rstrip("%").replace(",", "").replace(" ", "")
    try:
        if "/" in token:
            num, den = token.split("/")
            value = Fraction(num) / Fraction(den)
        else:
            value = Fraction(token.rstrip("."))
    except (ValueError, ZeroDivisionError):
        return None
    return value, percent


#: "$1,234.50", "-18", "18.00", "18 dollars.", "The answer is 18." -- one plain number among
#: words, read without the general path (which gives the same value, more slowly).
_PLAIN = re.compile(
    r"(?:[A-Za-z][A-Za-z' ]*:?\s+)?(-?)\$?(-?)(\d{1,3}(?:,\d{3})+|\d+)(?:\.(\d*))?"
    r"(?:\s*[A-Za-z][A-Za-z' ]*)?\.?"
)
_EMPHASIS = ("*", "`", "_")
_BOXED_PLAIN = re.compile(r"\\boxed\s*\{([^{}\\]*)\}")
_MIXED = re.compile(r"(-?)(\d+)\s+(\d+)\s*/\s*(\d+)(%?)")


def _plain(match: re.Match) -> Number:
    sign_a, sign_b, digits, decimals = match.groups()
    whole = int(digits.replace(",", "")) if "," in digits else int(digits)
    decimals = (decimals or "").rstrip("0")
    value: Number = whole + Fraction(int(decimals), 10 ** len(decimals)) if decimals else whole
    return -value if (sign_a or sign_b) else value


@lru_cache(maxsize=65536)
def _parse(s: str) -> tuple[Number, bool] | None:
    s = s.strip()
    if s[:1] in _EMPHASIS:  # Markdown around the answer: **18**, `18`
        s = s.strip("*`_ ")
    if _SIMPLE.fullmatch(s):  # the common case, kept cheap: an int compares exactly with Fractions
        return int(s), False
    plain = _PLAIN.fullmatch(s)
    if plain:
        return _plain(plain), "percent" in s.lower()
    boxed = _BOXED_PLAIN.fullmatch(s)
    if boxed:
        return _parse(boxed.group(1))
    s = _normalise(s)
    if "=" in s:
        s = s.rsplit("=", 1)[1]
    matches = list(_NUMBER.finditer(s))
    if len(matches) != 1:
        return None
    start, end = matches[0].span()
    if _NOT_PROSE.search(s, 0, start) or _NOT_PROSE.search(s, end):
        return None
    token = matches[0].group().strip()
    mixed = _MIXED.fullmatch(token)
    if mixed:
        sign, whole, num, den, pct = mixed.groups()
        if int(den) == 0:
            return None
        value = int(whole) + Fraction(int(num), int(den))
        return (-value if sign else value), bool(pct)
    return _to_number(token)


def parse_number(s: Any) -> Number | None:
    """The number a grader would read in ``s``, or None.

    Strings give an exact :class:`~fractions.Fraction` (``"18.00"`` -> 18, ``"3/4"`` ->
    3/4); ints and Fractions are returned as Fractions, floats as floats. Currency signs,
    thousands separators, a trailing period, units after the number, ``\\boxed{}`` and
    ``\\frac{}{}`` are understood; a percent sign is dropped (``"50%"`` -> 50). Text with
    several numbers is read after its last ``=``; otherwise it is ambiguous and gives None.
    """
    if s is None or isinstance(s, bool):
        return None
    if isinstance(s, (int, Fraction)):
        return Fraction(s)
    if isinstance(s, float):
        return s if math.isfinite(s) else None
    parsed = _parse(str(s))
    return None if parsed is None else Fraction(parsed[0])


def _with_percent(x: Any) -> tuple[Number, bool] | None:
    if isinstance(x, str):
        return _parse(x)
    value = parse_number(x)
    return None if value is None else (value, False)


def _close(a: Number, b: Number, rel_tol: float) -> bool:
    if isinstance(a, (int, Fraction)) and isinstance(b, (int, Fraction)):
        return a == b
    return math.isclose(float(a), float(b), rel_tol=rel_tol, abs_tol=rel_tol)


def numbers_equal(a: Any, b: Any, *, rel_tol: float = 1e-9) -> bool:
    """True when ``a`` and ``b`` (strings or numbers) denote the same number.

    Exact for strings and ints (``"3/4"`` == ``"0.75"``); floats compare within
    ``rel_tol``. A percentage equals the same number (``"50%"`` == ``"50"``, as GSM8K writes
    percentages) and, against a number that is not whole, its hundredth (``"50%"`` ==
    ``"0.5"``; but ``"4800%"`` != ``"48"``). Unparseable input is never equal.
    """
    pa, pb = _with_percent(a), _with_percent(b)
    if pa is None or pb is None:
        return False
    (va, pct_a), (vb, pct_b) = pa, pb
    if _close(va, vb, rel_tol):
        return True
    # X% read as X/100 only against a number that is not whole: "50%" = 0.5, but "4800%"
    # is not an answer to a question whose gold is 48 (GSM8K writes percentages as 48).
    if pct_a and not pct_b and not _whole(vb) and _close(_percent(va), vb, rel_tol):
        return True
    return bool(pct_b and not pct_a and not _whole(va) and _close(va, _percent(vb), rel_tol))


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


def answers_match(predicted: str | None, gold: Any, *, use_math_verify: bool = False) -> bool:
    """Grade an extracted answer against the gold answer.

    Numeric when the gold answer is a number (a prediction that is not one is wrong);
    otherwise a case- and whitespace-insensitive string comparison. With
    ``use_math_verify=True`` the optional ``math-verify`` package decides what the numeric
    and string rules do not (install it with ``pip install 'unsloth-grpo[math]'``).
    """
    if predicted is None or gold is None:
        return False
    gold_str = gold if isinstance(gold, str) else str(gold)
    if _with_percent(gold) is not None:
        if numbers_equal(predicted, gold):
            return True
    elif _normalise_text(predicted) == _normalise_text(gold_str):
        return True
    if use_math_verify:
        return _math_verify(predicted, gold_str)
    return False


def _math_verify(predicted: str, gold: str) -> bool:
    try:
        import math_verify
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError(
            "use_math_verify=True needs the optional 'math-verify' package: "
            "pip install 'unsloth-grpo[math]' (or set use_math_verify: false)"
        ) from exc
    gold_parsed = math_verify.parse(gold)
    pred_parsed = math_verify.parse(predicted)
    return bool(gold_parsed and pred_parsed and math_verify.verify(gold_parsed, pred_parsed))


def is_correct(
    text: Any,
    gold: Any,
    *,
    tag: str | tuple[str, str] = "answer",
    fallback: bool = False,
    ignore_inside: Iterable[str | tuple[str, str]] = DEFAULT_IGNORE_INSIDE,
    use_math_verify: bool = False,
) -> bool:
    """True when the final answer in ``text`` equals ``gold``.

    The same extraction and comparison as the ``correctness`` reward; keyword arguments
    are those of :func:`extract_answer` and :func:`answers_match`.
    """
    predicted = extract_answer(text, tag, fallback=fallback, ignore_inside=ignore_inside)
    return answers_match(predicted, gold, use_math_verify=use_math_verify)


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
