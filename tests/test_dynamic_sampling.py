"""Dynamic sampling (training.dynamic_sampling): groups whose rewards all agree are dropped, and with
``refill`` replaced from further prompts; on a real GRPOTrainer with the tiny model."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from unsloth_grpo.training.dynamic_sampling import agreeing_groups, attach, first_round_reward

REPO = Path(__file__).resolve().parents[1]


def test_agreeing_groups_is_the_zero_variance_rule():
    import torch

    nan = float("nan")
    rewards = torch.tensor([[1.0, 0.5], [1.0, 0.5], [1.0, 0.5],   # all equal: agree
                            [1.0, 0.0], [0.0, 1.0], [1.0, 0.0],   # sums 1, 1, 1: agree (the advantage is 0)
                            [1.0, 0.0], [0.0, 0.0], [1.0, 0.0],   # sums differ: informative
                            [nan, nan], [1.0, nan], [nan, nan]])  # one scorable completion: nothing to compare
    weights = torch.tensor([1.0, 1.0])
    assert agreeing_groups(rewards, weights, 3).tolist() == [True, True, False, True]
    # normalize_then_sum compares each reward on its own: the second group differs in both
    assert agreeing_groups(rewards, weights, 3, "normalize_then_sum").tolist() == [True, False, False, True]
    # a tiny float difference is no signal either, as TRL's isclose(std, 0) says
    assert agreeing_groups(torch.tensor([[0.3], [0.1 + 0.2]]), torch.tensor([1.0]), 2).tolist() == [True]


def test_attach_checks_its_settings():
    assert attach(object(), "off") is None
    with pytest.raises(ValueError, match="choose one of off, drop, refill"):
        attach(object(), "sometimes")
    from unsloth_grpo.training.dynamic_sampling import DynamicSamplingError

    with pytest.raises(DynamicSamplingError, match="needs TRL's GRPOTrainer"):
        attach(object(), "drop")


def test_config_refuses_unknown_modes_and_rounds_below_one():
    from unsloth_grpo.config import load_config, validate

    cfg = load_config({"rewards": [{"name": "correctness"}],
                       "training": {"dynamic_sampling": "often", "max_sampling_rounds": 0}})
    problems = validate(cfg)
    assert any("training.dynamic_sampling='often' is not one of off, drop, refill" in p for p in problems)
    assert any("training.max_sampling_rounds=0" in p for p in problems)
    # YAML reads a bare off as false; the field keeps what was typed
    assert load_config({}, overrides=["training.dynamic_sampling=off"]).training.dynamic_sampling == "off"
    # the toolkit's options are typed fields, never among the TRL fields handed to GRPOConfig
    t = load_config({"training": {"dynamic_sampling": "refill", "max_steps": 5}}).training
    assert (t.dynamic_sampling, t.max_steps) == ("refill", 5) and "dynamic_sampling" not in t.trl
    u = t.updated(dynamic_sampling="drop", max_steps=7)
    assert (u.dynamic_sampling, u.max_steps, t.max_steps) == ("drop", 7, 5) and "dynamic_sampling" not in u.trl


# ------------------------------------------------------------------ the logged reward under refill

def _refilled_steps(target: int, *, hard_pass: float, steps: int = 20000, max_rounds: int = 6, seed: int = 0):
    """Simulated refill steps on a task whose easy 60% is always right (reward 2) and whose hard 40% is
    right with probability ``hard_pass`` per completion, 8 completions a group, ``target`` groups a round.
    Returns (true mean reward, mean of first_round_reward, mean of the plain mean over rounds)."""
    import random

    rng = random.Random(seed)
    est, plain = [], []
    for _ in range(steps):
        values, mixed = [], []
        for _ in range(max_rounds):
            groups = [[2.0] * 8 if rng.random() < 0.6 else [2.0 * (rng.random() < hard_pass) for _ in range(8)]
                      for _ in range(target)]
            values.append(sum(map(sum, groups)) / (8 * target))
            mixed.append(sum(len(set(g)) > 1 for g in groups))
            if sum(mixed) >= target:
                break
        est.append(first_round_reward(values, mixed, target))
        plain.append(sum(values) / len(values))
    return 2 * (0.6 + 0.4 * hard_pass), sum(est) / steps, sum(plain) / steps


@pytest.mark.parametrize("target", [1, 2, 3])
def test_the_logged_reward_estimates_the_policys_reward_where_the_mean_over_rounds_does_not(target):
    truth, est, plain = _refilled_steps(target, hard_pass=0.3)
    assert est == pytest.approx(truth, abs=0.03)  # 20,000 steps: standard error about 0.006
    assert plain < truth - 0.05  # the rounds that end a step (the mixed ones) weigh too much


def test_the_mean_over_rounds_can_fall_while_the_policy_improves():
    """The hard half going from never right to right 30% of the time: the true reward rises by 0.24, the
    mean over rounds falls (what seed 1 of the real model logged), the estimate rises with the truth."""
    before, after = _refilled_steps(1, hard_pass=0.0), _refilled_steps(1, hard_pass=0.3)
    assert after[0] - before[0] == pytest.approx(0.24)
    assert after[2] < before[2]
    assert after[1] - before[1] == pytest.approx(0.24, abs=0.05)


def test_first_round_reward_by_hand():
    assert first_round_reward([1.5], [1], 1) == 1.5
    # one group a round: the rounds before the one that ended the step
    assert first_round_reward([2.0, 0.0, 0.75], [0, 0, 1], 1) == 1.0
    # the rounds ran out short of the target: every order was possible
    assert first_round_reward([2.0, 0.0, 2.0], [0, 0, 0], 1) == pytest.approx(4 / 3)
    # two groups a round: either of the last two rounds could have ended it (1 + 1 reaches 2 only with
    # both, so only a round whose removal leaves fewer than 2 qualifies: both do)
    assert first_round_reward([1.0, 0.5, 0.25], [0, 1, 1], 2) == pytest.approx(((1.0 + 0.25) / 2 + (1.0 + 0.5) / 2) / 2)
    # a round holding both informative groups must have been the last
    assert first_round_reward([1.0, 0.5, 0.25], [0, 0, 2], 2) == pytest.approx(0.75)
    with pytest.raises(ValueError, match="one each a round"):
        first_round_reward([1.0, 2.0], [1], 1)


# ------------------------------------------------------------------ a real trainer on the tiny model

def _rows(n_flat: int, n_varied: int):
    import datasets

    rows = [{"prompt": [{"role": "user", "content": f"flat question {i}"}], "kind": "flat"} for i in range(n_flat)]
    rows += [{"prompt": [{"role": "user", "content": f"varied question {i}"}], "kind": "varied"}
             for i in range(n_varied)]
    return datasets.Dataset.from_list(rows)


def flat_or_varied(completions, kind, **kwargs):
    """Every completion of a 'flat' prompt scores 1 (a group that teaches nothing); a 'varied' prompt's
    completions alternate 0 and 1 (TRL passes a group's completions together)."""
    return [1.0 if k == "flat" else float(i % 2) for i, k in enumerate(kind)]


def _trainer(tiny_model_dir, tmp_path, mode, *, rounds=4, per_device=8, generations=4, spg=None, steps=3,
             n_flat=8, n_varied=8):
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    extra = {} if spg is None else {"steps_per_generation": spg}
    args = GRPOConfig(output_dir=str(tmp_path / "run"), use_cpu=True, bf16=False, max_steps=steps,
                      learning_rate=1e-3, per_device_train_batch_size=per_device, num_generations=generations,
                      max_completion_length=6, logging_steps=1, save_strategy="no", report_to=[],
                      gradient_checkpointing=False, disable_tqdm=True, seed=0, **extra)
    trainer = GRPOTrainer(model=model, reward_funcs=[flat_or_varied], args=args, processing_class=tokenizer,
                          train_dataset=_rows(n_flat, n_varied))
    attach(trainer, mode, max_rounds=rounds)
    seen = []  # what each loss computation was given: the prompts of its rows, and its tensors
    compute = trainer._compute_loss

    def recording(model, inputs):
        prompts = tokenizer.batch_decode(inputs["prompt_ids"], skip_special_tokens=True)
        seen.append({"step": trainer.state.global_step, "prompts": prompts,
                     **{k: inputs[k].detach().clone() for k in ("advantages", "completion_mask", "num_items_in_batch")}})
        return compute(model, inputs)

    trainer._compute_loss = recording
    return trainer, seen


def _logged(trainer, key):
    return [h[key] for h in trainer.state.log_history if key in h]


@pytest.mark.slow
def test_refill_drops_groups_with_equal_rewards_and_fills_the_batch_from_further_prompts(tiny_model_dir, tmp_path):
    trainer, seen = _trainer(tiny_model_dir, tmp_path, "refill")
    trainer.train()
    assert len(seen) == 3
    for batch in seen:
        # the batch keeps its configured size (2 prompts x 4 completions), all of it from informative groups
        assert len(batch["prompts"]) == 8 and all("varied" in p for p in batch["prompts"]), batch["prompts"]
        assert batch["num_items_in_batch"] == batch["completion_mask"].sum()
        assert (batch["advantages"] != 0).all()
    dropped, rounds, prompts = (_logged(trainer, f"dynamic_sampling/{k}") for k in ("groups_dropped", "rounds", "prompts"))
    assert sum(dropped) > 0 and max(rounds) > 1  # a flat group was met and replaced
    assert prompts == [2 * r for r in rounds]  # each round generates for a batch's worth of prompts
    assert _logged(trainer, "dynamic_sampling/groups_kept") == [2.0, 2.0, 2.0]
    # TRL's own frac_reward_zero_std still counts every generated group, the dropped ones too
    assert max(_logged(trainer, "frac_reward_zero_std")) > 0


@pytest.mark.slow
def test_refill_logs_the_first_round_estimate_and_keeps_the_mean_over_rounds(tiny_model_dir, tmp_path):
    """What TRL logged for each round, put through first_round_reward, is the step's logged reward;
    the plain mean over rounds is kept under dynamic_sampling/all_rounds/...."""

    trainer, _ = _trainer(tiny_model_dir, tmp_path, "refill", steps=6)
    sampler = trainer.dynamic_sampler
    rounds_seen, generate = [], sampler._generate

    def recording(batch):
        out = generate(batch)
        m = trainer._metrics["train"]
        rounds_seen.append((trainer.state.global_step, m["reward"][-1], m["frac_reward_zero_std"][-1]))
        return out

    sampler._generate = recording
    trainer.train()
    expected, plain = [], []
    for step in sorted({s for s, _, _ in rounds_seen}):
        values = [v for s, v, _ in rounds_seen if s == step]
        mixed = [round(2 * (1 - z)) for s, _, z in rounds_seen if s == step]  # 2 groups a round
        expected.append(first_round_reward(values, mixed, 2))
        plain.append(sum(values) / len(values))
    assert _logged(trainer, "reward") == pytest.approx(expected)
    assert _logged(trainer, "rewards/flat_or_varied/mean") == pytest.approx(expected)
    assert _logged(trainer, "dynamic_sampling/all_rounds/reward") == pytest.approx(plain)
    assert _logged(trainer, "dynamic_sampling/all_rounds/rewards/flat_or_varied/mean") == pytest.approx(plain)
    assert any(abs(e - p) > 1e-6 for e, p in zip(expected, plain))  # a refilled step where they differ


@pytest.mark.slow
def test_drop_trains_on_the_informative_groups_only(tiny_model_dir, tmp_path):
    trainer, seen = _trainer(tiny_model_dir, tmp_path, "drop", steps=4)
    trainer.train()
    kept = _logged(trainer, "dynamic_sampling/groups_kept")
    assert _logged(trainer, "dynamic_sampling/rounds") == [1.0] * 4  # never generates again
    for batch, k in zip(seen, kept):
        if k == 0:  # nothing informative: TRL's batch as it was (its advantages are all zero)
            assert len(batch["prompts"]) == 8 and (batch["advantages"] == 0).all()
        else:
            assert len(batch["prompts"]) == 4 * k and all("varied" in p for p in batch["prompts"])
    assert 1.0 in kept  # a step with one flat and one varied group trained on the varied one alone
    assert not _logged(trainer, "dynamic_sampling/all_rounds/reward")  # one round: nothing to estimate


@pytest.mark.slow
def test_a_batch_that_cannot_split_evenly_is_topped_up_with_masked_rows(tiny_model_dir, tmp_path):
    """3 completions per prompt and 2 micro-batches per generation: one informative group (3 rows) is
    padded to 4 with a dropped row whose loss mask is zero, so no micro-batch is lost or uneven."""
    trainer, seen = _trainer(tiny_model_dir, tmp_path, "drop", per_device=3, generations=3, spg=2, steps=6,
                             n_flat=6, n_varied=6)
    trainer.train()
    kept = _logged(trainer, "dynamic_sampling/groups_kept")
    assert 1.0 in kept, kept
    i = 2 * kept.index(1.0)  # that generation's two micro-batches
    pair = seen[i:i + 2]
    assert [len(b["prompts"]) for b in pair] == [2, 2]
    masked = [row for b in pair for row, m in enumerate(b["completion_mask"]) if m.sum() == 0]
    assert sum(b["completion_mask"].sum() for b in pair) == pair[0]["num_items_in_batch"]
    rows = [(p, a) for b in pair for p, a in zip(b["prompts"], b["advantages"].tolist())]
    assert sum("varied" in p for p, _ in rows) == 3 and len(masked) >= 1
    assert all(a == 0 for p, a in rows if "flat" in p)


# ------------------------------------------------------------------ through the recipe: resume, backends

#: Resumed metrics must equal the uninterrupted run's (as tests/test_checkpoint.py measures them).
RESUME_TOL = dict(rel=1e-5, abs=1e-6)
SMOKE = ["run.samples_every=0", "training.dynamic_sampling=refill", "training.max_sampling_rounds=3",
         "training.per_device_train_batch_size=16", "training.steps_per_generation=2", "data.num_synthetic=64"]


def _smoke(out, steps, *extra):
    from unsloth_grpo.recipes.gsm8k import RECIPE

    return RECIPE.resolve(preset="smoke", output_dir=str(out),
                          overrides=[f"training.max_steps={steps}", *SMOKE, *extra])


def _signal_at(step: int):
    from transformers import TrainerCallback

    class SendSigint(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            if state.global_step == step:
                os.kill(os.getpid(), __import__("signal").SIGINT)

    return SendSigint()


def _metrics(path):
    return [json.loads(x) for x in (Path(path) / "metrics.jsonl").read_text().splitlines()]


@pytest.mark.slow
def test_a_resumed_refill_run_matches_the_uninterrupted_one(tmp_path):
    """Refill with steps_per_generation=2 (4 groups a generation): stopped at step 4 and resumed, the
    run draws the same refill prompts and ends with the same adapter as the run that went straight on."""
    from safetensors.torch import load_file

    from unsloth_grpo.training.train import TrainingStopped, train

    quiet = lambda _m: None  # noqa: E731
    common = ("training.save_steps=2", "model.backend=transformers")
    train(_smoke(tmp_path / "full", 8, *common), log=quiet)
    with pytest.raises(TrainingStopped):
        train(_smoke(tmp_path / "cut", 8, *common), callbacks=[_signal_at(4)], log=quiet)
    train(_smoke(tmp_path / "cut", 8, *common), resume=True, log=quiet)
    full, cut = _metrics(tmp_path / "full"), _metrics(tmp_path / "cut")
    # one generation serves two steps; metrics.jsonl holds the steps that generated
    assert [r["step"] for r in full] == [r["step"] for r in cut] == [1, 3, 5, 7]
    assert any(r["dynamic_sampling/rounds"] > 1 for r in full[2:]), "the resumed half must refill"
    for a, b in zip(full, cut):
        for key in ("reward", "loss", "grad_norm", "completions/mean_length", "dynamic_sampling/rounds",
                    "dynamic_sampling/groups_dropped", "dynamic_sampling/generated_tokens"):
            if key in a:
                assert b[key] == pytest.approx(a[key], **RESUME_TOL), (a["step"], key)
    wa = load_file(str(tmp_path / "full" / "adapter_model.safetensors"))
    wb = load_file(str(tmp_path / "cut" / "adapter_model.safetensors"))
    assert max((wa[k] - wb[k]).abs().max().item() for k in wa) < 1e-6


@pytest.mark.slow
def test_refill_on_unsloths_cpu_fallback(tmp_path):
    """Unsloth's backend on a machine without a GPU trains with TRL's own GRPOTrainer (Unsloth does
    not patch it there); dynamic sampling wraps it the same way."""
    pytest.importorskip("unsloth")
    from unsloth_grpo.training.train import train

    result = train(_smoke(tmp_path / "run", 4, "model.backend=unsloth"), log=lambda _m: None)
    rows = [r for r in result.metrics if "dynamic_sampling/rounds" in r]
    assert [r["step"] for r in rows] == [1, 3]
    assert all(r["dynamic_sampling/prompts"] == 4 * r["dynamic_sampling/rounds"] for r in rows)
    assert json.loads((tmp_path / "run" / "run_info.json").read_text())["backend"]["backend"] == "unsloth"


@pytest.mark.slow
def test_two_processes_train_the_same_refilled_batch(tmp_path):
    """torchrun, two CPU processes, 6 completions per process and groups of 4: the middle group of each
    generation straddles the two processes. Both ranks choose the same groups from the same refills:
    identical metrics at every step and identical adapters. (Resume is checked in one process above;
    tests/test_distributed.py checks that two-process runs resume exactly.)"""
    import subprocess
    import sys

    ranks = tmp_path / "ranks"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "UNSLOTH_GRPO_RANK_LOG_DIR": str(ranks),
           "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
           "-m", "unsloth_grpo.cli", "train", "--recipe", "gsm8k", "--preset", "smoke", "--output-dir", "run",
           "training.max_steps=4", "run.samples_every=0", "model.backend=transformers", "data.num_synthetic=32",
           "training.dynamic_sampling=refill", "training.max_sampling_rounds=3",
           "training.per_device_train_batch_size=6", "training.num_generations=4"]
    proc = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]

    rows = {r: [json.loads(x) for x in (ranks / f"metrics.rank{r}.jsonl").read_text().splitlines()] for r in (0, 1)}
    assert [r["step"] for r in rows[1]] == [r["step"] for r in rows[0]] == [1, 2, 3, 4]
    for a, b in zip(rows[0], rows[1]):
        # step_time is each process's clock (the rollout check gathers every rank's rows)
        assert {k for k in a if a[k] != b[k]} <= {"step_time"}, (a, b)
    ds = [{k.split("/")[1]: v for k, v in r.items() if k.startswith("dynamic_sampling/")} for r in rows[0]]
    # a generation stops as soon as its batch is full of informative groups, else at the cap
    assert all(d["groups_kept"] == 3 or d["rounds"] == 3 for d in ds), ds
    assert all(d["groups_kept"] <= 3 and d["prompts"] == 3 * d["rounds"] for d in ds), ds
    assert sum(d["groups_dropped"] for d in ds) > 0 and max(d["rounds"] for d in ds) > 1, ds
    ends = [json.loads((ranks / f"rank{r}.json").read_text()) for r in (0, 1)]
    assert ends[0]["trainable_sha256"] == ends[1]["trainable_sha256"]
    assert "dynamic sampling: refill" in proc.stdout + proc.stderr


