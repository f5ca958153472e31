"""``unsloth-grpo export``: merge a run's LoRA adapter into the base weights; optionally GGUF and a hub upload.

    unsloth-grpo export --model outputs/gsm8k --merged outputs/gsm8k-merged --verify
    unsloth-grpo export --model outputs/gsm8k --gguf outputs/gsm8k-gguf --quant q8_0 --verify

The work is :mod:`unsloth_grpo.export`'s.
"""

from __future__ import annotations

import argparse
import sys

from unsloth_grpo import export
from unsloth_grpo.export import VERIFY_TOLERANCE, ExportError
from unsloth_grpo.export.gguf_check import GGUF_TOLERANCE, KQUANT_TOLERANCE
from unsloth_grpo.export.gguf_writer import DIRECT_QUANTS, LLAMA_QUANTS


def add_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "export", help="Merge a run's LoRA adapter into the base weights; optionally GGUF and hub upload.",
        description=export.__doc__.split("\n\n")[1] if export.__doc__ else None,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", required=True, help="Run directory, checkpoint or LoRA adapter directory.")
    p.add_argument("--merged", metavar="DIR", help="Write the merged model (with tokenizer) here.")
    p.add_argument("--gguf", metavar="DIR",
                   help="Write a GGUF file (model-QUANT.gguf) and an Ollama Modelfile here; offline, no llama.cpp "
                        "needed for " + ", ".join(DIRECT_QUANTS) + ".")
    p.add_argument("--quant", default="q8_0", metavar="TYPE",
                   help="GGUF type (default q8_0). Written directly: " + ", ".join(DIRECT_QUANTS)
                        + ". With llama.cpp's quantizer (llama-quantize on PATH, or llama-cpp-python): "
                        + ", ".join(LLAMA_QUANTS) + ".")
    p.add_argument("--force", action="store_true",
                   help="Replace a --merged or --gguf folder that exists and is not empty (only once the export has "
                        "succeeded; a failed export leaves it as it was).")
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
                   help="Reload what was written and exit 1 when it differs too much. The merged model's logits "
                        "against the adapter model's (" + ", ".join(f"{k} {v:g}" for k, v in VERIFY_TOLERANCE.items())
                        + " of the largest logit); the GGUF file read by transformers against the merged model ("
                        + ", ".join(f"{k} {v:g}" for k, v in GGUF_TOLERANCE.items()) + f", k-quants {KQUANT_TOLERANCE:g})"
                        " and, when llama-cpp-python is installed, its chat prompt ids and greedy answers in llama.cpp.")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    try:
        result = export.export_model(args.model, args.merged, gguf_dir=args.gguf, quant=args.quant,
                                     push_to_hub=args.push_to_hub, private=not args.public, backend=args.backend,
                                     base_model=args.base_model, dtype=args.dtype, force=args.force,
                                     verify=args.verify)
    except ExportError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if result.merged_dir is not None:
        print(f"done: {result.merged_dir} ({result.method}, {result.dtype or 'dtype unknown'}"
              + (f": {result.dtype_reason}" if result.dtype_reason else "") + "); load it with "
              f"AutoModelForCausalLM.from_pretrained('{result.merged_dir}')")
    if result.gguf_files:
        f = result.gguf_files[0]
        print(f"done: {f} ({result.gguf_info.size_bytes / 2**20:.1f} MiB) and {f.parent / 'Modelfile'}; run it with "
              f"llama.cpp (llama-cli -m {f}) or Ollama (cd {f.parent} && ollama create NAME -f Modelfile)")
    if not args.verify:
        return 0
    ok = True
    if result.merged_dir is not None:
        try:
            check = export.verify_merge(result)
        except ExportError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        print(f"verify: {check.summary()}", file=sys.stdout if check.ok else sys.stderr)
        ok = check.ok
    if result.gguf_check is not None:
        for line in result.gguf_check.summary():
            print(f"verify: {line}", file=sys.stdout if result.gguf_check.ok else sys.stderr)
        ok = ok and result.gguf_check.ok
    if result.gguf_check_error:
        print(f"verify: gguf could not be read back ({result.gguf_check_error}); the file was written but is not "
              "checked", file=sys.stderr)
        ok = False
    return 0 if ok else 1
