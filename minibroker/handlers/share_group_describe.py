"""ShareGroupDescribe: v1 (KIP-932).

Behaviour: each share group's state (Empty, Stable), group epoch, target assignment epoch, assignor
("simple") and members: member id, rack id, member epoch, client id and host, subscribed topic names, and
the current assignment with topic ids and names. A classic, consumer or unknown group gets
GROUP_ID_NOT_FOUND 69 (with "Group <id> is not a share group." for one of another type); an empty group id
INVALID_GROUP_ID 24; COORDINATOR_LOAD_IN_PROGRESS 14 while ``__consumer_offsets`` loads.
Authorization (with an authorizer): DESCRIBE on each group, else GROUP_AUTHORIZATION_FAILED; then DESCRIBE
on every topic in its members' assignments, else the whole group is answered TOPIC_AUTHORIZATION_FAILED
with nothing else (Kafka's all-or-nothing redaction). Authorized operations when asked, as for
DescribeGroups.
Version notes: v0 was Kafka 4.0's early-access version, removed in Kafka 4.1; Kafka 4.2 serves v1 only.
Gaps: none known.
"""

from __future__ import annotations

from minibroker.coordinator.share_group import SIMPLE_ASSIGNOR
from minibroker.errors import ErrorCode
from minibroker.handlers.authorized_operations import NOT_ASKED, group_operations
from minibroker.handlers.registry import handles
from minibroker.protocol.codec import Struct
from minibroker.security.acls import AclOperation, ResourceType
from minibroker.security.authorizer import authorize, denied


def _failed(group_id: str, code: ErrorCode, message: str | None = None) -> Struct:
    return Struct(error_code=int(code), error_message=message, group_id=group_id, group_state="",
                  group_epoch=0, assignment_epoch=0, assignor_name="", members=[],
                  authorized_operations=NOT_ASKED)


@handles(77, (1, 1))
def handle_share_group_describe(broker, header, request):
    coordinator = broker.groups.share
    names = {info.id: name for name, info in broker.logs.topics.items()}
    out = []
    for group_id in request.group_ids or ():
        if not authorize(broker, header, AclOperation.DESCRIBE, ResourceType.GROUP, group_id):
            out.append(_failed(group_id, ErrorCode.GROUP_AUTHORIZATION_FAILED))
            continue
        error, message, group = coordinator.describe(group_id)
        if group is None:
            out.append(_failed(group_id, error, message))
            continue
        topics = {names[t] for m in group.members.values() for t, ps in m.assigned.items()
                  if ps and t in names}
        if denied(broker, header, AclOperation.DESCRIBE, ResourceType.TOPIC, sorted(topics)):
            out.append(_failed(group_id, ErrorCode.TOPIC_AUTHORIZATION_FAILED))
            continue
        members = [Struct(
            member_id=m.member_id, rack_id=m.rack_id, member_epoch=m.member_epoch, client_id=m.client_id,
            client_host=m.client_host, subscribed_topic_names=list(m.subscribed_topic_names),
            assignment=Struct(topic_partitions=[
                Struct(topic_id=t, topic_name=names.get(t, ""), partitions=sorted(ps))
                for t, ps in sorted(m.assigned.items()) if ps]))
            for m in group.members.values()]
        asked = request.include_authorized_operations
        ops = group_operations(broker, header, group_id) if asked else NOT_ASKED
        out.append(Struct(error_code=0, error_message=None, group_id=group_id, group_state=group.state,
                          group_epoch=group.group_epoch, assignment_epoch=group.assignment_epoch,
                          assignor_name=SIMPLE_ASSIGNOR, members=members, authorized_operations=ops))
    return Struct(throttle_time_ms=0, groups=out)
