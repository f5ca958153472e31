"""A stateful tool environment: guess the hidden number, told "higher" or "lower" after each try.

It is the example of TRL's ``environment_factory`` that ``docs/tools.md`` walks through. One
instance serves one rollout at a time; TRL calls :meth:`GuessingGame.reset` with the dataset
row before the rollout (here the row's ``answer`` column holds the hidden number), and every
public method is a tool the model may call. The state (the number, the guesses so far) lives
across the turns of a rollout, which a plain function cannot do.

    >>> game = GuessingGame()
    >>> game.reset(answer="7")
    >>> game.guess(number=3), game.guess(number=9), game.guess(number=7)
    ('higher', 'lower', 'correct')
    >>> game.solved, game.guesses
    (True, 3)
"""

from __future__ import annotations

from unsloth_grpo.tools._registry import register_environment


@register_environment("guess_number")
class GuessingGame:
    """Guess the hidden whole number; each guess is answered with higher, lower or correct."""

    def __init__(self, low: int = 1, high: int = 20) -> None:
        self.low, self.high = low, high
        self.secret: int | None = None
        self.guesses = 0
        self.solved = False

    def reset(self, answer: str | int | None = None, **row) -> None:
        """Start a new game with the row's hidden number (TRL passes every dataset column)."""
        if answer is None:
            raise ValueError("the guessing game needs an 'answer' column holding the hidden number")
        self.secret = int(answer)
        self.guesses = 0
        self.solved = False

    def guess(self, number: int) -> str:
        """Guess the hidden number.

        Args:
            number: A whole number between the bounds given in the question.
        """
        if self.secret is None:
            raise RuntimeError("the game has not started: reset() was not called")
        if self.solved:
            return "already solved"
        try:
            value = int(number)
        except (TypeError, ValueError):
            raise ValueError(f"{number!r} is not a whole number") from None
        self.guesses += 1
        if value == self.secret:
            self.solved = True
            return "correct"
        return "higher" if value < self.secret else "lower"
