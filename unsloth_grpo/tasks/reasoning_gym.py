"""reasoning-gym: any of its generated datasets (or a weighted mixture) as a task, graded strictly.

`reasoning-gym <https://pypi.org/project/reasoning-gym/>`_ (an optional extra:
``pip install 'unsloth-grpo[reasoning_gym]'``) generates about a hundred datasets offline, each with a
config dataclass and a ``score_answer(answer, entry)``. This module owns the task around them: the rows
(``data.datasets``: one entry per dataset with its own config, weight, seed and size; a held-out split
generated with other seeds, its questions that training also holds removed and counted), the checks of
that list before any model loads, the one grade, the ``reasoning_gym_correct`` reward and evaluation
(:data:`TASK`).

The grade (:func:`grade`) reads the one answer in ``<answer>`` with the toolkit's extraction, refuses
what the toolkit never pays (several different answers, a hedge, a list of candidates:
:func:`unsloth_grpo.grading.hedge_refusal`), and otherwise asks the dataset's own ``score_answer``. Only
full marks are right: reasoning-gym's default ``score_answer`` pays ``len(oracle) / len(answer)`` to an
answer that merely contains the oracle, which would pay a model for listing candidates.

The ``answer`` column holds what grading needs as a JSON string: the dataset's name, its config, and
the entry (question, answer, metadata) with its tuples kept (:func:`encode_gold`); ``category`` holds
the dataset's name, so evaluation's accuracy by kind is accuracy by dataset.

Example (needs reasoning-gym)::

    >>> gold = encode_gold("chain_sum", {"seed": 0, "size": 1}, {"question": "2 + 3 =", "answer": "5", "metadata": {}})
    >>> grade("<answer>5</answer>", gold).rule, grade("<answer>5 or 6</answer>", gold).rule
    ('score_answer', 'hedge')
    >>> grade("<answer>it is 5</answer>", gold).rule    # reasoning-gym pays 1/8 here
    'partial_credit'
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import json
import random
import re
from typing import Any, Sequence

from unsloth_grpo.data import DataError, chat_prompt
from unsloth_grpo.grading import DEFAULT_IGNORE_INSIDE, Verdict, find_answer, hedge_refusal, tag_markers
from unsloth_grpo.rewards._registry import RewardFunc, per_sample, register, texts
from unsloth_grpo.tasks._reasoning_gym_levels import Levels, curriculum_problems, level_config, level_pools, settings
from unsloth_grpo.tasks._recipe import REAL_MODEL_PRESET, Recipe, real_model_preset, smoke_preset
from unsloth_grpo.tasks._task import Task, reasoned_completion

SYSTEM_PROMPT = (
    "Respond in the following format:\n"
    "<reasoning>\n...\n</reasoning>\n<answer>\n...\n</answer>\n"
    "Put only the final answer inside <answer>, in the form the question asks for."
)

#: The system prompt of the ``smollm2`` preset: one answer shown in the format, for a model too small to
#: follow the format from words alone.
EXAMPLE_SYSTEM_PROMPT = (
    "Answer the question. Write your working inside <reasoning> tags, then only the final answer inside "
    "<answer> tags.\n"
    "Example:\nQuestion: What is 3 + 4?\n<reasoning>\n3 + 4 = 7\n</reasoning>\n<answer>\n7\n</answer>"
)

#: How to get the library this task needs.
INSTALL = "pip install 'unsloth-grpo[reasoning_gym]'"

#: The keys of one ``data.datasets`` entry.
SPEC_KEYS = ("name", "weight", "config", "seed", "size", "curriculum")

#: Added to a dataset's seed for a held-out split. reasoning-gym draws item ``i`` from ``seed + i``, so
#: ``seed + 1`` (the toolkit's usual held-out seed) would repeat every training item but the first.
HELD_OUT_SEED_OFFSET = 1_000_000

#: Longest answer region handed to a dataset's ``score_answer`` (some parse with sympy or run a program).
MAX_ANSWER_CHARS = 4000

#: Datasets the task refuses, with why.
REFUSED = {"composite": "it is reasoning-gym's own mixture; list its datasets under data.datasets instead"}

#: Datasets whose ``score_answer`` cannot tell right from wrong, graded against their oracle answer as text.
ORACLE_ONLY = {"game_of_life_halting": "its score_answer pays any non-empty answer (bool('False') is True)"}

#: Datasets whose ``score_answer`` hands the answer to Python's ``eval`` (to read a list or grid written
#: as Python): an answer with a call, an operator that builds something big, or a dunder never reaches it.
PYTHON_EVAL = ("binary_matrix", "n_queens", "spiral_matrix", "string_insertion")
#: Datasets whose ``score_answer`` reads the answer with sympy's ``parse_expr``, which runs it through
#: ``eval``: only names of one letter or of :data:`MATH_NAMES`, and small exponents that are not raised again
#: (``99**99**99`` would not finish), without ``!`` (a factorial), reach it.
SYMPY_PARSE = ("countdown", "intermediate_integration", "polynomial_multiplication", "puzzle24",
               "simple_integration")
MATH_NAMES = frozenset({"sin", "cos", "tan", "cot", "sec", "csc", "asin", "acos", "atan", "sinh", "cosh", "tanh",
                        "exp", "log", "ln", "sqrt", "pi", "oo", "Abs"})
_PYTHON_CODE = re.compile(r"[()*<>@]|__|:=")
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_POWER = re.compile(r"\*\*\s*(\(?\s*-?\s*\d{1,2}\s*\)?)?")


def _code_in(name: str, answer: str) -> bool:
    """Whether ``answer`` is more than data for a dataset whose scorer evaluates it (see :data:`PYTHON_EVAL`)."""
    if name in PYTHON_EVAL:
        return _PYTHON_CODE.search(answer) is not None
    if name in SYMPY_PARSE:
        powers = list(_POWER.finditer(answer))
        return (any(c in answer for c in "'\"[];=!") or "__" in answer or len(powers) > 8
                or any(m.group(1) is None or answer[m.end():].lstrip().startswith("**") for m in powers)
                or re.search(r"[A-Za-z_)\]]\s*\.", answer) is not None
                or any(len(w) > 1 and w not in MATH_NAMES for w in _NAME.findall(answer)))
    return False


def _puzzle24_numbers(answer: str, entry: dict) -> bool:
    return sorted(int(n) for n in re.findall(r"\d+", answer)) == sorted(entry["metadata"]["numbers"])


#: Checks made before a dataset's ``score_answer``, where it pays answers it should not (rule, check, why).
EXTRA_CHECKS = {"puzzle24": ("wrong_numbers", _puzzle24_numbers,
                             "its score_answer pays any four numbers that make 24, not only the given ones")}

#: Rewards the recipe uses unless the config lists its own.
DEFAULT_REWARDS = [
    {"name": "xml_count", "weight": 0.5},
    {"name": "reasoning_gym_correct", "weight": 1.0},
]


def _factory():
    """reasoning-gym's registry module, or a DataError saying how to install it."""
    try:
        from reasoning_gym import factory
    except ImportError:
        raise DataError(f"the reasoning_gym task needs the reasoning-gym package: {INSTALL}") from None
    return factory


