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

import itertools
import struct
from collections.abc import Iterable, Iterator

import crc32c

from minibroker.records import accelerator as _accelerator
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
from minibroker.records.record import (
    NO_PARTITION_LEADER_EPOCH,
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    NO_SEQUENCE,
    NO_TIMESTAMP,
    Record,
    TimestampType,
)
from minibroker.records.varint import encode_varint

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

TRANSACTIONAL_MASK = 0x10
CONTROL_MASK = 0x20
DELETE_HORIZON_MASK = 0x40

# the whole header, one field per format character (see the table above)
HEADER = struct.Struct(">qiibIhiqqqhii")
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


class RecordTooLargeError(RecordFormatError):
    """A record declares more bytes than one record may take (``iter_record_windows``'s bound)."""


# Varints as Java's ByteUtils reads them in DefaultRecord.readFrom: an int32 varint takes at most 5
# bytes and a varlong at most 10, longer is an error. One deviation: where Java silently drops bits
# beyond 32 (64) in the last byte, those bits are an error here. No encoder sets them, and the same
# bytes would read as another value in other clients (kafka-python, which keeps every bit), so such
# a record cannot be stored. Reads never pass ``end`` (the end of the records section).
_M32 = 0xFFFFFFFF
_M64 = 0xFFFFFFFFFFFFFFFF
_STRUCTURE = "Found invalid record structure"


class _EndOfRecords(RecordFormatError):
    """A varint runs past the end of the records section."""


def _varint(buf, pos: int, end: int, max_shift: int, mask: int) -> tuple[int, int]:
    raw = shift = 0
    while True:
        if pos >= end:
            raise _EndOfRecords(f"{_STRUCTURE}: the records end inside a varint")
        b = buf[pos]
        pos += 1
        raw |= (b & 0x7F) << shift
        if b < 0x80:
            if raw > mask:
                bits = 32 if mask == _M32 else 64
                raise RecordFormatError(f"{_STRUCTURE}: a varint does not fit in {bits} bits")
            return (raw >> 1) ^ -(raw & 1), pos
        shift += 7
        if shift > max_shift:
            what = "5th" if max_shift == 28 else "10th"
            raise RecordFormatError(
                f"{_STRUCTURE}: varint is too long, the most significant bit in the {what} byte is set"
            )


def read_varint32(buf, pos: int, end: int) -> tuple[int, int]:
    """One zig-zag int32 varint at ``pos`` (Java's ``readVarint``); ``RecordFormatError`` if bad."""
    return _varint(buf, pos, end, 28, _M32)


def read_varlong(buf, pos: int, end: int) -> tuple[int, int]:
    """One zig-zag int64 varint at ``pos`` (Java's ``readVarlong``); ``RecordFormatError`` if bad."""
    return _varint(buf, pos, end, 63, _M64)


