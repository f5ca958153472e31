"""Task modules: each owns its data loader, answer extraction, rewards and evaluation.

A task module provides ``load_dataset_for(cfg)`` returning a dataset with ``prompt`` and
``answer`` columns, and ``DEFAULT_REWARDS``.
"""

from __future__ import annotations

import pkgutil


def available_tasks() -> list[str]:
    """Names of the task modules shipped in this package."""
    return sorted(m.name for m in pkgutil.iter_modules(__path__) if not m.name.startswith("_"))
