"""The CPU speed paths of generation and loss on a Gemma 3 shaped model (issue 53): each gives the plain path's numbers.

Gemma 3 (``gemma3_text``) is not Llama-shaped where it could matter to these paths: five of every six layers
attend over a sliding window, and the model's cache keeps only the window's last positions in those layers
(``DynamicSlidingWindowLayer``); queries and keys are normed; the embedding is scaled by sqrt(hidden) and
TIED to the LM head. The tiny random model here has all of that (six layers, five sliding, one global, a
window of 8 positions) with the tiny tokenizer's vocabulary, and the prompts are longer than the window, so
the sliding layers do slide. The adapter is attached as a run attaches it (the default ``lora`` section:
every projection of every block; ``init_lora_weights=False`` so that it changes the logits).

The tolerances are those of the same paths' tests on the Llama/Qwen2-shaped tiny model.
"""

from __future__ import annotations

import pytest

WINDOW = 8
PROMPTS = ["What is 2 + 3? Give a long answer, please, now", "Red?"]
COMPLETIONS = ["<answer>5</answer>", "5", "2 + 3 = 5 and more", "x", "<reasoning>red</reasoning>", "blue",
               "a much longer completion than the others here", ""]


@pytest.fixture(scope="module")
def gemma_dir(tiny_model_dir, tmp_path_factory):
    """A random Gemma 3 text model with the tiny tokenizer, saved like a checkpoint (the Hub's generation
    config asks for the ``hybrid`` cache, so this one does too)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, Gemma3TextConfig

    folder = tmp_path_factory.mktemp("gemma3-speed")
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    config = Gemma3TextConfig(vocab_size=len(tokenizer), hidden_size=64, intermediate_size=96, num_hidden_layers=6,
                              num_attention_heads=4, num_key_value_heads=2, head_dim=16, query_pre_attn_scalar=16,
                              sliding_window=WINDOW, max_position_embeddings=512, pad_token_id=tokenizer.pad_token_id,
                              eos_token_id=tokenizer.eos_token_id, bos_token_id=None)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    with torch.no_grad():  # norms that are not all one, so the q/k norms and the + 1 matter
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.normal_(0, 0.3)
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.cache_implementation = "hybrid"
    model.save_pretrained(str(folder))
    tokenizer.save_pretrained(str(folder))
    return str(folder)


def _lora(gemma_dir, attn: str = "sdpa"):
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    from unsloth_grpo.config import LoraSettings

    settings = LoraSettings()
    model = AutoModelForCausalLM.from_pretrained(gemma_dir, dtype=torch.float32, attn_implementation=attn)
    torch.manual_seed(0)
    return get_peft_model(model, LoraConfig(r=settings.r, lora_alpha=settings.alpha, lora_dropout=settings.dropout,
                                            target_modules=list(settings.target_modules), task_type="CAUSAL_LM",
                                            init_lora_weights=False)).eval()


def _tokenizer(gemma_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(gemma_dir)


def _prompts(tokenizer, repeats: int = 4):
    enc = tokenizer(PROMPTS, return_tensors="pt", padding=True, padding_side="left")
    return {k: enc[k].repeat_interleave(repeats, dim=0) for k in ("input_ids", "attention_mask")}


def _sampling(tokenizer, **overrides):
    from transformers import GenerationConfig

    settings = dict(max_new_tokens=12, do_sample=True, temperature=1.0, top_k=0, top_p=1.0,
                    pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id)
    return GenerationConfig(**{**settings, **overrides})


def _input_sizes(model):
    sizes = []
    hook = model.get_base_model().register_forward_pre_hook(
        lambda m, args, kwargs: sizes.append(tuple(kwargs["input_ids"].shape)), with_kwargs=True)
    return sizes, hook


def test_the_tiny_model_is_gemma_shaped_and_its_prompts_outrun_the_window(gemma_dir):
    """What the other tests rely on: tied embeddings, sliding layers whose cache really drops positions."""
    import torch

    model = _lora(gemma_dir)
    base = model.get_base_model()
    assert base.config.model_type == "gemma3_text"
    assert base.lm_head.weight is base.model.embed_tokens.weight  # the LM head IS the embedding
    assert base.config.layer_types.count("sliding_attention") == 5 and base.config.layer_types[-1] == "full_attention"
    batch = _prompts(_tokenizer(gemma_dir))
    assert batch["input_ids"].shape[1] > 2 * WINDOW and batch["attention_mask"].sum(1).min() < WINDOW
    with torch.no_grad():
        cache = model(**batch, use_cache=True).past_key_values
    kinds = [type(layer).__name__ for layer in cache.layers]
    assert kinds == ["DynamicSlidingWindowLayer"] * 5 + ["DynamicLayer"]
    assert cache.layers[0].keys.shape[2] == WINDOW - 1 < cache.layers[-1].keys.shape[2] == batch["input_ids"].shape[1]


# ------------------------------------------------------------------ shared prefill (generation)

@pytest.mark.parametrize("attn", ["sdpa", "eager"])
def test_shared_prefill_samples_the_plain_generations_tokens(gemma_dir, attn):
    """The prompts' cache, sliding layers included, copied to each row: the same completions as the plain
    generate call from the same seed, with each prompt run once."""
    import torch
    from test_shared_prefill import generate_plain_and_shared

    model, tokenizer = _lora(gemma_dir, attn), _tokenizer(gemma_dir)
    batch, config = _prompts(tokenizer), _sampling(tokenizer, max_new_tokens=WINDOW + 4)
    plain, shared, plain_sizes, sizes, cache = generate_plain_and_shared(model, batch, config,
                                                                         hooked=model.get_base_model())
    assert cache is not None  # served, not the plain call's fallback
    width = batch["input_ids"].shape[1]
    assert plain.shape[1] > width + WINDOW  # the completions slide past the window too
    assert torch.equal(plain, shared)
    assert plain_sizes[0] == (8, width)
    assert sizes[0] == (2, width - 1) and sizes[1] == (8, 1)  # each prompt once, then one token a row


class _Trainer:
    """The two things of TRL's GRPOTrainer that shared_prefill.attach uses."""

    def __init__(self, model):
        self.model = model

    def _generate_single_turn(self, **kwargs):
        return self.model.generate(**kwargs)


