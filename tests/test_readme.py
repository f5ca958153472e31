"""The README's generated parts match the code that generates them, and its commands match CI."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()


def test_reward_catalogue_is_generated_from_the_registry():
    from unsloth_grpo.rewards import catalogue_markdown

    block = re.search(r"<!-- BEGIN reward catalogue \(generated\) -->\n(.*?)<!-- END reward catalogue -->",
                      README, re.S)
    assert block, "README lost its reward catalogue markers"
    assert block.group(1).strip() == catalogue_markdown().strip(), \
        "regenerate with: python -m unsloth_grpo.rewards --markdown"


def test_memory_table_is_the_planners_output():
    from unsloth_grpo.hardware.memory import preset_table_markdown

    assert preset_table_markdown().strip() in README, "regenerate with: unsloth-grpo plan --table"


def test_ci_runs_the_readme_test_command():
    ci = (ROOT / ".ci" / "run").read_text()
    assert 'pip install -q -e ".[test]"' in ci and "python -m pytest -q" in ci
    assert 'pip install -e ".[test]" && python -m pytest -q tests' in README
    assert "python -m unsloth_grpo.recipes.gsm8k --preset smoke --output-dir outputs/smoke" in README
