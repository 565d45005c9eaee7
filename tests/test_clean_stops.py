"""Clean stops (issue 26, item 4): nothing of a test run outlives it.

- a process-mode broker stops when the process that started it is gone, kill -9 included, whichever
  thread started it (``minibroker.server.parent_watch``, ``minibroker.testing.tied_to_this_process``);
- pytest killed with -9 mid-test leaves no broker, also under pytest-xdist (execnet interrupts a worker
  whose controller is gone after 5 s, and ends it 10 s later at the latest);
- SIGTERM to ``scripts/run-tests.sh`` (the README's test command) with brokers up and the client suites
  running leaves no process of the run 10 s later, and pytest tears its fixtures down on the way.

The processes of a run are found by a marker in their environment (``/proc/PID/environ``), which these
tests set on what they start and every descendant inherits, not by name.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from minibroker.cli import main
from minibroker.server import parent_watch
from minibroker.testing import tied_to_this_process

ROOT = Path(__file__).resolve().parents[1]
MARKER = "MINIBROKER_CLEAN_STOP_MARKER"  # only these tests set it; nothing reads it


# -- finding the processes of a run ------------------------------------------------------------------

def _state(pid: int) -> str | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rpartition(b")")[2].split()[0].decode()
    except (OSError, IndexError):
        return None


def _alive(pid: int) -> bool:
    state = _state(pid)
    return state is not None and state not in ("Z", "X")  # a zombie has ended


def _cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return "?"


def marked(value: str) -> dict[int, str]:
    """pid -> command line of every live process whose environment holds MARKER=value."""
    want = f"{MARKER}={value}".encode()
    found = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        pid = int(entry)
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                environ = f.read().split(b"\0")
        except OSError:  # gone, or another user's
            continue
        if want in environ and _alive(pid):
            found[pid] = _cmdline(pid)
    return found


def wait_until(condition, seconds: float, interval: float = 0.1):
    """Poll ``condition`` until it is true or ``seconds`` have passed; its last result."""
    deadline = time.monotonic() + seconds
    while True:
        result = condition()
        if result or time.monotonic() >= deadline:
            return result
        time.sleep(interval)


def left_after(value: str, seconds: float) -> dict[int, str]:
    """The processes of the run still alive once ``seconds`` have passed (polled: {} as soon as none)."""
    if wait_until(lambda: not marked(value), seconds):
        return {}
    return marked(value)


def describe(processes: dict[int, str]) -> str:
    return "\n".join(f"  pid {pid} (ppid {_ppid(pid)}, pgid {_pgid(pid)}): {cmd[:300]}"
                     for pid, cmd in sorted(processes.items())) or "  none"


def _ppid(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return int(f.read().rpartition(b")")[2].split()[1])
    except (OSError, IndexError, ValueError):
        return 0


def _pgid(pid: int) -> str:
    try:
        return str(os.getpgid(pid))
    except OSError:
        return "?"


def kill_leftovers(value: str) -> None:
    """After a failure: SIGKILL what is left of the run (by pid, each found by the marker)."""
    for pid in marked(value):
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass


def marked_env(value: str, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "KAFKA_")) and k != "CI"}
    env.update({MARKER: value, "PYTHONDONTWRITEBYTECODE": "1", **extra})
    return env


# -- the watch itself --------------------------------------------------------------------------------

PARENT = """
import sys, threading, time
from minibroker.testing import BrokerRunner

