"""Held-out evaluation and before/after comparison, graded exactly like the correctness reward.

* :func:`evaluate` - greedy accuracy (strict and lenient), format compliance, completion length and, with ``samples=K``
  (K > 1), pass@k from K sampled completions per problem (the unbiased estimator of Chen et al.,
  2021). Correctness is the task's grader (``Task.grader(cfg)``), the very function the recipe's
  correctness reward pays on, so evaluation and training cannot disagree about what a right answer
  is; each record keeps the rule that decided (``grader_rule``). Lenient accuracy counts the right
  final number anywhere in the completion (lm-evaluation-harness's GSM8K flexible extraction,
  :func:`unsloth_grpo.grading.lenient`): beside strict accuracy it says whether training moved the
  format or the answers. It is measured, never rewarded.
* :func:`compare` - two evaluations on the same problems: a metric table with differences, the
  problems that flipped either way, and accuracy by category with the categories that got worse.
* :func:`by_category` - strict and lenient accuracy for each kind of problem, when the rows say
  their kind (the offline sets' ``category`` column: the operation; any column of a user's data).
  A mean can rise while one kind of problem falls: a model that adds every pair of numbers gets
  the additions right and every subtraction wrong. Each kind also counts its wrong answers that only
  repeat a number of the question (``6`` for "6 minutes before lunch and 9 after"): a shortcut GRPO
  taught a real model on phrasings it had not trained on (issue 52), which accuracy alone does not name.
* :func:`make_eval_callback` - evaluation on a small held-out slice every N training steps, logged
  as ``eval/accuracy`` etc. beside the training metrics.

The subcommands ``unsloth-grpo eval`` and ``unsloth-grpo compare`` are :mod:`unsloth_grpo.cli.evaluate`.

Example::

    loaded = load_for_inference("outputs/gsm8k/adapter")
    result = evaluate(loaded.model, loaded.tokenizer, load_gsm8k("gsm8k_test.jsonl", limit=100))
    write_eval(result, "outputs/gsm8k/eval")        # eval.json + eval_samples.jsonl
"""

from __future__ import annotations

import functools
import json
import time
from pathlib import Path
from typing import Any, Callable

from unsloth_grpo.evaluation.statistics import pass_at_k, pass_ks, sign_test, wilson_interval  # noqa: F401 (their home)
from unsloth_grpo.grading.copying import copied_quantity

EVAL_FILE = "eval.json"
EVAL_SAMPLES_FILE = "eval_samples.jsonl"
#: What :func:`write_eval` writes into its folder, and what :func:`write_report` writes into its own.
EVAL_FILES = (EVAL_FILE, EVAL_SAMPLES_FILE)
REPORT_FILES = ("report.md", "report.json")
#: The column that says a problem's kind, when the rows have one (the offline sets do: the operation).
CATEGORY_COLUMN = "category"

#: What the table calls each compared metric, where the key alone would not say it.
METRIC_LABELS = {"accuracy": "accuracy (strict)", "lenient_accuracy": "accuracy (lenient)"}

#: How a report explains strict against lenient accuracy.
STRICT_VS_LENIENT = (
    "Strict accuracy is the task's grader, the one the reward pays on: the answer where the format puts it. "
    "Lenient accuracy also counts the right final number anywhere in the completion (the last number, as "
    "lm-evaluation-harness's GSM8K flexible extraction reads it). A gain in strict accuracy alone is a gain "
    "in format; a gain in lenient accuracy is a gain in answers. Lenient is never a reward: a policy paid "
    "for the last number learns to end with a list of numbers.")

#: Metrics compared by :func:`compare` (those present in both results), in table order.
COMPARED = ("accuracy", "lenient_accuracy", "format_compliance", "mean_completion_tokens", "mean_completion_chars", "truncated_ratio",
            "accuracy_without_tools", "calls_per_problem", "tool_use_share")  # the last three: tool_eval


