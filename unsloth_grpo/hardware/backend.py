"""The one place that decides how a model is loaded: Unsloth, or plain transformers + peft.

``unsloth`` patches transformers, peft and TRL when it is imported, so it must be imported
before them. Nothing else in this package imports those libraries at module level. A run decides
once, in its pre-load check (:func:`unsloth_grpo.training.checks.check_before_loading`):
:func:`decide` gives a frozen :class:`Decision` (backend, device, dtype, 4-bit, vLLM, the card),
:func:`use_backend` imports Unsloth when it is the one chosen, and :func:`load_model` loads with
that decision. Every model is loaded by :func:`load`: a run's (:func:`load_model`), a saved model to
generate with (:func:`load_for_inference`) and the export's (:mod:`unsloth_grpo.export`). The backend rule itself is :func:`backend_name` (with :func:`auto_backend` for
``auto``), which the planner, ``--preset auto``, the doctor's report and inference apply too.

Example::

    from unsloth_grpo.config import ModelConfig, LoraSettings
    loaded = load_model(ModelConfig(name="builtin:tiny"), LoraSettings(r=16))
    print(loaded.info.summary())   # backend=unsloth device=cpu dtype=fp32 4bit=off vllm=off
"""

from __future__ import annotations

import importlib.util
import json
import os
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from unsloth_grpo.config import is_transformers, is_unsloth
from unsloth_grpo.hardware.profiles import (
    CPU,
    CardProfile,
    HardwareError,
    VllmChoice,
    choice_for_config,
    cpu_vllm_ignored,
    measure,
    set_standby_environment,
    training_dtype,
)
from unsloth_grpo.models.ref import BackendError, model_ref
from unsloth_grpo.models.tokenizer import prepare_tokenizer

ALL_LINEAR = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


@dataclass(frozen=True)
class BackendInfo:
    backend: str
    device: str
    dtype: str
    load_in_4bit: bool
    use_vllm: bool
    model_name: str
    reason: str = ""
    #: vLLM sleeps while the model trains (Unsloth's standby, or TRL's sleep mode on transformers).
    vllm_standby: bool = False
    #: The LoRA adapter goes to a vLLM server over HTTP after each step (a CPU run with ``model.vllm_server``).
    vllm_adapter_sync: bool = False

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
    #: The run directory a ``train(cfg, loaded=...)`` trained this model's adapter into, else None: a second
    #: train() of it is refused (it would continue that adapter as if it were new). Code that puts the
    #: adapter back to where it started (the controls' arms) sets it to None again.
    trained_in: str | None = None


def _world_size() -> int:
    from unsloth_grpo.hardware.launch import detect

    return detect().world_size


def auto_backend(unsloth_importable: bool | None = None, world_size: int | None = None,
                 vllm_server: str | None = None) -> tuple[str, str]:
    """The rule behind ``backend: auto``, and why; imports nothing (the doctor and planner use it too).

    Unsloth when it is importable and this is a single process (Unsloth's fast path is
    single-GPU) that generates in-process; otherwise plain transformers + peft. With a
    ``vllm_server`` the transformers backend is chosen: Unsloth's trainer always generates with
    its own colocated vLLM and would ignore the server.
    """
    if unsloth_importable is None:
        unsloth_importable = importlib.util.find_spec("unsloth") is not None
    world_size = _world_size() if world_size is None else world_size
    if world_size > 1:
        return "transformers", f"{world_size} processes: Unsloth is single-GPU"
    if vllm_server:
        return "transformers", "model.vllm_server is set: Unsloth's trainer ignores a vLLM server"
    if unsloth_importable:
        return "unsloth", "unsloth is installed"
    return "transformers", "unsloth is not installed"


def backend_name(requested: str = "auto", *, vllm_server: str | None = None, strict: bool = True) -> tuple[str, str]:
    """The backend ``model.backend=requested`` runs on, and why: the one rule, used by the loader's
    decision, the planner, ``--preset auto`` and inference. Imports nothing.

    ``auto`` follows :func:`auto_backend`. ``strict`` (a run on this machine) raises BackendError
    for an explicit backend that cannot run here; without it (a plan, maybe for another machine's
    card) an explicit backend is taken as asked.
    """
    from unsloth_grpo.config import BACKENDS

    if requested not in BACKENDS:
        raise BackendError(f"model.backend='{requested}' is not one of {', '.join(BACKENDS)}")
    if requested == "auto":
        return auto_backend(vllm_server=vllm_server)
    if is_transformers(requested) or not strict:
        return requested, "requested"
    if importlib.util.find_spec("unsloth") is None:
        raise BackendError("model.backend='unsloth' but unsloth is not installed: "
                           "pip install 'unsloth-grpo[unsloth]', or set model.backend=auto")
    if _world_size() > 1:
        raise BackendError(
            f"model.backend='unsloth' under {_world_size()} processes: Unsloth's fast path is single-GPU. "
            "Set model.backend=transformers (or auto) to train data-parallel with accelerate/torchrun."
        )
    if vllm_server:
        raise BackendError("model.backend='unsloth' with model.vllm_server: Unsloth's trainer generates with "
                           "its own in-process vLLM and ignores the server; set model.backend=transformers")
    return "unsloth", "requested"


