"""Tricks a run can learn instead of the task, named: copying the prompt, one pattern for every problem,
format paid without answers. Tested on completions a real 135M model wrote (tests/data/degenerate_completions.jsonl)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from unsloth_grpo.grading.copying import (
    answer_block_problem,
    answer_shape,
    copied_quantity,
    copied_share,
    prompt_placeholders,
)
from unsloth_grpo.rewards import get_reward
from unsloth_grpo.rewards.format import soft_format, strict_format, xml_count
from unsloth_grpo.tasks.gsm8k import EXAMPLE_SYSTEM_PROMPT, make_synthetic_problems
from unsloth_grpo.training.monitor import TRICK_WARNINGS, HealthChecker, HealthThresholds
from unsloth_grpo.tasks import get_task
from unsloth_grpo.training.tricks import TrickWatcher, operators

FIXTURES = Path(__file__).parent / "data" / "degenerate_completions.jsonl"

#: The gsm8k smollm2 preset's system prompt before this fix: a template with placeholders, one worked addition.
OLD_SYSTEM_PROMPT = (
    "Solve the math word problem. Reply in exactly this format:\n"
    "<reasoning>\nthe calculation\n</reasoning>\n<answer>\nthe final number\n</answer>\n"
    "Example:\nQuestion: Ann has 3 pens and buys 4 more. How many pens does Ann have now?\n"
    "<reasoning>\n3 + 4 = 7\n</reasoning>\n<answer>\n7\n</answer>"
)
TEMPLATE = "<reasoning>\nthe calculation\n</reasoning>\n<answer>\nthe final number\n</answer>"


def fixtures(kind: str) -> list[dict]:
    rows = [json.loads(line) for line in FIXTURES.read_text().splitlines() if line.strip()]
    return [r for r in rows if r["kind"] == kind]


def chat(system: str, question: str) -> list[dict]:
    return [{"role": "system", "content": system}, {"role": "user", "content": question}]


# ---------------------------------------------------------------- the format rewards pay no copied template


def test_the_fixtures_are_what_the_real_model_wrote():
    copies, adds = fixtures("template_copy"), fixtures("always_add")
    assert len(copies) >= 4 and len(adds) >= 8
    assert all("the final number" in r["completion"] for r in copies)
    assert {r["category"] for r in adds} == {"addition", "subtraction"}
    assert all(r["source"] for r in copies + adds)  # each says which run and step wrote it


def test_no_format_reward_pays_the_copied_template():
    # the old preset paid xml_count (once=False, 0.25 a tag) 1.0 for every one of these
    rows = fixtures("template_copy")
    prompts, completions = [r["prompt"] for r in rows], [r["completion"] for r in rows]
    for fn in (xml_count(per_tag=0.25, once=False), xml_count(), soft_format(), strict_format()):
        assert fn(completions, prompts=prompts) == [0.0] * len(rows), fn
    # their first template with a number inside, once, is paid: what is refused is the copy, not the tags
    answered = [c[:c.index("</answer>") + len("</answer>")].replace("the final number", "7") for c in completions]
    assert all(v > 0 for v in xml_count(per_tag=0.25, once=False)(answered, prompts=prompts))


@pytest.mark.parametrize("completion, why", [
    (TEMPLATE, "the prompt's placeholder 'the final number'"),
    ("<reasoning>\n2 + 2\n</reasoning>\n<answer>\n\n</answer>", "an empty answer block"),
    ("<reasoning>\n2 + 2\n</reasoning>\n<answer>...</answer>", "an answer block of punctuation only ('...')"),
    ("<reasoning>a</reasoning><answer>4</answer><reasoning>b</reasoning><answer>4</answer>", "repeated answer blocks"),
    ("<reasoning>\n2 + 2 = 4\n</reasoning>", "no answer block"),
    ("<reasoning>\n2 + 2 = 4\n</reasoning>\n<answer>\n4\n</answer>", None),
])
def test_why_an_answer_block_holds_no_answer(completion, why):
    assert answer_block_problem(completion, chat(OLD_SYSTEM_PROMPT, "2 + 2?")) == why


def test_placeholders_are_the_prompts_answer_blocks_without_a_digit():
    assert prompt_placeholders(chat(OLD_SYSTEM_PROMPT, "q")) == {"the final number"}
    assert prompt_placeholders(chat(EXAMPLE_SYSTEM_PROMPT, "q")) == set()  # the preset's prompt has none
    assert prompt_placeholders("Answer in <answer>...</answer>") == {"..."}


def test_xml_count_keeps_partial_credit_for_a_model_that_has_not_answered_yet():
    prompt = chat(OLD_SYSTEM_PROMPT, "2 + 2?")
    assert xml_count(per_tag=0.25)(["<reasoning>\n2 + 2 = 4\n</reasoning>"], prompts=[prompt]) == [0.5]
    # the smoke presets' random model cannot write an answer: they pay tags alone, as before
    assert xml_count(per_tag=0.25, once=False, require_answer=False)([TEMPLATE], prompts=[prompt]) == [1.0]


# ---------------------------------------------------------------- what a completion copied


def test_copied_share_tells_a_copy_from_work_on_the_problem():
    prompt = chat(OLD_SYSTEM_PROMPT, "Bob had 12 eggs and sold 5 of them. How many eggs are left?")
    assert copied_share(TEMPLATE, prompt) >= 0.5
    assert copied_share("<reasoning>\n3 + 4 = 7\n</reasoning>\n<answer>\n7\n</answer>", prompt) > 0.8  # the example
    assert copied_share("<reasoning>\n12 - 5 = 7\n</reasoning>\n<answer>\n7\n</answer>", prompt, "7") == 0.0
    # words of the question itself are not a copy of the prompt
    assert copied_share("Bob had 12 eggs and sold 5 of them, so 12 - 5 = 7.", prompt, "7") == 0.0


def test_shapes_and_operators_ignore_the_numbers():
    assert answer_shape("<reasoning>12 - 5 = 7</reasoning>") == answer_shape("<reasoning>19 - 2 = 17</reasoning>")
    assert operators("13 + 6 = 7") == "+" and operators("15 - 6 = 9") == "-" and operators("no numbers") == ""


# ---------------------------------------------------------------- the watcher names the tricks


def watch(rows: list[dict], grades=None, window: int = 2, **kwargs) -> list[str]:
    seen = []
    watcher = TrickWatcher(seen.append, window=window, min_per_category=4, **kwargs)
    half = len(rows) // window
    for step in range(window):
        batch = rows[step * half:(step + 1) * half]
        watcher.observe(step + 1, [r["completion"] for r in batch], [r["prompt"] for r in batch],
                        {"answer": [r["answer"] for r in batch], "category": [r.get("category") for r in batch]},
                        None if grades is None else grades[step * half:(step + 1) * half])
    return [w.name for w in seen]


def test_the_copied_template_is_named():
    rows = fixtures("template_copy")
    assert "copies_prompt" in watch(rows)


def test_always_adding_is_named_one_pattern_and_a_category_gap():
    from unsloth_grpo.grading import grade

    rows = fixtures("always_add")
    grades = [float(bool(grade(r["completion"], r["answer"]))) for r in rows]
    names = watch(rows, grades)
    assert "one_pattern" in names and "category_gap" in names
    assert "copies_prompt" not in names


def test_a_model_that_does_the_task_is_left_alone():
    rows = []
    for p in make_synthetic_problems(32, seed=3, subset="easy", split="test"):
        a, op, b = p["answer"].split("=")[0].split()
        result = p["answer"].split("####")[1].strip()
        rows.append({"prompt": chat(EXAMPLE_SYSTEM_PROMPT, p["question"]), "answer": result, "category": p["category"],
                     "completion": f"<reasoning>\n{a} {op} {b} = {result}\n</reasoning>\n<answer>\n{result}\n</answer>"})
    assert watch(rows, [1.0] * len(rows)) == []


LEARNED = Path(__file__).parent / "data" / "learned_completions.jsonl"


def learned() -> list[dict]:
    """The 128 held-out completions of the real-model preset's seed 1 after its GRPO stage (the benchmark's
    grpo arm): the task learned, both operations, 92% and 88% strict; its errors are subtraction slips."""
    return [dict(json.loads(line), prompt=chat(EXAMPLE_SYSTEM_PROMPT, json.loads(line)["question"]))
            for line in LEARNED.read_text().splitlines() if line.strip()]


def steps_of_one_prompt(rows: list[dict], grades: list[float] | None, per_prompt: int = 8, window: int = 5) -> list[str]:
    """Replay ``rows`` as training saw the preset: one prompt a step, its group of ``per_prompt`` completions
    (each row repeated), through the watcher with training's own window (trick_window // 2 batches)."""
    seen = []
    watcher = TrickWatcher(seen.append, window=window)
    for step, row in enumerate(rows, 1):
        grade = None if grades is None else [grades[step - 1]] * per_prompt
        watcher.observe(step, [row["completion"]] * per_prompt, [row["prompt"]] * per_prompt,
                        {"answer": [row["answer"]] * per_prompt, "category": [row["category"]] * per_prompt}, grade)
    return [w.name for w in seen]


