"""Typed recipe configuration: dataclasses with help text, YAML round-trip, overrides, checks.

A recipe config is a YAML file whose sections mirror :class:`RecipeConfig`. Unknown keys are
rejected with the list of valid ones, so a typo never silently falls back to a default::

    cfg = load_config("recipes/gsm8k.yaml", overrides=["training.max_steps=50"])
    problems = cfg.problems()          # every problem at once, before any model is loaded
    dump_config(cfg, "outputs/run/config.yaml")
    assert load_config("outputs/run/config.yaml") == cfg
"""

from __future__ import annotations

import dataclasses
import difflib
import os
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, get_args, get_origin, get_type_hints

import yaml

#: The names each choice may take: the one list every module, message and help text uses.
BACKENDS = ("auto", "unsloth", "transformers")
DTYPES = ("auto", "bf16", "fp16", "fp32")
DEVICES = ("auto", "cuda", "cpu")
FAST_INFERENCE = ("auto", "on", "off")


class ConfigError(ValueError):
    """A recipe config is invalid. The message names the field, the value and the fix."""


def _f(default: Any = dataclasses.MISSING, *, help: str, factory: Any = None):
    """A dataclass field with help text (read by ``describe`` and the CLI)."""
    if factory is not None:
        return field(default_factory=factory, metadata={"help": help})
    return field(default=default, metadata={"help": help})


@dataclass
class ModelConfig:
    name: str = _f(
        "unsloth/Qwen2.5-1.5B-Instruct-bnb-4bit",
        help="Hub id or local directory of the base model; 'builtin:tiny' builds the tiny offline model.",
    )
    backend: str = _f("auto", help="'unsloth', 'transformers', or 'auto' (Unsloth when importable).")
    max_seq_length: int = _f(1024, help="Longest prompt + completion, in tokens.")
    load_in_4bit: bool = _f(True, help="Load the base weights in 4-bit NF4 (needs CUDA and bitsandbytes).")
    fast_inference: str = _f(
        "auto", help="vLLM generation: 'auto' (when vllm is installed and CUDA present), 'on' or 'off'."
    )
    gpu_memory_utilization: float = _f(
        0.6, help="Share of GPU memory vLLM may take (its weights and KV cache) when standby is off; with "
                  "standby Unsloth sets it from the card's size.")
    vllm_standby: str = _f(
        "auto", help="Unsloth's vLLM standby (weights shared with training, vLLM asleep while training): "
                     "'auto' (on with Unsloth + vLLM), 'on' or 'off'.")
    vllm_server: str | None = _f(
        None, help="host:port of a running `trl vllm-serve` to generate on (TRL vllm_mode='server'); needs backend transformers."
    )
    dtype: str = _f("auto", help="'auto' (bf16 where the GPU supports it, fp16 otherwise, fp32 on CPU), or bf16/fp16/fp32.")
    device: str = _f("auto", help="'auto' (CUDA when present), 'cuda' or 'cpu'.")
    trust_remote_code: bool = _f(False, help="Allow model code from the hub repository.")


@dataclass
class LoraSettings:
    r: int = _f(16, help="LoRA rank.")
    alpha: int = _f(32, help="LoRA alpha (scale = alpha / r).")
    dropout: float = _f(0.0, help="LoRA dropout.")
    target_modules: list[str] = _f(
        help="Linear layers that get adapters ('all-linear' allowed as a single entry).",
        factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"],
    )
    max_lora_rank: int | None = _f(None, help="vLLM's largest LoRA rank (Unsloth fast inference); defaults to r.")


@dataclass
class DataConfig:
    source: str = _f(
        "openai/gsm8k",
        help="Hub dataset id, a local .jsonl/.json/.csv/.parquet file, or 'synthetic' (offline generator).",
    )
    subset: str | None = _f("main", help="Hub dataset configuration name (GSM8K: 'main').")
    split: str = _f("train", help="Split to train on.")
    limit: int | None = _f(None, help="Use at most this many rows (after filtering).")
    num_synthetic: int = _f(512, help="Rows to generate when source is 'synthetic'.")
    max_prompt_tokens: int = _f(256, help="Drop prompts longer than this many tokens (with a report).")
    system_prompt: str | None = _f(None, help="Override the task's system prompt.")
    question_column: str = _f("question", help="Column holding the question.")
    answer_column: str = _f("answer", help="Column holding the reference answer.")
    shuffle_seed: int | None = _f(None, help="Shuffle the rows with this seed (None keeps file order).")


