"""Tests for the environment doctor. Everything is injected except where a test says "real"."""

from __future__ import annotations

import argparse
import http.server
import io
import json
import socket
import threading
import time

import pytest

from unsloth_grpo.cli import doctor as doctor_cli
from unsloth_grpo.hardware.doctor import probes as doctor_probes
from unsloth_grpo.hardware.doctor import requirements as doctor_requirements
from unsloth_grpo.hardware.doctor.checks import ERROR, WARNING, EnvironmentProblem, preflight, run_checks
from unsloth_grpo.hardware.doctor.probes import GPU, TorchInfo
from unsloth_grpo.hardware.doctor.report import collect_report
from unsloth_grpo.hardware.doctor.requirements import Declared, combine_specifiers, parse_declared
from unsloth_grpo.hardware.doctor.screen import render

GIB = 2**30

# Requirement lines as importlib.metadata.requires returns them (copied from the real metadata,
# trimmed to the packages the tests move).
OURS = [
    "torch<2.15,>=2.4",
    "transformers<=5.17.0,>=4.57",
    "trl<1.15,>=1.14",
    "datasets<5.0.0,>=3.4.1",
    "peft>=0.18.0",
    "accelerate>=1.4",
    'unsloth==2026.10.9; extra == "unsloth"',
    'unsloth_zoo==2026.10.9; extra == "unsloth"',
    'bitsandbytes>=0.45; extra == "unsloth"',
    'vllm>=0.10; extra == "vllm"',
    'unsloth==2026.10.9; extra == "test"',
    'pandas>=2.0; extra == "test"',
]
UNSLOTH = [
    "unsloth_zoo>=2026.10.9",
    "torch<2.15.0,>=2.4.0",
    "datasets!=4.0.*,!=4.1.0,!=4.4.*,!=4.5.0,<5.0.0,>=3.4.1",
    "peft!=0.11.0,>=0.18.0",
    "transformers!=4.53.0,!=4.54.0,!=4.55.0,!=4.55.1,!=4.57.0,!=4.57.4,!=4.57.5,!=5.0.0,!=5.1.0,<=5.17.0,>=4.52.4",
    "trl!=0.19.0,<=1.15.0,>=0.18.2",
    'mlx==0.32.4; sys_platform == "darwin" and platform_machine == "arm64" and python_version < "3"',
]
HEALTHY = {
    "torch": "2.14.1",
    "unsloth": "2026.10.9",
    "unsloth_zoo": "2026.10.9",
    "trl": "1.14.2",
    "transformers": "5.17.0",
    "peft": "0.21.2",
    "datasets": "4.8.5",
    "accelerate": "1.15.0",
    "bitsandbytes": "0.50.2",
}
RTX4090 = GPU(0, "NVIDIA GeForce RTX 4090", 24 * GIB, (8, 9), 23 * GIB)
T4 = GPU(0, "Tesla T4", 15 * GIB, (7, 5))
CUDA_4090 = TorchInfo("2.14.1+cu128", "12.8", True, (RTX4090,))
CPU_ONLY = TorchInfo("2.14.1+cpu", None, False, ())


def make_report(
    *,
    versions=None,
    requirements=None,
    torch_info=CUDA_4090,
    env=None,
    modules=("unsloth",),
    **kw,
):
    """A report for a healthy single-GPU machine unless told otherwise. No real probe runs."""
    versions = dict(HEALTHY if versions is None else versions)
    if requirements is None:
        requirements = {"unsloth-grpo": OURS}
        if versions.get("unsloth"):
            requirements["unsloth"] = UNSLOTH
    kw.setdefault("hub_probe", lambda host, port, timeout: (True, "connected in 0.05 s"))
    kw.setdefault("disk_free", lambda path: 200 * GIB)
    kw.setdefault("python_version", "3.11.7")
    return collect_report(
        versions=versions,
        requirements=requirements,
        requires_python=">=3.11",
        torch_info=torch_info,
        env={} if env is None else env,
        importable=lambda mod: mod in modules,
        **kw,
    )


def by_package(problems):
    return {p.package: p for p in problems if p.package}


# ---------------------------------------------------------------- version ranges


