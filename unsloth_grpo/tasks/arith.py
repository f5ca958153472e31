"""Arith: multi-digit addition with exact answers, small enough to learn on a CPU.

The model sees ``"047 + 385 ="`` and answers ``<answer>0432</answer>``. This module owns
the task: the offline generator (with a difficulty knob, ``digits``), the split into disjoint
training and held-out problems, the grader, the ``arith_correct`` reward and the solved
examples the SFT stage trains on (:data:`TASK`). The reward pays on :func:`grade`'s verdict and
evaluation grades with the reward's own grader, so training and evaluation measure the same thing.

**Disjoint splits.** Which split a problem belongs to is a function of the problem itself
(a CRC of ``"a+b"``; one in five pairs is held out), not of the order it was drawn in: no
held-out sum is ever a training prompt or an SFT example, whatever the seeds.

Example::

    >>> rows = make_problems(3, seed=0, split="test", digits=3)
    >>> sorted(rows[0])
    ['a', 'answer', 'b', 'question']
    >>> all(split_of(r["a"], r["b"]) == "test" for r in rows)
    True
    >>> [grade(text, "432").rule for text in ("<answer>432</answer>", "<answer>431</answer>", "432")]
    ['correct', 'wrong', 'missing']
    >>> arith_correct()(["<answer>432</answer>", "<answer> 0432 </answer>", "<answer>4e2</answer>"],
    ...                 answer=["432"] * 3)
    [1.0, 1.0, 0.0]
"""

from __future__ import annotations

import random
import re
import zlib
from typing import Any, Sequence

from unsloth_grpo.data import DataError, chat_prompt
from unsloth_grpo.grading import DEFAULT_IGNORE_INSIDE, Verdict, completion_text, extract_answer, lenient, tag_markers
from unsloth_grpo.rewards._registry import RewardFunc, per_sample, register, texts
from unsloth_grpo.tasks._recipe import Recipe
from unsloth_grpo.tasks._task import Task

#: No system prompt: the tiny model reads only the question, and a shorter prompt is faster.
#: The answer format is learned in the SFT stage (``data.system_prompt`` may still set one).
SYSTEM_PROMPT = None

#: Rewards the recipe uses unless the config lists its own: correctness only.
DEFAULT_REWARDS = [{"name": "arith_correct", "weight": 1.0}]

#: The rules :func:`grade`'s verdict names, and the grader status of each.
VERDICTS = ("missing", "malformed", "wrong", "correct")
_STATUS = {"missing": "missing", "malformed": "unparseable", "wrong": "wrong", "correct": "correct"}

#: One problem in ``HELD_OUT_EVERY`` (by its CRC) belongs to the held-out split.
HELD_OUT_EVERY = 5

SPLITS = ("train", "test")

_INTEGER = re.compile(r"\s*(\d{1,12})\s*")


# ---------------------------------------------------------------- problems and splits


def split_of(a: int, b: int) -> str:
    """``"test"`` for the held-out fifth of all problems, ``"train"`` for the rest (fixed per problem)."""
    return "test" if zlib.crc32(f"{a}+{b}".encode()) % HELD_OUT_EVERY == 0 else "train"


def question_for(a: int, b: int, digits: int, addend_digits: int | None = None) -> str:
    """Each operand written with its full width (``07 + 45 =``), so every digit keeps its place."""
    return f"{a:0{digits}d} + {b:0{addend_digits or digits}d} ="


def solution_for(a: int, b: int, digits: int) -> str:
    """The worked answer an SFT example shows: the sum with ``digits + 1`` digits (``052``)."""
    return f"<answer>{a + b:0{digits + 1}d}</answer>"


def make_problems(n: int, seed: int = 0, *, split: str = "train", digits: int = 2,
                  addend_digits: int | None = None) -> list[dict[str, Any]]:
    """``n`` problems ``a + b`` of the ``split``, deterministic per seed.

    ``0 <= a < 10**digits`` and ``0 <= b < 10**addend_digits`` (default: ``digits``). Problems
    may repeat in the training split; held-out problems are distinct. No problem is in both.
    """
    width_b = addend_digits or digits
    if n < 1:
        raise DataError(f"num_synthetic={n}: ask for at least one arith problem")
    if split not in SPLITS:
        raise DataError(f"arith split '{split}' is unknown; choose one of: {', '.join(SPLITS)}")
    if not 1 <= width_b <= digits <= 9:
        raise DataError(f"arith needs 1 <= addend_digits <= digits <= 9, got digits={digits}, "
                        f"addend_digits={addend_digits}")
    space = 10 ** (digits + width_b)
    if split == "test" and n > space // HELD_OUT_EVERY // 2:
        raise DataError(f"{n} distinct held-out problems asked for, but digits={digits}, addend_digits={width_b} "
                        f"has only about {space // HELD_OUT_EVERY}; lower the number or raise digits")
    rng = random.Random(f"arith-{seed}-{split}")
    rows: list[dict[str, Any]] = []
    seen: set[tuple[int, int]] = set()
    while len(rows) < n:
        a, b = rng.randrange(10**digits), rng.randrange(10**width_b)
        if split_of(a, b) != split or (split == "test" and (a, b) in seen):
            continue  # held-out problems are distinct, so each one is an independent trial
        seen.add((a, b))
        rows.append({"a": a, "b": b, "question": question_for(a, b, digits, width_b), "answer": str(a + b)})
    return rows