def test_a_cache_it_cannot_copy_switches_the_shared_prefill_off_with_one_line(gemma_dir, monkeypatch):
    """Were the sliding layers a cache it cannot copy (as before it knew them), the shared prefill turns
    itself off for the run with one line saying why, and generates the plain way, rather than build and
    drop a prompt cache at every generation."""
    import torch

    from unsloth_grpo.training import shared_prefill

    model, tokenizer = _lora(gemma_dir), _tokenizer(gemma_dir)
    monkeypatch.setattr(shared_prefill, "plain_cache", lambda cache: False)
    lines = []
    trainer = _Trainer(model)
    handle = shared_prefill.attach(trainer, log=lines.append)
    handle.merged_weights, handle.cdf_sampling = None, False
    batch, config = _prompts(tokenizer), _sampling(tokenizer)
    with torch.no_grad():
        torch.manual_seed(7)
        plain = handle._plain_generate(**batch, generation_config=config)
        for _ in range(2):
            torch.manual_seed(7)
            assert torch.equal(trainer._generate_single_turn(**batch, generation_config=config), plain)
    assert not handle.enabled
    assert len(lines) == 1 and lines[0].startswith("shared prompt prefill: off for this run (CacheNotShareable: "), lines
    assert "DynamicSlidingWindowLayer" in lines[0] and "cannot be copied" in lines[0]


# ------------------------------------------------------------------ cdf sampling

