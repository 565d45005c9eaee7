"""The leader epoch check shared by Fetch, ListOffsets and OffsetForLeaderEpoch.

Every partition is at leader epoch 0 on one node. A client naming a newer epoch has heard of
a leader we never were (UNKNOWN_LEADER_EPOCH); an older one cannot exist; -1 means "no check".
"""

from __future__ import annotations

from minibroker.errors import ErrorCode, KafkaError

LEADER_EPOCH = 0


def check_current_leader_epoch(epoch: int) -> None:
    if epoch > LEADER_EPOCH:
        raise KafkaError(ErrorCode.UNKNOWN_LEADER_EPOCH, f"leader epoch {epoch} is newer than {LEADER_EPOCH}")
    if 0 <= epoch < LEADER_EPOCH:
        raise KafkaError(ErrorCode.FENCED_LEADER_EPOCH, f"leader epoch {epoch} is fenced")
