"""The records of ``__consumer_offsets``, byte for byte as Kafka writes them.

Every record's key and value start with an int16 version. Keys (the version says which record it is):

- offset commit key v0/v1: ``group`` string, ``topic`` string, ``partition`` int32 (Kafka writes v1);
- group metadata key v2: ``group`` string.

Values (a null value is a tombstone: the group or the offset was deleted):

- offset commit value: v0 and v2 ``offset`` int64, ``metadata`` string, ``commitTimestamp`` int64;
  v1 adds ``expireTimestamp`` int64 after them; v3 puts ``leaderEpoch`` int32 after ``offset``
  (Kafka writes v3, or v1 when a commit carried an explicit retention time);
- group metadata value v0-v3: ``protocolType`` string, ``generation`` int32, ``protocol`` and
  ``leader`` nullable strings, ``currentStateTimestamp`` int64 (v2+), then an int32-counted array of
  members: ``memberId``, ``groupInstanceId`` (nullable, v3+), ``clientId``, ``clientHost`` strings,
  ``rebalanceTimeout`` int32 (v1+), ``sessionTimeout`` int32, ``subscription`` and ``assignment``
  int32-length bytes (Kafka writes v3).

Strings are int16 length + UTF-8 (-1 for null), as in the non-flexible protocol. Version 4 values
(flexible, KIP-915) are read too: compact lengths and trailing tagged fields, which are skipped.
A null where the schema allows none (a group, topic, member or client id) reads as an empty string.

Which partition holds a group: ``abs(hashCode(group)) % offsets.topic.num.partitions`` with Java's
``String.hashCode`` over UTF-16 code units and Kafka's ``Utils.abs`` (MIN_VALUE maps to 0).

Sans-I/O: bytes in, objects out.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

from minibroker.coordinator.record_codec import (
    I16,
    I32,
    I64,
    RecordError,
    RecordReader,
    write_bytes,
    write_string,
)

OFFSET_COMMIT_KEY_VERSION = 1
GROUP_METADATA_KEY_VERSION = 2
OFFSET_COMMIT_VALUE_VERSION = 3
OFFSET_COMMIT_VALUE_VERSION_WITH_EXPIRY = 1
GROUP_METADATA_VALUE_VERSION = 3


def java_string_hash(s: str) -> int:
    """Java's ``String.hashCode``: s[0]*31^(n-1) + ... over UTF-16 code units, as a signed int32."""
    h = 0
    data = s.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def partition_for(group_id: str, num_partitions: int) -> int:
    """The ``__consumer_offsets`` partition of a group (Kafka's ``Utils.abs(hashCode) % n``)."""
    h = java_string_hash(group_id)
    return (0 if h == -(2**31) else abs(h)) % num_partitions


# -- the records --------------------------------------------------------------------------------


# Immutable value types; NamedTuples rather than dataclasses because they are built at import
# for a fraction of the cost, and the broker imports this module on every start.


class OffsetCommitKey(NamedTuple):
    group: str
    topic: str
    partition: int


class GroupMetadataKey(NamedTuple):
    group: str


class OffsetCommitValue(NamedTuple):
    offset: int
    metadata: str = ""
    commit_timestamp: int = -1
    leader_epoch: int = -1
    expire_timestamp: int = -1  # v1 only: set when a commit (OffsetCommit v2-v4) gave a retention time


class MemberRecord(NamedTuple):
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout: int
    session_timeout: int
    subscription: bytes
    assignment: bytes


class GroupMetadataValue(NamedTuple):
    protocol_type: str
    generation: int
    protocol: str | None
    leader: str | None
    current_state_timestamp: int = -1
    members: Sequence[MemberRecord] = ()


# -- writing ------------------------------------------------------------------------------------


def encode_offset_commit_key(group: str, topic: str, partition: int) -> bytes:
    out = bytearray(I16.pack(OFFSET_COMMIT_KEY_VERSION))
    write_string(out, group)
    write_string(out, topic)
    out += I32.pack(partition)
    return bytes(out)


def encode_group_metadata_key(group: str) -> bytes:
    out = bytearray(I16.pack(GROUP_METADATA_KEY_VERSION))
    write_string(out, group)
    return bytes(out)


