"""JSON extraction: read a short record written in prose and answer with a JSON object of given keys.

The "impose a format" case: each prompt is a sentence or two about a person, an order or an
event, and names the keys to extract (a subset of the record's fields, so the model must
leave the others out). The answer is one JSON object inside ``<answer>`` (or the whole
completion, with ``tag=None``). This module owns the generator of synthetic records, the
loader, the strict JSON extraction, three rewards (it parses, it has exactly the keys, each
value matches) and evaluation (:data:`TASK`); the rewards and :func:`grade` share
:func:`extract_json` and :func:`value_matches`, and ``json_extract_values`` pays on :func:`grade`'s
verdict.

Strict means: the answer block holds one JSON object and nothing else (a surrounding
```json fence is allowed); trailing text, a second object, duplicate keys and ``NaN`` make it
invalid. Values match by type: ``36`` matches ``36`` and ``36.0`` but not ``"36"``; strings
match ignoring case and surrounding or repeated spaces.

Example::

    >>> gold = '{"name": "Ada Park", "age": 36}'
    >>> fns = [json_extract_valid(), json_extract_keys(), json_extract_values()]
    >>> texts = ['<answer>{"name": "ada park", "age": 36}</answer>',
    ...          '<answer>{"name": "Ada Park", "age": "36", "city": "Oslo"}</answer>',
    ...          '<answer>{"name": "Ada Park", "age": 36} thanks</answer>']
    >>> [fn(texts, answer=[gold] * 3) for fn in fns]
    [[1.0, 1.0, 0.0], [1.0, 0.6666666666666666, 0.0], [1.0, 0.3333333333333333, 0.0]]
"""

from __future__ import annotations

import json
import math
import random
import re
from typing import Any, Sequence

from unsloth_grpo.data import DataError, chat_prompt, load_table, synthetic_dataset, to_prompt_dataset
from unsloth_grpo.grading import DEFAULT_IGNORE_INSIDE, Verdict, completion_text, extract_tag, tag_markers
from unsloth_grpo.rewards._registry import RewardFunc, per_sample, register, texts
from unsloth_grpo.tasks._recipe import REAL_MODEL_PRESET, Recipe, real_model_preset, smoke_preset
from unsloth_grpo.tasks._task import Task, reasoned_completion

SYSTEM_PROMPT = (
    "Respond in the following format:\n"
    "<reasoning>\n...\n</reasoning>\n<answer>\n...\n</answer>\n"
    "Put only a JSON object with exactly the requested keys inside <answer>."
)

#: The format shown by a worked example, for a small real model that ignores a format described in
#: words (the recipe's ``smollm2`` preset; docs/real_model.md).
EXAMPLE_SYSTEM_PROMPT = (
    "Read the text and reply in exactly this format:\n"
    "<reasoning>\nwhere each value is\n</reasoning>\n<answer>\na JSON object with exactly the asked keys\n</answer>\n"
    "Example:\nExtract a JSON object with exactly the keys name, age from this text:\nAnn Lee is 34 years old.\n"
    "<reasoning>\nThe name is Ann Lee and the age is 34.\n</reasoning>\n<answer>\n{\"name\": \"Ann Lee\", \"age\": 34}\n</answer>"
)

#: Rewards the recipe uses unless the config lists its own.
DEFAULT_REWARDS = [
    {"name": "xml_count", "weight": 0.5},
    {"name": "json_extract_valid", "weight": 0.5},
    {"name": "json_extract_keys", "weight": 0.5},
    {"name": "json_extract_values", "weight": 1.0},
]

_FENCE = re.compile(r"```(?:json)?\s*(.*?)\s*```", re.DOTALL | re.IGNORECASE)


class _Invalid(ValueError):
    pass


# ---------------------------------------------------------------- extraction and matching


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict:
    keys = [k for k, _ in pairs]
    if len(set(keys)) != len(keys):
        raise _Invalid("duplicate key")
    return dict(pairs)


def _no_constants(name: str) -> Any:
    raise _Invalid(f"{name} is not valid JSON")


