"""Record batch v2 (magic 2): header view with in-place setters, records, builder.

Header layout (61 bytes, big-endian, offsets from the start of the batch)::

    0  baseOffset            int64   \\ outside the CRC: the broker rewrites these
    8  batchLength           int32    | (bytes after this field)
    12 partitionLeaderEpoch  int32   /
    16 magic                 int8    = 2
    17 crc                   uint32  CRC-32C of bytes 21 .. end
    21 attributes            int16   codec 0-2, timestamp type 3, transactional 4, control 5,
                                     delete horizon 6
    23 lastOffsetDelta       int32
    27 baseTimestamp         int64
    35 maxTimestamp          int64
    43 producerId            int64
    51 producerEpoch         int16
    53 baseSequence          int32
    57 recordsCount          int32
    61 records               (one compressed block when the codec is not none)

Record (varints are zig-zag): length, attributes int8, timestampDelta varlong, offsetDelta varint,
keyLength varint + key, valueLength varint + value, headerCount varint, then per header
keyLength varint + key (utf-8, never null) and valueLength varint + value.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Iterator

import crc32c

from minibroker.records.codecs import DEFAULT_MAX_DECOMPRESSED_BYTES, Compression, compress, decompress
from minibroker.records.record import (
    NO_PARTITION_LEADER_EPOCH,
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    NO_SEQUENCE,
    NO_TIMESTAMP,
    Record,
    TimestampType,
)
from minibroker.records.varint import encode_varint, read_varint

BASE_OFFSET_OFFSET = 0
LENGTH_OFFSET = 8
PARTITION_LEADER_EPOCH_OFFSET = 12
MAGIC_OFFSET = 16
CRC_OFFSET = 17
ATTRIBUTES_OFFSET = 21
LAST_OFFSET_DELTA_OFFSET = 23
BASE_TIMESTAMP_OFFSET = 27
MAX_TIMESTAMP_OFFSET = 35
PRODUCER_ID_OFFSET = 43
PRODUCER_EPOCH_OFFSET = 51
BASE_SEQUENCE_OFFSET = 53
RECORDS_COUNT_OFFSET = 57
RECORDS_OFFSET = 61
HEADER_SIZE = 61
MIN_RECORD_SIZE = 7  # length + attributes + tsDelta + offsetDelta + key -1 + value -1 + 0 headers

COMPRESSION_MASK = 0x07
TIMESTAMP_TYPE_MASK = 0x08
TRANSACTIONAL_MASK = 0x10
CONTROL_MASK = 0x20
DELETE_HORIZON_MASK = 0x40

# the whole header, one field per format character (see the table above)
HEADER = struct.Struct(">qiibIhiqqqhii")
_I64 = struct.Struct(">q")
_I32 = struct.Struct(">i")
_U32 = struct.Struct(">I")
_I16 = struct.Struct(">h")
_ATTR_TO_END = struct.Struct(">hiqqqhii")  # attributes .. recordsCount (bytes 21..61)
_MAX_INT32 = 2**31 - 1


def increment_sequence(sequence: int, increment: int) -> int:
    """Kafka's sequence arithmetic: wraps from int32 max to 0."""
    if sequence > _MAX_INT32 - increment:
        return increment - (_MAX_INT32 - sequence) - 1
    return sequence + increment


