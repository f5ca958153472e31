"""The package's shape: no import cycles, a ground floor that imports nothing above it, pure rewards,
a hardware wing that imports nothing from training, modules found by name only in the registries,
every subcommand in cli/, and no file longer than a reader can hold.

Every ``import`` and ``from ... import`` statement counts, including those inside functions (an
import deferred into a function still ties the two modules together). The graph is read with
``ast`` from the source, so nothing is imported to draw it.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = "unsloth_grpo"
ROOT = Path(__file__).resolve().parents[1] / PACKAGE

#: The ground floor: config, data, runs and the grader (the grading/ package, every module in it) import only
#: each other.
GROUND_FLOOR = {f"{PACKAGE}.config", f"{PACKAGE}.data", f"{PACKAGE}.runs", f"{PACKAGE}.grading"}


def _ground(module: str) -> bool:
    return any(_under(module, floor) for floor in GROUND_FLOOR)


def _modules(root: Path = ROOT) -> dict[str, Path]:
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


def import_graph(root: Path = ROOT) -> dict[str, set[str]]:
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
                if target != module and target.startswith(PACKAGE):
                    graph[module].add(target)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def _under(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


#: Wings that may import only the ground floor and the wings named beside them. The rewards are pure
#: functions of text, and the rewards lab with them: it scores completions and reports; generating
#: them with a model is the ``rewards`` command's (cli/). The hardware wing knows the card, loads
#: the models and exports them: it reads run directories through ``runs`` and builds the built-in
#: models, and imports nothing from training, evaluation, tasks or above.
LOW_WINGS = {
    f"{PACKAGE}.rewards": ("rewards: pure functions of text", (f"{PACKAGE}.rewards",)),
    f"{PACKAGE}.models": ("built-in models", (f"{PACKAGE}.models",)),
    f"{PACKAGE}.hardware": ("hardware: the card, the loader, export",
                            (f"{PACKAGE}.hardware", f"{PACKAGE}.models")),
}


def upward_imports(graph: dict[str, set[str]]) -> list[str]:
    """Imports that break the floors: the ground floor upward, or a low wing (rewards, models,
    hardware) to anything but the ground floor and the wings it may use."""
    bad = []
    for module, targets in sorted(graph.items()):
        for target in sorted(targets):
            if _ground(module) and not _ground(target):
                bad.append(f"{module} (ground floor) imports {target}")
            for wing, (what, allowed) in LOW_WINGS.items():
                if _under(module, wing) and not _ground(target) and not any(_under(target, a) for a in allowed):
                    bad.append(f"{module} ({what}) imports {target}")
    return bad


#: The only modules that import a module of the package by a name built at run time, and why. A task is
#: found through the task registry (``get_task``), never by ``import_module(f"...tasks.{name}")``.
RUN_TIME_IMPORTS = {
    f"{PACKAGE}.tasks": "the task registry: a task by its name",
    f"{PACKAGE}.rewards._registry": "the reward registry: the library's reward families",
    f"{PACKAGE}.rewards": "a custom reward named by its import path",
    f"{PACKAGE}.tools": "a custom tool named by its import path",
    f"{PACKAGE}.cli.main": "the modules that contribute a subcommand",
    f"{PACKAGE}.sandbox._runner": "the sandboxed program's own imports, inside the sandbox",
}


def run_time_imports(root: Path = ROOT) -> list[str]:
    """``module: line`` for each ``import_module(...)`` / ``__import__(...)`` of a name that is not a
    string literal, outside :data:`RUN_TIME_IMPORTS`."""
    found = []
    for module, path in sorted(_modules(root).items()):
        if module in RUN_TIME_IMPORTS:
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if not isinstance(node, ast.Call) or not node.args:
                continue
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
            literal = isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)
            if name in ("import_module", "__import__") and not literal:
                found.append(f"{module}:{node.lineno} imports {ast.unparse(node.args[0])}")
    return found


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


def folder_loops(root: Path = ROOT) -> list[str]:
    """``a <-> b`` for each two folders of the package that import each other (any import statement, and
    ``import_module``/``__import__`` of a literal or f-string name): one of the two arrows runs back up."""
    edges = {(_folder(m), _folder(t)) for m, targets in import_graph(root).items() for t in targets}
    for module, path in _modules(root).items():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            name = _named_import(node)
            if name and name.startswith(PACKAGE + "."):
                edges.add((_folder(module), _folder(name)))
    return sorted(f"{a} <-> {b}" for a, b in edges if a < b and (b, a) in edges and PACKAGE not in (a, b))


def test_no_two_folders_of_the_package_import_each_other():
    assert folder_loops() == []


#: Most lines a package file should have: past it, a file needs a table of contents and is several files.
MAX_LINES = 600

#: Package files allowed past :data:`MAX_LINES`, each with the reason it has not been split yet.
LONG_FILES = {
    "hardware/export.py": "merging and GGUF, the model card and the hub push, the merge check in one file "
                          "(issue 24 has landed): to be split by job",
    "hardware/backend.py": "the backend rule, the decision and the loader; issue 24 added the real built-in "
                           "model's fetch: the built-in names and their resolution are the next to move out",
    "config.py": "the recipe config: its sections with a help text per field, YAML in and out, the shape checks",
}


def long_files(root: Path = ROOT) -> list[str]:
    """``path: N lines`` for each package file past :data:`MAX_LINES` that :data:`LONG_FILES` does not allow,
    and each allowed file that no longer needs to be (so the list cannot go stale)."""
    out = []
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        n = len(path.read_text().splitlines())
        if n > MAX_LINES and rel not in LONG_FILES:
            out.append(f"{rel}: {n} lines")
        elif n <= MAX_LINES and rel in LONG_FILES:
            out.append(f"{rel}: {n} lines, still in LONG_FILES")
    return out


def test_the_package_has_no_import_cycle():
    assert cycles(import_graph()) == []


def test_ground_floor_and_rewards_import_nothing_above_them():
    assert upward_imports(import_graph()) == []


def test_importing_config_loads_no_torch_trl_or_unsloth_and_nothing_above_the_ground_floor():
    code = ("import sys, unsloth_grpo.config; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in "
            "('torch', 'trl', 'unsloth', 'transformers', 'peft', 'datasets') or m.startswith('unsloth_grpo.')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=ROOT.parent)
    assert out.stdout.strip() == "['unsloth_grpo.config']"


def test_modules_are_found_by_name_only_in_the_registries():
    assert run_time_imports() == []


def subcommands_outside_cli(root: Path = ROOT) -> list[str]:
    """``module:line`` for each subcommand parser (``subparsers.add_parser(...)``) outside ``cli/``."""
    found = []
    for module, path in sorted(_modules(root).items()):
        if _under(module, f"{PACKAGE}.cli"):
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "add_parser":
                found.append(f"{module}:{node.lineno}")
    return found


def test_every_subcommand_is_defined_in_cli():
    from unsloth_grpo.cli.main import COMMAND_MODULES

    assert subcommands_outside_cli() == []
    assert all(_under(m, f"{PACKAGE}.cli") for m in COMMAND_MODULES)


def test_no_package_file_is_longer_than_a_reader_can_hold():
    assert long_files() == []


# ------------------------------------------------------------------ the checker itself can fail


def _write(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / PACKAGE / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root / PACKAGE


def test_a_cycle_through_an_import_inside_a_function_is_found(tmp_path):
    pkg = _write(tmp_path, {
        "__init__.py": "",
        "config.py": "def f():\n    from unsloth_grpo.training import train\n",
        "training/__init__.py": "",
        "training/train.py": "from unsloth_grpo.config import f\n",
    })
    graph = import_graph(pkg)
    assert cycles(graph) == [[f"{PACKAGE}.config", f"{PACKAGE}.training.train"]]
    assert upward_imports(graph) == [f"{PACKAGE}.config (ground floor) imports {PACKAGE}.training.train"]


@pytest.mark.parametrize("source", [
    "from unsloth_grpo.tasks import gsm8k\n",
    "def f():\n    from ..tasks import gsm8k\n",
    "import unsloth_grpo.tasks.gsm8k\n",
])
def test_rewards_reaching_above_the_ground_floor_are_found(tmp_path, source):
    pkg = _write(tmp_path, {
        "__init__.py": "", "grading/__init__.py": "", "grading/grader.py": "",
        "rewards/__init__.py": "from . import format\n",
        "rewards/format.py": "from unsloth_grpo.grading import *\nfrom unsloth_grpo.grading.grader import *\n" + source,
        "tasks/__init__.py": "", "tasks/gsm8k.py": "",
    })
    assert upward_imports(import_graph(pkg)) == [
        f"{PACKAGE}.rewards.format (rewards: pure functions of text) imports {PACKAGE}.tasks.gsm8k"]


def test_a_grading_module_reaching_above_the_ground_floor_is_found(tmp_path):
    pkg = _write(tmp_path, {
        "__init__.py": "", "grading/__init__.py": "from .locate import *\n",
        "grading/locate.py": "from unsloth_grpo.config import X\ndef f():\n    from unsloth_grpo.tasks import gsm8k\n",
        "config.py": "", "tasks/__init__.py": "", "tasks/gsm8k.py": "",
    })
    assert upward_imports(import_graph(pkg)) == [
        f"{PACKAGE}.grading.locate (ground floor) imports {PACKAGE}.tasks.gsm8k"]


@pytest.mark.parametrize("source", [
    "import importlib\ndef f(name):\n    return importlib.import_module(f'unsloth_grpo.tasks.{name}')\n",
    "from importlib import import_module\ndef f(name):\n    return import_module('unsloth_grpo.tasks.' + name)\n",
    "import sys\ndef f(name):\n    return __import__('unsloth_grpo.tasks.%s' % name)\n",
])
def test_a_task_imported_by_a_formatted_name_outside_the_registry_is_found(tmp_path, source):
    pkg = _write(tmp_path, {"__init__.py": "", "training/__init__.py": "", "training/train.py": source,
                            "tasks/__init__.py": "import importlib\nget = lambda n: importlib.import_module(n)\n"})
    (found,) = run_time_imports(pkg)
    assert found.startswith(f"{PACKAGE}.training.train:3 imports ")


@pytest.mark.parametrize("source, target", [
    ("def f():\n    from unsloth_grpo.training.distributed import detect\n", "training.distributed"),
    ("from unsloth_grpo.training import checkpoint\n", "training.checkpoint"),
    ("import unsloth_grpo.tasks\n", "tasks"),
])
def test_the_hardware_wing_reaching_above_its_floor_is_found(tmp_path, source, target):
    pkg = _write(tmp_path, {
        "__init__.py": "", "config.py": "", "hardware/__init__.py": "", "models/__init__.py": "",
        "hardware/backend.py": "from unsloth_grpo.config import *\nfrom unsloth_grpo.models import *\n" + source,
        "training/__init__.py": "", "training/distributed.py": "", "training/checkpoint.py": "", "tasks/__init__.py": "",
    })
    assert upward_imports(import_graph(pkg)) == [
        f"{PACKAGE}.hardware.backend (hardware: the card, the loader, export) imports {PACKAGE}.{target}"]


def test_a_subcommand_outside_cli_is_found(tmp_path):
    pkg = _write(tmp_path, {"__init__.py": "", "cli/__init__.py": "", "cli/plan.py": "def f(s):\n    s.add_parser('plan')\n",
                            "hardware/__init__.py": "", "hardware/doctor.py": "def f(s):\n    s.add_parser('doctor')\n"})
    assert subcommands_outside_cli(pkg) == [f"{PACKAGE}.hardware.doctor:2"]


@pytest.mark.parametrize("source", [
    "import importlib\ndef load(name):\n    return importlib.import_module(f'unsloth_grpo.recipes.{name}')\n",
    "import importlib\nRECIPE = importlib.import_module('unsloth_grpo.recipes.gsm8k')\n",
    "def load():\n    from ..recipes import gsm8k\n",
])
def test_two_folders_importing_each_other_are_found(tmp_path, source):
    pkg = _write(tmp_path, {"__init__.py": "", "cli/__init__.py": "", "cli/recipe.py": "", "cli/train.py": source,
                            "recipes/__init__.py": "", "recipes/gsm8k.py": "from unsloth_grpo.cli.recipe import *\n",
                            "tasks/__init__.py": "", "tasks/gsm8k.py": "import importlib\n"})
    assert folder_loops(pkg) == [f"{PACKAGE}.cli <-> {PACKAGE}.recipes"]


def test_a_long_file_and_a_stale_allowance_are_found(tmp_path):
    pkg = _write(tmp_path, {"__init__.py": "", "big.py": "x = 1\n" * (MAX_LINES + 1), "config.py": "x = 1\n"})
    assert long_files(pkg) == [f"big.py: {MAX_LINES + 1} lines", f"config.py: 1 lines, still in LONG_FILES"]


# ------------------------------------------------------------------ rewards are declared, not registered


def _fresh(code: str) -> str:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                          cwd=ROOT.parent).stdout.strip()


def test_the_reward_registry_does_not_depend_on_what_was_imported_first():
    # once the task registry is imported, the reward registry is the same whether or not a task module
    # was imported before it was read
    code = ("import sys\n"
            "import unsloth_grpo.tasks\n"
            "from unsloth_grpo.rewards import REGISTRY\n"
            "first = sorted(REGISTRY)\n"
            "import unsloth_grpo.tasks.countdown, unsloth_grpo.tasks.json_extract\n"
            "print(first == sorted(REGISTRY), 'countdown_equation' in first)")
    assert _fresh(code) == "True True"


def test_importing_rewards_imports_no_task_and_a_task_reward_loads_its_module_on_demand():
    code = ("import sys\n"
            "import unsloth_grpo.tasks\n"
            "from unsloth_grpo.rewards import get_reward\n"
            "tasks = lambda: sorted(m for m in sys.modules if m.startswith('unsloth_grpo.tasks.'))\n"
            "get_reward('correctness'); before = tasks()\n"
            "get_reward('countdown_equation'); print(before, 'unsloth_grpo.tasks.countdown' in tasks())")
    assert _fresh(code) == "['unsloth_grpo.tasks._task'] True"


def test_the_reward_registry_alone_loads_no_task_even_for_a_name_it_does_not_know():
    # the rewards package sits below the tasks: a task's reward is found through the task registry only
    code = ("import sys\n"
            "from unsloth_grpo.rewards import REGISTRY, get_reward\n"
            "get_reward('correctness'); names = sorted(REGISTRY); known = 'countdown_equation' in REGISTRY\n"
            "print(known, 'correctness' in names, any(m.startswith('unsloth_grpo.tasks') for m in sys.modules))")
    assert _fresh(code) == "False True False"


# ------------------------------------------------------------------ each decision once per run


#: Functions that make a decision or a check a run needs once: (module, function, what it is).
ONCE_PER_RUN = (
    ("unsloth_grpo.training.checks", "config_problems", "the config check"),
    ("unsloth_grpo.training.checks", "check_rewards_on_data", "the rewards tried on the data"),
    ("unsloth_grpo.hardware.doctor.recipe", "recipe_problems", "the recipe's preflight on this machine"),
    ("unsloth_grpo.hardware.doctor.checks", "run_checks", "the environment's preflight"),
    ("unsloth_grpo.hardware.profiles", "cuda_devices", "the look at this machine's cards"),
    ("unsloth_grpo.hardware.backend", "decide", "the backend decision"),
    ("unsloth_grpo.hardware.backend", "backend_name", "the backend rule"),
    ("unsloth_grpo.hardware.backend", "use_backend", "acting on the decision (Unsloth imported when chosen)"),
    ("unsloth_grpo.hardware.backend", "load_model", "the model load"),
)

#: Run inside the child process: wrap every function of ONCE_PER_RUN (also where another module bound
#: it by name), record the package files on the stack when the model's weights are read, run the CLI.
_COUNTING_RUN = r"""
import collections, functools, importlib, json, os, sys, traceback
targets, argv = json.loads(sys.argv[1]), sys.argv[2:]
package = os.path.join(os.getcwd(), "unsloth_grpo") + os.sep
calls, stacks = collections.Counter(), []

