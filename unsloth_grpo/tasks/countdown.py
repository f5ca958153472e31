"""Countdown (the TinyZero task): reach a target number from given numbers with + - * /.

The model sees numbers such as ``[44, 19, 35]`` and a target such as ``98`` and must answer
with an arithmetic expression that uses every given number exactly once, e.g.
``<answer>44 + 19 + 35</answer>``. This module owns the task: the offline problem generator
(every problem is built from a solution, so each one is solvable), the loader, the safe
expression checker, the ``countdown_equation`` reward and evaluation (:data:`TASK`). The reward
pays on :func:`grade`'s verdict and evaluation grades with the reward's own grader, so training and
evaluation measure the same thing.

Model output is never passed to ``eval``: :func:`evaluate_expression` accepts only digits,
``+ - * /``, parentheses and spaces, parses them with :mod:`ast` and walks the tree itself,
with exact fractions (so ``8 / 3 * 3`` is exactly 8). Powers, names, calls, attributes,
unary signs and float literals are refused before anything is computed.

Example::

    >>> problems = make_problems(2, seed=0)
    >>> row = problems[0]; sorted(row)
    ['answer', 'numbers', 'question', 'solution', 'target']
    >>> grade("<answer>" + row["solution"] + "</answer>", row["answer"]).rule
    'correct'
    >>> fn = countdown_equation()
    >>> gold = encode_gold([3, 4, 2], 14)
    >>> fn(["<answer>(3 + 4) * 2</answer>", "<answer>(3 + 4) + 2</answer>", "<answer>3 * 3</answer>",
    ...     "<answer>14</answer>", "<answer>__import__('os')</answer>"], answer=[gold] * 5)
    [1.0, 0.1, 0.1, 0.0, 0.0]
"""

from __future__ import annotations

import ast
import json
import random
import re
from fractions import Fraction
from typing import Any, Callable, Sequence

from unsloth_grpo.data import DataError, chat_prompt, load_table, row_label, synthetic_dataset
from unsloth_grpo.grading import DEFAULT_IGNORE_INSIDE, Verdict, find_answer, tag_markers
from unsloth_grpo.rewards._registry import RewardFunc, per_sample, register, texts
from unsloth_grpo.rewards.correctness import below_reward
from unsloth_grpo.tasks._recipe import Recipe, smoke_preset
from unsloth_grpo.tasks._task import Task, reasoned_completion

SYSTEM_PROMPT = (
    "Respond in the following format:\n"
    "<reasoning>\n...\n</reasoning>\n<answer>\n...\n</answer>\n"
    "Put only the equation inside <answer>, for example <answer>(1 + 2) * 3</answer>."
)

#: Rewards the recipe uses unless the config lists its own.
DEFAULT_REWARDS = [
    {"name": "xml_count", "weight": 0.5},
    {"name": "countdown_equation", "weight": 1.0},
]

#: Longest expression the checker reads; longer answers score as malformed. It also bounds
#: the work any answer can cause (no term can grow beyond ~10**200).
MAX_EXPRESSION_CHARS = 200

#: The rules :func:`grade`'s verdict names, from worst to best.
VERDICTS = ("missing", "malformed", "wrong_numbers", "wrong_value", "correct")

_ALLOWED = re.compile(r"[0-9+\-*/() \t\n]+")
_OPS: dict[type, Callable[[Fraction, Fraction], Fraction]] = {
    ast.Add: lambda a, b: a + b,
    ast.Sub: lambda a, b: a - b,
    ast.Mult: lambda a, b: a * b,
    ast.Div: lambda a, b: a / b,
}
_REFUSED = {ast.Pow: "'**' (power)", ast.FloorDiv: "'//' (floor division)"}
# Signs models write that mean the same operators.
_SYMBOLS = str.maketrans({"\u00d7": "*", "\u00f7": "/", "\u2212": "-", "\u2013": "-", "\u00b7": "*"})


class ExpressionError(ValueError):
    """The answer is not an arithmetic expression this task accepts (the message says why)."""


# ---------------------------------------------------------------- the safe checker