def parse_object(text: str) -> dict | None:
    """``text`` as one JSON object (a whole-text ```json fence allowed), or None.

    >>> parse_object('```json\\n{"a": 1}\\n```'), parse_object('{"a": 1} extra'), parse_object('[1]')
    ({'a': 1}, None, None)
    """
    body = text.strip()
    fenced = _FENCE.fullmatch(body)
    if fenced:
        body = fenced.group(1)
    try:
        value = json.loads(body, object_pairs_hook=_no_duplicates, parse_constant=_no_constants)
    except (ValueError, RecursionError):  # JSONDecodeError and _Invalid are ValueErrors
        return None
    return value if isinstance(value, dict) else None


def extract_json(
    text: Any,
    tag: str | tuple[str, str] | None = "answer",
    *,
    ignore_inside: Sequence[str] = DEFAULT_IGNORE_INSIDE,
) -> dict | None:
    """The JSON object answered in ``text``: inside the last ``tag`` block, or the whole text with ``tag=None``."""
    text = completion_text(text)
    if tag is not None:
        inner = extract_tag(text, tag, ignore_inside=ignore_inside)
        if inner is None:
            return None
        text = inner
    return parse_object(text)


def _number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def _norm(s: str) -> str:
    return " ".join(s.split()).casefold()


def value_matches(predicted: Any, gold: Any) -> bool:
    """A field's value is right: numbers equal as numbers, strings equal ignoring case and spacing,
    anything else equal as JSON. A number written as a string (or the reverse) is wrong."""
    if _number(gold):
        return _number(predicted) and math.isclose(predicted, gold, rel_tol=1e-9, abs_tol=1e-9)
    if isinstance(gold, str):
        return isinstance(predicted, str) and _norm(predicted) == _norm(gold)
    return type(predicted) is type(gold) and predicted == gold


def decode_gold(gold: Any) -> dict:
    """The gold object from an ``answer`` value (a JSON string or a dict)."""
    value = parse_object(gold) if isinstance(gold, str) else gold
    if not isinstance(value, dict) or not value:
        raise DataError(f"json_extract answer {gold!r} must be a non-empty JSON object such as {{\"name\": \"Ada\"}}")
    return value


def key_score(predicted: dict | None, gold: dict) -> float:
    """Keys in common over keys in either (Jaccard): 1.0 only for exactly the gold keys."""
    if predicted is None:
        return 0.0
    return len(predicted.keys() & gold.keys()) / len(predicted.keys() | gold.keys())


def value_score(predicted: dict | None, gold: dict) -> float:
    """Gold fields present with a matching value, over the keys of either object.

    An extra key counts as a wrong field, so 1.0 means exactly the gold keys, every value right:
    what evaluation counts as correct.
    """
    if predicted is None:
        return 0.0
    right = sum(k in predicted and value_matches(predicted[k], v) for k, v in gold.items())
    return right / len(predicted.keys() | gold.keys())


def grade(completion: Any, gold: Any, *, tag: str | tuple[str, str] | None = "answer") -> Verdict:
    """Verdict on a completion: correct for a strict JSON object with exactly the gold keys and every
    value right; its ``value`` is :func:`value_score` (0 when no object is read)."""
    gold_obj = decode_gold(gold)
    predicted = extract_json(completion, tag)
    if predicted is None:
        return Verdict("unparseable", "not_a_json_object")
    score = value_score(predicted, gold_obj)
    if score == 1.0:
        return Verdict("correct", "all_fields", "tag" if tag is not None else "text", None, score)
    rule = "extra_keys" if predicted.keys() - gold_obj.keys() else "wrong_fields"
    return Verdict("wrong", rule, "tag" if tag is not None else "text", None, score)


# ---------------------------------------------------------------- rewards


def _tag(tag: str | Sequence[str] | None) -> str | tuple[str, str] | None:
    """The ``tag`` parameter as extraction takes it; a malformed tag fails here, at construction."""
    key = tag if tag is None or isinstance(tag, str) else tuple(tag)
    if key is not None:
        tag_markers(key)
    return key


