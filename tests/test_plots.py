"""Plots from metrics.jsonl with health warnings marked on the step axis."""

from __future__ import annotations

import argparse
import json

import pytest

from unsloth_grpo.cli.plot import add_parser, run
from unsloth_grpo.evaluation.plots import build_figures, plot_run, read_metrics

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def write_run(tmp_path, *, kl=False, with_eval=False, warnings=()):
    rows = []
    for s in range(1, 21):
        r = {"step": s, "reward": 0.1 * s, "reward_std": 0.3, "completions/mean_length": 50 + s,
             "rewards/strict_format/mean": 0.0 if s < 10 else 0.5, "rewards/correctness/mean": 0.05 * s}
        if kl:
            r["kl"] = 0.01 * s
        rows.append(r)
        if with_eval and s % 10 == 0:
            rows.append({"step": s, "eval/accuracy": 0.02 * s, "eval/format_compliance": 0.5,
                         "eval/mean_completion_tokens": 40.0})
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    if warnings:
        (tmp_path / "health.jsonl").write_text("".join(
            json.dumps({"step": st, "name": n, "message": "m", "fix": "f", "values": {}}) + "\n" for st, n in warnings))
    return rows


@pytest.mark.slow  # a model, a subprocess or matplotlib: the integration tier
def test_plot_run_writes_one_png_per_logged_metric(tmp_path):
    write_run(tmp_path, warnings=[(7, "flat_reward")])
    paths = plot_run(tmp_path)
    assert [p.name for p in paths] == ["reward.png", "reward_std.png", "completion_length.png", "rewards.png"]
    for p in paths:
        assert p.parent == tmp_path / "plots"
        data = p.read_bytes()
        assert data[:8] == PNG_MAGIC and 2_000 < len(data) < 60_000  # small enough for the README


@pytest.mark.slow  # a model, a subprocess or matplotlib: the integration tier
def test_kl_and_eval_plots_appear_when_logged(tmp_path):
    write_run(tmp_path, kl=True, with_eval=True)
    names = [p.name for p in plot_run(tmp_path, out_dir=tmp_path / "png")]
    assert names == ["reward.png", "reward_std.png", "kl.png", "completion_length.png", "rewards.png", "eval.png"]


def test_warnings_are_vertical_lines_at_their_steps(tmp_path):
    rows = write_run(tmp_path)
    warnings = [{"step": 7, "name": "flat_reward"}, {"step": 15, "name": "mode_collapse"}]
    figures = dict(build_figures(rows, warnings))
    for stem, fig in figures.items():
        ax = fig.axes[0]
        vlines = [ln.get_xdata()[0] for ln in ax.get_lines() if ln.get_linestyle() == "--"]
        assert vlines == [7, 15], stem
        assert [t.get_text() for t in ax.texts] == ["flat_reward", "mode_collapse"]
    legend = [t.get_text() for t in figures["rewards"].axes[0].get_legend().get_texts()]
    assert legend == ["correctness (mean of 2)", "strict_format (mean of 2)"]
    raw, smooth = figures["reward"].axes[0].get_lines()[:2]
    assert list(raw.get_xdata()) == list(range(1, 21)) and raw.get_ydata()[-1] == pytest.approx(2.0)
    assert smooth.get_ydata()[0] == pytest.approx(0.1) and smooth.get_ydata()[-1] == pytest.approx(1.95)


@pytest.mark.slow  # a model, a subprocess or matplotlib: the integration tier
def test_cli_plot(tmp_path, capsys):
    write_run(tmp_path)
    parser = argparse.ArgumentParser()
    add_parser(parser.add_subparsers())
    args = parser.parse_args(["plot", str(tmp_path)])
    assert args.func(args) == 0
    assert capsys.readouterr().out.splitlines()[0] == str(tmp_path / "plots" / "reward.png")


def test_cli_plot_errors_name_the_problem(tmp_path, capsys):
    assert run(argparse.Namespace(output_dir=str(tmp_path / "nope"), out=None)) == 2
    assert "metrics.jsonl" in capsys.readouterr().err
    (tmp_path / "metrics.jsonl").write_text('{"step": 1, "loss": 0.1}\n')
    assert run(argparse.Namespace(output_dir=str(tmp_path), out=None)) == 1
    (tmp_path / "metrics.jsonl").write_text('{"step": 1, "reward": 0.1}\n{"step": 2, "rew')
    with pytest.raises(ValueError, match="line 2 is not JSON"):
        read_metrics(tmp_path)
