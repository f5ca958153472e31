"""The arith task (generator, splits, grader = reward), the digit tokenizer and the controls runner."""

from __future__ import annotations

import pytest

from unsloth_grpo.config import ConfigError
from unsloth_grpo.data import DataError
from unsloth_grpo.recipes.arith import RECIPE
from unsloth_grpo.tasks import arith
from unsloth_grpo.evaluation.evaluate import wilson_interval
from unsloth_grpo.experiments.controls import check_two_stage, shuffled_gold


def test_train_and_held_out_problems_never_overlap():
    train = {(r["a"], r["b"]) for r in arith.make_problems(3000, seed=0, split="train", digits=2, addend_digits=1)}
    test = {(r["a"], r["b"]) for r in arith.make_problems(80, seed=5, split="test", digits=2, addend_digits=1)}
    assert train and test and not train & test
    assert all(arith.split_of(a, b) == "test" for a, b in test)
    assert len(test) == 80  # held-out problems are distinct: each is an independent trial
    with pytest.raises(DataError, match="distinct held-out"):
        arith.make_problems(500, split="test", digits=2, addend_digits=1)  # only ~200 exist, and at most half are drawn


def test_generator_is_deterministic_and_honours_the_difficulty_knob():
    rows = arith.make_problems(200, seed=3, digits=3)
    assert rows == arith.make_problems(200, seed=3, digits=3)
    assert rows != arith.make_problems(200, seed=4, digits=3)
    assert all(0 <= r["a"] <= 999 and 0 <= r["b"] <= 999 for r in rows)
    assert max(r["a"] for r in rows) >= 900 and min(r["a"] for r in rows) < 100
    assert all(r["answer"] == str(r["a"] + r["b"]) and r["question"] == f"{r['a']:03d} + {r['b']:03d} ="
               for r in rows)
    with pytest.raises(DataError, match="digits"):
        arith.make_problems(5, digits=0)


@pytest.mark.parametrize("text, verdict", [
    ("<answer>132</answer>", "correct"),
    ("<answer> 0132\n</answer>", "correct"),
    ("<answer>131</answer>", "wrong"),
    ("<answer>-132</answer>", "malformed"),
    ("<answer>132.0</answer>", "malformed"),
    ("<answer>one hundred</answer>", "malformed"),
    ("132", "missing"),
    ("<answer>132", "missing"),
])
def test_grade(text, verdict):
    assert arith.grade(text, "132").rule == verdict
    assert arith.TASK.grade(text, "132").correct == (verdict == "correct")


def test_reward_is_the_graders_verdict():
    completions = ["<answer>132</answer>", "<answer>131</answer>", "132", "<answer>x</answer>"]
    fn = arith.arith_correct()
    assert fn(completions, answer=["132"] * 4) == [1.0, 0.0, 0.0, 0.0]
    assert fn(completions, answer=["132"] * 4) == [float(arith.grade(c, "132").correct) for c in completions]
    chat = [[{"role": "assistant", "content": "<answer>7</answer>"}]]
    assert arith.arith_correct(reward=2.0)(chat, answer=["7"]) == [2.0]
    with pytest.raises(ValueError, match="answer"):
        fn(completions)


def test_reward_is_in_the_registry():
    from unsloth_grpo.rewards import available_rewards

    assert "arith_correct" in available_rewards()


def test_matches_format():
    assert arith.TASK.matches_format("<answer>12</answer>")
    assert not arith.TASK.matches_format("<answer>12</answer> extra")
    assert not arith.TASK.matches_format("<answer>1 2</answer>")


def test_difficulty_comes_from_data_subset_and_bad_values_are_explained():
    assert arith.difficulty(RECIPE.resolve(overrides=["data.subset=digits=3"])) == {"digits": 3, "addend_digits": None}
    assert arith.difficulty(RECIPE.resolve(overrides=["data.subset=digits=3,addend_digits=1"]))["addend_digits"] == 1
    with pytest.raises(DataError, match="digits=3"):
        arith.difficulty(RECIPE.resolve(overrides=["data.subset=digit=3"]))
    with pytest.raises(DataError, match="synthetic"):
        arith.TASK.load(RECIPE.resolve(overrides=["data.source=foo.jsonl"]))


def test_sft_examples_are_solved_training_problems():
    cfg = RECIPE.resolve()
    ds = arith.TASK.sft_examples(cfg, 50)
    assert len(ds) == 50
    for row in ds:
        a, b = (int(x) for x in row["prompt"][-1]["content"].rstrip(" =").split(" + "))
        assert arith.split_of(a, b) == "train" and b <= 9  # the recipe's knob: digits=3,addend_digits=1
        assert row["completion"][0]["content"] == f"<answer>{a + b:04d}</answer>"
        assert arith.TASK.grade(row["completion"][0]["content"], str(a + b))
        assert arith.TASK.matches_format(row["completion"][0]["content"])


