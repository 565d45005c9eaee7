"""A TCP port for a test that must name one before something binds it (podman's ``-p HOST:9092``).

A port the OS handed out for port 0 and that was released again can be handed out again at once, to any
socket of the parallel test run (every client's outgoing connection takes one), before the test binds
it. A port below the kernel's ephemeral range (``ip_local_port_range``) is never handed out that way:
only a test that names it could take it.
"""

from __future__ import annotations

import random
import socket

FIRST_PORT = 10_000


def ephemeral_range() -> tuple[int, int]:
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            low, high = (int(x) for x in f.read().split())
            return low, high
    except (OSError, ValueError):
        return 32768, 60999  # Linux's default


def unassigned_port(host: str = "127.0.0.1") -> int:
    """A port below the ephemeral range that nothing listens on now."""
    low, _ = ephemeral_range()
    for _ in range(200):
        port = random.randrange(FIRST_PORT, max(FIRST_PORT + 1, low))
        with socket.socket() as s:
            try:
                s.bind((host, port))
            except OSError:
                continue
            return port
    raise RuntimeError(f"no free port in {FIRST_PORT}..{low - 1}")