def unsloth_imported() -> bool:
    """Whether ``unsloth`` was imported in this process (it patched transformers, peft and TRL then, and
    read ``UNSLOTH_VLLM_STANDBY``)."""
    import sys

    return "unsloth" in sys.modules


def select_backend(requested: str = "auto", *, vllm_server: str | None = None) -> tuple[str, str]:
    """Choose 'unsloth' or 'transformers' and say why; imports Unsloth when it is chosen."""
    name, why = backend_name(requested, vllm_server=vllm_server)
    if is_unsloth(name):
        _import_unsloth()
    return name, why


@dataclass(frozen=True)
class Decision:
    """Everything the loader decides about a run on one card, before anything is loaded.

    Made once per run (:func:`unsloth_grpo.training.checks.check_before_loading`) and handed to
    whatever needs it (TRL's arguments, the memory warnings, the loader), which never decide again.
    """

    backend: str
    backend_reason: str
    device: str
    dtype: str
    load_in_4bit: bool
    vllm: VllmChoice
    notes: tuple[str, ...] = ()
    #: The card the run trains on (the CPU profile on a CPU, or with ``model.device: cpu``).
    card: CardProfile = CPU

    @classmethod
    def saved_model(cls, backend: str, device: str, dtype: str, load_in_4bit: bool = False,
                    reason: str = "") -> "Decision":
        """How a saved model (a run's adapter, a merged model) is loaded to generate or export: no vLLM
        engine, and ``reason`` what the info says about it."""
        return cls(backend, reason, device, dtype, load_in_4bit, VllmChoice(False, "a saved model: no vLLM engine"))

    def info(self, model_name: str) -> BackendInfo:
        return BackendInfo(self.backend, self.device, self.dtype, self.load_in_4bit, self.vllm.use, model_name,
                           "; ".join([self.backend_reason, *self.notes]),
                           vllm_standby=self.vllm.use and self.vllm.standby, vllm_adapter_sync=self.vllm.adapter_sync)


def decide(model_cfg, profile: CardProfile | None = None, *, backend: tuple[str, str] | None = None,
           vllm: tuple[str | None, bool] | None = None, bnb_importable: bool | None = None,
           environment: tuple[dict, bool] | None = None) -> Decision:
    """Backend, device, dtype, 4-bit and vLLM for ``model_cfg`` on ``profile`` (measured when None).

    A pure function of its inputs: ``backend`` (name, why), ``vllm`` (installed version, plugin)
    and ``bnb_importable`` are looked up when not given; ``environment`` is (environment
    variables, whether unsloth is imported), this process's when the card is measured and a
    clean one for a given ``profile``. Raises BackendError for a setting the card cannot run
    (bf16 below compute capability 8.0, ``device: cuda`` or ``fast_inference: on`` without what
    they need).
    """
    if profile is None:
        profile = measure()
        if environment is None:
            environment = (dict(os.environ), unsloth_imported())
    env, imported = environment if environment is not None else ({}, False)
    name, why = backend if backend is not None else backend_name(model_cfg.backend, vllm_server=model_cfg.vllm_server)
    if model_cfg.device == "cuda" and not profile.cuda:
        raise BackendError("model.device='cuda' but no CUDA GPU is visible; set model.device=auto")
    card = profile if model_cfg.device != "cpu" else CPU
    try:
        dtype = training_dtype(card, model_cfg.dtype)
    except HardwareError as exc:
        raise BackendError(str(exc)) from None
    notes = []
    load_4bit = bool(model_cfg.load_in_4bit)
    if load_4bit and not card.cuda:
        load_4bit = False
        notes.append("4-bit needs CUDA; full precision on CPU")
    if load_4bit and is_transformers(name):
        if bnb_importable is None:
            bnb_importable = importlib.util.find_spec("bitsandbytes") is not None
        if not bnb_importable:
            load_4bit = False
            notes.append("bitsandbytes missing; 16-bit weights")
    choice = choice_for_config(model_cfg, card, backend=name, vllm=vllm, world_size=_world_size(), env=env,
                               unsloth_imported=imported)
    if choice.error:  # a server's own sentence, or what fast_inference='on' lacks
        raise BackendError(choice.error if choice.error.startswith("model.vllm_server=")
                           else f"model.fast_inference='on' but {choice.error}")
    if not choice.use and model_cfg.fast_inference == "auto" and card.cuda and not model_cfg.vllm_server:
        notes.append(f"no vLLM: {choice.reason}")
    notes += ignored_settings(model_cfg, name, choice, cuda=card.cuda)
    return Decision(name, why, "cuda" if card.cuda else "cpu", dtype, load_4bit, choice, tuple(notes), card)