def read_record(buf, pos: int, end: int, index: int = 0) -> tuple[int, int, int, bool]:
    """Check the record at ``pos`` field by field as Kafka's ``DefaultRecord.readFrom`` does.

    Returns ``(next_position, timestamp_delta, offset_delta, key_is_null)``; raises
    ``RecordFormatError`` with Kafka's wording (plus the record's index) for anything that does
    not parse. Every length is checked against ``end`` before it is used, so no input makes this
    raise anything else, read outside ``buf[pos:end]`` or loop for longer than the bytes allow.
    The exact (slow) path of ``walk_records``; ``scan_records`` and the error reports use it too.
    """
    if pos >= end:
        raise RecordFormatError("Incorrect declared batch size, premature EOF reached")
    try:
        size, p = _varint(buf, pos, end, 28, _M32)
    except _EndOfRecords:
        raise RecordFormatError("Incorrect declared batch size, premature EOF reached") from None
    body = p
    if size < 0:
        raise RecordFormatError(f"Invalid record size {size} at record {index}")
    if size > end - p:
        raise RecordFormatError(
            f"Invalid record size: expected {size} bytes in record payload, but instead the buffer has "
            f"only {end - p} remaining bytes (record {index})."
        )
    body_end = p + size
    if p >= end:
        raise RecordFormatError(f"{_STRUCTURE}: record {index} ends before its attributes")
    p += 1  # attributes: unused in v2
    ts_delta, p = _varint(buf, p, end, 63, _M64)
    offset_delta, p = _varint(buf, p, end, 28, _M32)
    n, p = _varint(buf, p, end, 28, _M32)  # key: any negative length is a null key, as in Java
    key_null = n < 0
    if n > 0:
        if n > end - p:
            raise RecordFormatError(f"{_STRUCTURE}: the key of record {index} runs past the records")
        p += n
    n, p = _varint(buf, p, end, 28, _M32)  # value
    if n > 0:
        if n > end - p:
            raise RecordFormatError(f"{_STRUCTURE}: the value of record {index} runs past the records")
        p += n
    count, p = _varint(buf, p, end, 28, _M32)
    if count < 0:
        raise RecordFormatError(f"Found invalid number of record headers {count}")
    if count > end - p:
        raise RecordFormatError(
            f"Found invalid number of record headers. {count} is larger than the remaining size of the buffer"
        )
    for _ in range(count):
        n, p = _varint(buf, p, end, 28, _M32)
        if n < 0:
            raise RecordFormatError(f"Invalid negative header key size {n}")
        if n > end - p:
            raise RecordFormatError(f"{_STRUCTURE}: a header key of record {index} runs past the records")
        p += n
        n, p = _varint(buf, p, end, 28, _M32)
        if n > 0:
            if n > end - p:
                raise RecordFormatError(
                    f"{_STRUCTURE}: a header value of record {index} runs past the records"
                )
            p += n
    if p != body_end:
        raise RecordFormatError(
            f"Invalid record size: expected to read {size} bytes in record payload, but instead read "
            f"{p - body} (record {index})"
        )
    return body_end, ts_delta, offset_delta, key_null


class _Slow(Exception):
    """Internal: this record is not of the common shape; read it with ``read_record``."""


_SLOW = _Slow()
_PREFIX = struct.Struct("12B")  # enough for the longest common-shape prefix (see walk_records)
# Tables for walk_records: a tuple lookup is cheaper than the bitwise operations it replaces, which
# CPython 3.11 does not specialise. ~0.4 MB (mostly _SKIP2), built in about a millisecond when
# the record layer is first imported.
_ZIGZAG1 = tuple((b >> 1) ^ -(b & 1) for b in range(128))  # one-byte varint -> value
_SKIP1 = tuple(1 if b & 1 else 1 + (b >> 1) for b in range(128))  # one-byte length -> bytes to skip
_ODD1 = tuple(b & 1 for b in range(128))  # one-byte length -> 1 if negative (a null)
_LOW7 = tuple(b & 0x7F for b in range(256))  # two-byte varint b, c: raw value = _LOW7[b] + _HIGH7[c]
_HIGH7 = tuple(c << 7 for c in range(128))
# two-byte length -> bytes to skip: raw value r even -> 2 + r // 2, odd (negative) -> 2
_SKIP2 = tuple(itertools.chain.from_iterable(zip(range(2, 2 + (1 << 13)), itertools.repeat(2))))


def walk_records(buf, start: int, end: int, count: int, first: int = 0, partial: bool = False) -> tuple:
    """Structure-only walk of ``count`` records in ``buf[start:end]``: ``walk_records_python`` (the
    reference, which says what it does), by the C accelerator when it runs and can decide
    (``accelerator``: a section whose records all parse, or a window ending before a record that is
    not whole yet); anything else, errors included, goes to the Python code."""
    fast = _accelerator.walk_records
    if fast is not None:
        got = fast(buf, start, end, count, first, partial)
        if got is not None:
            return got
    return walk_records_python(buf, start, end, count, first, partial)


