"""What fault injection (minibroker/server/faults.py) costs a Produce when no rule acts on it.

Small raw Produce frames (100 B records, 10 a batch: the per-request cost is what a hook adds to) from
scripts/bench.py's generator, against brokers started in alternating rounds, so that drift on a shared
machine falls on every side alike:

- ``off``: this tree, default config (the hook is one attribute check);
- ``on``: ``fault.injection.enable=true``, no rule;
- ``rule elsewhere``: enabled with one rule on another topic (every request is matched against it);
- ``baseline``: another tree's code (``--baseline /path/to/checkout``, e.g. main before the feature).

Two tables: first the CPU time of the loop's thread per request through ``KafkaConnection._handle_frame``
in-process (no sockets; each run in a fresh interpreter, fastest of the rounds), which isolates the hook;
then, over sockets, the broker process's CPU time per request (from /proc) and records/s, medians. Ratios
are to ``off``, or to the baseline when given. A baseline tree is an export of the code before the feature
(``git archive <commit> minibroker | tar -x -C /tmp/base``); nothing is written into it.

    python scripts/bench_faults.py [--rounds 5] [--requests 20000] [--baseline /tmp/base] [--in-process-only]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
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
    request = urllib.request.Request(f"http://127.0.0.1:{port}/faults/rules", data=body, method="POST",
                                     headers={"Content-Type": "application/json"})
    urllib.request.urlopen(request, timeout=10).close()


def measure(kind: str, frames: list[bytes], requests: int, baseline: str | None) -> tuple[float, float]:
    """(broker CPU µs per request, records/s) of one broker of ``kind``."""
    overrides: dict[str, str] = {}
    metrics = None
    if kind in ("on", "rule elsewhere"):
        overrides["fault.injection.enable"] = "true"
    if kind == "rule elsewhere":
        metrics = free_port()
        overrides["metrics.port"] = str(metrics)
    # a baseline tree's code runs from there, bytecode off: nothing is written into that tree
    baseline_env = {"PYTHONDONTWRITEBYTECODE": "1"}
    broker = (BrokerProcess(overrides, tree=baseline, env=baseline_env) if kind == "baseline"
              else BrokerProcess(overrides))
    with broker:
        create_topic(broker.port, "raw")
        if metrics is not None:
            _rule_elsewhere(metrics)
        run_generator(broker.port, frames, max(200, requests // 10))  # warm-up
        cpu = proc_cpu_seconds(broker.proc.pid)
        elapsed = run_generator(broker.port, frames, requests)
        cpu = proc_cpu_seconds(broker.proc.pid) - cpu
    return cpu / requests * 1e6, requests * PER_BATCH / elapsed


class _Transport:
    """Just enough of an asyncio transport for ``KafkaConnection`` to answer into."""

    def __init__(self):
        self.written = 0

    def set_write_buffer_limits(self, high=None, low=None):
        pass

    def get_extra_info(self, name, default=None):
        return ("127.0.0.1", 1) if name == "peername" else default

    def write(self, data):
        self.written += len(data)

    def get_write_buffer_size(self):
        return 0

    def pause_reading(self):
        pass

    def resume_reading(self):
        pass

    def close(self):
        pass

    abort = close


def one_in_process(kind: str, requests: int) -> float:
    """CPU µs per Produce request through ``KafkaConnection._handle_frame`` (decode, hook, append,
    answer) on a thread-mode broker of ``kind``: the hook's own cost, without sockets."""
    import asyncio
    import gc

    from minibroker.handlers.registry import HANDLERS
    from minibroker.server.connection import KafkaConnection
    from minibroker.testing import BrokerRunner

    frame = produce_frames("inproc", 1, RECORD_SIZE, PER_BATCH, Compression.NONE)[0][4:]

    async def run(broker, kind: str) -> float:
        if kind != "off":
            from minibroker.server.faults import FaultInjector  # not in a baseline tree

            broker.faults = FaultInjector(broker)
        if kind == "rule elsewhere":
            broker.faults.add({"api": "Produce", "topic": "elsewhere", "error": "KAFKA_STORAGE_ERROR"})
        conn = KafkaConnection(broker, 1 << 30)
        conn.connection_made(_Transport())
        view = memoryview(frame)
        for _ in range(200):  # warm: else the first request's handler import (a task) is what is timed
            conn._handle_frame(view)
        if conn.in_flight is not None:
            await conn.in_flight
        assert HANDLERS.get(0) is not None and conn.idle
        # CPU time of the loop's thread (other processes' load does not count), the collector off
        gc.collect()
        gc.disable()
        t0 = time.thread_time()
        for _ in range(requests):
            conn._handle_frame(view)
        elapsed = time.thread_time() - t0
        gc.enable()
        conn.close()
        broker.connections.discard(conn)  # never accepted by the socket server: nothing else to undo
        if kind != "off":
            broker.faults = None
        return elapsed / requests * 1e6

    with BrokerRunner() as runner:
        runner.create_topic("inproc")
        return asyncio.run_coroutine_threadsafe(run(runner.broker, kind), runner._loop).result(120)


def in_process(rounds: int, requests: int, baseline: str | None = None) -> dict[str, float]:
    """``one_in_process`` for each kind, alternating, each in a fresh interpreter (a baseline tree's code
    runs in its own); the fastest of ``rounds`` per kind."""
    import subprocess

    best = {"off": float("inf"), "on": float("inf"), "rule elsewhere": float("inf")}
    if baseline:
        best["baseline"] = float("inf")
    for _ in range(rounds):
        for kind in best:
            env = None
            if kind == "baseline":  # that tree's code, nothing written into it
                env = {**os.environ, "PYTHONPATH": baseline, "PYTHONDONTWRITEBYTECODE": "1"}
            args = ["_one", "off" if kind == "baseline" else kind, str(requests)]
            out = subprocess.run([sys.executable, os.path.abspath(__file__), *args], capture_output=True,
                                 text=True, check=True, timeout=300, env=env,
                                 cwd=baseline if kind == "baseline" else None)
            best[kind] = min(best[kind], float(out.stdout.strip().splitlines()[-1]))
    return best


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--requests", type=int, default=20000)
    ap.add_argument("--baseline", help="a checkout whose code is the baseline (e.g. main before the feature)")
    ap.add_argument("--in-process-only", action="store_true", help="only the in-process figure (no sockets)")
    opts = ap.parse_args(argv)
    best = in_process(max(opts.rounds, 5), opts.requests, opts.baseline)
    reference = "baseline" if opts.baseline else "off"
    print(f"| produce {RECORD_SIZE} B x{PER_BATCH} through KafkaConnection._handle_frame, in-process | "
          f"CPU µs per request, fastest of {max(opts.rounds, 5)} | ratio to {reference} |")
    print("|---|---|---|")
    for kind, us in best.items():
        print(f"| {kind} | {us:.2f} | {us / best[reference]:.3f} |")
    print()
    if opts.in_process_only:
        return 0
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
    if sys.argv[1:2] == ["_one"]:
        print(one_in_process(sys.argv[2], int(sys.argv[3])))
        sys.exit(0)
    sys.exit(main())
