"""Every console tool against the ways a command goes wrong (issue 30): each ends within its ``--timeout``
plus 1 s (plus the interpreter's start), with its documented exit code and one line on stderr, never a
traceback (docs/tools.md, "The tool matrix").

The cases, and which command each applies to:

- ``dead-port``: a port nothing listens on (connection refused): exit 1, ``cannot reach HOST:PORT``;
- ``tls-without-command-config``: a TLS-only listener, spoken to in plaintext: exit 1, a line pointing at
  ``--command-config``;
- ``silent``: a listener that accepts and never answers: exit 1 once ``--timeout`` has passed;
- ``missing``: a topic, partition, group, transactional id or user that does not exist (for the offline
  ``dump-log`` and ``explain``: a file or directory; for ``certs``: a ``--dir`` that cannot be created):
  exit 1 with Kafka's error name or the path;
- ``stdout-closed``: stdout a pipe whose reader has gone before the first write (``| head`` at its most
  abrupt): exit 0, stderr empty;
- ``sigint``: Ctrl-C while the command waits (on a silent listener; ``consume`` following a topic;
  ``dump-log`` blocked reading a FIFO; ``explain --serve``): exit 130, no traceback.

The network cases apply to the tools that talk to a broker: topics, produce, consume, groups,
transactions, scram, healthcheck (healthcheck names nothing that could be missing). ``apis``,
``dump-log``, ``explain`` and ``certs`` open no connection: ``apis`` reads nothing and waits for nothing
(stdout-closed only), ``certs`` waits for nothing either (no sigint: it ends in well under a second).
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from waiting import wait_until

from minibroker.testing import BrokerRunner

ROOT = Path(__file__).resolve().parents[1]
TIMEOUT_S = 3  # --timeout of every network command: a bound on a hang, not a speed target
SILENT_TIMEOUT_S = 1  # --timeout against the silent listener, where the whole of it is waited for
TOPIC, GROUP = "matrix", "matrix-group"
BIG_TOPIC = "matrix-big"  # more output than a pipe buffers (64 KiB): a writer meets the closed pipe mid-way

NETWORK_TOOLS = ("topics", "produce", "consume", "groups", "transactions", "scram", "healthcheck")
NETWORK_CASES = ("dead-port", "tls-without-command-config", "silent", "missing", "stdout-closed", "sigint")
APPLIES = {tool: NETWORK_CASES for tool in NETWORK_TOOLS}
APPLIES["healthcheck"] = tuple(c for c in NETWORK_CASES if c != "missing")
APPLIES.update({"apis": ("stdout-closed",), "certs": ("missing", "stdout-closed"),
                "dump-log": ("missing", "stdout-closed", "sigint"),
                "explain": ("missing", "stdout-closed", "sigint"),
                "inject": ("dead-port", "missing", "stdout-closed")})  # over HTTP (--url), not Kafka
# the silent cases wait out their whole --timeout: slow, as a timeout that must pass is (docs/testing.md)
MATRIX = [pytest.param(tool, case, id=f"{tool}-{case}", marks=[pytest.mark.slow] if case == "silent" else [])
          for tool, cases in APPLIES.items() for case in cases]

# What each tool runs: against a broker, naming what does not exist ("missing"), and what prints output
# (stdout-closed), with a stdin of one record for produce.
MISSING = {
    "topics": ["topics", "describe", "--topic", "no-such-topic"],
    "produce": ["produce", "--topic", TOPIC, "--partition", "99"],
    "consume": ["consume", "--topic", TOPIC, "--partition", "99", "--exit"],
    "groups": ["groups", "describe", "--group", "no-such-group"],
    "transactions": ["transactions", "describe", "--transactional-id", "no-such-id"],
    "scram": ["scram", "--describe", "--entity-type", "users", "--entity-name", "no-such-user"],
}
MISSING_SAYS = {"topics": "UNKNOWN_TOPIC_OR_PARTITION", "produce": "UNKNOWN_TOPIC_OR_PARTITION",
                "consume": "UNKNOWN_TOPIC_OR_PARTITION", "groups": "'no-such-group' does not exist",
                "transactions": "TRANSACTIONAL_ID_NOT_FOUND", "scram": "RESOURCE_NOT_FOUND"}
PRINTING = {
    "topics": ["topics", "list"],
    "produce": ["produce", "--topic", TOPIC],  # prints nothing: a closed stdout must not disturb it
    "consume": ["consume", "--topic", TOPIC, "--from-beginning", "--exit"],
    "groups": ["groups", "list"],
    "transactions": ["transactions", "list"],
    "scram": ["scram", "--describe"],
    "healthcheck": ["healthcheck"],
}
# consume's summary: Kafka's console consumer prints it however the command ends (docs/tools.md).
SUMMARY_PREFIX = "Processed a total of "


def cli_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith(("KAFKA_", "MINIBROKER_"))}


def command(*args: str) -> list[str]:
    return [sys.executable, "-m", "minibroker", *args]


def sigint_by_default() -> None:
    """In the child: SIGINT as a terminal delivers it, even when this suite runs in the background of a
    non-interactive shell (which starts its children with SIGINT ignored)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@pytest.fixture(scope="module")
