"""Evaluation: exact metrics from a scripted generator, plus real batched generation on the tiny model."""

from __future__ import annotations

import argparse
import itertools
import json
import sys
import types

import pytest

from unsloth_grpo.evaluation.evaluate import (
    compare,
    evaluate,
    pass_at_k,
    pass_ks,
    read_eval,
    report_markdown,
    write_eval,
    write_report,
)

R = "<reasoning>work</reasoning>\n"


def problem(q, gold):
    return {"prompt": [{"role": "system", "content": "fmt"}, {"role": "user", "content": q}], "answer": gold}


DATASET = [problem("q0", "18"), problem("q1", "5"), problem("q2", "7"), problem("q3", "100")]
GOOD, BAD = "<answer>{}</answer>", "<answer>-1</answer>"
# greedy: right + format, right without format, wrong with format, answer outside the tags
GREEDY = {"q0": R + "<answer>18</answer>", "q1": "<answer>5</answer>", "q2": R + "<answer>8</answer>",
          "q3": "The answer is 100"}
CORRECT_SAMPLES = {"q0": 2, "q1": 0, "q2": 4, "q3": 1}


class Scripted:
    """A generator with known outputs that records how it was called."""

    def __init__(self, greedy=GREEDY, correct=CORRECT_SAMPLES):
        self.greedy, self.correct, self.calls = greedy, correct, []

    def __call__(self, prompts, *, num_samples, temperature, top_p, max_new_tokens, batch_size, seed):
        self.calls.append(dict(n=len(prompts), num_samples=num_samples, temperature=temperature, seed=seed,
                               max_new_tokens=max_new_tokens, batch_size=batch_size))
        out = []
        for p in prompts:
            q = p[-1]["content"]
            if temperature == 0:
                out.append([self.greedy[q]])
            else:
                gold = next(d["answer"] for d in DATASET if d["prompt"][-1]["content"] == q)
                c = min(self.correct[q], num_samples)
                out.append([R + GOOD.format(gold)] * c + [R + BAD] * (num_samples - c))
        return out


def test_pass_at_k_matches_brute_force():
    for n, c, k in [(5, 2, 2), (4, 1, 3), (6, 0, 2), (6, 6, 1), (8, 3, 4)]:
        subsets = list(itertools.combinations([True] * c + [False] * (n - c), k))
        assert pass_at_k(n, c, k) == pytest.approx(sum(any(s) for s in subsets) / len(subsets))
    with pytest.raises(ValueError, match="k=5"):
        pass_at_k(4, 1, 5)
    assert pass_ks(1) == [1] and pass_ks(4) == [1, 2, 4] and pass_ks(6) == [1, 2, 4, 6]


def test_scripted_eval_exact_metrics():
    gen = Scripted()
    res = evaluate(None, None, DATASET, samples=4, temperature=0.9, seed=3, max_new_tokens=64, batch_size=8,
                   generate_fn=gen)
    assert res["n"] == 4
    assert res["accuracy"] == 0.5  # q0, q1 (no tag fallback: q3's "The answer is 100" does not count)
    # lenient: q3's right answer out of format counts too (the last number anywhere)
    assert res["lenient_accuracy"] == 0.75
    assert res["format_compliance"] == 0.5  # q0, q2
    assert res["pass@1"] == pytest.approx((2 / 4 + 0 + 1 + 1 / 4) / 4)
    assert res["pass@2"] == pytest.approx((5 / 6 + 0 + 1 + 1 / 2) / 4)
    assert res["pass@4"] == 0.75
    assert res["mean_completion_chars"] == sum(len(t) for t in GREEDY.values()) / 4
    assert res["mean_completion_tokens"] is None and res["truncated_ratio"] is None  # no tokenizer, plain strings
    assert [r["correct"] for r in res["records"]] == [True, True, False, False]
    assert [r["lenient_correct"] for r in res["records"]] == [True, True, False, True]
    assert [sum(r["samples_correct"]) for r in res["records"]] == [2, 0, 4, 1]
    assert gen.calls == [
        dict(n=4, num_samples=1, temperature=0.0, seed=3, max_new_tokens=64, batch_size=8),
        dict(n=4, num_samples=4, temperature=0.9, seed=3, max_new_tokens=64, batch_size=8),
    ]


def test_single_sample_eval_has_no_pass_at_k_and_honours_limit():
    gen = Scripted()
    res = evaluate(None, None, DATASET, limit=2, generate_fn=gen)
    assert res["n"] == 2 and res["accuracy"] == 1.0 and res["format_compliance"] == 0.5
    assert not [k for k in res if k.startswith("pass@")]
    assert len(gen.calls) == 1


def test_right_answer_out_of_format_counts_as_lenient_not_strict():
    """The issue's case: the model says the right number but not where the format puts it."""
    rows = [problem("q0", "18"), problem("q1", "5")]
    outs = {"q0": "Ann has 3 + 15 = 18 apples.", "q1": R + "<answer>5</answer>"}
    gen = lambda prompts, **kw: [[outs[p[-1]["content"]]] for p in prompts]  # noqa: E731
    res = evaluate(None, None, rows, generate_fn=gen)
    assert (res["accuracy"], res["lenient_accuracy"], res["format_compliance"]) == (0.5, 1.0, 0.5)
    assert [(r["correct"], r["lenient_correct"]) for r in res["records"]] == [(False, True), (True, True)]
    # a task with its own grader and no lenient reading (countdown, code, JSON) reports none
    res = evaluate(None, None, rows, generate_fn=gen, is_correct=lambda c, g: g in c)
    assert res["lenient_accuracy"] is None and res["records"][0]["lenient_correct"] is None
    assert "lenient_accuracy" not in {row["metric"] for row in compare(res, res)["metrics"]}
    # lenient never counts less than strict: a strict verdict the last number would miss stays right
    res = evaluate(None, None, [problem("q0", "18000")], generate_fn=lambda p, **kw: [["<answer>18 thousand</answer>"]])
    assert res["accuracy"] == res["lenient_accuracy"] == 1.0


