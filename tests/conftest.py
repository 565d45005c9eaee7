"""Shared fixtures. The broker fixtures themselves come from minibroker's pytest plugin
(``minibroker``, ``minibroker_factory``), exactly as a user's project gets them."""

from __future__ import annotations

import itertools
import shutil

import pytest
from suite_switches import report_lines

from minibroker.testing import sigterm_as_keyboard_interrupt

_names = itertools.count()


def pytest_configure(config):
    sigterm_as_keyboard_interrupt()  # SIGTERM stops a run as Ctrl-C does (docs/testing.md)


def pytest_report_header(config):
    return report_lines()  # MINIBROKER_SKIP_CONTAINER / _SPARK: what they do in this run


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
