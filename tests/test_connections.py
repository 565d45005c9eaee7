"""Issue 14, item 1: hostile and broken clients cannot exhaust the broker's memory or connections.

Real sockets against a broker in this process (thread mode, the default asyncio loop), so the
connection objects can be looked at; the accept limits also run against a ``minibroker serve``
subprocess, which uses uvloop when it is installed. Speed and memory figures are measured by
``scripts/bench.py --only hostile``, not asserted here.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import socket
import struct
import sys
import time

import pytest
from waiting import wait_until

from minibroker.config import ConfigError, load_config
from minibroker.protocol import codec
from minibroker.server.connection import INITIAL_BUFFER, SILENT_BUFFER

HUGE = 100 << 20  # socket.request.max.bytes' default: the largest size prefix the broker takes


def _connect(runner, source: str | None = None) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", runner.port), timeout=5,
                                    source_address=(source, 0) if source else None)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def _api_versions(correlation: int, size: int | None = None) -> bytes:
    """An ApiVersions v0 request frame; with ``size``, padded to that many bytes after the size
    prefix (the broker tolerates trailing bytes, as Kafka does)."""
    frame = codec.encode_request(18, 0, correlation, {}, "t")
    if size is None:
        return frame
    body = frame[4:] + bytes(size - len(frame) + 4)
    return struct.pack(">i", len(body)) + body


def _answer(sock: socket.socket, timeout: float = 10.0) -> int | None:
    """The correlation id of the next response, or None when none comes within ``timeout``."""
    sock.settimeout(timeout)
    data = b""
    try:
        while len(data) < 8:
            chunk = sock.recv(8 - len(data))
            if not chunk:
                raise ConnectionResetError("closed by the broker")
            data += chunk
    except TimeoutError:
        assert not data, "a partial response"
        return None
    size, correlation = struct.unpack(">ii", data)
    remaining = size - 4
    while remaining:
        chunk = sock.recv(min(remaining, 1 << 16))
        assert chunk
        remaining -= len(chunk)
    return correlation


def _closed_by_peer(sock: socket.socket, timeout: float = 10.0) -> bool:
    sock.settimeout(timeout)
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True


def _open(sock: socket.socket, wait: float) -> bool:
    """True when the broker has not closed ``sock`` within ``wait`` seconds."""
    sock.settimeout(wait)
    try:
        return sock.recv(1) != b""  # the broker never sends unasked: data would be a bug
    except TimeoutError:
        return True
    except ConnectionResetError:
        return False


def _on_loop(runner, fn):
    """Run ``fn`` on the broker's event loop thread (its state is not safe to touch from here)."""
    done: concurrent.futures.Future = concurrent.futures.Future()

    def run():
        try:
            done.set_result(fn())
        except BaseException as e:  # handed to the test thread
            done.set_exception(e)

    runner._loop.call_soon_threadsafe(run)
    return done.result(10)


@pytest.fixture
def thread_broker(minibroker_factory):
    """Brokers in this process whatever ``--minibroker-mode`` says: these tests look at its objects."""
    return lambda overrides=None: minibroker_factory(overrides, mode="thread")


def _connections(runner) -> list:
    return _on_loop(runner, lambda: list(runner.broker.connections))


# -- memory: frames grow with the bytes that arrive ----------------------------------------------


def test_a_size_prefix_reserves_nothing(thread_broker):
    runner = thread_broker()
    sock = _connect(runner)
    sock.sendall(struct.pack(">i", HUGE))
    conn = wait_until(lambda: next((c for c in _connections(runner) if c.pending_bytes == 4), None),
                       "the size prefix to arrive")
    assert conn.buffer_size <= INITIAL_BUFFER
    # what does arrive makes the buffer grow, to at most twice the bytes received
    sock.sendall(bytes(300_000))
    wait_until(lambda: _on_loop(runner, lambda: conn.pending_bytes) == 300_004, "the bytes to arrive")
    assert 300_004 <= _on_loop(runner, lambda: conn.buffer_size) <= 2 * 300_004
    sock.close()


def test_a_silent_connection_keeps_only_what_it_holds(thread_broker):
    runner = thread_broker({"connections.max.idle.ms": "2000"})  # a sweep every 200 ms
    stalled = _connect(runner)
    stalled.sendall(struct.pack(">i", HUGE))
    quiet = _connect(runner)  # answered, then silent
    quiet.sendall(_api_versions(1))
    assert _answer(quiet) == 1
    wait_until(lambda: sorted(c.buffer_size for c in _connections(runner)) == [0, SILENT_BUFFER],
                "the stalled connection's buffer to shrink and the quiet one's to go")
    # a shrunk buffer grows again with what arrives, and the request is read whole
    (stalled_conn,) = [c for c in _connections(runner) if c.pending_bytes]
    frame = _api_versions(2, size=50_000)
    late = _connect(runner)
    late.sendall(frame[:4])
    wait_until(lambda: [c.buffer_size for c in _connections(runner)
                         if c.pending_bytes and c is not stalled_conn] == [SILENT_BUFFER],
                "the late connection's buffer to shrink")
    late.sendall(frame[4:])
    assert _answer(late) == 2
    for sock in (stalled, quiet, late):
        sock.close()


