"""A start that fails must not touch the data: the log-dir lock, and binding before recovery."""

from __future__ import annotations

import os
import socket
import subprocess
import sys

import pytest

from minibroker.storage.dir_lock import LogDirLockedError
from minibroker.testing import BrokerRunner

LOCK_MESSAGE = "Failed to acquire lock on file .lock in"


def dir_state(path: str) -> dict[str, tuple[int, int, bytes]]:
    """Every file below ``path`` (the lock file aside) with its size, mtime and content."""
    out = {}
    for root, _dirs, files in os.walk(path):
        for name in files:
            full = os.path.join(root, name)
            if name == ".lock":
                continue
            st = os.stat(full)
            with open(full, "rb") as f:
                out[os.path.relpath(full, path)] = (st.st_size, st.st_mtime_ns, f.read())
    return out


def serve(data_dir: str, *overrides: str, timeout: float = 30) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "minibroker", "serve", "--override", f"log.dirs={data_dir}"]
    for o in overrides:
        cmd += ["--override", o]
    env = {k: v for k, v in os.environ.items() if not k.startswith("KAFKA_")}
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)


@pytest.fixture
def broker_with_data(tmp_path):
    """A process-mode broker holding a topic with records."""
    runner = BrokerRunner(data_dir=str(tmp_path / "data"), mode="process").start()
    try:
        runner.create_topic("kept", partitions=2)
        runner.produce("kept", [b"a", b"b", b"c"], partition=0)
        yield runner
    finally:
        runner.cleanup()


def test_second_broker_on_the_same_dir_exits_with_the_lock_message(broker_with_data):
    data_dir = broker_with_data.data_dir
    before = dir_state(data_dir)
    result = serve(data_dir, "listeners=PLAINTEXT://127.0.0.1:0")
    assert result.returncode != 0
    assert f"{LOCK_MESSAGE} {os.path.abspath(data_dir)}" in result.stderr
    assert f"held by pid {broker_with_data.process.pid}" in result.stderr
    assert dir_state(data_dir) == before  # nothing written, nothing recovered
    # the first broker is untouched and still serves
    broker_with_data.produce("kept", [b"d"], partition=0)
    assert [r.value for r in broker_with_data.consume("kept", 4, partition=0)] == [b"a", b"b", b"c", b"d"]


def test_lock_is_released_by_kill_9_and_by_a_clean_stop(broker_with_data):
    broker_with_data.kill()
    broker_with_data.start()  # the kernel dropped the dead process's lock
    assert [r.value for r in broker_with_data.consume("kept", 3, partition=0)] == [b"a", b"b", b"c"]
    broker_with_data.restart()
    assert [r.value for r in broker_with_data.consume("kept", 3, partition=0)] == [b"a", b"b", b"c"]


def test_two_brokers_in_one_process_exclude_each_other(tmp_path):
    data_dir = str(tmp_path / "data")
    with BrokerRunner(data_dir=data_dir):
        second = BrokerRunner(data_dir=data_dir)
        with pytest.raises(LogDirLockedError, match=LOCK_MESSAGE):
            second.start()
        second.cleanup()
    with BrokerRunner(data_dir=data_dir):  # free again once the first stopped
        pass


def _stopped_broker_dir(tmp_path) -> str:
    runner = BrokerRunner(data_dir=str(tmp_path / "data"), mode="process").start()
    runner.create_topic("kept")
    runner.produce("kept", [b"x"] * 5)
    runner.stop()  # clean: .kafka_cleanshutdown is there
    assert os.path.exists(os.path.join(runner.data_dir, ".kafka_cleanshutdown"))
    return runner.data_dir


@pytest.mark.parametrize("which", ["listener", "metrics.port"])
def test_bind_failure_names_the_listener_and_writes_nothing(tmp_path, which):
    data_dir = _stopped_broker_dir(tmp_path)
    before = dir_state(data_dir)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        if which == "listener":
            result = serve(data_dir, f"listeners=PLAINTEXT://127.0.0.1:{port}")
            expected = f"cannot bind listener PLAINTEXT://127.0.0.1:{port}"
        else:
            result = serve(data_dir, "listeners=PLAINTEXT://127.0.0.1:0", f"metrics.port={port}")
            expected = f"cannot bind metrics.port 127.0.0.1:{port}"
    assert result.returncode == 1
    assert expected in result.stderr and "Address already in use" in result.stderr
    assert "loading logs" not in result.stderr and "loaded" not in result.stderr
    assert dir_state(data_dir) == before  # the clean-shutdown marker is still there: no log was opened
    with BrokerRunner(data_dir=data_dir) as runner:  # and the next start is a clean one
        assert runner.broker.logs.had_clean_shutdown
        assert [r.value for r in runner.consume("kept", 5)] == [b"x"] * 5


@pytest.mark.parametrize("name", ["minibroker-acls.json", "minibroker-scram-credentials.json",
                                  "minibroker-client-quotas.json"])
def test_damaged_security_metadata_stops_start_up_naming_the_file(tmp_path, name):
    """ACLs, SCRAM credentials and quotas are not silently dropped: a damaged file (not a missing one)
    stops start-up with its path, and the file is left as it was for repair."""
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    damaged = data_dir / name
    damaged.write_text('{"acls": [ truncated')
    result = subprocess.run([sys.executable, "-m", "minibroker", "serve",
                             "--override", f"log.dirs={data_dir}", "--override", "listeners=PLAINTEXT://127.0.0.1:0",
                             "--override", "authorizer.class.name=org.apache.kafka.metadata.authorizer."
                             "StandardAuthorizer"],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 1, result.stderr
    assert f"cannot read {damaged}" in result.stderr, result.stderr
    assert damaged.read_text() == '{"acls": [ truncated'
