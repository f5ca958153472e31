"""Completions per second of every built-in reward on realistic ~300-token completions.

    python benchmarks/reward_speed.py            # all rewards, 20,000 completions each
    python benchmarks/reward_speed.py -n 5000 correctness xml_count

The completions are GSM8K-style solutions in the recipe's format (a reasoning block of
arithmetic steps, then the answer in varied surface forms: ``18``, ``$1,234``, ``18.00``,
``\\boxed{18}``, ...), about 1,200 characters / 300 tokens each, all distinct, and the answer
parser's cache is cleared before each reward so no result is served from an earlier run.
Each reward is timed on one core, on the varied answer forms and on bare integers, bare and
(varied) inside the validation wrapper that training uses. Goal: correctness above 100,000
completions/s on bare integers, the form the GSM8K system prompt asks for; the last line says
whether this run reached it. ``--grader`` adds the grader's cost on degenerate 32k-character
completions (the bound is 1 ms each).
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from unsloth_grpo.grading.numbers import _read_short  # noqa: E402
from unsloth_grpo.rewards import REGISTRY, available_rewards, get_reward, validated  # noqa: E402

#: Parameters for rewards that need some to be built at all.
PARAMS = {
    "overlong": {"max_length": 512, "cache": 128},
    "phrase_penalty": {"phrases": ["as an AI", "I cannot", "let me double check"]},
    "json_keys": {"required": ["answer", "steps"]},
    "json_schema": {"schema": {"type": "object", "required": ["answer"]}},
}

NAMES = ["Natalia", "Weng", "Betty", "Julie", "James", "Albert", "Ken", "Mark", "Tina", "Randy"]
ITEMS = ["clips", "cupcakes", "pages", "apples", "stamps", "marbles", "tickets", "eggs"]
FORMS = ["{n}", "${n}", "{n}.00", "\\boxed{{{n}}}", "{n} {item}", "{n:,}", "The answer is {n}."]


def make_completion(rng: random.Random, forms: list[str]) -> tuple[str, str]:
    """One ~300-token solution and its gold answer; 30% of the answers are wrong."""
    name, item = rng.choice(NAMES), rng.choice(ITEMS)
    total = rng.randint(2, 40)
    lines = [f"{name} starts with {total} {item}."]
    while len(" ".join(lines)) < 1100:
        a = rng.randint(2, 60)
        op = rng.choice("+-*")
        b = a if op != "*" else a % 5 + 2
        new = total + b if op == "+" else total - b if op == "-" else total * b
        lines.append(
            f"Next, {name} {'gets' if op != '-' else 'gives away'} some {item}: "
            f"{total} {op} {b} = {new}. So now {name} has {new} {item} in total, "
            f"which we carry to the next step of the problem."
        )
        total = new
    shown = total + rng.randint(1, 9) if rng.random() < 0.3 else total
    answer = rng.choice(forms).format(n=shown, item=item)
    text = "<reasoning>\n" + "\n".join(lines) + "\n</reasoning>\n<answer>\n" + answer + "\n</answer>"
    return text, str(total)


def make_batch(n: int, forms: list[str], seed: int) -> tuple[list[str], dict]:
    rng = random.Random(seed)
    pairs = [make_completion(rng, forms) for _ in range(n)]
    completions = [c for c, _ in pairs]
    # ~4 characters per token is typical of English BPE vocabularies
    columns = {
        "answer": [g for _, g in pairs],
        "completion_ids": [[0] * (len(c) // 4) for c in completions],
        "prompts": ["question"] * n,
    }
    return completions, columns


def bench(fn, completions: list[str], columns: dict, chunk: int = 1000, budget_s: float = 1.0) -> float:
    """Completions/s: the median over calls on successive chunks of distinct completions.

    The answer parser's cache is emptied before each call, so no value is reused across
    calls. CPU time of this process is measured (not wall time) and the median taken, so
    a busy neighbour on a shared machine skews the figure little.
    """
    times = []
    spent = 0.0
    for start in range(0, len(completions), chunk):
        part = slice(start, start + chunk)
        cols = {k: v[part] for k, v in columns.items()}
        batch = completions[part]
        _read_short.cache_clear()
        t0 = time.process_time()
        fn(batch, **cols)
        took = time.process_time() - t0
        times.append(took / len(batch))
        spent += took
        if spent > budget_s and len(times) >= 3:
            break
    return 1.0 / statistics.median(times)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("names", nargs="*", help="rewards to time (default: all built-ins)")
    parser.add_argument("-n", type=int, default=20000, help="completions per reward (default 20000)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--grader", action="store_true", help="also time the grader on degenerate completions")
    args = parser.parse_args(argv)

    varied, varied_cols = make_batch(args.n, FORMS, args.seed)
    plain, plain_cols = make_batch(args.n, ["{n}"], args.seed)
    chars = sum(map(len, varied)) / args.n
    print(
        f"{args.n} distinct completions, {chars:.0f} characters (~{chars / 4:.0f} tokens) on average, "
        "one core (CPU time), calls of 1000"
    )
    print("varied: answers as 18 / $18 / 18.00 / \\boxed{18} / 18 eggs / 1,234 / The answer is 18.")
    print("plain:  answers as bare integers, as the GSM8K system prompt asks")
    print(f"{'reward':<20}{'varied':>14}{'plain':>14}{'wrapped':>14}   (completions/s)")
    # the library's rewards; task rewards (countdown, JSON, ...) need their own gold formats
    library = [n for n in available_rewards() if not REGISTRY[n].factory.__module__.startswith("unsloth_grpo.tasks")]
    goal = None
    for name in args.names or library:
        if name not in REGISTRY:
            print(f"unknown reward {name!r}; choose from {', '.join(available_rewards())}")
            return 2
        try:
            fn = get_reward(name, **PARAMS.get(name, {}))
        except ImportError as exc:
            print(f"{name:<20}{'skipped':>14}  ({exc})")
            continue
        a = bench(fn, varied, varied_cols)
        b = bench(fn, plain, plain_cols)
        c = bench(validated(fn, name), varied, varied_cols)
        print(f"{name:<20}{a:>14,.0f}{b:>14,.0f}{c:>14,.0f}")
        if name == "correctness":
            goal = b
    if goal is not None:
        verdict = "reached" if goal >= GOAL else "NOT reached"
        print(f"correctness on bare integers: {goal:,.0f} completions/s (goal {GOAL:,}: {verdict})")
    if args.grader:
        degenerate_costs()
    return 0


GOAL = 100_000

#: Completions a collapsing policy writes, each about 32k characters.
DEGENERATE = {
    "8,000 spaces in the answer": "<answer>a" + " " * 8000 + "b</answer>",
    "20,000 digits": "<answer>" + "9" * 20000 + "</answer>",
    "32k spaces": " " * 32000,
    "one token repeated": "answer " * 4500,
    "unclosed tags": "<answer>" * 4000,
    "answer blocks repeated": "<answer>18</answer>" * 1700,
    "blocks inside reasoning": "<reasoning>" + "<answer>18</answer>" * 1700,
    "unbalanced boxes": "\\boxed{" * 4500,
    "'The answer is' repeated": "The answer is " * 2200,
    "non-ASCII digits": "<answer>" + "\u0661\u0668" * 15000 + "</answer>",
}


def degenerate_costs() -> None:
    """Worst CPU time over a few calls of the correctness reward, with and without fallback."""
    plain, fallback = get_reward("correctness"), get_reward("correctness", fallback=True)
    print(f"\n{'degenerate completion':<30}{'chars':>8}{'ms':>10}{'ms (fallback)':>15}")
    for label, text in DEGENERATE.items():
        costs = []
        for fn in (plain, fallback):
            best = float("inf")
            for _ in range(5):
                _read_short.cache_clear()
                t0 = time.process_time()
                fn([text], answer=["18"])
                best = min(best, time.process_time() - t0)
            costs.append(1000 * best)
        print(f"{label:<30}{len(text):>8,}{costs[0]:>10.3f}{costs[1]:>15.3f}")


if __name__ == "__main__":
    raise SystemExit(main())
