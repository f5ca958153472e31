"""Generation through LoRA merged into buffers of its own (models.merged_generation): the adapted model's
logits up to rounding, the frozen weights untouched, the merge redone after the adapter changes, and only
the layers it can reproduce."""

from __future__ import annotations

import pytest

from unsloth_grpo.models.merged_generation import MergedWeights


def _lora(tiny_model_dir, **config):
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32)
    # init_lora_weights=False: B is not zero, so the adapter changes the logits
    settings = {"r": 8, "lora_alpha": 16, "target_modules": "all-linear", "lora_dropout": 0.0,
                "init_lora_weights": False, **config}
    return get_peft_model(model, LoraConfig(**settings)).eval()


def _ids():
    import torch

    return torch.tensor([[5, 17, 42, 9, 33, 8], [7, 7, 21, 64, 3, 11]])


def _frozen(model):
    return {n: p.detach().clone() for n, p in model.named_parameters() if not p.requires_grad}


def _fused_adamw_step(model):
    """One training step of the adapter with a fused AdamW, as transformers' Trainer picks on a CPU: it updates
    the weights without moving their version counters. The model is back in eval mode after it."""
    import torch

    model.train()
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-2, fused=True)
    model(input_ids=_ids(), labels=_ids()).loss.backward()
    optimizer.step()
    model.eval()


def test_merged_generation_gives_the_adapted_logits_and_leaves_the_frozen_weights_alone(tiny_model_dir):
    import torch

    model = _lora(tiny_model_dir)
    frozen = _frozen(model)
    with torch.no_grad():
        plain = model(input_ids=_ids()).logits
        with model.disable_adapter():
            without_adapter = model(input_ids=_ids()).logits
        merged = MergedWeights(model)
        with merged.active() as layers:
            inside = model(input_ids=_ids()).logits
        after = model(input_ids=_ids()).logits
    assert layers == len([m for m in model.modules() if type(m).__name__ == "Linear" and hasattr(m, "lora_A")]) > 0
    assert not torch.allclose(plain, without_adapter, atol=1e-3)  # the adapter matters here
    torch.testing.assert_close(inside, plain, rtol=1e-4, atol=1e-4)  # the same function, summed in another order
    assert torch.equal(after, plain)  # every layer has its own forward back
    assert all("forward" not in vars(m) for m in model.modules())
    for name, p in model.named_parameters():
        if name in frozen:
            assert torch.equal(p, frozen[name]), name
    assert merged.merges == layers


def test_the_merge_follows_the_adapter_after_an_optimizer_step_and_only_then(tiny_model_dir):
    import torch

    model = _lora(tiny_model_dir)
    merged = MergedWeights(model)
    with torch.no_grad(), merged.active() as layers:
        before = model(input_ids=_ids()).logits
    with torch.no_grad(), merged.active():
        model(input_ids=_ids())
    assert merged.merges == layers  # unchanged adapter: the buffers are reused

    _fused_adamw_step(model)
    with torch.no_grad():
        plain = model(input_ids=_ids()).logits
        with merged.active():
            inside = model(input_ids=_ids()).logits
    assert not torch.allclose(plain, before, atol=1e-3)  # the step moved the adapter
    torch.testing.assert_close(inside, plain, rtol=1e-4, atol=1e-4)  # stale buffers would give `before`
    assert merged.merges == 2 * layers


def test_layers_it_cannot_reproduce_keep_their_forward(tiny_model_dir):
    import torch

    dora = _lora(tiny_model_dir, use_dora=True)
    with MergedWeights(dora).active() as layers:
        assert layers == 0

    dropout = _lora(tiny_model_dir, lora_dropout=0.1).train()  # dropout that acts during generation
    with MergedWeights(dropout).active() as layers:
        assert layers == 0
    dropout.eval()  # in eval mode it does nothing: merged
    with MergedWeights(dropout).active() as layers:
        assert layers > 0

    model = _lora(tiny_model_dir)
    with model.disable_adapter(), MergedWeights(model).active() as layers:
        assert layers == 0  # generating without the adapter (a reference model): nothing merged

    with pytest.raises(RuntimeError), torch.no_grad(), MergedWeights(model).active():
        raise RuntimeError("generation failed")
    assert all("forward" not in vars(m) for m in model.modules())  # put back on the way out