# ---------------------------------------------------------------- data.datasets


@dataclasses.dataclass(frozen=True)
class Spec:
    """One entry of ``data.datasets``: a reasoning-gym dataset with its config, share, seed and size."""

    name: str
    config: dict = dataclasses.field(default_factory=dict)
    weight: float = 1.0
    seed: int | None = None
    size: int | None = None
    #: the curriculum's settings (``_reasoning_gym_levels.settings``), None when the level is fixed
    curriculum: dict | None = None


def spec_problems(entries: Any, where: str = "data.datasets") -> list[str]:
    """Every problem of a ``data.datasets`` list, one line each, found without generating a row.

    An unknown dataset names the close names, an unknown config field names the valid ones (read from
    the dataset's config dataclass), and what the config's own ``validate()`` refuses is said with the
    dataset and the field its message names.
    """
    if not isinstance(entries, list) or not entries:
        return [f"{where} must list at least one reasoning-gym dataset, e.g. [{{name: chain_sum}}]"]
    try:
        factory = _factory()
    except DataError as exc:
        return [f"{where}: {exc}"]
    out: list[str] = []
    for i, raw in enumerate(entries):
        label = f"{where}[{i}]"
        if not isinstance(raw, dict):
            out.append(f"{label} must be a mapping with keys {', '.join(SPEC_KEYS)}, got {raw!r}")
            continue
        out += [f"{label}: unknown key '{k}'{_close(k, SPEC_KEYS)}; an entry takes {', '.join(SPEC_KEYS)}"
                for k in raw if k not in SPEC_KEYS]
        name = raw.get("name")
        if not isinstance(name, str) or not name:
            out.append(f"{label}: give the dataset's name (name: chain_sum)")
            continue
        if name in REFUSED:
            out.append(f"{label}: name='{name}' is not trained on here: {REFUSED[name]}")
            continue
        if name not in factory.DATASETS:
            out.append(f"{label}: name='{name}' is not a reasoning-gym dataset{_close(name, factory.DATASETS, 3)}; "
                       f"reasoning-gym {_version()} has {len(factory.DATASETS)}: "
                       "python -c 'import reasoning_gym; print(sorted(reasoning_gym.factory.DATASETS))'")
            continue
        out += _number_problems(raw, label)
        config = raw.get("config") or {}
        if not isinstance(config, dict):
            out.append(f"{label}.config must be a mapping of {name}'s config fields, got {config!r}")
            continue
        out += _config_problems(factory.DATASETS[name][1], name, config, label)
        out += curriculum_problems(name, raw.get("curriculum"), config, label)
    return out


