"""A curriculum driven by GRPO's own signal: a dataset's level moves with the share of its groups that agree.

GRPO learns only from groups whose rewards differ. A dataset whose groups are almost all right is too easy
to teach anything, one whose groups are almost all wrong too hard; the rule (:func:`next_level`) moves the
level of such a dataset up or down one, from the groups of the last ``window`` optimizer steps of that
dataset (the row's ``category`` column names it), judged by the task's correctness reward: a group
is all right when every completion is paid, all wrong when none is and at least one of them gave an answer
the grade could read (:meth:`LevelSource.answered`). A group that answered nothing says that the model has
not learned the answer format yet, not that the level is too hard: by default (``unanswered: hold``) it counts
as neither, so a model still learning the format stays at its level (on SmolLM2 from the base model, a
curriculum that counted such groups as wrong went down at step 6 with not one answer written, benchmarks/
real_model_curriculum.py); ``unanswered: down`` counts it as all wrong.

Where the levels come from is the task's business (a :class:`LevelSource`: the reasoning_gym task
generates a pool of rows per dataset and level with reasoning-gym's own curriculum classes). This module
holds the rule and the wiring, :func:`attach`, which wraps two methods of the built trainer on the instance
as dynamic sampling does (and must be attached before it, so that its refill rounds pass through here):

- ``_generate_and_score_completions``: each row holding a ``curriculum_slot`` is replaced by the row in
  that slot of its dataset's pool at the current level. The levels are settled once, at the first
  generation of an optimizer step (:meth:`Curriculum.begin_step`), from the groups of the steps before;
  every generation round of that step, refill rounds included, reads the same levels. So under
  ``dynamic_sampling: refill`` all rounds of a step are draws of one distribution, which is what
  :func:`~unsloth_grpo.training.dynamic_sampling.first_round_reward` assumes.
- ``_calculate_rewards``: the rewards of every completion (the tensor TRL gathers from all processes)
  are counted by dataset and group for the step's statistics; nothing else changes.

Every checkpoint holds the curriculum's state (:data:`STATE_FILE`: the levels, each dataset's window, the moves),
written as the checkpoint is saved (``_save_checkpoint``, which Ctrl-C's save also goes through), and a resumed
run reads it back before its first step: the levels go on from where they were, not from the start levels.

Each step logs ``curriculum/<dataset>/level`` (the level its rows were drawn at), ``curriculum/<dataset>/mixed``
(the share of its groups that held a right and a wrong answer, those GRPO learns correctness from, over the
step's generation rounds) and, once the window is full, ``curriculum/<dataset>/all_right`` and ``.../all_wrong``
(the window's shares the rule read).
"""

from __future__ import annotations

import dataclasses
import json
from collections import deque
from pathlib import Path
from typing import Any, Callable, Protocol


#: The file in a checkpoint that holds the curriculum's state.
STATE_FILE = "curriculum.json"


@dataclasses.dataclass(frozen=True)
class LevelRule:
    """When one dataset's level moves: ``up`` (``down``) is the share of its groups in the last ``window``
    steps that must be all right (all wrong); levels run from 0 to ``highest``."""

    up: float = 0.9
    down: float = 0.9
    window: int = 5
    highest: int = 0
    unanswered: str = "hold"  # a group with no readable answer: "hold" (neither right nor wrong) or "down" (wrong)


def next_level(level: int, right: int, wrong: int, groups: int, rule: LevelRule) -> int:
    """The level after a full window of ``groups`` groups, ``right`` of them all right and ``wrong`` all wrong.

    >>> rule = LevelRule(up=0.9, down=0.9, window=5, highest=3)
    >>> next_level(1, 19, 0, 20, rule), next_level(1, 0, 18, 20, rule), next_level(1, 10, 5, 20, rule)
    (2, 0, 1)
    >>> next_level(3, 20, 0, 20, rule), next_level(0, 0, 20, 20, rule)   # already at the top, the bottom
    (3, 0)
    """
    if groups <= 0:
        return level
    if right / groups >= rule.up and level < rule.highest:
        return level + 1
    if wrong / groups >= rule.down and level > 0:
        return level - 1
    return level


class LevelSource(Protocol):
    """What a task gives the curriculum: its datasets' rules and start levels, and rows at a level."""

    rules: dict[str, dict]  # by dataset: LevelRule's fields
    start: dict[str, int]
    grading_reward: str

    def rows(self, name: str, level: int) -> list[dict[str, Any]]:
        """The pool of ``name`` at ``level``: rows with the task's ``prompt`` and ``answer``, in a seeded order."""

    def answered(self, completion: Any) -> bool:
        """Whether ``completion`` gave an answer the task's grade reads (right or wrong). A source without this
        method has every completion counted as answered."""


