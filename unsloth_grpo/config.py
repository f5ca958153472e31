"""Typed recipe configuration: dataclasses with help text, YAML round-trip, overrides, checks.

A recipe config is a YAML file whose sections mirror :class:`RecipeConfig`. pydantic checks the
sections' keys and types; an unknown key is rejected with the list of valid ones (a typo never silently
falls back to a default), and every mistake of a file is listed in one error::

    cfg = load_config("recipes/gsm8k.yaml", overrides=["training.max_steps=50"])
    problems = cfg.problems()          # every problem at once, before any model is loaded
    dump_config(cfg, "outputs/run/config.yaml")
    assert load_config("outputs/run/config.yaml") == cfg
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import os
import re
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Annotated, Any, get_args, get_origin, get_type_hints

import yaml
from pydantic import ConfigDict, Field, TypeAdapter, ValidationError
from pydantic_core import core_schema

#: The names each choice may take: the one list every module, message and help text uses.
BACKENDS = ("auto", "unsloth", "transformers")
DTYPES = ("auto", "bf16", "fp16", "fp32")
DEVICES = ("auto", "cuda", "cpu")
FAST_INFERENCE = ("auto", "on", "off")
Seed = Annotated[int, Field(ge=0, le=2**32 - 1)]  # what numpy takes: transformers' set_seed hands it the run's seed


def is_unsloth(backend: str | None) -> bool:
    """Whether ``backend`` (a requested, decided or recorded backend name) is Unsloth. The names are
    compared here and in the backend rule (:mod:`unsloth_grpo.hardware.backend`); the rest ask these."""
    return backend == "unsloth"


def is_transformers(backend: str | None) -> bool:
    """Whether ``backend`` is plain transformers + peft (see :func:`is_unsloth`)."""
    return backend == "transformers"


class ConfigError(ValueError):
    """A recipe config is invalid. The message names the field, the value and the fix."""


def _f(default: Any = dataclasses.MISSING, *, help: str, factory: Any = None):
    """A dataclass field with help text (read by ``describe`` and the CLI)."""
    return field(default=default, metadata={"help": help}) if factory is None else \
        field(default_factory=factory, metadata={"help": help})


def _as_typed(value: Any, tp: Any) -> Any:
    """A value read from YAML, for a field of type ``tp``: the text as typed for a string field, YAML's
    reading otherwise (``null`` is None either way)."""
    if isinstance(value, _Typed):  # YAML's yes/on is no number: a number field gets the text, and refuses it
        text = str in (tp, *get_args(tp)) or (isinstance(value.parsed, bool) and bool not in (tp, *get_args(tp)))
        return None if value.parsed is None else (str(value) if text else value.parsed)
    inner = [get_type_hints(a) for a in get_args(tp) if dataclasses.is_dataclass(a)] if get_origin(tp) is list else []
    if inner and isinstance(value, list):  # a stage's rewards: pydantic skips their section's step (`false` stayed text)
        return [{k: _as_typed(v, inner[0][k]) if k in inner[0] else v for k, v in d.items()} if isinstance(d, dict)
                else d for d in value]
    return _plain(value) if get_origin(tp) is dict or tp is Any else value


def _section_schema(cls: type, source: Any, handler: Any) -> Any:
    """pydantic's schema of a section, after a step that gives each field its value as typed."""
    hints = get_type_hints(cls)

    def as_typed(data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        if cls is TrainingConfig and "trl" not in data:
            data = _training_as_written(data)
        return {k: _as_typed(v, hints[k]) if k in hints else v for k, v in data.items()}
    return core_schema.no_info_before_validator_function(as_typed, handler(source))


def _section(cls: type) -> type:
    """A config section: a dataclass whose values pydantic checks (unknown keys refused)."""
    cls = dataclass(cls)
    cls.__pydantic_config__ = ConfigDict(extra="forbid", coerce_numbers_to_str=True)
    cls.__get_pydantic_core_schema__ = classmethod(_section_schema)
    return cls


@_section
class ModelConfig:
    name: str = _f("unsloth/Qwen2.5-1.5B-Instruct-bnb-4bit",
                   help="Hub id or local directory of the base model; 'builtin:tiny' builds the tiny offline model.")
    backend: str = _f("auto", help="'unsloth', 'transformers', or 'auto' (Unsloth when importable).")
    max_seq_length: int = _f(1024, help="Longest prompt + completion, in tokens.")
    load_in_4bit: bool = _f(True, help="Load the base weights in 4-bit NF4 (needs CUDA and bitsandbytes).")
    fast_inference: str = _f("auto", help="vLLM generation: 'auto' (when vllm is installed and CUDA present), 'on' or 'off'.")
    gpu_memory_utilization: float = _f(
        0.6, help="Share of GPU memory vLLM may take (its weights and KV cache) when standby is off; with "
                  "standby Unsloth sets it from the card's size.")
    vllm_standby: str = _f(
        "auto", help="Unsloth's vLLM standby (weights shared with training, vLLM asleep while training): "
                     "'auto' (on with Unsloth + vLLM), 'on' or 'off'.")
    vllm_server: str | None = _f(
        None, help="host:port of a vLLM server to generate on (TRL vllm_mode='server'; on a CPU the LoRA adapter "
                   "is sent each step).")
    dtype: str = _f("auto", help="'auto' (bf16 where the GPU supports it, fp16 otherwise, fp32 on CPU), or bf16/fp16/fp32.")
    device: str = _f("auto", help="'auto' (CUDA when present), 'cuda' or 'cpu'.")
    trust_remote_code: bool = _f(False, help="Allow model code from the hub repository.")

    def problems(self) -> list[str]:
        p = [f"model.{key}='{getattr(self, key)}' is not one of {', '.join(choices)}" for key, choices in (
            ("backend", BACKENDS), ("dtype", DTYPES), ("fast_inference", FAST_INFERENCE),
            ("vllm_standby", FAST_INFERENCE), ("device", DEVICES)) if getattr(self, key) not in choices]
        if not self.name.strip():
            p.append("model.name is empty; give a hub id, a local model directory or 'builtin:tiny'")
        if not 0.05 <= self.gpu_memory_utilization <= 0.95:
            p.append(f"model.gpu_memory_utilization={self.gpu_memory_utilization} should lie between 0.05 and 0.95")
        return p


@_section
class LoraSettings:
    r: int = _f(16, help="LoRA rank.")
    alpha: int = _f(32, help="LoRA alpha (scale = alpha / r).")
    dropout: float = _f(0.0, help="LoRA dropout.")
    target_modules: list[str] = _f(help="Linear layers that get adapters ('all-linear' allowed as a single entry).",
        factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"])
    max_lora_rank: int | None = _f(None, help="vLLM's largest LoRA rank (Unsloth fast inference); defaults to r.")

    def problems(self) -> list[str]:
        p = [f"lora.r={self.r} must be at least 1"] if self.r < 1 else []
        if self.max_lora_rank is not None and self.r > self.max_lora_rank:
            p.append(f"lora.r={self.r} exceeds lora.max_lora_rank={self.max_lora_rank}; raise max_lora_rank to at "
                     f"least {self.r}")
        return p


@_section
class DataConfig:
    source: str = _f("openai/gsm8k",
                     help="Hub dataset id, a local .jsonl/.json/.csv/.parquet file, or 'synthetic' (offline generator).")
    subset: str | None = _f("main", help="Hub dataset configuration name (GSM8K: 'main').")
    split: str = _f("train", help="Split to train on.")
    limit: int | None = _f(None, help="Use at most this many rows (after filtering).")
    num_synthetic: int = _f(512, help="Rows to generate when source is 'synthetic'.")
    max_prompt_tokens: int = _f(256, help="Drop prompts longer than this many tokens (with a report).")
    system_prompt: str | None = _f(None, help="Override the task's system prompt.")
    question_column: str = _f("question", help="Column holding the question.")
    answer_column: str = _f("answer", help="Column holding the reference answer.")
    shuffle_seed: Seed | None = _f(None, help="Shuffle the rows with this seed (None keeps file order).")
    categories: list[str] | None = _f(
        None, help="Keep only the rows whose 'category' column is one of these kinds of problem (gsm8k's offline "
                   "sets: addition, subtraction, ...); None keeps every row. An sft stage's worked answers too.")
    datasets: Any = _f(None, help="reasoning_gym: [{name, weight, config, seed, size, curriculum}] (docs/reasoning-gym.md)")


@_section
class RewardSpec:
    name: str = _f(help="Reward name from the registry, or a dotted import path 'pkg.module:function'.")
    weight: float = _f(1.0, help="Weight of this reward in the total.")
    params: dict[str, Any] = _f(help="Keyword parameters passed to the reward's constructor.", factory=dict)


#: The toolkit's starting values for TRL fields under ``training:``, below every recipe, preset and
#: file (the one place they are written). Where they differ from TRL's own defaults a consumer GPU
#: wants it: a higher learning rate for LoRA, an 8-bit optimizer, DAPO's clip-higher and truncation
#: mask, a fixed number of steps (TRL's -1 means "epochs"), a log line and a saved step more often.
#: The others pin what the toolkit reads itself (the planner, the batch checks, the progress line),
#: so that a TRL release that moves a default does not change a run silently. Every other field of
#: the installed GRPOConfig keeps TRL's default until a config sets it.
TRAINING_DEFAULTS: dict[str, Any] = {
    "max_steps": 250,
    "learning_rate": 5e-6,
    "lr_scheduler_type": "cosine",
    "weight_decay": 0.1,
    "max_grad_norm": 0.1,
    "optim": "adamw_8bit",
    "num_generations": 8,
    "per_device_train_batch_size": 8,
    "gradient_accumulation_steps": 1,
    "steps_per_generation": None,
    "max_completion_length": 256,
    "temperature": 1.0,
    "top_p": 1.0,
    "beta": 0.0,
    "loss_type": "dapo",
    "mask_truncated_completions": True,
    "epsilon_high": 0.28,
    "scale_rewards": "group",
    "logging_steps": 1,
    "save_steps": 100,
    "gradient_checkpointing": True,
    "report_to": [],
}


#: Values of ``training.dynamic_sampling`` (unsloth_grpo.training.dynamic_sampling.MODES).
DYNAMIC_SAMPLING_MODES = ("off", "drop", "refill")


@_section
class TrainingConfig:
    """The ``training:`` section: TRL's own config fields by TRL's names, and a few options of the toolkit.

    Every key that is not a field of this class is a field of TRL's ``GRPOConfig`` (an SFT stage:
    ``SFTConfig``) and is kept as written in ``trl``; :mod:`unsloth_grpo.training.trainer_args`
    builds TRL's dataclass from it, with TRL's types, TRL's checks and TRL's help text. Read one by
    its name: ``cfg.training.learning_rate``, or ``cfg.training.get("num_iterations")`` for a field that may
    be unset (TRL's default then applies).

    The typed fields below are the toolkit's own training options (TRL has no field of their name);
    a new one is added here, and the trainer wiring reads it instead of passing it to TRL.
    """

    warmup_ratio: float = _f(
        0.1, help="Share of max_steps spent warming up the learning rate. transformers 5 removed TRL's field of "
                  "this name; the toolkit passes it to TRL as warmup_steps (a value below 1 is a share), unless "
                  "training.warmup_steps is set.")
    dynamic_sampling: str = _f(
        "off", help="Groups whose rewards all agree teach nothing: 'off' trains on them (TRL's behaviour), 'drop' "
                    "leaves them out of the loss, 'refill' also generates for further prompts until the batch is full "
                    "of informative groups (DAPO's dynamic sampling; TRL has none). See docs/dynamic-sampling.md.")
    max_sampling_rounds: int = _f(
        3, help="dynamic_sampling=refill: most generation rounds per step, the first included; a batch still "
                "short after them trains on the informative groups it has.")
    sft_replay: float = _f(0.0, help="GRPO: weight of an SFT loss on worked examples of the warm-up's kinds (0: off).")
    skip_flat_steps: bool = _f(False, help="GRPO: a step whose gradients are all zero (no group's rewards differed) "
                                           "changes nothing, where Adam would still move the weights on its momentum.")
    trl: dict[str, Any] = _f(help="TRL's own fields, by name, as the config sets them.",
                             factory=lambda: dict(TRAINING_DEFAULTS))

    def __getattr__(self, name: str) -> Any:
        # only reached for names that are not attributes: TRL's fields, read by their own names
        trl = self.__dict__.get("trl")
        if name.startswith("_") or trl is None:
            raise AttributeError(name)
        try:
            return trl[name]
        except KeyError:
            raise AttributeError(f"training.{name} is not set in this config (TRL's default applies); "
                                 f"read it with training.get({name!r})") from None

    def __setattr__(self, name: str, value: Any) -> None:
        if name in self.__dataclass_fields__:
            super().__setattr__(name, value)
        else:  # cfg.training.max_steps = 50: a TRL field, kept with the others so that it reaches TRL
            self.trl[name] = value

    def get(self, name: str, default: Any = None) -> Any:
        """A TRL field's value as the config sets it, or ``default`` when the config leaves it to TRL."""
        return self.trl.get(name, default)

    def updated(self, **values: Any) -> "TrainingConfig":
        """A copy with ``values`` set: the toolkit's own options as fields, TRL's by name in ``trl``."""
        own = {f.name for f in fields(self)} - {"trl"}
        return dataclasses.replace(self, **{k: v for k, v in values.items() if k in own},
                                   trl={**self.trl, **{k: v for k, v in values.items() if k not in own}})

    def number(self, name: str) -> float | None:
        """A TRL field's value when the config gives it as a number, else None (a value of the wrong
        type is left to the TRL check, which names it)."""
        value = self.trl.get(name)
        return value if isinstance(value, (int, float)) and not isinstance(value, bool) else None

    def problems(self) -> list[str]:
        """The toolkit's own options, and TRL's fields the toolkit relies on."""
        p = []
        generations, completion = self.number("num_generations"), self.number("max_completion_length")
        if generations is not None and generations < 2:
            p.append(f"training.num_generations={generations}: GRPO compares completions within a group, "
                     "so it needs at least 2 (8 is typical)")
        if completion is not None and completion < 1:
            p.append(f"training.max_completion_length={completion}: a completion needs at least 1 token; "
                     "set it to the longest answer you expect, e.g. 256")
        steps, lr, beta, temperature = (self.number(k) for k in ("max_steps", "learning_rate", "beta", "temperature"))
        if steps is not None and steps < 1:
            p.append(f"training.max_steps={steps} must be at least 1")
        if lr is not None and lr <= 0:
            p.append(f"training.learning_rate={lr} must be positive")
        if beta is not None and beta < 0:
            p.append(f"training.beta={beta} must be >= 0")
        if temperature is not None and temperature <= 0:
            p.append(f"training.temperature={temperature} must be > 0 for GRPO sampling")
        if not 0 <= self.warmup_ratio < 1:
            p.append(f"training.warmup_ratio={self.warmup_ratio} must lie in [0, 1): it is a share of max_steps")
        if self.dynamic_sampling not in DYNAMIC_SAMPLING_MODES:
            p.append(f"training.dynamic_sampling='{self.dynamic_sampling}' is not one of "
                     f"{', '.join(DYNAMIC_SAMPLING_MODES)}")
        if self.max_sampling_rounds < 1:
            p.append(f"training.max_sampling_rounds={self.max_sampling_rounds}: a step needs at least 1 generation "
                     "round (3 is typical for refill)")
        if not self.sft_replay >= 0:
            p.append(f"training.sft_replay={self.sft_replay} must be >= 0 (0: off)")
        return p


@_section
class RunConfig:
    """What the toolkit does around TRL's trainer (not GRPOConfig fields)."""

    keep_last: int | None = _f(2, help="Keep the newest N complete checkpoints under OUTPUT/checkpoints (null keeps all).")
    samples_every: int = _f(10, help="Print and store sample generations every N steps (0 = never).")

    def problems(self) -> list[str]:
        p = [] if self.keep_last is None or self.keep_last >= 1 else [
            f"run.keep_last={self.keep_last}: keep at least 1 checkpoint, or null to keep all"]
        if self.samples_every < 0:
            p.append(f"run.samples_every={self.samples_every} must be >= 0 (0 = never)")
        return p


@_section
class EvalConfig:
    every: int = _f(0, help="Evaluate a held-out slice every N training steps (0 = never); logged as eval/*.")
    before_after: bool = _f(False, help="Evaluate before and after training and write report.md / report.json.")
    split: str = _f("test", help="Held-out split of data.source (or of evaluation.dataset, when it is a hub id).")
    dataset: str | None = _f(None, help="Held-out problems of their own: a local file with the training data's columns "
                             "(graded whole) or a hub id. None: evaluation.split of data.source (docs/evaluation.md).")
    limit: int = _f(32, help="Held-out problems to evaluate.")
    samples: int = _f(1, help="Completions per problem (pass@k for k up to this).")
    max_new_tokens: int | None = _f(None, help="Generation length (default: training.max_completion_length).")
    temperature: float = _f(0.7, help="Sampling temperature for samples beyond the first (the first is greedy).")
    batch_size: int = _f(16, help="Sequences generated per batch.")
    headroom: int = _f(0, help="GRPO: sample K completions of headroom_prompts training prompts at the GRPO temperature "
                               "before training and after: pass@1, pass@K, groups mixed (0 = off; docs/evaluation.md).")
    headroom_prompts: int = _f(64, help="Training prompts the headroom samples (evaluation.headroom).")

    def problems(self) -> list[str]:
        if min(self.every, self.headroom) < 0 or self.headroom == 1 or min(self.limit, self.samples, self.headroom_prompts) < 1:
            return [f"evaluation: every={self.every}, limit={self.limit}, samples={self.samples}, headroom={self.headroom}, "
                    f"headroom_prompts={self.headroom_prompts}: every >= 0, headroom 0 (off) or >= 2, the others >= 1"]
        return []


@_section
class ToolsConfig:
    functions: list[str] = _f(
        help="Tools the model may call between turns: names from unsloth_grpo.tools or import paths 'pkg.module:fn'.",
        factory=list)
    environment: str | None = _f(
        None, help="A stateful environment (one instance per rollout; its public methods are its tools): a name from "
                   "unsloth_grpo.tools or an import path 'pkg.module:Factory'.")
    max_tool_calling_iterations: int = _f(4, help="Tool rounds per completion: call, result, continue (TRL's field).")
    timeout: float = _f(5.0, help="Seconds one tool call may take; a slower call returns an error to the model.")


STAGE_KINDS = ("grpo", "sft")


@_section
class StageConfig:
    name: str = _f(help="Stage name: its directory OUTPUT/stages/NN-name and its label in the summary.")
    kind: str = _f("grpo", help="'grpo' (reinforcement with the stage's rewards) or 'sft' (supervised on formatted examples).")
    max_steps: int = _f(50, help="Optimizer steps of this stage.")
    learning_rate: float | None = _f(None, help="Learning rate of this stage (default: training.learning_rate).")
    rewards: list[RewardSpec] = _f(help="GRPO rewards of this stage (default: the recipe's rewards).", factory=list)
    training: dict[str, Any] = _f(help="Other training.* settings for this stage only, e.g. {temperature: 0.8}.",
                                  factory=dict)
    num_examples: int = _f(200, help="SFT stages: how many formatted examples to train on.")
    data: dict[str, Any] = _f(help="Other data.* settings for this stage only, e.g. {categories: [subtraction]}: "
                                   "its own problems.", factory=dict)


@_section
class RecipeConfig:
    task: str = _f("gsm8k", help="Task name: a module of unsloth_grpo.tasks (unsloth_grpo.tasks.available_tasks()).")
    output_dir: str = _f("outputs/gsm8k", help="Where the adapter, metrics and resolved config go.")
    seed: Seed = _f(3407, help="Random seed for data order, sampling and initialisation (0 to 2**32 - 1).")
    model: ModelConfig = _f(help="Base model and how to load it.", factory=ModelConfig)
    lora: LoraSettings = _f(help="LoRA adapter settings.", factory=LoraSettings)
    data: DataConfig = _f(help="Training data.", factory=DataConfig)
    rewards: list[RewardSpec] = _f(help="Rewards with weights and parameters.", factory=list)
    training: TrainingConfig = _f(
        help="TRL's GRPOConfig (SFT stages: SFTConfig): any field of the installed TRL by its own name, checked "
             "and built by TRL's dataclass; plus the toolkit's own options listed here.", factory=TrainingConfig)
    run: RunConfig = _f(help="Samples and checkpoint rotation: the toolkit's own settings around the trainer.",
                        factory=RunConfig)
    monitor: dict[str, Any] = _f(
        help="Health monitor thresholds and windows (see unsloth_grpo.training.monitor.HealthThresholds).", factory=dict)
    evaluation: EvalConfig = _f(help="Held-out evaluation during and around training.", factory=EvalConfig)
    tools: ToolsConfig = _f(help="Functions the model may call during generation (see docs/tools.md).", factory=ToolsConfig)
    stages: list[StageConfig] = _f(
        help="Stages run in order on one adapter, each with its own rewards/steps/lr (empty: a single GRPO run). "
             "See unsloth_grpo.training.stages.", factory=list)

    def problems(self) -> list[str]:
        """Problems of the config's own values (ranges, choices), one line each: each section's own,
        then what crosses sections. This imports nothing; the full pre-load check, with rewards, tasks,
        TRL's fields and the machine, is :func:`unsloth_grpo.training.checks.config_problems`.
        """
        p = [] if str(self.output_dir).strip() else [
            "output_dir is empty: a run needs a directory of its own for its adapter, metrics and config; give "
            "one, e.g. --output-dir outputs/my-run"]
        for section in (self.model, self.lora, self.training, self.run, self.evaluation):
            p += section.problems()
        completion, prompt = self.training.number("max_completion_length"), self.data.max_prompt_tokens
        if completion is not None and prompt + completion > self.model.max_seq_length:
            p.append(f"data.max_prompt_tokens ({prompt}) + training.max_completion_length ({completion}) = "
                     f"{prompt + completion} exceeds model.max_seq_length ({self.model.max_seq_length}); raise "
                     "max_seq_length or shorten one of them")
        if not self.rewards and not (self.stages and all(s.rewards or s.kind == "sft" for s in self.stages)):
            p.append("rewards: the list is empty; add at least one, e.g. {name: correctness, weight: 2.0}")
        p += [f"rewards[{i}].params must be a mapping" for i, spec in enumerate(self.rewards)
              if not isinstance(spec.params, dict)]
        return p


# ---------------------------------------------------------------- YAML that keeps what was typed


class _Typed(str):
    """A plain YAML scalar that YAML would read as a bool, number, date or null, kept as typed.

    ``output_dir: 007`` and ``--output-dir yes`` must stay the strings ``"007"`` and ``"yes"``
    (YAML 1.1 reads them as 7 and True); a number or bool field gets YAML's reading instead.
    """

    def __new__(cls, text: str, parsed: Any):
        obj = super().__new__(cls, text)
        obj.parsed = parsed
        return obj


class _Loader(yaml.SafeLoader):
    def construct_object(self, node, deep=False):
        data = super().construct_object(node, deep=deep)
        if isinstance(node, yaml.ScalarNode) and node.style is None and not isinstance(data, str):
            return _Typed(node.value, data)
        return data


# YAML 1.1 reads ``1e-5`` (no dot) as a string; learning rates are written that way, and TRL's fields
# under ``training:`` get their types only from TRL, so such a number is read as a number here. A
# string field still keeps the text as typed (``_Typed``).
_Loader.add_implicit_resolver("tag:yaml.org,2002:float", re.compile(r"^[-+]?[0-9][0-9_]*[eE][-+]?[0-9]+$"),
                              list("-+0123456789"))


def _plain(value: Any) -> Any:
    """YAML's own reading of a value, all the way down (for fields typed Any or dict)."""
    if isinstance(value, _Typed):
        return value.parsed
    if isinstance(value, dict):
        return {_plain(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


def _yaml_error(exc: yaml.YAMLError) -> str:
    mark = getattr(exc, "problem_mark", None)
    where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
    problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
    return f"{where}{problem}"


def _duplicate_keys(node: Any, path: str = "", seen: set | None = None) -> list[str]:
    """Keys given twice in one mapping of a composed YAML document, as ``dotted.key (lines A and B)``.

    YAML loaders keep the last of two equal keys without a word; in a config that silently drops a
    setting the user wrote. Merge keys (``<<: *base``) are meant to be overridden and are left out.
    """
    seen = set() if seen is None else seen
    if id(node) in seen:  # an alias points back at a node already walked
        return []
    seen.add(id(node))
    out: list[str] = []
    if isinstance(node, yaml.MappingNode):
        lines: dict[str, int] = {}
        for key, value in node.value:
            name = key.value if isinstance(key, yaml.ScalarNode) else None
            if name is not None and key.tag != "tag:yaml.org,2002:merge":
                if name in lines:
                    line = key.start_mark.line + 1
                    out.append(f"{path}{name}" + (f" (lines {lines[name]} and {line})" if line != lines[name] else ""))
                else:
                    lines[name] = key.start_mark.line + 1
            out += _duplicate_keys(value, f"{path}{name if name is not None else '?'}.", seen)
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            out += _duplicate_keys(item, f"{path.rstrip('.')}[{i}].", seen)
    return out


def read_yaml(text: str | bytes, what: str, key: str = "") -> Any:
    """Parse YAML text (a config file or an override's value), keeping typed scalars' text.

    A key given twice in one mapping is an error naming the key (under ``key``, the override's), not
    the last one silently kept.
    """
    try:
        twice = _duplicate_keys(yaml.compose(text, Loader=yaml.SafeLoader), f"{key}." if key else "")
        value = yaml.load(text, Loader=_Loader)  # noqa: S506 - a SafeLoader subclass
    except yaml.YAMLError as exc:  # a ReaderError: bytes that are neither UTF-8 nor UTF-16 with a byte-order mark
        fix = "save it as UTF-8" if isinstance(exc, yaml.reader.ReaderError) else "fix the syntax, or quote the value"
        raise ConfigError(f"{what} is not valid YAML ({_yaml_error(exc)}); {fix}") from None
    if twice:
        raise ConfigError(f"{what} gives the same key twice: {', '.join(twice)}; YAML would keep only the "
                          "last one without a word. Keep the one you mean and delete the other")
    return value


# ---------------------------------------------------------------- conversion to and from dicts
# pydantic checks the sections' types and names (every problem at once, each with where it is); this
# module adds only the wording: the key's dotted place, what was expected, the close name of a typo.

#: What a config value was expected to be, by the first word of pydantic's error type (or a kind of
#: value in TRL's field table).
EXPECTED = {"int": "an integer", "float": "a number", "bool": "true or false", "string": "a string", "str": "a string",
            "list": "a list", "dict": "a mapping", "dataclass": "a mapping", "none": "null"}
_LAX = ConfigDict(coerce_numbers_to_str=True)


def _where(loc: tuple) -> str:
    return "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in loc).lstrip(".")


def _section_at(cls: Any, loc: tuple) -> Any:
    """The dataclass a config key's place ``loc`` lies in (``('rewards', 0)`` -> RewardSpec)."""
    for part in loc:
        cls = get_type_hints(cls)[part] if isinstance(part, str) else get_args(cls)[0]
        if get_origin(cls) is not list:  # X | None
            cls = next((a for a in get_args(cls) if dataclasses.is_dataclass(a)), cls)
    return cls


def _problem(cls: type, error: dict, prefix: str) -> str:
    """One line for one of pydantic's errors: the key, what it holds and what it should hold."""
    loc, value = error["loc"], _plain(error["input"])
    where = _where(((prefix,) if prefix else ()) + loc)
    kind = error["type"]
    if kind == "value_error":  # a section's own refusal (an old key), said in its own words
        return str(error["ctx"]["error"])
    if kind == "unexpected_keyword_argument":
        names = [f.name for f in fields(_section_at(cls, loc[:-1]))]
        close = difflib.get_close_matches(str(loc[-1]), names, n=1)
        under = where.rpartition(".")[0]
        return (f"unknown config key '{where}'.{f' Did you mean {close[0]!r}?' if close else ''} "
                f"Valid keys{' under ' + under if under else ''}: " + ", ".join(names))
    if kind in ("missing", "missing_argument"):
        return f"{where.rpartition('.')[0] or 'the config'}: this entry needs '{loc[-1]}'"
    hint = ""
    if kind == "list_type" and isinstance(value, dict) and value and all(_is_index(k) for k in value):
        hint = f"; there is no list to change by position here, so give the whole list: {where}=[...]"
    expected = EXPECTED.get(kind.split("_")[0])
    if expected is None:
        return f"{where}: {error['msg']}, got {value!r}"
    return f"{where}: expected {expected}, got {value!r}{hint}"


@functools.cache
def _adapter(tp: Any) -> TypeAdapter:
    return TypeAdapter(tp) if dataclasses.is_dataclass(tp) else TypeAdapter(tp, config=_LAX)


def convert_value(value: Any, tp: Any, where: str) -> Any:
    """``value`` as the type ``tp`` (a section, or a type TRL declares); ConfigError names ``where``."""
    try:
        return _adapter(tp).validate_python(value)
    except ValidationError as exc:
        raise ConfigError(format_problems([_problem(tp, e, where) for e in exc.errors()])) from None


#: Keys under ``training:`` that older releases read and this one refuses, each with what to write instead.
#: They warned for a release; now a config that still has one is stopped with the way to fix it.
OLD_TRAINING_KEYS = {
    "keep_last": "run.keep_last (a setting of the toolkit, under run:)",
    "samples_every": "run.samples_every (a setting of the toolkit, under run:)",
    "extra": "its fields directly under training: (e.g. training.delta: 2.0)",
    "passthrough": "its fields directly under training: (e.g. training.delta: 2.0)",
}


def _training_as_written(data: dict) -> dict:
    """``training:`` as written, split into this class's own options and TRL's keys (kept by name in
    ``trl``, over :data:`TRAINING_DEFAULTS`). TRL's keys are checked (names, types, TRL's own rules) by
    ``training.trainer_args`` before any model loads."""
    old = [k for k in data if k in OLD_TRAINING_KEYS]
    if old:
        raise ConfigError("; ".join(f"training.{k} is an old key that this release no longer reads: write "
                                    f"{OLD_TRAINING_KEYS[k]} instead" for k in old))
    own = {f.name for f in fields(TrainingConfig)} - {"trl"}
    return {**{k: v for k, v in data.items() if k in own},
            "trl": {**TRAINING_DEFAULTS, **{str(k): _plain(v) for k, v in data.items() if k not in own}}}


def config_from_dict(data: dict) -> RecipeConfig:
    """Build a RecipeConfig from a plain dict; every unknown key and wrong type raises one ConfigError."""
    return convert_value(data or {}, RecipeConfig, "")


def config_to_dict(cfg: Any) -> dict:
    """The config as plain data, as a YAML file writes it: TRL's fields directly under ``training`` by name."""
    d = dataclasses.asdict(cfg)
    if isinstance(cfg, RecipeConfig):
        d["training"] = {**d["training"].pop("trl"), **d["training"]}  # trl popped before the rest is read
    return d


def merge_dicts(base: dict, update: dict) -> dict:
    """Deep-merge ``update`` into a copy of ``base`` (lists are replaced, not appended).

    A mapping of list positions onto a list changes those entries only: ``rewards.0.weight=2``
    arrives as ``{"rewards": {"0": {"weight": 2}}}`` and sets the first reward's weight.
    """
    out = dict(base)
    for key, value in update.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merge_dicts(out[key], value)
        elif isinstance(value, dict) and isinstance(out.get(key), list) and value and all(_is_index(k) for k in value):
            out[key] = _merge_into_list(key, out[key], value)
        else:
            out[key] = value
    return out


def _is_index(key: Any) -> bool:
    return (isinstance(key, int) and not isinstance(key, bool)) or (isinstance(key, str) and key.lstrip("-").isdigit())


def _merge_into_list(key: str, items: list, update: dict) -> list:
    """``items`` with the entries ``update`` names by position merged (mappings) or replaced."""
    out = list(items)
    for i, value in ((int(index), value) for index, value in update.items()):
        if not 0 <= i < len(out):
            raise ConfigError(f"{key}.{i}: '{key}' has {len(out)} entries (positions 0 to {len(out) - 1}"
                              + (", counted from the first: none counts from the end" if i < 0 else "")
                              + f"); to give the whole list, write {key}=[...] (e.g. '{key}=[{{name: xml_count}}]')")
        out[i] = merge_dicts(out[i], value) if isinstance(out[i], dict) and isinstance(value, dict) else value
    return out


def parse_override(text: str) -> dict:
    """``'training.max_steps=50'`` -> ``{'training': {'max_steps': 50}}`` (value parsed as YAML).

    A string field keeps the text as typed: ``output_dir=007`` is ``"007"``, not 7.
    """
    if "=" not in text:
        raise ConfigError(f"override '{text}' is not of the form section.key=value (e.g. training.max_steps=50)")
    key, raw = text.split("=", 1)
    value = read_yaml(raw, f"override '{text}': the value", key.strip()) if raw.strip() else ""
    out: dict = {}
    node = out
    parts = key.strip().split(".")
    for part in parts[:-1]:
        node = node.setdefault(part, {})
    node[parts[-1]] = value
    return out


def load_config(source: str | os.PathLike | dict | None = None, *, base: dict | None = None,
                overrides: list[str | dict] | None = None) -> RecipeConfig:
    """Load a recipe config from a YAML path or dict, on top of ``base``, then apply overrides.

    An override is ``'section.key=value'`` text or an already parsed partial config (a dict).
    """
    data: dict = dict(base or {})
    if source is not None:
        if isinstance(source, dict):
            loaded = source
        else:
            path = Path(source)
            if path.is_dir():
                inside = path / "config.yaml"
                hint = f"a run's config is {inside}" if inside.is_file() else "e.g. recipes/gsm8k.yaml"
                raise ConfigError(f"--config '{path}' is a directory, not a config file; give the YAML file "
                                  f"itself ({hint})")
            if not path.is_file():
                raise ConfigError(f"config file '{path}' does not exist; check the path given to --config")
            loaded = read_yaml(path.read_bytes(), f"config file '{path}'") or {}  # YAML reads a UTF-16 BOM
            if not isinstance(loaded, dict):
                raise ConfigError(f"config file '{path}' must hold a mapping at the top level "
                                  "(section: {key: value}), not a single value or a list")
        data = merge_dicts(data, loaded)
    for item in overrides or []:
        data = merge_dicts(data, item if isinstance(item, dict) else parse_override(item))
    return config_from_dict(data)


def dump_config(cfg: RecipeConfig, path: str | os.PathLike | None = None) -> str:
    """Write the resolved config as YAML (to ``path`` when given) and return the text."""
    text = yaml.safe_dump(config_to_dict(cfg), sort_keys=False, default_flow_style=False)
    if path is not None:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_text(text)
    return text


def describe(cls: type = RecipeConfig, prefix: str = "", instance: Any = None) -> list[tuple[str, str, str]]:
    """(key, default, help) for every field, nested keys dotted; used by ``--help-config``.

    The defaults shown are ``instance``'s (a recipe's resolved config) when given, else the class's.
    """
    rows = []
    if instance is None:
        instance = cls() if cls is not RewardSpec else None
    for f in fields(cls):
        key = f"{prefix}{f.name}"
        tp = get_type_hints(cls)[f.name]
        if dataclasses.is_dataclass(tp):
            rows.extend(describe(tp, key + ".", getattr(instance, f.name, None)))
            continue
        if cls is TrainingConfig and f.name == "trl":
            continue  # the CLI lists the installed TRL's own fields, with TRL's help, in its place
        default = getattr(instance, f.name) if instance is not None else ""
        if isinstance(default, list) and default and all(isinstance(r, RewardSpec) for r in default):
            shown = "[" + ", ".join(f"{r.name} x{r.weight:g}" for r in default) + "]"
        elif isinstance(default, list) and default and all(isinstance(s, StageConfig) for s in default):
            shown = "[" + ", ".join(f"{s.name} ({s.kind})" for s in default) + "]"
        else:
            shown = repr(default)
        rows.append((key, shown, f.metadata.get("help", "")))
    return rows


# ---------------------------------------------------------------- validation of shapes and names


def validate(cfg: RecipeConfig) -> list[str]:
    """Every problem of the config's own values, one line each (:meth:`RecipeConfig.problems`)."""
    return cfg.problems()


def format_problems(problems: list[str]) -> str:
    """The one message a list of problems makes (the text of a ConfigError)."""
    return problems[0] if len(problems) == 1 else "the recipe config has problems:\n  - " + "\n  - ".join(problems)


def check(cfg: RecipeConfig) -> None:
    """Raise ConfigError listing every shape problem of ``cfg``; see also ``training.checks``."""
    problems = validate(cfg)
    if problems:
        raise ConfigError(format_problems(problems))