def _rows(dataset, limit: int | None) -> list[dict[str, Any]]:
    n = len(dataset)
    if limit is not None:
        n = min(n, limit)
    rows = [dataset[i] for i in range(n)]
    if not rows:
        raise ValueError("the evaluation dataset is empty; check the --dataset source, --split and --limit")
    missing = [c for c in ("prompt", "answer") if c not in rows[0]]
    if missing:
        raise ValueError(f"evaluation rows need 'prompt' and 'answer' columns; missing {', '.join(missing)} "
                         "(load the data with a task's loader, e.g. get_task('gsm8k').load(cfg))")
    return rows


def _question(prompt: Any) -> str:
    if isinstance(prompt, str):
        return prompt
    users = [m.get("content", "") for m in prompt if isinstance(m, dict) and m.get("role") == "user"]
    return str(users[-1]) if users else json.dumps(prompt)


def evaluate(
    model,
    tokenizer,
    dataset,
    *,
    samples: int = 1,
    max_new_tokens: int = 256,
    temperature: float = 0.7,
    top_p: float = 1.0,
    batch_size: int = 16,
    seed: int = 0,
    limit: int | None = None,
    generate_fn: Callable[..., list[list[str]]] | None = None,
    is_correct: Callable[[str, Any], bool] | None = None,
    matches_format: Callable[[str], bool] | None = None,
    lenient_correct: Callable[[str, Any], bool] | None = None,
    progress: Callable[[str, int, int], None] | None = None,
    by: str | None = CATEGORY_COLUMN,
) -> dict[str, Any]:
    """Evaluate on ``dataset`` (rows with ``prompt`` and ``answer``); returns metrics and per-problem records.

    Accuracy and format compliance come from one greedy completion per problem. With
    ``samples=K > 1`` K more completions are sampled at ``temperature`` for ``pass@k``
    (k = 1, 2, 4, ..., K). ``generate_fn(prompts, *, num_samples, temperature, top_p,
    max_new_tokens, batch_size, seed)`` replaces the model (scripted tests, other engines); by
    default it is :func:`unsloth_grpo.evaluation.generation.generate` on ``model`` and ``tokenizer``.
    It returns strings or :class:`~unsloth_grpo.evaluation.generation.Generation` items (which carry the
    generated token count and whether generation ended at eos); strings are re-tokenized with
    ``tokenizer`` to count tokens when one is given.

    ``accuracy`` is strict: ``is_correct`` (the task's grader, the one its reward pays on; by default
    :func:`unsloth_grpo.grading.grade`, GSM8K's, for rows whose gold answers are numbers or text: rows
    whose answers are JSON, another task's, are refused without a grader rather than graded as GSM8K;
    :func:`evaluate_task` grades with the task's own). ``lenient_accuracy`` counts a problem right when the strict
    grader does or ``lenient_correct`` does (by default, with the default grader,
    :func:`unsloth_grpo.grading.lenient`: the last number anywhere in the completion); it is None
    for a task with no lenient reading (pass ``lenient_correct`` for one that has it).

    The result holds ``n``, ``accuracy``, ``lenient_accuracy``, ``format_compliance``, ``mean_completion_chars``,
    ``mean_completion_tokens`` and ``truncated_ratio`` (share of greedy completions cut at
    ``max_new_tokens``; None when unknown), ``pass@k`` keys when K > 1, ``settings``,
    ``seconds`` and ``records`` (one dict per problem; :func:`write_eval` stores them apart).
    ``progress(phase, done, total)`` hears how far the default generator is ("greedy", "sampled").

    ``by`` names the column that says each problem's kind (default ``category``); when the rows have
    it, each record keeps its value and ``by_category`` holds accuracy per kind (:func:`by_category`).
    """
    if samples < 1:
        raise ValueError(f"samples={samples}: use an integer >= 1 (completions per problem for pass@k)")
    if samples > 1 and temperature <= 0:
        raise ValueError(f"samples={samples} needs temperature > 0 (pass@k from greedy copies means nothing)")
    if by is not None and by != CATEGORY_COLUMN and len(dataset) and by not in dataset[0]:
        raise ValueError(f"--by {by}: the evaluation rows have no column '{by}'; "
                         f"they have: {', '.join(sorted(dataset[0]))}")
    rows = _rows(dataset, limit)
    prompts = [r["prompt"] for r in rows]
    golds = [r["answer"] for r in rows]
    if is_correct is None:
        _refuse_to_guess(golds)
    is_correct, matches_format, lenient_correct = _graders(is_correct, matches_format, lenient_correct)
    generate_fn, phase_progress = _generator(model, tokenizer, generate_fn, progress)

    common = dict(max_new_tokens=max_new_tokens, batch_size=batch_size)
    t0 = time.perf_counter()
    greedy = generate_fn(prompts, num_samples=1, temperature=0.0, top_p=1.0, seed=seed, **common,
                         **phase_progress.get("greedy", {}))
    sampled = None
    if samples > 1:
        sampled = generate_fn(prompts, num_samples=samples, temperature=temperature, top_p=top_p,
                              seed=seed, **common, **phase_progress.get("sampled", {}))
    seconds = time.perf_counter() - t0
    _check_shape("greedy", greedy, len(rows), 1)
    if sampled is not None:
        _check_shape("sampled", sampled, len(rows), samples)

    records = [_record(i, rows[i], prompt, gold, greedy[i][0], None if sampled is None else sampled[i], tokenizer,
                       is_correct, matches_format, lenient_correct, by)
               for i, (prompt, gold) in enumerate(zip(prompts, golds))]
    result = _metrics(records, samples, lenient_correct, by)
    result["settings"] = {"samples": samples, "max_new_tokens": max_new_tokens, "temperature": temperature,
                          "top_p": top_p, "batch_size": batch_size, "seed": seed, "limit": limit,
                          "greedy": "accuracy, lenient_accuracy and format_compliance use one greedy completion "
                                    "per problem"}
    result["seconds"] = round(seconds, 3)
    result["records"] = records
    return result


