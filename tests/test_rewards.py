"""Reward library: exact values on literal completions, registry, wrapper, catalogue."""

from __future__ import annotations

import doctest
import importlib
import json
import subprocess
import sys
import types

import pytest

from conftest import load_script
from unsloth_grpo import rewards
from unsloth_grpo.rewards import (
    REGISTRY,
    RewardError,
    available_rewards,
    build_reward_functions,
    catalogue_markdown,
    get_reward,
    reward_metrics,
)

GOOD = "<reasoning>\n6 * 3 = 18\n</reasoning>\n<answer>\n18\n</answer>\n"


def chat(text: str) -> list[dict]:
    return [{"role": "assistant", "content": text}]


def fmt(answer: str, reasoning: str = "6 * 3 = 18") -> str:
    return f"<reasoning>\n{reasoning}\n</reasoning>\n<answer>\n{answer}\n</answer>"


# --- registry ---------------------------------------------------------------------------


def test_available_rewards_lists_the_registry():
    names = available_rewards()
    assert names == sorted(REGISTRY)
    for basic in ("correctness", "integer_answer", "strict_format", "soft_format", "xml_count"):
        assert basic in names


@pytest.mark.parametrize("name", sorted(REGISTRY))
def test_every_reward_has_metadata_and_the_name_as_dunder_name(name):
    info = REGISTRY[name]
    assert info.summary, f"{name} has no docstring"
    assert info.low <= info.high
    required = {
        "overlong": {"max_length": 512},
        "phrase_penalty": {"phrases": ["x"]},
        "json_keys": {"required": ["a"]},
        "json_schema": {"schema": {"type": "object"}},
    }
    if name == "json_schema":
        pytest.importorskip("jsonschema")
    fn = get_reward(name, **required.get(name, {}))
    assert fn.__name__ == name


def test_unknown_reward_lists_valid_names_and_suggests():
    with pytest.raises(ValueError) as err:
        get_reward("corectness")
    message = str(err.value)
    assert "Did you mean 'correctness'" in message
    for name in available_rewards():
        assert name in message
    assert "mypkg.rewards:my_reward" in message


def _my_reward(completions, **kwargs):
    return [0.0] * len(completions)


def test_a_function_given_for_a_name_is_told_its_import_path():
    with pytest.raises(ValueError, match=r"takes a reward's name, not the function itself: name yours by its import "
                                         r"path, 'module:function' \(here 'test_rewards:_my_reward'"):
        get_reward(_my_reward)


def test_unknown_parameter_names_the_accepted_ones():
    with pytest.raises(ValueError, match=r"no parameter\(s\) rewrd.*reward \(default 2.0\)"):
        get_reward("correctness", rewrd=1.0)


def test_bad_parameter_value_is_reported():
    with pytest.raises(ValueError, match="partial entry"):
        get_reward("correctness", partial=[[0.1]])


def test_custom_reward_by_import_path(tmp_path, monkeypatch):
    module = tmp_path / "my_rewards_mod.py"
    module.write_text(
        "def shout(completions, bonus=1.0, **kw):\n"
        "    return [bonus if c.isupper() else 0.0 for c in completions]\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    importlib.invalidate_caches()
    fn = get_reward("my_rewards_mod:shout")
    assert fn.__name__ == "shout"
    assert fn(["HI", "hi"]) == [1.0, 0.0]
    fn2 = get_reward("my_rewards_mod.shout", bonus=3.0)
    assert fn2.__name__ == "shout"
    assert fn2(["HI", "hi"]) == [3.0, 0.0]
    with pytest.raises(ValueError, match="has no attribute 'nope'"):
        get_reward("my_rewards_mod:nope")
    with pytest.raises(ValueError, match="cannot import module 'no_such_module_xyz'"):
        get_reward("no_such_module_xyz:f")


# --- correctness -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "answer, expected",
    [
        ("18", 2.0),
        ("$18", 2.0),
        ("18.00", 2.0),
        ("18 dollars", 2.0),
        ("18.", 2.0),
        ("\\boxed{18}", 2.0),
        ("$18.00", 2.0),
        ("6 * 3 = 18", 2.0),
        ("17", 0.0),
        ("-18", 0.0),
        ("180", 0.0),
        ("eighteen", 0.0),
        ("", 0.0),
    ],
)
def test_correctness_surface_forms(answer, expected):
    fn = get_reward("correctness")
    assert fn([fmt(answer)], answer=["18"]) == [expected]
    assert fn([chat(fmt(answer))], answer=["18"]) == [expected]


