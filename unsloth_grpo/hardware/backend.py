"""The one place that decides how a model is loaded: Unsloth, or plain transformers + peft.

``unsloth`` patches transformers, peft and TRL when it is imported, so it must be imported
before them. Nothing else in this package imports those libraries at module level; the recipe
calls :func:`select_backend` first, which imports Unsloth when it is the one chosen.

Example::

    from unsloth_grpo.config import ModelConfig, LoraSettings
    loaded = load_model(ModelConfig(name="builtin:tiny"), LoraSettings(r=16))
    print(loaded.info.summary())   # backend=unsloth device=cpu dtype=fp32 4bit=off vllm=off
"""

from __future__ import annotations

import importlib.util
import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

TINY_MODEL = "builtin:tiny"
#: Built-in models by name -> the ``unsloth_grpo.testing`` variant that builds them.
BUILTIN_MODELS = {TINY_MODEL: "tiny", "builtin:tiny-digits": "digits"}

ALL_LINEAR = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


class BackendError(RuntimeError):
    """The requested backend cannot run here; the message says what to install or change."""


@dataclass
class BackendInfo:
    backend: str
    device: str
    dtype: str
    load_in_4bit: bool
    use_vllm: bool
    model_name: str
    reason: str = ""

    def summary(self) -> str:
        return (
            f"backend={self.backend} device={self.device} dtype={self.dtype} "
            f"4bit={'on' if self.load_in_4bit else 'off'} vllm={'on' if self.use_vllm else 'off'}"
            + (f" ({self.reason})" if self.reason else "")
        )

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class LoadedModel:
    model: Any
    tokenizer: Any
    info: BackendInfo


def cache_dir() -> Path:
    """Where built-in assets (the tiny model) are kept: $UNSLOTH_GRPO_HOME or ~/.cache/unsloth_grpo."""
    return Path(os.environ.get("UNSLOTH_GRPO_HOME", Path.home() / ".cache" / "unsloth_grpo"))


def resolve_model_path(name: str) -> str:
    """``builtin:tiny`` (or another of :data:`BUILTIN_MODELS`) -> a locally built model; anything else unchanged."""
    if name in BUILTIN_MODELS:
        from unsloth_grpo.testing import build_tiny_model

        variant = BUILTIN_MODELS[name]
        return build_tiny_model(cache_dir() / ("tiny-model" if variant == "tiny" else f"tiny-{variant}-model"),
                                variant=variant)
    if name.startswith("builtin:"):
        raise BackendError(f"unknown built-in model '{name}'; choose one of: {', '.join(BUILTIN_MODELS)}")
    return name


def _world_size() -> int:
    return int(os.environ.get("WORLD_SIZE", "1"))


def auto_backend(unsloth_importable: bool | None = None, world_size: int | None = None) -> tuple[str, str]:
    """The rule behind ``backend: auto``, and why; imports nothing (the doctor and planner use it too).

    Unsloth when it is importable and this is a single process (Unsloth's fast path is
    single-GPU); otherwise plain transformers + peft.
    """
    if unsloth_importable is None:
        unsloth_importable = importlib.util.find_spec("unsloth") is not None
    world_size = _world_size() if world_size is None else world_size
    if world_size > 1:
        return "transformers", f"{world_size} processes: Unsloth is single-GPU"
    if unsloth_importable:
        return "unsloth", "unsloth is installed"
    return "transformers", "unsloth is not installed"


def select_backend(requested: str = "auto") -> tuple[str, str]:
    """Choose 'unsloth' or 'transformers' and say why; imports Unsloth when it is chosen."""
    if requested not in ("auto", "unsloth", "transformers"):
        raise BackendError(f"model.backend='{requested}' is not one of auto, unsloth, transformers")
    if requested == "transformers":
        return "transformers", "requested"
    if requested == "unsloth":
        if importlib.util.find_spec("unsloth") is None:
            raise BackendError("model.backend='unsloth' but unsloth is not installed: "
                               "pip install 'unsloth-grpo[unsloth]', or set model.backend=auto")
        if _world_size() > 1:
            raise BackendError(
                f"model.backend='unsloth' under {_world_size()} processes: Unsloth's fast path is single-GPU. "
                "Set model.backend=transformers (or auto) to train data-parallel with accelerate/torchrun."
            )
        _import_unsloth()
        return "unsloth", "requested"
    name, why = auto_backend()
    if name == "unsloth":
        _import_unsloth()
    return name, why


