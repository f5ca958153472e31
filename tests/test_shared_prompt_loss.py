"""One prompt forward per group in GRPO's loss: the same log-probabilities and gradients, fewer prompt tokens."""

from __future__ import annotations

import pytest

from unsloth_grpo.training.shared_prompt_loss import attach, shared_forward


@pytest.fixture()
def tiny(tiny_model_dir):
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.manual_seed(0)
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    model = get_peft_model(AutoModelForCausalLM.from_pretrained(tiny_model_dir),
                           LoraConfig(r=4, lora_alpha=8, target_modules="all-linear", lora_dropout=0.0, init_lora_weights=False))
    return model, tokenizer


def _grpo_batch(tokenizer, prompts, completions, repeats):
    """Rows as TRL builds them: left-padded prompts, each repeated for its group, then right-padded completions."""
    import torch

    p = tokenizer(prompts, return_tensors="pt", padding=True, padding_side="left")
    prompt_ids, prompt_mask = p["input_ids"].repeat_interleave(repeats, 0), p["attention_mask"].repeat_interleave(repeats, 0)
    c = tokenizer(completions, return_tensors="pt", padding=True, padding_side="right")
    assert c["input_ids"].shape[0] == prompt_ids.shape[0]
    return (torch.cat([prompt_ids, c["input_ids"]], 1), torch.cat([prompt_mask, c["attention_mask"]], 1),
            c["input_ids"].shape[1])


def _logps(model, ids, mask, keep):
    import torch

    logits = model(input_ids=ids, attention_mask=mask, logits_to_keep=keep + 1).logits[:, :-1]
    return torch.log_softmax(logits.float(), -1).gather(-1, ids[:, -keep:, None]).squeeze(-1) * mask[:, -keep:]


def test_shared_prompt_gives_the_plain_forwards_logps_and_gradients(tiny):
    import torch

    model, tokenizer = tiny
    model.train()
    completions = ["<answer>5</answer>", "5", "2 + 3 = 5 and more", "x", "<reasoning>red</reasoning>", "blue",
                   "a much longer completion than the others here", ""]
    ids, mask, keep = _grpo_batch(tokenizer, ["What is 2 + 3?", "Name a colour, then a longer word please"],
                                  completions, 4)
    sizes = []
    hook = model.register_forward_pre_hook(lambda m, a, kw: sizes.append(tuple(kw["input_ids"].shape)), with_kwargs=True)
    try:
        grads = {}
        for name, fn in (("plain", lambda **kw: model(**kw)), ("shared", lambda **kw: shared_forward(model, kw))):
            model.zero_grad()
            out = fn(input_ids=ids, attention_mask=mask, logits_to_keep=keep + 1, use_cache=False)
            logits = out.logits[:, :-1]
            logps = torch.log_softmax(logits, -1).gather(-1, ids[:, -keep:, None]).squeeze(-1) * mask[:, -keep:]
            logps.sum().backward()
            grads[name] = (logps.detach(), {n: p.grad.clone() for n, p in model.named_parameters() if p.requires_grad})
    finally:
        hook.remove()
    width = ids.shape[1]
    assert sizes[0] == (8, width)  # plain: every row's whole prompt and completion
    assert sizes[1:] == [(2, width - keep - 1), (8, keep + 1)]  # shared: two prompts once, then the completions
    torch.testing.assert_close(grads["shared"][0], grads["plain"][0], rtol=1e-4, atol=1e-5)
    # float sums run in another order on the two paths: an entry near zero differed by 1.35e-5 on one machine
    # (2026-12-06), so the absolute bound is a thousandth of the tensor's largest gradient, not a fixed 1e-5
    for n, g in grads["plain"][1].items():
        torch.testing.assert_close(grads["shared"][1][n], g, rtol=1e-3, atol=max(1e-5, 1e-3 * float(g.abs().max())),
                                   msg=n)


def test_nothing_to_share_or_an_unusual_call_falls_back(tiny):
    model, tokenizer = tiny
    ids, mask, keep = _grpo_batch(tokenizer, ["one", "two two", "three"], ["a", "b", "c"], 1)
    assert shared_forward(model, {"input_ids": ids, "attention_mask": mask, "logits_to_keep": keep + 1}) is None
    ids, mask, keep = _grpo_batch(tokenizer, ["one"], ["a", "b", "c"], 3)
    call = {"input_ids": ids, "attention_mask": mask, "logits_to_keep": keep + 1}
    assert shared_forward(model, {**call, "pixel_values": None}) is None  # inputs it does not know
    assert shared_forward(model, {**call, "logits_to_keep": 0}) is None  # logits of the whole row
    model.gradient_checkpointing_enable()
    model.train()
    try:
        assert shared_forward(model, call) is None  # checkpointed layers keep no cache while training
    finally:
        model.gradient_checkpointing_disable()


@pytest.mark.slow
@pytest.mark.parametrize("steps_per_generation", [1, 2])
def test_grpo_training_with_the_shared_prompt_is_the_training_without_it(tiny_model_dir, tmp_path, steps_per_generation):
    """A few GRPO steps of a LoRA adapter on the tiny model, with the shared prompt in the loss and without,
    from the same seed: the same rewards, losses and gradient norms; and the shared path did run.
    ``steps_per_generation=2`` makes TRL compute the old log-probabilities too (through the same function)."""
    from peft import LoraConfig
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    from unsloth_grpo.tasks.gsm8k import load_gsm8k

    def reward_len(completions, **kwargs):
        return [float(len(str(c))) / 10 for c in completions]

    def run(share: bool):
        import torch

        torch.manual_seed(0)  # the LoRA matrices TRL initializes: the same in both runs
        tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
        model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
        args = GRPOConfig(output_dir=str(tmp_path / str(share)), use_cpu=True, bf16=False, max_steps=4,
                          learning_rate=1e-2, per_device_train_batch_size=8, num_generations=4, max_completion_length=8,
                          steps_per_generation=steps_per_generation, logging_steps=1, save_strategy="no", report_to=[],
                          gradient_checkpointing=False, disable_tqdm=True, seed=0, temperature=1.0)
        trainer = GRPOTrainer(model=model, reward_funcs=[reward_len], args=args, processing_class=tokenizer,
                              train_dataset=load_gsm8k("synthetic", limit=32),
                              peft_config=LoraConfig(r=8, lora_alpha=16, target_modules="all-linear"))
        handle = attach(trainer, log=None)
        handle.enabled = share
        trainer.train()
        return [h for h in trainer.state.log_history if "reward" in h], handle.served

    plain, served = run(False)
    assert served == 0
    shared, served = run(True)
    assert served >= 4
    for a, b in zip(plain, shared, strict=True):
        for key in ("reward", "reward_std", "completions/mean_length", "loss", "grad_norm", "entropy"):
            assert b[key] == pytest.approx(a[key], rel=1e-3, abs=1e-5), key