def test_a_large_request_read_in_pieces_is_answered_and_its_buffer_dropped(thread_broker):
    runner = thread_broker()
    sock = _connect(runner)
    frame = _api_versions(7, size=5 << 20)
    for pos in range(0, len(frame), 100_000):
        sock.sendall(frame[pos:pos + 100_000])
    assert _answer(sock) == 7
    (conn,) = _connections(runner)
    # a buffer that big is not kept for the next request
    assert _on_loop(runner, lambda: conn.buffer_size) <= INITIAL_BUFFER
    sock.sendall(_api_versions(8))
    assert _answer(sock) == 8
    sock.close()


def test_many_stalled_connections_hold_small_buffers_and_others_are_served(thread_broker, topic_name):
    runner = thread_broker()
    stalled = []
    for _ in range(500):
        sock = _connect(runner)
        sock.sendall(struct.pack(">i", HUGE))
        stalled.append(sock)
    wait_until(lambda: sum(c.pending_bytes == 4 for c in _connections(runner)) == 500,
                "500 size prefixes to arrive")
    held = _on_loop(runner, lambda: sum(c.buffer_size for c in runner.broker.connections))
    assert held <= 500 * INITIAL_BUFFER
    other = _connect(runner)
    other.sendall(_api_versions(1))
    assert _answer(other) == 1
    runner.create_topic(topic_name)
    runner.produce(topic_name, [b"a", b"b"])
    assert [r.value for r in runner.consume(topic_name, 2)] == [b"a", b"b"]
    for sock in stalled + [other]:
        sock.close()


# -- max.connections, max.connections.per.ip ------------------------------------------------------


@pytest.mark.parametrize("mode", ["thread", "process"])  # process: `minibroker serve`, uvloop if present
def test_at_max_connections_the_next_client_waits_until_one_closes(minibroker_factory, mode):
    runner = minibroker_factory({"max.connections": "3"}, mode=mode)
    first = [_connect(runner) for _ in range(3)]
    for i, sock in enumerate(first):
        sock.sendall(_api_versions(i))
        assert _answer(sock) == i
    late = _connect(runner)  # the kernel completes the handshake: it waits in the listen backlog
    late.sendall(_api_versions(99))
    assert _answer(late, timeout=1.0) is None
    if mode == "thread":
        assert _on_loop(runner, lambda: (runner.broker.socket_server.total, len(runner.broker.connections))) \
            == (3, 3)
    first[0].close()
    assert _answer(late) == 99
    for sock in first[1:] + [late]:
        sock.close()


def test_max_connections_lowered_at_run_time_closes_the_least_recently_active(thread_broker):
    runner = thread_broker({"connections.max.idle.ms": "3000"})  # a sweep every 300 ms
    a, b, c = (_connect(runner) for _ in range(3))
    a.sendall(_api_versions(1))
    assert _answer(a) == 1
    time.sleep(0.8)  # more than two sweeps: b and c are seen active later than a
    for n, sock in ((2, b), (3, c)):
        sock.sendall(_api_versions(n))
        assert _answer(sock) == n
    _on_loop(runner, lambda: runner.broker.config.set_dynamic("max.connections", "2"))
    assert _closed_by_peer(a)
    for n, sock in ((4, b), (5, c)):
        sock.sendall(_api_versions(n))
        assert _answer(sock) == n
    for sock in (a, b, c):
        sock.close()


@pytest.mark.parametrize("mode", ["thread", "process"])
def test_a_connection_over_the_per_address_limit_is_closed_at_once(minibroker_factory, mode):
    runner = minibroker_factory({"max.connections.per.ip": "2"}, mode=mode)
    a, b = _connect(runner), _connect(runner)
    for n, sock in ((1, a), (2, b)):
        sock.sendall(_api_versions(n))
        assert _answer(sock) == n
    over = _connect(runner)
    assert _closed_by_peer(over)
    over.close()
    if mode == "thread":
        assert "Rejected connection from 127.0.0.1, address already has the configured maximum of 2" \
            in runner.log_text()
    a.close()
    # once the broker has seen a close, the address has room again
    deadline = time.monotonic() + 20
    while True:
        again = _connect(runner)
        try:
            again.sendall(_api_versions(3))
            if _answer(again) == 3:
                break
        except OSError:  # closed at once: the broker has not seen the close yet
            assert time.monotonic() < deadline, "the address never got its slot back"
        again.close()
        time.sleep(0.05)
    for sock in (b, again):
        sock.close()


