"""ConsumerGroupHeartbeat: v0-v1 (KIP-848, the consumer group protocol).

Behaviour: joins (member epoch 0), heartbeats, leaves (-1) and static leaves (-2) consumer groups; the
broker computes the target assignment with its server-side assignor (``group.consumer.assignors``, or
the member's ``server_assignor``) and hands each member its partitions one reconciliation step at a time
(revoked before reassigned). Answers carry the member id and epoch, ``group.consumer.heartbeat.interval.ms``
and, when it changed or the request was a full one, the member's assignment by topic id. The rules and
error codes are Kafka's (see minibroker/coordinator/consumer_group_coordinator.py and docs/groups.md):
INVALID_REQUEST 42, UNKNOWN_MEMBER_ID 25, FENCED_MEMBER_EPOCH 110, UNRELEASED_INSTANCE_ID 111,
FENCED_INSTANCE_ID 82, UNSUPPORTED_ASSIGNOR 112, INVALID_REGULAR_EXPRESSION 128, GROUP_MAX_SIZE_REACHED 81,
GROUP_ID_NOT_FOUND 69 (a classic group with members), COORDINATOR_LOAD_IN_PROGRESS 14.
With ``consumer`` missing from ``group.coordinator.rebalance.protocols`` every request gets
UNSUPPORTED_VERSION.
Authorization (with an authorizer): READ on the group, else GROUP_AUTHORIZATION_FAILED.
Version notes: v1 requires a client-generated member id and adds SubscribedTopicRegex (RE2/J syntax).
Gaps: racks are stored, not used by the assignors.
"""

from __future__ import annotations

from minibroker.errors import ErrorCode
from minibroker.handlers.join_group import client_host
from minibroker.handlers.registry import handles
from minibroker.protocol.codec import Struct
from minibroker.security.acls import AclOperation, ResourceType
from minibroker.security.authorizer import authorize


@handles(68, (0, 1))
def handle_consumer_group_heartbeat(broker, header, request):
    if not authorize(broker, header, AclOperation.READ, ResourceType.GROUP, request.group_id):
        return Struct(throttle_time_ms=0, error_code=int(ErrorCode.GROUP_AUTHORIZATION_FAILED),
                      error_message=None, member_id=None, member_epoch=0, heartbeat_interval_ms=0,
                      assignment=None)
    result = broker.groups.consumer.heartbeat(request, header.api_version, header.client_id or "",
                                              client_host(header))
    assignment = None
    if result.assignment is not None:
        assignment = Struct(topic_partitions=[Struct(topic_id=topic_id, partitions=sorted(partitions))
                                              for topic_id, partitions in sorted(result.assignment.items())
                                              if partitions])
    return Struct(throttle_time_ms=0, error_code=int(result.error), error_message=result.message,
                  member_id=result.member_id, member_epoch=result.member_epoch,
                  heartbeat_interval_ms=result.heartbeat_interval_ms, assignment=assignment)
