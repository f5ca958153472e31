"""GSM8K: grade-school math word problems with a single numeric answer.

This module owns the task: the system prompt that fixes the answer format, the loader (hub,
local file, or an offline generator of GSM8K-format problems), gold-answer parsing, the default
rewards, and correctness for evaluation (:data:`TASK`). Evaluation grades with the correctness
reward's own grader (``TASK.grader(cfg)``), so training and evaluation measure the same thing.

Example::

    ds = load_gsm8k("data/gsm8k_train.jsonl")       # or "openai/gsm8k", or "synthetic"
    ds[0]["prompt"]   # [{"role": "system", ...}, {"role": "user", "content": "Natalia sold ..."}]
    ds[0]["answer"]   # "72"
"""

from __future__ import annotations

import functools
import random
import re
import zlib
from decimal import Decimal

from unsloth_grpo.data import DataError, load_table, synthetic_dataset, to_prompt_dataset
from unsloth_grpo.grading import Verdict, grade, lenient
from unsloth_grpo.tasks._task import Task, reasoned_completion

SYSTEM_PROMPT = (
    "Respond in the following format:\n"
    "<reasoning>\n...\n</reasoning>\n<answer>\n...\n</answer>\n"
    "Put only the final number inside <answer>."
)

#: The format shown by a worked example, for a small real model that ignores a format described in
#: words (SmolLM2-135M-Instruct writes no tags under SYSTEM_PROMPT; docs/real_model.md).
EXAMPLE_SYSTEM_PROMPT = (
    "Solve the math word problem. Reply in exactly this format:\n"
    "<reasoning>\nthe calculation\n</reasoning>\n<answer>\nthe final number\n</answer>\n"
    "Example:\nQuestion: Ann has 3 pens and buys 4 more. How many pens does Ann have now?\n"
    "<reasoning>\n3 + 4 = 7\n</reasoning>\n<answer>\n7\n</answer>"
)

#: Rewards the recipe uses unless the config lists its own: format first, then correctness.
DEFAULT_REWARDS = [
    {"name": "xml_count", "weight": 1.0},
    {"name": "soft_format", "weight": 0.5},
    {"name": "strict_format", "weight": 0.5},
    {"name": "integer_answer", "weight": 0.5},
    {"name": "correctness", "weight": 1.0},
]

_GOLD_MARK = re.compile(r"####\s*(.+?)\s*$", re.S)
# thousands separators only in groups of three: "1,00" is not a number
_PLAIN_NUMBER = re.compile(r"\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?|\.\d+")


def clean_number(text: str) -> str | None:
    """``'$1,000.00'`` -> ``'1000'``, ``'-5'`` -> ``'-5'``, ``'2.50'`` -> ``'2.5'``; None if not a number."""
    s = text.strip().replace(" ", "").rstrip(".")
    negative = False
    if s[:1] in ("-", "+"):
        negative, s = s[0] == "-", s[1:]
    if s[:1] == "$":
        s = s[1:]
    if s[:1] == "-":  # "$-5"
        negative, s = True, s[1:]
    if not _PLAIN_NUMBER.fullmatch(s):
        return None
    value = Decimal(s.replace(",", ""))
    text_out = format((-value if negative else value).normalize(), "f")
    return "0" if text_out == "-0" else text_out


def parse_gold(answer: str) -> str | None:
    """The number after GSM8K's ``####`` marker (or a bare number), cleaned; None when absent."""
    text = str(answer)
    m = _GOLD_MARK.search(text)
    return clean_number(m.group(1) if m else text)


def load_gsm8k(
    source: str = "openai/gsm8k",
    split: str = "train",
    *,
    subset: str | None = "main",
    system_prompt: str | None = None,
    limit: int | None = None,
    num_synthetic: int = 512,
    seed: int = 0,
    question_column: str = "question",
    answer_column: str = "answer",
):
    """GSM8K rows as ``prompt`` (system + user chat messages) and ``answer`` (clean number string).

    ``source`` is ``"openai/gsm8k"`` (hub), a local ``.jsonl/.json/.csv/.parquet`` file with
    ``question`` and ``answer`` columns in GSM8K's format, or ``"synthetic"`` for offline problems;
    then ``subset`` picks the offline set (:data:`SYNTHETIC_SUBSETS`: ``main``, or ``easy``).
    """
    system = SYSTEM_PROMPT if system_prompt is None else system_prompt
    if source == "synthetic":
        kind = synthetic_subset(subset)
        return synthetic_dataset(functools.partial(make_synthetic_problems, subset=kind, split=split), split=split,
                                 seed=seed, num_synthetic=num_synthetic, limit=limit, system_prompt=system,
                                 gold_parser=parse_gold)
    rows = load_table(source, split=split, subset=subset)
    return to_prompt_dataset(
        rows,
        source=source,
        system_prompt=system,
        question_column=question_column,
        answer_column=answer_column,
        gold_parser=parse_gold,
        limit=limit,
    )


# ---------------------------------------------------------------- offline problems

_NAMES = ["Ann", "Bob", "Cara", "Dev", "Eli", "Fay", "Gus", "Hana", "Ivo", "Jun"]
_THINGS = ["apples", "books", "coins", "eggs", "pens", "stamps", "cards", "shells"]


