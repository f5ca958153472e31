"""The pipeline end to end: the real CLI on the tiny offline model, both backends, bad input."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from unsloth_grpo.config import load_config
from unsloth_grpo.training.checks import config_problems
from unsloth_grpo.recipes import gsm8k

REPO = Path(__file__).resolve().parents[1]


def _run(args, cwd, timeout=600):
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    return subprocess.run([sys.executable, *args], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=timeout)


def _first_last(metrics, n=5):
    rewards = [m["reward"] for m in metrics if "reward" in m]
    return sum(rewards[:n]) / n, sum(rewards[-n:]) / n


# smoke_run (tests/conftest.py): the README's smoke command in a fresh process, trained once per test run


@pytest.mark.slow
def test_smoke_recipe_leaves_adapter_metrics_config_and_learns(smoke_run):
    out, stdout = smoke_run
    for name in ("adapter_config.json", "adapter_model.safetensors", "tokenizer.json", "metrics.jsonl",
                 "config.yaml", "run_info.json", "health.jsonl", "samples.jsonl"):
        assert (out / name).exists(), name
    metrics = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in metrics] == list(range(1, 101))
    for key in ("reward", "reward_std", "frac_reward_zero_std", "rewards/xml_count/mean",
                "rewards/correctness/mean", "completions/mean_length"):
        assert key in metrics[-1], key
    first, last = _first_last(metrics)
    # one seed of a chaotic run: 0.02 -> 0.49 on one machine, -> 0.36 on another; the learning claim
    # with margins over seeds is test_transformers_backend_learns_on_every_seed
    assert last - first >= MIN_GAIN_PER_SEED, (first, last)
    resolved = load_config(out / "config.yaml")
    assert resolved == gsm8k.RECIPE.resolve(preset="smoke", output_dir=str(out))
    info = json.loads((out / "run_info.json").read_text())
    assert info["backend"]["backend"] == "unsloth" and info["backend"]["device"] == "cpu"
    assert "backend=unsloth device=cpu dtype=fp32 4bit=off vllm=off" in stdout
    assert "step 100/100" in stdout  # the progress line


@pytest.mark.slow
def test_training_changed_every_lora_matrix(smoke_run):
    from safetensors.torch import load_file

    out, _ = smoke_run
    weights = load_file(str(out / "adapter_model.safetensors"))
    lora_b = {k: v for k, v in weights.items() if "lora_B" in k}
    assert len(lora_b) == 2 * 7  # two layers x seven projections
    for name, tensor in lora_b.items():  # B starts at zero: any change comes from training
        assert tensor.abs().max().item() > 0, name


@pytest.mark.slow
def test_eval_cli_on_the_smoke_adapter(smoke_run, tmp_path):
    from unsloth_grpo.tasks.gsm8k import make_synthetic_problems

    out, _ = smoke_run
    data = tmp_path / "gsm8k_test.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in make_synthetic_problems(16, seed=9)))
    proc = _run(["-m", "unsloth_grpo.cli", "eval", "--model", str(out), "--dataset", str(data),
                 "--limit", "16", "--max-new-tokens", "12", "--backend", "transformers",
                 "--output", str(tmp_path / "eval")], cwd=REPO)
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = json.loads((tmp_path / "eval" / "eval.json").read_text())
    samples = [json.loads(x) for x in (tmp_path / "eval" / "eval_samples.jsonl").read_text().splitlines()]
    assert summary["n"] == len(samples) == 16
    assert summary["accuracy"] == sum(s["correct"] for s in samples) / 16
    assert summary["format_compliance"] == sum(s["format_ok"] for s in samples) / 16
    # the CLI evaluated the trained adapter: its greedy completions are the adapter model's, not the
    # base model's (how many tags one chaotic run learned to emit is not this test's business)
    from unsloth_grpo.evaluation.generation import generate
    from unsloth_grpo.hardware.backend import load_for_inference

    prompts = [s["prompt"] for s in samples]
    adapter = load_for_inference(str(out), backend="transformers", device="cpu", log=lambda _m: None)
    base = load_for_inference("builtin:tiny", backend="transformers", device="cpu", log=lambda _m: None)
    with_adapter = [c[0] for c in generate(adapter.model, adapter.tokenizer, prompts, max_new_tokens=12)]
    assert [s["completion"] for s in samples] == with_adapter
    assert with_adapter != [c[0] for c in generate(base.model, base.tokenizer, prompts, max_new_tokens=12)]


#: Gain in mean reward (last 5 steps minus first 5) of the transformers-backend smoke run, 60 steps,
#: measured 2026-11-30 on CPU: seed 0 0.006 -> 0.350, seed 1 0.006 -> 0.394, seed 2 0.043 -> 0.744.
#: Tiny-model RL is chaotic (the same seed lands elsewhere on another CPU or library version), so
#: the test asks for less than half the smallest gain per seed, and for the mean of the three.
MIN_GAIN_PER_SEED = 0.15
MIN_MEAN_GAIN = 0.3


@pytest.mark.slow
def test_transformers_backend_learns_on_every_seed(tmp_path):
    from unsloth_grpo.training.train import train

    gains = []
    for seed in (0, 1, 2):
        cfg = gsm8k.RECIPE.resolve(preset="smoke", output_dir=str(tmp_path / f"seed{seed}"),
                                   overrides=["model.backend=transformers", "training.max_steps=60", f"seed={seed}",
                                              "run.samples_every=0"])
        result = train(cfg, log=lambda s: None)
        assert result.backend["backend"] == "transformers" and result.global_step == 60
        first, last = _first_last(result.metrics)
        gains.append(last - first)
    assert min(gains) >= MIN_GAIN_PER_SEED, gains
    assert sum(gains) / len(gains) >= MIN_MEAN_GAIN, gains


@pytest.mark.slow  # a model, a subprocess or matplotlib: the integration tier
def test_unknown_config_key_fails_before_any_model_is_loaded(tmp_path):
    out = tmp_path / "never"
    proc = _run(["-m", "unsloth_grpo.recipes.gsm8k", "--preset", "smoke", "--output-dir", str(out),
                 "training.max_step=5"], cwd=REPO)
    assert proc.returncode == 2
    assert "training.max_step is not a field of the installed TRL's GRPOConfig; did you mean " \
           "'training.max_steps'?" in proc.stderr
    assert not out.exists()


@pytest.mark.slow
def test_impossible_batch_and_bad_reward_are_reported_together(tmp_path):
    out = tmp_path / "never"
    proc = _run(["-m", "unsloth_grpo.cli", "train", "--preset", "smoke", "--output-dir", str(out),
                 "training.num_generations=3", "rewards=[{name: correctnes}]"], cwd=REPO)
    assert proc.returncode == 2
    assert "not divisible by training.num_generations=3" in proc.stderr
    assert "correctnes" in proc.stderr and "correctness" in proc.stderr  # the valid name is suggested
    assert not out.exists()


@pytest.mark.slow  # a model, a subprocess or matplotlib: the integration tier
def test_malformed_dataset_fails_before_the_model(tmp_path):
    data = tmp_path / "bad.jsonl"
    data.write_text(json.dumps({"question": "q?", "answer": "#### lots"}) + "\n")
    proc = _run(["-m", "unsloth_grpo.recipes.gsm8k", "--preset", "smoke", "--output-dir", str(tmp_path / "o"),
                 f"data.source={data}"], cwd=REPO)
    assert proc.returncode == 2
    assert "line 1: cannot read a reference answer" in proc.stderr
    assert "Loading weights" not in proc.stderr + proc.stdout


@pytest.mark.slow  # a model, a subprocess or matplotlib: the integration tier
def test_check_flag_validates_config_and_data_only():
    proc = _run(["-m", "unsloth_grpo.recipes.gsm8k", "--preset", "smoke", "--check"], cwd=REPO)
    assert proc.returncode == 0, proc.stderr
    assert "config and data OK: 256 training rows" in proc.stdout


def test_importing_the_package_imports_no_heavy_library():
    code = ("import sys, unsloth_grpo, unsloth_grpo.config, unsloth_grpo.recipes.gsm8k, unsloth_grpo.cli, "
            "unsloth_grpo.rewards, unsloth_grpo.hardware.backend, unsloth_grpo.training.train\n"
            "heavy = [m for m in ('torch', 'transformers', 'trl', 'peft', 'unsloth') if m in sys.modules]\n"
            "print(heavy)")
    proc = _run(["-c", code], cwd=REPO)
    assert proc.stdout.strip() == "[]", proc.stdout + proc.stderr


def test_auto_backend_prefers_unsloth_when_installed_and_one_process(monkeypatch):
    import importlib.util

    from unsloth_grpo.hardware.backend import select_backend

    if importlib.util.find_spec("unsloth") is None:
        pytest.skip("unsloth not installed")
    monkeypatch.setenv("WORLD_SIZE", "2")
    assert select_backend("auto") == ("transformers", "2 processes: Unsloth is single-GPU")
    monkeypatch.setenv("WORLD_SIZE", "1")
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    assert select_backend("auto") == ("transformers", "unsloth is not installed")


@pytest.mark.slow
def test_before_after_and_periodic_eval_use_the_tasks_grader(tmp_path, monkeypatch):
    from unsloth_grpo.tasks import gsm8k as task
    from unsloth_grpo.training.train import train

    calls = []

    def grader(completion, gold):  # the task's grader, spied on
        calls.append(gold)
        return task.TASK.grade(completion, gold)

    monkeypatch.setattr(task.TASK, "grader", lambda cfg: grader)
    out = tmp_path / "run"
    cfg = gsm8k.RECIPE.resolve(preset="smoke", output_dir=str(out), overrides=[
        "training.max_steps=4", "evaluation.before_after=true", "evaluation.every=2", "evaluation.limit=4"])
    train(cfg, log=lambda s: None)
    before = json.loads((out / "eval_before" / "eval.json").read_text())
    after = json.loads((out / "eval_after" / "eval.json").read_text())
    assert before["n"] == after["n"] == 4
    report = json.loads((out / "report.json").read_text())
    assert (out / "report.md").exists() and report
    # the report names what it compares (it used to say None for the baseline, the model and the dataset)
    md = (out / "report.md").read_text()
    assert "`None`" not in md
    assert "Baseline: `builtin:tiny (before training)`" in md
    assert f"Trained: `builtin:tiny + the adapter trained in {out}`" in md and "Dataset: `synthetic`" in md
    assert before["model"] == "builtin:tiny (before training)" and after["dataset"] == "synthetic"
    # before, after, and at steps 2 and 4: four evaluations of four problems
    assert len(calls) == 16
    rows = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows if "eval/accuracy" in r] == [2, 4]


def test_eval_cli_uses_the_named_tasks_loader_and_grader(tmp_path, monkeypatch):
    import argparse

    from unsloth_grpo.cli import evaluate as ev
    from unsloth_grpo.tasks import countdown

    seen = []
    monkeypatch.setattr(countdown.TASK, "grader", lambda cfg: lambda c, g: seen.append(g) or False)
    parser = argparse.ArgumentParser()
    ev.add_parser(parser.add_subparsers())
    args = parser.parse_args(["eval", "--task", "countdown", "--model", "builtin:tiny", "--dataset", "synthetic",
                              "--limit", "3", "--max-new-tokens", "4", "--output", str(tmp_path / "e")])
    assert args.func(args) == 0
    summary = json.loads((tmp_path / "e" / "eval.json").read_text())
    assert summary["n"] == 3 and summary["accuracy"] == 0.0
    assert len(seen) == 3 and all('"target"' in g for g in seen)  # countdown's gold: numbers + target


def test_preset_auto_plans_for_the_detected_gpu():
    t4 = {"name": "Tesla T4", "total_gb": 15.0, "compute_capability": (7, 5)}
    cfg = gsm8k.RECIPE.resolve(preset="auto", gpu=t4, overrides=["training.max_steps=7"])
    from unsloth_grpo.hardware.planner import plan_for_gpu

    plan = plan_for_gpu(cfg.model.name, gpu=t4)
    assert cfg.model.dtype == "fp16"  # a T4 has no bf16
    assert cfg.training.num_generations == plan.num_generations
    assert cfg.training.max_completion_length == plan.max_completion_length
    assert cfg.training.max_steps == 7  # overrides still win over the planned preset
    assert config_problems(cfg) == []


def test_preset_auto_without_a_gpu_or_with_a_model_that_cannot_fit(monkeypatch):
    from unsloth_grpo.config import ConfigError
    from unsloth_grpo.hardware import planner

    monkeypatch.setattr(planner, "detect_gpu", lambda: None)  # a machine without CUDA, also on a GPU runner
    with pytest.raises(ConfigError, match="no CUDA GPU detected.*--preset smoke"):
        gsm8k.RECIPE.resolve(preset="auto", gpu=None)
    tiny_card = {"name": "Small", "total_gb": 4.0, "compute_capability": (8, 6)}
    with pytest.raises(ConfigError, match="does not fit"):
        gsm8k.RECIPE.resolve(preset="auto", gpu=tiny_card, overrides=["model.name=llama-3.1-8b"])


@pytest.mark.slow
def test_auto_shrink_resumes_after_an_out_of_memory_with_the_smaller_config(tmp_path, capsys):
    import argparse

    import torch
    from transformers import TrainerCallback

    from unsloth_grpo.cli.recipe import add_train_arguments, run_from_args
    from unsloth_grpo.training.train import train

    class OutOfMemoryAtStep2(TrainerCallback):  # inside the third step, after two were logged
        def on_step_begin(self, args, state, control, **kwargs):
            if state.global_step == 2:
                raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB (simulated)")

    calls = []

    def train_fn(cfg, resume=None, decision=None):
        calls.append((cfg.training.per_device_train_batch_size, resume))
        extra = [OutOfMemoryAtStep2()] if len(calls) == 1 else []
        return train(cfg, resume=resume, decision=decision, callbacks=extra, log=lambda s: None)

    parser = argparse.ArgumentParser()
    add_train_arguments(parser, ["smoke"])
    out = tmp_path / "run"
    args = parser.parse_args(["--preset", "smoke", "--output-dir", str(out), "--auto-shrink",
                              "model.backend=transformers", "training.max_steps=4", "data.num_synthetic=16"])
    assert run_from_args(gsm8k.RECIPE, args, train_fn=train_fn) == 0
    assert calls == [(8, None), (4, True)]  # halved micro-batch, resumed from the checkpoint
    err = capsys.readouterr()
    assert "auto-shrink: resuming from the checkpoint with training.per_device_train_batch_size=4" in err.out
    final = load_config(out / "config.yaml")
    assert final.training.per_device_train_batch_size == 4 and final.training.gradient_accumulation_steps == 2
    steps = [json.loads(x)["step"] for x in (out / "metrics.jsonl").read_text().splitlines()]
    assert steps == [1, 2, 3, 4]
    assert (out / "adapter_model.safetensors").exists()
