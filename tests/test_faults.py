"""Fault injection: stop, kill, starve and damage a real training run; nothing complete is lost.

Each fault strikes the smoke workload (the tiny offline model, transformers backend, a checkpoint
every 2 steps) at a seeded random point. After each one:

- every directory under ``checkpoints/`` is whole (marker, sizes and checksums agree), and the
  newest complete checkpoint from before the fault is still there (or a newer one replaced it);
- ``--resume`` continues from the newest intact checkpoint, or refuses and says exactly why;
- the run, resumed to its end, logs the same metrics and ends with the same adapter as an
  uninterrupted run (``RESUME_TOL``, the tolerance of tests/test_checkpoint.py).

Run it alone with ``pytest -m faults -p no:cacheprovider tests/test_faults.py``; the table of
faults tried, survived and lost is printed at the end (and written to the file named by
``UNSLOTH_GRPO_FAULT_TABLE`` when set). ``UNSLOTH_GRPO_FAULT_SEED`` picks other random points.
"""

from __future__ import annotations

import errno
import json
import os
import random
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from unsloth_grpo.training import checkpoint as ck

pytestmark = pytest.mark.faults

REPO = Path(__file__).resolve().parents[1]
SEED = int(os.environ.get("UNSLOTH_GRPO_FAULT_SEED", "0"))
STEPS = 16
OVERRIDES = [f"training.max_steps={STEPS}", "training.save_steps=2", "training.samples_every=0",
             "model.backend=transformers", "data.num_synthetic=64"]
RESUME_TOL = dict(rel=1e-5, abs=1e-6)
COMPARED = ("reward", "reward_std", "loss", "grad_norm", "entropy", "completions/mean_length")

#: One row per fault: (fault, where it struck, survived, complete checkpoints lost, what happened).
TABLE: list[tuple[str, str, bool, int, str]] = []


def _cfg(out, *extra):
    from unsloth_grpo.recipes.gsm8k import RECIPE

    return RECIPE.resolve(preset="smoke", output_dir=str(out), overrides=[*OVERRIDES, *extra])


def _quiet(_m):
    pass


def _rows(run: Path) -> list[dict]:
    path = run / "metrics.jsonl"
    if not path.exists():
        return []
    rows = []
    for line in path.read_text().splitlines():
        try:
            rows.append(json.loads(line))
        except ValueError:  # a line being written
            pass
    return rows


def _newest(run: Path) -> int:
    found = ck.list_checkpoints(run)
    return found[-1].step if found else 0


def _damage(run: Path) -> list[str]:
    """Why each directory under checkpoints/ is not whole (empty when all are)."""
    root = run / ck.CHECKPOINTS_DIR
    bad = []
    for d in sorted(root.iterdir()) if root.is_dir() else []:
        ok, why = ck.check_checkpoint(d, contents=True)
        if not ok:
            bad.append(why)
    return bad


def _assert_intact(fault: str, where: str, run: Path, newest_before: int, detail: str) -> None:
    """No complete checkpoint lost or half-written; records the fault in the table."""
    damaged = _damage(run)
    lost = len(damaged) + (1 if _newest(run) < newest_before else 0)
    TABLE.append((fault, where, lost == 0, lost, detail))
    assert not damaged, damaged
    assert _newest(run) >= newest_before, (fault, _newest(run), newest_before)


def _assert_like_reference(run: Path, reference) -> None:
    from safetensors.torch import load_file

    ref_rows, ref_weights = reference
    rows = _rows(run)
    assert [r["step"] for r in rows] == list(range(1, STEPS + 1))  # no step lost, none logged twice
    for a, b in zip(ref_rows, rows):
        for key in COMPARED:
            # the gradient norm sums every gradient, so a different split of that sum over threads
            # (the reference trains in this process, the faulted runs in fresh ones) moves its last digits
            tol = dict(rel=1e-4, abs=1e-6) if key == "grad_norm" else RESUME_TOL
            assert b[key] == pytest.approx(a[key], **tol), (a["step"], key)
    weights = load_file(str(run / "adapter_model.safetensors"))
    # 1e-6 when this file runs alone; in the whole suite the in-process reference has seen other
    # tests' imports (Unsloth's patches among them) and its weights drift by up to ~1.3e-4 (measured)
    assert max((weights[k] - ref_weights[k]).abs().max().item() for k in ref_weights) < 1e-3


