"""Datasets for GRPO: load a local file or a hub dataset, turn rows into chat prompts, check them.

Every loader returns a ``datasets.Dataset`` with a ``prompt`` column (chat messages: the system
message with the answer format, then the user's question) and an ``answer`` column (the reference
answer as a clean string). TRL passes every other column to the reward functions by name.

Example (the knowledge-base case: a CSV with ``question`` and ``expert_answer``)::

    ds = load_qa_dataset("kb.csv", answer_column="expert_answer",
                         system_prompt="Answer from the handbook.")
"""

from __future__ import annotations

import contextlib
import functools
import os
from pathlib import Path
from typing import Any, Callable

LOCAL_FORMATS = {".jsonl": "json", ".json": "json", ".csv": "csv", ".parquet": "parquet"}


class DataError(ValueError):
    """The dataset is malformed. The message names the row or column and the fix."""


#: Folders this toolkit writes runs and exports into: ``outputs/run`` is a path even where no
#: ``outputs/`` folder exists yet (no hub owner is called that).
LOCAL_ROOTS = ("outputs", "exports")


def _in_hub_cache(name: str) -> bool:
    """Whether the local hub cache holds a model or dataset called ``name`` (``owner/name``)."""
    from huggingface_hub.constants import HF_HUB_CACHE

    folder = name.replace("/", "--")
    return any((Path(HF_HUB_CACHE) / f"{kind}--{folder}").is_dir() for kind in ("models", "datasets"))


def looks_like_path(source: str | os.PathLike) -> bool:
    """Whether a name from the config is a path on this machine rather than a hub id: the one rule
    for ``data.source``, ``model.name`` and every other name that may be either.

    A path starts with ``.``, ``/`` or ``~``, holds a backslash or more than one ``/`` (a hub id is
    ``name`` or ``owner/name``), ends in a data-file suffix (``.jsonl``, ``.json``, ``.csv``,
    ``.parquet``), or names something that exists here. ``owner/name`` is a path too when ``owner`` is
    a folder here (``runs/run-7`` beside a ``runs/`` folder) or one of the folders runs are written to
    (:data:`LOCAL_ROOTS`), unless the hub cache holds that id. ``builtin:`` names are neither. A name
    this rule calls a path is never looked up on the hub, so a typo in it cannot reach the network.
    """
    text = os.fspath(source)
    if text.startswith("builtin:"):
        return False
    if text.startswith((".", "/", "~")) or "\\" in text or text.count("/") > 1:
        return True
    if Path(text).suffix.lower() in LOCAL_FORMATS:
        return True
    if os.path.exists(text):
        return True
    owner = text.split("/", 1)[0] if "/" in text else None
    if owner in LOCAL_ROOTS:
        return True
    return bool(owner) and os.path.isdir(owner) and not _in_hub_cache(text)


def has_splits(source: str | os.PathLike) -> bool:
    """Whether ``source`` has splits for ``data.split`` and ``evaluation.split`` to choose from: a hub dataset,
    a folder of split files, or ``synthetic`` (each split is made with its own seed, :func:`split_seed`).
    A local file, or a dataset saved with ``save_to_disk``, is one table: :func:`load_table` reads all of
    it whatever the split, so its held-out problems must come from somewhere else."""
    text = os.fspath(source)
    if text == "synthetic" or not looks_like_path(text):
        return True
    path = Path(text).expanduser()
    return path.is_dir() and not (path / "dataset_info.json").exists()


