"""What the share-group offset admin APIs share (AlterShareGroupOffsets 91, DeleteShareGroupOffsets 92, and
DescribeShareGroupOffsets 90 for the topic lookup): the group and topic checks, in Kafka's order, around
one answer per topic.

Not a handler module: alter_share_group_offsets.py, delete_share_group_offsets.py and
describe_share_group_offsets.py register the APIs and say their behaviour.
"""

from __future__ import annotations

from collections.abc import Callable

from minibroker.errors import ErrorCode, KafkaError
from minibroker.protocol.codec import Struct
from minibroker.protocol.declarations import ZERO_UUID
from minibroker.security.acls import AclOperation, ResourceType
from minibroker.security.authorizer import authorize, denied


def topic_of(broker, name: str):
    """(TopicInfo or None, topic id; the zero id for a topic that does not exist)."""
    info = broker.logs.topics.get(name)
    return info, (bytes(info.id) if info is not None else ZERO_UUID)


def _failed(code: ErrorCode, message: str | None = None) -> Struct:
    return Struct(throttle_time_ms=0, error_code=int(code), error_message=message, responses=[])


def change_offsets(broker, header, request, group_operation: AclOperation, *, must_exist: bool,
                   answer_topic: Callable, ensure_group: bool = False) -> Struct:
    """``group_operation`` on the group (else GROUP_AUTHORIZATION_FAILED), READ on each topic, the share
    coordinator's group checks (an Empty share group; created first when ``ensure_group``), then
    ``answer_topic(coordinator, group id, topic request, info, topic id, refused)`` per topic. A KafkaError
    from the group checks (or one that escapes a topic) fails the whole request."""
    coordinator = broker.groups.share
    if not authorize(broker, header, group_operation, ResourceType.GROUP, request.group_id):
        return _failed(ErrorCode.GROUP_AUTHORIZATION_FAILED, "Group authorization failed.")
    refused = denied(broker, header, AclOperation.READ, ResourceType.TOPIC,
                     [t.topic_name for t in request.topics or ()])
    responses = []
    try:
        coordinator.check_admin_group(request.group_id, must_exist=must_exist, must_be_empty=True)
        if ensure_group:
            coordinator.ensure_group(request.group_id)
        for t in request.topics or ():
            info, topic_id = topic_of(broker, t.topic_name)
            responses.append(answer_topic(coordinator, request.group_id, t, info, topic_id,
                                          t.topic_name in refused))
    except KafkaError as e:
        return _failed(e.code, e.message)
    return Struct(throttle_time_ms=0, error_code=0, error_message=None, responses=responses)
