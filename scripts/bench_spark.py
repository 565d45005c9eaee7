#!/usr/bin/env python3
"""Throughput of the minibroker Spark data source against a plain confluent-kafka consumer.

    python scripts/bench_spark.py                     # 1M records, own minibroker (process mode)
    python scripts/bench_spark.py --records 200000
    python scripts/bench_spark.py --bootstrap-server HOST:PORT

One topic (``--partitions``, default 4) gets ``--records`` records (8-byte keys, ``--value-size``
byte values, default 100) from a confluent-kafka producer. Then, in the same run and against the
same records, each reader is timed from start to last record:

- ``confluent-kafka, 1 process``: one Consumer assigned to every partition, reading from offset 0 and
  touching key, value, offset and timestamp of each message (the ceiling for one Python process;
  same fetch sizes as the data source's consumers: 8 MiB per partition);
- ``spark batch``: ``spark.read.format("minibroker")`` over all partitions, aggregating the value
  lengths (every row is fetched, turned into an Arrow batch and handed to the JVM);
- ``spark streaming``: ``spark.readStream.format("minibroker")`` from earliest with
  ``trigger(availableNow=True)`` into the ``noop`` sink.

Spark runs ``local[N]`` (``--cores``, default 2) after a warm-up query, so session start-up and the
first Python worker launch are not counted. Each figure is the median of ``--reps`` runs (default 3).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from contextlib import ExitStack


def produce(bootstrap: str, topic: str, partitions: int, records: int, value_size: int) -> float:
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=1)])[topic].result(30)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.size": 1_000_000,
                         "queue.buffering.max.messages": 1_000_000})
    value = b"v" * value_size
    start = time.perf_counter()
    for i in range(records):
        while True:
            try:
                producer.produce(topic, key=b"%08d" % i, value=value, partition=i % partitions)
                break
            except BufferError:
                producer.poll(0.05)
        if i % 10_000 == 0:
            producer.poll(0)
    assert producer.flush(120) == 0
    return time.perf_counter() - start


def read_confluent(bootstrap: str, topic: str, partitions: int, records: int) -> float:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-spark",
                         "enable.auto.commit": False, "queued.min.messages": 100_000,
                         "fetch.wait.max.ms": 100, "max.partition.fetch.bytes": 8 << 20,
                         "fetch.max.bytes": 64 << 20})
    start = time.perf_counter()
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    seen = 0
    size = 0
    while seen < records:
        for m in consumer.consume(10_000, timeout=1.0):
            if m.error():
                continue
            key, value, _offset, _ts = m.key(), m.value(), m.offset(), m.timestamp()
            size += len(value) + len(key)
            seen += 1
    elapsed = time.perf_counter() - start
    consumer.close()
    return elapsed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bootstrap-server")
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--value-size", type=int, default=100)
    parser.add_argument("--cores", type=int, default=2)
    parser.add_argument("--reps", type=int, default=3)
    args = parser.parse_args(argv)

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    with ExitStack() as stack:
        bootstrap = args.bootstrap_server
        if bootstrap is None:
            from minibroker.testing import BrokerRunner

            # A separate process, so the broker does not share this interpreter's GIL with the readers.
            broker = stack.enter_context(BrokerRunner(mode="process"))
            bootstrap = broker.bootstrap_servers
        topic = f"bench-spark-{int(time.time())}"
        took = produce(bootstrap, topic, args.partitions, args.records, args.value_size)
        print(f"produced {args.records} records to {topic} ({args.partitions} partitions) in {took:.1f} s",
              flush=True)

        from pyspark.sql import SparkSession
        from pyspark.sql import functions as F

        from minibroker.spark import register

        spark = (SparkSession.builder.master(f"local[{args.cores}]").appName("minibroker-bench")
                 .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
                 .config("spark.driver.memory", "2g").getOrCreate())
        spark.sparkContext.setLogLevel("ERROR")
        register(spark)
        kafka = {"kafka.bootstrap.servers": bootstrap, "subscribe": topic}
        checkpoints = stack.enter_context(tempfile.TemporaryDirectory(prefix="bench-spark-"))

        def spark_batch() -> float:
            start = time.perf_counter()
            row = (spark.read.format("minibroker").options(**kafka).load()
                   .agg(F.count("*").alias("n"), F.sum(F.length("value")).alias("bytes")).first())
            elapsed = time.perf_counter() - start
            assert row.n == args.records, row
            return elapsed

        runs = 0

        def spark_streaming() -> float:
            nonlocal runs
            runs += 1
            start = time.perf_counter()
            query = (spark.readStream.format("minibroker").options(**kafka)
                     .option("startingOffsets", "earliest").load()
                     .writeStream.format("noop").trigger(availableNow=True)
                     .option("checkpointLocation", os.path.join(checkpoints, str(runs))).start())
            query.awaitTermination()
            elapsed = time.perf_counter() - start
            read = sum(p["numInputRows"] for p in query.recentProgress)
            assert read == args.records, read
            return elapsed

        ten_each = json.dumps({topic: {str(p): 10 for p in range(args.partitions)}})
        # warm-up: JVM code paths and Python workers
        spark.read.format("minibroker").options(**kafka).option("endingOffsets", ten_each).load().count()

        results = {}
        def confluent() -> float:
            return read_confluent(bootstrap, topic, args.partitions, args.records)

        for name, fn in (("confluent-kafka, 1 process", confluent), ("spark batch", spark_batch),
                         ("spark streaming (availableNow)", spark_streaming)):
            times = [fn() for _ in range(args.reps)]
            results[name] = times
            print(f"{name}: {', '.join(f'{t:.2f}' for t in times)} s", flush=True)
        spark.stop()

    import pyspark

    base = args.records / statistics.median(results["confluent-kafka, 1 process"])
    print(f"\n{args.records} records, {args.value_size} B values, {args.partitions} partitions; "
          f"Spark local[{args.cores}]; pyspark {pyspark.__version__}, Python {platform.python_version()}, "
          f"{os.cpu_count()} CPUs\n")
    print("| reader | median s | rows/s | vs confluent-kafka |")
    print("|---|---:|---:|---:|")
    for name, times in results.items():
        median = statistics.median(times)
        rate = args.records / median
        print(f"| {name} | {median:.2f} | {rate:,.0f} | {rate / base:.2f}x |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
