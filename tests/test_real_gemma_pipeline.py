"""Gemma 3 270M (base) through what the toolkit does around a training run (issue 53, item 3), as
tests/test_real_model_pipeline.py does for SmolLM2: two GRPO steps of the gsm8k ``gemma3`` preset saved at
every step, resumed from the first checkpoint to the same second step; ``compare`` against the base model
with the run's plain prompt; the reward lab scoring the model's own samples."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

MODEL = "builtin:gemma3-270m"


def _quiet(_line: str) -> None:
    pass


def _cfg(out: Path, *overrides: str):
    """The gemma3 preset cut to seconds: its GRPO alone (no warm-up), 2 steps of 4 completions of 16 tokens."""
    from unsloth_grpo.recipes.gsm8k import RECIPE

    return RECIPE.resolve(preset="gemma3", output_dir=str(out), overrides=[
        "stages=[]", "model.backend=transformers", "training.max_steps=2", "training.save_steps=1",
        "training.num_generations=4", "training.per_device_train_batch_size=4",
        "training.max_completion_length=16", "data.num_synthetic=16", "run.samples_every=1",
        "evaluation.before_after=true", "evaluation.limit=4", "evaluation.batch_size=4",
        "evaluation.headroom=2", "evaluation.headroom_prompts=2", "training.dynamic_sampling=off", *overrides])


@pytest.fixture(scope="module")
def gemma_run(gemma3_dir, tmp_path_factory):
    from unsloth_grpo.training.train import train

    out = tmp_path_factory.mktemp("gemma") / "run"
    return train(_cfg(out), log=_quiet)


@pytest.mark.slow
def test_grpo_on_gemma_checkpoints_every_step_and_names_the_gemma_terms(gemma_run):
    out = gemma_run.output_dir
    assert gemma_run.global_step == 2 and [r["step"] for r in gemma_run.metrics] == [1, 2]
    assert sorted(c.name for c in (out / "checkpoints").iterdir()) == ["checkpoint-1", "checkpoint-2"]
    report = json.loads((out / "report.json").read_text())
    assert {m["metric"] for m in report["metrics"]} >= {"accuracy", "lenient_accuracy", "format_compliance"}
    saved = json.loads((out / "tokenizer_config.json").read_text())
    assert saved["eos_token"] == "<eos>"  # the end the plain format teaches, not SmolLM2's <|im_end|>
    card = (out / "README.md").read_text()  # what is trained from Gemma comes under its terms: the card says so
    assert "license: gemma" in card and "base_model: google/gemma-3-270m" in card
    assert "- terms: Gemma is provided under and subject to the Gemma Terms of Use found at " \
           "https://ai.google.dev/gemma/terms" in card


@pytest.mark.slow
def test_resuming_gemma_from_its_first_checkpoint_gives_the_same_second_step(gemma_run, tmp_path):
    from safetensors.torch import load_file

    from unsloth_grpo.training.train import train

    first = gemma_run.output_dir / "checkpoints" / "checkpoint-1"
    resumed = train(_cfg(tmp_path / "resumed", "evaluation.before_after=false"), resume=str(first), log=_quiet)
    assert resumed.global_step == 2
    a, b = gemma_run.metrics[-1], [r for r in resumed.metrics if r["step"] == 2][0]
    for key in ("reward", "loss", "grad_norm", "completions/mean_length"):
        assert b[key] == pytest.approx(a[key], rel=1e-4, abs=1e-6), key
    wa = load_file(str(gemma_run.output_dir / "adapter_model.safetensors"))
    wb = load_file(str(tmp_path / "resumed" / "adapter_model.safetensors"))
    assert max((wa[k] - wb[k]).abs().max().item() for k in wa) < 1e-5


@pytest.mark.slow
def test_compare_grades_base_gemma_and_the_run_on_the_same_plain_prompts(gemma_run, tmp_path):
    from unsloth_grpo.cli.main import main

    out = tmp_path / "cmp"
    assert main(["compare", MODEL, str(gemma_run.output_dir), "--limit", "4", "--batch-size", "4",
                 "--max-new-tokens", "16", "--backend", "transformers", "--output", str(out)]) == 0
    rows = {role: [json.loads(x) for x in (out / role / "eval_samples.jsonl").read_text().splitlines()]
            for role in ("baseline", "trained")}
    assert len(rows["baseline"]) == len(rows["trained"]) == 4
    assert [r["prompt"] for r in rows["baseline"]] == [r["prompt"] for r in rows["trained"]]
    report = json.loads((out / "report.json").read_text())
    assert {row["category"] for row in report["by_category"]} <= {"addition", "subtraction"}


@pytest.mark.slow
def test_the_reward_lab_scores_gemmas_samples(gemma3_dir, tmp_path):
    from unsloth_grpo.cli.rewards import generate_records
    from unsloth_grpo.rewards import build_reward_functions
    from unsloth_grpo.rewards.lab import analyse

    cfg = _cfg(tmp_path / "lab", "data.num_synthetic=4")
    records, ms = generate_records(MODEL, cfg, num_generations=4, limit=2, max_new_tokens=24, temperature=0.7,
                                   seed=0, batch_size=8, log=_quiet)
    assert len(records) == 8 and ms > 0 and all(r["completion"].strip() for r in records)
    funcs, weights = build_reward_functions(cfg.rewards)
    report = analyse(records, funcs, weights, generation_ms_per_completion=ms)
    assert [r.name for r in report.rewards] == [r.name for r in cfg.rewards]
    assert not [r for r in report.rewards if r.error]
    assert len(report.grading["correctness"]) == 8
