"""The reward library: TRL-signature reward functions looked up by name.

Every reward is ``fn(completions, **columns) -> list[float | None]`` where completions are
strings or chat lists ``[{"role": "assistant", "content": text}]`` and the gold answers
arrive as the ``answer`` column. ``None`` means "does not apply to this sample" (TRL then
leaves the reward out for it). Parameters are given at construction::

    >>> from unsloth_grpo.rewards import get_reward
    >>> fn = get_reward("correctness", reward=2.0)
    >>> fn.__name__, fn(["<reasoning>2 + 2 = 4</reasoning><answer>4</answer>"], answer=["4"])
    ('correctness', [2.0])

Recipes list rewards as ``{name, weight, params}``; :func:`build_reward_functions` turns
that list into the ``reward_funcs`` / ``reward_weights`` pair TRL takes, each function
inside the validation wrapper (:mod:`unsloth_grpo.rewards.wrapper`). Two keys of
``params`` belong to the wrapper, not the reward: ``on_error`` (``"raise"`` or ``"zero"``),
``adaptive`` (``true`` or ``{min_scale, max_scale, momentum, threshold}``) and ``timeout_s``
(the longest one call may take, in seconds).

A custom reward is named by its import path, ``mypkg.rewards:my_reward`` or
``mypkg.rewards.my_reward``; it must already have TRL's signature, and its ``params`` are
passed to it as keyword arguments on every call. Names are never guessed: an unknown name
is an error listing the built-in rewards.

Run ``unsloth-grpo rewards list --markdown`` for the catalogue table (the command lives in the
CLI, above the tasks, so that it lists the tasks' rewards too).
"""

from __future__ import annotations

import difflib
import functools
import importlib
import inspect
from typing import Any, Callable, Iterable, Mapping

from ._registry import REGISTRY, RewardInfo, parameter_problems
from .calling import call_reward, refusing_one_string
from .wrapper import ON_ERROR_CHOICES, AdaptiveWeight, RewardError, RewardStats, validated, wrapper_metrics

__all__ = [
    "REGISTRY",
    "RewardError",
    "RewardInfo",
    "RewardStats",
    "AdaptiveWeight",
    "available_rewards",
    "get_reward",
    "reward_info",
    "build_reward_functions",
    "reward_metrics",
    "catalogue_markdown",
    "validated",
    "grader_of",
    "reward_spec_fields",
]

#: Keys of a spec's ``params`` that configure the wrapper instead of the reward.
WRAPPER_KEYS = ("on_error", "adaptive", "timeout_s")


def available_rewards() -> list[str]:
    """Names of the built-in rewards (the library's and the task modules'), sorted."""
    return sorted(REGISTRY)


def _unknown_name_message(name: str) -> str:
    close = difflib.get_close_matches(name, REGISTRY, n=3)
    hint = f" Did you mean {', '.join(repr(c) for c in close)}?" if close else ""
    return (
        f"unknown reward {name!r}.{hint} Built-in rewards: {', '.join(available_rewards())}. "
        "A custom reward is given by its import path, e.g. 'mypkg.rewards:my_reward'."
    )


def reward_info(name: str) -> RewardInfo:
    """Registry entry of a built-in reward (KeyError listing the valid names otherwise)."""
    try:
        return REGISTRY[name]
    except KeyError:
        raise KeyError(_unknown_name_message(name)) from None


def _is_import_path(name: str) -> bool:
    return ":" in name or "." in name


