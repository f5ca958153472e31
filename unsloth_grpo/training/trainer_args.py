"""The ``training:`` section as TRL's own config: ``GRPOConfig`` for GRPO runs, ``SFTConfig`` for SFT stages.

The toolkit declares none of TRL's fields. The keys under ``training:`` are TRL's field names; this
module checks them against the installed TRL's dataclass (a misspelt one gets TRL's closest name),
converts each value to the type TRL declares for it, and hands the whole to TRL's dataclass, whose
own ``__post_init__`` checks it. On top of what the config sets:

- the fields the toolkit decides from another key (:data:`OWNED_ELSEWHERE`: output directory,
  seed, reward weights, vLLM, checkpoint rotation) come from that key;
- the fields that follow the device, dtype and backend of the run come from one function,
  :func:`device_fields`, given the loader's decision;
- an SFT stage takes the fields ``SFTConfig`` has (GRPO-only ones such as ``num_generations``, and
  ``loss_type``, whose GRPO values mean nothing to SFT, are left to the GRPO stages).

::

    args = grpo_args(cfg, loaded.info, weights=[1.0, 0.5])    # the GRPOConfig of a run on this machine
    values, problems = trl_values({"num_iterations": "2"}, GRPO)   # ({"num_iterations": 2}, [])
"""

from __future__ import annotations

import difflib
import functools
from typing import Any, Union

from unsloth_grpo.config import EXPECTED, ConfigError, RecipeConfig, convert_value, format_problems, is_transformers
from unsloth_grpo.training.trl_schema import field_table

GRPO, SFT = "GRPOConfig", "SFTConfig"

#: TRL fields the toolkit sets itself, and the config key that decides each.
OWNED_ELSEWHERE = {
    "output_dir": "output_dir (top level, or --output-dir)",
    "seed": "seed (top level)", "data_seed": "seed (top level)",
    "bf16": "model.dtype", "fp16": "model.dtype",
    "use_cpu": "model.device",
    "reward_weights": "rewards[].weight",
    "save_total_limit": "run.keep_last",
    "save_strategy": "training.save_steps (0 saves only on SIGINT/SIGTERM)",
    "use_vllm": "model.fast_inference or model.vllm_server",
    "vllm_mode": "model.fast_inference or model.vllm_server",
    "vllm_server_base_url": "model.vllm_server",
    "vllm_gpu_memory_utilization": "model.gpu_memory_utilization",
}

#: What the toolkit does with a TRL field beyond passing it on (said after TRL's help in ``--help-config``).
TOOLKIT_NOTES = {
    "optim": "an 8-bit optimizer becomes adamw_torch on CPU (bitsandbytes' need CUDA)",
    "gradient_checkpointing": "with Unsloth, Unsloth's own (offloaded) checkpointing is used instead; off on CPU",
    "save_steps": "0 saves only on SIGINT/SIGTERM",
    "warmup_steps": "default: training.warmup_ratio",
    "report_to": "[] logs to none of them",
    "max_tool_calling_iterations": "with tools, tools.max_tool_calling_iterations is used",
}


# ---------------------------------------------------------------- TRL's dataclasses


def trl_class(kind: str = GRPO) -> type:
    """The installed TRL's ``GRPOConfig`` or ``SFTConfig``. This imports transformers (seconds); a process
    that trains with Unsloth imports Unsloth first (``hardware.backend.prepare_backend``), since
    Unsloth patches transformers and TRL when it is imported."""
    import trl

    return getattr(trl, kind)


# ---------------------------------------------------------------- values: names and types