runner = BrokerRunner(data_dir=sys.argv[1], mode="process")
starter = threading.Thread(target=runner.start)  # a thread that ends once the broker is up
starter.start()
starter.join()
print(runner.process.pid, runner.port, runner._log_path, flush=True)
time.sleep(300)
"""


@pytest.mark.slow
def test_a_broker_started_from_a_thread_that_ended_stops_when_its_parent_is_killed(tmp_path):
    value = uuid.uuid4().hex
    parent = subprocess.Popen([sys.executable, "-c", PARENT, str(tmp_path / "data")], stdout=subprocess.PIPE,
                              text=True, env=marked_env(value))
    log_path = None
    try:
        line = parent.stdout.readline()
        assert line, f"the parent printed nothing (exit {parent.poll()})"
        pid_text, port, log_path = line.split()
        broker = int(pid_text)
        time.sleep(1)  # the starting thread has ended (PR_SET_PDEATHSIG would have killed the broker)
        assert _alive(broker)
        assert main(["healthcheck", "--bootstrap-server", f"127.0.0.1:{port}", "--timeout", "10",
                     "--quiet"]) == 0  # and it serves
        parent.kill()  # -9: no clean-up of its own
        parent.wait()
        assert wait_until(lambda: not _alive(broker), 15), f"the broker (pid {broker}) outlived its parent"
        log = Path(log_path).read_text(errors="replace")
        assert "the parent process is gone (end of file on MINIBROKER_PARENT_PIPE_FD)" in log, log[-3000:]
        assert "shutting down" in log and "minibroker stopped" in log, log[-3000:]  # the clean stop ran
    finally:
        parent.kill()
        parent.wait()
        parent.stdout.close()
        kill_leftovers(value)
        if log_path:
            Path(log_path).unlink(missing_ok=True)


def test_tied_child_gets_the_read_end_and_its_number():
    kwargs = tied_to_this_process({"A": "1"})
    fd = kwargs["pass_fds"][0]
    assert kwargs["env"] == {"A": "1", parent_watch.PARENT_PIPE_ENV: str(fd)}
    assert not os.get_inheritable(fd)  # only the children it is passed to get it
    assert tied_to_this_process()["pass_fds"] == (fd,)  # one pipe per process
    assert parent_watch.PARENT_PIPE_ENV not in os.environ


@pytest.mark.parametrize("value", ["not-a-number", "999999", "file"])
def test_a_variable_that_names_no_pipe_is_ignored(value, monkeypatch, tmp_path, caplog):
    with open(tmp_path / "f", "w") as f:
        monkeypatch.setenv(parent_watch.PARENT_PIPE_ENV, str(f.fileno()) if value == "file" else value)
        assert parent_watch.watch_pipe_from_environment() is False  # no watch, the broker serves on
    assert parent_watch.PARENT_PIPE_ENV not in os.environ  # not passed on to children
    assert "is not the descriptor of an open pipe" in caplog.text


# -- a run that holds brokers -----------------------------------------------------------------------

HOLD_CONFTEST = """
from minibroker.testing import sigterm_as_keyboard_interrupt


def pytest_configure(config):
    sigterm_as_keyboard_interrupt()  # as tests/conftest.py does
"""

HOLD_TEST = """
import os
import time
from pathlib import Path


def test_hold(minibroker, minibroker_factory):
    brokers = [minibroker_factory(mode="process") for _ in range(2)]  # and the session's thread broker
    ready = Path(os.environ["CLEAN_STOP_READY"])
    ready.with_suffix(".tmp").write_text(" ".join(str(b.process.pid) for b in brokers))
    ready.with_suffix(".tmp").rename(ready)
    time.sleep(300)
"""


def hold_project(tmp_path: Path) -> tuple[Path, Path]:
    """A test directory whose one test starts brokers (two process-mode, one in-process) and sleeps;
    returns it and the file the test writes its brokers' pids to once they are up."""
    project = tmp_path / "hold"
    project.mkdir()
    (project / "conftest.py").write_text(HOLD_CONFTEST)
    (project / "test_hold.py").write_text(HOLD_TEST)
    return project, tmp_path / "ready"


def wait_ready(ready: Path, proc: subprocess.Popen, output: Path) -> list[int]:
    def check():
        if proc.poll() is not None:
            pytest.fail(f"the run ended early ({proc.returncode}):\n{output.read_text()[-4000:]}")
        return ready.exists()

    assert wait_until(check, 120, 0.2), f"no broker up after 120 s:\n{output.read_text()[-4000:]}"
    return [int(pid) for pid in ready.read_text().split()]


# -- kill -9 of pytest mid-test -----------------------------------------------------------------------

@pytest.mark.slow
@pytest.mark.parametrize("workers", ["0", "2"])
def test_kill_9_of_pytest_leaves_no_broker(tmp_path, workers):
    project, ready = hold_project(tmp_path)
    value, output = uuid.uuid4().hex, tmp_path / "pytest.out"
    env = marked_env(value, CLEAN_STOP_READY=str(ready), TMPDIR=str(tmp_path))
    with open(output, "w") as out:
        proc = subprocess.Popen([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-n", workers,
                                 str(project)], cwd=tmp_path, env=env, stdout=out, stderr=subprocess.STDOUT)
    try:
        brokers = wait_ready(ready, proc, output)
        running = marked(value)
        assert set(brokers) <= set(running), describe(running)
        proc.kill()
        proc.wait()
        left = left_after(value, 25)  # -n 2: the worker is interrupted after 5 s, os._exit after 15 s
        assert not left, (f"25 s after kill -9 of pytest (-n {workers}) these are still running:\n"
                          f"{describe(left)}\nwhile it ran:\n{describe(running)}")
    finally:
        proc.kill()
        proc.wait()
        kill_leftovers(value)


