"""The classic consumer's embedded protocol (ConsumerProtocolSubscription / ConsumerProtocolAssignment),
as the group coordinator reads and writes it when classic members live in a consumer (KIP-848) group
(online migration, Kafka's ConsumerProtocol): the subscription a JoinGroup carries, and the assignment
a SyncGroup answers. Sans-I/O: bytes in, objects out; bad bytes raise ``ConsumerProtocolError``."""

from __future__ import annotations

from typing import NamedTuple

from minibroker.protocol import codec

PROTOCOL_TYPE = "consumer"
MAX_VERSION = 3


class ConsumerProtocolError(ValueError):
    """Embedded consumer protocol bytes that cannot be parsed."""


class Subscription(NamedTuple):
    version: int
    topics: list[str]
    owned: list[tuple[str, list[int]]]  # (topic name, partitions)
    rack_id: str | None


def protocol_version(metadata: bytes) -> int:
    """The version a member's embedded metadata is written in, capped as Kafka serializes answers."""
    if len(metadata) < 2:
        raise ConsumerProtocolError("embedded consumer protocol metadata shorter than its version")
    version = int.from_bytes(metadata[:2], "big", signed=True)
    if version < 0:
        raise ConsumerProtocolError(f"embedded consumer protocol version {version}")
    return min(version, MAX_VERSION)


def decode_subscription(metadata: bytes) -> Subscription:
    version = protocol_version(metadata)
    try:
        sub = codec.decode("ConsumerProtocolSubscription", version, metadata, 2, exact=False)
    except Exception as e:  # the codec's errors: truncated or malformed bytes
        raise ConsumerProtocolError(f"malformed consumer protocol subscription: {e}") from None
    owned = [(tp.topic, list(tp.partitions or ())) for tp in (sub.owned_partitions or ())] \
        if version >= 1 else []
    return Subscription(version, list(sub.topics or ()), owned, sub.rack_id if version >= 3 else None)


def decode_assignment(data: bytes) -> dict[str, list[int]]:
    """A classic member's assignment bytes: {topic: partitions}; empty bytes are no assignment."""
    if not data:
        return {}
    version = protocol_version(data)
    try:
        a = codec.decode("ConsumerProtocolAssignment", version, data, 2, exact=False)
    except Exception as e:
        raise ConsumerProtocolError(f"malformed consumer protocol assignment: {e}") from None
    out: dict[str, list[int]] = {}
    for tp in a.assigned_partitions or ():
        out.setdefault(tp.topic, []).extend(tp.partitions or ())
    return out


def encode_assignment(version: int, assignment: dict[str, list[int]]) -> bytes:
    body = codec.Struct(assigned_partitions=[codec.Struct(topic=t, partitions=sorted(ps))
                                             for t, ps in sorted(assignment.items())],
                        user_data=None)
    return version.to_bytes(2, "big", signed=True) + codec.encode("ConsumerProtocolAssignment", version, body)