class Curriculum:
    """The levels of a run's datasets, settled between optimizer steps (see the module docstring)."""

    def __init__(self, source: LevelSource) -> None:
        self.source = source
        self.rules = {name: LevelRule(**rule) for name, rule in source.rules.items()}
        self.levels = dict(source.start)
        self.windows = {name: deque(maxlen=rule.window) for name, rule in self.rules.items()}
        self.step: int | None = None
        self.counts: dict[str, list[int]] = {}  # this step's [all right, all wrong, groups] by dataset
        self.shares: dict[str, tuple[float, float]] = {}  # this step's decisions: the window's (all right, all wrong)
        self.moves: list[tuple[int, str, int, int]] = []  # (global step it began, dataset, from, to)

    def begin_step(self, step: int) -> bool:
        """Settle the levels for optimizer step ``step``; True when this call began it. A second call for
        the same step changes nothing: the levels hold for every generation round of a step."""
        if step == self.step:
            return False
        self.shares = {}
        if self.step is not None:
            for name, window in self.windows.items():
                window.append(tuple(self.counts.get(name, (0, 0, 0))))
                self._decide(step, name, window)
        self.step, self.counts = step, {}
        return True

    def _decide(self, step: int, name: str, window: deque) -> None:
        rule = self.rules[name]
        if len(window) < rule.window:
            return
        right, wrong, groups = (sum(c[i] for c in window) for i in range(3))
        if groups:
            self.shares[name] = (right / groups, wrong / groups)
        else:  # no group of this dataset in the window: nothing to log, nothing to decide
            self.shares.pop(name, None)
        level = self.levels[name]
        new = next_level(level, right, wrong, groups, rule)
        if new != level:
            self.levels[name] = new
            self.moves.append((step, name, level, new))
            window.clear()  # the groups seen at the old level say nothing more about the new one

    def state(self) -> dict[str, Any]:
        """What a resume needs to go on exactly: the levels, the step they were settled for, this step's counts,
        each dataset's window and the moves so far (plain JSON)."""
        return {"levels": dict(self.levels), "step": self.step, "counts": {k: list(v) for k, v in self.counts.items()},
                "windows": {k: [list(c) for c in w] for k, w in self.windows.items()},
                "moves": [list(m) for m in self.moves]}

    def load(self, state: dict[str, Any]) -> None:
        """Take back :meth:`state`; a dataset the saved state does not know keeps its start level."""
        for name, level in state.get("levels", {}).items():
            if name in self.levels:
                self.levels[name] = min(max(int(level), 0), self.rules[name].highest)
        for name, window in state.get("windows", {}).items():
            if name in self.windows:
                self.windows[name].clear()
                self.windows[name].extend(tuple(int(x) for x in c) for c in window)
        self.step = state.get("step")
        self.counts = {k: [int(x) for x in v] for k, v in state.get("counts", {}).items() if k in self.levels}
        self.moves = [tuple(m) for m in state.get("moves", [])]

    def observe(self, categories: list, correct: list[bool], num_generations: int,
                answered: list[bool] | None = None) -> dict[str, list[int]]:
        """Count the groups (``num_generations`` consecutive completions) of one scored batch by dataset;
        ``answered`` says which completions gave a readable answer (None: all of them). Returns this batch's
        own ``[all right, all wrong, groups, mixed]`` by dataset, mixed being a right and a wrong answer."""
        batch: dict[str, list[int]] = {}
        for start in range(0, len(correct) - num_generations + 1, num_generations):
            name = categories[start]
            if name not in self.windows:
                continue
            group = correct[start:start + num_generations]
            said = answered is None or any(answered[start:start + num_generations])
            wrong = not any(group) and (said or self.rules[name].unanswered == "down")
            for count in (self.counts.setdefault(name, [0, 0, 0]), batch.setdefault(name, [0, 0, 0, 0])):
                count[0] += all(group)
                count[1] += wrong
                count[2] += 1
            batch[name][3] += any(group) and not all(group)
        return batch

    def resolve(self, rows: list[dict]) -> list[dict]:
        """``rows`` with each curriculum row's prompt and answer taken from its pool at the current level."""
        out = []
        for row in rows:
            name, slot = row.get("category"), row.get("curriculum_slot")
            if name in self.levels and slot is not None and slot >= 0:
                pool = self.source.rows(name, self.levels[name])
                row = {**row, **{k: pool[slot % len(pool)][k] for k in ("prompt", "answer")}}
            out.append(row)
        return out


