"""One prompt prefill per group in GRPO's transformers generation: fewer prompt forwards, the same completions."""

from __future__ import annotations

import pytest

from unsloth_grpo.training.shared_prefill import attach, shared_cache


@pytest.fixture(scope="module")
def tiny(tiny_model_dir):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    return AutoModelForCausalLM.from_pretrained(tiny_model_dir), tokenizer


def _batch(tokenizer, texts, repeats):
    enc = tokenizer(texts, return_tensors="pt", padding=True, padding_side="left")
    return {k: enc[k].repeat_interleave(repeats, dim=0) for k in ("input_ids", "attention_mask")}


def generate_plain_and_shared(model, batch, config, hooked=None):
    """``model.generate`` of ``batch`` twice from seed 7: as TRL calls it, then from :func:`shared_cache`'s cache.
    Returns both outputs, the input sizes each call's forwards of ``hooked`` (default: ``model``) saw, and the
    cache (None when the call was not one it serves). Gemma 3's tests use it too."""
    import torch

    sizes = []
    hook = (hooked or model).register_forward_pre_hook(
        lambda m, args, kwargs: sizes.append(tuple(kwargs["input_ids"].shape)), with_kwargs=True)
    try:
        with torch.no_grad():
            torch.manual_seed(7)
            plain = model.generate(**batch, generation_config=config)
            plain_sizes, sizes[:] = list(sizes), []
            torch.manual_seed(7)
            cache = shared_cache(model, {**batch, "generation_config": config})
            shared = model.generate(**batch, generation_config=config, past_key_values=cache)
    finally:
        hook.remove()
    return plain, shared, plain_sizes, sizes, cache


def test_generate_from_the_shared_cache_samples_the_same_tokens(tiny):
    import torch
    from transformers import GenerationConfig

    model, tokenizer = tiny
    batch = _batch(tokenizer, ["What is 2 + 3?", "Name a colour, then a longer word please"], 4)
    config = GenerationConfig(max_new_tokens=10, do_sample=True, temperature=1.0, top_k=0, top_p=1.0,
                              pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id)
    plain, shared, plain_sizes, sizes, _ = generate_plain_and_shared(model, batch, config)
    assert torch.equal(plain, shared)
    width = batch["input_ids"].shape[1]
    assert plain_sizes[0] == (8, width)  # plain: every row's whole prompt
    assert sizes[0] == (2, width - 1) and sizes[1] == (8, 1)  # shared: two prompts once, then one token a row


def test_nothing_to_share_or_an_unusual_call_falls_back(tiny):
    from transformers import GenerationConfig

    model, tokenizer = tiny
    distinct = _batch(tokenizer, ["one", "two two", "three"], 1)
    assert shared_cache(model, distinct) is None  # every row differs
    repeated = _batch(tokenizer, ["one"], 3)
    assert shared_cache(model, {**repeated, "generation_config": GenerationConfig(num_beams=2)}) is None
    assert shared_cache(model, {**repeated, "pixel_values": None}) is None  # inputs it does not know
    model.gradient_checkpointing_enable()
    model.train()
    try:
        assert shared_cache(model, repeated) is None  # checkpointed layers keep no cache while training
    finally:
        model.gradient_checkpointing_disable()
        model.eval()


@pytest.mark.slow
def test_grpo_training_with_the_shared_prefill_is_the_training_without_it(tiny_model_dir, tmp_path, monkeypatch):
    """A few GRPO steps on the tiny model, with and without the shared prefill, from the same seed: the same
    completions, rewards, losses and gradient norms; and the shared path did run."""
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    from unsloth_grpo.tasks.gsm8k import load_gsm8k

    def reward_len(completions, **kwargs):
        return [float(len(str(c))) / 10 for c in completions]

    def run(share: bool, cdf: bool = False):
        tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
        model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
        args = GRPOConfig(output_dir=str(tmp_path / str(share)), use_cpu=True, bf16=False, max_steps=3,
                          learning_rate=1e-3, per_device_train_batch_size=8, num_generations=4, max_completion_length=8,
                          logging_steps=1, save_strategy="no", report_to=[], gradient_checkpointing=False,
                          disable_tqdm=True, seed=0, temperature=1.0)
        trainer = GRPOTrainer(model=model, reward_funcs=[reward_len], args=args, processing_class=tokenizer,
                              train_dataset=load_gsm8k("synthetic", limit=16))
        handle = attach(trainer, log=None)
        handle.enabled, handle.cdf_sampling = share, cdf
        trainer.train()
        return [h for h in trainer.state.log_history if "reward" in h]

    from unsloth_grpo.training import shared_prefill

    served = []  # one entry per generation that went through the shared path: was a cache built?
    real = shared_prefill.shared_cache
    monkeypatch.setattr(shared_prefill, "shared_cache", lambda *a: served.append(real(*a)) or served[-1])
    plain = run(False)
    assert served == []
    shared = run(True)
    assert len(served) == 3 and all(cache is not None for cache in served)
    for a, b in zip(plain, shared):
        for key in ("reward", "reward_std", "completions/mean_length", "loss", "grad_norm"):
            assert b[key] == pytest.approx(a[key], rel=1e-5, abs=1e-6), key

    # the default: the shared path draws its tokens with cdf_sampling (other draws, so only that it ran)
    from unsloth_grpo.training import cdf_sampling

    draws = []
    real_sample = cdf_sampling.sample
    monkeypatch.setattr(cdf_sampling, "sample", lambda probs, **kw: draws.append(probs.shape) or real_sample(probs, **kw))
    assert len(run(True, cdf=True)) == 3
    assert draws and all(shape[0] == 8 for shape in draws)  # one draw a decode step for the whole batch