class BatchHeader:
    """A view on the 61-byte header of the v2 batch at ``position`` in ``buf``.

    Reading fields is lazy (one ``unpack_from`` each); setters need a writable buffer and say in
    their name whether they keep the CRC valid. Not thread-safe; does not copy.
    """

    __slots__ = ("buf", "position")

    def __init__(self, buf, position: int = 0):
        self.buf = buf
        self.position = position

    # -- plain fields ------------------------------------------------------------------------
    def _get(self, st: struct.Struct, off: int) -> int:
        return st.unpack_from(self.buf, self.position + off)[0]

    @property
    def base_offset(self) -> int:
        return self._get(_I64, BASE_OFFSET_OFFSET)

    @property
    def batch_length(self) -> int:
        return self._get(_I32, LENGTH_OFFSET)

    @property
    def size(self) -> int:
        """Whole batch in bytes, log overhead included."""
        return 12 + self.batch_length

    @property
    def partition_leader_epoch(self) -> int:
        return self._get(_I32, PARTITION_LEADER_EPOCH_OFFSET)

    @property
    def magic(self) -> int:
        return self.buf[self.position + MAGIC_OFFSET]

    @property
    def crc(self) -> int:
        return self._get(_U32, CRC_OFFSET)

    @property
    def attributes(self) -> int:
        return self._get(_I16, ATTRIBUTES_OFFSET)

    @property
    def last_offset_delta(self) -> int:
        return self._get(_I32, LAST_OFFSET_DELTA_OFFSET)

    @property
    def base_timestamp(self) -> int:
        return self._get(_I64, BASE_TIMESTAMP_OFFSET)

    @property
    def max_timestamp(self) -> int:
        return self._get(_I64, MAX_TIMESTAMP_OFFSET)

    @property
    def producer_id(self) -> int:
        return self._get(_I64, PRODUCER_ID_OFFSET)

    @property
    def producer_epoch(self) -> int:
        return self._get(_I16, PRODUCER_EPOCH_OFFSET)

    @property
    def base_sequence(self) -> int:
        return self._get(_I32, BASE_SEQUENCE_OFFSET)

    @property
    def record_count(self) -> int:
        return self._get(_I32, RECORDS_COUNT_OFFSET)

    # -- derived -----------------------------------------------------------------------------
    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def compression(self) -> int:
        """Codec id (may be 5-7 in a corrupt batch; ``Compression(...)`` it after checking)."""
        return self.attributes & COMPRESSION_MASK

    @property
    def timestamp_type(self) -> TimestampType:
        return (
            TimestampType.LOG_APPEND_TIME
            if self.attributes & TIMESTAMP_TYPE_MASK
            else TimestampType.CREATE_TIME
        )

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & TRANSACTIONAL_MASK)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & CONTROL_MASK)

    @property
    def has_delete_horizon(self) -> bool:
        return bool(self.attributes & DELETE_HORIZON_MASK)

    @property
    def last_sequence(self) -> int:
        seq = self.base_sequence
        return NO_SEQUENCE if seq == NO_SEQUENCE else increment_sequence(seq, self.last_offset_delta)

    def compute_crc(self) -> int:
        start = self.position + ATTRIBUTES_OFFSET
        return crc32c.crc32c(memoryview(self.buf)[start : self.position + self.size])

    def is_valid(self) -> bool:
        """Size at least a header, inside the buffer, and the stored CRC-32C matches."""
        size = self.size
        return HEADER_SIZE <= size <= len(self.buf) - self.position and self.compute_crc() == self.crc

    def records_bytes(self) -> memoryview:
        """The (maybe compressed) records section."""
        return memoryview(self.buf)[self.position + RECORDS_OFFSET : self.position + self.size]

    # -- setters -----------------------------------------------------------------------------
    def set_base_offset(self, base_offset: int) -> None:
        """Outside the CRC: no checksum work."""
        _I64.pack_into(self.buf, self.position + BASE_OFFSET_OFFSET, base_offset)

    def set_partition_leader_epoch(self, epoch: int) -> None:
        """Outside the CRC: no checksum work."""
        _I32.pack_into(self.buf, self.position + PARTITION_LEADER_EPOCH_OFFSET, epoch)

    def set_max_timestamp(self, timestamp_type: TimestampType, max_timestamp: int) -> bool:
        """Set maxTimestamp and the timestamp-type bit, recomputing the CRC; no-op if unchanged.

        Returns whether anything changed.
        """
        attrs = self.attributes
        if self.max_timestamp == max_timestamp and bool(attrs & TIMESTAMP_TYPE_MASK) == (
            timestamp_type == TimestampType.LOG_APPEND_TIME
        ):
            return False
        if timestamp_type == TimestampType.LOG_APPEND_TIME:
            attrs |= TIMESTAMP_TYPE_MASK
        else:
            attrs &= ~TIMESTAMP_TYPE_MASK
        _I16.pack_into(self.buf, self.position + ATTRIBUTES_OFFSET, attrs)
        _I64.pack_into(self.buf, self.position + MAX_TIMESTAMP_OFFSET, max_timestamp)
        self.update_crc()
        return True

    def update_crc(self) -> None:
        _U32.pack_into(self.buf, self.position + CRC_OFFSET, self.compute_crc())

    def __repr__(self) -> str:
        return (
            f"BatchHeader(base_offset={self.base_offset}, size={self.size}, count={self.record_count}, "
            f"codec={self.compression}, attributes={self.attributes:#x})"
        )


