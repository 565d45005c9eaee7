"""Restart time after kill -9 with a large log and many idempotent producers (issue 31, item 2).

    python scripts/bench_recovery.py [--gb 10] [--producers 1000] [--partitions 8] [--segment-mb 256]
                                     [--baseline /work/main] [--dir /tmp/bench-recovery] [--keep]

1. Build (a subprocess running this checkout): ``--gb`` GiB of uncompressed v2 batches (16 KiB, 150
   records of 100 bytes) appended through ``PartitionLog.append`` to ``--partitions`` partitions,
   each batch from one of ``--producers`` idempotent producer ids in turn, with its sequence, as
   ``ReplicaManager`` records it in the producer state (so rolls write their snapshots, as the
   broker's do). Then the recovery point of each partition is set at its active segment (what the
   upkeep's flush of sealed segments and checkpoint leave) and the process ends with ``os._exit``:
   nothing is closed, no clean-shutdown marker, no snapshot at the log end, as after kill -9.
2. Restart (a fresh subprocess per measurement): ``LogManager.load()`` (recovery of the unflushed
   segments), then the producer state of every partition (what the broker loads before the first
   idempotent append to it), each timed; the process ends with ``os._exit`` again, so the next
   measurement finds the same unclean state.
   - before: ``--baseline``'s code (main), on the same files with the roll snapshots moved aside (main
     writes snapshots only at a clean shutdown, so after kill -9 it has none);
   - after: this checkout's code, with them.
   Each is measured ``--reps`` times (warm page cache: the machine did not restart); ``--cold`` drops the
   page cache (root, /proc/sys/vm/drop_caches) before each measurement too.

The build takes disk space: ``--gb`` plus indexes. ``--keep`` leaves the directory for another run
(``--reuse`` then skips the build).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import re
import shutil
import statistics
import struct
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TOPIC = "bench"
RECORDS_PER_BATCH = 150
VALUE_BYTES = 100


# -- batches -----------------------------------------------------------------------------------------

def _records_body(count: int, value_bytes: int) -> bytes:
    """The records of a batch (timestamp and offset deltas only: the same for every batch)."""
    from minibroker.records.varint import encode_varint as v

    body = bytearray()
    for i in range(count):
        rec = b"\x00" + v(0) + v(i) + v(-1) + v(value_bytes) + b"x" * value_bytes + v(0)
        body += v(len(rec)) + rec
    return bytes(body)


# attributes int16, lastOffsetDelta int32, firstTimestamp, maxTimestamp int64, producerId int64,
# producerEpoch int16, baseSequence int32, count int32: what the CRC covers before the records
_CRC_HEAD = struct.Struct(">hiqqqhii")
_PREFIX = struct.Struct(">qiibI")  # baseOffset, length, partitionLeaderEpoch, magic, crc


def build_batch(body: bytes, count: int, pid: int, seq: int, ts: int, crc32c) -> bytes:
    head = _CRC_HEAD.pack(0, count - 1, ts, ts, pid, 0, seq, count)
    crc = crc32c(body, crc32c(head))
    length = 4 + 1 + 4 + len(head) + len(body)
    return _PREFIX.pack(0, length, 0, 2, crc) + head + body


# -- the two subprocess roles -------------------------------------------------------------------------

def broker_config(args) -> dict:
    return {"log.segment.bytes": args.segment_mb << 20, "log.retention.ms": -1, "log.retention.bytes": -1}


def build(args) -> None:
    """Write the log, then end as kill -9 would (see the module docstring)."""
    from crc32c import crc32c

    from minibroker.storage.log_manager import LogManager

    manager = LogManager([args.dir], broker_config(args), node_id=1)
    manager.load()
    manager.create_topic(TOPIC, args.partitions)
    logs = [manager.get_log(TOPIC, p) for p in range(args.partitions)]
    tables = [plog.producer_state for plog in logs]
    body = _records_body(RECORDS_PER_BATCH, VALUE_BYTES)
    batch_bytes = len(build_batch(body, RECORDS_PER_BATCH, 0, 0, 0, crc32c))
    total = int(args.gb * (1 << 30)) // batch_bytes
    sequences = [[0] * args.partitions for _ in range(args.producers)]
    started = time.monotonic()
    for i in range(total):
        producer, partition = i % args.producers, (i // args.producers) % args.partitions
        pid = 1000 + producer
        seq = sequences[producer][partition]
        ts = int(time.time() * 1000)
        data = bytearray(build_batch(body, RECORDS_PER_BATCH, pid, seq, ts, crc32c))
        plog = logs[partition]
        first = plog.log_end_offset
        struct.pack_into(">q", data, 0, first)
        last = first + RECORDS_PER_BATCH - 1
        plog.append(data, first_offset=first, last_offset=last, max_timestamp=ts,
                    offset_of_max_timestamp=last, record_count=RECORDS_PER_BATCH)
        tables[partition].record(pid, 0, seq, seq + RECORDS_PER_BATCH - 1, first, last, ts)
        sequences[producer][partition] = seq + RECORDS_PER_BATCH
        if i % 20000 == 0 and i:
            done = i * batch_bytes / (1 << 30)
            took = time.monotonic() - started
            print(f"  built {done:.1f} GiB in {took:.0f} s", file=sys.stderr, flush=True)
    for plog in logs:  # the upkeep's work: sealed segments flushed (the page cache holds them), checkpoint
        plog.mark_flushed(plog.sealed_unflushed())
    manager.write_checkpoints()
    segments = sum(len(plog.segments) for plog in logs)
    print(json.dumps({"batches": total, "bytes": total * batch_bytes, "segments": segments,
                      "seconds": time.monotonic() - started}), flush=True)
    os._exit(0)  # as kill -9: nothing closed or flushed


class _ReplayCounter(logging.Handler):
    """Sums N of the "producer state rebuilt from N batches" lines."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.batches = 0

    def emit(self, record: logging.LogRecord) -> None:
        m = re.search(r"producer state rebuilt from (\d+) batches", record.getMessage())
        if m:
            self.batches += int(m[1])


