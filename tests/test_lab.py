"""The reward lab: statistics, flags and exit codes of ``unsloth-grpo rewards check``."""

from __future__ import annotations

import argparse
import json
import math
import textwrap
from pathlib import Path

import pytest

from unsloth_grpo.cli import rewards as lab_cli
from unsloth_grpo.rewards import lab
from unsloth_grpo.rewards import build_reward_functions, catalogue_markdown


def fmt(answer: str) -> str:
    return f"<reasoning>\nsteps\n</reasoning>\n<answer>\n{answer}\n</answer>"


RECORDS = [
    {"group": 0, "completion": fmt("18"), "answer": "18"},
    {"group": 0, "completion": fmt("17"), "answer": "18"},
    {"group": 1, "completion": fmt("4"), "answer": "4"},
    {"group": 1, "completion": [{"role": "assistant", "content": fmt("$4")}], "answer": "4"},
]


@pytest.fixture
def custom_rewards(tmp_path, monkeypatch):
    """A module of deliberately broken or redundant rewards, importable as lab_rewards_mod."""
    (tmp_path / "lab_rewards_mod.py").write_text(
        textwrap.dedent(
            """
            import time
            from unsloth_grpo.grading import is_correct, completion_text

            def always_one(completions, **kw):
                return [1.0] * len(completions)

            def double_correct(completions, answer, **kw):
                return [4.0 if is_correct(c, a) else 0.0 for c, a in zip(completions, answer)]

            def explodes(completions, **kw):
                return [1.0 / ("17" not in completion_text(c)) for c in completions]

            def sleepy(completions, **kw):
                time.sleep(0.002 * len(completions))
                return [float(i) for i in range(len(completions))]
            """
        )
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    return "lab_rewards_mod"


def run_cli(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="unsloth-grpo")
    lab_cli.add_parser(parser.add_subparsers())
    args = parser.parse_args(argv)
    return args.func(args)


def write_jsonl(path, records) -> str:
    lab.write_completions(records, path)
    return str(path)


def test_analyse_statistics_are_exact():
    funcs, weights = build_reward_functions(["correctness", "strict_format"])
    report = lab.analyse(RECORDS, funcs, weights)
    assert report.n == 4 and report.num_groups == 2
    c = report.stats["correctness"]
    assert (c["mean"], c["min"], c["max"]) == (1.5, 0.0, 2.0)
    assert c["std"] == pytest.approx(math.sqrt(0.75))
    assert c["zero_var_groups"] == 0.5
    assert c["none_share"] == 0.0
    assert c["ms_per_completion"] > 0
    total = report.stats["total (weighted)"]
    assert (total["mean"], total["min"], total["max"], total["zero_var_groups"]) == (2.0, 0.5, 2.5, 0.5)
    assert report.correlations["correctness"]["strict_format"] is None  # strict_format is constant
    assert report.blocking == []
    assert report.warnings == [
        "strict_format: constant at 0.5 on every completion -- it gives GRPO no signal "
        "(a pattern that never matches, or always does?)"
    ]


def test_constant_reward_is_flagged_and_blocks_when_it_is_all_there_is(tmp_path, custom_rewards, capsys):
    path = write_jsonl(tmp_path / "c.jsonl", RECORDS)
    rc = run_cli(["rewards", "check", "--completions", path, "--reward", "correctness",
                  "--reward", f"{custom_rewards}:always_one"])
    out = capsys.readouterr().out
    assert rc == 0
    assert "always_one: constant at 1 on every completion" in out
    assert "Rewards on 4 completions in 2 groups" in out
    assert run_cli(["rewards", "check", "--completions", path, "--reward", "correctness",
                    "--reward", f"{custom_rewards}:always_one", "--strict"]) == 1
    capsys.readouterr()
    rc = run_cli(["rewards", "check", "--completions", path, "--reward", f"{custom_rewards}:always_one"])
    out = capsys.readouterr().out
    assert rc == 1
    assert "BLOCKING total reward: constant within every group" in out


def test_duplicate_rewards_are_flagged(custom_rewards):
    funcs, weights = build_reward_functions(["correctness", f"{custom_rewards}:double_correct"])
    report = lab.analyse(RECORDS, funcs, weights)
    assert report.correlations["correctness"]["double_correct"] == pytest.approx(1.0)
    assert any(w.startswith("correctness and double_correct: duplicate each other (correlation +1.00)")
               for w in report.warnings)


def test_raising_reward_blocks_and_names_the_sample(tmp_path, custom_rewards, capsys):
    path = write_jsonl(tmp_path / "c.jsonl", RECORDS)
    rc = run_cli(["rewards", "check", "--completions", path, "--reward", "correctness",
                  "--reward", f"{custom_rewards}:explodes"])
    out = " ".join(capsys.readouterr().out.split())
    assert rc == 1
    assert "BLOCKING explodes: fails on these completions: reward 'explodes' raised ZeroDivisionError" in out
    assert "sample 1" in out


def test_none_everywhere_blocks():
    records = [dict(r, answer=None) for r in RECORDS]
    funcs, weights = build_reward_functions(["correctness", "xml_count"])
    report = lab.analyse(records, funcs, weights)
    assert report.stats["correctness"]["none_share"] == 1.0
    assert report.blocking[0].startswith("correctness: returned None for every completion")


def test_never_above_zero_and_slower_than_generation(custom_rewards):
    records = [dict(r, answer="999") for r in RECORDS] + [{"group": 1, "completion": "x", "answer": "999"}]
    funcs, weights = build_reward_functions(["correctness", "xml_count", f"{custom_rewards}:sleepy"])
    report = lab.analyse(records, funcs, weights, generation_ms_per_completion=1.0)
    text = "\n".join(report.warnings)
    assert "correctness: constant at 0 on every completion, never above zero" in text
    assert "sleepy: slower than generation" in text
    assert "xml_count: slower" not in text


def test_a_slow_reward_is_flagged_without_generation_figures(custom_rewards, monkeypatch, capsys):
    # a reward of 15,000 ms per completion used to sit in the table without a word when the completions
    # came from a file (no generation time to compare with); the threshold is made small for the test
    monkeypatch.setattr(lab, "SLOW_MS_PER_COMPLETION", 1.0)
    funcs, weights = build_reward_functions(["xml_count", f"{custom_rewards}:sleepy"])
    report = lab.analyse(RECORDS, funcs, weights)
    [slow] = [w for w in report.warnings if ": slow," in w]
    ms = report.stats["sleepy"]["ms_per_completion"]
    assert ms >= 2.0 and slow.startswith(f"sleepy: slow, {ms:,.0f} ms per completion")
    assert f"one step's {lab.STEP_COMPLETIONS} completions" in slow and "timeout_s" in slow
    lab.print_report(report)
    assert "sleepy: slow" in capsys.readouterr().out


def test_groups_fall_back_to_prompts_and_columns_reach_the_rewards():
    records = [
        {"prompt": "p1", "completion": "abcd", "completion_ids": [1, 2, 3, 4]},
        {"prompt": "p1", "completion": "ab", "completion_ids": [1, 2]},
        {"prompt": "p2", "completion": "abcd", "completion_ids": [1, 2, 3, 4]},
    ]
    funcs, weights = build_reward_functions([{"name": "length_target", "params": {"target": 4}}])
    report = lab.analyse(records, funcs, weights)
    assert report.num_groups == 2
    assert report.stats["length_target"]["mean"] == pytest.approx(2.5 / 3)
    assert report.stats["length_target"]["zero_var_groups"] == 0.0


def test_cli_with_config_json_report_and_saved_completions(tmp_path, capsys):
    config = tmp_path / "recipe.yaml"
    config.write_text(
        "rewards:\n"
        "  - {name: correctness, weight: 2.0}\n"
        "  - {name: xml_count, weight: 1.0, params: {per_tag: 0.25}}\n"
    )
    path = write_jsonl(tmp_path / "c.jsonl", RECORDS)
    report_path = tmp_path / "report.json"
    saved = tmp_path / "saved.jsonl"
    rc = run_cli(["rewards", "check", "--config", str(config), "--completions", path,
                  "--json", str(report_path), "--save-completions", str(saved)])
    out = capsys.readouterr().out
    assert rc == 0
    for name in ("correctness", "xml_count", "total (weighted)", "zero-var groups", "ms/compl.", "Correlation"):
        assert name in out
    report = json.loads(report_path.read_text())
    assert report["stats"]["xml_count"]["mean"] == 1.0  # all four tags once each, 0.25 apiece
    assert report["stats"]["total (weighted)"]["mean"] == pytest.approx(2.0 * 1.5 + 1.0)
    assert lab.read_completions(saved) == json.loads(json.dumps(RECORDS))


def _error(capsys) -> str:
    """The one ``error:`` line of a refused check: on stderr, nothing on stdout."""
    out, err = capsys.readouterr()
    assert out == "" and err.startswith("error: ") and "Traceback" not in err, (out, err)
    return err


def test_cli_input_errors_go_to_stderr(tmp_path, capsys):
    assert run_cli(["rewards", "check", "--completions", str(tmp_path / "missing.jsonl")]) == 2
    assert "does not exist" in _error(capsys)
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"text": "no completion key"}\n')
    assert run_cli(["rewards", "check", "--completions", str(bad)]) == 2
    assert "bad.jsonl:1: each line must be an object with a 'completion' key" in _error(capsys)
    good = write_jsonl(tmp_path / "c.jsonl", RECORDS)
    assert run_cli(["rewards", "check", "--completions", good, "--reward", "corectness"]) == 2
    assert "Did you mean 'correctness'" in _error(capsys)
    assert run_cli(["rewards", "check"]) == 2
    assert "give --completions" in _error(capsys)


