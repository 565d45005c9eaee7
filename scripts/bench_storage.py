"""Storage engine benchmarks (a script, not a test): python scripts/bench_storage.py [--scale 1.0]

1. Append throughput of PartitionLog.append vs a plain sequential os.write() of the same bytes,
   in the same run, same directory, no fsync in either.
2. Lookup latency on a log of 1M batches: read(offset) at random offsets (warm page cache, and
   cold after posix_fadvise(DONTNEED)), offset_for_timestamp.
3. Recovery time per GB: an unclean reopen re-reading every segment (sizes, CRCs, index rebuild),
   and a clean reopen (index sanity checks only).
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import statistics
import struct
import sys
import tempfile
import time

import crc32c

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from minibroker.storage import PartitionLog  # noqa: E402
from minibroker.storage.topic_config import effective_topic_config  # noqa: E402

TOPIC_ID = bytes(16)


def make_batch(records: int, value_size: int) -> bytearray:
    """An uncompressed v2 batch of ``records`` records; base offset patched per append."""
    body = bytearray()
    for i in range(records):
        rec = (
            b"\x00\x00"
            + bytes([(i << 1) & 0x7F])
            + b"\x01"
            + _varint(value_size)
            + b"x" * value_size
            + b"\x00"
        )
        body += _varint(len(rec)) + rec
    after = struct.pack(
        ">hiqqqhii", 0, records - 1, 1_700_000_000_000, 1_700_000_000_000, -1, -1, -1, records
    ) + bytes(body)
    rest = struct.pack(">ibI", 0, 2, crc32c.crc32c(after)) + after
    return bytearray(struct.pack(">qi", 0, len(rest)) + rest)


def _varint(n: int) -> bytes:
    n = (n << 1) ^ (n >> 63)
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def fill(log: PartitionLog, batch: bytearray, count: int, records: int, ts_step: int = 0) -> None:
    ts = 1_700_000_000_000
    for _ in range(count):
        first = log.log_end_offset
        struct.pack_into(">q", batch, 0, first)
        if ts_step:  # base and max timestamp, then the CRC over attributes..end
            struct.pack_into(">qq", batch, 27, ts, ts)
            struct.pack_into(">I", batch, 17, crc32c.crc32c(memoryview(batch)[21:]))
        log.append(
            batch,
            first_offset=first,
            last_offset=first + records - 1,
            max_timestamp=ts,
            offset_of_max_timestamp=first,
            record_count=records,
        )
        ts += ts_step


def pct(values: list[float], p: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(p * len(values)))]


def bench_append(root: str, total_mb: int) -> None:
    print(f"## append ({total_mb} MB per case, page cache, no fsync)")
    # The last case indexes every append (index.interval.bytes=0): the cost of the index
    # writes themselves (two pwrite calls each; the maps are read-only, see storage/index.py).
    for batch_bytes, records, interval in ((1024, 10, 4096), (16384, 100, 4096), (65536, 400, 4096),
                                           (1024, 10, 0)):
        value = max(1, batch_bytes // records - 8)
        batch = make_batch(records, value)
        count = total_mb * 2**20 // len(batch)
        cfg = effective_topic_config({}, {"index.interval.bytes": interval})
        best_log = best_plain = float("inf")
        for attempt in range(4):  # alternate the order: fresh page cache costs whoever goes first
            for case in ("log", "plain") if attempt % 2 else ("plain", "log"):
                path = os.path.join(root, f"{case}-{batch_bytes}-{attempt}")
                if case == "log":
                    log = PartitionLog.create(path, "t", 0, TOPIC_ID, cfg)
                    t0 = time.perf_counter()
                    fill(log, batch, count, records)
                    best_log = min(best_log, time.perf_counter() - t0)
                    log.close()
                    shutil.rmtree(path)
                else:
                    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
                    t0 = time.perf_counter()
                    for i in range(count):
                        struct.pack_into(">q", batch, 0, i)
                        os.write(fd, batch)
                    best_plain = min(best_plain, time.perf_counter() - t0)
                    os.close(fd)
                    os.unlink(path)
        t_log, t_plain = best_log, best_plain
        mb = count * len(batch) / 2**20
        print(
            f"batch {len(batch):6d} B, index.interval.bytes {interval:4d}: "
            f"PartitionLog.append {mb / t_log:7.0f} MB/s "
            f"({count / t_log / 1000:6.0f}k appends/s, {t_log / count * 1e6:5.1f} us each); "
            f"plain os.write {mb / t_plain:7.0f} MB/s; ratio {t_plain / t_log:.2f}"
        )


def bench_lookup(root: str, batches: int, samples: int) -> None:
    print(f"## lookups on a log of {batches} batches (1 record, ~80 B each), 1 GiB segments")
    cfg = effective_topic_config({}, {})
    d = os.path.join(root, "lookup")
    log = PartitionLog.create(d, "t", 0, TOPIC_ID, cfg)
    t0 = time.perf_counter()
    fill(log, make_batch(1, 10), batches, 1, ts_step=1)
    print(
        f"built in {time.perf_counter() - t0:.1f} s: {log.size_bytes / 2**20:.0f} MB, "
        f"{log.segments[-1].index.entries} index entries"
    )
    rnd = random.Random(1)

    def measure(label: str, fn, cold: bool = False) -> None:
        lat = []
        for _ in range(samples):
            offset = rnd.randrange(batches)
            if cold:
                for seg in log.segments:
                    os.posix_fadvise(seg.file.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)
            t = time.perf_counter()
            fn(offset)
            lat.append((time.perf_counter() - t) * 1e6)
        print(
            f"{label:44s} p50 {statistics.median(lat):7.1f} us  p99 {pct(lat, 0.99):7.1f} us  "
            f"max {max(lat):7.1f} us"
        )

    measure("read(offset, 1)            warm", lambda o: log.read(o, 1))
    measure("read(offset, 1 MiB)        warm", lambda o: log.read(o, 1 << 20))
    measure("offset_for_timestamp(ts)   warm", lambda o: log.offset_for_timestamp(1_700_000_000_000 + o))
    measure("read(offset, 1 MiB)        cold (fadvise)", lambda o: log.read(o, 1 << 20), cold=True)
    log.close()
    shutil.rmtree(d)


def bench_recovery(root: str, total_mb: int) -> None:
    print(f"## recovery ({total_mb} MB logs, 256 MiB segments; figures scaled to per-GB)")
    for batch_bytes, records in ((1024, 10), (16384, 100)):
        cfg = effective_topic_config({}, {"segment.bytes": 256 * 2**20})
        d = os.path.join(root, f"recover-{batch_bytes}")
        log = PartitionLog.create(d, "t", 0, TOPIC_ID, cfg)
        batch = make_batch(records, max(1, batch_bytes // records - 8))
        fill(log, batch, total_mb * 2**20 // len(batch), records)
        size, leo = log.size_bytes, log.log_end_offset
        log.close()
        t0 = time.perf_counter()
        log = PartitionLog.open(d, "t", 0, TOPIC_ID, cfg, clean=False, recovery_point=0)
        t_unclean = time.perf_counter() - t0
        assert log.log_end_offset == leo
        log.close()
        t0 = time.perf_counter()
        log = PartitionLog.open(d, "t", 0, TOPIC_ID, cfg, clean=True, recovery_point=leo)
        t_clean = time.perf_counter() - t0
        log.close()
        gb = size / 2**30
        print(
            f"batch {len(batch):6d} B: unclean (full re-read, CRC, index rebuild) {t_unclean / gb:6.2f} s/GB "
            f"({size / 2**20 / t_unclean:5.0f} MB/s); clean open {t_clean * 1000:6.1f} ms for "
            f"{len(log.segments)} segments"
        )
        shutil.rmtree(d)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", default=None, help="where to write (default: a temp dir)")
    parser.add_argument("--scale", type=float, default=1.0, help="multiply data sizes")
    args = parser.parse_args(argv)
    root = tempfile.mkdtemp(dir=args.dir, prefix="bench-storage-")
    try:
        bench_append(root, int(256 * args.scale))
        bench_lookup(root, int(1_000_000 * args.scale), 2000)
        bench_recovery(root, int(512 * args.scale))
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
