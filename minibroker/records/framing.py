"""Batch framing shared by every magic: walk a buffer of batches without decoding records.

Every entry in a Kafka log (a v0/v1 message or wrapper, or a v2 record batch) starts with
the same 12 bytes of log overhead: an int64 offset and an int32 size of what follows.
The magic byte sits at position 16 in all three formats, so a reader can step from entry
to entry and decide per entry how to read the rest. Sans-I/O: bytes in, facts out.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Iterator
from typing import NamedTuple

LOG_OVERHEAD = 12  # int64 offset + int32 size
MAGIC_OFFSET = 16
V2_HEADER_SIZE = 61
V2_CRC_OFFSET = 17
V2_ATTRIBUTES_OFFSET = 21
V0_MIN_ENTRY = LOG_OVERHEAD + 14
V1_MIN_ENTRY = LOG_OVERHEAD + 22

# Attribute bits with the same meaning in every magic (v0/v1 int8, v2 int16): codec id and timestamp type
COMPRESSION_MASK = 0x07
TIMESTAMP_TYPE_MASK = 0x08
# Big-endian ints, as every format writes them
I64 = struct.Struct(">q")
I32 = struct.Struct(">i")
U32 = struct.Struct(">I")

# v2 batch header, after the 12 bytes of log overhead:
# partitionLeaderEpoch, magic, crc, attributes, lastOffsetDelta, baseTimestamp, maxTimestamp,
# producerId, producerEpoch, baseSequence, recordCount
_V2_REST = struct.Struct(">ibIhiqqqhii")
_OVERHEAD = struct.Struct(">qi")
_LEGACY = struct.Struct(">Ibb")  # crc, magic, attributes
_LEGACY_TS = struct.Struct(">q")


class EntryInfo(NamedTuple):
    """What storage needs to know of one log entry (a v2 batch or a v0/v1 message/wrapper)."""

    position: int  # where the entry starts in the buffer
    size: int  # whole entry, log overhead included
    magic: int
    base_offset: int  # v0/v1: unknown without decompressing a wrapper, reported as last_offset
    last_offset: int
    max_timestamp: int  # -1 when the format has none
    record_count: int  # v0/v1 wrappers: -1 (unknown without decompressing)


def entry_size_at(buf, position: int) -> int | None:
    """Size of the entry starting at ``position``, or None if the 12-byte overhead is incomplete."""
    if len(buf) - position < LOG_OVERHEAD:
        return None
    return LOG_OVERHEAD + _OVERHEAD.unpack_from(buf, position)[1]


def read_entry(buf, position: int) -> EntryInfo:
    """Read the header of the complete entry at ``position`` (caller checked it is whole)."""
    offset, length = _OVERHEAD.unpack_from(buf, position)
    magic = buf[position + MAGIC_OFFSET]
    size = LOG_OVERHEAD + length
    if magic == 2:
        (_epoch, _magic, _crc, _attrs, last_delta, _base_ts, max_ts,
         _pid, _pepoch, _seq, count) = _V2_REST.unpack_from(buf, position + LOG_OVERHEAD)
        return EntryInfo(position, size, 2, offset, offset + last_delta, max_ts, count)
    max_ts = -1
    if magic == 1:
        max_ts = _LEGACY_TS.unpack_from(buf, position + LOG_OVERHEAD + 6)[0]
    attrs = buf[position + LOG_OVERHEAD + 5]
    count = 1 if attrs & 0x07 == 0 else -1
    return EntryInfo(position, size, magic, offset, offset, max_ts, count)


def scan_entries(buf, start: int = 0, end: int | None = None) -> Iterator[EntryInfo]:
    """Yield every whole entry in ``buf[start:end]``; stop cleanly at a trailing partial entry.

    Raises ValueError for a size field that cannot be right (smaller than the format's minimum);
    callers decide whether that means corruption (recovery truncates there) or bad input.
    """
    end = len(buf) if end is None else end
    position = start
    while end - position >= LOG_OVERHEAD:
        length = _OVERHEAD.unpack_from(buf, position)[1]
        size = LOG_OVERHEAD + length
        if length < 14:
            raise ValueError(f"entry at {position} declares size {length}, below any format's minimum")
        if position + size > end:
            return
        if end - position <= MAGIC_OFFSET:
            return
        magic = buf[position + MAGIC_OFFSET]
        if magic > 2 or (magic == 2 and size < V2_HEADER_SIZE) or (magic == 1 and size < V1_MIN_ENTRY):
            raise ValueError(f"entry at {position}: magic {magic} with size {size} is not a valid entry")
        yield read_entry(buf, position)
        position += size


def entry_crc_valid(buf, position: int, size: int) -> bool:
    """Check the stored checksum of one whole entry: CRC-32C for v2, CRC-32 for v0/v1."""
    mv = memoryview(buf)
    magic = mv[position + MAGIC_OFFSET]
    if magic == 2:
        stored = struct.unpack_from(">I", mv, position + V2_CRC_OFFSET)[0]
        from crc32c import crc32c  # deferred: the package costs ~10 ms to import, not needed to start

        return crc32c(mv[position + V2_ATTRIBUTES_OFFSET: position + size]) == stored
    stored = struct.unpack_from(">I", mv, position + LOG_OVERHEAD)[0]
    return zlib.crc32(mv[position + LOG_OVERHEAD + 4: position + size]) == stored
