"""The memory model and planner: exact parameter counts, estimate terms, plans, validation."""

from __future__ import annotations

import argparse
import json

import pytest

from unsloth_grpo.hardware import architecture, memory, planner
from unsloth_grpo.cli import plan as planner_cli
from unsloth_grpo.hardware.architecture import count_parameters
from unsloth_grpo.hardware.memory import GiB, estimate_memory
from unsloth_grpo.hardware.planner import plan

# One small config per family, each exercising what sets that family apart.
SMALL_CONFIGS = {
    "llama_gqa_head_dim_biases": dict(model_type="llama", vocab_size=300, hidden_size=64, intermediate_size=96,
                                      num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                                      head_dim=24, attention_bias=True, mlp_bias=True, tie_word_embeddings=False),
    "llama_tied": dict(model_type="llama", vocab_size=300, hidden_size=64, intermediate_size=96,
                       num_hidden_layers=3, num_attention_heads=8, num_key_value_heads=8, tie_word_embeddings=True),
    "mistral_head_dim": dict(model_type="mistral", vocab_size=320, hidden_size=64, intermediate_size=128,
                             num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=1, head_dim=32),
    "qwen2_qkv_bias_tied": dict(model_type="qwen2", vocab_size=256, hidden_size=48, intermediate_size=80,
                                num_hidden_layers=2, num_attention_heads=6, num_key_value_heads=2,
                                tie_word_embeddings=True),
    "qwen3_qk_norm": dict(model_type="qwen3", vocab_size=256, hidden_size=64, intermediate_size=96,
                          num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=40,
                          tie_word_embeddings=False),
    "gemma3_text_four_norms": dict(model_type="gemma3_text", vocab_size=384, hidden_size=64, intermediate_size=96,
                                   num_hidden_layers=3, num_attention_heads=2, num_key_value_heads=1, head_dim=48,
                                   sliding_window=16),
    "gemma3_multimodal": dict(model_type="gemma3", mm_tokens_per_image=4,
                              text_config=dict(vocab_size=400, hidden_size=64, intermediate_size=96,
                                               num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1,
                                               head_dim=32),
                              vision_config=dict(hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                                                 num_attention_heads=2, image_size=28, patch_size=14,
                                                 vision_use_head=False)),
    "gemma3_vision_head": dict(model_type="gemma3", mm_tokens_per_image=4,
                               text_config=dict(vocab_size=400, hidden_size=64, intermediate_size=96,
                                                num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1,
                                                head_dim=32),
                               vision_config=dict(hidden_size=32, intermediate_size=48, num_hidden_layers=1,
                                                  num_attention_heads=2, image_size=28, patch_size=14)),
    "phi3_fused_gqa": dict(model_type="phi3", vocab_size=310, hidden_size=96, intermediate_size=128,
                           num_hidden_layers=2, num_attention_heads=6, num_key_value_heads=2,
                           pad_token_id=None, eos_token_id=None),
    # fields left out fall back to transformers' per-family defaults
    "qwen2_defaults": dict(model_type="qwen2", vocab_size=128, hidden_size=64, intermediate_size=64,
                           num_hidden_layers=1, num_attention_heads=4),
    "qwen3_defaults": dict(model_type="qwen3", vocab_size=128, hidden_size=64, intermediate_size=64,
                           num_hidden_layers=1, num_attention_heads=4, num_key_value_heads=2),
    "mistral_defaults": dict(model_type="mistral", vocab_size=128, hidden_size=64, intermediate_size=64,
                             num_hidden_layers=1, num_attention_heads=8),
}