def trl_values(values: dict[str, Any], kind: str = GRPO, where: str = "training") -> tuple[dict, list[str]]:
    """``values`` (TRL field name -> value as written) as the types TRL's ``kind`` declares.

    Returns the converted values and the problems, one line each: a name TRL does not have (with
    TRL's closest name), a field the toolkit sets from another key, a value of the wrong type.
    Reads TRL's field table (:mod:`unsloth_grpo.training.trl_schema`), so TRL is not imported here.
    """
    fields, out, problems = field_table(kind), {}, []
    for key, value in values.items():
        if key in OWNED_ELSEWHERE:
            problems.append(f"{where}.{key}={value!r}: the toolkit sets this {kind} field from "
                            f"{OWNED_ELSEWHERE[key]}; set that instead and remove {where}.{key}")
        elif key not in fields:
            close = difflib.get_close_matches(key, sorted(fields), n=1)
            hint = f"did you mean '{where}.{close[0]}'? " if close else ""
            problems.append(f"{where}.{key} is not a field of the installed TRL's {kind}; {hint}"
                            "`--help-config` lists them all")
        else:
            try:
                out[key] = _as_kinds(value, fields[key].kinds, f"{where}.{key}")
            except ConfigError as exc:
                problems.append(str(exc))
    return out, problems


def _as_kinds(value: Any, kinds: tuple[str, ...], where: str) -> Any:
    """``value`` as one of the kinds TRL's type for it takes, by pydantic's rules as for the toolkit's own
    sections (a bool is no number here either)."""
    if "any" in kinds:
        return value
    problem = ConfigError(f"{where}: expected {' or '.join(EXPECTED[k] for k in kinds if k != 'none')}, got {value!r}")
    if isinstance(value, bool) and "bool" not in kinds:  # pydantic would read true as 1
        raise problem
    try:
        return convert_value(value, Union[tuple(_TYPES[k] for k in kinds)], where)
    except ConfigError:
        raise problem from None


#: The type of each kind of value in TRL's field table.
_TYPES = {"none": type(None), "bool": bool, "int": int, "float": float, "str": str, "list": list, "dict": dict}


# ---------------------------------------------------------------- the arguments of a run


def device_fields(info, values: dict[str, Any]) -> dict[str, Any]:
    """TRL's fields that follow the run's device, dtype and backend: the one place that sets them.

    ``info`` is the loader's decision (:class:`unsloth_grpo.hardware.backend.BackendInfo`); ``values``
    the run's other TRL fields, whose ``optim`` and ``gradient_checkpointing`` are adjusted to it.
    """
    cpu = info.device == "cpu"
    out: dict[str, Any] = {"bf16": info.dtype == "bf16", "fp16": info.dtype == "fp16", "use_cpu": cpu}
    if "optim" in values:  # bitsandbytes' 8-bit optimizers need CUDA
        out["optim"] = "adamw_torch" if cpu and "8bit" in str(values["optim"]) else values["optim"]
    if "gradient_checkpointing" in values:  # Unsloth checkpoints inside the model; TRL's would repeat it
        out["gradient_checkpointing"] = bool(values["gradient_checkpointing"]) and is_transformers(info.backend) \
            and not cpu
    return out


def trainer_kwargs(cfg: RecipeConfig, info, kind: str = GRPO) -> dict[str, Any]:
    """Keyword arguments of TRL's ``kind`` for ``cfg`` on the decided device; ConfigError on a bad field."""
    t = cfg.training
    given = dict(t.trl)
    if kind == SFT:
        sft = field_table(SFT)
        given = {k: v for k, v in given.items() if k in sft and k != "loss_type"}
    values, problems = trl_values(given, kind)
    if problems:
        raise ConfigError(format_problems(problems))
    kwargs = dict(values)
    # transformers 5 dropped warmup_ratio: a float below 1 in warmup_steps is a share of max_steps
    kwargs.setdefault("warmup_steps", float(t.warmup_ratio) if t.warmup_ratio else 0)
    if kwargs.get("save_steps", 1) <= 0:  # no scheduled saves; the toolkit still saves on SIGINT/SIGTERM
        del kwargs["save_steps"]
        kwargs["save_strategy"] = "no"
    if kwargs.get("report_to") == []:
        kwargs["report_to"] = "none"
    kwargs.update(
        output_dir=cfg.output_dir,
        seed=cfg.seed,
        data_seed=cfg.seed,
        save_total_limit=None,  # checkpoint.py moves each save under checkpoints/ and keeps run.keep_last
        disable_tqdm=True,  # the toolkit prints its own progress line
        **device_fields(info, kwargs),
    )
    return kwargs


