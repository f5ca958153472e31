"""Build the adversarial corpus ``gsm8k_adversarial_completions.jsonl`` used by tests/test_rewards.py.

    python tests/data/make_adversarial_corpus.py       # rewrites the .jsonl next to this file

Each row is a GSM8K-style problem (the graded corpus's generators), its gold ``answer``, and a
completion written to fool a lax grader: the gold number is in it, but the completion does not
commit to it as its one final answer. A hedge (``18 or 20``, ``about 18``), a negation
(``not 18``, ``18 is wrong``), a scale word or sign that changes the value (``18 thousand``,
``minus 18``), the gold's digits with parentheses (``1(8)``), the gold inside a wrong expression
(``18 + 4``, ``20 - 3 = 18``), several answer blocks or boxes, an answer block opened inside
another, or the answer only in the reasoning. Such rows are labelled wrong (``correct: false``).

Beside each trap stands a control labelled right: the same trick used honestly (``minus 18`` when
the gold is -18, ``18 thousand`` when it is 18000, ``5 + 13 = 18``, the same answer in two
blocks), so that a grader cannot pass by refusing everything unusual. Labels come from how a
row was built, never from the project's grader. Nothing here imports ``unsloth_grpo``.
"""

from __future__ import annotations

import importlib.util
import json
import random
from fractions import Fraction
from pathlib import Path

OUT = Path(__file__).with_name("gsm8k_adversarial_completions.jsonl")
_spec = importlib.util.spec_from_file_location("make_graded_corpus", Path(__file__).with_name("make_graded_corpus.py"))
graded = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(graded)


def traps(rng: random.Random, g: int) -> list[tuple[str, str]]:
    """(kind, answer text) pairs holding the gold ``g`` (a whole number >= 10) and wrong all the same."""
    d = rng.choice([1, 2, 3, 5, 10])
    h = g + d
    s = str(g)
    cut = rng.randrange(1, len(s))
    return [
        ("hedge", f"{g} or {h}"),
        ("hedge", f"{h} or {g}"),
        ("hedge", f"either {g} or {h}"),
        ("hedge", f"about {g}"),
        ("hedge", f"approximately {g}"),
        ("hedge", f"{g} or so"),
        ("hedge", f"probably {g}"),
        ("hedge", f"at least {g}"),
        ("hedge", f"My guess is {g}"),
        ("negation", f"not {g}"),
        ("negation", f"{g} is wrong"),
        ("negation", f"The answer is not {g}."),
        ("negation", f"It isn't {g}"),
        ("negation", f"No, {g} is incorrect"),
        ("sign", f"minus {g}"),
        ("sign", f"-{g}"),
        ("sign", f"negative {g}"),
        ("scale", f"{g} thousand"),
        ("scale", f"{g} million"),
        ("scale", f"{g}k"),
        ("scale", f"{g} dozen"),
        ("parenthesised_digits", f"{s[:cut]}({s[cut:]})"),
        ("wrong_expression", f"{g} + {d}"),
        ("wrong_expression", f"{g} - {d}"),
        ("wrong_expression", f"2 * {g} = {2 * g}"),
        ("wrong_expression", f"{h} + {d} = {g}"),
        ("contains", f"I counted {g} apples but I am not sure"),
        ("contains", f"{g} apples and {d} pears"),
        ("percent", f"{g * 100}%"),
        ("several_boxes", f"\\boxed{{{h}}} \\boxed{{{g}}}"),
    ]


def controls(rng: random.Random, g: int) -> list[tuple[str, str, int]]:
    """(kind, answer text, gold) triples where the trick is honest and the answer right."""
    a = rng.randint(1, g - 1)
    return [
        ("control:sign_word", f"minus {g}", -g),
        ("control:scale", f"{g} thousand", g * 1000),
        ("control:dozen", f"{g} dozen", g * 12),
        ("control:equation", f"{a} + {g - a} = {g}", g),
        ("control:label", f"The answer is {g}.", g),
        ("control:unit", f"{g} dollars", g),
        ("control:boxed", f"\\boxed{{{g}}}", g),
    ]


def row(i: int, problem: str, question: str, gold: int, completion: str, correct: bool, how: str) -> dict:
    return {"id": i, "problem": problem, "question": question, "answer": str(gold), "completion": completion,
            "correct": correct, "how": how}


def build(n_problems: int = 24, seed: int = 7) -> list[dict]:
    rng = random.Random(seed)
    rows: list[dict] = []
    while len({r["question"] for r in rows}) < n_problems:
        problem = rng.choice(graded.PROBLEMS)
        question, steps, gold, kind, unit = problem(rng)
        if gold.denominator != 1 or gold < 10:
            continue  # whole golds of two digits or more, so that every trap can be built
        g = int(gold)
        reasoning = graded.reasoning_text(rng, steps)
        name = problem.__name__

        def add(answer: str, correct: bool, how: str, gold_value: int = g) -> None:
            rows.append(row(len(rows), name, question, gold_value, graded.wrap(rng, reasoning, answer), correct, how))

        for how, answer in traps(rng, g):
            add(answer, False, f"trap:{how}")
        for how, answer, gold_value in controls(rng, g):
            add(answer, True, how, gold_value)
        other = g + rng.choice([1, 2, 4])
        blocks = [
            (f"<reasoning>\n{reasoning}\n</reasoning>\n<answer>{other}</answer>\n<answer>{g}</answer>", False,
             "trap:several_blocks"),
            (f"<reasoning>\n{reasoning}\n</reasoning>\n<answer>{g}</answer>\n<answer>{other}</answer>", False,
             "trap:several_blocks"),
            (f"<reasoning>\n{reasoning}\n</reasoning>\n<answer>{other} <answer>{g}</answer>", False,
             "trap:nested_blocks"),
            (f"<reasoning>\n{reasoning}\nSo <answer>{g}</answer>.\n</reasoning>", False, "trap:only_in_reasoning"),
            (f"<reasoning>\n{reasoning}\nThe answer is {g}.\n</reasoning>\n<answer>\n</answer>", False,
             "trap:only_in_reasoning"),
            (f"{reasoning}\nThe answer is {g}.", False, "trap:no_answer_block"),
            (f"<reasoning>\n{reasoning}\n</reasoning>\n<answer>{g}</answer>\n<answer> {g} </answer>", True,
             "control:same_answer_twice"),
        ]
        for completion, correct, how in blocks:
            rows.append(row(len(rows), name, question, g, completion, correct, how))
    return rows


def render(rows: list[dict]) -> str:
    return "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows)


def main() -> None:
    rows = build()
    OUT.write_text(render(rows))
    right = sum(r["correct"] for r in rows)
    print(f"wrote {len(rows)} rows ({right} right controls, {len(rows) - right} traps) to {OUT}")


if __name__ == "__main__":
    main()