def _golds(answer: Any, n: int, reward: str) -> list[dict]:
    if answer is None:
        raise ValueError(f"{reward} needs the 'answer' column (the gold JSON object)")
    return [decode_gold(g) for g in per_sample(answer, n, "answer")]


@register("json_extract_valid", family="structured", low=0.0, high=1.0)
def json_extract_valid(*, reward: float = 1.0, tag: str | Sequence[str] | None = "answer") -> RewardFunc:
    """`reward` when the answer is exactly one JSON object (no trailing text, no duplicate keys).

    Reads the last ``tag`` block (``tag: null`` reads the whole completion); a surrounding
    ```json fence is allowed.
    """
    key = _tag(tag)

    def reward_fn(completions, **kwargs) -> list[float | None]:
        return [reward if extract_json(t, key) is not None else 0.0 for t in texts(completions)]

    return reward_fn


@register("json_extract_keys", family="structured", low=0.0, high=1.0)
def json_extract_keys(*, reward: float = 1.0, tag: str | Sequence[str] | None = "answer") -> RewardFunc:
    """`reward` times keys shared with the gold object over keys in either: extra and missing keys both cost.

    The gold object is the ``answer`` column (JSON). Invalid JSON scores 0.
    """
    key = _tag(tag)

    def reward_fn(completions, answer=None, **kwargs) -> list[float | None]:
        golds = _golds(answer, len(completions), "json_extract_keys")
        return [reward * key_score(extract_json(t, key), g) for t, g in zip(texts(completions), golds)]

    return reward_fn


@register("json_extract_values", family="structured", low=0.0, high=1.0)
def json_extract_values(*, reward: float = 1.0, tag: str | Sequence[str] | None = "answer") -> RewardFunc:
    """`reward` times the share of gold fields whose value matches (numbers as numbers, text ignoring case).

    The share is over the keys of the gold and the answer together: an extra key is a wrong
    field, so the full reward is paid exactly when evaluation counts the answer right. A number
    given as a string (``"36"`` for ``36``) does not match. Invalid JSON scores 0.
    """
    key = _tag(tag)

    def grader(completion: Any, gold: Any) -> Verdict:
        return grade(completion, gold, tag=key)

    def reward_fn(completions, answer=None, **kwargs) -> list[float | None]:
        golds = _golds(answer, len(completions), "json_extract_values")
        return [reward * (grader(t, g).value or 0.0) for t, g in zip(texts(completions), golds)]

    reward_fn.grader = grader  # type: ignore[attr-defined]
    return reward_fn


# ---------------------------------------------------------------- synthetic records

_FIRST = ["Ada", "Ben", "Chloe", "Dario", "Elif", "Farah", "Goran", "Hiro", "Ines", "Jonas", "Kemi", "Luca"]
_LAST = ["Park", "Okafor", "Silva", "Novak", "Haddad", "Berg", "Tanaka", "Moreau", "Quinn", "Reyes"]
_CITIES = ["Lisbon", "Oslo", "Nairobi", "Lima", "Osaka", "Tunis", "Krakow", "Denver", "Hanoi", "Perth"]
_JOBS = ["nurse", "welder", "teacher", "pilot", "chemist", "baker", "librarian", "architect"]
_ITEMS = [("desk lamp", 18.5), ("kettle", 24.0), ("backpack", 39.99), ("notebook", 2.75), ("chair", 64.0),
          ("umbrella", 12.25), ("headphones", 45.5)]
_EVENTS = ["Spring Fair", "Jazz Night", "Chess Open", "Robotics Expo", "Book Swap", "Film Week"]
_MONTHS = ["January", "February", "March", "April", "May", "June", "July", "August", "September",
           "October", "November", "December"]


