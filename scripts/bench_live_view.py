"""What the live view's append feed costs produce (issue 33; a script, not a test).

Usage: ``python scripts/bench_live_view.py [--baseline-tree DIR] [--reps 5] [--frames 20000]
[--out FILE.json]``

Raw Produce frames (scripts/bench.py's generator in its own process: pre-built frames, 5 in flight, one
connection) of small batches, where a per-append cost shows most: 10 records of 100 B a batch, each
frame one append. Four brokers (``minibroker serve`` subprocesses, fresh data dirs), measured in turn,
round after round, in the same run:

- ``absent``: the code without the feature, from ``--baseline-tree`` (a checkout before issue 33, e.g.
  ``git worktree add /tmp/base main``; default /work/main when it exists; skipped without one);
- ``off``: this tree, ``ui.enable=false`` (the append path still checks ``broker.append_feed``);
- ``closed``: this tree, ``ui.enable=true`` and no page open;
- ``open``: this tree, ``ui.enable=true`` and one feed subscriber (a socket reading ``/ui/feed``, as a
  page's EventSource does), which must receive every append.

Prints, and writes with ``--out``, each variant's median MB/s and broker CPU per million records, and the
ratios to ``absent`` (else to ``off``) of the same run. Goals: ``closed`` ~1.0, ``open`` >= 0.95. On a
busy machine the throughput swings more than that between rounds of one variant; the broker's CPU per
record (process CPU time) is the steadier figure. First, in this process: the append path's CPU per
append with no page and with one (``append_path``).
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)

import bench  # noqa: E402 - scripts/bench.py: the generator, frames and process helpers

from minibroker.records import Compression  # noqa: E402

RECORD_SIZE = 100
PER_BATCH = 10


class FeedSubscriber(threading.Thread):
    """Reads ``/ui/feed`` like a page would, counting the appends its events carry."""

    def __init__(self, port: int):
        super().__init__(daemon=True)
        self.sock = socket.create_connection(("127.0.0.1", port))
        self.sock.sendall(b"GET /ui/feed HTTP/1.1\r\nHost: bench\r\nAccept: text/event-stream\r\n\r\n")
        self.appends = 0

    def run(self) -> None:
        buf = b""
        while True:
            try:
                data = self.sock.recv(1 << 16)
            except OSError:
                return
            if not data:
                return
            buf += data
            *events, buf = buf.split(b"\n\n")
            for event in events:
                if event.startswith(b"event: appends\n"):
                    self.appends += len(json.loads(event.rsplit(b"data: ", 1)[1]))

    def close(self) -> None:
        self.sock.close()


def measure(tree: str, overrides: dict[str, str], frames: list[bytes], count: int, subscribe: bool) -> dict:
    with bench.BrokerProcess(overrides, tree=tree) as b:
        bench.create_topic(b.port, "ui-bench")
        bench.run_generator(b.port, frames, max(200, count // 20))  # warm: imports, the first segment
        sub = None
        if subscribe:
            sub = FeedSubscriber(int(overrides["metrics.port"]))
            sub.start()
            time.sleep(0.2)
        cpu0 = bench.proc_cpu_seconds(b.proc.pid)
        elapsed = bench.run_generator(b.port, frames, count)
        cpu = bench.proc_cpu_seconds(b.proc.pid) - cpu0
        received = None
        if sub is not None:
            deadline = time.monotonic() + 10
            while sub.appends < count and time.monotonic() < deadline:
                time.sleep(0.05)
            received = sub.appends
            sub.close()
    return {"MBps": len(frames[0]) * count / elapsed / 1e6,
            "cpu_s_per_million_records": cpu / (count * PER_BATCH) * 1e6, "feed_events": received}


def append_path(reps: int, appends: int) -> dict:
    """The append path alone, in this process: ``ReplicaManager.append_records`` of one 10-record batch,
    ``appends`` times, on the broker's loop, with no page (``broker.append_feed`` None) and with one
    subscriber (its queue full: publishing drops the oldest, as for a page that fell behind), in
    turn. Returns CPU microseconds of the loop thread per append, medians over ``reps`` rounds, and
    the ratio. The page's writer (JSON, socket) is not in it: the process CPU of ``measure`` is."""
    import asyncio

    from minibroker.records import build_records
    from minibroker.testing import BrokerRunner
    from minibroker.tools.live_view import AppendFeed

    value = b"v" * RECORD_SIZE
    batch = bytes(build_records(2, [(i, int(time.time() * 1000), None, value) for i in range(PER_BATCH)]))
    runner = BrokerRunner({"ui.enable": "true", "metrics.port": "0"}, log_level="WARNING").start()
    try:
        runner.create_topic("ui-append")
        broker = runner.broker
        feed = AppendFeed(broker)

        async def run(n: int) -> float:
            replicas = broker.replicas
            t0 = time.thread_time()  # the loop thread's CPU: other processes' load counts far less
            for _ in range(n):
                replicas.append_records("ui-append", 0, bytearray(batch), 9)
            return (time.thread_time() - t0) / n * 1e6

        def timed(n: int) -> float:
            return asyncio.run_coroutine_threadsafe(run(n), runner._loop).result(300)

        timed(appends // 10)  # warm
        closed, open_ = [], []
        for rep in range(reps):  # ABBA: the log grows round after round, the order alternates
            for subscribed in ((False, True) if rep % 2 == 0 else (True, False)):
                if not subscribed:
                    closed.append(timed(appends))
                    continue
                sub = asyncio.run_coroutine_threadsafe(_subscribe(feed), runner._loop).result(10)
                open_.append(timed(appends))
                runner._loop.call_soon_threadsafe(feed.unsubscribe, sub)
        publish = asyncio.run_coroutine_threadsafe(_publish_cost(feed, batch, appends * 5),
                                                   runner._loop).result(300)
    finally:
        runner.stop()
        runner.cleanup()
    return {"us_per_append_no_page": statistics.median(closed),
            "us_per_append_one_page": statistics.median(open_),
            "ratio_one_page_to_no_page": statistics.median(open_) / statistics.median(closed),
            "rounds_no_page": [round(x, 2) for x in closed], "rounds_one_page": [round(x, 2) for x in open_],
            "us_per_publish": publish}


async def _subscribe(feed):
    return feed.subscribe()  # on the loop: its asyncio.Event belongs there


async def _publish_cost(feed, batch: bytes, n: int) -> float:
    """CPU microseconds of ``AppendFeed.publish`` alone, for one subscriber, on a real append result."""
    from minibroker.records import AppendConfig, validate_and_assign

    result = validate_and_assign(bytearray(batch), next_offset=0, now_ms=int(time.time() * 1000),
                                 config=AppendConfig(), produce_version=9)
    sub = feed.subscribe()
    try:
        t0 = time.thread_time()
        for _ in range(n):
            feed.publish("ui-append", 0, result, 9, len(batch))
        return (time.thread_time() - t0) / n * 1e6
    finally:
        feed.unsubscribe(sub)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    default_base = "/work/main" if os.path.isdir("/work/main/minibroker") else None
    ap.add_argument("--baseline-tree", default=default_base,
                    help="a checkout without the live view (default /work/main when present)")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--frames", type=int, default=20000)
    ap.add_argument("--out")
    ap.add_argument("--appends", type=int, default=20000, help="appends per round of the in-process measure")
    opts = ap.parse_args(argv)
    in_process = append_path(opts.reps, opts.appends)
    print("append path, in process:", json.dumps(in_process), flush=True)
    frames = bench.produce_frames("ui-bench", 1, RECORD_SIZE, PER_BATCH, Compression.NONE)
    variants = {}
    if opts.baseline_tree:
        variants["absent"] = (opts.baseline_tree, {}, False)
    variants["off"] = (ROOT, {}, False)
    variants["closed"] = (ROOT, {"ui.enable": "true"}, False)
    variants["open"] = (ROOT, {"ui.enable": "true"}, True)
    runs: dict[str, list[dict]] = {k: [] for k in variants}
    for rep in range(opts.reps):
        for name, (tree, overrides, subscribe) in variants.items():
            port_overrides = {**overrides, "metrics.port": str(bench.free_port())}
            result = measure(tree, port_overrides, frames, opts.frames, subscribe)
            runs[name].append(result)
            print(f"round {rep + 1} {name:7s} {result['MBps']:7.2f} MB/s  "
                  f"{result['cpu_s_per_million_records']:6.2f} s CPU/M records"
                  + (f"  feed events {result['feed_events']}/{opts.frames}" if subscribe else ""), flush=True)
    base = "absent" if "absent" in runs else "off"
    summary = {}
    for name, rs in runs.items():
        mbps = statistics.median(r["MBps"] for r in rs)
        summary[name] = {
            "MBps_median": mbps, "MBps_all": [round(r["MBps"], 2) for r in rs],
            "cpu_s_per_million_records": statistics.median(r["cpu_s_per_million_records"] for r in rs),
            "ratio_to_" + base: mbps / statistics.median(r["MBps"] for r in runs[base]),
            "feed_events": [r["feed_events"] for r in rs] if name == "open" else None,
        }
    out = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "frames": opts.frames,
           "reps": opts.reps, "batch": f"{PER_BATCH} x {RECORD_SIZE} B", "baseline": base,
           "baseline_tree": opts.baseline_tree, "results": summary, "append_path_in_process": in_process}
    bench.print_report(out, opts.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
