"""AlterShareGroupOffsets: v0 (KIP-932).

Behaviour: sets the share-partition start offset of partitions of an Empty share group: each partition's
share state starts again at the given offset with no in-flight records, at the next state epoch
(``broker.share_state.initialize``), and the share partitions in memory are dropped so the next fetch
loads the new state. A group that does not exist is created Empty, as Kafka does. Errors: top-level
NON_EMPTY_GROUP 68 while the group has members, GROUP_ID_NOT_FOUND 69 for a classic or consumer group,
INVALID_GROUP_ID 24 for an empty id, COORDINATOR_LOAD_IN_PROGRESS 14 while loading; per partition
UNKNOWN_TOPIC_OR_PARTITION 3 for a topic or partition that does not exist, INVALID_REQUEST 42 for a
negative start offset.
Authorization (with an authorizer): READ on the group, else GROUP_AUTHORIZATION_FAILED; READ on each
topic, else TOPIC_AUTHORIZATION_FAILED on its partitions, as Kafka's KafkaApis checks.
Version notes: v0 only.
Gaps: none known.
"""

from __future__ import annotations

from minibroker.errors import ErrorCode, KafkaError
from minibroker.handlers.registry import handles
from minibroker.handlers.share_group_offsets import change_offsets
from minibroker.protocol.codec import Struct
from minibroker.security.acls import AclOperation


def _partition(p: int, error: ErrorCode, message: str | None = None) -> Struct:
    return Struct(partition_index=p, error_code=int(error), error_message=message)


def _alter_topic(coordinator, group_id: str, t, info, topic_id: bytes, refused: bool) -> Struct:
    parts = []
    changed = False
    for p in t.partitions or ():
        if refused:
            parts.append(_partition(p.partition_index, ErrorCode.TOPIC_AUTHORIZATION_FAILED,
                                    "Topic authorization failed."))
        elif p.start_offset < 0 and info is not None and 0 <= p.partition_index < info.partitions:
            parts.append(_partition(p.partition_index, ErrorCode.INVALID_REQUEST,
                                    "The start offset must not be negative."))
        else:
            try:
                error = coordinator.alter_offset(group_id, t.topic_name, p.partition_index, p.start_offset)
            except KafkaError as e:
                parts.append(_partition(p.partition_index, e.code, e.message))
                continue
            changed |= error == ErrorCode.NONE
            parts.append(_partition(p.partition_index, error))
    if changed:
        coordinator.forget(group_id, {topic_id})
    return Struct(topic_name=t.topic_name, topic_id=topic_id, partitions=parts)


@handles(91, (0, 0))
def handle_alter_share_group_offsets(broker, header, request):
    return change_offsets(broker, header, request, AclOperation.READ, must_exist=False, ensure_group=True,
                          answer_topic=_alter_topic)
