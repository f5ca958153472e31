"""reasoning_gym task: the strict grade on literal answers (and where reasoning-gym's own scorer pays more),
the config checks before any load, the rows and the held-out split, every dataset walked, the recipe."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

reasoning_gym = pytest.importorskip("reasoning_gym", reason="the reasoning_gym extra: pip install 'unsloth-grpo[reasoning_gym]'")

from reasoning_gym.factory import DATASETS  # noqa: E402

from unsloth_grpo.config import load_config  # noqa: E402
from unsloth_grpo.models.builtin import TINY_MODEL_KWARGS  # noqa: E402
from unsloth_grpo.recipes import reasoning_gym as recipe  # noqa: E402
from unsloth_grpo.rewards import get_reward  # noqa: E402
from unsloth_grpo.tasks import get_task  # noqa: E402
from unsloth_grpo.tasks import reasoning_gym as rg  # noqa: E402
from unsloth_grpo.tasks._task import reasoned_completion  # noqa: E402
from unsloth_grpo.training.checks import config_problems  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
ENTRY = {"question": "State the final answer to the following arithmetic problem: 2 + 3 =", "answer": "5",
         "metadata": {}}
GOLD = rg.encode_gold("chain_sum", {"seed": 0, "size": 1}, ENTRY)


def answer(text: str) -> str:
    return reasoned_completion(text)


def first_entry(name: str, **config) -> tuple[object, dict, str]:
    """reasoning-gym's dataset, its first entry (seed 0) and that entry as the task's gold column."""
    config = {**config, "seed": 0, "size": 1}
    dataset = reasoning_gym.create_dataset(name, **config)
    entry = dataset[0]
    return dataset, entry, rg.encode_gold(name, config, entry)


# --- the grade, exact values --------------------------------------------------------------------


def test_grade_on_literal_completions():
    cases = {
        answer("5"): ("correct", "score_answer", 1.0),
        answer("it is 5"): ("wrong", "partial_credit", 1 / 7),   # reasoning-gym pays len("5") / len("it is 5")
        answer("5 or 6"): ("wrong", "hedge", 0.0),
        answer("5, 6, 7"): ("wrong", "several_numbers", 0.0),
        answer("not 5"): ("wrong", "negation", 0.0),
        answer("6"): ("wrong", "mismatch", 0.0),
        "<answer>5</answer> <answer>6</answer>": ("wrong", "several_answers", None),
        "<reasoning><answer>5</answer></reasoning>": ("missing", "no_answer", None),
        "5": ("missing", "no_answer", None),
    }
    for completion, (status, rule, value) in cases.items():
        verdict = rg.grade(completion, GOLD)
        assert (verdict.status, verdict.rule) == (status, rule), completion
        assert verdict.value == pytest.approx(value) if value is not None else verdict.value is None, completion
    fn = get_reward("reasoning_gym_correct")
    assert fn(list(cases), answer=[GOLD] * len(cases)) == [1.0] + [0.0] * 8
    assert get_reward("reasoning_gym_correct", reward=2.0)([[{"role": "assistant", "content": answer("5")}]],
                                                           answer=[GOLD]) == [2.0]


def test_partial_credit_reasoning_gym_pays_is_never_paid():
    dataset = reasoning_gym.create_dataset("chain_sum", seed=0, size=1)
    assert dataset.score_answer("it is 5", ENTRY) == pytest.approx(1 / 7)
    assert dataset.score_answer("5 or 6", ENTRY) == pytest.approx(1 / 6)
    assert rg.TASK.grade(answer("it is 5"), GOLD).correct is False
    assert get_reward("reasoning_gym_correct")([answer("it is 5"), answer("5 or 6")], answer=[GOLD] * 2) == [0.0, 0.0]


def test_answers_reasoning_gym_pays_in_full_and_the_grade_does_not():
    # game_of_life_halting's scorer compares bool("False") with bool("True"): any text is paid
    dataset, entry, gold = first_entry("game_of_life_halting")
    flipped = "False" if entry["answer"] == "True" else "True"
    assert dataset.score_answer(flipped, entry) == 1.0
    assert entry["answer"] == "True"
    assert rg.grade(answer("False"), gold).rule == "negation"  # a negating word the gold does not hold
    assert rg.grade(answer("Yes"), gold).rule == "mismatch"    # graded against the oracle's text instead
    assert rg.grade(answer("True"), gold).rule == "score_answer"
    # puzzle24 pays any four numbers that make 24
    dataset, entry, gold = first_entry("puzzle24")
    assert entry["metadata"]["numbers"] == [1, 3, 5, 9]
    assert dataset.score_answer("6*4*1*1", entry) == 1.0
    assert rg.grade(answer("6*4*1*1"), gold).rule == "wrong_numbers"
    assert rg.grade(answer("1*3*5 + 9"), gold).correct
    # integration: sympy's unevaluated integral of the integrand differentiates back to it
    dataset, entry, gold = first_entry("intermediate_integration")
    cheat = f"Integral({entry['metadata']['integrand']}, x) + C"
    assert dataset.score_answer(cheat, entry) == 1.0
    assert rg.grade(answer(cheat), gold).rule == "code"
    # word_sorting pays the sorted words with more words after them
    dataset, entry, gold = first_entry("word_sorting")
    padded = entry["answer"] + ", zebra"
    assert dataset.score_answer(padded, entry) == 1.0
    assert rg.grade(answer(padded), gold).rule == "many_candidates"
    assert rg.grade(answer(entry["answer"]), gold).correct


def test_code_in_an_answer_never_reaches_a_scorer_that_runs_it(tmp_path):
    marker = tmp_path / "ran"
    code = f"__import__('pathlib').Path('{marker}').touch()"
    dataset, entry, gold = first_entry("spiral_matrix")
    dataset.score_answer(code, entry)  # reasoning-gym's own scorer evals the answer
    assert marker.exists()
    marker.unlink()
    for name in rg.PYTHON_EVAL + rg.SYMPY_PARSE:
        verdict = rg.grade(answer(code), first_entry(name)[2])
        assert verdict.rule == "code", name
    assert not marker.exists()
    # what would not finish in sympy never reaches it either; a polynomial's powers do
    gold = first_entry("polynomial_multiplication")[2]
    assert [rg.grade(answer(a), gold).rule for a in ("99**99**99", "99999999!", "x**n", "x.func")] == ["code"] * 4
    assert rg.grade(answer(rg.decode_gold(gold).oracle), gold).correct


# --- the config, before any load -----------------------------------------------------------------


def test_config_problems_name_the_dataset_the_field_and_the_fix():
    problems = rg.spec_problems([
        {"name": "chain_sun"},
        {"name": "chain_sum", "config": {"max_term": 3}},
        {"name": "chain_sum", "config": {"min_terms": 3, "max_terms": 2}},
        {"name": "leg_counting", "config": {"seed": 4}, "wieght": 2},
        {"name": "composite"},
        {"name": "gcd", "weight": 0, "size": 0},
    ])
    assert problems == [
        "data.datasets[0]: name='chain_sun' is not a reasoning-gym dataset; did you mean 'chain_sum', "
        "'decimal_chain_sum'?; reasoning-gym 0.1.25 has 106: python -c 'import reasoning_gym; "
        "print(sorted(reasoning_gym.factory.DATASETS))'",
        "data.datasets[1].config.max_term is not a field of chain_sum's config (ChainSumConfig); did you mean "
        "'max_terms'?; its fields: min_terms, max_terms, min_digits, max_digits, allow_negation",
        "data.datasets[2] (chain_sum): reasoning-gym's check refuses config.min_terms, config.max_terms: "
        "max_terms must be >= min_terms",
        "data.datasets[3]: unknown key 'wieght'; did you mean 'weight'?; an entry takes name, weight, config, seed, size, curriculum",
        "data.datasets[3].config.seed: give it as data.datasets[3].seed; the task sets the config's seed and size "
        "(the held-out split needs its own seed)",
        "data.datasets[4]: name='composite' is not trained on here: it is reasoning-gym's own mixture; list its "
        "datasets under data.datasets instead",
        "data.datasets[5].weight=0 must be a number above 0 (the dataset's share of data.num_synthetic)",
        "data.datasets[5].size=0 must be a whole number of at least 1 (or left out)",
    ]
    assert rg.spec_problems([]) == ["data.datasets must list at least one reasoning-gym dataset, e.g. "
                                    "[{name: chain_sum}]"]


def test_check_refuses_a_bad_dataset_with_one_message_and_exit_2(capsys):
    assert recipe.main(["--preset", "smoke", "--check", "data.datasets=[{name: leg_countin}]",
                        "data.source=openai/gsm8k"]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert [line for line in err.splitlines() if not line.startswith("note:")] == [
        "error: the recipe config has problems:",
        "  - data.source='openai/gsm8k': the reasoning_gym task generates its rows; set data.source: synthetic and "
        "list the datasets under data.datasets",
        "  - data.datasets[0]: name='leg_countin' is not a reasoning-gym dataset; did you mean 'leg_counting', "
        "'letter_counting', 'rectangle_count'?; reasoning-gym 0.1.25 has 106: python -c 'import reasoning_gym; print(sorted(reasoning_gym.factory.DATASETS))'",
    ]


def test_check_loads_the_smoke_data(capsys):
    assert recipe.main(["--preset", "smoke", "--check"]) == 0
    assert "config and data OK: 128 training rows" in capsys.readouterr().out


# --- rows ----------------------------------------------------------------------------------------


def test_rows_carry_the_prompt_the_gold_and_the_dataset_as_category():
    rows = rg.load_reasoning_gym([{"name": "chain_sum", "weight": 3}, {"name": "leg_counting"}], num_synthetic=8,
                                 seed=0)
    assert rows.column_names == ["prompt", "answer", "category"]
    assert sorted(rows["category"]) == ["chain_sum"] * 6 + ["leg_counting"] * 2
    system, user = rows[0]["prompt"]
    assert system == {"role": "system", "content": rg.SYSTEM_PROMPT}
    gold = rg.decode_gold(rows[0]["answer"])
    assert gold.name == rows[0]["category"] and user == {"role": "user", "content": gold.entry["question"]}
    assert json.loads(gold.config)["seed"] == 0
    assert rg.sizes([rg.Spec("a", weight=3), rg.Spec("b"), rg.Spec("c", size=10)], 100) == [75, 25, 10]


def test_the_gold_column_keeps_tuples_for_the_scorer():
    dataset, entry, gold = first_entry("arc_agi")
    assert isinstance(entry["metadata"]["output"], tuple)
    assert rg.decode_gold(gold).entry == entry
    assert dataset.score_answer(entry["answer"], json.loads(json.dumps(entry))) == 0.05  # plain JSON loses them
    assert rg.grade(answer(entry["answer"]), gold).correct


def test_held_out_questions_also_in_training_are_removed_and_counted(capsys):
    spec = {"name": "chain_sum", "config": {"min_terms": 2, "max_terms": 2, "max_digits": 1}}
    held = rg.load_reasoning_gym([spec], split="test", num_synthetic=100, limit=40, seed=0)
    trained = {e["question"] for e in reasoning_gym.create_dataset("chain_sum", **spec["config"], seed=0, size=100)}
    drawn = [e["question"] for e in reasoning_gym.create_dataset("chain_sum", **spec["config"],
                                                                  seed=rg.HELD_OUT_SEED_OFFSET, size=40)]
    overlap = sum(q in trained for q in drawn)
    assert overlap > 0  # a small problem space: the check has something to find
    assert len(held) == 40 - overlap
    assert not {rg.decode_gold(a).entry["question"] for a in held["answer"]} & trained
    assert (f"reasoning_gym: held-out split 'test': {overlap} of 40 generated questions are also in the training rows "
            f"and were removed; {40 - overlap} left") in capsys.readouterr().out


#: Datasets with no single oracle answer: score_answer checks whatever solution is given, so only a wrong
#: answer is graded in the walk below (each still trains).
NO_ORACLE = {name: "no oracle answer: score_answer checks a given solution"
             for name in ("boxnet", "graph_color", "propositional_logic", "rubiks_cube", "rush_hour")}
#: Datasets where another entry's answer may be right too (several solutions are valid).
SEVERAL_SOLUTIONS = {"n_queens": "another board's placement can solve this board"}


def test_every_reasoning_gym_dataset_builds_rows_and_grades_its_own_answer_right_and_others_wrong():
    assert set(rg.REFUSED) == {"composite"}
    walked = []
    for name in sorted(DATASETS):
        if name in rg.REFUSED:
            continue
        rows = [dict(r) for r in rg.load_reasoning_gym([{"name": name}], num_synthetic=2, seed=0)]
        assert len(rows) == 2 and {r["category"] for r in rows} == {name}, name
        golds = [rg.decode_gold(r["answer"]) for r in rows]
        for i, (row, gold) in enumerate(zip(rows, golds)):
            assert row["prompt"][-1] == {"role": "user", "content": gold.entry["question"]}, name
            right = rg.TASK.gold_completion(row)
            assert (right is None) == (name in NO_ORACLE), name
            if right is not None:
                assert rg.grade(right, row["answer"]).correct, (name, gold.oracle)
            assert not rg.grade(answer("qqq"), row["answer"]).correct, name
            other = golds[1 - i].oracle
            if other is not None and other.strip() != (gold.oracle or "").strip() and name not in SEVERAL_SOLUTIONS:
                assert not rg.grade(answer(other), row["answer"]).correct, (name, other)
        walked.append(name)
    assert len(walked) == len(DATASETS) - len(rg.REFUSED)


def test_gsm_symbolic_is_an_offline_source_of_the_gsm8k_task_graded_by_its_grader():
    from unsloth_grpo.tasks import gsm8k

    train = gsm8k.load_gsm8k("synthetic", subset="gsm_symbolic", num_synthetic=40, seed=0)
    test = gsm8k.load_gsm8k("synthetic", "test", subset="gsm_symbolic", num_synthetic=20, seed=0)
    assert (len(train), len(test), set(train["category"])) == (40, 20, {"gsm_symbolic"})
    assert train[0]["answer"] == "28080" and "carpenter" in train[0]["prompt"][-1]["content"]
    assert not {p[-1]["content"] for p in train["prompt"]} & {p[-1]["content"] for p in test["prompt"]}
    assert gsm8k.TASK.grade(answer("28080"), "28080").correct
    assert gsm8k.TASK.grade(answer("28080 or 28000"), "28080").rule == "hedge"
    cfg = gsm8k.RECIPE.resolve(preset="smoke", overrides=["data.subset=gsm_symbolic"])
    assert config_problems(cfg) == [] and get_task("gsm8k").load(cfg)["category"][:2] == ["gsm_symbolic"] * 2


# --- the recipe ----------------------------------------------------------------------------------


def test_recipe_config_and_yaml_match():
    assert load_config(ROOT / "recipes" / "reasoning_gym.yaml") == recipe.RECIPE.resolve()
    smoke = recipe.RECIPE.resolve(preset="smoke")
    assert config_problems(smoke) == []
    assert smoke.model.name == "builtin:tiny" and smoke.task == "reasoning_gym"
    assert [r.name for r in smoke.rewards] == ["xml_count", "reasoning_gym_correct"]
    assert get_task("reasoning_gym").grader(smoke)(answer("5"), GOLD).correct


@pytest.mark.slow
def test_smoke_preset_trains_and_logs_the_grade(tmp_path):
    out = tmp_path / "run"
    assert recipe.main(["--preset", "smoke", "--output-dir", str(out), "model.backend=transformers",
                        "training.max_steps=3"]) == 0
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert len(rows) == 3 and all("rewards/reasoning_gym_correct/mean" in r for r in rows)


#: The tiny model's context: a prompt and its completion must fit in its positions.
TINY_CONTEXT = TINY_MODEL_KWARGS["max_position_embeddings"]
#: Completions of the walk below (a few tokens: the walk shows the data, reward and update path, not learning).
WALK_COMPLETION = 8
#: Datasets whose first row (seed 0, default config) is a longer prompt than the tiny model can take with a
#: completion (TINY_CONTEXT - WALK_COMPLETION tokens); the walk checks that each still is, so none stays listed
#: once it fits. Their text is a grid, a board, a long program or a haystack of sentences.
TOO_LONG_FOR_THE_TINY_MODEL = ("acre", "boxnet", "circuit_logic", "codeio", "emoji_mystery", "mahjong_puzzle",
                               "modulo_grid", "needle_haystack", "rearc", "rectangle_count", "rotten_oranges",
                               "string_splitting", "string_synthesis", "zebra_puzzles")


@pytest.mark.slow
def test_every_reasoning_gym_dataset_trains_one_step_with_the_tiny_model(tmp_path, monkeypatch):
    from transformers import AutoTokenizer

    from unsloth_grpo.data import prompt_lengths
    from unsloth_grpo.models.ref import model_ref
    from unsloth_grpo.training import checks

    names = [n for n in sorted(DATASETS) if n not in rg.REFUSED]
    entries = [{"name": n, "size": 1} for n in names]
    rows = rg.load_reasoning_gym(entries, seed=0)  # the rows the run below builds: one per dataset, seed 0
    assert sorted(rows["category"]) == names  # none dropped as ungradable
    max_prompt = TINY_CONTEXT - WALK_COMPLETION
    lengths = dict(zip(rows["category"], prompt_lengths(rows, AutoTokenizer.from_pretrained(
        model_ref("builtin:tiny").path()))))
    assert sorted(n for n, length in lengths.items() if length > max_prompt) == list(TOO_LONG_FOR_THE_TINY_MODEL), \
        {n: length for n, length in lengths.items() if length > max_prompt}
    trained = [n for n in names if n not in TOO_LONG_FOR_THE_TINY_MODEL]
    graded: dict[str, list[str]] = {}
    real_grade = rg.grade

    def recording_grade(text, gold, **kwargs):
        verdict = real_grade(text, gold, **kwargs)
        frame = sys._getframe(1)
        while frame is not None and frame.f_code.co_filename != checks.__file__:
            frame = frame.f_back
        if frame is None:  # not the pre-flight check's probe
            graded.setdefault(rg.decode_gold(gold).name, []).append(verdict.rule)
        return verdict

    # reasoning_gym_correct grades through it (so does the pre-flight check's probe, left out)
    monkeypatch.setattr(rg, "grade", recording_grade)
    # one step whose batch is every row: TRL's sampler draws batch // num_generations distinct rows per step
    # (the longest prompt sets the padding: about 15 s on one core)
    out = tmp_path / "run"
    datasets = ", ".join(f"{{name: {n}, size: 1}}" for n in trained)
    assert recipe.main(["--preset", "smoke", "--output-dir", str(out), "model.backend=transformers",
                        f"model.max_seq_length={TINY_CONTEXT}", f"data.max_prompt_tokens={max_prompt}",
                        f"data.datasets=[{datasets}]", "training.max_steps=1", "training.num_generations=2",
                        f"training.per_device_train_batch_size={2 * len(trained)}",
                        f"training.max_completion_length={WALK_COMPLETION}", "run.samples_every=0"]) == 0
    metrics = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert len(metrics) == 1 and "rewards/reasoning_gym_correct/mean" in metrics[0]
    assert sorted(graded) == trained
    assert {n: len(rules) for n, rules in graded.items() if len(rules) != 2} == {}  # its two completions
    assert len(trained) + len(TOO_LONG_FOR_THE_TINY_MODEL) + len(rg.REFUSED) == len(DATASETS)


def test_smollm2_preset_trains_the_real_model_and_grades_it_on_problems_no_training_row_has():
    from unsloth_grpo.training.held_out import held_out_rows
    from unsloth_grpo.training.train import load_task_dataset

    cfg = recipe.RECIPE.resolve(preset="smollm2")
    assert config_problems(cfg) == []
    assert cfg.model.name == "builtin:smollm2-135m-instruct" and cfg.model.device == "cpu"
    assert cfg.evaluation.before_after and "<answer>\n7\n</answer>" in cfg.data.system_prompt
    train = {p[-1]["content"] for p in load_task_dataset(cfg)["prompt"]}
    held = held_out_rows(cfg)
    # chain_sum's one-digit pairs are 200 questions: the preset keeps its rows few so that most stay unseen
    assert len(held) >= 20 and not {p[-1]["content"] for p in held["prompt"]} & train
    assert held[0]["prompt"][0] == {"role": "system", "content": rg.EXAMPLE_SYSTEM_PROMPT}
    # the prompt's example, written by the model for a held-out problem, is what the grade pays
    gold = rg.decode_gold(held[0]["answer"]).oracle
    assert rg.grade(f"<reasoning>\n...\n</reasoning>\n<answer>\n{gold}\n</answer>", held[0]["answer"]).correct