def test_working_on_the_problem_is_not_copying_an_example_that_shares_its_signs():
    """'11 - 6 = 5' shares '- 6 =' with the prompt's '15 - 6 = 9': arithmetic, not a copy. On the old code 13
    of the learned completions counted as half copied, and a healthy run was told it copies the prompt."""
    prompt = chat(EXAMPLE_SYSTEM_PROMPT, "Cara had 11 cards and sold 6 of them. How many cards are left?")
    assert copied_share("<reasoning>\n11 - 6 = 5\n</reasoning>\n<answer>\n5\n</answer>", prompt, "5") == 0.0
    assert copied_share("<reasoning>\n15 - 6 = 9\n</reasoning>\n<answer>\n9\n</answer>", prompt, "5") == 1.0
    assert max(copied_share(r["completion"], r["prompt"], r["answer"]) for r in learned()) < 0.5


def test_the_real_models_learned_completions_raise_no_trick_warning():
    """The preset's seed 1, one prompt a step: its subtraction slips put some groups at 0 right; on the old
    watcher (5 batches, 8 completions a kind) that read as 'never pays on subtraction' at step 6."""
    rows = learned()
    grades = [2.0 if r["correct"] else 0.0 for r in rows]
    order = sorted(range(len(rows)), key=lambda i: (rows[i]["correct"] or rows[i]["category"] == "addition", i))
    # the worst order a run could meet: the wrong subtractions first, beside right additions
    mixed = [i for pair in zip(order[:20], order[-20:]) for i in pair]
    assert steps_of_one_prompt([rows[i] for i in mixed], [grades[i] for i in mixed]) == []
    assert steps_of_one_prompt(rows, grades) == []