def walk_records_python(
    buf, start: int, end: int, count: int, first: int = 0, partial: bool = False
) -> tuple:
    """Structure-only walk of ``count`` records in ``buf[start:end]``: every check Kafka's record
    iterator makes (each record's length within the section, every varint at most 5 (10) bytes,
    key, value and header lengths within the record, the record filled exactly, the section
    filled exactly), nothing decoded or copied.

    Returns ``(min_timestamp_delta, max_timestamp_delta, null_keys, offsets_in_order)``:
    ``offsets_in_order`` says every offsetDelta is its record's index in the batch, the first
    record walked being record ``first`` (a window of a longer stream: ``iter_record_windows``).
    ``(0, 0, 0, True)`` for no records. Raises ``RecordFormatError`` (from ``read_record``) for the
    first bad record.

    ``partial`` (for a window of a section that arrives in pieces, ``len(buf) == end``): the section
    may go on past ``end``, so the walk stops before the first record that is not whole there (or
    after ``count`` records) instead of failing, and returns two more items: where it stopped and
    how many records it walked.

    Cost: a record of the common shape (length and key/value lengths of 1-2 bytes, deltas of 1-3
    bytes, up to 63 headers with 1-2 byte lengths) is read from one ``unpack_from`` of its first 12
    bytes and a few indexings, in 130-160 bytecodes without headers; anything else, and any doubt,
    goes through the exact
    ``read_record``, which decides. The fast path does not check each record's end against
    ``end``: a record running past it leaves the walk at another position than ``end``, and then
    ``scan_records`` reads the section again to raise the exact error. So the fast path never
    accepts what ``read_record`` would refuse.
    """
    if count <= 0:
        if start != end and not partial:
            raise RecordFormatError("Incorrect declared batch size, records still remaining in file")
        return (0, 0, 0, True, start, 0) if partial else (0, 0, 0, True)
    try:
        pos, t, o, null = read_record(buf, start, end, first)
    except RecordFormatError:
        if partial and not whole_record_at(buf, start, end):
            return 0, 0, 0, True, start, 0
        raise
    tmin = tmax = t
    nulls = 1 if null else 0
    in_order = o == first
    prefix = _PREFIX.unpack_from
    zz, skip, odd, low, high, skip2 = _ZIGZAG1, _SKIP1, _ODD1, _LOW7, _HIGH7, _SKIP2
    slow = _SLOW
    for e2 in range(first + first + 2, first + first + count + count, 2):  # zig-zag of 2 * index
        try:
            f = prefix(buf, pos)  # struct.error with fewer than 12 bytes left: the last records
            b = f[0]
            if b < 0x80:  # record length: 1 byte (records up to 63 bytes; a negative one fails below)
                body_end = pos + skip[b]
                k = 2  # k: index in f of the next field, after the attributes byte
            else:
                c = f[1]
                if c >= 0x80:
                    raise slow
                body_end = pos + skip2[low[b] + high[c]]  # (a negative one fails below)
                k = 3
            b = f[k]  # timestamp delta: 1-3 bytes
            if b < 0x80:
                t = zz[b]
                k += 1
            else:
                c = f[k + 1]
                if c < 0x80:
                    r = (b & 0x7F) | (c << 7)
                    k += 2
                else:
                    d = f[k + 2]
                    if d >= 0x80:
                        raise slow
                    r = (b & 0x7F) | ((c & 0x7F) << 7) | (d << 14)
                    k += 3
                t = (r >> 1) ^ -(r & 1)
            o = f[k]  # offset delta: 1-3 bytes, kept zig-zagged to compare with e2
            if o < 0x80:
                k += 1
            else:
                c = f[k + 1]
                if c < 0x80:
                    o = low[o] + high[c]
                    k += 2
                else:
                    d = f[k + 2]
                    if d >= 0x80:
                        raise slow
                    o = (o & 0x7F) | ((c & 0x7F) << 7) | (d << 14)
                    k += 3
            b = f[k]  # key length: 1-2 bytes (k <= 9 here, so f[k + 1] exists); negative: null
            if b < 0x80:
                null = odd[b]
                p = pos + k + skip[b]
            else:
                c = f[k + 1]
                if c >= 0x80:
                    raise slow
                r = (b & 0x7F) | (c << 7)
                null = r & 1
                p = pos + k + 2 + (0 if null else r >> 1)
            b = buf[p]  # value length: 1-2 bytes; an IndexError past the buffer goes to read_record
            if b < 0x80:
                p += skip[b]
            else:
                c = buf[p + 1]
                if c >= 0x80:
                    raise slow
                p += skip2[low[b] + high[c]]
            b = buf[p]  # header count
            if not b:  # none (the common case): the record must end here
                if p + 1 != body_end:
                    raise slow
            else:  # 1-63 headers, each key (never null) and value of 1-2 byte lengths
                if b >= 0x80 or b & 1:
                    raise slow
                p += 1
                for _ in range(b >> 1):
                    b = buf[p]
                    if b < 0x80:
                        if b & 1:
                            raise slow
                        p += skip[b]
                    else:
                        c = buf[p + 1]
                        if c >= 0x80:
                            raise slow
                        r = low[b] + high[c]
                        if r & 1:
                            raise slow
                        p += skip2[r]
                    b = buf[p]
                    if b < 0x80:
                        p += skip[b]
                    else:
                        c = buf[p + 1]
                        if c >= 0x80:
                            raise slow
                        p += skip2[low[b] + high[c]]
                if p != body_end or p > end:  # (a header's value may claim bytes past the buffer)
                    raise slow
        except (_Slow, IndexError, struct.error):
            # ``slow`` is one instance, raised again and again: each raise would add this frame (and so
            # ``buf``) to its traceback, which would keep every buffer ever walked alive
            slow.__traceback__ = None
            if pos > end:  # a record ran past the end: scan_records below says which, and how
                break
            i = e2 >> 1
            try:
                body_end, t, off, null = read_record(buf, pos, end, i)
            except RecordFormatError:
                if partial and not whole_record_at(buf, pos, end):
                    return tmin, tmax, nulls, in_order, pos, i - first
                raise
            o = e2 if off == i else -1
        if t > tmax:
            tmax = t
        elif t < tmin:
            tmin = t
        if null:
            nulls += 1
        if o != e2:
            in_order = False
        pos = body_end
    if partial:
        return tmin, tmax, nulls, in_order, pos, count
    if pos != end:
        scan_records(buf, start, end, count, first)  # raises the exact error
        raise RecordFormatError("Incorrect declared batch size, records still remaining in file")
    return tmin, tmax, nulls, in_order


