"""The grader is the reward: strict answers, bounded cost, and one verdict for reward and evaluation.

Issue 14: a lax grader paid for hedges and negations, stalled on degenerate completions, and the
evaluation of a task could grade differently from its reward. These tests pin all three.
"""

from __future__ import annotations

import json
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from unsloth_grpo import grading
from unsloth_grpo.grading import grade, numbers_equal, read_answer
from unsloth_grpo.rewards import REGISTRY, build_reward_functions, get_reward
from unsloth_grpo.tasks import available_tasks, get_task


def fmt(answer: str) -> str:
    return f"<reasoning>\n6 * 3 = 18\n</reasoning>\n<answer>\n{answer}\n</answer>"


def cpu_ms(fn, *args, repeat: int = 3, **kwargs) -> float:
    """Best CPU time of ``repeat`` calls, in ms (CPU time, so a busy shared machine skews it little)."""
    best = float("inf")
    for _ in range(repeat):
        t0 = time.process_time()
        fn(*args, **kwargs)
        best = min(best, time.process_time() - t0)
    return 1000 * best


# --- the five cases of the issue ---------------------------------------------------------


@pytest.mark.parametrize("answer, gold", [("not 18", "18"), ("18 is wrong", "18"), ("minus 5", "5"),
                                          ("18 thousand", "18"), ("2(3)", "23")])
def test_the_five_cases_of_the_issue_are_not_equal(answer, gold):
    assert not numbers_equal(answer, gold)
    assert get_reward("correctness")([fmt(answer)], answer=[gold]) == [0.0]


def test_honest_forms_of_those_tricks_are_read_for_what_they_say():
    assert numbers_equal("minus 5", "-5")
    assert numbers_equal("18 thousand", "18000")
    assert numbers_equal("2 dozen", "24")


def test_eight_thousand_spaces_cost_well_under_a_millisecond():
    fn = get_reward("correctness")
    text = fmt("a" + " " * 8000 + "b")
    assert fn([text], answer=["18"]) == [0.0]
    assert cpu_ms(fn, [text], answer=["18"]) < 1.0
    assert cpu_ms(grade, text, "18") < 1.0


def test_twenty_thousand_digits_score_zero_without_raising():
    fn = get_reward("correctness", partial=[[0.5, 1.0]], unparseable=-1.0)
    huge = "9" * 20000
    assert fn([fmt(huge)], answer=["18"]) == [-1.0]  # not a number this grader reads
    assert get_reward("correctness")([fmt(huge)], answer=["18"]) == [0.0]
    assert read_answer(huge)[0] is None and read_answer("9" * 41)[2] == "huge_number"
    assert not numbers_equal("1" + "0" * 5000, "1" + "0" * 5000)  # both refused, so never equal
    assert cpu_ms(grade, fmt(huge), "18") < 1.0


# --- strict semantics ----------------------------------------------------------------------

ACCEPTED = [
    ("18", "18", "number"), ("$18", "18", "number"), ("\\$1,234.50", "1234.5", "number"),
    ("18.00", "18", "number"), ("18.", "18", "number"), ("**18**", "18", "number"), ("$18$", "18", "number"),
    ("18 dollars", "18", "number+unit"), ("18 years old", "18", "number+unit"),
    ("Answer: 18", "18", "label+number"), ("The final answer is $18.00.", "18", "label+number"),
    ("\\boxed{18}", "18", "boxed_answer+number"), ("The answer is \\boxed{18}.", "18", "boxed_answer+label+number"),
    ("\\frac{3}{4}", "0.75", "number"), ("3 1/2", "3.5", "number"), ("50%", "0.5", "number+percent"),
    ("50 percent", "50", "number+percent"), ("minus 5", "-5", "sign_word+number"),
    ("18 thousand", "18000", "number+scale"), ("1.5 million", "1500000", "number+scale"),
    ("5 + 13 = 18", "18", "equation+number"), ("Total = $18", "18", "equation+number"),
    ("37 / 40 = 92.5%", "92.5", "equation+number+percent"),
]


