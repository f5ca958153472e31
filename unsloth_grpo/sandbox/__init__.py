"""Run untrusted Python (a policy's completion) against unit tests, in a separate locked-down process.

    >>> from unsloth_grpo.sandbox import Job, Sandbox
    >>> box = Sandbox()
    >>> job = Job(solution="def add(a, b):\\n    return a + b\\n", entry_point="add",
    ...           tests=["assert add(1, 2) == 3", "assert add(-1, 1) == 0"])
    >>> r = box.run(job); (r.status, r.passed, r.total)
    ('passed', 2, 2)
    >>> [r.status for r in box.map([job, Job(solution="while True: pass", entry_point="add", tests=["add"])])]
    ['passed', 'timeout']

Threat model
============

The code comes from a policy under reinforcement learning: not a human attacker with time to
study the sandbox, but an optimiser that finds any behaviour that raises its reward, including
crashing, hanging, exiting early, faking test results or damaging its surroundings. The aim is
that the reward reflects tests the code really passed, that the trainer and the machine are
untouched, and that every call returns within its limit.

Each job runs in a **fresh process** of a clean interpreter (``python -I -S -B``: no
site-packages, no user paths, no ``PYTHON*`` variables), forked from a server started once that
never runs job code (or, with ``fork_server=False``, started anew), in a new session with a
scrubbed environment and a fresh temporary working directory that is deleted afterwards. Nothing
of the trainer's process (modules, memory, open files) exists in it; the tests reach it through a
private file read before the job's code runs, never the working directory. The layers, from the
kernel up:

* **Kernel limits** (``setrlimit`` in the child only): address space (``memory_mb``), CPU
  seconds, the size of any file it writes (stdout and stderr are files, so ``output_bytes``
  caps them too), open files, no core dumps, and ``RLIMIT_NPROC=0`` so it cannot fork. The
  kernel does not apply ``RLIMIT_NPROC`` to root: run as root, the fork ban is the audit hook's
  alone, and :attr:`Isolation.kernel_process_limit` says so. The parent enforces the wall-clock
  limit and kills the child's own process group (never another).
* **Namespaces** where an unprivileged user may create them (``unshare --user --net``, most
  Linux desktops): the child has its own empty network namespace, so no socket reaches anything,
  loopback servers of the host included, whatever the code does.
* **A Python audit hook** (PEP 578), installed before the job's code runs: writing or deleting
  outside the working directory, reading outside it and the standard library, sockets,
  processes, signals to other processes, ``ctypes`` and other foreign-function or raw-OS modules,
  and every way of reaching an interpreter frame (``sys._getframe``, ``tb_frame``, ``gi_frame``,
  tracing, ``gc`` object walks) are refused, save for three standard-library functions that read
  their caller's module name (allowed by code object). Paths are resolved by the hook's own code
  on C functions (``os.path`` can be patched by the job), symlinks and ``dir_fd`` paths are
  refused, and only ``str``/``bytes`` paths are accepted (so ``pathlib`` file I/O is refused: a
  path-like object could answer differently when asked twice). A refused action raises
  ``PermissionError`` in the code and marks the result ``blocked``.
* **An honest verdict.** Verdicts are written, with a nonce that only the harness's frame
  holds, to a write-only descriptor: text the code prints, or an early ``sys.exit(0)`` /
  ``os._exit(0)``, cannot report a pass. The tests run in their own namespace with a copy of
  the builtins (and of the context) taken before the code ran, every value the function returns
  must be plain data (so an object whose ``__eq__`` always says yes is refused), the modules the
  tests import are loaded before the code runs, and a test counts only if the code left the
  modules loaded by then unchanged.

Every run reports what was really in force (its uid, its network namespace, the limits it
read back), and the parent refuses the result with :class:`SandboxError` when that is weaker
than :attr:`Sandbox.isolation` claims, so the sandbox never silently runs with less.

**What it does not stop.** The audit hook is Python-level: a bug in CPython or in a C
extension, or a memory-corruption exploit (``ctypes`` is refused, but e.g. crafted bytecode
can crash the interpreter), runs outside its reach; the kernel limits and the namespace still
hold then, but not the file rules. Without user namespaces the network is closed by the hook
only. Reading files the user may read inside the standard library is allowed. Threads are
allowed (they die with the process). CPU and memory of other processes are shared: a job can
slow the trainer down for at most its wall-clock limit. For code from people, or anything you
would not run as yourself, use a real boundary: a container without network (Docker/Podman
``--network none``), gVisor, Firecracker, or a hosted sandbox (E2B, SandboxFusion, Piston).
"""

