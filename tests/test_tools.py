"""Tools without a model: the calculator, the guard, the environment, transcripts, rewards, config, monitor."""

import asyncio
import threading
import time

import pytest

from unsloth_grpo.config import load_config, validate
from unsloth_grpo.tasks.gsm8k_tools import call_score, tool_call_budget, tool_call_format
from unsloth_grpo.tools import (
    ToolError, as_text, build_tools, guard, guard_environment, resolve_tool, tool_problems,
)
from unsloth_grpo.tools import transcript
from unsloth_grpo.tools.calculator import CalculatorError, calculate
from unsloth_grpo.tools.guessing import GuessingGame


# ---------------------------------------------------------------- calculator


@pytest.mark.parametrize("expression, expected", [
    ("12 * (3 + 4)", "84"), ("7 / 2", "3.5"), ("-3 + 10", "7"), ("2 ** 10", "1024"), ("1,000 + 1", "1001"),
    ("$5 * 3", "15"), ("17 // 5", "3"), ("17 % 5", "2"), ("0.1 + 0.2", "0.3"), ("1/3", "0.3333333333"), (42, "42"),
])
def test_calculator_computes(expression, expected):
    assert calculate(expression) == expected


@pytest.mark.parametrize("expression, reason", [
    ("__import__('os').system('echo hi')", "only numbers"),
    ("open('x')", "only numbers"),
    ("(1).real", "only numbers"),
    ("x + 1", "only numbers"),
    ("2 ** 1000", "exponents"),
    ("1 / 0", "division by zero"),
    ("", "empty"),
    ("3 +", "cannot parse"),
    ("1" * 300, "longer than"),
])
def test_calculator_refuses_what_is_not_arithmetic(expression, reason):
    with pytest.raises(CalculatorError, match=reason):
        calculate(expression)


# ---------------------------------------------------------------- the guard


def test_guard_keeps_the_schema_trl_builds_from_the_function():
    from transformers.utils.chat_template_utils import get_json_schema

    schema = get_json_schema(guard(calculate, timeout=1))
    assert schema["function"]["name"] == "calculate"
    assert list(schema["function"]["parameters"]["properties"]) == ["expression"]


def test_guard_turns_results_into_text():
    assert guard(lambda: {"a": [1, 2.5, None]}, timeout=1, name="t")() == '{"a": [1, 2.5, null]}'
    assert guard(lambda: 3, timeout=1, name="t")() == "3"
    assert guard(lambda: "plain", timeout=1, name="t")() == "plain"


def test_a_tool_that_raises_becomes_a_tool_error():
    def broken(x: int) -> str:
        raise KeyError("no such row")

    with pytest.raises(ToolError, match=r"broken failed: KeyError: 'no such row'"):
        guard(broken, timeout=1)(x=1)
    with pytest.raises(ToolError, match="SystemExit"):  # a tool cannot end the training process
        guard(lambda: exit(3), timeout=1, name="quitter")()
    with pytest.raises(ToolError, match="unexpected keyword argument"):  # the model invented an argument
        guard(calculate, timeout=1)(expr="1+1")


def test_a_tool_that_hangs_is_abandoned_after_the_timeout():
    release = threading.Event()

    def hangs() -> str:
        release.wait(30)
        return "late"

    start = time.monotonic()
    with pytest.raises(ToolError, match=r"hangs did not return within 0.2 s"):
        guard(hangs, timeout=0.2)()
    assert time.monotonic() - start < 5  # generous: the point is not waiting the 30 s
    release.set()


def test_a_tool_that_returns_something_unserialisable_becomes_a_tool_error():
    with pytest.raises(ToolError, match="returned a object, which cannot be shown"):
        guard(lambda: object(), timeout=1, name="odd")()
    with pytest.raises(ToolError, match="not plain data"):
        guard(lambda: {"when": object()}, timeout=1, name="odd")()
    with pytest.raises(ToolError, match="not plain data"):
        as_text("odd", [float("nan"), {1, 2}])


