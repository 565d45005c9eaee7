"""The README's API table is the registry's, its set-up section has exactly two commands, and it names every
command."""

from __future__ import annotations

import io
import os
import re
from contextlib import redirect_stdout

from minibroker.cli import main

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def read(*path: str) -> str:
    with open(os.path.join(ROOT, *path), encoding="utf-8") as f:
        return f.read()


def api_table() -> str:
    out = io.StringIO()
    with redirect_stdout(out):
        assert main(["apis", "--markdown"]) == 0
    return out.getvalue()


def test_readme_api_table_matches_the_registry():
    text = read("README.md")
    block = re.search(r"<!-- apis:start -->\n(.*?)<!-- apis:end -->", text, re.S)
    assert block, "README lost its apis markers"
    assert block.group(1) == api_table(), (
        "README's API table is stale: replace the block between the apis markers with the output of "
        "`python -m minibroker apis --markdown`")


def test_readme_has_exactly_two_setup_commands():
    text = read("README.md")
    section = text.split("## Set up", 1)[1].split("\n## ", 1)[0]
    commands = [line.strip() for line in section.splitlines() if line.startswith("    ")]
    assert commands == ["pip install . && minibroker serve", "bash scripts/run-tests.sh"]
    ci = read(".ci", "run")
    assert "bash scripts/run-tests.sh" in ci


def test_readme_and_tools_doc_name_every_command():
    """Every subcommand of ``minibroker`` is in the README's list of console tools and has its row in
    docs/tools.md's table (``serve`` is the README's own subject)."""
    import argparse

    from minibroker.cli import build_parser

    [commands] = [a.choices for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)]
    section = read("README.md").split("### Console tools", 1)[1].split("\n### ", 1)[0]
    tools_table = read("docs", "tools.md").split("\n## ", 1)[0]
    for name in commands:
        if name == "serve":
            continue
        assert f"`{name}`" in section or f"`minibroker {name}`" in section, f"README omits {name}"
        assert f"| `minibroker {name}" in tools_table, f"docs/tools.md's table omits {name}"
