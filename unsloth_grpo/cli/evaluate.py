"""``unsloth-grpo eval`` and ``unsloth-grpo compare``: a model (or two) on a task's held-out problems.

    unsloth-grpo eval --model outputs/smoke --output outputs/eval                   # a run, graded as it trained
    unsloth-grpo eval --model outputs/smoke --dataset problems.jsonl --output outputs/eval-file
    unsloth-grpo compare builtin:tiny outputs/smoke --output outputs/compare

A run directory (or one of its checkpoints) is graded as it was trained: its task, its system
prompt, its problem set (source, subset, the held-out split, seed) and its completion limit are read
from the run's ``config.yaml``; ``--task``, ``--system-prompt``, ``--dataset``, ``--subset``,
``--split``, ``--seed`` and ``--max-new-tokens`` override them one by one. A model that is not a
run (a hub id, a built-in model, a merged export) gets the task's defaults. The task's loader
reads the problems and its grader (the one its correctness reward pays on) grades them
(:meth:`unsloth_grpo.tasks.Task.grading`); accuracy is broken down by the rows' ``category``
column when they have one (``--by`` names another). The work is :mod:`unsloth_grpo.evaluation.evaluate`'s.
"""

from __future__ import annotations

import functools
import sys
import time
from pathlib import Path
from typing import Any, Callable

from unsloth_grpo.config import BACKENDS
from unsloth_grpo.data import has_splits
from unsloth_grpo.evaluation.evaluate import (
    EVAL_FILES,
    EVAL_SAMPLES_FILE,
    REPORT_FILES,
    category_warnings,
    compare,
    evaluate,
    write_eval,
    write_report,
)


def _run_config(args):
    """The run whose config grades this evaluation: the evaluated model's own (``compare``: the trained
    model's, else the baseline's), or ``(None, None)`` when none of them is a run."""
    from unsloth_grpo.config import load_config
    from unsloth_grpo.runs import run_config_path

    for model in (getattr(args, "model", None), getattr(args, "trained", None), getattr(args, "baseline", None)):
        path = run_config_path(model) if model else None
        if path is not None:
            return load_config(path), path
    return None, None


def _task_setup(args):
    """The task's held-out rows and what it grades them with (:meth:`~unsloth_grpo.tasks.Task.grading`:
    the grader its correctness reward uses, its lenient reading, its format check), with the settings
    of the run being evaluated unless a flag gives its own; fills in ``args`` with what was chosen."""
    from unsloth_grpo.cli.train import load_recipe
    from unsloth_grpo.config import config_to_dict, load_config
    from unsloth_grpo.data import MissingColumns
    from unsloth_grpo.tasks import get_task
    from unsloth_grpo.training.held_out import split_label

    run, where = _run_config(args)
    if run is not None and args.task is not None and args.task != run.task:
        run = None  # another task's problems: the run's prompt and data say nothing about them
    task_name = args.task or (run.task if run is not None else "gsm8k")
    base = config_to_dict(run) if run is not None else load_recipe(task_name).defaults
    dataset = args.dataset or ((run.evaluation.dataset or run.data.source) if run is not None else None)
    if dataset is None:
        raise ValueError("--dataset is needed: the model is not a run directory, so there is no problem set to "
                         "read from its config.yaml (give a .jsonl/.json/.csv/.parquet file, a hub id or 'synthetic')")
    # every problem of the set asked for: the run's data.categories chose what it trained on, not what is graded
    data: dict = {"source": dataset, "split": args.split or (run.evaluation.split if run is not None else "test"),
                  "limit": args.limit, "categories": None}
    training_file = run is not None and not has_splits(dataset) and not has_splits(run.data.source) and \
        Path(dataset).expanduser().resolve() == Path(run.data.source).expanduser().resolve()
    if training_file and data["split"] != "train":
        raise ValueError(f"{args.model} trained on {dataset}, one local file with no held-out split: split "
                         f"'{data['split']}' of it is every row the run trained on, not held-out problems. Pass "
                         "--dataset HELD_OUT_FILE (problems it did not train on, the same columns), or --split train "
                         "to grade its training rows as training rows")
    same_data = run is not None and dataset == run.data.source
    if args.subset is not None:
        data["subset"] = args.subset
    elif run is not None and not same_data:
        data["subset"] = None  # the run's subset names a part of its own source, not of this one
    if args.system_prompt is not None:
        data["system_prompt"] = args.system_prompt
    seed = args.seed if args.seed is not None else (run.seed if run is not None else 0)
    cfg = load_config({"data": data, "seed": seed}, base=base)
    if args.max_new_tokens is None:
        args.max_new_tokens = (run.evaluation.max_new_tokens or run.training.max_completion_length) \
            if run is not None else 256
    if args.temperature is None:  # K samples at the temperature GRPO sampled the run's groups at
        args.temperature = _grpo_temperature(run) if run is not None else 0.7
    args.seed, args.task, args.dataset = seed, task_name, dataset
    args.split = "train" if training_file else split_label(dataset, data["split"])
    if run is not None:
        prompt = "its own" if args.system_prompt is None else "--system-prompt"
        print(f"grading as the run was trained ({where}): task {task_name}, system prompt {prompt}, data {dataset}"
              + (f" (subset {cfg.data.subset})" if cfg.data.subset else "") + f", {_rows_in_words(args)}, "
              f"seed {seed}, completions of at most {args.max_new_tokens} tokens; flags override each", file=sys.stderr)
        trained = [s.data.get("categories", run.data.categories) for s in run.stages] or [run.data.categories]
        if all(trained):  # every training of the run kept some kinds only
            kinds = ", ".join(sorted({str(k) for ks in trained for k in ks}))
            print(f"note: the run trained on the kinds {kinds} only (data.categories); every problem is graded, "
                  "and the accuracy by kind shows them apart", file=sys.stderr)
    task = get_task(task_name)
    args.system_prompt_used = task.system_prompt if cfg.data.system_prompt is None else cfg.data.system_prompt
    try:
        rows = task.load(cfg)
    except MissingColumns as exc:  # eval has no option naming the columns: the file's names must change
        raise exc.with_fix(f"Rename the file's columns to {cfg.data.question_column} and {cfg.data.answer_column} "
                           "(eval reads the columns that the run's config.yaml names, else the task's)") from None
    return rows, task.grading(cfg)


