"""Out-of-memory handling: the shrink ladder, the report, and a checkpoint from a real trainer."""

from __future__ import annotations

import json
import re
from pathlib import Path
from types import SimpleNamespace

import pytest

from unsloth_grpo.hardware import memory, planner
from unsloth_grpo.training import oom
from unsloth_grpo.training.oom import OOM_EXIT_CODE, handle_oom, overrides_for, suggest_smaller

BASE = dict(load_in_4bit=False, lora_rank=16, num_generations=8, per_device_train_batch_size=8,
            gradient_accumulation_steps=1, steps_per_generation=None, max_prompt_length=256,
            max_completion_length=1024, beta=0.0, use_vllm=False, gpu_memory_utilization=None)


def test_one_step_at_a_time_in_the_documented_order():
    s = dict(BASE)
    seen = []
    for _ in range(12):
        change = suggest_smaller(s)
        if not change:
            break
        seen.append(change)
        s.update(change)
    assert seen == [
        {"per_device_train_batch_size": 4, "gradient_accumulation_steps": 2},
        {"per_device_train_batch_size": 2, "gradient_accumulation_steps": 4},
        {"per_device_train_batch_size": 1, "gradient_accumulation_steps": 8},
        {"max_completion_length": 512},
        {"max_completion_length": 256},
        {"num_generations": 4, "gradient_accumulation_steps": 4},
        {"num_generations": 2, "gradient_accumulation_steps": 2},
        {"max_completion_length": 128},
        {"max_completion_length": 64},
        {"load_in_4bit": True},
        {"lora_rank": 8},
    ]


def test_halving_generations_keeps_the_generation_batch_whole():
    s = dict(BASE, num_generations=6, per_device_train_batch_size=6, max_completion_length=128)
    assert suggest_smaller(s) == {"per_device_train_batch_size": 3, "gradient_accumulation_steps": 2}
    s = dict(BASE, num_generations=8, per_device_train_batch_size=1, gradient_accumulation_steps=8,
             max_completion_length=256)
    assert suggest_smaller(s) == {"num_generations": 4, "gradient_accumulation_steps": 4}  # one group a step
    s = dict(BASE, num_generations=6, per_device_train_batch_size=3, gradient_accumulation_steps=2,
             max_completion_length=256)
    change = suggest_smaller(s)
    assert change == {"num_generations": 3, "gradient_accumulation_steps": 1}


def test_vllm_pool_shrinks_before_completions():
    s = dict(BASE, per_device_train_batch_size=1, gradient_accumulation_steps=8, use_vllm=True,
             gpu_memory_utilization=0.6)
    assert suggest_smaller(s) == {"gpu_memory_utilization": 0.5}


def test_with_a_model_the_estimate_drops_by_a_quarter():
    before = memory.estimate_memory("qwen2.5-3b", **BASE)
    change = suggest_smaller(BASE, model_config="qwen2.5-3b")
    after = memory.estimate_memory("qwen2.5-3b", **{**BASE, **change})
    assert after.allocated_gb <= 0.75 * before.allocated_gb
    # a target is met exactly as far as the ladder allows, in ladder order
    change = suggest_smaller(BASE, model_config="qwen2.5-3b", target_gb=7.0)
    assert memory.estimate_memory("qwen2.5-3b", **{**BASE, **change}).total_gb <= 7.0
    assert change["per_device_train_batch_size"] == 1


def test_overrides_use_recipe_config_keys():
    assert overrides_for({"num_generations": 4, "max_completion_length": 256, "load_in_4bit": True,
                          "gpu_memory_utilization": 0.5, "lora_rank": 8}) == [
        "training.num_generations=4", "training.max_completion_length=256", "model.load_in_4bit=true",
        "model.gpu_memory_utilization=0.50", "lora.r=8"]
    with pytest.raises(KeyError, match="known: num_generations"):
        overrides_for({"temperature": 0.5})


def test_shrunk_config_applies_the_changes():
    from unsloth_grpo.config import load_config

    cfg = load_config({"rewards": [{"name": "xml_count"}]})
    small = oom.shrunk_config(cfg, {"num_generations": 4, "max_completion_length": 128, "lora_rank": 8})
    assert (small.training.num_generations, small.training.max_completion_length, small.lora.r) == (4, 128, 8)
    assert cfg.training.num_generations == 8  # the original is untouched


class FakeTrainer:
    """What handle_oom touches on a GRPOTrainer: args, state, the two save methods."""

    def __init__(self, out: Path, fail_checkpoint: bool = False):
        self.args = SimpleNamespace(output_dir=str(out))
        self.state = SimpleNamespace(global_step=7)
        self.model = None
        self.fail_checkpoint = fail_checkpoint
        self.saved = []

    def _save_checkpoint(self, model, trial):
        if self.fail_checkpoint:
            raise RuntimeError("optimizer state unavailable")
        path = Path(self.args.output_dir) / f"checkpoint-{self.state.global_step}"
        path.mkdir(parents=True)
        (path / "trainer_state.json").write_text("{}")

    def save_model(self, path):
        Path(path).mkdir(parents=True)
        self.saved.append(path)


