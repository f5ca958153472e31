"""The outside check: our problems as an lm-evaluation-harness task, and lm-eval's counts against ours."""

from __future__ import annotations

import json

import pytest
import yaml

from unsloth_grpo.evaluation import harness
from unsloth_grpo.tasks.gsm8k import EXAMPLE_SYSTEM_PROMPT, load_gsm8k


def test_the_task_file_reads_the_problems_eval_grades(tmp_path):
    rows = load_gsm8k("synthetic", "test", subset="reworded", system_prompt=EXAMPLE_SYSTEM_PROMPT, num_synthetic=6,
                      seed=4)
    task = harness.write_task(rows, tmp_path / "task", system_prompt=EXAMPLE_SYSTEM_PROMPT, max_new_tokens=48,
                              stops=["<|im_end|>"])
    spec = yaml.safe_load(task.read_text())
    problems = [json.loads(x) for x in (tmp_path / "task" / harness.PROBLEMS_FILE).read_text().splitlines()]
    assert spec["dataset_kwargs"]["data_files"]["test"] == str((tmp_path / "task" / harness.PROBLEMS_FILE).resolve())
    assert [p["question"] for p in problems] == [r["prompt"][-1]["content"] for r in rows]
    assert [p["answer"] for p in problems] == list(rows["answer"])
    assert [p["category"] for p in problems] == list(rows["category"])
    assert spec["generation_kwargs"] == {"until": ["<|im_end|>"], "do_sample": False, "temperature": 0.0,
                                         "max_gen_toks": 48}
    assert (tmp_path / "task" / harness.SYSTEM_PROMPT_FILE).read_text() == EXAMPLE_SYSTEM_PROMPT
    command = (tmp_path / "task" / harness.COMMAND_FILE).read_text()
    assert "--apply_chat_template" in command and "--system_instruction" in command and "--log_samples" in command


@pytest.mark.parametrize("completion, strict, flexible", [
    ("<reasoning>\n9 - 2 = 7\n</reasoning>\n<answer>\n7\n</answer>", "7", "7"),
    ("<reasoning>\n9 - 2 = 7\n</reasoning>\n<answer>\n$1,200\n</answer>", "1,200", "$1,200"),  # "$", "," ignored
    ("9 - 2 = 7. The answer is 7.", None, "7."),
    ("<answer>7</answer> and then 12", "7", "12"),
])
def test_the_filters_read_what_our_strict_and_lenient_readings_read(completion, strict, flexible):
    import re

    spec = yaml.safe_load(harness.TASK_TEMPLATE.format(name="t", data='"x"', max_tokens=8, stops="[]"))
    patterns = {f["name"]: f["filter"][0] for f in spec["filter_list"]}

    def extract(name):
        found = re.findall(patterns[name]["regex_pattern"], completion)
        if not found:
            return None
        pick = found[patterns[name].get("group_select", 0)]
        return next((g for g in pick if g), None) if isinstance(pick, tuple) else pick

    assert extract("strict-match") == strict and extract("flexible-extract") == flexible


def test_read_samples_counts_each_filter(tmp_path):
    path = tmp_path / "samples.jsonl"
    lines = []
    for doc_id, (strict, flexible) in enumerate([(1, 1), (0, 1), (0, 0)]):
        for name, hit in (("strict-match", strict), ("flexible-extract", flexible)):
            lines.append({"doc_id": doc_id, "doc": {"question": f"q{doc_id}"}, "resps": [["c"]], "filter": name,
                          "exact_match": float(hit)})
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    counts = harness.read_samples(path)
    assert (counts["n"], counts["strict"], counts["flexible"]) == (3, 1, 2)


# ---------------------------------------------------------------- lm-eval against eval, on a real run


