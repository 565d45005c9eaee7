"""Helpers for storage tests: build real record batches and append them the way Produce will.

A module of its own, not conftest.py: test modules import these by name, and ``from conftest import``
finds whichever conftest module was imported last (tests/records/conftest.py when both directories run).
"""

from __future__ import annotations

import os
import struct
import sys
import warnings

import crc32c
import pytest

with warnings.catch_warnings():  # kafka-python's import trips a DeprecationWarning on 3.11
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka.record.memory_records import MemoryRecordsBuilder

from minibroker.records.framing import scan_entries
from minibroker.storage.topic_config import effective_topic_config


def _zigzag(n: int) -> bytes:
    n = (n << 1) ^ (n >> 63)
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def v2_batch(base_offset: int, timestamps: list[int], value_size: int = 20) -> bytes:
    """An uncompressed v2 batch with one record per timestamp (fast; no client library)."""
    base_ts = min(timestamps)
    records = bytearray()
    for delta, ts in enumerate(timestamps):
        body = b"\x00" + _zigzag(ts - base_ts) + _zigzag(delta) + _zigzag(-1) + \
            _zigzag(value_size) + bytes([delta & 0xFF]) * value_size + _zigzag(0)
        records += _zigzag(len(body)) + body
    after_crc = struct.pack(">hiqqqhii", 0, len(timestamps) - 1, base_ts, max(timestamps), -1, -1, -1,
                            len(timestamps)) + bytes(records)
    crc = crc32c.crc32c(after_crc)
    body = struct.pack(">ibI", 0, 2, crc) + after_crc
    return struct.pack(">qi", base_offset, len(body)) + body


def client_batch(base_offset: int, timestamps: list[int], *, magic: int = 2, codec: int = 0,
                 value: bytes = b"value") -> bytes:
    """Entries built by kafka-python (v0/v1 give one entry per message when uncompressed)."""
    builder = MemoryRecordsBuilder(magic, codec, 1 << 20, offset=0)
    for i, ts in enumerate(timestamps):
        builder.append(ts if magic else None, b"key%d" % i, value)
    builder.close()
    buf = bytearray(builder.buffer())
    if magic == 2:
        struct.pack_into(">q", buf, 0, base_offset)
    else:  # rewrite each entry's offset (uncompressed: one message each; compressed: wrapper = last)
        pos, i, entries = 0, 0, list(scan_entries(bytes(buf)))
        for e in entries:
            if codec == 0:
                struct.pack_into(">q", buf, e.position, base_offset + i)
                i += 1
            else:
                struct.pack_into(">q", buf, e.position, base_offset + len(timestamps) - 1)
        del pos
    return bytes(buf)


def append(log, data: bytes, record_count: int | None = None,
           offset_of_max: int | None = None) -> tuple[int, int]:
    """Append ``data`` (offsets already assigned) computing what Produce would pass."""
    entries = list(scan_entries(data))
    first = entries[0].base_offset
    if entries[0].record_count < 0 and entries[0].magic < 2:
        first = log.log_end_offset
    last = entries[-1].last_offset
    best = max(entries, key=lambda e: e.max_timestamp)
    count = record_count if record_count is not None else sum(max(e.record_count, 1) for e in entries)
    log.append(data, first_offset=first, last_offset=last, max_timestamp=best.max_timestamp,
               offset_of_max_timestamp=best.last_offset if offset_of_max is None else offset_of_max,
               record_count=count)
    return first, last


def append_v2(log, timestamps: list[int], value_size: int = 20) -> tuple[int, int]:
    first = log.log_end_offset
    return append(log, v2_batch(first, timestamps, value_size),
                  offset_of_max=first + timestamps.index(max(timestamps)))


def config(**overrides) -> dict:
    """Effective topic config with small segments unless overridden (keys with dots as '_')."""
    base = {"segment.bytes": 4096, "index.interval.bytes": 256, "segment.index.bytes": 1024}
    base.update({k.replace("_", "."): v for k, v in overrides.items()})
    return effective_topic_config({}, base)


linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="counts /proc/self/fd")


def open_descriptors(under: str) -> dict[str, int]:
    """This process's open descriptors on ``under`` or files below it, by target (maps'
    duplicates included): {path: count}. Linux only."""
    real = os.path.realpath(under)
    found: dict[str, int] = {}
    for name in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{name}")
        except OSError:  # closed while listed (the listing's own descriptor)
            continue
        if target == real or target.startswith(real + os.sep):
            found[target] = found.get(target, 0) + 1
    return found