def test_cdf_decoding_draws_from_the_plain_forwards_distribution(gemma_dir):
    """The cdf loop's own positions, masks and sliding cache: with top_k=1 it is greedy decoding (fresh and
    from the shared prefill's cache), and at every step it draws from the distribution a plain forward of
    the whole sequence gives that position."""
    import torch

    from unsloth_grpo.training import cdf_sampling
    from unsloth_grpo.training.shared_prefill import shared_cache

    model, tokenizer = _lora(gemma_dir), _tokenizer(gemma_dir)
    batch = _prompts(tokenizer, repeats=3)
    steps = WINDOW + 4
    greedy = _sampling(tokenizer, do_sample=False, max_new_tokens=steps)
    top1 = _sampling(tokenizer, top_k=1, temperature=0.7, max_new_tokens=steps)
    with torch.no_grad():
        want = model.generate(**batch, generation_config=greedy)
        fresh = model.generate(**batch, generation_config=top1, custom_generate=cdf_sampling.decode)
        cache = shared_cache(model, {**batch, "generation_config": top1})
        assert cache is not None
        shared = model.generate(**batch, generation_config=top1, custom_generate=cdf_sampling.decode,
                                past_key_values=cache)
    assert torch.equal(fresh, want) and torch.equal(shared, want)

    drawn = []
    real = cdf_sampling.sample

    def recording(probs, **kw):
        drawn.append(probs.clone())
        return real(probs, **kw)

    # no end of sequence, so every row runs all its steps and the full forward below sees what decode saw
    free = _sampling(tokenizer, eos_token_id=None, max_new_tokens=steps)
    try:
        cdf_sampling.sample = recording
        with torch.no_grad():
            torch.manual_seed(3)
            cache = shared_cache(model, {**batch, "generation_config": free})
            out = model.generate(**batch, generation_config=free, custom_generate=cdf_sampling.decode,
                                 past_key_values=cache)
    finally:
        cdf_sampling.sample = real
    width = batch["input_ids"].shape[1]
    assert len(drawn) == steps and out.shape[1] == width + steps
    mask = torch.cat([batch["attention_mask"], batch["attention_mask"].new_ones(out.shape[0], steps)], dim=1)
    positions = (mask.cumsum(-1) - 1).masked_fill_(mask == 0, 1)  # as generate derives them
    with torch.no_grad():
        logits = model(input_ids=out, attention_mask=mask, position_ids=positions).logits
    for step, probs in enumerate(drawn):
        want = torch.softmax(logits[:, width - 1 + step].float(), dim=-1)
        torch.testing.assert_close(probs / probs.sum(-1, keepdim=True), want, rtol=1e-4, atol=1e-5, msg=f"step {step}")


# ------------------------------------------------------------------ shared prompt in the loss

def _grpo_batch(tokenizer, repeats: int = 4):
    """Rows as TRL builds them: left-padded prompts, repeated for their group, then right-padded completions."""
    import torch

    p = _prompts(tokenizer, repeats)
    c = tokenizer(COMPLETIONS, return_tensors="pt", padding=True, padding_side="right")
    return (torch.cat([p["input_ids"], c["input_ids"]], 1), torch.cat([p["attention_mask"], c["attention_mask"]], 1),
            c["input_ids"].shape[1])


@pytest.mark.parametrize("attn", ["sdpa", "eager"])
def test_shared_prompt_loss_gives_the_plain_forwards_logps_and_gradients(gemma_dir, attn):
    import torch

    from unsloth_grpo.training.shared_prompt_loss import shared_forward

    model, tokenizer = _lora(gemma_dir, attn), _tokenizer(gemma_dir)
    model.train()
    ids, mask, keep = _grpo_batch(tokenizer)
    assert keep > WINDOW and ids.shape[1] - keep > WINDOW  # prompts and completions both outrun the window
    sizes, hook = _input_sizes(model)
    try:
        got = {}
        for name, fn in (("plain", lambda **kw: model(**kw)), ("shared", lambda **kw: shared_forward(model, kw))):
            model.zero_grad()
            out = fn(input_ids=ids, attention_mask=mask, logits_to_keep=keep + 1, use_cache=False)
            assert out is not None, name
            logps = torch.log_softmax(out.logits[:, :-1], -1).gather(-1, ids[:, -keep:, None]).squeeze(-1)
            logps = logps * mask[:, -keep:]
            logps.sum().backward()
            got[name] = (logps.detach(), {n: p.grad.clone() for n, p in model.named_parameters() if p.requires_grad})
    finally:
        hook.remove()
    width = ids.shape[1]
    assert sizes[0] == (8, width)
    assert sizes[1:] == [(2, width - keep - 1), (8, keep + 1)]  # two prompts once, then the completions
    torch.testing.assert_close(got["shared"][0], got["plain"][0], rtol=1e-4, atol=1e-5)
    for n, g in got["plain"][1].items():
        assert float(g.abs().max()) > 0, n
        torch.testing.assert_close(got["shared"][1][n], g, rtol=1e-3, atol=max(1e-5, 1e-3 * float(g.abs().max())),
                                   msg=n)