def test_per_address_overrides(minibroker_factory):
    runner = minibroker_factory({"max.connections.per.ip": "0",
                                 "max.connections.per.ip.overrides": "127.0.0.2:1, localhost:0"})
    refused = _connect(runner)  # from 127.0.0.1 (localhost): its override is 0
    assert _closed_by_peer(refused)
    allowed = _connect(runner, source="127.0.0.2")
    allowed.sendall(_api_versions(1))
    assert _answer(allowed) == 1
    second = _connect(runner, source="127.0.0.2")
    assert _closed_by_peer(second)
    for sock in (refused, allowed, second):
        sock.close()


@pytest.mark.parametrize("overrides, message", [
    ({"max.connections.per.ip": "0"}, "can be 0 only if max.connections.per.ip.overrides is set"),
    ({"max.connections.per.ip.overrides": "127.0.0.1"}, "is not host:count"),
    ({"max.connections.per.ip.overrides": "127.0.0.1:many"}, "the count is not an integer"),
    ({"queued.max.request.bytes": "1000"}, "at least socket.request.max.bytes"),
])
def test_connection_limits_are_validated_as_kafka_does(overrides, message):
    with pytest.raises(ConfigError, match=message):
        load_config(None, [f"{k}={v}" for k, v in overrides.items()], {})


# -- connections.max.idle.ms ----------------------------------------------------------------------


def test_an_idle_connection_is_closed_and_a_busy_one_is_not(minibroker_factory, topic_name):
    runner = minibroker_factory({"connections.max.idle.ms": "500"})
    runner.create_topic(topic_name)
    idle = _connect(runner)
    busy = _connect(runner)
    waiting = _connect(runner)  # a long-polling Fetch: a request being answered, no bytes moving
    fetch = codec.encode_request(1, 4, 42, {
        "replica_id": -1, "max_wait_ms": 1500, "min_bytes": 1, "max_bytes": 1 << 20, "isolation_level": 0,
        "topics": [{"topic": topic_name,
                    "partitions": [{"partition": 0, "fetch_offset": 0, "partition_max_bytes": 1 << 20}]}],
    }, "t")
    waiting.sendall(fetch)
    assert _open(idle, 0.3)  # never before connections.max.idle.ms
    started = time.monotonic()
    n = 0
    while time.monotonic() - started < 1.5:
        n += 1
        busy.sendall(_api_versions(n))
        assert _answer(busy) == n
        time.sleep(0.05)
    assert _closed_by_peer(idle)
    assert _answer(waiting) == 42  # answered when its wait ran out, not closed while waiting
    busy.sendall(_api_versions(n + 1))
    assert _answer(busy) == n + 1
    for sock in (idle, busy, waiting):
        sock.close()


def test_a_client_that_stops_reading_its_responses_is_closed_as_idle(thread_broker):
    runner = thread_broker({"connections.max.idle.ms": "500", "socket.send.buffer.bytes": "4096"})
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect(("127.0.0.1", runner.port))
    sock.sendall(b"".join(_api_versions(i) for i in range(500)))  # and never read an answer
    wait_until(lambda: any(c.reading_paused for c in _connections(runner)),
                "the broker to stop reading a client that does not read")
    wait_until(lambda: not _connections(runner), "the stuck connection to be closed")
    sock.close()


# -- socket options -------------------------------------------------------------------------------


def _accepted_socket_buffers(runner) -> tuple[int, int]:
    sock = _connect(runner)
    sock.sendall(_api_versions(1))
    assert _answer(sock) == 1
    (conn,) = _connections(runner)
    accepted = conn.transport.get_extra_info("socket")
    sizes = (accepted.getsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF),
             accepted.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF))
    sock.close()
    return sizes


def test_socket_buffer_sizes_are_applied(thread_broker):
    doubled = 2 if sys.platform == "linux" else 1  # Linux reports twice the size asked for
    runner = thread_broker({"socket.send.buffer.bytes": "65536",
                                 "socket.receive.buffer.bytes": "131072"})
    assert _accepted_socket_buffers(runner) == (65536 * doubled, 131072 * doubled)
    runner = thread_broker()  # Kafka's defaults, 100 KiB each
    assert _accepted_socket_buffers(runner) == (102400 * doubled, 102400 * doubled)


def test_socket_buffer_size_minus_one_keeps_the_os_default(thread_broker):
    with socket.create_server(("127.0.0.1", 0)) as listener:
        client = socket.create_connection(listener.getsockname())
        accepted, _ = listener.accept()
        expected = (accepted.getsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF),
                    accepted.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF))
        accepted.close()
        client.close()
    runner = thread_broker({"socket.send.buffer.bytes": "-1", "socket.receive.buffer.bytes": "-1"})
    assert _accepted_socket_buffers(runner) == expected