@dataclass
class RewardSpec:
    name: str = _f(help="Reward name from the registry, or a dotted import path 'pkg.module:function'.")
    weight: float = _f(1.0, help="Weight of this reward in the total.")
    params: dict[str, Any] = _f(help="Keyword parameters passed to the reward's constructor.", factory=dict)


@dataclass
class TrainingConfig:
    max_steps: int = _f(250, help="Optimizer steps.")
    learning_rate: float = _f(5e-6, help="Peak learning rate.")
    lr_scheduler_type: str = _f("cosine", help="transformers scheduler name ('cosine', 'constant', ...).")
    warmup_ratio: float = _f(0.1, help="Share of steps spent warming up the learning rate.")
    weight_decay: float = _f(0.1, help="AdamW weight decay.")
    max_grad_norm: float = _f(0.1, help="Gradient clipping norm.")
    optim: str = _f("adamw_8bit", help="transformers optimizer name; 'adamw_8bit' falls back to 'adamw_torch' on CPU.")
    num_generations: int = _f(8, help="Completions sampled per prompt (the GRPO group).")
    per_device_train_batch_size: int = _f(8, help="Completions per device per step; a multiple of num_generations per generation batch.")
    gradient_accumulation_steps: int = _f(1, help="Micro-batches accumulated per optimizer step.")
    steps_per_generation: int | None = _f(None, help="Micro-batches served by one generation round (TRL default: accumulation steps).")
    max_completion_length: int = _f(256, help="Longest completion, in tokens.")
    temperature: float = _f(1.0, help="Sampling temperature during training.")
    top_p: float = _f(1.0, help="Nucleus sampling during training.")
    beta: float = _f(0.0, help="KL coefficient; > 0 loads a reference model and logs 'kl'.")
    loss_type: str = _f("dapo", help="TRL GRPO loss: 'dapo', 'grpo', 'dr_grpo', 'bnpo'.")
    mask_truncated_completions: bool = _f(
        True, help="Leave completions cut at max_completion_length out of the loss (DAPO's setting; Unsloth "
                   "applies it to an explicit loss_type dapo, so it is written out for both backends).")
    epsilon_high: float | None = _f(
        0.28, help="Upper clip of the importance ratio (DAPO's 0.28; null = the lower epsilon, TRL's 0.2).")
    scale_rewards: str = _f("group", help="TRL reward scaling: 'group', 'batch' or 'none'.")
    logging_steps: int = _f(1, help="Log metrics every N steps.")
    save_steps: int = _f(100, help="Save a resumable checkpoint every N steps (0 = only on SIGINT/SIGTERM).")
    gradient_checkpointing: bool = _f(True, help="Recompute activations in backward to save memory.")
    report_to: list[str] = _f(help="TRL/transformers loggers: wandb, tensorboard, trackio.", factory=list)
    # -- the toolkit's own training options (TOOLKIT_TRAINING_FIELDS): not GRPOConfig fields, never passed to TRL
    dynamic_sampling: str = _f(
        "off", help="Groups whose rewards all agree teach nothing: 'off' trains on them (TRL's behaviour), 'drop' "
                    "leaves them out of the loss, 'refill' also generates for further prompts until the batch is full "
                    "of informative groups (DAPO's dynamic sampling). See docs/dynamic-sampling.md.")
    max_sampling_rounds: int = _f(
        3, help="dynamic_sampling=refill: most generation rounds per step, the first included; a batch still "
                "short after them trains on the informative groups it has.")
    passthrough: dict[str, Any] = _f(
        help="Every other field of the installed TRL's GRPOConfig, written under training: by its own name "
             "(e.g. training.epsilon_high: 0.28); checked against GRPOConfig before any model loads.",
        factory=dict)


#: ``training:`` options that belong to the toolkit, not to TRL's GRPOConfig (never passed to TRL).
TOOLKIT_TRAINING_FIELDS = ("dynamic_sampling", "max_sampling_rounds")

#: Values of ``training.dynamic_sampling`` (unsloth_grpo.training.dynamic_sampling.MODES).
DYNAMIC_SAMPLING_MODES = ("off", "drop", "refill")

