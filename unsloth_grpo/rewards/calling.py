"""How a reward function is called: the way TRL's ``GRPOTrainer`` calls it, everywhere.

TRL 1.x calls every reward function with keywords only::

    fn(prompts=..., completions=..., completion_ids=..., trainer_state=..., log_extra=...,
       log_metric=..., **dataset_columns)        # and environments=... when the run has one

After a chat prompt each completion is a list of messages, ``[{"role": "assistant", "content":
text}]``; after a plain-text prompt it is the text. A reward written for TRL (the signatures the
notebooks and TRL's docs use, ``def correctness(prompts, completions, answer, **kwargs)`` or
``def fmt(completions, **kwargs)`` reading ``completion[0]["content"]``) therefore works here
unchanged only if every caller does the same. Training (the validation wrapper), the reward lab
and the check that tries each reward before the model loads all go through :func:`call_reward`,
and the callers outside training build TRL's keywords with :func:`trl_keywords`::

    >>> def fmt(completions, **kwargs):
    ...     return [1.0 if c[0]["content"].startswith("<answer>") else 0.0 for c in completions]
    >>> prompts = [[{"role": "user", "content": "2+2?"}]]
    >>> call_reward(fmt, [as_completion("<answer>4</answer>", prompts[0])], **trl_keywords(prompts))
    [1.0]
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import threading
from types import SimpleNamespace
from typing import Any, Callable, Sequence

#: Keywords TRL passes to every reward that are not dataset columns (``environments`` only with an
#: environment); ``completions`` is the first argument of :func:`call_reward`.
TRL_KEYWORDS = ("prompts", "completion_ids", "trainer_state", "log_extra", "log_metric", "environments")
#: Of those, the ones that are not one value per completion.
RUN_WIDE = ("trainer_state", "log_extra", "log_metric")


def completion_batch(completions: Any, name: str) -> list:
    """``completions`` as a list, or a TypeError for one bare string: a reward scores a batch (TRL passes
    a list, one completion per sample), and a string would be scored one character at a time."""
    if isinstance(completions, (str, bytes)):
        raise TypeError(f"reward {name!r}: completions must be a list of completions, one per sample (each a "
                        f"string or a list of chat messages), not one string ({str(completions)[:40]!r}); "
                        "wrap it in a list: completions=[text]")
    return list(completions)


def refusing_one_string(fn: Callable, name: str) -> Callable:
    """``fn`` that refuses a bare string for ``completions`` (:func:`completion_batch`); its name, doc
    and attributes (a correctness reward's ``.grader``) are kept."""

    @functools.wraps(fn)
    def reward(completions, **kwargs):
        return fn(completions=completion_batch(completions, name), **kwargs)

    return reward


def call_reward(fn: Callable, completions: Sequence[Any], **kwargs: Any) -> Any:
    """``fn``'s values for ``completions``, called exactly as TRL calls it: every argument by keyword.

    An ``async def`` reward (TRL accepts those too) is awaited here, so every caller gets values.
    """
    values = fn(completions=completions, **kwargs)
    if inspect.isawaitable(values):
        values = _wait(values)
    return values


def _wait(awaitable) -> Any:
    """The result of ``awaitable``, also when called inside a running event loop (a notebook)."""

    async def result():
        return await awaitable

    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(result())
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box["value"] = asyncio.run(result())
        except BaseException as exc:  # noqa: BLE001 - re-raised in the caller's thread
            box["error"] = exc

    worker = threading.Thread(target=run)
    worker.start()
    worker.join()
    if "error" in box:
        raise box["error"]
    return box["value"]


def is_chat(prompt: Any) -> bool:
    """Whether ``prompt`` is a conversation (a list of role/content messages), as TRL decides it."""
    return isinstance(prompt, list) and bool(prompt) and all(isinstance(m, dict) and "role" in m for m in prompt)


def as_completion(completion: Any, prompt: Any) -> Any:
    """``completion`` shaped as TRL hands it to rewards after ``prompt``: the text wrapped as one
    assistant message after a chat prompt, unchanged otherwise (and when it is messages already)."""
    if isinstance(completion, str) and is_chat(prompt):
        return [{"role": "assistant", "content": completion}]
    return completion


def _ignore(*args: Any, **kwargs: Any) -> None:
    return None


def trainer_state_stand_in(max_steps: int = 0) -> Any:
    """What a reward sees as ``trainer_state`` before training starts: transformers' own
    ``TrainerState`` at step 0 when its module is loaded already, else a namespace with the fields
    rewards read. Importing it here would load transformers and peft before Unsloth in a training
    process (the check runs before the backend is chosen), and Unsloth must come first to patch them."""
    import sys

    if "transformers.trainer_callback" in sys.modules:
        from transformers import TrainerState

        return TrainerState(global_step=0, max_steps=max_steps)
    return SimpleNamespace(epoch=0.0, global_step=0, max_steps=max_steps, num_train_epochs=0, log_history=[],
                           is_local_process_zero=True, is_world_process_zero=True)


def trl_keywords(prompts: Sequence[Any] | None = None, *, completion_ids: Sequence[Any] | None = None,
                 columns: dict[str, Sequence[Any]] | None = None, trainer_state: Any = None,
                 environments: Sequence[Any] | None = None, max_steps: int = 0) -> dict[str, Any]:
    """The keywords TRL passes beside ``completions``, for a call outside training.

    ``prompts`` and ``completion_ids`` are passed when known (TRL always has them; a reward that
    needs them then says so by name instead of failing on a None); ``log_metric`` and ``log_extra``
    are callables that drop what they are given; ``trainer_state`` is :func:`trainer_state_stand_in`
    unless given. ``columns`` are the dataset columns, one value per completion.
    """
    out: dict[str, Any] = dict(columns or {})
    if prompts is not None:
        out["prompts"] = list(prompts)
    if completion_ids is not None:
        out["completion_ids"] = list(completion_ids)
    out.update(
        trainer_state=trainer_state if trainer_state is not None else trainer_state_stand_in(max_steps),
        log_extra=_ignore,
        log_metric=_ignore,
    )
    if environments is not None:
        out["environments"] = list(environments)
    return out


def one_sample(kwargs: dict[str, Any], i: int, n: int) -> dict[str, Any]:
    """The keywords of a call on ``n`` completions, cut to sample ``i`` alone: every per-completion
    list is sliced, the run-wide values are kept, and the logging hooks drop what they get (a
    re-run to find a failing sample must not log twice)."""
    out = {}
    for key, value in kwargs.items():
        if key in ("log_extra", "log_metric"):
            out[key] = _ignore
        elif key not in RUN_WIDE and isinstance(value, (list, tuple)) and len(value) == n:
            out[key] = value[i : i + 1]
        else:
            out[key] = value
    return out




# ---------------------------------------------------------------- records (the reward lab's JSONL rows)

#: Keys of a lab record that are not dataset columns.
RESERVED = ("completion", "group", "prompt", "completion_ids")


def _columns(records: Sequence[dict]) -> dict[str, list]:
    """The dataset columns of the records, one value per record (each reward gets them by name)."""
    keys = sorted({k for r in records for k in r if k not in RESERVED})
    return {k: [r.get(k) for r in records] for k in keys}


def reward_call(records: Sequence[dict], *, completion_ids: Sequence | None = None) -> tuple[list, dict]:
    """``(completions, keywords)`` for calling a reward on ``records`` as TRL calls it during training:
    a completion written as text after a chat prompt becomes one assistant message, ``prompts`` and
    ``completion_ids`` are passed (when every record holds them) beside every column."""
    prompts = [r["prompt"] for r in records] if all("prompt" in r for r in records) else None
    if completion_ids is None and all("completion_ids" in r for r in records):
        completion_ids = [r["completion_ids"] for r in records]
    completions = [as_completion(r["completion"], r.get("prompt")) for r in records]
    return completions, trl_keywords(prompts, completion_ids=completion_ids, columns=_columns(records))


__all__ = ["RESERVED", "RUN_WIDE", "TRL_KEYWORDS", "as_completion", "call_reward", "is_chat", "one_sample",
           "reward_call", "trainer_state_stand_in", "trl_keywords"]
