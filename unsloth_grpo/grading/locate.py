"""Where a completion's final answer is: its answer block(s) outside the reasoning, or a fallback.

See :mod:`unsloth_grpo.grading` for the rules. Everything here is linear in the completion's length.
"""

from __future__ import annotations

import bisect
import math
import re
from functools import lru_cache
from typing import Any, Iterable

from unsloth_grpo.grading.verdict import DEFAULT_IGNORE_INSIDE, MAX_BLOCKS

def completion_text(completion: Any) -> str:
    """The text of one completion as TRL passes it: a string or a list of chat messages.

    For a chat list the contents of the assistant messages are joined (TRL passes
    ``[{"role": "assistant", "content": text}]``); content given as a list of parts
    (``[{"type": "text", "text": ...}]``) is joined too.
    """
    if isinstance(completion, str):
        return completion
    if isinstance(completion, dict):
        return content_text(completion.get("content"))
    if isinstance(completion, (list, tuple)):
        messages = [m for m in completion if isinstance(m, dict)]
        assistant = [m for m in messages if m.get("role", "assistant") == "assistant"]
        return "".join(content_text(m.get("content")) for m in (assistant or messages))
    if completion is None:
        return ""
    raise TypeError(
        f"a completion must be a string or a list of chat messages, got {type(completion).__name__}"
    )


def content_text(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p.get("text", "") if isinstance(p, dict) else str(p) for p in content)
    return str(content)


def tag_markers(tag: str | tuple[str, str] | list[str]) -> tuple[str, str]:
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