def _problem(rng: random.Random) -> dict[str, str]:
    name, other = rng.sample(_NAMES, 2)
    thing = rng.choice(_THINGS)
    kind = rng.randrange(4)
    if kind == 0:
        a, b = rng.randint(2, 90), rng.randint(2, 90)
        q = f"{name} has {a} {thing}. {other} gives {name} {b} more. How many {thing} does {name} have now?"
        steps, result = f"{name} has {a} + {b} = <<{a}+{b}={a + b}>>{a + b} {thing}.", a + b
    elif kind == 1:
        a = rng.randint(20, 200)
        b = rng.randint(1, a - 1)
        q = f"{name} had {a} {thing} and sold {b} of them. How many {thing} are left?"
        steps, result = f"{a} - {b} = <<{a}-{b}={a - b}>>{a - b} {thing} are left.", a - b
    elif kind == 2:
        a, b = rng.randint(2, 12), rng.randint(2, 30)
        q = f"{name} buys {a} boxes with {b} {thing} in each box. How many {thing} does {name} buy?"
        steps, result = f"{a} * {b} = <<{a}*{b}={a * b}>>{a * b} {thing}.", a * b
    else:
        a, b, price = rng.randint(2, 9), rng.randint(2, 9), rng.randint(2, 15)
        q = (f"{name} buys {a} {thing} and {other} buys {b} {thing}. Each costs ${price}. "
             f"How many dollars do they spend together?")
        steps = (f"They buy {a} + {b} = <<{a}+{b}={a + b}>>{a + b} {thing}.\n"
                 f"They spend {a + b} * {price} = <<{a + b}*{price}={(a + b) * price}>>{(a + b) * price} dollars.")
        result = (a + b) * price
    return {"question": q, "answer": f"{steps}\n#### {result:,}"}


#: The offline problem sets (``data.subset`` when ``data.source`` is ``synthetic``): ``main`` mixes
#: one- and two-step problems with numbers up to 200; ``easy`` is one step, adding or taking away a
#: one-digit number (a small real model is right on some of them; see docs/real_model.md).
SYNTHETIC_SUBSETS = ("main", "easy")

#: ``easy`` problems are split by their arithmetic: one sum or difference in ``EASY_HELD_OUT_EVERY``
#: (by CRC) is held out, so no held-out problem is a training problem under other names.
EASY_HELD_OUT_EVERY = 4


def synthetic_subset(subset: str | None) -> str:
    """``data.subset`` as an offline problem set: None (the hub default's absence) is ``main``."""
    kind = subset or "main"
    if kind not in SYNTHETIC_SUBSETS:
        raise DataError(f"data.subset='{subset}' is not an offline problem set of the gsm8k task; with "
                        f"data.source=synthetic choose one of: {', '.join(SYNTHETIC_SUBSETS)}")
    return kind


def _easy_split(op: str, a: int, b: int) -> str:
    return "test" if zlib.crc32(f"{a}{op}{b}".encode()) % EASY_HELD_OUT_EVERY == 0 else "train"


def _easy_problem(rng: random.Random, split: str) -> dict[str, str]:
    """One step: add a one-digit number to one, or take one away from a number up to 19."""
    while True:
        name, other = rng.sample(_NAMES, 2)
        thing = rng.choice(_THINGS)
        if rng.random() < 0.5:
            a, b = rng.randint(2, 9), rng.randint(2, 9)
            op, result = "+", a + b
            q = f"{name} has {a} {thing}. {other} gives {name} {b} more. How many {thing} does {name} have now?"
        else:
            a, b = rng.randint(10, 19), rng.randint(2, 9)
            op, result = "-", a - b
            q = f"{name} had {a} {thing} and sold {b} of them. How many {thing} are left?"
        if _easy_split(op, a, b) == ("train" if split == "train" else "test"):
            return {"question": q, "answer": f"{a} {op} {b} = <<{a}{op}{b}={result}>>{result}\n#### {result}"}


def make_synthetic_problems(n: int, seed: int = 0, *, subset: str = "main",
                            split: str = "train") -> list[dict[str, str]]:
    """``n`` GSM8K-format problems (``question``, ``answer`` with ``#### N``), deterministic per seed.

    ``subset`` is one of :data:`SYNTHETIC_SUBSETS`. ``split`` matters for ``easy`` only, whose
    held-out problems (any split but ``train``) use sums and differences no training problem uses.
    """
    if n < 1:
        raise DataError(f"num_synthetic={n}: ask for at least one synthetic problem")
    rng = random.Random(seed)
    if synthetic_subset(subset) == "easy":
        return [_easy_problem(rng, split) for _ in range(n)]
    return [_problem(rng) for _ in range(n)]


# ---------------------------------------------------------------- the task


class Gsm8k(Task):
    """Grade-school word problems whose answer is one number, graded by the library's grader."""

    name = "gsm8k"
    system_prompt = SYSTEM_PROMPT
    default_rewards = DEFAULT_REWARDS
    grading_rewards = ("correctness", "exact_match")
    loader = staticmethod(load_gsm8k)
    named_columns = True

    def grade(self, completion, gold, **settings) -> Verdict:
        """The library's grader (:func:`unsloth_grpo.grading.grade`), on which ``correctness`` pays."""
        return grade(completion, gold, **settings)

    def lenient(self, cfg):
        """The right number anywhere in the completion (evaluation only, never a reward)."""
        return lenient

    def gold_completion(self, row: dict) -> str:
        return reasoned_completion(row["answer"])

    def worked_rows(self, cfg, n: int):
        """The offline generator's worked answers when ``data.source`` is ``synthetic``."""
        if cfg.data.source == "synthetic":
            return make_synthetic_problems(n, seed=cfg.seed), "question", "answer"
        return super().worked_rows(cfg, n)

    def final_answer(self, worked: str) -> str | None:
        return parse_gold(worked)


TASK = Gsm8k()
