"""One way to call a reward (TRL's: every argument by keyword), the trial of every reward before the
model loads, and a reward that fails mid-run ending cleanly with the checkpoint to resume from."""

from __future__ import annotations

import asyncio
import importlib
import json
import sys
import textwrap

import pytest

from unsloth_grpo.rewards import RewardError, build_reward_functions
from unsloth_grpo.rewards.calling import as_completion, one_sample, trl_keywords

CHAT = [{"role": "system", "content": "Answer in tags."}, {"role": "user", "content": "What is 2 + 2?"}]


@pytest.fixture
def reward_module(tmp_path, monkeypatch):
    """Write ``source`` as an importable module ``name`` (fresh each time) and return its name."""
    monkeypatch.syspath_prepend(str(tmp_path))

    def write(name: str, source: str) -> str:
        (tmp_path / f"{name}.py").write_text(textwrap.dedent(source))
        sys.modules.pop(name, None)
        importlib.invalidate_caches()
        return name

    yield write


# ------------------------------------------------------------------ the calling path


def test_a_wrapped_notebook_reward_is_called_by_keyword_and_reruns_name_the_failing_sample(reward_module):
    # the wrapper used to call fn(completions, **kwargs): "got multiple values for argument 'prompts'",
    # and its per-sample re-runs failed the same way, so the culprit was always "sample 0"
    mod = reward_module("nb_mod", '''
        def correctness_reward_func(prompts, completions, answer, **kwargs):
            replies = [c[0]["content"] for c in completions]
            if any(r == "crash" for r in replies):
                raise ValueError("cannot read " + prompts[0][-1]["content"])
            return [2.0 if r == a else 0.0 for r, a in zip(replies, answer)]
    ''')
    (fn,), _ = build_reward_functions([f"{mod}:correctness_reward_func"])
    def trl_call(texts):  # what TRL hands every reward: keywords only, chat completions after chat prompts
        n = len(texts)
        kwargs = trl_keywords([CHAT] * n, completion_ids=[[1]] * n, columns={"answer": ["4"] * n})
        return fn(completions=[as_completion(t, CHAT) for t in texts], **kwargs)

    assert trl_call(["4", "5"]) == [2.0, 0.0]
    with pytest.raises(RewardError) as err:
        trl_call(["4", "5", "crash"])
    assert "raised ValueError: cannot read What is 2 + 2? -- at sample 2: 'crash' (prompt 'What is 2 + 2?')" \
        in str(err.value)


def test_params_of_a_custom_reward_are_bound_and_it_is_still_called_by_keyword(reward_module):
    mod = reward_module("param_mod", '''
        def bonus_reward(prompts, completions, answer, bonus: float = 1.0, **kwargs):
            return [bonus if c[0]["content"] == a else 0.0 for c, a in zip(completions, answer)]
    ''')
    (fn,), _ = build_reward_functions([{"name": f"{mod}:bonus_reward", "params": {"bonus": 3.0}}])
    kwargs = trl_keywords([CHAT], columns={"answer": ["4"]})
    assert fn(completions=[as_completion("4", CHAT)], **kwargs) == [3.0]
    with pytest.raises(ValueError, match=r"reward 'param_mod:bonus_reward': parameter bonus='lots' is a str; "
                                         r"it takes a number \(default 1.0\)"):
        build_reward_functions([{"name": f"{mod}:bonus_reward", "params": {"bonus": "lots"}}])


def test_an_async_reward_is_awaited_like_trl_does_also_inside_a_running_loop(reward_module):
    mod = reward_module("async_mod", '''
        import asyncio

        async def slow_judge(completions, **kwargs):
            await asyncio.sleep(0)
            return [float(len(c[0]["content"])) for c in completions]
    ''')
    (fn,), _ = build_reward_functions([f"{mod}:slow_judge"])
    completions = [as_completion("abc", CHAT)]
    assert fn(completions=completions, **trl_keywords([CHAT])) == [3.0]

    async def inside_a_notebook():  # Jupyter runs cells inside an event loop
        return fn(completions=completions, **trl_keywords([CHAT]))

    assert asyncio.run(inside_a_notebook()) == [3.0]


def test_one_sample_slices_per_completion_lists_and_silences_the_logging_hooks():
    logged = []
    kwargs = {"prompts": ["a", "b"], "answer": ["1", "2"], "trainer_state": ["not", "sliced"],
              "log_metric": lambda *a: logged.append(a), "tag": "x"}
    one = one_sample(kwargs, 1, 2)
    assert one["prompts"] == ["b"] and one["answer"] == ["2"] and one["tag"] == "x"
    assert one["trainer_state"] == ["not", "sliced"]
    one["log_metric"]("rewards/x", 1.0)
    assert logged == []


