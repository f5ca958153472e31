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

BACKENDS = ("auto", "unsloth", "transformers")
DTYPES = ("auto", "bf16", "fp16", "fp32")


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
    gpu_memory_utilization: float = _f(0.6, help="Share of GPU memory vLLM may take (its weights and KV cache).")
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
    scale_rewards: str = _f("group", help="TRL reward scaling: 'group', 'batch' or 'none'.")
    logging_steps: int = _f(1, help="Log metrics every N steps.")
    save_steps: int = _f(100, help="Save a resumable checkpoint every N steps (0 = only on SIGINT/SIGTERM).")
    keep_last: int | None = _f(2, help="Keep the newest N complete checkpoints under OUTPUT/checkpoints (null keeps all).")
    gradient_checkpointing: bool = _f(True, help="Recompute activations in backward to save memory.")
    report_to: list[str] = _f(help="TRL/transformers loggers: wandb, tensorboard, trackio.", factory=list)
    samples_every: int = _f(10, help="Print and store sample generations every N steps (0 = never).")
    extra: dict[str, Any] = _f(help="Further GRPOConfig fields passed through unchanged.", factory=dict)


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
    training: TrainingConfig = _f(help="GRPO optimisation settings.", factory=TrainingConfig)
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
        """Every problem with this config, each naming the field and the fix. Loads no model."""
        return validate(self)


# ---------------------------------------------------------------- conversion to and from dicts


def _convert(value: Any, tp: Any, where: str) -> Any:
    """Convert a YAML value to the annotated type, or raise ConfigError naming ``where``."""
    origin = get_origin(tp)
    if dataclasses.is_dataclass(tp):
        if isinstance(value, tp):
            return value
        if not isinstance(value, dict):
            raise ConfigError(f"{where}: expected a mapping, got {value!r}")
        return _from_dict(tp, value, where)
    if origin is list:
        (item_tp,) = get_args(tp) or (Any,)
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"{where}: expected a list, got {value!r}")
        return [_convert(v, item_tp, f"{where}[{i}]") for i, v in enumerate(value)]
    if origin is dict:
        if not isinstance(value, dict):
            raise ConfigError(f"{where}: expected a mapping, got {value!r}")
        return dict(value)
    args = get_args(tp)
    if args and type(None) in args:  # Optional[X]
        if value is None:
            return None
        inner = [a for a in args if a is not type(None)]
        return _convert(value, inner[0], where)
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
        if isinstance(value, bool):  # YAML 1.1 reads on/off/yes/no as booleans
            return "on" if value else "off"
        if not isinstance(value, (str, int, float)):
            raise ConfigError(f"{where}: expected a string, got {value!r}")
        return str(value)
    return value


def _from_dict(cls: type, data: dict, where: str = "") -> Any:
    hints = get_type_hints(cls)
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
    return dataclasses.asdict(cfg)


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
    """``'training.max_steps=50'`` -> ``{'training': {'max_steps': 50}}`` (value parsed as YAML)."""
    if "=" not in text:
        raise ConfigError(f"override '{text}' is not of the form section.key=value (e.g. training.max_steps=50)")
    key, raw = text.split("=", 1)
    value = yaml.safe_load(raw) if raw.strip() else ""
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
    overrides: list[str] | None = None,
) -> RecipeConfig:
    """Load a recipe config from a YAML path or dict, on top of ``base``, then apply overrides."""
    data: dict = dict(base or {})
    if source is not None:
        if isinstance(source, dict):
            loaded = source
        else:
            path = Path(source)
            if not path.exists():
                raise ConfigError(f"config file '{path}' does not exist")
            loaded = yaml.safe_load(path.read_text()) or {}
            if not isinstance(loaded, dict):
                raise ConfigError(f"config file '{path}' must hold a mapping at the top level")
        data = merge_dicts(data, loaded)
    for text in overrides or []:
        data = merge_dicts(data, parse_override(text))
    return config_from_dict(data)


def dump_config(cfg: RecipeConfig, path: str | os.PathLike | None = None) -> str:
    """Write the resolved config as YAML (to ``path`` when given) and return the text."""
    text = yaml.safe_dump(config_to_dict(cfg), sort_keys=False, default_flow_style=False)
    if path is not None:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_text(text)
    return text


def describe(cls: type = RecipeConfig, prefix: str = "") -> list[tuple[str, str, str]]:
    """(key, default, help) for every field, nested keys dotted; used by ``--help-config``."""
    rows = []
    instance = cls() if cls is not RewardSpec else None
    for f in fields(cls):
        key = f"{prefix}{f.name}"
        tp = get_type_hints(cls)[f.name]
        if dataclasses.is_dataclass(tp):
            rows.extend(describe(tp, key + "."))
            continue
        default = getattr(instance, f.name) if instance is not None else ""
        rows.append((key, repr(default), f.metadata.get("help", "")))
    return rows


# ---------------------------------------------------------------- validation


