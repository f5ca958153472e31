"""One rule for every bad input: one paragraph naming the field, the value and the fix, exit code 2,
before any model loads, and no traceback unless ``--debug``.

Each case runs the real recipe command line in-process (``run_recipe``); ``--check`` and
``--print-config`` stop before anything heavy, and a stub trainer fails the test if a run would
start at all.
"""

from __future__ import annotations

import argparse
import json

import pytest
import yaml

from unsloth_grpo.cli.recipe import add_train_arguments, run_from_args, run_recipe
from unsloth_grpo.recipes import gsm8k


def _run(capsys, *argv: str) -> tuple[int, str, str]:
    code = run_recipe(gsm8k.RECIPE, ["--preset", "smoke", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def _refused(capsys, *argv: str) -> str:
    """Run and expect the bad-input answer; return its message."""
    code, _, err = _run(capsys, *argv)
    assert code == 2, err
    assert "Traceback" not in err
    (message,) = [line for line in err.splitlines() if line.startswith("error: ")]
    return message


def _never_train(*args, **kwargs):
    raise AssertionError("a run started although its input was bad")


def _run_with(argv: list[str], train_fn=_never_train) -> int:
    parser = argparse.ArgumentParser()
    add_train_arguments(parser, list(gsm8k.RECIPE.presets))
    return run_from_args(gsm8k.RECIPE, parser.parse_args(["--preset", "smoke", *argv]), train_fn=train_fn)


# ------------------------------------------------------------------ TRL's own fields


@pytest.mark.slow
def test_an_unknown_grpo_field_is_refused_before_loading_with_the_close_name(capsys):
    err = _refused(capsys, "--check", "training.epsilon_hgh=0.3")
    assert "training.epsilon_hgh is not a field of the installed TRL's GRPOConfig" in err
    assert "did you mean 'training.epsilon_high'?" in err


def test_an_unknown_key_under_the_old_training_extra_is_refused_before_loading(capsys):
    # it used to pass the check and fail in build_grpo_args, after the model had loaded
    err = _refused(capsys, "--check", "training.extra={epsilon_hgh: 0.3}")
    assert "training.epsilon_hgh" in err and "epsilon_high" in err


def test_a_grpo_field_the_toolkit_sets_names_the_key_that_owns_it(capsys):
    err = _refused(capsys, "--check", "training.use_cpu=true")
    assert "training.use_cpu=True" in err and "model.device" in err


def test_a_stray_key_never_reaches_the_trainer():
    assert _run_with(["training.extra={epsilon_hgh: 0.3}"]) == 2  # _never_train fails the test if called


# ------------------------------------------------------------------ task, lengths


def test_an_unknown_task_in_check_is_one_line_not_a_traceback(capsys):
    err = _refused(capsys, "--check", "task=gsm8kk")
    assert "task='gsm8kk' is not a task of this package; did you mean 'gsm8k'?" in err
    assert "countdown" in err  # the valid names come from the task package


def test_max_completion_length_zero_is_refused(capsys):
    err = _refused(capsys, "--check", "training.max_completion_length=0")
    assert "training.max_completion_length=0" in err and "at least 1 token" in err


# ------------------------------------------------------------------ strings stay as typed


@pytest.mark.parametrize("typed", ["007", "yes", "no", "on", "2026-11-30", "1e3", "null"])
def test_output_dir_is_the_text_as_typed(capsys, typed):
    code, out, _ = _run(capsys, "--print-config", "--output-dir", typed)
    assert code == 0
    assert yaml.safe_load(out)["output_dir"] == typed


@pytest.mark.parametrize("typed", ["007", "yes", "off", "2026-11-30"])
def test_any_string_field_keeps_yaml_booleans_numbers_and_dates_as_typed(capsys, typed):
    code, out, _ = _run(capsys, "--print-config", f"model.name={typed}", f"data.system_prompt={typed}")
    assert code == 0
    printed = yaml.safe_load(out)
    assert printed["model"]["name"] == typed and printed["data"]["system_prompt"] == typed


def test_a_config_file_keeps_typed_strings_too(tmp_path, capsys):
    path = tmp_path / "c.yaml"
    path.write_text("output_dir: 007\nmodel: {name: yes}\ntraining: {max_steps: 7}\n")
    code, out, _ = _run(capsys, "--print-config", "--config", str(path))
    printed = yaml.safe_load(out)
    assert code == 0 and (printed["output_dir"], printed["model"]["name"]) == ("007", "yes")
    assert printed["training"]["max_steps"] == 7  # numbers are still numbers where a number is meant


# ------------------------------------------------------------------ YAML syntax


def test_a_yaml_syntax_error_in_a_config_file_names_the_file_and_line(tmp_path, capsys):
    path = tmp_path / "broken.yaml"
    path.write_text("training:\n  max_steps: 5\n  temperature: [1.0\n")
    err = _refused(capsys, "--check", "--config", str(path))
    assert f"config file '{path}' is not valid YAML (line " in err and "fix the syntax" in err


def test_a_yaml_syntax_error_in_an_override_names_the_override(capsys):
    err = _refused(capsys, "--check", "training.report_to=[tensorboard")
    assert "override 'training.report_to=[tensorboard'" in err and "not valid YAML" in err


def test_debug_shows_the_traceback():
    from unsloth_grpo.config import ConfigError

    with pytest.raises(ConfigError, match="max_completion_length=0"):
        _run_with(["--debug", "--check", "training.max_completion_length=0"])


# ------------------------------------------------------------------ data files


def test_an_empty_jsonl_says_why(tmp_path, capsys):
    path = tmp_path / "empty.jsonl"
    path.write_text("")
    err = _refused(capsys, "--check", f"data.source={path}")
    assert f"could not read dataset '{path}' as json: the file holds no rows" in err


def test_a_malformed_jsonl_line_is_named_by_its_number(tmp_path, capsys):
    path = tmp_path / "rows.jsonl"
    rows = [json.dumps({"question": f"q{i}", "answer": f"#### {i}"}) for i in range(4)]
    rows[2] = '{"question": "q2" "answer": "#### 2"}'
    path.write_text("\n".join(rows) + "\n")
    err = _refused(capsys, "--check", f"data.source={path}")
    assert "line 3 is not valid JSON" in err and "fix or remove that line" in err


# ------------------------------------------------------------------ --resume


def test_resume_does_not_swallow_the_next_override(tmp_path):
    seen = {}

    def fake_train(cfg, resume=None, decision=None):
        seen.update(steps=cfg.training.max_steps, resume=resume)
        raise SystemExit(0)

    run = _finished_run(tmp_path / "run")  # a run to resume (--resume of nothing is refused)
    with pytest.raises(SystemExit):
        _run_with(["--output-dir", str(run), "--resume", "training.max_steps=5"], train_fn=fake_train)
    assert seen == {"steps": 5, "resume": True}


# ------------------------------------------------------------------ no half output folder


def test_a_start_that_fails_to_load_the_model_leaves_no_output_folder(tmp_path):
    from unsloth_grpo.training.train import train

    out = tmp_path / "run"
    cfg = gsm8k.RECIPE.resolve(preset="smoke", output_dir=str(out),
                               overrides=["model.backend=transformers", f"model.name={tmp_path / 'no-model'}"])
    with pytest.raises(Exception):  # noqa: B017 - whatever the loader raises for a missing model
        train(cfg)
    assert not out.exists()


# ------------------------------------------------------------------ issue 28: bad inputs that used to pass


def _snapshot(path) -> dict:
    """Every file under ``path`` with its bytes (empty for a directory that does not exist)."""
    from pathlib import Path

    root = Path(path)
    return {str(f.relative_to(root)): f.read_bytes() for f in sorted(root.rglob("*")) if f.is_file()} \
        if root.is_dir() else {}


def _refused_leaving(capsys, out, *argv: str) -> str:
    """Refused with exit 2 and no traceback, and the output directory exactly as it was before."""
    before, existed = _snapshot(out), out.exists()
    err = _refused(capsys, "--output-dir", str(out), *argv)
    assert out.exists() == existed and _snapshot(out) == before
    return err


@pytest.mark.parametrize("check", [True, False], ids=["check", "run"])
def test_an_unknown_builtin_model_lists_the_built_in_names(capsys, tmp_path, check):
    from unsloth_grpo.hardware.backend import BUILTIN_MODELS

    # it used to pass --check and fail after the imports, with a traceback and exit 1
    err = _refused_leaving(capsys, tmp_path / "run", *(["--check"] if check else []), "model.name=builtin:tinyy")
    assert "model.name='builtin:tinyy' is not a built-in model; did you mean 'builtin:tiny'?" in err
    assert all(name in err for name in BUILTIN_MODELS)  # the names come from the registry


def test_doctor_with_a_missing_config_file_is_one_line_and_exit_2(tmp_path, capsys):
    from unsloth_grpo.cli.main import main

    assert main(["doctor", "--no-network", "--config", str(tmp_path / "missing.yaml")]) == 2
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    assert err.strip() == f"error: config file '{tmp_path / 'missing.yaml'}' does not exist; check the path given " \
                          "to --config"
    broken = tmp_path / "broken.yaml"
    broken.write_text("model: [\n")
    assert main(["doctor", "--no-network", "--config", str(broken)]) == 2
    assert "is not valid YAML" in capsys.readouterr().err


def test_a_hub_dataset_with_the_hub_unreachable_fails_at_once_and_suggests_the_smoke_preset(
        capsys, tmp_path, monkeypatch):
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")  # the discard port: nothing answers
    out = tmp_path / "run"
    # no preset: the recipe's own hub dataset (an id no cache holds), as `--check` on a fresh clone
    code = run_recipe(gsm8k.RECIPE, ["--check", "--output-dir", str(out),
                                     "data.source=unsloth-grpo-tests/never-published"])
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err and not out.exists()
    assert "data.source='unsloth-grpo-tests/never-published' is a hub dataset that is not in the local cache, " \
           "and the hub 127.0.0.1 does not answer" in err
    assert "--preset smoke" in err
    assert "Retrying" not in err  # one probe, not the hub client's retries


def _recipe_refused(recipe, capsys, out, *argv: str) -> str:
    """Another recipe's answer to bad input, checked like :func:`_refused_leaving`."""
    before, existed = _snapshot(out), out.exists()
    code = run_recipe(recipe, ["--preset", "smoke", "--output-dir", str(out), *argv])
    err = capsys.readouterr().err
    assert code == 2, err
    assert "Traceback" not in err
    assert out.exists() == existed and _snapshot(out) == before
    (message,) = [line for line in err.splitlines() if line.startswith("error: ")]
    return message


@pytest.mark.parametrize("limit, check, existing", [(0, True, False), (0, False, False), (0, False, True),
                                                    (-3, True, True)])
def test_a_limit_that_leaves_no_rows_names_data_limit_before_loading(capsys, tmp_path, limit, check, existing):
    csv = tmp_path / "qa.csv"
    csv.write_text("question,answer\nWhat is 1 + 1?,2\nWhat is 2 + 2?,4\n")
    out = tmp_path / "run"
    if existing:
        out.mkdir()
        (out / "notes.txt").write_text("mine")
    # it used to pass --check with 0 rows, then fail after the model loaded, blaming
    # data.max_prompt_tokens and leaving config.yaml and .run.lock behind
    from unsloth_grpo.recipes import custom

    err = _recipe_refused(custom.RECIPE, capsys, out, *(["--check"] if check else []), f"data.source={csv}",
                          f"data.limit={limit}")
    assert f"data.limit={limit} leaves 0 rows to train on" in err


def test_a_limit_of_zero_on_synthetic_data_names_data_limit(capsys, tmp_path):
    err = _refused_leaving(capsys, tmp_path / "run", "--check", "data.limit=0")
    assert "data.limit=0 leaves 0 rows to train on" in err  # it said "num_synthetic=0"


@pytest.mark.parametrize("check", [True, False], ids=["check", "run"])
def test_a_code_row_whose_tests_do_not_parse_is_named_before_loading(capsys, tmp_path, check):
    from unsloth_grpo.recipes import code

    rows = [{"text": "Write add(a, b).", "test_list": ["assert add(1, 2) == 3"], "code": "def add(a, b):\n    return a + b"},
            {"text": "Write double(x).", "test_list": ["assert double(0) == 0", "assert double(2) == 4)"],
             "code": "def double(x):\n    return 2 * x"}]
    path = tmp_path / "mbpp.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    # it used to train on it: every completion, the right one too, failed that row's tests (reward 0)
    err = _recipe_refused(code.RECIPE, capsys, tmp_path / "run", *(["--check"] if check else []),
                          f"data.source={path}")
    assert f"{path} row 1: test 2 of 2 is not valid Python (unmatched ')', line 1): 'assert double(2) == 4)'" in err
    assert "Fix or remove that row" in err


# ------------------------------------------------------------------ --resume of nothing, of a finished run


def _finished_run(out, step: int = 40):
    """A run directory as a finished smoke run leaves it, without checkpoints (save_steps=0)."""
    from unsloth_grpo.config import dump_config
    from unsloth_grpo.training.checkpoint import mark_finished

    out.mkdir()
    dump_config(gsm8k.RECIPE.resolve(preset="smoke", output_dir=str(out)), out / "config.yaml")
    (out / "adapter_model.safetensors").write_bytes(b"final")
    (out / "metrics.jsonl").write_text("".join(json.dumps({"step": s, "reward": 0.1}) + "\n" for s in range(1, step + 1)))
    mark_finished(out, step=step, max_steps=step)
    return out


def test_resume_of_a_missing_directory_is_refused_not_a_fresh_start(capsys, tmp_path):
    # it used to train from step 0 without a word, into the mistyped directory
    err = _refused_leaving(capsys, tmp_path / "typo", "--resume")
    assert f"--resume: {tmp_path / 'typo'} does not exist, so there is no run to continue" in err
    assert "start without --resume" in err
    err = _refused(capsys, "--resume", str(tmp_path / "nowhere"))
    assert f"--resume {tmp_path / 'nowhere'}: no such directory" in err


def test_resume_of_a_directory_without_a_run_is_refused(capsys, tmp_path):
    out = tmp_path / "notes"
    out.mkdir()
    (out / "todo.txt").write_text("mine")
    err = _refused_leaving(capsys, out, "--resume")
    assert f"--resume: {out} holds no run to continue (no config.yaml, no checkpoints)" in err
    from unsloth_grpo.config import dump_config

    dump_config(gsm8k.RECIPE.resolve(preset="smoke", output_dir=str(out)), out / "config.yaml")
    err = _refused_leaving(capsys, out, "--resume")  # a run that stopped before its first checkpoint
    assert "has no checkpoint to continue from" in err and "Start without --resume to train it again" in err


def test_resume_of_a_finished_run_gives_advice_the_refusal_without_resume_agrees_with(capsys, tmp_path):
    from unsloth_grpo.cli.main import main

    run = _finished_run(tmp_path / "run")
    before = _snapshot(run)
    answers = []
    for argv in (["--output-dir", str(run), "--resume"], ["--resume", str(run)]):  # both forms of --resume
        assert main(["train", *argv]) == 2
        answers.append(capsys.readouterr().err)
    assert main(["train", "--config", str(run / "config.yaml")]) == 2  # without --resume
    answers.append(capsys.readouterr().err)
    for err in answers:
        assert "Traceback" not in err
        assert "finished at step 40" in err and "another --output-dir" in err
        assert "start without --resume" not in err  # the advice it used to give, which is refused
    assert "--resume training.max_steps=N" in answers[0]
    assert _snapshot(run) == before


def test_an_empty_or_damaged_parquet_says_so_not_utf8(capsys, tmp_path):
    import pandas as pd

    empty = tmp_path / "empty.parquet"
    pd.DataFrame({"question": pd.Series([], dtype=str), "answer": pd.Series([], dtype=str)}).to_parquet(empty)
    err = _refused_leaving(capsys, tmp_path / "run", "--check", f"data.source={empty}")
    # it said "'utf-8' codec can't decode byte ...; save the file as UTF-8 text" for a binary format
    assert f"could not read dataset '{empty}' as parquet: the file holds no rows" in err
    damaged = tmp_path / "damaged.parquet"
    damaged.write_bytes(b"PAR1 not really")
    err = _refused_leaving(capsys, tmp_path / "run", "--check", f"data.source={damaged}")
    assert "it is not a readable Parquet file" in err and "UTF-8" not in err


# ------------------------------------------------------------------ rewards, before any model loads

BROKEN_REWARDS = '''
def explodes(completions, **kwargs):
    raise RuntimeError("boom")


def one_value(completions, **kwargs):
    return [1.0]


def words(prompts, completions, answer, **kwargs):
    return ["high" for _ in completions]


def needs_tags(completions, **kwargs):
    # a copied reward that assumes the tags are there: untagged text has no <answer> to split on
    return [float(c[0]["content"].split("<answer>")[1].split("</answer>")[0].strip() == "1") for c in completions]
'''


@pytest.fixture
def broken_rewards(tmp_path, monkeypatch):
    (tmp_path / "broken_rewards_mod.py").write_text(BROKEN_REWARDS)
    monkeypatch.syspath_prepend(str(tmp_path))
    return "broken_rewards_mod"


def test_a_reward_parameter_of_the_wrong_type_names_the_reward_and_the_parameter(capsys):
    # it used to pass --check and end, after the model had loaded, in a TypeError naming neither
    err = _refused(capsys, "--check", 'rewards=[{name: xml_count, params: {per_tag: "a lot"}}]')
    assert "rewards[0] (xml_count)" in err and "per_tag='a lot' is a str; it takes a number" in err


def test_a_reward_parameter_of_the_wrong_type_never_reaches_the_trainer():
    assert _run_with(['rewards=[{name: xml_count, params: {once: "sometimes"}}]']) == 2


@pytest.mark.parametrize("name, said", [
    ("explodes", "reward 'explodes' raised RuntimeError: boom -- at sample 0"),
    ("one_value", "reward 'one_value' returned 1 values for 8 completions"),
    ("words", "reward 'words' returned 'high' of type str (expected a float or None) for sample 0"),
    ("needs_tags", "reward 'needs_tags' raised IndexError: list index out of range -- at sample 1: ''"),
])
def test_a_reward_that_fails_on_sample_completions_is_refused_by_check(capsys, broken_rewards, name, said):
    # --check used to say "config and data OK" for each of these; the run then crashed at step 1
    err = _refused(capsys, "--check", f"rewards=[{{name: '{broken_rewards}:{name}'}}]")
    assert f"rewards[0] ({broken_rewards}:{name}): {said}" in err
    assert "tried before loading the model" in err and "on_error: zero" in err


def test_a_failing_reward_is_refused_before_the_run_touches_its_output_dir(tmp_path, capsys, broken_rewards):
    # the real train(): refused before the run lock, config.yaml and the model
    fresh, existing = tmp_path / "fresh", tmp_path / "existing"
    existing.mkdir()
    (existing / "notes.txt").write_text("mine")
    for out in (fresh, existing):
        code = run_recipe(gsm8k.RECIPE, ["--preset", "smoke", "--output-dir", str(out),
                                         f"rewards=[{{name: '{broken_rewards}:explodes'}}]"])
        _, err = capsys.readouterr()
        assert code == 2 and "Traceback" not in err and "raised RuntimeError: boom" in err
    assert not fresh.exists()
    assert sorted(p.name for p in existing.iterdir()) == ["notes.txt"]  # no .run.lock, no config.yaml


def test_on_error_zero_lets_a_failing_reward_through_the_check(capsys, broken_rewards):
    code, out, err = _run(capsys, "--check",
                          f"rewards=[{{name: '{broken_rewards}:explodes', params: {{on_error: zero}}}}]")
    assert code == 0 and "config and data OK" in out, err


# ------------------------------------------------------------------ list positions in overrides


def test_a_reward_is_changed_by_its_position_in_the_list(capsys):
    # rewards.0.weight=2 used to end in "rewards: expected a list" without saying what works
    code, out, _ = _run(capsys, "--print-config", "rewards.0.weight=2", "rewards.1.params.reward=3")
    rewards = yaml.safe_load(out)["rewards"]
    assert code == 0 and [r["weight"] for r in rewards] == [2.0, 1.0]
    assert rewards[0]["params"] == {"per_tag": 0.25, "once": False, "require_answer": False}
    assert rewards[1]["params"] == {"reward": 3}


def test_a_list_position_past_the_end_says_how_to_give_the_whole_list(capsys):
    err = _refused(capsys, "--check", "rewards.5.weight=2")
    assert "rewards.5: 'rewards' has 2 entries (positions 0 to 1)" in err and "rewards=[...]" in err