def evaluate_expression(expression: str) -> tuple[Fraction, list[int], int]:
    """``(value, numbers used, operator count)`` of an expression of integers and ``+ - * /``.

    A trailing ``= result`` is ignored (``"3 + 4 = 7"`` reads as ``3 + 4``). Raises
    :class:`ExpressionError` for anything else: other characters (names, ``**`` is caught as
    a power), unary signs, division by zero, empty or overlong text.

    >>> evaluate_expression("(8 / 3) * 3 = 8")
    (Fraction(8, 1), [8, 3, 3], 2)
    """
    expr = expression.translate(_SYMBOLS).split("=", 1)[0].strip()
    if not expr:
        raise ExpressionError("the expression is empty")
    if len(expr) > MAX_EXPRESSION_CHARS:
        raise ExpressionError(f"the expression is longer than {MAX_EXPRESSION_CHARS} characters")
    if not _ALLOWED.fullmatch(expr):
        raise ExpressionError("only digits, + - * /, parentheses and spaces are allowed")
    try:
        tree = ast.parse(expr, mode="eval")
    except (SyntaxError, ValueError, RecursionError, MemoryError) as exc:
        raise ExpressionError(f"not a well-formed expression ({type(exc).__name__})") from None
    used: list[int] = []
    ops = [0]

    def walk(node: ast.AST) -> Fraction:
        if isinstance(node, ast.Constant) and type(node.value) is int:
            used.append(node.value)
            return Fraction(node.value)
        if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
            left, right = walk(node.left), walk(node.right)
            if isinstance(node.op, ast.Div) and right == 0:
                raise ExpressionError("division by zero")
            ops[0] += 1
            return _OPS[type(node.op)](left, right)
        if isinstance(node, ast.BinOp):
            what = _REFUSED.get(type(node.op), type(node.op).__name__)
        elif isinstance(node, ast.UnaryOp):
            what = "a sign in front of a number"
        else:
            what = type(node).__name__
        raise ExpressionError(f"{what} is not allowed; use integers with + - * / and parentheses")

    try:
        value = walk(tree.body)
    except RecursionError:
        raise ExpressionError("the expression is nested too deeply") from None
    return value, used, ops[0]


def check_equation(expression: str, numbers: Sequence[int], target: int | Fraction) -> str:
    """Verdict on one expression for the problem ``numbers`` -> ``target`` (see :data:`VERDICTS`).

    ``malformed`` also covers a bare number: an equation needs at least one operator.
    ``wrong_numbers`` means a given number is missing, repeated or another number appears.
    """
    try:
        value, used, ops = evaluate_expression(expression)
    except ExpressionError:
        return "malformed"
    if ops == 0:
        return "malformed"
    if sorted(used) != sorted(int(n) for n in numbers):
        return "wrong_numbers"
    return "correct" if value == target else "wrong_value"


# ---------------------------------------------------------------- gold answers, grading


def encode_gold(numbers: Sequence[int], target: int) -> str:
    """The ``answer`` column: the problem itself, ``{"numbers": [...], "target": N}`` as JSON."""
    return json.dumps({"numbers": [int(n) for n in numbers], "target": int(target)})


def decode_gold(gold: Any) -> tuple[list[int], int]:
    """``(numbers, target)`` from an ``answer`` value (the JSON string, or a dict)."""
    data = json.loads(gold) if isinstance(gold, str) else gold
    try:
        numbers, target = data["numbers"], data["target"]
        return [int(n) for n in numbers], int(target)
    except (KeyError, TypeError, ValueError):
        raise DataError(
            f"countdown answer {gold!r} must be JSON like {{\"numbers\": [3, 4, 2], \"target\": 14}}"
        ) from None


#: How each :data:`VERDICTS` entry reads as a grader status.
_STATUS = {"correct": "correct", "wrong_value": "wrong", "wrong_numbers": "wrong", "malformed": "unparseable",
           "missing": "missing"}


def grade(
    text: Any, gold: Any, *, tag: str | tuple[str, str] = "answer", ignore_inside: Sequence[str] = DEFAULT_IGNORE_INSIDE
) -> Verdict:
    """Verdict on a whole completion, its rule one of :data:`VERDICTS`: ``missing`` without an
    answer block, else :func:`check_equation`'s.

    Several different answer blocks are a hedge, graded ``malformed`` (so are too many blocks).
    """
    numbers, target = decode_gold(gold)
    expression, source = find_answer(text, tag, ignore_inside=ignore_inside)
    if expression is None:
        rule = "missing" if source == "no_answer" else "malformed"
        return Verdict(_STATUS[rule], rule)
    rule = check_equation(expression, numbers, target)
    return Verdict(_STATUS[rule], rule, source, expression)


