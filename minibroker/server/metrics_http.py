"""The optional ``/metrics`` endpoint: a tiny HTTP/1.1 server on the broker's event loop.

Started by ``Broker.start()`` when ``metrics.port`` is set (0 picks a free port; the bound port
is ``MetricsHttpServer.port`` and is logged). It binds the host of the first listener, answers
``GET /metrics`` (and ``HEAD``) with ``render_prometheus(broker)`` followed by the log cleaner's
series (``render_cleaner(broker)``), ``GET /`` with a pointer,
the routes of ``broker.metrics_mounts`` (path prefix -> handler answering the whole exchange: the
live view, minibroker/tools/live_view.py, mounts ``/ui``), 404 for other paths and 405 for other
methods; one request per connection
(``Connection: close``), a 5 s deadline to send the request head, heads above 16 KiB refused.
Not a general web server: no keep-alive, no chunked bodies, no TLS.

Owner of: its listening socket and the connections it is answering; closed by the broker's
close hooks.
"""

from __future__ import annotations

import asyncio
import logging

from minibroker.server.metrics import CONTENT_TYPE, _Series, render_prometheus

log = logging.getLogger("minibroker.metrics")

HEAD_LIMIT = 16 * 1024
HEAD_TIMEOUT = 5.0
CLOSE_TIMEOUT = 1.0  # seconds a graceful close may wait for the peer to take the last bytes


async def write_answer(writer: asyncio.StreamWriter, status: str, body: bytes, content_type: str,
                       include_body: bool = True) -> None:
    """One whole answer, then the connection closes (``Connection: close``)."""
    writer.write(b"HTTP/1.1 %s\r\nContent-Type: %s\r\nContent-Length: %d\r\nConnection: close\r\n\r\n"
                 % (status.encode(), content_type.encode(), len(body)))
    if include_body:
        writer.write(body)
    await writer.drain()


