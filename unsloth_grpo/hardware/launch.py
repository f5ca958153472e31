"""Which process this is in a launch, and the address of a vLLM server.

Reads the variables torchrun and ``accelerate launch`` export to each process (no torch
import), so the loader, the doctor and training all see the same layout before anything loads::

    layout = detect()                  # world size, rank, launcher, DDP/FSDP/DeepSpeed
    layout.is_main                     # rank 0, or the only process

The batch arithmetic and the checks of a multi-process run are
:mod:`unsloth_grpo.training.distributed`'s.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping
from urllib.parse import urlsplit

#: Port ``vllm serve`` / ``trl vllm-serve`` listens on unless told otherwise.
DEFAULT_VLLM_SERVER_PORT = 8000


def _env_int(env: Mapping[str, str], *names: str, default: int) -> int:
    for name in names:
        value = env.get(name)
        if value not in (None, ""):
            try:
                return int(value)
            except ValueError:
                raise ValueError(f"environment variable {name}={value!r} is not an integer") from None
    return default


def _env_true(env: Mapping[str, str], name: str) -> bool:
    return env.get(name, "").strip().lower() in ("1", "true", "yes")


@dataclass(frozen=True)
class Layout:
    """Where this process sits in a launch. A plain ``python ...`` run is world size 1, rank 0."""

    world_size: int = 1
    rank: int = 0
    local_rank: int = 0
    local_world_size: int = 1
    launcher: str = "none"  # "torchrun", "accelerate" (which runs torchrun underneath) or "none"
    strategy: str = "single"  # "single", "ddp", "fsdp" or "deepspeed"
    zero_stage: int | None = None  # DeepSpeed ZeRO stage when the accelerate config names one

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        return self.world_size > 1

    @property
    def nodes(self) -> int:
        return max(1, math.ceil(self.world_size / max(1, self.local_world_size)))

    @property
    def strategy_label(self) -> str:
        if self.strategy == "deepspeed":
            return f"DeepSpeed ZeRO-{self.zero_stage}" if self.zero_stage is not None else "DeepSpeed"
        return {"single": "single process", "ddp": "DDP", "fsdp": "FSDP"}[self.strategy]

    def summary(self) -> str:
        if not self.distributed:
            return "1 process"
        parts = [f"{self.nodes} nodes x {self.local_world_size}" if self.nodes > 1 else "1 node"]
        parts += [self.launcher] if self.launcher != "none" else []
        return f"{self.world_size} processes ({'; '.join(parts + [self.strategy_label])})"


def detect(env: Mapping[str, str] | None = None) -> Layout:
    """Read the launch from the variables torchrun and ``accelerate launch`` export to each process.

    torchrun sets WORLD_SIZE, RANK, LOCAL_RANK and LOCAL_WORLD_SIZE; ``accelerate launch`` runs
    torchrun underneath for several processes and adds ACCELERATE_* variables naming FSDP or
    DeepSpeed. A single ``accelerate launch`` process (or plain python) has no WORLD_SIZE.
    """
    env = os.environ if env is None else env
    world = _env_int(env, "WORLD_SIZE", default=1)
    rank = _env_int(env, "RANK", default=0)
    local_rank = _env_int(env, "LOCAL_RANK", default=0)
    local_world = _env_int(env, "LOCAL_WORLD_SIZE", default=world)
    if world < 1 or not 0 <= rank < world:
        raise ValueError(f"inconsistent launch: RANK={rank} with WORLD_SIZE={world}; start through torchrun or "
                         "accelerate launch rather than setting these by hand")
    accelerate = "ACCELERATE_MIXED_PRECISION" in env  # exported by every kind of ``accelerate launch``
    if "TORCHELASTIC_RUN_ID" in env or world > 1:
        launcher = "accelerate" if accelerate else "torchrun"
    else:
        launcher = "accelerate" if accelerate else "none"
    zero = None
    if _env_true(env, "ACCELERATE_USE_DEEPSPEED"):
        strategy = "deepspeed"
        zero = _env_int(env, "ACCELERATE_DEEPSPEED_ZERO_STAGE", default=-1)
        zero = None if zero < 0 else zero
    elif _env_true(env, "ACCELERATE_USE_FSDP"):
        strategy = "fsdp"
    else:
        strategy = "ddp" if world > 1 else "single"
    return Layout(world, rank, local_rank, local_world, launcher, strategy, zero)


# ---------------------------------------------------------------- a vLLM server


def parse_vllm_server(value: str) -> tuple[str, str, int]:
    """``'host:port'``, ``'host'`` or ``'http://host:port'`` -> (base URL, host, port)."""
    text = str(value).strip()
    parts = urlsplit(text if "://" in text else f"http://{text}")
    try:
        port = parts.port or DEFAULT_VLLM_SERVER_PORT
    except ValueError:
        port = -1
    if parts.scheme not in ("http", "https") or not parts.hostname or port < 1:
        raise ValueError(f"model.vllm_server='{value}' is not a server address; write host:port, e.g. "
                         f"localhost:{DEFAULT_VLLM_SERVER_PORT} or http://10.0.0.5:{DEFAULT_VLLM_SERVER_PORT}")
    base = f"{parts.scheme}://{parts.hostname}:{port}{parts.path.rstrip('/')}"
    return base, parts.hostname, port
