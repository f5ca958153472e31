"""Generation through the adapter merged into weights of its own: GRPO's decode without LoRA's side products.

With LoRA on every linear layer, each adapted layer of a forward pass is the frozen product plus two
thin ones on the side (``A`` then ``B``), a scale and an add. A decode step of the gsm8k ``smollm2``
preset runs 210 such layers for 8 rows, so those extra small operations are a share of generation that
the machine's speed does not explain (docs/real_model.md). Between two optimizer steps the adapter does
not change, so generation can multiply by ``W + scale * B @ A`` instead: :class:`MergedWeights` computes
it for every adapted layer into a buffer of its own, once per change of the weights, and, inside
:meth:`MergedWeights.active`, each adapted layer's forward is one product with that buffer. A change is
any optimizer's step (a global post-step hook counts them: the fused AdamW that transformers picks on a
CPU updates the weights without moving their version counters) or an in-place write the tensors'
version counters record (loading a checkpoint, say).

The frozen weights are never written, so nothing has to be restored and no rounding accumulates over a
run; training's forward and backward never see the buffer. The logits are those of the unmerged forward
up to float rounding (the same weights summed in another order), so the sampled distribution is the
same, but a draw that falls within rounding of a boundary can pick another token: a seed's completions
may differ from those of the unmerged generation.

It serves peft's LoRA ``Linear`` over a plain ``nn.Linear`` on a CPU, with one active adapter, no
variant (DoRA), no ``fan_in_fan_out``, no bias on ``B``, and dropout that does nothing during generation
(p = 0, or the model in eval mode); other layers keep their own forward. The buffers cost the adapted
weights' size again (0.42 GB for SmolLM2-135M in float32), which is why the run uses it on a CPU only,
and only when they take at most a quarter of the memory the system has free (:meth:`MergedWeights.fits`).

Example::

    merged = MergedWeights(model)
    with merged.active():
        model.generate(...)
"""

from __future__ import annotations

import contextlib
from typing import Iterator

_steps_seen = 0
_hooked = False


def _optimizer_steps() -> int:
    """How many optimizer steps this process has taken since the first :class:`MergedWeights` was made."""
    global _hooked
    if not _hooked:
        from torch.optim.optimizer import register_optimizer_step_post_hook

        register_optimizer_step_post_hook(_count_step)
        _hooked = True
    return _steps_seen


def _count_step(optimizer, args, kwargs) -> None:
    global _steps_seen
    _steps_seen += 1


def _plain_lora_linear(layer) -> bool:
    """Whether ``layer`` is a LoRA ``Linear`` whose forward this module reproduces with one product."""
    import torch
    from peft.tuners.lora.layer import Linear as LoraLinear

    if not isinstance(layer, LoraLinear) or type(layer.base_layer) is not torch.nn.Linear:
        return False
    adapters = list(layer.active_adapters)
    if len(adapters) != 1 or adapters[0] not in layer.lora_A or layer.disable_adapters or layer.merged:
        return False
    name = adapters[0]
    if name in getattr(layer, "lora_variant", {}) or getattr(layer, "fan_in_fan_out", False):
        return False
    if layer.lora_B[name].bias is not None or layer.base_layer.weight.device.type != "cpu":
        return False
    dropout = layer.lora_dropout[name]
    return isinstance(dropout, torch.nn.Identity) or not dropout.training or getattr(dropout, "p", 1.0) == 0.0


def available_memory() -> int | None:
    """Bytes of memory the system has free now, None where the platform does not say."""
    import os

    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (AttributeError, ValueError, OSError):
        return None


class MergedWeights:
    """The adapted layers of ``model`` with their merged weights; ``merges`` counts the recomputations."""

    def __init__(self, model) -> None:
        _optimizer_steps()  # from now on every optimizer step is counted
        self.model = model
        self.merges = 0
        self._buffers: dict[int, object] = {}
        self._versions: dict[int, tuple] = {}

    def bytes_needed(self) -> int:
        """The memory the merged buffers take: the adapted layers' frozen weights again."""
        return sum(m.base_layer.weight.numel() * m.base_layer.weight.element_size() for m in self.layers())

    def fits(self, share: float = 0.25) -> bool:
        """Whether the buffers take at most ``share`` of the memory free now (True where that is unknown)."""
        free = available_memory()
        return free is None or self.bytes_needed() <= share * free

    def layers(self) -> list:
        """The layers :meth:`active` merges now (the model's adapters can be switched between calls)."""
        return [m for m in self.model.modules() if _plain_lora_linear(m)]

    def _merged(self, layer):
        import torch

        name = layer.active_adapters[0]
        weight, a, b = layer.base_layer.weight, layer.lora_A[name].weight, layer.lora_B[name].weight
        scale = layer.scaling[name]
        version = (_optimizer_steps(), weight._version, a._version, b._version, weight.data_ptr(), a.data_ptr(),
                   b.data_ptr(), scale)
        key = id(layer)
        buffer = self._buffers.get(key)
        if buffer is None or buffer.shape != weight.shape or buffer.dtype != weight.dtype:
            buffer = self._buffers[key] = torch.empty_like(weight, requires_grad=False)
            self._versions.pop(key, None)
        if self._versions.get(key) != version:
            with torch.no_grad():
                torch.addmm(weight, b.to(weight.dtype), a.to(weight.dtype), alpha=scale, out=buffer)
            self._versions[key] = version
            self.merges += 1
        return buffer

    @contextlib.contextmanager
    def active(self) -> Iterator[int]:
        """Inside, each adapted layer's forward is one product with its merged weight; yields how many
        layers that is. The layers get their own forward back on the way out, whatever happens."""
        import torch.nn.functional as F

        swapped = []
        try:
            for layer in self.layers():
                weight, bias = self._merged(layer), layer.base_layer.bias

                def forward(x, *args, _w=weight, _b=bias, **kwargs):
                    return F.linear(x, _w, _b)

                layer.forward = forward  # an instance attribute: nn.Module calls it before the class's
                swapped.append(layer)
            yield len(swapped)
        finally:
            for layer in swapped:
                del layer.forward


__all__ = ["MergedWeights", "available_memory"]