def interpreter_start() -> float:
    """Seconds to start Python and import the CLI, measured once: added to every bound below."""
    started = time.monotonic()
    subprocess.run(command("--version"), capture_output=True, check=True, env=cli_env(), timeout=60)
    return time.monotonic() - started


@pytest.fixture(scope="module")
def plain():
    """A plaintext broker with a topic of three records, one of 300 KiB, a group with committed offsets
    and a SCRAM user (so that every listing has a line to print)."""
    with BrokerRunner() as broker:
        broker.create_topic(TOPIC)
        broker.produce(TOPIC, [b"one", b"two", b"three"])
        broker.create_topic(BIG_TOPIC)
        broker.produce(BIG_TOPIC, [b"%06d " % i + b"x" * 100 for i in range(3000)])
        subprocess.run(command("consume", "--bootstrap-server", broker.bootstrap_servers, "--topic", TOPIC,
                               "--group", GROUP, "--from-beginning", "--exit"),
                       capture_output=True, check=True, env=cli_env(), timeout=60)
        subprocess.run(command("scram", "--bootstrap-server", broker.bootstrap_servers, "--alter",
                               "--entity-type", "users", "--entity-name", "matrix-user",
                               "--add-config", "SCRAM-SHA-256=[password=matrix-secret]"),
                       capture_output=True, check=True, env=cli_env(), timeout=60)
        yield broker


@pytest.fixture(scope="module")
def tls():
    with BrokerRunner(security_protocol="SSL") as broker:
        yield broker


@pytest.fixture(scope="module")
def dead_port():
    with socket.socket() as sock:  # bound, never listening: connections are refused
        sock.bind(("127.0.0.1", 0))
        yield f"127.0.0.1:{sock.getsockname()[1]}"


@pytest.fixture(scope="module")
def faults_url():
    """The /faults API of a broker with fault injection on, holding one rule (so that list prints)."""
    with BrokerRunner({"fault.injection.enable": "true", "metrics.port": "0"}) as broker:
        broker.inject(api="Produce", topic="no-such-topic", error="NOT_LEADER_OR_FOLLOWER")
        yield f"http://127.0.0.1:{broker.broker.metrics_http.port}"


def inject_case(case: str, faults_url: str, dead_port: str, bound: float) -> None:
    if case == "stdout-closed":
        argv = command("inject", "--url", faults_url, "list")
        assert run(argv, bound).stdout, "inject list printed nothing to refuse"
        r = stdout_closed(argv, bound)
        assert r.returncode == 0 and error_lines(r.stderr, "inject") == [], (r.returncode, r.stderr.decode())
        return
    url, args, says = {"dead-port": (f"http://{dead_port}", ["list"], "Connection refused"),
                       "missing": (faults_url, ["get", "999"], "no rule 999")}[case]
    r = run(command("inject", "--url", url, "--timeout", str(TIMEOUT_S), *args), bound)
    lines = error_lines(r.stderr, "inject")
    assert r.returncode == 1 and len(lines) == 1, (r.returncode, lines)
    assert says in lines[0], lines[0]