# ---------------------------------------------------------------------------------------------
# records


class RecordFormatError(ValueError):
    """A v2 record or the records section of a batch does not parse (Kafka: INVALID_RECORD)."""


class RecordScan:
    """Facts from walking a records section without keeping keys or values (see ``scan_records``)."""

    __slots__ = ("count", "timestamp_deltas", "offset_deltas", "null_key_indexes")

    def __init__(self):
        self.count = 0
        self.timestamp_deltas: list[int] = []
        self.offset_deltas: list[int] = []
        self.null_key_indexes: list[int] = []


def scan_records(buf, start: int, end: int, expected_count: int) -> RecordScan:
    """Walk ``expected_count`` records in ``buf[start:end]``, checking every length, as Kafka's
    record iterator does: the records must fill the section exactly.

    Collects timestamp and offset deltas and the indexes of null-key records. Raises
    ``RecordFormatError`` with Kafka's wording where it has one. One- and two-byte varints (the
    common case for lengths, deltas and header counts) are decoded inline: this loop is the cost of
    validating a compressed batch (~0.5-1 us a record).
    """
    scan = RecordScan()
    ts_deltas = scan.timestamp_deltas
    off_deltas = scan.offset_deltas
    nulls = scan.null_key_indexes
    pos = start
    try:
        for index in range(expected_count):
            if pos >= end:
                raise RecordFormatError("Incorrect declared batch size, premature EOF reached")
            b = buf[pos]
            if b < 0x80:
                length = (b >> 1) ^ -(b & 1)
                pos += 1
            elif buf[pos + 1] < 0x80:  # two bytes: lengths of 64..8191, deltas of -4096..4095
                r = (b & 0x7F) | (buf[pos + 1] << 7)
                length = (r >> 1) ^ -(r & 1)
                pos += 2
            else:
                length, pos = read_varint(buf, pos)
            body_end = pos + length
            if length < 0 or body_end > end:
                raise RecordFormatError(f"Invalid record size {length} at index {index}")
            p = pos + 1  # attributes, unused
            b = buf[p]
            if b < 0x80:
                ts_delta = (b >> 1) ^ -(b & 1)
                p += 1
            elif buf[p + 1] < 0x80:  # two bytes: lengths of 64..8191, deltas of -4096..4095
                r = (b & 0x7F) | (buf[p + 1] << 7)
                ts_delta = (r >> 1) ^ -(r & 1)
                p += 2
            else:
                ts_delta, p = read_varint(buf, p)
            b = buf[p]
            if b < 0x80:
                off_delta = (b >> 1) ^ -(b & 1)
                p += 1
            elif buf[p + 1] < 0x80:  # two bytes: lengths of 64..8191, deltas of -4096..4095
                r = (b & 0x7F) | (buf[p + 1] << 7)
                off_delta = (r >> 1) ^ -(r & 1)
                p += 2
            else:
                off_delta, p = read_varint(buf, p)
            b = buf[p]
            if b < 0x80:
                key_len = (b >> 1) ^ -(b & 1)
                p += 1
            elif buf[p + 1] < 0x80:  # two bytes: lengths of 64..8191, deltas of -4096..4095
                r = (b & 0x7F) | (buf[p + 1] << 7)
                key_len = (r >> 1) ^ -(r & 1)
                p += 2
            else:
                key_len, p = read_varint(buf, p)
            if key_len < 0:
                if key_len != -1:
                    raise RecordFormatError(f"Invalid key length {key_len}")
                nulls.append(index)
            else:
                p += key_len
            b = buf[p]
            if b < 0x80:
                value_len = (b >> 1) ^ -(b & 1)
                p += 1
            elif buf[p + 1] < 0x80:  # two bytes: lengths of 64..8191, deltas of -4096..4095
                r = (b & 0x7F) | (buf[p + 1] << 7)
                value_len = (r >> 1) ^ -(r & 1)
                p += 2
            else:
                value_len, p = read_varint(buf, p)
            if value_len > 0:
                p += value_len
            elif value_len < -1:
                raise RecordFormatError(f"Invalid value length {value_len}")
            b = buf[p]
            if b == 0:  # no headers
                p += 1
            else:
                header_count, p = read_varint(buf, p)
                if header_count < 0:
                    raise RecordFormatError(f"Found invalid number of record headers {header_count}")
                for _ in range(header_count):
                    hk, p = read_varint(buf, p)
                    if hk < 0:
                        raise RecordFormatError("Invalid negative header key size " + str(hk))
                    p += hk
                    hv, p = read_varint(buf, p)
                    if hv > 0:
                        p += hv
                    elif hv < -1:
                        raise RecordFormatError(f"Invalid header value length {hv}")
            if p != body_end:
                raise RecordFormatError(
                    f"Invalid record size: expected to read {length} bytes in record "
                    f"payload, but instead read {p - pos}"
                )
            ts_deltas.append(ts_delta)
            off_deltas.append(off_delta)
            pos = body_end
    except IndexError:
        raise RecordFormatError("Incorrect declared batch size, premature EOF reached") from None
    if pos != end:
        raise RecordFormatError("Incorrect declared batch size, records still remaining in file")
    scan.count = expected_count
    return scan


