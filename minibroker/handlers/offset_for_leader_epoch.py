"""OffsetForLeaderEpoch: v0-v4.

Behaviour: every partition has had one leader epoch, 0, which ends at the log end offset.
Asking for epoch 0 answers (0, LEO); a later epoch is unknown: (-1, -1), UNDEFINED as Kafka
answers it. ``current_leader_epoch`` (v2+) is checked like Fetch's.
Authorization (with an authorizer): CLUSTER_ACTION on the cluster (brokers) or DESCRIBE on each topic, else
TOPIC_AUTHORIZATION_FAILED, as Kafka.
"""

from __future__ import annotations

from operator import attrgetter

from minibroker.errors import ErrorCode
from minibroker.handlers.leader_epochs import LEADER_EPOCH, check_current_leader_epoch
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
        check_current_leader_epoch(p.current_leader_epoch)
        plog = broker.replicas.get_log(topic, p.partition)
        if 0 <= p.leader_epoch <= LEADER_EPOCH:
            epoch, end = LEADER_EPOCH, plog.log_end_offset
        else:
            epoch, end = -1, -1
        return Struct(error_code=0, partition=p.partition, leader_epoch=epoch, end_offset=end)

    def failed(p, code: ErrorCode) -> Struct:
        return Struct(error_code=int(code), partition=p.partition, leader_epoch=-1, end_offset=-1)

    return Struct(throttle_time_ms=0, topics=[
        Struct(topic=topic.topic, partitions=partitions)
        for topic, partitions in answer_partitions(request.topics, refused, answer, failed,
                                                   name=attrgetter("topic"))])
