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

from minibroker.coordinator.internal_topic import READ_CHUNK, InternalTopic, StoredRecord
from minibroker.errors import ErrorCode, KafkaError

__all__ = ["OFFSETS_TOPIC", "READ_CHUNK", "OffsetsTopic", "StoredRecord"]

log = logging.getLogger("minibroker.groups")

OFFSETS_TOPIC = "__consumer_offsets"
_PRODUCER_ERRORS = frozenset({ErrorCode.INVALID_PRODUCER_EPOCH, ErrorCode.PRODUCER_FENCED,
                              ErrorCode.INVALID_TXN_STATE, ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
                              ErrorCode.UNKNOWN_PRODUCER_ID})


class OffsetsTopic(InternalTopic):
    """Appends to and reads ``__consumer_offsets``; creates it on first need (compacted, like Kafka)."""

    def __init__(self, broker) -> None:
        super().__init__(broker, OFFSETS_TOPIC, lambda: broker.config["offsets.topic.num.partitions"],
                         self._configs, logger=log)

    def _configs(self) -> dict[str, str]:
        return {"cleanup.policy": "compact", "compression.type": "producer",
                "segment.bytes": str(self.broker.config["offsets.topic.segment.bytes"])}

    def map_append_error(self, e: KafkaError) -> KafkaError:
        # Kafka maps log append failures of the coordinator to retriable group errors.
        if e.code in (ErrorCode.MESSAGE_TOO_LARGE, ErrorCode.RECORD_LIST_TOO_LARGE,
                      ErrorCode.INVALID_FETCH_SIZE):
            return KafkaError(ErrorCode.INVALID_COMMIT_OFFSET_SIZE, str(e))
        if e.code in (ErrorCode.KAFKA_STORAGE_ERROR, ErrorCode.NOT_LEADER_OR_FOLLOWER):
            return KafkaError(ErrorCode.NOT_COORDINATOR, str(e))
        if e.code in _PRODUCER_ERRORS:  # a transactional commit's producer: the client must see why
            return e
        return KafkaError(ErrorCode.COORDINATOR_NOT_AVAILABLE, str(e))

    def append(self, group_id: str, entries: list[tuple[bytes, bytes | None]], *, producer_id: int = -1,
               producer_epoch: int = -1) -> None:
        """Append (key, value) records of one group as one batch; raises KafkaError when it cannot.
        With a ``producer_id`` the batch is transactional (that producer's, at ``producer_epoch``)."""
        super().append(group_id, entries, what=f"group {group_id}", producer_id=producer_id,
                       producer_epoch=producer_epoch)