def decode_records(
    buf,
    start: int,
    end: int,
    count: int,
    *,
    base_offset: int,
    base_timestamp: int,
    timestamp_type: TimestampType,
    max_timestamp: int,
    base_sequence: int = NO_SEQUENCE,
    is_control: bool = False,
) -> list[Record]:
    """Fully decode ``count`` records from ``buf[start:end]`` (pure Python, ~1 us a record)."""
    out = []
    pos = start
    mv = memoryview(buf)
    log_append = timestamp_type == TimestampType.LOG_APPEND_TIME
    try:
        for _ in range(count):
            rec_start = pos
            length, pos = read_varint(buf, pos)
            body_end = pos + length
            if length < 0 or body_end > end:
                raise RecordFormatError("Incorrect declared batch size, premature EOF reached")
            p = pos + 1
            ts_delta, p = read_varint(buf, p)
            off_delta, p = read_varint(buf, p)
            n, p = read_varint(buf, p)
            key = None if n < 0 else bytes(mv[p : p + n])
            p += max(n, 0)
            n, p = read_varint(buf, p)
            value = None if n < 0 else bytes(mv[p : p + n])
            p += max(n, 0)
            hcount, p = read_varint(buf, p)
            if hcount < 0:
                raise RecordFormatError(f"Found invalid number of record headers {hcount}")
            headers = []
            for _ in range(hcount):
                n, p = read_varint(buf, p)
                if n < 0:
                    raise RecordFormatError("Invalid null header key found in headers")
                hkey = bytes(mv[p : p + n]).decode("utf-8", "replace")
                p += n
                n, p = read_varint(buf, p)
                hval = None if n < 0 else bytes(mv[p : p + n])
                p += max(n, 0)
                headers.append((hkey, hval))
            if p != body_end:
                raise RecordFormatError(
                    f"Invalid record size: expected to read {length} bytes in record "
                    f"payload, but instead read {p - pos}"
                )
            sequence = NO_SEQUENCE if base_sequence < 0 else increment_sequence(base_sequence, off_delta)
            out.append(
                Record(
                    offset=base_offset + off_delta,
                    timestamp=max_timestamp if log_append else base_timestamp + ts_delta,
                    timestamp_type=timestamp_type,
                    key=key,
                    value=value,
                    headers=tuple(headers),
                    sequence=sequence,
                    is_control=is_control,
                    size=body_end - rec_start,
                )
            )
            pos = body_end
    except IndexError:
        raise RecordFormatError("Incorrect declared batch size, premature EOF reached") from None
    if pos != end:
        raise RecordFormatError("Incorrect declared batch size, records still remaining in file")
    return out


def batch_records(
    buf,
    position: int = 0,
    *,
    max_decompressed_bytes: int = DEFAULT_MAX_DECOMPRESSED_BYTES,
) -> list[Record]:
    """Decode every record of the v2 batch at ``position`` (decompressing if needed)."""
    h = BatchHeader(buf, position)
    codec = h.compression
    start, end = position + RECORDS_OFFSET, position + h.size
    if codec != Compression.NONE:
        buf = decompress(codec, memoryview(h.buf)[start:end], magic=2, max_bytes=max_decompressed_bytes)
        start, end = 0, len(buf)
    return decode_records(
        buf,
        start,
        end,
        h.record_count,
        base_offset=h.base_offset,
        base_timestamp=h.base_timestamp,
        timestamp_type=h.timestamp_type,
        max_timestamp=h.max_timestamp,
        base_sequence=h.base_sequence,
        is_control=h.is_control,
    )