#: GRPOConfig/SFTConfig fields the toolkit sets itself, and the config key that decides each.
TRAINER_FIELDS_OWNED_ELSEWHERE = {
    "output_dir": "output_dir (top level, or --output-dir)",
    "seed": "seed (top level)",
    "data_seed": "seed (top level)",
    "bf16": "model.dtype",
    "fp16": "model.dtype",
    "use_cpu": "model.device",
    "reward_weights": "rewards[].weight",
    "save_total_limit": "run.keep_last",
    "save_strategy": "training.save_steps (0 saves only on SIGINT/SIGTERM)",
    "use_vllm": "model.fast_inference or model.vllm_server",
    "vllm_mode": "model.fast_inference or model.vllm_server",
    "vllm_server_base_url": "model.vllm_server",
    "vllm_gpu_memory_utilization": "model.gpu_memory_utilization",
}


@dataclass
class RunConfig:
    """What the toolkit does around TRL's trainer (not GRPOConfig fields)."""

    keep_last: int | None = _f(2, help="Keep the newest N complete checkpoints under OUTPUT/checkpoints (null keeps all).")
    samples_every: int = _f(10, help="Print and store sample generations every N steps (0 = never).")


@dataclass
class EvalConfig:
    every: int = _f(0, help="Evaluate a held-out slice every N training steps (0 = never); logged as eval/*.")
    before_after: bool = _f(False, help="Evaluate before and after training and write report.md / report.json.")
    split: str = _f("test", help="Held-out split of data.source.")
    limit: int = _f(32, help="Held-out problems to evaluate.")
    samples: int = _f(1, help="Completions per problem (pass@k for k up to this).")
    max_new_tokens: int | None = _f(None, help="Generation length (default: training.max_completion_length).")
    temperature: float = _f(0.7, help="Sampling temperature for samples beyond the first (the first is greedy).")
    batch_size: int = _f(16, help="Sequences generated per batch.")


@dataclass
class ToolsConfig:
    functions: list[str] = _f(
        help="Tools the model may call between turns: names from unsloth_grpo.tools or import paths 'pkg.module:fn'.",
        factory=list,
    )
    environment: str | None = _f(
        None, help="A stateful environment (one instance per rollout; its public methods are its tools): a name from "
                   "unsloth_grpo.tools or an import path 'pkg.module:Factory'.",
    )
    max_tool_calling_iterations: int = _f(4, help="Tool rounds per completion: call, result, continue (TRL's field).")
    timeout: float = _f(5.0, help="Seconds one tool call may take; a slower call returns an error to the model.")


STAGE_KINDS = ("grpo", "sft")


@dataclass
class StageConfig:
    name: str = _f(help="Stage name: its directory OUTPUT/stages/NN-name and its label in the summary.")
    kind: str = _f("grpo", help="'grpo' (reinforcement with the stage's rewards) or 'sft' (supervised on formatted examples).")
    max_steps: int = _f(50, help="Optimizer steps of this stage.")
    learning_rate: float | None = _f(None, help="Learning rate of this stage (default: training.learning_rate).")
    rewards: list[RewardSpec] = _f(help="GRPO rewards of this stage (default: the recipe's rewards).", factory=list)
    training: dict[str, Any] = _f(help="Other training.* settings for this stage only, e.g. {temperature: 0.8}.",
                                  factory=dict)
    num_examples: int = _f(200, help="SFT stages: how many formatted examples to train on.")


@dataclass
class RecipeConfig:
    task: str = _f("gsm8k", help="Task module under unsloth_grpo.tasks.")
    output_dir: str = _f("outputs/gsm8k", help="Where the adapter, metrics and resolved config go.")
    seed: int = _f(3407, help="Random seed for data order, sampling and initialisation.")
    model: ModelConfig = _f(help="Base model and how to load it.", factory=ModelConfig)
    lora: LoraSettings = _f(help="LoRA adapter settings.", factory=LoraSettings)
    data: DataConfig = _f(help="Training data.", factory=DataConfig)
    rewards: list[RewardSpec] = _f(help="Rewards with weights and parameters.", factory=list)
    training: TrainingConfig = _f(
        help="TRL GRPOConfig fields by their own names (the ones below have this toolkit's defaults; any other "
             "field of the installed GRPOConfig is passed through).", factory=TrainingConfig)
    run: RunConfig = _f(help="Samples and checkpoint rotation: the toolkit's own settings around the trainer.",
                        factory=RunConfig)
    monitor: dict[str, Any] = _f(
        help="Health monitor thresholds and windows (see unsloth_grpo.training.monitor.HealthThresholds).", factory=dict
    )
    evaluation: EvalConfig = _f(help="Held-out evaluation during and around training.", factory=EvalConfig)
    tools: ToolsConfig = _f(help="Functions the model may call during generation (see docs/tools.md).",
                            factory=ToolsConfig)
    stages: list[StageConfig] = _f(
        help="Stages run in order on one adapter, each with its own rewards/steps/lr (empty: a single GRPO run). "
             "See unsloth_grpo.training.stages.", factory=list
    )

    def problems(self) -> list[str]:
        """Problems of the config's own shape (types, ranges, names); see :func:`validate`.

        The full pre-load check, with rewards, tasks, TRL's fields and the machine, is
        :func:`unsloth_grpo.training.checks.config_problems`.
        """
        return validate(self)


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


