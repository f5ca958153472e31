"""GSM8K with a calculator: the model may call ``calculate(expression)`` between turns.

The data and the grader are GSM8K's (:mod:`unsloth_grpo.tasks.gsm8k`); only the system prompt
changes, offering the tool. The rewards that come with tool use read the whole transcript
(:mod:`unsloth_grpo.tools.transcript`):

- ``tool_call_format``: credit for a well-formed call, in quarters, so a model that has never
  called a tool gets a gradient: trying, naming an offered tool (partial credit for a near
  miss), giving exactly its arguments, and the call running without error (1.0 in all);
- ``tool_call_budget``: a penalty for each call beyond a budget, so calling is not free;
- ``correctness`` (the library's) grades the final answer with GSM8K's grader, as evaluation does.

    >>> fn = tool_call_format()
    >>> call = {"type": "function", "function": {"name": "calculate", "arguments": {"expression": "2+2"}}}
    >>> fn([[{"role": "assistant", "content": "", "tool_calls": [call]},
    ...      {"role": "tool", "name": "calculate", "content": "4"}]])
    [1.0]
"""

from __future__ import annotations

import difflib
import inspect
from typing import Any, Sequence

from unsloth_grpo.config import merge_dicts
from unsloth_grpo.grading import Verdict, lenient
from unsloth_grpo.rewards._registry import RewardFunc, register
from unsloth_grpo.tasks import gsm8k
from unsloth_grpo.tasks._recipe import Recipe, smoke_preset
from unsloth_grpo.tasks._task import Grader
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

def _parameters(tool_names: Sequence[str]) -> dict[str, set[str]]:
    from unsloth_grpo.tools import resolve_tool

    out = {}
    for name in tool_names:
        fn = resolve_tool(name)
        out[fn.__name__] = {p for p in inspect.signature(fn).parameters if p != "self"}
    return out


def _closeness(text: str, targets) -> tuple[float, str | None]:
    """How close ``text`` is to the nearest of ``targets`` (1.0 = equal), and that target."""
    best, match = 0.0, None
    for target in targets:
        ratio = difflib.SequenceMatcher(None, str(text), target).ratio()
        if ratio > best:
            best, match = ratio, target
    return best, match


def call_score(completion: Any, parameters: dict[str, set[str]]) -> float:
    """Credit of a completion's first call, four quarters:

    0.25 for trying (a call the tokenizer's response template parsed); up to 0.25 for the tool's
    name (its closeness to the nearest offered tool, 1.0 when equal); up to 0.25 for the argument
    names, once the tool is right (the share of its parameters given, minus the unknown ones);
    0.25 when the call ran without error. A near-miss earns more than noise, which is the
    gradient a model that has never called a tool needs. A call marker that did not parse earns
    nothing: credit for the bare marker makes a tiny model repeat it forever.
    """
    found = transcript.calls(completion)
    if not found:
        return 0.0
    first = found[0]
    name_score, name = _closeness(first["name"] or "", parameters)
    score = 0.25 + 0.25 * name_score
    if name_score < 1.0:
        return score
    wanted = parameters[name]
    given = set(first["arguments"]) if isinstance(first["arguments"], dict) else set()
    if wanted:
        score += 0.25 * max(0.0, (len(given & wanted) - len(given - wanted)) / len(wanted))
    elif not given:
        score += 0.25
    results = transcript.results(completion)
    if given == wanted and results and not transcript.is_error(results[0]):
        score += 0.25
    return score


@register("tool_call_format", family="tools", low=0.0, high=1.0)
def tool_call_format(*, tools: Sequence[str] = ("calculate",)) -> RewardFunc:
    """Credit in quarters for a well-formed tool call: tried, known tool, right arguments, ran without error.

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


class Gsm8kTools(gsm8k.Gsm8k):
    """GSM8K's data and grader, read on the model's last turn (a tool's result is not the model's answer)."""

    name = "gsm8k_tools"
    system_prompt = SYSTEM_PROMPT
    default_rewards = DEFAULT_REWARDS

    def grade(self, completion: Any, gold: Any, **settings: Any) -> Verdict:
        return super().grade(transcript.final_text(completion), gold, **settings)

    def harness_answer(self, row: dict) -> str | None:
        return None  # the answer comes after tool turns that lm-eval's generate_until does not run

    def grader(self, cfg) -> Grader:
        on_text = super().grader(cfg)
        return lambda completion, gold: on_text(transcript.final_text(completion), gold)

    def lenient(self, cfg) -> Grader:
        """Lenient verdict (evaluation only) on the model's last turn: its last number equals ``gold``."""
        return lambda completion, gold: lenient(transcript.final_text(completion), gold)

    def gold_completion(self, row: dict) -> None:
        return None  # a right answer here is a transcript with tool turns, which no row carries


TASK = Gsm8kTools()


# ---------------------------------------------------------------- recipe

#: The first line of ``python -m unsloth_grpo.recipes.gsm8k_tools --help``.
RECIPE_DESCRIPTION = 'GSM8K with a calculator tool: GRPO where the model calls calculate(expression) between turns.'

DEFAULTS = {
    "task": "gsm8k_tools",
    "output_dir": "outputs/gsm8k_tools",
    # Qwen2.5's chat template is one TRL knows how to parse tool calls from.
    "model": {"name": "unsloth/Qwen2.5-1.5B-Instruct-bnb-4bit", "max_seq_length": 1536, "load_in_4bit": True},
    "lora": {"r": 16, "alpha": 32},
    "data": {"source": "openai/gsm8k", "split": "train", "max_prompt_tokens": 512},
    "rewards": DEFAULT_REWARDS,
    "tools": {"functions": ["calculate"], "max_tool_calling_iterations": 4, "timeout": 5.0},
    "training": {"max_completion_length": 768},
}

PRESETS = {
    # Offline on CPU: the tiny model whose tokenizer holds the call markers as whole tokens. A
    # random model cannot do GSM8K, so the smoke run teaches the call itself: tool_call_format
    # gives stepped credit up to 1.0 for a call that ran; correctness is logged and stays ~0.
    # Measured on seeds 0/1/2: 40 steps at lr 2e-2 left seed 2 below a 0.2 rise (0.19); these
    # settings rose by 0.30/0.26/0.27 (docs/tools.md).
    "smoke": merge_dicts(
        smoke_preset(output_dir="outputs/tools-smoke", task_rewards=[], data={"source": "synthetic"},
                     training={"max_steps": 60, "learning_rate": 1e-2, "temperature": 1.2,
                               "max_completion_length": 32}, run={"samples_every": 20}),
        {"model": {"name": "builtin:tiny-tools"},
         "rewards": [{"name": "tool_call_format", "weight": 1.0},
                     {"name": "tool_call_budget", "weight": 1.0},
                     {"name": "correctness", "weight": 1.0}],
         "tools": {"max_tool_calling_iterations": 1, "timeout": 2.0}},
    ),
}

RECIPE = Recipe("gsm8k_tools", DEFAULTS, PRESETS, description=RECIPE_DESCRIPTION)
