"""No command replaces what it did not make (issue 42).

Every command that writes (train, export, eval, compare, plot, rewards check) asks the one guard,
:func:`unsloth_grpo.runs.output_problem`, before it loads anything: new files and folders are
written anywhere (inside a run too), anything that exists is replaced only when the user named it
with ``--force``, and a run, a path inside one or a folder that holds one is never replaced, even
with ``--force``. Each refusal below is replayed through the real command line from a scratch
working directory: exit code 2, one ``error:`` naming the problem and the fix, no traceback, no model
loaded, and every file in the directory as it was.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_replay import no_model_loads, replay, snapshot

from unsloth_grpo.recipes import gsm8k


def _make_run(run: Path, *, steps: int = 6, checkpoint: int | None = 6) -> Path:
    """A finished run as training leaves it (config, metrics, adapter, report, plots, a checkpoint)."""
    from unsloth_grpo.config import dump_config
    from unsloth_grpo.training.checkpoint import write_marker

    run.mkdir(parents=True)
    dump_config(gsm8k.RECIPE.resolve(preset="smoke", output_dir=str(run)), run / "config.yaml")
    (run / "metrics.jsonl").write_text("".join(json.dumps({"step": s, "reward": 0.1}) + "\n"
                                               for s in range(1, steps + 1)))
    (run / "adapter_config.json").write_text(json.dumps({"base_model_name_or_path": "builtin:tiny"}))
    (run / "adapter_model.safetensors").write_bytes(b"the trained adapter")
    (run / "report.md").write_text("the run's own before/after report")
    (run / "report.json").write_text("{}")
    (run / "plots").mkdir()
    (run / "plots" / "reward.png").write_bytes(b"the run's plot")
    if checkpoint is not None:
        ckpt = run / "checkpoints" / f"checkpoint-{checkpoint}"
        ckpt.mkdir(parents=True)
        (ckpt / "adapter_model.safetensors").write_bytes(b"weights")
        (ckpt / "adapter_config.json").write_text(json.dumps({"base_model_name_or_path": "builtin:tiny"}))
        write_marker(ckpt, step=checkpoint)
    return run


@pytest.fixture
def scratch(tmp_path, monkeypatch):
    """outputs/p/run (a run, with the user's notes.txt beside it in outputs/p), outputs/q (another run),
    a folder of the user's files, an earlier evaluation, the user's own PNGs, a file, completions."""
    monkeypatch.chdir(tmp_path)
    _make_run(tmp_path / "outputs" / "p" / "run")
    (tmp_path / "outputs" / "p" / "notes.txt").write_text("mine, beside the run")
    _make_run(tmp_path / "outputs" / "q")
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "README.md").write_text("my project's readme")
    (tmp_path / "earlier").mkdir()
    (tmp_path / "earlier" / "eval.json").write_text("{}")
    (tmp_path / "earlier" / "eval_samples.jsonl").write_text("")
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "reward.png").write_bytes(b"my own figure")
    (tmp_path / "existing.txt").write_text("mine")
    (tmp_path / "done.jsonl").write_text(json.dumps({"group": 0, "completion": "<answer>\n4\n</answer>",
                                                     "answer": "4"}) + "\n")
    no_model_loads(monkeypatch)
    return tmp_path


TRAIN = ["train", "--recipe", "gsm8k", "--preset", "smoke"]
EXPORT = ["export", "--model", "outputs/p/run"]
REWARDS = ["rewards", "check", "--completions", "done.jsonl", "--reward", "xml_count"]
EVAL = ["eval", "--model", "outputs/p/run", "--dataset", "synthetic", "--limit", "2"]
COMPARE = ["compare", "builtin:tiny", "outputs/p/run", "--dataset", "synthetic", "--limit", "2"]

#: (the command, words its message must hold). Each of them replaced or deleted what it had not made.
REFUSED = [
    # train: over a folder of the user's files (README.md, config.yaml would be replaced), a folder of runs,
    # a run's checkpoints (it would write its own there, and clear checkpoint-N folders it did not make)
    (TRAIN + ["--output-dir", "notes"], ["--output-dir notes exists and is not empty (and is not a run to continue)",
                                         "Choose a new or empty folder"]),
    (TRAIN + ["--output-dir", "outputs"], ["outputs holds runs: outputs/p/run, outputs/q"]),
    (TRAIN + ["--output-dir", "outputs/p/run/checkpoints"], ["lies inside a run, outputs/p/run"]),
    # export --force: the run and the file beside it, every run, the run's checkpoints (it exited 0)
    (EXPORT + ["--merged", "outputs/p", "--force"], ["--merged outputs/p: outputs/p holds a run: outputs/p/run",
                                                     "never replaces a run's files, even with --force"]),
    (EXPORT + ["--merged", "outputs", "--force"], ["outputs holds runs: outputs/p/run, outputs/q"]),
    (EXPORT + ["--merged", "outputs/p/run/checkpoints", "--force"],
     ["outputs/p/run/checkpoints lies inside a run, outputs/p/run", "Choose a new folder"]),
    (EXPORT + ["--gguf", "outputs/q/plots", "--force"], ["lies inside a run, outputs/q"]),
    # rewards check: a run's own file (with or without --force), any file that exists without --force
    (REWARDS + ["--save-completions", "outputs/p/run/metrics.jsonl"],
     ["outputs/p/run/metrics.jsonl lies inside a run, outputs/p/run", "even with --force"]),
    (REWARDS + ["--save-completions", "outputs/p/run/metrics.jsonl", "--force"], ["lies inside a run"]),
    (REWARDS + ["--save-completions", "existing.txt"],
     ["--save-completions existing.txt exists; nothing was written", "or pass --force to replace it"]),
    (REWARDS + ["--json", "outputs/q/report.json", "--force"], ["lies inside a run, outputs/q"]),
    # compare --output B replaced B's own report.md/report.json
    (COMPARE + ["--output", "outputs/p/run"], ["--output outputs/p/run is a run", "never among them"]),
    (COMPARE + ["--output", "outputs/p/run", "--force"], ["even with --force"]),
    (COMPARE + ["--output", "outputs/p/run/checkpoints/checkpoint-6"],  # nothing replaced, but among a run's files
     ["--output outputs/p/run/checkpoints/checkpoint-6 is a checkpoint", "never among them"]),
    (EVAL + ["--output", "outputs/q"], ["--output outputs/q is a run", "(e.g. outputs/q/results)"]),
    # eval: a file as --output (FileExistsError after the load), an earlier evaluation without --force
    (EVAL + ["--output", "existing.txt"], ["--output existing.txt is a file, not a folder", "Choose a new folder"]),
    (EVAL + ["--output", "earlier"], ["--output earlier holds eval.json, eval_samples.jsonl already",
                                      "or pass --force to replace them"]),
    # plot --out: the user's own PNGs without --force, another run's plots even with it
    (["plot", "outputs/p/run", "--out", "mine"], ["--out mine holds reward.png already", "--force"]),
    (["plot", "outputs/p/run", "--out", "outputs/q/plots", "--force"], ["lies inside a run, outputs/q"]),
]


@pytest.mark.parametrize("argv, said", REFUSED, ids=[" ".join(argv) for argv, _ in REFUSED])
def test_a_command_never_replaces_what_it_did_not_make(scratch, capsys, argv, said):
    before = snapshot(scratch)
    code = replay(argv)
    out, err = capsys.readouterr()
    assert code == 2, out + err
    assert "Traceback" not in out + err
    message = err[err.index("error: "):]
    assert all(words in message for words in said), message
    assert snapshot(scratch) == before  # nothing replaced, nothing written


def test_with_force_a_file_that_is_no_runs_is_replaced(scratch, capsys):
    assert replay(REWARDS + ["--save-completions", "existing.txt"]) == 2
    assert (scratch / "existing.txt").read_text() == "mine"
    assert replay(REWARDS + ["--save-completions", "existing.txt", "--force"]) in (0, 1)  # 1: the report's verdict
    assert json.loads((scratch / "existing.txt").read_text())["completion"] == "<answer>\n4\n</answer>"
    # a new file inside a run is written: it replaces nothing of the run's
    assert replay(REWARDS + ["--save-completions", "outputs/p/run/completions.jsonl"]) in (0, 1)
    assert (scratch / "outputs" / "p" / "run" / "completions.jsonl").is_file()
    capsys.readouterr()


def test_the_guard_writes_new_things_anywhere_and_replaces_only_with_force(scratch):
    from unsloth_grpo.runs import output_problem

    # new folders and files: beside a run, inside one, inside a folder of the user's
    for target, kw in [("outputs/p/run/eval", {"writes": ["eval.json"]}), ("outputs/new", {}),
                       ("outputs/p/run/completions.jsonl", {"file": True}), ("notes/eval", {"writes": ["eval.json"]})]:
        assert output_problem(target, "--output", force=False, **kw) is None, target
    # what exists: refused without --force, replaced with it, unless a run is in the way
    assert "or pass --force" in output_problem("earlier", "--output", writes=["eval.json"], force=False)
    assert output_problem("earlier", "--output", writes=["eval.json"], force=True) is None
    assert output_problem("notes", "--merged", force=True) is None
    assert output_problem("earlier", "--output", writes=["report.md"], force=False) is None  # not there: nothing replaced
    # a run for training: the resume rules decide; a stage of a run is inside one
    assert output_problem("outputs/q", "--output-dir", run_ok=True) is None
    assert "is a run" in output_problem("outputs/q", "--merged", force=True)
    # a file where a folder is meant, and a folder under a file
    assert "existing.txt/sub: existing.txt is a file, so no folder can be made under it" in \
        output_problem("existing.txt/sub", "--output", writes=["eval.json"])


# ------------------------------------------------------------------ runs that stopped, and folders that are no runs


def test_eval_and_generate_on_a_run_killed_mid_training_name_its_checkpoint(scratch, capsys):
    run = scratch / "outputs" / "killed"
    _make_run(run, steps=40, checkpoint=40)
    for name in ("adapter_config.json", "adapter_model.safetensors", "report.md", "report.json"):
        (run / name).unlink()  # killed at step 41: no final adapter
    for argv in (["eval", "--model", "outputs/killed", "--output", "outputs/ev"],
                 ["generate", "--model", "outputs/killed", "What is 2 + 2?"]):
        assert replay(argv) == 2
        err = capsys.readouterr().err
        assert "Traceback" not in err and "a download or a copy that did not finish" not in err
        assert "outputs/killed is a run with no final adapter" in err
        assert "use its latest checkpoint, outputs/killed/checkpoints/checkpoint-40, instead" in err
    # export says the same
    assert replay(["export", "--model", "outputs/killed", "--merged", "outputs/m"]) == 2
    assert "outputs/killed/checkpoints/checkpoint-40" in capsys.readouterr().err


def test_train_resume_of_a_folder_that_is_no_run_says_so_before_the_machine(scratch, capsys):
    (scratch / "docs").mkdir()
    (scratch / "docs" / "index.md").write_text("# docs")
    before = snapshot(scratch)
    assert replay(["train", "--resume", "docs"]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert "--resume docs: docs is not a run: a run directory holds the config.yaml its training wrote" in err
    assert "CUDA" not in err and "cache" not in err
    assert snapshot(scratch) == before
