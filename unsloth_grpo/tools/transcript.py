"""Reading a tool-using completion: its calls, the tools' results, and the whole exchange as text.

With tools, TRL hands each reward a completion that is a list of messages: the model's turn
(with ``tool_calls`` when it called something), a ``tool`` turn per result, the model's next
turn, and so on. These helpers are pure functions of that list, used by the rewards, the
health metrics, the samples file and the reward lab.

    >>> completion = [
    ...     {"role": "assistant", "content": "", "tool_calls": [
    ...         {"type": "function", "function": {"name": "calculate", "arguments": {"expression": "3*4"}}}]},
    ...     {"role": "tool", "name": "calculate", "content": "12"},
    ...     {"role": "assistant", "content": "<answer>12</answer>"},
    ... ]
    >>> print(render(completion))
    [assistant]
    [call] calculate(expression='3*4')
    [tool calculate] 12
    [assistant] <answer>12</answer>
    >>> summary([completion])["tools/used_share"]
    1.0
"""

from __future__ import annotations

from typing import Any, Sequence

from unsloth_grpo.grading import content_text as _text  # one reader of a message's content

#: How TRL writes a failed call into the tool turn (``str({"error": message})``).
_ERROR_PREFIX = "{'error': "


def messages(completion: Any) -> list[dict]:
    """The messages of a completion (a plain string becomes one assistant message)."""
    if isinstance(completion, str):
        return [{"role": "assistant", "content": completion}]
    if isinstance(completion, dict):
        return [completion]
    return [m for m in completion or [] if isinstance(m, dict)]


def calls(completion: Any) -> list[dict]:
    """Every parsed call of the completion, in order, as ``{"name": ..., "arguments": {...}}``."""
    out = []
    for message in messages(completion):
        for call in message.get("tool_calls") or []:
            fn = call.get("function", call) if isinstance(call, dict) else {}
            out.append({"name": fn.get("name"), "arguments": fn.get("arguments") or {}})
    return out


def results(completion: Any) -> list[str]:
    """The text of every tool turn, in order."""
    return [_text(m.get("content")) for m in messages(completion) if m.get("role") == "tool"]


def is_error(result: str) -> bool:
    """Whether a tool turn reports a failed call (an exception, a timeout, an unusable result)."""
    return result.startswith(_ERROR_PREFIX)


def final_text(completion: Any) -> str:
    """The content of the model's last turn (where the final answer belongs)."""
    turns = [m for m in messages(completion) if m.get("role", "assistant") == "assistant"]
    return _text(turns[-1].get("content")) if turns else ""


def _arguments(arguments: Any) -> str:
    if isinstance(arguments, dict):
        return ", ".join(f"{k}={v!r}" for k, v in arguments.items())
    return repr(arguments)


def render(completion: Any) -> str:
    """The whole exchange as readable lines: model turn, call, tool result, next turn."""
    lines = []
    for message in messages(completion):
        role = message.get("role", "assistant")
        if role == "tool":
            lines.append(f"[tool {message.get('name', '?')}] {_text(message.get('content'))}")
            continue
        lines.append(f"[{role}] {_text(message.get('content'))}".rstrip())
        for call in calls([message]):
            lines.append(f"[call] {call['name']}({_arguments(call['arguments'])})")
    return "\n".join(lines)


def has_tool_turns(completions: Sequence[Any]) -> bool:
    """Whether any completion of a batch is a multi-message tool exchange."""
    return any(calls(c) or results(c) for c in completions if not isinstance(c, str))


def summary(completions: Sequence[Any]) -> dict[str, float]:
    """Per-batch tool figures: calls per completion, share of completions with a call, share of
    calls that failed (0 when there were no calls)."""
    n = max(len(completions), 1)
    n_calls = [len(calls(c)) for c in completions]
    all_results = [r for c in completions for r in results(c)]
    errors = sum(is_error(r) for r in all_results)
    return {
        "tools/calls_per_completion": sum(n_calls) / n,
        "tools/used_share": sum(1 for k in n_calls if k) / n,
        "tools/error_share": errors / len(all_results) if all_results else 0.0,
    }
