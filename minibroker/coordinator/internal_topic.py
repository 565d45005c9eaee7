"""The coordinators' internal topics: ``__consumer_offsets``, ``__transaction_state``,
``__share_group_state``.

``InternalTopic`` owns what they share: the topic is created on first need with the coordinator's topic
configs; records are appended as one v2 batch through the replica manager with ``from_client=False``,
synchronously (no await between building the batch and appending it), so a write is in the log before its
answer is sent; a load reads every record of a partition from its log start to its end. Each coordinator
maps a failed append to the error codes its own clients expect (``map_append_error``).

Which partition holds a key: ``abs(hashCode(key)) % partitions`` with Java's ``String.hashCode``, as
Kafka's coordinators do.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from typing import NamedTuple, NoReturn

from minibroker.coordinator.group_records import partition_for
from minibroker.errors import ErrorCode, KafkaError

log = logging.getLogger("minibroker.coordinator")

READ_CHUNK = 1 << 20
# Produce version handed to the validator for internal appends: any v2-capable version does.
INTERNAL_PRODUCE_VERSION = 9


class StoredRecord(NamedTuple):
    """One record of an internal topic as a load replays it.

    ``producer_id`` is -1 unless the record was written in a transaction (TxnOffsetCommit). A
    transaction marker has no key or value, its producer id, and ``commit`` True (COMMIT) or False
    (ABORT); ``commit`` is None for every other record. ``offset`` is the record's offset (-1 when
    unknown, as in stand-ins)."""

    key: bytes | None
    value: bytes | None
    producer_id: int = -1
    commit: bool | None = None
    offset: int = -1


class InternalTopic:
    """Appends to and reads one internal topic; creates it on first need.

    ``topic_configs`` is called when the topic is created; ``default_partitions`` gives the partition count
    to create it with, and is called only when the topic does not exist yet."""

    # The base sequence of a batch written outside a transaction (producer id -1). Kafka's group and
    # share coordinators (CoordinatorRuntime's MemoryRecordsBuilder) write 0 there; the transaction
    # coordinator (MemoryRecords.withRecords) writes -1 (NO_SEQUENCE): its topic overrides this.
    plain_base_sequence = 0

    def __init__(self, broker, name: str, default_partitions: Callable[[], int],
                 topic_configs: Callable[[], dict[str, str]], *, read_chunk: int = READ_CHUNK,
                 logger: logging.Logger = log) -> None:
        self.broker = broker
        self.name = name
        self._topic_configs = topic_configs
        self.read_chunk = read_chunk
        self._log = logger
        info = broker.logs.topics.get(name)
        self.num_partitions = info.partitions if info is not None else default_partitions()

    @property
    def exists(self) -> bool:
        return self.name in self.broker.logs.topics

    def ensure_topic(self) -> None:
        if self.exists:
            return
        try:  # through the broker: topic creation is a service above the coordinators (Broker.create_topic)
            info = self.broker.create_topic(self.name, self.num_partitions, -1, self._topic_configs())
        except KafkaError as e:
            if e.code != ErrorCode.TOPIC_ALREADY_EXISTS:
                raise
            info = self.broker.logs.topics[self.name]
        self.num_partitions = info.partitions
        self._log.info("created %s with %d partitions", self.name, info.partitions)

    def partition_for(self, key: str) -> int:
        return partition_for(key, self.num_partitions)

    def map_append_error(self, e: KafkaError) -> KafkaError:
        """The error the coordinator's client gets for a failed append; the raw error by default."""
        return e


    def append_to(self, partition: int, entries: list[tuple[bytes, bytes | None]], *, what: str,
                  producer_id: int = -1, producer_epoch: int = -1):
        """Append (key, value) records to ``partition`` as one batch (creating the topic first if needed);
        raises ``map_append_error`` of the KafkaError when it cannot. With a ``producer_id`` the batch is
        transactional (that producer's, at ``producer_epoch``, base sequence 0 as Kafka's coordinators
        write it); without, producer id and epoch are -1 and the base sequence ``plain_base_sequence``.
        ``what`` names the writer in the warning. Returns the replica manager's AppendOutcome (its
        ``base_offset`` is the first record's offset), None when there was nothing to append."""
        if not entries:
            return None
        from minibroker.records import v2

        ts = int(time.time() * 1000)
        try:
            self.ensure_topic()
            sequence = self.plain_base_sequence if producer_id < 0 else 0
            batch = v2.build_batch([(i, ts, key, value, ()) for i, (key, value) in enumerate(entries)],
                                   producer_id=producer_id, producer_epoch=producer_epoch,
                                   base_sequence=sequence, is_transactional=producer_id >= 0)
            return self.broker.replicas.append_records(self.name, partition, batch, INTERNAL_PRODUCE_VERSION,
                                                       from_client=False)
        except KafkaError as e:
            self._append_failed(e, what)

    def _append_failed(self, e: KafkaError, what: str) -> NoReturn:
        """Log a failed write and raise the error the coordinator's client gets for it (called in the
        ``except`` that caught ``e``)."""
        self._log.warning("could not write %s to %s: %s", what, self.name, e)
        mapped = self.map_append_error(e)
        if mapped is e:
            raise e
        raise mapped from e

    def append(self, key: str, entries: list[tuple[bytes, bytes | None]], *, what: str | None = None,
               **kw) -> None:
        """``append_to`` the partition of ``key`` (computed after the topic exists); ``what`` names the
        writer in the warning (``key`` by default)."""
        if not entries:
            return
        what = key if what is None else what
        try:
            self.ensure_topic()
        except KafkaError as e:
            self._append_failed(e, what)
        self.append_to(self.partition_for(key), entries, what=what, **kw)

    def read_partition(self, partition: int) -> Iterator[StoredRecord]:
        """Every record and transaction marker of one partition from its log start to its current end,
        in order."""
        from minibroker.records import ControlType, parse_control_record, v2
        from minibroker.records.batches import batch_at

        plog = self.broker.logs.get_log(self.name, partition)
        if plog is None:
            return
        start = plog.log_start_offset
        for data, entry in plog.iter_entries(start, self.read_chunk):
            batch = batch_at(data, entry.position)
            producer_id = batch.producer_id if batch.is_transactional else -1
            if entry.magic == 2 and not batch.is_control:
                # Keys and values only, from the records' lengths (v2.record_keys): what a load needs.
                h = v2.BatchHeader(data, entry.position)
                buf, rstart, rend = v2.records_section(h)
                spans = v2.record_keys(buf, rstart, rend, h.record_count)
                if spans is not None:
                    base = h.base_offset
                    for delta, key_start, key_end, value_start, value_end in spans:
                        if key_start >= 0 and base + delta >= start:
                            value = bytes(buf[value_start:value_end]) if value_start >= 0 else None
                            yield StoredRecord(bytes(buf[key_start:key_end]), value, producer_id, None,
                                               base + delta)
                    continue
            for record in batch.records():  # control batches, and anything the walk would not take
                if record.offset < start:
                    continue
                if batch.is_control:
                    marker = parse_control_record(record)
                    if marker is not None and producer_id >= 0:
                        yield StoredRecord(None, None, producer_id, marker.control_type == ControlType.COMMIT,
                                           record.offset)
                elif record.key is not None:
                    yield StoredRecord(record.key, record.value, producer_id, None, record.offset)


def coordinator_append_error(e: KafkaError) -> KafkaError:
    """Kafka's coordinators' mapping of a failed append (the transaction coordinator's
    TransactionStateManager and the share coordinator's runtime alike): a failed or moved log is
    NOT_COORDINATOR, a too-large batch an unknown server error, anything else COORDINATOR_NOT_AVAILABLE
    (retriable)."""
    if e.code in (ErrorCode.MESSAGE_TOO_LARGE, ErrorCode.RECORD_LIST_TOO_LARGE):
        return KafkaError(ErrorCode.UNKNOWN_SERVER_ERROR, str(e))
    if e.code in (ErrorCode.KAFKA_STORAGE_ERROR, ErrorCode.NOT_LEADER_OR_FOLLOWER):
        return KafkaError(ErrorCode.NOT_COORDINATOR, str(e))
    return KafkaError(ErrorCode.COORDINATOR_NOT_AVAILABLE, str(e))
