"""What a run leaves on disk, read back: its checkpoints and its reproducibility bundle.

Training writes run directories (:mod:`unsloth_grpo.training.checkpoint`, the health monitor);
resuming, export, inference, evaluation and the plots read them, through this module, which imports
nothing but the config.

The reproducibility bundle is what it takes to rerun a training run or trace an exported model.

Every run directory and every export carries ``reproducibility.json`` with the resolved config,
the seed, package versions, Python and platform, the git commit of the project the command ran
from (when it is a git checkout, with a flag for uncommitted changes), the rewards with their
weights and parameters, the stages, and the dataset's source and a fingerprint of its rows.

Example::

    from unsloth_grpo.runs import collect_bundle, write_bundle
    write_bundle("outputs/run", collect_bundle(cfg, dataset=ds))
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import re
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

BUNDLE_FILE = "reproducibility.json"
#: Rows hashed for the fingerprint at most; beyond that the count and the first rows stand for it.
FINGERPRINT_MAX_ROWS = 200_000


def git_info(cwd: str | os.PathLike | None = None) -> dict | None:
    """Commit, branch and dirty flag of the git checkout containing ``cwd``; None when there is none."""
    cwd = str(cwd or os.getcwd())

    def git(*args: str) -> str | None:
        try:
            out = subprocess.run(["git", "-C", cwd, *args], capture_output=True, text=True, timeout=10)
        except (OSError, subprocess.SubprocessError):
            return None
        return out.stdout.strip() if out.returncode == 0 else None

    commit = git("rev-parse", "HEAD")
    if not commit:
        return None
    status = git("status", "--porcelain", "--untracked-files=no")
    return {
        "commit": commit,
        "branch": git("rev-parse", "--abbrev-ref", "HEAD"),
        "root": git("rev-parse", "--show-toplevel"),
        "dirty": bool(status) if status is not None else None,
    }


def package_versions() -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    out = {}
    for name in ("unsloth-grpo", "torch", "transformers", "trl", "peft", "datasets", "accelerate",
                 "tokenizers", "unsloth", "unsloth_zoo", "bitsandbytes", "vllm", "safetensors"):
        try:
            out[name] = version(name)
        except PackageNotFoundError:
            pass
    return out


def dataset_fingerprint(dataset: Any) -> dict | None:
    """``{"rows", "sha256", "columns"}`` of a ``datasets.Dataset`` (or list of dicts); None if absent.

    The hash covers every row's JSON (keys sorted), so the same rows in the same order give the same
    fingerprint on any machine, unlike ``datasets``' own cache fingerprint.
    """
    if dataset is None:
        return None
    h = hashlib.sha256()
    n = len(dataset)
    for i, row in enumerate(dataset):
        if i >= FINGERPRINT_MAX_ROWS:
            break
        h.update(json.dumps(row, sort_keys=True, default=str).encode())
        h.update(b"\n")
    columns = list(getattr(dataset, "column_names", None) or (sorted(dataset[0]) if n else []))
    out = {"rows": n, "sha256": h.hexdigest(), "columns": columns}
    if n > FINGERPRINT_MAX_ROWS:
        out["hashed_rows"] = FINGERPRINT_MAX_ROWS
    return out


def collect_bundle(cfg: Any = None, *, dataset: Any = None, backend: dict | None = None, cwd: str | None = None,
                   extra: dict | None = None) -> dict:
    """Everything needed to rerun ``cfg``: config, seed, versions, git commit, rewards, data."""
    bundle: dict[str, Any] = {
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "command": " ".join([Path(sys.argv[0]).name, *sys.argv[1:]]) if sys.argv and sys.argv[0] else None,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "packages": package_versions(),
        "git": git_info(cwd),
    }
    if cfg is not None:
        from unsloth_grpo.config import config_to_dict

        d = config_to_dict(cfg)
        data = d.get("data", {})
        bundle.update({
            "seed": d.get("seed"),
            "model": d.get("model", {}).get("name"),
            "rewards": [{"name": r["name"], "weight": r["weight"], "params": r.get("params", {})}
                        for r in d.get("rewards", [])],
            "stages": d.get("stages") or [],
            "dataset": {k: data.get(k) for k in ("source", "subset", "split", "limit", "num_synthetic",
                                                  "shuffle_seed") if k in data},
            "config": d,
        })
    if dataset is not None:
        bundle.setdefault("dataset", {})["fingerprint"] = dataset_fingerprint(dataset)
    if backend is not None:
        bundle["backend"] = backend
    if extra:
        bundle.update(extra)
    return bundle


def write_bundle(directory: str | os.PathLike, bundle: dict) -> Path:
    """Write ``bundle`` as ``directory/reproducibility.json`` (atomically) and return the path."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / BUNDLE_FILE
    tmp = directory / (BUNDLE_FILE + ".tmp")
    tmp.write_text(json.dumps(bundle, indent=2, default=str))
    os.replace(tmp, path)
    return path