def test_eval_checks_its_inputs():
    with pytest.raises(ValueError, match="samples=3 needs temperature > 0"):
        evaluate(None, None, DATASET, samples=3, temperature=0.0, generate_fn=Scripted())
    with pytest.raises(ValueError, match="missing answer"):
        evaluate(None, None, [{"prompt": "x"}], generate_fn=Scripted())
    with pytest.raises(ValueError, match="wrong shape"):
        evaluate(None, None, DATASET, generate_fn=lambda prompts, **kw: [["x"]])


def test_write_eval_accuracy_equals_share_of_correct_samples(tmp_path):
    res = evaluate(None, None, DATASET, samples=2, generate_fn=Scripted())
    write_eval(res, tmp_path, model="m", dataset="d")
    summary = json.loads((tmp_path / "eval.json").read_text())
    rows = [json.loads(x) for x in (tmp_path / "eval_samples.jsonl").read_text().splitlines()]
    assert summary["model"] == "m" and "records" not in summary
    assert summary["accuracy"] == sum(r["correct"] for r in rows) / len(rows)
    assert {"prompt", "completion", "gold", "correct"} <= set(rows[0])
    assert read_eval(tmp_path)["records"] == res["records"]


def test_compare_lists_flips_both_ways(tmp_path):
    base = evaluate(None, None, DATASET, generate_fn=Scripted())
    better = dict(GREEDY, q1=R + "<answer>4</answer>", q2=R + "<answer>7</answer>", q3=R + "<answer>100</answer>")
    trained = evaluate(None, None, DATASET, generate_fn=Scripted(greedy=better))
    base["model"], trained["model"] = "base", "trained"
    report = compare(base, trained)
    assert [(f["index"], f["question"], f["gold"]) for f in report["fixed"]] == [(2, "q2", "7"), (3, "q3", "100")]
    assert [(b["index"], b["gold"]) for b in report["broken"]] == [(1, "5")]
    table = {row["metric"]: row for row in report["metrics"]}
    assert table["accuracy"]["baseline"] == 0.5 and table["accuracy"]["trained"] == 0.75
    assert table["accuracy"]["diff"] == 0.25 and table["format_compliance"]["diff"] == 0.5
    # strict rose, lenient did not: the trained model only moved q3's right answer into the tags
    assert (table["lenient_accuracy"]["baseline"], table["lenient_accuracy"]["trained"]) == (0.75, 0.75)
    md = report_markdown(report)
    assert "| accuracy (strict) | 0.500 | 0.750 | +0.250 |" in md
    assert "| accuracy (lenient) | 0.750 | 0.750 | +0.000 |" in md
    assert "Lenient accuracy 95% interval" in md and "never a reward" in md
    # each side's accuracy carries its 95% Wilson interval (2 of 4 right: 0.150..0.850)
    assert base["accuracy_ci95"] == pytest.approx([0.1500, 0.8500], abs=1e-4)
    assert report["accuracy_ci95"]["trained"] == trained["accuracy_ci95"]
    assert "baseline 0.150..0.850, trained 0.301..0.954" in md
    assert "## Fixed (baseline wrong, trained right; strict): 2" in md
    assert "## Broken (baseline right, trained wrong; strict): 1" in md
    md_path, json_path = write_report(report, tmp_path)
    assert json.loads(json_path.read_text())["fixed"][0]["trained_completion"] == R + "<answer>7</answer>"
    with pytest.raises(ValueError, match="different problems"):
        compare(base, evaluate(None, None, DATASET, limit=3, generate_fn=Scripted()))


# ------------------------------------------------------------------ real generation (tiny model)

@pytest.fixture(scope="module")
def tiny(tiny_model_dir):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = tiny_model_dir
    return path, AutoModelForCausalLM.from_pretrained(path), AutoTokenizer.from_pretrained(path)


@pytest.mark.slow  # a model, a subprocess or matplotlib: the integration tier
def test_batched_generation_equals_one_at_a_time(tiny):
    from unsloth_grpo.evaluation.generation import generate_detailed, render_prompts
    from unsloth_grpo.tasks.gsm8k import load_gsm8k

    _, model, tok = tiny
    prompts = list(load_gsm8k("synthetic", split="test", limit=12)["prompt"])
    batched = generate_detailed(model, tok, prompts, max_new_tokens=16, batch_size=8)
    single = [generate_detailed(model, tok, [p], max_new_tokens=16, batch_size=1)[0] for p in prompts]
    assert batched == single
    assert all(len(g) == 1 and 0 <= g[0].num_tokens <= 16 for g in batched)
    assert all(g[0].finished == (g[0].num_tokens < 16) or g[0].num_tokens == 16 for g in batched)
    assert render_prompts(tok, prompts[:1])[0].endswith("<|im_start|>assistant\n")
    # the chat template is applied: a message list and its rendered text give the same completion
    text = render_prompts(tok, prompts[:1])
    assert generate_detailed(model, tok, text, max_new_tokens=16)[0] == batched[0]


