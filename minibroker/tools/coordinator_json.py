"""The KIP-848 consumer group and KIP-932 share group records of ``__consumer_offsets`` (record types
3-16) as JSON, the way Kafka's generated ``*JsonConverter`` classes print them for ``kafka-dump-log
--offsets-decoder``: for ``minibroker dump-log``.

A key is an int16 record type, then its fields (non-flexible strings); a value an int16 version (0),
then flexible fields (compact lengths, tagged fields). Field names are the schemas' with their first
letter lower-cased, in schema order; a uuid prints as Kafka's ``Uuid.toString`` (base64url, no
padding), bytes as base64, a tagged field only when present. The declarations below are facts of
Kafka's group-coordinator schemas (names, types, order), as ``minibroker/coordinator/group_records.py``
writes them; an unknown tagged field is skipped, as are bytes after a value's fields (a key's are an
error).

Sans-I/O: bytes in, dicts out.
"""

from __future__ import annotations

import base64

from minibroker.coordinator.record_codec import RecordError, RecordReader
from minibroker.storage.checkpoints import uuid_to_str

# A field: (JSON name, type). Types: "int8", "int32", "int64", "string", "string?" (nullable), "uuid",
# "bytes", ("[]", element type) and a struct: a tuple of fields. A value schema is (fields, {tag: field}).
_TOPIC_PARTITIONS = (("topicId", "uuid"), ("partitions", ("[]", "int32")))
_TOPIC_PARTITIONS_INFO = (("topicId", "uuid"), ("topicName", "string"), ("partitions", ("[]", "int32")))
_TOPIC_METADATA = (
    ("topicId", "uuid"), ("topicName", "string"), ("numPartitions", "int32"),
    ("partitionMetadata", ("[]", (("partition", "int32"), ("racks", ("[]", "string"))))),
)
_CLASSIC_MEMBER = (
    ("sessionTimeoutMs", "int32"),
    ("supportedProtocols", ("[]", (("name", "string"), ("metadata", "bytes")))),
)

RECORD_NAMES = {
    3: "ConsumerGroupMetadata", 4: "ConsumerGroupPartitionMetadata", 5: "ConsumerGroupMemberMetadata",
    6: "ConsumerGroupTargetAssignmentMetadata", 7: "ConsumerGroupTargetAssignmentMember",
    8: "ConsumerGroupCurrentMemberAssignment", 9: "ShareGroupPartitionMetadata",
    10: "ShareGroupMemberMetadata", 11: "ShareGroupMetadata", 12: "ShareGroupTargetAssignmentMetadata",
    13: "ShareGroupTargetAssignmentMember", 14: "ShareGroupCurrentMemberAssignment",
    15: "ShareGroupStatePartitionMetadata", 16: "ConsumerGroupRegularExpression",
}
_PER_MEMBER = {5, 7, 8, 10, 13, 14}
_KEY_SECOND_FIELD = {**dict.fromkeys(_PER_MEMBER, "memberId"), 16: "regularExpression"}
# Kafka 4.3's tagged fields of the epoch records: KIP-1101's metadata hash of a consumer group, and
# KIP-1263's time a target assignment was computed (printed only when a writer set them)
_METADATA_HASH_TAG = {0: ("metadataHash", "int64")}
_ASSIGNMENT_TIMESTAMP_TAG = {0: ("assignmentTimestamp", "int64")}