def test_async_tools_get_the_same_guard():
    async def slow() -> str:
        await asyncio.sleep(5)
        return "late"

    async def fine() -> str:
        return "ok"

    with pytest.raises(ToolError, match="did not return within 0.1 s"):
        asyncio.run(guard(slow, timeout=0.1)())
    assert asyncio.run(guard(fine, timeout=1)()) == "ok"


# ---------------------------------------------------------------- the environment


def test_guessing_game_keeps_state_across_calls():
    game = GuessingGame()
    game.reset(answer="7", prompt=[])
    assert [game.guess(3), game.guess(9), game.guess(7)] == ["higher", "lower", "correct"]
    assert game.solved and game.guesses == 3
    game.reset(answer=2)
    assert not game.solved and game.guesses == 0


def test_guarded_environment_methods_keep_schema_and_state():
    from transformers.utils.chat_template_utils import get_json_schema

    game = guard_environment(GuessingGame, timeout=1)()
    game.reset(answer=5)
    with pytest.raises(ToolError, match="not a whole number"):
        game.guess(number="five")
    assert game.guess(number=5) == "correct" and game.solved
    schema = get_json_schema(game.guess)
    assert schema["function"]["name"] == "guess"
    assert list(schema["function"]["parameters"]["properties"]) == ["number"]


# ---------------------------------------------------------------- transcripts and rewards


def _call(name, **arguments):
    return {"type": "function", "function": {"name": name, "arguments": arguments}}


def _exchange(call, result, final="<answer>12</answer>"):
    return [{"role": "assistant", "content": "", "tool_calls": [call]},
            {"role": "tool", "name": call["function"]["name"], "content": result},
            {"role": "assistant", "content": final}]


TRL_ERROR = str({"error": "Tool calc not found."})  # how TRL writes a failed call


def test_transcript_reads_calls_results_and_errors():
    good = _exchange(_call("calculate", expression="3*4"), "12")
    bad = _exchange(_call("calc", expression="3*4"), TRL_ERROR)
    assert transcript.calls(good) == [{"name": "calculate", "arguments": {"expression": "3*4"}}]
    assert transcript.results(good) == ["12"] and transcript.final_text(good) == "<answer>12</answer>"
    assert transcript.is_error(TRL_ERROR) and not transcript.is_error("12")
    assert transcript.render(good).splitlines() == [
        "[assistant]", "[call] calculate(expression='3*4')", "[tool calculate] 12", "[assistant] <answer>12</answer>"]
    plain = [{"role": "assistant", "content": "no tools"}]
    assert transcript.summary([good, bad, plain]) == {
        "tools/calls_per_completion": 2 / 3, "tools/used_share": 2 / 3, "tools/error_share": 0.5}


def test_tool_call_format_gives_credit_in_quarters():
    params = {"calculate": {"expression"}}
    assert call_score([{"role": "assistant", "content": "just text <tool_call>"}], params) == 0.0
    assert call_score(_exchange(_call("zzzzzzzzzz"), TRL_ERROR), params) == 0.25
    assert call_score(_exchange(_call("calculator"), TRL_ERROR), params) == pytest.approx(0.25 + 0.25 * 16 / 19)
    assert call_score(_exchange(_call("calculate"), TRL_ERROR), params) == 0.5
    assert call_score(_exchange(_call("calculate", expression="1", x="2"), TRL_ERROR), params) == 0.5
    assert call_score(_exchange(_call("calculate", expression=""), TRL_ERROR), params) == 0.75
    assert call_score(_exchange(_call("calculate", expression="3*4"), "12"), params) == 1.0
    fn = tool_call_format()
    assert fn.__name__ == "tool_call_format"
    assert fn([_exchange(_call("calculate", expression="3*4"), "12"), "plain text"]) == [1.0, 0.0]


