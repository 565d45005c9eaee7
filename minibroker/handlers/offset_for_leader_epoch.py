"""OffsetForLeaderEpoch: v0-v4.

Behaviour: every partition has had one leader epoch, 0, which ends at the log end offset.
Asking for epoch 0 answers (0, LEO); a later epoch is unknown: (-1, -1), UNDEFINED as Kafka
answers it. ``current_leader_epoch`` (v2+) is checked like Fetch's.
Authorization (with an authorizer): CLUSTER_ACTION on the cluster (brokers) or DESCRIBE on each topic, else
TOPIC_AUTHORIZATION_FAILED, as Kafka.
"""

from __future__ import annotations

from minibroker.errors import ErrorCode, KafkaError
from minibroker.handlers.leader_epochs import LEADER_EPOCH, check_current_leader_epoch
from minibroker.handlers.registry import handles
from minibroker.protocol.codec import Struct
from minibroker.security.acls import AclOperation, ResourceType
from minibroker.security.authorizer import authorize, denied


@handles(23, (0, 4))
def handle_offset_for_leader_epoch(broker, header, request):
    topics = []
    refused = frozenset()
    if not authorize(broker, header, AclOperation.CLUSTER_ACTION, ResourceType.CLUSTER, log_denied=False):
        refused = denied(broker, header, AclOperation.DESCRIBE, ResourceType.TOPIC,
                         (t.topic for t in request.topics))
    for topic in request.topics:
        partitions = []
        for p in topic.partitions:
            try:
                if refused and topic.topic in refused:
                    raise KafkaError(ErrorCode.TOPIC_AUTHORIZATION_FAILED)
                check_current_leader_epoch(p.current_leader_epoch)
                plog = broker.replicas.get_log(topic.topic, p.partition)
                if 0 <= p.leader_epoch <= LEADER_EPOCH:
                    epoch, end = LEADER_EPOCH, plog.log_end_offset
                else:
                    epoch, end = -1, -1
                partitions.append(
                    Struct(error_code=0, partition=p.partition, leader_epoch=epoch, end_offset=end)
                )
            except KafkaError as e:
                partitions.append(
                    Struct(error_code=int(e.code), partition=p.partition, leader_epoch=-1, end_offset=-1)
                )
        topics.append(Struct(topic=topic.topic, partitions=partitions))
    return Struct(throttle_time_ms=0, topics=topics)
