"""DescribeShareGroupOffsets: v0-v1 (KIP-932; v1 KIP-1226).

Behaviour: per group and partition, the share-partition start offset (SPSO: every record below it is
done), the leader epoch stored with its share state, and (v1) the lag: records from the SPSO to the high
watermark not yet acknowledged or archived. -1 for each where the partition has no share state yet, the
topic does not exist or the group does not exist (no error, as Kafka answers an absence of data). Null
topics describe every partition the group has share state for. A classic or consumer group gets
GROUP_ID_NOT_FOUND 69; an empty group id INVALID_GROUP_ID 24; COORDINATOR_LOAD_IN_PROGRESS 14 while the
groups or the share state load.
Authorization (with an authorizer): DESCRIBE on the group, else GROUP_AUTHORIZATION_FAILED for it;
DESCRIBE on each named topic, else TOPIC_AUTHORIZATION_FAILED on its partitions; with null topics the
topics it may not describe are left out silently, as Kafka's KafkaApis does.
Version notes: v1 adds Lag.
Gaps: none known.
"""

from __future__ import annotations

from minibroker.errors import ErrorCode, KafkaError
from minibroker.handlers.registry import handles
from minibroker.handlers.share_group_offsets import topic_of
from minibroker.protocol.codec import Struct
from minibroker.security.acls import AclOperation, ResourceType
from minibroker.security.authorizer import authorize, denied


def _partition(p: int, error: ErrorCode, start: int = -1, epoch: int = -1, lag: int = -1,
               message: str | None = None) -> Struct:
    return Struct(partition_index=p, start_offset=start, leader_epoch=epoch, lag=lag, error_code=int(error),
                  error_message=message)


def _group(broker, header, g) -> Struct:
    coordinator = broker.groups.share
    try:
        if not authorize(broker, header, AclOperation.DESCRIBE, ResourceType.GROUP, g.group_id):
            raise KafkaError(ErrorCode.GROUP_AUTHORIZATION_FAILED)
        coordinator.check_admin_group(g.group_id, must_exist=False, must_be_empty=False)
        if g.topics is None:
            wanted = coordinator.state_topics(g.group_id) if g.group_id in coordinator.groups else {}
            refused = denied(broker, header, AclOperation.DESCRIBE, ResourceType.TOPIC, wanted,
                             log_denied=False)
            wanted = {t: ps for t, ps in wanted.items() if t not in refused}
        else:
            wanted = {}
            for t in g.topics:
                wanted.setdefault(t.topic_name or "", []).extend(t.partitions or ())
            refused = denied(broker, header, AclOperation.DESCRIBE, ResourceType.TOPIC, wanted)
        topics = []
        for name, partitions in sorted(wanted.items()):
            _, topic_id = topic_of(broker, name)
            if name in refused:
                parts = [_partition(p, ErrorCode.TOPIC_AUTHORIZATION_FAILED,
                                    message="Topic authorization failed.") for p in partitions]
            else:
                parts = [_partition(o.partition, o.error, o.start_offset, o.leader_epoch, o.lag, o.message)
                         for o in coordinator.describe_offsets(g.group_id, name, sorted(partitions))]
            topics.append(Struct(topic_name=name, topic_id=topic_id, partitions=parts))
    except KafkaError as e:
        return Struct(group_id=g.group_id, topics=[], error_code=int(e.code), error_message=e.message)
    return Struct(group_id=g.group_id, topics=topics, error_code=0, error_message=None)


@handles(90, (0, 1))
def handle_describe_share_group_offsets(broker, header, request):
    return Struct(throttle_time_ms=0, groups=[_group(broker, header, g) for g in request.groups or ()])
