"""The README starts with use and is short enough to read in ten minutes; its
table of contents and every relative link in the docs lead somewhere."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"
DOCS = [
    README,
    REPO / "deploy" / "README.md",
    REPO / "CHANGELOG.md",
    *sorted((REPO / "docs").glob("*.md")),
]
# About 250 words a minute.
TEN_MINUTES_OF_WORDS = 2500


def _headings(text: str) -> list[str]:
    headings, fenced = [], False
    for line in text.splitlines():
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced and line.startswith("#"):
            headings.append(line)
    return headings


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading."""
    text = heading.lstrip("#").strip().lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def test_the_readme_starts_with_use_and_reads_in_ten_minutes() -> None:
    text = README.read_text()
    top = [h for h in _headings(text) if h.startswith("## ")]
    assert top[:5] == [
        "## Contents",
        "## Quick start",
        "## Upload and download",
        "## Configuration",
        "## Deploy",
    ]
    assert "## How it works" not in text
    assert len(text.split()) <= TEN_MINUTES_OF_WORDS
    quick_start = text.split("## Quick start", 1)[1].split("```sh", 1)[1].split("```", 1)[0]
    commands = [line for line in quick_start.splitlines() if line.strip()]
    assert [c.split("#")[0].split()[-1] for c in commands] == ["./scripts/run", "./scripts/test"]


def test_the_readmes_contents_lead_to_its_headings() -> None:
    text = README.read_text()
    contents = text.split("## Contents", 1)[1].split("\n## ", 1)[0]
    anchors = re.findall(r"\]\(#([^)]+)\)", contents)
    slugs = {_slug(h) for h in _headings(text)}
    assert anchors and set(anchors) <= slugs, set(anchors) - slugs
    top = {_slug(h) for h in _headings(text) if h.startswith("## ")} - {"contents"}
    assert top <= set(anchors), top - set(anchors)


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(REPO)))
def test_relative_links_lead_to_files_and_headings(doc: Path) -> None:
    text = doc.read_text()
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if re.match(r"[a-z]+:", target):
            continue  # https:, mailto:
        path, _, anchor = target.partition("#")
        file = (doc.parent / path).resolve() if path else doc
        assert file.exists(), f"{doc.name}: {target}"
        if anchor and file.suffix == ".md":
            slugs = {_slug(h) for h in _headings(file.read_text())}
            assert anchor in slugs, f"{doc.name}: {target}"


def test_the_configuration_page_lists_every_setting() -> None:
    """docs/configuration.md is where the README sends a reader for the
    settings it leaves out: none may be missing there."""
    from app.config.settings import Settings

    text = (REPO / "docs" / "configuration.md").read_text()
    listed = set(re.findall(r"`([A-Z][A-Z0-9_]*)`", text))
    missing = []
    for name, info in Settings.model_fields.items():
        if name.startswith("legacy_"):
            continue  # old names: their successors are listed
        alias = info.validation_alias
        env_name = alias if isinstance(alias, str) else getattr(alias, "choices", [name])[0]
        if env_name not in listed:
            missing.append(env_name)
    assert not missing, f"docs/configuration.md lacks {missing}"