@pytest.mark.parametrize("answer, gold, rule", ACCEPTED)
def test_what_counts_and_the_rule_that_read_it(answer, gold, rule):
    verdict = grade(fmt(answer), gold)
    assert verdict.correct and verdict.rule == rule, verdict


REFUSED = [
    ("18 or 20", "hedge"), ("about 18", "hedge"), ("18 or so", "hedge"), ("at least 18", "hedge"),
    ("probably 18", "hedge"), ("My guess is 18", "hedge"), ("not 18", "negation"), ("18 is wrong", "negation"),
    ("The answer is not 18", "negation"), ("No, 18", "negation"), ("2(3)", "several_numbers"),
    ("18 - 1", "several_numbers"), ("18 apples and 2 pears", "several_numbers"), ("20 - 3 = 18", "wrong_expression"),
    ("I counted 18 apples", "not_a_number"), ("18 is the answer", "not_a_number"), ("eighteen", "not_a_number"),
    ("\u0661\u0668", "not_a_number"), ("\\boxed{17} or \\boxed{18}", "several_answers"),
]


@pytest.mark.parametrize("answer, rule", REFUSED)
def test_what_does_not_count_and_why(answer, rule):
    verdict = grade(fmt(answer), "18")
    assert not verdict.correct and verdict.status == "unparseable" and verdict.rule == rule, verdict


def test_several_blocks_nested_blocks_and_reasoning_only_answers_are_refused():
    assert grade("<answer>17</answer><answer>18</answer>", "18").rule == "several_answers"
    assert grade("<answer>18</answer> <answer> 18 </answer>", "18").correct
    assert not grade("<answer>17 <answer>18</answer>", "18").correct
    assert grade("<reasoning><answer>18</answer></reasoning>", "18").status == "missing"
    assert grade("<think>The answer is 18</think>", "18", fallback=True).status == "missing"


def test_module_docstring_states_the_rules():
    doc = grading.__doc__
    for heading in ("Where the answer is", "What counts as a number", "What does not", "Comparison", "Cost"):
        assert heading in doc
    assert set(grading.RULES) >= {"hedge", "negation", "several_answers", "several_numbers", "scale", "too_long"}


# --- one grader: reward and evaluation agree under every parameter of every task ----------

def _countdown_gold():
    from unsloth_grpo.tasks.countdown import encode_gold

    return encode_gold([3, 4, 2], 14)


#: task -> (recipe module, {reward: {parameter: non-default values}}, [(completion, gold)])
GSM8K_SAMPLES = [
    (fmt(a), g) for a, g in [("18", "18"), ("$18.00", "18"), ("17", "18"), ("19.5", "18"), ("lots", "18"),
                             ("not 18", "18"), ("\\sqrt{324}", "18"), ("Paris", "paris"), ("PARIS", "Paris")]
] + [
    ("no answer at all", "18"), ("The answer is 18", "18"), ("so \\boxed{18}", "18"), ("#### 18", "18"),
    ("<SOLUTION>18</SOLUTION>", "18"), ("<ans>18</ans>", "18"), ("<think><answer>18</answer></think>", "18"),
    ("<scratch><answer>18</answer></scratch>", "18"), ("<reasoning><answer>18</answer></reasoning>", "18"),
]
GSM8K_PARAMS = {
    "reward": [3.0], "wrong": [-1.0], "missing": [-2.0], "unparseable": [-4.5],
    "partial": [[[0.1, 1.0], [0.5, 0.5]]], "tag": ["SOLUTION", ["<ans>", "</ans>"]], "fallback": [True],
    "ignore_inside": [[], ["think"], [["<scratch>", "</scratch>"]]], "use_math_verify": [True],
}
EXACT_PARAMS = {"reward": [3.0], "wrong": [-1.0], "case_sensitive": [True], "tag": ["SOLUTION"],
                "fallback": [True], "ignore_inside": [[]]}
