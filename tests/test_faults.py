"""Fault injection: stop, kill, starve and damage a real training run; nothing complete is lost.

Each fault strikes the smoke workload (the tiny offline model, transformers backend, a checkpoint
every 2 steps) at a seeded random point. After each one:

- every directory under ``checkpoints/`` is whole (marker, sizes and checksums agree), and the
  newest complete checkpoint from before the fault is still there (or a newer one replaced it);
- ``--resume`` continues from the newest intact checkpoint, or refuses and says exactly why;
- the run, resumed to its end, logs the same metrics and ends with the same adapter as an
  uninterrupted run (``RESUME_TOL``, the tolerance of tests/test_checkpoint.py, for every metric;
  weights within 1e-6).

Every run whose numbers are compared (the uninterrupted reference included) trains in a fresh
process through the command line, as users run it: in the pytest process, other test modules'
imports (Unsloth patches transformers and TRL when it is imported) move the last digits of a
training. Signals are delivered at seeded points inside a step: ``tests/fault_driver.py`` stops the
run there with SIGSTOP, the test sends the signal and SIGCONT, so where it lands does not depend on
how fast the machine is.

Run it alone with ``pytest -m faults -p no:cacheprovider tests/test_faults.py``; the table of
faults tried, survived and lost is printed at the end (and written to the file named by
``UNSLOTH_GRPO_FAULT_TABLE`` when set). ``UNSLOTH_GRPO_FAULT_SEED`` picks other random points.
"""

from __future__ import annotations

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

from unsloth_grpo import runs
from unsloth_grpo.training import checkpoint as ck

# One worker runs them all under `-n` (pytest-xdist, --dist loadgroup): they share the reference run and the table.
pytestmark = [pytest.mark.faults, pytest.mark.xdist_group("faults")]

REPO = Path(__file__).resolve().parents[1]
SEED = int(os.environ.get("UNSLOTH_GRPO_FAULT_SEED", "0"))
STEPS = 16
OVERRIDES = [f"training.max_steps={STEPS}", "training.save_steps=2", "run.samples_every=0",
             "model.backend=transformers", "data.num_synthetic=64"]
RESUME_TOL = dict(rel=1e-5, abs=1e-6)
WEIGHTS_TOL = 1e-6
COMPARED = ("reward", "reward_std", "loss", "grad_norm", "entropy", "completions/mean_length")

#: One row per fault: (fault, where it struck, survived, complete checkpoints lost, what happened).
TABLE: list[tuple[str, str, bool, int, str]] = []
#: Per run compared with the reference: (largest weight difference, largest relative grad_norm difference).
MEASURED: list[tuple[float, float]] = []


def _cfg(out, *extra):
    from unsloth_grpo.recipes.gsm8k import RECIPE

    return RECIPE.resolve(preset="smoke", output_dir=str(out), overrides=[*OVERRIDES, *extra])


def _fresh(run: Path, *extra: str) -> list[str]:
    """Command-line arguments that start the run from scratch."""
    return ["--preset", "smoke", "--output-dir", str(run), *OVERRIDES, *extra]


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
    found = runs.list_checkpoints(run)
    return found[-1].step if found else 0


def _damage(run: Path) -> list[str]:
    """Why each directory under checkpoints/ is not whole (empty when all are)."""
    root = run / runs.CHECKPOINTS_DIR
    bad = []
    for d in sorted(root.iterdir()) if root.is_dir() else []:
        ok, why = runs.check_checkpoint(d, contents=True)
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
            assert b[key] == pytest.approx(a[key], **RESUME_TOL), (a["step"], key, a[key], b[key])
    weights = load_file(str(run / "adapter_model.safetensors"))
    assert sorted(weights) == sorted(ref_weights)
    diff = max((weights[k] - ref_weights[k]).abs().max().item() for k in ref_weights)
    grad = max(abs(b["grad_norm"] - a["grad_norm"]) / max(abs(a["grad_norm"]), 1e-12)
               for a, b in zip(ref_rows, rows))
    MEASURED.append((diff, grad))
    assert diff < WEIGHTS_TOL, diff


