"""A task's recipe: its default config and named presets, and how a run's config is resolved from them.

Each task module (``unsloth_grpo/tasks/<task>.py``) declares its ``RECIPE`` beside its data, grader and
rewards; ``python -m unsloth_grpo.recipes.<task>`` hands it to the command line
(:func:`unsloth_grpo.cli.recipe.run_recipe`). The layering is, later wins:

    recipe defaults  <  --preset NAME  <  --config FILE.yaml  <  --output-dir  <  key=value overrides

The preset builders every task shares (:func:`smoke_preset`, :func:`real_model_preset`) and the table
of presets that run on a CPU live here too.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field

from unsloth_grpo.config import ConfigError, RecipeConfig, load_config, merge_dicts, parse_override


@dataclass
class Recipe:
    """A task's defaults and named presets (each preset is a partial config dict)."""

    name: str
    defaults: dict
    presets: dict[str, dict] = field(default_factory=dict)
    description: str = ""

    def resolve(self, *, preset: str | None = None, config: str | os.PathLike | None = None,
                output_dir: str | os.PathLike | None = None, overrides: list[str] | str | dict | None = None,
                gpu: dict | None = None) -> RecipeConfig:
        """The config for these arguments. ``preset='auto'`` plans for the detected GPU (or ``gpu``).

        ``overrides``: ``'section.key=value'`` strings (a list, or one string), or a dict of values by
        dotted key (``{"training.max_steps": 4}``); ``output_dir`` a string or a path.
        """
        base = dict(self.defaults)
        extra: list[str | dict] = []
        if output_dir is not None:
            if not isinstance(output_dir, (str, os.PathLike)):
                raise TypeError(f"output_dir: expected a str or a path, got {type(output_dir).__name__} "
                                f"({output_dir!r})")
            extra.append({"output_dir": os.fspath(output_dir)})  # a path as typed, never read as YAML
        overrides = _as_overrides(overrides)
        extra += overrides
        if preset == AUTO_PRESET:
            # the model and the vLLM settings may come from the config file or an override: resolve them first
            alternatives = " or ".join(f"--preset {p} ({what})" for p, what in self.cpu_presets().items())
            base = merge_dicts(base, _auto_preset(load_config(config, base=base, overrides=extra), gpu,
                                                  cpu_alternatives=alternatives))
        elif preset is not None:
            if preset not in self.presets:
                raise ConfigError(f"--preset '{preset}' is unknown for the {self.name} recipe; "
                                  f"choose one of: {', '.join([*self.presets, AUTO_PRESET])}")
            base = merge_dicts(base, self.presets[preset])
        cfg = load_config(config, base=base, overrides=extra)
        _refuse_overrides_stages_ignore(cfg, overrides or [])
        return _unquantized_name(cfg) if preset == AUTO_PRESET else cfg

    def cpu_presets(self) -> dict[str, str]:
        """This recipe's presets that run on a CPU, each with what it trains there (the messages that
        meet a machine without a GPU offer them)."""
        return {name: what for name, what in CPU_PRESETS.items() if name in self.presets}


#: The preset computed by the memory planner for the GPU in this machine.
AUTO_PRESET = "auto"


def _as_overrides(overrides) -> list[str | dict]:
    """``resolve``'s overrides as a list of ``'section.key=value'`` strings and partial configs: one string
    is one override (not its characters), a dict's dotted keys are nested (``{"training.max_steps": 4}``
    is ``{"training": {"max_steps": 4}}``, its values as given, never read as YAML)."""
    if overrides is None:
        return []
    if isinstance(overrides, str):
        return [overrides]
    items = [overrides] if isinstance(overrides, dict) else overrides
    if not isinstance(items, (list, tuple)) or not all(isinstance(i, (str, dict)) for i in items):
        raise TypeError(f"overrides: expected a list of 'section.key=value' strings (or one string, or a dict "
                        f"such as {{'training.max_steps': 4}}), got {type(overrides).__name__} ({overrides!r})"[:300])
    out: list[str | dict] = []
    for item in items:
        if isinstance(item, dict):
            for key, value in item.items():
                nested: dict = value
                for part in reversed(str(key).split(".")):
                    nested = {part: nested}
                out.append(nested)
        else:
            out.append(item)
    return out


