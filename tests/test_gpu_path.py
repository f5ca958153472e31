"""Issue 25: the GPU path read against the library sources, each finding on simulated cards and packages.

Nothing here needs a GPU: the cards are the shipped profiles, the installed packages are given to the
doctor, and Unsloth's loader is a stand-in where a test says so. The finding each test covers is in
its name or docstring; docs/gpu.md's findings table lists them with how each was checked.
"""

from __future__ import annotations

import dataclasses
import subprocess
import sys
import textwrap
import tomllib
import types
from pathlib import Path

import pytest
from packaging.specifiers import SpecifierSet

from unsloth_grpo.config import ModelConfig
from unsloth_grpo.hardware import backend, memory, planner, profiles
from unsloth_grpo.hardware.doctor import probes as doctor_probes
from unsloth_grpo.hardware.doctor import recipe as doctor_recipe
from unsloth_grpo.hardware.doctor.checks import ERROR, WARNING, run_checks
from unsloth_grpo.hardware.doctor.probes import GPU, TorchInfo
from unsloth_grpo.hardware.doctor.recipe import recipe_problems
from unsloth_grpo.hardware.doctor.report import collect_report
from unsloth_grpo.hardware.profiles import CPU, PROFILES, vllm_choice
from unsloth_grpo.models.ref import model_ref
from unsloth_grpo.recipes import gsm8k

ROOT = Path(__file__).resolve().parents[1]
GOOD_VLLM = ("0.27.1", False)
T4, A100, H100 = PROFILES["t4"], PROFILES["a100-80"], PROFILES["h100-80"]
GIB = 2**30
H200 = TorchInfo("2.11.0+cu130", "13.0", True, (GPU(0, "NVIDIA H200", 140 * GIB, (9, 0), 139 * GIB),),
                 nvidia_driver=True)


# ---------------------------------------------------------------- 1: the doctor and Unsloth's own requirements


def _unsloth_lines() -> list[str]:
    import importlib.metadata

    return list(importlib.metadata.requires("unsloth") or [])


def _pyproject_requirements() -> tuple[list[str], str]:
    """This checkout's requirements as metadata lines (what installing it would declare)."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    lines = list(project["dependencies"])
    for extra, reqs in project["optional-dependencies"].items():
        lines += [f'{r.split(";")[0].strip()}; extra == "{extra}"' for r in reqs]
    return lines, project["requires-python"]


def _report(versions: dict, *, packaging_version: str = "26.4"):
    ours, python = _pyproject_requirements()
    import importlib.metadata

    have = {d.metadata["Name"]: d.version for d in importlib.metadata.distributions() if d.metadata["Name"]}
    have.update({"torch": "2.11.0", "packaging": packaging_version, **versions})  # this venv, as the GPU image
    return collect_report(versions=have, requirements={"unsloth-grpo": ours, "unsloth": _unsloth_lines()},
                          requires_python=python, torch_info=H200, env={}, python_version="3.12.3",
                          importable=lambda m: m in ("unsloth", "unsloth_zoo", "trl", "bitsandbytes"),
                          check_hub=False, disk_free=lambda p: 500 * GIB)


def test_packages_unsloth_declares_but_training_never_imports_do_not_block():
    """Finding 1: xformers and diffusers missing, an older certifi: warnings, each with why. pydantic,
    which Unsloth needs only for its studio app, checks this project's configs: missing, it blocks."""
    report = _report({"xformers": None, "diffusers": None, "pydantic": None, "certifi": "2025.1.31"})
    problems = run_checks(report, backend="unsloth", need_bf16=True, fast_inference="off", load_in_4bit=True)
    named = {p.package: p for p in problems if p.package}
    for name in ("xformers", "diffusers", "certifi"):
        assert named[name].severity == WARNING, named[name]
        assert "not needed to train" in named[name].message
    assert [p.package for p in problems if p.blocking] == ["pydantic"]
    assert "unsloth-grpo" in named["pydantic"].message and "pydantic>=2.10" in named["pydantic"].fix
    present = run_checks(_report({"xformers": None, "diffusers": None, "pydantic": "2.14.4", "certifi": "2025.1.31"}),
                         backend="unsloth", need_bf16=True, fast_inference="off", load_in_4bit=True)
    assert not [p for p in present if p.blocking], [str(p) for p in present if p.blocking]
    # a package the run does import still blocks
    broken = run_checks(_report({"xformers": None, "trl": "1.16.0"}), backend="unsloth", fast_inference="off")
    assert {p.package for p in broken if p.blocking} == {"trl"}