@register("countdown_equation", family="correctness", low=0.0, high=1.0)
def countdown_equation(
    *,
    reward: float = 1.0,
    partial: float = 0.1,
    tag: str | Sequence[str] = "answer",
) -> RewardFunc:
    """`reward` when the answer uses each given number once and hits the target; `partial` for a wrong equation.

    The gold ``answer`` column holds the problem (``{"numbers": [...], "target": N}``). A
    well-formed equation (integers, ``+ - * /``, at least one operator) that misses the target
    or misuses the numbers earns ``partial``; no answer, a bare number, division by zero or
    anything that is not plain arithmetic scores 0.
    """
    key = tuple(tag) if not isinstance(tag, str) else tag
    tag_markers(key)  # a malformed tag fails here, not at the first training step
    below_reward("countdown_equation", reward, partial=partial)
    scores = {"correct": reward, "wrong_value": partial, "wrong_numbers": partial, "malformed": 0.0, "missing": 0.0}

    def grader(completion: Any, gold: Any) -> Verdict:
        return grade(completion, gold, tag=key)

    def reward_fn(completions, answer=None, **kwargs) -> list[float | None]:
        if answer is None:
            raise ValueError("countdown_equation needs the 'answer' column (the countdown problem as JSON)")
        golds = per_sample(answer, len(completions), "answer")
        return [scores[grader(t, g).rule] for t, g in zip(texts(completions), golds)]

    reward_fn.grader = grader  # type: ignore[attr-defined]
    return reward_fn


# ---------------------------------------------------------------- offline problems


def _solve_from(rng: random.Random, numbers: list[int]) -> tuple[int, str]:
    """Combine ``numbers`` in random order with random valid operators; return value and expression.

    Subtraction keeps intermediate values non-negative and division is used only when it is
    exact, so every intermediate value is a whole number and the solution reads like one a
    person would write.
    """
    pool = [(n, str(n)) for n in numbers]
    while len(pool) > 1:
        (a, ea), (b, eb) = pool.pop(rng.randrange(len(pool))), pool.pop(rng.randrange(len(pool)))
        ops = {"+": a + b, "*": a * b}
        if a >= b:
            ops["-"] = a - b
        if b != 0 and a % b == 0:
            ops["/"] = a // b
        op = rng.choice(sorted(ops))
        pool.append((ops[op], f"{_operand(ea)} {op} {_operand(eb)}"))
    return pool[0]


def _operand(expression: str) -> str:
    return f"({expression})" if " " in expression else expression


def make_problem(
    rng: random.Random, *, count: int = 3, max_number: int = 99, max_target: int = 100, tries: int = 200
) -> dict[str, Any]:
    """One solvable problem: ``numbers``, ``target``, a ``solution`` expression, ``question``, ``answer``."""
    for _ in range(tries):
        numbers = [rng.randint(1, max_number) for _ in range(count)]
        value, solution = _solve_from(rng, numbers)
        if 1 <= value <= max_target:
            target = value
            shown = rng.sample(numbers, len(numbers))
            question = (
                f"Using the numbers {shown}, write an equation that equals {target}. "
                "Use + - * / and each number exactly once."
            )
            return {"numbers": shown, "target": target, "solution": solution,
                    "question": question, "answer": encode_gold(shown, target)}
    raise DataError(
        f"could not build a countdown problem with {count} numbers up to {max_number} and a target up to "
        f"{max_target} in {tries} tries; raise max_target or lower count"
    )


def make_problems(
    n: int, seed: int = 0, *, min_count: int = 3, max_count: int = 4, max_number: int = 99, max_target: int = 100
) -> list[dict[str, Any]]:
    """``n`` solvable problems with ``min_count``..``max_count`` numbers each, deterministic per seed."""
    if n < 1:
        raise DataError(f"num_synthetic={n}: ask for at least one countdown problem")
    if not 2 <= min_count <= max_count:
        raise DataError(f"countdown needs 2 <= min_count <= max_count, got {min_count}..{max_count}")
    rng = random.Random(seed)
    return [make_problem(rng, count=rng.randint(min_count, max_count), max_number=max_number,
                         max_target=max_target) for _ in range(n)]


# ---------------------------------------------------------------- loading


