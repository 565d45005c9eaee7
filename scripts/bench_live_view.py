"""What the live view's append feed costs produce (issue 33; a script, not a test).

Usage: ``python scripts/bench_live_view.py [--baseline-tree DIR] [--before-tree DIR] [--reps 5]
[--frames 20000] [--appends 4000] [--pairs 8] [--out FILE.json]``

Raw Produce frames (scripts/bench.py's generator in its own process: pre-built frames, 5 in flight, one
connection) of small batches, where a per-append cost shows most: 10 records of 100 B a batch, each
frame one append. Brokers (``minibroker serve`` subprocesses, fresh data dirs), measured in turn,
round after round, in the same run:

- ``absent``: the code without the feature, from ``--baseline-tree`` (a checkout before issue 33, e.g.
  ``git worktree add --detach /tmp/base 4a1e291``; skipped without one);
- ``off``: this tree, ``ui.enable=false`` (the append path still checks ``broker.append_feed``);
- ``closed``: this tree, ``ui.enable=true`` and no page open;
- ``open``: this tree, ``ui.enable=true`` and one feed subscriber (a socket reading ``/ui/feed``, as a
  page's EventSource does, with the page's default window), which must account for every append: each
  one either in a row or in a ``skipped`` count;
- ``closed@before``, ``open@before``: the same two from ``--before-tree`` (an earlier version of the
  feed, e.g. ``git worktree add --detach /tmp/base-live main``), for a before/after table of one run.

Prints, and writes with ``--out``, each variant's median MB/s and broker CPU per million records, and the
ratios to ``absent`` (else to ``off``) of the same run. Goals: ``closed`` ~1.0, ``open`` >= 0.95. On a
busy machine the throughput swings more than that between rounds of one variant; the broker's CPU per
record (process CPU time) is the steadier figure. First, in-process (``append_path``): the loop thread's
CPU per append with no page and with one, the page's writer task (rows, JSON, socket) included, in
``--reps`` interpreters of ``--pairs`` pairs of rounds of ``--appends`` appends, for this tree and for
``--before-tree``.
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
    """Reads ``/ui/feed`` like a page would, counting the appends its events carry as rows and as
    ``skipped`` counts (``dropped`` in the feed before windowing)."""

    def __init__(self, port: int):
        super().__init__(daemon=True)
        self.sock = socket.create_connection(("127.0.0.1", port))
        self.sock.sendall(b"GET /ui/feed HTTP/1.1\r\nHost: bench\r\nAccept: text/event-stream\r\n\r\n")
        self.appends = 0  # rows
        self.skipped = 0

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
                elif event.startswith((b"event: skipped\n", b"event: dropped\n")):
                    self.skipped += int(event.rsplit(b"data: ", 1)[1])

    @property
    def accounted(self) -> int:
        return self.appends + self.skipped

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
            while sub.accounted < count and time.monotonic() < deadline:
                time.sleep(0.05)
            received = {"rows": sub.appends, "skipped": sub.skipped}
            sub.close()
    return {"MBps": len(frames[0]) * count / elapsed / 1e6,
            "cpu_s_per_million_records": cpu / (count * PER_BATCH) * 1e6, "feed_events": received}


def append_path_rounds(pairs: int, appends: int) -> dict:
    """The append path in this interpreter (the minibroker on ``PYTHONPATH``): ``ReplicaManager.
    append_records`` of one 10-record batch, ``appends`` times on the broker's loop, which runs its other
    tasks every 5 appends (as with 5 requests in flight). One page is open throughout (a child process
    reading ``/ui/feed`` with its default window), and the rounds alternate, ABBA, between the feed
    installed (``open``: publishing each append, and the page's writer task making rows and JSON and
    writing them, all on the loop thread) and not (``closed``: ``broker.append_feed`` None, as with no
    page). Short rounds side by side see the same machine: on this VM the CPU time of one round swings
    by tens of percent from one second to the next. Each round ends 0.4 s after its last append, the
    page's last write included. Returns the loop thread's CPU microseconds per append of each round."""
    import asyncio
    import subprocess

    from minibroker.records import build_records
    from minibroker.testing import BrokerRunner

    value = b"v" * RECORD_SIZE
    batch = bytes(build_records(2, [(i, int(time.time() * 1000), None, value) for i in range(PER_BATCH)]))
    runner = BrokerRunner({"ui.enable": "true", "metrics.port": "0"}, log_level="WARNING").start()
    reader = None
    try:
        runner.create_topic("ui-append")
        broker = runner.broker
        port = int(runner.metrics_url.rsplit(":", 1)[1])

        async def run(n: int, feed) -> float:
            broker.append_feed = feed
            replicas = broker.replicas
            t0 = 0.0
            for i in range(n + n // 4):  # the first quarter-round unmeasured: the CPU out of the idle wait
                if i == n // 4:
                    t0 = time.thread_time()  # the loop thread's CPU: other processes' load counts far less
                replicas.append_records("ui-append", 0, bytearray(batch), 9)
                if i % 5 == 4:
                    await asyncio.sleep(0)
            await asyncio.sleep(0.4)  # the page's last write (a busy feed gathers 0.25 s)
            return (time.thread_time() - t0) / n * 1e6

        def timed(n: int, feed) -> float:
            return asyncio.run_coroutine_threadsafe(run(n, feed), runner._loop).result(300)

        timed(appends, None)  # warm
        published = pairs * (appends + appends // 4)  # what the open rounds append, their warm-up included
        reader = subprocess.Popen([sys.executable, os.path.abspath(__file__), "_reader", str(port),
                                   str(published)], stdout=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 30
        while broker.append_feed is None and time.monotonic() < deadline:
            time.sleep(0.01)
        publish = broker.append_feed
        if publish is None:
            raise RuntimeError("the page did not subscribe")
        closed, open_ = [], []
        for pair in range(pairs):
            for subscribed in ((False, True) if pair % 2 == 0 else (True, False)):
                (open_ if subscribed else closed).append(timed(appends, publish if subscribed else None))
        broker.append_feed = publish
        accounted = int(reader.communicate(timeout=30)[0].split()[-1])
        if accounted != published:
            raise RuntimeError(f"the feed accounted for {accounted} appends of {published}")
    finally:
        if reader is not None and reader.poll() is None:
            reader.kill()
        runner.stop()
        runner.cleanup()
    return {"no_page": closed, "one_page": open_}


def _reader(port: int, count: int) -> None:
    """A page reading the feed until it has accounted for ``count`` appends (``append_path_rounds``)."""
    sub = FeedSubscriber(port)
    sub.start()
    while sub.accounted < count and sub.is_alive():
        time.sleep(0.01)
    sub.close()
    print(sub.accounted)


def append_path(reps: int, appends: int, tree: str | None = None, pairs: int = 8) -> dict:
    """``append_path_rounds`` in ``reps`` fresh interpreters, ``tree``'s code (else this tree's), ``pairs``
    pairs of rounds each; plus, for this tree, ``AppendFeed.publish`` alone. Medians of all rounds, and
    the median of the ratios one page / no page of the rounds side by side (round ``2k`` and ``2k+1``)."""
    import subprocess

    closed, open_, ratios = [], [], []
    for _ in range(reps):
        env = {**os.environ, "PYTHONPATH": tree or ROOT}
        out = subprocess.run([sys.executable, os.path.abspath(__file__), "_rounds", str(pairs), str(appends)],
                             capture_output=True, text=True, check=True, timeout=900, env=env)
        rounds = json.loads(out.stdout.strip().splitlines()[-1])
        closed += rounds["no_page"]
        open_ += rounds["one_page"]
        ratios += [o / c for o, c in zip(rounds["one_page"], rounds["no_page"], strict=True)]
    result = {"tree": tree or ROOT, "rounds_per_case": len(closed), "appends_per_round": appends,
              "us_per_append_no_page": statistics.median(closed),
              "us_per_append_one_page": statistics.median(open_),
              "ratio_one_page_to_no_page": statistics.median(open_) / statistics.median(closed),
              "median_paired_ratio": statistics.median(ratios),
              "fastest_no_page": min(closed), "fastest_one_page": min(open_),
              "rounds_no_page": [round(x, 2) for x in closed],
              "rounds_one_page": [round(x, 2) for x in open_]}
    if tree is None:
        result["us_per_publish"] = _publish_cost(appends * 5)
    return result


def _publish_cost(n: int) -> float:
    """CPU microseconds of ``AppendFeed.publish`` alone, for one subscriber, on a real append result."""
    import asyncio
    from types import SimpleNamespace

    from minibroker.records import AppendConfig, build_records, validate_and_assign
    from minibroker.tools.live_view import AppendFeed

    value = b"v" * RECORD_SIZE
    batch = bytes(build_records(2, [(i, int(time.time() * 1000), None, value) for i in range(PER_BATCH)]))
    result = validate_and_assign(bytearray(batch), next_offset=0, now_ms=int(time.time() * 1000),
                                 config=AppendConfig(), produce_version=9)

    async def cost() -> float:  # on a loop: the subscriber's asyncio.Event belongs to one
        feed = AppendFeed(SimpleNamespace(append_feed=None))
        sub = feed.subscribe()
        t0 = time.thread_time()
        for _ in range(n):
            feed.publish("ui-append", 0, result, 9, len(batch))
        elapsed = time.thread_time() - t0
        feed.unsubscribe(sub)
        return elapsed / n * 1e6

    return asyncio.run(cost())


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["_rounds"]:  # one interpreter's in-process rounds (``append_path``)
        print(json.dumps(append_path_rounds(int(argv[1]), int(argv[2]))))
        return 0
    if argv[:1] == ["_reader"]:
        _reader(int(argv[1]), int(argv[2]))
        return 0
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--baseline-tree", help="a checkout without the live view: the `absent` variant")
    ap.add_argument("--before-tree", help="an earlier version of the feed: `closed@before`, `open@before` "
                                          "and its in-process figures, in the same run")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--frames", type=int, default=20000)
    ap.add_argument("--out")
    ap.add_argument("--appends", type=int, default=4000, help="appends per round of the in-process measure")
    ap.add_argument("--pairs", type=int, default=8, help="pairs of rounds per interpreter, in-process")
    opts = ap.parse_args(argv)
    load_at_start = os.getloadavg()  # 1, 5, 15 minutes: how quiet the machine was
    in_process = {"this tree": append_path(opts.reps, opts.appends, pairs=opts.pairs)}
    print("append path, in process, this tree:", json.dumps(in_process["this tree"]), flush=True)
    if opts.before_tree:
        in_process["before"] = append_path(opts.reps, opts.appends, opts.before_tree, opts.pairs)
        print("append path, in process, before:", json.dumps(in_process["before"]), flush=True)
    frames = bench.produce_frames("ui-bench", 1, RECORD_SIZE, PER_BATCH, Compression.NONE)
    variants = {}
    if opts.baseline_tree:
        variants["absent"] = (opts.baseline_tree, {}, False)
    variants["off"] = (ROOT, {}, False)
    variants["closed"] = (ROOT, {"ui.enable": "true"}, False)
    variants["open"] = (ROOT, {"ui.enable": "true"}, True)
    if opts.before_tree:
        variants["closed@before"] = (opts.before_tree, {"ui.enable": "true"}, False)
        variants["open@before"] = (opts.before_tree, {"ui.enable": "true"}, True)
    runs: dict[str, list[dict]] = {k: [] for k in variants}
    for rep in range(opts.reps):
        for name, (tree, overrides, subscribe) in variants.items():
            port_overrides = {**overrides, "metrics.port": str(bench.free_port())}
            result = measure(tree, port_overrides, frames, opts.frames, subscribe)
            runs[name].append(result)
            print(f"round {rep + 1} {name:13s} {result['MBps']:7.2f} MB/s  "
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
            "feed_events": [r["feed_events"] for r in rs] if variants[name][2] else None,
        }
    out = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "frames": opts.frames,
           "reps": opts.reps, "batch": f"{PER_BATCH} x {RECORD_SIZE} B", "baseline": base,
           "baseline_tree": opts.baseline_tree, "before_tree": opts.before_tree,
           "load_average": {"start": load_at_start, "end": os.getloadavg()}, "results": summary,
           "append_path_in_process": in_process}
    bench.print_report(out, opts.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