def test_rewards_list(capsys):
    assert run_cli(["rewards", "list", "--markdown"]) == 0
    assert capsys.readouterr().out == catalogue_markdown()
    assert run_cli(["rewards", "list"]) == 0
    assert "correctness" in capsys.readouterr().out.split()


@pytest.mark.slow
def test_check_generates_with_the_tiny_model(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    report_path = tmp_path / "r.json"
    rc = run_cli(["rewards", "check", "--model", "builtin:tiny", "--dataset", "synthetic",
                  "--num-generations", "4", "--limit", "2", "--max-new-tokens", "8",
                  "--temperature", "1.0", "--seed", "0", "--json", str(report_path)])
    out = capsys.readouterr().out
    report = json.loads(report_path.read_text())
    assert rc == (1 if report["blocking"] else 0)
    assert report["n"] == 8 and report["num_groups"] == 2
    assert report["generation_ms_per_completion"] > 0
    assert set(report["stats"]) == {"xml_count", "soft_format", "strict_format", "integer_answer",
                                    "correctness", "total (weighted)"}
    assert "Rewards on 8 completions in 2 groups; generation" in out


def test_check_runs_on_the_graded_corpus(capsys):
    """The graded corpus doubles as a sample completions file (it has 'completion' and 'answer')."""
    corpus = Path(__file__).parent / "data" / "gsm8k_graded_completions.jsonl"
    records = lab.read_completions(corpus)
    funcs, weights = build_reward_functions(["correctness"])
    report = lab.analyse(records, funcs, weights)
    share = sum(r["correct"] for r in records) / len(records)
    assert report.stats["correctness"]["mean"] == pytest.approx(2.0 * share)
    assert report.num_groups is None and report.blocking == []
    assert run_cli(["rewards", "check", "--completions", str(corpus), "--reward", "correctness"]) == 0
    assert "no groups" in capsys.readouterr().out


def test_rewards_without_an_action_prints_usage(capsys):
    assert run_cli(["rewards"]) == 2
    assert "rewards {check,list}" in capsys.readouterr().err


ROOT = Path(__file__).resolve().parents[1]


def test_the_documented_command_offline_is_one_error_naming_the_offline_way(tmp_path, capsys, monkeypatch):
    # it used to retry the hub for the dataset and end in a 54-line traceback
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty-cache"))  # the recipe's model is not cached here
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    config = str(ROOT / "recipes" / "gsm8k.yaml")
    assert run_cli(["rewards", "check", "--config", config, "--num-generations", "8", "--limit", "16"]) == 2
    err = _error(capsys)
    assert "cannot generate with model 'unsloth/Qwen2.5-1.5B-Instruct-bnb-4bit' here" in err
    assert "--model builtin:tiny --dataset synthetic" in err and "--completions FILE.jsonl" in err
    # a model that is there, with the recipe's hub dataset offline: the same way out, no traceback
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    assert run_cli(["rewards", "check", "--config", config, "--model", "builtin:tiny"]) == 2
    err = _error(capsys)
    assert "could not load hub dataset 'openai/gsm8k'" in err and "--dataset synthetic" in err


def test_a_reward_missing_an_argument_says_which_key_to_add(tmp_path, monkeypatch, capsys):
    (tmp_path / "needs_mod.py").write_text(textwrap.dedent('''
        def needs_prompts(prompts, completions, **kwargs):
            return [0.0 for _ in completions]

        def needs_column(completions, ground_truth, **kwargs):
            return [0.0 for _ in completions]
    '''))
    monkeypatch.syspath_prepend(str(tmp_path))
    funcs, weights = build_reward_functions(["needs_mod:needs_prompts", "needs_mod:needs_column"])
    report = lab.analyse(RECORDS, funcs, weights)
    assert "TRL passes the prompts as 'prompts': give each record a 'prompt'" in report.blocking[0]
    assert "give each record a 'ground_truth' key" in report.blocking[1]


# ---------------------------------------------------------------- the system prompt's own text, as a completion

#: The real-model preset's system prompt before issue 31: a template with placeholders, one worked addition.
OLD_PROMPT = ("Solve the math word problem. Reply in exactly this format:\n"
              "<reasoning>\nthe calculation\n</reasoning>\n<answer>\nthe final number\n</answer>\n"
              "Example:\nQuestion: Ann has 3 pens and buys 4 more. How many pens does Ann have now?\n"
              "<reasoning>\n3 + 4 = 7\n</reasoning>\n<answer>\n7\n</answer>")


def _prompt_records(system: str, n: int = 8) -> list[dict]:
    from unsloth_grpo.tasks.gsm8k import load_gsm8k

    rows = load_gsm8k("synthetic", "train", subset="easy", system_prompt=system, num_synthetic=n, seed=2)
    return [{"group": i, "prompt": r["prompt"], "answer": r["answer"],
             "completion": f"<reasoning>\nwork\n</reasoning>\n<answer>\n{r['answer']}\n</answer>"}
            for i, r in enumerate(rows)]


def test_the_lab_warns_when_the_prompts_template_is_paid(custom_rewards):
    import re

    def notebook_format(completions, **kwargs):  # the regex format reward of the notebooks people copy
        pattern = r"<reasoning>.*?</reasoning>\s*<answer>.*?</answer>"
        return [0.5 if re.search(pattern, c[0]["content"], re.S) else 0.0 for c in completions]

    correctness, _ = build_reward_functions([{"name": "correctness"}])
    warnings = lab.prompt_copy_warnings(_prompt_records(OLD_PROMPT), [notebook_format, *correctness], [1.0, 1.0])
    assert any(w.startswith("the system prompt's template copied as it is") and "notebook_format 0.5" in w
               for w in warnings)
    # the built-in format rewards pay nothing for it: no template warning
    ours, weights = build_reward_functions([{"name": "xml_count", "params": {"per_tag": 0.25, "once": False}},
                                            {"name": "correctness", "weight": 2.0}])
    assert not any("template" in w for w in lab.prompt_copy_warnings(_prompt_records(OLD_PROMPT), ours, weights))


def test_the_lab_warns_when_copying_a_worked_example_pays_more_than_half_an_answer():
    from unsloth_grpo.tasks.gsm8k import DEFAULT_REWARDS, EXAMPLE_SYSTEM_PROMPT

    # three format rewards worth 1.5 beside a correctness worth 0.5: copying an example is worth 75% of an answer
    heavy = [{"name": "xml_count"}, {"name": "soft_format"}, {"name": "strict_format"},
             {"name": "correctness", "weight": 0.25}]
    funcs, weights = build_reward_functions(heavy)
    warnings = lab.prompt_copy_warnings(_prompt_records(EXAMPLE_SYSTEM_PROMPT), funcs, weights)
    assert [w.split(" of the system prompt")[0] for w in warnings] == ["worked example 1", "worked example 2"]
    assert "75% of what a right answer earns" in warnings[0]
    report = lab.analyse(_prompt_records(EXAMPLE_SYSTEM_PROMPT), funcs, weights)
    assert any(w.startswith("worked example 1") for w in report.warnings)
    # gsm8k's default rewards and the real-model preset's weigh correctness enough: a copy earns under half
    for rewards in (DEFAULT_REWARDS, _preset_rewards()):
        funcs, weights = build_reward_functions(rewards)
        assert lab.prompt_copy_warnings(_prompt_records(EXAMPLE_SYSTEM_PROMPT), funcs, weights) == []


def _preset_rewards():
    from dataclasses import asdict

    from unsloth_grpo.recipes.gsm8k import RECIPE

    return [asdict(r) for r in RECIPE.resolve(preset="smollm2").rewards]
