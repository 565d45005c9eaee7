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
    decode_epoch_value,
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


# -- the KIP-848 and KIP-932 records, as Kafka 4.3's group-coordinator schemas lay them out -------------

def _uvarint(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    return bytes(out + bytes([n]))


def _cstr(s: str) -> bytes:
    """A compact (flexible) string, written independently of the module under test."""
    return _uvarint(len(s.encode()) + 1) + s.encode()


def _carr(n: int) -> bytes:
    return _uvarint(n + 1)


NO_TAGS = b"\x00"
T1, T2, T3 = bytes(range(16)), bytes(range(16, 32)), bytes(range(32, 48))


def _tagged(tag: int, data: bytes) -> bytes:
    return _uvarint(1) + _uvarint(tag) + _uvarint(len(data)) + data


def test_share_group_records_laid_out_by_kafka_4_3_schemas():
    from minibroker.coordinator import group_records as gr
    from minibroker.storage.checkpoints import uuid_to_str
    from minibroker.tools import coordinator_json as cj

    # keys: int16 record type, then GroupId (and MemberId) as non-flexible strings
    assert decode_key(struct.pack(">h", 15) + s16("g")) == gr.ShareGroupKey(15, "g")
    assert decode_key(struct.pack(">h", 14) + s16("g") + s16("m")) == gr.ShareGroupKey(14, "g", "m")
    assert cj.key_json(15, struct.pack(">h", 15) + s16("g")) == {"groupId": "g"}

    # 15 ShareGroupStatePartitionMetadataValue v0: InitializingTopics, InitializedTopics, DeletingTopics
    value15 = (struct.pack(">h", 0)
               + _carr(1) + T1 + _cstr("orders") + _carr(2) + struct.pack(">ii", 0, 1) + NO_TAGS
               + _carr(1) + T2 + _cstr("audit") + _carr(1) + struct.pack(">i", 3) + NO_TAGS
               + _carr(1) + T3 + _cstr("gone") + NO_TAGS
               + NO_TAGS)
    v15 = gr.decode_share_state_partition_metadata_value(value15)
    assert v15 == gr.ShareStatePartitionMetadataValue({T1: ("orders", {0, 1})}, {T2: ("audit", {3})},
                                                      {T3: "gone"})
    assert gr.encode_share_state_partition_metadata_value(v15) == value15
    assert cj.value_json(15, value15) == {
        "initializingTopics": [{"topicId": uuid_to_str(T1), "topicName": "orders", "partitions": [0, 1]}],
        "initializedTopics": [{"topicId": uuid_to_str(T2), "topicName": "audit", "partitions": [3]}],
        "deletingTopics": [{"topicId": uuid_to_str(T3), "topicName": "gone"}]}

    # 10 ShareGroupMemberMetadataValue: RackId (nullable), ClientId, ClientHost, SubscribedTopicNames
    value10 = struct.pack(">h", 0) + b"\x00" + _cstr("c") + _cstr("/h") + _carr(1) + _cstr("orders") + NO_TAGS
    assert gr.decode_share_member_metadata_value(value10) == gr.ShareMemberMetadataValue(None, "c", "/h",
                                                                                         ["orders"])
    assert gr.encode_share_member_metadata_value(gr.decode_share_member_metadata_value(value10)) == value10

    # 11 ShareGroupMetadataValue: Epoch int32 and MetadataHash int64, both plain fields
    value11 = struct.pack(">hiq", 0, 5, -42) + NO_TAGS
    assert gr.decode_share_group_metadata_value(value11) == gr.ShareGroupMetadataValue(5, -42)
    assert gr.encode_share_group_metadata_value(gr.ShareGroupMetadataValue(5, -42)) == value11

    # 12 ShareGroupTargetAssignmentMetadataValue: AssignmentEpoch, then KIP-1263's tagged
    # AssignmentTimestamp (tag 0), which Kafka writes only when it is not 0
    value12 = struct.pack(">hi", 0, 7) + _tagged(0, struct.pack(">q", 1_700_000_000_000))
    assert gr.decode_epoch_value(value12) == 7
    assert cj.value_json(12, value12) == {"assignmentEpoch": 7, "assignmentTimestamp": 1_700_000_000_000}
    assert cj.value_json(12, struct.pack(">hi", 0, 7) + NO_TAGS) == {"assignmentEpoch": 7}

    # 13 ShareGroupTargetAssignmentMemberValue and 14 ShareGroupCurrentMemberAssignmentValue
    partitions = _carr(1) + T1 + _carr(2) + struct.pack(">ii", 0, 2) + NO_TAGS
    value13 = struct.pack(">h", 0) + partitions + NO_TAGS
    assert gr.decode_target_assignment_value(value13) == {T1: {0, 2}}
    value14 = struct.pack(">hiib", 0, 4, 3, 0) + partitions + NO_TAGS
    v14 = gr.decode_share_current_assignment_value(value14)
    assert v14 == gr.ShareCurrentAssignmentValue(4, 3, 0, {T1: {0, 2}})
    assert gr.encode_share_current_assignment_value(v14) == value14


def test_records_9_16_and_the_tagged_fields_of_3_and_6_print_as_kafka_4_3_lays_them_out():
    from minibroker.storage.checkpoints import uuid_to_str
    from minibroker.tools import coordinator_json as cj

    # 9 ShareGroupPartitionMetadataValue (Kafka 4.0): Topics[TopicId, TopicName, NumPartitions,
    # PartitionMetadata[Partition, Racks[]]]
    value9 = (struct.pack(">h", 0) + _carr(1) + T1 + _cstr("orders") + struct.pack(">i", 2)
              + _carr(1) + struct.pack(">i", 0) + _carr(1) + _cstr("r1") + NO_TAGS + NO_TAGS + NO_TAGS)
    assert cj.value_json(9, value9) == {"topics": [{
        "topicId": uuid_to_str(T1), "topicName": "orders", "numPartitions": 2,
        "partitionMetadata": [{"partition": 0, "racks": ["r1"]}]}]}
    # 16 ConsumerGroupRegularExpression: key GroupId, RegularExpression; value Topics, Version, Timestamp
    key16 = struct.pack(">h", 16) + s16("g") + s16("^orders.*")
    assert cj.key_json(16, key16) == {"groupId": "g", "regularExpression": "^orders.*"}
    value16 = struct.pack(">h", 0) + _carr(1) + _cstr("orders-1") + struct.pack(">qq", 12, 99) + NO_TAGS
    assert cj.value_json(16, value16) == {"topics": ["orders-1"], "version": 12, "timestamp": 99}
    # 3 ConsumerGroupMetadataValue: Epoch, then KIP-1101's tagged MetadataHash (tag 0); 6 as 12 above
    value3 = struct.pack(">hi", 0, 2) + _tagged(0, struct.pack(">q", 77))
    assert cj.value_json(3, value3) == {"epoch": 2, "metadataHash": 77}
    assert decode_epoch_value(value3) == 2
    value6 = struct.pack(">hi", 0, 2) + _tagged(0, struct.pack(">q", 5))
    assert cj.value_json(6, value6) == {"assignmentEpoch": 2, "assignmentTimestamp": 5}
