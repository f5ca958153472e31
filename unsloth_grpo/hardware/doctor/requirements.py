"""The version ranges: what this package and the libraries it runs on declare, and what is installed.

Read from package metadata (nothing heavy is imported for that): :func:`own_requirements` for this
package (a source checkout falls back to its ``pyproject.toml``), :func:`metadata_requires` for
Unsloth, unsloth_zoo and vLLM. :func:`parse_declared` turns the lines into :class:`Declared`
ranges, and :func:`combine_specifiers` intersects the ranges on one package into the one
``pip install`` (:func:`pip_command`) that satisfies all of them.
"""

from __future__ import annotations

import functools
import importlib.metadata
import logging
import operator
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Mapping

from packaging.requirements import InvalidRequirement, Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import Version

logger = logging.getLogger(__name__)

#: This package's distribution name (what ``pip install -e .`` registers).
PACKAGE = "unsloth-grpo"

#: Packages shown in the report's version table, in this order.
TRACKED = (
    "torch",
    "unsloth",
    "unsloth_zoo",
    "trl",
    "transformers",
    "peft",
    "datasets",
    "accelerate",
    "bitsandbytes",
    "vllm",
)

#: Other distributions whose declared requirements are checked when they are installed. Only
#: their unconditional requirements count (Unsloth's extras pin torch builds for other setups).
THIRD_PARTY_SOURCES = ("unsloth", "unsloth_zoo", "vllm")


@dataclass(frozen=True)
class Declared:
    """One requirement some distribution declares on a package."""

    source: str  # the declaring distribution: "unsloth-grpo", "unsloth", ...
    name: str  # canonical package name
    specifier: str  # "" means any version
    optional: bool = False  # from an extra of ours: checked only when installed
    extras: tuple[str, ...] = ()


#: Order of the parts of a combined range: lower bound, pins, exclusions, upper bound.
_SPEC_ORDER = {">=": 0, ">": 0, "==": 1, "~=": 1, "===": 1, "!=": 2, "<=": 3, "<": 3}


def combine_specifiers(specs: Iterable[str]) -> str | None:
    """Intersect specifier strings into one short, equivalent range; None when nothing fits.

    ``combine_specifiers([">=1.14,<1.15", ">=0.18.2,!=0.19.0,<=1.15.0"]) == ">=1.14,<1.15"``:
    packaging intersects the sets (``&``) and says whether any version is left; a part that the
    others already imply is dropped, so the fix command stays readable.
    """
    combined = functools.reduce(operator.and_, (SpecifierSet(text or "") for text in specs), SpecifierSet())
    if not hasattr(combined, "is_unsatisfiable"):  # packaging < 26.3: the version checks report packaging itself
        return ",".join(sorted({str(sp) for sp in combined}, key=lambda t: (_SPEC_ORDER[_op(t)], t)))
    if combined.is_unsatisfiable():
        return None
    kept = sorted(set(combined), key=lambda sp: (_SPEC_ORDER[sp.operator],
                                                  Version(sp.version.removesuffix(".*")), str(sp)))
    for sp in list(kept):
        rest = SpecifierSet(",".join(str(other) for other in kept if other != sp))
        if len(kept) > 1 and rest.is_subset(SpecifierSet(str(sp))):
            kept.remove(sp)
    return ",".join(str(sp) for sp in kept)


def _op(spec: str) -> str:
    return next(op for op in ("===", "==", "~=", "!=", "<=", ">=", "<", ">") if spec.startswith(op))


def pip_command(name: str, spec: str) -> str:
    """``pip install "trl>=1.14,<1.15"`` (quoted so shells leave ``<`` and ``>`` alone)."""
    return f'pip install "{name}{spec}"'


def parse_declared(source: str, lines: Iterable[str], *, include_extras: bool,
                   marker_env: Mapping[str, str] | None = None) -> list[Declared]:
    """Turn requirement lines (as ``importlib.metadata.requires`` returns them) into Declared.

    Lines whose marker does not hold on this platform (or on ``marker_env``, another machine's
    ``python_version``, ``sys_platform``, ...) are dropped. Lines that belong to an extra are kept
    (as optional) only when ``include_extras``.
    """
    machine = dict(marker_env or {})
    merged: dict[tuple[str, str, bool], list[str]] = {}
    for line in lines:
        try:
            req = Requirement(line)
        except InvalidRequirement:
            logger.warning("ignoring unparsable requirement %r declared by %s", line, source)
            continue
        marker = str(req.marker) if req.marker else ""
        extras = re.findall(r"""extra\s*==\s*['"]([^'"]+)['"]""", marker)
        if not extras:
            if req.marker is not None and not req.marker.evaluate({**machine, "extra": ""}):
                continue
            merged.setdefault((canonicalize_name(req.name), str(req.specifier), False), [])
        elif include_extras:
            applies = [e for e in extras if req.marker.evaluate({**machine, "extra": e})]
            if applies:
                merged.setdefault((canonicalize_name(req.name), str(req.specifier), True), []).extend(applies)
    return [
        Declared(source, name, _tidy(spec), optional=opt, extras=tuple(dict.fromkeys(ex)))
        for (name, spec, opt), ex in merged.items()
    ]


def _tidy(spec: str) -> str:
    """Write a specifier set lower bound first: ``<1.15,>=1.14`` -> ``>=1.14,<1.15``."""
    return combine_specifiers([spec]) or spec


def installed_version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def metadata_requires(dist: str) -> list[str] | None:
    try:
        return list(importlib.metadata.requires(dist) or [])
    except importlib.metadata.PackageNotFoundError:
        return None


def own_requirements() -> tuple[list[str] | None, str | None, str]:
    """This package's declared requirements, ``Requires-Python`` and where they came from.

    Installed metadata first; a source checkout that was never installed falls back to the
    ``pyproject.toml`` next to the package.
    """
    lines = metadata_requires(PACKAGE)
    if lines is not None:
        meta = importlib.metadata.metadata(PACKAGE)
        return lines, meta.get("Requires-Python"), f"installed metadata, version {meta.get('Version')}"
    pyproject = Path(__file__).resolve().parents[3] / "pyproject.toml"
    if not pyproject.is_file():
        return None, None, f"{PACKAGE} is not installed and no pyproject.toml was found"
    lines, python = requirements_from_pyproject(pyproject)
    return lines, python, str(pyproject)


def requirements_from_pyproject(pyproject: Path) -> tuple[list[str], str | None]:
    """``pyproject.toml``'s requirements as metadata lines (extras as ``extra == "..."`` markers) and
    its ``requires-python``: what an install of this checkout would declare."""
    import tomllib

    project = tomllib.loads(Path(pyproject).read_text()).get("project", {})
    lines = list(project.get("dependencies", []))
    for extra, reqs in project.get("optional-dependencies", {}).items():
        for line in reqs:
            base, _, marker = line.partition(";")
            cond = f'({marker.strip()}) and extra == "{extra}"' if marker.strip() else f'extra == "{extra}"'
            lines.append(f"{base.strip()}; {cond}")
    return lines, project.get("requires-python")