def encode_record(
    offset_delta: int,
    timestamp_delta: int,
    key: bytes | None,
    value: bytes | None,
    headers: Iterable[tuple[str, bytes | None]] = (),
) -> bytes:
    """One record, its length varint included."""
    parts = [b"\x00", encode_varint(timestamp_delta), encode_varint(offset_delta)]
    for field in (key, value):
        if field is None:
            parts.append(b"\x01")  # zig-zag -1
        else:
            parts.append(encode_varint(len(field)))
            parts.append(field)
    headers = list(headers)
    parts.append(encode_varint(len(headers)))
    for hkey, hval in headers:
        hk = hkey.encode() if isinstance(hkey, str) else bytes(hkey)
        parts.append(encode_varint(len(hk)))
        parts.append(hk)
        if hval is None:
            parts.append(b"\x01")
        else:
            parts.append(encode_varint(len(hval)))
            parts.append(hval)
    body = b"".join(parts)
    return encode_varint(len(body)) + body


def build_batch(
    records: Iterable,
    *,
    base_offset: int = 0,
    compression: int = Compression.NONE,
    timestamp_type: TimestampType = TimestampType.CREATE_TIME,
    log_append_time: int = NO_TIMESTAMP,
    producer_id: int = NO_PRODUCER_ID,
    producer_epoch: int = NO_PRODUCER_EPOCH,
    base_sequence: int = NO_SEQUENCE,
    is_transactional: bool = False,
    is_control: bool = False,
    partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH,
    delete_horizon_ms: int | None = None,
    snappy_framing: str = "xerial",
) -> bytes:
    """Encode one v2 batch.

    ``records`` yields ``(offset, timestamp, key, value, headers)`` tuples or ``Record`` objects;
    offsets are absolute and become deltas from ``base_offset``. With ``LOG_APPEND_TIME`` the
    header's maxTimestamp is ``log_append_time`` (records keep their own deltas, as Kafka's
    builder does).
    """
    rows = [
        (r.offset, r.timestamp, r.key, r.value, r.headers) if isinstance(r, Record) else tuple(r)
        for r in records
    ]
    if not rows:
        raise ValueError("a v2 batch holds at least one record")
    base_ts = rows[0][1]
    if delete_horizon_ms is not None:
        base_ts = delete_horizon_ms
    encoded = []
    max_ts = NO_TIMESTAMP
    for offset, ts, key, value, headers in rows:
        encoded.append(encode_record(offset - base_offset, ts - base_ts, key, value, headers or ()))
        if ts > max_ts:
            max_ts = ts
    payload = b"".join(encoded)
    codec = Compression(compression)
    if codec != Compression.NONE:
        payload = compress(codec, payload, magic=2, snappy_framing=snappy_framing)
    attrs = int(codec)
    if timestamp_type == TimestampType.LOG_APPEND_TIME:
        attrs |= TIMESTAMP_TYPE_MASK
        max_ts = log_append_time
    if is_transactional:
        attrs |= TRANSACTIONAL_MASK
    if is_control:
        attrs |= CONTROL_MASK
    if delete_horizon_ms is not None:
        attrs |= DELETE_HORIZON_MASK
    last_delta = rows[-1][0] - base_offset
    buf = bytearray(HEADER_SIZE + len(payload))
    HEADER.pack_into(
        buf,
        0,
        base_offset,
        len(buf) - 12,
        partition_leader_epoch,
        2,
        0,
        attrs,
        last_delta,
        base_ts,
        max_ts,
        producer_id,
        producer_epoch,
        base_sequence,
        len(rows),
    )
    buf[HEADER_SIZE:] = payload
    _U32.pack_into(buf, CRC_OFFSET, crc32c.crc32c(memoryview(buf)[ATTRIBUTES_OFFSET:]))
    return bytes(buf)


def iter_batch_records(buf, position: int = 0, **kw) -> Iterator[Record]:
    yield from batch_records(buf, position, **kw)
