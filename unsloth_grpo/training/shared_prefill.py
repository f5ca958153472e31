"""One prompt prefill per group: GRPO's transformers generation without computing a prompt G times.

TRL repeats each prompt ``num_generations`` times and hands the whole batch to ``model.generate``,
so the prompt's forward pass (the prefill) runs once per completion. Measured on the arith demo
(benchmarks/step_time.py), that prefill was about a third of ``model.generate``'s time. :func:`attach`
wraps the generate call TRL makes: the prompt, minus its last token, is run once per distinct
prompt, its key/value cache is copied to every row of the group, and ``model.generate`` continues
from that cache. With ``cdf_sampling`` off, sampling is untouched (the same logits processors, the same
random draws), so the completions are those of the plain call: on the tiny CPU models the tokens were
identical. By default (``cdf_sampling`` on) the loop draws each token with one uniform number a row
(:mod:`unsloth_grpo.training.cdf_sampling`): the same distribution, other draws. The prompt's own
forward computes the logits of its last position only: nothing reads the others. On a CPU the
generation also multiplies each LoRA layer by its merged weight (:mod:`unsloth_grpo.models.merged_generation`,
recomputed once per optimizer step; ``merged_weights`` None switches it off): the same logits up to
float rounding, without the adapter's side products in every decode step.

It applies only inside TRL's own generation (``_generate_single_turn``), only to a batch with
repeated rows and a dynamic cache whose rows can be copied (:func:`plain_cache`: full-attention layers,
and the sliding-window layers of models such as Gemma 3), and falls back to the plain call otherwise
(vLLM, beam search, multimodal inputs). A model whose cache has other layer types switches it off for
the run with one line on the log naming them; so does any error of the shared path, and that batch is
generated the plain way.

Example::

    trainer = GRPOTrainer(...)
    attach(trainer)
"""

from __future__ import annotations

import functools
from typing import Any, Callable


class SharedPrefill:
    """The wrapper :func:`attach` installs; ``enabled`` switches it (off: TRL's plain generate call)."""

    def __init__(self, trainer, model, log: Callable[[str], None] | None) -> None:
        self.enabled = True
        self.cdf_sampling = True  # draw tokens with training.cdf_sampling.decode (same distribution, cheaper draw)
        self.merged_weights = None  # a models.merged_generation.MergedWeights: generate through merged LoRA weights
        self.log = log
        self._active = False
        self._plain_generate = model.generate
        self._model = model
        turn = trainer._generate_single_turn

        @functools.wraps(turn)
        def single_turn(*args, **kwargs):
            self._active = True
            try:
                return turn(*args, **kwargs)
            finally:
                self._active = False

        trainer._generate_single_turn = single_turn
        model.generate = self.generate

    def generate(self, *args, **kwargs):
        if not (self._active and self.enabled) or args:
            return self._plain_generate(*args, **kwargs)
        if self.merged_weights is None:
            return self._shared_generate(kwargs)
        with self.merged_weights.active():
            return self._shared_generate(kwargs)

    def _shared_generate(self, kwargs):
        try:
            cache = shared_cache(self._model, kwargs)
        except Exception as exc:  # noqa: BLE001 - a speed-up must never end a run
            self.enabled = False
            if self.log is not None:
                self.log(f"shared prompt prefill: off for this run ({type(exc).__name__}: {exc}); generating as usual")
            cache = None
        if cache is None:
            return self._plain_generate(**kwargs)
        if self.cdf_sampling:
            from unsloth_grpo.training.cdf_sampling import decode

            return self._plain_generate(**kwargs, past_key_values=cache, custom_generate=decode)
        return self._plain_generate(**kwargs, past_key_values=cache)


def attach(trainer, *, log: Callable[[str], None] | None = print) -> SharedPrefill | None:
    """Share prompt prefills in ``trainer``'s transformers generation (``trainer.shared_prefill``);
    None when it cannot apply (vLLM generation, a trainer without TRL's generation method)."""
    if getattr(trainer, "use_vllm", False) or not hasattr(trainer, "_generate_single_turn"):
        return None
    model = trainer.accelerator.unwrap_model(trainer.model) if hasattr(trainer, "accelerator") else trainer.model
    trainer.shared_prefill = SharedPrefill(trainer, model, log)
    from unsloth_grpo.models.merged_generation import for_model, on_cpu

    if on_cpu(model):  # the merged buffers cost the adapted weights' memory again: not on a card
        merged = for_model(model)  # shared with the evaluation's sampling: one merged copy a model
        if merged.fits():
            trainer.shared_prefill.merged_weights = merged
        elif log is not None:
            log(f"merged-weight generation: off ({merged.bytes_needed() / 1e9:.1f} GB of buffers would take more "
                "than a quarter of the free memory); generating through the adapter")
    return trainer.shared_prefill