def attach(trainer, source: LevelSource, *, log: Callable[[str], None] | None = None) -> Curriculum:
    """Give a built ``GRPOTrainer`` the curriculum of ``source``; attach before dynamic sampling."""
    names = list(getattr(trainer, "reward_func_names", []))
    if source.grading_reward not in names:
        raise ValueError(f"the curriculum judges groups by the {source.grading_reward} reward; add it to rewards "
                         f"(the run's rewards: {', '.join(names) or 'none'})")
    column = names.index(source.grading_reward)
    curriculum = Curriculum(source)
    answers = getattr(source, "answered", None)
    generate, rewards_of = trainer._generate_and_score_completions, trainer._calculate_rewards
    moved = [0]  # the moves already said

    def generate_and_score(inputs):
        if trainer.model.training and curriculum.begin_step(trainer.state.global_step):
            for step, name, old, new in curriculum.moves[moved[0]:]:
                if log is not None:
                    right, wrong = curriculum.shares.get(name, (0.0, 0.0))
                    log(f"curriculum: {name} level {old} -> {new} from step {step + 1} ({right:.0%} of its groups all "
                        f"right, {wrong:.0%} all wrong over the last {curriculum.rules[name].window} steps)")
            moved[0] = len(curriculum.moves)
            metrics = trainer._metrics["train"]
            for name, level in curriculum.levels.items():
                metrics[f"curriculum/{name}/level"].append(float(level))
                if name in curriculum.shares:
                    right, wrong = curriculum.shares[name]
                    metrics[f"curriculum/{name}/all_right"].append(right)
                    metrics[f"curriculum/{name}/all_wrong"].append(wrong)
        return generate(curriculum.resolve(list(inputs)))

    def calculate_rewards(inputs, prompts, completions, completion_ids_list):
        rewards = rewards_of(inputs, prompts, completions, completion_ids_list)
        if trainer.model.training:
            categories = [row.get("category") for row in inputs]
            answered = [bool(answers(c)) for c in completions] if answers is not None else None
            if trainer.accelerator.num_processes > 1:  # the rewards are every process's rows, in process order
                from accelerate.utils import gather_object

                categories = gather_object(categories)
                answered = gather_object(answered) if answered is not None else None
            paid = rewards[:, column].nan_to_num(0.0) > 0
            batch = curriculum.observe(categories, paid.tolist(), trainer.num_generations, answered)
            for name, (_, _, groups, mixed) in batch.items():  # averaged over the step's rounds when logged
                trainer._metrics["train"][f"curriculum/{name}/mixed"].append(mixed / groups)
        return rewards

    save, train = trainer._save_checkpoint, trainer.train

    def save_checkpoint(*args, **kwargs):
        save(*args, **kwargs)
        from unsloth_grpo.training.checkpoint import PREFIX

        staged = Path(trainer.args.output_dir) / f"{PREFIX}{trainer.state.global_step}"  # the save's staging folder
        if trainer.accelerator.is_main_process and staged.is_dir():
            (staged / STATE_FILE).write_text(json.dumps(curriculum.state()))

    def train_from(resume_from_checkpoint=None, *args, **kwargs):
        saved = Path(resume_from_checkpoint) / STATE_FILE if isinstance(resume_from_checkpoint, (str, Path)) else None
        if saved is not None and saved.is_file():
            curriculum.load(json.loads(saved.read_text()))
            moved[0] = len(curriculum.moves)  # said by the run that made them
            if log is not None:
                log("curriculum: resumed at " + ", ".join(f"{n} level {v}" for n, v in curriculum.levels.items()))
        return train(resume_from_checkpoint, *args, **kwargs)

    trainer._generate_and_score_completions = generate_and_score
    trainer._calculate_rewards = calculate_rewards
    trainer._save_checkpoint = save_checkpoint
    trainer.train = train_from
    trainer.curriculum = curriculum
    if log is not None:
        log("curriculum: " + "; ".join(
            f"{name} from level {curriculum.levels[name]} of 0-{rule.highest} (up at {rule.up:.0%} of groups all "
            f"right, down at {rule.down:.0%} all wrong, over {rule.window} steps; a group with no answer "
            f"{'holds' if rule.unanswered == 'hold' else 'counts as wrong'})"
            for name, rule in curriculum.rules.items()))
    return curriculum