def read_bundle(directory: str | os.PathLike) -> dict | None:
    """The bundle of a run, checkpoint or export directory (or of the run above a checkpoint)."""
    directory = Path(directory)
    candidates = [directory]
    if directory.parent.name == CHECKPOINTS_DIR:  # RUN[/stages/NN-x]/checkpoints/checkpoint-N
        candidates += [directory.parent.parent, run_dir_of(directory)]
    for d in candidates:
        p = d / BUNDLE_FILE
        if p.is_file():
            try:
                return json.loads(p.read_text())
            except ValueError:
                return None
    return None


# ---------------------------------------------------------------- the task a run trained


def recorded_task(run_dir: str | os.PathLike) -> str | None:
    """The task a run was trained on, as its ``config.yaml`` records it (None when it records none)."""
    import yaml

    try:
        recorded = yaml.safe_load((Path(run_dir) / "config.yaml").read_text())
    except (OSError, yaml.YAMLError):
        return None
    task = recorded.get("task") if isinstance(recorded, dict) else None
    return str(task) if task else None


def other_task(run_dir: str | os.PathLike, task: str, *, recipe: str | None = None) -> str | None:
    """Why ``run_dir`` cannot be continued as ``task`` (or by the ``recipe`` command), or None when it can.

    A checkpoint of one task continued on another trains its adapter on the other task's prompts and
    rewards: nothing fails, the run is just no longer the run it was.
    """
    recorded = recorded_task(run_dir)
    if recorded is None or (recorded == task and (recipe is None or recipe == recorded)):
        return None
    asked = task if task != recorded else recipe
    return (f"--resume: {run_dir} holds a run of the {recorded} task (its config.yaml says task: {recorded}), and "
            f"this command would continue it as {asked}: its adapter would go on training on another task's prompts "
            f"and rewards. Nothing was changed. Resume it as it was made: unsloth-grpo train --resume {run_dir} "
            f"(or python -m unsloth_grpo.recipes.{recorded} --resume {run_dir}); to train {asked}, start a new run "
            "with another --output-dir")


# ---------------------------------------------------------------- the health warnings

#: Where the health monitor (:mod:`unsloth_grpo.training.monitor`) records its warnings, one JSON line each.
HEALTH_FILE = "health.jsonl"


def read_health(output_dir: str | Path) -> list[dict[str, Any]]:
    """The warnings recorded in ``OUTPUT_DIR/health.jsonl`` (empty list when there are none)."""
    path = Path(output_dir) / HEALTH_FILE
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


# ---------------------------------------------------------------- where a run keeps its checkpoints
#
# Layout of a run directory (training writes it: :mod:`unsloth_grpo.training.checkpoint`)::
#
#     RUN/checkpoints/checkpoint-20/                      # single-stage run
#     RUN/stages/02-format/checkpoints/checkpoint-10/     # multi-stage run
#
# A checkpoint is complete when its marker lists every file with its size and checksum.

