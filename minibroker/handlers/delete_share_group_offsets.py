"""DeleteShareGroupOffsets: v0 (KIP-932).

Behaviour: deletes the share state of every partition of the named topics in an Empty share group
(``broker.share_state.delete``; tombstones in ``__share_group_state``) and drops those share partitions
from memory: the next member to fetch starts them again from ``share.auto.offset.reset``. Errors:
top-level GROUP_ID_NOT_FOUND 69 for an unknown group or one of another type, NON_EMPTY_GROUP 68 while it
has members, INVALID_GROUP_ID 24, COORDINATOR_LOAD_IN_PROGRESS 14; per topic UNKNOWN_TOPIC_OR_PARTITION 3
for a topic that does not exist.
Authorization (with an authorizer): DELETE on the group, else GROUP_AUTHORIZATION_FAILED; READ on each
topic, else TOPIC_AUTHORIZATION_FAILED for it, as Kafka's KafkaApis checks.
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


@handles(92, (0, 0))
def handle_delete_share_group_offsets(broker, header, request):
    coordinator = broker.groups.share
    if not authorize(broker, header, AclOperation.DELETE, ResourceType.GROUP, request.group_id):
        return _failed(ErrorCode.GROUP_AUTHORIZATION_FAILED, "Group authorization failed.")
    refused = denied(broker, header, AclOperation.READ, ResourceType.TOPIC,
                     [t.topic_name for t in request.topics or ()])
    responses = []
    try:
        coordinator.check_admin_group(request.group_id, must_exist=True, must_be_empty=True)
        for t in request.topics or ():
            info = broker.logs.topics.get(t.topic_name)
            topic_id = bytes(info.id) if info is not None else ZERO_UUID
            message = None
            if t.topic_name in refused:
                error, message = ErrorCode.TOPIC_AUTHORIZATION_FAILED, "Topic authorization failed."
            else:
                try:
                    error = coordinator.delete_offsets(request.group_id, t.topic_name)
                except KafkaError as e:
                    error, message = e.code, e.message
            responses.append(Struct(topic_name=t.topic_name, topic_id=topic_id, error_code=int(error),
                                    error_message=message))
    except KafkaError as e:
        return _failed(e.code, e.message)
    return Struct(throttle_time_ms=0, error_code=0, error_message=None, responses=responses)
