"""GRPO on a real pretrained model, offline: held-out accuracy of SmolLM2-135M-Instruct before and after.

    python benchmarks/real_model.py                                  # seeds 0 1 2, base vs GRPO vs control
    python benchmarks/real_model.py --seeds 0 --held-out 32          # one seed, a smaller held-out set
    python benchmarks/real_model.py training.max_steps=20 training.learning_rate=1e-4   # recipe overrides

The gsm8k recipe's ``smollm2`` preset (``builtin:smollm2-135m-instruct``, LoRA, CPU) trains on the
offline generator's GSM8K-style word problems. For each seed the model is loaded once and graded
greedily on the same held-out problems (generated with their own seed, none of them among the
training rows), then two arms are trained from that same start and graded again:

- ``grpo``: the preset as configured (a reward per answer tag, and correctness from the task's grader);
- ``shuffled``: the same run with the gold answers permuted across the training prompts, so the
  correctness reward no longer says whether *this* answer is right (the format reward is unchanged).

Each grading reports strict accuracy (the right number in the answer block: the task's grader,
the one its reward pays on), lenient accuracy (the right number anywhere, as lm-evaluation-harness's
flexible-extract reads GSM8K), format compliance (``<reasoning>`` then ``<answer>`` and nothing
else) and the share of completions with an answer block. It prints one table per seed and the
mean over seeds, the wall time and the platform, and writes ``results.json`` to ``--out``.
docs/real_model.md has the figures and the command that made them.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from unsloth_grpo.config import ConfigError, RecipeConfig  # noqa: E402
from unsloth_grpo.recipes.gsm8k import RECIPE  # noqa: E402

ARMS = ("grpo", "shuffled")
LABELS = {"base": "base model (start)", "grpo": "after GRPO", "shuffled": "after shuffled-gold GRPO (control)"}
#: The held-out problems' generator seed: far from any training seed, the same for every seed's run.
HELD_OUT_SEED = 10_000


def held_out_rows(cfg: RecipeConfig, n: int):
    """``n`` held-out problems from the generator with their own seed, in the preset's prompt."""
    from unsloth_grpo.tasks.gsm8k import load_gsm8k

    return load_gsm8k("synthetic", "test", subset=cfg.data.subset, system_prompt=cfg.data.system_prompt,
                      num_synthetic=n, seed=HELD_OUT_SEED)


def training_rows(cfg: RecipeConfig, held_out):
    """The preset's training rows without any problem that is also held out."""
    from unsloth_grpo.training.train import load_task_dataset

    rows = load_task_dataset(cfg)
    held = {p[-1]["content"] for p in held_out["prompt"]}
    keep = [i for i, p in enumerate(rows["prompt"]) if p[-1]["content"] not in held]
    return rows.select(keep)


def grade(cfg: RecipeConfig, loaded, held_out) -> dict:
    """Greedy strict and lenient accuracy, format compliance and answer-block use on ``held_out``."""
    from unsloth_grpo.grading import extract_answer
    from unsloth_grpo.tasks import get_task

    e = cfg.evaluation
    t0 = time.perf_counter()
    # graded as the preset's correctness reward grades (the task's grader), with the task's lenient reading
    result = get_task(cfg.task).evaluate(loaded.model, loaded.tokenizer, held_out, cfg,
                                         max_new_tokens=cfg.training.max_completion_length,
                                         batch_size=e.batch_size, seed=cfg.seed)
    records = result["records"]
    return {"accuracy": result["accuracy"], "lenient_accuracy": result["lenient_accuracy"],
            "format_compliance": result["format_compliance"],
            "answer_block": sum(extract_answer(r["completion"]) is not None for r in records) / len(records),
            "n": result["n"], "mean_completion_tokens": result["mean_completion_tokens"],
            "eval_seconds": round(time.perf_counter() - t0, 1),
            "examples": [r["completion"] for r in records[:4]]}


def run_seed(cfg: RecipeConfig, n_held_out: int, arms: tuple[str, ...], log=print) -> dict:
    """Base, then each arm trained from the same start, graded on the same held-out problems."""
    from peft import set_peft_model_state_dict

    from unsloth_grpo.hardware.backend import load_model, prepare_backend
    from unsloth_grpo.experiments.controls import shuffled_gold
    from unsloth_grpo.training.stages import lora_state
    from unsloth_grpo.training.train import train

    held_out = held_out_rows(cfg, n_held_out)
    rows = training_rows(cfg, held_out)
    decision = prepare_backend(cfg.model)  # decided once; Unsloth is imported first when it is the backend
    loaded = load_model(cfg.model, cfg.lora, seed=cfg.seed, gradient_checkpointing=cfg.training.gradient_checkpointing,
                        log=log, decision=decision)
    out = {"seed": cfg.seed, "grades": {"base": grade(cfg, loaded, held_out)}, "seconds": {}, "train_reward": {}}
    log(f"seed {cfg.seed} base: {_line(out['grades']['base'])}")
    start = lora_state(loaded.model)  # LoRA's B matrices start at zero: this is the base model
    quiet = lambda _m: None  # noqa: E731 - the runs' own logs are long; one line per arm is printed
    for arm in arms:
        set_peft_model_state_dict(loaded.model, start)
        arm_rows = shuffled_gold(rows, seed=cfg.seed) if arm == "shuffled" else rows
        arm_cfg = dataclasses.replace(cfg, output_dir=str(Path(cfg.output_dir) / arm))
        t0 = time.perf_counter()
        result = train(arm_cfg, loaded=loaded, dataset=arm_rows, log=quiet)
        out["seconds"][arm] = round(time.perf_counter() - t0, 1)
        out["train_reward"][arm] = [result.mean_reward(first=5), result.mean_reward(last=5)]
        out["grades"][arm] = grade(cfg, loaded, held_out)
        log(f"seed {cfg.seed} {arm}: {_line(out['grades'][arm])}; train reward "
            f"{out['train_reward'][arm][0]:.3f} -> {out['train_reward'][arm][1]:.3f} ({out['seconds'][arm]:.0f}s)")
    return out


