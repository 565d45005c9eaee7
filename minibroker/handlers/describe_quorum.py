"""DescribeQuorum: v0-v2.

Behaviour, in the shape a one-node KRaft cluster (combined broker and controller) answers it: the
metadata log ``__cluster_metadata`` partition 0 has this node as leader and single voter, leader epoch
1, and no observers (a combined node's broker shares its controller's log). The voter's log end offset
equals the high watermark; the leader reports both fetch timestamps as now, as Kafka does.
minibroker keeps no metadata log: its offset is a fixed base standing for the records a fresh cluster
appends at start, plus one NoOpRecord per ``metadata.max.idle.interval.ms`` (500 ms) since the broker
started, so it grows the way Kafka's does. The request must name exactly that one partition, else each
named partition gets UNKNOWN_TOPIC_OR_PARTITION (Kafka's partition-level error response).
Authorization (with an authorizer), as Kafka's controller: DESCRIBE on the cluster, else
CLUSTER_AUTHORIZATION_FAILED at the top level (with Kafka's message from v2) and no topics.
Version notes: v1 adds the fetch and caught-up timestamps; v2 adds error messages, the voter's
directory id (a stable id derived from the cluster id and node id) and ``nodes``: this node with the
advertised endpoints of its listeners (minibroker has no separate controller listener).
"""

from __future__ import annotations

import time
import uuid

from minibroker.errors import ErrorCode
from minibroker.handlers.registry import handles
from minibroker.protocol.codec import Struct
from minibroker.security.acls import AclOperation, ResourceType
from minibroker.security.authorizer import authorize

METADATA_TOPIC = "__cluster_metadata"
METADATA_PARTITION = 0
LEADER_EPOCH = 1
BOOTSTRAP_RECORDS = 10  # a fixed base standing for the records a fresh cluster appends at start
NOOP_INTERVAL_MS = 500  # Kafka's metadata.max.idle.interval.ms default
UNKNOWN_PARTITION_MESSAGE = "This server does not host this topic-partition."
CLUSTER_AUTHORIZATION_MESSAGE = "Cluster authorization failed."


def directory_id(broker) -> bytes:
    """The voter's directory id: stable for this cluster and node."""
    return uuid.uuid5(uuid.NAMESPACE_URL, f"minibroker:{broker.cluster_id}:{broker.node_id}").bytes


def metadata_end_offset(broker, now_ms: int) -> int:
    started_ms = int((broker.started_at or now_ms / 1000) * 1000)
    return BOOTSTRAP_RECORDS + max(0, now_ms - started_ms) // NOOP_INTERVAL_MS


def _asks_for_the_metadata_partition(request) -> bool:
    topics = request.topics
    return (len(topics) == 1 and topics[0].topic_name == METADATA_TOPIC and len(topics[0].partitions) == 1
            and topics[0].partitions[0].partition_index == METADATA_PARTITION)


@handles(55, (0, 2))
def handle_describe_quorum(broker, header, request):
    if not authorize(broker, header, AclOperation.DESCRIBE, ResourceType.CLUSTER):
        return Struct(error_code=int(ErrorCode.CLUSTER_AUTHORIZATION_FAILED),
                      error_message=CLUSTER_AUTHORIZATION_MESSAGE, topics=[], nodes=[])
    if not _asks_for_the_metadata_partition(request):
        code = int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
        topics = [Struct(topic_name=t.topic_name, partitions=[
            Struct(partition_index=p.partition_index, error_code=code,
                   error_message=UNKNOWN_PARTITION_MESSAGE, leader_id=0, leader_epoch=0, high_watermark=0,
                   current_voters=[], observers=[])
            for p in t.partitions]) for t in request.topics]
        return Struct(error_code=0, error_message=None, topics=topics, nodes=[])
    now_ms = int(time.time() * 1000)
    end_offset = metadata_end_offset(broker, now_ms)
    node = broker.node_id
    voter = Struct(replica_id=node, replica_directory_id=directory_id(broker), log_end_offset=end_offset,
                   last_fetch_timestamp=now_ms, last_caught_up_timestamp=now_ms)
    partition = Struct(partition_index=METADATA_PARTITION, error_code=0, error_message=None, leader_id=node,
                       leader_epoch=LEADER_EPOCH, high_watermark=end_offset, current_voters=[voter],
                       observers=[])
    listeners = [Struct(name=e.listener, host=e.host, port=e.port) for e in broker.advertised]
    return Struct(error_code=0, error_message=None,
                  topics=[Struct(topic_name=METADATA_TOPIC, partitions=[partition])],
                  nodes=[Struct(node_id=node, listeners=listeners)])
