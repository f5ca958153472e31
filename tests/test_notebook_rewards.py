"""Rewards written in the signatures people copy (the Unsloth GRPO notebook's, TRL's documentation's)
work here unchanged: called by TRL's own reward loop, by the reward lab, by the check before loading,
and through both command forms (``python -m unsloth_grpo.recipes.custom`` and ``unsloth-grpo train``).

The reward module, the data, the config, the sample completions and the commands are the code blocks
of the "Coming from a notebook" section of docs/rewards.md, used as written: the page stays true.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "rewards.md"
SECTION = "## Coming from a notebook"
#: The section's code blocks in order, and the file each one is written to.
FILES = {"python": "my_rewards.py", "jsonl": ("qa.jsonl", "samples.jsonl"), "yaml": "my_rewards.yaml"}
NAMES = ["xmlcount_reward_func", "soft_format_reward_func", "strict_format_reward_func", "int_reward_func",
         "correctness_reward_func", "ground_truth_reward", "think_format_reward"]


def doc_blocks() -> list[tuple[str, str]]:
    """``(language, text)`` of each fenced block of the section, in order."""
    text = DOC.read_text()
    start = text.index(SECTION)
    end = text.find("\n## ", start + len(SECTION))
    section = text[start:] if end < 0 else text[start:end]
    return re.findall(r"```(\w+)\n(.*?)```", section, flags=re.S)


def commands() -> list[str]:
    (bash,) = [text for lang, text in doc_blocks() if lang == "bash"]
    return [line for line in bash.splitlines() if line.strip()]


@pytest.fixture
def workdir(tmp_path, monkeypatch):
    """A folder holding the section's files, made the current directory and importable."""
    jsonl = iter(FILES["jsonl"])
    for lang, text in doc_blocks():
        if lang in ("python", "yaml"):
            (tmp_path / FILES[lang]).write_text(text)
        elif lang == "jsonl":
            (tmp_path / next(jsonl)).write_text(text)
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    sys.modules.pop("my_rewards", None)
    yield tmp_path
    sys.modules.pop("my_rewards", None)


def test_the_section_holds_the_usual_signatures_and_the_commands():
    langs = [lang for lang, _ in doc_blocks()]
    assert langs == ["python", "jsonl", "yaml", "jsonl", "bash"]
    (module,) = [text for lang, text in doc_blocks() if lang == "python"]
    assert "def correctness_reward_func(prompts, completions, answer, **kwargs):" in module
    assert "def ground_truth_reward(completions, ground_truth, **kwargs):" in module
    assert module.count('c[0]["content"]') >= 4  # the chat-message indexing the notebooks use
    forms = [c.split()[0:2] for c in commands()]
    assert forms == [["unsloth-grpo", "rewards"], ["unsloth-grpo", "train"], ["python", "-m"]]


def _trl_scores(funcs, rows: list[dict], texts: list[str]):
    """The values TRL's own reward loop (``GRPOTrainer._calculate_rewards``, TRL 1.14) gets from
    ``funcs`` for ``texts`` after the rows' chat prompts: a trainer stand-in with what that method reads."""
    import torch  # noqa: F401 - the method builds tensors
    from transformers import TrainerState
    from trl import GRPOTrainer

    trainer = SimpleNamespace(
        accelerator=SimpleNamespace(device="cpu", is_main_process=True), args=SimpleNamespace(report_to=[]),
        reward_funcs=funcs, reward_processing_classes=[None] * len(funcs),
        reward_func_names=[f.__name__ for f in funcs], state=TrainerState(), environments=None,
        _log_completion_extra=lambda *a, **k: None, _log_metric=lambda *a, **k: None)
    prompts = [row["prompt"] for row in rows]
    completions = [[{"role": "assistant", "content": t}] for t in texts]
    ids = [list(t.encode()) for t in texts]
    return GRPOTrainer._calculate_rewards(trainer, rows, prompts, completions, ids).tolist()


def test_trls_reward_loop_calls_the_notebook_rewards_through_our_wrapper(workdir):
    # the wrapper used to call fn(completions, **kwargs): "got multiple values for argument 'prompts'"
    from unsloth_grpo.config import load_config
    from unsloth_grpo.rewards import build_reward_functions
    from unsloth_grpo.tasks.custom import load_dataset_for

    cfg = load_config("my_rewards.yaml")
    rows = [dict(r) for r in load_dataset_for(cfg)][:2]
    assert rows[0]["ground_truth"] == rows[0]["answer"] == "24"  # the file's column reaches the rewards by name
    funcs, _ = build_reward_functions(cfg.rewards)
    right = "<reasoning>\n6 * 4 = 24\n</reasoning>\n<answer>\n24\n</answer>\n"
    scores = _trl_scores(funcs, rows, [right, "no idea"])
    assert [f.__name__ for f in funcs] == NAMES
    assert scores[0] == [0.5, 0.0, 0.5, 0.5, 2.0, 1.0, 0.0]
    assert scores[1] == [0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0]