def test_an_old_packaging_is_reported_not_raised(monkeypatch):
    """Finding 1: packaging older than 26.3 lacks SpecifierSet.is_unsatisfiable/is_subset; the doctor
    names it with the fix instead of stopping on an AttributeError."""
    monkeypatch.delattr(SpecifierSet, "is_unsatisfiable")
    monkeypatch.delattr(SpecifierSet, "is_subset")
    problems = run_checks(_report({"xformers": "0.0.35", "diffusers": "0.42.1", "pydantic": "2.14.4",
                                   "certifi": "2026.10.19"}, packaging_version="25.0"),
                          backend="unsloth", fast_inference="off")
    old = [p for p in problems if p.package == "packaging"]
    assert old and old[0].severity == ERROR and "packaging>=26.3" in old[0].fix


@pytest.mark.slow
def test_unsloth_imports_without_the_packages_the_doctor_lets_pass(tmp_path):
    """Finding 1, run: `import unsloth` (and unsloth_zoo) with xformers, diffusers and pydantic hidden."""
    code = textwrap.dedent("""
        import importlib.abc, sys
        HIDDEN = ("xformers", "diffusers", "pydantic")
        class Hide(importlib.abc.MetaPathFinder):
            def find_spec(self, name, path=None, target=None):
                if name.split(".")[0] in HIDDEN:
                    raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        sys.meta_path.insert(0, Hide())
        import unsloth, unsloth_zoo
        from unsloth import FastLanguageModel
        assert not [m for m in sys.modules if m.split(".")[0] in HIDDEN]
        print("IMPORTED", unsloth.__version__)
    """)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600,
                          env={**__import__("os").environ, "UNSLOTH_DISABLE_STATISTICS": "1", "OMP_NUM_THREADS": "1"})
    assert "IMPORTED 2026.10.9" in proc.stdout, proc.stdout[-2000:] + proc.stderr[-3000:]


# ---------------------------------------------------------------- 2 and 3: TRL's colocated vLLM


def test_transformers_backend_never_pairs_4bit_weights_with_colocated_vllm():
    """Finding 2: TRL merges the LoRA into NF4 weights and unmerges it each round (peft re-quantizes
    through the CPU); the run generates without vLLM under auto and refuses `on` with one line."""
    auto = vllm_choice(T4, backend="transformers", load_in_4bit=True, vllm_version="0.27.1")
    assert not auto.use and auto.error is None and "merges the LoRA into the NF4 weights" in auto.reason
    on = vllm_choice(T4, backend="transformers", load_in_4bit=True, vllm_version="0.27.1", fast_inference="on")
    assert on.error and "\n" not in on.error and "model.load_in_4bit=false" in on.error
    with pytest.raises(backend.BackendError, match="merges the LoRA into the NF4 weights"):
        backend.decide(ModelConfig(fast_inference="on"), T4, backend=("transformers", "t"), vllm=GOOD_VLLM,
                       bnb_importable=True)
    # the planner plans 16-bit weights when this backend generates with vLLM
    p = planner.plan("qwen2.5-1.5b", 79.1, compute_capability=8.0, backend="transformers", use_vllm=True)
    assert p.fits and p.load_in_4bit is False
    # Unsloth's own vLLM loads the 4-bit weights itself: unchanged there
    assert vllm_choice(T4, backend="unsloth", load_in_4bit=True, vllm_version="0.27.1").use


def test_trls_colocated_vllm_sleeps_while_the_model_trains(tmp_path):
    """Finding 3: without sleep mode the pool (0.6 of an 80 GB card: 48 GB) stays reserved while training.
    TRL 1.14's `vllm_enable_sleep_mode` gives it back between generations."""
    from unsloth_grpo.training.train import build_grpo_args

    cfg = gsm8k.RECIPE.resolve(overrides=[f"output_dir={tmp_path}", "model.load_in_4bit=false",
                                          "model.backend=transformers"])
    d = backend.decide(cfg.model, A100, backend=("transformers", "t"), vllm=GOOD_VLLM)
    assert d.vllm.use and d.vllm.standby and "asleep while training" in d.vllm.reason
    info = dataclasses.replace(d.info(cfg.model.name), device="cpu", dtype="fp32")  # GRPOConfig without a GPU
    args = build_grpo_args(cfg, info, weights=[1.0] * len(cfg.rewards))
    assert args.use_vllm and args.vllm_mode == "colocate" and args.vllm_enable_sleep_mode is True
    s = planner.settings_from_config(cfg, A100.as_gpu(), vllm=GOOD_VLLM)
    est = memory.estimate_memory(cfg.model.name, **s)
    assert est.phase_of["vllm_pool"] == "generation"  # not held through the training pass
    # standby: off keeps the old behaviour on purpose
    held = backend.decide(dataclasses.replace(cfg.model, vllm_standby="off"), A100, backend=("transformers", "t"),
                          vllm=GOOD_VLLM)
    assert held.vllm.use and not held.vllm.standby and "held while training" in held.vllm.reason


