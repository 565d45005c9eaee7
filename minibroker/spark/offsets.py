"""Offset ranges: planning batches and micro-batches from start/end offsets (pure Python).

An offset range is ``[from_offset, until_offset)`` of one Kafka partition. Planning mirrors what Spark's
Kafka connector does: one Spark input partition per Kafka partition range, large ranges split further
when ``minPartitions`` asks for more tasks than there are Kafka partitions, and ``maxOffsetsPerTrigger``
shared among partitions in proportion to how much each has waiting.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

TopicPartition = tuple[str, int]


@dataclass(frozen=True)
class OffsetRange:
    topic: str
    partition: int
    from_offset: int
    until_offset: int

    @property
    def size(self) -> int:
        return max(0, self.until_offset - self.from_offset)


def split_ranges(ranges: list[OffsetRange], min_partitions: int | None = None,
                 max_records_per_partition: int | None = None) -> list[OffsetRange]:
    """Drop empty ranges; split the rest for ``minPartitions`` / ``maxRecordsPerPartition``.

    With ``min_partitions`` larger than the number of non-empty ranges, each range gets a share of
    the wanted task count in proportion to its size (at least one); ``max_records_per_partition``
    caps each piece's size. Pieces are contiguous and cover each range exactly once.
    """
    ranges = [r for r in ranges if r.size > 0]
    total = sum(r.size for r in ranges)
    counts = [1] * len(ranges)
    if min_partitions and len(ranges) < min_partitions and total > 0:
        # Largest remainder: shares in proportion to size, at least one each, summing to at least
        # min_partitions (unless there are fewer records than that).
        shares = [r.size * min_partitions / total for r in ranges]
        counts = [max(1, min(r.size, math.floor(s))) for r, s in zip(ranges, shares, strict=True)]
        order = sorted(range(len(ranges)), key=lambda i: shares[i] - math.floor(shares[i]), reverse=True)
        while sum(counts) < min_partitions and any(counts[i] < ranges[i].size for i in order):
            for i in order:
                if sum(counts) >= min_partitions:
                    break
                if counts[i] < ranges[i].size:
                    counts[i] += 1
    out: list[OffsetRange] = []
    for r, parts in zip(ranges, counts, strict=True):
        if max_records_per_partition:
            parts = max(parts, math.ceil(r.size / max_records_per_partition))
        parts = min(parts, r.size)
        if parts <= 1:
            out.append(r)
            continue
        step, extra = divmod(r.size, parts)
        start = r.from_offset
        for i in range(parts):
            end = start + step + (1 if i < extra else 0)
            out.append(OffsetRange(r.topic, r.partition, start, end))
            start = end
    return out


def rate_limit(limit: int, start: Mapping[TopicPartition, int],
               latest: Mapping[TopicPartition, int]) -> dict[TopicPartition, int]:
    """End offsets reading at most about ``limit`` records beyond ``start``, shared in proportion.

    Each partition with records waiting gets ``limit * waiting / total`` of them, rounded down but at
    least one, so every partition advances; a partition never goes past its latest offset.
    """
    waiting = {tp: max(0, latest[tp] - start.get(tp, latest[tp])) for tp in latest}
    total = sum(waiting.values())
    if total <= limit:
        return dict(latest)
    out = {}
    for tp, end in latest.items():
        begin = start.get(tp, end)
        size = waiting[tp]
        if size == 0:
            out[tp] = end
            continue
        share = limit * size / total
        take = math.ceil(share) if share < 1 else math.floor(share)
        out[tp] = min(end, begin + take)
    return out