def test_a_cache_it_cannot_copy_switches_the_shared_prompt_loss_off_with_one_line(gemma_dir, monkeypatch):
    import torch

    from unsloth_grpo.training import shared_prefill
    from unsloth_grpo.training.shared_prompt_loss import SharedPromptLoss, SharedPromptModel

    class Trainer:
        def _get_per_token_logps_and_entropies(self, model, **kwargs):
            return model(**kwargs)

    model, tokenizer = _lora(gemma_dir), _tokenizer(gemma_dir)
    monkeypatch.setattr(shared_prefill, "plain_cache", lambda cache: False)
    lines = []
    owner = SharedPromptLoss(Trainer(), lines.append)
    ids, mask, keep = _grpo_batch(tokenizer)
    call = dict(input_ids=ids, attention_mask=mask, logits_to_keep=keep + 1)
    with torch.no_grad():
        want = model(**call).logits
        for _ in range(2):
            torch.testing.assert_close(SharedPromptModel(model, owner)(**call).logits, want, rtol=0, atol=0)
    assert not owner.enabled and owner.served == 0
    assert len(lines) == 1 and lines[0].startswith("shared prompt in the loss: off for this run (CacheNotShareable: ")
    assert "DynamicSlidingWindowLayer" in lines[0]


# ------------------------------------------------------------------ merged and packed weights

def test_merged_and_packed_weights_give_the_adapted_logits_with_the_tied_head_packed_from_the_embedding(
        gemma_dir, monkeypatch):
    """The merged projections and the packed LM head: the adapter's logits up to rounding, over sequences
    longer than the window. The packed head is the embedding matrix laid out again (the head is tied), the
    embedding itself untouched, and the memory check counts that packed copy once: the model's weights hold
    the tied matrix once, the packed copy is memory of its own."""
    import torch

    from unsloth_grpo.models import merged_generation
    from unsloth_grpo.models.merged_generation import MergedWeights, packing_available

    if not packing_available():
        pytest.skip("this torch has no oneDNN packed products")
    monkeypatch.setattr(merged_generation, "PACK_MIN_ELEMENTS", 0)  # the tiny model's weights are below the floor
    model, tokenizer = _lora(gemma_dir), _tokenizer(gemma_dir)
    base = model.get_base_model()
    embedding = base.model.embed_tokens.weight
    before = embedding.detach().clone()
    ids, mask, _ = _grpo_batch(tokenizer)
    merged = MergedWeights(model)
    assert merged.packed
    with torch.no_grad():
        plain = model(input_ids=ids, attention_mask=mask).logits
        with model.disable_adapter():
            without = model(input_ids=ids, attention_mask=mask).logits
        with merged.active() as layers:
            head = model.get_output_embeddings()
            assert head is base.lm_head and "forward" in vars(head)
            inside = model(input_ids=ids, attention_mask=mask).logits
    assert layers == 7 * 6  # every projection of every block
    assert not torch.allclose(plain, without, atol=1e-3)  # the adapter matters here
    torch.testing.assert_close(inside, plain, rtol=1e-4, atol=1e-4)
    assert torch.equal(merged._buffers[id(head)].to_dense(), embedding.detach())  # the tied matrix, packed
    assert torch.equal(embedding, before) and base.lm_head.weight is embedding
    frozen = sum(m.base_layer.weight.numel() for m in merged.layers()) * 4
    assert merged.bytes_needed() == frozen + embedding.numel() * 4
    assert all("forward" not in vars(m) for m in model.modules())


def test_the_packed_product_holds_for_a_gemma_sized_vocabulary():
    """The real Gemma 3's head has 262,144 rows (its tied vocabulary): the packed layout of so tall a weight
    gives F.linear's products for a decode step's few rows."""
    import torch

    from unsloth_grpo.models.merged_generation import _pack, _packed_linear, packing_available

    if not packing_available():
        pytest.skip("this torch has no oneDNN packed products")
    generator = torch.Generator().manual_seed(0)
    weight = torch.randn(262_144, 32, generator=generator) / 8
    x = torch.randn(8, 1, 32, generator=generator)
    torch.testing.assert_close(_packed_linear(x, _pack(weight), None), torch.nn.functional.linear(x, weight),
                               rtol=1e-4, atol=1e-4)


