"""What only a CUDA GPU can show: a 4-bit load, one GRPO step per backend, the planner against the allocator.

Skipped without CUDA. ``benchmarks/gpu_truth.py`` runs these with the time left in its budget;
by hand: ``pytest -m gpu tests/test_gpu.py``. Each run is a child process of the kit (so Unsloth
is imported before transformers and TRL, as in a real run) on a two-layer model with Qwen2.5's
full vocabulary, whose logits are what GRPO memory is mostly made of.
"""

import importlib.util
import json
from dataclasses import asdict
from pathlib import Path

import pytest
import torch

from conftest import load_script

ROOT = Path(__file__).resolve().parents[1]

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]

BACKENDS = [
    "transformers",
    pytest.param("unsloth", marks=pytest.mark.skipif(importlib.util.find_spec("unsloth") is None,
                                                     reason="unsloth is not installed")),
]


def _kit():
    return load_script(ROOT / "benchmarks" / "gpu_truth.py", in_sys_modules=True)


@pytest.fixture(scope="module")
def kit():
    return _kit()


@pytest.fixture(scope="module")
def model_dir(kit, tmp_path_factory):
    path = tmp_path_factory.mktemp("gpu") / "model"
    code, out = kit._child(["--build", "gpu-test", str(path), "cuda"], 300)
    assert code == 0, out[-3000:]
    return path


def _run(kit, model_dir, tmp_path, *, backend, load_in_4bit, settings):
    spec = {"name": "test", "kind": "train", "backend": backend, "load_in_4bit": load_in_4bit,
            "model_dir": str(model_dir), "device": "cuda", "settings": asdict(settings),
            "output_dir": str(tmp_path / "out")}
    code, out = kit._child(["--run-one", json.dumps(spec)], 300)
    result = kit._result_of(out)
    assert code == 0 and result is not None, out[-4000:]
    return result


@pytest.mark.parametrize("backend", BACKENDS)
def test_4bit_load_quantizes_and_trains(kit, model_dir, tmp_path, backend):
    settings = kit.RunSettings(num_generations=4, per_device_train_batch_size=4, max_completion_length=32,
                               prompt_tokens=32, steps=1)
    four = _run(kit, model_dir, tmp_path, backend=backend, load_in_4bit=True, settings=settings)
    assert four["backend_info"]["load_in_4bit"] is True
    # every decoder linear (7 per layer, 2 layers) is a bitsandbytes NF4 layer under its adapter
    assert four["measured"]["bnb_4bit_linears"] == 14
    assert four["measured"]["trainable_changed"] > 0 and four["measured"]["lora_B_unchanged"] == []
    sixteen = _run(kit, model_dir, tmp_path, backend=backend, load_in_4bit=False, settings=settings)
    assert sixteen["measured"]["bnb_4bit_linears"] == 0


@pytest.mark.parametrize("backend", BACKENDS)
def test_one_grpo_step_moves_every_lora_b(kit, model_dir, tmp_path, backend):
    settings = kit.RunSettings(num_generations=4, per_device_train_batch_size=4, max_completion_length=64,
                               prompt_tokens=32, steps=1)
    r = _run(kit, model_dir, tmp_path, backend=backend, load_in_4bit=False, settings=settings)
    m = r["measured"]
    assert r["backend_info"]["backend"] == backend and r["backend_info"]["device"] == "cuda"
    assert m["completion_mean_length"] == m["completion_min_length"] == 64  # held to the configured length
    assert m["trainable_tensors"] > 0 and m["lora_B_unchanged"] == []


@pytest.mark.parametrize("backend", BACKENDS)
def test_planner_brackets_max_memory_allocated(kit, model_dir, tmp_path, backend):
    """The planner must not promise a card too small (under by more than 10%), nor be twice too cautious."""
    settings = kit.RunSettings(num_generations=8, per_device_train_batch_size=8, max_completion_length=256,
                               prompt_tokens=64, steps=2)
    r = _run(kit, model_dir, tmp_path, backend=backend, load_in_4bit=False, settings=settings)
    measured = r["measured"]["peak_allocated_gb"]
    estimate = r["estimate"]["allocated_gb"]
    assert measured > 0
    assert 0.9 * measured <= estimate <= 2.0 * measured, (
        f"planner {estimate:.3f} GiB vs torch.cuda.max_memory_allocated {measured:.3f} GiB; "
        f"terms: {r['estimate']['breakdown']}")