def _refuse_to_guess(golds: list[Any]) -> None:
    """Refuse gold answers that are a JSON object or list (countdown's numbers and target, code's tests,
    json_extract's fields): another task's, which the default grader would score 0 whatever was written."""
    for gold in golds:
        text = gold if isinstance(gold, str) else json.dumps(gold) if isinstance(gold, (dict, list)) else ""
        try:
            structured = text.lstrip()[:1] in ("{", "[") and isinstance(json.loads(text), (dict, list))
        except ValueError:
            structured = False
        if structured:
            raise ValueError(
                f"evaluate() was given no grader, and the rows' gold answers are structured ({text[:80]!r}): a "
                "task's answers that the default grader (GSM8K's: one number, or text) would score 0 whatever the "
                "completion. Grade them as their task does: evaluate_task(get_task(NAME), model, tokenizer, rows, "
                "cfg), or evaluate(model, tokenizer, rows, **get_task(NAME).grading(cfg)) "
                "(from unsloth_grpo.tasks import get_task)")


def _graders(is_correct: Callable[[str, Any], bool] | None, matches_format: Callable[[str], bool] | None,
             lenient_correct: Callable[[str, Any], bool] | None) -> tuple[Callable, Callable, Callable | None]:
    """The strict grader, the format check and the lenient grader: those given, else the default grader's
    (whose numbers are also read leniently when no strict grader was given)."""
    if is_correct is None or matches_format is None:
        from unsloth_grpo import grading

        if is_correct is None and lenient_correct is None:
            lenient_correct = grading.lenient  # the default grader's numbers, read leniently
        is_correct = is_correct or grading.grade
        matches_format = matches_format or grading.matches_format
    return is_correct, matches_format, lenient_correct


def _generator(model, tokenizer, generate_fn: Callable[..., list[list[str]]] | None,
               progress: Callable[[str, int, int], None] | None) -> tuple[Callable, dict[str, dict[str, Any]]]:
    """The generator (the given one, else the model's) and, for the model's, the ``progress`` keyword of
    each pass ("greedy", "sampled")."""
    if generate_fn is not None:
        return generate_fn, {}
    from unsloth_grpo.evaluation.generation import generate_detailed

    phase_progress = {}
    if progress is not None:
        phase_progress = {phase: {"progress": functools.partial(progress, phase)} for phase in ("greedy", "sampled")}
    return functools.partial(generate_detailed, model, tokenizer), phase_progress


