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
    from unsloth_grpo.training.checkpoint import CHECKPOINTS_DIR, STAGES_DIR

    wrong = []
    for page in PAGES:
        for path in re.findall(r"--model\s+(outputs/[^\s`)\"']+)", page.read_text()):
            parts = path.rstrip("/").split("/")
            if len(parts) > 2 and parts[2] not in (CHECKPOINTS_DIR, STAGES_DIR):
                wrong.append(f"{page.relative_to(ROOT)}: {path}")
    assert not wrong, f"--model paths no run writes: {wrong}"
