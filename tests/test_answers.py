"""Answer extraction and numeric equivalence (unsloth_grpo.grading), on literal strings."""

from __future__ import annotations

import doctest
import importlib
import pkgutil
from fractions import Fraction

import pytest

from unsloth_grpo import grading
from unsloth_grpo.grading import (
    answers_match,
    completion_text,
    extract_answer,
    extract_tag,
    is_correct,
    matches_format,
    numbers_equal,
    parse_number,
)


@pytest.mark.parametrize(
    "text, expected",
    [
        ("18", Fraction(18)),
        ("$18", Fraction(18)),
        ("\\$18", Fraction(18)),
        ("18.00", Fraction(18)),
        ("1,000", Fraction(1000)),
        ("1,234,567", Fraction(1234567)),
        ("$1,234.50", Fraction(246900, 200)),
        ("18 dollars", Fraction(18)),
        ("18 apples.", Fraction(18)),
        ("18.", Fraction(18)),
        ("\\boxed{18}", Fraction(18)),
        ("\\boxed{\\frac{1}{2}}", Fraction(1, 2)),
        ("\\frac{3}{4}", Fraction(3, 4)),
        ("\\dfrac{3}{4}", Fraction(3, 4)),
        ("3/4", Fraction(3, 4)),
        ("3 1/2", Fraction(7, 2)),
        ("0.75", Fraction(3, 4)),
        (".5", Fraction(1, 2)),
        ("-5", Fraction(-5)),
        ("\u22125", Fraction(-5)),
        ("-$5", Fraction(-5)),
        ("50%", Fraction(50)),
        ("50\\%", Fraction(50)),
        ("1e3", Fraction(1000)),
        ("5 + 13 = 18", Fraction(18)),
        ("x = 18", Fraction(18)),
        ("18 \\text{ dollars}", Fraction(18)),
        ("1{,}000", Fraction(1000)),
        ("  42  ", Fraction(42)),
        ("**18**", Fraction(18)),
        ("`18`", Fraction(18)),
        ("Answer: 18", Fraction(18)),
        (" 7 ", Fraction(7)),
    ],
)
def test_parse_number_surface_forms(text, expected):
    assert parse_number(text) == expected


@pytest.mark.parametrize(
    "text", ["", "abc", "12 and 13", "1,5", "1/0", "eighteen", "$", "-", "x^2", "2 * 9", "1 + 1"]
)
def test_parse_number_rejects_non_numbers_and_ambiguous_text(text):
    assert parse_number(text) is None


def test_parse_number_non_strings():
    assert parse_number(5) == Fraction(5)
    assert parse_number(2.5) == 2.5
    assert parse_number(float("nan")) is None
    assert parse_number(None) is None
    assert parse_number(True) is None


@pytest.mark.parametrize(
    "a, b",
    [
        ("$18", "18"),
        ("18.00", "18"),
        ("1,000", "1000"),
        ("18 dollars", "18"),
        ("18.", "18"),
        ("\\boxed{18}", "18"),
        ("3/4", "0.75"),
        ("-5", "-5.0"),
        ("50%", "50"),
        ("50%", "0.5"),
        ("0.5", "50%"),
        ("50 percent", "0.5"),
        (18, "18"),
        (0.1 + 0.2, "0.3"),
    ],
)
def test_numbers_equal(a, b):
    assert numbers_equal(a, b)
    assert numbers_equal(b, a)


@pytest.mark.parametrize(
    "a, b",
    [("17", "18"), ("-5", "5"), ("0.75", "3/5"), ("50%", "5"), ("4800%", "48"), ("200%", "2"), ("abc", "abc"), ("18", None)],
)
def test_numbers_not_equal(a, b):
    assert not numbers_equal(a, b)


def test_several_answer_blocks_must_agree():
    text = "<reasoning>r</reasoning><answer>5</answer> then <answer> 7 </answer>"
    assert extract_answer(text) is None
    assert grading.find_answer(text) == (None, "several_answers")
    assert extract_answer("<answer>7</answer> so <answer> 7 </answer>") == "7"


def test_answer_inside_reasoning_does_not_count():
    inside_only = "<reasoning>maybe <answer>5</answer> no</reasoning>"
    assert extract_answer(inside_only) is None
    assert not is_correct(inside_only, "5")
    both = "<reasoning>maybe <answer>5</answer></reasoning>\n<answer>6</answer>"
    assert extract_answer(both) == "6"
    unclosed = "<reasoning>thinking <answer>5</answer>"
    assert extract_answer(unclosed) is None
    # ...unless the caller allows it
    assert extract_answer(inside_only, ignore_inside=()) == "5"


