"""Sparse, memory-mapped segment indexes in Kafka's on-disk format.

``OffsetIndex`` (``.index``): 8-byte entries, int32 relative offset + int32 file position, big-endian.
An entry ``(o, p)`` says: the log entry (v2 batch or v0/v1 message) starting at byte ``p`` of the
segment's ``.log`` has last offset ``base_offset + o``.

``TimeIndex`` (``.timeindex``): 12-byte entries, int64 timestamp + int32 relative offset. An entry
``(t, o)`` says: ``t`` is the largest timestamp among every record of the segment up to the entry
that held it, and the record carrying it has offset ``base_offset + o``.

Both are sparse (one entry per ``index.interval.bytes`` of log), strictly increasing in both
columns, preallocated to ``segment.index.bytes`` (rounded down to whole entries) while their
segment is active and trimmed to their real size when it is sealed or closed. The number of
valid entries is ``file length // entry size`` on open, which is only right for a trimmed file:
indexes carry no checksum, so after an unclean shutdown the caller rebuilds them from the log.

Not thread-safe: the owning ``LogSegment`` is the only caller.
"""

from __future__ import annotations

import errno
import mmap
import os
import struct
import sys

__all__ = ["CorruptIndexError", "OffsetIndex", "TimeIndex"]

_INT32_MAX = 2**31 - 1
# Python 3.13+ can map without keeping a dup of the descriptor (Kafka's maps hold none either).
_MAP_OPTIONS = {"trackfd": False} if sys.version_info >= (3, 13) else {}


class CorruptIndexError(Exception):
    """An index failed its sanity check; rebuild it from the log."""