CASES = {
    "gsm8k": ({"correctness": GSM8K_PARAMS, "exact_match": EXACT_PARAMS}, GSM8K_SAMPLES),
    "gsm8k_tools": ({"correctness": GSM8K_PARAMS, "exact_match": EXACT_PARAMS}, GSM8K_SAMPLES),
    "countdown": (
        {"countdown_equation": {"reward": [3.0], "partial": [0.5, 0.0], "tag": ["SOLUTION", ["<ans>", "</ans>"]]}},
        "countdown",
    ),
    "json_extract": (
        {"json_extract_values": {"reward": [3.0], "tag": [None, "SOLUTION"]}},
        "json_extract",
    ),
    "custom": (
        {"qa_correctness": {"mode": ["numeric", "f1"], "reward": [3.0], "tag": ["SOLUTION"]},
         "correctness": GSM8K_PARAMS, "exact_match": EXACT_PARAMS},
        "custom",
    ),
    "arith": ({"arith_correct": {"reward": [3.0], "tag": ["SOLUTION", ["<ans>", "</ans>"]]}}, "arith"),
    "reasoning_gym": ({"reasoning_gym_correct": {"reward": [3.0], "tag": ["SOLUTION", ["<ans>", "</ans>"]]}},
                      "reasoning_gym"),
}


def _samples(task: str):
    if task in ("gsm8k", "gsm8k_tools", "custom"):
        extra = [(fmt("Finance team"), "finance team"), (fmt("the finance team"), "Finance team"),
                 (fmt("$1,200.00"), "1200"), ("<SOLUTION>finance team</SOLUTION>", "Finance team")]
        return GSM8K_SAMPLES + extra
    if task == "arith":
        bodies = ["132", " 0132 ", "131", "-132", "one hundred"]
        texts = [f"<{t}>{b}</{t.strip('<>')}>" for t in ("answer", "SOLUTION") for b in bodies]
        return [(t, "132") for t in texts + [f"<ans>{b}</ans>" for b in bodies] + ["132"]]
    if task == "reasoning_gym":
        pytest.importorskip("reasoning_gym", reason="the reasoning_gym extra: pip install 'unsloth-grpo[reasoning_gym]'")
        from unsloth_grpo.tasks.reasoning_gym import encode_gold

        gold = encode_gold("chain_sum", {"seed": 0, "size": 1}, {"question": "2 + 3 =", "answer": "5", "metadata": {}})
        bodies = ["5", "it is 5", "5 or 6", "6", "__import__('os')"]
        texts = [f"<{t}>{b}</{t}>" for t in ("answer", "SOLUTION") for b in bodies]
        return [(t, gold) for t in texts + [f"<ans>{b}</ans>" for b in bodies] + ["5"]]
    if task == "countdown":
        gold = _countdown_gold()
        bodies = ["(3 + 4) * 2", "(3 + 4) + 2", "3 * 3", "14", "__import__('os')"]
        texts = [f"<answer>{b}</answer>" for b in bodies] + [f"<SOLUTION>{b}</SOLUTION>" for b in bodies]
        texts += [f"<ans>{b}</ans>" for b in bodies] + ["<answer>(3 + 4) * 2</answer><answer>3 * 3</answer>", "none"]
        return [(t, gold) for t in texts]
    gold = json.dumps({"name": "Ada", "age": 36})
    bodies = ['{"name": "Ada", "age": 36}', '{"name": "ada", "age": 36.0}', '{"name": "Ada", "age": 36, "x": 1}',
              '{"name": "Ada"}', '{"name": "Ada", "age": "36"}', "not json"]
    texts = [f"<answer>{b}</answer>" for b in bodies] + [f"<SOLUTION>{b}</SOLUTION>" for b in bodies] + bodies
    return [(t, gold) for t in texts]


def _settings():
    for task, (rewards, _) in CASES.items():
        for name, params in rewards.items():
            yield task, name, {}
            for param, values in params.items():
                for value in values:
                    yield task, name, {param: value}


