#!/usr/bin/env python3
"""Share-group benchmark (issue 21): confluent-kafka's ShareConsumer against its classic Consumer, on the
same broker and the same records, in alternating rounds.

    python scripts/bench_share.py                   # full: 1,000,000 records of each size, 3 rounds (~3 min)
    python scripts/bench_share.py --quick           # 20,000 records, 3 rounds, under a minute
    python scripts/bench_share.py --records 100000 --rounds 5 --out /tmp/share.json
    python scripts/bench_share.py --quick --profile /tmp/share.prof   # the broker under cProfile

One ``minibroker serve`` (bench.py's BrokerProcess: uvloop when present, default settings but for
``group.initial.rebalance.delay.ms=0``) with one topic per value size (100 B and 1 KiB, ``--partitions``,
1 by default), filled once with confluent-kafka's Producer. Then, each round and each size, with fresh
group ids:

- baseline: one ``confluent_kafka.Consumer`` (classic group, ``subscribe``, ``auto.offset.reset``
  earliest, otherwise default settings) consuming until it has every record;
- baseline_nobackoff: the same with ``fetch.queue.backoff.ms=0``: librdkafka's default (1000 ms) pauses
  fetching for a second whenever 100,000 records (``queued.min.messages``) wait in its queue, which caps
  the default consumer near 100,000 records/s whatever the broker does;
- share-1: one ``confluent_kafka.ShareConsumer`` (implicit acknowledgement, default settings) in a group
  whose ``share.auto.offset.reset`` was set to earliest with IncrementalAlterConfigs on the GROUP
  resource before subscribing, polling until it has every record;
- share-3: three ShareConsumers of one group, one thread each, until they have every record between them.

Each figure is records/s from ``subscribe`` to the last record (group join and first fetch included), and
"steady" records/s from the first record to the last; duplicates (records delivered twice) are counted.
Ratios share/baseline are taken within each round, then the median over rounds. The broker's CPU seconds
(utime+stime from /proc/<pid>/stat) over each measurement are reported per million records; they include
the work of joining, and for the share consumers the acknowledgements of the last batches, sent as the
consumers close (inside the CPU window, outside the timed one).

``--profile FILE`` runs the broker under cProfile for a last share-1 round per size after the measured
rounds and writes its stats to FILE (profiled rounds are not reported as figures).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import threading
import time
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)
sys.path.insert(0, HERE)

import bench  # noqa: E402  (BrokerProcess, create_topic, proc_cpu_seconds, versions, machine)

SIZES = {"100B": 100, "1KiB": 1024}
MEASURES = ("baseline", "baseline_nobackoff", "share1", "share3")
# librdkafka's classic consumer stops fetching for fetch.queue.backoff.ms (1000 by default) whenever its
# pre-fetch queue holds queued.min.messages (100,000): that, not the broker, bounds the default baseline
NO_BACKOFF = {"fetch.queue.backoff.ms": 0}
CONSUME_TIMEOUT_S = 300.0  # a run that has not read every record by then is broken, not slow


def produce(bootstrap: str, topic: str, n: int, size: int, partitions: int) -> None:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "batch.size": 1 << 20,
                         "queue.buffering.max.messages": 1_000_000})
    value = os.urandom(size // 2 + 1).hex().encode()[:size]
    for i in range(n):
        while True:
            try:
                producer.produce(topic, value, partition=i % partitions)
                break
            except BufferError:
                producer.poll(0.001)
        if i % 10000 == 0:
            producer.poll(0)
    if producer.flush(120):
        raise RuntimeError("producer did not drain in 120 s")


def set_share_reset_earliest(bootstrap: str, group: str) -> None:
    from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource

    admin = AdminClient({"bootstrap.servers": bootstrap})
    resource = ConfigResource(ConfigResource.Type.GROUP, group, incremental_configs=[
        ConfigEntry("share.auto.offset.reset", "earliest", incremental_operation=AlterConfigOpType.SET)])
    for future in admin.incremental_alter_configs([resource]).values():
        future.result(30)


class Tally:
    """Records seen by one or more consumers: distinct (partition, offset), duplicates, first/last time."""

    def __init__(self, want: int):
        self.want = want
        self.seen: set[tuple[int, int]] = set()
        self.duplicates = 0
        self.first = self.last = None
        self.lock = threading.Lock()
        self.done = threading.Event()
        self.errors: list[str] = []

    def add(self, messages) -> None:
        now = time.perf_counter()
        with self.lock:
            for m in messages:
                if m.error() is not None:
                    self.errors.append(str(m.error()))
                    continue
                key = (m.partition(), m.offset())
                if key in self.seen:
                    self.duplicates += 1
                else:
                    self.seen.add(key)
            if messages and self.first is None:
                self.first = now
            if len(self.seen) >= self.want and not self.done.is_set():
                self.last = now
                self.done.set()


def own_cpu_seconds() -> float:
    """This process's CPU seconds: the Python client and librdkafka's threads."""
    t = os.times()
    return t.user + t.system


def _result(tally: Tally, t0: float, cpu: float, n: int, client_cpu: float) -> dict:
    steady = (n - 1) / (tally.last - tally.first) if tally.last > tally.first else float("nan")
    return {"records": n, "seconds": tally.last - t0, "records_per_s": n / (tally.last - t0),
            "steady_records_per_s": steady, "first_record_s": tally.first - t0,
            "duplicates": tally.duplicates, "broker_cpu_s": cpu,
            "broker_cpu_s_per_M": cpu / n * 1e6, "client_cpu_s_per_M": client_cpu / n * 1e6,
            "errors": tally.errors[:5]}


def run_classic(bootstrap: str, topic: str, n: int, broker_pid: int, extra: dict | None = None) -> dict:
    from confluent_kafka import Consumer

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"classic-{uuid.uuid4().hex[:12]}",
                         "auto.offset.reset": "earliest", **(extra or {})})
    tally = Tally(n)
    cpu0, client0 = bench.proc_cpu_seconds(broker_pid), own_cpu_seconds()
    t0 = time.perf_counter()
    consumer.subscribe([topic])
    deadline = t0 + CONSUME_TIMEOUT_S
    while not tally.done.is_set():
        if time.perf_counter() > deadline:
            raise RuntimeError(f"classic consumer read {len(tally.seen)} of {n} records")
        tally.add(consumer.consume(10000, 0.5))
    consumer.close()
    return _result(tally, t0, bench.proc_cpu_seconds(broker_pid) - cpu0, n, own_cpu_seconds() - client0)


def run_share(bootstrap: str, topic: str, n: int, consumers: int, broker_pid: int) -> dict:
    from confluent_kafka import ShareConsumer

    group = f"share-{uuid.uuid4().hex[:12]}"
    set_share_reset_earliest(bootstrap, group)
    # log_level 3: librdkafka's "share consumer is in Preview" warning, once per consumer, is not news here
    members = [ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group, "log_level": 3})
               for _ in range(consumers)]
    tally = Tally(n)
    failures: list[BaseException] = []

    def poll_loop(member) -> None:
        try:
            member.subscribe([topic])
            deadline = time.perf_counter() + CONSUME_TIMEOUT_S
            while not tally.done.is_set():
                if time.perf_counter() > deadline:
                    raise RuntimeError(f"share consumers read {len(tally.seen)} of {n} records")
                tally.add(member.poll(timeout=0.5))
        except BaseException as e:  # reported by the caller, after the other threads stop
            failures.append(e)
            tally.done.set()

    cpu0, client0 = bench.proc_cpu_seconds(broker_pid), own_cpu_seconds()
    t0 = time.perf_counter()
    threads = [threading.Thread(target=poll_loop, args=(m,)) for m in members]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for m in members:  # sends the acknowledgements of the last batches (implicit mode)
        m.close()
    cpu, client_cpu = bench.proc_cpu_seconds(broker_pid) - cpu0, own_cpu_seconds() - client0
    if failures:
        raise failures[0]
    return _result(tally, t0, cpu, n, client_cpu)


def profile_broker(opts, topics: dict[str, str], out_path: str) -> None:
    """The broker under cProfile, serving a topic copy and one share-1 round per size."""
    import cProfile  # noqa: F401  (only checks it is there; the broker runs it as -m cProfile)

    broker = bench.BrokerProcess(loop=opts.loop)
    cmd = [sys.executable, "-m", "cProfile", "-o", out_path, "-m", "minibroker", "serve", "--log-level",
           "WARNING", "--loop", opts.loop]
    for k, v in broker.overrides.items():
        cmd += ["--override", f"{k}={v}"]
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            env=bench.bench_env())
    try:
        bench.wait_port(broker.port)
        for label, topic in topics.items():
            bench.create_topic(broker.port, topic, opts.partitions)
            produce(broker.bootstrap, topic, opts.records, SIZES[label], opts.partitions)
            r = run_share(broker.bootstrap, topic, opts.records, 1, proc.pid)
            print(f"profiled share-1 {label}: {r['records_per_s']:,.0f} records/s (under cProfile)")
    finally:
        proc.terminate()
        proc.wait(60)
        subprocess.run(["rm", "-rf", broker.dir])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="20,000 records of each size, under a minute")
    ap.add_argument("--records", type=int, default=None, help="records per size (default 1,000,000)")
    ap.add_argument("--rounds", type=int, default=3, help="alternating rounds (each: baseline, share-1, "
                    "share-3 for each size)")
    ap.add_argument("--partitions", type=int, default=1)
    ap.add_argument("--loop", choices=("auto", "asyncio", "uvloop"), default="auto")
    ap.add_argument("--profile", help="write the broker's cProfile stats of a share-1 round here")
    ap.add_argument("--out", help="write the results as JSON here")
    opts = ap.parse_args(argv)
    opts.records = opts.records or (20_000 if opts.quick else 1_000_000)
    topics = {label: f"share-bench-{label}" for label in SIZES}
    runs: list[dict] = []
    started = time.perf_counter()
    with bench.BrokerProcess(loop=opts.loop) as broker:
        for label, topic in topics.items():
            bench.create_topic(broker.port, topic, opts.partitions)
            produce(broker.bootstrap, topic, opts.records, SIZES[label], opts.partitions)
        pid = broker.proc.pid
        for rnd in range(opts.rounds):
            for label, topic in topics.items():
                run = {"round": rnd, "size": label,
                       "baseline": run_classic(broker.bootstrap, topic, opts.records, pid),
                       "baseline_nobackoff": run_classic(broker.bootstrap, topic, opts.records, pid,
                                                         NO_BACKOFF),
                       "share1": run_share(broker.bootstrap, topic, opts.records, 1, pid),
                       "share3": run_share(broker.bootstrap, topic, opts.records, 3, pid)}
                runs.append(run)
                print(f"round {rnd} {label:5}: " + ", ".join(
                    f"{k} {run[k]['records_per_s']:,.0f}/s (steady {run[k]['steady_records_per_s']:,.0f}/s, "
                    f"cpu {run[k]['broker_cpu_s_per_M']:.1f} s/M, "
                    f"client cpu {run[k]['client_cpu_s_per_M']:.1f} s/M, dup {run[k]['duplicates']})"
                    for k in MEASURES), flush=True)
    measured_s = time.perf_counter() - started

    summary = {}
    for label in SIZES:
        mine = [r for r in runs if r["size"] == label]
        entry = {}
        for k in MEASURES:
            entry[k] = {f: statistics.median(r[k][f] for r in mine)
                        for f in ("records_per_s", "steady_records_per_s", "broker_cpu_s_per_M",
                                  "client_cpu_s_per_M", "first_record_s")}
            entry[k]["duplicates"] = sum(r[k]["duplicates"] for r in mine)
        for k in ("share1", "share3"):
            entry[f"{k}_vs_baseline"] = statistics.median(
                r[k]["records_per_s"] / r["baseline"]["records_per_s"] for r in mine)
            entry[f"{k}_vs_baseline_steady"] = statistics.median(
                r[k]["steady_records_per_s"] / r["baseline"]["steady_records_per_s"] for r in mine)
            entry[f"{k}_vs_baseline_per_round"] = [
                round(r[k]["records_per_s"] / r["baseline"]["records_per_s"], 3) for r in mine]
            entry[f"{k}_vs_baseline_nobackoff"] = statistics.median(
                r[k]["records_per_s"] / r["baseline_nobackoff"]["records_per_s"] for r in mine)
        summary[label] = entry
        print(f"{label:5} baseline with fetch.queue.backoff.ms=0: "
              f"{entry['baseline_nobackoff']['records_per_s']:,.0f}/s; share-1 against it "
              f"{entry['share1_vs_baseline_nobackoff']:.2f}, "
              f"share-3 {entry['share3_vs_baseline_nobackoff']:.2f}")
        print(f"{label:5} medians: baseline {entry['baseline']['records_per_s']:,.0f}/s; "
              f"share-1 {entry['share1']['records_per_s']:,.0f}/s = {entry['share1_vs_baseline']:.2f} "
              f"(steady {entry['share1_vs_baseline_steady']:.2f}); "
              f"share-3 {entry['share3']['records_per_s']:,.0f}/s = {entry['share3_vs_baseline']:.2f} "
              f"(steady {entry['share3_vs_baseline_steady']:.2f}); broker CPU s per M records: "
              f"{entry['baseline']['broker_cpu_s_per_M']:.1f} / {entry['share1']['broker_cpu_s_per_M']:.1f}"
              f" / {entry['share3']['broker_cpu_s_per_M']:.1f}; client CPU s per M records: "
              + " / ".join(f"{entry[k]['client_cpu_s_per_M']:.1f}" for k in ("baseline", "share1", "share3"))
              + "; first record after "
              + " / ".join(f"{entry[k]['first_record_s'] * 1000:.0f} ms"
                           for k in ("baseline", "share1", "share3")))
    print(f"measured in {measured_s:.0f} s")
    if opts.profile:
        profile_broker(opts, topics, opts.profile)
    if opts.out:
        results = {"when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "records": opts.records,
                   "rounds": opts.rounds, "partitions": opts.partitions, "loop": opts.loop,
                   "seconds": measured_s, "machine": bench.machine(), "versions": bench.versions(),
                   "load_average": os.getloadavg(), "summary": summary, "runs": runs}
        with open(opts.out, "w") as f:
            json.dump(results, f, indent=1, default=str)
    return 0


if __name__ == "__main__":
    sys.exit(main())
