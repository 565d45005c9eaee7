#!/usr/bin/env python3
"""An end-to-end Spark Structured Streaming pipeline on minibroker, in one command.

    python scripts/spark_pipeline.py                       # starts its own minibroker
    python scripts/spark_pipeline.py --bootstrap-server HOST:PORT   # or any Kafka cluster

1. A producer (confluent-kafka) writes purchase events as JSON to the topic ``events`` (3 partitions),
   keyed by user, in three waves while the query runs.
2. A Structured Streaming query reads ``events`` with the ``minibroker`` data source, parses the
   JSON, and counts purchases and sums amounts per user and 1-minute event-time window
   (watermark 2 minutes, output mode update).
3. Each micro-batch's updated windows go to the topic ``user-window-totals`` (key = user, value =
   JSON) with the same data source, and to Parquet files.
4. At the end it prints the micro-batches, the final totals from the Parquet files, the last records
   of ``user-window-totals`` read back with a batch query, and checks that every event was counted once.

Needs ``pip install 'minibroker[spark]'`` and Java 17+.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import sys
import tempfile
import threading
import time
from contextlib import ExitStack
from datetime import UTC, datetime

EVENTS_TOPIC = "events"
TOTALS_TOPIC = "user-window-totals"
USERS = ["alice", "bob", "carol", "dave"]
BASE_TIME = datetime(2026, 1, 1, 12, 0, tzinfo=UTC).timestamp()  # fixed: the output is reproducible


def make_events(count: int, seed: int = 9) -> list[dict]:
    """Purchases spread over five minutes of event time, in time order."""
    rng = random.Random(seed)
    events = []
    for i in range(count):
        t = BASE_TIME + i * 300.0 / count
        events.append({"user": rng.choice(USERS), "amount": round(rng.uniform(1, 100), 2),
                       "event_time": datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")})
    return events


def create_topics(bootstrap: str) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    existing = admin.list_topics(timeout=30).topics
    new = [NewTopic(name, num_partitions=parts, replication_factor=1)
           for name, parts in ((EVENTS_TOPIC, 3), (TOTALS_TOPIC, 1)) if name not in existing]
    for future in admin.create_topics(new).values() if new else ():
        future.result(30)


def produce_in_waves(bootstrap: str, events: list[dict], waves: int, pause: float) -> None:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 10, "compression.type": "lz4",
                         "partitioner": "murmur2_random"})
    size = -(-len(events) // waves)
    for w in range(waves):
        chunk = events[w * size:(w + 1) * size]
        for e in chunk:
            producer.produce(EVENTS_TOPIC, key=e["user"].encode(), value=json.dumps(e).encode())
        producer.flush(30)
        print(f"producer: wave {w + 1}/{waves} sent {len(chunk)} events", flush=True)
        if w + 1 < waves:
            time.sleep(pause)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bootstrap-server",
                        help="an existing Kafka or minibroker (default: start a minibroker)")
    parser.add_argument("--events", type=int, default=3000, help="events to produce (default 3000)")
    parser.add_argument("--output",
                        help="directory for the Parquet output and checkpoint (default: temporary)")
    args = parser.parse_args(argv)

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    with ExitStack() as stack:
        bootstrap = args.bootstrap_server
        if bootstrap is None:
            from minibroker.testing import BrokerRunner

            bootstrap = stack.enter_context(BrokerRunner(log_level="WARNING")).bootstrap_servers
            print(f"started minibroker on {bootstrap}")
        out_dir = args.output or stack.enter_context(tempfile.TemporaryDirectory(prefix="spark-pipeline-"))
        parquet_dir, checkpoint = os.path.join(out_dir, "totals.parquet"), os.path.join(out_dir, "checkpoint")
        for path in (parquet_dir, checkpoint):
            shutil.rmtree(path, ignore_errors=True)
        create_topics(bootstrap)
        return run(bootstrap, make_events(args.events), parquet_dir, checkpoint)


def run(bootstrap: str, events: list[dict], parquet_dir: str, checkpoint: str) -> int:
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F
    from pyspark.sql.window import Window

    from minibroker.spark import register

    spark = (SparkSession.builder.master("local[2]").appName("minibroker-pipeline")
             .config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", "2")
             .config("spark.sql.session.timeZone", "UTC").config("spark.ui.showConsoleProgress", "false")
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    kafka = {"kafka.bootstrap.servers": bootstrap}

    schema = "user STRING, amount DOUBLE, event_time TIMESTAMP"
    totals = (spark.readStream.format("minibroker").options(**kafka)
              .option("subscribe", EVENTS_TOPIC).option("startingOffsets", "earliest").load()
              .select(F.from_json(F.col("value").cast("string"), schema).alias("e")).select("e.*")
              .withWatermark("event_time", "2 minutes")
              .groupBy(F.window("event_time", "1 minute"), "user")
              .agg(F.count("*").alias("purchases"), F.round(F.sum("amount"), 2).alias("total")))

    batches: list[tuple[int, int]] = []

    def write_both(df, batch_id: int) -> None:
        df = df.select(F.col("window.start").alias("window_start"), "user", "purchases", "total").persist()
        (df.select(F.col("user").alias("key"), F.to_json(F.struct(*df.columns)).alias("value"))
         .write.format("minibroker").options(**kafka).option("topic", TOTALS_TOPIC).mode("append").save())
        df.withColumn("batch_id", F.lit(batch_id)).write.mode("append").parquet(parquet_dir)
        batches.append((batch_id, df.count()))
        df.unpersist()

    query = (totals.writeStream.outputMode("update").foreachBatch(write_both)
             .option("checkpointLocation", checkpoint).trigger(processingTime="2 seconds").start())
    while query.lastProgress is None:  # the first (empty) micro-batch has run: Spark is warmed up
        time.sleep(0.2)
    producer = threading.Thread(target=produce_in_waves, args=(bootstrap, events, 3, 3.0))
    producer.start()
    producer.join()
    query.processAllAvailable()
    progress = [(p["batchId"], p["numInputRows"]) for p in query.recentProgress if p["numInputRows"]]
    query.stop()

    print("\nmicro-batches (batch id: events read -> windows updated):")
    updated = dict(batches)
    for batch_id, rows in progress:
        print(f"  {batch_id}: {rows} -> {updated.get(batch_id, 0)}")

    latest = (spark.read.parquet(parquet_dir)
              .withColumn("last", F.max("batch_id").over(Window.partitionBy("window_start", "user")))
              .where("batch_id = last").drop("last", "batch_id")
              .orderBy("window_start", "user"))
    print(f"\nfinal totals per user and minute (Parquet {parquet_dir}):")
    latest.select(F.date_format("window_start", "HH:mm").alias("minute"), "user", "purchases", "total") \
        .show(40, truncate=False)

    topic = (spark.read.format("minibroker").options(**kafka).option("subscribe", TOTALS_TOPIC).load()
             .select("partition", "offset", F.col("key").cast("string").alias("key"),
                     F.col("value").cast("string").alias("value")))
    print(f"last records of topic {TOTALS_TOPIC} ({topic.count()} records, one per updated window):")
    topic.orderBy(F.desc("offset")).limit(4).orderBy("offset").show(truncate=False)

    counted = latest.agg(F.sum("purchases")).first()[0]
    total = round(sum(e["amount"] for e in events), 2)
    summed = round(latest.agg(F.sum("total")).first()[0], 2)
    ok = counted == len(events) and abs(summed - total) < 0.05
    print(f"check: {counted} purchases counted of {len(events)} produced, amounts {summed} vs {total}: "
          f"{'OK' if ok else 'MISMATCH'}")
    spark.stop()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
