"""A merged model folder to one GGUF file, offline, with the ``gguf`` package and no llama.cpp build.

    from unsloth_grpo.export.gguf_writer import write_gguf
    info = write_gguf("exports/smoke", "exports/smoke-gguf/model-q8_0.gguf", "q8_0")
    info.path, info.quant, info.size_bytes, info.seconds

The file holds everything llama.cpp, Ollama or LM Studio need to run the model as a chat model:
the architecture's hyperparameters, every weight (f32, f16, bf16 or q8_0, quantized here in numpy
by the ``gguf`` package), the tokenizer and the chat template (:mod:`unsloth_grpo.export.gguf_vocab`):
a byte-level BPE one as vocabulary, token types, merges, the pre-tokenizer's name and bos/eos/pad; a
SentencePiece one (Gemma 3) as llama.cpp's ``llama`` vocabulary, pieces, scores and types, taken from
the GGUF file the model came from (:mod:`unsloth_grpo.export.gguf_spm`). The
end-of-sequence and padding tokens are the ones :func:`unsloth_grpo.models.tokenizer.prepare_tokenizer`
settles on (the model's generation config wins over a tokenizer file that names the wrong one), so
llama.cpp stops where training and evaluation stopped. The Ollama Modelfile beside it is
:mod:`unsloth_grpo.export.gguf_ollama`'s; the check that reads the file back, :mod:`unsloth_grpo.export.gguf_check`'s.

The families written are those of :data:`FAMILIES` (Llama and SmolLM2, Mistral, Qwen2/Qwen2.5, Qwen3,
and Gemma 3's text models such as the built-in gemma-3-270m); the key names, the tensor names and the
rotary layout follow llama.cpp's conventions (read from its ``convert_hf_to_gguf.py``, its model
loader and gguf-py). Gemma 3 is written with its norm weights plus one and refused where its config
asks for something llama.cpp's ``gemma3`` fixes otherwise (:mod:`unsloth_grpo.export.gguf_gemma3`). The k-quants (``q4_k_m`` and the rest of :data:`LLAMA_QUANTS`)
are llama.cpp's own mixtures; they are made from an f16 file by llama.cpp's quantizer
(:func:`find_quantizer`), which is checked for before any work starts.

Weights are read and written one tensor at a time, so a 7B model needs about one tensor of memory
beyond the file being written, not the whole model.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

from unsloth_grpo.export.gguf_gemma3 import add_gemma3_hparams, check_gemma3, is_norm, plus_one
from unsloth_grpo.export.gguf_vocab import (GGUFError, add_tokenizer, check_tokenizer, prepared_tokenizer,
                                              tokenizer_fields)

#: ``--quant`` types written here directly, with the llama.cpp file type each one records.
DIRECT_QUANTS = ("f32", "f16", "bf16", "q8_0")

#: ``--quant`` types that need llama.cpp's quantizer (an f16 file is written first, then quantized).
LLAMA_QUANTS = ("q4_0", "q4_1", "q5_0", "q5_1", "q2_k", "q3_k_s", "q3_k_m", "q3_k_l", "q4_k_s", "q4_k_m",
                "q5_k_s", "q5_k_m", "q6_k", "iq4_nl", "iq4_xs")

ALL_QUANTS = DIRECT_QUANTS + LLAMA_QUANTS

#: Environment variable naming a ``llama-quantize`` binary that is not on PATH.
QUANTIZE_VARIABLE = "UNSLOTH_GRPO_LLAMA_QUANTIZE"

INSTALL_QUANTIZER = (
    "a llama.cpp quantizer: put llama.cpp's `llama-quantize` on PATH (or name it in ${var}), or install the "
    "optional extra with pip install 'unsloth-grpo[gguf]' (llama-cpp-python; on this kind of CPU build it with "
    "the CMAKE_ARGS in docs/export.md). f16, bf16 and q8_0 need none of this"
).replace("{var}", QUANTIZE_VARIABLE)


@dataclass(frozen=True)
class Family:
    """How one Hugging Face ``model_type`` is written."""

    arch: str  # llama.cpp's architecture name (gguf.MODEL_ARCH_NAMES)
    interleave_rotary: bool  # q/k rows reordered from rotate-half pairs to adjacent pairs (see below)
    examples: str
    norm_plus_one: bool = False  # RMSNorm weights stored as w for (1 + w), written as 1 + w (Gemma)


#: Hugging Face ``model_type`` -> how it is written. Llama and Mistral run in llama.cpp's ``llama``
#: architecture, which rotates adjacent pairs of each head's dimensions; the Hugging Face checkpoints
#: store q and k for rotate-half (dimension i pairs with i + head_dim/2), so their rows are reordered
#: on the way out. Qwen2, Qwen3 and Gemma 3 rotate halves in llama.cpp too and are written as they are;
#: Gemma 3's norms and settings are :mod:`unsloth_grpo.export.gguf_gemma3`'s.
FAMILIES = {
    "llama": Family("llama", True, "Llama 3.x, SmolLM2"),
    "mistral": Family("llama", True, "Mistral"),
    "qwen2": Family("qwen2", False, "Qwen2, Qwen2.5"),
    "qwen3": Family("qwen3", False, "Qwen3"),
    "gemma3_text": Family("gemma3", False, "Gemma 3 text models, e.g. gemma-3-270m", norm_plus_one=True),
}


def supported_families() -> str:
    return ", ".join(f"{name} ({fam.examples})" for name, fam in FAMILIES.items())


# ---------------------------------------------------------------- what can be written


def quant_type(quant: str):
    """The ``gguf.GGMLQuantizationType`` of the weight matrices for a direct ``--quant``."""
    from gguf import GGMLQuantizationType as Q

    return {"f32": Q.F32, "f16": Q.F16, "bf16": Q.BF16, "q8_0": Q.Q8_0}[quant]


def file_type(quant: str):
    """llama.cpp's ``general.file_type`` for ``quant`` (``gguf.LlamaFileType``)."""
    from gguf import LlamaFileType

    return LlamaFileType.ALL_F32 if quant == "f32" else LlamaFileType[f"MOSTLY_{quant.upper()}"]


