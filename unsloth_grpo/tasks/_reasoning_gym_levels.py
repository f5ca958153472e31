"""The reasoning_gym task's curriculum: levels from reasoning-gym's own curriculum classes.

A ``data.datasets`` entry with ``curriculum: true`` (or a mapping of :data:`CURRICULUM_DEFAULTS`' keys)
trains that dataset at a level that moves with GRPO's groups (the rule and the wiring:
:mod:`unsloth_grpo.training.curriculum`). Level ``L`` is reasoning-gym's ``set_global_level(L)`` on the
dataset's curriculum class, its config ``generate_configuration`` at that level over the entry's own config;
the fields the curriculum sets (``min_terms``/``max_terms`` ...) are therefore refused in the entry's config.
The rows at a level are a pool generated once, as many as the dataset's training rows, with a seed of its own
(:data:`LEVEL_SEED_STRIDE`); the start level's pool is the training rows themselves. A training row keeps its
``curriculum_slot`` (its place in its dataset's rows) and is served from the same slot of the current level's
pool, so the sampler's order, and refill's draws by index, are unchanged.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, Callable

#: A curriculum entry's keys and defaults: the share of groups all right (``up``) or all wrong (``down``) over
#: the last ``window`` optimizer steps that moves the level, and the level training starts at.
CURRICULUM_DEFAULTS = {"up": 0.9, "down": 0.9, "window": 5, "start_level": 0, "unanswered": "hold"}
#: What a group whose completions hold no answer block counts as (unsloth_grpo.training.curriculum).
UNANSWERED = ("hold", "down")

#: Added to a dataset's seed per level away from the start level, so each level's pool has its own questions
#: (reasoning-gym draws item ``i`` from ``seed + i``; the held-out split is at ``seed + 1,000,000``).
LEVEL_SEED_STRIDE = 10_000_000


def _curricula():
    from reasoning_gym import factory

    return factory


def curriculum_fields(name: str) -> list[str]:
    """The config fields that ``name``'s curriculum sets at each level."""
    fields = []
    for attr in _curricula().create_curriculum(name).attributes.values():
        fields += [attr.lower_field_name, attr.upper_field_name] if hasattr(attr, "lower_field_name") \
            else [attr.field_name]
    return fields


def highest_level(name: str) -> int:
    """The last level of ``name``'s curriculum (its longest attribute's)."""
    return max((len(a.levels) - 1 for a in _curricula().create_curriculum(name).attributes.values()), default=0)


def level_config(name: str, config: dict, level: int) -> dict:
    """``config`` with the fields ``name``'s curriculum sets at ``level``."""
    curriculum = _curricula().create_curriculum(name)
    curriculum.set_global_level(level)
    built = curriculum.generate_configuration({**config, "seed": 0, "size": 1})
    return {**config, **{f: getattr(built, f) for f in curriculum_fields(name)}}


def level_pools(spec) -> list[tuple[int, dict, int]]:
    """Every pool a curriculum entry (a parsed ``Spec``) can train on: ``(level, config, seed)`` for each of
    its dataset's levels, as :meth:`Levels.rows` generates them. A held-out split removes the questions of all
    of them, not only the start level's: a run that moves trains on the other pools too."""
    start = spec.curriculum["start_level"]
    return [(level, level_config(spec.name, spec.config, level), spec.seed + LEVEL_SEED_STRIDE * (level - start))
            for level in range(highest_level(spec.name) + 1)]


def settings(raw: Any) -> dict | None:
    """An entry's ``curriculum`` value as a full mapping (None when off)."""
    if raw is None or raw is False:
        return None
    return {**CURRICULUM_DEFAULTS, **(raw if isinstance(raw, dict) else {})}


def curriculum_problems(name: str, raw: Any, config: dict, label: str) -> list[str]:
    """What is wrong with an entry's ``curriculum`` (``raw``) for dataset ``name`` with ``config``."""
    if raw is None or raw is False:
        return []
    factory = _curricula()
    if not factory.has_curriculum(name):
        with_one = sum(1 for n in factory.DATASETS if factory.has_curriculum(n))
        return [f"{label}.curriculum: '{name}' has no curriculum in reasoning-gym (no levels to move between; "
                f"{with_one} of its {len(factory.DATASETS)} datasets have one); drop curriculum for this entry"]
    if raw is not True and not isinstance(raw, dict):
        return [f"{label}.curriculum must be true or a mapping of {', '.join(CURRICULUM_DEFAULTS)}, got {raw!r}"]
    out = [f"{label}.curriculum.{k}: unknown key; it takes {', '.join(CURRICULUM_DEFAULTS)}"
           for k in (raw if isinstance(raw, dict) else {}) if k not in CURRICULUM_DEFAULTS]
    s = settings(raw)
    for key in ("up", "down"):
        v = s[key]
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 < v <= 1:
            out.append(f"{label}.curriculum.{key}={v!r} must be a share of groups above 0 and at most 1")
    top = highest_level(name)
    if s["unanswered"] not in UNANSWERED:
        out.append(f"{label}.curriculum.unanswered={s['unanswered']!r} must be one of {', '.join(UNANSWERED)} "
                   "(a group that wrote no answer: the level holds, or it counts as all wrong)")
    for key, low, high in (("window", 1, None), ("start_level", 0, top)):
        v = s[key]
        if isinstance(v, bool) or not isinstance(v, int) or v < low or (high is not None and v > high):
            out.append(f"{label}.curriculum.{key}={v!r} must be a whole number from {low}"
                       + (f" to {high} ({name}'s levels)" if high is not None else ""))
    set_by_levels = [k for k in config if k in curriculum_fields(name)]
    if set_by_levels:
        out.append(f"{label}.config sets {', '.join(set_by_levels)}, which {name}'s curriculum sets at each level; "
                   "drop them, or drop curriculum")
    return out


class Levels:
    """The :class:`~unsloth_grpo.training.curriculum.LevelSource` of a run's curriculum datasets."""

    grading_reward = "reasoning_gym_correct"

    def __init__(self, specs, train_sizes: list[int], make_rows: Callable[[Any, int, int], list[dict]]) -> None:
        chosen = [(s, n) for s, n in zip(specs, train_sizes) if s.curriculum is not None]
        self.specs = {s.name: (s, n) for s, n in chosen}
        self.make_rows = make_rows  # (spec, rows, seed) -> the task's prompt and answer rows
        self.start = {s.name: s.curriculum["start_level"] for s, _ in chosen}
        self.rules = {s.name: {"up": s.curriculum["up"], "down": s.curriculum["down"],
                               "window": s.curriculum["window"], "highest": highest_level(s.name),
                               "unanswered": s.curriculum["unanswered"]}
                      for s, _ in chosen}

    @staticmethod
    def answered(completion: Any) -> bool:
        """Whether ``completion`` holds an answer block the grade reads (several blocks count: an answer was
        tried); a group where no completion has one is judged by ``unanswered``."""
        from unsloth_grpo.grading import find_answer

        return find_answer(completion)[1] != "no_answer"

    @functools.lru_cache(maxsize=64)
    def rows(self, name: str, level: int) -> list[dict[str, Any]]:
        """``name``'s pool at ``level``: ``prompt`` and ``answer`` rows in reasoning-gym's order."""
        spec, n = self.specs[name]
        _, config, seed = level_pools(spec)[level]
        rows = self.make_rows(dataclasses.replace(spec, config=config), n, seed)
        if not rows:
            from unsloth_grpo.data import DataError

            raise DataError(f"reasoning_gym: {name} at curriculum level {level} gave no gradable question")
        return rows
