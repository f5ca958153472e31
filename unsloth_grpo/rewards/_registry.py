"""The name -> reward-factory registry, and helpers every reward family uses.

A reward is declared as a *factory*: a function taking the reward's parameters as keyword
arguments and returning the TRL reward function ``fn(completions, **columns) ->
list[float | None]``. ``@register(...)`` only marks the factory with what the catalogue shows
(family, value range under the default parameters, default weight; the docstring is the
factory's own); importing a module changes no global table.

:data:`REGISTRY` finds the declared factories on demand: those of the library's reward
families (the modules of this package) first, then those of the modules a higher floor hands it
(:meth:`_Registry.add_finder`): the task registry (:mod:`unsloth_grpo.tasks`) hands it each task
module it loads, so a task keeps its rewards beside its grader while the rewards package names no
task module in an import. A lookup of a task's reward goes through the task registry: it is connected
as soon as ``unsloth_grpo.tasks`` is imported, and a lookup of a name of :data:`TASK_REWARDS` (or of
every name, for the catalogue) loads it when nothing has yet, so a task's reward is found by name
whatever was imported first (``get_reward("countdown_equation")`` in a fresh interpreter).
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Callable, Sequence

from ..grading import completion_text

RewardFunc = Callable[..., list]

#: The package whose modules declare the library's rewards (each module read once).
LIBRARY_PACKAGE = __package__
#: Modules of the rewards package that hold machinery, not reward families.
_NOT_FAMILIES = {"_registry", "calling", "wrapper", "lab", "__main__"}
_MARK = "__reward_info__"


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
    """Declare a reward factory as ``name``. ``low``/``high``: range with default params.

    The factory is returned unchanged, marked with its :class:`RewardInfo`; :data:`REGISTRY`
    finds it when the name is looked up.
    """

    def decorate(factory: Callable[..., RewardFunc]) -> Callable[..., RewardFunc]:
        setattr(factory, _MARK, RewardInfo(name, family, factory, low, high, weight))
        return factory

    return decorate


def declared_rewards(module: Any) -> dict[str, RewardInfo]:
    """The rewards a module declares (its ``@register`` factories), by name."""
    out: dict[str, RewardInfo] = {}
    for value in vars(module).values():
        info = getattr(value, _MARK, None)
        if isinstance(info, RewardInfo) and info.factory is value:
            if info.name in out:
                raise ValueError(f"reward {info.name!r} is declared twice in {module.__name__}")
            out[info.name] = info
    return out


def _library_modules() -> Iterator[Any]:
    pkg = importlib.import_module(LIBRARY_PACKAGE)
    for m in pkgutil.iter_modules(pkg.__path__):
        if m.name not in _NOT_FAMILIES and not m.name.startswith("__"):
            yield importlib.import_module(f"{LIBRARY_PACKAGE}.{m.name}")


#: The rewards the tasks declare, each by the task whose module declares it: on a lookup of one of
#: these names the registry loads the task registry (:data:`TASK_REGISTRY`) if nothing has yet, which
#: hands in the module. Names only, so that the rewards package imports nothing above it when it is
#: imported; tests/test_architecture.py holds this table equal to what the task modules declare.
TASK_REWARDS = {
    "arith_correct": "arith",
    "code_block_format": "code", "code_compiles": "code", "tests_passed": "code",
    "countdown_equation": "countdown",
    "qa_correctness": "custom",
    "reasoning_gym_correct": "reasoning_gym",
    "tool_call_budget": "gsm8k_tools", "tool_call_format": "gsm8k_tools",
    "guess_solved": "guess_number",
    "json_extract_keys": "json_extract", "json_extract_valid": "json_extract", "json_extract_values": "json_extract",
}
#: The higher floor that declares :data:`TASK_REWARDS` and hands its modules in (a finder) when imported.
TASK_REGISTRY = "unsloth_grpo.tasks"

#: ``finder(name)``: the modules that may declare reward ``name`` (every one for None), loaded by
#: the floor that owns them; a generator, so that a lookup stops loading at the module that declares it.
Finder = Callable[[Any], Iterator[Any]]


class _Registry(Mapping):
    """Name -> :class:`RewardInfo`, built on demand from the modules that declare rewards.

    The library's families are read first; a name they do not declare is asked of the finders a
    higher floor added (:meth:`add_finder`), in order, until a module declares it. What was found
    is kept (a cache of the declarations, which are the only source: clearing it and looking again
    gives the same answer).
    """

    def __init__(self) -> None:
        self._found: dict[str, RewardInfo] = {}
        self._read: set[str] = set()
        self._finders: list[Finder] = []

    def add_finder(self, finder: Finder) -> None:
        """Let ``finder`` hand in more modules that declare rewards (added once)."""
        if finder not in self._finders:
            self._finders.append(finder)

    def declare(self, module: Any) -> None:
        """Read the rewards ``module`` declares (once per module)."""
        if module.__name__ in self._read:
            return
        self._read.add(module.__name__)
        for name, info in declared_rewards(module).items():
            known = self._found.get(name)
            if known is not None and known.factory is not info.factory:
                raise ValueError(f"reward {name!r} is declared twice: in {known.factory.__module__} "
                                 f"and in {module.__name__}; rename one of them")
            self._found[name] = info

    def _modules(self, name: str | None) -> Iterator[Any]:
        yield from _library_modules()
        if not self._finders and (name is None or name in TASK_REWARDS):
            importlib.import_module(TASK_REGISTRY)  # a task's reward: its registry hands in its module
        for finder in list(self._finders):
            yield from finder(name)

    def _find(self, name: str) -> RewardInfo | None:
        if name in self._found:
            return self._found[name]
        for module in self._modules(name):
            self.declare(module)
            if name in self._found:
                return self._found[name]
        return None

    def _everything(self) -> dict[str, RewardInfo]:
        for module in self._modules(None):
            self.declare(module)
        return self._found

    def __getitem__(self, name: str) -> RewardInfo:
        info = self._find(name) if isinstance(name, str) else None
        if info is None:
            raise KeyError(name)
        return info

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and self._find(name) is not None

    def __iter__(self) -> Iterator[str]:
        return iter(sorted(self._everything()))

    def __len__(self) -> int:
        return len(self._everything())


#: Every declared reward by name: the library's families and those of the modules the finders hand in
#: (the task modules: :data:`TASK_REWARDS`), found on demand.
REGISTRY = _Registry()


# ---------------------------------------------------------------- parameter types


def _split_union(annotation: str) -> list[str]:
    """``"str | Sequence[str] | None"`` -> ``["str", "Sequence[str]", "None"]`` (brackets respected)."""
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(annotation):
        depth += ch == "["
        depth -= ch == "]"
        if ch == "|" and depth == 0:
            parts.append(annotation[start:i].strip())
            start = i + 1
    parts.append(annotation[start:].strip())
    return parts


def _fits(value: Any, annotation: str) -> bool:
    """Whether ``value`` (as YAML gives it) fits the annotation text of a reward parameter.

    Only the forms reward factories use are judged (float, int, bool, str, None, Sequence[...],
    Mapping and their unions); anything else is accepted and left to the factory. A sequence is
    judged as a list only: factories take more in their entries than the annotation says (a tag
    or an (open, close) pair).
    """
    for option in _split_union(annotation):
        if option.startswith("Sequence[") and option.endswith("]"):
            if isinstance(value, (list, tuple)):
                return True
        elif option in _TYPE_TESTS:
            if _TYPE_TESTS[option](value):
                return True
        else:
            return True  # a form this check does not know
    return False


_TYPE_TESTS: dict[str, Callable[[Any], bool]] = {
    "float": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
    "int": lambda v: (isinstance(v, int) and not isinstance(v, bool)) or (isinstance(v, float) and v.is_integer()),
    "bool": lambda v: isinstance(v, bool),
    "str": lambda v: isinstance(v, str),
    "None": lambda v: v is None,
    "Mapping": lambda v: isinstance(v, Mapping),
    "Sequence": lambda v: isinstance(v, (list, tuple)),
}
_WORDS = {"float": "a number", "int": "a whole number", "bool": "true or false", "str": "a string",
          "None": "null", "Mapping": "a mapping"}


def _wanted(annotation: str) -> str:
    words = [(_WORDS.get(o) or ("a list" if o.startswith("Sequence") else o)) for o in _split_union(annotation)]
    return " or ".join(dict.fromkeys(words))


def _annotation_text(annotation: Any) -> str | None:
    if isinstance(annotation, str):
        return annotation
    if annotation in (float, int, bool, str):
        return annotation.__name__
    return None  # a typing construct: left to the function itself


def parameter_problems(factory: Callable, params: Mapping[str, Any]) -> list[str]:
    """``params`` whose type does not fit the annotation of ``factory``'s parameter of that name,
    each as ``"parameter per_tag='a lot' is a str; it takes a number (default 0.125)"``."""
    try:
        signature = inspect.signature(factory)
    except (TypeError, ValueError):
        return []
    out = []
    for key, value in params.items():
        p = signature.parameters.get(key)
        annotation = None if p is None or p.annotation is p.empty else _annotation_text(p.annotation)
        if annotation is None or _fits(value, annotation):
            continue
        default = "" if p.default is p.empty else f" (default {p.default!r})"
        kind = type(value).__name__
        kind = "null" if value is None else ("an " if kind[0] in "aeiou" else "a ") + kind
        out.append(f"parameter {key}={value!r} is {kind}; it takes {_wanted(annotation)}{default}")
    return out


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
