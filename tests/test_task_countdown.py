"""Countdown task: the safe checker, the reward on literal (and hostile) answers, the generator, the recipe."""

from __future__ import annotations

import json
import time
from fractions import Fraction
from pathlib import Path

import pytest

from unsloth_grpo.config import load_config
from unsloth_grpo.training.checks import config_problems
from unsloth_grpo.data import DataError
from unsloth_grpo.evaluation.evaluate import evaluate_task
from unsloth_grpo.recipes import countdown as recipe
from unsloth_grpo.rewards import build_reward_functions, get_reward
from unsloth_grpo.tasks import countdown
from unsloth_grpo.tasks.countdown import ExpressionError, check_equation, encode_gold, evaluate_expression

ROOT = Path(__file__).resolve().parents[1]
GOLD = encode_gold([3, 4, 2], 14)  # (3 + 4) * 2 = 14


def answer(expr: str) -> str:
    return f"<reasoning>\ntry things\n</reasoning>\n<answer>\n{expr}\n</answer>"


def score(*exprs: str) -> list[float]:
    fn = get_reward("countdown_equation")
    return fn([answer(e) for e in exprs], answer=[GOLD] * len(exprs))


# --- the checker --------------------------------------------------------------------------


def test_evaluates_exactly_with_fractions():
    assert evaluate_expression("(8 / 3) * 3") == (Fraction(8), [8, 3, 3], 2)
    assert evaluate_expression("1 / 3 + 1 / 3 + 1 / 3") == (Fraction(1), [1, 3, 1, 3, 1, 3], 5)
    assert evaluate_expression(" 44 + 19 + 35 = 98") == (Fraction(98), [44, 19, 35], 2)
    assert evaluate_expression("(3 + 4) \u00d7 2") == (Fraction(14), [3, 4, 2], 2)  # the multiplication sign
    assert evaluate_expression("12") == (Fraction(12), [12], 0)


@pytest.mark.parametrize("expr, reason", [
    ("4 / (3 - 3) * 2", "division by zero"),
    ("__import__('os').system('true')", "only digits"),
    ("2 ** 10", r"'\*\*' \(power\) is not allowed"),
    ("9 ** 9 ** 9 ** 9", r"'\*\*' \(power\) is not allowed"),
    ("7 // 2", "floor division"),
    ("-3 + 4 * 2", "a sign in front of a number"),
    ("3.0 + 4 * 2", "only digits"),
    ("0x10 + 2", "only digits"),
    ("1_0 + 4", "only digits"),
    ("3 + ", "not a well-formed expression"),
    ("(3 + 4", "not a well-formed expression"),
    ("03 + 4", "not a well-formed expression"),
    ("", "empty"),
    ("1 + " * 60 + "1", "longer than 200"),
])
def test_rejects_everything_but_plain_arithmetic(expr, reason):
    with pytest.raises(ExpressionError, match=reason):
        evaluate_expression(expr)


def test_hostile_answers_are_never_executed_and_stay_cheap(tmp_path):
    marker = tmp_path / "pwned"
    hostile = [
        f"open('{marker}', 'w').write('x')",
        f"__import__('pathlib').Path('{marker}').touch()",
        "(lambda: 3)() + 4 * 2",
        "[3, 4, 2]",
        "9 ** 9 ** 9 ** 9 ** 9",
        "99999999999 ** 99999999999",
        "(" * 95 + "3 + 4" + ")" * 95,
        "3 + 4 * 2; import os",
    ]
    start = time.perf_counter()
    verdicts = [check_equation(e, [3, 4, 2], 14) for e in hostile]
    assert time.perf_counter() - start < 0.5
    assert not marker.exists()
    # 95 nested parentheses are legal arithmetic, only with the wrong numbers
    assert verdicts == ["malformed"] * 6 + ["wrong_numbers", "malformed"]


# --- the reward, exact values ----------------------------------------------------------------


