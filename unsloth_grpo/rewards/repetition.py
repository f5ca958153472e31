"""Repetition penalty: punish completions that loop over the same phrases.

Example::

    >>> fn = repetition(ngram_size=2)
    >>> fn(["a b c d", "a b a b a b"])
    [0.0, -0.6]
"""

from __future__ import annotations

from ._registry import RewardFunc, register, texts


@register("repetition", family="repetition", low=-1.0, high=0.0)
def repetition(*, ngram_size: int = 3, max_penalty: float = -1.0) -> RewardFunc:
    """`max_penalty` times the share of repeated word n-grams (0 for text with no repeats).

    Words are lower-cased whitespace-separated tokens; the score is
    ``max_penalty * (1 - distinct_ngrams / all_ngrams)``. Texts shorter than one n-gram score 0.
    """
    if ngram_size < 1:
        raise ValueError(f"repetition: ngram_size={ngram_size} must be >= 1")
    if max_penalty > 0:
        raise ValueError(f"repetition: max_penalty={max_penalty} must be <= 0 (it is a penalty)")

    def score(text: str) -> float:
        words = text.lower().split()
        total = len(words) - ngram_size + 1
        if total <= 0:
            return 0.0
        distinct = len(set(zip(*(words[i:] for i in range(ngram_size)))))
        return max_penalty * (1.0 - distinct / total) + 0.0  # + 0.0 turns -0.0 into 0.0

    def reward_fn(completions, **kwargs) -> list[float | None]:
        return [score(t) for t in texts(completions)]

    return reward_fn
