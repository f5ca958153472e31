"""The test suite's own machinery (tests/conftest.py): runs trained once and shared, the fault table and
torch's threads under ``-n 2`` (pytest-xdist), and the list of the longest tests."""

import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

import conftest

TESTS = Path(__file__).resolve().parent


def test_every_test_named_longest_first_still_exists():
    for name in conftest.LONGEST:
        path, _, function = name.partition("::")
        assert (TESTS.parent / path).is_file(), name
        assert f"def {function}(" in (TESTS.parent / path).read_text(), f"{name}: renamed? update tests/conftest.py"


def test_a_run_two_processes_ask_for_at_once_is_made_once(tmp_path):
    made, got = [], []

    def make(path):
        made.append(path)
        time.sleep(0.3)  # the second one asks while the first is still making it
        path.mkdir()
        (path / "adapter").write_text("weights")

    threads = [threading.Thread(target=lambda: got.append(conftest.trained_once(tmp_path, "run", make)))
               for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert made == [tmp_path / "run"] and got == [tmp_path / "run"] * 2
    assert (tmp_path / "run" / "adapter").read_text() == "weights"


def test_a_run_whose_making_failed_is_made_again_from_scratch(tmp_path):
    def fail(path):
        path.mkdir()
        (path / "half").write_text("")
        raise RuntimeError("killed")

    with pytest.raises(RuntimeError):
        conftest.trained_once(tmp_path, "run", fail)
    path = conftest.trained_once(tmp_path, "run", lambda p: p.mkdir())
    assert list(path.iterdir()) == []


@pytest.mark.slow  # a subprocess: the integration tier
def test_two_workers_print_the_fault_table_and_run_torch_on_one_thread_each(tmp_path):
    """``-n 2``: the tests of an ``xdist_group`` run on one worker, the fault table that worker made
    reaches the main process's summary once (it used to be set on the worker's config only), and each
    worker runs torch on one thread."""
    shutil.copy(TESTS / "conftest.py", tmp_path / "conftest.py")
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    (tmp_path / "test_table.py").write_text(
        "import os\n\nimport pytest\n\npytestmark = pytest.mark.xdist_group('faults')\n\n\n"
        "@pytest.fixture(scope='module', autouse=True)\n"
        "def _table(fault_table_in_summary):\n"
        "    yield\n"
        "    fault_table_in_summary(['fault injection (seed 0): 2 faults tried, 2 survived', '| SIGINT | step 3 |'])\n\n\n"
        "@pytest.mark.parametrize('i', range(6))\n"
        "def test_in_the_group(i):\n"
        "    import time\n\n    time.sleep(0.2)\n"
        "    with open('workers.txt', 'a') as f:\n        f.write(os.environ['PYTEST_XDIST_WORKER'] + '\\n')\n")
    (tmp_path / "test_threads.py").write_text(
        "import os\n\nimport pytest\n\n\n@pytest.mark.parametrize('i', range(4))\n"
        "def test_one_thread(i):\n    assert os.environ['OMP_NUM_THREADS'] == '1'\n"
        "    assert os.environ['PYTEST_XDIST_WORKER'] in ('gw0', 'gw1')\n")
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "PYTEST_XDIST_WORKER",
                                                            "PYTEST_XDIST_WORKER_COUNT", "PYTEST_ADDOPTS")}
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-n", "2", "--dist", "loadgroup",
                           "-p", "no:cacheprovider", str(tmp_path)], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "10 passed" in proc.stdout
    summary = proc.stdout.split("fault injection ==")[-1]
    assert "fault injection (seed 0): 2 faults tried, 2 survived\n| SIGINT | step 3 |" in summary, proc.stdout
    # the group ran on one worker: one table, not one per worker (pytest 9.2 ignored xdist's group suffix)
    assert len(set((tmp_path / "workers.txt").read_text().split())) == 1
    assert summary.count("faults tried") == 1, summary
