"""Tools inside real GRPO training (TRL's tool loop, our guards, the tiny tool-capable model).

The first tests script what the model writes (TRL's ``_generate_single_turn`` is replaced by a
script), so that the calls are known and the tests are about what happens to them: the tool
runs, its result lands in the transcript, a failing tool costs the step nothing. Everything
else (parsing the calls, running the tools, building the next turn, the loss, the rewards,
the samples file) is the real thing. The slow test at the end trains the model for real.
"""

import json
import threading

import pytest

from unsloth_grpo.config import load_config
from unsloth_grpo.training.train import train

SEEN: list = []  # completions the spy reward saw, for the assertions
ANSWERS: list = []  # their rows' answer column
CALLED: list = []  # arguments the spy tool was called with
RELEASE = threading.Event()  # lets the hanging tool's thread end when the test is over


def spy_reward(completions, answer=None, **kwargs):
    SEEN.extend(completions)
    ANSWERS.extend(answer or [None] * len(completions))
    return [0.0] * len(completions)


def spy_calculate(expression: str) -> str:
    """Evaluate arithmetic, and record the call.

    Args:
        expression: The arithmetic to evaluate.
    """
    from unsloth_grpo.tools.calculator import calculate

    CALLED.append(expression)
    return calculate(expression)


def explode(x: int) -> str:
    """Raise.

    Args:
        x: Anything.
    """
    raise RuntimeError("the database is down")


def stall(x: int) -> str:
    """Hang.

    Args:
        x: Anything.
    """
    RELEASE.wait(60)
    return "too late"


def weird(x: int) -> object:
    """Return something that is not text.

    Args:
        x: Anything.
    """
    return object()


def _script(monkeypatch, first_turn, after_tool="<answer>done</answer><|im_end|>"):
    """Make the model write ``first_turn(generation_index, prompt_text)``, then ``after_tool``."""
    from trl import GRPOTrainer

    def scripted(self, prompt_ids, images, multimodal_fields, num_generations, has_tool_images=False):
        tok = self._tokenizer
        out = []
        for i, ids in enumerate(prompt_ids):  # TRL repeats each prompt num_generations times already
            prompt = tok.decode(ids)
            text = after_tool if "<|im_start|>tool" in prompt else first_turn(i, prompt)
            out.append(tok(text, add_special_tokens=False)["input_ids"])
        return out, None

    monkeypatch.setattr(GRPOTrainer, "_generate_single_turn", scripted)


def _cfg(tmp_path, tools, rewards, *, task="gsm8k_tools", steps=2, **training):
    return load_config({
        "task": task, "output_dir": str(tmp_path / "run"), "seed": 0,
        "model": {"name": "builtin:tiny-tools", "backend": "transformers", "max_seq_length": 512,
                  "load_in_4bit": False, "dtype": "fp32", "device": "cpu"},
        "lora": {"r": 8, "alpha": 16},
        "data": {"source": "synthetic", "num_synthetic": 16},
        "rewards": rewards, "tools": tools,
        "training": {"max_steps": steps, "learning_rate": 1e-3, "num_generations": 4, "per_device_train_batch_size": 4,
                     "max_completion_length": 48, "save_steps": 0, "optim": "adamw_torch",
                     "lr_scheduler_type": "constant", "warmup_ratio": 0.0, **training},
        "run": {"samples_every": 1},
        "monitor": {"ignore": ["length_clipped"]},
    })


def _from_training_on():
    """Before the model loads, every reward is tried on a few sample completions (single messages, no
    tool turns); the spy reward sees those too. Forget them when training begins."""
    from transformers import TrainerCallback

    class Forget(TrainerCallback):
        def on_train_begin(self, args, state, control, **kwargs):
            SEEN.clear()
            ANSWERS.clear()

    return [Forget()]


@pytest.fixture(autouse=True)
def _fresh(tmp_path, monkeypatch):
    monkeypatch.setenv("UNSLOTH_GRPO_HOME", str(tmp_path.parent / "tools-home"))  # tiny model built once per session dir
    SEEN.clear()
    ANSWERS.clear()
    CALLED.clear()
    RELEASE.clear()
    yield
    RELEASE.set()  # the abandoned stall() thread ends