class _MmapIndex:
    """Fixed-size entries in a preallocated file, searched as largest lower bound through a
    read-only memory map.

    Entries are written with ``pwrite``, never through the map: a store into a page of a sparse
    file that the file system cannot back (a full disk) would kill the process with SIGBUS,
    where ``pwrite`` answers ENOSPC. The map shares the page cache with ``pwrite``, so what is
    written is what lookups see; lookups only read slots below ``entries``, all written.

    File descriptors (docs/storage.md, "File descriptors"): an index holds none while idle. The
    file is created and sized, then closed; the first ``pwrite`` opens it and keeps it until the
    index is trimmed (its segment sealed) and flushed, closed, or found idle (``release_if_idle``).
    A trimmed index keeps its descriptor until the fsync: the cleaner may rename the file of a
    sealed segment not yet flushed, and a flush must not open it by a path that has moved. The map is
    made by the first lookup that reads an entry and dropped whenever the file is resized or the
    index found idle; CPython's ``mmap`` keeps a ``dup``
    of the mapped descriptor (before Python 3.13, which can be told not to), so a mapped index
    costs one descriptor. The last entry written (or read) is cached, so that appends check
    their order without a map.

    ``in_memory``: the entries live in anonymous memory, loaded from the file and never written
    back: an index for a log dir that cannot be written (a full or failed disk), rebuilt or
    read without touching it.
    """

    ENTRY = struct.Struct(">ii")  # overridden

    def __init__(self, path: str, base_offset: int, max_index_size: int, *, writable: bool,
                 in_memory: bool = False):
        self.path = path
        self.base_offset = base_offset
        self._entry_size = self.ENTRY.size
        self._max_size = max(self._entry_size, max_index_size - max_index_size % self._entry_size)
        self._in_memory = in_memory
        self._fd = -1  # open for pwrite from the first write until trimmed and flushed, or closed
        self._mm: mmap.mmap | None = None  # file-backed: made by the first lookup; in memory: the entries
        self._last: tuple[int, tuple[int, int] | None] = (-1, None)  # (slot, entry) last written or read
        self._unsynced = False  # written or resized since the last fsync
        self._release_after_sync = False  # trimmed with unsynced bytes: the writer goes after the fsync
        self._used = False  # mapped or written to since the last release_if_idle
        if in_memory:
            self._load_into_memory()
            return
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            length = os.fstat(fd).st_size
            self.entries = length // self._entry_size
            # active: preallocated (sparse) to the maximum; sealed: as it is on disk
            self._length = max(self._max_size, self.entries * self._entry_size) if writable else length
            if self._length != length:
                os.ftruncate(fd, self._length)
                self._unsynced = True
        finally:
            os.close(fd)

    # ---- the file and its map -----------------------------------------------------------------
    def _load_into_memory(self) -> None:
        try:
            fd = os.open(self.path, os.O_RDONLY)
        except FileNotFoundError:
            fd = -1
        try:
            length = os.fstat(fd).st_size if fd >= 0 else 0
            size = max(self._max_size, length, self._entry_size)
            self._mm = mmap.mmap(-1, size)
            done = 0
            while done < length:
                chunk = os.pread(fd, min(1 << 20, length - done), done)
                if not chunk:
                    break
                self._mm[done : done + len(chunk)] = chunk
                done += len(chunk)
        finally:
            if fd >= 0:
                os.close(fd)
        self.entries = done // self._entry_size
        self._file_length = length
        self._length = size

    def _map(self) -> mmap.mmap:
        """The read-only map of the whole file, made now if there is none."""
        self._used = True
        if self._mm is None:
            fd = self._fd if self._fd >= 0 else os.open(self.path, os.O_RDONLY)
            try:
                self._mm = mmap.mmap(fd, self._length, access=mmap.ACCESS_READ, **_MAP_OPTIONS)
            finally:
                if fd != self._fd:
                    os.close(fd)
        return self._mm

    def map(self) -> None:
        """Map now, if there are entries: for a file about to be renamed under an index that still
        answers lookups (the cleaner's swap), which then never opens it by its path."""
        if self.entries:
            self._map()

    def unmap(self) -> None:
        """Drop the map (the next lookup maps again): after the load-time checks of a segment
        that may then sit unread."""
        if self._mm is not None and not self._in_memory:
            self._mm.close()
            self._mm = None

    def release_if_idle(self) -> None:
        """Drop the map and the writer's descriptor if neither served since the last call (the
        log upkeep calls it every ``log.flush.offset.checkpoint.interval.ms``): an index read or
        written once, then left alone, holds nothing. The next lookup or write opens them again.
        A trimmed index's writer stays until its flush (``trim_to_valid_size``)."""
        if not self._used:
            self.unmap()
            if not self._release_after_sync:
                self.release_writer()
        self._used = False

    def _writer(self) -> int:
        """The descriptor for ``pwrite``, opened by the first write."""
        self._used = True
        if self._fd < 0:
            self._fd = os.open(self.path, os.O_RDWR)
        return self._fd

    def _resize_file(self, length: int) -> None:
        """Make the file ``length`` bytes: growing it sparse, shrinking it to its entries."""
        if self._in_memory:  # nothing on disk changes; the anonymous map grows when it must
            if length > len(self._mm):
                grown = mmap.mmap(-1, length)
                grown[: len(self._mm)] = self._mm[:]
                self._mm.close()
                self._mm = grown
            self._length = length
            return
        self.unmap()  # never keep a map past the file's end; the next lookup maps the new length
        if length != self._length:
            if self._fd >= 0:
                os.ftruncate(self._fd, length)
            else:
                os.truncate(self.path, length)
            self._unsynced = True
        self._length = length

    @property
    def mapped(self) -> bool:
        """A file-backed map is held (for tests of the descriptor budget)."""
        return self._mm is not None and not self._in_memory

    @property
    def max_entries(self) -> int:
        return self._length // self._entry_size

    @property
    def is_full(self) -> bool:
        return self.entries >= self.max_entries

    @property
    def size_bytes(self) -> int:
        return self.entries * self._entry_size

    def resize(self, max_index_size: int) -> None:
        """Make room for appends again (the segment becomes active)."""
        self._max_size = max(self._entry_size, max_index_size - max_index_size % self._entry_size)
        self._release_after_sync = False
        self._resize_file(max(self._max_size, self.entries * self._entry_size))

    def trim_to_valid_size(self) -> None:
        """Shrink the file to its entries (segment sealed or closed). Its descriptor goes now if
        everything is on disk, else after the next ``flush``, which then needs no path: the cleaner
        may rename the files of a sealed segment before the upkeep has flushed it."""
        self._resize_file(self.entries * self._entry_size)
        if self._unsynced and not self._in_memory:
            if self._fd < 0:
                self._fd = os.open(self.path, os.O_RDWR)
            self._release_after_sync = True
        else:
            self.release_writer()

    def truncate_to_entries(self, n: int) -> None:
        self._set_entries(max(0, min(n, self.entries)))

    def _set_entries(self, n: int) -> None:
        self.entries = n
        if self._last[0] >= n:
            self._last = (-1, None)

    def reset(self) -> None:
        """Forget every entry (before a rebuild, which needs no map)."""
        self._set_entries(0)
        self._resize_file(max(self._length, self._max_size))

    def flush(self) -> None:
        """fsync what was written or resized since the last flush (through a descriptor opened for
        it when the index holds none: fsync reaches every write to the file)."""
        if self._in_memory or not self._unsynced:
            return
        if self._fd >= 0:
            os.fsync(self._fd)
        else:
            fd = os.open(self.path, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        self._unsynced = False
        if self._release_after_sync:
            self.release_writer()

    def _file_size(self) -> int:
        return self._file_length if self._in_memory else self._length

    def _check_shape(self) -> None:
        """What every index's sanity check starts with: no unwritten pages, a whole number of entries."""
        self.check_written()
        if self._file_size() % self._entry_size:
            raise CorruptIndexError(f"{self.path}: size is not a multiple of {self._entry_size}")

    def check_written(self) -> None:
        """A trimmed index has no holes. One with unwritten (sparse) pages was still preallocated
        when the broker stopped: its length says nothing about its entries, and reading a hole
        through the map could fault on a full disk. Cheap: one ``lseek``."""
        if self._in_memory or not self._length:
            return
        fd = self._fd if self._fd >= 0 else os.open(self.path, os.O_RDONLY)
        try:
            hole = os.lseek(fd, 0, os.SEEK_HOLE)
        except OSError:  # a file system without SEEK_HOLE: no way to tell, the other checks decide
            return
        finally:
            if fd != self._fd:
                os.close(fd)
        if hole < self._length:
            raise CorruptIndexError(
                f"{self.path}: unwritten from byte {hole} of {self._length} (never trimmed)"
            )

    def release_writer(self) -> None:
        """Let the writer go now, flushed or not (also for a trimmed index no flush will follow)."""
        self._release_after_sync = False
        fd, self._fd = self._fd, -1
        if fd >= 0:
            os.close(fd)

    def close(self) -> None:
        if self._mm is not None:
            self._mm.close()
            self._mm = None
        self.release_writer()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass

    def delete(self) -> None:
        self.close()
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass

    def rename(self, path: str) -> None:
        os.rename(self.path, path)
        self.path = path

    # ---- entries ------------------------------------------------------------------------------
    def _entry(self, n: int) -> tuple[int, int]:
        slot, entry = self._last
        if n == slot:
            return entry
        entry = self.ENTRY.unpack_from(self._map(), n * self._entry_size)
        if n == self.entries - 1:
            self._last = (n, entry)
        return entry

    def _last_written(self) -> tuple[int, int]:
        """The last entry (there is one), read without a map: what an append checks its order
        against, just before it writes through the same descriptor."""
        n = self.entries - 1
        slot, entry = self._last
        if n != slot:
            if self._in_memory:
                entry = self.ENTRY.unpack_from(self._mm, n * self._entry_size)
            else:
                data = os.pread(self._writer(), self._entry_size, n * self._entry_size)
                entry = self.ENTRY.unpack(data)  # a short read (a file cut under us) raises struct.error
            self._last = (n, entry)
        return entry

    def _write(self, a: int, b: int) -> None:
        if self.is_full:
            raise OverflowError(f"index {self.path} is full ({self.entries} entries)")
        position = self.entries * self._entry_size
        if self._in_memory:
            self.ENTRY.pack_into(self._mm, position, a, b)
        else:
            if os.pwrite(self._writer(), self.ENTRY.pack(a, b), position) != self._entry_size:
                raise OSError(errno.ENOSPC, f"short write to {self.path}")
            self._unsynced = True
        self._last = (self.entries, (a, b))
        self.entries += 1

    def _largest_lower_bound(self, target: int, column: int, strict: bool = False) -> int:
        """Slot of the last entry whose ``column`` is <= target (< target if strict), or -1."""
        lo, hi = 0, self.entries - 1
        if hi < 0:
            return -1
        unpack = self.ENTRY.unpack_from
        mm, size = self._map(), self._entry_size
        found = -1
        while lo <= hi:
            mid = (lo + hi) >> 1
            value = unpack(mm, mid * size)[column]
            if value < target or (value == target and not strict):
                found = mid
                lo = mid + 1
            else:
                hi = mid - 1
        return found


class OffsetIndex(_MmapIndex):
    """``.index``: relative last offset of a log entry -> its byte position in the ``.log``."""

    ENTRY = struct.Struct(">ii")  # relative offset, position

    def append(self, offset: int, position: int) -> None:
        relative = offset - self.base_offset
        if not 0 <= relative <= _INT32_MAX:
            raise ValueError(f"offset {offset} does not fit index with base {self.base_offset}")
        if self.entries:
            last_rel, last_pos = self._last_written()
            if relative <= last_rel or position <= last_pos:
                raise ValueError(f"index entry ({offset}, {position}) is not after ({last_rel}, {last_pos})")
        self._write(relative, position)

    def entry(self, n: int) -> tuple[int, int]:
        """(absolute offset, position) of entry ``n``."""
        rel, pos = self._entry(n)
        return self.base_offset + rel, pos

    def last_entry(self) -> tuple[int, int]:
        return self.entry(self.entries - 1) if self.entries else (self.base_offset, 0)

    def lookup(self, offset: int) -> tuple[int, int]:
        """Largest entry whose offset <= ``offset``; (base_offset, 0) when there is none."""
        slot = self._largest_lower_bound(offset - self.base_offset, 0)
        return self.entry(slot) if slot >= 0 else (self.base_offset, 0)

    def lookup_strict(self, offset: int) -> tuple[int, int]:
        """Largest entry whose offset < ``offset``: a position from which to scan for ``offset``."""
        slot = self._largest_lower_bound(offset - self.base_offset, 0, strict=True)
        return self.entry(slot) if slot >= 0 else (self.base_offset, 0)

    def lookup_position(self, position: int) -> tuple[int, int]:
        """Largest entry whose position <= ``position``; (base_offset, 0) when there is none."""
        slot = self._largest_lower_bound(position, 1)
        return self.entry(slot) if slot >= 0 else (self.base_offset, 0)

    def truncate_to_offset(self, offset: int) -> None:
        """Drop entries whose offset >= ``offset``."""
        self._set_entries(self._largest_lower_bound(offset - self.base_offset, 0, strict=True) + 1)

    def truncate_to_position(self, position: int) -> None:
        """Drop entries whose position >= ``position``."""
        self._set_entries(self._largest_lower_bound(position, 1, strict=True) + 1)

    def sanity_check(self, log_size: int) -> None:
        """Cheap checks (no full scan): no unwritten pages, size a whole number of entries, last
        entry inside the log."""
        self._check_shape()
        if self.entries:
            first_rel, _ = self._entry(0)
            last_rel, last_pos = self._entry(self.entries - 1)
            if first_rel < 0 or last_rel < first_rel or last_pos >= log_size:
                raise CorruptIndexError(f"{self.path}: last entry ({last_rel}, {last_pos}) is impossible")
            if self.entries > 1 and self._entry(self.entries - 2)[1] >= last_pos:
                raise CorruptIndexError(f"{self.path}: positions do not increase")


class TimeIndex(_MmapIndex):
    """``.timeindex``: max timestamp so far -> relative offset of the record that carries it."""

    ENTRY = struct.Struct(">qi")  # timestamp, relative offset

    def entry(self, n: int) -> tuple[int, int]:
        """(timestamp, absolute offset) of entry ``n``."""
        ts, rel = self._entry(n)
        return ts, self.base_offset + rel

    def last_entry(self) -> tuple[int, int] | None:
        return self.entry(self.entries - 1) if self.entries else None

    def maybe_append(self, timestamp: int, offset: int) -> bool:
        """Append if ``timestamp`` is above the last entry's (the index only grows). True if appended."""
        if self.entries:
            last_ts, last_rel = self._last_written()
            if timestamp <= last_ts:
                return False
            if offset - self.base_offset < last_rel:
                raise ValueError(f"time index offset {offset} goes backwards")
        if self.is_full:
            return False
        relative = offset - self.base_offset
        if not 0 <= relative <= _INT32_MAX:
            raise ValueError(f"offset {offset} does not fit index with base {self.base_offset}")
        self._write(timestamp, relative)
        return True

    def lookup_before(self, timestamp: int) -> tuple[int, int] | None:
        """Last entry whose timestamp < ``timestamp`` (every record before it is older), or None."""
        slot = self._largest_lower_bound(timestamp, 0, strict=True)
        return self.entry(slot) if slot >= 0 else None

    def lookup(self, timestamp: int) -> tuple[int, int]:
        """Kafka's lookup: largest entry with timestamp <= ``timestamp``; (-1, base_offset) if none."""
        slot = self._largest_lower_bound(timestamp, 0)
        return self.entry(slot) if slot >= 0 else (-1, self.base_offset)

    def truncate_to_offset(self, offset: int) -> None:
        """Drop entries whose offset >= ``offset``."""
        n = self.entries
        while n and self.base_offset + self._entry(n - 1)[1] >= offset:
            n -= 1
        self._set_entries(n)

    def sanity_check(self, next_offset: int) -> None:
        self._check_shape()
        if self.entries:
            first_ts, first_rel = self._entry(0)
            last_ts, last_rel = self._entry(self.entries - 1)
            if last_ts < first_ts or first_rel < 0 or last_rel < first_rel or \
                    self.base_offset + last_rel >= max(next_offset, self.base_offset + 1):
                raise CorruptIndexError(f"{self.path}: last entry ({last_ts}, {last_rel}) is impossible")
