"""Probe completions the reward lab scores beside the real ones: the same answer in the format's
different shapes (a trailing newline, reasoning on one line or two), and the system prompt's own template
and worked examples written out as a completion. A reward that pays these apart, or pays a copy of the
prompt, is named with its fix (:mod:`unsloth_grpo.rewards.lab` prints them as warnings)."""

from __future__ import annotations

import json
import statistics
from typing import Any, Callable, Sequence

from unsloth_grpo.grading.copying import prompt_texts
from unsloth_grpo.rewards.calling import call_reward, reward_call

_EPS = 1e-9


# ---------------------------------------------------------------- format probes

#: Reasoning that reads the same on one line and over two: only the separator differs (same
#: length, same words), so a reward scoring the two apart is matching the newline itself.
_ONE_LINE, _TWO_LINES = "One step, then another.", "One step,\nthen another."
#: (reasoning tag, layout) pairs the probes are written in: tags on their own lines, as the
#: recipes and the Unsloth notebook ask, and run together, as TRL's documentation writes them.
_PROBE_SHAPES = (("reasoning", "lines"), ("think", "lines"), ("reasoning", "compact"), ("think", "compact"))


def _probe_text(tag: str, layout: str, reasoning: str, answer: str, newline_at_end: bool) -> str:
    if layout == "lines":
        text = f"<{tag}>\n{reasoning}\n</{tag}>\n<answer>\n{answer}\n</answer>"
    else:
        text = f"<{tag}>{reasoning}</{tag}><answer>{answer}</answer>"
    return text + ("\n" if newline_at_end else "")


def _apart(a: float | None, b: float | None) -> bool:
    """Two scores of one completion that differ by more than a trailing-length penalty could."""
    if a is None or b is None:
        return False
    return abs(a - b) > 0.5 * max(abs(a), abs(b)) and abs(a - b) > 1e-6


def format_warnings(records: Sequence[dict], funcs: Sequence[Callable]) -> list[str]:
    """Rewards that pay one completion differently with and without a trailing newline, or with its
    reasoning on one line and on two: probe completions in each shape of :data:`_PROBE_SHAPES`
    (with the first record's prompt and columns, its gold answer inside the answer tags) are
    scored, called as training calls them, and each such pair compared."""
    if not records:
        return []
    first = records[0]
    answer = first.get("answer")
    answer = answer if isinstance(answer, str) and answer.strip() else "42"
    keys = [(tag, layout, lines, end) for tag, layout in _PROBE_SHAPES for lines in (1, 2) for end in (True, False)]
    probes = [dict(first, completion=_probe_text(tag, layout, _ONE_LINE if lines == 1 else _TWO_LINES, answer, end))
              for tag, layout, lines, end in keys]
    stand_in_ids = [list(p["completion"].encode()) for p in probes] if "completion_ids" in first else None
    completions, kwargs = reward_call(probes, completion_ids=stand_in_ids)
    out = []
    for fn in funcs:
        try:
            values = list(call_reward(fn, completions, **kwargs))
        except Exception:  # noqa: BLE001 - a failure on the probes says nothing about the format
            continue
        score = dict(zip(keys, values))
        trailing = next(((score[(t, lay, n, True)], score[(t, lay, n, False)]) for t, lay in _PROBE_SHAPES
                         for n in (1, 2) if _apart(score[(t, lay, n, True)], score[(t, lay, n, False)])), None)
        if trailing is not None:
            out.append(f"{fn.__name__}: pays a completion {trailing[0]:g} when it ends with a newline and "
                       f"{trailing[1]:g} when it does not -- a format regex ending in '\\n$' pays only when the "
                       "model happens to end with a newline; end the pattern with '\\s*$' (or match the stripped text)")
        lines = next(((score[(t, lay, 1, e)], score[(t, lay, 2, e)]) for t, lay in _PROBE_SHAPES
                      for e in (False, True) if _apart(score[(t, lay, 1, e)], score[(t, lay, 2, e)])), None)
        if lines is not None:
            out.append(f"{fn.__name__}: pays reasoning written on one line {lines[0]:g} and the same reasoning over "
                       f"two lines {lines[1]:g} -- in a regex '.' does not match a newline, so '.*?' stops at the "
                       "first line break; compile the pattern with re.DOTALL (pass flags=re.DOTALL, or re.S, to "
                       "re.match / re.search)")
    return out


# ---------------------------------------------------------------- the prompt's own text as a completion

#: How many of the records' prompts each prompt probe is scored with.
PROMPT_PROBE_ROWS = 16
#: A worked example copied word for word may earn at most this share of what a right answer earns.
COPY_SHARE_LIMIT = 0.5


