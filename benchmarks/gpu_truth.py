"""GPU truth kit: one command that measures the GPU path on a bare GPU machine in under 8 minutes.

    python3 benchmarks/gpu_truth.py              # on the GPU machine (the wheel set carried, see docs/gpu_truth.md)
    python3 benchmarks/gpu_truth.py --dry        # on a CPU: everything a CPU can check, in ~30 s
    python3 benchmarks/gpu_truth.py --update-docs   # regenerate docs/gpu_truth.md from benchmarks/results/

The model is Qwen2.5-1.5B-Instruct's architecture, vocabulary included (the logits dominate GRPO
memory), with random weights and a tokenizer of the same size built here: no hub. Each
configuration runs in its own process under a timeout cut from one hard budget (8 minutes by
default); one that fails records its error and the kit moves on:

1. ``unsloth-4bit``: Unsloth, 4-bit, LoRA r=16, 8 generations x 512 completion tokens, batch 8;
2. ``transformers-bf16``: transformers + peft on bf16 weights, same settings;
3. ``transformers-4bit``: transformers + bitsandbytes NF4, same settings;
4. ``recipe-gsm8k``: ``python -m unsloth_grpo.recipes.gsm8k`` end to end on that model with synthetic
   data, the auto backend and two steps, as a user runs it (config, load, train, save);
5. ``winner-3b``: if time remains, Qwen2.5-3B's shape with the fastest of 1-3.

Each records peak allocated and reserved memory (torch), the device's own peak (cudaMemGetInfo,
sampled), seconds per step, completion tokens per second, the planner's estimate for the same
settings with its error in percent, versions and the card. A random model would end its completions
at an early end-of-sequence token; ``min_new_tokens`` holds every completion to the configured
length, and the measured mean length is recorded to prove it. vLLM is not measured: its wheel is far
over what the machine can be sent.

Results go to ``benchmarks/results/gpu_truth_<card>_<date>.json`` (and into the folder ``$OUT`` names, when set);
``--dry`` writes under ``outputs/gpu_truth/`` with ``"dry": true``.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import threading
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tools"))

import gather_gpu_wheels as wheels  # noqa: E402  (the carried package list and its unpacker)



class _ProjectModule:
    """A module of this project, imported at its first use.

    The project's config needs pydantic, which the GPU image lacks: there it is one of the carried
    wheels, on the path only once :func:`prepare_packages` has unpacked them, after the kit starts.
    """

    def __init__(self, name: str):
        self._name = name

    def __getattr__(self, attr: str):
        return getattr(importlib.import_module(self._name), attr)


# light modules (no torch); what they import is read at first use
architecture = _ProjectModule("unsloth_grpo.hardware.architecture")
memory = _ProjectModule("unsloth_grpo.hardware.memory")
planner = _ProjectModule("unsloth_grpo.hardware.planner")

RESULTS = ROOT / "benchmarks" / "results"
DRY_RESULTS = ROOT / "outputs" / "gpu_truth"
DOCS_PAGE = ROOT / "docs" / "gpu_truth.md"
#: Where the carried wheels are unpacked on the GPU machine.
DEVICE_SITE = Path(os.environ.get("GPU_TRUTH_SITE", "/tmp/gpu_truth_site"))
BUDGET_S = 480.0
#: Seconds kept free for every required configuration still to come when one is given its timeout.
MIN_SHARE_S = 60.0

#: Qwen2.5-1.5B-Instruct's config.json, written out by hand (hub id Qwen/Qwen2.5-1.5B-Instruct).
QWEN25_1P5B = dict(
    model_type="qwen2", hidden_size=1536, intermediate_size=8960, num_hidden_layers=28, num_attention_heads=12,
    num_key_value_heads=2, vocab_size=151936, tie_word_embeddings=True, rope_theta=1_000_000.0,
    max_position_embeddings=32768, rms_norm_eps=1e-6, hidden_act="silu",
)
#: Qwen2.5-3B-Instruct, for the fifth configuration.
QWEN25_3B = dict(QWEN25_1P5B, hidden_size=2048, intermediate_size=11008, num_hidden_layers=36,
                 num_attention_heads=16, num_key_value_heads=2)
#: The same layout at toy scale: what ``--dry`` trains on a CPU (the full vocabulary's tokenizer
#: alone takes tens of seconds to build and load on a busy 2-core machine; tests check it apart).
DRY_SHAPE = dict(QWEN25_1P5B, vocab_size=4096, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                 num_attention_heads=4, num_key_value_heads=2)
#: tests/test_gpu.py's model: two narrow layers, the full vocabulary (so the logits term is real).
GPU_TEST_SHAPE = dict(QWEN25_1P5B, hidden_size=256, intermediate_size=512, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2)
ARCHS = {"qwen2.5-1.5b": QWEN25_1P5B, "qwen2.5-3b": QWEN25_3B, "dry": DRY_SHAPE, "gpu-test": GPU_TEST_SHAPE}

#: Modules the kit imports on the GPU machine; each must be carried or on its image.
KIT_IMPORTS = {"torch": "torch", "transformers": "transformers", "peft": "peft", "accelerate": "accelerate",
               "trl": "trl", "datasets": "datasets", "unsloth": "unsloth", "unsloth_zoo": "unsloth_zoo",
               "bitsandbytes": "bitsandbytes", "tokenizers": "tokenizers", "yaml": "pyyaml", "rich": "rich"}


@dataclass
class RunSettings:
    """What every measured configuration shares (the issue's settings)."""

    lora_rank: int = 16
    num_generations: int = 8
    per_device_train_batch_size: int = 8
    max_completion_length: int = 512
    prompt_tokens: int = 128
    steps: int = 3  # the first one is warm-up (compilation, allocator growth)


@dataclass
class Config:
    name: str
    title: str
    kind: str = "train"  # 'train' (the trainer, measured inside) or 'recipe' (the CLI end to end)
    backend: str = "auto"
    load_in_4bit: bool = True
    arch: str = "qwen2.5-1.5b"
    cap_s: float = 150.0
    optional: bool = False


#: What ``--dry`` trains: the same path, a few tokens.
DRY_SETTINGS = RunSettings(num_generations=4, per_device_train_batch_size=4, max_completion_length=8,
                           prompt_tokens=16, steps=2)

CONFIGS = [
    # 2026-12-04 on an H200: about 60 s to import and load, 72 s the first step, 21 s the next
    Config("unsloth-4bit", "Unsloth, 4-bit, LoRA r=16", backend="unsloth", load_in_4bit=True, cap_s=170),
    Config("transformers-bf16", "transformers + peft, bf16 base", backend="transformers", load_in_4bit=False,
           cap_s=120),
    Config("transformers-4bit", "transformers + bitsandbytes 4-bit", backend="transformers", load_in_4bit=True,
           cap_s=150),
    Config("recipe-gsm8k", "recipe gsm8k end to end (auto backend)", kind="recipe", cap_s=150),
    Config("winner-3b", "Qwen2.5-3B shape, fastest of 1-3", arch="qwen2.5-3b", cap_s=150, optional=True),
]


# ------------------------------------------------------------------------------ model and tokenizer


def build_tokenizer(path: Path, vocab_size: int):
    """A byte-level BPE tokenizer with exactly ``vocab_size`` entries and a ChatML template.

    The project's tiny tokenizer is trained on synthetic text (a few hundred entries, the answer
    tags whole), then filled up with word tokens that no merge produces: prompts tokenize like
    text, any id a random model samples decodes to a word, and the embedding and LM head have the
    real model's size.
    """
    from transformers import PreTrainedTokenizerFast

    from unsloth_grpo.models.builtin import build_tokenizer as build_small

    small = build_small(path)
    spec = json.loads((path / "tokenizer.json").read_text())
    vocab = spec["model"]["vocab"]
    # transformers numbers added tokens after the model's vocabulary, so the filler words go in
    # between: trained vocabulary, filler words, then the added answer tags at the very end
    extra = sorted((t for t in spec["added_tokens"] if t["content"] not in vocab), key=lambda t: t["id"])
    first_extra = vocab_size - len(extra)
    for i, token in enumerate(extra):
        token["id"] = first_extra + i
    for idx in range(len(vocab), first_extra):
        vocab[f"\u0120w{idx}"] = idx  # '\u0120' is byte-level BPE's space: id N decodes to " wN"
    (path / "tokenizer.json").write_text(json.dumps(spec, ensure_ascii=False))
    tok = PreTrainedTokenizerFast(tokenizer_file=str(path / "tokenizer.json"), eos_token=small.eos_token,
                                  pad_token=small.pad_token, bos_token=None, unk_token=None)
    tok.chat_template = small.chat_template
    tok.padding_side = "left"
    tok.save_pretrained(str(path))
    if len(tok) != vocab_size:
        raise RuntimeError(f"tokenizer has {len(tok)} entries, wanted {vocab_size}")
    return tok


def hf_config(arch: dict, tokenizer=None):
    from transformers import AutoConfig

    cfg = dict(arch)
    ids = {}
    if tokenizer is not None:
        ids = dict(bos_token_id=None, eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id)
    return AutoConfig.for_model(cfg.pop("model_type"), **cfg, **ids)


def build_model_dir(arch_name: str, path: Path, device: str) -> Path:
    """Save a random-weight model of ``ARCHS[arch_name]`` (bf16 on CUDA, fp32 on CPU) with its tokenizer."""
    arch = ARCHS[arch_name]
    marker = path / "gpu_truth_model.json"
    wanted = {"arch": arch, "device": device}
    if marker.exists() and json.loads(marker.read_text()) == wanted:
        return path
    import torch
    from transformers import AutoModelForCausalLM

    path.mkdir(parents=True, exist_ok=True)
    tok = build_tokenizer(path, arch["vocab_size"])
    config = hf_config(arch, tok)
    torch.manual_seed(0)
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16 if device == "cuda" else torch.float32)
    model.generation_config.eos_token_id = tok.eos_token_id
    model.generation_config.pad_token_id = tok.pad_token_id
    model.save_pretrained(str(path))
    del model
    marker.write_text(json.dumps(wanted))
    return path


