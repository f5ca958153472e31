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
"""

from __future__ import annotations

import itertools
from typing import Any


class NonFiniteProbabilities(FloatingPointError):
    """A row's next-token probabilities are NaN or infinite: the model's logits went NaN (a training that
    diverged, broken weights). ``torch.multinomial`` refuses such a row; a draw from it would only be
    noise, and the run would go on training on noise."""


def sample(probs, *, token: int | None = None):
    """One index per row of ``probs`` ([rows, vocab], non-negative, rows need not sum to one), drawn
    with probability proportional to its entry; an entry of zero is never drawn. A row whose mass is
    NaN, infinite or zero raises :class:`NonFiniteProbabilities` (``token``: the position being drawn,
    named in the message)."""
    import torch

    cdf = probs.to(torch.float64).cumsum(-1)
    total = cdf[:, -1:]
    bad = ~(total[:, 0] > 0) | torch.isinf(total[:, 0])  # NaN fails every comparison
    if bool(bad.any()):
        rows = bad.nonzero().flatten().tolist()
        raise NonFiniteProbabilities(
            f"the next-token probabilities of {len(rows)} of {probs.shape[0]} rows (rows {rows[:8]}) are NaN or "
            f"infinite{f' at generated token {token}' if token is not None else ''}: the model's logits went NaN, "
            "so every token from here would be noise")
    u = torch.rand(probs.shape[0], 1, dtype=torch.float64, device=probs.device) * total
    # the first index whose cumulative mass exceeds u; u < total, so it exists, and a zero entry
    # (an empty interval of the cumulative sum) can never hold u
    picked = torch.searchsorted(cdf, u, right=True)
    return picked.clamp_(max=probs.shape[-1] - 1).squeeze(1)


def decode(model, input_ids, logits_processor, stopping_criteria, generation_config, synced_gpus: bool = False,
           streamer=None, **model_kwargs: Any):
    """A ``custom_generate`` decoding method: transformers' sampling loop with :func:`sample` as its draw."""
    import torch

    plain = (not generation_config.do_sample or generation_config.return_dict_in_generate or streamer is not None
             or synced_gpus or model.config.is_encoder_decoder)
    if plain:
        return type(model)._sample(model, input_ids, logits_processor, stopping_criteria, generation_config,
                                   synced_gpus=synced_gpus, streamer=streamer, **model_kwargs)
    pad = generation_config._pad_token_tensor
    ends_on_eos = any(hasattr(criterion, "eos_token_id") for criterion in stopping_criteria)
    running = torch.ones(input_ids.shape[0], dtype=torch.long, device=input_ids.device)
    outputs = model._prefill(input_ids, generation_config, model_kwargs, is_first_iteration=True)
    for token in itertools.count(1):
        model_kwargs = model._update_model_kwargs_for_generation(outputs, model_kwargs, is_encoder_decoder=False)
        logits = outputs.logits[:, -1].to(dtype=torch.float32, copy=True)
        del outputs
        scores = logits_processor(input_ids, logits)
        tokens = sample(torch.softmax(scores, dim=-1), token=token)
        if ends_on_eos and pad is not None:
            tokens = tokens * running + pad.to(tokens.device) * (1 - running)
        input_ids = torch.cat([input_ids, tokens[:, None]], dim=-1)
        running = running & ~stopping_criteria(input_ids, None)
        if not bool(running.any()):
            return input_ids
        inputs = model.prepare_inputs_for_generation(input_ids, next_sequence_length=1, **model_kwargs)
        outputs = model(**inputs, return_dict=True)


__all__ = ["NonFiniteProbabilities", "decode", "sample"]
