"""Health monitor: recorded metric streams in, exactly these warnings at exactly these steps out."""

from __future__ import annotations

import io
import json
from dataclasses import fields

import pytest

from unsloth_grpo.runs import read_health
from unsloth_grpo.training.monitor import (
    TRICK_WARNINGS,
    WARNING_NAMES,
    HealthChecker,
    HealthThresholds,
    make_health_callback,
)

# Short windows keep the streams readable; the defaults get their own healthy-run test.
SHORT = dict(collapse_window=5, no_signal_window=5, kl_window=2, flat_window=10, flat_min_delta=0.05,
             clipped_window=3, format_zero_window=8)


def row(step, reward, std=0.35, zero=0.2, kl=None, clipped=0.05, strict=None, soft=None, length=120.0):
    r = {"step": step, "reward": reward, "reward_std": std, "frac_reward_zero_std": zero,
         "completions/clipped_ratio": clipped, "completions/mean_length": length, "entropy": 1.2}
    if kl is not None:
        r["kl"] = kl
    r["rewards/strict_format/mean"] = strict if strict is not None else min(1.0, 0.05 * step)
    r["rewards/soft_format/mean"] = soft if soft is not None else min(1.0, 0.1 + 0.05 * step)
    r["rewards/correctness/mean"] = 0.5 * reward
    return r


def fired(stream, **overrides):
    checker = HealthChecker(HealthThresholds(**{**SHORT, **overrides}))
    return [(w.name, w.step) for w in checker.feed(stream)]


def healthy(n=40):
    # rising reward with run-to-run wobble, diverse groups, small KL, strict format learnt at step 6
    return [row(s, 0.2 + 0.03 * s + (0.04 if s % 2 else -0.04), std=0.4 - 0.003 * s, zero=0.1 + 0.1 * (s % 3 == 0),
                kl=0.002 * s, strict=0.0 if s <= 5 else min(1.0, 0.1 * (s - 5))) for s in range(1, n + 1)]


def test_healthy_stream_fires_nothing():
    assert fired(healthy()) == []


def test_healthy_long_run_fires_nothing_with_default_thresholds():
    stream = [row(s, 0.1 + 0.01 * s + 0.05 * ((s * 7) % 5 - 2) / 2, std=0.3 + 0.05 * (s % 4 == 0),
                  zero=0.3 if s % 5 else 0.6, kl=min(0.2, 0.001 * s), clipped=0.1 if s % 7 else 0.45,
                  strict=0.0 if s <= 40 else min(1.0, 0.02 * (s - 40)))
              for s in range(1, 301)]
    checker = HealthChecker()
    assert checker.feed(stream) == []


def test_converged_plateau_is_not_flat():
    # rises to 1.0 by step 15, then sits there: converged, not stuck
    stream = [row(s, min(1.0, 0.1 + 0.06 * s), std=0.3) for s in range(1, 41)]
    assert fired(stream) == []


def test_collapse_fires_once_at_the_fifth_low_step():
    stream = [row(s, 0.2 + 0.05 * s) for s in range(1, 11)]
    stream += [row(s, 0.75, std=0.05, zero=0.9) for s in range(11, 31)]
    # no_signal would hold from step 15 too, but the collapse warning already explains it
    assert fired(stream) == [("mode_collapse", 15)]


def test_std_low_from_the_start_is_no_signal_not_collapse():
    # a reward that never varies: everything scores 0 (too strict); the format is never produced
    stream = [row(s, 0.0, std=0.0, zero=1.0, strict=0.0, soft=0.0) for s in range(1, 21)]
    assert fired(stream) == [("no_signal", 5), ("format_zero", 8), ("format_zero", 8), ("flat_reward", 10)]
    ws = HealthChecker(HealthThresholds(**SHORT)).feed(stream)
    assert [list(w.values)[0] for w in ws if w.name == "format_zero"] == [
        "rewards/strict_format/mean", "rewards/soft_format/mean"]


def test_no_signal_needs_the_window_mean_above_the_threshold():
    zeros = [0.5, 0.9, 0.9, 0.9, 0.9, 0.9, 0.5, 0.5]  # window means from step 5: 0.82, 0.9, 0.82, 0.74
    stream = [row(s, 0.3 + 0.05 * s, std=0.2, zero=z) for s, z in enumerate(zeros, 1)]
    assert fired(stream) == [("no_signal", 5)]
    assert fired(stream, no_signal_frac=0.85) == [("no_signal", 6)]
    assert fired(stream, no_signal_frac=0.95) == []


