"""Measure every recipe's smoke preset over several seeds: the figures the docs quote.

    python benchmarks/recipe_figures.py                      # all recipes, seeds 0 1 2
    python benchmarks/recipe_figures.py --recipes gsm8k --seeds 0 1 2 3 4

Each run is the command a user types (``python -m unsloth_grpo.recipes.NAME --preset smoke``) with
``seed=S``; the figure is the mean reward of the first 5 logged steps and of the last 5, read from
the run's ``metrics.jsonl``. Tiny-model RL is chaotic, so the table gives the mean and the range over
seeds, and the platform it ran on, rather than one run's number.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

DEFAULT_RECIPES = ["gsm8k", "countdown", "json_extract", "custom"]


def run_one(recipe: str, seed: int, workdir: Path, extra: list[str]) -> dict:
    out = workdir / f"{recipe}-{seed}"
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", f"unsloth_grpo.recipes.{recipe}", "--preset", "smoke",
                           "--output-dir", str(out), f"seed={seed}", *extra],
                          capture_output=True, text=True)
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        return {"recipe": recipe, "seed": seed, "error": proc.stderr.strip().splitlines()[-1:] or ["failed"]}
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines() if line.strip()]
    rewards = [r["reward"] for r in rows if "reward" in r]
    return {"recipe": recipe, "seed": seed, "steps": len(rewards), "wall_s": wall,
            "first5": statistics.fmean(rewards[:5]), "last5": statistics.fmean(rewards[-5:])}


def summarise(results: list[dict]) -> str:
    lines = ["| recipe | seeds | first 5 steps (mean) | last 5 steps: mean | last 5: min .. max | wall s (mean) |",
             "|---|---|---|---|---|---|"]
    for recipe in dict.fromkeys(r["recipe"] for r in results):
        ok = [r for r in results if r["recipe"] == recipe and "error" not in r]
        if not ok:
            lines.append(f"| `{recipe}` | - | failed | | | |")
            continue
        last = [r["last5"] for r in ok]
        lines.append(f"| `{recipe}` | {len(ok)} | {statistics.fmean(r['first5'] for r in ok):.3f} | "
                     f"{statistics.fmean(last):.3f} | {min(last):.3f} .. {max(last):.3f} | "
                     f"{statistics.fmean(r['wall_s'] for r in ok):.0f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--recipes", nargs="+", default=DEFAULT_RECIPES)
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--json", help="Also write every run's figures to this file.")
    parser.add_argument("overrides", nargs="*", help="key=value overrides passed to every run")
    args = parser.parse_args(argv)
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for recipe in args.recipes:
            for seed in args.seeds:
                res = run_one(recipe, seed, Path(tmp), args.overrides)
                print(json.dumps(res), flush=True)
                results.append(res)
    print(f"\nplatform: {platform.platform()}, {platform.processor() or platform.machine()}, "
          f"python {platform.python_version()}")
    print(summarise(results))
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    return 1 if any("error" in r for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
