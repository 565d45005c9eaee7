"""OffsetDelete: v0.

Behaviour: removes committed offsets of a group (tombstones in ``__consumer_offsets``). An Empty group
loses any of them; a consumer group with members keeps those of topics it subscribes to
(GROUP_SUBSCRIBED_TO_TOPIC 86 per partition). Group errors at the top level: GROUP_ID_NOT_FOUND 69,
NON_EMPTY_GROUP 68 (members of a non-consumer protocol), INVALID_GROUP_ID 24,
COORDINATOR_LOAD_IN_PROGRESS 14. Unknown topics: UNKNOWN_TOPIC_OR_PARTITION 3.
Authorization (with an authorizer): DELETE on the group (else GROUP_AUTHORIZATION_FAILED), READ on each
topic (else its partitions TOPIC_AUTHORIZATION_FAILED), as Kafka.
Gaps: none known.
"""

from __future__ import annotations

from minibroker.errors import ErrorCode, KafkaError
from minibroker.handlers.offset_commit import known_partitions
from minibroker.handlers.registry import handles
from minibroker.protocol.codec import Struct
from minibroker.security.acls import AclOperation, ResourceType
from minibroker.security.authorizer import authorize


@handles(47, (0, 0))
def handle_offset_delete(broker, header, request):
    errors: dict[tuple[str, int], int] = {}
    if not authorize(broker, header, AclOperation.DELETE, ResourceType.GROUP, request.group_id):
        return Struct(error_code=int(ErrorCode.GROUP_AUTHORIZATION_FAILED), throttle_time_ms=0, topics=[])
    wanted = [tp for tp, _ in known_partitions(broker, request, errors, header)]
    try:
        errors.update(broker.groups.delete_offsets(request.group_id, wanted))
    except KafkaError as e:
        return Struct(error_code=int(e.code), throttle_time_ms=0, topics=[])
    return Struct(error_code=0, throttle_time_ms=0, topics=[
        Struct(name=t.name, partitions=[
            Struct(partition_index=p.partition_index, error_code=int(errors[(t.name, p.partition_index)]))
            for p in t.partitions])
        for t in request.topics])
