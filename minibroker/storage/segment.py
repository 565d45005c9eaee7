"""One log segment: ``<base>.log`` with its ``<base>.index``, ``<base>.timeindex`` and, once a
transaction is aborted in it, ``<base>.txnindex``.

Contract (as Apache Kafka's LogSegment): the ``.log`` is a concatenation of whole entries
(v2 batches or v0/v1 messages), offsets already assigned and strictly increasing, the first one
>= the base offset in the file name (20 digits, zero padded). Appends are sequential writes at the
end. Every time more than ``index.interval.bytes`` have been written since the last index entry,
the next entry gets an offset-index entry (its last offset -> its start position) and the time
index gets the max timestamp seen so far if that grew. A sealed segment's time index ends with
the segment's max timestamp.

Owner: the ``PartitionLog`` holding it; not thread-safe. The ``.log`` descriptor is a
``SegmentFile`` shared with ``FileRegion`` objects in flight: it is closed when the last holder
drops it, never under a region's feet.
"""

from __future__ import annotations

import errno
import logging
import mmap
import os
import struct
import time
from collections.abc import Iterator
from typing import NamedTuple

from minibroker.records.framing import (
    LOG_OVERHEAD,
    MAGIC_OFFSET,
    V2_HEADER_SIZE,
    EntryInfo,
    entry_crc_valid,
    entry_size_at,
    read_entry,
    scan_entries,
)
from minibroker.storage.index import CorruptIndexError, OffsetIndex, TimeIndex
from minibroker.storage.txn_index import TransactionIndex

__all__ = ["LogSegment", "SegmentFile", "RecoveryResult", "segment_file_name"]

log = logging.getLogger(__name__)

_INT32_MAX = 2**31 - 1
_SCAN_CHUNK = 16384
_FIRST_CHUNK = 8192
_OVERHEAD = struct.Struct(">qi")
_I32 = struct.Struct(">i")
_LEADER_EPOCH_AT = 12  # a v2 batch's partitionLeaderEpoch, after baseOffset and batchLength
_MIN_ENTRY = LOG_OVERHEAD + 14
_MAX_ENTRY_HEADER = V2_HEADER_SIZE


def segment_file_name(base_offset: int, suffix: str) -> str:
    return f"{base_offset:020d}{suffix}"


class SegmentFile:
    """An open ``.log`` descriptor; ``fileno()`` for sendfile. Closed when the last holder lets go."""

    __slots__ = ("_fd", "path", "__weakref__")

    def __init__(self, path: str, flags: int = os.O_RDWR | os.O_CREAT):
        self.path = path
        self._fd = os.open(path, flags, 0o644)

    def fileno(self) -> int:
        if self._fd < 0:
            raise ValueError(f"{self.path} is closed")
        return self._fd

    def close(self) -> None:
        fd, self._fd = self._fd, -1
        if fd >= 0:
            os.close(fd)

    def __del__(self) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"SegmentFile({self.path!r}, fd={self._fd})"


class RecoveryResult(NamedTuple):
    valid_bytes: int
    truncated_bytes: int
    entries: int
    reason: str | None  # why the tail was cut, None when nothing was
    # (leader epoch, offset) where the kept v2 batches raise their partition leader epoch
    epoch_starts: tuple[tuple[int, int], ...] = ()