def answering_with(fn):
    """A ``broker.metrics_mounts`` handler from ``fn(method, target, head, reader)`` returning
    ``(status, body, content type)``: for routes that answer in one piece (``/faults``)."""
    async def handler(head: bytes, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        method, target, _ = head.split(b"\r\n", 1)[0].decode("latin-1").split()  # _mounted checked
        await write_answer(writer, *await fn(method, target, head, reader))
    return handler


class MetricsHttpServer:
    def __init__(self, broker):
        self.broker = broker
        self.server: asyncio.base_events.Server | None = None
        self.host = ""
        self.port = 0
        self._handlers: set[asyncio.Task] = set()

    async def start(self, host: str, sock) -> None:
        """Serve on ``sock``, a listening socket bound by the broker before it loaded its logs."""
        self.server = await asyncio.start_server(self._serve, sock=sock, limit=HEAD_LIMIT)
        self.host = host
        self.port = self.server.sockets[0].getsockname()[1]
        log.info("metrics at http://%s:%d/metrics", host or "0.0.0.0", self.port)
        for prefix in getattr(self.broker, "metrics_mounts", ()):
            log.info("also serving http://%s:%d%s", host or "0.0.0.0", self.port, prefix)

    async def close(self) -> None:
        if self.server is None:
            return
        self.server.close()
        for task in list(self._handlers):
            task.cancel()
        if self._handlers:
            await asyncio.gather(*self._handlers, return_exceptions=True)
        try:
            async with asyncio.timeout(0.5):
                await self.server.wait_closed()
        except TimeoutError:
            pass
        self.server = None

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        self._handlers.add(task)
        try:
            async with asyncio.timeout(HEAD_TIMEOUT):
                head = await reader.readuntil(b"\r\n\r\n")
            mounted = self._mounted(head)
            if mounted is not None:  # a route added through broker.metrics_mounts answers it whole
                await mounted(head, reader, writer)
                return
            status, body, content_type = self._answer(head)
            await write_answer(writer, status, body, content_type, include_body=not head.startswith(b"HEAD "))
        except (TimeoutError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError) as e:
            log.debug("metrics request dropped: %r", e)
        except asyncio.CancelledError:
            # close() cancels the handlers still open (a live view's feed): end quietly, as Python 3.11's
            # streams log a handler task that ends cancelled as "Exception in callback" at ERROR
            pass
        finally:
            self._handlers.discard(task)
            writer.close()
            try:  # a peer that reads nothing holds a graceful close (and the broker's stop) open: cut it
                async with asyncio.timeout(CLOSE_TIMEOUT):
                    await writer.wait_closed()
            except ConnectionError:
                pass
            except TimeoutError:
                writer.transport.abort()

    def _mounted(self, head: bytes):
        """The handler of ``broker.metrics_mounts`` whose prefix the request's path starts with."""
        mounts = getattr(self.broker, "metrics_mounts", None)
        if not mounts:
            return None
        parts = head.split(b"\r\n", 1)[0].split()
        path = parts[1].decode("latin-1") if len(parts) == 3 else ""
        for prefix, handler in mounts.items():
            if path == prefix or path.startswith(prefix + "/") or path.startswith(prefix + "?"):
                return handler
        return None

    def _answer(self, head: bytes) -> tuple[str, bytes, str]:
        request_line = head.split(b"\r\n", 1)[0].decode("latin-1")
        parts = request_line.split()
        if len(parts) != 3 or not parts[2].startswith("HTTP/"):
            return "400 Bad Request", b"bad request\n", "text/plain"
        method, target = parts[0], parts[1].split("?", 1)[0]
        if method not in ("GET", "HEAD"):
            return "405 Method Not Allowed", b"GET only\n", "text/plain"
        if target == "/metrics":
            text = render_prometheus(self.broker) + render_cleaner(self.broker)
            return "200 OK", text.encode(), CONTENT_TYPE
        if target == "/":
            return "200 OK", b"minibroker: metrics at /metrics\n", "text/plain"
        return "404 Not Found", b"not found\n", "text/plain"


class _NoCleanerStats:
    """The cleaner's counters before there is a cleaner (storage/cleaner.py's CleanerStats, all zero)."""

    runs = bytes_read = bytes_written = records_removed = aborted_swaps = 0


_NO_CLEANER_STATS = _NoCleanerStats()


def render_cleaner(broker) -> str:
    """The log cleaner's series (storage/cleaner.py, ``LogCleaner.stats``): passes, bytes, records
    removed, and the dirty ratio of each log it may compact. Empty before the logs are loaded; zeros
    while no topic is compacted (the cleaner is made with the first one)."""
    if broker.logs is None:
        return ""
    cleaner = broker.logs.cleaner
    stats = cleaner.stats if cleaner is not None else _NO_CLEANER_STATS
    out: list[str] = []
    _Series(out, "minibroker_log_cleaner_runs_total", "counter",
            "Cleaning passes started (one pass cleans one log).").sample(stats.runs)
    _Series(out, "minibroker_log_cleaner_bytes_read_total", "counter",
            "Log bytes the cleaner read (building offset maps and rewriting segments).").sample(
                stats.bytes_read)
    _Series(out, "minibroker_log_cleaner_bytes_written_total", "counter",
            "Bytes of cleaned segments the cleaner wrote.").sample(stats.bytes_written)
    _Series(out, "minibroker_log_cleaner_records_removed_total", "counter",
            "Records the cleaner removed (older values, expired tombstones, aborted data).").sample(
                stats.records_removed)
    _Series(out, "minibroker_log_cleaner_abandoned_passes_total", "counter",
            "Passes abandoned because the log changed under them (retention, deletion).").sample(
                stats.aborted_swaps)
    ratio = _Series(out, "minibroker_log_cleaner_dirty_ratio", "gauge",
                    "Bytes not yet cleaned over the cleanable bytes of a compacted log (the active segment "
                    "excluded); cleaned when it reaches min.cleanable.dirty.ratio.")
    for (topic, partition), value in sorted(cleaner.dirty_ratios().items() if cleaner is not None else ()):
        ratio.sample(float(value), topic=topic, partition=partition)
    return "\n".join(out) + "\n"


async def start_metrics_http(broker, host: str, sock) -> MetricsHttpServer:
    """Serve the endpoint on ``sock`` (bound for ``metrics.port`` on ``host``); it is closed with
    the broker."""
    server = MetricsHttpServer(broker)
    await server.start(host, sock)
    broker.on_close(server.close)
    return server
