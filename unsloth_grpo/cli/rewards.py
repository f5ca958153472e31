"""``unsloth-grpo rewards``: check a recipe's rewards on sample completions before training; list them.

    unsloth-grpo rewards check --config recipes/gsm8k.yaml --completions samples.jsonl
    unsloth-grpo rewards check --config recipes/gsm8k.yaml --model builtin:tiny --dataset synthetic
    unsloth-grpo rewards list --markdown

The completions come from a JSONL file or are generated here by the untrained model (plain
generation, or the tool loop when the recipe offers tools); the scoring and the report are the
reward lab's (:mod:`unsloth_grpo.rewards.lab`).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Callable, Sequence

from unsloth_grpo.cli.arguments import in_range
from unsloth_grpo.rewards import lab
from unsloth_grpo.rewards.lab import LabError, analyse, print_report, read_completions, write_completions
from unsloth_grpo.runs import output_problem


# ---------------------------------------------------------------- generation


def generate_records(
    model: str,
    cfg,
    *,
    num_generations: int,
    limit: int,
    max_new_tokens: int,
    temperature: float,
    seed: int,
    batch_size: int,
    log: Callable[[str], None] = print,
) -> tuple[list[dict], float]:
    """Sample ``num_generations`` completions for each of the first ``limit`` prompts of the
    recipe's dataset with the untrained model. Returns the records and ms per completion."""
    from unsloth_grpo.data import DataError
    from unsloth_grpo.evaluation.generation import generate
    from unsloth_grpo.hardware.backend import load_for_inference
    from unsloth_grpo.tasks import get_task

    try:
        ds = get_task(cfg.task).load(cfg)
    except DataError as exc:
        raise LabError(f"{exc} -- {OFFLINE_HINT}") from None
    ds = ds.select(range(min(limit, len(ds))))
    rows = [dict(r) for r in ds]
    if not rows:
        raise LabError(f"the dataset '{cfg.data.source}' gave no rows to generate from")
    loaded = load_for_inference(model, log=log)
    prompts = [r["prompt"] for r in rows]
    if cfg.tools.functions or cfg.tools.environment:
        return _generate_transcripts(loaded, cfg, rows, num_generations=num_generations,
                                     max_new_tokens=max_new_tokens, temperature=temperature, seed=seed,
                                     batch_size=batch_size)
    start = time.perf_counter()
    outs = generate(
        loaded.model, loaded.tokenizer, prompts,
        max_new_tokens=max_new_tokens, num_samples=num_generations,
        temperature=temperature, seed=seed, batch_size=batch_size,
    )
    took = time.perf_counter() - start
    records = []
    for i, (row, samples) in enumerate(zip(rows, outs)):
        columns = {k: v for k, v in row.items() if k != "prompt"}
        for text in samples:
            # generate() returns text; re-encoding it gives the token count rewards need
            ids = loaded.tokenizer(text, add_special_tokens=False)["input_ids"]
            records.append({"group": i, "prompt": row["prompt"], "completion": text, "completion_ids": ids, **columns})
    return records, 1000.0 * took / max(len(records), 1)


def _generate_transcripts(loaded, cfg, rows: list[dict], *, num_generations: int, max_new_tokens: int,
                          temperature: float, seed: int, batch_size: int) -> tuple[list[dict], float]:
    """With tools configured: each completion is the whole exchange (model turn, call, tool
    result, next turn), produced by the tool loop evaluation uses, so the rewards see what
    they will see in training."""
    from unsloth_grpo.evaluation.tool_eval import run_tool_loop
    from unsloth_grpo.tools import build_tools

    tools = build_tools(cfg.tools)
    repeated = [row for row in rows for _ in range(num_generations)]
    start = time.perf_counter()
    transcripts = run_tool_loop(loaded.model, loaded.tokenizer, [r["prompt"] for r in repeated],
                                tools=tools.get("tools", ()), environment_factory=tools.get("environment_factory"),
                                rows=repeated, max_rounds=cfg.tools.max_tool_calling_iterations,
                                max_new_tokens=max_new_tokens, batch_size=batch_size,
                                temperature=max(temperature, 1e-5), seed=seed)
    took = time.perf_counter() - start
    records = [{"group": i // num_generations, "prompt": row["prompt"], "completion": messages,
                **{k: v for k, v in row.items() if k != "prompt"}}
               for i, (row, messages) in enumerate(zip(repeated, transcripts))]
    return records, 1000.0 * took / max(len(records), 1)


