"""The planner: GRPO settings that fit a card, picked with the memory model instead of by crashing.

``plan`` searches generations, completion length and LoRA rank (most wanted first) for the
settings whose estimated peak (:func:`unsloth_grpo.hardware.memory.estimate_memory`) fits the
card with a safety margin; ``check_config`` compares a recipe's estimate with the detected GPU
before anything is loaded::

    from unsloth_grpo.hardware.planner import plan

    p = plan("qwen2.5-1.5b", vram_gb=8)               # settings that fit an 8 GB card
    print(p.overrides_text())                         # training.num_generations=8 ...
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

from unsloth_grpo.config import is_transformers, is_unsloth
from unsloth_grpo.hardware.architecture import (
    BUILTIN_CONFIGS,
    BUILTIN_HUB_IDS,
    DEFAULT_LORA_TARGETS,
    ModelShape,
    UnknownModelError,
    builtin_model_names,
    load_model_config,
    model_display_name,
    model_shape,
)
from unsloth_grpo.hardware.memory import OPTIMIZER_STATE_BYTES, MemoryEstimate, estimate_memory, vllm_utilization_for
from unsloth_grpo.hardware.profiles import (
    HardwareError,
    choice_for_config,
    from_gpu,
    standby_utilization,
    training_dtype,
)

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
    gens, comps, quants, ranks = _search_space(
        shape, max_prompt_length=max_prompt_length, num_generations=num_generations,
        max_completion_length=max_completion_length, max_generations=max_generations, max_completion=max_completion,
        max_seq_length=max_seq_length, load_in_4bit=load_in_4bit, lora_rank=lora_rank, use_vllm=use_vllm,
        backend=backend)
    cheap_q = True if True in quants else quants[0]
    candidate = _Candidate(shape=shape, vram_gb=vram_gb, dtype=dtype, backend=backend, use_vllm=use_vllm,
                           vllm_standby=vllm_standby, max_prompt_length=max_prompt_length,
                           lora_targets=lora_targets, beta=beta, optimizer=optimizer)

    found = _first_fit(candidate, gens, comps, ranks, quants, cheap_q, budget)
    if found is not None:
        g, c, b, r, q, est, util = found
        return Plan(
            model=name, vram_gb=vram_gb, fits=True, budget_gb=budget, num_generations=g,
            per_device_train_batch_size=b, gradient_accumulation_steps=g // b,
            max_prompt_length=max_prompt_length, max_completion_length=c, lora_rank=r,
            load_in_4bit=q, use_vllm=use_vllm, gpu_memory_utilization=util, dtype=dtype,
            backend=backend, estimate=est, notes=notes + est.notes,
            vllm_standby=vllm_standby,
        )

    result = _unfit_plan(candidate, name, budget=budget, margin=margin, notes=notes, g_min=min(gens),
                         c_min=min(comps), r_min=min(ranks), cheap_q=cheap_q)
    if alternatives:
        forced_16bit = load_in_4bit is False and not (use_vllm and is_transformers(backend))
        _attach_alternative(result, shape, vram_gb, dict(
            compute_capability=compute_capability, backend=backend, use_vllm=use_vllm, vllm_standby=vllm_standby,
            max_prompt_length=max_prompt_length, max_generations=max_generations, max_completion=max_completion,
            lora_targets=lora_targets, beta=beta, optimizer=optimizer, margin=margin, max_seq_length=max_seq_length,
        ), forced_16bit=forced_16bit, need=_card_needed(candidate, result, margin, forced_16bit))
    return result


def _search_space(shape: ModelShape, *, max_prompt_length: int, num_generations: int | None,
                  max_completion_length: int | None, max_generations: int, max_completion: int,
                  max_seq_length: int | None, load_in_4bit: bool | None, lora_rank: int | None, use_vllm: bool,
                  backend: str) -> tuple[list[int], list[int], list[bool], list[int]]:
    """What :func:`plan` searches, most wanted first: generations, completion lengths, 4-bit or not, LoRA
    ranks; a setting passed explicitly is the only one of its kind."""
    limit = max_seq_length or shape.max_position_embeddings or 10**9
    gens = [num_generations] if num_generations else [g for g in PLAN_GENERATIONS if g <= max_generations]
    comps = ([max_completion_length] if max_completion_length else
             [c for c in PLAN_COMPLETIONS if c <= max_completion and max_prompt_length + c <= limit])
    if not gens or not comps:
        raise ValueError(f"nothing to search: generations {gens}, completions {comps} "
                         f"(max_seq_length {limit}, prompt {max_prompt_length})")
    quants = [load_in_4bit] if load_in_4bit is not None else [False, True]
    if use_vllm and is_transformers(backend):
        if load_in_4bit:
            raise ValueError("the transformers backend generates with vLLM only from 16-bit weights; "
                             "plan with load_in_4bit=False, or without vLLM")
        quants = [False]
    ranks = [lora_rank] if lora_rank is not None else list(PLAN_RANKS)
    return gens, comps, quants, ranks


@dataclass(frozen=True)
class _Candidate:
    """The estimate of one setting :func:`plan` tries: what it keeps fixed, called with what it searches."""

    shape: ModelShape
    vram_gb: float
    dtype: str
    backend: str
    use_vllm: bool
    vllm_standby: bool
    max_prompt_length: int
    lora_targets: Any
    beta: float
    optimizer: str

    def __call__(self, g: int, c: int, q: bool, r: int, b: int) -> tuple[MemoryEstimate, float | None]:
        """The estimate for ``g`` generations of ``c`` tokens, 4-bit ``q``, LoRA rank ``r`` and batch ``b``,
        and the vLLM pool's share of the card it was made with."""
        util = None
        if self.use_vllm and self.vllm_standby and is_unsloth(self.backend):
            util = standby_utilization(self.vram_gb)
        elif self.use_vllm:
            util = min(0.95, vllm_utilization_for(self.shape, self.vram_gb, gen_batch=g,
                                                  seq_len=self.max_prompt_length + c, backend=self.backend,
                                                  quantization="4bit" if q else None, dtype=self.dtype))
        est = estimate_memory(
            self.shape, load_in_4bit=q, lora_rank=r, lora_targets=self.lora_targets, num_generations=g,
            per_device_train_batch_size=b, gradient_accumulation_steps=g // b,
            max_prompt_length=self.max_prompt_length, max_completion_length=c, beta=self.beta,
            use_vllm=self.use_vllm, gpu_memory_utilization=util,
            gpu_total_gb=self.vram_gb if self.use_vllm else None, vllm_standby=self.vllm_standby,
            backend=self.backend, optimizer=self.optimizer, dtype=self.dtype,
        )
        return est, util


