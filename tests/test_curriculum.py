"""The curriculum driven by GRPO's groups: the level rule on literal group outcomes, levels settled only
between optimizer steps, the reasoning_gym task's levels and refusals, and a tiny-model run whose level
moves when the rule says, every refill round of a step drawn at one level."""

from __future__ import annotations

import json

import pytest

from unsloth_grpo.training.curriculum import Curriculum, LevelRule, next_level

RULE = LevelRule(up=0.9, down=0.8, window=2, highest=3)


# --- the rule, on literal group outcomes ------------------------------------------------------------


def test_the_level_rule_on_literal_group_outcomes():
    assert next_level(1, right=9, wrong=0, groups=10, rule=RULE) == 2     # 90% all right: up
    assert next_level(1, right=8, wrong=0, groups=10, rule=RULE) == 1     # 80% all right: stays
    assert next_level(1, right=0, wrong=8, groups=10, rule=RULE) == 0     # 80% all wrong: down
    assert next_level(1, right=0, wrong=7, groups=10, rule=RULE) == 1     # 70% all wrong: stays
    assert next_level(1, right=3, wrong=3, groups=10, rule=RULE) == 1     # mixed: stays
    assert next_level(3, right=10, wrong=0, groups=10, rule=RULE) == 3    # the highest level: stays
    assert next_level(0, right=0, wrong=10, groups=10, rule=RULE) == 0    # the lowest level: stays
    assert next_level(2, right=0, wrong=0, groups=0, rule=RULE) == 2      # no group seen: stays
    # both thresholds met (a low bar both ways): up wins, the groups said the level is easy often enough
    assert next_level(1, right=5, wrong=5, groups=10, rule=LevelRule(up=0.5, down=0.5, highest=3)) == 2


class Pools:
    """A level source whose row at a level says the level: ``prompt`` is ``"<name> L<level> #<i>"``."""

    grading_reward = "correct"

    def __init__(self, start: int = 1, **rule) -> None:
        self.rules = {"a": {"up": 0.9, "down": 0.8, "window": 2, "highest": 3, **rule}}
        self.start = {"a": start}

    def rows(self, name, level):
        return [{"prompt": f"{name} L{level} #{i}", "answer": str(i)} for i in range(4)]


def groups(outcomes: str, G: int = 4) -> tuple[list, list[bool]]:
    """Completions of groups written as letters: ``R`` all right, ``W`` all wrong, ``M`` mixed."""
    correct = []
    for o in outcomes:
        correct += {"R": [True] * G, "W": [False] * G, "M": [True] + [False] * (G - 1)}[o]
    return ["a"] * len(correct), correct


def test_levels_change_only_between_steps_from_a_full_window():
    c = Curriculum(Pools(start=1))
    row = {"prompt": "placeholder", "answer": "?", "category": "a", "curriculum_slot": 2}
    other = {"prompt": "kept", "answer": "x", "category": "b", "curriculum_slot": -1}
    assert c.begin_step(0) and c.resolve([row, other]) == [{**row, "prompt": "a L1 #2", "answer": "2"}, other]
    c.observe(*groups("WWWW"), 4)
    c.observe(*groups("WWWW"), 4)          # a refill round of the same step: counted, nothing settled
    assert not c.begin_step(0) and c.levels == {"a": 1}
    assert c.resolve([row])[0]["prompt"] == "a L1 #2"   # every round of a step reads the step's level
    assert c.begin_step(1) and c.levels == {"a": 1}     # one step of a window of two: not judged yet
    c.observe(*groups("WWWM"), 4)
    assert c.begin_step(2) and c.levels == {"a": 0}     # 11 of 12 groups all wrong >= 80%: down
    assert c.moves == [(2, "a", 1, 0)] and c.shares == {"a": (0.0, 11 / 12)}
    assert c.resolve([row])[0]["prompt"] == "a L0 #2"
    c.observe(*groups("RRRR"), 4)
    assert c.begin_step(3) and c.levels == {"a": 0}     # the window restarts at a new level
    c.observe(*groups("RRRR"), 4)
    assert c.begin_step(4) and c.levels == {"a": 1}     # 8 of 8 all right: up
    for step in range(5, 12):                            # all right every step: up to the top, and it stays
        c.observe(*groups("RRRR"), 4)
        c.begin_step(step)
    assert c.levels == {"a": 3} and c.moves[-1] == (8, "a", 2, 3)