def ignored_settings(model_cfg, backend: str, choice: VllmChoice, *, cuda: bool = True) -> list[str]:
    """Settings of ``model_cfg`` that the run will not use, each with what is used instead (``cuda``:
    whether the run trains on a CUDA card)."""
    from unsloth_grpo.config import ModelConfig

    default = ModelConfig().gpu_memory_utilization
    if choice.use and not cuda:  # vLLM's CPU build: no card to share, nothing to put to sleep
        return cpu_vllm_ignored(model_cfg, default)
    if is_unsloth(backend) and choice.use and choice.standby and model_cfg.gpu_memory_utilization != default:
        return [f"model.gpu_memory_utilization={model_cfg.gpu_memory_utilization:g} is not used: with vLLM standby "
                f"Unsloth sets the pool itself ({choice.gpu_memory_utilization:.2f} of this card); set "
                "model.vllm_standby=off to size it yourself"]
    return []


def prepare_backend(model_cfg, profile: CardProfile | None = None, *,
                    environment: tuple[dict, bool] | None = None) -> Decision:
    """:func:`decide` for this machine (its card measured when ``profile`` is None), then
    :func:`use_backend`. ``environment`` as :func:`decide` takes it."""
    return use_backend(decide(model_cfg, profile, environment=environment))


def use_backend(decision: Decision) -> Decision:
    """Act on a decision before anything else loads: import Unsloth when it is the backend, with
    ``UNSLOTH_VLLM_STANDBY`` set first (Unsloth reads it at import, and patches transformers, peft
    and TRL then)."""
    global _STANDBY_SET_HERE
    if is_unsloth(decision.backend):
        _STANDBY_SET_HERE = set_standby_environment(decision.vllm) or _STANDBY_SET_HERE  # read at import
        _import_unsloth()
    return decision


#: Whether this process set UNSLOTH_VLLM_STANDBY (a failed engine start takes it back).
_STANDBY_SET_HERE = False


def _import_unsloth() -> None:
    import sys
    import warnings

    if unsloth_imported():
        return
    late = [m for m in ("trl", "transformers", "peft") if m in sys.modules]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import unsloth  # noqa: F401  (patches transformers/peft/TRL on import)
    if late:
        print(f"note: {', '.join(late)} was imported before unsloth; Unsloth's speed-ups may be partial")


def resolve_device(requested: str = "auto", profile: CardProfile | None = None) -> str:
    """'cuda' or 'cpu' for a ``model.device`` setting on ``profile`` (this machine's when None)."""
    if requested == "cpu":
        return "cpu"
    profile = measure() if profile is None else profile
    if profile.cuda:
        return "cuda"
    if requested == "cuda":
        raise BackendError("model.device='cuda' but no CUDA GPU is visible; set model.device=auto")
    return "cpu"


def resolve_dtype(requested: str, device: str, profile: CardProfile | None = None) -> str:
    """bf16 from compute capability 8.0, fp16 on older GPUs (T4), fp32 on CPU (:func:`training_dtype`)."""
    if device == "cpu":
        return training_dtype(CPU, requested)
    try:
        return training_dtype(measure() if profile is None else profile, requested)
    except HardwareError as exc:
        raise BackendError(str(exc)) from None