@pytest.mark.parametrize("backend", ["transformers", "unsloth"])
@pytest.mark.slow
def test_a_tool_really_runs_and_its_result_is_in_the_transcript(tmp_path, monkeypatch, backend):
    if backend == "unsloth":
        pytest.importorskip("unsloth")  # on CPU Unsloth hands TRL's own trainer the tools
    _script(monkeypatch, lambda i, prompt: "<tool_call>spy_calculate\nexpression=37*91\n</tool_call>")
    cfg = _cfg(tmp_path, {"functions": ["test_tools_training:spy_calculate"]},
               [{"name": "test_tools_training:spy_reward"},
                {"name": "tool_call_format", "params": {"tools": ["test_tools_training:spy_calculate"]}}])
    cfg.model.backend = backend
    result = train(cfg, log=lambda s: None, callbacks=_from_training_on())
    assert result.backend["backend"] == backend
    assert result.global_step == 2
    assert CALLED and set(CALLED) == {"37*91"}  # the tool was called with the model's argument
    for completion in SEEN:
        roles = [m["role"] for m in completion]
        assert roles == ["assistant", "tool", "assistant"], completion
        assert completion[1]["content"] == "3367"  # 37*91, computed by the tool: the script never wrote it
    rows = result.metrics
    assert all(r["tools/call_frequency"] == 1.0 and r["tools/failure_frequency"] == 0.0 for r in rows)
    assert all(r["tools/used_share"] == 1.0 for r in rows)
    assert all(r["rewards/tool_call_format/mean"] == 1.0 for r in rows)
    samples = [json.loads(line) for line in (result.output_dir / "samples.jsonl").read_text().splitlines()]
    assert samples and all("[tool spy_calculate] 3367" in s["completion"] for s in samples)
    assert "[call] spy_calculate(expression='37*91')" in samples[0]["completion"]


@pytest.mark.slow
def test_tools_that_raise_hang_or_return_junk_do_not_stop_training(tmp_path, monkeypatch):
    names = ["explode", "stall", "weird", "missing_tool"]
    _script(monkeypatch, lambda i, prompt: f"<tool_call>{names[i % 4]}\nx=1\n</tool_call>")
    cfg = _cfg(tmp_path, {"functions": [f"test_tools_training:{n}" for n in names[:3]], "timeout": 0.5},
               [{"name": "test_tools_training:spy_reward"}], max_completion_length=200)  # room for the errors
    result = train(cfg, log=lambda s: None, callbacks=_from_training_on())
    assert result.global_step == 2
    assert all(r["tools/failure_frequency"] == 1.0 for r in result.metrics)
    errors = {c[0]["tool_calls"][0]["function"]["name"]: c[1]["content"] for c in SEEN}
    assert "explode failed: RuntimeError: the database is down" in errors["explode"]
    assert "stall did not return within 0.5 s" in errors["stall"]
    assert "weird returned a object, which cannot be shown to the model" in errors["weird"]
    assert "Tool missing_tool not found." in errors["missing_tool"]
    for completion in SEEN:  # the model saw each error and went on to its next turn
        assert completion[1]["content"].startswith("{'error': ") and completion[2]["role"] == "assistant"