@pytest.fixture(scope="module", autouse=True)
def _print_table(request):
    yield
    if not TABLE:
        return
    lines = [f"fault injection (seed {SEED}): {len(TABLE)} faults tried, "
             f"{sum(r[2] for r in TABLE)} survived, complete checkpoints lost: {sum(r[3] for r in TABLE)}",
             "", "| fault | struck | survived | lost | outcome |", "|---|---|---|---:|---|"]
    lines += [f"| {f} | {w} | {'yes' if s else 'NO'} | {n} | {d} |" for f, w, s, n, d in TABLE]
    text = "\n".join(lines)
    reporter = request.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        reporter.write_line("")
        for line in lines:
            reporter.write_line(line)
    if os.environ.get("UNSLOTH_GRPO_FAULT_TABLE"):
        Path(os.environ["UNSLOTH_GRPO_FAULT_TABLE"]).write_text(text + "\n")


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """The uninterrupted run: its metrics rows and final adapter weights. Trained with a hub token
    in the environment, so that a test can check no output file holds it."""
    from safetensors.torch import load_file

    from unsloth_grpo.training.train import train

    run = tmp_path_factory.mktemp("faults") / "reference"
    saved = os.environ.get("HF_TOKEN")
    os.environ["HF_TOKEN"] = TOKEN
    try:
        result = train(_cfg(run), log=_quiet)
    finally:
        if saved is None:
            os.environ.pop("HF_TOKEN", None)
        else:
            os.environ["HF_TOKEN"] = saved
    assert result.global_step == STEPS
    return _rows(run), load_file(str(run / "adapter_model.safetensors")), run


@pytest.fixture()
def ref(reference):
    return reference[:2]


TOKEN = "hf_faultSuiteSecretToken0123456789"


# ---------------------------------------------------------------- processes stopped from outside


def _start(run: Path, *args: str, spec: dict | None = None) -> tuple[subprocess.Popen, Path]:
    log = run.parent / f"{run.name}-{len(list(run.parent.glob(run.name + '-*.log')))}.log"
    if spec is None:
        cmd = [sys.executable, "-m", "unsloth_grpo.recipes.gsm8k", *args]
    else:
        cmd = [sys.executable, str(REPO / "tests" / "fault_driver.py"), json.dumps(spec), *args]
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "PYTHONPATH": os.pathsep.join(
        p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p)}
    fh = log.open("w")
    return subprocess.Popen(cmd, cwd=REPO, env=env, stdout=fh, stderr=subprocess.STDOUT), log


def _wait_for_step(proc: subprocess.Popen, log: Path, step: int, timeout: float = 300) -> int:
    """Wait until the process's own progress line reports ``step`` (metrics.jsonl may still hold
    rows of a killed predecessor); return the step it reports."""
    deadline = time.time() + timeout
    seen = 0
    while time.time() < deadline and proc.poll() is None:
        steps = re.findall(rf"^step +(\d+)/{STEPS} ", log.read_text(), flags=re.M)
        seen = max(map(int, steps), default=0)
        if seen >= step:
            return seen
        time.sleep(0.02)
    return seen


def _finish(proc: subprocess.Popen, log: Path, timeout: float = 300) -> tuple[int, str]:
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    return proc.returncode, log.read_text()


def _signal_during_training(name: str, run: Path, rng: random.Random, *args: str,
                            meanwhile=None) -> tuple[int, str, int]:
    """Start (or resume) the run, send ``name`` a few steps in; return (rc, output, step it was sent at).
    ``meanwhile()`` is called while the run is going, just before the signal."""
    proc, log = _start(run, *args)
    step = _wait_for_step(proc, log, _newest(run) + rng.randint(1, 3))
    assert proc.poll() is None, log.read_text()[-3000:]
    if meanwhile is not None:
        meanwhile()
    time.sleep(rng.uniform(0.0, 0.5))  # somewhere inside the next step (generation, loss, optimizer, save)
    assert proc.poll() is None, log.read_text()[-3000:]
    proc.send_signal(getattr(signal, name))
    rc, out = _finish(proc, log)
    return rc, out, step


@pytest.mark.slow
@pytest.mark.skip(reason="timing race, open in issue 16: on an idle machine the run can reach its last step "
                         "before the seeded SIGTERM lands, and the following --resume is then refused as finished")