@pytest.mark.parametrize("wrapped", [False, True])
def test_one_bare_string_for_completions_is_refused_not_scored_per_character(wrapped):
    """A reward scores a batch; one string passed as ``completions`` used to be read as one completion per
    character (47 zeros for a 47-character completion). It is refused with the argument and the fix."""
    from unsloth_grpo.rewards import get_reward

    fn = build_reward_functions(["xml_count"])[0][0] if wrapped else get_reward("xml_count")
    text = "<reasoning>\nadd\n</reasoning>\n<answer>\n4\n</answer>"
    with pytest.raises(TypeError, match=r"reward 'xml_count': completions must be a list of completions.*"
                                        r"completions=\[text\]"):
        fn(completions=text)
    assert fn(completions=[text]) == get_reward("xml_count")([text])  # a list of one is scored once
    assert len(fn(completions=[text])) == 1
    grader = get_reward("qa_correctness").grader  # the function's attributes are kept
    assert grader("<answer>4</answer>", "4").correct


def test_as_completion_follows_the_prompt():
    assert as_completion("hi", CHAT) == [{"role": "assistant", "content": "hi"}]
    assert as_completion("hi", "plain prompt") == "hi"
    messages = [{"role": "assistant", "content": "hi"}]
    assert as_completion(messages, CHAT) is messages


@pytest.mark.parametrize("name, params, said", [
    ("xml_count", {"per_tag": "a lot"}, "parameter per_tag='a lot' is a str; it takes a number (default 0.125)"),
    ("xml_count", {"once": 1}, "parameter once=1 is an int; it takes true or false (default True)"),
    ("correctness", {"ignore_inside": "think"}, "parameter ignore_inside='think' is a str; it takes a list (default ('reasoning', 'think'))"),
    ("overlong", {"max_length": "512"}, "parameter max_length='512' is a str; it takes a whole number or null (default None)"),
    ("json_schema", {"schema": 3}, "parameter schema=3 is an int; it takes a mapping or a string or null (default None)"),
])
def test_a_parameter_of_the_wrong_type_is_named(name, params, said):
    from unsloth_grpo.rewards import get_reward

    with pytest.raises(ValueError) as err:
        get_reward(name, **params)
    assert str(err.value) == f"reward {name!r}: {said}"


@pytest.mark.parametrize("name, params", [
    ("correctness", {"reward": 3, "tag": ["<ans>", "</ans>"], "partial": [[0.1, 1.0]], "unparseable": None}),
    ("correctness", {"ignore_inside": [["<scratch>", "</scratch>"]]}),
    ("overlong", {"max_length": 512.0, "cache": 64}),
    ("xml_count", {"per_tag": 0.25, "once": False}),
])
def test_parameters_of_the_right_type_pass(name, params):
    from unsloth_grpo.rewards import get_reward

    assert callable(get_reward(name, **params))


# ------------------------------------------------------------------ tried before the model loads


def _smoke(recipe: str = "gsm8k", *overrides: str):
    return importlib.import_module(f"unsloth_grpo.recipes.{recipe}").RECIPE.resolve(
        preset="smoke", overrides=list(overrides))


def _dataset(cfg):
    from unsloth_grpo.tasks import get_task

    return get_task(cfg.task).load(cfg)


def test_the_trial_passes_completions_and_columns_shaped_as_training_does(reward_module):
    from unsloth_grpo.training.checks import PROBE_TEXTS, reward_trial_problems

    mod = reward_module("spy_mod", '''
        SEEN = []

        def spy(prompts, completions, answer, completion_ids, trainer_state, log_metric, log_extra, **kwargs):
            SEEN.append(dict(prompts=prompts, completions=completions, answer=answer, ids=completion_ids,
                             step=trainer_state.global_step, other=sorted(kwargs)))
            log_metric("spy/calls", 1.0)
            return [0.0] * len(completions)
    ''')
    cfg = _smoke("countdown", f"rewards=[{{name: '{mod}:spy'}}]")
    ds = _dataset(cfg)
    assert reward_trial_problems(cfg, ds) == []
    (seen,) = sys.modules[mod].SEEN
    per_row = 1 + len(PROBE_TEXTS)
    assert len(seen["completions"]) == 2 * per_row
    assert all(c[0]["role"] == "assistant" for c in seen["completions"])  # chat prompts: chat completions
    assert seen["prompts"][0] == ds[0]["prompt"] and seen["prompts"][per_row] == ds[1]["prompt"]
    assert seen["answer"][:per_row] == [ds[0]["answer"]] * per_row
    assert seen["other"] == ["solution"]  # the dataset's other column, by its name
    assert seen["step"] == 0 and all(isinstance(i, int) for ids in seen["ids"] for i in ids)
    # the first completion of each row is the task's gold answer written out: its own grader pays it
    from unsloth_grpo.tasks.countdown import TASK

    grader = TASK.grader(cfg)
    assert grader(seen["completions"][0], ds[0]["answer"])


