"""Heartbeat: v0-v4.

Behaviour: resets the member's session timer. REBALANCE_IN_PROGRESS 27 while the group prepares a
rebalance (the member must rejoin); NONE in CompletingRebalance and Stable; UNKNOWN_MEMBER_ID 25 for
an unknown member or group (or an Empty group), ILLEGAL_GENERATION 22 for another generation,
FENCED_INSTANCE_ID 82 for a replaced static member.
Authorization (with an authorizer): READ on the group, else GROUP_AUTHORIZATION_FAILED, as Kafka.
Version notes: v3 group.instance.id.
Gaps: none known.
"""

from __future__ import annotations

from minibroker.errors import ErrorCode
from minibroker.handlers.registry import handles
from minibroker.protocol.codec import Struct
from minibroker.security.acls import AclOperation, ResourceType
from minibroker.security.authorizer import authorize


@handles(12, (0, 4))
def handle_heartbeat(broker, header, request):
    if not authorize(broker, header, AclOperation.READ, ResourceType.GROUP, request.group_id):
        return Struct(throttle_time_ms=0, error_code=int(ErrorCode.GROUP_AUTHORIZATION_FAILED))
    error = broker.groups.heartbeat(request.group_id, request.generation_id, request.member_id,
                                    request.group_instance_id)
    return Struct(throttle_time_ms=0, error_code=int(error))