def _zigzag_at(buf, p: int) -> tuple[int, int]:
    """(value, next position) of the zig-zag varint at ``p``; IndexError past ``buf``, ValueError
    past 10 bytes."""
    b = buf[p]
    if b < 0x80:
        return (b >> 1) ^ -(b & 1), p + 1
    raw, shift = b & 0x7F, 7
    while True:
        p += 1
        b = buf[p]
        raw |= (b & 0x7F) << shift
        if b < 0x80:
            return (raw >> 1) ^ -(raw & 1), p + 1
        shift += 7
        if shift > 63:
            raise ValueError("varint too long")


def record_keys(buf, start: int, end: int, count: int) -> list[tuple[int, int, int, int, int]] | None:
    """``(offset delta, key start, key end, value start, value end)`` of each of the ``count``
    records in ``buf[start:end]`` (start -1: a null key or value), read from the record's lengths
    only: the timestamp, the value's bytes and the headers are skipped, nothing is copied. None when the
    records do not walk exactly to ``end`` (the caller then decodes fully, which says what is wrong).
    The records were checked field by field when appended (``walk_records``); this is what the log
    cleaner and the group coordinator's load need of most batches, several times cheaper than
    ``decode_records``."""
    out = []
    pos = start
    zz = _zigzag_at
    try:
        for _ in range(count):
            length, p = zz(buf, pos)
            body_end = p + length
            if length <= 0 or body_end > end:
                return None
            p += 1  # attributes
            if buf[p] < 0x80:  # timestamp delta (one-byte varints inline: the common case)
                p += 1
            else:
                _, p = zz(buf, p)
            b = buf[p]
            if b < 0x80:
                delta, p = (b >> 1) ^ -(b & 1), p + 1
            else:
                delta, p = zz(buf, p)
            b = buf[p]
            if b < 0x80:  # key length: negative, a null key
                n, p = (b >> 1) ^ -(b & 1), p + 1
            else:
                n, p = zz(buf, p)
            if n >= 0:
                key_start, key_end = p, p + n
                p = key_end
            else:
                key_start = key_end = -1
            n, p = zz(buf, p)  # value length
            if p + max(n, 0) > body_end:
                return None
            out.append((delta, key_start, key_end, p if n >= 0 else -1, p + n if n >= 0 else -1))
            pos = body_end
    except (IndexError, ValueError):
        return None
    return out if pos == end else None


