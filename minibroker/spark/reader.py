"""Batch and streaming readers: plans on the driver, offset ranges read as Arrow batches on executors."""

from __future__ import annotations

import logging
from collections.abc import Iterator

from pyspark.sql.datasource import DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.types import StructType

from .client import Cluster, fetch_range, report_data_loss
from .offsets import OffsetRange, rate_limit, split_ranges
from .options import KafkaOptions, offsets_from_json, offsets_to_json

try:  # pyspark >= 4.2: admission control (read limits) and Trigger.AvailableNow for Python sources
    from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows, SupportsTriggerAvailableNow
except ImportError:  # pyspark 4.0 / 4.1: latestOffset() takes no arguments
    ReadAllAvailable = ReadMaxRows = None

    class SupportsTriggerAvailableNow:  # type: ignore[no-redef]
        """Stand-in so the class definition below works on pyspark < 4.2 (never called there)."""


log = logging.getLogger("minibroker.spark")


class KafkaInputPartition(InputPartition):
    """One Spark task: an offset range of one Kafka partition."""

    def __init__(self, rng: OffsetRange):
        super().__init__(rng)
        self.range = rng


def arrow_schema(include_headers: bool):
    """The Arrow schema pyspark expects for the Kafka schema (timestamps as UTC microseconds)."""
    import pyarrow as pa

    fields = [
        pa.field("key", pa.binary()),
        pa.field("value", pa.binary()),
        pa.field("topic", pa.string()),
        pa.field("partition", pa.int32()),
        pa.field("offset", pa.int64()),
        pa.field("timestamp", pa.timestamp("us", tz="UTC")),
        pa.field("timestampType", pa.int32()),
    ]
    if include_headers:
        header = pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())])
        fields.append(pa.field("headers", pa.list_(pa.field("element", header))))
    return pa.schema(fields)


def to_record_batch(msgs: list, topic: str, partition: int, schema, include_headers: bool):
    """confluent Messages of one partition -> one pyarrow.RecordBatch in the Kafka source schema."""
    import pyarrow as pa

    n = len(msgs)
    stamps = [m.timestamp() for m in msgs]
    # confluent: (0 not available, 1 create time, 2 log append time); Kafka/Spark: -1, 0, 1.
    columns = [
        pa.array([m.key() for m in msgs], pa.binary()),
        pa.array([m.value() for m in msgs], pa.binary()),
        pa.array([topic] * n, pa.string()),
        pa.array([partition] * n, pa.int32()),
        pa.array([m.offset() for m in msgs], pa.int64()),
        pa.array([s[1] * 1000 for s in stamps], pa.int64()).cast(pa.timestamp("us", tz="UTC")),
        pa.array([s[0] - 1 for s in stamps], pa.int32()),
    ]
    if include_headers:
        columns.append(pa.array([m.headers() for m in msgs], schema.field("headers").type))
    return pa.RecordBatch.from_arrays(columns, schema=schema)


def read_partition(opts: KafkaOptions, rng: OffsetRange) -> Iterator:
    schema = arrow_schema(opts.include_headers)
    for msgs in fetch_range(opts, rng):
        yield to_record_batch(msgs, rng.topic, rng.partition, schema, opts.include_headers)


def _ranges(opts: KafkaOptions, start: dict, end: dict, earliest_for_new) -> list[OffsetRange]:
    """Offset ranges from start/end offsets; partitions new in ``end`` start at their earliest offset."""
    new = [tp for tp in end if tp not in start]
    new_start = earliest_for_new(new) if new else {}
    ranges = []
    for tp in sorted(end):
        until = end[tp]
        if tp in start:
            begin = start[tp]
        else:
            begin = new_start.get(tp, 0)
            if begin != 0:
                report_data_loss(opts.fail_on_data_loss,
                                 f"Added partition {tp[0]}-{tp[1]} starts from {begin} instead of 0")
        if until < begin:
            report_data_loss(opts.fail_on_data_loss,
                             f"Partition {tp[0]}-{tp[1]}'s offset was changed from {begin} to {until}")
            continue
        ranges.append(OffsetRange(tp[0], tp[1], begin, until))
    for tp in sorted(set(start) - set(end)):
        report_data_loss(opts.fail_on_data_loss, f"Partition {tp[0]}-{tp[1]} is gone (topic deleted?)")
    return ranges


