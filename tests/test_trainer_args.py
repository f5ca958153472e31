"""``training:`` is TRL's own config: its fields by their own names, checked and built by TRL's dataclass."""

from __future__ import annotations

import dataclasses
import importlib
import pkgutil
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import yaml

import unsloth_grpo
import unsloth_grpo.recipes
from unsloth_grpo.cli.recipe import run_from_args, run_recipe
from unsloth_grpo.config import (
    TRAINING_DEFAULTS,
    ConfigDeprecation,
    ConfigError,
    TrainingConfig,
    config_to_dict,
    dump_config,
    load_config,
)
from unsloth_grpo.hardware.backend import BackendInfo
from unsloth_grpo.recipes import arith, gsm8k
from unsloth_grpo.training.checks import config_problems
from unsloth_grpo.training.trainer_args import (
    GRPO, SFT, device_fields, field_table, grpo_args, sft_args, trainer_kwargs)

ROOT = Path(__file__).resolve().parents[1]

#: Three GRPOConfig fields the toolkit never names anywhere. (epsilon_high and
#: mask_truncated_completions, the issue's other examples, are typed fields now: the recipes write
#: them out so that config.yaml says what ran on either backend; they reach TRL the same way.)
UNNAMED = {"importance_sampling_level": "sequence", "delta": 2.0, "top_entropy_quantile": 0.5}
CPU = BackendInfo("transformers", "cpu", "fp32", False, False, "builtin:tiny")
#: A GRPOConfig field (trl 1.14.2: float, default 1.0) that no file of the package names.
NEVER_NAMED = "repetition_penalty"
RECIPES = [importlib.import_module(f"unsloth_grpo.recipes.{m.name}").RECIPE
           for m in pkgutil.iter_modules(unsloth_grpo.recipes.__path__)]


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
    assert notes[0].filename.endswith("tasks/_recipe.py")  # where the config was loaded, not inside the loader
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
    # every TRL field with TRL's help and the recipe's value; what the toolkit adds is said after it
    (lr,) = [x for x in out.splitlines() if x.startswith("training.learning_rate ")]
    lr_help = " ".join(trl.GRPOConfig.__dataclass_fields__["learning_rate"].metadata["help"].split())
    assert lr.split()[1] == "5e-06" and lr.endswith(f"(TRL) {lr_help}")
    (optim,) = [x for x in out.splitlines() if x.startswith("training.optim ")]
    assert "'adamw_8bit'" in optim and "[toolkit: an 8-bit optimizer becomes adamw_torch on CPU" in optim
    assert "training.warmup_ratio " in out  # the toolkit's own option, with its own help
    assert "run.keep_last " in out
    (rewards,) = [x for x in out.splitlines() if x.startswith("rewards ")]
    assert "correctness" in rewards  # the recipe's own defaults, not the empty class default


# ------------------------------------------------------------------ TRL's fields are not ours to declare


def test_the_training_section_declares_no_field_of_trls_configs():
    own = {f.name for f in dataclasses.fields(TrainingConfig)} - {"trl"}
    assert own, "the toolkit's own training options are typed fields of TrainingConfig"
    assert own.isdisjoint(field_table(GRPO)) and own.isdisjoint(field_table(SFT))


def test_the_package_never_names_the_field_the_next_tests_use():
    sources = [p.read_text() for p in Path(unsloth_grpo.__file__).parent.rglob("*.py")]
    assert not any(NEVER_NAMED in text for text in sources)
    assert field_table(GRPO)[NEVER_NAMED].default == 1.0


@pytest.mark.parametrize("source", ["yaml", "override"])
def test_a_field_the_toolkit_never_names_reaches_grpo_config(tmp_path, source):
    if source == "yaml":
        path = tmp_path / "c.yaml"
        path.write_text(f"training:\n  {NEVER_NAMED}: 1.3\n")
        cfg = _smoke(config=str(path))
    else:
        cfg = _smoke(f"training.{NEVER_NAMED}=1.3")
    assert config_problems(cfg) == []
    assert getattr(grpo_args(cfg, CPU, weights=[1.0, 1.0]), NEVER_NAMED) == 1.3
    dumped = tmp_path / "dumped.yaml"
    assert yaml.safe_load(dump_config(cfg, dumped))["training"][NEVER_NAMED] == 1.3
    assert load_config(dumped) == cfg


