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

Consumer (KIP-848) groups add key versions 3-8, each naming a record type whose value is flexible v0
(compact lengths, tagged fields; our own declarations of Kafka's group-coordinator JSON schemas):

- 3 ConsumerGroupMetadata ``group``: value ``epoch`` int32 (the group epoch);
- 4 ConsumerGroupPartitionMetadata ``group``: value ``topics[topicId uuid, topicName, numPartitions int32,
  partitionMetadata[partition int32, racks[string]]]``;
- 5 ConsumerGroupMemberMetadata ``group, member``: value ``instanceId?, rackId?, clientId, clientHost,
  subscribedTopicNames[string], subscribedTopicRegex?, rebalanceTimeoutMs int32, serverAssignor?``
  (tag 0, the classic member metadata of a migrated member, is skipped);
- 6 ConsumerGroupTargetAssignmentMetadata ``group``: value ``assignmentEpoch`` int32;
- 7 ConsumerGroupTargetAssignmentMember ``group, member``: value
  ``topicPartitions[topicId, partitions[int32]]``;
- 8 ConsumerGroupCurrentMemberAssignment ``group, member``: value ``memberEpoch int32,
  previousMemberEpoch int32, state int8, assignedPartitions[topicId, partitions[int32]],
  partitionsPendingRevocation[...]``.

Share (KIP-932) groups add key versions 10-15, values flexible v0 likewise:

- 10 ShareGroupMemberMetadata ``group, member``: value ``rackId?, clientId, clientHost,
  subscribedTopicNames[string]``;
- 11 ShareGroupMetadata ``group``: value ``epoch`` int32, ``metadataHash`` int64 (the hash of the
  subscribed topics' ids and partition counts, Kafka 4.1+);
- 12 ShareGroupTargetAssignmentMetadata ``group``: value ``assignmentEpoch`` int32;
- 13 ShareGroupTargetAssignmentMember ``group, member``: value ``topicPartitions[topicId, partitions]``;
- 14 ShareGroupCurrentMemberAssignment ``group, member``: value ``memberEpoch, previousMemberEpoch
  int32, state int8, assignedPartitions[topicId, partitions[int32]]``;
- 15 ShareGroupStatePartitionMetadata ``group``: value ``initializingTopics``, ``initializedTopics``
  (each ``[topicId, topicName, partitions[int32]]``), ``deletingTopics[topicId, topicName]``.

These are Kafka 4.3's layouts. Its tagged fields (a consumer group's ``metadataHash``, tag 0 of record
3; a target assignment's ``assignmentTimestamp``, tag 0 of records 6 and 12) are skipped on reading and
not written (Kafka's reader takes an absent one as its default, 0). Record 9 (ShareGroupPartitionMetadata,
Kafka 4.0's subscription metadata, replaced by the metadata hash) and 16 (a regular expression's resolved
topics) are not kept; ``minibroker dump-log`` prints them.

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

from minibroker.coordinator.java_hash_order import string_hash as java_string_hash
from minibroker.coordinator.record_codec import (
    I16,
    I32,
    I64,
    RecordError,
    RecordReader,
    write_array_len,
    write_bytes,
    write_string,
    write_tagged_fields,
)

OFFSET_COMMIT_KEY_VERSION = 1
GROUP_METADATA_KEY_VERSION = 2
OFFSET_COMMIT_VALUE_VERSION = 3
OFFSET_COMMIT_VALUE_VERSION_WITH_EXPIRY = 1
GROUP_METADATA_VALUE_VERSION = 3


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


def decode_key(buf) -> OffsetCommitKey | GroupMetadataKey | ConsumerGroupKey | ShareGroupKey | None:
    """The key of a ``__consumer_offsets`` record; None for record types this coordinator ignores."""
    r = RecordReader(buf)
    version = r.i16()
    if version in (0, 1):
        group, topic, partition = r.nullable_string("group"), r.nullable_string("topic"), r.i32()
        return OffsetCommitKey(group or "", topic or "", partition)
    if version == 2:
        return GroupMetadataKey(r.nullable_string("group") or "")
    if version in (3, 4, 6):
        return ConsumerGroupKey(version, r.nullable_string("group") or "")
    if version in (5, 7, 8):
        group = r.nullable_string("group") or ""
        return ConsumerGroupKey(version, group, r.nullable_string("member") or "")
    if version in (SHARE_GROUP_METADATA, SHARE_GROUP_TARGET_ASSIGNMENT_METADATA,
                   SHARE_GROUP_STATE_PARTITION_METADATA):
        return ShareGroupKey(version, r.nullable_string("group") or "")
    if version in _SHARE_PER_MEMBER:
        group = r.nullable_string("group") or ""
        return ShareGroupKey(version, group, r.nullable_string("member") or "")
    return None  # 9 (Kafka 4.0 only), 16+: records this coordinator does not keep


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


# -- consumer (KIP-848) group records -------------------------------------------------------------

CONSUMER_GROUP_METADATA = 3
CONSUMER_GROUP_PARTITION_METADATA = 4
CONSUMER_GROUP_MEMBER_METADATA = 5
CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA = 6
CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER = 7
CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT = 8
_PER_MEMBER = (CONSUMER_GROUP_MEMBER_METADATA, CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER,
               CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT)


class ConsumerGroupKey(NamedTuple):
    """A key of a consumer group record: ``record_type`` is its version (3-8); ``member`` is "" for the
    group-wide records (3, 4, 6)."""

    record_type: int
    group: str
    member: str = ""


class ClassicMemberMetadata(NamedTuple):
    """A consumer group member that speaks the classic protocol (online migration): its JoinGroup's
    session timeout and protocols [(name, metadata)], as ConsumerGroupMemberMetadataValue's tagged
    ClassicMemberMetadata field (tag 0) keeps them."""

    session_timeout_ms: int
    protocols: tuple[tuple[str, bytes], ...]


class MemberMetadataValue(NamedTuple):
    instance_id: str | None
    rack_id: str | None
    client_id: str
    client_host: str
    subscribed_topic_names: Sequence[str]
    subscribed_topic_regex: str | None
    rebalance_timeout_ms: int
    server_assignor: str | None
    classic: ClassicMemberMetadata | None = None


class CurrentAssignmentValue(NamedTuple):
    member_epoch: int
    previous_member_epoch: int
    state: int
    assigned: dict[bytes, set[int]]
    pending_revocation: dict[bytes, set[int]]


def encode_group_record_key(record_type: int, group: str, member: str = "") -> bytes:
    """The key of a consumer (3-8) or share (10-14) group record: its type as the version, the group, and
    the member for the per-member types."""
    out = bytearray(I16.pack(record_type))
    write_string(out, group)
    if record_type in _PER_MEMBER or record_type in _SHARE_PER_MEMBER:
        write_string(out, member)
    return bytes(out)


encode_consumer_group_key = encode_group_record_key


def _value_header() -> bytearray:
    return bytearray(I16.pack(0))


def encode_epoch_value(epoch: int) -> bytes:
    """ConsumerGroupMetadataValue (group epoch) and ConsumerGroupTargetAssignmentMetadataValue."""
    out = _value_header()
    out += I32.pack(epoch)
    write_tagged_fields(out, ())
    return bytes(out)


def _write_topic_partitions(out: bytearray, assignment: dict[bytes, set[int]]) -> None:
    items = sorted((t, ps) for t, ps in assignment.items() if ps)
    write_array_len(out, len(items), True)
    for topic_id, partitions in items:
        out += topic_id
        write_array_len(out, len(partitions), True)
        for p in sorted(partitions):
            out += I32.pack(p)
        write_tagged_fields(out, ())


def _read_topic_partitions(r: RecordReader) -> dict[bytes, set[int]]:
    out: dict[bytes, set[int]] = {}
    for _ in range(r.nullable_array_len() or 0):
        topic_id = r.raw(16)
        out.setdefault(topic_id, set()).update(r.i32() for _ in range(r.nullable_array_len() or 0))
        r.skip_tagged_fields()
    return out


def encode_partition_metadata_value(topics: dict[str, tuple[bytes, int]]) -> bytes:
    """ConsumerGroupPartitionMetadataValue from {topic name: (topic id, partitions)}; no racks."""
    out = _value_header()
    write_array_len(out, len(topics), True)
    for name in sorted(topics):
        topic_id, count = topics[name]
        out += topic_id
        write_string(out, name, True)
        out += I32.pack(count)
        write_array_len(out, 0, True)
        write_tagged_fields(out, ())
    write_tagged_fields(out, ())
    return bytes(out)


def _write_member(out: bytearray, rack_id: str | None, client_id: str, client_host: str,
                  subscribed_topic_names: Sequence[str]) -> None:
    """The fields a consumer and a share group member's metadata values share, in their order."""
    write_string(out, rack_id, True)
    write_string(out, client_id, True)
    write_string(out, client_host, True)
    write_array_len(out, len(subscribed_topic_names), True)
    for name in subscribed_topic_names:
        write_string(out, name, True)


def _read_member(r: RecordReader) -> tuple[str | None, str, str, list[str]]:
    """What ``_write_member`` wrote: (rack id, client id, client host, subscribed topic names)."""
    rack_id = r.nullable_string("rackId")
    client_id = r.nullable_string("clientId") or ""
    client_host = r.nullable_string("clientHost") or ""
    return rack_id, client_id, client_host, [r.string("subscribedTopicName")
                                             for _ in range(r.nullable_array_len() or 0)]


def _write_current_assignment(member_epoch: int, previous_member_epoch: int, state: int,
                              *assignments: dict[bytes, set[int]]) -> bytes:
    """A current member assignment value: epochs, state, then the assignments (consumer groups add the
    partitions pending revocation after the assigned ones)."""
    out = _value_header()
    out += I32.pack(member_epoch)
    out += I32.pack(previous_member_epoch)
    out += bytes([state & 0xFF])
    for assignment in assignments:
        _write_topic_partitions(out, assignment)
    write_tagged_fields(out, ())
    return bytes(out)


def encode_member_metadata_value(v: MemberMetadataValue) -> bytes:
    out = _value_header()
    write_string(out, v.instance_id, True)
    _write_member(out, v.rack_id, v.client_id, v.client_host, v.subscribed_topic_names)
    write_string(out, v.subscribed_topic_regex, True)
    out += I32.pack(v.rebalance_timeout_ms)
    write_string(out, v.server_assignor, True)
    tagged = []
    if v.classic is not None:
        field = bytearray(I32.pack(v.classic.session_timeout_ms))
        write_array_len(field, len(v.classic.protocols), True)
        for name, metadata in v.classic.protocols:
            write_string(field, name, True)
            write_bytes(field, bytes(metadata), True)
            write_tagged_fields(field, ())
        write_tagged_fields(field, ())
        tagged.append((0, bytes(field)))
    write_tagged_fields(out, tagged)
    return bytes(out)


def encode_target_assignment_value(assignment: dict[bytes, set[int]]) -> bytes:
    out = _value_header()
    _write_topic_partitions(out, assignment)
    write_tagged_fields(out, ())
    return bytes(out)


def encode_current_assignment_value(v: CurrentAssignmentValue) -> bytes:
    return _write_current_assignment(v.member_epoch, v.previous_member_epoch, v.state, v.assigned,
                                     v.pending_revocation)


def _flexible_value(buf) -> RecordReader:
    r = RecordReader(buf, flexible=True)
    version = r.i16()
    if version != 0:
        raise RecordError(f"unknown consumer group value version {version}")
    return r


def decode_epoch_value(buf) -> int:
    return _flexible_value(buf).i32()


def decode_partition_metadata_value(buf) -> dict[str, tuple[bytes, int]]:
    r = _flexible_value(buf)
    topics = {}
    for _ in range(r.nullable_array_len() or 0):
        topic_id = r.raw(16)
        name = r.string("topicName")
        count = r.i32()
        for _ in range(r.nullable_array_len() or 0):
            r.i32()
            for _ in range(r.nullable_array_len() or 0):
                r.nullable_string("rack")
            r.skip_tagged_fields()
        r.skip_tagged_fields()
        topics[name] = (topic_id, count)
    return topics


def decode_member_metadata_value(buf) -> MemberMetadataValue:
    r = _flexible_value(buf)
    instance_id = r.nullable_string("instanceId")
    rack_id, client_id, client_host, names = _read_member(r)
    regex = r.nullable_string("subscribedTopicRegex")
    rebalance_timeout = r.i32()
    assignor = r.nullable_string("serverAssignor")
    classic = None
    for tag, data in r.tagged_fields():
        if tag == 0:
            f = RecordReader(data, 0, True)
            session_timeout = f.i32()
            protocols = []
            for _ in range(f.array_len("supportedProtocols")):
                name = f.string("name")
                protocols.append((name, f.nullable_bytes() or b""))
                f.skip_tagged_fields()
            classic = ClassicMemberMetadata(session_timeout, tuple(protocols))
    return MemberMetadataValue(instance_id, rack_id, client_id, client_host, names, regex, rebalance_timeout,
                               assignor, classic)


def decode_target_assignment_value(buf) -> dict[bytes, set[int]]:
    return _read_topic_partitions(_flexible_value(buf))


def decode_current_assignment_value(buf) -> CurrentAssignmentValue:
    r = _flexible_value(buf)
    epoch, previous, state = r.i32(), r.i32(), r.i8()
    assigned = _read_topic_partitions(r)
    return CurrentAssignmentValue(epoch, previous, state, assigned, _read_topic_partitions(r))


# -- share (KIP-932) group records --------------------------------------------------------------

SHARE_GROUP_MEMBER_METADATA = 10
SHARE_GROUP_METADATA = 11
SHARE_GROUP_TARGET_ASSIGNMENT_METADATA = 12
SHARE_GROUP_TARGET_ASSIGNMENT_MEMBER = 13
SHARE_GROUP_CURRENT_MEMBER_ASSIGNMENT = 14
SHARE_GROUP_STATE_PARTITION_METADATA = 15
_SHARE_PER_MEMBER = (SHARE_GROUP_MEMBER_METADATA, SHARE_GROUP_TARGET_ASSIGNMENT_MEMBER,
                     SHARE_GROUP_CURRENT_MEMBER_ASSIGNMENT)


class ShareGroupKey(NamedTuple):
    """A key of a share group record: ``record_type`` is its version (10-15); ``member`` is "" for the
    group-wide records (11, 12, 15)."""

    record_type: int
    group: str
    member: str = ""


class ShareMemberMetadataValue(NamedTuple):
    rack_id: str | None
    client_id: str
    client_host: str
    subscribed_topic_names: Sequence[str]


class ShareGroupMetadataValue(NamedTuple):
    epoch: int
    metadata_hash: int = 0


class ShareCurrentAssignmentValue(NamedTuple):
    member_epoch: int
    previous_member_epoch: int
    state: int
    assigned: dict[bytes, set[int]]


encode_share_group_key = encode_group_record_key


def encode_share_member_metadata_value(v: ShareMemberMetadataValue) -> bytes:
    out = _value_header()
    _write_member(out, v.rack_id, v.client_id, v.client_host, v.subscribed_topic_names)
    write_tagged_fields(out, ())
    return bytes(out)


def encode_share_group_metadata_value(v: ShareGroupMetadataValue) -> bytes:
    out = _value_header()
    out += I32.pack(v.epoch)
    out += I64.pack(v.metadata_hash)
    write_tagged_fields(out, ())
    return bytes(out)


def encode_share_current_assignment_value(v: ShareCurrentAssignmentValue) -> bytes:
    return _write_current_assignment(v.member_epoch, v.previous_member_epoch, v.state, v.assigned)


def decode_share_member_metadata_value(buf) -> ShareMemberMetadataValue:
    return ShareMemberMetadataValue(*_read_member(_flexible_value(buf)))


def decode_share_group_metadata_value(buf) -> ShareGroupMetadataValue:
    r = _flexible_value(buf)
    epoch = r.i32()
    try:  # Kafka 4.0 wrote the epoch alone
        metadata_hash = r.i64()
    except RecordError:
        metadata_hash = 0
    return ShareGroupMetadataValue(epoch, metadata_hash)


def decode_share_current_assignment_value(buf) -> ShareCurrentAssignmentValue:
    r = _flexible_value(buf)
    epoch, previous, state = r.i32(), r.i32(), r.i8()
    return ShareCurrentAssignmentValue(epoch, previous, state, _read_topic_partitions(r))


# ShareGroupTargetAssignmentMember (13) and ShareGroupTargetAssignmentMetadata (12) share the value
# layouts of the consumer group records 7 and 6: encode_target_assignment_value, encode_epoch_value.


# ShareGroupStatePartitionMetadata (15, Kafka 4.1+): which partitions' share state the group has asked the
# share coordinator to initialize (InitializingTopics), has initialized (InitializedTopics) and is
# deleting (DeletingTopics). Topics are {topic id: (name, partitions)}; deleting ones {topic id: name}.
TopicPartitionsInfo = dict[bytes, tuple[str, set[int]]]


class ShareStatePartitionMetadataValue(NamedTuple):
    initializing: TopicPartitionsInfo
    initialized: TopicPartitionsInfo
    deleting: dict[bytes, str]


def _write_topic_partitions_info(out: bytearray, topics: TopicPartitionsInfo) -> None:
    items = sorted((t, v) for t, v in topics.items() if v[1])
    write_array_len(out, len(items), True)
    for topic_id, (name, partitions) in items:
        out += topic_id
        write_string(out, name, True)
        write_array_len(out, len(partitions), True)
        for p in sorted(partitions):
            out += I32.pack(p)
        write_tagged_fields(out, ())


def _read_topic_partitions_info(r: RecordReader) -> TopicPartitionsInfo:
    out: TopicPartitionsInfo = {}
    for _ in range(r.nullable_array_len() or 0):
        topic_id = r.raw(16)
        name = r.string("topicName")
        out[topic_id] = (name, {r.i32() for _ in range(r.nullable_array_len() or 0)})
        r.skip_tagged_fields()
    return out


def encode_share_state_partition_metadata_value(v: ShareStatePartitionMetadataValue) -> bytes:
    out = _value_header()
    _write_topic_partitions_info(out, v.initializing)
    _write_topic_partitions_info(out, v.initialized)
    write_array_len(out, len(v.deleting), True)
    for topic_id, name in sorted(v.deleting.items()):
        out += topic_id
        write_string(out, name, True)
        write_tagged_fields(out, ())
    write_tagged_fields(out, ())
    return bytes(out)


def decode_share_state_partition_metadata_value(buf) -> ShareStatePartitionMetadataValue:
    r = _flexible_value(buf)
    initializing = _read_topic_partitions_info(r)
    initialized = _read_topic_partitions_info(r)
    deleting: dict[bytes, str] = {}
    for _ in range(r.nullable_array_len() or 0):
        topic_id = r.raw(16)
        deleting[topic_id] = r.string("topicName")
        r.skip_tagged_fields()
    return ShareStatePartitionMetadataValue(initializing, initialized, deleting)