@pytest.mark.parametrize(
    "specs, expected",
    [
        ([">=1.14,<1.15", "!=0.19.0,<=1.15.0,>=0.18.2"], ">=1.14,<1.15"),
        ([">=2.4,<2.15", "<2.15.0,>=2.4.0"], ">=2.4,<2.15"),
        (
            ["<5.0.0,>=3.4.1", "!=4.0.*,!=4.1.0,!=4.4.*,!=4.5.0,<5.0.0,>=3.4.1"],
            ">=3.4.1,!=4.0.*,!=4.1.0,!=4.4.*,!=4.5.0,<5.0.0",
        ),
        ([">=4.2", "!=4.0.*,!=4.1.0"], ">=4.2"),  # exclusions below the range are dropped
        ([">=1.14,<1.15", "!=1.15.0"], ">=1.14,<1.15"),
        ([">=0.18.2,!=0.19.0,<=1.15.0", "!=1.15.0"], ">=0.18.2,!=0.19.0,!=1.15.0,<=1.15.0"),
        (["==2026.10.9", ">=2026.10.9"], "==2026.10.9"),
        (["==1.0", ">=2"], None),
        ([">=2", "<1.5"], None),
        ([">=1", "<1"], None),
        ([">=1", "<=1"], ">=1,<=1"),
        (["", ""], ""),
    ],
)
def test_combine_specifiers(specs, expected):
    assert combine_specifiers(specs) == expected


def test_parse_declared_keeps_base_and_marks_extras_optional():
    got = parse_declared("unsloth-grpo", OURS, include_extras=True)
    assert Declared("unsloth-grpo", "trl", ">=1.14,<1.15") in got
    assert Declared("unsloth-grpo", "unsloth", "==2026.10.9", optional=True, extras=("unsloth", "test")) in got
    assert Declared("unsloth-grpo", "unsloth-zoo", "==2026.10.9", optional=True, extras=("unsloth",)) in got
    assert len(got) == 11  # 12 lines; unsloth, listed in two extras, becomes one entry


def test_parse_declared_drops_extras_and_other_platforms_for_third_parties():
    got = parse_declared("unsloth", UNSLOTH + ['triton-windows; extra == "win"'], include_extras=False)
    assert [d.name for d in got] == ["unsloth-zoo", "torch", "datasets", "peft", "transformers", "trl"]
    assert not any(d.optional for d in got)


# ---------------------------------------------------------------- checks on simulated machines


def test_healthy_gpu_machine_has_no_problems():
    report = make_report()
    assert report.auto_backend == "unsloth"
    assert report.torch.gpus[0].bf16 is True
    assert run_checks(report, backend="auto", need_bf16=True) == []


def test_mismatched_versions_name_the_exact_fix():
    versions = dict(HEALTHY, trl="0.19.0", transformers="4.56.2", peft=None)
    problems = run_checks(make_report(versions=versions), backend="unsloth")
    found = by_package(problems)
    assert set(found) == {"trl", "transformers", "peft"}
    trl = found["trl"]
    assert trl.severity == ERROR
    assert trl.fix == 'pip install "trl>=1.14,<1.15"'
    assert trl.message == (
        "trl 0.19.0 is outside the range unsloth-grpo (>=1.14,<1.15); "
        "outside the range unsloth (>=0.18.2,!=0.19.0,<=1.15.0)"
    )
    assert found["transformers"].fix == (
        'pip install "transformers>=4.57,!=4.57.0,!=4.57.4,!=4.57.5,!=5.0.0,!=5.1.0,<=5.17.0"'
    )
    assert found["peft"].severity == ERROR
    assert found["peft"].fix == 'pip install "peft>=0.18.0"'
    assert found["peft"].message == "peft is not installed; required by unsloth-grpo, unsloth"
    with pytest.raises(EnvironmentProblem) as info:
        preflight("unsloth", report=make_report(versions=versions))
    assert 'pip install "trl>=1.14,<1.15"' in str(info.value)
    assert isinstance(info.value, RuntimeError)
    assert len(info.value.problems) == 3


def test_unsloth_ranges_block_only_runs_that_use_unsloth():
    # datasets 4.0.1 satisfies our range but Unsloth excludes 4.0.*.
    report = make_report(versions=dict(HEALTHY, datasets="4.0.1"))
    fix = 'pip install "datasets>=3.4.1,!=4.0.*,!=4.1.0,!=4.4.*,!=4.5.0,<5.0.0"'
    on_unsloth = by_package(run_checks(report, backend="unsloth"))["datasets"]
    on_hf = by_package(run_checks(report, backend="transformers"))["datasets"]
    assert (on_unsloth.severity, on_unsloth.fix) == (ERROR, fix)
    assert (on_hf.severity, on_hf.fix) == (WARNING, fix)
    preflight("transformers", report=report)  # does not raise