def meta_parameter_count(arch: dict) -> int:
    """Parameters of ``arch`` as transformers builds it, on the meta device (no memory)."""
    import torch
    from transformers import AutoModelForCausalLM

    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(hf_config(arch))
    return sum(p.numel() for p in model.parameters())


def prompt_dataset(tokenizer, tokens: int, rows: int):
    """Plain-text prompts of ``tokens`` tokens each (cut from the tokenizer's own training text)."""
    from datasets import Dataset

    from unsloth_grpo.models.builtin import _corpus

    ids = tokenizer(" ".join(_corpus(400, seed=1)), add_special_tokens=False)["input_ids"]
    prompts = [tokenizer.decode(ids[r * tokens:(r + 1) * tokens]) for r in range(rows)]
    return Dataset.from_dict({"prompt": prompts})


def spread_reward(completions, **kwargs):
    """Distinct rewards within a group, so the advantages are not zero; the values mean nothing."""
    return [(sum(map(ord, str(c))) % 101) / 100.0 for c in completions]


def forced_length_kwargs(completion_tokens: int) -> dict:
    """GRPOConfig fields that hold every completion to ``completion_tokens`` tokens.

    TRL 1.14 merges ``generation_kwargs`` into transformers' GenerationConfig; ``min_new_tokens``
    masks the end-of-sequence token until that length. All completions then end truncated, and
    Unsloth (which turns ``mask_truncated_completions`` on with an explicit ``loss_type='dapo'``)
    would drop them all from the loss, so it is set off explicitly.
    """
    return {"generation_kwargs": {"min_new_tokens": completion_tokens}, "mask_truncated_completions": False}


# ------------------------------------------------------------------------------ one run (child process)


class DevicePeak:
    """The device's own used-memory peak (cudaMemGetInfo: total - free), sampled in a thread."""

    def __init__(self, every: float = 0.05):
        import torch

        free, total = torch.cuda.mem_get_info()
        #: In use on the device before this process loads anything (its own CUDA context included).
        self.before = total - free
        self.torch, self.every, self.peak = torch, every, self.before
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def _loop(self):
        while not self._stop.is_set():
            free, total = self.torch.cuda.mem_get_info()
            self.peak = max(self.peak, total - free)
            time.sleep(self.every)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()


def _gib(n: float | None) -> float | None:
    return None if n is None else round(n / memory.GiB, 3)


