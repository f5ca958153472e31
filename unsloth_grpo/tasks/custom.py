"""Your own questions: a CSV/JSONL/Parquet file (or hub dataset) of questions and reference answers.

The config-only task: point ``data.source`` at the file, name its columns
(``data.question_column``, ``data.answer_column``), and choose how an answer is graded with the
``qa_correctness`` reward's ``mode``:

- ``exact``: the answer's text equals the reference, ignoring case and spacing;
- ``numeric``: the same number (``$1,200.00`` = ``1200``), as the GSM8K ``correctness`` reward reads it;
- ``f1``: token overlap (SQuAD's F1 on lower-cased words without punctuation and articles), for
  free-text answers where partial credit helps. Scripts written without spaces (Chinese, Japanese
  kana, Thai, Lao, Khmer) count each character as a token: ``東京都`` against ``東京`` is 0.8, not 0.

``numeric`` reads numbers as English writes them: ``3,5`` is no number (a comma separates thousands,
``3,500``), so it never equals ``3.5``; a decimal comma is graded as text (``exact``).

The reward and evaluation share :func:`grade`. ``data.source: synthetic`` gives an offline
stand-in: short handbook excerpts with a question whose answer is in the excerpt.

Example::

    >>> fn = qa_correctness(mode="f1", reward=1.0)
    >>> fn(["<answer>the finance team</answer>", "<answer>finance</answer>", "no answer"],
    ...    answer=["Finance team"] * 3)
    [1.0, 0.6666666666666666, 0.0]
    >>> grade("<answer>$1,200.00</answer>", "1200", mode="numeric").value
    1.0
"""

from __future__ import annotations

import random
import re
import string
import unicodedata
from collections import Counter
from typing import Any, Sequence

from unsloth_grpo.data import DataError, load_qa_dataset, row_label, synthetic_dataset
from unsloth_grpo.grading import (
    DEFAULT_IGNORE_INSIDE,
    Verdict,
    answers_match,
    find_answer,
    lenient,
    parse_number,
    tag_markers,
)
from unsloth_grpo.rewards._registry import RewardFunc, per_sample, register, texts
from unsloth_grpo.tasks._recipe import Recipe, smoke_preset
from unsloth_grpo.tasks._task import Task, reasoned_completion

SYSTEM_PROMPT = (
    "Respond in the following format:\n"
    "<reasoning>\n...\n</reasoning>\n<answer>\n...\n</answer>\n"
    "Put only the final answer inside <answer>."
)

#: Longest answer graded, in characters: a reference answer is a phrase, and longer text would
#: only cost time (token F1 over a 30k-character answer takes milliseconds).
MAX_ANSWER_TEXT = 2000

#: How ``qa_correctness`` can grade an answer.
MODES = ("exact", "numeric", "f1")

#: Rewards the recipe uses unless the config lists its own: the format rewards, then correctness.
DEFAULT_REWARDS = [
    {"name": "xml_count", "weight": 1.0},
    {"name": "soft_format", "weight": 0.5},
    {"name": "qa_correctness", "weight": 2.0, "params": {"mode": "exact"}},
]

_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCTUATION = str.maketrans("", "", string.punctuation)
#: Scripts written without spaces between words: Thai, Lao, Khmer, kana, CJK ideographs, half-width kana.
_UNSPACED = "\u0e00-\u0eff\u1780-\u17ff\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uff66-\uff9f"
#: A character of such a script, or a run of other characters between spaces.
_TOKEN = re.compile(f"[{_UNSPACED}]|[^\\s{_UNSPACED}]+")


# ---------------------------------------------------------------- grading


def answer_tokens(text: str) -> list[str]:
    """Lower-cased words without punctuation and articles (SQuAD's normalisation); in a script written
    without spaces each character is a token, as the space-separated words are elsewhere."""
    text = "".join(c for c in text.casefold().translate(_PUNCTUATION) if not unicodedata.category(c).startswith("P"))
    return _TOKEN.findall(_ARTICLES.sub(" ", text))


def token_f1(predicted: str, gold: str) -> float:
    """Harmonic mean of token precision and recall between two answers (1.0 when both are empty)."""
    p, g = answer_tokens(predicted), answer_tokens(gold)
    if not p or not g:
        return float(p == g)
    common = sum((Counter(p) & Counter(g)).values())
    if common == 0:
        return 0.0
    precision, recall = common / len(p), common / len(g)
    return 2 * precision * recall / (precision + recall)


def _same_text(predicted: str, gold: str) -> bool:
    return " ".join(predicted.split()).casefold() == " ".join(gold.split()).casefold()