def test_the_lab_passes_them_and_names_what_the_notebook_patterns_cost(workdir, capsys):
    from unsloth_grpo.cli.main import main

    argv = shlex.split(commands()[0])[1:]
    assert main(argv) == 0  # exit 0: no reward fails, the total separates completions of one prompt
    out = " ".join(capsys.readouterr().out.split())
    assert "BLOCKING" not in out
    assert ("strict_format_reward_func: pays a completion 0.5 when it ends with a newline and 0 when it does not"
            in out)
    for name in ("strict_format_reward_func", "soft_format_reward_func", "think_format_reward"):
        assert f"{name}: pays reasoning written on one line" in out and "re.DOTALL" in out
    assert "think_format_reward: pays a completion" not in out  # '$' also matches before a final newline
    assert "xmlcount_reward_func: pays" not in out and "correctness_reward_func: pays" not in out


def test_the_lab_passes_chat_messages_after_chat_prompts_as_training_does(workdir):
    # what `rewards check --model` produces: text completions after the dataset's chat prompts; they
    # used to reach the rewards as strings, so every completion[0]["content"] reward was BLOCKING
    from unsloth_grpo.config import load_config
    from unsloth_grpo.evaluation import lab
    from unsloth_grpo.rewards import build_reward_functions
    from unsloth_grpo.tasks.custom import load_dataset_for

    cfg = load_config("my_rewards.yaml")
    rows = [dict(r) for r in load_dataset_for(cfg)][:2]
    texts = ["<reasoning>\nx\n</reasoning>\n<answer>\n24\n</answer>\n", "24", "<answer>\n8\n</answer>", "eight"]
    records = [{"group": i // 2, **rows[i // 2], "completion": t, "completion_ids": list(t.encode())}
               for i, t in enumerate(texts)]  # as generate_records writes them
    funcs, weights = build_reward_functions(cfg.rewards)
    report = lab.analyse(records, funcs, weights)
    assert report.blocking == [] and all(r.error is None for r in report.rewards)
    assert [r.values for r in report.rewards if r.name == "correctness_reward_func"] == [[2.0, 2.0, 2.0, 0.0]]
    assert [r.values for r in report.rewards if r.name == "ground_truth_reward"] == [[1.0, 1.0, 1.0, 0.0]]


def test_check_tries_them_on_the_real_columns_and_passes(workdir, capsys):
    from unsloth_grpo.recipes import custom

    assert custom.main(["--preset", "smoke", "--config", "my_rewards.yaml", "--check"]) == 0
    assert "config and data OK: 4 training rows" in capsys.readouterr().out


# ------------------------------------------------------------------ both command forms, for real


def _run(command: str, cwd: Path) -> subprocess.CompletedProcess:
    """One of the section's commands as a user types it in ``cwd``: ``python`` is this interpreter,
    ``unsloth-grpo`` the installed console script (its own folder, not ``cwd``, starts its sys.path)."""
    argv = shlex.split(command)
    script = Path(sys.executable).with_name("unsloth-grpo")
    assert script.exists(), f"the console script is not installed next to {sys.executable}"
    argv[0] = {"python": sys.executable, "unsloth-grpo": str(script)}[argv[0]]
    env = {**os.environ, "OMP_NUM_THREADS": "1",
           "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)}
    return subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=600)


@pytest.mark.slow
@pytest.mark.parametrize("form", [1, 2], ids=["unsloth-grpo-train", "python-m"])
def test_they_train_through_both_command_forms(workdir, form):
    # the console script used to fail to import my_rewards from the current directory
    command = commands()[form]
    proc = _run(command, workdir)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr
    out_dir = workdir / shlex.split(command)[shlex.split(command).index("--output-dir") + 1]
    rows = [json.loads(line) for line in (out_dir / "metrics.jsonl").read_text().splitlines()]
    assert len(rows) == 4
    for name in NAMES:
        assert all(f"rewards/{name}/mean" in row for row in rows), name