def load_table(source: str, *, split: str = "train", subset: str | None = None):
    """Load rows from a local file/directory or a hub dataset id, as a ``datasets.Dataset``.

    A local path that does not exist is an error here, never a hub lookup: a typo must not
    reach the network.
    """
    import datasets

    if looks_like_path(source):
        path = Path(source).expanduser()
        if not path.exists():
            raise DataError(f"dataset file '{source}' does not exist (check the path; local files must end in "
                            f"{', '.join(LOCAL_FORMATS)})")
        if path.is_dir():
            return datasets.load_from_disk(str(path)) if (path / "dataset_info.json").exists() else \
                datasets.load_dataset(str(path), split=split)
        builder = LOCAL_FORMATS.get(path.suffix.lower())
        if builder is None:
            raise DataError(f"dataset file '{source}' has an unknown format; use one of {', '.join(LOCAL_FORMATS)}")
        try:
            with _quiet("datasets"):  # its log line repeats the parser's error; ours names the line
                return datasets.load_dataset(builder, data_files=str(path), split="train")
        except Exception as exc:  # noqa: BLE001 - parse errors of every builder
            if "corresponds to no data" in str(exc):  # a header and no rows
                raise DataError(f"dataset '{source}' is empty: the file holds no rows") from None
            reason = _why_unreadable(path, builder) or _innermost(exc)
            raise DataError(f"could not read dataset '{source}' as {builder}: {reason}") from None
    try:
        return datasets.load_dataset(source, subset, split=split)
    except Exception as exc:  # noqa: BLE001
        raise DataError(
            f"could not load hub dataset '{source}' (subset={subset!r}, split={split!r}): {exc}. "
            "Offline? Pass a local .jsonl/.json/.csv/.parquet file instead."
        ) from exc


@contextlib.contextmanager
def _quiet(logger_name: str):
    """Hold a library's log records back for the duration (its errors become our DataError)."""
    import logging

    logger = logging.getLogger(logger_name)
    before = logger.level
    logger.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        logger.setLevel(before)


