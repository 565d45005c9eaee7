"""Issue 29: the package installs where the record layer's C accelerator cannot be compiled, and then
runs on pure Python.

A copy of the package's sources is built into a wheel with ``CC=false`` (a compiler that always
fails, as on a machine without one), installed into a directory of its own, and from there: the wheel
holds no compiled module, the record layer says it runs on pure Python, and record-layer tests pass
(on the ``python`` path only: the ``c`` one is not collected). The sdist carries the C source.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE_FILES = ["pyproject.toml", "setup.py", "README.md", "LICENSE"]


def copy_sources(dest: Path) -> None:
    """What a checkout gives pip: the metadata and the package, without anything built in place."""
    for name in PACKAGE_FILES:
        if (ROOT / name).exists():
            shutil.copy(ROOT / name, dest / name)
    shutil.copytree(
        ROOT / "minibroker",
        dest / "minibroker",
        ignore=shutil.ignore_patterns("__pycache__", "*.so", "*.pyc"),
    )


def run(args, env, cwd) -> subprocess.CompletedProcess:
    return subprocess.run(args, env=env, cwd=cwd, capture_output=True, text=True, timeout=300)


@pytest.mark.slow
def test_without_a_compiler_the_wheel_installs_and_runs_on_pure_python(tmp_path):
    src, dist, site = tmp_path / "src", tmp_path / "dist", tmp_path / "site"
    src.mkdir()
    copy_sources(src)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHONPATH", "MINIBROKER_"))}
    env.update(CC="false", PIP_DISABLE_PIP_VERSION_CHECK="1")
    built = run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(dist), str(src)], env, tmp_path
    )
    assert built.returncode == 0, built.stdout + built.stderr
    (wheel,) = dist.glob("minibroker-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert "minibroker/records/accelerator.py" in names
    assert not [n for n in names if n.endswith((".so", ".pyd"))], names
    installed = run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(site), str(wheel)],
        env,
        tmp_path,
    )
    assert installed.returncode == 0, installed.stdout + installed.stderr

    env["PYTHONPATH"] = str(site)
    said = run(
        [
            sys.executable,
            "-c",
            "import minibroker.records.accelerator as a; print(a.__file__); print(a.describe())",
        ],
        env,
        tmp_path,
    )
    where, path = said.stdout.splitlines()
    assert Path(where).is_relative_to(site), said.stdout
    assert path.startswith("pure Python (the C accelerator is not built"), said.stdout
    # record-layer tests from this checkout, on the installed package: the python path only
    tests = ["tests/records/test_hostile_records.py", "tests/records/test_formats.py"]
    result = run(
        [
            sys.executable,
            "-P",
            "-m",
            "pytest",
            "-n",
            "0",
            "-q",
            "-m",
            "not slow",
            "-p",
            "no:cacheprovider",
            "-rs",
            *tests,
        ],
        env,
        ROOT,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    summary = result.stdout.strip().splitlines()[-1]
    assert " passed" in summary and "failed" not in summary, summary
    listed = run(
        [sys.executable, "-P", "-m", "pytest", "-n", "0", "-q", "--co", "-p", "no:cacheprovider", *tests],
        env,
        ROOT,
    )
    assert "[python]" in listed.stdout and "[c]" not in listed.stdout, listed.stdout[-2000:]


@pytest.mark.slow
def test_the_sdist_carries_the_c_source(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    copy_sources(src)
    made = run(
        [sys.executable, "setup.py", "-q", "sdist", "-d", str(tmp_path / "sdist")], dict(os.environ), src
    )
    assert made.returncode == 0, made.stdout + made.stderr
    (sdist,) = (tmp_path / "sdist").glob("minibroker-*.tar.gz")
    names = tarfile.open(sdist).getnames()
    assert any(n.endswith("/minibroker/records/_accelerator.c") for n in names), names
    assert any(n.endswith("/setup.py") for n in names), names
