"""Listening sockets, resolved and bound before the event loop takes them.

``loop.create_server(host, port)`` resolves the host on the loop's resolver threads: uvloop
starts libuv's pool of four, which then sit idle for the life of the process with their own
stacks and malloc arenas (about 2 MB of RSS). Resolving once here, at start-up, costs nothing
and keeps the broker single-threaded.
"""

from __future__ import annotations

import socket


def listen_socket(host: str, port: int, backlog: int) -> socket.socket:
    """A non-blocking listening TCP socket for ``host:port`` (port 0: any free port).

    As Kafka binds a listener (Java's ``InetSocketAddress``), one address per listener: an
    empty host is the wildcard, dual-stack where the kernel offers IPv6, and a name binds its
    first resolved address.
    """
    if not host:
        if socket.has_dualstack_ipv6():
            sock = socket.create_server(("", port), family=socket.AF_INET6, backlog=backlog,
                                        dualstack_ipv6=True)
        else:
            sock = socket.create_server(("", port), backlog=backlog)
    else:
        # An ASCII name goes as bytes: a str is put through the idna codec, whose import costs
        # a third of a megabyte of RSS for nothing.
        name = host.encode() if host.isascii() else host
        family, _, _, _, address = socket.getaddrinfo(name, port, type=socket.SOCK_STREAM,
                                                      flags=socket.AI_PASSIVE)[0]
        sock = socket.create_server(address, family=family, backlog=backlog)
    sock.setblocking(False)
    return sock
