"""GRPO's headroom: K samples of each training prompt, before GRPO trains, say what it can learn.

GRPO compares the completions of one prompt with each other: a group whose completions are all right,
or all wrong, has no advantage to follow and teaches nothing. And what reinforcement learning does to a
model is mostly to raise its pass@1 toward the pass@k it already has (Yue et al. 2025, "Does
reinforcement learning really incentivize reasoning capacity in LLMs beyond the base model?"). So
sampling the model K times on a set of its training prompts, at the temperature GRPO samples at, says
before a step is taken how much there is to gain and how many groups will carry a signal:

* **pass@1**: the mean correctness over all samples; **pass@K**: the chance that one of K samples is
  right (the unbiased estimator of Chen et al. 2021, :func:`~unsloth_grpo.evaluation.evaluate.pass_at_k`);
* **mixed**: the share of prompts whose K samples hold both a right and a wrong answer, the only groups
  GRPO learns correctness from; ``all_right`` and ``all_wrong`` are the others;
* each by category where the problems say their kind (the grouping evaluation's accuracy uses).

Correctness is the task's grader, the one its correctness reward pays on. A group whose answers agree
can still differ in a format reward; the headroom is about the answers. The pure functions here take
the records :func:`sample_headroom` makes, which have the shape of ``unsloth-grpo eval --samples K``'s
records (``samples_correct``, ``category``), so the run's start and ``eval`` report the same way:

    GRPO headroom (64 training prompts, 8 samples, T=1.0): pass@1 0.62, pass@8 0.94; 58% of groups mixed;
    addition 0.98 -> 1.00, subtraction 0.41 -> 0.90
"""

from __future__ import annotations

import functools
from typing import Any, Callable, Sequence

from unsloth_grpo.evaluation.evaluate import CATEGORY_COLUMN, group_by_category, pass_at_k

#: Below this share of mixed groups the headroom warns: almost every group agrees, and GRPO has little to learn from.
MIN_MIXED = 0.10
#: The file a GRPO run writes its headroom to, before training and after.
HEADROOM_FILES = {"before": "headroom_before.json", "after": "headroom_after.json"}


def pass_at(groups: Sequence[Sequence[bool]], k: int) -> float:
    """Mean over the groups (one per prompt, its samples' correctness) of the unbiased pass@k."""
    if not groups:
        raise ValueError("pass@k needs at least one group of samples")
    return sum(pass_at_k(len(g), sum(map(bool, g)), k) for g in groups) / len(groups)


def group_shares(groups: Sequence[Sequence[bool]]) -> dict[str, float]:
    """The shares of groups that are ``mixed`` (a right and a wrong answer), ``all_right`` and ``all_wrong``.

    >>> group_shares([[True, False], [True, True], [False, False], [False, True]])
    {'mixed': 0.5, 'all_right': 0.25, 'all_wrong': 0.25}
    """
    if not groups:
        raise ValueError("the shares need at least one group of samples")
    right = sum(1 for g in groups if all(g))
    wrong = sum(1 for g in groups if not any(g))
    n = len(groups)
    return {"mixed": (n - right - wrong) / n, "all_right": right / n, "all_wrong": wrong / n}


def _summary(groups: list[list[bool]], k: int) -> dict[str, Any]:
    return {"n": len(groups), "pass@1": pass_at(groups, 1), "pass@k": pass_at(groups, k), **group_shares(groups)}


def headroom(records: Sequence[dict[str, Any]], *, temperature: float, what: str = "training prompts") -> dict:
    """The headroom of records that hold each prompt's ``samples_correct`` (and its ``category`` when it
    has one): ``prompts``, ``samples`` (K), ``temperature``, ``what`` the prompts are, ``pass@1``,
    ``pass@k``, ``mixed``, ``all_right``, ``all_wrong`` and ``by_category`` (the same figures per kind)."""
    groups = [list(map(bool, r["samples_correct"])) for r in records]
    sizes = {len(g) for g in groups}
    if len(sizes) != 1 or min(sizes) < 1:
        raise ValueError(f"the headroom needs the same number of samples (at least 1) for every prompt; got {sorted(sizes)}")
    k = sizes.pop()
    by_category = {name: _summary([list(map(bool, r["samples_correct"])) for r in recs], k)
                   for name, recs in group_by_category(list(records)).items()}
    return {"prompts": len(groups), "samples": k, "temperature": temperature, "what": what,
            **{key: v for key, v in _summary(groups, k).items() if key != "n"}, "by_category": by_category}


def headroom_line(h: dict) -> str:
    """``GRPO headroom (64 training prompts, 8 samples, T=1.0): pass@1 0.62, pass@8 0.94; 58% of groups
    mixed; subtraction 0.41 -> 0.90`` (each category's pass@1 -> pass@K)."""
    k = h["samples"]
    text = (f"GRPO headroom ({h['prompts']} {h.get('what', 'prompts')}, {k} samples, T={float(h['temperature'])}): "
            f"pass@1 {h['pass@1']:.2f}, pass@{k} {h['pass@k']:.2f}; {h['mixed']:.0%} of groups mixed")
    cats = h.get("by_category") or {}
    if cats:
        text += "; " + ", ".join(f"{name} {c['pass@1']:.2f} -> {c['pass@k']:.2f}" for name, c in cats.items())
    return text


