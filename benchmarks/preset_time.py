"""How long a recipe's preset takes, run as a user runs it: the command, a fresh output folder, wall time.

    python benchmarks/preset_time.py                                 # the gsm8k smollm2 preset, once
    python benchmarks/preset_time.py --recipe json_extract --runs 2
    python benchmarks/preset_time.py --preset smoke                  # any preset of the recipe

It runs ``python -m unsloth_grpo.recipes.RECIPE --preset PRESET --output-dir TMP`` in a child process
(the model already fetched: its first use adds about a minute of download and conversion, not
counted here; the first run fetches it before timing when it is missing), and prints for each run the
wall time, the machine's load average before and after (another job on the machine slows a 2-core
run several times over: read the load before the figure), the CPU count, ``OMP_NUM_THREADS``, and the
run's own last line (its held-out figures). It does not show the time on a GPU, nor how the time
splits between the stages (the run's log says that).
"""

from __future__ import annotations

import argparse
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _fetch(recipe: str, preset: str) -> None:
    """Make sure the preset's model is on disk, so the timing does not include its first download."""
    sys.path.insert(0, str(REPO))
    import importlib

    cfg = importlib.import_module(f"unsloth_grpo.recipes.{recipe}").RECIPE.resolve(preset=preset)
    if cfg.model.name.startswith("builtin:"):
        from unsloth_grpo.models.ref import model_ref

        model_ref(cfg.model.name).path()


def time_once(recipe: str, preset: str, extra: list[str]) -> dict:
    with tempfile.TemporaryDirectory(prefix="preset-time-") as tmp:
        cmd = [sys.executable, "-m", f"unsloth_grpo.recipes.{recipe}", "--preset", preset, "--output-dir",
               str(Path(tmp) / "run"), *extra]
        load_before = os.getloadavg()[0]
        t0 = time.perf_counter()
        proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True)
        wall = time.perf_counter() - t0
        lines = [x for x in proc.stdout.splitlines() if x.strip()]
        return {"wall_s": wall, "code": proc.returncode, "load_before": load_before,
                "load_after": os.getloadavg()[0], "last_line": lines[-1] if lines else "",
                "error": proc.stderr[-2000:] if proc.returncode else ""}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--recipe", default="gsm8k")
    p.add_argument("--preset", default="smollm2")
    p.add_argument("--runs", type=int, default=1, help="Runs in a row (each from a fresh output folder).")
    p.add_argument("overrides", nargs="*", metavar="KEY=VALUE", help="Overrides passed to the recipe.")
    args = p.parse_args(argv)
    _fetch(args.recipe, args.preset)
    print(f"python -m unsloth_grpo.recipes.{args.recipe} --preset {args.preset} {' '.join(args.overrides)}".rstrip())
    print(f"{platform.machine()}, {os.cpu_count()} CPUs, OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', 'unset')}, "
          f"python {platform.python_version()}")
    worst = 0
    for i in range(args.runs):
        r = time_once(args.recipe, args.preset, args.overrides)
        print(f"run {i + 1}: {r['wall_s'] / 60:.1f} min ({r['wall_s']:.0f} s), exit {r['code']}, load average "
              f"{r['load_before']:.1f} before, {r['load_after']:.1f} after; last line: {r['last_line']}")
        if r["code"]:
            print(r["error"], file=sys.stderr)
        worst = max(worst, r["code"])
    return worst


if __name__ == "__main__":
    sys.exit(main())
