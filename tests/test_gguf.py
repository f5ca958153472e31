"""GGUF written offline by our own writer: read back by transformers (always) and llama.cpp (where built).

Fast tests use the tiny tokenizer of ``builtin:tiny`` with tiny random models of every family the
writer knows (Llama, Mistral, Qwen2, Qwen3), so each one shows the weights, the metadata and the
tokenizer surviving the trip. The slow ones export the smoke run and the real SmolLM2 model.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from unsloth_grpo.export import gguf_check as gc
from unsloth_grpo.export import gguf_ollama as go
from unsloth_grpo.export import gguf_vocab as gv
from unsloth_grpo.export import gguf_writer as gw

FAMILIES = ["llama", "mistral", "qwen2", "qwen3"]
TEXTS = ["What is 15 + 27?", "<reasoning>\n3 * 4 = 12\n</reasoning>\n<answer>\n12\n</answer>",
         "Hello  world\n\n  it's 2024!  Tabs\tand   spaces ", "<|im_start|>user\nHi<|im_end|>\n"]


def _config(family: str, tok, **extra):
    from transformers import LlamaConfig, MistralConfig, Qwen2Config, Qwen3Config

    cls = {"llama": LlamaConfig, "mistral": MistralConfig, "qwen2": Qwen2Config, "qwen3": Qwen3Config}[family]
    common = dict(vocab_size=len(tok) + 4,  # a few embedding rows the tokenizer never uses, as real models have
                  hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2, max_position_embeddings=256, eos_token_id=tok.eos_token_id,
                  pad_token_id=tok.pad_token_id, bos_token_id=None, rms_norm_eps=1e-5)
    if family == "qwen3":
        common["head_dim"] = 32  # wider than hidden_size / heads, as Qwen3's real sizes are
    return cls(**{**common, **extra})


def _tiny(family: str, folder: Path, tiny_model_dir: str, seed: int = 0, **extra) -> Path:
    """A random model of ``family`` with the tiny tokenizer, saved like a merged export."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if (folder / "config.json").is_file():
        return folder
    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(_config(family, tok, **extra))
    with torch.no_grad():  # biases that are not zero, so a wrong layout of them shows
        for name, p in model.named_parameters():
            if name.endswith(".bias"):
                p.normal_(0, 0.5)
    model.generation_config.eos_token_id = tok.eos_token_id
    model.save_pretrained(str(folder))
    tok.save_pretrained(str(folder))
    return folder


@pytest.fixture(scope="module")
def models(tiny_model_dir, tmp_path_factory):
    root = tmp_path_factory.mktemp("gguf-models")
    return {f: _tiny(f, root / f, tiny_model_dir) for f in FAMILIES}


def _write(model_dir: Path, quant: str, tmp_path: Path) -> Path:
    out = tmp_path / f"{model_dir.name}-{quant}.gguf"
    gw.write_gguf(model_dir, out, quant, log=lambda _m: None)
    return out


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("quant", ["f16", "q8_0", "bf16"])
def test_each_family_reads_back_in_transformers_within_its_tolerance(models, family, quant, tmp_path):
    """Every family and type, read back with transformers' own GGUF reader: the same hyperparameters
    and the merged model's logits within the type's tolerance."""
    path = _write(models[family], quant, tmp_path)
    check = gc.verify_gguf(models[family], path, quant, llama_cpp=False)
    t = check.transformers
    assert not t.mismatched, t.mismatched
    assert check.logits_ok, check.summary()
    assert t.argmax_agreement >= (0.99 if quant == "f16" else 0.9), check.summary()
    # every weight as transformers reads it is the merged weight rounded to its type, bit for bit
    assert t.holds_the_model and t.weights_max_diff == 0.0 and t.tensors >= 21, check.summary()


def test_f32_is_bit_exact_and_the_types_shrink_the_file(models, tmp_path):
    import torch

    model_dir = models["llama"]
    sizes = {q: _write(model_dir, q, tmp_path).stat().st_size for q in ("f32", "f16", "bf16", "q8_0")}
    assert sizes["f32"] > sizes["f16"] == sizes["bf16"] > sizes["q8_0"]
    model, filled, mismatched = gc.load_gguf_in_transformers(tmp_path / "llama-f32.gguf", model_dir)
    from transformers import AutoModelForCausalLM

    merged = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32)
    theirs = model.state_dict()
    for name, w in merged.state_dict().items():
        assert torch.equal(theirs[name], w), name


