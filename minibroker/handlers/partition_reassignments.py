"""AlterPartitionReassignments: v0-v1, and ListPartitionReassignments: v0.

Behaviour, as a one-node Kafka controller answers: every partition has one replica, this node, so the
only valid target is ``[node.id]``, which is already the assignment: a success that changes nothing (no
reassignment is started). A target naming any other broker is INVALID_REPLICA_ASSIGNMENT ("... includes
broker N, but no such broker is registered."), a repeated broker or an empty list likewise, with Kafka's
messages. Null replicas (cancel) is NO_REASSIGNMENT_IN_PROGRESS, since none ever is. A missing topic or
partition is UNKNOWN_TOPIC_OR_PARTITION with Kafka's message. ListPartitionReassignments answers no
ongoing reassignments (named topics that exist, or all topics, list nothing).
Authorization (with an authorizer), as Kafka's controller: ALTER on the cluster for Alter, DESCRIBE on
it for List, else CLUSTER_AUTHORIZATION_FAILED at the top level (and, for Alter, for every partition).
Version notes: AlterPartitionReassignments v1 (KIP-1073) carries allow_replication_factor_change,
echoed in the response; a one-node target never changes the replication factor.
"""

from __future__ import annotations

from minibroker.errors import ErrorCode
from minibroker.handlers.registry import handles
from minibroker.protocol.codec import Struct
from minibroker.security.acls import AclOperation, ResourceType
from minibroker.security.authorizer import authorize

NO_REASSIGNMENT_MESSAGE = "No partition reassignment is in progress."
# Kafka's controller names the whole request in this message; minibroker leaves the dump out
NOT_AUTHORIZED_MESSAGE = "Request is not authorized."


def _alter_error(request, code: ErrorCode, message: str | None) -> Struct:
    responses = [Struct(name=t.name, partitions=[
        Struct(partition_index=p.partition_index, error_code=int(code), error_message=message)
        for p in t.partitions]) for t in request.topics]
    return Struct(throttle_time_ms=0, allow_replication_factor_change=request.allow_replication_factor_change,
                  error_code=int(code), error_message=message, responses=responses)




def _reassign(broker, topic: str, partition: int, replicas) -> tuple[int, str | None]:
    info = broker.logs.topics.get(topic)
    if info is None:
        return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"Unable to find a topic named {topic}."
    if not 0 <= partition < info.partitions:
        return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"Unable to find partition {topic}:{partition}."
    if replicas is None:
        return ErrorCode.NO_REASSIGNMENT_IN_PROGRESS, NO_REASSIGNMENT_MESSAGE
    if not replicas:
        return (ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                "The manual partition assignment includes an empty replica list.")
    previous = None
    for broker_id in sorted(replicas):
        if broker_id != broker.node_id:
            return (ErrorCode.INVALID_REPLICA_ASSIGNMENT, f"The manual partition assignment includes broker "
                    f"{broker_id}, but no such broker is registered.")
        if broker_id == previous:
            return (ErrorCode.INVALID_REPLICA_ASSIGNMENT, f"The manual partition assignment includes the "
                    f"broker {broker_id} more than once.")
        previous = broker_id
    return ErrorCode.NONE, None


@handles(45, (0, 1))
def handle_alter_partition_reassignments(broker, header, request):
    if not authorize(broker, header, AclOperation.ALTER, ResourceType.CLUSTER):
        return _alter_error(request, ErrorCode.CLUSTER_AUTHORIZATION_FAILED, NOT_AUTHORIZED_MESSAGE)
    responses = []
    for t in request.topics:
        partitions = []
        for p in t.partitions:
            code, message = _reassign(broker, t.name, p.partition_index, p.replicas)
            partitions.append(Struct(partition_index=p.partition_index, error_code=int(code),
                                     error_message=message))
        responses.append(Struct(name=t.name, partitions=partitions))
    return Struct(throttle_time_ms=0, allow_replication_factor_change=request.allow_replication_factor_change,
                  error_code=0, error_message=None, responses=responses)


@handles(46, (0, 0))
def handle_list_partition_reassignments(broker, header, request):
    if not authorize(broker, header, AclOperation.DESCRIBE, ResourceType.CLUSTER):
        topics = [Struct(name=t.name, partitions=[
            Struct(partition_index=p, replicas=[], adding_replicas=[], removing_replicas=[])
            for p in t.partition_indexes]) for t in request.topics or ()]
        return Struct(throttle_time_ms=0, error_code=int(ErrorCode.CLUSTER_AUTHORIZATION_FAILED),
                      error_message=NOT_AUTHORIZED_MESSAGE, topics=topics)
    # a one-node cluster never has a reassignment in progress
    return Struct(throttle_time_ms=0, error_code=0, error_message=None, topics=[])