def whole_record_at(buf, pos: int, end: int) -> bool:
    """Whether ``buf[pos:end]`` holds the whole record starting at ``pos``, as far as its length says
    (False: its length, or the bytes it declares, go on past ``end``)."""
    try:
        size, body = _varint(buf, pos, end, 28, _M32)
    except _EndOfRecords:
        return False
    except RecordFormatError:
        return True  # a length no record has: not a matter of waiting for more bytes
    return size < 0 or body + size <= end


def declared_record_size(buf, pos: int, end: int) -> tuple[int, int] | None:
    """(body size, where the body starts) as the record at ``pos`` declares them; None if its length
    is cut short by ``end``; (-1, pos) for a length that is not a record's."""
    try:
        return _varint(buf, pos, end, 28, _M32)
    except _EndOfRecords:
        return None
    except RecordFormatError:
        return -1, pos


class RecordScan:
    """Per-record facts of a records section (see ``scan_records``)."""

    __slots__ = ("count", "timestamp_deltas", "offset_deltas", "null_key_indexes")

    def __init__(self):
        self.count = 0
        self.timestamp_deltas: list[int] = []
        self.offset_deltas: list[int] = []
        self.null_key_indexes: list[int] = []


def scan_records(buf, start: int, end: int, expected_count: int, first: int = 0) -> RecordScan:
    """Walk ``expected_count`` records in ``buf[start:end]`` with ``read_record`` and keep each
    one's timestamp and offset deltas and the indexes of null keys (for per-record error reports:
    ``walk_records`` is the fast check). The records must fill the section exactly. Indexes (in
    ``null_key_indexes`` and error messages) count from ``first``."""
    scan = RecordScan()
    pos = start
    for index in range(first, first + max(expected_count, 0)):
        pos, t, o, null = read_record(buf, pos, end, index)
        scan.timestamp_deltas.append(t)
        scan.offset_deltas.append(o)
        if null:
            scan.null_key_indexes.append(index)
    if pos != end:
        raise RecordFormatError("Incorrect declared batch size, records still remaining in file")
    scan.count = max(expected_count, 0)
    return scan


WINDOW_RECORDS = 4096  # records per window of iter_record_windows: ~2-3 ms of walking


def iter_record_windows(
    pieces, count: int, max_record_bytes: int, *, max_records: int = WINDOW_RECORDS, walk: bool = False
):
    """The ``count`` records of a records section that arrives in ``pieces`` (decompressed as it is
    read: ``codecs.iter_decompress``), as windows of whole records.

    Yields ``(buf, start, end, first, n)``: ``buf[start:end]`` holds records ``first`` ..
    ``first + n - 1`` of the batch, whole, at most ``max_records`` of them; ``scan_records`` and
    ``decode_records`` read a window as they read a whole section (pass them ``first``). With
    ``walk``, each window is walked here (``walk_records``, partial: the walk itself finds where the
    whole records end) and its aggregates come as a sixth item. Over all windows there are exactly
    ``count`` records, else ``RecordFormatError`` as Kafka's record iterator says it: the section
    ends inside a record or before ``count`` records ("premature EOF", or the record's own size
    error), or bytes follow the last one ("records still remaining"; Kafka reads one byte past the
    last record to find out, and so do we: at most one more piece).

    Bounds, whatever the section claims: what is held is the piece being read plus at most one
    record (a record is gathered whole before it is handed out, as Kafka's ``readFrom`` reads a
    record's body whole); a record that declares more than ``max_record_bytes`` raises
    ``RecordTooLargeError`` before its bytes are read (pieces must not be larger than that, so that
    no such record fits in one); nothing is asked of ``pieces`` beyond the records and one piece
    more, so a section decompressing to more than its records take is found out at once.
    """
    index = 0
    held = b""  # the start of the stream not yet handed out: part of a record
    parts: list = []  # pieces read since, not yet joined
    have = 0  # len(held) + the pieces' lengths
    need = 0  # bytes the next record takes from the start of ``held``, when known
    for piece in pieces:
        if not piece:
            continue
        if index >= count:
            raise RecordFormatError("Incorrect declared batch size, records still remaining in file")
        parts.append(piece)
        have += len(piece)
        if have < need:
            continue
        buf = b"".join((held, *parts)) if held or len(parts) > 1 else bytes(parts[0])
        parts.clear()
        pos, end = 0, len(buf)
        _check_size(buf, 0, end, index, max_record_bytes)  # it began in an earlier piece
        while index < count:
            most = min(count - index, max_records)
            if walk:
                walked = walk_records(buf, pos, end, most, index, True)
                n, stop = walked[5], walked[4]
                if n:
                    yield buf, pos, stop, index, n, walked[:4]
            else:
                n, stop, status = _whole_records(buf, pos, end, most, max_record_bytes)
                if n:
                    yield buf, pos, stop, index, n
                if status < 0 and index + n < count:
                    _bad_length(buf, stop, end, index + n, max_record_bytes)
            index += n
            pos = stop
            if n < most:
                break
        if index >= count and pos < end:
            raise RecordFormatError("Incorrect declared batch size, records still remaining in file")
        held = buf[pos:]
        have = len(held)
        need = 0
        if held:
            declared = declared_record_size(held, 0, have)
            if declared is not None:
                _check_size(held, 0, have, index, max_record_bytes)
                need = declared[1] + max(declared[0], 0)
    if index < count:
        if parts:  # the last pieces did not complete the record they belong to
            held = b"".join((held, *parts))
        read_record(held, 0, len(held), index)  # raises what Kafka says of a section that ends here
        raise RecordFormatError("Incorrect declared batch size, premature EOF reached")  # pragma: no cover


