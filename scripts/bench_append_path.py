"""The produce path's cost per request and per record, A/B between checkouts (issue 29, item 2; a
script, not a test).

Usage: ``python scripts/bench_append_path.py [--tree NAME=DIR ...] [--rounds 5] [--scale 1]
[--only 1024Bx960,100Bx500,100Bx10] [--out FILE.json]``

Raw Produce frames (scripts/bench.py's generator in its own process: pre-built v9 frames, 5 in flight,
one connection, one partition) against ``minibroker serve`` run from each tree in turn (``this`` = this
checkout, always measured), round after round, so every tree sees the same machine. Workloads:

- ``1024Bx960``: 1 KiB records in ~1 MiB batches (what kcat and librdkafka send at batch.size=1 MB);
- ``100Bx500``: 100 B records in 50 KB batches;
- ``100Bx10``: 100 B records, 10 a batch: a request per ten records, the shape where a per-request
  cost shows most (kafka-python's default batches of a slow producer are of this order).

Each broker gets a warm-up (a twentieth of the frames: imports, the first segment), then the timed
frames. The figure is the broker process's CPU time (utime + stime from /proc) per million records:
on a shared machine it moves less than wall-clock throughput, which is printed beside it. Medians over
the rounds, and each tree's ratio to ``this``. Build the C accelerator in every tree first
(``python setup.py build_ext --inplace``), or pass ``--pure-python`` to measure both without it.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)

import bench  # noqa: E402 - scripts/bench.py: the generator, frames and process helpers

from minibroker.records import Compression  # noqa: E402

WORKLOADS = {  # name: (record size, records a batch, frames at scale 1)
    "1024Bx960": (1024, 960, 600),
    "100Bx500": (100, 500, 2000),
    "100Bx10": (100, 10, 20_000),
}


def measure(tree: str, frames: list[bytes], count: int, per_batch: int, env: dict) -> dict:
    with bench.BrokerProcess(tree=tree, env=env) as b:
        bench.create_topic(b.port, "raw")
        bench.run_generator(b.port, frames, max(20, count // 20))
        cpu0 = bench.proc_cpu_seconds(b.proc.pid)
        elapsed = bench.run_generator(b.port, frames, count)
        cpu = bench.proc_cpu_seconds(b.proc.pid) - cpu0
    records = count * per_batch
    return {"cpu_s_per_million_records": cpu / records * 1e6, "records_per_s": records / elapsed}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tree", action="append", default=[], metavar="NAME=DIR",
                    help="another checkout to measure beside this one (repeatable)")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--scale", type=float, default=1.0, help="multiplies the frames of every workload")
    ap.add_argument("--only", default=",".join(WORKLOADS), help="comma-separated workloads")
    ap.add_argument("--pure-python", action="store_true", help="MINIBROKER_PURE_PYTHON=1 in every broker")
    ap.add_argument("--out")
    opts = ap.parse_args(argv)
    trees = {"this": ROOT, **dict(t.split("=", 1) for t in opts.tree)}
    env = {"MINIBROKER_PURE_PYTHON": "1"} if opts.pure_python else {}
    results: dict = {}
    for name in opts.only.split(","):
        size, per_batch, frames_at_1 = WORKLOADS[name]
        frames = bench.produce_frames("raw", 1, size, per_batch, Compression.NONE)
        count = max(20, int(frames_at_1 * opts.scale))
        runs: dict[str, list[dict]] = {t: [] for t in trees}
        for r in range(opts.rounds):
            order = list(trees) if r % 2 == 0 else list(reversed(trees))  # ABBA: drift hits both
            for tree in order:
                run = measure(trees[tree], frames, count, per_batch, env)
                runs[tree].append(run)
                print(f"{name} round {r + 1} {tree:10s} {run['cpu_s_per_million_records']:6.3f} s CPU"
                      f"/M records  {run['records_per_s'] / 1e6:5.2f}M records/s", flush=True)
        this_cpu = statistics.median(x["cpu_s_per_million_records"] for x in runs["this"])
        results[name] = {
            tree: {
                "cpu_s_per_million_records": statistics.median(x["cpu_s_per_million_records"] for x in rs),
                "cpu_all": [round(x["cpu_s_per_million_records"], 3) for x in rs],
                "records_per_s": statistics.median(x["records_per_s"] for x in rs),
                "cpu_ratio_to_this": statistics.median(x["cpu_s_per_million_records"] for x in rs) / this_cpu,
            }
            for tree, rs in runs.items()
        }
    out = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "rounds": opts.rounds,
           "scale": opts.scale, "pure_python": opts.pure_python, "trees": trees, "results": results}
    bench.print_report(out, opts.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