@pytest.mark.slow
def test_the_environment_example_keeps_state_over_turns(tmp_path, monkeypatch):
    """Binary search scripted over three tool rounds; the reward reads the games' state."""
    def guess(i, prompt):
        return "<tool_call>guess\nnumber=10\n</tool_call>"

    def after(prompt):
        last = prompt.rsplit("<|im_start|>tool\n", 1)[1].split("<|im_end|>")[0]
        return {"higher": "<tool_call>guess\nnumber=15\n</tool_call>",
                "lower": "<tool_call>guess\nnumber=5\n</tool_call>"}.get(last, "found it<|im_end|>")

    from trl import GRPOTrainer

    def scripted(self, prompt_ids, images, multimodal_fields, num_generations, has_tool_images=False):
        tok, out = self._tokenizer, []
        for ids in prompt_ids:
            prompt = tok.decode(ids)
            text = after(prompt) if "<|im_start|>tool" in prompt else guess(0, prompt)
            out.append(tok(text, add_special_tokens=False)["input_ids"])
        return out, None

    monkeypatch.setattr(GRPOTrainer, "_generate_single_turn", scripted)
    cfg = _cfg(tmp_path, {"environment": "guess_number", "max_tool_calling_iterations": 3},
               [{"name": "guess_solved"}, {"name": "test_tools_training:spy_reward"}],
               task="guess_number", steps=3)
    result = train(cfg, log=lambda s: None, callbacks=_from_training_on())
    assert result.global_step == 3
    assert len(SEEN) == 12 and len(set(ANSWERS)) > 1
    for completion, secret in zip(SEEN, ANSWERS):
        secret = int(secret)
        results = [m["content"] for m in completion if m["role"] == "tool"]
        guesses = [c["function"]["arguments"]["number"] for m in completion for c in m.get("tool_calls") or []]
        # every answer is the game's verdict on the row's hidden number, set by reset()
        expected = ["correct" if g == secret else "higher" if g < secret else "lower" for g in guesses]
        assert results == expected[:len(results)], (secret, guesses, results)
    # the reward reads each game's state after its rollout: solved on the 2nd guess scores 0.9
    per_game = [0.9 if int(a) in (5, 15) else 0.0 for a in ANSWERS]
    assert [r["rewards/guess_solved/mean"] for r in result.metrics] == pytest.approx(
        [sum(per_game[i:i + 4]) / 4 for i in range(0, 12, 4)])


@pytest.mark.slow
def test_smoke_preset_learns_to_call_the_calculator_on_every_seed(tmp_path):
    """The smoke preset, trained for real on three seeds, each as a user runs it (a fresh process:
    modules other tests imported, Unsloth's patches among them, change where a chaotic tiny run
    lands): the mean reward of the last five steps beats the first five. Measured rises: 0.30 / 0.26 /
    0.27 on the development machine, 0.25 / 0.10 / 0.08 on another of the same kind (docs/tools.md),
    so the claim is a mean rise of at least 0.07 (half the lower machine's mean, 0.14) and every seed
    rising; a floor of 0.2 on each seed failed there (docs/development.md)."""
    import json
    import subprocess
    import sys

    rises = {}
    for seed in (0, 1, 2):
        out = tmp_path / f"seed{seed}"
        proc = subprocess.run([sys.executable, "-m", "unsloth_grpo.recipes.gsm8k_tools", "--preset", "smoke",
                               "--output-dir", str(out), f"seed={seed}", "model.backend=transformers",
                               "run.samples_every=0"], capture_output=True, text=True, timeout=1200)
        assert proc.returncode == 0, proc.stderr[-3000:]
        rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines() if line.strip()]
        rewards = [r["reward"] for r in rows if "reward" in r]
        rises[seed] = sum(rewards[-5:]) / 5 - sum(rewards[:5]) / 5
        assert any(r.get("tools/call_frequency", 0) > 0 for r in rows)  # the tool loop ran
    assert sum(rises.values()) / 3 >= 0.07 and min(rises.values()) > 0, rises


@pytest.mark.slow
def test_guess_number_smoke_preset_learns_to_call_the_game(tmp_path, capsys):
    """The guess_number smoke preset, seeds 0-2: the reward rises (the old preset's only reward,
    guess_solved, was 0 for every completion of a random model, so it learned nothing). Measured
    in fresh processes (docs/tools.md): rises 0.242, 0.238, 0.298, mean 0.259. Asserted: a mean of
    at least 0.12 and every seed rising, with the game's tool loop running."""
    import json

    from unsloth_grpo.recipes.guess_number import main

    rises = {}
    for seed in (0, 1, 2):
        out = tmp_path / f"seed{seed}"
        assert main(["--preset", "smoke", "--output-dir", str(out), f"seed={seed}", "run.samples_every=0"]) == 0
        rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines() if line.strip()]
        rewards = [r["reward"] for r in rows if "reward" in r]
        rises[seed] = sum(rewards[-5:]) / 5 - sum(rewards[:5]) / 5
        assert all("rewards/guess_solved/mean" in r for r in rows if "reward" in r)  # still scored and logged
        assert any(r.get("tools/call_frequency", 0) > 0 for r in rows)  # the environment's tool ran
    with capsys.disabled():
        print(f"\nguess_number smoke preset, rise of the mean reward (first 5 -> last 5 steps) by seed: {rises}")
    assert sum(rises.values()) / 3 >= 0.12 and min(rises.values()) > 0, rises


