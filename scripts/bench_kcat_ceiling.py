"""What kcat itself can send (issue 29's 3M records/s goal; a script, not a test).

Usage: ``python scripts/bench_kcat_ceiling.py [--records 2000000] [--size 100] [--reps 2]``

kcat produces ``--records`` lines of ``--size`` bytes from a file to the Kafka-shaped receive+append
reference of scripts/bench.py (``_KafkaAppendCeiling``: no validation, no offsets, no index), once with
scripts/bench.py's settings and once with larger batches and queues. Printed per run: records/s, kcat's
own CPU (user+system, from ``getrusage`` of the child) and the reference's. A load generator that needs
more CPU per record than the machine has to spare bounds any server's records/s: on 2 cores, kcat's CPU
per million records against the reference says how far one kcat can go, whatever the broker does.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import bench  # noqa: E402 - scripts/bench.py: the reference server and its process helpers

SETTINGS = {
    "bench.py's": ["-X", "linger.ms=5", "-X", "batch.size=1000000",
                   "-X", "queue.buffering.max.messages=1000000"],
    "larger batches": ["-X", "linger.ms=50", "-X", "batch.size=1000000", "-X", "batch.num.messages=1000000",
                       "-X", "queue.buffering.max.messages=2000000",
                       "-X", "queue.buffering.max.kbytes=2097151"],
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=2_000_000)
    ap.add_argument("--size", type=int, default=100)
    ap.add_argument("--reps", type=int, default=2)
    opts = ap.parse_args()
    kcat = shutil.which("kcat") or shutil.which("kafkacat")
    if kcat is None:
        raise SystemExit("kcat is not installed (Debian package kcat)")
    with tempfile.NamedTemporaryFile("wb", suffix=".txt", delete=False) as f:
        for i in range(0, opts.records, 1000):  # hex of random bytes, as bench.py's record_layer
            count = min(1000, opts.records - i)
            f.write(b"".join(os.urandom(opts.size // 2 + 1).hex().encode()[: opts.size] + b"\n"
                             for _ in range(count)))
        path = f.name
    print(f"load average {os.getloadavg()[0]:.1f}; {opts.records:,} records of {opts.size} B")
    try:
        for _ in range(opts.reps):
            for name, extra in SETTINGS.items():
                with (tempfile.TemporaryDirectory() as d,
                      bench.CeilingProcess("kafka-append:1", os.path.join(d, "ceiling.log")) as ref):
                    server0 = bench.proc_cpu_seconds(ref.pid)
                    before = resource.getrusage(resource.RUSAGE_CHILDREN)
                    started = time.perf_counter()
                    argv = [kcat, "-P", "-b", ref.bootstrap, "-t", "k", "-p", "0", *extra, "-l", path]
                    subprocess.run(argv, check=True, capture_output=True)
                    elapsed = time.perf_counter() - started
                    after = resource.getrusage(resource.RUSAGE_CHILDREN)
                    kcat_cpu = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
                    server_cpu = bench.proc_cpu_seconds(ref.pid) - server0
                    per_million = 1e6 / opts.records
                    print(f"{name:15} {opts.records / elapsed / 1e6:.2f}M records/s; CPU per million "
                          f"records: kcat {kcat_cpu * per_million:.2f} s, "
                          f"reference {server_cpu * per_million:.2f} s")
    finally:
        os.unlink(path)


if __name__ == "__main__":
    main()