def check_quant(quant: str) -> str:
    """``quant`` lower-cased when it is a type this export writes; GGUFError naming the choices otherwise."""
    q = (quant or "").lower()
    if q not in ALL_QUANTS:
        raise GGUFError(f"--quant {quant}: not a GGUF type this export writes. Written directly: "
                        f"{', '.join(DIRECT_QUANTS)}; with llama.cpp's quantizer: {', '.join(LLAMA_QUANTS)}")
    return q


@dataclass
class Quantizer:
    """How a k-quant is made: a ``llama-quantize`` binary, or llama-cpp-python's bound function."""

    kind: str  # "binary" or "llama_cpp"
    where: str  # the binary's path, or the llama_cpp module's file

    def describe(self) -> str:
        return f"llama-quantize at {self.where}" if self.kind == "binary" else f"llama-cpp-python ({self.where})"


def find_quantizer(env: dict | None = None) -> Quantizer | None:
    """llama.cpp's quantizer if this machine has one: ``$UNSLOTH_GRPO_LLAMA_QUANTIZE``, ``llama-quantize``
    on PATH, ``./llama.cpp/build/bin/llama-quantize`` (where Unsloth builds it), or llama-cpp-python."""
    import importlib.util

    env = os.environ if env is None else env
    named = env.get(QUANTIZE_VARIABLE)
    if named:
        return Quantizer("binary", named) if Path(named).is_file() else None
    for candidate in (shutil.which("llama-quantize", path=env.get("PATH")),
                      str(Path("llama.cpp/build/bin/llama-quantize").resolve())):
        if candidate and Path(candidate).is_file() and os.access(candidate, os.X_OK):
            return Quantizer("binary", candidate)
    spec = importlib.util.find_spec("llama_cpp")
    if spec is not None:
        return Quantizer("llama_cpp", spec.origin or "llama_cpp")
    return None


