"""``unsloth-grpo plan``: the settings that fit a card, and where the memory goes.

    unsloth-grpo plan --model qwen2.5-1.5b --vram-gb 8
    unsloth-grpo plan --model ./my-model/config.json --vram-gb 16 --compute-capability 7.5
    unsloth-grpo plan --model llama-3.1-8b --vram-gb 6 --no-4bit      # exits 1, names an alternative
    unsloth-grpo plan --model qwen2.5-3b --card t4 --vllm --standby   # a shipped card profile
    unsloth-grpo plan --table                                          # the README table

Without ``--vram-gb`` the first CUDA GPU is used. Exit status: 0 when a plan fits, 1 when
nothing fits (the nearest feasible alternative is printed), 2 for a bad argument.
"""

from __future__ import annotations

import argparse
from typing import Any
import json
import sys

from unsloth_grpo.cli.arguments import in_range
from unsloth_grpo.config import BACKENDS
from unsloth_grpo.hardware import architecture, memory, planner, profiles
from unsloth_grpo.hardware.architecture import BUILTIN_CONFIGS
from unsloth_grpo.hardware.planner import estimate_for_config, plan_for_choice, settings_from_config

_TERM_HELP = {
    "weights": "base model weights",
    "lora": "LoRA adapters, gradients, optimizer states",
    "full_finetune_state": "gradients and optimizer states of all weights",
    "reference": "reference log-probs / KL buffers (beta > 0)",
    "vllm_pool": "vLLM pool beyond shared weights",
    "cuda_context": "CUDA context and workspaces",
    "kv_cache": "KV cache of one generation round",
    "generation_buffers": "sampling logits, prefill, dequantization",
    "activations": "checkpointed activations + one recomputed layer",
    "logits": "log-prob term of one micro-batch",
}


def add_parser(subparsers) -> None:
    p = subparsers.add_parser("plan", help="Pick GRPO settings that fit a GPU, and show the memory breakdown.",
                              description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", help="Built-in name (" + ", ".join(sorted(architecture.BUILTIN_CONFIGS)) + "), a hub id "
                   "of one of them, or a local model directory / config.json.")
    p.add_argument("--vram-gb", type=in_range(float, 0, 1024, "the card's memory in GB", "8 for an 8 GB card",
                                              above_low=True),
                   default=None, help="Card memory in GB (GiB). Default: the detected GPU.")
    card = p.add_argument("--card", choices=list(profiles.PROFILES)[1:], default=None,
                          help="A shipped card profile (its memory and compute capability): "
                               + ", ".join(list(profiles.PROFILES)[1:]) + ".")
    capability = p.add_argument("--compute-capability", default=None,
                                type=in_range(float, 3.0, 12.9, "the card's CUDA compute capability",
                                              "7.5 for a T4, 8.6 for an RTX 3090, 12.0 for an RTX 5090"),
                                help="e.g. 7.5 for a T4 (fp16), 8.6 for an RTX 3090 (bf16). Default: the detected GPU's.")
    # the advice printed with a plan names the flags as this parser spells them
    p.set_defaults(capability_hint=f"pass {capability.option_strings[0]} 7.5 for a T4, or {card.option_strings[0]} t4")
    p.add_argument("--4bit", dest="load_in_4bit", action=argparse.BooleanOptionalAction, default=None,
                   help="Force 4-bit (--4bit) or 16-bit (--no-4bit) weights; default: whichever fits best.")
    p.add_argument("--backend", choices=[b for b in BACKENDS if b != "auto"], default="unsloth")
    p.add_argument("--vllm", dest="use_vllm", action=argparse.BooleanOptionalAction, default=False,
                   help="Generate with vLLM (also picks gpu_memory_utilization).")
    p.add_argument("--standby", action="store_true",
                   help="With --vllm: vLLM sleeps while the model trains (Unsloth's standby mode, where the pool is "
                        "Unsloth's share of the card; TRL's sleep mode on the transformers backend).")
    p.add_argument("--prompt-length", type=int, default=256, help="Longest prompt in tokens (data.max_prompt_tokens).")
    p.add_argument("--num-generations", type=int, default=None, help="Pin the group size instead of searching.")
    p.add_argument("--completion-length", type=int, default=None, help="Pin max_completion_length.")
    p.add_argument("--max-generations", type=int, default=planner.DEFAULT_MAX_GENERATIONS,
                   help="Largest group size the search tries.")
    p.add_argument("--max-completion", type=int, default=planner.DEFAULT_MAX_COMPLETION,
                   help="Longest completion the search tries.")
    p.add_argument("--lora-rank", type=int, default=None, help="Pin the LoRA rank.")
    p.add_argument("--beta", type=float, default=0.0, help="KL coefficient (> 0 adds the reference term).")
    p.add_argument("--optimizer", choices=sorted(memory.OPTIMIZER_STATE_BYTES), default="adamw_8bit")
    p.add_argument("--margin", type=float, default=0.10, help="Share of the card kept free (default 0.10).")
    p.add_argument("--table", action="store_true", help="Print the model x card table (Markdown) and exit.")
    p.add_argument("--json", action="store_true", help="Print the plan as JSON instead of tables.")
    p.set_defaults(func=run)


