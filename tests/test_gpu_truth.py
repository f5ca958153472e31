"""The GPU truth kit on a CPU: its --dry run, its wheel set tools, its verdicts and its docs table."""

import json
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from conftest import load_script

ROOT = Path(__file__).resolve().parents[1]


kit = load_script(ROOT / "benchmarks" / "gpu_truth.py", in_sys_modules=True)
wheels = load_script(ROOT / "tools" / "gather_gpu_wheels.py", in_sys_modules=True)


# ------------------------------------------------------------------------------------ --dry end to end


@pytest.mark.slow
def test_dry_run_exercises_the_kit_on_cpu(tmp_path):
    out = tmp_path / "dry.json"
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "gpu_truth.py"), "--dry", "--no-tests",
                           "--workdir", str(tmp_path / "work"), "--out", str(out)],
                          capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    report = json.loads(out.read_text())
    assert report["dry"] is True
    assert report["wheel_problems"] == []
    assert all(a["equal"] for a in report["architecture"].values()), report["architecture"]
    by_name = {r["name"]: r for r in report["configs"]}
    assert set(by_name) == {c.name for c in kit.CONFIGS}
    # the trainer path ran for real, with every completion held to the configured length
    trained = by_name["transformers-bf16"]
    assert trained["status"] == "ok", trained.get("error")
    m = trained["measured"]
    assert len(m["step_seconds"]) == kit.DRY_SETTINGS.steps
    assert m["completion_mean_length"] == m["completion_min_length"] == kit.DRY_SETTINGS.max_completion_length
    assert m["trainable_changed"] > 0 and m["lora_B_unchanged"] == []
    assert trained["estimate"]["allocated_gb"] > 0
    # the recipe accepted the config the GPU run will use, and so would the doctor on the GPU image
    assert by_name["recipe-gsm8k"]["status"] == "ok", by_name["recipe-gsm8k"].get("error")
    env = by_name["recipe-gsm8k"]["environment"]
    assert env["simulated"] and env["blocking"] == [] and env["config"].endswith(".gpu.yaml")
    # 4-bit is planned at full scale; the planner's figure for 1.5B is in gigabytes, not the toy's
    for name in ("unsloth-4bit", "transformers-4bit"):
        assert by_name[name]["status"] == "planned"
        assert 1.0 < by_name[name]["planned_estimate"]["allocated_gb"] < 40
    assert by_name["winner-3b"]["status"] == "skipped"


# ------------------------------------------------------------------------------------ budget and failures


def test_a_failing_configuration_is_recorded_and_the_next_one_runs(tmp_path, monkeypatch):
    calls = []

    def fake_child(args, timeout):
        calls.append(timeout)
        if len(calls) == 1:
            raise TimeoutError("half a log")
        if len(calls) == 2:
            return 1, "Traceback ...\nRuntimeError: CUDA error: out of memory\n"
        return 0, "noise\nRESULT " + json.dumps({"measured": {"peak_allocated_gb": 4.0, "seconds_per_step": 2.0},
                                                "estimate": {"allocated_gb": 3.0}})

    monkeypatch.setattr(kit, "_child", fake_child)
    common = dict(model_dir=tmp_path, device="cuda", settings=kit.RunSettings(), workdir=tmp_path)
    first = kit.run_config(kit.CONFIGS[0], timeout=12, **common)
    second = kit.run_config(kit.CONFIGS[1], timeout=34, **common)
    third = kit.run_config(kit.CONFIGS[2], timeout=56, **common)
    assert calls == [12, 34, 56]
    assert first["status"] == "timeout" and "12 s" in first["error"]
    assert second["status"] == "error" and kit.verdict(second).endswith("CUDA error: out of memory")
    assert third["status"] == "ok" and third["planner_error_pct"] == -25.0