@pytest.fixture
def silent():
    """A listener that accepts connections and never answers; ``accept()`` tells when a client is in."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield sock


def address(sock: socket.socket) -> str:
    return f"127.0.0.1:{sock.getsockname()[1]}"


def error_lines(stderr: bytes, tool: str) -> list[str]:
    text = stderr.decode()
    assert "Traceback" not in text and "KeyboardInterrupt" not in text, text
    lines = text.splitlines()
    return [line for line in lines if not (tool == "consume" and line.startswith(SUMMARY_PREFIX))]


def run(argv: list[str], bound: float, stdin: bytes = b"",
        stdout=subprocess.PIPE) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(argv, input=stdin, stdout=stdout, stderr=subprocess.PIPE, env=cli_env(),
                              cwd=ROOT, timeout=bound)
    except subprocess.TimeoutExpired:
        pytest.fail(f"{' '.join(argv[2:])} still ran after {bound:.1f} s")


def stdin_for(tool: str) -> bytes:
    return b"x\n" if tool == "produce" else b""


def network_case(tool, case, plain, tls, dead_port, bound):
    argv = MISSING.get(tool, PRINTING[tool])
    target = {"dead-port": dead_port, "tls-without-command-config": tls.bootstrap_servers,
              "missing": plain.bootstrap_servers}[case]
    r = run(command(*argv, "--bootstrap-server", target, "--timeout", str(TIMEOUT_S)), bound, stdin_for(tool))
    lines = error_lines(r.stderr, tool)
    assert r.returncode == 1 and len(lines) == 1, (r.returncode, lines)
    expected = {"dead-port": f"cannot reach {dead_port}", "tls-without-command-config": "--command-config",
                "missing": MISSING_SAYS.get(tool)}[case]
    assert expected in lines[0], lines[0]


def stdout_closed(argv: list[str], bound: float, stdin: bytes = b"") -> subprocess.CompletedProcess:
    """Run with a stdout whose reader is gone before the command starts: every write meets EPIPE."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        return run(argv, bound, stdin, stdout=write_end)
    finally:
        os.close(write_end)


@contextlib.contextmanager
def started(argv: list[str], **kw):
    proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env=cli_env(), cwd=ROOT, preexec_fn=sigint_by_default, **kw)
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.communicate()


def interrupt(proc: subprocess.Popen, tool: str, bound: float) -> None:
    proc.send_signal(signal.SIGINT)
    try:
        _, err = proc.communicate(timeout=bound)
    except subprocess.TimeoutExpired:
        pytest.fail(f"{tool} still ran {bound:.1f} s after SIGINT")
    error_lines(err, tool)
    lines = err.decode().splitlines()  # consume's one line is its summary, the others' "interrupted"
    assert proc.returncode == 130, (proc.returncode, lines)
    said = SUMMARY_PREFIX if tool == "consume" else f"minibroker {tool}: interrupted"
    assert len(lines) == 1 and lines[0].startswith(said), lines


def segment_dir(broker: BrokerRunner) -> Path:
    return Path(broker.data_dir) / f"{TOPIC}-0"


