"""JSON extraction task: strict parsing, the three rewards on literal answers, the records, the recipe."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from unsloth_grpo.config import load_config
from unsloth_grpo.training.checks import config_problems
from unsloth_grpo.data import DataError
from unsloth_grpo.evaluation.evaluate import evaluate_task
from unsloth_grpo.recipes import json_extract as recipe
from unsloth_grpo.rewards import get_reward
from unsloth_grpo.tasks import json_extract as task
from unsloth_grpo.tasks.json_extract import extract_json, parse_object, value_matches

ROOT = Path(__file__).resolve().parents[1]
GOLD = json.dumps({"name": "Ada Park", "age": 36, "city": "Oslo"})


def answer(body: str) -> str:
    return f"<reasoning>\nread it\n</reasoning>\n<answer>\n{body}\n</answer>"


def scores(*bodies: str) -> list[list[float]]:
    """[valid, keys, values] for each answer body."""
    fns = [get_reward(n) for n in ("json_extract_valid", "json_extract_keys", "json_extract_values")]
    texts = [answer(b) for b in bodies]
    columns = [fn(texts, answer=[GOLD] * len(texts)) for fn in fns]
    return [list(row) for row in zip(*columns)]


# --- strict parsing ---------------------------------------------------------------------------


@pytest.mark.parametrize("text, expected", [
    ('{"a": 1}', {"a": 1}),
    ('  {"a": 1}\n', {"a": 1}),
    ('```json\n{"a": 1}\n```', {"a": 1}),
    ('```\n{"a": 1}\n```', {"a": 1}),
    ('{"a": 1} and that is all', None),      # trailing text
    ('Here: {"a": 1}', None),                # leading text
    ('{"a": 1}{"b": 2}', None),              # two objects
    ('{"a": 1, "a": 2}', None),              # duplicate key
    ('{"a": NaN}', None),                    # not JSON
    ('{"a": Infinity}', None),
    ("{'a': 1}", None),                      # Python, not JSON
    ('[{"a": 1}]', None),                    # not an object
    ('"a"', None),
    ("", None),
    ('{"a": 1,}', None),                     # trailing comma
])
def test_parse_object_is_strict(text, expected):
    assert parse_object(text) == expected


def test_extract_json_reads_the_last_answer_block_outside_reasoning():
    assert extract_json(answer('{"a": 1}')) == {"a": 1}
    assert extract_json('<reasoning><answer>{"a": 1}</answer></reasoning>') is None
    assert extract_json('{"a": 1}') is None                      # no answer block
    assert extract_json('{"a": 1}', tag=None) == {"a": 1}       # bare JSON mode
    assert extract_json([{"role": "assistant", "content": answer('{"b": 2}')}]) == {"b": 2}
    assert extract_json("[" * 100000 + "]" * 100000, tag=None) is None  # deep nesting: invalid, no crash


@pytest.mark.parametrize("predicted, gold, expected", [
    (36, 36, True), (36.0, 36, True), ("36", 36, False), (True, 1, False), (None, 36, False),
    (45.5, 45.5, True), ("45.50", 45.5, False), (45.50000000001, 45.5, True), (45.51, 45.5, False),
    ("ada  PARK ", "Ada Park", True), ("Ada", "Ada Park", False), (36, "36", False),
    ("2025-03-07", "2025-03-07", True), (["a"], ["a"], True),
])
def test_value_matching_is_typed(predicted, gold, expected):
    assert value_matches(predicted, gold) is expected


# --- rewards, exact values ----------------------------------------------------------------------


def test_reward_values_on_literal_answers():
    assert scores(
        '{"name": "Ada Park", "age": 36, "city": "Oslo"}',                       # right
        '{"city": "oslo", "name": "ada park", "age": 36.0}',                     # right: order, case, 36.0
        '{"name": "Ada Park", "age": 36, "city": "Oslo", "job": "pilot"}',       # an extra key
        '{"name": "Ada Park", "age": 36}',                                       # a missing key
        '{"name": "Ada Park", "age": "36", "city": "Oslo"}',                     # a number as a string
        '{"name": "Ada Park", "age": 37, "city": ["Oslo"]}',                     # wrong values, wrong type
        '{"name": "Ada Park", "age": 36, "city": "Oslo"} Hope this helps!',      # trailing text
        '{"name": "Ada Park", "age": 36, "city": "Oslo", "age": 36}',            # duplicate key
        '```json\n{"name": "Ada Park", "age": 36, "city": "Oslo"}\n```',         # fenced: fine
        '["Ada Park", 36, "Oslo"]',                                             # not an object
    ) == [
        [1.0, 1.0, 1.0],
        [1.0, 1.0, 1.0],
        [1.0, 0.75, 0.75],  # an extra key is a wrong field: no full reward where evaluation says wrong
        [1.0, 2 / 3, 2 / 3],
        [1.0, 1.0, 2 / 3],
        [1.0, 1.0, 1 / 3],
        [0.0, 0.0, 0.0],
        [0.0, 0.0, 0.0],
        [1.0, 1.0, 1.0],
        [0.0, 0.0, 0.0],
    ]


def test_reward_parameters_and_bare_json_mode():
    keys = task.json_extract_keys(reward=2.0, tag=None)
    assert keys(['{"name": "Ada Park", "age": 36, "city": "Oslo", "x": 1}', answer("{}")],
                answer=[GOLD, GOLD]) == [1.5, 0.0]
    assert get_reward("json_extract_valid", reward=0.5)(["<answer>{}</answer>", "{}"]) == [0.5, 0.0]
    with pytest.raises(ValueError, match="'answer' column"):
        get_reward("json_extract_values")([answer("{}")])
    with pytest.raises(ValueError, match="give the bare name"):
        get_reward("json_extract_keys", tag="<answer>")


def test_evaluation_and_rewards_agree():
    bodies = ['{"name": "Ada Park", "age": 36, "city": "Oslo"}', '{"name": "Ada Park", "age": 36}',
              '{"name": "Ada Park", "age": 36, "city": "Oslo", "x": 0}',
              '{"name": "Ada Park", "age": "36", "city": "Oslo"}']
    verdicts = [task.TASK.grade(answer(b), GOLD).correct for b in bodies]
    assert verdicts == [True, False, False, False]
    assert verdicts == [s[1] == 1.0 and s[2] == 1.0 for s in scores(*bodies)]
    cfg = recipe.RECIPE.resolve(overrides=["rewards=[{name: json_extract_values, params: {tag: null}}]"])
    assert task.TASK.grader(cfg)(bodies[0], GOLD) and not task.TASK.grader(cfg)(answer(bodies[0]), GOLD)


def test_evaluate_grades_with_the_task_checker():
    ds = task.load_json_extract("synthetic", "test", num_synthetic=3)
    replies = [answer(ds[0]["answer"]), answer("{}"), answer(ds[2]["answer"] + " !")]

    def scripted(prompts, *, num_samples, **kwargs):
        return [[replies[i]] * num_samples for i in range(len(prompts))]

    result = evaluate_task(task.TASK, None, None, ds, recipe.RECIPE.resolve(), generate_fn=scripted)
    assert [r["correct"] for r in result["records"]] == [True, False, False]
    assert result["accuracy"] == pytest.approx(1 / 3)


# --- records ------------------------------------------------------------------------------------


def test_records_hold_their_gold_values_in_the_text():
    records = task.make_records(60, seed=4)
    assert {r["kind"] for r in records} == {"person", "order", "event"}
    for r in records:
        gold = json.loads(r["answer"])
        assert list(gold) == r["keys"] and len(r["keys"]) >= 2
        assert f"exactly the keys {', '.join(r['keys'])}" in r["question"]
        for key, value in gold.items():
            shown = f"{value:.2f}" if key == "total" else str(value)
            if key == "date" and shown not in r["text"]:  # the long form: "March 7, 2025"
                y, m, d = value.split("-")
                shown = f"{int(d)}, {y}"
            assert shown in r["text"], (key, value, r["text"])
        assert task.TASK.grade(answer(r["answer"]), r["answer"])


def test_records_are_deterministic_and_checked():
    assert task.make_records(4, seed=1) == task.make_records(4, seed=1)
    assert task.make_records(4, seed=1) != task.make_records(4, seed=2)
    assert [r["kind"] for r in task.make_records(4, kinds=["order"])] == ["order"] * 4
    with pytest.raises(DataError, match="unknown record kind"):
        task.make_records(2, kinds=["pet"])


def test_loader_synthetic_and_files(tmp_path):
    train = task.load_json_extract("synthetic", num_synthetic=6)
    test = task.load_json_extract("synthetic", "test", num_synthetic=6)
    assert train.column_names == ["prompt", "answer"] and train["answer"] != test["answer"]
    assert train[0]["prompt"][0] == {"role": "system", "content": task.SYSTEM_PROMPT}
    good = tmp_path / "rows.jsonl"
    good.write_text(json.dumps({"question": "Extract name: Ada", "answer": '{"name": "Ada"}'}) + "\n")
    assert task.load_json_extract(str(good))["answer"] == ['{"name": "Ada"}']
    nested = tmp_path / "nested.jsonl"
    nested.write_text(json.dumps({"question": "Extract name: Ada", "answer": {"name": "Ada"}}) + "\n")
    with pytest.raises(DataError, match="must hold each gold object as JSON text"):
        task.load_json_extract(str(nested))
    broken = tmp_path / "broken.jsonl"
    broken.write_text(json.dumps({"question": "q", "answer": "{name: Ada}"}) + "\n")
    with pytest.raises(DataError, match="line 1: cannot read a reference answer"):
        task.load_json_extract(str(broken))


# --- recipe -------------------------------------------------------------------------------------


def test_recipe_config_and_yaml_match():
    assert load_config(ROOT / "recipes" / "json_extract.yaml") == recipe.RECIPE.resolve()
    smoke = recipe.RECIPE.resolve(preset="smoke")
    assert config_problems(smoke) == []
    assert [r.name for r in smoke.rewards] == ["xml_count", "json_extract_valid", "json_extract_keys",
                                               "json_extract_values"]


def test_check_loads_the_smoke_data(capsys):
    assert recipe.main(["--preset", "smoke", "--check"]) == 0
    assert "config and data OK: 256 training rows" in capsys.readouterr().out


#: The smoke preset's rise (last 5 steps minus first 5, seed 0, transformers): how it was chosen in
#: docs/development.md (measured on two machines; the smallest rise of the three recipes was 0.200).
MIN_SMOKE_RISE = 0.1


@pytest.mark.slow
def test_smoke_preset_reward_rises(tmp_path):
    out = tmp_path / "run"
    assert recipe.main(["--preset", "smoke", "--output-dir", str(out), "model.backend=transformers"]) == 0
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert len(rows) == 40
    assert all(f"rewards/json_extract_{k}/mean" in r for r in rows for k in ("valid", "keys", "values"))
    first = sum(r["reward"] for r in rows[:5]) / 5
    last = sum(r["reward"] for r in rows[-5:]) / 5
    # seed 0 rose 0.24-0.45 across machines, once by only 0.2001 (docs/development.md): half the smallest
    assert last > first + MIN_SMOKE_RISE, (first, last)
