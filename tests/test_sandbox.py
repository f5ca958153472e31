"""The sandbox: structured results, limits, and isolation that is never weaker than it reports."""

from __future__ import annotations

import os
import socket
import subprocess

import pytest

from unsloth_grpo import sandbox as sb
from unsloth_grpo.sandbox import Isolation, Job, Limits, Result, Sandbox, SandboxError

ADD = "def add(a, b):\n    return a + b\n"
TESTS = ["assert add(1, 2) == 3", "assert add(2, 2) == 4"]


@pytest.fixture(scope="module", params=[True, False], ids=["fork-server", "fresh-interpreter"])
def box(request):
    with Sandbox(Limits(timeout=3.0, memory_mb=256), fork_server=request.param) as b:
        yield b


def test_results_are_structured(box):
    r = box.run(Job(solution=ADD, tests=TESTS, entry_point="add"))
    assert (r.status, r.passed, r.total, r.fraction, r.blocked, r.failures) == ("passed", 2, 2, 1.0, [], [])
    r = box.run(Job(solution="def add(a, b):\n    return 4\n", tests=TESTS, entry_point="add"))
    assert (r.status, r.passed, r.fraction) == ("failed", 1, 0.5)
    assert r.failures == [[0, "AssertionError", ""]]
    r = box.run(Job(solution="def add(a, b):\n    raise ValueError('no')\n", tests=TESTS, entry_point="add"))
    assert r.failures == [[0, "ValueError", "no"], [1, "ValueError", "no"]] and r.passed == 0
    r = box.run(Job(solution="def add(a, b) return\n", tests=TESTS, entry_point="add"))
    assert (r.status, r.solution_error, r.passed) == ("failed", "SyntaxError", 0)
    assert set(r.to_dict()) >= {"status", "passed", "total", "fraction", "stderr", "blocked", "seconds"}


def test_map_keeps_the_order_and_runs_in_parallel(box):
    jobs = [Job(solution=f"def add(a, b):\n    return {k}\n", tests=TESTS, entry_point="add") for k in (3, 4, 0, 3)]
    assert [r.passed for r in box.map(jobs)] == [1, 1, 0, 1]


@pytest.mark.slow
def test_every_status_can_happen(box):
    jobs = {
        "passed": ADD,
        "failed": "def add(a, b):\n    return 0\n",
        "blocked": "import os\nos.remove('/etc/hostname')\n",
        "crashed": "import os\nos._exit(3)\n",
        "memory": "x = bytearray(2**40)\n",
        "timeout": "while True:\n    pass\n",
    }
    results = box.map([Job(solution=code, tests=TESTS, entry_point="add") for code in jobs.values()])
    assert [r.status for r in results] == list(jobs)
    assert list(jobs) == list(sb.STATUSES)


def test_the_job_runs_in_a_fresh_empty_directory_with_a_scrubbed_environment(box):
    probe = ("import os\nSEEN = (sorted(os.listdir('.')), sorted(os.environ))\n"
             "def add(a, b):\n    return SEEN\n")
    r = box.run(Job(solution=probe, tests=["assert add(0, 0) == ([], ['HOME', 'LANG', 'PATH', 'TMPDIR'])"],
                    entry_point="add"))
    assert r.status == "passed", r


def test_files_written_in_the_working_directory_are_fine_and_then_gone(box):
    code = ("import os, sys\nsys.stderr.write(os.getcwd())\nopen('notes.txt', 'w').write('hi')\n"
            "def add(a, b):\n    return len(open('notes.txt').read()) + a + b\n")
    r = box.run(Job(solution=code, tests=["assert add(1, 0) == 3"], entry_point="add"))
    assert r.status == "passed", r
    assert r.stderr.endswith("/work") and not os.path.exists(r.stderr)


def test_limits_are_checked():
    with pytest.raises(ValueError, match="timeout"):
        Limits(timeout=0)
    with pytest.raises(ValueError, match="memory_mb"):
        Limits(memory_mb=8)
    with pytest.raises(ValueError, match="namespaces"):
        Sandbox(namespaces="maybe")


# --- isolation: what it claims is what the kernel does


def _probe(box: Sandbox, code: str) -> subprocess.CompletedProcess:
    """Run trusted probe code with the sandbox's own command prefix (namespaces), without the hook."""
    cmd = box.command()[:-1] + [code]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=60, env={"PATH": "/usr/bin:/bin"})


