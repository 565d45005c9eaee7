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
from minibroker.protocol.codec import Struct
from minibroker.protocol.declarations import ZERO_UUID
from minibroker.security.acls import AclOperation, ResourceType
from minibroker.security.authorizer import authorize, denied


def _failed(code: ErrorCode, message: str | None = None) -> Struct:
    return Struct(throttle_time_ms=0, error_code=int(code), error_message=message, responses=[])


def _partition(p: int, error: ErrorCode, message: str | None = None) -> Struct:
    return Struct(partition_index=p, error_code=int(error), error_message=message)


@handles(91, (0, 0))
def handle_alter_share_group_offsets(broker, header, request):
    coordinator = broker.groups.share
    if not authorize(broker, header, AclOperation.READ, ResourceType.GROUP, request.group_id):
        return _failed(ErrorCode.GROUP_AUTHORIZATION_FAILED, "Group authorization failed.")
    refused = denied(broker, header, AclOperation.READ, ResourceType.TOPIC,
                     [t.topic_name for t in request.topics or ()])
    responses = []
    try:
        coordinator.check_admin_group(request.group_id, must_exist=False, must_be_empty=True)
        coordinator.ensure_group(request.group_id)
        for t in request.topics or ():
            info = broker.logs.topics.get(t.topic_name)
            topic_id = bytes(info.id) if info is not None else ZERO_UUID
            parts = []
            changed = False
            for p in t.partitions or ():
                if t.topic_name in refused:
                    parts.append(_partition(p.partition_index, ErrorCode.TOPIC_AUTHORIZATION_FAILED,
                                            "Topic authorization failed."))
                elif p.start_offset < 0 and info is not None and 0 <= p.partition_index < info.partitions:
                    parts.append(_partition(p.partition_index, ErrorCode.INVALID_REQUEST,
                                            "The start offset must not be negative."))
                else:
                    try:
                        error = coordinator.alter_offset(request.group_id, t.topic_name, p.partition_index,
                                                         p.start_offset)
                    except KafkaError as e:
                        parts.append(_partition(p.partition_index, e.code, e.message))
                        continue
                    changed |= error == ErrorCode.NONE
                    parts.append(_partition(p.partition_index, error))
            if changed:
                coordinator.forget(request.group_id, {topic_id})
            responses.append(Struct(topic_name=t.topic_name, topic_id=topic_id, partitions=parts))
    except KafkaError as e:
        return _failed(e.code, e.message)
    return Struct(throttle_time_ms=0, error_code=0, error_message=None, responses=responses)
