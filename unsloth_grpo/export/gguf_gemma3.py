"""Gemma 3 (text only: ``gemma3_text`` / ``Gemma3ForCausalLM``) as llama.cpp's ``gemma3`` architecture.

    from unsloth_grpo.export.gguf_gemma3 import check_gemma3, gemma3_rope
    check_gemma3(config)          # GGUFError when llama.cpp would run the model differently
    gemma3_rope(config)           # ({"rope_theta": 1e6, ...} for global layers, {...} for local ones)

llama.cpp does not read everything a Gemma 3 config can say from the file: it fixes some of it for the
architecture (as read from its ``llama_load_hparams_gemma3`` and gguf-py's ``MODEL_ARCH.GEMMA3``):

- every sixth layer attends globally, the other five within ``attention.sliding_window`` tokens;
- the sliding layers rotate with base 10000 and no scaling, the global ones with ``rope.freq_base``
  (and ``rope.scaling.*`` when the config scales them linearly);
- queries are scaled by 1/sqrt(``attention.key_length``), or by 1/sqrt(hidden / heads) for the
  62-layer (27B) model;
- the feed-forward activation is GELU's tanh approximation, and no logit soft-capping is applied.

A config that differs from any of these is refused rather than written into a file that llama.cpp would
run as another model. The weights need one change: Gemma's RMSNorm multiplies by ``1 + weight`` and
stores ``weight``, while llama.cpp multiplies by the stored value, so every ``*norm.weight`` is written
plus one (the reverse of what transformers' GGUF reader and so the built-in ``gemma3-270m`` conversion
did). The q/k projections are written as they are: llama.cpp rotates Gemma's heads in halves, as
transformers does.
"""

from __future__ import annotations

from unsloth_grpo.export.gguf_errors import GGUFError

#: What llama.cpp assumes for every ``gemma3`` file, whatever its metadata says.
LOCAL_ROPE_BASE = 10000.0
SLIDING_PATTERN = 6  # layer i is global when (i + 1) % 6 == 0
ACTIVATION = "gelu_pytorch_tanh"
#: llama.cpp's 27B model scales queries by hidden / heads instead of the head width.
LAYERS_27B = 62


def gemma3_rope(config: dict) -> tuple[dict, dict]:
    """(global layers' rope settings, sliding layers' rope settings), from either way a config spells them:
    ``rope_parameters`` keyed by layer type (transformers 5), or ``rope_theta`` / ``rope_local_base_freq`` /
    ``rope_scaling`` (older configs)."""
    params = config.get("rope_parameters") or {}
    if "full_attention" in params or "sliding_attention" in params:
        full = dict(params.get("full_attention") or {})
        local = dict(params.get("sliding_attention") or {})
    else:
        full = dict(params or config.get("rope_scaling") or {})
        local = {}
    full.setdefault("rope_theta", config.get("rope_theta", 1_000_000.0))
    local.setdefault("rope_theta", config.get("rope_local_base_freq", LOCAL_ROPE_BASE))
    return full, local


def _kind(rope: dict) -> str:
    return rope.get("rope_type") or rope.get("type") or "default"


def expected_layer_types(n_layers: int) -> list[str]:
    return ["full_attention" if (i + 1) % SLIDING_PATTERN == 0 else "sliding_attention" for i in range(n_layers)]


def check_gemma3(config: dict) -> None:
    """GGUFError naming the first setting llama.cpp's ``gemma3`` would not reproduce; None when all match."""
    n_layers = config["num_hidden_layers"]
    problems = []
    layer_types = config.get("layer_types") or expected_layer_types(n_layers)
    if list(layer_types) != expected_layer_types(n_layers):
        problems.append("its layers do not alternate five sliding-window layers with one global layer")
    if not config.get("sliding_window"):
        problems.append("it names no sliding_window")
    if config.get("use_bidirectional_attention"):
        problems.append("its attention is bidirectional")
    full, local = gemma3_rope(config)
    if _kind(local) != "default" or float(local["rope_theta"]) != LOCAL_ROPE_BASE:
        problems.append(f"its sliding layers' rope is {_kind(local)} with base {local['rope_theta']} "
                        f"(llama.cpp uses default with base {LOCAL_ROPE_BASE:g})")
    if _kind(full) not in ("default", "linear"):
        problems.append(f"its global layers' rope scaling is '{_kind(full)}' (written: default, linear)")
    act = config.get("hidden_activation") or config.get("hidden_act")
    if act != ACTIVATION:
        problems.append(f"its activation is {act} (llama.cpp's gemma3 uses {ACTIVATION})")
    for key in ("attn_logit_softcapping", "final_logit_softcapping"):
        if config.get(key) is not None:
            problems.append(f"it sets {key}")
    head_dim = config.get("head_dim") or config["hidden_size"] // config["num_attention_heads"]
    scalar = config.get("query_pre_attn_scalar", head_dim)
    expected = config["hidden_size"] // config["num_attention_heads"] if n_layers == LAYERS_27B else head_dim
    if scalar != expected:
        problems.append(f"its query_pre_attn_scalar is {scalar} (llama.cpp scales by {expected} for "
                        f"{n_layers} layers)")
    if problems:
        raise GGUFError("this Gemma 3 model cannot be written for llama.cpp's gemma3 architecture: "
                        + "; ".join(problems) + ". Convert the merged folder with llama.cpp's convert_hf_to_gguf.py")


def add_gemma3_hparams(writer, config: dict) -> None:
    """The keys llama.cpp reads for ``gemma3`` beyond the common ones: head widths, sliding window, rope."""
    from gguf import RopeScalingType

    head_dim = config.get("head_dim") or config["hidden_size"] // config["num_attention_heads"]
    writer.add_key_length(head_dim)
    writer.add_value_length(head_dim)
    writer.add_sliding_window(int(config["sliding_window"]))
    full, _local = gemma3_rope(config)
    writer.add_rope_freq_base(float(full["rope_theta"]))
    if _kind(full) == "linear":
        writer.add_rope_scaling_type(RopeScalingType.LINEAR)
        writer.add_rope_scaling_factor(float(full["factor"]))


def is_norm(hf_name: str) -> bool:
    """Whether a tensor is one of Gemma's RMSNorm weights (stored as ``weight``, applied as ``1 + weight``)."""
    return hf_name.endswith("norm.weight")


def plus_one(w):
    """A Gemma norm weight as llama.cpp applies it."""
    return w + 1.0


__all__ = ["LOCAL_ROPE_BASE", "SLIDING_PATTERN", "add_gemma3_hparams", "check_gemma3", "expected_layer_types",
           "gemma3_rope", "is_norm", "plus_one"]
