"""MINIBROKER_SKIP_CONTAINER / MINIBROKER_SKIP_SPARK: honoured in a local run, ignored under CI (issue 15).

Checked three ways: the rule itself (tests/suite_switches.py), the suites under pytest, and
scripts/run-tests.sh's installs, run with stand-ins for apt-get and python3 that only record their
arguments.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from suite_switches import is_ci, report_lines, skip_reason

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("ci, expected", [
    (None, False), ("", False), ("0", False), ("false", False), ("No", False),
    ("true", True), ("1", True), ("yes", True), ("github", True),
])
def test_ci_is_any_value_but_empty_0_false_no(ci, expected):
    assert is_ci({} if ci is None else {"CI": ci}) is expected


def test_switches_skip_locally_and_never_under_ci():
    local = {"MINIBROKER_SKIP_CONTAINER": "1", "MINIBROKER_SKIP_SPARK": "true"}
    assert "CI always runs them" in skip_reason("MINIBROKER_SKIP_CONTAINER", local)
    assert skip_reason("MINIBROKER_SKIP_SPARK", local)
    for ci in ("true", "1"):
        assert skip_reason("MINIBROKER_SKIP_CONTAINER", {**local, "CI": ci}) is None
        assert skip_reason("MINIBROKER_SKIP_SPARK", {**local, "CI": ci}) is None
        assert all("ignored" in line for line in report_lines({**local, "CI": ci}))
    assert skip_reason("MINIBROKER_SKIP_CONTAINER", {"MINIBROKER_SKIP_CONTAINER": "0"}) is None
    assert skip_reason("MINIBROKER_SKIP_SPARK", {}) is None
    assert report_lines({}) == []
    with pytest.raises(KeyError):
        skip_reason("MINIBROKER_SKIP_EVERYTHING", local)


def _pytest(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if k not in ("CI", "MINIBROKER_SKIP_CONTAINER",
                                                              "MINIBROKER_SKIP_SPARK", "PYTEST_ADDOPTS")}
    # -n 0: the run's report lines are the point here, not pyproject's parallel workers
    return subprocess.run([sys.executable, "-m", "pytest", "-n", "0", "-p", "no:cacheprovider", *args],
                          cwd=ROOT, env={**base, "COLUMNS": "400", **env}, capture_output=True, text=True,
                          timeout=120)


def test_local_run_skips_container_and_spark_suites_with_the_reason():
    env = {"MINIBROKER_SKIP_CONTAINER": "1", "MINIBROKER_SKIP_SPARK": "1"}
    run = _pytest(["-q", "-rs", "tests/test_container.py", "tests/test_spark.py"], env)
    assert run.returncode == 5, run.stdout + run.stderr  # both modules skipped whole: no test collected
    assert "MINIBROKER_SKIP_CONTAINER=1: the container tests" in run.stdout
    assert "MINIBROKER_SKIP_SPARK=1: the Spark tests" in run.stdout
    assert run.stdout.strip().splitlines()[-1].split(" in ")[0] == "2 skipped", run.stdout


def test_ci_collects_the_container_suite_despite_the_switch():
    # --collect-only: under CI the module is collected (its tests would run), not skipped; one run (not
    # -q) shows both the report header and the collected tree
    env = {"MINIBROKER_SKIP_CONTAINER": "1", "CI": "true"}
    run = _pytest(["--collect-only", "tests/test_container.py"], env)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "MINIBROKER_SKIP_CONTAINER=1 ignored: CI=true runs the container tests" in run.stdout
    collected = [line for line in run.stdout.splitlines()
                 if line.strip().startswith(("<Function", "<Coroutine"))]
    assert len(collected) >= 3 and "skipped" not in run.stdout, run.stdout


@pytest.fixture
def stubbed(tmp_path):
    """A PATH where apt-get and python3 record their arguments; no kcat, no java, no C compiler, no sudo."""
    bin_dir, log = tmp_path / "bin", tmp_path / "calls.log"
    bin_dir.mkdir()
    for name in ("apt-get", "python3"):
        stub = bin_dir / name
        stub.write_text(f'#!/bin/sh\necho "{name} $*" >> "{log}"\n')
        stub.chmod(0o755)
    for tool in ("id", "dirname"):
        (bin_dir / tool).symlink_to(shutil.which(tool))
    bash = shutil.which("bash")

    def run(**env: str) -> list[str]:
        log.write_text("")
        proc = subprocess.run([bash, str(ROOT / "scripts" / "run-tests.sh"), "-k", "nothing"],
                              env={"PATH": str(bin_dir), "HOME": str(tmp_path), **env},
                              capture_output=True, text=True, timeout=60)
        assert proc.returncode == 0, proc.stderr
        return [*log.read_text().splitlines(), *(f"stderr: {line}" for line in proc.stderr.splitlines())]

    return run


def test_run_tests_installs_everything_by_default(stubbed):
    calls = stubbed()
    assert "apt-get install -y -qq kcat openjdk-17-jre-headless gcc libc6-dev" in calls
    assert "python3 -m pip install -q --disable-pip-version-check -e .[test,spark]" in calls
    assert "python3 -m pytest -k nothing" in calls


def test_run_tests_skips_the_jre_and_spark_extra_locally(stubbed):
    calls = stubbed(MINIBROKER_SKIP_SPARK="1", MINIBROKER_SKIP_CONTAINER="1")
    assert "apt-get install -y -qq kcat gcc libc6-dev" in calls
    assert "python3 -m pip install -q --disable-pip-version-check -e .[test]" in calls
    assert any("MINIBROKER_SKIP_CONTAINER=1: those tests" in line for line in calls)


def test_run_tests_ignores_the_switches_under_ci(stubbed):
    calls = stubbed(MINIBROKER_SKIP_SPARK="1", MINIBROKER_SKIP_CONTAINER="1", CI="true")
    assert "apt-get install -y -qq kcat openjdk-17-jre-headless gcc libc6-dev" in calls
    assert "python3 -m pip install -q --disable-pip-version-check -e .[test,spark]" in calls
    assert "stderr: CI=true: MINIBROKER_SKIP_SPARK=1 ignored, those tests run" in calls
    assert "stderr: CI=true: MINIBROKER_SKIP_CONTAINER=1 ignored, those tests run" in calls