@pytest.fixture(scope="module", autouse=True)
def _print_table(fault_table_in_summary):
    yield
    if not TABLE:
        return
    lines = [f"fault injection (seed {SEED}): {len(TABLE)} faults tried, "
             f"{sum(r[2] for r in TABLE)} survived, complete checkpoints lost: {sum(r[3] for r in TABLE)}",
             "", "| fault | struck | survived | lost | outcome |", "|---|---|---|---:|---|"]
    lines += [f"| {f} | {w} | {'yes' if s else 'NO'} | {n} | {d} |" for f, w, s, n, d in TABLE]
    if MEASURED:
        lines += ["", f"largest difference of {len(MEASURED)} resumed run(s) from the uninterrupted one: "
                  f"weights {max(m[0] for m in MEASURED):.1e}, grad_norm relative {max(m[1] for m in MEASURED):.1e}"]
    text = "\n".join(lines)
    fault_table_in_summary(lines)  # tests/conftest.py
    if os.environ.get("UNSLOTH_GRPO_FAULT_TABLE"):
        Path(os.environ["UNSLOTH_GRPO_FAULT_TABLE"]).write_text(text + "\n")


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """The uninterrupted run: its metrics rows, final adapter weights and directory. Trained in a
    fresh process like the runs compared with it, with a hub token in its environment, so that a
    test can check no output file holds it."""
    from safetensors.torch import load_file

    run = tmp_path_factory.mktemp("faults") / "reference"
    rc, out = _run(run, *_fresh(run), env={"HF_TOKEN": TOKEN})
    assert rc == 0 and "done in" in out, out[-3000:]
    assert [r["step"] for r in _rows(run)] == list(range(1, STEPS + 1))
    return _rows(run), load_file(str(run / "adapter_model.safetensors")), run


@pytest.fixture()
def ref(reference):
    return reference[:2]


TOKEN = "hf_faultSuiteSecretToken0123456789"


# ---------------------------------------------------------------- processes stopped from outside


def _start(run: Path, *args: str, spec: dict | None = None,
           env: dict | None = None) -> tuple[subprocess.Popen, Path]:
    """Start the recipe's command line (under tests/fault_driver.py when ``spec`` arms a fault)."""
    log = run.parent / f"{run.name}-{len(list(run.parent.glob(run.name + '-*.log')))}.log"
    if spec is None:
        cmd = [sys.executable, "-m", "unsloth_grpo.recipes.gsm8k", *args]
    else:
        cmd = [sys.executable, str(REPO / "tests" / "fault_driver.py"), json.dumps(spec), *args]
    env = {**os.environ, **(env or {}), "PYTHONUNBUFFERED": "1", "PYTHONPATH": os.pathsep.join(
        p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p)}
    fh = log.open("w")
    return subprocess.Popen(cmd, cwd=REPO, env=env, stdout=fh, stderr=subprocess.STDOUT), log


def _finish(proc: subprocess.Popen, log: Path, timeout: float = 900) -> tuple[int, str]:
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    return proc.returncode, log.read_text()


def _run(run: Path, *args: str, spec: dict | None = None, env: dict | None = None) -> tuple[int, str]:
    """Run the command line to its end: (exit code, output)."""
    return _finish(*_start(run, *args, spec=spec, env=env))


def _wait_until_stopped(proc: subprocess.Popen, log: Path, timeout: float = 900) -> tuple[str, int]:
    """Wait until the driver has stopped itself at its strike point; return (event, step in flight).

    The stop is an event the kernel reports (``waitpid`` with ``WUNTRACED``), not a guess about how
    long steps take: until the test sends SIGCONT the run stays exactly there."""
    deadline = time.monotonic() + timeout
    while True:
        pid, status = os.waitpid(proc.pid, os.WUNTRACED | os.WNOHANG)
        if pid and os.WIFSTOPPED(status):
            break
        if pid:  # it ended (and is reaped now): tell Popen how
            proc.returncode = os.waitstatus_to_exitcode(status)
            pytest.fail(f"the run ended with exit {proc.returncode} before its strike point:\n"
                        + log.read_text()[-3000:])
        if time.monotonic() > deadline:
            proc.kill()
            proc.wait()
            pytest.fail("the run did not reach its strike point in time:\n" + log.read_text()[-3000:])
        time.sleep(0.05)
    found = re.findall(r"^fault_driver: stopped at (\w+) of step (\d+)$", log.read_text(), flags=re.M)
    assert len(found) == 1, log.read_text()[-3000:]
    return found[0][0], int(found[0][1])