def counted(key, real):
    @functools.wraps(real)
    def wrapper(*args, **kwargs):
        calls[key] += 1
        return real(*args, **kwargs)
    return wrapper

originals = {}
for module, name in targets:
    real = getattr(importlib.import_module(module), name)
    originals[id(real)] = (real, counted(f"{module}.{name}", real))
for mod in [m for n, m in list(sys.modules.items()) if n.startswith("unsloth_grpo")]:
    for attr, value in list(vars(mod).items()):
        if id(value) in originals and originals[id(value)][0] is value:
            setattr(mod, attr, originals[id(value)][1])

import transformers
real_load = transformers.AutoModelForCausalLM.from_pretrained.__func__
def from_pretrained(cls, *args, **kwargs):
    stacks.append([f"{os.path.relpath(f.filename)}:{f.name}" for f in traceback.extract_stack()[:-1]
                   if f.filename.startswith(package)])
    return real_load(cls, *args, **kwargs)
transformers.AutoModelForCausalLM.from_pretrained = classmethod(from_pretrained)

from unsloth_grpo.recipes import gsm8k
code = gsm8k.main(argv)
print("COUNTED " + json.dumps({"exit": code, "calls": calls, "stacks": stacks}))
"""


def _counted_run(tmp_path: Path, *argv: str) -> dict:
    import json

    env = {**__import__("os").environ, "PYTHONPATH": str(ROOT.parent)}
    targets = json.dumps([[module, name] for module, name, _ in ONCE_PER_RUN])
    out = subprocess.run([sys.executable, "-c", _COUNTING_RUN, targets, *argv], capture_output=True, text=True,
                         cwd=ROOT.parent, env=env)
    found = [line for line in out.stdout.splitlines() if line.startswith("COUNTED ")]
    assert found, out.stdout[-3000:] + out.stderr[-3000:]
    return json.loads(found[-1][len("COUNTED "):])


@pytest.mark.slow
def test_a_run_is_checked_decided_and_loaded_once(tmp_path):
    """A real run through the command line, with an SFT and a GRPO stage: each check and decision is
    made once (the card read once, the backend decided once, the model loaded once), and the model's
    name reaches ``from_pretrained`` through at most 4 files of the package."""
    stages = tmp_path / "stages.yaml"
    stages.write_text(
        "stages:\n"
        "  - {name: preformat, kind: sft, max_steps: 2, learning_rate: 5.0e-3, num_examples: 16}\n"
        "  - {name: format, max_steps: 1}\n")
    found = _counted_run(tmp_path, "--preset", "smoke", "--config", str(stages), "--output-dir",
                         str(tmp_path / "run"), "model.backend=transformers", "run.samples_every=0",
                         "data.num_synthetic=16")
    assert found["exit"] == 0
    twice = {f"{module}.{name} ({what})": found["calls"].get(f"{module}.{name}", 0)
             for module, name, what in ONCE_PER_RUN if found["calls"].get(f"{module}.{name}", 0) != 1}
    assert twice == {}, "each of these must run exactly once per run"
    (stack,) = found["stacks"]  # one model, for both stages
    files = list(dict.fromkeys(frame.split(":")[0] for frame in stack))
    assert len(files) <= 4, stack
    assert files[0].endswith("recipes/gsm8k.py") and files[-1].endswith("hardware/backend.py"), stack
