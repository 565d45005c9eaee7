"""No reference in the repository points at a missing file or section, and the licence is the declared one.

Checked: every relative markdown link of README.md and docs/*.md (the file exists inside the repository;
an ``#anchor`` is a heading of the target as GitHub slugs it); every ``path.md#anchor`` and every
``path.md, "Section"`` / ``path.md ("Section")`` in any tracked text file (compose files, Dockerfiles,
scripts and source comments included: the section is a heading of that file, or the start of one).
"""

from __future__ import annotations

import os
import re
import subprocess
import tomllib
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
MARKDOWN = ["README.md", *sorted(f"docs/{p.name}" for p in (ROOT / "docs").glob("*.md"))]
FENCE_RE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
HEADING_RE = re.compile(r"^(#{1,6})\s+(.*?)(?:\s+#+)?\s*$")
LINK_RE = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)|^\s*\[[^\]]+\]:\s*(\S+)")
SECTION_REF_RE = re.compile(r"([\w./-]+\.md)(?:, | \()\"([^\"]+)\"")
ANCHOR_REF_RE = re.compile(r"([\w./-]+\.md)#([\w-]+)")
TEXT_SUFFIXES = (".md", ".py", ".sh", ".yaml", ".yml", ".toml", ".txt", ".html", ".properties")


def prose_lines(path: Path, keep_code_spans: bool = False) -> list[tuple[int, str]]:
    """(line number, text) outside fenced code blocks, inline code spans removed unless kept (a heading's
    code is part of its text)."""
    out, fence = [], None
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        m = FENCE_RE.match(line)
        if m and (fence is None or m.group(1)[0] == fence[0] and len(m.group(1)) >= len(fence)):
            fence = m.group(1) if fence is None else None
            continue
        if fence is None:
            out.append((number, line if keep_code_spans else re.sub(r"`[^`]*`", "", line)))
    return out


def github_slug(heading: str) -> str:
    """GitHub's anchor for a heading: its text (links and code marks dropped), lower case, punctuation
    other than ``-`` and ``_`` removed, each space a ``-``."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading).replace("`", "")
    text = re.sub(r"(\*\*|__|\*)", "", text)
    return "".join(c for c in text.strip().lower() if c.isalnum() or c in " -_").replace(" ", "-")


@cache
def headings(path: Path) -> tuple[list[str], set[str]]:
    """A markdown file's headings (plain text) and their anchors; a repeated slug gets -1, -2, ..."""
    texts, anchors, seen = [], set(), {}
    for _, line in prose_lines(path, keep_code_spans=True):
        m = HEADING_RE.match(line)
        if m:
            text = m.group(2)
            slug = github_slug(text)
            n = seen.get(slug, 0)
            seen[slug] = n + 1
            anchors.add(slug if n == 0 else f"{slug}-{n}")
            texts.append(re.sub(r"[`*]", "", text))
    return texts, anchors


def tracked_text_files() -> list[str]:
    files = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    return [f for f in files.splitlines()
            if (f.endswith(TEXT_SUFFIXES) or os.path.basename(f) == "Dockerfile") and (ROOT / f).is_file()]


def resolve(source: str, target: str) -> Path | None:
    """A path named in ``source``: relative to its directory, else to the repository root (comments name
    docs/x.md from the root); None when it exists in neither or lies outside the repository."""
    for base in (ROOT / source).parent, ROOT:
        path = (base / target).resolve()
        if path.exists() and path.is_relative_to(ROOT):
            return path
    return None


def test_github_slug():
    assert github_slug("TLS and SASL listeners: `--command-config`") == (
        "tls-and-sasl-listeners---command-config")
    assert github_slug("Podman on machines without Docker (and this project's test)") == (
        "podman-on-machines-without-docker-and-this-projects-test")
    assert github_slug("The record layer (`minibroker/records/`)") == "the-record-layer-minibrokerrecords"
    assert github_slug("Several log dirs (JBOD)") == "several-log-dirs-jbod"


@pytest.mark.parametrize("doc", MARKDOWN)
def test_every_relative_link_resolves(doc):
    broken = []
    for number, line in prose_lines(ROOT / doc):
        for m in LINK_RE.finditer(line):
            target = m.group(1) or m.group(2)
            if re.match(r"[a-z][a-z0-9+.-]*:", target, re.I):  # https:, mailto: ...
                continue
            path_part, _, anchor = target.partition("#")
            path = (ROOT / doc).resolve() if not path_part else resolve(doc, path_part)
            if path is None or not (ROOT / doc).parent.joinpath(path_part).resolve().is_relative_to(ROOT):
                broken.append(f"{doc}:{number}: {target}: no such file in the repository")
            elif anchor and path.suffix == ".md" and anchor not in headings(path)[1]:
                broken.append(f"{doc}:{number}: {target}: no heading with the anchor #{anchor}")
    assert not broken, "\n".join(broken)


def test_every_named_section_and_anchor_exists():
    broken = []
    for source in tracked_text_files():
        if source == "tests/test_doc_links.py":  # its docstring shows the patterns with made-up names
            continue
        lines = enumerate((ROOT / source).read_text(encoding="utf-8", errors="replace").splitlines(), 1)
        for number, line in lines:
            for m in ANCHOR_REF_RE.finditer(line):
                path = resolve(source, m.group(1))
                if path is None:
                    broken.append(f"{source}:{number}: {m.group(0)}: no such file")
                elif m.group(2) not in headings(path)[1]:
                    broken.append(f"{source}:{number}: {m.group(0)}: no heading with that anchor")
            for m in SECTION_REF_RE.finditer(line):
                path = resolve(source, m.group(1))
                if path is None:
                    broken.append(f"{source}:{number}: {m.group(1)}: no such file")
                elif not any(text.startswith(re.sub(r"[`*]", "", m.group(2))) for text in headings(path)[0]):
                    broken.append(f"{source}:{number}: {m.group(1)} has no section {m.group(2)!r}")
    assert not broken, "\n".join(broken)


def test_nothing_points_outside_the_repository():
    """The repository stands alone: no reference to a sibling checkout (../shared and the like)."""
    outside = [f"{source}:{number}: {line.strip()}" for source in ["compose.yaml", "Dockerfile", *MARKDOWN]
               for number, line in enumerate((ROOT / source).read_text(encoding="utf-8").splitlines(), 1)
               if re.search(r"(?<![\w.])\.\./(shared|kafka-protocol)\b", line)]
    assert not outside, "\n".join(outside)


def test_license_matches_the_declared_one():
    text = (ROOT / "LICENSE").read_text(encoding="utf-8")
    assert text.split()[:4] == ["Apache", "License", "Version", "2.0,"]
    assert "TERMS AND CONDITIONS FOR USE, REPRODUCTION, AND DISTRIBUTION" in text
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    assert pyproject["project"]["license"] == {"text": "Apache-2.0"}
    dockerfile = (ROOT / "Dockerfile").read_text(encoding="utf-8")
    assert 'org.opencontainers.image.licenses="Apache-2.0"' in dockerfile
