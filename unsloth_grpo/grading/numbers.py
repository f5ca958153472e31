"""What an answer region says: one number (with what a person writes around it), or a refusal.

:func:`read_answer` reads one answer region, :func:`parse_number` and :func:`numbers_equal` compare;
see :mod:`unsloth_grpo.grading` for what counts as a number and what does not.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from fractions import Fraction
from functools import lru_cache
from typing import Any

from unsloth_grpo.grading.locate import _BOXED, _braced
from unsloth_grpo.grading.verdict import MAX_ANSWER_CHARS, MAX_DIGITS, RULES, Number

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

    The rules are those of :mod:`unsloth_grpo.grading`; ``rule`` names the one that read or refused
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
    """The number a grader reads in ``s`` (see :mod:`unsloth_grpo.grading`), or None.

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


def hedge_refusal(answer: str, gold: str | None = None) -> str | None:
    """The rule that refuses ``answer`` as no single committed answer to ``gold``, or None.

    For a grader that scores answers its own way (a library's ``score_answer``), this is the toolkit's
    refusal of hedges put in front of it. Against a gold that is one number the number reader decides
    (``18 or 20`` is ``hedge``, ``18, 20`` is ``several_numbers``, ``not 18`` is ``negation``). Against any
    other gold (text, a list, a grid, or no gold at all) a hedging or negating word that the gold does not
    itself hold refuses it (``apple or pear``, ``maybe apple``); and with a gold, ``many_candidates`` is an
    answer of more non-empty lines than the gold has (one candidate a line) or the gold with more words
    or numbers before or after it (``apple, pear``, ``pear apple``, ``The answer is apple``).

    >>> hedge_refusal("18 or 20", "18"), hedge_refusal("maybe apple", "apple"), hedge_refusal("apple", "apple")
    ('hedge', 'hedge', None)
    >>> hedge_refusal(chr(10).join(["apple", "pear"]), "apple"), hedge_refusal("apple, pear", "apple")
    ('many_candidates', 'many_candidates')
    """
    if gold is not None and parse_number(gold) is not None:
        rule = read_answer(answer)[2]
        return rule if rule in ("hedge", "negation", "several_numbers") else None
    allowed = set(_words(gold or ""))
    for word in _words(answer):
        if word not in allowed and (word in _NEGATIONS or word.endswith("n't")):
            return "negation"
        if word not in allowed and word in _HEDGES:
            return "hedge"
    if gold is not None:
        lines = [line for line in answer.splitlines() if line.strip()]
        if len(lines) > max(1, len([line for line in gold.splitlines() if line.strip()])):
            return "many_candidates"
        said, want = " ".join(answer.split()), " ".join(gold.split())
        rest = said.replace(want, "", 1) if want and (said.startswith(want) or said.endswith(want)) else ""
        if any(c.isalnum() for c in rest):
            return "many_candidates"
    return None


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