def test_extract_answer_unclosed_or_missing_tag():
    assert extract_answer("<answer>5") is None
    assert extract_answer("5</answer>") is None
    assert extract_answer("no tags at all 5") is None


def test_extract_answer_configurable_tags():
    assert extract_answer("<SOLUTION>42</SOLUTION>", "SOLUTION") == "42"
    assert extract_answer("<think>x<answer>1</answer></think><answer>2</answer>") == "2"
    pair = ("<start_working_out>", "<end_working_out>")
    text = "<start_working_out>a<SOLUTION>1</SOLUTION><end_working_out><SOLUTION>3</SOLUTION>"
    assert extract_answer(text, "SOLUTION", ignore_inside=[pair]) == "3"
    assert extract_tag("<a>x</a><b>y</b>", ("<b>", "</b>")) == "y"
    with pytest.raises(ValueError, match="bare name"):
        extract_answer("x", "<answer>")


@pytest.mark.parametrize(
    "text, expected",
    [
        ("so it is \\boxed{\\frac{1}{2}} and \\boxed{\\frac{1}{2}}", "\\frac{1}{2}"),
        ("so it is \\boxed{18} and \\boxed{\\frac{1}{2}}", None),  # two different answers
        ("6 * 3 = 18\n#### 18", "18"),
        ("The answer is 42.", "42."),
        ("Final answer: $7", "$7"),
        ("I have 3 apples and 4 pears", None),  # no "last number in the text" fallback
        ("nothing numeric", None),
    ],
)
def test_extract_answer_fallbacks(text, expected):
    assert extract_answer(text, fallback=True) == expected
    assert extract_answer(text) is None


def test_an_answer_sentence_ends_at_its_stop_when_the_line_goes_on_without_numbers():
    """Seen in SmolLM2-135M-Instruct's completions: the line goes on after the answer sentence. The
    fallback read the whole line ("60. Please refer to the math word problem.") as unreadable."""
    real = "14 * 4 = 60\nThe answer is 60. Please refer to the math word problem.\n\nReasoning: 14 books"
    assert extract_answer(real, fallback=True) == "60."
    assert grading.grade(real, "60", fallback=True).correct
    # another number after the stop is still a second number, never a free pick
    assert not grading.grade("The answer is 60. Bob keeps 56.", "60", fallback=True).correct
    assert extract_answer("The answer is 2.5 apples.", fallback=True) == "2.5 apples."
    assert extract_answer("The answer is $1,000.00 in total", fallback=True) == "$1,000.00 in total"


def test_fallbacks_ignore_the_reasoning():
    text = "<reasoning>maybe \\boxed{17}</reasoning> so \\boxed{18}"
    assert extract_answer(text, fallback=True) == "18"
    assert extract_answer("<think>#### 18</think>", fallback=True) is None


def test_tag_wins_over_fallbacks():
    assert extract_answer("#### 3 <answer>4</answer>", fallback=True) == "4"


def test_is_correct():
    good = "<reasoning>6 * 3 = 18</reasoning>\n<answer>$18.00</answer>"
    assert is_correct(good, "18")
    assert not is_correct(good, "17")
    assert is_correct("<reasoning>r</reasoning><answer>Paris</answer>", "paris")
    assert not is_correct("<reasoning>r</reasoning><answer>Lyon</answer>", "Paris")
    # a gold number needs a numeric prediction
    assert not is_correct("<answer>eighteen</answer>", "18")
    assert is_correct("The answer is 18", "18", fallback=True)
    assert not is_correct("The answer is 18", "18")


def test_answers_match_non_string_gold():
    assert answers_match("18", 18)
    assert not answers_match(None, "18")
    assert not answers_match("18", None)


def test_math_verify_is_optional():
    try:
        import math_verify  # noqa: F401
    except ImportError:
        with pytest.raises(ImportError, match="math-verify"):
            answers_match("x^2", "x**2", use_math_verify=True)
    else:  # pragma: no cover - only where the extra is installed
        assert answers_match("\\frac{1}{2}x", "x/2", use_math_verify=True)