def grade(
    text: Any,
    gold: Any,
    *,
    mode: str = "exact",
    tag: str | tuple[str, str] = "answer",
    ignore_inside: Sequence[str] = DEFAULT_IGNORE_INSIDE,
) -> Verdict:
    """Verdict on the final answer in ``text`` against ``gold`` under ``mode`` (see :data:`MODES`):
    its ``value`` is the score in [0, 1], correct at 1.0."""
    if mode not in MODES:
        raise ValueError(f"mode={mode!r}; choose one of {', '.join(MODES)}")
    predicted, source = find_answer(text, tag, ignore_inside=ignore_inside)
    if predicted is None or gold is None:
        return Verdict("missing" if source == "no_answer" else "wrong", source, value=0.0)
    gold = str(gold)
    if len(predicted) > MAX_ANSWER_TEXT:
        return Verdict("wrong", "too_long", source, None, 0.0)
    if mode == "exact":
        score = float(_same_text(predicted, gold))
    elif mode == "numeric":
        score = float(answers_match(predicted, gold))
    else:
        score = token_f1(predicted, gold)
    return Verdict("correct" if score >= 1.0 else "wrong", f"{mode}_match" if score >= 1.0 else "mismatch",
                   source, predicted, score)


@register("qa_correctness", family="correctness", low=0.0, high=2.0)
def qa_correctness(
    *,
    mode: str = "exact",
    reward: float = 2.0,
    tag: str | Sequence[str] = "answer",
) -> RewardFunc:
    """`reward` times the answer's grade against the gold `answer`: exact text, same number, or token F1.

    ``mode`` is ``exact`` (case and spacing ignored), ``numeric`` (``$1,200.00`` equals ``1200``;
    a gold answer that is not a number is compared as text) or ``f1`` (partial credit for
    overlapping words). A missing answer scores 0.
    """
    if mode not in MODES:
        raise ValueError(f"mode={mode!r}; choose one of {', '.join(MODES)}")
    key = tag if isinstance(tag, str) else tuple(tag)
    tag_markers(key)  # a malformed tag fails here, not at the first training step

    def grader(completion: Any, gold: Any) -> Verdict:
        return grade(completion, gold, mode=mode, tag=key)

    def reward_fn(completions, answer=None, **kwargs) -> list[float | None]:
        if answer is None:
            raise ValueError("qa_correctness needs the 'answer' column (the reference answers)")
        golds = per_sample(answer, len(completions), "answer")
        return [None if g is None else reward * grader(t, g).value for t, g in zip(texts(completions), golds)]

    reward_fn.grader = grader  # type: ignore[attr-defined]
    return reward_fn


def grading_mode(rewards: Sequence[Any]) -> str:
    """The ``mode`` a recipe's reward list grades with, so evaluation grades the same way.

    ``qa_correctness`` gives its ``mode``; the registry's ``correctness`` means ``numeric`` and
    ``exact_match`` means ``exact``; without any of them, ``exact``.
    """
    for spec in rewards:
        name = spec["name"] if isinstance(spec, dict) else spec.name
        params = (spec.get("params") if isinstance(spec, dict) else spec.params) or {}
        if name == "qa_correctness":
            return params.get("mode", "exact")
        if name == "correctness":
            return "numeric"
        if name == "exact_match":
            return "exact"
    return "exact"


# ---------------------------------------------------------------- synthetic handbook questions

_CITIES = ["Lisbon", "Oslo", "Nairobi", "Lima", "Osaka", "Tunis", "Krakow", "Denver"]
_PEOPLE = ["Ines Berg", "Kemi Okafor", "Hiro Tanaka", "Luca Moreau", "Farah Haddad", "Jonas Novak"]
_TEAMS = ["the finance team", "the facilities team", "the security desk", "the people team"]


def _handbook_row(rng: random.Random) -> dict[str, str]:
    city, manager, team = rng.choice(_CITIES), rng.choice(_PEOPLE), rng.choice(_TEAMS)
    rooms, desks, days = rng.randint(2, 14), rng.randrange(20, 300, 5), rng.randint(18, 30)
    excerpt = (f"The {city} office has {rooms} meeting rooms and {desks} desks. It is managed by {manager}. "
               f"Badges are issued by {team}. Staff there get {days} days of paid leave a year.")
    question, answer = rng.choice([
        ("How many meeting rooms does the {city} office have?", str(rooms)),
        ("How many desks does the {city} office have?", str(desks)),
        ("Who manages the {city} office?", manager),
        ("Who issues badges in the {city} office?", team),
        ("How many days of paid leave do staff in the {city} office get?", str(days)),
    ])
    return {"question": f"Handbook: {excerpt}\nQuestion: {question.format(city=city)}", "answer": answer}