def test_without_the_rotary_reordering_llama_computes_something_else(models, tmp_path, monkeypatch):
    """The q/k reordering is what makes a Llama file right. In f32 a right file is bit-exact; without the
    reordering transformers (which undoes it when reading, as llama.cpp expects it) gets scrambled
    attention and the check fails."""
    ok = gc.verify_gguf(models["llama"], _write(models["llama"], "f32", tmp_path), "f32", llama_cpp=False)
    assert ok.logits_ok and ok.transformers.max_abs_diff == 0.0
    monkeypatch.setattr(gw, "interleave_rotary", lambda w, n_heads: w)
    (tmp_path / "plain").mkdir()
    bad = gc.verify_gguf(models["llama"], _write(models["llama"], "f32", tmp_path / "plain"), "f32", llama_cpp=False)
    assert not bad.logits_ok and bad.transformers.share > 100 * gc.GGUF_TOLERANCE["f32"]
    assert "EXCEEDED" in bad.summary()[0]


def test_interleave_rotary_pairs_the_two_halves_of_each_head():
    import numpy as np

    w = np.arange(8)[:, None] * np.ones((1, 3))  # 2 heads of 4 rows: halves (0 1 | 2 3), (4 5 | 6 7)
    out = gw.interleave_rotary(w, 2)
    assert out[:, 0].tolist() == [0, 2, 1, 3, 4, 6, 5, 7]
    assert gw.interleave_rotary(np.arange(8.0), 2).tolist() == [0, 2, 1, 3, 4, 6, 5, 7]  # a bias too


def _read(path: Path) -> dict:
    """The file's metadata as plain Python values."""
    from gguf import GGUFReader

    r = GGUFReader(str(path))
    return {k: f.contents() for k, f in r.fields.items() if not k.startswith("GGUF.")}


def _tokenizer_from_file(meta: dict):
    """A tokenizer built only from the file's tokenizer fields, splitting text as llama.cpp does for the
    file's pre-tokenizer name: vocabulary and merges for the BPE, control and user-defined tokens whole."""
    from tokenizers import AddedToken, Regex, Tokenizer, models, pre_tokenizers

    vocab = {t: i for i, t in enumerate(meta["tokenizer.ggml.tokens"])}
    merges = [tuple(m.split(" ")) for m in meta["tokenizer.ggml.merges"]]
    tok = Tokenizer(models.BPE(vocab, merges))
    byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.pre_tokenizer = {
        "gpt-2": byte_level,
        "smollm": pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True), byte_level]),
        "qwen2": pre_tokenizers.Sequence([pre_tokenizers.Split(Regex(gv._QWEN2_SPLIT), "isolated"),
                                          pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)]),
    }[meta["tokenizer.ggml.pre"]]
    whole = [AddedToken(t, special=(k == 3), normalized=False)
             for t, k in zip(meta["tokenizer.ggml.tokens"], meta["tokenizer.ggml.token_type"]) if k in (3, 4)]
    tok.add_tokens(whole)
    return tok


def test_the_tokenizer_and_chat_template_survive(models, tiny_model_dir, tmp_path):
    from transformers import AutoTokenizer

    meta = _read(_write(models["qwen2"], "q8_0", tmp_path))
    hf = AutoTokenizer.from_pretrained(tiny_model_dir)
    # transformers loads this tokenizer as Qwen2Tokenizer (the folder's model_type), which splits text
    # with Qwen2's expression: the file names the split the model trained with
    assert meta["tokenizer.ggml.model"] == "gpt2" and meta["tokenizer.ggml.pre"] == "qwen2"
    tokens = meta["tokenizer.ggml.tokens"]
    assert len(tokens) == len(hf) + 4  # the model's rows, the unused ones marked as such
    assert all(tokens[i] == t for t, i in hf.get_vocab().items())
    assert tokens[-4:] == [f"[PAD{len(hf) + k}]" for k in range(4)] and set(meta["tokenizer.ggml.token_type"][-4:]) == {5}
    kind = dict(zip(tokens, meta["tokenizer.ggml.token_type"]))
    assert kind["<|im_end|>"] == kind["<|im_start|>"] == 3  # control: never produced from plain text
    assert kind["<reasoning>"] == 4 and kind["Ġ"] == 1  # user-defined whole tokens; ordinary ones
    assert len(meta["tokenizer.ggml.merges"]) == len(json.loads((Path(tiny_model_dir) / "tokenizer.json").read_text())["model"]["merges"])
    assert meta["tokenizer.chat_template"] == hf.chat_template  # the template string, unchanged
    # eos and pad as prepare_tokenizer settles them: the end of a turn, and the tokenizer's pad
    assert tokens[meta["tokenizer.ggml.eos_token_id"]] == "<|im_end|>" == tokens[meta["tokenizer.ggml.eot_token_id"]]
    assert tokens[meta["tokenizer.ggml.padding_token_id"]] == hf.pad_token
    assert meta["tokenizer.ggml.add_bos_token"] is False and "tokenizer.ggml.bos_token_id" not in meta
    rebuilt = _tokenizer_from_file(meta)
    for text in TEXTS:
        assert rebuilt.encode(text).ids == hf(text, add_special_tokens=False)["input_ids"], text
    # the metadata llama.cpp needs to build the model
    assert meta["general.architecture"] == "qwen2" and meta["qwen2.block_count"] == 2
    assert meta["qwen2.attention.head_count_kv"] == 2 and meta["general.file_type"] == 7  # MOSTLY_Q8_0


