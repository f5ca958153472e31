"""Console lines from third-party libraries that a user can do nothing about, silenced in one place.

Each entry names a library logger and why its warnings are dropped (errors still show)::

    from unsloth_grpo.hardware.console import quiet_third_party
    quiet_third_party()   # before torch / peft / bitsandbytes are imported
"""

from __future__ import annotations

import logging

#: logger name -> why its warnings say nothing a user of this package can act on
QUIETED = {
    # torchao registers its enums through a deprecated torch API; torch logs one line per enum at import
    "torch.utils._pytree": "torchao's enum registration, deprecated inside torch",
    # printed on CPUs with AVX512-BF16 when the optional `kernels` package is missing; training never
    # runs bitsandbytes' 4-bit CPU kernel
    "bitsandbytes.backends.cpu.ops": "an optional CPU 4-bit kernel this package never uses",
}


def quiet_third_party() -> None:
    """Raise the listed loggers to ERROR (idempotent, imports nothing)."""
    for name in QUIETED:
        logging.getLogger(name).setLevel(logging.ERROR)


__all__ = ["QUIETED", "quiet_third_party"]