def test_sampling_is_seeded_and_shaped(tiny):
    from unsloth_grpo.evaluation.generation import generate

    _, model, tok = tiny
    prompts = ["Ann has 3 apples.", "Bob has 5 pens."]
    a = generate(model, tok, prompts, max_new_tokens=10, num_samples=3, temperature=1.0, seed=7, batch_size=6)
    b = generate(model, tok, prompts, max_new_tokens=10, num_samples=3, temperature=1.0, seed=7, batch_size=6)
    assert a == b and [len(x) for x in a] == [3, 3]
    assert len({s for x in a for s in x}) > 1
    with pytest.raises(ValueError, match="temperature > 0"):
        generate(model, tok, prompts, max_new_tokens=4, num_samples=2)


def test_seeded_generation_leaves_the_callers_random_state_alone(tiny):
    """Periodic evaluation runs inside training: reseeding the global RNG there would change
    every completion the run samples afterwards."""
    import torch

    from unsloth_grpo.evaluation.generation import generate

    _, model, tok = tiny
    torch.manual_seed(123)
    expected = torch.rand(4)
    torch.manual_seed(123)
    generate(model, tok, ["Ann has 3 apples."], max_new_tokens=6, num_samples=2, temperature=1.0, seed=7)
    generate(model, tok, ["Ann has 3 apples."], max_new_tokens=6)  # greedy, unseeded
    assert torch.equal(torch.rand(4), expected)


def test_vllm_fast_path_is_used_when_the_model_has_an_engine(monkeypatch):
    from unsloth_grpo.evaluation.generation import generate_detailed

    class SamplingParams:
        def __init__(self, **kw):
            self.kw = kw

    monkeypatch.setitem(sys.modules, "vllm", types.SimpleNamespace(SamplingParams=SamplingParams))
    seen = {}

    class FakeModel:
        vllm_engine = object()

        def fast_generate(self, texts, sampling_params, use_tqdm, lora_request=None):
            seen.update(texts=texts, params=sampling_params.kw, lora=lora_request)
            out = lambda t, n, r: types.SimpleNamespace(text=t, token_ids=[0] * n, finish_reason=r)  # noqa: E731
            return [types.SimpleNamespace(outputs=[out(f"{t}!", 3, "stop"), out("x", 5, "length")]) for t in texts]

    res = generate_detailed(FakeModel(), None, ["a", "b"], max_new_tokens=5, num_samples=2, temperature=0.5,
                            seed=1, lora_request="LORA")
    assert seen == {"texts": ["a", "b"], "lora": "LORA",
                    "params": dict(n=2, temperature=0.5, top_p=1.0, max_tokens=5, seed=1)}
    assert [tuple(g) for g in res[1]] == [("b!", 3, True), ("x", 5, False)]

    class FakePeftModel(FakeModel):
        peft_config = {"default": None}

        def load_lora(self, name, load_tensors=False):
            return ("live", name, load_tensors)

    generate_detailed(FakePeftModel(), None, ["a"], max_new_tokens=5)  # the adapter's live weights
    assert seen["lora"] == ("live", "unsloth_grpo_eval_lora", True)
    assert seen["params"]["temperature"] == 0.0 and seen["params"]["n"] == 1


def _gsm8k_file(path, n=16):
    from unsloth_grpo.tasks.gsm8k import make_synthetic_problems

    path.write_text("".join(json.dumps(p) + "\n" for p in make_synthetic_problems(n, seed=5)))
    return path


def _cli(argv):
    from unsloth_grpo.cli.evaluate import add_parser

    parser = argparse.ArgumentParser()
    add_parser(parser.add_subparsers())
    args = parser.parse_args(argv)
    return args.func(args)


@pytest.mark.slow  # a model, a subprocess or matplotlib: the integration tier
def test_eval_and_compare_cli_on_the_tiny_model_and_an_adapter(tiny, tmp_path):
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    path, _, tok = tiny
    data = _gsm8k_file(tmp_path / "gsm8k_test.jsonl")
    out = tmp_path / "eval"
    common = ["--dataset", str(data), "--limit", "16", "--max-new-tokens", "12", "--batch-size", "16"]
    assert _cli(["eval", "--model", path, "--samples", "2", "--output", str(out), *common]) == 0
    summary = json.loads((out / "eval.json").read_text())
    rows = [json.loads(x) for x in (out / "eval_samples.jsonl").read_text().splitlines()]
    assert summary["n"] == len(rows) == 16
    assert summary["accuracy"] == sum(r["correct"] for r in rows) / 16
    assert summary["format_compliance"] == sum(r["format_ok"] for r in rows) / 16
    assert summary["lenient_accuracy"] == sum(r["lenient_correct"] for r in rows) / 16 >= summary["accuracy"]
    assert 0 < summary["mean_completion_tokens"] <= 12 and "pass@2" in summary
    assert summary["model"] == path and summary["dataset"] == str(data)

    # an adapter with non-zero LoRA weights, so its completions differ from the base model's
    torch.manual_seed(0)
    peft_model = get_peft_model(AutoModelForCausalLM.from_pretrained(path),
                                LoraConfig(r=4, target_modules=["q_proj", "v_proj"], init_lora_weights=False))
    adapter = tmp_path / "adapter"
    peft_model.save_pretrained(adapter)
    tok.save_pretrained(adapter)
    cmp_dir = tmp_path / "cmp"
    assert _cli(["compare", path, str(adapter), "--output", str(cmp_dir), *common]) == 0
    report = json.loads((cmp_dir / "report.json").read_text())
    base_rows = [json.loads(x) for x in (cmp_dir / "baseline" / "eval_samples.jsonl").read_text().splitlines()]
    trained_rows = [json.loads(x) for x in (cmp_dir / "trained" / "eval_samples.jsonl").read_text().splitlines()]
    assert [r["completion"] for r in base_rows] == [r["completion"] for r in rows]  # same problems, same greedy
    assert [r["completion"] for r in trained_rows] != [r["completion"] for r in rows]
    assert [f["index"] for f in report["fixed"]] == [
        i for i, (b, t) in enumerate(zip(base_rows, trained_rows)) if t["correct"] and not b["correct"]]
    assert (cmp_dir / "report.md").read_text().startswith("# Before / after")
    assert [m["metric"] for m in report["metrics"]][:2] == ["accuracy", "lenient_accuracy"]


