"""Tools the model calls between turns, and the guard every tool call runs inside.

A recipe lists tools by name or import path (``tools.functions``), optionally a stateful
environment (``tools.environment``), and how many call rounds a completion may use. TRL's
``GRPOTrainer`` parses each call from the generated text with the tokenizer's response
template, runs the function, appends its result as a ``tool`` turn and lets the model go on.

Every call goes through :func:`guard`, which applies the same safety rules as the rewards:

- a time limit (``tools.timeout``): a call that has not returned by then becomes an error
  (the call keeps running in a daemon thread, since Python cannot kill a thread, but the
  training step does not wait for it);
- exceptions, including ``SystemExit``, become a tool error the model reads, never a crash;
- the result is turned into text: strings pass, numbers, lists and dicts become JSON, and
  anything else is an error naming the type, so a tool cannot break the chat template.

Errors reach the model as TRL writes them, ``{'error': '<message>'}``, and are counted in
TRL's ``tools/failure_frequency``. Example::

    >>> from unsloth_grpo.tools import guard, TOOLS
    >>> safe = guard(TOOLS["calculate"], timeout=1.0)
    >>> safe(expression="2 * (3 + 4)")
    '14'
"""

from __future__ import annotations

import asyncio
import difflib
import functools
import importlib
import inspect
import json
import threading
import types
from typing import TYPE_CHECKING, Any, Callable

from . import calculator, guessing  # noqa: F401  (registration side effects)
from ._registry import ENVIRONMENTS, TOOLS, register_environment, register_tool

if TYPE_CHECKING:
    from unsloth_grpo.models.ref import ModelRef

__all__ = [
    "ENVIRONMENTS",
    "TOOLS",
    "ToolError",
    "build_tools",
    "guard",
    "guard_environment",
    "register_environment",
    "register_tool",
    "resolve_environment",
    "resolve_tool",
    "tool_problems",
    "with_tool_metrics",
]


class ToolError(RuntimeError):
    """A tool call failed; the message is what the model reads."""


# ---------------------------------------------------------------- looking tools up


def _import_object(path: str, what: str) -> Any:
    module_name, sep, attr = path.partition(":")
    if not sep:
        module_name, _, attr = path.rpartition(".")
    if not module_name or not attr:
        raise ValueError(f"{what} {path!r}: write it as 'package.module:name'")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ValueError(f"{what} {path!r}: cannot import module {module_name!r} ({exc}); check the path and "
                         "that the module is on PYTHONPATH") from exc
    obj = module
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise ValueError(f"{what} {path!r}: module {module_name!r} has no attribute {attr!r}")
        obj = getattr(obj, part)
    if not callable(obj):
        raise ValueError(f"{what} {path!r} is a {type(obj).__name__}, not callable")
    return obj


def _lookup(name: str, registry: dict[str, Callable], what: str) -> Callable:
    if name in registry:
        return registry[name]
    if ":" in name or "." in name:
        return _import_object(name, what)
    close = difflib.get_close_matches(name, registry, n=1)
    hint = f" Did you mean {close[0]!r}?" if close else ""
    raise ValueError(f"unknown {what} {name!r}.{hint} Built-in: {', '.join(sorted(registry)) or 'none'}. "
                     f"A custom {what} is given by its import path, e.g. 'mypkg.tools:my_{what.split()[-1]}'.")


def resolve_tool(name: str) -> Callable:
    """The function called ``name`` (registry name or import path), unguarded."""
    return _lookup(name, TOOLS, "tool")


def resolve_environment(name: str) -> Callable:
    """The environment factory called ``name`` (registry name or import path), unguarded."""
    return _lookup(name, ENVIRONMENTS, "tool environment")


def environment_methods(instance: Any) -> dict[str, Callable]:
    """The public methods of an environment that TRL exposes as tools (all but reset/get_reward)."""
    return {name: member for name, member in inspect.getmembers(instance, predicate=inspect.ismethod)
            if not name.startswith("_") and name not in ("reset", "get_reward")}


# ---------------------------------------------------------------- the guard


