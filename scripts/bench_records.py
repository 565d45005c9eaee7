#!/usr/bin/env python3
"""Throughput of validate_and_assign for v2 batches, as MB/s and as a ratio to plain crc32c.

For each case a batch of ``--size`` bytes of ``--record-bytes`` records is built once; then
validate_and_assign (produce v9, default topic config) and ``crc32c.crc32c`` over the same
batch bytes are timed in the same run (best of ``--repeat`` rounds). MB/s are of *batch bytes*
(compressed bytes for compressed batches). The goal from issue 3: the in-place uncompressed path
within 2x of crc32c.

Uncompressed batches are timed twice: as Kafka validates them (the default: every record walked,
``v2.walk_records``) and with ``skip_record_walk`` (the header and the CRC only, not Kafka's
behaviour; what the hot path did before issue 14). The lines after the table give the walk's cost
from those two figures, measured in the same run. Where the record layer's C accelerator runs, the
walked uncompressed case and lz4 and zstd are timed again on the pure-Python path (issue 29).

    python scripts/bench_records.py [--size 16384 --size 1048576] [--record-bytes 100] [--repeat 5]
"""

from __future__ import annotations

import argparse
import os
import struct
import time

import crc32c

from minibroker.records import AppendConfig, Compression, accelerator, build_records, validate_and_assign

NOW = 1_700_000_000_000
ZERO = struct.Struct(">q")
BIG = 64 * 1024 * 1024  # max.message.bytes for the benchmark, so 1 MiB batches are accepted


def make_batch(size: int, record_bytes: int, codec: Compression) -> bytes:
    n = max(1, size // (record_bytes + 10))
    # hex text of random bytes: every value different, compressible about 2x
    return build_records(
        2,
        [(i, NOW + i, b"key-%d" % i, os.urandom(record_bytes // 2).hex().encode(), ()) for i in range(n)],
        compression=codec,
    )


def best_time(fn, iterations: int, repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        for _ in range(iterations):
            fn()
        best = min(best, (time.perf_counter() - t0) / iterations)
    return best


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", type=int, action="append", help="uncompressed batch size in bytes")
    ap.add_argument("--record-bytes", type=int, default=100)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args(argv)
    sizes = args.size or [16 * 1024, 1024 * 1024]
    print(
        f"{'case':<50} {'batch B':>9} {'records':>7} {'us/batch':>9} {'MB/s':>8} {'Mrec/s':>7} "
        f"{'crc32c MB/s':>11} {'ratio':>6}  path"
    )
    walk_costs = []
    # the record layer's path of the unmarked cases: the C accelerator where it is built and not
    # switched off (MINIBROKER_PURE_PYTHON)
    default_path = "C accelerator" if accelerator.active() else "pure Python"
    for size in sizes:
        timed = {}
        cases = [
            ("uncompressed, writable buffer", Compression.NONE, True, AppendConfig(max_message_bytes=BIG)),
            ("uncompressed, bytes (1 copy)", Compression.NONE, False, AppendConfig(max_message_bytes=BIG)),
            (
                "uncompressed, skip_record_walk",
                Compression.NONE,
                True,
                AppendConfig(skip_record_walk=True, max_message_bytes=BIG),
            ),
            # LogAppendTime stamps the batch, so it needs fresh (read-only, copied) input each time
            (
                "uncompressed, LogAppendTime",
                Compression.NONE,
                False,
                AppendConfig(message_timestamp_type="LogAppendTime", max_message_bytes=BIG),
            ),
        ]
        cases += [
            (f"{codec}", codec, True, AppendConfig(max_message_bytes=BIG))
            for codec in (Compression.GZIP, Compression.SNAPPY, Compression.LZ4, Compression.ZSTD)
        ]
        if default_path != "pure Python":  # the same cases on the record layer's pure-Python path (issue 29)
            cases += [
                (f"{name}, pure Python", codec, writable, cfg)
                for name, codec, writable, cfg in cases
                if name in ("uncompressed, writable buffer", "lz4", "zstd")
            ]
        for name, codec, writable, cfg in cases:
            accelerator.use_accelerator(default_path != "pure Python" and not name.endswith("pure Python"))
            batch = make_batch(size, args.record_bytes, codec)
            buf = bytearray(batch) if writable else batch
            n_records = int.from_bytes(batch[57:61], "big")

            if codec == Compression.NONE:

                def run(buf=buf, cfg=cfg):
                    return validate_and_assign(
                        buf, next_offset=1000, now_ms=NOW, config=cfg, produce_version=9
                    )
            else:

                def run(buf=buf, cfg=cfg):
                    # in-place assignment wrote baseOffset 1000 into the buffer; a producer sends 0 (otherwise
                    # Kafka's rules rebuild the batch), so put it back first (~0.1 us)
                    ZERO.pack_into(buf, 0, 0)
                    return validate_and_assign(
                        buf, next_offset=1000, now_ms=NOW, config=cfg, produce_version=9
                    )

            path = run().path
            # calibrate to ~0.1 s a round
            one = best_time(run, 1, 3)
            iterations = max(1, int(0.1 / max(one, 1e-7)))
            t = best_time(run, iterations, args.repeat)
            crc_it = max(1, int(0.1 / max(best_time(lambda b=batch: crc32c.crc32c(b), 1, 3), 1e-8)))
            t_crc = best_time(lambda b=batch: crc32c.crc32c(b), crc_it, args.repeat)
            mbs = len(batch) / t / 1e6
            timed[name] = (t, n_records)
            print(
                f"{name + f' ({size // 1024} KiB)':<50} {len(batch):>9} {n_records:>7} {t * 1e6:>9.1f} "
                f"{mbs:>8.0f} {n_records / t / 1e6:>7.2f} {len(batch) / t_crc / 1e6:>11.0f} "
                f"{t / t_crc:>6.1f}  "
                f"{path}"
            )
        skipped, _ = timed["uncompressed, skip_record_walk"]
        for name, which in (
            ("uncompressed, writable buffer", default_path),
            ("uncompressed, writable buffer, pure Python", "pure Python"),
        ):
            if name in timed:
                walked, records = timed[name]
                walk_costs.append((f" ({which})", size, records, walked, skipped))
    print()
    for which, size, records, walked, skipped in walk_costs:
        print(
            f"record walk{which}, {size // 1024} KiB of {args.record_bytes} B records: "
            f"{(walked - skipped) * 1e6:.1f} us "
            f"a batch, {(walked - skipped) / records * 1e9:.0f} ns a record; walked / header only = "
            f"{walked / skipped:.1f}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