def test_the_tricks_are_still_named_one_prompt_a_step():
    from unsloth_grpo.grading import grade

    rows = fixtures("always_add")
    grades = [float(bool(grade(r["completion"], r["answer"]))) for r in rows]
    names = steps_of_one_prompt(rows, grades)
    assert "one_pattern" in names and "category_gap" in names
    assert "copies_prompt" in steps_of_one_prompt(fixtures("template_copy"), None)


def test_the_window_keeps_a_bounded_number_of_batches_whatever_the_prompts():
    """It grows past ``window`` batches only to see ``window_prompts`` different problems: a run over fewer
    problems, or one whose trainer passes no prompts, must not keep every batch it ever saw."""
    # without prompts each completion counts as its own problem: 8 a batch, so 5 batches hold enough
    for prompts, kept in ((lambda step: [chat(EXAMPLE_SYSTEM_PROMPT, "Ann has 2 pens.")] * 8, 16),
                          (lambda step: None, 5)):
        watcher = TrickWatcher(lambda w: None, window=5, window_prompts=16)
        for step in range(1, 60):
            watcher.observe(step, ["<reasoning>\n1 + 1 = 2\n</reasoning>\n<answer>\n2\n</answer>"] * 8,
                            prompts(step), {"answer": ["2"] * 8})
        assert len(watcher.batches) == kept
    # one new problem a step: the window holds the 16 newest, then slides
    watcher = TrickWatcher(lambda w: None, window=5, window_prompts=16)
    for step in range(1, 40):
        watcher.observe(step, ["x"] * 8, [chat(EXAMPLE_SYSTEM_PROMPT, f"problem {step}")] * 8, {})
    assert len(watcher.batches) == 16


