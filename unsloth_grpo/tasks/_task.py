"""The shape every task has: :class:`Task`.

A task owns its data (:meth:`Task.load`), its prompt (:attr:`Task.system_prompt`), its answer
format (:meth:`Task.matches_format`), its grader (:meth:`Task.grade`), its rewards
(:attr:`Task.default_rewards`, and the ``@register`` factories of its module) and what its
evaluation grades with (:meth:`Task.grading`, which :func:`unsloth_grpo.evaluation.evaluate.evaluate_task`
uses: evaluation sits above the tasks). ``grade`` means one thing in every task: the verdict on one completion
against its gold answer, an :class:`~unsloth_grpo.grading.Verdict` (true when right; ``value`` is
the score where a task gives partial credit). The task's correctness reward is built on ``grade``
and pays on its verdict, and evaluation grades with that same reward's grader
(:meth:`Task.grader`), so training and evaluation cannot measure different things.

Callers never probe a task module for optional functions: they ask the registry for the task
(:func:`unsloth_grpo.tasks.get_task`) and use this shape, whose defaults say what a task without
the feature does.
"""

from __future__ import annotations

import re
from typing import Any, Callable

from unsloth_grpo.grading import Verdict

#: ``grader(completion, gold) -> Verdict``: one task's verdict with one recipe's settings.
Grader = Callable[[Any, Any], Verdict]


def reasoned_completion(answer: str, reasoning: str = "Worked out step by step.") -> str:
    """``answer`` as a completion in the reasoning-then-answer format the recipes ask for."""
    return f"<reasoning>\n{reasoning}\n</reasoning>\n<answer>\n{answer}\n</answer>"


def _strip_calculator(text: str) -> str:
    """GSM8K's calculator notes (``<<48/2=24>>``) are not reasoning a model should copy."""
    return re.sub(r"<<[^<>]*>>", "", text).strip()