@pytest.mark.parametrize(
    "answer, gold, expected",
    [
        ("1,000", "1000", 2.0),
        ("1000", "1,000", 2.0),
        ("3/4", "0.75", 2.0),
        ("0.75", "3/4", 2.0),
        ("-5", "-5", 2.0),
        ("5", "-5", 0.0),
        ("50%", "50", 2.0),
        ("50%", "0.5", 2.0),
        ("12.5", "12.50", 2.0),
        ("Paris", "paris", 2.0),
        ("Lyon", "Paris", 0.0),
    ],
)
def test_correctness_numeric_equivalence(answer, gold, expected):
    assert get_reward("correctness")([fmt(answer)], answer=[gold]) == [expected]


def test_correctness_requires_the_final_answer_tag():
    fn = get_reward("correctness")
    inside = "<reasoning>\nI guess <answer>18</answer> at first\n</reasoning>\n"
    assert fn([inside], answer=["18"]) == [0.0]
    wrong_final = "<reasoning>\n<answer>18</answer>\n</reasoning>\n<answer>17</answer>"
    assert fn([wrong_final], answer=["18"]) == [0.0]
    right_final = "<reasoning>\n<answer>17</answer>\n</reasoning>\n<answer>18</answer>"
    assert fn([right_final], answer=["18"]) == [2.0]
    assert fn(["the answer is 18"], answer=["18"]) == [0.0]
    assert get_reward("correctness", fallback=True)(["the answer is 18"], answer=["18"]) == [2.0]


def test_correctness_scores_and_none_gold():
    fn = get_reward("correctness", reward=3.0, wrong=-1.0, missing=-2.0)
    out = fn([fmt("18"), fmt("17"), "no answer", fmt("18")], answer=["18", "18", "18", None])
    assert out == [3.0, -1.0, -2.0, None]


def test_correctness_single_gold_value_is_broadcast():
    assert get_reward("correctness")([fmt("18"), fmt("1")], answer="18") == [2.0, 0.0]


def test_correctness_needs_answer_column():
    with pytest.raises(ValueError, match="'answer' column"):
        get_reward("correctness")([fmt("18")])
    with pytest.raises(ValueError, match="2 values for 1 completions"):
        get_reward("correctness")([fmt("18")], answer=["1", "2"])


def test_correctness_graded_like_unsloth_check_answer():
    fn = get_reward(
        "correctness",
        reward=5.0,
        wrong=-2.5,
        missing=-2.0,
        unparseable=-4.5,
        partial=[[0.1, 2.0], [0.2, 1.5]],
    )
    completions = [fmt(a) for a in ("100", "95", "110", "85", "120.5", "70", "lots")] + ["none"]
    assert fn(completions, answer=["100"] * 8) == [5.0, 2.0, 2.0, 1.5, -2.5, -2.5, -4.5, -2.0]


def test_correctness_partial_with_zero_gold_uses_absolute_error():
    fn = get_reward("correctness", partial=[[0.5, 1.0]])
    assert fn([fmt("0.4"), fmt("0.6")], answer=["0", "0"]) == [1.0, 0.0]


def test_correctness_other_tag():
    fn = get_reward("correctness", tag="SOLUTION")
    assert fn(["<start_working_out>x<end_working_out><SOLUTION>18</SOLUTION>"], answer=["18"]) == [2.0]
    fn2 = get_reward("correctness", tag=["<ans>", "</ans>"])
    assert fn2(["<ans>18</ans>"], answer=["18"]) == [2.0]


