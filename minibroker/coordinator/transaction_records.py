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

import struct
from collections.abc import Sequence
from enum import IntEnum
from typing import NamedTuple

KEY_VERSION = 0
VALUE_VERSION = 0  # non-flexible: what Kafka writes before transaction.version 1
VALUE_VERSION_FLEXIBLE = 1
VALUE_VERSIONS = (0, 1)

_I8 = struct.Struct(">b")
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")

# v1 tagged fields: tag -> (field name, struct, default)
_TAGS = {
    0: ("previous_producer_id", _I64, -1),
    1: ("next_producer_id", _I64, -1),
    2: ("client_transaction_version", _I16, 0),
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


class RecordError(ValueError):
    """A key or value of ``__transaction_state`` that no known version describes, or cut short."""


def record_version(buf) -> int:
    """The int16 version a key or value starts with."""
    if len(buf) < 2:
        raise RecordError("record shorter than its version")
    return _I16.unpack_from(buf, 0)[0]


# -- writing ------------------------------------------------------------------------------------


def _uvarint(out: bytearray, n: int) -> None:
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)


def _string(out: bytearray, s: str, flexible: bool) -> None:
    b = s.encode("utf-8")
    if flexible:
        _uvarint(out, len(b) + 1)
    else:
        if len(b) > 0x7FFF:
            raise ValueError("string longer than 32767 bytes")
        out += _I16.pack(len(b))
    out += b


def _array_len(out: bytearray, n: int | None, flexible: bool) -> None:
    if flexible:
        _uvarint(out, 0 if n is None else n + 1)
    else:
        out += _I32.pack(-1 if n is None else n)


def encode_key(transactional_id: str) -> bytes:
    out = bytearray(_I16.pack(KEY_VERSION))
    _string(out, transactional_id, False)
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
    out = bytearray(_I16.pack(version))
    out += _I64.pack(value.producer_id)
    out += _I16.pack(value.producer_epoch)
    out += _I32.pack(value.transaction_timeout_ms)
    out += _I8.pack(value.transaction_status)
    _array_len(out, None if partitions is None else len(partitions), flexible)
    for p in partitions or ():
        _string(out, p.topic, flexible)
        _array_len(out, len(p.partition_ids), flexible)
        for pid in p.partition_ids:
            out += _I32.pack(pid)
        if flexible:
            out.append(0)  # no tagged fields in a partition entry
    out += _I64.pack(value.transaction_last_update_timestamp_ms)
    out += _I64.pack(value.transaction_start_timestamp_ms)
    if flexible:
        tags: list[tuple[int, bytes]] = []
        for tag, (name, st, default) in _TAGS.items():
            v = getattr(value, name)
            if v != default:
                tags.append((tag, st.pack(v)))
        tags.extend((int(t), bytes(b)) for t, b in value.unknown_tags)
        tags.sort(key=lambda t: t[0])
        _uvarint(out, len(tags))
        for tag, data in tags:
            _uvarint(out, tag)
            _uvarint(out, len(data))
            out += data
    return bytes(out)


# -- reading ------------------------------------------------------------------------------------


class _Reader:
    __slots__ = ("buf", "pos", "flexible")

    def __init__(self, buf, pos: int, flexible: bool):
        self.buf = memoryview(buf)
        self.pos = pos
        self.flexible = flexible

    def fixed(self, st: struct.Struct) -> int:
        if self.pos + st.size > len(self.buf):
            raise RecordError("record truncated")
        (v,) = st.unpack_from(self.buf, self.pos)
        self.pos += st.size
        return v

    def uvarint(self) -> int:
        result = shift = 0
        while True:
            if self.pos >= len(self.buf):
                raise RecordError("record truncated")
            if shift > 28:
                raise RecordError("varint longer than 5 bytes")
            b = self.buf[self.pos]
            self.pos += 1
            result |= (b & 0x7F) << shift
            if not b & 0x80:
                return result
            shift += 7

    def raw(self, n: int) -> bytes:
        if n < 0 or self.pos + n > len(self.buf):
            raise RecordError("record truncated")
        b = bytes(self.buf[self.pos : self.pos + n])
        self.pos += n
        return b

    def string(self, field: str) -> str:
        n = self.uvarint() - 1 if self.flexible else self.fixed(_I16)
        if n < 0:
            raise RecordError(f"non-nullable field {field} was serialized as null")
        try:
            return self.raw(n).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise RecordError(f"field {field} is not UTF-8: {exc}") from None

    def array_len(self) -> int | None:
        n = self.uvarint() - 1 if self.flexible else self.fixed(_I32)
        return None if n < 0 else n

    def tags(self) -> list[tuple[int, bytes]]:
        return [(self.uvarint(), self.raw(self.uvarint())) for _ in range(self.uvarint())]


def decode_key(buf) -> TransactionLogKey | None:
    """The key of a ``__transaction_state`` record; None for a key version Kafka does not define
    (``record_version`` says which)."""
    if record_version(buf) != KEY_VERSION:
        return None
    r = _Reader(buf, 2, False)
    return TransactionLogKey(r.string("transactionalId"))


def decode_value(buf) -> TransactionLogValue:
    version = record_version(buf)
    if version not in VALUE_VERSIONS:
        raise RecordError(f"Unknown version {version} from the transaction log message value")
    r = _Reader(buf, 2, version >= 1)
    producer_id = r.fixed(_I64)
    producer_epoch = r.fixed(_I16)
    timeout_ms = r.fixed(_I32)
    status = r.fixed(_I8)
    n = r.array_len()
    partitions = None
    if n is not None:
        partitions = []
        for _ in range(n):
            topic = r.string("topic")
            count = r.array_len()
            if count is None:
                raise RecordError("non-nullable field partitionIds was serialized as null")
            ids = tuple(r.fixed(_I32) for _ in range(count))
            if r.flexible:
                r.tags()
            partitions.append(TxnPartitions(topic, ids))
        partitions = tuple(partitions)
    last_update = r.fixed(_I64)
    start = r.fixed(_I64)
    known = {name: default for name, _, default in _TAGS.values()}
    unknown = []
    if r.flexible:
        for tag, data in r.tags():
            if tag in _TAGS:
                name, st, _ = _TAGS[tag]
                if len(data) != st.size:
                    raise RecordError(f"tagged field {tag} has {len(data)} bytes, not {st.size}")
                known[name] = st.unpack(data)[0]
            else:
                unknown.append((tag, data))
    return TransactionLogValue(producer_id, producer_epoch, timeout_ms, status, partitions, last_update,
                               start, unknown_tags=tuple(unknown), **known)
