"""A recipe run with its generation timed, for the side-by-side of docs/vllm-cpu.md; ``--no-sync`` also
turns off the weight sync of vLLM's CPU engine, to show the rollout sync check failing.

    python tools/vllm_cpu_run.py [--no-sync] [--server-pid PID] RECIPE [recipe arguments ...]
    python tools/vllm_cpu_run.py gsm8k --preset smollm2 model.fast_inference=on output_dir=outputs/v

It runs ``python -m unsloth_grpo.recipes.RECIPE`` in this process, with TRL's generation call
(``GRPOTrainer._generate_single_turn``: vLLM or transformers ``generate``) timed, and writes
``generation_timing.json`` in the run's output directory: seconds spent generating, completion tokens,
completions, tokens per second, calls, and the CPU seconds of this process during those calls
(``cpu_seconds``: every thread, vLLM's colocated engine included). With ``--server-pid`` (the vLLM server a
``model.vllm_server`` run generates on) the CPU seconds the server's processes spent during the calls are added
as ``server_cpu_seconds``: a server generates in processes of its own. ``--no-sync`` replaces the engine's weight upload with nothing (the run still
walks and merges the weights, so its time is unchanged): every step then generates from the weights the
engine started with, and the check must say so.
"""

from __future__ import annotations

import atexit
import importlib
import json
import sys
import time
from pathlib import Path


def _output_dir(argv: list[str]) -> str | None:
    for arg in argv:
        if arg.startswith("output_dir="):
            return arg.split("=", 1)[1]
    return None


def tree_cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` and every process below it, so far (0.0 once it is gone)."""
    import psutil

    try:
        procs = [psutil.Process(pid)]
        procs += procs[0].children(recursive=True)
    except psutil.NoSuchProcess:
        return 0.0
    total = 0.0
    for proc in procs:
        try:
            t = proc.cpu_times()
        except psutil.NoSuchProcess:
            continue
        total += t.user + t.system + t.children_user + t.children_system
    return total


def _time_generation(totals: dict, server_pid: int | None = None) -> None:
    from trl import GRPOTrainer

    plain = GRPOTrainer._generate_single_turn

    def timed(self, *args, **kwargs):
        start, cpu = time.perf_counter(), time.process_time()
        server = tree_cpu_seconds(server_pid) if server_pid else 0.0
        out = plain(self, *args, **kwargs)
        totals["seconds"] += time.perf_counter() - start
        totals["cpu_seconds"] += time.process_time() - cpu
        if server_pid:
            totals["server_cpu_seconds"] += tree_cpu_seconds(server_pid) - server
        totals["calls"] += 1
        totals["completions"] += len(out[0])
        totals["completion_tokens"] += sum(len(c) for c in out[0])
        return out

    GRPOTrainer._generate_single_turn = timed


def _disable_sync() -> None:
    from unsloth_grpo.training import vllm_cpu

    cls = vllm_cpu._cpu_generation_class()
    cls._send_weights = lambda self, weights: None
    print("vllm_cpu_run: the weight sync is OFF (--no-sync): the engine keeps its starting weights", flush=True)


def main(argv: list[str]) -> int:
    no_sync = "--no-sync" in argv
    argv = [a for a in argv if a != "--no-sync"]
    server_pid = None
    if "--server-pid" in argv:
        i = argv.index("--server-pid")
        server_pid = int(argv[i + 1])
        del argv[i:i + 2]
    if not argv:
        print(__doc__, file=sys.stderr)
        return 2
    recipe, rest = argv[0], argv[1:]
    totals = {"seconds": 0.0, "cpu_seconds": 0.0, "server_cpu_seconds": 0.0, "calls": 0, "completions": 0,
              "completion_tokens": 0}
    _time_generation(totals, server_pid)
    if no_sync:
        _disable_sync()
    out = _output_dir(rest)

    def write() -> None:
        if out and Path(out).is_dir():
            totals["tokens_per_s"] = totals["completion_tokens"] / totals["seconds"] if totals["seconds"] else None
            totals["sync"] = not no_sync
            (Path(out) / "generation_timing.json").write_text(json.dumps(totals, indent=1) + "\n")
            print(f"vllm_cpu_run: generation {totals}", flush=True)

    atexit.register(write)
    module = importlib.import_module(f"unsloth_grpo.recipes.{recipe}")
    result = module.main(rest)
    return int(result or 0)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
