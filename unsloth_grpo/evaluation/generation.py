"""Batched generation for evaluation, the reward lab and sample dumps.

:func:`generate` takes prompts (strings, or chat message lists to which the tokenizer's chat
template is applied) and returns ``num_samples`` completions per prompt. Prompts are sorted by
length and generated many at a time with left padding, so a batch wastes little on padding and a
call costs one ``model.generate`` per batch, not one per problem. When the model carries a vLLM
engine (Unsloth loaded with ``fast_inference=True`` on a GPU), the whole list goes to vLLM instead.

Example::

    outs = generate(model, tokenizer, [[{"role": "user", "content": "2 + 2?"}]], max_new_tokens=32)
    outs[0][0]   # the greedy completion of the first prompt
"""

from __future__ import annotations

import contextlib
from typing import Any, Callable, NamedTuple, Sequence

Prompt = str | Sequence[dict[str, Any]]


class Generation(NamedTuple):
    """One completion with its length in generated tokens and whether it ended at eos."""

    text: str
    num_tokens: int
    finished: bool  # False: cut at max_new_tokens


def render_prompts(tokenizer, prompts: Sequence[Prompt]) -> list[str]:
    """Chat message lists -> text via the chat template (assistant turn opened); strings unchanged."""
    texts = []
    for i, p in enumerate(prompts):
        if isinstance(p, str):
            texts.append(p)
            continue
        if not getattr(tokenizer, "chat_template", None):
            raise ValueError(
                f"prompt {i} is a list of chat messages but the tokenizer has no chat_template; "
                "use a chat/instruct model's tokenizer or pass plain-text prompts"
            )
        texts.append(tokenizer.apply_chat_template(list(p), tokenize=False, add_generation_prompt=True))
    return texts


def has_vllm_engine(model) -> bool:
    """True when Unsloth attached a vLLM engine (``fast_inference=True``); then ``fast_generate`` is vLLM's."""
    try:
        return getattr(model, "vllm_engine", None) is not None and hasattr(model, "fast_generate")
    except Exception:  # noqa: BLE001 - exotic __getattr__ of wrapped models
        return False


def _check(max_new_tokens: int, num_samples: int, temperature: float, top_p: float, batch_size: int) -> None:
    if max_new_tokens < 1:
        raise ValueError(f"max_new_tokens={max_new_tokens}: use an integer >= 1")
    if num_samples < 1:
        raise ValueError(f"num_samples={num_samples}: use an integer >= 1")
    if temperature < 0:
        raise ValueError(f"temperature={temperature}: use 0 (greedy) or a positive value")
    if num_samples > 1 and temperature == 0:
        raise ValueError(
            f"num_samples={num_samples} with temperature=0 would give {num_samples} identical greedy "
            "completions; set temperature > 0 (e.g. 0.7) to sample"
        )
    if not 0 < top_p <= 1:
        raise ValueError(f"top_p={top_p}: use a value in (0, 1]")
    if batch_size < 1:
        raise ValueError(f"batch_size={batch_size}: use an integer >= 1")


def generate(model, tokenizer, prompts: Sequence[Prompt], **kwargs) -> list[list[str]]:
    """``num_samples`` completions for each prompt, in prompt order: ``out[i][j]`` is sample j of prompt i.

    Keyword arguments are those of :func:`generate_detailed`, which also returns token counts.
    """
    return [[g.text for g in gens] for gens in generate_detailed(model, tokenizer, prompts, **kwargs)]