class Task:
    """One task: subclass it in the task's module and name one instance ``TASK`` there.

    A subclass sets :attr:`name`, :attr:`system_prompt`, :attr:`default_rewards` and
    :attr:`grading_rewards`, says how to read its data (its :attr:`loader`, or :meth:`read`) and
    defines :meth:`grade`; the other methods have defaults a task overrides when it has more to say.
    """

    #: The registry key (``task:`` in a recipe), the module's name.
    name: str = ""
    #: The system prompt that fixes the answer format (``data.system_prompt`` replaces it; None: none).
    system_prompt: str | None = None
    #: Rewards a recipe of this task uses unless its config lists its own.
    default_rewards: list[dict] = []
    #: The rewards whose verdict is this task's :meth:`grade` (each has a ``.grader``); evaluation
    #: grades with the one the recipe lists, the first of these when it lists none.
    grading_rewards: tuple[str, ...] = ()
    #: The task's loader, ``load_<task>(source, split, *, subset, system_prompt, limit, num_synthetic,
    #: seed)`` (:meth:`loader_options` maps ``cfg.data`` onto it), when :meth:`read` is not its own.
    loader: Callable | None = None
    #: Whether the loader also takes ``question_column`` and ``answer_column`` (a task that reads files).
    named_columns: bool = False
    #: The fix the trick watcher (:mod:`unsloth_grpo.training.tricks`) gives for a trick it names, by the
    #: warning's name, in the task's own words (its answer format, its placeholders, its format reward);
    #: a warning not listed gets the watcher's general fix. A task whose answer is not in the answer
    #: tags says its own.
    trick_fixes: dict[str, str] = {
        "copies_prompt": "Show the format with worked examples instead of a template with placeholders (text such as "
                         "'the final number' inside the answer tags is something to copy), keep the format rewards' "
                         "require_answer on, and score the prompt in the reward lab (unsloth-grpo rewards check): it "
                         "warns when the template is paid.",
    }

    def __repr__(self) -> str:
        return f"<task {self.name}>"

    # ---------------------------------------------------------------- data

    def load(self, cfg):
        """The rows ``cfg.data`` asks for (``prompt`` and ``answer`` columns, the task's own beside
        them), with the task's system prompt unless the config sets one, shuffled when it says so."""
        d = cfg.data
        rows = self.read(cfg, self.system_prompt if d.system_prompt is None else d.system_prompt)
        if d.categories is not None:  # read whole (loader_options), then kept by kind, then limited
            from unsloth_grpo.data import keep_categories

            rows = keep_categories(rows, d.categories, d.source, limit=d.limit)
        return rows.shuffle(seed=d.shuffle_seed) if d.shuffle_seed is not None else rows

    def read(self, cfg, system_prompt: str | None):
        """The task's rows for ``cfg.data`` with ``system_prompt``, in the loader's order."""
        if self.loader is None:
            raise NotImplementedError(f"task {self.name!r} does not say how to read its data")
        return self.loader(**self.loader_options(cfg, system_prompt))

    def loader_options(self, cfg, system_prompt: str | None) -> dict[str, Any]:
        """``cfg.data`` as the keyword arguments of :attr:`loader`."""
        d = cfg.data
        limit = d.limit if d.categories is None else None  # data.limit counts the rows kept by kind (load)
        options = dict(source=d.source, split=d.split, subset=d.subset, system_prompt=system_prompt, limit=limit,
                       num_synthetic=d.num_synthetic, seed=cfg.seed)
        if self.named_columns:
            options.update(question_column=d.question_column, answer_column=d.answer_column)
        return options

    def config_problems(self, cfg) -> list[str]:
        """What the task finds wrong with ``cfg`` before any row is read or model loaded, one line each
        (:func:`unsloth_grpo.training.checks.config_problems` adds them to the run's list); none by default."""
        return []

    def curriculum(self, cfg):
        """The levels training moves between (a :class:`~unsloth_grpo.training.curriculum.LevelSource`), or
        None: the task's difficulty is fixed (the default)."""
        return None

    def harness_answer(self, row: dict) -> str | None:
        """The row's gold answer as the plain number that the lm-eval task's filters compare with
        (:mod:`unsloth_grpo.evaluation.harness`), or None when the task's grade is not "this number in the
        answer block" (an expression, JSON, code, a tool's transcript): such a row cannot be checked there,
        and ``eval --lm-eval-task`` refuses it before any model loads. None by default."""
        return None

    def gold_completion(self, row: dict) -> str | None:
        """The row's gold answer written as a correct completion, or None when the row does not
        carry one (every reward is tried on it before the model loads)."""
        return None

    def sft_examples(self, cfg, n: int):
        """``n`` prompt/completion pairs for an SFT stage, the completion in the answer format.

        By default worked answers in GSM8K's ``reasoning #### answer`` form are read from
        :meth:`worked_rows` and written as ``<reasoning>...</reasoning><answer>...</answer>``.
        """
        import datasets

        from unsloth_grpo.data import DataError, chat_prompt, row_label

        d = cfg.data
        raw, qcol, acol = self.worked_rows(cfg, n)
        if d.categories is not None:
            from unsloth_grpo.data import keep_categories

            raw = keep_categories(list(raw), d.categories, d.source, limit=n)
        system = d.system_prompt if d.system_prompt is not None else self.system_prompt
        rows = []
        for i, row in enumerate(raw[:n]):
            answer = str(row.get(acol, ""))
            if "####" not in answer:
                raise DataError(f"an sft stage needs worked answers ('reasoning #### answer', GSM8K's form) in "
                                f"column '{acol}'; {row_label(d.source, i)} has none: {answer[-80:]!r}. Give the task an "
                                "sft_examples() method or drop the sft stage")
            reasoning, final = answer.rsplit("####", 1)
            final = self.final_answer(answer) or final.strip()
            completion = f"<reasoning>\n{_strip_calculator(reasoning)}\n</reasoning>\n<answer>\n{final}\n</answer>"
            rows.append({"prompt": chat_prompt(str(row[qcol]).strip(), system),
                         "completion": [{"role": "assistant", "content": completion}]})
        if not rows:
            raise DataError(f"no examples for the sft stage from '{d.source}'")
        return datasets.Dataset.from_list(rows)

    def worked_rows(self, cfg, n: int) -> tuple[list[dict], str, str]:
        """Up to ``n`` raw rows of ``data.source`` with their question and answer column names."""
        from unsloth_grpo.data import load_table

        d = cfg.data
        table = load_table(d.source, split=d.split, subset=d.subset)
        if d.categories is not None:  # the first n of the kinds asked for
            from unsloth_grpo.data import keep_categories

            table = keep_categories(table, d.categories, d.source)
        return table.select(range(min(n, len(table)))).to_list(), d.question_column, d.answer_column

    def final_answer(self, worked: str) -> str | None:
        """The reference answer of a worked answer (None: the text after its last ``####``)."""
        return None

    # ---------------------------------------------------------------- grading

    def grade(self, completion: Any, gold: Any, **settings: Any) -> Verdict:
        """The verdict on ``completion`` against ``gold``; ``settings`` are the grading reward's
        (where the answer is, how it is read)."""
        raise NotImplementedError(f"task {self.name!r} does not say how to grade")

    def grader(self, cfg) -> Grader:
        """:meth:`grade` with the settings of the recipe's grading reward: that reward's own ``.grader``.

        The first reward of :attr:`grading_rewards` among ``cfg.rewards`` (then the stages'
        rewards, the last stage first) is built as training builds it, and the function whose
        verdict it pays on is returned; the first of :attr:`grading_rewards` with its defaults
        when the recipe lists none of them. A task without a grading reward grades with
        :meth:`grade` as it is.
        """
        from unsloth_grpo.rewards import grader_of, reward_spec_fields

        if not self.grading_rewards:
            return self.grade
        specs = list(getattr(cfg, "rewards", None) or [])
        for stage in reversed(list(getattr(cfg, "stages", None) or [])):
            specs.extend(stage.rewards or [])
        for spec in [*specs, {"name": self.grading_rewards[0]}]:
            name, params = reward_spec_fields(spec)
            if name in self.grading_rewards:
                return grader_of(name, params)
        raise AssertionError("unreachable: the default spec names a grading reward")

    def lenient(self, cfg) -> Grader | None:
        """Evaluation's lenient reading (never a reward), or None for a task without one: only a
        task whose answer is one number has it (:func:`unsloth_grpo.grading.lenient`)."""
        return None

    def matches_format(self, completion: Any) -> bool:
        """Whether ``completion`` is in the task's answer format (evaluation's format compliance);
        by default a reasoning block then an answer block."""
        from unsloth_grpo.grading import matches_format

        return matches_format(completion)

    # ---------------------------------------------------------------- evaluation

    def grading(self, cfg, *, threshold: float | None = None) -> dict[str, Any]:
        """What evaluation grades with for ``cfg``: ``is_correct`` (:meth:`grader`),
        ``lenient_correct`` (:meth:`lenient`) and ``matches_format``, as
        :func:`unsloth_grpo.evaluation.evaluate.evaluate` takes them.

        With ``threshold``, a completion counts as right when its verdict's ``value`` (the partial
        credit of a task that gives it: token F1, the share of fields or of tests) reaches it.
        """
        grader = self.grader(cfg)
        if threshold is not None:
            grader = _at_least(grader, threshold)
        return {"is_correct": grader, "lenient_correct": self.lenient(cfg), "matches_format": self.matches_format}


def _at_least(grader: Grader, threshold: float) -> Grader:
    """``grader`` whose verdict is correct when its value reaches ``threshold``."""
    import dataclasses

    def graded(completion: Any, gold: Any) -> Verdict:
        verdict = grader(completion, gold)
        if (verdict.value or 0.0) >= threshold:
            return dataclasses.replace(verdict, status="correct")
        return verdict if not verdict.correct else dataclasses.replace(verdict, status="wrong")

    return graded


__all__ = ["Grader", "Task", "reasoned_completion"]