def run_train(spec: dict) -> dict:
    """Train ``steps`` GRPO steps through the project's backend layer and measure them."""
    from unsloth_grpo.hardware.backend import select_backend

    select_backend(spec["backend"])  # Unsloth first, before transformers/trl, when it is the backend
    import contextlib

    import torch
    from transformers import TrainerCallback
    from trl import GRPOTrainer

    from unsloth_grpo.config import load_config
    from unsloth_grpo.hardware.backend import load_model
    from unsloth_grpo.training.train import build_grpo_args

    s = RunSettings(**spec["settings"])
    cuda = spec["device"] == "cuda"
    cfg = load_config({
        "output_dir": spec["output_dir"], "seed": 0,
        "model": {"name": spec["model_dir"], "backend": spec["backend"], "load_in_4bit": spec["load_in_4bit"],
                  "device": spec["device"], "fast_inference": "off",
                  "max_seq_length": s.prompt_tokens + s.max_completion_length + 16},
        "lora": {"r": s.lora_rank, "alpha": 2 * s.lora_rank},
        "training": {"max_steps": s.steps, "learning_rate": 1e-5, "num_generations": s.num_generations,
                     "per_device_train_batch_size": s.per_device_train_batch_size,
                     "max_completion_length": s.max_completion_length, "save_steps": 0, "logging_steps": 1,
                     **forced_length_kwargs(s.max_completion_length)},
    })
    sampler = DevicePeak() if cuda else contextlib.nullcontext()
    t0 = time.perf_counter()
    with sampler:
        loaded = load_model(cfg.model, cfg.lora, seed=0, gradient_checkpointing=True, log=print)
        load_s = time.perf_counter() - t0
        load_peak = torch.cuda.max_memory_allocated() if cuda else None
        if cuda:
            torch.cuda.reset_peak_memory_stats()
        args = build_grpo_args(cfg, loaded.info, weights=[1.0])
        dataset = prompt_dataset(loaded.tokenizer, s.prompt_tokens, max(16, s.steps * s.per_device_train_batch_size))
        prompt_len = max(len(loaded.tokenizer(p)["input_ids"]) for p in dataset["prompt"])
        step_s: list[float] = []
        rows: list[dict] = []

        class Measure(TrainerCallback):
            def on_step_begin(self, args, state, control, **kwargs):
                self.t = time.perf_counter()

            def on_step_end(self, args, state, control, **kwargs):
                if cuda:
                    torch.cuda.synchronize()
                step_s.append(time.perf_counter() - self.t)

            def on_log(self, args, state, control, logs=None, **kwargs):
                if logs and "reward" in logs:
                    rows.append({k: v for k, v in logs.items() if isinstance(v, (int, float))})
                    # one line per step (logged after the step ends, with its own lengths), so that a run
                    # stopped at its timeout still says what it measured
                    print("STEP " + json.dumps({
                        "step": len(step_s), "seconds": round(step_s[-1], 3) if step_s else None,
                        "load_seconds": round(load_s, 2),
                        "peak_allocated_gb": _gib(torch.cuda.max_memory_allocated()) if cuda else None,
                        "completion_mean_length": rows[-1].get("completions/mean_length")}), flush=True)

        trainer = GRPOTrainer(model=loaded.model, processing_class=loaded.tokenizer, reward_funcs=[spread_reward],
                              args=args, train_dataset=dataset, callbacks=[Measure()])
        from unsloth_grpo.training.rollouts import RolloutCheck

        stale: list = []  # do the completions come from the weights being trained (on this GPU's numerics)?
        rollouts = RolloutCheck(trainer, stale.append, log=print, max_rounds=s.steps).install()
        before = {n: p.detach().cpu().clone() for n, p in trainer.model.named_parameters() if p.requires_grad}
        trainer.train()
        changed = {n for n, p in trainer.model.named_parameters()
                   if n in before and not torch.equal(before[n], p.detach().cpu())}
    est = memory.estimate_memory(
        spec["model_dir"], load_in_4bit=loaded.info.load_in_4bit, lora_rank=s.lora_rank,
        num_generations=s.num_generations, per_device_train_batch_size=s.per_device_train_batch_size,
        max_prompt_length=prompt_len, max_completion_length=s.max_completion_length, backend=loaded.info.backend,
        optimizer=_optimizer_name(args.optim), dtype=loaded.info.dtype)
    lengths = [row["completions/mean_length"] for row in rows if "completions/mean_length" in row]
    min_lengths = [row["completions/min_length"] for row in rows if "completions/min_length" in row]
    after_first = step_s[1:] or step_s
    per_step = sum(after_first) / len(after_first) if after_first else None
    mean_len = sum(lengths) / len(lengths) if lengths else None
    completions_per_step = s.per_device_train_batch_size * cfg.training.gradient_accumulation_steps
    measured = {
        "peak_allocated_gb": _gib(torch.cuda.max_memory_allocated()) if cuda else None,
        "peak_reserved_gb": _gib(torch.cuda.max_memory_reserved()) if cuda else None,
        "device_peak_used_gb": _gib(sampler.peak) if cuda else None,
        "device_used_before_load_gb": _gib(sampler.before) if cuda else None,
        "load_peak_allocated_gb": _gib(load_peak),
        "load_seconds": round(load_s, 2),
        "step_seconds": [round(t, 3) for t in step_s],
        "seconds_per_step": round(per_step, 3) if per_step else None,
        "completion_tokens_per_second": round(mean_len * completions_per_step / per_step, 1)
        if (per_step and mean_len) else None,
        "completion_mean_length": mean_len,
        "completion_min_length": min(min_lengths) if min_lengths else None,
        "prompt_tokens": prompt_len,
        "bnb_4bit_linears": sum(1 for mod in trainer.model.modules() if type(mod).__name__ == "Linear4bit"
                                and type(mod).__module__.startswith("bitsandbytes")),
        "trainable_tensors": len(before),
        "trainable_changed": len(changed),
        # LoRA's B starts at zero, so every B must move in the first step; A moves from the second on
        "lora_B_unchanged": sorted(n for n in before if "lora_B" in n and n not in changed)[:5],
        "rollout_check": {"rounds": rollouts.rounds,
                          "from_trained": None if rollouts.verdict is None else rollouts.verdict.from_trained,
                          "values": None if rollouts.verdict is None else rollouts.verdict.values},
    }
    return {"backend_info": loaded.info.to_dict(), "measured": measured, "estimate": est.to_dict(),
            "trainer_logs": rows}


def _optimizer_name(optim) -> str:
    """TRL's optimizer (an enum or a string) as the planner names it."""
    name = getattr(optim, "value", optim)
    return name if name in memory.OPTIMIZER_STATE_BYTES else "adamw_torch"


def planned_estimate(c: Config, settings: RunSettings) -> dict:
    """The planner's figure for a configuration at full scale, before anything runs."""
    backend = c.backend if c.backend != "auto" else "unsloth"  # the GPU machine carries Unsloth
    return memory.estimate_memory(
        ARCHS[c.arch], load_in_4bit=c.load_in_4bit, lora_rank=settings.lora_rank,
        num_generations=settings.num_generations, per_device_train_batch_size=settings.per_device_train_batch_size,
        max_prompt_length=settings.prompt_tokens, max_completion_length=settings.max_completion_length,
        backend=backend, optimizer="adamw_8bit", dtype="bf16").to_dict()


def recipe_config(spec: dict, device: str) -> dict:
    """The recipe configuration's YAML as a dict: the one the GPU run uses, or its CPU variant."""
    s = RunSettings(**spec["settings"])
    config = {
        "output_dir": spec["output_dir"],
        "model": {"name": spec["model_dir"], "max_seq_length": 1024, "load_in_4bit": True, "fast_inference": "off"},
        "data": {"source": "synthetic", "num_synthetic": 64},
        "training": {"max_steps": 2, "num_generations": s.num_generations,
                     "per_device_train_batch_size": s.per_device_train_batch_size,
                     "max_completion_length": s.max_completion_length, "save_steps": 1,
                     **forced_length_kwargs(s.max_completion_length)},
        "run": {"samples_every": 0},
    }
    if device == "cpu":  # 4-bit needs CUDA
        config["model"].update(load_in_4bit=False, device="cpu")
    return config


def _write_yaml(path: Path, data: dict) -> Path:
    import yaml

    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