CHECKPOINTS_DIR = "checkpoints"
STAGES_DIR = "stages"
PREFIX = "checkpoint-"
MARKER = "checkpoint_complete.json"
#: The name of a checkpoint directory: ``checkpoint-<step>``.
CHECKPOINT_NAME = re.compile(rf"^{PREFIX}(\d+)$")
_STAGE_NAME = re.compile(r"^(\d+)-")


@dataclass(frozen=True)
class CheckpointInfo:
    path: Path
    step: int
    stage: int  # 0 for a single-stage run; 1, 2, ... for the stages of a multi-stage run
    stage_name: str | None
    created: float

    def describe(self) -> str:
        where = f"stage {self.stage} ({self.stage_name}) " if self.stage_name else ""
        return f"{where}step {self.step}: {self.path}"


def sha256_of(path: Path) -> str:
    import hashlib

    h = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def checkpoints_root(run_dir: str | os.PathLike) -> Path:
    return Path(run_dir) / CHECKPOINTS_DIR


def read_marker(directory: str | os.PathLike) -> dict | None:
    try:
        return json.loads((Path(directory) / MARKER).read_text())
    except (OSError, ValueError):
        return None


def check_checkpoint(directory: str | os.PathLike, *, contents: bool = False) -> tuple[bool, str]:
    """(True, "") for a complete checkpoint; (False, why) otherwise.

    Checks the marker and every file's size; with ``contents=True`` also every file's SHA-256
    (reads the whole checkpoint: done once, for the checkpoint a run resumes from).
    """
    directory = Path(directory)
    if not directory.is_dir():
        return False, f"'{directory}' is not a directory"
    info = read_marker(directory)
    if info is None:
        return False, f"'{directory}' has no readable {MARKER}: it was being written when the run stopped"
    files = info.get("files")
    if not isinstance(files, dict) or not files:
        return False, f"'{directory}/{MARKER}' lists no files"
    for rel, size in files.items():
        p = directory / rel
        if not p.is_file():
            return False, f"'{directory}' lacks {rel}, which its marker lists"
        if p.stat().st_size != size:
            return False, f"'{directory}/{rel}' is {p.stat().st_size} bytes, its marker says {size}: truncated"
    if contents:
        for rel, digest in (info.get("sha256") or {}).items():
            try:
                actual = sha256_of(directory / rel)
            except OSError as exc:
                return False, f"'{directory}/{rel}' cannot be read ({exc})"
            if actual != digest:
                return False, f"'{directory}/{rel}' does not match the checksum its marker recorded: corrupted"
    return True, ""


def checkpoint_info(directory: Path) -> CheckpointInfo | None:
    ok, _ = check_checkpoint(directory)
    if not ok:
        return None
    m = read_marker(directory) or {}
    return CheckpointInfo(directory, int(m.get("step", 0)), int(m.get("stage", 0)), m.get("stage_name"),
                          float(m.get("created", 0.0)))


def list_checkpoints(run_dir: str | os.PathLike) -> list[CheckpointInfo]:
    """Complete checkpoints of a run, oldest first: by stage, then step. Broken ones are skipped."""
    run_dir = Path(run_dir)
    roots = [checkpoints_root(run_dir)]
    stages = run_dir / STAGES_DIR
    if stages.is_dir():
        roots += [checkpoints_root(d) for d in sorted(stages.iterdir()) if d.is_dir()]
    found = []
    for root in roots:
        if not root.is_dir():
            continue
        for d in root.iterdir():
            if d.is_dir() and CHECKPOINT_NAME.match(d.name):
                info = checkpoint_info(d)
                if info is not None:
                    found.append(info)
    found.sort(key=lambda c: (c.stage, c.step, c.created))
    return found


def latest_checkpoint(run_dir: str | os.PathLike) -> Path | None:
    """The newest complete checkpoint of ``run_dir`` (last stage, highest step), or None."""
    found = list_checkpoints(run_dir)
    return found[-1].path if found else None


def is_checkpoint_dir(path: str | os.PathLike) -> bool:
    p = Path(path)
    return bool(CHECKPOINT_NAME.match(p.name)) or (p / MARKER).exists() or (p / "trainer_state.json").exists()


