"""The side-by-side of docs/vllm-cpu.md counts what it says: the CPU seconds of TRL's generation calls in the
trainer and, for the server layout, in the server's processes (tools/vllm_cpu_run.py), and completions per
CPU-second over both (benchmarks/generation_engines.py). Runs anywhere: no model, no vLLM."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import load_script

REPO = Path(__file__).resolve().parents[1]

#: A parent that starts a child burning CPU for ``secs`` seconds, then both wait to be killed.
BUSY_TREE = """import subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c", "import time\\nend = time.process_time() + {secs}\\n"
                          "while time.process_time() < end: pass\\ntime.sleep(600)"])
print("ready", flush=True)
time.sleep(600)
"""


@pytest.fixture
def busy_tree():
    procs = []

    def start(secs: float) -> subprocess.Popen:
        proc = subprocess.Popen([sys.executable, "-c", BUSY_TREE.format(secs=secs)], stdout=subprocess.PIPE, text=True)
        assert proc.stdout.readline().strip() == "ready"
        procs.append(proc)
        return proc

    yield start
    import psutil

    for proc in procs:
        try:
            for child in psutil.Process(proc.pid).children(recursive=True):
                child.kill()
        except psutil.NoSuchProcess:  # the test ended it (its child, reparented, ends when its sleep does)
            pass
        proc.kill()
        proc.wait()


def test_tree_cpu_seconds_counts_the_processes_below_the_one_named(busy_tree):
    tool = load_script(REPO / "tools" / "vllm_cpu_run.py", with_its_folder_on_path=True)
    proc = busy_tree(0.6)
    deadline = time.time() + 60
    while tool.tree_cpu_seconds(proc.pid) < 0.5 and time.time() < deadline:
        time.sleep(0.1)
    assert tool.tree_cpu_seconds(proc.pid) >= 0.5  # the parent sleeps: the seconds are its child's
    import psutil

    for child in psutil.Process(proc.pid).children(recursive=True):
        child.kill()
    proc.kill()
    proc.wait()
    assert tool.tree_cpu_seconds(proc.pid) == 0.0  # gone: nothing to read, no error


def test_the_timed_generation_call_counts_completions_and_the_servers_cpu(busy_tree, monkeypatch):
    from trl import GRPOTrainer

    tool = load_script(REPO / "tools" / "vllm_cpu_run.py", with_its_folder_on_path=True)
    server = {}

    def generate(self, *args, **kwargs):  # stands in for TRL's call: the server works while the trainer waits
        server["proc"] = busy_tree(0.4)
        deadline = time.time() + 60
        while tool.tree_cpu_seconds(server["proc"].pid) < 0.35 and time.time() < deadline:
            time.sleep(0.05)
        return [[1, 2, 3], [4, 5]], None

    monkeypatch.setattr(GRPOTrainer, "_generate_single_turn", generate)  # put back at the test's end
    totals = {"seconds": 0.0, "cpu_seconds": 0.0, "server_cpu_seconds": 0.0, "calls": 0, "completions": 0,
              "completion_tokens": 0}
    import os

    tool._time_generation(totals, server_pid=os.getpid())  # this process's tree holds the stand-in server
    GRPOTrainer._generate_single_turn(None)
    assert totals["calls"] == 1 and totals["completions"] == 2 and totals["completion_tokens"] == 5
    assert totals["server_cpu_seconds"] >= 0.35, totals
    assert totals["cpu_seconds"] < totals["server_cpu_seconds"], totals  # the trainer mostly waited


def test_completions_per_cpu_second_count_the_servers_seconds_too():
    bench = load_script(REPO / "benchmarks" / "generation_engines.py", with_its_folder_on_path=True)
    base = {"exit": 0, "wall_s": 600.0, "trainer_cpu_s": 500.0, "server_cpu_s": 0.0}
    results = [{**base, "arm": "colocate", "generation": {"completions": 400, "cpu_seconds": 100.0,
                                                          "server_cpu_seconds": 0.0, "completion_tokens": 8000,
                                                          "seconds": 100.0}},
               {**base, "arm": "server", "server_cpu_s": 300.0,
                "generation": {"completions": 400, "cpu_seconds": 20.0, "server_cpu_seconds": 180.0,
                               "completion_tokens": 8000, "seconds": 150.0},
                "held_out": {"n": 64, "before": 0.5, "after": 0.75, "ci95_after": [0.63, 0.84]},
                "sync": {"steps": 30, "ok": 30, "max_diff": 2e-5}}]
    rows = {line.split(" | ")[0].strip("| "): line.split(" | ")[1:] for line in bench.table(results).splitlines()}
    assert [c.strip(" |") for c in rows["**completions per CPU-second**"]] == ["4.00", "2.00"]
    assert rows["**held-out strict accuracy** (95% interval)"][1].startswith("75.0% (63-84), from 50.0%")
    assert rows["rollout check (steps held, largest diff)"][1].startswith("30/30")
    assert "from" not in rows["**held-out strict accuracy** (95% interval)"][0]  # an arm without a report says -


def test_the_benchmark_checks_its_arguments_without_running_anything():
    done = subprocess.run([sys.executable, str(REPO / "benchmarks" / "generation_engines.py"), "--check", "--arms",
                           "server", "--two-ranks", "3"], capture_output=True, text=True, timeout=120, cwd=REPO)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "server, two ranks; builtin:smollm2-135m-instruct" in done.stdout