#: The GPU machine image the kit was prepared for (as its provider described it, 2026-11): one H200, 143771 MiB,
#: driver 580.159.03, Python 3.12.3, torch 2.11.0+cu130, 64 GiB of disk.
GPU_IMAGE = {"python": "3.12.3", "torch": "2.11.0+cu130", "cuda": "13.0", "gpu": "NVIDIA H200",
             "total_bytes": 143771 * 2**20, "capability": (9, 0), "driver": "580.159.03", "disk_gb": 60}


def carried_requirements(dist: str) -> list[str] | None:
    """The Requires-Dist lines of the carried ``dist`` wheel: from its unpacked METADATA when the wheel
    set was gathered, else from this venv when it holds the same version; None when neither."""
    import importlib.metadata
    from email.parser import Parser

    version = wheels.WHEELS[dist]
    for meta in wheels.SITE.glob("*.dist-info/METADATA"):
        msg = Parser().parsestr(meta.read_text(encoding="utf-8"))
        if wheels._canon(msg["Name"]) == wheels._canon(dist) and msg["Version"] == version:
            return list(msg.get_all("Requires-Dist") or [])
    try:
        if importlib.metadata.version(dist) == version:
            return list(importlib.metadata.requires(dist) or [])
    except importlib.metadata.PackageNotFoundError:
        pass
    return None


def gpu_image_report(output_dir: str):
    """What the doctor would see on the GPU machine: its image's packages plus the carried wheels,
    its Python, torch and card; requirement markers evaluated for it (Python 3.12, Linux x86-64)."""
    from unsloth_grpo.hardware.doctor.probes import GPU, TorchInfo
    from unsloth_grpo.hardware.doctor.report import collect_report
    from unsloth_grpo.hardware.doctor.requirements import requirements_from_pyproject

    canon = wheels._canon
    versions: dict[str, str | None] = {canon(p): wheels.IMAGE_VERSIONS.get(p, "unknown") for p in wheels.IMAGE_PACKAGES}
    versions.update({canon(p): v for p, v in wheels.WHEELS.items()})
    ours, python = requirements_from_pyproject(ROOT / "pyproject.toml")
    requirements = {"unsloth-grpo": ours}
    for dist in ("unsloth", "unsloth_zoo"):
        lines = carried_requirements(dist)
        if lines is None:
            raise RuntimeError(f"cannot read the requirements of the carried {dist} {wheels.WHEELS[dist]}: run "
                               "python tools/gather_gpu_wheels.py --check (or install that version here)")
        requirements[dist] = lines
    modules = {canon(p).replace("-", "_") for p in versions}
    card = GPU(0, GPU_IMAGE["gpu"], GPU_IMAGE["total_bytes"], GPU_IMAGE["capability"], GPU_IMAGE["total_bytes"])
    torch_info = TorchInfo(GPU_IMAGE["torch"], GPU_IMAGE["cuda"], True, (card,), nvidia_driver=True,
                           driver_version=GPU_IMAGE["driver"])
    return collect_report(
        versions=versions, requirements=requirements, requires_python=python, torch_info=torch_info,
        env={k: v for k, v in child_env().items() if k.endswith("_OFFLINE")}, python_version=GPU_IMAGE["python"],
        importable=lambda mod: mod.replace("-", "_").lower() in modules, output_dir=output_dir, check_hub=False,
        disk_free=lambda _p: GPU_IMAGE["disk_gb"] * 2**30, marker_env=wheels.MARKER_ENV)


def environment_check(config_path: str, *, simulated: bool) -> dict:
    """The checks the recipe makes before loading anything, on its GPU configuration: the recipe's own
    preflight (a GPU, the model) and the config with the doctor's environment preflight. ``simulated``
    checks them against the GPU image (:func:`gpu_image_report`), else against this machine."""
    from unsloth_grpo.config import ConfigError
    from unsloth_grpo.hardware import doctor, profiles
    from unsloth_grpo.hardware.doctor.checks import EnvironmentProblem, run_checks
    from unsloth_grpo.hardware.doctor.recipe import recipe_problems
    from unsloth_grpo.hardware.doctor.report import collect_report
    from unsloth_grpo.recipes.gsm8k import RECIPE
    from unsloth_grpo.training.checks import check_before_loading

    import logging

    logging.getLogger(doctor.__name__).setLevel(logging.ERROR)  # its modules' warnings are returned, not printed
    cfg = RECIPE.resolve(config=config_path)  # as `python -m unsloth_grpo.recipes.gsm8k --config` resolves it
    report = gpu_image_report(cfg.output_dir) if simulated else None
    kw: dict = {}
    if simulated:
        card = report.torch.gpus[0]
        kw = dict(profile=profiles.CardProfile("h200", card.name, card.total_memory_bytes / 2**30,
                                               card.compute_capability, source="measured"),
                  env={"HF_HUB_OFFLINE": "1"}, hub_probe=lambda *a: (False, "no network on the GPU machine"))
    problems = [p for p in recipe_problems(cfg, **kw)]
    blocking = [str(p) for p in problems if p.blocking]
    try:  # the run's own check: the recipe's preflight again (said once here), the environment, the backend
        check_before_loading(cfg, environment=True, report=report, profile=kw.get("profile"))
    except EnvironmentProblem as exc:
        blocking += [str(p) for p in exc.problems if str(p) not in blocking]
    except ConfigError as exc:
        blocking.append(str(exc))
    if report is None:
        report = collect_report(output_dir=cfg.output_dir, check_hub=False)
    warnings = [str(p) for p in run_checks(report, backend=cfg.model.backend, fast_inference=cfg.model.fast_inference,
                                           load_in_4bit=cfg.model.load_in_4bit) if not p.blocking]
    return {"simulated": simulated, "config": str(config_path), "blocking": blocking, "warnings": warnings}