def test_claimed_isolation_holds_at_the_kernel(tmp_path):
    box = Sandbox()
    assert box.isolation.kernel_process_limit == (os.geteuid() != 0)
    assert box.isolation.network_namespace == sb._namespaces_work(box.python)[0]
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    port = server.getsockname()[1]
    try:
        out = _probe(box, f"import socket\ntry:\n    socket.create_connection(('127.0.0.1', {port}), 2)\n"
                          "    print('connected')\nexcept OSError as e:\n    print('refused', e)\n")
    finally:
        server.close()
    reached = out.stdout.startswith("connected")
    # without the audit hook, only a network namespace keeps the probe off the host's loopback
    assert reached is not box.isolation.network_namespace, (box.isolation, out.stdout, out.stderr)
    out = _probe(box, "import os, resource\nresource.setrlimit(resource.RLIMIT_NPROC, (0, 0))\ntry:\n"
                      "    pid = os.fork()\nexcept OSError:\n    print('refused')\nelse:\n    if pid == 0:\n"
                      "        os._exit(0)\n    os.waitpid(pid, 0)\n    print('forked')\n")
    assert (out.stdout.strip() == "refused") is box.isolation.kernel_process_limit, (box.isolation, out.stdout)


@pytest.mark.parametrize("fork_server", [True, False])
def test_a_run_weaker_than_claimed_is_refused(monkeypatch, fork_server):
    box = Sandbox(Limits(timeout=3.0), fork_server=fork_server)
    job = Job(solution=ADD, tests=TESTS, entry_point="add")
    # claims a network namespace but starts the child without one
    box.isolation = Isolation(network_namespace=True, kernel_process_limit=box.isolation.kernel_process_limit)
    monkeypatch.setattr(box, "command", lambda source=None: [box.python, "-I", "-S", "-B", "-c", source or sb._BOOTSTRAP])
    with pytest.raises(SandboxError, match="network namespace"):
        box.run(job)
    box.close()


@pytest.mark.parametrize("fork_server", [True, False])
def test_a_runner_that_skips_a_limit_is_refused(monkeypatch, fork_server):
    weak = sb._RUNNER_SOURCE.replace('"RLIMIT_AS": limits["memory_bytes"],', "")
    assert weak != sb._RUNNER_SOURCE
    for name in ("_BOOTSTRAP", "_SERVE"):
        monkeypatch.setattr(sb, name, getattr(sb, name).replace(repr(sb._RUNNER_SOURCE), repr(weak)))
    box = Sandbox(Limits(timeout=3.0), fork_server=fork_server)
    with pytest.raises(SandboxError, match="RLIMIT_AS"):
        box.run(Job(solution=ADD, tests=TESTS, entry_point="add"))
    box.close()


def test_claiming_a_kernel_process_limit_for_a_root_child_is_refused():
    box = Sandbox(Limits(timeout=3.0))
    box.isolation = Isolation(network_namespace=False, kernel_process_limit=True)
    limits = {"RLIMIT_AS": 512 << 20, "RLIMIT_CPU": 3, "RLIMIT_FSIZE": 1 << 20, "RLIMIT_NOFILE": 64,
              "RLIMIT_NPROC": 0, "RLIMIT_CORE": 0}
    box._verify({"uid": 1000, "netns": None, "limits": limits})  # what a normal user's child reports
    with pytest.raises(SandboxError, match="runs as root"):
        box._verify({"uid": 0, "netns": None, "limits": limits})


def test_required_namespaces_fail_loudly_when_missing(monkeypatch):
    monkeypatch.setattr(sb, "_namespaces_work", lambda python: (False, "user namespaces are not available: test"))
    with pytest.raises(SandboxError, match="namespaces=True but user namespaces are not available"):
        Sandbox(namespaces=True)
    assert Sandbox(namespaces="auto").isolation.network_namespace is False


def test_the_fork_server_stops_with_its_sandbox_and_restarts_when_needed():
    box = Sandbox(Limits(timeout=3.0))
    job = Job(solution=ADD, tests=TESTS, entry_point="add")
    assert box.run(job).status == "passed"
    server = box._server.proc
    box.close()
    assert server.poll() is not None  # exited, reaped
    assert box.run(job).status == "passed"
    box._server.proc.kill()  # a server that died is replaced at the next job
    box._server.proc.wait()
    results = [box.run(job) for _ in range(2)]
    assert results[-1].status == "passed"
    box.close()


def test_a_job_sent_to_a_server_that_just_died_is_a_crash_not_an_exception():
    """The server can die between the check that it lives and the job's request (its reader thread
    has not seen the end of its output yet): the job then never ran and left no stderr file. CI saw
    FileNotFoundError there on a loaded machine; it is a crashed job, and the next one restarts it."""
    import time

    box = Sandbox(Limits(timeout=3.0))
    job = Job(solution=ADD, tests=TESTS, entry_point="add")
    assert box.run(job).status == "passed"
    server = box._server
    server.proc.kill()
    server.proc.wait()
    deadline = time.monotonic() + 10
    while server.alive and time.monotonic() < deadline:  # the reader thread notices the end ...
        time.sleep(0.01)
    server.alive = True  # ... and this is the moment before it did
    try:
        assert box.run(job).status == "crashed"
        assert box.run(job).status == "passed"
    finally:
        box.close()


def test_result_fraction_without_tests():
    assert Result(status="failed", passed=0, total=0, seconds=0.0).fraction == 0.0
