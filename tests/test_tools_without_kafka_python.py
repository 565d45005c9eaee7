"""The console tools on a plain install: no Kafka client library importable, our own wire client only; and
the one way every tool times out, reports and exits (minibroker/tools/command.py)."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(scope="module")
def no_kafka_env(tmp_path_factory) -> dict:
    """An environment whose ``import kafka`` fails, as on a machine without kafka-python."""
    blocker = tmp_path_factory.mktemp("no-kafka") / "kafka"
    blocker.mkdir()
    (blocker / "__init__.py").write_text("raise ImportError('kafka-python is not installed here')\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "MINIBROKER_"))}
    env["PYTHONPATH"] = os.pathsep.join([str(blocker.parent), ROOT])
    return env


def tool(env: dict, *args: str, stdin: bytes = b"", timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "minibroker", *args], input=stdin, capture_output=True,
                          env=env, timeout=timeout)


@pytest.mark.slow  # fourteen tool processes in a row; the inner loop keeps the ones below
def test_every_tool_works_without_kafka_python(minibroker, no_kafka_env, topic_name):
    bs = ["--bootstrap-server", minibroker.bootstrap_servers]
    env = no_kafka_env
    blocked = subprocess.run([sys.executable, "-c", "import kafka"], env=env, capture_output=True)
    assert blocked.returncode == 1

    def ok(*args: str, stdin: bytes = b"") -> bytes:
        done = tool(env, *args, *bs, stdin=stdin)
        assert done.returncode == 0, (args, done.stderr.decode())
        assert b"Traceback" not in done.stderr
        return done.stdout

    ok("topics", "create", "--topic", topic_name, "--partitions", "2")
    ok("produce", "--topic", topic_name, "--key-separator", ":", "--header", "h=1", stdin=b"a:1\nb:2\nc:3\n")
    lines = ok("consume", "--topic", topic_name, "--from-beginning", "-e", "-f", "%k=%s %h\n").splitlines()
    assert sorted(lines) == [b"a=1 h=1", b"b=2 h=1", b"c=3 h=1"]
    # a KIP-848 member: joins, is assigned both partitions, commits what it printed, leaves
    group = f"g-{topic_name}"
    assert sorted(ok("consume", "--topic", topic_name, "--group", group, "--from-beginning", "-e")
                  .splitlines()) == [b"1", b"2", b"3"]
    assert group in ok("groups", "list").decode().split()
    described = ok("groups", "describe", "--group", group).decode()
    assert "GROUP STATE: Empty" in described
    rows = described.split("CLIENT-ID\n", 1)[1].splitlines()
    assert sum(int(row.split()[3]) for row in rows) == 3  # CURRENT-OFFSET: everything printed
    ok("produce", "--topic", topic_name, "--key-separator", ":", stdin=b"a:4\n")
    assert ok("consume", "--topic", topic_name, "--group", group, "-e") == b"4\n"  # from the commit
    ok("groups", "reset-offsets", "--group", group, "--all-topics", "--to-earliest", "--execute")
    assert len(ok("consume", "--topic", topic_name, "--group", group, "-e").splitlines()) == 4
    ok("scram", "--alter", "--entity-name", "alice", "--add-config", "SCRAM-SHA-256=[password=secret]")
    assert "SCRAM-SHA-256=iterations=4096" in ok("scram", "--describe", "--entity-name", "alice").decode()
    ok("transactions", "list")


@pytest.mark.slow  # each waits out a 1.5 s --timeout against a silent socket
@pytest.mark.parametrize("args", [
    ("topics", "list"), ("produce", "--topic", "t"), ("consume", "--topic", "t"), ("groups", "list"),
    ("transactions", "list"), ("scram", "--describe"),
], ids=lambda a: a[0])
def test_a_dead_broker_ends_within_the_timeout_in_one_line(no_kafka_env, args):
    import socket

    with socket.socket() as silent:  # accepts connections (the backlog) and never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        port = silent.getsockname()[1]
        began = time.monotonic()
        tool(no_kafka_env, "--version")
        start = time.monotonic() - began  # starting Python and the CLI, on this machine, now
        began = time.monotonic()
        done = tool(no_kafka_env, *args, "--bootstrap-server", f"127.0.0.1:{port}", "--timeout", "1.5")
        took = time.monotonic() - began
    err = done.stderr.decode()
    assert done.returncode == 1, err
    # the timeout plus starting Python, with room for a loaded machine; the default timeout, or none,
    # would take far longer (the silent socket never answers)
    assert took < 1.5 + 3 + 3 * start, (took, start)
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert "within --timeout 1.5 s" in err


def test_errors_are_kafkas_code_names(minibroker, no_kafka_env, topic_name):
    minibroker.create_topic(topic_name)
    bs = ["--bootstrap-server", minibroker.bootstrap_servers]
    done = tool(no_kafka_env, "produce", "--topic", topic_name, "--partition", "99", *bs, stdin=b"x\n")
    assert done.returncode == 1
    assert "UNKNOWN_TOPIC_OR_PARTITION" in done.stderr.decode() and b"Traceback" not in done.stderr
    done = tool(no_kafka_env, "consume", "--topic", topic_name, "--partition", "99", "-e", *bs)
    assert done.returncode == 1 and "UNKNOWN_TOPIC_OR_PARTITION" in done.stderr.decode()
    done = tool(no_kafka_env, "groups", "delete", "--group", "no-such-group", *bs)
    assert done.returncode == 1 and "GROUP_ID_NOT_FOUND" in done.stderr.decode(), done.stderr


@pytest.mark.parametrize("args", [("consume", "--from-beginning", "-e"), ("topics", "describe"), ("apis",)],
                         ids=lambda a: a[0])
def test_a_closed_stdout_ends_quietly_with_0(minibroker, no_kafka_env, topic_name, args):
    minibroker.create_topic(topic_name, partitions=50)  # enough lines to fill the pipe
    minibroker.produce(topic_name, [b"x" * 1000] * 2000)
    extra = [] if args[0] == "apis" else ["--bootstrap-server", minibroker.bootstrap_servers]
    if args[0] == "consume":
        extra += ["--topic", topic_name]
    proc = subprocess.Popen([sys.executable, "-m", "minibroker", *args, *extra], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=no_kafka_env)
    with proc:
        proc.stdout.readline()  # as `| head -1`
        proc.stdout.close()
        err = proc.stderr.read().decode()
        assert proc.wait(60) == 0, err
    assert "Traceback" not in err and "Broken pipe" not in err and "cannot reach" not in err, err
