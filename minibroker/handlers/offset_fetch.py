"""OffsetFetch: v0-v9.

Behaviour: the committed offset, leader epoch and metadata of each asked partition; -1, -1 and ""
with no error where nothing is committed (also for unknown groups). Null topics (v2+) means every
partition the group has committed.
Version notes: v0-v1 put group errors (INVALID_GROUP_ID 24, COORDINATOR_LOAD_IN_PROGRESS 14) on each
partition; v2-v7 have a top-level error; v5 committed leader epochs; v7 require_stable (always
stable: there are no pending transactional offsets); v8+ several groups per request with per-group
errors; v9 member id / epoch (KIP-848) are not checked for classic groups, as Kafka does.
Gaps: none known.
"""

from __future__ import annotations

from minibroker.errors import KafkaError
from minibroker.handlers.registry import handles
from minibroker.protocol.codec import Struct


def _topics(result: dict, requested) -> list[Struct]:
    by_topic: dict[str, list[Struct]] = {}
    if requested is not None:
        for t in requested:
            by_topic.setdefault(t.name, [])
    for (topic, partition), value in result.items():
        by_topic.setdefault(topic, []).append(Struct(
            partition_index=partition,
            committed_offset=value.offset if value is not None else -1,
            committed_leader_epoch=value.leader_epoch if value is not None else -1,
            metadata=value.metadata if value is not None else "",
            error_code=0))
    return [Struct(name=name, partitions=parts) for name, parts in by_topic.items()]


def _fetch(broker, group_id: str, topics):
    partitions = None if topics is None else [(t.name, p) for t in topics for p in t.partition_indexes]
    return broker.groups.fetch_offsets(group_id, partitions)


@handles(9, (0, 9))
def handle_offset_fetch(broker, header, request):
    version = header.api_version
    if version >= 8:
        groups = []
        for g in request.groups:
            try:
                groups.append(Struct(group_id=g.group_id, topics=_topics(_fetch(broker, g.group_id, g.topics),
                                                                         g.topics), error_code=0))
            except KafkaError as e:
                groups.append(Struct(group_id=g.group_id, topics=[], error_code=int(e.code)))
        return Struct(throttle_time_ms=0, groups=groups)
    topics = request.topics if version >= 2 else (request.topics or [])
    try:
        result = _fetch(broker, request.group_id, topics)
    except KafkaError as e:
        if version >= 2:
            return Struct(throttle_time_ms=0, topics=[], error_code=int(e.code))
        return Struct(throttle_time_ms=0, error_code=int(e.code), topics=[
            Struct(name=t.name, partitions=[Struct(partition_index=p, committed_offset=-1, metadata="",
                                                   error_code=int(e.code)) for p in t.partition_indexes])
            for t in topics])
    return Struct(throttle_time_ms=0, topics=_topics(result, topics), error_code=0)
