"""worked_calculation: a reward for the calculation written out, grounded in the question's numbers (issue 52).

Scripted cases, then the real completions of issue 52's benchmark (docs/real_model_results_everyday.json):
the GRPO arm's copied quantities and its right answers written with the wrong calculation are not paid.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from unsloth_grpo.grading.calculations import answer_is_worked, worked_calculations
from unsloth_grpo.grading.copying import copied_quantity
from unsloth_grpo.rewards import get_reward
from unsloth_grpo.rewards.calling import call_reward

ROOT = Path(__file__).resolve().parents[1]
QUESTION = "Nadia read for 6 minutes before lunch and 9 minutes after lunch. How long did she read in all?"


def _prompt(question: str) -> list[dict]:
    return [{"role": "system", "content": "Example: 2 + 3 = 5"}, {"role": "user", "content": question}]


def _score(completions: list[str], question: str = QUESTION, **params) -> list[float]:
    fn = get_reward("worked_calculation", **params)
    chat = [[{"role": "assistant", "content": c}] for c in completions]
    return call_reward(fn, chat, prompts=[_prompt(question)] * len(completions))


@pytest.mark.parametrize("completion, paid", [
    ("<reasoning>\n6 + 9 = 15\n</reasoning>\n<answer>\n15\n</answer>", True),
    ("<reasoning>6 minutes + 9 minutes = 15 minutes</reasoning><answer>15 minutes</answer>", True),
    ("<reasoning>9 + 6 = 15</reasoning><answer>15</answer>", True),
    # the shortcut of issue 52: a quantity of the question, nothing calculated
    ("<reasoning>\n6 minutes\n</reasoning>\n<answer>\n6\n</answer>", False),
    # an arithmetic slip, and a right sum that is not the answer given
    ("<reasoning>6 + 9 = 14</reasoning><answer>14</answer>", False),
    ("<reasoning>6 + 9 = 15</reasoning><answer>16</answer>", False),
    # right arithmetic on numbers the question does not hold
    ("<reasoning>1 + 5 = 6</reasoning><answer>6</answer>", False),
    # the calculation alone, or an answer with no calculation at all
    ("<reasoning>6 + 9 = 15</reasoning>", False),
    ("<answer>15</answer>", False),
    # the wrong operation done right is paid: correctness, beside it, is what pays the right one
    ("<reasoning>9 - 6 = 3</reasoning><answer>3</answer>", True),
])
def test_pays_a_right_calculation_on_the_questions_numbers_whose_result_is_the_answer(completion, paid):
    assert _score([completion]) == [0.5 if paid else 0.0]


def test_an_earlier_result_may_be_an_operand_and_thousands_are_read():
    question = "A shop had 3 boxes of 1,200 nails and sold 500 nails. How many nails are left?"
    worked = "<reasoning>3 * 1,200 = 3,600\n3,600 - 500 = 3,100</reasoning><answer>3,100</answer>"
    assert _score([worked], question) == [0.5]
    # the second step's 3,600 is known only because the first step is right
    slipped = "<reasoning>3 * 1,200 = 3,500\n3,500 - 500 = 3,000</reasoning><answer>3,000</answer>"
    assert _score([slipped], question) == [0.0]
    assert [c.right for c in worked_calculations(slipped, question)] == [False, True]
    assert [c.grounded for c in worked_calculations(slipped, question)] == [True, False]


def test_from_question_off_pays_any_right_calculation_and_no_prompt_is_needed():
    fn = get_reward("worked_calculation", from_question=False)
    assert fn(["<reasoning>1 + 5 = 6</reasoning><answer>6</answer>"]) == [0.5]


def test_a_question_column_is_read_before_the_prompt_and_no_question_is_a_clear_error():
    fn = get_reward("worked_calculation", reward=1.0)
    text = "<reasoning>6 + 9 = 15</reasoning><answer>15</answer>"
    assert fn([text], question=[QUESTION], prompts=[_prompt("Nothing here.")]) == [1.0]
    with pytest.raises(ValueError, match="needs the questions"):
        fn([text])


def test_a_question_with_the_system_prompts_numbers_does_not_ground_them():
    # the system prompt's worked example is not the question: its 2 and 3 do not make "2 + 3 = 5" worked
    assert _score(["<reasoning>2 + 3 = 5</reasoning><answer>5</answer>"]) == [0.0]


def test_on_the_real_runs_copies_and_wrong_workings_are_not_paid_and_the_warm_ups_right_answers_are():
    results = json.loads((ROOT / "docs/real_model_results_everyday.json").read_text())
    copies, right_but_unworked, sft_right, sft_right_worked = 0, [], 0, 0
    for run in results["runs"]:
        for arm, sets in run["grades"].items():
            for graded in sets.values():
                for row in graded["completions"]:
                    worked = answer_is_worked(row["completion"], row["question"])
                    if copied_quantity(row["completion"], row["question"], row["gold"]) is not None:
                        copies += 1
                        assert not worked, row
                    if arm in ("sft", "sft_only") and row["correct"]:
                        sft_right += 1
                        sft_right_worked += worked
                    if arm == "grpo" and row["correct"] and not worked:
                        right_but_unworked.append(row["completion"])
    assert copies >= 8                                  # the GRPO arm's copied quantities (issue 52)
    assert sft_right > 500 and sft_right_worked == sft_right  # every right answer of the SFT arms is worked
    # GRPO's right answers that correctness pays and this reward does not: "18 + 5 = 13", answered 13
    assert right_but_unworked and all("18 + 5 = 13" in c for c in right_but_unworked)


@pytest.mark.parametrize("completion, paid", [
    ("<reasoning>6 + 9 = 15</reasoning><answer>15</answer>", True),
    ("<reasoning>6 + 9 = 14</reasoning><answer>14</answer>", True),      # a slip: the answer follows it
    ("<reasoning>6 + 9 = 14\n14 + 1 = 15</reasoning><answer>15</answer>", False),  # 1 is not the question's
    ("<reasoning>6 + 9 = 14\n14 - 6 = 8</reasoning><answer>8</answer>", True),    # an earlier stated result
    ("<reasoning>\n6 minutes\n</reasoning>\n<answer>\n6\n</answer>", False),
    ("<reasoning>6 + 9 = 14</reasoning><answer>15</answer>", False),
])
def test_with_arithmetic_off_only_an_answer_no_calculation_leads_to_goes_unpaid(completion, paid):
    assert _score([completion], arithmetic=False) == [0.5 if paid else 0.0]
