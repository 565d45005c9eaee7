"""Stop this process when the process that started it is gone, however it ended (kill -9 included).

Two watches, each a daemon thread that, once its parent is gone, sends SIGTERM to its own process (the
clean shutdown runs: a broker flushes and checkpoints, pytest tears its fixtures down where SIGTERM is
turned into KeyboardInterrupt) and SIGKILL ``GRACE_S`` seconds later if the process still runs:

- ``watch_pipe_from_environment()``: ``minibroker serve`` with ``MINIBROKER_PARENT_PIPE_FD`` set (by
  ``minibroker.testing.tied_to_this_process``, which ``BrokerRunner(mode="process")`` uses) holds the
  read end of a pipe whose only write end stays in the parent: end of file on it means the parent is
  gone. Unlike Linux's PR_SET_PDEATHSIG, which fires when the *thread* that forked the child exits, this
  does not care which thread started the broker, and it works on any POSIX system;
- ``watch_parent_pid(ppid)``: the parent process id changes when the parent dies (the child is
  reparented to init or a subreaper); for a helper process that is not ``minibroker serve`` (the driver of
  tests/test_docs_examples.py, which starts brokers tied to itself). pytest-xdist workers need neither:
  execnet sends a worker whose controller is gone SIGINT after 5 s and ends it with ``os._exit`` 10 s
  later, and the brokers tied to the worker stop with it.

``minibroker serve`` imports this module only when the variable is set: a plain broker pays nothing.
"""

from __future__ import annotations

import logging
import os
import signal
import stat
import threading
import time

PARENT_PIPE_ENV = "MINIBROKER_PARENT_PIPE_FD"
GRACE_S = 5.0  # from SIGTERM to SIGKILL when the clean stop does not end the process
POLL_S = 0.5  # watch_parent_pid's interval

log = logging.getLogger("minibroker.server.parent_watch")


def watch_pipe_from_environment() -> bool:
    """Start the pipe watch when ``MINIBROKER_PARENT_PIPE_FD`` names an open pipe; the variable is
    removed from the environment (this process's children do not hold the pipe). Returns whether a
    watch started; a value that is not an open pipe's descriptor is warned about and ignored."""
    value = os.environ.pop(PARENT_PIPE_ENV, None)
    if value is None:
        return False
    try:
        fd = int(value)
        if not stat.S_ISFIFO(os.fstat(fd).st_mode):
            raise ValueError("not a pipe")
        os.set_inheritable(fd, False)
    except (ValueError, OSError) as e:
        log.warning("%s=%s is not the descriptor of an open pipe (%s): not watching the parent process",
                    PARENT_PIPE_ENV, value, e)
        return False
    threading.Thread(target=_wait_for_eof, args=(fd,), name="minibroker-parent-watch", daemon=True).start()
    return True


def _wait_for_eof(fd: int) -> None:
    try:
        while os.read(fd, 4096):  # the parent never writes; anything read is ignored
            pass
    except OSError as e:
        log.warning("reading %s (fd %d) failed (%s): no longer watching the parent process",
                    PARENT_PIPE_ENV, fd, e)
        return
    _stop_self(f"the parent process is gone (end of file on {PARENT_PIPE_ENV})")


def watch_parent_pid(ppid: int | None = None) -> None:
    """Stop this process once its parent process id is no longer ``ppid`` (default: the current one)."""
    ppid = os.getppid() if ppid is None else ppid

    def watch() -> None:
        while os.getppid() == ppid:
            time.sleep(POLL_S)
        _stop_self(f"the parent process (pid {ppid}) is gone")

    threading.Thread(target=watch, name="minibroker-parent-watch", daemon=True).start()


def _stop_self(why: str) -> None:
    log.warning("%s: stopping (SIGTERM, then SIGKILL after %.0f s)", why, GRACE_S)
    os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(GRACE_S)
    log.warning("still running %.0f s after SIGTERM: SIGKILL", GRACE_S)
    os.kill(os.getpid(), signal.SIGKILL)
