"""Replaying a command line in-process, for the tests of what a command refuses (tests/test_bad_input.py,
tests/test_output_targets.py): the command's exit code, every file a folder holds, and loaders that fail
the test when a refusal comes too late."""

from __future__ import annotations

from pathlib import Path


def snapshot(path) -> dict:
    """Every file under ``path`` with its bytes (empty for a directory that does not exist)."""
    root = Path(path)
    return {str(f.relative_to(root)): f.read_bytes() for f in sorted(root.rglob("*")) if f.is_file()} \
        if root.is_dir() else {}


def no_model_loads(monkeypatch) -> None:
    """Every way a command loads a model fails the test: the checks must come first."""
    from unsloth_grpo.hardware import backend

    def loaded(*args, **kwargs):
        raise AssertionError("a model was loaded although the command had to be refused")

    monkeypatch.setattr(backend, "load_for_inference", loaded)
    monkeypatch.setattr(backend, "load_model", loaded)


def replay(argv: list[str]) -> int:
    """``unsloth-grpo ARGV`` or, for ``recipes.NAME ARGV``, ``python -m unsloth_grpo.recipes.NAME ARGV``;
    argparse's own refusals (SystemExit) count as the command's exit code."""
    from unsloth_grpo.cli.main import main
    from unsloth_grpo.cli.recipe import run_recipe

    try:
        if argv[0].startswith("recipes."):
            from unsloth_grpo.cli.train import load_recipe

            return run_recipe(load_recipe(argv[0].split(".", 1)[1]), argv[1:])
        return main(argv)
    except SystemExit as exc:
        return exc.code