def _refuse_overrides_stages_ignore(cfg: RecipeConfig, overrides: list[str | dict]) -> None:
    """A run in stages takes its steps (and, where every stage sets one, its learning rate) from each
    stage: ``training.max_steps=4`` typed on the command line would be ignored without a word, and a
    "short try" would train every stage in full. Refuse it, and say the two ways to get what was meant."""
    if not cfg.stages:
        return
    given = set()
    for item in overrides:
        d = item if isinstance(item, dict) else parse_override(item)  # load_config has accepted it
        given |= {f"training.{k}" for k in (d.get("training") or {}) if isinstance(d.get("training"), dict)}
    ignored = ["training.max_steps"] if "training.max_steps" in given else []
    if "training.learning_rate" in given and all(s.learning_rate is not None for s in cfg.stages):
        ignored.append("training.learning_rate")
    if ignored:
        shown = ", ".join(f"{s.name} ({s.kind}, {s.max_steps} steps)" for s in cfg.stages)
        own = " ".join(f"stages.{i}.{ignored[0].split('.')[1]}=..." for i in range(len(cfg.stages)))
        raise ConfigError(f"{' and '.join(ignored)} would be ignored: this config trains in stages ({shown}), each "
                          f"with its own max_steps and learning_rate; set the stages' own ({own}), or add "
                          "stages=[] to train one GRPO stage with the training.* settings")


def _auto_preset(cfg: RecipeConfig, gpu: dict | None, vllm: tuple[str | None, bool] | None = None,
                 cpu_alternatives: str = "") -> dict:
    """Planner settings for ``cfg``'s model on the detected GPU (or ``gpu``), as a partial config.

    The plan is made with the vLLM setting the run will use (the loader's own decision for this
    card, the installed vLLM and this process's ``UNSLOTH_VLLM_STANDBY``). ``fast_inference``
    stays ``auto`` when the plan generates with vLLM, so an engine that fails to start still falls
    back to generating without it (the plan is sized to fit that way too), and vLLM's own pins stay
    advice in the doctor; it is written ``off`` when the plan has no vLLM. A plan that picks 16-bit
    weights for a pre-quantized ``-bnb-4bit`` model names the 16-bit repository, the one the run
    then loads.
    """
    import os

    from unsloth_grpo.config import parse_override
    from unsloth_grpo.hardware import architecture, planner, profiles
    from unsloth_grpo.hardware.backend import backend_name, unsloth_imported

    here = gpu is None
    gpu = gpu if gpu is not None else planner.detect_gpu()
    if gpu is None:
        raise ConfigError("--preset auto: no CUDA GPU detected; on a CPU use "
                          + (cpu_alternatives or "--preset smoke"))
    backend = backend_name(cfg.model.backend, vllm_server=cfg.model.vllm_server, strict=False)[0]
    choice = profiles.choice_for_config(cfg.model, profiles.from_gpu(gpu), backend=backend, vllm=vllm,
                                        env=dict(os.environ) if here else None,
                                        unsloth_imported=here and unsloth_imported())
    try:
        plan = planner.plan_for_choice(cfg.model.name, gpu, choice, backend=backend,
                                      max_prompt_length=cfg.data.max_prompt_tokens)
    except architecture.UnknownModelError as exc:
        raise ConfigError(f"--preset auto: {exc}") from None
    except ValueError as exc:
        raise ConfigError(f"--preset auto: {exc}") from None
    if not plan.fits:
        alt = f" Nearest that fits: {plan.alternative.summary()}" if plan.alternative is not None else ""
        raise ConfigError(f"--preset auto: {plan.summary()}.{alt}")
    preset: dict = {}
    for text in plan.override_list():
        preset = merge_dicts(preset, parse_override(text))
    if plan.use_vllm and cfg.model.fast_inference == "auto":
        preset["model"]["fast_inference"] = "auto"  # keep the engine-start fallback the plan was sized for
    print(f"preset auto: {plan.summary()}; vLLM {'on' if plan.use_vllm else 'off'} ({choice.reason})")
    return preset


def _unquantized_name(cfg: RecipeConfig) -> RecipeConfig:
    """``cfg`` with the 16-bit repository of a pre-quantized model when its weights load in 16-bit:
    the repository the run then downloads, names in run_info.json and the model card, and checks
    in the offline cache."""
    from unsloth_grpo.models.ref import model_ref

    if cfg.model.load_in_4bit or not model_ref(cfg.model.name).prequantized:
        return cfg
    name = model_ref(cfg.model.name).full_precision
    print(f"preset auto: 16-bit weights, so the model is {name} (the 16-bit weights of {cfg.model.name})")
    return dataclasses.replace(cfg, model=dataclasses.replace(cfg.model, name=name))


