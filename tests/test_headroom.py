"""GRPO's headroom (unsloth_grpo.evaluation.headroom): pass@1, pass@K and the groups that mix right and wrong
answers, before GRPO trains; in a run's output and report, and in ``eval --samples K``."""

import itertools
import json

import pytest

from unsloth_grpo.config import ConfigError, load_config
from unsloth_grpo.evaluation import headroom as hr


def _brute_pass_at(groups, k):
    """The share of k-subsets of each group's samples that hold a right one, averaged over the groups."""
    shares = []
    for g in groups:
        subsets = list(itertools.combinations(g, k))
        shares.append(sum(any(s) for s in subsets) / len(subsets))
    return sum(shares) / len(shares)


GROUPS = [[True, False, False, False], [True, True, False, True], [False] * 4, [True] * 4, [False, False, True, False]]


@pytest.mark.parametrize("k", [1, 2, 3, 4])
def test_pass_at_over_groups_matches_brute_force(k):
    assert hr.pass_at(GROUPS, k) == pytest.approx(_brute_pass_at(GROUPS, k))
    assert hr.pass_at(GROUPS, 1) == pytest.approx(sum(map(sum, GROUPS)) / 20)  # pass@1: the mean correctness


def test_group_shares_count_mixed_all_right_and_all_wrong():
    assert hr.group_shares(GROUPS) == {"mixed": 0.6, "all_right": 0.2, "all_wrong": 0.2}
    with pytest.raises(ValueError):
        hr.group_shares([])


def _records(groups, cats=None):
    return [{"samples_correct": g, **({"category": cats[i]} if cats else {})} for i, g in enumerate(groups)]


def test_headroom_by_category_and_its_line():
    cats = ["addition", "subtraction", "subtraction", "addition", "subtraction"]
    h = hr.headroom(_records(GROUPS, cats), temperature=1.0)
    assert (h["prompts"], h["samples"], h["mixed"]) == (5, 4, 0.6)
    sub = h["by_category"]["subtraction"]
    assert sub["n"] == 3 and sub["pass@1"] == pytest.approx(_brute_pass_at([GROUPS[i] for i in (1, 2, 4)], 1))
    assert sub["pass@k"] == pytest.approx(2 / 3) and sub["mixed"] == pytest.approx(2 / 3)
    assert hr.headroom_line(h) == ("GRPO headroom (5 training prompts, 4 samples, T=1.0): pass@1 0.45, pass@4 0.80; "
                                   "60% of groups mixed; addition 0.62 -> 1.00, subtraction 0.33 -> 0.67")
    assert hr.headroom_warning(h) is None  # 60% mixed: nothing to warn about
    with pytest.raises(ValueError, match="same number of samples"):
        hr.headroom(_records([[True, False], [True]]), temperature=1.0)


def test_the_warning_when_every_answer_is_right():
    h = hr.headroom(_records([[True] * 8] * 16), temperature=1.0)
    warning = hr.headroom_warning(h)
    assert warning is not None and "0% of the 16 groups" in warning
    assert "100% get every sample right" in warning and "harder problems" in warning
    assert "higher training.temperature" in warning and "warm-up" not in warning


def test_the_warning_when_no_answer_is_right():
    h = hr.headroom(_records([[False] * 8] * 16), temperature=1.0)
    warning = hr.headroom_warning(h)
    assert warning is not None and "100% get every sample wrong" in warning
    assert "warm-up" in warning and "easier problems" in warning and "harder" not in warning


def test_the_warning_names_both_when_groups_agree_either_way():
    h = hr.headroom(_records([[True] * 4] * 10 + [[False] * 4] * 9 + [[True, False, False, False]]), temperature=1.0)
    assert h["mixed"] == 0.05
    warning = hr.headroom_warning(h)
    assert "50% get every sample right" in warning and "45% get every sample wrong" in warning


def test_gap_closed_sets_pass_at_1_after_against_pass_at_k_before():
    before = {"pass@1": 0.5, "pass@k": 0.9, "samples": 8, "mixed": 0.6, "prompts": 4, "temperature": 1.0}
    after = {**before, "pass@1": 0.7, "pass@k": 0.92, "mixed": 0.3}
    assert hr.gap_closed(before, after) == pytest.approx(0.5)
    assert hr.gap_closed({**before, "pass@k": 0.5}, after) is None  # no gap: pass@K = pass@1
    line = hr.after_line(before, after)
    assert "pass@1 0.50 -> 0.70 against pass@8 0.90 before (50% of the gap closed)" in line
    assert "60% -> 30% of groups mixed" in line