def test_listen_backlog_is_applied(minibroker_factory):
    runner = minibroker_factory({"max.connections": "1", "socket.listen.backlog.size": "1"})
    first = _connect(runner)
    first.sendall(_api_versions(1))
    assert _answer(first) == 1
    waiting = []
    for _ in range(10):  # the broker accepts no more: the kernel queues up to the backlog, then drops SYNs
        try:
            waiting.append(socket.create_connection(("127.0.0.1", runner.port), timeout=0.5))
        except TimeoutError:
            break
    else:
        pytest.fail("10 connections were queued behind a listen backlog of 1")
    assert 1 <= len(waiting) <= 3
    for sock in [first] + waiting:
        sock.close()


# -- queued.max.request.bytes ---------------------------------------------------------------------


def test_queued_max_request_bytes_stops_reading_new_requests_until_bytes_are_released(thread_broker):
    limit = 1 << 20
    runner = thread_broker({"socket.request.max.bytes": str(limit),
                                 "queued.max.request.bytes": str(limit)})
    pool = _on_loop(runner, lambda: runner.broker.socket_server.memory_pool)
    big = _api_versions(1, size=limit)
    a = _connect(runner)
    a.sendall(big[:200_000])  # its size prefix reserved the whole pool
    wait_until(lambda: _on_loop(runner, lambda: pool.used) == limit, "the pool to fill")

    medium = _api_versions(2, size=100_000)
    b = _connect(runner)
    b.sendall(medium[:60_000])
    conn_b = wait_until(lambda: next((c for c in _connections(runner) if c.reading_paused), None),
                         "the second connection to stop being read")
    held = _on_loop(runner, lambda: (conn_b.pending_bytes, conn_b.buffer_size))
    assert held[0] < 60_000 and held[1] <= INITIAL_BUFFER  # not read on, not grown

    c = _connect(runner)  # a request that arrives whole holds nothing while waiting: it is answered
    c.sendall(_api_versions(3))
    assert _answer(c) == 3

    a.sendall(big[200_000:])
    assert _answer(a) == 1
    b.sendall(medium[60_000:])
    assert _answer(b) == 2
    wait_until(lambda: _on_loop(runner, lambda: pool.used) == 0, "the pool to empty")
    for sock in (a, b, c):
        sock.close()


# -- the read buffer's bookkeeping, driven directly ------------------------------------------------


class _FakeTransport:
    def __init__(self):
        self.paused = False

    def pause_reading(self):
        self.paused = True

    def resume_reading(self):
        self.paused = False


@pytest.mark.parametrize("with_pool", [False, True])
async def test_frames_split_anywhere_come_out_whole_and_in_order(with_pool):
    """Random frame sizes (1 B to 3 MiB) cut at random points, handled inline or queued behind a
    paused writer: every frame is handed over once, intact, in order; the pool ends empty."""
    import random

    from minibroker.server.connection import KafkaConnection, MemoryPool

    class Broker:
        connections: set = set()

    rng = random.Random(14)
    sizes = [rng.choice([1, 7, 100, 1000, 16_380, 16_384, 40_000, 65_536, 300_000, 1_000_100, 3 << 20])
             for _ in range(120)]
    frames = [rng.randbytes(n) for n in sizes]
    stream = b"".join(struct.pack(">i", len(f)) + f for f in frames)
    pool = MemoryPool(4 << 20) if with_pool else None
    conn = KafkaConnection(Broker(), 4 << 20, address="127.0.0.1", pool=pool)
    conn.transport = _FakeTransport()
    seen: list[bytes] = []
    conn._handle_frame = lambda frame: seen.append(bytes(frame))
    pos, steps = 0, 0
    while pos < len(stream):
        steps += 1
        assert steps < 100_000, "reading never resumed"
        if conn.transport.paused or rng.random() < 0.05:  # the writer drains: queued frames go
            conn.resume_writing()
            await asyncio.sleep(0)  # the pool wakes a muted connection from the loop
            continue
        if rng.random() < 0.05:
            conn.pause_writing()
        buf = conn.get_buffer(-1)
        n = min(len(buf), len(stream) - pos, rng.choice([1, 3, 4000, 65_536, 1 << 20]))
        buf[:n] = stream[pos:pos + n]
        del buf
        conn.buffer_updated(n)
        pos += n
        assert conn.buffer_size <= max(2 * (conn.pending_bytes + 4), 2 << 20)
    conn.resume_writing()
    assert len(seen) == len(frames) and seen == frames
    assert conn.pending_bytes == 0
    if pool is not None:
        assert pool.used == 0
