#!/usr/bin/env python3
"""minibroker benchmarks: every figure a ratio to a ceiling measured in the same run.

    python scripts/bench.py            # the full set (several minutes)
    python scripts/bench.py --quick    # a smaller set, under a minute
    python scripts/bench.py --only produce_raw,startup

Workloads (each repeated ``--reps`` times; median and spread reported):

- ceilings: a plain asyncio server that receives size-prefixed frames and appends them to a file
  (produce ceiling) and one that answers each frame with a file region sent by ``loop.sendfile``
  (fetch ceiling), both driven by the same raw load generator as the broker; and the produce
  ceiling in Kafka's clothes (ApiVersions, Metadata, InitProducerId answered, Produce v3-v7 read
  by hand: receive, append, reply), so kcat and librdkafka can drive it themselves;
- produce_raw / fetch_raw: the raw generator (pre-built Produce / Fetch frames, 5 in flight, in its
  own process) against the broker, as a ratio to the ceilings;
- produce_kcat / produce_clients: kcat, confluent-kafka (1 and 8 partitions, 100 B and 1 KiB,
  acks=1/all, none/lz4/zstd) and kafka-python; records/s, MB/s and broker CPU, uncompressed
  cases as a ratio to the same client driving the Kafka-shaped ceiling (alternating runs);
- fetch_clients: confluent-kafka's and kafka-python's consumers reading back 1 GiB;
- latency: produce-to-consume p50/p99 at 10k records/s (confluent-kafka), three fresh brokers;
- startup (process start to port accepting) and idle RSS, beside a bare Python and the event-loop
  floor (Python, asyncio and the broker's loop serving one socket), for a plaintext broker with default
  config and, loaded, for one with a SASL_SSL listener after a transaction and a share group used it;
  RSS under load; broker CPU seconds per million records (from /proc/PID/stat of the broker process);
- first_use: another client's produce latency while the first transactional request and the first
  share request load their subsystems (issue 28: loading mid-run must not stall other connections);
- scaling: produce throughput and p99 latency for 1..64 partitions and 1..100 connections; fetch
  lookup time against log size;
- hostile (not in --quick): 500 connections that each send a 100 MiB size prefix and stall, the
  broker's RSS (/proc/PID/status) against its own idle RSS, and other clients' ApiVersions and
  Produce latency while they stall against the same client's latency before; then 500 that send a
  prefix and 64 KiB, without and with queued.max.request.bytes;
- socket_buffers (not in --quick): raw 1 MiB produce and 1 MiB fetches with Kafka's default socket
  buffers (100 KiB) against the OS default (-1, auto-tuned), alternating.

Brokers run with socket.send.buffer.bytes and socket.receive.buffer.bytes at -1, as the ceilings'
sockets and every broker before they were applied: Kafka's fixed 100 KiB turns Linux's buffer
auto-tuning off, and socket_buffers measures what that costs.

Results: a markdown section appended to docs/benchmarks.md and raw JSON in docs/benchmarks/.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# This checkout's minibroker, unless PYTHONPATH names another one: a subprocess measuring a baseline tree
# (scripts/bench_faults.py's in-process rounds) must import that tree's code, not this one's.
_PYTHONPATH = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
if not any(os.path.isdir(os.path.join(p, "minibroker")) for p in _PYTHONPATH):
    sys.path.insert(0, ROOT)

from minibroker.protocol import codec  # noqa: E402
from minibroker.records import Compression, build_records  # noqa: E402

PAGE = os.sysconf("SC_PAGE_SIZE")
TICKS = os.sysconf("SC_CLK_TCK")


# ------------------------------------------------------------------------------------------------
# process facts


def proc_rss_bytes(pid: int) -> int:
    with open(f"/proc/{pid}/statm") as f:
        return int(f.read().split()[1]) * PAGE


def proc_cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS  # utime + stime


def bench_env() -> dict:
    """The environment brokers run in: bytecode caches on, as an installed package has them."""
    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port: int, timeout: float = 20.0) -> float:
    """Seconds until a TCP connect to the port succeeds."""
    t0 = time.perf_counter()
    deadline = t0 + timeout
    while time.perf_counter() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return time.perf_counter() - t0
        except OSError:
            time.sleep(0.001)
    raise TimeoutError(f"port {port} not accepting after {timeout} s")


class BrokerProcess:
    """``python -m minibroker serve`` in a subprocess with its own data dir; ``tree``: a checkout whose
    code it runs (default this one), for A/B runs of two commits."""

    def __init__(self, overrides: dict[str, str] | None = None, loop: str = "auto", env: dict | None = None,
                 tree: str = ROOT):
        self.tree = tree
        self.env = {**bench_env(), **({"PYTHONPATH": tree} if tree != ROOT else {}), **(env or {})}
        self.dir = tempfile.mkdtemp(prefix="mb-bench-")
        self.port = free_port()
        self.overrides = {
            "listeners": f"PLAINTEXT://127.0.0.1:{self.port}",
            "log.dirs": self.dir,
            "group.initial.rebalance.delay.ms": "0",
            "socket.send.buffer.bytes": "-1",  # as the ceilings' sockets: see the module docstring
            "socket.receive.buffer.bytes": "-1",
            **(overrides or {}),
        }
        self.loop = loop
        self.proc: subprocess.Popen | None = None
        self.startup_s = 0.0

    def start(self) -> BrokerProcess:
        cmd = [sys.executable, "-m", "minibroker", "serve", "--log-level", "WARNING", "--loop", self.loop]
        for k, v in self.overrides.items():
            cmd += ["--override", f"{k}={v}"]
        t0 = time.perf_counter()
        self.proc = subprocess.Popen(
            cmd, cwd=self.tree, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=self.env
        )
        wait_port(self.port)
        self.startup_s = time.perf_counter() - t0
        return self

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
            self.proc = None
        subprocess.run(["rm", "-rf", self.dir])

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()


def create_topic(port: int, name: str, partitions: int = 1, config: dict | None = None) -> None:
    from minibroker.tools.topics import TopicAdmin

    with TopicAdmin(f"127.0.0.1:{port}") as admin:
        code, _ = admin.create(name, partitions, 1, config or {})
    if code not in (0, 36):  # 36: exists already
        raise RuntimeError(f"create {name}: error {code}")


def frame_bounds(buf) -> tuple[list[tuple[int, int]], int]:
    """(start, end) of the body of every whole size-prefixed frame at the front of ``buf``, and
    how many bytes they take; the caller reads them in place, then drops that many bytes."""
    pos, n, bounds = 0, len(buf), []
    while n - pos >= 4:
        size = struct.unpack_from(">i", buf, pos)[0]
        if n - pos - 4 < size:
            break
        bounds.append((pos + 4, pos + 4 + size))
        pos += 4 + size
    return bounds, pos


# ------------------------------------------------------------------------------------------------
# ceilings: what the machine does with the same bytes and no Kafka


class _AppendCeiling(asyncio.Protocol):
    """Receives size-prefixed frames, appends each to a file, answers 16 bytes with its correlation id."""

    def __init__(self, fd: int):
        self.fd = fd
        self.buf = bytearray()

    def connection_made(self, transport):
        self.transport = transport

    def data_received(self, data):
        buf = self.buf
        buf += data
        bounds, used = frame_bounds(buf)
        view = memoryview(buf)
        out = [reply for start, end in bounds if (reply := self.answer(view[start:end]))]
        view.release()
        del buf[:used]
        if out:
            self.transport.write(b"".join(out))

    def answer(self, frame: memoryview) -> bytes | None:
        os.write(self.fd, frame)
        return b"\x00\x00\x00\x0c" + frame[4:8].tobytes() + b"\x00" * 8


class _SendfileCeiling(asyncio.Protocol):
    """Answers each frame (int32 wanted bytes after the header) with that many bytes of a file."""

    def __init__(self, file):
        self.file = file
        self.buf = bytearray()
        self.queue: asyncio.Queue = asyncio.Queue()
        self.task = None

    def connection_made(self, transport):
        self.transport = transport
        self.task = asyncio.ensure_future(self._serve())

    def connection_lost(self, exc):
        self.task.cancel()

    def data_received(self, data):
        buf = self.buf
        buf += data
        bounds, used = frame_bounds(buf)
        for start, _ in bounds:
            self.queue.put_nowait(struct.unpack_from(">iqi", buf, start + 4))  # correlation id, offset, bytes
        del buf[:used]

    async def _serve(self):
        loop = asyncio.get_running_loop()
        while True:
            corr, offset, want = await self.queue.get()
            self.transport.write(struct.pack(">ii", want + 4, corr))
            await loop.sendfile(self.transport, self.file, offset, want)


class _KafkaAppendCeiling(_AppendCeiling):
    """The append ceiling in Kafka's clothes, so a real client (kcat, librdkafka) can drive it.

    Answers ApiVersions, Metadata and InitProducerId from our codec (once per connection, off
    the hot path) and advertises Produce v3-v7 only, whose fixed-width layout it reads by hand:
    each partition's record bytes go to the file with one write and the answer is packed
    directly. No validation, no offsets, no index: what is left is receive, append, reply.
    """

    PRODUCE_VERSIONS = (3, 7)
    _H = struct.Struct(">hhi")

    def __init__(self, fd: int, port: int, partitions: int, decompress: bool = False):
        super().__init__(fd)
        self.port, self.partitions, self.next_offset = port, partitions, 0
        self.decompress = decompress

    def answer(self, frame: memoryview) -> bytes | None:
        api_key, version, corr = self._H.unpack_from(frame, 0)
        return self._produce(frame, version, corr) if api_key == 0 else self._admin(frame, api_key, version)

    def _produce(self, frame, version: int, corr: int) -> bytes | None:
        unpack = struct.unpack_from
        p = 10 + max(unpack(">h", frame, 8)[0], 0)  # past the client id
        p += 2 + max(unpack(">h", frame, p)[0], 0)  # past the transactional id
        acks = unpack(">h", frame, p)[0]
        p += 6
        out = [struct.pack(">ii", 0, corr), frame[p : p + 4].tobytes()]
        (topics,) = unpack(">i", frame, p)
        p += 4
        for _ in range(topics):
            (name_len,) = unpack(">h", frame, p)
            out.append(frame[p : p + 2 + name_len].tobytes())
            p += 2 + name_len
            (parts,) = unpack(">i", frame, p)
            out.append(frame[p : p + 4].tobytes())
            p += 4
            for _ in range(parts):
                index, size = unpack(">ii", frame, p)
                p += 8
                if self.decompress:
                    self._decompress(frame, p, p + size)
                os.write(self.fd, frame[p : p + size])
                base = self.next_offset
                self.next_offset += unpack(">i", frame, p + 23)[0] + 1  # the batch's lastOffsetDelta
                p += size
                out.append(struct.pack(">ihqq", index, 0, base, -1))
                if version >= 5:
                    out.append(struct.pack(">q", 0))
        if acks == 0:
            return None
        out.append(b"\x00\x00\x00\x00")  # throttle time
        reply = b"".join(out)
        return struct.pack(">i", len(reply) - 4) + reply[4:]

    @staticmethod
    def _decompress(frame, start: int, end: int) -> None:
        """The reference for compressed produce: each v2 batch's records decompressed (with the
        codecs the broker uses) and thrown away, nothing checked."""
        from minibroker.records.codecs import decompress

        while start < end:
            (length,) = struct.unpack_from(">i", frame, start + 8)  # batchLength, then attributes
            codec_id = struct.unpack_from(">h", frame, start + 21)[0] & 0x07
            if codec_id:
                decompress(codec_id, frame[start + 61 : start + 12 + length])
            start += 12 + length

    def _admin(self, frame, api_key: int, version: int) -> bytes:
        header, end = codec.decode_request_header(frame)
        request = codec.decode(codec.REQUESTS[api_key].name, version, frame, end, exact=False)
        if api_key == 18:
            body = {
                "api_keys": [
                    {"api_key": 18, "min_version": 0, "max_version": 3},
                    {"api_key": 3, "min_version": 0, "max_version": 8},
                    {"api_key": 22, "min_version": 0, "max_version": 4},
                    # Fetch is never asked for, but librdkafka enables v2 batches only with Fetch v4
                    # and zstd only with Fetch v10: without it, kcat sent this reference v0 message
                    # sets, and uncompressed ones whatever its -z (until 2026-11-29)
                    {"api_key": 1, "min_version": 0, "max_version": 11},
                    {
                        "api_key": 0,
                        "min_version": self.PRODUCE_VERSIONS[0],
                        "max_version": self.PRODUCE_VERSIONS[1],
                    },
                ]
            }
        elif api_key == 3:
            names = [t.name for t in (request.topics or [])]
            body = {
                "brokers": [{"node_id": 0, "host": "127.0.0.1", "port": self.port}],
                "cluster_id": "ceiling",
                "controller_id": 0,
                "topics": [
                    {
                        "name": name,
                        "partitions": [
                            {"partition_index": i, "leader_id": 0, "replica_nodes": [0], "isr_nodes": [0]}
                            for i in range(self.partitions)
                        ],
                    }
                    for name in names
                ],
            }
        elif api_key == 22:
            body = {"producer_id": 1, "producer_epoch": 0}
        else:
            raise ConnectionError(f"the ceiling does not speak API {api_key}")
        return b"".join(codec.encode_response(api_key, version, header.correlation_id, body))


def run_ceiling_server(kind: str, port: int, path: str, ready: threading.Event, stop: threading.Event):
    async def main():
        loop = asyncio.get_running_loop()
        if kind == "append":
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
            server = await loop.create_server(lambda: _AppendCeiling(fd), "127.0.0.1", port)
        elif kind.startswith(("kafka-append", "kafka-decompress-append")):  # kafka-...:PARTITIONS
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
            partitions = int(kind.partition(":")[2] or 1)
            unpack = kind.startswith("kafka-decompress")
            server = await loop.create_server(
                lambda: _KafkaAppendCeiling(fd, port, partitions, unpack), "127.0.0.1", port
            )
        else:
            f = open(path, "rb")  # noqa: SIM115, ASYNC230 - before serving; kept open while it serves
            server = await loop.create_server(lambda: _SendfileCeiling(f), "127.0.0.1", port)
        ready.set()
        await asyncio.to_thread(stop.wait)
        server.close()

    asyncio.run(main())


class CeilingProcess:
    """A ceiling server in its own process (like the broker), so the generator never shares its GIL."""

    def __init__(self, kind: str, path: str):
        self.kind, self.path, self.port = kind, path, free_port()

    def __enter__(self):
        self.proc = subprocess.Popen(
            [sys.executable, __file__, "_ceiling", self.kind, str(self.port), self.path]
        )
        wait_port(self.port)
        return self

    def __exit__(self, *exc):
        self.proc.terminate()
        self.proc.wait(10)

    @property
    def pid(self):
        return self.proc.pid

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"


def _ceiling_main(kind: str, port: str, path: str) -> None:
    ready, stop = threading.Event(), threading.Event()
    import signal

    signal.signal(signal.SIGTERM, lambda *a: stop.set())
    run_ceiling_server(kind, int(port), path, ready, stop)


# ------------------------------------------------------------------------------------------------
# the raw load generator: pre-built frames, a window of requests in flight, in its own process


def produce_frames(
    topic: str,
    partitions: int,
    record_size: int,
    records_per_batch: int,
    compression: int,
    version: int = 9,
    acks: int = 1,
) -> list[bytes]:
    value = os.urandom(record_size // 2).hex().encode()[:record_size]
    frames = []
    for p in range(partitions):
        batch = build_records(
            2,
            [(i, int(time.time() * 1000), None, value) for i in range(records_per_batch)],
            compression=compression,
        )
        body = {
            "transactional_id": None,
            "acks": acks,
            "timeout_ms": 30000,
            "topic_data": [{"name": topic, "partition_data": [{"index": p, "records": batch}]}],
        }
        frames.append(codec.encode_request(0, version, 1, body, "bench"))
    return frames


def generate(
    port: int, frames: list[bytes], count: int, window: int = 5, latencies: list | None = None
) -> float:
    """Send ``count`` frames (cycling) with ``window`` in flight; returns seconds until all answered.

    With ``latencies``, each request's send-to-answer time is appended to it (answers come in order
    on one connection), queueing behind the requests in flight included."""
    sock = socket.create_connection(("127.0.0.1", port))
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    done = [0]
    sent_at = [0.0] * count if latencies is not None else None

    def reader():
        buf = bytearray()
        got = 0
        while got < count:
            chunk = sock.recv(1 << 20)
            if not chunk:
                raise ConnectionError("closed")
            buf += chunk
            bounds, used = frame_bounds(buf)
            del buf[:used]
            for _ in bounds:
                if sent_at is not None:
                    latencies.append(time.perf_counter() - sent_at[got])
                got += 1
                with cv:
                    done[0] = got
                    cv.notify()

    cv = threading.Condition()
    t = threading.Thread(target=reader, daemon=True)
    t0 = time.perf_counter()
    t.start()
    sent = 0
    n = len(frames)
    while sent < count:
        with cv:
            while sent - done[0] >= window:
                cv.wait()
        if sent_at is not None:
            sent_at[sent] = time.perf_counter()
        sock.sendall(frames[sent % n])
        sent += 1
    t.join()
    elapsed = time.perf_counter() - t0
    sock.close()
    return elapsed


def generate_connections(port: int, frames: list[bytes], conns: int, per_conn: int) -> tuple[float, list]:
    """``conns`` connections with one request in flight each, multiplexed on one thread (threads
    per connection would measure the generator's GIL); returns (seconds, latencies)."""
    import selectors

    sel = selectors.DefaultSelector()
    state = {}
    latencies: list[float] = []
    n = len(frames)
    for _ in range(conns):
        sock = socket.create_connection(("127.0.0.1", port))
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sel.register(sock, selectors.EVENT_READ)
        state[sock] = [bytearray(), 0, 0.0]  # buffer, answered, sent at
    t0 = time.perf_counter()
    for sock, st in state.items():
        st[2] = time.perf_counter()
        sock.sendall(frames[0])
    open_conns = conns
    while open_conns:
        for key, _ in sel.select():
            sock = key.fileobj
            st = state[sock]
            chunk = sock.recv(1 << 16)
            if not chunk:
                raise ConnectionError("closed")
            st[0] += chunk
            bounds, used = frame_bounds(st[0])
            del st[0][:used]
            for _ in bounds:  # one request in flight: at most one answer
                latencies.append(time.perf_counter() - st[2])
                st[1] += 1
                if st[1] < per_conn:
                    st[2] = time.perf_counter()
                    sock.sendall(frames[st[1] % n])
                else:
                    sel.unregister(sock)
                    open_conns -= 1
    elapsed = time.perf_counter() - t0
    for sock in state:
        sock.close()
    return elapsed, latencies


def percentile_ms(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(len(values) * q))] * 1000


