"""Several processes: who this process is, how the batch is split, and whether that is valid.

Unsloth's fast path is single-GPU. Past one card the recipes train on the transformers + peft
backend under the launcher TRL itself builds on (accelerate, or plain torchrun)::

    torchrun --nproc_per_node 4 -m unsloth_grpo.cli train --config recipes/gsm8k.yaml model.load_in_4bit=false
    accelerate launch --config_file recipes/accelerate/ddp.yaml --num_processes 4 \\
        -m unsloth_grpo.cli train --config recipes/gsm8k.yaml model.load_in_4bit=false

Everything here reads environment variables and the config only (no torch import), so every
problem is reported before a model is loaded::

    layout = detect()                           # world size, rank, launcher, DDP/FSDP/DeepSpeed
    print(describe_layout(cfg, layout))         # per-device and global batch numbers
    problems = batch_problems(cfg.training, layout.world_size)   # TRL's own divisibility rule

Set ``UNSLOTH_GRPO_RANK_LOG_DIR`` to make *every* rank write what it logged and how it ended to
that folder (``metrics.rank{N}.jsonl``, ``rank{N}.json``); the two-process test compares them.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Mapping

from unsloth_grpo.config import is_unsloth
from unsloth_grpo.hardware.launch import Layout, detect, parse_vllm_server

#: Folder where every rank writes its own log when set (off by default; for tests and debugging).
RANK_LOG_ENV = "UNSLOTH_GRPO_RANK_LOG_DIR"


# ---------------------------------------------------------------- batch arithmetic (TRL's rules)


@dataclass(frozen=True)
class BatchPlan:
    """How TRL 1.x splits work, in completions (TRL's batch sizes count completions, not prompts)."""

    world_size: int
    per_device: int  # completions per device per micro-batch (per_device_train_batch_size)
    accumulation: int  # micro-batches per optimizer step (gradient_accumulation_steps)
    steps_per_generation: int  # micro-batches one generation round serves
    generation_batch: int  # completions sampled per generation round, all devices together
    num_generations: int

    @property
    def per_step(self) -> int:
        """Completions that make one optimizer step, all devices together."""
        return self.per_device * self.accumulation * self.world_size

    @property
    def prompts_per_generation(self) -> float:
        return self.generation_batch / self.num_generations

    @property
    def per_device_generation(self) -> int:
        return self.per_device * self.steps_per_generation


def plan_batch(training, world_size: int) -> tuple[BatchPlan | None, list[str]]:
    """TRL 1.14's ``GRPOConfig.__post_init__`` batch rules, applied to our config before loading.

    TRL resolves the generation batch *globally*: ``generation_batch_size`` defaults to
    ``per_device_train_batch_size x num_processes x steps_per_generation`` (``steps_per_generation``
    defaulting to ``gradient_accumulation_steps``), an explicit ``generation_batch_size`` must be a
    multiple of ``per_device_train_batch_size x num_processes``, the two may not both be set, and
    the generation batch must be a multiple of ``num_generations``. So a group of generations may
    span devices (4 per device on 2 devices with 8 generations is valid: rewards are gathered
    before the advantages are computed). ``generation_batch_size`` is a GRPOConfig field passed
    through ``training`` by name.
    """
    t = training
    pd, ga, g = t.per_device_train_batch_size, t.gradient_accumulation_steps, t.num_generations
    spg = t.steps_per_generation
    gen = t.get("generation_batch_size")
    problems: list[str] = []
    if not all(isinstance(x, int) and not isinstance(x, bool) for x in (pd, ga, g, spg, gen) if x is not None):
        return None, []  # a value of the wrong type: TRL's check of the config names it
    if pd < 1 or ga < 1 or world_size < 1:
        return None, [f"training.per_device_train_batch_size ({pd}) and gradient_accumulation_steps ({ga}) "
                      "must be at least 1"]
    where = f"per_device_train_batch_size ({pd}) x processes ({world_size})"
    if gen is None and spg is None:
        spg = ga
        gen = pd * world_size * spg
    elif gen is not None and spg is None:
        if gen % (pd * world_size):
            return None, [f"training.generation_batch_size={gen} must be a multiple of {where} = "
                          f"{pd * world_size}; set it to {_round_up(gen, pd * world_size)} or remove it"]
        spg = gen // (pd * world_size)
    elif gen is None:
        if spg < 1:
            return None, [f"training.steps_per_generation={spg} must be at least 1"]
        gen = pd * world_size * spg
    else:
        return None, ["training.steps_per_generation and training.generation_batch_size are both set; "
                      "TRL accepts only one: remove one of them"]
    if g >= 2 and gen % g:
        unit = g // math.gcd(g, world_size * spg)  # per-device sizes that fix it are multiples of this
        divisors = [d for d in range(2, g + 1) if gen % d == 0]
        alt = f" or training.num_generations={divisors[-1]}" if divisors else ""
        problems.append(
            f"generation batch = per_device_train_batch_size ({pd}) x steps_per_generation ({spg}) x "
            f"processes ({world_size}) = {gen} is not divisible by training.num_generations={g} (TRL needs whole "
            f"groups of generations per round); set training.per_device_train_batch_size={_nearest(pd, unit)}"
            f"{alt}"
        )
    return BatchPlan(world_size, pd, ga, spg, gen, g), problems


def batch_problems(training, world_size: int) -> list[str]:
    """The problems :func:`plan_batch` finds; empty when TRL will accept the batch settings."""
    return plan_batch(training, world_size)[1]


def _round_up(n: int, unit: int) -> int:
    return max(unit, -(-n // unit) * unit)


def _nearest(n: int, unit: int) -> int:
    """The multiple of ``unit`` closest to ``n`` (the smaller one on a tie: it needs less memory)."""
    down = (n // unit) * unit
    up = _round_up(n, unit)
    return up if down < unit or up - n < n - down else down


# ---------------------------------------------------------------- what to print at start


def describe_layout(cfg, world: int | Layout | None = None) -> str:
    """Per-device and global numbers for this launch, as printed by rank 0 at start.

    ``world`` is a world size (to plan a launch from one process), a :class:`Layout`, or None
    for the current launch.
    """
    layout = detect() if world is None else world if isinstance(world, Layout) else Layout(
        world_size=world, local_world_size=world, strategy="ddp" if world > 1 else "single")
    plan, problems = plan_batch(cfg.training, layout.world_size)
    lines = [f"layout: {layout.summary()}"]
    if plan is None:
        return "\n".join(lines + [f"  invalid batch settings: {p}" for p in problems])
    prompts = plan.prompts_per_generation
    prompts_text = f"{prompts:g} prompt{'s' if prompts != 1 else ''}"
    lines += [
        f"  per device: {plan.per_device} completions per micro-batch x {plan.accumulation} accumulation "
        f"step{'s' if plan.accumulation != 1 else ''}; generates {plan.per_device_generation} completions "
        f"per round",
        f"  global    : {plan.per_step} completions per optimizer step; a generation round samples "
        f"{plan.generation_batch} completions = {prompts_text} x {plan.num_generations} generations "
        f"and serves {plan.steps_per_generation} micro-batch{'es' if plan.steps_per_generation != 1 else ''}",
    ]
    if plan.num_generations > plan.per_device_generation and layout.world_size > 1:
        lines.append(f"  note      : a group of {plan.num_generations} generations spans "
                     f"{math.ceil(plan.num_generations / plan.per_device_generation)} devices; TRL gathers the "
                     "rewards across processes before computing advantages")
    if layout.strategy in ("fsdp", "deepspeed") and cfg.model.device == "cpu":
        lines.append(f"  note      : on CPU accelerate runs a {layout.strategy_label} launch as plain data parallel")
    server = getattr(cfg.model, "vllm_server", None)
    if server:
        try:
            lines.append(f"  generation: vLLM server at {parse_vllm_server(server)[0]} (TRL vllm_mode='server')")
        except ValueError as exc:
            problems = [*problems, str(exc)]
    lines += [f"  problem   : {p}" for p in problems]
    return "\n".join(lines)


# ---------------------------------------------------------------- checks before loading


def layout_problems(cfg, layout: Layout | None = None, *, have=None, gpu_count=None) -> list[str]:
    """What cannot work in this launch, found from the config and the environment alone.

    ``have(name) -> bool`` says whether a package is importable and ``gpu_count() -> int`` how
    many CUDA devices this machine shows (both injected by tests).
    """
    import importlib.util

    layout = detect() if layout is None else layout
    have = have or (lambda name: importlib.util.find_spec(name) is not None)
    m = cfg.model
    out: list[str] = []
    if layout.distributed and is_unsloth(m.backend):
        out.append(f"model.backend='unsloth' under {layout.world_size} processes: Unsloth's fast path is single-GPU; "
                   "set model.backend=transformers (or auto) to train on several GPUs")
    if layout.distributed and m.device != "cpu":
        gpus = (gpu_count or _visible_gpus)()
        if 0 < gpus < layout.local_world_size:  # 0 GPUs: the run falls back to CPU, where any count works
            out.append(f"{layout.local_world_size} processes on this machine but only {gpus} GPU"
                       f"{'s' if gpus != 1 else ''} visible (CUDA_VISIBLE_DEVICES="
                       f"{os.environ.get('CUDA_VISIBLE_DEVICES', 'unset')}): launch one process per GPU, "
                       f"e.g. --nproc_per_node {gpus} (torchrun) or --num_processes {gpus} (accelerate)")
    if layout.strategy == "deepspeed" and not have("deepspeed"):
        out.append("the launch asks for DeepSpeed (ACCELERATE_USE_DEEPSPEED) but deepspeed is not installed: "
                   "pip install deepspeed, or launch with recipes/accelerate/ddp.yaml or fsdp.yaml")
    sharded = layout.strategy == "fsdp" or (layout.strategy == "deepspeed" and layout.zero_stage == 3)
    if sharded and m.load_in_4bit:
        out.append(f"model.load_in_4bit=true under {layout.strategy_label}: the backend places 4-bit weights on one "
                   "device per process, which parameter sharding cannot split; set model.load_in_4bit=false "
                   "(or launch with recipes/accelerate/ddp.yaml or zero2.yaml)")
    server = getattr(m, "vllm_server", None)
    if server:
        try:
            parse_vllm_server(server)
        except ValueError as exc:
            out.append(str(exc))
        if is_unsloth(m.backend):
            out.append("model.vllm_server is set with model.backend='unsloth': Unsloth generates with its own "
                       "in-process vLLM; set model.backend=transformers to generate on a vLLM server")
        if m.fast_inference == "on":
            out.append("model.vllm_server and model.fast_inference='on' both ask for vLLM: the server replaces "
                       "in-process generation; set model.fast_inference=auto")
        if not have("vllm"):
            out.append("model.vllm_server is set but vllm is not installed in the training environment (TRL's "
                       "client needs it to push weights to the server): pip install 'unsloth-grpo[vllm]'")
    return out


def _visible_gpus() -> int:
    from unsloth_grpo.hardware.profiles import cuda_devices

    return len(cuda_devices())  # the one reader of the cards (it leaves CUDA uninitialized here)


def vllm_server_kwargs(value: str) -> dict[str, Any]:
    """GRPOConfig fields that send generation to a running ``trl vllm-serve`` / ``vllm serve``."""
    base, _, _ = parse_vllm_server(value)
    return {"use_vllm": True, "vllm_mode": "server", "vllm_server_base_url": base}


# ---------------------------------------------------------------- per-rank evidence


@contextlib.contextmanager
def cpu_resume_fix() -> Iterator[None]:
    """Let a data-parallel CPU run resume: transformers 5.17 loads the optimizer state with
    ``map_location=args.device`` when there are several processes, and on CPU accelerate makes that
    ``cpu:<rank>``, which ``torch.load`` cannot restore to ("don't know how to restore data location
    ... tagged with cpu:0"). Within the block such a location is read as plain ``cpu``."""
    import torch

    real = torch.load

    def load(f, map_location=None, *args, **kwargs):
        if map_location is not None and not callable(map_location) and not isinstance(map_location, dict):
            device = torch.device(map_location)
            if device.type == "cpu" and device.index is not None:
                map_location = "cpu"
        return real(f, map_location, *args, **kwargs)

    torch.load = load
    try:
        yield
    finally:
        torch.load = real


def rank_log_callbacks(env: Mapping[str, str] | None = None) -> list:
    """A callback that makes every rank record its logs, when ``UNSLOTH_GRPO_RANK_LOG_DIR`` is set.

    Only rank 0 writes the run's outputs; this side channel is how a test (or a puzzled user)
    sees what the *other* ranks did: ``metrics.rank{N}.jsonl`` holds every row that rank's
    trainer logged, and ``rank{N}.json`` its final step, whether it was the rank allowed to save,
    accelerate's distributed type and a SHA-256 of its trainable parameters (equal on every rank
    when gradients were synchronised).
    """
    env = os.environ if env is None else env
    folder = env.get(RANK_LOG_ENV)
    if not folder:
        return []
    from transformers import TrainerCallback

    directory = Path(folder)
    directory.mkdir(parents=True, exist_ok=True)

    class RankLog(TrainerCallback):
        def on_log(self, args, state, control, logs=None, **kwargs):
            from unsloth_grpo.training.results import metrics_row

            row = metrics_row(state, logs)  # the same rows rank 0 writes to metrics.jsonl
            if row is None:
                return
            with (directory / f"metrics.rank{args.process_index}.jsonl").open("a") as fh:
                fh.write(json.dumps(row) + "\n")

        def on_train_end(self, args, state, control, model=None, **kwargs):
            from accelerate.state import PartialState

            info = {
                "rank": args.process_index,
                "world_size": args.world_size,
                "global_step": state.global_step,
                "should_save": bool(args.should_save),
                "distributed_type": PartialState().distributed_type.value,
                "trainable_sha256": trainable_digest(model) if model is not None else None,
            }
            (directory / f"rank{args.process_index}.json").write_text(json.dumps(info, indent=2))

    return [RankLog()]


def trainable_digest(model) -> str:
    """SHA-256 over the names and bytes of the trainable parameters, in name order."""
    import hashlib

    h = hashlib.sha256()
    for name, p in sorted(model.named_parameters(), key=lambda kv: kv[0]):
        if p.requires_grad:
            h.update(name.encode())
            h.update(p.detach().float().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()
