"""Generate with the LoRA adapter merged into the weights, on a CPU: one matrix product per layer, not three.

An unmerged LoRA layer computes ``W x + s B (A x)``: for every token decoded, each adapted layer runs
two more small products, a scaling and an addition, and on a CPU each of those costs its own call
overhead. During TRL's generation the adapter does not change, so :func:`attach` merges it into the
frozen weights (peft's ``merge``) when a generation starts and puts the frozen weights back when it ends,
from a copy kept once at the start (a merge followed by an unmerge would leave them rounded differently,
a little more every step). The training forward and backward never see merged weights.

The logits of a merged layer equal the unmerged ones up to the rounding of a sum taken in another
order (about 1e-6 of a logit in fp32); the completions are samples of the same distribution, not the
same tokens. Applies on a CPU only (the copy costs host memory: the adapted layers' weights once,
~0.4 GB for SmolLM2-135M), to peft LoRA layers over plain ``nn.Linear`` weights; a quantized or
GPU model keeps TRL's generation as it is.

Example::

    trainer = GRPOTrainer(...)
    attach(trainer)
"""

from __future__ import annotations

import functools
from typing import Callable


class MergedGeneration:
    """The wrapper :func:`attach` installs around TRL's ``_generate_single_turn``; ``enabled`` switches it,
    ``merges`` counts the generations it ran merged."""

    def __init__(self, trainer, layers: list, log: Callable[[str], None] | None) -> None:
        self.enabled = True
        self.merges = 0
        self.log = log
        self.layers = layers
        self.frozen = [layer.get_base_layer().weight.detach().clone() for layer in layers]
        inner = trainer._generate_single_turn

        @functools.wraps(inner)
        def single_turn(*args, **kwargs):
            if not self.enabled:
                return inner(*args, **kwargs)
            self.merge()
            try:
                return inner(*args, **kwargs)
            finally:
                self.restore()

        trainer._generate_single_turn = single_turn

    def merge(self) -> None:
        import torch

        with torch.no_grad():
            for layer in self.layers:
                layer.merge()
        self.merges += 1

    def restore(self) -> None:
        """Unmerge (peft's bookkeeping) and put back the frozen weights exactly as they were."""
        import torch

        with torch.no_grad():
            for layer, weight in zip(self.layers, self.frozen):
                if layer.merged:
                    layer.unmerge()
                layer.get_base_layer().weight.copy_(weight)


def lora_layers(model) -> list:
    """The peft LoRA layers of ``model`` that wrap a plain ``nn.Linear`` with trainable adapters; empty
    when any LoRA layer wraps something else (a quantized layer cannot be merged back exactly)."""
    import torch

    try:
        from peft.tuners.lora import LoraLayer
    except ImportError:
        return []
    layers = [m for m in model.modules() if isinstance(m, LoraLayer)]
    if any(type(layer.get_base_layer()) is not torch.nn.Linear for layer in layers):
        return []
    return layers


def attach(trainer, *, log: Callable[[str], None] | None = print) -> MergedGeneration | None:
    """Merge the adapter for ``trainer``'s generation (``trainer.merged_generation``); None when it
    cannot apply: not a CPU, vLLM generation, no LoRA adapter, or one over quantized layers."""
    if getattr(trainer, "use_vllm", False) or not hasattr(trainer, "_generate_single_turn"):
        return None
    model = trainer.accelerator.unwrap_model(trainer.model) if hasattr(trainer, "accelerator") else trainer.model
    params = list(model.parameters())
    if not params or params[0].device.type != "cpu":
        return None
    layers = lora_layers(model)
    if not layers:
        return None
    trainer.merged_generation = MergedGeneration(trainer, layers, log)
    return trainer.merged_generation


__all__ = ["MergedGeneration", "attach", "lora_layers"]