def _record(i: int, row: dict[str, Any], prompt: Any, gold: Any, greedy: Any, sampled: list | None, tokenizer,
            is_correct: Callable, matches_format: Callable, lenient_correct: Callable | None,
            by: str | None) -> dict[str, Any]:
    """One problem's record: its greedy completion graded strictly, leniently and for format, its length,
    its kind, and with sampling the samples and which are right."""
    text, num_tokens, finished = _unpack(greedy, tokenizer)
    verdict = is_correct(text, gold)  # a task grader's Verdict (or a plain bool)
    rec: dict[str, Any] = {
        "index": i,
        "prompt": prompt,
        "completion": text,
        "gold": gold,
        "correct": bool(verdict),
        "grader_rule": getattr(verdict, "rule", None),
        "lenient_correct": None if lenient_correct is None else bool(verdict) or bool(lenient_correct(text, gold)),
        "format_ok": bool(matches_format(text)),
        "completion_chars": len(text),
        "completion_tokens": num_tokens,
        "finished": finished,
    }
    if by is not None and by in row:
        rec["category"] = str(row[by])
    if not rec["correct"] and isinstance(gold, (str, int, float)):
        rec["copied_quantity"] = copied_quantity(text, prompt, gold)  # a shortcut GRPO can teach (issue 52)
    if sampled is not None:
        texts = [_unpack(s, None)[0] for s in sampled]
        rec["samples"] = texts
        rec["samples_correct"] = [bool(is_correct(s, gold)) for s in texts]
    return rec


def _metrics(records: list[dict[str, Any]], samples: int, lenient_correct: Callable | None,
             by: str | None) -> dict[str, Any]:
    """The metrics over the records: accuracy (strict, with its 95% interval, and lenient), format
    compliance, lengths, truncation, ``pass@k`` when more than one sample was drawn, and accuracy per kind."""
    n = len(records)
    tokens = [r["completion_tokens"] for r in records]
    finished = [r["finished"] for r in records]
    result: dict[str, Any] = {
        "n": n,
        "accuracy": sum(r["correct"] for r in records) / n,
        "accuracy_ci95": list(wilson_interval(sum(r["correct"] for r in records), n)),
        "lenient_accuracy": None if lenient_correct is None else sum(r["lenient_correct"] for r in records) / n,
        "format_compliance": sum(r["format_ok"] for r in records) / n,
        "mean_completion_chars": sum(r["completion_chars"] for r in records) / n,
        "mean_completion_tokens": None if None in tokens else sum(tokens) / n,
        "truncated_ratio": None if None in finished else sum(not f for f in finished) / n,
        "copied_quantity": sum(bool(r.get("copied_quantity")) for r in records),
    }
    if samples > 1:
        for k in pass_ks(samples):
            result[f"pass@{k}"] = sum(pass_at_k(samples, sum(r["samples_correct"]), k) for r in records) / n
    categories = by_category(records)
    if categories:
        result["by_category"] = categories
        result["category_column"] = by
    return result