def _person(rng: random.Random) -> tuple[dict, str]:
    rec = {"name": f"{rng.choice(_FIRST)} {rng.choice(_LAST)}", "age": rng.randint(19, 84),
           "city": rng.choice(_CITIES), "occupation": rng.choice(_JOBS)}
    text = rng.choice([
        "{name}, {age}, works as a {occupation} in {city}.",
        "{name} is a {age}-year-old {occupation} who lives in {city}.",
        "Meet {name}: {occupation} by trade, {age} years old, based in {city}.",
    ]).format(**rec)
    return rec, text


def _order(rng: random.Random) -> tuple[dict, str]:
    item, price = rng.choice(_ITEMS)
    quantity = rng.randint(1, 9)
    rec = {"order_id": f"{rng.choice('ABCDEFGH')}-{rng.randint(1000, 9999)}",
           "customer": f"{rng.choice(_FIRST)} {rng.choice(_LAST)}", "item": item, "quantity": quantity,
           "total": round(price * quantity, 2)}
    text = rng.choice([
        "Order {order_id}: {customer} bought {quantity} x {item} for a total of ${total:.2f}.",
        "{customer} placed order {order_id} for {quantity} {item} units, paying ${total:.2f} in all.",
        "On order {order_id}, {quantity} of the item '{item}' went to {customer}; the bill came to ${total:.2f}.",
    ]).format(**rec)
    return rec, text


def _event(rng: random.Random) -> tuple[dict, str]:
    month, day = rng.randrange(12), rng.randint(1, 28)
    rec = {"event": rng.choice(_EVENTS), "date": f"2025-{month + 1:02d}-{day:02d}",
           "city": rng.choice(_CITIES), "attendees": rng.randrange(20, 2000, 10)}
    text = rng.choice([
        "The {event} takes place in {city} on {date} and expects {attendees} guests.",
        "{attendees} people are registered for the {event}, held in {city} on " + f"{_MONTHS[month]} {day}, 2025.",
        "Save the date: {event}, {city}, {date}. Expected attendance: {attendees}.",
    ]).format(**rec)
    return rec, text


_KINDS = {"person": _person, "order": _order, "event": _event}


def make_record(rng: random.Random, kind: str | None = None, *, min_keys: int = 2) -> dict[str, Any]:
    """One prose record with the keys asked for: ``kind``, ``text``, ``keys``, ``question``, ``answer``."""
    kind = kind or rng.choice(sorted(_KINDS))
    rec, text = _KINDS[kind](rng)
    fields = list(rec)
    keys = sorted(rng.sample(fields, rng.randint(min(min_keys, len(fields)), len(fields))), key=fields.index)
    question = (f"Extract a JSON object with exactly the keys {', '.join(keys)} from this text:\n{text}")
    return {"kind": kind, "text": text, "keys": keys, "question": question,
            "answer": json.dumps({k: rec[k] for k in keys})}


def make_records(n: int, seed: int = 0, *, kinds: Sequence[str] | None = None) -> list[dict[str, Any]]:
    """``n`` records cycling through ``kinds`` (default: person, order, event), deterministic per seed."""
    if n < 1:
        raise DataError(f"num_synthetic={n}: ask for at least one record")
    kinds = list(kinds or sorted(_KINDS))
    unknown = [k for k in kinds if k not in _KINDS]
    if unknown:
        raise DataError(f"unknown record kind(s) {unknown}; choose from {', '.join(sorted(_KINDS))}")
    rng = random.Random(seed)
    return [make_record(rng, kinds[i % len(kinds)]) for i in range(n)]


# ---------------------------------------------------------------- loading


