#!/usr/bin/env python3
"""Decompression bombs against the broker: what they cost the other clients (issue 14, item 2).

One steady client (its own process, one connection) produces one small record per request at a
fixed rate and measures each request's latency, send to whole answer. It runs twice against the
same broker: alone, then while 4 other connections send decompression bombs in a loop (each its
own codec: gzip, snappy, lz4, zstd; each waits for the answer to its bomb before sending the next,
``--inflight`` for more). Its p50/p99/max with bombs are set against its own figures without, in
the same run; the broker's RSS (and its peak, VmHWM) and CPU are read from /proc.

Bomb shapes (``--shapes``; built by tests/fuzzing/bombs.py), each against a fresh broker:

- ``one-record``: 200 MiB of zeros as one record (snappy, which cannot expand more than ~22 times:
  20 MiB, ~1 MB compressed, what max.message.bytes lets through); a few KB compressed otherwise;
- ``many-records``: the same zeros as 1 MiB records, each one a record the topic takes: a batch that
  is valid, so it is decompressed and walked to the end (in the worker thread) and stored;
- ``walk``: as many empty records (7-9 bytes, offsets 0..n-1) as fit in 900 KB compressed: from
  ~230,000 (lz4, snappy) to ~1.2 million (zstd); the record walk is the work, in the worker;
- ``rebuild``: 4 Mi identical empty records whose offsets are not 0..n-1 (a few KB compressed): the
  batch is rebuilt record by record (Kafka's rules), seconds of Python in the worker per bomb.

    python scripts/bench_bombs.py [--seconds 10] [--rate 200] [--shapes one-record,many-records]
                                  [--tree PATH]   # the broker from another checkout (before/after)
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import struct
import subprocess
import sys
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "tests"))  # the fuzzer: tests/fuzzing, not part of the package
sys.path.insert(0, os.path.join(ROOT, "scripts"))

from minibroker.protocol import codec  # noqa: E402
from minibroker.records import build_records  # noqa: E402

from fuzzing.bombs import CODECS, build_bomb  # noqa: E402

CODES = {
    0: "ok",
    2: "CORRUPT_MESSAGE",
    10: "MESSAGE_TOO_LARGE",
    18: "RECORD_LIST_TOO_LARGE",
    87: "INVALID_RECORD",
}


def produce_frame(topic: str, partition: int, records: bytes, correlation: int = 1) -> bytes:
    body = {
        "transactional_id": None,
        "acks": 1,
        "timeout_ms": 30000,
        "topic_data": [{"name": topic, "partition_data": [{"index": partition, "records": records}]}],
    }
    return codec.encode_request(0, 9, correlation, body, "bench-bombs")


def read_frame(sock: socket.socket) -> bytes:
    head = b""
    while len(head) < 4:
        chunk = sock.recv(4 - len(head))
        if not chunk:
            raise ConnectionError("closed")
        head += chunk
    n = struct.unpack(">i", head)[0]
    parts, got = [], 0
    while got < n:
        chunk = sock.recv(min(n - got, 1 << 16))
        if not chunk:
            raise ConnectionError("closed")
        parts.append(chunk)
        got += len(chunk)
    return b"".join(parts)


def produce_error_code(frame: bytes) -> int:
    _, response = codec.decode_response(0, 9, frame)
    return response.responses[0].partition_responses[0].error_code


class Bomber(threading.Thread):
    """One connection sending the same bomb in a loop, ``inflight`` at a time."""

    def __init__(self, port: int, frame: bytes, inflight: int):
        super().__init__(daemon=True)
        self.port, self.frame, self.inflight = port, frame, inflight
        self.stop = threading.Event()
        self.codes: dict[int, int] = {}
        self.latencies: list[float] = []
        self.error: str | None = None

    def run(self) -> None:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=120) as sock:
                sent = []
                while not self.stop.is_set():
                    while len(sent) < self.inflight:
                        sent.append(time.perf_counter())
                        sock.sendall(self.frame)
                    code = produce_error_code(read_frame(sock))
                    self.latencies.append(time.perf_counter() - sent.pop(0))
                    self.codes[code] = self.codes.get(code, 0) + 1
                for _ in sent:
                    read_frame(sock)
        except Exception as e:  # reported, not raised: the figures of the others still stand
            self.error = f"{type(e).__name__}: {e}"


# ------------------------------------------------------------------------------------------------ steady


def steady_main(port: int, seconds: float, rate: float) -> None:
    """Child process: one small record per request at ``rate`` requests/s; prints latencies (JSON)."""
    value = os.urandom(50).hex().encode()
    frames = [
        produce_frame("steady", 0, build_records(2, [(0, int(time.time() * 1000), None, value, ())]), i)
        for i in range(64)
    ]
    out = []
    with socket.create_connection(("127.0.0.1", port), timeout=120) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        for frame in frames[:20]:  # warm-up
            sock.sendall(frame)
            read_frame(sock)
        interval = 1.0 / rate
        start = time.perf_counter()
        i = 0
        while time.perf_counter() - start < seconds:
            due = start + i * interval
            now = time.perf_counter()
            if due > now:
                time.sleep(due - now)
            t0 = time.perf_counter()
            sock.sendall(frames[i % len(frames)])
            code = produce_error_code(read_frame(sock))
            out.append((time.perf_counter() - t0, code))
            i += 1
    json.dump({"latencies": [t for t, _ in out], "errors": sum(1 for _, c in out if c)}, sys.stdout)


def run_steady(port: int, seconds: float, rate: float) -> dict:
    proc = subprocess.run(
        [sys.executable, os.path.abspath(__file__), "--steady", str(port), str(seconds), str(rate)],
        capture_output=True,
        check=True,
        text=True,
        cwd=ROOT,
    )
    data = json.loads(proc.stdout)
    lat = sorted(data["latencies"])
    return {
        "requests": len(lat),
        "errors": data["errors"],
        "p50_ms": pct(lat, 0.50),
        "p99_ms": pct(lat, 0.99),
        "max_ms": lat[-1] * 1000,
    }


def pct(sorted_values: list[float], q: float) -> float:
    return sorted_values[min(len(sorted_values) - 1, int(q * len(sorted_values)))] * 1000


# ------------------------------------------------------------------------------------------------ broker


def proc_status_mb(pid: int, field: str) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    raise KeyError(field)


def proc_cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def start_broker(tree: str, loop: str):
    import bench  # scripts/bench.py: BrokerProcess, create_topic

    bench.ROOT = tree  # ``python -m minibroker`` from that checkout
    broker = bench.BrokerProcess(loop=loop).start()
    bench.create_topic(broker.port, "steady")
    bench.create_topic(broker.port, "bombs", partitions=len(CODECS))
    return broker


def run_shape(opts, shape: str, bombs: dict) -> dict:
    broker = start_broker(opts.tree, opts.loop)
    try:
        pid = broker.proc.pid
        time.sleep(0.5)
        out: dict = {"shape": shape, "bomb_bytes": {str(c): len(b) for c, b in bombs.items()}}
        out["idle_rss_MB"] = proc_status_mb(pid, "VmRSS")
        out["alone"] = run_steady(broker.port, opts.seconds, opts.rate)
        out["rss_alone_MB"] = proc_status_mb(pid, "VmRSS")
        out["peak_rss_alone_MB"] = proc_status_mb(pid, "VmHWM")
        bombers = [
            Bomber(broker.port, produce_frame("bombs", p, bombs[c]), opts.inflight)
            for p, c in enumerate(CODECS)
        ]
        cpu0 = proc_cpu_seconds(pid)
        t0 = time.perf_counter()
        for b in bombers:
            b.start()
        time.sleep(0.5)  # every bomber has a bomb in
        rss_samples = []
        sampler_stop = threading.Event()

        def sample():
            while not sampler_stop.wait(0.2):
                rss_samples.append(proc_status_mb(pid, "VmRSS"))

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        out["with_bombs"] = run_steady(broker.port, opts.seconds, opts.rate)
        sampler_stop.set()
        for b in bombers:
            b.stop.set()
        for b in bombers:
            b.join(300)
        elapsed = time.perf_counter() - t0
        out["broker_cpu_s_with_bombs"] = proc_cpu_seconds(pid) - cpu0
        out["bombs_elapsed_s"] = elapsed
        out["rss_with_bombs_max_sampled_MB"] = max(rss_samples) if rss_samples else None
        out["peak_rss_MB"] = proc_status_mb(pid, "VmHWM")
        out["bombs"] = {
            str(c): {
                "answers": {CODES.get(k, str(k)): v for k, v in b.codes.items()},
                "answer_p50_ms": pct(sorted(b.latencies), 0.5) if b.latencies else None,
                "answer_max_ms": max(b.latencies) * 1000 if b.latencies else None,
                "error": b.error,
            }
            for c, b in zip(CODECS, bombers, strict=True)
        }
        return out
    finally:
        broker.stop()


def markdown(results: list[dict], opts) -> str:
    lines = [
        f"steady client: one 100 B record a request, {opts.rate:.0f} requests/s, {opts.seconds:.0f} s alone "
        f"then {opts.seconds:.0f} s with 4 bomb connections ({opts.inflight} bomb in flight each); "
        f"broker tree {opts.tree}",
        "",
        "| bombs | steady p50 alone / with bombs (ms) | p99 alone / with bombs (ms) | max alone / with (ms) "
        "| bombs answered (codes) | broker RSS idle / peak (MB) | broker CPU s |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in results:
        a, w = r["alone"], r["with_bombs"]
        answered = "; ".join(
            f"{c}: "
            + ", ".join(f"{n} {code}" for code, n in b["answers"].items())
            + (f" ({b['error']})" if b["error"] else "")
            for c, b in r["bombs"].items()
        )
        cells = [
            r["shape"],
            f"{a['p50_ms']:.2f} / {w['p50_ms']:.2f}",
            f"{a['p99_ms']:.2f} / **{w['p99_ms']:.2f}**",
            f"{a['max_ms']:.1f} / {w['max_ms']:.1f}",
            answered,
            f"{r['idle_rss_MB']:.0f} / {r['peak_rss_MB']:.0f}",
            f"{r['broker_cpu_s_with_bombs']:.1f} in {r['bombs_elapsed_s']:.1f} s",
        ]
        lines.append("| " + " | ".join(cells) + " |")
    sizes = "; ".join(
        f"{r['shape']}: " + ", ".join(f"{c} {n / 1024:.0f} KiB" for c, n in r["bomb_bytes"].items())
        for r in results
    )
    lines += ["", f"bomb sizes as sent: {sizes}"]
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--rate", type=float, default=200.0)
    ap.add_argument("--inflight", type=int, default=1)
    ap.add_argument("--shapes", default="one-record,many-records")
    ap.add_argument("--tree", default=ROOT, help="checkout whose broker to run (default: this one)")
    ap.add_argument("--loop", default="auto")
    ap.add_argument("--json", help="write the raw results here")
    opts = ap.parse_args(argv)
    results = []
    for shape in opts.shapes.split(","):
        t = time.perf_counter()
        bombs = {c: build_bomb(shape, c) for c in CODECS}
        print(f"{shape}: bombs built in {time.perf_counter() - t:.1f} s", file=sys.stderr)
        results.append(run_shape(opts, shape, bombs))
        print(json.dumps(results[-1], indent=1), file=sys.stderr)
    print(markdown(results, opts))
    if opts.json:
        with open(opts.json, "w") as f:
            json.dump({"options": vars(opts), "results": results}, f, indent=1)
    return 0


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--steady":
        steady_main(int(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4]))
        raise SystemExit(0)
    raise SystemExit(main())