def group_by_category(records: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """The records that carry a ``category``, by category, in sorted order (the grouping of
    :func:`by_category` and of the GRPO headroom's breakdown)."""
    groups: dict[str, list[dict[str, Any]]] = {}
    for r in records:
        if r.get("category") is not None:
            groups.setdefault(str(r["category"]), []).append(r)
    return {name: groups[name] for name in sorted(groups)}


def by_category(records: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Accuracy per kind of problem: ``{category: {n, correct, accuracy, lenient_correct,
    lenient_accuracy, format_compliance, copied_quantity}}`` over the records that carry a ``category``, in
    sorted order (``copied_quantity``: the wrong answers that repeat a number of the question, calculated from
    nothing, :func:`~unsloth_grpo.grading.copying.copied_quantity`);
    empty when none does.

    >>> recs = [{"category": "addition", "correct": True, "lenient_correct": True, "format_ok": True},
    ...         {"category": "subtraction", "correct": False, "lenient_correct": False, "format_ok": True}]
    >>> {k: v["accuracy"] for k, v in by_category(recs).items()}
    {'addition': 1.0, 'subtraction': 0.0}
    """
    groups = group_by_category(records)
    out = {}
    for name, recs in groups.items():
        n, correct = len(recs), sum(bool(r["correct"]) for r in recs)
        lenient = None if any(r.get("lenient_correct") is None for r in recs) else \
            sum(bool(r["lenient_correct"]) for r in recs)
        out[name] = {"n": n, "correct": correct, "accuracy": correct / n,
                     "lenient_correct": lenient, "lenient_accuracy": None if lenient is None else lenient / n,
                     "format_compliance": sum(bool(r.get("format_ok")) for r in recs) / n,
                     "copied_quantity": sum(bool(r.get("copied_quantity")) for r in recs)}
    return out


def _unpack(item: Any, tokenizer) -> tuple[str, int | None, bool | None]:
    """A generator's item -> (text, generated tokens, ended at eos). Plain strings (scripted or other
    generators) get a token count by re-tokenizing when a tokenizer is at hand, and no ``finished``."""
    if isinstance(item, str):
        tokens = None if tokenizer is None else len(tokenizer(item, add_special_tokens=False)["input_ids"])
        return item, tokens, None
    return item.text, item.num_tokens, item.finished


def _check_shape(what: str, out, n: int, k: int) -> None:
    if len(out) != n or any(len(x) != k for x in out):
        raise ValueError(f"the generator returned a wrong shape for the {what} pass: expected {n} lists of {k} "
                         f"completion(s), got {len(out)} lists of sizes {sorted({len(x) for x in out})}")


def write_eval(result: dict[str, Any], output_dir: str | Path, **info: Any) -> Path:
    """Write ``eval.json`` (metrics + ``info`` such as model and dataset) and ``eval_samples.jsonl``."""
    out = Path(output_dir)
    out.mkdir(parents=True, exist_ok=True)
    summary = {**info, **{k: v for k, v in result.items() if k != "records"}}
    (out / EVAL_FILE).write_text(json.dumps(summary, indent=2) + "\n")
    with (out / EVAL_SAMPLES_FILE).open("w") as fh:
        for rec in result["records"]:
            fh.write(json.dumps(rec) + "\n")
    return out / EVAL_FILE


def read_eval(output_dir: str | Path) -> dict[str, Any]:
    """Read back what :func:`write_eval` wrote: the summary with its ``records``."""
    out = Path(output_dir)
    result = json.loads((out / EVAL_FILE).read_text())
    result["records"] = [json.loads(line) for line in (out / EVAL_SAMPLES_FILE).read_text().splitlines() if line]
    return result


# ---------------------------------------------------------------------------- compare

def change_in_words(report: dict[str, Any]) -> str:
    """``3 fixed, 1 broken: within noise (sign test p=0.62)`` for a :func:`compare` report."""
    fixed, broken = len(report["fixed"]), len(report["broken"])
    p = sign_test(fixed, broken)
    verdict = "within noise" if p >= 0.05 else "more than chance flips"
    return f"{fixed} fixed, {broken} broken: {verdict} (sign test p={p:.2g})"


def compare(baseline: dict[str, Any], trained: dict[str, Any]) -> dict[str, Any]:
    """Metric table (baseline, trained, difference) and flipped problems of two evaluations.

    Both must cover the same problems in the same order (same prompts and gold answers);
    ``fixed`` lists problems the trained model gets right and the baseline wrong, ``broken`` the
    reverse (greedy strict correctness). ``accuracy`` (strict) and ``lenient_accuracy`` are both in
    the table when both evaluations have them, each with its Wilson interval.
    """
    b_recs, t_recs = baseline["records"], trained["records"]
    if len(b_recs) != len(t_recs) or any(
        b["prompt"] != t["prompt"] or b["gold"] != t["gold"] for b, t in zip(b_recs, t_recs)
    ):
        raise ValueError("the two evaluations cover different problems; run both on the same dataset, split, "
                         "limit and order (compare does this for you)")
    keys = [k for k in COMPARED if baseline.get(k) is not None and trained.get(k) is not None]
    keys += sorted(k for k in baseline if k.startswith("pass@") and trained.get(k) is not None)
    table = [{"metric": k, "label": METRIC_LABELS.get(k, k), "baseline": baseline[k], "trained": trained[k],
              "diff": trained[k] - baseline[k]} for k in keys]
    fixed, broken = [], []
    for b, t in zip(b_recs, t_recs):
        if b["correct"] == t["correct"]:
            continue
        item = {"index": b["index"], "question": _question(b["prompt"]), "gold": b["gold"],
                "baseline_completion": b["completion"], "trained_completion": t["completion"]}
        (fixed if t["correct"] else broken).append(item)
    intervals = lenient_intervals = None
    if len(b_recs):
        intervals = {name: list(wilson_interval(sum(r["correct"] for r in recs), len(recs)))
                     for name, recs in (("baseline", b_recs), ("trained", t_recs))}
        if all(r.get("lenient_correct") is not None for r in (*b_recs, *t_recs)):
            lenient_intervals = {name: list(wilson_interval(sum(r["lenient_correct"] for r in recs), len(recs)))
                                 for name, recs in (("baseline", b_recs), ("trained", t_recs))}
    categories = category_changes(baseline, trained)
    return {"n": len(b_recs), "metrics": table, "fixed": fixed, "broken": broken, "accuracy_ci95": intervals,
            "lenient_accuracy_ci95": lenient_intervals, "note": STRICT_VS_LENIENT if lenient_intervals else None,
            "by_category": categories["table"], "worse_categories": categories["worse"],
            "stalled_categories": categories["stalled"],
            "baseline": {k: baseline.get(k) for k in ("model", "dataset")},
            "trained": {k: trained.get(k) for k in ("model", "dataset")},
            "settings": trained.get("settings")}


#: A category whose strict accuracy stayed within this of where it was while the whole set rose by
#: :data:`STALLED_RISE` or more is called stalled: the gain came from the other kinds of problem.
STALLED_RISE = 0.10


def category_changes(baseline: dict[str, Any], trained: dict[str, Any]) -> dict[str, Any]:
    """Accuracy by category before and after, and the categories that got worse or stalled.

    ``table``: one row per category (``n``, strict and lenient before, after and difference).
    ``worse``: the categories whose strict or lenient accuracy fell, with the metric that fell.
    ``stalled``: categories whose strict accuracy did not rise while the whole set rose by at least
    :data:`STALLED_RISE`. Empty lists when the evaluations have no categories.

    >>> before = {"accuracy": 0.0, "by_category": {"addition": {"n": 2, "accuracy": 0.0, "lenient_accuracy": 0.5},
    ...                                          "subtraction": {"n": 2, "accuracy": 0.0, "lenient_accuracy": 0.5}}}
    >>> after = {"accuracy": 0.5, "by_category": {"addition": {"n": 2, "accuracy": 1.0, "lenient_accuracy": 1.0},
    ...                                         "subtraction": {"n": 2, "accuracy": 0.0, "lenient_accuracy": 0.0}}}
    >>> [(w["category"], w["metric"]) for w in category_changes(before, after)["worse"]]
    [('subtraction', 'lenient_accuracy')]
    >>> category_changes(before, after)["stalled"]
    ['subtraction']
    """
    b, t = baseline.get("by_category") or {}, trained.get("by_category") or {}
    table, worse, stalled = [], [], []
    rise = (trained.get("accuracy") or 0.0) - (baseline.get("accuracy") or 0.0)
    for name in sorted(set(b) & set(t)):
        row: dict[str, Any] = {"category": name, "n": t[name]["n"]}
        for metric in ("accuracy", "lenient_accuracy"):
            before, after = b[name].get(metric), t[name].get(metric)
            row[metric] = {"baseline": before, "trained": after,
                           "diff": None if before is None or after is None else after - before}
            if before is not None and after is not None and after < before - 1e-12:
                worse.append({"category": name, "metric": metric, "baseline": before, "trained": after,
                              "n": t[name]["n"]})
        table.append(row)
        diff = row["accuracy"]["diff"]
        if rise >= STALLED_RISE and diff is not None and diff <= 1e-12:
            stalled.append(name)
    return {"table": table, "worse": worse, "stalled": stalled}


def category_warnings(report: dict[str, Any]) -> list[str]:
    """The report's worse and stalled categories in words, one line each, with what to do."""
    lines = []
    for w in report.get("worse_categories") or []:
        label = METRIC_LABELS.get(w["metric"], w["metric"])
        lines.append(f"category '{w['category']}' got worse: {label} {w['baseline']:.3f} -> {w['trained']:.3f} "
                     f"({w['n']} problems). Read its completions (eval_samples.jsonl): a model that writes one "
                     "calculation for every problem gains on one kind and loses the others; balance the worked "
                     "examples and the training data across kinds.")
    for name in report.get("stalled_categories") or []:
        if any(w["category"] == name for w in report.get("worse_categories") or []):
            continue
        lines.append(f"category '{name}' did not improve while the whole set did: the gain came from the other "
                     "kinds of problem. Read its completions before calling the run a success.")
    return lines


def _one_line(text: str, limit: int = 160) -> str:
    text = " ".join(str(text).split()).replace("|", "\\|")
    return text if len(text) <= limit else text[: limit - 3] + "..."


def report_markdown(report: dict[str, Any], *, max_listed: int = 20) -> str:
    """The comparison as Markdown: a metric table and the flipped problems."""
    lines = ["# Before / after", ""]
    lines.append(f"Baseline: `{report['baseline'].get('model')}`  ")
    lines.append(f"Trained: `{report['trained'].get('model')}`  ")
    lines.append(f"Dataset: `{report['trained'].get('dataset')}`, {report['n']} problems, same prompts and "
                 "sampling settings for both.")
    lines += ["", "| metric | baseline | trained | difference |", "|---|---:|---:|---:|"]
    for row in report["metrics"]:
        lines.append(f"| {row.get('label', row['metric'])} | {row['baseline']:.3f} | "
                     f"{row['trained']:.3f} | {row['diff']:+.3f} |")
    for key, what in (("accuracy_ci95", "Strict accuracy"), ("lenient_accuracy_ci95", "Lenient accuracy")):
        if report.get(key):
            b, t = report[key]["baseline"], report[key]["trained"]
            lines.append(f"\n{what} 95% interval (Wilson, {report['n']} problems): baseline {b[0]:.3f}..{b[1]:.3f}, "
                         f"trained {t[0]:.3f}..{t[1]:.3f}.")
    if report.get("accuracy_ci95"):
        lines.append(f"Paired on the same problems (strict): {change_in_words(report)}.")
    if report.get("note"):
        lines += ["", report["note"]]
    if report.get("by_category"):
        lines += ["", "## By category", "", "| category | n | strict before | strict after | lenient before | lenient after |",
                  "|---|---:|---:|---:|---:|---:|"]
        for row in report["by_category"]:
            s, l = row["accuracy"], row["lenient_accuracy"]
            fmt = lambda v: "-" if v is None else f"{v:.3f}"  # noqa: E731
            lines.append(f"| {row['category']} | {row['n']} | {fmt(s['baseline'])} | {fmt(s['trained'])} | "
                         f"{fmt(l['baseline'])} | {fmt(l['trained'])} |")
        warnings = category_warnings(report)
        lines += [""] + [f"**Warning:** {w}" for w in warnings] if warnings else ["", "No category got worse."]
    for key, title in (("fixed", "Fixed (baseline wrong, trained right; strict)"),
                       ("broken", "Broken (baseline right, trained wrong; strict)")):
        items = report[key]
        lines += ["", f"## {title}: {len(items)}", ""]
        if not items:
            lines.append("None.")
            continue
        lines += ["| # | question | gold | baseline | trained |", "|---:|---|---|---|---|"]
        for it in items[:max_listed]:
            lines.append(f"| {it['index']} | {_one_line(it['question'], 80)} | {_one_line(it['gold'], 20)} | "
                         f"{_one_line(it['baseline_completion'])} | {_one_line(it['trained_completion'])} |")
        if len(items) > max_listed:
            lines.append(f"\n... and {len(items) - max_listed} more in report.json.")
    return "\n".join(lines) + "\n"


def write_report(report: dict[str, Any], output_dir: str | Path) -> tuple[Path, Path]:
    out = Path(output_dir)
    out.mkdir(parents=True, exist_ok=True)
    md, js = (out / name for name in REPORT_FILES)
    md.write_text(report_markdown(report))
    js.write_text(json.dumps(report, indent=2) + "\n")
    return md, js


# ---------------------------------------------------------------------------- during training

def make_eval_callback(trainer, dataset, *, every: int, samples: int = 1, max_new_tokens: int = 256,
                       temperature: float = 0.7, batch_size: int = 16, seed: int = 0, prefix: str = "eval/",
                       is_correct: Callable[[str, Any], bool] | None = None,
                       matches_format: Callable[[str], bool] | None = None,
                       lenient_correct: Callable[[str, Any], bool] | None = None):
    """A ``TrainerCallback`` evaluating ``dataset`` (keep it small) every ``every`` optimizer steps.

    The metrics are logged through the trainer's callbacks as ``eval/accuracy``, ``eval/lenient_accuracy``
    (with ``lenient_correct``, or with the default grader), ``eval/format_compliance``, ``eval/mean_completion_tokens`` (and ``eval/pass@k``), so they reach
    ``metrics.jsonl``, the progress line and ``report_to`` loggers beside the training metrics.
    Add it with ``trainer.add_callback(make_eval_callback(trainer, held_out, every=50))``.
    """
    from transformers import TrainerCallback

    if every < 1:
        raise ValueError(f"eval every={every}: use an integer >= 1 (training steps between evaluations)")
    rows = _rows(dataset, None)

    class PeriodicEval(TrainerCallback):
        def __init__(self) -> None:
            self.history: list[dict[str, Any]] = []

        def on_step_end(self, args, state, control, **kwargs):
            if state.global_step % every != 0:
                return control
            model = trainer.accelerator.unwrap_model(trainer.model) if hasattr(trainer, "accelerator") \
                else trainer.model
            tokenizer = getattr(trainer, "processing_class", None) or kwargs.get("processing_class")
            result = evaluate(model, tokenizer, rows, samples=samples, max_new_tokens=max_new_tokens,
                              temperature=temperature, batch_size=batch_size, seed=seed, is_correct=is_correct,
                              matches_format=matches_format, lenient_correct=lenient_correct)
            logs = {f"{prefix}{k}": v for k, v in result.items()
                    if isinstance(v, (int, float)) and not isinstance(v, bool) and k not in ("n", "seconds")}
            self.history.append({"step": state.global_step, **logs})
            # Trainer.log minus GRPOTrainer.log's extras: that one would also flush (and so split)
            # the training metrics gathered since the last log. The handler's on_log clears
            # should_log, which the trainer still needs for this step's training log.
            should_log = control.should_log
            state.log_history.append({**logs, "step": state.global_step})
            trainer.callback_handler.on_log(args, state, control, logs)
            control.should_log = should_log
            return control

    return PeriodicEval()


def evaluate_task(task, model, tokenizer, dataset, cfg, *, threshold: float | None = None,
                  **kwargs: Any) -> dict[str, Any]:
    """:func:`evaluate` on ``dataset``, graded as ``cfg``'s reward grades for ``task`` (a
    :class:`~unsloth_grpo.tasks.Task`; ``threshold``: see :meth:`~unsloth_grpo.tasks.Task.grading`;
    ``kwargs`` are evaluate's own: ``samples``, ``generate_fn``, ...)."""
    return evaluate(model, tokenizer, dataset, **{**task.grading(cfg, threshold=threshold), **kwargs})