def _first_fit(candidate: _Candidate, gens: list[int], comps: list[int], ranks: list[int], quants: list[bool],
               cheap_q: bool, budget: float) -> tuple[int, int, int, int, bool, MemoryEstimate, float | None] | None:
    """The most wanted setting within ``budget`` (with a vLLM pool that holds what it must), as
    ``(generations, completion, batch, rank, 4-bit, estimate, pool share)``; None when none is."""
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
                            return g, c, b, r, q, est, util
    return None


def _unfit_plan(candidate: _Candidate, name: str, *, budget: float, margin: float, notes: list[str], g_min: int,
                c_min: int, r_min: int, cheap_q: bool) -> Plan:
    """The plan of the smallest setting tried, when nothing fits: ``fits=False`` and the reason."""
    vram_gb = candidate.vram_gb
    est, util = candidate(g_min, c_min, cheap_q, r_min, 1)
    reason = (f"even {g_min} generations x {c_min} tokens, batch 1, "
              f"{'4-bit' if cheap_q else '16-bit'}, LoRA r={r_min} needs {est.total_gb:.1f} GB, "
              f"above the {budget:.1f} GB budget ({vram_gb:g} GB minus {margin:.0%} margin)")
    pool_short = [n for n in est.notes if "vLLM pool" in n]
    if est.total_gb <= budget and pool_short:
        reason = f"the vLLM pool cannot hold the weights and the KV cache ({pool_short[0]})"
    return Plan(
        model=name, vram_gb=vram_gb, fits=False, budget_gb=budget, num_generations=g_min,
        per_device_train_batch_size=1, gradient_accumulation_steps=g_min,
        max_prompt_length=candidate.max_prompt_length, max_completion_length=c_min, lora_rank=r_min,
        load_in_4bit=cheap_q, use_vllm=candidate.use_vllm, gpu_memory_utilization=util, dtype=candidate.dtype,
        backend=candidate.backend, estimate=est, notes=notes, reason=reason, vllm_standby=candidate.vllm_standby,
    )


def _card_needed(candidate: _Candidate, result: Plan, margin: float, forced_16bit: bool) -> str:
    """The card the smallest setting of an unfit plan needs (and in 4-bit too, when 16-bit was forced)."""
    need = f"{result.model} needs a card of at least {result.estimate.total_gb / (1 - margin):.1f} GB"
    if forced_16bit:
        est4, _ = candidate(result.num_generations, result.max_completion_length, True, result.lora_rank, 1)
        need += f" in 16-bit ({est4.total_gb / (1 - margin):.1f} GB in 4-bit)"
    return need


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
                        decision: Any = None, settings: Mapping[str, Any] | None = None) -> MemoryEstimate:
    """:func:`estimate_memory` for a recipe config (raises UnknownModelError for unknown models);
    ``decision`` as :func:`settings_from_config` takes it, ``settings`` the keywords when the caller
    adjusted what :func:`settings_from_config` gave."""
    if settings is None:
        settings = settings_from_config(recipe_cfg, gpu, decision=decision)
    return estimate_memory(recipe_cfg.model.name, **settings)


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
