"""Atomic checkpoints, rotation, choosing what to resume, and resume on a real tiny-model run."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from unsloth_grpo import checkpoint as ck


def _staged(run: Path, step: int, payload: bytes = b"x" * 100) -> Path:
    """A directory shaped like what the Trainer writes: run/checkpoint-<step>."""
    d = run / f"checkpoint-{step}"
    d.mkdir(parents=True)
    (d / "adapter_model.safetensors").write_bytes(payload)
    (d / "optimizer.pt").write_bytes(payload * 2)
    (d / "trainer_state.json").write_text(json.dumps({"global_step": step}))
    return d


def test_finalize_moves_into_checkpoints_with_a_marker(tmp_path):
    staged = _staged(tmp_path, 10)
    final = ck.finalize_checkpoint(staged, tmp_path, step=10)
    assert final == tmp_path / "checkpoints" / "checkpoint-10"
    assert not staged.exists()
    marker = ck.read_marker(final)
    assert marker["step"] == 10 and marker["stage"] == 0
    assert marker["files"] == {"adapter_model.safetensors": 100, "optimizer.pt": 200, "trainer_state.json": 19}
    assert ck.check_checkpoint(final) == (True, "")
    assert ck.latest_checkpoint(tmp_path) == final


def test_truncated_or_unmarked_checkpoints_are_never_chosen(tmp_path):
    good = ck.finalize_checkpoint(_staged(tmp_path, 10), tmp_path, step=10)
    newer = ck.finalize_checkpoint(_staged(tmp_path, 20), tmp_path, step=20)
    assert ck.latest_checkpoint(tmp_path) == newer
    # a file cut short after the marker was written (disk full, interrupted copy)
    with (newer / "optimizer.pt").open("r+b") as fh:
        fh.truncate(50)
    ok, why = ck.check_checkpoint(newer)
    assert not ok and "truncated" in why
    assert ck.latest_checkpoint(tmp_path) == good
    # a directory with the right name but no marker: a save that died before finishing
    half = tmp_path / "checkpoints" / "checkpoint-30"
    half.mkdir()
    (half / "adapter_model.safetensors").write_bytes(b"x")
    assert ck.latest_checkpoint(tmp_path) == good
    # a file listed in the marker is missing
    (good / "trainer_state.json").unlink()
    assert ck.latest_checkpoint(tmp_path) is None
    assert [c.step for c in ck.list_checkpoints(tmp_path)] == []


def test_explicit_resume_of_a_broken_checkpoint_names_the_good_one(tmp_path):
    good = ck.finalize_checkpoint(_staged(tmp_path, 10), tmp_path, step=10)
    half = tmp_path / "checkpoints" / "checkpoint-20"
    half.mkdir()
    with pytest.raises(ck.CheckpointError) as err:
        ck.resolve_resume(str(half), tmp_path)
    assert "checkpoint_complete.json" in str(err.value) and str(good) in str(err.value)
    # the staging directory left in the run directory by a crash is refused the same way
    staged = _staged(tmp_path, 30)
    with pytest.raises(ck.CheckpointError):
        ck.resolve_resume(str(staged), tmp_path)


def test_resolve_resume_forms(tmp_path):
    assert ck.resolve_resume(None, tmp_path) is None
    assert ck.resolve_resume(False, tmp_path) is None
    assert ck.resolve_resume(True, tmp_path) is None  # nothing yet: a fresh start, not an error
    with pytest.raises(ck.CheckpointError, match="no complete checkpoint"):
        ck.resolve_resume(str(tmp_path), tmp_path)
    with pytest.raises(ck.CheckpointError, match="no such directory"):
        ck.resolve_resume(str(tmp_path / "nope"), tmp_path)
    ck.finalize_checkpoint(_staged(tmp_path, 5), tmp_path, step=5)
    last = ck.finalize_checkpoint(_staged(tmp_path, 15), tmp_path, step=15)
    assert ck.resolve_resume(True, tmp_path).path == last
    assert ck.resolve_resume("latest", tmp_path).step == 15
    assert ck.resolve_resume(str(tmp_path), "/elsewhere").path == last  # a run directory -> its latest
    assert ck.resolve_resume(str(tmp_path / "checkpoints" / "checkpoint-5"), tmp_path).step == 5


def test_keep_last_rotation_keeps_the_newest_and_removes_debris(tmp_path):
    for step in (10, 20, 30):
        ck.finalize_checkpoint(_staged(tmp_path, step), tmp_path, step=step, keep_last=2)
    names = sorted(p.name for p in (tmp_path / "checkpoints").iterdir())
    assert names == ["checkpoint-20", "checkpoint-30"]
    debris = tmp_path / "checkpoints" / "checkpoint-35"
    debris.mkdir()
    ck.finalize_checkpoint(_staged(tmp_path, 40), tmp_path, step=40, keep_last=2)
    names = sorted(p.name for p in (tmp_path / "checkpoints").iterdir())
    assert names == ["checkpoint-30", "checkpoint-40"]
    with pytest.raises(ValueError, match="keep_last=0"):
        ck.rotate(tmp_path, 0)


def test_saving_the_same_step_again_replaces_it(tmp_path):
    ck.finalize_checkpoint(_staged(tmp_path, 10, b"a" * 10), tmp_path, step=10)
    final = ck.finalize_checkpoint(_staged(tmp_path, 10, b"b" * 30), tmp_path, step=10)
    assert (final / "adapter_model.safetensors").read_bytes() == b"b" * 30
    assert [p.name for p in (tmp_path / "checkpoints").iterdir()] == ["checkpoint-10"]


def test_stage_checkpoints_sort_by_stage_then_step(tmp_path):
    s1 = tmp_path / "stages" / "01-sft"
    s2 = tmp_path / "stages" / "02-format"
    ck.finalize_checkpoint(_staged(s1, 50), s1, step=50, stage=1, stage_name="sft")
    c2 = ck.finalize_checkpoint(_staged(s2, 10), s2, step=10, stage=2, stage_name="format")
    found = ck.list_checkpoints(tmp_path)
    assert [(c.stage, c.step) for c in found] == [(1, 50), (2, 10)]
    assert ck.latest_checkpoint(tmp_path) == c2
    assert ck.run_dir_of(c2) == tmp_path
    assert ck.run_dir_of(tmp_path / "checkpoints" / "checkpoint-3") == tmp_path
    assert ck.stage_index_of("02-format") == 2 and ck.stage_index_of("format") is None


def test_trim_metrics_drops_rows_after_the_checkpoint_and_torn_lines(tmp_path):
    p = tmp_path / "metrics.jsonl"
    rows = [{"step": i, "reward": i / 10} for i in range(1, 6)]
    p.write_text("".join(json.dumps(r) + "\n" for r in rows) + '{"step": 6, "rew')
    assert ck.trim_metrics(p, 3) == 3
    assert [json.loads(x)["step"] for x in p.read_text().splitlines()] == [1, 2, 3]
    assert ck.trim_metrics(tmp_path / "absent.jsonl", 3) == 0


def test_clean_staging_removes_only_staging_dirs(tmp_path):
    _staged(tmp_path, 7)
    kept = ck.finalize_checkpoint(_staged(tmp_path, 8), tmp_path, step=8)
    (tmp_path / "checkpoint-notes").mkdir()
    gone = ck.clean_staging(tmp_path)
    assert [p.name for p in gone] == ["checkpoint-7"]
    assert kept.exists() and (tmp_path / "checkpoint-notes").exists()


def test_resume_hint_names_the_run_config(tmp_path):
    assert ck.resume_hint(tmp_path) == f"unsloth-grpo train --config {tmp_path / 'config.yaml'} --resume"
