"""Regenerate docs/gpu.md's tables ("What happens on your card") from the card profiles.

    python tools/update_gpu_docs.py          # rewrite the generated blocks
    python tools/update_gpu_docs.py --check  # exit 1 when docs/gpu.md is out of date

tests/test_profiles.py fails when the committed page differs from what this writes.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

from unsloth_grpo.cli.plan import card_table_markdown, default_recipe_table_markdown, profile_table_markdown

PAGE = Path(__file__).resolve().parents[1] / "docs" / "gpu.md"
BLOCKS = {"profiles": profile_table_markdown, "card table": card_table_markdown, "default recipe table": default_recipe_table_markdown}


def render(text: str) -> str:
    """``text`` with every generated block replaced by the current output of its function."""
    for name, make in BLOCKS.items():
        pattern = rf"(<!-- BEGIN {name} \(generated\) -->\n).*?(<!-- END {name} -->)"
        if not re.search(pattern, text, flags=re.S):
            raise SystemExit(f"{PAGE}: the markers of the '{name}' block are missing")
        text = re.sub(pattern, lambda m: m.group(1) + make().strip() + "\n" + m.group(2), text, flags=re.S)
    return text


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    old = PAGE.read_text()
    new = render(old)
    if "--check" in argv:
        if new != old:
            print(f"{PAGE} is out of date: python tools/update_gpu_docs.py", file=sys.stderr)
            return 1
        return 0
    PAGE.write_text(new)
    return 0


if __name__ == "__main__":
    sys.exit(main())
