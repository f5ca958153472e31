"""One prompt forward per group in GRPO's loss: the policy's log-probabilities without running a prompt G times.

TRL computes the loss's log-probabilities (and the old or reference ones, when it needs them) with one
forward pass over every row's prompt and completion. The ``num_generations`` rows of a group share their
prompt, so the prompt's tokens go through the model, forward and backward, once per completion: on the
gsm8k ``smollm2`` preset (a ~130-token prompt, completions of ~30 tokens) that is most of the loss's
tokens. :func:`attach` hands TRL's log-probability function a model that runs each distinct prompt once,
with gradients, copies its key/value cache to the rows of its group, and runs the completions on that
cache. The logits TRL receives are those of the plain forward (the same positions, the same attention,
the same weights), up to the rounding of matrix products of other shapes; the gradient reaching a shared
prompt is the sum of its rows' gradients, as in the plain forward.

It serves only calls it can serve exactly: text-only inputs (``input_ids``, ``attention_mask``,
``logits_to_keep``), no gradient checkpointing (checkpointed layers keep no cache in training mode), and
a batch with at least one repeated prompt. Anything else goes to the model as TRL called it. The model's
cache must be one whose rows can be copied (``shared_prefill.plain_cache``: full-attention layers, and
sliding-window layers such as Gemma 3's); another switches it off for the rest of the run with one line on
the log naming its layer types, as does any error of the shared path, and that call runs the plain way.

Example::

    trainer = GRPOTrainer(...)
    attach(trainer)
"""

from __future__ import annotations

import functools
from typing import Any, Callable


class SharedPromptModel:
    """Stands in for the model in TRL's log-probability call (``model(**inputs)``): the shared forward
    when the call is one it can serve (:func:`shared_forward`), the model itself otherwise."""

    def __init__(self, model, owner: "SharedPromptLoss") -> None:
        self.model, self.owner = model, owner

    def __call__(self, **kwargs):
        if self.owner.enabled:
            try:
                out = shared_forward(self.model, kwargs)
            except Exception as exc:  # noqa: BLE001 - a speed-up must never end a run
                self.owner.enabled = False
                if self.owner.log is not None:
                    self.owner.log(f"shared prompt in the loss: off for this run ({type(exc).__name__}: {exc}); "
                                   "computing every row's prompt as usual")
                out = None
            if out is not None:
                self.owner.served += 1
                return out
        return self.model(**kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.model, name)


class SharedPromptLoss:
    """The wrapper :func:`attach` installs on a trainer; ``enabled`` switches it, ``served`` counts the
    calls it computed the shared way."""

    def __init__(self, trainer, log: Callable[[str], None] | None) -> None:
        self.enabled = True
        self.served = 0
        self.log = log
        inner = trainer._get_per_token_logps_and_entropies

        @functools.wraps(inner)
        def logps(model, *args, **kwargs):
            return inner(SharedPromptModel(model, self), *args, **kwargs)

        trainer._get_per_token_logps_and_entropies = logps


def attach(trainer, *, log: Callable[[str], None] | None = print) -> SharedPromptLoss | None:
    """Run each group's prompt once in ``trainer``'s loss (``trainer.shared_prompt_loss``); None when
    it cannot apply (a trainer without TRL's log-probability method, or Liger's chunked loss, which
    reads the model's layers itself)."""
    if not hasattr(trainer, "_get_per_token_logps_and_entropies") or getattr(trainer, "use_liger_kernel", False):
        return None
    trainer.shared_prompt_loss = SharedPromptLoss(trainer, log)
    return trainer.shared_prompt_loss


def shared_forward(model, kwargs: dict[str, Any]):
    """``model(**kwargs)``'s output (its ``logits``) with each distinct prompt run once; None when the call
    is not one this can serve. The prompt is the part of every row before the last ``logits_to_keep``
    columns (TRL passes the completion's width plus one); its last token is run with the completion. Raises
    ``shared_prefill.CacheNotShareable`` when the model's cache is one whose rows cannot be copied."""
    import torch

    from unsloth_grpo.training.shared_prefill import CacheNotShareable, describe_cache, plain_cache

    ids, mask, keep = kwargs.get("input_ids"), kwargs.get("attention_mask"), kwargs.get("logits_to_keep")
    if set(kwargs) - {"input_ids", "attention_mask", "logits_to_keep", "use_cache"} or ids is None or mask is None:
        return None
    if not isinstance(keep, int) or ids.dim() != 2 or not 0 < keep < ids.shape[1]:
        return None
    if getattr(model, "is_gradient_checkpointing", False) and model.training:
        return None
    split = ids.shape[1] - keep  # prompt columns run once: all but the prompt's last token
    prefix = torch.cat([ids[:, :split], mask[:, :split]], dim=1)
    unique, inverse = torch.unique(prefix, dim=0, return_inverse=True)
    if unique.shape[0] == ids.shape[0]:
        return None  # every prompt differs: nothing to share
    # positions as the plain forward takes them (no position ids passed: 0..L-1 whatever the padding)
    out = model(input_ids=unique[:, :split], attention_mask=unique[:, split:], use_cache=True, logits_to_keep=1)
    cache = out.past_key_values
    if not plain_cache(cache):  # a property of the model: every later call would run the prompt only to drop it
        raise CacheNotShareable(describe_cache(cache))
    if cache.get_seq_length() != split:
        return None
    for layer in cache.layers:  # each row takes its prompt's keys and values (a gather: gradients add up)
        layer.keys, layer.values = layer.keys[inverse], layer.values[inverse]
    return model(input_ids=ids[:, split:], attention_mask=mask, past_key_values=cache, use_cache=True,
                 logits_to_keep=keep)


__all__ = ["SharedPromptLoss", "SharedPromptModel", "attach", "shared_forward"]
