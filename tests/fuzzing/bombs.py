"""Decompression bombs (issue 14, item 2): v2 batches a few KB to ~1 MB compressed that inflate to
hundreds of MiB or to millions of records. Each is compressed as a stream, so that building one
never holds it whole either. Used by tests/test_decompression_bombs.py,
tests/records/test_streaming.py and scripts/bench_bombs.py.

- ``zero_records``: records whose values are zero bytes, of the given sizes;
- ``empty_records``: as many empty records (offsets 0..n-1) as fit in a compressed size;
- ``same_records``: identical empty records, every offsetDelta 0 (the batch must be rebuilt);
- ``build_bomb``: the bench's shapes (``SHAPES``) at their sizes, per codec;
- ``batch_around``: the v2 batch around an already compressed records section.
"""

from __future__ import annotations

import struct
import time

import crc32c

from minibroker.records import Compression, v2
from minibroker.records.codecs import StreamCompressor
from minibroker.records.varint import encode_varint

MiB = 1 << 20
CODECS = [Compression.GZIP, Compression.SNAPPY, Compression.LZ4, Compression.ZSTD]
SHAPES = ("one-record", "many-records", "walk", "rebuild")


def batch_around(payload: bytes, count: int, codec: Compression, *, timestamp: int | None = None) -> bytes:
    """A v2 batch around an already compressed records section of ``count`` records, CRC correct:
    base offset 0, no producer, base and max timestamp ``timestamp`` (now when None)."""
    ts = int(time.time() * 1000) if timestamp is None else timestamp
    buf = bytearray(v2.HEADER_SIZE + len(payload))
    v2.HEADER.pack_into(buf, 0, 0, len(buf) - 12, -1, 2, 0, int(codec), count - 1, ts, ts, -1, -1, -1, count)
    buf[v2.HEADER_SIZE :] = payload
    struct.pack_into(">I", buf, v2.CRC_OFFSET, crc32c.crc32c(bytes(buf[v2.ATTRIBUTES_OFFSET :])))
    return bytes(buf)


def zero_records(codec: Compression, sizes, *, timestamp: int | None = None) -> bytes:
    """One record per item of ``sizes``, its value that many zero bytes (null key, no headers,
    offsets 0..n-1), fed to the compressor a MiB at a time."""
    out = StreamCompressor(codec)
    parts = []
    zeros = bytes(MiB)
    for i, size in enumerate(sizes):
        body = b"\x00" + encode_varint(0) + encode_varint(i) + b"\x01" + encode_varint(size)
        parts.append(out.compress(encode_varint(len(body) + size + 1) + body))
        for start in range(0, size, MiB):
            parts.append(out.compress(zeros[: min(MiB, size - start)]))
        parts.append(out.compress(b"\x00"))
    parts.append(out.flush())
    return batch_around(b"".join(parts), len(sizes), codec, timestamp=timestamp)


def empty_records(codec: Compression, most_bytes: int, *, timestamp: int | None = None) -> bytes:
    """Records with null key and value (7-9 bytes each: the most records bytes can hold), offsets
    0..n-1, as many as fit in ``most_bytes`` compressed: a batch whose walk is the work."""
    out = StreamCompressor(codec)
    parts, size, n, step = [], 0, 0, 4096
    while size < most_bytes:
        chunk = []
        for i in range(n, n + step):
            body = b"\x00\x00" + encode_varint(i) + b"\x01\x01\x00"
            chunk.append(encode_varint(len(body)) + body)
        n += step
        piece = out.compress(b"".join(chunk))
        parts.append(piece)
        size += len(piece)
    parts.append(out.flush())
    return batch_around(b"".join(parts), n, codec, timestamp=timestamp)


def same_records(codec: Compression, n: int, *, timestamp: int | None = None) -> bytes:
    """``n`` identical 7-byte records (rounded down to a multiple of 65536), every offsetDelta 0: a
    few KB compressed, and since the offsets are not 0..n-1 Kafka's rules rebuild the batch, record
    by record."""
    out = StreamCompressor(codec)
    block = b"\x0c\x00\x00\x00\x01\x01\x00" * (1 << 16)
    parts = [out.compress(block) for _ in range(n >> 16)]
    parts.append(out.flush())
    return batch_around(b"".join(parts), (n >> 16) << 16, codec, timestamp=timestamp)


def build_bomb(shape: str, codec: Compression, *, timestamp: int | None = None) -> bytes:
    """One of ``SHAPES``:

    - ``one-record``: 200 MiB of zeros as one record (snappy, which cannot expand more than ~22
      times: 20 MiB, ~1 MB compressed, what max.message.bytes lets through);
    - ``many-records``: the same zeros as records of 1 MiB less 64 bytes, each one a record a topic
      takes: a valid batch, decompressed and walked to its end;
    - ``walk``: ``empty_records`` filling 900 KB compressed (~230,000 to ~1.2 million records);
    - ``rebuild``: ``same_records``, 4 Mi of them.
    """
    total = 20 * MiB if codec == Compression.SNAPPY else 200 * MiB
    if shape == "one-record":
        return zero_records(codec, [total], timestamp=timestamp)
    if shape == "many-records":
        return zero_records(codec, [MiB - 64] * (total // MiB), timestamp=timestamp)
    if shape == "walk":
        return empty_records(codec, 900_000, timestamp=timestamp)
    if shape == "rebuild":
        return same_records(codec, 4 << 20, timestamp=timestamp)
    raise ValueError(shape)