@pytest.mark.parametrize("split_digits, name", [(False, "gpt-2"), (True, "smollm")])
def test_each_pre_tokenizer_is_named_as_llama_cpp_names_it(tmp_path, split_digits, name):
    """GPT-2's byte-level split is 'gpt-2' (the real SmolLM2 checkpoint here has it); every digit alone,
    then GPT-2's split, is 'smollm' (the original SmolLM2 tokenizer). The vocabulary and merges in
    the file then cut text as the tokenizer does."""
    from transformers import PreTrainedTokenizerFast

    from unsloth_grpo.models.builtin import build_tokenizer

    build_tokenizer(tmp_path / "tok", split_digits=split_digits)
    hf = PreTrainedTokenizerFast(tokenizer_file=str(tmp_path / "tok" / "tokenizer.json"), eos_token="<|im_end|>")
    assert gv.check_tokenizer(hf) == name
    fields = gv.tokenizer_fields(hf, len(hf), {})
    rebuilt = _tokenizer_from_file({f"tokenizer.ggml.{k}": v for k, v in
                                    (("tokens", fields["tokens"]), ("merges", fields["merges"]),
                                     ("pre", fields["pre"]), ("token_type", fields["types"]))})
    for text in TEXTS + ["12345 + 678 = 13023"]:
        assert rebuilt.encode(text).ids == hf(text, add_special_tokens=False)["input_ids"], text


def test_the_eos_comes_from_the_generation_config_when_the_tokenizer_names_the_wrong_one(models, tmp_path):
    """SmolLM2's converted tokenizer says eos is <|im_start|>; a file that said so would never stop a turn."""
    import shutil

    from transformers import AutoTokenizer

    d = shutil.copytree(models["llama"], tmp_path / "wrong-eos")
    tok = AutoTokenizer.from_pretrained(str(d))
    tok.eos_token = "<|im_start|>"
    tok.save_pretrained(str(d))
    meta = _read(_write(d, "f16", tmp_path))
    tokens = meta["tokenizer.ggml.tokens"]
    assert tokens[meta["tokenizer.ggml.eos_token_id"]] == "<|im_end|>"


def test_llama3_rope_scaling_writes_the_frequency_factors(tiny_model_dir, tmp_path):
    rope = {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0, "low_freq_factor": 1.0,
            "high_freq_factor": 4.0, "original_max_position_embeddings": 64}
    d = _tiny("llama", tmp_path / "llama3", tiny_model_dir, rope_parameters=rope)
    path = _write(d, "f16", tmp_path)
    from gguf import GGUFReader

    factors = {t.name: t for t in GGUFReader(str(path)).tensors}["rope_freqs.weight"].data
    assert len(factors) == 8 and factors[0] == 1.0 and factors[-1] == 8.0  # fast dims kept, slow ones stretched
    check = gc.verify_gguf(d, path, "f16", llama_cpp=False)
    assert check.logits_ok and "rope scaling (llama3)" in check.transformers.filled, check.summary()