def as_text(name: str, value: Any) -> str:
    """A tool's return value as the text the model reads, or :class:`ToolError` for anything else."""
    if isinstance(value, str):
        return value
    if value is None or isinstance(value, (bool, int, float, list, tuple, dict)):
        try:
            return json.dumps(value, ensure_ascii=False)
        except (TypeError, ValueError) as exc:
            raise ToolError(f"{name} returned a {type(value).__name__} that is not plain data ({exc}); "
                            "return a string, a number, or lists/dicts of those") from None
    raise ToolError(f"{name} returned a {type(value).__name__}, which cannot be shown to the model; "
                    "return a string, a number, or lists/dicts of those")


def _describe(name: str, exc: BaseException) -> str:
    return f"{name} failed: {type(exc).__name__}: {exc}" if str(exc) else f"{name} failed: {type(exc).__name__}"


def _call_in_thread(fn: Callable, args: tuple, kwargs: dict, timeout: float, name: str) -> Any:
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box["value"] = fn(*args, **kwargs)
        except BaseException as exc:  # noqa: BLE001 - SystemExit from a tool must not end training
            box["error"] = exc

    thread = threading.Thread(target=run, name=f"tool-{name}", daemon=True)
    thread.start()
    thread.join(timeout)
    if thread.is_alive():
        raise ToolError(f"{name} did not return within {timeout:g} s")
    if "error" in box:
        error = box["error"]
        if isinstance(error, ToolError):
            raise error
        raise ToolError(_describe(name, error)) from None
    return box["value"]


def guard(fn: Callable, *, timeout: float, name: str | None = None) -> Callable:
    """``fn`` with a time limit, errors turned into :class:`ToolError` and its result turned into text.

    The wrapper keeps ``fn``'s name, signature and docstring, which TRL turns into the tool's
    schema. Async tools are awaited with the same limit.
    """
    name = name or fn.__name__
    if inspect.iscoroutinefunction(fn):

        @functools.wraps(fn)
        async def guarded_async(*args, **kwargs):
            try:
                value = await asyncio.wait_for(fn(*args, **kwargs), timeout)
            except asyncio.TimeoutError:
                raise ToolError(f"{name} did not return within {timeout:g} s") from None
            except ToolError:
                raise
            except BaseException as exc:  # noqa: BLE001
                raise ToolError(_describe(name, exc)) from None
            return as_text(name, value)

        return guarded_async

    @functools.wraps(fn)
    def guarded(*args, **kwargs):
        return as_text(name, _call_in_thread(fn, args, kwargs, timeout, name))

    return guarded


def _guard_method(instance: Any, method_name: str, timeout: float) -> None:
    function = getattr(type(instance), method_name)
    safe = guard(function, timeout=timeout, name=method_name)
    try:
        setattr(instance, method_name, types.MethodType(safe, instance))
    except AttributeError as exc:
        raise ValueError(f"tool environment {type(instance).__name__}: cannot guard method {method_name!r} "
                         f"({exc}); do not use __slots__ in an environment class") from None


def guard_environment(factory: Callable, *, timeout: float) -> Callable:
    """A factory whose environments have every tool method guarded like :func:`guard` does."""

    def make_environment():
        instance = factory()
        for method_name in environment_methods(instance):
            _guard_method(instance, method_name, timeout)
        return instance

    make_environment.__name__ = getattr(factory, "__name__", "environment")
    make_environment.__doc__ = getattr(factory, "__doc__", None)
    return make_environment


def build_tools(tools_cfg) -> dict[str, Any]:
    """``GRPOTrainer`` keyword arguments for a recipe's ``tools`` section: guarded ``tools`` and
    ``environment_factory`` (only the keys that apply; empty when no tool is configured)."""
    out: dict[str, Any] = {}
    if tools_cfg.functions:
        out["tools"] = [guard(resolve_tool(name), timeout=tools_cfg.timeout) for name in tools_cfg.functions]
    if tools_cfg.environment:
        out["environment_factory"] = guard_environment(resolve_environment(tools_cfg.environment),
                                                       timeout=tools_cfg.timeout)
    return out


