"""SyncGroup: v0-v5.

Behaviour: the leader's assignments are stored in ``__consumer_offsets`` with the group, then every
member waiting in SyncGroup gets its own (members the leader left out get an empty assignment).
In a stable group the current assignment is returned at once.
Errors: UNKNOWN_MEMBER_ID 25, ILLEGAL_GENERATION 22, REBALANCE_IN_PROGRESS 27 (PreparingRebalance, or
a new rebalance started while waiting), FENCED_INSTANCE_ID 82, INCONSISTENT_GROUP_PROTOCOL 23.
Authorization (with an authorizer): READ on the group, else GROUP_AUTHORIZATION_FAILED, as Kafka.
Version notes: v3 group.instance.id; v5 protocol type and name, required (Kafka answers
INCONSISTENT_GROUP_PROTOCOL when either is missing) and echoed in the response.
Gaps: none known.
"""

from __future__ import annotations

from minibroker.errors import ErrorCode
from minibroker.handlers.registry import handles
from minibroker.protocol.codec import Struct
from minibroker.security.acls import AclOperation, ResourceType
from minibroker.security.authorizer import authorize


@handles(14, (0, 5))
async def handle_sync_group(broker, header, request):
    version = header.api_version
    if not authorize(broker, header, AclOperation.READ, ResourceType.GROUP, request.group_id):
        return Struct(throttle_time_ms=0, error_code=int(ErrorCode.GROUP_AUTHORIZATION_FAILED),
                      protocol_type=None, protocol_name=None, assignment=b"")
    if version >= 5 and (request.protocol_type is None or request.protocol_name is None):
        return Struct(throttle_time_ms=0, error_code=int(ErrorCode.INCONSISTENT_GROUP_PROTOCOL),
                      protocol_type=None, protocol_name=None, assignment=b"")
    assignments = [(a.member_id, a.assignment) for a in request.assignments]
    r = await broker.groups.sync_group(request.group_id, request.generation_id, request.member_id,
                                       request.group_instance_id, request.protocol_type,
                                       request.protocol_name, assignments)
    ok = r.error == ErrorCode.NONE
    return Struct(throttle_time_ms=0, error_code=int(r.error), protocol_type=r.protocol_type if ok else None,
                  protocol_name=r.protocol_name if ok else None, assignment=r.assignment)
