"""``data.categories`` (keep some kinds of problem) and a stage's own ``data`` (a warm-up on one kind, GRPO on
another): what issue 39's third point needs to give GRPO problems that SFT has no worked answers for."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from unsloth_grpo.config import config_to_dict, load_config
from unsloth_grpo.data import DataError, keep_categories
from unsloth_grpo.recipes.gsm8k import RECIPE
from unsloth_grpo.training import stages as st
from unsloth_grpo.training.checks import config_problems
from unsloth_grpo.training.held_out import load_task_dataset

ROWS = [{"q": "a", "category": "addition"}, {"q": "b", "category": "subtraction"},
        {"q": "c", "category": "addition"}, {"q": "d", "category": "two-step"}]


def test_keep_categories_keeps_the_kinds_asked_for_in_order_up_to_the_limit():
    import datasets

    assert [r["q"] for r in keep_categories(ROWS, ["addition"], "x")] == ["a", "c"]
    assert [r["q"] for r in keep_categories(ROWS, ["two-step", "addition"], "x", limit=2)] == ["a", "c"]
    table = keep_categories(datasets.Dataset.from_list(ROWS), ["subtraction", "two-step"], "x")
    assert table["q"] == ["b", "d"]


@pytest.mark.parametrize("rows, kinds, said", [
    (ROWS, ["division"], "names 'division', which no row of 'x' is; its kinds: addition, subtraction, two-step"),
    (ROWS, [], "data.categories is an empty list"),
    ([{"q": "a"}], ["addition"], "keeps rows by their 'category' column, and 'x' has none (its columns: q)"),
])
def test_keep_categories_refuses_what_would_keep_nothing_by_mistake(rows, kinds, said):
    with pytest.raises(DataError) as e:
        keep_categories(rows, kinds, "x")
    assert said in str(e.value)


def _cfg(tmp_path, *overrides):
    return RECIPE.resolve(preset="smollm2", output_dir=str(tmp_path / "run"), overrides=list(overrides))


def test_the_gsm8k_rows_of_one_kind_and_data_limit_counts_them(tmp_path):
    every = load_task_dataset(_cfg(tmp_path))
    subs = load_task_dataset(_cfg(tmp_path, "data.categories=[subtraction]"))
    assert set(subs["category"]) == {"subtraction"}
    # the same problems, in the same order, as the subtractions among every row
    assert subs["prompt"] == [p for p, c in zip(every["prompt"], every["category"]) if c == "subtraction"]
    limited = load_task_dataset(_cfg(tmp_path, "data.categories=[subtraction]", "data.limit=7"))
    assert len(limited) == 7 and limited["prompt"] == subs["prompt"][:7]  # 7 subtractions, not 7 rows then filtered


def test_a_stage_takes_its_own_data_and_its_worked_examples_are_of_that_kind(tmp_path):
    cfg = _cfg(tmp_path, "stages.0.data.categories=[addition]", "stages.1.data.categories=[subtraction]")
    sft, grpo = st.stage_config(cfg, 1), st.stage_config(cfg, 2)
    assert (sft.data.categories, grpo.data.categories, cfg.data.categories) == (["addition"], ["subtraction"], None)
    assert sft.data.subset == grpo.data.subset == "easy"  # the rest of data.* is the run's
    examples = st.sft_dataset_for(sft, 40)
    assert len(examples) == 40
    assert all(" + " in r["completion"][0]["content"] and " - " not in r["completion"][0]["content"] for r in examples)
    assert set(load_task_dataset(grpo)["category"]) == {"subtraction"}
    assert config_problems(cfg) == []
    # a config file says the same
    d = config_to_dict(cfg)
    assert d["stages"][1]["data"] == {"categories": ["subtraction"]}
    assert load_config(d).stages[1].data == {"categories": ["subtraction"]}


def test_an_unknown_data_key_on_a_stage_is_named_with_the_stage_and_the_close_name(capsys):
    from unsloth_grpo.cli.recipe import run_recipe

    code = run_recipe(RECIPE, ["--preset", "smollm2", "--check", "stages.1.data.categorys=[subtraction]"])
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err
    assert "stages[1] (grpo): unknown config key 'data.categorys'. Did you mean 'categories'?" in err


def test_a_kind_no_row_has_is_refused_before_any_model_loads(tmp_path, capsys, monkeypatch):
    from cli_replay import no_model_loads, snapshot

    from unsloth_grpo.cli.recipe import run_recipe

    no_model_loads(monkeypatch)
    out = tmp_path / "run"
    before = snapshot(out)
    code = run_recipe(RECIPE, ["--preset", "smollm2", "--output-dir", str(out), "stages.1.data.categories=[division]"])
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err, err
    assert "names 'division', which no row of 'synthetic' is; its kinds: addition, subtraction" in err
    assert snapshot(out) == before  # nothing written, no model loaded


@pytest.mark.slow
def test_a_grpo_stage_trains_on_its_own_kind_of_problem(tmp_path):
    """The smoke model, a warm-up on additions, then GRPO on subtractions only: the GRPO stage's trainer gets
    the subtraction rows, and its samples are of subtraction prompts."""
    from unsloth_grpo.training.train import train

    base = RECIPE.resolve(preset="smoke", output_dir=str(tmp_path / "run"),
                          overrides=["run.samples_every=1", "evaluation.before_after=false"])
    d = config_to_dict(base)
    d["stages"] = [{"name": "warm", "kind": "sft", "max_steps": 2, "num_examples": 16,
                    "data": {"categories": ["addition"]}},
                   {"name": "sub", "max_steps": 2, "data": {"categories": ["subtraction"]}}]
    cfg = load_config(d)
    seen = []

    from transformers import TrainerCallback

    class Seen(TrainerCallback):
        def on_train_begin(self, args, state, control, train_dataloader=None, **kwargs):
            ds = getattr(train_dataloader, "dataset", None)
            seen.append(None if ds is None or "category" not in ds.column_names else sorted(set(ds["category"])))

    train(cfg, callbacks=[Seen()], log=lambda _m: None)
    every = load_task_dataset(base)
    info = json.loads((Path(cfg.output_dir) / "stages" / "02-sub" / "run_info.json").read_text())
    assert info["dataset"]["rows"] == sum(c == "subtraction" for c in every["category"]) < len(every)
    assert seen[-1] == ["subtraction"]