@pytest.mark.parametrize(
    "text, expected",
    [
        ("<reasoning>\n6*3\n</reasoning>\n<answer>\n18\n</answer>\n", True),
        ("<reasoning>6*3</reasoning><answer>18</answer>", True),
        ("  <reasoning>6*3</reasoning>  <answer>18</answer>  ", True),
        ("Sure! <reasoning>6*3</reasoning><answer>18</answer>", False),
        ("<reasoning>6*3</reasoning><answer>18</answer> done", False),
        ("<reasoning> </reasoning><answer>18</answer>", False),
        ("<reasoning>a</reasoning><answer></answer>", False),
        ("<answer>18</answer><reasoning>6*3</reasoning>", False),
        ("<reasoning>a</reasoning><reasoning>b</reasoning><answer>18</answer>", False),
        ("<reasoning>a</reasoning>x<answer>18</answer>", False),
    ],
)
def test_matches_format(text, expected):
    assert matches_format(text) is expected


def test_matches_format_other_tags_and_chat_messages():
    assert matches_format("<think>a</think><SOLUTION>1</SOLUTION>", reasoning_tag="think", answer_tag="SOLUTION")
    chat = [{"role": "assistant", "content": "<reasoning>a</reasoning><answer>1</answer>"}]
    assert matches_format(chat)


def test_completion_text_shapes():
    assert completion_text("plain") == "plain"
    assert completion_text([{"role": "assistant", "content": "hi"}]) == "hi"
    assert completion_text([{"role": "assistant", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}]) == "ab"
    assert completion_text({"role": "assistant", "content": "x"}) == "x"
    with pytest.raises(TypeError, match="chat messages"):
        completion_text(42)


def test_module_doctests():
    modules = [grading] + [importlib.import_module(f"unsloth_grpo.grading.{m.name}")
                           for m in pkgutil.iter_modules(grading.__path__)]
    results = [doctest.testmod(module) for module in modules]
    assert [r.failed for r in results] == [0] * len(modules)
    assert sum(r.attempted for r in results) >= 14  # the examples did not get lost in the split


# ---------------------------------------------------------------- lenient (evaluation only)


@pytest.mark.parametrize(
    "text, expected",
    [
        # lm-evaluation-harness's flexible extraction: the last number anywhere, tags or not
        ("<reasoning>3 + 15 = 18</reasoning><answer>18</answer>", "18"),
        ("so Ann has 18 apples.", "18"),
        ("The answer is $1,200.", "1200"),
        ("-7 degrees", "-7"),
        ("18 apples, found in 2 steps", "2"),  # a stray number at the end is what it reads
        ("18 apples ...", ".."),  # the lone ellipsis is the last match, and no number
        ("no digits here", None),
        ([{"role": "assistant", "content": "it is 42"}], "42"),  # a chat completion, as TRL passes it
    ],
)
def test_lenient_answer_is_the_last_number_anywhere(text, expected):
    assert grading.lenient_answer(text) == expected


def test_lenient_counts_a_right_answer_out_of_format_and_strict_does_not():
    text = "Ann has 3 + 15 = 18 apples."
    assert not grading.grade(text, "18").correct
    verdict = grading.lenient(text, "18")
    assert verdict.correct and verdict.source == "lenient" and verdict.answer == "18"
    assert grading.lenient("<answer>0049</answer>", "49").correct  # numbers compare as the grader compares them
    assert grading.lenient("18.00", "18").correct
    assert grading.lenient("18 or 20", "18").status == "wrong"  # the last number, 20
    assert grading.lenient("nothing", "18").status == "missing"
    assert grading.lenient("18 apples ...", "18").status == "wrong"
    assert "lenient" in grading.RULES


@pytest.mark.parametrize("name, params", [("correctness", {}), ("exact_match", {}), ("arith_correct", {}),
                                          ("qa_correctness", {"mode": "numeric"})])
def test_no_numeric_reward_pays_what_only_lenient_grading_accepts(name, params):
    """Lenient grading is gamed by ending with a list of numbers; the rewards stay strict."""
    from unsloth_grpo.rewards import get_reward

    gamed = "<reasoning>maybe 16, 17, 19</reasoning><answer>0</answer> 18"
    assert grading.lenient(gamed, "18").correct and not grading.grade(gamed, "18").correct
    gamed_score, right_score = get_reward(name, **params)([gamed, "<answer>18</answer>"], answer=["18", "18"])
    assert gamed_score == 0.0 < right_score