def test_exact_match():
    fn = get_reward("exact_match")
    out = fn([fmt("Paris"), fmt("paris "), fmt("Lyon"), "none"], answer=["Paris"] * 4)
    assert out == [2.0, 2.0, 0.0, 0.0]
    assert get_reward("exact_match", case_sensitive=True)([fmt("paris")], answer=["Paris"]) == [0.0]


@pytest.mark.parametrize(
    "answer, expected",
    [("18", 0.5), ("-5", 0.5), ("$1,000", 0.5), ("18.00", 0.5), ("2.5", 0.0), ("3/4", 0.0), ("many", 0.0)],
)
def test_integer_answer(answer, expected):
    assert get_reward("integer_answer")([fmt(answer)]) == [expected]


def test_integer_answer_missing_and_any_number():
    assert get_reward("integer_answer")(["no tags 18"]) == [0.0]
    assert get_reward("integer_answer", integer_only=False)([fmt("2.5"), fmt("x")]) == [0.5, 0.0]


# --- format ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text, strict, soft",
    [
        (GOOD, 0.5, 0.5),
        ("<reasoning>a</reasoning><answer>1</answer>", 0.5, 0.5),
        ("Sure. <reasoning>a</reasoning><answer>1</answer>", 0.0, 0.5),
        ("<reasoning>a</reasoning> then <answer>1</answer> bye", 0.0, 0.5),
        ("<answer>1</answer><reasoning>a</reasoning>", 0.0, 0.0),
        ("<reasoning>a</reasoning>", 0.0, 0.0),
        ("<answer>1</answer>", 0.0, 0.0),
        ("<reasoning>a\n</reasoning>\n<answer>1", 0.0, 0.0),
        ("plain text 18", 0.0, 0.0),
    ],
)
def test_strict_and_soft_format(text, strict, soft):
    assert get_reward("strict_format")([text, chat(text)]) == [strict, strict]
    assert get_reward("soft_format")([text, chat(text)]) == [soft, soft]


def test_format_with_other_tags():
    text = "<think>x</think><SOLUTION>1</SOLUTION>"
    assert get_reward("strict_format", reasoning_tag="think", answer_tag="SOLUTION")([text]) == [0.5]
    assert get_reward("soft_format", reasoning_tag="think", answer_tag="SOLUTION", reward=1.0)([text]) == [1.0]
    assert get_reward("strict_format")([text]) == [0.0]


@pytest.mark.parametrize(
    "text, expected",
    [
        (GOOD, 0.5),
        ("<reasoning>a</reasoning><answer>1</answer>", 0.5),
        ("<reasoning>a</reasoning>", 0.25),
        ("<reasoning>a", 0.125),
        ("<answer>1</answer>", 0.25),
        ("<reasoning>a</reasoning><answer>1</answer>xyz", 0.5 - 0.003),
        ("<reasoning>a</reasoning><answer>1</answer>  xyz \n", 0.5 - 0.003),
        ("<reasoning>a</reasoning><answer>1</answer>" + "x" * 1000, 0.25),
        ("<reasoning><reasoning>a</reasoning><answer>1</answer>", 0.375),
        ("<answer>1</answer><answer>2</answer>", 0.0),
        ("", 0.0),
    ],
)
def test_xml_count(text, expected):
    assert get_reward("xml_count")([text]) == [pytest.approx(expected, abs=1e-12)]


def test_xml_count_parameters():
    fn = get_reward("xml_count", per_tag=0.25, trailing_penalty=0.01, max_trailing_penalty=1.0)
    assert fn(["<reasoning>a</reasoning><answer>1</answer>" + "x" * 50]) == [pytest.approx(0.5)]


# --- build_reward_functions ------------------------------------------------------------------


class Spec:
    def __init__(self, name, weight=1.0, params=None):
        self.name, self.weight, self.params = name, weight, params or {}


def test_build_reward_functions_from_objects_dicts_and_names():
    funcs, weights = build_reward_functions(
        [
            Spec("correctness", 2.0),
            {"name": "xml_count", "weight": 0.5, "params": {"per_tag": 0.25}},
            "strict_format",
        ]
    )
    assert [f.__name__ for f in funcs] == ["correctness", "xml_count", "strict_format"]
    assert weights == [2.0, 0.5, 1.0]
    assert funcs[0]([fmt("18")], answer=["18"]) == [2.0]
    assert funcs[1]([GOOD]) == [1.0]