def fetch_frames_ceiling(total_bytes: int, chunk: int) -> list[bytes]:
    frames = []
    for off in range(0, total_bytes, chunk):
        body = struct.pack(
            ">hhiqi", 1, 4, 1, off, min(chunk, total_bytes - off)
        )  # key, version, corr, offset, size
        frames.append(struct.pack(">i", len(body)) + body)
    return frames


def fetch_generate_broker(port: int, topic: str, total_records: int, max_bytes: int) -> tuple[float, int]:
    """Fetch v4 (sessionless) from offset 0 to ``total_records``, one request at a time as consumers do."""
    from minibroker.tools.wire import WireClient

    got_bytes = 0
    offset = 0
    with WireClient("127.0.0.1", port, timeout=30) as c:
        t0 = time.perf_counter()
        while offset < total_records:
            frame = codec.encode_request(
                1,
                4,
                1,
                {
                    "replica_id": -1,
                    "max_wait_ms": 0,
                    "min_bytes": 0,
                    "max_bytes": max_bytes,
                    "isolation_level": 0,
                    "topics": [
                        {
                            "topic": topic,
                            "partitions": [
                                {"partition": 0, "fetch_offset": offset, "partition_max_bytes": max_bytes}
                            ],
                        }
                    ],
                },
            )
            c.sock.sendall(frame)
            size = struct.unpack(">i", c._read(4))[0]
            data = c._read(size)
            got_bytes += size
            # the last batch's base offset and lastOffsetDelta tell where to go next (no record parsing)
            _, body = codec.decode_response(1, 4, data)
            recs = body.responses[0].partitions[0].records
            pos, last = 0, offset - 1
            while pos + 61 <= len(recs):
                base, length = struct.unpack_from(">qi", recs, pos)
                if pos + 12 + length > len(recs):
                    break
                last = base + struct.unpack_from(">i", recs, pos + 23)[0]
                pos += 12 + length
            offset = last + 1
        return time.perf_counter() - t0, got_bytes