def _close(word: str, choices, n: int = 1) -> str:
    close = difflib.get_close_matches(str(word), list(choices), n=n)
    return f"; did you mean {', '.join(repr(c) for c in close)}?" if close else ""


def _version() -> str:
    from importlib.metadata import version

    return version("reasoning-gym")


def _number_problems(raw: dict, label: str) -> list[str]:
    out = []
    weight = raw.get("weight", 1.0)
    if isinstance(weight, bool) or not isinstance(weight, (int, float)) or weight <= 0:
        out.append(f"{label}.weight={weight!r} must be a number above 0 (the dataset's share of data.num_synthetic)")
    for key, low in (("seed", 0), ("size", 1)):
        value = raw.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < low):
            out.append(f"{label}.{key}={value!r} must be a whole number of at least {low} (or left out)")
    return out


def _config_problems(config_cls: type, name: str, config: dict, label: str) -> list[str]:
    fields = [f.name for f in dataclasses.fields(config_cls) if f.name not in ("seed", "size")]
    out = []
    for key in config:
        if key in ("seed", "size"):
            out.append(f"{label}.config.{key}: give it as {label}.{key}; the task sets the config's seed and size "
                       "(the held-out split needs its own seed)")
        elif key not in fields:
            out.append(f"{label}.config.{key} is not a field of {name}'s config ({config_cls.__name__})"
                       f"{_close(key, fields)}; its fields: {', '.join(fields)}")
    if out:
        return out
    try:
        built = config_cls(**config, seed=0, size=1)
        if hasattr(built, "validate"):
            built.validate()
    except Exception as exc:  # noqa: BLE001 - reasoning-gym checks with bare asserts (and a few TypeErrors)
        said = str(exc) or type(exc).__name__
        named = [f for f in fields if f in said] or sorted(config) or ["(defaults)"]
        return [f"{label} ({name}): reasoning-gym's check refuses {', '.join(f'config.{f}' for f in named)}: {said}"]
    return []


def parse_specs(entries: list[dict], default_seed: int) -> list[Spec]:
    """``data.datasets`` as :class:`Spec` s (checked first: a DataError lists every problem)."""
    problems = spec_problems(entries)
    if problems:
        raise DataError("\n".join(problems))
    specs = []
    for e in entries:
        levels = settings(e.get("curriculum"))
        config = dict(e.get("config") or {})
        if levels is not None:  # trained, and held out, at the start level's config
            config = level_config(e["name"], config, levels["start_level"])
        specs.append(Spec(name=e["name"], config=config, weight=float(e.get("weight", 1.0)),
                          seed=default_seed if e.get("seed") is None else int(e["seed"]), size=e.get("size"),
                          curriculum=levels))
    return specs


def sizes(specs: Sequence[Spec], total: int) -> list[int]:
    """Rows per dataset: its own ``size``, else ``total`` shared by weight among those without one (at least 1).

    >>> sizes([Spec("a", weight=3), Spec("b"), Spec("c", size=10)], 100)
    [75, 25, 10]
    """
    free = sum(s.weight for s in specs if s.size is None)
    return [s.size if s.size is not None else max(1, round(total * s.weight / free)) for s in specs]