# -- SIGTERM to scripts/run-tests.sh ------------------------------------------------------------------

STUB_PYTHON3 = """#!/bin/sh
# python3 for scripts/run-tests.sh under test: its `pip install -e` is not run; the rest is real
if [ "$1" = -m ] && [ "$2" = pip ]; then echo "stub: python3 $*" >&2; exit 0; fi
exec {python} "$@"
"""


def stubs(tmp_path: Path) -> Path:
    """apt-get and sudo that install nothing, and a python3 that skips pip (first on PATH)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "python3").write_text(STUB_PYTHON3.format(python=sys.executable))
    (bin_dir / "apt-get").write_text('#!/bin/sh\necho "stub: apt-get $*" >&2\n')
    (bin_dir / "sudo").write_text('#!/bin/sh\nexec "$@"\n')
    for stub in bin_dir.iterdir():
        stub.chmod(0o755)
    return bin_dir


def _suite_broker_up_or_suite_gone(value: str) -> bool:
    """kafka-python's client suite has its broker up (a `serve` whose parent is that suite's script), or
    the suite has ended already (without its sdist in the cache it cannot run offline)."""
    running = marked(value)
    suite = [pid for pid, cmd in running.items() if "client_suite_kafka_python" in cmd]
    return not suite or any(" serve " in cmd and _ppid(pid) in suite for pid, cmd in running.items())


@pytest.mark.slow
def test_sigterm_to_run_tests_leaves_no_process_of_the_run(tmp_path):
    project, ready = hold_project(tmp_path)
    value, output = uuid.uuid4().hex, tmp_path / "run-tests.out"
    temp = tmp_path / "tmp"
    temp.mkdir()
    # The client suites run for real, offline: kafka-python's from the cached sdist (without it, its
    # `pip download` fails at once), confluent-kafka's share suite reports NOT RUN unless cached.
    nowhere = "http://127.0.0.1:9"  # a proxy that refuses every connection
    local = "127.0.0.1,localhost"
    no_network = {"PIP_NO_INDEX": "1", "http_proxy": nowhere, "https_proxy": nowhere, "HTTP_PROXY": nowhere,
                  "HTTPS_PROXY": nowhere, "no_proxy": local, "NO_PROXY": local}
    env = marked_env(value, CLEAN_STOP_READY=str(ready), TMPDIR=str(temp), MINIBROKER_CLIENT_SUITES="1",
                     MINIBROKER_ARTIFACTS_DIR=str(tmp_path / "artifacts"),
                     PATH=f"{stubs(tmp_path)}{os.pathsep}{os.environ.get('PATH', os.defpath)}", **no_network)
    with open(output, "w") as out:
        proc = subprocess.Popen(["bash", str(ROOT / "scripts" / "run-tests.sh"), "-p", "no:cacheprovider",
                                 "-n", "2", str(project)], cwd=ROOT, env=env, stdout=out,
                                stderr=subprocess.STDOUT)
    try:
        brokers = wait_ready(ready, proc, output)
        wait_until(lambda: _suite_broker_up_or_suite_gone(value), 30, 0.2)
        running = marked(value)
        assert set(brokers) <= set(running), describe(running)
        proc.send_signal(signal.SIGTERM)
        t0 = time.monotonic()
        try:
            code = proc.wait(10)
        except subprocess.TimeoutExpired:
            code = None
        left = left_after(value, 10 - (time.monotonic() - t0))
        text = output.read_text()
        assert not left, (f"10 s after SIGTERM to run-tests.sh these are still running:\n{describe(left)}\n"
                          f"while it ran:\n{describe(running)}\nits output ends:\n{text[-3000:]}")
        assert code == 143, f"run-tests.sh exited {code}:\n{text[-3000:]}"
        assert "run-tests.sh: signal 15: stopping pytest and the client suites" in text
        if "still running after" not in text:  # all ended on SIGTERM (a loaded machine may need SIGKILL)
            # pytest and the suite tore their fixtures down: the brokers' data directories are gone
            dirs = [p.name for p in temp.iterdir() if p.is_dir() and p.name.startswith("minibroker-")]
            assert not dirs, f"left behind: {dirs}\n{text[-3000:]}"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        kill_leftovers(value)
