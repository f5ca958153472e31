"""Progress line and sample recorder, without a trainer: fake clock, literal reward calls."""

from __future__ import annotations

import io
import json
from types import SimpleNamespace

import pytest

from unsloth_grpo.training.progress import ProgressLine, SampleRecorder, format_duration


class Clock:
    def __init__(self):
        self.t = 100.0

    def __call__(self):
        return self.t


def test_format_duration():
    assert [format_duration(x) for x in (0, 9.4, 59.6, 75, 3599, 3725, -1, float("nan"))] == [
        "0s", "9s", "1m00s", "1m15s", "59m59s", "1h02m", "?", "?"]


def test_progress_line_rate_and_eta_from_the_wall_clock():
    clock = Clock()
    p = ProgressLine(200, window=3, clock=clock)
    p.start(0)
    clock.t += 10.0  # a slow first step (warm-up)
    logs = {"reward": 0.5123, "reward_std": 0.2, "kl": 0.01234, "completions/mean_length": 87.4}
    assert p.line(1, logs) == ("step   1/200 (  0%) | reward 0.512 ± 0.200 | kl 0.0123 | len 87 | 10.00 s/step"
                               " | ETA 33m10s")
    for step in range(2, 6):
        clock.t += 2.0
        line = p.line(step, logs)
    # window of 3 intervals: steps 2..5 took 2 s each, the slow first step has left the window
    assert line.endswith("| 2.00 s/step | ETA 6m30s")
    assert line.startswith("step   5/200 (  2%) | reward 0.512 ± 0.200")


def test_progress_line_shows_the_share_of_flat_groups_and_sampling_rounds():
    p = ProgressLine(None, clock=Clock())
    assert p.line(1, {"reward": 0.5, "frac_reward_zero_std": 0.375}) == "step 1 | reward 0.500 | flat 38%"
    line = p.line(2, {"reward": 0.5, "frac_reward_zero_std": 0.25, "dynamic_sampling/rounds": 2.0})
    assert line.startswith("step 2 | reward 0.500 | flat 25% | rounds 2")


def test_progress_line_without_max_steps_or_optional_metrics():
    clock = Clock()
    p = ProgressLine(None, clock=clock)
    assert p.line(3, {"reward": 1.0}) == "step 3 | reward 1.000"
    clock.t += 3.0
    assert p.line(6, {"reward": 1.0, "kl": float("nan")}) == "step 6 | reward 1.000 | 1.00 s/step"


def _call(funcs, completions, step, answers, prompts=None):
    state = SimpleNamespace(global_step=step)
    prompts = prompts or [[{"role": "system", "content": "fmt"}, {"role": "user", "content": f"q{i // 2}"}]
                          for i in range(len(completions))]
    return [f(prompts=prompts, completions=completions, completion_ids=[[1]] * len(completions),
              trainer_state=state, log_extra=print, log_metric=print, answer=answers) for f in funcs]


def length_reward(completions, **kwargs):
    return [float(len(c[0]["content"])) for c in completions]


def sometimes(completions, **kwargs):
    return [None if i == 0 else 1.0 for i in range(len(completions))]


