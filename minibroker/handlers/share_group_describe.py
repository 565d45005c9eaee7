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
from minibroker.handlers.modern_groups import describe_groups
from minibroker.handlers.registry import handles
from minibroker.protocol.codec import Struct
from minibroker.security.acls import AclOperation, ResourceType
from minibroker.security.authorizer import denied


@handles(77, (1, 1))
def handle_share_group_describe(broker, header, request):
    names = {info.id: name for name, info in broker.logs.topics.items()}

    def refuse(group) -> ErrorCode | None:  # every topic of the members' assignments, or nothing
        topics = {names[t] for m in group.members.values() for t, ps in m.assigned.items()
                  if ps and t in names}
        if denied(broker, header, AclOperation.DESCRIBE, ResourceType.TOPIC, sorted(topics)):
            return ErrorCode.TOPIC_AUTHORIZATION_FAILED
        return None

    def members(group) -> list[Struct]:
        return [Struct(
            member_id=m.member_id, rack_id=m.rack_id, member_epoch=m.member_epoch, client_id=m.client_id,
            client_host=m.client_host, subscribed_topic_names=list(m.subscribed_topic_names),
            assignment=Struct(topic_partitions=[
                Struct(topic_id=t, topic_name=names.get(t, ""), partitions=sorted(ps))
                for t, ps in sorted(m.assigned.items()) if ps]))
            for m in group.members.values()]

    return describe_groups(broker, header, request, broker.groups.share, members,
                           lambda group: SIMPLE_ASSIGNOR, refuse)