def shared_cache(model, kwargs: dict[str, Any]):
    """The cache of ``kwargs['input_ids']`` minus its last column, computed once per run of identical
    rows and copied to each row; None when the call is not one this can serve. Raises
    :class:`CacheNotShareable` when the model's cache is one whose rows cannot be copied (:func:`plain_cache`)."""
    import torch

    ids, mask = kwargs.get("input_ids"), kwargs.get("attention_mask")
    config = kwargs.get("generation_config")
    extra = set(kwargs) - {"input_ids", "attention_mask", "generation_config"}
    if ids is None or mask is None or extra or ids.dim() != 2 or ids.shape[1] < 2:
        return None
    if config is not None and (getattr(config, "num_beams", 1) or 1) > 1 or getattr(config, "cache_implementation", None):
        return None
    if model.training and getattr(model, "is_gradient_checkpointing", False):
        return None  # checkpointed layers keep no cache in training mode
    same = (ids[1:] == ids[:-1]).all(dim=1) & (mask[1:] == mask[:-1]).all(dim=1)
    starts = torch.cat([same.new_ones(1), ~same]).nonzero().flatten()
    if len(starts) == ids.shape[0]:
        return None  # every row differs: nothing to share
    unique_ids, unique_mask = ids[starts, :-1], mask[starts, :-1]
    # positions as model.generate derives them from the attention mask (left padding)
    positions = unique_mask.long().cumsum(-1) - 1
    positions.masked_fill_(unique_mask == 0, 1)
    keep = {"logits_to_keep": 1} if getattr(model, "_supports_logits_to_keep", lambda: False)() else {}
    with torch.no_grad():  # only the cache is used: the logits of one position are enough
        out = model(input_ids=unique_ids, attention_mask=unique_mask, position_ids=positions, use_cache=True, **keep)
    cache = out.past_key_values
    if not plain_cache(cache):  # a property of the model: every later call would build it only to drop it
        raise CacheNotShareable(describe_cache(cache))
    if cache.get_seq_length() != unique_ids.shape[1]:
        return None
    counts = torch.diff(torch.cat([starts, starts.new_tensor([ids.shape[0]])]))
    cache.batch_select_indices(torch.repeat_interleave(torch.arange(len(starts), device=ids.device), counts.to(ids.device)))
    return cache


class CacheNotShareable(TypeError):
    """The model's forward returned a cache whose rows this module cannot copy (:func:`plain_cache`): the
    shared path is switched off for the run (the caller logs why) rather than run a prompt forward it drops."""


def describe_cache(cache) -> str:
    """``cache``'s class and the classes of its layers, for the line that says why sharing is off."""
    layers = sorted({type(layer).__name__ for layer in getattr(cache, "layers", ())})
    return (f"the model's cache is a {type(cache).__name__}" + (f" of {', '.join(layers)}" if layers else "")
            + ", whose rows cannot be copied")


def plain_cache(cache) -> bool:
    """Whether ``cache`` is a ``DynamicCache`` whose layers all hold each row's keys and values as plain
    tensors, so that copying rows copies the cache: full-attention layers (``DynamicLayer``) and the
    sliding-window layers of models such as Gemma 3 (``DynamicSlidingWindowLayer``, which keeps the last
    ``sliding_window - 1`` positions and counts every position it has seen, the same for every row)."""
    from transformers import cache_utils

    if type(cache) is not cache_utils.DynamicCache:
        return False
    sliding = getattr(cache_utils, "DynamicSlidingWindowLayer", None)
    for layer in cache.layers:
        if type(layer) is cache_utils.DynamicLayer:
            continue
        if sliding is not None and type(layer) is sliding and not getattr(layer, "record_past", False):
            continue
        return False
    return True


__all__ = ["CacheNotShareable", "SharedPrefill", "attach", "describe_cache", "plain_cache", "shared_cache"]
