"""Every hardware decision, on every shipped card profile, on a CPU (no GPU, no hub, fast)."""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import tomllib
import types
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.version import Version

from unsloth_grpo.config import ModelConfig, load_config
from unsloth_grpo.cli import plan as planner_cli
from unsloth_grpo.hardware import architecture, backend, memory, planner, profiles
from unsloth_grpo.hardware.doctor import report as doctor_report
from unsloth_grpo.hardware.doctor.checks import ERROR, WARNING, run_checks
from unsloth_grpo.hardware.doctor.probes import TorchInfo, probe_torch
from unsloth_grpo.hardware.doctor.recipe import recipe_problems
from unsloth_grpo.hardware.doctor.report import collect_report
from unsloth_grpo.hardware.profiles import CPU, GPU_PROFILES, PROFILES, vllm_choice
from unsloth_grpo.recipes import gsm8k

ROOT = Path(__file__).resolve().parents[1]
GOOD_VLLM = ("0.27.1", False)  # what the vllm extra resolves to
T4 = PROFILES["t4"]
LAPTOP = PROFILES["rtx4060-laptop"]
ALL = list(PROFILES.values())
BUDGET = 0.9  # the planner's 10% headroom


def ids(p):
    return p.key


# ---------------------------------------------------------------- the profiles themselves


def test_the_issue_names_every_shipped_profile():
    assert {"cpu", "t4", "rtx4060-laptop", "rtx3060", "rtx3090", "rtx4090", "a100-40", "a100-80", "l4",
            "h100-80"} <= set(PROFILES)
    assert T4.compute_capability == (7, 5) and 14 < T4.total_gb < 16
    assert 7 < LAPTOP.total_gb <= 8
    assert profiles.get_profile("16gb") is T4 and profiles.get_profile("Colab") is T4
    with pytest.raises(profiles.HardwareError, match="shipped: cpu, rtx4060-laptop"):
        profiles.get_profile("v100")


@pytest.mark.parametrize("p", ALL, ids=ids)
def test_bf16_and_attention_follow_compute_capability(p):
    if not p.cuda:
        assert not p.bf16 and p.vllm_attention == () and p.as_gpu() is None
        return
    assert p.bf16 == (p.compute_capability >= (8, 0))
    assert ("FLASH_ATTN" in p.vllm_attention) == p.bf16  # FlashAttention needs Ampere, like bf16
    assert "TRITON_ATTN" in p.vllm_attention  # every shipped card has an attention backend vLLM can run
    assert profiles.from_gpu(p.as_gpu()).compute_capability == p.compute_capability


def test_measure_reads_torch_and_ignores_emulated_bf16(monkeypatch):
    """A T4 answers is_bf16_supported() == True (emulation); the decision must come from 7.5."""
    import torch

    props = types.SimpleNamespace(name="Tesla T4", total_memory=int(14.7 * 2**30), major=7, minor=5)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: True)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda i: props)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *a: (7, 5))
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a: "Tesla T4")
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)  # read in-process (CUDA is up already)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda i: (10 * 2**30, int(14.7 * 2**30)))
    here = profiles.measure()
    assert here.compute_capability == (7, 5) and here.source == "measured"
    assert backend.resolve_dtype("auto", "cuda") == "fp16"  # was bf16: torch's emulated answer
    with pytest.raises(backend.BackendError, match="no native bf16; set model.dtype=fp16"):
        backend.resolve_dtype("bf16", "cuda")


