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

Which partition holds a group: ``abs(hashCode(group)) % offsets.topic.num.partitions`` with Java's
``String.hashCode`` over UTF-16 code units and Kafka's ``Utils.abs`` (MIN_VALUE maps to 0).

Sans-I/O: bytes in, objects out.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import NamedTuple

OFFSET_COMMIT_KEY_VERSION = 1
GROUP_METADATA_KEY_VERSION = 2
OFFSET_COMMIT_VALUE_VERSION = 3
OFFSET_COMMIT_VALUE_VERSION_WITH_EXPIRY = 1
GROUP_METADATA_VALUE_VERSION = 3

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")


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


class RecordError(ValueError):
    """A key or value of ``__consumer_offsets`` that no known version describes."""


# -- writing ------------------------------------------------------------------------------------


def _string(out: bytearray, s: str | None) -> None:
    if s is None:
        out += _I16.pack(-1)
        return
    b = s.encode("utf-8")
    out += _I16.pack(len(b))
    out += b


def _bytes(out: bytearray, b: bytes | None) -> None:
    if b is None:
        out += _I32.pack(-1)
        return
    out += _I32.pack(len(b))
    out += b


def encode_offset_commit_key(group: str, topic: str, partition: int) -> bytes:
    out = bytearray(_I16.pack(OFFSET_COMMIT_KEY_VERSION))
    _string(out, group)
    _string(out, topic)
    out += _I32.pack(partition)
    return bytes(out)


def encode_group_metadata_key(group: str) -> bytes:
    out = bytearray(_I16.pack(GROUP_METADATA_KEY_VERSION))
    _string(out, group)
    return bytes(out)


def encode_offset_commit_value(value: OffsetCommitValue, version: int | None = None) -> bytes:
    """Kafka's choice of version unless one is forced: v1 with an expire timestamp, else v3."""
    if version is None:
        version = OFFSET_COMMIT_VALUE_VERSION_WITH_EXPIRY if value.expire_timestamp >= 0 \
            else OFFSET_COMMIT_VALUE_VERSION
    if version not in (0, 1, 2, 3):
        raise ValueError(f"cannot write offset commit value v{version}")
    out = bytearray(_I16.pack(version))
    out += _I64.pack(value.offset)
    if version >= 3:
        out += _I32.pack(value.leader_epoch)
    _string(out, value.metadata if value.metadata is not None else "")
    out += _I64.pack(value.commit_timestamp)
    if version == 1:
        out += _I64.pack(value.expire_timestamp)
    return bytes(out)


def encode_group_metadata_value(value: GroupMetadataValue,
                                version: int = GROUP_METADATA_VALUE_VERSION) -> bytes:
    if version not in (0, 1, 2, 3):
        raise ValueError(f"cannot write group metadata value v{version}")
    out = bytearray(_I16.pack(version))
    _string(out, value.protocol_type)
    out += _I32.pack(value.generation)
    _string(out, value.protocol)
    _string(out, value.leader)
    if version >= 2:
        out += _I64.pack(value.current_state_timestamp)
    out += _I32.pack(len(value.members))
    for m in value.members:
        _string(out, m.member_id)
        if version >= 3:
            _string(out, m.group_instance_id)
        _string(out, m.client_id)
        _string(out, m.client_host)
        if version >= 1:
            out += _I32.pack(m.rebalance_timeout)
        out += _I32.pack(m.session_timeout)
        _bytes(out, m.subscription)
        _bytes(out, m.assignment)
    return bytes(out)


# -- reading ------------------------------------------------------------------------------------


class _Reader:
    __slots__ = ("buf", "pos", "flexible")

    def __init__(self, buf, pos: int = 0, flexible: bool = False):
        self.buf = memoryview(buf)
        self.pos = pos
        self.flexible = flexible

    def _fixed(self, st: struct.Struct) -> int:
        if self.pos + st.size > len(self.buf):
            raise RecordError("record truncated")
        (v,) = st.unpack_from(self.buf, self.pos)
        self.pos += st.size
        return v

    def i16(self) -> int:
        return self._fixed(_I16)

    def i32(self) -> int:
        return self._fixed(_I32)

    def i64(self) -> int:
        return self._fixed(_I64)

    def uvarint(self) -> int:
        result = shift = 0
        while True:
            if self.pos >= len(self.buf):
                raise RecordError("record truncated")
            b = self.buf[self.pos]
            self.pos += 1
            result |= (b & 0x7F) << shift
            if not b & 0x80:
                return result
            shift += 7

    def _raw(self, n: int) -> bytes:
        if n < 0 or self.pos + n > len(self.buf):
            raise RecordError("record truncated")
        b = bytes(self.buf[self.pos:self.pos + n])
        self.pos += n
        return b

    def string(self) -> str | None:
        n = self.uvarint() - 1 if self.flexible else self.i16()
        return None if n < 0 else self._raw(n).decode("utf-8")

    def bytes_(self) -> bytes | None:
        n = self.uvarint() - 1 if self.flexible else self.i32()
        return None if n < 0 else self._raw(n)

    def array_len(self) -> int:
        return self.uvarint() - 1 if self.flexible else self.i32()

    def skip_tags(self) -> None:
        if self.flexible:
            for _ in range(self.uvarint()):
                self.uvarint()
                self._raw(self.uvarint())


def decode_key(buf) -> OffsetCommitKey | GroupMetadataKey | None:
    """The key of a ``__consumer_offsets`` record; None for record types this coordinator ignores."""
    r = _Reader(buf)
    version = r.i16()
    if version in (0, 1):
        group, topic, partition = r.string(), r.string(), r.i32()
        return OffsetCommitKey(group or "", topic or "", partition)
    if version == 2:
        return GroupMetadataKey(r.string() or "")
    return None  # v3+: records of the new consumer protocol (KIP-848) or share groups


def decode_offset_commit_value(buf) -> OffsetCommitValue:
    r = _Reader(buf)
    version = r.i16()
    if not 0 <= version <= 4:
        raise RecordError(f"unknown offset commit value version {version}")
    r.flexible = version >= 4
    offset = r.i64()
    leader_epoch = r.i32() if version >= 3 else -1
    metadata = r.string()
    commit_ts = r.i64()
    expire_ts = r.i64() if version == 1 else -1
    r.skip_tags()
    return OffsetCommitValue(offset, metadata or "", commit_ts, leader_epoch, expire_ts)


def decode_group_metadata_value(buf) -> GroupMetadataValue:
    r = _Reader(buf)
    version = r.i16()
    if not 0 <= version <= 4:
        raise RecordError(f"unknown group metadata value version {version}")
    r.flexible = version >= 4
    protocol_type = r.string() or ""
    generation = r.i32()
    protocol = r.string()
    leader = r.string()
    state_ts = r.i64() if version >= 2 else -1
    members = []
    for _ in range(max(r.array_len(), 0)):
        member_id = r.string() or ""
        instance_id = r.string() if version >= 3 else None
        client_id = r.string() or ""
        client_host = r.string() or ""
        rebalance_timeout = r.i32() if version >= 1 else -1
        session_timeout = r.i32()
        subscription = r.bytes_() or b""
        assignment = r.bytes_() or b""
        r.skip_tags()
        if rebalance_timeout < 0:
            rebalance_timeout = session_timeout
        members.append(MemberRecord(member_id, instance_id, client_id, client_host, rebalance_timeout,
                                    session_timeout, subscription, assignment))
    r.skip_tags()
    return GroupMetadataValue(protocol_type, generation, protocol, leader, state_ts, members)