@pytest.mark.parametrize("task", ["gsm8k", "custom", "arith", "countdown", "json_extract", "code"])
def test_each_gold_completion_is_paid_by_the_tasks_own_grader(task):
    from unsloth_grpo.tasks import get_task

    cfg = _smoke(task)
    grader = get_task(task).grader(cfg)
    for row in list(_dataset(cfg))[:3]:
        gold = get_task(task).gold_completion(dict(row))
        assert gold and grader(gold, row["answer"]), (task, gold)


def test_the_rewards_of_a_grpo_stage_are_tried_too(reward_module):
    from unsloth_grpo.training.checks import reward_trial_problems

    mod = reward_module("stage_mod", '''
        def halves(completions, **kwargs):
            return [0.5] * (len(completions) // 2)
    ''')
    cfg = _smoke("arith", f"stages=[{{name: warm, kind: sft, max_steps: 1}}, "
                          f"{{name: rl, kind: grpo, max_steps: 1, rewards: [{{name: '{mod}:halves'}}]}}]")
    (problem,) = reward_trial_problems(cfg, _dataset(cfg))
    assert problem.startswith(f"stages[1] (rl): rewards[0] ({mod}:halves): reward 'halves' returned 4 values "
                              "for 8 completions")


def test_a_reward_that_prints_every_call_keeps_the_check_quiet(reward_module, capsys):
    from unsloth_grpo.training.checks import reward_trial_problems

    mod = reward_module("loud_mod", '''
        def loud(prompts, completions, answer, **kwargs):
            print("-" * 20, "Question:", prompts[0][-1]["content"])
            return [0.0] * len(completions)
    ''')
    cfg = _smoke("gsm8k", f"rewards=[{{name: '{mod}:loud'}}]")
    assert reward_trial_problems(cfg, _dataset(cfg)) == []
    assert "Question:" not in capsys.readouterr().out