@pytest.mark.slow
def test_batches_it_cannot_regroup_switch_it_off_with_one_line(tiny_model_dir, tmp_path):
    """A batch holding a key the sampler does not know how to regroup (a multimodal model's image tensors,
    say) is trained as TRL built it, and the run says once that dynamic sampling is off."""
    trainer, seen = _trainer(tiny_model_dir, tmp_path, "refill", steps=2)
    said = []
    trainer.dynamic_sampler.log = said.append
    inner = trainer.dynamic_sampler._generate

    def with_pixels(inputs):
        out = inner(inputs)
        out["per_row_extra"] = out["advantages"].new_zeros(len(out["advantages"]), 1)
        return out

    trainer.dynamic_sampler._generate = with_pixels
    trainer.train()
    assert [len(b["prompts"]) for b in seen] == [8, 8] and not _logged(trainer, "dynamic_sampling/rounds")
    assert said == ["dynamic sampling: off for this run (its batches hold per_row_extra, which it cannot regroup)"]


# ------------------------------------------------------------------ the learning-efficiency benchmark

def _benchmark():
    from conftest import load_script

    return load_script(REPO / "benchmarks" / "learning_efficiency.py")


def test_benchmark_reads_time_to_plain_grpos_final_accuracy_and_the_gain_at_equal_time():
    bench = _benchmark()

    def arm(points, seconds):
        return {"points": [{"step": s, "seconds": t, "tokens": 10 * s, "accuracy": a, "lenient_accuracy": a + 0.01}
                           for s, t, a in points], "steps": points[-1][0], "seconds": seconds,
                "tokens": 10 * points[-1][0], "frac_reward_zero_std": 0.4}

    runs = [{"seed": 0, "arms": {"off": arm([(0, 0, 0.3), (10, 50, 0.4), (20, 100, 0.5)], 100),
                                 "refill": arm([(0, 0, 0.3), (8, 60, 0.5), (14, 100, 0.56)], 100)}},
            {"seed": 1, "arms": {"off": arm([(0, 0, 0.3), (10, 50, 0.45), (20, 100, 0.6)], 100),
                                 "refill": arm([(0, 0, 0.3), (8, 60, 0.55), (14, 100, 0.58)], 100)}}]
    rows = bench.summarize(runs, ["off", "refill"])
    assert rows["refill"]["reach_share"] == [0.6, None]  # seed 1 never reached 0.6
    assert rows["refill"]["delta_vs_plain"] == pytest.approx([0.06, -0.02])
    assert rows["refill"]["lenient_accuracy"] == pytest.approx(0.58)
    text = bench.table(rows, 2, 500)
    assert "60% of its time, median (1/2 seeds; each: 60%, never)" in text and "+2.0" in text


@pytest.mark.slow
def test_benchmark_trains_every_arm_from_one_start_and_plots(tmp_path):
    import subprocess
    import sys

    stages = ("stages=[{name: sft, kind: sft, max_steps: 8, learning_rate: 0.003, num_examples: 32},"
              " {name: grpo, kind: grpo, max_steps: 4}]")
    proc = subprocess.run([sys.executable, str(REPO / "benchmarks" / "learning_efficiency.py"), "--seeds", "0",
                           "--eval-every", "2", "--out", str(tmp_path / "out"), stages, "evaluation.limit=40",
                           "data.num_synthetic=64", "training.per_device_train_batch_size=32"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=900,
                          env={**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)})
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads((tmp_path / "out" / "results.json").read_text())
    arms = result["runs"][0]["arms"]
    assert list(arms) == ["off", "drop", "refill"] and arms["off"]["steps"] == 4
    for name, a in arms.items():
        assert a["points"][0]["step"] == 0 and a["points"][0]["accuracy"] == arms["off"]["points"][0]["accuracy"]
        assert a["seconds"] > 0 and a["tokens"] > 0
    assert (tmp_path / "out" / "efficiency.png").stat().st_size > 10_000
    assert "reached plain's final at" in proc.stdout