def test_reward_values_on_literal_answers():
    assert score(
        "(3 + 4) * 2",          # right
        "2 * (4 + 3) = 14",     # right, with the result written after it
        "(3 + 3) * 2",          # 3 used twice, 4 unused: a wrong but well-formed equation
        "(3 + 4) * 2 * 2",      # 2 used twice
        "3 + 4",                # 2 unused
        "(3 + 4) * 2 + 1",      # a number that was not given
        "3 + 4 + 2",            # every number once, misses the target
        "14",                   # a bare number is not an equation
        "4 / (3 - 3) * 2",      # division by zero
        "__import__('os')",     # code
        "2 ** 3 + 4 + 2",       # power
    ) == [1.0, 1.0, 0.1, 0.1, 0.1, 0.1, 0.1, 0.0, 0.0, 0.0, 0.0]


def test_reward_reads_only_the_final_answer_block():
    fn = countdown.countdown_equation(reward=2.0, partial=0.5)
    texts = [
        "<reasoning><answer>(3 + 4) * 2</answer></reasoning>",   # inside the reasoning: not an answer
        "(3 + 4) * 2",                                         # no answer block at all
        "<answer>3 + 4 + 2</answer> then <answer>(3 + 4) * 2</answer>",  # two answers: a hedge, never paid
        [{"role": "assistant", "content": answer("(4 + 3) * 2")}],        # TRL's chat completions
    ]
    assert fn(texts, answer=[GOLD] * 4) == [0.0, 0.0, 0.0, 2.0]


def test_reward_needs_the_answer_column():
    fn = get_reward("countdown_equation")
    with pytest.raises(ValueError, match="'answer' column"):
        fn([answer("(3 + 4) * 2")])
    with pytest.raises(DataError, match="must be JSON like"):
        fn([answer("(3 + 4) * 2")], answer=['{"target": 14}'])


def test_evaluation_and_reward_agree():
    texts = [answer(e) for e in ("(3 + 4) * 2", "3 + 4 + 2", "14", "nope")] + ["no tags"]
    rewards = get_reward("countdown_equation")(texts, answer=[GOLD] * len(texts))
    assert [countdown.TASK.grade(t, GOLD).correct for t in texts] == [r == 1.0 for r in rewards]
    assert [countdown.grade(t, GOLD).rule for t in texts] == ["correct", "wrong_value", "malformed", "malformed",
                                                              "missing"]


def test_reward_is_registered_with_a_range_and_builds_from_a_spec():
    funcs, weights = build_reward_functions([{"name": "countdown_equation", "weight": 2.0,
                                              "params": {"partial": 0.2}}])
    assert weights == [2.0]
    assert funcs[0].__name__ == "countdown_equation"
    assert funcs[0]([answer("3 + 4 + 2")], answer=[GOLD]) == [0.2]
    with pytest.raises(ValueError, match="no parameter"):
        get_reward("countdown_equation", partal=0.2)
    with pytest.raises(ValueError, match="give the bare name"):
        get_reward("countdown_equation", tag="<answer>")


def test_evaluate_grades_with_the_task_checker():
    ds = countdown.load_countdown("synthetic", "test", num_synthetic=4)
    replies = [answer(ds[0]["solution"]), answer("1 + 2"), "no answer", answer(ds[3]["solution"])]

    def scripted(prompts, *, num_samples, **kwargs):
        return [[replies[i]] * num_samples for i in range(len(prompts))]

    result = evaluate_task(countdown.TASK, None, None, ds, recipe.RECIPE.resolve(), generate_fn=scripted)
    assert result["n"] == 4 and result["accuracy"] == 0.5 and result["format_compliance"] == 0.75
    assert [r["correct"] for r in result["records"]] == [True, False, False, True]


# --- problems -----------------------------------------------------------------------------------


def test_every_generated_problem_is_solved_by_its_solution():
    problems = countdown.make_problems(400, seed=3)
    for p in problems:
        assert check_equation(p["solution"], p["numbers"], p["target"]) == "correct", p
        assert 3 <= len(p["numbers"]) <= 4 and all(1 <= n <= 99 for n in p["numbers"])
        assert 1 <= p["target"] <= 100
        assert json.loads(p["answer"]) == {"numbers": p["numbers"], "target": p["target"]}
        assert f"{p['numbers']}" in p["question"] and f"equals {p['target']}." in p["question"]
        assert countdown.TASK.grade(answer(p["solution"]), p["answer"])
    assert {len(p["numbers"]) for p in problems} == {3, 4}