def test_recorder_keeps_names_and_scores_and_writes_every_n_steps(tmp_path):
    buf = io.StringIO()
    rec = SampleRecorder(tmp_path, every=3, num_samples=2, weights=[1.0, 0.5], file=buf, max_chars=40)
    wrapped = rec.wrap([length_reward, sometimes])
    assert [f.__name__ for f in wrapped] == ["length_reward", "sometimes"]
    completions = [[{"role": "assistant", "content": "x" * n}] for n in (1, 2, 3, 4)]
    answers = ["10", "10", "20", "20"]
    for step in range(0, 8):
        outs = _call(wrapped, completions, step, answers)
        assert outs == [[1.0, 2.0, 3.0, 4.0], [None, 1.0, 1.0, 1.0]]  # passed through unchanged
    records = [json.loads(x) for x in (tmp_path / "samples.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records] == [0, 0, 3, 3, 6, 6]
    first, second = records[:2]
    assert first == {"step": 0, "prompt": [{"role": "system", "content": "fmt"}, {"role": "user", "content": "q0"}],
                     "completion": "x", "rewards": {"length_reward": 1.0, "sometimes": None}, "total": 1.0,
                     "answer": "10"}
    assert second["completion"] == "xxx" and second["total"] == 3.5 and second["answer"] == "20"
    text = buf.getvalue()
    assert "--- sample at step 0: length_reward 1.00, sometimes None | total 1.00" in text
    assert "prompt: q1" in text and "completion: xxx" in text
    assert rec.records_written == 6


def test_recorder_names_callable_objects(tmp_path):
    class Scorer:
        def __call__(self, completions, **kwargs):
            return [0.5] * len(completions)

    rec = SampleRecorder(None, print_samples=False)
    (f,) = rec.wrap([Scorer()])
    assert f.__name__ == "Scorer"
    assert f(prompts=["p"], completions=["c"]) == [0.5]


def test_recorder_without_trainer_state_counts_batches_and_plain_text(tmp_path):
    rec = SampleRecorder(tmp_path, every=2, num_samples=1, print_samples=False)
    (f,) = rec.wrap([length_reward])
    for n in range(5):
        comps = [[{"role": "assistant", "content": "y" * (n + 1)}]]
        f(prompts=["plain prompt"], completions=comps)
    records = [json.loads(x) for x in (tmp_path / "samples.jsonl").read_text().splitlines()]
    assert [(r["step"], r["completion"], r["prompt"]) for r in records] == [
        (0, "y", "plain prompt"), (2, "yyy", "plain prompt"), (4, "yyyyy", "plain prompt")]
    assert "total" not in records[0]


def test_recorder_replaces_an_old_file_unless_resuming(tmp_path):
    old = tmp_path / "samples.jsonl"
    old.write_text('{"step": 1}\n')
    SampleRecorder(tmp_path, resume=True)
    assert old.exists()
    SampleRecorder(tmp_path)
    assert not old.exists()


def test_a_resumed_recorder_keeps_the_samples_before_its_checkpoint_and_goes_on_in_rhythm(tmp_path):
    old = tmp_path / "samples.jsonl"
    old.write_text("".join(json.dumps({"step": s, "completion": f"old {s}"}) + "\n" for s in (0, 3, 6, 9))
                   + '{"step": 12, "comp')  # and a torn last line
    rec = SampleRecorder(tmp_path, every=3, num_samples=1, print_samples=False, resume_step=8)

    class State:
        global_step = 0

    (f,) = rec.wrap([length_reward])
    for step in range(8, 13):  # the resumed run scores completions from step 8 on
        State.global_step = step
        f(prompts=["p"], completions=[[{"role": "assistant", "content": f"new {step}"}]], trainer_state=State)
    rows = [json.loads(x) for x in old.read_text().splitlines()]
    # steps 0, 3, 6 were recorded before the checkpoint at step 8 (kept; it used to be overwritten),
    # 9 and the torn 12 came after it (the resumed run records them again), every 3 steps from 6
    assert [(r["step"], r["completion"]) for r in rows] == [(0, "old 0"), (3, "old 3"), (6, "old 6"),
                                                           (9, "new 9"), (12, "new 12")]


def test_recorder_writes_only_on_the_main_process(tmp_path, monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "1")
    rec = SampleRecorder(tmp_path, every=1, print_samples=False)
    (f,) = rec.wrap([length_reward])
    f(prompts=["p"], completions=[[{"role": "assistant", "content": "z"}]])
    assert not (tmp_path / "samples.jsonl").exists()


def test_recorder_checks_its_arguments(tmp_path):
    with pytest.raises(ValueError, match="every=0"):
        SampleRecorder(tmp_path, every=0)
    with pytest.raises(ValueError, match="2 weights for 1 reward"):
        SampleRecorder(tmp_path, weights=[1.0, 2.0]).wrap([length_reward])


def test_progress_callback_prints_train_eval_and_end_lines():
    from transformers import TrainerControl, TrainerState

    from unsloth_grpo.training.progress import make_progress_callback

    buf = io.StringIO()
    cb = make_progress_callback(file=buf)
    state, control = TrainerState(), TrainerControl()
    state.max_steps = 10
    cb.on_train_begin(None, state, control)
    for step in (1, 2):
        state.global_step = step
        cb.on_log(None, state, control, logs={"reward": 0.25 * step, "reward_std": 0.1})
    cb.on_log(None, state, control, logs={"eval/accuracy": 0.5, "eval/format_compliance": 1.0})
    cb.on_log(None, state, control, logs={"train_runtime": 3.0})
    cb.on_train_end(None, state, control)
    lines = buf.getvalue().splitlines()
    assert lines[0].startswith("step  1/10 ( 10%) | reward 0.250 ± 0.100")
    assert lines[1].startswith("step  2/10 ( 20%) | reward 0.500 ± 0.100")
    assert lines[2] == "eval at step 2: accuracy 0.500, format_compliance 1.000"
    assert lines[3].startswith("done: 2 steps in ")
    assert len(lines) == 4


@pytest.mark.slow  # a model: the integration tier
def test_the_toolkit_run_ends_with_one_done_line(tmp_path, capsys):
    # the gsm8k smoke run ended "done: 4 steps in 2s" and then "done in 7.5s: 4 steps, ..."
    from unsloth_grpo.cli.recipe import run_recipe
    from unsloth_grpo.recipes import gsm8k

    code = run_recipe(gsm8k.RECIPE, ["--preset", "smoke", "--output-dir", str(tmp_path / "run"),
                                     "training.max_steps=2", "evaluation.before_after=false"])
    out = capsys.readouterr().out
    assert code == 0
    done = [line for line in out.splitlines() if line.startswith("done")]
    assert len(done) == 1 and done[0].startswith("done in ") and "2 steps" in done[0], done


def test_the_progress_callback_can_leave_the_end_line_to_its_caller():
    from transformers import TrainerControl, TrainerState

    from unsloth_grpo.training.progress import make_progress_callback

    buf = io.StringIO()
    cb = make_progress_callback(file=buf, end_line=False)
    state, control = TrainerState(), TrainerControl()
    cb.on_train_begin(None, state, control)
    cb.on_train_end(None, state, control)
    assert buf.getvalue() == ""