# Every tool through every failure, each a Python start (~0.5 s): the full suite; the inner loop keeps
# test_matrix_covers_every_subcommand below and the tools' own tests (tests/test_tools*.py)
@pytest.mark.slow
@pytest.mark.parametrize(("tool", "case"), MATRIX)
def test_matrix(tool, case, plain, tls, dead_port, silent, interpreter_start, tmp_path, request):
    # a bound on a hang, not a speed target: a loaded machine (load 15 on 2 cores seen) starts Python
    # several times slower than when interpreter_start was measured
    bound = TIMEOUT_S + 5 + 3 * interpreter_start
    if tool == "inject":
        inject_case(case, request.getfixturevalue("faults_url"), dead_port, bound)
    elif tool in NETWORK_TOOLS and case in ("dead-port", "tls-without-command-config", "missing"):
        network_case(tool, case, plain, tls, dead_port, bound)
    elif case == "silent":
        argv = MISSING.get(tool, PRINTING[tool])
        r = run(command(*argv, "--bootstrap-server", address(silent), "--timeout", str(SILENT_TIMEOUT_S)),
                SILENT_TIMEOUT_S + 1 + interpreter_start, stdin_for(tool))
        lines = error_lines(r.stderr, tool)
        assert r.returncode == 1 and len(lines) == 1, (r.returncode, lines)
        assert f"no answer within --timeout {SILENT_TIMEOUT_S} s" in lines[0], lines[0]
    elif case == "missing":
        offline_missing(tool, tmp_path, bound)
    elif case == "stdout-closed":
        argv = {"apis": ["apis"], "certs": ["certs", "--dir", str(tmp_path / "certs"), "--force"],
                "dump-log": ["dump-log", "--print-data-log", str(segment_dir(plain) / f"{0:020d}.log")],
                "explain": ["explain", "-o", "-", str(segment_dir(plain))]}.get(tool)
        if argv is None:
            argv = [*PRINTING[tool], "--bootstrap-server", plain.bootstrap_servers,
                    "--timeout", str(TIMEOUT_S)]
        if tool != "produce":  # which prints nothing: the others have output for the closed pipe to refuse
            assert run(command(*argv), bound, stdin_for(tool)).stdout, f"{tool} printed nothing to refuse"
        r = stdout_closed(command(*argv), bound, stdin_for(tool))
        assert r.returncode == 0 and error_lines(r.stderr, tool) == [], (r.returncode, r.stderr.decode())
    else:
        sigint(tool, plain, silent, tmp_path, bound)


def offline_missing(tool: str, tmp_path: Path, bound: float) -> None:
    absent = tmp_path / "absent"
    a_file = tmp_path / "a-file"
    a_file.write_text("not a directory\n")
    argv, says = {"dump-log": (["dump-log", str(absent / f"{0:020d}.log")], str(absent)),
                  "explain": (["explain", str(absent)], str(absent)),
                  "certs": (["certs", "--dir", str(a_file / "certs")], str(a_file))}[tool]
    r = run(command(*argv), bound)
    lines = error_lines(r.stderr, tool)
    assert r.returncode == 1 and len(lines) == 1, (r.returncode, lines)
    assert says in lines[0], lines[0]


