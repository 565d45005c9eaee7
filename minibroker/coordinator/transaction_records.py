"""The records of ``__transaction_state``, byte for byte as Kafka writes them.

One record per transactional id; its key and value start with an int16 version
(Kafka's ``TransactionLogKey.json`` / ``TransactionLogValue.json``).

Key v0 (the only version): ``transactionalId`` string.

Value (a null value is a tombstone: the transactional id expired):

- v0, non-flexible: ``producerId`` int64, ``producerEpoch`` int16, ``transactionTimeoutMs`` int32,
  ``transactionStatus`` int8 (a ``TransactionState``), ``transactionPartitions`` nullable int32-counted
  array of ``{topic string, partitionIds int32-counted int32 array}``, ``transactionLastUpdateTimestampMs``
  int64, ``transactionStartTimestampMs`` int64. Strings are int16 length + UTF-8.
- v1, flexible (KIP-915): the same fields with compact lengths (unsigned varint, length + 1, 0 for
  null), an empty tagged-field section after each partition entry and tagged fields at the end:
  tag 0 ``previousProducerId`` int64 (default -1), tag 1 ``nextProducerId`` int64 (default -1), tag 2
  ``clientTransactionVersion`` int16 (default 0), written only when not the default, in tag order
  (KIP-890's fields; Kafka 3.9's schema has none yet and skips them as unknown tags). Tags this
  module does not know are kept, as raw bytes, and written back.

Kafka writes v0 until ``transaction.version`` 1 is enabled, then v1. In state ``Empty`` the partitions
are written as null (Kafka refuses to write an Empty transaction that still has partitions) and are
ignored on read.

Sans-I/O: bytes in, objects out. The transaction coordinator and ``minibroker dump-log
--transaction-log-decoder`` share it.
"""

from __future__ import annotations

from collections.abc import Sequence
from enum import IntEnum
from typing import NamedTuple

from minibroker.coordinator import record_codec as rc

RecordError = rc.RecordError  # what the decoders below raise

KEY_VERSION = 0
VALUE_VERSION = 0  # non-flexible: what Kafka writes before transaction.version 1
VALUE_VERSION_FLEXIBLE = 1
VALUE_VERSIONS = (0, 1)

# v1 tagged fields: tag -> (field name, struct, default)
_TAGS = {
    0: ("previous_producer_id", rc.I64, -1),
    1: ("next_producer_id", rc.I64, -1),
    2: ("client_transaction_version", rc.I16, 0),
}


class TransactionState(IntEnum):
    """``transactionStatus``: Kafka's ids; ``str()`` gives the name Kafka prints."""

    EMPTY = 0
    ONGOING = 1
    PREPARE_COMMIT = 2
    PREPARE_ABORT = 3
    COMPLETE_COMMIT = 4
    COMPLETE_ABORT = 5
    DEAD = 6
    PREPARE_EPOCH_FENCE = 7

    def __str__(self) -> str:
        return "".join(word.capitalize() for word in self.name.split("_"))


class TransactionLogKey(NamedTuple):
    transactional_id: str


class TxnPartitions(NamedTuple):
    """One topic of a transaction and its partitions (Kafka's ``PartitionsSchema``)."""

    topic: str
    partition_ids: Sequence[int]


class TransactionLogValue(NamedTuple):
    producer_id: int
    producer_epoch: int
    transaction_timeout_ms: int
    transaction_status: int  # a TransactionState
    transaction_partitions: Sequence[TxnPartitions] | None  # None: null (always so in state Empty)
    transaction_last_update_timestamp_ms: int
    transaction_start_timestamp_ms: int
    # v1 tagged fields (ignored when writing v0)
    previous_producer_id: int = -1
    next_producer_id: int = -1
    client_transaction_version: int = 0
    unknown_tags: Sequence[tuple[int, bytes]] = ()  # v1 tags not listed above, kept as read