class KafkaBatchReader(DataSourceReader):
    def __init__(self, opts: KafkaOptions, schema: StructType):
        self.opts = opts
        self.schema = schema

    def partitions(self):
        cluster = Cluster(self.opts)
        try:
            tps = cluster.topic_partitions()
            start = cluster.resolve(self.opts.starting, tps, ending=False)
            end = cluster.resolve(self.opts.ending, tps, ending=True)
            if self.opts.ending.kind == "specific":
                latest = cluster.latest(tps)
                for tp in tps:
                    if end[tp] > latest[tp]:
                        raise ValueError(f"endingOffsets {end[tp]} of {tp[0]}-{tp[1]} is beyond its latest "
                                         f"offset {latest[tp]}")
        finally:
            cluster.close()
        ranges = []
        for tp in tps:
            if start[tp] > end[tp]:
                raise RuntimeError(f"The starting offset {start[tp]} of {tp[0]}-{tp[1]} is after its ending "
                                   f"offset {end[tp]}")
            ranges.append(OffsetRange(tp[0], tp[1], start[tp], end[tp]))
        planned = split_ranges(ranges, self.opts.min_partitions, self.opts.max_records_per_partition)
        return [KafkaInputPartition(r) for r in planned]

    def read(self, partition):
        if partition.value is None:  # no Kafka partition had records in range
            return iter(())
        return read_partition(self.opts, partition.range)


class KafkaStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Micro-batch reader; offsets are Spark Kafka's JSON, ``{"topic": {"0": 23}}``."""

    def __init__(self, opts: KafkaOptions, schema: StructType):
        self.opts = opts
        self.schema = schema
        self._cluster: Cluster | None = None
        self._available_now: dict | None = None  # target offsets of Trigger.AvailableNow
        self._warned = False
        self._last_latest: dict | None = None  # for reportLatestOffset

    def __getstate__(self):
        state = dict(self.__dict__)
        state["_cluster"] = None
        return state

    @property
    def cluster(self) -> Cluster:
        if self._cluster is None:
            self._cluster = Cluster(self.opts)
        return self._cluster

    def initialOffset(self) -> dict:
        tps = self.cluster.topic_partitions()
        offsets = self.cluster.resolve(self.opts.starting, tps, ending=False)
        log.info("initial offsets %s", offsets)
        return offsets_to_json(offsets)

    def _latest(self) -> dict:
        tps = self.cluster.topic_partitions()
        latest = self.cluster.latest(tps)
        self._last_latest = latest
        return latest

    def prepareForTriggerAvailableNow(self) -> None:
        self._available_now = self._latest()

    def getDefaultReadLimit(self):
        if ReadMaxRows is not None and self.opts.max_offsets_per_trigger:
            return ReadMaxRows(self.opts.max_offsets_per_trigger)
        return ReadAllAvailable() if ReadAllAvailable is not None else None

    def latestOffset(self, start: dict | None = None, limit=None) -> dict:
        """End offset of the next micro-batch.

        pyspark >= 4.2 passes the batch's start offset and a read limit (ReadAllAvailable, or
        ReadMaxRows from ``maxOffsetsPerTrigger``). pyspark 4.1 calls it without arguments and cannot
        say whether the trigger is AvailableNow (where Spark asks once and stops at the answer), so
        there every micro-batch reads all available records and ``maxOffsetsPerTrigger`` is ignored.
        """
        latest = dict(self._available_now) if self._available_now is not None else self._latest()
        if start is None:
            if self.opts.max_offsets_per_trigger and not self._warned:
                self._warned = True
                log.warning("maxOffsetsPerTrigger needs pyspark >= 4.2 (read limits for Python data "
                            "sources); each micro-batch reads all available records")
            return offsets_to_json(latest)
        max_rows = getattr(limit, "max_rows", None)
        if max_rows:
            begin = offsets_from_json(start)
            new = [tp for tp in latest if tp not in begin]
            if new:  # partitions that appeared since start begin at their earliest offset
                begin = {**begin, **self.cluster.earliest(new)}
            latest = rate_limit(max_rows, begin, latest)
        return offsets_to_json(latest)

    def reportLatestOffset(self):
        return offsets_to_json(self._last_latest) if self._last_latest is not None else None

    def partitions(self, start: dict, end: dict):
        begin, until = offsets_from_json(start), offsets_from_json(end)
        if begin == until:
            return []
        ranges = _ranges(self.opts, begin, until, self.cluster.earliest)
        planned = split_ranges(ranges, self.opts.min_partitions, self.opts.max_records_per_partition)
        return [KafkaInputPartition(r) for r in planned]

    def read(self, partition):
        return read_partition(self.opts, partition.range)

    def commit(self, end: dict) -> None:
        """Nothing to do: like Spark's Kafka source, offsets live in the checkpoint, not in Kafka."""

    def stop(self) -> None:
        if self._cluster is not None:
            self._cluster.close()
            self._cluster = None
