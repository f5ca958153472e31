"""``training:`` is TRL's own config: its fields by their own names, checked and built by TRL's dataclass."""

from __future__ import annotations

import dataclasses

import pytest
import yaml

from unsloth_grpo.config import ConfigDeprecation, ConfigError, config_to_dict, dump_config, load_config
from unsloth_grpo.hardware.backend import BackendInfo
from unsloth_grpo.recipes import gsm8k
from unsloth_grpo.training.checks import config_problems
from unsloth_grpo.training.trainer_args import grpo_args, sft_args

#: Three GRPOConfig fields the toolkit never names anywhere. (epsilon_high and
#: mask_truncated_completions, the issue's other examples, are typed fields now: the recipes write
#: them out so that config.yaml says what ran on either backend; they reach TRL the same way.)
UNNAMED = {"importance_sampling_level": "sequence", "delta": 2.0, "top_entropy_quantile": 0.5}
CPU = BackendInfo("transformers", "cpu", "fp32", False, False, "builtin:tiny")


def _smoke(*overrides: str, **kwargs):
    return gsm8k.RECIPE.resolve(preset="smoke", overrides=list(overrides), **kwargs)


def test_fields_the_toolkit_never_names_reach_grpo_config():
    cfg = _smoke(*(f"training.{k}={v}" for k, v in UNNAMED.items()))
    assert {k: cfg.training.trl[k] for k in UNNAMED} == UNNAMED
    assert config_problems(cfg) == []
    args = grpo_args(cfg, CPU, weights=[1.0, 1.0])
    assert {k: getattr(args, k) for k in UNNAMED} == UNNAMED
    assert (args.epsilon_high, args.mask_truncated_completions) == (cfg.training.epsilon_high,
                                                                   cfg.training.mask_truncated_completions)
    # the toolkit's own decisions are still made: CPU, no bf16, the rewards' weights
    assert (args.use_cpu, args.bf16, args.reward_weights) == (True, False, [1.0, 1.0])


def test_pass_through_fields_round_trip_under_their_own_names(tmp_path):
    cfg = _smoke("training.delta=2.0")
    text = dump_config(cfg, tmp_path / "c.yaml")
    assert yaml.safe_load(text)["training"]["delta"] == 2.0  # written where the user wrote it
    assert load_config(tmp_path / "c.yaml") == cfg


def test_the_old_extra_section_keeps_working_and_says_where_its_keys_went():
    with pytest.warns(ConfigDeprecation, match=r"training.extra is an old key; write its fields directly under "
                                               r"training: \(e.g. training.delta: ...\)"):
        cfg = _smoke("training.extra={delta: 2.0}")
    assert cfg.training.trl["delta"] == 2.0
    assert cfg == _smoke("training.delta=2.0")
    with pytest.raises(ConfigError, match="training.temperature is set both directly and under training.extra"):
        _smoke("training.temperature=0.9", "training.extra={temperature: 0.5}")


def test_the_old_passthrough_section_keeps_working_too():
    with pytest.warns(ConfigDeprecation, match="training.passthrough is an old key"):
        cfg = _smoke("training.passthrough={delta: 2.0}")
    assert cfg == _smoke("training.delta=2.0")


def test_old_toolkit_keys_moved_to_run_still_load():
    with pytest.warns(ConfigDeprecation) as notes:
        cfg = _smoke("training.keep_last=5", "training.samples_every=0")
    assert [str(n.message) for n in notes] == [
        "training.keep_last is an old key; write run.keep_last instead (read as run.keep_last this time)",
        "training.samples_every is an old key; write run.samples_every instead (read as run.samples_every this time)"]
    assert notes[0].filename.endswith("cli/recipe.py")  # where the config was loaded, not inside the loader
    assert (cfg.run.keep_last, cfg.run.samples_every) == (5, 0)
    assert "keep_last" not in cfg.training.trl


def test_fields_the_toolkit_sets_name_the_key_that_decides_them():
    problems = config_problems(_smoke("training.bf16=true", "training.output_dir=x", "training.save_total_limit=3"))
    assert any(p.startswith("training.bf16=True: the toolkit sets this GRPOConfig field from model.dtype")
               for p in problems)
    assert any("training.output_dir='x'" in p and "--output-dir" in p for p in problems)
    assert any("training.save_total_limit=3" in p and "run.keep_last" in p for p in problems)


def test_sft_stages_map_through_the_same_rule():
    cfg = _smoke("training.learning_rate=0.003", "training.dataset_text_field=body", "training.epsilon_high=0.28")
    args = sft_args(cfg, CPU)
    assert args.learning_rate == 0.003 and args.dataset_text_field == "body"  # an SFTConfig field passes
    assert not hasattr(args, "epsilon_high")  # a GRPO-only field is left to the GRPO stages
    assert args.max_length == cfg.model.max_seq_length
    assert args.loss_type != cfg.training.loss_type  # "dapo" is GRPO's loss, not SFT's


def test_a_stage_checks_its_own_keys_against_its_trainer():
    cfg = _smoke()
    cfg = load_config({**config_to_dict(cfg), "training": {},
                       "stages": [{"name": "pre", "kind": "sft", "training": {"delta": 2.0}},
                                  {"name": "rl", "training": {"packing": True}}]})
    problems = config_problems(cfg)
    assert any(p.startswith("stages[0] (pre): training.delta is not a field of the installed TRL's SFTConfig")
               for p in problems)
    assert any(p.startswith("stages[1] (rl): training.packing is not a field of the installed TRL's "
                            "GRPOConfig") for p in problems)


def test_help_config_shows_trls_own_help_for_passed_through_fields(capsys):
    import trl

    from unsloth_grpo.cli.recipe import run_recipe

    assert run_recipe(gsm8k.RECIPE, ["--help-config"]) == 0
    out = capsys.readouterr().out
    (line,) = [x for x in out.splitlines() if x.startswith("training.delta ")]
    trl_help = " ".join(next(f for f in dataclasses.fields(trl.GRPOConfig)
                             if f.name == "delta").metadata["help"].split())
    assert line.endswith(f"(TRL) {trl_help}")
    assert "training.use_cpu " not in out  # set by the toolkit from model.device
    assert "run.keep_last " in out
    (rewards,) = [x for x in out.splitlines() if x.startswith("rewards ")]
    assert "correctness" in rewards  # the recipe's own defaults, not the empty class default


@pytest.mark.slow
def test_the_trainer_runs_with_the_passed_through_fields(tmp_path):
    """One real step on the tiny model: the GRPOTrainer's own args hold the three fields."""
    from transformers import TrainerCallback

    from unsloth_grpo.training.train import train

    seen = {}

    class Capture(TrainerCallback):
        def on_train_begin(self, args, state, control, **kwargs):
            seen.update({k: getattr(args, k) for k in UNNAMED})

    cfg = _smoke("model.backend=transformers", "training.max_steps=1", "run.samples_every=0",
                 *(f"training.{k}={v}" for k, v in UNNAMED.items()), output_dir=str(tmp_path / "run"))
    result = train(cfg, callbacks=[Capture()], log=lambda _: None)
    assert result.global_step == 1
    assert seen == UNNAMED
