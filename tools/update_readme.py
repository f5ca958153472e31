"""Regenerate the docs' generated blocks from the code: the reward catalogue (docs/rewards.md) and the
planner's table (docs/planner.md). A test fails when they drift.

    python tools/update_readme.py
"""

import re
from pathlib import Path

from unsloth_grpo.hardware.planner import preset_table_markdown
import unsloth_grpo.tasks  # noqa: E402,F401 - the tasks' rewards join the catalogue through the task registry
from unsloth_grpo.rewards import catalogue_markdown

DOCS = Path(__file__).resolve().parents[1] / "docs"


def replace_block(text: str, name: str, body: str) -> str:
    """Put ``body`` between the ``<!-- BEGIN name (generated) -->`` and ``<!-- END name -->`` markers."""
    pattern = re.compile(r"(<!-- BEGIN %s \(generated\) -->\n).*?(<!-- END %s -->)" % (re.escape(name), re.escape(name)), re.S)
    if not pattern.search(text):
        raise SystemExit(f"markers for '{name}' not found")
    return pattern.sub(lambda m: m.group(1) + body.strip() + "\n" + m.group(2), text)


def main() -> None:
    rewards = DOCS / "rewards.md"
    rewards.write_text(replace_block(rewards.read_text(), "reward catalogue", catalogue_markdown()))
    planner = DOCS / "planner.md"
    planner.write_text(replace_block(planner.read_text(), "memory table", preset_table_markdown()))


if __name__ == "__main__":
    main()
