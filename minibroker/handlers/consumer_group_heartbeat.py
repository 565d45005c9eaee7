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
Version notes: v1 requires a client-generated member id and adds SubscribedTopicRegex (RE2/J syntax,
minibroker/coordinator/topic_regex.py); a regex new to the group counts from its next heartbeat, as Kafka
resolves it asynchronously.
Gaps: racks are stored, not used by the assignors.
"""

from __future__ import annotations

from minibroker.errors import ErrorCode
from minibroker.handlers.join_group import client_host
from minibroker.handlers.modern_groups import failed_heartbeat, heartbeat_response
from minibroker.handlers.registry import handles
from minibroker.security.acls import AclOperation, ResourceType
from minibroker.security.authorizer import authorize


@handles(68, (0, 1))
def handle_consumer_group_heartbeat(broker, header, request):
    if not authorize(broker, header, AclOperation.READ, ResourceType.GROUP, request.group_id):
        return failed_heartbeat(ErrorCode.GROUP_AUTHORIZATION_FAILED)
    result = broker.groups.consumer.heartbeat(request, header.api_version, header.client_id or "",
                                              client_host(header))
    return heartbeat_response(result)
