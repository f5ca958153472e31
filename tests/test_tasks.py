"""The task registry and the shape every task has: one Task, graded the same way everywhere."""

from __future__ import annotations

import importlib

import pytest

from unsloth_grpo.grading import Verdict
from unsloth_grpo.config import ConfigError
from unsloth_grpo.tasks import Task, available_tasks, get_task

TASKS = available_tasks()


def _smoke(name: str, *overrides: str):
    return importlib.import_module(f"unsloth_grpo.recipes.{name}").RECIPE.resolve(preset="smoke",
                                                                                overrides=list(overrides))


def test_every_module_of_the_package_is_a_task_named_after_it():
    assert TASKS == ["arith", "code", "countdown", "custom", "gsm8k", "gsm8k_tools", "guess_number", "json_extract",
                     "reasoning_gym"]
    for name in TASKS:
        task = get_task(name)
        assert isinstance(task, Task) and task.name == name
        assert get_task(name) is task  # one object per task
        assert task.default_rewards, name


@pytest.mark.parametrize("name", TASKS)
def test_a_recipes_entry_module_opens_with_its_description(name):
    """The recipe's one line (``--help``) lives with the task; the entry module's docstring opens with the
    same sentence (what `pydoc unsloth_grpo.recipes.NAME` shows). The two copies must not drift."""
    from unsloth_grpo.tasks import get_recipe

    entry = importlib.import_module(f"unsloth_grpo.recipes.{name}")
    assert entry.__doc__.splitlines()[0] == get_recipe(name).description
    assert entry.RECIPE is get_recipe(name)


def test_an_unknown_task_is_a_config_error_naming_the_nearest_and_every_task():
    with pytest.raises(ConfigError, match=r"task='gsm8kk' is not a task of this package; did you mean 'gsm8k'\? "
                                          r"choose one of: arith, code, .*json_extract"):
        get_task("gsm8kk")
    with pytest.raises(ValueError, match="not a task of this package"):  # a ConfigError is a ValueError
        get_task("_task")  # the shape's own module is no task


@pytest.mark.parametrize("name", [t for t in TASKS if t != "code"])  # code's grader runs the sandbox: test_task_code
def test_grade_and_the_recipes_grader_give_the_same_verdict_on_the_tasks_own_rows(name):
    cfg = _smoke(name)
    task = get_task(name)
    rows = [dict(r) for r in task.load(cfg)][:4]
    grader = task.grader(cfg)
    for row in rows:
        for completion in (task.gold_completion(row), "<answer>\n0\n</answer>", "no answer"):
            if completion is None:
                continue
            verdict = task.grade(completion, row["answer"])
            assert isinstance(verdict, Verdict), (name, completion)
            assert bool(grader(completion, row["answer"])) == verdict.correct, (name, completion)
        if task.gold_completion(row) is not None:
            assert task.grade(task.gold_completion(row), row["answer"]).correct, name


@pytest.mark.parametrize("name", [t for t in TASKS if t != "code"])
def test_every_task_shuffles_its_rows_when_the_config_says_so(name):
    # guess_number used to forget data.shuffle_seed
    from unsloth_grpo.training.train import load_task_dataset

    plain = load_task_dataset(_smoke(name, "data.num_synthetic=32"))
    shuffled = load_task_dataset(_smoke(name, "data.num_synthetic=32", "data.shuffle_seed=3"))
    key = [str(p) + str(a) for p, a in zip(plain["prompt"], plain["answer"])]
    other = [str(p) + str(a) for p, a in zip(shuffled["prompt"], shuffled["answer"])]
    assert sorted(key) == sorted(other) and key != other


def test_evaluation_grades_with_what_the_task_says():
    from unsloth_grpo.training.held_out import eval_kwargs

    for name in TASKS:
        cfg = _smoke(name)
        task = get_task(name)
        kwargs = eval_kwargs(cfg)
        assert kwargs["matches_format"] == task.matches_format
        assert (kwargs["lenient_correct"] is None) == (task.lenient(cfg) is None)


def test_check_refuses_rewards_that_grade_another_tasks_answers(capsys):
    # gsm8k's recipe on countdown's problems would pay gsm8k's numeric correctness: the gold JSON of the
    # numbers, and 0 for a right equation
    from unsloth_grpo.recipes import gsm8k
    from unsloth_grpo.training.checks import config_problems

    assert gsm8k.main(["--preset", "smoke", "task=countdown", "--check"]) == 2
    err = capsys.readouterr().err
    assert "rewards[1] (correctness): grades another task's answers" in err and "countdown_equation" in err
    assert "Traceback" not in err
    # a stage's own rewards are held to the same rule; the task's own grading reward and a shaping reward
    # that reads no gold answer (integer_answer) are fine
    staged = _smoke("arith", "stages=[{name: g, max_steps: 2, rewards: [{name: correctness}]}]")
    assert any(p.startswith("stages[0] (g): rewards[0] (correctness): grades another task's answers")
               for p in config_problems(staged))
    assert not [p for p in config_problems(_smoke("gsm8k", "rewards=[{name: correctness}, {name: integer_answer}]"))
                if "another task" in p]


@pytest.mark.parametrize("name", TASKS)
def test_a_smoke_preset_keeps_every_one_of_its_own_prompts(name):
    # the code preset's prompt limit dropped 17 of its own 256 problems as too long for it
    from transformers import AutoTokenizer

    from unsloth_grpo.data import prompt_lengths
    from unsloth_grpo.models.ref import model_ref
    from unsloth_grpo.training.held_out import load_task_dataset

    cfg = _smoke(name)
    tokenizer = AutoTokenizer.from_pretrained(model_ref(cfg.model.name).path(log=lambda _m: None))
    lengths = prompt_lengths(load_task_dataset(cfg), tokenizer)
    too_long = sum(n > cfg.data.max_prompt_tokens for n in lengths)
    assert too_long == 0, (f"{name} smoke: {too_long} of {len(lengths)} prompts longer than data.max_prompt_tokens="
                           f"{cfg.data.max_prompt_tokens} (longest {max(lengths)})")


@pytest.mark.parametrize("name", ["", "._task", *(f".{t}" for t in TASKS)])
def test_module_doctests(name):
    import doctest

    assert doctest.testmod(importlib.import_module(f"unsloth_grpo.tasks{name}")).failed == 0