def make_handbook_questions(n: int, seed: int = 0) -> list[dict[str, str]]:
    """``n`` offline question/answer rows, each with the handbook excerpt that answers it."""
    if n < 1:
        raise DataError(f"num_synthetic={n}: ask for at least one question")
    rng = random.Random(seed)
    return [_handbook_row(rng) for _ in range(n)]


# ---------------------------------------------------------------- loading


def load_custom(
    source: str,
    split: str = "train",
    *,
    subset: str | None = None,
    system_prompt: str | None = None,
    limit: int | None = None,
    num_synthetic: int = 512,
    seed: int = 0,
    question_column: str = "question",
    answer_column: str = "answer",
    mode: str | None = None,
):
    """Rows of ``source`` as ``prompt`` (system + user chat messages) and ``answer`` (reference text).

    ``source`` is a local ``.csv``/``.jsonl``/``.json``/``.parquet`` file, a hub dataset id, or
    ``"synthetic"``. The file's own columns are kept under their names as well (TRL passes every
    column to the rewards, so a reward written for ``ground_truth`` gets it). With ``mode="numeric"`` every reference must read as a number; the rows
    that do not are reported before training.
    """
    system = SYSTEM_PROMPT if system_prompt is None else system_prompt
    if source == "synthetic":
        ds = synthetic_dataset(make_handbook_questions, split=split, seed=seed, num_synthetic=num_synthetic,
                               limit=limit, system_prompt=system)
    else:
        ds = load_qa_dataset(source, system_prompt=system, question_column=question_column,
                             answer_column=answer_column, split=split, subset=subset, limit=limit,
                             keep_columns=True)
    if mode == "numeric":
        bad = [f"{row_label(source, i)}: {a!r}" for i, a in enumerate(ds["answer"]) if parse_number(a) is None]
        if bad:
            more = f"\n  ... and {len(bad) - 5} more" if len(bad) > 5 else ""
            raise DataError(f"dataset '{source}': qa_correctness mode 'numeric' needs a number in every reference "
                            f"answer, but {len(bad)} are not:\n  " + "\n  ".join(bad[:5]) + more
                            + "\nUse mode 'exact' or 'f1' for text answers.")
    return ds


# ---------------------------------------------------------------- the task


class Custom(Task):
    """Your own questions and reference answers, graded in the recipe's ``qa_correctness`` mode."""

    name = "custom"
    system_prompt = SYSTEM_PROMPT
    default_rewards = DEFAULT_REWARDS
    grading_rewards = ("qa_correctness", "correctness", "exact_match")
    named_columns = True

    def read(self, cfg, system_prompt):
        """The rows of ``data.source``, every reference checked to be a number in ``numeric`` mode."""
        return load_custom(**self.loader_options(cfg, system_prompt), mode=grading_mode(cfg.rewards))

    grade = staticmethod(grade)

    def lenient(self, cfg):
        """In ``numeric`` mode the right number anywhere in the completion (evaluation only); None for
        text answers, which have no last number to read."""
        return lenient if grading_mode(cfg.rewards) == "numeric" else None

    def gold_completion(self, row: dict) -> str:
        return reasoned_completion(row["answer"])


TASK = Custom()


# ---------------------------------------------------------------- recipe

#: The first line of ``python -m unsloth_grpo.recipes.custom --help``.
RECIPE_DESCRIPTION = ("Custom Q&A recipe: GRPO on your own file of questions and reference answers, configured "
                      "in YAML only.")

DEFAULTS = {
    "task": "custom",
    "output_dir": "outputs/custom",
    "model": {"name": "unsloth/Qwen2.5-1.5B-Instruct-bnb-4bit", "max_seq_length": 1024, "load_in_4bit": True},
    "lora": {"r": 16, "alpha": 32},
    # Without a config this trains on the offline handbook questions; set data.source to your file.
    "data": {"source": "synthetic", "subset": None, "max_prompt_tokens": 256},
    "rewards": DEFAULT_REWARDS,
    "training": {"max_completion_length": 512},
}

PRESETS = {
    # Offline on CPU with the tiny random model and the handbook questions: the answer tags
    # carry the rising reward; qa_correctness is still computed and logged.
    "smoke": smoke_preset(
        output_dir="outputs/custom-smoke",
        task_rewards=[{"name": "qa_correctness", "weight": 1.0, "params": {"mode": "f1"}}],
        data={"source": "synthetic", "max_prompt_tokens": 320},
    ),
    # Colab T4 (16 GB, no bf16).
    "t4": {"model": {"dtype": "fp16"}},  # the vLLM pool is standby's: Unsloth sizes it from the card
}

RECIPE = Recipe("custom", DEFAULTS, PRESETS, description=RECIPE_DESCRIPTION)