def test_build_reward_functions_duplicate_names_get_suffixes():
    funcs, _ = build_reward_functions(["xml_count", "xml_count"])
    assert [f.__name__ for f in funcs] == ["xml_count", "xml_count_2"]


def test_build_reward_functions_errors():
    with pytest.raises(ValueError, match="no rewards"):
        build_reward_functions([])
    with pytest.raises(ValueError, match="unknown key"):
        build_reward_functions([{"name": "xml_count", "wieght": 1}])
    with pytest.raises(ValueError, match="weight 'heavy' is not a number"):
        build_reward_functions([Spec("xml_count", "heavy")])
    with pytest.raises(ValueError, match="unknown reward 'nope'"):
        build_reward_functions([Spec("nope")])
    with pytest.raises(ValueError, match="on_error='ignore'"):
        build_reward_functions([Spec("xml_count", params={"on_error": "ignore"})])


def test_module_doctests():
    for module in ("correctness", "format", "length", "repetition", "style", "structured"):
        mod = importlib.import_module(f"unsloth_grpo.rewards.{module}")
        assert doctest.testmod(mod).failed == 0, module
    assert doctest.testmod(rewards).failed == 0


# --- length ------------------------------------------------------------------------------


def test_length_target_words_and_tokens():
    fn = get_reward("length_target", target=4, unit="words")
    assert fn(["one two three four", "one two", "a b c d e f g h", ""]) == [1.0, 0.5, 0.0, 0.0]
    tok = get_reward("length_target", target=200)
    ids = [[1] * 100, [1] * 200, [1] * 300, [1] * 500]
    assert tok(["x"] * 4, completion_ids=ids) == [0.5, 1.0, 0.5, 0.0]
    assert get_reward("length_target", target=5, unit="chars")(["abcde", chat("ab")]) == [1.0, pytest.approx(0.4)]


def test_length_rewards_need_completion_ids_for_tokens():
    with pytest.raises(ValueError, match="unit: chars or unit: words"):
        get_reward("length_target")(["x"])
    with pytest.raises(ValueError, match="unit='bytes'"):
        get_reward("length_target", unit="bytes")


def test_cosine_length_scales_by_correctness():
    fn = get_reward("cosine_length", max_length=100)
    right, wrong = fmt("18"), fmt("17")
    lengths = [0, 50, 100, 250]
    ids = [[0] * n for n in lengths]
    assert fn([right] * 4, answer=["18"] * 4, completion_ids=ids) == pytest.approx([1.0, 0.75, 0.5, 0.5])
    assert fn([wrong] * 4, answer=["18"] * 4, completion_ids=ids) == pytest.approx([-1.0, -0.75, -0.5, -0.5])
    assert fn(["no answer"], answer=["18"], completion_ids=[[0] * 100]) == [pytest.approx(-0.5)]
    assert fn([right], answer=[None], completion_ids=[[0]]) == [None]
    with pytest.raises(ValueError, match="'answer' column"):
        fn([right], completion_ids=[[0]])


def test_overlong_soft_punishment():
    fn = get_reward("overlong", max_length=100, cache=20)
    ids = [[0] * n for n in (50, 80, 90, 100, 101)]
    assert fn(["x"] * 5, completion_ids=ids) == [0.0, 0.0, -0.5, -1.0, -1.0]
    with pytest.raises(ValueError, match="training.max_completion_length"):
        get_reward("overlong")
    with pytest.raises(ValueError, match="cache"):
        get_reward("overlong", max_length=10)


# --- repetition, style ------------------------------------------------------------------------