def encode_offset_commit_value(value: OffsetCommitValue, version: int | None = None) -> bytes:
    """Kafka's choice of version unless one is forced: v1 with an expire timestamp, else v3."""
    if version is None:
        version = OFFSET_COMMIT_VALUE_VERSION_WITH_EXPIRY if value.expire_timestamp >= 0 \
            else OFFSET_COMMIT_VALUE_VERSION
    if version not in (0, 1, 2, 3):
        raise ValueError(f"cannot write offset commit value v{version}")
    out = bytearray(I16.pack(version))
    out += I64.pack(value.offset)
    if version >= 3:
        out += I32.pack(value.leader_epoch)
    write_string(out, value.metadata if value.metadata is not None else "")
    out += I64.pack(value.commit_timestamp)
    if version == 1:
        out += I64.pack(value.expire_timestamp)
    return bytes(out)


def encode_group_metadata_value(value: GroupMetadataValue,
                                version: int = GROUP_METADATA_VALUE_VERSION) -> bytes:
    if version not in (0, 1, 2, 3):
        raise ValueError(f"cannot write group metadata value v{version}")
    out = bytearray(I16.pack(version))
    write_string(out, value.protocol_type)
    out += I32.pack(value.generation)
    write_string(out, value.protocol)
    write_string(out, value.leader)
    if version >= 2:
        out += I64.pack(value.current_state_timestamp)
    out += I32.pack(len(value.members))
    for m in value.members:
        write_string(out, m.member_id)
        if version >= 3:
            write_string(out, m.group_instance_id)
        write_string(out, m.client_id)
        write_string(out, m.client_host)
        if version >= 1:
            out += I32.pack(m.rebalance_timeout)
        out += I32.pack(m.session_timeout)
        write_bytes(out, m.subscription)
        write_bytes(out, m.assignment)
    return bytes(out)


# -- reading ------------------------------------------------------------------------------------


def decode_key(buf) -> OffsetCommitKey | GroupMetadataKey | None:
    """The key of a ``__consumer_offsets`` record; None for record types this coordinator ignores."""
    r = RecordReader(buf)
    version = r.i16()
    if version in (0, 1):
        group, topic, partition = r.nullable_string("group"), r.nullable_string("topic"), r.i32()
        return OffsetCommitKey(group or "", topic or "", partition)
    if version == 2:
        return GroupMetadataKey(r.nullable_string("group") or "")
    return None  # v3+: records of the new consumer protocol (KIP-848) or share groups


def decode_offset_commit_value(buf) -> OffsetCommitValue:
    r = RecordReader(buf)
    version = r.i16()
    if not 0 <= version <= 4:
        raise RecordError(f"unknown offset commit value version {version}")
    r.flexible = version >= 4
    offset = r.i64()
    leader_epoch = r.i32() if version >= 3 else -1
    metadata = r.nullable_string("metadata")
    commit_ts = r.i64()
    expire_ts = r.i64() if version == 1 else -1
    r.skip_tagged_fields()
    return OffsetCommitValue(offset, metadata or "", commit_ts, leader_epoch, expire_ts)


def decode_group_metadata_value(buf) -> GroupMetadataValue:
    r = RecordReader(buf)
    version = r.i16()
    if not 0 <= version <= 4:
        raise RecordError(f"unknown group metadata value version {version}")
    r.flexible = version >= 4
    protocol_type = r.nullable_string("protocolType") or ""
    generation = r.i32()
    protocol = r.nullable_string("protocol")
    leader = r.nullable_string("leader")
    state_ts = r.i64() if version >= 2 else -1
    members = []
    for _ in range(r.nullable_array_len() or 0):
        member_id = r.nullable_string("memberId") or ""
        instance_id = r.nullable_string("groupInstanceId") if version >= 3 else None
        client_id = r.nullable_string("clientId") or ""
        client_host = r.nullable_string("clientHost") or ""
        rebalance_timeout = r.i32() if version >= 1 else -1
        session_timeout = r.i32()
        subscription = r.nullable_bytes() or b""
        assignment = r.nullable_bytes() or b""
        r.skip_tagged_fields()
        if rebalance_timeout < 0:
            rebalance_timeout = session_timeout
        members.append(MemberRecord(member_id, instance_id, client_id, client_host, rebalance_timeout,
                                    session_timeout, subscription, assignment))
    r.skip_tagged_fields()
    return GroupMetadataValue(protocol_type, generation, protocol, leader, state_ts, members)