def test_verdicts_name_what_is_wrong():
    ok = {"status": "ok", "kind": "train", "settings": {"max_completion_length": 512},
          "measured": {"completion_mean_length": 512.0, "trainable_changed": 10, "lora_B_unchanged": []}}
    assert kit.verdict({**ok, "planner_error_pct": 8.0}) == "ok: planner within +8%"
    assert "UNDER by 20%" in kit.verdict({**ok, "planner_error_pct": -20.0})
    assert "too cautious" in kit.verdict({**ok, "planner_error_pct": 60.0})
    short = {**ok, "measured": {**ok["measured"], "completion_mean_length": 37.5}}
    assert "cut short (mean 38 < 512): figures invalid" in kit.verdict(short)
    frozen = {**ok, "measured": {**ok["measured"], "lora_B_unchanged": ["x.lora_B.weight"]}}
    assert "unchanged" in kit.verdict(frozen)
    assert kit.verdict({"status": "skipped", "error": "20 s of the budget left"}) == "skipped: 20 s of the budget left"


# ------------------------------------------------------------------------------------ results table


def _result_file(folder: Path, name: str, *, dry: bool) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_text(json.dumps({
        "dry": dry, "card": {"name": "NVIDIA H200"}, "date": "2026-12-01T10:00:00Z",
        "configs": [{"name": "unsloth-4bit", "title": "Unsloth, 4-bit, LoRA r=16", "status": "ok",
                     "planner_error_pct": -12.0, "estimate": {"allocated_gb": 3.52},
                     "measured": {"seconds_per_step": 6.25, "completion_tokens_per_second": 655.0,
                                  "peak_allocated_gb": 4.0, "peak_reserved_gb": 4.5, "device_peak_used_gb": 5.1},
                     "verdict": "ok: planner UNDER by 12%: OOM risk, raise its constants"},
                    {"name": "transformers-4bit", "title": "transformers + bitsandbytes 4-bit", "status": "error",
                     "error": "ImportError: no bitsandbytes", "verdict": "ERROR: ImportError: no bitsandbytes"}],
    }))


def test_results_table_lists_every_gpu_file_and_leaves_dry_runs_out(tmp_path):
    _result_file(tmp_path, "gpu_truth_nvidia-h200_20261201-1000.json", dry=False)
    _result_file(tmp_path, "gpu_truth_cpu_20261201-1100.json", dry=True)
    results = kit.load_results(tmp_path)
    assert [r["_file"] for r in results] == ["gpu_truth_nvidia-h200_20261201-1000.json"]
    table = kit.results_table_markdown(results)
    assert ("| NVIDIA H200 | 2026-12-01 | Unsloth, 4-bit, LoRA r=16 | 6.25 | 655 | 4.00 | 4.50 | 5.10 "
            "| 3.52 (-12%) | ok: planner UNDER by 12%: OOM risk, raise its constants |") in table
    assert "| transformers + bitsandbytes 4-bit | - | - | - | - | - | - | ERROR: ImportError: no bitsandbytes |" in table
    assert "gpu_truth_cpu" not in table


def test_docs_table_matches_the_results_files():
    page = kit.DOCS_PAGE.read_text()
    assert kit.docs_with_table(page, kit.load_results()) == page, \
        "docs/gpu_truth.md is out of date: run python benchmarks/gpu_truth.py --update-docs"


# ------------------------------------------------------------------------------------ the wheel set


def test_every_kit_import_is_carried_or_on_the_gpu_image(monkeypatch):
    assert kit.wheel_list_problems() == []
    monkeypatch.setitem(kit.KIT_IMPORTS, "vllm", "vllm")
    assert any("vllm" in p for p in kit.wheel_list_problems())


def _wheel(path: Path, files: dict[str, str]) -> Path:
    with zipfile.ZipFile(path, "w") as zf:
        for name, text in files.items():
            zf.writestr(name, text)
        record = "".join(f"{n},," + "\n" for n in files) + "pkg.dist-info/RECORD,,\n"
        zf.writestr(next(n for n in files if n.endswith("METADATA")).replace("METADATA", "RECORD"), record)
    return path