#: Where in a step a signal is delivered: (words for the table, how many steps after the step in
#: flight the run saves). Before the step's end (``on_step_end``) the step in flight is saved; once
#: it has ended, the next one is.
EVENTS = {
    "on_step_begin": ("before its generation", 0),
    "on_pre_optimizer_step": ("after its loss and backward pass, before the optimizer step", 0),
    "on_log": ("after its optimizer step, while it is logged", 1),
    "on_save": ("during its checkpoint save", 1),
}
#: A strike is drawn 1 to AHEAD steps past the newest checkpoint.
AHEAD = 3
#: The most steps past the newest checkpoint that each stage of the signals test can reach: a
#: signal's checkpoint (an ``on_save`` strike waits for the next save step, then the step after it
#: is saved); the kill inside one of the next two checkpoint writes (its process gets at most 4
#: steps further, its newest complete checkpoint at most 2); the final SIGKILL's strike point.
SIGNAL_REACH, WRITE_KILL_REACH, WRITE_KILL_NEWEST, KILL_REACH = AHEAD + 2, 4, 2, AHEAD + 1


def _assert_room(run: Path, need: int, what: str) -> None:
    """The rest of the test can reach at most ``need`` steps past the newest checkpoint: all of
    them must exist, or a strike could meet a finished run."""
    newest = _newest(run)
    assert newest + need <= STEPS, (f"{what}: the newest checkpoint is step {newest}; the rest of the "
                                    f"test may need {need} more steps, the run has {STEPS - newest}")


def _signal_during_training(name: str, run: Path, rng: random.Random, *args: str,
                            meanwhile=None) -> tuple[int, str, int, str]:
    """Start (or resume) the run and deliver ``name`` at a seeded point 1 to AHEAD steps past the
    newest checkpoint; return (rc, output, step in flight, event). ``meanwhile()`` is called while
    the run is stopped at that point, just before the signal."""
    event = rng.choice(sorted(EVENTS))
    proc, log = _start(run, *args, spec={"point": "stop", "event": event, "step": _newest(run) + rng.randint(1, AHEAD)})
    event, step = _wait_until_stopped(proc, log)
    if meanwhile is not None:
        meanwhile()
    proc.send_signal(getattr(signal, name))
    if name != "SIGKILL":
        proc.send_signal(signal.SIGCONT)
    rc, out = _finish(proc, log)
    return rc, out, step, event