def test_generation_through_the_merged_weights_is_the_adapters_greedy_decoding(gemma_dir, monkeypatch):
    """What the run does on a CPU: the shared prefill and cdf decoding inside the merged, packed weights;
    with top_k=1 the completions are the adapter's own greedy ones."""
    import torch

    from unsloth_grpo.models import merged_generation
    from unsloth_grpo.models.merged_generation import MergedWeights
    from unsloth_grpo.training.cdf_sampling import decode
    from unsloth_grpo.training.shared_prefill import shared_cache

    monkeypatch.setattr(merged_generation, "PACK_MIN_ELEMENTS", 0)
    model, tokenizer = _lora(gemma_dir), _tokenizer(gemma_dir)
    batch = _prompts(tokenizer, repeats=2)
    greedy = _sampling(tokenizer, do_sample=False, max_new_tokens=WINDOW + 4)
    top1 = _sampling(tokenizer, top_k=1, max_new_tokens=WINDOW + 4)
    with torch.no_grad():
        want = model.generate(**batch, generation_config=greedy)
        with MergedWeights(model).active():
            cache = shared_cache(model, {**batch, "generation_config": top1})
            assert cache is not None
            got = model.generate(**batch, generation_config=top1, custom_generate=decode, past_key_values=cache)
    assert torch.equal(got, want)


# ------------------------------------------------------------------ in a GRPO run (TRL's trainer)

def _long_prompts(n: int, kind: str = "varied"):
    import datasets

    return datasets.Dataset.from_list([
        {"prompt": [{"role": "user", "content": f"{kind} question {i}: add the numbers {i} and {2 * i}, show the work"}],
         "kind": kind} for i in range(n)])


def flat_or_varied(completions, kind, **kwargs):
    """A 'flat' prompt's completions all score 1 (a group that teaches nothing); a 'varied' prompt's alternate."""
    return [1.0 if k == "flat" else float(i % 2) for i, k in enumerate(kind)]


def _grpo(gemma_dir, tmp_path, data, *, steps=3, speed=True, refill=False, lines=None):
    import torch
    from peft import LoraConfig
    from transformers import AutoModelForCausalLM
    from trl import GRPOConfig, GRPOTrainer

    from unsloth_grpo.config import LoraSettings
    from unsloth_grpo.training import dynamic_sampling, shared_prefill, shared_prompt_loss

    settings = LoraSettings()
    torch.manual_seed(0)  # the LoRA matrices TRL initializes: the same in every run
    args = GRPOConfig(output_dir=str(tmp_path / f"run-{speed}-{refill}"), use_cpu=True, bf16=False, max_steps=steps,
                      learning_rate=1e-2, per_device_train_batch_size=8, num_generations=4,
                      max_completion_length=WINDOW + 2, logging_steps=1, save_strategy="no", report_to=[],
                      gradient_checkpointing=False, disable_tqdm=True, seed=0, temperature=1.0)
    trainer = GRPOTrainer(model=AutoModelForCausalLM.from_pretrained(gemma_dir, dtype=torch.float32),
                          reward_funcs=[flat_or_varied], args=args, processing_class=_tokenizer(gemma_dir),
                          train_dataset=data,
                          peft_config=LoraConfig(r=settings.r, lora_alpha=settings.alpha, lora_dropout=settings.dropout,
                                                 target_modules=list(settings.target_modules)))
    log = None if lines is None else lines.append
    prefill, loss = shared_prefill.attach(trainer, log=log), shared_prompt_loss.attach(trainer, log=log)
    prefill.enabled = loss.enabled = speed
    if refill:
        dynamic_sampling.attach(trainer, "refill", max_rounds=4, log=log)
    return trainer, prefill, loss