def meta_count(config: dict) -> int:
    """Parameters of the real transformers model, built on the meta device (no memory)."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    cfg = dict(config)
    hf_config = AutoConfig.for_model(cfg.pop("model_type"), **cfg)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(hf_config)
    return sum(p.numel() for p in model.parameters())


@pytest.mark.parametrize("name", sorted(SMALL_CONFIGS))
def test_count_parameters_matches_meta_instantiation(name):
    config = SMALL_CONFIGS[name]
    assert count_parameters(config) == meta_count(config)


def test_count_parameters_accepts_config_objects_files_and_dirs(tmp_path):
    from transformers import Qwen2Config

    config = SMALL_CONFIGS["qwen2_qkv_bias_tied"]
    expected = count_parameters(config)
    obj = Qwen2Config(**{k: v for k, v in config.items() if k != "model_type"})
    assert count_parameters(obj) == expected
    (tmp_path / "config.json").write_text(json.dumps(config))
    assert count_parameters(tmp_path) == expected
    assert count_parameters(str(tmp_path / "config.json")) == expected


# Exact totals of the built-in configs (the real models on the meta device give the same, see
# the slow test below; they round to the sizes the hub pages show, e.g. 1.54B, 8.03B).
EXPECTED_TOTALS = {
    "qwen2.5-0.5b": 494_032_768, "qwen2.5-1.5b": 1_543_714_304, "qwen2.5-3b": 3_085_938_688,
    "qwen2.5-7b": 7_615_616_512, "llama-3.2-1b": 1_235_814_400, "llama-3.2-3b": 3_212_749_824,
    "llama-3.1-8b": 8_030_261_248, "qwen3-4b": 4_022_468_096, "qwen3-8b": 8_190_735_360,
    "gemma-3-1b": 999_885_952, "gemma-3-4b": 4_300_079_472, "phi-3-mini": 3_821_079_552,
}


def test_builtin_config_totals():
    assert sorted(EXPECTED_TOTALS) == sorted(architecture.BUILTIN_CONFIGS)
    for key, total in EXPECTED_TOTALS.items():
        assert count_parameters(key) == total, key


@pytest.mark.slow
@pytest.mark.parametrize("key", sorted(architecture.BUILTIN_CONFIGS))
def test_builtin_configs_match_meta_instantiation(key):
    assert count_parameters(key) == meta_count(architecture.BUILTIN_CONFIGS[key])


def test_hub_ids_and_variants_resolve_to_builtins():
    qwen = architecture.BUILTIN_CONFIGS["qwen2.5-1.5b"]
    for name in ("qwen2.5-1.5b", "Qwen/Qwen2.5-1.5B-Instruct", "unsloth/Qwen2.5-1.5B-Instruct-bnb-4bit",
                 "unsloth/Qwen2.5-1.5B-Instruct-unsloth-bnb-4bit"):
        assert architecture.load_model_config(name) == qwen, name
    assert architecture.load_model_config("meta-llama/Meta-Llama-3.1-8B-Instruct") == architecture.BUILTIN_CONFIGS["llama-3.1-8b"]
    assert architecture.load_model_config("google/gemma-3-1b-it") == architecture.BUILTIN_CONFIGS["gemma-3-1b"]


def test_unknown_model_and_type_errors_name_the_choices():
    with pytest.raises(architecture.UnknownModelError, match="qwen2.5-1.5b.*config.json"):
        architecture.load_model_config("someone/not-a-model-7B")
    with pytest.raises(architecture.UnknownModelError, match="does not exist"):
        architecture.load_model_config("./models/Qwen2.5-1.5B-Instruct")  # a missing path is not a built-in name
    with pytest.raises(architecture.UnknownModelError, match="'gpt2' is not supported.*llama, mistral, qwen2, qwen3"):
        memory.estimate_memory({"model_type": "gpt2", "vocab_size": 10, "hidden_size": 8})


def test_any_architecture_is_counted_on_the_meta_device():
    # GPT-2 has no formula in the planner; transformers builds it on the meta device
    gpt2 = {"model_type": "gpt2", "vocab_size": 100, "n_embd": 32, "n_layer": 2, "n_head": 4, "n_positions": 64,
            "bos_token_id": 0, "eos_token_id": 0}
    assert count_parameters(gpt2) == meta_count(gpt2)
    assert architecture.meta_parameter_count({"model_type": "no-such-architecture"}) is None


def test_lora_parameters_match_peft():
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoConfig, AutoModelForCausalLM

    for name, targets in (("qwen3_qk_norm", list(architecture.DEFAULT_LORA_TARGETS)),
                          ("phi3_fused_gqa", ["qkv_proj", "o_proj", "gate_up_proj", "down_proj"])):
        cfg = dict(SMALL_CONFIGS[name])
        torch.manual_seed(0)
        model = AutoModelForCausalLM.from_config(AutoConfig.for_model(cfg.pop("model_type"), **cfg))
        peft_model = get_peft_model(model, LoraConfig(r=4, target_modules=targets))
        trainable = sum(p.numel() for p in peft_model.parameters() if p.requires_grad)
        assert architecture.lora_parameters(SMALL_CONFIGS[name], 4, targets) == trainable
    # Phi-3 accepts the unfused names too, mapping them onto its fused layers
    phi = SMALL_CONFIGS["phi3_fused_gqa"]
    assert architecture.lora_parameters(phi, 4) == architecture.lora_parameters(phi, 4, "all-linear")
    with pytest.raises(ValueError, match="'fc1' is not a linear layer.*q_proj"):
        architecture.lora_parameters("qwen2.5-0.5b", 8, ["fc1"])


# ---------------------------------------------------------------- estimate terms


def test_weight_terms_follow_their_formulas():
    shape = architecture.model_shape("qwen2.5-1.5b")
    n = 1_543_714_304
    e16 = estimate_memory(shape, load_in_4bit=False)
    assert e16.breakdown["weights"] == pytest.approx(2 * n / GiB)
    e4 = estimate_memory(shape, load_in_4bit=True)
    rest = n - shape.quantizable_params
    assert e4.breakdown["weights"] == pytest.approx((shape.quantizable_params * 0.515869140625 + 2 * rest) / GiB)
    # the transformers backend's kbit preparation keeps the unquantized weights in fp32
    e4t = estimate_memory(shape, load_in_4bit=True, backend="transformers")
    assert e4t.breakdown["weights"] == pytest.approx((shape.quantizable_params * 0.515869140625 + 4 * rest) / GiB)
    e8 = estimate_memory(shape, load_in_4bit=False, load_in_8bit=True)
    assert e4.breakdown["weights"] < e8.breakdown["weights"] < e16.breakdown["weights"]


def test_lora_and_optimizer_terms():
    lora = architecture.lora_parameters("qwen2.5-1.5b", 16)
    assert lora == 18_464_768
    e8 = estimate_memory("qwen2.5-1.5b", lora_rank=16, optimizer="adamw_8bit")
    e32 = estimate_memory("qwen2.5-1.5b", lora_rank=16, optimizer="adamw_torch")
    assert e32.breakdown["lora"] == pytest.approx(lora * (4 + 4 + 8) / GiB)
    assert e8.breakdown["lora"] == pytest.approx(lora * (4 + 4 + 2 + 8 / 256) / GiB)
    full = estimate_memory("qwen2.5-0.5b", lora_rank=0, load_in_4bit=False, optimizer="adamw_torch")
    assert full.trainable_params == 494_032_768
    assert full.breakdown["full_finetune_state"] == pytest.approx(494_032_768 * (2 + 8) / GiB)
    with pytest.raises(ValueError, match="16-bit"):
        estimate_memory("qwen2.5-0.5b", lora_rank=0, load_in_4bit=True)
    with pytest.raises(ValueError, match="adamw_8bit"):
        estimate_memory("qwen2.5-0.5b", optimizer="lion")


def test_kv_cache_counts_gemma_sliding_layers_at_their_window():
    # qwen2.5-1.5b: 28 layers x 2 kv heads x 128 dims, 8 sequences of 768 tokens, bf16, K and V
    e = estimate_memory("qwen2.5-1.5b", num_generations=8, per_device_train_batch_size=8)
    assert e.breakdown["kv_cache"] == pytest.approx(2 * 8 * 2 * 256 * 28 * 768 / GiB)
    # gemma-3-1b: 26 layers, every 6th global; the others keep at most 512 tokens
    g = estimate_memory("gemma-3-1b", num_generations=8, per_device_train_batch_size=8)
    tokens = 4 * 768 + 22 * 512
    assert g.breakdown["kv_cache"] == pytest.approx(2 * 8 * 2 * 256 * tokens / GiB)


def test_logits_full_versus_chunked():
    full = estimate_memory("qwen2.5-1.5b", logits="full", load_in_4bit=False)
    chunked = estimate_memory("qwen2.5-1.5b", logits="chunked", load_in_4bit=False)
    assert full.breakdown["logits"] == pytest.approx(8 * 513 * 151936 * 4 / GiB)  # bf16 logits + bf16 gradient
    # Unsloth: a quarter of the rows at a time as fp32 logits + gradient, plus the hidden states
    rows = 8 * 513
    assert chunked.breakdown["logits"] == pytest.approx(((rows // 4) * 151936 * 8 + 2 * rows * 1536 * 2) / GiB)
    assert chunked.breakdown["logits"] < full.breakdown["logits"]
    trl = estimate_memory("qwen2.5-1.5b", backend="transformers", load_in_4bit=True)
    assert trl.settings["logits"] == "full"
    assert trl.breakdown["logits"] == full.breakdown["logits"]
    fp32 = estimate_memory("qwen2.5-1.5b", logits="full", load_in_4bit=False, dtype="fp32")
    assert fp32.breakdown["logits"] == pytest.approx(8 * 513 * 151936 * 8 / GiB)  # fp32 logits + gradient


def test_total_is_static_plus_the_larger_phase():
    e = estimate_memory("llama-3.2-1b", num_generations=8, per_device_train_batch_size=1,
                        gradient_accumulation_steps=8)
    static = e.phase_total("static")
    assert e.total_gb == pytest.approx(static + max(e.phase_total("generation"), e.phase_total("training")))
    assert e.allocated_gb == pytest.approx(e.total_gb - memory.CUDA_CONTEXT_GB)


@pytest.mark.parametrize("backend", ["unsloth", "transformers"])
def test_monotonicity(backend):
    base = dict(backend=backend, num_generations=8, per_device_train_batch_size=8, max_completion_length=512)
    e = lambda **kw: estimate_memory("qwen2.5-1.5b", **{**base, **kw}).total_gb  # noqa: E731
    assert e(num_generations=16, per_device_train_batch_size=16) > e()
    assert e(max_completion_length=1024) > e()
    assert e(load_in_4bit=False) > e(load_in_4bit=True)
    assert e(beta=0.04) > e(beta=0.0)
    assert e(gradient_checkpointing=False) > e()
    assert e(max_prompt_length=512) > e()


def test_offloaded_checkpointing_costs_less_than_plain():
    kw = dict(num_generations=8, per_device_train_batch_size=8, logits="full")
    unsloth = estimate_memory("qwen2.5-3b", backend="unsloth", **kw)
    plain = estimate_memory("qwen2.5-3b", backend="transformers", load_in_4bit=False, **kw)
    assert unsloth.breakdown["activations"] < plain.breakdown["activations"]
    assert unsloth.offloaded_gb > 0 and plain.offloaded_gb == 0


def test_full_finetune_with_beta_loads_a_reference_copy():
    lora = estimate_memory("qwen2.5-0.5b", load_in_4bit=False, beta=0.04)
    full = estimate_memory("qwen2.5-0.5b", load_in_4bit=False, lora_rank=0, beta=0.04)
    assert lora.breakdown["reference"] < 0.01
    assert full.breakdown["reference"] > 2 * 494_032_768 / GiB


def test_batch_rules_of_trl_and_unsloth():
    with pytest.raises(ValueError, match="not a multiple of num_generations"):
        estimate_memory("qwen2.5-0.5b", backend="transformers", num_generations=8, per_device_train_batch_size=4)
    e = estimate_memory("qwen2.5-0.5b", backend="unsloth", num_generations=8, per_device_train_batch_size=4)
    assert e.settings["per_device_train_batch_size"] == 8
    assert "raises per_device_train_batch_size from 4" in e.notes[0]
    ok = estimate_memory("qwen2.5-0.5b", backend="transformers", num_generations=8, per_device_train_batch_size=4,
                         gradient_accumulation_steps=2)
    assert ok.settings["generation_batch_size"] == 8


def test_vllm_pool_and_utilization():
    shape = architecture.model_shape("qwen2.5-7b")
    util = memory.vllm_utilization_for(shape, 24, gen_batch=8, seq_len=768)
    assert round(util * 20) == util * 20 or abs(util * 20 - round(util * 20)) < 1e-9
    e = estimate_memory(shape, use_vllm=True, gpu_memory_utilization=util, gpu_total_gb=24)
    assert e.breakdown["kv_cache"] == 0
    assert e.breakdown["vllm_pool"] == pytest.approx(util * 24 - e.breakdown["weights"])
    assert not any("vLLM pool" in n for n in e.notes)
    small = estimate_memory(shape, use_vllm=True, gpu_memory_utilization=0.2, gpu_total_gb=24)
    assert any("raise gpu_memory_utilization" in n for n in small.notes)
    with pytest.raises(ValueError, match="gpu_total_gb"):
        estimate_memory(shape, use_vllm=True)


# ---------------------------------------------------------------- planner


def test_plan_for_qwen25_15b_at_8gb():
    p = plan("qwen2.5-1.5b", 8, compute_capability=8.6)
    assert p.fits
    assert (p.num_generations, p.max_completion_length, p.per_device_train_batch_size,
            p.gradient_accumulation_steps, p.lora_rank, p.load_in_4bit, p.dtype) == (8, 1024, 8, 1, 16, True, "bf16")
    assert p.estimate.total_gb <= 8 * 0.9
    assert "training.num_generations=8" in p.overrides_text()
    assert p.overrides()["model.max_seq_length"] == 256 + 1024


def test_plan_prefers_generations_then_completions():
    # a tight budget gives up completion length before group size
    p = plan("qwen3-8b", 8, compute_capability=8.6)
    assert p.fits and p.num_generations == 8 and p.max_completion_length < 1024
    pinned = plan("qwen3-8b", 8, compute_capability=8.6, max_completion_length=1024)
    assert pinned.fits and pinned.num_generations < 8


def test_plan_refuses_8b_16bit_at_6gb_with_an_alternative():
    p = plan("llama-3.1-8b", 6, load_in_4bit=False)
    assert not p.fits
    assert "6 GB" in p.reason and "budget" in p.reason
    assert p.alternative is not None and p.alternative.fits
    assert p.alternative.estimate.total_gb <= 6 * 0.9
    assert p.alternative.model == "llama-3.2-3b"  # the largest model of the same family that fits
    assert "smaller model" in p.alternative_note


def test_plan_alternative_is_4bit_when_that_fits():
    p = plan("qwen2.5-3b", 6, load_in_4bit=False)
    assert not p.fits
    assert p.alternative.load_in_4bit and p.alternative.model == p.model
    assert "4-bit" in p.alternative_note


def test_t4_gets_fp16():
    assert plan("qwen2.5-0.5b", 16, compute_capability=7.5).dtype == "fp16"
    assert plan("qwen2.5-0.5b", 16, compute_capability=(7, 5)).dtype == "fp16"
    assert plan("qwen2.5-0.5b", 24, compute_capability=8.0).dtype == "bf16"


def test_plan_with_vllm_picks_a_utilization():
    p = plan("qwen2.5-1.5b", 12, compute_capability=8.6, use_vllm=True)
    assert p.fits and 0 < p.gpu_memory_utilization <= 0.95
    assert p.overrides()["model.gpu_memory_utilization"] == p.gpu_memory_utilization


@pytest.mark.parametrize("card", sorted(planner.PRESET_CARDS))
def test_presets_fit_their_budget(card):
    cc = planner.PRESET_CARDS[card][1]
    for key in architecture.BUILTIN_CONFIGS:
        p = plan(key, card, compute_capability=cc, alternatives=False)
        if not p.fits:
            continue
        again = estimate_memory(
            key, load_in_4bit=p.load_in_4bit, lora_rank=p.lora_rank, num_generations=p.num_generations,
            per_device_train_batch_size=p.per_device_train_batch_size,
            gradient_accumulation_steps=p.gradient_accumulation_steps, max_prompt_length=p.max_prompt_length,
            max_completion_length=p.max_completion_length, dtype=p.dtype)
        assert again.total_gb == pytest.approx(p.estimate.total_gb)
        assert again.total_gb <= card * 0.9, (key, card)


def test_preset_table_markdown():
    table = planner.preset_table_markdown()
    lines = table.splitlines()
    assert lines[0].startswith("| model | params | 6 GB | 8 GB | 12 GB | 16 GB (T4) | 24 GB | 48 GB | 80 GB |")
    assert len(lines) == 2 + len(architecture.BUILTIN_CONFIGS)
    row = next(line for line in lines if line.startswith("| llama-3.1-8b |"))
    assert row.split("|")[3].strip() == "-"  # nothing fits 6 GB
    assert "fp16" in next(line for line in lines if line.startswith("| qwen2.5-0.5b |")).split("|")[6]


# ---------------------------------------------------------------- CLI


def _plan_args(**kw):
    base = dict(model=None, vram_gb=None, compute_capability=None, load_in_4bit=None, backend="unsloth",
                use_vllm=False, prompt_length=256, num_generations=None, completion_length=None,
                max_generations=planner.DEFAULT_MAX_GENERATIONS, max_completion=planner.DEFAULT_MAX_COMPLETION,
                lora_rank=None, beta=0.0, optimizer="adamw_8bit", margin=0.10, table=False, json=False)
    return argparse.Namespace(**{**base, **kw})


def test_cli_plans_qwen_at_8gb(capsys):
    assert planner_cli.run(_plan_args(model="qwen2.5-1.5b", vram_gb=8)) == 0
    out = capsys.readouterr().out
    assert "training.num_generations" in out and "activations" in out and "fits" in out


def test_cli_refuses_8b_16bit_at_6gb(capsys):
    assert planner_cli.run(_plan_args(model="llama-3.1-8b", vram_gb=6, load_in_4bit=False)) == 1
    out = capsys.readouterr().out
    assert "does not fit" in out and "nearest alternative" in out and "llama-3.2-3b" in out


def test_the_paste_ready_overrides_are_one_line_when_piped(capsys):
    """Piped (no terminal: rich's 80 columns), the overrides were hard-wrapped into four lines."""
    assert planner_cli.run(_plan_args(model="qwen2.5-0.5b", vram_gb=6, load_in_4bit=False)) == 0
    (line,) = [x for x in capsys.readouterr().out.splitlines() if x.startswith("config overrides: ")]
    assert len(line) > 80 and line.rstrip().endswith("model.fast_inference=off")
    assert planner_cli.run(_plan_args(model="llama-3.1-8b", vram_gb=6, load_in_4bit=False)) == 1
    (line,) = [x for x in capsys.readouterr().out.splitlines() if x.startswith("its overrides: ")]
    assert "lora.r=" in line and "model.name=" in line


def test_cli_parser_json_and_errors(capsys, tmp_path):
    parser = argparse.ArgumentParser()
    planner_cli.add_parser(parser.add_subparsers())
    args = parser.parse_args(["plan", "--model", "qwen2.5-0.5b", "--vram-gb", "6", "--no-4bit", "--json"])
    assert args.func(args) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["fits"] and data["overrides"]["model.load_in_4bit"] is False
    assert planner_cli.run(_plan_args(model="nobody/unknown-model", vram_gb=8)) == 2
    assert "not a local config.json" in capsys.readouterr().err
    (tmp_path / "config.json").write_text(json.dumps(architecture.BUILTIN_CONFIGS["llama-3.2-1b"]))
    assert planner_cli.run(_plan_args(model=str(tmp_path), vram_gb=8)) == 0


def test_the_advice_for_an_unknown_capability_is_a_command_line_the_parser_takes(capsys):
    import re
    import shlex

    parser = argparse.ArgumentParser()
    planner_cli.add_parser(parser.add_subparsers())
    argv = ["plan", "--model", "qwen2.5-0.5b", "--vram-gb", "16"]
    args = parser.parse_args(argv)
    assert args.func(args) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "compute_capability=" not in out  # the keyword argument of planner.plan, not a flag
    advice = re.search(r"pass (--\S+ \S+) for a T4, or (--\S+ \S+)", out)
    assert advice, out
    for extra in advice.groups():  # each suggestion, typed as printed, plans for a T4 (fp16)
        args = parser.parse_args([*argv, *shlex.split(extra), "--json"])
        assert args.func(args) == 0
        assert json.loads(capsys.readouterr().out)["overrides"]["model.dtype"] == "fp16"


def test_cli_table(capsys):
    assert planner_cli.run(_plan_args(table=True)) == 0
    assert capsys.readouterr().out.strip() == planner.preset_table_markdown()


# ---------------------------------------------------------------- validation and hardware


def _recipe(**sections):
    from unsloth_grpo.config import load_config

    return load_config({"rewards": [{"name": "xml_count"}], **sections})


T4 = {"name": "Tesla T4", "total_gb": 15.0, "compute_capability": 7.5}


def test_check_config_warns_above_the_card_with_the_plans_settings():
    cfg = _recipe(model={"name": "Qwen/Qwen2.5-7B-Instruct", "load_in_4bit": False, "backend": "unsloth",
                         "fast_inference": "off", "max_seq_length": 2304},
                  training={"num_generations": 16, "per_device_train_batch_size": 16,
                            "max_completion_length": 2048})
    problems = planner.check_config(cfg, gpu=T4)
    assert len(problems) == 1
    assert "exceeds the 13.5 GB budget of Tesla T4" in problems[0]
    assert "training.num_generations=8" in problems[0] and "model.load_in_4bit=true" in problems[0]


def test_check_config_passes_a_fitting_config_and_skips_unknown_models():
    ok = _recipe(model={"name": "unsloth/Qwen2.5-1.5B-Instruct-bnb-4bit", "backend": "unsloth",
                        "fast_inference": "off"}, training={"max_completion_length": 256})
    assert planner.check_config(ok, gpu=T4) == []
    unknown = _recipe(model={"name": "someone/mystery-3B", "fast_inference": "off"})
    (line,) = planner.check_config(unknown, gpu=T4)
    assert line.startswith("warning: memory not checked") and "config.json" in line


def test_check_config_without_gpu_checks_nothing():
    pytest.importorskip("torch")
    import torch

    if torch.cuda.is_available():
        pytest.skip("a GPU is present")
    assert planner.detect_gpu() is None
    assert planner.check_config(_recipe()) == []


def test_plan_for_gpu_uses_the_cards_memory_and_capability():
    p = planner.plan_for_gpu("qwen2.5-1.5b", gpu=T4)
    assert p.vram_gb == 15.0 and p.dtype == "fp16" and p.fits
    from unsloth_grpo.config import load_config

    cfg = load_config({"rewards": [{"name": "xml_count"}]}, overrides=p.override_list())
    assert cfg.training.num_generations == p.num_generations and cfg.model.dtype == "fp16"
    assert planner.check_config(cfg, gpu=T4) == []


def test_benchmark_dry_mode_prints_the_estimates(capsys):
    from pathlib import Path

    from conftest import load_script

    bench = load_script(Path(__file__).resolve().parents[1] / "benchmarks" / "gpu_memory.py", "gpu_memory_bench")
    assert bench.main(["--dry", "--models", "qwen2.5-0.5b,llama-3.1-8b", "--cards", "6,8",
                       "--backends", "unsloth"]) == 0
    out = capsys.readouterr().out
    assert "qwen2.5-0.5b" in out and "does not fit" in out  # the 8B model at 6 GB
    assert bench.main(["--dry", "--models", "gemma-3-4b"]) == 2  # multimodal runs are not benchmarked
