"""The records of ``__share_group_state``, the share coordinator's topic (KIP-932), as Kafka 4.x writes them.

Every key and value starts with an int16 version. The key's version is the record type (Kafka 4.x's
coordinator-key "apiKey"); both keys are non-flexible: ``GroupId`` string (int16 length), ``TopicId``
uuid (16 bytes), ``Partition`` int32.

- 0 ShareSnapshot: the whole merged state of one share partition. Value (flexible v0): ``SnapshotEpoch``
  int32, ``StateEpoch`` int32, ``LeaderEpoch`` int32, ``StartOffset`` int64, ``CreateTimestamp`` int64,
  ``WriteTimestamp`` int64, ``StateBatches[FirstOffset int64, LastOffset int64, DeliveryState int8,
  DeliveryCount int16]``, tagged fields.
- 1 ShareUpdate: the batches one write changed. Value (flexible v0): ``SnapshotEpoch`` int32,
  ``LeaderEpoch`` int32, ``StartOffset`` int64 (-1: unchanged), ``StateBatches[...]``, tagged fields.

A null value is a tombstone (the state was deleted). Flexible values use compact lengths and end every
struct (the value and each batch) with a tagged-field section.

Layout and provenance: Kafka 4.x's layout (``share-coordinator/src/main/resources/common/message``),
checked against the schemas of a fork of apache/kafka trunk from October 2025 (4.1/4.2 era: coordinator
keys with ``apiKey`` 0 and 1, ``SnapshotEpoch`` int32, the two timestamps; the 3.9-era schemas had a
uint16 ``SnapshotEpoch`` and no timestamps). Kafka 4.2 adds ``DeliveryCompleteCount`` as a tagged field
of the snapshot value; that schema was not available here, so its tag is unverified: every tagged field is
read past and kept raw (``tagged``), never interpreted, and none is written.

Sans-I/O: bytes in, objects out.
"""

from __future__ import annotations

from typing import NamedTuple

from minibroker.coordinator import record_codec as rc

SHARE_SNAPSHOT_KEY_VERSION = 0
SHARE_UPDATE_KEY_VERSION = 1
SHARE_VALUE_VERSION = 0


class ShareStateKey(NamedTuple):
    """The key of either record; ``snapshot`` is True for a ShareSnapshot key, False for a ShareUpdate."""

    snapshot: bool
    group_id: str
    topic_id: bytes
    partition: int


class StateBatchRecord(NamedTuple):
    first_offset: int
    last_offset: int
    delivery_state: int
    delivery_count: int


class ShareSnapshotValue(NamedTuple):
    snapshot_epoch: int
    state_epoch: int
    leader_epoch: int
    start_offset: int
    create_timestamp: int
    write_timestamp: int
    batches: tuple[StateBatchRecord, ...]
    tagged: tuple[tuple[int, bytes], ...] = ()


class ShareUpdateValue(NamedTuple):
    snapshot_epoch: int
    leader_epoch: int
    start_offset: int
    batches: tuple[StateBatchRecord, ...]
    tagged: tuple[tuple[int, bytes], ...] = ()


# -- writing ------------------------------------------------------------------------------------


def encode_key(key: ShareStateKey) -> bytes:
    if len(key.topic_id) != 16:
        raise ValueError("a topic id is 16 bytes")
    out = bytearray(rc.I16.pack(SHARE_SNAPSHOT_KEY_VERSION if key.snapshot else SHARE_UPDATE_KEY_VERSION))
    rc.write_string(out, key.group_id)
    out += key.topic_id
    out += rc.I32.pack(key.partition)
    return bytes(out)


def _write_batches(out: bytearray, batches) -> None:
    rc.write_array_len(out, len(batches), flexible=True)
    for b in batches:
        out += rc.I64.pack(b.first_offset)
        out += rc.I64.pack(b.last_offset)
        out += rc.I8.pack(b.delivery_state)
        out += rc.I16.pack(b.delivery_count)
        rc.write_tagged_fields(out, ())


def _encode_value(fields, batches, tagged) -> bytes:
    """Both values: the version, the fixed-width ``fields`` ((struct, value) in order), the state
    batches, the tagged fields."""
    out = bytearray(rc.I16.pack(SHARE_VALUE_VERSION))
    for st, value in fields:
        out += st.pack(value)
    _write_batches(out, batches)
    rc.write_tagged_fields(out, tagged)
    return bytes(out)


def encode_snapshot_value(v: ShareSnapshotValue) -> bytes:
    i32, i64 = rc.I32, rc.I64
    return _encode_value(((i32, v.snapshot_epoch), (i32, v.state_epoch), (i32, v.leader_epoch),
                          (i64, v.start_offset), (i64, v.create_timestamp), (i64, v.write_timestamp)),
                         v.batches, v.tagged)


def encode_update_value(v: ShareUpdateValue) -> bytes:
    return _encode_value(((rc.I32, v.snapshot_epoch), (rc.I32, v.leader_epoch), (rc.I64, v.start_offset)),
                         v.batches, v.tagged)


# -- reading ------------------------------------------------------------------------------------


def decode_key(data: bytes) -> ShareStateKey:
    """A key of either record; rc.RecordError for any other key version or a cut-short key."""
    r = rc.RecordReader(data)
    version = r.i16()
    if version not in (SHARE_SNAPSHOT_KEY_VERSION, SHARE_UPDATE_KEY_VERSION):
        raise rc.RecordError(f"unknown __share_group_state key version {version}")
    group_id = r.string("GroupId")
    topic_id = r.raw(16)
    partition = r.i32()
    return ShareStateKey(version == SHARE_SNAPSHOT_KEY_VERSION, group_id, topic_id, partition)


def _read_batches(r: rc.RecordReader) -> tuple[StateBatchRecord, ...]:
    n = r.array_len("StateBatches")
    if n > len(r.buf) - r.pos:  # each batch takes 20 bytes or more: a count this large is damage
        raise rc.RecordError("StateBatches count larger than the record")
    batches = []
    for _ in range(n):
        batches.append(StateBatchRecord(r.i64(), r.i64(), r.i8(), r.i16()))
        r.skip_tagged_fields()
    return tuple(batches)


def _reader(data: bytes) -> rc.RecordReader:
    r = rc.RecordReader(data, flexible=True)
    version = r.i16()
    if version != SHARE_VALUE_VERSION:
        raise rc.RecordError(f"unknown __share_group_state value version {version}")
    return r


def decode_snapshot_value(data: bytes) -> ShareSnapshotValue:
    r = _reader(data)
    head = (r.i32(), r.i32(), r.i32(), r.i64(), r.i64(), r.i64())
    batches = _read_batches(r)
    return ShareSnapshotValue(*head, batches, tuple(r.tagged_fields()))


def decode_update_value(data: bytes) -> ShareUpdateValue:
    r = _reader(data)
    head = (r.i32(), r.i32(), r.i64())
    batches = _read_batches(r)
    return ShareUpdateValue(*head, batches, tuple(r.tagged_fields()))