def _import_custom(path: str) -> Callable:
    module_name, sep, attr = path.partition(":")
    if not sep:
        module_name, _, attr = path.rpartition(".")
    if not module_name or not attr:
        raise ValueError(
            f"custom reward {path!r}: write it as 'package.module:function' (or 'package.module.function')"
        )
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name is None or not (module_name == exc.name or module_name.startswith(exc.name + ".")):
            raise ValueError(_failed_import(path, module_name, exc)) from exc  # a module it imports is missing
        raise ValueError(
            f"custom reward {path!r}: cannot import module {module_name!r} ({exc}). Check the path "
            f"and that the module is on PYTHONPATH. Built-in rewards: {', '.join(available_rewards())}"
        ) from exc
    except Exception as exc:  # noqa: BLE001 - whatever the module's own code raises while it is imported
        raise ValueError(_failed_import(path, module_name, exc)) from exc
    obj = module
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise ValueError(f"custom reward {path!r}: module {module_name!r} has no attribute {attr!r}")
        obj = getattr(obj, part)
    if not callable(obj):
        raise ValueError(f"custom reward {path!r} is a {type(obj).__name__}, not a function")
    return obj


def _failed_import(path: str, module_name: str, exc: BaseException) -> str:
    """The module of a custom reward was found, and raised while it was imported: say so, where, and how
    to see the whole traceback."""
    import traceback

    frames = [f for f in traceback.extract_tb(exc.__traceback__) if not f.filename.startswith("<frozen")]
    where = f" at {frames[-1].filename}:{frames[-1].lineno}" if frames and not isinstance(exc, SyntaxError) else ""
    return (f"custom reward {path!r}: module {module_name!r} failed to import: {type(exc).__name__}: {exc}{where}. "
            f"Fix the module; `python -c \"import {module_name}\"` shows the whole traceback")


def keyword_problem(name: str, keywords: Iterable[str]) -> str | None:
    """Why the custom reward ``name`` cannot be called as TRL calls it, with ``completions`` and
    ``keywords`` (TRL's own and the data's columns), all by keyword; None when it can (or for a
    built-in). A reward without ``**kwargs`` fails on every call, so ``on_error: zero`` would only
    make it pay 0 for everything."""
    if name in REGISTRY or not _is_import_path(name):
        return None
    target = _import_custom(name)
    try:
        parameters = inspect.signature(target).parameters.values()
    except (TypeError, ValueError):  # a builtin or C function: its call says what it refuses
        return None
    if any(p.kind is p.VAR_KEYWORD for p in parameters):
        return None
    named = {p.name for p in parameters if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
    refused = [k for k in dict.fromkeys(["completions", *keywords]) if k not in named]
    if not refused:
        return None
    own = ", ".join(p.name for p in parameters if p.kind is not p.VAR_POSITIONAL) or "completions"
    function = getattr(target, "__name__", "reward")
    return (f"{function}() has no **kwargs, and TRL calls every reward with keywords it does not name: "
            f"{', '.join(refused)} (TRL's own and the data's columns). Add **kwargs to its signature, e.g. "
            f"def {function}({own}, **kwargs), and read what it needs by name")


def get_reward(name: str, **params: Any) -> Callable[..., list]:
    """The reward function called ``name``, built with ``params``.

    ``name`` is a built-in (see :func:`available_rewards`) or an import path to a custom
    reward. The returned function's ``__name__`` is the reward's name (TRL logs it as
    ``rewards/<name>/mean``). Unknown names and parameters raise ``ValueError`` saying
    what is accepted. The wrapper keys ``on_error`` / ``adaptive`` return the function
    inside :func:`~unsloth_grpo.rewards.wrapper.validated`.
    """
    if callable(name):  # a function of one's own is named by where it lives, so a config can name it too
        where = f"{getattr(name, '__module__', 'your_module')}:{getattr(name, '__name__', 'your_function')}"
        raise ValueError(f"get_reward takes a reward's name, not the function itself: name yours by its import path, "
                         f"'module:function' (here '{where}', importable from where the run starts), or call "
                         "the function directly")
    if not isinstance(name, str) or not name:
        raise ValueError(f"a reward name must be a non-empty string, got {name!r}")
    wrapper_opts = {k: params.pop(k) for k in WRAPPER_KEYS if k in params}
    fn = _build(name, params)
    if not wrapper_opts:
        return fn
    return validated(
        fn,
        fn.__name__,
        on_error=wrapper_opts.get("on_error") or "raise",
        adaptive=_adaptive(name, wrapper_opts.get("adaptive"), fn),
        timeout_s=wrapper_opts.get("timeout_s"),
    )


def _build(name: str, params: dict[str, Any]) -> Callable[..., list]:
    if name in REGISTRY:
        info = REGISTRY[name]
        accepted = info.params
        unknown = sorted(set(params) - set(accepted))
        if unknown:
            raise ValueError(
                f"reward {name!r} has no parameter(s) {', '.join(unknown)}; it accepts: "
                + ", ".join(f"{k} (default {v!r})" for k, v in accepted.items())
            )
        wrong = parameter_problems(info.factory, params)
        if wrong:
            raise ValueError(f"reward {name!r}: " + "; ".join(wrong))
        try:
            fn = info.factory(**params)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"reward {name!r}: bad parameters {params!r}: {exc}") from exc
        fn.__name__ = fn.__qualname__ = name
        fn.__doc__ = inspect.getdoc(info.factory)
        return refusing_one_string(fn, name)
    if not _is_import_path(name):
        raise ValueError(_unknown_name_message(name))
    target = _import_custom(name)
    metric_name = getattr(target, "__name__", name.replace(":", ".").rsplit(".", 1)[-1])
    if params:
        wrong = parameter_problems(target, params)
        if wrong:
            raise ValueError(f"reward {name!r}: " + "; ".join(wrong))
        bound = functools.partial(target, **params)

        def custom(completions, **kwargs):
            return call_reward(bound, completions, **kwargs)

        custom.__name__ = custom.__qualname__ = metric_name
        custom.__doc__ = getattr(target, "__doc__", None)
        return custom
    if getattr(target, "__name__", None) != metric_name:
        # a callable object without __name__: give TRL a function with one.
        def custom(completions, **kwargs):
            return call_reward(target, completions, **kwargs)

        custom.__name__ = custom.__qualname__ = metric_name
        return custom
    return target