def test_signals_kills_and_a_second_run_on_one_training(tmp_path, ref, capsys):
    """One run, stopped five ways in turn, each time resumed with ``--resume RUN``; it must end
    exactly where the uninterrupted run ends."""
    from unsloth_grpo.recipes.gsm8k import main

    rng = random.Random(SEED)
    run = tmp_path / "run"
    fresh = ["--preset", "smoke", "--output-dir", str(run), *OVERRIDES]

    # SIGINT while training: the step finishes, a checkpoint is saved, exit 130 with the resume command
    rc, out, step = _signal_during_training("SIGINT", run, rng, *fresh)
    assert rc == 130, out[-3000:]
    assert "resume with: unsloth-grpo train --config" in out and "Traceback" not in out
    _assert_intact("SIGINT", f"after step {step}, while training", run, step,
                   f"exit 130, saved step {_newest(run)}")

    # SIGKILL inside a checkpoint write: a half-written file, or a marker not yet published
    before = _newest(run)
    spec = rng.choice([{"point": "torch.save", "at": rng.randint(1, 6)}, {"point": "marker", "at": rng.randint(1, 2)}])
    proc, log = _start(run, "--resume", str(run), spec=spec)
    rc, out = _finish(proc, log)
    assert rc == -signal.SIGKILL, out[-3000:]
    where = (f"SIGKILL in checkpoint file write {spec['at']} (half written)" if spec["point"] == "torch.save"
             else f"SIGKILL after checkpoint {spec['at']}'s marker, before its rename")
    _assert_intact("SIGKILL in a checkpoint write", where, run, before,
                   f"newest complete checkpoint step {_newest(run)}")

    # SIGTERM while training (what a scheduler or `kill` sends): same as Ctrl-C, exit 143
    rc, out, step = _signal_during_training("SIGTERM", run, rng, "--resume", str(run))
    assert rc == 143, out[-3000:]
    assert "resume with:" in out and "Traceback" not in out
    _assert_intact("SIGTERM", f"after step {step}, while training", run, step, f"exit 143, saved step {_newest(run)}")

    # SIGKILL while training: no chance to save; the newest complete checkpoint stays. Before it
    # strikes, a second run on the same directory is started: it must be refused at once.
    before = _newest(run)
    refused = []

    def second_run():
        capsys.readouterr()
        refused.append((main(["--resume", str(run)]), capsys.readouterr().err))

    rc, out, step = _signal_during_training("SIGKILL", run, rng, "--resume", str(run), meanwhile=second_run)
    assert rc == -signal.SIGKILL, out[-3000:]
    code, err = refused[0]
    assert code == 2 and "is in use by a training that is still running (pid" in err, err
    _assert_intact("second run on the same directory", f"while step {step + 1} ran", run, before,
                   "refused at once (exit 2, names the pid)")
    _assert_intact("SIGKILL", f"after step {step}, while training", run, before,
                   f"killed; newest complete checkpoint step {_newest(run)}")

    # the last resume runs to the end: the same metrics and adapter as the uninterrupted run
    from unsloth_grpo.training.train import train

    lines: list[str] = []
    train(_cfg(run), resume=True, log=lines.append)
    assert f"training: 64 prompts, {STEPS} steps" in "\n".join(lines)
    _assert_like_reference(run, ref)


# ---------------------------------------------------------------- faults inside the process


class _FullDisk:
    """``torch.save`` into a checkpoint raises ENOSPC on its ``at``-th call, after writing part of the file."""

    def __init__(self, at: int):
        import torch

        self.at, self.calls, self.real = at, 0, torch.save

    def __call__(self, obj, f, *args, **kwargs):
        if isinstance(f, (str, os.PathLike)) and f"{os.sep}checkpoint-" in os.fspath(f):
            self.calls += 1
            if self.calls == self.at:
                Path(f).write_bytes(b"\0" * 100)
                raise OSError(errno.ENOSPC, "No space left on device", os.fspath(f))
        return self.real(obj, f, *args, **kwargs)