def grpo_args(cfg: RecipeConfig, info, *, weights: list[float], checking: bool = False):
    """TRL's ``GRPOConfig`` for this run on the decided device and backend.

    ``checking=True`` builds it without setting up the process (see :func:`_checked`), to run TRL's
    own checks before any model loads.
    """
    from unsloth_grpo.training.distributed import vllm_server_kwargs

    kwargs = trainer_kwargs(cfg, info, GRPO)
    kwargs["reward_weights"] = weights
    if cfg.tools.functions or cfg.tools.environment:  # the tools section owns TRL's tool-loop bound
        kwargs["max_tool_calling_iterations"] = cfg.tools.max_tool_calling_iterations
    if cfg.model.vllm_server:  # generation on a separate `trl vllm-serve`, any number of training processes
        kwargs.update(vllm_server_kwargs(cfg.model.vllm_server))
    elif info.use_vllm and is_transformers(info.backend):
        # without a length vLLM sizes its KV cache for the model's whole context (131k for Llama 3.1);
        # asleep while the model trains, its pool goes back to the card (TRL re-sends the weights on waking)
        kwargs.update(use_vllm=True, vllm_mode="colocate",
                      vllm_gpu_memory_utilization=cfg.model.gpu_memory_utilization,
                      vllm_max_model_length=cfg.model.max_seq_length,
                      vllm_enable_sleep_mode=bool(getattr(info, "vllm_standby", False)))
    return _build(GRPO, kwargs, checking)


def sft_args(cfg: RecipeConfig, info, *, checking: bool = False):
    """TRL's ``SFTConfig`` for an SFT stage: the same fields by the same rule, plus the sequence length."""
    kwargs = trainer_kwargs(cfg, info, SFT)
    kwargs.setdefault("max_length", cfg.model.max_seq_length)
    return _build(SFT, kwargs, checking)


def _build(kind: str, kwargs: dict[str, Any], checking: bool):
    if checking:
        from unsloth_grpo.hardware.launch import detect

        cls = _checked(kind, detect().world_size)
    else:
        cls = trl_class(kind)
    try:
        return cls(**kwargs)
    except (ValueError, TypeError) as exc:  # TRL's (and transformers') own checks in __post_init__
        reason = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise ConfigError(f"training: the installed TRL's {kind} refuses these settings: {reason}") from None


@functools.cache
def _checked(kind: str, world_size: int) -> type:
    """TRL's ``kind`` with the process left alone, for checking a config before any model loads.

    transformers' ``__post_init__`` sets up accelerate's process state for the device it is given
    (and joins the process group under torchrun); built for a check, that state would then hold for
    the run. This subclass runs every check of TRL and transformers, but reports no device and the
    launch's number of processes (what TRL's batch rules count) instead.
    """
    return type(f"Checked{kind}", (trl_class(kind),), {
        "device": property(lambda self: None),
        "world_size": property(lambda self: world_size),
    })


def checking_info(model_name: str):
    """The decision a check builds TRL's config for: nothing device-specific (fp32, no vLLM), which
    transformers accepts on any machine; the run builds it again with the loader's decision."""
    from unsloth_grpo.hardware.backend import BackendInfo

    return BackendInfo("transformers", "cuda", "fp32", False, False, model_name, "checking the config")


__all__ = ["GRPO", "OWNED_ELSEWHERE", "SFT", "TOOLKIT_NOTES", "checking_info", "device_fields", "field_table",
           "grpo_args", "sft_args", "trainer_kwargs", "trl_class", "trl_values"]
