"""The notebooks: committed without outputs, and executed top to bottom in SMOKE mode.

SMOKE mode is what CI runs: the tiny offline model, synthetic or inline data, a few steps on CPU.
The parameters are injected after the cell tagged ``parameters`` (papermill's convention) and the
notebook runs in a kernel of this interpreter, whatever other kernels the machine has.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from conftest import load_script

nbformat = pytest.importorskip("nbformat")

NOTEBOOKS = Path(__file__).resolve().parents[1] / "notebooks"
ROOT = NOTEBOOKS.parent
NAMES = ("gsm8k_grpo", "custom_task")
KERNEL = "unsloth-grpo-tests"


def _strip_module():
    return load_script(NOTEBOOKS / "strip_outputs.py")


def _read(name: str):
    return nbformat.read(NOTEBOOKS / f"{name}.ipynb", as_version=4)


def _parameters_index(nb) -> int:
    tagged = [i for i, c in enumerate(nb.cells) if "parameters" in c.metadata.get("tags", [])]
    assert len(tagged) == 1, "exactly one cell must be tagged 'parameters'"
    return tagged[0]


# ---------------------------------------------------------------- the committed files


@pytest.mark.parametrize("name", NAMES)
def test_committed_notebook_is_valid_stripped_and_colab_ready(name):
    nb = _read(name)
    nbformat.validate(nb)
    for cell in nb.cells:
        if cell.cell_type == "code":
            assert cell.outputs == [] and cell.execution_count is None, f"{name}: run notebooks/strip_outputs.py"
    assert _strip_module().strip(nb) is False  # nothing left for the stripper either
    params = nb.cells[_parameters_index(nb)].source
    assert "SMOKE = False" in params  # Colab users get the real run
    repo = _repository_url().removeprefix("https://github.com/")
    badge = f"https://colab.research.google.com/github/{repo}/blob/main/notebooks/{name}.ipynb"
    assert badge in nb.cells[0].source  # the one place: pyproject.toml's [project.urls] Repository
    install = "\n".join(c.source for c in nb.cells if "%pip install" in c.source)
    assert '%pip install -q "{INSTALL}"' in install  # one variable, set in the parameters cell
    assert 'INSTALL = "unsloth-grpo[unsloth,vllm]"' in params  # the package name, not a URL
    assert "if not SMOKE" in install
    assert nb.metadata["accelerator"] == "GPU"


def _repository_url() -> str:
    import tomllib

    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["urls"]["Repository"]


def test_no_placeholder_url_in_notebooks_recipes_or_docs():
    for path in [*ROOT.glob("notebooks/*.ipynb"), *ROOT.glob("recipes/**/*.yaml"), *ROOT.glob("docs/*.md"), ROOT / "README.md",
                 ROOT / "pyproject.toml"]:
        assert "OWNER" not in path.read_text(), path


def test_strip_removes_outputs_timings_and_injected_cells(tmp_path):
    strip = _strip_module()
    nb = _read("custom_task")
    code = next(c for c in nb.cells if c.cell_type == "code")
    code.outputs = [nbformat.v4.new_output("stream", name="stdout", text="hi\n")]
    code.execution_count = 3
    code.metadata["execution"] = {"iopub.status.busy": "2026-01-01T00:00:00Z"}
    injected = nbformat.v4.new_code_cell("SMOKE = True")
    injected.metadata["tags"] = ["injected-parameters"]
    nb.cells.insert(2, injected)
    path = tmp_path / "dirty.ipynb"
    nbformat.write(nb, path)

    assert strip.main(["--check", str(path)]) == 1
    assert nbformat.read(path, as_version=4).cells[2].source == "SMOKE = True"  # --check changes nothing
    assert strip.main([str(path)]) == 0
    assert strip.main(["--check", str(path)]) == 0
    cleaned = nbformat.read(path, as_version=4)
    assert [c.source for c in cleaned.cells] == [c.source for c in _read("custom_task").cells]
    assert cleaned.cells[1].metadata["tags"] == ["parameters"]  # tags are kept


# ---------------------------------------------------------------- executed in SMOKE mode


@pytest.fixture
def kernel_name(tmp_path, monkeypatch) -> str:
    """A kernelspec for ``sys.executable`` that Jupyter finds before any other."""
    pytest.importorskip("ipykernel")
    spec = tmp_path / "jupyter" / "kernels" / KERNEL
    spec.mkdir(parents=True)
    (spec / "kernel.json").write_text(json.dumps({
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "unsloth-grpo tests", "language": "python",
    }))
    monkeypatch.setenv("JUPYTER_PATH", str(tmp_path / "jupyter"))
    monkeypatch.setenv("JUPYTER_RUNTIME_DIR", str(tmp_path / "jupyter" / "runtime"))
    monkeypatch.setenv("IPYTHONDIR", str(tmp_path / "ipython"))
    # The tiny model gains nothing from threads, and on a busy machine they hurt: the GSM8K
    # notebook took 48 s with one thread and 8.5 min with two on a shared two-core machine.
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    return KERNEL


def execute(name: str, workdir: Path, kernel: str, **parameters):
    """Run notebook ``name`` in ``workdir`` with ``parameters`` injected; raises on any cell error."""
    from nbclient import NotebookClient

    nb = _read(name)
    injected = nbformat.v4.new_code_cell("\n".join(f"{k} = {v!r}" for k, v in parameters.items()))
    injected.metadata["tags"] = ["injected-parameters"]
    nb.cells.insert(_parameters_index(nb) + 1, injected)
    workdir.mkdir(parents=True, exist_ok=True)
    NotebookClient(nb, kernel_name=kernel, timeout=600, resources={"metadata": {"path": str(workdir)}}).execute()
    return nb


def _text(cell) -> str:
    """Everything a cell printed or displayed as text."""
    parts = []
    for out in cell.outputs:
        if out.output_type == "stream":
            parts.append(out.text)
        elif "data" in out:
            parts.append(out.data.get("text/plain", ""))
    return "".join(parts)


def _cell(nb, needle: str):
    return next(c for c in nb.cells if c.cell_type == "code" and needle in c.source)


def _metrics(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


@pytest.mark.slow
def test_gsm8k_notebook_runs_in_smoke_mode(tmp_path, kernel_name):
    work = tmp_path / "work"
    nb = execute("gsm8k_grpo", work, kernel_name, SMOKE=True, EVAL_PROBLEMS=16)
    run = work / "outputs" / "gsm8k_notebook"

    assert (run / "adapter_model.safetensors").is_file()
    rows = _metrics(run)
    assert [r["step"] for r in rows] == list(range(1, 101))  # the smoke preset's 100 steps, each logged
    rewards = [r["reward"] for r in rows]
    assert sum(rewards[-20:]) / 20 > sum(rewards[:20]) / 20 + 0.1  # the format is being learned

    for stage in ("eval_before", "eval_after"):
        result = json.loads((run / stage / "eval.json").read_text())
        assert result["n"] == 16
    report = json.loads((run / "report.json").read_text())
    # strict and lenient accuracy side by side, then the format
    assert [m["metric"] for m in report["metrics"]][:3] == ["accuracy", "lenient_accuracy", "format_compliance"]
    assert report["baseline"]["model"] == "builtin:tiny"

    pngs = sorted(p.name for p in (run / "plots").glob("*.png"))
    assert "reward.png" in pngs and "reward_std.png" in pngs
    shown = [o for o in _cell(nb, "plot_run(OUTPUT_DIR)").outputs if "image/png" in o.get("data", {})]
    assert len(shown) == len(pngs)

    merged = work / "exports" / "gsm8k_notebook" / "merged"
    assert (merged / "config.json").is_file() and (merged / "reproducibility.json").is_file()
    gguf = work / "exports" / "gsm8k_notebook" / "gguf"
    assert sorted(p.name for p in gguf.iterdir()) == ["Modelfile", "model-q8_0.gguf"]  # offline, in SMOKE mode too
    assert "gguf: exports/gsm8k_notebook/gguf/model-q8_0.gguf and" in _text(_cell(nb, "export_model("))
    assert _text(_cell(nb, "answer_questions(")).count("Q: ") == 3

    assert "Rewards on 64 completions in 8 groups" in _text(_cell(nb, "analyse(records"))
    assert "no GPU here; assuming a Colab T4" in _text(_cell(nb, "plan_for_choice("))
    _second_run_all_changes_nothing("gsm8k_grpo", work, run, kernel_name, SMOKE=True, EVAL_PROBLEMS=8)


def _second_run_all_changes_nothing(name: str, work: Path, run: Path, kernel: str, **parameters) -> None:
    """"Run all" again over a finished run: refused in the config cell (its output directory holds that
    run), before the baseline cell writes its evaluation into the run; every file of the run is unchanged."""
    from cli_replay import snapshot
    from nbclient.exceptions import CellExecutionError

    before = snapshot(run)
    with pytest.raises(CellExecutionError) as refused:
        execute(name, work, kernel, **parameters)
    assert "EarlierRun" in str(refused.value) and "holds a run that finished" in str(refused.value)
    assert snapshot(run) == before


@pytest.mark.slow
def test_custom_task_notebook_runs_in_smoke_mode(tmp_path, kernel_name):
    work = tmp_path / "work"
    nb = execute("custom_task", work, kernel_name, SMOKE=True)
    run = work / "outputs" / "kb_notebook"

    # the notebook wrote the data and the reward module it trains with
    with (work / "kb_train.csv").open() as fh:
        assert fh.readline().strip() == "question,expert_answer"
    assert (work / "kb_rewards.py").is_file()
    config = (run / "config.yaml").read_text()
    assert "name: kb_rewards:kb_answer" in config and "source: kb_train.csv" in config

    rows = _metrics(run)
    assert len(rows) == 40  # the custom recipe's smoke preset
    assert all("rewards/kb_answer/mean" in r for r in rows)  # TRL logs the reward under its function name
    rewards = [r["reward"] for r in rows]
    assert sum(rewards[-10:]) / 10 > sum(rewards[:10]) / 10 + 0.1  # the format reward rises
    assert (run / "adapter_model.safetensors").is_file()
    for stage in ("eval_before", "eval_after"):
        assert json.loads((run / stage / "eval.json").read_text())["n"] == 6
    assert (run / "report.md").is_file()
    assert (work / "exports" / "kb_notebook" / "merged" / "config.json").is_file()
    assert _text(_cell(nb, "answer_questions(")).count("Q: ") == 2
    _second_run_all_changes_nothing("custom_task", work, run, kernel_name, SMOKE=True)