def _run_of(checkpoint: Path) -> Path:
    """RUN for RUN/checkpoints/checkpoint-N and for RUN/stages/NN-x/checkpoints/checkpoint-N."""
    parent = checkpoint.parent.parent if checkpoint.parent.name == CHECKPOINTS_DIR else checkpoint.parent
    if parent.parent.name == STAGES_DIR:
        return parent.parent.parent
    return parent


def run_dir_of(checkpoint: str | os.PathLike) -> Path:
    return _run_of(Path(checkpoint))


def run_config_path(model: str | os.PathLike) -> Path | None:
    """The ``config.yaml`` a model path was trained with: a run directory's own, a checkpoint's run's,
    a stage directory's; None for anything else (a hub id, a built-in model, a plain adapter)."""
    p = Path(model)
    if not p.is_dir():
        return None
    for candidate in (p, run_dir_of(p) if is_checkpoint_dir(p) else None):
        if candidate is not None and (candidate / "config.yaml").is_file():
            return candidate / "config.yaml"
    return None


def stage_index_of(dirname: str) -> int | None:
    m = _STAGE_NAME.match(dirname)
    return int(m.group(1)) if m else None


# ---------------------------------------------------------------- what a run is, and what a command may write
#
# One rule for every command that writes (train, export, eval, compare, plot, rewards check): it
# writes new files and folders, even inside a run (``eval --output RUN/eval``) but not among a run's own
# files; it replaces nothing it did not make in this invocation unless the user named that exact path
# with ``--force``; and it never replaces a run, anything inside one, or a folder that holds one,
# ``--force`` or not.

#: The resolved config training writes first into a run (and into each stage of one).
RUN_CONFIG = "config.yaml"
#: Written into a run directory when its training finished (the final adapter is in place).
RUN_COMPLETE = "run_complete.json"
#: The lock a training holds on its run directory while it writes there.
LOCK_FILE = ".run.lock"
#: What training writes into a run and nothing else writes: a folder holding one of them is a run
#: (the lock and config.yaml come first, so a run that is starting, or stopped while its model loaded, is one too).
_RUN_MARKS = (LOCK_FILE, RUN_CONFIG, "metrics.jsonl", RUN_COMPLETE, CHECKPOINTS_DIR)
#: Folders looked through for a run inside a target at most: past that, the target is refused as too large.
_MAX_FOLDERS_SEARCHED = 20_000


def is_run_dir(path: str | os.PathLike) -> bool:
    """Whether ``path`` is a run directory (a stage directory of one included): it holds what training
    writes there: its lock, ``config.yaml``, ``metrics.jsonl``, ``run_complete.json`` or ``checkpoints/``."""
    p = Path(path)
    return p.is_dir() and any((p / mark).exists() for mark in _RUN_MARKS)


def _holds_training_state(path: Path) -> bool:
    """A run, or a checkpoint (a training's saved state, in its run or copied out of it)."""
    return is_run_dir(path) or (path / MARKER).is_file() or (path / "trainer_state.json").is_file()


def run_holding(path: str | os.PathLike) -> Path | None:
    """The run (or checkpoint) that ``path`` is or lies inside, or None."""
    p = Path(path).expanduser().resolve()
    return next((a for a in (p, *p.parents) if a.is_dir() and _holds_training_state(a)), None)


def runs_inside(folder: str | os.PathLike, *, most: int = 3) -> tuple[list[Path], bool]:
    """Up to ``most`` runs (or checkpoints) below ``folder``, and whether the search saw every folder
    (False past :data:`_MAX_FOLDERS_SEARCHED`)."""
    found: list[Path] = []
    seen = 0
    for dirpath, dirnames, _files in os.walk(folder):
        seen += 1
        if seen > _MAX_FOLDERS_SEARCHED:
            return found, False
        here = Path(dirpath)
        if here != Path(folder) and _holds_training_state(here):
            found.append(here)
            dirnames[:] = []  # what lies inside it is its own
            if len(found) >= most:
                break
        dirnames.sort()
    return found, True