def test_tied_embeddings_write_no_output_matrix(tiny_model_dir, tmp_path):
    d = _tiny("llama", tmp_path / "tied", tiny_model_dir, tie_word_embeddings=True)
    path = _write(d, "q8_0", tmp_path)
    from gguf import GGUFReader

    assert "output.weight" not in {t.name for t in GGUFReader(str(path)).tensors}
    assert gc.verify_gguf(d, path, "q8_0", llama_cpp=False).logits_ok


def test_unsupported_models_and_types_are_named_with_what_is_written(tmp_path, models):
    cfg = json.loads((models["llama"] / "config.json").read_text())
    with pytest.raises(gw.GGUFError, match=r"model_type 'gpt2' .* llama \(Llama 3.x, SmolLM2\), mistral"):
        gw.check_config({**cfg, "model_type": "gpt2", "architectures": ["GPT2LMHeadModel"]})
    with pytest.raises(gw.GGUFError, match="rope scaling 'dynamic'"):
        gw.check_config({**cfg, "rope_parameters": {"rope_type": "dynamic", "factor": 2.0}})
    with pytest.raises(gw.GGUFError, match="quantized"):
        gw.check_config({**cfg, "quantization_config": {"quant_method": "bitsandbytes"}})
    with pytest.raises(gw.GGUFError, match="q4_k_m") as err:
        gw.check_quant("q7_x")
    assert "f16, bf16, q8_0" in str(err.value)
    with pytest.raises(gw.GGUFError, match="pre-tokenizer is not one the GGUF writer knows"):
        gv.pre_tokenizer_name({"pre_tokenizer": {"type": "Metaspace", "replacement": "▁"}})
    def tokenizer_of(tok_json):
        return type("T", (), {"backend_tokenizer": type("B", (), {"to_str": lambda self: json.dumps(tok_json)})()})()

    with pytest.raises(gw.GGUFError, match="Unigram model.*SentencePiece"):
        gv.check_tokenizer(tokenizer_of({"model": {"type": "Unigram"}}))
    # Llama 2's and Mistral 7B's tokenizer.json: a BPE with byte fallback that marks spaces with "▁"
    llama2 = {"model": {"type": "BPE", "byte_fallback": True, "merges": ["▁ t"]}, "pre_tokenizer": None,
              "normalizer": {"type": "Sequence", "normalizers": [{"type": "Prepend", "prepend": "▁"},
                                                                   {"type": "Replace", "content": "▁"}]}}
    with pytest.raises(gw.GGUFError, match="SentencePiece model.*only with the vocabulary.*convert_hf_to_gguf"):
        gv.check_tokenizer(tokenizer_of(llama2))


def test_k_quants_need_llama_cpps_quantizer_and_say_what_to_install(monkeypatch, tmp_path):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "llama_cpp" else real(name, *a))
    env = {"PATH": str(tmp_path)}
    monkeypatch.chdir(tmp_path)
    assert gw.require_quantizer("q8_0", env) is None  # written directly
    with pytest.raises(gw.GGUFError) as err:
        gw.require_quantizer("q4_k_m", env)
    msg = str(err.value)
    assert "llama-quantize" in msg and "unsloth-grpo[gguf]" in msg and "--quant q8_0" in msg
    with pytest.raises(gw.GGUFError, match="is not a file"):
        gw.require_quantizer("q4_k_m", {**env, gw.QUANTIZE_VARIABLE: str(tmp_path / "nowhere")})


def _fake_llama_quantize(folder: Path) -> Path:
    """A stand-in for llama.cpp's llama-quantize: records its arguments and copies the input."""
    script = folder / "llama-quantize"
    script.write_text("#!/bin/sh\necho \"$@\" > \"$(dirname \"$0\")/args.txt\"\ncp \"$1\" \"$2\"\n")
    script.chmod(0o755)
    return script


def test_a_k_quant_goes_through_llama_quantize_from_an_f16_file(models, tmp_path, monkeypatch):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    _fake_llama_quantize(bin_dir)
    monkeypatch.setenv("PATH", f"{bin_dir}:{__import__('os').environ['PATH']}")
    q = gw.find_quantizer()
    assert q is not None and q.kind == "binary" and q.where == str(bin_dir / "llama-quantize")
    out = tmp_path / "out" / "model-q4_k_m.gguf"
    info = gw.write_gguf(models["qwen2"], out, "q4_k_m", log=lambda _m: None)
    args = (bin_dir / "args.txt").read_text().split()
    assert args[0].endswith("model-q4_k_m.f16-intermediate.gguf") and args[1:] == [str(out), "Q4_K_M"]
    assert info.quant == "q4_k_m" and out.is_file()
    assert sorted(p.name for p in out.parent.iterdir()) == ["model-q4_k_m.gguf"]  # the f16 step is gone
    # a quantizer that fails: a clear error, and the f16 step is still removed
    (bin_dir / "llama-quantize").write_text("#!/bin/sh\necho 'unknown type' >&2\nexit 3\n")
    with pytest.raises(gw.GGUFError, match="exit code 3: unknown type"):
        gw.write_gguf(models["qwen2"], tmp_path / "out2" / "m.gguf", "q5_k_m", log=lambda _m: None)
    assert list((tmp_path / "out2").iterdir()) == []


