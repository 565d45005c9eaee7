"""Record-level answer for ListOffsets by timestamp, once the time index found the entry.

Inside a v2 batch the first record whose timestamp reaches the target is found by decoding the
batch with the record layer (decompressing it when needed); a rare request, so the one decoder
serves. v0/v1 entries answer at entry precision: the wrapper's offset and max timestamp.
"""

from __future__ import annotations

import os

from minibroker.records.framing import EntryInfo

__all__ = ["record_at_or_after"]


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