# ---------------------------------------------------------------- grading and the reward


def grade(text: Any, gold: Any, *, tag: str | tuple[str, str] = "answer",
          ignore_inside: Sequence[str] = DEFAULT_IGNORE_INSIDE) -> Verdict:
    """Verdict on a whole completion, its rule one of :data:`VERDICTS`: the answer block must hold the exact sum.

    ``malformed``: an answer block that is not a plain non-negative integer (signs, decimals,
    words). Leading zeros and surrounding spaces are accepted (``0432`` is 432).
    """
    answer = extract_answer(text, tag, ignore_inside=ignore_inside)
    if answer is None:
        rule = "missing"
    else:
        match = _INTEGER.fullmatch(answer)
        rule = "malformed" if match is None else "correct" if int(match.group(1)) == int(str(gold).strip()) else "wrong"
    return Verdict(_STATUS[rule], rule, None if answer is None else "tag", answer)


def matches_format(completion: Any, *, tag: str | tuple[str, str] = "answer") -> bool:
    """This task's format: one answer block holding an integer and nothing around it."""
    text = completion_text(completion).strip()
    opening, closing = tag_markers(tag)
    if not (text.startswith(opening) and text.endswith(closing)) or text.count(opening) != 1:
        return False
    return _INTEGER.fullmatch(text[len(opening): len(text) - len(closing)]) is not None


@register("arith_correct", family="correctness", low=0.0, high=1.0)
def arith_correct(*, reward: float = 1.0, tag: str | Sequence[str] = "answer") -> RewardFunc:
    """`reward` when the answer block holds the exact sum, else 0 (the grader's verdict as a number).

    The gold ``answer`` column holds the sum as text (``"432"``).
    """
    key = tuple(tag) if not isinstance(tag, str) else tag
    tag_markers(key)  # a malformed tag fails here, not at the first training step

    def grader(completion: Any, gold: Any) -> Verdict:
        return grade(completion, gold, tag=key)

    def reward_fn(completions, answer=None, **kwargs) -> list[float | None]:
        if answer is None:
            raise ValueError("arith_correct needs the 'answer' column (the sum as text)")
        golds = per_sample(answer, len(completions), "answer")
        return [reward if grader(t, g) else 0.0 for t, g in zip(texts(completions), golds)]

    reward_fn.grader = grader  # type: ignore[attr-defined]
    return reward_fn


# ---------------------------------------------------------------- datasets


def load_arith(split: str = "train", *, num_synthetic: int = 512, seed: int = 0, digits: int = 2,
               addend_digits: int | None = None, system_prompt: str | None = None, limit: int | None = None):
    """Arith rows as ``prompt`` (chat messages), ``answer`` (the sum as text), ``question``."""
    import datasets

    count = num_synthetic if limit is None else min(num_synthetic, limit)
    rows = make_problems(count, seed=seed, split=split, digits=digits, addend_digits=addend_digits)
    system = SYSTEM_PROMPT if system_prompt is None else system_prompt
    return datasets.Dataset.from_dict({
        "prompt": [chat_prompt(r["question"], system) for r in rows],
        "answer": [r["answer"] for r in rows],
        "question": [r["question"] for r in rows],
    })


def difficulty(cfg) -> dict[str, int | None]:
    """The difficulty knob from ``data.subset``: ``"digits=2"`` or ``"digits=2,addend_digits=1"``."""
    out: dict[str, int | None] = {"digits": 2, "addend_digits": None}
    if not cfg.data.subset:
        return out
    for part in str(cfg.data.subset).split(","):
        key, _, value = part.partition("=")
        if key.strip() not in out or not value.strip().isdigit():
            raise DataError(f"data.subset='{cfg.data.subset}': arith reads it as the difficulty, e.g. "
                            "'digits=3' or 'digits=2,addend_digits=1' (digits per operand)")
        out[key.strip()] = int(value)
    return out


