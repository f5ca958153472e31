"""benchmarks/real_model_curriculum.py without a model: the arms' entries, the summary table and its goal line
on literal results, the level paths, and the refusal of a level the comparison cannot use."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from conftest import load_script

pytest.importorskip("reasoning_gym", reason="the reasoning_gym extra: pip install 'unsloth-grpo[reasoning_gym]'")

ROOT = Path(__file__).resolve().parents[1]


bench = load_script(ROOT / "benchmarks" / "real_model_curriculum.py")


def _run(seed, fixed, curriculum):
    """One seed's result: per arm (mixed share, level-1 accuracy); base and level 0 constant."""
    def grades(acc1):
        return {"0": {"accuracy": 0.5}, "1": {"accuracy": acc1}}

    return {"dataset": "chain_sum", "seed": seed, "level": 1,
            "grades": {"base": grades(0.0), "fixed": grades(fixed[1]), "curriculum": grades(curriculum[1])},
            "train": {"fixed": {"mixed_share": fixed[0], "cpu_seconds": 100.0},
                      "curriculum": {"mixed_share": curriculum[0], "cpu_seconds": 90.0}}}


def test_the_goal_line_compares_the_mixed_share_and_the_harder_level_over_seeds():
    runs = [_run(0, (0.50, 0.10), (0.80, 0.20)), _run(1, (0.60, 0.30), (0.70, 0.10))]
    lines = bench.table(runs)
    assert lines[0] == "2 seed(s), chain_sum trained at level 1; held-out strict % by evaluation level"
    assert "  fixed      level 0  50.0  level 1  20.0  mixed groups 0.55  100 CPU-s" in lines
    assert lines[-1] == ("goal: mixed share curriculum 0.75 vs fixed 0.55 (met); level 1 held-out curriculum 15.0 "
                         "vs fixed 20.0 (NOT met)")
    tie = bench.table([_run(0, (0.5, 0.2), (0.5, 0.2))])[-1]
    assert tie.count("NOT met") == 1 and "0.50 vs fixed 0.50 (NOT met)" in tie  # equal shares are not larger


def test_the_fixed_arm_cannot_move_and_every_arm_starts_from_the_same_pools():
    fixed, curriculum, down = (bench.entry("chain_sum", arm, 2) for arm in bench.ARMS)
    assert curriculum == {"name": "chain_sum", "curriculum": {"start_level": 2}}
    assert down == {"name": "chain_sum", "curriculum": {"start_level": 2, "unanswered": "down"}}
    assert fixed["curriculum"]["start_level"] == 2
    assert fixed["curriculum"]["window"] > 10_000  # no run of the preset's length fills it: the rule never reads it
    pools = {arm: bench.pool_questions(bench.config("chain_sum", arm, 1, 0, Path("unused"), [])) for arm in bench.ARMS}
    assert pools["fixed"] == pools["curriculum"] == pools["curriculum_down"]  # one held-out set serves them all


def test_level_paths_and_the_refused_level(capsys):
    assert bench._path([1, 1, 0, 0, 0, 1]) == "1x2 0x3 1x1"
    assert bench._path([]) == ""
    with pytest.raises(SystemExit) as e:
        bench.main(["--level", "0"])
    assert e.value.code == 2 and "--level must be 1 or more" in capsys.readouterr().err
