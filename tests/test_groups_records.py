"""The records of __consumer_offsets, byte for byte against Kafka's schemas, and group partitioning."""

from __future__ import annotations

import struct

import pytest

from minibroker.coordinator.group_records import (
    GroupMetadataKey,
    GroupMetadataValue,
    MemberRecord,
    OffsetCommitKey,
    OffsetCommitValue,
    RecordError,
    decode_group_metadata_value,
    decode_key,
    decode_offset_commit_value,
    encode_group_metadata_key,
    encode_group_metadata_value,
    encode_offset_commit_key,
    encode_offset_commit_value,
    java_string_hash,
    partition_for,
)


def s16(s: str | None) -> bytes:
    """A non-flexible string written independently of the module under test."""
    if s is None:
        return b"\xff\xff"
    b = s.encode()
    return len(b).to_bytes(2, "big") + b


@pytest.mark.parametrize("s, h", [
    ("", 0), ("a", 97), ("Aa", 2112), ("BB", 2112), ("hello", 99162322),
    ("polygenelubricants", -(2**31)),  # the classic string whose hashCode is Integer.MIN_VALUE
    ("\u00e9t\u00e9", 0x00e9 * 961 + 0x74 * 31 + 0xe9),
    ("\U0001F600", 0xD83D * 31 + 0xDE00),  # a surrogate pair hashes as two UTF-16 code units
])
def test_java_string_hash(s, h):
    assert java_string_hash(s) == h


def test_partition_for_uses_kafka_abs():
    assert partition_for("hello", 50) == 99162322 % 50
    assert partition_for("polygenelubricants", 50) == 0  # Utils.abs(MIN_VALUE) == 0
    # a negative hash: abs() before the modulo
    h = java_string_hash("consumer-group-17")
    assert partition_for("consumer-group-17", 50) == abs(h) % 50
    assert all(0 <= partition_for(f"g{i}", 7) < 7 for i in range(200))


def test_offset_commit_key_v1_bytes():
    data = encode_offset_commit_key("my-group", "topic", 3)
    assert data == b"\x00\x01" + s16("my-group") + s16("topic") + b"\x00\x00\x00\x03"
    assert decode_key(data) == OffsetCommitKey("my-group", "topic", 3)
    # key v0 has the same layout
    assert decode_key(b"\x00\x00" + data[2:]) == OffsetCommitKey("my-group", "topic", 3)


def test_group_metadata_key_v2_bytes():
    data = encode_group_metadata_key("my-group")
    assert data == b"\x00\x02" + s16("my-group")
    assert decode_key(data) == GroupMetadataKey("my-group")


def test_unknown_key_versions_are_ignored():
    assert decode_key(b"\x00\x09" + s16("x")) is None  # 3-8 are consumer (KIP-848) group records


def test_offset_commit_value_v3_bytes():
    v = OffsetCommitValue(offset=42, metadata="meta", commit_timestamp=1700000000000, leader_epoch=7)
    data = encode_offset_commit_value(v)
    expected = (b"\x00\x03" + struct.pack(">q", 42) + struct.pack(">i", 7) + s16("meta")
                + struct.pack(">q", 1700000000000))
    assert data == expected
    assert decode_offset_commit_value(data) == v


def test_offset_commit_value_v1_with_expire_timestamp():
    v = OffsetCommitValue(offset=1, metadata="", commit_timestamp=10, expire_timestamp=20)
    data = encode_offset_commit_value(v)
    assert data == b"\x00\x01" + struct.pack(">q", 1) + s16("") + struct.pack(">qq", 10, 20)
    assert decode_offset_commit_value(data) == v


@pytest.mark.parametrize("version", [0, 2])
def test_offset_commit_value_v0_v2(version):
    data = struct.pack(">hq", version, 9) + s16("m") + struct.pack(">q", 5)
    assert decode_offset_commit_value(data) == OffsetCommitValue(9, "m", 5, -1, -1)


def test_offset_commit_value_v4_flexible():
    # v4: offset, leaderEpoch, compact string, commitTimestamp, empty tagged fields
    data = struct.pack(">hqi", 4, 11, 3) + b"\x02x" + struct.pack(">q", 99) + b"\x00"
    assert decode_offset_commit_value(data) == OffsetCommitValue(11, "x", 99, 3, -1)


def test_offset_commit_value_unknown_version():
    with pytest.raises(RecordError):
        decode_offset_commit_value(b"\x00\x09" + b"\x00" * 30)


def _member(i: int, instance: str | None = None) -> MemberRecord:
    return MemberRecord(f"m{i}", instance, f"client{i}", "/127.0.0.1", 30000, 10000, b"\x00\x01sub",
                        b"\x00\x02as")


def test_group_metadata_value_v3_bytes():
    members = [_member(1, "static-1"), _member(2)]
    value = GroupMetadataValue("consumer", 5, "range", "m1", 1700000000123, members)
    data = encode_group_metadata_value(value)
    expected = b"\x00\x03" + s16("consumer") + struct.pack(">i", 5) + s16("range") + s16("m1") \
        + struct.pack(">q", 1700000000123) + struct.pack(">i", 2)
    for i, instance in ((1, "static-1"), (2, None)):
        expected += s16(f"m{i}") + s16(instance) + s16(f"client{i}") + s16("/127.0.0.1") \
            + struct.pack(">ii", 30000, 10000) + struct.pack(">i", 5) + b"\x00\x01sub" \
            + struct.pack(">i", 4) + b"\x00\x02as"
    assert data == expected
    assert decode_group_metadata_value(data) == value


def test_empty_group_metadata_value():
    value = GroupMetadataValue("consumer", 8, None, None, 123, [])
    data = encode_group_metadata_value(value)
    assert data == b"\x00\x03" + s16("consumer") + struct.pack(">i", 8) + b"\xff\xff\xff\xff" \
        + struct.pack(">q", 123) + b"\x00\x00\x00\x00"
    assert decode_group_metadata_value(data) == value


@pytest.mark.parametrize("version", [0, 1, 2, 3])
def test_group_metadata_older_versions_round_trip(version):
    value = GroupMetadataValue("consumer", 2, "range", "m1", 55, [_member(1, "i")])
    decoded = decode_group_metadata_value(encode_group_metadata_value(value, version))
    assert decoded.generation == 2 and decoded.protocol == "range" and decoded.leader == "m1"
    assert decoded.current_state_timestamp == (55 if version >= 2 else -1)
    m = decoded.members[0]
    assert m.group_instance_id == ("i" if version >= 3 else None)
    assert m.rebalance_timeout == (30000 if version >= 1 else 10000)  # v0: the session timeout
    assert (m.subscription, m.assignment) == (b"\x00\x01sub", b"\x00\x02as")
