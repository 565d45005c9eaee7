"""One client connection: Kafka framing on a hand-rolled ``asyncio.Protocol``.

Why a Protocol and not streams: the framed read path costs 3-4x fewer microseconds per
request this way (docs/performance notes). Owner of: the connection's input buffer, its queue
of whole request frames and the order of its responses.

Reading is an ``asyncio.BufferedProtocol``: the kernel reads into buffers we own (see below),
so a request costs one copy at most before it reaches the log.

Rules kept here:
- a frame is an int32 size then that many bytes; a size above ``socket.request.max.bytes``
  (or negative) closes the connection. A size prefix reserves nothing: the read buffer starts at
  ``INITIAL_BUFFER`` (allocated on the first read, dropped or shrunk to what it holds when the
  connection falls silent) and grows, at most doubling, once it is full of one frame's bytes (or, up to
  ``RETAIN_BUFFER``, when whole frames arrive back to back), so a client that announces 100 MiB
  and sends nothing more costs one small buffer;
- with ``queued.max.request.bytes`` set, each frame's size is reserved in the broker's
  ``MemoryPool`` once its size prefix has arrived, as Kafka's SimpleMemoryPool does; when the
  pool is exhausted, a connection that would start a new frame stops being read until bytes
  are released (one that has started a frame finishes it, so reads never deadlock);
- requests are handled one after another and answered strictly in request order; up to
  ``MAX_QUEUED`` whole requests are buffered (clients pipeline up to 5), then reading pauses;
- ``queued.max.requests`` bounds the whole requests read and waiting to be handled, all connections
  together (Kafka's request channel): each buffered request holds a slot of the broker's
  ``RequestQueue`` until its handling starts; while none is free, a connection with a whole request
  read does not handle it (even one it could handle at once) and stops being read, as Kafka's network
  threads block on a full queue; connections are woken in the order they waited;
- a synchronous handler is answered inline in ``data_received`` (no task switch on the produce
  path); an async one (long-poll fetch, group joins) runs in a task while later requests wait;
- responses carrying ``FileRegion``s are sent with ``os.sendfile`` on the socket once the
  transport's own buffer is empty, so record bytes never pass through Python; on TLS connections
  (SSL, SASL_SSL) they are read in ``TLS_CHUNK`` pieces and written to the TLS transport instead,
  with at most ``TLS_WINDOW`` bytes waiting in it;
- a client over a quota (minibroker/services/quotas.py) is answered at once with the throttle time,
  then muted as KIP-219 says: ``throttle(ms)`` stops handling and reading its requests until a timer
  fires, on top of the other reasons to pause reading;
- on SASL listeners ``sasl`` (minibroker/security/sasl/authenticator.py) says which requests may be
  handled before authentication (others close the connection), takes SaslHandshake v0's unframed
  tokens, and a failed exchange closes the connection once its answer is written;
- an unknown API key, an unsupported version (other than ApiVersions') or an undecodable
  request closes this connection only, logged at debug;
- with ``fault.injection.enable=true``, a request a fault rule matches is answered by what
  ``broker.faults`` (minibroker/server/faults.py) puts in place of its handler; without it the cost
  is the one ``broker.faults`` check.
"""

from __future__ import annotations

import asyncio
import collections
import importlib
import logging
import os
import struct
import time

from minibroker.errors import ProtocolViolation
from minibroker.handlers.api_versions import unsupported_version_body
from minibroker.handlers.registry import HANDLERS, SERVED, CloseConnection, handler_module
from minibroker.protocol import codec
from minibroker.protocol.file_region import FileRegion
from minibroker.security.principal import ANONYMOUS

log = logging.getLogger("minibroker.server")
request_log = logging.getLogger("minibroker.request")

MAX_QUEUED = 5
_SIZE = struct.Struct(">i")
API_VERSIONS = 18

