"""Several processes: launch detection, TRL's batch rules, refusals, and a real two-process run."""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from unsloth_grpo.config import load_config
from unsloth_grpo.training.checks import config_problems as validate
from unsloth_grpo.training.distributed import (
    Layout,
    batch_problems,
    describe_layout,
    detect,
    layout_problems,
    parse_vllm_server,
    plan_batch,
    rank_log_callbacks,
    vllm_server_kwargs,
)

REPO = Path(__file__).resolve().parents[1]


def _cfg(training=None, model=None):
    return load_config({"rewards": [{"name": "correctness"}], "training": training or {}, "model": model or {}})


# ------------------------------------------------------------------ launch detection


def test_plain_python_is_one_process():
    assert detect({}) == Layout(1, 0, 0, 1, "none", "single", None)


def test_torchrun_variables():
    env = {"WORLD_SIZE": "4", "RANK": "3", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2", "TORCHELASTIC_RUN_ID": "x"}
    layout = detect(env)
    assert layout == Layout(4, 3, 1, 2, "torchrun", "ddp", None)
    assert (layout.nodes, layout.is_main, layout.distributed) == (2, False, True)
    assert layout.summary() == "4 processes (2 nodes x 2; torchrun; DDP)"


def test_accelerate_fsdp_and_deepspeed_variables():
    base = {"WORLD_SIZE": "2", "RANK": "0", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "2",
            "TORCHELASTIC_RUN_ID": "x", "ACCELERATE_MIXED_PRECISION": "no"}
    assert detect({**base, "ACCELERATE_USE_FSDP": "true"}).summary() == "2 processes (1 node; accelerate; FSDP)"
    zero3 = detect({**base, "ACCELERATE_USE_DEEPSPEED": "true", "ACCELERATE_DEEPSPEED_ZERO_STAGE": "3"})
    assert (zero3.strategy, zero3.zero_stage, zero3.strategy_label) == ("deepspeed", 3, "DeepSpeed ZeRO-3")
    assert detect({**base, "ACCELERATE_USE_DEEPSPEED": "true"}).strategy_label == "DeepSpeed"
    # a single `accelerate launch` process: no WORLD_SIZE
    assert detect({"ACCELERATE_MIXED_PRECISION": "no"}) == Layout(1, 0, 0, 1, "accelerate", "single", None)


def test_inconsistent_rank_is_refused():
    with pytest.raises(ValueError, match="RANK=2 with WORLD_SIZE=2"):
        detect({"WORLD_SIZE": "2", "RANK": "2"})
    with pytest.raises(ValueError, match="WORLD_SIZE='two'"):
        detect({"WORLD_SIZE": "two"})


# ------------------------------------------------------------------ batch rules: exactly TRL's


def _trl_outcome(monkeypatch, pd, ga, spg, gen, g, world):
    """What TRL's own GRPOConfig says about these settings at ``world`` processes."""
    from transformers import TrainingArguments
    from trl import GRPOConfig

    monkeypatch.setattr(TrainingArguments, "world_size", property(lambda self: world))
    kwargs = dict(output_dir="unused", use_cpu=True, bf16=False, report_to="none", num_generations=g,
                  per_device_train_batch_size=pd, gradient_accumulation_steps=ga)
    if spg is not None:
        kwargs["steps_per_generation"] = spg
    if gen is not None:
        kwargs["generation_batch_size"] = gen
    try:
        c = GRPOConfig(**kwargs)
    except ValueError:
        return None
    return c.generation_batch_size, c.steps_per_generation


def test_batch_check_matches_trl_on_a_grid(monkeypatch):
    """Our check before loading accepts exactly what TRL 1.14's GRPOConfig accepts, at any world size."""
    grid = itertools.product([1, 3, 4, 8], [1, 2], [(None, None), (2, None), (None, 12), (None, 16), (2, 16)],
                             [2, 4, 6, 8], [1, 2, 3])
    checked = rejected = 0
    for pd, ga, (spg, gen), g, world in grid:
        extra = {"generation_batch_size": gen} if gen is not None else {}
        t = _cfg({"per_device_train_batch_size": pd, "gradient_accumulation_steps": ga, "steps_per_generation": spg,
                  "num_generations": g, **extra}).training
        plan, problems = plan_batch(t, world)
        trl = _trl_outcome(monkeypatch, pd, ga, spg, gen, g, world)
        where = dict(pd=pd, ga=ga, spg=spg, gen=gen, g=g, world=world)
        if trl is None:
            assert problems, where
            rejected += 1
        else:
            assert problems == [], where
            assert (plan.generation_batch, plan.steps_per_generation) == trl, where
        checked += 1
    assert (checked, rejected) == (480, 285)  # both outcomes well represented


def test_world_size_decides_validity_like_trl():
    """8 generations with 4 completions per device: invalid alone, valid on 2 processes (groups span devices)."""
    t = _cfg({"per_device_train_batch_size": 4, "num_generations": 8}).training
    assert batch_problems(t, 1) == [
        "generation batch = per_device_train_batch_size (4) x steps_per_generation (1) x processes (1) = 4 is not "
        "divisible by training.num_generations=8 (TRL needs whole groups of generations per round); set "
        "training.per_device_train_batch_size=8 or training.num_generations=4"
    ]
    assert batch_problems(t, 2) == []
    assert batch_problems(t, 3) != []  # 12 completions: one and a half groups


def test_validate_reads_the_world_size_of_the_launch(monkeypatch):
    cfg = _cfg({"per_device_train_batch_size": 4, "num_generations": 8})
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    assert any("not divisible by training.num_generations=8" in p for p in validate(cfg))
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "1")
    assert not any("num_generations" in p for p in validate(cfg))


