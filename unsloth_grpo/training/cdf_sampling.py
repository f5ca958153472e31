"""Token sampling that draws one random number per row instead of one per vocabulary entry.

``model.generate`` picks each sampled token with ``torch.multinomial(probs, 1)``, which on a CPU draws
an exponential variate for every entry of the distribution: for SmolLM2's 49,152-token vocabulary and
the 8 rows of a GRPO group, 393,216 random numbers per decode step, about 8 ms of a ~135 ms step on one
thread (benchmarks/decode_step.py). :func:`sample` draws the same categorical distribution by inverse
transform: the cumulative sum of each row's probabilities (in float64), one uniform number per row,
and a binary search, about 0.4 ms.

:func:`decode` is a decoding method for ``model.generate(custom_generate=decode)``: transformers
prepares everything as usual (the generation config merged with the model's, the logits processors
and warpers, the stopping criteria, the cache) and hands the loop to it; it runs transformers' own
prefill and input preparation and differs from its ``_sample`` only in how the token is drawn. Calls it
does not serve (greedy decoding, returned scores or dicts, a streamer, synchronized GPUs) go to
transformers' ``_sample`` unchanged.

The completions follow the same distribution as before, but not the same draws: a seed gives other
tokens than ``torch.multinomial`` would. What a run learns was measured with it (docs/real_model.md).

The loop also stops computing rows that have ended. ``_sample`` runs every row through the model until
the longest completion ends (finished rows get padding, but still cost a forward pass); here, once a
row ends, it is dropped from the batch (its key/value cache, attention mask and positions), and the
later decode steps run the rows still writing. The uniform numbers are drawn for every row of the
batch at each step, ended or not, so dropping rows changes which rows are computed and nothing of
what is drawn: with ``drop_finished=False`` the tokens are those of the full batch whenever the
logits are (a batch of other size may round a logit differently in its last bits).
"""

from __future__ import annotations

from typing import Any


def sample(probs, uniform=None):
    """One index per row of ``probs`` ([rows, vocab], non-negative, rows need not sum to one), drawn
    with probability proportional to its entry; an entry of zero is never drawn. ``uniform`` ([rows],
    float64 in [0, 1)) gives the draws; by default they are drawn here."""
    import torch

    cdf = probs.to(torch.float64).cumsum(-1)
    total = cdf[:, -1:]
    if uniform is None:
        uniform = torch.rand(probs.shape[0], dtype=torch.float64, device=probs.device)
    u = uniform.to(torch.float64).reshape(-1, 1) * total
    # the first index whose cumulative mass exceeds u; u < total, so it exists, and a zero entry
    # (an empty interval of the cumulative sum) can never hold u
    picked = torch.searchsorted(cdf, u, right=True)
    return picked.clamp_(max=probs.shape[-1] - 1).squeeze(1)


#: Keyword arguments of the decode loop that hold one row per sequence, as ``[rows, length]``.
_PER_ROW = ("attention_mask", "position_ids")
#: Those that do not (shared by every row, or not tensors).
_SHARED = ("cache_position", "past_key_values", "use_cache", "logits_to_keep")


def _can_drop_rows(model_kwargs: dict) -> bool:
    """Whether ended rows can leave the batch: a plain dynamic cache, and no per-row input the loop
    does not know how to cut (an encoder output, 3-D positions, images)."""
    from transformers.cache_utils import DynamicCache, DynamicLayer

    cache = model_kwargs.get("past_key_values")
    if type(cache) is not DynamicCache or any(type(layer) is not DynamicLayer for layer in cache.layers):
        return False
    for key, value in model_kwargs.items():
        if key in _PER_ROW:
            if value is not None and getattr(value, "ndim", 2) != 2:
                return False
        elif key not in _SHARED and value is not None:
            return False
    return True


def decode(model, input_ids, logits_processor, stopping_criteria, generation_config, synced_gpus: bool = False,
           streamer=None, drop_finished: bool = True, **model_kwargs: Any):
    """A ``custom_generate`` decoding method: transformers' sampling loop with :func:`sample` as its draw,
    and (``drop_finished``) without the rows that have ended."""
    import torch

    plain = (not generation_config.do_sample or generation_config.return_dict_in_generate or streamer is not None
             or synced_gpus or model.config.is_encoder_decoder)
    if plain:
        return type(model)._sample(model, input_ids, logits_processor, stopping_criteria, generation_config,
                                   synced_gpus=synced_gpus, streamer=streamer, **model_kwargs)
    pad = generation_config._pad_token_tensor
    ends_on_eos = any(hasattr(criterion, "eos_token_id") for criterion in stopping_criteria)
    rows = input_ids.shape[0]
    running = torch.ones(rows, dtype=torch.long, device=input_ids.device)
    live = torch.arange(rows, device=input_ids.device)  # the rows the model still computes
    outputs = model._prefill(input_ids, generation_config, model_kwargs, is_first_iteration=True)
    drop = drop_finished and ends_on_eos and pad is not None and _can_drop_rows(model_kwargs)
    while True:
        model_kwargs = model._update_model_kwargs_for_generation(outputs, model_kwargs, is_encoder_decoder=False)
        logits = outputs.logits[:, -1].to(dtype=torch.float32, copy=True)
        del outputs
        uniform = torch.rand(rows, dtype=torch.float64, device=input_ids.device)  # one per row, live or not
        scores = logits_processor(input_ids[live] if len(live) < rows else input_ids, logits)
        drawn = sample(torch.softmax(scores, dim=-1), uniform[live])
        if len(live) < rows:
            tokens = pad.to(drawn.device).expand(rows).clone()
            tokens[live] = drawn
        else:
            tokens = drawn
        if ends_on_eos and pad is not None:
            tokens = tokens * running + pad.to(tokens.device) * (1 - running)
        input_ids = torch.cat([input_ids, tokens[:, None]], dim=-1)
        running = running & ~stopping_criteria(input_ids, None)
        if not bool(running.any()):
            return input_ids
        if drop:
            still = running[live].bool()
            if not bool(still.all()):
                keep = still.nonzero().flatten()
                live = live[keep]
                model_kwargs["past_key_values"].batch_select_indices(keep)
                for key in _PER_ROW:
                    if model_kwargs.get(key) is not None:
                        model_kwargs[key] = model_kwargs[key][keep]
        inputs = model.prepare_inputs_for_generation(input_ids[live] if len(live) < rows else input_ids,
                                                     next_sequence_length=1, **model_kwargs)
        outputs = model(**inputs, return_dict=True)


__all__ = ["decode", "sample"]
