"""Tasks: each module holds one :class:`Task` (its data, prompt, format, grader, rewards and evaluation).

The registry is the package itself: every public module is a task named after it, holding its
:class:`Task` as ``TASK`` and its recipe (defaults and presets) as ``RECIPE``. The rewards a task
module declares join the reward registry when this registry loads the module; the reward registry
knows which task declares which reward name (:data:`unsloth_grpo.rewards._registry.TASK_REWARDS`) and
loads this package for one of them, so a reward name of a task (``countdown_equation``) is looked up
anywhere, whatever was imported first.
:func:`get_task` is the one way to find a task by name (a module is imported only when its task is
asked for), and every list of task names, in help text, CLI choices or errors, is
:func:`available_tasks`.

    >>> from unsloth_grpo.tasks import get_task
    >>> task = get_task("countdown")
    >>> task.grade("<answer>(3 + 4) * 2</answer>", '{"numbers": [3, 4, 2], "target": 14}').correct
    True
"""

from __future__ import annotations

import difflib
import importlib
import pkgutil

from unsloth_grpo.rewards._registry import REGISTRY, TASK_REWARDS
from unsloth_grpo.tasks._task import Grader, Task, reasoned_completion


def available_tasks() -> list[str]:
    """Names of the tasks shipped in this package (its public modules)."""
    return sorted(m.name for m in pkgutil.iter_modules(__path__) if not m.name.startswith("_"))


def unknown_task_message(name: str) -> str:
    """What to tell a user who named no task of this package: the nearest name and every name."""
    close = difflib.get_close_matches(str(name), available_tasks(), n=1)
    hint = f"did you mean '{close[0]}'? " if close else ""
    return f"task='{name}' is not a task of this package; {hint}choose one of: {', '.join(available_tasks())}"


def get_task(name: str) -> Task:
    """The task called ``name``; a ``ConfigError`` (a ``ValueError``) naming the valid ones otherwise."""
    if name not in available_tasks():
        from unsloth_grpo.config import ConfigError

        raise ConfigError(unknown_task_message(name))
    module = importlib.import_module(f"{__name__}.{name}")
    REGISTRY.declare(module)  # a task's rewards are known from the moment the registry loads it
    task = module.TASK
    assert isinstance(task, Task) and task.name == name, f"tasks/{name}.py must define TASK, a Task named {name!r}"
    return task


def get_recipe(name: str):
    """The recipe of the task called ``name`` (its defaults and presets, :class:`~unsloth_grpo.tasks._recipe.Recipe`),
    which its module keeps as ``RECIPE`` beside the task; a ``ConfigError`` naming the valid tasks otherwise."""
    get_task(name)
    recipe = importlib.import_module(f"{__name__}.{name}").RECIPE
    assert recipe.name == name, f"tasks/{name}.py must define RECIPE, a Recipe named {name!r}"
    return recipe


def _task_modules(reward: str | None):
    """The reward registry's finder: the task module that declares ``reward``, loaded by this registry
    (:data:`~unsloth_grpo.rewards._registry.TASK_REWARDS` says which; none for a name no task declares),
    or every task module for None (the whole list)."""
    owner = TASK_REWARDS.get(reward) if reward is not None else None
    for name in available_tasks() if reward is None else [owner] if owner in available_tasks() else []:
        get_task(name)
        yield importlib.import_module(f"{__name__}.{name}")


# A task's reward (countdown_equation, tests_passed, ...) is found through this registry: the rewards
# package sits below the tasks and imports none of their modules (it loads this package by name, on demand).
REGISTRY.add_finder(_task_modules)

__all__ = ["Grader", "Task", "available_tasks", "get_recipe", "get_task", "reasoned_completion",
           "unknown_task_message"]
