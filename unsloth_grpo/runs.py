"""The reproducibility bundle: what it takes to rerun a training run or trace an exported model.

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
import subprocess
import sys
import time
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
    from unsloth_grpo.training.checkpoint import CHECKPOINTS_DIR, run_dir_of

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


__all__ = ["BUNDLE_FILE", "collect_bundle", "dataset_fingerprint", "git_info", "package_versions",
           "read_bundle", "write_bundle"]