# ---------------------------------------------------------------- the gold column


def _tagged(value: Any) -> Any:
    """``value`` with what JSON would change marked: tuples (reasoning-gym compares grids as tuples) and
    mappings whose keys are not strings."""
    if isinstance(value, tuple):
        return {"__tuple__": [_tagged(v) for v in value]}
    if isinstance(value, list):
        return [_tagged(v) for v in value]
    if isinstance(value, dict):
        if all(isinstance(k, str) for k in value):
            return {k: _tagged(v) for k, v in value.items()}
        return {"__items__": [[_tagged(k), _tagged(v)] for k, v in value.items()]}
    return value


def _untagged(obj: dict) -> Any:
    if set(obj) == {"__tuple__"}:
        return tuple(obj["__tuple__"])
    if set(obj) == {"__items__"}:
        return {(tuple(k) if isinstance(k, list) else k): v for k, v in obj["__items__"]}
    return obj


def encode_gold(name: str, config: dict, entry: dict) -> str:
    """The ``answer`` column: ``{"dataset", "config", "entry"}`` as JSON, the entry's tuples kept."""
    try:
        return json.dumps({"dataset": name, "config": config, "entry": _tagged(entry)})
    except TypeError as exc:
        raise DataError(f"reasoning-gym dataset '{name}' made an entry that cannot be stored: {exc}") from None


@dataclasses.dataclass(frozen=True)
class Gold:
    """A decoded ``answer`` value: the dataset's name, its config (as JSON, a cache key) and the entry."""

    name: str
    config: str
    entry: dict

    @property
    def oracle(self) -> str | None:
        answer = self.entry.get("answer")
        return None if answer is None else str(answer)


def decode_gold(gold: Any) -> Gold:
    """:class:`Gold` from an ``answer`` value (the JSON string, or its dict)."""
    try:
        data = json.loads(gold, object_hook=_untagged) if isinstance(gold, str) else gold
        return Gold(data["dataset"], json.dumps(data["config"], sort_keys=True), dict(data["entry"]))
    except (TypeError, KeyError, ValueError):
        raise DataError(f"reasoning_gym answer {str(gold)[:80]!r} must be the JSON this task writes: "
                        '{"dataset": NAME, "config": {...}, "entry": {...}}') from None


@functools.lru_cache(maxsize=64)
def _scorer(name: str, config: str):
    """The dataset object whose ``score_answer`` grades ``name`` under ``config`` (built once)."""
    return _factory().create_dataset(name, **json.loads(config))


# ---------------------------------------------------------------- rows


def _generate(spec: Spec, n: int, seed: int) -> tuple[dict, list[dict]]:
    config = {**spec.config, "seed": seed, "size": n}
    dataset = _factory().create_dataset(spec.name, **config)
    return config, [dataset[i] for i in range(n)]


def _training_questions(spec: Spec, n: int) -> frozenset[str]:  # its rows; under a curriculum every level's pool
    pools = [(spec.config, spec.seed)] if spec.curriculum is None else [(c, s) for _, c, s in level_pools(spec)]
    return frozenset().union(*(_questions(spec.name, json.dumps(c, sort_keys=True), s, n) for c, s in pools))


@functools.lru_cache(maxsize=32)
def _questions(name: str, config: str, seed: int, n: int) -> frozenset[str]:
    return frozenset(entry["question"] for entry in _generate(Spec(name, json.loads(config)), n, seed)[1])