@pytest.mark.parametrize("pd,g,world,spg", [(8, 6, 1, 1), (3, 8, 2, 1), (5, 4, 3, 2), (7, 6, 4, 1)])
def test_suggested_fixes_are_valid(pd, g, world, spg):
    t = _cfg({"per_device_train_batch_size": pd, "num_generations": g, "steps_per_generation": spg}).training
    (problem,) = batch_problems(t, world)
    new_pd = int(problem.split("per_device_train_batch_size=")[1].split()[0])
    new_g = int(problem.split("training.num_generations=")[-1])
    t.per_device_train_batch_size = new_pd
    assert batch_problems(t, world) == []
    assert abs(new_pd - pd) <= g  # the nearest valid size, not an arbitrary one
    t.per_device_train_batch_size, t.num_generations = pd, new_g
    assert batch_problems(t, world) == []


def test_both_generation_settings_are_refused():
    t = _cfg({"steps_per_generation": 2, "generation_batch_size": 16}).training
    assert batch_problems(t, 1) == ["training.steps_per_generation and training.generation_batch_size are both "
                                    "set; TRL accepts only one: remove one of them"]


def test_describe_layout_numbers():
    cfg = _cfg({"per_device_train_batch_size": 4, "num_generations": 8, "gradient_accumulation_steps": 2})
    text = describe_layout(cfg, Layout(4, 0, 0, 2, "torchrun", "ddp"))
    assert text.splitlines() == [
        "layout: 4 processes (2 nodes x 2; torchrun; DDP)",
        "  per device: 4 completions per micro-batch x 2 accumulation steps; generates 8 completions per round",
        "  global    : 32 completions per optimizer step; a generation round samples 32 completions = "
        "4 prompts x 8 generations and serves 2 micro-batches",
    ]
    one = describe_layout(_cfg({"per_device_train_batch_size": 4, "num_generations": 8}), 2)
    assert "a group of 8 generations spans 2 devices" in one


# ------------------------------------------------------------------ refusals before loading


def test_unsloth_backend_refused_under_several_processes(monkeypatch):
    from unsloth_grpo.hardware.backend import BackendError, select_backend

    monkeypatch.setenv("WORLD_SIZE", "2")
    if __import__("importlib").util.find_spec("unsloth") is not None:
        with pytest.raises(BackendError, match=r"model.backend='unsloth' under 2 processes.*model.backend=transformers"):
            select_backend("unsloth")
    assert select_backend("auto") == ("transformers", "2 processes: Unsloth is single-GPU")
    problems = validate(_cfg(model={"backend": "unsloth"}))
    assert any(p.startswith("model.backend='unsloth' under 2 processes") and "model.backend=transformers" in p
               for p in problems)