# ---------------------------------------------------------------- 10 and 11: the standby pool


def test_no_preset_sets_a_pool_that_standby_ignores():
    """Finding 10: with standby Unsloth forces its own pool (unsloth_zoo load_vllm), so the t4 presets'
    gpu_memory_utilization: 0.5 did nothing. A preset sets nothing the run ignores, and a user's value
    that the run ignores is said in the run's first line."""
    import importlib

    from unsloth_grpo.recipes import __path__ as recipe_dirs

    names = sorted(p.stem for p in Path(recipe_dirs[0]).glob("*.py") if not p.stem.startswith("_"))
    checked = 0
    for name in names:
        recipe = importlib.import_module(f"unsloth_grpo.recipes.{name}").RECIPE
        for preset in recipe.presets:
            if preset == "smoke":
                continue
            m = recipe.resolve(preset=preset).model
            d = backend.decide(m, T4 if preset == "t4" else H100, backend=("unsloth", "t"), vllm=GOOD_VLLM)
            if d.vllm.standby:  # the pool is standby's: a preset's own value would be ignored
                assert m.gpu_memory_utilization in (ModelConfig().gpu_memory_utilization,
                                                    d.vllm.gpu_memory_utilization), (name, preset)
            checked += 1
    assert checked >= 5  # every t4 preset
    m = gsm8k.RECIPE.resolve(preset="t4", overrides=["model.gpu_memory_utilization=0.5"]).model
    d = backend.decide(m, T4, backend=("unsloth", "t"), vllm=GOOD_VLLM)
    assert any("gpu_memory_utilization=0.5 is not used" in n and "0.76" in n for n in d.notes)
    assert "is not used" in d.info(m.name).summary()


class _Loader:
    """Unsloth's FastLanguageModel as the loader calls it: records the keyword arguments."""

    calls: list = []

    @classmethod
    def from_pretrained(cls, **kw):
        cls.calls.append(kw)
        return types.SimpleNamespace(name="model"), types.SimpleNamespace(pad_token="<p>", eos_token="</s>",
                                                                          padding_side="right")


def test_standby_follows_the_environment_unsloth_reads(monkeypatch):
    """Finding 11: Unsloth reads UNSLOTH_VLLM_STANDBY at import. A user's 0, or an unsloth imported
    before the run could set it, means no standby: the pool must then be the recipe's, not standby's
    0.76 of the card held all through training."""
    m = gsm8k.RECIPE.resolve().model
    # the loader on this machine (a T4 here, measured) hands Unsloth the pool the environment allows
    _Loader.calls = []
    monkeypatch.setitem(sys.modules, "unsloth", types.SimpleNamespace(FastLanguageModel=_Loader))
    monkeypatch.setattr(backend, "measure", lambda: T4)
    monkeypatch.setattr(profiles, "installed_vllm", lambda: GOOD_VLLM)
    monkeypatch.setattr(backend, "backend_name", lambda *a, **k: ("unsloth", "test"))
    monkeypatch.setenv("UNSLOTH_VLLM_STANDBY", "0")
    backend.load_model(ModelConfig(name="org/model"), None, log=lambda _l: None)
    assert _Loader.calls[0]["gpu_memory_utilization"] == m.gpu_memory_utilization
    pick = dict(backend=("unsloth", "t"), vllm=GOOD_VLLM)
    assert backend.decide(m, T4, **pick, environment=({}, False)).vllm.standby
    off = backend.decide(m, T4, **pick, environment=({"UNSLOTH_VLLM_STANDBY": "0"}, False)).vllm
    assert off.use and not off.standby and off.gpu_memory_utilization == m.gpu_memory_utilization
    late = backend.decide(m, T4, **pick, environment=({}, True)).vllm
    assert late.use and not late.standby and "imported before" in late.reason
    on = backend.decide(dataclasses.replace(m, vllm_standby="off"), T4, **pick,
                        environment=({"UNSLOTH_VLLM_STANDBY": "1"}, True)).vllm
    assert on.standby and on.gpu_memory_utilization == profiles.standby_utilization(T4.total_gb)


# ---------------------------------------------------------------- 14: install