def test_a_warning_is_logged_once_per_process(monkeypatch, caplog):
    """A notebook that trains twice heard the same environment warnings (the CPU fallback, a CUDA build
    of torch without a GPU) on every train()."""
    import logging

    from unsloth_grpo.hardware.doctor import checks

    monkeypatch.setattr(checks, "_WARNED", set(), raising=False)
    report = make_report(versions=dict(HEALTHY, datasets="4.0.1"))
    with caplog.at_level(logging.WARNING, logger=checks.logger.name):
        preflight("transformers", report=report)
        preflight("transformers", report=report)
    said = [r.getMessage() for r in caplog.records if "datasets" in r.getMessage()]
    assert len(said) == 1, said


def test_our_extras_are_checked_only_when_installed_and_only_warn():
    assert "pandas" not in by_package(run_checks(make_report()))
    old = by_package(run_checks(make_report(versions=dict(HEALTHY, pandas="1.5.3"))))["pandas"]
    assert old.severity == WARNING
    assert old.fix == 'pip install "pandas>=2.0"'
    assert "unsloth-grpo[test]" in old.message


def test_no_gpu():
    report = make_report(torch_info=CPU_ONLY, modules=("unsloth", "vllm"))
    assert report.auto_backend == "unsloth"
    assert "CPU fallback" in report.auto_backend_reason
    assert (report.vllm_usable, report.vllm_reason) == (False, "vllm is installed but there is no CUDA GPU")
    problems = run_checks(report)
    assert [p.severity for p in problems] == [WARNING, WARNING]
    assert problems[1].message == (
        "torch 2.14.1+cpu is a CPU-only build: training runs on CPU, practical only for small models"
    )
    assert not any(p.blocking for p in problems)
    with pytest.raises(EnvironmentProblem, match="fast_inference is 'on' but vLLM cannot be used"):
        preflight("auto", fast_inference="on", report=report)


def test_cuda_build_without_visible_gpu_points_at_the_driver():
    report = make_report(torch_info=TorchInfo("2.14.1+cu128", "12.8", False, ()), modules=())
    (problem,) = run_checks(report)
    assert problem.message.startswith("torch 2.14.1+cu128 is a CUDA 12.8 build but no GPU is visible")
    assert "nvidia-smi" in problem.fix


def test_a_machine_without_a_gpu_is_not_told_to_check_a_driver():
    report = make_report(torch_info=TorchInfo("2.14.1+cu130", "13.0", False, (), nvidia_driver=False), modules=())
    (problem,) = run_checks(report)
    assert problem.message == ("torch 2.14.1+cu130 is a CUDA 13.0 build on a machine with no NVIDIA GPU: "
                               "training runs on CPU, practical only for small models")
    assert "driver" not in problem.fix and "nvidia-smi" not in problem.fix
    # a real 135M model does train on a CPU (the smollm2 presets); the fix must not say otherwise
    assert "--preset smollm2" in problem.fix and "a real model needs" not in problem.fix


def test_gpu_without_bf16():
    report = make_report(torch_info=TorchInfo("2.14.1+cu128", "12.8", True, (T4,)))
    assert report.torch.gpus[0].bf16 is False
    (error,) = run_checks(report, need_bf16=True)
    assert error.severity == ERROR
    assert error.message == (
        "bf16 was requested but GPU 0 (Tesla T4, compute capability 7.5) has no bf16 (needs 8.0+)"
    )
    assert error.fix == "set model.dtype=fp16 (or auto)"
    (note,) = run_checks(report, need_bf16=None)
    assert (note.severity, note.message) == (
        WARNING,
        "GPU 0 (Tesla T4, compute capability 7.5) has no bf16: dtype auto trains in fp16",
    )
    with pytest.raises(EnvironmentProblem, match="Tesla T4"):
        preflight("unsloth", need_bf16=True, report=report)
    preflight("unsloth", need_bf16=False, report=report)


def test_only_the_gpu_in_use_counts_in_one_process():
    mixed = TorchInfo("2.14.1+cu128", "12.8", True, (RTX4090, GPU(1, "Tesla T4", 15 * GIB, (7, 5))))
    assert run_checks(make_report(torch_info=mixed), need_bf16=True) == []
    two = make_report(torch_info=mixed, env={"WORLD_SIZE": "2"})
    (error,) = run_checks(two, need_bf16=True)
    assert "GPU 1 (Tesla T4" in error.message


