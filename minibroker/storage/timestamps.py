"""Record-level answer for ListOffsets by timestamp, once the time index found the entry.

Inside a v2 batch the first record whose timestamp reaches the target is found by walking the
record length/timestamp/offset varints (decompressing the records block when the batch is
compressed). Rare paths (v0/v1 compressed wrappers) answer at entry precision: the wrapper's
offset and max timestamp.
"""

from __future__ import annotations

import os
import struct

from minibroker.records.framing import V2_HEADER_SIZE, EntryInfo

__all__ = ["record_at_or_after"]

_V2_FIELDS = struct.Struct(">hiqq")  # attributes, lastOffsetDelta, baseTimestamp, maxTimestamp (at 21)


def _varint(buf, pos: int) -> tuple[int, int]:
    shift = result = 0
    while True:
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return (result >> 1) ^ -(result & 1), pos
        shift += 7
        if shift > 63:
            raise ValueError("varint too long")


def _decompress(codec: int, data: bytes) -> bytes:
    if codec == 1:
        import gzip

        return gzip.decompress(data)
    if codec == 2:
        import snappy

        if data[:8] == b"\x82SNAPPY\x00":  # xerial framing: header, then int32-length blocks
            out, pos = [], 16
            while pos + 4 <= len(data):
                (n,) = struct.unpack_from(">i", data, pos)
                out.append(snappy.uncompress(data[pos + 4:pos + 4 + n]))
                pos += 4 + n
            return b"".join(out)
        return snappy.uncompress(data)
    if codec == 3:
        import lz4.frame

        return lz4.frame.decompress(data)
    if codec == 4:
        import zstandard

        return zstandard.ZstdDecompressor().decompressobj().decompress(data)
    raise ValueError(f"unknown codec {codec}")


def record_at_or_after(segment, info: EntryInfo, timestamp: int, min_offset: int) -> tuple[int, int] | None:
    """(offset, timestamp) of the first record of entry ``info`` with timestamp >= ``timestamp`` and
    offset >= ``min_offset``; None if the entry holds none."""
    if info.magic != 2:
        if info.max_timestamp >= timestamp and info.last_offset >= min_offset:
            return info.last_offset if info.record_count == 1 else max(info.base_offset, min_offset), \
                info.max_timestamp
        return None
    data = os.pread(segment.file.fileno(), info.size, info.position)
    attributes, _last_delta, base_ts, max_ts = _V2_FIELDS.unpack_from(data, 21)
    if attributes & 0x08:  # LogAppendTime: every record carries the batch's max timestamp
        return (max(info.base_offset, min_offset), max_ts) if max_ts >= timestamp else None
    records = data[V2_HEADER_SIZE:]
    codec = attributes & 0x07
    try:
        if codec:
            records = _decompress(codec, records)
        pos = 0
        for _ in range(info.record_count):
            length, body = _varint(records, pos)
            end = body + length
            body += 1  # attributes
            ts_delta, body = _varint(records, body)
            offset_delta, body = _varint(records, body)
            offset, ts = info.base_offset + offset_delta, base_ts + ts_delta
            if ts >= timestamp and offset >= min_offset:
                return offset, ts
            pos = end
        return None
    except Exception:  # undecodable records: answer at batch precision
        pass
    if max_ts >= timestamp and info.last_offset >= min_offset:
        return max(info.base_offset, min_offset), max_ts
    return None