def test_held_out_rows_come_from_the_test_split():
    cfg = RECIPE.resolve(overrides=["data.split=test", "data.num_synthetic=40"])
    ds = arith.TASK.load(cfg)
    assert len(ds) == 40 and set(ds.column_names) >= {"prompt", "answer"}
    for row in ds:
        a, b = (int(x) for x in row["prompt"][-1]["content"].rstrip(" =").split(" + "))
        assert arith.split_of(a, b) == "test" and row["answer"] == str(a + b)


def test_shuffled_gold_keeps_the_answers_but_not_their_problems():
    import datasets

    ds = datasets.Dataset.from_dict({"prompt": [str(i) for i in range(100)], "answer": [str(i) for i in range(100)]})
    shuffled = shuffled_gold(ds, seed=1)
    assert sorted(shuffled["answer"]) == sorted(ds["answer"])
    assert shuffled["prompt"] == ds["prompt"]
    assert sum(a == b for a, b in zip(shuffled["answer"], ds["answer"])) < 10


def test_wilson_interval():
    low, high = wilson_interval(250, 500)
    assert low == pytest.approx(0.4563, abs=1e-3) and high == pytest.approx(0.5437, abs=1e-3)
    assert wilson_interval(0, 500)[0] == 0.0 and 0 < wilson_interval(0, 500)[1] < 0.01


def test_controls_need_an_sft_then_grpo_config():
    check_two_stage(RECIPE.resolve())
    with pytest.raises(ConfigError, match=r"stages \[sft, grpo\]"):
        check_two_stage(RECIPE.resolve(overrides=["stages=[]"]))


def test_recipe_config_has_no_problems_and_round_trips(tmp_path):
    from unsloth_grpo.config import dump_config, load_config

    cfg = RECIPE.resolve()
    assert cfg.problems() == []
    dump_config(cfg, tmp_path / "c.yaml")
    assert load_config(tmp_path / "c.yaml") == cfg
    assert load_config("recipes/arith.yaml") == cfg


def test_digits_tokenizer_gives_every_digit_its_own_token(tmp_path):
    from unsloth_grpo.models.builtin import build_tokenizer

    tok = build_tokenizer(tmp_path, split_digits=True)
    pieces = tok.tokenize("<answer>4321</answer>")
    assert [p for p in pieces if p.strip("Ġ").isdigit()] == ["4", "3", "2", "1"]
    plain = build_tokenizer(tmp_path / "plain")
    assert any(len(p.strip("Ġ")) > 1 and p.strip("Ġ").isdigit() for p in plain.tokenize("1234 5678 99 100"))


def test_builtin_digits_model_is_a_known_name_and_typos_list_the_choices():
    from unsloth_grpo.hardware.backend import BackendError
    from unsloth_grpo.models.ref import BUILTIN_MODELS, model_ref

    assert "builtin:tiny-digits" in BUILTIN_MODELS
    with pytest.raises(BackendError, match="builtin:tiny-digits"):
        model_ref("builtin:tiny-digit").path()


@pytest.mark.slow
def test_run_controls_trains_every_arm_from_one_sft_start(tmp_path):
    """The controls runner on a few steps: every arm is trained and graded on the same held-out problems.

    This checks the machinery, not the learning claim (docs/accuracy_demo.md has the measured table).
    """
    from unsloth_grpo.experiments.controls import ARMS, run_controls

    cfg = RECIPE.resolve(output_dir=str(tmp_path / "run"), overrides=[
        "evaluation.limit=40", "training.per_device_train_batch_size=16", "data.num_synthetic=64",
        "stages=[{name: sft, kind: sft, max_steps: 8, learning_rate: 0.003, num_examples: 32},"
        " {name: grpo, kind: grpo, max_steps: 2}]",
    ])
    result = run_controls(cfg, log=lambda msg: None)
    assert set(result["accuracy"]) == {"sft", *ARMS}
    assert all(e["n"] == 40 and 0.0 <= e["ci95"][0] <= e["accuracy"] <= e["ci95"][1] <= 1.0
               for e in result["evals"].values())
    assert set(result["grpo_reward"]) == {"grpo", "shuffled_grpo"}
    assert not any((tmp_path / "run" / arm).exists() for arm in ("sft", *ARMS))  # outputs cleaned up


def test_training_evaluation_grades_and_checks_format_with_the_task():
    """The before/after and periodic evaluations use arith's own grader and format check; the generic
    reasoning-then-answer check scored every well-formed arith answer as out of format."""
    from unsloth_grpo.training.held_out import eval_kwargs

    kwargs = eval_kwargs(RECIPE.resolve())
    assert kwargs["matches_format"]("<answer>0049</answer>") and not kwargs["matches_format"]("49")
    assert kwargs["is_correct"]("<answer>0049</answer>", "49")
    # lenient accuracy beside it: the right sum out of format counts there, not in strict accuracy
    assert kwargs["lenient_correct"]("0049", "49") and not kwargs["is_correct"]("0049", "49")


