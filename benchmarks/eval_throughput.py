"""Batched vs one-at-a-time evaluation throughput (greedy, the eval's accuracy pass).

    OMP_NUM_THREADS=1 python benchmarks/eval_throughput.py            # tiny offline model, CPU
    python benchmarks/eval_throughput.py --model Qwen/Qwen2.5-0.5B-Instruct --n 64 --max-new-tokens 128

Prints completions per second both ways and the speed-up, and checks that both ways produce the
same greedy completions (left padding must not change what the model writes).
"""

from __future__ import annotations

import argparse
import tempfile
import time


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=None, help="Model directory or hub id (default: the tiny offline model).")
    ap.add_argument("--n", type=int, default=64, help="Problems to generate for.")
    ap.add_argument("--max-new-tokens", type=int, default=32)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--device", default="auto")
    args = ap.parse_args()

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from unsloth_grpo.evaluation.generation import generate_detailed
    from unsloth_grpo.tasks.gsm8k import load_gsm8k
    from unsloth_grpo.models.builtin import build_tiny_model

    tmp = tempfile.TemporaryDirectory(prefix="tiny-")
    path = args.model or build_tiny_model(tmp.name)
    device = args.device if args.device != "auto" else ("cuda" if torch.cuda.is_available() else "cpu")
    tokenizer = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path).to(device)
    prompts = list(load_gsm8k("synthetic", split="test", num_synthetic=args.n, limit=args.n)["prompt"])

    def run(batch_size: int):
        generate_detailed(model, tokenizer, prompts[:batch_size], max_new_tokens=4, batch_size=batch_size)  # warm-up
        t0 = time.perf_counter()
        if batch_size == 1:
            out = [generate_detailed(model, tokenizer, [p], max_new_tokens=args.max_new_tokens, batch_size=1)[0]
                   for p in prompts]
        else:
            out = generate_detailed(model, tokenizer, prompts, max_new_tokens=args.max_new_tokens,
                                    batch_size=batch_size)
        return out, time.perf_counter() - t0

    single, t_single = run(1)
    batched, t_batched = run(args.batch_size)
    tokens = sum(g[0].num_tokens for g in batched)
    print(f"model={args.model or 'builtin:tiny'} device={device} threads={torch.get_num_threads()} n={args.n} "
          f"max_new_tokens={args.max_new_tokens} generated_tokens={tokens}")
    print(f"one at a time       : {t_single:7.2f} s  {args.n / t_single:8.1f} completions/s")
    print(f"batched (batch {args.batch_size:>3}) : {t_batched:7.2f} s  {args.n / t_batched:8.1f} completions/s")
    print(f"speed-up            : {t_single / t_batched:.1f}x (goal >= 4x)")
    same = sum(a == b for a, b in zip(single, batched))
    print(f"identical greedy completions: {same}/{args.n}")
    tmp.cleanup()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
