"""JoinGroup: v0-v9.

Behaviour: Kafka's classic rebalance (see ``minibroker.coordinator.group_coordinator``): the request
waits until every known member has rejoined, the first rebalance of an empty group waits
``group.initial.rebalance.delay.ms`` more (extended while members keep arriving, up to the rebalance
timeout), and members that do not rejoin within the rebalance timeout are removed. The leader gets
every member's metadata for the selected protocol (the one most members prefer among those all
support). Static members (``group.instance.id``) that rejoin a stable group with the same
protocols get their old assignment back without a rebalance.
Errors: INVALID_GROUP_ID 24, INVALID_SESSION_TIMEOUT 26 (outside group.min/max.session.timeout.ms),
UNKNOWN_MEMBER_ID 25, INCONSISTENT_GROUP_PROTOCOL 23, MEMBER_ID_REQUIRED 79, FENCED_INSTANCE_ID 82,
GROUP_MAX_SIZE_REACHED 81, COORDINATOR_LOAD_IN_PROGRESS 14 while __consumer_offsets loads.
Authorization (with an authorizer): READ on the group, else GROUP_AUTHORIZATION_FAILED, as Kafka.
Version notes: v0 has no rebalance timeout (the session timeout is used); v4+ unknown dynamic members
get MEMBER_ID_REQUIRED with their new id; v5 group.instance.id; v7 protocol type in the response,
null protocol name on errors ("" before v7); v8 reason (logged only); v9 skip_assignment for a static
leader that rejoins (KIP-814).
Gaps: client_host is "/<ip>" only when the connection exposes its peer on the header.
"""

from __future__ import annotations

from minibroker.errors import ErrorCode
from minibroker.handlers.registry import handles
from minibroker.protocol.codec import Struct
from minibroker.security.acls import AclOperation, ResourceType
from minibroker.security.authorizer import authorize


def client_host(header) -> str:
    peer = getattr(header, "peer", None) or getattr(header, "client_host", None)
    if isinstance(peer, tuple | list) and peer:
        return f"/{peer[0]}"
    return f"/{peer}" if peer else ""


@handles(11, (0, 9))
async def handle_join_group(broker, header, request):
    version = header.api_version
    if not authorize(broker, header, AclOperation.READ, ResourceType.GROUP, request.group_id):
        return Struct(throttle_time_ms=0, error_code=int(ErrorCode.GROUP_AUTHORIZATION_FAILED),
                      generation_id=-1, protocol_type=None, protocol_name=None if version >= 7 else "",
                      leader="", skip_assignment=False, member_id="", members=[])
    r = await broker.groups.join_group(
        request.group_id, request.member_id, request.group_instance_id, header.client_id or "",
        client_host(header), request.session_timeout_ms, request.rebalance_timeout_ms if version >= 1 else -1,
        request.protocol_type, [(p.name, p.metadata) for p in request.protocols],
        require_known_member_id=version >= 4, supports_skip_assignment=version >= 9)
    protocol_name = r.protocol_name
    if protocol_name is None and version < 7:
        protocol_name = ""
    return Struct(
        throttle_time_ms=0, error_code=int(r.error), generation_id=r.generation_id,
        protocol_type=r.protocol_type if r.error == 0 else None, protocol_name=protocol_name,
        leader=r.leader_id, skip_assignment=r.skip_assignment, member_id=r.member_id,
        members=[Struct(member_id=mid, group_instance_id=iid, metadata=meta) for mid, iid, meta in r.members],
    )
