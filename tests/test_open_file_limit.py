"""``minibroker serve`` raises the soft limit on open files to the hard limit at start, as the JVM does
for Kafka, and logs it; a refusal is logged and the start goes on (docs/operations.md)."""

from __future__ import annotations

import logging
import subprocess
import sys
import time

import pytest

from minibroker import cli
from minibroker.testing import READY_RE, tied_to_this_process

resource = pytest.importorskip("resource")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/PID/limits")
def test_serve_raises_the_soft_limit_to_the_hard_one_and_says_so(tmp_path):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    lowered = min(256, hard)
    if lowered >= hard:
        pytest.skip("the hard limit is already as low as the test's")

    log_path = tmp_path / "broker.log"
    serve = [sys.executable, "-m", "minibroker", "serve", "--override", "listeners=PLAINTEXT://127.0.0.1:0",
             "--override", f"log.dirs={tmp_path / 'data'}"]
    # a lower soft limit set by a small launcher that then execs the broker (no preexec_fn with threads)
    launcher = ("import os, resource, sys; "
                f"resource.setrlimit(resource.RLIMIT_NOFILE, ({lowered}, {hard})); "
                "os.execv(sys.executable, sys.argv[1:])")
    with open(log_path, "wb") as log_file:
        process = subprocess.Popen([sys.executable, "-c", launcher, *serve], stdout=log_file,
                                   stderr=subprocess.STDOUT, **tied_to_this_process())
    try:
        deadline = time.monotonic() + 30
        while process.poll() is None and time.monotonic() < deadline:
            if READY_RE.search(log_path.read_text()):
                break
            time.sleep(0.05)
        text = log_path.read_text()
        assert READY_RE.search(text), text
        with open(f"/proc/{process.pid}/limits") as f:
            line = next(line for line in f if line.startswith("Max open files"))
        assert line.split()[3:5] == [str(hard), str(hard)]
        assert f"raised the open files limit (RLIMIT_NOFILE) from {lowered} to {hard}" in text
    finally:
        process.terminate()
        process.wait(10)


def test_a_refused_raise_is_logged_and_start_up_goes_on(monkeypatch, caplog):
    monkeypatch.setattr(resource, "getrlimit", lambda which: (256, 4096))

    def refuse(which, limits):
        raise ValueError("not allowed to raise maximum limit")

    monkeypatch.setattr(resource, "setrlimit", refuse)
    with caplog.at_level(logging.INFO, logger="minibroker.broker"):
        cli.raise_open_file_limit()
    assert "stays at 256: raising it to 4096 was refused: not allowed" in caplog.text


def test_nothing_changes_when_the_soft_limit_is_the_hard_one(monkeypatch, caplog):
    monkeypatch.setattr(resource, "getrlimit", lambda which: (4096, 4096))
    calls = []
    monkeypatch.setattr(resource, "setrlimit", lambda which, limits: calls.append(limits))
    with caplog.at_level(logging.INFO, logger="minibroker.broker"):
        cli.raise_open_file_limit()
    assert calls == [] and "open files" not in caplog.text
