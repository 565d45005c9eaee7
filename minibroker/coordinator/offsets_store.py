"""``__consumer_offsets``: where committed offsets and group metadata live, in Kafka's record formats.

Owner: the ``GroupCoordinator`` (the only caller). Writes are v2 batches appended through the
replica manager with ``from_client=False``, synchronously (no await between building a batch and
appending it), so a commit is in the log before its response is sent. Loading reads every
partition from its log start to its end; later records win and a null value (tombstone) deletes,
which is what log compaction would leave behind.

Transactional offset commits (TxnOffsetCommit) are written as Kafka writes them: a transactional
batch carrying the producer id and epoch and base sequence 0 (Kafka 3.9's ``GroupMetadataManager`` and
``CoordinatorRuntime`` both build it so), whatever the producer sent before: an append that is not
from a client has its epoch checked, not its sequence (Kafka's ``AppendOrigin.COORDINATOR``). The
transaction's COMMIT or ABORT marker (a control batch, written by the transaction coordinator) later
decides whether they count. Reading yields those records with their producer id, and each marker, so
a load can replay them.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from typing import NamedTuple

from minibroker.coordinator.group_records import partition_for
from minibroker.errors import ErrorCode, KafkaError

log = logging.getLogger("minibroker.groups")

OFFSETS_TOPIC = "__consumer_offsets"
READ_CHUNK = 1 << 20
# Produce version handed to the validator for internal appends: any v2-capable version does.
_INTERNAL_PRODUCE_VERSION = 9
_PRODUCER_ERRORS = frozenset({ErrorCode.INVALID_PRODUCER_EPOCH, ErrorCode.PRODUCER_FENCED,
                              ErrorCode.INVALID_TXN_STATE, ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
                              ErrorCode.UNKNOWN_PRODUCER_ID})


class StoredRecord(NamedTuple):
    """One record of ``__consumer_offsets`` as a load replays it.

    ``producer_id`` is -1 unless the record was written in a transaction (TxnOffsetCommit). A
    transaction marker has no key or value, its producer id, and ``commit`` True (COMMIT) or False
    (ABORT); ``commit`` is None for every other record."""

    key: bytes | None
    value: bytes | None
    producer_id: int = -1
    commit: bool | None = None


class OffsetsTopic:
    """Appends to and reads ``__consumer_offsets``; creates it on first need (compacted, like Kafka)."""

    def __init__(self, broker) -> None:
        self.broker = broker
        cfg = broker.config
        info = broker.logs.topics.get(OFFSETS_TOPIC)
        self.num_partitions = info.partitions if info is not None else cfg["offsets.topic.num.partitions"]

    @property
    def exists(self) -> bool:
        return OFFSETS_TOPIC in self.broker.logs.topics

    def ensure_topic(self) -> None:
        if self.exists:
            return
        from minibroker.topic_admin import create_topic

        cfg = self.broker.config
        configs = {"cleanup.policy": "compact", "compression.type": "producer",
                   "segment.bytes": str(cfg["offsets.topic.segment.bytes"])}
        try:
            info = create_topic(self.broker, OFFSETS_TOPIC, self.num_partitions, -1, configs)
        except KafkaError as e:
            if e.code != ErrorCode.TOPIC_ALREADY_EXISTS:
                raise
            info = self.broker.logs.topics[OFFSETS_TOPIC]
        self.num_partitions = info.partitions
        log.info("created %s with %d partitions", OFFSETS_TOPIC, info.partitions)

    def partition_for(self, group_id: str) -> int:
        return partition_for(group_id, self.num_partitions)

    def append(self, group_id: str, entries: list[tuple[bytes, bytes | None]], *, producer_id: int = -1,
               producer_epoch: int = -1) -> None:
        """Append (key, value) records of one group as one batch; raises KafkaError when it cannot.
        With a ``producer_id`` the batch is transactional (that producer's, at ``producer_epoch``)."""
        if not entries:
            return
        from minibroker.records import v2

        ts = int(time.time() * 1000)
        try:
            self.ensure_topic()
            partition = self.partition_for(group_id)
            sequence = -1 if producer_id < 0 else 0  # Kafka's baseSequence for a TxnOffsetCommit batch
            batch = v2.build_batch([(i, ts, key, value, ()) for i, (key, value) in enumerate(entries)],
                                   producer_id=producer_id, producer_epoch=producer_epoch,
                                   base_sequence=sequence, is_transactional=producer_id >= 0)
            self.broker.replicas.append_records(OFFSETS_TOPIC, partition, batch, _INTERNAL_PRODUCE_VERSION,
                                                from_client=False)
        except KafkaError as e:
            # Kafka maps log append failures of the coordinator to retriable group errors.
            log.warning("could not write group %s to %s: %s", group_id, OFFSETS_TOPIC, e)
            if e.code in (ErrorCode.MESSAGE_TOO_LARGE, ErrorCode.RECORD_LIST_TOO_LARGE,
                          ErrorCode.INVALID_FETCH_SIZE):
                raise KafkaError(ErrorCode.INVALID_COMMIT_OFFSET_SIZE, str(e)) from e
            if e.code in (ErrorCode.KAFKA_STORAGE_ERROR, ErrorCode.NOT_LEADER_OR_FOLLOWER):
                raise KafkaError(ErrorCode.NOT_COORDINATOR, str(e)) from e
            if e.code in _PRODUCER_ERRORS:  # a transactional commit's producer: the client must see why
                raise
            raise KafkaError(ErrorCode.COORDINATOR_NOT_AVAILABLE, str(e)) from e

    def read_partition(self, partition: int) -> Iterator[StoredRecord]:
        """Every record and transaction marker of one partition from its log start to its current end,
        in order."""
        from minibroker.records import ControlType, parse_control_record, v2
        from minibroker.records.batches import batch_at

        plog = self.broker.logs.get_log(OFFSETS_TOPIC, partition)
        if plog is None:
            return
        start = plog.log_start_offset
        for data, entry in plog.iter_entries(start, READ_CHUNK):
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
                            yield StoredRecord(bytes(buf[key_start:key_end]), value, producer_id)
                    continue
            for record in batch.records():  # control batches, and anything the walk would not take
                if record.offset < start:
                    continue
                if batch.is_control:
                    marker = parse_control_record(record)
                    if marker is not None and producer_id >= 0:
                        yield StoredRecord(None, None, producer_id, marker.control_type == ControlType.COMMIT)
                elif record.key is not None:
                    yield StoredRecord(record.key, record.value, producer_id)