def test_trl_1_15_0_on_cpu_is_flagged_with_the_reason():
    versions = dict(HEALTHY, trl="1.15.0")
    cpu = by_package(run_checks(make_report(versions=versions, torch_info=CPU_ONLY), backend="transformers"))
    assert cpu["trl"].severity == ERROR
    assert "Triton kernel" in cpu["trl"].message
    assert cpu["trl"].fix == 'pip install "trl>=1.14,<1.15"'
    # Only Unsloth's range declared (say, our metadata is missing): the fix excludes 1.15.0 itself.
    only_unsloth = make_report(versions=versions, torch_info=CPU_ONLY, requirements={"unsloth": UNSLOTH})
    trl = by_package(run_checks(only_unsloth, backend="unsloth"))["trl"]
    assert trl.fix == 'pip install "trl>=0.18.2,!=0.19.0,!=1.15.0,<=1.15.0"'
    # On a GPU 1.15.0 is fine by Unsloth's range and the known issue does not apply.
    gpu = make_report(versions=versions, requirements={"unsloth": UNSLOTH})
    assert "trl" not in by_package(run_checks(gpu, backend="unsloth"))


def test_unsloth_requested_but_missing():
    versions = dict(HEALTHY, unsloth=None, unsloth_zoo=None)
    report = make_report(versions=versions, modules=())
    assert report.auto_backend == "transformers"
    assert run_checks(report) == []
    (problem,) = run_checks(report, backend="unsloth")
    assert problem.message == "backend 'unsloth' was requested but unsloth is not installed"
    assert problem.fix == (
        'pip install "unsloth==2026.10.9" "unsloth-zoo==2026.10.9" "bitsandbytes>=0.45" (or set model.backend=auto)'
    )
    with pytest.raises(EnvironmentProblem, match="unsloth is not installed"):
        preflight("unsloth", report=report)


def test_several_processes_use_transformers_and_refuse_unsloth():
    report = make_report(env={"WORLD_SIZE": "2"})
    assert report.auto_backend == "transformers"
    assert report.auto_backend_reason.startswith("2 processes (WORLD_SIZE=2)")
    assert run_checks(report) == []
    messages = [p.message for p in run_checks(report, backend="unsloth") if p.blocking]
    assert messages == ["backend 'unsloth' under 2 processes: Unsloth's fast path is single-GPU"]


def test_old_gpu_warns_for_unsloth():
    pascal = TorchInfo("2.14.1+cu128", "12.8", True, (GPU(0, "GeForce GTX 1080", 8 * GIB, (6, 1)),))
    problems = run_checks(make_report(torch_info=pascal), backend="unsloth")
    assert [p.severity for p in problems] == [WARNING, WARNING]
    assert "below the compute capability 7.0" in problems[0].message


def test_python_outside_requires_python():
    report = make_report(python_version="3.10.4")
    (problem,) = run_checks(report)
    assert problem.severity == ERROR
    assert problem.message == "Python 3.10.4 is outside what unsloth-grpo requires (>=3.11)"


def test_bad_arguments_name_the_valid_values():
    with pytest.raises(ValueError, match="auto, unsloth, transformers"):
        run_checks(make_report(), backend="vllm")
    with pytest.raises(ValueError, match="auto, on, off"):
        run_checks(make_report(), fast_inference="yes")


# ---------------------------------------------------------------- hub, disk, vLLM server


def test_offline_mode_skips_the_hub_probe():
    def must_not_run(*a):
        raise AssertionError("probe ran in offline mode")

    report = make_report(env={"HF_HUB_OFFLINE": "1"}, hub_probe=must_not_run)
    assert report.hub_offline and report.hub.ok is None
    assert report.hub.detail == "not checked: offline mode is on"
    assert run_checks(report) == []
    skipped = make_report(check_hub=False, hub_probe=must_not_run)
    assert (skipped.hub.ok, skipped.hub_offline) == (None, False)


def test_unreachable_hub_is_a_warning():
    report = make_report(hub_probe=lambda h, p, t: (False, "timed out after 1.5 s"))
    (problem,) = run_checks(report)
    assert problem.severity == WARNING
    assert problem.message.startswith("the model hub huggingface.co:443 is unreachable (timed out after 1.5 s)")
    assert "HF_HUB_OFFLINE=1" in problem.fix