def torch_dtype(name: str):
    import torch

    return {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[name]


def _targets(lora) -> list[str] | str:
    mods = list(lora.target_modules)
    if mods == ["all-linear"]:
        return ALL_LINEAR
    return mods


def load_model(model_cfg, lora_cfg=None, *, seed: int = 3407, gradient_checkpointing: bool = True,
               log=print, profile: CardProfile | None = None, decision: Decision | None = None) -> LoadedModel:
    """A run's model: the base of ``model_cfg`` with a new LoRA adapter (when ``lora_cfg`` is given).

    Every choice comes from ``decision``, the run's (:func:`prepare_backend` made it before any
    library was imported), or when None from :func:`prepare_backend` now, for this machine's card
    (or ``profile``). Prints the chosen backend, device, dtype and 4-bit/vLLM state once, then
    loads with :func:`load`.
    """
    if decision is None:
        decision = prepare_backend(model_cfg, profile)
    path = model_ref(model_cfg.name).path()
    info = decision.info(model_cfg.name)
    log(f"unsloth-grpo: {info.summary()}")
    return load(path, decision, purpose="train", lora=lora_cfg, model_cfg=model_cfg, seed=seed,
                gradient_checkpointing=gradient_checkpointing, info=info, log=log)


#: What a model is loaded for, and what :func:`load` does beyond reading the weights:
#: ``train``: a new LoRA adapter attached, Unsloth's vLLM engine started when the decision says so;
#: ``generate``: ready to generate (eval mode on the decision's device, Unsloth's inference mode);
#: ``merge``: the weights and tokenizer as saved, nothing prepared, for the export to write out again.
PURPOSES = ("train", "generate", "merge")


def load(name: str, decision: Decision, *, adapter: str | os.PathLike | None = None, purpose: str = "train",
         lora=None, model_cfg=None, seed: int = 3407, gradient_checkpointing: bool = True,
         info: BackendInfo | None = None, log=print) -> LoadedModel:
    """The one model loader: training, evaluation and inference, and export all load through here.

    ``name`` is the weights (a resolved path or a hub id), ``adapter`` a LoRA adapter directory laid
    on them (Unsloth reads the adapter's own base; transformers puts it on ``name`` with peft).
    Backend, device, dtype, 4-bit and vLLM are ``decision``'s; ``purpose`` (:data:`PURPOSES`) says
    what the model is for. ``lora`` (a LoRA section), ``model_cfg`` (the run's model section:
    sequence length, remote code), ``seed`` and ``gradient_checkpointing`` are a training's. ``info``
    is what the loaded model reports (``decision``'s for ``name`` when None); a vLLM engine that does
    not start gives back a new one that says so.
    """
    if purpose not in PURPOSES:
        raise ValueError(f"purpose={purpose!r}: one of {', '.join(PURPOSES)}")
    info = decision.info(str(name)) if info is None else info
    if is_unsloth(decision.backend):
        model, tokenizer, info = _load_unsloth(str(name), decision, info, adapter, purpose, lora, model_cfg, seed,
                                               gradient_checkpointing, log)
    else:
        model, tokenizer = _load_transformers(str(name), info, adapter, purpose, lora, model_cfg, seed,
                                              gradient_checkpointing)
    if purpose == "merge":  # written back out as it was read: the export's tokenizer is the run's
        return LoadedModel(model, tokenizer, info)
    return LoadedModel(model, prepare_tokenizer(tokenizer, model), info)


def _unsloth_kwargs(path: str, info: BackendInfo, choice: VllmChoice, purpose: str, lora, model_cfg) -> dict:
    """``FastLanguageModel.from_pretrained``'s keywords: a training's settings, or only what a saved
    model needs (Unsloth's defaults for the rest, as inference and export always had them)."""
    kwargs: dict[str, Any] = dict(model_name=path, load_in_4bit=info.load_in_4bit)
    if info.dtype != "auto":  # "auto": Unsloth picks for the card (the export's merge, which writes 16-bit)
        kwargs["dtype"] = torch_dtype(info.dtype)
    if purpose == "train":
        kwargs.update(max_seq_length=model_cfg.max_seq_length, fast_inference=info.use_vllm,
                      trust_remote_code=model_cfg.trust_remote_code)
    if info.use_vllm:
        kwargs["max_lora_rank"] = (lora.max_lora_rank or lora.r) if lora else 16
        kwargs["gpu_memory_utilization"] = choice.gpu_memory_utilization
    return kwargs


def _load_unsloth(name, decision, info, adapter, purpose, lora, model_cfg, seed, gradient_checkpointing, log):
    if purpose != "train":  # a run imported it when it decided (use_backend); the others decide here
        _import_unsloth()
    from unsloth import FastLanguageModel

    kwargs = _unsloth_kwargs(str(adapter or name), info, decision.vllm, purpose, lora, model_cfg)
    failure = None
    try:
        model, tokenizer = FastLanguageModel.from_pretrained(**kwargs)
    except Exception as exc:  # noqa: BLE001 - any engine start failure (attention backend, memory, plugin)
        if not (info.use_vllm and decision.vllm.fallback):
            raise
        failure = f"{type(exc).__name__}: {(str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]}"
    # Reloaded outside the except block: until it ends, the exception's traceback keeps the frames of
    # the half-built engine alive, and with them its memory.
    if failure is not None:
        info = without_vllm(info, failure, log)
        if os.environ.get("UNSLOTH_VLLM_STANDBY") == "1" and _STANDBY_SET_HERE:
            os.environ.pop("UNSLOTH_VLLM_STANDBY")  # ours, for an engine that no longer exists
        kwargs.update(fast_inference=False)
        kwargs.pop("max_lora_rank", None)
        kwargs.pop("gpu_memory_utilization", None)
        model, tokenizer = FastLanguageModel.from_pretrained(**kwargs)
    if lora is not None:
        model = FastLanguageModel.get_peft_model(
            model,
            r=lora.r,
            lora_alpha=lora.alpha,
            lora_dropout=lora.dropout,
            target_modules=_targets(lora),
            use_gradient_checkpointing="unsloth" if gradient_checkpointing else False,
            random_state=seed,
        )
    if purpose == "generate":
        FastLanguageModel.for_inference(model)
    return model, tokenizer, info


def without_vllm(info: BackendInfo, failure: str, log=print, *, record: bool = True) -> BackendInfo:
    """After vLLM's engine failed to start (``failure``, one line): say so, give its memory back, and
    return the info of a model that generates without vLLM (a new one; ``info`` is not changed).
    ``record`` adds why to the info's reason (the loader's fallback does; the trainer's never did)."""
    log(f"unsloth-grpo: vLLM did not start ({failure}); generating without vLLM "
        "(set model.fast_inference=off to skip the attempt)")
    release_engine_memory()
    reason = "; ".join(filter(None, [info.reason, "vLLM failed to start, generating without it"])) if record \
        else info.reason
    return replace(info, use_vllm=False, vllm_standby=False, reason=reason)


def _nf4(dtype: str):
    """The 4-bit quantization a run's transformers load uses (and an evaluation of its adapter again)."""
    from transformers import BitsAndBytesConfig

    return BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_use_double_quant=True,
                              bnb_4bit_compute_dtype=torch_dtype(dtype))