def test_observe_returns_the_batch_s_own_counts_beside_the_step_s():
    c = Curriculum(Pools(start=1))
    c.begin_step(0)
    assert c.observe(*groups("RWMM"), 4) == {"a": [1, 1, 4, 2]}  # right, wrong, groups, mixed: curriculum/a/mixed 2/4
    assert c.observe(*groups("MM"), 4) == {"a": [0, 0, 2, 2]}    # a second round: its own counts only
    assert c.counts == {"a": [1, 1, 6]}                          # the step's, which the rule reads
    assert c.observe(["b"] * 4, [True] * 4, 4) == {}             # a dataset without a curriculum is not counted


def test_a_group_that_wrote_no_answer_is_not_all_wrong_unless_the_rule_says_so():
    """A model that has not learned the answer format yet gets every group wrong: that says nothing about the
    level, so by default such a group holds the level; ``unanswered: down`` counts it as all wrong."""
    categories, correct = groups("WWWW")
    nothing = [False] * len(correct)
    one_answer = [False] * 8 + [True] + [False] * 7          # the third group: one completion answered
    hold = Curriculum(Pools(start=1, window=1))
    hold.begin_step(0)
    assert hold.observe(categories, correct, 4, nothing) == {"a": [0, 0, 4, 0]}
    assert hold.begin_step(1) and hold.levels == {"a": 1}  # no answer in any group: the level holds
    assert hold.observe(categories, correct, 4, one_answer) == {"a": [0, 1, 4, 0]}
    down = Curriculum(Pools(start=1, window=1, unanswered="down"))
    down.begin_step(0)
    assert down.observe(categories, correct, 4, nothing) == {"a": [0, 4, 4, 0]}
    assert down.begin_step(1) and down.levels == {"a": 0}


# --- the reasoning_gym task's levels -----------------------------------------------------------------

reasoning_gym = pytest.importorskip("reasoning_gym", reason="the reasoning_gym extra: pip install 'unsloth-grpo[reasoning_gym]'")

from unsloth_grpo.recipes import reasoning_gym as recipe  # noqa: E402
from unsloth_grpo.tasks import _reasoning_gym_levels as levels  # noqa: E402
from unsloth_grpo.tasks import get_task  # noqa: E402
from unsloth_grpo.tasks import reasoning_gym as rg  # noqa: E402
from unsloth_grpo.training.checks import config_problems  # noqa: E402


def smoke(*overrides):
    return recipe.RECIPE.resolve(preset="smoke", overrides=list(overrides))


def test_a_dataset_without_a_curriculum_and_bad_settings_are_refused_by_name():
    assert rg.spec_problems([{"name": "gsm_symbolic", "curriculum": True}]) == [
        "data.datasets[0].curriculum: 'gsm_symbolic' has no curriculum in reasoning-gym (no levels to move between; "
        "102 of its 106 datasets have one); drop curriculum for this entry"]
    assert rg.spec_problems([{"name": "leg_counting", "config": {"max_animals": 3}, "curriculum": True}]) == [
        "data.datasets[0].config sets max_animals, which leg_counting's curriculum sets at each level; drop them, "
        "or drop curriculum"]
    assert rg.spec_problems([{"name": "chain_sum", "curriculum": {"up": 0, "windw": 3, "start_level": 11,
                                                                  "unanswered": "wrong"}}]) == [
        "data.datasets[0].curriculum.windw: unknown key; it takes up, down, window, start_level, unanswered",
        "data.datasets[0].curriculum.up=0 must be a share of groups above 0 and at most 1",
        "data.datasets[0].curriculum.unanswered='wrong' must be one of hold, down (a group that wrote no answer: the "
        "level holds, or it counts as all wrong)",
        "data.datasets[0].curriculum.start_level=11 must be a whole number from 0 to 10 (chain_sum's levels)"]
    assert rg.spec_problems([{"name": "chain_sum", "curriculum": True}, {"name": "acre"}]) == []
    cfg = smoke("data.datasets=[{name: chain_sum, curriculum: true}]",
                "rewards=[{name: xml_count, weight: 1.0}]")
    assert config_problems(cfg) == ["data.datasets: a curriculum judges groups by the reasoning_gym_correct reward; "
                                    "list it under rewards"]
    assert recipe.main(["--preset", "smoke", "--check", "data.datasets=[{name: gsm_symbolic, curriculum: true}]"]) == 2