def prompt_probes(system: str, reasoning_tag: str = "reasoning", answer_tag: str = "answer") -> list[tuple[str, str]]:
    """The completions a policy could copy out of a system prompt: ``(label, text)`` for each reasoning
    block followed by an answer block in it. A block whose answer holds no digit is the template
    (``the final number``); one with a digit is a worked example.

    >>> [label for label, _ in prompt_probes("Reply as <reasoning>...</reasoning><answer>N</answer>. Example: "
    ...                                       "<reasoning>3 + 4 = 7</reasoning><answer>7</answer>")]
    ['the template', 'worked example 1']
    >>> prompt_probes("Reason inside <reasoning> tags. Example: <reasoning>1 + 1</reasoning><answer>2</answer>")
    [('worked example 1', '<reasoning>1 + 1</reasoning><answer>2</answer>')]
    """
    import re

    # a block starts at the last opening tag before its closing one: prose that names the tags
    # ("write the calculation inside <reasoning> tags") is not part of it
    pattern = re.compile(rf"<{reasoning_tag}>(?:(?!<{reasoning_tag}>).)*?</{reasoning_tag}>\s*"
                         rf"<{answer_tag}>((?:(?!<{answer_tag}>).)*?)</{answer_tag}>", re.S)
    out, examples = [], 0
    for m in pattern.finditer(system):
        if any(c.isdigit() for c in m.group(1)):
            examples += 1
            out.append((f"worked example {examples}", m.group(0)))
        else:
            out.append(("the template", m.group(0)))
    return out


def _mean_total(records: Sequence[dict], funcs: Sequence[Callable], weights: Sequence[float],
                completion: str) -> tuple[float, dict[str, float]]:
    """The mean weighted total, and each reward's mean, of ``completion`` given for every record."""
    probes = [dict(r, completion=completion) for r in records]
    for p in probes:
        p.pop("completion_ids", None)
    completions, kwargs = reward_call(probes)
    means, total = {}, 0.0
    for fn, w in zip(funcs, weights):
        try:
            values = [v for v in call_reward(fn, completions, **kwargs) if v is not None]
        except Exception:  # noqa: BLE001 - a reward that fails on a probe is reported by analyse itself
            continue
        if values:
            means[fn.__name__] = statistics.fmean(values)
            total += w * means[fn.__name__]
    return total, means


def prompt_copy_warnings(records: Sequence[dict], funcs: Sequence[Callable], weights: Sequence[float]) -> list[str]:
    """Score the system prompt's own template and worked examples as completions of the records' prompts,
    as a policy that copies them would write them; warn when the template earns anything, and when a
    worked example copied word for word earns :data:`COPY_SHARE_LIMIT` or more of what a right answer
    earns (a right answer: the record's gold in the answer block)."""
    with_prompt = [r for r in records if prompt_texts(r.get("prompt"))[0]]
    if not with_prompt or not funcs:
        return []
    seen, rows = set(), []
    for r in with_prompt:
        key = json.dumps(r["prompt"], sort_keys=True, default=str)
        if key not in seen:
            seen.add(key)
            rows.append(r)
        if len(rows) >= PROMPT_PROBE_ROWS:
            break
    out = []
    gold = None
    if all(isinstance(r.get("answer"), (str, int, float)) for r in rows):
        golds = [dict(r, completion=f"<reasoning>\nWorked out.\n</reasoning>\n<answer>\n{r['answer']}\n</answer>")
                 for r in rows]
        gold = statistics.fmean(_mean_total([g], funcs, weights, g["completion"])[0] for g in golds)
    for label, text in prompt_probes(prompt_texts(rows[0]["prompt"])[0]):
        total, means = _mean_total(rows, funcs, weights, text)
        paid = ", ".join(f"{k} {v:.3g}" for k, v in means.items() if v > 0)
        shown = " ".join(text.split())[:80]
        if label == "the template" and total > _EPS:
            out.append(f"the system prompt's template copied as it is ({shown!r}) earns {total:.3g} a completion "
                       f"({paid}) -- a policy that copies the prompt is paid for it (a real model learned exactly "
                       "that); let the format rewards pay only an answer (the built-in ones do: require_answer), "
                       "or show a worked example instead of placeholders")
        elif label != "the template" and gold is not None and gold > _EPS and total >= COPY_SHARE_LIMIT * gold:
            out.append(f"{label} of the system prompt copied word for word ({shown!r}) earns {total:.3g} a "
                       f"completion on these problems ({paid}), {total / gold:.0%} of what a right answer earns "
                       f"({gold:.3g}) -- copying the example is worth more than half an answer; weigh correctness "
                       "above the format rewards so that only a right answer pays well")
    return out