def _spec_fields(spec: Any) -> tuple[str, float, dict]:
    if isinstance(spec, str):
        return spec, 1.0, {}
    if isinstance(spec, Mapping):
        unknown = sorted(set(spec) - {"name", "weight", "params"})
        if unknown:
            raise ValueError(
                f"reward spec {dict(spec)!r}: unknown key(s) {unknown}; a spec has name, weight, params"
            )
        if "name" not in spec:
            raise ValueError(f"reward spec {dict(spec)!r} has no 'name'")
        name, weight, params = spec["name"], spec.get("weight", 1.0), spec.get("params") or {}
    else:
        name = getattr(spec, "name")
        weight, params = getattr(spec, "weight", 1.0), getattr(spec, "params", None) or {}
    if not isinstance(params, Mapping):
        raise ValueError(f"reward {name!r}: params must be a mapping, got {params!r}")
    try:
        weight = float(weight)
    except (TypeError, ValueError):
        raise ValueError(f"reward {name!r}: weight {weight!r} is not a number") from None
    return name, weight, dict(params)


def reward_spec_fields(spec: Any) -> tuple[str, dict]:
    """``(name, reward params)`` of a reward spec, without the wrapper's keys."""
    name, _, params = _spec_fields(spec)
    return name, {k: v for k, v in params.items() if k not in WRAPPER_KEYS}


def grader_of(name: str, params: dict[str, Any] | None = None) -> Callable:
    """The grader a correctness reward pays on: ``grader(completion, gold) -> Verdict``.

    The reward is built with ``params`` exactly as training builds it, and its ``.grader`` is
    returned, so whoever grades with it (evaluation, ``compare``, the reward lab) gets the
    reward's own decision. ``ValueError`` for a reward that has no grader.
    """
    fn = get_reward(name, **(params or {}))
    grader = getattr(fn, "grader", None)
    if grader is None:
        raise ValueError(f"reward {name!r} has no grader: it does not decide correct or not")
    return grader


