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


__all__ = ["BUNDLE_FILE", "CHECKPOINT_NAME", "CHECKPOINTS_DIR", "HEALTH_FILE", "MARKER", "STAGES_DIR", "CheckpointInfo",
           "check_checkpoint", "checkpoint_info", "checkpoints_root", "collect_bundle", "dataset_fingerprint", "git_info",
           "is_checkpoint_dir", "latest_checkpoint", "list_checkpoints", "other_task", "package_versions", "read_bundle",
           "read_health", "read_marker", "recorded_task", "run_config_path", "run_dir_of", "sha256_of", "stage_index_of",
           "write_bundle"]
