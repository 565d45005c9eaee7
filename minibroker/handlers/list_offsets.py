"""ListOffsets: v0-v11.

Behaviour: -2 earliest = log start offset, -1 latest = log end offset, or with isolation_level
READ_COMMITTED (1, v2+) the last stable offset (the first offset of the earliest open
transaction, else the log end offset), -3 max timestamp (v7+) = the record with the largest
timestamp, the first one if several share it (as Kafka since KAFKA-16310; not the last offset of
its batch), -4 earliest local (v8+) = log start offset, -5 last tiered (v9+) = -1 (no tiered
storage), -6 earliest pending upload (v11+, KIP-1023) = -1 (nothing is ever pending upload
without tiered storage); any other timestamp finds the first offset whose timestamp is >= it
through the time indexes, or -1.
v0 answers with an array of offsets (one, for the one asked). The leader epoch of an answer (v4+) is
the epoch the found offset was written in (the partition's epoch cache), the current epoch for -1, as
Kafka; ``current_leader_epoch`` (v4+) is checked like Fetch's.
Authorization (with an authorizer): DESCRIBE on each topic, else TOPIC_AUTHORIZATION_FAILED, as Kafka.
"""

from __future__ import annotations

import functools

from minibroker.errors import ErrorCode, KafkaError
from minibroker.handlers.leader_epochs import check_current_leader_epoch
from minibroker.handlers.partition_answers import answer_partitions
from minibroker.handlers.registry import handles
from minibroker.protocol.codec import Struct
from minibroker.security.acls import AclOperation, ResourceType
from minibroker.security.authorizer import denied

LATEST, EARLIEST, MAX_TIMESTAMP, EARLIEST_LOCAL, LATEST_TIERED = -1, -2, -3, -4, -5
EARLIEST_PENDING_UPLOAD = -6


def lookup(plog, timestamp: int, version: int, last_stable_offset=None) -> tuple[int, int]:
    """(timestamp, offset) answered for a target timestamp; ``last_stable_offset()`` gives LATEST's
    answer at READ_COMMITTED."""
    if timestamp == LATEST:
        return -1, plog.log_end_offset if last_stable_offset is None else last_stable_offset()
    if timestamp in (EARLIEST, EARLIEST_LOCAL):
        return -1, plog.log_start_offset
    if timestamp in (LATEST_TIERED, EARLIEST_PENDING_UPLOAD):
        return -1, -1
    if timestamp == MAX_TIMESTAMP:
        found = plog.max_timestamp_entry()
        return (found[1], found[0]) if found is not None else (-1, -1)
    if timestamp < 0:
        raise KafkaError(ErrorCode.INVALID_REQUEST, f"unknown special timestamp {timestamp}")
    found = plog.offset_for_timestamp(timestamp)
    return (found[1], found[0]) if found is not None else (-1, -1)


@handles(2, (0, 11))
def handle_list_offsets(broker, header, request):
    version = header.api_version
    committed = version >= 2 and request.isolation_level == 1
    refused = denied(broker, header, AclOperation.DESCRIBE, ResourceType.TOPIC,
                     (t.name for t in request.topics))

    def answer(topic: str, p) -> Struct:
        plog = broker.replicas.get_log(topic, p.partition_index)
        check_current_leader_epoch(p.current_leader_epoch, plog.leader_epoch)
        lso = None
        if committed:
            lso = functools.partial(broker.replicas.last_stable_offset, topic, p.partition_index)
        ts, offset = lookup(plog, p.timestamp, version, lso)
        return Struct(
            partition_index=p.partition_index,
            error_code=0,
            old_style_offsets=[offset] if offset >= 0 and p.max_num_offsets else [],
            timestamp=ts,
            offset=offset,
            leader_epoch=-1 if offset < 0 else (plog.leader_epoch if p.timestamp == LATEST
                                                else plog.epoch_for_offset(offset)),
        )

    def failed(p, code: ErrorCode) -> Struct:
        return Struct(partition_index=p.partition_index, error_code=int(code), old_style_offsets=[],
                      timestamp=-1, offset=-1, leader_epoch=-1)

    return Struct(throttle_time_ms=0, topics=[
        Struct(name=topic.name, partitions=partitions)
        for topic, partitions in answer_partitions(request.topics, refused, answer, failed)])
