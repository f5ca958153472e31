"""Every recipe and preset resolves to the TRL arguments recorded in tests/data/golden_trl_args.json."""

import json

from golden_trl_args import GOLDEN, collect


def test_every_recipe_hands_trl_the_recorded_arguments():
    want, got = json.loads(GOLDEN.read_text()), collect()
    assert sorted(got) == sorted(want), "recipes or presets came or went: python tests/golden_trl_args.py --write"
    changed = {key: {k: (want[key].get(k), got[key].get(k)) for k in sorted({*want[key], *got[key]})
                     if want[key].get(k) != got[key].get(k)} for key in want if want[key] != got[key]}
    assert not changed, f"TRL's arguments changed (recorded, now): {changed}"


def test_the_comparison_sees_a_changed_default(monkeypatch):
    from unsloth_grpo import config

    monkeypatch.setitem(config.TRAINING_DEFAULTS, "max_grad_norm", 0.2)
    assert collect() != json.loads(GOLDEN.read_text())