def test_repetition_penalty():
    fn = get_reward("repetition")
    assert fn(["the cat sat on the mat", "a a a a", "a b", "", "A a A a"]) == [0.0, -0.5, 0.0, 0.0, -0.5]
    fn2 = get_reward("repetition", ngram_size=2, max_penalty=-2.0)
    assert fn2(["a b a b a b"]) == [pytest.approx(-1.2)]
    with pytest.raises(ValueError, match="must be <= 0"):
        get_reward("repetition", max_penalty=1.0)


def test_phrase_penalty():
    fn = get_reward("phrase_penalty", phrases=["as an AI", "I cannot"])
    assert fn(["As an AI I think", "fine", chat("i cannot say")]) == [-0.5, 0.0, -0.5]
    many = get_reward("phrase_penalty", phrases=["um"], penalty=-0.25, per_occurrence=True, max_total=-0.5)
    assert many(["um", "um um", "um um um um", "rum", "no"]) == [-0.25, -0.5, -0.5, -0.25, 0.0]
    word = get_reward("phrase_penalty", phrases=[r"\bum\b"], regex=True)
    assert word(["rum", "um, well"]) == [0.0, -0.5]
    assert get_reward("phrase_penalty", phrases=["AI"], case_sensitive=True)(["ai"]) == [0.0]
    with pytest.raises(ValueError, match="needs phrases"):
        get_reward("phrase_penalty")
    with pytest.raises(ValueError, match="bad regular expression"):
        get_reward("phrase_penalty", phrases=["("], regex=True)


def test_script_consistency():
    fn = get_reward("script_consistency")
    assert fn(["hello world", "hello мир", "123 + 4", "Ünïcödé"]) == [1.0, 0.625, None, 1.0]
    cjk = get_reward("script_consistency", script="cjk")
    assert cjk(["你好 ok"]) == [0.5]


# --- structured ------------------------------------------------------------------------------


def test_json_valid():
    fn = get_reward("json_valid")
    texts = [
        '{"a": 1}',
        '```json\n{"a": 1}\n```',
        'Here it is: {"a": {"b": 2}} done.',
        "[1, 2]",
        "nope",
        '{"a":',
    ]
    assert fn(texts) == [1.0, 1.0, 1.0, 0.0, 0.0, 0.0]
    assert get_reward("json_valid", require_object=False)(["[1, 2]", "3"]) == [1.0, 1.0]
    tagged = get_reward("json_valid", tag="answer")
    assert tagged(['<answer>{"a": 1}</answer>', '{"a": 1}']) == [1.0, 0.0]


def test_json_keys():
    fn = get_reward("json_keys", required=["name", "age"])
    assert fn(['{"name": "Ada", "age": 36}', '{"name": "Ada"}', "[]", "x"]) == [1.0, 0.5, 0.0, 0.0]
    strict = get_reward("json_keys", required=["name", "age"], partial=False, reward=2.0)
    assert strict(['{"name": "Ada", "age": 36}', '{"name": "Ada"}']) == [2.0, 0.0]
    with pytest.raises(ValueError, match="needs required"):
        get_reward("json_keys")


def test_json_schema(tmp_path):
    pytest.importorskip("jsonschema")
    schema = {"type": "object", "properties": {"age": {"type": "integer"}}, "required": ["age"]}
    fn = get_reward("json_schema", schema=schema)
    assert fn(['{"age": 3}', '{"age": "3"}', "{}", "x"]) == [1.0, 0.0, 0.0, 0.0]
    path = tmp_path / "schema.json"
    path.write_text(json.dumps(schema))
    assert get_reward("json_schema", schema=str(path))(['{"age": 3}']) == [1.0]
    with pytest.raises(ValueError, match="schema itself is invalid"):
        get_reward("json_schema", schema={"type": 5})
    with pytest.raises(ValueError, match="neither a mapping nor an existing JSON file"):
        get_reward("json_schema", schema=str(tmp_path / "missing.json"))


# --- validation wrapper ----------------------------------------------------------------------------


def _custom(fn):
    """Register ``fn`` as a custom reward reachable by import path for this test."""
    module = types.ModuleType("tmp_reward_mod")
    setattr(module, fn.__name__, fn)
    sys.modules["tmp_reward_mod"] = module
    return f"tmp_reward_mod:{fn.__name__}"