def _import_unsloth() -> None:
    import sys
    import warnings

    if "unsloth" in sys.modules:
        return
    late = [m for m in ("trl", "transformers", "peft") if m in sys.modules]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import unsloth  # noqa: F401  (patches transformers/peft/TRL on import)
    if late:
        print(f"note: {', '.join(late)} was imported before unsloth; Unsloth's speed-ups may be partial")


def resolve_device(requested: str = "auto") -> str:
    import torch

    if requested == "cpu":
        return "cpu"
    if torch.cuda.is_available():
        return "cuda"
    if requested == "cuda":
        raise BackendError("model.device='cuda' but no CUDA GPU is visible; set model.device=auto")
    return "cpu"


def resolve_dtype(requested: str, device: str) -> str:
    """bf16 only where the GPU supports it, fp16 on older GPUs (T4), fp32 on CPU."""
    import torch

    if device == "cpu":
        return "fp32" if requested in ("auto", "fp32") else requested
    bf16_ok = torch.cuda.is_bf16_supported()
    if requested == "auto":
        return "bf16" if bf16_ok else "fp16"
    if requested == "bf16" and not bf16_ok:
        name = torch.cuda.get_device_name(0)
        raise BackendError(f"model.dtype='bf16' but {name} has no bf16 support; set model.dtype=fp16 (or auto)")
    return requested