@pytest.mark.slow
def test_signals_kills_and_a_second_run_on_one_training(tmp_path, ref, capsys):
    """One run, stopped five ways in turn, each time resumed with ``--resume RUN``; it must end
    exactly where the uninterrupted run ends."""
    from unsloth_grpo.recipes.gsm8k import main

    rng = random.Random(SEED)
    run = tmp_path / "run"

    # SIGINT while training: the step finishes, a checkpoint is saved, exit 130 with the resume command
    _assert_room(run, SIGNAL_REACH + WRITE_KILL_NEWEST + SIGNAL_REACH + KILL_REACH, "SIGINT")
    rc, out, step, event = _signal_during_training("SIGINT", run, rng, *_fresh(run))
    assert rc == 130, out[-3000:]
    assert "resume with: unsloth-grpo train --config" in out and "Traceback" not in out
    saved = step + EVENTS[event][1]
    assert f"stopped: SIGINT at step {saved};" in out, out[-3000:]
    _assert_intact("SIGINT", f"step {step}, {EVENTS[event][0]}", run, saved, f"exit 130, saved step {_newest(run)}")
    assert _newest(run) == saved

    # SIGKILL inside a checkpoint write: a half-written file, or a marker not yet published
    _assert_room(run, max(WRITE_KILL_REACH, WRITE_KILL_NEWEST + SIGNAL_REACH + KILL_REACH), "SIGKILL in a write")
    before = _newest(run)
    spec = rng.choice([{"point": "torch.save", "at": rng.randint(1, 6)}, {"point": "marker", "at": rng.randint(1, 2)}])
    rc, out = _run(run, "--resume", str(run), spec=spec)
    assert rc == -signal.SIGKILL, out[-3000:]
    where = (f"SIGKILL in checkpoint file write {spec['at']} (half written)" if spec["point"] == "torch.save"
             else f"SIGKILL after checkpoint {spec['at']}'s marker, before its rename")
    _assert_intact("SIGKILL in a checkpoint write", where, run, before,
                   f"newest complete checkpoint step {_newest(run)}")

    # SIGTERM while training (what a scheduler or `kill` sends): same as Ctrl-C, exit 143
    _assert_room(run, SIGNAL_REACH + KILL_REACH, "SIGTERM")
    rc, out, step, event = _signal_during_training("SIGTERM", run, rng, "--resume", str(run))
    assert rc == 143, out[-3000:]
    assert "resume with:" in out and "Traceback" not in out
    saved = step + EVENTS[event][1]
    assert f"stopped: SIGTERM at step {saved};" in out, out[-3000:]
    _assert_intact("SIGTERM", f"step {step}, {EVENTS[event][0]}", run, saved, f"exit 143, saved step {_newest(run)}")
    assert _newest(run) == saved

    # SIGKILL while training: no chance to save; the newest complete checkpoint stays. While the
    # run is stopped at the strike point, a second run on the same directory is started: it must
    # be refused at once.
    _assert_room(run, KILL_REACH, "SIGKILL")
    before = _newest(run)
    refused = []

    def second_run():
        capsys.readouterr()
        refused.append((main(["--resume", str(run)]), capsys.readouterr().err))

    rc, out, step, event = _signal_during_training("SIGKILL", run, rng, "--resume", str(run), meanwhile=second_run)
    assert rc == -signal.SIGKILL, out[-3000:]
    code, err = refused[0]
    assert code == 2 and "is in use by a training that is still running (pid" in err, err
    _assert_intact("second run on the same directory", f"while the run was in step {step}", run, before,
                   "refused at once (exit 2, names the pid)")
    _assert_intact("SIGKILL", f"step {step}, {EVENTS[event][0]}", run, before,
                   f"killed; newest complete checkpoint step {_newest(run)}")
    # every checkpoint completed before the kill is there (save_steps=2), none after it
    assert _newest(run) == max(before, (step - 1) // 2 * 2)

    # the last resume runs to the end: the same metrics and adapter as the uninterrupted run
    rc, out = _run(run, "--resume", str(run))
    assert rc == 0 and f"training: 64 prompts, {STEPS} steps" in out, out[-3000:]
    _assert_like_reference(run, ref)


# ---------------------------------------------------------------- an SFT stage


#: A run whose first stage is SFT (8 steps, a checkpoint every 2) and whose second is GRPO: SFT and
#: GRPO stages train through one loop, so each fault must end an SFT stage as it ends a GRPO run.
SFT_STAGES = ("stages:\n"
              "  - {name: preformat, kind: sft, max_steps: 8, learning_rate: 5.0e-3, num_examples: 64}\n"
              "  - {name: format, max_steps: 2}\n")
SFT_STEPS = 8
#: Keys of the SFT rows compared with the uninterrupted run (the GRPO stage's rows use COMPARED).
SFT_COMPARED = ("loss", "grad_norm", "mean_token_accuracy", "entropy")


def _staged(run: Path, *extra: str) -> list[str]:
    config = run.parent / f"{run.name}-stages.yaml"
    config.write_text(SFT_STAGES)
    # the stages set their own steps: a training.max_steps beside them is refused (it would be ignored)
    overrides = [o for o in OVERRIDES if not o.startswith("training.max_steps=")]
    return ["--preset", "smoke", "--config", str(config), "--output-dir", str(run), *overrides, *extra]


@pytest.fixture(scope="module")
def staged_reference(tmp_path_factory):
    """The uninterrupted SFT-then-GRPO run: its combined metrics rows and final adapter weights."""
    from safetensors.torch import load_file

    run = tmp_path_factory.mktemp("faults-sft") / "reference"
    rc, out = _run(run, *_staged(run))
    assert rc == 0 and "done in" in out, out[-3000:]
    return _rows(run), load_file(str(run / "adapter_model.safetensors"))


def _assert_like_staged_reference(run: Path, reference) -> None:
    from safetensors.torch import load_file

    ref_rows, ref_weights = reference
    rows = _rows(run)
    assert [(r["stage"], r["stage_step"]) for r in rows] == [(r["stage"], r["stage_step"]) for r in ref_rows]
    assert [r["stage_step"] for r in rows if r["stage"] == 1] == list(range(1, SFT_STEPS + 1))
    for a, b in zip(ref_rows, rows):
        for key in SFT_COMPARED if a["stage"] == 1 else COMPARED:
            assert key in a and b[key] == pytest.approx(a[key], **RESUME_TOL), (a["step"], key, a.get(key), b[key])
    weights = load_file(str(run / "adapter_model.safetensors"))
    diff = max((weights[k] - ref_weights[k]).abs().max().item() for k in ref_weights)
    grad = max(abs(b["grad_norm"] - a["grad_norm"]) / max(abs(a["grad_norm"]), 1e-12) for a, b in zip(ref_rows, rows))
    MEASURED.append((diff, grad))
    assert diff < WEIGHTS_TOL, diff


@pytest.mark.slow
def test_signals_a_full_disk_and_a_second_run_in_an_sft_stage(tmp_path, staged_reference, capsys):
    """The SFT stage of a two-stage run: SIGTERM inside a seeded step saves that step's checkpoint
    (exit 143) while a second run on the directory is refused; the resumed run then meets a full
    disk at its next save (exit 4, naming the newest complete checkpoint); resumed again, it ends
    exactly where the uninterrupted run ends."""
    from unsloth_grpo.recipes.gsm8k import main
    from unsloth_grpo.training.train import DISK_FULL_EXIT_CODE

    rng = random.Random(SEED + 3)
    run = tmp_path / "run"
    sft = run / "stages" / "01-preformat"

    event = rng.choice(sorted(EVENTS))
    step = rng.randint(1, 4)  # room for the save after the signal and a later one for the full disk
    proc, log = _start(run, *_staged(run), spec={"point": "stop", "event": event, "step": step})
    event, step = _wait_until_stopped(proc, log)
    capsys.readouterr()
    refused = (main(["--resume", str(run)]), capsys.readouterr().err)  # the run is stopped inside its SFT stage
    proc.send_signal(signal.SIGTERM)
    proc.send_signal(signal.SIGCONT)
    rc, out = _finish(proc, log)
    assert rc == 143, out[-3000:]
    assert "resume with:" in out and "Traceback" not in out
    saved = step + EVENTS[event][1]
    assert f"stopped: SIGTERM at step {saved};" in out, out[-3000:]
    _assert_intact("SIGTERM in an SFT stage", f"step {step}, {EVENTS[event][0]}", sft, saved,
                   f"exit 143, saved step {_newest(sft)}")
    assert _newest(sft) == saved and runs.read_marker(runs.latest_checkpoint(sft))["stage"] == 1
    code, err = refused
    assert code == 2 and "is in use by a training that is still running (pid" in err, err
    _assert_intact("second run during an SFT stage", f"while the run was in step {step}", sft, saved,
                   "refused at once (exit 2, names the pid)")

    # resumed, the next save of the SFT stage meets a full disk
    at = rng.randint(1, 3)  # a file of the first checkpoint written after the resume
    rc, out = _run(run, "--resume", str(run), spec={"point": "enospc", "at": at})
    assert rc == DISK_FULL_EXIT_CODE, out[-3000:]
    msg = "\n".join(line for line in out.splitlines() if line.startswith("stopped: "))
    assert "the disk is full" in msg and "No space left on device" in msg and "resume with:" in msg, out[-3000:]
    assert f"the newest complete checkpoint {sft / 'checkpoints' / f'checkpoint-{saved}'} is untouched" in msg, msg
    assert not list(sft.glob("checkpoint-*"))  # the half-written staging directory is gone
    _assert_intact("ENOSPC during an SFT save", f"torch.save call {at} after the resume", sft, saved,
                   f"exit {DISK_FULL_EXIT_CODE}, names checkpoint-{saved}")

    rc, out = _run(run, "--resume", str(run))
    assert rc == 0 and "done in" in out, out[-3000:]
    _assert_like_staged_reference(run, staged_reference)


# ---------------------------------------------------------------- faults inside the process


@pytest.mark.slow
def test_a_full_disk_during_a_save_keeps_the_older_checkpoints(tmp_path, ref):
    from unsloth_grpo.training.train import DISK_FULL_EXIT_CODE

    rng = random.Random(SEED + 1)
    at = rng.randint(4, 12)  # the 2nd to 4th checkpoint (three torch.save files each)
    run = tmp_path / "run"
    rc, out = _run(run, *_fresh(run), spec={"point": "enospc", "at": at})
    assert rc == DISK_FULL_EXIT_CODE, out[-3000:]
    msg = "\n".join(line for line in out.splitlines() if line.startswith("stopped: "))
    assert "the disk is full" in msg and "No space left on device" in msg and "resume with:" in msg, out[-3000:]
    assert not list(run.glob("checkpoint-*"))  # the half-written staging directory is gone
    newest = _newest(run)
    assert newest >= 2 and f"checkpoint-{newest}" in msg
    _assert_intact("ENOSPC during a save", f"torch.save call {at} (step {newest + 2})", run, newest,
                   f"exit {DISK_FULL_EXIT_CODE}, names checkpoint-{newest}")
    rc, out = _run(run, "--resume", str(run))
    assert rc == 0, out[-3000:]
    _assert_like_reference(run, ref)


@pytest.mark.slow
def test_truncated_and_corrupted_checkpoints_are_passed_over_with_a_reason(tmp_path, ref):
    from unsloth_grpo.training.train import train

    rng = random.Random(SEED + 2)
    stop_at = rng.randint(7, 11)

    run = tmp_path / "run"
    proc, log = _start(run, *_fresh(run, "run.keep_last=3"),
                       spec={"point": "stop", "event": "on_step_begin", "step": stop_at})
    _wait_until_stopped(proc, log)
    proc.send_signal(signal.SIGINT)
    proc.send_signal(signal.SIGCONT)
    rc, out = _finish(proc, log)
    assert rc == 130, out[-3000:]
    found = [c.path for c in runs.list_checkpoints(run)]
    assert len(found) == 3 and found[2].name == f"{runs.PREFIX}{stop_at}"
    newest, middle, oldest = found[2], found[1], found[0]
    victim = rng.choice(sorted(p.name for p in newest.iterdir() if p.name != runs.MARKER))
    data = bytearray((newest / victim).read_bytes())
    data[len(data) // 2] ^= 0xFF  # same size: only the checksum can tell
    (newest / victim).write_bytes(bytes(data))
    cut = rng.choice(sorted(p.name for p in middle.iterdir() if p.name != runs.MARKER))
    (middle / cut).write_bytes((middle / cut).read_bytes()[:-7])
    TABLE.append(("corrupted checkpoint file", f"{newest.name}/{victim}, one byte flipped", True, 0,
                  "passed over: checksum"))
    TABLE.append(("truncated checkpoint file", f"{middle.name}/{cut}, 7 bytes cut", True, 0,
                  "passed over: size"))

    # refused before anything trains, so in this process
    with pytest.raises(ck.CheckpointError, match=f"{victim}' does not match the checksum.*newest intact checkpoint is {oldest}"):
        train(_cfg(run), resume=str(newest), log=_quiet)
    rc, out = _run(run, "--resume", str(run))
    assert rc == 0, out[-3000:]
    notes = [line for line in out.splitlines() if line.startswith("resume: passing over a damaged checkpoint")]
    assert any("corrupted" in n and victim in n for n in notes), out[:3000]
    assert any("truncated" in n and cut in n for n in notes), out[:3000]
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
    target = runs.list_checkpoints(run)[0]
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
