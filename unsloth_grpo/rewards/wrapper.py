"""The validation wrapper every recipe reward runs inside, and adaptive weighting.

:func:`validated` checks each call of a reward: one value per completion, each a finite
number or None. A reward that raises or returns something else stops the run with a
:class:`RewardError` naming the reward, the sample index and the start of the completion,
instead of a stack trace from deep inside TRL. With ``on_error="zero"`` the run goes on:
the offending values become 0.0 and are counted in ``stats.errors``.

:class:`AdaptiveWeight` raises a reward's effective weight while its running success rate
is low and lowers it as the rate rises; the wrapper multiplies the reward's values by the
current factor (TRL's weights are fixed at construction, so the scaling has to happen in
the values). ``stats.weight`` holds the effective weight.

Both report through TRL's ``log_metric`` hook when TRL passes one (it does to every reward
function): ``rewards/<name>/errors`` (failures absorbed so far, ``on_error="zero"`` only),
``rewards/<name>/weight`` and ``rewards/<name>/success_rate`` (adaptive only), averaged
over each logging step like TRL's own metrics.

Every call is timed (``stats.seconds``, ``stats.slowest_s``). A call that takes
:data:`SLOW_CALL_S` or longer is reported on stderr with the reward's name, its time and the
fix, once, and again only when a later call takes twice as long: the training step waits for its
rewards. ``timeout_s`` (a wrapper key of ``params``) stops a call that runs longer: a
:class:`RewardError` with ``on_error="raise"``, zeros with ``on_error="zero"``. The limit is a
timer signal, so it works in the main thread on Unix (where TRL calls the rewards) and is not
applied elsewhere.
"""

from __future__ import annotations

import contextlib
import math
import numbers
import signal
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from ..grading import completion_text
from .calling import call_reward, completion_batch, one_sample

ON_ERROR_CHOICES = ("raise", "zero")
_SNIPPET = 200
#: A reward call at least this long (seconds) is reported: a GRPO step waits for every reward call.
SLOW_CALL_S = 10.0


class RewardError(RuntimeError):
    """A reward function raised or returned values TRL cannot use."""


@dataclass
class RewardStats:
    """Running counters of one wrapped reward, read by :func:`unsloth_grpo.rewards.reward_metrics`."""

    name: str
    base_weight: float = 1.0
    calls: int = 0
    completions: int = 0
    errors: int = 0
    weight: float = 1.0
    success_rate: float | None = None
    last_error: str | None = None
    seconds: float = 0.0  # wall time of every call together
    slowest_s: float = 0.0
    timeouts: int = 0
    warned_s: float = 0.0  # the slowest call reported so far (0: none yet)


class _Timeout(BaseException):
    """Raised inside a reward call that ran past its ``timeout_s`` (a BaseException, so that the
    reward's own ``except Exception`` cannot swallow it)."""


@contextlib.contextmanager
def _time_limit(seconds: float | None):
    """Raise :class:`_Timeout` in the block after ``seconds`` (main thread, Unix; else no limit)."""
    if not seconds or threading.current_thread() is not threading.main_thread() or not hasattr(signal, "setitimer"):
        yield
        return

    def expired(signum, frame):
        raise _Timeout

    previous = signal.signal(signal.SIGALRM, expired)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def _to_stderr(message: str) -> None:
    print(f"warning: {message}", file=sys.stderr, flush=True)


def slow_call_message(name: str, seconds: float, n: int, threshold: float, timeout_s: float | None) -> str:
    """What a slow reward call is told: the reward, its time, and what to do."""
    each = 1000.0 * seconds / max(n, 1)
    fix = ("make it faster (move slow setup out of the call, cache, score the batch at once)"
           + ("" if timeout_s else ", or give it params: {timeout_s: N} to stop a call that runs longer than N s"))
    return (f"reward {name!r} took {seconds:.1f} s for one call of {n} completions ({each:,.0f} ms per completion; "
            f"reported from {threshold:g} s): every training step waits for it. Fix: {fix}")


@dataclass
class AdaptiveWeight:
    """Scale factor driven by the running success rate of a reward.

    A sample succeeds when its value is at least ``threshold``. The rate is an exponential
    moving average over batches (``momentum`` is the weight of the past). The factor goes
    linearly from ``max_scale`` at rate 0 to ``min_scale`` at rate 1; before the first
    batch it is 1.
    """

    threshold: float
    min_scale: float = 0.5
    max_scale: float = 2.0
    momentum: float = 0.9
    rate: float | None = field(default=None, init=False)

    def __post_init__(self) -> None:
        if not 0 <= self.momentum < 1:
            raise ValueError(f"adaptive.momentum={self.momentum} must be in [0, 1)")
        if not 0 <= self.min_scale <= self.max_scale:
            raise ValueError(
                f"adaptive: need 0 <= min_scale ({self.min_scale}) <= max_scale ({self.max_scale})"
            )

    @property
    def scale(self) -> float:
        if self.rate is None:
            return 1.0
        return self.max_scale - (self.max_scale - self.min_scale) * self.rate

    def update(self, values: list[float | None]) -> float:
        """Fold one batch into the rate and return the new scale."""
        scored = [v for v in values if v is not None]
        if scored:
            batch_rate = sum(v >= self.threshold for v in scored) / len(scored)
            if self.rate is None:
                self.rate = batch_rate
            else:
                self.rate = self.momentum * self.rate + (1 - self.momentum) * batch_rate
        return self.scale


