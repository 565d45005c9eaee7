"""Record-level answers for ListOffsets by timestamp and for its max-timestamp query (-3).

The indexes and the segments' running maxima know entries (batches), not records: the time index
holds, as Kafka's does, the last offset of the batch that carries a max timestamp. The record is
found by decoding that one batch with the record layer (decompressing it when needed); both are
rare requests, so the one decoder serves.

- by timestamp: inside a v2 batch, the first record whose timestamp reaches the target; v0/v1
  entries answer at entry precision (the wrapper's offset and max timestamp);
- max timestamp: the first record of the entry whose timestamp is the entry's max timestamp
  (Kafka's ``RecordBatch.offsetOfMaxTimestamp``, KAFKA-16310), v0/v1 compressed wrappers
  included; a v0 entry has no timestamps and no answer.
"""

from __future__ import annotations

import os

from minibroker.records.framing import EntryInfo

__all__ = ["offset_of_max_timestamp", "record_at_or_after"]


def record_at_or_after(segment, info: EntryInfo, timestamp: int, min_offset: int) -> tuple[int, int] | None:
    """(offset, timestamp) of the first record of entry ``info`` with timestamp >= ``timestamp`` and
    offset >= ``min_offset``; None if the entry holds none."""
    if info.magic != 2:
        if info.max_timestamp >= timestamp and info.last_offset >= min_offset:
            return info.last_offset if info.record_count == 1 else max(info.base_offset, min_offset), \
                info.max_timestamp
        return None
    from minibroker.records.v2 import batch_records  # a rare path: the record layer loads on first use

    data = os.pread(segment.file.fileno(), info.size, info.position)
    try:
        for record in batch_records(data):  # LogAppendTime records carry the batch's max timestamp
            if record.timestamp >= timestamp and record.offset >= min_offset:
                return record.offset, record.timestamp
        return None
    except Exception:  # undecodable records: answer at batch precision
        pass
    if info.max_timestamp >= timestamp and info.last_offset >= min_offset:
        return max(info.base_offset, min_offset), info.max_timestamp
    return None


def offset_of_max_timestamp(segment, info: EntryInfo) -> int | None:
    """Offset of the first record of entry ``info`` whose timestamp is the entry's max timestamp;
    None for a v0 entry (no timestamps). An entry the record layer cannot decode answers with its
    last offset, the batch precision the indexes have."""
    if info.magic == 0:
        return None
    if info.magic == 1 and info.record_count == 1:
        return info.last_offset  # an uncompressed v1 message is its own record
    data = os.pread(segment.file.fileno(), info.size, info.position)
    try:
        if info.magic == 2:
            from minibroker.records.v2 import batch_records  # a rare path: loaded on first use

            records = batch_records(data)
        else:
            from minibroker.records.legacy import message_records

            records = message_records(data)
    except Exception:  # undecodable records: answer at batch precision
        return info.last_offset
    for record in records:  # LogAppendTime records carry the batch's max timestamp
        if record.timestamp == info.max_timestamp:
            return record.offset
    return info.last_offset