def test_sample_headroom_grades_every_sample_with_the_given_grader():
    rows = [{"prompt": f"q{i}", "answer": str(i), "category": "addition" if i % 2 else "subtraction"}
            for i in range(4)]
    asked = {}

    def generate(prompts, **kw):
        asked.update(kw, prompts=prompts)
        return [[p[1:], "x", p[1:]] for p in prompts]  # two of three samples right

    h = hr.sample_headroom(None, None, rows, samples=3, temperature=0.9, is_correct=lambda c, g: c == g,
                           max_new_tokens=7, generate_fn=generate, seed=5)
    assert asked["num_samples"] == 3 and asked["temperature"] == 0.9 and asked["max_new_tokens"] == 7
    assert asked["seed"] == 5 and asked["prompts"] == ["q0", "q1", "q2", "q3"]
    assert h["pass@1"] == pytest.approx(2 / 3) and h["pass@k"] == 1.0 and h["mixed"] == 1.0
    assert [r["samples_correct"] for r in h["records"]] == [[True, False, True]] * 4
    assert set(h["by_category"]) == {"addition", "subtraction"}
    with pytest.raises(ValueError, match="at least 2 samples"):
        hr.sample_headroom(None, None, rows, samples=1, temperature=0.9, is_correct=str.__eq__,
                           max_new_tokens=7, generate_fn=generate)


def test_headroom_rows_are_the_same_prompts_for_a_seed():
    rows = [{"prompt": str(i)} for i in range(100)]
    a, b = hr.headroom_rows(rows, 10, seed=3), hr.headroom_rows(rows, 10, seed=3)
    assert a == b and len(a) == 10 and len({r["prompt"] for r in a}) == 10
    assert hr.headroom_rows(rows[:4], 10, seed=3) == rows[:4]


@pytest.mark.parametrize("override", ["evaluation.headroom=1", "evaluation.headroom=-2",
                                      "evaluation.headroom_prompts=0"])
def test_config_refuses_a_headroom_that_cannot_make_groups(override):
    from unsloth_grpo.config import check

    with pytest.raises(ConfigError, match="headroom 0 \\(off\\) or >= 2"):
        check(load_config({}, overrides=[override]))


# ---------------------------------------------------------------- in a run, and in eval


def _half_right(monkeypatch):
    """The gsm8k task's grader made to call a completion right when its length is even: the random tiny
    model then gets mixed groups, as a model with headroom does."""
    from unsloth_grpo.tasks import gsm8k as task

    monkeypatch.setattr(task.TASK, "grader", lambda cfg: lambda completion, gold: len(completion) % 2 == 0)


@pytest.fixture
def headroom_run(tmp_path, monkeypatch, capsys):
    from unsloth_grpo.cli.recipe import run_recipe
    from unsloth_grpo.recipes.gsm8k import RECIPE

    _half_right(monkeypatch)
    out = tmp_path / "run"
    code = run_recipe(RECIPE, ["--preset", "smoke", "--output-dir", str(out), "training.max_steps=2",
                               "run.samples_every=0", "evaluation.headroom=4", "evaluation.headroom_prompts=6",
                               "evaluation.before_after=true", "evaluation.limit=2", "evaluation.max_new_tokens=4"])
    assert code == 0
    return out, capsys.readouterr().out


@pytest.mark.slow
def test_a_run_says_its_headroom_before_training_and_after(headroom_run):
    out, stdout = headroom_run
    before = json.loads((out / "headroom_before.json").read_text())
    after = json.loads((out / "headroom_after.json").read_text())
    assert before["prompts"] == after["prompts"] == 6 and before["samples"] == 4 and before["temperature"] == 1.2
    assert [r["prompt"] for r in before["records"]] == [r["prompt"] for r in after["records"]]
    lines = stdout.splitlines()
    start = [line for line in lines if line.startswith("GRPO headroom (6 training prompts, 4 samples, T=1.2): ")]
    assert start == [hr.headroom_line(before)]
    assert lines.index(start[0]) < next(i for i, line in enumerate(lines) if line.startswith("training: "))
    closing = hr.after_line(before, after)
    assert lines[-2] == closing and lines[-1].startswith("held-out (2 problems)")  # the run's last words
    report = (out / "report.md").read_text()
    assert "## GRPO headroom" in report and hr.headroom_line(before) in report and closing in report
    assert json.loads((out / "report.json").read_text())["headroom"]["after"]["pass@1"] == after["pass@1"]


