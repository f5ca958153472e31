"""Every relative link and image in the README and the docs pages points at a file that exists, and
every docs page is reachable from the README."""

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")


def _anchors(path: Path) -> set[str]:
    """GitHub-style anchors of a markdown file's headings."""
    out = set()
    for line in path.read_text().splitlines():
        m = re.match(r"#+\s+(.*)", line)
        if m:
            slug = re.sub(r"[^\w\- ]", "", m.group(1).strip().lower()).replace(" ", "-")
            out.add(slug)
    return out


def _links(page: Path):
    text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)  # code blocks hold no links
    for target in LINK.findall(text):
        if re.match(r"[a-z]+:", target) or target.startswith("#") and not target[1:]:
            continue
        yield target


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_links_and_images_resolve(page):
    broken = []
    for target in _links(page):
        path_part, _, anchor = target.partition("#")
        dest = (page.parent / path_part).resolve() if path_part else page
        if not dest.exists():
            broken.append(target)
        elif anchor and dest.suffix == ".md" and anchor not in _anchors(dest):
            broken.append(target)
    assert not broken, f"{page.relative_to(ROOT)} links to missing files or anchors: {broken}"


def test_every_docs_page_is_linked_from_the_readme():
    linked = {(ROOT / t.partition("#")[0]).resolve() for t in _links(ROOT / "README.md")}
    missing = [str(p.relative_to(ROOT)) for p in PAGES[1:] if p.resolve() not in linked]
    assert not missing, f"docs pages the README does not link: {missing}"


def test_commands_point_at_folders_a_run_writes():
    """A run keeps its adapter in the output directory itself (and checkpoints under checkpoints/,
    stages under stages/); a documented ``--model outputs/RUN/adapter`` names a folder no run has."""
    from unsloth_grpo.runs import CHECKPOINTS_DIR, STAGES_DIR

    wrong = []
    for page in PAGES:
        for path in re.findall(r"--model\s+(outputs/[^\s`)\"']+)", page.read_text()):
            parts = path.rstrip("/").split("/")
            if len(parts) > 2 and parts[2] not in (CHECKPOINTS_DIR, STAGES_DIR):
                wrong.append(f"{page.relative_to(ROOT)}: {path}")
    assert not wrong, f"--model paths no run writes: {wrong}"


#: ``from unsloth_grpo.x import a, b`` and ``unsloth_grpo.x.name`` written in prose: what a reader copies.
_FROM_IMPORT = re.compile(r"from (unsloth_grpo(?:\.\w+)*) import ([\w, ]+)")
_DOTTED = re.compile(r"`(unsloth_grpo(?:\.\w+)+)(?:\([^`]*\))?`")


def _named_in(text: str):
    for module, names in _FROM_IMPORT.findall(text):
        for name in names.split(","):
            name = name.split(" as ")[0].strip()  # ``import resolve_model_path as r``
            if name:
                yield module, name
    for dotted in _DOTTED.findall(text):
        yield dotted.rpartition(".")[0], dotted.rpartition(".")[2]


@pytest.mark.parametrize("page", [*PAGES, *sorted((ROOT / "notebooks").glob("*.ipynb"))],
                         ids=lambda p: str(p.relative_to(ROOT)))
def test_every_name_of_the_package_the_docs_and_notebooks_use_exists(page):
    # a module or a function that moved must take its docs and notebooks with it
    import importlib

    missing = []
    for module, name in sorted(set(_named_in(page.read_text()))):
        try:
            found = importlib.import_module(module)
        except ModuleNotFoundError:
            missing.append(f"{module} (module)")
            continue
        if not hasattr(found, name):
            try:
                importlib.import_module(f"{module}.{name}")
            except ModuleNotFoundError:
                missing.append(f"{module}.{name}")
    assert not missing, f"{page.relative_to(ROOT)} names what the package does not have: {missing}"


def test_the_docs_speak_of_the_project_and_its_users():
    """No page names a folder or a tool of the machines the project was developed on (issue 33: the GPU
    truth page named the development setup's device folder and its transfer tool)."""
    setup = re.compile(r"/work/|\.device/|device tool|farm-bench|workplace", re.I)
    found = [f"{page.relative_to(ROOT)}:{i}: {line.strip()}" for page in PAGES
             for i, line in enumerate(page.read_text().splitlines(), 1) if setup.search(line)]
    assert not found, f"pages that speak of the development machines, not of the project: {found}"