def _line(g: dict) -> str:
    return (f"strict {100 * g['accuracy']:.1f}%, lenient {100 * g['lenient_accuracy']:.1f}%, "
            f"format {100 * g['format_compliance']:.1f}%, answer block {100 * g['answer_block']:.1f}%")


def table(runs: list[dict]) -> str:
    """Per seed and on average: strict, lenient, format, answer block, and strict's change from the base."""
    arms = [a for a in ("base", *ARMS) if all(a in r["grades"] for r in runs)]
    lines = [f"{'':36s} {'seed':>4s} {'strict':>7s} {'vs base':>8s} {'lenient':>8s} {'format':>7s} "
             f"{'answer':>7s} {'train s':>8s}"]
    for arm in arms:
        for r in runs:
            g, base = r["grades"][arm], r["grades"]["base"]
            delta = "" if arm == "base" else f"{100 * (g['accuracy'] - base['accuracy']):+7.1f}"
            lines.append(f"{LABELS[arm]:36s} {r['seed']:4d} {100 * g['accuracy']:6.1f}% {delta:>8s} "
                         f"{100 * g['lenient_accuracy']:7.1f}% {100 * g['format_compliance']:6.1f}% "
                         f"{100 * g['answer_block']:6.1f}% {r['seconds'].get(arm, 0):8.0f}")
        mean = {k: statistics.fmean(r["grades"][arm][k] for r in runs)
                for k in ("accuracy", "lenient_accuracy", "format_compliance", "answer_block")}
        base_mean = statistics.fmean(r["grades"]["base"]["accuracy"] for r in runs)
        delta = "" if arm == "base" else f"{100 * (mean['accuracy'] - base_mean):+7.1f}"
        lines.append(f"{LABELS[arm] + ' (mean)':36s} {'':4s} {100 * mean['accuracy']:6.1f}% {delta:>8s} "
                     f"{100 * mean['lenient_accuracy']:7.1f}% {100 * mean['format_compliance']:6.1f}% "
                     f"{100 * mean['answer_block']:6.1f}%")
    return "\n".join(lines)


def goal(runs: list[dict]) -> list[str]:
    """The issue's goal, seed by seed: strict >= base + 20 points, lenient not below the base, above the control."""
    lines = []
    for r in runs:
        g, base, ctl = r["grades"].get("grpo"), r["grades"]["base"], r["grades"].get("shuffled")
        if g is None:
            continue
        checks = [("strict >= base + 20 points", g["accuracy"] - base["accuracy"] >= 0.20 - 1e-9),
                  ("lenient >= base", g["lenient_accuracy"] >= base["lenient_accuracy"])]
        if ctl is not None:
            checks.append(("strict above the shuffled control", g["accuracy"] > ctl["accuracy"]))
        lines.append(f"seed {r['seed']}: " + ", ".join(f"{name}: {'yes' if ok else 'NO'}" for name, ok in checks))
    return lines


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2], help="Seeds to run (3 for the claim).")
    p.add_argument("--held-out", type=int, default=64, help="Held-out problems graded per model (default 64).")
    p.add_argument("--arms", nargs="+", choices=ARMS, default=list(ARMS), help="Arms trained from each start.")
    p.add_argument("--out", default="outputs/real-model", help="Where results.json and the runs go.")
    p.add_argument("overrides", nargs="*", metavar="KEY=VALUE", help="Overrides of the gsm8k smollm2 preset.")
    args = p.parse_args(argv)
    out = Path(args.out)
    try:
        cfgs = [RECIPE.resolve(preset="smollm2", output_dir=str(out / f"seed{s}"),
                               overrides=[*args.overrides, f"seed={s}", "run.samples_every=0"]) for s in args.seeds]
        for cfg in cfgs:
            problems = cfg.problems()
            if problems:
                raise ConfigError("; ".join(problems))
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    start = time.time()
    runs = []
    for cfg in cfgs:
        runs.append(run_seed(cfg, args.held_out, tuple(args.arms)))
        (out / "results.partial.json").parent.mkdir(parents=True, exist_ok=True)
        (out / "results.partial.json").write_text(json.dumps({"runs": runs}, indent=2))
    wall = time.time() - start
    print()
    print(f"held-out: {args.held_out} GSM8K-style problems of the offline generator (seed {HELD_OUT_SEED}), greedy; "
          "strict: the number in the answer block; lenient: the right number anywhere")
    print(table(runs))
    for line in goal(runs):
        print(line)
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"total wall time {wall / 60:.1f} min on {platform.machine()} with {os.cpu_count()} CPUs "
          f"(load average {load:.1f} at the end), OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', 'unset')}, "
          f"python {platform.python_version()}")
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps({
        "seeds": args.seeds, "held_out": args.held_out, "held_out_seed": HELD_OUT_SEED, "runs": runs,
        "wall_seconds": round(wall, 1), "platform": platform.platform(), "cpus": os.cpu_count(),
        "overrides": args.overrides, "arms": args.arms,
    }, indent=2))
    (out / "results.partial.json").unlink(missing_ok=True)
    print(f"wrote {out / 'results.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
