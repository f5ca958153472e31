"""The installed TRL's config fields as a table: each field's name, the kinds of value its type takes,
its default and TRL's help text, for ``GRPOConfig`` and ``SFTConfig``.

Importing TRL's config classes imports transformers and torch: seconds, and on a GPU it must come
after Unsloth. Checking a config's names and types needs only the table, so the table is read from
TRL's own dataclasses once per installed version, in a child process, and kept in the cache folder
(``$UNSLOTH_GRPO_HOME``); a process that has imported TRL already reads the live classes. Either
way every entry comes from ``dataclasses.fields`` of the installed TRL, never from a list of ours::

    table = field_table("GRPOConfig")
    table["learning_rate"].kinds     # ('float',)
    table["report_to"].kinds         # ('none', 'str', 'list')

``python -m unsloth_grpo.training.trl_schema`` prints the table as JSON (what the child process runs).
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import hashlib
import json
import os
import subprocess
import sys
import types
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

KINDS = ("GRPOConfig", "SFTConfig")
#: The kinds of value a field's type takes, in the order a value is tried against them.
_PLAIN = (("bool", bool), ("int", int), ("float", float), ("str", str), ("list", list), ("dict", dict))


@dataclass(frozen=True)
class TrlField:
    name: str
    kinds: tuple[str, ...]  # of "none", "bool", "int", "float", "str", "list", "dict", "any"
    default: Any  # the default as plain data, or its repr when it has no plain form
    help: str


def field_table(kind: str = "GRPOConfig") -> dict[str, TrlField]:
    """The fields of the installed TRL's ``kind`` that a config may set, by name."""
    return _tables()[kind]


@functools.cache
def _tables() -> dict[str, dict[str, TrlField]]:
    if "trl.trainer.grpo_config" in sys.modules:  # TRL is imported already: read it directly
        data = _read_trl()
        if not _cache_path().is_file():
            _write(_cache_path(), json.dumps(data))
    else:
        data = _cached()
    return {kind: {name: TrlField(name, tuple(f["kinds"]), f["default"], f["help"]) for name, f in rows.items()}
            for kind, rows in data.items()}


def _read_trl() -> dict[str, dict[str, dict]]:
    """The table from the installed TRL's own dataclasses (imports them)."""
    import trl

    out = {}
    for kind in KINDS:
        cls = getattr(trl, kind)
        hints = typing.get_type_hints(cls)
        out[kind] = {f.name: {"kinds": list(kinds_of(hints[f.name])), "default": _plain_default(f),
                              "help": " ".join(str(f.metadata.get("help", "")).split())}
                     for f in dataclasses.fields(cls) if f.init and not f.name.startswith("_")}
    return out


def kinds_of(tp: Any) -> tuple[str, ...]:
    """The kinds of plain value an annotation takes: ``int | None`` -> ('int', 'none')."""
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        return tuple(dict.fromkeys(k for arg in typing.get_args(tp) for k in kinds_of(arg)))
    if tp is type(None):
        return ("none",)
    if origin is typing.Literal:
        return tuple(dict.fromkeys(k for v in typing.get_args(tp) for k in kinds_of(type(v))))
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return ("str",)  # SchedulerType, OptimizerNames...: TRL takes the name and checks it
    base = origin or tp
    for name, plain in _PLAIN:
        if base is plain:
            return (name,)
    if base in (tuple, set, frozenset):
        return ("list",)
    return ("any",)


def _plain_default(f: dataclasses.Field) -> Any:
    value = f.default if f.default is not dataclasses.MISSING else (
        f.default_factory() if f.default_factory is not dataclasses.MISSING else None)
    if isinstance(value, enum.Enum):
        return value.value
    try:
        json.dumps(value)
    except (TypeError, ValueError):
        return repr(value)
    return value


def _cached() -> dict[str, dict[str, dict]]:
    """The table from the cache folder, read from TRL in a child process the first time."""
    path = _cache_path()
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        pass
    print(f"note: reading the installed TRL's config fields, once per TRL version (kept in {path.parent})",
          file=sys.stderr)
    proc = subprocess.run([sys.executable, "-m", __name__], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [_package_root(),
                                                                                          os.environ.get("PYTHONPATH")]))})
    if proc.returncode != 0:
        return _read_trl()  # the same import here raises TRL's own error, or works after all
    _write(path, proc.stdout)
    return json.loads(proc.stdout)


def _write(path: Path, text: str) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(text)
        os.replace(tmp, path)  # whole or absent, also with two processes at once
    except OSError:
        pass  # a read-only cache folder: read TRL again next time


def _package_root() -> str:
    return str(Path(__file__).resolve().parents[2])


def _cache_path() -> Path:
    """One file per installed TRL and transformers (version, and their config sources' size and time)."""
    from importlib.metadata import distribution

    from unsloth_grpo.models.ref import cache_dir

    trl, transformers = distribution("trl"), distribution("transformers")  # package metadata: nothing imported
    key = [trl.version, transformers.version]
    for dist, source in ((trl, "trl/trainer/grpo_config.py"), (trl, "trl/trainer/sft_config.py"),
                         (transformers, "transformers/training_args.py")):
        try:
            stat = Path(dist.locate_file(source)).stat()
            key.append(f"{stat.st_size}:{stat.st_mtime_ns}")
        except OSError:
            key.append("-")
    digest = hashlib.sha1(" ".join(key).encode()).hexdigest()[:12]
    return cache_dir() / "trl_fields" / f"trl-{key[0]}-transformers-{key[1]}-{digest}.json"


if __name__ == "__main__":
    json.dump(_read_trl(), sys.stdout)