def test_problems_are_deterministic_per_seed():
    assert countdown.make_problems(5, seed=1) == countdown.make_problems(5, seed=1)
    assert countdown.make_problems(5, seed=1) != countdown.make_problems(5, seed=2)
    with pytest.raises(DataError, match="at least one"):
        countdown.make_problems(0)


def test_loader_synthetic_splits_and_columns():
    train = countdown.load_countdown("synthetic", num_synthetic=6, seed=0)
    test = countdown.load_countdown("synthetic", "test", num_synthetic=6, seed=0)
    assert train.column_names == ["prompt", "answer", "solution"]
    assert len(train) == 6 and train["answer"] != test["answer"]
    system, user = train[0]["prompt"]
    assert system == {"role": "system", "content": countdown.SYSTEM_PROMPT}
    assert user["role"] == "user" and "write an equation that equals" in user["content"]
    assert len(countdown.load_countdown("synthetic", num_synthetic=6, limit=2)) == 2


def test_loader_reads_tinyzero_shaped_files(tmp_path):
    path = tmp_path / "cd.jsonl"
    path.write_text('{"nums": [3, 4, 2], "target": 14}\n{"nums": [10, 5], "target": 2}\n')
    ds = countdown.load_countdown(str(path))
    assert ds["answer"] == [GOLD, encode_gold([10, 5], 2)]
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"nums": [3], "target": 3}\n')
    with pytest.raises(DataError, match=r"line 1: needs at least two numbers"):
        countdown.load_countdown(str(bad))
    wrong = tmp_path / "wrong.jsonl"
    wrong.write_text('{"numbers_list": [3, 4], "goal": 7}\n')
    with pytest.raises(DataError, match="needs a 'target' column"):
        countdown.load_countdown(str(wrong))


# --- recipe -------------------------------------------------------------------------------------


def test_recipe_config_and_yaml_match():
    assert load_config(ROOT / "recipes" / "countdown.yaml") == recipe.RECIPE.resolve()
    smoke = recipe.RECIPE.resolve(preset="smoke")
    assert config_problems(smoke) == []
    assert smoke.model.name == "builtin:tiny" and smoke.task == "countdown"
    assert [r.name for r in smoke.rewards] == ["xml_count", "countdown_equation"]


def test_grader_follows_the_configured_tag():
    cfg = recipe.RECIPE.resolve(overrides=["rewards=[{name: countdown_equation, params: {tag: SOLUTION}}]"])
    grader = countdown.TASK.grader(cfg)
    assert grader("<SOLUTION>(3 + 4) * 2</SOLUTION>", GOLD)
    assert not grader(answer("(3 + 4) * 2"), GOLD)


def test_check_loads_the_smoke_data(capsys):
    assert recipe.main(["--preset", "smoke", "--check"]) == 0
    assert "config and data OK: 256 training rows" in capsys.readouterr().out


#: The smoke preset's rise (last 5 steps minus first 5, seed 0, transformers): how it was chosen in
#: docs/development.md (measured on two machines; the smallest rise of the three recipes was 0.200).
MIN_SMOKE_RISE = 0.1


@pytest.mark.slow
def test_smoke_preset_reward_rises(tmp_path):
    out = tmp_path / "run"
    assert recipe.main(["--preset", "smoke", "--output-dir", str(out), "model.backend=transformers"]) == 0
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert len(rows) == 40
    assert all("rewards/countdown_equation/mean" in r for r in rows)
    first = sum(r["reward"] for r in rows[:5]) / 5
    last = sum(r["reward"] for r in rows[-5:]) / 5
    # seed 0 rose 0.24-0.45 across machines, once by only 0.2001 (docs/development.md): half the smallest
    assert last > first + MIN_SMOKE_RISE, (first, last)