def _check_size(buf, pos: int, end: int, index: int, max_record_bytes: int) -> None:
    declared = declared_record_size(buf, pos, end)
    size = -1 if declared is None else declared[0]
    if size > max_record_bytes:
        raise RecordTooLargeError(
            f"Record {index} declares {size} bytes, more than the {max_record_bytes} bytes a record may take"
        )


def _whole_records(buf, pos: int, end: int, most: int, max_record_bytes: int) -> tuple[int, int, int]:
    """How many whole records (at most ``most``) start at ``pos``, where they end, and a status: the
    bytes from there the next record takes (0: not known yet), or -1 if its length cannot be read
    as a record's, or -2 if it declares more than ``max_record_bytes``."""
    fast = _accelerator.whole_records
    if fast is not None:
        got = fast(buf, pos, end, most, max_record_bytes)
        if got is not None:
            return got
    return _whole_records_python(buf, pos, end, most, max_record_bytes)


def _whole_records_python(buf, pos: int, end: int, most: int, max_record_bytes: int) -> tuple[int, int, int]:
    """``_whole_records`` in Python: the reference of the accelerator's ``whole_records``."""
    n = 0
    low, high = _LOW7, _HIGH7
    while n < most and pos < end:
        b = buf[pos]
        if b < 0x80:  # records up to 63 bytes
            if b & 1:
                return n, pos, -1  # a negative length
            body, size = pos + 1, b >> 1
        elif pos + 1 < end and buf[pos + 1] < 0x80:  # up to 8191 bytes
            raw = low[b] + high[buf[pos + 1]]
            if raw & 1:
                return n, pos, -1
            body, size = pos + 2, raw >> 1
        else:
            try:
                size, body = _varint(buf, pos, end, 28, _M32)
            except _EndOfRecords:
                return n, pos, 0
            except RecordFormatError:
                return n, pos, -1
            if size < 0:
                return n, pos, -1
        if size > max_record_bytes:
            return n, pos, -2
        stop = body + size
        if stop > end:
            return n, pos, stop - pos
        pos = stop
        n += 1
    return n, pos, 0