def test_wrapper_names_reward_sample_and_text_when_a_reward_raises():
    def fragile(completions, **kw):
        return [1.0 / (0 if "boom" in c else 1) for c in completions]

    (fn,), _ = build_reward_functions([_custom(fragile)])
    with pytest.raises(RewardError) as err:
        fn(["fine", "it goes boom " + "x" * 500], answer=["1", "2"])
    message = str(err.value)
    assert "reward 'fragile' raised ZeroDivisionError" in message
    assert "sample 1" in message
    assert "it goes boom" in message and "..." in message and "x" * 201 not in message


@pytest.mark.parametrize(
    "values, pattern",
    [
        ([1.0], "returned 1 values for 2 completions"),
        ([1.0, float("nan")], "returned nan \\(not finite\\) for sample 1"),
        ([float("inf"), 1.0], "returned inf \\(not finite\\) for sample 0"),
        (["1", 1.0], "'1' of type str \\(expected a float or None\\) for sample 0"),
        (None, "returned NoneType, expected a list"),
    ],
)
def test_wrapper_rejects_misbehaving_values(values, pattern):
    def bad(completions, **kw):
        return values

    (fn,), _ = build_reward_functions([_custom(bad)])
    with pytest.raises(RewardError, match=pattern):
        fn(["a", "b"])


def test_wrapper_accepts_none_bools_and_numpy_scalars():
    np = pytest.importorskip("numpy")

    def mixed(completions, **kw):
        return [None, True, np.float32(0.5), 2]

    (fn,), _ = build_reward_functions([_custom(mixed)])
    out = fn(["a", "b", "c", "d"])
    assert out == [None, 1.0, 0.5, 2.0]
    assert all(v is None or type(v) is float for v in out)


def test_on_error_zero_keeps_running_and_counts():
    def flaky(completions, **kw):
        if any("boom" in c for c in completions):
            raise RuntimeError("kaput")
        return [float("nan") if c == "nan" else 1.0 for c in completions]

    (fn,), _ = build_reward_functions([{"name": _custom(flaky), "params": {"on_error": "zero"}}])
    assert fn(["a", "boom", "c"]) == [0.0, 0.0, 0.0]
    assert fn(["a", "nan"]) == [1.0, 0.0]
    assert fn.stats.errors == 4
    assert "flaky" in fn.stats.last_error
    assert reward_metrics([fn]) == {"rewards/flaky/errors": 4.0}
    # the global override wins over the spec
    (strict,), _ = build_reward_functions([{"name": _custom(flaky), "params": {"on_error": "zero"}}], on_error="raise")
    with pytest.raises(RewardError, match="kaput"):
        strict(["boom"])


def test_adaptive_weight_follows_success_rate():
    spec = {
        "name": "correctness",
        "weight": 2.0,
        "params": {"adaptive": {"min_scale": 0.5, "max_scale": 2.0, "momentum": 0.0}},
    }
    (fn,), weights = build_reward_functions([spec])
    assert weights == [2.0]
    assert reward_metrics([fn]) == {"rewards/correctness/weight": 2.0}
    # all right: success rate 1 -> scale 0.5 (threshold defaults to the reward's maximum, 2.0)
    assert fn([fmt("18")] * 2, answer=["18"] * 2) == [1.0, 1.0]
    assert reward_metrics([fn]) == {"rewards/correctness/weight": 1.0, "rewards/correctness/success_rate": 1.0}
    # all wrong: rate 0 -> scale 2
    assert fn([fmt("1")] * 2, answer=["18"] * 2) == [0.0, 0.0]
    assert fn.stats.weight == 4.0
    # half right: rate 0.5 -> scale 1.25
    assert fn([fmt("18"), fmt("1")], answer=["18"] * 2) == [2.5, 0.0]
    assert fn.stats.weight == 2.5


