"""The package's shape in figures: what issue 34's done-when measures, read from the source with ``ast``.

    python tools/structure.py

Prints the lines of the config layer, the functions over 120 lines, the files that read
``<something>.model.name``, the files that compare a value with a backend's name, and the imports
(plain or through importlib with a literal name) that run between the package's folders in both
directions. Nothing of the package is imported.
"""

from __future__ import annotations

import ast
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "unsloth_grpo"

#: The files that make the config layer: reading, typing and checking a recipe config, and turning it into TRL's.
CONFIG_LAYER = ("unsloth_grpo/config.py", "unsloth_grpo/training/trainer_args.py", "unsloth_grpo/training/trl_schema.py")
#: Longest function a reader should meet; the sandbox's runner (one program run in a child process) aside.
MAX_FUNCTION = 120
LONG_FUNCTION_ALLOWED = {("unsloth_grpo/sandbox/_runner.py", "_main")}
BACKEND_NAMES = {"unsloth", "transformers"}


def _files(root: Path = PACKAGE) -> dict[str, ast.Module]:
    return {str(p.relative_to(root.parent)): ast.parse(p.read_text(), str(p)) for p in sorted(root.rglob("*.py"))}


def config_layer_lines(root: Path = ROOT) -> int:
    return sum(len((root / f).read_text().splitlines()) for f in CONFIG_LAYER if (root / f).is_file())


def long_functions(files: dict[str, ast.Module]) -> list[str]:
    out = []
    for path, tree in files.items():
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                n = node.end_lineno - node.lineno + 1
                if n > MAX_FUNCTION and (path, node.name) not in LONG_FUNCTION_ALLOWED:
                    out.append(f"{path}:{node.lineno} {node.name}: {n} lines")
    return out


def _reads_model_name(tree: ast.Module) -> bool:
    """``X.model.name``, or ``m.name`` where ``m = X.model`` was assigned in the same function or module."""
    scopes = [tree, *(n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)))]
    for scope in scopes:
        aliases = {t.id for n in ast.walk(scope) if isinstance(n, ast.Assign) and isinstance(n.value, ast.Attribute)
                   and n.value.attr == "model" for t in n.targets if isinstance(t, ast.Name)}
        for n in ast.walk(scope):
            if isinstance(n, ast.Attribute) and n.attr == "name" and (
                    (isinstance(n.value, ast.Attribute) and n.value.attr == "model")
                    or (isinstance(n.value, ast.Name) and n.value.id in aliases)):
                return True
    return False


def model_name_readers(files: dict[str, ast.Module]) -> list[str]:
    """Files that read a recipe config's model name: ``X.model.name``, or ``m.name`` after ``m = X.model``."""
    return sorted(path for path, tree in files.items() if _reads_model_name(tree))


def _names_backend(node: ast.AST) -> bool:
    if isinstance(node, ast.Constant):
        return node.value in BACKEND_NAMES
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return any(_names_backend(e) for e in node.elts)
    return False


def backend_comparers(files: dict[str, ast.Module]) -> list[str]:
    """Files that compare a value with "unsloth" or "transformers" (==, !=, in, not in; a match case)."""
    out = []
    for path, tree in files.items():
        for n in ast.walk(tree):
            if isinstance(n, ast.Compare) and any(_names_backend(x) for x in [n.left, *n.comparators]):
                out.append(path)
                break
            if isinstance(n, ast.MatchValue) and _names_backend(n.value):
                out.append(path)
                break
    return sorted(set(out))


def _folder(module: str) -> str:
    parts = module.split(".")
    return ".".join(parts[:2])


def folder_imports(files: dict[str, ast.Module]) -> dict[tuple[str, str], set[str]]:
    """(folder, folder) -> the files of the first that import the second (plain imports, and
    ``import_module``/``__import__`` of a literal name)."""
    edges: dict[tuple[str, str], set[str]] = defaultdict(set)
    for path, tree in files.items():
        module = path[:-3].replace("/", ".").removesuffix(".__init__")
        here = _folder(module)
        for n in ast.walk(tree):
            names = []
            if isinstance(n, ast.Import):
                names = [a.name for a in n.names]
            elif isinstance(n, ast.ImportFrom) and n.level == 0 and n.module:
                names = [n.module] + [f"{n.module}.{a.name}" for a in n.names]
            elif isinstance(n, ast.ImportFrom) and n.level:
                base = module.split(".")[: len(module.split(".")) - n.level + (path.endswith("__init__.py"))]
                names = [".".join(base + ([n.module] if n.module else []))]
            elif isinstance(n, ast.Call) and n.args and isinstance(n.args[0], ast.Constant) \
                    and isinstance(n.args[0].value, str) \
                    and getattr(n.func, "attr", getattr(n.func, "id", None)) in ("import_module", "__import__"):
                names = [n.args[0].value]
            for name in names:
                if name.startswith("unsloth_grpo.") and _folder(name) != here:
                    edges[(here, _folder(name))].add(path)
                    break
    return edges


def two_way(edges: dict[tuple[str, str], set[str]]) -> list[str]:
    """Pairs of folders that import each other: one of the two arrows runs back up."""
    return sorted(f"{a} <-> {b}: {sorted(edges[(a, b)])} / {sorted(edges[(b, a)])}"
                  for (a, b) in edges if (b, a) in edges and a < b)


def main() -> int:
    files = _files()
    print(f"config layer: {config_layer_lines()} lines ({', '.join(CONFIG_LAYER)})")
    longs = long_functions(files)
    print(f"functions over {MAX_FUNCTION} lines: {len(longs)}", *longs, sep="\n  ")
    readers = model_name_readers(files)
    print(f"files reading .model.name: {len(readers)}", *readers, sep="\n  ")
    comparers = backend_comparers(files)
    print(f"files comparing backend names: {len(comparers)}", *comparers, sep="\n  ")
    loops = two_way(folder_imports(files))
    print(f"folders importing each other: {len(loops)}", *loops, sep="\n  ")
    return 0


if __name__ == "__main__":
    sys.exit(main())