@pytest.mark.parametrize("source", ["yaml", "override"])
def test_a_misspelt_trl_field_is_refused_before_loading_with_trls_closest_name(tmp_path, capsys, source):
    typo = NEVER_NAMED[:-1] + "i"  # repetition_penalti
    if source == "yaml":
        path = tmp_path / "c.yaml"
        path.write_text(f"training:\n  {typo}: 1.3\n")
        argv = ["--config", str(path)]
    else:
        argv = [f"training.{typo}=1.3"]
    expected = (f"training.{typo} is not a field of the installed TRL's GRPOConfig; "
                f"did you mean 'training.{NEVER_NAMED}'?")
    assert run_recipe(gsm8k.RECIPE, ["--preset", "smoke", "--check", *argv]) == 2
    assert expected in capsys.readouterr().err
    assert _start(argv) == 2  # a run is refused before the trainer is even called
    assert expected in capsys.readouterr().err


def _start(argv: list[str]) -> int:
    import argparse

    from unsloth_grpo.cli.recipe import add_train_arguments

    def never(*args, **kwargs):
        raise AssertionError("a run started although its config was bad")

    parser = argparse.ArgumentParser()
    add_train_arguments(parser, list(gsm8k.RECIPE.presets))
    return run_from_args(gsm8k.RECIPE, parser.parse_args(["--preset", "smoke", *argv]), train_fn=never)


def test_values_take_the_types_trl_declares():
    cfg = _smoke("training.num_iterations='2'", "training.delta=3")  # a quoted number; an int for a float
    args = grpo_args(cfg, CPU, weights=[1.0, 1.0])
    assert args.num_iterations == 2 and args.delta == 3
    problems = config_problems(_smoke("training.top_entropy_quantile=half", "training.num_iterations=1.5"))
    assert problems == ["training.top_entropy_quantile: expected a number, got 'half'",
                        "training.num_iterations: expected an integer, got 1.5"]


def test_trls_own_checks_run_before_the_model_loads(tmp_path, monkeypatch):
    # transformers refuses an unknown scheduler only when TRL's dataclass is built, which used to
    # happen after the model had loaded; now the run builds it first, as it will use it
    from unsloth_grpo.hardware import backend
    from unsloth_grpo.training.train import train

    monkeypatch.setattr(backend, "load_model", lambda *a, **k: pytest.fail("a model was loaded"))
    cfg = _smoke("model.backend=transformers", "training.lr_scheduler_type=cosinee", output_dir=str(tmp_path / "r"))
    assert config_problems(cfg) == []  # the name and the type are right: only TRL knows its schedulers
    refused = "training: the installed TRL's GRPOConfig refuses these settings: cosinee is not a valid SchedulerType"
    (problem,) = config_problems(cfg, build=True)
    assert problem.startswith(refused)
    with pytest.raises(ConfigError, match=refused):
        train(cfg, log=lambda _: None)
    assert not (tmp_path / "r").exists()  # nothing was written
    sft = arith.RECIPE.resolve(preset="smoke")
    stages = config_to_dict(sft)["stages"]
    bad = load_config({**config_to_dict(sft), "stages": [{**stages[0], "training": {"lr_scheduler_type": "cosinee"}},
                                                         stages[1]]})
    (problem,) = config_problems(bad, build=True)
    assert problem.startswith("stages[0] (sft): training: the installed TRL's SFTConfig refuses these settings: "
                              "cosinee is not a valid SchedulerType")


def test_the_check_leaves_the_process_state_to_the_run():
    from accelerate.state import PartialState

    fresh = PartialState._shared_state == {}
    assert config_problems(_smoke(), build=True) == []
    assert not fresh or PartialState._shared_state == {}  # the run sets it up for its own device


