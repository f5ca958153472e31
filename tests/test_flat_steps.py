"""training.skip_flat_steps: a GRPO step whose gradients are all zero changes neither the weights nor Adam's state."""

from __future__ import annotations

import pytest

from unsloth_grpo.training import flat_steps


def _run(tiny_model_dir, tmp_path, *, skip: bool, steps: int = 3):
    """TRL's GRPOTrainer on the tiny model, 3 steps: the first step's group is informative (rewards 0/1),
    every later one flat (all 1), so its advantages, and with beta 0 its gradients, are zero. Returns the
    trainable weights after each step, the trainer and the option's callback (None without it)."""
    import datasets
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    holder = {}

    def first_step_only(completions, **kwargs):
        if holder["trainer"].state.global_step == 0:
            return [float(i % 2) for i in range(len(completions))]
        return [1.0] * len(completions)

    args = GRPOConfig(output_dir=str(tmp_path / "run"), use_cpu=True, bf16=False, max_steps=steps,
                      learning_rate=1e-3, per_device_train_batch_size=4, num_generations=4,
                      max_completion_length=6, logging_steps=1, save_strategy="no", report_to=[],
                      gradient_checkpointing=False, disable_tqdm=True, seed=0)
    rows = datasets.Dataset.from_list([{"prompt": [{"role": "user", "content": f"q {i}"}]} for i in range(8)])
    trainer = GRPOTrainer(model=model, reward_funcs=[first_step_only], args=args, processing_class=tokenizer,
                          train_dataset=rows)
    holder["trainer"] = trainer
    weights = []

    class Snapshot(TrainerCallback):
        def on_step_end(self, args, state, control, model=None, **kwargs):
            weights.append({n: p.detach().clone() for n, p in model.named_parameters() if p.requires_grad})

    trainer.add_callback(Snapshot())
    callback = flat_steps.attach(trainer) if skip else None
    trainer.train()
    return weights, trainer, callback


def _moved(a: dict, b: dict) -> float:
    return max((a[n] - b[n]).abs().max().item() for n in a)


def _logged(trainer, key):
    return [h[key] for h in trainer.state.log_history if key in h]


@pytest.mark.slow
def test_a_flat_step_leaves_weights_and_adam_as_they_were(tiny_model_dir, tmp_path):
    weights, trainer, callback = _run(tiny_model_dir, tmp_path / "on", skip=True)
    assert _logged(trainer, "grad_norm")[1:] == [0.0, 0.0]  # the later steps had nothing to learn
    assert _logged(trainer, "flat_steps/skipped") == [0.0, 1.0, 1.0] and callback.skipped == 2
    assert _moved(weights[1], weights[0]) == 0 and _moved(weights[2], weights[0]) == 0
    # Adam took one step only: its step count and moments are the first step's
    steps = {s["step"].item() for s in trainer.optimizer.state.values() if "step" in s}
    assert steps == {1.0}, steps


@pytest.mark.slow
def test_without_it_adam_moves_the_weights_on_a_flat_step(tiny_model_dir, tmp_path):
    """What the option is for: TRL's step on a zero gradient still changes the model (Adam's momentum)."""
    weights, trainer, _ = _run(tiny_model_dir, tmp_path / "off", skip=False)
    assert _logged(trainer, "grad_norm")[1:] == [0.0, 0.0]
    assert _moved(weights[1], weights[0]) > 1e-5 and _moved(weights[2], weights[1]) > 1e-5
    assert not _logged(trainer, "flat_steps/skipped")


@pytest.mark.slow
def test_an_informative_step_runs_as_before(tiny_model_dir, tmp_path):
    """The first step (informative) is the same update with the option on or off."""
    on, *_ = _run(tiny_model_dir, tmp_path / "on", skip=True, steps=1)
    off, *_ = _run(tiny_model_dir, tmp_path / "off", skip=False, steps=1)
    assert _moved(on[0], off[0]) == 0


def test_it_stands_aside_where_it_cannot_act():
    class Acc:
        distributed_type = "DistributedType.DEEPSPEED"
        scaler = None

    class Trainer:
        accelerator = Acc()

        class args:
            max_grad_norm = 1.0

        def add_callback(self, cb):
            self.cb = cb

    said = []
    assert flat_steps.attach(Trainer(), log=said.append).reason == "DeepSpeed owns the gradients"
    Acc.distributed_type, Acc.scaler, Trainer.args.max_grad_norm = "NO", object(), 0.0
    assert "max_grad_norm" in flat_steps.attach(Trainer(), log=said.append).reason
    assert len(said) == 2 and all(s.startswith("skip_flat_steps: off for this run") for s in said)
    Trainer.args.max_grad_norm = 1.0
    assert flat_steps.attach(Trainer(), log=said.append).reason is None and len(said) == 2


@pytest.mark.slow
def test_the_config_option_reaches_the_trainer(tmp_path):
    """A run of the gsm8k smoke preset with the option logs flat_steps/skipped every step; without, never."""
    import json

    from unsloth_grpo.recipes.gsm8k import RECIPE
    from unsloth_grpo.training.train import train

    for on in (True, False):
        out = tmp_path / str(on)
        cfg = RECIPE.resolve(preset="smoke", output_dir=str(out), overrides=[
            "run.samples_every=0", "training.max_steps=2", f"training.skip_flat_steps={str(on).lower()}"])
        train(cfg, log=lambda line: None)
        rows = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines() if x]
        skipped = [r["flat_steps/skipped"] for r in rows if "flat_steps/skipped" in r]
        assert skipped and all(v in (0.0, 1.0) for v in skipped) if on else not skipped
