"""The grader: :func:`grade` (built once per setting by :func:`make_grader`), and the lenient
reading evaluation shows beside it (never a reward)."""

from __future__ import annotations

import re
from functools import lru_cache
from typing import Any, Callable, Iterable

from unsloth_grpo.grading.locate import (
    _find,
    _hidden_markers,
    _ignore_key,
    _inside,
    _key,
    _markers_of,
    completion_text,
    tag_markers,
)
from unsloth_grpo.grading.numbers import _SIMPLE, _normalise_text, _read, _values_equal, _with_percent
from unsloth_grpo.grading.verdict import DEFAULT_IGNORE_INSIDE, MAX_ANSWER_CHARS, Number, Verdict

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
    ``fallback`` and ``ignore_inside`` say where the answer is (see :mod:`unsloth_grpo.grading`).

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
    (r_open, r_close), (a_open, a_close) = tag_markers(reasoning_tag), tag_markers(answer_tag)
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
