"""The doctor's probes, each replaceable: torch and the GPUs it sees, the driver, the network, the disk.

:func:`probe_torch` is the only heavy import the doctor makes. The network probes never wait
much longer than their timeout (:func:`tcp_probe`, :func:`http_health_probe`); :func:`hub_address`
and :func:`hf_cache_dir` read the hub's address and cache folder from the environment the way
huggingface_hub does; :func:`hub_unreachable` and :func:`hub_model_problem` say, in one short probe,
that the hub cannot serve a model (the loader for inference asks them too).
"""

from __future__ import annotations

import os
import shutil
import socket
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping
from urllib.parse import urlsplit

from unsloth_grpo.hardware.profiles import CardProfile

HUB_TIMEOUT_S = 1.5
SERVER_TIMEOUT_S = 2.0
DEFAULT_VLLM_PORT = 8000


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


def truthy(value: str | None) -> bool:
    """Whether an environment variable's value means "on" (1, true, yes, on; any case)."""
    return str(value).strip().lower() in {"1", "true", "yes", "on"}


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
    if any(truthy(env.get(k)) for k in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")):
        return "offline mode is on (HF_HUB_OFFLINE)"
    host, port = hub_address(env)
    ok, detail = probe(host, port, HUB_TIMEOUT_S)
    return None if ok else f"the hub {host} does not answer ({detail})"


def hub_model_problem(name: str, *, env: Mapping[str, str] | None = None,
                      hub_probe: Callable[[str, int, float], tuple[bool, str]] = tcp_probe,
                      cache_dir: str | None = None) -> tuple[str, str] | None:
    """(the problem, the fix) when the hub id ``name`` cannot load here: not in the local cache while the
    hub is off (offline mode, or no answer within 1.5 s), which the libraries find out only after ~25 s
    of retries; the fix names the nearest cached or built-in id, and for a name with no ``org/`` (a
    hub id is ``org/name``) a mistyped folder. None when it may load."""
    import difflib

    from unsloth_grpo.hardware.architecture import BUILTIN_HUB_IDS

    env = dict(os.environ if env is None else env)
    cache = cache_dir or hf_cache_dir(env)
    if _in_cache(name, cache):
        return None
    why = hub_unreachable(env, hub_probe)
    if why is None:
        return None
    known = _cached_repos(cache) + list(BUILTIN_HUB_IDS.values())
    close = difflib.get_close_matches(name, known, n=1, cutoff=0.75)
    hint = f"did you mean '{close[0]}'? " if close else ""
    folder = "" if "/" in name else f"there is no folder '{name}' here (a mistyped run or model directory?), and "
    return (f"model '{name}' is not in the local cache ({cache}) and {why}",
            f"{hint}{folder}use a cached model or a local directory, or run once with network to download it")