def load_countdown(
    source: str = "synthetic",
    split: str = "train",
    *,
    subset: str | None = None,
    system_prompt: str | None = None,
    limit: int | None = None,
    num_synthetic: int = 512,
    seed: int = 0,
):
    """Countdown rows as ``prompt`` (system + user chat messages), ``answer`` (problem JSON), ``solution``.

    ``source`` is ``"synthetic"`` (offline, solvable problems; the test split uses another seed)
    or a local file / hub dataset with a ``target`` column and a ``nums`` or ``numbers`` column
    (TinyZero's ``Jiayi-Pan/Countdown-Tasks-3to4`` has that shape).
    """
    import datasets

    system = SYSTEM_PROMPT if system_prompt is None else system_prompt
    if source == "synthetic":
        return synthetic_dataset(make_problems, split=split, seed=seed, num_synthetic=num_synthetic, limit=limit,
                                 system_prompt=system, columns=("answer", "solution"))
    rows = _rows_from_table(load_table(source, split=split, subset=subset), source, limit)
    return datasets.Dataset.from_dict({
        "prompt": [chat_prompt(r["question"], system) for r in rows],
        "answer": [r["answer"] for r in rows],
        "solution": [r.get("solution", "") for r in rows],
    })


def _rows_from_table(table, source: str, limit: int | None) -> list[dict[str, Any]]:
    numbers_col = next((c for c in ("nums", "numbers") if c in table.column_names), None)
    if numbers_col is None or "target" not in table.column_names:
        raise DataError(
            f"countdown dataset '{source}' needs a 'target' column and a 'nums' or 'numbers' column; "
            f"it has {', '.join(table.column_names) or 'none'}"
        )
    if limit is not None:
        table = table.select(range(min(limit, len(table))))
    rows, bad = [], []
    for i, (numbers, target) in enumerate(zip(table[numbers_col], table["target"])):
        try:
            numbers = [int(n) for n in numbers]
            target = int(target)
        except (TypeError, ValueError):
            bad.append(f"{row_label(source, i)}: numbers={numbers!r}, target={target!r} are not integers")
            continue
        if len(numbers) < 2:
            bad.append(f"{row_label(source, i)}: needs at least two numbers, got {numbers!r}")
            continue
        question = (f"Using the numbers {numbers}, write an equation that equals {target}. "
                    "Use + - * / and each number exactly once.")
        rows.append({"question": question, "answer": encode_gold(numbers, target)})
    if bad:
        more = f"\n  ... and {len(bad) - 5} more" if len(bad) > 5 else ""
        raise DataError(f"countdown dataset '{source}' has {len(bad)} malformed row(s):\n  "
                        + "\n  ".join(bad[:5]) + more)
    if not rows:
        raise DataError(f"countdown dataset '{source}' is empty")
    return rows


# ---------------------------------------------------------------- the task


class Countdown(Task):
    """Reach a target from given numbers; graded by the safe expression checker."""

    name = "countdown"
    system_prompt = SYSTEM_PROMPT
    default_rewards = DEFAULT_REWARDS
    grading_rewards = ("countdown_equation",)
    loader = staticmethod(load_countdown)
    grade = staticmethod(grade)

    def gold_completion(self, row: dict) -> str | None:
        return reasoned_completion(row["solution"]) if row.get("solution") else None


TASK = Countdown()


# ---------------------------------------------------------------- recipe

#: The first line of ``python -m unsloth_grpo.recipes.countdown --help``.
RECIPE_DESCRIPTION = 'Countdown recipe: reach a target number with given numbers and + - * / (the TinyZero task).'

DEFAULTS = {
    "task": "countdown",
    "output_dir": "outputs/countdown",
    # TinyZero saw the search behaviour appear from 3B up; smaller models mostly learn the format.
    "model": {"name": "unsloth/Qwen2.5-3B-Instruct-bnb-4bit", "max_seq_length": 768, "load_in_4bit": True},
    "lora": {"r": 16, "alpha": 32},
    "data": {"source": "synthetic", "subset": None, "num_synthetic": 4096, "max_prompt_tokens": 256},
    "rewards": DEFAULT_REWARDS,
    "training": {"max_steps": 400, "max_completion_length": 512},
}

PRESETS = {
    # Offline on CPU with the tiny random model. It cannot search for equations, so the
    # answer tags carry the rising reward; countdown_equation is still computed and logged.
    "smoke": smoke_preset(
        output_dir="outputs/countdown-smoke",
        task_rewards=[{"name": "countdown_equation", "weight": 1.0}],
    ),
    # Colab T4 (16 GB, no bf16).
    "t4": {"model": {"dtype": "fp16"}},  # the vLLM pool is standby's: Unsloth sizes it from the card
}

RECIPE = Recipe("countdown", DEFAULTS, PRESETS, description=RECIPE_DESCRIPTION)