def test_vllm_4bit_needs_the_bitsandbytes_vllm_checks_for():
    """Finding 14: vLLM 0.27.1's 4-bit layers ask for bitsandbytes >= 0.48.1 (its loader for 0.46.1)."""
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    for extra in ("unsloth", "test"):
        spec = next(SpecifierSet(r.split("bitsandbytes", 1)[1].split("#")[0].strip().strip('",'))
                    for r in extras[extra] if r.startswith("bitsandbytes"))
        assert not spec.contains("0.45.5") and not spec.contains("0.48.0") and spec.contains("0.50.2"), extra
    assert "bitsandbytes>=0.48.1" in profiles.vllm_version_problem("0.27.1", bnb_version="0.45.5")
    assert profiles.vllm_version_problem("0.27.1", bnb_version="0.50.2") is None
    assert profiles.vllm_version_problem("0.27.1", load_in_4bit=False, bnb_version="0.45.5") is None
    assert not vllm_choice(T4, vllm_version="0.27.1", bnb_version="0.47.0").use


def test_a_driver_too_old_for_torchs_cuda_is_named_not_called_no_gpu(monkeypatch):
    """Finding 14: vLLM 0.27.1 pins torch 2.13.0, a CUDA 13 build; under a driver older than 580 torch
    sees no GPU, and "no CUDA GPU" would send the user to another machine."""
    said = ("torch 2.13.0+cu130 is built for CUDA 13.0, which needs NVIDIA driver 580.65 or newer; this machine's "
            "driver is 535.104.05, so torch sees no GPU")
    monkeypatch.setattr(doctor_recipe, "cuda_driver_problem", lambda: said, raising=False)
    cfg = gsm8k.RECIPE.resolve()
    found = recipe_problems(cfg, profile=CPU, env={"HF_HUB_OFFLINE": "1"}, hub_probe=lambda *a: (False, ""),
                            cache_dir="/nonexistent")
    gpu = [p for p in found if p.topic == "gpu"]
    assert len(gpu) == 1 and "580.65" in gpu[0].message and "no CUDA GPU" not in gpu[0].message
    problem = profiles.driver_problem("2.13.0+cu130", "13.0", "535.104.05")
    assert problem.startswith(said)
    assert profiles.driver_problem("2.13.0+cu130", "13.0", "580.159.03") is None
    assert profiles.driver_problem("2.13.0+cu128", "12.8", "535.104.05") is None
    t = TorchInfo("2.13.0+cu130", "13.0", False, (), nvidia_driver=True, driver_version="535.104.05")
    report = collect_report(versions={"torch": "2.13.0"}, requirements={"unsloth-grpo": []}, torch_info=t, env={},
                            importable=lambda m: False, check_hub=False, disk_free=lambda p: 500 * GIB)
    assert any("580.65" in p.message for p in run_checks(report, backend="transformers"))


# ---------------------------------------------------------------- 4 and 5: --preset auto


def test_preset_auto_keeps_the_engine_start_fallback_it_was_sized_for():
    """Finding 4: the plan wrote fast_inference=on, which turns the fallback off and makes vLLM's own
    exact pins blocking in the doctor."""
    from unsloth_grpo.tasks._recipe import _auto_preset

    cfg = gsm8k.RECIPE.resolve(overrides=["model.backend=unsloth"])
    preset = _auto_preset(cfg, T4.as_gpu(), GOOD_VLLM)
    assert preset["model"]["fast_inference"] == "auto"
    planned = gsm8k.RECIPE.resolve(overrides=["model.backend=unsloth", "model.fast_inference=auto",
                                              f"model.gpu_memory_utilization={preset['model']['gpu_memory_utilization']}",
                                              "model.vllm_standby=on", "model.dtype=fp16"])
    d = backend.decide(planned.model, T4, backend=("unsloth", "t"), vllm=GOOD_VLLM)
    assert d.vllm.use and d.vllm.fallback
    # vLLM's exact pins (torch==2.13.0) against another torch: advice under auto, a stop only under on
    report = collect_report(versions={"torch": "2.14.1", "vllm": "0.27.1", "unsloth": "2026.10.9"},
                            requirements={"unsloth-grpo": [], "vllm": ["torch==2.13.0"]}, torch_info=H200, env={},
                            importable=lambda m: m in ("unsloth", "vllm"), check_hub=False,
                            disk_free=lambda p: 500 * GIB)
    pins = [p for p in run_checks(report, backend="unsloth", fast_inference=preset["model"]["fast_inference"])
            if p.package == "torch"]
    assert pins and pins[0].severity == WARNING
    assert [p.severity for p in run_checks(report, backend="unsloth", fast_inference="on")
            if p.package == "torch"] == [ERROR]