def load_json_extract(
    source: str = "synthetic",
    split: str = "train",
    *,
    subset: str | None = None,
    system_prompt: str | None = None,
    limit: int | None = None,
    num_synthetic: int = 512,
    seed: int = 0,
    question_column: str = "question",
    answer_column: str = "answer",
):
    """Rows as ``prompt`` (system + user chat messages) and ``answer`` (the gold JSON object as text).

    ``source`` is ``"synthetic"`` (offline records; the test split uses another seed) or a local
    file / hub dataset whose ``answer_column`` holds a JSON object (text or mapping) and whose
    ``question_column`` holds the full instruction with the text to read.
    """
    system = SYSTEM_PROMPT if system_prompt is None else system_prompt
    if source == "synthetic":
        return synthetic_dataset(make_records, split=split, seed=seed, num_synthetic=num_synthetic, limit=limit,
                                 system_prompt=system)
    table = load_table(source, split=split, subset=subset)
    if answer_column in table.column_names and getattr(table.features[answer_column], "dtype", None) != "string":
        raise DataError(
            f"dataset '{source}': column '{answer_column}' must hold each gold object as JSON text "
            f"(a string such as '{{\"name\": \"Ada\"}}'), not {table.features[answer_column]}; "
            "nested objects are merged across rows by the loader, so write them as strings"
        )
    return to_prompt_dataset(table, source=source, system_prompt=system, question_column=question_column,
                             answer_column=answer_column, gold_parser=_gold_text, limit=limit)


def _gold_text(value: str) -> str | None:
    """A gold cell as canonical JSON text, or None (reported by row) when it is not a JSON object."""
    obj = parse_object(value)
    return json.dumps(obj) if obj else None


# ---------------------------------------------------------------- the task


class JsonExtract(Task):
    """Answer with a JSON object of the asked keys, read strictly."""

    name = "json_extract"
    system_prompt = SYSTEM_PROMPT
    default_rewards = DEFAULT_REWARDS
    grading_rewards = ("json_extract_values",)
    loader = staticmethod(load_json_extract)
    named_columns = True
    grade = staticmethod(grade)

    def gold_completion(self, row: dict) -> str:
        return reasoned_completion(row["answer"])


TASK = JsonExtract()


# ---------------------------------------------------------------- recipe

#: The first line of ``python -m unsloth_grpo.recipes.json_extract --help``.
RECIPE_DESCRIPTION = 'JSON extraction recipe: answer with a JSON object of the requested keys, read from a short text.'

DEFAULTS = {
    "task": "json_extract",
    "output_dir": "outputs/json_extract",
    "model": {"name": "unsloth/Qwen2.5-1.5B-Instruct-bnb-4bit", "max_seq_length": 640, "load_in_4bit": True},
    "lora": {"r": 16, "alpha": 32},
    "data": {"source": "synthetic", "subset": None, "num_synthetic": 2048, "max_prompt_tokens": 256},
    "rewards": DEFAULT_REWARDS,
    "training": {"max_steps": 200},
}

PRESETS = {
    # Offline on CPU with the tiny random model. JSON is spelled in sub-word pieces it cannot
    # assemble by chance, so the answer tags carry the rising reward; the JSON rewards are
    # still computed and logged.
    "smoke": smoke_preset(
        output_dir="outputs/json-smoke",
        task_rewards=[
            {"name": "json_extract_valid", "weight": 0.5},
            {"name": "json_extract_keys", "weight": 0.5},
            {"name": "json_extract_values", "weight": 1.0},
        ],
        data={"max_prompt_tokens": 320},
    ),
    # The real built-in model (SmolLM2-135M-Instruct) on a CPU: the format shown by an example, each tag
    # paid on its own, and the task's JSON rewards, which a real model can earn.
    REAL_MODEL_PRESET: real_model_preset(
        output_dir="outputs/json-smollm2",
        system_prompt=EXAMPLE_SYSTEM_PROMPT,
        rewards=[{"name": "xml_count", "weight": 1.0, "params": {"per_tag": 0.25, "once": False}},
                 {"name": "json_extract_valid", "weight": 0.5},
                 {"name": "json_extract_keys", "weight": 0.5},
                 {"name": "json_extract_values", "weight": 1.0}],
        data={"max_prompt_tokens": 320},
        training={"max_completion_length": 64},
    ),
    # Colab T4 (16 GB, no bf16).
    "t4": {"model": {"dtype": "fp16"}},  # the vLLM pool is standby's: Unsloth sizes it from the card
}

RECIPE = Recipe("json_extract", DEFAULTS, PRESETS, description=RECIPE_DESCRIPTION)