def _placement(name: str, info: BackendInfo, purpose: str) -> dict:
    """Quantization and device keywords for ``from_pretrained``: 4-bit weights are placed while they
    load (``.to()`` refuses them), a run's on its own process's card."""
    if purpose == "train":
        if not info.load_in_4bit:
            return {}
        from unsloth_grpo.hardware.launch import detect

        return {"quantization_config": _nf4(info.dtype), "device_map": {"": detect().local_rank}}
    kwargs: dict[str, Any] = {}
    if info.load_in_4bit and not model_ref(name).prequantized:  # a pre-quantized checkpoint says so in its own config
        kwargs["quantization_config"] = _nf4(info.dtype)
    if info.device == "cuda" and (info.load_in_4bit or model_ref(name).prequantized):
        kwargs["device_map"] = {"": 0}
    return kwargs


def _load_transformers(name, info, adapter, purpose, lora, model_cfg, seed, gradient_checkpointing):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    # only a run passes trust_remote_code (its model section's); a saved model loads with the libraries' default
    remote = {"trust_remote_code": model_cfg.trust_remote_code} if model_cfg is not None else {}
    # the tokenizer saved beside an adapter wins, so the chat template travels with it
    beside = adapter is not None and (Path(adapter) / "tokenizer_config.json").is_file()
    tokenizer = AutoTokenizer.from_pretrained(str(adapter) if beside else name, **remote)
    placement = _placement(name, info, purpose)
    model = AutoModelForCausalLM.from_pretrained(name, dtype=torch_dtype(info.dtype), **remote, **placement)
    if lora is not None:
        from peft import LoraConfig, get_peft_model, prepare_model_for_kbit_training

        if info.load_in_4bit:
            model = prepare_model_for_kbit_training(model, use_gradient_checkpointing=gradient_checkpointing)
        torch.manual_seed(seed)
        model = get_peft_model(model, LoraConfig(
            r=lora.r, lora_alpha=lora.alpha, lora_dropout=lora.dropout,
            target_modules=_targets(lora), task_type="CAUSAL_LM",
        ))
    if adapter is not None:
        from peft import PeftModel

        model = PeftModel.from_pretrained(model, str(adapter))
    if purpose == "generate":
        if "device_map" not in placement:
            model.to(info.device)
        model.eval()
    return model, tokenizer


