"""An outside check of our figures: the same problems as an lm-evaluation-harness task.

``unsloth-grpo eval`` grades with the task's own grader. To see that nothing in our pipeline flatters
a run (the prompt, the chat template, the stop token, the answer reading), the same problems can be
graded by lm-evaluation-harness (``pip install -e ".[lmeval]"``), which renders the chat, generates
and extracts the answer with its own code. :func:`write_task` writes what it needs:

- ``problems.jsonl``: the problems ``eval`` graded (``question``, ``answer``: the gold number,
  ``category``);
- ``unsloth_grpo_gsm8k.yaml``: a ``generate_until`` task over that file with two filters, ``strict-match``
  (the number inside ``<answer>...</answer>``: what our strict accuracy pays) and ``flexible-extract``
  (the last number of the completion, lm-eval's own GSM8K rule: our lenient accuracy);
- ``system_prompt.txt``: the run's system prompt, for ``--system_instruction``;
- ``command.sh``: the ``lm_eval`` command for a merged export of the run.

Our lenient accuracy counts a problem right when strict does *or* the last number is right; lm-eval's
flexible filter reads the last number only, so the two can differ on a completion whose answer block
is right and which goes on to write another number. :func:`read_samples` counts lm-eval's verdicts
from its ``--log_samples`` output, for the comparison (docs/evaluation.md, tests/test_harness.py).
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Any, Iterable

TASK_NAME = "unsloth_grpo_gsm8k"
PROBLEMS_FILE = "problems.jsonl"
SYSTEM_PROMPT_FILE = "system_prompt.txt"
COMMAND_FILE = "command.sh"
#: What :func:`write_task` writes into its folder (with the default task name).
TASK_FILES = (PROBLEMS_FILE, f"{TASK_NAME}.yaml", SYSTEM_PROMPT_FILE, COMMAND_FILE)

#: The task file, in lm-eval 0.4's YAML. ``{data}``, ``{max_tokens}``, ``{stops}`` and ``{name}`` are filled in.
TASK_TEMPLATE = """\
# An lm-evaluation-harness task over problems written by `unsloth-grpo eval --lm-eval-task DIR`.
# strict-match reads the number inside <answer>...</answer> (unsloth-grpo's strict accuracy);
# flexible-extract reads the last number of the completion (lm-eval's GSM8K rule; our lenient accuracy).
task: {name}
dataset_path: json
dataset_kwargs:
  data_files:
    test: {data}
test_split: test
output_type: generate_until
doc_to_text: "{{{{question}}}}"
doc_to_target: "{{{{answer}}}}"
generation_kwargs:
  until: {stops}
  do_sample: false
  temperature: 0.0
  max_gen_toks: {max_tokens}
metric_list:
  - metric: exact_match
    aggregation: mean
    higher_is_better: true
    ignore_case: true
    ignore_punctuation: false
    regexes_to_ignore:
      - ","
      - "\\\\$"
      - "\\\\.$"
filter_list:
  - name: strict-match
    filter:
      - function: regex
        regex_pattern: "<answer>\\\\s*\\\\$?(-?[0-9][0-9.,]*)\\\\s*</answer>"
      - function: take_first
  - name: flexible-extract
    filter:
      - function: regex
        group_select: -1
        regex_pattern: "(-?[$0-9.,]{{2,}})|(-?[0-9]+)"
      - function: take_first
metadata:
  version: 1.0
"""


def write_task(rows: Iterable[dict[str, Any]], out_dir: str | Path, *, system_prompt: str | None,
               max_new_tokens: int, stops: list[str], model_hint: str = "MERGED_DIR",
               name: str = TASK_NAME) -> Path:
    """Write the problems, the task file, the system prompt and the lm_eval command under ``out_dir``.

    ``rows`` are evaluation rows (chat ``prompt`` with the question as its last user turn, ``answer``,
    optional ``category``). Returns the task file's path.
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    problems = out / PROBLEMS_FILE
    with problems.open("w") as fh:
        for row in rows:
            prompt = row["prompt"]
            question = prompt if isinstance(prompt, str) else \
                [m["content"] for m in prompt if m.get("role") == "user"][-1]
            record = {"question": question, "answer": str(row["answer"])}
            if row.get("category") is not None:
                record["category"] = row["category"]
            fh.write(json.dumps(record) + "\n")
    task = out / f"{name}.yaml"
    task.write_text(TASK_TEMPLATE.format(name=name, data=json.dumps(str(problems.resolve())),
                                         max_tokens=int(max_new_tokens), stops=json.dumps(list(stops))))
    (out / SYSTEM_PROMPT_FILE).write_text(system_prompt or "")
    (out / COMMAND_FILE).write_text(command(out, model_hint, system_prompt=system_prompt, name=name) + "\n")
    return task


def command(task_dir: str | Path, model_dir: str | Path, *, system_prompt: str | None, name: str = TASK_NAME,
            batch_size: int = 16, output: str | Path | None = None) -> str:
    """The ``lm_eval`` command that grades ``model_dir`` (a merged export) on the task in ``task_dir``."""
    task_dir = Path(task_dir)
    parts = ["lm_eval", "run", "--model", "hf", "--model_args", f"pretrained={model_dir},dtype=float32",
             "--include_path", str(task_dir), "--tasks", name, "--apply_chat_template",
             "--batch_size", str(batch_size), "--log_samples",
             "--output_path", str(output if output is not None else task_dir / "results")]
    text = " ".join(shlex.quote(p) for p in parts)
    if system_prompt:
        text += f' --system_instruction "$(cat {shlex.quote(str(task_dir / SYSTEM_PROMPT_FILE))})"'
    return text


def stop_strings(tokenizer) -> list[str]:
    """The end-of-turn text lm-eval must stop at: the tokenizer's eos (as our generation stops on it)."""
    eos = getattr(tokenizer, "eos_token", None)
    return [eos] if eos else []


def read_samples(path: str | Path) -> dict[str, Any]:
    """Counts from lm-eval's ``samples_<task>_*.jsonl`` (``--log_samples``): ``n``, ``strict`` and
    ``flexible`` (problems each filter counted right) and the per-problem verdicts in file order."""
    rows = [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]
    by_doc: dict[int, dict[str, Any]] = {}
    for r in rows:
        entry = by_doc.setdefault(int(r["doc_id"]), {"doc_id": int(r["doc_id"]), "question": r["doc"]["question"],
                                                     "completion": (r.get("resps") or [[""]])[0][0]})
        entry[r["filter"]] = bool(r["exact_match"])
    docs = [by_doc[k] for k in sorted(by_doc)]
    return {"n": len(docs), "strict": sum(d.get("strict-match", False) for d in docs),
            "flexible": sum(d.get("flexible-extract", False) for d in docs), "docs": docs}


__all__ = ["COMMAND_FILE", "PROBLEMS_FILE", "SYSTEM_PROMPT_FILE", "TASK_NAME", "TASK_TEMPLATE", "command",
           "read_samples", "stop_strings", "write_task"]
