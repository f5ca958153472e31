import pytest
import yaml

from unsloth_grpo.config import (
    ConfigError,
    RecipeConfig,
    RewardSpec,
    config_to_dict,
    dump_config,
    load_config,
    parse_override,
    validate,
)
from unsloth_grpo.recipes import gsm8k
from unsloth_grpo.training.checks import config_problems


def test_round_trip_through_yaml(tmp_path):
    cfg = gsm8k.RECIPE.resolve(preset="smoke", overrides=["training.max_steps=7"])
    path = tmp_path / "c.yaml"
    dump_config(cfg, path)
    again = load_config(path)
    assert again == cfg
    assert again.training.max_steps == 7
    assert isinstance(again.rewards[0], RewardSpec)
    assert dump_config(again) == path.read_text()


def test_every_shipped_recipe_config_loads_and_validates():
    from pathlib import Path

    files = sorted(Path(__file__).resolve().parents[1].glob("recipes/**/*.yaml"))
    recipe_files = [f for f in files if "accelerate" not in f.parts]
    assert recipe_files, "recipes/ holds no config files"
    for f in recipe_files:
        cfg = load_config(f)
        assert config_problems(cfg) == [], f
        first_line = f.read_text().splitlines()[0]
        assert first_line.startswith("# ") and ("unsloth_grpo" in first_line or "unsloth-grpo" in first_line), f


def test_gsm8k_yaml_matches_the_embedded_defaults():
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "recipes" / "gsm8k.yaml"
    assert load_config(path) == gsm8k.RECIPE.resolve()


def test_unknown_key_is_rejected_with_a_suggestion():
    # training: takes any GRPOConfig field, so its keys are checked against the installed TRL
    (problem,) = config_problems(load_config({"rewards": [{"name": "correctness"}], "training": {"max_step": 3}}))
    assert problem.startswith("training.max_step is not a field of the installed TRL's GRPOConfig; "
                              "did you mean 'training.max_steps'?")
    with pytest.raises(ConfigError, match="unknown config key 'modle'"):
        load_config({"modle": {}})


def test_wrong_types_name_the_field():
    # TRL's fields take their types from the installed TRL, in the check before loading
    problems = config_problems(load_config({"rewards": [{"name": "correctness"}], "training": {"max_steps": "ten"}}))
    assert problems == ["training.max_steps: expected an integer, got 'ten'"]
    with pytest.raises(ConfigError, match=r"model.load_in_4bit: expected true or false"):
        load_config({"model": {"load_in_4bit": "maybe"}})
    with pytest.raises(ConfigError, match=r"rewards\[0\]"):
        load_config({"rewards": [{"weight": 2.0}]})


def test_a_files_wrong_names_and_types_are_listed_together(tmp_path):
    """Fixing a config one error per try is slow: every wrong type, unknown key, missing name and old
    key of a file comes in one message (it used to stop at the first)."""
    path = tmp_path / "c.yaml"
    path.write_text("output_dir: 007\n"
                    "model: {max_seq_length: lots, nme: x, load_in_4bit: maybe}\n"
                    "lora: {r: two}\n"
                    "rewards: [{name: correctness}, {weight: 2}]\n"
                    "training: {keep_last: 2}\n"
                    "stages: [{name: a, max_step: 3}]\n")
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    lines = [line.strip() for line in str(caught.value).splitlines()[1:]]
    assert sorted(lines) == sorted([
        "- model.max_seq_length: expected an integer, got 'lots'",
        "- unknown config key 'model.nme'. Did you mean 'name'? Valid keys under model: name, backend, "
        "max_seq_length, load_in_4bit, fast_inference, gpu_memory_utilization, vllm_standby, vllm_server, dtype, "
        "device, trust_remote_code",
        "- model.load_in_4bit: expected true or false, got 'maybe'",
        "- lora.r: expected an integer, got 'two'",
        "- rewards[1]: this entry needs 'name'",
        "- training.keep_last is an old key that this release no longer reads: write run.keep_last (a setting of "
        "the toolkit, under run:) instead",
        "- unknown config key 'stages[0].max_step'. Did you mean 'max_steps'? Valid keys under stages[0]: name, "
        "kind, max_steps, learning_rate, rewards, training, num_examples, data",
    ])
    # the same file with the mistakes fixed: the string stays as typed
    path.write_text("output_dir: 007\nrewards: [{name: correctness}]\ntraining: {warmup_ratio: 0.2}\n")
    assert load_config(path).output_dir == "007"


def test_yaml_yes_and_on_are_no_numbers():
    """YAML reads yes/on as true, and a lax type check reads true as 1: `lora.r: yes` would train a rank-1
    adapter and `training.max_steps: on` one step. Both are refused, in the toolkit's fields and in TRL's."""
    with pytest.raises(ConfigError, match=r"lora.r: expected an integer, got 'yes'"):
        load_config({}, overrides=["lora.r=yes"])
    with pytest.raises(ConfigError, match=r"model.gpu_memory_utilization: expected a number, got 'on'"):
        load_config({}, overrides=["model.gpu_memory_utilization=on"])
    problems = config_problems(load_config({"rewards": [{"name": "correctness"}]},
                                           overrides=["training.max_steps=on", "training.temperature=no"]))
    assert problems == ["training.max_steps: expected an integer, got True",
                        "training.temperature: expected a number, got False"]
    assert load_config({}, overrides=["model.load_in_4bit=on", "output_dir=yes"]).model.load_in_4bit is True


def test_overrides_parse_yaml_values():
    assert load_config({}, overrides=["training.learning_rate=1e-5"]).training.learning_rate == 1e-5
    assert load_config({}, overrides=["model.load_in_4bit=false"]).model.load_in_4bit is False
    cfg = load_config({}, overrides=["training.max_steps=3", "output_dir=/tmp/x"])
    assert cfg.training.max_steps == 3 and cfg.output_dir == "/tmp/x"
    with pytest.raises(ConfigError, match="section.key=value"):
        parse_override("training.max_steps")