def require_quantizer(quant: str, env: dict | None = None) -> Quantizer | None:
    """None for a direct type; the quantizer for a k-quant, or GGUFError naming what to install."""
    if quant in DIRECT_QUANTS:
        return None
    q = find_quantizer(env)
    if q is None:
        named = (env if env is not None else os.environ).get(QUANTIZE_VARIABLE)
        where = f" (${QUANTIZE_VARIABLE}={named} is not a file)" if named else ""
        raise GGUFError(f"--quant {quant} is one of llama.cpp's own mixtures and needs {INSTALL_QUANTIZER}{where}. "
                        f"Nothing was written. Or choose --quant q8_0 (8.5 bits a weight, close to f16)")
    return q


def check_config(config: dict) -> Family:
    """The family of a model's config.json, or GGUFError naming the families that are written."""
    model_type = config.get("model_type")
    if model_type not in FAMILIES:
        arch = ", ".join(config.get("architectures") or []) or "no architectures listed"
        raise GGUFError(f"model_type '{model_type}' ({arch}) is not a family the GGUF writer knows; it writes "
                        f"{supported_families()}. Convert the merged folder with llama.cpp's convert_hf_to_gguf.py")
    if config.get("quantization_config"):
        raise GGUFError("the model's weights are quantized (config.json has a quantization_config); write GGUF from "
                        "16- or 32-bit weights (export merges into those)")
    if FAMILIES[model_type].arch == "gemma3":
        check_gemma3(config)  # its rope is set per layer type, checked there
        return FAMILIES[model_type]
    rope = _rope(config)
    kind = rope.get("rope_type") or rope.get("type") or "default"
    if kind not in ("default", "linear", "yarn", "llama3"):
        raise GGUFError(f"rope scaling '{kind}' is not written by the GGUF writer (it writes default, linear, yarn "
                        "and llama3); convert with llama.cpp's convert_hf_to_gguf.py")
    return FAMILIES[model_type]


def preflight(config_dir: str | os.PathLike, tokenizer_dir: str | os.PathLike, quant: str,
              env: dict | None = None) -> tuple[str, Quantizer | None]:
    """Every check that needs no weights, run before a merge: the type, the quantizer a k-quant needs,
    the family and the tokenizer. Returns (quant, quantizer or None)."""
    from transformers import AutoTokenizer

    q = check_quant(quant)
    quantizer = require_quantizer(q, env)
    cfg_path = Path(config_dir) / "config.json"
    try:
        config = json.loads(cfg_path.read_text())
    except (OSError, ValueError) as exc:
        raise GGUFError(f"{cfg_path}: cannot read the model's config ({exc})") from None
    check_config(config)
    check_tokenizer(AutoTokenizer.from_pretrained(str(tokenizer_dir)), folders=(Path(tokenizer_dir), Path(config_dir)))
    return q, quantizer


# ---------------------------------------------------------------- the architecture


def _rope(config: dict) -> dict:
    """The rope settings, wherever this transformers version keeps them."""
    rope = dict(config.get("rope_parameters") or config.get("rope_scaling") or {})
    if "rope_theta" not in rope and config.get("rope_theta") is not None:
        rope["rope_theta"] = config["rope_theta"]
    return rope