def test_tool_call_budget_penalises_calls_beyond_it():
    fn = tool_call_budget(budget=1, penalty=0.5)
    three = [{"role": "assistant", "content": "", "tool_calls": [_call("calculate", expression="1")] * 3}]
    assert fn([three, _exchange(_call("calculate", expression="1"), "1"), "none"]) == [-1.0, 0.0, 0.0]
    with pytest.raises(ValueError, match="must both be >= 0"):
        tool_call_budget(budget=-1)


def test_samples_file_text_shows_the_whole_exchange():
    from unsloth_grpo.training.progress import _text

    assert "[tool calculate] 12" in _text(_exchange(_call("calculate", expression="3*4"), "12"))
    assert _text([{"role": "assistant", "content": "plain"}]) == "plain"  # unchanged without tools


# ---------------------------------------------------------------- config


def _tools_cfg(**tools):
    return load_config({"task": "gsm8k_tools", "model": {"name": "builtin:tiny-tools"},
                        "rewards": [{"name": "tool_call_format"}], "tools": tools})


def test_tools_section_round_trips_and_validates(tmp_path):
    from unsloth_grpo.config import dump_config

    cfg = _tools_cfg(functions=["calculate"], environment="guess_number", timeout=2)
    assert validate(cfg) == []
    dump_config(cfg, tmp_path / "c.yaml")
    assert load_config(tmp_path / "c.yaml") == cfg
    kwargs = build_tools(cfg.tools)
    assert [t.__name__ for t in kwargs["tools"]] == ["calculate"]
    assert kwargs["environment_factory"]().guess.__name__ == "guess"
    assert build_tools(load_config({}).tools) == {}


def undocumented(x):
    return x


def test_bad_tool_settings_are_named_with_the_fix_before_loading():
    problems = "\n".join(tool_problems(_tools_cfg(functions=["calculater", "tests.test_tools:undocumented"],
                                                  environment="nope", timeout=0, max_tool_calling_iterations=0)))
    assert "unknown tool 'calculater'. Did you mean 'calculate'?" in problems
    assert "tools.functions[1] (tests.test_tools:undocumented)" in problems and "docstring" in problems
    assert "unknown tool environment 'nope'" in problems
    assert "tools.timeout=0" in problems and "tools.max_tool_calling_iterations=0" in problems
    plain = load_config({"model": {"name": "builtin:tiny"}, "rewards": [{"name": "correctness"}],
                         "tools": {"functions": ["calculate"]}})
    from unsloth_grpo.training.checks import config_problems

    assert any("use model.name=builtin:tiny-tools" in p for p in config_problems(plain))


def test_resolve_tool_by_import_path():
    assert resolve_tool("unsloth_grpo.tools.calculator:calculate") is calculate
    with pytest.raises(ValueError, match="has no attribute"):
        resolve_tool("unsloth_grpo.tools.calculator:nothing")


def test_recipe_presets_validate_and_yaml_files_match_the_defaults():
    from pathlib import Path

    from unsloth_grpo.recipes import gsm8k_tools, guess_number

    for module in (gsm8k_tools, guess_number):
        for preset in (None, *module.RECIPE.presets):
            assert validate(module.RECIPE.resolve(preset=preset)) == [], (module, preset)
        path = Path(__file__).resolve().parents[1] / "recipes" / f"{module.RECIPE.name}.yaml"
        assert load_config(path) == module.RECIPE.resolve()


# ---------------------------------------------------------------- monitor


def test_monitor_warns_when_no_completion_calls_a_tool():
    from unsloth_grpo.training.monitor import HealthChecker, HealthThresholds

    checker = HealthChecker(HealthThresholds(tool_window=3))
    rows = [{"reward": 0.1, "tools/call_frequency": 0.0, "tools/failure_frequency": 0.0}] * 3
    assert [w.name for w in checker.feed(rows)] == ["no_tool_calls"]