def test_accuracy_demo_table_shows_strict_and_lenient_accuracy():
    from pathlib import Path

    from conftest import load_script

    demo = load_script(Path(__file__).resolve().parents[1] / "benchmarks" / "accuracy_demo.py")
    runs = [{"accuracy": {"sft": s, "grpo": g}, "lenient_accuracy": {"sft": ls, "grpo": lg},
             "evals": {"sft": {"correct": int(500 * s), "n": 500}, "grpo": {"correct": int(500 * g), "n": 500}},
             "seconds": {"sft": 10, "grpo": 20}} for s, g, ls, lg in ((0.2, 0.4, 0.5, 0.5), (0.3, 0.5, 0.6, 0.7))]
    rows = demo.summarize(runs)
    assert rows["grpo"]["lenient_mean"] == pytest.approx(0.6) and rows["sft"]["lenient_per_seed"] == [0.5, 0.6]
    text = demo.table(rows, 2, 500)
    assert "strict" in text.splitlines()[1] and "lenient" in text.splitlines()[1]
    assert text.splitlines()[3].split()[-2] == "60.0%"  # the GRPO row's lenient mean


@pytest.mark.slow
def test_smoke_preset_runs_both_stages_and_reports_accuracy_with_its_interval(tmp_path, capsys):
    from unsloth_grpo.recipes.arith import main

    assert main(["--preset", "smoke", "--output-dir", str(tmp_path / "run")]) == 0
    out = capsys.readouterr().out
    line = next(x for x in out.splitlines() if x.startswith("evaluation: accuracy"))
    assert "(95% CI " in line and "on 100 held-out problems" in line
    # 10 GRPO steps on a model that gets ~2-9% right move a few problems either way: the line says
    # whether that is more than chance flips (seed 0: 1 fixed, 4 broken, p=0.38), not just 0.09 -> 0.06
    assert " fixed, " in line and " broken: " in line and "(sign test p=" in line
    report = (tmp_path / "run" / "stages" / "02-grpo" / "report.md").read_text()
    # the GRPO stage starts from the SFT stage's adapter, not from the bare model
    assert "Baseline: `builtin:tiny-digits + the adapter of the stages before 'grpo' (stage 2 at its start)`" in report
    assert "Paired on the same problems (strict): " in report
    import json

    after = json.loads((tmp_path / "run" / "stages" / "02-grpo" / "eval_after" / "eval.json").read_text())
    assert after["n"] == 100 and after["accuracy_ci95"][0] <= after["accuracy"] <= after["accuracy_ci95"][1]
    assert after["format_compliance"] > 0.9  # 60 SFT steps teach the format (measured: 1.0)


#: Mean gain of GRPO over its SFT start on seeds 0-2, in accuracy (docs/development.md: how it was chosen).
MIN_MEAN_GAIN = 0.08


@pytest.mark.slow
def test_grpo_raises_held_out_accuracy_over_its_sft_start_on_three_seeds(tmp_path):
    """The learning claim, with margins that hold on every machine measured (docs/development.md).

    The arith recipe as shipped, seeds 0-2, the SFT start and the GRPO arm only, each graded
    greedily on 500 held-out sums. Measured on three 2-core x86_64 machines of the same kind, same
    code and versions (points): +29.6 / +20.0 / +23.4 (mean +24.3), +12.4 / +7.6 / +27.6 (mean
    +15.9), and the third in docs/development.md; a 5-seed run had seed 3 at +5.6. Where a seed
    lands moves with the machine (floating-point order), so no seed gets a floor of its own:
    asserted is a mean of at least +8 (about half the lowest machine's mean) and no seed losing
    accuracy. The benchmark runs in a fresh process, as a user runs it: in a long pytest process,
    earlier tests' imports (Unsloth's patches) could move a tiny RL run.
    """
    import json
    import subprocess
    import sys
    from pathlib import Path

    repo = Path(__file__).resolve().parents[1]
    out = tmp_path / "demo"
    proc = subprocess.run([sys.executable, str(repo / "benchmarks" / "accuracy_demo.py"), "--arms", "grpo",
                           "--seeds", "0", "1", "2", "--out", str(out)],
                          cwd=tmp_path, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = json.loads((out / "results.json").read_text())["summary"]
    gains = summary["grpo"]["delta_vs_sft"]
    assert len(gains) == 3 and sum(gains) / 3 >= MIN_MEAN_GAIN, gains
    assert min(gains) > 0, gains  # no seed goes down (lowest seen on any machine: +5.6)
    assert all(r["n"] == 500 for r in json.loads((out / "results.json").read_text())["runs"][0]["evals"].values())
    assert "after GRPO" in proc.stdout and "pooled 95% CI" in proc.stdout