def read_yaml(text: str, what: str) -> Any:
    """Parse YAML text (a config file or an override's value), keeping typed scalars' text."""
    try:
        return yaml.load(text, Loader=_Loader)  # noqa: S506 - a SafeLoader subclass
    except yaml.YAMLError as exc:
        raise ConfigError(f"{what} is not valid YAML ({_yaml_error(exc)}); fix the syntax, "
                          "or quote the value") from None


# ---------------------------------------------------------------- conversion to and from dicts


def _convert(value: Any, tp: Any, where: str) -> Any:
    """Convert a YAML value to the annotated type, or raise ConfigError naming ``where``."""
    origin = get_origin(tp)
    if tp is str and isinstance(value, _Typed):
        return str(value)  # what was typed: "007", "yes", "2026-11-30"
    args = get_args(tp)
    if args and type(None) in args:  # Optional[X]
        if _plain(value) is None:
            return None
        inner = [a for a in args if a is not type(None)]
        return _convert(value, inner[0], where)
    value = value if dataclasses.is_dataclass(tp) or origin is list else _plain(value)
    if dataclasses.is_dataclass(tp):
        if isinstance(value, tp):
            return value
        if not isinstance(value, dict):
            raise ConfigError(f"{where}: expected a mapping, got {_plain(value)!r}")
        return _from_dict(tp, value, where)
    if origin is list:
        (item_tp,) = get_args(tp) or (Any,)
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"{where}: expected a list, got {_plain(value)!r}")
        return [_convert(v, item_tp, f"{where}[{i}]") for i, v in enumerate(value)]
    if origin is dict:
        if not isinstance(value, dict):
            raise ConfigError(f"{where}: expected a mapping, got {value!r}")
        return dict(value)
    if tp is Any:
        return value
    if tp is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in ("true", "false", "yes", "no", "1", "0"):
            return value.lower() in ("true", "yes", "1")
        raise ConfigError(f"{where}: expected true or false, got {value!r}")
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, (int, str)):
            raise ConfigError(f"{where}: expected an integer, got {value!r}")
        try:
            return int(value)
        except ValueError:
            raise ConfigError(f"{where}: expected an integer, got {value!r}") from None
    if tp is float:
        if isinstance(value, bool):
            raise ConfigError(f"{where}: expected a number, got {value!r}")
        try:
            return float(value)
        except (TypeError, ValueError):
            raise ConfigError(f"{where}: expected a number, got {value!r}") from None
    if tp is str:
        if isinstance(value, bool):  # a bool from a Python dict, not from YAML text
            return "true" if value else "false"
        if not isinstance(value, (str, int, float)):
            raise ConfigError(f"{where}: expected a string, got {value!r}")
        return str(value)
    return value


def _training_keys(data: dict, where: str) -> dict:
    """The ``training`` mapping with the old keys folded in and every GRPOConfig field kept."""
    data = dict(data)
    extra = data.pop("extra", None) or {}
    if not isinstance(extra, dict):
        raise ConfigError(f"{where}.extra: expected a mapping of GRPOConfig fields, got {_plain(extra)!r}; "
                          f"write those fields directly under {where}:")
    for key, value in extra.items():
        if key in data:
            raise ConfigError(f"{where}.{key} is set both directly and under {where}.extra; keep the direct one")
        data[key] = value
    named = {f.name for f in fields(TrainingConfig)} - {"passthrough"}
    passthrough = dict(_plain(data.pop("passthrough", None) or {}))
    for key in [k for k in data if k not in named]:
        passthrough[str(key)] = _plain(data.pop(key))
    data["passthrough"] = passthrough
    return data


