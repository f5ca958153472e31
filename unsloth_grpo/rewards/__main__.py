"""``python -m unsloth_grpo.rewards --markdown`` prints the reward catalogue for the README."""

from __future__ import annotations

import argparse
import sys

from . import available_rewards, catalogue_markdown


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m unsloth_grpo.rewards", description="List the built-in rewards."
    )
    parser.add_argument("--markdown", action="store_true", help="print the catalogue as a Markdown table")
    args = parser.parse_args(argv)
    if args.markdown:
        sys.stdout.write(catalogue_markdown())
    else:
        print("\n".join(available_rewards()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