def test_slimming_keeps_one_cuda_library_and_drops_studio(tmp_path):
    bnb = _wheel(tmp_path / "bitsandbytes-0.50.2-py3-none-manylinux_2_24_x86_64.whl", {
        "bitsandbytes/__init__.py": "", "bitsandbytes/libbitsandbytes_cuda130.so": "x" * 10,
        "bitsandbytes/libbitsandbytes_cuda126.so": "y" * 1000, "bitsandbytes/libbitsandbytes_cpu.so": "z",
        "bitsandbytes-0.50.2.dist-info/METADATA": "Name: bitsandbytes\n"})
    uns = _wheel(tmp_path / "unsloth-2026.10.9-py3-none-any.whl", {
        "unsloth/__init__.py": "", "studio/app.py": "w" * 500, "unsloth-2026.10.9.dist-info/METADATA": "Name: unsloth\n"})
    carry = tmp_path / "carry"
    carry.mkdir()
    assert wheels.slim(bnb, "bitsandbytes", carry)["dropped"] == 1000
    assert wheels.slim(uns, "unsloth", carry)["dropped"] == 500
    site = tmp_path / "site"
    wheels.unpack(carry, site)
    assert (site / "bitsandbytes" / "libbitsandbytes_cuda130.so").is_file()
    assert (site / "bitsandbytes" / "libbitsandbytes_cpu.so").is_file()
    assert not (site / "bitsandbytes" / "libbitsandbytes_cuda126.so").exists()
    assert not (site / "studio").exists() and (site / "unsloth" / "__init__.py").is_file()
    record = (site / "bitsandbytes-0.50.2.dist-info" / "RECORD").read_text()
    assert "cuda126" not in record and "cuda130" in record


def test_requirement_check_names_what_nothing_provides(tmp_path):
    meta = tmp_path / "unsloth-2026.10.9.dist-info"
    meta.mkdir()
    meta.joinpath("METADATA").write_text(
        "Metadata-Version: 2.1\nName: unsloth\nVersion: 2026.10.9\n"
        "Requires-Dist: trl<=1.15.0\nRequires-Dist: xformers>=0.0.27\nRequires-Dist: somethingelse>=1\n"
        "Requires-Dist: transformers<5.0\nRequires-Dist: mlx; sys_platform == \"darwin\"\n"
        "Requires-Dist: pytest; extra == \"dev\"\n")
    problems = wheels.requirement_problems(tmp_path)
    assert problems == [
        "unsloth needs somethingelse>=1 which is neither carried nor on the GPU image",
        "unsloth needs transformers<5.0 but the GPU image has transformers 5.17.0",
    ]


# ------------------------------------------------------------------------------------ model and tokenizer


@pytest.mark.slow
def test_tokenizer_has_the_full_qwen_vocabulary(tmp_path):
    from transformers import AutoTokenizer

    kit.build_tokenizer(tmp_path, kit.QWEN25_1P5B["vocab_size"])
    tok = AutoTokenizer.from_pretrained(str(tmp_path))
    assert len(tok) == 151936
    ids = tok("Ann has 12 apples.")["input_ids"]
    assert 0 < len(ids) < 20 and max(ids) < 1000  # text uses the trained merges, not the filler words
    assert tok.decode([151000]).strip() == "w151000"
    assert tok.convert_ids_to_tokens(151935) == "</answer>"  # the answer tags stay whole, at the end
    assert tok.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False,
                                   add_generation_prompt=True).endswith("<|im_start|>assistant\n")


@pytest.mark.slow
def test_recipe_configuration_runs_end_to_end_on_the_toy_model(tmp_path):
    """Configuration 4 without --check: the recipe CLI trains, checkpoints and saves, and the kit reads it back."""
    from dataclasses import asdict

    model_dir = kit.build_model_dir("dry", tmp_path / "model", "cpu")
    spec = {"name": "recipe-gsm8k", "kind": "recipe", "model_dir": str(model_dir), "device": "cpu",
            "settings": asdict(kit.DRY_SETTINGS), "output_dir": str(tmp_path / "run"), "check_only": False}
    r = kit.run_recipe(spec)
    assert {"adapter_model.safetensors", "checkpoints", "metrics.jsonl"} <= set(r["saved"])
    assert r["measured"]["completion_mean_length"] == kit.DRY_SETTINGS.max_completion_length
    assert r["estimate"]["settings"]["max_completion_length"] == kit.DRY_SETTINGS.max_completion_length
    assert len(r["trainer_logs"]) == 2


