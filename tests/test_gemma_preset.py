"""The gsm8k recipe's ``gemma3`` preset (issue 53): the smollm2 preset's plan, shorter, on ``builtin:gemma3-270m``.

The preset resolves and passes the checks made before any load; ``--check`` runs on it where the converted
model is already on this machine (the test's own home or the user's cache, read through a link: nothing is
fetched here); and ``benchmarks/real_model.py --preset gemma3`` resolves the benchmark's runs from it.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def test_the_gemma3_preset_is_the_real_model_plan_on_gemma3():
    from unsloth_grpo.recipes.gsm8k import RECIPE
    from unsloth_grpo.training.checks import config_problems

    cfg = RECIPE.resolve(preset="gemma3")
    smol = RECIPE.resolve(preset="smollm2")
    assert config_problems(cfg) == []
    assert (cfg.model.name, cfg.model.device, cfg.model.load_in_4bit) == ("builtin:gemma3-270m", "cpu", False)
    assert cfg.output_dir == "outputs/gsm8k-gemma3"
    # the same task, prompt and rewards as the smollm2 preset: an SFT warm-up on additions, then GRPO
    assert [s.kind for s in cfg.stages] == ["sft", "grpo"]
    assert cfg.data.subset == "easy" and cfg.data.system_prompt == smol.data.system_prompt
    assert [(r.name, r.weight) for r in cfg.rewards] == [(r.name, r.weight) for r in smol.rewards]
    assert cfg.training.dynamic_sampling == "refill"
    assert cfg.evaluation.before_after and cfg.evaluation.headroom == cfg.training.num_generations
    # shorter than the smollm2 preset: it must fit 10 minutes with a step about twice as costly
    assert [s.max_steps for s in cfg.stages] < [s.max_steps for s in smol.stages]
    # the smollm2 preset is untouched by the model override
    assert smol.model.name == "builtin:smollm2-135m-instruct"


def _ready_gemma_home(tmp_path: Path) -> Path | None:
    """A home holding the converted Gemma 3 (the test run's, else a link to the user's cache); None: none has it."""
    from unsloth_grpo.models.pretrained import GEMMA3_270M, is_ready

    test_home = Path(os.environ["UNSLOTH_GRPO_HOME"])
    if is_ready(GEMMA3_270M, test_home / "models" / GEMMA3_270M.directory):
        return test_home
    user = Path.home() / ".cache" / "unsloth_grpo" / "models" / GEMMA3_270M.directory
    if not is_ready(GEMMA3_270M, user):
        return None
    home = tmp_path / "home"
    (home / "models").mkdir(parents=True)
    (home / "models" / GEMMA3_270M.directory).symlink_to(user, target_is_directory=True)
    return home


@pytest.mark.slow  # reading Gemma's 262k-piece tokenizer and counting 512 prompts: ~30 s
def test_the_gemma3_preset_passes_check_where_the_model_is_here(tmp_path):
    home = _ready_gemma_home(tmp_path)
    if home is None:
        pytest.skip("builtin:gemma3-270m is not converted on this machine (its first use fetches it: minutes)")
    env = {**os.environ, "UNSLOTH_GRPO_HOME": str(home), "OMP_NUM_THREADS": "1", "PIP_NO_INDEX": "1"}
    proc = subprocess.run([sys.executable, "-m", "unsloth_grpo.recipes.gsm8k", "--preset", "gemma3", "--check",
                           "--output-dir", str(tmp_path / "run")], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    out = proc.stdout + proc.stderr
    assert "config and data OK: 512 training rows" in out and "Traceback" not in out
    assert "prompt lengths not counted" not in out  # counted with Gemma's own tokenizer, in the plain format


def _bench():
    from conftest import load_script

    return load_script(REPO / "benchmarks" / "real_model.py", "real_model_bench_gemma")


def test_the_benchmark_resolves_its_runs_from_the_preset_it_is_given(monkeypatch, tmp_path, capsys):
    bench = _bench()
    asked = []
    resolve = bench.RECIPE.resolve

    def spy(*args, **kwargs):
        asked.append(kwargs.get("preset"))
        return resolve(*args, **kwargs)

    monkeypatch.setattr(bench.RECIPE, "resolve", spy)
    # a bad argument is refused after the runs are resolved, before anything loads or trains
    assert bench.main(["--preset", "gemma3", "--seeds", "0", "--headroom-samples", "1", "--out", str(tmp_path)]) == 2
    assert asked == ["gemma3"] and "--headroom-samples 1" in capsys.readouterr().err
    asked.clear()
    assert bench.main(["--seeds", "0", "--headroom-samples", "1", "--out", str(tmp_path)]) == 2
    assert asked == ["smollm2"]  # the default is unchanged
    with pytest.raises(SystemExit):
        bench.main(["--preset", "llama"])
    assert not any(tmp_path.iterdir())


def test_the_benchmark_keeps_the_presets_results_apart(tmp_path, capsys):
    """results.json names its preset: a merge of two presets' runs is refused, a merged gemma3 table says so,
    and the base model's grades of one preset are not taken for the other (--base-from)."""
    import json

    from test_real_models import _fake_run

    bench = _bench()
    paths = {}
    for seed, preset in ((0, "gemma3"), (1, "gemma3"), (2, None)):
        p = tmp_path / f"r{seed}.json"
        p.write_text(json.dumps({"held_out": 64, "overrides": [], **({"preset": preset} if preset else {}),
                                 "runs": [_fake_run(seed, (0.9, 0.9), (0.8, 0.8), None)]}))
        paths[seed] = str(p)
    assert bench.main(["--merge", paths[0], paths[1], "--out", str(tmp_path / "m")]) == 0
    assert capsys.readouterr().out.startswith("preset: gsm8k gemma3\n")
    assert json.loads((tmp_path / "m" / "results.json").read_text())["preset"] == "gemma3"
    # a file written before the option is the smollm2 preset's
    assert bench.main(["--merge", paths[0], paths[2], "--out", str(tmp_path / "m2")]) == 2
    assert "were run with different overrides or presets" in capsys.readouterr().err
    assert not (tmp_path / "m2").exists()
    with pytest.raises(bench.ConfigError, match="graded on the gemma3 preset's model, not the smollm2 preset's"):
        bench._base_grades(paths[0], 64, [], "smollm2")