def _adaptive(name: str, setting: Any, fn: Callable) -> AdaptiveWeight | None:
    if setting in (None, False):
        return None
    options = {} if setting is True else dict(setting)
    if "threshold" not in options:
        info = REGISTRY.get(name)
        options["threshold"] = info.high if info is not None else 1.0
    try:
        return AdaptiveWeight(**options)
    except TypeError as exc:
        raise ValueError(
            f"reward {name!r}: adaptive accepts true or a mapping of threshold, min_scale, "
            f"max_scale, momentum ({exc})"
        ) from None


def build_reward_functions(
    specs: Iterable[Any], *, on_error: str | None = None
) -> tuple[list[Callable], list[float]]:
    """``(reward_funcs, reward_weights)`` for TRL's ``GRPOTrainer`` from the recipe's reward specs.

    A spec is an object with ``.name``, ``.weight``, ``.params`` (the config's
    ``RewardSpec``), a mapping with those keys, or a bare name. Each function is wrapped by
    :func:`~unsloth_grpo.rewards.wrapper.validated`. ``on_error`` given here overrides the
    specs' own. A name used twice gets a suffix (``style``, ``style_2``) so that TRL logs
    both. All specs are checked before anything is returned.
    """
    funcs: list[Callable] = []
    weights: list[float] = []
    seen: dict[str, int] = {}
    for spec in specs:
        name, weight, params = _spec_fields(spec)
        wrapper_opts = {k: params.pop(k) for k in WRAPPER_KEYS if k in params}
        mode = on_error or wrapper_opts.get("on_error") or "raise"
        if mode not in ON_ERROR_CHOICES:
            raise ValueError(f"reward {name!r}: on_error={mode!r}; choose one of {ON_ERROR_CHOICES}")
        fn = get_reward(name, **params)
        metric = fn.__name__
        seen[metric] = seen.get(metric, 0) + 1
        if seen[metric] > 1:
            metric = f"{metric}_{seen[metric]}"
        adaptive = _adaptive(name, wrapper_opts.get("adaptive"), fn)
        funcs.append(validated(fn, metric, on_error=mode, adaptive=adaptive, base_weight=weight,
                               timeout_s=wrapper_opts.get("timeout_s")))
        weights.append(weight)
    if not funcs:
        raise ValueError("the recipe lists no rewards; add at least one under 'rewards:'")
    return funcs, weights


def reward_metrics(funcs: Iterable[Callable]) -> dict[str, float]:
    """Current wrapper metrics of wrapped rewards (TRL also receives them via ``log_metric``).

    ``rewards/<name>/errors`` (failures absorbed by ``on_error="zero"``, cumulative) and,
    for adaptive rewards, ``rewards/<name>/weight`` (current effective weight) and
    ``rewards/<name>/success_rate``.
    """
    metrics: dict[str, float] = {}
    for fn in funcs:
        stats: RewardStats | None = getattr(fn, "stats", None)
        if stats is not None:
            metrics.update(wrapper_metrics(stats, getattr(fn, "on_error", "raise"), getattr(fn, "adaptive", None)))
    return metrics


def _param_text(value: Any) -> str:
    if isinstance(value, tuple):
        value = list(value)
    return repr(value).replace("|", "\\|")


def catalogue_markdown() -> str:
    """The README's reward table, generated from the registry."""
    lines = [
        "| Reward | Family | Range (defaults) | Default weight | Parameters (defaults) | What it scores |",
        "|---|---|---|---|---|---|",
    ]
    for name in available_rewards():
        info = REGISTRY[name]
        params = ", ".join(f"`{k}={_param_text(v)}`" for k, v in info.params.items())
        summary = info.summary.replace("|", "\\|")
        lines.append(
            f"| `{name}` | {info.family} | {info.range_text} | {info.default_weight:g} | "
            f"{params} | {summary} |"
        )
    return "\n".join(lines) + "\n"
