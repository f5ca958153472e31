"""Tricks: completions that earn reward without doing the task, named while the run trains.

A reward curve cannot tell a model that learned the task from one that found a cheaper way to be
paid. Two runs of a real 135M model (docs/real_model.md) did the second: one copied the system
prompt's template, placeholder and all, and was paid the full format reward; one wrote ``a + b``
for every problem and was right on every addition and on no subtraction. Their reward curves rose
like a healthy run's. A third, under GRPO, answered problems worded unlike its training set's with
the question's first quantity (issue 52). :class:`TrickWatcher` reads the completions themselves, as
the rewards see them, and says so:

=======================  ======================================================================
``copies_prompt``        most completions repeat the system prompt's own text (its template, its
                         placeholder, its worked example) instead of working on their problem
``one_pattern``          every kind of problem gets the same calculation (the same operators, or
                         the same answer whatever the question)
``category_gap``         the grading reward pays on one kind of problem and never on another
``copies_quantity``      a share of some kind's answers are a number the question states, wrong,
                         and the result of no calculation the completion writes
=======================  ======================================================================

The metric-stream check beside them, ``format_without_answers`` (format rewards high, the grading
reward at zero), is :class:`unsloth_grpo.training.monitor.HealthChecker`'s. The kind of problem
is the dataset's ``category`` column when it has one (the offline sets name the operation);
``monitor.category_column`` names another.

The watcher wraps the reward functions (same names, same scores) and hands each warning to the
health monitor, which prints it with its fix and writes it to ``health.jsonl``. It is pure apart
from that hand-over, so it is tested on recorded completions (tests/data/degenerate_completions.jsonl).
"""

from __future__ import annotations

import functools
import re
from collections import Counter, deque
from typing import Any, Callable, Mapping, Sequence

from unsloth_grpo.grading.copying import answer_shape, copied_quantity, copied_share, prompt_texts
from unsloth_grpo.grading.locate import completion_text, extract_answer
from unsloth_grpo.training.monitor import TRICK_WARNINGS, HealthWarning

_OPERATOR = re.compile(r"(?<=\d)\s*([-+*/×÷x])\s*(?=\d)")

#: The warnings whose general fix gives every kind of problem worked examples (in the prompt, the data, an SFT
#: warm-up): advice that a run whose warm-up leaves some kinds out on purpose has already declined.
EVERY_KIND_FIXES = ("one_pattern", "category_gap")


def operators(completion: Any) -> str:
    """The arithmetic operators written between two numbers, in order: ``'+'`` for ``3 + 4 = 7``.

    >>> operators("<reasoning>15 - 6 = 9</reasoning>"), operators("2 * 3 + 1 = 7"), operators("none")
    ('-', '*+', '')
    """
    return "".join(_OPERATOR.findall(completion_text(completion))).replace("×", "*").replace("÷", "/")


