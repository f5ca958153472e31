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

Where torch has oneDNN (``torch.backends.mkldnn``, in torch's CPU builds), each merged weight is also kept
in oneDNN's blocked layout for its products (``packed``), and so is the model's output layer (the LM head,
a plain ``nn.Linear``), repacked when it changes. A decode step multiplies a handful of rows by every
weight, and those skinny products run much faster on the packed layout: for the preset's 8 rows the LM
head's product took 7.4 ms instead of 18.3 and a decode step 77.5 ms instead of 114.6 (one thread,
benchmarks/decode_step.py). The packed products give the float32 results up to rounding (checked once
per process against ``F.linear``; packing stays off where the check fails or the ops are missing). A head
tied to the embedding (Gemma 3's) is packed the same way: the packed copy is the embedding matrix laid out
again, which is never written, and :meth:`MergedWeights.bytes_needed` counts it as the memory of its own it
is (0.67 GB of Gemma 3 270M's 1.07 GB; tests/test_gemma_speed_paths.py).

Example::

    merged = MergedWeights(model)
    with merged.active():
        model.generate(...)
"""

from __future__ import annotations

import contextlib
import weakref
from typing import Iterator

_steps_seen = 0
_hooked = False
_packing: bool | None = None
_per_model: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()

#: The rows oneDNN lays a packed weight out for; any number of rows can be multiplied by it (8, 64 and
#: 1,024 gave the same speed for the preset's 8-row decode products).
PACK_ROWS = 64

#: Weights smaller than this many elements keep the plain product: on the smoke preset's tiny model (64-wide
#: layers) packing made a step slower (57 against 44-48 CPU ms, benchmarks/step_time.py --runs smoke), while
#: every weight of SmolLM2-135M (the smallest 192 x 576) is above it and gains.
PACK_MIN_ELEMENTS = 65_536


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


def packing_available() -> bool:
    """Whether oneDNN's packed float32 products are here and agree with ``F.linear`` (checked once a process)."""
    global _packing
    if _packing is None:
        _packing = False
        try:
            import torch

            if torch.backends.mkldnn.is_available():
                generator = torch.Generator().manual_seed(0)
                weight = torch.randn(48, 40, generator=generator)
                bias = torch.randn(48, generator=generator)
                x = torch.randn(3, 5, 40, generator=generator)
                got = _packed_linear(x, _pack(weight), bias)
                _packing = got.shape == (3, 5, 48) and torch.allclose(got, torch.nn.functional.linear(x, weight, bias),
                                                                     rtol=1e-5, atol=1e-5)
        except Exception:  # an op missing or renamed in this torch: plain products
            _packing = False
    return _packing


def _pack(weight):
    import torch

    return torch.ops.mkldnn._reorder_linear_weight(weight, PACK_ROWS)


def _packed_linear(x, packed, bias):
    import torch

    if x.dtype != torch.float32:  # packing is done for float32 weights only; anything else takes the plain product
        return torch.nn.functional.linear(x, packed.to_dense().to(x.dtype), None if bias is None else bias.to(x.dtype))
    return torch.ops.mkldnn._linear_pointwise(x, packed, bias, "none", [], "")


def _output_layer(model):
    """The model's output layer where it is a plain float32 ``nn.Linear`` on a CPU (what packing serves), else None."""
    import torch

    get = getattr(model, "get_output_embeddings", None)
    try:
        head = get() if callable(get) else None
    except (AttributeError, NotImplementedError):
        return None
    if type(head) is not torch.nn.Linear or head.weight.device.type != "cpu" or head.weight.dtype != torch.float32 \
            or head.weight.numel() < PACK_MIN_ELEMENTS:
        return None
    return head


def available_memory() -> int | None:
    """Bytes of memory the system has free now, None where the platform does not say."""
    import os

    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (AttributeError, ValueError, OSError):
        return None


class MergedWeights:
    """The adapted layers of ``model`` with their merged weights; ``merges`` counts the recomputations and
    ``packs`` the weights laid out for oneDNN (``packed``: None = where :func:`packing_available`)."""

    def __init__(self, model, packed: bool | None = None) -> None:
        _optimizer_steps()  # from now on every optimizer step is counted
        self.model = model
        self.packed = packing_available() if packed is None else bool(packed) and packing_available()
        self.merges = 0
        self.packs = 0
        self._buffers: dict[int, object] = {}
        self._versions: dict[int, tuple] = {}
        self._scratch: dict[tuple, object] = {}

    def bytes_needed(self) -> int:
        """The memory the merged buffers take: the adapted layers' frozen weights again (and the output
        layer's when it is packed)."""
        size = sum(m.base_layer.weight.numel() * m.base_layer.weight.element_size() for m in self.layers())
        head = _output_layer(self.model) if self.packed else None
        return size + (0 if head is None else head.weight.numel() * head.weight.element_size())

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
        packed = self.packed and weight.dtype == torch.float32 and weight.numel() >= PACK_MIN_ELEMENTS
        if self._versions.get(key) != (version, packed):
            # the sum is written into a buffer of its own, or, when it is packed, into a scratch buffer shared
            # by the layers of its shape and then laid out for oneDNN (the packed copy is what is kept)
            store = self._scratch if packed else self._buffers
            slot = (tuple(weight.shape), weight.dtype) if packed else key
            # normal tensors even when the caller generates under torch.inference_mode (the evaluation does):
            # an inference tensor could not be written again by a later merge outside it
            with torch.inference_mode(False), torch.no_grad():
                buffer = store.get(slot)
                # (a layer packed before keeps a packed copy there, which cannot be written into)
                if buffer is None or buffer.layout != torch.strided or buffer.shape != weight.shape \
                        or buffer.dtype != weight.dtype:
                    buffer = store[slot] = torch.empty_like(weight, requires_grad=False)
                torch.addmm(weight, b.to(weight.dtype), a.to(weight.dtype), alpha=scale, out=buffer)
                if packed:
                    self._buffers[key] = _pack(buffer)
                    self.packs += 1
                else:
                    self._buffers[key] = buffer
            self._versions[key] = (version, packed)
            self.merges += 1
        return self._buffers[key], packed

    def _packed_head(self, head):
        """The output layer's weight laid out for oneDNN, packed again when the weight changes."""
        weight = head.weight
        steps = _optimizer_steps() if weight.requires_grad else 0  # a frozen head is packed once
        version = (steps, weight._version, weight.data_ptr())
        key = id(head)
        if self._versions.get(key) != version:
            import torch

            with torch.inference_mode(False), torch.no_grad():
                self._buffers[key] = _pack(weight.detach())
            self._versions[key] = version
            self.packs += 1
        return self._buffers[key]

    @contextlib.contextmanager
    def active(self) -> Iterator[int]:
        """Inside, each adapted layer's forward is one product with its merged weight; yields how many
        layers that is. The layers get their own forward back on the way out, whatever happens."""
        import torch.nn.functional as F

        swapped = []
        try:
            for layer in self.layers():
                (weight, packed), bias = self._merged(layer), layer.base_layer.bias

                def forward(x, *args, _w=weight, _b=bias, _product=_packed_linear if packed else F.linear, **kwargs):
                    return _product(x, _w, _b)

                layer.forward = forward  # an instance attribute: nn.Module calls it before the class's
                swapped.append(layer)
            adapted = len(swapped)
            head = _output_layer(self.model) if self.packed else None
            if head is not None and "forward" not in vars(head):
                weight, bias = self._packed_head(head), head.bias
                head.forward = lambda x, _w=weight, _b=bias: _packed_linear(x, _w, _b)
                swapped.append(head)
            yield adapted
        finally:
            for layer in swapped:
                del layer.forward


def for_model(model) -> "MergedWeights":
    """The one :class:`MergedWeights` of ``model``: the trainer's generation and the evaluation's share its
    buffers, so a run holds one merged copy of the adapted weights, not one per user."""
    merged = _per_model.get(model)
    if merged is None:
        merged = _per_model[model] = MergedWeights(model)
    return merged


def on_cpu(model) -> bool:
    """Whether ``model`` is a torch module with its weights on a CPU (where merged generation is used)."""
    import torch

    if not isinstance(model, torch.nn.Module):
        return False
    try:
        return next(model.parameters()).device.type == "cpu"
    except StopIteration:
        return False


@contextlib.contextmanager
def generating(model) -> Iterator["MergedWeights | None"]:
    """Generation through ``model``'s merged weights where it is on a CPU and they fit in memory (yields them),
    plain generation elsewhere (yields None): what the evaluation's sampling runs inside."""
    merged = for_model(model) if on_cpu(model) else None
    if merged is None or not merged.fits():
        yield None
        return
    with merged.active():
        yield merged


__all__ = ["PACK_MIN_ELEMENTS", "PACK_ROWS", "MergedWeights", "available_memory", "for_model", "generating",
           "on_cpu", "packing_available"]