def test_a_high_share_of_flat_groups_recommends_dynamic_sampling_once():
    # half the groups teach nothing, the rest learn (the reward rises): wasteful, not broken
    stream = [row(s, 0.2 + 0.02 * s, zero=0.5 if s % 2 else 0.4) for s in range(1, 41)]
    checker = HealthChecker(HealthThresholds(**SHORT))
    (w,) = checker.feed(stream)
    assert (w.name, w.step) == ("wasted_groups", 20) and w.values["window_mean"] == pytest.approx(0.45)
    assert "training.dynamic_sampling: refill" in w.fix and "Measured:" in w.fix
    assert "45%" in w.message
    # with dynamic sampling on (its metrics are logged) there is nothing to recommend
    on = [{**r, "dynamic_sampling/rounds": 1.5} for r in stream]
    assert fired(on) == []
    # a share below the threshold, or one that no_signal explains, does not fire it
    assert fired(stream, wasted_groups_frac=0.5) == []
    flat = [row(s, 0.2, std=0.0, zero=0.9, strict=1.0, soft=1.0) for s in range(1, 41)]
    assert "wasted_groups" not in {n for n, _ in fired(flat)}
    with pytest.raises(ValueError, match="wasted_groups_frac=0"):
        HealthThresholds(wasted_groups_frac=0)


def test_kl_spike_alone_does_not_fire_but_sustained_kl_does():
    stream = []
    for s in range(1, 26):
        kl = 0.05 + 0.01 * s
        if s == 12:
            kl = 0.6  # a single spike
        if s >= 20:
            kl = 0.7 + 0.1 * (s - 20)
        stream.append(row(s, 0.2 + 0.04 * s, kl=kl))
    assert fired(stream) == [("kl_blowup", 21)]
    assert fired(stream, kl_window=1) == [("kl_blowup", 12)]
    checker = HealthChecker(HealthThresholds(**SHORT))
    (w,) = checker.feed(stream)
    assert w.values["kl"] == pytest.approx(0.8)
    assert "learning rate" in w.fix


def test_flat_reward_fires_when_the_window_fills():
    stream = [row(s, 0.45 if s % 2 else 0.55, std=0.3) for s in range(1, 31)]
    assert fired(stream) == [("flat_reward", 10)]
    (w,) = HealthChecker(HealthThresholds(**SHORT)).feed(stream)
    assert w.values["first_half_mean"] == pytest.approx(0.49)
    assert w.values["second_half_mean"] == pytest.approx(0.51)


def test_rise_then_fall_back_is_flat():
    # rises for 10 steps, then falls back: at step 19 the last 5 steps average 0.32, below the
    # first 5 steps' 0.28 + 0.05 and below the 5 steps before them (0.512)
    up = [0.2 + 0.04 * s for s in range(10)]
    stream = [row(s, r) for s, r in enumerate(up + up[::-1] + [0.2] * 10, 1)]
    assert fired(stream) == [("flat_reward", 19)]


def test_length_clipped_needs_consecutive_high_steps():
    clipped = {4: 0.6, 5: 0.6, 6: 0.2, **{s: 0.7 for s in range(10, 20)}}
    stream = [row(s, 0.2 + 0.04 * s, clipped=clipped.get(s, 0.1)) for s in range(1, 20)]
    assert fired(stream) == [("length_clipped", 12)]


def test_format_zero_only_for_format_rewards_and_configurable():
    stream = [row(s, 0.2 + 0.04 * s, strict=0.0) for s in range(1, 21)]
    for r in stream:
        r["rewards/correctness/mean"] = 0.0
        r["rewards/tag_reward/mean"] = 0.0
    assert fired(stream) == [("format_zero", 8)]
    assert fired(stream, format_rewards=["tag_reward"]) == [("format_zero", 8)]
    ws = HealthChecker(HealthThresholds(**SHORT, format_rewards=["tag_reward"])).feed(stream)
    assert "tag_reward" in ws[0].message and "rewards/tag_reward/mean" in ws[0].values
    assert fired(stream, format_rewards=[]) == []


def test_format_zero_resets_when_the_reward_moves():
    strict = {s: (0.0 if s != 6 else 0.1) for s in range(1, 21)}
    stream = [row(s, 0.2 + 0.04 * s, strict=strict[s]) for s in range(1, 21)]
    assert fired(stream) == [("format_zero", 14)]


def test_non_training_logs_are_ignored():
    checker = HealthChecker(HealthThresholds(**SHORT))
    assert checker.update(5, {"eval/accuracy": 0.0}) == []
    assert checker.update(5, {"train_runtime": 12.0, "train_loss": 0.1}) == []
    assert checker.update(5, {"reward": float("nan")}) == []
    assert checker.fired == []