def _plan_dict(p: planner.Plan) -> dict:
    out = {"model": p.model, "vram_gb": p.vram_gb, "fits": p.fits, "budget_gb": round(p.budget_gb, 3),
           "overrides": p.overrides(), "estimate": p.estimate.to_dict(), "notes": p.notes}
    if not p.fits:
        out["reason"] = p.reason
        out["alternative_note"] = p.alternative_note
        out["alternative"] = _plan_dict(p.alternative) if p.alternative else None
    return out


def _print_plan(p: planner.Plan, console, hint: str = "") -> None:
    from rich.table import Table

    est = p.estimate
    title = f"{p.model} on {p.vram_gb:g} GB" + ("" if p.fits else " - does NOT fit")
    settings = Table(title=title, show_header=True, header_style="bold")
    settings.add_column("setting")
    settings.add_column("value", justify="right")
    for key, value in p.overrides().items():
        settings.add_row(key, planner._yaml_scalar(value))
    settings.add_row("backend", p.backend)
    console.print(settings)

    table = Table(title=f"estimated memory (GB), peak in the {est.peak_phase} phase", header_style="bold")
    table.add_column("term")
    table.add_column("phase")
    table.add_column("GB", justify="right")
    table.add_column("what")
    for term, gb in est.breakdown.items():
        if gb == 0 and term in ("reference", "vllm_pool", "kv_cache", "generation_buffers"):
            continue
        phase = est.phase_of[term]
        mark = " *" if phase == est.peak_phase else ""
        table.add_row(term, phase + mark, f"{gb:.2f}", _TERM_HELP.get(term, ""))
    table.add_row("total", "static + peak phase", f"{est.total_gb:.2f}",
                  f"budget {p.budget_gb:.2f} of {p.vram_gb:g} GB", style="bold")
    console.print(table)
    if est.offloaded_gb:
        console.print(f"host RAM for Unsloth's offloaded checkpoints: {est.offloaded_gb:.2f} GB")
    for note in p.notes:
        console.print(f"note: {note}")
        if note == planner.UNKNOWN_CAPABILITY_NOTE and hint:
            console.print(f"      {hint}")


#: How a line meant to be pasted into a command is printed: one line at any width (rich wraps at 80
#: columns when the output is piped), its brackets as written, never read as rich markup.
_PASTE_READY = {"soft_wrap": True, "markup": False, "highlight": False}


