"""Polling for a state, the one way the suite waits: with a deadline, and on giving up, what it last saw."""

from __future__ import annotations

import os
import platform
import time


def wait_until(predicate, what: str = "condition", timeout: float = 30.0, *, interval: float = 0.02,
               seen=None):
    """Poll ``predicate`` until it returns something true, and return that. After ``timeout`` seconds,
    fail naming ``what`` and what was last seen: ``seen()`` when given (the state the predicate looks
    at), else the predicate's last result."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            last = seen() if seen is not None else value
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what}; last seen: {last!r}")
        time.sleep(interval)


# read(2)'s number in /proc/PID/task/TID/syscall, by machine
_READ_SYSCALL = {"x86_64": "0", "aarch64": "63"}.get(platform.machine())


def wait_until_reading_stdin(pid: int, what: str, timeout: float = 30.0) -> None:
    """Until one of the process's threads is blocked in read(2) on its standard input (Linux's /proc);
    on a machine whose syscall numbers this does not know, a 3 s pause stands in."""
    if _READ_SYSCALL is None:
        time.sleep(3)
        return

    def syscalls() -> list[list[str]]:
        found = []
        for task in os.listdir(f"/proc/{pid}/task"):
            try:
                with open(f"/proc/{pid}/task/{task}/syscall") as f:
                    found.append(f.read().split()[:2])
            except OSError:
                pass  # a thread gone meanwhile
        return found

    wait_until(lambda: [_READ_SYSCALL, "0x0"] in syscalls(), what, timeout, seen=syscalls)
