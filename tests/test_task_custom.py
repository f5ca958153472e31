"""Custom Q&A task: the three grading modes, the reward, loading a user's CSV/JSONL, the recipe."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from unsloth_grpo.config import load_config
from unsloth_grpo.training.checks import config_problems
from unsloth_grpo.data import DataError
from unsloth_grpo.evaluation.evaluate import evaluate_task
from unsloth_grpo.recipes import custom as recipe
from unsloth_grpo.rewards import build_reward_functions, get_reward
from unsloth_grpo.tasks import custom as task
from unsloth_grpo.tasks.custom import grade, token_f1

ROOT = Path(__file__).resolve().parents[1]
CSV = ROOT / "tests" / "data" / "custom_qa.csv"


def answer(text: str) -> str:
    return f"<reasoning>\nlooked it up\n</reasoning>\n<answer>\n{text}\n</answer>"


# --- grading --------------------------------------------------------------------------------------


def test_token_f1_exact_values():
    assert token_f1("the finance team", "Finance team") == 1.0      # articles and case dropped
    assert token_f1("finance", "the finance team") == pytest.approx(2 / 3)
    assert token_f1("finance team lead", "finance team") == pytest.approx(0.8)
    assert token_f1("Finance, team!", "finance team") == 1.0        # punctuation dropped
    assert token_f1("team team", "team") == pytest.approx(2 / 3)   # repeats are counted once each
    assert token_f1("security desk", "finance team") == 0.0
    assert token_f1("", "finance") == 0.0
    assert token_f1("the", "a") == 1.0                             # both empty after normalising


def test_token_f1_counts_the_characters_of_a_script_written_without_spaces():
    """``東京都`` against ``東京`` scored 0: whitespace alone gave one token each, and they differ."""
    assert token_f1("東京都", "東京") == pytest.approx(0.8)         # P 2/3, R 2/2
    assert token_f1("東京。", "東京") == 1.0                           # its punctuation dropped too
    assert token_f1("in 東京", "東京") == pytest.approx(0.8)         # a mixed answer: words and characters
    assert token_f1("กรุงเทพ", "กรุงเทพ") == 1.0 and token_f1("とうきょう", "きょうと") == pytest.approx(8 / 9)


def test_numeric_mode_reads_a_decimal_comma_as_no_number():
    """Documented in docs/rewards.md: ``3,5`` is not 3.5 (a comma groups thousands), nor 35; text modes
    grade it as written."""
    assert grade(answer("3,5"), "3.5", mode="numeric").value == 0.0
    assert grade(answer("3,5"), "35", mode="numeric").value == 0.0
    assert grade(answer("3,500"), "3500", mode="numeric").value == 1.0
    assert grade(answer("3,5"), "3,5", mode="exact").value == 1.0


@pytest.mark.parametrize("text, gold, mode, expected", [
    (answer("Harbor  guest"), "Harbor Guest", "exact", 1.0),
    (answer("Harbor Guest network"), "Harbor Guest", "exact", 0.0),
    (answer("$180.00"), "$180", "numeric", 1.0),
    (answer("180 dollars"), "$180", "numeric", 1.0),
    (answer("1,200"), "1200", "numeric", 1.0),
    (answer("0.5"), "50%", "numeric", 1.0),
    (answer("181"), "$180", "numeric", 0.0),
    (answer("$180"), "180", "exact", 0.0),                           # exact means the same text
    (answer("on the safety page"), "on the intranet safety page", "f1", 6 / 7),  # P 3/3, R 3/4
    ("no answer block", "Harbor Guest", "exact", 0.0),
    ("<reasoning><answer>Harbor Guest</answer></reasoning>", "Harbor Guest", "exact", 0.0),
])
def test_grade(text, gold, mode, expected):
    verdict = grade(text, gold, mode=mode)
    assert verdict.value == pytest.approx(expected) and verdict.correct == (expected == 1.0)


def test_unknown_mode_is_refused_with_the_choices():
    with pytest.raises(ValueError, match="choose one of exact, numeric, f1"):
        grade(answer("x"), "x", mode="fuzzy")
    with pytest.raises(ValueError, match=r"qa_correctness.*choose one of exact, numeric, f1"):
        get_reward("qa_correctness", mode="fuzzy")
    with pytest.raises(ValueError, match="give the bare name"):
        get_reward("qa_correctness", tag="<answer>")


def test_reward_values_and_evaluation_agree():
    texts = [answer("the finance team"), answer("finance"), answer("security"), "nothing"]
    golds = ["Finance team"] * 4
    f1 = get_reward("qa_correctness", mode="f1", reward=1.0)
    assert f1(texts, answer=golds) == pytest.approx([1.0, 2 / 3, 0.0, 0.0])
    exact = get_reward("qa_correctness")  # mode exact, reward 2.0
    assert exact(texts, answer=golds) == [0.0, 0.0, 0.0, 0.0]
    assert exact([answer("finance  TEAM")], answer=["Finance team"]) == [2.0]
    assert [task.TASK.grade(t, g, mode="f1").correct for t, g in zip(texts, golds)] == [True, False, False, False]
    assert task.TASK.grade(texts[1], golds[1], mode="f1").value >= 0.5
    assert get_reward("qa_correctness")([answer("x")], answer=[None]) == [None]  # no reference: left out


def test_grading_mode_follows_the_recipe_rewards():
    assert task.grading_mode([{"name": "xml_count"}, {"name": "qa_correctness", "params": {"mode": "f1"}}]) == "f1"
    assert task.grading_mode([{"name": "correctness"}]) == "numeric"
    assert task.grading_mode([{"name": "exact_match"}]) == "exact"
    assert task.grading_mode([{"name": "xml_count"}]) == "exact"
    cfg = recipe.RECIPE.resolve(overrides=["rewards=[{name: qa_correctness, params: {mode: numeric}}]"])
    assert task.TASK.grader(cfg)(answer("$180.00"), "180")


def test_evaluate_grades_in_the_chosen_mode():
    ds = task.load_custom(str(CSV), answer_column="expert_answer", limit=3)  # 25, $180, the finance team
    replies = [answer("25 days"), answer("180"), answer("finance")]

    def scripted(prompts, *, num_samples, **kwargs):
        return [[replies[i]] * num_samples for i in range(len(prompts))]

    def correct(mode, **kw):
        cfg = recipe.RECIPE.resolve(overrides=[f"rewards=[{{name: qa_correctness, params: {{mode: {mode}}}}}]"])
        return [r["correct"] for r in evaluate_task(task.TASK, None, None, ds, cfg, generate_fn=scripted, **kw)["records"]]

    assert correct("numeric") == [True, True, False]
    assert correct("exact") == [False, False, False]
    assert correct("f1") == [False, True, False]  # "$180" and "180" share their one word
    assert correct("f1", threshold=0.5) == [True, True, True]  # F1 2/3, 1, 2/3


# --- data -----------------------------------------------------------------------------------------


def test_loads_the_example_csv_with_renamed_columns():
    ds = task.load_custom(str(CSV), answer_column="expert_answer")
    # the file's own columns stay under their names too: TRL hands every column to the rewards
    assert len(ds) == 12 and ds.column_names == ["prompt", "answer", "question", "expert_answer"]
    assert ds["expert_answer"] == ds["answer"]
    assert ds[0]["prompt"] == [
        {"role": "system", "content": task.SYSTEM_PROMPT},
        {"role": "user", "content": "How many days of paid leave does a new employee get per year?"},
    ]
    assert ds["answer"][:3] == ["25", "$180", "the finance team"]
    with pytest.raises(DataError, match="lacks column.*expert_answer.*data.answer_column"):
        task.load_custom(str(CSV))


def test_numeric_mode_reports_text_answers_before_training():
    expected = r"mode 'numeric'.*5 are not:\n  line 4: 'the finance team'\n  line 6: 'Harbor Guest'"
    # "form HR-12" is a name that holds a number, not a number: the strict reader refuses it
    with pytest.raises(DataError, match=expected):
        task.load_custom(str(CSV), answer_column="expert_answer", mode="numeric")


def test_loads_jsonl_and_reports_bad_rows(tmp_path):
    path = tmp_path / "kb.jsonl"
    path.write_text(json.dumps({"q": "Who signs?", "a": "the lead"}) + "\n" + json.dumps({"q": "", "a": "x"}) + "\n")
    with pytest.raises(DataError, match="line 2: column 'q' is empty"):
        task.load_custom(str(path), question_column="q", answer_column="a")
    with pytest.raises(DataError, match="does not exist"):
        task.load_custom(str(tmp_path / "missing.csv"))


def test_synthetic_handbook_questions_are_answerable_from_their_text():
    rows = task.make_handbook_questions(40, seed=2)
    for r in rows:
        assert r["question"].startswith("Handbook: ") and r["answer"] in r["question"]
    ds = task.load_custom("synthetic", "test", num_synthetic=5)
    assert len(ds) == 5 and ds["answer"] != task.load_custom("synthetic", num_synthetic=5)["answer"]


# --- recipe ---------------------------------------------------------------------------------------


def test_recipe_yaml_is_the_defaults_on_the_example_csv():
    cfg = load_config(ROOT / "recipes" / "custom.yaml")
    assert cfg == recipe.RECIPE.resolve(overrides=["data.source=tests/data/custom_qa.csv",
                                                    "data.answer_column=expert_answer"])
    assert config_problems(cfg) == []
    funcs, _ = build_reward_functions(cfg.rewards)
    assert [f.__name__ for f in funcs] == ["xml_count", "soft_format", "qa_correctness"]


def test_check_loads_the_users_file(capsys, monkeypatch):
    monkeypatch.chdir(ROOT)
    assert recipe.main(["--config", "recipes/custom.yaml", "--check"]) == 0
    assert "config and data OK: 12 training rows" in capsys.readouterr().out
    assert recipe.main(["--config", "recipes/custom.yaml", "--check",
                        "rewards=[{name: qa_correctness, params: {mode: numeric}}]"]) == 2
    assert "mode 'numeric' needs a number" in capsys.readouterr().err


#: The smoke preset's rise (last 5 steps minus first 5, seed 0, transformers): how it was chosen in
#: docs/development.md (measured on two machines; the smallest rise of the three recipes was 0.200).
MIN_SMOKE_RISE = 0.1


@pytest.mark.slow
def test_smoke_preset_reward_rises(tmp_path):
    out = tmp_path / "run"
    assert recipe.main(["--preset", "smoke", "--output-dir", str(out), "model.backend=transformers"]) == 0
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert len(rows) == 40
    assert all("rewards/qa_correctness/mean" in r for r in rows)
    first = sum(r["reward"] for r in rows[:5]) / 5
    last = sum(r["reward"] for r in rows[-5:]) / 5
    # seed 0 rose 0.24-0.45 across machines, once by only 0.2001 (docs/development.md): half the smallest
    assert last > first + MIN_SMOKE_RISE, (first, last)


def test_check_counts_the_rows_the_run_trains_and_says_the_repeats(tmp_path, capsys):
    """``--check`` said "12 training rows" for a file whose run then dropped one prompt as too long, and
    said nothing of rows given twice (each trained twice)."""
    import csv

    from unsloth_grpo.cli.recipe import run_recipe

    rows = [{"question": f"What is {i} + {i}?", "answer": str(2 * i)} for i in range(9)]
    rows += [rows[0], rows[1]]  # two repeats
    rows.append({"question": "Explain " + "the whole handbook, " * 200, "answer": "no"})  # far over 128 tokens
    data = tmp_path / "qa.csv"
    with data.open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=["question", "answer"])
        writer.writeheader()
        writer.writerows(rows)
    code = run_recipe(recipe.RECIPE, ["--preset", "smoke", "--check", f"data.source={data}",
                                      "data.max_prompt_tokens=128", "training.max_completion_length=64"])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert "config and data OK: 11 training rows" in out
    assert "note: data: 2 of 12 rows repeat an earlier row (the same prompt and answer)" in out
    assert "note: data: dropped 1 of 12 prompts longer than 128 tokens" in out
