"""Build the graded corpus ``gsm8k_graded_completions.jsonl`` used by tests/test_rewards.py.

    python tests/data/make_graded_corpus.py            # rewrites the .jsonl next to this file

Each row is a GSM8K-style word problem, its gold ``answer`` (as GSM8K writes it after ``####``),
and one solution in the recipe's format (``<reasoning>...</reasoning><answer>...</answer>``)
written the way models write them: calculator annotations, intermediate results, preambles,
text after the answer, and the final answer in many surface forms (``18``, ``$18.00``,
``\\boxed{18}``, ``1,250``, ``85%``, ``3/4``, ``18 apples``, "The answer is 18.", ...).

The ``correct`` label is assigned by how the solution was built, never by the project's
extractor: a solution is correct when its final ``<answer>`` block, outside the reasoning,
states the gold value; it is wrong when that block states another value (a near miss, an
intermediate result, a sign or magnitude slip, a hedge between two values) or when there is
no such block (truncated output, the answer only inside the reasoning, only "The answer is").
Nothing here imports ``unsloth_grpo``.
"""

from __future__ import annotations

import json
import random
from fractions import Fraction
from pathlib import Path

OUT = Path(__file__).with_name("gsm8k_graded_completions.jsonl")
NAMES = ["Natalia", "Weng", "Betty", "Julie", "James", "Albert", "Ken", "Mark", "Tina", "Randy",
         "Alexis", "Jasmine", "Carla", "Toby", "Marissa", "Gerald"]


def num(x: Fraction | int) -> str:
    """GSM8K's way of writing a gold number: no separators, no trailing zeros."""
    x = Fraction(x)
    if x.denominator == 1:
        return str(x.numerator)
    text = f"{float(x):.10f}".rstrip("0").rstrip(".")
    assert Fraction(text) == x, x
    return text


# ---------------------------------------------------------------- problems
# Each returns (question, steps, gold, kind, unit) where steps are (sentence, value) pairs: the
# sentence states an intermediate result, the value is that result (used for wrong answers
# that repeat an intermediate step).


def change(rng):
    name, n, price = rng.choice(NAMES), rng.randint(2, 9), rng.randint(3, 24)
    bill = rng.choice([50, 100, 200])
    while n * price >= bill:
        n -= 1
    cost = n * price
    q = f"{name} buys {n} notebooks at ${price} each and pays with a ${bill} bill. How much change does {name} get?"
    steps = [(f"The notebooks cost {n} * ${price} = $<<{n}*{price}={cost}>>{cost}.", cost),
             (f"The change is ${bill} - ${cost} = $<<{bill}-{cost}={bill - cost}>>{bill - cost}.", bill - cost)]
    return q, steps, Fraction(bill - cost), "money", "dollars"


def reading(rng):
    name, rate, hours = rng.choice(NAMES), rng.randint(12, 45), rng.randint(2, 12)
    pages = rate * hours
    q = f"{name} reads {rate} pages per hour. How many hours does it take {name} to read a {pages}-page book?"
    steps = [(f"The book has {pages} pages and {name} reads {rate} pages each hour.", rate),
             (f"So it takes {pages} / {rate} = <<{pages}/{rate}={hours}>>{hours} hours.", hours)]
    return q, steps, Fraction(hours), "count", "hours"


def discount(rng):
    price, pct = rng.choice([20, 40, 60, 80, 90, 120, 150, 250]), rng.choice([10, 15, 20, 25, 30, 35])
    off = Fraction(price * pct, 100)
    q = f"A jacket costs ${price}. It is on sale for {pct}% off. What is the sale price of the jacket in dollars?"
    steps = [(f"The discount is {pct}/100 * ${price} = ${num(off)}.", off),
             (f"The sale price is ${price} - ${num(off)} = ${num(price - off)}.", price - off)]
    return q, steps, price - off, "money", "dollars"


def marbles(rng):
    name, d = rng.choice(NAMES), rng.choice([2, 3, 4, 5])
    total = d * rng.randint(6, 30)
    given, k = total // d, rng.randint(1, 5)
    left = total - given - k
    q = (f"{name} has {total} marbles. {name} gives 1/{d} of them to a brother and {k} to a sister. "
         "How many marbles does " + name + " have left?")
    steps = [(f"1/{d} of {total} is {total} / {d} = <<{total}/{d}={given}>>{given} marbles.", given),
             (f"After the brother, {total} - {given} = <<{total}-{given}={total - given}>>{total - given} remain.", total - given),
             (f"After the sister, {total - given} - {k} = <<{total - given}-{k}={left}>>{left} remain.", left)]
    return q, steps, Fraction(left), "count", "marbles"