def _snippet(completion: Any) -> str:
    try:
        text = completion_text(completion)
    except TypeError:
        text = repr(completion)
    text = text.replace("\n", "\\n")
    return text if len(text) <= _SNIPPET else text[:_SNIPPET] + "..."


def _prompt_of(prompts: Any, i: int, n: int) -> str:
    """`` (prompt '...')`` for sample ``i``: the last message of a chat prompt, cut short; empty when unknown."""
    if not isinstance(prompts, (list, tuple)) or len(prompts) != n:
        return ""
    prompt = prompts[i]
    if isinstance(prompt, list) and prompt and isinstance(prompt[-1], dict):
        prompt = prompt[-1].get("content")
    text = " ".join(str(prompt).split())
    return f" (prompt {text if len(text) <= 80 else text[:77] + '...'!r})"


def _find_failing_sample(fn: Callable, completions: list, kwargs: dict) -> int | None:
    """Re-run the reward one sample at a time, called as TRL calls it, to find the first that raises."""
    n = len(completions)
    for i in range(n):
        try:
            call_reward(fn, completions[i : i + 1], **one_sample(kwargs, i, n))
        except Exception:  # noqa: BLE001 - locating the culprit, the error is re-reported
            return i
    return None


def _check_value(value: Any) -> float | None | str:
    """The value as a float or None, or a description of what is wrong with it."""
    if type(value) is float:  # the common case first: an ABC isinstance check costs more
        return value if math.isfinite(value) else f"{value} (not finite)"
    if value is None:
        return None
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, numbers.Real):
        f = float(value)
        return f if math.isfinite(f) else f"{f} (not finite)"
    if callable(getattr(value, "item", None)) and not isinstance(value, (str, bytes)):
        try:  # a 0-d tensor or numpy scalar
            return _check_value(value.item())
        except (ValueError, RuntimeError, TypeError):
            pass
    return f"{value!r} of type {type(value).__name__} (expected a float or None)"


def wrapper_metrics(stats: RewardStats, on_error: str, adaptive: AdaptiveWeight | None) -> dict[str, float]:
    """The wrapper's own metrics: failures absorbed so far, and the adaptive weight."""
    out: dict[str, float] = {}
    if on_error == "zero":
        out[f"rewards/{stats.name}/errors"] = float(stats.errors)
    if adaptive is not None:
        out[f"rewards/{stats.name}/weight"] = stats.weight
        if stats.success_rate is not None:
            out[f"rewards/{stats.name}/success_rate"] = stats.success_rate
    return out


def validated(
    fn: Callable,
    name: str,
    *,
    on_error: str = "raise",
    adaptive: AdaptiveWeight | None = None,
    base_weight: float = 1.0,
    timeout_s: float | None = None,
    slow_call_s: float | None = None,
    warn: Callable[[str], None] = _to_stderr,
) -> Callable:
    """Wrap reward ``fn`` with the checks described in the module docstring.

    The result keeps TRL's signature, has ``__name__ == name`` (TRL's metric key) and
    carries ``.stats`` (:class:`RewardStats`) and ``.inner`` (the unwrapped function). ``fn`` is
    called as TRL calls a reward, every argument by keyword
    (:func:`~unsloth_grpo.rewards.calling.call_reward`), so a reward written for TRL works unchanged.
    ``timeout_s`` limits one call; a call of ``slow_call_s`` seconds or more (:data:`SLOW_CALL_S` when
    None) is reported through ``warn``.
    """
    if on_error not in ON_ERROR_CHOICES:
        raise ValueError(f"reward {name!r}: on_error={on_error!r}; choose one of {ON_ERROR_CHOICES}")
    if timeout_s is not None and (isinstance(timeout_s, bool) or not isinstance(timeout_s, numbers.Real)
                                  or not timeout_s > 0):
        raise ValueError(f"reward {name!r}: timeout_s={timeout_s!r}; give the longest a call may take, in "
                         "seconds (a positive number)")
    stats = RewardStats(name=name, base_weight=base_weight, weight=base_weight)
    checked = _CheckedCalls(fn, name, on_error, adaptive, base_weight, timeout_s, slow_call_s, warn, stats)

    def wrapper(completions, **kwargs) -> list[float | None]:
        return checked(completion_batch(completions, name), kwargs)

    wrapper.__name__ = wrapper.__qualname__ = name
    wrapper.__doc__ = getattr(fn, "__doc__", None)
    wrapper.stats = stats  # type: ignore[attr-defined]
    wrapper.inner = fn  # type: ignore[attr-defined]
    wrapper.on_error = on_error  # type: ignore[attr-defined]
    wrapper.adaptive = adaptive  # type: ignore[attr-defined]
    return wrapper


