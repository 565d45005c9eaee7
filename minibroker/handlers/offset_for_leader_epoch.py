"""OffsetForLeaderEpoch: v0-v4.

Behaviour: answered from the partition's leader epoch cache (``leader-epoch-checkpoint``) as Kafka's
``LeaderEpochFileCache.endOffsetFor``: the current epoch ends at the log end offset; an older epoch
ends where the next known one starts, answered with the largest known epoch at or below it (the
requested one when it is older than every entry the log still holds); an epoch newer than the
current one, or -1, is (-1, -1), UNDEFINED. ``current_leader_epoch`` (v2+) is checked like Fetch's.
Authorization (with an authorizer): CLUSTER_ACTION on the cluster (brokers) or DESCRIBE on each topic, else
TOPIC_AUTHORIZATION_FAILED, as Kafka.
"""

from __future__ import annotations

from operator import attrgetter

from minibroker.errors import ErrorCode
from minibroker.handlers.leader_epochs import check_current_leader_epoch
from minibroker.handlers.partition_answers import answer_partitions
from minibroker.handlers.registry import handles
from minibroker.protocol.codec import Struct
from minibroker.security.acls import AclOperation, ResourceType
from minibroker.security.authorizer import authorize, denied


@handles(23, (0, 4))
def handle_offset_for_leader_epoch(broker, header, request):
    refused = frozenset()
    if not authorize(broker, header, AclOperation.CLUSTER_ACTION, ResourceType.CLUSTER, log_denied=False):
        refused = denied(broker, header, AclOperation.DESCRIBE, ResourceType.TOPIC,
                         (t.topic for t in request.topics))

    def answer(topic: str, p) -> Struct:
        plog = broker.replicas.get_log(topic, p.partition)
        check_current_leader_epoch(p.current_leader_epoch, plog.leader_epoch)
        epoch, end = plog.end_offset_for_epoch(p.leader_epoch)
        return Struct(error_code=0, partition=p.partition, leader_epoch=epoch, end_offset=end)

    def failed(p, code: ErrorCode) -> Struct:
        return Struct(error_code=int(code), partition=p.partition, leader_epoch=-1, end_offset=-1)

    return Struct(throttle_time_ms=0, topics=[
        Struct(topic=topic.topic, partitions=partitions)
        for topic, partitions in answer_partitions(request.topics, refused, answer, failed,
                                                   name=attrgetter("topic"))])
