"""What fault injection (minibroker/server/faults.py) costs a Produce when no rule acts on it.

Small raw Produce frames (100 B records, 10 a batch: the per-request cost is what a hook adds to) from
scripts/bench.py's generator, against brokers started in alternating rounds, so that drift on a shared
machine falls on every side alike:

- ``off``: this tree, default config (the hook is one attribute check);
- ``on``: ``fault.injection.enable=true``, no rule;
- ``rule elsewhere``: enabled with one rule on another topic (every request is matched against it);
- ``baseline``: another tree's code (``--baseline /path/to/checkout``, e.g. main before the feature).

Figures are the broker's CPU time per request (from /proc: far less sensitive than wall time to the other
processes of a shared machine) and records/s, medians, with ratios to ``off`` (or to the baseline).

    python scripts/bench_faults.py [--rounds 5] [--requests 20000] [--baseline /work/main]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from bench import (  # noqa: E402
    BrokerProcess,
    create_topic,
    free_port,
    proc_cpu_seconds,
    produce_frames,
    run_generator,
)

from minibroker.records.codecs import Compression  # noqa: E402

RECORD_SIZE, PER_BATCH = 100, 10


def _rule_elsewhere(port: int) -> None:
    body = json.dumps({"api": "Produce", "topic": "elsewhere", "error": "KAFKA_STORAGE_ERROR"}).encode()
    request = urllib.request.Request(f"http://127.0.0.1:{port}/faults/rules", data=body, method="POST")
    urllib.request.urlopen(request, timeout=10).close()


class BaselineBroker(BrokerProcess):
    """A broker running another checkout's code: ``python -m`` puts the working directory first on the
    path, so it runs from there (bytecode off: nothing is written into that tree)."""

    def __init__(self, tree: str, overrides: dict[str, str]):
        super().__init__(overrides, env={"PYTHONPATH": tree, "PYTHONDONTWRITEBYTECODE": "1"})
        self.tree = tree

    def start(self) -> BrokerProcess:
        import subprocess
        import time

        from bench import wait_port

        cmd = [sys.executable, "-m", "minibroker", "serve", "--log-level", "WARNING", "--loop", self.loop]
        for k, v in self.overrides.items():
            cmd += ["--override", f"{k}={v}"]
        t0 = time.perf_counter()
        self.proc = subprocess.Popen(cmd, cwd=self.tree, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                     env=self.env)
        wait_port(self.port)
        self.startup_s = time.perf_counter() - t0
        return self


def measure(kind: str, frames: list[bytes], requests: int, baseline: str | None) -> tuple[float, float]:
    """(broker CPU µs per request, records/s) of one broker of ``kind``."""
    overrides: dict[str, str] = {}
    metrics = None
    if kind in ("on", "rule elsewhere"):
        overrides["fault.injection.enable"] = "true"
    if kind == "rule elsewhere":
        metrics = free_port()
        overrides["metrics.port"] = str(metrics)
    broker = BaselineBroker(baseline, overrides) if kind == "baseline" else BrokerProcess(overrides)
    with broker:
        create_topic(broker.port, "raw")
        if metrics is not None:
            _rule_elsewhere(metrics)
        run_generator(broker.port, frames, max(200, requests // 10))  # warm-up
        cpu = proc_cpu_seconds(broker.proc.pid)
        elapsed = run_generator(broker.port, frames, requests)
        cpu = proc_cpu_seconds(broker.proc.pid) - cpu
    return cpu / requests * 1e6, requests * PER_BATCH / elapsed


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--requests", type=int, default=20000)
    ap.add_argument("--baseline", help="a checkout whose code is the baseline (e.g. main before the feature)")
    opts = ap.parse_args(argv)
    frames = produce_frames("raw", 1, RECORD_SIZE, PER_BATCH, Compression.NONE)
    kinds = ["off", "on", "rule elsewhere"] + (["baseline"] if opts.baseline else [])
    cpu: dict[str, list[float]] = {k: [] for k in kinds}
    rates: dict[str, list[float]] = {k: [] for k in kinds}
    for _ in range(opts.rounds):
        for kind in kinds:
            us, rate = measure(kind, frames, opts.requests, opts.baseline)
            cpu[kind].append(us)
            rates[kind].append(rate)
    reference = "baseline" if opts.baseline else "off"
    ref_cpu, ref_rate = statistics.median(cpu[reference]), statistics.median(rates[reference])
    print(f"| produce {RECORD_SIZE} B x{PER_BATCH}, raw frames, {opts.rounds} alternating rounds | broker "
          f"CPU per request, median (min-max) | ratio to {reference} | records/s | ratio to {reference} |")
    print("|---|---|---|---|---|")
    for kind in kinds:
        us, rate = sorted(cpu[kind]), statistics.median(rates[kind])
        print(f"| {kind} | {statistics.median(us):.1f} µs ({us[0]:.1f}-{us[-1]:.1f}) | "
              f"{statistics.median(us) / ref_cpu:.3f} | {rate / 1e3:.0f}k | {rate / ref_rate:.3f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
