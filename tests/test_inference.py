"""generate: the run's system prompt, the chat template, answer extraction, every kind of model path."""

from __future__ import annotations

import argparse
import json

import pytest

from unsloth_grpo.cli import generate as generate_cli
from unsloth_grpo.evaluation import inference as inf
from unsloth_grpo.tasks.gsm8k import SYSTEM_PROMPT


def test_system_prompt_resolution(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    # no run config: the task's default, gsm8k unless named
    assert inf.resolve_system_prompt(str(run)) == SYSTEM_PROMPT
    assert inf.resolve_system_prompt("builtin:tiny") == SYSTEM_PROMPT
    assert inf.resolve_system_prompt(str(run), system_prompt="Be brief.") == "Be brief."
    assert inf.resolve_system_prompt(str(run), system_prompt="") is None
    with pytest.raises(ValueError, match="not a task of this package; choose one of: .*gsm8k"):
        inf.resolve_system_prompt(str(run), task="nope")
    # the run's own prompt, also seen from a checkpoint inside it and from an export's bundle
    (run / "config.yaml").write_text("task: gsm8k\ndata:\n  system_prompt: Answer in <answer> tags.\n")
    assert inf.resolve_system_prompt(str(run)) == "Answer in <answer> tags."
    ckpt = run / "checkpoints" / "checkpoint-5"
    ckpt.mkdir(parents=True)
    assert inf.resolve_system_prompt(str(ckpt)) == "Answer in <answer> tags."
    export = tmp_path / "export"
    export.mkdir()
    (export / "reproducibility.json").write_text(json.dumps({"config": {"task": "gsm8k",
                                                                        "data": {"system_prompt": "From bundle."}}}))
    assert inf.resolve_system_prompt(str(export)) == "From bundle."


def test_prompt_uses_the_chat_template_and_the_system_prompt(tiny_model_dir):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    msgs = inf.build_prompt("What is 15 + 27?", "SYS")
    text = tok.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)
    assert text == ("<|im_start|>system\nSYS<|im_end|>\n<|im_start|>user\nWhat is 15 + 27?<|im_end|>\n"
                    "<|im_start|>assistant\n")


class _Loaded:
    def __init__(self, model, tokenizer):
        self.model, self.tokenizer = model, tokenizer


def test_answers_are_extracted_from_completions(tiny_model_dir, monkeypatch):
    """A model that always writes the same completion: the extraction is what is under test."""
    from transformers import AutoTokenizer

    from unsloth_grpo.evaluation import generation

    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    seen = {}

    def fake(model, tokenizer, prompts, **kw):
        seen["prompts"] = prompts
        return [[generation.Generation("<reasoning>15+27</reasoning><answer>42</answer>", 9, True)],
                [generation.Generation("no tags here, 41", 5, False)]]

    monkeypatch.setattr(generation, "generate_detailed", fake)
    out = inf.answer_questions("builtin:tiny", ["What is 15 + 27?", "And 20 + 21?"], loaded=_Loaded(None, tok))
    assert [a.answer for a in out] == ["42", None]
    assert out[0].finished and not out[1].finished
    assert seen["prompts"][0] == [{"role": "system", "content": SYSTEM_PROMPT},
                                  {"role": "user", "content": "What is 15 + 27?"}]
    with pytest.raises(ValueError, match="no question"):
        inf.answer_questions("builtin:tiny", [], loaded=_Loaded(None, tok))


def _cli(argv):
    parser = argparse.ArgumentParser()
    generate_cli.add_parser(parser.add_subparsers())
    args = parser.parse_args(argv)
    return args.func(args)


def test_generate_on_base_merged_and_adapter_agree(tiny_model_dir, tmp_path, capsys):
    """Greedy output of an adapter and of its merged export is the same text."""
    from test_export import _adapter

    from unsloth_grpo.export import export_model

    adapter = _adapter(tiny_model_dir, tmp_path / "adapter")
    export_model(adapter, tmp_path / "merged", log=lambda _m: None)
    outs = {}
    for name, path in (("base", tiny_model_dir), ("adapter", adapter), ("merged", tmp_path / "merged")):
        assert _cli(["generate", "--model", str(path), "--json", "--max-new-tokens", "8", "What is 15 + 27?"]) == 0
        outs[name] = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert outs["adapter"]["completion"] == outs["merged"]["completion"]
    assert outs["adapter"]["num_tokens"] == outs["merged"]["num_tokens"]
    assert outs["base"]["question"] == "What is 15 + 27?"


def test_missing_model_is_a_clear_error(tmp_path, capsys):
    assert _cli(["generate", "--model", str(tmp_path / "nope"), "hi"]) == 2
    assert "does not exist" in capsys.readouterr().err


@pytest.mark.slow
def test_generate_answers_on_the_smoke_model(smoke_run, capsys):
    from unsloth_grpo.cli import main

    run, _ = smoke_run  # the README's smoke run (tests/conftest.py)
    assert main(["generate", "--model", str(run), "--max-new-tokens", "12", "What is 15 + 27?"]) == 0
    out = capsys.readouterr().out
    assert "Q: What is 15 + 27?" in out and "\nanswer: " in out


def test_one_question_as_a_string_is_one_question_and_other_types_are_named(tiny_model_dir, monkeypatch):
    from transformers import AutoTokenizer

    from unsloth_grpo.evaluation import generation

    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    monkeypatch.setattr(generation, "generate_detailed",
                        lambda model, tokenizer, prompts, **kw: [[generation.Generation("<answer>4</answer>", 3, True)]
                                                                 for _ in prompts])
    (answer,) = inf.answer_questions("builtin:tiny", "What is 2+2?", loaded=_Loaded(None, tok))
    assert (answer.question, answer.answer) == ("What is 2+2?", "4")
    with pytest.raises(TypeError, match=r"questions: expected a list of strings \(or one string\), got a list "
                                        r"holding int \(2\)"):
        inf.answer_questions("builtin:tiny", ["What is 1+1?", 2], loaded=_Loaded(None, tok))
    with pytest.raises(TypeError, match="questions: expected a list of strings .*got int"):
        inf.answer_questions("builtin:tiny", 5, loaded=_Loaded(None, tok))


def test_a_mistyped_run_folder_is_refused_at_once_not_looked_up_on_the_hub(tmp_path, monkeypatch):
    """``answer_questions("run-nope", ...)``: no folder of that name, read as a hub id the hub cannot serve
    (offline here): refused before anything loads, naming the folder (it used to retry the hub for 47 s
    and end in transformers' OSError)."""
    from unsloth_grpo.hardware import backend
    from unsloth_grpo.models.ref import BackendError

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(backend, "load", lambda *a, **k: pytest.fail("a model load was tried"))
    with pytest.raises(BackendError, match="model 'run-nope' is not in the local cache .* offline mode is on.*"
                                           "there is no folder 'run-nope' here"):
        inf.answer_questions("run-nope", ["What is 2+2?"])
