"""Name -> tool and name -> environment registries, filled by ``@register_tool`` / ``@register_environment``."""

from __future__ import annotations

from typing import Callable

#: name -> a plain function the model may call (type hints and a Google-style docstring, as TRL needs).
TOOLS: dict[str, Callable] = {}
#: name -> a factory (usually a class) of stateful environments whose public methods are tools.
ENVIRONMENTS: dict[str, Callable] = {}


def register_tool(name: str) -> Callable[[Callable], Callable]:
    def decorate(fn: Callable) -> Callable:
        if name in TOOLS:
            raise ValueError(f"tool {name!r} is registered twice")
        if fn.__name__ != name:  # TRL dispatches calls by the function's own name
            raise ValueError(f"tool {name!r} must be a function named {name!r}, not {fn.__name__!r}")
        TOOLS[name] = fn
        return fn

    return decorate


def register_environment(name: str) -> Callable[[Callable], Callable]:
    def decorate(factory: Callable) -> Callable:
        if name in ENVIRONMENTS:
            raise ValueError(f"environment {name!r} is registered twice")
        ENVIRONMENTS[name] = factory
        return factory

    return decorate