def restart(args) -> None:
    """Time the load of the logs and of every partition's producer state, then end as kill -9."""
    from minibroker.storage import producer_state
    from minibroker.storage.log_manager import LogManager
    from minibroker.storage.partition_log import PartitionLog

    replayed = _ReplayCounter()  # both versions log each load's replayed batch count
    logging.getLogger("minibroker.replica").addHandler(replayed)
    logging.getLogger("minibroker.replica").setLevel(logging.DEBUG)
    started = time.monotonic()
    manager = LogManager([args.dir], broker_config(args), node_id=1)
    manager.load()
    loaded = time.monotonic()
    producers = 0
    for plog in manager.logs():
        if plog.topic != TOPIC:
            continue
        if hasattr(PartitionLog, "producer_state"):  # this checkout: the log owns it
            table = plog.producer_state
        else:  # main: the replica manager loaded it through this function
            table = producer_state.load_producer_state(plog)
        producers += len(table.producers)
    done = time.monotonic()
    print(json.dumps({"load_s": loaded - started, "producer_state_s": done - loaded,
                      "total_s": done - started, "replayed_batches": replayed.batches,
                      "producers": producers}), flush=True)
    os._exit(0)


# -- the driver ------------------------------------------------------------------------------------

def _run(role: str, code: str, args, extra: list[str]) -> dict:
    env = {**os.environ, "PYTHONPATH": code, "PYTHONDONTWRITEBYTECODE": "1"}
    cmd = [sys.executable, os.path.abspath(__file__), "--role", role, "--dir", args.dir, *extra]
    out = subprocess.run(cmd, env=env, check=True, stdout=subprocess.PIPE, text=True, cwd=code).stdout
    return json.loads(out.strip().splitlines()[-1])


def _drop_caches() -> None:
    os.sync()
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("3\n")


def _snapshots(directory: str) -> list[str]:
    out = []
    for part in sorted(os.listdir(directory)):
        full = os.path.join(directory, part)
        if os.path.isdir(full) and part.startswith(TOPIC + "-"):
            out += [os.path.join(full, n) for n in os.listdir(full) if n.endswith(".snapshot")]
    return out


def measure(label: str, code: str, args) -> list[dict]:
    runs = []
    for _ in range(args.reps):
        if args.cold:
            _drop_caches()
        r = _run("restart", code, args, ["--segment-mb", str(args.segment_mb)])
        runs.append(r)
        print(f"  {label}: load {r['load_s']:.2f} s + producer state {r['producer_state_s']:.2f} s = "
              f"{r['total_s']:.2f} s ({r['replayed_batches']} batches replayed, {r['producers']} producer "
              f"entries)", flush=True)
    return runs


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--role", choices=("driver", "build", "restart"), default="driver")
    p.add_argument("--gb", type=float, default=10.0)
    p.add_argument("--producers", type=int, default=1000)
    p.add_argument("--partitions", type=int, default=8)
    p.add_argument("--segment-mb", type=int, default=256)
    p.add_argument("--baseline", default="/work/main", help="checkout whose code is 'before'")
    p.add_argument("--dir", default="/tmp/bench-recovery")
    p.add_argument("--reps", type=int, default=2)
    p.add_argument("--cold", action="store_true", help="drop the page cache before each restart")
    p.add_argument("--keep", action="store_true", help="leave the directory when done")
    p.add_argument("--reuse", action="store_true", help="skip the build: --dir holds one")
    args = p.parse_args()
    if args.role == "build":
        return build(args)
    if args.role == "restart":
        return restart(args)

    if not args.reuse:
        shutil.rmtree(args.dir, ignore_errors=True)
        os.makedirs(args.dir)
        print(f"building {args.gb} GiB: {args.partitions} partitions, {args.producers} producers, "
              f"{args.segment_mb} MiB segments in {args.dir}", flush=True)
        built = _run("build", HERE, args, ["--gb", str(args.gb), "--producers", str(args.producers),
                                           "--partitions", str(args.partitions),
                                           "--segment-mb", str(args.segment_mb)])
        print(f"  {built['bytes'] / (1 << 30):.2f} GiB, {built['batches']} batches, {built['segments']} "
              f"segments in {built['seconds']:.0f} s", flush=True)
    snapshots = _snapshots(args.dir)
    aside = args.dir.rstrip("/") + "-snapshots-aside"
    shutil.rmtree(aside, ignore_errors=True)
    os.makedirs(aside)
    for path in snapshots:  # main's view after kill -9: no snapshot
        partition_dir = os.path.basename(os.path.dirname(path))
        os.rename(path, os.path.join(aside, partition_dir + "." + os.path.basename(path)))
    try:
        before = measure(f"before ({args.baseline})", args.baseline, args)
    finally:
        for name in os.listdir(aside):
            part, _, base = name.partition(".")
            os.rename(os.path.join(aside, name), os.path.join(args.dir, part, base))
        os.rmdir(aside)
    after = measure("after (this checkout)", HERE, args)
    b = statistics.median(r["total_s"] for r in before)
    a = statistics.median(r["total_s"] for r in after)
    print(f"restart after kill -9, median of {args.reps}: before {b:.2f} s, after {a:.2f} s "
          f"({b / a:.1f}x faster; {len(snapshots)} roll snapshots)", flush=True)
    if not args.keep:
        shutil.rmtree(args.dir, ignore_errors=True)


if __name__ == "__main__":
    main()