def test_adaptive_weight_momentum_and_options():
    spec = {"name": "xml_count", "params": {"adaptive": {"momentum": 0.5, "threshold": 0.5}}}
    (fn,), _ = build_reward_functions([spec])
    fn([GOOD])  # rate 1
    fn(["none"])  # rate 0.5 * 1 + 0.5 * 0
    assert fn.stats.success_rate == 0.5
    assert fn.stats.weight == pytest.approx(1.25)
    (on,), _ = build_reward_functions([{"name": "strict_format", "params": {"adaptive": True}}])
    assert on.adaptive.threshold == 0.5
    with pytest.raises(ValueError, match="momentum"):
        build_reward_functions([{"name": "xml_count", "params": {"adaptive": {"momentum": 1.5}}}])
    with pytest.raises(ValueError, match="adaptive accepts"):
        build_reward_functions([{"name": "xml_count", "params": {"adaptive": {"speed": 1}}}])


# --- catalogue ---------------------------------------------------------------------------------


def test_catalogue_markdown_is_built_from_the_registry():
    table = catalogue_markdown()
    lines = table.strip().splitlines()
    assert len(lines) == len(REGISTRY) + 2
    for name, line in zip(available_rewards(), lines[2:]):
        info = REGISTRY[name]
        assert line.startswith(f"| `{name}` | {info.family} | {info.range_text} |")
        for param in info.params:
            assert f"`{param}=" in line
    assert "| `correctness` | correctness | [0, 2] | 1 | `reward=2.0`" in table


def test_markdown_cli_prints_the_catalogue():
    out = subprocess.run(
        [sys.executable, "-m", "unsloth_grpo.cli", "rewards", "list", "--markdown"],
        capture_output=True, text=True, check=True,
    ).stdout
    assert out == catalogue_markdown()


def test_get_reward_accepts_wrapper_keys_as_the_config_validator_passes_them():
    fn = get_reward("xml_count", on_error="zero", adaptive={"momentum": 0.0})
    assert fn.__name__ == "xml_count"
    assert fn.on_error == "zero"
    assert fn([GOOD]) == [0.25]  # success rate 1 -> scale 0.5
    assert "stats" not in vars(get_reward("xml_count"))


# --- graded corpus -------------------------------------------------------------------------

DATA = __import__("pathlib").Path(__file__).parent / "data"


def _corpus_module():
    return load_script(DATA / "make_graded_corpus.py")


def _corpus() -> list[dict]:
    return [json.loads(line) for line in (DATA / "gsm8k_graded_completions.jsonl").read_text().splitlines()]


def test_graded_corpus_is_what_its_script_builds():
    module = _corpus_module()
    assert (DATA / "gsm8k_graded_completions.jsonl").read_text() == module.render(module.build())


def test_graded_corpus_covers_both_labels_and_every_way_of_going_wrong():
    rows = _corpus()
    assert len(rows) >= 500
    right = sum(r["correct"] for r in rows)
    assert 0.4 <= right / len(rows) <= 0.6
    hows = {r["how"] for r in rows}
    assert {"wrong:near", "wrong:intermediate", "wrong:sign", "wrong:magnitude", "wrong:hedged",
            "wrong:final_differs", "missing:inside_reasoning", "missing:truncated",
            "missing:unclosed", "missing:hashes_only"} <= hows
    assert len({r["problem"] for r in rows}) >= 10


def _disagreements(rows: list[dict]) -> list[tuple]:
    """Rows where the correctness reward (or the task's grader, which must say the same) errs."""
    from unsloth_grpo.recipes.gsm8k import RECIPE
    from unsloth_grpo.tasks import gsm8k

    fn = get_reward("correctness")
    grader = gsm8k.TASK.grader(RECIPE.resolve())
    scores = fn([r["completion"] for r in rows], answer=[r["answer"] for r in rows])
    assert set(scores) == {0.0, 2.0}
    return [
        (r["id"], r["how"], r["answer"], r["completion"][-60:], grader(r["completion"], r["answer"]).rule)
        for r, s in zip(rows, scores)
        if (s == 2.0) != r["correct"] or bool(grader(r["completion"], r["answer"])) != r["correct"]
    ]


def test_correctness_agrees_with_the_graded_corpus():
    assert _disagreements(_corpus()) == []  # every row: no tolerance for a grader that errs