# ------------------------------------------------------------------------------------ the GPU image's checks


def _gpu_recipe_config(tmp_path: Path) -> Path:
    from dataclasses import asdict

    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text('{"model_type": "qwen2"}')  # the model the kit builds there (an empty folder is refused)
    spec = {"model_dir": str(model), "settings": asdict(kit.RunSettings()), "output_dir": str(tmp_path / "run")}
    return kit._write_yaml(tmp_path / "recipe.gpu.yaml", kit.recipe_config(spec, "cuda"))


def test_dry_runs_the_recipes_preflight_against_the_gpu_image(tmp_path, monkeypatch):
    """Issue 25, finding 1: the recipe configuration runs the doctor's preflight, which made every
    requirement Unsloth declares blocking; the kit leaves xformers and diffusers behind, so the real run
    exited 1 while --dry (no environment checks, a venv with everything) passed. pydantic, which this
    project needs for its configs, is carried."""
    from unsloth_grpo.hardware.doctor import checks as doctor_checks

    path = _gpu_recipe_config(tmp_path)
    env = kit.environment_check(str(path), simulated=True)
    assert env["simulated"] and env["blocking"] == [], env["blocking"]
    assert any(w.startswith("xformers is not installed") for w in env["warnings"])
    report = kit.gpu_image_report(str(tmp_path))
    assert report.python_version == "3.12.3" and report.version("torch") == "2.11.0"
    assert report.version("packaging") == kit.wheels.WHEELS["packaging"]  # carried: the image's is unknown
    assert report.version("xformers") is None and report.torch.gpus[0].name == "NVIDIA H200"
    # the doctor as it was: everything Unsloth declares blocks
    monkeypatch.setattr(doctor_checks, "NOT_NEEDED_TO_TRAIN", {})
    stopped = kit.environment_check(str(path), simulated=True)["blocking"]
    assert {name for name in ("xformers", "diffusers", "pydantic") if any(name in b for b in stopped)} == \
        {"xformers", "diffusers"}, stopped
    assert report.version("pydantic") == kit.wheels.WHEELS["pydantic"]


def test_the_kit_leaves_behind_only_what_the_doctor_lets_pass():
    from unsloth_grpo.hardware.doctor.checks import NOT_NEEDED_TO_TRAIN

    assert set(kit.wheels.not_carried()) - {"vllm"} <= set(NOT_NEEDED_TO_TRAIN)
    assert {"packaging", "certifi"} <= set(kit.wheels.WHEELS)  # versions the image does not record


def test_import_brings_gpu_results_home_and_commits_them_with_the_table(tmp_path):
    """docs/gpu_truth.md step 3 as one command: copy, regenerate, commit (dry runs and repeats skipped)."""
    repo = tmp_path / "repo"
    (repo / "docs").mkdir(parents=True)
    docs = repo / "docs" / "gpu_truth.md"
    docs.write_text(f"# page\n\n{kit.TABLE_BEGIN}old\n{kit.TABLE_END}\n")
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    for key, value in (("user.email", "t@example.com"), ("user.name", "t")):
        subprocess.run(["git", "-C", str(repo), "config", key, value], check=True)
    subprocess.run(["git", "-C", str(repo), "add", "."], check=True)
    subprocess.run(["git", "-C", str(repo), "commit", "-qm", "start"], check=True)
    came_back = tmp_path / "device"
    _result_file(came_back, "gpu_truth_nvidia-h200_20261201-1000.json", dry=False)
    _result_file(came_back, "gpu_truth_cpu_20261201-1100.json", dry=True)
    for name in ("gpu_truth_nvidia-h200_20261201-1000.json", "gpu_truth_cpu_20261201-1100.json"):
        data = json.loads((came_back / name).read_text())
        (came_back / name).write_text(json.dumps({**data, "kit": "gpu_truth"}))
    results = repo / "benchmarks" / "results"
    added = kit.import_results(came_back, results=results, docs=docs, repo=repo, log=lambda _m: None)
    assert [p.name for p in added] == ["gpu_truth_nvidia-h200_20261201-1000.json"]
    assert "| NVIDIA H200 | 2026-12-01 |" in docs.read_text()
    log = subprocess.run(["git", "-C", str(repo), "log", "--stat", "-1"], capture_output=True, text=True).stdout
    assert "GPU truth results: NVIDIA H200" in log and "gpu_truth.md" in log and "nvidia-h200" in log
    assert subprocess.run(["git", "-C", str(repo), "status", "--porcelain"], capture_output=True,
                          text=True).stdout == ""
    assert kit.import_results(came_back, results=results, docs=docs, repo=repo, log=lambda _m: None) == []