class TrickWatcher:
    """Watches the completions of the last ``window`` scored batches for the tricks above.

    ``grading`` names the task's grading rewards (the one whose verdict is the task's answer check);
    ``fixes`` are the task's own fixes by warning name, in its words (:attr:`unsloth_grpo.tasks.Task.trick_fixes`),
    used instead of the general ones; ``report(warning)`` receives each warning once (the health monitor's
    ``report``). Thresholds:
    ``copy_share`` of a completion's words copied makes it a copy, ``copy_frac`` of the window's
    completions copying fires ``copies_prompt``; ``pattern_frac``: the share of each category's
    completions that one pattern must hold for ``one_pattern``; ``gap``: the grading reward's mean on
    the better category (with the worse one at 0) for ``category_gap``; ``min_per_category``: fewer
    completions of a category in the window than this, or completions of fewer than
    ``min_prompts_per_category`` different prompts, and it is not judged (one group of 8 completions
    is one problem: a real model that is right on half the subtractions is wrong on all 8 samples of
    some). The window holds at least ``window`` batches, and more while its older batches are needed to
    hold ``window_prompts`` different prompts (a run of one prompt a step sees few of each kind in 5),
    never more than ``max(window, window_prompts)`` batches (a dataset of fewer prompts, or a trainer that
    passes none, would otherwise keep every batch of the run). ``quantity_frac``: the share of a category's
    completions that answer with a quantity copied from the question, from two problems or more, for
    ``copies_quantity``. ``warmup_categories``: the only kinds the run's SFT warm-up
    trained on, on purpose (:func:`unsloth_grpo.training.stages.warmup_categories`); the fixes of
    :data:`EVERY_KIND_FIXES` then give the advice that fits such a run (:meth:`fix`).
    """

    def __init__(self, report: Callable[[HealthWarning], Any], *, grading: Sequence[str] = (),
                 category_column: str = "category", window: int = 5, copy_share: float = 0.5,
                 copy_frac: float = 0.5, pattern_frac: float = 0.75, gap: float = 0.3,
                 min_per_category: int = 8, min_prompts_per_category: int = 4, window_prompts: int = 16,
                 quantity_frac: float = 0.25, ignore: Sequence[str] = (),
                 fixes: Mapping[str, str] | None = None, warmup_categories: Sequence[str] | None = None) -> None:
        self.report = report
        self.fixes = dict(fixes or {})
        self.grading = tuple(grading)
        self.category_column = category_column
        self.copy_share, self.copy_frac = copy_share, copy_frac
        self.pattern_frac, self.gap, self.min_per_category = pattern_frac, gap, min_per_category
        self.quantity_frac = quantity_frac
        self.warmup_categories = list(warmup_categories) if warmup_categories else None
        self.min_prompts_per_category, self.window, self.window_prompts = min_prompts_per_category, window, window_prompts
        self.ignore = set(ignore)
        self.batches: deque[list[dict[str, Any]]] = deque(maxlen=max(window, window_prompts))
        self._seen = 0  # batches observed: tells apart the completions of batches that came without prompts
        self.fired: list[HealthWarning] = []
        self._names: list[str] = []
        self._batch_key = None
        self._scores: dict[int, list] = {}

    # ---------------------------------------------------------------- seeing the rewards

    def wrap(self, funcs: Sequence[Callable]) -> list[Callable]:
        """Wrappers of ``funcs`` with the same names and scores; the watcher sees every call."""
        self._names = [getattr(f, "__name__", type(f).__name__) for f in funcs]
        return [self._wrap_one(i, f) for i, f in enumerate(funcs)]

    def _wrap_one(self, index: int, func: Callable) -> Callable:
        @functools.wraps(func)
        def wrapper(*args, **kwargs):
            scores = func(*args, **kwargs)
            try:
                self._observe(index, scores, kwargs)
            except Exception:  # noqa: BLE001 - watching must never cost the run a step
                pass
            return scores

        wrapper.__name__ = self._names[index]
        return wrapper

    def _observe(self, index: int, scores, kwargs: dict[str, Any]) -> None:
        completions = kwargs.get("completions")
        if completions is None:
            return
        key = (id(completions), len(completions))
        if key != self._batch_key:
            self._batch_key, self._scores = key, {}
        self._scores[index] = list(scores)
        if len(self._scores) == len(self._names):
            state = kwargs.get("trainer_state")
            step = int(state.global_step) + 1 if state is not None else len(self.batches) + 1
            self.observe(step, completions, kwargs.get("prompts"), kwargs, self._grading_scores())

    def _grading_scores(self) -> list | None:
        for name in self.grading:
            if name in self._names:
                return self._scores[self._names.index(name)]
        return None

    # ---------------------------------------------------------------- the fixes

    def fix(self, name: str, general: str, kinds: Sequence[str] = ()) -> str:
        """The fix for warning ``name``: the task's own (:attr:`fixes`), else ``general``; but where the warning
        is about kinds of problem (``kinds``) that the run's warm-up left out on purpose, a fix that would give
        every kind worked examples says so and gives the advice that applies instead."""
        others = [k for k in kinds if self.warmup_categories and k not in self.warmup_categories]
        if name not in EVERY_KIND_FIXES or not others:
            return self.fixes.get(name) or general
        kept, left = ", ".join(self.warmup_categories), ", ".join(others)
        return (f"This run's SFT warm-up trains on {kept} only, by design (its sft stage's data.categories), so "
                f"worked examples of every kind are not the fix here: GRPO has to learn {left} from the reward. "
                f"Check that it can: GRPO's headroom before its stage (evaluation.headroom: a kind that none of k "
                f"samples gets right gives GRPO nothing to reinforce), more sampling rounds or steps for the GRPO "
                f"stage (training.max_sampling_rounds, its max_steps), and the {left} completions themselves "
                "(samples.jsonl). To give every kind a start instead, drop the sft stage's data.categories.")

    # ---------------------------------------------------------------- the checks

    def observe(self, step: int, completions: Sequence, prompts: Sequence | None, columns: dict[str, Any],
                grading_scores: Sequence | None = None) -> list[HealthWarning]:
        """One scored batch; returns the warnings that fire now (each once per run)."""
        n = len(completions)
        cats = columns.get(self.category_column)
        golds = columns.get("answer")
        batch = []
        for i in range(n):
            prompt = prompts[i] if prompts is not None else None
            gold = golds[i] if isinstance(golds, (list, tuple)) and len(golds) == n else None
            text = completion_text(completions[i])
            question = prompt_texts(prompt)[1] if prompt is not None else None
            batch.append({
                "text": text,
                "prompt": question if question is not None else f"#{self._seen}:{i}",
                "quantity": None if question is None else copied_quantity(text, question, gold),
                "copied": copied_share(text, prompt, gold),
                "shape": answer_shape(text),
                "operators": operators(text),
                "answer": extract_answer(text),
                "gold": None if gold is None else str(gold),
                "category": None if not isinstance(cats, (list, tuple)) or len(cats) != n else cats[i],
                "grade": None if grading_scores is None else grading_scores[i],
            })
        self.batches.append(batch)
        self._seen += 1
        while len(self.batches) > self.window and \
                len({r["prompt"] for b in list(self.batches)[1:] for r in b}) >= self.window_prompts:
            self.batches.popleft()
        if len(self.batches) < self.window:
            return []
        rows = [r for b in self.batches for r in b]
        if not rows:
            return []
        out: list[HealthWarning] = []
        for check in (self._check_copies, self._check_pattern, self._check_gap, self._check_quantities):
            warning = check(step, rows)
            if warning is not None and warning.name not in self.ignore \
                    and all(w.name != warning.name for w in self.fired):
                self.fired.append(warning)
                out.append(warning)
                self.report(warning)
        return out

    def _check_copies(self, step: int, rows: list[dict]) -> HealthWarning | None:
        copies = [r for r in rows if r["copied"] >= self.copy_share]
        share = len(copies) / len(rows)
        if share < self.copy_frac:
            return None
        example = Counter(r["text"] for r in copies).most_common(1)[0][0]
        return HealthWarning(
            step, "copies_prompt",
            f"{share:.0%} of the last {len(rows)} completions repeat the system prompt's own text instead of "
            f"working on their problem, e.g. {_short(example)!r}: the rewards pay a copy of the prompt.",
            self.fix("copies_prompt",
                     "Show the format with worked examples instead of a template with placeholders, make the format "
                     "rewards pay only for a completion with an answer of its own in it, and read the completions "
                     "(samples.jsonl)."),
            {"copy_share": share, "window_completions": len(rows), "example": example[:300]})

    def _by_category(self, rows: list[dict]) -> dict[str, list[dict]]:
        groups: dict[str, list[dict]] = {}
        for r in rows:
            if r["category"] is not None:
                groups.setdefault(str(r["category"]), []).append(r)
        return {k: v for k, v in groups.items()
                if len(v) >= self.min_per_category and len({r["prompt"] for r in v}) >= self.min_prompts_per_category}

    def _check_pattern(self, step: int, rows: list[dict]) -> HealthWarning | None:
        groups = self._by_category(rows)
        means = _grading_means(groups, self.min_per_category)
        if means and len(means) == len(groups) and min(means.values()) >= 0.5:
            return None  # one way of writing that is right on every kind is a format, not a trick
        if len(groups) >= 2:
            for key, what in (("operators", "the same operators"), ("shape", "the same completion")):
                common = {}
                for name, recs in groups.items():
                    value, count = Counter(r[key] for r in recs).most_common(1)[0]
                    common[name] = (value, count / len(recs))
                values = {v for v, _ in common.values()}
                if len(values) == 1 and next(iter(values)) and all(s >= self.pattern_frac for _, s in common.values()):
                    pattern = next(iter(values))
                    shares = ", ".join(f"{name} {s:.0%}" for name, (_, s) in sorted(common.items()))
                    return HealthWarning(
                        step, "one_pattern",
                        f"every kind of problem gets {what} ({pattern!r}; {shares} of each kind's completions in the "
                        f"last {len(rows)}): the model does one thing whatever the problem asks, and is paid where "
                        "that happens to be right.",
                        self.fix("one_pattern",
                                 "Give worked examples of every kind of problem in the prompt (one example teaches its "
                                 "own operation), balance the training data across kinds, and read accuracy by "
                                 "category (unsloth-grpo eval breaks it down). A short SFT stage on balanced worked "
                                 "answers before GRPO gives every kind a start.", sorted(common)),
                        {"pattern": pattern, "by_category": {k: s for k, (_, s) in common.items()},
                         "signature": key, "warmup_categories": self.warmup_categories})
            return None
        golds = {r["gold"] for r in rows if r["gold"] is not None}
        answers = [r["answer"] for r in rows if r["answer"] is not None]
        if len(golds) >= 3 and len(answers) >= len(rows) // 2:
            value, count = Counter(answers).most_common(1)[0]
            if count / len(rows) >= self.pattern_frac:
                return HealthWarning(
                    step, "one_pattern",
                    f"{count / len(rows):.0%} of the last {len(rows)} completions answer {value!r}, for problems with "
                    f"{len(golds)} different answers: the model gives one answer whatever the question.",
                    self.fix("one_pattern", "Check that the reward pays right answers only (the reward lab shows what "
                             "each rule paid), lower the learning rate, and read the completions (samples.jsonl)."),
                    {"answer": value, "share": count / len(rows), "distinct_golds": len(golds)})
        return None

    def _check_gap(self, step: int, rows: list[dict]) -> HealthWarning | None:
        means = _grading_means(self._by_category(rows), self.min_per_category)
        if len(means) < 2:
            return None
        best, worst = max(means, key=means.get), min(means, key=means.get)
        if means[best] >= self.gap and means[worst] <= 0.0:
            listed = ", ".join(f"{k} {v:.2f}" for k, v in sorted(means.items()))
            return HealthWarning(
                step, "category_gap",
                f"the grading reward pays on '{best}' problems ({means[best]:.2f}) and never on '{worst}' "
                f"problems over the last {len(rows)} completions ({listed}): whatever the model learned does not "
                f"work for '{worst}'.",
                self.fix("category_gap",
                         f"Read the '{worst}' completions (samples.jsonl); give the prompt a worked example of that "
                         "kind and balance the training data, or start from a short SFT stage on worked answers of "
                         "every kind.", [worst]),
                {"grading_mean_by_category": means, "warmup_categories": self.warmup_categories})
        return None

    def _check_quantities(self, step: int, rows: list[dict]) -> HealthWarning | None:
        """Answers that repeat a number of the question, wrong and calculated by nothing, in a share of some
        kind's completions: the model answers with what the question states, not with what it asks. Rows
        without categories are one kind."""
        groups = self._by_category(rows) if any(r["category"] is not None for r in rows) else {"all": rows}
        counts = {}
        for name, recs in sorted(groups.items()):
            copies = [r for r in recs if r["quantity"] is not None]
            if len(recs) >= self.min_per_category:
                counts[name] = (copies, len(recs))
        found = {name: (copies, n) for name, (copies, n) in counts.items()
                 if len(copies) / n >= self.quantity_frac and len({r["prompt"] for r in copies}) >= 2}
        if not found:
            return None
        worst = max(found, key=lambda k: len(found[k][0]) / found[k][1])
        example = Counter(r["text"] for r in found[worst][0]).most_common(1)[0][0]
        row = next(r for r in found[worst][0] if r["text"] == example)
        listed = ", ".join(f"{name} {len(c)}/{n} ({len(c) / n:.0%})" for name, (c, n) in counts.items())
        return HealthWarning(
            step, "copies_quantity",
            f"answers copied from the question over the last {len(rows)} completions ({listed}): the answer is a "
            f"number the question states, wrong, and the result of no calculation the completion writes, e.g. "
            f"{_short(example)!r} (the question's {row['quantity']}; right: {row['gold']}) for "
            f"{_short(row['prompt'])!r}.",
            self.fix("copies_quantity",
                     "Read these completions beside their questions (samples.jsonl), and grade the model on problems "
                     "worded unlike its training set's, by kind: a model paid for right answers on one wording can "
                     "learn to repeat a quantity where the wording changes. Give the training prompts more than one "
                     "wording, pay the calculation written out, or lower the learning rate or the steps of the stage "
                     "that taught it."),
            {"by_category": {name: {"copied": len(c), "completions": n, "share": len(c) / n}
                             for name, (c, n) in counts.items()},
             "example": example[:300], "question": row["prompt"][:300], "quantity": row["quantity"],
             "gold": row["gold"]})


def _grading_means(groups: dict[str, list[dict]], least: int) -> dict[str, float]:
    """The grading reward's mean per category, for categories with at least ``least`` scores."""
    means = {}
    for name, recs in groups.items():
        grades = [float(r["grade"]) for r in recs if isinstance(r["grade"], (int, float))]
        if len(grades) >= least:
            means[name] = sum(grades) / len(grades)
    return means


def _short(text: str, limit: int = 120) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


__all__ = ["EVERY_KIND_FIXES", "TRICK_WARNINGS", "TrickWatcher", "operators"]