def ages(rng):
    a, b = rng.sample(NAMES, 2)
    x, y, z = rng.randint(2, 15), rng.randint(2, 10), rng.randint(15, 40)
    now_b, now_a = z - y, z - y + x
    q = f"{a} is {x} years older than {b}. In {y} years, {b} will be {z}. How old is {a} now?"
    steps = [(f"{b} is now {z} - {y} = <<{z}-{y}={now_b}>>{now_b} years old.", now_b),
             (f"{a} is {now_b} + {x} = <<{now_b}+{x}={now_a}>>{now_a} years old.", now_a)]
    return q, steps, Fraction(now_a), "count", "years old"


def savings(rng):
    name = rng.choice(NAMES)
    wage, hours, days = rng.randint(12, 48), rng.randint(4, 10), rng.choice([5, 10, 20, 22, 30])
    spent = rng.randint(1, 30) * 25
    earned = wage * hours * days
    while spent >= earned:
        spent //= 2
    q = (f"{name} earns ${wage} an hour and works {hours} hours a day for {days} days. "
         f"{name} spends ${spent} of it. How much money does {name} save?")
    daily = wage * hours
    steps = [(f"Each day {name} earns {wage} * {hours} = $<<{wage}*{hours}={daily}>>{daily}.", daily),
             (f"In {days} days that is {daily} * {days} = $<<{daily}*{days}={earned}>>{earned}.", earned),
             (f"{name} saves {earned} - {spent} = $<<{earned}-{spent}={earned - spent}>>{earned - spent}.", earned - spent)]
    return q, steps, Fraction(earned - spent), "money", "dollars"


