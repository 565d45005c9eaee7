"""The record-layer tests run on both paths of the record layer (issue 29): ``c``, the C accelerator
(where it is built), and ``python``, the pure-Python code it mirrors. Each module runs once per path
(a module-scoped fixture: Hypothesis tests take no function-scoped ones); the ``python`` run also sets
MINIBROKER_PURE_PYTHON for the subprocesses a test starts. test_accelerator.py compares the two paths
itself and runs once."""

from __future__ import annotations

import os

import pytest

from minibroker.records import accelerator

PATHS = ["c", "python"] if accelerator.extension is not None else ["python"]


def pytest_generate_tests(metafunc):
    if (
        "record_layer" in metafunc.fixturenames
        and metafunc.module.__name__.split(".")[-1] != "test_accelerator"
    ):
        metafunc.parametrize("record_layer", PATHS, indirect=True, scope="module")


@pytest.fixture(scope="module", autouse=True)
def record_layer(request):
    """Which path this module's run takes: "c", "python", or None (test_accelerator.py: both)."""
    path = getattr(request, "param", None)
    if path is None:
        yield None
        return
    was = accelerator.use_accelerator(path == "c")
    env_was = os.environ.get(accelerator.ENV_VAR)
    if path == "python":
        os.environ[accelerator.ENV_VAR] = "1"
    try:
        yield path
    finally:
        accelerator.use_accelerator(was)
        if env_was is None:
            os.environ.pop(accelerator.ENV_VAR, None)
        else:
            os.environ[accelerator.ENV_VAR] = env_was
