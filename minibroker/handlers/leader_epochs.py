"""The leader epoch check shared by Fetch, ListOffsets and OffsetForLeaderEpoch, and the epoch the
Metadata answers show.

A partition's leader epoch is its log's (``PartitionLog.leader_epoch``: 0 for a new partition, raised
by ``start_leader_epoch``, as a fault rule's ``bump_leader_epoch`` does). A client naming a newer epoch
has heard of a leader we never were (UNKNOWN_LEADER_EPOCH); an older one is fenced
(FENCED_LEADER_EPOCH); -1 means "no check".
"""

from __future__ import annotations

from minibroker.errors import ErrorCode, KafkaError


def check_current_leader_epoch(epoch: int, current: int) -> None:
    if epoch > current:
        raise KafkaError(ErrorCode.UNKNOWN_LEADER_EPOCH, f"leader epoch {epoch} is newer than {current}")
    if 0 <= epoch < current:
        raise KafkaError(ErrorCode.FENCED_LEADER_EPOCH, f"leader epoch {epoch} is older than {current}")


def leader_epoch_of(broker, topic: str, partition: int) -> int:
    """The partition's leader epoch for Metadata answers; 0 for a partition with no log here (its dir
    failed at start-up), as every partition had before its first election."""
    try:
        return broker.logs.get_log(topic, partition).leader_epoch
    except KafkaError:
        return 0
