"""Gemma 3 written as GGUF by our own writer, with a tiny random model (fast; the real 270M model is
tests/test_real_gemma.py's).

The tiny model's SentencePiece vocabulary goes the way the built-in gemma3-270m's goes: a GGUF file that
holds only tokenizer entries is turned into a tokenizer (``spm_bpe_tokenizer``) and its entries kept
(``keep_gguf_vocab``); the export must write pieces, scores and types back as they were, the norm
weights plus one, every other weight as it is, and the keys llama.cpp's ``gemma3`` reads.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from unsloth_grpo.export import gguf_gemma3 as gg
from unsloth_grpo.export import gguf_vocab as gv
from unsloth_grpo.export import gguf_writer as gw
from unsloth_grpo.models.pretrained import KEPT_VOCAB, keep_gguf_vocab, spm_bpe_tokenizer

#: A SentencePiece vocabulary small enough to read: control pieces, two user-defined ones, byte pieces, words.
PIECES = (["<pad>", "<eos>", "<bos>", "<unk>", "<start_of_turn>", "<end_of_turn>", "\n", "\n\n"]
          + [f"<0x{b:02X}>" for b in range(4)]
          + ["▁", "a", "b", "c", "▁a", "▁b", "ab", "ba", "▁ab", "abc", "▁abc", "c▁"])


def _source_gguf(path: Path) -> Path:
    import gguf

    control, user, byte, normal = (gguf.TokenType.CONTROL, gguf.TokenType.USER_DEFINED, gguf.TokenType.BYTE,
                                   gguf.TokenType.NORMAL)
    types = [control] * 6 + [user] * 2 + [byte] * 4 + [normal] * (len(PIECES) - 12)
    scores = [-1000.0] * 8 + [0.0] * 4 + [-float(i) * 1.5 for i in range(len(PIECES) - 12)]
    w = gguf.GGUFWriter(str(path), "gemma3")
    w.add_tokenizer_model("llama")
    w.add_tokenizer_pre("default")
    w.add_token_list(PIECES)
    w.add_token_scores(scores)
    w.add_token_types([int(t) for t in types])
    w.add_bos_token_id(2)
    w.add_eos_token_id(1)
    w.add_unk_token_id(3)
    w.add_pad_token_id(0)
    w.add_add_bos_token(True)
    w.add_add_eos_token(False)
    w.add_add_space_prefix(False)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    w.close()
    return path


@pytest.fixture(scope="module")
def gemma_dir(tmp_path_factory):
    """A random 6-layer Gemma 3 (five sliding layers, one global) with the vocabulary above, saved like a checkpoint."""
    import torch
    from transformers import AutoModelForCausalLM, Gemma3TextConfig

    root = tmp_path_factory.mktemp("gemma3-tiny")
    src = _source_gguf(root / "vocab.gguf")
    folder = root / "model"
    tok = spm_bpe_tokenizer(src)
    config = Gemma3TextConfig(vocab_size=len(PIECES), hidden_size=64, intermediate_size=96, num_hidden_layers=6,
                              num_attention_heads=4, num_key_value_heads=2, head_dim=32, query_pre_attn_scalar=32,
                              sliding_window=16, max_position_embeddings=256, rms_norm_eps=1e-6)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config)
    with torch.no_grad():  # norms that are not zero, so a missing or doubled + 1 shows
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.normal_(0, 0.3)
    model.save_pretrained(str(folder))
    tok.save_pretrained(str(folder))
    keep_gguf_vocab(src, folder / KEPT_VOCAB)
    return folder


def _fields(reader) -> dict:
    return {k: f.contents() for k, f in reader.fields.items() if not k.startswith("GGUF.")}


def test_tiny_gemma3_is_written_with_its_kept_vocabulary_norms_plus_one_and_llama_cpps_keys(gemma_dir, tmp_path):
    import gguf
    import numpy as np
    from safetensors.numpy import load_file

    out = tmp_path / "tiny-f32.gguf"
    assert gw.preflight(gemma_dir, gemma_dir, "f32") == ("f32", None)
    info = gw.write_gguf(gemma_dir, out, "f32", log=lambda _m: None)
    assert (info.architecture, info.pre_tokenizer) == ("gemma3", "default")
    reader = gguf.GGUFReader(str(out))
    f = _fields(reader)
    kept = json.loads((gemma_dir / KEPT_VOCAB).read_text())
    for key in ("tokens", "scores", "token_type", "model", "pre", "add_space_prefix"):
        assert f[f"tokenizer.ggml.{key}"] == kept[f"tokenizer.ggml.{key}"], key
    assert "tokenizer.ggml.merges" not in f
    assert (f["tokenizer.ggml.bos_token_id"], f["tokenizer.ggml.eos_token_id"], f["tokenizer.ggml.padding_token_id"],
            f["tokenizer.ggml.unknown_token_id"], f["tokenizer.ggml.add_bos_token"]) == (2, 1, 0, 3, True)
    config = json.loads((gemma_dir / "config.json").read_text())
    expected = {"general.architecture": "gemma3", "gemma3.block_count": 6, "gemma3.embedding_length": 64,
                "gemma3.feed_forward_length": 96, "gemma3.attention.head_count": 4,
                "gemma3.attention.head_count_kv": 2, "gemma3.attention.key_length": 32,
                "gemma3.attention.value_length": 32, "gemma3.attention.sliding_window": 16,
                "gemma3.rope.freq_base": 1_000_000.0, "gemma3.context_length": 256}
    assert {k: f.get(k) for k in expected} == expected
    assert f["gemma3.attention.layer_norm_rms_epsilon"] == pytest.approx(config["rms_norm_eps"])
    assert "gemma3.rope.scaling.type" not in f

    weights = load_file(str(gemma_dir / "model.safetensors"))
    names = gguf.get_tensor_name_map(gguf.MODEL_ARCH.GEMMA3, 6)
    tensors = {t.name: t for t in reader.tensors}
    assert "output.weight" not in tensors  # tied: llama.cpp reuses token_embd
    written = set()
    for hf, w in weights.items():
        if hf == "lm_head.weight":
            continue
        name = names.get_name(hf, try_suffixes=(".weight",))
        t = tensors[name]
        got = np.asarray(gguf.quants.dequantize(t.data, t.tensor_type), dtype=np.float32).reshape(w.shape)
        want = w + 1 if hf.endswith("norm.weight") else w
        assert np.array_equal(got, want.astype(np.float32)), hf
        written.add(name)
    assert written == set(tensors)
    assert sum(n.endswith("norm.weight") for n in written) == 6 * 6 + 1


def test_a_sentencepiece_tokenizer_without_its_kept_vocabulary_is_refused(gemma_dir, tmp_path, monkeypatch):
    import shutil

    from transformers import AutoTokenizer

    monkeypatch.setenv("UNSLOTH_GRPO_HOME", str(tmp_path / "home"))  # no built-in checkpoints to find one in
    bare = tmp_path / "bare"
    shutil.copytree(gemma_dir, bare)
    (bare / KEPT_VOCAB).unlink()
    tok = AutoTokenizer.from_pretrained(str(bare))
    with pytest.raises(gv.GGUFError, match=f"SentencePiece model.*{KEPT_VOCAB}.*convert_hf_to_gguf"):
        gv.check_tokenizer(tok, folders=(bare,))
    # a kept vocabulary whose pieces are not the tokenizer's does not count
    other = json.loads((gemma_dir / KEPT_VOCAB).read_text())
    other["tokenizer.ggml.tokens"][20] = "zz"
    (bare / KEPT_VOCAB).write_text(json.dumps(other))
    with pytest.raises(gv.GGUFError, match="SentencePiece model"):
        gv.check_tokenizer(tok, folders=(bare,))
    assert gv.check_tokenizer(tok, folders=(gemma_dir,)) == "default"


def test_gemma3_settings_llama_cpp_would_not_reproduce_are_refused(gemma_dir):
    config = json.loads((gemma_dir / "config.json").read_text())
    assert gw.check_config(config).arch == "gemma3"
    layers = list(config["layer_types"])
    layers[0] = "full_attention"
    rope = json.loads(json.dumps(config["rope_parameters"]))
    rope["sliding_attention"]["rope_theta"] = 20000.0
    cases = {
        "alternate five sliding": {"layer_types": layers},
        "sliding layers' rope is default with base 20000": {"rope_parameters": rope},
        "sets final_logit_softcapping": {"final_logit_softcapping": 30.0},
        "sets attn_logit_softcapping": {"attn_logit_softcapping": 50.0},
        "query_pre_attn_scalar is 16": {"query_pre_attn_scalar": 16},
        "activation is silu": {"hidden_activation": "silu"},
        "bidirectional": {"use_bidirectional_attention": True},
    }
    for words, change in cases.items():
        with pytest.raises(gv.GGUFError, match=words):
            gw.check_config({**config, **change})
    # an older config's spelling: rope_theta / rope_local_base_freq / rope_scaling
    old = {k: v for k, v in config.items() if k != "rope_parameters"}
    old.update(rope_theta=1e6, rope_local_base_freq=10000.0, rope_scaling={"rope_type": "linear", "factor": 8.0})
    gw.check_config(old)
    assert gg.gemma3_rope(old)[0] == {"rope_type": "linear", "factor": 8.0, "rope_theta": 1e6}


def test_tiny_gemma3_gguf_is_read_back_by_transformers_weight_for_weight_and_logit_for_logit(gemma_dir, tmp_path):
    """``--verify``'s question 1 and 2 on a Gemma file. Two things transformers' reader does that the check
    must expect: it gives every Gemma 3 file a ``query_pre_attn_scalar`` of 256 (the 270M model's head width;
    the tiny model's is 32, and its logits were off by 0.67 of the largest), and it reads a norm back as the
    file's float32 ``w + 1`` minus one, which is not ``w`` for norms that did not come from a GGUF file (the
    fixture's random ones, a trained one; 6e-8 apart)."""
    from unsloth_grpo.export import gguf_check as gc

    out = tmp_path / "tiny-f32.gguf"
    gw.write_gguf(gemma_dir, out, "f32", log=lambda _m: None)
    check = gc.verify_gguf(gemma_dir, out, "f32", llama_cpp=False)
    t = check.transformers
    assert t.holds_the_model and t.weights_max_diff == 0.0 and t.tensors == 6 * 13 + 2, check.summary()
    assert t.filled == ["query_pre_attn_scalar (the file's attention.key_length)"]
    assert t.max_abs_diff == 0.0 and check.ok, check.summary()


def test_gemma3_settings_transformers_reads_otherwise_than_config_json_are_named(gemma_dir, tmp_path):
    """The Gemma settings outside the common list (sliding window, layer pattern, each layer type's rope base)
    are compared too: a file written from a config with another sliding window fails question 1."""
    import shutil

    from unsloth_grpo.export import gguf_check as gc

    other = tmp_path / "other"
    shutil.copytree(gemma_dir, other)
    config = json.loads((other / "config.json").read_text())
    config["sliding_window"] = 8
    (other / "config.json").write_text(json.dumps(config))
    out = tmp_path / "other-f32.gguf"
    gw.write_gguf(other, out, "f32", log=lambda _m: None)
    _model, filled, mismatched = gc.load_gguf_in_transformers(out, gemma_dir)
    assert mismatched == ["sliding_window 8 (config.json 16)"]
    _model, filled, mismatched = gc.load_gguf_in_transformers(out, other)
    assert mismatched == []


def _trained(gemma_dir: Path, out: Path) -> Path:
    """A LoRA on the tiny Gemma 3 with every B matrix non-zero (fixed seed), saved as a run's adapter: what a
    trained run hands the export."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.manual_seed(1)
    base = AutoModelForCausalLM.from_pretrained(str(gemma_dir), dtype=torch.float32)
    model = get_peft_model(base, LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "k_proj", "v_proj", "o_proj",
                                                                                 "gate_proj", "up_proj", "down_proj"]))
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.2)
    model.save_pretrained(str(out))
    AutoTokenizer.from_pretrained(str(gemma_dir)).save_pretrained(str(out))
    (out / "config.yaml").write_text("task: gsm8k\nseed: 1\n")
    return out


@pytest.mark.parametrize("quant", ["f32", "f16", "bf16", "q8_0"])
def test_a_trained_tiny_gemma3_exported_to_gguf_is_read_back_by_transformers_within_tolerance(gemma_dir, tmp_path,
                                                                                              quant):
    from unsloth_grpo.export import export_model

    run = _trained(gemma_dir, tmp_path / "run")
    result = export_model(run, gguf_dir=tmp_path / "gguf", quant=quant, verify=True, log=lambda _m: None)
    check = result.gguf_check
    print(*check.summary(), sep="\n")
    assert check.transformers.holds_the_model and check.logits_ok, check.summary()
