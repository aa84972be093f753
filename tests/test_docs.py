"""The docs a clone carries: every link stays inside the repository and leads somewhere, and
the references read as references (no lab-notebook entries such as "fixed in session 14")."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
HEADING = re.compile(r"^#+\s+(.*)$", re.M)
# history lives in CHANGELOG.md and git: the references say what holds now
DIARY = re.compile(r"\b[Ss]essions? \d+\b")
CODE_DIRS = ("zksched", "tools", "sim", "scripts")
CONFLICT = re.compile(r"^(<{7}|={7}|>{7})( |$)")


def anchor(heading: str) -> str:
    """GitHub's anchor for a heading."""
    text = re.sub(r"`", "", heading.strip().lower())
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    return {anchor(h) for h in HEADING.findall(path.read_text())}


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_links_lead_to_files_of_this_repository(doc: Path) -> None:
    broken = []
    for target in LINK.findall(doc.read_text()):
        if re.match(r"[a-z]+:", target):
            continue  # a web address
        file, _, fragment = target.partition("#")
        path = (doc.parent / file).resolve() if file else doc
        if ROOT not in path.parents and path != ROOT:
            broken.append(f"{target}: outside the repository")
        elif not path.exists():
            broken.append(f"{target}: no such file")
        elif fragment and path.suffix == ".md" and fragment not in anchors(path):
            broken.append(f"{target}: no such heading")
    assert broken == []


@pytest.mark.parametrize("doc", [*DOCS, ROOT / "CHANGELOG.md"], ids=lambda p: p.name)
def test_no_merge_conflict_is_left(doc: Path) -> None:
    marks = [n for n, line in enumerate(doc.read_text().splitlines(), 1) if CONFLICT.match(line)]
    assert marks == []


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_references_hold_no_diary(doc: Path) -> None:
    lines = [
        f"{doc.name}:{n}: {line.strip()[:80]}"
        for n, line in enumerate(doc.read_text().splitlines(), 1)
        if DIARY.search(line)
    ]
    assert lines == []


def test_code_comments_hold_no_diary() -> None:
    lines = [
        f"{path.relative_to(ROOT)}:{n}"
        for folder in CODE_DIRS
        for path in sorted((ROOT / folder).rglob("*"))
        if path.is_file() and (path.suffix == ".py" or folder == "scripts")
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if DIARY.search(line)
    ]
    assert lines == []
