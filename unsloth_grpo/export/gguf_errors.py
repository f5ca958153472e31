"""The one error the GGUF writer raises, in a module of its own so that every part of the writer can import it."""

from __future__ import annotations


class GGUFError(RuntimeError):
    """The model or the request cannot be written as GGUF; the message says why and what to do instead."""


__all__ = ["GGUFError"]