def load_reasoning_gym(entries: list[dict], *, split: str = "train", system_prompt: str | None = SYSTEM_PROMPT,
                       num_synthetic: int = 512, limit: int | None = None, seed: int = 0):
    """Rows of the ``data.datasets`` mixture: ``prompt``, ``answer`` (:func:`encode_gold`), ``category``.

    ``split='train'`` generates each dataset's share of ``num_synthetic`` with its seed; any other split
    generates the share of ``limit`` (else ``num_synthetic``) with the seed plus
    :data:`HELD_OUT_SEED_OFFSET`, removes the questions that the training rows also hold, and says how
    many it removed. The datasets' rows are mixed in an order fixed by ``seed``.
    """
    import datasets

    specs = parse_specs(entries, seed)
    held_out = split != "train"
    total = limit if held_out and limit is not None else num_synthetic
    train_sizes = sizes(specs, num_synthetic)
    rows: list[dict] = []
    removed = made = unanswerable = 0
    slots = not held_out and any(s.curriculum is not None for s in specs)  # where a row sits in its pool
    for spec, n, n_train in zip(specs, sizes(specs, total), train_sizes):
        config, entries_made = _generate(spec, n, spec.seed + HELD_OUT_SEED_OFFSET if held_out else spec.seed)
        if held_out:
            seen = _training_questions(spec, n_train)
            made += len(entries_made)
            entries_made = [e for e in entries_made if e["question"] not in seen]
            removed += n - len(entries_made)
        kept = [e for e in entries_made if _gradable(spec.name, e)]
        unanswerable += len(entries_made) - len(kept)
        rows += [{"prompt": chat_prompt(e["question"], system_prompt), "answer": encode_gold(spec.name, config, e),
                  "category": spec.name, **({"curriculum_slot": j if spec.curriculum else -1} if slots else {})}
                 for j, e in enumerate(kept)]
    if unanswerable:
        print(f"reasoning_gym: {unanswerable} generated question(s) dropped: their own answer is one the grade refuses "
              "(a hedge, code, or sympy's unevaluated Integral)")
    if held_out:
        print(f"reasoning_gym: held-out split '{split}': {removed} of {made} generated questions are also in the "
              f"training rows and were removed; {len(rows)} left")
    random.Random(seed).shuffle(rows)
    if limit is not None:
        rows = rows[:limit]
    return datasets.Dataset.from_list(rows) if rows else datasets.Dataset.from_dict(
        {"prompt": [], "answer": [], "category": []})


#: gsm_symbolic's split for the gsm8k task: a question is held out when its CRC is divisible by this, so no
#: held-out question is a training question, whatever the sizes (its templates repeat questions: 2 of 200
#: drawn with seeds 0 and 1,000,000 were the same).
GSM_SYMBOLIC_HELD_OUT_EVERY = 4


def gsm_symbolic_problems(n: int, seed: int, *, split: str = "train") -> list[dict]:
    """``n`` of reasoning-gym's templated GSM8K problems as the gsm8k task's offline rows (``question``,
    ``answer`` as ``#### N``, ``category``): its ``data.subset: gsm_symbolic``, graded by its own grader.
    Training and held-out questions are told apart by :data:`GSM_SYMBOLIC_HELD_OUT_EVERY`."""
    import zlib

    held_out = split != "train"
    dataset = _factory().create_dataset("gsm_symbolic", seed=seed, size=n * 2 * GSM_SYMBOLIC_HELD_OUT_EVERY + 16)
    rows = []
    for i in range(len(dataset)):
        entry = dataset[i]
        if (zlib.crc32(entry["question"].encode()) % GSM_SYMBOLIC_HELD_OUT_EVERY == 0) == held_out:
            rows.append({"question": entry["question"], "answer": f"#### {entry['answer']}",
                         "category": "gsm_symbolic"})
            if len(rows) == n:
                return rows
    raise DataError(f"gsm_symbolic gave fewer than {n} {split} questions from seed {seed}")


# ---------------------------------------------------------------- grading


def _gradable(name: str, entry: dict) -> bool:
    """Whether the entry's own answer (when it has one) passes the grade's refusals: reasoning-gym writes a
    few that do not (intermediate_integration's ``Integral(...)`` where sympy found no antiderivative)."""
    oracle = entry.get("answer")
    return oracle is None or (hedge_refusal(str(oracle), str(oracle)) is None and not _code_in(name, str(oracle)))



def _same_text(a: str, b: str | None) -> bool:
    return b is not None and " ".join(a.split()).lower() == " ".join(b.split()).lower()


