"""GPU memory model and planner for one GRPO step: count, estimate, plan, check.

Picking ``num_generations`` by crashing is the hardest step of a GRPO run on a small card.
This module computes it instead, from the model's ``config.json`` alone (nothing is loaded)::

    from unsloth_grpo.hardware.memory import count_parameters, estimate_memory, plan

    count_parameters("qwen2.5-1.5b")                  # 1543714304, exact
    est = estimate_memory("qwen2.5-1.5b", num_generations=8, max_completion_length=512)
    print(est.total_gb, est.breakdown)                # GiB per term, and the peak
    p = plan("qwen2.5-1.5b", vram_gb=8)               # settings that fit an 8 GB card
    print(p.overrides_text())                         # training.num_generations=8 ...

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

import copy
import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from unsloth_grpo.config import BACKENDS
from unsloth_grpo.data import looks_like_path
from unsloth_grpo.hardware.profiles import (
    HardwareError,
    choice_for_config,
    from_gpu,
    standby_utilization,
    training_dtype,
)

GiB = 1024**3

#: Architectures whose parameter count is exact here, keyed by ``config.json``'s ``model_type``.
SUPPORTED_MODEL_TYPES = ("llama", "mistral", "qwen2", "qwen3", "gemma3_text", "gemma3", "phi3")

#: The LoRA targets Unsloth's notebooks use: every linear layer of the decoder blocks.
DEFAULT_LORA_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")

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

#: Card sizes of the preset table, in GiB, and the compute capability assumed for each
#: (16 GB is the T4 of Colab and Kaggle: 7.5, no bf16; the others Ampere or newer).
PRESET_CARDS: dict[int, tuple[str, float]] = {
    6: ("6 GB", 8.6),
    8: ("8 GB", 8.6),
    12: ("12 GB", 8.6),
    16: ("16 GB (T4)", 7.5),
    24: ("24 GB", 8.6),
    48: ("48 GB", 8.6),
    80: ("80 GB", 8.0),
}


class UnknownModelError(ValueError):
    """The model name is neither a local config, a built-in config nor a supported type."""


# ---------------------------------------------------------------------------- built-in configs
#
# The architecture fields of each model's public config.json on the Hugging Face hub, so that
# ``plan --model qwen2.5-1.5b`` works offline. Only fields that change the parameter count,
# the KV cache or the length limits are kept.

_QWEN25 = dict(model_type="qwen2", vocab_size=151936, max_position_embeddings=32768, rms_norm_eps=1e-6)
_LLAMA3 = dict(model_type="llama", vocab_size=128256, max_position_embeddings=131072, rms_norm_eps=1e-5,
               attention_bias=False, mlp_bias=False)
_QWEN3 = dict(model_type="qwen3", vocab_size=151936, max_position_embeddings=40960, head_dim=128,
              attention_bias=False, rms_norm_eps=1e-6)

BUILTIN_CONFIGS: dict[str, dict[str, Any]] = {
    # https://huggingface.co/Qwen/Qwen2.5-0.5B-Instruct/blob/main/config.json
    "qwen2.5-0.5b": dict(_QWEN25, hidden_size=896, intermediate_size=4864, num_hidden_layers=24,
                         num_attention_heads=14, num_key_value_heads=2, tie_word_embeddings=True),
    # https://huggingface.co/Qwen/Qwen2.5-1.5B-Instruct/blob/main/config.json
    "qwen2.5-1.5b": dict(_QWEN25, hidden_size=1536, intermediate_size=8960, num_hidden_layers=28,
                         num_attention_heads=12, num_key_value_heads=2, tie_word_embeddings=True),
    # https://huggingface.co/Qwen/Qwen2.5-3B-Instruct/blob/main/config.json
    "qwen2.5-3b": dict(_QWEN25, hidden_size=2048, intermediate_size=11008, num_hidden_layers=36,
                       num_attention_heads=16, num_key_value_heads=2, tie_word_embeddings=True),
    # https://huggingface.co/Qwen/Qwen2.5-7B-Instruct/blob/main/config.json
    "qwen2.5-7b": dict(_QWEN25, vocab_size=152064, hidden_size=3584, intermediate_size=18944,
                       num_hidden_layers=28, num_attention_heads=28, num_key_value_heads=4,
                       tie_word_embeddings=False),
    # https://huggingface.co/meta-llama/Llama-3.2-1B-Instruct/blob/main/config.json
    "llama-3.2-1b": dict(_LLAMA3, hidden_size=2048, intermediate_size=8192, num_hidden_layers=16,
                         num_attention_heads=32, num_key_value_heads=8, head_dim=64, tie_word_embeddings=True),
    # https://huggingface.co/meta-llama/Llama-3.2-3B-Instruct/blob/main/config.json
    "llama-3.2-3b": dict(_LLAMA3, hidden_size=3072, intermediate_size=8192, num_hidden_layers=28,
                         num_attention_heads=24, num_key_value_heads=8, head_dim=128, tie_word_embeddings=True),
    # https://huggingface.co/meta-llama/Llama-3.1-8B-Instruct/blob/main/config.json
    "llama-3.1-8b": dict(_LLAMA3, hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
                         num_attention_heads=32, num_key_value_heads=8, head_dim=128, tie_word_embeddings=False),
    # https://huggingface.co/Qwen/Qwen3-4B/blob/main/config.json
    "qwen3-4b": dict(_QWEN3, hidden_size=2560, intermediate_size=9728, num_hidden_layers=36,
                     num_attention_heads=32, num_key_value_heads=8, tie_word_embeddings=True),
    # https://huggingface.co/Qwen/Qwen3-8B/blob/main/config.json
    "qwen3-8b": dict(_QWEN3, hidden_size=4096, intermediate_size=12288, num_hidden_layers=36,
                     num_attention_heads=32, num_key_value_heads=8, tie_word_embeddings=False),
    # https://huggingface.co/google/gemma-3-1b-it/blob/main/config.json
    "gemma-3-1b": dict(model_type="gemma3_text", vocab_size=262144, hidden_size=1152, intermediate_size=6912,
                       num_hidden_layers=26, num_attention_heads=4, num_key_value_heads=1, head_dim=256,
                       max_position_embeddings=32768, sliding_window=512, sliding_window_pattern=6,
                       attention_bias=False, tie_word_embeddings=True, rms_norm_eps=1e-6),
    # https://huggingface.co/google/gemma-3-4b-it/blob/main/config.json (text + SigLIP vision tower)
    "gemma-3-4b": dict(
        model_type="gemma3",
        mm_tokens_per_image=256,
        text_config=dict(model_type="gemma3_text", vocab_size=262208, hidden_size=2560, intermediate_size=10240,
                         num_hidden_layers=34, num_attention_heads=8, num_key_value_heads=4, head_dim=256,
                         max_position_embeddings=131072, sliding_window=1024, sliding_window_pattern=6,
                         rms_norm_eps=1e-6),
        vision_config=dict(model_type="siglip_vision_model", hidden_size=1152, intermediate_size=4304,
                           num_hidden_layers=27, num_attention_heads=16, num_channels=3, image_size=896,
                           patch_size=14, vision_use_head=False),
    ),
    # https://huggingface.co/microsoft/Phi-3-mini-4k-instruct/blob/main/config.json
    "phi-3-mini": dict(model_type="phi3", vocab_size=32064, hidden_size=3072, intermediate_size=8192,
                       num_hidden_layers=32, num_attention_heads=32, num_key_value_heads=32,
                       max_position_embeddings=4096, tie_word_embeddings=False, rms_norm_eps=1e-5),
}

#: Hub id of the model each built-in config was typed from (the instruct variant).
BUILTIN_HUB_IDS = {
    "qwen2.5-0.5b": "Qwen/Qwen2.5-0.5B-Instruct",
    "qwen2.5-1.5b": "Qwen/Qwen2.5-1.5B-Instruct",
    "qwen2.5-3b": "Qwen/Qwen2.5-3B-Instruct",
    "qwen2.5-7b": "Qwen/Qwen2.5-7B-Instruct",
    "llama-3.2-1b": "meta-llama/Llama-3.2-1B-Instruct",
    "llama-3.2-3b": "meta-llama/Llama-3.2-3B-Instruct",
    "llama-3.1-8b": "meta-llama/Llama-3.1-8B-Instruct",
    "qwen3-4b": "Qwen/Qwen3-4B",
    "qwen3-8b": "Qwen/Qwen3-8B",
    "gemma-3-1b": "google/gemma-3-1b-it",
    "gemma-3-4b": "google/gemma-3-4b-it",
    "phi-3-mini": "microsoft/Phi-3-mini-4k-instruct",
}

# Suffixes that name a variant with the same architecture (instruct tuning, a quantized upload).
_VARIANT_SUFFIXES = ("-unsloth-bnb-4bit", "-bnb-4bit", "-instruct-2507", "-thinking-2507", "-instruct",
                     "-4k", "-128k", "-base", "-it", "-pt")


def builtin_model_names() -> list[str]:
    """Names ``--model`` accepts without a path, smallest model first."""
    return sorted(BUILTIN_CONFIGS, key=lambda k: model_shape(BUILTIN_CONFIGS[k]).total_params)


def _builtin_key(name: str) -> str | None:
    """Map 'qwen2.5-1.5b', 'Qwen/Qwen2.5-1.5B-Instruct' or 'unsloth/...-bnb-4bit' to a key."""
    key = name.strip().split("/")[-1].lower()
    if key.startswith("meta-llama-"):
        key = key[len("meta-"):]
    changed = True
    while changed:
        changed = False
        for suffix in _VARIANT_SUFFIXES:
            if key.endswith(suffix):
                key = key[: -len(suffix)]
                changed = True
    return key if key in BUILTIN_CONFIGS else None


def _tiny_config() -> dict[str, Any]:
    """The architecture of ``builtin:tiny`` (vocabulary: the tiny tokenizer's 512 + 7 added)."""
    from unsloth_grpo.testing import FORMAT_TOKENS, TINY_MODEL_KWARGS

    kw = {k: v for k, v in TINY_MODEL_KWARGS.items() if k != "initializer_range"}
    return dict(model_type="qwen2", vocab_size=512 + len(FORMAT_TOKENS), **kw)


def load_model_config(config_or_path: Any) -> dict[str, Any]:
    """A model config as a plain dict, from any of the forms the planner accepts.

    - a transformers config object (anything with ``to_dict()``) or a mapping;
    - a path to a ``config.json`` or to a directory holding one;
    - a built-in name (``qwen2.5-1.5b``) or a hub id of such a model
      (``Qwen/Qwen2.5-1.5B-Instruct``, ``unsloth/Qwen2.5-1.5B-Instruct-bnb-4bit``);
    - ``builtin:tiny``, the tiny offline test model.

    Never reaches the network: an unknown hub id raises :class:`UnknownModelError` naming
    the built-in models and how to pass a local config instead.
    """
    if hasattr(config_or_path, "to_dict"):
        return config_or_path.to_dict()
    if isinstance(config_or_path, Mapping):
        return copy.deepcopy(dict(config_or_path))
    if not isinstance(config_or_path, (str, os.PathLike)):
        raise TypeError(f"expected a config object, dict or path, got {type(config_or_path).__name__}")
    text = str(config_or_path)
    if text in ("builtin:tiny", "builtin:tiny-tools"):  # same architecture
        return _tiny_config()
    path = Path(text).expanduser()
    if path.is_dir():
        path = path / "config.json"
        if not path.exists():
            raise UnknownModelError(f"'{text}' is a directory without a config.json")
    if path.is_file():
        try:
            return json.loads(path.read_text())
        except json.JSONDecodeError as exc:
            raise UnknownModelError(f"'{path}' is not valid JSON: {exc}") from None
    if looks_like_path(text):
        raise UnknownModelError(f"'{text}' does not exist; pass an existing model directory or config.json")
    key = _builtin_key(text)
    if key is not None:
        return copy.deepcopy(BUILTIN_CONFIGS[key])
    raise UnknownModelError(
        f"model '{text}' is not a local config.json or directory, nor a built-in model "
        f"({', '.join(sorted(BUILTIN_CONFIGS))}); download its config.json and pass the path"
    )


def model_display_name(config_or_path: Any) -> str:
    """A short name for tables: the built-in key, the directory name, or the model type."""
    if isinstance(config_or_path, (str, os.PathLike)):
        text = str(config_or_path)
        key = _builtin_key(text) if not looks_like_path(text) else None
        if key:
            return key
        path = Path(text)
        return path.parent.name if path.name == "config.json" else path.name
    cfg = load_model_config(config_or_path)
    return str(cfg.get("_name_or_path") or cfg.get("model_type", "model"))


# ---------------------------------------------------------------------------- architecture

# transformers 5.17's defaults for fields a config.json may leave out, per model type.
_DEFAULTS: dict[str, dict[str, Any]] = {
    "llama": dict(num_key_value_heads=None, head_dim=None, tie_word_embeddings=False,
                  attention_bias=False, mlp_bias=False),
    "mistral": dict(num_key_value_heads=8, head_dim=None, tie_word_embeddings=False),
    "qwen2": dict(num_key_value_heads=32, tie_word_embeddings=False),
    "qwen3": dict(num_key_value_heads=32, head_dim=128, tie_word_embeddings=False, attention_bias=False),
    "gemma3_text": dict(num_key_value_heads=4, head_dim=256, tie_word_embeddings=True, attention_bias=False,
                        sliding_window=4096, sliding_window_pattern=6),
    "phi3": dict(num_key_value_heads=None, tie_word_embeddings=False),
}
_SIGLIP_DEFAULTS = dict(hidden_size=768, intermediate_size=3072, num_hidden_layers=12, num_attention_heads=12,
                        num_channels=3, image_size=224, patch_size=16, vision_use_head=True)


@dataclass(frozen=True)
class ModelShape:
    """The numbers of an architecture that memory depends on (text decoder unless noted)."""

    model_type: str
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    tie_word_embeddings: bool
    max_position_embeddings: int | None
    #: ``in_features, out_features`` of each linear layer in one decoder block, by module name.
    linears: dict[str, tuple[int, int]]
    #: Attention window per layer (None = full attention), for the KV cache.
    layer_windows: tuple[int | None, ...]
    #: RMSNorms per decoder block (2, or 4 for Gemma 3) and whether q/k are normed per head.
    norms_per_layer: int
    embed_params: int
    lm_head_params: int
    #: Weights of the decoder blocks' linear layers: what 4-bit and 8-bit loading quantize.
    quantizable_params: int
    #: Norms, biases and q/k norms of the decoder (kept in 16-bit by quantized loading).
    other_decoder_params: int
    #: Vision tower and projector of a multimodal checkpoint (0 for text models).
    vision_params: int

    @property
    def total_params(self) -> int:
        return (self.embed_params + self.lm_head_params + self.quantizable_params
                + self.other_decoder_params + self.vision_params)

    @property
    def q_dim(self) -> int:
        return self.num_heads * self.head_dim

    @property
    def kv_dim(self) -> int:
        return self.num_kv_heads * self.head_dim


def _get(cfg: Mapping[str, Any], key: str, defaults: Mapping[str, Any], fallback: Any = None) -> Any:
    if key in cfg and cfg[key] is not None:
        return cfg[key]
    value = defaults.get(key, fallback)
    return fallback if value is None else value


def _siglip_params(v: Mapping[str, Any]) -> int:
    """Parameters of transformers' ``SiglipVisionModel`` built from a vision config."""
    g = lambda k: _get(v, k, _SIGLIP_DEFAULTS)  # noqa: E731
    h, i, n = g("hidden_size"), g("intermediate_size"), g("num_hidden_layers")
    patch, image, channels = g("patch_size"), g("image_size"), g("num_channels")
    positions = (image // patch) ** 2
    embeddings = h * channels * patch * patch + h + positions * h  # conv weight + bias, positions
    layer = 4 * (h * h + h) + (h * i + i) + (i * h + h) + 2 * (2 * h)  # q k v out, fc1, fc2, 2 LayerNorms
    params = embeddings + n * layer + 2 * h  # post_layernorm
    if v.get("vision_use_head", _SIGLIP_DEFAULTS["vision_use_head"]):
        # attention-pooling head: probe, MultiheadAttention (in_proj 3h x h + bias, out_proj), LayerNorm, MLP
        params += h + (3 * h * h + 3 * h) + (h * h + h) + 2 * h + (h * i + i) + (i * h + h)
    return params


def model_shape(config_or_path: Any) -> ModelShape:
    """Derive :class:`ModelShape` from a config without building the model.

    Raises :class:`UnknownModelError` for a ``model_type`` outside :data:`SUPPORTED_MODEL_TYPES`.
    """
    cfg = load_model_config(config_or_path)
    model_type = cfg.get("model_type")
    vision_params = 0
    tie_default = None
    if model_type == "gemma3":
        text = dict(cfg.get("text_config") or {})
        text.setdefault("model_type", "gemma3_text")
        vision = dict(cfg.get("vision_config") or {})
        projector = _get(vision, "hidden_size", _SIGLIP_DEFAULTS) * (_get(text, "hidden_size", {}) or 0)
        vision_params = _siglip_params(vision) + projector + _get(vision, "hidden_size", _SIGLIP_DEFAULTS)
        # The multimodal model ties its head to the text embedding through the top-level flag.
        tie_default = cfg.get("tie_word_embeddings", True)
        cfg = text
        model_type = "gemma3_text"
    if model_type not in _DEFAULTS:
        raise UnknownModelError(
            f"model_type '{model_type}' is not supported by the memory planner; supported: "
            f"{', '.join(SUPPORTED_MODEL_TYPES)}"
        )
    d = _DEFAULTS[model_type]
    try:
        vocab, h, inter = int(cfg["vocab_size"]), int(cfg["hidden_size"]), int(cfg["intermediate_size"])
        n_layers, n_heads = int(cfg["num_hidden_layers"]), int(cfg["num_attention_heads"])
    except KeyError as exc:
        raise UnknownModelError(f"config of model_type '{model_type}' lacks the field {exc.args[0]}") from None
    n_kv = int(_get(cfg, "num_key_value_heads", d, n_heads))
    head_dim = int(_get(cfg, "head_dim", d, h // n_heads))
    tie = bool(tie_default if tie_default is not None else _get(cfg, "tie_word_embeddings", d, False))
    q, kv = n_heads * head_dim, n_kv * head_dim

    bias = 0  # per decoder block
    norms = 2
    if model_type == "phi3":
        linears = {"qkv_proj": (h, q + 2 * kv), "o_proj": (q, h), "gate_up_proj": (h, 2 * inter),
                   "down_proj": (inter, h)}
    else:
        linears = {"q_proj": (h, q), "k_proj": (h, kv), "v_proj": (h, kv), "o_proj": (q, h),
                   "gate_proj": (h, inter), "up_proj": (h, inter), "down_proj": (inter, h)}
    if model_type == "qwen2":
        bias += q + 2 * kv  # q, k and v carry a bias in every Qwen2 checkpoint; o does not
    if model_type in ("llama", "qwen3", "gemma3_text") and _get(cfg, "attention_bias", d, False):
        bias += q + 2 * kv + h
    if model_type == "llama" and _get(cfg, "mlp_bias", d, False):
        bias += 2 * inter + h
    qk_norm = 0
    if model_type in ("qwen3", "gemma3_text"):
        qk_norm = 2 * head_dim  # q_norm and k_norm, one weight per head dimension
    if model_type == "gemma3_text":
        norms = 4  # input, post-attention, pre- and post-feedforward
    per_layer_linear = sum(i * o for i, o in linears.values())
    other = n_layers * (bias + qk_norm + norms * h) + h  # + the final norm

    windows: list[int | None] = [None] * n_layers
    if model_type == "gemma3_text":
        layer_types = cfg.get("layer_types")
        if not layer_types:
            pattern = int(_get(cfg, "sliding_window_pattern", d, 6) or 6)
            layer_types = ["full_attention" if (i + 1) % pattern == 0 else "sliding_attention"
                           for i in range(n_layers)]
        window = int(_get(cfg, "sliding_window", d, 4096))
        windows = [window if t == "sliding_attention" else None for t in layer_types]

    return ModelShape(
        model_type=model_type if tie_default is None else "gemma3",
        vocab_size=vocab, hidden_size=h, intermediate_size=inter, num_layers=n_layers,
        num_heads=n_heads, num_kv_heads=n_kv, head_dim=head_dim, tie_word_embeddings=tie,
        max_position_embeddings=cfg.get("max_position_embeddings"),
        linears=linears, layer_windows=tuple(windows), norms_per_layer=norms,
        embed_params=vocab * h, lm_head_params=0 if tie else vocab * h,
        quantizable_params=n_layers * per_layer_linear, other_decoder_params=other,
        vision_params=vision_params,
    )


def count_parameters(config_or_path: Any) -> int:
    """Exact parameter count of ``AutoModelForCausalLM.from_config(config)``, for any architecture.

    For the planner's own types (:data:`SUPPORTED_MODEL_TYPES`) its formulas give the number at
    once, offline and without transformers (the tests check them against the real models built
    on the meta device); any other architecture transformers knows is built on the meta device
    (``accelerate.init_empty_weights``: shapes, no memory) and counted. The formulas count the embedding, the LM head unless tied to it, q/k/v/o with grouped-query heads
    and an explicit ``head_dim``, the gated MLP (Phi-3's fused ``qkv_proj``/``gate_up_proj``),
    every RMSNorm (Qwen3's and Gemma 3's per-head q/k norms, Gemma 3's four norms per block),
    the biases an architecture has (Qwen2's q/k/v bias, Llama's optional ones), and for a
    multimodal ``gemma3`` config the SigLIP vision tower and projector as well.

    >>> count_parameters("qwen2.5-0.5b")
    494032768
    """
    cfg = load_model_config(config_or_path)
    try:
        return model_shape(cfg).total_params  # exact for the supported types, and instant
    except UnknownModelError:
        counted = meta_parameter_count(cfg)
        if counted is None:
            raise
        return counted


def meta_parameter_count(config: Mapping[str, Any]) -> int | None:
    """Parameters of the transformers model for ``config``, built on the meta device; None when
    transformers/accelerate are missing or do not know the architecture."""
    try:
        from accelerate import init_empty_weights
        from transformers import AutoConfig, AutoModelForCausalLM
    except ImportError:
        return None
    cfg = dict(config)
    try:
        hf_config = AutoConfig.for_model(cfg.pop("model_type", None), **cfg)
        with init_empty_weights():
            model = AutoModelForCausalLM.from_config(hf_config)
    except (ValueError, KeyError, TypeError):  # an unknown model_type, or a config it cannot build
        return None
    model.tie_weights()  # on the meta device a tied head is a second tensor until tied again
    return sum(p.numel() for p in model.parameters())


# ---------------------------------------------------------------------------- LoRA


def lora_targets_for(shape: ModelShape, targets: Any = DEFAULT_LORA_TARGETS) -> list[str]:
    """Resolve LoRA target names to this architecture's linear layers.

    ``'all-linear'`` means every linear of a block. On Phi-3, ``q_proj``/``k_proj``/``v_proj``
    map onto the fused ``qkv_proj`` and ``gate_proj``/``up_proj`` onto ``gate_up_proj``.
    """
    if isinstance(targets, str):
        targets = [targets]
    names = list(targets)
    if names == ["all-linear"]:
        return list(shape.linears)
    fused = {"q_proj": "qkv_proj", "k_proj": "qkv_proj", "v_proj": "qkv_proj",
             "gate_proj": "gate_up_proj", "up_proj": "gate_up_proj"}
    out: list[str] = []
    for name in names:
        real = name if name in shape.linears else fused.get(name) if "qkv_proj" in shape.linears else None
        if real is None or real not in shape.linears:
            raise ValueError(
                f"LoRA target '{name}' is not a linear layer of this {shape.model_type} model; "
                f"valid: {', '.join(shape.linears)} or 'all-linear'"
            )
        if real not in out:
            out.append(real)
    return out


def lora_parameters(config_or_path: Any, rank: int, targets: Any = DEFAULT_LORA_TARGETS) -> int:
    """LoRA parameters: ``rank x (in + out)`` per targeted linear, summed over all blocks."""
    shape = config_or_path if isinstance(config_or_path, ModelShape) else model_shape(config_or_path)
    per_layer = sum(rank * sum(shape.linears[t]) for t in lora_targets_for(shape, targets))
    return shape.num_layers * per_layer


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
    rest_bytes = (4 if backend == "transformers" else w) * rest
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

    Static terms:

    - ``weights``: see :func:`weights_bytes` (16-bit, NF4 with its constants, or 8-bit).
    - ``lora``: adapters of ``rank x (in + out)`` per target per layer, held in fp32 (PEFT's
      default), so ``4 + 4`` bytes for weight and gradient plus the optimizer states
      (8 bytes for 32-bit Adam, ~2.06 for 8-bit Adam). ``lora_rank=0`` means full
      fine-tuning: ``w`` bytes of gradient and the optimizer states for all ``N``
      parameters (16-bit weights only; there is no fp32 master copy).
    - ``reference``: with LoRA TRL computes reference log-probs by disabling the adapters on
      the policy model, so no second copy of the weights exists; the term is the stored
      reference log-probs ``G x C x 4`` plus the KL buffers ``3 x B x C x 4``. Full
      fine-tuning with ``beta > 0`` loads a second model: ``+ w x N``.
    - ``vllm_pool``: ``gpu_memory_utilization x gpu_total_gb``, which vLLM reserves up front
      for its weights, activations and KV cache. With Unsloth the training model shares
      vLLM's weights, so the term is the pool minus ``weights``; with the transformers
      backend TRL's colocated vLLM holds its own copy and the whole pool counts. With
      ``vllm_standby`` vLLM sleeps during the training pass (Unsloth's standby mode, or TRL's
      ``vllm_enable_sleep_mode`` on the transformers backend) and gives its pool back, so the
      pool (minus the shared weights with Unsloth) counts in the generation phase instead of
      the static terms.
    - ``cuda_context``: ``cuda_context_gb`` (0.5 GiB): driver context, cuBLAS workspace,
      kernels. Not seen by ``torch.cuda.max_memory_allocated``.

    Generation phase (only without vLLM; vLLM generates inside its pool):

    - ``kv_cache``: ``2 x G x w x kv x sum over layers of min(T, window)`` (the window is
      Gemma 3's sliding window on its local layers, else the full ``T``).
    - ``generation_buffers``: last-token logits and probabilities ``2 x G x V x 4``, the
      prefill of one layer ``G x P x (2H + 2I) x w``, and with quantized weights one
      dequantized weight ``max(in x out) x w``.

    Training phase:

    - ``activations``: gradient checkpointing keeps each layer's input, ``L x B x T x H x r``
      (``r`` is the residual stream's width: ``w``, or 4 on the transformers backend with
      quantized weights, where ``prepare_model_for_kbit_training`` leaves the embedding in
      fp32). Unsloth's offloaded checkpointing (``backend='unsloth'``) moves those to host
      RAM and keeps about two layers' worth on the GPU. Both then recompute one layer in
      backward: ``B x T x w x ((n_norms + 2)H + 2q + 2kv + 6I)`` (norm inputs, q/k/v,
      attention output, gate/up/activation products and their gradients), plus two
      dequantized weights with 4-/8-bit loading and the final hidden states
      ``2 x B x T x H x r``. Without checkpointing every layer keeps its activations:
      ``L x`` the per-layer term.
    - ``logits``: ``logits='full'`` (TRL): the LM head's output for the completion,
      ``B x (C + 1) x V``, held with its gradient, ``2 x w`` bytes per element (TRL's fused
      Triton log-prob kernel reads the 16-bit logits without an fp32 copy; under autocast
      the head's output is 16-bit even when its weight was upcast). ``logits='chunked'``
      (Unsloth): the log-probs are computed from the hidden states in
      ``m = max(4, T // 4096)`` chunks of fp32 logits, ``(B x (C + 1) / m) x V x 4 x 2``,
      plus the hidden states and their gradient ``2 x B x (C + 1) x H x w``. Default:
      chunked for Unsloth, full otherwise.

    Batch rules: TRL requires ``B x steps_per_generation`` to be a multiple of
    ``num_generations`` (ValueError otherwise); Unsloth instead raises ``B`` to
    ``num_generations``, and so does this estimate for ``backend='unsloth'`` (noted in
    ``notes``). Attention is assumed to be SDPA/flash (no ``T x T`` score matrix).
    """
    shape = config if isinstance(config, ModelShape) else model_shape(config)
    if backend not in BACKENDS or backend == "auto":
        raise ValueError(f"backend='{backend}' must be 'unsloth' or 'transformers'")
    if load_in_4bit and load_in_8bit:
        raise ValueError("load_in_4bit and load_in_8bit are exclusive; pick one")
    if num_generations < 1 or per_device_train_batch_size < 1 or gradient_accumulation_steps < 1:
        raise ValueError("num_generations, per_device_train_batch_size and gradient_accumulation_steps must be >= 1")
    if lora_rank < 0:
        raise ValueError(f"lora_rank={lora_rank} must be >= 0 (0 = full fine-tuning)")
    full_ft = lora_rank == 0
    quant = "4bit" if load_in_4bit else "8bit" if load_in_8bit else None
    if full_ft and quant:
        raise ValueError("full fine-tuning (lora_rank=0) needs 16-bit weights; set load_in_4bit=False or use LoRA")
    w = _bytes_of(dtype)
    notes: list[str] = []

    spg = steps_per_generation or gradient_accumulation_steps
    b = per_device_train_batch_size
    if (b * spg) % num_generations:
        if backend == "unsloth":
            notes.append(f"Unsloth raises per_device_train_batch_size from {b} to num_generations={num_generations} "
                         f"because {b} x {spg} is not a multiple of it")
            b = num_generations
        else:
            raise ValueError(
                f"generation batch = per_device_train_batch_size ({b}) x steps_per_generation ({spg}) "
                f"is not a multiple of num_generations ({num_generations}); make it one"
            )
    gen_batch = b * spg
    P, C = max_prompt_length, max_completion_length
    T = P + C
    L, H, I, V = shape.num_layers, shape.hidden_size, shape.intermediate_size, shape.vocab_size
    q, kv = shape.q_dim, shape.kv_dim

    terms: dict[str, float] = {}
    phase: dict[str, str] = {}

    def add(name: str, nbytes: float, where: str) -> None:
        terms[name] = nbytes / GiB
        phase[name] = where

    # --- static
    weights = weights_bytes(shape, quantization=quant, dtype=dtype, backend=backend)
    if full_ft:
        trainable = shape.total_params
        train_state = w * trainable + _optimizer_bytes(optimizer, trainable)
    else:
        trainable = lora_parameters(shape, lora_rank, lora_targets)
        train_state = (4 + 4) * trainable + _optimizer_bytes(optimizer, trainable)
    ref = 0.0
    if beta > 0:
        ref = gen_batch * C * 4 + 3 * b * C * 4
        if full_ft:
            ref += w * shape.total_params
    pool = 0.0
    if use_vllm:
        if gpu_memory_utilization is None or gpu_total_gb is None:
            raise ValueError("use_vllm=True needs gpu_memory_utilization and gpu_total_gb (vLLM reserves a share of the card)")
        pool = gpu_memory_utilization * gpu_total_gb * GiB
        vllm_weights = weights if backend == "unsloth" else weights_bytes(shape, quantization=None, dtype=dtype)
        need = vllm_weights + _kv_bytes(shape, gen_batch, T, w) + VLLM_OVERHEAD_GB * GiB
        if pool < need:
            notes.append(f"vLLM pool {pool / GiB:.1f} GiB is below the {need / GiB:.1f} GiB its weights, KV cache "
                         f"and overhead need; raise gpu_memory_utilization to {vllm_utilization_for(shape, gpu_total_gb, gen_batch=gen_batch, seq_len=T, backend=backend, quantization=quant, dtype=dtype):.2f}")
        if backend == "unsloth":
            pool = max(0.0, pool - weights)  # the training model uses vLLM's weights
    if vllm_standby and not use_vllm:
        raise ValueError("vllm_standby needs use_vllm=True (it is vLLM asleep while the model trains)")
    if use_vllm and backend == "transformers" and quant:
        raise ValueError("the transformers backend does not pair TRL's colocated vLLM with 4-bit or 8-bit weights "
                         "(see unsloth_grpo.hardware.profiles.TRANSFORMERS_4BIT_VLLM); plan 16-bit weights")
    add("weights", weights, "static")
    add("full_finetune_state" if full_ft else "lora", train_state, "static")
    add("reference", ref, "static")
    add("vllm_pool", pool, "generation" if vllm_standby else "static")
    add("cuda_context", cuda_context_gb * GiB, "static")

    # --- generation (HF generate; vLLM generates inside its pool)
    dequant = 0.0
    if quant:
        dequant = max(i * o for i, o in shape.linears.values()) * w
    if use_vllm:
        add("kv_cache", 0.0, "generation")  # inside the pool
        add("generation_buffers", 0.0, "generation")
    else:
        add("kv_cache", _kv_bytes(shape, gen_batch, T, w), "generation")
        add("generation_buffers", 2 * gen_batch * V * 4 + gen_batch * P * (2 * H + 2 * I) * w + dequant,
            "generation")

    # --- training
    # PEFT's kbit preparation leaves the embedding in fp32, so the residual stream is fp32 there
    resid_w = 4 if (backend == "transformers" and quant) else w
    per_token_layer = w * ((shape.norms_per_layer + 2) * H + 2 * q + 2 * kv + 6 * I)
    if gradient_checkpointing:
        kept_layers = 2 if backend == "unsloth" else L
        acts = b * T * (kept_layers * H * resid_w + per_token_layer)
        offloaded = (L - kept_layers) * b * T * H * resid_w if backend == "unsloth" else 0.0
    else:
        acts = b * T * L * (per_token_layer + H * resid_w)
        offloaded = 0.0
    acts += 2 * dequant + 2 * b * T * H * resid_w
    add("activations", acts, "training")

    mode = logits or ("chunked" if backend == "unsloth" else "full")
    rows = b * (C + 1)
    if mode == "full":
        add("logits", rows * V * 2 * w, "training")
    elif mode == "chunked":
        chunks = max(4, T // 4096)
        add("logits", math.ceil(rows / chunks) * V * 4 * 2 + 2 * rows * H * w, "training")
    else:
        raise ValueError(f"logits='{logits}' must be 'full', 'chunked' or None (backend default)")

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


def _kv_bytes(shape: ModelShape, sequences: int, seq_len: int, w: int) -> float:
    tokens = sum(seq_len if win is None else min(seq_len, win) for win in shape.layer_windows)
    return 2.0 * sequences * w * shape.kv_dim * tokens


def vllm_utilization_for(shape: ModelShape, gpu_total_gb: float, *, gen_batch: int, seq_len: int,
                         backend: str = "unsloth", quantization: str | None = "4bit", dtype: str = "bf16") -> float:
    """The smallest ``gpu_memory_utilization`` (a multiple of 0.05) whose pool holds vLLM's
    weights, the KV cache of one generation round and :data:`VLLM_OVERHEAD_GB`."""
    w = _bytes_of(dtype)
    vllm_weights = weights_bytes(shape, quantization=quantization if backend == "unsloth" else None,
                                 dtype=dtype, backend=backend)
    need = vllm_weights + _kv_bytes(shape, gen_batch, seq_len, w) + VLLM_OVERHEAD_GB * GiB
    return math.ceil(need / (gpu_total_gb * GiB) / 0.05 - 1e-9) * 0.05


# ---------------------------------------------------------------------------- planner

#: Search space of the planner, most wanted first. ``plan`` caps it with ``max_generations``
#: (default 8, TRL's default group) and ``max_completion_length`` (default 1024).
PLAN_GENERATIONS = (16, 12, 8, 6, 4, 2)
PLAN_COMPLETIONS = (2048, 1024, 768, 512, 384, 256, 128)
PLAN_RANKS = (16, 8)
DEFAULT_MAX_GENERATIONS = 8
DEFAULT_MAX_COMPLETION = 1024


@dataclass
class Plan:
    """Recipe settings for one model on one card, and the estimate they were chosen by."""

    model: str
    vram_gb: float
    fits: bool
    budget_gb: float
    num_generations: int
    per_device_train_batch_size: int
    gradient_accumulation_steps: int
    max_prompt_length: int
    max_completion_length: int
    lora_rank: int
    load_in_4bit: bool
    use_vllm: bool
    gpu_memory_utilization: float | None
    dtype: str
    backend: str
    estimate: MemoryEstimate
    notes: list[str] = field(default_factory=list)
    #: Why nothing fits (only when ``fits`` is False).
    reason: str | None = None
    #: The nearest setting that does fit, when this one does not (another quantization, a
    #: smaller model), and a sentence saying what it changes.
    alternative: "Plan | None" = None
    alternative_note: str | None = None
    #: Unsloth's vLLM standby: the pool is Unsloth's share of the card, the KV cache sleeps while training.
    vllm_standby: bool = False

    def overrides(self) -> dict[str, Any]:
        """The settings as recipe-config keys (``section.field``), for ``--config`` overrides."""
        out: dict[str, Any] = {
            "model.load_in_4bit": self.load_in_4bit,
            "model.dtype": self.dtype,
            "model.max_seq_length": self.max_prompt_length + self.max_completion_length,
            "training.num_generations": self.num_generations,
            "training.per_device_train_batch_size": self.per_device_train_batch_size,
            "training.gradient_accumulation_steps": self.gradient_accumulation_steps,
            "training.max_completion_length": self.max_completion_length,
            "data.max_prompt_tokens": self.max_prompt_length,
            "lora.r": self.lora_rank,
        }
        # the run must use the vLLM setting the plan was made with, whatever is installed
        out["model.fast_inference"] = "on" if self.use_vllm else "off"
        if self.use_vllm:
            out["model.vllm_standby"] = "on" if self.vllm_standby else "off"
            out["model.gpu_memory_utilization"] = self.gpu_memory_utilization
        return out

    def override_list(self) -> list[str]:
        """``['training.num_generations=8', ...]``: what ``load_config(overrides=...)`` takes."""
        return [f"{k}={_yaml_scalar(v)}" for k, v in self.overrides().items()]

    def overrides_text(self) -> str:
        return " ".join(self.override_list())

    def summary(self) -> str:
        if not self.fits:
            return f"{self.model} does not fit {self.vram_gb:g} GB: {self.reason}"
        quant = "4-bit" if self.load_in_4bit else "16-bit"
        return (f"{self.num_generations} generations x {self.max_completion_length} tokens, "
                f"batch {self.per_device_train_batch_size} x {self.gradient_accumulation_steps} accumulation, "
                f"{quant}, LoRA r={self.lora_rank}, {self.dtype}: {self.estimate.total_gb:.1f} of "
                f"{self.budget_gb:.1f} GB budget")


def _yaml_scalar(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float):
        return f"{v:.2f}"
    return str(v)


def dtype_for(compute_capability: float | tuple[int, int] | None) -> str:
    """bf16 on compute capability 8.0 and newer (Ampere+); fp16 before (T4 is 7.5, V100 7.0)."""
    if compute_capability is None:
        return "bf16"
    return training_dtype(from_gpu({"name": "GPU", "total_gb": 0.0, "compute_capability": compute_capability}))


#: The plan's note when no compute capability was given (callers add how to give it: a flag, an argument).
UNKNOWN_CAPABILITY_NOTE = "compute capability unknown: bf16 assumed (a card below 8.0, such as a T4 at 7.5, trains in fp16)"


def plan(
    model_config: Any,
    vram_gb: float,
    *,
    compute_capability: float | tuple[int, int] | None = None,
    backend: str = "unsloth",
    load_in_4bit: bool | None = None,
    use_vllm: bool = False,
    vllm_standby: bool = False,
    max_prompt_length: int = 256,
    num_generations: int | None = None,
    max_completion_length: int | None = None,
    max_generations: int = DEFAULT_MAX_GENERATIONS,
    max_completion: int = DEFAULT_MAX_COMPLETION,
    lora_rank: int | None = None,
    lora_targets: Any = DEFAULT_LORA_TARGETS,
    beta: float = 0.0,
    optimizer: str = "adamw_8bit",
    margin: float = 0.10,
    max_seq_length: int | None = None,
    alternatives: bool = True,
) -> Plan:
    """Choose GRPO settings whose estimate fits ``vram_gb`` with a safety ``margin``.

    The search prefers, in this order: more generations per prompt (the GRPO group: a
    bigger group gives a better baseline; up to ``max_generations``), longer completions
    (room to reason; up to ``max_completion``), a larger per-device batch (fewer
    accumulation steps, so faster; one optimizer step always covers one whole group), a
    larger LoRA rank, and 16-bit over 4-bit weights (when ``load_in_4bit`` is None: faster,
    and no quantization error). Settings passed explicitly (``num_generations``,
    ``max_completion_length``, ``load_in_4bit``, ``lora_rank``) are kept fixed.

    ``compute_capability`` (e.g. 7.5 for a T4) picks fp16 below 8.0 and bf16 otherwise.
    With ``use_vllm`` the planner also picks ``gpu_memory_utilization``: the smallest pool
    (in steps of 0.05) that holds vLLM's weights and one generation round's KV cache; with
    ``vllm_standby`` on the Unsloth backend the pool is the share Unsloth's standby mode sets
    for the card (:func:`unsloth_grpo.hardware.profiles.standby_utilization`). On the
    transformers backend vLLM generates from 16-bit weights only.

    When nothing fits, the returned plan has ``fits=False``, a ``reason``, and (when
    ``alternatives``) the nearest feasible ``alternative``: 4-bit instead of 16-bit, else
    the largest built-in model (same family first) that fits this card.
    """
    if vram_gb <= 0:
        raise ValueError(f"vram_gb={vram_gb} must be positive")
    shape = model_config if isinstance(model_config, ModelShape) else model_shape(model_config)
    name = model_display_name(model_config) if not isinstance(model_config, ModelShape) else shape.model_type
    dtype = dtype_for(compute_capability)
    budget = vram_gb * (1 - margin)
    notes = []
    if compute_capability is None:
        notes.append(UNKNOWN_CAPABILITY_NOTE)
    limit = max_seq_length or shape.max_position_embeddings or 10**9

    gens = [num_generations] if num_generations else [g for g in PLAN_GENERATIONS if g <= max_generations]
    comps = ([max_completion_length] if max_completion_length else
             [c for c in PLAN_COMPLETIONS if c <= max_completion and max_prompt_length + c <= limit])
    if not gens or not comps:
        raise ValueError(f"nothing to search: generations {gens}, completions {comps} "
                         f"(max_seq_length {limit}, prompt {max_prompt_length})")
    quants = [load_in_4bit] if load_in_4bit is not None else [False, True]
    if use_vllm and backend == "transformers":
        if load_in_4bit:
            raise ValueError("the transformers backend generates with vLLM only from 16-bit weights; "
                             "plan with load_in_4bit=False, or without vLLM")
        quants = [False]
    ranks = [lora_rank] if lora_rank is not None else list(PLAN_RANKS)
    cheap_q = True if True in quants else quants[0]

    def candidate(g: int, c: int, q: bool, r: int, b: int) -> tuple[MemoryEstimate, float | None]:
        util = None
        if use_vllm and vllm_standby and backend == "unsloth":
            util = standby_utilization(vram_gb)
        elif use_vllm:
            util = min(0.95, vllm_utilization_for(shape, vram_gb, gen_batch=g, seq_len=max_prompt_length + c,
                                                  backend=backend, quantization="4bit" if q else None,
                                                  dtype=dtype))
        est = estimate_memory(
            shape, load_in_4bit=q, lora_rank=r, lora_targets=lora_targets, num_generations=g,
            per_device_train_batch_size=b, gradient_accumulation_steps=g // b,
            max_prompt_length=max_prompt_length, max_completion_length=c, beta=beta, use_vllm=use_vllm,
            gpu_memory_utilization=util, gpu_total_gb=vram_gb if use_vllm else None, vllm_standby=vllm_standby,
            backend=backend, optimizer=optimizer, dtype=dtype,
        )
        return est, util

    for g in gens:
        for c in comps:
            # cheapest first: when even batch 1, the smallest rank and 4-bit (if allowed) fail, move on
            if candidate(g, c, cheap_q, min(ranks), 1)[0].total_gb > budget:
                continue
            for b in [d for d in range(g, 0, -1) if g % d == 0]:
                for r in ranks:
                    for q in quants:
                        est, util = candidate(g, c, q, r, b)
                        if est.total_gb <= budget and not any("vLLM pool" in n for n in est.notes):
                            return Plan(
                                model=name, vram_gb=vram_gb, fits=True, budget_gb=budget, num_generations=g,
                                per_device_train_batch_size=b, gradient_accumulation_steps=g // b,
                                max_prompt_length=max_prompt_length, max_completion_length=c, lora_rank=r,
                                load_in_4bit=q, use_vllm=use_vllm, gpu_memory_utilization=util, dtype=dtype,
                                backend=backend, estimate=est, notes=notes + est.notes,
                                vllm_standby=vllm_standby,
                            )

    # nothing fits: report the smallest setting tried and look for the nearest alternative
    g_min, c_min = min(gens), min(comps)
    est, util = candidate(g_min, c_min, cheap_q, min(ranks), 1)
    reason = (f"even {g_min} generations x {c_min} tokens, batch 1, "
              f"{'4-bit' if cheap_q else '16-bit'}, LoRA r={min(ranks)} needs {est.total_gb:.1f} GB, "
              f"above the {budget:.1f} GB budget ({vram_gb:g} GB minus {margin:.0%} margin)")
    pool_short = [n for n in est.notes if "vLLM pool" in n]
    if est.total_gb <= budget and pool_short:
        reason = f"the vLLM pool cannot hold the weights and the KV cache ({pool_short[0]})"
    result = Plan(
        model=name, vram_gb=vram_gb, fits=False, budget_gb=budget, num_generations=g_min,
        per_device_train_batch_size=1, gradient_accumulation_steps=g_min, max_prompt_length=max_prompt_length,
        max_completion_length=c_min, lora_rank=min(ranks), load_in_4bit=cheap_q, use_vllm=use_vllm,
        gpu_memory_utilization=util, dtype=dtype, backend=backend, estimate=est, notes=notes, reason=reason,
        vllm_standby=vllm_standby,
    )
    if alternatives:
        need = f"{name} needs a card of at least {est.total_gb / (1 - margin):.1f} GB"
        vllm_16bit_only = use_vllm and backend == "transformers"
        if load_in_4bit is False and not vllm_16bit_only:
            est4, _ = candidate(g_min, c_min, True, min(ranks), 1)
            need += f" in 16-bit ({est4.total_gb / (1 - margin):.1f} GB in 4-bit)"
        _attach_alternative(result, shape, vram_gb, dict(
            compute_capability=compute_capability, backend=backend, use_vllm=use_vllm, vllm_standby=vllm_standby,
            max_prompt_length=max_prompt_length, max_generations=max_generations, max_completion=max_completion,
            lora_targets=lora_targets, beta=beta, optimizer=optimizer, margin=margin, max_seq_length=max_seq_length,
        ), forced_16bit=load_in_4bit is False and not vllm_16bit_only, need=need)
    return result


def _attach_alternative(result: Plan, shape: ModelShape, vram_gb: float, kw: dict, *, forced_16bit: bool,
                        need: str) -> None:
    """Fill ``result.alternative`` with the nearest plan that fits."""
    if forced_16bit:
        alt = plan(shape, vram_gb, load_in_4bit=True, alternatives=False, **kw)
        if alt.fits:
            alt.model = result.model
            result.alternative = alt
            result.alternative_note = f"load the weights in 4-bit (model.load_in_4bit=true): {alt.summary()}"
            return
    own = shape.total_params
    smaller = sorted((k for k in BUILTIN_CONFIGS if model_shape(BUILTIN_CONFIGS[k]).total_params < own),
                     key=lambda k: model_shape(BUILTIN_CONFIGS[k]).total_params, reverse=True)
    family = [k for k in smaller if model_shape(BUILTIN_CONFIGS[k]).model_type == shape.model_type]
    for key in family + [k for k in smaller if k not in family]:
        alt = plan(BUILTIN_CONFIGS[key], vram_gb, alternatives=False, **kw)
        if alt.fits:
            alt.model = key
            result.alternative = alt
            result.alternative_note = (f"a smaller model: {key} ({BUILTIN_HUB_IDS[key]}) fits with "
                                       f"{alt.summary()}; {need}")
            return
    result.alternative_note = f"no built-in model fits {vram_gb:g} GB; {need}"


def preset_table_markdown(models: list[str] | None = None, cards: list[int] | None = None, *,
                          backend: str = "unsloth", max_prompt_length: int = 256) -> str:
    """The README table: for each built-in model (rows) and card size (columns), the plan.

    Each cell reads ``G x C, bB, Q rR (E)``: G generations per prompt, C completion tokens,
    B completions per micro-batch (gradient accumulation covers the rest of the group), Q the
    weights (4-bit or 16-bit), LoRA rank R, and E the estimated peak in GB; ``-`` means
    nothing fits. Computed by :func:`plan` with ``backend``, no vLLM and
    ``max_prompt_length`` prompt tokens.
    """
    models = models or builtin_model_names()
    cards = cards or list(PRESET_CARDS)
    head = ["model", "params"] + [PRESET_CARDS.get(c, (f"{c} GB", None))[0] for c in cards]
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join(["---"] * len(head)) + "|"]
    for key in models:
        cfg = BUILTIN_CONFIGS[key] if key in BUILTIN_CONFIGS else load_model_config(key)
        row = [key, f"{model_shape(cfg).total_params / 1e9:.2f}B"]
        for card in cards:
            cc = PRESET_CARDS.get(card, ("", None))[1]
            p = plan(cfg, card, compute_capability=cc, backend=backend, max_prompt_length=max_prompt_length,
                     alternatives=False)
            if not p.fits:
                row.append("-")
                continue
            quant = "4-bit" if p.load_in_4bit else "16-bit"
            fp16 = ", fp16" if p.dtype == "fp16" else ""
            row.append(f"{p.num_generations} x {p.max_completion_length}, b{p.per_device_train_batch_size}, "
                       f"{quant} r{p.lora_rank}{fp16} ({p.estimate.total_gb:.1f})")
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines)


def detect_gpu() -> dict[str, Any] | None:
    """The first CUDA GPU as ``{'name', 'total_gb', 'compute_capability'}``, or None.

    ``total_gb`` is the card's memory in GiB; ``compute_capability`` a float such as 7.5.
    """
    from unsloth_grpo.hardware.profiles import measure

    return measure().as_gpu()  # read without initializing CUDA in this process


def plan_for_gpu(model_config: Any, gpu: Mapping[str, Any] | None = None, **kwargs: Any) -> Plan:
    """:func:`plan` for the detected GPU (``--preset auto``): its memory and compute capability.

    Raises ValueError when no CUDA GPU is visible and ``gpu`` is not given.
    """
    gpu = gpu if gpu is not None else detect_gpu()
    if gpu is None:
        raise ValueError("no CUDA GPU detected for an automatic preset; pass vram_gb to plan() "
                         "or use 'unsloth-grpo plan --vram-gb N'")
    kwargs.setdefault("compute_capability", gpu.get("compute_capability"))
    return plan(model_config, float(gpu["total_gb"]), **kwargs)


def plan_for_choice(model_config: Any, gpu: Mapping[str, Any], choice: Any, **kwargs: Any) -> Plan:
    """:func:`plan_for_gpu` with a vLLM decision (:class:`~unsloth_grpo.hardware.profiles.VllmChoice`).

    With ``fast_inference: auto`` a model that does not fit beside vLLM's pool is planned
    without vLLM (the overrides then switch it off). When the run may fall back to generating
    without vLLM (an engine that fails to start), the chosen settings must fit that way too: if the vLLM plan's
    settings do not, the group, completion length, weights and rank of the plan without vLLM are
    kept and only the batch is planned again with vLLM.
    """
    p = plan_for_gpu(model_config, gpu, use_vllm=choice.use, vllm_standby=choice.standby, **kwargs)
    if not (choice.use and choice.fallback):
        return p
    if not p.fits:  # with fast_inference auto, generating without vLLM is the next best thing
        without = plan_for_gpu(model_config, gpu, use_vllm=False, **kwargs)
        if without.fits:
            without.notes.append("vLLM off: with its pool the model does not fit this card")
            return without
        return p
    s = {k: v for k, v in p.estimate.settings.items() if k not in ("generation_batch_size", "logits")}
    s.update(use_vllm=False, gpu_memory_utilization=None, gpu_total_gb=None, vllm_standby=False)
    if estimate_memory(model_config, **s).total_gb <= p.budget_gb:
        return p
    without = plan_for_gpu(model_config, gpu, use_vllm=False, **kwargs)
    if not without.fits:
        p.notes.append("without vLLM these settings would not fit: set model.fast_inference=off and plan again "
                       "if the engine fails to start")
        return p
    fixed = {k: v for k, v in kwargs.items() if k not in ("num_generations", "max_completion_length",
                                                          "load_in_4bit", "lora_rank")}
    both = plan_for_gpu(model_config, gpu, use_vllm=True, vllm_standby=choice.standby,
                        num_generations=without.num_generations,
                        max_completion_length=without.max_completion_length,
                        load_in_4bit=without.load_in_4bit, lora_rank=without.lora_rank, **fixed)
    if not both.fits:
        return p
    both.notes.append("kept small enough to fit without vLLM too, should its engine fail to start")
    return both


def settings_from_config(recipe_cfg: Any, gpu: Mapping[str, Any] | None = None, *,
                         vllm: tuple[str | None, bool] | None = None, decision: Any = None) -> dict[str, Any]:
    """The :func:`estimate_memory` keywords a recipe config implies on ``gpu`` (flat names).

    A run passes its ``decision`` (:class:`unsloth_grpo.hardware.backend.Decision`): its card,
    backend, dtype, 4-bit and vLLM are taken from it, not decided again. Otherwise the backend
    follows the backend layer's rule, and vLLM on or off, its pool and standby come from the same
    decision the loader makes (:func:`unsloth_grpo.hardware.profiles.vllm_choice`); ``vllm`` is the
    installed vLLM (version, bnb plugin), looked up when None.
    """
    m, lo, t, d = recipe_cfg.model, recipe_cfg.lora, recipe_cfg.training, recipe_cfg.data
    load_4bit = bool(m.load_in_4bit)
    if decision is not None:
        gpu, backend, load_4bit = decision.card.as_gpu(), decision.backend, decision.load_in_4bit
        choice, dtype = decision.vllm, decision.dtype
    else:
        from unsloth_grpo.hardware.backend import backend_name

        backend = backend_name(m.backend, vllm_server=m.vllm_server, strict=False)[0]
        profile = from_gpu(gpu)
        choice = choice_for_config(m, profile, backend=backend, vllm=vllm) if gpu is not None else None
        dtype = m.dtype
        if dtype == "auto" or gpu is not None:
            try:
                dtype = training_dtype(profile, m.dtype) if gpu is not None else "bf16"
            except HardwareError:
                dtype = "fp16"  # the config check reports bf16 on this card
    use_vllm, util, standby = m.fast_inference == "on", m.gpu_memory_utilization, False
    if choice is not None:
        use_vllm, util, standby = choice.use, choice.gpu_memory_utilization, choice.standby
    targets = list(lo.target_modules)
    return dict(
        load_in_4bit=load_4bit, lora_rank=lo.r, lora_targets=targets,
        num_generations=t.num_generations, per_device_train_batch_size=t.per_device_train_batch_size,
        gradient_accumulation_steps=t.gradient_accumulation_steps, steps_per_generation=t.steps_per_generation,
        max_prompt_length=d.max_prompt_tokens, max_completion_length=t.max_completion_length, beta=t.beta,
        use_vllm=use_vllm, gpu_memory_utilization=util if use_vllm else None,
        gpu_total_gb=gpu.get("total_gb") if (gpu and use_vllm) else None, vllm_standby=standby and use_vllm,
        backend=backend, optimizer=t.optim if t.optim in OPTIMIZER_STATE_BYTES else "adamw_torch",
        gradient_checkpointing=t.gradient_checkpointing, dtype=dtype,
    )


def estimate_for_config(recipe_cfg: Any, gpu: Mapping[str, Any] | None = None, *,
                        decision: Any = None) -> MemoryEstimate:
    """:func:`estimate_memory` for a recipe config (raises UnknownModelError for unknown models);
    ``decision`` as :func:`settings_from_config` takes it."""
    return estimate_memory(recipe_cfg.model.name, **settings_from_config(recipe_cfg, gpu, decision=decision))


def check_config(recipe_cfg: Any, gpu: Mapping[str, Any] | None = None, *, margin: float = 0.10,
                 decision: Any = None) -> list[str]:
    """Memory problems of a recipe config on a GPU, each line naming the fix.

    ``gpu`` is :func:`detect_gpu`'s dict (detected when None, the run's card when a run passes its
    ``decision``); without a GPU nothing is checked. Reports an estimate above the card's budget
    (with the planner's settings for this card), and a vLLM pool too small for its weights and KV
    cache. Structural checks
    (divisibility, lengths, LoRA rank, bf16 support, vLLM installed) live in
    ``unsloth_grpo.config.validate``.
    """
    if decision is not None:
        gpu = decision.card.as_gpu()
    elif gpu is None:
        gpu = detect_gpu()
    if gpu is None:
        return []
    name = recipe_cfg.model.name
    total = float(gpu["total_gb"])
    try:
        settings = settings_from_config(recipe_cfg, gpu, decision=decision)
        est = estimate_memory(name, **settings)
    except UnknownModelError as exc:
        return [f"warning: memory not checked: {exc}"]
    except ValueError:
        return []  # a structural problem that config.validate reports with its own message
    out = [f"warning: {n}" for n in est.notes if "vLLM pool" in n]
    budget = total * (1 - margin)
    if est.total_gb > budget:
        p = plan(name, total, compute_capability=gpu.get("compute_capability"), backend=settings["backend"],
                 use_vllm=settings["use_vllm"], vllm_standby=settings["vllm_standby"], max_prompt_length=settings["max_prompt_length"], beta=settings["beta"],
                 lora_targets=settings["lora_targets"], optimizer=settings["optimizer"], margin=margin)
        line = (f"warning: estimated peak memory {est.total_gb:.1f} GB ({est.peak_phase} phase) exceeds the "
                f"{budget:.1f} GB budget of {gpu.get('name', 'this GPU')} ({total:.1f} GB); ")
        if p.fits:
            line += f"settings that fit: {p.overrides_text()}"
        else:
            line += f"the model does not fit this card: {p.reason}"
            if p.alternative_note:
                line += f"; nearest alternative: {p.alternative_note}"
        out.append(line)
    return out
