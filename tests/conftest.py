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