def generate_detailed(
    model,
    tokenizer,
    prompts: Sequence[Prompt],
    *,
    max_new_tokens: int,
    num_samples: int = 1,
    temperature: float = 0.0,
    top_p: float = 1.0,
    batch_size: int = 16,
    seed: int | None = None,
    use_vllm: bool | None = None,
    lora_request: Any = None,
    progress: Callable[[int, int], None] | None = None,
) -> list[list[Generation]]:
    """``num_samples`` :class:`Generation` s per prompt, in prompt order (``out[i][j]``: sample j of prompt i).

    ``temperature=0`` is greedy decoding. ``batch_size`` counts sequences generated together
    (prompts x samples), which bounds memory. Generation stops at the tokenizer's eos token; the
    returned text excludes the prompt and special tokens. ``seed`` makes sampling repeatable.
    ``use_vllm=None`` uses the vLLM engine when the model has one; ``lora_request`` is passed to it
    (an Unsloth ``model.load_lora(path)``); for a PEFT model it defaults to the adapter's current
    weights (:func:`current_lora_request`), so a model in training is evaluated as it is now.
    ``progress(done, total)`` is called as completions are finished (after each batch).
    """
    _check(max_new_tokens, num_samples, temperature, top_p, batch_size)
    if not prompts:
        return []
    texts = render_prompts(tokenizer, prompts)
    if use_vllm is None:
        use_vllm = has_vllm_engine(model)
    if use_vllm:
        if not has_vllm_engine(model):
            raise ValueError("use_vllm=True but the model has no vLLM engine; load it with Unsloth and "
                             "fast_inference=True (CUDA + vllm), or leave use_vllm unset")
        out = _generate_vllm(model, texts, max_new_tokens=max_new_tokens, num_samples=num_samples,
                             temperature=temperature, top_p=top_p, seed=seed, lora_request=lora_request)
        if progress is not None:
            progress(len(texts) * num_samples, len(texts) * num_samples)
        return out
    return _generate_hf(model, tokenizer, texts, max_new_tokens=max_new_tokens, num_samples=num_samples,
                        temperature=temperature, top_p=top_p, batch_size=batch_size, seed=seed,
                        progress=progress)


def current_lora_request(model) -> Any:
    """The LoRA request that makes vLLM generate with the adapter's *current* weights, or None.

    vLLM holds only the base weights. For a PEFT model Unsloth loaded with fast inference, its
    ``load_lora(name, load_tensors=True)`` hands the live LoRA tensors to vLLM (what Unsloth's GRPO
    trainer does before each generation); without it the base model would be evaluated.
    """
    if hasattr(model, "peft_config") and hasattr(model, "load_lora"):
        return model.load_lora("unsloth_grpo_eval_lora", load_tensors=True)
    return None


def sleeping_engine(model) -> Any:
    """The model's vLLM engine when it sleeps between generations and is asleep now, else None.

    Under Unsloth's standby the engine sleeps while the model trains; Unsloth's ``LLM.generate``
    wakes it (unsloth_zoo ``patch_vllm_enable_sleep_mode``) and nothing puts it back, so an
    evaluation in the middle of training would leave its KV cache allocated for the next training
    pass.
    """
    llm = getattr(model, "vllm_engine", None)
    engine = getattr(llm, "llm_engine", None)
    config = getattr(getattr(engine, "vllm_config", None), "model_config", None)
    if not getattr(config, "enable_sleep_mode", False):
        return None
    try:
        return llm if engine.is_sleeping() else None
    except Exception:  # noqa: BLE001 - a vLLM without is_sleeping: leave the engine as it is
        return None


def _generate_vllm(model, texts, *, max_new_tokens, num_samples, temperature, top_p, seed, lora_request):
    import os

    from vllm import SamplingParams

    if lora_request is None:
        lora_request = current_lora_request(model)

    params = SamplingParams(n=num_samples, temperature=temperature, top_p=top_p,
                            max_tokens=max_new_tokens, seed=seed)
    kwargs = {"sampling_params": params, "use_tqdm": False}
    if lora_request is not None:
        kwargs["lora_request"] = lora_request
    asleep = sleeping_engine(model)
    try:
        outputs = model.fast_generate(texts, **kwargs)
    finally:
        if asleep is not None:  # back to sleep, at the level Unsloth's GRPO trainer uses (VLLM_SLEEP_MODE)
            asleep.sleep(level=int(os.environ.get("VLLM_SLEEP_MODE", 1)))
    return [[Generation(o.text, len(o.token_ids), o.finish_reason == "stop") for o in out.outputs]
            for out in outputs]