from __future__ import annotations

import ast
import functools
import itertools
import marshal
import math
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import weakref
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Iterable, Sequence

__all__ = ["Job", "Limits", "Result", "Sandbox", "SandboxError", "Isolation", "STATUSES", "DENIED_MODULES"]

#: What a run can end as, from best to worst (see :class:`Result`).
STATUSES = ("passed", "failed", "blocked", "crashed", "memory", "timeout")

#: Modules the code may not import: foreign functions, raw processes and signals, C-level file access.
DENIED_MODULES = (
    "ctypes", "_ctypes", "cffi", "_posixsubprocess", "subprocess", "multiprocessing", "_multiprocessing",
    "concurrent", "signal", "_signal", "pty", "fcntl", "termios", "resource", "mmap", "sqlite3", "_sqlite3",
    "dbm", "_dbm", "_gdbm", "readline", "_testcapi", "_testinternalcapi", "_testbuffer", "_xxsubinterpreters",
    "_xxinterpchannels", "_interpreters", "_lsprof", "faulthandler", "tracemalloc", "_tracemalloc",
    "socket", "_socket", "ssl", "_ssl", "select", "selectors", "asyncio",
)

_RUNNER_SOURCE = (Path(__file__).with_name("_runner.py")).read_text()
# The runner's globals are a private dict with its own copy of the builtins, so that the code it
# runs cannot patch the names the runner uses.
_BOOTSTRAP = ("exec(compile(" + repr(_RUNNER_SOURCE) + ", '<sandbox-runner>', 'exec'), "
              "{'__builtins__': dict(__builtins__.__dict__), '__name__': '__sandbox__'})")
_SERVE = _BOOTSTRAP.replace("'__sandbox__'", "'__sandbox_serve__'")
_ENV = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"}


class SandboxError(RuntimeError):
    """The sandbox cannot run as configured (the message says why); never raised for bad job code."""


@dataclass(frozen=True)
class Limits:
    """Resource limits of one job (all tests of one completion together)."""

    timeout: float = 5.0
    cpu_seconds: int | None = None  # default: the wall-clock timeout rounded up
    memory_mb: int = 512
    output_bytes: int = 1 << 20
    open_files: int = 64
    max_files: int = 32
    stderr_chars: int = 2000

    def __post_init__(self) -> None:
        if not self.timeout > 0:
            raise ValueError(f"sandbox timeout={self.timeout!r}: use a number of seconds > 0")
        if self.memory_mb < 64:
            raise ValueError(f"sandbox memory_mb={self.memory_mb}: the interpreter alone needs ~30 MB; use >= 64")
        if self.open_files < 16:
            raise ValueError(f"sandbox open_files={self.open_files}: use >= 16 (the interpreter needs a few)")

    @property
    def cpu(self) -> int:
        return self.cpu_seconds if self.cpu_seconds is not None else max(1, math.ceil(self.timeout))


@dataclass(frozen=True)
class Job:
    """One completion's code and the tests to run against it.

    ``solution`` is the untrusted code. ``entry_point`` names the function the tests call; the
    tests see it under ``candidate_name`` (default: the same name; HumanEval's harness calls it
    ``candidate``). ``setup`` is trusted harness code run first in the tests' own namespace (a
    HumanEval ``check`` function); ``context`` is trusted code run before the solution in its
    namespace and, as a separate copy, in the tests' (a HumanEval prompt's imports and helpers,
    so a completion that redefines a helper the tests use does not change the tests). Each entry of ``tests`` is one test: Python
    statements that pass when they run without an exception.
    """

    solution: str
    tests: Sequence[str]
    entry_point: str | None = None
    setup: str = ""
    context: str = ""
    candidate_name: str | None = None


@dataclass
class Result:
    """What one job did. ``status`` is one of :data:`STATUSES`; ``passed`` of ``total`` tests passed.

    ``blocked`` lists the refused actions, ``failures`` the failing tests as ``[index, error]``,
    ``stderr`` the end of what the code wrote to stderr (cut to ``Limits.stderr_chars``).
    """

    status: str
    passed: int
    total: int
    seconds: float
    blocked: list[str] = field(default_factory=list)
    failures: list[list] = field(default_factory=list)
    stderr: str = ""
    solution_error: str | None = None

    @property
    def fraction(self) -> float:
        """Share of tests passed (0.0 without tests)."""
        return self.passed / self.total if self.total else 0.0

    def to_dict(self) -> dict:
        return {**asdict(self), "fraction": self.fraction}