def torch_dtype(name: str):
    import torch

    return {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[name]


def wants_vllm(fast_inference: str, device: str) -> bool:
    have = importlib.util.find_spec("vllm") is not None
    if fast_inference == "off":
        return False
    if fast_inference == "on":
        if not have:
            raise BackendError("model.fast_inference='on' but vllm is not installed: pip install 'unsloth-grpo[vllm]'")
        if device != "cuda":
            raise BackendError("model.fast_inference='on' needs a CUDA GPU; vLLM's training path does not run on CPU")
        return True
    return have and device == "cuda"


def _targets(lora) -> list[str] | str:
    mods = list(lora.target_modules)
    if mods == ["all-linear"]:
        return ALL_LINEAR
    return mods


def _prepare_tokenizer(tokenizer) -> Any:
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    tokenizer.padding_side = "left"
    return tokenizer


def load_model(model_cfg, lora_cfg=None, *, seed: int = 3407, gradient_checkpointing: bool = True,
               log=print) -> LoadedModel:
    """Load the base model and tokenizer and attach LoRA (when ``lora_cfg`` is given).

    Prints the chosen backend, device, dtype and 4-bit/vLLM state once.
    """
    backend, why = select_backend(model_cfg.backend)
    device = resolve_device(model_cfg.device)
    dtype = resolve_dtype(model_cfg.dtype, device)
    use_vllm = wants_vllm(model_cfg.fast_inference, device)
    load_4bit = bool(model_cfg.load_in_4bit)
    notes = [why]
    if load_4bit and device != "cuda":
        load_4bit = False
        notes.append("4-bit needs CUDA; full precision on CPU")
    if load_4bit and backend == "transformers" and importlib.util.find_spec("bitsandbytes") is None:
        load_4bit = False
        notes.append("bitsandbytes missing; 16-bit weights")
    path = resolve_model_path(model_cfg.name)
    info = BackendInfo(backend, device, dtype, load_4bit, use_vllm, model_cfg.name, "; ".join(notes))
    log(f"unsloth-grpo: {info.summary()}")
    if backend == "unsloth":
        model, tokenizer = _load_unsloth(path, model_cfg, lora_cfg, info, seed, gradient_checkpointing)
    else:
        model, tokenizer = _load_transformers(path, model_cfg, lora_cfg, info, seed, gradient_checkpointing)
    return LoadedModel(model, _prepare_tokenizer(tokenizer), info)


def _load_unsloth(path, model_cfg, lora_cfg, info, seed, gradient_checkpointing):
    from unsloth import FastLanguageModel

    kwargs: dict[str, Any] = dict(
        model_name=path,
        max_seq_length=model_cfg.max_seq_length,
        load_in_4bit=info.load_in_4bit,
        fast_inference=info.use_vllm,
        dtype=torch_dtype(info.dtype),
        trust_remote_code=model_cfg.trust_remote_code,
    )
    if info.use_vllm:
        kwargs["max_lora_rank"] = (lora_cfg.max_lora_rank or lora_cfg.r) if lora_cfg else 16
        kwargs["gpu_memory_utilization"] = model_cfg.gpu_memory_utilization
    model, tokenizer = FastLanguageModel.from_pretrained(**kwargs)
    if lora_cfg is not None:
        model = FastLanguageModel.get_peft_model(
            model,
            r=lora_cfg.r,
            lora_alpha=lora_cfg.alpha,
            lora_dropout=lora_cfg.dropout,
            target_modules=_targets(lora_cfg),
            use_gradient_checkpointing="unsloth" if gradient_checkpointing else False,
            random_state=seed,
        )
    return model, tokenizer


def _load_transformers(path, model_cfg, lora_cfg, info, seed, gradient_checkpointing):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    kwargs: dict[str, Any] = dict(dtype=torch_dtype(info.dtype), trust_remote_code=model_cfg.trust_remote_code)
    if info.load_in_4bit:
        from transformers import BitsAndBytesConfig

        compute = torch_dtype(info.dtype)
        kwargs["quantization_config"] = BitsAndBytesConfig(
            load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_use_double_quant=True,
            bnb_4bit_compute_dtype=compute,
        )
        kwargs["device_map"] = {"": int(os.environ.get("LOCAL_RANK", "0"))}
    tokenizer = AutoTokenizer.from_pretrained(path, trust_remote_code=model_cfg.trust_remote_code)
    model = AutoModelForCausalLM.from_pretrained(path, **kwargs)
    if lora_cfg is not None:
        from peft import LoraConfig, get_peft_model, prepare_model_for_kbit_training

        if info.load_in_4bit:
            model = prepare_model_for_kbit_training(model, use_gradient_checkpointing=gradient_checkpointing)
        torch.manual_seed(seed)
        model = get_peft_model(model, LoraConfig(
            r=lora_cfg.r, lora_alpha=lora_cfg.alpha, lora_dropout=lora_cfg.dropout,
            target_modules=_targets(lora_cfg), task_type="CAUSAL_LM",
        ))
    return model, tokenizer


def is_adapter_dir(path: str | os.PathLike) -> bool:
    return (Path(path) / "adapter_config.json").exists()


def load_for_inference(name_or_path: str, *, backend: str = "transformers", device: str = "auto",
                       dtype: str = "auto", log=print) -> LoadedModel:
    """Load a base model, a LoRA adapter directory, a merged model or ``builtin:tiny`` for generation.

    An adapter directory is loaded on top of the base model named in its ``adapter_config.json``
    (the tokenizer saved beside the adapter wins, so the chat template travels with it).
    """
    if not str(name_or_path).startswith("builtin:") and looks_local(name_or_path) and not Path(name_or_path).exists():
        raise BackendError(f"model path '{name_or_path}' does not exist")
    dev = resolve_device(device)
    dt = resolve_dtype(dtype, dev)
    path = resolve_model_path(str(name_or_path))
    adapter = is_adapter_dir(path)
    base = json.loads((Path(path) / "adapter_config.json").read_text())["base_model_name_or_path"] if adapter else path
    chosen = backend
    if backend == "auto":
        chosen = "unsloth" if dev == "cuda" and importlib.util.find_spec("unsloth") else "transformers"
    info = BackendInfo(chosen, dev, dt, False, False, str(name_or_path), "adapter on " + base if adapter else "")
    log(f"unsloth-grpo: {info.summary()}")
    if chosen == "unsloth":
        _import_unsloth()
        from unsloth import FastLanguageModel

        model, tokenizer = FastLanguageModel.from_pretrained(model_name=path, dtype=torch_dtype(dt), load_in_4bit=False)
        FastLanguageModel.for_inference(model)
        return LoadedModel(model, _prepare_tokenizer(tokenizer), info)
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok_src = path if (Path(path) / "tokenizer_config.json").exists() else base
    tokenizer = AutoTokenizer.from_pretrained(tok_src)
    model = AutoModelForCausalLM.from_pretrained(base, dtype=torch_dtype(dt))
    if adapter:
        from peft import PeftModel

        model = PeftModel.from_pretrained(model, path)
    model.to(dev)
    model.eval()
    return LoadedModel(model, _prepare_tokenizer(tokenizer), info)


def looks_local(name: str) -> bool:
    s = str(name)
    return s.startswith((".", "/", "~")) or os.path.sep in s and os.path.exists(s.split(os.path.sep)[0])