def run_recipe(spec: dict) -> dict:
    """The GSM8K recipe as a user runs it, in its own process, with a config file; figures from its outputs.

    With ``check_only`` (``--dry``) it runs what the GPU run checks before loading: ``--check`` (config
    and data) and, on the GPU configuration, the recipe's preflight and the doctor's environment checks
    against the GPU image's packages (:func:`environment_check`).
    """
    out = Path(spec["output_dir"])
    if out.exists():
        shutil.rmtree(out)
    path = _write_yaml(out.parent / f"{out.name}.yaml", recipe_config(spec, spec["device"]))
    environment = None
    if spec["device"] == "cuda":  # what the recipe's own checks will say here, recorded in case it stops
        environment = environment_check(str(path), simulated=False)
    cmd = [sys.executable, "-m", "unsloth_grpo.recipes.gsm8k", "--config", str(path)]
    if spec.get("check_only"):  # --dry: resolve the config and the data, load nothing
        cmd.append("--check")
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, env=child_env())
    seconds = time.perf_counter() - t0
    tail = (proc.stdout + proc.stderr)[-3000:]
    if proc.returncode != 0:
        why = "" if not (environment and environment["blocking"]) else \
            "\nthe doctor's checks here: " + "; ".join(environment["blocking"])
        raise RuntimeError(f"recipe exited {proc.returncode}:\n{tail}{why}")
    result: dict = {"command": " ".join(cmd), "seconds": round(seconds, 1), "log_tail": tail[-1500:],
                    "environment": environment}
    if spec.get("check_only"):
        gpu_path = _write_yaml(out.parent / f"{out.name}.gpu.yaml", recipe_config(spec, "cuda"))
        env = environment_check(str(gpu_path), simulated=True)
        result["environment"] = env
        if env["blocking"]:  # one line, the verdict's: the recipe would exit 1 there before loading
            raise RuntimeError("on the GPU image the recipe would stop before loading: "
                               + " | ".join(b.splitlines()[0] for b in env["blocking"]))
        return result
    metrics = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()] if \
        (out / "metrics.jsonl").exists() else []
    saved = sorted(p.name for p in out.iterdir())
    need = ["adapter_config.json", "adapter_model.safetensors", "config.yaml", "metrics.jsonl", "run_info.json"]
    missing = [n for n in need if n not in saved]
    if missing:
        raise RuntimeError(f"the recipe finished but did not write {', '.join(missing)}; it wrote {saved}")
    info = json.loads((out / "run_info.json").read_text())
    from unsloth_grpo.config import load_config

    gpu = planner.detect_gpu() if spec["device"] == "cuda" else None
    est = planner.estimate_for_config(load_config(out / "config.yaml"), gpu)
    times = [m["step_time"] for m in metrics if "step_time" in m]
    lengths = [m["completions/mean_length"] for m in metrics if "completions/mean_length" in m]
    result.update(backend_info=info.get("backend"), saved=saved, estimate=est.to_dict(), trainer_logs=metrics,
                  measured={"seconds_per_step": round(sum(times[1:] or times) / len(times[1:] or times), 3)
                            if times else None,
                            "completion_mean_length": sum(lengths) / len(lengths) if lengths else None,
                            "peak_allocated_gb": None})
    return result


# ------------------------------------------------------------------------------ driver (parent process)


def child_env() -> dict:
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1",
           "TRANSFORMERS_OFFLINE": "1", "UNSLOTH_DISABLE_STATISTICS": "1", "TOKENIZERS_PARALLELISM": "false"}
    if not _cuda_visible():
        # a toy model on a shared CPU: more threads only contend (a 0.7 s step took 7 s with two)
        env["OMP_NUM_THREADS"] = "1"
    paths = [str(ROOT)] + ([str(DEVICE_SITE)] if DEVICE_SITE.is_dir() else [])
    env["PYTHONPATH"] = os.pathsep.join(paths + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    return env


def _cuda_visible() -> bool:
    import torch

    return torch.cuda.is_available()  # no CUDA context in the parent: the device's reading stays the child's


def prepare_packages(log=print) -> list[str]:
    """Unpack the carried wheels when this machine lacks TRL; then say which kit imports are missing."""
    carried = wheels.CARRY
    if importlib.util.find_spec("trl") is None and any(carried.glob("*.whl")):
        names = wheels.unpack(carried, DEVICE_SITE)
        log(f"unpacked {len(names)} carried wheels into {DEVICE_SITE}")
    if DEVICE_SITE.is_dir() and str(DEVICE_SITE) not in sys.path:
        sys.path.insert(0, str(DEVICE_SITE))
        importlib.invalidate_caches()
    return [m for m in KIT_IMPORTS if importlib.util.find_spec(m) is None]


def unmet_requirements() -> list[str]:
    """Requirements of the unpacked carried packages that this machine does not meet (recorded, not fatal)."""
    if not DEVICE_SITE.is_dir():
        return []
    return wheels.requirement_problems(DEVICE_SITE, wheels.installed_here())


def wheel_list_problems() -> list[str]:
    """Each distribution the kit imports must be carried or on the GPU image; each carried wheel present."""
    from packaging.utils import canonicalize_name as canon

    carried = {canon(p) for p in wheels.WHEELS}
    image = {canon(p) for p in wheels.IMAGE_PACKAGES}
    out = [f"the kit imports {mod} ({dist}) but it is neither carried ({wheels.__file__}) nor on the GPU image"
           for mod, dist in KIT_IMPORTS.items() if canon(dist) not in carried | image]
    if wheels.CARRY.is_dir():
        have = {p.name.split("-")[0].lower() for p in wheels.CARRY.glob("*.whl")}
        out += [f"{p} is missing from {wheels.CARRY}; run tools/gather_gpu_wheels.py"
                for p in wheels.WHEELS if p.replace("-", "_").lower() not in have]
    return out


def _run_group(cmd: list[str], timeout: float) -> tuple[int, str]:
    """Run ``cmd`` in its own process group; past ``timeout`` the whole group is killed (TimeoutError)."""
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=ROOT,
                            env=child_env(), start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=timeout)
        return proc.returncode, out
    except subprocess.TimeoutExpired:
        import signal

        os.killpg(proc.pid, signal.SIGKILL)  # the child and anything it started (the recipe, pytest's runs)
        out, _ = proc.communicate()
        raise TimeoutError(out or "") from None


def _child(args: list[str], timeout: float) -> tuple[int, str]:
    return _run_group([sys.executable, __file__, *args], timeout)


def _result_of(output: str) -> dict | None:
    line = next((ln for ln in reversed(output.splitlines()) if ln.startswith("RESULT ")), None)
    return json.loads(line[len("RESULT "):]) if line else None


def partial_steps(output: str) -> dict | None:
    """What a configuration stopped at its timeout had measured: its finished steps (``STEP`` lines),
    or, from a child that printed none, the seconds of each step in the trainer's own logs."""
    steps = [json.loads(ln[len("STEP "):]) for ln in output.splitlines() if ln.startswith("STEP ")]
    if steps:
        seconds = [st["seconds"] for st in steps if st.get("seconds") is not None]
        peaks = [st["peak_allocated_gb"] for st in steps if st.get("peak_allocated_gb") is not None]
        lengths = [st["completion_mean_length"] for st in steps if st.get("completion_mean_length") is not None]
        return {"steps_done": len(steps), "step_seconds": seconds, "load_seconds": steps[0].get("load_seconds"),
                "peak_allocated_gb": max(peaks) if peaks else None,
                "completion_mean_length": sum(lengths) / len(lengths) if lengths else None, "from": "STEP lines"}
    seconds = [float(x) for x in re.findall(r"'step_time': '([0-9.eE+-]+)'", output)]
    lengths = [float(x) for x in re.findall(r"'completions/mean_length': '([0-9.eE+-]+)'", output)]
    if not seconds:
        return None
    return {"steps_done": len(seconds), "step_seconds": seconds, "load_seconds": None, "peak_allocated_gb": None,
            "completion_mean_length": sum(lengths) / len(lengths) if lengths else None,
            "from": "the trainer's logged step_time"}


