"""The GPU memory model of one GRPO step: what it holds, term by term, and its peak.

Picking ``num_generations`` by crashing is the hardest step of a GRPO run on a small card.
This module estimates the peak instead, from the model's ``config.json`` alone (nothing is
loaded; the shape comes from :mod:`unsloth_grpo.hardware.architecture`), and the planner
(:mod:`unsloth_grpo.hardware.planner`) searches the settings that fit::

    from unsloth_grpo.hardware.memory import estimate_memory

    est = estimate_memory("qwen2.5-1.5b", num_generations=8, max_completion_length=512)
    print(est.total_gb, est.breakdown)                # GiB per term, and the peak

Units: every ``*_gb`` value is GiB (2**30 bytes), the unit ``nvidia-smi`` and
``torch.cuda`` report, so an "8 GB" card is ``vram_gb=8``.

What one GRPO step holds on the GPU (TRL 1.14 ``GRPOTrainer``, Unsloth 2026.10):

- *static* terms, alive for the whole run: the weights, the LoRA adapters with their
  gradients and optimizer states, a reference model (full fine-tuning with ``beta > 0``
  only), the vLLM pool when vLLM generates, and the CUDA context;
- a *generation* phase: the KV cache and sampling buffers of ``generate`` for the whole
  generation batch (``per_device_train_batch_size x steps_per_generation`` sequences);
- a *training* phase: activations under gradient checkpointing plus the log-prob
  (logits) term for one micro-batch of ``per_device_train_batch_size`` sequences.

The two phases do not overlap (the KV cache is freed before the loss is computed), so the
peak is ``static + max(generation, training)``. ``MemoryEstimate.breakdown`` lists every
term and ``MemoryEstimate.phase_of`` says which phase each belongs to.

The estimate is a model, not a measurement: ``benchmarks/gpu_memory.py`` compares it with
``torch.cuda.max_memory_allocated`` on real architectures, and the planner keeps a safety
margin (10% of the card by default) on top of it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from unsloth_grpo.config import BACKENDS, is_transformers, is_unsloth
from unsloth_grpo.hardware.architecture import DEFAULT_LORA_TARGETS, ModelShape, lora_parameters, model_shape

GiB = 1024**3

#: Bytes of optimizer state per trainable parameter. Adam keeps two moments: 8 bytes in
#: fp32, 2 bytes with bitsandbytes' blockwise 8-bit states (plus one fp32 absmax per block
#: of 256 values per state, added in ``_optimizer_bytes``). SGD without momentum keeps none.
OPTIMIZER_STATE_BYTES = {
    "adamw_8bit": 2.0,
    "adamw_bnb_8bit": 2.0,
    "paged_adamw_8bit": 2.0,
    "adamw_torch": 8.0,
    "adamw_torch_fused": 8.0,
    "adamw_hf": 8.0,
    "paged_adamw_32bit": 8.0,
    "sgd": 0.0,
}

#: Memory the CUDA context, cuBLAS workspaces and kernels take before the first tensor
#: (not counted by ``torch.cuda.max_memory_allocated``).
CUDA_CONTEXT_GB = 0.5

#: What vLLM needs inside its pool beside weights and KV cache: activations of its own
#: forward pass, CUDA graphs and the sampler.
VLLM_OVERHEAD_GB = 1.0

#: bitsandbytes NF4 with double quantization (what Unsloth and our transformers backend
#: load): 4 bits per weight, one 8-bit absmax per block of 64 weights, and one fp32
#: absmax per 256 of those 8-bit constants.
NF4_BYTES_PER_PARAM = 0.5 + 1 / 64 + 4 / (64 * 256)


# ---------------------------------------------------------------------------- estimate


@dataclass
class MemoryEstimate:
    """Peak GPU memory of one GRPO step, with the terms it is made of (GiB)."""

    total_gb: float
    breakdown: dict[str, float]
    #: 'static', 'generation' or 'training' per term; the peak is static + the larger phase.
    phase_of: dict[str, str]
    peak_phase: str
    #: The settings the estimate was computed for, after the adjustments TRL/Unsloth make.
    settings: dict[str, Any]
    params: int
    trainable_params: int
    #: Host RAM that Unsloth's offloaded checkpointing moves out of the GPU (GiB).
    offloaded_gb: float = 0.0
    notes: list[str] = field(default_factory=list)

    def phase_total(self, phase: str) -> float:
        return sum(v for k, v in self.breakdown.items() if self.phase_of[k] == phase)

    @property
    def allocated_gb(self) -> float:
        """What ``torch.cuda.max_memory_allocated`` should show: the total minus the CUDA context."""
        return self.total_gb - self.breakdown.get("cuda_context", 0.0)

    def to_dict(self) -> dict[str, Any]:
        return {"total_gb": round(self.total_gb, 3), "allocated_gb": round(self.allocated_gb, 3),
                "peak_phase": self.peak_phase,
                "breakdown": {k: round(v, 4) for k, v in self.breakdown.items()},
                "phase_of": dict(self.phase_of), "settings": dict(self.settings), "params": self.params,
                "trainable_params": self.trainable_params, "offloaded_gb": round(self.offloaded_gb, 3),
                "notes": list(self.notes)}


def _bytes_of(dtype: str) -> int:
    if dtype in ("bf16", "fp16"):
        return 2
    if dtype == "fp32":
        return 4
    raise ValueError(f"dtype='{dtype}' must be 'bf16', 'fp16' or 'fp32'")


def _optimizer_bytes(optimizer: str, n: int) -> float:
    if optimizer not in OPTIMIZER_STATE_BYTES:
        raise ValueError(f"optimizer='{optimizer}' is not modelled; choose one of {', '.join(OPTIMIZER_STATE_BYTES)}")
    per = OPTIMIZER_STATE_BYTES[optimizer]
    if "8bit" in optimizer:
        per += 2 * 4 / 256  # one fp32 absmax per 256 values, for each of the two states
    return per * n


def weights_bytes(shape: ModelShape, *, quantization: str | None, dtype: str = "bf16",
                  backend: str = "unsloth") -> float:
    """Bytes of the frozen base weights.

    - 16-bit: ``2 x params`` (``4 x`` with ``dtype='fp32'``).
    - 4-bit NF4: the decoder's linear weights at :data:`NF4_BYTES_PER_PARAM` (0.516 bytes:
      4-bit codes + 8-bit absmax per 64 + fp32 absmax per 256 absmax); everything else
      (embedding, LM head, norms, biases, vision tower) stays 16-bit with Unsloth, and is cast
      to fp32 by PEFT's ``prepare_model_for_kbit_training`` on the transformers backend.
    - 8-bit (LLM.int8): 1 byte per linear weight plus one fp32 scale per output row; the rest
      as for 4-bit.
    """
    w = _bytes_of(dtype)
    rest = shape.embed_params + shape.lm_head_params + shape.other_decoder_params + shape.vision_params
    if quantization is None:
        return float(w * shape.total_params)
    rest_bytes = (4 if is_transformers(backend) else w) * rest
    if quantization == "4bit":
        return shape.quantizable_params * NF4_BYTES_PER_PARAM + rest_bytes
    if quantization == "8bit":
        rows = shape.num_layers * sum(o for _, o in shape.linears.values())
        return shape.quantizable_params * 1.0 + 4.0 * rows + rest_bytes
    raise ValueError(f"quantization='{quantization}' must be '4bit', '8bit' or None")


def estimate_memory(
    config: Any,
    *,
    load_in_4bit: bool = True,
    load_in_8bit: bool = False,
    lora_rank: int = 16,
    lora_targets: Any = DEFAULT_LORA_TARGETS,
    num_generations: int = 8,
    per_device_train_batch_size: int = 8,
    gradient_accumulation_steps: int = 1,
    steps_per_generation: int | None = None,
    max_prompt_length: int = 256,
    max_completion_length: int = 512,
    beta: float = 0.0,
    use_vllm: bool = False,
    gpu_memory_utilization: float | None = None,
    gpu_total_gb: float | None = None,
    vllm_standby: bool = False,
    backend: str = "unsloth",
    optimizer: str = "adamw_8bit",
    gradient_checkpointing: bool = True,
    dtype: str = "bf16",
    logits: str | None = None,
    cuda_context_gb: float = CUDA_CONTEXT_GB,
) -> MemoryEstimate:
    """Estimate the peak GPU memory of one GRPO step (TRL 1.14 ``GRPOTrainer``).

    Keyword names follow TRL's ``GRPOConfig`` and Unsloth's ``from_pretrained``. Symbols:
    ``N`` parameters, ``w`` bytes of the compute dtype (2 for bf16/fp16), ``L`` layers,
    ``H`` hidden size, ``I`` intermediate size, ``V`` vocabulary, ``q``/``kv`` the query and
    key/value widths (heads x head_dim), ``B`` sequences per micro-batch
    (``per_device_train_batch_size``), ``G`` sequences per generation round
    (``B x steps_per_generation``, which defaults to ``gradient_accumulation_steps``),
    ``P``/``C`` prompt and completion lengths, ``T = P + C``.

    Each term is computed by a function of its own, whose docstring gives its formula:

    - static: ``weights`` (:func:`weights_bytes`), ``lora`` or ``full_finetune_state``
      (:func:`_train_state_bytes`), ``reference`` (:func:`_reference_bytes`), ``vllm_pool``
      (:func:`_vllm_pool_bytes`; in the generation phase with ``vllm_standby``) and
      ``cuda_context`` (``cuda_context_gb``, 0.5 GiB: driver context, cuBLAS workspace,
      kernels; not seen by ``torch.cuda.max_memory_allocated``);
    - generation phase (only without vLLM; vLLM generates inside its pool): ``kv_cache`` and
      ``generation_buffers`` (:func:`_generation_bytes`);
    - training phase: ``activations`` (:func:`_activation_bytes`) and ``logits``
      (:func:`_logits_bytes`).

    Batch rules (:func:`_micro_batch`): TRL requires ``B x steps_per_generation`` to be a multiple of
    ``num_generations`` (ValueError otherwise); Unsloth instead raises ``B`` to
    ``num_generations``, and so does this estimate for ``backend='unsloth'`` (noted in
    ``notes``). Attention is assumed to be SDPA/flash (no ``T x T`` score matrix).
    """
    shape = config if isinstance(config, ModelShape) else model_shape(config)
    quant = _quantization(backend, load_in_4bit, load_in_8bit, lora_rank,
                          (num_generations, per_device_train_batch_size, gradient_accumulation_steps))
    full_ft = lora_rank == 0
    w = _bytes_of(dtype)
    notes: list[str] = []
    spg = steps_per_generation or gradient_accumulation_steps
    b = _micro_batch(per_device_train_batch_size, spg, num_generations, backend, notes)
    gen_batch = b * spg
    P, C = max_prompt_length, max_completion_length
    T = P + C

    weights = weights_bytes(shape, quantization=quant, dtype=dtype, backend=backend)
    trainable, train_state = _train_state_bytes(shape, lora_rank, lora_targets, optimizer, w)
    ref = _reference_bytes(shape, beta, gen_batch=gen_batch, b=b, C=C, full_ft=full_ft, w=w)
    pool = _vllm_pool_bytes(shape, weights, use_vllm=use_vllm, vllm_standby=vllm_standby,
                            gpu_memory_utilization=gpu_memory_utilization, gpu_total_gb=gpu_total_gb,
                            backend=backend, quant=quant, dtype=dtype, gen_batch=gen_batch, T=T, notes=notes)
    kv_cache, buffers = _generation_bytes(shape, gen_batch=gen_batch, P=P, T=T, w=w, quant=quant, use_vllm=use_vllm)
    acts, offloaded = _activation_bytes(shape, b=b, T=T, w=w, quant=quant, backend=backend,
                                        gradient_checkpointing=gradient_checkpointing)
    mode = logits or ("chunked" if is_unsloth(backend) else "full")
    # each term in bytes, with the phase it is alive in
    held: dict[str, tuple[float, str]] = {
        "weights": (weights, "static"),
        "full_finetune_state" if full_ft else "lora": (train_state, "static"),
        "reference": (ref, "static"),
        "vllm_pool": (pool, "generation" if vllm_standby else "static"),
        "cuda_context": (cuda_context_gb * GiB, "static"),
        "kv_cache": (kv_cache, "generation"),
        "generation_buffers": (buffers, "generation"),
        "activations": (acts, "training"),
        "logits": (_logits_bytes(shape, mode, b=b, C=C, T=T, w=w), "training"),
    }
    terms = {name: nbytes / GiB for name, (nbytes, _) in held.items()}
    phase = {name: where for name, (_, where) in held.items()}

    gen_total = sum(v for k, v in terms.items() if phase[k] == "generation")
    train_total = sum(v for k, v in terms.items() if phase[k] == "training")
    peak = "generation" if gen_total > train_total else "training"
    static = sum(v for k, v in terms.items() if phase[k] == "static")
    settings = dict(
        load_in_4bit=load_in_4bit, load_in_8bit=load_in_8bit, lora_rank=lora_rank,
        lora_targets=list(lora_targets) if not isinstance(lora_targets, str) else [lora_targets],
        num_generations=num_generations, per_device_train_batch_size=b,
        gradient_accumulation_steps=gradient_accumulation_steps, steps_per_generation=spg,
        generation_batch_size=gen_batch, max_prompt_length=P, max_completion_length=C, beta=beta,
        use_vllm=use_vllm, gpu_memory_utilization=gpu_memory_utilization, gpu_total_gb=gpu_total_gb,
        vllm_standby=vllm_standby, backend=backend, optimizer=optimizer,
        gradient_checkpointing=gradient_checkpointing, dtype=dtype, logits=mode,
    )
    return MemoryEstimate(
        total_gb=static + max(gen_total, train_total), breakdown=terms, phase_of=phase, peak_phase=peak,
        settings=settings, params=shape.total_params, trainable_params=trainable,
        offloaded_gb=offloaded / GiB, notes=notes,
    )


def _quantization(backend: str, load_in_4bit: bool, load_in_8bit: bool, lora_rank: int,
                  batch: tuple[int, int, int]) -> str | None:
    """The weights' quantization ('4bit', '8bit' or None), once the settings are known to go together.

    ``batch`` is (num_generations, per_device_train_batch_size, gradient_accumulation_steps).
    """
    if backend not in BACKENDS or backend == "auto":
        raise ValueError(f"backend='{backend}' must be 'unsloth' or 'transformers'")
    if load_in_4bit and load_in_8bit:
        raise ValueError("load_in_4bit and load_in_8bit are exclusive; pick one")
    if any(n < 1 for n in batch):
        raise ValueError("num_generations, per_device_train_batch_size and gradient_accumulation_steps must be >= 1")
    if lora_rank < 0:
        raise ValueError(f"lora_rank={lora_rank} must be >= 0 (0 = full fine-tuning)")
    quant = "4bit" if load_in_4bit else "8bit" if load_in_8bit else None
    if lora_rank == 0 and quant:
        raise ValueError("full fine-tuning (lora_rank=0) needs 16-bit weights; set load_in_4bit=False or use LoRA")
    return quant


def _micro_batch(b: int, spg: int, num_generations: int, backend: str, notes: list[str]) -> int:
    """The per-device batch the trainer runs: TRL refuses a generation batch (``b x spg``) that is not a
    multiple of ``num_generations``; Unsloth raises ``b`` to ``num_generations`` instead (noted)."""
    if (b * spg) % num_generations:
        if is_unsloth(backend):
            notes.append(f"Unsloth raises per_device_train_batch_size from {b} to num_generations={num_generations} "
                         f"because {b} x {spg} is not a multiple of it")
            return num_generations
        raise ValueError(
            f"generation batch = per_device_train_batch_size ({b}) x steps_per_generation ({spg}) "
            f"is not a multiple of num_generations ({num_generations}); make it one"
        )
    return b


def _train_state_bytes(shape: ModelShape, lora_rank: int, lora_targets: Any, optimizer: str,
                       w: int) -> tuple[int, float]:
    """The trainable parameters, and the bytes of what training keeps for them (``lora`` or
    ``full_finetune_state``).

    LoRA: adapters of ``rank x (in + out)`` per target per layer, held in fp32 (PEFT's default),
    so ``4 + 4`` bytes for weight and gradient plus the optimizer states (8 bytes for 32-bit Adam,
    ~2.06 for 8-bit Adam). ``lora_rank=0`` means full fine-tuning: ``w`` bytes of gradient and the
    optimizer states for all ``N`` parameters (16-bit weights only; there is no fp32 master copy).
    """
    if lora_rank == 0:
        trainable = shape.total_params
        return trainable, w * trainable + _optimizer_bytes(optimizer, trainable)
    trainable = lora_parameters(shape, lora_rank, lora_targets)
    return trainable, (4 + 4) * trainable + _optimizer_bytes(optimizer, trainable)


def _reference_bytes(shape: ModelShape, beta: float, *, gen_batch: int, b: int, C: int, full_ft: bool,
                     w: int) -> float:
    """The reference model's share (``beta > 0`` only).

    With LoRA TRL computes reference log-probs by disabling the adapters on the policy model, so no
    second copy of the weights exists; the term is the stored reference log-probs ``G x C x 4`` plus
    the KL buffers ``3 x B x C x 4``. Full fine-tuning loads a second model: ``+ w x N``.
    """
    ref = 0.0
    if beta > 0:
        ref = gen_batch * C * 4 + 3 * b * C * 4
        if full_ft:
            ref += w * shape.total_params
    return ref


def _vllm_pool_bytes(shape: ModelShape, weights: float, *, use_vllm: bool, vllm_standby: bool,
                     gpu_memory_utilization: float | None, gpu_total_gb: float | None, backend: str,
                     quant: str | None, dtype: str, gen_batch: int, T: int, notes: list[str]) -> float:
    """The pool vLLM reserves beside the training model (0 without vLLM); a pool too small is noted.

    ``gpu_memory_utilization x gpu_total_gb``, which vLLM reserves up front for its weights,
    activations and KV cache. With Unsloth the training model shares vLLM's weights, so the term is
    the pool minus ``weights``; with the transformers backend TRL's colocated vLLM holds its own copy
    and the whole pool counts. With ``vllm_standby`` vLLM sleeps during the training pass (Unsloth's
    standby mode, or TRL's ``vllm_enable_sleep_mode`` on the transformers backend) and gives its pool
    back, so the pool (minus the shared weights with Unsloth) counts in the generation phase instead
    of the static terms. Raises for vLLM settings that do not go together.
    """
    pool = 0.0
    if use_vllm:
        if gpu_memory_utilization is None or gpu_total_gb is None:
            raise ValueError("use_vllm=True needs gpu_memory_utilization and gpu_total_gb (vLLM reserves a share of the card)")
        pool = gpu_memory_utilization * gpu_total_gb * GiB
        vllm_weights = weights if is_unsloth(backend) else weights_bytes(shape, quantization=None, dtype=dtype)
        need = vllm_weights + _kv_bytes(shape, gen_batch, T, _bytes_of(dtype)) + VLLM_OVERHEAD_GB * GiB
        if pool < need:
            notes.append(f"vLLM pool {pool / GiB:.1f} GiB is below the {need / GiB:.1f} GiB its weights, KV cache "
                         f"and overhead need; raise gpu_memory_utilization to {vllm_utilization_for(shape, gpu_total_gb, gen_batch=gen_batch, seq_len=T, backend=backend, quantization=quant, dtype=dtype):.2f}")
        if is_unsloth(backend):
            pool = max(0.0, pool - weights)  # the training model uses vLLM's weights
    if vllm_standby and not use_vllm:
        raise ValueError("vllm_standby needs use_vllm=True (it is vLLM asleep while the model trains)")
    if use_vllm and is_transformers(backend) and quant:
        raise ValueError("the transformers backend does not pair TRL's colocated vLLM with 4-bit or 8-bit weights "
                         "(see unsloth_grpo.hardware.profiles.TRANSFORMERS_4BIT_VLLM); plan 16-bit weights")
    return pool


def _dequantized_bytes(shape: ModelShape, quant: str | None, w: int) -> float:
    """One linear weight dequantized to the compute dtype (0 with 16-bit weights)."""
    if quant:
        return max(i * o for i, o in shape.linears.values()) * w
    return 0.0


def _generation_bytes(shape: ModelShape, *, gen_batch: int, P: int, T: int, w: int, quant: str | None,
                      use_vllm: bool) -> tuple[float, float]:
    """``kv_cache`` and ``generation_buffers`` of HF ``generate`` (both 0 with vLLM: inside its pool).

    - ``kv_cache``: ``2 x G x w x kv x sum over layers of min(T, window)`` (the window is
      Gemma 3's sliding window on its local layers, else the full ``T``).
    - ``generation_buffers``: last-token logits and probabilities ``2 x G x V x 4``, the
      prefill of one layer ``G x P x (2H + 2I) x w``, and with quantized weights one
      dequantized weight ``max(in x out) x w``.
    """
    if use_vllm:
        return 0.0, 0.0
    H, I, V = shape.hidden_size, shape.intermediate_size, shape.vocab_size
    buffers = 2 * gen_batch * V * 4 + gen_batch * P * (2 * H + 2 * I) * w + _dequantized_bytes(shape, quant, w)
    return _kv_bytes(shape, gen_batch, T, w), buffers


def _activation_bytes(shape: ModelShape, *, b: int, T: int, w: int, quant: str | None, backend: str,
                      gradient_checkpointing: bool) -> tuple[float, float]:
    """``activations`` on the GPU, and the bytes Unsloth's offloaded checkpointing moves to host RAM.

    Gradient checkpointing keeps each layer's input, ``L x B x T x H x r`` (``r`` is the residual
    stream's width: ``w``, or 4 on the transformers backend with quantized weights, where
    ``prepare_model_for_kbit_training`` leaves the embedding in fp32). Unsloth's offloaded
    checkpointing (``backend='unsloth'``) moves those to host RAM and keeps about two layers' worth
    on the GPU. Both then recompute one layer in backward: ``B x T x w x ((n_norms + 2)H + 2q + 2kv +
    6I)`` (norm inputs, q/k/v, attention output, gate/up/activation products and their gradients),
    plus two dequantized weights with 4-/8-bit loading and the final hidden states
    ``2 x B x T x H x r``. Without checkpointing every layer keeps its activations: ``L x`` the
    per-layer term.
    """
    L, H, I = shape.num_layers, shape.hidden_size, shape.intermediate_size
    # PEFT's kbit preparation leaves the embedding in fp32, so the residual stream is fp32 there
    resid_w = 4 if (is_transformers(backend) and quant) else w
    per_token_layer = w * ((shape.norms_per_layer + 2) * H + 2 * shape.q_dim + 2 * shape.kv_dim + 6 * I)
    if gradient_checkpointing:
        kept_layers = 2 if is_unsloth(backend) else L
        acts = b * T * (kept_layers * H * resid_w + per_token_layer)
        offloaded = (L - kept_layers) * b * T * H * resid_w if is_unsloth(backend) else 0.0
    else:
        acts = b * T * L * (per_token_layer + H * resid_w)
        offloaded = 0.0
    acts += 2 * _dequantized_bytes(shape, quant, w) + 2 * b * T * H * resid_w
    return acts, offloaded


def _logits_bytes(shape: ModelShape, mode: str, *, b: int, C: int, T: int, w: int) -> float:
    """``logits``: what computing the completion's log-probs holds, by ``mode``.

    ``'full'`` (TRL): the LM head's output for the completion, ``B x (C + 1) x V``, held with its
    gradient, ``2 x w`` bytes per element (TRL's fused Triton log-prob kernel reads the 16-bit
    logits without an fp32 copy; under autocast the head's output is 16-bit even when its weight
    was upcast). ``'chunked'`` (Unsloth): the log-probs are computed from the hidden states in
    ``m = max(4, T // 4096)`` chunks of fp32 logits, ``(B x (C + 1) / m) x V x 4 x 2``, plus the
    hidden states and their gradient ``2 x B x (C + 1) x H x w``. :func:`estimate_memory` defaults
    to chunked for Unsloth, full otherwise.
    """
    rows = b * (C + 1)
    if mode == "full":
        return rows * shape.vocab_size * 2 * w
    if mode == "chunked":
        chunks = max(4, T // 4096)
        return math.ceil(rows / chunks) * shape.vocab_size * 4 * 2 + 2 * rows * shape.hidden_size * w
    raise ValueError(f"logits='{mode}' must be 'full', 'chunked' or None (backend default)")


def _kv_bytes(shape: ModelShape, sequences: int, seq_len: int, w: int) -> float:
    tokens = sum(seq_len if win is None else min(seq_len, win) for win in shape.layer_windows)
    return 2.0 * sequences * w * shape.kv_dim * tokens


def vllm_utilization_for(shape: ModelShape, gpu_total_gb: float, *, gen_batch: int, seq_len: int,
                         backend: str = "unsloth", quantization: str | None = "4bit", dtype: str = "bf16") -> float:
    """The smallest ``gpu_memory_utilization`` (a multiple of 0.05) whose pool holds vLLM's
    weights, the KV cache of one generation round and :data:`VLLM_OVERHEAD_GB`."""
    w = _bytes_of(dtype)
    vllm_weights = weights_bytes(shape, quantization=quantization if is_unsloth(backend) else None,
                                 dtype=dtype, backend=backend)
    need = vllm_weights + _kv_bytes(shape, gen_batch, seq_len, w) + VLLM_OVERHEAD_GB * GiB
    return math.ceil(need / (gpu_total_gb * GiB) / 0.05 - 1e-9) * 0.05