def test_eval_cli_reports_bad_inputs(tmp_path, capsys):
    data = _gsm8k_file(tmp_path / "d.jsonl", n=2)
    assert _cli(["eval", "--model", str(tmp_path / "no_such_model"), "--dataset", str(data),
                 "--output", str(tmp_path / "o")]) == 2
    assert "no_such_model" in capsys.readouterr().err
    assert _cli(["eval", "--model", "x", "--dataset", str(tmp_path / "missing.jsonl"),
                 "--output", str(tmp_path / "o")]) == 2
    assert "missing.jsonl" in capsys.readouterr().err


def test_eval_reports_its_progress(tiny, tmp_path, capsys):
    import io

    from unsloth_grpo.cli.evaluate import console_progress
    from unsloth_grpo.tasks.gsm8k import load_gsm8k

    path, model, tok = tiny
    rows = load_gsm8k("synthetic", split="test", limit=6)
    calls = []
    evaluate(model, tok, rows, samples=2, max_new_tokens=4, batch_size=4, progress=lambda *a: calls.append(a))
    assert calls[0] == ("greedy", 4, 6) and calls[-1] == ("sampled", 12, 12)
    assert ("greedy", 6, 6) in calls

    out = io.StringIO()
    report = console_progress("eval m", every_s=3600, file=out)
    for done in (4, 8, 12):
        report("sampled", done, 12)
    assert out.getvalue().splitlines() == ["eval m: sampled 4/12 completions", "eval m: sampled 12/12 completions"]

    data = _gsm8k_file(tmp_path / "gsm8k_test.jsonl")
    capsys.readouterr()
    assert _cli(["eval", "--model", path, "--dataset", str(data), "--limit", "4", "--max-new-tokens", "4",
                 "--output", str(tmp_path / "eval")]) == 0
    assert f"eval {path}: greedy 4/4 completions" in capsys.readouterr().err


@pytest.mark.slow
def test_periodic_and_before_after_evaluation_do_not_change_the_training_run(tmp_path):
    """Evaluation samples with its own seed; the training run must sample the same completions
    (same rewards, lengths, losses) whether or not it evaluates along the way."""
    from unsloth_grpo.recipes.gsm8k import RECIPE
    from unsloth_grpo.training.train import train

    def run(name, *extra):
        cfg = RECIPE.resolve(preset="smoke", output_dir=str(tmp_path / name), overrides=[
            "model.backend=transformers", "training.max_steps=6", "run.samples_every=0",
            "data.num_synthetic=32", *extra])
        return [m for m in train(cfg, log=lambda _m: None).metrics if "reward" in m]

    plain = run("plain")
    evaluated = run("evaluated", "evaluation.every=2", "evaluation.before_after=true", "evaluation.samples=2",
                    "evaluation.limit=4", "evaluation.max_new_tokens=6")
    assert "| accuracy (lenient) |" in (tmp_path / "evaluated" / "report.md").read_text()  # before/after
    logged = [json.loads(x) for x in (tmp_path / "evaluated" / "metrics.jsonl").read_text().splitlines()]
    assert any("eval/lenient_accuracy" in m for m in logged)  # periodic
    assert [m["step"] for m in plain] == [m["step"] for m in evaluated] == list(range(1, 7))
    for a, b in zip(plain, evaluated):
        for key in ("reward", "completions/mean_length", "loss", "grad_norm", "entropy"):
            assert b[key] == pytest.approx(a[key], rel=1e-6, abs=1e-7), (a["step"], key)


def test_a_before_after_change_is_judged_by_the_problems_that_flipped():
    from unsloth_grpo.evaluation.evaluate import change_in_words, sign_test

    assert sign_test(0, 0) == 1.0 and sign_test(3, 3) == 1.0
    assert sign_test(1, 4) == pytest.approx(0.375)  # the arith smoke's 0.09 -> 0.06 on seed 0
    assert sign_test(10, 0) == pytest.approx(2 / 1024)
    assert sign_test(0, 10) == sign_test(10, 0)
    report = {"fixed": [{}] * 9, "broken": [{}] * 1}
    assert change_in_words(report) == "9 fixed, 1 broken: more than chance flips (sign test p=0.021)"
    assert change_in_words({"fixed": [{}], "broken": [{}] * 4}) == \
        "1 fixed, 4 broken: within noise (sign test p=0.38)"


def test_tasks_with_one_numeric_answer_have_a_lenient_reading_and_the_others_none():
    import importlib

    from unsloth_grpo.tasks import available_tasks, get_task

    def grader(task, *overrides):
        cfg = importlib.import_module(f"unsloth_grpo.recipes.{task}").RECIPE.resolve(output_dir="unused",
                                                                                   overrides=list(overrides))
        return get_task(task).lenient(cfg)

    have = {t for t in available_tasks() if grader(t) is not None}
    assert have == {"arith", "gsm8k", "gsm8k_tools"}  # custom's default mode is exact text
    out_of_format = "so the total is 18"
    for task in have:
        assert grader(task)(out_of_format, "18") and not grader(task)(out_of_format, "17")
    numeric = 'rewards=[{name: qa_correctness, params: {mode: numeric}}]'
    assert grader("custom", numeric)(out_of_format, "18")
    # a tool transcript is read on the model's last turn, not on the tool's result
    transcript = [{"role": "assistant", "content": "let me add"}, {"role": "tool", "content": "18"},
                  {"role": "assistant", "content": "it is 17"}]
    assert not grader("gsm8k_tools")(transcript, "18")