def test_sharding_refuses_4bit_and_missing_deepspeed():
    cfg = _cfg(model={"load_in_4bit": True, "backend": "transformers"})
    fsdp = Layout(2, 0, 0, 2, "accelerate", "fsdp")
    assert layout_problems(cfg, fsdp, have=lambda name: True) == [
        "model.load_in_4bit=true under FSDP: the backend places 4-bit weights on one device per process, which "
        "parameter sharding cannot split; set model.load_in_4bit=false (or launch with recipes/accelerate/ddp.yaml "
        "or zero2.yaml)"
    ]
    zero2 = Layout(2, 0, 0, 2, "accelerate", "deepspeed", 2)
    assert layout_problems(cfg, zero2, have=lambda name: True) == []  # ZeRO-2 shards optimizer state only
    missing = layout_problems(cfg, zero2, have=lambda name: name != "deepspeed")
    assert len(missing) == 1 and "pip install deepspeed" in missing[0]
    cfg.model.load_in_4bit = False
    assert layout_problems(cfg, Layout(2, 0, 0, 2, "accelerate", "deepspeed", 3), have=lambda n: True) == []


def test_more_processes_than_gpus_is_refused():
    cfg = _cfg(model={"backend": "transformers"})
    four = Layout(4, 0, 0, 4, "torchrun", "ddp")
    (problem,) = layout_problems(cfg, four, have=lambda n: True, gpu_count=lambda: 2)
    assert problem.startswith("4 processes on this machine but only 2 GPUs visible")
    assert problem.endswith("--nproc_per_node 2 (torchrun) or --num_processes 2 (accelerate)")
    assert layout_problems(cfg, four, have=lambda n: True, gpu_count=lambda: 4) == []
    assert layout_problems(cfg, four, have=lambda n: True, gpu_count=lambda: 0) == []  # CPU fallback
    two_nodes = Layout(8, 0, 0, 4, "torchrun", "ddp")  # 4 per machine, 4 GPUs each
    assert layout_problems(cfg, two_nodes, have=lambda n: True, gpu_count=lambda: 4) == []


def test_vllm_server_option():
    assert parse_vllm_server("10.0.0.5:8001") == ("http://10.0.0.5:8001", "10.0.0.5", 8001)
    assert parse_vllm_server("localhost") == ("http://localhost:8000", "localhost", 8000)
    assert vllm_server_kwargs("https://gen.example:9000/") == {
        "use_vllm": True, "vllm_mode": "server", "vllm_server_base_url": "https://gen.example:9000"}
    with pytest.raises(ValueError, match="model.vllm_server='http://:x' is not a server address"):
        parse_vllm_server("http://:x")
    single = Layout()
    cfg = _cfg(model={"vllm_server": "localhost:8000", "backend": "unsloth", "fast_inference": "on"})
    problems = layout_problems(cfg, single, have=lambda name: name != "vllm")
    assert [p.split(":")[0] for p in problems] == [
        "model.vllm_server is set with model.backend='unsloth'",
        "model.vllm_server and model.fast_inference='on' both ask for vLLM",
        "model.vllm_server is set but vllm is not installed in the training environment (TRL's client needs it to push "
        "weights to the server)",
    ]
    cfg.model.backend, cfg.model.fast_inference = "transformers", "auto"
    assert layout_problems(cfg, single, have=lambda name: True) == []


def test_vllm_server_maps_onto_grpo_config():
    from unsloth_grpo.hardware.backend import BackendInfo
    from unsloth_grpo.training.train import build_grpo_args

    cfg = _cfg(model={"vllm_server": "10.0.0.5:8001", "backend": "transformers"})
    info = BackendInfo("transformers", "cpu", "fp32", False, False, cfg.model.name)
    args = build_grpo_args(cfg, info, weights=[1.0])
    assert (args.use_vllm, args.vllm_mode, args.vllm_server_base_url) == (True, "server", "http://10.0.0.5:8001")
    cfg.model.vllm_server = None
    assert build_grpo_args(cfg, info, weights=[1.0]).use_vllm is False


