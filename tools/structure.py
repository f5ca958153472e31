"""The package's shape in figures: what issue 34's done-when measures, read from the source with ``ast``.

    python tools/structure.py

Prints the lines of the config layer, the functions over 120 lines, the files that read
``<something>.model.name``, the files that compare a value with a backend's name, and the folders that
import each other (any import statement, and importlib with a literal or f-string name). Nothing of
the package is imported. ``tests/test_architecture.py`` holds the package to these figures with the
functions of this file.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE_NAME = "unsloth_grpo"
PACKAGE = ROOT / PACKAGE_NAME

#: The files that make the config layer: reading, typing and checking a recipe config, and turning it into TRL's.
CONFIG_LAYER = ("unsloth_grpo/config.py", "unsloth_grpo/training/trainer_args.py", "unsloth_grpo/training/trl_schema.py")
BACKEND_NAMES = {"unsloth", "transformers"}


def _files(root: Path = PACKAGE) -> dict[str, ast.Module]:
    return {str(p.relative_to(root.parent)): ast.parse(p.read_text(), str(p)) for p in sorted(root.rglob("*.py"))}


def config_layer_lines(root: Path = ROOT) -> int:
    return sum(len((root / f).read_text().splitlines()) for f in CONFIG_LAYER if (root / f).is_file())


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


def _modules(root: Path = PACKAGE) -> dict[str, Path]:
    out = {}
    for path in root.rglob("*.py"):
        parts = list(path.relative_to(root.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def _targets(module: str, path: Path, node: ast.AST) -> list[str]:
    """Dotted names an import statement in ``module`` reaches (submodules when it names them)."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    assert isinstance(node, ast.ImportFrom)
    if node.level:
        base = module.split(".")
        if path.name != "__init__.py":
            base = base[:-1]
        base = base[: len(base) - (node.level - 1)]
        prefix = ".".join(base + ([node.module] if node.module else []))
    else:
        prefix = node.module or ""
    return [f"{prefix}.{alias.name}" for alias in node.names] + [prefix]


def import_graph(root: Path = PACKAGE) -> dict[str, set[str]]:
    """module -> the package modules it imports anywhere in its source."""
    modules = _modules(root)
    graph: dict[str, set[str]] = {m: set() for m in modules}
    for module, path in modules.items():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if not isinstance(node, (ast.Import, ast.ImportFrom)):
                continue
            names = _targets(module, path, node)
            found = [n for n in names if n in modules]
            # ``from pkg import name``: the submodule when ``name`` is one, else the package itself
            for target in found if isinstance(node, ast.Import) else found[:-1] or found[-1:]:
                if target != module and target.startswith(PACKAGE_NAME):
                    graph[module].add(target)
    return graph


def _folder(module: str) -> str:
    """The floor a module belongs to: the package's top-level folder (or top-level module) it sits in."""
    return ".".join(module.split(".")[:2])


def _named_import(node: ast.AST) -> str | None:
    """The module an ``import_module(...)``/``__import__(...)`` call names, as far as its source says: a
    literal, or the literal head of an f-string or of ``'...' + name`` (``unsloth_grpo.recipes.``)."""
    if not isinstance(node, ast.Call) or not node.args:
        return None
    func = node.func
    if (func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)) not in ("import_module", "__import__"):
        return None
    arg = node.args[0]
    if isinstance(arg, ast.BinOp) and isinstance(arg.op, ast.Add):
        arg = arg.left
    if isinstance(arg, ast.JoinedStr):
        arg = arg.values[0] if arg.values else None
    if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
        return arg.value.rstrip(".") or None
    return None


def folder_loops(root: Path = PACKAGE) -> list[str]:
    """``a <-> b`` for each two folders of the package that import each other (any import statement, and
    ``import_module``/``__import__`` of a literal or f-string name): one of the two arrows runs back up."""
    edges = {(_folder(m), _folder(t)) for m, targets in import_graph(root).items() for t in targets}
    for module, path in _modules(root).items():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            name = _named_import(node)
            if name and name.startswith(PACKAGE_NAME + "."):
                edges.add((_folder(module), _folder(name)))
    return sorted(f"{a} <-> {b}" for a, b in edges if a < b and (b, a) in edges and PACKAGE_NAME not in (a, b))


#: Longest function a reader should meet, in lines from its ``def`` to its last line (docstring included).
MAX_FUNCTION_LINES = 120

#: Functions allowed past :data:`MAX_FUNCTION_LINES` (``path:name``), each with the reason.
LONG_FUNCTIONS = {
    "sandbox/_runner.py:_main": "one program run in a child process: its locals are what the untrusted code "
                                "cannot reach, so it is one function on purpose",
}


def long_functions(root: Path = PACKAGE, allowed: dict[str, str] = LONG_FUNCTIONS) -> list[str]:
    """``path:name:line: N lines`` for each function (or method) past :data:`MAX_FUNCTION_LINES` that
    ``allowed`` does not name, and each allowed one that is no longer past it (so the list cannot go stale)."""
    out, seen = [], set()
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            n = node.end_lineno - node.lineno + 1
            key = f"{rel}:{node.name}"
            if n > MAX_FUNCTION_LINES and key in allowed:
                seen.add(key)
            elif n > MAX_FUNCTION_LINES:
                out.append(f"{key}:{node.lineno}: {n} lines")
    return out + [f"{key}: not past {MAX_FUNCTION_LINES} lines, still allowed" for key in sorted(set(allowed) - seen)]


def main() -> int:
    files = _files()
    print(f"config layer: {config_layer_lines()} lines ({', '.join(CONFIG_LAYER)})")
    longs = long_functions()
    print(f"functions over {MAX_FUNCTION_LINES} lines (beside {', '.join(LONG_FUNCTIONS)}): {len(longs)}", *longs,
          sep="\n  ")
    readers = model_name_readers(files)
    print(f"files reading .model.name: {len(readers)}", *readers, sep="\n  ")
    comparers = backend_comparers(files)
    print(f"files comparing backend names: {len(comparers)}", *comparers, sep="\n  ")
    loops = folder_loops()
    print(f"folders importing each other: {len(loops)}", *loops, sep="\n  ")
    return 0


if __name__ == "__main__":
    sys.exit(main())