def test_preset_auto_in_16_bit_loads_the_16_bit_repository(tmp_path):
    """Finding 5: a 16-bit plan kept the -bnb-4bit name; Unsloth then silently loads the 16-bit repo,
    while run_info.json, the model card and the offline cache check name the 4-bit one."""
    cfg = gsm8k.RECIPE.resolve(preset="auto", gpu=A100.as_gpu())  # an 80 GB card: 16-bit weights
    assert cfg.model.load_in_4bit is False and cfg.model.name == "unsloth/Qwen2.5-1.5B-Instruct"
    assert model_ref("unsloth/Qwen2.5-1.5B-Instruct-bnb-4bit").full_precision == "unsloth/Qwen2.5-1.5B-Instruct"
    assert model_ref("unsloth/Qwen2.5-3B-Instruct-unsloth-bnb-4bit").full_precision == "unsloth/Qwen2.5-3B-Instruct"
    assert model_ref("Qwen/Qwen2.5-1.5B-Instruct").full_precision == "Qwen/Qwen2.5-1.5B-Instruct"
    # the offline cache check looks for the repository the run loads
    snap = tmp_path / "models--unsloth--Qwen2.5-1.5B-Instruct"
    (snap / "refs").mkdir(parents=True)
    (snap / "refs" / "main").write_text("abc")
    (snap / "snapshots" / "abc").mkdir(parents=True)
    (snap / "snapshots" / "abc" / "config.json").write_text("{}")
    found = recipe_problems(cfg, profile=A100, env={"HF_HUB_OFFLINE": "1"}, hub_probe=lambda *a: (False, ""),
                            cache_dir=str(tmp_path))
    assert found == []
    four = gsm8k.RECIPE.resolve(preset="auto", gpu=T4.as_gpu(), overrides=["model.load_in_4bit=true"])
    assert four.model.name == "unsloth/Qwen2.5-1.5B-Instruct-bnb-4bit"  # 4-bit keeps the pre-quantized upload


# ---------------------------------------------------------------- 8: import order


@pytest.mark.slow
def test_unsloth_is_imported_before_a_training_key_is_checked(tmp_path):
    """Finding 8: checking a pass-through `training:` key reads TRL's GRPOConfig, which imported trl,
    transformers and peft before unsloth (Unsloth then warns its patches may be partial). The recipe
    is run as a user runs it, up to loading the model."""
    script = tmp_path / "order.py"
    script.write_text(textwrap.dedent("""
        import importlib.abc, json, sys
        order = []
        class Record(importlib.abc.MetaPathFinder):
            def find_spec(self, name, path=None, target=None):
                if name in ("unsloth", "trl", "transformers", "peft") and name not in order:
                    order.append(name)
        sys.meta_path.insert(0, Record())
        from unsloth_grpo.hardware import backend
        class Stop(Exception):
            pass
        def stop(*a, **k):
            print("ORDER " + json.dumps(order), flush=True)
            raise Stop()
        backend.load_model = stop
        from unsloth_grpo.recipes import gsm8k
        from unsloth_grpo.cli.recipe import run_recipe
        try:
            run_recipe(gsm8k.RECIPE, ["--preset", "smoke", "--output-dir", sys.argv[1],
                                      "training.repetition_penalty=1.0"])
        except Stop:
            pass
    """))
    import os

    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", "UNSLOTH_DISABLE_STATISTICS": "1"}
    proc = subprocess.run([sys.executable, str(script), str(tmp_path / "run")], capture_output=True, text=True,
                          timeout=600, env=env, cwd=ROOT)
    line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("ORDER ")), None)
    assert line is not None, proc.stdout[-2000:] + proc.stderr[-3000:]
    import json

    order = json.loads(line[len("ORDER "):])
    assert order[0] == "unsloth" and set(order) == {"unsloth", "trl", "transformers", "peft"}, order
    assert "imported before unsloth" not in proc.stdout + proc.stderr


# ---------------------------------------------------------------- 12: the engine-start fallback


class _Engine:
    """Stands for a half-built vLLM engine: only the frames of the failed start refer to it."""


class _FailingVllmLoader:
    calls: list = []
    engine_alive_at_reload: list = []
    engine = None

    @classmethod
    def from_pretrained(cls, **kw):
        import gc
        import weakref

        cls.calls.append(kw)
        if kw["fast_inference"]:
            engine = _Engine()  # noqa: F841 - held by this frame, as vLLM's objects are by theirs
            cls.engine = weakref.ref(engine)
            raise RuntimeError("CUDA out of memory while allocating the KV cache")
        gc.collect()
        cls.engine_alive_at_reload.append(cls.engine() is not None)
        return types.SimpleNamespace(name="model"), types.SimpleNamespace(pad_token="<p>", eos_token="</s>",
                                                                          padding_side="right")