def test_one_answer_for_every_problem_is_named_without_categories():
    rows = [{"prompt": chat(EXAMPLE_SYSTEM_PROMPT, f"q{i}"), "answer": str(i), "category": None,
             "completion": "<reasoning>\nI think\n</reasoning>\n<answer>\n9\n</answer>"} for i in range(16)]
    assert watch(rows) == ["one_pattern"]


def test_every_trick_warning_is_reachable_and_can_be_ignored():
    from unsloth_grpo.grading import grade

    rows = fixtures("always_add")
    grades = [float(bool(grade(r["completion"], r["answer"]))) for r in rows]
    names = set(watch(fixtures("template_copy"))) | set(watch(rows, grades)) | set(watch(quantities("grpo_copies")))
    assert names == set(TRICK_WARNINGS)
    assert watch(rows, grades, ignore=["one_pattern"]) == ["category_gap"]


# ---------------------------------------------------------------- the metric stream: format paid, answers not


def test_format_without_answers_fires_on_the_real_template_copy_run():
    stream = [json.loads(line) for line in (FIXTURES.parent / "template_copy_metrics.jsonl").read_text().splitlines()]
    warnings = HealthChecker().feed(stream)
    names = [w.name for w in warnings]
    assert "format_without_answers" in names
    fired = next(w for w in warnings if w.name == "format_without_answers")
    assert "grading reward stayed at 0" in fired.message and "require_answer" in fired.fix


def test_format_without_answers_stays_quiet_while_answers_come_in():
    # format first, then correctness: the way the preset's good seeds learned (docs/real_model.md)
    stream = [{"step": s, "reward": 1.0, "reward_std": 0.4, "frac_reward_zero_std": 0.2,
               "rewards/xml_count/mean": min(1.0, 0.1 * s), "rewards/correctness/mean": 0.0 if s < 12 else 0.4}
              for s in range(1, 40)]
    assert [w.name for w in HealthChecker(HealthThresholds()).feed(stream)] == []


def test_the_fix_for_a_copied_prompt_speaks_of_the_task_at_hand():
    # the code smoke run learned to repeat the system prompt's fence line; the fix it was given spoke of
    # answer tags and 'the final number', which the code task does not have
    from unsloth_grpo.rewards import get_reward
    from unsloth_grpo.tasks import code
    from unsloth_grpo.training.train import _watch_for_tricks

    cfg = code.RECIPE.resolve(preset="smoke")
    heard = []
    health = type("Health", (), {"report": staticmethod(heard.append)})()
    thresholds = HealthThresholds.from_dict(cfg.monitor)
    funcs = _watch_for_tricks(cfg, thresholds, health, [get_reward("code_block_format")])
    rows = code.TASK.load(cfg)
    fences = "```python\n" * 12
    for step in range(thresholds.trick_window):
        batch = [rows[i] for i in range(step * 4, step * 4 + 4)]
        funcs[0](prompts=[r["prompt"] for r in batch], completions=[fences] * 4, answer=[r["answer"] for r in batch])
    [warning] = [w for w in heard if w.name == "copies_prompt"]
    assert "```python" in warning.fix and "answer tags" not in warning.fix and "final number" not in warning.fix
    # a task with answer tags keeps its own words
    from unsloth_grpo.tasks import get_task

    assert "answer tags" in get_task("gsm8k").trick_fixes["copies_prompt"]


# ---------------------------------------------------------------- an answer copied from the question (issue 52)