# ------------------------------------------------------------------ the device's fields, in one place


def test_device_fields_follow_the_loaders_decision():
    values = {"optim": "adamw_8bit", "gradient_checkpointing": True}
    cuda = dict(load_in_4bit=True, use_vllm=False, model_name="m")
    assert device_fields(CPU, values) == {"bf16": False, "fp16": False, "use_cpu": True, "optim": "adamw_torch",
                                          "gradient_checkpointing": False}
    assert device_fields(BackendInfo("unsloth", "cuda", "bf16", **cuda), values) == {
        "bf16": True, "fp16": False, "use_cpu": False, "optim": "adamw_8bit", "gradient_checkpointing": False}
    assert device_fields(BackendInfo("transformers", "cuda", "fp16", **cuda), values) == {
        "bf16": False, "fp16": True, "use_cpu": False, "optim": "adamw_8bit", "gradient_checkpointing": True}
    cfg = _smoke()
    for kind in (GRPO, SFT):  # both trainers, one rule (what TRL is given: Unsloth's CPU mode may adjust it)
        kwargs = trainer_kwargs(cfg, CPU, kind)
        assert {k: kwargs[k] for k in ("use_cpu", "bf16", "fp16", "optim", "gradient_checkpointing")} == {
            "use_cpu": True, "bf16": False, "fp16": False, "optim": "adamw_torch", "gradient_checkpointing": False}


# ------------------------------------------------------------------ one place for defaults; old keys


def test_a_recipe_lists_only_what_differs_from_the_toolkits_training_defaults():
    for recipe in RECIPES:
        same = {k: v for k, v in recipe.defaults.get("training", {}).items() if TRAINING_DEFAULTS.get(k) == v}
        assert same == {}, f"{recipe.name} repeats the toolkit's default for {same}"


def test_every_recipe_yaml_is_its_recipes_defaults():
    by_name = {r.name: r for r in RECIPES}
    files = [f for f in sorted((ROOT / "recipes").glob("*.yaml")) if f.stem in by_name]
    assert len(files) >= 8
    for f in files:
        written, defaults = config_to_dict(load_config(f)), config_to_dict(by_name[f.stem].resolve())
        if f.stem == "custom":  # the example points data at a file of the repository
            written.pop("data"), defaults.pop("data")
        assert written == defaults, f


def test_no_shipped_recipe_preset_or_file_uses_an_old_key():
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConfigDeprecation)
        for recipe in RECIPES:
            for preset in [None, *recipe.presets]:
                recipe.resolve(preset=preset)
        for f in (ROOT / "recipes").glob("*.yaml"):
            load_config(f)


def test_an_old_key_gets_one_line_on_the_command_line(capsys):
    assert run_recipe(gsm8k.RECIPE, ["--preset", "smoke", "--print-config", "training.samples_every=3"]) == 0
    out, err = capsys.readouterr()
    assert err.splitlines() == ["note: training.samples_every is an old key; write run.samples_every instead "
                                "(read as run.samples_every this time)"]
    assert yaml.safe_load(out)["run"]["samples_every"] == 3


def test_load_dump_load_keeps_trl_fields_toolkit_options_and_stages(tmp_path):
    cfg = arith.RECIPE.resolve(preset="smoke", overrides=[
        f"training.{NEVER_NAMED}=1.1", "training.warmup_ratio=0.05", "training.learning_rate=1e-4",
        "training.generation_kwargs={min_new_tokens: 1}"])
    assert cfg.training.learning_rate == 1e-4  # 1e-4 is a number, although YAML 1.1 reads it as text
    path = tmp_path / "c.yaml"
    text = dump_config(cfg, path)
    again = load_config(path)
    assert again == cfg and dump_config(again) == text
    assert again.training.warmup_ratio == 0.05 and again.training.trl["generation_kwargs"] == {"min_new_tokens": 1}


