"""Strip outputs from notebooks before they are committed.

    python notebooks/strip_outputs.py                 # every notebooks/*.ipynb, in place
    python notebooks/strip_outputs.py --check         # exit 1 and name the notebooks that hold outputs
    python notebooks/strip_outputs.py path/to/a.ipynb

Removes each code cell's outputs, execution count and the run-time metadata Jupyter and nbclient
add (``execution`` timings, ``collapsed``, ``scrolled``), and the injected-parameters cell a
papermill-style run leaves behind. Cell ids, tags and the notebook's own metadata (the Colab GPU
setting, the kernelspec) are kept.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import nbformat

RUNTIME_KEYS = ("execution", "collapsed", "scrolled", "ExecuteTime")
INJECTED_TAG = "injected-parameters"


def strip(nb: nbformat.NotebookNode) -> bool:
    """Strip ``nb`` in place; True when anything was removed."""
    changed = False
    kept = []
    for cell in nb.cells:
        if INJECTED_TAG in cell.get("metadata", {}).get("tags", []):
            changed = True
            continue
        for key in RUNTIME_KEYS:
            if key in cell.metadata:
                del cell.metadata[key]
                changed = True
        if cell.cell_type == "code":
            if cell.outputs or cell.execution_count is not None:
                changed = True
            cell.outputs = []
            cell.execution_count = None
        kept.append(cell)
    nb.cells = kept
    if "widgets" in nb.metadata:
        del nb.metadata["widgets"]
        changed = True
    return changed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("paths", nargs="*", type=Path, help="Notebooks (default: notebooks/*.ipynb).")
    parser.add_argument("--check", action="store_true", help="Change nothing; exit 1 if a notebook holds outputs.")
    args = parser.parse_args(argv)
    paths = args.paths or sorted(Path(__file__).resolve().parent.glob("*.ipynb"))
    dirty = []
    for path in paths:
        nb = nbformat.read(path, as_version=4)
        if strip(nb):
            dirty.append(path)
            if not args.check:
                nbformat.write(nb, path)
    for path in dirty:
        print(f"{path}: {'holds outputs; run python notebooks/strip_outputs.py' if args.check else 'stripped'}")
    return 1 if args.check and dirty else 0


if __name__ == "__main__":
    sys.exit(main())