def test_the_agreement_test_covers_every_parameter_of_every_grading_reward():
    # every task whose grading reward pays a set amount (code's pays the share of tests passed)
    graded = [get_task(t) for t in available_tasks() if get_task(t).grading_rewards]
    assert set(CASES) == {t.name for t in graded if "reward" in REGISTRY[t.grading_rewards[0]].params}
    for task, (rewards, _) in CASES.items():
        graded_by = get_task(task).grading_rewards
        assert graded_by and set(graded_by) <= set(rewards), task
        for name in rewards:
            assert set(rewards[name]) == set(REGISTRY[name].params), (task, name)


@pytest.mark.parametrize("task, name, params", list(_settings()), ids=lambda x: json.dumps(x) if isinstance(x, dict) else x)
def test_reward_and_evaluation_agree_under_every_parameter(task, name, params):
    import importlib

    recipe = importlib.import_module(f"unsloth_grpo.recipes.{task}").RECIPE
    spec = {"name": name, "weight": 1.0, "params": params}
    cfg = recipe.resolve(overrides=[f"rewards={json.dumps([spec])}"])
    grader = get_task(task).grader(cfg)
    (reward_fn,), _ = build_reward_functions(cfg.rewards)  # wrapped, as training calls it
    full = params.get("reward", REGISTRY[name].params["reward"])
    samples = _samples(task)
    scores = reward_fn([c for c, _ in samples], answer=[g for _, g in samples])
    verdicts = [grader(c, g) for c, g in samples]
    paid = [s == full for s in scores]
    assert paid == [bool(v) for v in verdicts], [(c[-40:], g, s, v) for (c, g), s, v in zip(samples, scores, verdicts)]
    assert any(paid) and not all(paid)  # the samples separate right from wrong under this setting


@pytest.mark.parametrize("name, params", [
    ("correctness", {"wrong": 2.0}), ("correctness", {"partial": [[0.1, 2.0]]}), ("correctness", {"missing": 3.0}),
    ("exact_match", {"wrong": 2.0}), ("countdown_equation", {"partial": 1.0}),
])
def test_settings_that_pay_full_reward_for_a_wrong_answer_are_refused(name, params):
    with pytest.raises(ValueError, match="would earn as much as a right one"):
        get_reward(name, **params)


def test_evaluation_records_the_rule_that_decided():
    from unsloth_grpo.evaluation.evaluate import evaluate
    from unsloth_grpo.recipes.gsm8k import RECIPE
    from unsloth_grpo.tasks import gsm8k

    cfg = RECIPE.resolve(overrides=['rewards=[{"name": "correctness", "params": {"fallback": true}}]'])
    rows = [{"prompt": "q1", "answer": "18"}, {"prompt": "q2", "answer": "18"}]
    replies = {"q1": "The answer is 18", "q2": fmt("18 or 20")}

    def scripted(prompts, *, num_samples, **kwargs):
        return [[replies[p]] * num_samples for p in prompts]

    result = evaluate(None, None, rows, generate_fn=scripted, is_correct=gsm8k.TASK.grader(cfg))
    assert [r["correct"] for r in result["records"]] == [True, False]
    assert [r["grader_rule"] for r in result["records"]] == ["number", "hedge"]  # "The answer is" found it


# --- bounded cost: fuzzing ------------------------------------------------------------------

PIECES = [
    " ", "\n", "\t", "18", "9", "0", ",", ".", "-", "/", "%", "$", "=", "+", "(", ")", "{", "}", "\\", "#### ",
    "<answer>", "</answer>", "<reasoning>", "</reasoning>", "<think>", "</think>", "<SOLUTION>", "\\boxed{",
    "\\frac{1}{2}", "The answer is ", "answer: ", "not ", " or ", "thousand", "\u0661\u0668", "\uff11\uff18",
    "\U0001d7d9\U0001d7e0", "\u2212", "e9", "1e", "**", "`", "{,}", "é", "🙂",
]
COMPLETIONS = st.lists(
    st.tuples(st.one_of(st.sampled_from(PIECES), st.text(max_size=4)), st.integers(1, 8000)), min_size=1, max_size=6
).map(lambda parts: "".join(p * k for p, k in parts)[:32000])

