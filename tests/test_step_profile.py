"""The step profile (benchmarks/step_time.py --profile, benchmarks/machine_limits.py): what it counts and computes."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import machine_limits  # noqa: E402
import step_time  # noqa: E402


def test_machine_limits_measure_positive_figures():
    assert machine_limits.matmul_gflops(64, 64, 64, reps=1, min_seconds=0.001) > 0
    m = machine_limits.memory_gbps(8, reps=1)
    assert m["read"] > 0 and m["copy"] > 0


def test_the_profile_counts_flops_from_the_frozen_weights_and_tokens():
    r = {"shared_prefill": True, "model": {"matmul_params": 1_100_000, "head_params": 100_000, "matmul_bytes": 4_000_000,
                                          "trained_params": 1000},
         "seconds": {"generate": 2.0, "loss_forward": 1.0, "backward": 1.0, "gen_calls": 1, "gen_rows": 8,
                     "prompt_tokens": 800, "distinct_prompt_tokens": 100, "decode_steps": 10, "decode_row_tokens": 80,
                     "loss_rows": 8, "loss_tokens": 1000, "loss_real_tokens": 900, "loss_completion_tokens": 80}}
    limits = {"threads": 1, "matmul_gflops": {"square 2048": 50.0}, "memory_gbps": {"read": 20.0}}
    text = step_time.profile(r, limits)
    gen = next(line for line in text.splitlines() if line.strip().startswith("generation"))
    # 2 FLOPs per weight per token: (100 prefilled + 80 decoded) tokens x 2M, the head (0.2M) on the 80 decoded
    # tokens and the prefill's last: 0.36 + 0.0162 GFLOP in 2 s
    assert gen.split()[4:8] == ["2000", "180", "0.4", "0.2"], gen
    assert "at least 2 ms" in gen  # 10 decode steps x 4 MB / 20 GB/s
    loss = next(line for line in text.splitlines() if "loss: forward" in line)
    # 1000 tokens x 2M, the head on 80 completion tokens and one more a row: 2.0176 GFLOP in 1 s
    assert loss.split()[2:6] == ["1000", "1000", "2.0", "2.0"], loss
    r["model"]["head_params"] = 600_000  # a head as large as the body: the loss's 912 head-less positions show
    loss = next(line for line in step_time.profile(r, limits).splitlines() if "loss: forward" in line)
    assert loss.split()[4] == "1.1", loss  # 1000 x 1M + 88 x 1.2M = 1.1056 GFLOP


@pytest.mark.slow
def test_the_step_profile_of_a_smoke_run_counts_what_the_step_did(tmp_path):
    """Two timed steps of the GSM8K smoke preset (1 prompt x 8 completions): the counts are those of the batch,
    the loss ran each group's prompt once, and the CPU clock times every part."""
    r = step_time.measure("smoke", "transformers", 2, 1, [], clock="cpu", out=str(tmp_path))
    s = r["seconds"]
    assert s["loss_rows"] == 8 and s["gen_rows"] == 8 * s["gen_calls"]
    assert s["decode_row_tokens"] == 8 * s["decode_steps"] >= s["new_tokens"] > 0
    assert s["distinct_prompt_tokens"] * 8 == s["prompt_tokens"]  # one prompt, eight rows
    assert r["shared_prompt_loss_served"] >= 3  # every step's loss forward (the warm-up's included)
    assert r["model"]["trained_params"] > 0 and r["model"]["matmul_params"] > r["model"]["trained_params"]
    assert 0 < s["generate"] + s["loss_forward"] + s["backward"] <= s["total"] == pytest.approx(s["cpu"], rel=0.2)
    text = step_time.table([r], {"threads": 1, "matmul_gflops": {"square 2048": 50.0}, "memory_gbps": {"read": 20.0}})
    assert "cpu clock" in text and "shared prompt in the loss on" in text and "GFLOP/s" in text
    assert r["cdf_sampling"] and "sampling cdf" in text
    assert r["merged_generation"] and "merged generation on" in text  # a LoRA run on a CPU
    import torch

    # oneDNN's packed layout where torch has it (its CPU builds do)
    assert r["packed"] == torch.backends.mkldnn.is_available() and (", packed)" in text) == r["packed"]


def test_the_real_runs_warm_up_is_kept_per_sft_configuration():
    """A warm-up kept by ``--runs real`` is reused only by runs whose SFT stage is the same: an override of
    the prompt or of the warm-up's own settings trains another; one of the GRPO stage does not."""
    from unsloth_grpo.recipes.gsm8k import RECIPE
    from unsloth_grpo.training.stages import stage_config

    def name(*overrides):
        return step_time.warmup_file("unsloth", stage_config(RECIPE.resolve(preset="smollm2", output_dir="x",
                                                                               overrides=list(overrides)), 1))

    plain = name()
    assert name("stages.1.learning_rate=1e-4") == plain
    assert len({plain, name("data.system_prompt=Answer."), name("stages.0.learning_rate=1e-4"), name("seed=1")}) == 4


def test_the_decode_benchmark_times_each_cache_and_checks_they_sample_the_same_tokens():
    """benchmarks/decode_step.py end to end on the tiny model (the real one is the default): every cache
    variant's line, its token check, and the products' lines."""
    import subprocess

    repo = Path(__file__).resolve().parents[1]
    proc = subprocess.run([sys.executable, "benchmarks/decode_step.py", "--model", "builtin:tiny", "--tokens", "4",
                           "--prompt", "12", "--reps", "1", "--no-compile", "--bf16"],
                          cwd=repo, capture_output=True, text=True, timeout=300,
                          env={**__import__("os").environ, "OMP_NUM_THREADS": "1"})
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = proc.stdout
    assert "dynamic" in out and "same tokens as dynamic: True" in out.split("static ")[1].splitlines()[0]
    assert "bf16 weights" in out and "torch.bfloat16" in out and "GB/s" in out
    cdf = out.split("dynamic+cdf")[1].splitlines()[0]  # the training's draw: timed, its tokens not compared
    assert "x dynamic" in cdf and "other draws" in cdf
    merged = out.split("dynamic+cdf+merged ")[1].splitlines()[0]
    assert "x dynamic" in merged and "other draws" in merged
    packed = out.split("dynamic+cdf+merged+packed")[1].splitlines()[0]
    assert "x dynamic" in packed and "other draws" in packed
    assert "merging the adapter into its buffers (" in out and " layers; " in out