def test_ignored_warnings_do_not_fire():
    stream = [row(s, 0.0, std=0.0, zero=1.0, strict=0.0, soft=0.0) for s in range(1, 21)]
    assert fired(stream, ignore=["format_zero", "no_signal"]) == [("flat_reward", 10)]
    with pytest.raises(ValueError, match="unknown warning.*clipped.*valid: mode_collapse"):
        HealthThresholds(ignore=["clipped"])


def test_thresholds_have_help_and_check_values():
    assert all(f.metadata.get("help") for f in fields(HealthThresholds))
    assert HealthThresholds.from_dict({"kl_max": 0.3}).kl_max == 0.3
    with pytest.raises(ValueError, match="unknown monitor setting.*kl_mx.*valid:.*kl_max"):
        HealthThresholds.from_dict({"kl_mx": 0.3})
    with pytest.raises(ValueError, match="collapse_window=0"):
        HealthThresholds(collapse_window=0)
    with pytest.raises(ValueError, match="no_signal_frac=1.5"):
        HealthThresholds(no_signal_frac=1.5)
    with pytest.raises(ValueError, match="format_rewards"):
        HealthThresholds(format_rewards="strict_format")


def test_every_warning_name_is_reachable():
    names = set()
    streams = [
        [row(s, 0.2 + 0.05 * s) for s in range(1, 11)] + [row(s, 0.75, std=0.05, zero=0.9) for s in range(11, 20)],
        [row(s, 0.0, std=0.0, zero=1.0, strict=0.0) for s in range(1, 21)],
        [row(s, 0.2 + 0.04 * s, kl=0.9) for s in range(1, 5)],
        [row(s, 0.2 + 0.04 * s, clipped=0.9) for s in range(1, 5)],
        [{**row(s, 0.2 + 0.04 * s), "tools/call_frequency": 0.0} for s in range(1, 21)],
        [{**row(s, 0.2 + 0.04 * s), "tools/call_frequency": 1.0, "tools/failure_frequency": 1.0} for s in range(1, 21)],
        [{**row(s, 0.2 + 0.04 * s), "sampling/sampling_logp_difference/mean": 0.5} for s in range(1, 8)],
        [row(s, 0.2 + 0.02 * s, zero=0.5) for s in range(1, 21)],
        [{**row(s, 0.2 + 0.04 * s, strict=min(1.0, 0.1 * s), soft=min(1.0, 0.1 * s)), "rewards/correctness/mean": 0.0}
         for s in range(1, 21)],
    ]
    for stream in streams:
        names |= {n for n, _ in fired(stream)}
    # the completion checks are the trick watcher's (tests/test_tricks.py reaches each of them)
    assert names == set(WARNING_NAMES) - set(TRICK_WARNINGS)


def _trainer_objects():
    from transformers import TrainerControl, TrainerState

    return TrainerState(), TrainerControl()


def _collapse_stream():
    return [row(s, 0.2 + 0.05 * s) for s in range(1, 11)] + [row(s, 0.75, std=0.05, zero=0.9) for s in range(11, 21)]


@pytest.mark.parametrize("stop", [False, True])
def test_callback_writes_health_jsonl_and_stops_only_when_asked(tmp_path, stop):
    from rich.console import Console

    buf = io.StringIO()
    cb = make_health_callback(tmp_path, HealthThresholds(**SHORT, stop_on_collapse=stop),
                              console=Console(file=buf, width=200))
    state, control = _trainer_objects()
    stopped_at = None
    for logs in _collapse_stream():
        state.global_step = logs["step"]
        control = cb.on_log(None, state, control, logs={k: v for k, v in logs.items() if k != "step"})
        if control.should_training_stop and stopped_at is None:
            stopped_at = state.global_step
            assert control.should_save
    assert stopped_at == (15 if stop else None)
    records = read_health(tmp_path)
    assert [(r["step"], r["name"]) for r in records] == [(15, "mode_collapse")]
    assert set(records[0]) == {"step", "name", "message", "fix", "values"}
    assert json.loads((tmp_path / "health.jsonl").read_text().splitlines()[0])["values"]["reward_std"] == 0.05
    text = buf.getvalue()
    assert "mode_collapse" in text and "num_generations" in text
    assert ("stopping" in text) == stop


def test_fresh_run_replaces_old_health_file_and_resumed_run_appends(tmp_path):
    old = tmp_path / "health.jsonl"
    cb = make_health_callback(tmp_path, HealthThresholds(**SHORT))
    state, control = _trainer_objects()
    old.write_text('{"step": 3, "name": "old"}\n')
    state.global_step = 40  # resumed from a checkpoint
    cb.on_train_begin(None, state, control)
    assert old.exists()
    state.global_step = 0
    cb.on_train_begin(None, state, control)
    assert not old.exists()