def with_tool_metrics(reward_funcs: list[Callable]) -> list[Callable]:
    """``reward_funcs`` with the first one also logging the batch's tool figures through TRL's
    ``log_metric`` hook: ``tools/calls_per_completion``, ``tools/used_share``, ``tools/error_share``
    (TRL logs ``tools/call_frequency`` and ``tools/failure_frequency`` itself)."""
    if not reward_funcs:
        return reward_funcs
    from unsloth_grpo.rewards.calling import call_reward

    from .transcript import summary

    first = reward_funcs[0]

    @functools.wraps(first)
    def logging_first(completions, **kwargs):
        log_metric = kwargs.get("log_metric")
        if log_metric is not None:
            for key, value in summary(completions).items():
                log_metric(key, value)
        return call_reward(first, completions, **kwargs)

    logging_first.__name__ = getattr(first, "__name__", type(first).__name__)  # TRL names rewards/<name>/mean after it
    return [logging_first, *reward_funcs[1:]]


def uses_tools(cfg) -> bool:
    return bool(cfg.tools.functions or cfg.tools.environment)


# ---------------------------------------------------------------- checks before loading


def _schema_problem(where: str, fn: Callable) -> str | None:
    """Why TRL could not describe ``fn`` to the model (no docstring, a missing type hint...), or None."""
    from transformers.utils.chat_template_utils import get_json_schema

    try:
        get_json_schema(fn)
    except Exception as exc:  # noqa: BLE001 - report whatever transformers says
        return (f"{where}: {exc}. A tool needs type hints on every argument and a Google-style docstring "
                "with an 'Args:' line per argument (see docs/tools.md)")
    return None


def tool_problems(cfg, model: ModelRef | None = None) -> list[str]:
    """Every problem with ``cfg.tools``, one line each, found without loading a model; with ``model``
    (the ref of ``cfg.model.name``, as the config check decided it) also a model that cannot call tools."""
    t, p = cfg.tools, []
    if t.timeout <= 0:
        p.append(f"tools.timeout={t.timeout}: give the seconds a call may take, > 0 (e.g. 5)")
    if t.max_tool_calling_iterations < 1:
        p.append(f"tools.max_tool_calling_iterations={t.max_tool_calling_iterations}: allow at least 1 round")
    if model is not None and model.tool_twin:
        p.append(f"model.name={model.name}: its chat template cannot render tool calls; "
                 f"use model.name={model.tool_twin}")
    names: dict[str, str] = {}
    for i, entry in enumerate(t.functions):
        where = f"tools.functions[{i}] ({entry})"
        try:
            fn = resolve_tool(entry)
        except ValueError as exc:
            p.append(f"tools.functions[{i}]: {exc}")
            continue
        problem = _schema_problem(where, fn)
        if problem:
            p.append(problem)
        name = getattr(fn, "__name__", entry)
        if name in names:
            p.append(f"{where}: a second tool named {name!r} (first: {names[name]}); the model calls tools by name")
        names[name] = entry
    if t.environment:
        where = f"tools.environment ({t.environment})"
        try:
            instance = resolve_environment(t.environment)()
        except ValueError as exc:
            p.append(f"tools.environment: {exc}")
            return p
        except Exception as exc:  # noqa: BLE001 - the factory's own failure, reported before loading
            p.append(f"{where}: creating an environment failed: {type(exc).__name__}: {exc}")
            return p
        if not callable(getattr(instance, "reset", None)):
            p.append(f"{where}: an environment needs a reset(**row) method (TRL calls it before each rollout)")
        methods = environment_methods(instance)
        if not methods:
            p.append(f"{where}: has no public methods, so the model has no tool to call")
        for method_name, method in methods.items():
            problem = _schema_problem(f"{where}.{method_name}", method)
            if problem:
                p.append(problem)
            if method_name in names:
                p.append(f"{where}: method {method_name!r} has the name of tools.functions entry {names[method_name]}")
    return p