def _from_dict(cls: type, data: dict, where: str = "") -> Any:
    hints = get_type_hints(cls)
    if cls is RecipeConfig and isinstance(data.get("training"), dict):
        data = dict(data)
        training = dict(data["training"])
        run = dict(data.get("run") or {})
        for old in ("keep_last", "samples_every"):  # moved to run:; the old key still works, and wins
            if old in training:
                run[old] = training.pop(old)
        data["training"], data["run"] = training, run
    if cls is TrainingConfig:
        data = _training_keys(data, where or "training")
    names = [f.name for f in fields(cls)]
    unknown = [k for k in data if k not in names]
    if unknown:
        key = unknown[0]
        close = difflib.get_close_matches(str(key), names, n=1)
        hint = f" Did you mean '{close[0]}'?" if close else ""
        prefix = f"{where}." if where else ""
        raise ConfigError(
            f"unknown config key '{prefix}{key}'.{hint} Valid keys{' under ' + where if where else ''}: "
            + ", ".join(names)
        )
    kwargs = {}
    for name, value in data.items():
        kwargs[name] = _convert(value, hints[name], f"{where}.{name}" if where else name)
    try:
        return cls(**kwargs)
    except TypeError as exc:  # a required field (RewardSpec.name) is missing
        raise ConfigError(f"{where or cls.__name__}: {exc}") from None


def config_from_dict(data: dict) -> RecipeConfig:
    """Build a RecipeConfig from a plain dict; unknown keys raise ConfigError."""
    return _from_dict(RecipeConfig, data or {})


def config_to_dict(cfg: Any) -> dict:
    """The config as plain data; GRPOConfig pass-through fields sit under ``training`` by name."""
    d = dataclasses.asdict(cfg)

    def flatten(training: dict) -> None:
        training.update(training.pop("passthrough", None) or {})

    if isinstance(cfg, RecipeConfig):
        flatten(d["training"])
    return d


def merge_dicts(base: dict, update: dict) -> dict:
    """Deep-merge ``update`` into a copy of ``base`` (lists are replaced, not appended)."""
    out = dict(base)
    for key, value in update.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merge_dicts(out[key], value)
        else:
            out[key] = value
    return out


def parse_override(text: str) -> dict:
    """``'training.max_steps=50'`` -> ``{'training': {'max_steps': 50}}`` (value parsed as YAML).

    A string field keeps the text as typed: ``output_dir=007`` is ``"007"``, not 7.
    """
    if "=" not in text:
        raise ConfigError(f"override '{text}' is not of the form section.key=value (e.g. training.max_steps=50)")
    key, raw = text.split("=", 1)
    value = read_yaml(raw, f"override '{text}': the value") if raw.strip() else ""
    out: dict = {}
    node = out
    parts = key.strip().split(".")
    for part in parts[:-1]:
        node = node.setdefault(part, {})
    node[parts[-1]] = value
    return out


