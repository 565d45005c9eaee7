"""scripts/client_suite_confluent_share.py: where the suite's files come from and how they are checked.

The suite itself (minutes, and its source from GitHub) runs from scripts/run-tests.sh; these tests cover
the script's own logic on a small stand-in tree: every kind of source (tarball with GitHub's top-level
directory, git repository holding the tag, checkout), the content hash, the cache, the exit code 3 when
nothing can be had, and the checked-in expectation file's format.
"""

from __future__ import annotations

import importlib
import io
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
suite = importlib.import_module("client_suite_confluent_share")

FILES = {
    "tests/__init__.py": "",
    "tests/integration/share_consumer/test_x.py": "def test_x():\n    pass\n",
    "pyproject.toml": "[tool.pytest.ini_options]\n",
    "tox.ini": "[tox]\n",
    "LICENSE": "Apache 2.0\n",
    "src/not_taken.c": "int x;\n",  # outside SUITE_PATHS: neither copied nor hashed
}


@pytest.fixture
def checkout(tmp_path, monkeypatch):
    """A stand-in source tree, SUITE_CONTENT_SHA256 pinned to its hash, an empty cache, no network."""
    tree = tmp_path / "checkout"
    for rel, text in FILES.items():
        (tree / rel).parent.mkdir(parents=True, exist_ok=True)
        (tree / rel).write_text(text)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setattr(suite, "TARBALL_URL", "http://127.0.0.1:9/unreachable.tar.gz")
    monkeypatch.setattr(suite, "SUITE_CONTENT_SHA256", suite.content_hash(str(tree)))
    return tree


def _taken(dest: Path) -> set[str]:
    return {str(p.relative_to(dest)) for p in dest.rglob("*") if p.is_file()}


def test_a_checkout_is_copied_checked_and_cached(checkout, tmp_path):
    dest = tmp_path / "suite"
    assert suite.fetch_suite(str(dest), str(checkout)) == str(checkout)
    assert _taken(dest) == {k for k in FILES if not k.startswith("src/")}
    assert os.path.exists(suite.cached_copy())
    # the next run finds the cache without any source
    again = tmp_path / "again"
    assert suite.fetch_suite(str(again), None) == suite.cached_copy()
    assert _taken(again) == _taken(dest)


def test_a_github_style_tarball_and_a_git_repository_give_the_same_files(checkout, tmp_path):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        tar.add(checkout, arcname="confluent-kafka-python-2.15.0")
    tarball = tmp_path / "v.tar.gz"
    tarball.write_bytes(buf.getvalue())
    from_tar = tmp_path / "from-tar"
    assert suite.fetch_suite(str(from_tar), str(tarball)) == str(tarball)

    git = shutil.which("git")
    if git is None:
        pytest.skip("git is not installed")
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@t"}
    for args in (["init", "-q"], ["add", "-A"], ["commit", "-qm", "c"],
                 ["tag", f"v{suite.CONFLUENT_KAFKA_PYTHON_VERSION}"]):
        subprocess.run([git, *args], cwd=checkout, env=env, check=True)
    from_git = tmp_path / "from-git"
    assert suite.fetch_suite(str(from_git), str(checkout)) == str(checkout)
    assert _taken(from_git) == _taken(from_tar) == {k for k in FILES if not k.startswith("src/")}


def test_altered_content_is_refused_and_nothing_else_is_there(checkout, tmp_path):
    (checkout / "tests" / "integration" / "share_consumer" / "test_x.py").write_text("def test_x():\n    1\n")
    with pytest.raises(suite.SourceUnavailable) as e:
        suite.fetch_suite(str(tmp_path / "suite"), str(checkout))
    text = str(e.value)
    assert "is not SUITE_CONTENT_SHA256" in text and "unreachable.tar.gz" in text
    assert not os.path.exists(suite.cached_copy())


def test_no_source_exits_3_without_running_anything(checkout, capsys):
    assert suite.main(["--source", str(checkout / "missing")]) == 3
    assert "NOT RUN" in capsys.readouterr().out


def test_the_expectation_file_parses_and_names_only_share_consumer_tests():
    expected = suite.read_expectations(suite.EXPECTATIONS)
    assert expected, "the expectation file lists the schema-registry tests at least"
    assert all(nodeid.startswith(suite.TEST_DIR + "/") for nodeid in expected)
    deselected = {n for n, e in expected.items() if e.outcome == "deselect"}
    assert {n.split("::")[1].split("[")[0] for n in deselected} == {"test_schema_registry_roundtrip",
                                                                   "test_schema_registry_poison_marked"}