@pytest.mark.slow
def test_a_full_disk_during_a_save_keeps_the_older_checkpoints(tmp_path, ref, monkeypatch):
    import torch

    from unsloth_grpo.training.train import DISK_FULL_EXIT_CODE, TrainingStopped, train

    rng = random.Random(SEED + 1)
    at = rng.randint(4, 12)  # the 2nd to 4th checkpoint (three torch.save files each)
    run = tmp_path / "run"
    monkeypatch.setattr(torch, "save", _FullDisk(at))
    with pytest.raises(TrainingStopped) as stop:
        train(_cfg(run), log=_quiet)
    monkeypatch.undo()
    msg = str(stop.value)
    assert stop.value.code == DISK_FULL_EXIT_CODE
    assert "the disk is full" in msg and "No space left on device" in msg and "resume with:" in msg
    assert not list(run.glob("checkpoint-*"))  # the half-written staging directory is gone
    newest = _newest(run)
    assert newest >= 2 and f"checkpoint-{newest}" in msg
    _assert_intact("ENOSPC during a save", f"torch.save call {at} (step {newest + 2})", run, newest,
                   f"exit {DISK_FULL_EXIT_CODE}, names checkpoint-{newest}")
    train(_cfg(run), resume=True, log=_quiet)
    _assert_like_reference(run, ref)


@pytest.mark.slow
def test_truncated_and_corrupted_checkpoints_are_passed_over_with_a_reason(tmp_path, ref):
    from transformers import TrainerCallback

    from unsloth_grpo.training.train import TrainingStopped, train

    rng = random.Random(SEED + 2)
    stop_at = rng.randint(7, 11)

    class Interrupt(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            if state.global_step == stop_at:
                os.kill(os.getpid(), signal.SIGINT)

    run = tmp_path / "run"
    with pytest.raises(TrainingStopped):
        train(_cfg(run, "training.keep_last=3"), callbacks=[Interrupt()], log=_quiet)
    found = [c.path for c in ck.list_checkpoints(run)]
    assert len(found) == 3
    newest, middle, oldest = found[2], found[1], found[0]
    victim = rng.choice(sorted(p.name for p in newest.iterdir() if p.name != ck.MARKER))
    data = bytearray((newest / victim).read_bytes())
    data[len(data) // 2] ^= 0xFF  # same size: only the checksum can tell
    (newest / victim).write_bytes(bytes(data))
    cut = rng.choice(sorted(p.name for p in middle.iterdir() if p.name != ck.MARKER))
    (middle / cut).write_bytes((middle / cut).read_bytes()[:-7])
    TABLE.append(("corrupted checkpoint file", f"{newest.name}/{victim}, one byte flipped", True, 0,
                  "passed over: checksum"))
    TABLE.append(("truncated checkpoint file", f"{middle.name}/{cut}, 7 bytes cut", True, 0,
                  "passed over: size"))

    with pytest.raises(ck.CheckpointError, match=f"{victim}' does not match the checksum.*newest intact checkpoint is {oldest}"):
        train(_cfg(run), resume=str(newest), log=_quiet)
    lines: list[str] = []
    train(_cfg(run), resume=True, log=lines.append)
    notes = [line for line in lines if line.startswith("resume: passing over a damaged checkpoint")]
    assert any("corrupted" in n and victim in n for n in notes), lines[:20]
    assert any("truncated" in n and cut in n for n in notes), lines[:20]
    _assert_like_reference(run, ref)


# ---------------------------------------------------------------- files from elsewhere


@pytest.mark.slow
def test_a_checkpoint_that_would_run_code_is_refused_unread(tmp_path, reference):
    import shutil

    import torch

    from unsloth_grpo.training.train import train

    _, _, ref_run = reference
    run = tmp_path / "run"
    shutil.copytree(ref_run, run)
    (run / ck.RUN_COMPLETE).unlink()
    (run / "adapter_model.safetensors").unlink()
    target = ck.list_checkpoints(run)[0]
    witness = tmp_path / "code-ran"

    class Payload:
        def __reduce__(self):
            return (os.system, (f"touch {witness}",))

    state = torch.load(target.path / "rng_state.pth", weights_only=False)
    state["python"] = Payload()
    torch.save(state, target.path / "rng_state.pth")
    ck.write_marker(target.path, step=target.step)  # whoever crafted it can write a marker too
    with pytest.raises(ck.CheckpointError, match="not plain tensor data.*could run code"):
        train(_cfg(run), resume=str(target.path), log=_quiet)
    assert not witness.exists()
    TABLE.append(("checkpoint with a code-running pickle", f"{target.path.name}/rng_state.pth", True, 0,
                  "refused unread (weights_only)"))


@pytest.mark.slow
def test_no_output_file_holds_the_hub_token(reference):
    _, _, run = reference
    files = [p for p in run.rglob("*") if p.is_file()]
    assert len(files) > 10
    holding = [str(p) for p in files if TOKEN.encode() in p.read_bytes()]
    assert holding == []