@pytest.mark.slow
def test_checking_names_and_types_imports_neither_trl_nor_transformers():
    """What keeps ``--check`` fast, and Unsloth first on a GPU: TRL's field table, not TRL."""
    code = ("import sys\n"
            "from unsloth_grpo.recipes import gsm8k\n"
            "from unsloth_grpo.training.checks import config_problems\n"
            f"cfg = gsm8k.RECIPE.resolve(preset='smoke', overrides=['training.{NEVER_NAMED}=1.3', 'training.delta=2'])\n"
            "heavy = [m for m in ('torch', 'transformers', 'trl') if m in sys.modules]\n"
            "print(config_problems(cfg), heavy)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
    assert out.stdout.strip().splitlines()[-1] == "[] []"


@pytest.mark.slow
def test_the_field_table_is_the_installed_trls_read_live_or_through_the_cache(tmp_path, monkeypatch):
    import json

    import trl

    from unsloth_grpo.training import trl_schema

    monkeypatch.setenv("UNSLOTH_GRPO_HOME", str(tmp_path))
    through_child = trl_schema._cached()  # TRL read in a child process, the table kept in the cache folder
    (kept,) = (tmp_path / "trl_fields").glob("*.json")
    assert through_child == json.loads(json.dumps(trl_schema._read_trl())) == json.loads(kept.read_text())
    assert set(through_child["GRPOConfig"]) == {f.name for f in dataclasses.fields(trl.GRPOConfig)
                                                if f.init and not f.name.startswith("_")}
    assert through_child["GRPOConfig"]["report_to"]["kinds"] == ["none", "str", "list"]
    kept.write_text(json.dumps({"GRPOConfig": {}, "SFTConfig": {}}))
    assert trl_schema._cached() == {"GRPOConfig": {}, "SFTConfig": {}}  # read back, no child process


@pytest.mark.slow
def test_the_backend_is_prepared_before_the_run_imports_trl():
    """A run's check builds TRL's config (and imports transformers); Unsloth, when it is the backend,
    must be imported before them (on a GPU its patches are partial otherwise; it says so on a CPU)."""
    code = (
        "import sys\n"
        "from unsloth_grpo.hardware import backend\n"
        "seen = []\n"
        "def use(decision):  # where Unsloth would be imported; not imported here\n"
        "    seen.append(sorted(m for m in ('transformers', 'trl', 'peft') if m in sys.modules))\n"
        "    return decision\n"
        "backend.use_backend = use\n"
        "from unsloth_grpo.recipes import gsm8k\n"
        "from unsloth_grpo.training.checks import check_before_loading\n"
        "check_before_loading(gsm8k.RECIPE.resolve(preset='smoke'))  # as a run does\n"
        "print(seen, 'transformers' in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
    assert out.stdout.strip().splitlines()[-1] == "[[]] True"  # prepared first, then TRL's config was built


@pytest.mark.slow
def test_the_trainer_runs_with_the_passed_through_fields(tmp_path):
    """One real step on the tiny model: the GRPOTrainer's own args hold the fields, from a file and from
    ``key=value``, and the config written next to the run reads back equal."""
    from transformers import TrainerCallback

    from unsloth_grpo.training.train import train

    seen = {}

    class Capture(TrainerCallback):
        def on_train_begin(self, args, state, control, **kwargs):
            seen.update({k: getattr(args, k) for k in [*UNNAMED, NEVER_NAMED]})

    path = tmp_path / "c.yaml"
    path.write_text(f"training:\n  {NEVER_NAMED}: 1.3\n")
    cfg = _smoke("model.backend=transformers", "training.max_steps=1", "run.samples_every=0",
                 *(f"training.{k}={v}" for k, v in UNNAMED.items()), config=str(path),
                 output_dir=str(tmp_path / "run"))
    result = train(cfg, callbacks=[Capture()], log=lambda _: None)
    assert result.global_step == 1
    assert seen == {**UNNAMED, NEVER_NAMED: 1.3}
    assert load_config(tmp_path / "run" / "config.yaml") == cfg