QUANTITIES = Path(__file__).parent / "data" / "copied_quantity_completions.jsonl"


def quantities(kind: str) -> list[dict]:
    """The issue 52 fixture's rows of ``kind`` (its first line is the header that says where their shapes come
    from), each in the preset's prompt."""
    rows = [json.loads(line) for line in QUANTITIES.read_text().splitlines() if line.strip()]
    assert "issue 52" in rows[0]["header"]
    return [dict(r, prompt=chat(EXAMPLE_SYSTEM_PROMPT, r["question"])) for r in rows[1:] if r["kind"] == kind]


NADIA = "Nadia read for 6 minutes before lunch and 9 minutes after lunch. How many minutes did Nadia read in all?"


@pytest.mark.parametrize("completion, question, gold, copied", [
    # the issue's shapes: the first quantity, with or without its unit
    ("<reasoning>\n6 minutes\n</reasoning>\n<answer>\n6\n</answer>", NADIA, "15", "6"),
    ("<reasoning>\n2 cakes\n</reasoning>\n<answer>\n2 cakes\n</answer>", "sold 2 cakes, then 3 cakes", "5", "2"),
    ("<reasoning>\n6 + 9 = 15\n</reasoning>\n<answer>\n9\n</answer>", NADIA, "15", "9"),  # its own sum ignored
    ("<reasoning>\n11 - 9 = 1\n</reasoning>\n<answer>\n11\n</answer>", "had 11, gave 9", "2", "11"),
    # not copies: the right answer, a right answer that is one of the quantities, an arithmetic slip whose
    # result is a quantity, a wrong answer the question does not state, no answer block, no gold to compare with
    ("<reasoning>\n6 + 9 = 15\n</reasoning>\n<answer>\n15\n</answer>", NADIA, "15", None),
    ("<reasoning>\n12 - 6 = 6\n</reasoning>\n<answer>\n6\n</answer>", "had 12 dollars and paid 6", "6", None),
    ("<reasoning>\n17 - 8 = 8\n</reasoning>\n<answer>\n8\n</answer>", "had 17 dollars and paid 8", "9", None),
    ("<reasoning>\n2 cakes - 4 cakes = 2 cakes\n</reasoning>\n<answer>\n2\n</answer>", "sold 2 cakes, then 4 cakes", "6",
     None),  # a real GRPO arm's (seed 2): the wrong operation and a slip, with units, not a copy
    ("<reasoning>\n6 + 9 = 14\n</reasoning>\n<answer>\n14\n</answer>", NADIA, "15", None),
    ("<reasoning>\n6 minutes\n</reasoning>", NADIA, "15", None),
    ("<reasoning>\n6 minutes\n</reasoning>\n<answer>\n6\n</answer>", NADIA, None, None),
    # the question as a chat prompt: its user turn, never the system prompt's worked examples (3, 4, 7)
    ("<answer>7</answer>", chat(EXAMPLE_SYSTEM_PROMPT, NADIA), "15", None),
    ("<answer>9</answer>", chat(EXAMPLE_SYSTEM_PROMPT, NADIA), "15", "9"),
])
def test_an_answer_copied_from_the_question_is_told_from_a_result(completion, question, gold, copied):
    assert copied_quantity(completion, question, gold) == copied


def test_the_fixture_holds_the_issues_shapes_and_their_healthy_twins():
    copies, healthy = quantities("grpo_copies"), quantities("healthy")
    assert [r["question"] for r in copies] == [r["question"] for r in healthy] and len(copies) == 16
    assert "<reasoning>\n6 minutes\n</reasoning>\n<answer>\n6\n</answer>" == copies[0]["completion"]
    assert "<reasoning>\n6 + 9 = 15\n</reasoning>\n<answer>\n15\n</answer>" == healthy[0]["completion"]
    assert [r["question"][:30] for r in copies if copied_quantity(r["completion"], r["prompt"], r["answer"])] == [
        "Nadia read for 6 minutes befor", "On Monday the bakery sold 2 ca", "A ribbon is 2 cm long. Omar ti",
        "Uma and Vera have 11 stickers ", ]
    assert all(r["correct"] for r in healthy)
    assert not any(copied_quantity(r["completion"], r["prompt"], r["answer"]) for r in healthy)