def test_the_kit_imports_on_an_image_without_the_carried_packages():
    """On the GPU machine pydantic, TRL and the rest arrive as carried wheels that the kit unpacks
    after it starts: importing the kit must not need them (the first run on an H200 died on
    `import pydantic` before it unpacked anything)."""
    code = ("import sys, importlib.util\n"
            "for name in ('pydantic', 'pydantic_core', 'trl', 'datasets', 'unsloth', 'gguf'):\n"
            "    sys.modules[name] = None  # as absent as on the image\n"
            f"spec = importlib.util.spec_from_file_location('kit', {str(ROOT / 'benchmarks' / 'gpu_truth.py')!r})\n"
            "kit = sys.modules['kit'] = importlib.util.module_from_spec(spec); spec.loader.exec_module(kit)\n"
            "print('imported', kit.DEVICE_SITE)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and "imported" in done.stdout, done.stderr[-2000:]


def test_a_configuration_stopped_at_its_timeout_keeps_the_steps_it_finished():
    """The first H200 run timed out on every configuration after one or two steps; what those steps
    measured must reach the results file and the table, not only the word TIMEOUT."""
    lines = ["loading", 'STEP {"step": 1, "seconds": 71.6, "load_seconds": 30.2, "peak_allocated_gb": 4.1, '
             '"completion_mean_length": 512}',
             'STEP {"step": 2, "seconds": 20.9, "load_seconds": 30.2, "peak_allocated_gb": 4.3, '
             '"completion_mean_length": 512}', "generating"]
    part = kit.partial_steps("\n".join(lines))
    assert part["steps_done"] == 2 and part["step_seconds"] == [71.6, 20.9] and part["peak_allocated_gb"] == 4.3
    said = kit.verdict({"status": "timeout", "partial": part, "error": "over"})
    assert said.startswith("TIMEOUT after 2 step(s): first 71.6 s, then 20.9 s a step; peak 4.30 GiB"), said
    # a child of the old kit printed no STEP lines: the trainer's own step_time is read instead
    old = "{'loss': '1e-08', 'completions/mean_length': '512', 'step_time': '61.83'}\n" \
          "{'loss': '2e-08', 'completions/mean_length': '512', 'step_time': '25.37'}"
    part = kit.partial_steps(old)
    assert part["step_seconds"] == [61.83, 25.37] and part["completion_mean_length"] == 512
    assert kit.partial_steps("nothing measured") is None
    assert kit.verdict({"status": "timeout", "partial": None, "error": "over\nlast line"}) == "TIMEOUT: last line"


def test_steps_can_be_cut_to_fit_a_short_lease(tmp_path, monkeypatch):
    seen = {}
    monkeypatch.setattr(kit, "run_kit", lambda **kw: seen.update(kw) or (tmp_path / "r.json", {"configs": []}))
    assert kit.main(["--dry", "--steps", "2", "--workdir", str(tmp_path)]) == 0
    assert seen["steps"] == 2
