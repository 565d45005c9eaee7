"""Polling for a state, the one way the suite waits: with a deadline, and on giving up, what it last saw."""

from __future__ import annotations

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