def test_rows_sit_in_slots_and_each_level_has_its_own_pool():
    cfg = smoke("data.datasets=[{name: chain_sum, curriculum: {start_level: 1}}, {name: leg_counting}]",
                "data.num_synthetic=20")
    assert config_problems(cfg) == []
    task = get_task("reasoning_gym")
    rows = task.load(cfg)
    source = task.curriculum(cfg)
    assert source.start == {"chain_sum": 1} and source.rules["chain_sum"]["highest"] == 10
    chain = [r for r in rows if r["category"] == "chain_sum"]
    assert sorted(r["curriculum_slot"] for r in chain) == list(range(10))
    assert {r["curriculum_slot"] for r in rows if r["category"] == "leg_counting"} == {-1}
    start_pool = source.rows("chain_sum", 1)
    assert all(start_pool[r["curriculum_slot"]]["prompt"] == r["prompt"] for r in chain)  # the start pool is the rows
    for level, terms in ((0, (2, 2)), (1, (2, 3)), (4, (2, 6))):
        config = json.loads(source.rows("chain_sum", level)[0]["answer"])["config"]
        assert (config["min_terms"], config["max_terms"]) == terms, level
    assert source.rows("chain_sum", 4) == source.rows("chain_sum", 4)  # cached, and the same when regenerated
    assert levels.level_config("chain_sum", {}, 4) == levels.level_config("chain_sum", {}, 4)
    assert task.curriculum(smoke()) is None  # no entry asks for one: the difficulty is fixed
    assert source.rules["chain_sum"]["unanswered"] == "hold"
    # an answer block, right or wrong, or several of them, is an answer; none (or an unclosed one) is not
    assert source.answered("<reasoning>1 + 2</reasoning> <answer>4</answer>")
    assert source.answered("<answer>3</answer> or <answer>4</answer>")
    assert not source.answered("1 + 2 = 3") and not source.answered("<answer> 3")
    assert source.answered([{"role": "assistant", "content": "<answer>3</answer>"}])


def test_a_held_out_split_removes_the_questions_of_every_level_s_pool():
    """A run whose level moves trains on the other levels' pools: none of their questions may be held out.
    chain_sum at level 1 (two or three terms of up to two digits) asks many of level 0's one-digit sums, and
    a 64-row level-0 pool holds a good part of those."""
    cfg = smoke("data.datasets=[{name: chain_sum, curriculum: {start_level: 1}}]", "data.num_synthetic=64")
    task = get_task("reasoning_gym")
    source = task.curriculum(cfg)
    pooled = {r["prompt"][-1]["content"] for lvl in range(source.rules["chain_sum"]["highest"] + 1)
              for r in source.rows("chain_sum", lvl)}
    held = rg.load_reasoning_gym(cfg.data.datasets, split="test", num_synthetic=64, limit=200, seed=cfg.seed)
    assert len(held) > 100
    assert not pooled & {r["prompt"][-1]["content"] for r in held}


