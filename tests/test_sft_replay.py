"""GRPO with an SFT term (training.sft_replay): the examples it replays, the loss it adds, and a staged run."""

from __future__ import annotations

import json

import pytest

from unsloth_grpo.training import sft_replay


@pytest.fixture()
def tiny(tiny_model_dir):
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.manual_seed(0)
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    model = get_peft_model(AutoModelForCausalLM.from_pretrained(tiny_model_dir),
                           LoraConfig(r=4, lora_alpha=8, target_modules="all-linear", lora_dropout=0.0))
    return model, tokenizer


def _gsm8k(tmp_path, *overrides):
    from unsloth_grpo.recipes.gsm8k import RECIPE

    return RECIPE.resolve(preset="smoke", output_dir=str(tmp_path / "run"), overrides=["run.samples_every=0", *overrides])


def test_the_replay_keeps_to_the_kinds_the_warm_up_kept(tmp_path):
    cfg = _gsm8k(tmp_path)
    additions = sft_replay.replay_examples(cfg, ["addition"])
    assert len(additions) == sft_replay.POOL
    worked = [r["completion"][-1]["content"] for r in additions]
    assert all(" + " in w and " - " not in w for w in worked), worked[:3]
    # no warm-up kinds named: the task's worked examples of every kind
    every = [r["completion"][-1]["content"] for r in sft_replay.replay_examples(cfg, None)]
    assert any(" - " in w for w in every) and any(" + " in w for w in every)


def test_only_the_completion_is_fitted_and_the_loss_is_the_models_own(tiny, tmp_path):
    import torch

    model, tokenizer = tiny
    rows = sft_replay.replay_examples(_gsm8k(tmp_path), ["addition"]).select(range(3))
    examples = sft_replay.tokenize(rows, tokenizer)
    assert len(examples) == 3
    for (ids, n_prompt), row in zip(examples, rows):
        prompt = tokenizer.apply_chat_template(row["prompt"], tokenize=False, add_generation_prompt=True)
        assert tokenizer.decode(ids[:n_prompt]) == prompt
        assert row["completion"][-1]["content"] in tokenizer.decode(ids[n_prompt:])
    ids, n_prompt = examples[0]
    labels = torch.tensor([[-100] * n_prompt + ids[n_prompt:]])
    expected = model(input_ids=torch.tensor([ids]), labels=labels).loss  # transformers' own shifted loss
    got = sft_replay.nll(model, examples[:1], tokenizer.pad_token_id)
    assert torch.allclose(got, expected, rtol=1e-4, atol=1e-5)
    # a batch of different lengths: padding adds nothing to the mean over completion tokens
    alone = [sft_replay.nll(model, [e], tokenizer.pad_token_id) for e in examples]
    counts = [len(i) - n for i, n in examples]
    together = sft_replay.nll(model, examples, tokenizer.pad_token_id)
    assert torch.allclose(together, sum(a * c for a, c in zip(alone, counts)) / sum(counts), rtol=1e-4, atol=1e-5)
    got.backward()
    assert any(p.grad is not None and p.grad.abs().sum() > 0 for n, p in model.named_parameters() if "lora" in n)


def test_attach_adds_the_weighted_loss_and_walks_the_whole_pool(tiny, tmp_path):
    import torch
    from collections import defaultdict

    model, tokenizer = tiny

    class Trainer:
        processing_class = tokenizer
        _metrics = {"train": defaultdict(list)}

        def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
            return torch.tensor(0.25)

    trainer = Trainer()
    rows = sft_replay.replay_examples(_gsm8k(tmp_path), ["addition"]).select(range(10))
    replay = sft_replay.attach(trainer, rows, weight=0.5, batch_size=4, seed=0, log=None)
    seen = []
    inner = replay.next_batch
    replay.next_batch = lambda: seen.extend(b := inner()) or b
    loss = trainer.compute_loss(model, {})
    assert replay.steps == 1 and trainer._metrics["train"]["sft_replay/loss"] == [replay.last]
    assert loss.item() == pytest.approx(0.25 + 0.5 * replay.last, rel=1e-5)
    for _ in range(4):
        trainer.compute_loss(model, {})
    # 20 examples drawn from a pool of 10: every one of them twice, the pool reshuffled after each pass
    assert sorted(map(id, seen)) == sorted(map(id, replay.examples * 2))


def test_a_negative_weight_is_a_config_problem(tmp_path):
    from unsloth_grpo.training.checks import config_problems

    problems = config_problems(_gsm8k(tmp_path, "training.sft_replay=-1"))
    assert any("training.sft_replay=-1" in p for p in problems), problems


def test_a_staged_run_replays_the_warm_ups_additions(tmp_path):
    """Two real stages on the tiny model: the GRPO stage logs its replay loss on every step and its log names the
    replay; the same run without the setting logs none (the option is off unless asked for)."""
    from unsloth_grpo.config import config_to_dict, load_config
    from unsloth_grpo.training.train import train

    logs: dict[float, list[str]] = {}
    for weight in (0.5, 0.0):
        d = config_to_dict(_gsm8k(tmp_path / str(weight)))
        d["stages"] = [{"name": "warm", "kind": "sft", "max_steps": 2, "learning_rate": 5e-3, "num_examples": 16,
                        "data": {"categories": ["addition"]}},
                       {"name": "grpo", "max_steps": 2, "training": {"sft_replay": weight}}]
        lines: list[str] = []
        train(load_config(d), log=lines.append)
        logs[weight] = lines
        rows = [json.loads(x) for x in (tmp_path / str(weight) / "run/stages/02-grpo/metrics.jsonl").read_text().split("\n") if x]
        replayed = [r["sft_replay/loss"] for r in rows if "sft_replay/loss" in r]
        assert len(replayed) == (2 if weight else 0) and all(v > 0 for v in replayed)
    assert any(line.startswith("sft replay: 256 worked examples, 8 a step, weight 0.5") for line in logs[0.5])
    assert not any(line.startswith("sft replay") for line in logs[0.0])
