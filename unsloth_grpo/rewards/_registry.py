"""The name -> reward-factory registry, and helpers every reward family uses.

A reward is registered as a *factory*: a function taking the reward's parameters as
keyword arguments and returning the TRL reward function ``fn(completions, **columns) ->
list[float | None]``. The registry keeps what the catalogue shows: family, value range
under the default parameters, default weight, and the factory's docstring.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Any, Callable, Sequence

from ..answers import completion_text

RewardFunc = Callable[..., list]

#: name -> RewardInfo, filled by the ``@register`` decorators of the family modules.
REGISTRY: dict[str, "RewardInfo"] = {}


@dataclass(frozen=True)
class RewardInfo:
    """What the registry knows about one built-in reward."""

    name: str
    family: str
    factory: Callable[..., RewardFunc]
    low: float
    high: float
    default_weight: float = 1.0

    @property
    def summary(self) -> str:
        """First line of the factory's docstring."""
        doc = inspect.getdoc(self.factory) or ""
        return doc.splitlines()[0] if doc else ""

    @property
    def params(self) -> dict[str, Any]:
        """Parameter names and their defaults."""
        return {
            p.name: p.default
            for p in inspect.signature(self.factory).parameters.values()
            if p.kind is p.KEYWORD_ONLY
        }

    @property
    def range_text(self) -> str:
        return f"[{_fmt(self.low)}, {_fmt(self.high)}]"


def _fmt(x: float) -> str:
    if x == float("inf"):
        return "inf"
    if x == float("-inf"):
        return "-inf"
    return f"{x:g}"


def register(
    name: str, *, family: str, low: float, high: float, weight: float = 1.0
) -> Callable[[Callable[..., RewardFunc]], Callable[..., RewardFunc]]:
    """Register a reward factory under ``name``. ``low``/``high``: range with default params."""

    def decorate(factory: Callable[..., RewardFunc]) -> Callable[..., RewardFunc]:
        if name in REGISTRY:
            raise ValueError(f"reward {name!r} is registered twice")
        REGISTRY[name] = RewardInfo(name, family, factory, low, high, weight)
        return factory

    return decorate


def texts(completions: Sequence[Any]) -> list[str]:
    """Plain texts of a batch of completions (strings or chat-message lists)."""
    return [completion_text(c) for c in completions]


def per_sample(values: Any, n: int, column: str) -> list:
    """A dataset column as one value per completion.

    TRL passes columns as lists aligned with the completions; a single value (a test or a
    direct call) is repeated.
    """
    if isinstance(values, (list, tuple)):
        if len(values) != n:
            raise ValueError(
                f"column {column!r} has {len(values)} values for {n} completions; "
                "pass one value per completion"
            )
        return list(values)
    return [values] * n
