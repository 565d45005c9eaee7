"""Talking to Kafka with confluent-kafka (librdkafka): topic metadata, offset look-ups, range reads.

The driver uses :class:`Cluster` (AdminClient: Metadata and ListOffsets) to turn option values into
offsets; executors use :func:`fetch_range` (a Consumer assigned to one partition, no group
membership, no commits) to read exactly ``[from_offset, until_offset)``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Iterator

from .offsets import OffsetRange, TopicPartition
from .options import EARLIEST, LATEST, KafkaOptions, OffsetSpec, OptionError

log = logging.getLogger("minibroker.spark")

INTERNAL_TOPICS = {"__consumer_offsets", "__transaction_state"}

DATA_LOSS_HINT = (
    "Some data may have been lost because they are not available in Kafka any more; either the data "
    "was aged out by Kafka or the topic may have been deleted before all the data in the topic was "
    "processed. If you want your query to continue in such cases, set the source option "
    '"failOnDataLoss" to "false".')


class DataLossError(RuntimeError):
    pass


def report_data_loss(fail: bool, message: str) -> None:
    if fail:
        raise DataLossError(f"{message}. {DATA_LOSS_HINT}")
    log.warning("%s. Some data may have been lost (failOnDataLoss=false).", message)


class Cluster:
    """Driver-side look-ups (one AdminClient, created lazily; not picklable, so not kept on readers)."""

    def __init__(self, opts: KafkaOptions, timeout: float = 30.0):
        from confluent_kafka.admin import AdminClient

        self.opts = opts
        self.timeout = timeout
        self.admin = AdminClient(opts.admin_config())

    def close(self) -> None:
        self.admin = None

    def _retry(self, what: str, fn):
        attempts = max(1, self.opts.fetch_offset_num_retries)
        for attempt in range(attempts):
            try:
                return fn()
            except Exception as e:  # noqa: BLE001 - librdkafka raises KafkaException and friends
                if attempt + 1 >= attempts:
                    raise RuntimeError(f"{what} failed after {attempts} attempts: {e}") from e
                log.warning("%s failed (attempt %d): %s", what, attempt + 1, e)
                time.sleep(self.opts.fetch_offset_retry_interval_ms / 1000)

    def topic_partitions(self) -> list[TopicPartition]:
        """The partitions the subscription covers now (assign: exactly the given ones)."""
        if self.opts.strategy == "assign":
            return list(self.opts.assigned)
        md = self._retry("Metadata", lambda: self.admin.list_topics(timeout=self.timeout))
        out = []
        for name, topic in md.topics.items():
            if name in INTERNAL_TOPICS or topic.error is not None or not self.opts.matches(name):
                continue
            out.extend((name, p) for p in topic.partitions)
        return sorted(out)

    def list_offsets(self, specs: dict[TopicPartition, int]) -> dict[TopicPartition, int]:
        """ListOffsets for EARLIEST, LATEST or a timestamp (ms); -1 where no record matches a timestamp."""
        if not specs:
            return {}
        from confluent_kafka import IsolationLevel
        from confluent_kafka import TopicPartition as TP
        from confluent_kafka.admin import OffsetSpec as Spec

        def spec(v: int):
            if v == EARLIEST:
                return Spec.earliest()
            if v == LATEST:
                return Spec.latest()
            return Spec.for_timestamp(v)

        level = IsolationLevel.READ_COMMITTED if self.opts.read_committed else IsolationLevel.READ_UNCOMMITTED

        def call():
            futures = self.admin.list_offsets({TP(t, p): spec(v) for (t, p), v in specs.items()},
                                              isolation_level=level, request_timeout=self.timeout)
            return {(tp.topic, tp.partition): f.result().offset for tp, f in futures.items()}

        return self._retry("ListOffsets", call)

    def earliest(self, tps: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        return self.list_offsets(dict.fromkeys(tps, EARLIEST))

    def latest(self, tps: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        return self.list_offsets(dict.fromkeys(tps, LATEST))

    def resolve(self, spec: OffsetSpec, tps: list[TopicPartition], *,
                ending: bool) -> dict[TopicPartition, int]:
        """Concrete offsets for every partition in ``tps`` from a starting/ending option."""
        name = "endingOffsets" if ending else "startingOffsets"
        if spec.kind == "earliest":
            return self.earliest(tps)
        if spec.kind == "latest":
            return self.latest(tps)
        if spec.kind == "specific":
            _check_covers(spec.offsets, tps, name)
            wanted = {tp: spec.offsets[tp] for tp in tps}
            symbolic = {tp: v for tp, v in wanted.items() if v in (EARLIEST, LATEST)}
            resolved = self.list_offsets(symbolic)
            return {tp: resolved.get(tp, v) for tp, v in wanted.items()}
        if spec.kind == "timestamp":
            stamps = dict.fromkeys(tps, spec.timestamp)
        else:
            _check_covers(spec.offsets, tps, name.replace("Offsets", "OffsetsByTimestamp"))
            stamps = {tp: spec.offsets[tp] for tp in tps}
        found = self.list_offsets(stamps)
        missing = [tp for tp, off in found.items() if off < 0]
        if missing:
            if not ending and self.opts.starting_by_timestamp_strategy == "error":
                t, p = missing[0]
                raise RuntimeError(
                    f"No offset matched the starting timestamp {stamps[missing[0]]} for partition {t}-{p} "
                    "(no record at or after it). Set startingOffsetsByTimestampStrategy=latest to start "
                    "from the latest offset instead.")
            found.update(self.latest(missing))
        return found


def _check_covers(offsets: dict[TopicPartition, int], tps: list[TopicPartition], name: str) -> None:
    given = set(offsets)
    if given != set(tps):
        missing = sorted(set(tps) - given)
        extra = sorted(given - set(tps))
        raise OptionError(
            f"If {name} contains specific offsets, you must specify all TopicPartitions. Use -1 for latest, "
            f"-2 for earliest. Specified: {sorted(given)}; assigned partitions: {sorted(tps)}"
            + (f"; missing {missing}" if missing else "") + (f"; unknown {extra}" if extra else ""))


def fetch_range(opts: KafkaOptions, rng: OffsetRange, max_batch: int = 10_000) -> Iterator[list]:
    """Read ``[from_offset, until_offset)`` of one partition; yields lists of confluent Messages.

    Offsets missing inside the range (compaction, transaction markers) are skipped; records gone from
    the log (retention, truncation, deleted topic) are data loss, raised unless failOnDataLoss=false.
    """
    from confluent_kafka import Consumer, KafkaError
    from confluent_kafka import TopicPartition as TP

    conf = opts.consumer_config("executor")
    conf.setdefault("isolation.level", "read_uncommitted")  # Kafka's Java default (librdkafka's is committed)
    conf.setdefault("fetch.wait.max.ms", 100)
    conf.setdefault("queued.min.messages", max(100_000, max_batch))
    # One partition per consumer: larger fetches mean fewer round trips (librdkafka's default is 1 MiB).
    conf.setdefault("max.partition.fetch.bytes", 8 << 20)
    consumer = Consumer(conf)
    timeout = opts.poll_timeout_ms / 1000
    topic, partition = rng.topic, rng.partition
    where = f"{topic}-{partition}"
    try:
        low, high = consumer.get_watermark_offsets(TP(topic, partition), timeout=min(timeout, 60.0),
                                                   cached=False)
        if opts.read_committed:
            # The end of a read_committed range is the last stable offset; let the fetch find it.
            high = max(high, rng.until_offset)
        start, end = rng.from_offset, rng.until_offset
        if start < low:
            report_data_loss(opts.fail_on_data_loss,
                             f"Cannot fetch offset {start} of {where}: the earliest offset is now {low}")
            start = low
        if end > high:
            report_data_loss(opts.fail_on_data_loss,
                             f"Cannot fetch offsets up to {end} of {where}: the latest offset is now {high}")
            end = high
        if start >= end:
            return
        consumer.assign([TP(topic, partition, start)])
        next_offset = start
        deadline = time.monotonic() + timeout
        while next_offset < end:
            # Ask for exactly what remains (+1 for the end-of-partition event) so consume() returns as
            # soon as the range is complete instead of waiting out its timeout.
            msgs = consumer.consume(min(max_batch, end - next_offset + 1), timeout=min(1.0, timeout))
            chunk = []
            for m in msgs:
                err = m.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        if m.offset() < end:
                            report_data_loss(opts.fail_on_data_loss,
                                             f"{where} ends at offset {m.offset()}, before the end {end} "
                                             "of the range being read")
                        next_offset = end
                        break
                    if err.code() == KafkaError._AUTO_OFFSET_RESET:
                        report_data_loss(opts.fail_on_data_loss,
                                         f"Offset {next_offset} of {where} is out of range: {err.str()}")
                        return
                    if err.retriable() or not err.fatal():
                        log.warning("fetch %s: %s", where, err.str())
                        continue
                    raise RuntimeError(f"Reading {where}: {err.str()}")
                off = m.offset()
                if off >= end:
                    next_offset = end
                    break
                chunk.append(m)
                next_offset = off + 1
            if chunk:
                deadline = time.monotonic() + timeout
                yield chunk
            elif next_offset < end and time.monotonic() > deadline:
                raise TimeoutError(f"Cannot fetch record for offset {next_offset} of {where} in "
                                   f"{opts.poll_timeout_ms} milliseconds (kafkaConsumer.pollTimeoutMs)")
    finally:
        consumer.close()