def test_measuring_the_card_leaves_cuda_uninitialized(monkeypatch):
    """Issue 25, finding 9: the preflight, the doctor and the planner read the card before ``import unsloth``.

    Reading properties initializes CUDA and torch's caching allocator, which reads its settings once
    (seen below: a later PYTORCH_ALLOC_CONF is ignored), so Unsloth's allocator setting would come too
    late. A process that has not initialized CUDA asks a child process instead.
    """
    import torch

    def initializes(*_a, **_k):
        raise AssertionError("CUDA was initialized in this process")

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: False)
    for name in ("get_device_properties", "mem_get_info", "get_device_capability", "get_device_name", "init"):
        monkeypatch.setattr(torch.cuda, name, initializes)
    h100 = [{"index": 0, "name": "NVIDIA H100 80GB HBM3", "total_bytes": 85 * 10**9, "capability": [9, 0],
             "free_bytes": 84 * 10**9}]
    asked = []
    monkeypatch.setattr(profiles, "_probe_in_child", lambda: asked.append(1) or h100, raising=False)
    monkeypatch.setattr(profiles, "_CUDA_DEVICES", None, raising=False)
    assert profiles.measure().compute_capability == (9, 0)
    assert planner.detect_gpu()["name"] == "NVIDIA H100 80GB HBM3"
    info = probe_torch()
    assert info.cuda_available and info.gpus[0].compute_capability == (9, 0) and info.gpus[0].free_memory_bytes
    assert collect_report(check_hub=False).torch.gpus[0].name == "NVIDIA H100 80GB HBM3"  # the preflight's
    assert len(asked) == 1  # one child for the whole process