def test_hub_address_and_cache_dir_follow_the_environment():
    assert doctor_probes.hub_address({}) == ("huggingface.co", 443)
    assert doctor_probes.hub_address({"HF_ENDPOINT": "http://mirror.local:8080"}) == ("mirror.local", 8080)
    assert doctor_probes.hf_cache_dir({"HF_HUB_CACHE": "/c", "HF_HOME": "/h"}) == "/c"
    assert doctor_probes.hf_cache_dir({"HF_HOME": "/h"}) == "/h/hub"
    assert doctor_probes.hf_cache_dir({"XDG_CACHE_HOME": "/x"}) == "/x/huggingface/hub"


def test_low_disk_warns_with_the_path(tmp_path):
    report = make_report(output_dir=str(tmp_path), cache_dir="/cache", disk_free=lambda p: 3 * GIB)
    problems = run_checks(report)
    assert [p.message for p in problems] == [
        f"only 3.0 GiB free in the output folder {tmp_path}",
        "only 3.0 GiB free in the HF cache folder /cache",
    ]


def test_free_disk_real_on_a_folder_not_yet_created(tmp_path):
    assert doctor_probes.free_disk(str(tmp_path / "not" / "yet")) == doctor_probes.free_disk(str(tmp_path)) > 0


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_tcp_probe_real_open_and_closed_ports():
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        ok, detail = doctor_probes.tcp_probe("127.0.0.1", server.getsockname()[1], 1.0)
    assert ok and detail.startswith("connected in")
    ok, detail = doctor_probes.tcp_probe("127.0.0.1", _closed_port(), 1.0)
    assert (ok, detail) == (False, "Connection refused")


def test_a_hanging_probe_is_cut_at_the_deadline():
    start = time.perf_counter()
    ok, detail = doctor_probes._with_deadline(lambda: time.sleep(5) or (True, ""), 0.1, "test")
    assert (ok, detail) == (False, "no answer within 0.1 s")
    assert time.perf_counter() - start < 1.0


def test_a_hanging_name_lookup_does_not_hang_the_hub_probe(monkeypatch):
    monkeypatch.setattr(socket, "getaddrinfo", lambda *a, **k: time.sleep(3))
    start = time.perf_counter()
    ok, detail = doctor_probes.tcp_probe("huggingface.co", 443, 0.2)
    assert (ok, detail) == (False, "no answer within 0.7 s")
    assert time.perf_counter() - start < 1.5