def test_report_and_model_card_show_strict_and_lenient_accuracy(tmp_path):
    """The before/after report (report.md, report.json) and the model card read from it both show
    strict and lenient accuracy, and say what each measures."""
    from unsloth_grpo.export.card import model_card

    base = evaluate(None, None, DATASET, generate_fn=Scripted())
    trained = evaluate(None, None, DATASET, generate_fn=Scripted(greedy=dict(GREEDY, q3=R + "<answer>100</answer>")))
    md_path, _ = write_report(compare(base, trained), tmp_path)
    (tmp_path / "config.yaml").write_text("task: gsm8k\nmodel: {name: 'builtin:tiny'}\n")
    for text in (md_path.read_text(), model_card(tmp_path)):
        assert "| accuracy (strict) | 0.500 | 0.750 | +0.250 |" in text
        assert "| accuracy (lenient) | 0.750 | 0.750 | +0.000 |" in text
        assert "a gain in strict accuracy alone is a gain in format" in text.lower()


# ---------------------------------------------------------------- a run is graded as it was trained


def _fake_run(tmp_path, base_path, tok, *, system_prompt="Answer like a pirate. <answer>N</answer>", subset="easy",
              completion_limit=7, overrides=()):
    """A run directory as training leaves it (config.yaml and an adapter with its tokenizer), without training."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    from unsloth_grpo.config import dump_config
    from unsloth_grpo.recipes.gsm8k import RECIPE

    run = tmp_path / "run"
    cfg = RECIPE.resolve(preset="smoke", output_dir=str(run),
                         overrides=[f"model.name={base_path}", "data.source=synthetic", f"data.subset={subset}",
                                    f"training.max_completion_length={completion_limit}", "seed=3",
                                    {"data": {"system_prompt": system_prompt}}, *overrides])
    torch.manual_seed(0)
    peft_model = get_peft_model(AutoModelForCausalLM.from_pretrained(base_path),
                                LoraConfig(r=4, target_modules=["q_proj", "v_proj"], init_lora_weights=False))
    peft_model.save_pretrained(run)
    tok.save_pretrained(run)
    dump_config(cfg, run / "config.yaml")
    return run, cfg


@pytest.mark.slow  # a model: the integration tier
def test_eval_of_a_run_uses_its_prompt_problem_set_and_completion_limit(tiny, tmp_path, capsys):
    from unsloth_grpo.tasks.gsm8k import load_gsm8k

    path, _, tok = tiny
    run, cfg = _fake_run(tmp_path, path, tok)
    out = tmp_path / "eval"
    assert _cli(["eval", "--model", str(run), "--limit", "8", "--output", str(out)]) == 0
    rows = [json.loads(x) for x in (out / "eval_samples.jsonl").read_text().splitlines()]
    summary = json.loads((out / "eval.json").read_text())
    expected = load_gsm8k("synthetic", "test", subset="easy", system_prompt=cfg.data.system_prompt, num_synthetic=512,
                          seed=3, limit=8)
    assert [r["prompt"] for r in rows] == list(expected["prompt"])  # the run's prompt, subset and seed
    assert rows[0]["prompt"][0]["content"] == "Answer like a pirate. <answer>N</answer>"
    assert summary["settings"]["max_new_tokens"] == 7 and max(r["completion_tokens"] for r in rows) <= 7
    assert set(summary["by_category"]) == {"addition", "subtraction"}  # the easy set's operations
    assert "grading as the run was trained" in capsys.readouterr().err

    # a file of the user's own: still the run's prompt; flags override the run one by one
    data = _gsm8k_file(tmp_path / "mine.jsonl", n=4)
    out2 = tmp_path / "eval2"
    assert _cli(["eval", "--model", str(run), "--dataset", str(data), "--system-prompt", "Be brief.",
                 "--max-new-tokens", "3", "--output", str(out2)]) == 0
    rows = [json.loads(x) for x in (out2 / "eval_samples.jsonl").read_text().splitlines()]
    assert len(rows) == 4 and all(r["prompt"][0]["content"] == "Be brief." for r in rows)
    assert json.loads((out2 / "eval.json").read_text())["settings"]["max_new_tokens"] == 3
    out3 = tmp_path / "eval3"
    assert _cli(["eval", "--model", str(run), "--dataset", str(data), "--output", str(out3)]) == 0
    rows = [json.loads(x) for x in (out3 / "eval_samples.jsonl").read_text().splitlines()]
    assert all(r["prompt"][0]["content"] == cfg.data.system_prompt for r in rows)


@pytest.mark.slow  # a model: the integration tier
def test_compare_grades_the_base_model_with_the_trained_runs_prompt(tiny, tmp_path):
    path, _, tok = tiny
    run, cfg = _fake_run(tmp_path, path, tok, subset="reworded")
    out = tmp_path / "cmp"
    assert _cli(["compare", path, str(run), "--limit", "6", "--output", str(out)]) == 0
    for role in ("baseline", "trained"):
        rows = [json.loads(x) for x in (out / role / "eval_samples.jsonl").read_text().splitlines()]
        assert all(r["prompt"][0]["content"] == cfg.data.system_prompt for r in rows)
    report = json.loads((out / "report.json").read_text())
    assert [row["category"] for row in report["by_category"]] == ["addition", "subtraction"]


def _run_config_only(tmp_path, *overrides):
    """A run directory holding the config.yaml of a smoke run and an adapter's config, no weights: enough
    for what eval refuses before it loads the model."""
    from unsloth_grpo.config import dump_config
    from unsloth_grpo.recipes.gsm8k import RECIPE

    run = tmp_path / "run"
    run.mkdir()
    (run / "adapter_config.json").write_text("{}")
    cfg = RECIPE.resolve(preset="smoke", output_dir=str(run), overrides=list(overrides))
    dump_config(cfg, run / "config.yaml")
    return run


def test_eval_of_a_run_trained_on_a_local_file_refuses_to_call_its_training_rows_held_out(
        tmp_path, capsys, monkeypatch):
    # `eval --model RUN` read the run's training file at split 'test' (a local file has no splits), graded
    # the training rows and wrote "split": "test"
    from cli_replay import no_model_loads

    no_model_loads(monkeypatch)
    train_file = _gsm8k_file(tmp_path / "train.jsonl", n=12)
    run = _run_config_only(tmp_path, f"data.source={train_file}")
    out = tmp_path / "eval"
    assert _cli(["eval", "--model", str(run), "--output", str(out)]) == 2
    err = capsys.readouterr().err
    assert f"{run} trained on {train_file}, one local file with no held-out split: split 'test' of it is every row " \
           "the run trained on, not held-out problems" in err
    assert "--dataset HELD_OUT_FILE" in err and "--split train" in err
    assert "Traceback" not in err and not out.exists()


@pytest.mark.slow  # a model: the integration tier
def test_a_local_file_is_graded_whole_and_never_called_a_test_split(tiny, tmp_path, capsys):
    path, _, tok = tiny
    train_file = _gsm8k_file(tmp_path / "train.jsonl", n=6)
    held_out = tmp_path / "held_out.jsonl"
    held_out.write_text("".join(json.dumps(r) + "\n" for r in
                                __import__("unsloth_grpo.tasks.gsm8k", fromlist=["x"]).make_synthetic_problems(3, seed=9)))
    run, _ = _fake_run(tmp_path, path, tok, overrides=[f"data.source={train_file}", "data.subset=null"])
    common = ["--max-new-tokens", "2", "--batch-size", "8"]
    # asked for by name, the training rows are graded as what they are
    assert _cli(["eval", "--model", str(run), "--split", "train", "--output", str(tmp_path / "e1"), *common]) == 0
    said = json.loads((tmp_path / "e1" / "eval.json").read_text())
    assert (said["split"], said["n"], said["dataset"]) == ("train", 6, str(train_file))
    assert "split train (every row of the file the run trained on)" in capsys.readouterr().err
    # a file of held-out problems: every row of it, with no split named
    assert _cli(["eval", "--model", str(run), "--dataset", str(held_out), "--output", str(tmp_path / "e2"), *common]) == 0
    said = json.loads((tmp_path / "e2" / "eval.json").read_text())
    assert (said["split"], said["n"], said["dataset"]) == (None, 3, str(held_out))


@pytest.mark.slow  # a model: the integration tier
def test_eval_of_a_run_trained_on_some_kinds_grades_every_kind(tiny, tmp_path, capsys):
    # a run trained with data.categories=[addition] was graded on the additions of its held-out set only, and
    # a file without a category column was refused because of the training filter
    path, _, tok = tiny
    run, _ = _fake_run(tmp_path, path, tok, subset="main", overrides=["data.categories=[addition]"])
    common = ["--limit", "12", "--max-new-tokens", "2", "--batch-size", "12"]
    assert _cli(["eval", "--model", str(run), "--output", str(tmp_path / "e1"), *common]) == 0
    said = json.loads((tmp_path / "e1" / "eval.json").read_text())
    assert said["n"] == 12 and set(said["by_category"]) > {"addition"}
    assert "note: the run trained on the kinds addition only (data.categories); every problem is graded" in \
        capsys.readouterr().err
    plain = tmp_path / "plain.jsonl"  # no category column
    plain.write_text("".join(json.dumps({k: v for k, v in json.loads(line).items() if k != "category"}) + "\n"
                             for line in _gsm8k_file(tmp_path / "f.jsonl", n=3).read_text().splitlines()))
    assert _cli(["eval", "--model", str(run), "--dataset", str(plain), "--output", str(tmp_path / "e2"), *common]) == 0
    assert json.loads((tmp_path / "e2" / "eval.json").read_text())["n"] == 3


@pytest.mark.parametrize("stages, said", [
    ([], True),  # the run's own data.categories
    ([{"name": "sft", "kind": "sft", "max_steps": 2}, {"name": "grpo", "max_steps": 2}], True),
    ([{"name": "sft", "kind": "sft", "max_steps": 2},  # a warm-up on additions, then GRPO on every kind
      {"name": "grpo", "max_steps": 2, "data": {"categories": None}}], False),
])
def test_eval_says_when_the_run_trained_on_some_kinds_only(tmp_path, capsys, stages, said):
    from unsloth_grpo.cli.evaluate import _task_setup, add_parser

    run = _run_config_only(tmp_path, "data.categories=[addition]", {"stages": stages})
    parser = argparse.ArgumentParser()
    add_parser(parser.add_subparsers())
    rows, _ = _task_setup(parser.parse_args(["eval", "--model", str(run), "--limit", "12", "--output", "o"]))
    assert set(rows["category"]) > {"addition"}
    assert ("note: the run trained on the kinds addition only" in capsys.readouterr().err) is said


def test_held_out_rows_are_every_kind_of_the_held_out_set_whatever_trains():
    from unsloth_grpo.recipes.gsm8k import RECIPE
    from unsloth_grpo.training.held_out import held_out_rows

    cfg = RECIPE.resolve(preset="smoke", overrides=["data.categories=[addition]", "evaluation.limit=24",
                                                    "evaluation.before_after=true"])
    kinds = set(held_out_rows(cfg)["category"])
    assert "addition" in kinds and kinds - {"addition"}  # the training filter chose what trains, not what is graded


def test_a_local_training_file_needs_held_out_problems_of_their_own(tmp_path, monkeypatch):
    from unsloth_grpo.config import config_to_dict, load_config
    from unsloth_grpo.data import DataError
    from unsloth_grpo.recipes.custom import RECIPE
    from unsloth_grpo.training.checks import config_problems
    from unsloth_grpo.training.held_out import evaluate_held_out, held_out_rows

    train_file, held_file = tmp_path / "qa.csv", tmp_path / "held.csv"
    train_file.write_text("question,answer\n" + "".join(f"What is {i} + 1?,{i + 1}\n" for i in range(12)))
    held_file.write_text("question,answer\nWhat is 40 + 2?,42\nWhat is 7 + 1?,8\n")
    cfg = RECIPE.resolve(preset="smoke", overrides=[f"data.source={train_file}", "evaluation.before_after=true"])
    (said,) = [p for p in config_problems(cfg) if p.startswith("evaluation:")]
    assert said.startswith(f"evaluation: data.source='{train_file}' is one local file, which has no held-out split")
    assert "evaluation.dataset=HELD_OUT_FILE" in said and "evaluation.before_after=false" in said
    with pytest.raises(DataError, match="has no held-out split"):
        held_out_rows(cfg)
    cfg = load_config({"evaluation": {"dataset": str(held_file)}}, base=config_to_dict(cfg))
    assert not [p for p in config_problems(cfg) if p.startswith("evaluation")]
    rows = held_out_rows(cfg)
    assert [m[-1]["content"] for m in rows["prompt"]] == ["What is 40 + 2?", "What is 7 + 1?"]
    missing = load_config({"evaluation": {"dataset": str(tmp_path / "nope.csv")}}, base=config_to_dict(cfg))
    assert f"evaluation.dataset='{tmp_path / 'nope.csv'}' does not exist" in " ".join(config_problems(missing))
    # the result names the held-out file and no split (a local file is graded whole)
    import unsloth_grpo.evaluation.evaluate as ev

    monkeypatch.setattr(ev, "evaluate", lambda *a, **k: {"n": len(rows)})
    monkeypatch.setattr(ev, "write_eval", lambda result, where: None)
    graded = evaluate_held_out(cfg, None, None, rows, tmp_path / "e", name="m")
    assert (graded["dataset"], graded["split"]) == (str(held_file), None)


def test_evaluate_without_a_grader_refuses_another_tasks_rows_rather_than_grading_them_as_gsm8k():
    # countdown's known solutions scored 0.0 graded as GSM8K, and 1.0 with evaluate_task
    from unsloth_grpo.evaluation.evaluate import evaluate_task
    from unsloth_grpo.tasks import get_recipe, get_task

    task, cfg = get_task("countdown"), get_recipe("countdown").resolve(preset="smoke")
    rows = [dict(task.load(cfg)[i]) for i in range(4)]
    solved = {str(r["prompt"]): task.gold_completion(r) for r in rows}
    generate = lambda prompts, **kw: [[solved[str(p)]] for p in prompts]  # noqa: E731
    with pytest.raises(ValueError, match=r"no grader.*evaluate_task\(get_task\(NAME\)"):
        evaluate(None, None, rows, generate_fn=generate)
    assert evaluate_task(task, None, None, rows, cfg, generate_fn=generate)["accuracy"] == 1.0
    # rows whose answers are numbers are still graded by the default grader, as before
    assert evaluate(None, None, DATASET, generate_fn=Scripted())["n"] == len(DATASET)


def test_compare_refuses_two_runs_of_different_tasks(tmp_path, capsys):
    # it graded the gsm8k run as countdown, with countdown's system prompt, and said nothing
    from unsloth_grpo.config import dump_config
    from unsloth_grpo.tasks import get_recipe

    runs = {}
    for task in ("gsm8k", "countdown"):
        runs[task] = tmp_path / task
        runs[task].mkdir()
        dump_config(get_recipe(task).resolve(preset="smoke"), runs[task] / "config.yaml")
    out = tmp_path / "cmp"
    assert _cli(["compare", str(runs["gsm8k"]), str(runs["countdown"]), "--output", str(out)]) == 2
    err = capsys.readouterr().err
    assert "run of the gsm8k task" in err and "run of the countdown task" in err and "--task countdown" in err
    assert "Traceback" not in err and not out.exists()


def test_eval_of_a_model_that_is_no_run_still_needs_a_dataset(tmp_path, capsys):
    assert _cli(["eval", "--model", "builtin:tiny", "--output", str(tmp_path / "o")]) == 2
    assert "--dataset is needed" in capsys.readouterr().err


def test_accuracy_by_category_names_the_category_that_got_worse():
    from unsloth_grpo.evaluation.evaluate import category_warnings, report_markdown

    rows = [{"prompt": f"q{i}", "answer": "5", "category": ("addition", "subtraction")[i % 2]} for i in range(8)]
    before = evaluate(None, None, rows, generate_fn=lambda p, **k: [["<answer>5</answer>"] for _ in p])
    # after: right on additions, wrong (an addition's answer) on every subtraction
    after = evaluate(None, None, rows, generate_fn=lambda p, **k: [
        ["<answer>5</answer>" if int(x[1:]) % 2 == 0 else "<answer>9</answer>"] for x in p])
    assert before["by_category"]["subtraction"]["accuracy"] == 1.0
    assert after["by_category"] == {
        "addition": {"n": 4, "correct": 4, "accuracy": 1.0, "lenient_correct": 4, "lenient_accuracy": 1.0,
                     "format_compliance": 0.0, "copied_quantity": 0},
        "subtraction": {"n": 4, "correct": 0, "accuracy": 0.0, "lenient_correct": 0, "lenient_accuracy": 0.0,
                        "format_compliance": 0.0, "copied_quantity": 0}}
    report = compare(before, after)
    assert [(w["category"], w["metric"]) for w in report["worse_categories"]] == [
        ("subtraction", "accuracy"), ("subtraction", "lenient_accuracy")]
    assert "category 'subtraction' got worse" in category_warnings(report)[0]
    assert "## By category" in report_markdown(report) and "got worse" in report_markdown(report)
    with pytest.raises(ValueError, match="no column 'operation'"):
        evaluate(None, None, rows, by="operation", generate_fn=lambda p, **k: [["x"] for _ in p])


@pytest.mark.parametrize("subset", ["reworded", "everyday"])
def test_eval_subset_grades_a_held_out_phrasing_set_with_the_runs_prompt_and_seed(tmp_path, subset, capsys):
    """``eval --model RUN --subset NAME`` reads the held-out set NAME with the run's system prompt and seed (the
    held-out split's generator seed), never its training problems; no model is loaded to choose the rows."""
    from unsloth_grpo.cli.evaluate import _task_setup, add_parser
    from unsloth_grpo.config import dump_config
    from unsloth_grpo.recipes.gsm8k import RECIPE
    from unsloth_grpo.tasks.gsm8k import load_gsm8k

    run = tmp_path / "run"
    run.mkdir()
    cfg = RECIPE.resolve(preset="smollm2", output_dir=str(run), overrides=["seed=2"])
    dump_config(cfg, run / "config.yaml")
    parser = argparse.ArgumentParser()
    add_parser(parser.add_subparsers())
    with pytest.raises(SystemExit):
        parser.parse_args(["eval", "--help"])
    assert "offline sets (main, easy, varied, reworded, everyday, gsm_symbolic; reworded and everyday are" in " ".join(
        capsys.readouterr().out.split())  # the help names the task's sets, from its table
    args = parser.parse_args(["eval", "--model", str(run), "--subset", subset, "--limit", "6", "--output", "x"])
    rows, _ = _task_setup(args)
    expected = load_gsm8k("synthetic", "test", subset=subset, system_prompt=cfg.data.system_prompt, num_synthetic=512,
                          seed=2, limit=6)
    assert list(rows["prompt"]) == list(expected["prompt"]) and list(rows["answer"]) == list(expected["answer"])
    assert list(rows["category"]) == ["addition", "subtraction"] * 3
    assert f"(subset {subset})" in capsys.readouterr().err