def _generator_main(args: list[str]) -> None:
    """Subprocess entry: ``_gen produce PORT COUNT WINDOW FRAMEFILE`` prints elapsed seconds."""
    port, count, window, frame_file = int(args[1]), int(args[2]), int(args[3]), args[4]
    with open(frame_file, "rb") as f:
        blob = f.read()
    frames = [blob[start - 4 : end] for start, end in frame_bounds(blob)[0]]
    latencies: list[float] = []
    elapsed = generate(port, frames, count, window, latencies)
    print(
        json.dumps(
            {
                "elapsed": elapsed,
                "p50_ms": percentile_ms(latencies, 0.5),
                "p99_ms": percentile_ms(latencies, 0.99),
            }
        )
    )


def run_generator(port: int, frames: list[bytes], count: int, window: int = 5) -> float:
    return run_generator_stats(port, frames, count, window)["elapsed"]


def run_generator_stats(port: int, frames: list[bytes], count: int, window: int = 5) -> dict:
    """The generator in its own process: {"elapsed", "p50_ms", "p99_ms"} (request latencies)."""
    with tempfile.NamedTemporaryFile(delete=False) as f:
        f.write(b"".join(frames))
        path = f.name
    try:
        out = subprocess.run(
            [sys.executable, __file__, "_gen", "produce", str(port), str(count), str(window), path],
            capture_output=True,
            text=True,
            timeout=600,
            check=True,
        )
        return json.loads(out.stdout)
    finally:
        os.unlink(path)


# ------------------------------------------------------------------------------------------------
# workloads


def print_report(out: dict, path: str | None) -> None:
    """Print a script's results as JSON, and write them to ``path`` too when given (``--out``)."""
    print(json.dumps(out, indent=2))
    if path:
        with open(path, "w") as f:
            json.dump(out, f, indent=2)


def stats(values: list[float]) -> dict:
    values = sorted(values)
    return {"median": statistics.median(values), "min": values[0], "max": values[-1], "n": len(values)}


def bench_produce_raw(opts) -> dict:
    """Raw Produce frames vs the append ceiling: 1 KiB records in 64 KiB and ~1 MiB batches (librdkafka
    fills batches up to batch.size, 1 MB here), and 100 B records in 50 KB batches."""
    out = {}
    for record_size, per_batch in ((1024, 64), (1024, 960), (100, 500)):
        frames = produce_frames("raw", 1, record_size, per_batch, Compression.NONE)
        frame_bytes = len(frames[0])
        count = max(200, int(opts.scale * 20000 * 1024 / (record_size * per_batch)))
        ceiling, broker = [], []
        cpu_per_m = []
        for _ in range(opts.reps):
            with tempfile.TemporaryDirectory() as d:
                with CeilingProcess("append", os.path.join(d, "ceiling.log")) as ceil:
                    ceiling.append(frame_bytes * count / run_generator(ceil.port, frames, count) / 1e6)
            with BrokerProcess(loop=opts.loop) as b:
                create_topic(b.port, "raw")
                cpu0 = proc_cpu_seconds(b.proc.pid)
                elapsed = run_generator(b.port, frames, count)
                cpu = proc_cpu_seconds(b.proc.pid) - cpu0
                broker.append(frame_bytes * count / elapsed / 1e6)
                cpu_per_m.append(cpu / (count * per_batch) * 1e6)
        key = f"{record_size}B-x{per_batch}"
        out[key] = {
            "ceiling_MBps": stats(ceiling),
            "broker_MBps": stats(broker),
            "records_per_s": statistics.median(broker) * 1e6 / (frame_bytes / per_batch),
            "ratio": statistics.median(broker) / statistics.median(ceiling),
            "cpu_s_per_million_records": statistics.median(cpu_per_m),
        }
    return out


def bench_fetch_raw(opts) -> dict:
    """Raw Fetch requests reading the log back vs a sendfile server answering the same sizes."""
    records = max(2000, int(opts.scale * 200_000))
    value_size = 1024
    per_batch = 64
    ceiling, broker = [], []
    for _ in range(opts.reps):
        with BrokerProcess(loop=opts.loop) as b:
            create_topic(b.port, "fetch")
            frames = produce_frames("fetch", 1, value_size, per_batch, Compression.NONE)
            run_generator(b.port, frames, records // per_batch)
            elapsed, nbytes = fetch_generate_broker(
                b.port, "fetch", records // per_batch * per_batch, 1 << 20
            )
            broker.append(nbytes / elapsed / 1e6)
            log_path = os.path.join(b.dir, "fetch-0", "00000000000000000000.log")
            size = os.path.getsize(log_path)
            with CeilingProcess("sendfile", log_path) as ceil:
                frames = fetch_frames_ceiling(size, 1 << 20)
                ceiling.append(size / run_generator(ceil.port, frames, len(frames), window=1) / 1e6)
    return {
        "ceiling_MBps": stats(ceiling),
        "broker_MBps": stats(broker),
        "ratio": statistics.median(broker) / statistics.median(ceiling),
    }


_LOOP_FLOOR = """
import asyncio, socket, sys
port, loop = int(sys.argv[1]), sys.argv[2]
if loop != "asyncio":
    try:
        import uvloop
        asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
    except ImportError:
        pass
async def main():
    sock = socket.create_server(("127.0.0.1", port), backlog=1024)
    sock.setblocking(False)
    await asyncio.get_running_loop().create_server(asyncio.Protocol, sock=sock)
    await asyncio.sleep(60)
asyncio.run(main())
"""


def _baseline_process(args: list[str], port: int) -> tuple[float, float]:
    """(ms from process start to accepting, RSS MB once idle) of a baseline server process."""
    t0 = time.perf_counter()
    p = subprocess.Popen([sys.executable, *args], env=bench_env())
    try:
        wait_port(port)
        ms = (time.perf_counter() - t0) * 1000
        time.sleep(0.3)
        return ms, proc_rss_bytes(p.pid) / 2**20
    finally:
        p.kill()
        p.wait()


SASL_USER, SASL_PASSWORD = "bench", "bench-secret"


def loaded_broker(opts, certs: dict) -> BrokerProcess:
    """A broker with a SASL_SSL listener (PLAIN) beside its PLAINTEXT one: what the loaded figures use."""
    b = BrokerProcess(loop=opts.loop)
    sasl_port = free_port()
    b.sasl_port = sasl_port
    b.overrides.update({
        "listeners": f"PLAINTEXT://127.0.0.1:{b.port},SASL_SSL://127.0.0.1:{sasl_port}",
        "ssl.keystore.location": certs["broker_keystore"],
        "sasl.enabled.mechanisms": "PLAIN",
        "listener.name.sasl_ssl.plain.sasl.jaas.config":
            "org.apache.kafka.common.security.plain.PlainLoginModule required "
            f'user_{SASL_USER}="{SASL_PASSWORD}";',
        "group.share.heartbeat.interval.ms": "500",
        "group.share.min.heartbeat.interval.ms": "500",
    })
    return b


def use_transactions_and_a_share_group(b: BrokerProcess, certs: dict) -> None:
    """Over the SASL_SSL listener: a transaction committed (confluent-kafka), then a share group reading
    it back (confluent-kafka's ShareConsumer, when it has one)."""
    import confluent_kafka as ck

    secure = {"bootstrap.servers": f"127.0.0.1:{b.sasl_port}", "security.protocol": "SASL_SSL",
              "ssl.ca.location": certs["ca"], "ssl.endpoint.identification.algorithm": "none",
              "sasl.mechanism": "PLAIN", "sasl.username": SASL_USER, "sasl.password": SASL_PASSWORD}
    create_topic(b.port, "loaded")
    producer = ck.Producer({**secure, "transactional.id": "bench-loaded"})
    producer.init_transactions(30)
    producer.begin_transaction()
    for i in range(100):
        producer.produce("loaded", b"%d" % i)
    producer.commit_transaction(30)
    if not hasattr(ck, "ShareConsumer"):
        return
    from minibroker.tools.wire import WireClient

    with WireClient("127.0.0.1", b.port) as wire:  # the share group reads from the earliest offset
        wire.request(44, 1, {"resources": [{"resource_type": 32, "resource_name": "bench-share", "configs": [
            {"name": "share.auto.offset.reset", "config_operation": 0, "value": "earliest"}]}],
            "validate_only": False})
    consumer = ck.ShareConsumer({**secure, "group.id": "bench-share"})
    consumer.subscribe(["loaded"])
    got, deadline = 0, time.monotonic() + 30
    while got < 100 and time.monotonic() < deadline:
        got += sum(1 for m in consumer.poll(timeout=0.5) if m.error() is None)
    consumer.close()
    if got < 100:
        raise RuntimeError(f"the share group read {got} of 100 records")


def bench_startup(opts) -> dict:
    """The broker's start-up and idle RSS beside two baselines started the same way, alternating:
    a bare Python that binds a port, and the event-loop floor (Python, asyncio and the broker's
    loop serving one listening socket), which is what any asyncio broker starts from. Then the loaded
    figures: a broker with a SASL_SSL listener, its start-up, and its RSS once a transaction was
    committed and a share group read it back."""
    starts, rss, bare, floor, floor_rss = [], [], [], [], []
    loaded_starts, loaded_rss = [], []
    certs_dir = tempfile.mkdtemp(prefix="mb-bench-certs-")
    from minibroker.tools.certs import generate_test_certs

    certs = generate_test_certs(certs_dir)
    # 45 starts unless --quick: the same code measured 1.07x to 1.69x the floor at five starts a run,
    # 1.07x to 1.36x at twenty, 1.11x to 1.16x at 45 (docs/benchmarks.md, "... Start-up: the
    # collector paused, and how many starts a figure needs").
    for rep in range(max(5 if opts.quick else 45, opts.reps)):
        with BrokerProcess(loop=opts.loop) as b:
            starts.append(b.startup_s * 1000)
            time.sleep(0.3)
            rss.append(proc_rss_bytes(b.proc.pid) / 2**20)
        if rep < 3:
            with loaded_broker(opts, certs) as b:
                loaded_starts.append(b.startup_s * 1000)
                use_transactions_and_a_share_group(b, certs)
                time.sleep(0.3)
                loaded_rss.append(proc_rss_bytes(b.proc.pid) / 2**20)
        port = free_port()
        code = (
            "import socket,time;s=socket.socket();"
            "s.setsockopt(socket.SOL_SOCKET,socket.SO_REUSEADDR,1);"
            f"s.bind(('127.0.0.1',{port}));s.listen();time.sleep(30)"
        )
        bare.append(_baseline_process(["-c", code], port)[0])
        port = free_port()
        ms, mb = _baseline_process(["-c", _LOOP_FLOOR, str(port), opts.loop], port)
        floor.append(ms)
        floor_rss.append(mb)
    subprocess.run(["rm", "-rf", certs_dir])
    return {
        "startup_ms": stats(starts),
        "python_baseline_ms": stats(bare),
        "loop_floor_ms": stats(floor),
        "ratio_to_bare_python": statistics.median(starts) / statistics.median(bare),
        "ratio_to_floor": statistics.median(starts) / statistics.median(floor),
        # each start against the floor started right after it: a drift of the machine over the run
        # moves both sides of a pair, where it moves the two medians apart
        "paired_ratio_to_floor": statistics.median([s / f for s, f in zip(starts, floor, strict=True)]),
        "idle_rss_MB": stats(rss),
        "loop_floor_rss_MB": stats(floor_rss),
        "rss_over_floor_MB": statistics.median(rss) - statistics.median(floor_rss),
        "loaded_startup_ms": stats(loaded_starts),
        "loaded_ratio_to_floor": statistics.median(loaded_starts) / statistics.median(floor),
        "loaded_rss_MB": stats(loaded_rss),
        "loaded_rss_over_floor_MB": statistics.median(loaded_rss) - statistics.median(floor_rss),
    }


def _import_cost_ms(module: str) -> float:
    """Milliseconds to import ``module`` in a fresh interpreter that has imported what a running broker
    has (the server, its storage and codec): what loading it on the event loop would hold every
    connection for."""
    code = ("import time, minibroker.server.broker, minibroker.storage, minibroker.services\n"
            f"t = time.perf_counter(); import {module}; print((time.perf_counter() - t) * 1000)")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=bench_env(), capture_output=True,
                         text=True, check=True)
    return float(out.stdout)