def test_reload_after_a_failed_engine_start_has_its_memory_back(monkeypatch):
    """Finding 12: the reload without vLLM ran inside the except block, where the exception's traceback
    keeps the half-built engine (and the memory it holds) alive; and the standby variable stayed set."""
    _FailingVllmLoader.calls, _FailingVllmLoader.engine_alive_at_reload = [], []
    monkeypatch.setitem(sys.modules, "unsloth", types.SimpleNamespace(FastLanguageModel=_FailingVllmLoader))
    monkeypatch.setattr(profiles, "installed_vllm", lambda: GOOD_VLLM)
    monkeypatch.setattr(backend, "backend_name", lambda *a, **k: ("unsloth", "test"))
    monkeypatch.setattr(backend, "_STANDBY_SET_HERE", False, raising=False)
    monkeypatch.setenv("UNSLOTH_VLLM_STANDBY", "x")
    monkeypatch.delenv("UNSLOTH_VLLM_STANDBY")
    lines = []
    loaded = backend.load_model(ModelConfig(name="org/model"), None, log=lines.append, profile=T4)
    assert [c["fast_inference"] for c in _FailingVllmLoader.calls] == [True, False]
    assert _FailingVllmLoader.engine_alive_at_reload == [False]
    assert not loaded.info.use_vllm and not loaded.info.vllm_standby
    assert "UNSLOTH_VLLM_STANDBY" not in __import__("os").environ
    assert any("CUDA out of memory" in line and "generating without vLLM" in line for line in lines)


# ---------------------------------------------------------------- 6: export of a 4-bit run


def _four_bit_run(tmp_path: Path) -> Path:
    import json

    run = tmp_path / "run"
    run.mkdir()
    (run / "adapter_config.json").write_text(json.dumps({"base_model_name_or_path":
                                                         "unsloth/Qwen2.5-1.5B-Instruct-bnb-4bit"}))
    (run / "config.yaml").write_text("model:\n  name: unsloth/Qwen2.5-1.5B-Instruct-bnb-4bit\n  load_in_4bit: true\n")
    return run


def _export_args(run: Path, out: Path, **kw):
    import argparse

    base = dict(model=str(run), merged=str(out), gguf=None, quant="q4_k_m", push_to_hub=None, public=False,
                backend="unsloth", base_model=None, dtype="auto", force=False, verify=False)
    return argparse.Namespace(**{**base, **kw})


class _MergeFails:
    def save_pretrained_merged(self, *a, **k):
        raise RuntimeError("Unsloth: Model unsloth/Qwen2.5-1.5B-Instruct could not be read locally or on Hugging "
                           "Face, so the merged_16bit merge cannot obtain the base weights.\nmore")


def test_export_of_a_4bit_run_says_it_needs_the_16bit_base_and_never_tracebacks(tmp_path, monkeypatch, capsys):
    """Finding 6: Unsloth's merged_16bit merge downloads the 16-bit base and merges onto it; offline it
    raised a RuntimeError that the export did not catch (a traceback)."""
    from unsloth_grpo import export

    run = _four_bit_run(tmp_path)
    loads = []
    monkeypatch.setattr(export, "_load_as_trained", lambda source: loads.append(source) or (_MergeFails(), None))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    from unsloth_grpo.cli import export as export_cli

    assert export_cli.run(_export_args(run, tmp_path / "merged")) == 2
    err = capsys.readouterr().err
    assert "16-bit weights of unsloth/Qwen2.5-1.5B-Instruct" in err and "offline mode is on" in err
    assert loads == []  # said before any model is loaded
    # online, Unsloth's own failure is an error message, not a traceback
    monkeypatch.delenv("HF_HUB_OFFLINE")
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    monkeypatch.setattr(doctor_probes, "tcp_probe", lambda *a: (True, "connected"))
    assert export_cli.run(_export_args(run, tmp_path / "merged2")) == 2
    err = capsys.readouterr().err
    assert "Unsloth's 16-bit merge failed: RuntimeError: Unsloth: Model unsloth/Qwen2.5-1.5B-Instruct" in err
    assert "Traceback" not in err and len(loads) == 1


# ---------------------------------------------------------------- 7: evaluating a 4-bit run


class _InferenceLoader:
    calls: list = []

    @classmethod
    def from_pretrained(cls, **kw):
        cls.calls.append(kw)
        return types.SimpleNamespace(name="model"), types.SimpleNamespace(pad_token="<p>", eos_token="</s>",
                                                                          padding_side="right")

    @staticmethod
    def for_inference(model):
        return model


