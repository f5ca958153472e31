"""The held-out side of a run: the task's rows, the held-out slice, grading a model on it, and the
before/after report. Training (train.py) and stages (stages.py) both use these, so they live below both."""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from unsloth_grpo.config import RecipeConfig
from unsloth_grpo.data import DataError, looks_like_path


def load_task_dataset(cfg: RecipeConfig):
    """The training rows for ``cfg.task``; raises DataError before any model is loaded, also when
    there are none (a run on 0 rows would only fail after the model loaded, blaming the prompt length)."""
    from unsloth_grpo.tasks import get_task

    task = get_task(cfg.task)
    d = cfg.data
    if d.limit is not None and d.limit < 1:  # said before any task reads it as something else
        raise DataError(f"data.limit={d.limit} leaves 0 rows to train on; remove it (all rows) or set it to "
                        "1 or more")
    rows = _load_rows(task, cfg)
    if len(rows) == 0:
        raise DataError(f"data.source='{d.source}' (split '{d.split}') gives 0 rows to train on; check the "
                        "source and data.split")
    return rows


def _load_rows(task, cfg: RecipeConfig):
    source = str(cfg.data.source)
    if source == "synthetic" or looks_like_path(source):
        return task.load(cfg)
    from unsloth_grpo.hardware.doctor.recipe import hub_offline_mode, hub_unreachable

    why = hub_unreachable()
    if why is None:
        return task.load(cfg)
    try:  # a copy in the local cache still loads; anything else fails now, not after ~25 s of retries
        with hub_offline_mode():
            return task.load(cfg)
    except DataError as exc:
        if not str(exc).startswith("could not load hub dataset"):
            raise
        raise DataError(
            f"data.source='{source}' is a hub dataset that is not in the local cache, and {why}. Without "
            "network, add --preset smoke (synthetic problems and the tiny built-in model, all offline) or set "
            "data.source to a local .jsonl/.json/.csv/.parquet file") from None


def held_out_rows(cfg: RecipeConfig):
    """The evaluation slice: the task's held-out split of the same source, ``evaluation.limit`` rows."""
    import dataclasses

    e = cfg.evaluation
    eval_cfg = dataclasses.replace(cfg, data=dataclasses.replace(cfg.data, split=e.split, limit=e.limit))
    return load_task_dataset(eval_cfg)


def eval_kwargs(cfg: RecipeConfig) -> dict:
    """Evaluation settings, with the task's own grader (the one its correctness reward uses), its lenient
    reading where it has one, and its own format check, as ``unsloth-grpo eval`` grades."""
    from unsloth_grpo.tasks import get_task

    e = cfg.evaluation
    return dict(samples=e.samples, max_new_tokens=e.max_new_tokens or cfg.training.max_completion_length,
                temperature=e.temperature, batch_size=e.batch_size, seed=cfg.seed, **get_task(cfg.task).grading(cfg))


def _ci(result: dict) -> str:
    """``(95% CI 0.241..0.323)`` for an evaluation result, empty when it has no interval."""
    ci = result.get("accuracy_ci95")
    return f"(95% CI {ci[0]:.3f}..{ci[1]:.3f})" if ci else ""


def evaluate_held_out(cfg: RecipeConfig, model, tokenizer, dataset, where: Path, *, name: str) -> dict:
    """Evaluate ``model`` on the held-out rows; ``name`` is what the report calls it (the base model
    before training, the run's adapter after), stored with the dataset in the result and eval.json."""
    from unsloth_grpo.evaluation.evaluate import evaluate, write_eval

    if cfg.tools.functions or cfg.tools.environment:  # with the tools and without, and calls per problem
        from unsloth_grpo.evaluation.tool_eval import evaluate_with_tools

        result = evaluate_with_tools(model, tokenizer, dataset, tools_cfg=cfg.tools, **eval_kwargs(cfg))
    else:
        result = evaluate(model, tokenizer, dataset, **eval_kwargs(cfg))
    result.update(model=name, dataset=str(cfg.data.source), split=cfg.evaluation.split)
    write_eval(result, where)
    return result


def report_before_after(before: dict, after: dict, out: Path, log: Callable[[str], None]) -> dict:
    """``report.md`` and ``report.json`` in ``out`` for two evaluations of the same held-out problems, the
    change said in one line, and a warning for each category that got worse or did not move; returns
    the run's held-out summary."""
    from unsloth_grpo.evaluation.evaluate import category_warnings, change_in_words, compare, write_report
    from unsloth_grpo.training.results import held_out_summary

    report = compare(before, after)
    write_report(report, out)
    lenient = "" if before.get("lenient_accuracy") is None or after.get("lenient_accuracy") is None else \
        f", lenient {before['lenient_accuracy']:.3f} -> {after['lenient_accuracy']:.3f}"
    log(f"evaluation: accuracy {before['accuracy']:.3f} {_ci(before)} -> {after['accuracy']:.3f} {_ci(after)} "
        f"on {after['n']} held-out problems ({change_in_words(report)}){lenient}, format "
        f"{before['format_compliance']:.3f} -> {after['format_compliance']:.3f} ({out / 'report.md'})")
    for line in category_warnings(report):
        log(f"evaluation warning: {line}")
    return held_out_summary(before, after, report)
