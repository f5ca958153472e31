"""``unsloth-grpo eval`` and ``unsloth-grpo compare``: a model (or two) on a task's held-out problems.

    unsloth-grpo eval --model outputs/gsm8k/adapter --task gsm8k --dataset synthetic --output outputs/eval
    unsloth-grpo compare builtin:tiny outputs/smoke/adapter --dataset synthetic --output outputs/compare

The task's loader reads the problems and its grader (the one its correctness reward pays on)
grades them (:meth:`unsloth_grpo.tasks.Task.grading`); the work is
:mod:`unsloth_grpo.evaluation.evaluate`'s.
"""

from __future__ import annotations

import functools
import sys
import time
from pathlib import Path
from typing import Any, Callable

from unsloth_grpo.config import BACKENDS
from unsloth_grpo.evaluation.evaluate import EVAL_SAMPLES_FILE, compare, evaluate, write_eval, write_report


def _task_setup(args):
    """The task's held-out rows and what it grades them with (:meth:`~unsloth_grpo.tasks.Task.grading`:
    the grader its correctness reward uses, its lenient reading, its format check)."""
    from unsloth_grpo.cli.train import load_recipe
    from unsloth_grpo.config import load_config
    from unsloth_grpo.tasks import get_task

    recipe = load_recipe(args.task)
    data = {"source": args.dataset, "split": args.split, "limit": args.limit}
    cfg = load_config({"data": data, "seed": args.seed}, base=recipe.defaults)
    task = get_task(args.task)
    return task.load(cfg), task.grading(cfg)


def _load_model(path: str, backend: str, device: str):
    from unsloth_grpo.hardware.backend import load_for_inference

    return load_for_inference(path, backend=backend, device=device)


def _add_common(p) -> None:
    from unsloth_grpo.tasks import available_tasks

    p.add_argument("--task", default="gsm8k", choices=available_tasks(),
                   help="Task whose loader and grader to use (default: gsm8k).")
    p.add_argument("--dataset", required=True,
                   help="The task's data: a local .jsonl/.json/.csv/.parquet file, a hub id, or 'synthetic'.")
    p.add_argument("--split", default="test", help="Dataset split (hub datasets; default: test).")
    p.add_argument("--limit", type=int, default=None, help="Evaluate the first N problems.")
    p.add_argument("--samples", type=int, default=1, help="Completions sampled per problem for pass@k (K > 1).")
    p.add_argument("--batch-size", type=int, default=16, help="Sequences generated together.")
    p.add_argument("--max-new-tokens", type=int, default=256, help="Longest completion, in tokens.")
    p.add_argument("--temperature", type=float, default=0.7, help="Sampling temperature for pass@k samples.")
    p.add_argument("--top-p", type=float, default=1.0, help="Nucleus sampling for pass@k samples.")
    p.add_argument("--seed", type=int, default=0, help="Sampling seed (same for both models in compare).")
    p.add_argument("--backend", default="auto", choices=BACKENDS,
                   help="How to load the model ('auto': Unsloth on CUDA when installed).")
    p.add_argument("--device", default="auto", help="'auto', 'cuda' or 'cpu'.")
    p.add_argument("--output", required=True, help="Directory for the results.")


def _builtin_names() -> str:
    from unsloth_grpo.hardware.backend import BUILTIN_MODELS

    return ", ".join(BUILTIN_MODELS)


def add_parser(subparsers) -> None:
    """Registers ``eval`` and ``compare``."""
    p = subparsers.add_parser("eval", help="Evaluate a base model, LoRA adapter or merged model on held-out problems.")
    p.add_argument("--model", required=True,
                   help=f"Run or model directory, LoRA adapter directory, hub id, or a built-in model: {_builtin_names()}.")
    _add_common(p)
    p.set_defaults(func=run)

    c = subparsers.add_parser("compare", help="Evaluate two models on the same problems; report what changed.")
    c.add_argument("baseline", help=f"The model before training (base model, its path, or a built-in model: "
                                    f"{_builtin_names()}).")
    c.add_argument("trained", help="The model after training (adapter or merged directory).")
    _add_common(c)
    c.set_defaults(func=run_compare)


def _settings(args) -> dict[str, Any]:
    return dict(samples=args.samples, max_new_tokens=args.max_new_tokens, temperature=args.temperature,
                top_p=args.top_p, batch_size=args.batch_size, seed=args.seed, limit=args.limit)