def grade(text: Any, gold: Any, *, tag: str | tuple[str, str] = "answer",
          ignore_inside: Sequence[str] = DEFAULT_IGNORE_INSIDE) -> Verdict:
    """Verdict on a whole completion against a reasoning-gym entry; right only on full marks.

    Rules: ``no_answer`` / ``several_answers`` / ``too_many_answers`` (the toolkit's extraction),
    ``too_long``, ``code`` (an answer a dataset's scorer would run: see :data:`PYTHON_EVAL`), a
    :func:`~unsloth_grpo.grading.hedge_refusal` rule (``hedge``, ``negation``, ``several_numbers``,
    ``many_candidates``), a check of :data:`EXTRA_CHECKS` (``wrong_numbers``), ``score_error``
    (``score_answer`` raised), then the dataset's
    ``score_answer``: ``score_answer`` (1.0, right), ``partial_credit`` (above 0 and below 1: wrong here)
    or ``mismatch`` (0). ``value`` is the score reasoning-gym gave (0 for a refused answer).
    """
    g = decode_gold(gold)
    region, source = find_answer(text, tag, ignore_inside=ignore_inside)
    if region is None:
        return Verdict("missing" if source == "no_answer" else "wrong", source)
    if len(region) > MAX_ANSWER_CHARS:
        return Verdict("wrong", "too_long", source, region[:200], 0.0)
    if _code_in(g.name, region):
        return Verdict("wrong", "code", source, region, 0.0)
    refused = hedge_refusal(region, g.oracle)
    if refused is not None:
        return Verdict("wrong", refused, source, region, 0.0)
    extra = EXTRA_CHECKS.get(g.name)
    if extra is not None and not extra[1](region, g.entry):
        return Verdict("wrong", extra[0], source, region, 0.0)
    if g.name in ORACLE_ONLY:
        score = 1.0 if _same_text(region, g.oracle) else 0.0
    else:
        try:
            score = float(_scorer(g.name, g.config).score_answer(region, g.entry))
        except Exception:  # noqa: BLE001 - a dataset's parser choking on model text is a wrong answer
            return Verdict("wrong", "score_error", source, region, 0.0)
    if score >= 1.0:
        return Verdict("correct", "score_answer", source, region, 1.0)
    return Verdict("wrong", "partial_credit" if score > 0 else "mismatch", source, region, score)


@register("reasoning_gym_correct", family="correctness", low=0.0, high=1.0)
def reasoning_gym_correct(*, reward: float = 1.0, tag: str | Sequence[str] = "answer") -> RewardFunc:
    """`reward` when the dataset's own score_answer gives full marks to the one committed answer; 0 otherwise.

    The gold ``answer`` column is the task's JSON (dataset, config, entry). Partial credit, a hedge and
    a list of candidates all score 0 (:func:`grade`).
    """
    key = tuple(tag) if not isinstance(tag, str) else tag
    tag_markers(key)  # a malformed tag fails here, not at the first training step

    def grader(completion: Any, gold: Any) -> Verdict:
        return grade(completion, gold, tag=key)

    def reward_fn(completions, answer=None, **kwargs) -> list[float | None]:
        if answer is None:
            raise ValueError("reasoning_gym_correct needs the 'answer' column (the reasoning_gym task's JSON)")
        golds = per_sample(answer, len(completions), "answer")
        return [reward if grader(t, g).correct else 0.0 for t, g in zip(texts(completions), golds)]

    reward_fn.grader = grader  # type: ignore[attr-defined]
    return reward_fn


# ---------------------------------------------------------------- the task


class ReasoningGym(Task):
    """A reasoning-gym dataset or mixture; graded by the dataset's score_answer at full marks only."""

    name = "reasoning_gym"
    system_prompt = SYSTEM_PROMPT
    default_rewards = DEFAULT_REWARDS
    grading_rewards = ("reasoning_gym_correct",)
    grade = staticmethod(grade)

    def harness_answer(self, row: dict) -> str | None:  # the oracle when it is a number: lm-eval's filters read those
        oracle = decode_gold(row["answer"]).oracle or ""
        return oracle if re.fullmatch(r"-?[0-9]+(\.[0-9]+)?", oracle.strip()) else None

    def read(self, cfg, system_prompt):
        d = cfg.data
        limit = d.limit if d.categories is None else None
        return load_reasoning_gym(self.datasets(cfg), split=d.split, system_prompt=system_prompt,
                                  num_synthetic=d.num_synthetic, limit=limit, seed=cfg.seed)

    def config_problems(self, cfg) -> list[str]:
        d = cfg.data
        out = [] if d.source == "synthetic" else [
            f"data.source='{d.source}': the reasoning_gym task generates its rows; set data.source: synthetic "
            "and list the datasets under data.datasets"]
        out += spec_problems(self.datasets(cfg))
        if any(isinstance(e, dict) and settings(e.get("curriculum")) for e in self.datasets(cfg)) and \
                Levels.grading_reward not in [r.name for r in cfg.rewards]:
            out.append(f"data.datasets: a curriculum judges groups by the {Levels.grading_reward} reward; "
                       "list it under rewards")
        return out

    def curriculum(self, cfg):
        """The levels of the datasets with ``curriculum`` set (:mod:`._reasoning_gym_levels`), or None."""
        specs = parse_specs(self.datasets(cfg), cfg.seed)
        if all(s.curriculum is None for s in specs):
            return None
        prompt = self.system_prompt if cfg.data.system_prompt is None else cfg.data.system_prompt

        def pool(spec: Spec, n: int, seed: int) -> list[dict]:
            config, entries = _generate(spec, n, seed)
            return [{"prompt": chat_prompt(e["question"], prompt), "answer": encode_gold(spec.name, config, e)}
                    for e in entries if _gradable(spec.name, e)]

        return Levels(specs, sizes(specs, cfg.data.num_synthetic), pool)

    def datasets(self, cfg) -> list:
        """``data.datasets``, or the default mixture when the config leaves it out."""
        return MIXTURE if cfg.data.datasets is None else cfg.data.datasets

    def gold_completion(self, row: dict) -> str | None:
        oracle = decode_gold(row["answer"]).oracle
        return None if oracle is None else reasoned_completion(oracle)

    def sft_examples(self, cfg, n: int):
        raise DataError("reasoning-gym ships no worked solutions to imitate: drop the sft stage for this task")