@pytest.mark.slow
def test_grpo_on_a_cpu_generates_through_the_merged_weights_and_trains_the_adapter(tiny_model_dir, tmp_path):
    """A LoRA GRPO run on the CPU: the shared prefill carries merged weights, generation goes through them
    (one merge a layer per optimizer step, none in between), and the adapter still learns (the loss runs
    the unmerged layers, with gradients)."""
    import torch
    from transformers import AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    from unsloth_grpo.tasks.gsm8k import load_gsm8k
    from unsloth_grpo.training.shared_prefill import attach

    def reward_len(completions, **kwargs):
        return [float(len(str(c))) / 10 for c in completions]

    model = _lora(tiny_model_dir, init_lora_weights=True)
    lora_b = {n: p.detach().clone() for n, p in model.named_parameters() if "lora_B" in n}
    args = GRPOConfig(output_dir=str(tmp_path), use_cpu=True, bf16=False, max_steps=3, learning_rate=1e-2,
                      per_device_train_batch_size=8, num_generations=4, max_completion_length=8, logging_steps=1,
                      save_strategy="no", report_to=[], gradient_checkpointing=False, disable_tqdm=True, seed=0)
    trainer = GRPOTrainer(model=model, reward_funcs=[reward_len], args=args,
                          processing_class=AutoTokenizer.from_pretrained(tiny_model_dir),
                          train_dataset=load_gsm8k("synthetic", limit=16))
    handle = attach(trainer, log=None)
    assert handle.merged_weights is not None
    merged = handle.merged_weights
    layers = len(merged.layers())
    seen = []
    real_active = merged.active

    def active():
        seen.append(merged.merges)
        return real_active()

    merged.active = active
    trainer.train()
    assert len(seen) == 3  # one generation a step went through the merged weights
    assert merged.merges == 3 * layers  # merged once for each state of the adapter, and only then
    assert any(not torch.equal(p, lora_b[n]) for n, p in model.named_parameters() if n in lora_b)


def test_a_model_whose_buffers_would_crowd_the_memory_generates_through_the_adapter(tiny_model_dir, tmp_path,
                                                                                   monkeypatch):
    """The buffers take the adapted weights' size again: where that is more than a quarter of the free memory,
    the run says so and generates the plain way."""
    from transformers import AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    from unsloth_grpo.tasks.gsm8k import load_gsm8k
    from unsloth_grpo.models import merged_generation
    from unsloth_grpo.training.shared_prefill import attach

    model = _lora(tiny_model_dir)
    plain = MergedWeights(model, packed=False).bytes_needed()
    assert plain == sum(p.numel() * 4 for n, p in model.named_parameters() if "base_layer.weight" in n) > 0
    monkeypatch.setattr(merged_generation, "PACK_MIN_ELEMENTS", 0)
    head = model.get_output_embeddings().weight
    packed = MergedWeights(model).bytes_needed()  # packed, the output layer's weight is laid out again too
    assert packed == plain + (head.numel() * 4 if merged_generation.packing_available() else 0)
    monkeypatch.undo()
    needed = MergedWeights(model).bytes_needed()
    args = GRPOConfig(output_dir=str(tmp_path), use_cpu=True, bf16=False, max_steps=1, per_device_train_batch_size=4,
                      num_generations=4, max_completion_length=4, report_to=[], save_strategy="no")

    def trainer():
        return GRPOTrainer(model=model, reward_funcs=[lambda completions, **kw: [0.0] * len(completions)], args=args,
                           processing_class=AutoTokenizer.from_pretrained(tiny_model_dir),
                           train_dataset=load_gsm8k("synthetic", limit=8))

    monkeypatch.setattr(merged_generation, "available_memory", lambda: 4 * needed)
    assert attach(trainer(), log=None).merged_weights is not None
    monkeypatch.setattr(merged_generation, "available_memory", lambda: 4 * needed - 1)
    lines = []
    assert attach(trainer(), log=lines.append).merged_weights is None
    assert len(lines) == 1 and "merged-weight generation: off" in lines[0] and "free memory" in lines[0]


def _needs_onednn():
    import torch

    if not torch.backends.mkldnn.is_available():
        pytest.skip("this torch has no oneDNN: merged weights are kept unpacked (tested above)")


def test_packed_weights_give_the_plain_merge_logits_and_the_output_layer_is_packed_once(tiny_model_dir, monkeypatch):
    """Where torch has oneDNN the merged weights and the LM head are kept in its layout for the decode step's
    skinny products: the same logits up to rounding, the head packed once while it is frozen, and every
    forward put back on the way out."""
    import torch

    from unsloth_grpo.models.merged_generation import packing_available

    from unsloth_grpo.models import merged_generation

    _needs_onednn()
    assert packing_available()  # torch's CPU builds have oneDNN: a silent loss of packing would slow generation
    model = _lora(tiny_model_dir)
    with torch.no_grad(), MergedWeights(model).active() as layers:
        model(input_ids=_ids())
    assert layers > 0 and "forward" not in vars(model.get_output_embeddings())  # the tiny model's weights: too small
    monkeypatch.setattr(merged_generation, "PACK_MIN_ELEMENTS", 0)  # pack them all, to test the packed products
    packed, plain = MergedWeights(model), MergedWeights(model, packed=False)
    assert packed.packed and not plain.packed
    with torch.no_grad():
        reference = model(input_ids=_ids()).logits
        with plain.active():
            unpacked = model(input_ids=_ids()).logits
        with packed.active() as layers:
            head = model.get_output_embeddings()
            assert "forward" in vars(head)  # the LM head multiplies by its packed weight too
            inside = model(input_ids=_ids()).logits
        with packed.active():
            model(input_ids=_ids())
    torch.testing.assert_close(inside, unpacked, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(inside, reference, rtol=1e-4, atol=1e-4)
    assert packed.packs == layers + 1 and plain.packs == 0  # the frozen head is packed once, not per call
    assert all("forward" not in vars(m) for m in model.modules())


def test_a_trained_output_layer_is_packed_again_after_each_optimizer_step(tiny_model_dir, monkeypatch):
    """Full fine-tuning (no adapter): the LM head is a trained weight, so its packed copy follows each step."""
    import torch
    from transformers import AutoModelForCausalLM

    from unsloth_grpo.models import merged_generation

    _needs_onednn()
    monkeypatch.setattr(merged_generation, "PACK_MIN_ELEMENTS", 0)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32)
    merged = MergedWeights(model)
    with torch.no_grad(), merged.active() as layers:
        before = model(input_ids=_ids()).logits
    assert layers == 0 and merged.packs == 1
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2, fused=True)
    model(input_ids=_ids(), labels=_ids()).loss.backward()
    optimizer.step()
    with torch.no_grad():
        plain = model(input_ids=_ids()).logits
        with merged.active():
            inside = model(input_ids=_ids()).logits
    assert not torch.allclose(plain, before, atol=1e-3)
    torch.testing.assert_close(inside, plain, rtol=1e-4, atol=1e-4)  # a stale head would not follow the step
    assert merged.packs == 2


