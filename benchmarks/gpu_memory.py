"""GPU truth for the memory planner: estimated vs measured peak memory and step time.

For each built-in architecture and card size the planner's preset is run for a few real GRPO
steps (TRL's GRPOTrainer through unsloth_grpo's backend, so Unsloth's patches apply when it
is the backend) on a model with random weights built from the architecture's config: no
download. Each run happens in its own process, capped with
``torch.cuda.set_per_process_memory_fraction`` at the card size it was planned for, and
records the estimate, ``torch.cuda.max_memory_allocated``/``max_memory_reserved`` and the
seconds per step in ``benchmarks/results/<gpu>-<date>.json``.

    python benchmarks/gpu_memory.py                                   # CUDA: every preset this GPU can hold
    python benchmarks/gpu_memory.py --models qwen2.5-0.5b,llama-3.2-1b --cards 8,16 --backends unsloth
    python benchmarks/gpu_memory.py --dry                             # no GPU: print the estimates only
    python benchmarks/gpu_memory.py --smoke                           # CPU: run the same path on a tiny config

Without CUDA, ``--dry`` is the default. Random weights almost never emit EOS, so every
completion runs to ``max_completion_length``: the worst case the estimate assumes.
Multimodal checkpoints (gemma-3-4b) are skipped: their text-only training path needs the
vision processor.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from unsloth_grpo.hardware import architecture, memory, planner  # noqa: E402  (light: imports no torch)

RESULTS = ROOT / "benchmarks" / "results"
TEXT_MODELS = [k for k in architecture.builtin_model_names() if architecture.BUILTIN_CONFIGS[k]["model_type"] != "gemma3"]
#: What a GPU run measures unless ``--models`` says otherwise: small enough for a short lease.
QUICK_MODELS = ["qwen2.5-0.5b", "llama-3.2-1b", "qwen2.5-1.5b", "qwen3-4b"]
QUICK_CARDS = [6, 8, 16]
TINY = dict(model_type="qwen2", vocab_size=520, hidden_size=128, intermediate_size=256, num_hidden_layers=2,
            num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=1024, tie_word_embeddings=True)


# ------------------------------------------------------------------------ model and data


def build_model_dir(config: dict, path: Path, device: str) -> Path:
    """Save a random-weight model of ``config`` and a word-level tokenizer of its vocabulary."""
    marker = path / "bench_model.json"
    if marker.exists() and json.loads(marker.read_text()) == config:
        return path
    import torch
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import AutoConfig, AutoModelForCausalLM, PreTrainedTokenizerFast

    path.mkdir(parents=True, exist_ok=True)
    vocab_size = int(config["vocab_size"])
    vocab = {"<pad>": 0, "<eos>": 1, "<unk>": 2, **{f"w{i}": i for i in range(3, vocab_size)}}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<eos>", pad_token="<pad>", unk_token="<unk>")
    fast.padding_side = "left"
    fast.save_pretrained(str(path))

    cfg = dict(config)
    hf_config = AutoConfig.for_model(cfg.pop("model_type"), **cfg, bos_token_id=None, eos_token_id=1,
                                     pad_token_id=0)
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(hf_config, dtype=dtype)
    model.generation_config.eos_token_id = 1
    model.generation_config.pad_token_id = 0
    model.save_pretrained(str(path))
    del model
    marker.write_text(json.dumps(config))
    return path


def word_tokenizer(path: Path):
    """Load the word-level tokenizer saved by :func:`build_model_dir` as itself."""
    from transformers import PreTrainedTokenizerFast

    tok = PreTrainedTokenizerFast(tokenizer_file=str(path / "tokenizer.json"), eos_token="<eos>",
                                  pad_token="<pad>", unk_token="<unk>")
    tok.padding_side = "left"
    return tok


def prompt_dataset(prompt_tokens: int, rows: int):
    """Plain-text prompts of exactly ``prompt_tokens`` word-level tokens each."""
    from datasets import Dataset

    prompts = [" ".join(f"w{3 + (r * 7 + i) % 97}" for i in range(prompt_tokens)) for r in range(rows)]
    return Dataset.from_dict({"prompt": prompts})


def spread_reward(completions, **kwargs):
    """Distinct rewards within a group (so advantages are non-zero); the value is irrelevant."""
    return [(sum(map(ord, c)) % 101) / 100.0 for c in completions]


# ------------------------------------------------------------------------ one run (child process)


def run_one(spec: dict) -> dict:
    """Train ``spec['steps']`` GRPO steps with the planned settings; measure memory and time."""
    from unsloth_grpo.hardware.backend import select_backend

    select_backend(spec["backend"])  # imports unsloth before transformers/trl when it is the backend
    import torch
    from transformers import TrainerCallback
    from trl import GRPOTrainer

    from unsloth_grpo.hardware.backend import load_model
    from unsloth_grpo.config import load_config
    from unsloth_grpo.training.train import build_grpo_args

    s = spec["settings"]
    cuda = spec["device"] == "cuda"
    if cuda and spec.get("card_gb"):
        total = torch.cuda.get_device_properties(0).total_memory / memory.GiB
        torch.cuda.set_per_process_memory_fraction(min(1.0, spec["card_gb"] / total))
    cfg = load_config({
        "output_dir": spec["output_dir"], "seed": 0,
        "model": {"name": spec["model_dir"], "backend": spec["backend"], "load_in_4bit": s["load_in_4bit"],
                  "dtype": s["dtype"], "device": spec["device"], "fast_inference": "off",
                  "max_seq_length": s["max_prompt_length"] + s["max_completion_length"]},
        "lora": {"r": s["lora_rank"], "alpha": 2 * s["lora_rank"]},
        "training": {"max_steps": spec["steps"], "learning_rate": 1e-5, "num_generations": s["num_generations"],
                     "per_device_train_batch_size": s["per_device_train_batch_size"],
                     "gradient_accumulation_steps": s["gradient_accumulation_steps"],
                     "max_completion_length": s["max_completion_length"], "save_steps": 0,
                     "optim": s["optimizer"] if cuda else "adamw_torch", "logging_steps": 1},
    })
    loaded = load_model(cfg.model, cfg.lora, seed=0, gradient_checkpointing=True, log=lambda _: None)
    tokenizer = word_tokenizer(Path(spec["model_dir"]))  # AutoTokenizer would pick the family's class
    load_peak = torch.cuda.max_memory_allocated() / memory.GiB if cuda else None
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    args = build_grpo_args(cfg, loaded.info, weights=[1.0])

    step_times: list[float] = []

    class Timer(TrainerCallback):
        def on_step_begin(self, args, state, control, **kwargs):
            self.t0 = time.perf_counter()

        def on_step_end(self, args, state, control, **kwargs):
            if cuda:
                torch.cuda.synchronize()
            step_times.append(time.perf_counter() - self.t0)

    prompts_needed = spec["steps"] * s["per_device_train_batch_size"] * s["gradient_accumulation_steps"]
    trainer = GRPOTrainer(model=loaded.model, processing_class=tokenizer, reward_funcs=[spread_reward],
                          args=args, train_dataset=prompt_dataset(s["max_prompt_length"], max(8, prompts_needed)),
                          callbacks=[Timer()])
    oom_error = None
    try:
        trainer.train()
    except torch.OutOfMemoryError as exc:
        oom_error = str(exc).splitlines()[0]
    est = memory.estimate_memory(spec["config"], **{k: v for k, v in s.items() if k != "optimizer"},
                                 optimizer=s["optimizer"], backend=spec["backend"])
    result = {
        "model": spec["model"], "card_gb": spec.get("card_gb"), "backend": spec["backend"],
        "device": spec["device"], "settings": s, "steps": spec["steps"],
        "estimate_total_gb": round(est.total_gb, 3), "estimate_allocated_gb": round(est.allocated_gb, 3),
        "estimate_breakdown": {k: round(v, 3) for k, v in est.breakdown.items()},
        "measured_peak_allocated_gb": round(torch.cuda.max_memory_allocated() / memory.GiB, 3) if cuda else None,
        "measured_peak_reserved_gb": round(torch.cuda.max_memory_reserved() / memory.GiB, 3) if cuda else None,
        "load_peak_allocated_gb": round(load_peak, 3) if load_peak is not None else None,
        "step_seconds": [round(t, 3) for t in step_times],
        "seconds_per_step_after_first": round(sum(step_times[1:]) / max(1, len(step_times) - 1), 3)
        if len(step_times) > 1 else None,
        "oom": oom_error, "backend_info": loaded.info.to_dict(),
    }
    if result["measured_peak_allocated_gb"]:
        result["estimate_over_measured"] = round(est.allocated_gb / result["measured_peak_allocated_gb"], 3)
    return result


# ------------------------------------------------------------------------ driver (parent process)


def planned_runs(models: list[str], cards: list[int], backends: list[str], gpu: dict | None) -> list[dict]:
    """One run per (model, card, backend) plan; a plan identical to one on a smaller card is
    listed but marked ``same_as`` so that it is measured once, under the tighter cap."""
    runs = []
    seen: dict[tuple, int] = {}
    for key in models:
        config = architecture.BUILTIN_CONFIGS[key]
        for card in cards:
            if gpu is not None and card > gpu["total_gb"]:
                continue
            cc = gpu["compute_capability"] if gpu else planner.PRESET_CARDS.get(card, ("", None))[1]
            for backend in backends:
                p = planner.plan(config, card, compute_capability=cc, backend=backend, alternatives=False)
                run = {"model": key, "card_gb": card, "backend": backend, "plan": p}
                ident = (key, backend, json.dumps(settings_of(p), sort_keys=True)) if p.fits else None
                if ident in seen:
                    run["same_as"] = seen[ident]
                elif ident:
                    seen[ident] = card
                runs.append(run)
    return runs


def print_estimates(runs: list[dict]) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title="planned presets: estimated peak GPU memory (GB)", header_style="bold")
    for col in ("model", "card", "backend", "settings", "estimate", "allocated", "peak phase", "largest terms"):
        table.add_column(col)
    for r in runs:
        p = r["plan"]
        if not p.fits:
            table.add_row(r["model"], str(r["card_gb"]), r["backend"], "does not fit", "-", "-", "-", p.reason[:40])
            continue
        e = p.estimate
        top = sorted(e.breakdown.items(), key=lambda kv: -kv[1])[:3]
        table.add_row(r["model"], str(r["card_gb"]), r["backend"],
                      f"G{p.num_generations} C{p.max_completion_length} b{p.per_device_train_batch_size} "
                      f"{'4bit' if p.load_in_4bit else '16bit'} r{p.lora_rank}",
                      f"{e.total_gb:.2f}", f"{e.allocated_gb:.2f}", e.peak_phase,
                      ", ".join(f"{k} {v:.2f}" for k, v in top))
    Console(width=160).print(table)


def settings_of(p: planner.Plan) -> dict:
    return dict(load_in_4bit=p.load_in_4bit, lora_rank=p.lora_rank, num_generations=p.num_generations,
                per_device_train_batch_size=p.per_device_train_batch_size,
                gradient_accumulation_steps=p.gradient_accumulation_steps, max_prompt_length=p.max_prompt_length,
                max_completion_length=p.max_completion_length, dtype=p.dtype, optimizer="adamw_8bit")


def _child(argv: list[str], timeout: float) -> tuple[int, str]:
    proc = subprocess.run([sys.executable, __file__, *argv], capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, "PYTHONUNBUFFERED": "1"})
    return proc.returncode, proc.stdout + proc.stderr


def run_all(runs: list[dict], *, steps: int, workdir: Path, timeout: float, gpu: dict) -> list[dict]:
    results = []
    built: set[str] = set()
    for r in runs:
        p = r["plan"]
        if not p.fits or "same_as" in r:
            continue
        model_dir = workdir / r["model"]
        if r["model"] not in built:
            code, out = _child(["--build", r["model"], str(model_dir)], timeout)
            if code != 0:
                results.append({"model": r["model"], "error": "model build failed", "log": out[-2000:]})
                continue
            built.add(r["model"])
        spec = {"model": r["model"], "config": architecture.BUILTIN_CONFIGS[r["model"]], "model_dir": str(model_dir),
                "card_gb": r["card_gb"], "backend": r["backend"], "device": "cuda", "steps": steps,
                "settings": settings_of(p), "output_dir": str(workdir / "out")}
        try:
            code, out = _child(["--run-one", json.dumps(spec)], timeout)
        except subprocess.TimeoutExpired:
            results.append({**{k: spec[k] for k in ("model", "card_gb", "backend", "settings")}, "error": "timeout"})
            continue
        line = next((ln for ln in reversed(out.splitlines()) if ln.startswith("RESULT ")), None)
        if line is None:
            results.append({**{k: spec[k] for k in ("model", "card_gb", "backend", "settings")},
                            "error": f"exit {code}", "log": out[-3000:]})
        else:
            results.append(json.loads(line[len("RESULT "):]))
        print(_result_line(results[-1]), flush=True)
    return results


def _result_line(r: dict) -> str:
    if "error" in r:
        return f"{r.get('model')} {r.get('card_gb')} GB {r.get('backend')}: {r['error']}"
    return (f"{r['model']} {r['card_gb']} GB {r['backend']}: estimate {r['estimate_allocated_gb']:.2f} GB "
            f"allocated vs measured {r['measured_peak_allocated_gb']} GB"
            f"{' (OOM: ' + r['oom'] + ')' if r['oom'] else ''}, {r['seconds_per_step_after_first']} s/step")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dry", action="store_true", help="Print the estimates only (default without CUDA).")
    ap.add_argument("--smoke", action="store_true", help="Run the training path once on a tiny config on CPU.")
    ap.add_argument("--models", default=None,
                    help="Comma-separated built-in names, or 'all' (default: all when dry, "
                    + ",".join(QUICK_MODELS) + " on a GPU).")
    ap.add_argument("--cards", default=None, help="Card sizes in GB (default: all preset cards when dry, "
                    + ",".join(map(str, QUICK_CARDS)) + " on a GPU).")
    ap.add_argument("--backends", default="unsloth,transformers")
    ap.add_argument("--steps", type=int, default=3, help="GRPO steps per run (the first is warm-up).")
    ap.add_argument("--timeout", type=float, default=900, help="Seconds per child process.")
    ap.add_argument("--workdir", default="/tmp/unsloth_grpo_bench", help="Where random-weight models are saved.")
    ap.add_argument("--out", default=None, help="Results JSON path (default benchmarks/results/<gpu>-<date>.json).")
    ap.add_argument("--build", nargs=2, metavar=("MODEL", "DIR"), help=argparse.SUPPRESS)
    ap.add_argument("--run-one", metavar="SPEC_JSON", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)

    if args.build:
        import torch

        device = "cuda" if torch.cuda.is_available() else "cpu"
        build_model_dir(architecture.BUILTIN_CONFIGS[args.build[0]], Path(args.build[1]), device)
        return 0
    if args.run_one:
        print("RESULT " + json.dumps(run_one(json.loads(args.run_one))), flush=True)
        return 0

    if args.smoke:
        work = Path(args.workdir) / "smoke"
        model_dir = build_model_dir(TINY, work / "model", "cpu")
        settings = dict(load_in_4bit=False, lora_rank=8, num_generations=4, per_device_train_batch_size=4,
                        gradient_accumulation_steps=1, max_prompt_length=16, max_completion_length=8,
                        dtype="fp32", optimizer="adamw_torch")
        backend = "unsloth" if "unsloth" in args.backends.split(",") and _has("unsloth") else "transformers"
        result = run_one({"model": "tiny", "config": TINY, "model_dir": str(model_dir), "card_gb": None,
                          "backend": backend, "device": "cpu", "steps": args.steps, "settings": settings,
                          "output_dir": str(work / "out")})
        print(json.dumps(result, indent=2))
        return 0 if result["oom"] is None and len(result["step_seconds"]) == args.steps else 1

    gpu = None if args.dry else planner.detect_gpu()
    if args.models in (None, "all"):
        models = TEXT_MODELS if (gpu is None or args.models == "all") else QUICK_MODELS
    else:
        models = [m.strip() for m in args.models.split(",") if m.strip()]
    unknown = [m for m in models if m not in TEXT_MODELS]
    if unknown:
        print(f"error: unknown or multimodal model(s) {', '.join(unknown)}; choose from {', '.join(TEXT_MODELS)}",
              file=sys.stderr)
        return 2
    if args.cards is None:
        cards = list(planner.PRESET_CARDS) if gpu is None else QUICK_CARDS
    else:
        cards = [int(c) for c in args.cards.split(",") if c.strip()]
    backends = [b.strip() for b in args.backends.split(",") if b.strip()]
    runs = planned_runs(models, cards, backends, gpu)
    print_estimates(runs)
    if gpu is None:
        if not args.dry:
            print("no CUDA GPU: estimates only (dry mode); run on a GPU to measure", flush=True)
        return 0
    if "unsloth" in backends and not _has("unsloth"):
        print("note: unsloth is not installed; its runs will fail to load")
    results = run_all(runs, steps=args.steps, workdir=Path(args.workdir), timeout=args.timeout, gpu=gpu)
    out = Path(args.out) if args.out else RESULTS / f"{_slug(gpu['name'])}-{time.strftime('%Y%m%d-%H%M%S')}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"gpu": gpu, "steps": args.steps, "results": results}, indent=2))
    print(f"wrote {out}")
    return 0 if all("error" not in r for r in results) else 1


def _has(module: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(module) is not None


def _slug(text: str) -> str:
    return "".join(c if c.isalnum() else "-" for c in text).strip("-").lower()


if __name__ == "__main__":
    sys.exit(main())