def _adversarial() -> list[dict]:
    path = DATA / "gsm8k_adversarial_completions.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_adversarial_corpus_is_what_its_script_builds():
    module = load_script(DATA / "make_adversarial_corpus.py")
    assert (DATA / "gsm8k_adversarial_completions.jsonl").read_text() == module.render(module.build())


def test_adversarial_corpus_covers_every_trap_and_its_honest_twin():
    rows = _adversarial()
    hows = {r["how"] for r in rows}
    assert {"trap:hedge", "trap:negation", "trap:scale", "trap:sign", "trap:parenthesised_digits",
            "trap:wrong_expression", "trap:several_blocks", "trap:several_boxes", "trap:nested_blocks",
            "trap:only_in_reasoning", "trap:contains", "control:sign_word", "control:scale",
            "control:equation", "control:same_answer_twice"} <= hows
    assert all(r["answer"] in r["completion"] or r["how"].startswith("control") for r in rows)
    assert 0.1 <= sum(r["correct"] for r in rows) / len(rows) <= 0.3


def test_correctness_pays_no_trap_of_the_adversarial_corpus():
    assert _disagreements(_adversarial()) == []


def test_wrapper_reports_through_trls_log_metric_hook():
    logged: list[tuple[str, float]] = []

    def log_metric(name, value):
        logged.append((name, value))

    spec = {"name": "correctness", "params": {"on_error": "zero", "adaptive": {"momentum": 0.0}}}
    (fn,), _ = build_reward_functions([spec])
    fn([fmt("18"), fmt("1")], answer=["18", "18"], log_metric=log_metric, trainer_state=object())
    assert logged == [
        ("rewards/correctness/errors", 0.0),
        ("rewards/correctness/weight", 1.25),
        ("rewards/correctness/success_rate", 0.5),
    ]
    plain, _ = build_reward_functions(["xml_count"])
    logged.clear()
    plain[0]([GOOD], log_metric=log_metric)
    assert logged == []


@pytest.mark.slow
def test_wrapped_rewards_inside_trl_grpo(tiny_model_dir, tmp_path):
    """TRL accepts the wrapped functions, logs them by name, and receives the wrapper's metrics."""
    datasets = pytest.importorskip("datasets")
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    rows = [
        {"prompt": [{"role": "user", "content": f"What is {i} + {i}?"}], "answer": str(2 * i)}
        for i in range(8)
    ]
    funcs, weights = build_reward_functions([
        {"name": "xml_count", "params": {"adaptive": {"momentum": 0.0}}},
        {"name": "correctness", "params": {"on_error": "zero"}},
        {"name": "overlong", "weight": 0.5, "params": {"max_length": 8, "cache": 4}},
    ])
    args = GRPOConfig(
        output_dir=str(tmp_path), use_cpu=True, bf16=False, max_steps=2, num_generations=4,
        per_device_train_batch_size=4, max_completion_length=8, logging_steps=1, report_to=[],
        reward_weights=weights, save_strategy="no", gradient_checkpointing=False,
    )
    trainer = GRPOTrainer(
        model=AutoModelForCausalLM.from_pretrained(tiny_model_dir),
        processing_class=AutoTokenizer.from_pretrained(tiny_model_dir),
        reward_funcs=funcs, args=args, train_dataset=datasets.Dataset.from_list(rows),
    )
    trainer.train()
    logged = [h for h in trainer.state.log_history if "reward" in h]
    assert len(logged) == 2
    for entry in logged:
        for key in ("rewards/xml_count/mean", "rewards/correctness/mean", "rewards/overlong/mean",
                    "rewards/correctness/errors", "rewards/xml_count/weight", "rewards/xml_count/success_rate"):
            assert key in entry, key
        assert entry["rewards/correctness/errors"] == 0.0
        # weight = 1 x (2 - 1.5 x success rate), the momentum-free adaptive rule
        assert entry["rewards/xml_count/weight"] == pytest.approx(2.0 - 1.5 * entry["rewards/xml_count/success_rate"])
