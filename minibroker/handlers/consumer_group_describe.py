"""ConsumerGroupDescribe: v0-v1 (KIP-848).

Behaviour: each consumer group's state (Empty, Assigning, Reconciling, Stable), group epoch, target
assignment epoch, assignor (the one most members ask for, else the first of ``group.consumer.assignors``)
and members: ids, instance and rack ids, member epoch, client id and host, subscription (names and regex),
current and target assignments with topic ids and names. A classic or unknown group gets
GROUP_ID_NOT_FOUND 69, as Kafka answers.
Authorization (with an authorizer): DESCRIBE on each group, else GROUP_AUTHORIZATION_FAILED; authorized
operations when asked, as for DescribeGroups.
Version notes: v1 adds each member's type: 1 (a consumer-protocol member; classic members cannot
join a consumer group here, so 0 never appears).
Gaps: none known.
"""

from __future__ import annotations

from minibroker.handlers.modern_groups import describe_groups
from minibroker.handlers.registry import handles
from minibroker.protocol.codec import Struct

CLASSIC_MEMBER, CONSUMER_MEMBER = 0, 1  # MemberType (v1): -1 unknown, 0 classic (migration), 1 consumer


def _assignment(broker, assignment) -> Struct:
    return Struct(topic_partitions=[
        Struct(topic_id=topic_id, topic_name=broker.logs.topic_name(topic_id) or "", partitions=sorted(ps))
        for topic_id, ps in sorted(assignment.items()) if ps])


@handles(69, (0, 1))
def handle_consumer_group_describe(broker, header, request):
    coordinator = broker.groups.consumer

    def members(group) -> list[Struct]:
        return [Struct(
            member_id=m.member_id, instance_id=m.instance_id, rack_id=m.rack_id, member_epoch=m.member_epoch,
            client_id=m.client_id, client_host=m.client_host,
            subscribed_topic_names=list(m.subscribed_topic_names),
            subscribed_topic_regex=m.subscribed_topic_regex, assignment=_assignment(broker, m.assigned),
            target_assignment=_assignment(broker, group.target.get(m.member_id, {})),
            member_type=CLASSIC_MEMBER if m.classic is not None else CONSUMER_MEMBER)
            for m in group.members.values()]

    return describe_groups(broker, header, request, coordinator, members, coordinator.default_assignor)
