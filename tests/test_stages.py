"""Multi-stage runs: config, SFT examples, resume planning, and two real stages on the tiny model."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from unsloth_grpo import runs
from unsloth_grpo.training import checkpoint as ck
from unsloth_grpo.training import stages as st
from unsloth_grpo.config import ConfigError, load_config
from unsloth_grpo.training.checks import config_problems


def _cfg(tmp_path, stages, *overrides, **top):
    from unsloth_grpo.recipes.gsm8k import RECIPE

    base = RECIPE.resolve(preset="smoke", output_dir=str(tmp_path / "run"),
                          overrides=["run.samples_every=0", *overrides])
    from unsloth_grpo.config import config_to_dict

    d = config_to_dict(base)
    d["stages"] = stages
    d.update(top)
    return load_config(d)


STAGES = [
    {"name": "preformat", "kind": "sft", "max_steps": 4, "learning_rate": 5e-3, "num_examples": 32},
    {"name": "format", "max_steps": 4, "rewards": [{"name": "xml_count", "weight": 1.0}],
     "training": {"temperature": 0.9}},
]


def test_stage_config_takes_the_stage_settings(tmp_path):
    cfg = _cfg(tmp_path, STAGES)
    s1, s2 = st.stage_config(cfg, 1), st.stage_config(cfg, 2)
    assert s1.output_dir == str(tmp_path / "run" / "stages" / "01-preformat")
    assert (s1.training.max_steps, s1.training.learning_rate) == (4, 5e-3)
    assert [r.name for r in s1.rewards] == ["xml_count", "correctness"]  # sft: unused, inherited
    assert s2.output_dir.endswith("02-format") and [r.name for r in s2.rewards] == ["xml_count"]
    assert s2.training.learning_rate == cfg.training.learning_rate  # not set on the stage: the recipe's
    assert s2.training.temperature == 0.9 and cfg.training.temperature != 0.9
    assert s1.stages == [] and s2.stages == []
    assert config_problems(cfg) == []


def test_stage_problems_name_the_stage_and_the_fix(tmp_path):
    bad = [
        {"name": "a", "kind": "dpo", "max_steps": 3},
        {"name": "a", "max_steps": 0},
        {"name": "bad name", "kind": "sft", "rewards": [{"name": "xml_count"}]},
        {"name": "c", "training": {"temprature": 0.5}},
        {"name": "d", "training": {"max_steps": 5}},
        {"name": "e", "rewards": [{"name": "no_such_reward"}]},
    ]
    problems = config_problems(_cfg(tmp_path, bad))
    text = "\n".join(problems)
    assert "stages[0] (a): kind 'dpo' is not one of grpo, sft" in text
    assert "stages[1] (a): name 'a' is used twice" in text
    assert "stages[1] (a): max_steps=0 must be at least 1" in text
    assert "stages[2] (bad name): name 'bad name' must be letters" in text
    assert "stages[2] (bad name): an sft stage trains on examples, not rewards" in text
    assert "stages[3] (c): training.temprature is not a field of the installed TRL's GRPOConfig; " \
           "did you mean 'training.temperature'?" in text
    assert "stages[4] (d): set max_steps and learning_rate on the stage itself" in text
    assert any(p.startswith("stages[5] (e): rewards[0] (no_such_reward)") for p in problems)
    # a stage list where every GRPO stage brings its rewards needs none at the top
    ok = _cfg(tmp_path, [{"name": "s", "kind": "sft"}, {"name": "g", "rewards": [{"name": "xml_count"}]}],
              rewards=[])
    assert config_problems(ok) == []
    with pytest.raises(ConfigError, match="unknown config key 'stages\\[0\\].steps'"):
        _cfg(tmp_path, [{"name": "x", "steps": 3}])


def test_a_step_count_or_learning_rate_the_stages_would_ignore_is_refused_with_the_two_fixes():
    """The real-model preset trains in stages, each with its own steps: ``training.max_steps=4`` typed as
    a short try was silently ignored (the run trained 20 + 30 steps; docs/export.md's command did)."""
    from unsloth_grpo.cli import main
    from unsloth_grpo.recipes.gsm8k import RECIPE

    with pytest.raises(ConfigError, match=r"training.max_steps would be ignored: this config trains in stages "
                                          r"\(sft \(sft, 20 steps\), grpo \(grpo, 30 steps\)\).*\(stages.0.max_steps=... "
                                          r"stages.1.max_steps=...\), or add stages=\[\]"):
        RECIPE.resolve(preset="smollm2", overrides=["training.max_steps=4"])
    with pytest.raises(ConfigError, match="training.learning_rate would be ignored"):
        RECIPE.resolve(preset="smollm2", overrides=["training.learning_rate=1e-4"])
    # with stages=[] the same settings train one GRPO stage; other training.* settings pass to every stage
    one = RECIPE.resolve(preset="smollm2", overrides=["stages=[]", "training.max_steps=4"])
    assert one.stages == [] and one.training.max_steps == 4
    staged = RECIPE.resolve(preset="smollm2", overrides=["training.temperature=0.9", "stages.1.max_steps=4"])
    assert [s.max_steps for s in staged.stages] == [20, 4]
    assert main(["train", "--recipe", "gsm8k", "--preset", "smollm2", "training.max_steps=4"]) == 2


def test_sft_examples_are_in_the_answer_format(tmp_path):
    from unsloth_grpo.grading import extract_answer, matches_format
    from unsloth_grpo.tasks.gsm8k import SYSTEM_PROMPT, make_synthetic_problems, parse_gold

    cfg = _cfg(tmp_path, STAGES)
    ds = st.sft_dataset_for(st.stage_config(cfg, 1), 12)
    assert len(ds) == 12
    gold = [parse_gold(p["answer"]) for p in make_synthetic_problems(12, seed=cfg.seed)]
    for row, g in zip(ds, gold):
        text = row["completion"][0]["content"]
        assert matches_format(text), text
        assert extract_answer(text).strip() == g
        assert "<<" not in text  # GSM8K's calculator notes are dropped
        assert row["prompt"][0] == {"role": "system", "content": SYSTEM_PROMPT}


def test_sft_examples_need_worked_answers(tmp_path):
    from unsloth_grpo.data import DataError

    data = tmp_path / "qa.jsonl"
    data.write_text(json.dumps({"question": "2+2?", "answer": "4"}) + "\n")
    cfg = _cfg(tmp_path, STAGES, data={"source": str(data), "max_prompt_tokens": 256})
    with pytest.raises(DataError, match="line 1 has none"):
        st.sft_dataset_for(st.stage_config(cfg, 1), 5)


def _fake_stage(cfg, i, *, complete=False, ckpt_steps=()):
    d = st.stage_dir(cfg, i)
    d.mkdir(parents=True, exist_ok=True)
    if complete:
        (d / "adapter_model.safetensors").write_bytes(b"w")
        (d / st.STAGE_COMPLETE).write_text(json.dumps({"stage": i, "steps": 4}))
    for step in ckpt_steps:
        staged = d / f"checkpoint-{step}"
        staged.mkdir()
        (staged / "adapter_model.safetensors").write_bytes(b"w")
        ck.finalize_checkpoint(staged, d, step=step, stage=i, stage_name=cfg.stages[i - 1].name)
    return d


def test_plan_resume(tmp_path):
    cfg = _cfg(tmp_path, STAGES + [{"name": "third", "max_steps": 2}])
    assert st.plan_resume(cfg, None) == (1, None)
    assert st.plan_resume(cfg, True) == (1, None)  # nothing yet: start at the beginning
    _fake_stage(cfg, 1, complete=True, ckpt_steps=[4])
    with pytest.raises(ck.CheckpointError, match=r"train\(cfg, resume=True\)") as refused:
        st.plan_resume(cfg, None)
    assert "pass --resume" in refused.value.command_line  # what the command line says instead
    # stage 1 done, stage 2 never checkpointed: start stage 2 fresh (from stage 1's adapter)
    assert st.plan_resume(cfg, True) == (2, None)
    _fake_stage(cfg, 2, ckpt_steps=[2])
    first, info = st.plan_resume(cfg, True)
    assert first == 2 and info.step == 2 and info.stage == 2
    # explicitly going back to stage 1's checkpoint reruns from there
    first, info = st.plan_resume(cfg, str(st.stage_dir(cfg, 1) / "checkpoints" / "checkpoint-4"))
    assert (first, info.stage, info.step) == (1, 1, 4)
    # a checkpoint in a stage after one that never finished is refused
    _fake_stage(cfg, 3, ckpt_steps=[1])
    with pytest.raises(ck.CheckpointError, match="stage 2 never finished"):
        st.plan_resume(cfg, str(st.stage_dir(cfg, 3) / "checkpoints" / "checkpoint-1"))


def test_summary_text():
    summary = [{"stage": 1, "name": "fmt", "kind": "grpo", "steps": 10, "learning_rate": 0.01, "seconds": 3.2,
                "metrics": {"reward": {"first5": 0.05, "last5": 0.4, "delta": 0.35}}, "adapter_change_l2": 1.5}]
    assert st.describe_summary(summary) == \
        "stage 1 fmt (grpo, 10 steps, lr 0.01, 3s): reward 0.05 -> 0.4; adapter moved 1.5 (L2)"


def test_a_stage_too_short_to_compare_its_ends_says_so(capsys):
    """A 5-step stage's first 5 and last 5 logged steps are the same five: it said "reward 2.14 -> 2.14"."""
    from types import SimpleNamespace

    from unsloth_grpo.cli.recipe import _report
    from unsloth_grpo.config import StageConfig
    from unsloth_grpo.training.results import TrainResult

    rows = [{"step": i, "reward": r} for i, r in enumerate([2.0, 2.1, 2.2, 2.2, 2.2], 1)]
    stage = StageConfig(name="grpo", max_steps=5)
    scfg = SimpleNamespace(rewards=[], training=SimpleNamespace(learning_rate=1e-4))
    entry = st.summarize_stage(2, stage, SimpleNamespace(metrics=rows, global_step=5, seconds=1.0), None, scfg)
    assert entry["metrics"]["reward"] == {"mean": 2.14, "logged": 5}
    assert st.closing_lines([entry]) == [
        "stage 2 grpo (grpo, 5 steps): reward 2.140 over 5 logged steps (too short to compare its first and last 5)"]
    long = [{"step": i, "reward": float(i)} for i in range(1, 11)]
    entry = st.summarize_stage(2, stage, SimpleNamespace(metrics=long, global_step=10, seconds=1.0), None, scfg)
    assert entry["metrics"]["reward"] == {"first5": 3.0, "last5": 8.0, "delta": 5.0, "logged": 10}
    # a run without stages says it the same way
    assert _report(TrainResult(Path("out"), rows, {}, 1.0, 5)) == 0
    assert "5 steps, mean reward 2.140 over 5 logged steps (too short to compare its first and last 5); " \
           "outputs in out" in capsys.readouterr().out
    assert _report(TrainResult(Path("out"), long, {}, 1.0, 10)) == 0
    assert "mean reward first 5 logged steps 3.000 -> last 5 8.000" in capsys.readouterr().out


def _graded_as(where: Path, right: list[bool]) -> None:
    """An evaluation of 4 sums written at ``where``: the i-th right when ``right[i]``."""
    from unsloth_grpo.evaluation.evaluate import evaluate, write_eval

    rows = [{"prompt": f"q{i}", "answer": str(i)} for i in range(len(right))]
    answers = {f"q{i}": f"<answer>{i if ok else 99}</answer>" for i, ok in enumerate(right)}
    write_eval(evaluate(None, None, rows, generate_fn=lambda p, **k: [[answers[q]] for q in p]), where)


def test_a_multi_stage_runs_closing_lines_say_what_each_stage_changed(tmp_path, capsys):
    # the arith smoke run's GRPO stage lowered reward and accuracy, and its closing line spoke only of the
    # base model -> the last stage, so the stage that hurt was not named
    from unsloth_grpo.cli.recipe import _report
    from unsloth_grpo.training.results import TrainResult

    cfg = _cfg(tmp_path, [*STAGES, {"name": "more", "max_steps": 4}])
    run = Path(cfg.output_dir)
    _graded_as(run / "eval_before", [False] * 4)                        # the base model
    _graded_as(st.stage_dir(cfg, 2) / "eval_before", [True] * 3 + [False])  # after the SFT stage
    _graded_as(st.stage_dir(cfg, 2) / "eval_after", [True, True, False, False])
    summary = [
        {"stage": 1, "name": "preformat", "kind": "sft", "steps": 4,
         "metrics": {"loss": {"first5": 2.5, "last5": 0.9, "delta": -1.6}}},
        {"stage": 2, "name": "format", "kind": "grpo", "steps": 4,
         "metrics": {"reward": {"first5": 0.053, "last5": 0.013, "delta": -0.04}}},
        {"stage": 3, "name": "more", "kind": "grpo", "steps": 4, "metrics": {}},  # nothing graded around it
    ]
    st.add_held_out(cfg, summary)
    assert summary[0]["held_out"]["strict"] == [0.0, 0.75] and summary[0]["held_out"]["fixed"] == 3
    assert summary[1]["held_out"]["strict"] == [0.75, 0.5] and summary[1]["held_out"]["broken"] == 1
    assert "held_out" not in summary[2]
    result = TrainResult(run, seconds=1.0, global_step=12, stages=summary,
                         evaluation={"n": 4, "strict": [0.0, 0.5], "lenient": [None, None]})
    assert _report(result) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[1:4] == [
        "  stage 1 preformat (sft, 4 steps): loss 2.500 -> 0.900; held-out strict 0.000 -> 0.750 (3 fixed, 0 broken: "
        "within noise, sign test p=0.25)",
        "  stage 2 format (grpo, 4 steps): reward 0.053 -> 0.013; held-out strict 0.750 -> 0.500 (0 fixed, 1 broken: "
        "within noise, sign test p=1)",
        "  stage 3 more (grpo, 4 steps): no metrics logged"]
    assert out[4].startswith("  note: stage 2 format lowered its reward (0.053 -> 0.013) and held-out accuracy "
                             "(0.750 -> 0.500)")
    assert out[5] == "whole run (base model -> last stage), held-out (4 problems): strict 0.000 -> 0.500"


class _Recorder:
    """Records the LoRA weights each stage starts from."""

    def __new__(cls):
        from transformers import TrainerCallback

        class Rec(TrainerCallback):
            starts: list = []

            def on_train_begin(self, args, state, control, model=None, **kwargs):
                self.starts.append((args.output_dir, st.lora_state(model)))

        return Rec()


@pytest.mark.slow
def test_two_stages_in_order_then_resume_across_the_boundary(tmp_path):
    from safetensors.torch import load_file

    from unsloth_grpo.training.train import TrainingStopped, train

    quiet = lambda _m: None  # noqa: E731
    cfg = _cfg(tmp_path, STAGES, "training.save_steps=2")
    rec = _Recorder()
    result = train(cfg, callbacks=[rec], log=quiet)
    run = Path(cfg.output_dir)
    assert [Path(d).name for d, _ in rec.starts] == ["01-preformat", "02-format"]
    # stage 2 starts exactly from the adapter stage 1 saved, which SFT moved away from the fresh LoRA
    saved1 = load_file(str(run / "stages" / "01-preformat" / "adapter_model.safetensors"))
    start2 = rec.starts[1][1]
    assert set(saved1) == set(start2)
    assert max((saved1[k].float() - start2[k]).abs().max().item() for k in saved1) == 0.0
    start1 = rec.starts[0][1]
    assert max((saved1[k].float() - start1[k]).abs().max().item() for k in saved1) > 1e-3
    # combined metrics count steps across stages; the summary says what each stage changed
    rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    assert [(r["stage"], r["stage_step"], r["step"]) for r in rows] == \
        [(1, 1, 1), (1, 2, 2), (1, 3, 3), (1, 4, 4), (2, 1, 5), (2, 2, 6), (2, 3, 7), (2, 4, 8)]
    assert result.global_step == 8
    summary = json.loads((run / st.SUMMARY_FILE).read_text())
    assert [(s["name"], s["kind"], s["steps"]) for s in summary] == [("preformat", "sft", 4), ("format", "grpo", 4)]
    assert "loss" in summary[0]["metrics"] and "rewards/xml_count/mean" in summary[1]["metrics"]
    assert all(s["adapter_change_l2"] > 0 for s in summary)
    final = load_file(str(run / "adapter_model.safetensors"))  # the run's adapter is the last stage's
    last = load_file(str(run / "stages" / "02-format" / "adapter_model.safetensors"))
    assert all((final[k] == last[k]).all() for k in final)
    assert json.loads((run / "reproducibility.json").read_text())["stages"][1]["name"] == "format"

    # interrupt stage 2, then resume: stage 1 is not run again, stage 2 continues from its checkpoint
    stage1_metrics = (run / "stages" / "01-preformat" / "metrics.jsonl").read_text()
    import shutil

    shutil.rmtree(run)
    rec2 = _Recorder()
    with pytest.raises(TrainingStopped) as stop:
        train(cfg, callbacks=[_StageSignal("02-format", 2)], log=quiet)
    assert stop.value.code == 130
    assert runs.read_marker(runs.latest_checkpoint(run))["stage"] == 2
    assert (run / "stages" / "01-preformat" / st.STAGE_COMPLETE).exists()
    assert not (run / "stages" / "02-format" / st.STAGE_COMPLETE).exists()
    first_pass = (run / "stages" / "01-preformat" / "metrics.jsonl").read_text()
    resumed = train(cfg, resume=True, callbacks=[rec2], log=quiet)
    assert [Path(d).name for d, _ in rec2.starts] == ["02-format"]  # stage 1 was skipped
    assert (run / "stages" / "01-preformat" / "metrics.jsonl").read_text() == first_pass
    assert first_pass == stage1_metrics  # same seed, same stage 1
    assert resumed.global_step == 8
    rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == list(range(1, 9))
    again = load_file(str(run / "adapter_model.safetensors"))
    assert max((again[k] - final[k]).abs().max().item() for k in final) < 1e-6


def _StageSignal(stage_dirname: str, step: int):
    """SIGINT to this process at ``step`` of the stage writing to ``stage_dirname``."""
    from transformers import TrainerCallback

    class SendSigint(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            if Path(args.output_dir).name == stage_dirname and state.global_step == step:
                os.kill(os.getpid(), __import__("signal").SIGINT)

    return SendSigint()


def _completions(where: Path) -> list[str]:
    return [json.loads(line)["completion"] for line in (where / "eval_samples.jsonl").read_text().splitlines()]


@pytest.mark.slow
def test_a_grpo_stage_resumed_from_its_checkpoint_is_graded_at_its_start_with_the_previous_stages_adapter(tmp_path):
    """A GRPO stage stopped mid-way and resumed graded its "before" with the base model (the adapter of
    the stage before it was not loaded when its own checkpoint was), labelled as that adapter: GRPO was
    credited with SFT's gain. Its "before" is now what the uninterrupted run's was."""
    import shutil

    from unsloth_grpo.training.train import TrainingStopped, train

    quiet = lambda _m: None  # noqa: E731
    stages = [{**STAGES[0], "learning_rate": 3e-2}, STAGES[1]]  # an SFT that changes the greedy completions
    quick = ["evaluation.before_after=true", "evaluation.limit=4", "evaluation.batch_size=4",
             "evaluation.max_new_tokens=12", "training.save_steps=2"]
    cfg = _cfg(tmp_path, stages, *quick)
    run = Path(cfg.output_dir)
    train(cfg, log=quiet)
    start = _completions(run / "stages" / "02-format" / "eval_before")
    assert start != _completions(run / "eval_before")  # the base model and stage 2's start answer differently

    shutil.rmtree(run)
    with pytest.raises(TrainingStopped):
        train(cfg, callbacks=[_StageSignal("02-format", 2)], log=quiet)
    train(cfg, resume=True, log=quiet)
    assert _completions(run / "stages" / "02-format" / "eval_before") == start
    assert json.loads((run / st.SUMMARY_FILE).read_text())[1]["held_out"]["strict"][0] == \
        json.loads((run / "stages" / "02-format" / "eval_before" / "eval.json").read_text())["accuracy"]


def test_going_back_to_an_earlier_stage_sets_later_checkpoints_aside(tmp_path):
    """Resuming from stage 1's checkpoint-2 abandons what came after it: stage 1's checkpoint-4 and
    every checkpoint of stage 2. They are moved to each stage's abandoned/ folder, whole, and the
    log says where; nothing is deleted."""
    cfg = _cfg(tmp_path, STAGES)
    s1 = _fake_stage(cfg, 1, complete=True, ckpt_steps=[2, 4])
    s2 = _fake_stage(cfg, 2, complete=True, ckpt_steps=[2, 4])

    lines: list[str] = []  # the run's directories as the stages start; no model is loaded here
    first, resume_from = st.prepare_stages(cfg, str(s1 / "checkpoints" / "checkpoint-2"), log=lines.append)
    assert (first, resume_from.stage, resume_from.step) == (1, 1, 2)

    assert [c.name for c in (s1 / "checkpoints").iterdir()] == ["checkpoint-2"]
    assert not (s2 / "checkpoints").exists() or not list((s2 / "checkpoints").iterdir())
    assert not (s1 / st.STAGE_COMPLETE).exists() and not (s2 / st.STAGE_COMPLETE).exists()
    (moved1,) = (s1 / ck.ABANDONED_DIR).iterdir()
    (moved2,) = (s2 / ck.ABANDONED_DIR).iterdir()
    assert moved1.name.startswith("after-step-2-") and moved2.name.startswith("after-step-0-")
    assert sorted(c.name for c in moved1.iterdir()) == ["checkpoint-4"]
    assert sorted(c.name for c in moved2.iterdir()) == ["checkpoint-2", "checkpoint-4"]
    assert all(runs.check_checkpoint(c, contents=True)[0] for m in (moved1, moved2) for c in m.iterdir())
    assert [c.path for c in runs.list_checkpoints(cfg.output_dir)] == [s1 / "checkpoints" / "checkpoint-2"]
    said = "\n".join(lines)
    assert f"stage 1: resuming from step 2: moved the later checkpoints of the abandoned branch (checkpoint-4) to {moved1}" in said
    assert (f"stage 2 (format) runs again from its start (the run resumes at stage 1): moved the later "
            f"checkpoints of the abandoned branch (checkpoint-2, checkpoint-4) to {moved2}") in said


@pytest.mark.slow
def test_a_run_with_stages_is_graded_from_its_base_to_its_last_stage(tmp_path):
    """evaluation.before_after on a multi-stage run: the base model before the first stage, the last
    stage's adapter at the end (RUN/report.md, by category), and the run's closing held-out line; with it
    off, nothing is graded and the run still ends (a name clash once turned that into a crash)."""
    from unsloth_grpo.training.train import train

    quick = ["evaluation.limit=4", "evaluation.batch_size=4", "evaluation.max_new_tokens=4"]
    cfg = _cfg(tmp_path, STAGES, "evaluation.before_after=true", *quick)
    result = train(cfg, log=lambda _m: None)
    run = Path(cfg.output_dir)
    before = json.loads((run / "eval_before" / "eval.json").read_text())
    assert before["model"] == f"{cfg.model.name} (before training)" and before["n"] == 4
    report = json.loads((run / "report.json").read_text())
    assert report["n"] == 4 and {r["category"] for r in report["by_category"]} <= {
        "addition", "subtraction", "multiplication", "two-step"}
    assert (run / "stages" / "02-format" / "report.md").is_file()  # the GRPO stage's own start and end
    assert result.evaluation["strict"][0] == before["accuracy"]
    assert result.evaluation_line().startswith("whole run (base model -> last stage), held-out (4 problems): strict ")
    # each stage's own held-out change: the SFT stage between the base and the GRPO stage's start, the GRPO
    # stage from its start to its end, both read back from the run's gradings
    assert [s["held_out"]["n"] for s in result.stages] == [4, 4]
    assert result.stages[0]["held_out"]["strict"][0] == before["accuracy"]
    assert result.stages[1]["held_out"]["strict"][1] == result.evaluation["strict"][1]
    assert json.loads((run / st.SUMMARY_FILE).read_text())[1]["held_out"] == result.stages[1]["held_out"]

    off = _cfg(tmp_path / "off", STAGES, "evaluation.before_after=false")
    result = train(off, log=lambda _m: None)
    assert result.evaluation is None and not (Path(off.output_dir) / "report.md").exists()


def test_warmup_categories_are_the_kinds_every_earlier_sft_stage_kept(tmp_path):
    """What the trick watcher is told (issue 52): the kinds an SFT warm-up kept on purpose, for the stages after it."""
    sft = {"name": "warm", "kind": "sft", "max_steps": 2, "num_examples": 8, "data": {"categories": ["addition"]}}
    grpo = {"name": "grpo", "kind": "grpo", "max_steps": 2}
    assert st.warmup_categories(_cfg(tmp_path, [sft, grpo], "data.subset=easy"), 2) == ["addition"]
    assert st.warmup_categories(_cfg(tmp_path, [sft, grpo], "data.subset=easy"), 1) is None  # nothing before it
    every = dict(sft, data={})
    assert st.warmup_categories(_cfg(tmp_path, [every, grpo], "data.subset=easy"), 2) is None
    assert st.warmup_categories(_cfg(tmp_path, [every, sft, grpo], "data.subset=easy"), 3) is None  # one took all
    assert st.warmup_categories(_cfg(tmp_path, [grpo, dict(grpo, name="g2")]), 2) is None  # no warm-up at all
    twice = [sft, dict(sft, name="warm2", data={"categories": ["subtraction", "addition"]}), grpo]
    assert st.warmup_categories(_cfg(tmp_path, twice, "data.subset=easy"), 3) == ["addition", "subtraction"]


def test_the_grpo_stage_of_a_run_is_told_its_warm_ups_kinds(tmp_path, monkeypatch):
    """The stage runner hands each GRPO stage the kinds its warm-up kept (the preset: additions), so the trick
    watcher's fixes fit the run; without the filter it hands none. No model: the trainings are stood in for."""
    import types

    from unsloth_grpo.recipes.gsm8k import RECIPE
    from unsloth_grpo.training import train as train_module
    from unsloth_grpo.training.results import TrainResult

    told = {}

    def trained(kind):
        def fake(cfg, *_args, **kw):
            Path(cfg.output_dir).mkdir(parents=True)
            told[kw.get("stage", (0, None))] = kw.get("warmup_categories", kind)
            return TrainResult(Path(cfg.output_dir), global_step=1)
        return fake

    monkeypatch.setattr(train_module, "train_grpo", trained("grpo"))
    monkeypatch.setattr(st, "train_sft", trained("sft"))
    monkeypatch.setattr(st, "lora_state", lambda model: {})
    monkeypatch.setattr(st, "change_l2", lambda a, b: 0.0)
    monkeypatch.setattr(st, "copy_adapter", lambda a, b: None)
    loaded = types.SimpleNamespace(model=None, info=types.SimpleNamespace(to_dict=dict))
    for overrides, kinds in (([], ["addition"]), (["stages.0.data.categories=null"], None)):
        cfg = RECIPE.resolve(preset="smollm2", output_dir=str(tmp_path / str(kinds)),
                             overrides=[*overrides, "evaluation.before_after=false", "evaluation.headroom=0"])
        told.clear()
        train_module._train_stages(cfg, loaded, first=1, resume_from=None, log=lambda _m: None, dataset=[])
        assert told == {(1, "sft"): "sft", (2, "grpo"): kinds}
    # one GRPO training that continues a warm-up made elsewhere (the real-model benchmark's arms) is told by its caller
    told.clear()
    single = RECIPE.resolve(preset="smoke", output_dir=str(tmp_path / "single"))
    train_module.train(single, decision=object(), log=lambda _m: None, warmup_categories=["addition"])
    assert told == {(0, None): ["addition"]}


def test_grpo_stages_with_a_kl_term_measure_it_from_their_own_start_and_leave_no_copy_behind(tmp_path):
    """``training.beta > 0`` on a stage after a warm-up: TRL copies the adapter the stage starts from into a
    frozen ``ref`` adapter and measures the KL against it (the warm-up, not the base model). The copy used to
    outlive the stage, so a second GRPO stage with a KL term failed to add its own ("Adapter with name 'ref'
    already exists") and every stage folder held a second adapter."""
    from peft import get_peft_model_state_dict
    from transformers import TrainerCallback

    from unsloth_grpo.training.train import train

    class RefAtStart(TrainerCallback):
        seen: list = []

        def on_train_begin(self, args, state, control, model=None, **kwargs):
            has_ref = "ref" in getattr(model, "peft_config", {})
            ref = get_peft_model_state_dict(model, adapter_name="ref") if has_ref else None
            self.seen.append((Path(args.output_dir).name, st.lora_state(model), ref))

    stages = [dict(STAGES[0]),
              {"name": "kl1", "max_steps": 2, "training": {"beta": 0.5}},
              {"name": "kl2", "max_steps": 2, "training": {"beta": 0.5}}]
    cfg = _cfg(tmp_path, stages)
    rec = RefAtStart()
    result = train(cfg, callbacks=[rec], log=lambda _m: None)
    assert result.global_step == 8
    grpo_starts = [s for s in rec.seen if s[0].startswith("0") and s[0] != "01-preformat"]
    assert [s[0] for s in grpo_starts] == ["02-kl1", "03-kl2"]
    for name, start, ref in grpo_starts:
        assert ref is not None, f"{name}: no reference copy of the adapter it started from"
        assert set(ref) == set(start)
        # the reference is the adapter the stage started from (the warm-up's end, then kl1's end), not the base
        assert max((ref[k].float() - start[k]).abs().max().item() for k in start) == 0.0
        assert max(start[k].abs().max().item() for k in start if "lora_B" in k) > 0.0
    run = Path(cfg.output_dir)
    for d in ("02-kl1", "03-kl2"):
        rows = [json.loads(x) for x in (run / "stages" / d / "metrics.jsonl").read_text().splitlines()]
        assert "kl" in rows[0] and rows[0]["kl"] < 1e-6  # the policy is its reference at a stage's first step
        assert not (run / "stages" / d / "ref").exists()
    assert not (run / "ref").exists()