def test_answers_copied_from_the_question_are_named_by_category_with_share_and_example():
    heard = []
    watcher = TrickWatcher(heard.append, window=2, min_per_category=4, fixes=get_task("gsm8k").trick_fixes)
    rows = quantities("grpo_copies")
    for step, batch in enumerate((rows[:8], rows[8:]), 1):
        watcher.observe(step, [r["completion"] for r in batch], [r["prompt"] for r in batch],
                        {"answer": [r["answer"] for r in batch], "category": [r["category"] for r in batch]})
    [warning] = [w for w in heard if w.name == "copies_quantity"]
    assert warning.step == 2
    assert warning.message.startswith("answers copied from the question over the last 16 completions (addition 3/8 "
                                      "(38%), subtraction 1/8 (12%)): the answer is a number the question states")
    assert "e.g. '<reasoning> 6 minutes </reasoning> <answer> 6 </answer>' (the question's 6; right: 15)" in warning.message
    assert warning.values["by_category"] == {"addition": {"copied": 3, "completions": 8, "share": 0.375},
                                             "subtraction": {"copied": 1, "completions": 8, "share": 0.125}}
    assert (warning.values["quantity"], warning.values["gold"], warning.values["question"]) == ("6", "15", NADIA)
    # the task's own fix: where to check it and what to change, in gsm8k's terms
    assert "--subset everyday" in warning.fix and "learning_rate" in warning.fix and "subset=varied" in warning.fix
    assert "worked_calculation" in warning.fix and get_reward("worked_calculation")  # the reward it names exists


def test_copied_quantities_are_named_one_prompt_a_step_and_healthy_completions_are_left_alone():
    assert "copies_quantity" in steps_of_one_prompt(quantities("grpo_copies"), None)
    healthy = quantities("healthy")
    assert steps_of_one_prompt(healthy, [2.0] * len(healthy)) == []
    assert watch(healthy, [2.0] * len(healthy)) == []
    # the real preset's completions (seed 1, its slips included) hold no copied quantity
    assert not any(copied_quantity(r["completion"], r["prompt"], r["answer"]) for r in learned())


def test_one_prompt_that_copies_is_not_a_shortcut():
    """A share of 25% in one kind is not enough alone: the copies must come from two problems or more (a real
    model at temperature 1 can repeat one slip on all 8 samples of one problem)."""
    rows = quantities("healthy")
    rows[0] = quantities("grpo_copies")[0]  # Nadia's 6, repeated 8 times: 8 of the 32 additions in the window
    assert "copies_quantity" not in steps_of_one_prompt(rows[:8], None, window=4)


# ---------------------------------------------------------------- advice that fits the run (issue 52)


@pytest.mark.parametrize("overrides, warmup", [([], ["addition"]), (["stages.0.data.categories=null"], None)])
def test_a_fix_the_runs_own_warm_up_declined_gives_the_advice_that_applies(overrides, warmup):
    """The smollm2 preset's warm-up trains on additions only, on purpose; its GRPO stage was told to give every
    kind worked examples. Told the run's warm-up, the watcher says why that is not the fix and what is; a run
    whose warm-up trains on every kind keeps the general advice."""
    from unsloth_grpo.recipes.gsm8k import RECIPE
    from unsloth_grpo.rewards import get_reward
    from unsloth_grpo.training.stages import stage_config, warmup_categories
    from unsloth_grpo.training.train import _watch_for_tricks

    cfg = RECIPE.resolve(preset="smollm2", overrides=overrides)
    assert warmup_categories(cfg, 1) is None and warmup_categories(cfg, 2) == warmup
    grpo = stage_config(cfg, 2)
    heard = []
    health = type("Health", (), {"report": staticmethod(heard.append)})()
    [watched] = _watch_for_tricks(grpo, HealthThresholds.from_dict(grpo.monitor), health, [get_reward("correctness")],
                                  warmup_categories(cfg, 2))
    for r in fixtures("always_add"):  # one prompt a step, a group of 8, as the preset trains
        watched(prompts=[r["prompt"]] * 8, completions=[r["completion"]] * 8, answer=[r["answer"]] * 8,
                category=[r["category"]] * 8)
    fixes = {w.name: w.fix for w in heard}
    assert set(fixes) == {"one_pattern", "category_gap"}
    for name, fix in fixes.items():
        if warmup:
            assert fix.startswith("This run's SFT warm-up trains on addition only, by design (its sft stage's "
                                  "data.categories), so worked examples of every kind are not the fix here: GRPO has "
                                  "to learn subtraction from the reward."), name
            assert "evaluation.headroom" in fix and "every kind of problem in the prompt" not in fix
        else:
            assert "This run's" not in fix and "worked example" in fix
    assert [w.values["warmup_categories"] for w in heard] == [warmup, warmup]  # health.jsonl says what it knew