def run(args: argparse.Namespace) -> int:
    from rich.console import Console

    console = Console()
    if getattr(args, "table", False):
        print(planner.preset_table_markdown(backend=args.backend, max_prompt_length=args.prompt_length))
        return 0
    if not args.model:
        print("error: --model is required (a built-in name such as qwen2.5-1.5b, or a path to a config.json)",
              file=sys.stderr)
        return 2
    vram, cc = args.vram_gb, args.compute_capability
    card = getattr(args, "card", None)
    if card is not None:
        profile = profiles.get_profile(card)
        vram = vram if vram is not None else profile.total_gb
        cc = cc if cc is not None else profile.capability
    standby = bool(getattr(args, "standby", False))
    if standby and not args.use_vllm:
        print("error: --standby needs --vllm", file=sys.stderr)
        return 2
    if vram is None:
        gpu = planner.detect_gpu()
        if gpu is None:
            print("error: no CUDA GPU detected; pass --vram-gb (and --compute-capability, e.g. 7.5 for a T4)",
                  file=sys.stderr)
            return 2
        vram = gpu["total_gb"]
        cc = cc if cc is not None else gpu["compute_capability"]
        console.print(f"detected {gpu['name']}: {vram:.1f} GB, compute capability {gpu['compute_capability']:.1f}")
    try:
        p = planner.plan(
            args.model, vram, compute_capability=cc, backend=args.backend, load_in_4bit=args.load_in_4bit,
            use_vllm=args.use_vllm, vllm_standby=standby, max_prompt_length=args.prompt_length,
            num_generations=args.num_generations,
            max_completion_length=args.completion_length, max_generations=args.max_generations,
            max_completion=args.max_completion, lora_rank=args.lora_rank, beta=args.beta,
            optimizer=args.optimizer, margin=args.margin,
        )
    except (architecture.UnknownModelError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(_plan_dict(p), indent=2))
        return 0 if p.fits else 1
    _print_plan(p, console, getattr(args, "capability_hint", ""))
    if p.fits:
        console.print(f"[bold]fits[/bold]: {p.summary()}")
        console.print(f"config overrides: {p.overrides_text()}", **_PASTE_READY)
        return 0
    console.print(f"[bold red]does not fit[/bold red]: {p.reason}")
    if p.alternative_note:
        console.print(f"nearest alternative: {p.alternative_note}")
    if p.alternative is not None:
        console.print(f"its overrides: {p.alternative.overrides_text()}"
                      + (f" model.name={architecture.BUILTIN_HUB_IDS[p.alternative.model]}"
                         if p.alternative.model in architecture.BUILTIN_HUB_IDS and p.alternative.model != p.model else ""),
                      **_PASTE_READY)
    return 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="unsloth-grpo")
    add_parser(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["plan", *(argv if argv is not None else sys.argv[1:])])
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())


# ---------------------------------------------------------------- docs/gpu.md tables
# They read the GSM8K recipe, so they live here on the top floor rather than in the planner.

#: The models of the "What happens on your card" table (docs/gpu.md).
CARD_TABLE_MODELS = ("qwen2.5-0.5b", "qwen2.5-1.5b", "qwen2.5-3b", "llama-3.2-3b", "llama-3.1-8b")

#: The vLLM the card table assumes: what ``pip install -e ".[unsloth,vllm]"`` resolves to.
CARD_TABLE_VLLM = ("0.27.1", False)


def profile_table_markdown(cards: Any = None) -> str:
    """docs/gpu.md: the shipped profiles and what each decides before any plan (dtype, attention)."""
    rows = ["| profile | card | memory (GB) | compute capability | dtype (auto) | vLLM attention backends |",
            "|---|---|---|---|---|---|"]
    for p in (profiles.PROFILES.values() if cards is None else cards):
        cc = f"{p.compute_capability[0]}.{p.compute_capability[1]}" if p.cuda else "-"
        size = f"{p.total_gb:.1f}" if p.cuda else "-"
        attention = ", ".join(p.vllm_attention) or "none; vLLM's CPU build has its own (docs/vllm-cpu.md)"
        rows.append(f"| `{p.key}` | {p.name} | {size} | {cc} | {profiles.training_dtype(p)} | {attention} |")
    return "\n".join(rows)


