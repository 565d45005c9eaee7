"""Shared fixtures. The broker fixtures themselves come from minibroker's pytest plugin
(``minibroker``, ``minibroker_factory``), exactly as a user's project gets them."""

from __future__ import annotations

import itertools
import os
import shutil

import pytest
from client_fixes import apply_client_fixes
from suite_switches import report_lines

from minibroker.testing import sigterm_as_keyboard_interrupt

_names = itertools.count()


def pytest_configure(config):
    sigterm_as_keyboard_interrupt()  # SIGTERM stops a run as Ctrl-C does (docs/testing.md)
    apply_client_fixes()  # known client bugs, each explained in tests/client_fixes.py


def pytest_report_header(config):
    return report_lines()  # MINIBROKER_SKIP_CONTAINER / _SPARK: what they do in this run


def pytest_xdist_auto_num_workers(config) -> int:
    """``-n auto`` (pyproject's addopts): MINIBROKER_TEST_WORKERS, else two workers a core, at most 8.
    Most tests wait on sockets, timers and subprocesses, so a core keeps two workers busy."""
    wanted = os.environ.get("MINIBROKER_TEST_WORKERS", "").strip()
    if wanted:
        return int(wanted)
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return max(2, min(8, 2 * cores))


# Fixtures that cost seconds of set-up and CPU: a test using one is slow (the `slow` mark, below) and
# is left out of the inner loop, `pytest -m "not slow"` (docs/testing.md).
EXPENSIVE_FIXTURES = {
    "spark": "a Spark JVM (tests/test_spark.py)",
    "browser": "a headless Chromium (tests/test_explain.py)",
    "podman_env": "podman installed and three images built (tests/test_container.py)",
    "docs_run": "a fresh virtualenv with the package installed (tests/test_docs_examples.py)",
    "bombs": "200 MiB decompression bombs for every codec (tests/records/test_streaming.py)",
    "jks_stores": "JKS stores made by keytool, a JVM start per call (tests/test_tls_jks.py)",
}


@pytest.hookimpl(tryfirst=True)  # before the mark plugin selects with -m
def pytest_collection_modifyitems(config, items):
    """Slow tests and xdist groups (a module's tests that share an expensive fixture, run by one worker)
    first, in a stable sort (each module keeps its order): under pytest-xdist the longest work starts at
    once and the quick tests fill the gaps, instead of one long test starting last and running alone."""
    def long_first(item) -> int:
        if item.get_closest_marker("xdist_group") is not None:
            return 0  # a whole module's work (and its fixture's set-up) on one worker: the longest
        return 1 if item.get_closest_marker("slow") is not None else 2

    for item in items:
        if EXPENSIVE_FIXTURES.keys() & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.slow)
    items.sort(key=long_first)


@pytest.fixture
def topic_name(request) -> str:
    """A topic name no other test uses (the session broker is shared)."""
    base = "".join(c if c.isalnum() else "-" for c in request.node.name)[:80]
    return f"t{next(_names)}-{base}"


@pytest.fixture(scope="session")
def kcat() -> str:
    path = shutil.which("kcat") or shutil.which("kafkacat")
    if path is None:
        pytest.skip("kcat is not installed (Debian package kcat; .ci/run installs it)")
    return path