def test_monitor_warns_when_every_call_errors_and_not_when_some_run():
    from unsloth_grpo.training.monitor import HealthChecker, HealthThresholds

    some_run = [{"reward": 0.1, "tools/call_frequency": 1.0, "tools/failure_frequency": 0.5}] * 5
    assert HealthChecker(HealthThresholds(tool_window=3)).feed(some_run) == []
    all_fail = [{"reward": 0.1, "tools/call_frequency": 1.0, "tools/failure_frequency": 1.0}] * 3
    assert [w.name for w in HealthChecker(HealthThresholds(tool_window=3)).feed(all_fail)] == ["tool_errors"]
    no_tools = [{"reward": 0.1}] * 30  # a run without tools logs no tools/* keys
    assert HealthChecker(HealthThresholds(tool_window=3)).feed(no_tools) == []


# ---------------------------------------------------------------- the tiny tokenizer


def test_tiny_tool_tokenizer_is_one_trl_can_parse_calls_with(tmp_path):
    from transformers import AutoTokenizer
    from trl.chat_template_utils import is_chat_template_prefix_preserving, parse_response, supports_tool_calling

    from unsloth_grpo.models.builtin import build_tokenizer

    build_tokenizer(tmp_path, tool_calling=True)
    tok = AutoTokenizer.from_pretrained(tmp_path)  # the response template survives saving
    assert supports_tool_calling(tok) and is_chat_template_prefix_preserving(tok)
    assert tok.tokenize("<tool_call>") == ["<tool_call>"] and tok.tokenize("</tool_call>") == ["</tool_call>"]
    prompt = tok.apply_chat_template([{"role": "user", "content": "3*4?"}], tools=[calculate],
                                     add_generation_prompt=True, tokenize=True, return_dict=False)
    assert "Tools: calculate(expression)" in tok.decode(prompt)
    ids = tok("<tool_call>calculate\nexpression=3*4\n</tool_call>", add_special_tokens=False)["input_ids"]
    assert parse_response(tok, ids, prefix=prompt)["tool_calls"] == [_call("calculate", expression="3*4")]


def test_default_tiny_tokenizer_is_unchanged(tmp_path):
    from unsloth_grpo.models.builtin import CHATML_TEMPLATE, build_tokenizer

    tok = build_tokenizer(tmp_path)
    assert tok.chat_template == CHATML_TEMPLATE and "<tool_call>" not in tok.get_vocab()
    assert getattr(tok, "response_template", None) is None


def test_reward_lab_shows_whole_transcripts_and_scores_them(tmp_path, capsys):
    import json

    import argparse

    from unsloth_grpo.cli import rewards as lab_cli

    def run_cli(argv):
        parser = argparse.ArgumentParser(prog="unsloth-grpo")
        lab_cli.add_parser(parser.add_subparsers())
        args = parser.parse_args(argv)
        return args.func(args)

    good = _exchange(_call("calculate", expression="3*4"), "12")
    bad = _exchange(_call("calc", expression="3*4"), TRL_ERROR, final="<answer>7</answer>")
    path = tmp_path / "c.jsonl"
    path.write_text("".join(json.dumps({"group": 0, "completion": c, "answer": "12"}) + "\n" for c in (good, bad)))
    config = tmp_path / "recipe.yaml"
    config.write_text("task: gsm8k_tools\nrewards:\n  - {name: tool_call_format}\n  - {name: correctness}\n")
    report = tmp_path / "report.json"
    assert run_cli(["rewards", "check", "--config", str(config), "--completions", str(path), "--json", str(report)]) == 0
    out = capsys.readouterr().out
    assert "[call] calculate(expression='3*4')" in out and "[tool calculate] 12" in out
    stats = json.loads(report.read_text())["stats"]
    assert stats["tool_call_format"]["mean"] == pytest.approx((1.0 + 0.25 + 0.25 * 8 / 13) / 2)
    assert stats["correctness"]["mean"] == pytest.approx(1.0)  # 2.0 for the right answer, 0 for the wrong