def load_config(
    source: str | os.PathLike | dict | None = None,
    *,
    base: dict | None = None,
    overrides: list[str | dict] | None = None,
) -> RecipeConfig:
    """Load a recipe config from a YAML path or dict, on top of ``base``, then apply overrides.

    An override is ``'section.key=value'`` text or an already parsed partial config (a dict).
    """
    data: dict = dict(base or {})
    if source is not None:
        if isinstance(source, dict):
            loaded = source
        else:
            path = Path(source)
            if not path.is_file():
                raise ConfigError(f"config file '{path}' does not exist; check the path given to --config")
            loaded = read_yaml(path.read_text(), f"config file '{path}'") or {}
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
        if cls is TrainingConfig and f.name == "passthrough":
            continue  # the CLI lists the installed GRPOConfig's own fields in its place
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
    """Check the config's own values (types, ranges, names); return every problem, one line each.

    This imports nothing: rewards, tasks, TRL's fields, the process layout and the machine are
    checked by :func:`unsloth_grpo.training.checks.config_problems` on top of this.
    """
    p: list[str] = []
    m, t, lo, d = cfg.model, cfg.training, cfg.lora, cfg.data
    if m.backend not in BACKENDS:
        p.append(f"model.backend='{m.backend}' is not one of {', '.join(BACKENDS)}")
    if m.dtype not in DTYPES:
        p.append(f"model.dtype='{m.dtype}' is not one of {', '.join(DTYPES)}")
    if m.fast_inference not in FAST_INFERENCE:
        p.append(f"model.fast_inference='{m.fast_inference}' must be one of {', '.join(FAST_INFERENCE)}")
    if m.vllm_standby not in FAST_INFERENCE:
        p.append(f"model.vllm_standby='{m.vllm_standby}' must be one of {', '.join(FAST_INFERENCE)}")
    if m.device not in DEVICES:
        p.append(f"model.device='{m.device}' must be one of {', '.join(DEVICES)}")
    if not m.name.strip():
        p.append("model.name is empty; give a hub id, a local model directory or 'builtin:tiny'")
    if not 0.05 <= m.gpu_memory_utilization <= 0.95:
        p.append(f"model.gpu_memory_utilization={m.gpu_memory_utilization} should lie between 0.05 and 0.95")
    if t.num_generations < 2:
        p.append(
            f"training.num_generations={t.num_generations}: GRPO compares completions within a group, "
            "so it needs at least 2 (8 is typical)"
        )
    if t.max_completion_length < 1:
        p.append(f"training.max_completion_length={t.max_completion_length}: a completion needs at least 1 token; "
                 "set it to the longest answer you expect, e.g. 256")
    if d.max_prompt_tokens + t.max_completion_length > m.max_seq_length:
        p.append(
            f"data.max_prompt_tokens ({d.max_prompt_tokens}) + training.max_completion_length "
            f"({t.max_completion_length}) = {d.max_prompt_tokens + t.max_completion_length} exceeds "
            f"model.max_seq_length ({m.max_seq_length}); raise max_seq_length or shorten one of them"
        )
    if lo.r < 1:
        p.append(f"lora.r={lo.r} must be at least 1")
    if lo.max_lora_rank is not None and lo.r > lo.max_lora_rank:
        p.append(f"lora.r={lo.r} exceeds lora.max_lora_rank={lo.max_lora_rank}; raise max_lora_rank to at least {lo.r}")
    if t.max_steps < 1:
        p.append(f"training.max_steps={t.max_steps} must be at least 1")
    if t.learning_rate <= 0:
        p.append(f"training.learning_rate={t.learning_rate} must be positive")
    if not 0 <= t.warmup_ratio < 1:
        p.append(f"training.warmup_ratio={t.warmup_ratio} must lie in [0, 1): it is a share of max_steps")
    if t.beta < 0:
        p.append(f"training.beta={t.beta} must be >= 0")
    if t.temperature <= 0:
        p.append(f"training.temperature={t.temperature} must be > 0 for GRPO sampling")
    if t.dynamic_sampling not in DYNAMIC_SAMPLING_MODES:
        p.append(f"training.dynamic_sampling='{t.dynamic_sampling}' is not one of {', '.join(DYNAMIC_SAMPLING_MODES)}")
    if t.max_sampling_rounds < 1:
        p.append(f"training.max_sampling_rounds={t.max_sampling_rounds}: a step needs at least 1 generation round "
                 "(3 is typical for refill)")
    if not cfg.rewards and not (cfg.stages and all(s.rewards or s.kind == "sft" for s in cfg.stages)):
        p.append("rewards: the list is empty; add at least one, e.g. {name: correctness, weight: 2.0}")
    if cfg.run.keep_last is not None and cfg.run.keep_last < 1:
        p.append(f"run.keep_last={cfg.run.keep_last}: keep at least 1 checkpoint, or null to keep all")
    if cfg.run.samples_every < 0:
        p.append(f"run.samples_every={cfg.run.samples_every} must be >= 0 (0 = never)")
    for i, spec in enumerate(cfg.rewards):
        if not isinstance(spec.params, dict):
            p.append(f"rewards[{i}].params must be a mapping")
    e = cfg.evaluation
    if e.every < 0 or e.limit < 1 or e.samples < 1:
        p.append(f"evaluation: every={e.every}, limit={e.limit}, samples={e.samples}: every >= 0, limit and samples >= 1")
    return p


def format_problems(problems: list[str]) -> str:
    """The one message a list of problems makes (the text of a ConfigError)."""
    if len(problems) == 1:
        return problems[0]
    return "the recipe config has problems:\n  - " + "\n  - ".join(problems)


def check(cfg: RecipeConfig) -> None:
    """Raise ConfigError listing every shape problem of ``cfg``; see also ``training.checks``."""
    problems = validate(cfg)
    if problems:
        raise ConfigError(format_problems(problems))
