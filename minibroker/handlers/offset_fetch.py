"""OffsetFetch: v0-v10.

Behaviour: the committed offset, leader epoch and metadata of each asked partition; -1, -1 and ""
with no error where nothing is committed (also for unknown groups). Null topics (v2+) means every
partition the group has committed.
Authorization (with an authorizer), as Kafka: DESCRIBE on the group (else GROUP_AUTHORIZATION_FAILED for
it), DESCRIBE on each topic: a named one the principal may not describe gets TOPIC_AUTHORIZATION_FAILED per
partition, and such topics are left out when all of a group's offsets are asked.
Version notes: v0-v1 put group errors (INVALID_GROUP_ID 24, COORDINATOR_LOAD_IN_PROGRESS 14) on each
partition; v2-v7 have a top-level error; v5 committed leader epochs; v7 require_stable (always
stable: there are no pending transactional offsets); v8+ several groups per request with per-group
errors; v9 member id / epoch (KIP-848): checked for consumer groups as Kafka does (a member id other
than null with epoch -1 must be a member, UNKNOWN_MEMBER_ID 25, at its epoch, STALE_MEMBER_EPOCH 113),
not for classic groups; v10 names topics by id: an id no topic has gets UNKNOWN_TOPIC_ID 100 on each
asked partition, and all of a group's offsets leave out topics that no longer exist (they have no id
to answer with).
Gaps: none known.
"""

from __future__ import annotations

from minibroker.errors import ErrorCode, KafkaError
from minibroker.handlers.offset_commit import resolve_topic_ids
from minibroker.handlers.registry import handles
from minibroker.protocol.codec import Struct
from minibroker.security.acls import AclOperation, ResourceType
from minibroker.security.authorizer import authorize, denied


def _topics(result: dict, requested, unstable=frozenset(), refused=frozenset()) -> list[Struct]:
    by_topic: dict[str, list[Struct]] = {}
    if requested is not None:
        for t in requested:
            by_topic.setdefault(t.name, [])
    for (topic, partition), value in result.items():
        error = (ErrorCode.TOPIC_AUTHORIZATION_FAILED if topic in refused
                 else ErrorCode.UNSTABLE_OFFSET_COMMIT if (topic, partition) in unstable else 0)
        if error:
            value = None  # an erring partition shows nothing committed
        by_topic.setdefault(topic, []).append(Struct(
            partition_index=partition,
            committed_offset=value.offset if value is not None else -1,
            committed_leader_epoch=value.leader_epoch if value is not None else -1,
            metadata=value.metadata if value is not None else "",
            error_code=int(error)))
    return [Struct(name=name, partitions=parts) for name, parts in by_topic.items()]


def _by_topic_id(broker, topics: list[Struct], unknown) -> list[Struct]:
    """v10+: each answered topic with its id (topics without one are gone: left out), then the asked
    ids no topic has, UNKNOWN_TOPIC_ID on each partition."""
    infos = broker.logs.topics
    out = []
    for t in topics:
        info = infos.get(t.name)
        if info is not None:
            t.topic_id = info.id
            out.append(t)
    for t in unknown:
        out.append(Struct(name="", topic_id=t.topic_id, partitions=[
            Struct(partition_index=p, committed_offset=-1, committed_leader_epoch=-1, metadata="",
                   error_code=int(ErrorCode.UNKNOWN_TOPIC_ID)) for p in t.partition_indexes]))
    return out


def _resolve_topic_ids(broker, topics) -> tuple[list | None, list]:
    """(asked topics whose id names a topic, each given its ``name``; the others); null stays null."""
    if topics is None:
        return None, []
    return resolve_topic_ids(broker, topics)


def _fetch(broker, header, group_id: str, topics, require_stable: bool, member_id: str | None = None,
           member_epoch: int = -1):
    """(committed offsets, partitions answered UNSTABLE_OFFSET_COMMIT, topics answered
    TOPIC_AUTHORIZATION_FAILED). Kafka's checks: DESCRIBE on the group (else the group's error), then
    DESCRIBE on each topic: a named topic the principal may not describe is answered with the error,
    one among all the group's offsets is left out."""
    if not authorize(broker, header, AclOperation.DESCRIBE, ResourceType.GROUP, group_id):
        raise KafkaError(ErrorCode.GROUP_AUTHORIZATION_FAILED)
    refused = frozenset() if topics is None else denied(broker, header, AclOperation.DESCRIBE,
                                                        ResourceType.TOPIC, (t.name for t in topics))
    partitions = None if topics is None else [(t.name, p) for t in topics for p in t.partition_indexes
                                              if t.name not in refused]
    result = broker.groups.fetch_offsets(group_id, partitions, member_id=member_id, member_epoch=member_epoch)
    unstable = broker.groups.unstable_partitions(group_id) if require_stable else frozenset()
    if unstable and partitions is None:
        result.update({tp: None for tp in unstable if tp not in result})
    if topics is None and broker.authorizer is not None:
        hidden = denied(broker, header, AclOperation.DESCRIBE, ResourceType.TOPIC, (t for t, _ in result))
        result = {tp: v for tp, v in result.items() if tp[0] not in hidden}
    elif refused:
        result.update({(t.name, p): None for t in topics if t.name in refused for p in t.partition_indexes})
    return result, unstable, refused


@handles(9, (0, 10))
def handle_offset_fetch(broker, header, request):
    version = header.api_version
    require_stable = version >= 7 and request.require_stable
    if version >= 8:
        groups = []
        for g in request.groups:
            asked, unknown = (_resolve_topic_ids(broker, g.topics) if version >= 10 else (g.topics, []))
            try:
                member = (g.member_id, g.member_epoch) if version >= 9 else (None, -1)
                result, unstable, refused = _fetch(broker, header, g.group_id, asked, require_stable, *member)
                topics = _topics(result, asked, unstable, refused)
                if version >= 10:
                    topics = _by_topic_id(broker, topics, unknown)
                groups.append(Struct(group_id=g.group_id, topics=topics, error_code=0))
            except KafkaError as e:
                groups.append(Struct(group_id=g.group_id, topics=[], error_code=int(e.code)))
        return Struct(throttle_time_ms=0, groups=groups)
    topics = request.topics if version >= 2 else (request.topics or [])
    try:
        result, unstable, refused = _fetch(broker, header, request.group_id, topics, require_stable)
    except KafkaError as e:
        if version >= 2:
            return Struct(throttle_time_ms=0, topics=[], error_code=int(e.code))
        return Struct(throttle_time_ms=0, error_code=int(e.code), topics=[
            Struct(name=t.name, partitions=[Struct(partition_index=p, committed_offset=-1, metadata="",
                                                   error_code=int(e.code)) for p in t.partition_indexes])
            for t in topics])
    return Struct(throttle_time_ms=0, topics=_topics(result, topics, unstable, refused), error_code=0)
