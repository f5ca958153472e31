"""Style rewards: penalties for listed phrases, and writing in one script.

Example::

    >>> fn = phrase_penalty(phrases=["as an AI"])
    >>> fn(["As an AI, I think 4.", "It is 4."])
    [-0.5, 0.0]
"""

from __future__ import annotations

import re
import string
import unicodedata
from typing import Sequence

from ._registry import RewardFunc, register, texts


@register("phrase_penalty", family="style", low=-0.5, high=0.0)
def phrase_penalty(
    *,
    phrases: Sequence[str] | None = None,
    penalty: float = -0.5,
    per_occurrence: bool = False,
    max_total: float | None = None,
    regex: bool = False,
    case_sensitive: bool = False,
) -> RewardFunc:
    """`penalty` when the completion contains any of `phrases` (regular expressions with regex=true).

    With ``per_occurrence`` every occurrence counts, down to ``max_total`` (e.g. -2.0) when set.
    """
    if not phrases:
        raise ValueError("phrase_penalty needs phrases: a non-empty list of phrases to penalise")
    flags = 0 if case_sensitive else re.IGNORECASE
    try:
        pattern = re.compile("|".join(f"(?:{p})" for p in phrases), flags) if regex else None
    except re.error as exc:
        raise ValueError(f"phrase_penalty: bad regular expression in phrases: {exc}") from exc
    # literal phrases: substring search on case-folded text beats a case-insensitive regex
    literal = [p if case_sensitive else p.casefold() for p in phrases]

    def count(text: str) -> int:
        if pattern is not None:
            return len(pattern.findall(text)) if per_occurrence else int(bool(pattern.search(text)))
        text = text if case_sensitive else text.casefold()
        if per_occurrence:
            return sum(text.count(p) for p in literal)
        return int(any(p in text for p in literal))

    def score(text: str) -> float:
        if not per_occurrence:
            return penalty if count(text) else 0.0
        total = penalty * count(text)
        if max_total is not None:
            total = max(total, max_total) if penalty < 0 else min(total, max_total)
        return total + 0.0

    def reward_fn(completions, **kwargs) -> list[float | None]:
        return [score(t) for t in texts(completions)]

    return reward_fn


_ASCII_LETTERS = string.ascii_letters.encode()
_NON_ASCII = re.compile(r"[^\x00-\x7f]")


def _script(ch: str) -> str | None:
    """The Unicode script family of a letter, from its character name (LATIN, CJK, ...)."""
    if not ch.isalpha():
        return None
    name = unicodedata.name(ch, "")
    if not name:
        return None
    first = name.split(" ", 1)[0]
    if first in ("CJK", "HIRAGANA", "KATAKANA"):
        return "CJK"
    return first


@register("script_consistency", family="style", low=0.0, high=1.0)
def script_consistency(*, script: str = "LATIN", reward: float = 1.0, min_letters: int = 1) -> RewardFunc:
    """`reward` times the share of letters written in `script` (LATIN, CYRILLIC, CJK, ARABIC, ...).

    A light language-consistency check (DeepSeek-R1 rewards keeping the chain of thought in
    the prompt's language): it tells scripts apart, not languages that share one. Texts with
    fewer than ``min_letters`` letters get None.
    """
    wanted = script.upper()

    def score(text: str) -> float | None:
        # ASCII letters are LATIN: count them in C, and look up names only for the rest
        ascii_bytes = text.encode("ascii", "ignore")
        ascii_letters = len(ascii_bytes) - len(ascii_bytes.translate(None, _ASCII_LETTERS))
        others = () if text.isascii() else _NON_ASCII.findall(text)
        scripts = [s for s in map(_script, others) if s is not None]
        letters = ascii_letters + len(scripts)
        if letters < max(min_letters, 1):
            return None
        hits = sum(s == wanted for s in scripts) + (ascii_letters if wanted == "LATIN" else 0)
        return reward * hits / letters

    def reward_fn(completions, **kwargs) -> list[float | None]:
        return [score(t) for t in texts(completions)]

    return reward_fn