def print_transcripts(records: Sequence[dict], limit: int = 2, console=None) -> None:
    """Show the first tool exchanges whole: model turn, tool call, tool result, next turn."""
    from rich.console import Console
    from rich.markup import escape

    from unsloth_grpo.tools import transcript

    console = console or Console(width=160)
    shown = [r for r in records if isinstance(r.get("completion"), list)
             and transcript.has_tool_turns([r["completion"]])][:limit]
    for r in shown:
        console.print(f"[bold]transcript[/] (group {r.get('group', '?')}):")
        console.print(escape(transcript.render(r["completion"])), highlight=False)


# ---------------------------------------------------------------- CLI


def add_parser(subparsers) -> None:
    p = subparsers.add_parser("rewards", help="Reward lab: check a recipe's rewards before training; list them.")
    actions = p.add_subparsers(dest="rewards_action", metavar="ACTION")
    c = actions.add_parser(
        "check",
        help="Score sample completions (a JSONL file, or generated by the untrained model) with the recipe's rewards.",
        description=lab.__doc__.split("\n\n")[0],
    )
    c.add_argument("--config", help="Recipe YAML: its rewards, model and data are used.")
    c.add_argument("--reward", action="append", default=[], metavar="NAME",
                   help="A reward to check (repeatable); replaces the recipe's list. Built-in names or pkg.module:function.")
    src = c.add_mutually_exclusive_group()
    src.add_argument("--completions", metavar="FILE.jsonl", help="Completions to score (format: see the module docs).")
    src.add_argument("--model", help="Generate with this model instead (path, adapter dir, hub id, builtin:tiny).")
    c.add_argument("--dataset", help="Data source for generation (overrides the recipe's data.source).")
    c.add_argument("--split", help="Dataset split for generation (overrides data.split).")
    c.add_argument("--num-generations", help="Completions per prompt (default: the recipe's).",
                   type=in_range(int, 2, None, "completions per prompt", "8",
                                 why="GRPO compares the completions of a group"))
    c.add_argument("--limit", type=in_range(int, 1, None, "prompts to generate for", "8"), default=8,
                   help="Prompts to generate for (default 8).")
    c.add_argument("--max-new-tokens", type=in_range(int, 1, None, "tokens in a completion", "256"),
                   help="Default: the recipe's training.max_completion_length.")
    c.add_argument("--temperature", type=float, help="Default: the recipe's training.temperature.")
    c.add_argument("--batch-size", type=in_range(int, 1, None, "sequences generated together", "16"), default=16,
                   help="Sequences generated together (default 16).")
    c.add_argument("--seed", type=int, help="Sampling seed (default: the recipe's).")
    c.add_argument("--save-completions", metavar="FILE.jsonl", help="Write the scored completions here.")
    c.add_argument("--json", metavar="FILE", help="Also write the report as JSON.")
    c.add_argument("--force", action="store_true",
                   help="Replace a --save-completions or --json file that exists (never one inside a run).")
    c.add_argument("--strict", action="store_true", help="Exit non-zero on warnings too.")
    c.set_defaults(func=run)
    lst = actions.add_parser("list", help="List the built-in rewards.")
    lst.add_argument("--markdown", action="store_true", help="As the README's Markdown table.")
    lst.set_defaults(func=run)
    p.set_defaults(func=run, rewards_action=None)