class LogSegment:
    """A ``.log`` plus its offset and time indexes. See the module docstring for the contract."""

    def __init__(
        self,
        directory: str,
        base_offset: int,
        *,
        index_max_bytes: int,
        index_interval_bytes: int,
        active: bool,
        read_only: bool = False,
        clock=time.time,
        file_suffix: str = "",
    ):
        # file_suffix: "" for a live segment; the cleaner writes ".cleaned" ones (Kafka's swap protocol).
        self.directory = directory
        self.read_only = read_only  # a dir that cannot be written: indexes in memory, no appends
        self.base_offset = base_offset
        self.index_interval_bytes = index_interval_bytes
        self.log_path = os.path.join(directory, segment_file_name(base_offset, ".log" + file_suffix))
        index_path = os.path.join(directory, segment_file_name(base_offset, ".index" + file_suffix))
        time_index_path = os.path.join(directory, segment_file_name(base_offset, ".timeindex" + file_suffix))
        self.indexes_missing = not (os.path.exists(index_path) and os.path.exists(time_index_path))
        self.file: SegmentFile | None = SegmentFile(
            self.log_path, os.O_RDONLY if read_only else os.O_RDWR | os.O_CREAT
        )
        self.size = os.fstat(self.file.fileno()).st_size
        self.index = OffsetIndex(
            index_path,
            base_offset,
            index_max_bytes,
            writable=active,
            in_memory=read_only,
        )
        self.time_index = TimeIndex(
            time_index_path,
            base_offset,
            index_max_bytes,
            writable=active,
            in_memory=read_only,
        )
        txn_index_path = os.path.join(directory, segment_file_name(base_offset, ".txnindex" + file_suffix))
        self.txn_index = TransactionIndex(txn_index_path, base_offset, in_memory=read_only)
        # Set by recover(), which empties the txn index: the producer state replay refills it
        # (ReplicaManager, as Kafka's LogSegment.recover does with its producer state).
        self.txn_index_needs_rebuild = False
        self._index_max_bytes = index_max_bytes
        self.next_offset = base_offset  # last offset + 1
        self.max_timestamp = -1
        self.offset_of_max_timestamp = base_offset
        self.bytes_since_last_index_entry = 0
        self.first_batch_timestamp: int | None = None  # for segment.ms rolls; -1 when entries carry none
        self.created_ms = int(clock() * 1000)
        self.active = active
        self.flushed = True  # nothing written since the last fsync

    # ---- opening ------------------------------------------------------------------------------
    @classmethod
    def create(
        cls,
        directory: str,
        base_offset: int,
        *,
        index_max_bytes: int,
        index_interval_bytes: int,
        clock=time.time,
    ) -> LogSegment:
        for suffix in (".log", ".index", ".timeindex", ".txnindex"):
            path = os.path.join(directory, segment_file_name(base_offset, suffix))
            if os.path.exists(path):
                os.unlink(path)
        return cls(
            directory,
            base_offset,
            index_max_bytes=index_max_bytes,
            index_interval_bytes=index_interval_bytes,
            active=True,
            clock=clock,
        )

    def load_trusted(self) -> bool:
        """Open without re-reading the log: sanity-check the indexes (rebuilding a bad one) and find
        the next offset by scanning from the last index entry. False if the log tail does not end
        on an entry boundary (the caller should then ``recover``)."""
        if self.indexes_missing and self.size:
            log.warning("rebuilding the missing indexes of %s", self.log_path)
            return False
        try:
            return self._load_trusted()
        finally:  # the checks mapped the indexes; a segment nobody reads then holds no map
            self.index.unmap()
            self.time_index.unmap()

    def _load_trusted(self) -> bool:
        try:
            self.index.sanity_check(self.size)
            self._check_index_samples()
            last_pos = self.index.last_entry()[1]
            end, last_offset, count = last_pos, None, 0
            for info in self.iter_entries(last_pos):
                end = info.position + info.size
                last_offset = info.last_offset
                count += 1
            if end != self.size:
                return False
            self.next_offset = self.base_offset if last_offset is None else last_offset + 1
            self.time_index.sanity_check(self.next_offset)
        except CorruptIndexError as exc:
            log.warning("rebuilding indexes of %s: %s", self.log_path, exc)
            return False
        last = self.time_index.last_entry()
        if last is not None:
            self.max_timestamp, self.offset_of_max_timestamp = last
        elif self.size:
            # No time index entry: the segment is small; read its entries for the max timestamp.
            for info in self.iter_entries(0):
                if info.max_timestamp > self.max_timestamp:
                    self.max_timestamp, self.offset_of_max_timestamp = info.max_timestamp, info.last_offset
        self.bytes_since_last_index_entry = self.size - last_pos
        return True

    def _check_index_samples(self, samples: int = 32) -> None:
        """Check the last index entry and ``samples`` spread over the rest: each must point at an
        entry header whose last offset is the indexed one. O(samples) preads, not a rescan."""
        n = self.index.entries
        if not n:
            return
        slots = sorted({n - 1, 0} | {i * n // samples for i in range(samples)})
        previous = (-1, -1)
        fd = self.file.fileno()
        for slot in slots:
            offset, position = self.index.entry(slot)
            if offset <= previous[0] or position <= previous[1]:
                raise CorruptIndexError(f"{self.index.path}: entry {slot} does not increase")
            header = os.pread(fd, _MAX_ENTRY_HEADER, position)
            size = entry_size_at(header, 0)
            if (
                size is None
                or size < _MIN_ENTRY
                or len(header) < min(size, _MAX_ENTRY_HEADER)
                or header[16] > 2
                or read_entry(header, 0).last_offset != offset
            ):
                raise CorruptIndexError(f"{self.index.path}: entry {slot} does not point at offset {offset}")
            previous = (offset, position)

    def recover(self, *, check_crc: bool = True) -> RecoveryResult:
        """Re-read the whole ``.log``: check sizes, magic, offsets and CRCs, truncate at the first bad
        or partial entry, rebuild both indexes. Returns what was kept and cut."""
        self.index.reset()
        self.time_index.reset()
        self.txn_index.reset()
        self.txn_index_needs_rebuild = True
        self.next_offset = self.base_offset
        self.max_timestamp, self.offset_of_max_timestamp = -1, self.base_offset
        self.bytes_since_last_index_entry = 0
        self.first_batch_timestamp = None
        position, entries, reason = 0, 0, None
        epoch_starts: list[tuple[int, int]] = []
        size = self.size
        if size:
            mm = mmap.mmap(self.file.fileno(), size, access=mmap.ACCESS_READ)
            try:
                prev_last = self.base_offset - 1
                while position < size:
                    reason, info = _entry_problem(mm, position, size, prev_last, self.base_offset)
                    if reason is not None:
                        break
                    if check_crc and not entry_crc_valid(mm, position, info.size):
                        reason = f"CRC mismatch in entry at offset {info.base_offset}"
                        break
                    self._index_entry(
                        info.position, info.size, info.last_offset, info.max_timestamp, info.last_offset
                    )
                    _note_epoch_start(mm, position, info.base_offset, epoch_starts)
                    prev_last = info.last_offset
                    position += info.size
                    entries += 1
            finally:
                mm.close()
            self.next_offset = prev_last + 1
        truncated = size - position
        if truncated:
            if not self.read_only:  # read-only: the bad tail stays on disk, past what is served
                os.ftruncate(self.file.fileno(), position)
            self.size = position
        if not self.active:
            self.seal()
            if not truncated:  # no flush follows (the recovery point stands, as Kafka's): no writer kept
                self.index.release_writer()
                self.time_index.release_writer()
        self.flushed = not truncated
        return RecoveryResult(position, truncated, entries, reason, tuple(epoch_starts))

    def leader_epoch_starts(self) -> list[tuple[int, int]]:
        """(leader epoch, base offset) of each v2 batch that raises the partition leader epoch over
        the batches before it in this segment: what a leader epoch cache learns from the segment."""
        starts: list[tuple[int, int]] = []
        if not self.size:
            return starts
        mm = mmap.mmap(self.file.fileno(), self.size, access=mmap.ACCESS_READ)
        try:
            for info in self.iter_entries(0):
                _note_epoch_start(mm, info.position, info.base_offset, starts)
        finally:
            mm.close()
        return starts

    # ---- appending ----------------------------------------------------------------------------
    def append(
        self, data, *, first_offset: int, last_offset: int, max_timestamp: int, offset_of_max_timestamp: int
    ) -> None:
        """Write entries whose offsets are assigned (first_offset >= next_offset) and index them.

        All or nothing: when a write fails (a full disk: ENOSPC; EIO) the bytes already written are
        cut off again, the indexes and counters are as before, and the OSError propagates."""
        if self.read_only:
            raise OSError(errno.EROFS, f"{self.log_path} is open read-only")
        position = self.size
        n = len(data)
        fd = self.file.fileno()
        before = (self.max_timestamp, self.offset_of_max_timestamp, self.bytes_since_last_index_entry,
                  self.first_batch_timestamp, self.index.entries, self.time_index.entries)
        try:
            written = os.pwrite(fd, data, position)
            if written < n:
                with memoryview(data) as view:
                    while written < n:
                        written += os.pwrite(fd, view[written:], position + written)
            if self.first_batch_timestamp is None:
                self.first_batch_timestamp = max_timestamp
            if entry_size_at(data, 0) == n:  # one entry: the common case
                self._index_entry(position, n, last_offset, max_timestamp, offset_of_max_timestamp)
            else:
                for info in scan_entries(data):
                    precise = (
                        info.max_timestamp == max_timestamp
                        and info.base_offset <= offset_of_max_timestamp <= info.last_offset
                    )
                    self._index_entry(
                        position + info.position,
                        info.size,
                        info.last_offset,
                        info.max_timestamp,
                        offset_of_max_timestamp if precise else info.last_offset,
                    )
        except OSError:
            self._undo_append(position, before)
            raise
        self.size = position + n
        self.next_offset = last_offset + 1
        self.flushed = False

    def _undo_append(self, position: int, before: tuple) -> None:
        (self.max_timestamp, self.offset_of_max_timestamp, self.bytes_since_last_index_entry,
         self.first_batch_timestamp, index_entries, time_index_entries) = before
        self.index.truncate_to_entries(index_entries)
        self.time_index.truncate_to_entries(time_index_entries)
        try:
            os.ftruncate(self.file.fileno(), position)  # shrinking needs no free space
        except OSError as exc:  # the next append overwrites the tail; recovery cuts it after a crash
            log.error("%s: could not cut a failed append at byte %d: %s", self.log_path, position, exc)

    def _index_entry(
        self, position: int, size: int, last_offset: int, max_timestamp: int, offset_of_max_timestamp: int
    ) -> None:
        if max_timestamp > self.max_timestamp:
            self.max_timestamp, self.offset_of_max_timestamp = max_timestamp, offset_of_max_timestamp
        if self.bytes_since_last_index_entry > self.index_interval_bytes:
            if not self.index.is_full:
                self.index.append(last_offset, position)
            if self.max_timestamp >= 0:
                self.time_index.maybe_append(self.max_timestamp, self.offset_of_max_timestamp)
            self.bytes_since_last_index_entry = 0
        self.bytes_since_last_index_entry += size

    def can_hold(self, offset: int) -> bool:
        return offset - self.base_offset <= _INT32_MAX

    @property
    def indexes_full(self) -> bool:
        return self.index.is_full or self.time_index.is_full

    def seal(self) -> None:
        """No more appends: record the final max timestamp and trim the indexes to their entries."""
        if self.max_timestamp >= 0 and not self.time_index.is_full:
            self.time_index.maybe_append(self.max_timestamp, self.offset_of_max_timestamp)
        self.index.trim_to_valid_size()
        self.time_index.trim_to_valid_size()
        self.active = False

    def flush(self) -> None:
        if self.read_only:
            return
        if self.file is not None:
            os.fsync(self.file.fileno())
        self.index.flush()
        self.time_index.flush()
        self.txn_index.flush()
        self.flushed = True

    # ---- reading ------------------------------------------------------------------------------
    def iter_entries(self, position: int, end: int | None = None) -> Iterator[EntryInfo]:
        """Headers of the whole entries in ``[position, end)``, read in chunks (record bytes are
        skipped, not read); stops at a trailing partial entry. Positions are file positions."""
        for _, _, info in self.iter_headers(position, end):
            yield info

    def iter_headers(self, position: int, end: int | None = None) -> Iterator[tuple[bytes, int, EntryInfo]]:
        """``iter_entries`` with the bytes read: (chunk, where the entry starts in it, entry), the chunk
        holding at least the entry's first ``min(size, V2_HEADER_SIZE)`` bytes (a v2 batch's whole
        header: producer id, sequence, attributes), never more than ``_SCAN_CHUNK`` a read."""
        end = self.size if end is None else min(end, self.size)
        fd = self.file.fileno()
        while end - position >= LOG_OVERHEAD:
            buf = os.pread(fd, min(_SCAN_CHUNK, end - position), position)
            n, off = len(buf), 0
            while n - off >= LOG_OVERHEAD:
                size = entry_size_at(buf, off)
                if size < _MIN_ENTRY:
                    raise ValueError(f"{self.log_path}: impossible entry size {size} at {position + off}")
                if n - off < min(size, _MAX_ENTRY_HEADER) or position + off + size > end:
                    break
                yield buf, off, read_entry(buf, off)._replace(position=position + off)
                off += size
            if off == 0:
                return  # the entry at `position` is partial
            position += off

    def read_entry_bytes(self, info: EntryInfo) -> bytes:
        """The whole entry ``info`` (from ``iter_entries``: a file position) read from the file."""
        data = os.pread(self.file.fileno(), info.size, info.position)
        if len(data) != info.size:
            raise ValueError(f"{self.log_path}: the entry at {info.position} is cut short: {len(data)} bytes")
        return data

    def translate_offset(self, offset: int, start_position: int = 0) -> EntryInfo | None:
        """First entry whose last offset >= ``offset`` (index floor lookup, then header scan).

        The hot path of every fetch: the scan reads headers in chunks and decodes only the
        offset, size, magic and (v2) last offset delta of each entry it steps over."""
        _, position = self.index.lookup(offset)
        position = max(position, start_position)
        end = self.size
        fd = self.file.fileno()
        unpack_overhead, unpack_delta = _OVERHEAD.unpack_from, _I32.unpack_from
        while end - position >= LOG_OVERHEAD:
            buf = os.pread(fd, min(_FIRST_CHUNK, end - position), position)
            n, off = len(buf), 0
            while n - off >= _MAX_ENTRY_HEADER:
                base, length = unpack_overhead(buf, off)
                size = LOG_OVERHEAD + length
                if size < _MIN_ENTRY:
                    raise ValueError(f"{self.log_path}: impossible entry size {size} at {position + off}")
                last = base + unpack_delta(buf, off + 23)[0] if buf[off + 16] == 2 else base
                if last >= offset:
                    break
                off += size
            found = n - off >= _MAX_ENTRY_HEADER
            at_file_end = n == end - position and 0 <= n - off
            if found or at_file_end or off == 0:
                # Decode the found entry, or finish short tail entries (v0/v1 under 61 bytes), the
                # general way.
                for info in self.iter_entries(position + off):
                    if info.last_offset >= offset:
                        return info
                return None
            position += off
        return None

    def end_position_within(self, start: int, limit: int) -> tuple[int, EntryInfo | None]:
        """Largest entry boundary <= ``limit`` at or after ``start`` (``start`` is a boundary)."""
        if limit >= self.size:
            return self.size, None
        _, position = self.index.lookup_position(limit)
        position = max(position, start)
        fd = self.file.fileno()
        unpack_overhead = _OVERHEAD.unpack_from
        while limit - position >= LOG_OVERHEAD:
            buf = os.pread(fd, min(_SCAN_CHUNK, limit - position), position)
            n, off = len(buf), 0
            while n - off >= LOG_OVERHEAD:
                size = LOG_OVERHEAD + unpack_overhead(buf, off)[1]
                if size < _MIN_ENTRY:
                    raise ValueError(f"{self.log_path}: impossible entry size {size} at {position + off}")
                if position + off + size > limit:
                    return position + off, None
                off += size
            position += off
        return position, None

    def find_offset_by_timestamp(self, timestamp: int, start_offset: int) -> EntryInfo | None:
        """First entry whose max timestamp >= ``timestamp`` and last offset >= ``start_offset``."""
        before = self.time_index.lookup_before(timestamp)
        offset = max(before[1] if before else self.base_offset, start_offset)
        _, position = self.index.lookup(offset)
        for info in self.iter_entries(position):
            if info.max_timestamp >= timestamp and info.last_offset >= start_offset:
                return info
        return None

    def max_timestamp_entry(self) -> EntryInfo | None:
        """The first entry carrying the segment's max timestamp (None when it has none): found as
        Kafka does, from the offset index floor of ``offset_of_max_timestamp``, which is the last
        offset of that entry (time index, recovery) or a record inside it (an append)."""
        if self.max_timestamp < 0:
            return None
        _, position = self.index.lookup(self.offset_of_max_timestamp)
        for info in self.iter_entries(position):
            if info.max_timestamp == self.max_timestamp:
                return info
        return None

    def largest_timestamp(self) -> int:
        """Max timestamp for retention, or the file's mtime when entries carry none (v0)."""
        if self.max_timestamp >= 0:
            return self.max_timestamp
        return int(os.stat(self.log_path).st_mtime * 1000)

    def read_first_batch_timestamp(self) -> None:
        if self.first_batch_timestamp is None and self.size:
            for info in self.iter_entries(0):
                self.first_batch_timestamp = info.max_timestamp
                break

    # ---- truncation and removal ---------------------------------------------------------------
    def truncate_to(self, offset: int) -> int:
        """Drop entries whose last offset >= ``offset``; returns the bytes removed."""
        if self.read_only:
            raise OSError(errno.EROFS, f"{self.log_path} is open read-only")
        info = self.translate_offset(offset)
        if info is None:
            return 0
        position = info.position
        removed = self.size - position
        self.index.truncate_to_position(position)
        if self.active:
            self.index.resize(self._index_max_bytes)
            self.time_index.resize(self._index_max_bytes)
        os.ftruncate(self.file.fileno(), position)
        self.size = position
        self.txn_index.truncate_to(info.base_offset)
        # Recompute state from what is left (bounded: the tail after the last index entry).
        last_pos = self.index.last_entry()[1]
        self.next_offset = self.base_offset
        if self.index.entries:
            self.next_offset = self.index.last_entry()[0] + 1
        for entry in self.iter_entries(last_pos):
            self.next_offset = entry.last_offset + 1
        self.time_index.truncate_to_offset(self.next_offset)
        self.bytes_since_last_index_entry = position - last_pos
        last = self.time_index.last_entry()
        self.max_timestamp, self.offset_of_max_timestamp = last if last else (-1, self.base_offset)
        for entry in self.iter_entries(last_pos):
            if entry.max_timestamp > self.max_timestamp:
                self.max_timestamp, self.offset_of_max_timestamp = entry.max_timestamp, entry.last_offset
        if position == 0:
            self.first_batch_timestamp = None
        self.flushed = False
        return removed

    def make_active(self) -> None:
        self.index.resize(self._index_max_bytes)
        self.time_index.resize(self._index_max_bytes)
        self.active = True

    def map_indexes(self) -> None:
        """Map both indexes now: the cleaner's swap renames their files while this segment still
        serves reads, and a lookup must not open a file by a name that has moved."""
        self.index.map()
        self.time_index.map()

    def release_if_idle(self) -> None:
        """Let the indexes' maps and writers go when unused since the last call (``_MmapIndex``)."""
        self.index.release_if_idle()
        self.time_index.release_if_idle()

    def close(self) -> None:
        """Trim indexes and let the ``.log`` descriptor go (regions in flight keep it open)."""
        if self.file is None:
            return
        if self.active:
            try:
                if self.max_timestamp >= 0 and not self.time_index.is_full:
                    self.time_index.maybe_append(self.max_timestamp, self.offset_of_max_timestamp)
                self.index.trim_to_valid_size()
                self.time_index.trim_to_valid_size()
            except OSError as exc:  # a failed disk: the indexes are rebuilt at the next start
                log.warning("%s: could not finish the indexes at close: %s", self.log_path, exc)
        self.index.close()
        self.time_index.close()
        self.txn_index.close()
        self.file = None

    def delete(self) -> None:
        """Remove the files (a region in flight still reads through its open descriptor)."""
        self.index.delete()
        self.time_index.delete()
        self.txn_index.delete()
        self.file = None
        try:
            os.unlink(self.log_path)
        except FileNotFoundError:
            pass

    def __repr__(self) -> str:
        return f"LogSegment(base={self.base_offset}, size={self.size}, next={self.next_offset})"


def _note_epoch_start(buf, position: int, base_offset: int, starts: list[tuple[int, int]]) -> None:
    """As Kafka's segment recovery feeds its epoch cache: a v2 batch whose partition leader epoch
    (bytes 12-15, outside the CRC) is above the last noted one starts that epoch."""
    if buf[position + MAGIC_OFFSET] >= 2:
        epoch = _I32.unpack_from(buf, position + _LEADER_EPOCH_AT)[0]
        if epoch >= 0 and (not starts or epoch > starts[-1][0]):
            starts.append((epoch, base_offset))


def _entry_problem(
    buf, position: int, end: int, prev_last: int, base_offset: int
) -> tuple[str | None, EntryInfo | None]:
    """Why the entry at ``position`` cannot be trusted (None if it can), and its header."""
    remaining = end - position
    if remaining < LOG_OVERHEAD:
        return f"partial entry header ({remaining} bytes) at position {position}", None
    size = entry_size_at(buf, position)
    if size < _MIN_ENTRY:
        return f"impossible entry size {size} at position {position}", None
    if size > remaining:
        return f"partial entry at position {position}: {size} bytes declared, {remaining} present", None
    magic = buf[position + 16]
    if magic > 2 or (magic == 2 and size < V2_HEADER_SIZE) or (magic == 1 and size < LOG_OVERHEAD + 22):
        return f"invalid magic {magic} / size {size} at position {position}", None
    info = read_entry(buf, position)
    if info.base_offset <= prev_last or info.last_offset < info.base_offset:
        return (
            f"offsets {info.base_offset}..{info.last_offset} do not follow {prev_last} at position {position}"
        ), None
    if info.last_offset - base_offset > _INT32_MAX:
        return f"offset {info.last_offset} too far from the segment base {base_offset}", None
    return None, info