def headroom_warning(h: dict, min_mixed: float = MIN_MIXED) -> str | None:
    """What to change when fewer than ``min_mixed`` of the groups are mixed, or None.

    Every answer right: the problems are too easy for GRPO to learn from (harder problems, or more varied
    samples at a higher temperature). Every answer wrong: there is nothing right to reinforce (a warm-up on
    worked answers, easier problems, or a lower temperature when the samples are noise)."""
    if h["mixed"] >= min_mixed:
        return None
    text = (f"only {h['mixed']:.0%} of the {h['prompts']} groups of {h['samples']} samples mix right and wrong "
            "answers (a group whose answers agree teaches GRPO nothing).")
    fixes = []
    if h["all_right"] > 0:
        fixes.append(f"{h['all_right']:.0%} get every sample right: give it harder problems (keep the prompts it "
                     "solves only sometimes) or sample more varied answers at a higher training.temperature")
    if h["all_wrong"] > 0:
        fixes.append(f"{h['all_wrong']:.0%} get every sample wrong: start with a warm-up (an SFT stage on worked "
                     "answers) or easier problems, or a lower training.temperature if the samples are noise")
    return f"{text} {'; '.join(fixes)}."


def gap_closed(before: dict, after: dict) -> float | None:
    """The share of the gap between pass@1 and pass@K before training that pass@1 after closed (1.0: pass@1
    after reached pass@K before; negative: pass@1 fell), or None when there was no gap to close."""
    gap = before["pass@k"] - before["pass@1"]
    return None if gap <= 1e-9 else (after["pass@1"] - before["pass@1"]) / gap


def after_line(before: dict, after: dict) -> str:
    """``GRPO headroom after training (64 training prompts, 8 samples, T=1.0): pass@1 0.62 -> 0.80 against
    pass@8 0.94 before (56% of the gap closed); pass@8 0.94 -> 0.95; 58% -> 30% of groups mixed``."""
    k = before["samples"]
    closed = gap_closed(before, after)
    gap = "no gap to close" if closed is None else f"{closed:.0%} of the gap closed"
    return (f"GRPO headroom after training ({after['prompts']} {after.get('what', 'prompts')}, {after['samples']} "
            f"samples, T={float(after['temperature'])}): pass@1 {before['pass@1']:.2f} -> {after['pass@1']:.2f} against "
            f"pass@{k} {before['pass@k']:.2f} before ({gap}); pass@{k} {before['pass@k']:.2f} -> "
            f"{after['pass@k']:.2f}; {before['mixed']:.0%} -> {after['mixed']:.0%} of groups mixed")


def markdown(before: dict | None, after: dict | None) -> str:
    """The headroom section of a run's ``report.md``: the lines above, and the warning when there is one."""
    lines = ["## GRPO headroom", "",
             "K samples of training prompts at the GRPO temperature, graded by the task's grader: pass@1 is the mean "
             "correctness, pass@K the chance that one of K is right, a mixed group holds a right and a wrong "
             "answer (the only groups GRPO learns correctness from).", ""]
    if before is not None:
        lines.append(f"- before: {headroom_line(before)}")
        warning = headroom_warning(before)
        if warning:
            lines.append(f"- **Warning:** {warning}")
    if after is not None:
        lines.append(f"- after: {headroom_line(after)}")
    if before is not None and after is not None:
        lines.append(f"- {after_line(before, after)}")
    return "\n".join(lines) + "\n"


def headroom_rows(dataset, n: int, seed: int) -> list[dict[str, Any]]:
    """``n`` rows of ``dataset`` (all of them when it has fewer), drawn with ``seed``: the same prompts
    before and after training."""
    import random

    picked = sorted(random.Random(seed).sample(range(len(dataset)), min(n, len(dataset))))
    return [dataset[i] for i in picked]


def sample_headroom(model, tokenizer, rows: Sequence[dict[str, Any]], *, samples: int, temperature: float,
                    is_correct: Callable[[str, Any], Any], max_new_tokens: int, top_p: float = 1.0,
                    batch_size: int = 16, seed: int = 0, what: str = "training prompts",
                    generate_fn: Callable[..., list] | None = None, by: str = CATEGORY_COLUMN) -> dict:
    """Sample ``samples`` completions of each row's ``prompt`` with the project's batched generation
    (:func:`~unsloth_grpo.evaluation.generation.generate_detailed`, or ``generate_fn`` with its keywords),
    grade each against the row's ``answer`` with ``is_correct`` (the task's grader) and return
    :func:`headroom`'s figures with the ``records``."""
    if samples < 2:
        raise ValueError(f"the headroom needs at least 2 samples per prompt (a group), got {samples}")
    if generate_fn is None:
        from unsloth_grpo.evaluation.generation import generate_detailed

        generate_fn = functools.partial(generate_detailed, model, tokenizer)
    outs = generate_fn([r["prompt"] for r in rows], num_samples=samples, temperature=temperature, top_p=top_p,
                       max_new_tokens=max_new_tokens, batch_size=batch_size, seed=seed)
    records = []
    for row, gens in zip(rows, outs):
        texts = [g if isinstance(g, str) else g.text for g in gens]
        rec = {"prompt": row["prompt"], "gold": row["answer"], "samples": texts,
               "samples_correct": [bool(is_correct(t, row["answer"])) for t in texts]}
        if by in row:
            rec["category"] = str(row[by])
        records.append(rec)
    return {**headroom(records, temperature=temperature, what=what), "records": records}