def smoke_preset(*, output_dir: str, task_rewards: list[dict], data: dict | None = None,
                 training: dict | None = None, run: dict | None = None) -> dict:
    """The offline smoke preset every recipe shares: the tiny built-in model on CPU, a few dozen steps.

    A random tiny model can learn to emit the answer tags (whole tokens of its tokenizer) but not
    to solve a task, so each of the four tags present earns 0.25 (``xml_count`` with
    ``once=False``: the dense signal a model that never saw the format needs, and
    ``require_answer=False``: it cannot write an answer to put between them). The task's own
    rewards are still computed and logged beside it. Completions are cut at 12 tokens on
    purpose, so the length-clipping warning is switched off.
    """
    return merge_dicts({
        "output_dir": output_dir,
        "seed": 0,
        "model": {"name": "builtin:tiny", "max_seq_length": 512, "load_in_4bit": False, "dtype": "fp32",
                  "device": "cpu"},
        "lora": {"r": 16, "alpha": 32},
        "data": {"num_synthetic": 256, "max_prompt_tokens": 256},
        "rewards": [{"name": "xml_count", "weight": 1.0,
                     "params": {"per_tag": 0.25, "once": False, "require_answer": False}},
                    *task_rewards],
        "training": {
            "max_steps": 40, "learning_rate": 2e-2, "lr_scheduler_type": "constant", "warmup_ratio": 0.0,
            "weight_decay": 0.0, "max_grad_norm": 1.0, "num_generations": 8, "per_device_train_batch_size": 8,
            "max_completion_length": 12, "temperature": 1.0, "save_steps": 0,
            # every 12-token completion is cut short: masking them would leave nothing to learn from
            "mask_truncated_completions": False,
        },
        "run": {"samples_every": 20},
        "monitor": {"ignore": ["length_clipped"]},
    }, {"data": data or {}, "training": training or {}, "run": run or {}})


#: The preset that trains the real built-in model on a CPU (``--preset smollm2``).
REAL_MODEL_PRESET = "smollm2"
#: The presets that run on a CPU, with what each trains there (only the ones a recipe has are offered).
CPU_PRESETS = {
    "smoke": "the tiny built-in model, about a minute",
    REAL_MODEL_PRESET: "the real SmolLM2-135M-Instruct, offline after its first use, 20-30 minutes on 2 cores",
}


def real_model_preset(*, output_dir: str, system_prompt: str, rewards: list[dict], data: dict | None = None,
                      training: dict | None = None, stages: list[dict] | None = None,
                      evaluation: dict | None = None, monitor: dict | None = None,
                      model: dict | None = None) -> dict:
    """The CPU preset on the real built-in model (SmolLM2-135M-Instruct, fetched on first use).

    A real 135M model writes sentences, so the run is short on steps, not on sense: 8 completions
    of at most ``max_completion_length`` tokens per step at temperature 0.7 (at 1.0 the base model's
    samples are mostly noise; a recipe that warms it up with SFT first may sample hotter), LoRA on
    every linear layer at a high constant rate, no gradient checkpointing (memory is no concern on a
    CPU; recomputation is). The task's system prompt is replaced by one that shows answers in the
    format: told the format in words alone, the model uses it in none of its samples, and GRPO has
    nothing to reinforce (docs/real_model.md).
    ``stages`` (an SFT warm-up before GRPO, say) and ``evaluation`` (held-out accuracy before and
    after) are the recipe's to choose; ``monitor`` adds to the health monitor's settings; ``model``
    overrides the model section (``{"name": "builtin:gemma3-270m"}`` trains the other real built-in model).
    """
    return merge_dicts({
        "output_dir": output_dir,
        "seed": 0,
        "model": {"name": "builtin:smollm2-135m-instruct", "max_seq_length": 512, "load_in_4bit": False,
                  "dtype": "fp32", "device": "cpu"},
        "lora": {"r": 16, "alpha": 32},
        "data": {"source": "synthetic", "num_synthetic": 512, "max_prompt_tokens": 256,
                 "system_prompt": system_prompt},
        "rewards": rewards,
        "training": {
            "max_steps": 30, "learning_rate": 2e-4, "lr_scheduler_type": "constant", "warmup_ratio": 0.0,
            "weight_decay": 0.0, "max_grad_norm": 1.0, "num_generations": 8, "per_device_train_batch_size": 8,
            "max_completion_length": 48, "temperature": 0.7, "save_steps": 10, "gradient_checkpointing": False,
            "mask_truncated_completions": False,
        },
        "run": {"samples_every": 10},
        **({"stages": stages} if stages else {}),
    }, {"model": model or {}, "data": data or {}, "training": training or {}, "evaluation": evaluation or {},
        "monitor": monitor or {}})
