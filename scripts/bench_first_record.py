#!/usr/bin/env python3
"""First record through a kafka-python consumer group, from `minibroker serve` with no config (issue 15).

    python scripts/bench_first_record.py              # 5 fresh brokers per case
    python scripts/bench_first_record.py --runs 10 --json out.json

Each run starts `python -m minibroker serve` in a fresh temporary directory, with no properties file
and no overrides (only when 127.0.0.1:9092 is taken is the listener moved to a free port, and the
report says so), produces one record to an auto-created topic, then times a new `KafkaConsumer` in a
group (`group_id`, `auto_offset_reset="earliest"`) from its construction to its first record: the
FindCoordinator, JoinGroup, SyncGroup, OffsetFetch and Fetch a first consumer goes through.

Two cases, alternating, so both see the same machine load:

- `embedded defaults`: what `minibroker serve` does out of the box;
- `delay 3000 ms`: the same with `--override group.initial.rebalance.delay.ms=3000`, Kafka's code
  default (and minibroker's embedded default before issue 15).

Reported per case: the median and range of consumer-to-first-record, and of process start to first
record (start-up, the produce and the consumer together). The goal is consumer-to-first-record
< 0.5 s with the embedded defaults. kafka-python is imported before the clock starts.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import socket
import statistics
import subprocess
import sys
import tempfile
import time

READY_RE = re.compile(rb"minibroker ready: .* listening on [A-Z_]+://([^:,\s]*):(\d+)")
CASES = {
    "embedded defaults": [],
    "delay 3000 ms (Kafka's code default)": ["--override", "group.initial.rebalance.delay.ms=3000"],
}
TOPIC = "first-record"


def port_9092_free() -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", 9092))
        except OSError:
            return False
    return True


def one_run(extra: list[str], use_default_port: bool) -> dict[str, float]:
    from kafka import KafkaConsumer, KafkaProducer

    with tempfile.TemporaryDirectory(prefix="mb-first-record-") as cwd:
        args = [sys.executable, "-m", "minibroker", "serve", *extra]
        if not use_default_port:
            args += ["--override", "listeners=PLAINTEXT://127.0.0.1:0"]
        env = {k: v for k, v in os.environ.items() if not k.startswith("KAFKA_")}
        t_start = time.monotonic()
        proc = subprocess.Popen(args, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        try:
            port = None
            output = b""
            while port is None:
                line = proc.stdout.readline()
                if not line:
                    raise RuntimeError(f"broker exited before it was ready:\n{output.decode()}")
                output += line
                m = READY_RE.search(line)
                if m:
                    port = int(m.group(2))
            t_ready = time.monotonic()
            bootstrap = f"127.0.0.1:{port}"
            producer = KafkaProducer(bootstrap_servers=bootstrap)
            producer.send(TOPIC, b"first").get(timeout=10)
            producer.close()
            t_consumer = time.monotonic()
            consumer = KafkaConsumer(TOPIC, bootstrap_servers=bootstrap, group_id="first-record-group",
                                     auto_offset_reset="earliest")
            record = None
            while record is None and time.monotonic() - t_consumer < 30:
                for records in consumer.poll(timeout_ms=50).values():
                    record = records[0]
            t_first = time.monotonic()
            consumer.close()
            if record is None or record.value != b"first":
                raise RuntimeError("the consumer got no record within 30 s")
        finally:
            proc.terminate()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
    return {"startup_s": t_ready - t_start, "consumer_to_first_record_s": t_first - t_consumer,
            "serve_to_first_record_s": t_first - t_start}


def summary(values: list[float]) -> str:
    return f"median {statistics.median(values):.3f} s (min {min(values):.3f}, max {max(values):.3f})"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5, help="fresh brokers per case (default 5)")
    parser.add_argument("--json", metavar="PATH", help="also write the raw figures as JSON")
    args = parser.parse_args(argv)

    import kafka  # noqa: F401  imported before any clock starts

    default_port = port_9092_free()
    if not default_port:
        print("127.0.0.1:9092 is taken: the brokers listen on a free port instead (the only override)")
    results: dict[str, list[dict[str, float]]] = {name: [] for name in CASES}
    for _ in range(args.runs):
        for name, extra in CASES.items():
            results[name].append(one_run(extra, default_port))
    for name, runs in results.items():
        print(f"{name} ({len(runs)} runs)")
        print(f"  consumer to first record: {summary([r['consumer_to_first_record_s'] for r in runs])}")
        print(f"  process start to first record: {summary([r['serve_to_first_record_s'] for r in runs])}")
    goal = statistics.median(r["consumer_to_first_record_s"] for r in results["embedded defaults"])
    print(f"goal: consumer to first record < 0.5 s with the embedded defaults: "
          f"{'met' if goal < 0.5 else 'NOT met'} ({goal:.3f} s)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"default_port": default_port, "results": results}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
