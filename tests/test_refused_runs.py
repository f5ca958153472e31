"""A command that exits non-zero changes nothing of an existing run: every file of the run is the same,
byte for byte, after each refusal (issue 50). The run is laid out as a stopped multi-stage run leaves it
(no model is trained or loaded here: each refusal must come before that)."""

from __future__ import annotations

import json

import pytest
from cli_replay import no_model_loads, replay, snapshot

from unsloth_grpo.config import config_to_dict, dump_config, load_config
from unsloth_grpo.recipes import gsm8k
from unsloth_grpo.training import checkpoint as ck
from unsloth_grpo.training import stages as st


@pytest.fixture
def stopped_run(tmp_path, monkeypatch):
    """A run with two stages (SFT 4 steps, GRPO 6 steps) stopped at GRPO step 4, its start graded on
    the held-out problems (``evaluation.before_after``) as the run graded it."""
    from unsloth_grpo.evaluation.evaluate import write_eval
    from unsloth_grpo.training.held_out import held_out_rows

    monkeypatch.chdir(tmp_path)
    base = gsm8k.RECIPE.resolve(preset="smoke", output_dir=str(tmp_path / "run"),
                                overrides=["run.samples_every=0", "evaluation.before_after=true",
                                           "evaluation.limit=6"])
    d = config_to_dict(base)
    d["stages"] = [{"name": "preformat", "kind": "sft", "max_steps": 4, "num_examples": 32},
                   {"name": "format", "max_steps": 6, "rewards": [{"name": "xml_count", "weight": 1.0}]}]
    cfg = load_config(d)
    run = tmp_path / "run"
    run.mkdir()
    dump_config(cfg, run / "config.yaml")
    records = [{"index": i, "prompt": r["prompt"], "gold": r["answer"], "completion": "", "correct": False}
               for i, r in enumerate(held_out_rows(cfg))]
    write_eval({"accuracy": 0.0, "n": len(records), "records": records}, run / "eval_before")
    s1 = st.stage_dir(cfg, 1)
    s1.mkdir(parents=True)
    (s1 / "adapter_model.safetensors").write_bytes(b"stage 1")
    (s1 / st.STAGE_COMPLETE).write_text(json.dumps({"stage": 1, "name": "preformat", "kind": "sft", "steps": 4}))
    s2 = st.stage_dir(cfg, 2)
    s2.mkdir(parents=True)
    dump_config(st.stage_config(cfg, 2), s2 / "config.yaml")
    for step in (2, 4):
        staged = s2 / f"checkpoint-{step}"
        staged.mkdir()
        (staged / "adapter_model.safetensors").write_bytes(b"step %d" % step)
        ck.finalize_checkpoint(staged, s2, step=step, stage=2, stage_name="format")
    no_model_loads(monkeypatch)
    return run


#: (the command, after the run's name; words its message must hold)
REFUSALS = [
    # a resume with nothing left to train: it rewrote config.yaml (max_steps 6 -> 4) before saying so,
    # and advised training.max_steps, a key a run with stages refuses
    (["--resume", "stages.1.max_steps=4"],
     ["is at step 4 and stages.1.max_steps is 4", "add stages.1.max_steps=N with N > 4"]),
    # the end graded on 2 problems against a start graded on 6: it trained, then failed in the comparison
    (["--resume", "evaluation.limit=2", "evaluation.headroom_prompts=4"],
     ["other held-out problems than its start", "graded on 6 problems", "evaluation.limit=2 (the run's: 6)"]),
    (["--resume", "evaluation.split=train"], ["evaluation.split='train' (the run's: 'test')"]),
    # the run's folder again without --resume: an earlier run is there
    ([], ["checkpoints of an earlier run", "--resume"]),
]


@pytest.mark.parametrize("argv, said", REFUSALS, ids=[" ".join(a) or "no --resume" for a, _ in REFUSALS])
def test_a_refused_command_leaves_the_run_as_it_was(stopped_run, capsys, argv, said):
    before = snapshot(stopped_run)
    code = replay(["recipes.gsm8k", "--config", str(stopped_run / "config.yaml"), *argv])
    out, err = capsys.readouterr()
    assert code == 2, out + err
    assert "Traceback" not in out + err
    message = err[err.index("error: "):]
    assert all(words in message for words in said), message
    assert snapshot(stopped_run) == before


def test_a_resume_of_another_task_leaves_the_run_as_it_was(stopped_run, capsys):
    before = snapshot(stopped_run)
    assert replay(["recipes.countdown", "--resume", str(stopped_run)]) == 2
    assert "holds a run of the gsm8k task" in capsys.readouterr().err
    assert snapshot(stopped_run) == before


def test_the_held_out_check_passes_a_resume_that_grades_the_same_problems(stopped_run):
    from unsloth_grpo.training.held_out import refuse_other_held_out

    cfg = load_config(stopped_run / "config.yaml")
    refuse_other_held_out(cfg, stopped_run / "eval_before")  # the run's own settings: no refusal
    refuse_other_held_out(cfg, stopped_run / "no-such-folder")  # nothing graded: nothing to compare