def head_dim(config: dict) -> int:
    return int(config.get("head_dim") or config["hidden_size"] // config["num_attention_heads"])


def _add_hparams(writer, config: dict, family: Family) -> None:
    writer.add_vocab_size(config["vocab_size"])
    writer.add_context_length(config.get("max_position_embeddings") or 2048)
    writer.add_embedding_length(config["hidden_size"])
    writer.add_feed_forward_length(config["intermediate_size"])
    writer.add_block_count(config["num_hidden_layers"])
    writer.add_head_count(config["num_attention_heads"])
    writer.add_head_count_kv(config.get("num_key_value_heads") or config["num_attention_heads"])
    writer.add_layer_norm_rms_eps(config.get("rms_norm_eps", 1e-6))
    dim = head_dim(config)
    writer.add_rope_dimension_count(dim)
    if family.arch == "gemma3":
        add_gemma3_hparams(writer, config)
        return
    if config.get("head_dim") is not None:  # heads narrower or wider than hidden_size / heads (Qwen3)
        writer.add_key_length(dim)
        writer.add_value_length(dim)
    rope = _rope(config)
    writer.add_rope_freq_base(float(rope.get("rope_theta", 10000.0)))
    kind = rope.get("rope_type") or rope.get("type") or "default"
    from gguf import RopeScalingType

    if kind == "linear":
        writer.add_rope_scaling_type(RopeScalingType.LINEAR)
        writer.add_rope_scaling_factor(float(rope["factor"]))
    elif kind == "yarn":
        writer.add_rope_scaling_type(RopeScalingType.YARN)
        writer.add_rope_scaling_factor(float(rope["factor"]))
        writer.add_rope_scaling_orig_ctx_len(int(rope["original_max_position_embeddings"]))


def llama3_rope_factors(config: dict):
    """Llama 3.1+'s per-frequency rope stretch, which llama.cpp reads from a ``rope_freqs`` tensor.

    Frequencies whose wavelength is shorter than the original context / high_freq_factor are kept,
    those longer than context / low_freq_factor are divided by ``factor``, and those between are
    blended linearly in the inverse wavelength."""
    import math

    import numpy as np

    rope = _rope(config)
    base, dim = float(rope.get("rope_theta", 10000.0)), head_dim(config)
    factor = float(rope.get("factor", 8.0))
    low, high = float(rope.get("low_freq_factor", 1.0)), float(rope.get("high_freq_factor", 4.0))
    context = float(rope.get("original_max_position_embeddings", 8192))
    out = []
    for k in range(0, dim, 2):
        wavelength = 2 * math.pi * base ** (k / dim)
        if wavelength < context / high:
            out.append(1.0)
        elif wavelength > context / low:
            out.append(factor)
        else:
            smooth = (context / wavelength - low) / (high - low)
            out.append(1.0 / ((1 - smooth) / factor + smooth))
    return np.asarray(out, dtype=np.float32)


def interleave_rotary(w, n_heads: int):
    """Reorder the rows of a q or k projection (or its bias) from rotate-half pairs to adjacent pairs.

    Within each head, row ``j`` of the first half and row ``j`` of the second half are rotated together
    by transformers; llama.cpp's ``llama`` architecture rotates rows ``2j`` and ``2j+1`` together. So the
    two halves of every head are interleaved: (a0 a1 .. b0 b1 ..) -> (a0 b0 a1 b1 ..)."""
    half = w.shape[0] // n_heads // 2
    return w.reshape(n_heads, 2, half, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


# ---------------------------------------------------------------- the weights


class _Weights:
    """The safetensors of a folder, read one tensor at a time (bf16 too, through torch)."""

    def __init__(self, folder: Path):
        index = folder / "model.safetensors.index.json"
        if index.is_file():
            files = sorted(set(json.loads(index.read_text())["weight_map"].values()))
        elif (folder / "model.safetensors").is_file():
            files = ["model.safetensors"]
        else:
            raise GGUFError(f"{folder} has no model.safetensors (or index); the GGUF writer reads safetensors weights")
        from safetensors import safe_open

        self._where: dict[str, Path] = {}
        self._shapes: dict[str, tuple[int, ...]] = {}
        for name in files:
            with safe_open(str(folder / name), framework="pt") as f:
                for key in f.keys():
                    self._where[key] = folder / name
                    self._shapes[key] = tuple(f.get_slice(key).get_shape())

    def names(self) -> list[str]:
        return list(self._where)

    def shape(self, name: str) -> tuple[int, ...]:
        return self._shapes[name]

    def load(self, name: str):
        """The tensor as float32 numpy."""
        import torch
        from safetensors import safe_open

        with safe_open(str(self._where[name]), framework="pt") as f:
            return f.get_tensor(name).to(torch.float32).numpy()


@dataclass
class _Planned:
    gguf_name: str
    hf_name: str | None  # None for a tensor made here (rope_freqs)
    shape: tuple[int, ...]
    qtype: Any  # gguf.GGMLQuantizationType
    transform: Callable | None = None


def _plan(weights: _Weights, config: dict, family: Family, quant: str) -> tuple[list[_Planned], list[str]]:
    """Every tensor of the file in order, with its GGUF name, shape and type; notes on what was decided."""
    import gguf

    qtype = quant_type(quant)
    arch = next(a for a, name in gguf.MODEL_ARCH_NAMES.items() if name == family.arch)
    names = gguf.get_tensor_name_map(arch, config["num_hidden_layers"])
    n_heads = config["num_attention_heads"]
    n_kv = config.get("num_key_value_heads") or n_heads
    tied = bool(config.get("tie_word_embeddings"))
    planned, notes, fell_back = [], [], []
    if (_rope(config).get("rope_type") or "") == "llama3":
        planned.append(_Planned("rope_freqs.weight", None, (head_dim(config) // 2,), gguf.GGMLQuantizationType.F32))
    for hf in weights.names():
        if hf.endswith("rotary_emb.inv_freq"):
            continue
        if hf == "lm_head.weight" and tied:
            continue  # the same matrix as the token embedding; llama.cpp reuses token_embd when output is absent
        name = names.get_name(hf, try_suffixes=(".weight", ".bias"))
        if name is None:
            raise GGUFError(f"tensor '{hf}' has no GGUF name in the {family.arch} architecture; this checkpoint is not "
                            f"a plain {family.examples} model. Convert it with llama.cpp's convert_hf_to_gguf.py")
        shape = weights.shape(hf)
        transform = None
        if family.interleave_rotary and (".q_proj." in hf or ".k_proj." in hf):
            heads = n_heads if ".q_proj." in hf else n_kv
            transform = (lambda w, h=heads: interleave_rotary(w, h))
        elif family.norm_plus_one and is_norm(hf):
            transform = plus_one
        # norms, biases and other vectors stay f32, as llama.cpp expects; matrices take the chosen type
        t = gguf.GGMLQuantizationType.F32 if (len(shape) < 2 or not name.endswith(".weight")) else qtype
        if t == gguf.GGMLQuantizationType.Q8_0 and shape[-1] % gguf.GGML_QUANT_SIZES[t][0]:
            t = gguf.GGMLQuantizationType.F16  # rows that do not fill whole q8_0 blocks
            fell_back.append(name)
        planned.append(_Planned(name, hf, shape, t, transform))
    if fell_back:
        notes.append(f"{len(fell_back)} tensor(s) written f16, their rows not a multiple of 32: {', '.join(fell_back[:5])}")
    if not tied and not any(p.gguf_name == "output.weight" for p in planned):
        raise GGUFError("the model has no lm_head.weight and does not tie it to the embedding")
    return planned, notes


def tensor_types(model_dir: str | os.PathLike, quant: str) -> dict:
    """Hugging Face tensor name -> the ``gguf.GGMLQuantizationType`` it is written in, for a direct ``quant``."""
    model_dir = Path(model_dir)
    config = json.loads((model_dir / "config.json").read_text())
    planned, _notes = _plan(_Weights(model_dir), config, check_config(config), check_quant(quant))
    return {p.hf_name: p.qtype for p in planned if p.hf_name is not None}


def _nbytes(shape: tuple[int, ...], qtype) -> int:
    import gguf

    block, size = gguf.GGML_QUANT_SIZES[qtype]
    n = 1
    for s in shape:
        n *= s
    return n // block * size


def _encode(data, qtype):
    """Bytes (or a float array) of ``data`` in ``qtype``, by the gguf package's numpy quantizers."""
    import gguf

    return gguf.quants.quantize(data, qtype)


# ---------------------------------------------------------------- the file


@dataclass
class GGUFInfo:
    path: Path
    quant: str
    architecture: str
    size_bytes: int
    seconds: float
    tensors: int
    eos_token: str
    pre_tokenizer: str
    notes: list[str] = field(default_factory=list)


def write_gguf(model_dir: str | os.PathLike, out_file: str | os.PathLike, quant: str = "q8_0", *,
               name: str | None = None, quantizer: Quantizer | None = None,
               log: Callable[[str], None] = print) -> GGUFInfo:
    """Write the model in ``model_dir`` (a merged folder: config.json, safetensors, tokenizer) to ``out_file``.

    A k-quant is written as f16 beside the target, quantized by llama.cpp's quantizer, and the f16
    file removed. The caller removes ``out_file`` when this raises (the export writes into a staging
    folder that it deletes on failure).
    """
    start = time.monotonic()
    model_dir, out_file = Path(model_dir), Path(out_file)
    q = check_quant(quant)
    if q in LLAMA_QUANTS:
        quantizer = quantizer or require_quantizer(q)
        f16 = out_file.with_name(out_file.stem + ".f16-intermediate.gguf")
        try:
            inner = write_gguf(model_dir, f16, "f16", name=name, log=log)
            log(f"quantizing to {q} with {quantizer.describe()} ...")
            quantize_with_llama_cpp(f16, out_file, q, quantizer)
        finally:
            f16.unlink(missing_ok=True)
        return GGUFInfo(out_file, q, inner.architecture, out_file.stat().st_size, time.monotonic() - start,
                        inner.tensors, inner.eos_token, inner.pre_tokenizer, inner.notes)
    import gguf

    config = json.loads((model_dir / "config.json").read_text())
    family = check_config(config)
    tokenizer = prepared_tokenizer(model_dir)
    tok = tokenizer_fields(tokenizer, config["vocab_size"], config, folders=(model_dir,))
    weights = _Weights(model_dir)
    planned, notes = _plan(weights, config, family, q)

    writer = gguf.GGUFWriter(str(out_file), family.arch)
    writer.add_type(gguf.GGUFType.MODEL)
    writer.add_name(name or model_dir.name)
    writer.add_file_type(file_type(q))
    writer.add_quantization_version(gguf.GGML_QUANT_VERSION)
    _add_hparams(writer, config, family)
    add_tokenizer(writer, tok)
    for p in planned:
        writer.add_tensor_info(p.gguf_name, p.shape, _float32(), _nbytes(p.shape, p.qtype), raw_dtype=p.qtype)
    out_file.parent.mkdir(parents=True, exist_ok=True)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    try:
        for data in _tensor_data(planned, weights, config):
            writer.write_tensor_data(data)
    finally:
        writer.close()
    size = out_file.stat().st_size
    seconds = time.monotonic() - start
    log(f"gguf ({q}, {family.arch}, {len(planned)} tensors, {size / 2**20:.1f} MiB, {seconds:.1f} s) -> {out_file}")
    return GGUFInfo(out_file, q, family.arch, size, seconds, len(planned), tokenizer.eos_token, tok["pre"], notes)


def _float32():
    import numpy as np

    return np.dtype(np.float32)


def _tensor_data(planned: list[_Planned], weights: _Weights, config: dict) -> Iterator:
    for p in planned:
        data = llama3_rope_factors(config) if p.hf_name is None else weights.load(p.hf_name)
        if p.transform is not None:
            data = p.transform(data)
        yield _encode(data, p.qtype)


def quantize_with_llama_cpp(src: Path, dst: Path, quant: str, quantizer: Quantizer) -> None:
    """``src`` (f16 GGUF) -> ``dst`` in ``quant`` with llama.cpp's own quantizer; GGUFError when it fails."""
    if quantizer.kind == "binary":
        proc = subprocess.run([quantizer.where, str(src), str(dst), quant.upper()], capture_output=True, text=True)
        if proc.returncode != 0 or not dst.is_file():
            tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
            raise GGUFError(f"llama-quantize ({quantizer.where}) failed with exit code {proc.returncode}: "
                            + " | ".join(tail))
        return
    import llama_cpp

    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = int(file_type(quant))
    params.nthread = int(os.environ.get("OMP_NUM_THREADS") or 0)
    rc = llama_cpp.llama_model_quantize(str(src).encode(), str(dst).encode(), params)
    if rc != 0 or not dst.is_file():
        raise GGUFError(f"llama-cpp-python's llama_model_quantize failed (return code {rc}) making {quant}")


__all__ = ["ALL_QUANTS", "DIRECT_QUANTS", "FAMILIES", "GGUFError", "GGUFInfo", "LLAMA_QUANTS", "Quantizer",
           "check_config", "check_quant", "find_quantizer", "interleave_rotary", "preflight", "require_quantizer",
           "tensor_types", "write_gguf"]