def test_callback_without_output_dir_only_prints(tmp_path):
    from rich.console import Console

    buf = io.StringIO()
    cb = make_health_callback(None, HealthThresholds(**SHORT), console=Console(file=buf, width=200))
    state, control = _trainer_objects()
    for logs in _collapse_stream():
        state.global_step = logs["step"]
        cb.on_log(None, state, control, logs=logs)
    assert [w.name for w in cb.warnings] == ["mode_collapse"]
    assert "mode_collapse" in buf.getvalue()


def test_import_is_light():
    import subprocess
    import sys

    code = ("import sys, unsloth_grpo.training.monitor, unsloth_grpo.training.progress, unsloth_grpo.evaluation.plots, "
            "unsloth_grpo.evaluation.generation, unsloth_grpo.evaluation.evaluate; "
            "print(sorted(m for m in ('torch', 'transformers', 'trl', 'peft', 'datasets', 'matplotlib') "
            "if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


@pytest.mark.slow
def test_real_grpo_run_with_monitor_progress_samples_and_periodic_eval(tmp_path, tiny_model_dir):
    """A real TRL run on the tiny model: the reward is diverse for two steps, then constant, so the
    monitor sees a collapse at step 4 and (stop_on_collapse) ends the run there with a checkpoint."""
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    from unsloth_grpo.evaluation.evaluate import make_eval_callback
    from unsloth_grpo.training.progress import SampleRecorder, make_progress_callback, use_progress_line
    from unsloth_grpo.tasks.gsm8k import load_gsm8k

    path = tiny_model_dir
    tokenizer = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path)

    def alternating(completions, trainer_state, **kwargs):
        if trainer_state.global_step < 2:
            return [float(i % 2) for i in range(len(completions))]
        return [1.0] * len(completions)

    def strict_format(completions, **kwargs):
        return [0.0] * len(completions)

    out = tmp_path / "run"
    recorder = SampleRecorder(out, every=2, num_samples=2, weights=[1.0, 0.5], print_samples=False)
    args = GRPOConfig(output_dir=str(out), use_cpu=True, bf16=False, max_steps=10, learning_rate=1e-3,
                      per_device_train_batch_size=4, num_generations=4, max_completion_length=8,
                      logging_steps=1, save_strategy="no", report_to=[], gradient_checkpointing=False,
                      disable_tqdm=True, seed=0)
    trainer = GRPOTrainer(model=model, reward_funcs=recorder.wrap([alternating, strict_format]), args=args,
                          train_dataset=load_gsm8k("synthetic", limit=16), processing_class=tokenizer)
    thresholds = HealthThresholds(collapse_window=2, format_zero_window=3, stop_on_collapse=True)
    health = make_health_callback(out, thresholds, console=None)
    progress_buf = io.StringIO()
    trainer.add_callback(health)
    use_progress_line(trainer, make_progress_callback(file=progress_buf))
    assert not [c for c in trainer.callback_handler.callbacks if type(c).__name__ == "PrinterCallback"]
    periodic = make_eval_callback(trainer, load_gsm8k("synthetic", split="test", limit=4), every=2,
                                  max_new_tokens=8)
    trainer.add_callback(periodic)
    trainer.train()

    assert trainer.state.global_step == 4
    assert (out / "checkpoint-4").is_dir()
    assert [(r["step"], r["name"]) for r in read_health(out)] == [(3, "format_zero"), (4, "mode_collapse")]
    lines = progress_buf.getvalue().splitlines()
    assert [ln.split("|")[0].split()[1] for ln in lines if ln.startswith("step")] == ["1/10", "2/10", "3/10", "4/10"]
    assert sum(ln.startswith("eval at step") for ln in lines) == 2
    samples = [json.loads(x) for x in (out / "samples.jsonl").read_text().splitlines()]
    assert [s["step"] for s in samples] == [0, 0, 2, 2]
    assert all(set(s["rewards"]) == {"alternating", "strict_format"} and "answer" in s for s in samples)
    assert [s["rewards"]["alternating"] for s in samples[:2]] == [0.0, 0.0]  # picks 0 and 2 of 4: even indices
    assert samples[0]["total"] == 0.0 and samples[2]["total"] == 1.0
    evals = [h for h in trainer.state.log_history if "eval/accuracy" in h]
    assert [h["step"] for h in evals] == [2, 4]
    assert {"eval/accuracy", "eval/format_compliance", "eval/mean_completion_tokens"} <= set(evals[0])
    assert [h["step"] for h in periodic.history] == [2, 4]