def test_a_stages_reward_params_get_yamls_reading_as_the_recipes_do():
    """`stages.1.rewards=[{..., params: {arithmetic: false}}]` kept `false` as YAML's text object inside the stage
    (a str that cannot be copied): the reward got the string 'false', and the run stopped with a TypeError when it
    copied the config. A stage's rewards now read their params as the recipe's own rewards do."""
    from unsloth_grpo.config import config_to_dict

    spec = "[{name: worked_calculation, weight: 2, params: {arithmetic: false, reward: 1e-1}}]"
    for override in (f"rewards={spec}", f"stages.0.rewards={spec}"):
        cfg = load_config({"stages": [{"name": "g", "kind": "grpo"}]}, overrides=[override])
        reward = (cfg.stages[0].rewards or cfg.rewards)[0]
        assert reward.params == {"arithmetic": False, "reward": 0.1} and reward.weight == 2.0
        assert type(reward.params["arithmetic"]) is bool
        assert config_to_dict(cfg)  # a deep copy: the old text object refused it
    # a stage's string field keeps the text as typed, as the recipe's do
    assert load_config({"stages": [{"name": "007", "kind": "grpo"}]}, overrides=["rewards=[{name: correctness}]"]
                       ).stages[0].name == "007"


def _cfg(**training):
    cfg = load_config({"rewards": [{"name": "correctness", "weight": 2.0}], "training": training})
    return cfg


def test_validation_reports_every_problem_at_once():
    cfg = _cfg(num_generations=6, per_device_train_batch_size=8, max_completion_length=2000, max_steps=0)
    cfg.lora.max_lora_rank = 8
    cfg.rewards.append(RewardSpec(name="no_such_reward"))
    problems = config_problems(cfg)
    text = "\n".join(problems)
    assert "not divisible by training.num_generations=6" in text
    assert "per_device_train_batch_size=6" in text  # the fix is named
    assert "exceeds model.max_seq_length" in text
    assert "lora.r=16 exceeds lora.max_lora_rank=8" in text
    assert "training.max_steps=0" in text
    assert "no_such_reward" in text
    assert len(problems) >= 5


def test_sound_default_config_has_no_problems():
    assert config_problems(gsm8k.RECIPE.resolve()) == []
    assert config_problems(gsm8k.RECIPE.resolve(preset="smoke")) == []


def test_empty_rewards_and_one_generation_are_problems():
    cfg = load_config({"training": {"num_generations": 1, "per_device_train_batch_size": 1}})
    text = "\n".join(validate(cfg))
    assert "rewards: the list is empty" in text
    assert "num_generations=1" in text


def test_unknown_preset_lists_the_valid_ones():
    with pytest.raises(ConfigError, match="choose one of: smoke"):
        gsm8k.RECIPE.resolve(preset="tiny")


def test_a_config_changed_in_python_is_checked_for_the_types_a_file_would_be():
    """A notebook edits ``cfg`` in Python: a dict appended where a RewardSpec belongs was an
    AttributeError traceback, and a weight of text passed ``config_problems`` to be refused only by
    ``train()``. Both are problems now, named by their key."""
    from unsloth_grpo.config import RewardSpec
    from unsloth_grpo.recipes.gsm8k import RECIPE
    from unsloth_grpo.training.checks import config_problems

    cfg = RECIPE.resolve(preset="smoke")
    cfg.rewards.append({"name": "xml_count", "weight": 1})
    assert config_problems(cfg) == [
        "rewards[2]: expected a RewardSpec, got dict {'name': 'xml_count', 'weight': 1}; write "
        "RewardSpec(**{'name': 'xml_count', 'weight': 1}) (from unsloth_grpo.config import RewardSpec)"]
    cfg = RECIPE.resolve(preset="smoke")
    cfg.rewards.append(RewardSpec("xml_count", weight="high"))
    assert config_problems(cfg) == ["rewards[2].weight: expected a number, got 'high'"]
    cfg.rewards[2] = RewardSpec("xml_count", weight=0.5)
    assert config_problems(cfg) == []


def test_resolve_takes_one_override_string_a_dict_of_overrides_and_a_path():
    """``RECIPE.resolve(overrides="training.max_steps=4")`` was read character by character ("override
    't' is not of the form ..."), a dict of overrides by its keys, and ``output_dir=Path(...)`` refused."""
    from pathlib import Path

    from unsloth_grpo.recipes.gsm8k import RECIPE

    for overrides in ("training.max_steps=4", ["training.max_steps=4"], {"training.max_steps": 4},
                      {"training": {"max_steps": 4}}):
        assert RECIPE.resolve(preset="smoke", overrides=overrides).training.max_steps == 4, overrides
    cfg = RECIPE.resolve(preset="smoke", output_dir=Path("outputs") / "mine", overrides={"seed": 7, "output_dir": "x"})
    assert (cfg.output_dir, cfg.seed) == ("x", 7)  # the overrides come after output_dir, as on the command line
    assert RECIPE.resolve(preset="smoke", output_dir=Path("outputs") / "mine").output_dir == "outputs/mine"
    with pytest.raises(TypeError, match=r"overrides: expected a list of 'section.key=value' strings \(or one "
                                        r"string, or a dict such as \{'training.max_steps': 4\}\), got int \(5\)"):
        RECIPE.resolve(preset="smoke", overrides=5)
    with pytest.raises(TypeError, match=r"output_dir: expected a str or a path, got int \(3\)"):
        RECIPE.resolve(preset="smoke", output_dir=3)