@dataclass(frozen=True)
class Isolation:
    """The layers in force, as measured on this machine when the sandbox was built."""

    network_namespace: bool
    kernel_process_limit: bool
    audit_hook: bool = True
    resource_limits: bool = True
    reason: str = ""

    def summary(self) -> str:
        net = "own network namespace" if self.network_namespace else "network closed by the audit hook only"
        proc = "fork refused by the kernel" if self.kernel_process_limit else \
            "fork refused by the audit hook only (running as root)"
        return f"resource limits, audit hook, {net}, {proc}" + (f" ({self.reason})" if self.reason else "")


@functools.lru_cache(maxsize=None)
def _namespaces_work(python: str) -> tuple[bool, str]:
    """Whether ``unshare --user --net`` can start ``python`` here (once per interpreter)."""
    unshare = shutil.which("unshare")
    if unshare is None:
        return False, "no unshare command"
    try:
        done = subprocess.run([unshare, "--user", "--net", "--", python, "-I", "-S", "-c", "pass"],
                              capture_output=True, timeout=30, env={"PATH": "/usr/bin:/bin"})
    except (OSError, subprocess.TimeoutExpired) as exc:
        return False, f"unshare failed: {exc}"
    if done.returncode != 0:
        return False, "user namespaces are not available: " + done.stderr.decode(errors="replace").strip()[:200]
    return True, ""


def _netns() -> str | None:
    try:
        return os.readlink("/proc/self/ns/net")
    except OSError:
        return None


