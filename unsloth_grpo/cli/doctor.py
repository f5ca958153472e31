"""``unsloth-grpo doctor``: check this machine (versions, GPUs, backend, vLLM, hub, disk) for a recipe.

    unsloth-grpo doctor
    unsloth-grpo doctor --config recipes/gsm8k.yaml --json

Exit 1 on a blocking problem. The checks are :mod:`unsloth_grpo.hardware.doctor`'s (one module per job).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from typing import Sequence

from unsloth_grpo.cli.arguments import in_range
from unsloth_grpo.config import BACKENDS, FAST_INFERENCE
from unsloth_grpo.hardware.doctor.checks import ERROR, run_checks
from unsloth_grpo.hardware.doctor.probes import DEFAULT_VLLM_PORT
from unsloth_grpo.hardware.doctor.recipe import recipe_problems
from unsloth_grpo.hardware.doctor.report import Report, collect_report
from unsloth_grpo.hardware.doctor.screen import render
from unsloth_grpo.hardware.profiles import CardProfile


def add_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "doctor",
        help="Check this machine: versions, GPUs, backend, vLLM, hub, disk; exit 1 on a blocking problem.",
        description=(
            "Report Python, torch, GPUs and the installed versions of the training stack, check them against "
            "the ranges this package and Unsloth declare, and print the pip command that fixes each mismatch."
        ),
    )
    p.add_argument("--config", help="Recipe YAML: take backend, dtype, fast_inference, output_dir and vllm_server from it.")
    p.add_argument(
        "--backend", choices=BACKENDS, default=None, help="Backend you intend to use (default: auto, or the config's)."
    )
    p.add_argument("--bf16", action="store_true", default=None, help="Treat a GPU without bf16 as blocking.")
    p.add_argument("--fast-inference", choices=FAST_INFERENCE, default=None, help="vLLM generation you intend to use.")
    p.add_argument("--output-dir", help="Folder whose free disk space to report (default: the config's, or .).")
    p.add_argument("--cache-dir", help="Hugging Face cache folder (default: from HF_HUB_CACHE / HF_HOME).")
    p.add_argument("--no-network", action="store_true", help="Skip the hub reachability probe.")
    p.add_argument("--vllm-server-host", help="Check a vLLM server (TRL vllm_mode='server') on this host.")
    p.add_argument("--vllm-server-port", type=in_range(int, 1, 65535, "the server's TCP port", str(DEFAULT_VLLM_PORT)),
                   help=f"Its port (default {DEFAULT_VLLM_PORT}).")
    p.add_argument("--json", action="store_true", help="Print the report and problems as JSON instead.")
    p.set_defaults(func=run)


def _profile_of(report: Report) -> CardProfile:
    """The card profile of the report's first GPU (the CPU profile without one)."""
    from unsloth_grpo.hardware.profiles import CPU

    if not report.torch.cuda_available or not report.torch.gpus:
        return CPU
    g = report.torch.gpus[0]
    return CardProfile("measured", g.name, g.total_memory_bytes / 2**30, tuple(g.compute_capability), source="measured")


def run(args: argparse.Namespace) -> int:
    backend = getattr(args, "backend", None)
    need_bf16 = getattr(args, "bf16", None)
    fast = getattr(args, "fast_inference", None)
    output_dir = getattr(args, "output_dir", None)
    if getattr(args, "config", None):
        from unsloth_grpo.config import ConfigError, load_config

        try:
            cfg = load_config(args.config)
        except ConfigError as exc:  # a missing or malformed file: one line, exit 2, as the recipes say it
            print(f"error: {exc}", file=sys.stderr)
            return 2
        backend = backend or cfg.model.backend
        need_bf16 = need_bf16 if need_bf16 is not None else cfg.model.dtype == "bf16"
        fast = fast or cfg.model.fast_inference
        output_dir = output_dir or cfg.output_dir
    host = getattr(args, "vllm_server_host", None)
    port = getattr(args, "vllm_server_port", None)
    server = (host or "localhost", port or DEFAULT_VLLM_PORT) if (host or port) else None
    if server is None and getattr(args, "config", None) and cfg.model.vllm_server:
        from unsloth_grpo.hardware.launch import parse_vllm_server

        server = parse_vllm_server(cfg.model.vllm_server)[1:]  # the server the recipe will generate on

    report = collect_report(
        output_dir=output_dir or ".",
        cache_dir=getattr(args, "cache_dir", None),
        check_hub=not getattr(args, "no_network", False),
        vllm_server=server,
    )
    load_4bit = bool(cfg.model.load_in_4bit) if getattr(args, "config", None) else True
    problems = run_checks(report, backend=backend or "auto", need_bf16=need_bf16, fast_inference=fast or "auto",
                          load_in_4bit=load_4bit)
    if getattr(args, "config", None):
        profile = _profile_of(report)
        from unsloth_grpo.cli.train import available_recipes, load_recipe

        cpu = load_recipe(cfg.task).cpu_presets() if cfg.task in available_recipes() else None
        problems = sorted(recipe_problems(cfg, profile=profile, hub_probe=lambda *_: (report.hub.ok is not False,
                                                                                      report.hub.detail),
                                          cpu_presets=cpu)
                          + problems, key=lambda p: p.severity != ERROR)
    if getattr(args, "json", False):
        print(json.dumps({"report": report.to_dict(), "problems": [dataclasses.asdict(p) for p in problems]}, indent=2))
    else:
        render(report, problems)
    return 1 if any(p.blocking for p in problems) else 0


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m unsloth_grpo.cli.doctor``: the same as ``unsloth-grpo doctor``."""
    parser = argparse.ArgumentParser(prog="unsloth-grpo")
    add_parser(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["doctor", *(sys.argv[1:] if argv is None else argv)])
    return args.func(args)


if __name__ == "__main__":
    raise SystemExit(main())