def test_the_child_probe_runs_and_the_allocator_reads_its_settings_once(monkeypatch):
    """The child's script is real Python; and torch parses the allocator settings at first use, once."""
    assert profiles._probe_in_child() == []  # no CUDA card on this machine: an empty list, not None
    import subprocess

    code = ("import os, torch\n"
            "os.environ['PYTORCH_ALLOC_CONF'] = 'max_split_size_mb:64'\n"
            "first = torch._C._accelerator_getAllocatorSettings()\n"
            "os.environ['PYTORCH_ALLOC_CONF'] = 'expandable_segments:True'\n"
            "print(first, '|', torch._C._accelerator_getAllocatorSettings())\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120).stdout
    assert out.split() == ["max_split_size_mb:64", "|", "max_split_size_mb:64"], out


def test_measure_without_cuda_is_the_cpu_profile():
    import torch

    if torch.cuda.is_available():
        pytest.skip("CUDA present")
    assert profiles.measure() is CPU


# ---------------------------------------------------------------- dtype


@pytest.mark.parametrize("p", ALL, ids=ids)
def test_dtype_and_4bit_compute_dtype_on_every_profile(p):
    expected = "fp32" if not p.cuda else "bf16" if p.compute_capability >= (8, 0) else "fp16"
    assert profiles.training_dtype(p) == expected
    assert profiles.quant_compute_dtype(p) == expected
    assert profiles.training_dtype(p, "fp16") == "fp16"
    if p.cuda and not p.bf16:
        with pytest.raises(profiles.HardwareError, match="model.dtype=fp16"):
            profiles.training_dtype(p, "bf16")
    else:
        assert profiles.training_dtype(p, "bf16") == "bf16"


# ---------------------------------------------------------------- the loader's decision


@pytest.mark.parametrize("p", ALL, ids=ids)
def test_decide_the_default_recipe_on_every_profile(p):
    m = gsm8k.RECIPE.resolve().model
    d = backend.decide(m, p, backend=("unsloth", "test"), vllm=GOOD_VLLM)
    assert d.device == ("cuda" if p.cuda else "cpu")
    assert d.dtype == profiles.training_dtype(p)
    assert d.load_in_4bit == p.cuda  # 4-bit needs CUDA
    assert d.vllm.use == p.cuda and d.vllm.standby == p.cuda and d.vllm.fallback == p.cuda
    if p.cuda:
        assert d.vllm.gpu_memory_utilization == profiles.standby_utilization(p.total_gb)
        assert d.info("x").summary().endswith(")") and "vllm=on" in d.info("x").summary()
    # the transformers backend: no colocated vLLM on 4-bit weights (issue 25, finding 2) ...
    t = backend.decide(m, p, backend=("transformers", "test"), vllm=GOOD_VLLM, bnb_importable=True)
    assert not t.vllm.use and t.load_in_4bit == p.cuda
    assert any("merges the LoRA into the NF4 weights" in n for n in t.notes) == p.cuda
    # ... 16-bit weights generate with vLLM, asleep while training: the recipe's pool, not held (finding 3)
    t16 = backend.decide(dataclasses.replace(m, load_in_4bit=False), p, backend=("transformers", "test"),
                         vllm=GOOD_VLLM)
    assert t16.vllm.use == p.cuda and t16.vllm.standby == p.cuda and t16.info("x").vllm_standby == p.cuda
    assert t16.vllm.gpu_memory_utilization == (m.gpu_memory_utilization if p.cuda else None)


@pytest.mark.parametrize("p", GPU_PROFILES, ids=ids)
def test_vllm_that_cannot_load_4bit_is_off_under_auto_and_an_error_under_on(p):
    m = ModelConfig()
    d = backend.decide(m, p, backend=("unsloth", "t"), vllm=("0.30.0", False))
    assert not d.vllm.use and any("bitsandbytes" in n for n in d.notes)
    assert backend.decide(m, p, backend=("unsloth", "t"), vllm=("0.30.0", True)).vllm.use  # the plugin
    m16 = ModelConfig(load_in_4bit=False)
    assert backend.decide(m16, p, backend=("unsloth", "t"), vllm=("0.30.0", False)).vllm.use  # 16-bit
    with pytest.raises(backend.BackendError, match="fast_inference='on'.*bitsandbytes"):
        backend.decide(ModelConfig(fast_inference="on"), p, backend=("unsloth", "t"), vllm=("0.30.0", False))
    assert not backend.decide(m, p, backend=("unsloth", "t"), vllm=(None, False)).vllm.use
    assert not backend.decide(ModelConfig(fast_inference="off"), p, backend=("unsloth", "t"), vllm=GOOD_VLLM).vllm.use


def test_vllm_on_needs_a_gpu_and_bf16_needs_ampere():
    with pytest.raises(backend.BackendError, match="needs a CUDA GPU"):
        backend.decide(ModelConfig(fast_inference="on"), CPU, backend=("unsloth", "t"), vllm=GOOD_VLLM)
    with pytest.raises(backend.BackendError, match="no native bf16"):
        backend.decide(ModelConfig(dtype="bf16"), T4, backend=("unsloth", "t"), vllm=GOOD_VLLM)
    with pytest.raises(backend.BackendError, match="no CUDA GPU is visible"):
        backend.decide(ModelConfig(device="cuda"), CPU, backend=("unsloth", "t"), vllm=GOOD_VLLM)


def test_vllm_version_rule():
    assert profiles.vllm_version_problem("0.27.1") is None
    assert "bitsandbytes" in profiles.vllm_version_problem("0.28.0")
    assert profiles.vllm_version_problem("0.28.0", bnb_plugin=True) is None
    assert profiles.vllm_version_problem("0.30.0", load_in_4bit=False) is None
    assert "outside what TRL supports" in profiles.vllm_version_problem("0.31.0", load_in_4bit=False)
    assert "outside what TRL supports" in profiles.vllm_version_problem("0.19.1")


def test_vllm_extra_is_pinned_to_the_installed_metadata():
    """The `vllm` extra must take exactly the versions TRL (installed metadata) supports that load 4-bit."""
    import importlib.metadata

    trl_lines = [Requirement(r) for r in importlib.metadata.requires("trl") or []]
    trl_vllm = [r for r in trl_lines if r.name == "vllm"]
    assert trl_vllm, "the installed TRL declares no vllm extra"
    assert profiles.trl_vllm_range() == trl_vllm[0].specifier
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    ours = [Requirement(r) for r in project["optional-dependencies"]["vllm"] if r.startswith("vllm")][0].specifier
    for minor in range(15, 35):
        for micro in (0, 1, 2):
            v = Version(f"0.{minor}.{micro}")
            works = trl_vllm[0].specifier.contains(v) and v < profiles.VLLM_BNB_MOVED_OUT
            assert ours.contains(v) == works, v
    # Unsloth's own vLLM-bitsandbytes switch is the 0.28 this rule names
    import importlib.util

    spec = importlib.util.find_spec("unsloth_zoo")
    if spec is not None:
        src = (Path(spec.origin).parent / "vllm_utils.py").read_text()
        assert "vLLM >= 0.28" in src and "vllm_bnb_plugin" in src


def test_server_mode_never_runs_unsloth():
    assert backend.auto_backend(True, 1, vllm_server="gpu1:8000")[0] == "transformers"
    assert backend.auto_backend(True, 1)[0] == "unsloth"
    if __import__("importlib").util.find_spec("unsloth") is None:
        pytest.skip("unsloth not installed")
    with pytest.raises(backend.BackendError, match="ignores the server; set model.backend=transformers"):
        backend.backend_name("unsloth", vllm_server="gpu1:8000")
    m = ModelConfig(vllm_server="gpu1:8000")
    d = backend.decide(m, T4, vllm=GOOD_VLLM)
    assert d.backend == "transformers" and not d.vllm.use  # the server generates, no in-process engine


def test_one_backend_rule_for_runs_plans_and_the_preset_for_this_card(monkeypatch):
    """``backend_name`` is the rule: a run (strict) refuses a backend that cannot run here; a plan for a
    card, maybe another machine's, takes an explicit backend as asked and follows the same ``auto``."""
    from unsloth_grpo.recipes import gsm8k

    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    assert backend.backend_name("auto") == ("transformers", "2 processes: Unsloth is single-GPU")
    with pytest.raises(backend.BackendError):
        backend.backend_name("unsloth")  # under 2 processes (or without Unsloth): not for a run here
    assert backend.backend_name("unsloth", strict=False) == ("unsloth", "requested")
    with pytest.raises(backend.BackendError, match="is not one of"):
        backend.backend_name("tensorflow", strict=False)
    cfg = gsm8k.RECIPE.resolve()
    assert planner.settings_from_config(cfg, T4.as_gpu(), vllm=GOOD_VLLM)["backend"] == "transformers"
    planned = dataclasses.replace(cfg, model=dataclasses.replace(cfg.model, backend="unsloth"))
    assert planner.settings_from_config(planned, T4.as_gpu(), vllm=GOOD_VLLM)["backend"] == "unsloth"
    assert not hasattr(planner, "resolve_backend") and not hasattr(memory, "resolve_backend")  # no copy of the rule


def test_standby_is_set_before_unsloth_is_imported():
    env: dict = {}
    profiles.set_standby_environment(vllm_choice(T4, vllm_version="0.27.1"), env)
    assert env == {"UNSLOTH_VLLM_STANDBY": "1"}
    env = {"UNSLOTH_VLLM_STANDBY": "0"}  # the user's own setting wins
    profiles.set_standby_environment(vllm_choice(T4, vllm_version="0.27.1"), env)
    assert env == {"UNSLOTH_VLLM_STANDBY": "0"}
    env = {}
    profiles.set_standby_environment(vllm_choice(T4, vllm_version="0.27.1", standby="off"), env)
    assert env == {}


def test_standby_pool_matches_unsloths_tiers():
    assert profiles.standby_utilization(14.7) == pytest.approx(0.8 * 0.95)  # a T4
    assert profiles.standby_utilization(7.6) == pytest.approx(0.75 * 0.95)
    assert profiles.standby_utilization(79.1) == pytest.approx(0.925 * 0.95)


# ---------------------------------------------------------------- engine start fallback


class _FakeFastLanguageModel:
    calls: list = []

    @classmethod
    def from_pretrained(cls, **kw):
        cls.calls.append(kw)
        if kw["fast_inference"]:
            raise RuntimeError("No available attention backend for sm75\nmore lines")
        tok = types.SimpleNamespace(pad_token=None, eos_token="</s>", padding_side="right")
        return types.SimpleNamespace(name="model"), tok

    @staticmethod
    def get_peft_model(model, **kw):
        return model


def test_engine_that_fails_to_start_falls_back_to_generation_without_vllm(monkeypatch):
    _FakeFastLanguageModel.calls = []
    monkeypatch.setitem(sys.modules, "unsloth", types.SimpleNamespace(FastLanguageModel=_FakeFastLanguageModel))
    monkeypatch.setattr(profiles, "installed_vllm", lambda: GOOD_VLLM)
    monkeypatch.setattr(backend, "backend_name", lambda *a, **k: ("unsloth", "test"))
    monkeypatch.setenv("UNSLOTH_VLLM_STANDBY", "x")
    monkeypatch.delenv("UNSLOTH_VLLM_STANDBY")  # restored (removed) after the test
    monkeypatch.setattr(backend, "_STANDBY_SET_HERE", False)
    lines = []
    loaded = backend.load_model(ModelConfig(name="org/model"), None, log=lines.append, profile=T4)
    assert [c["fast_inference"] for c in _FakeFastLanguageModel.calls] == [True, False]
    assert _FakeFastLanguageModel.calls[0]["dtype"].__repr__() == "torch.float16"  # the T4's dtype
    assert not loaded.info.use_vllm and "vLLM failed to start" in loaded.info.reason
    fallback = [line for line in lines if "did not start" in line]
    assert len(fallback) == 1 and "generating without vLLM" in fallback[0] and "\n" not in fallback[0]
    assert "UNSLOTH_VLLM_STANDBY" not in os.environ  # set for the engine, taken back with it (finding 12)
    # with fast_inference: on the failure is the user's to see
    _FakeFastLanguageModel.calls = []
    with pytest.raises(RuntimeError, match="attention backend"):
        backend.load_model(ModelConfig(name="org/model", fast_inference="on"), None, log=lines.append, profile=T4)


# ---------------------------------------------------------------- TRL arguments


def _args(cfg, info):
    from unsloth_grpo.training.train import build_grpo_args

    return build_grpo_args(cfg, info, weights=[1.0])


def test_colocated_vllm_gets_the_recipes_context_length(tmp_path):
    cfg = load_config(None, base=gsm8k.RECIPE.defaults, overrides=[f"output_dir={tmp_path}"])
    info = backend.BackendInfo("transformers", "cpu", "fp32", False, True, cfg.model.name)
    args = _args(cfg, info)
    assert args.use_vllm and args.vllm_mode == "colocate"
    assert args.vllm_max_model_length == cfg.model.max_seq_length == 1024


@pytest.mark.parametrize("name", ["unsloth", "transformers"])
def test_loss_settings_are_explicit_on_either_backend(name, tmp_path):
    cfg = load_config(None, base=gsm8k.RECIPE.defaults, overrides=[f"output_dir={tmp_path}"])
    args = _args(cfg, backend.BackendInfo(name, "cpu", "fp32", False, False, cfg.model.name))
    assert (args.loss_type, args.mask_truncated_completions, args.epsilon_high) == ("dapo", True, 0.28)
    from unsloth_grpo.config import dump_config

    text = dump_config(cfg)
    assert "mask_truncated_completions: true" in text and "epsilon_high: 0.28" in text
    smoke = gsm8k.RECIPE.resolve(preset="smoke")
    assert smoke.training.mask_truncated_completions is False  # its 12-token completions are all cut


def test_trls_engine_may_fall_back_only_under_auto():
    from unsloth_grpo.training.train import _may_fall_back

    colocate = types.SimpleNamespace(use_vllm=True, vllm_mode="colocate")
    assert _may_fall_back(gsm8k.RECIPE.resolve(), colocate)
    assert not _may_fall_back(gsm8k.RECIPE.resolve(overrides=["model.fast_inference=on"]), colocate)
    assert not _may_fall_back(gsm8k.RECIPE.resolve(), types.SimpleNamespace(use_vllm=True, vllm_mode="server"))


def test_plan_cli_takes_a_card_profile_and_standby(capsys):
    from unsloth_grpo.cli import plan as plan_cli

    assert plan_cli.main(["--model", "qwen2.5-1.5b", "--card", "t4", "--vllm", "--standby", "--json"]) == 0
    import json

    out = json.loads(capsys.readouterr().out)
    assert out["vram_gb"] == T4.total_gb and out["overrides"]["model.dtype"] == "fp16"
    assert out["overrides"]["model.fast_inference"] == "on" and out["overrides"]["model.vllm_standby"] == "on"
    assert plan_cli.main(["--model", "qwen2.5-1.5b", "--card", "t4", "--standby"]) == 2


def test_recipe_yamls_write_the_loss_settings():
    for path in (ROOT / "recipes").glob("*.yaml"):
        text = path.read_text()
        if "loss_type:" in text:
            assert "mask_truncated_completions:" in text and "epsilon_high:" in text, path


# ---------------------------------------------------------------- memory: plan and run agree


def _fits(cfg, p, vllm):
    s = planner.settings_from_config(cfg, p.as_gpu(), vllm=vllm)
    s["backend"] = "unsloth"
    est = memory.estimate_memory(cfg.model.name, **s)
    return est.total_gb <= p.total_gb * BUDGET, est, s


@pytest.mark.parametrize("p", GPU_PROFILES, ids=ids)
def test_default_recipe_fits_every_card_with_and_without_vllm(p):
    """The recipe says '8 GB and up': every GPU profile, with the headroom the planner keeps."""
    cfg = gsm8k.RECIPE.resolve()
    ok, est, s = _fits(cfg, p, GOOD_VLLM)
    assert s["use_vllm"] and s["vllm_standby"]
    assert ok, f"{est.total_gb:.2f} GB on {p.name}"
    ok, est, s = _fits(cfg, p, (None, False))  # no vLLM, or an engine that fell back
    assert not s["use_vllm"] and ok


def test_t4_preset_fits_the_t4():
    cfg = gsm8k.RECIPE.resolve(preset="t4")
    assert cfg.model.dtype == "fp16"
    for vllm in (GOOD_VLLM, (None, False)):
        assert _fits(cfg, T4, vllm)[0]


def test_oom_advice_does_not_shrink_a_pool_standby_sets_itself():
    from unsloth_grpo.training.oom import _smaller_vllm_pool

    s = dict(use_vllm=True, gpu_memory_utilization=0.76)
    assert _smaller_vllm_pool(s) == {"gpu_memory_utilization": 0.66}
    assert _smaller_vllm_pool({**s, "vllm_standby": True}) is None


def test_standby_moves_the_pool_into_the_generation_phase():
    shape = architecture.model_shape("qwen2.5-1.5b")
    kw = dict(use_vllm=True, gpu_memory_utilization=0.7, gpu_total_gb=8)
    plain = memory.estimate_memory(shape, **kw)
    standby = memory.estimate_memory(shape, vllm_standby=True, **kw)
    assert plain.phase_of["vllm_pool"] == "static" and standby.phase_of["vllm_pool"] == "generation"
    assert standby.total_gb < plain.total_gb
    with pytest.raises(ValueError, match="vllm_standby needs"):
        memory.estimate_memory(shape, vllm_standby=True, gpu_memory_utilization=None)
    # TRL's sleep mode on the transformers backend: its own 16-bit copy, the whole pool, while generating
    trl_kw = dict(kw, backend="transformers", load_in_4bit=False)
    held = memory.estimate_memory(shape, **trl_kw)
    asleep = memory.estimate_memory(shape, vllm_standby=True, **trl_kw)
    assert held.phase_of["vllm_pool"] == "static" and asleep.phase_of["vllm_pool"] == "generation"
    assert asleep.breakdown["vllm_pool"] == pytest.approx(0.7 * 8) and asleep.total_gb < held.total_gb
    with pytest.raises(ValueError, match="does not pair TRL's colocated vLLM with 4-bit"):
        memory.estimate_memory(shape, backend="transformers", **kw)


@pytest.mark.parametrize("p", GPU_PROFILES, ids=ids)
@pytest.mark.parametrize("vllm", [GOOD_VLLM, (None, False)], ids=["vllm", "no-vllm"])
def test_preset_auto_plans_with_the_runs_vllm_setting_and_fits(p, vllm):
    from unsloth_grpo.tasks._recipe import _auto_preset

    for model in planner_cli.CARD_TABLE_MODELS:
        cfg = gsm8k.RECIPE.resolve(overrides=[f"model.name={model}", "model.backend=unsloth"])
        preset = _auto_preset(cfg, p.as_gpu(), vllm)
        planned = gsm8k.RECIPE.resolve(overrides=[f"model.name={model}", "model.backend=unsloth", *_flat(preset)])
        assert "fast_inference" in preset["model"]
        fast = planned.model.fast_inference
        # written either way: off when the plan has no vLLM, auto (with its engine-start fallback) when it has
        assert fast in ("auto", "off")
        if vllm[0] is None:
            assert fast == "off"
        s = planner.settings_from_config(planned, p.as_gpu(), vllm=vllm)
        assert s["use_vllm"] == (fast == "auto")
        est = memory.estimate_memory(model, **s)
        assert est.total_gb <= p.total_gb * BUDGET + 1e-9, (model, p.key, est.total_gb)
        if fast == "auto":  # and an engine that fails to start leaves settings that fit without it
            s.update(use_vllm=False, gpu_memory_utilization=None, gpu_total_gb=None, vllm_standby=False)
            assert memory.estimate_memory(model, **s).total_gb <= p.total_gb * BUDGET + 1e-9


def _flat(preset: dict, prefix: str = "") -> list[str]:
    out = []
    for k, v in preset.items():
        if isinstance(v, dict):
            out += _flat(v, f"{prefix}{k}.")
        else:
            out.append(f"{prefix}{k}={'true' if v is True else 'false' if v is False else v}")
    return out


def test_preset_auto_on_a_t4_writes_standby_and_fp16():
    from unsloth_grpo.tasks._recipe import _auto_preset

    preset = _auto_preset(gsm8k.RECIPE.resolve(overrides=["model.backend=unsloth"]), T4.as_gpu(), GOOD_VLLM)
    m = gsm8k.RECIPE.resolve(overrides=["model.backend=unsloth", *_flat(preset)]).model
    assert (m.fast_inference, m.vllm_standby, m.dtype) == ("auto", "on", "fp16")
    assert m.gpu_memory_utilization == pytest.approx(profiles.standby_utilization(T4.total_gb), abs=0.01)
    off = _auto_preset(gsm8k.RECIPE.resolve(overrides=["model.backend=unsloth"]), T4.as_gpu(), (None, False))
    assert gsm8k.RECIPE.resolve(overrides=_flat(off)).model.fast_inference == "off"


# ---------------------------------------------------------------- the doctor and the preflight


def _never(*_):
    raise AssertionError("the hub was probed although offline mode is on")


def test_cpu_only_offline_machine_refuses_the_default_recipe(tmp_path):
    cfg = gsm8k.RECIPE.resolve()
    env = {"HF_HUB_OFFLINE": "1"}
    problems = recipe_problems(cfg, profile=CPU, env=env, hub_probe=_never, cache_dir=str(tmp_path))
    msgs = [p.message for p in problems if p.blocking]
    assert any("no CUDA GPU: this recipe needs one" in m and "`--preset smoke` runs here" in m for m in msgs)
    assert any("not in the local cache" in m and "offline mode is on" in m for m in msgs)
    assert recipe_problems(gsm8k.RECIPE.resolve(preset="smoke"), profile=CPU, env=env,
                           hub_probe=_never, cache_dir=str(tmp_path)) == []
    for p in GPU_PROFILES:  # the GPU part of the verdict is the profile's
        assert not any("no CUDA GPU" in q.message
                       for q in recipe_problems(cfg, profile=p, env=env, hub_probe=_never,
                                                cache_dir=str(tmp_path)))


def test_what_needs_a_gpu(tiny_model_dir):
    from unsloth_grpo.models.ref import model_ref

    def needs_gpu(m):  # the model section's question, as the doctor asks it
        return model_ref(m.name).needs_gpu(load_in_4bit=m.load_in_4bit, fast_inference=m.fast_inference)

    assert needs_gpu(ModelConfig())  # the default: a pre-quantized 4-bit checkpoint
    assert needs_gpu(ModelConfig(name="Qwen/Qwen2.5-1.5B-Instruct"))  # a hub model in 4-bit
    assert not needs_gpu(ModelConfig(name="Qwen/Qwen2.5-1.5B-Instruct", load_in_4bit=False))
    assert not needs_gpu(ModelConfig(name="builtin:tiny"))  # 4-bit is dropped on CPU, as before
    assert not needs_gpu(ModelConfig(name=tiny_model_dir))
    assert needs_gpu(ModelConfig(name="builtin:tiny", fast_inference="on"))


def test_hub_id_typo_offline_names_the_cached_model_and_never_retries(tmp_path):
    (tmp_path / "models--Qwen--Qwen2.5-1.5B-Instruct" / "snapshots" / "abc").mkdir(parents=True)
    (tmp_path / "models--Qwen--Qwen2.5-1.5B-Instruct" / "snapshots" / "abc" / "config.json").write_text("{}")
    (tmp_path / "models--Qwen--Qwen2.5-1.5B-Instruct" / "refs").mkdir()
    (tmp_path / "models--Qwen--Qwen2.5-1.5B-Instruct" / "refs" / "main").write_text("abc")
    good = gsm8k.RECIPE.resolve(overrides=["model.name=Qwen/Qwen2.5-1.5B-Instruct"])
    assert recipe_problems(good, profile=T4, env={"HF_HUB_OFFLINE": "1"}, hub_probe=_never,
                           cache_dir=str(tmp_path)) == []
    typo = gsm8k.RECIPE.resolve(overrides=["model.name=Qwen/Qwen2.5-1.5B-Instrutc"])
    [p] = recipe_problems(typo, profile=T4, env={"HF_HUB_OFFLINE": "1"}, hub_probe=_never,
                          cache_dir=str(tmp_path))
    assert "did you mean 'Qwen/Qwen2.5-1.5B-Instruct'" in p.fix
    # not in offline mode but no network: one probe, then the same verdict
    probes = []
    [p] = recipe_problems(typo, profile=T4, env={}, cache_dir=str(tmp_path),
                          hub_probe=lambda *a: probes.append(a) or (False, "name lookup failed"))
    assert len(probes) == 1 and "does not answer" in p.message


def test_missing_local_model_path_is_reported(tmp_path):
    cfg = gsm8k.RECIPE.resolve(overrides=[f"model.name={tmp_path / 'nope'}"])
    [p] = recipe_problems(cfg, profile=T4, env={}, hub_probe=_never)
    assert "is a path that does not exist" in p.message


def test_the_recipe_exits_2_without_a_traceback_on_a_cpu_machine(monkeypatch, capsys, tmp_path):
    monkeypatch.setattr(profiles, "measure", lambda cards=None: CPU)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))

    def train_fn(cfg, resume=None, decision=None):
        raise AssertionError("training started")

    from unsloth_grpo.cli.recipe import add_train_arguments, run_from_args

    parser = argparse.ArgumentParser()
    add_train_arguments(parser, list(gsm8k.RECIPE.presets))
    assert run_from_args(gsm8k.RECIPE, parser.parse_args([]), train_fn=train_fn) == 2
    err = capsys.readouterr().err
    # the recipe's CPU presets, the real model's too (issue 33: only the tiny one was offered)
    assert "no CUDA GPU: this recipe needs one; `--preset smoke` or `--preset smollm2` run here" in err
    assert "Traceback" not in err