def _load_cfg(args):
    from unsloth_grpo.config import ConfigError, load_config

    overrides = []
    if getattr(args, "dataset", None):
        overrides.append(f"data.source={args.dataset}")
    if getattr(args, "split", None):
        overrides.append(f"data.split={args.split}")
    try:
        return load_config(args.config, overrides=overrides)
    except ConfigError as exc:
        raise LabError(str(exc)) from None


def run(args: argparse.Namespace) -> int:
    action = getattr(args, "rewards_action", None)
    if action == "list":
        import unsloth_grpo.tasks  # noqa: F401 - the tasks' rewards are listed through the task registry
        from unsloth_grpo.rewards import available_rewards, catalogue_markdown

        print(catalogue_markdown() if args.markdown else "\n".join(available_rewards()), end="\n" if not args.markdown else "")
        return 0
    if action != "check":
        print("usage: unsloth-grpo rewards {check,list} ...  (see unsloth-grpo rewards check --help)", file=sys.stderr)
        return 2
    from unsloth_grpo.data import DataError

    try:
        return _check(args)
    except (LabError, DataError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


#: What to do when the recipe's model or data cannot be had here (no network, no GPU).
OFFLINE_HINT = ("To try the rewards offline, generate with the smoke preset's model and data: add --model "
                "builtin:tiny --dataset synthetic (or --dataset FILE.jsonl for your own rows); or score completions "
                "you already have with --completions FILE.jsonl")


def _check_model_here(cfg, model: str) -> None:
    """Refuse at once, with the way out, a model that cannot be loaded on this machine: a missing
    path, or a hub id neither cached nor downloadable (offline). Said in a second instead of after
    the hub's retries and a traceback."""
    import dataclasses

    from unsloth_grpo.hardware.doctor.recipe import recipe_problems

    # only whether the model can be had: the lab picks the device itself
    probe = dataclasses.replace(cfg, model=dataclasses.replace(cfg.model, name=model, device="cpu"))
    blocking = [p for p in recipe_problems(probe) if p.blocking and p.topic != "output"]  # the lab trains nothing
    if blocking:
        why = "; ".join(f"{p.message} ({p.fix})" if getattr(p, "fix", None) else p.message for p in blocking)
        raise LabError(f"cannot generate with model '{model}' here: {why}. {OFFLINE_HINT}")


def _check(args: argparse.Namespace) -> int:
    import unsloth_grpo.tasks  # noqa: F401 - the task registry, through which a task's reward name is found
    from unsloth_grpo.rewards import build_reward_functions

    if not args.completions and not args.model and not args.config:
        raise LabError("give --completions FILE.jsonl, or --model (or a --config whose model generates)")
    for flag, target in (("--save-completions", args.save_completions), ("--json", args.json)):
        problem = output_problem(target, flag, file=True, force=args.force) if target else None
        if problem is not None:  # said before anything is generated
            raise LabError(problem)
    cfg = _load_cfg(args)
    specs = args.reward or cfg.rewards
    if not specs:
        from unsloth_grpo.tasks import get_task

        specs = get_task(cfg.task).default_rewards
    try:
        funcs, weights = build_reward_functions(specs)
    except (ValueError, ImportError) as exc:
        raise LabError(str(exc)) from None

    gen_ms = None
    if args.completions:
        records = read_completions(args.completions)
    else:
        model = args.model or cfg.model.name
        _check_model_here(cfg, model)
        t = cfg.training
        records, gen_ms = generate_records(
            model, cfg,
            num_generations=args.num_generations or t.num_generations,
            limit=args.limit,
            max_new_tokens=args.max_new_tokens or t.max_completion_length,
            temperature=t.temperature if args.temperature is None else args.temperature,
            seed=cfg.seed if args.seed is None else args.seed,
            batch_size=args.batch_size,
        )
    if args.save_completions:
        write_completions(records, args.save_completions)
    report = analyse(records, funcs, weights, generation_ms_per_completion=gen_ms)
    print_transcripts(records)
    print_report(report)
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(report.to_dict(), indent=2))
    if report.blocking or (args.strict and report.warnings):
        return 1
    return 0