def sft_examples(cfg, n: int):
    """``n`` solved training problems as prompt/completion pairs for an SFT stage.

    They come from the training split with their own seed, so the SFT examples are a fixed
    set of ``n`` problems (extra SFT steps revisit them) while GRPO's prompts are drawn anew.
    """
    import datasets

    knob = difficulty(cfg)
    rows = make_problems(n, seed=cfg.seed + 10_000, split="train", **knob)
    system = cfg.data.system_prompt if cfg.data.system_prompt is not None else SYSTEM_PROMPT
    return datasets.Dataset.from_list([
        {"prompt": chat_prompt(r["question"], system),
         "completion": [{"role": "assistant", "content": solution_for(r["a"], r["b"], knob["digits"])}]}
        for r in rows
    ])


# ---------------------------------------------------------------- the task


class Arith(Task):
    """Offline addition problems, disjoint train and held-out splits, an SFT stage of solved ones."""

    name = "arith"
    system_prompt = SYSTEM_PROMPT
    default_rewards = DEFAULT_REWARDS
    grading_rewards = ("arith_correct",)

    def read(self, cfg, system_prompt):
        d = cfg.data
        if d.source != "synthetic":
            raise DataError(f"data.source='{d.source}': the arith task generates its problems; use 'synthetic'")
        return load_arith(d.split, num_synthetic=d.num_synthetic, seed=cfg.seed, system_prompt=system_prompt,
                          limit=d.limit, **difficulty(cfg))

    grade = staticmethod(grade)
    matches_format = staticmethod(matches_format)
    sft_examples = staticmethod(sft_examples)

    def lenient(self, cfg):
        """The last number anywhere in the completion is the sum (evaluation only, never a reward)."""
        return lenient

    def gold_completion(self, row: dict) -> str:
        return f"<answer>{row['answer']}</answer>"


TASK = Arith()


# ---------------------------------------------------------------- recipe

#: The first line of ``python -m unsloth_grpo.recipes.arith --help``.
RECIPE_DESCRIPTION = 'Arith recipe: SFT on solved sums, then GRPO on correctness, offline on a CPU (the accuracy demo).'

DEFAULTS = {
    "task": "arith",
    "output_dir": "outputs/arith",
    "seed": 0,
    "model": {"name": "builtin:tiny-digits", "max_seq_length": 128, "load_in_4bit": False, "dtype": "fp32",
              "device": "cpu", "backend": "transformers"},
    "lora": {"r": 32, "alpha": 64, "target_modules": ["all-linear"]},
    "data": {"source": "synthetic", "subset": "digits=3,addend_digits=1", "num_synthetic": 4096,
             "max_prompt_tokens": 64},
    "rewards": DEFAULT_REWARDS,
    "training": {
        "max_steps": 200, "learning_rate": 2e-4, "lr_scheduler_type": "constant", "warmup_ratio": 0.0,
        "weight_decay": 0.0, "max_grad_norm": 1.0, "num_generations": 16, "per_device_train_batch_size": 64,
        "max_completion_length": 8, "temperature": 0.7, "save_steps": 0, "gradient_checkpointing": False,
    },
    "run": {"samples_every": 0},
    # completions are a handful of tokens by design; an answer that is cut is simply wrong
    "monitor": {"ignore": ["length_clipped"]},
    # the GRPO stage starts and ends with greedy accuracy on 500 held-out sums, with its 95% interval
    "evaluation": {"split": "test", "limit": 500, "max_new_tokens": 8, "batch_size": 500, "before_after": True},
    # Measured (docs/accuracy_demo.md): after 160 SFT steps only ~2% of sampled answers were right and
    # GRPO had no signal; after 400 steps (26-66% held-out, by seed) GRPO at a gentle rate raises accuracy,
    # and keeps raising it to 200 steps (60 steps: +8.5 points on average, 200 steps: +24).
    "stages": [
        {"name": "sft", "kind": "sft", "max_steps": 400, "learning_rate": 3e-3, "num_examples": 512,
         "training": {"per_device_train_batch_size": 32}},
        {"name": "grpo", "kind": "grpo", "max_steps": 200},
    ],
}

PRESETS: dict[str, dict] = {
    # the same two stages cut short: checks the pipeline, not the accuracy claim. 60 SFT steps leave the
    # model at 2-9% held-out accuracy, so 10 GRPO steps have almost no signal and move a few answers
    # either way (seed 0: 0.09 -> 0.06, 1 fixed and 4 broken; the log line calls it within noise)
    "smoke": {
        "output_dir": "outputs/arith-smoke",
        "data": {"num_synthetic": 256},
        "evaluation": {"limit": 100, "batch_size": 100},
        "stages": [
            {"name": "sft", "kind": "sft", "max_steps": 60, "learning_rate": 3e-3, "num_examples": 128,
             "training": {"per_device_train_batch_size": 32}},
            {"name": "grpo", "kind": "grpo", "max_steps": 10},
        ],
    },
}

RECIPE = Recipe("arith", DEFAULTS, PRESETS, description=RECIPE_DESCRIPTION)