class _ForkServer:
    """The parent's end of the runner's fork server (``_runner._serve``): one request per job."""

    def __init__(self, command: list[str]):
        self._log = tempfile.TemporaryFile()
        self.proc = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._log,
                                     env=dict(_ENV), cwd="/", start_new_session=True, close_fds=True)
        if self.proc.stdout.readline() != b"ready\n":
            self.proc.wait()
            self._log.seek(0)
            raise SandboxError("the sandbox's fork server did not start: "
                               + self._log.read().decode(errors="replace").strip()[-300:])
        self._lock = threading.Lock()
        self._waiting: dict[str, list] = {}
        self._ids = itertools.count()
        self.alive = True
        threading.Thread(target=self._read, name="sandbox-fork-server", daemon=True).start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            ident, code, seconds, killed = line.decode().rstrip("\n").split("\t")
            with self._lock:
                slot = self._waiting.pop(ident, None)
            if slot is not None:
                slot[1] = (int(code), float(seconds), killed == "1")
                slot[0].set()
        with self._lock:  # the server is gone: whoever still waits gets no answer
            self.alive = False
            left, self._waiting = list(self._waiting.values()), {}
        for slot in left:
            slot[0].set()

    def run(self, work: Path, io: Path, timeout: float) -> tuple[int, float, bool] | None:
        """``(returncode, seconds, timed out)`` of one job, or None when the server died meanwhile."""
        slot: list = [threading.Event(), None]
        with self._lock:
            if not self.alive:
                return None
            ident = str(next(self._ids))
            self._waiting[ident] = slot
            try:
                self.proc.stdin.write(f"{ident}\t{timeout}\t{work}\t{io}\n".encode())
                self.proc.stdin.flush()
            except OSError:  # the server is gone and the reader has not seen it yet
                self._waiting.pop(ident, None)
                self.alive = False
                return None
        if not slot[0].wait(timeout + 120):
            raise SandboxError("the sandbox's fork server stopped answering")
        return slot[1]

    def close(self) -> None:
        """Stop the server (it kills its children first); safe to call twice."""
        if self._log.closed:
            return
        try:
            self.proc.stdin.close()
            self.proc.wait(timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            if self.proc.poll() is None:
                os.killpg(self.proc.pid, signal.SIGKILL)  # its own session, started for it, not yet reaped
                self.proc.wait()
        self._log.close()


class Sandbox:
    """Runs :class:`Job` s in fresh, limited processes; :meth:`map` scores a batch in parallel.

    ``namespaces``: ``"auto"`` uses a user and network namespace when this machine allows it,
    ``True`` requires one (:class:`SandboxError` otherwise), ``False`` does without.
    ``workers``: processes run at once by :meth:`map` (default: the number of CPUs).
    ``fork_server``: fork each job from a clean interpreter started once (~10x faster than
    starting one per job; it never runs job code, so reusing it is safe). ``False`` starts a new
    interpreter for every job.
    """

    def __init__(self, limits: Limits | None = None, *, namespaces: bool | str = "auto",
                 workers: int | None = None, python: str | None = None, fork_server: bool = True):
        if namespaces not in ("auto", True, False):
            raise ValueError(f"namespaces={namespaces!r}: use 'auto', True or False")
        self.limits = limits or Limits()
        self.python = os.path.realpath(python or sys.executable)
        self.workers = max(1, workers or os.cpu_count() or 1)
        works, why = _namespaces_work(self.python) if namespaces else (False, "switched off")
        if namespaces is True and not works:
            raise SandboxError(f"namespaces=True but {why}; use namespaces='auto' to run without them")
        self.isolation = Isolation(network_namespace=works, kernel_process_limit=os.geteuid() != 0,
                                   reason=why)
        self._parent_netns = _netns()
        self._pool: ThreadPoolExecutor | None = None
        self.fork_server = fork_server
        self._server: _ForkServer | None = None
        self._server_lock = threading.Lock()

    # ------------------------------------------------------------------ one job

    def command(self, source: str | None = None) -> list[str]:
        """The command line of a job's process (or, with ``_SERVE``, of the fork server)."""
        cmd = [self.python, "-I", "-S", "-B", "-c", _BOOTSTRAP if source is None else source]
        if self.isolation.network_namespace:
            cmd = [shutil.which("unshare") or "unshare", "--user", "--net", "--", *cmd]
        return cmd

    def _fork_server(self) -> _ForkServer:
        with self._server_lock:
            if self._server is None or not self._server.alive:
                if self._server is not None:
                    self._server.close()
                self._server = _ForkServer(self.command(_SERVE))
                weakref.finalize(self, self._server.close)
            return self._server

    def run(self, job: Job) -> Result:
        """Run one job; returns within ``limits.timeout`` plus process start-up and clean-up."""
        limits = self.limits
        nonce = secrets.token_hex(16)
        with tempfile.TemporaryDirectory(prefix="ugrpo-sandbox-") as tmp:
            work = Path(tmp) / "work"
            work.mkdir(mode=0o700)
            io = Path(tmp) / "io"
            io.mkdir(mode=0o700)
            result_fd = os.open(io / "results", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
            try:
                payload = {
                    "nonce": nonce, "result_fd": 3 if self.fork_server else result_fd,
                    "limits": {"memory_bytes": limits.memory_mb << 20, "cpu_seconds": limits.cpu,
                               "output_bytes": limits.output_bytes, "open_files": limits.open_files,
                               "max_files": limits.max_files},
                    "denied_modules": list(DENIED_MODULES),
                    "solution": job.solution, "tests": list(job.tests), "entry_point": job.entry_point,
                    "setup": job.setup, "context": job.context, "candidate_name": job.candidate_name,
                }
                (io / "job").write_bytes(marshal.dumps(payload))
                if self.fork_server:
                    answer = self._fork_server().run(work, io, limits.timeout)
                    # None: the server died under this job (which cannot reach it): a crash, not a verdict
                    returncode, seconds, timed_out = answer if answer is not None else (None, 0.0, False)
                else:
                    returncode, seconds, timed_out = self._spawn(io, work, result_fd)
            finally:
                os.close(result_fd)
            lines = (io / "results").read_bytes().decode("utf-8", errors="replace").splitlines()
            # no stderr file: the job never started (its fork server died before forking it)
            err = io / "stderr"
            stderr = err.read_bytes()[-4 * limits.stderr_chars:].decode("utf-8", errors="replace") if err.exists() else ""
        return self._result(job, nonce, lines, returncode, seconds, timed_out, stderr[-limits.stderr_chars:])

    def _spawn(self, io: Path, work: Path, result_fd: int) -> tuple[int, float, bool]:
        env = {**_ENV, "HOME": str(work), "TMPDIR": str(work)}
        with open(io / "job", "rb") as stdin, open(io / "stdout", "wb") as out, open(io / "stderr", "wb") as err:
            start = time.perf_counter()
            proc = subprocess.Popen(self.command(), stdin=stdin, stdout=out, stderr=err, cwd=work, env=env,
                                    pass_fds=(result_fd,), start_new_session=True, close_fds=True)
            timed_out = False
            try:
                proc.wait(timeout=self.limits.timeout)
            except subprocess.TimeoutExpired:
                timed_out = True
            finally:
                # The child leads its own new process group; kill it (and anything it left) before reaping.
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
                proc.wait()
            return proc.returncode, time.perf_counter() - start, timed_out

    def _result(self, job: Job, nonce: str, lines: list[str], returncode: int | None, seconds: float,
                timed_out: bool, stderr: str) -> Result:
        records: list[tuple[str, object]] = []
        for line in lines:
            head, _, rest = line.partition(" ")
            if head != nonce:
                continue  # written by the job's code, which does not know the nonce
            kind, _, data = rest.partition(" ")
            try:
                records.append((kind, ast.literal_eval(data)))
            except (ValueError, SyntaxError, MemoryError, RecursionError):
                continue
        facts = next((d for k, d in records if k == "facts"), None)
        if facts is None and not timed_out and "unshare" in stderr:
            raise SandboxError(f"the sandbox could not start: {stderr.strip()[:300]}")
        if facts is not None:
            self._verify(facts)
        total = len(job.tests)
        ok = sorted({d for k, d in records if k == "ok" and isinstance(d, int) and 0 <= d < total})
        failures = [d for k, d in records if k == "fail"]
        blocked = [f"{d.get('event')}: {d.get('what')}" for k, d in records if k == "blocked" and isinstance(d, dict)]
        done = next((d for k, d in records if k == "done"), None)
        defined = next((d for k, d in records if k == "defined"), {}) or {}
        errors = list(done.get("errors", [])) if isinstance(done, dict) else []
        if next((d for k, d in records if k == "harness_error"), None) == "MemoryError":
            errors.append("MemoryError")
        if timed_out or returncode == -signal.SIGXCPU:
            status = "timeout"
        elif returncode == -signal.SIGKILL and done is None:  # not ours: the kernel's out-of-memory killer
            status = "memory"
        elif "MemoryError" in errors or defined.get("error") == "MemoryError":
            status = "memory"
        elif blocked:
            status = "blocked"
        elif done is None:
            status = "crashed"
        else:
            status = "passed" if len(ok) == total and total > 0 else "failed"
        return Result(status=status, passed=len(ok), total=total, seconds=round(seconds, 4), blocked=blocked,
                      failures=failures, stderr=stderr, solution_error=defined.get("error"))

    def _verify(self, facts: dict) -> None:
        """Refuse a run whose measured isolation is weaker than :attr:`isolation` claims."""
        problems = []
        limits = self.limits
        wanted = {"RLIMIT_AS": limits.memory_mb << 20, "RLIMIT_CPU": limits.cpu,
                  "RLIMIT_FSIZE": limits.output_bytes, "RLIMIT_NOFILE": limits.open_files, "RLIMIT_NPROC": 0,
                  "RLIMIT_CORE": 0}
        got = facts.get("limits", {})
        problems += [f"{k} is {got.get(k)!r}, not {v}" for k, v in wanted.items() if got.get(k) != v]
        if self.isolation.network_namespace and facts.get("netns") in (None, self._parent_netns):
            problems.append("the child shares the trainer's network namespace")
        if self.isolation.kernel_process_limit and facts.get("uid") == 0:
            problems.append("the child runs as root, so RLIMIT_NPROC is not enforced")
        if problems:
            raise SandboxError("sandbox isolation is weaker than reported (" + self.isolation.summary() + "): "
                               + "; ".join(problems))

    # ------------------------------------------------------------------ a batch

    def map(self, jobs: Iterable[Job]) -> list[Result]:
        """Run jobs ``workers`` at a time, results in input order.

        Every job gets a fresh process: a process that ran a completion is never reused, since
        the code may have changed anything in it. What is reused is what never ran job code: the
        fork server the processes are forked from, the threads and the measured isolation.
        """
        jobs = list(jobs)
        if len(jobs) <= 1 or self.workers == 1:
            return [self.run(j) for j in jobs]
        if self._pool is None:
            self._pool = ThreadPoolExecutor(max_workers=self.workers, thread_name_prefix="sandbox")
        return list(self._pool.map(self.run, jobs))

    def close(self) -> None:
        """Stop the thread pool and the fork server (both start again when needed)."""
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None
        with self._server_lock:
            if self._server is not None:
                self._server.close()
                self._server = None

    def __enter__(self) -> "Sandbox":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