def test_doctor_checks_the_configs_vllm_server(tmp_path, capsys):
    """`unsloth-grpo doctor --config` probes the server the recipe will generate on."""
    import argparse
    import socket

    from unsloth_grpo.hardware import doctor

    with socket.socket() as sock:  # a port nothing listens on once this closes
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    config = tmp_path / "server.yaml"
    config.write_text(f"model: {{backend: transformers, vllm_server: '127.0.0.1:{port}'}}\n"
                      "rewards: [{name: correctness}]\n")
    parser = argparse.ArgumentParser()
    doctor.add_parser(parser.add_subparsers())
    args = parser.parse_args(["doctor", "--config", str(config), "--no-network", "--output-dir", str(tmp_path),
                              "--json"])
    assert args.func(args) == 1
    result = json.loads(capsys.readouterr().out)
    assert result["report"]["vllm_server"]["target"] == f"127.0.0.1:{port}"
    (problem,) = [p for p in result["problems"] if p["topic"] == "vllm"]
    assert problem["message"].startswith(f"no vLLM server answers at 127.0.0.1:{port}")
    assert problem["fix"].endswith(f"trl vllm-serve --model MODEL --host 127.0.0.1 --port {port}")


def test_rank_log_is_off_by_default(tmp_path):
    assert rank_log_callbacks({}) == []
    assert len(rank_log_callbacks({"UNSLOTH_GRPO_RANK_LOG_DIR": str(tmp_path / "ranks")})) == 1


def test_cli_runs_as_a_module():
    out = subprocess.run([sys.executable, "-m", "unsloth_grpo.cli", "train", "--help"], cwd=REPO,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "--preset" in out.stdout and "KEY=VALUE" in out.stdout


# ------------------------------------------------------------------ shipped launch files


ACCELERATE_FILES = {"ddp.yaml": "MULTI_GPU", "fsdp.yaml": "FSDP", "zero2.yaml": "DEEPSPEED", "zero3.yaml": "DEEPSPEED",
                    "multinode.yaml": "MULTI_GPU"}


def test_accelerate_configs_load_and_start_with_their_command():
    import shlex

    from accelerate.commands.config.config_args import ClusterConfig

    folder = REPO / "recipes" / "accelerate"
    assert sorted(p.name for p in folder.glob("*.yaml")) == sorted(ACCELERATE_FILES)
    for name, kind in ACCELERATE_FILES.items():
        path = folder / name
        cluster = ClusterConfig.from_yaml_file(str(path))  # accelerate's own loader rejects unknown keys
        assert str(cluster.distributed_type).endswith(kind), name
        assert cluster.mixed_precision == "no", name  # precision is the recipe's (model.dtype)
        first = path.read_text().splitlines()[0]
        argv = shlex.split(first.lstrip("# "))
        assert argv[:4] == ["accelerate", "launch", "--config_file", f"recipes/accelerate/{name}"], name
        tail = argv[argv.index("-m"):]
        assert tail[:4] == ["-m", "unsloth_grpo.cli", "train", "--config"], name
        overrides = tail[5:]
        cfg = load_config(REPO / tail[4], overrides=overrides)  # the recipe it names exists and validates
        assert validate(cfg) == [], name
        assert cfg.model.backend != "unsloth" and cfg.model.load_in_4bit is False, name
    zero3 = ClusterConfig.from_yaml_file(str(folder / "zero3.yaml")).deepspeed_config
    assert zero3["zero_stage"] == 3 and zero3["zero3_save_16bit_model"] is True
    multi = ClusterConfig.from_yaml_file(str(folder / "multinode.yaml"))
    assert (multi.num_machines, multi.num_processes) == (2, 16)


# ------------------------------------------------------------------ two real processes


@pytest.mark.slow
def test_two_process_training_through_torchrun(tmp_path):
    """The launch users run: torchrun, two CPU processes (gloo), the console CLI, the smoke preset."""
    work, ranks = tmp_path / "work", tmp_path / "ranks"
    work.mkdir()
    env = {**os.environ, "OMP_NUM_THREADS": "1", "UNSLOTH_GRPO_RANK_LOG_DIR": str(ranks),
           "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
           "-m", "unsloth_grpo.cli", "train", "--recipe", "gsm8k", "--preset", "smoke", "--output-dir", "run",
           "training.max_steps=4"]
    proc = subprocess.run(cmd, cwd=work, env=env, capture_output=True, text=True, timeout=300)
    log = proc.stdout + proc.stderr
    assert proc.returncode == 0, log[-4000:]

    # both ranks stepped, and logged the same (gathered) metrics at every step
    rows = {r: [json.loads(x) for x in (ranks / f"metrics.rank{r}.jsonl").read_text().splitlines()] for r in (0, 1)}
    assert [row["step"] for row in rows[0]] == [1, 2, 3, 4]
    assert [row["step"] for row in rows[1]] == [1, 2, 3, 4]
    per_process = {"step_time"}  # wall-clock of each process: the only key allowed to differ
    for a, b in zip(rows[0], rows[1]):
        assert set(a) == set(b)
        assert {k for k in a if a[k] != b[k]} <= per_process, (a, b)
    assert {"reward", "reward_std", "rewards/xml_count/mean", "loss", "grad_norm", "entropy"} <= set(rows[0][0])

    # gradients were synchronised: the trained adapters are bit-identical; only rank 0 may save
    ends = [json.loads((ranks / f"rank{r}.json").read_text()) for r in (0, 1)]
    assert [e["global_step"] for e in ends] == [4, 4]
    assert [e["world_size"] for e in ends] == [2, 2]
    assert [e["should_save"] for e in ends] == [True, False]
    assert ends[0]["distributed_type"] == ends[1]["distributed_type"] == "MULTI_CPU"
    assert ends[0]["trainable_sha256"] == ends[1]["trainable_sha256"]

    # one output directory, written once: metrics appended by rank 0 only, one adapter, no stray folders
    assert sorted(p.name for p in work.iterdir()) == ["run"]
    out = work / "run"
    main_rows = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in main_rows] == [1, 2, 3, 4]
    assert [r["reward"] for r in main_rows] == [r["reward"] for r in rows[0]]
    assert [p.relative_to(work).as_posix() for p in work.rglob("adapter_model.safetensors")] == [
        "run/adapter_model.safetensors"]
    assert not list(out.glob("checkpoint-*"))
    assert json.loads((out / "run_info.json").read_text())["world_size"] == 2
    # the per-device and global numbers are printed once, by rank 0
    assert log.count("layout: 2 processes (1 node; torchrun; DDP)") == 1
    assert "per device: 8 completions per micro-batch" in log