def test_eval_of_a_4bit_run_loads_the_weights_it_was_trained_on(tmp_path, monkeypatch):
    """Finding 7: `unsloth-grpo eval` loaded a 4-bit run's adapter with load_in_4bit=False, so Unsloth put it
    on the 16-bit base (another download, weights the adapter was not trained on)."""
    import json

    run = _four_bit_run(tmp_path)
    (run / "run_info.json").write_text(json.dumps({"backend": {"load_in_4bit": True}}))
    _InferenceLoader.calls = []
    monkeypatch.setitem(sys.modules, "unsloth", types.SimpleNamespace(FastLanguageModel=_InferenceLoader))
    loaded = backend.load_for_inference(str(run), backend="unsloth", profile=T4, log=lambda _l: None)
    assert _InferenceLoader.calls[0]["load_in_4bit"] is True and loaded.info.load_in_4bit
    # a run whose 4-bit request was dropped (a CPU run) is evaluated as it trained: 16-bit
    (run / "run_info.json").write_text(json.dumps({"backend": {"load_in_4bit": False}}))
    backend.load_for_inference(str(run), backend="unsloth", profile=T4, log=lambda _l: None)
    assert _InferenceLoader.calls[1]["load_in_4bit"] is False
    assert backend.trained_in_4bit(tmp_path / "nowhere", "unsloth/Qwen2.5-1.5B-Instruct-bnb-4bit")


class _PurposeLoader:
    """FastLanguageModel recording what each load asked of it, and which models went into inference mode."""

    calls: list = []
    inference: list = []

    @classmethod
    def from_pretrained(cls, **kw):
        cls.calls.append(kw)
        return types.SimpleNamespace(name="model"), types.SimpleNamespace(pad_token="<p>", eos_token="</s>",
                                                                          padding_side="right")

    @classmethod
    def for_inference(cls, model):
        cls.inference.append(model)
        return model


def test_the_one_loader_asks_unsloth_what_each_caller_asked_before(tmp_path, monkeypatch):
    """Training, inference and export load through backend.load; each still hands Unsloth what it did
    when each had a loader of its own."""
    import json

    from unsloth_grpo import export

    _PurposeLoader.calls, _PurposeLoader.inference = [], []
    monkeypatch.setitem(sys.modules, "unsloth", types.SimpleNamespace(FastLanguageModel=_PurposeLoader))
    run = _four_bit_run(tmp_path)
    (run / "run_info.json").write_text(json.dumps({"backend": {"load_in_4bit": False}}))
    # the export: the adapter in 4-bit as the run's config asked, Unsloth's own dtype, the tokenizer as saved
    _model, tokenizer = export._load_as_trained(run)
    assert _PurposeLoader.calls[-1] == {"model_name": str(run), "load_in_4bit": True}
    assert tokenizer.padding_side == "right" and _PurposeLoader.inference == []
    # inference: 4-bit as the loader did it (run_info.json), the card's dtype, inference mode, a ready tokenizer
    loaded = backend.load_for_inference(str(run), backend="unsloth", profile=T4, log=lambda _l: None)
    assert sorted(_PurposeLoader.calls[-1]) == ["dtype", "load_in_4bit", "model_name"]
    assert _PurposeLoader.calls[-1]["load_in_4bit"] is False and _PurposeLoader.calls[-1]["model_name"] == str(run)
    assert _PurposeLoader.inference == [loaded.model] and loaded.tokenizer.padding_side == "left"
    # training: the run's sequence length, remote code and vLLM settings
    monkeypatch.setattr(profiles, "installed_vllm", lambda: GOOD_VLLM)
    monkeypatch.setattr(backend, "backend_name", lambda *a, **k: ("unsloth", "test"))
    monkeypatch.setattr(backend, "_STANDBY_SET_HERE", False, raising=False)
    monkeypatch.setenv("UNSLOTH_VLLM_STANDBY", "x")  # restored after the test: the decision sets it
    monkeypatch.delenv("UNSLOTH_VLLM_STANDBY")
    backend.load_model(ModelConfig(name="org/model"), None, log=lambda _l: None, profile=T4)
    assert {"max_seq_length", "fast_inference", "trust_remote_code", "dtype"} <= set(_PurposeLoader.calls[-1])
    assert len(_PurposeLoader.inference) == 1


# ---------------------------------------------------------------- 13: evaluation under standby


class _SleepyLLM:
    """vLLM's LLM as Unsloth patches it under standby: generate() wakes a sleeping engine."""

    def __init__(self):
        self.sleeping, self.slept = True, []
        self.llm_engine = types.SimpleNamespace(
            vllm_config=types.SimpleNamespace(model_config=types.SimpleNamespace(enable_sleep_mode=True)),
            is_sleeping=lambda: self.sleeping)

    def generate(self, texts, **kw):
        self.sleeping = False
        out = types.SimpleNamespace(text=" 4", token_ids=[1, 2], finish_reason="stop")
        return [types.SimpleNamespace(outputs=[out]) for _ in texts]

    def sleep(self, level=1):
        self.sleeping = True
        self.slept.append(level)