def planner_error_pct(result: dict) -> float | None:
    """(estimate - measured) / measured, in percent, on allocated memory; positive = the planner is cautious."""
    est = (result.get("estimate") or {}).get("allocated_gb")
    got = (result.get("measured") or {}).get("peak_allocated_gb")
    if not est or not got:
        return None
    return round(100.0 * (est - got) / got, 1)


def verdict(r: dict) -> str:
    """One line per configuration for the results table."""
    if r["status"] == "skipped":
        return f"skipped: {r.get('error', '')}"
    if r["status"] == "planned":
        gb = (r.get("planned_estimate") or {}).get("allocated_gb")
        return f"planned only ({r.get('error', '')}): planner {gb:.2f} GiB allocated at full scale"
    part = (r.get("partial") or partial_steps(str(r.get("error", "")))) if r["status"] == "timeout" else None
    if part:
        secs = part["step_seconds"]
        later = secs[1:]
        said = f"TIMEOUT after {part['steps_done']} step(s): first {secs[0]:.1f} s"
        if later:
            said += f", then {sum(later) / len(later):.1f} s a step"
        if part.get("peak_allocated_gb") is not None:
            said += f"; peak {part['peak_allocated_gb']:.2f} GiB allocated"
        if part.get("completion_mean_length") is not None:
            said += f"; completions {part['completion_mean_length']:.0f} tokens"
        return said
    if r["status"] != "ok":
        first = next((ln for ln in reversed(str(r.get("error", "")).splitlines()) if ln.strip()), "no output")
        return f"{r['status'].upper()}: {first[:160]}"
    m = r.get("measured") or {}
    want = (r.get("settings") or {}).get("max_completion_length")
    bits = []
    if want and m.get("completion_mean_length") is not None and m["completion_mean_length"] < want - 0.5:
        bits.append(f"completions cut short (mean {m['completion_mean_length']:.0f} < {want}): figures invalid")
    if m.get("trainable_changed") == 0 or m.get("lora_B_unchanged"):
        bits.append("training left LoRA weights unchanged")
    rc = m.get("rollout_check") or {}
    if rc.get("from_trained") is False:
        bits.append("rollouts NOT from the trained weights (stale_rollouts)")
    elif rc.get("rounds") and rc.get("from_trained") is None:
        bits.append(f"rollout check undecided in {rc['rounds']} rounds (too few steps for the adapter to show)")
    err = r.get("planner_error_pct")
    if err is not None:
        if err < -5:
            bits.append(f"planner UNDER by {-err:.0f}%: OOM risk, raise its constants")
        elif err > 25:
            bits.append(f"planner over by {err:.0f}%: too cautious")
        else:
            bits.append(f"planner within {err:+.0f}%")
    if r.get("kind") == "recipe":
        bits.append("recipe ran end to end and saved its adapter" if r.get("saved") else "recipe checked")
    return "ok" + (": " + "; ".join(bits) if bits else "")


def run_config(c: Config, *, model_dir: Path, device: str, settings: RunSettings, timeout: float,
               workdir: Path) -> dict:
    spec = {"name": c.name, "kind": c.kind, "backend": c.backend, "load_in_4bit": c.load_in_4bit,
            "model_dir": str(model_dir), "device": device, "settings": asdict(settings),
            "output_dir": str(workdir / "runs" / c.name), "check_only": device == "cpu"}
    base = {"name": c.name, "title": c.title, "kind": c.kind, "arch": c.arch, "backend": c.backend,
            "load_in_4bit": c.load_in_4bit, "settings": asdict(settings), "timeout_s": round(timeout)}
    t0 = time.perf_counter()
    try:
        code, out = _child(["--run-one", json.dumps(spec)], timeout)
    except TimeoutError as exc:
        return {**base, "status": "timeout", "seconds": round(time.perf_counter() - t0, 1),
                "partial": partial_steps(str(exc)),
                "error": f"over its {timeout:.0f} s share of the budget\n{str(exc)[-2000:]}"}
    result = _result_of(out)
    seconds = round(time.perf_counter() - t0, 1)
    if code != 0 or result is None:
        return {**base, "status": "error", "seconds": seconds, "error": out[-3000:]}
    r = {**base, **result, "status": "ok", "seconds": seconds}
    r["planner_error_pct"] = planner_error_pct(r)
    return r


def card_info() -> dict:
    """The first GPU from ``nvidia-smi`` (the parent opens no CUDA context of its own), or 'cpu'."""
    import torch

    if not torch.cuda.is_available():
        return {"name": "cpu", "total_gb": None, "compute_capability": None}
    fields = "name,memory.total,compute_cap,driver_version"
    try:
        line = subprocess.run(["nvidia-smi", f"--query-gpu={fields}", "--format=csv,noheader,nounits"],
                              capture_output=True, text=True, check=True, timeout=30).stdout.splitlines()[0]
        name, total_mib, cc, driver = (x.strip() for x in line.split(","))
        info = {"name": name, "total_gb": round(float(total_mib) / 1024, 2), "compute_capability": float(cc),
                "driver": driver}
    except (OSError, subprocess.SubprocessError, ValueError, IndexError):
        gpu = planner.detect_gpu()
        info = {**gpu, "total_gb": round(gpu["total_gb"], 2)}
    return {**info, "cuda": torch.version.cuda, "devices": torch.cuda.device_count()}


def versions() -> dict:
    from importlib.metadata import PackageNotFoundError, version

    out = {"python": platform.python_version()}
    for name in ("torch", "transformers", "trl", "peft", "accelerate", "datasets", "unsloth", "unsloth_zoo",
                 "bitsandbytes", "triton", "torchao", "vllm"):
        try:
            out[name] = version(name)
        except PackageNotFoundError:
            out[name] = None
    return out


def _slug(text: str) -> str:
    return "-".join("".join(c if c.isalnum() else " " for c in text.lower()).split())