TASK = ReasoningGym()


# ---------------------------------------------------------------- recipe

#: The first line of ``python -m unsloth_grpo.recipes.reasoning_gym --help``.
RECIPE_DESCRIPTION = "reasoning-gym recipe: one of its generated datasets or a weighted mixture, graded strictly."

#: Two small arithmetic datasets, mixed evenly: the default and the smoke preset's mixture.
MIXTURE = [
    {"name": "chain_sum", "weight": 1.0, "config": {"min_terms": 2, "max_terms": 3, "max_digits": 2}},
    {"name": "leg_counting", "weight": 1.0, "config": {"max_animals": 3}},
]

DEFAULTS = {
    "task": "reasoning_gym",
    "output_dir": "outputs/reasoning_gym",
    "model": {"name": "unsloth/Qwen2.5-1.5B-Instruct-bnb-4bit", "max_seq_length": 1024, "load_in_4bit": True},
    "lora": {"r": 16, "alpha": 32},
    "data": {"source": "synthetic", "subset": None, "num_synthetic": 2048, "max_prompt_tokens": 512,
             "datasets": MIXTURE},
    "rewards": DEFAULT_REWARDS,
    "training": {"max_steps": 300},
}

PRESETS = {
    # Offline on CPU with the tiny random model: the answer tags carry the rising reward, and
    # reasoning_gym_correct is computed and logged beside it.
    "smoke": smoke_preset(
        output_dir="outputs/reasoning_gym-smoke",
        task_rewards=[{"name": "reasoning_gym_correct", "weight": 1.0}],
        data={"num_synthetic": 128},
    ),
    # The real built-in model (SmolLM2-135M-Instruct) on a CPU, from the base model: no warm-up, since
    # reasoning-gym ships no worked solutions to imitate. The prompt shows one answer in the format (told in
    # words alone, the base model uses the tags in none of its answers); GRPO pays the tags a little and the
    # dataset's own grade more (benchmarks/real_model_reasoning_gym.py, docs/reasoning-gym.md).
    REAL_MODEL_PRESET: real_model_preset(
        output_dir="outputs/reasoning_gym-smollm2",
        system_prompt=EXAMPLE_SYSTEM_PROMPT,
        # 30 steps draw 30 prompts: 64 rows leave most of chain_sum's 200 one-digit sums and differences held out
        data={"datasets": [{"name": "chain_sum", "config": {"min_terms": 2, "max_terms": 2, "max_digits": 1}}],
              "num_synthetic": 64},
        rewards=[{"name": "xml_count", "weight": 0.5}, {"name": "reasoning_gym_correct", "weight": 2.0}],
        evaluation={"before_after": True, "limit": 32, "batch_size": 32},
    ),
    # Colab T4 (16 GB, no bf16).
    "t4": {"model": {"dtype": "fp16"}},
}

RECIPE = Recipe("reasoning_gym", DEFAULTS, PRESETS, description=RECIPE_DESCRIPTION)