_VALUES: dict[int, tuple[tuple, dict]] = {
    3: ((("epoch", "int32"),), _METADATA_HASH_TAG),
    4: ((("topics", ("[]", _TOPIC_METADATA)),), {}),
    5: ((("instanceId", "string?"), ("rackId", "string?"), ("clientId", "string"), ("clientHost", "string"),
         ("subscribedTopicNames", ("[]", "string")), ("subscribedTopicRegex", "string?"),
         ("rebalanceTimeoutMs", "int32"), ("serverAssignor", "string?")),
        {0: ("classicMemberMetadata", _CLASSIC_MEMBER)}),
    6: ((("assignmentEpoch", "int32"),), _ASSIGNMENT_TIMESTAMP_TAG),
    7: ((("topicPartitions", ("[]", _TOPIC_PARTITIONS)),), {}),
    8: ((("memberEpoch", "int32"), ("previousMemberEpoch", "int32"), ("state", "int8"),
         ("assignedPartitions", ("[]", _TOPIC_PARTITIONS)),
         ("partitionsPendingRevocation", ("[]", _TOPIC_PARTITIONS))), {}),
    9: ((("topics", ("[]", _TOPIC_METADATA)),), {}),
    10: ((("rackId", "string?"), ("clientId", "string"), ("clientHost", "string"),
          ("subscribedTopicNames", ("[]", "string"))), {}),
    # metadataHash: Kafka 4.1+ (KIP-1101); a 4.0 value ends after the epoch
    11: ((("epoch", "int32"), ("metadataHash", "int64")), {}),
    12: ((("assignmentEpoch", "int32"),), _ASSIGNMENT_TIMESTAMP_TAG),
    13: ((("topicPartitions", ("[]", _TOPIC_PARTITIONS)),), {}),
    14: ((("memberEpoch", "int32"), ("previousMemberEpoch", "int32"), ("state", "int8"),
          ("assignedPartitions", ("[]", _TOPIC_PARTITIONS))), {}),
    # Kafka 4.1+: initializingTopics first (4.0's early-access layout had initializedTopics first)
    15: ((("initializingTopics", ("[]", _TOPIC_PARTITIONS_INFO)),
          ("initializedTopics", ("[]", _TOPIC_PARTITIONS_INFO)),
          ("deletingTopics", ("[]", (("topicId", "uuid"), ("topicName", "string"))))), {}),
    # the topics a regular expression subscription resolved to, at which metadata version, when
    16: ((("topics", ("[]", "string")), ("version", "int64"), ("timestamp", "int64")), {}),
}
_OPTIONAL_TAIL = {11: "metadataHash"}  # a field older writers left out


def is_group_record(record_type: int) -> bool:
    return record_type in RECORD_NAMES


def key_json(record_type: int, key: bytes) -> dict:
    """The key's fields (``groupId``, then ``memberId`` for the per-member records, or the
    ``regularExpression`` of record 16)."""
    r = RecordReader(key, 2, flexible=False)
    data = {"groupId": r.string("groupId")}
    second = _KEY_SECOND_FIELD.get(record_type)
    if second is not None:
        data[second] = r.string(second)
    _expect_end(r, f"{RECORD_NAMES[record_type]}Key")
    return data


def value_json(record_type: int, value: bytes) -> dict:
    """The fields of a value; raises RecordError (or ValueError) when it does not parse. Bytes after
    the fields are ignored, as Kafka's generated readers do."""
    name = f"{RECORD_NAMES[record_type]}Value"
    r = RecordReader(value, 0, flexible=True)
    version = r.i16()
    if version != 0:
        raise RecordError(f"Can't read version {version} of {name}")
    fields, tagged = _VALUES[record_type]
    optional = _OPTIONAL_TAIL.get(record_type)
    out: dict = {}
    for field_name, kind in fields:
        if field_name == optional and len(r.buf) - r.pos <= 1:  # only the tagged-field count is left
            continue
        out[field_name] = _read(r, kind, field_name)
    _read_tagged(r, tagged, out)
    return out


def _read(r: RecordReader, kind, name: str):
    if kind == "int8":
        return r.i8()
    if kind == "int32":
        return r.i32()
    if kind == "int64":
        return r.i64()
    if kind == "string":
        return r.string(name)
    if kind == "string?":
        return r.nullable_string(name)
    if kind == "uuid":
        return uuid_to_str(r.raw(16))
    if kind == "bytes":
        data = r.nullable_bytes()
        return None if data is None else base64.b64encode(data).decode("ascii")
    if kind[0] == "[]":
        n = r.array_len(name)
        return [_read(r, kind[1], name) for _ in range(n)]
    out = {}  # a struct
    for field_name, field_kind in kind:
        out[field_name] = _read(r, field_kind, field_name)
    _read_tagged(r, {}, out)
    return out


def _read_tagged(r: RecordReader, known: dict, out: dict) -> None:
    for tag, data in r.tagged_fields():
        if tag in known:
            field_name, kind = known[tag]
            sub = RecordReader(data, 0, flexible=True)
            out[field_name] = _read(sub, kind, field_name)


def _expect_end(r: RecordReader, name: str) -> None:
    left = len(r.buf) - r.pos
    if left:
        raise RecordError(f"{left} bytes left after the fields of {name}")