def validate(cfg: RecipeConfig) -> list[str]:
    """Check a config without loading anything heavy; return every problem as one line each."""
    p: list[str] = []
    m, t, lo, d = cfg.model, cfg.training, cfg.lora, cfg.data
    if m.backend not in BACKENDS:
        p.append(f"model.backend='{m.backend}' is not one of {', '.join(BACKENDS)}")
    if m.dtype not in DTYPES:
        p.append(f"model.dtype='{m.dtype}' is not one of {', '.join(DTYPES)}")
    if m.fast_inference not in ("auto", "on", "off"):
        p.append(f"model.fast_inference='{m.fast_inference}' must be 'auto', 'on' or 'off'")
    if m.device not in ("auto", "cuda", "cpu"):
        p.append(f"model.device='{m.device}' must be 'auto', 'cuda' or 'cpu'")
    if not 0.05 <= m.gpu_memory_utilization <= 0.95:
        p.append(f"model.gpu_memory_utilization={m.gpu_memory_utilization} should lie between 0.05 and 0.95")
    if t.num_generations < 2:
        p.append(
            f"training.num_generations={t.num_generations}: GRPO compares completions within a group, "
            "so it needs at least 2 (8 is typical)"
        )
    from unsloth_grpo.training.distributed import batch_problems, detect, layout_problems

    layout = detect()  # WORLD_SIZE etc. from torchrun / accelerate launch; 1 process otherwise
    p.extend(batch_problems(t, layout.world_size))  # TRL's generation-batch rules, across all processes
    p.extend(layout_problems(cfg, layout))
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
    if t.beta < 0:
        p.append(f"training.beta={t.beta} must be >= 0")
    if t.temperature <= 0:
        p.append(f"training.temperature={t.temperature} must be > 0 for GRPO sampling")
    if not cfg.rewards and not (cfg.stages and all(s.rewards or s.kind == "sft" for s in cfg.stages)):
        p.append("rewards: the list is empty; add at least one, e.g. {name: correctness, weight: 2.0}")
    if t.keep_last is not None and t.keep_last < 1:
        p.append(f"training.keep_last={t.keep_last}: keep at least 1 checkpoint, or null to keep all")
    for i, spec in enumerate(cfg.rewards):
        if not isinstance(spec.params, dict):
            p.append(f"rewards[{i}].params must be a mapping")
    try:
        from unsloth_grpo.training.monitor import HealthThresholds

        HealthThresholds.from_dict(cfg.monitor)
    except (ValueError, TypeError) as exc:
        p.append(f"monitor: {exc}")
    e = cfg.evaluation
    if e.every < 0 or e.limit < 1 or e.samples < 1:
        p.append(f"evaluation: every={e.every}, limit={e.limit}, samples={e.samples}: every >= 0, limit and samples >= 1")
    p.extend(_reward_problems(cfg))
    if cfg.tools.functions or cfg.tools.environment:
        from unsloth_grpo.tools import tool_problems

        p.extend(tool_problems(cfg))
    p.extend(_hardware_problems(cfg))
    if cfg.stages:
        from unsloth_grpo.training.stages import stage_problems

        p.extend(q for q in stage_problems(cfg) if q not in p)
    return p


def _reward_problems(cfg: RecipeConfig) -> list[str]:
    """Build every reward once so unknown names and bad parameters surface before loading."""
    out = []
    try:
        from unsloth_grpo.rewards import get_reward
    except ImportError:  # pragma: no cover - the package always ships rewards
        return out
    for i, spec in enumerate(cfg.rewards):
        try:
            get_reward(spec.name, **spec.params)
        except Exception as exc:  # noqa: BLE001 - report whatever the constructor says
            out.append(f"rewards[{i}] ({spec.name}): {exc}")
    return out


def _hardware_problems(cfg: RecipeConfig) -> list[str]:
    """bf16 on a GPU without it, vLLM asked for but missing, 4-bit on CPU, unsloth missing."""
    import importlib.util

    out = []
    m = cfg.model
    cuda = _cuda_capability()
    if m.backend == "unsloth" and importlib.util.find_spec("unsloth") is None:
        out.append("model.backend='unsloth' but unsloth is not installed: pip install 'unsloth-grpo[unsloth]', or set model.backend=auto")
    if m.fast_inference == "on":
        if importlib.util.find_spec("vllm") is None:
            out.append("model.fast_inference='on' but vllm is not installed: pip install 'unsloth-grpo[vllm]', or set model.fast_inference=auto")
        elif cuda is None:
            out.append("model.fast_inference='on' needs a CUDA GPU; set model.fast_inference=auto on this machine")
    if m.dtype == "bf16" and cuda is not None and cuda < (8, 0):
        out.append(
            f"model.dtype='bf16' but this GPU (compute capability {cuda[0]}.{cuda[1]}) has no bf16; "
            "set model.dtype=fp16 (or auto)"
        )
    if m.device == "cuda" and cuda is None:
        out.append("model.device='cuda' but no CUDA GPU is visible; set model.device=auto to run on CPU")
    return out


def _cuda_capability() -> tuple[int, int] | None:
    """The first GPU's compute capability, or None without CUDA. Imports torch only if loaded."""
    try:
        import torch
    except ImportError:
        return None
    if not torch.cuda.is_available():
        return None
    return torch.cuda.get_device_capability(0)


def check(cfg: RecipeConfig) -> None:
    """Raise ConfigError listing every problem, or return None when the config is sound."""
    problems = validate(cfg)
    if problems:
        raise ConfigError("the recipe config has problems:\n  - " + "\n  - ".join(problems))