INITIAL_BUFFER = 16 * 1024  # a connection's read buffer on its first read
SILENT_BUFFER = 256  # the least a silent connection keeps for the few bytes it holds
RETAIN_BUFFER = 2 * 1024 * 1024  # a larger read buffer is dropped as soon as its frames are handled
TLS_CHUNK = 64 * 1024  # record bytes read per write on a TLS connection (no sendfile there)
TLS_WINDOW = 256 * 1024  # a TLS connection waits for its transport to drain once it holds this much
FAILED_AUTH_LINGER_S = 1.0  # how long a failed SASL login's answered connection waits for the client to close


def _pow2(n: int) -> int:
    return 1 << (n - 1).bit_length()


class MemoryPool:
    """``queued.max.request.bytes``: request bytes all connections together may hold.

    Kafka's SimpleMemoryPool in its non-strict form: a reservation succeeds while anything is
    available, so one frame may overshoot the bound by up to its own size. Connections refused
    wait in line and are woken in order as bytes are released. Owned by the SocketServer; used
    from the event loop only.
    """

    __slots__ = ("limit", "used", "_waiting", "_wake_scheduled")

    def __init__(self, limit: int):
        self.limit = limit
        self.used = 0
        self._waiting: collections.deque = collections.deque()
        self._wake_scheduled = False

    def try_reserve(self, n: int) -> bool:
        if self.used < self.limit and not self._waiting:
            self.used += n
            return True
        return False

    def force(self, n: int) -> None:
        """Count bytes that are held already (a frame that arrived whole and must be queued)."""
        self.used += n

    def wait(self, conn) -> None:
        self._waiting.append(conn)

    def release(self, n: int) -> None:
        self.used -= n
        if self._waiting and self.used < self.limit and not self._wake_scheduled:
            self._wake_scheduled = True
            asyncio.get_running_loop().call_soon(self._wake)

    def _wake(self) -> None:
        self._wake_scheduled = False
        while self._waiting and self.used < self.limit:
            self._waiting.popleft().memory_available()


class RequestQueue:
    """``queued.max.requests``: whole requests read and not yet being handled, all connections together.

    Kafka's RequestChannel is a bounded queue between the network threads and the request handlers; a
    network thread with a request to add blocks while it is full. Here a request waits in its
    connection's queue (behind the request being answered, or a quota mute), holding a slot; a connection
    that finds no slot free leaves its next request unhandled in its read buffer, is not read, and waits
    in line to be woken as slots are released. Owned by the SocketServer; used from the event loop only.
    """

    __slots__ = ("limit", "queued", "waiting", "waking", "_wake_scheduled")

    def __init__(self, limit: int):
        self.limit = limit
        self.queued = 0
        self.waiting: collections.deque = collections.deque()
        self.waking = False  # the connections being woken may go ahead of those still waiting
        self._wake_scheduled = False

    def release(self, n: int = 1) -> None:
        self.queued -= n
        if self.waiting and self.queued < self.limit and not self._wake_scheduled:
            self._wake_scheduled = True
            asyncio.get_running_loop().call_soon(self._wake)

    def _wake(self) -> None:
        self._wake_scheduled = False
        self.waking = True
        try:
            while self.waiting and self.queued < self.limit:
                self.waiting.popleft().requests_available()
        finally:
            self.waking = False