def not_a_run(path: str | os.PathLike, flag: str = "--resume") -> str | None:
    """Why ``path`` cannot be continued as a run, or None when it is a run or one of its checkpoints."""
    p = Path(path)
    if not p.is_dir() or is_run_dir(p) or is_checkpoint_dir(p) or list_checkpoints(p):
        return None  # the resume says what a run holds and what it can continue from
    return (f"{flag} {p}: {p} is not a run: a run directory holds the {RUN_CONFIG} its training wrote, with "
            f"metrics.jsonl, run_info.json and its checkpoints under {CHECKPOINTS_DIR}/checkpoint-N. Pass a run "
            "directory (the --output-dir of a training) or one of its checkpoints; to start a new run, leave "
            "--resume out")


def unfinished_run(path: str | os.PathLike) -> str | None:
    """What a run directory without its final adapter holds instead (training was stopped or killed),
    said with the checkpoint to use; None when ``path`` is no such run."""
    p = Path(path)
    if not p.is_dir() or (p / "adapter_config.json").is_file() or (p / "config.json").is_file():
        return None
    latest = latest_checkpoint(p)
    if latest is not None:
        return (f"{p} is a run with no final adapter (its training was stopped or killed before the end); use "
                f"its latest checkpoint, {latest}, instead, or finish the run first: unsloth-grpo train --resume {p}")
    if is_run_dir(p):
        return (f"{p} is a run that stopped before it saved a checkpoint or its adapter, so it holds no trained "
                f"model to load; train it again (without --resume) or choose another run")
    return None


def output_problem(target: str | os.PathLike, flag: str, *, writes: list[str] | tuple[str, ...] | None = None,
                   file: bool = False, force: bool | None = None, run_ok: bool = False) -> str | None:
    """Why a command may not write ``target`` (given with ``flag``), or None when it may: the one check
    every command that writes makes before it loads anything.

    ``writes`` names what the command writes inside the folder ``target`` (relative paths); None when
    it fills or replaces the folder as a whole (an export, a training run). ``file``: ``target`` is one
    file. ``force``: the command's ``--force`` (None when it has none). ``run_ok``: ``target`` may be a
    run itself (training: the resume rules decide what becomes of it).

    A file where a folder is meant (or the other way) is refused; so is replacing anything that exists
    without ``--force``; and replacing a run, anything inside one, or a folder that holds one is
    refused even with ``--force``, as is writing among a run's own files (a run or a checkpoint as the
    folder). New files and folders are written anywhere else, inside a run included.
    """
    p = Path(target).expanduser()
    kind = "file" if file else "folder"
    existing = next((a for a in (p, *p.parents) if a.exists()), None)
    if existing is not None and existing != p and not existing.is_dir():
        return f"{flag} {target}: {existing} is a file, so no {kind} can be made under it; choose another path"
    if p.exists() and p.is_dir() == file:
        return (f"{flag} {target} is a {'folder' if file else 'file'}, not a {kind}; nothing was written. Choose "
                + (f"a file name (e.g. {p / 'out.jsonl'})" if file else f"a new folder (e.g. {_free_beside(p, file)})"))
    if run_ok and is_run_dir(p) and run_holding(p.parent) is None:
        return None
    if p.is_dir() and _holds_training_state(p):  # its files would lie among the run's, under the names it uses
        what = "a run" if is_run_dir(p) else "a checkpoint"
        return (f"{flag} {target} is {what}; a command writes beside a run's files, never among them"
                f"{', even with --force' if force is not None else ''}. Nothing was written. Choose a folder of "
                f"its own (e.g. {_free_beside(p / 'results', False)})")
    if file or writes is None:
        replaced = [p] if p.exists() and (file or any(p.iterdir())) else []
    else:
        replaced = [p / w for w in writes if (p / w).exists()]
    if not replaced:
        return None
    fix = f"Choose a new {kind} (e.g. {_free_beside(p, file)})"
    protected = _run_in_the_way(replaced)
    if protected is not None:
        return (f"{flag} {target}: {protected}; a command never replaces a run's files"
                f"{', even with --force' if force is not None else ''}. Nothing was written. {fix}")
    if force:
        return None
    if file:
        what = "exists"
    elif writes is None:
        what = "exists and is not empty" + (" (and is not a run to continue)" if run_ok else "")
    else:
        what = f"holds {', '.join(r.relative_to(p).as_posix() for r in replaced)} already"
    if force is None:
        return f"{flag} {target} {what}; nothing was written. Choose a new or empty {kind} (e.g. {_free_beside(p, file)})"
    return (f"{flag} {target} {what}; nothing was written. {fix}, or pass --force to replace "
            f"{'them' if len(replaced) > 1 else 'it'}")


