"""Atomic checkpoints, rotation, choosing what to resume, and resume on a real tiny-model run."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from unsloth_grpo import runs
from unsloth_grpo.training import checkpoint as ck


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
    marker = runs.read_marker(final)
    assert marker["step"] == 10 and marker["stage"] == 0
    assert marker["files"] == {"adapter_model.safetensors": 100, "optimizer.pt": 200, "trainer_state.json": 19}
    assert runs.check_checkpoint(final) == (True, "")
    assert runs.latest_checkpoint(tmp_path) == final


def test_truncated_or_unmarked_checkpoints_are_never_chosen(tmp_path):
    good = ck.finalize_checkpoint(_staged(tmp_path, 10), tmp_path, step=10)
    newer = ck.finalize_checkpoint(_staged(tmp_path, 20), tmp_path, step=20)
    assert runs.latest_checkpoint(tmp_path) == newer
    # a file cut short after the marker was written (disk full, interrupted copy)
    with (newer / "optimizer.pt").open("r+b") as fh:
        fh.truncate(50)
    ok, why = runs.check_checkpoint(newer)
    assert not ok and "truncated" in why
    assert runs.latest_checkpoint(tmp_path) == good
    # a directory with the right name but no marker: a save that died before finishing
    half = tmp_path / "checkpoints" / "checkpoint-30"
    half.mkdir()
    (half / "adapter_model.safetensors").write_bytes(b"x")
    assert runs.latest_checkpoint(tmp_path) == good
    # a file listed in the marker is missing
    (good / "trainer_state.json").unlink()
    assert runs.latest_checkpoint(tmp_path) is None
    assert [c.step for c in runs.list_checkpoints(tmp_path)] == []


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


def test_a_new_save_is_never_rotated_away_by_higher_steps_of_another_branch(tmp_path):
    for step in (10, 20, 40):
        ck.finalize_checkpoint(_staged(tmp_path, step), tmp_path, step=step)
    ck.finalize_checkpoint(_staged(tmp_path, 30), tmp_path, step=30, keep_last=1)
    assert (tmp_path / "checkpoints" / "checkpoint-30").is_dir()


def _smoke(out, *extra):
    from unsloth_grpo.recipes.gsm8k import RECIPE

    return RECIPE.resolve(preset="smoke", output_dir=str(out), overrides=["training.max_steps=40", *extra])


def test_resuming_an_earlier_checkpoint_sets_the_later_ones_aside(tmp_path):
    """``--resume run/checkpoints/checkpoint-20`` with 30 and 40 saved: they belong to the abandoned
    branch; they are moved out of checkpoints/ (not deleted), so the new branch's saves are the
    latest and keep_last=1 keeps them."""
    from unsloth_grpo.training.resume import resume_point as _resume_point
    from unsloth_grpo.training.train import _prepare_output_dir

    for step in (10, 20, 30, 40):
        ck.finalize_checkpoint(_staged(tmp_path, step), tmp_path, step=step)
    lines = []
    cfg = _smoke(tmp_path, "run.keep_last=1")
    info = _resume_point(cfg, str(tmp_path / "checkpoints" / "checkpoint-20"), 0)
    _prepare_output_dir(cfg, info, lines.append)
    assert [c.step for c in runs.list_checkpoints(tmp_path)] == [10, 20]
    aside = list((tmp_path / "abandoned").iterdir())
    assert len(aside) == 1 and sorted(p.name for p in aside[0].iterdir()) == ["checkpoint-30", "checkpoint-40"]
    assert runs.check_checkpoint(aside[0] / "checkpoint-40") == (True, "")  # moved whole, not lost
    assert any(str(aside[0]) in line and "abandoned" in line for line in lines)
    # the new branch saves step 30: it is the latest, and keep_last=1 keeps it
    ck.finalize_checkpoint(_staged(tmp_path, 30, b"new" * 10), tmp_path, step=30, keep_last=1)
    assert runs.latest_checkpoint(tmp_path) == tmp_path / "checkpoints" / "checkpoint-30"
    assert ck.resolve_resume(True, tmp_path).step == 30


def test_resume_inside_a_generation_round_is_refused_with_the_boundary_to_use(tmp_path):
    """With steps_per_generation=4 (accumulation 1), completions generated at step 4 serve steps 5-8;
    TRL keeps them only in memory, so only a checkpoint at a round boundary resumes exactly."""
    from unsloth_grpo.training.resume import generation_round_steps, resume_point as _resume_point

    cfg = _smoke(tmp_path, "training.steps_per_generation=4")
    assert generation_round_steps(cfg) == 4
    assert generation_round_steps(_smoke(tmp_path)) == 1
    assert generation_round_steps(_smoke(tmp_path, "training.steps_per_generation=3",
                                         "training.gradient_accumulation_steps=2",
                                         "training.per_device_train_batch_size=4")) == 3
    for step in (4, 6):
        ck.finalize_checkpoint(_staged(tmp_path, step), tmp_path, step=step)
    with pytest.raises(ck.CheckpointError, match="step 6, inside a generation round.*Resume from .*checkpoint-4"):
        _resume_point(cfg, True, 0)
    assert _resume_point(cfg, str(tmp_path / "checkpoints" / "checkpoint-4"), 0).step == 4


def test_a_finished_run_is_never_overwritten(tmp_path):
    """Before any model loads: a new run into a finished run's directory is refused, and so is
    --resume of a run that has no checkpoint left or is already at max_steps."""
    from unsloth_grpo.training.train import train

    run = tmp_path / "run"
    run.mkdir()
    (run / "adapter_model.safetensors").write_bytes(b"final")
    (run / "metrics.jsonl").write_text("".join(json.dumps({"step": s, "reward": 0.1}) + "\n" for s in range(1, 101)))
    with pytest.raises(ck.CheckpointError, match="finished at step 100.*a directory of its own") as refused:
        train(_smoke(run))
    assert "another --output-dir" in refused.value.command_line
    with pytest.raises(ck.CheckpointError, match="finished at step 100 and has no checkpoint"):
        train(_smoke(run), resume=True)
    assert len((run / "metrics.jsonl").read_text().splitlines()) == 100  # untouched
    assert sorted(p.name for p in run.iterdir() if p.name != ck.LOCK_FILE) == ["adapter_model.safetensors", "metrics.jsonl"]

    ck.finalize_checkpoint(_staged(run, 40), run, step=40)
    ck.mark_finished(run, step=40, max_steps=40)
    with pytest.raises(ck.CheckpointError, match="nothing left to train.*training.max_steps=N with N > 40"):
        train(_smoke(run), resume=True)


def test_a_second_run_on_the_same_directory_is_refused_while_one_runs(tmp_path):
    from unsloth_grpo.training.train import train

    run = tmp_path / "run"
    with ck.RunLock(run):
        with pytest.raises(ck.RunLocked, match=f"in use by a training that is still running \\(pid {os.getpid()}"):
            train(_smoke(run, "model.backend=transformers"), log=lambda _m: None)
    with ck.RunLock(run):  # released: the next one gets it
        pass


def test_a_lock_file_taken_away_by_a_refused_run_never_lets_two_runs_hold_the_directory(tmp_path, monkeypatch):
    import fcntl

    run = tmp_path / "run"
    run.mkdir()
    first = ck.RunLock(run).acquire()
    assert first.created
    first.release(remove=True)  # a run that ends, or one refused on its input that made the file: taken away
    assert not (run / ck.LOCK_FILE).exists()
    kept = ck.RunLock(run).acquire()
    kept.release()
    again = ck.RunLock(run).acquire()  # the file was there before: a refused run leaves it (remove=created)
    assert not again.created
    again.release(remove=again.created)
    assert (run / ck.LOCK_FILE).exists()

    # a run that opened the file just before its holder removed it must not hold the removed file
    real_flock, opened = fcntl.flock, []

    def removed_between_open_and_flock(fd, op):
        if not opened:
            opened.append(fd)
            (run / ck.LOCK_FILE).unlink()
        return real_flock(fd, op)

    monkeypatch.setattr(fcntl, "flock", removed_between_open_and_flock)
    lock = ck.RunLock(run).acquire()
    assert opened and os.stat(lock.path).st_ino == os.fstat(lock._fh.fileno()).st_ino
    with pytest.raises(ck.RunLocked):  # so a later run hears it
        ck.RunLock(run).acquire()
    lock.release()


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
    found = runs.list_checkpoints(tmp_path)
    assert [(c.stage, c.step) for c in found] == [(1, 50), (2, 10)]
    assert runs.latest_checkpoint(tmp_path) == c2
    assert runs.run_dir_of(c2) == tmp_path
    assert runs.run_dir_of(tmp_path / "checkpoints" / "checkpoint-3") == tmp_path
    assert runs.stage_index_of("02-format") == 2 and runs.stage_index_of("format") is None


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


# ---------------------------------------------------------------- real runs on the tiny model

#: Resumed metrics must equal the uninterrupted run's to this tolerance (CPU, fixed seed). Measured:
#: identical to the last printed digit (the RNG, optimizer, scheduler and data order are restored).
RESUME_TOL = dict(rel=1e-5, abs=1e-6)
COMPARED = ("reward", "reward_std", "loss", "grad_norm", "entropy", "completions/mean_length",
            "rewards/xml_count/mean", "rewards/correctness/mean")


def _smoke_cfg(out, steps, *extra):
    from unsloth_grpo.recipes.gsm8k import RECIPE

    return RECIPE.resolve(preset="smoke", output_dir=str(out),
                          overrides=[f"training.max_steps={steps}", "run.samples_every=0", *extra])


def _signal_at(step: int):
    from transformers import TrainerCallback

    class SendSigint(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            if state.global_step == step:
                os.kill(os.getpid(), __import__("signal").SIGINT)

    return SendSigint()


def _rows(path):
    return [json.loads(x) for x in Path(path).read_text().splitlines()]


@pytest.mark.slow
def test_resumed_run_matches_the_uninterrupted_run_step_for_step(tmp_path):
    from safetensors.torch import load_file

    from unsloth_grpo.training.train import TrainingStopped, train

    quiet = lambda _m: None  # noqa: E731
    full = train(_smoke_cfg(tmp_path / "full", 8, "training.save_steps=3"), log=quiet)
    assert full.global_step == 8

    cut = tmp_path / "cut"
    with pytest.raises(TrainingStopped) as stop:
        train(_smoke_cfg(cut, 8, "training.save_steps=3"), callbacks=[_signal_at(4)], log=quiet)
    assert stop.value.code == 130 and "--resume" in str(stop.value)
    assert not (cut / "adapter_model.safetensors").exists()  # an interrupted run has no final adapter
    saved = runs.latest_checkpoint(cut)
    assert saved is not None and 4 <= runs.read_marker(saved)["step"] < 8

    # a fresh start into a directory with checkpoints is refused rather than overwriting them
    # (in Python's terms for a Python caller; the command line's words ride along for the recipe runner)
    with pytest.raises(ck.EarlierRun, match=r"train\(cfg, resume=True\)") as earlier:
        train(_smoke_cfg(cut, 8, "training.save_steps=3"), log=quiet)
    assert "--resume" in earlier.value.command_line

    resumed = train(_smoke_cfg(cut, 8, "training.save_steps=3"), resume=True, log=quiet)
    assert resumed.global_step == 8
    a, b = _rows(tmp_path / "full" / "metrics.jsonl"), _rows(cut / "metrics.jsonl")
    assert [r["step"] for r in b] == list(range(1, 9))  # no step lost, none logged twice
    for ra, rb in zip(a, b):
        for key in COMPARED:
            assert rb[key] == pytest.approx(ra[key], **RESUME_TOL), (ra["step"], key)
    assert any(r["grad_norm"] > 0 for r in a[:4]), "the run must actually change the adapter"
    wa = load_file(str(tmp_path / "full" / "adapter_model.safetensors"))
    wb = load_file(str(cut / "adapter_model.safetensors"))
    assert max((wa[k] - wb[k]).abs().max().item() for k in wa) < 1e-6
    # keep_last=2 (the default) rotated the older checkpoints away
    assert sorted(c.step for c in runs.list_checkpoints(cut)) == [6, 8]
    bundle = json.loads((cut / "reproducibility.json").read_text())
    assert bundle["seed"] == 0 and bundle["dataset"]["fingerprint"]["rows"] == 256
    assert [r["name"] for r in bundle["rewards"]] == ["xml_count", "correctness"]


@pytest.mark.slow
def test_sigint_on_the_cli_saves_and_resume_finishes_the_run(tmp_path):
    import signal
    import subprocess
    import sys
    import time

    from unsloth_grpo.recipes.gsm8k import main

    run = tmp_path / "run"
    cmd = [sys.executable, "-m", "unsloth_grpo.recipes.gsm8k", "--preset", "smoke", "--output-dir", str(run),
           "training.max_steps=20", "training.save_steps=0", "run.samples_every=0", "model.backend=transformers"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env={**os.environ, "OMP_NUM_THREADS": "1"})
    metrics = run / "metrics.jsonl"
    deadline = time.time() + 240
    while time.time() < deadline and proc.poll() is None:
        if metrics.exists() and len(metrics.read_text().splitlines()) >= 3:
            break
        time.sleep(0.05)
    assert proc.poll() is None, proc.communicate()[0][-2000:]
    proc.send_signal(signal.SIGINT)
    output, _ = proc.communicate(timeout=120)
    assert proc.returncode == 130, output[-2000:]
    assert "Traceback" not in output
    assert f"resume with: unsloth-grpo train --config {run / 'config.yaml'} --resume" in output
    assert output.count("resume with:") == 1 and output.count(f"SIGINT at step ") == 1  # said once, one wording
    stopped_at = runs.read_marker(runs.latest_checkpoint(run))["step"]
    assert 3 <= stopped_at < 20
    assert not (run / "adapter_model.safetensors").exists()

    # --resume with the run directory alone: its own config.yaml is used
    assert main(["--resume", str(run)]) == 0
    steps = [r["step"] for r in _rows(metrics)]
    assert steps == list(range(1, 21))
    assert (run / "adapter_model.safetensors").exists()


@pytest.mark.slow
def test_a_finished_run_goes_on_with_more_steps_says_so_and_keeps_its_samples(tmp_path, capsys):
    """The advice for a finished run with checkpoints (--resume training.max_steps=N) works; the run says
    which checkpoint it continues from; samples.jsonl is continued, not overwritten."""
    from unsloth_grpo.cli import main

    run = tmp_path / "run"
    common = ["training.save_steps=2", "run.samples_every=1", "model.backend=transformers"]
    assert main(["train", "--preset", "smoke", "--output-dir", str(run), "training.max_steps=4", *common]) == 0
    first = (run / "samples.jsonl").read_text().splitlines()
    assert [json.loads(r)["step"] for r in first] == [0, 0, 1, 1, 2, 2, 3, 3]
    capsys.readouterr()
    assert main(["train", "--output-dir", str(run), "--resume", "training.max_steps=6"]) == 0
    out = capsys.readouterr().out
    assert f"resume: continuing from {run / 'checkpoints' / 'checkpoint-4'} (step 4 of 6)" in out
    samples = (run / "samples.jsonl").read_text().splitlines()
    assert samples[:8] == first  # it used to be overwritten on resume
    assert [json.loads(r)["step"] for r in samples[8:]] == [4, 4, 5, 5]
    assert [r["step"] for r in _rows(run / "metrics.jsonl") if "reward" in r] == list(range(1, 7))


# ------------------------------------------------------------------ a resume keeps the run's settings, and says what it redoes


def _run_of_6_steps(run: Path, *, logged: int = 6, saved: int = 6, finished: bool = False) -> Path:
    """A run made with ``training.save_steps=2 training.max_steps=6``, trained to step ``logged``, its
    newest checkpoint at step ``saved``."""
    from unsloth_grpo.config import dump_config
    from unsloth_grpo.recipes.gsm8k import RECIPE

    run.mkdir(parents=True)
    cfg = RECIPE.resolve(preset="smoke", output_dir=str(run), overrides=["training.max_steps=6", "training.save_steps=2"])
    dump_config(cfg, run / "config.yaml")
    (run / "metrics.jsonl").write_text("".join(json.dumps({"step": s, "reward": 0.1}) + "\n"
                                               for s in range(1, logged + 1)))
    ck.finalize_checkpoint(_staged(run, saved), run, step=saved)
    if finished:
        (run / "adapter_model.safetensors").write_bytes(b"final")
        ck.mark_finished(run, step=logged, max_steps=logged)
    return run


def _resolved(argv: list[str], capsys) -> tuple[object, str, str]:
    """The config a recipe command would train with (the trainer is replaced by one that records it)."""
    import argparse

    from unsloth_grpo.cli.recipe import add_train_arguments, run_from_args
    from unsloth_grpo.recipes.gsm8k import RECIPE

    seen = []
    parser = argparse.ArgumentParser()
    add_train_arguments(parser, list(RECIPE.presets))
    with pytest.raises(AttributeError):  # the fake returns no result to report: it was called
        run_from_args(RECIPE, parser.parse_args(argv), train_fn=lambda cfg, **kw: seen.append(cfg))
    out, err = capsys.readouterr()
    return seen[0], out, err


def test_a_resume_keeps_the_runs_own_settings_under_a_preset_and_takes_the_overrides(tmp_path, capsys):
    run = _run_of_6_steps(tmp_path / "run", finished=True)
    (tmp_path / "other.yaml").write_text("training:\n  save_steps: 50\n")
    for extra in (["--preset", "smoke"], ["--preset", "smoke", "--config", str(tmp_path / "other.yaml")], []):
        cfg, out, err = _resolved([*extra, "--output-dir", str(run), "--resume", "training.max_steps=10"], capsys)
        # the documented command used to take save_steps from the preset (0): no checkpoint at step 10
        assert cfg.training.save_steps == 2 and cfg.training.max_steps == 10
        assert cfg.output_dir == str(run)
        assert f"resume: using the run's config {run / 'config.yaml'} with training.max_steps=10 on top" in out
        if extra:
            assert "--preset smoke" in err and "not applied: a run goes on with the settings it was made with" in err
        if "--config" in extra:
            assert f"--config {tmp_path / 'other.yaml'}" in err
    cfg, _, _ = _resolved(["--resume", str(run), "training.max_steps=10"], capsys)
    assert cfg.training.save_steps == 2


def test_a_resume_that_trains_finished_steps_again_says_so_before_the_model_loads(tmp_path, monkeypatch):
    from unsloth_grpo.hardware import backend
    from unsloth_grpo.recipes.gsm8k import RECIPE
    from unsloth_grpo.training.train import train

    class Loaded(Exception):
        pass

    def load(*args, **kwargs):
        raise Loaded

    monkeypatch.setattr(backend, "load_model", load)
    run = _run_of_6_steps(tmp_path / "run", logged=10, saved=6, finished=True)  # finished at 10, saved at 6
    said: list[str] = []
    cfg = RECIPE.resolve(config=str(run / "config.yaml"), output_dir=str(run), overrides=["training.max_steps=12"])
    with pytest.raises(Loaded):
        train(cfg, resume=True, log=said.append)
    (warning,) = [m for m in said if m.startswith("WARNING")]
    assert f"this run has trained to step 10, but its checkpoint {run / 'checkpoints' / 'checkpoint-6'} is at " \
           "step 6: steps 7-10 are trained again" in warning
    assert "and so is the final adapter of step 10" in warning and "training.save_steps=2" in warning
    assert "stop now (Ctrl-C)" in warning

    # an earlier checkpoint named on purpose: the warning says where the later ones go
    run = _run_of_6_steps(tmp_path / "rewind", logged=8, saved=8)
    ck.finalize_checkpoint(_staged(run, 4), run, step=4)
    said.clear()
    cfg = RECIPE.resolve(config=str(run / "config.yaml"), output_dir=str(run))
    with pytest.raises(Loaded):
        train(cfg, resume=str(run / "checkpoints" / "checkpoint-4"), log=said.append)
    (warning,) = [m for m in said if m.startswith("WARNING")]
    assert "steps 5-8 are trained again" in warning
    assert "An earlier checkpoint was chosen: the later ones (up to step 8) are moved to abandoned/" in warning

    # a checkpoint at the last logged step redoes nothing: no warning
    run = _run_of_6_steps(tmp_path / "even", logged=6, saved=6, finished=True)
    said.clear()
    cfg = RECIPE.resolve(config=str(run / "config.yaml"), output_dir=str(run), overrides=["training.max_steps=8"])
    with pytest.raises(Loaded):
        train(cfg, resume=True, log=said.append)
    assert not [m for m in said if "WARNING" in m] and any("resume: continuing from" in m for m in said)


def test_a_run_that_ends_takes_its_lock_file_away(tmp_path, monkeypatch):
    """A stale .run.lock used to stay in every finished run (the kernel drops the flock, the file stayed)."""
    from unsloth_grpo.training import train as train_module

    monkeypatch.setattr(train_module, "train_grpo", lambda cfg, **kw: "trained")
    for stale in (False, True):
        run = tmp_path / f"run-{stale}"
        run.mkdir()
        if stale:  # left by a run killed with SIGKILL
            (run / ck.LOCK_FILE).write_text("pid 1, started long ago")
        assert train_module.train(_smoke(run), decision=object(), log=lambda _m: None) == "trained"
        assert not (run / ck.LOCK_FILE).exists()