@pytest.mark.slow
def test_a_tiny_model_run_logs_the_level_every_step_and_it_moves_as_the_rule_says(tmp_path, monkeypatch, capsys):
    """The random tiny model gets no chain_sum right: every group is all wrong, so with ``down: 0.5`` over one
    step the level falls one a step from 3 to 0 and stays. Under refill, every round of a step reads one level."""
    seen = []  # (global step, level) at every generation round
    resolve = Curriculum.resolve

    def recording(self, rows):
        seen.append((self.step, self.levels["chain_sum"]))
        return resolve(self, rows)

    monkeypatch.setattr(Curriculum, "resolve", recording)
    out = tmp_path / "run"
    assert recipe.main(["--preset", "smoke", "--output-dir", str(out), "model.backend=transformers",
                        "training.max_steps=5", "training.dynamic_sampling=refill", "training.max_sampling_rounds=3",
                        "data.datasets=[{name: chain_sum, curriculum: {down: 0.5, up: 1.0, window: 1, "
                        "start_level: 3, unanswered: down}}]", "data.num_synthetic=32"]) == 0
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["curriculum/chain_sum/level"] for r in rows] == [3, 2, 1, 0, 0]
    assert [r.get("curriculum/chain_sum/all_wrong") for r in rows] == [None, 1.0, 1.0, 1.0, 1.0]
    assert [r["curriculum/chain_sum/mixed"] for r in rows] == [0.0] * 5  # no group held a right answer
    by_step = {}
    for step, level in seen:
        by_step.setdefault(step, set()).add(level)
    assert by_step == {0: {3}, 1: {2}, 2: {1}, 3: {0}, 4: {0}}  # one level per step, whatever the rounds
    assert len(seen) > 5 and any(r["dynamic_sampling/rounds"] > 1 for r in rows)  # refill rounds were read
    said = capsys.readouterr().out
    assert "curriculum: chain_sum level 3 -> 2 from step 2 (0% of its groups all right, 100% all wrong" in said
    assert "curriculum: chain_sum level 3 -> 0 (lowest 0, highest 3, 3 moves)" in said

    from unsloth_grpo.evaluation.plots import build_figures

    assert "curriculum" in [stem for stem, _ in build_figures(rows, [])]


def test_the_state_a_checkpoint_keeps_makes_the_same_decisions_as_never_stopping():
    class Source:
        rules = {"a": {"up": 0.9, "down": 0.8, "window": 2, "highest": 3}}
        start = {"a": 1}
        grading_reward = "r"

    outcomes = [[True] * 4, [True] * 4, [False] * 4, [True] * 4, [True] * 4, [True] * 4, [False] * 4]
    straight, stopped = Curriculum(Source()), Curriculum(Source())
    for step, correct in enumerate(outcomes):
        for c in (straight, stopped):
            c.begin_step(step)
            c.observe(["a"] * 4, correct, 2)
        if step == 3:  # saved after step 4, taken back into a curriculum built afresh, as a resumed run builds it
            saved = json.loads(json.dumps(stopped.state()))
            stopped = Curriculum(Source())
            assert stopped.levels == {"a": 1}
            stopped.load(saved)
    for c in (straight, stopped):
        c.begin_step(len(outcomes))
    assert stopped.state() == straight.state() and straight.levels["a"] == 3 and len(straight.moves) == 2


@pytest.mark.slow
def test_a_resumed_run_goes_on_from_the_saved_levels_not_the_start_level(tmp_path):
    """Stopped after 3 steps (levels 3, 2, 1) and resumed to 5: the level goes on falling from 1 to 0; on the old
    code the resumed run began again at its start level 3."""
    out = tmp_path / "run"
    args = ["--preset", "smoke", "--output-dir", str(out), "model.backend=transformers", "training.save_steps=1",
            "data.datasets=[{name: chain_sum, curriculum: {down: 0.5, up: 1.0, window: 1, start_level: 3, "
            "unanswered: down}}]",
            "data.num_synthetic=32"]
    assert recipe.main([*args, "training.max_steps=3"]) == 0
    from unsloth_grpo.training import checkpoint as ck
    from unsloth_grpo.training.curriculum import STATE_FILE

    newest = ck.list_checkpoints(out)[-1]
    assert newest.step == 3 and json.loads((newest.path / STATE_FILE).read_text())["levels"] == {"chain_sum": 1}
    assert recipe.main([*args, "--resume", "training.max_steps=5"]) == 0
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [(r["step"], r["curriculum/chain_sum/level"]) for r in rows] == [(1, 3), (2, 2), (3, 1), (4, 0), (5, 0)]