def _run_in_the_way(replaced: list[Path]) -> str | None:
    """How replacing the paths ``replaced`` would touch a run, in words, or None."""
    for r in replaced:
        holder = run_holding(r)
        if holder is not None:
            what = "a run" if is_run_dir(holder) else "a checkpoint"
            if holder == r.resolve():
                return f"{r} is {what}"
            return f"{r} lies inside {what}, {_shown(holder)}"
        if r.is_dir():
            inside, complete = runs_inside(r)
            if inside:
                return f"{r} holds {'runs' if len(inside) > 1 else 'a run'}: {', '.join(map(_shown, inside))}"
            if not complete:
                return (f"{r} holds more than {_MAX_FOLDERS_SEARCHED} folders, too many to make sure that no run "
                        "lies among them")
    return None


def _shown(path: Path) -> str:
    """``path`` as the user would type it: relative to the working directory when it lies below it."""
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


def _free_beside(path: Path, file: bool) -> Path:
    """``path`` when it is free, else a name beside it that is: ``NAME-2``, ``NAME-3``, ... (a file keeps
    its suffix)."""
    if not path.exists():
        return path
    n = 2
    while True:
        candidate = path.with_name(f"{path.stem}-{n}{path.suffix}" if file else f"{path.name}-{n}")
        if not candidate.exists():
            return candidate
        n += 1


# ---------------------------------------------------------------- the metrics file


def trim_metrics(path: str | os.PathLike, last_step: int) -> int:
    """Keep only rows with ``step <= last_step`` in a metrics.jsonl (a resumed run re-logs the rest).

    Returns the number of rows kept. A torn last line (the run died mid-write) is dropped.
    """
    path = Path(path)
    if not path.exists():
        return 0
    kept = []
    for line in path.read_text().splitlines():
        try:
            row = json.loads(line)
        except ValueError:
            continue
        if int(row.get("step", 0)) <= last_step:
            kept.append(json.dumps(row))
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text("".join(line + "\n" for line in kept))
    os.replace(tmp, path)
    return len(kept)


def last_logged_step(run_dir: str | os.PathLike) -> int:
    """The highest ``step`` in ``run_dir/metrics.jsonl`` (0 when none is logged; a torn line is skipped)."""
    step = 0
    try:
        for line in (Path(run_dir) / "metrics.jsonl").read_text().splitlines():
            try:
                step = max(step, int(json.loads(line).get("step", 0)))
            except (ValueError, TypeError, AttributeError):
                continue
    except OSError:
        pass
    return step


__all__ = ["last_logged_step", "trim_metrics", "BUNDLE_FILE", "CHECKPOINT_NAME", "CHECKPOINTS_DIR", "HEALTH_FILE", "LOCK_FILE", "MARKER", "RUN_COMPLETE",
           "RUN_CONFIG", "STAGES_DIR", "CheckpointInfo", "check_checkpoint", "checkpoint_info", "checkpoints_root",
           "collect_bundle", "dataset_fingerprint", "git_info", "is_checkpoint_dir", "is_run_dir", "latest_checkpoint",
           "list_checkpoints", "not_a_run", "other_task", "output_problem", "package_versions", "read_bundle",
           "read_health", "read_marker", "recorded_task", "run_config_path", "run_dir_of", "run_holding", "runs_inside",
           "sha256_of", "stage_index_of", "unfinished_run", "write_bundle"]