def test_only_the_fixes_that_advise_every_kind_and_only_for_kinds_left_out_change():
    watcher = TrickWatcher(lambda w: None, warmup_categories=["addition"], fixes={"copies_prompt": "the task's"})
    assert watcher.fix("category_gap", "general", ["addition"]) == "general"  # additions were warmed up
    assert watcher.fix("copies_prompt", "general", ["subtraction"]) == "the task's"
    assert watcher.fix("one_pattern", "general", []) == "general"  # the one-answer form names no kind
    assert watcher.fix("category_gap", "general", ["subtraction"]).startswith("This run's SFT warm-up trains on addition")
    assert TrickWatcher(lambda w: None).fix("category_gap", "general", ["subtraction"]) == "general"


# ---------------------------------------------------------------- the shortcut in a real run's completions (issue 52)

REAL_RUNS = Path(__file__).parents[1] / "docs" / "real_model_results_everyday.json"


def test_a_real_grpo_arms_copied_quantities_are_found_and_more_sfts_completions_hold_none():
    """The smollm2 preset's benchmark on five seeds (`benchmarks/real_model.py --arms grpo sft_only`, graded on the
    everyday wording too; docs/real_model.md): every completion of every arm is kept. The GRPO arms answered some
    everyday additions with a number of the question (`<reasoning> 6 minutes </reasoning>` answered 6, `4 cm`); the
    warm-up and the more-SFT arms never did. The detector the trick watcher and `eval` use finds exactly those, and
    `eval`'s breakdown counts them by kind."""
    from unsloth_grpo.evaluation.evaluate import by_category

    runs = json.loads(REAL_RUNS.read_text())["runs"]
    assert sorted(r["seed"] for r in runs) == [0, 1, 2, 3, 4]

    def copies(arm, name):
        return [(r["seed"], c["completion"]) for r in runs for c in r["grades"][arm][name]["completions"]
                if not c["correct"] and copied_quantity(c["completion"], c["question"], c["gold"])]

    grpo = copies("grpo", "everyday")
    assert ("<reasoning>\n6 minutes\n</reasoning>\n<answer>\n6\n</answer>") in {c for _, c in grpo}
    assert len({seed for seed, _ in grpo}) >= 2  # not one seed's accident
    assert all("+" not in c and "-" not in c for _, c in grpo)  # no calculation written: a copy, not a slip
    for arm in ("sft", "sft_only"):
        for name in ("easy", "reworded", "everyday"):
            assert copies(arm, name) == [], (arm, name)
    # eval's breakdown of one seed's GRPO arm on everyday, from its records
    seed = grpo[0][0]
    graded = next(r for r in runs if r["seed"] == seed)["grades"]["grpo"]["everyday"]["completions"]
    records = [dict(c, copied_quantity=None if c["correct"] else copied_quantity(c["completion"], c["question"], c["gold"]))
               for c in graded]
    table = by_category(records)
    assert table["addition"]["copied_quantity"] == sum(1 for s, _ in grpo if s == seed)
    assert table["subtraction"]["copied_quantity"] == 0