@dataclass
class _CheckedCalls:
    """What the wrapper :func:`validated` returns does on each call: the reward, its settings, its counters."""

    fn: Callable
    name: str
    on_error: str
    adaptive: AdaptiveWeight | None
    base_weight: float
    timeout_s: float | None
    slow_call_s: float | None
    warn: Callable[[str], None]
    stats: RewardStats

    def __call__(self, completions: list, kwargs: dict) -> list[float | None]:
        """The reward's values for one call, checked (and scaled by the adaptive weight); zeros for a
        call that failed with ``on_error="zero"``."""
        n = len(completions)
        self.stats.calls += 1
        self.stats.completions += n
        try:
            values = self.timed(completions, kwargs)
        except _Timeout:
            return self.timed_out(n, kwargs)
        except Exception as exc:
            return self.raised(exc, completions, kwargs)
        try:
            values = list(values)
        except TypeError:
            return self.zeros(f"reward {self.name!r} returned {type(values).__name__}, expected a list with one "
                              f"float or None per completion ({n} completions)", n, kwargs)
        if len(values) != n:
            return self.zeros(f"reward {self.name!r} returned {len(values)} values for {n} completions; it must "
                              "return exactly one float or None per completion", n, kwargs)
        out = self.checked(values, completions)
        if self.adaptive is not None:
            scale = self.adaptive.update(out)
            self.stats.success_rate = self.adaptive.rate
            self.stats.weight = self.base_weight * scale
            out = [None if v is None else v * scale for v in out]
        self.log(kwargs.get("log_metric"))
        return out

    def timed(self, completions: list, kwargs: dict) -> Any:
        """The reward's values for one call, timed, within ``timeout_s``; a slow call is reported."""
        stats = self.stats
        start = time.perf_counter()
        try:
            with _time_limit(self.timeout_s):
                return call_reward(self.fn, completions, **kwargs)
        finally:
            took = time.perf_counter() - start
            stats.seconds += took
            stats.slowest_s = max(stats.slowest_s, took)
            threshold = SLOW_CALL_S if self.slow_call_s is None else self.slow_call_s
            if took >= threshold and took >= 2 * stats.warned_s:
                stats.warned_s = took
                self.warn(slow_call_message(self.name, took, len(completions), threshold, self.timeout_s))

    def timed_out(self, n: int, kwargs: dict) -> list[float]:
        """A call stopped at ``timeout_s`` (called while its :class:`_Timeout` is handled)."""
        self.stats.timeouts += 1
        message = (f"reward {self.name!r} ran past its timeout_s={self.timeout_s:g} on a call of {n} completions "
                   "and was stopped; make it faster, or raise timeout_s")
        if self.on_error == "raise":
            self.stats.last_error = message
            raise RewardError(message) from None
        return self.zeros(message, n, kwargs)

    def raised(self, exc: Exception, completions: list, kwargs: dict) -> list[float]:
        """A call that raised ``exc`` (called while it is handled): said with the first sample that fails alone."""
        n = len(completions)
        i = _find_failing_sample(self.fn, completions, kwargs)
        where = (
            f"sample {i}: {_snippet(completions[i])!r}{_prompt_of(kwargs.get('prompts'), i, n)}"
            if i is not None
            else f"a batch of {n} (no single sample fails alone)"
        )
        message = f"reward {self.name!r} raised {type(exc).__name__}: {exc} -- at {where}"
        if self.on_error == "raise":
            self.stats.last_error = message
            raise RewardError(message) from exc
        return self.zeros(message, n, kwargs)

    def checked(self, values: list, completions: list) -> list[float | None]:
        """Each value as a float or None; one that is neither fails (0.0 with ``on_error="zero"``)."""
        out: list[float | None] = []
        for i, value in enumerate(values):
            checked = _check_value(value)
            if isinstance(checked, str):
                self.fail(f"reward {self.name!r} returned {checked} for sample {i}: {_snippet(completions[i])!r}", 1)
                checked = 0.0
            out.append(checked)
        return out

    def fail(self, message: str, count: int) -> None:
        """Record a failure of ``count`` values: raise it, or count it with ``on_error="zero"``."""
        self.stats.last_error = message
        if self.on_error == "raise":
            raise RewardError(message)
        self.stats.errors += count

    def zeros(self, message: str, n: int, kwargs: dict) -> list[float]:
        """A failed call of ``n`` completions: recorded (raised with ``on_error="raise"``), logged, all 0.0."""
        self.fail(message, n)
        self.log(kwargs.get("log_metric"))
        return [0.0] * n

    def log(self, log_metric) -> None:
        """Report through TRL's ``log_metric`` hook (TRL >= 1.x passes it to reward functions)."""
        if not callable(log_metric):
            return
        for key, value in wrapper_metrics(self.stats, self.on_error, self.adaptive).items():
            log_metric(key, value)
