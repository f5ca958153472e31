"""The held-out side of a run: the task's rows, the held-out slice, grading a model on it, and the
before/after report. Training (train.py) and stages (stages.py) both use these, so they live below both."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Callable

from unsloth_grpo.config import RecipeConfig
from unsloth_grpo.data import DataError, has_splits, looks_like_path


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
    from unsloth_grpo.hardware.doctor.probes import hub_unreachable
    from unsloth_grpo.hardware.doctor.recipe import hub_offline_mode

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


def held_out_problem(cfg: RecipeConfig) -> str | None:
    """Why ``cfg``'s held-out evaluation has no held-out problems, or None. A local ``data.source`` file is
    one table (:func:`~unsloth_grpo.data.has_splits`): read at ``evaluation.split`` it gives the training
    rows, and grading those as held-out would report what the model memorised as what it learned."""
    e = cfg.evaluation
    if not (e.before_after or e.every):
        return None
    if e.dataset is not None:
        if looks_like_path(e.dataset) and not Path(e.dataset).expanduser().exists():
            return f"evaluation.dataset='{e.dataset}' does not exist; check the path (a held-out file of its own)"
        return None
    if has_splits(cfg.data.source):
        return None
    return (f"evaluation: data.source='{cfg.data.source}' is one local file, which has no held-out split "
            f"(evaluation.split='{e.split}' cannot pick rows of it): the held-out problems would be the training "
            "rows. Put held-out problems (the same columns, not in the training file) in a file of their own and "
            "set evaluation.dataset=HELD_OUT_FILE, or turn held-out evaluation off (evaluation.before_after=false, "
            "evaluation.every=0)")


def held_out_config(cfg: RecipeConfig) -> RecipeConfig:
    """``cfg`` with the held-out problems as its data: ``evaluation.dataset`` (else ``data.source``) at
    ``evaluation.split``, ``evaluation.limit`` rows, every kind of problem (``data.categories`` chooses what
    trains, not what is graded: the report's accuracy by kind shows the kinds apart)."""
    import dataclasses

    e = cfg.evaluation
    source = e.dataset or cfg.data.source
    subset = cfg.data.subset if source == cfg.data.source else None  # the subset names a part of data.source
    return dataclasses.replace(cfg, data=dataclasses.replace(cfg.data, source=source, subset=subset, split=e.split,
                                                             limit=e.limit, categories=None))


def split_label(source: str, split: str) -> str | None:
    """The split an evaluation records for its problems: None for a source without splits (a local file,
    graded whole), so that no file is ever called a "test" split."""
    return split if has_splits(source) else None


def held_out_rows(cfg: RecipeConfig):
    """The evaluation slice (:func:`held_out_config`); a DataError when there is none (:func:`held_out_problem`)."""
    problem = held_out_problem(cfg)
    if problem is not None:
        raise DataError(problem)
    return load_task_dataset(held_out_config(cfg))


#: The settings that choose the held-out problems (:func:`held_out_rows`), named when a resume changes them.
_CHOOSE_HELD_OUT = ("evaluation.split", "evaluation.limit", "data.source", "data.subset", "data.num_synthetic",
                    "data.system_prompt", "data.question_column", "data.answer_column", "data.shuffle_seed",
                    "data.categories", "seed")


def refuse_other_held_out(cfg: RecipeConfig, graded: Path) -> None:
    """Raise ConfigError when a resumed run would grade its end on other held-out problems than the
    start graded in ``graded`` (an eval folder the run reads back): the two could not be compared, and
    the run would fail only after training. Names the settings that changed, with their earlier values
    (from the run's config.yaml, not yet rewritten). Nothing to say without ``evaluation.before_after``
    or a start graded."""
    from unsloth_grpo.config import ConfigError, load_config
    from unsloth_grpo.evaluation.evaluate import EVAL_FILE, read_eval

    if not cfg.evaluation.before_after or not (graded / EVAL_FILE).is_file():
        return
    same = json.loads(json.dumps([(r["prompt"], r["answer"]) for r in held_out_rows(cfg)], default=str))
    start = read_eval(graded)
    if same == [[r["prompt"], r["gold"]] for r in start["records"]]:
        return
    try:
        earlier = load_config(Path(cfg.output_dir) / "config.yaml")
    except (ConfigError, OSError):
        earlier = None

    def value(c, key):
        section, _, name = key.rpartition(".")
        return getattr(getattr(c, section) if section else c, name)

    changed = [f"{key}={value(cfg, key)!r} (the run's: {value(earlier, key)!r})" for key in _CHOOSE_HELD_OUT
               if earlier is not None and value(earlier, key) != value(cfg, key)]
    raise ConfigError(
        f"this resume would grade the run's end on other held-out problems than its start, graded on "
        f"{len(start['records'])} problems in {graded}: the two could not be compared"
        + (f" ({', '.join(changed)})" if changed else "")
        + ". Resume with the run's own settings (drop " + (", ".join(c.split("=")[0] for c in changed) or "the change")
        + " from the command), or start a new run with --output-dir to grade other problems. Nothing was changed")


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
    data = held_out_config(cfg).data
    result.update(model=name, dataset=str(data.source), split=split_label(data.source, data.split))
    write_eval(result, where)
    return result


def report_before_after(before: dict, after: dict, out: Path, log: Callable[[str], None],
                        headroom: dict | None = None) -> dict:
    """``report.md`` and ``report.json`` in ``out`` for two evaluations of the same held-out problems, the
    change said in one line, and a warning for each category that got worse or did not move; returns
    the run's held-out summary. ``headroom`` (``{"before": ..., "after": ...}``, :func:`headroom_start`'s
    and :func:`headroom_end`'s) goes into the report beside them."""
    from unsloth_grpo.evaluation.evaluate import category_warnings, change_in_words, compare, write_report
    from unsloth_grpo.training.results import held_out_summary

    report = compare(before, after)
    if headroom:
        report["headroom"] = headroom
    md, _ = write_report(report, out)
    if headroom:  # GRPO's K samples of training prompts before and after, at the report's end
        from unsloth_grpo.evaluation.headroom import markdown

        md.write_text(md.read_text() + "\n" + markdown(headroom.get("before"), headroom.get("after")))
    lenient = "" if before.get("lenient_accuracy") is None or after.get("lenient_accuracy") is None else \
        f", lenient {before['lenient_accuracy']:.3f} -> {after['lenient_accuracy']:.3f}"
    log(f"evaluation: accuracy {before['accuracy']:.3f} {_ci(before)} -> {after['accuracy']:.3f} {_ci(after)} "
        f"on {after['n']} held-out problems ({change_in_words(report)}){lenient}, format "
        f"{before['format_compliance']:.3f} -> {after['format_compliance']:.3f} ({out / 'report.md'})")
    for line in category_warnings(report):
        log(f"evaluation warning: {line}")
    return held_out_summary(before, after, report)


# ---------------------------------------------------------------- GRPO's headroom (evaluation.headroom)

def sample_for_run(cfg: RecipeConfig, model, tokenizer, rows: list, samples: int | None = None) -> dict:
    """:func:`~unsloth_grpo.evaluation.headroom.sample_headroom` of ``rows`` as the GRPO config ``cfg`` samples
    (its temperature, top_p and completion limit; ``samples``, else ``evaluation.headroom``, per prompt),
    graded by its task's grader."""
    from unsloth_grpo.evaluation.headroom import sample_headroom
    from unsloth_grpo.tasks import get_task

    e = cfg.evaluation
    return sample_headroom(model, tokenizer, rows, samples=samples or e.headroom, temperature=cfg.training.temperature,
                           top_p=cfg.training.get("top_p", 1.0), max_new_tokens=cfg.training.max_completion_length,
                           batch_size=e.batch_size, seed=cfg.seed, is_correct=get_task(cfg.task).grader(cfg))


def _write_headroom(h: dict, path: Path) -> dict:
    """``h`` written to ``path`` (records included); returns it without its records."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(h, indent=1) + "\n")
    return {k: v for k, v in h.items() if k != "records"}


def headroom_start(cfg: RecipeConfig, model, tokenizer, dataset, out: Path, log: Callable[[str], None], *,
                   resumed: bool = False) -> dict | None:
    """With ``evaluation.headroom`` (K): K samples of ``evaluation.headroom_prompts`` of the training rows at
    the GRPO temperature, graded by the task's grader, before GRPO trains; the line and its warning are
    logged and the figures (with the samples) written to ``OUT/headroom_before.json``. A resumed training
    reads them back (the model is no longer at its start). None when off, or for a run with tools."""
    from unsloth_grpo.evaluation.headroom import HEADROOM_FILES, headroom_line, headroom_rows, headroom_warning

    if not cfg.evaluation.headroom:
        return None
    path = out / HEADROOM_FILES["before"]
    if resumed:
        return json.loads(path.read_text()) if path.is_file() else None
    if cfg.tools.functions or cfg.tools.environment:
        log("GRPO headroom: not measured for a run with tools (its completions need the tool loop)")
        return None
    h = sample_for_run(cfg, model, tokenizer, headroom_rows(dataset, cfg.evaluation.headroom_prompts, cfg.seed))
    log(headroom_line(h))
    warning = headroom_warning(h)
    if warning:
        log(f"GRPO headroom warning: {warning}")
    _write_headroom(h, path)
    return h


def headroom_end(cfg: RecipeConfig, model, tokenizer, before: dict | None, out: Path,
                 log: Callable[[str], None]) -> dict | None:
    """The same prompts sampled again after training (``OUT/headroom_after.json``), and the line that sets
    pass@1 after against pass@K before; returns ``{"before": ..., "after": ...}`` without the samples."""
    from unsloth_grpo.evaluation.headroom import HEADROOM_FILES, after_line

    if before is None:
        return None
    rows = [{"prompt": r["prompt"], "answer": r["gold"], **({"category": r["category"]} if "category" in r else {})}
            for r in before["records"]]
    after = _write_headroom(sample_for_run(cfg, model, tokenizer, rows), out / HEADROOM_FILES["after"])
    log(after_line(before, after))
    return {"before": {k: v for k, v in before.items() if k != "records"}, "after": after}