def _rows_in_words(args) -> str:
    """Which rows of ``--dataset`` are graded, for the messages: its split, or the whole file."""
    if args.split is None:
        return "every row of the file (a local file has no splits)"
    if not has_splits(args.dataset):  # --split train on the run's own training file
        return "split train (every row of the file the run trained on)"
    return f"split {args.split}"


def _grpo_temperature(run) -> float:
    """The temperature a run's GRPO sampled at: its last GRPO stage's own, else its training.temperature."""
    stages = [s.training["temperature"] for s in run.stages if s.kind == "grpo" and "temperature" in s.training]
    return float(stages[-1] if stages else run.training.temperature)


def _load_model(path: str, backend: str, device: str):
    from unsloth_grpo.hardware.backend import load_for_inference

    return load_for_inference(path, backend=backend, device=device)


def _add_common(p) -> None:
    from unsloth_grpo.tasks import available_tasks
    from unsloth_grpo.tasks.gsm8k import HELD_OUT_SUBSETS, SYNTHETIC_SUBSETS

    p.add_argument("--task", default=None, choices=available_tasks(),
                   help="Task whose loader and grader to use (default: the run's, else gsm8k).")
    p.add_argument("--dataset", default=None,
                   help="The task's data: a local .jsonl/.json/.csv/.parquet file, a hub id, or 'synthetic' "
                        "(default: the run's own data source; needed when the model is not a run).")
    p.add_argument("--subset", default=None,
                   help=f"Subset of the data: a hub config, or one of gsm8k's offline sets ({', '.join(SYNTHETIC_SUBSETS)}; "
                        f"{' and '.join(HELD_OUT_SUBSETS)} are phrasings no training set uses) (default: the run's, "
                        "when the data is the run's own).")
    p.add_argument("--system-prompt", default=None,
                   help="System prompt to ask with (default: the run's, else the task's).")
    p.add_argument("--split", default=None, help="Dataset split (default: the run's evaluation split, else test).")
    p.add_argument("--limit", type=int, default=None, help="Evaluate the first N problems.")
    p.add_argument("--samples", type=int, default=1, help="Completions sampled per problem for pass@k (K > 1).")
    p.add_argument("--batch-size", type=int, default=16, help="Sequences generated together.")
    p.add_argument("--max-new-tokens", type=int, default=None,
                   help="Longest completion, in tokens (default: the run's completion limit, else 256).")
    p.add_argument("--temperature", type=float, default=None,
                   help="Sampling temperature for pass@k samples (default: a run's GRPO temperature, else 0.7).")
    p.add_argument("--top-p", type=float, default=1.0, help="Nucleus sampling for pass@k samples.")
    p.add_argument("--seed", type=int, default=None,
                   help="Sampling seed, and the offline generator's (default: the run's, else 0; the same for both "
                        "models in compare).")
    p.add_argument("--by", default="category",
                   help="Column of the data that says each problem's kind; accuracy is broken down by it "
                        "(default: category, which the offline sets have).")
    p.add_argument("--backend", default="auto", choices=BACKENDS,
                   help="How to load the model ('auto': Unsloth on CUDA when installed).")
    p.add_argument("--device", default="auto", help="'auto', 'cuda' or 'cpu'.")
    p.add_argument("--output", required=True, help="Directory for the results.")
    p.add_argument("--force", action="store_true",
                   help="Replace results an earlier evaluation left in --output (never a run's own files).")


