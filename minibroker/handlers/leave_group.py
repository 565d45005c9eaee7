"""LeaveGroup: v0-v5.

Behaviour: removes the members (a dynamic member by id; a static one by id, or by instance id with
an empty member id, as admin tools do) and starts a rebalance for the rest. Unknown group or
member: UNKNOWN_MEMBER_ID 25; a replaced static member: FENCED_INSTANCE_ID 82.
Authorization (with an authorizer): READ on the group, else GROUP_AUTHORIZATION_FAILED, as Kafka.
Version notes: v0-v2 carry one member id and report its error at the top level; v3+ batch members
with per-member errors; v5 adds a reason (logged only).
Gaps: none known.
"""

from __future__ import annotations

from minibroker.errors import ErrorCode
from minibroker.handlers.registry import handles
from minibroker.protocol.codec import Struct
from minibroker.security.acls import AclOperation, ResourceType
from minibroker.security.authorizer import authorize


@handles(13, (0, 5))
def handle_leave_group(broker, header, request):
    version = header.api_version
    if not authorize(broker, header, AclOperation.READ, ResourceType.GROUP, request.group_id):
        return Struct(throttle_time_ms=0, error_code=int(ErrorCode.GROUP_AUTHORIZATION_FAILED), members=[])
    if version >= 3:
        leaving = [(m.member_id, m.group_instance_id) for m in request.members]
    else:
        leaving = [(request.member_id, None)]
    error, results = broker.groups.leave_group(request.group_id, leaving)
    if version < 3:
        if error == 0:
            error = next((e for _m, _i, e in results if e != 0), 0)
        return Struct(throttle_time_ms=0, error_code=int(error))
    return Struct(throttle_time_ms=0, error_code=int(error), members=[
        Struct(member_id=mid, group_instance_id=iid, error_code=int(e)) for mid, iid, e in results])