def test_optimizer_state_mapped_to_a_ranked_cpu_device_loads(tmp_path):
    """transformers 5.17 resumes a several-process run with map_location=args.device, which is
    ``cpu:<rank>`` on CPU; the fix reads it as ``cpu`` (torch cannot restore to ``cpu:0``)."""
    import torch

    from unsloth_grpo.training.distributed import cpu_resume_fix

    path = tmp_path / "optimizer.pt"
    torch.save({"state": {0: {"exp_avg": torch.ones(3)}}}, path)
    with cpu_resume_fix():
        state = torch.load(path, map_location=torch.device("cpu", 0), weights_only=True)
        assert torch.load(path, map_location="cpu:1", weights_only=True)["state"][0]["exp_avg"].sum() == 3
    assert state["state"][0]["exp_avg"].tolist() == [1.0, 1.0, 1.0]
    assert torch.load is not None and torch.load.__module__.startswith("torch")  # put back


@pytest.mark.slow
def test_two_process_cpu_run_resumes_exactly(tmp_path):
    """torchrun, two CPU processes: a run stopped at its checkpoint and resumed ends like one that
    ran straight through (transformers 5.17 alone fails here: map_location='cpu:0')."""
    env = {**os.environ, "OMP_NUM_THREADS": "1",
           "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    common = ["training.save_steps=2", "run.samples_every=0", "model.backend=transformers",
              "data.num_synthetic=32"]

    def launch(*args):
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
               "-m", "unsloth_grpo.cli", "train", "--recipe", "gsm8k", *args]
        proc = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
        assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]

    launch("--preset", "smoke", "--output-dir", "full", "training.max_steps=4", *common)
    launch("--preset", "smoke", "--output-dir", "cut", "training.max_steps=2", *common)
    launch("--resume", "cut", "training.max_steps=4")
    full, cut = ([json.loads(x) for x in (tmp_path / d / "metrics.jsonl").read_text().splitlines()]
                 for d in ("full", "cut"))
    assert [r["step"] for r in cut] == [1, 2, 3, 4]
    for a, b in zip(full, cut):
        for key in ("reward", "loss", "grad_norm", "completions/mean_length"):
            assert b[key] == pytest.approx(a[key], rel=1e-5, abs=1e-6), (a["step"], key)
