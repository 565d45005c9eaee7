"""Listening sockets, and accepting on them within Kafka's connection quotas.

Binding: ``loop.create_server(host, port)`` resolves the host on the loop's resolver threads:
uvloop starts libuv's pool of four, which then sit idle for the life of the process with their
own stacks and malloc arenas (about 2 MB of RSS). Resolving once here, at start-up, costs
nothing and keeps the broker single-threaded.

Accepting: ``SocketServer`` owns the bound listeners once the broker serves, as Kafka's
SocketServer, Acceptor and ConnectionQuotas do (one event loop here instead of threads):

- ``max.connections``: at the limit the acceptors stop calling ``accept()`` (the listening
  sockets leave the event loop), so new clients wait in the kernel's listen backlog
  (``socket.listen.backlog.size``) until a connection closes. When the limit is lowered at run
  time below the connections open, the least recently active ones are closed;
- ``max.connections.per.ip`` and ``max.connections.per.ip.overrides``: a connection over its
  address's limit is accepted, then closed at once (logged at INFO, as Kafka does);
- ``connections.max.idle.ms``: a connection with no bytes read or written for that long is
  closed, unless a request is being answered (a long poll waiting, say) while the client reads
  what is written; a client that stops reading its responses is closed like a silent one
  (checked by a sweep every ``min(1 s, idle / 10)``);
- ``socket.send.buffer.bytes`` is set on each accepted socket, ``socket.receive.buffer.bytes`` on
  the listening socket before ``listen()`` (accepted sockets inherit it, and the TCP window scale
  is chosen from it); -1 keeps the OS's default (and its auto-tuning);
- ``max.connection.creation.rate`` (broker-wide, and per listener as
  ``listener.name.<listener>.max.connection.creation.rate``: over it, the next accept waits the
  throttle time; every listener waits meanwhile, where Kafka's acceptor of that listener waits alone) and
  the ``connection_creation_rate`` client quota per address (over it, the connection is held without
  an answer for the throttle time, then closed), measured as Kafka's ConnectionQuotas measures them
  (minibroker/services/quotas.py);
- ``queued.max.request.bytes``: the ``MemoryPool`` every connection reserves request bytes from
  (minibroker/server/connection.py);
- SSL and SASL_SSL listeners: the TLS handshake runs before the connection is made, within
  ``ssl_handshake_timeout`` (minibroker/security/tls.py builds each listener's context at start-up, and
  again when AlterConfigs changes an ``ssl.*`` key: ``reload_tls`` / ``use_tls``; a connection keeps the
  context it was accepted with).

Limits are read from the configuration at each accept and sweep, so AlterConfigs changes to
the dynamic ones (``max.connections``, ``max.connections.per.ip`` and its overrides) apply to the
next connection.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import socket

from minibroker.config.listeners import address_key

log = logging.getLogger("minibroker.server")

UNLIMITED_RATE = 2**31 - 1  # max.connection.creation.rate's default: no limit
ACCEPT_BATCH = 128  # connections accepted per wake-up, so a flood of connects cannot starve the loop
ACCEPT_RETRY_S = 1.0  # pause after running out of file descriptors, as asyncio's own server does
_RESOURCE_ERRNOS = (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM)


def listen_socket(host: str, port: int, backlog: int, recv_buffer: int = -1) -> socket.socket:
    """A non-blocking listening TCP socket for ``host:port`` (port 0: any free port).

    As Kafka binds a listener (Java's ``InetSocketAddress``), one address per listener: an
    empty host is the wildcard, dual-stack where the kernel offers IPv6, and a name binds its
    first resolved address. ``recv_buffer`` (``socket.receive.buffer.bytes``, -1 for the OS
    default) is set before ``listen()``, as Kafka sets it on its server socket.
    """
    if not host:
        if socket.has_dualstack_ipv6():
            family, address, dualstack = socket.AF_INET6, ("", port), True
        else:
            family, address, dualstack = socket.AF_INET, ("", port), False
    else:
        # An ASCII name goes as bytes: a str is put through the idna codec, whose import costs
        # a third of a megabyte of RSS for nothing.
        name = host.encode() if host.isascii() else host
        family, _, _, _, address = socket.getaddrinfo(name, port, type=socket.SOCK_STREAM,
                                                      flags=socket.AI_PASSIVE)[0]
        dualstack = False
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as socket.create_server does
        if family == socket.AF_INET6:
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0 if dualstack else 1)
        if recv_buffer != -1:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, recv_buffer)
        sock.bind(address)
        sock.listen(backlog)
    except BaseException:
        sock.close()
        raise
    sock.setblocking(False)
    return sock


def resolve_ip_overrides(value: str) -> dict[str, int]:
    """``max.connections.per.ip.overrides`` as {address: limit}. Host names are resolved to their
    first address, as Kafka's ``InetAddress.getByName``; a name that does not resolve is
    skipped with a warning (Kafka refuses the value)."""
    from minibroker.config import parse_host_counts

    out: dict[str, int] = {}
    for host, count in parse_host_counts(value).items():
        try:
            for family in (socket.AF_INET, socket.AF_INET6):
                try:
                    packed = socket.inet_pton(family, host)
                except OSError:
                    continue
                out[address_key(socket.inet_ntop(family, packed))] = count
                break
            else:
                name = host.encode() if host.isascii() else host
                address = socket.getaddrinfo(name, None, type=socket.SOCK_STREAM)[0][4][0]
                out[address_key(address)] = count
        except OSError as e:
            log.warning("max.connections.per.ip.overrides: cannot resolve %s (%s); its override is ignored",
                        host, e)
    return out


class Listener:
    """One bound listening socket and the listener name it serves; ``tls`` (a
    minibroker.security.tls.ListenerTls) on SSL and SASL_SSL listeners."""

    __slots__ = ("name", "sock", "security_protocol", "tls")

    def __init__(self, name: str, sock: socket.socket, security_protocol: str = "PLAINTEXT", tls=None):
        self.name, self.sock, self.security_protocol, self.tls = name, sock, security_protocol, tls


class SocketServer:
    """Accepts on the broker's listeners within the connection quotas; closes idle connections.

    Owner of: the listening sockets once serving, the connection counts (all listeners together
    and per client address), the memory pool of ``queued.max.request.bytes`` and the idle sweep.
    The connections themselves are in ``broker.connections``; each one gives its count back
    through ``release`` when it closes.
    """

    def __init__(self, broker, config):
        from minibroker.server.connection import MemoryPool, RequestQueue

        self.broker = broker
        self.config = config
        self.listeners: list[Listener] = []
        self.total = 0  # counted connections: accepted and not yet closed, on every listener
        self.per_address: dict[str, int] = {}
        queued_max = config["queued.max.request.bytes"]
        self.memory_pool = MemoryPool(queued_max) if queued_max > 0 else None
        self.request_queue = RequestQueue(config["queued.max.requests"])
        self._accepting = False
        self._backoff: asyncio.TimerHandle | None = None
        # connection creation rates (max.connection.creation.rate, the ip client quotas): measured once
        # one is set (connection_rates)
        self._connection_rates = None
        self._held: tuple | None = None  # the connection accepted while the broker-wide rate throttles
        self._rate_refused: dict[socket.socket, asyncio.TimerHandle] = {}  # held, then closed
        self._closed = False
        self._pending: set[asyncio.Task] = set()  # accepted sockets being handed to transports
        self._overrides_raw: str | None = None
        self._overrides: dict[str, int] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        idle_ms = config["connections.max.idle.ms"]
        self.idle_s = idle_ms / 1000 if idle_ms >= 0 else None  # negative: never expire, as Kafka
        self.sweep_interval_s = min(1.0, max(0.01, self.idle_s / 10)) if self.idle_s is not None else 1.0

    # -- limits (read at each use: the dynamic ones change at run time) ------------------------

    @property
    def connection_rates(self):
        """``ConnectionRateQuotas`` (minibroker/services/quotas.py, Kafka's ConnectionQuotas rates),
        built on first use: a broker with no rate and no client quota set never imports the quotas."""
        if self._connection_rates is None:
            from minibroker.services.quotas import ConnectionRateQuotas

            self._connection_rates = ConnectionRateQuotas(self.broker.client_quotas, self.config)
        return self._connection_rates

    def _rates_in_use(self, listener: str):
        """The connection rates, if an accept on ``listener`` must be measured: a broker-wide or listener
        ``max.connection.creation.rate`` is set, or client quotas are (an ip quota may be among them);
        else None, and nothing is counted, as before a limit exists."""
        if self._connection_rates is not None:
            return self._connection_rates
        config = self.config
        if ("client_quotas" in vars(self.broker) or config["max.connection.creation.rate"] < UNLIMITED_RATE
                or config.for_listener(listener, "max.connection.creation.rate") < UNLIMITED_RATE):
            return self.connection_rates
        return None

    def max_connections(self) -> int:
        return self.config["max.connections"]

    def address_limit(self, address: str) -> int:
        raw = self.config["max.connections.per.ip.overrides"] or ""
        if raw != self._overrides_raw:
            self._overrides = resolve_ip_overrides(raw)
            self._overrides_raw = raw
        limit = self._overrides.get(address)
        return self.config["max.connections.per.ip"] if limit is None else limit

    def slot_available(self) -> bool:
        return self.total < self.max_connections()

    # -- lifecycle ------------------------------------------------------------------------------

    def start(self, listeners: list[Listener]) -> None:
        """Start accepting on ``listeners`` (bound and listening) and the idle sweep."""
        self._loop = asyncio.get_running_loop()
        self.listeners = list(listeners)
        self._resume_accepting()
        self.broker.spawn(self._sweep_forever())

    def close(self) -> None:
        """Stop accepting and close the listening sockets (connections stay open)."""
        self._closed = True
        self._pause_accepting()
        if self._backoff is not None:
            self._backoff.cancel()
        if self._held is not None:
            self._held[1].close()
            self._held = None
        for sock, timer in self._rate_refused.items():
            timer.cancel()
            sock.close()
        self._rate_refused.clear()
        for listener in self.listeners:
            listener.sock.close()
        for task in self._pending:
            task.cancel()

    # -- TLS settings changed at run time --------------------------------------------------------

    def reload_tls(self, keys) -> dict:
        """New TLS settings (minibroker.security.tls.ListenerTls by listener name) for each TLS listener
        one of the altered ``keys`` applies to (an ``ssl.*`` key: all; its listener form: that one), read
        from the configuration as it is now and checked against the ones serving; raises TlsConfigError.
        Nothing changes until ``use_tls``."""
        from minibroker.security.tls import listeners_of, reload_listener_tls

        serving = {lst.name: lst.tls for lst in self.listeners if lst.tls is not None}
        names = listeners_of(keys, serving)
        return reload_listener_tls(self.config, {name: serving[name] for name in names})

    def use_tls(self, tls_by_listener: dict) -> None:
        """Serve the next connections of each listener named with its new TLS settings."""
        for listener in self.listeners:
            if listener.name in tls_by_listener:
                listener.tls = tls_by_listener[listener.name]

    # -- accepting ------------------------------------------------------------------------------

    def _pause_accepting(self) -> None:
        if self._accepting:
            self._accepting = False
            for listener in self.listeners:
                self._loop.remove_reader(listener.sock)

    def _resume_accepting(self) -> None:
        if not self._accepting and not self._closed and self._backoff is None and self.slot_available():
            self._accepting = True
            for listener in self.listeners:
                self._loop.add_reader(listener.sock, self._accept, listener)

    def _accept(self, listener: Listener) -> None:
        for _ in range(ACCEPT_BATCH):
            if not self.slot_available():
                # Kafka's acceptor blocks in ConnectionQuotas.inc until a slot frees; here the
                # listening sockets leave the loop and the kernel's backlog holds new clients.
                log.debug("max.connections (%d) reached; not accepting until a connection closes",
                          self.max_connections())
                self._pause_accepting()
                return
            try:
                sock, peer = listener.sock.accept()
            except (BlockingIOError, InterruptedError):
                return
            except ConnectionAbortedError:
                continue
            except OSError as e:
                if e.errno in _RESOURCE_ERRNOS:
                    log.error("cannot accept on listener %s: %s; retrying in %.0f s", listener.name,
                              e.strerror, ACCEPT_RETRY_S)
                    self._pause_accepting()
                    self._backoff = self._loop.call_later(ACCEPT_RETRY_S, self._end_backoff)
                    return
                log.warning("accept on listener %s failed: %s", listener.name, e)
                return
            address = address_key(peer[0])
            rates = self._rates_in_use(listener.name)
            delay = rates.broker_delay_ms(listener.name) if rates is not None else 0
            if delay:
                # Kafka's acceptor waits out the throttle before it takes the connection in; here the
                # listening sockets leave the loop meanwhile
                log.debug("max.connection.creation.rate exceeded on %s: next connection in %d ms",
                          listener.name, delay)
                self._pause_accepting()
                self._held = (listener, sock, address)
                self._backoff = self._loop.call_later(delay / 1000, self._end_rate_throttle)
                return
            self._take(listener, sock, address)

    def _end_backoff(self) -> None:
        self._backoff = None
        self._resume_accepting()

    def _end_rate_throttle(self) -> None:
        self._backoff = None
        held, self._held = self._held, None
        if held is not None:
            self._take(*held)
        self._resume_accepting()

    def _take(self, listener: Listener, sock: socket.socket, address: str) -> None:
        """Serve an accepted connection, unless its address is over its connection_creation_rate: then
        it is held, unanswered and uncounted, for the throttle time and closed (Kafka's ConnectionQuotas
        delays the close, so that the client does not reconnect at once)."""
        rates = self._connection_rates
        delay = rates.address_delay_ms(address) if rates is not None else 0
        if delay:
            log.debug("connection from %s over its connection_creation_rate: closing it in %d ms", address,
                      delay)
            self._rate_refused[sock] = self._loop.call_later(delay / 1000, self._close_refused, sock)
            return
        try:
            self._serve(listener, sock, address)
        except Exception:
            log.exception("cannot serve a connection from %s; closing it", address)
            sock.close()

    def _close_refused(self, sock: socket.socket) -> None:
        self._rate_refused.pop(sock, None)
        sock.close()

    def _serve(self, listener: Listener, sock: socket.socket, address: str) -> None:
        from minibroker.server.connection import KafkaConnection

        limit = self.address_limit(address)
        count = self.per_address.get(address, 0)
        self.per_address[address] = count + 1
        self.total += 1
        if count >= limit:
            log.info("Rejected connection from %s, address already has the configured maximum of %d "
                     "connections.", address, limit)
            self._uncount(address)
            sock.close()
            return
        try:
            sock.setblocking(False)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
            send_buffer = self.config["socket.send.buffer.bytes"]
            if send_buffer != -1:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, send_buffer)
        except OSError as e:  # the peer is already gone
            log.debug("closing connection from %s: %s", address, e)
            self._uncount(address)
            sock.close()
            return
        conn = KafkaConnection(self.broker, self.config["socket.request.max.bytes"], listener.name,
                               address=address, pool=self.memory_pool, requests=self.request_queue,
                               security_protocol=listener.security_protocol, tls=listener.tls)
        task = self._loop.create_task(self._connect(sock, conn, listener.tls))
        self._pending.add(task)
        task.add_done_callback(self._pending.discard)

    async def _connect(self, sock: socket.socket, conn, tls=None) -> None:
        try:
            if tls is None:
                await self._loop.connect_accepted_socket(lambda: conn, sock)
            else:
                # The TLS handshake happens here, before the connection is made: a client that does
                # not finish it (plaintext bytes, no certificate under ssl.client.auth=required, silence)
                # fails or times out here and is closed; its slot counts until then. A failed handshake
                # sends its alert on this socket first (minibroker/security/tls.py AlertingSSLObject).
                from minibroker.security.tls import handshake_socket

                handshake_socket.set(sock)
                await self._loop.connect_accepted_socket(
                    lambda: conn, sock, ssl=tls.context, ssl_handshake_timeout=tls.handshake_timeout,
                    ssl_shutdown_timeout=tls.handshake_timeout)
        except BaseException as e:
            # never made (or made and failed at once): its count goes back here; ``release``
            # happens once whichever way the connection ends
            if not isinstance(e, asyncio.CancelledError):
                log.debug("connection from %s failed to start: %s", conn.address, e)
            conn.close()
            sock.close()
            self.release(conn)
            if isinstance(e, asyncio.CancelledError):
                raise

    def release(self, conn) -> None:
        """A connection is gone: give back its count, and accept again if that frees a slot."""
        if conn.counted:
            conn.counted = False
            self._uncount(conn.address)
            if not self._accepting:
                self._resume_accepting()

    def _uncount(self, address: str) -> None:
        self.total -= 1
        count = self.per_address[address] - 1
        if count:
            self.per_address[address] = count
        else:
            del self.per_address[address]

    # -- the sweep: idle expiry, a lowered max.connections, idle read buffers ------------------

    async def _sweep_forever(self) -> None:
        while True:
            await asyncio.sleep(self.sweep_interval_s)
            try:
                self.sweep(self._loop.time())
            except Exception:
                log.exception("connection sweep failed")

    def sweep(self, now: float) -> None:
        """Mark activity since the last sweep; close connections idle for ``connections.max.idle.ms``;
        drop the read buffers of connections that were silent since the last sweep; close the
        least recently active connections while more are open than ``max.connections`` allows."""
        idle_s = self.idle_s
        for conn in list(self.broker.connections):
            if conn.active:
                conn.active = False
                conn.last_active = now
                continue
            conn.release_idle_buffer()
            if idle_s is not None and now - conn.last_active >= idle_s and not conn.answering:
                log.debug("%s: idle for %.0f ms (connections.max.idle.ms=%d), closing", conn.peer,
                          (now - conn.last_active) * 1000, idle_s * 1000)
                conn.close(abort=True)
        excess = self.total - self.max_connections()
        if excess > 0:
            # Kafka's processors close the least recently used connection while the broker is over
            # the limit (it can be lowered at run time).
            open_conns = sorted((c for c in self.broker.connections if not c.closed),
                                key=lambda c: c.last_active)
            for conn in open_conns[:excess]:
                log.info("closing connection from %s: %d connections open, max.connections is %d",
                         conn.peer, self.total, self.max_connections())
                conn.close(abort=True)
        elif not self._accepting:
            self._resume_accepting()  # max.connections may have been raised
