#!/usr/bin/env python3
"""TLS listener benchmark (issue 19): produce and fetch over SSL against a TLS ceiling measured in the
same run, beside the same workloads over PLAINTEXT against the plain ceilings.

    python scripts/bench_tls.py                # full: 256 MiB each way, 3 repetitions
    python scripts/bench_tls.py --quick        # 32 MiB, 1 repetition, well under a minute
    python scripts/bench_tls.py --out /tmp/tls.json

One ``minibroker serve`` (``--loop``, uvloop by default) with a PLAINTEXT and an SSL listener (certificates
from ``minibroker certs``: ECDSA P-256, TLS 1.3, OpenSSL's default suite, AES-256-GCM here).

- produce: ~1 MiB Produce v9 frames (960 records of 1 KiB), 5 in flight, on one connection;
- fetch: the log read back with Fetch v4, 1 MiB per request, one request at a time.

The plain ceilings are bench.py's, on the asyncio loop as there: a server that appends each frame to a
file and answers 16 bytes, and one answering each request with that many bytes of the log through
``loop.sendfile``. The TLS ceilings run on the broker's loop behind the SSLContext the broker's SSL listener
gets from the same keys (minibroker/security/tls.py): the same append server, and for fetch a server that
reads each answer's bytes in 64 KiB ``pread``s and writes them through the TLS transport, as the broker
does, without waiting for the transport to drain. The client is the same for all four (asyncio for
produce, a blocking socket for fetch) and runs in its own process.

Each figure is MB/s of request (produce) or response (fetch) bytes; each ratio is the broker's over its
ceiling's within one repetition (the machine's speed drifts between them), the median over ``--reps``.
Results: a summary on stdout and JSON with ``--out``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import ssl
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)
sys.path.insert(0, HERE)

import bench  # noqa: E402  (free_port, wait_port, create_topic, produce_frames, ceilings, versions, machine)

from minibroker.protocol import codec  # noqa: E402
from minibroker.records import Compression  # noqa: E402

FRAME_RECORDS, RECORD_SIZE = 960, 1024
FETCH_CHUNK = 1 << 20


def server_context(certs: dict) -> ssl.SSLContext:
    """The SSLContext the broker's SSL listener gets from these keys (minibroker/security/tls.py)."""
    from minibroker.config import load_config
    from minibroker.security.tls import listener_tls

    config = load_config(None, ["listeners=SSL://127.0.0.1:0",
                                f"ssl.keystore.location={certs['broker_keystore']}"], {})
    return listener_tls(config)["SSL"].context


def client_context(certs: dict) -> ssl.SSLContext:
    return ssl.create_default_context(cafile=certs["ca"])


# -- the ceilings, in their own process -----------------------------------------------------------


def _ceiling_main(kind: str, port: int, path: str, certs_dir: str, loop: str) -> None:
    """``kind``: append, append-tls, sendfile or read-tls; serves until SIGTERM."""
    import signal

    if kind.endswith("-tls") and loop != "asyncio":  # the plain ceilings run on asyncio, as bench.py's
        try:
            import uvloop

            asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
        except ImportError:
            pass
    context = server_context(_cert_paths(certs_dir)) if kind.endswith("-tls") else None
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *a: stop.set())

    async def main():
        loop = asyncio.get_running_loop()
        if kind.startswith("append"):
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
            factory = lambda: bench._AppendCeiling(fd)  # noqa: E731
        elif kind == "sendfile":
            f = open(path, "rb")  # noqa: SIM115, ASYNC230 - opened before serving, kept while it serves
            factory = lambda: bench._SendfileCeiling(f)  # noqa: E731
        else:
            fd = os.open(path, os.O_RDONLY)
            factory = lambda: _ReadCeiling(fd)  # noqa: E731
        server = await loop.create_server(factory, "127.0.0.1", port, ssl=context)
        await asyncio.to_thread(stop.wait)
        server.close()

    asyncio.run(main())


class _ReadCeiling(bench._SendfileCeiling):
    """The fetch ceiling over TLS: each answer's bytes read from the file in 64 KiB ``pread``s and written
    through the transport (uvloop has no ``loop.sendfile``, and over TLS asyncio's reads and writes too)."""

    def __init__(self, fd: int):
        super().__init__(None)
        self.fd = fd

    async def _serve(self):
        while True:
            corr, offset, want = await self.queue.get()
            self.transport.write(struct.pack(">ii", want + 4, corr))
            for start in range(offset, offset + want, 1 << 16):  # TLS records pipelined with the sends
                self.transport.write(os.pread(self.fd, min(1 << 16, offset + want - start), start))


def _cert_paths(directory: str) -> dict:
    from minibroker.tools.certs import generate_test_certs

    names = {"ca": "ca.pem", "broker_keystore": "broker.pem"}
    paths = {k: os.path.join(directory, v) for k, v in names.items()}
    if not all(os.path.exists(p) for p in paths.values()):
        paths = generate_test_certs(directory)
    return paths


