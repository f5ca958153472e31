"""Regenerate the README's generated blocks (reward catalogue, memory table) from the code.

    python tools/update_readme.py
"""

import re
from pathlib import Path

from unsloth_grpo.hardware.memory import preset_table_markdown
from unsloth_grpo.rewards import catalogue_markdown

README = Path(__file__).resolve().parents[1] / "README.md"


def main() -> None:
    text = README.read_text()
    text = re.sub(r"(<!-- BEGIN reward catalogue \(generated\) -->\n).*?(<!-- END reward catalogue -->)",
                  lambda m: m.group(1) + catalogue_markdown().strip() + "\n" + m.group(2), text, flags=re.S)
    table = preset_table_markdown().strip()
    first = table.splitlines()[0]
    start = text.index(first)
    end = start
    for line in text[start:].splitlines(keepends=True):
        if not line.startswith("|"):
            break
        end += len(line)
    text = text[:start] + table + "\n" + text[end:]
    README.write_text(text)


if __name__ == "__main__":
    main()
