"""``__consumer_offsets``: where committed offsets and group metadata live, in Kafka's record formats.

Owner: the ``GroupCoordinator`` (the only caller). Writes are v2 batches appended through the
replica manager with ``from_client=False``, synchronously (no await between building a batch and
appending it), so a commit is in the log before its response is sent. Loading reads every
partition from its log start to its end; later records win and a null value (tombstone) deletes,
which is what log compaction would leave behind.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator

from minibroker.coordinator.group_records import partition_for
from minibroker.errors import ErrorCode, KafkaError

log = logging.getLogger("minibroker.groups")

OFFSETS_TOPIC = "__consumer_offsets"
READ_CHUNK = 1 << 20
# Produce version handed to the validator for internal appends: any v2-capable version does.
_INTERNAL_PRODUCE_VERSION = 9


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

    def append(self, group_id: str, entries: list[tuple[bytes, bytes | None]]) -> None:
        """Append (key, value) records of one group as one batch; raises KafkaError when it cannot."""
        if not entries:
            return
        from minibroker.records import v2

        ts = int(time.time() * 1000)
        batch = v2.build_batch([(i, ts, key, value, ()) for i, (key, value) in enumerate(entries)])
        try:
            self.ensure_topic()
            self.broker.replicas.append_records(OFFSETS_TOPIC, self.partition_for(group_id), batch,
                                                _INTERNAL_PRODUCE_VERSION, from_client=False)
        except KafkaError as e:
            # Kafka maps log append failures of the coordinator to retriable group errors.
            log.warning("could not write group %s to %s: %s", group_id, OFFSETS_TOPIC, e)
            if e.code in (ErrorCode.MESSAGE_TOO_LARGE, ErrorCode.RECORD_LIST_TOO_LARGE,
                          ErrorCode.INVALID_FETCH_SIZE):
                raise KafkaError(ErrorCode.INVALID_COMMIT_OFFSET_SIZE, str(e)) from e
            if e.code in (ErrorCode.KAFKA_STORAGE_ERROR, ErrorCode.NOT_LEADER_OR_FOLLOWER):
                raise KafkaError(ErrorCode.NOT_COORDINATOR, str(e)) from e
            raise KafkaError(ErrorCode.COORDINATOR_NOT_AVAILABLE, str(e)) from e

    def read_partition(self, partition: int) -> Iterator[tuple[bytes, bytes | None]]:
        """Every (key, value) of one partition from its log start to its current end, in order."""
        from minibroker.records.batches import batch_at

        plog = self.broker.logs.get_log(OFFSETS_TOPIC, partition)
        if plog is None:
            return
        start = plog.log_start_offset
        for data, entry in plog.iter_entries(start, READ_CHUNK):
            batch = batch_at(data, entry.position)
            if batch.is_control:
                continue
            for record in batch.records():
                if record.offset >= start and record.key is not None:
                    yield record.key, record.value