def test_grpo_with_the_shared_prefill_and_prompt_loss_is_grpo_without_them(gemma_dir, tmp_path, monkeypatch):
    """A few GRPO steps of the adapter on the tiny Gemma 3, with both shared paths (plain sampling, merged
    weights as attach sets them) and without: the same completions, rewards, losses and gradient norms; and
    both shared paths served every call."""
    from unsloth_grpo.training import shared_prefill

    served = []
    real = shared_prefill.shared_cache
    monkeypatch.setattr(shared_prefill, "shared_cache", lambda *a: served.append(real(*a)) or served[-1])
    histories = {}
    for speed in (False, True):
        trainer, prefill, loss = _grpo(gemma_dir, tmp_path, _long_prompts(24), speed=speed)
        prefill.cdf_sampling = False  # transformers' own draws, so the tokens can be compared
        trainer.train()
        histories[speed] = [h for h in trainer.state.log_history if "reward" in h]
        if speed:
            assert prefill.merged_weights is not None and prefill.enabled and loss.enabled
            assert len(served) == 3 and all(cache is not None for cache in served)
            assert loss.served >= 3
        else:
            assert served == [] and loss.served == 0
    for a, b in zip(histories[False], histories[True], strict=True):
        for key in ("reward", "reward_std", "completions/mean_length", "loss", "grad_norm", "entropy"):
            assert b[key] == pytest.approx(a[key], rel=1e-3, abs=1e-5), key


def test_refill_on_gemma_with_every_speed_path_trains_on_informative_groups_only(gemma_dir, tmp_path):
    """Dynamic sampling (refill) regroups TRL's rows and knows nothing of the model; on Gemma 3, with the
    shared prefill, cdf sampling, merged weights and the shared prompt loss all on, each step still trains
    on a full batch of informative groups, and no speed path switched itself off."""
    import datasets

    data = datasets.concatenate_datasets([_long_prompts(8, "flat"), _long_prompts(8, "varied")])
    lines = []
    trainer, prefill, loss = _grpo(gemma_dir, tmp_path, data, refill=True, lines=lines)
    seen = []
    compute = trainer._compute_loss

    def recording(model, inputs):
        seen.append({k: inputs[k].detach().clone() for k in ("advantages", "completion_mask", "num_items_in_batch")})
        seen[-1]["prompts"] = trainer.processing_class.batch_decode(inputs["prompt_ids"], skip_special_tokens=True)
        return compute(model, inputs)

    trainer._compute_loss = recording
    trainer.train()
    assert len(seen) == 3
    for batch in seen:
        assert len(batch["prompts"]) == 8 and all("varied" in p for p in batch["prompts"]), batch["prompts"]
        assert (batch["advantages"] != 0).all()
        assert batch["num_items_in_batch"] == batch["completion_mask"].sum()
    rounds = [h["dynamic_sampling/rounds"] for h in trainer.state.log_history if "dynamic_sampling/rounds" in h]
    assert max(rounds) > 1  # a flat group was met and replaced
    assert prefill.enabled and prefill.cdf_sampling and prefill.merged_weights is not None
    assert loss.enabled and loss.served >= 3
    assert not [line for line in lines if "off for this run" in line], lines


@pytest.mark.slow
def test_a_toolkit_run_on_gemma_serves_both_shared_paths(gemma_dir, tmp_path, monkeypatch):
    """The smoke recipe with the tiny Gemma 3 as its model, through ``train`` (the transformers backend on a
    CPU, the speed paths as a run attaches them): every generation and every loss call took the shared way,
    and nothing said a path was off."""
    from unsloth_grpo.recipes.gsm8k import RECIPE
    from unsloth_grpo.training import shared_prefill, shared_prompt_loss
    from unsloth_grpo.training.train import train

    served = {"prefill": [], "loss": []}
    cache, forward = shared_prefill.shared_cache, shared_prompt_loss.shared_forward

    def counted_cache(*args):
        out = cache(*args)
        served["prefill"].append(out is not None)
        return out

    def counted_forward(*args):
        out = forward(*args)
        served["loss"].append(out is not None)
        return out

    monkeypatch.setattr(shared_prefill, "shared_cache", counted_cache)
    monkeypatch.setattr(shared_prompt_loss, "shared_forward", counted_forward)
    cfg = RECIPE.resolve(preset="smoke", output_dir=str(tmp_path / "run"), overrides=[
        "training.max_steps=2", "run.samples_every=0", f"model.name={gemma_dir}", "model.backend=transformers",
        "data.num_synthetic=32"])
    lines = []
    train(cfg, log=lines.append)
    assert len(served["prefill"]) == 2 and all(served["prefill"]), served
    assert len(served["loss"]) >= 2 and all(served["loss"]), served
    assert not [line for line in lines if "off for this run" in line or "generation: off" in line], lines