def _cfg(out, **training):
    from unsloth_grpo.config import load_config

    return load_config({"output_dir": str(out), "rewards": [{"name": "xml_count"}],
                        "model": {"name": "Qwen/Qwen2.5-1.5B-Instruct", "backend": "unsloth", "load_in_4bit": True,
                                  "fast_inference": "off"},
                        "training": {"num_generations": 8, "per_device_train_batch_size": 8,
                                     "max_completion_length": 1024, **training}})


def test_handle_oom_saves_reports_and_returns_the_oom_code(tmp_path):
    cfg = _cfg(tmp_path)
    lines: list[str] = []
    gpu = {"name": "RTX 3060 Laptop", "total_gb": 6.0, "compute_capability": 8.6}
    exc = RuntimeError("CUDA out of memory. Tried to allocate 1.16 GiB\nmore detail")
    code = handle_oom(FakeTrainer(tmp_path), cfg, exc, gpu=gpu, log=lines.append)
    assert code == OOM_EXIT_CODE == 3
    text = "\n".join(lines)
    assert "CUDA out of memory at step 7: CUDA out of memory. Tried to allocate 1.16 GiB" in text
    assert "estimate used:" in text and "training phase" in text
    assert f"checkpoint: {tmp_path / 'checkpoint-7'}" in text
    assert "smaller config: training.per_device_train_batch_size=" in text
    assert f"retry with: unsloth-grpo train --config {tmp_path / 'config.yaml'}" in text
    report = json.loads((tmp_path / "oom_report.json").read_text())
    assert report["checkpoint"] == str(tmp_path / "checkpoint-7")
    assert report["overrides"] and report["overrides"][0].startswith("training.per_device_train_batch_size=")
    est = memory.estimate_memory("qwen2.5-1.5b", **{**planner.settings_from_config(cfg, gpu),
                                                    **report["changes"]})
    assert est.total_gb <= 0.9 * 6.0  # the estimate said 8 x 1024 would not fit: the suggestion aims at the card


def test_the_oom_report_names_the_checkpoint_where_it_stays(tmp_path):
    from unsloth_grpo.training import checkpoint as ck

    cfg = _cfg(tmp_path)
    lines: list[str] = []

    def finalize(staged):
        return ck.finalize_checkpoint(staged, tmp_path, step=7)

    handle_oom(FakeTrainer(tmp_path), cfg, RuntimeError("CUDA out of memory"), gpu=None, log=lines.append,
               finalize=finalize)
    final = tmp_path / "checkpoints" / "checkpoint-7"
    assert json.loads((tmp_path / "oom_report.json").read_text())["checkpoint"] == str(final)
    assert final.is_dir() and not (tmp_path / "checkpoint-7").exists()
    assert f"checkpoint: {final}" in lines


def test_handle_oom_falls_back_to_the_adapter_and_unknown_models(tmp_path):
    from unsloth_grpo.config import load_config

    cfg = load_config({"output_dir": str(tmp_path), "rewards": [{"name": "xml_count"}],
                       "model": {"name": "someone/mystery-model", "fast_inference": "off"}})
    trainer = FakeTrainer(tmp_path, fail_checkpoint=True)
    lines: list[str] = []
    assert handle_oom(trainer, cfg, RuntimeError("CUDA out of memory"), gpu=None, log=lines.append) == 3
    assert trainer.saved == [str(tmp_path / "oom-checkpoint-7")]
    text = "\n".join(lines)
    assert "resumable checkpoint failed (RuntimeError: optimizer state unavailable)" in text
    assert "estimate used: none" in text
    assert "smaller config: training.per_device_train_batch_size=4 training.gradient_accumulation_steps=2" in text


def test_is_oom():
    import torch

    assert oom.is_oom(torch.OutOfMemoryError("CUDA out of memory"))
    assert oom.is_oom(RuntimeError("CUDA error: out of memory"))
    assert not oom.is_oom(ValueError("out of memory"))