FUZZED_REWARDS = [
    ("correctness", {}), ("correctness", {"fallback": True, "partial": [[0.1, 1.0]]}), ("exact_match", {"fallback": True}),
    ("integer_answer", {}), ("qa_correctness", {"mode": "f1"}), ("qa_correctness", {"mode": "numeric"}),
]


@settings(max_examples=150, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(text=COMPLETIONS, gold=st.sampled_from(["18", "0.5", "-5", "1000", "Paris", "1" * 60]))
def test_no_completion_up_to_32k_characters_raises_or_takes_a_millisecond(text, gold):
    for fallback in (False, True):
        verdict = grade(text, gold, fallback=fallback)
        assert verdict.status in ("correct", "wrong", "unparseable", "missing")
        assert verdict.rule.split("+")[0] in grading.RULES or verdict.rule in grading.RULES
        assert cpu_ms(grade, text, gold) < 1.0
    found = grading.extract_answer(text, fallback=True)
    if found is not None:
        assert cpu_ms(read_answer, found) < 1.0
    for name, params in FUZZED_REWARDS:
        fn = get_reward(name, **params)
        (score,) = fn([text], answer=[gold])
        assert score is None or isinstance(score, float)
        assert cpu_ms(fn, [text], answer=[gold]) < 1.0, name


# --- the reward lab shows which rule paid ---------------------------------------------------


def test_reward_lab_says_which_rule_paid_or_refused_each_completion():
    import io

    from rich.console import Console

    from unsloth_grpo.rewards.lab import analyse, print_report

    answers_ = ["18", "The answer is 18 dollars.", "not 18", "17 or 18", "18 thousand", "17"]
    records = [{"group": i // 3, "completion": fmt(a), "answer": "18"} for i, a in enumerate(answers_)]
    records.append({"group": 2, "completion": "<answer>17</answer><answer>18</answer>", "answer": "18"})
    funcs, weights = build_reward_functions([{"name": "correctness"}, {"name": "xml_count"}])
    report = analyse(records, funcs, weights)
    assert list(report.grading) == ["correctness"]  # xml_count decides nothing
    rules = [(e["paid"], e["rule"]) for e in report.grading["correctness"]]
    assert rules == [(True, "number"), (True, "label+number+unit"), (False, "negation"), (False, "hedge"),
                     (False, "number+scale+mismatch"), (False, "number+mismatch"), (False, "several_answers")]
    out = io.StringIO()
    print_report(report, Console(file=out, width=200))
    text = out.getvalue()
    assert "What correctness's grader paid (2 of 7), and why" in text
    for rule in ("label+number+unit", "negation", "hedge", "several_answers"):
        assert rule in text
    assert report.to_dict()["grading"]["correctness"][2]["answer"] == "not 18"


def test_the_grading_page_names_every_rule():
    from pathlib import Path

    page = (Path(__file__).parents[1] / "docs" / "grading.md").read_text()
    reading = {"tag", "boxed", "hashes", "answer_is", "same_text", "text", "math_verify", "mismatch", "label",
               "unit", "sign_word", "scale", "percent", "boxed_answer", "equation", "number", "no_answer",
               "too_many_answers"}
    missing = [rule for rule in grading.RULES if f"`{rule}" not in page and rule not in reading]
    assert missing == []


def test_grader_follows_the_last_stage_when_the_recipe_lists_its_rewards_per_stage():
    import dataclasses

    from unsloth_grpo.config import load_config
    from unsloth_grpo.recipes.gsm8k import RECIPE
    from unsloth_grpo.tasks import gsm8k

    d = dataclasses.asdict(RECIPE.resolve())
    d["rewards"] = [{"name": "xml_count"}]
    d["stages"] = [
        {"name": "format", "rewards": [{"name": "correctness", "params": {"tag": "ans"}}]},
        {"name": "solve", "rewards": [{"name": "correctness", "params": {"tag": "SOLUTION", "fallback": True}}]},
    ]
    grader = gsm8k.TASK.grader(load_config(d))
    assert grader("<SOLUTION>18</SOLUTION>", "18") and grader("so \\boxed{18}", "18")
    assert not grader("<ans>18</ans>", "18") and not grader(fmt("18"), "18")