def console_progress(label: str, *, every_s: float = 5.0, file=None) -> Callable[[str, int, int], None]:
    """A ``progress`` for :func:`evaluate` that prints ``label: greedy 32/100 completions`` lines:
    the first batch, then at most one line every ``every_s`` seconds, and the last one."""
    last = {"t": None}

    def report(phase: str, done: int, total: int) -> None:
        now = time.monotonic()
        if done < total and last["t"] is not None and now - last["t"] < every_s:
            return
        last["t"] = None if done >= total else now
        print(f"{label}: {phase} {done}/{total} completions", file=file or sys.stderr, flush=True)

    return report


def _eval_one(model_path: str, problems, grading: dict[str, Any], args) -> dict[str, Any]:
    loaded = _load_model(model_path, args.backend, args.device)
    result = evaluate(loaded.model, loaded.tokenizer, problems, **grading, **_settings(args),
                      progress=console_progress(f"eval {model_path}"))
    result["model"] = model_path
    result["dataset"] = args.dataset
    result["split"] = args.split
    return result


def _summary(result: dict[str, Any]) -> str:
    parts = [f"n={result['n']}", f"accuracy={result['accuracy']:.3f}"]
    if result.get("lenient_accuracy") is not None:
        parts.append(f"lenient={result['lenient_accuracy']:.3f}")
    parts.append(f"format={result['format_compliance']:.3f}")
    parts += [f"{k}={v:.3f}" for k, v in result.items() if k.startswith("pass@")]
    return " ".join(parts) + f" ({result['seconds']:.1f}s)"


def _user_errors() -> tuple[type[BaseException], ...]:
    from unsloth_grpo.hardware.backend import BackendError

    return (ValueError, BackendError, FileNotFoundError)  # DataError is a ValueError


def _reported(func):
    """Run a subcommand; a bad model path, dataset or setting prints its message and exits 2."""

    @functools.wraps(func)
    def wrapper(args) -> int:
        try:
            return func(args)
        except _user_errors() as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2

    return wrapper


def check_arguments(args, models: list[str]) -> None:
    """Refuse settings that cannot work before the data or any model is loaded: each message names
    the option and the fix (the same checks inside :func:`evaluate` would come after the load)."""
    from unsloth_grpo.hardware.backend import BackendError, local_model_problem

    wrong = []
    if args.limit is not None and args.limit < 1:
        wrong.append(f"--limit {args.limit}: evaluate at least 1 problem (leave --limit out for all of them)")
    for flag, value, what in (("--samples", args.samples, "completions per problem"),
                              ("--batch-size", args.batch_size, "sequences generated together"),
                              ("--max-new-tokens", args.max_new_tokens, "tokens in a completion")):
        if value < 1:
            wrong.append(f"{flag} {value}: needs at least 1 ({what})")
    if args.temperature < 0:
        wrong.append(f"--temperature {args.temperature}: use 0 (greedy) or a positive value")
    elif args.samples > 1 and args.temperature == 0:
        wrong.append(f"--samples {args.samples} with --temperature 0 gives {args.samples} identical greedy "
                     "completions; set --temperature > 0 (e.g. 0.7) for pass@k")
    if not 0 < args.top_p <= 1:
        wrong.append(f"--top-p {args.top_p}: use a value in (0, 1]")
    if wrong:
        raise ValueError("; ".join(wrong))
    for model in models:
        problem = local_model_problem(model)
        if problem is not None:
            raise BackendError(problem)


def _some_problems(problems, args) -> None:
    if len(problems) == 0:
        raise ValueError(f"--dataset {args.dataset} gives no problems to evaluate (split {args.split!r}); "
                         "check the file, --split and --limit")


@_reported
def run(args) -> int:
    check_arguments(args, [args.model])
    problems, grading = _task_setup(args)
    _some_problems(problems, args)
    result = _eval_one(args.model, problems, grading, args)
    path = write_eval(result, args.output)
    print(f"{args.model}: {_summary(result)}")
    print(f"wrote {path} and {Path(args.output) / EVAL_SAMPLES_FILE}")
    return 0


@_reported
def run_compare(args) -> int:
    check_arguments(args, [args.baseline, args.trained])
    problems, grading = _task_setup(args)
    _some_problems(problems, args)
    out = Path(args.output)
    results = {}
    for role, model_path in (("baseline", args.baseline), ("trained", args.trained)):
        results[role] = _eval_one(model_path, problems, grading, args)
        write_eval(results[role], out / role)
        print(f"{role} {model_path}: {_summary(results[role])}")
    report = compare(results["baseline"], results["trained"])
    md, js = write_report(report, out)
    print(f"fixed {len(report['fixed'])}, broken {len(report['broken'])}; wrote {md} and {js}")
    return 0