def percent_right(rng):
    name, total = rng.choice(NAMES), rng.choice([20, 25, 40, 50])
    right = rng.randint(total // 2, total)
    pct = Fraction(right * 100, total)
    q = f"{name} answered {right} out of {total} questions correctly. What percentage of the questions did {name} get right?"
    steps = [(f"The share right is {right} / {total} = {num(Fraction(right, total))}.", Fraction(right, total)),
             (f"As a percentage that is {num(Fraction(right, total))} * 100 = {num(pct)}%.", pct)]
    return q, steps, pct, "percent", "percent"


def average(rng):
    name = rng.choice(NAMES)
    a, b = rng.randint(60, 100), rng.randint(60, 100)
    c = rng.randint(60, 100)
    while (a + b + c) % 3:
        c += 1
    q = f"{name} scored {a}, {b} and {c} on three tests. What is {name}'s average score?"
    s = a + b + c
    steps = [(f"The total is {a} + {b} + {c} = <<{a}+{b}+{c}={s}>>{s}.", s),
             (f"The average is {s} / 3 = <<{s}/3={s // 3}>>{s // 3}.", s // 3)]
    return q, steps, Fraction(s // 3), "count", "points"


def temperature(rng):
    t, d = rng.randint(1, 12), rng.randint(13, 30)
    q = (f"The temperature was {t} degrees at noon and dropped {d} degrees by midnight. "
         "What was the temperature at midnight?")
    steps = [(f"It went from {t} down by {d}: {t} - {d} = {t - d}.", t - d)]
    return q, steps, Fraction(t - d), "count", "degrees"


def recipe(rng):
    cups, cakes = rng.choice([(3, 4), (1, 2), (5, 4), (3, 8), (7, 2), (9, 4), (1, 4), (5, 2)])
    want = rng.choice([1, 1, 2, 3]) if cakes % 2 else 1
    amount = Fraction(cups * want, cakes)
    q = f"A recipe uses {cups} cups of flour for {cakes} cakes. How many cups of flour are needed for {want} cake{'s' if want > 1 else ''}?"
    steps = [(f"One cake needs {cups} / {cakes} = {num(Fraction(cups, cakes))} cups.", Fraction(cups, cakes)),
             (f"{want} cake(s) need {want} * {num(Fraction(cups, cakes))} = {num(amount)} cups.", amount)]
    return q, steps, amount, "fraction", "cups"


def town(rng):
    base, grow, years = rng.randint(20, 90) * 100, rng.randint(3, 25) * 50, rng.randint(2, 6)
    final = base + grow * years
    q = f"A town has {base:,} people. It grows by {grow} people every year. How many people live there after {years} years?"
    steps = [(f"Growth over {years} years is {grow} * {years} = <<{grow}*{years}={grow * years}>>{grow * years}.", grow * years),
             (f"So {base} + {grow * years} = <<{base}+{grow * years}={final}>>{final} people.", final)]
    return q, steps, Fraction(final), "count", "people"


def trip(rng):
    speed, hours, stop = rng.randint(40, 75), rng.randint(2, 7), rng.randint(10, 60)
    dist = speed * hours
    q = f"A car drives at {speed} miles per hour for {hours} hours, then drives {stop} more miles. How far does it go in total?"
    steps = [(f"First part: {speed} * {hours} = <<{speed}*{hours}={dist}>>{dist} miles.", dist),
             (f"Total: {dist} + {stop} = <<{dist}+{stop}={dist + stop}>>{dist + stop} miles.", dist + stop)]
    return q, steps, Fraction(dist + stop), "count", "miles"


PROBLEMS = [change, reading, discount, marbles, ages, savings, percent_right, average,
            temperature, recipe, town, trip]

# ---------------------------------------------------------------- how the final answer is written


def plain(x: Fraction) -> str:
    return num(x)


def money_forms(x: Fraction) -> list[str]:
    n = num(x)
    out = [f"${n}", f"{n} dollars", f"${float(x):,.2f}", f"\\${n}", f"{float(x):.2f}"]
    if x.denominator == 1:
        out += [f"${n}.00", f"$ {n}"]
    return out


def surface_forms(x: Fraction, kind: str, unit: str) -> list[str]:
    """Ways a grader accepts of writing the value ``x``."""
    n = num(x)
    forms = [n, f"{n}.", f"\\boxed{{{n}}}", f"The answer is {n}.", f"{n} {unit}", f"Total = {n}",
             f"**{n}**", f"`{n}`", f"Answer: {n}", f"Final answer: {n} {unit}"]
    if x.denominator == 1:
        forms += [f"{n}.0", f"{n}.00"]
    if abs(x) >= 1000 and x.denominator == 1:
        forms += [f"{int(x):,}", f"{int(x):,} {unit}"]
    if kind == "money":
        forms += money_forms(x)
    if kind == "percent":
        forms += [f"{n}%", f"{n} %", f"\\boxed{{{n}\\%}}"]
    if x.denominator != 1:
        forms += [f"{x.numerator}/{x.denominator}", f"\\frac{{{x.numerator}}}{{{x.denominator}}}"]
        if abs(x) > 1:
            whole = int(x)
            rest = x - whole
            if whole > 0:
                forms.append(f"{whole} {rest.numerator}/{rest.denominator}")
    if x < 0:
        forms.append(f"\u2212{num(-x)}")
    return forms


def wrong_value(rng, gold: Fraction, steps) -> tuple[Fraction, str]:
    """A value a model gets wrong, and how it went wrong."""
    choices = ["near", "magnitude", "intermediate", "sign", "digits"]
    for _ in range(20):
        how = rng.choice(choices)
        if how == "near":
            delta = rng.choice([1, 2, 3, 5, 10])
            value = gold + rng.choice([-1, 1]) * delta
        elif how == "magnitude":
            value = gold * rng.choice([10, 100]) if rng.random() < 0.5 else gold / 10
        elif how == "intermediate":
            value = Fraction(rng.choice(steps)[1])
        elif how == "sign":
            value = -gold
        else:
            text = num(abs(gold))
            if len(text) < 2 or len(set(text)) < 2:
                continue
            i = rng.randrange(len(text) - 1)
            swapped = text[:i] + text[i + 1] + text[i] + text[i + 2:]
            try:
                value = Fraction(swapped) * (1 if gold >= 0 else -1)
            except ValueError:
                continue
        if value != gold:
            return value, how
    return gold + 1, "near"


# ---------------------------------------------------------------- whole completions


def reasoning_text(rng, steps) -> str:
    lines = [s for s, _ in steps]
    if rng.random() < 0.3:
        lines.insert(0, rng.choice(["Let me work through this step by step.", "First, find what we need.",
                                    "We need to combine the quantities in the problem."]))
    if rng.random() < 0.2:
        lines.append("Let me double check: the steps above are consistent.")
    return "\n".join(lines)


def wrap(rng, reasoning: str, answer: str) -> str:
    style = rng.random()
    if style < 0.6:
        text = f"<reasoning>\n{reasoning}\n</reasoning>\n<answer>\n{answer}\n</answer>"
    elif style < 0.75:
        text = f"<reasoning>{reasoning}</reasoning><answer>{answer}</answer>"
    elif style < 0.85:
        text = f"<reasoning>\n{reasoning}\n</reasoning>\n\n<answer> {answer} </answer>"
    else:
        text = f"Sure, here is my solution.\n<reasoning>\n{reasoning}\n</reasoning>\n<answer>\n{answer}\n</answer>"
    if rng.random() < 0.15:
        text += rng.choice(["\nI hope this helps!", "\n\nLet me know if you have questions.", "\n"])
    return text


def make_row(rng, i: int) -> dict:
    problem = rng.choice(PROBLEMS)
    question, steps, gold, kind, unit = problem(rng)
    reasoning = reasoning_text(rng, steps)
    roll = rng.random()
    if roll < 0.5:
        answer = rng.choice(surface_forms(gold, kind, unit))
        completion, correct, how = wrap(rng, reasoning, answer), True, "right"
    elif roll < 0.8:
        value, how = wrong_value(rng, gold, steps)
        answer = rng.choice(surface_forms(value, kind, unit))
        completion, correct = wrap(rng, reasoning, answer), False
        how = f"wrong:{how}"
    else:
        completion, correct, how = no_final_answer(rng, reasoning, gold, kind, unit)
    return {"id": i, "problem": problem.__name__, "question": question, "answer": num(gold),
            "completion": completion, "correct": correct, "how": how}


def no_final_answer(rng, reasoning: str, gold: Fraction, kind: str, unit: str) -> tuple[str, bool, str]:
    """Completions a strict grader marks wrong although the right value may appear in them."""
    g = num(gold)
    case = rng.randrange(6)
    if case == 0:  # truncated mid-reasoning: no answer block at all
        cut = max(10, int(len(reasoning) * rng.uniform(0.3, 0.9)))
        return f"<reasoning>\n{reasoning[:cut]}", False, "missing:truncated"
    if case == 1:  # the right value inside the reasoning, in an answer tag, and no final block
        return (f"<reasoning>\n{reasoning}\nSo <answer>{g}</answer> is my guess.\n</reasoning>",
                False, "missing:inside_reasoning")
    if case == 2:  # the right value in the reasoning, a wrong one in the final block
        wrong = gold + rng.choice([1, 2, 4])
        return (f"<reasoning>\n{reasoning}\nTentative <answer>{g}</answer>, but recount.\n</reasoning>\n"
                f"<answer>\n{num(wrong)}\n</answer>", False, "wrong:final_differs")
    if case == 3:  # GSM8K-style ending instead of the recipe's answer block
        return f"{reasoning}\n#### {g}", False, "missing:hashes_only"
    if case == 4:  # the answer block is opened but never closed (cut at the token limit)
        return f"<reasoning>\n{reasoning}\n</reasoning>\n<answer>\n{g}", False, "missing:unclosed"
    # a hedge between two values
    other = gold + rng.choice([1, 2, 5])
    return (f"<reasoning>\n{reasoning}\n</reasoning>\n<answer>\n{g} or {num(other)}\n</answer>",
            False, "wrong:hedged")


def build(n: int = 800, seed: int = 2024) -> list[dict]:
    rng = random.Random(seed)
    return [make_row(rng, i) for i in range(n)]


def render(rows: list[dict]) -> str:
    return "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows)


def main() -> None:
    rows = build()
    OUT.write_text(render(rows))
    right = sum(r["correct"] for r in rows)
    print(f"wrote {len(rows)} rows ({right} correct, {len(rows) - right} wrong) to {OUT}")


if __name__ == "__main__":
    main()
