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
from minibroker.handlers.share_group_offsets import change_offsets
from minibroker.protocol.codec import Struct
from minibroker.security.acls import AclOperation


def _delete_topic(coordinator, group_id: str, t, info, topic_id: bytes, refused: bool) -> Struct:
    message = None
    if refused:
        error, message = ErrorCode.TOPIC_AUTHORIZATION_FAILED, "Topic authorization failed."
    else:
        try:
            error = coordinator.delete_offsets(group_id, t.topic_name)
        except KafkaError as e:
            error, message = e.code, e.message
    return Struct(topic_name=t.topic_name, topic_id=topic_id, error_code=int(error), error_message=message)


@handles(92, (0, 0))
def handle_delete_share_group_offsets(broker, header, request):
    return change_offsets(broker, header, request, AclOperation.DELETE, must_exist=True,
                          answer_topic=_delete_topic)