def _builtin_names() -> str:
    from unsloth_grpo.models.ref import BUILTIN_MODELS

    return ", ".join(BUILTIN_MODELS)


def add_parser(subparsers) -> None:
    """Registers ``eval`` and ``compare``."""
    p = subparsers.add_parser("eval", help="Evaluate a base model, LoRA adapter or merged model on held-out problems.")
    p.add_argument("--model", required=True,
                   help="A run directory (graded with its own prompt and data), a checkpoint, an adapter or merged "
                        f"directory, a hub id, or a built-in model: {_builtin_names()}.")
    _add_common(p)
    p.add_argument("--lm-eval-task", default=None, metavar="DIR",
                   help="Also write these problems as an lm-evaluation-harness task in DIR (the task file, the "
                        "problems, the system prompt and the lm_eval command), to check the figures with lm-eval.")
    p.set_defaults(func=run)

    c = subparsers.add_parser("compare", help="Evaluate two models on the same problems; report what changed.")
    c.add_argument("baseline", help=f"The model before training (base model, its path, or a built-in model: "
                                    f"{_builtin_names()}).")
    c.add_argument("trained", help="The model after training (adapter or merged directory).")
    _add_common(c)
    c.set_defaults(func=run_compare)


def _settings(args) -> dict[str, Any]:
    return dict(samples=args.samples, max_new_tokens=args.max_new_tokens, temperature=args.temperature,
                top_p=args.top_p, batch_size=args.batch_size, seed=args.seed, limit=args.limit, by=args.by)


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


def _harness_rows(problems, args) -> list[dict] | None:
    """With ``--lm-eval-task``, the problems with each gold as the number lm-eval's filters compare with;
    a task whose grade is not that number is refused here, before any model loads (its lm-eval task would
    grade against the task's encoded gold and say nothing true)."""
    if not getattr(args, "lm_eval_task", None):
        return None
    from unsloth_grpo.tasks import get_task

    task = get_task(args.task)
    limit = len(problems) if args.limit is None else min(args.limit, len(problems))
    rows = []
    for i in range(limit):
        row = dict(problems[i])
        gold = task.harness_answer(row)
        if gold is None:
            raise ValueError(f"--lm-eval-task: the {args.task} task's problem {i} has the gold "
                             f"{str(row['answer'])[:80]!r}, which is not a number that lm-eval's filters read "
                             "(they compare the number in the answer block); its grade cannot be checked there. "
                             "Leave --lm-eval-task out, or use it on a task whose answers are numbers (gsm8k; "
                             "reasoning_gym datasets with numeric answers, such as chain_sum or products)")
        rows.append({**row, "answer": gold})
    return rows


def _eval_one(model_path: str, problems, grading: dict[str, Any], args) -> dict[str, Any]:
    harness_rows = _harness_rows(problems, args)
    loaded = _load_model(model_path, args.backend, args.device)
    if harness_rows is not None:
        from unsloth_grpo.evaluation import harness

        task_file = harness.write_task(harness_rows, args.lm_eval_task,
                                       system_prompt=args.system_prompt_used, max_new_tokens=args.max_new_tokens,
                                       stops=harness.stop_strings(loaded.tokenizer))
        print(f"wrote the lm-eval task {task_file}; after `unsloth-grpo export --model {model_path} --merged "
              f"MERGED_DIR`, run {Path(args.lm_eval_task) / harness.COMMAND_FILE} with MERGED_DIR filled in",
              file=sys.stderr)
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
    text = " ".join(parts) + f" ({result['seconds']:.1f}s)"
    for name, c in (result.get("by_category") or {}).items():
        lenient = "" if c.get("lenient_accuracy") is None else f" lenient={c['lenient_accuracy']:.3f}"
        copied = f" copied={c['copied_quantity']}" if c.get("copied_quantity") else ""
        text += f"\n  {name}: n={c['n']} accuracy={c['accuracy']:.3f}{lenient}{copied}"
    return text + copied_note(result)


