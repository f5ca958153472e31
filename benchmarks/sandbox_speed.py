"""Completions scored per second by the ``tests_passed`` reward: one GRPO batch of 64 completions x 5 tests.

    python benchmarks/sandbox_speed.py              # 3 batches, the pool (one worker per CPU) and one at a time
    python benchmarks/sandbox_speed.py --batches 5 --workers 4

The completions are fenced solutions of the offline code problems (``tasks.code.make_problems``
with 5 tests each): three quarters right, one quarter wrong (returns None), so both verdicts
cost what they cost in training. Each completion runs in its own fresh sandboxed process
(every isolation layer this machine allows); "pool" runs ``--workers`` of them at once, "serial"
one at a time; "fork server" forks each process from a clean interpreter started once, "new
interpreter each" starts ``python`` for every completion. Figures depend on the machine's load:
other processes share its cores.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from unsloth_grpo.sandbox import Limits, Sandbox  # noqa: E402
from unsloth_grpo.tasks import code  # noqa: E402


def batch(n: int, seed: int) -> tuple[list, list[str]]:
    problems = code.make_problems(n, seed=seed, num_tests=5)
    jobs, kinds = [], []
    for i, p in enumerate(problems):
        solution = p["solution"]
        if i % 4 == 3:  # parses, defines the function, fails every test
            solution = solution.replace("return ", "return None  # ", 1)
        jobs.append(code.job_for(solution, p["answer"]))
        kinds.append("right" if i % 4 != 3 else "wrong")
    return jobs, kinds


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, default=3, help="Batches timed per mode (the median is reported).")
    parser.add_argument("--size", type=int, default=64, help="Completions per batch.")
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1, help="Processes the pool runs at once.")
    args = parser.parse_args(argv)

    boxes = {
        "pool, fork server": Sandbox(Limits(timeout=5.0), workers=args.workers),
        "serial, fork server": Sandbox(Limits(timeout=5.0), workers=1),
        "pool, new interpreter each": Sandbox(Limits(timeout=5.0), workers=args.workers, fork_server=False),
        "serial, new interpreter each": Sandbox(Limits(timeout=5.0), workers=1, fork_server=False),
    }
    print(f"isolation: {boxes['pool, fork server'].isolation.summary()}")
    print(f"{args.size} completions x 5 tests per batch, {args.batches} batches, {os.cpu_count()} CPUs, "
          f"load average {os.getloadavg()[0]:.1f}")
    for name, box in boxes.items():
        rates, per_job = [], []
        for b in range(args.batches):
            jobs, kinds = batch(args.size, seed=b)
            t0 = time.perf_counter()
            results = box.map(jobs)
            seconds = time.perf_counter() - t0
            expected = ["passed" if k == "right" else "failed" for k in kinds]
            if [r.status for r in results] != expected:
                raise SystemExit(f"wrong verdicts: {[r.status for r in results]}")
            rates.append(len(jobs) / seconds)
            per_job.append(statistics.median(r.seconds for r in results))
        print(f"{name:28s} workers={box.workers:<2d} {statistics.median(rates):6.1f} completions/s "
              f"(batch of {args.size} in {args.size / statistics.median(rates):.2f} s; "
              f"median {statistics.median(per_job) * 1000:.0f} ms per completion process)")
        box.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