def record_version(buf) -> int:
    """The int16 version a key or value starts with."""
    if len(buf) < 2:
        raise RecordError("record shorter than its version")
    return rc.I16.unpack_from(buf, 0)[0]


# -- writing ------------------------------------------------------------------------------------


def encode_key(transactional_id: str) -> bytes:
    out = bytearray(rc.I16.pack(KEY_VERSION))
    rc.write_string(out, transactional_id)
    return bytes(out)


def encode_value(value: TransactionLogValue, version: int = VALUE_VERSION) -> bytes:
    """Value ``version`` 0 or 1 (flexible); partitions are written null in state Empty."""
    if version not in VALUE_VERSIONS:
        raise ValueError(f"cannot write transaction log value v{version}")
    partitions = value.transaction_partitions
    if value.transaction_status == TransactionState.EMPTY:
        if partitions:
            raise ValueError("a transaction in state Empty cannot have partitions")
        partitions = None
    flexible = version >= 1
    out = bytearray(rc.I16.pack(version))
    out += rc.I64.pack(value.producer_id)
    out += rc.I16.pack(value.producer_epoch)
    out += rc.I32.pack(value.transaction_timeout_ms)
    out += rc.I8.pack(value.transaction_status)
    rc.write_array_len(out, None if partitions is None else len(partitions), flexible)
    for p in partitions or ():
        rc.write_string(out, p.topic, flexible)
        rc.write_array_len(out, len(p.partition_ids), flexible)
        for pid in p.partition_ids:
            out += rc.I32.pack(pid)
        if flexible:
            rc.write_tagged_fields(out, ())  # a partition entry has none
    out += rc.I64.pack(value.transaction_last_update_timestamp_ms)
    out += rc.I64.pack(value.transaction_start_timestamp_ms)
    if flexible:
        tags: list[tuple[int, bytes]] = []
        for tag, (name, st, default) in _TAGS.items():
            v = getattr(value, name)
            if v != default:
                tags.append((tag, st.pack(v)))
        tags.extend((int(t), bytes(b)) for t, b in value.unknown_tags)
        rc.write_tagged_fields(out, tags)
    return bytes(out)


# -- reading ------------------------------------------------------------------------------------


def decode_key(buf) -> TransactionLogKey | None:
    """The key of a ``__transaction_state`` record; None for a key version Kafka does not define
    (``record_version`` says which)."""
    if record_version(buf) != KEY_VERSION:
        return None
    r = rc.RecordReader(buf, 2)
    return TransactionLogKey(r.string("transactionalId"))


def decode_value(buf) -> TransactionLogValue:
    version = record_version(buf)
    if version not in VALUE_VERSIONS:
        raise RecordError(f"Unknown version {version} from the transaction log message value")
    r = rc.RecordReader(buf, 2, version >= 1)
    producer_id = r.i64()
    producer_epoch = r.i16()
    timeout_ms = r.i32()
    status = r.i8()
    n = r.nullable_array_len()
    partitions = None
    if n is not None:
        partitions = []
        for _ in range(n):
            topic = r.string("topic")
            ids = tuple(r.i32() for _ in range(r.array_len("partitionIds")))
            r.skip_tagged_fields()
            partitions.append(TxnPartitions(topic, ids))
        partitions = tuple(partitions)
    last_update = r.i64()
    start = r.i64()
    known = {name: default for name, _, default in _TAGS.values()}
    unknown = []
    for tag, data in r.tagged_fields():
        if tag in _TAGS:
            name, st, _ = _TAGS[tag]
            if len(data) != st.size:
                raise RecordError(f"tagged field {tag} has {len(data)} bytes, not {st.size}")
            known[name] = st.unpack(data)[0]
        else:
            unknown.append((tag, data))
    return TransactionLogValue(producer_id, producer_epoch, timeout_ms, status, partitions, last_update,
                               start, unknown_tags=tuple(unknown), **known)
