"""Walk a buffer of mixed-magic entries (v2 batches, v0/v1 messages and wrappers) as batches.

Entries are found through the shared length (offset 8) and magic (offset 16) fields; a trailing
partial entry ends the walk cleanly (fetch responses and torn log tails have one).
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Iterator
from dataclasses import dataclass

import crc32c

from minibroker.records import legacy, v2
from minibroker.records.codecs import DEFAULT_MAX_DECOMPRESSED_BYTES, Compression
from minibroker.records.framing import LOG_OVERHEAD, MAGIC_OFFSET
from minibroker.records.record import (
    NO_PARTITION_LEADER_EPOCH,
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    NO_SEQUENCE,
    NO_TIMESTAMP,
    Record,
    TimestampType,
)

_OVERHEAD = struct.Struct(">qi")


class EntryFormatError(ValueError):
    """An entry's size or magic cannot be right: the buffer is corrupt from ``position`` on."""

    def __init__(self, message: str, position: int):
        super().__init__(message)
        self.position = position


@dataclass(slots=True)
class Batch:
    """One entry of a log buffer, whatever its magic, with the fields kafka-dump-log prints.

    For a v0/v1 wrapper ``base_offset`` and ``count`` are unknown without decompressing
    (``base_offset`` = ``last_offset``, ``count`` = None); ``records()`` decompresses.
    """

    buf: object
    position: int
    size: int
    magic: int
    base_offset: int
    last_offset: int
    count: int | None
    partition_leader_epoch: int
    crc: int
    is_valid: bool
    attributes: int
    compression: int
    timestamp_type: TimestampType
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    last_sequence: int
    is_transactional: bool
    is_control: bool

    def records(self, *, max_decompressed_bytes: int = DEFAULT_MAX_DECOMPRESSED_BYTES) -> list[Record]:
        if self.magic == 2:
            return v2.batch_records(self.buf, self.position, max_decompressed_bytes=max_decompressed_bytes)
        return legacy.message_records(
            memoryview(self.buf)[: self.position + self.size],
            self.position,
            max_decompressed_bytes=max_decompressed_bytes,
        )

    @property
    def compression_name(self) -> str:
        try:
            return str(Compression(self.compression))
        except ValueError:
            return f"unknown({self.compression})"


def batch_at(buf, position: int) -> Batch:
    """The whole entry at ``position`` (the caller knows it is complete)."""
    offset, length = _OVERHEAD.unpack_from(buf, position)
    size = LOG_OVERHEAD + length
    magic = buf[position + MAGIC_OFFSET]
    mv = memoryview(buf)
    if magic == 2:
        (_, _, epoch, _, crc, attrs, last_delta, _base_ts, max_ts, pid, pepoch, base_seq, count) = (
            v2.HEADER.unpack_from(buf, position)
        )
        valid = crc32c.crc32c(mv[position + v2.ATTRIBUTES_OFFSET : position + size]) == crc
        ts_type = (
            TimestampType.LOG_APPEND_TIME if attrs & v2.TIMESTAMP_TYPE_MASK else TimestampType.CREATE_TIME
        )
        last_seq = NO_SEQUENCE if base_seq == NO_SEQUENCE else v2.increment_sequence(base_seq, last_delta)
        return Batch(
            buf,
            position,
            size,
            2,
            offset,
            offset + last_delta,
            count,
            epoch,
            crc,
            valid,
            attrs,
            attrs & v2.COMPRESSION_MASK,
            ts_type,
            max_ts,
            pid,
            pepoch,
            base_seq,
            last_seq,
            bool(attrs & v2.TRANSACTIONAL_MASK),
            bool(attrs & v2.CONTROL_MASK),
        )
    crc = struct.unpack_from(">I", buf, position + legacy.CRC_OFFSET)[0]
    attrs = buf[position + legacy.ATTRIBUTES_OFFSET]
    max_ts = NO_TIMESTAMP
    ts_type = TimestampType.NO_TIMESTAMP_TYPE
    if magic == 1:
        max_ts = struct.unpack_from(">q", buf, position + legacy.TIMESTAMP_OFFSET)[0]
        ts_type = (
            TimestampType.LOG_APPEND_TIME if attrs & legacy.TIMESTAMP_TYPE_MASK else TimestampType.CREATE_TIME
        )
    valid = zlib.crc32(mv[position + MAGIC_OFFSET : position + size]) == crc
    try:
        legacy.parse_message(buf, position, position + size)
    except legacy.LegacyFormatError:
        valid = False
    codec = attrs & legacy.COMPRESSION_MASK
    return Batch(
        buf,
        position,
        size,
        magic,
        offset,
        offset,
        1 if codec == 0 else None,
        NO_PARTITION_LEADER_EPOCH,
        crc,
        valid,
        attrs,
        codec,
        ts_type,
        max_ts,
        NO_PRODUCER_ID,
        NO_PRODUCER_EPOCH,
        NO_SEQUENCE,
        NO_SEQUENCE,
        False,
        False,
    )


def iter_batches(data, start: int = 0) -> Iterator[Batch]:
    """Every whole entry of ``data`` from ``start``; stops at a trailing partial entry.

    Raises ``EntryFormatError`` at an entry whose size is below its format's minimum or whose
    magic is unknown (nothing after it can be trusted).
    """
    end = len(data)
    pos = start
    while end - pos >= LOG_OVERHEAD:
        length = _OVERHEAD.unpack_from(data, pos)[1]
        if length < legacy.RECORD_OVERHEAD_V0:
            raise EntryFormatError(
                f"Record size {length} is less than the minimum record overhead "
                f"({legacy.RECORD_OVERHEAD_V0})",
                pos,
            )
        if end - pos <= MAGIC_OFFSET:
            return
        magic = data[pos + MAGIC_OFFSET]
        minimum = {
            0: legacy.RECORD_OVERHEAD_V0,
            1: legacy.RECORD_OVERHEAD_V1,
            2: v2.HEADER_SIZE - LOG_OVERHEAD,
        }
        if magic not in minimum:
            raise EntryFormatError(f"Invalid magic found in record: {magic}", pos)
        if length < minimum[magic]:
            raise EntryFormatError(f"Record size {length} is below the minimum for magic {magic}", pos)
        if pos + LOG_OVERHEAD + length > end:
            return
        yield batch_at(data, pos)
        pos += LOG_OVERHEAD + length


def iter_records(
    data, *, skip_control: bool = False, max_decompressed_bytes: int = DEFAULT_MAX_DECOMPRESSED_BYTES
) -> Iterator[Record]:
    """Every record of every whole entry in ``data``, decoded (decompressing wrappers and batches)."""
    for batch in iter_batches(data):
        if skip_control and batch.is_control:
            continue
        yield from batch.records(max_decompressed_bytes=max_decompressed_bytes)
