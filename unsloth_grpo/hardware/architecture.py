"""A model's architecture from its ``config.json`` alone: its shape, its exact parameter count, its LoRA size.

Nothing is loaded: the counts come from the config's fields, and the configs of the models the
planner knows by name are kept here (:data:`BUILTIN_CONFIGS`), so ``plan --model qwen2.5-1.5b``
works offline::

    from unsloth_grpo.hardware.architecture import count_parameters, lora_parameters

    count_parameters("qwen2.5-1.5b")                  # 1543714304, exact
    lora_parameters("qwen2.5-1.5b", rank=16)          # the adapter's trainable parameters

The memory model (:mod:`unsloth_grpo.hardware.memory`) and the planner
(:mod:`unsloth_grpo.hardware.planner`) read the shape from here.
"""

from __future__ import annotations

import copy
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from unsloth_grpo.data import looks_like_path

#: Architectures whose parameter count is exact here, keyed by ``config.json``'s ``model_type``.
SUPPORTED_MODEL_TYPES = ("llama", "mistral", "qwen2", "qwen3", "gemma3_text", "gemma3", "phi3")

#: The LoRA targets Unsloth's notebooks use: every linear layer of the decoder blocks.
DEFAULT_LORA_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


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
    from unsloth_grpo.models.builtin import FORMAT_TOKENS, TINY_MODEL_KWARGS

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
