"""Guess the number: the stateful-environment example (TRL's ``environment_factory``).

Each row hides a whole number (the ``answer`` column). The model calls ``guess(number)`` on a
:class:`~unsloth_grpo.tools.guessing.GuessingGame`, which answers higher, lower or correct and
remembers the guesses; the reward reads the game's state after the rollout, so it scores
what happened in the environment, not what the model claims.

    >>> from unsloth_grpo.tools.guessing import GuessingGame
    >>> game = GuessingGame(); game.reset(answer="4"); _ = game.guess(2); _ = game.guess(4)
    >>> guess_solved()([[]], environments=[game])
    [0.9]
"""

from __future__ import annotations

import random

from unsloth_grpo.data import DataError, chat_prompt, split_seed
from unsloth_grpo.grading import Verdict, grade
from unsloth_grpo.rewards._registry import RewardFunc, register
from unsloth_grpo.tasks._task import Task

SYSTEM_PROMPT = "Find the hidden number with the guess tool; each guess is answered with higher, lower or correct."

DEFAULT_REWARDS = [{"name": "guess_solved", "weight": 1.0}]


@register("guess_solved", family="tools", low=0.0, high=1.0)
def guess_solved(*, step_cost: float = 0.1, floor: float = 0.1) -> RewardFunc:
    """1.0 for finding the number with the first guess, ``step_cost`` less per extra guess (at least ``floor``); 0 unsolved.

    Reads the rollout's environment (TRL passes ``environments``); without one it does not apply (None).
    """

    def reward_fn(completions, environments=None, **kwargs) -> list[float | None]:
        if environments is None:
            return [None] * len(completions)
        return [max(floor, 1.0 - step_cost * (env.guesses - 1)) if env.solved else 0.0 for env in environments]

    reward_fn.__name__ = "guess_solved"
    return reward_fn


def make_games(n: int, *, seed: int = 0, low: int = 1, high: int = 20) -> list[dict]:
    """``n`` rows with a question and the hidden number, deterministic per seed."""
    if n < 1:
        raise DataError(f"num_synthetic={n}: ask for at least one game")
    rng = random.Random(seed)
    question = f"I am thinking of a whole number from {low} to {high}. Which is it?"
    return [{"question": question, "answer": str(rng.randint(low, high))} for _ in range(n)]


class GuessNumber(Task):
    """Synthetic games (``data.source: synthetic``); the reward reads the game, not the text.

    Evaluation without the game (plain generation) reads the number the model names in its answer
    block with the library's grader.
    """

    name = "guess_number"
    system_prompt = SYSTEM_PROMPT
    default_rewards = DEFAULT_REWARDS

    def read(self, cfg, system_prompt):
        import datasets

        d = cfg.data
        if d.source != "synthetic":
            raise DataError(f"data.source={d.source!r}: the guess_number task generates its games; "
                            "set data.source=synthetic")
        rows = make_games(d.limit or d.num_synthetic, seed=split_seed(cfg.seed, d.split))
        return datasets.Dataset.from_list([{"prompt": chat_prompt(r["question"], system_prompt), "answer": r["answer"]}
                                           for r in rows])

    def grade(self, completion, gold, **settings) -> Verdict:
        return grade(completion, gold, **settings)


TASK = GuessNumber()
