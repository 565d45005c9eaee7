"""Message sets v0 and v1 (magic 0 / 1): messages, wrapper messages, builder.

One entry (offsets from the start of the entry)::

    0  offset      int64    log overhead
    8  size        int32    bytes after this field
    12 crc         uint32   CRC-32 (zlib) of magic .. end of value
    16 magic       int8
    17 attributes  int8     codec bits 0-2; bit 3 timestamp type (v1 only)
    18 timestamp   int64    v1 only
    .. key         int32 length + bytes (-1 = null)
    .. value       int32 length + bytes (-1 = null)

A compressed entry is a *wrapper*: null key, value = the compressed inner message set (one level
deep). Inner offsets are absolute in v0 and relative (0..n-1) in v1, where the wrapper carries the
absolute offset of the last inner message.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Iterable
from dataclasses import dataclass

from minibroker.records.codecs import (
    DEFAULT_MAX_DECOMPRESSED_BYTES,
    Compression,
    SpillingPayload,
    decompress,
)
from minibroker.records.framing import COMPRESSION_MASK, TIMESTAMP_TYPE_MASK
from minibroker.records.framing import I32 as _I32
from minibroker.records.framing import I64 as _I64
from minibroker.records.framing import U32 as _U32
from minibroker.records.record import NO_TIMESTAMP, Record, TimestampType

LOG_OVERHEAD = 12
CRC_OFFSET = 12
MAGIC_OFFSET = 16
ATTRIBUTES_OFFSET = 17
TIMESTAMP_OFFSET = 18  # v1 only
RECORD_OVERHEAD_V0 = 14  # crc + magic + attributes + key length + value length
RECORD_OVERHEAD_V1 = 22  # ... + timestamp

_OVERHEAD = struct.Struct(">qi")
_HEAD = struct.Struct(">Ibb")


class LegacyFormatError(ValueError):
    """A v0/v1 message does not parse (Kafka: CORRUPT_MESSAGE)."""


class MessageTooLargeError(LegacyFormatError):
    """An inner message declares more bytes than one may take (``iter_message_stream``'s bound)."""


@dataclass(slots=True)
class Message:
    """One parsed v0/v1 entry (a plain message or a wrapper); key/value are memoryview slices."""

    position: int
    offset: int
    size: int  # whole entry, log overhead included
    crc: int
    magic: int
    attributes: int
    timestamp: int  # -1 for v0
    key: memoryview | None
    value: memoryview | None
    crc_valid: bool

    @property
    def compression(self) -> int:
        return self.attributes & COMPRESSION_MASK

    @property
    def timestamp_type(self) -> TimestampType:
        if self.magic == 0:
            return TimestampType.NO_TIMESTAMP_TYPE
        return (
            TimestampType.LOG_APPEND_TIME
            if self.attributes & TIMESTAMP_TYPE_MASK
            else TimestampType.CREATE_TIME
        )


def parse_message(buf, position: int, end: int | None = None) -> Message:
    """Parse the whole entry at ``position``; raise ``LegacyFormatError`` if its fields do not fit."""
    end = len(buf) if end is None else end
    if end - position < LOG_OVERHEAD:
        raise LegacyFormatError("truncated log overhead")
    offset, length = _OVERHEAD.unpack_from(buf, position)
    size = LOG_OVERHEAD + length
    if position + size > end:
        raise LegacyFormatError(f"message at {position} runs past the end of its buffer")
    if length < RECORD_OVERHEAD_V0:
        raise LegacyFormatError(
            f"Record size {length} is less than the minimum record overhead ({RECORD_OVERHEAD_V0})"
        )
    crc, magic, attributes = _HEAD.unpack_from(buf, position + CRC_OFFSET)
    if magic not in (0, 1):
        raise LegacyFormatError(f"Invalid magic found in record: {magic}")
    p = position + ATTRIBUTES_OFFSET + 1
    timestamp = NO_TIMESTAMP
    if magic == 1:
        if length < RECORD_OVERHEAD_V1:
            raise LegacyFormatError(f"Record size {length} is less than the minimum v1 overhead")
        timestamp = _I64.unpack_from(buf, p)[0]
        p += 8
    mv = memoryview(buf)
    stop = position + size
    fields = []
    for _ in range(2):
        if stop - p < 4:
            raise LegacyFormatError("key/value length runs past the message")
        n = _I32.unpack_from(buf, p)[0]
        p += 4
        if n < 0:
            if n != -1:
                raise LegacyFormatError(f"invalid length {n}")
            fields.append(None)
        else:
            if p + n > stop:
                raise LegacyFormatError("key/value runs past the message")
            fields.append(mv[p : p + n])
            p += n
    if p != stop:
        raise LegacyFormatError(f"message at {position} has {stop - p} stray bytes after its value")
    crc_valid = zlib.crc32(mv[position + MAGIC_OFFSET : stop]) == crc
    return Message(position, offset, size, crc, magic, attributes, timestamp, fields[0], fields[1], crc_valid)


def iter_messages(buf, start: int = 0, end: int | None = None):
    """Every message in ``buf[start:end]``; a partial trailing message is an error here."""
    end = len(buf) if end is None else end
    pos = start
    while pos < end:
        msg = parse_message(buf, pos, end)
        yield msg
        pos += msg.size


def iter_message_stream(pieces, max_message_bytes: int):
    """The messages of a message set that arrives in ``pieces`` (a wrapper's value, decompressed as
    it is read: ``codecs.iter_decompress``), each parsed whole (``parse_message``; positions are
    within the buffer it was read from). Reads as ``iter_messages`` does, errors included (a
    partial message at the end is an error), holding the piece being read plus at most one
    message: one declaring more than ``max_message_bytes`` (log overhead included) raises
    ``MessageTooLargeError`` before its bytes are read."""
    held = b""
    parts: list = []
    have = 0
    need = LOG_OVERHEAD  # bytes the next message takes from the start of ``held``, at least
    for piece in pieces:
        if not piece:
            continue
        parts.append(piece)
        have += len(piece)
        if have < need:
            continue
        buf = b"".join((held, *parts)) if held or len(parts) > 1 else bytes(parts[0])
        parts.clear()
        pos, end = 0, len(buf)
        need = LOG_OVERHEAD
        while end - pos >= LOG_OVERHEAD:
            size = LOG_OVERHEAD + _OVERHEAD.unpack_from(buf, pos)[1]
            if size > max_message_bytes:
                raise MessageTooLargeError(
                    f"Record size exceeds the largest allowable message size ({max_message_bytes})."
                )
            if size >= LOG_OVERHEAD + RECORD_OVERHEAD_V0 and pos + size > end:
                need = size
                break
            msg = parse_message(buf, pos, end)
            yield msg
            pos += msg.size
        held = buf[pos:]
        have = len(held)
    if parts:
        held = b"".join((held, *parts))
    yield from iter_messages(held)  # nothing, or a message cut short: iter_messages' error


def inner_messages(
    wrapper: Message,
    *,
    max_decompressed_bytes: int = DEFAULT_MAX_DECOMPRESSED_BYTES,
) -> tuple[bytes, list[Message]]:
    """Decompress a wrapper's value and parse the inner message set (not yet offset-adjusted)."""
    if wrapper.value is None:
        raise LegacyFormatError("compressed wrapper message has a null value")
    inner = decompress(
        wrapper.compression, wrapper.value, magic=wrapper.magic, max_bytes=max_decompressed_bytes
    )
    msgs = list(iter_messages(inner))
    if not msgs:
        raise LegacyFormatError("Found invalid compressed record set with no inner records")
    return inner, msgs


def message_records(
    buf, position: int = 0, *, max_decompressed_bytes: int = DEFAULT_MAX_DECOMPRESSED_BYTES
) -> list[Record]:
    """The records of the v0/v1 entry at ``position``: itself, or its inner messages with the
    absolute offsets (and, for a LogAppendTime wrapper, the wrapper's timestamp) readers see."""
    msg = parse_message(buf, position)
    if msg.compression == Compression.NONE:
        return [_to_record(msg, msg.offset, msg.timestamp, msg.timestamp_type)]
    _, inner = inner_messages(msg, max_decompressed_bytes=max_decompressed_bytes)
    out = []
    if msg.magic == 0:
        for m in inner:
            out.append(_to_record(m, m.offset, m.timestamp, m.timestamp_type))
        return out
    base = 0 if msg.offset == 0 else msg.offset - inner[-1].offset  # 0: the producer left it unset
    log_append = msg.timestamp_type == TimestampType.LOG_APPEND_TIME
    for m in inner:
        if log_append:
            out.append(_to_record(m, base + m.offset, msg.timestamp, TimestampType.LOG_APPEND_TIME))
        else:
            out.append(_to_record(m, base + m.offset, m.timestamp, m.timestamp_type))
    return out


def _to_record(m: Message, offset: int, timestamp: int, ts_type: TimestampType) -> Record:
    return Record(
        offset=offset,
        timestamp=timestamp,
        timestamp_type=ts_type,
        key=None if m.key is None else bytes(m.key),
        value=None if m.value is None else bytes(m.value),
        size=m.size,
    )


# ---------------------------------------------------------------------------------------------
# writing


def encode_message(magic: int, offset: int, timestamp: int, key, value, attributes: int = 0) -> bytes:
    """One whole entry (log overhead included) with its CRC."""
    parts = [bytes((magic, attributes & 0xFF))]
    if magic == 1:
        parts.append(_I64.pack(timestamp))
    for field in (key, value):
        if field is None:
            parts.append(b"\xff\xff\xff\xff")
        else:
            parts.append(_I32.pack(len(field)))
            parts.append(bytes(field))
    body = b"".join(parts)
    crc = zlib.crc32(body)
    return _OVERHEAD.pack(offset, 4 + len(body)) + _U32.pack(crc) + body


def message_size(magic: int, key, value) -> int:
    """Bytes ``encode_message`` produces."""
    return (
        LOG_OVERHEAD
        + (RECORD_OVERHEAD_V1 if magic == 1 else RECORD_OVERHEAD_V0)
        + (len(key) if key is not None else 0)
        + (len(value) if value is not None else 0)
    )


BUILD_SPILL = 1 << 20  # MessageSetBuilder: past this many inner bytes, compress as the messages come


class MessageSetBuilder:
    """v0/v1 messages written one by one (``append``, then ``build``); compressed, ONE wrapper whose
    inner set is compressed as it comes once past ``spill`` bytes (smaller ones in one call, as
    ``build_message_set`` always did). ``size`` is the largest entry so far (a lower bound for a
    wrapper until it is built), for a caller that gives up on a result too large to store."""

    def __init__(
        self,
        magic: int,
        *,
        compression: int = Compression.NONE,
        timestamp_type: TimestampType = TimestampType.CREATE_TIME,
        log_append_time: int = NO_TIMESTAMP,
        snappy_framing: str = "xerial",
        spill: int = BUILD_SPILL,
    ):
        if magic not in (0, 1):
            raise ValueError(f"magic {magic} is not a legacy format")
        self.magic = magic
        self.codec = Compression(compression)
        self.ts_attr = (
            TIMESTAMP_TYPE_MASK if magic == 1 and timestamp_type == TimestampType.LOG_APPEND_TIME else 0
        )
        self.log_append_time = log_append_time
        self.count = 0
        self.first_offset: int | None = None
        self.last_offset: int | None = None
        self._max_ts: int | None = None
        self._largest = 0
        self._messages = SpillingPayload(self.codec, magic=magic, snappy_framing=snappy_framing, spill=spill)

    def append(self, offset: int, timestamp: int, key, value, headers=()) -> None:
        """``headers`` are ignored: magic 0/1 cannot hold them."""
        if self.ts_attr:
            timestamp = self.log_append_time
        if self.magic == 0:
            timestamp = NO_TIMESTAMP
        if self.first_offset is None:
            self.first_offset = offset
        self.last_offset = offset
        self.count += 1
        if self._max_ts is None or timestamp > self._max_ts:
            self._max_ts = timestamp
        if self.codec == Compression.NONE:
            message = encode_message(self.magic, offset, timestamp, key, value, self.ts_attr)
            self._largest = max(self._largest, len(message))
        else:
            inner_offset = (offset - self.first_offset) if self.magic == 1 else offset
            message = encode_message(self.magic, inner_offset, timestamp, key, value, self.ts_attr)
        self._messages.add(message)

    @property
    def size(self) -> int:
        if self.codec == Compression.NONE:
            return self._largest
        overhead = LOG_OVERHEAD + (RECORD_OVERHEAD_V1 if self.magic == 1 else RECORD_OVERHEAD_V0)
        return overhead + self._messages.out_size

    def build(self) -> bytes:
        if not self.count:
            return b""
        payload = self._messages.take()
        if self.codec == Compression.NONE:
            return payload  # the messages themselves: no wrapper
        wrapper_ts = NO_TIMESTAMP
        if self.magic == 1:
            wrapper_ts = self.log_append_time if self.ts_attr else self._max_ts
        return encode_message(
            self.magic, self.last_offset, wrapper_ts, None, payload, int(self.codec) | self.ts_attr
        )


def build_message_set(
    magic: int,
    records: Iterable,
    *,
    compression: int = Compression.NONE,
    timestamp_type: TimestampType = TimestampType.CREATE_TIME,
    log_append_time: int = NO_TIMESTAMP,
    snappy_framing: str = "xerial",
) -> bytes:
    """Encode records as v0/v1 messages; compressed, as ONE wrapper (``MessageSetBuilder``).

    ``records`` yields ``(offset, timestamp, key, value)`` (absolute offsets; extra items such as
    headers are ignored, magic 0/1 cannot hold them) or ``Record`` objects. With LogAppendTime (v1)
    every timestamp becomes ``log_append_time``, as Kafka's builder does. The wrapper's offset is
    the last inner offset; v1 inner offsets are written relative (0..n-1, following the
    given spacing), v0 ones absolute.
    """
    builder = MessageSetBuilder(
        magic,
        compression=compression,
        timestamp_type=timestamp_type,
        log_append_time=log_append_time,
        snappy_framing=snappy_framing,
    )
    for r in records:
        if isinstance(r, Record):
            builder.append(r.offset, r.timestamp, r.key, r.value)
        else:
            offset, timestamp, key, value = tuple(r)[:4]
            builder.append(offset, timestamp, key, value)
    return builder.build()


def set_offset(buf, position: int, offset: int) -> None:
    """Outside the CRC: no checksum work."""
    _I64.pack_into(buf, position, offset)


def set_timestamp(buf, position: int, timestamp_type: TimestampType, timestamp: int) -> bool:
    """Set a v1 message's timestamp and type bit, recomputing its CRC; no-op if unchanged."""
    attrs = buf[position + ATTRIBUTES_OFFSET]
    want = (
        (attrs | TIMESTAMP_TYPE_MASK)
        if timestamp_type == TimestampType.LOG_APPEND_TIME
        else (attrs & ~TIMESTAMP_TYPE_MASK)
    )
    if want == attrs and _I64.unpack_from(buf, position + TIMESTAMP_OFFSET)[0] == timestamp:
        return False
    buf[position + ATTRIBUTES_OFFSET] = want
    _I64.pack_into(buf, position + TIMESTAMP_OFFSET, timestamp)
    size = LOG_OVERHEAD + _I32.unpack_from(buf, position + 8)[0]
    _U32.pack_into(
        buf, position + CRC_OFFSET, zlib.crc32(memoryview(buf)[position + MAGIC_OFFSET : position + size])
    )
    return True