@pytest.fixture
def http_server():
    """A local HTTP server whose /health answers 200 and everything else 404."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200 if self.path == "/health" else 404)
            self.end_headers()

        def log_message(self, *args):
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    yield server.server_address[1]
    server.shutdown()
    server.server_close()


def test_vllm_server_probe_real(http_server):
    assert doctor_probes.http_health_probe("127.0.0.1", http_server, 1.0) == (True, "GET /health -> 200")
    report = make_report(vllm_server=("127.0.0.1", http_server), server_probe=doctor_probes.http_health_probe)
    assert report.vllm_server.ok is True
    assert run_checks(report) == []


def test_vllm_server_down_is_blocking_with_the_start_command():
    port = _closed_port()
    report = make_report(vllm_server=("127.0.0.1", port), server_probe=doctor_probes.http_health_probe)
    (problem,) = run_checks(report)
    assert problem.severity == ERROR
    assert problem.message == f"no vLLM server answers at 127.0.0.1:{port}: Connection refused"
    assert problem.fix.endswith(f"trl vllm-serve --model MODEL --host 127.0.0.1 --port {port}")


# ---------------------------------------------------------------- screen and CLI


def test_render_prints_brackets_and_fixes_verbatim():
    from rich.console import Console

    versions = dict(HEALTHY, trl="0.19.0")
    report = make_report(versions=versions, torch_info=TorchInfo("2.14.1+cu128", "12.8", True, (T4,)))
    problems = run_checks(report, backend="unsloth", need_bf16=True)
    console = Console(file=io.StringIO(), width=120, record=True)
    render(report, problems, console)
    text = console.export_text()
    assert 'fix: pip install "trl>=1.14,<1.15"' in text
    assert "Tesla T4" in text and "7.5" in text
    assert "backend auto -> unsloth" in text
    assert "2 blocking problem(s), 0 warning(s)" in text
    assert 'pip install "unsloth-grpo[vllm]"' in text  # rich markup would eat "[vllm]"


def test_render_wraps_a_long_range_between_specifiers_never_inside_one():
    from rich.console import Console

    report = make_report(versions=HEALTHY)
    allowed = combine_specifiers(d.specifier for d in report.declared if d.name == "transformers")
    assert len(allowed) > 40  # long enough to wrap in an 80-column terminal
    console = Console(file=io.StringIO(), width=80, record=True)
    render(report, [], console)
    lines = console.export_text().splitlines()
    col = next(line for line in lines if line.startswith("package")).index("allowed")
    row = next(i for i, line in enumerate(lines) if line.startswith("transformers"))
    cell = " ".join(line[col:].replace(" ok", "") for line in lines[row:row + 3]
                    if line.startswith(("transformers", " " * col)))
    shown = [part.strip() for part in cell.split(",") if part.strip()]
    assert shown[:len(allowed.split(","))] == allowed.split(",")  # each specifier whole, in order


def _parse(argv):
    parser = argparse.ArgumentParser()
    doctor_cli.add_parser(parser.add_subparsers(dest="command"))
    return parser.parse_args(["doctor", *argv])


def test_cli_exit_code_follows_blocking_problems(monkeypatch, capsys):
    bad = make_report(versions=dict(HEALTHY, trl="0.19.0"))
    good = make_report()
    seen = {}

    def fake_collect(**kw):
        seen.update(kw)
        return bad if kw["output_dir"] == "bad" else good

    monkeypatch.setattr(doctor_cli, "collect_report", fake_collect)
    args = _parse(["--output-dir", "bad", "--no-network", "--vllm-server-port", "9000"])
    assert args.func is doctor_cli.run
    assert doctor_cli.run(args) == 1
    assert seen["check_hub"] is False and seen["vllm_server"] == ("localhost", 9000)
    assert 'pip install "trl>=1.14,<1.15"' in capsys.readouterr().out
    assert doctor_cli.run(_parse(["--output-dir", "good", "--json"])) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["problems"] == []
    assert data["report"]["torch"]["gpus"][0]["bf16"] is True


def test_cli_takes_intentions_from_a_recipe_config(monkeypatch, tmp_path, capsys):
    cfg = tmp_path / "recipe.yaml"
    cfg.write_text(f"output_dir: {tmp_path / 'out'}\nmodel:\n  backend: unsloth\n  dtype: bf16\n")
    t4 = make_report(torch_info=TorchInfo("2.14.1+cu128", "12.8", True, (T4,)))
    monkeypatch.setattr(doctor_cli, "collect_report", lambda **kw: t4)
    assert doctor_cli.run(_parse(["--config", str(cfg)])) == 1
    assert "bf16 was requested" in capsys.readouterr().out


def test_own_requirements_fall_back_to_pyproject(monkeypatch):
    real = doctor_requirements.metadata_requires
    monkeypatch.setattr(doctor_requirements, "metadata_requires",
                        lambda d: None if d == doctor_requirements.PACKAGE else real(d))
    lines, requires_python, source = doctor_requirements.own_requirements()
    assert source.endswith("pyproject.toml")
    assert requires_python.startswith(">=3.")
    declared = {d.name: d for d in parse_declared(doctor_requirements.PACKAGE, lines, include_extras=True)}
    assert declared["trl"].optional is False
    assert "unsloth" in declared["unsloth"].extras and declared["unsloth"].optional


@pytest.mark.slow  # a model, a subprocess or matplotlib: the integration tier
def test_real_environment_report():
    """Real: the installed versions meet the ranges we ship (what CI installs must pass)."""
    report = collect_report(check_hub=False)
    assert report.version("trl") is not None and report.torch.version is not None
    blocking = [p for p in run_checks(report, backend="transformers") if p.blocking]
    assert blocking == []
    preflight("transformers", report=report)


@pytest.mark.slow
def test_third_party_noise_is_dropped_but_errors_are_kept():
    """torch logs a deprecation line per torchao enum at import; bitsandbytes asks for `pip install
    kernels` on CPU. Neither is something a user of this package can act on."""
    import logging
    import subprocess
    import sys

    from unsloth_grpo.hardware.console import QUIETED, quiet_third_party

    code = ("from unsloth_grpo.hardware.console import quiet_third_party; quiet_third_party(); "
            "import torch, peft; print('imported')")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0 and "imported" in proc.stdout, proc.stderr[-2000:]
    assert "_pytree" not in proc.stderr and "register_constant" not in proc.stderr, proc.stderr[-2000:]
    quiet_third_party()
    for name in QUIETED:
        logger = logging.getLogger(name)
        assert not logger.isEnabledFor(logging.WARNING) and logger.isEnabledFor(logging.ERROR)
