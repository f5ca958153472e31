"""What this machine's CPU can do for a model in fp32: matrix-multiply throughput and memory bandwidth.

    python benchmarks/machine_limits.py                 # torch's own thread count
    OMP_NUM_THREADS=1 python benchmarks/machine_limits.py

The two numbers a GRPO step on a CPU is bounded by, each measured with torch (the library that does the
work in training), in the process's torch thread count:

- **matmul GFLOP/s**: the best of a few timed ``torch.mm`` calls in fp32, for a large square product
  (the machine's practical peak) and for the shapes a 135M model's layers have at the batch sizes of a
  GRPO step (a decode step's 8 rows, a loss forward's ~1,000 rows, against a 576 x 1,536 weight);
- **memory bandwidth, GB/s**: reading a 512 MB fp32 tensor (``sum``) and copying it, the best of a few.
  A decode step reads every weight once: its time can be no less than the weights' bytes over this.

What it does not show: how much of either torch reaches inside a whole model (small matrices, Python
overhead between layers); benchmarks/step_time.py --profile sets a real step against these limits.
"""

from __future__ import annotations

import argparse
import json
import sys
import time


def _best(fn, reps: int) -> float:
    fn()  # warm-up: allocation, kernel choice
    best = float("inf")
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def matmul_gflops(m: int, k: int, n: int, *, reps: int = 5, min_seconds: float = 0.05) -> float:
    """Best fp32 GFLOP/s of ``(m x k) @ (k x n)``, each timing repeating the product for at least ``min_seconds``."""
    import torch

    a, b = torch.randn(m, k), torch.randn(k, n)
    flops = 2.0 * m * k * n
    inner = max(1, int(min_seconds * 20e9 / flops))  # about min_seconds at 20 GFLOP/s

    def run():
        for _ in range(inner):
            torch.mm(a, b)

    return inner * flops / _best(run, reps) / 1e9


def memory_gbps(megabytes: int = 512, *, reps: int = 5) -> dict[str, float]:
    """Best read (``sum``) and copy bandwidth in GB/s over an fp32 tensor of ``megabytes`` (a copy reads and writes)."""
    import torch

    x = torch.ones(megabytes * 2**20 // 4)
    y = torch.empty_like(x)
    nbytes = x.numel() * 4
    read = nbytes / _best(lambda: x.sum(), reps) / 1e9
    copy = 2 * nbytes / _best(lambda: y.copy_(x), reps) / 1e9
    return {"read": read, "copy": copy}


def measure() -> dict:
    import torch

    return {
        "threads": torch.get_num_threads(),
        "matmul_gflops": {
            "square 2048": matmul_gflops(2048, 2048, 2048),
            "8 x 576 @ 576 x 1536 (a decode step's layer)": matmul_gflops(8, 576, 1536),
            "1024 x 576 @ 576 x 1536 (a loss forward's layer)": matmul_gflops(1024, 576, 1536),
            "1024 x 576 @ 576 x 49152 (the lm head)": matmul_gflops(1024, 576, 49152, reps=3),
        },
        "memory_gbps": memory_gbps(),
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--json", action="store_true", help="Print the figures as JSON.")
    args = p.parse_args(argv)
    limits = measure()
    if args.json:
        print(json.dumps(limits, indent=2))
        return 0
    print(f"torch threads: {limits['threads']}")
    for name, g in limits["matmul_gflops"].items():
        print(f"  matmul fp32 {name:48s} {g:7.1f} GFLOP/s")
    m = limits["memory_gbps"]
    print(f"  memory: read {m['read']:.1f} GB/s, copy {m['copy']:.1f} GB/s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