@pytest.mark.slow
def test_eval_samples_k_reports_the_headroom_at_the_runs_temperature(headroom_run, monkeypatch, capsys):
    import argparse

    from unsloth_grpo.cli import evaluate as ev

    out, _ = headroom_run
    parser = argparse.ArgumentParser()
    ev.add_parser(parser.add_subparsers())
    args = parser.parse_args(["eval", "--model", str(out), "--split", "train", "--limit", "5", "--samples", "4",
                              "--output", str(out / "eval-k")])
    assert args.func(args) == 0
    printed = capsys.readouterr().out
    summary = json.loads((out / "eval-k" / "eval.json").read_text())
    h = summary["headroom"]
    assert (h["prompts"], h["samples"], h["temperature"]) == (5, 4, 1.2)  # the run's GRPO temperature
    assert summary["settings"]["temperature"] == 1.2
    assert h["pass@k"] == summary["pass@4"]
    assert "GRPO headroom (5 problems of split train, 4 samples, T=1.2): " in printed


def test_eval_without_samples_says_no_headroom(tmp_path):
    import argparse

    from unsloth_grpo.cli import evaluate as ev

    parser = argparse.ArgumentParser()
    ev.add_parser(parser.add_subparsers())
    args = parser.parse_args(["eval", "--model", "builtin:tiny", "--dataset", "synthetic", "--limit", "2",
                              "--max-new-tokens", "2", "--output", str(tmp_path / "e")])
    assert args.func(args) == 0
    summary = json.loads((tmp_path / "e" / "eval.json").read_text())
    assert "headroom" not in summary and summary["settings"]["temperature"] == 0.7


@pytest.mark.slow
def test_a_grpo_stage_after_a_warm_up_measures_its_headroom_and_the_run_reports_it(tmp_path, monkeypatch):
    """As the smollm2 preset runs: an SFT stage, then a GRPO stage whose start is the warm-up's adapter; the
    stage's folder holds the headroom, and the whole run's report.md and result carry it."""
    from unsloth_grpo.config import config_to_dict
    from unsloth_grpo.recipes.gsm8k import RECIPE
    from unsloth_grpo.training.train import train

    _half_right(monkeypatch)
    base = RECIPE.resolve(preset="smoke", output_dir=str(tmp_path / "run"), overrides=[
        "run.samples_every=0", "evaluation.before_after=true", "evaluation.limit=2", "evaluation.max_new_tokens=4",
        "evaluation.headroom=3", "evaluation.headroom_prompts=5"])
    d = config_to_dict(base)
    d["stages"] = [{"name": "warmup", "kind": "sft", "max_steps": 2, "num_examples": 16},
                   {"name": "grpo", "max_steps": 2, "training": {"temperature": 0.9}}]
    lines = []
    result = train(load_config(d), log=lines.append)
    stage = tmp_path / "run" / "stages" / "02-grpo"
    before = json.loads((stage / "headroom_before.json").read_text())
    assert (before["prompts"], before["samples"], before["temperature"]) == (5, 3, 0.9)  # the stage's temperature
    assert not (tmp_path / "run" / "stages" / "01-warmup" / "headroom_before.json").exists()  # SFT: no groups
    assert hr.headroom_line(before) in lines
    assert result.headroom["before"]["pass@1"] == before["pass@1"] and "records" not in result.headroom["before"]
    assert result.headroom_line() == hr.after_line(result.headroom["before"], result.headroom["after"])
    assert result.headroom_line() in (tmp_path / "run" / "report.md").read_text()


def test_a_resumed_training_reads_its_headroom_back_instead_of_sampling_a_trained_model(tmp_path):
    from unsloth_grpo.training.held_out import headroom_start

    cfg = load_config({}, overrides=["evaluation.headroom=4"])
    kept = {"prompts": 2, "samples": 4, "pass@1": 0.5, "records": []}
    said = []
    assert headroom_start(cfg, None, None, [], tmp_path, said.append, resumed=True) is None  # none was measured
    (tmp_path / "headroom_before.json").write_text(json.dumps(kept))
    assert headroom_start(cfg, None, None, [], tmp_path, said.append, resumed=True) == kept and said == []
    off = load_config({})
    assert headroom_start(off, None, None, [], tmp_path, said.append) is None  # evaluation.headroom: 0