def test_packing_is_off_where_the_packed_product_is_missing_or_disagrees(tiny_model_dir, monkeypatch):
    """The packed product is an internal oneDNN op of torch: where it is missing or gives other numbers
    than F.linear, the merge keeps plain buffers and the logits are still the adapted model's."""
    import torch

    from unsloth_grpo.models import merged_generation

    model = _lora(tiny_model_dir)
    with torch.no_grad():
        reference = model(input_ids=_ids()).logits
    monkeypatch.setattr(merged_generation, "PACK_MIN_ELEMENTS", 0)
    for broken in (lambda w: (_ for _ in ()).throw(RuntimeError("no such op")),  # missing
                   lambda w: torch.ops.mkldnn._reorder_linear_weight(w * 2, 64)):  # other numbers
        monkeypatch.setattr(merged_generation, "_packing", None)  # check again in this process
        monkeypatch.setattr(merged_generation, "_pack", broken)
        assert not merged_generation.packing_available()
        merged = MergedWeights(model)
        with torch.no_grad(), merged.active() as layers:
            inside = model(input_ids=_ids()).logits
        assert not merged.packed and merged.packs == 0 and layers > 0
        torch.testing.assert_close(inside, reference, rtol=1e-4, atol=1e-4)


def test_the_evaluations_sampling_goes_through_the_models_merged_weights_and_a_later_merge_still_works(
        tiny_model_dir, monkeypatch):
    """`eval` and the headroom sample on a CPU through the same merged weights as the trainer's generation (one
    copy a model), under torch.inference_mode; a merge after an optimizer step, outside it, still writes its
    buffers (inference tensors could not be written again), and greedy answers are those of the plain model."""
    import torch
    from transformers import AutoTokenizer

    from unsloth_grpo.evaluation.generation import generate
    from unsloth_grpo.models import merged_generation

    model = _lora(tiny_model_dir)
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    prompts = [[{"role": "user", "content": "What is 2 + 3?"}], [{"role": "user", "content": "Ann has 7 pens."}]]
    merged = merged_generation.for_model(model)
    assert merged_generation.for_model(model) is merged  # one a model
    texts = generate(model, tokenizer, prompts, max_new_tokens=6, temperature=0.0, batch_size=2)
    layers = len(merged.layers())
    assert merged.merges == layers > 0  # the evaluation merged once
    monkeypatch.setattr(merged_generation, "on_cpu", lambda model: False)  # the plain way, for comparison
    assert generate(model, tokenizer, prompts, max_new_tokens=6, temperature=0.0, batch_size=2) == texts
    monkeypatch.undo()

    _fused_adamw_step(model)
    with torch.no_grad():
        plain = model(input_ids=_ids()).logits
        with merged.active():  # outside inference mode, after the buffers were made inside it
            inside = model(input_ids=_ids()).logits
    torch.testing.assert_close(inside, plain, rtol=1e-4, atol=1e-4)
    assert merged.merges == 2 * layers


def test_switching_packing_off_after_a_packed_merge_merges_into_plain_buffers(tiny_model_dir, monkeypatch):
    """step_time's --packing off switches a model's MergedWeights after the evaluation may have merged it
    packed: the next merge writes plain buffers (a packed copy cannot be written into) and the logits hold."""
    import torch

    from unsloth_grpo.models import merged_generation

    _needs_onednn()
    monkeypatch.setattr(merged_generation, "PACK_MIN_ELEMENTS", 0)
    model = _lora(tiny_model_dir)
    merged = MergedWeights(model)
    with torch.no_grad(), merged.active():
        model(input_ids=_ids())
    merged.packed = False
    with torch.no_grad():
        plain = model(input_ids=_ids()).logits
        with merged.active() as layers:
            inside = model(input_ids=_ids()).logits
    torch.testing.assert_close(inside, plain, rtol=1e-4, atol=1e-4)
    assert merged.merges == 2 * layers