@pytest.mark.slow
def test_simulated_oom_in_a_real_grpo_run_saves_a_resumable_checkpoint(tmp_path, capsys):
    """A callback raises torch.OutOfMemoryError after step 1 of a real (tiny, CPU) GRPO run."""
    import torch
    from transformers import TrainerCallback
    from trl import GRPOTrainer

    from unsloth_grpo.hardware.backend import load_model
    from unsloth_grpo.config import load_config
    from unsloth_grpo.tasks.gsm8k import PRESETS
    from unsloth_grpo.rewards import build_reward_functions
    from unsloth_grpo.training.train import build_grpo_args
    from unsloth_grpo.training.held_out import load_task_dataset

    cfg = load_config(PRESETS["smoke"], overrides=[f"output_dir={tmp_path}", "model.backend=transformers",
                                                   "data.num_synthetic=16", "training.max_steps=3"])
    loaded = load_model(cfg.model, cfg.lora, seed=cfg.seed, log=lambda _: None)
    funcs, weights = build_reward_functions(cfg.rewards)
    args = build_grpo_args(cfg, loaded.info, weights=weights)

    class RaiseOOM(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            if state.global_step == 1:
                raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 20.00 MiB (simulated)")

    trainer = GRPOTrainer(model=loaded.model, processing_class=loaded.tokenizer, reward_funcs=funcs, args=args,
                          train_dataset=load_task_dataset(cfg), callbacks=[RaiseOOM()])
    with pytest.raises(torch.OutOfMemoryError) as info:
        trainer.train()
    assert oom.is_oom(info.value)
    code = handle_oom(trainer, cfg, info.value)
    out = capsys.readouterr().out
    assert code == OOM_EXIT_CODE
    ckpt = tmp_path / "checkpoint-1"
    for name in ("adapter_model.safetensors", "adapter_config.json", "optimizer.pt", "trainer_state.json"):
        assert (ckpt / name).exists(), name
    assert json.loads((ckpt / "trainer_state.json").read_text())["global_step"] == 1
    assert "CUDA out of memory at step 1" in out and "(simulated)" in out
    if torch.cuda.is_available():
        assert re.search(r"measured peak: \d+\.\d\d GB allocated by torch", out), out
    else:
        assert "measured peak: unavailable (no CUDA device)" in out
    assert "smaller config: training.per_device_train_batch_size=4 training.gradient_accumulation_steps=2" in out


@pytest.mark.slow
def test_a_kernels_runtime_error_oom_stops_the_run_with_a_resumable_checkpoint(tmp_path):
    """bitsandbytes, Unsloth and vLLM kernels raise RuntimeError("CUDA out of memory"), not
    torch.OutOfMemoryError: the run must still save, report, and exit with the OOM code."""
    from transformers import TrainerCallback

    from unsloth_grpo.config import load_config
    from unsloth_grpo.recipes import gsm8k
    from unsloth_grpo import runs
    from unsloth_grpo.training import checkpoint as ck
    from unsloth_grpo.training.train import TrainingStopped, train

    class KernelOOM(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            if state.global_step == 2:
                raise RuntimeError("CUDA out of memory. Tried to allocate 64.00 MiB (from a custom kernel)")

    out = tmp_path / "run"
    cfg = load_config(gsm8k.RECIPE.presets["smoke"], overrides=[f"output_dir={out}", "model.backend=transformers",
                                                         "data.num_synthetic=16", "training.max_steps=4",
                                                         "run.samples_every=0"])
    with pytest.raises(TrainingStopped) as stop:
        train(cfg, callbacks=[KernelOOM()], log=lambda _m: None)
    assert stop.value.code == OOM_EXIT_CODE
    report = json.loads((out / "oom_report.json").read_text())
    assert report["checkpoint"] == str(out / "checkpoints" / "checkpoint-2")
    assert runs.check_checkpoint(report["checkpoint"]) == (True, "")
    assert ck.resolve_resume(True, out).step == 2


@pytest.mark.slow
def test_an_oom_in_an_sft_stage_stops_it_as_in_a_grpo_run(tmp_path):
    """SFT and GRPO stages train through one loop: an out-of-memory error inside an SFT stage saves a
    resumable checkpoint of that stage, writes the report there and ends the run with the OOM code."""
    from transformers import TrainerCallback

    from unsloth_grpo import runs
    from unsloth_grpo.config import config_to_dict, load_config
    from unsloth_grpo.recipes import gsm8k
    from unsloth_grpo.training import checkpoint as ck
    from unsloth_grpo.training.train import TrainingStopped, train

    class KernelOOM(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            if state.global_step == 2:
                raise RuntimeError("CUDA out of memory. Tried to allocate 64.00 MiB (from a custom kernel)")

    out = tmp_path / "run"
    base = load_config(gsm8k.RECIPE.presets["smoke"], overrides=[f"output_dir={out}", "model.backend=transformers",
                                                          "data.num_synthetic=16", "run.samples_every=0"])
    cfg = load_config({**config_to_dict(base), "stages": [
        {"name": "preformat", "kind": "sft", "max_steps": 4, "learning_rate": 5e-3, "num_examples": 16},
        {"name": "format", "max_steps": 2}]})
    with pytest.raises(TrainingStopped) as stop:
        train(cfg, callbacks=[KernelOOM()], log=lambda _m: None)
    assert stop.value.code == OOM_EXIT_CODE
    stage = out / "stages" / "01-preformat"
    report = json.loads((stage / "oom_report.json").read_text())
    assert report["checkpoint"] == str(stage / "checkpoints" / "checkpoint-2")
    assert runs.check_checkpoint(report["checkpoint"]) == (True, "")
    assert runs.read_marker(report["checkpoint"])["stage"] == 1
    assert ck.resolve_resume(True, out).step == 2