class Ceiling:
    def __init__(self, kind: str, path: str, certs_dir: str, loop: str):
        self.port = bench.free_port()
        self.cmd = [sys.executable, __file__, "_ceiling", kind, str(self.port), path, certs_dir, loop]

    def __enter__(self):
        self.proc = subprocess.Popen(self.cmd)
        bench.wait_port(self.port)
        return self

    def __exit__(self, *exc):
        self.proc.terminate()
        self.proc.wait(10)


# -- the clients, in their own process ------------------------------------------------------------


async def _produce(port: int, frames: list[bytes], count: int, window: int, context) -> float:
    reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=context,
                                                   server_hostname="localhost" if context else None)
    answered = 0
    in_flight = asyncio.Semaphore(window)

    async def read_answers():
        nonlocal answered
        while answered < count:
            size = struct.unpack(">i", await reader.readexactly(4))[0]
            await reader.readexactly(size)
            answered += 1
            in_flight.release()

    t0 = time.perf_counter()
    answers = asyncio.ensure_future(read_answers())
    for i in range(count):
        await in_flight.acquire()
        writer.write(frames[i % len(frames)])
        await writer.drain()
    await answers
    elapsed = time.perf_counter() - t0
    writer.close()
    return elapsed


def _fetch_broker(port: int, topic: str, total_records: int, context) -> tuple[float, int]:
    """Fetch v4 from offset 0 to ``total_records``, one request at a time, as bench.py's raw fetch."""
    import socket

    sock = socket.create_connection(("127.0.0.1", port))
    if context is not None:
        sock = context.wrap_socket(sock, server_hostname="localhost")

    def read(n: int) -> bytes:
        buf = bytearray()
        while len(buf) < n:
            chunk = sock.recv(n - len(buf))
            if not chunk:
                raise ConnectionError("closed")
            buf += chunk
        return bytes(buf)

    offset, got = 0, 0
    t0 = time.perf_counter()
    while offset < total_records:
        sock.sendall(codec.encode_request(1, 4, 1, {
            "replica_id": -1, "max_wait_ms": 0, "min_bytes": 0, "max_bytes": FETCH_CHUNK,
            "isolation_level": 0,
            "topics": [{"topic": topic, "partitions": [
                {"partition": 0, "fetch_offset": offset, "partition_max_bytes": FETCH_CHUNK}]}]}))
        size = struct.unpack(">i", read(4))[0]
        data = read(size)
        got += size
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
    elapsed = time.perf_counter() - t0
    sock.close()
    return elapsed, got


def _fetch_ceiling(port: int, total: int, context) -> float:
    import socket

    sock = socket.create_connection(("127.0.0.1", port))
    if context is not None:
        sock = context.wrap_socket(sock, server_hostname="localhost")
    t0 = time.perf_counter()
    for frame in bench.fetch_frames_ceiling(total, FETCH_CHUNK):
        sock.sendall(frame)
        header = b""
        while len(header) < 4:
            header += sock.recv(4 - len(header))
        remaining = struct.unpack(">i", header)[0]
        while remaining:
            chunk = sock.recv(min(remaining, 1 << 20))
            if not chunk:
                raise ConnectionError("closed")
            remaining -= len(chunk)
    elapsed = time.perf_counter() - t0
    sock.close()
    return elapsed


def _client_main(args: list[str]) -> None:
    """``_client produce|fetch-broker|fetch-ceiling PORT ARG TLS CERTS_DIR [FRAMEFILE]``: prints JSON."""
    what, port, arg, tls, certs_dir = args[0], int(args[1]), int(args[2]), args[3] == "1", args[4]
    context = client_context(_cert_paths(certs_dir)) if tls else None
    if what == "produce":
        with open(args[5], "rb") as f:
            blob = f.read()
        frames = [blob[start - 4:end] for start, end in bench.frame_bounds(blob)[0]]
        elapsed = asyncio.run(_produce(port, frames, arg, 5, context))
        sent = sum(len(frames[i % len(frames)]) for i in range(arg))
        print(json.dumps({"elapsed": elapsed, "bytes": sent}))
    elif what == "fetch-broker":
        elapsed, got = _fetch_broker(port, "tls", arg, context)
        print(json.dumps({"elapsed": elapsed, "bytes": got}))
    else:
        print(json.dumps({"elapsed": _fetch_ceiling(port, arg, context), "bytes": arg}))


def client(*args) -> dict:
    out = subprocess.run([sys.executable, __file__, "_client", *map(str, args)], capture_output=True,
                         text=True, timeout=900)
    if out.returncode:
        raise RuntimeError(out.stderr)
    result = json.loads(out.stdout)
    return {"MBps": result["bytes"] / result["elapsed"] / 1e6, **result}


# -- the run --------------------------------------------------------------------------------------


