"""OffsetCommit: v0-v10.

Behaviour: commits are records in ``__consumer_offsets`` (offset commit key v1 / value v3, or value v1
when a v2-v4 request gives a retention time) written before the answer. Members of a group commit
with their generation; a generation of -1 on an Empty (or unknown) group is a simple commit by a
group-less consumer. Partitions of unknown topics get UNKNOWN_TOPIC_OR_PARTITION 3, metadata longer
than ``offset.metadata.max.bytes`` OFFSET_METADATA_TOO_LARGE 12; group errors (FENCED_INSTANCE_ID 82,
then, in Kafka's order, UNKNOWN_MEMBER_ID 25, ILLEGAL_GENERATION 22 and REBALANCE_IN_PROGRESS 27
while completing a rebalance; INVALID_GROUP_ID 24, COORDINATOR_LOAD_IN_PROGRESS 14) go to every
partition.
Authorization (with an authorizer): READ on the group (else every partition GROUP_AUTHORIZATION_FAILED),
then READ on each topic (else its partitions TOPIC_AUTHORIZATION_FAILED), as Kafka.
Version notes: v0 has no generation or member (simple commit); v1 carries a per-partition commit
timestamp (-1: now); v2-v4 a retention time (-1: the broker's; now + retention past int64 expires
at the int64 maximum); v6 the committed leader epoch; v7
group.instance.id; v8+ flexible; v9 the member epoch: a commit into a consumer (KIP-848) group
with members must come from a member (UNKNOWN_MEMBER_ID 25) at its current epoch
(STALE_MEMBER_EPOCH 113) with v9+ (UNSUPPORTED_VERSION 35 below); for classic groups the field is
the generation; v10 names topics by id (KIP-848): an id no topic has gets UNKNOWN_TOPIC_ID 100 on
each of its partitions.
Gaps: no transactional offsets (TxnOffsetCommit).
"""

from __future__ import annotations

import time

from minibroker.coordinator.group_records import OffsetCommitValue
from minibroker.errors import ErrorCode, KafkaError
from minibroker.handlers.registry import handles
from minibroker.protocol.codec import Struct
from minibroker.protocol.declarations import ZERO_UUID
from minibroker.security.acls import AclOperation, ResourceType
from minibroker.security.authorizer import authorize, denied

LONG_MAX = 2**63 - 1


def partition_known(broker, topic: str, partition: int) -> bool:
    info = broker.logs.topics.get(topic)
    return info is not None and 0 <= partition < info.partitions


def known_partitions(broker, request, errors: dict, header):
    """(topic-partition, request partition) of each partition of an offset commit request that exists;
    the others get UNKNOWN_TOPIC_OR_PARTITION in ``errors`` (OffsetCommit and TxnOffsetCommit), or first
    TOPIC_AUTHORIZATION_FAILED when the request's principal may not READ the topic."""
    refused = denied(broker, header, AclOperation.READ, ResourceType.TOPIC, (t.name for t in request.topics))
    for t in request.topics:
        for p in t.partitions:
            tp = (t.name, p.partition_index)
            if refused and t.name in refused:
                errors[tp] = ErrorCode.TOPIC_AUTHORIZATION_FAILED
            elif partition_known(broker, t.name, p.partition_index):
                yield tp, p
            else:
                errors[tp] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


def commit_response(request, errors: dict) -> Struct:
    """The response of an offset commit request: each requested partition with its error code."""
    return Struct(throttle_time_ms=0, topics=[
        Struct(name=t.name, topic_id=getattr(t, "topic_id", ZERO_UUID), partitions=[
            Struct(partition_index=p.partition_index, error_code=int(errors[(t.name, p.partition_index)]))
            for p in t.partitions])
        for t in request.topics])


def resolve_topic_ids(broker, topics) -> tuple[list, list]:
    """(topics whose id names a topic, each given its ``name``; the others) of a v10+ request."""
    known, unknown = [], []
    for t in topics:
        name = broker.logs.topic_name(t.topic_id) if t.topic_id != ZERO_UUID else None
        if name is None:
            unknown.append(t)
        else:
            t.name = name
            known.append(t)
    return known, unknown


def unknown_topic_ids_response(topics) -> list[Struct]:
    return [Struct(name="", topic_id=t.topic_id, partitions=[
        Struct(partition_index=p.partition_index, error_code=int(ErrorCode.UNKNOWN_TOPIC_ID))
        for p in t.partitions]) for t in topics]


@handles(8, (0, 10))
def handle_offset_commit(broker, header, request):
    version = header.api_version
    unknown_ids = []
    if version >= 10:
        request.topics, unknown_ids = resolve_topic_ids(broker, request.topics)
    response = _commit(broker, header, request, version)
    response.topics += unknown_topic_ids_response(unknown_ids)
    return response


def _commit(broker, header, request, version: int) -> Struct:
    now = int(time.time() * 1000)
    retention = request.retention_time_ms if 2 <= version <= 4 else -1
    errors: dict[tuple[str, int], int] = {}
    wanted: dict[tuple[str, int], OffsetCommitValue] = {}
    if not authorize(broker, header, AclOperation.READ, ResourceType.GROUP, request.group_id):
        return commit_response(request, {(t.name, p.partition_index): ErrorCode.GROUP_AUTHORIZATION_FAILED
                                         for t in request.topics for p in t.partitions})
    for tp, p in known_partitions(broker, request, errors, header):
        ts = p.commit_timestamp if version == 1 and p.commit_timestamp != -1 else now
        # the expiry saturates at the int64 maximum (Java's sum would wrap: the fuzzer sent 2^63-2)
        expire = min(ts + retention, LONG_MAX) if retention is not None and retention >= 0 else -1
        wanted[tp] = OffsetCommitValue(p.committed_offset, p.committed_metadata or "", ts,
                                       p.committed_leader_epoch, expire)
    if wanted:
        generation = request.generation_id_or_member_epoch if version >= 1 else -1
        member_id = request.member_id if version >= 1 else ""
        try:
            errors.update(broker.groups.commit_offsets(request.group_id, generation, member_id,
                                                       request.group_instance_id, wanted, version))
        except KafkaError as e:
            errors.update({tp: e.code for tp in wanted})
    return commit_response(request, errors)