def _bad_length(buf, pos: int, end: int, index: int, max_record_bytes: int):
    _check_size(buf, pos, end, index, max_record_bytes)
    read_record(buf, pos, end, index)  # a length no record has: Kafka's message
    raise RecordFormatError(f"{_STRUCTURE}: record {index}")  # pragma: no cover


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
    first: int = 0,
) -> list[Record]:
    """Fully decode ``count`` records from ``buf[start:end]`` (pure Python, ~1 us a record).

    Lengths and varints are checked as ``read_record`` checks them; anything that does not parse
    raises ``RecordFormatError``. Timestamps are ``base_timestamp + delta`` as exact integers (the
    validator refuses those outside int64; Java would wrap them). Error messages count records
    from ``first``.
    """
    out = []
    pos = start
    mv = memoryview(buf)
    log_append = timestamp_type == TimestampType.LOG_APPEND_TIME
    for index in range(first, first + max(count, 0)):
        rec_start = pos
        if pos >= end:
            raise RecordFormatError("Incorrect declared batch size, premature EOF reached")
        length, pos = read_varint32(buf, pos, end)
        body_end = pos + length
        if length < 0 or body_end > end:
            raise RecordFormatError(
                f"Invalid record size: expected {length} bytes in record payload, but instead the buffer "
                f"has only {end - pos} remaining bytes (record {index})."
            )
        # field by field within the record; read_record has the same checks and messages
        p = pos + 1
        ts_delta, p = read_varlong(buf, p, body_end)
        off_delta, p = read_varint32(buf, p, body_end)
        n, p = read_varint32(buf, p, body_end)
        if n > body_end - p:
            raise RecordFormatError(f"{_STRUCTURE}: the key of record {index} runs past the record")
        key = None if n < 0 else bytes(mv[p : p + n])
        p += max(n, 0)
        n, p = read_varint32(buf, p, body_end)
        if n > body_end - p:
            raise RecordFormatError(f"{_STRUCTURE}: the value of record {index} runs past the record")
        value = None if n < 0 else bytes(mv[p : p + n])
        p += max(n, 0)
        hcount, p = read_varint32(buf, p, body_end)
        if hcount < 0:
            raise RecordFormatError(f"Found invalid number of record headers {hcount}")
        if hcount > body_end - p:
            raise RecordFormatError(
                f"Found invalid number of record headers. {hcount} is larger than the remaining size "
                "of the buffer"
            )
        headers = []
        for _ in range(hcount):
            n, p = read_varint32(buf, p, body_end)
            if n < 0:
                raise RecordFormatError(f"Invalid negative header key size {n}")
            if n > body_end - p:
                raise RecordFormatError(f"{_STRUCTURE}: a header key of record {index} runs past the record")
            hkey = bytes(mv[p : p + n]).decode("utf-8", "replace")
            p += n
            n, p = read_varint32(buf, p, body_end)
            if n > body_end - p:
                raise RecordFormatError(
                    f"{_STRUCTURE}: a header value of record {index} runs past the record"
                )
            hval = None if n < 0 else bytes(mv[p : p + n])
            p += max(n, 0)
            headers.append((hkey, hval))
        if p != body_end:
            raise RecordFormatError(
                f"Invalid record size: expected to read {length} bytes in record "
                f"payload, but instead read {p - pos} (record {index})"
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
    if pos != end:
        raise RecordFormatError("Incorrect declared batch size, records still remaining in file")
    return out


def records_section(h: BatchHeader, max_decompressed_bytes: int = DEFAULT_MAX_DECOMPRESSED_BYTES):
    """``(buffer, start, end)`` of the records of the batch ``h``, decompressed if need be."""
    start, end = h.position + RECORDS_OFFSET, h.position + h.size
    if h.compression == Compression.NONE:
        return h.buf, start, end
    data = decompress(h.compression, memoryview(h.buf)[start:end], magic=2, max_bytes=max_decompressed_bytes)
    return data, 0, len(data)


def batch_records(
    buf,
    position: int = 0,
    *,
    max_decompressed_bytes: int = DEFAULT_MAX_DECOMPRESSED_BYTES,
) -> list[Record]:
    """Decode every record of the v2 batch at ``position`` (decompressing if needed)."""
    h = BatchHeader(buf, position)
    buf, start, end = records_section(h, max_decompressed_bytes)
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


BUILD_SPILL = 1 << 20  # BatchBuilder: past this many record bytes, compress as the records come


class BatchBuilder:
    """One v2 batch written record by record (``append``, then ``build``), in bounded memory: the
    records are encoded as they come and, past ``spill`` bytes of them, compressed as they go
    (smaller batches are compressed in one call, as they always were, so they come out the same).
    ``size`` says how large the batch is so far (a lower bound until it is built, when compressed),
    so a caller can give up on a batch that will be too large before it is.

    Keywords (by name only) described at ``build_batch``, which passes them here; ``append`` takes
    absolute offsets.
    """

    def __init__(
        self,
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
        spill: int = BUILD_SPILL,
    ):
        self.base_offset = base_offset
        self.codec = Compression(compression)
        self.timestamp_type = timestamp_type
        self.log_append_time = log_append_time
        self.producer_id, self.producer_epoch, self.base_sequence = producer_id, producer_epoch, base_sequence
        self.is_transactional, self.is_control = is_transactional, is_control
        self.partition_leader_epoch = partition_leader_epoch
        self.delete_horizon_ms = delete_horizon_ms
        self.count = 0
        self.base_timestamp: int | None = None
        self.max_timestamp = NO_TIMESTAMP
        self.last_offset = base_offset
        self._records = SpillingPayload(self.codec, magic=2, snappy_framing=snappy_framing, spill=spill)

    def append(self, offset: int, timestamp: int, key, value, headers=()) -> None:
        if self.base_timestamp is None:
            self.base_timestamp = timestamp if self.delete_horizon_ms is None else self.delete_horizon_ms
        record = encode_record(offset - self.base_offset, timestamp - self.base_timestamp, key, value,
                               headers or ())
        self.count += 1
        self.last_offset = offset
        if timestamp > self.max_timestamp:
            self.max_timestamp = timestamp
        self._records.add(record)

    @property
    def size(self) -> int:
        """The batch's size so far: exact uncompressed, a lower bound compressed."""
        records = self._records
        return HEADER_SIZE + (records.raw_size if self.codec == Compression.NONE else records.out_size)

    def build(self) -> bytes:
        if not self.count:
            raise ValueError("a v2 batch holds at least one record")
        payload = self._records.take()
        max_ts = self.max_timestamp
        attrs = int(self.codec)
        if self.timestamp_type == TimestampType.LOG_APPEND_TIME:
            attrs |= TIMESTAMP_TYPE_MASK
            max_ts = self.log_append_time
        if self.is_transactional:
            attrs |= TRANSACTIONAL_MASK
        if self.is_control:
            attrs |= CONTROL_MASK
        if self.delete_horizon_ms is not None:
            attrs |= DELETE_HORIZON_MASK
        buf = bytearray(HEADER_SIZE + len(payload))
        HEADER.pack_into(
            buf,
            0,
            self.base_offset,
            len(buf) - 12,
            self.partition_leader_epoch,
            2,
            0,
            attrs,
            self.last_offset - self.base_offset,
            self.base_timestamp,
            max_ts,
            self.producer_id,
            self.producer_epoch,
            self.base_sequence,
            self.count,
        )
        buf[HEADER_SIZE:] = payload
        _U32.pack_into(buf, CRC_OFFSET, crc32c.crc32c(memoryview(buf)[ATTRIBUTES_OFFSET:]))
        return bytes(buf)


def build_batch(records: Iterable, **options) -> bytes:
    """Encode one v2 batch: ``BatchBuilder(**options)`` over ``records``.

    ``records`` yields ``(offset, timestamp, key, value, headers)`` tuples or ``Record`` objects;
    offsets are absolute and become deltas from ``base_offset``. The options, by name only, are
    ``BatchBuilder``'s:

    - ``base_offset`` (0); ``partition_leader_epoch`` (``NO_PARTITION_LEADER_EPOCH``);
    - ``compression`` (``Compression.NONE``), ``snappy_framing`` (``"xerial"``), ``spill``
      (``BUILD_SPILL``: record bytes past which they are compressed as they come);
    - ``timestamp_type`` (``CREATE_TIME``), ``log_append_time`` (``NO_TIMESTAMP``): with
      ``LOG_APPEND_TIME`` the header's maxTimestamp is ``log_append_time`` (records keep their own
      deltas, as Kafka's builder does);
    - ``producer_id``, ``producer_epoch``, ``base_sequence`` (none), ``is_transactional``,
      ``is_control`` (False);
    - ``delete_horizon_ms`` (None; set: the base timestamp, and the attribute bit).
    """
    builder = BatchBuilder(**options)
    for r in records:
        if isinstance(r, Record):
            builder.append(r.offset, r.timestamp, r.key, r.value, r.headers)
        else:
            offset, ts, key, value, headers = r
            builder.append(offset, ts, key, value, headers)
    return builder.build()


def iter_batch_records(buf, position: int = 0, **kw) -> Iterator[Record]:
    yield from batch_records(buf, position, **kw)