def release_engine_memory() -> None:
    """Give back what a vLLM engine that failed to start still holds: vLLM's distributed state (its
    own cleanup, when vLLM was imported), unreferenced objects, and torch's cached blocks."""
    import gc
    import sys

    if "vllm" in sys.modules:
        try:
            from vllm.distributed.parallel_state import cleanup_dist_env_and_memory

            cleanup_dist_env_and_memory()
        except Exception:  # noqa: BLE001 - best effort: another vLLM layout, or nothing to clean
            pass
    gc.collect()
    try:
        import torch

        if torch.cuda.is_available():
            torch.cuda.empty_cache()
    except ImportError:
        pass




def is_adapter_dir(path: str | os.PathLike) -> bool:
    return (Path(path) / "adapter_config.json").exists()


def trained_in_4bit(adapter: str | os.PathLike, base: str | None = None, *, as_loaded: bool = True) -> bool:
    """Whether the run that saved ``adapter`` trained on 4-bit weights: its ``run_info.json`` (what the
    loader did), else its ``config.yaml`` (what it asked for), else a pre-quantized ``base`` name.

    ``as_loaded=False`` reads only what the run asked for (``config.yaml``): the export's rule, which
    loads a run asked to train in 4-bit in 4-bit even where the loader gave it 16-bit weights (a CPU).
    """
    import yaml

    here = Path(adapter)
    for d in (here, *here.parents[:3]):  # the run directory of an adapter or of one of its checkpoints
        info = d / "run_info.json"
        if as_loaded and info.is_file():
            try:
                return bool(json.loads(info.read_text())["backend"]["load_in_4bit"])
            except (ValueError, KeyError, TypeError):
                pass
        cfg = d / "config.yaml"
        if cfg.is_file():
            return bool(((yaml.safe_load(cfg.read_text()) or {}).get("model") or {}).get("load_in_4bit"))
    return bool(base) and model_ref(base).prequantized


def load_for_inference(name_or_path: str, *, backend: str = "transformers", device: str = "auto",
                       dtype: str = "auto", log=print, profile: CardProfile | None = None) -> LoadedModel:
    """Load a base model, a LoRA adapter directory, a merged model or ``builtin:tiny`` for generation.

    Decides backend, device, dtype and 4-bit for a saved model, then loads with :func:`load`. An
    adapter directory is loaded on top of the base model named in its ``adapter_config.json`` (the
    tokenizer saved beside the adapter wins, so the chat template travels with it).
    """
    from unsloth_grpo.hardware.doctor.probes import hub_model_problem

    ref = model_ref(str(name_or_path))
    unreachable = hub_model_problem(ref.hub_id) if ref.hub_id else None  # said now, not after the hub's retries
    problem = "; ".join(unreachable) if unreachable else ref.local_problem()
    if problem is not None:
        raise BackendError(problem)
    profile = measure() if profile is None else profile
    dev = resolve_device(device, profile)
    dt = resolve_dtype(dtype, dev, profile)
    path = ref.path()
    adapter = is_adapter_dir(path)
    base = json.loads((Path(path) / "adapter_config.json").read_text())["base_model_name_or_path"] if adapter else path
    base = model_ref(base).path()  # an adapter of the smoke run names builtin:tiny
    # the training rule; on a CPU ``auto`` generates with transformers (Unsloth's CPU fallback trains,
    # its fast generation path needs CUDA)
    chosen = backend_name(backend, strict=False)[0] if backend != "auto" or dev == "cuda" else "transformers"
    # an adapter is evaluated on the weights it was trained on: a 4-bit run's base loads in 4-bit again
    four = adapter and trained_in_4bit(path, base)
    note = "adapter on " + base if adapter else ""
    if four and dev == "cpu":
        four = False
        note += "; trained on 4-bit weights, loaded in 16-bit here (4-bit needs CUDA): close to, not exactly, the trained model"
    decision = Decision.saved_model(chosen, dev, dt, bool(four), note)
    info = decision.info(str(name_or_path))
    log(f"unsloth-grpo: {info.summary()}")
    # Unsloth reads the adapter's base itself; transformers lays the adapter on it with peft
    return load(base, decision, adapter=path if adapter else None, purpose="generate", info=info, log=log)
