"""ModelRef: what a model name means, asked in one place. Each answer is the one the separate functions gave
before the ref replaced them (hardware/backend.py's is_real_builtin, is_prequantized, full_precision_name,
local_model_problem, real_model_dir and resolve_model_path, the doctor's needs_gpu, the tools' TOOL_MODELS),
recorded on the same names from the code at the commit before the ref."""

from __future__ import annotations

import dataclasses

import pytest

from unsloth_grpo.config import ModelConfig
from unsloth_grpo.hardware.backend import BackendError
from unsloth_grpo.models.ref import (
    BUILTIN_MODELS,
    HUB,
    LOCAL,
    REAL,
    TINY,
    UNKNOWN_BUILTIN,
    ModelRef,
    model_ref,
)

#: name -> (kind, is_real_builtin, is_prequantized, full_precision_name, tool twin, license)
OLD_ANSWERS = {
    "builtin:tiny": (TINY, False, False, "builtin:tiny", "builtin:tiny-tools", None),
    "builtin:smollm2-135m-instruct": (REAL, True, False, "builtin:smollm2-135m-instruct", None, "Apache-2.0"),
    "builtin:tinyy": (UNKNOWN_BUILTIN, False, False, "builtin:tinyy", None, None),
    "unsloth/Qwen2.5-1.5B-Instruct-bnb-4bit": (HUB, False, True, "unsloth/Qwen2.5-1.5B-Instruct", None, None),
    "unsloth/Qwen2.5-3B-Instruct-unsloth-bnb-4bit": (HUB, False, True, "unsloth/Qwen2.5-3B-Instruct", None, None),
    "Qwen/Qwen2.5-0.5B-Instruct": (HUB, False, False, "Qwen/Qwen2.5-0.5B-Instruct", None, None),
    "localmodel": (LOCAL, False, False, "localmodel", None, None),
    "./localmodel": (LOCAL, False, False, "./localmodel", None, None),
    "emptydir/": (LOCAL, False, False, "emptydir/", None, None),
    "outputs/x": (LOCAL, False, False, "outputs/x", None, None),
}

#: name -> needs_gpu with the default settings (4-bit, fast_inference auto), 16-bit, vLLM on, 16-bit without vLLM
OLD_NEEDS_GPU = {
    "builtin:tiny": (False, False, True, False),
    "builtin:smollm2-135m-instruct": (False, False, True, False),
    "builtin:tinyy": (False, False, True, False),
    "unsloth/Qwen2.5-1.5B-Instruct-bnb-4bit": (True, True, True, True),
    "unsloth/Qwen2.5-3B-Instruct-unsloth-bnb-4bit": (True, True, True, True),
    "Qwen/Qwen2.5-0.5B-Instruct": (True, False, True, False),
    "localmodel": (False, False, True, False),
    "./localmodel": (False, False, True, False),
    "emptydir/": (False, False, True, False),
    "outputs/x": (True, False, True, False),  # a path that does not exist is not on this machine's disk
}
SETTINGS = ({}, {"load_in_4bit": False}, {"fast_inference": "on"}, {"load_in_4bit": False, "fast_inference": "off"})


@pytest.fixture
def here(tmp_path, monkeypatch):
    """A working directory with a model folder (``localmodel``) and an empty one, and a home of its own."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("UNSLOTH_GRPO_HOME", str(tmp_path / "home"))
    (tmp_path / "localmodel").mkdir()
    (tmp_path / "localmodel" / "config.json").write_text("{}")
    (tmp_path / "emptydir").mkdir()
    return tmp_path


@pytest.mark.parametrize("name", sorted(OLD_ANSWERS))
def test_each_kind_answers_as_the_old_functions_did(here, name):
    kind, real, prequantized, full_precision, tool_twin, license_ = OLD_ANSWERS[name]
    ref = model_ref(name)
    assert ref == ModelRef.of(name) == ModelRef(name, kind)
    assert (ref.real is not None) is real and ref.is_builtin is name.startswith("builtin:")
    assert ref.prequantized is prequantized and ref.full_precision == full_precision
    assert ref.tool_twin == tool_twin and ref.license == license_
    assert ref.hub_id == (name if kind == HUB else None)
    if kind == LOCAL:
        assert ref.local_path.resolve() == (here / name).resolve()
    else:
        assert ref.local_path is None


@pytest.mark.parametrize("name", sorted(OLD_NEEDS_GPU))
def test_needs_gpu_is_the_doctors_rule(here, name):
    for settings, expected in zip(SETTINGS, OLD_NEEDS_GPU[name]):
        m = dataclasses.replace(ModelConfig(name=name), **settings)
        assert model_ref(name).needs_gpu(load_in_4bit=m.load_in_4bit, fast_inference=m.fast_inference) is expected, \
            (name, settings)


def test_what_stops_a_local_path_is_said_for_local_names_only(here):
    assert model_ref("outputs/x").local_problem() == (
        "model path 'outputs/x' does not exist (outputs/ is where runs are written, so the name is read as a "
        "path, not a hub id); give a run directory, an adapter, a merged model or a hub id")
    assert model_ref("emptydir/").local_problem() == (
        "model path 'emptydir/' is empty, so there is no model to load; point at the run, adapter or model "
        "folder itself (a download or a copy that did not finish?)")
    for name in ("localmodel", "./localmodel", "builtin:tiny", "builtin:tinyy", "Qwen/Qwen2.5-0.5B-Instruct"):
        assert model_ref(name).local_problem() is None, name


def test_making_a_ref_builds_and_fetches_nothing_and_path_is_where_that_happens(here):
    real = model_ref("builtin:smollm2-135m-instruct")
    assert real.checkpoint_dir == here / "home" / "models" / "smollm2-135m-instruct"
    assert not (here / "home").exists()  # no tiny model built, no package fetched
    for name in ("Qwen/Qwen2.5-0.5B-Instruct", "outputs/x", "localmodel"):
        assert model_ref(name).path() == name  # hub ids and paths are given to from_pretrained as they are
    with pytest.raises(BackendError, match="unknown built-in model 'builtin:tinyy'; choose one of: ") as info:
        model_ref("builtin:tinyy").path()
    assert all(n in str(info.value) for n in BUILTIN_MODELS)
    with pytest.raises(ValueError):
        model_ref("builtin:tiny").checkpoint_dir  # noqa: B018 - only a real built-in has one


def test_the_tiny_model_path_is_the_built_model(tiny_model_dir):
    assert model_ref("builtin:tiny").path() == tiny_model_dir
    assert model_ref(tiny_model_dir).kind == LOCAL and model_ref(tiny_model_dir).local_problem() is None