@contextlib.contextmanager
def isolated_rng(seed: int | None):
    """Run the block on its own torch random state (seeded when ``seed`` is given); restore the
    CPU and every CUDA device's state afterwards, so the caller's sampling is unchanged."""
    import torch

    devices = list(range(torch.cuda.device_count())) if torch.cuda.is_available() else []
    with torch.random.fork_rng(devices=devices):
        if seed is not None:
            torch.manual_seed(seed)
        yield


def _eos_ids(model, tokenizer) -> list[int]:
    ids = []
    for src in (tokenizer.eos_token_id, getattr(getattr(model, "generation_config", None), "eos_token_id", None)):
        if src is None:
            continue
        for i in (src if isinstance(src, (list, tuple)) else [src]):
            if i not in ids:
                ids.append(i)
    return ids


def _generate_hf(model, tokenizer, texts, *, max_new_tokens, num_samples, temperature, top_p,
                 batch_size, seed, progress=None):
    import torch

    eos = _eos_ids(model, tokenizer)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else (eos[0] if eos else None)
    if pad is None:
        raise ValueError("the tokenizer has neither a pad nor an eos token; set tokenizer.pad_token")
    encoded = [tokenizer(t, add_special_tokens=False)["input_ids"] for t in texts]
    # Longest first: similar lengths share a batch (little padding) and an out-of-memory error
    # shows up in the first batch rather than the last.
    order = sorted(range(len(texts)), key=lambda i: -len(encoded[i]))
    per_batch = max(1, batch_size // num_samples)
    device = next(model.parameters()).device
    sample = temperature > 0
    gen_kwargs = dict(max_new_tokens=max_new_tokens, do_sample=sample, num_return_sequences=num_samples,
                      eos_token_id=eos or None, pad_token_id=pad, use_cache=True)
    if sample:
        gen_kwargs.update(temperature=temperature, top_p=top_p, top_k=0)
    else:  # a model's generation_config may carry sampling defaults; greedy must not warn about them
        gen_kwargs.update(temperature=None, top_p=None, top_k=None)
    results: list[list[Generation]] = [[] for _ in texts]
    was_training = model.training
    model.eval()
    try:
        # A seed must make this call repeatable without touching the caller's random state: a
        # training run that evaluates every N steps must sample the same completions as without.
        from unsloth_grpo.models.merged_generation import generating

        # on a CPU, through the adapter's merged weights (the same logits up to rounding; docs/real_model.md)
        with isolated_rng(seed), torch.inference_mode(), generating(model):
            for start in range(0, len(order), per_batch):
                idx = order[start:start + per_batch]
                width = max(len(encoded[i]) for i in idx)
                ids = torch.full((len(idx), width), pad, dtype=torch.long)
                mask = torch.zeros((len(idx), width), dtype=torch.long)
                for row, i in enumerate(idx):  # left padding: every prompt ends where generation starts
                    seq = encoded[i]
                    ids[row, width - len(seq):] = torch.tensor(seq, dtype=torch.long)
                    mask[row, width - len(seq):] = 1
                out = model.generate(input_ids=ids.to(device), attention_mask=mask.to(device), **gen_kwargs)
                new = out[:, width:].tolist()
                for k, tokens in enumerate(new):
                    finished = False
                    for cut, tok in enumerate(tokens):  # drop the eos and the padding after it
                        if tok in eos:
                            tokens, finished = tokens[:cut], True
                            break
                    text = tokenizer.decode(tokens, skip_special_tokens=True)
                    results[idx[k // num_samples]].append(Generation(text, len(tokens), finished))
                if progress is not None:
                    progress(min(start + per_batch, len(order)) * num_samples, len(order) * num_samples)
    finally:
        if was_training:
            model.train()
    return results