def test_wrong_answers_that_only_repeat_a_quantity_of_the_question_are_counted_and_named():
    """Issue 52: GRPO taught a real model to answer some problems in wordings it never trained on with a number
    the question states ('<reasoning> 6 minutes </reasoning>' answered 6 for 6 minutes and 4 more). Accuracy
    alone calls that wrong; `eval` now says which kind of wrong, per kind of problem and in a note."""
    from unsloth_grpo.cli.evaluate import _summary

    minutes = "Sami read for 6 minutes before lunch and 4 minutes after lunch. How many minutes did Sami read in all?"
    rows = [dict(problem(minutes, "10"), category="addition"),
            dict(problem("Ann had 17 dollars and paid 8. How many dollars are left?", "9"), category="subtraction"),
            dict(problem("Ann had 12 dollars and paid 6. How many dollars are left?", "6"), category="subtraction")]
    outs = {minutes: "<reasoning>\n6 minutes\n</reasoning>\n<answer>\n6\n</answer>",  # the question's 6: a copy
            rows[1]["prompt"][-1]["content"]: "<reasoning>\n17 - 8 = 8\n</reasoning>\n<answer>\n8\n</answer>",  # a slip
            rows[2]["prompt"][-1]["content"]: R + "<answer>6</answer>"}  # right, and one of its numbers: no copy
    gen = lambda prompts, **kw: [[outs[p[-1]["content"]]] for p in prompts]  # noqa: E731
    res = evaluate(None, None, rows, generate_fn=gen, by="category")
    assert [r.get("copied_quantity") for r in res["records"]] == ["6", None, None]
    assert res["copied_quantity"] == 1
    assert {k: v["copied_quantity"] for k, v in res["by_category"].items()} == {"addition": 1, "subtraction": 0}
    res["seconds"] = 1.0
    text = _summary(res)
    assert "addition: n=1 accuracy=0.000 lenient=0.000 copied=1" in text
    assert "subtraction: n=2 accuracy=0.500 lenient=0.500\n" in text
    assert "note: 1 wrong answer(s) of 3 are a number the question states" in text
    assert "the question's 6, right: 10" in text
    # a run without copies prints no note
    outs[minutes] = "<reasoning>\n6 + 4 = 10\n</reasoning>\n<answer>\n10\n</answer>"
    res = evaluate(None, None, rows, generate_fn=gen, by="category")
    res["seconds"] = 1.0
    assert res["copied_quantity"] == 0 and "note:" not in _summary(res) and "copied=" not in _summary(res)