def test_every_quant_name_is_a_llama_cpp_file_type():
    for q in gw.ALL_QUANTS:
        assert gw.file_type(q).name.lower().endswith(q)


def test_the_modelfile_carries_the_chat_template_and_stops(models, tmp_path, tiny_model_dir):
    from transformers import AutoTokenizer

    path = _write(models["qwen2"], "q8_0", tmp_path)
    text = go.write_modelfile(path, models["qwen2"]).read_text()
    assert f"FROM ./{path.name}" in text
    assert 'TEMPLATE """{{- range .Messages }}<|im_start|>{{ .Role }}\n{{ .Content }}<|im_end|>\n{{ end }}' \
           '<|im_start|>assistant\n"""' in text
    assert 'PARAMETER stop "<|im_end|>"' in text and "SYSTEM" not in text  # the tiny template adds none
    # a template that adds a system message by itself (SmolLM2's) gives Ollama the same default
    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    tok.chat_template = ("{% if messages[0]['role'] != 'system' %}{{ '<|im_start|>system\nBe brief.<|im_end|>\n' }}"
                         "{% endif %}" + tok.chat_template)
    assert 'SYSTEM """Be brief."""' in go.modelfile("m.gguf", tok)
    tok.chat_template = "{% for m in messages %}{{ m['content'] }}{% endfor %}"
    plain = go.modelfile("m.gguf", tok)
    assert "TEMPLATE" not in plain.replace("# no TEMPLATE", "") and 'PARAMETER stop "<|im_end|>"' in plain


# ---------------------------------------------------------------- llama.cpp, where it is built


def _llama_cpp():
    return pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed (pip install "
                                                    "'unsloth-grpo[gguf]'; docs/export.md gives the build flags)")


@pytest.mark.parametrize("family", FAMILIES + ["llama3-rope"])
def test_llama_cpp_reads_each_family_as_transformers_does(models, family, tiny_model_dir, tmp_path):
    _llama_cpp()
    if family == "llama3-rope":  # Llama 3.1's rope stretch, which llama.cpp reads from the rope_freqs tensor
        rope = {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0, "low_freq_factor": 1.0,
                "high_freq_factor": 4.0, "original_max_position_embeddings": 16}
        model_dir = _tiny("llama", tmp_path / "llama3", tiny_model_dir, initializer_range=0.1, rope_parameters=rope)
    else:
        model_dir = models[family]
    path = _write(model_dir, "f16", tmp_path)
    check = gc.verify_gguf(model_dir, path, "f16", llama_cpp=True, max_new_tokens=12)
    assert check.ok, check.summary()
    c = check.llama_cpp
    assert c.template_tokens_equal == c.prompts and c.share < 5e-3, check.summary()


def test_llama_cpp_tokenizes_like_the_hf_tokenizer(models, tiny_model_dir, tmp_path):
    _llama_cpp()
    from transformers import AutoTokenizer

    path = _write(models["qwen2"], "q8_0", tmp_path)
    llm = gc.open_in_llama_cpp(path)
    hf = AutoTokenizer.from_pretrained(str(models["qwen2"]))
    try:
        for text in TEXTS:
            assert llm.tokenize(text.encode(), add_bos=False, special=True) == \
                hf(text, add_special_tokens=False)["input_ids"], text
    finally:
        llm.close()


