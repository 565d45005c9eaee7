"""ShareGroupHeartbeat: v1 (KIP-932, share groups).

Behaviour: joins (member epoch 0, with a client-generated member id and the subscribed topic names),
heartbeats and leaves (-1) share groups; the simple assignor gives every member every partition of its
subscribed topics that exist, so a member moves to its target assignment at once. Answers carry the
member epoch, the heartbeat interval (``share.heartbeat.interval.ms``, else
``group.share.heartbeat.interval.ms``) and, on joining or when it changed, the assignment by topic id.
Rules and error codes are Kafka's (minibroker/coordinator/share_group_coordinator.py): INVALID_REQUEST 42
(empty or over-long member id, empty group or rack id, no subscription on joining, epoch below -1),
GROUP_ID_NOT_FOUND 69 (a classic or consumer group, or an unknown group when not joining),
UNKNOWN_MEMBER_ID 25, FENCED_MEMBER_EPOCH 110, GROUP_MAX_SIZE_REACHED 81 (``group.share.max.size``),
COORDINATOR_LOAD_IN_PROGRESS 14. With ``share`` missing from ``group.coordinator.rebalance.protocols``
every request gets UNSUPPORTED_VERSION 35.
Authorization (with an authorizer): READ on the group, else GROUP_AUTHORIZATION_FAILED; DESCRIBE on every
subscribed topic named in the request, else TOPIC_AUTHORIZATION_FAILED, as Kafka's KafkaApis checks.
Version notes: v0 was Kafka 4.0's early-access version, removed in Kafka 4.1; Kafka 4.2 and
librdkafka 2.16 speak v1 only, and so does minibroker.
Gaps: racks are stored, not used by the assignor.
"""

from __future__ import annotations

from minibroker.errors import ErrorCode
from minibroker.handlers.join_group import client_host
from minibroker.handlers.modern_groups import failed_heartbeat, heartbeat_response
from minibroker.handlers.registry import handles
from minibroker.security.acls import AclOperation, ResourceType
from minibroker.security.authorizer import authorize, denied


@handles(76, (1, 1))
def handle_share_group_heartbeat(broker, header, request):
    coordinator = broker.groups.share
    if not coordinator.enabled:
        return failed_heartbeat(ErrorCode.UNSUPPORTED_VERSION, "The share group protocol is not enabled.")
    if not authorize(broker, header, AclOperation.READ, ResourceType.GROUP, request.group_id):
        return failed_heartbeat(ErrorCode.GROUP_AUTHORIZATION_FAILED)
    if request.subscribed_topic_names:
        refused = denied(broker, header, AclOperation.DESCRIBE, ResourceType.TOPIC,
                         request.subscribed_topic_names)
        if refused:
            return failed_heartbeat(ErrorCode.TOPIC_AUTHORIZATION_FAILED,
                                    "Unauthorized topics: " + ", ".join(sorted(refused)))
    return heartbeat_response(coordinator.heartbeat(request, header.client_id or "", client_host(header)))