def card_table_markdown(profiles: Any = None, models: Any = CARD_TABLE_MODELS, *,
                        vllm: tuple[str | None, bool] = CARD_TABLE_VLLM) -> str:
    """docs/gpu.md's "What happens on your card": ``--preset auto`` of the GSM8K recipe per card and model.

    Each row is what the recipe runs with on that card after ``pip install -e ".[unsloth,vllm]"``
    (Unsloth backend, ``vllm`` as given): the planned settings, the dtype, vLLM on or off (and standby),
    and the estimated peak against the card's budget (10% kept free). Made by the same functions
    the run calls (:func:`unsloth_grpo.hardware.profiles.vllm_choice`, :func:`plan`).
    """
    from unsloth_grpo.hardware.profiles import PROFILES, vllm_choice
    from unsloth_grpo.tasks.gsm8k import RECIPE

    profiles = list(PROFILES.values()) if profiles is None else list(profiles)
    prompt = RECIPE.resolve().data.max_prompt_tokens
    lines = ["| card | model | settings (--preset auto) | dtype | vLLM | est. peak / budget (GB) |",
             "|---|---|---|---|---|---|"]
    for card in profiles:
        if not card.cuda:
            presets = " or ".join(f"`--preset {name}` ({'tiny' if name == 'smoke' else 'a real 135M'} model, fp32)"
                                  for name in RECIPE.cpu_presets())
            lines.append(f"| {card.name} | any | no CUDA GPU: the GPU recipes stop before loading; {presets} runs "
                         "| fp32 | off | - |")
            continue
        choice = vllm_choice(card, vllm_version=vllm[0], bnb_plugin=vllm[1])
        for key in models:
            p = plan_for_choice(BUILTIN_CONFIGS[key], card.as_gpu(), choice, max_prompt_length=prompt,
                                alternatives=False)
            if not p.fits:
                why = "vLLM's pool is too small for its weights" if "vLLM pool" in (p.reason or "") else \
                    "over budget at the smallest settings"
                lines.append(f"| {card.name} | {key} | does not fit ({why}) | - | - | "
                             f"{p.estimate.total_gb:.1f} / {p.budget_gb:.1f} |")
                continue
            quant = "4-bit" if p.load_in_4bit else "16-bit"
            gen = "on, standby" if p.vllm_standby else f"on, pool {p.gpu_memory_utilization:.2f}" if p.use_vllm else "off"
            lines.append(f"| {card.name} | {key} | {p.num_generations} x {p.max_completion_length}, "
                         f"batch {p.per_device_train_batch_size}, {quant}, r{p.lora_rank} | {p.dtype} | {gen} | "
                         f"{p.estimate.total_gb:.1f} / {p.budget_gb:.1f} |")
    return "\n".join(lines)


def default_recipe_table_markdown(profiles: Any = None, *,
                                  vllm: tuple[str | None, bool] = CARD_TABLE_VLLM) -> str:
    """docs/gpu.md: the GSM8K recipe as shipped (no preset) and its ``t4`` preset, per card, by the planner."""
    from unsloth_grpo.hardware.profiles import PROFILES
    from unsloth_grpo.tasks.gsm8k import RECIPE

    profiles = [p for p in (PROFILES.values() if profiles is None else profiles) if p.cuda]
    lines = ["| card | recipe | vLLM | est. peak / budget (GB) | fits |", "|---|---|---|---|---|"]
    for card in profiles:
        for label, preset in (("default", None), ("--preset t4", "t4")):
            if preset == "t4" and card.compute_capability != (7, 5):
                continue  # the t4 preset names one card
            cfg = RECIPE.resolve(preset=preset)
            s = settings_from_config(cfg, card.as_gpu(), vllm=vllm)
            s["backend"] = "unsloth"
            est = estimate_for_config(cfg, settings=s)
            budget = card.total_gb * 0.9
            gen = ("on, standby" if s["vllm_standby"] else f"on, pool {s['gpu_memory_utilization']:.2f}") \
                if s["use_vllm"] else "off"
            lines.append(f"| {card.name} | {label} | {gen} | {est.total_gb:.1f} / {budget:.1f} | "
                         f"{'yes' if est.total_gb <= budget else 'NO'} |")
    return "\n".join(lines)


# ---------------------------------------------------------------------------- hardware and configs
