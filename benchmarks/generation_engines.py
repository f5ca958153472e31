"""GRPO's generation three ways on the real model, one run each: transformers, vLLM colocated, vLLM server.

    .venv-vllm/bin/python benchmarks/generation_engines.py                     # the three arms (about 40 min)
    .venv-vllm/bin/python benchmarks/generation_engines.py --arms --two-ranks 4   # only two trainers on one server
    .venv-vllm/bin/python benchmarks/generation_engines.py --check             # the arguments and the plan only

Every arm runs the gsm8k recipe's ``smollm2`` preset as shipped (SmolLM2-135M-Instruct: its SFT warm-up on worked
additions, then GRPO with refill), in a child process through ``tools/vllm_cpu_run.py``, which times TRL's
generation call, and differs only in where the completions come from:

- ``transformers``: the toolkit's own generation (``model.fast_inference=off``);
- ``colocate``: vLLM's CPU build in the training process (``model.fast_inference=on``);
- ``server``: vLLM's OpenAI server in processes of its own, started here (``unsloth-grpo serve``'s command), the
  trainer its client, the LoRA adapter loaded into it after every optimizer step (``model.vllm_server``).

For each arm: the completions TRL's generation call returned, the CPU seconds spent in those calls (the trainer's
process, every thread; for the server arm the server's processes too: ``completions per CPU-second`` counts both
sides), the CPU seconds and wall seconds of the whole run (the trainer's processes, and the server's over the
run: a server also costs what it burns between calls), the held-out accuracy the preset's before/after evaluation
measured (the same problems for every arm, the toolkit's greedy generation), and the rollout check of the vLLM
arms (``vllm/sync_ok`` and ``vllm/sync_logp_max_diff`` over the GRPO steps).

``--two-ranks N``: after the arms, two trainer processes (``torch.distributed.run``, gloo, CPU) share one server
for N GRPO steps of the same preset without its warm-up, each writing its own metrics
(``UNSLOTH_GRPO_RANK_LOG_DIR``); every rank's rollout check is listed per step.

What it does not show: one run per arm on one machine (the completions differ, so the rewards and the accuracy
take different paths: telling an engine's effect on accuracy from one seed's luck needs several seeds); CPU time
on a 2-core machine, not a GPU's throughput. Results: ``--out``/results.json, a markdown table printed at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import signal
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tools"))

ARMS = ("transformers", "colocate", "server")
ENGINE = {"transformers": ["model.fast_inference=off"], "colocate": ["model.fast_inference=on"], "server": []}
#: What torch.distributed reads from the environment: a child run on its own starts without them.
DISTRIBUTED_ENV = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "ROLE_RANK", "MASTER_ADDR",
                   "MASTER_PORT", "TORCHELASTIC_RUN_ID")


def child_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in DISTRIBUTED_ENV}
    return {**env, "OMP_NUM_THREADS": env.get("OMP_NUM_THREADS", "1"), **extra}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """vLLM's server for the preset's model on a loopback port, in a session of its own (killed as a group)."""

    def __init__(self, cfg, log: Path, port: int):
        self.cfg, self.log, self.port, self.proc = cfg, log, port, None
        self.url = f"http://127.0.0.1:{port}"

    def start(self, timeout: float = 600.0) -> float:
        from unsloth_grpo.hardware.vllm_server import lora_rank_for_server, serve_command
        from unsloth_grpo.models.ref import model_ref
        from unsloth_grpo.hardware.vllm_server import ServerClient

        path = model_ref(self.cfg.model.name).path()
        env, argv = serve_command(str(path), port=self.port, max_model_len=self.cfg.model.max_seq_length,
                                  max_lora_rank=lora_rank_for_server(self.cfg.lora.max_lora_rank or self.cfg.lora.r))
        t0 = time.perf_counter()
        with open(self.log, "a") as fh:
            self.proc = subprocess.Popen(argv, env=child_env(**env), stdout=fh, stderr=subprocess.STDOUT,
                                         start_new_session=True)
        while time.perf_counter() - t0 < timeout:
            if self.proc.poll() is not None:
                raise RuntimeError(f"the vLLM server exited ({self.proc.returncode}); see {self.log}")
            try:
                ServerClient(self.url, timeout=2).get("/health")
                return time.perf_counter() - t0
            except Exception:  # noqa: BLE001 - not up yet
                time.sleep(2)
        self.stop()
        raise RuntimeError(f"the vLLM server did not answer in {timeout:.0f} s; see {self.log}")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=30)
        self.proc = None


def children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def metrics(out: Path) -> list[dict]:
    path = out / "metrics.jsonl"
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()] if path.exists() else []


def run_arm(arm: str, cfg, out: Path, overrides: list[str], server: Server | None, log=print) -> dict:
    from vllm_cpu_run import tree_cpu_seconds

    out.parent.mkdir(parents=True, exist_ok=True)  # the run makes ``out``: it refuses a folder with files
    engine = ENGINE[arm] + ([f"model.vllm_server=127.0.0.1:{server.port}"] if arm == "server" else [])
    tool = [sys.executable, "tools/vllm_cpu_run.py"]  # run from the repository (cwd=ROOT): a relative path
    if server is not None:
        tool += ["--server-pid", str(server.proc.pid)]
    command = [*tool, "gsm8k", "--preset", "smollm2", *engine, *overrides, f"output_dir={out}"]
    log(f"{arm}: {' '.join(command[1:])}")
    cpu0, server0, t0 = children_cpu(), tree_cpu_seconds(server.proc.pid) if server else 0.0, time.perf_counter()
    with open(out.parent / f"run-{arm}.log", "w") as fh:  # the server writes server.log
        code = subprocess.run(command, stdout=fh, stderr=subprocess.STDOUT, env=child_env(), cwd=ROOT).returncode
    wall = time.perf_counter() - t0
    trainer_cpu = children_cpu() - cpu0
    server_cpu = tree_cpu_seconds(server.proc.pid) - server0 if server else 0.0
    result = {"arm": arm, "exit": code, "command": " ".join(command[1:]), "wall_s": round(wall, 1),
              "trainer_cpu_s": round(trainer_cpu, 1), "server_cpu_s": round(server_cpu, 1)}
    timing = out / "generation_timing.json"
    if timing.exists():
        result["generation"] = json.loads(timing.read_text())
    report = out / "report.json"
    if report.exists():
        rep = json.loads(report.read_text())
        table = {m["metric"]: m for m in rep["metrics"]}
        result["held_out"] = {"n": rep["n"], "before": table["accuracy"]["baseline"],
                              "after": table["accuracy"]["trained"], "ci95_after": rep["accuracy_ci95"]["trained"],
                              "format_after": table.get("format_compliance", {}).get("trained"),
                              "by_category": rep.get("by_category")}
    rows = [r for r in metrics(out) if "vllm/sync_ok" in r]
    if rows:
        diffs = [r["vllm/sync_logp_max_diff"] for r in rows if r.get("vllm/sync_logp_max_diff") is not None]
        result["sync"] = {"steps": len(rows), "ok": sum(r["vllm/sync_ok"] == 1.0 for r in rows),
                          "max_diff": max(diffs) if diffs else None,
                          "sync_s_median": statistics.median([r["vllm/sync_s"] for r in rows if "vllm/sync_s" in r])
                          if any("vllm/sync_s" in r for r in rows) else None}
    log(f"{arm}: {summary_line(result)}")
    return result


def run_two_ranks(cfg, out: Path, steps: int, server: Server, overrides: list[str], log=print) -> dict:
    ranks = out / "ranks"
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2", "-m",
               "unsloth_grpo.cli", "train", "--recipe", "gsm8k", "--preset", "smollm2", "--output-dir", str(out),
               "stages=[]", f"training.max_steps={steps}", "evaluation.before_after=false",
               "training.per_device_train_batch_size=4", f"model.vllm_server=127.0.0.1:{server.port}", *overrides]
    log(f"two ranks: {' '.join(command[1:])}")
    out.parent.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    with open(out.parent / "two-ranks.log", "w") as fh:
        code = subprocess.run(command, stdout=fh, stderr=subprocess.STDOUT, cwd=ROOT,
                              env=child_env(UNSLOTH_GRPO_RANK_LOG_DIR=str(ranks))).returncode
    result = {"exit": code, "command": " ".join(command[1:]), "wall_s": round(time.perf_counter() - t0, 1),
              "ranks": {}}
    for rank in (0, 1):
        path = ranks / f"metrics.rank{rank}.jsonl"
        rows = [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []
        result["ranks"][rank] = [{"step": r.get("step"), "sync_ok": r.get("vllm/sync_ok"),
                                  "max_diff": r.get("vllm/sync_logp_max_diff")} for r in rows]
    log(f"two ranks: exit {code}; " + "; ".join(
        f"rank {k}: sync_ok {[r['sync_ok'] for r in v]}" for k, v in result["ranks"].items()))
    return result


def summary_line(r: dict) -> str:
    g = r.get("generation", {})
    cpu = g.get("cpu_seconds", 0) + g.get("server_cpu_seconds", 0)
    parts = [f"exit {r['exit']}", f"wall {r['wall_s']:.0f}s", f"CPU {r['trainer_cpu_s'] + r['server_cpu_s']:.0f}s"]
    if g:
        parts.append(f"{g['completions']} completions in {cpu:.0f} CPU-s of generation "
                     f"({g['completions'] / cpu if cpu else 0:.2f}/CPU-s)")
    if "held_out" in r:
        h = r["held_out"]
        parts.append(f"held-out {h['before']:.3f} -> {h['after']:.3f} (n={h['n']})")
    if "sync" in r:
        s = r["sync"]
        parts.append(f"sync ok {s['ok']}/{s['steps']}, max diff {s['max_diff']}")
    return ", ".join(parts)


def table(results: list[dict]) -> str:
    arms = [r for r in results if "arm" in r]
    head = "| | " + " | ".join(r["arm"] for r in arms) + " |\n|---|" + "---|" * len(arms) + "\n"

    def row(label, fn):
        return f"| {label} | " + " | ".join(fn(r) for r in arms) + " |\n"

    def gen(r, key):
        return r.get("generation", {}).get(key, 0)

    def per_cpu(r):
        cpu = gen(r, "cpu_seconds") + gen(r, "server_cpu_seconds")
        return f"{gen(r, 'completions') / cpu:.2f}" if cpu else "-"

    def acc(r):
        h = r.get("held_out")
        if not h:
            return "-"
        lo, hi = h["ci95_after"]
        return f"{h['after'] * 100:.1f}% ({lo * 100:.0f}-{hi * 100:.0f}), from {h['before'] * 100:.1f}%"

    def sync(r):
        s = r.get("sync")
        return f"{s['ok']}/{s['steps']}, at most {s['max_diff']:.1e}" if s and s["max_diff"] is not None else "-"

    return (head
            + row("completions generated (TRL's calls)", lambda r: str(gen(r, "completions")))
            + row("CPU-s in those calls (trainer + server)",
                  lambda r: f"{gen(r, 'cpu_seconds'):.0f} + {gen(r, 'server_cpu_seconds'):.0f}")
            + row("**completions per CPU-second**", per_cpu)
            + row("completion tokens per wall second in the calls",
                  lambda r: f"{gen(r, 'completion_tokens') / gen(r, 'seconds'):.1f}" if gen(r, "seconds") else "-")
            + row("whole run: CPU-s (trainer + server), wall", lambda r: f"{r['trainer_cpu_s']:.0f} + "
                  f"{r['server_cpu_s']:.0f}, {r['wall_s'] / 60:.1f} min")
            + row("**held-out strict accuracy** (95% interval)", acc)
            + row("rollout check (steps held, largest diff)", sync))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--arms", nargs="*", choices=ARMS, default=list(ARMS),
                   help="The arms to run (none: with --two-ranks, only the two trainers).")
    p.add_argument("--two-ranks", type=int, default=0, metavar="STEPS",
                   help="Also run two trainer processes on one server for STEPS GRPO steps (0: not).")
    p.add_argument("--out", default="outputs/generation-engines")
    p.add_argument("--check", action="store_true", help="Resolve the preset and print the plan; run nothing.")
    p.add_argument("overrides", nargs="*", metavar="KEY=VALUE", help="Overrides of the smollm2 preset, every arm.")
    args = p.parse_args(argv)
    from unsloth_grpo.recipes.gsm8k import RECIPE

    cfg = RECIPE.resolve(preset="smollm2", overrides=list(args.overrides))
    out = Path(args.out)
    plan = [*args.arms] + (["two ranks"] if args.two_ranks else [])
    print(f"generation_engines: {', '.join(plan)}; {cfg.model.name}, output under {out}")
    if args.check:
        return 0
    out.mkdir(parents=True, exist_ok=True)
    path = out / "results.json"
    results = json.loads(path.read_text())["results"] if path.exists() else []
    results = [r for r in results if r.get("exit", 0) == 0]  # a failed arm runs again
    done = {r.get("arm") for r in results}
    server = None
    try:
        for arm in args.arms:
            if arm in done:
                print(f"{arm}: in {path} already")
                continue
            if arm == "server" and server is None:
                server = Server(cfg, out / "server.log", free_port())
                print(f"server: up in {server.start():.0f} s at {server.url}")
            results.append(run_arm(arm, cfg, out / arm, args.overrides, server if arm == "server" else None))
            path.write_text(json.dumps({"command": "benchmarks/generation_engines.py " + " ".join(
                sys.argv[1:] if argv is None else argv), "machine": platform.machine(), "results": results},
                indent=1) + "\n")
        if args.two_ranks:
            if server is None:
                server = Server(cfg, out / "server.log", free_port())
                print(f"server: up in {server.start():.0f} s at {server.url}")
            results = [r for r in results if "ranks" not in r]
            results.append(run_two_ranks(cfg, out / "two-ranks", args.two_ranks, server, args.overrides))
            path.write_text(json.dumps({"command": "benchmarks/generation_engines.py " + " ".join(
                sys.argv[1:] if argv is None else argv), "machine": platform.machine(), "results": results},
                indent=1) + "\n")
    finally:
        if server is not None:
            server.stop()
    if any("arm" in r for r in results):
        print(table(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
