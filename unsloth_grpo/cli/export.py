"""``unsloth-grpo export``: merge a run's LoRA adapter into the base weights; optionally GGUF and a hub upload.

    unsloth-grpo export --model outputs/gsm8k --merged outputs/gsm8k-merged --verify

The work is :mod:`unsloth_grpo.hardware.export`'s.
"""

from __future__ import annotations

import argparse
import sys

from unsloth_grpo.hardware import export
from unsloth_grpo.hardware.export import VERIFY_TOLERANCE, ExportError


def add_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "export", help="Merge a run's LoRA adapter into the base weights; optionally GGUF and hub upload.",
        description=export.__doc__.split("\n\n")[1] if export.__doc__ else None,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", required=True, help="Run directory, checkpoint or LoRA adapter directory.")
    p.add_argument("--merged", metavar="DIR", help="Write the merged model (with tokenizer) here.")
    p.add_argument("--gguf", metavar="DIR", help="Also write a GGUF file here (needs Unsloth).")
    p.add_argument("--quant", default="q4_k_m", help="GGUF quantization method (default q4_k_m).")
    p.add_argument("--allow-system-install", action="store_true",
                   help="Let Unsloth install the system packages llama.cpp's build needs (apt-get; off by default: "
                        "the export then names what is missing).")
    p.add_argument("--push-to-hub", metavar="REPO", help="Upload the merged model to this hub repo (token: $HF_TOKEN).")
    p.add_argument("--public", action="store_true", help="Create the hub repo public (default private).")
    p.add_argument("--backend", default="auto", choices=["auto", "unsloth", "peft"],
                   help="Merge with Unsloth or peft (auto: Unsloth on a CUDA machine when installed).")
    p.add_argument("--base-model", help="Base model to merge into, when the adapter's recorded base is not here.")
    p.add_argument("--dtype", default="auto", choices=["auto", "bf16", "fp16", "fp32"],
                   help="Weights dtype of the merged model with the peft backend. auto: the dtype the run trained "
                        "in (its run_info.json: an fp32 run stays fp32), else the base checkpoint's; the Unsloth "
                        "backend always writes 16-bit.")
    p.add_argument("--verify", action="store_true",
                   help="Reload the merged model, compare its logits with the adapter model's, and exit 1 when they "
                        "differ by more than the merged dtype's tolerance (" + ", ".join(
                            f"{k} {v:g}" for k, v in VERIFY_TOLERANCE.items()) + " of the largest logit).")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    try:
        result = export.export_model(args.model, args.merged, gguf_dir=args.gguf, quant=args.quant,
                              push_to_hub=args.push_to_hub, private=not args.public, backend=args.backend,
                              base_model=args.base_model, dtype=args.dtype,
                              allow_system_install=args.allow_system_install)
    except ExportError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if result.merged_dir is not None:
        print(f"done: {result.merged_dir} ({result.method}, {result.dtype or 'dtype unknown'}"
              + (f": {result.dtype_reason}" if result.dtype_reason else "") + "); load it with "
              f"AutoModelForCausalLM.from_pretrained('{result.merged_dir}')")
    if args.verify and result.merged_dir is not None:
        try:
            check = export.verify_merge(result)
        except ExportError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        print(f"verify: {check.summary()}", file=sys.stdout if check.ok else sys.stderr)
        return 0 if check.ok else 1
    return 0