def run_kit(*, dry: bool, budget: float, workdir: Path, out_path: Path | None, only: list[str] | None,
            with_tests: bool, steps: int | None = None, log=print) -> tuple[Path, dict]:
    start = time.perf_counter()
    deadline = start + budget
    left = lambda: deadline - time.perf_counter()  # noqa: E731
    problems = wheel_list_problems()
    absent = prepare_packages(log)
    card = card_info()
    device = "cuda" if card["name"] != "cpu" else "cpu"
    if not dry and device == "cpu":
        raise SystemExit("error: no CUDA GPU is visible; run with --dry on a CPU")
    settings = RunSettings() if not dry else DRY_SETTINGS
    if steps:
        settings = replace(settings, steps=steps)
    report: dict = {
        "kit": "gpu_truth", "format": 1, "dry": dry, "card": card, "date": time.strftime("%Y-%m-%dT%H:%M:%SZ",
                                                                                          time.gmtime()),
        "budget_s": budget, "versions": versions(), "settings": asdict(settings),
        "vllm": "not measured: vLLM's wheel is far over what the GPU machine can be sent; generation here is "
                "transformers' generate",
        "wheel_problems": problems, "missing_imports": absent, "unmet_requirements": unmet_requirements(),
        "configs": [],
    }
    for p in problems + [f"cannot import {m}" for m in absent]:
        log(f"warning: {p}")

    # the architecture, checked against the planner before anything is built
    arch_checks = {}
    for name in ("qwen2.5-1.5b", "qwen2.5-3b"):
        n_meta = meta_parameter_count(ARCHS[name])
        n_plan = architecture.count_parameters(name)
        arch_checks[name] = {"meta_params": n_meta, "planner_params": n_plan, "equal": n_meta == n_plan}
        log(f"{name}: {n_meta:,} parameters built on the meta device; planner {n_plan:,}")
    report["architecture"] = arch_checks

    models: dict[str, Path] = {}

    def model_for(arch: str) -> Path:
        if arch in models:
            return models[arch]
        target = "dry" if dry else arch
        path = workdir / "models" / target
        t0 = time.perf_counter()
        if dry:  # torch is imported here already; a child would only repeat the imports
            build_model_dir(target, path, device)
        else:  # on the GPU, in a child, so that the parent holds no CUDA memory
            code, out = _child(["--build", target, str(path), device], max(30.0, left() - 30))
            if code != 0:
                raise RuntimeError(f"building {target} failed:\n{out[-2000:]}")
        log(f"built {target} in {time.perf_counter() - t0:.0f} s at {path}")
        models[arch] = path
        return path

    chosen = [c for c in CONFIGS if only is None or c.name in only]
    required = [c for c in chosen if not c.optional]
    full = RunSettings()
    for i, c in enumerate(required):
        planned = planned_estimate(c, full)
        base = {"name": c.name, "title": c.title, "kind": c.kind, "arch": c.arch, "backend": c.backend,
                "load_in_4bit": c.load_in_4bit, "planned_estimate": planned}
        if dry and c.load_in_4bit and c.kind == "train":
            r = {**base, "status": "planned", "error": "4-bit loading needs CUDA"}
            r["verdict"] = verdict(r)
            report["configs"].append(r)
            log(f"[{c.name}] {r['verdict']}")
            continue
        timeout = min(c.cap_s, left() - MIN_SHARE_S * (len(required) - 1 - i))
        if timeout < 30:
            report["configs"].append({**base, "status": "skipped", "error": f"{left():.0f} s of the budget left"})
            continue
        log(f"[{c.name}] {c.title}: up to {timeout:.0f} s")
        try:
            model_dir = model_for(c.arch)
        except (RuntimeError, TimeoutError) as exc:
            report["configs"].append({**base, "status": "error", "error": str(exc)})
            continue
        r = {"planned_estimate": planned, **run_config(c, model_dir=model_dir, device=device, settings=settings,
                                                       timeout=timeout, workdir=workdir)}
        r["verdict"] = verdict(r)
        report["configs"].append(r)
        log(f"[{c.name}] {r['verdict']} ({r['seconds']} s)")

    # the fifth: a bigger shape with the fastest of 1-3, when there is time left
    winner = _winner(report["configs"])
    for c in chosen:
        if not c.optional:
            continue
        if dry or winner is None or left() < 120:
            why = ("a GPU measurement" if dry else "no trainer configuration succeeded" if winner is None
                   else f"{left():.0f} s of the budget left")
            report["configs"].append({"name": c.name, "title": c.title, "status": "skipped", "error": why})
            continue
        wc = next(x for x in CONFIGS if x.name == winner["name"])
        big = Config(c.name, f"{c.title} ({wc.name})", backend=wc.backend, load_in_4bit=wc.load_in_4bit,
                     arch=c.arch, cap_s=c.cap_s, optional=True)
        timeout = min(c.cap_s, left() - 10)
        log(f"[{c.name}] {big.title}: up to {timeout:.0f} s")
        try:
            r = run_config(big, model_dir=model_for(c.arch), device=device, settings=settings, timeout=timeout,
                           workdir=workdir)
        except (RuntimeError, TimeoutError) as exc:
            r = {"name": c.name, "title": big.title, "status": "error", "error": str(exc)}
        r["verdict"] = verdict(r)
        report["configs"].append(r)
        log(f"[{c.name}] {r['verdict']}")

    if with_tests and device == "cuda":
        report["gpu_tests"] = run_gpu_tests(max(0.0, left() - 5), log)
    report["elapsed_s"] = round(time.perf_counter() - start, 1)

    if out_path is None:
        folder = DRY_RESULTS if dry else RESULTS
        out_path = folder / f"gpu_truth_{_slug(card['name'])}_{time.strftime('%Y%m%d-%H%M', time.gmtime())}.json"
    out_path.parent.mkdir(parents=True, exist_ok=True)
    out_path.write_text(json.dumps(report, indent=1) + "\n")
    if os.environ.get("OUT"):
        shutil.copy(out_path, Path(os.environ["OUT"]) / out_path.name)
    log(f"wrote {out_path} ({report['elapsed_s']} s)")
    return out_path, report


def _winner(configs: list[dict]) -> dict | None:
    ok = [r for r in configs if r.get("status") == "ok" and r.get("kind") == "train"
          and (r.get("measured") or {}).get("seconds_per_step")]
    return min(ok, key=lambda r: r["measured"]["seconds_per_step"]) if ok else None


def run_gpu_tests(timeout: float, log=print) -> dict:
    """``pytest -m gpu tests/test_gpu.py`` in what is left of the budget; the summary line is kept."""
    if timeout < 60:
        return {"status": "skipped", "error": f"{timeout:.0f} s of the budget left"}
    cmd = [sys.executable, "-m", "pytest", "-q", "-m", "gpu", "-p", "no:cacheprovider", "tests/test_gpu.py"]
    try:
        code, out = _run_group(cmd, timeout)
    except TimeoutError as exc:
        return {"status": "timeout", "error": str(exc)[-2000:]}
    tail = out.strip().splitlines()
    summary = tail[-1] if tail else ""
    log(f"gpu tests: {summary}")
    return {"status": "ok" if code == 0 else "failed", "summary": summary, "log_tail": "\n".join(tail[-40:])}


# ------------------------------------------------------------------------------ results table


def load_results(folder: Path = RESULTS) -> list[dict]:
    """Every GPU results file in ``folder`` (dry runs are proofs of the kit, not figures: left out)."""
    out = []
    for path in sorted(folder.glob("gpu_truth_*.json")):
        data = json.loads(path.read_text())
        if not data.get("dry"):
            out.append({**data, "_file": path.name})
    return out


def _fmt(v, spec: str = "") -> str:
    return "-" if v is None else format(v, spec)