def test_a_wrong_pre_tokenizer_name_fails_the_llama_cpp_check(models, tmp_path, monkeypatch):
    """The name tells llama.cpp how to cut text before BPE; the wrong one gives other token ids."""
    _llama_cpp()
    monkeypatch.setattr(gv, "pre_tokenizer_name", lambda tok_json: "gpt-2")  # the tokenizer splits as Qwen2
    path = _write(models["qwen2"], "f16", tmp_path)
    check = gc.verify_gguf(models["qwen2"], path, "f16", prompts=(TEXTS[2],), llama_cpp=True, max_new_tokens=4)
    assert check.transformers.holds_the_model and check.logits_ok  # the weights are right
    assert check.llama_cpp.template_tokens_equal == 0 and not check.ok
    assert "llama.cpp's ids" in check.summary()[2] and "EXCEEDED" in check.summary()[2]


# ---------------------------------------------------------------- the smoke run and the real model


@pytest.mark.slow
def test_the_smoke_runs_gguf_export_through_the_cli(smoke_run, tmp_path, capsys, monkeypatch):
    """The README's smoke run, as a user exports it. f16 holds it and computes what it computes; q8_0
    holds it too (every weight is the merged one rounded to q8_0). How far q8_0's rounding moves the tiny
    model's logits depends on the weights its run happened to learn (2.2e-1 of their scale on one run,
    4.7e-2 on another), so the exit code is checked against the share the check printed, and the refusal
    is checked with a tolerance no q8_0 file can meet."""
    from unsloth_grpo.cli import main

    run, _ = smoke_run
    assert main(["export", "--model", str(run), "--gguf", str(tmp_path / "f16"), "--quant", "f16", "--verify"]) == 0
    out = capsys.readouterr().out
    assert "27 weights equal the merged weights rounded to the file's types, bit for bit; hyperparameters as " \
           "config.json: ok" in out
    assert "verify: gguf (f16) vs merged logits" in out and sorted(p.name for p in (tmp_path / "f16").iterdir()) == \
        ["Modelfile", "model-f16.gguf"]

    code = main(["export", "--model", str(run), "--gguf", str(tmp_path / "q8"), "--quant", "q8_0", "--verify"])
    printed = capsys.readouterr()
    both = printed.out + printed.err
    assert "bit for bit; hyperparameters as config.json: ok" in both
    share = float(re.search(r"vs merged logits: max abs diff \S+ \(([0-9.e+-]+) of the largest logit", both).group(1))
    assert share > 0  # q8_0 rounds; the file is not the merged model bit for bit
    assert code == (0 if share <= gc.tolerance("q8_0") else 1), (share, both)

    monkeypatch.setitem(gc.GGUF_TOLERANCE, "q8_0", share / 2)
    assert main(["export", "--model", str(run), "--gguf", str(tmp_path / "q8b"), "--quant", "q8_0", "--verify"]) == 1
    printed = capsys.readouterr()
    assert "bit for bit; hyperparameters as config.json: ok" in printed.err
    assert "q8_0 rounds this model's weights too coarsely" in printed.err and "use --quant f16" in printed.err
    assert (tmp_path / "q8b" / "model-q8_0.gguf").is_file()  # written whole; the check says what the type costs


@pytest.mark.slow
def test_llama_cpp_answers_a_chat_prompt_as_transformers_does_on_the_real_model(smollm2_dir, tmp_path):
    """The user's path: llama.cpp's own chat completion, with the template and stop token from the file,
    answers greedily what the merged model answers greedily in transformers."""
    _llama_cpp()
    import torch
    from transformers import AutoModelForCausalLM

    path = tmp_path / "model-f16.gguf"
    gw.write_gguf(smollm2_dir, path, "f16", log=lambda _m: None)
    tok = gv.prepared_tokenizer(Path(smollm2_dir))
    model = AutoModelForCausalLM.from_pretrained(smollm2_dir, dtype=torch.float32).eval()
    llm = gc.open_in_llama_cpp(path)
    try:
        for prompt in ("What is 2 + 3?", "What is the capital of France?"):
            reply = llm.create_chat_completion([{"role": "user", "content": prompt}], temperature=0.0, max_tokens=48)
            ids = tok.apply_chat_template([{"role": "user", "content": prompt}], add_generation_prompt=True,
                                          return_tensors="pt", return_dict=True)["input_ids"]
            with torch.no_grad():
                out = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=48,
                                     do_sample=False, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id)
            assert out[0, -1].item() == tok.eos_token_id  # transformers stopped at the end of the turn ...
            assert reply["choices"][0]["finish_reason"] == "stop"  # ... and so did llama.cpp
            assert reply["choices"][0]["message"]["content"] == tok.decode(out[0, ids.shape[1]:], skip_special_tokens=True)
    finally:
        llm.close()