@pytest.mark.slow
def test_lm_eval_and_eval_give_the_same_counts_on_a_real_run(smollm2_dir, tmp_path):
    """A short SFT run of the real model (it writes the format and gets some problems right), graded by
    ``unsloth-grpo eval`` and, through the task file eval writes, by lm-evaluation-harness on the run's
    merged export: the same strict and lenient counts, within one problem."""
    pytest.importorskip("lm_eval", reason="lm-evaluation-harness is the optional extra [lmeval] (it is in [test])")
    import subprocess
    import sys

    from unsloth_grpo.recipes.gsm8k import RECIPE
    from unsloth_grpo.training.train import train

    run = tmp_path / "run"
    cfg = RECIPE.resolve(preset="smollm2", output_dir=str(run), overrides=[
        "model.backend=transformers", "evaluation.before_after=false", "run.samples_every=0",
        {"stages": [{"name": "sft", "kind": "sft", "max_steps": 10, "learning_rate": 2e-4, "num_examples": 80}]}])
    train(cfg, log=lambda _m: None)

    task_dir, out = tmp_path / "lm-eval-task", tmp_path / "eval"
    cli = [sys.executable, "-m", "unsloth_grpo.cli.main"]
    proc = subprocess.run([*cli, "eval", "--model", str(run), "--subset", "reworded", "--limit", "16",
                           "--batch-size", "16", "--output", str(out), "--lm-eval-task", str(task_dir)],
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    ours = [json.loads(x) for x in (out / "eval_samples.jsonl").read_text().splitlines()]
    merged = tmp_path / "merged"
    proc = subprocess.run([*cli, "export", "--model", str(run), "--merged", str(merged)],
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]

    import lm_eval
    from lm_eval.tasks import TaskManager

    results = lm_eval.simple_evaluate(
        model="hf", model_args={"pretrained": str(merged), "dtype": "float32"}, tasks=[harness.TASK_NAME],
        task_manager=TaskManager(include_path=str(task_dir)), apply_chat_template=True,
        system_instruction=(task_dir / harness.SYSTEM_PROMPT_FILE).read_text(), batch_size=16, log_samples=True,
        device="cpu")
    samples = results["samples"][harness.TASK_NAME]
    verdicts: dict[int, dict] = {}
    for s in samples:
        verdicts.setdefault(s["doc_id"], {})[s["filter"]] = bool(s["exact_match"])
    strict = sum(v["strict-match"] for v in verdicts.values())
    flexible = sum(v["flexible-extract"] for v in verdicts.values())
    our_strict, our_lenient = sum(r["correct"] for r in ours), sum(r["lenient_correct"] for r in ours)
    assert len(verdicts) == len(ours) == 16
    assert our_strict >= 4, "the SFT run should answer some problems in the format; nothing to compare otherwise"
    assert abs(strict - our_strict) <= 1 and abs(flexible - our_lenient) <= 1, (strict, our_strict, flexible, our_lenient)


# ---------------------------------------------------------------- what eval --lm-eval-task writes, by task


class _Loaded(Exception):
    """Raised where a model would load: a refusal that comes first never sees it."""


def _eval_cli(monkeypatch, tmp_path, task, *extra):
    """``unsloth-grpo eval --task TASK --lm-eval-task DIR`` with the model load and generation left out: the
    task file is written (the load gives a stand-in), then the evaluation stops."""
    import types

    from unsloth_grpo.cli import evaluate as cli_eval
    from unsloth_grpo.cli.main import main

    loads = []

    def load(*args, **kwargs):
        loads.append(args)
        return types.SimpleNamespace(model=None, tokenizer=None)

    def stop(*args, **kwargs):
        raise _Loaded

    monkeypatch.setattr(cli_eval, "_load_model", load)
    monkeypatch.setattr(cli_eval, "evaluate", stop)
    monkeypatch.setattr(harness, "stop_strings", lambda tokenizer: ["</s>"])
    task_dir = tmp_path / "task"
    argv = ["eval", "--model", "someone/model", "--task", task, "--dataset", "synthetic", "--limit", "6",
            "--output", str(tmp_path / "eval"), "--lm-eval-task", str(task_dir), *extra]
    try:
        code = main(argv)
    except _Loaded:
        code = None
    return code, loads, task_dir


def test_a_reasoning_gym_task_file_holds_the_oracle_number_not_the_encoded_gold(monkeypatch, tmp_path):
    """The reasoning_gym task's answer column is JSON (dataset, config, entry); lm-eval's filters compare a
    number, so the task file must hold the oracle (it held the JSON, and no completion could match it)."""
    pytest.importorskip("reasoning_gym", reason="the reasoning_gym extra: pip install 'unsloth-grpo[reasoning_gym]'")
    from unsloth_grpo.tasks.reasoning_gym import decode_gold, load_reasoning_gym

    code, loads, task_dir = _eval_cli(monkeypatch, tmp_path, "reasoning_gym")
    assert code is None and len(loads) == 1
    problems = [json.loads(x) for x in (task_dir / harness.PROBLEMS_FILE).read_text().splitlines()]
    assert problems  # the held-out split less the questions training also holds
    for p in problems:
        assert p["answer"].lstrip("-").isdigit(), p["answer"]
    rows = load_reasoning_gym([{"name": "chain_sum", "config": {"min_terms": 2, "max_terms": 3, "max_digits": 2}},
                               {"name": "leg_counting", "config": {"max_animals": 3}}], split="test",
                              num_synthetic=2048, limit=6, seed=0)
    assert [p["answer"] for p in problems] == [decode_gold(r["answer"]).oracle for r in rows]


@pytest.mark.parametrize("task", ["countdown", "json_extract"])
def test_a_task_whose_grade_is_not_a_number_is_refused_before_the_model_loads(monkeypatch, tmp_path, capsys, task):
    code, loads, task_dir = _eval_cli(monkeypatch, tmp_path, task)
    assert code == 2 and loads == [] and not task_dir.exists()
    err = capsys.readouterr().err
    assert f"--lm-eval-task: the {task} task's problem 0 has the gold" in err
    assert "Leave --lm-eval-task out" in err and "Traceback" not in err
