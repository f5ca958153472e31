"""The statistics evaluation reports: pass@k from samples, a share's confidence interval, and the sign
test of a before/after change on the same problems. Pure functions of counts (no model, no data)."""

from __future__ import annotations

import math


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k from ``n`` samples of which ``c`` are correct: 1 - C(n-c, k) / C(n, k)."""
    if not 0 <= c <= n or not 1 <= k <= n:
        raise ValueError(f"pass@k needs 0 <= c <= n and 1 <= k <= n, got n={n}, c={c}, k={k}")
    if n - c < k:
        return 1.0
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def pass_ks(samples: int) -> list[int]:
    """The k reported for ``samples`` completions: powers of two up to ``samples``, and ``samples``."""
    ks, k = [], 1
    while k <= samples:
        ks.append(k)
        k *= 2
    if ks[-1] != samples:
        ks.append(samples)
    return ks


def wilson_interval(correct: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """95% Wilson score interval of a share of ``correct`` out of ``n`` (sound near 0 and 1, where
    mean +- 2 standard errors leaves [0, 1])."""
    if n <= 0:
        raise ValueError("an interval needs at least one graded problem")
    p = correct / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def sign_test(fixed: int, broken: int) -> float:
    """Two-sided exact sign test (McNemar's exact test) of a before/after change on the same problems.

    Only the problems that flipped count: under "training changed nothing", each flip is as likely
    to be a fix as a break. A p-value above 0.05 means the change is within what chance flips give.
    >>> round(sign_test(1, 4), 3), round(sign_test(0, 10), 4)
    (0.375, 0.002)
    """
    n = fixed + broken
    if n == 0:
        return 1.0
    tail = sum(math.comb(n, k) for k in range(min(fixed, broken) + 1)) / 2 ** n
    return min(1.0, 2 * tail)


__all__ = ["pass_at_k", "pass_ks", "sign_test", "wilson_interval"]