def test_evaluation_through_vllm_puts_a_sleeping_engine_back_to_sleep(monkeypatch):
    """Finding 13: a periodic evaluation through vLLM woke the standby engine and left it awake, its KV
    cache taking the memory the next training pass needs."""
    from unsloth_grpo.evaluation.generation import generate

    monkeypatch.setitem(sys.modules, "vllm", types.SimpleNamespace(SamplingParams=lambda **kw: kw))
    llm = _SleepyLLM()
    model = types.SimpleNamespace(vllm_engine=llm, fast_generate=llm.generate)
    assert generate(model, None, ["2 + 2 ="], max_new_tokens=4) == [[" 4"]]
    assert llm.sleeping and llm.slept == [1]
    awake = _SleepyLLM()
    awake.sleeping = False  # an engine that was awake (no standby pass running) is left as it was
    generate(types.SimpleNamespace(vllm_engine=awake, fast_generate=awake.generate), None, ["x"], max_new_tokens=4)
    assert awake.slept == []


# ---------------------------------------------------------------- rollouts come from the weights being trained


def test_judge_tells_which_policy_sampled():
    import torch

    from unsloth_grpo.training.rollouts import judge

    torch.manual_seed(0)
    mask = torch.ones(8, 12)
    off = -torch.rand(8, 12) * 3
    tilt = 0.3 + 0.05 * torch.randn(8, 12)
    assert judge(off + tilt, off, mask).from_trained is True  # likelier with the adapter on
    assert judge(off - tilt, off, mask).from_trained is False
    assert judge(off, off, mask).from_trained is None  # an adapter still at zero decides nothing
    noisy = judge(off + 0.01 * torch.randn(8, 12), off, mask)
    assert noisy.from_trained is None
    # with the generator's own log-probabilities, the nearer scoring decides
    on = off + tilt
    assert judge(on, off, mask, generator=off + 0.001).from_trained is False
    assert judge(on, off, mask, generator=on - 0.001).from_trained is True


def test_the_monitor_watches_trls_sampling_difference():
    from unsloth_grpo.training.monitor import HealthChecker, HealthThresholds

    def stream(diff):
        return [{"step": i, "reward": 0.5, "sampling/sampling_logp_difference/mean": diff,
                 "sampling/importance_sampling_ratio/min": 0.2} for i in range(1, 8)]

    fired = HealthChecker().feed(stream(0.6))
    assert [w.name for w in fired] == ["stale_rollouts"] and fired[0].step == 5
    assert "fast_inference=off" in fired[0].fix and fired[0].values["importance_sampling_ratio_min"] == 0.2
    assert HealthChecker().feed(stream(0.02)) == []  # the numerical difference of the same weights
    assert HealthChecker(HealthThresholds(ignore=["stale_rollouts"])).feed(stream(0.6)) == []


class _IgnoreAdapter:
    """A generator that does not see the LoRA: generation runs with the adapter switched off."""

    def __new__(cls):
        from transformers import TrainerCallback

        class IgnoreAdapter(TrainerCallback):
            def on_train_begin(self, args, state, control, model=None, **kw):
                original = model.generate

                def generate(*a, **k):
                    with model.disable_adapter():
                        return original(*a, **k)

                model.generate = generate

        return IgnoreAdapter()


def _smoke_run(tmp_path, callbacks):
    from unsloth_grpo.runs import read_health
    from unsloth_grpo.training.train import train

    cfg = gsm8k.RECIPE.resolve(preset="smoke", output_dir=str(tmp_path / "run"),
                               overrides=["training.max_steps=8", "run.samples_every=0"])
    lines: list[str] = []
    result = train(cfg, callbacks=callbacks, log=lines.append)
    return result, read_health(tmp_path / "run"), lines


@pytest.mark.slow
def test_a_generator_that_ignores_the_adapter_is_flagged_in_the_first_steps(tmp_path):
    """The issue's case: rollouts from the base model while the LoRA trains. On the CPU smoke run the
    check decides once the adapter has moved (step 3-5 here) and writes stale_rollouts to health.jsonl."""
    result, health, _ = _smoke_run(tmp_path, [_IgnoreAdapter()])
    stale = [w for w in health if w["name"] == "stale_rollouts"]
    assert stale and stale[0]["step"] <= 8, health
    assert stale[0]["values"]["adapter_logp_gain_per_token"] < 0
    gains = [m["rollouts/adapter_logp_gain"] for m in result.metrics if "rollouts/adapter_logp_gain" in m]
    assert gains and gains[-1] < 0


@pytest.mark.slow
def test_rollouts_from_the_trained_weights_pass_the_check(tmp_path):
    result, health, lines = _smoke_run(tmp_path, [])
    assert not [w for w in health if w["name"] == "stale_rollouts"], health
    assert any("come from the weights being trained" in line for line in lines), lines
