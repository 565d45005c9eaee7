"""The leader epochs of one partition and the offset each started at, kept in ``leader-epoch-checkpoint``
(Kafka's ``LeaderEpochFileCache``).

Contract, as Kafka's: entries rise in both epoch and start offset; assigning an epoch removes the entries
it contradicts (an epoch at or above it, or a start at or after its start); the log's truncations are
mirrored (``truncate_from_end``: entries starting at or after the new log end go;
``truncate_from_start``: entries wholly below the new log start go and the last of them moves up to
it). Assignments are written to the checkpoint at once (fsynced), truncations by the owner when it
likes: a checkpoint left behind by a crash is corrected by the same truncations when the log is loaded.

Owner: the ``PartitionLog`` holding it (the event loop); not thread-safe.
"""

from __future__ import annotations

import bisect
import logging

from minibroker.storage import checkpoints

__all__ = ["LeaderEpochCache", "UNDEFINED"]

log = logging.getLogger(__name__)

UNDEFINED = -1  # Kafka's UNDEFINED_EPOCH and UNDEFINED_EPOCH_OFFSET


class LeaderEpochCache:
    """(epoch, start offset) entries of one partition, oldest first. See the module docstring."""

    def __init__(self, path: str, entries: list[tuple[int, int]]):
        self.path = path
        self._entries: list[tuple[int, int]] = []
        for epoch, start in entries:
            self._put(epoch, start)

    @property
    def entries(self) -> list[tuple[int, int]]:
        return list(self._entries)

    @property
    def latest_epoch(self) -> int:
        """The latest epoch, ``UNDEFINED`` when there is none."""
        return self._entries[-1][0] if self._entries else UNDEFINED

    def __bool__(self) -> bool:
        return bool(self._entries)

    def write(self, *, sync: bool = True) -> None:
        checkpoints.write_epoch_checkpoint(self.path, self._entries, sync=sync)

    def assign(self, epoch: int, start_offset: int) -> bool:
        """Record that ``epoch`` starts at ``start_offset`` (nothing to do when it is the latest epoch
        already, from no later start); True when the entries changed. Not written: see ``write``."""
        if epoch < 0 or start_offset < 0:
            raise ValueError(f"invalid leader epoch entry ({epoch}, {start_offset})")
        if self._entries:
            latest_epoch, latest_start = self._entries[-1]
            if epoch == latest_epoch and start_offset >= latest_start:
                return False
        self._put(epoch, start_offset)
        return True

    def _put(self, epoch: int, start: int) -> None:
        removed = []
        while self._entries and (self._entries[-1][0] >= epoch or self._entries[-1][1] >= start):
            removed.append(self._entries.pop())
        if len(removed) > 1 or (removed and removed[0][1] != start):
            log.warning("%s: leader epoch %d from offset %d replaces %s", self.path, epoch, start,
                        removed[::-1])
        self._entries.append((epoch, start))

    def truncate_from_end(self, end_offset: int) -> bool:
        """The log now ends at ``end_offset``: entries starting at or after it go. True when any did."""
        before = len(self._entries)
        while self._entries and self._entries[-1][1] >= end_offset:
            self._entries.pop()
        return len(self._entries) != before

    def truncate_from_start(self, start_offset: int) -> bool:
        """The log now starts at ``start_offset``: the entries starting at or below it give way to the
        last of them, moved to ``start_offset``. True when the entries changed."""
        below = bisect.bisect_right(self._entries, start_offset, key=lambda e: e[1])
        if not below or (below == 1 and self._entries[0][1] == start_offset):
            return False
        self._entries[:below] = [(self._entries[below - 1][0], start_offset)]
        return True

    def clear(self) -> bool:
        had = bool(self._entries)
        self._entries = []
        return had

    def end_offset_for(self, requested_epoch: int, log_end_offset: int) -> tuple[int, int]:
        """(epoch, end offset) for OffsetForLeaderEpoch, as Kafka's ``endOffsetFor``: the latest epoch
        ends at the log end offset; an older one where the next known epoch starts, answered with the
        largest known epoch at or below it (the requested one when none is); an unknown newer epoch,
        or -1, gives (-1, -1)."""
        if requested_epoch == UNDEFINED:
            return UNDEFINED, UNDEFINED
        if self._entries and self._entries[-1][0] == requested_epoch:
            return requested_epoch, log_end_offset
        higher = bisect.bisect_right(self._entries, requested_epoch, key=lambda e: e[0])
        if higher == len(self._entries):
            return UNDEFINED, UNDEFINED
        floor_epoch = self._entries[higher - 1][0] if higher else requested_epoch
        return floor_epoch, self._entries[higher][1]

    def epoch_for_offset(self, offset: int) -> int:
        """The epoch of the entry holding ``offset`` (the last starting at or below it), ``UNDEFINED``
        when the offset is below every entry."""
        at = bisect.bisect_right(self._entries, offset, key=lambda e: e[1])
        return self._entries[at - 1][0] if at else UNDEFINED

    def __repr__(self) -> str:
        return f"LeaderEpochCache({self._entries})"