def sigint(tool: str, plain: BrokerRunner, silent: socket.socket, tmp_path: Path, bound: float) -> None:
    if tool == "consume":  # following the topic: ready once the records so far are printed
        argv = command("consume", "--bootstrap-server", plain.bootstrap_servers, "--topic", TOPIC,
                       "--from-beginning", "--timeout", str(TIMEOUT_S))
        with started(argv) as proc:
            for _ in range(3):
                assert proc.stdout.readline(), "consume ended before printing the records"
            interrupt(proc, tool, bound)
    elif tool == "dump-log":  # blocked reading a FIFO: ready once it has the FIFO open
        fifo = tmp_path / f"{0:020d}.log"
        os.mkfifo(fifo)
        with started(command("dump-log", str(fifo))) as proc:
            writer: list[int] = []

            def opened() -> bool:
                try:  # a FIFO opens for writing without blocking only once a reader has it open
                    writer.append(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
                except OSError:
                    return proc.poll() is not None
                return True

            wait_until(opened, "dump-log opening the FIFO")
            try:
                interrupt(proc, tool, bound)
            finally:
                for fd in writer:
                    os.close(fd)
    elif tool == "explain":  # serving: ready once it prints its address
        with started(command("explain", "--serve", str(plain.data_dir))) as proc:
            assert b"serving" in proc.stdout.readline()
            interrupt(proc, tool, bound)
    else:  # waiting for a silent broker's answer: ready once it has connected
        argv = command(*MISSING.get(tool, PRINTING[tool]), "--bootstrap-server", address(silent),
                       "--timeout", "60")
        with started(argv) as proc:
            silent.settimeout(30)
            conn, _ = silent.accept()
            with conn:
                conn.settimeout(30)
                assert conn.recv(4), "no request came"  # sent: the command now waits for the answer
                interrupt(proc, tool, bound)


def test_matrix_covers_every_subcommand():
    from minibroker.cli import build_parser

    parser = build_parser()
    commands = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction").choices
    assert set(commands) - {"serve"} == set(APPLIES)


# The other actions of the admin tools, each naming something missing: one line with what Kafka says.
MISSING_IN_OTHER_ACTIONS = [
    (["topics", "delete", "--topic", "no-such-topic"], "UNKNOWN_TOPIC_OR_PARTITION"),
    (["topics", "alter", "--topic", "no-such-topic", "--partitions", "3"], "UNKNOWN_TOPIC_OR_PARTITION"),
    (["topics", "alter-config", "--topic", "no-such-topic", "--add-config", "retention.ms=1"],
     "UNKNOWN_TOPIC_OR_PARTITION"),
    (["topics", "create", "--topic", TOPIC], "TOPIC_ALREADY_EXISTS"),
    (["groups", "delete", "--group", "no-such-group"], "GROUP_ID_NOT_FOUND"),
    (["groups", "reset-offsets", "--group", GROUP, "--topic", "no-such-topic", "--to-earliest", "--execute"],
     "topic no-such-topic does not exist"),
    (["transactions", "describe-producers", "--topic", TOPIC, "--partition", "9"],
     "UNKNOWN_TOPIC_OR_PARTITION"),
    (["transactions", "abort", "--topic", TOPIC, "--partition", "9", "--start-offset", "0"],
     "UNKNOWN_TOPIC_OR_PARTITION"),
    (["transactions", "find-hanging", "--topic", "no-such-topic", "--partition", "0"],
     "UNKNOWN_TOPIC_OR_PARTITION"),
    (["consume", "--topic", "no-such-topic", "--group", "matrix-missing", "--exit"],
     "UNKNOWN_TOPIC_OR_PARTITION"),
    (["scram", "--alter", "--entity-type", "users", "--entity-name", "no-such-user",
      "--delete-config", "SCRAM-SHA-256"], "RESOURCE_NOT_FOUND"),
]


# The inner loop's users of the ``plain`` broker run on one worker, which builds it once (a broker, 3,000
# records, a group and a SCRAM user: 3-8 s a worker when each built its own)
PLAIN_GROUP = pytest.mark.xdist_group("tool-matrix-plain")


@PLAIN_GROUP
@pytest.mark.parametrize(("argv", "says"), MISSING_IN_OTHER_ACTIONS, ids=[" ".join(a[:2]) for a, _ in
                                                                          MISSING_IN_OTHER_ACTIONS])
def test_other_actions_name_what_is_missing(argv, says, plain, interpreter_start):
    r = run(command(*argv, "--bootstrap-server", plain.bootstrap_servers, "--timeout", str(TIMEOUT_S)),
            TIMEOUT_S + 1 + interpreter_start)
    lines = error_lines(r.stderr, argv[0])
    assert r.returncode == 1 and len(lines) == 1 and says in lines[0], (r.returncode, lines)


@PLAIN_GROUP
@pytest.mark.parametrize("tool", ["consume", "dump-log"])
def test_a_reader_that_leaves_after_the_first_line(tool, plain, interpreter_start):
    """``| head -1``: the first lines go through, the rest meets the closed pipe: exit 0, nothing but
    consume's summary on stderr."""
    argv = {"consume": ["consume", "--bootstrap-server", plain.bootstrap_servers, "--topic", BIG_TOPIC,
                        "--from-beginning", "--exit", "--timeout", str(TIMEOUT_S)],
            "dump-log": ["dump-log", "--print-data-log",
                         str(Path(plain.data_dir) / f"{BIG_TOPIC}-0" / f"{0:020d}.log")]}[tool]
    with started(command(*argv)) as proc:
        first = proc.stdout.readline()
        proc.stdout.close()
        try:
            proc.wait(timeout=TIMEOUT_S + 1 + interpreter_start)
        except subprocess.TimeoutExpired:
            pytest.fail(f"{tool} still ran after its reader left")
        err = proc.stderr.read()
    assert first
    assert proc.returncode == 0 and error_lines(err, tool) == [], (proc.returncode, err.decode())


# -- interactive produce: a ">" prompt on a terminal, as kafka-console-producer.sh ------------------

def read_until(fd: int, wanted: bytes, deadline_s: float = 30) -> bytes:
    """What the terminal shows until ``wanted`` appears (the line discipline echoes the typing too)."""
    import select

    # poll, not select: a worker that has run many tests may hand out descriptors above select's 1024
    readable = select.poll()
    readable.register(fd, select.POLLIN)
    seen = b""
    deadline = time.monotonic() + deadline_s
    while wanted not in seen:
        left = deadline - time.monotonic()
        if left <= 0 or not readable.poll(left * 1000):
            pytest.fail(f"no {wanted!r} on the terminal after {deadline_s} s: {seen!r}")
        try:
            seen += os.read(fd, 4096)
        except OSError:  # EIO: the child closed the terminal
            pytest.fail(f"the terminal closed before {wanted!r}: {seen!r}")
    return seen


@PLAIN_GROUP
def test_produce_prompts_on_a_terminal_and_not_on_a_pipe(plain, topic_name):
    import pty

    plain.create_topic(topic_name)
    controller, terminal = pty.openpty()
    argv = command("produce", "--bootstrap-server", plain.bootstrap_servers, "--topic", topic_name)
    proc = subprocess.Popen(argv, stdin=terminal, stdout=terminal, stderr=subprocess.PIPE, env=cli_env(),
                            cwd=ROOT)
    os.close(terminal)
    try:
        assert read_until(controller, b">").endswith(b">")  # before the first line
        os.write(controller, b"typed\n")
        assert read_until(controller, b">").endswith(b">")  # after it was sent: the next one
        assert [r.value for r in plain.consume(topic_name, 1)] == [b"typed"]
        os.write(controller, b"\x04")  # Ctrl-D: end of input
        assert proc.wait(timeout=TIMEOUT_S + 30) == 0, proc.stderr.read().decode()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stderr.close()
        os.close(controller)
    piped = run(argv, 60, stdin=b"piped\n")
    assert piped.returncode == 0 and piped.stdout == b"", piped.stdout  # no prompt into a pipe



# -- an unguarded write to a closed stdout is not a broker's broken pipe ------------------------------

@pytest.mark.parametrize("reader_gone", [True, False])
def test_a_broken_pipe_is_stdouts_only_when_its_reader_has_gone(monkeypatch, capsys, reader_gone):
    """A tool that prints to ``sys.stdout`` itself (not through ``stdout_text()``) and meets a closed
    pipe ends quietly; the same ``BrokenPipeError`` with stdout's reader still there is the broker's."""
    import argparse

    from minibroker.tools.command import OutputClosed, run_tool

    read_end, write_end = os.pipe()
    stdout = os.fdopen(write_end, "w")
    monkeypatch.setattr(sys, "stdout", stdout)
    if reader_gone:
        os.close(read_end)
    args = argparse.Namespace(command_config=None, timeout=1.0, bootstrap_server="127.0.0.1:1")

    def work(security, deadline):
        raise BrokenPipeError(32, "Broken pipe")

    try:
        if reader_gone:
            with pytest.raises(OutputClosed):
                run_tool("matrix", args, work)
        else:
            assert run_tool("matrix", args, work) == 1
            assert capsys.readouterr().err == "minibroker matrix: cannot reach 127.0.0.1:1: Broken pipe\n"
    finally:
        stdout.close()
        if not reader_gone:
            os.close(read_end)