def run_once(opts, certs_dir: str, frame_file: str, count: int) -> dict:
    certs = _cert_paths(certs_dir)
    out = {}
    ssl_port = bench.free_port()
    overrides = {
        "listeners": f"PLAINTEXT://127.0.0.1:{{port}},SSL://127.0.0.1:{ssl_port}",
        "ssl.keystore.location": certs["broker_keystore"],
        "log.segment.bytes": str(1 << 30),
    }
    broker = bench.BrokerProcess(loop=opts.loop)
    broker.overrides.update({k: v.format(port=broker.port) for k, v in overrides.items()})
    with broker:
        bench.wait_port(ssl_port)
        bench.create_topic(broker.port, "tls")
        out["produce_plain"] = client("produce", broker.port, count, 0, certs_dir, frame_file)
        out["produce_tls"] = client("produce", ssl_port, count, 1, certs_dir, frame_file)
        records = 2 * count * FRAME_RECORDS
        out["fetch_plain"] = client("fetch-broker", broker.port, records, 0, certs_dir)
        out["fetch_tls"] = client("fetch-broker", ssl_port, records, 1, certs_dir)
        log_path = os.path.join(broker.dir, "tls-0", "00000000000000000000.log")
        log_copy = os.path.join(certs_dir, "fetch.log")
        shutil.copyfile(log_path, log_copy)
    size = os.path.getsize(log_copy)
    for kind, tls in (("append", False), ("append-tls", True)):
        with tempfile.TemporaryDirectory() as d:
            with Ceiling(kind, os.path.join(d, "c.log"), certs_dir, opts.loop) as c:
                key = "produce_ceiling_tls" if tls else "produce_ceiling"
                out[key] = client("produce", c.port, count, int(tls), certs_dir, frame_file)
    for kind, tls in (("sendfile", False), ("read-tls", True)):
        with Ceiling(kind, log_copy, certs_dir, opts.loop) as c:
            key = "fetch_ceiling_tls" if tls else "fetch_ceiling"
            out[key] = client("fetch-ceiling", c.port, size, int(tls), certs_dir)
    os.unlink(log_copy)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="32 MiB each way, one repetition")
    ap.add_argument("--reps", type=int, default=None)
    ap.add_argument("--mib", type=int, default=None, help="MiB produced (and fetched) per repetition")
    ap.add_argument("--loop", choices=("auto", "asyncio", "uvloop"), default="auto")
    ap.add_argument("--out", help="write the results as JSON here")
    opts = ap.parse_args(argv)
    reps = opts.reps or (1 if opts.quick else 3)
    mib = opts.mib or (32 if opts.quick else 256)
    frames = bench.produce_frames("tls", 1, RECORD_SIZE, FRAME_RECORDS, Compression.NONE)
    count = max(8, mib * (1 << 20) // len(frames[0]))
    runs = []
    with tempfile.TemporaryDirectory(prefix="mb-bench-tls-") as d:
        frame_file = os.path.join(d, "frames")
        with open(frame_file, "wb") as f:
            f.write(b"".join(frames))
        for _ in range(reps):
            runs.append(run_once(opts, d, frame_file, count))
    med = {k: statistics.median(r[k]["MBps"] for r in runs) for k in runs[0]}

    def ratio(a: str, b: str) -> float:  # within each repetition, then the median
        return statistics.median(r[a]["MBps"] / r[b]["MBps"] for r in runs)

    results = {
        "when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "quick": opts.quick, "reps": reps,
        "mib": mib, "loop": opts.loop, "machine": bench.machine(), "versions": bench.versions(),
        "ssl": ssl.OPENSSL_VERSION, "median_MBps": med,
        "ratios": {
            "produce_tls_vs_tls_ceiling": ratio("produce_tls", "produce_ceiling_tls"),
            "produce_plain_vs_plain_ceiling": ratio("produce_plain", "produce_ceiling"),
            "fetch_tls_vs_tls_ceiling": ratio("fetch_tls", "fetch_ceiling_tls"),
            "fetch_plain_vs_plain_ceiling": ratio("fetch_plain", "fetch_ceiling"),
            "produce_tls_vs_plain": ratio("produce_tls", "produce_plain"),
            "fetch_tls_vs_plain": ratio("fetch_tls", "fetch_plain"),
        },
        "runs": runs,
    }
    for name in ("produce", "fetch"):
        tls_ratio = results["ratios"][name + "_tls_vs_tls_ceiling"]
        print(f"{name:8} broker SSL {med[name + '_tls']:7.0f} MB/s, TLS ceiling "
              f"{med[name + '_ceiling_tls']:7.0f} MB/s: {tls_ratio:.2f} "
              "| broker PLAINTEXT "
              f"{med[name + '_plain']:7.0f} MB/s, ceiling {med[name + '_ceiling']:7.0f} MB/s: "
              f"{results['ratios'][name + '_plain_vs_plain_ceiling']:.2f}")
    if opts.out:
        with open(opts.out, "w") as f:
            json.dump(results, f, indent=1, default=str)
    return 0


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "_ceiling":
        _ceiling_main(sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5], sys.argv[6])
    elif len(sys.argv) > 1 and sys.argv[1] == "_client":
        _client_main(sys.argv[2:])
    else:
        sys.exit(main())