def test_the_trial_imports_nothing_that_must_come_after_unsloth():
    # it runs before the backend is chosen: transformers, peft or trl loaded here would escape Unsloth's patches
    import subprocess

    code = ("import sys\n"
            "from unsloth_grpo.recipes.gsm8k import RECIPE\n"
            "from unsloth_grpo.training.checks import check_rewards_on_data\n"
            "from unsloth_grpo.tasks.gsm8k import TASK\n"
            "cfg = RECIPE.resolve(preset='smoke')\n"
            "data = TASK.load(cfg)\n"
            "before = {m for m in ('transformers', 'peft', 'trl', 'torch') if m in sys.modules}\n"
            "check_rewards_on_data(cfg, data)\n"
            "print(sorted({m for m in ('transformers', 'peft', 'trl', 'torch') if m in sys.modules} - before))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


# ------------------------------------------------------------------ a reward that fails mid-run


@pytest.mark.slow
def test_a_reward_failing_mid_run_stops_cleanly_with_a_checkpoint_that_resumes(tmp_path, reward_module, capsys):
    # it used to end in a traceback from inside TRL, with nothing saved since the last periodic checkpoint
    from unsloth_grpo.recipes.gsm8k import main
    from unsloth_grpo import runs

    mod = reward_module("late_mod", '''
        def late(completions, trainer_state, **kwargs):
            if trainer_state.global_step >= 2:
                raise KeyError("a key the first steps never needed")
            return [0.0] * len(completions)
    ''')
    run = tmp_path / "run"
    argv = ["--preset", "smoke", "--output-dir", str(run), "training.max_steps=4", "run.samples_every=0",
            f"rewards=[{{name: xml_count, params: {{per_tag: 0.25, once: false}}}}, {{name: '{mod}:late'}}]"]
    assert main(argv) == 5
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert "stopped: reward 'late' raised KeyError: 'a key the first steps never needed' -- at sample 0: " in err
    assert "(prompt '" in err and "while scoring the completions of step 3" in err
    checkpoint = run / "checkpoints" / "checkpoint-2"
    assert f"checkpoint {checkpoint} holds the run at step 2" in err
    assert f"resume with: unsloth-grpo train --config {run / 'config.yaml'} --resume" in err
    assert runs.read_marker(checkpoint)["step"] == 2 and not (run / "adapter_model.safetensors").exists()

    reward_module("late_mod", '''
        def late(completions, trainer_state, **kwargs):
            return [0.0] * len(completions)
    ''')
    assert main(["--resume", str(run)]) == 0
    steps = [json.loads(line)["step"] for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert steps == [1, 2, 3, 4] and (run / "adapter_model.safetensors").exists()


@pytest.mark.slow
def test_a_reward_failing_at_the_first_step_leaves_no_half_made_run(tmp_path, reward_module, capsys):
    from unsloth_grpo.recipes.gsm8k import main

    # the trial's stand-in token ids are bytes (< 256); the tiny model's real ids run to 511
    mod = reward_module("ids_mod", '''
        TABLE = [0.0] * 256

        def per_token(completions, completion_ids, **kwargs):
            return [sum(TABLE[i] for i in ids) for ids in completion_ids]
    ''')
    run = tmp_path / "run"
    assert main(["--preset", "smoke", "--check", f"rewards=[{{name: '{mod}:per_token'}}]"]) == 0
    capsys.readouterr()
    assert main(["--preset", "smoke", "--output-dir", str(run), "training.max_steps=2",
                 f"rewards=[{{name: '{mod}:per_token'}}]"]) == 5
    err = capsys.readouterr().err
    assert "Traceback" not in err and "reward 'per_token' raised IndexError: list index out of range" in err
    assert "before any step was trained, so nothing was kept" in err
    assert not run.exists()


# ------------------------------------------------------------------ slow rewards: timed, reported, stopped


SLOW_MODULE = """
import time


def naps(completions, **kwargs):
    time.sleep(0.05)
    return [1.0] * len(completions)


def hangs(completions, **kwargs):
    try:
        time.sleep(30)
    except Exception:  # a reward that swallows errors must still be stopped
        pass
    return [1.0] * len(completions)
"""


@pytest.fixture
def slow_module(tmp_path, monkeypatch):
    (tmp_path / "slow_rewards_mod.py").write_text(SLOW_MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    sys.modules.pop("slow_rewards_mod", None)
    return "slow_rewards_mod"


def test_a_slow_reward_call_is_reported_with_its_name_time_and_fix(slow_module, monkeypatch, capsys):
    from unsloth_grpo.rewards import wrapper

    monkeypatch.setattr(wrapper, "SLOW_CALL_S", 0.01)  # the test's small threshold; 10 s in a run
    [fn], _ = build_reward_functions([f"{slow_module}:naps"])
    completions = ["<answer>1</answer>"] * 4
    assert fn(completions) == [1.0] * 4
    [line] = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("warning: reward 'naps' took 0.") and "s for one call of 4 completions (" in line
    assert "ms per completion; reported from 0.01 s): every training step waits for it" in line
    assert "params: {timeout_s: N}" in line
    fn(completions)  # as slow again: said once, not at every step
    assert capsys.readouterr().err == ""
    assert fn.stats.calls == 2 and fn.stats.seconds >= 0.1 and fn.stats.slowest_s >= 0.05


def test_the_check_before_loading_reports_a_slow_reward(slow_module, monkeypatch, capsys):
    from unsloth_grpo.cli.recipe import run_recipe
    from unsloth_grpo.recipes import gsm8k
    from unsloth_grpo.rewards import wrapper

    monkeypatch.setattr(wrapper, "SLOW_CALL_S", 0.01)
    code = run_recipe(gsm8k.RECIPE, ["--preset", "smoke", "--check", f"rewards=[{{name: '{slow_module}:naps'}}]"])
    out, err = capsys.readouterr()
    assert code == 0 and "config and data OK" in out
    assert "warning: reward 'naps' took" in err  # before any model: the probe calls it as training will


@pytest.mark.parametrize("on_error", ["raise", "zero"])
def test_timeout_s_stops_a_reward_call_that_runs_over(slow_module, on_error):
    import time

    [fn], _ = build_reward_functions([{"name": f"{slow_module}:hangs",
                                       "params": {"timeout_s": 0.2, "on_error": on_error}}])
    start = time.perf_counter()
    if on_error == "raise":
        with pytest.raises(RewardError, match="reward 'hangs' ran past its timeout_s=0.2 on a call of 2 completions"):
            fn(["a", "b"])
    else:
        assert fn(["a", "b"]) == [0.0, 0.0]
        assert fn.stats.errors == 2
    assert time.perf_counter() - start < 5 and fn.stats.timeouts == 1


def test_timeout_s_must_be_a_positive_number():
    with pytest.raises(ValueError, match="timeout_s=0; give the longest a call may take"):
        build_reward_functions([{"name": "xml_count", "params": {"timeout_s": 0}}])