def test_doctor_config_reports_the_missing_gpu(monkeypatch, capsys):
    monkeypatch.setattr(doctor_report, "probe_torch", lambda: TorchInfo("2.14.1+cpu", None, False, ()))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    args = argparse.Namespace(config=str(ROOT / "recipes" / "gsm8k.yaml"), backend=None, bf16=None,
                              fast_inference=None, output_dir=None, cache_dir=None, no_network=True,
                              vllm_server_host=None, vllm_server_port=None, json=True)
    from unsloth_grpo.cli import doctor as doctor_cli

    assert doctor_cli.run(args) == 1
    assert "no CUDA GPU: this recipe needs one" in capsys.readouterr().out


def test_doctor_says_when_the_installed_vllm_cannot_load_4bit():
    from test_doctor import HEALTHY, make_report

    report = make_report(versions={**HEALTHY, "vllm": "0.30.0"}, modules=("unsloth", "vllm"))
    auto = [p for p in run_checks(report) if p.topic == "vllm"]
    assert auto and auto[0].severity == WARNING and "bitsandbytes" in auto[0].message
    on = [p for p in run_checks(report, fast_inference="on") if p.topic == "vllm"]
    assert on[0].severity == ERROR
    fine = make_report(versions={**HEALTHY, "vllm": "0.27.1"}, modules=("unsloth", "vllm"))
    assert not [p for p in run_checks(fine) if p.topic == "vllm"]


# ---------------------------------------------------------------- the docs page


def test_gpu_page_is_generated_from_the_profiles():
    sys.path.insert(0, str(ROOT / "tools"))
    try:
        import update_gpu_docs
    finally:
        sys.path.pop(0)
    text = (ROOT / "docs" / "gpu.md").read_text()
    assert update_gpu_docs.render(text) == text, "docs/gpu.md is stale: python tools/update_gpu_docs.py"
    for p in PROFILES.values():
        assert p.name in text
    for model in planner_cli.CARD_TABLE_MODELS:
        assert f"| {model} |" in text
    assert "## What was verified on a real GPU, and what was not" in text