class ScriptedModel:
    """Stands in for a model in evaluation: writes a calculator call when tools are offered, then
    the answer the tool gave; without tools it answers wrongly."""

    def __init__(self, tokenizer):
        import torch

        self.tok = tokenizer
        self.param = torch.nn.Parameter(torch.zeros(1))
        self.generation_config = type("G", (), {"eos_token_id": [tokenizer.eos_token_id,
                                                                 tokenizer.convert_tokens_to_ids("</tool_call>")]})()

    training = False

    def parameters(self):
        return iter([self.param])

    def eval(self):
        return self

    def train(self, mode=True):
        return self

    def generate(self, input_ids, attention_mask=None, max_new_tokens=16, **kwargs):
        import torch

        rows = []
        for ids in input_ids.tolist():
            prompt = self.tok.decode(ids)
            if "<|im_start|>tool\n" in prompt:
                result = prompt.rsplit("<|im_start|>tool\n", 1)[1].split("<|im_end|>")[0]
                text = f"<answer>{result}</answer><|im_end|>"
            elif "Tools:" in prompt:
                text = "<tool_call>calculate\nexpression=37*91\n</tool_call>"
            else:
                text = "<answer>1</answer><|im_end|>"
            rows.append(ids + self.tok(text, add_special_tokens=False)["input_ids"])
        width = max(len(r) for r in rows)
        return torch.tensor([r + [self.tok.pad_token_id] * (width - len(r)) for r in rows])


def test_evaluation_reports_accuracy_with_and_without_tools_and_calls_per_problem(tmp_path):
    import datasets
    from transformers import AutoTokenizer

    from unsloth_grpo.config import ToolsConfig
    from unsloth_grpo.evaluation.tool_eval import evaluate_with_tools
    from unsloth_grpo.recipes.gsm8k_tools import RECIPE
    from unsloth_grpo.tasks.gsm8k_tools import SYSTEM_PROMPT, TASK
    from unsloth_grpo.models.builtin import build_tokenizer

    build_tokenizer(tmp_path, tool_calling=True)
    tok = AutoTokenizer.from_pretrained(tmp_path)
    prompt = [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": "37 * 91?"}]
    dataset = datasets.Dataset.from_list([{"prompt": prompt, "answer": "3367"}, {"prompt": prompt, "answer": "1"}])
    result = evaluate_with_tools(ScriptedModel(tok), tok, dataset, tools_cfg=ToolsConfig(functions=["calculate"]),
                                 is_correct=TASK.grader(RECIPE.resolve()), lenient_correct=TASK.lenient(RECIPE.resolve()),
                                 max_new_tokens=24,
                                 batch_size=2)
    assert result["accuracy"] == 0.5 and result["accuracy_without_tools"] == 0.5  # 3367 via the tool; "1" without
    assert result["lenient_accuracy"] == 0.5 and [r["lenient_correct"] for r in result["records"]] == [True, False]
    assert result["calls_per_problem"] == 1.0 and result["tool_use_share"] == 1.0 and result["tool_error_share"] == 0
    first = result["records"][0]
    assert first["correct"] and not first["correct_without_tools"]
    assert "[tool calculate] 3367" in first["completion"] and "[assistant] <answer>3367</answer>" in first["completion"]


@pytest.mark.slow
def test_guess_number_smoke_preset_runs_a_few_steps(tmp_path):
    """The environment recipe end to end with the real tiny model (no script): it trains and logs tool use."""
    from unsloth_grpo.recipes import guess_number

    out = tmp_path / "guess"
    assert guess_number.main(["--preset", "smoke", "--output-dir", str(out), "training.max_steps=3",
                              "model.backend=transformers"]) == 0
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert len(rows) == 3 and all("tools/call_frequency" in r and "rewards/guess_solved/mean" in r for r in rows)