class KafkaConnection(asyncio.BufferedProtocol):
    def __init__(self, broker, max_request_size: int, listener: str = "PLAINTEXT", *, address: str = "",
                 pool: MemoryPool | None = None, security_protocol: str = "PLAINTEXT", tls=None,
                 requests: RequestQueue | None = None):
        self.broker = broker
        self.listener = listener  # the listener name this connection came in on
        self.max_request_size = max_request_size
        self.transport: asyncio.Transport | None = None
        self.peer = None
        self.address = address  # the client's address as the connection quotas count it
        self.counted = True  # holds a slot in the SocketServer's counts until released
        self.active = False  # bytes read or a response written since the last sweep
        self.last_active = 0.0  # loop time of the sweep that last saw activity
        # The read buffer: bytes [_start, _end) are unhandled, beginning with an incomplete frame.
        self._buf: bytearray | None = None
        self._view: memoryview | None = None
        self._start = 0
        self._end = 0
        self._pool = pool
        self._granted = 0  # bytes reserved in the pool for the incomplete frame at _start
        self._queued_bytes = 0  # bytes of queued frames counted in the pool
        self._mem_muted = False  # not read until the pool has room
        self._requests = requests
        self._slots = 0  # requests queued here that hold a slot in the RequestQueue
        self._queue_muted = False  # a whole request waits in the read buffer for a RequestQueue slot
        self._queue: collections.deque = collections.deque()
        self._busy = False
        self._reading_paused = False
        self._closed = False
        self._task: asyncio.Task | None = None
        self._drained: asyncio.Future | None = None  # set while the transport buffer is non-empty
        self._write_paused = False
        self._send_blocked = False  # a sendfile waits for the socket to take more
        self._throttled = False  # a client quota muted it: requests wait until the timer fires
        self._throttle_timer: asyncio.TimerHandle | None = None
        self._stalled = False  # never read again (fault injection's stop_reading)
        self._linger_timer: asyncio.TimerHandle | None = None  # closes a failed SASL login's connection
        self._sock_fd_dup = -1
        self.session_ids: set[int] = set()  # fetch sessions created here (for cleanup)
        self.client_id: str | None = None  # from the ApiVersions request (handlers/api_versions.py)
        self.client_software: tuple[str | None, str | None] = (None, None)  # its name, version (v3+)
        # Who the client is (minibroker/security): User:ANONYMOUS until a client certificate or a SASL
        # login says otherwise. Handlers read it as header.principal (authorizer, quotas).
        self.principal = ANONYMOUS
        self.security_protocol = security_protocol  # PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL
        self.tls = tls  # minibroker.security.tls.ListenerTls on SSL and SASL_SSL listeners, else None
        # SASL_PLAINTEXT and SASL_SSL: the SaslAuthenticator (minibroker/security/sasl) gates requests
        # until a SASL login succeeds; None on other listeners. Made by the broker's SaslListeners, so
        # that a broker without SASL listeners never imports the package.
        self.sasl = None
        if security_protocol.startswith("SASL_"):
            self.sasl = broker.sasl_listeners.authenticator(self)

    # -- connection lifecycle and flow control -------------------------------------------------

    def connection_made(self, transport):
        self.transport = transport
        self.peer = transport.get_extra_info("peername")
        self.last_active = asyncio.get_running_loop().time()
        # high=0: every write that cannot complete at once pauses us, and resume_writing says the
        # buffer is empty again, which is when sendfile may write to the socket directly. asyncio's
        # TLS transport pauses at size >= high (the socket transport at size > high): 1 is the same rule.
        transport.set_write_buffer_limits(high=0 if self.tls is None else 1, low=0)
        if self.tls is not None and self.security_protocol == "SSL":
            # the handshake is done: a client certificate names the principal (SASL_SSL: SASL does)
            try:
                self.principal = self.tls.principal_of(transport)
            except ValueError as e:  # no ssl.principal.mapping.rules rule applies: Kafka fails it
                log.info("%s: closing: %s", self.peer, e)
                self._closed = True
                transport.abort()
                return
        self.broker.connections.add(self)
        self.broker.metrics.connections_opened += 1
        log.debug("connection from %s", self.peer)

    def connection_lost(self, exc):
        self._closed = True
        if self._linger_timer is not None:
            self._linger_timer.cancel()
            self._linger_timer = None
        self._release_memory()
        if self._throttle_timer is not None:
            self._throttle_timer.cancel()
            self._throttle_timer = None
        self.broker.connections.discard(self)
        if self._task is not None and not self._task.done():
            self._task.cancel()
        if self._drained is not None and not self._drained.done():
            self._drained.set_exception(ConnectionResetError("connection lost"))
            self._drained.exception()  # retrieved: nobody may be waiting
        if self._sock_fd_dup >= 0:
            os.close(self._sock_fd_dup)
            self._sock_fd_dup = -1
        self.broker.connection_closed(self)
        log.debug("connection from %s closed", self.peer)

    def pause_writing(self):
        self._write_paused = True

    def resume_writing(self):
        self._write_paused = False
        self.active = True  # the client read what was written
        if self._drained is not None and not self._drained.done():
            self._drained.set_result(None)
        if self._queue and not self._busy:
            # Not inline: asyncio's transport calls us from _write_ready, which, should a queued
            # request close the connection here, calls connection_lost a second time (tests/test_fuzz.py).
            asyncio.get_running_loop().call_soon(self._pump)

    # -- reading: asyncio.BufferedProtocol -----------------------------------------------------
    #
    # The socket is read into one buffer per connection, which we own. A frame that is whole in it
    # is handled straight from it (a memoryview, no copy) when nothing is queued, else copied out
    # into the queue. The buffer grows only when it is full of one incomplete frame, and never
    # past what that frame needs: memory follows the bytes that arrived, not the size prefix.

    def get_buffer(self, sizehint: int):
        if self._view is None:
            self._buf = bytearray(INITIAL_BUFFER)
            self._view = memoryview(self._buf)
        return self._view[self._end:]

    def buffer_updated(self, nbytes: int) -> None:
        if self._closed:
            return
        self.active = True
        end = self._end + nbytes
        self._end = end
        buf, view, pos = self._buf, self._view, self._start
        need = 4  # bytes the incomplete frame at pos takes in all, once its size is known
        while end - pos >= 4 and not self._stalled:  # a stalled connection's later frames stay unread
            size = _SIZE.unpack_from(buf, pos)[0]
            if not 0 < size <= self.max_request_size:
                self._size_refused(size)
                return
            stop = pos + 4 + size
            if stop > end:
                need = size + 4
                break
            requests = self._requests
            if requests is not None and (self._queue_muted or requests.queued >= requests.limit
                                         or (requests.waiting and not requests.waking)):
                if not self._queue_muted:  # queued.max.requests reached: wait for a slot, unread
                    self._queue_muted = True
                    requests.waiting.append(self)
                break
            if not self._queue and not self._busy and not self._write_paused and not self._throttled:
                # Handled straight from the read buffer: decoding finishes before the buffer is
                # compacted, and no decoded request keeps a view of it past its synchronous
                # handling (only Produce carries records views, and Produce is synchronous).
                if self._granted:
                    self._pool.release(self._granted)
                    self._granted = 0
                self._handle_frame(view[pos + 4: stop])
                if self._closed:
                    return
            else:
                self._queue.append(bytearray(view[pos + 4: stop]))
                if requests is not None:
                    requests.queued += 1
                    self._slots += 1
                if self._pool is not None:
                    if not self._granted:
                        self._pool.force(size)
                    self._granted = 0
                    self._queued_bytes += size
            pos = stop
        if pos == end:
            self._start = self._end = 0
            cap = len(buf)
            if cap > RETAIN_BUFFER or (self._pool is not None and cap > INITIAL_BUFFER):
                self._buf = self._view = None  # a big frame's buffer is not kept for the next one
        else:
            self._start = pos
            if self._pool is not None and need > 4 and not self._granted and not self._mem_muted:
                if self._pool.try_reserve(need - 4):
                    self._granted = need - 4
                else:  # not read, and its buffer not grown, until the pool has room
                    self._mem_muted = True
                    self._pool.wait(self)
            if pos + need > len(buf) and not self._mem_muted:
                self._make_room(need)
        self._pump()

    def _make_room(self, need: int) -> None:
        """The incomplete frame at ``_start`` (``need`` bytes in all) does not fit after ``_start``:
        move it to the front (into a buffer twice the size when frames come back to back and the
        move would be large); if it fills the whole buffer already, grow the buffer, at most
        doubling it, and to the frame's exact size for a frame too big to keep a buffer for."""
        start, end, buf = self._start, self._end, self._buf
        pending = end - start
        cap = len(buf)
        if start and pending > cap // 4 and 2 * cap <= RETAIN_BUFFER and self._pool is None:
            # Frames arrive back to back and each would be moved largely: a buffer twice the size
            # (still what arrived: the frames before this one came whole) holds two, and moves
            # become rare.
            new = bytearray(2 * cap)
            new[:pending] = self._view[start:end]
            self._buf, self._view = new, memoryview(new)
            self._start, self._end = 0, pending
        elif start:
            if pending <= start:
                buf[:pending] = self._view[start:end]
            else:  # overlapping ranges: slice assignment is a memcpy, which must not see them
                buf[:pending] = bytes(self._view[start:end])
            self._start, self._end = 0, pending
        elif end == cap:
            new_cap = min(2 * cap, need if need > RETAIN_BUFFER else _pow2(need))
            new = bytearray(new_cap)
            new[:pending] = self._view[:pending]
            self._buf, self._view = new, memoryview(new)

    def release_idle_buffer(self) -> None:
        """The connection was silent since the last sweep: drop its read buffer when empty, or
        shrink it to twice what it holds (a stalled client's size prefix keeps 256 bytes); it
        grows again as bytes arrive."""
        buf = self._buf
        if buf is None:
            return
        pending = self._end - self._start
        if not pending:
            self._buf = self._view = None
            self._start = self._end = 0
            return
        size = max(SILENT_BUFFER, _pow2(2 * pending))
        if size < len(buf):
            new = bytearray(size)
            new[:pending] = self._view[self._start:self._end]
            self._buf, self._view = new, memoryview(new)
            self._start, self._end = 0, pending

    def memory_available(self) -> None:
        """Woken by the pool: reserve the incomplete frame's size and read again."""
        if self._closed or not self._mem_muted or self._stalled:
            return
        self._mem_muted = False
        if self._end - self._start >= 4 and not self._granted:
            size = _SIZE.unpack_from(self._buf, self._start)[0]
            self._pool.force(size)
            self._granted = size
            if self._start + size + 4 > len(self._buf):
                self._make_room(size + 4)
        self._update_reading()

    def requests_available(self) -> None:
        """Woken by the RequestQueue: take in the request waiting in the read buffer, and read again."""
        if self._closed or not self._queue_muted:
            return
        self._queue_muted = False
        self.buffer_updated(0)

    def throttle(self, delay_ms: int) -> None:
        """Mute this connection for ``delay_ms`` from now (KIP-219: a client quota was exceeded). The
        response to the current request still goes out at once, carrying the throttle time; the next
        request is neither handled nor read until the timer fires (frames already read wait queued). A
        later end already set is kept."""
        if self._closed or delay_ms <= 0 or self._stalled:
            return
        loop = asyncio.get_running_loop()
        end = loop.time() + delay_ms / 1000
        timer = self._throttle_timer
        if timer is not None:
            if timer.when() >= end:
                return
            timer.cancel()
        self._throttled = True
        self._throttle_timer = loop.call_at(end, self._end_throttle)
        self._update_reading()

    def _end_throttle(self) -> None:
        self._throttle_timer = None
        self._throttled = False
        if not self._closed:
            self._pump()  # queued requests first, then reading resumes

    def stall(self) -> None:
        """Stop handling and reading this connection's requests for good (the fault injector's
        ``stop_reading``): it stays open until the client gives up on it."""
        if self._throttle_timer is not None:
            self._throttle_timer.cancel()
            self._throttle_timer = None
        self._stalled = True
        self._throttled = True
        # frames read behind the stalled request are never handled: their queue slots and bytes go back
        self._queue.clear()
        self._release_memory()
        self._update_reading()

    @property
    def throttled(self) -> bool:
        """Muted by a client quota until its throttle time has passed."""
        return self._throttled

    @property
    def buffer_size(self) -> int:
        """Bytes of read buffer this connection holds now (0 when it has none)."""
        return 0 if self._buf is None else len(self._buf)

    @property
    def pending_bytes(self) -> int:
        """Bytes read and not yet handled or queued: the start of an incomplete frame."""
        return self._end - self._start

    @property
    def reading_paused(self) -> bool:
        return self._reading_paused

    def _release_memory(self) -> None:
        if self._slots:
            self._requests.release(self._slots)
            self._slots = 0
        if self._pool is not None:
            held = self._granted + self._queued_bytes
            self._granted = self._queued_bytes = 0
            if held:
                self._pool.release(held)

    def eof_received(self):
        return False  # close the transport: a client that stops sending is done

    def _size_refused(self, size: int) -> None:
        log.debug("%s: frame size %d outside 1..%d, closing", self.peer, size, self.max_request_size)
        self.close()

    # -- request processing ---------------------------------------------------------------------

    def _pump(self) -> None:
        queue = self._queue
        # A client that does not read its responses stops being read: its memory stays bounded.
        while (queue and not self._busy and not self._closed and not self._write_paused
               and not self._throttled):
            frame = queue.popleft()
            if self._slots:
                self._slots -= 1
                self._requests.release()
            if self._pool is not None:
                self._queued_bytes -= len(frame)
                self._pool.release(len(frame))
            self._handle_frame(frame)
        self._update_reading()

    def _update_reading(self) -> None:
        if self._closed:
            return
        if len(self._queue) >= MAX_QUEUED or self._mem_muted or self._throttled or self._queue_muted:
            if not self._reading_paused:
                self._reading_paused = True
                self.transport.pause_reading()
        elif self._reading_paused:
            self._reading_paused = False
            self.transport.resume_reading()

    def _handle_frame(self, frame) -> None:
        started = time.perf_counter()
        sasl = self.sasl
        if sasl is not None and sasl.expects_raw_token:  # after SaslHandshake v0: a bare token, no header
            return sasl.raw_token(frame)
        try:
            header, body_pos = codec.decode_request_header(frame)
        except ProtocolViolation as e:
            return self._violation(f"bad request header: {e}")
        # for client_host, advertised endpoints, the authorizer and quotas
        header.peer, header.listener, header.principal, header.connection = (
            self.peer, self.listener, self.principal, self)
        api_key, version = header.api_key, header.api_version
        if sasl is not None and (refused := sasl.refusal(api_key)) is not None:  # not authenticated (yet)
            return self._violation(refused)
        served = SERVED.get(api_key)
        if served is None:
            return self._violation(f"unknown or unserved API key {api_key}")
        if not served.min_version <= version <= served.max_version:
            if api_key == API_VERSIONS:
                return self._respond(header, 0, unsupported_version_body(), started)
            return self._violation(f"{codec.API_NAMES[api_key]} v{version} is not served")
        handler = HANDLERS.get(api_key)
        if handler is None:  # the API's first request: its module is not imported yet
            return self._import_then_handle(bytes(frame), handler_module(api_key))
        try:
            # Trailing bytes are tolerated, as Kafka does: librdkafka's "all topics" Metadata v12
            # request carries three bytes after its tag buffer.
            request = codec.decode(codec.REQUESTS[api_key].name, version, frame, body_pos, exact=False)
        except ProtocolViolation as e:
            return self._violation(f"undecodable {handler.name} v{version}: {e}")
        fn = handler.fn
        faults = self.broker.faults  # minibroker/server/faults.py, with fault.injection.enable=true
        try:
            if faults is not None and faults.engaged:
                fn = faults.handler_for(self, header, request, fn, frame, body_pos)
            result = fn(self.broker, header, request)
        except CloseConnection as e:
            return self._violation(f"{handler.name}: {e}")
        except Exception:
            log.exception("%s v%d handler failed; closing %s", handler.name, version, self.peer)
            return self.close()
        if handler.is_async or asyncio.iscoroutine(result):  # sync handlers may defer (long-poll)
            header.loop_seconds = time.perf_counter() - started  # request_percentage: not the waiting
            self._busy = True
            self._task = asyncio.ensure_future(self._finish_async(header, result, started))
        else:
            self._respond(header, version, result, started)
            if sasl is not None and sasl.failed:  # the failed SASL exchange is answered, then closed
                self._close_after_failed_authentication()

    def _import_then_handle(self, frame: bytes, module: str) -> None:
        """Import a handler module in a worker thread, then handle ``frame`` (copied: the read buffer
        moves on). Other connections keep being served meanwhile: the import holds the event loop
        for at most the interpreter's switch interval at a time (docs/architecture.md, "Lazy
        loading"). This connection's later requests wait, in order, as behind an async handler."""
        self._busy = True
        self._task = asyncio.ensure_future(self._handle_after_import(frame, module))

    async def _handle_after_import(self, frame: bytes, module: str) -> None:
        try:
            await asyncio.to_thread(importlib.import_module, module)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("importing %s failed; closing %s", module, self.peer)
            self.close()
            return
        if self._closed:
            return
        self._busy = False
        self._handle_frame(frame)
        self._pump()

    async def _finish_async(self, header, awaitable, started) -> None:
        try:
            response = await awaitable
        except asyncio.CancelledError:
            raise
        except CloseConnection as e:
            self._violation(str(e))
            return
        except Exception:
            log.exception("%s v%d handler failed; closing %s",
                          codec.API_NAMES.get(header.api_key), header.api_version, self.peer)
            self.close()
            return
        if self._closed:
            return
        self._busy = False
        self.active = True
        self._respond(header, header.api_version, response, started)
        if self.sasl is not None and self.sasl.failed:  # answered after the failed-authentication delay
            self._close_after_failed_authentication()
            return
        self._pump()

    def _respond(self, header, version: int, response, started: float) -> None:
        quotas = vars(self.broker).get("client_quotas")  # None until a client quota is set
        if quotas is not None and quotas.request.enabled and response is not None:
            spent = getattr(header, "loop_seconds", None)
            quotas.charge_request_time(self, header, response,
                                       time.perf_counter() - started if spent is None else spent)
        if response is not None and not self._closed:
            parts = codec.encode_response(header.api_key, version, header.correlation_id, response)
            if len(parts) == 1:
                self.broker.metrics.bytes_out += len(parts[0])
                # written at once, not batched per read: the client's next request (5 in flight at
                # most) is sent sooner, which measured faster than saving the syscalls
                self.transport.write(parts[0])
            else:
                self._busy = True
                self._task = asyncio.ensure_future(self._send_parts(parts))
        self.broker.metrics.observe_request(header.api_key, time.perf_counter() - started)
        if request_log.isEnabledFor(logging.DEBUG):
            request_log.debug("%s v%d client=%s corr=%d %.3f ms", codec.API_NAMES.get(header.api_key),
                              header.api_version, header.client_id, header.correlation_id,
                              (time.perf_counter() - started) * 1000)

    async def _send_parts(self, parts) -> None:
        try:
            for part in parts:
                if isinstance(part, FileRegion):
                    await (self._sendfile(part) if self.tls is None else self._send_region_copied(part))
                else:
                    self.transport.write(part)
                self.broker.metrics.bytes_out += len(part)
        except (ConnectionError, OSError) as e:
            log.debug("%s: send failed: %s", self.peer, e)
            self.close()
            return
        if self._closed:
            return
        self._busy = False
        self.active = True
        self._pump()

    async def _wait_transport_empty(self) -> None:
        while self._write_paused or self.transport.get_write_buffer_size():
            if self._closed:
                raise ConnectionResetError("connection closed")
            self._drained = asyncio.get_running_loop().create_future()
            if not self._write_paused and not self.transport.get_write_buffer_size():
                break
            await self._drained

    async def _send_region_copied(self, region: FileRegion) -> None:
        """Send ``region`` through the transport in ``TLS_CHUNK`` reads (TLS: the bytes must be
        encrypted, so ``sendfile`` on the socket would corrupt the stream). Writes stop while the
        transport holds ``TLS_WINDOW`` bytes or more and resume once it has sent them: the memory a
        large fetch costs stays bounded whatever the client's reading speed."""
        in_fd = region.file.fileno()
        offset, remaining = region.position, region.size
        while remaining > 0:
            if self._closed:
                raise ConnectionResetError("connection closed")
            data = os.pread(in_fd, min(TLS_CHUNK, remaining), offset)
            if not data:
                # The file shrank under us, as in _sendfile: a short frame would desync the client.
                raise ConnectionResetError("segment shorter than the region being sent")
            self.transport.write(data)
            offset += len(data)
            remaining -= len(data)
            self.active = True
            if remaining and self.transport.get_write_buffer_size() >= TLS_WINDOW:
                self._send_blocked = True
                try:
                    await self._wait_transport_empty()
                finally:
                    self._send_blocked = False

    async def _sendfile(self, region: FileRegion) -> None:
        """Send ``region`` from its file straight to the socket (zero-copy)."""
        await self._wait_transport_empty()
        loop = asyncio.get_running_loop()
        if self._sock_fd_dup < 0:
            # A duplicate descriptor of the same socket: the loop refuses add_writer on a fd a
            # transport owns, but the transport's buffer is empty and it is not writing now.
            self._sock_fd_dup = os.dup(self.transport.get_extra_info("socket").fileno())
        sock = self._sock_fd_dup
        in_fd = region.file.fileno()
        offset, remaining = region.position, region.size
        while remaining > 0:
            if self._closed:
                raise ConnectionResetError("connection closed")
            try:
                sent = os.sendfile(sock, in_fd, offset, remaining)
            except BlockingIOError:
                sent = None
            if sent is None:
                ready = loop.create_future()
                loop.add_writer(sock, lambda ready=ready: ready.done() or ready.set_result(None))
                self._send_blocked = True
                try:
                    await ready
                finally:
                    self._send_blocked = False
                    loop.remove_writer(sock)
                continue
            if sent == 0:
                # The file shrank under us (retention deleted or truncated it): the frame can no
                # longer be completed, and a short frame would desync the client. Close.
                raise ConnectionResetError("segment shorter than the region being sent")
            offset += sent
            self.active = True
            remaining -= sent

    # -- closing --------------------------------------------------------------------------------

    def _violation(self, why: str) -> None:
        log.debug("%s: %s; closing", self.peer, why)
        self.close()

    def _close_after_failed_authentication(self) -> None:
        """The answer to a failed SASL exchange is written; nothing more is read, and the connection
        closes when the client closes its side, or FAILED_AUTH_LINGER_S later. Closing at once put the
        answer and the FIN in one read of a client that waits for the answer, and kafka-python 3.0
        drops the bytes of a read that ends in EOF: it then reported a lost connection, not the
        authentication failure."""
        if self._closed:
            return
        self._closed = True  # buffer_updated reads nothing more; eof_received closes the transport
        self._queue.clear()
        self._release_memory()
        if self.transport is not None:
            self._linger_timer = asyncio.get_running_loop().call_later(FAILED_AUTH_LINGER_S,
                                                                       self.transport.close)

    def close(self, abort: bool = False) -> None:
        """Close after what is written has been sent, or with ``abort`` at once, dropping it (for a
        client that may not be reading: Kafka's processors drop unsent bytes of a closed channel)."""
        if self._linger_timer is not None:  # a failed SASL login's connection, lingering: now
            self._linger_timer.cancel()
            self._linger_timer = None
            self.transport.abort() if abort else self.transport.close()
        if not self._closed:
            self._closed = True
            self._queue.clear()
            self._release_memory()
            if self.transport is not None:
                if abort:
                    self.transport.abort()
                else:
                    self.transport.close()

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def idle(self) -> bool:
        """No request being answered and none queued."""
        return not self._busy and not self._queue

    @property
    def answering(self) -> bool:
        """A request is being answered (an async handler waits: a long poll, a group join) while
        the client reads what is written; connections.max.idle.ms does not close it meanwhile."""
        return self._busy and not self._write_paused and not self._send_blocked

    @property
    def in_flight(self) -> asyncio.Task | None:
        """The task answering a request right now (async handler or a sendfile), if any."""
        task = self._task
        return task if task is not None and not task.done() else None
