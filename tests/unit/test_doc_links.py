"""Every relative link of the Markdown docs, and every section of docs/architecture.md that a source
file cites by its anchor, points at a file that exists and at a heading it has.

Anchors are computed as GitHub renders them: the heading's text without Markdown markup, lower
case, punctuation dropped, spaces turned into hyphens, and ``-1``, ``-2`` ... appended to repeats.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DOCS = sorted([REPO / "README.md", *(REPO / "docs").glob("*.md")])
SOURCES = ("carico", "carico_app", "agent", "aggregator", "scheduler_ext", "repack", "protos")
SOURCE_SUFFIXES = {".py", ".proto", ".pyi", ".js", ".html", ".yaml", ".json", ".sh"}

FENCE = re.compile(r"^(```|~~~)")
LINK = re.compile(r"(?<!!)\[(?:[^\]\[]|\[[^\]]*\])*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
CODE_SPAN = re.compile(r"`[^`]*`")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
CITED = re.compile(r"docs/architecture\.md#([A-Za-z0-9_-]+)")


def github_anchor(heading: str) -> str:
    """The anchor GitHub gives a heading's text (before de-duplication).

    >>> github_anchor("Cost and capacity")
    'cost-and-capacity'
    >>> github_anchor("`carico certs`: mTLS material")
    'carico-certs-mtls-material'
    >>> github_anchor("My pod is pending — how to read `/api/v1/explain`")
    'my-pod-is-pending--how-to-read-apiv1explain'
    """
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link keeps its text
    text = text.replace("`", "").strip().lower()
    text = "".join(ch for ch in text if ch.isalnum() or ch in " -_")
    return text.replace(" ", "-")


def _prose_lines(path: Path) -> list[str]:
    """The file's lines outside fenced code blocks."""
    lines, fenced = [], False
    for line in path.read_text(encoding="utf-8").splitlines():
        if FENCE.match(line.lstrip()):
            fenced = not fenced
            continue
        if not fenced:
            lines.append(line)
    return lines


def anchors(path: Path) -> set[str]:
    seen: dict[str, int] = {}
    found = set()
    for line in _prose_lines(path):
        match = HEADING.match(line)
        if match is None:
            continue
        base = github_anchor(match.group(2))
        count = seen.get(base, 0)
        seen[base] = count + 1
        found.add(base if count == 0 else f"{base}-{count}")
    return found


def links(path: Path) -> list[str]:
    return [
        m.group(1)
        for line in _prose_lines(path)
        for m in LINK.finditer(CODE_SPAN.sub("", line))
        if not re.match(r"[a-z][a-z0-9+.-]*:", m.group(1))  # http:, https:, mailto: ...
    ]


def _broken(source: Path, target: str) -> str | None:
    file_part, _, anchor = target.partition("#")
    dest = (source.parent / file_part).resolve() if file_part else source
    if not dest.exists():
        return f"{target}: {dest.relative_to(REPO) if dest.is_relative_to(REPO) else dest} missing"
    if anchor and dest.suffix == ".md" and anchor not in anchors(dest):
        return f"{target}: no heading with anchor #{anchor} in {dest.name}"
    return None


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(REPO)))
def test_every_relative_link_resolves(doc: Path) -> None:
    found = links(doc)
    broken = [b for target in found if (b := _broken(doc, target)) is not None]
    assert not broken, "\n".join(broken)


def test_the_docs_do_link_to_each_other() -> None:
    # the guard above must have something to guard: the README points into docs/
    assert any(t.startswith("docs/") for t in links(REPO / "README.md"))


def test_every_cited_section_of_the_architecture_exists() -> None:
    sections = anchors(REPO / "docs" / "architecture.md")
    cited: dict[str, set[str]] = {}
    for package in (*SOURCES, "tests", "deploy", "docs"):
        for path in (REPO / package).rglob("*"):
            if path.suffix not in SOURCE_SUFFIXES | {".md"} or not path.is_file():
                continue
            for anchor in CITED.findall(path.read_text(encoding="utf-8", errors="replace")):
                cited.setdefault(anchor, set()).add(str(path.relative_to(REPO)))
    cited = {a: where for a, where in cited.items() if a not in sections}
    assert not cited, cited
