"""What ShareFetch (78) and ShareAcknowledge (79) share: request checks, acknowledgements, answers.

Not a handler module: share_fetch.py and share_acknowledge.py register the APIs.
"""

from __future__ import annotations

from minibroker.errors import ErrorCode, KafkaError
from minibroker.handlers.leader_epochs import leader_epoch_of
from minibroker.protocol.codec import Struct
from minibroker.security.acls import AclOperation, ResourceType
from minibroker.security.authorizer import authorize, denied

MAX_MEMBER_ID_LENGTH = 36  # Kafka's KafkaApis.isMemberIdValid: a UUID's text at most


class ShareRequestError(KafkaError):
    """The whole request fails with this top-level code (no partitions in the answer)."""


def share_groups_served() -> bool:
    """share.version 1 is served (ShareGroupHeartbeat registered): else the share APIs answer
    UNSUPPORTED_VERSION, as Kafka does when share groups are off."""
    from minibroker.handlers.api_versions import served_level

    return served_level("share.version", 1) >= 1


def check_group_and_member(broker, header, request) -> tuple[str, str]:
    """Kafka's order: a null group id is INVALID_REQUEST, then READ on the group
    (GROUP_AUTHORIZATION_FAILED), then the member id (non-empty, at most 36 characters)."""
    group_id = request.group_id
    if not group_id:
        raise ShareRequestError(ErrorCode.INVALID_REQUEST, "a share request needs a group id")
    if not authorize(broker, header, AclOperation.READ, ResourceType.GROUP, group_id):
        raise ShareRequestError(ErrorCode.GROUP_AUTHORIZATION_FAILED)
    member_id = request.member_id
    if not member_id or len(member_id) > MAX_MEMBER_ID_LENGTH:
        raise ShareRequestError(ErrorCode.INVALID_REQUEST,
                                f"the member id must be 1 to {MAX_MEMBER_ID_LENGTH} characters")
    return group_id, member_id


def current_leader(broker, error=ErrorCode.NONE, topic: str | None = None, partition: int = -1) -> Struct:
    """A partition's CurrentLeader: -1/-1 unless the error says the client has the wrong leader, as Kafka
    fills it only for NOT_LEADER_OR_FOLLOWER and FENCED_LEADER_EPOCH (with the partition's epoch)."""
    if error in (ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.FENCED_LEADER_EPOCH):
        epoch = leader_epoch_of(broker, topic, partition) if topic is not None else 0
        return Struct(leader_id=broker.node_id, leader_epoch=epoch)
    return Struct(leader_id=-1, leader_epoch=-1)


class TopicNames:
    """Topic id -> name for one request, and which names the principal may READ."""

    def __init__(self, broker, header) -> None:
        self.broker = broker
        self.header = header
        self._names: dict[bytes, str | None] = {}
        self.denied: frozenset[str] = frozenset()

    def refresh(self) -> None:
        """Look the ids up again: a long poll's next pass must not read a topic deleted and created again
        under the same name as if it were the one the session named (its id is another)."""
        self._names.clear()

    def name(self, topic_id: bytes) -> str | None:
        if topic_id not in self._names:
            self._names[topic_id] = self.broker.logs.topic_name(topic_id)
        return self._names[topic_id]

    def authorize(self, topic_ids) -> None:
        """READ on every named topic, decided once per name (unknown ids stay UNKNOWN_TOPIC_ID)."""
        if self.broker.authorizer is not None:
            self.denied = denied(self.broker, self.header, AclOperation.READ, ResourceType.TOPIC,
                                 [self.name(t) for t in set(topic_ids)])

    def error(self, topic_id: bytes) -> ErrorCode:
        """The error of every partition of this topic before the share partitions are asked, or NONE."""
        name = self.name(topic_id)
        if name is None:
            return ErrorCode.UNKNOWN_TOPIC_ID
        if name in self.denied:
            return ErrorCode.TOPIC_AUTHORIZATION_FAILED
        return ErrorCode.NONE


def acknowledgements(topics) -> dict[tuple[bytes, int], list[tuple[int, int, list[int]]]]:
    """(topic id, partition) -> its acknowledgement batches, in request order. A partition named twice
    (librdkafka can split one topic in two entries) has its batches joined."""
    out: dict[tuple[bytes, int], list[tuple[int, int, list[int]]]] = {}
    for topic in topics:
        topic_id = bytes(topic.topic_id)
        for p in topic.partitions:
            batches = p.acknowledgement_batches
            if batches:
                out.setdefault((topic_id, p.partition_index), []).extend(
                    (b.first_offset, b.last_offset, list(b.acknowledge_types)) for b in batches)
    return out


def apply_acknowledgements(broker, names: TopicNames, group_id: str, member_id: str, acks,
                           *, allow_renew: bool) -> dict[tuple[bytes, int], tuple[ErrorCode, str | None]]:
    """Hand each partition's batches to the share partitions; (error, message) per partition."""
    results: dict[tuple[bytes, int], tuple[ErrorCode, str | None]] = {}
    for (topic_id, partition), batches in acks.items():
        error = names.error(topic_id)
        if error:
            results[(topic_id, partition)] = (error, None)
            continue
        try:
            code = broker.share_partitions.acknowledge(group_id, member_id, names.name(topic_id), partition,
                                                       batches, allow_renew=allow_renew)
            results[(topic_id, partition)] = (ErrorCode(code), None)
        except KafkaError as e:
            results[(topic_id, partition)] = (e.code, e.message)
    return results


def lock_timeout_ms(broker, group_id: str) -> int:
    partitions = getattr(broker, "share_partitions", None)
    if partitions is None:
        return broker.config["group.share.record.lock.duration.ms"]
    return partitions.lock_duration_ms(group_id)


def grouped(rows: dict[tuple[bytes, int], Struct]) -> list[Struct]:
    """Partition answers by topic id, topics and partitions in first-seen order."""
    topics: dict[bytes, list[Struct]] = {}
    for (topic_id, _), row in rows.items():
        topics.setdefault(topic_id, []).append(row)
    return [Struct(topic_id=topic_id, partitions=parts) for topic_id, parts in topics.items()]
