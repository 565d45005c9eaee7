"""ElectLeaders: v0-v2.

Behaviour, as a one-node Kafka (KRaft controller) answers: this node already leads every partition, so
every existing partition answers ELECTION_NOT_NEEDED (84, with Kafka's message) for both election types
(0 preferred: the preferred replica leads; 1 unclean: there is a leader). A missing topic or partition
is UNKNOWN_TOPIC_OR_PARTITION with Kafka's "No such topic as ..." / "No such partition as ..." message.
Null topic partitions means every partition: then, as Kafka, partitions needing no election are left
out, so each topic is listed (by name) with no partition results. An election type other than 0 or 1
is INVALID_REQUEST for the request (top level from v1, and each named partition).
Authorization (with an authorizer), as Kafka's controller: ALTER on the cluster, else
CLUSTER_AUTHORIZATION_FAILED at the top level (v1+) and for each named partition.
Version notes: v1 adds the election type and the top-level error code; v2 is flexible.
"""

from __future__ import annotations

from minibroker.errors import ErrorCode
from minibroker.handlers.registry import handles
from minibroker.protocol.codec import Struct
from minibroker.security.acls import AclOperation, ResourceType
from minibroker.security.authorizer import authorize

PREFERRED, UNCLEAN = 0, 1
ELECTION_NOT_NEEDED_MESSAGE = "Leader election not needed for topic partition."
# Kafka's controller names the whole request in this message; minibroker leaves the dump out
NOT_AUTHORIZED_MESSAGE = "Request is not authorized."


def _error_response(request, code: ErrorCode, message: str | None) -> Struct:
    results = [
        Struct(topic=t.topic, partition_result=[
            Struct(partition_id=p, error_code=int(code), error_message=message) for p in t.partitions])
        for t in request.topic_partitions or ()
    ]
    return Struct(throttle_time_ms=0, error_code=int(code), replica_election_results=results)


def _elect(infos, topic: str, partition: int) -> tuple[int, str | None]:
    info = infos.get(topic)
    if info is None:
        return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"No such topic as {topic}"
    if not 0 <= partition < info.partitions:
        return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"No such partition as {topic}-{partition}"
    return ErrorCode.ELECTION_NOT_NEEDED, ELECTION_NOT_NEEDED_MESSAGE


@handles(43, (0, 2))
def handle_elect_leaders(broker, header, request):
    if not authorize(broker, header, AclOperation.ALTER, ResourceType.CLUSTER):
        return _error_response(request, ErrorCode.CLUSTER_AUTHORIZATION_FAILED, NOT_AUTHORIZED_MESSAGE)
    election_type = request.election_type if header.api_version >= 1 else PREFERRED
    if election_type not in (PREFERRED, UNCLEAN):
        return _error_response(request, ErrorCode.INVALID_REQUEST, f"Unknown election type {election_type}")
    infos = broker.logs.topics
    if request.topic_partitions is None:
        # every partition already has its preferred leader: none is listed, every topic is
        results = [Struct(topic=name, partition_result=[]) for name in sorted(infos)]
    else:
        results = []
        for t in request.topic_partitions:
            partitions = []
            for p in t.partitions:
                code, message = _elect(infos, t.topic, p)
                partitions.append(Struct(partition_id=p, error_code=int(code), error_message=message))
            results.append(Struct(topic=t.topic, partition_result=partitions))
    return Struct(throttle_time_ms=0, error_code=0, replica_election_results=results)
