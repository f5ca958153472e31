"""The package's shape: no import cycles, a ground floor that imports nothing above it, pure rewards,
a hardware wing that imports nothing from export or training, an export wing that stands on hardware,
modules found by name only in the registries, every subcommand in cli/, and no file or function longer
than a reader can hold.

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

def _structure():
    """tools/structure.py, the package's measures, loaded by its path (tools/ is no package)."""
    from conftest import load_script

    return load_script(ROOT.parent / "tools" / "structure.py", "_unsloth_grpo_structure")


STRUCTURE = _structure()
_modules, import_graph, folder_loops = STRUCTURE._modules, STRUCTURE.import_graph, STRUCTURE.folder_loops
MAX_FUNCTION_LINES, long_functions = STRUCTURE.MAX_FUNCTION_LINES, STRUCTURE.long_functions

#: The ground floor: config, data, runs and the grader (the grading/ package, every module in it) import only
#: each other.
GROUND_FLOOR = {f"{PACKAGE}.config", f"{PACKAGE}.data", f"{PACKAGE}.runs", f"{PACKAGE}.grading"}


def _ground(module: str) -> bool:
    return any(_under(module, floor) for floor in GROUND_FLOOR)


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
#: them with a model is the ``rewards`` command's (cli/). The hardware wing knows the card and loads
#: the models: it reads run directories through ``runs`` and builds the built-in models, and imports
#: nothing from export, training, evaluation, tasks or above. The export wing (merge, GGUF, the model
#: card) stands on hardware: it loads through hardware's loader and asks its backend decision, and
#: imports nothing from training, evaluation, tasks or above.
LOW_WINGS = {
    f"{PACKAGE}.rewards": ("rewards: pure functions of text", (f"{PACKAGE}.rewards",)),
    f"{PACKAGE}.models": ("built-in models", (f"{PACKAGE}.models",)),
    f"{PACKAGE}.hardware": ("hardware: the card, the loader",
                            (f"{PACKAGE}.hardware", f"{PACKAGE}.models")),
    f"{PACKAGE}.export": ("export: merge, GGUF, the model card",
                          (f"{PACKAGE}.export", f"{PACKAGE}.hardware", f"{PACKAGE}.models")),
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
    f"{PACKAGE}.rewards._registry": "the reward registry: the library's reward families, and the task registry "
                                    "for a task's reward name (TASK_REWARDS)",
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


def test_no_two_folders_of_the_package_import_each_other():
    assert folder_loops() == []


#: Most lines a package file should have: past it, a file needs a table of contents and is several files.
MAX_LINES = 600

#: Package files allowed past :data:`MAX_LINES`, each with the reason it has not been split yet.
LONG_FILES = {
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


def test_no_function_is_longer_than_a_reader_can_hold():
    assert long_functions() == []


#: The config layer's lines today (``python tools/structure.py``): issue 34 asks for at most 450; until a
#: change gets it there, it may shrink and not grow.
MAX_CONFIG_LAYER_LINES = 1129


def test_the_config_layer_does_not_grow():
    assert STRUCTURE.config_layer_lines(ROOT.parent) <= MAX_CONFIG_LAYER_LINES


#: Most files that may compare a value with a backend's name ("unsloth", "transformers"): the names and
#: their predicates (config.py), and the backend rule (hardware/backend.py). The rest ask the predicates.
MAX_BACKEND_COMPARERS = 2


def test_backend_names_are_compared_in_at_most_two_files():
    found = STRUCTURE.backend_comparers(STRUCTURE._files(ROOT))
    assert len(found) <= MAX_BACKEND_COMPARERS, found


#: Most package files that read a config's model name (``X.model.name``, or ``m.name`` after ``m = X.model``).
#: What the name means is :func:`unsloth_grpo.models.ref.model_ref`'s to say; the files below the ones
#: that decide are handed the ref, or the value decided from it (the loaded model's ``info.model_name``).
MAX_MODEL_NAME_READERS = 6


def model_name_readers(root: Path = ROOT) -> list[str]:
    return STRUCTURE.model_name_readers(STRUCTURE._files(root))


def test_few_files_read_a_configs_model_name():
    readers = model_name_readers()
    assert len(readers) <= MAX_MODEL_NAME_READERS, readers


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
        f"{PACKAGE}.hardware.backend (hardware: the card, the loader) imports {PACKAGE}.{target}"]


@pytest.mark.parametrize("module, source, found", [
    ("hardware/backend.py", "def f():\n    from unsloth_grpo.export import card\n",
     f"{PACKAGE}.hardware.backend (hardware: the card, the loader) imports {PACKAGE}.export.card"),
    ("export/merge.py", "from unsloth_grpo.training import checkpoint\n",
     f"{PACKAGE}.export.merge (export: merge, GGUF, the model card) imports {PACKAGE}.training.checkpoint"),
    ("export/merge.py", "import unsloth_grpo.evaluation\n",
     f"{PACKAGE}.export.merge (export: merge, GGUF, the model card) imports {PACKAGE}.evaluation"),
])
def test_hardware_reaching_into_export_and_export_reaching_above_hardware_are_found(tmp_path, module, source, found):
    pkg = _write(tmp_path, {
        "__init__.py": "", "config.py": "", "hardware/__init__.py": "", "models/__init__.py": "",
        "export/__init__.py": "", "export/card.py": "", "training/__init__.py": "", "training/checkpoint.py": "",
        "evaluation/__init__.py": "",
        # what each wing may use: export loads through hardware, both build the built-in models
        "export/loads.py": "from unsloth_grpo.hardware.backend import load\nfrom unsloth_grpo.models import x\n",
        "hardware/backend.py": "from unsloth_grpo.config import *\n",
    })
    (pkg / module).write_text((pkg / module).read_text() + source if (pkg / module).exists() else source)
    assert upward_imports(import_graph(pkg)) == [found]


def test_a_subcommand_outside_cli_is_found(tmp_path):
    pkg = _write(tmp_path, {"__init__.py": "", "cli/__init__.py": "", "cli/plan.py": "def f(s):\n    s.add_parser('plan')\n",
                            "hardware/__init__.py": "", "hardware/doctor.py": "def f(s):\n    s.add_parser('doctor')\n"})
    assert subcommands_outside_cli(pkg) == [f"{PACKAGE}.hardware.doctor:2"]


@pytest.mark.parametrize("source", [
    "def f(info):\n    return info.backend == 'unsloth'\n",
    "def f(name):\n    return name in ('transformers', 'auto')\n",
    "def f(name):\n    match name:\n        case 'unsloth':\n            return 1\n",
])
def test_a_third_file_comparing_backend_names_is_found(tmp_path, source):
    pkg = _write(tmp_path, {
        "__init__.py": "",
        "config.py": "def is_unsloth(b):\n    return b == 'unsloth'\n",
        "hardware/backend.py": "import sys\ndef imported():\n    return 'unsloth' in sys.modules\n",
        # asking the predicate, or naming a backend without comparing, is no comparison
        "hardware/memory.py": "from unsloth_grpo.config import is_unsloth\nX = 'unsloth'\n"
                              "def f(b):\n    return is_unsloth(b)\n",
        "training/train.py": source,
    })
    found = STRUCTURE.backend_comparers(STRUCTURE._files(pkg))
    assert found == [f"{PACKAGE}/config.py", f"{PACKAGE}/hardware/backend.py", f"{PACKAGE}/training/train.py"]
    assert len(found) > MAX_BACKEND_COMPARERS


def test_a_seventh_file_reading_the_model_name_is_found(tmp_path):
    files = {"__init__.py": "", "models/__init__.py": "",
             # handed the ref, or the loaded model's info: not readers
             "models/ref.py": "def f(ref, loaded):\n    return ref.name, loaded.info.model_name\n",
             "alias.py": "def f(cfg):\n    m = cfg.model\n    return m.name\n"}
    files.update({f"reader{i}.py": "def f(cfg):\n    return cfg.model.name\n" for i in range(MAX_MODEL_NAME_READERS)})
    readers = model_name_readers(_write(tmp_path, files))
    assert len(readers) == MAX_MODEL_NAME_READERS + 1 and f"{PACKAGE}/alias.py" in readers
    assert f"{PACKAGE}/models/ref.py" not in readers


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


def test_a_long_function_and_a_stale_allowance_are_found(tmp_path):
    body = "    x = 1\n" * MAX_FUNCTION_LINES  # with its def line, one past the limit
    pkg = _write(tmp_path, {
        "__init__.py": "",
        "big.py": "def short():\n    pass\n\n\nclass C:\n    def long(self):\n" + body.replace("    ", "        "),
        "tamed.py": "def was_long():\n    pass\n",
        "kept.py": "def kept():\n" + body,
    })
    allowed = {"tamed.py:was_long": "split since", "gone.py:f": "file removed", "kept.py:kept": "still long"}
    assert long_functions(pkg, allowed) == [
        f"big.py:long:6: {MAX_FUNCTION_LINES + 1} lines",
        f"gone.py:f: not past {MAX_FUNCTION_LINES} lines, still allowed",
        f"tamed.py:was_long: not past {MAX_FUNCTION_LINES} lines, still allowed",
    ]


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


def test_the_reward_registry_alone_loads_no_task_for_a_name_no_task_declares():
    # the rewards package sits below the tasks: importing it, or asking it for a name no task declares,
    # loads no task
    code = ("import sys\n"
            "from unsloth_grpo.rewards import REGISTRY, get_reward\n"
            "get_reward('correctness'); known = 'no_such_reward' in REGISTRY\n"
            "print(known, any(m.startswith('unsloth_grpo.tasks') for m in sys.modules))")
    assert _fresh(code) == "False False"


def test_a_task_reward_is_found_by_name_whatever_was_imported_first():
    # docs/rewards.md lists countdown_equation beside correctness; a user should not need to know that the
    # task registry had to be imported first. Only the task that declares it is loaded.
    code = ("import sys\n"
            "from unsloth_grpo.rewards import available_rewards, get_reward\n"
            "fn = get_reward('countdown_equation')\n"
            "tasks = sorted(m for m in sys.modules if m.startswith('unsloth_grpo.tasks.'))\n"
            "print(fn(['<answer>(3 + 4) * 2</answer>'], answer=['{\"numbers\": [3, 4, 2], \"target\": 14}']), tasks)")
    assert _fresh(code) == "[1.0] ['unsloth_grpo.tasks._recipe', 'unsloth_grpo.tasks._task', 'unsloth_grpo.tasks.countdown']"
    # and the catalogue holds every task's rewards, the same whether the task registry was imported or not
    listed = "from unsloth_grpo.rewards import available_rewards\nprint(available_rewards())"
    assert _fresh(listed) == _fresh("import unsloth_grpo.tasks\n" + listed)
    assert "'countdown_equation'" in _fresh(listed) and "'tests_passed'" in _fresh(listed)
    code = ("from unsloth_grpo.rewards import get_reward\n"
            "try:\n    get_reward('no_such_reward')\nexcept (KeyError, ValueError) as exc:\n    print(exc)\n")
    assert "unknown reward 'no_such_reward'" in _fresh(code) and "unsloth_grpo.tasks" not in _fresh(code)


def test_the_table_of_task_rewards_is_what_the_task_modules_declare():
    # the reward registry loads a task's module by this table; a reward a task declares and the table
    # leaves out would be unknown by name until something imported the task
    import importlib

    from unsloth_grpo.rewards._registry import TASK_REWARDS, declared_rewards
    from unsloth_grpo.tasks import available_tasks

    declared = {reward: task for task in available_tasks()
                for reward in declared_rewards(importlib.import_module(f"unsloth_grpo.tasks.{task}"))}
    assert TASK_REWARDS == declared


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
