"""GSM8K with a calculator: the model may call ``calculate(expression)`` between turns.

The data and the grader are GSM8K's (:mod:`unsloth_grpo.tasks.gsm8k`); only the system prompt
changes, offering the tool. The rewards that come with tool use read the whole transcript
(:mod:`unsloth_grpo.tools.transcript`):

- ``tool_call_format``: credit for a well-formed call, in steps, so a model that has never
  called a tool gets a gradient: 0.25 for trying (the call marker), 0.5 for naming a tool
  the run offers, 0.75 for giving exactly its arguments, 1.0 when the call also ran
  without error;
- ``tool_call_budget``: a penalty for each call beyond a budget, so calling is not free;
- ``correctness`` (the library's) grades the final answer with GSM8K's grader, as evaluation does.

    >>> fn = tool_call_format()
    >>> call = {"type": "function", "function": {"name": "calculate", "arguments": {"expression": "2+2"}}}
    >>> fn([[{"role": "assistant", "content": "", "tool_calls": [call]},
    ...      {"role": "tool", "name": "calculate", "content": "4"}]])
    [1.0]
"""

from __future__ import annotations

import inspect
from typing import Any, Sequence

from unsloth_grpo.rewards._registry import RewardFunc, register
from unsloth_grpo.tasks import gsm8k
from unsloth_grpo.tools import transcript

SYSTEM_PROMPT = (
    "Solve the problem. You may call the calculate tool for any arithmetic; its result comes back "
    "to you. Put only the final number inside <answer></answer>."
)

#: Rewards the recipe uses unless the config lists its own.
DEFAULT_REWARDS = [
    {"name": "tool_call_format", "weight": 0.5},
    {"name": "tool_call_budget", "weight": 1.0},
    {"name": "correctness", "weight": 1.0},
]

#: The marker a call starts with in the built-in tiny model's template; a completion that holds it
#: but did not parse into a call still earns the first step of credit.
CALL_MARKERS = ("<tool_call>",)


def _parameters(tool_names: Sequence[str]) -> dict[str, set[str]]:
    from unsloth_grpo.tools import resolve_tool

    out = {}
    for name in tool_names:
        fn = resolve_tool(name)
        out[fn.__name__] = {p for p in inspect.signature(fn).parameters if p != "self"}
    return out


def call_score(completion: Any, parameters: dict[str, set[str]]) -> float:
    """Credit of a completion's first call (see the module docstring for the steps)."""
    found = transcript.calls(completion)
    if not found:
        text = "".join(m.get("content") or "" for m in transcript.messages(completion)
                       if isinstance(m.get("content"), str))
        return 0.25 if any(marker in text for marker in CALL_MARKERS) else 0.0
    first = found[0]
    if first["name"] not in parameters:
        return 0.25
    arguments = first["arguments"] if isinstance(first["arguments"], dict) else {}
    if set(arguments) != parameters[first["name"]]:
        return 0.5
    results = transcript.results(completion)
    if not results or transcript.is_error(results[0]):
        return 0.75
    return 1.0


@register("tool_call_format", family="tools", low=0.0, high=1.0)
def tool_call_format(*, tools: Sequence[str] = ("calculate",)) -> RewardFunc:
    """Stepped credit for a well-formed tool call: tried, known tool, right arguments, ran without error.

    ``tools``: the names (or import paths) of the tools the run offers.
    """
    parameters = _parameters(tools)

    def reward_fn(completions, **kwargs) -> list[float | None]:
        return [call_score(c, parameters) for c in completions]

    reward_fn.__name__ = "tool_call_format"
    return reward_fn


@register("tool_call_budget", family="tools", low=float("-inf"), high=0.0)
def tool_call_budget(*, budget: int = 2, penalty: float = 0.25) -> RewardFunc:
    """Minus ``penalty`` for every call beyond ``budget`` calls in one completion (0 within budget)."""
    if budget < 0 or penalty < 0:
        raise ValueError(f"budget={budget} and penalty={penalty} must both be >= 0")

    def reward_fn(completions, **kwargs) -> list[float | None]:
        return [-penalty * max(0, len(transcript.calls(c)) - budget) for c in completions]

    reward_fn.__name__ = "tool_call_budget"
    return reward_fn


def is_correct(completion: Any, gold: str) -> bool:
    """GSM8K's verdict on the model's final answer (tool results are not the model's answer)."""
    return gsm8k.is_correct(transcript.final_text(completion), gold)


def grader_for(cfg):
    return is_correct


def load_dataset_for(cfg):
    """GSM8K rows (hub, file or synthetic) with the tool-offering system prompt."""
    import dataclasses

    d = cfg.data
    if d.system_prompt is None:
        cfg = dataclasses.replace(cfg, data=dataclasses.replace(d, system_prompt=SYSTEM_PROMPT))
    return gsm8k.load_dataset_for(cfg)
