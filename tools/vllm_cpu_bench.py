"""Generation speed on a CPU, vLLM's CPU build against transformers ``generate``, in one process, alternated.

    python tools/vllm_cpu_bench.py [MODEL] [--reps 3] [--n 8] [--tokens 48]

Both generate ``--n`` completions of exactly ``--tokens`` tokens (the end-of-turn token ignored) at
temperature 1 from one chat prompt, in float32: vLLM with the engine settings the toolkit uses on a CPU
(:data:`unsloth_grpo.training.vllm_cpu.CPU_LLM_KWARGS`), transformers with ``model.generate``. The
engines take turns, ``--reps`` times each, so both see the same load; the script prints one JSON line per
round and the median tokens/s of each. Run it in the vllm-cpu environment (docs/vllm-cpu.md) with
``OMP_NUM_THREADS=1``. MODEL defaults to the built-in SmolLM2-135M-Instruct.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("model", nargs="?", default="builtin:smollm2-135m-instruct")
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--n", type=int, default=8)
    p.add_argument("--tokens", type=int, default=48)
    args = p.parse_args()

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from vllm import LLM, SamplingParams

    from unsloth_grpo.models.ref import model_ref
    from unsloth_grpo.training.vllm_cpu import CPU_LLM_KWARGS, set_cpu_environment

    path = model_ref(args.model).path()
    set_cpu_environment()
    for key, value in {"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1", "MASTER_ADDR": "127.0.0.1",
                       "MASTER_PORT": "29541"}.items():
        os.environ.setdefault(key, value)  # vLLM in this process, as TRL's colocate mode runs it
    start = time.perf_counter()
    llm = LLM(model=path, max_model_len=512, distributed_executor_backend="external_launcher", seed=0,
              **CPU_LLM_KWARGS)
    print(json.dumps({"engine_start_s": round(time.perf_counter() - start, 1)}), flush=True)
    tokenizer = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    prompt = tokenizer.apply_chat_template(
        [{"role": "user", "content": "Tom has 38 apples and buys 24 more. How many apples does he have now?"}],
        add_generation_prompt=True, tokenize=False)
    ids = tokenizer(prompt, add_special_tokens=False)["input_ids"]
    params = SamplingParams(n=args.n, max_tokens=args.tokens, min_tokens=args.tokens, ignore_eos=True,
                            temperature=1.0, seed=0)

    def vllm_round() -> int:
        out = llm.generate([{"prompt_token_ids": ids}], params, use_tqdm=False)
        return sum(len(c.token_ids) for c in out[0].outputs)

    def hf_round() -> int:
        batch = torch.tensor([ids] * args.n)
        with torch.no_grad():
            out = model.generate(batch, attention_mask=torch.ones_like(batch), do_sample=True, temperature=1.0,
                                 max_new_tokens=args.tokens, min_new_tokens=args.tokens,
                                 pad_token_id=tokenizer.pad_token_id or tokenizer.eos_token_id)
        return int(out.shape[0] * (out.shape[1] - batch.shape[1]))

    vllm_round()  # warm-up of both
    hf_round()
    speeds: dict[str, list[float]] = {"vllm": [], "transformers": []}
    for rep in range(args.reps):
        for name, fn in (("vllm", vllm_round), ("transformers", hf_round)):
            t = time.perf_counter()
            tokens = fn()
            s = time.perf_counter() - t
            speeds[name].append(tokens / s)
            print(json.dumps({"round": rep, "engine": name, "tokens": tokens, "seconds": round(s, 2),
                              "tokens_per_s": round(tokens / s, 1)}), flush=True)
    print(json.dumps({f"{k}_median_tokens_per_s": round(statistics.median(v), 1) for k, v in speeds.items()}))


if __name__ == "__main__":
    main()