def _produce_loop(port: int, batch: bytes, samples: list, stop: threading.Event) -> None:
    """Produce ``batch`` to partition 0 of ``loop``, one request at a time, until ``stop``; appends
    (start, seconds) of each request to ``samples``."""
    from minibroker.tools.wire import WireClient

    body = {"transactional_id": None, "acks": 1, "timeout_ms": 5000, "topic_data": [
        {"name": "loop", "partition_data": [{"index": 0, "records": batch}]}]}
    with WireClient("127.0.0.1", port, timeout=30) as c:
        while not stop.is_set():
            t = time.perf_counter()
            c.request(0, 9, body)
            samples.append((t, time.perf_counter() - t))


def bench_first_use(opts) -> dict:
    """Loading a subsystem mid-run: one client produces in a loop (1 record, acks=1, one request at a
    time) while another sends the broker's first transactional request (InitProducerId with a
    transactional id: the handler module, the transaction coordinator, __transaction_state created)
    and then its first share request (ShareGroupHeartbeat: the share group coordinator). Reported: the
    produce loop's latency (p50, p99, max) in quiet seconds before, and its worst latency while each
    first request was being answered, beside that request's own time and the cost of its imports
    measured apart (what importing on the event loop would have held every connection for)."""
    from minibroker.tools.wire import WireClient

    out: dict = {"transactional": {"request_ms": [], "worst_produce_ms": []},
                 "share": {"request_ms": [], "worst_produce_ms": []}, "quiet": []}
    batch = build_records(2, [(0, int(time.time() * 1000), None, b"x" * 100)])
    for _ in range(opts.reps):
        with BrokerProcess(loop=opts.loop) as b:
            create_topic(b.port, "loop")
            samples: list[tuple[float, float]] = []  # (start, latency) of each produce
            stop = threading.Event()
            worker = threading.Thread(target=_produce_loop, args=(b.port, batch, samples, stop))
            worker.start()
            time.sleep(1.5)  # the produce handler loads on the first request; then a quiet second
            quiet_from = time.perf_counter() - 1.0
            quiet = [lat for t, lat in samples if t >= quiet_from]
            out["quiet"].extend(quiet)
            with WireClient("127.0.0.1", b.port, timeout=30) as c:
                for name, api_key, version, body in (
                    ("transactional", 22, 4, {"transactional_id": "first-use", "producer_id": -1,
                                              "transaction_timeout_ms": 60000, "producer_epoch": -1}),
                    ("share", 76, 1, {"group_id": "first-use", "member_id": "m" * 22, "member_epoch": 0,
                                      "rack_id": None, "subscribed_topic_names": ["loop"]}),
                ):
                    t0 = time.perf_counter()
                    c.request(api_key, version, body)
                    t1 = time.perf_counter()
                    during = [lat for t, lat in samples if t0 - lat <= t <= t1] or [0.0]
                    out[name]["request_ms"].append((t1 - t0) * 1000)
                    out[name]["worst_produce_ms"].append(max(during) * 1000)
                    time.sleep(0.5)
            stop.set()
            worker.join()
    quiet_ms = sorted(lat * 1000 for lat in out.pop("quiet"))
    result = {"quiet_produce_ms": {"p50": quiet_ms[len(quiet_ms) // 2],
                                   "p99": quiet_ms[int(len(quiet_ms) * 0.99)], "max": quiet_ms[-1],
                                   "n": len(quiet_ms)}}
    imports = {"transactional": "minibroker.handlers.init_producer_id",
               "share": "minibroker.handlers.share_group_heartbeat"}
    for name, v in out.items():
        result[name] = {"request_ms": stats(v["request_ms"]),
                        "worst_produce_ms": stats(v["worst_produce_ms"]),
                        "import_on_loop_would_hold_ms": _import_cost_ms(imports[name])}
    return result


def bench_fixture(opts) -> dict:
    """The pytest plugin's BrokerRunner: in-process (thread) and subprocess start-to-ready, idle RSS."""
    from minibroker.testing import BrokerRunner

    thread_ms, proc_ms, rss = [], [], []
    for _ in range(max(3, opts.reps)):
        t0 = time.perf_counter()
        r = BrokerRunner()
        r.start()
        thread_ms.append((time.perf_counter() - t0) * 1000)
        r.cleanup()
        t0 = time.perf_counter()
        r = BrokerRunner(mode="process")
        r.start()
        proc_ms.append((time.perf_counter() - t0) * 1000)
        time.sleep(0.3)
        rss.append(proc_rss_bytes(r.process.pid) / 2**20)
        r.cleanup()
    return {
        "thread_start_ms": stats(thread_ms),
        "process_start_ms": stats(proc_ms),
        "idle_rss_MB": stats(rss),
    }


def confluent_produce(bootstrap: str, n: int, partitions: int, size: int, acks: str, comp: str) -> float:
    """Seconds for confluent-kafka's producer to send ``n`` records round-robin over ``partitions``."""
    from confluent_kafka import Producer

    p = Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": acks,
            "compression.type": comp,
            "linger.ms": 5,
            "batch.size": 1 << 20,
            "queue.buffering.max.messages": 1_000_000,
            "enable.idempotence": acks == "all",
        }
    )
    value = os.urandom(size // 2).hex().encode()[:size]
    t0 = time.perf_counter()
    for i in range(n):
        while True:
            try:
                p.produce("p", value, partition=i % partitions)
                break
            except BufferError:
                p.poll(0.001)
        if i % 10000 == 0:
            p.poll(0)
    if p.flush(120):
        raise RuntimeError("confluent-kafka producer did not drain in 120 s")
    return time.perf_counter() - t0


def bench_produce_clients(opts) -> dict:
    """confluent-kafka's producer against the broker and, uncompressed, against the Kafka-shaped
    append ceiling (same client, same settings, alternating runs)."""
    out = {}
    n = max(20_000, int(opts.scale * 400_000))
    cases = [
        (1, 100, "1", "none"),
        (1, 1024, "1", "none"),
        (8, 100, "1", "none"),
        (1, 1024, "all", "none"),
        (1, 1024, "1", "lz4"),
        (1, 1024, "1", "zstd"),
    ]
    if opts.quick:
        cases = cases[:2]
    for partitions, size, acks, comp in cases:
        rates, ceiling_rates, cpu, rss_peak = [], [], [], []
        for _ in range(opts.reps):
            with BrokerProcess(loop=opts.loop) as b:
                create_topic(b.port, "p", partitions)
                cpu0 = proc_cpu_seconds(b.proc.pid)
                elapsed = confluent_produce(b.bootstrap, n, partitions, size, acks, comp)
                cpu.append((proc_cpu_seconds(b.proc.pid) - cpu0) / n * 1e6)
                rss_peak.append(proc_rss_bytes(b.proc.pid) / 2**20)
                rates.append(n / elapsed)
            if comp == "none":  # a compressed batch is work the ceiling would not do
                with (
                    tempfile.TemporaryDirectory() as d,
                    CeilingProcess(f"kafka-append:{partitions}", os.path.join(d, "ceiling.log")) as ceil,
                ):
                    ceiling_rates.append(
                        n / confluent_produce(ceil.bootstrap, n, partitions, size, acks, comp)
                    )
        key = f"{partitions}p-{size}B-acks{acks}-{comp}"
        med = statistics.median(rates)
        out[key] = {
            "records_per_s": stats(rates),
            "MBps": med * size / 1e6,
            "cpu_s_per_million_records": statistics.median(cpu),
            "rss_under_load_MB": max(rss_peak),
        }
        if ceiling_rates:
            out[key]["ceiling_records_per_s"] = stats(ceiling_rates)
            out[key]["ratio"] = med / statistics.median(ceiling_rates)
    # kafka-python's producer (its own encoder is the bound: ~0.5M records/s of 100 B at best)
    from kafka import KafkaProducer

    rates = []
    n_kp = max(5000, n // 8)
    for _ in range(opts.reps):
        with BrokerProcess(loop=opts.loop) as b:
            create_topic(b.port, "kp", 1)
            kp = KafkaProducer(bootstrap_servers=b.bootstrap, linger_ms=5, batch_size=1 << 20)
            value = b"x" * 100
            t0 = time.perf_counter()
            for _ in range(n_kp):
                kp.send("kp", value, partition=0)
            kp.flush()
            rates.append(n_kp / (time.perf_counter() - t0))
            kp.close()
    out["kafka-python-1p-100B"] = {"records_per_s": stats(rates)}
    return out


def kcat_produce(kcat: str, bootstrap: str, path: str, *extra: str) -> float:
    """Seconds for kcat to produce every line of ``path`` to partition 0 of topic ``k`` (``extra``:
    more kcat arguments, e.g. ``-z lz4``)."""
    t0 = time.perf_counter()
    subprocess.run(
        [
            kcat,
            "-P",
            "-b",
            bootstrap,
            "-t",
            "k",
            "-p",
            "0",
            "-X",
            "linger.ms=5",
            "-X",
            "batch.size=1000000",
            "-X",
            "queue.buffering.max.messages=1000000",
            *extra,
            "-l",
            path,
        ],
        check=True,
        capture_output=True,
        timeout=600,
    )
    return time.perf_counter() - t0


def bench_produce_kcat(opts) -> dict:
    """kcat (librdkafka in C: the fastest client here) producing 1 KiB and 100 B records from a file,
    to the broker and to the Kafka-shaped append ceiling, alternating."""
    import shutil

    kcat = shutil.which("kcat") or shutil.which("kafkacat")
    if kcat is None:
        return {"skipped": "kcat is not installed"}
    out = {}
    # The headline goal: runs long enough (about a second each) and five pairs, since kcat's own
    # start-up and the machine's noise move single runs by 30%.
    reps = max(opts.reps, 5)
    for size, n in (
        (1024, max(20_000, int(opts.scale * 600_000))),
        (100, max(100_000, int(opts.scale * 2_000_000))),
    ):
        with tempfile.NamedTemporaryFile("wb", suffix=".txt", delete=False) as f:
            line = os.urandom(size // 2).hex().encode()[:size] + b"\n"
            f.write(line * n)
            path = f.name
        rates, ceiling_rates, cpu, ceiling_cpu = [], [], [], []
        try:
            for _ in range(reps):
                with BrokerProcess(loop=opts.loop) as b:
                    create_topic(b.port, "k", 1)
                    cpu0 = proc_cpu_seconds(b.proc.pid)
                    rates.append(n / kcat_produce(kcat, b.bootstrap, path))
                    cpu.append((proc_cpu_seconds(b.proc.pid) - cpu0) / n * 1e6)
                with (
                    tempfile.TemporaryDirectory() as d,
                    CeilingProcess("kafka-append:1", os.path.join(d, "ceiling.log")) as ceil,
                ):
                    cpu0 = proc_cpu_seconds(ceil.pid)
                    ceiling_rates.append(n / kcat_produce(kcat, ceil.bootstrap, path))
                    ceiling_cpu.append((proc_cpu_seconds(ceil.pid) - cpu0) / n * 1e6)
        finally:
            os.unlink(path)
        med = statistics.median(rates)
        out[f"{size}B"] = {
            "records_per_s": stats(rates),
            "MBps": med * size / 1e6,
            "cpu_s_per_million_records": statistics.median(cpu),
            "ceiling_records_per_s": stats(ceiling_rates),
            "ceiling_cpu_s_per_million_records": statistics.median(ceiling_cpu),
            "ratio": med / statistics.median(ceiling_rates),
        }
    return out


def bench_record_layer(opts) -> dict:
    """Issue 29: kcat's produce on each path of the record layer, the C accelerator and pure Python
    (MINIBROKER_PURE_PYTHON=1), beside the Kafka-shaped references, alternating run by run:

    - 1 KiB records: broker CPU per GB of records against the receive+append reference's;
    - 100 B records: records/s (and CPU per million) against the same reference;
    - 1 KiB records compressed with lz4 and zstd by kcat: broker CPU per GB of (uncompressed) records
      against a reference that decompresses each batch and appends it.
    """
    import shutil

    kcat = shutil.which("kcat") or shutil.which("kafkacat")
    if kcat is None:
        return {"skipped": "kcat is not installed"}
    paths = {"c": {}, "python": {"MINIBROKER_PURE_PYTHON": "1"}}
    cases = [  # name, record size, records, kcat's compression, reference
        ("1024B", 1024, max(20_000, int(opts.scale * 300_000)), "none", "kafka-append:1"),
        ("100B", 100, max(100_000, int(opts.scale * 2_000_000)), "none", "kafka-append:1"),
        ("1024B-lz4", 1024, max(20_000, int(opts.scale * 300_000)), "lz4", "kafka-decompress-append:1"),
        ("1024B-zstd", 1024, max(20_000, int(opts.scale * 300_000)), "zstd", "kafka-decompress-append:1"),
    ]
    out = {}
    for name, size, n, compression, reference in cases:
        with tempfile.NamedTemporaryFile("wb", suffix=".txt", delete=False) as f:
            # text records (hex of random bytes, 2:1 compressible), each line its own
            for i in range(0, n, 1000):
                lines = (os.urandom(size // 2).hex().encode()[:size] + b"\n" for _ in range(min(1000, n - i)))
                f.write(b"".join(lines))
            path = f.name
        extra = ("-z", compression)
        runs: dict[str, dict[str, list]] = {k: {"rate": [], "cpu": []} for k in (*paths, "ref")}
        try:
            for _ in range(opts.reps):
                for key, env in paths.items():
                    with BrokerProcess(loop=opts.loop, env=env) as b:
                        create_topic(b.port, "k", 1)
                        cpu0 = proc_cpu_seconds(b.proc.pid)
                        runs[key]["rate"].append(n / kcat_produce(kcat, b.bootstrap, path, *extra))
                        runs[key]["cpu"].append(proc_cpu_seconds(b.proc.pid) - cpu0)
                with (
                    tempfile.TemporaryDirectory() as d,
                    CeilingProcess(reference, os.path.join(d, "ceiling.log")) as ceil,
                ):
                    cpu0 = proc_cpu_seconds(ceil.pid)
                    runs["ref"]["rate"].append(n / kcat_produce(kcat, ceil.bootstrap, path, *extra))
                    runs["ref"]["cpu"].append(proc_cpu_seconds(ceil.pid) - cpu0)
        finally:
            os.unlink(path)
        gb = n * size / 1e9
        figures = {
            key: {
                "records_per_s": stats(v["rate"]),
                "cpu_s_per_GB": stats([c / gb for c in v["cpu"]]),
                "cpu_s_per_million_records": statistics.median(v["cpu"]) / n * 1e6,
            }
            for key, v in runs.items()
        }
        ref_cpu = figures["ref"]["cpu_s_per_GB"]["median"]
        ref_rate = figures["ref"]["records_per_s"]["median"]
        for key in paths:
            figures[key]["cpu_ratio"] = figures[key]["cpu_s_per_GB"]["median"] / ref_cpu
            figures[key]["rate_ratio"] = figures[key]["records_per_s"]["median"] / ref_rate
        out[name] = {"records": n, "compression": compression, "reference_server": reference, **figures}
    return out


def bench_fetch_clients(opts) -> dict:
    from confluent_kafka import Consumer, TopicPartition

    n = max(20_000, int(opts.scale * (1 << 30) // 1024))  # 1 GiB of 1 KiB records at scale 1
    out = {}
    with BrokerProcess(loop=opts.loop) as b:
        create_topic(b.port, "f", 1)
        frames = produce_frames("f", 1, 1024, 256, Compression.NONE)
        run_generator(b.port, frames, n // 256)
        total = n // 256 * 256
        rates = []
        for _ in range(opts.reps):
            c = Consumer(
                {
                    "bootstrap.servers": b.bootstrap,
                    "group.id": "bench",
                    "enable.auto.commit": False,
                    "fetch.max.bytes": 52428800,
                    "max.partition.fetch.bytes": 10485760,
                }
            )
            c.assign([TopicPartition("f", 0, 0)])
            got = 0
            t0 = time.perf_counter()
            while got < total:
                msgs = c.consume(10000, 1.0)
                got += sum(1 for m in msgs if m.error() is None)
            rates.append(got / (time.perf_counter() - t0))
            c.close()
        out["confluent-1KiB"] = {"records_per_s": stats(rates), "MBps": statistics.median(rates) * 1024 / 1e6}
        from kafka import KafkaConsumer
        from kafka import TopicPartition as KTP

        rates = []
        want = min(total, max(20_000, total // 8))
        for _ in range(opts.reps):
            c = KafkaConsumer(bootstrap_servers=b.bootstrap, enable_auto_commit=False)
            c.assign([KTP("f", 0)])
            c.seek(KTP("f", 0), 0)
            got = 0
            t0 = time.perf_counter()
            while got < want:
                for recs in c.poll(timeout_ms=500, max_records=10000).values():
                    got += len(recs)
            rates.append(got / (time.perf_counter() - t0))
            c.close()
        out["kafka-python-1KiB"] = {
            "records_per_s": stats(rates),
            "MBps": statistics.median(rates) * 1024 / 1e6,
        }
    return out


def bench_latency(opts) -> dict:
    """Produce-to-consume latency at a fixed rate, confluent-kafka producer and consumer; each run
    on a fresh broker, p50/p99 as the median over the runs with their spread."""
    runs = [_latency_run(opts) for _ in range(opts.reps)]
    runs = [r for r in runs if r]
    if not runs:
        return {}
    return {
        "rate_per_s": runs[0]["rate_per_s"],
        "received": sum(r["received"] for r in runs),
        "p50_ms": statistics.median(r["p50_ms"] for r in runs),
        "p99_ms": statistics.median(r["p99_ms"] for r in runs),
        "p99_ms_runs": [r["p99_ms"] for r in runs],
        "max_ms": max(r["max_ms"] for r in runs),
    }


def _latency_run(opts) -> dict:
    from confluent_kafka import Consumer, Producer, TopicPartition

    rate = 10_000
    seconds = 2 if opts.quick else 5
    out = {}
    with BrokerProcess(loop=opts.loop) as b:
        create_topic(b.port, "lat", 1)
        c = Consumer(
            {
                "bootstrap.servers": b.bootstrap,
                "group.id": "lat",
                "enable.auto.commit": False,
                "fetch.wait.max.ms": 100,
                "fetch.min.bytes": 1,
            }
        )
        c.assign([TopicPartition("lat", 0, 0)])
        p = Producer({"bootstrap.servers": b.bootstrap, "linger.ms": 0, "acks": "1"})
        lat = []
        stop = threading.Event()

        def consume():
            # poll() hands over each message as soon as it arrives; consume(n, timeout) would hold
            # messages until n arrive or the timeout passes, and measure that instead
            while not stop.is_set():
                m = c.poll(0.05)
                if m is not None and m.error() is None:
                    lat.append(time.perf_counter() - struct.unpack(">d", m.value()[:8])[0])

        t = threading.Thread(target=consume)
        t.start()
        # Warm up: the producer's bootstrap (ApiVersions, Metadata, its connection) would otherwise
        # hold the first ~50 ms of records, 1% of them, and p99 would measure the client's start.
        while not lat:
            p.produce("lat", struct.pack(">d", time.perf_counter()) + b"x" * 92)
            p.flush(10)
            time.sleep(0.05)
        time.sleep(0.2)
        lat.clear()
        n = rate * seconds
        t0 = time.perf_counter()
        for i in range(n):
            target = t0 + i / rate
            ahead = target - time.perf_counter()
            if ahead > 0.0005:  # sleep, not spin: a spinning producer would take the core the broker needs
                time.sleep(ahead)
            p.produce("lat", struct.pack(">d", time.perf_counter()) + b"x" * 92)
            p.poll(0)
        p.flush(10)
        time.sleep(1.0)
        stop.set()
        t.join()
        c.close()
        lat.sort()
        if lat:
            out = {
                "rate_per_s": rate,
                "received": len(lat),
                "p50_ms": lat[len(lat) // 2] * 1000,
                "p99_ms": lat[int(len(lat) * 0.99)] * 1000,
                "max_ms": lat[-1] * 1000,
            }
    return out


def bench_scaling(opts) -> dict:
    """Produce throughput vs partitions and connections (raw generator), fetch lookup vs log size."""
    out = {"partitions": {}, "connections": {}, "lookup": {}}
    for parts in [1, 8, 64] if not opts.quick else [1, 8]:
        frames = produce_frames("s", parts, 1024, 16, Compression.NONE)
        with BrokerProcess(loop=opts.loop) as b:
            create_topic(b.port, "s", parts)
            count = max(parts * 20, int(opts.scale * 20000))
            run = run_generator_stats(b.port, frames, count)
            out["partitions"][parts] = {
                "MBps": len(frames[0]) * count / run["elapsed"] / 1e6,
                "p50_ms": run["p50_ms"],
                "p99_ms": run["p99_ms"],
            }
    for conns in [1, 10, 100] if not opts.quick else [1, 10]:
        frames = produce_frames("c", 1, 1024, 16, Compression.NONE)
        with BrokerProcess(loop=opts.loop) as b:
            create_topic(b.port, "c", 1)
            per = max(20, int(opts.scale * 20000) // conns)
            elapsed, latencies = generate_connections(b.port, frames, conns, per)
            out["connections"][conns] = {
                "MBps": len(frames[0]) * per * conns / elapsed / 1e6,
                "p50_ms": percentile_ms(latencies, 0.5),
                "p99_ms": percentile_ms(latencies, 0.99),
            }
    # lookup cost: index floor search + header scan, as the log grows (in-process, no network)
    from minibroker.storage import PartitionLog  # noqa: F401
    from minibroker.storage.log_manager import LogManager

    for batches in [1_000, 10_000, 100_000] if not opts.quick else [1_000, 10_000]:
        with tempfile.TemporaryDirectory() as d:
            lm = LogManager([d], {"log.segment.bytes": 1 << 24}, 1)
            lm.load()
            lm.create_topic("l", 1, {})
            plog = lm.get_log("l", 0)
            data = bytearray(build_records(2, [(0, 1_700_000_000_000, None, b"x" * 100)]))
            for i in range(batches):
                struct.pack_into(">q", data, 0, i)
                plog.append(
                    data,
                    first_offset=i,
                    last_offset=i,
                    max_timestamp=1_700_000_000_000,
                    offset_of_max_timestamp=i,
                    record_count=1,
                )
            import random

            rng = random.Random(1)
            targets = [rng.randrange(batches) for _ in range(2000)]
            t0 = time.perf_counter()
            for t in targets:
                plog.read(t, 1 << 16)
            per = (time.perf_counter() - t0) / len(targets) * 1e6
            out["lookup"][batches] = {"us_per_lookup": per, "segments": len(plog.segments)}
            lm.close()
    return out


def proc_status_mb(pid: int, field: str = "VmRSS") -> float:
    """A memory figure of /proc/PID/status (VmRSS, VmHWM: the peak RSS) in MB."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    raise KeyError(field)


def request_latencies(port: int, frames: list[bytes], count: int) -> list[float]:
    """One connection, one request at a time: seconds from sending each frame to its whole answer."""
    out = []
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        for i in range(count):
            t0 = time.perf_counter()
            sock.sendall(frames[i % len(frames)])
            buf = b""
            while len(buf) < 4 or len(buf) < 4 + struct.unpack_from(">i", buf)[0]:
                chunk = sock.recv(1 << 16)
                if not chunk:
                    raise ConnectionError("closed")
                buf += chunk
            out.append(time.perf_counter() - t0)
    return out


def _stall(port: int, conns: int, payload: bytes) -> list[socket.socket]:
    socks = []
    for _ in range(conns):
        s = socket.create_connection(("127.0.0.1", port), timeout=30)
        s.sendall(payload)
        socks.append(s)
    return socks


def bench_hostile(opts) -> dict:
    """Memory and service under clients that announce huge requests and stall (issue 14)."""
    conns = 500
    prefix = struct.pack(">i", 100 << 20)  # socket.request.max.bytes' default: the largest accepted
    api = [codec.encode_request(18, 0, 1, {}, "bench")]
    produce = produce_frames("hostile", 1, 1024, 1, Compression.NONE)
    n_api, n_produce = (1000, 500) if opts.quick else (3000, 1500)

    def lat(values: list[float]) -> dict:
        return {"p50_ms": percentile_ms(values, 0.5), "p99_ms": percentile_ms(values, 0.99),
                "max_ms": max(values) * 1000}

    out: dict = {"connections": conns}
    with BrokerProcess(loop=opts.loop) as b:
        create_topic(b.port, "hostile")
        time.sleep(0.5)
        out["idle_rss_MB"] = proc_status_mb(b.proc.pid)
        request_latencies(b.port, api + produce, 200)  # warm-up
        out["before"] = {"api_versions": lat(request_latencies(b.port, api, n_api)),
                         "produce": lat(request_latencies(b.port, produce, n_produce))}
        out["rss_before_MB"] = proc_status_mb(b.proc.pid)
        t0 = time.perf_counter()
        stalled = _stall(b.port, conns, prefix)
        out["connect_s"] = time.perf_counter() - t0
        time.sleep(2.5)  # every prefix read, and two sweeps (1 s apart) have seen the connections silent
        out["during"] = {"api_versions": lat(request_latencies(b.port, api, n_api)),
                         "produce": lat(request_latencies(b.port, produce, n_produce))}
        out["rss_stalled_MB"] = proc_status_mb(b.proc.pid)
        out["peak_rss_MB"] = proc_status_mb(b.proc.pid, "VmHWM")
        for s in stalled:
            s.close()
    # the same connections sending 64 KiB of their frame: what arrives is held, unless the pool bounds it
    body = prefix + bytes(64 << 10)
    for name, overrides in (("no_pool", {}), ("pool_200MiB", {"queued.max.request.bytes": str(200 << 20)})):
        with BrokerProcess(overrides, loop=opts.loop) as b:
            time.sleep(0.5)
            idle = proc_status_mb(b.proc.pid)
            stalled = _stall(b.port, conns, body)
            time.sleep(2.5)
            out[f"partial_{name}"] = {
                "idle_rss_MB": idle,
                "rss_MB": proc_status_mb(b.proc.pid),
                "peak_rss_MB": proc_status_mb(b.proc.pid, "VmHWM"),
                "api_versions": lat(request_latencies(b.port, api, n_api)),
            }
            for s in stalled:
                s.close()
    return out


def bench_socket_buffers(opts) -> dict:
    """Kafka's default socket buffers (100 KiB, which turns Linux's auto-tuning off) against the OS
    default (-1): raw ~1 MiB Produce frames and 1 MiB Fetch responses, in alternating brokers."""
    kafka = {"socket.send.buffer.bytes": "102400", "socket.receive.buffer.bytes": "102400"}
    frames = produce_frames("buf", 1, 1024, 960, Compression.NONE)
    count = max(100, int(opts.scale * 500))
    out: dict = {name: {"produce_MBps": [], "fetch_MBps": []} for name in ("kafka_100KiB", "os_default")}
    for _ in range(max(3, opts.reps)):
        for name, overrides in (("kafka_100KiB", kafka), ("os_default", {})):
            with BrokerProcess(overrides, loop=opts.loop) as b:
                create_topic(b.port, "buf")
                elapsed = run_generator(b.port, frames, count)
                out[name]["produce_MBps"].append(len(frames[0]) * count / elapsed / 1e6)
                elapsed, nbytes = fetch_generate_broker(b.port, "buf", count * 960, 1 << 20)
                out[name]["fetch_MBps"].append(nbytes / elapsed / 1e6)
    for name in out:
        for key in ("produce_MBps", "fetch_MBps"):
            out[name][key] = stats(out[name][key])
    for key in ("produce_MBps", "fetch_MBps"):
        out[f"{key}_ratio"] = out["kafka_100KiB"][key]["median"] / out["os_default"][key]["median"]
    return out


# In this order: start-up, fixtures and latency first, before the page-cache warm-up and the
# throughput runs free gigabytes; on these VMs freed memory is handed back to the host (free page
# reporting) and the next page faults on it stall for tens to hundreds of ms, which is the
# hypervisor's latency, not the broker's.
WORKLOADS = {
    "startup": bench_startup,
    "first_use": bench_first_use,
    "fixture": bench_fixture,
    "latency": bench_latency,
    "produce_raw": bench_produce_raw,
    "fetch_raw": bench_fetch_raw,
    "produce_kcat": bench_produce_kcat,
    "record_layer": bench_record_layer,
    "produce_clients": bench_produce_clients,
    "fetch_clients": bench_fetch_clients,
    "scaling": bench_scaling,
    "hostile": bench_hostile,
    "socket_buffers": bench_socket_buffers,
}


# ------------------------------------------------------------------------------------------------
# report


def warm_page_cache(opts) -> None:
    """Write and delete a few GB once, so every figure meets memory the VM has already backed.

    On these VMs the first touch of fresh memory runs at 0.4-0.9 GB/s against ~4 GB/s for memory
    touched before; without this, whichever side of a ratio writes first pays for it."""
    size = (1 << 30) if opts.quick else (4 << 30)
    chunk = bytes(8 << 20)
    with tempfile.NamedTemporaryFile(dir=tempfile.gettempdir()) as f:
        for _ in range(size // len(chunk)):
            f.write(chunk)
        f.flush()
    os.sync()  # let writeback finish before anything is timed
    time.sleep(1)


def versions() -> dict:
    out = {"python": platform.python_version()}
    for mod in ("minibroker", "confluent_kafka", "kafka", "aiokafka", "uvloop"):
        try:
            m = __import__(mod)
            out[mod] = getattr(m, "__version__", "?")
        except ImportError:
            out[mod] = "absent"
    try:
        import confluent_kafka

        out["librdkafka"] = confluent_kafka.libversion()[0]
    except ImportError:
        pass
    return out


def machine() -> str:
    cpu = "?"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return f"{os.cpu_count()} cores, {cpu}, {platform.system()} {platform.release()}"


def markdown(results: dict, opts) -> str:
    lines = [
        f"## {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} ({'quick' if opts.quick else 'full'}, "
        f"loop={opts.loop}, reps={opts.reps})",
        "",
        f"Machine: {machine()}. Versions: " + ", ".join(f"{k} {v}" for k, v in versions().items()),
        "",
        "| figure | value | baseline (same run) | ratio | goal |",
        "|---|---|---|---|---|",
    ]

    def row(name, value, baseline, ratio, goal):
        lines.append(f"| {name} | {value} | {baseline} | {ratio} | {goal} |")

    r = results
    if "produce_raw" in r:
        for key, v in r["produce_raw"].items():
            goal = ">= 0.80 of ceiling" if key.startswith("1024B") else ">= 1M records/s"
            row(
                f"produce, raw frames, {key} records",
                f"{v['broker_MBps']['median']:.0f} MB/s "
                f"({v['broker_MBps']['min']:.0f}-{v['broker_MBps']['max']:.0f}), "
                f"{v['records_per_s'] / 1e6:.2f}M rec/s",
                f"append ceiling {v['ceiling_MBps']['median']:.0f} MB/s",
                f"{v['ratio']:.2f}",
                goal,
            )
            row(
                f"broker CPU per 1M {key} records (raw)",
                f"{v['cpu_s_per_million_records']:.2f} s",
                "",
                "",
                "",
            )
    if "fetch_raw" in r:
        v = r["fetch_raw"]
        row(
            "fetch, raw Fetch v4, 1 MiB responses",
            f"{v['broker_MBps']['median']:.0f} MB/s",
            f"sendfile ceiling {v['ceiling_MBps']['median']:.0f} MB/s",
            f"{v['ratio']:.2f}",
            ">= 0.50 of ceiling",
        )
    if "startup" in r:
        v = r["startup"]
        floor_ms = f"event-loop floor {v['loop_floor_ms']['median']:.0f} ms"
        floor_mb = f"event-loop floor {v['loop_floor_rss_MB']['median']:.1f} MB"
        row(
            "startup, plaintext, default config: process start to accepting",
            f"{v['startup_ms']['median']:.0f} ms ({v['startup_ms']['min']:.0f}-{v['startup_ms']['max']:.0f})",
            f"{floor_ms}; bare python listen {v['python_baseline_ms']['median']:.0f} ms",
            f"{v['ratio_to_floor']:.2f}x floor (median of paired starts "
            f"{v.get('paired_ratio_to_floor', float('nan')):.2f}x)",
            "<= 1.25x floor",
        )
        row("idle RSS, plaintext, default config", f"{v['idle_rss_MB']['median']:.1f} MB", floor_mb,
            f"+{v['rss_over_floor_MB']:.1f} MB", "<= floor + 2 MB")
        row("startup, with a SASL_SSL listener",
            f"{v['loaded_startup_ms']['median']:.0f} ms ({v['loaded_startup_ms']['min']:.0f}-"
            f"{v['loaded_startup_ms']['max']:.0f})", floor_ms, f"{v['loaded_ratio_to_floor']:.2f}x floor",
            "reported")
        row("RSS, SASL_SSL listener, a transaction committed and a share group consumed over it",
            f"{v['loaded_rss_MB']['median']:.1f} MB", floor_mb, f"+{v['loaded_rss_over_floor_MB']:.1f} MB",
            "reported")
    if "first_use" in r:
        v = r["first_use"]
        q = v["quiet_produce_ms"]
        for name, what in (("transactional", "first transactional request (InitProducerId)"),
                           ("share", "first share request (ShareGroupHeartbeat)")):
            w = v[name]
            row(f"another client's produce latency while the {what} loads its subsystem",
                f"worst {w['worst_produce_ms']['median']:.1f} ms (of {w['worst_produce_ms']['n']} runs: "
                f"{w['worst_produce_ms']['min']:.1f}-{w['worst_produce_ms']['max']:.1f})",
                f"quiet p50 {q['p50']:.2f} ms, p99 {q['p99']:.2f} ms, max {q['max']:.1f} ms",
                f"the request itself {w['request_ms']['median']:.0f} ms; its imports on the loop would "
                f"hold {w['import_on_loop_would_hold_ms']:.0f} ms", "no stall beyond quiet max")
    if "fixture" in r:
        v = r["fixture"]
        row(
            "pytest fixture start, in-process", f"{v['thread_start_ms']['median']:.0f} ms", "", "", "< 150 ms"
        )
        row(
            "pytest fixture start, subprocess",
            f"{v['process_start_ms']['median']:.0f} ms",
            "",
            "",
            "< 400 ms",
        )
        row("fixture subprocess idle RSS", f"{v['idle_rss_MB']['median']:.1f} MB", "", "", "< 40 MB")

    def kafka_ceiling(v: dict) -> tuple[str, str]:
        """(baseline, ratio) cells for a client run beside the Kafka-shaped append ceiling."""
        if "ratio" not in v:
            return "", ""
        rate = v["ceiling_records_per_s"]["median"]
        return f"same client to Kafka-shaped append ceiling {rate / 1e3:.0f}k rec/s", f"{v['ratio']:.2f}"

    for key, v in r.get("produce_kcat", {}).items():
        if key == "skipped":
            continue
        row(
            f"produce kcat {key} records, 1 partition",
            f"{v['records_per_s']['median'] / 1e3:.0f}k rec/s, "
            f"{v['MBps']:.0f} MB/s, CPU {v['cpu_s_per_million_records']:.2f} s/1M"
            + (
                f" (ceiling {v['ceiling_cpu_s_per_million_records']:.2f})"
                if "ceiling_cpu_s_per_million_records" in v
                else ""
            ),
            *kafka_ceiling(v),
            ">= 0.80 of ceiling" if key == "1024B" else ">= 1M records/s",
        )
    for key, v in r.get("record_layer", {}).items():
        if key == "skipped":
            continue
        ref = v["ref"]
        unpacks = v["reference_server"].startswith("kafka-decompress")
        what = "decompress+append" if unpacks else "receive+append"
        for path in ("c", "python"):
            f = v[path]
            row(
                f"kcat {key} records, record layer: {'C accelerator' if path == 'c' else 'pure Python'}",
                f"{f['records_per_s']['median'] / 1e6:.2f}M rec/s, "
                f"CPU {f['cpu_s_per_GB']['median']:.2f} s/GB ({f['cpu_s_per_million_records']:.2f} s/1M)",
                f"{what} reference: {ref['records_per_s']['median'] / 1e6:.2f}M rec/s, "
                f"CPU {ref['cpu_s_per_GB']['median']:.2f} s/GB",
                f"CPU {f['cpu_ratio']:.2f}, rate {f['rate_ratio']:.2f}",
                ("CPU <= 0.5x" if key == "1024B" else ">= 3M rec/s" if key == "100B" else "")
                if path == "c"
                else "",
            )
    for key, v in r.get("produce_clients", {}).items():
        mbps = v.get("MBps")
        goal = (
            ">= 0.80 of ceiling"
            if "1p-1024B-acks1-none" in key
            else (">= 1M records/s" if "100B" in key and "kafka-python" not in key else "")
        )
        extra = (
            f", CPU {v['cpu_s_per_million_records']:.2f} s/1M, RSS {v['rss_under_load_MB']:.0f} MB"
            if "cpu_s_per_million_records" in v
            else ""
        )
        row(
            f"produce {key}",
            f"{v['records_per_s']['median'] / 1e3:.0f}k rec/s"
            + (f", {mbps:.0f} MB/s" if mbps else "")
            + extra,
            *kafka_ceiling(v),
            goal,
        )
    for key, v in r.get("fetch_clients", {}).items():
        row(
            f"fetch {key}",
            f"{v['records_per_s']['median'] / 1e3:.0f}k rec/s, {v['MBps']:.0f} MB/s",
            "",
            "",
            "",
        )
    if r.get("latency"):
        v = r["latency"]
        row(
            f"end-to-end latency at {v['rate_per_s']} rec/s",
            f"p50 {v['p50_ms']:.2f} ms, p99 {v['p99_ms']:.2f} ms"
            + (
                f" (runs: {', '.join(f'{x:.1f}' for x in v['p99_ms_runs'])}), worst {v['max_ms']:.0f} ms"
                if "p99_ms_runs" in v
                else ""
            ),
            "",
            "",
            "p99 < 10 ms",
        )
    if "hostile" in r:
        v = r["hostile"]
        for phase in ("before", "during"):
            label = "alone" if phase == "before" else f"beside {v['connections']} stalled 100 MiB prefixes"
            for what, name in (("api_versions", "ApiVersions"), ("produce", "Produce 1 KiB, acks=1")):
                x = v[phase][what]
                row(
                    f"hostile: {name}, {label}",
                    f"p50 {x['p50_ms']:.2f} ms, p99 {x['p99_ms']:.2f} ms, max {x['max_ms']:.1f} ms",
                    "",
                    "",
                    "within 50 ms" if phase == "during" else "",
                )
        row(
            f"hostile: broker RSS with {v['connections']} connections stalled after a 100 MiB size prefix",
            f"{v['rss_stalled_MB']:.1f} MB (peak {v['peak_rss_MB']:.1f} MB)",
            f"idle {v['idle_rss_MB']:.1f} MB; after the baseline requests {v['rss_before_MB']:.1f} MB",
            f"{v['rss_stalled_MB'] / v['idle_rss_MB']:.2f}",
            "< 150 MB",
        )
        for name, label in (("no_pool", "no bound"), ("pool_200MiB", "queued.max.request.bytes=200 MiB")):
            x = v[f"partial_{name}"]
            row(
                f"hostile: RSS, {v['connections']} connections stalled after a prefix and 64 KiB, {label}",
                f"{x['rss_MB']:.1f} MB (peak {x['peak_rss_MB']:.1f} MB); ApiVersions p99 "
                f"{x['api_versions']['p99_ms']:.2f} ms",
                f"idle {x['idle_rss_MB']:.1f} MB",
                f"{x['rss_MB'] / x['idle_rss_MB']:.2f}",
                "",
            )
    if "socket_buffers" in r:
        v = r["socket_buffers"]
        for key, label in (("produce_MBps", "produce, raw ~1 MiB frames"), ("fetch_MBps", "fetch, 1 MiB")):
            row(
                f"socket buffers at Kafka's 100 KiB: {label}",
                f"{v['kafka_100KiB'][key]['median']:.0f} MB/s "
                f"({v['kafka_100KiB'][key]['min']:.0f}-{v['kafka_100KiB'][key]['max']:.0f})",
                f"OS default (-1) {v['os_default'][key]['median']:.0f} MB/s "
                f"({v['os_default'][key]['min']:.0f}-{v['os_default'][key]['max']:.0f})",
                f"{v[key + '_ratio']:.2f}",
                "",
            )
    if "scaling" in r:
        s = r["scaling"]
        for what, label in (
            ("partitions", "partitions, 5 requests in flight"),
            ("connections", "connections, 1 in flight each"),
        ):
            for k, v in s[what].items():
                row(
                    f"scaling: {k} {label} (raw)",
                    f"{v['MBps']:.0f} MB/s, request p50 {v['p50_ms']:.2f} ms, p99 {v['p99_ms']:.2f} ms",
                    "",
                    "",
                    "",
                )
        for k, v in s["lookup"].items():
            row(
                f"lookup in a {k}-batch log",
                f"{v['us_per_lookup']:.1f} us ({v['segments']} segments)",
                "",
                "",
                "logarithmic",
            )
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "_gen":
        _generator_main(argv[1:])
        return 0
    if argv and argv[0] == "_ceiling":
        _ceiling_main(*argv[1:4])
        return 0
    ap = argparse.ArgumentParser(
        description="minibroker benchmarks (ratios to ceilings measured in the same run)"
    )
    ap.add_argument("--quick", action="store_true", help="a small set that finishes in under a minute")
    ap.add_argument("--only", help="comma-separated workloads: " + ",".join(WORKLOADS))
    ap.add_argument("--reps", type=int, default=None, help="repetitions per figure (default 3, quick 1)")
    ap.add_argument("--scale", type=float, default=None, help="size multiplier (default 1, quick 0.05)")
    ap.add_argument(
        "--loop", choices=("auto", "asyncio", "uvloop"), default="auto", help="the broker's event loop"
    )
    ap.add_argument("--no-write", action="store_true", help="print only; do not append to docs/benchmarks.md")
    opts = ap.parse_args(argv)
    # an installed package has its bytecode compiled; a source checkout may not (PYTHONDONTWRITEBYTECODE)
    subprocess.run(
        [sys.executable, "-m", "compileall", "-q", os.path.join(ROOT, "minibroker")],
        env=bench_env(),
        stdout=subprocess.DEVNULL,
        check=False,
    )
    opts.reps = opts.reps or (1 if opts.quick else 3)
    opts.scale = opts.scale or (0.05 if opts.quick else 1.0)
    names = (
        opts.only.split(",")
        if opts.only
        else (
            ["startup", "first_use", "fixture", "latency", "produce_raw", "fetch_raw", "produce_kcat"]
            if opts.quick
            else list(WORKLOADS)
        )
    )
    results = {}
    warmed = False
    for name in names:
        if name not in ("startup", "first_use", "fixture", "latency") and not warmed:  # see WORKLOADS
            warm_page_cache(opts)
            warmed = True
        t0 = time.perf_counter()
        results[name] = WORKLOADS[name](opts)
        print(
            f"{name}: {time.perf_counter() - t0:.1f} s {json.dumps(results[name], default=str)[:400]}",
            file=sys.stderr,
        )
    text = markdown(results, opts)
    print(text)
    if not opts.no_write:
        docs = os.path.join(ROOT, "docs")
        os.makedirs(os.path.join(docs, "benchmarks"), exist_ok=True)
        stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime())
        with open(os.path.join(docs, "benchmarks", f"{stamp}.json"), "w") as f:
            json.dump(
                {"opts": vars(opts), "machine": machine(), "versions": versions(), "results": results},
                f,
                indent=1,
                default=str,
            )
        path = os.path.join(docs, "benchmarks.md")
        if not os.path.exists(path):
            with open(path, "w") as f:
                f.write(
                    "# Benchmarks\n\nAppended by `python scripts/bench.py`; each figure beside a baseline "
                    "measured in the same run (these machines are shared and noisy). Raw JSON in "
                    "docs/benchmarks/.\n\n"
                )
        with open(path, "a") as f:
            f.write("\n" + text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
