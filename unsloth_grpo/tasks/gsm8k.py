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
from unsloth_grpo.tasks._recipe import REAL_MODEL_PRESET, Recipe, real_model_preset, smoke_preset
from unsloth_grpo.tasks._task import Task, reasoned_completion

SYSTEM_PROMPT = (
    "Respond in the following format:\n"
    "<reasoning>\n...\n</reasoning>\n<answer>\n...\n</answer>\n"
    "Put only the final number inside <answer>."
)

#: The format shown by worked examples, for a small real model that ignores a format described in
#: words (SmolLM2-135M-Instruct writes no tags under SYSTEM_PROMPT; docs/real_model.md). Two examples,
#: one of each operation of the ``easy`` set, so that neither is the one the prompt shows; and no
#: abstract template: a placeholder such as "the final number" in an answer block is text a model
#: can copy, and one seed of an earlier preset learned to copy exactly that (docs/real_model.md).
EXAMPLE_SYSTEM_PROMPT = (
    "Solve the math word problem. Write the calculation inside <reasoning> tags, then only the final "
    "number inside <answer> tags.\n"
    "Example 1:\nQuestion: Ann has 3 pens. Bob gives Ann 4 more. How many pens does Ann have now?\n"
    "<reasoning>\n3 + 4 = 7\n</reasoning>\n<answer>\n7\n</answer>\n"
    "Example 2:\nQuestion: Cara had 15 cards and gave away 6 of them. How many cards are left?\n"
    "<reasoning>\n15 - 6 = 9\n</reasoning>\n<answer>\n9\n</answer>"
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
    then ``subset`` picks the offline set (:data:`SYNTHETIC_SUBSETS`: ``main``, ``easy``, ``reworded``, ``everyday`` or
    ``gsm_symbolic``, reasoning-gym's templated GSM8K problems, graded by this task's grader).
    """
    system = SYSTEM_PROMPT if system_prompt is None else system_prompt
    if source == "synthetic":
        kind = synthetic_subset(subset)
        return synthetic_dataset(functools.partial(make_synthetic_problems, subset=kind, split=split), split=split,
                                 seed=seed, num_synthetic=num_synthetic, limit=limit, system_prompt=system,
                                 columns=("answer", CATEGORY_COLUMN), gold_parser=parse_gold)
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
        steps, result, category = f"{name} has {a} + {b} = <<{a}+{b}={a + b}>>{a + b} {thing}.", a + b, "addition"
    elif kind == 1:
        a = rng.randint(20, 200)
        b = rng.randint(1, a - 1)
        q = f"{name} had {a} {thing} and sold {b} of them. How many {thing} are left?"
        steps, result, category = f"{a} - {b} = <<{a}-{b}={a - b}>>{a - b} {thing} are left.", a - b, "subtraction"
    elif kind == 2:
        a, b = rng.randint(2, 12), rng.randint(2, 30)
        q = f"{name} buys {a} boxes with {b} {thing} in each box. How many {thing} does {name} buy?"
        steps, result, category = f"{a} * {b} = <<{a}*{b}={a * b}>>{a * b} {thing}.", a * b, "multiplication"
    else:
        a, b, price = rng.randint(2, 9), rng.randint(2, 9), rng.randint(2, 15)
        q = (f"{name} buys {a} {thing} and {other} buys {b} {thing}. Each costs ${price}. "
             f"How many dollars do they spend together?")
        steps = (f"They buy {a} + {b} = <<{a}+{b}={a + b}>>{a + b} {thing}.\n"
                 f"They spend {a + b} * {price} = <<{a + b}*{price}={(a + b) * price}>>{(a + b) * price} dollars.")
        result, category = (a + b) * price, "two-step"
    return {"question": q, "answer": f"{steps}\n#### {result:,}", "category": category}


#: The offline problem sets (``data.subset`` when ``data.source`` is ``synthetic``): ``main`` mixes
#: one- and two-step problems with numbers up to 200; ``easy`` is one step, adding or taking away a
#: one-digit number (a small real model is right on some of them; see docs/real_model.md);
#: ``reworded`` is the ``easy`` arithmetic in phrasings no other set uses (:data:`REWORDED_TEMPLATES`),
#: half additions and half subtractions: a held-out set for what a model trained on ``easy`` learned;
#: ``everyday`` is the same arithmetic again, in phrasings of neither (:data:`EVERYDAY_TEMPLATES`).
#: ``varied`` is ``easy`` (its split of the arithmetic included) with more wordings to train on: each problem in
#: ``easy``'s own phrasing or one of :data:`VARIED_TEMPLATES`, none of which the held-out sets use.
#: ``gsm_symbolic`` is reasoning-gym's templated GSM8K problems (the ``reasoning_gym`` extra).
SYNTHETIC_SUBSETS = ("main", "easy", "varied", "reworded", "everyday", "gsm_symbolic")

#: The offline sets that are held out whatever the split: evaluated on, never trained on (a training
#: split of them is refused), so that what they measure was never rewarded.
HELD_OUT_SUBSETS = ("reworded", "everyday")

#: Every offline row carries its kind of problem in this column; evaluation breaks accuracy down by it.
CATEGORY_COLUMN = "category"

#: ``easy`` problems are split by their arithmetic: one sum or difference in ``EASY_HELD_OUT_EVERY``
#: (by CRC) is held out, so no held-out problem is a training problem under other names.
EASY_HELD_OUT_EVERY = 4

#: The ``reworded`` set's phrasings, by operation: none of them is a phrasing of ``easy`` or ``main``
#: or of the real-model preset's worked examples. The last subtraction asks "how many more", where the
#: word "more" names a difference, not a sum.
REWORDED_TEMPLATES = {
    "addition": (
        "{name} found {a} {thing} in the morning and {b} more in the afternoon. How many {thing} did {name} find in all?",
        "There are {a} {thing} in a box. {name} puts {b} {thing} into the box. How many {thing} are in the box now?",
        "{name} picked {a} {thing} and {other} picked {b} {thing}. How many {thing} did they pick together?",
        "A shelf holds {a} {thing}. Then {b} {thing} are added to the shelf. How many {thing} are on the shelf?",
        "{name} bought {a} {thing} on Monday and {b} {thing} on Tuesday. How many {thing} did {name} buy in total?",
        "{name} won {a} {thing} in the first game and {b} {thing} in the second game. How many {thing} did {name} win?",
    ),
    "subtraction": (
        "{name} had {a} {thing} and lost {b} of them. How many {thing} does {name} have now?",
        "There were {a} {thing} on the table. {name} took {b} of them away. How many {thing} are on the table now?",
        "A bag holds {a} {thing}. {name} takes {b} {thing} out of the bag. How many {thing} are still in the bag?",
        "{name} had {a} {thing} and used {b} of them for a project. How many {thing} does {name} still have?",
        "{name} needs {a} {thing} and already has {b}. How many more {thing} does {name} need?",
        "{name} has {a} {thing} and {other} has {b} {thing}. How many more {thing} does {name} have than {other}?",
    ),
}


#: The ``everyday`` set's phrasings, by operation, each with the words its ``{unit}`` may take: quantities
#: with units (minutes, cm, kg, dollars, km), events over two days, and the words "in all", "together" and
#: "altogether", which here ask for a sum in some problems and give the total of a difference in others
#: (a model that adds whenever it reads "altogether" is wrong on those). Its own names (:data:`_EVERYDAY_NAMES`).
#: It was made for issue 52, where a model trained on ``easy`` answered such phrasings with the first
#: quantity of the question; none of it is a phrasing of ``easy``, ``main`` or ``reworded``
#: (tests/test_data.py checks every run of five words).
EVERYDAY_TEMPLATES = {
    "addition": (
        ("{name} read for {a} {unit} before lunch and {b} {unit} after lunch. How many {unit} did {name} read "
         "in all?", ("minutes",)),
        ("A ribbon is {a} {unit} long. {name} ties on another piece that is {b} {unit} long. How long is the "
         "ribbon now, in {unit}?", ("cm", "inches")),
        ("On Monday the bakery sold {a} {unit}, and on Tuesday it sold {b} {unit}. How many {unit} did the "
         "bakery sell over the two days?", ("cakes", "pies", "loaves", "muffins")),
        ("{name} paid {a} {unit} for a book and {b} {unit} for lunch. How many {unit} did {name} pay "
         "altogether?", ("dollars",)),
        ("A bag of flour weighs {a} {unit} and a bag of rice weighs {b} {unit}. What do the two bags weigh "
         "together, in {unit}?", ("kg", "pounds")),
        ("{name} walked {a} {unit} on Saturday and {b} {unit} on Sunday. How far did {name} walk that weekend, "
         "in {unit}?", ("km", "miles")),
    ),
    "subtraction": (
        ("{name} had {a} {unit} and paid {b} {unit} for a ticket. How many {unit} does {name} keep?",
         ("dollars",)),
        ("A rope is {a} {unit} long. {name} cuts {b} {unit} off it. How long is the rope that remains, in "
         "{unit}?", ("meters", "feet")),
        ("On Monday a shop had {a} {unit} for sale. On Tuesday {b} {unit} were sold. How many {unit} were still "
         "for sale after Tuesday?", ("lamps", "kites", "clocks")),
        ("{name} and {other} have {a} {unit} altogether, and {b} of the {unit} are {name}'s. How many {unit} "
         "belong to {other}?", ("stickers", "marbles")),
        ("The bakery sold {a} {unit} in all on Monday and Tuesday, {b} of them on Monday. How many {unit} did "
         "it sell on Tuesday?", ("cakes", "pies", "loaves", "muffins")),
        ("{name} and {other} ran {a} {unit} together. {other} ran {b} {unit} of it. How far did {name} run, "
         "in {unit}?", ("km", "miles")),
    ),
}

#: The ``varied`` set's wordings beside ``easy``'s own, by operation, for training: containers, counts over
#: two times, amounts with units, "the rest". Written for issue 52 so that GRPO's prompts have more than one
#: wording; none shares a run of five words with ``reworded``, ``everyday`` or the preset's worked examples
#: (tests/test_data.py), whose phrasings stay held out.
VARIED_TEMPLATES = {
    "addition": (
        "{name} counted {a} {thing} in one basket and {b} {thing} in another. What is the number of {thing} in "
        "both baskets?",
        "A jar had {a} {thing}. {name} dropped {b} more {thing} into it. What is the count of {thing} in the jar?",
        "{name} swam {a} laps before noon and {b} laps after noon. What was the total number of laps?",
        "A van carries {a} {thing} and a truck carries {b} {thing}. What is the sum of {thing} the two carry?",
    ),
    "subtraction": (
        "{name} made {a} {thing} and handed {b} of them to friends. What is the number of {thing} remaining?",
        "A tank held {a} liters of water. {name} drained {b} liters. What amount of water, in liters, stays in "
        "the tank?",
        "A book has {a} pages and {name} has read {b} pages so far. What is the number of pages still to read?",
        "A row has {a} {thing}: {b} are red and the rest are blue. What is the count of blue {thing}?",
    ),
}

#: The ``everyday`` set's people: names no other offline set uses.
_EVERYDAY_NAMES = ["Nadia", "Omar", "Priya", "Quinn", "Rosa", "Sami", "Tariq", "Uma", "Vera", "Wes"]


def synthetic_subset(subset: str | None) -> str:
    """``data.subset`` as an offline problem set: None (the hub default's absence) is ``main``."""
    kind = subset or "main"
    if kind not in SYNTHETIC_SUBSETS:
        raise DataError(f"data.subset='{subset}' is not an offline problem set of the gsm8k task; with "
                        f"data.source=synthetic choose one of: {', '.join(SYNTHETIC_SUBSETS)}")
    return kind


def _easy_split(op: str, a: int, b: int) -> str:
    return "test" if zlib.crc32(f"{a}{op}{b}".encode()) % EASY_HELD_OUT_EVERY == 0 else "train"


def _easy_numbers(rng: random.Random, op: str) -> tuple[int, int, int]:
    """One sum of two one-digit numbers, or one difference of a teen and a one-digit number."""
    if op == "+":
        a, b = rng.randint(2, 9), rng.randint(2, 9)
        return a, b, a + b
    a, b = rng.randint(10, 19), rng.randint(2, 9)
    return a, b, a - b


def _easy_problem(rng: random.Random, split: str) -> dict[str, str]:
    """One step: add a one-digit number to one, or take one away from a number up to 19."""
    while True:
        name, other = rng.sample(_NAMES, 2)
        thing = rng.choice(_THINGS)
        op = "+" if rng.random() < 0.5 else "-"
        a, b, result = _easy_numbers(rng, op)
        if op == "+":
            q = f"{name} has {a} {thing}. {other} gives {name} {b} more. How many {thing} does {name} have now?"
        else:
            q = f"{name} had {a} {thing} and sold {b} of them. How many {thing} are left?"
        if _easy_split(op, a, b) == ("train" if split == "train" else "test"):
            return {"question": q, "answer": _worked_answer(a, op, b, result),
                    "category": "addition" if op == "+" else "subtraction"}


def _varied_problem(rng: random.Random, split: str) -> dict[str, str]:
    """An ``easy`` problem of ``split``'s arithmetic, in ``easy``'s wording or one of :data:`VARIED_TEMPLATES`
    (each wording of an operation equally likely)."""
    row = _easy_problem(rng, split)
    number = rng.randrange(len(VARIED_TEMPLATES[row["category"]]) + 1)
    if number == 0:
        return {**row, "template": "easy"}
    a, b = (int(x) for x in re.match(r"(\d+) [-+] (\d+)", row["answer"]).groups())
    name, _ = rng.sample(_NAMES, 2)
    q = VARIED_TEMPLATES[row["category"]][number - 1].format(name=name, thing=rng.choice(_THINGS), a=a, b=b)
    return {**row, "question": q, "template": str(number - 1)}


def _worked_answer(a: int, op: str, b: int, result: int) -> str:
    """A one-step problem's answer in GSM8K's format: the calculation, its annotation and ``#### result``."""
    return f"{a} {op} {b} = <<{a}{op}{b}={result}>>{result}\n#### {result}"


def _held_out_numbers(rng: random.Random, index: int) -> tuple[str, str, int, int, int]:
    """The kind, operation and numbers of the held-out phrasing sets' problem ``index``: the operation
    alternates with ``index``, the numbers are drawn until they are ``easy``'s held-out ones."""
    category = ("addition", "subtraction")[index % 2]
    op = "+" if category == "addition" else "-"
    while True:
        a, b, result = _easy_numbers(rng, op)
        if _easy_split(op, a, b) == "test":
            return category, op, a, b, result


def _reworded_problem(rng: random.Random, index: int) -> dict[str, str]:
    """The ``easy`` set's arithmetic (its held-out sums and differences) in another phrasing; the
    operation alternates with ``index``, so any even count is balanced by operation."""
    category, op, a, b, result = _held_out_numbers(rng, index)
    name, other = rng.sample(_NAMES, 2)
    template = rng.choice(REWORDED_TEMPLATES[category])
    q = template.format(name=name, other=other, thing=rng.choice(_THINGS), a=a, b=b)
    return {"question": q, "answer": _worked_answer(a, op, b, result),
            "category": category, "template": str(REWORDED_TEMPLATES[category].index(template))}


def _everyday_problem(rng: random.Random, index: int) -> dict[str, str]:
    """The ``easy`` set's held-out arithmetic in an :data:`EVERYDAY_TEMPLATES` phrasing; the operation
    alternates with ``index``, as in ``reworded``."""
    category, op, a, b, result = _held_out_numbers(rng, index)
    name, other = rng.sample(_EVERYDAY_NAMES, 2)
    number = rng.randrange(len(EVERYDAY_TEMPLATES[category]))
    template, units = EVERYDAY_TEMPLATES[category][number]
    q = template.format(name=name, other=other, unit=rng.choice(units), a=a, b=b)
    return {"question": q, "answer": _worked_answer(a, op, b, result), "category": category, "template": str(number)}


def make_synthetic_problems(n: int, seed: int = 0, *, subset: str = "main",
                            split: str = "train") -> list[dict[str, str]]:
    """``n`` GSM8K-format problems (``question``, ``answer`` with ``#### N``, ``category``: the kind of
    problem), deterministic per seed.

    ``subset`` is one of :data:`SYNTHETIC_SUBSETS`. ``split`` matters for ``easy`` only, whose
    held-out problems (any split but ``train``) use sums and differences no training problem uses;
    ``reworded`` and ``everyday`` (:data:`HELD_OUT_SUBSETS`) are held out whatever the split, and their
    ``train`` split is refused: they are evaluated on, never trained on.
    """
    if n < 1:
        raise DataError(f"num_synthetic={n}: ask for at least one synthetic problem")
    rng = random.Random(seed)
    kind = synthetic_subset(subset)
    if kind in HELD_OUT_SUBSETS and split == "train":
        raise DataError(f"data.subset='{kind}' is a held-out set of the gsm8k task: evaluate on it (unsloth-grpo eval "
                        f"--subset {kind}), do not train on it; train on data.subset=easy or main")
    if kind == "easy":
        return [_easy_problem(rng, split) for _ in range(n)]
    if kind == "varied":
        return [_varied_problem(rng, split) for _ in range(n)]
    if kind == "reworded":
        return [_reworded_problem(rng, i) for i in range(n)]
    if kind == "everyday":
        return [_everyday_problem(rng, i) for i in range(n)]
    if kind == "gsm_symbolic":
        from unsloth_grpo.tasks.reasoning_gym import gsm_symbolic_problems

        return gsm_symbolic_problems(n, seed, split=split)
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
    def harness_answer(self, row: dict) -> str | None:
        return str(row["answer"])

    trick_fixes = {
        **Task.trick_fixes,
        "copies_quantity": "Grade the run on phrasings it never trained on, by operation, beside its warm-up or a "
                           "run without GRPO: unsloth-grpo eval --model RUN --subset reworded, and --subset everyday "
                           "(units, two days, 'altogether'). correctness pays the number in the answer block only. "
                           "Give GRPO's prompts more than one wording (stages.1.data.subset=varied, or a data file of "
                           "your own phrasings), lower the GRPO stage's learning_rate or max_steps, or pay the "
                           "calculation too (the worked_calculation reward pays an answer that 'a + b = c' in the "
                           "reasoning leads to; on the smollm2 preset it kept the additions only where GRPO learned "
                           "no subtraction: docs/real_model.md).",
    }

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
            # with data.categories, 8x as many problems (easy has two kinds, main four), so that n of the kinds
            # asked for are among them; sft_examples keeps those. The first n are the same problems either
            # way: the generator is one stream per seed.
            total = n if cfg.data.categories is None else 8 * n
            return make_synthetic_problems(total, seed=cfg.seed, subset=synthetic_subset(cfg.data.subset),
                                           split="train"), "question", "answer"
        return super().worked_rows(cfg, n)

    def final_answer(self, worked: str) -> str | None:
        return parse_gold(worked)


TASK = Gsm8k()


# ---------------------------------------------------------------- recipe

#: The first line of ``python -m unsloth_grpo.recipes.gsm8k --help``.
RECIPE_DESCRIPTION = 'GSM8K recipe: teach a model to reason in <reasoning> and answer in <answer> with GRPO.'

DEFAULTS = {
    "task": "gsm8k",
    "output_dir": "outputs/gsm8k",
    "model": {"name": "unsloth/Qwen2.5-1.5B-Instruct-bnb-4bit", "max_seq_length": 1024, "load_in_4bit": True},
    "lora": {"r": 16, "alpha": 32},
    "data": {"source": "openai/gsm8k", "split": "train", "max_prompt_tokens": 256},
    "rewards": DEFAULT_REWARDS,
    "training": {"max_completion_length": 512},
}

PRESETS = {
    # The embedded offline default: a tiny model built locally, synthetic problems, CPU.
    # The random tiny model cannot do arithmetic, so the smoke run trains the format: each of
    # the four tags earns 0.25 when present (once=False gives the dense signal a random model
    # needs). correctness is still computed and logged; it stays at 0 on a random model.
    # Settings measured to lift the reward by ~0.5 within a minute on two cores (see README).
    "smoke": smoke_preset(
        output_dir="outputs/smoke",
        task_rewards=[{"name": "correctness", "weight": 1.0}],
        data={"source": "synthetic"},
        # measured on this model: a longer run at a gentler rate and a warmer temperature
        training={"max_steps": 100, "learning_rate": 1e-2, "temperature": 1.2},
        run={"samples_every": 25},
    ),
    # The real built-in model (SmolLM2-135M-Instruct) on a CPU. Rewarded for the format alone, it learned
    # to copy the old prompt's template, and with one worked addition to add every pair of numbers
    # (docs/real_model.md). So: worked examples of both operations in the prompt, a short SFT warm-up on worked
    # answers of additions only (the format and one operation), then GRPO on every problem paying correctness
    # above a format that counts only with an answer inside: subtraction is learned from the checker alone.
    # A warm-up on both operations scores higher, but there SFT does the work and GRPO adds no more than the
    # same CPU time of SFT; here GRPO is 15-18 points above it over 5 seeds (issue 39, docs/real_model.md).
    REAL_MODEL_PRESET: real_model_preset(
        output_dir="outputs/gsm8k-smollm2",
        system_prompt=EXAMPLE_SYSTEM_PROMPT,
        data={"subset": "easy"},  # one-step, one-digit problems: the base model is right on some of them
        rewards=[{"name": "correctness", "weight": 2.0}, {"name": "strict_format", "weight": 0.5}],
        # After the warm-up most groups of 8 agree: refill replaces them with groups that differ, up to six
        # generation rounds a step (with three, one seed of two learned to subtract); sampling at 1.0 gives the
        # groups their differences.
        training={"dynamic_sampling": "refill", "temperature": 1.0},
        stages=[{"name": "sft", "kind": "sft", "max_steps": 20, "learning_rate": 2e-4, "num_examples": 160,
                 "data": {"categories": ["addition"]}},
                {"name": "grpo", "kind": "grpo", "max_steps": 30, "learning_rate": 1e-4,
                 "training": {"max_sampling_rounds": 6}}],
        # GRPO's headroom on 16 training prompts, 8 samples each (a GRPO group), before the GRPO stage and after:
        # 256 completions in all, kept few for the preset's minutes (docs/real_model.md)
        evaluation={"before_after": True, "limit": 32, "batch_size": 32, "headroom": 8, "headroom_prompts": 16},
    ),
    # The other real built-in model, Gemma 3 270M (a base model: no chat template, the plain prompt format), on the
    # smollm2 preset's plan. A step costs more than SmolLM2's (the 262k-entry vocabulary's logits), so the plan is
    # cut to fit 10 minutes on an idle 2-core machine, sized by the run's CPU time (docs/real_model.md): a warm-up of
    # 8 steps (its loss is ~0.03 by step 4), 8 GRPO steps of at most 3 rounds. GRPO at 1e-4 for 12 steps unlearned
    # the warm-up's stopping (answers ran on to the length limit) and all subtraction; 5e-5 for 8 steps did not.
    "gemma3": real_model_preset(
        output_dir="outputs/gsm8k-gemma3",
        model={"name": "builtin:gemma3-270m"},
        system_prompt=EXAMPLE_SYSTEM_PROMPT,
        data={"subset": "easy"},
        rewards=[{"name": "correctness", "weight": 2.0}, {"name": "strict_format", "weight": 0.5}],
        training={"dynamic_sampling": "refill", "temperature": 1.0, "max_completion_length": 40},
        stages=[{"name": "sft", "kind": "sft", "max_steps": 8, "learning_rate": 2e-4, "num_examples": 64,
                 "data": {"categories": ["addition"]}},
                {"name": "grpo", "kind": "grpo", "max_steps": 8, "learning_rate": 5e-5,
                 "training": {"max_sampling_rounds": 3}}],
        evaluation={"before_after": True, "limit": 32, "batch_size": 16, "headroom": 8, "headroom_prompts": 8},
    ),
    # Colab T4 (16 GB, no bf16): 0.5B-1.5B 4-bit fits with 8 generations of 512 tokens.
    "t4": {"model": {"dtype": "fp16"}},  # the vLLM pool is standby's: Unsloth sizes it from the card
}

RECIPE = Recipe("gsm8k", DEFAULTS, PRESETS, description=RECIPE_DESCRIPTION)