def results_table_markdown(results: list[dict]) -> str:
    """The docs table: one row per configuration of every results file."""
    if not results:
        return "_No GPU results yet: run the kit on a GPU machine (above) and regenerate this page._\n"
    head = ("| card | date | configuration | s/step | completion tok/s | peak allocated GiB | peak reserved GiB "
            "| device peak GiB | planner GiB (error) | verdict |\n"
            "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |\n")
    rows = []
    for res in results:
        for r in res["configs"]:
            m = r.get("measured") or {}
            est = (r.get("estimate") or {}).get("allocated_gb")
            err = r.get("planner_error_pct")
            planner = "-" if est is None else f"{est:.2f}" + ("" if err is None else f" ({err:+.0f}%)")
            rows.append(
                f"| {res['card']['name']} | {res['date'][:10]} | {r.get('title', r['name'])} "
                f"| {_fmt(m.get('seconds_per_step'), '.2f')} | {_fmt(m.get('completion_tokens_per_second'), '.0f')} "
                f"| {_fmt(m.get('peak_allocated_gb'), '.2f')} | {_fmt(m.get('peak_reserved_gb'), '.2f')} "
                f"| {_fmt(m.get('device_peak_used_gb'), '.2f')} | {planner} "
                f"| {verdict(r)} |")
    files = ", ".join(f"`benchmarks/results/{res['_file']}`" for res in results)
    return head + "\n".join(rows) + f"\n\nFrom {files}.\n"


TABLE_BEGIN = "<!-- BEGIN gpu truth results (generated by benchmarks/gpu_truth.py --update-docs) -->\n"
TABLE_END = "<!-- END gpu truth results -->"


def docs_with_table(text: str, results: list[dict]) -> str:
    start = text.index(TABLE_BEGIN) + len(TABLE_BEGIN)
    end = text.index(TABLE_END)
    return text[:start] + results_table_markdown(results) + text[end:]


def import_results(source: Path, *, results: Path = RESULTS, docs: Path = DOCS_PAGE, repo: Path = ROOT,
                   commit: bool = True, log=print) -> list[Path]:
    """Bring the GPU machine's results files home: copy each ``gpu_truth_*.json`` of ``source`` (the
    folder the results were copied back into) that is not a dry run into ``results``, regenerate ``docs``' table,
    and commit both (only those paths). Returns the files added; a file already there is skipped."""
    added = []
    for path in sorted(Path(source).glob("gpu_truth_*.json")):
        data = json.loads(path.read_text())
        if data.get("dry") or data.get("kit") != "gpu_truth":
            log(f"skipped {path.name}: {'a dry run' if data.get('dry') else 'not a GPU truth results file'}")
            continue
        target = results / path.name
        if target.exists():
            log(f"skipped {path.name}: already in {results}")
            continue
        results.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, target)
        added.append(target)
    if not added:
        log(f"no new GPU results in {source}")
        return added
    docs.write_text(docs_with_table(docs.read_text(), load_results(results)))
    log(f"added {', '.join(p.name for p in added)}; regenerated {docs.name}")
    if commit:
        names = [str(p.relative_to(repo)) for p in [*added, docs]]
        subprocess.run(["git", "-C", str(repo), "add", "--", *names], check=True)
        cards = sorted({json.loads(p.read_text())["card"]["name"] for p in added})
        message = f"GPU truth results: {', '.join(cards)} ({', '.join(p.name for p in added)}) and the table"
        subprocess.run(["git", "-C", str(repo), "commit", "-q", "-m", message, "--", *names], check=True)
        log(f"committed: {message}")
    return added


# ------------------------------------------------------------------------------ command line


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dry", action="store_true", help="CPU: resolve, build at small scale, plan, check the wheel "
                    "list, run the trainer path on a toy model, write a results file marked dry.")
    ap.add_argument("--budget", type=float, default=BUDGET_S, help="Hard limit for the whole kit, seconds.")
    ap.add_argument("--only", help="Comma-separated configuration names: " + ", ".join(c.name for c in CONFIGS))
    ap.add_argument("--steps", type=int, default=None,
                    help="GRPO steps per configuration (default 3; the first is warm-up, so at least 2 to measure "
                         "a step): fewer fit a short lease.")
    ap.add_argument("--no-tests", action="store_true", help="Do not run tests/test_gpu.py with the time left.")
    ap.add_argument("--workdir", default=None, help="Scratch folder for the models and runs "
                    "(default /tmp/gpu_truth, or a folder under outputs/ with --dry).")
    ap.add_argument("--out", default=None, help="Results JSON path (default benchmarks/results/gpu_truth_<card>_<date>.json).")
    ap.add_argument("--update-docs", action="store_true", help="Regenerate docs/gpu_truth.md's table and stop.")
    ap.add_argument("--import", dest="import_dir", metavar="DIR",
                    help="Copy the GPU results files of DIR (what came back from the GPU machine) into "
                         "benchmarks/results/, regenerate docs/gpu_truth.md and commit both; then stop.")
    ap.add_argument("--no-commit", action="store_true", help="With --import: copy and regenerate, do not commit.")
    ap.add_argument("--build", nargs=3, metavar=("ARCH", "DIR", "DEVICE"), help=argparse.SUPPRESS)
    ap.add_argument("--run-one", metavar="SPEC_JSON", help=argparse.SUPPRESS)
    ap.add_argument("--doctor", metavar="CONFIG", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)

    if args.import_dir:
        import_results(Path(args.import_dir), commit=not args.no_commit)
        return 0
    if args.update_docs:
        DOCS_PAGE.write_text(docs_with_table(DOCS_PAGE.read_text(), load_results()))
        print(f"updated {DOCS_PAGE.relative_to(ROOT)}")
        return 0
    if args.build:
        build_model_dir(args.build[0], Path(args.build[1]), args.build[2])
        return 0
    if args.doctor:
        print("RESULT " + json.dumps(environment_check(args.doctor, simulated=False)), flush=True)
        return 0
    if args.run_one:
        spec = json.loads(args.run_one)
        result = run_recipe(spec) if spec["kind"] == "recipe" else run_train(spec)
        print("RESULT " + json.dumps(result), flush=True)
        return 0

    only = None
    if args.only:
        only = [x.strip() for x in args.only.split(",") if x.strip()]
        unknown = [x for x in only if x not in {c.name for c in CONFIGS}]
        if unknown:
            print(f"error: unknown configuration {', '.join(unknown)}; choose from "
                  + ", ".join(c.name for c in CONFIGS), file=sys.stderr)
            return 2
    workdir = Path(args.workdir) if args.workdir else (DRY_RESULTS / "work" if args.dry else Path("/tmp/gpu_truth"))
    out_path, report = run_kit(dry=args.dry, budget=args.budget, workdir=workdir,
                               out_path=Path(args.out) if args.out else None, only=only,
                               with_tests=not args.no_tests, steps=args.steps)
    failed = [r["name"] for r in report["configs"] if r["status"] not in ("ok", "skipped", "planned")]
    print(f"{len(report['configs']) - len(failed)} of {len(report['configs'])} configurations ok"
          + (f"; failed: {', '.join(failed)}" if failed else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