def _why_unreadable(path: Path, builder: str) -> str | None:
    """The reason a local file did not load, in the user's terms (which line, what is wrong)."""
    import json

    if builder == "parquet":  # a binary format: read as text it only ever looks like bad UTF-8
        try:
            import pyarrow.parquet as pq

            rows = pq.ParquetFile(path).metadata.num_rows
        except Exception as exc:  # noqa: BLE001 - whatever pyarrow says about a damaged file
            return f"it is not a readable Parquet file ({exc})"
        return "the file holds no rows" if rows == 0 else None
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        return f"{exc}; save the file as UTF-8 text"
    if not text.strip():
        return "the file holds no rows; write one example per line (JSONL: one JSON object per line)"
    if builder != "json":
        return None
    if path.suffix.lower() == ".json":
        try:
            json.loads(text)
            return None  # one JSON document: the builder's own message says what it disliked
        except ValueError:
            pass  # perhaps JSON lines in a .json file: find the line
    rows = []
    for number, line in enumerate(text.split("\n"), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except ValueError as exc:
            return f"line {number} is not valid JSON ({exc.msg} at column {exc.colno}): {line.strip()[:80]!r}; " \
                   "fix or remove that line"
        if not isinstance(row, dict):
            return f"line {number} is a JSON {type(row).__name__}, not an object; write each row as {{\"question\": ..., \"answer\": ...}}"
        rows.append((number, row))
    return _mixed_types(rows)


def _json_kind(value: Any) -> str:
    """A JSON value's type in the words of a message: 'text', 'a list', 'a number', ..."""
    if isinstance(value, str):
        return "text"
    if isinstance(value, bool):
        return "true/false"
    return {int: "a number", float: "a number", list: "a list", dict: "an object"}.get(type(value), type(value).__name__)


def _mixed_types(lines: list[tuple[int, dict]]) -> str | None:
    """The first line whose value of a key has another JSON type than the first line that has that key
    (the loader cannot make one column of both), or None."""
    first: dict[str, tuple[int, str]] = {}
    for number, row in lines:
        for key, value in row.items():
            if value is None:
                continue
            kind = _json_kind(value)
            seen = first.setdefault(key, (number, kind))
            if seen[1] != kind:
                return (f"line {number}: '{key}' is {kind} where line {seen[0]} has {seen[1]}; give '{key}' one type "
                        f"in every row (a question and its answer as text)")
    return None


def row_label(source: str, i: int) -> str:
    """How a data error names the row at (0-based) position ``i`` of ``source``, in the one numbering
    of every data error: the line the row is on, as an editor numbers it (from 1), for a JSON-lines or
    CSV file (blank lines and a CSV's header counted); otherwise the row counted from 1."""
    lines = _row_lines(source)
    if lines is not None and i < len(lines):
        return f"line {lines[i]}"
    return f"row {i + 1} (counting from 1)"


def _row_lines(source: str) -> list[int] | None:
    """The line (from 1) each row of a local JSON-lines or CSV file starts on, or None for any other source."""
    path = Path(str(source)).expanduser()
    if path.suffix.lower() not in (".jsonl", ".json", ".csv") or not looks_like_path(str(source)) or not path.is_file():
        return None
    stat = path.stat()
    return _line_starts(str(path), stat.st_mtime_ns, stat.st_size)


@functools.lru_cache(maxsize=8)
def _line_starts(path: str, mtime_ns: int, size: int) -> list[int] | None:
    """:func:`_row_lines` of one version of a file (read once for all the rows an error names)."""
    import csv
    import io
    import json

    path, suffix = Path(path), Path(path).suffix.lower()
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None
    if suffix == ".csv":
        reader, starts, start = csv.reader(io.StringIO(text, newline="")), [], 1
        for record in reader:
            if any(cell.strip() for cell in record):  # the loader skips blank lines
                starts.append(start)
            start = reader.line_num + 1
        return starts[1:]  # the first record is the header
    if suffix == ".json":
        try:
            json.loads(text)
            return None  # one JSON document: its rows are not lines
        except ValueError:
            pass
    return [number for number, line in enumerate(text.split("\n"), 1) if line.strip()]


def _innermost(exc: BaseException) -> str:
    """The most specific message of an exception chain (datasets wraps the parser's error)."""
    messages = []
    while exc is not None:
        if str(exc).strip():
            messages.append(str(exc).strip())
        exc = exc.__cause__ or exc.__context__
    return messages[-1] if messages else "no reason given by the loader"


class MissingColumns(DataError):
    """A dataset lacks a column the task reads. How to name the columns depends on the command (a
    training config sets ``data.question_column``; ``eval`` has no such option), so a command may
    say its own fix: ``raise exc.with_fix("...") from None``."""

    #: The fix for a run: the config names the columns.
    CONFIG_FIX = "Rename the columns, or set data.question_column / data.answer_column to the file's names."

    def __init__(self, source: str, missing: list[str], have: list[str], fix: str = CONFIG_FIX):
        self.source, self.missing, self.have = source, missing, have
        super().__init__(f"dataset '{source}' lacks column(s) {', '.join(missing)}; it has {', '.join(have) or 'none'}. "
                         + fix)

    def with_fix(self, fix: str) -> "MissingColumns":
        return MissingColumns(self.source, self.missing, self.have, fix)


#: Column separators of a CSV saved by a spreadsheet in another locale (Excel: ';' where ',' is the decimal mark).
OTHER_SEPARATORS = (";", "\t", "|")


def require_columns(ds, columns: list[str], source: str) -> None:
    missing = [c for c in columns if c not in ds.column_names]
    if missing and str(source).lower().endswith(".csv") and len(ds.column_names) == 1:
        sep = next((s for s in OTHER_SEPARATORS if s in ds.column_names[0]), None)
        if sep is not None:
            raise DataError(f"dataset '{source}' has one column, {ds.column_names[0]!r}: its columns are separated by "
                            f"{sep!r}, not commas. Save it as comma-separated CSV (or as JSONL, one object per line)")
    if missing:
        raise MissingColumns(source, missing, list(ds.column_names))
    if len(ds) == 0:
        raise DataError(f"dataset '{source}' is empty")


#: The column that says which kind of problem a row is (``data.categories`` keeps some kinds only).
CATEGORY_COLUMN = "category"


def keep_categories(rows, categories: list[str], source: str, *, limit: int | None = None):
    """The rows whose ``category`` is one of ``categories``, at most ``limit`` of them, in their order.

    ``rows`` is a ``datasets.Dataset`` or a list of dicts. Raises :class:`DataError` when the rows say no
    kind, or when a kind asked for is not among theirs (a misspelt name would train on nothing)."""
    table = isinstance(rows, list)
    columns = set(rows[0]) if table and rows else set(() if table else rows.column_names)
    wanted = [str(c) for c in categories]
    if not wanted:
        raise DataError("data.categories is an empty list, which keeps no row; remove it (every row) or name "
                        "the kinds of problem to keep")
    if CATEGORY_COLUMN not in columns:
        raise DataError(f"data.categories={wanted} keeps rows by their '{CATEGORY_COLUMN}' column, and "
                        f"'{source}' has none (its columns: {', '.join(sorted(columns)) or 'none'}); remove "
                        f"data.categories or add the column")
    kinds = [str(k) for k in (r[CATEGORY_COLUMN] for r in rows)] if table else [str(k) for k in rows[CATEGORY_COLUMN]]
    have = sorted(set(kinds))
    unknown = [c for c in wanted if c not in have]
    if unknown:
        raise DataError(f"data.categories names {', '.join(map(repr, unknown))}, which no row of '{source}' is; "
                        f"its kinds: {', '.join(have)}")
    keep = [i for i, k in enumerate(kinds) if k in wanted][:limit]
    return [rows[i] for i in keep] if table else rows.select(keep)


def chat_prompt(question: str, system_prompt: str | None) -> list[dict[str, str]]:
    messages = []
    if system_prompt:
        messages.append({"role": "system", "content": system_prompt})
    messages.append({"role": "user", "content": question})
    return messages


def split_seed(seed: int, split: str) -> int:
    """The generator seed of a split: ``train`` uses ``seed``, any held-out split ``seed + 1``,
    so offline evaluation problems never repeat the training ones."""
    return seed + (split != "train")


def synthetic_dataset(
    make_rows: Callable[..., list[dict[str, Any]]],
    *,
    split: str,
    seed: int,
    num_synthetic: int,
    limit: int | None,
    system_prompt: str | None,
    columns: tuple[str, ...] = ("answer",),
    gold_parser: Callable[[str], str | None] | None = None,
):
    """A task's offline rows as chat prompts, the one way every task builds its synthetic data.

    ``make_rows(n, seed=...)`` returns ``n`` dicts with a ``question`` and the ``columns``
    (``answer`` first); at most ``limit`` of ``num_synthetic`` rows are made, with the split's
    seed (:func:`split_seed`). ``gold_parser`` turns a generated answer into the reference
    string (GSM8K's ``#### N`` into ``N``).
    """
    import datasets

    count = num_synthetic if limit is None else min(num_synthetic, limit)
    rows = make_rows(count, seed=split_seed(seed, split))
    out: dict[str, list[Any]] = {"prompt": [chat_prompt(r["question"], system_prompt) for r in rows]}
    for column in columns:
        out[column] = [r.get(column, "") for r in rows]
    if gold_parser is not None:
        out["answer"] = [gold_parser(str(a)) for a in out["answer"]]
    return datasets.Dataset.from_dict(out)


def to_prompt_dataset(
    rows,
    *,
    source: str,
    system_prompt: str | None,
    question_column: str = "question",
    answer_column: str = "answer",
    gold_parser: Callable[[str], str | None] | None = None,
    limit: int | None = None,
    keep_columns: list[str] | bool | None = None,
):
    """Map rows to ``prompt`` + ``answer``; every unparseable gold answer is reported by row.

    ``keep_columns`` lists columns carried over unchanged; ``True`` carries every column of the
    rows under its own name (the question and answer columns too), as TRL hands a dataset's columns
    to reward functions: a reward asking for ``ground_truth`` gets it.
    """
    import datasets

    require_columns(rows, [question_column, answer_column], source)
    if limit is not None:
        rows = rows.select(range(min(limit, len(rows))))
    questions = rows[question_column]
    golds = rows[answer_column]
    bad = []
    out: dict[str, list[Any]] = {"prompt": [], "answer": []}
    for i, (q, g) in enumerate(zip(questions, golds)):
        if q is not None and not isinstance(q, str):
            bad.append(f"{row_label(source, i)}: column '{question_column}' holds {_json_kind(q)} ({str(q)[:60]}), "
                       "not text; write the question as a string")
            continue
        if q is None or not q.strip():
            bad.append(f"{row_label(source, i)}: column '{question_column}' is empty")
            continue
        gold = gold_parser(str(g)) if gold_parser is not None else (None if g is None else str(g).strip())
        if gold is None or gold == "":
            bad.append(f"{row_label(source, i)}: cannot read a reference answer from column '{answer_column}': "
                       f"{str(g)[-80:]!r}")
            continue
        out["prompt"].append(chat_prompt(q.strip(), system_prompt))
        out["answer"].append(gold)
    if bad:
        shown = "\n  ".join(bad[:5])
        more = f"\n  ... and {len(bad) - 5} more" if len(bad) > 5 else ""
        raise DataError(f"dataset '{source}' has {len(bad)} malformed row(s):\n  {shown}{more}")
    if keep_columns is True:
        keep_columns = list(rows.column_names)
    for col in keep_columns or []:
        if col in rows.column_names and col not in out:
            out[col] = list(rows[col])
    return datasets.Dataset.from_dict(out)


def load_qa_dataset(
    source: str,
    *,
    system_prompt: str | None = None,
    question_column: str = "question",
    answer_column: str = "answer",
    split: str = "train",
    subset: str | None = None,
    limit: int | None = None,
    gold_parser: Callable[[str], str | None] | None = None,
    keep_columns: list[str] | bool | None = None,
):
    """Any question/reference-answer dataset (local file or hub) as chat prompts."""
    rows = load_table(source, split=split, subset=subset)
    return to_prompt_dataset(
        rows,
        source=source,
        system_prompt=system_prompt,
        question_column=question_column,
        answer_column=answer_column,
        gold_parser=gold_parser,
        limit=limit,
        keep_columns=keep_columns,
    )


def prompt_lengths(ds, tokenizer) -> list[int]:
    """Token count of each chat prompt as the model will see it (template + generation prompt)."""
    lengths = []
    for p in ds["prompt"]:
        if isinstance(p, list):
            text = tokenizer.apply_chat_template(p, tokenize=False, add_generation_prompt=True)
        else:
            text = p
        lengths.append(len(tokenizer(text, add_special_tokens=False)["input_ids"]))
    return lengths


def repeated_rows_note(ds) -> str | None:
    """``data: 3 of 12 rows repeat an earlier row ...`` when rows have the same prompt and answer as an
    earlier one (each copy is trained on, as often as it appears), else None."""
    import json

    seen, repeats = set(), 0
    for prompt, answer in zip(ds["prompt"], ds["answer"]):
        key = json.dumps([prompt, answer], sort_keys=True, default=str)
        repeats += key in seen
        seen.add(key)
    if not repeats:
        return None
    return (f"data: {repeats} of {len(ds)} rows repeat an earlier row (the same prompt and answer); each copy is "
            "trained on as often as it appears: remove the copies unless that is meant")


def filter_long_prompts(ds, tokenizer, max_tokens: int, *, log: Callable[[str], None] = print):
    """Drop prompts longer than ``max_tokens`` (TRL no longer truncates prompts) and say how many."""
    lengths = prompt_lengths(ds, tokenizer)
    keep = [i for i, n in enumerate(lengths) if n <= max_tokens]
    dropped = len(lengths) - len(keep)
    if dropped:
        log(f"data: dropped {dropped} of {len(lengths)} prompts longer than {max_tokens} tokens "
            f"(longest {max(lengths)}); raise data.max_prompt_tokens to keep them")
    if not keep:
        raise DataError(f"every prompt is longer than data.max_prompt_tokens={max_tokens}; raise it")
    return ds.select(keep) if dropped else ds