def copied_note(result: dict[str, Any]) -> str:
    """A line under the summary when wrong answers only repeat a number of the question, with one of them."""
    copies = [r for r in result.get("records") or [] if r.get("copied_quantity")]
    if not copies:
        return ""
    first = copies[0]
    return (f"\nnote: {len(copies)} wrong answer(s) of {result['n']} are a number the question states, worked out "
            f"from nothing (e.g. {' '.join(first['completion'].split())[:80]!r}: the question's "
            f"{first['copied_quantity']}, right: {first['gold']}). A model that learned a shortcut answers so on "
            "wordings it did not train on; docs/monitor.md (copies_quantity) says what to change.")


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
    from unsloth_grpo.models.ref import BackendError, model_ref

    wrong = []
    if args.limit is not None and args.limit < 1:
        wrong.append(f"--limit {args.limit}: evaluate at least 1 problem (leave --limit out for all of them)")
    for flag, value, what in (("--samples", args.samples, "completions per problem"),
                              ("--batch-size", args.batch_size, "sequences generated together"),
                              ("--max-new-tokens", args.max_new_tokens, "tokens in a completion")):
        if value is not None and value < 1:  # --max-new-tokens left out: the run's limit
            wrong.append(f"{flag} {value}: needs at least 1 ({what})")
    if args.temperature is not None and args.temperature < 0:
        wrong.append(f"--temperature {args.temperature}: use 0 (greedy) or a positive value")
    elif args.samples > 1 and args.temperature == 0:
        wrong.append(f"--samples {args.samples} with --temperature 0 gives {args.samples} identical greedy "
                     "completions; set --temperature > 0 (e.g. 0.7) for pass@k")
    if not 0 < args.top_p <= 1:
        wrong.append(f"--top-p {args.top_p}: use a value in (0, 1]")
    if wrong:
        raise ValueError("; ".join(wrong))
    _check_outputs(args, models)
    for model in models:
        problem = model_ref(model).local_problem()
        if problem is not None:
            raise BackendError(problem)


def _check_outputs(args, models: list[str]) -> None:
    """Refuse, before anything loads, an --output (or --lm-eval-task) where the results would replace
    files of a run or, without --force, files that are there already (:func:`unsloth_grpo.runs.output_problem`)."""
    from unsloth_grpo.evaluation.harness import TASK_FILES
    from unsloth_grpo.runs import output_problem

    writes = list(EVAL_FILES) if len(models) == 1 else \
        [f"{role}/{name}" for role in ("baseline", "trained") for name in EVAL_FILES] + list(REPORT_FILES)
    targets = [("--output", args.output, writes)]
    if getattr(args, "lm_eval_task", None):
        targets.append(("--lm-eval-task", args.lm_eval_task, list(TASK_FILES)))
    for flag, target, names in targets:
        problem = output_problem(target, flag, writes=names, force=args.force)
        if problem is not None:
            raise ValueError(problem)


def _some_problems(problems, args) -> None:
    if len(problems) == 0:
        raise ValueError(f"--dataset {args.dataset} gives no problems to evaluate ({_rows_in_words(args)}); "
                         "check the file, --split and --limit")


@_reported
def run(args) -> int:
    check_arguments(args, [args.model])
    problems, grading = _task_setup(args)
    _some_problems(problems, args)
    result = _eval_one(args.model, problems, grading, args)
    if args.samples > 1:  # K samples of each problem: GRPO's headroom on them
        from unsloth_grpo.evaluation.headroom import headroom, headroom_line, headroom_warning

        result["headroom"] = headroom(result["records"], temperature=args.temperature,
                                      what=f"problems of {_rows_in_words(args)}")
    path = write_eval(result, args.output)
    print(f"{args.model}: {_summary(result)}")
    if result.get("headroom"):
        print(headroom_line(result["headroom"]))
        warning = headroom_warning(result["headroom"])
        if warning:
            print(f"warning: {warning}")
    print(f"wrote {path} and {Path(args.output) / EVAL_SAMPLES_FILE}")
    return 0


def _one_task(args) -> None:
    """``compare`` grades both models on one task's problems with that task's grader and prompt: two runs
    of different tasks have no problems in common, so without ``--task`` they are refused (grading the
    baseline as the trained model's task would score it on problems, a prompt and a grader it never saw)."""
    from unsloth_grpo.runs import recorded_task, run_config_path

    if args.task is not None:
        return
    tasks = {}
    for role, model in (("baseline", args.baseline), ("trained", args.trained)):
        path = run_config_path(model)
        task = recorded_task(path.parent) if path is not None else None
        if task is not None:
            tasks[role] = (model, task)
    if len({task for _, task in tasks.values()}) > 1:
        (b, bt), (t, tt) = tasks["baseline"], tasks["trained"]
        raise ValueError(f"{b} is a run of the {bt} task and {t} a run of the {tt} task: compare grades both "
                         "models on the same problems with one task's grader, and these have no problems in "
                         f"common. Grade each on its own task (unsloth-grpo eval --model {b} ..., then --model {t}), "
                         f"or pass --task {tt} (or --task {bt}) to grade both as that task")


@_reported
def run_compare(args) -> int:
    _one_task(args)
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
    for line in category_warnings(report):
        print(f"warning: {line}")
    print(f"fixed {len(report['fixed'])}, broken {len(report['broken'])}; wrote {md} and {js}")
    return 0
