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

__all__ = ["CorruptIndexError", "OffsetIndex", "TimeIndex"]

_INT32_MAX = 2**31 - 1


class CorruptIndexError(Exception):
    """An index failed its sanity check; rebuild it from the log."""


class _MmapIndex:
    """Fixed-size entries in a preallocated file, searched through a read-only memory map as
    largest lower bound.

    Entries are written with ``pwrite``, never through the map: a store into a page of a sparse
    file that the file system cannot back (a full disk) would kill the process with SIGBUS,
    where ``pwrite`` answers ENOSPC. The map shares the page cache with ``pwrite``, so what is
    written is what lookups see; lookups only read slots below ``entries``, all written.

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
        if in_memory:
            try:
                fd = os.open(path, os.O_RDONLY)
            except FileNotFoundError:
                fd = -1
        else:
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            length = os.fstat(fd).st_size if fd >= 0 else 0
            self._fd = fd
            self.entries = length // self._entry_size
            self._length = length
            self._mm: mmap.mmap | None = None
            if in_memory:
                self._load_into_memory(length)
            elif writable:
                self._remap(max(self._max_size, self.entries * self._entry_size))
            else:
                self._remap(length)
        except BaseException:
            if fd >= 0:
                os.close(fd)
            raise

    # ---- file mapping -------------------------------------------------------------------------
    def _load_into_memory(self, length: int) -> None:
        size = max(self._max_size, length, self._entry_size)
        self._mm = mmap.mmap(-1, size)
        done = 0
        while done < length:
            chunk = os.pread(self._fd, min(1 << 20, length - done), done)
            if not chunk:
                break
            self._mm[done : done + len(chunk)] = chunk
            done += len(chunk)
        self.entries = done // self._entry_size
        self._file_length = length
        self._length = size
        if self._fd >= 0:
            os.close(self._fd)
        self._fd = -1

    def _remap(self, length: int) -> None:
        """Make the file ``length`` bytes (growing it sparse, shrinking it to its entries) and map it."""
        if self._in_memory:  # nothing on disk changes; the anonymous map grows when it must
            if length > len(self._mm):
                grown = mmap.mmap(-1, length)
                grown[: len(self._mm)] = self._mm[:]
                self._mm.close()
                self._mm = grown
            self._length = length
            return
        current = os.fstat(self._fd).st_size
        if length < current and self._mm is not None:
            self._mm.close()  # never keep a map past the file's end
            self._mm = None
        if length != current:
            os.ftruncate(self._fd, length)
        old, self._mm = self._mm, mmap.mmap(self._fd, length, access=mmap.ACCESS_READ) if length > 0 else None
        if old is not None:
            old.close()
        self._length = length

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
        self._remap(max(self._max_size, self.entries * self._entry_size))

    def trim_to_valid_size(self) -> None:
        """Shrink the file to its entries (segment sealed or closed)."""
        self._remap(self.entries * self._entry_size)

    def truncate_to_entries(self, n: int) -> None:
        self.entries = max(0, min(n, self.entries))

    def reset(self) -> None:
        """Forget every entry (before a rebuild)."""
        self.entries = 0
        if self._length < self._max_size:
            self._remap(self._max_size)

    def flush(self) -> None:
        if self._fd >= 0:
            os.fsync(self._fd)

    def _file_size(self) -> int:
        return self._file_length if self._in_memory else os.fstat(self._fd).st_size

    def _check_shape(self) -> None:
        """What every index's sanity check starts with: no unwritten pages, a whole number of entries."""
        self.check_written()
        if self._file_size() % self._entry_size:
            raise CorruptIndexError(f"{self.path}: size is not a multiple of {self._entry_size}")

    def check_written(self) -> None:
        """A trimmed index has no holes. One with unwritten (sparse) pages was still preallocated
        when the broker stopped: its length says nothing about its entries, and reading a hole
        through the map could fault on a full disk. Cheap: one ``lseek``."""
        if self._fd < 0 or self._in_memory:
            return
        length = os.fstat(self._fd).st_size
        if not length:
            return
        try:
            hole = os.lseek(self._fd, 0, os.SEEK_HOLE)
        except OSError:  # a file system without SEEK_HOLE: no way to tell, the other checks decide
            return
        if hole < length:
            raise CorruptIndexError(f"{self.path}: unwritten from byte {hole} of {length} (never trimmed)")

    def close(self) -> None:
        if self._mm is not None:
            self._mm.close()
            self._mm = None
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

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
        return self.ENTRY.unpack_from(self._mm, n * self._entry_size)

    def _write(self, a: int, b: int) -> None:
        if self.is_full:
            raise OverflowError(f"index {self.path} is full ({self.entries} entries)")
        position = self.entries * self._entry_size
        if self._in_memory:
            self.ENTRY.pack_into(self._mm, position, a, b)
        elif os.pwrite(self._fd, self.ENTRY.pack(a, b), position) != self._entry_size:
            raise OSError(errno.ENOSPC, f"short write to {self.path}")
        self.entries += 1

    def _largest_lower_bound(self, target: int, column: int, strict: bool = False) -> int:
        """Slot of the last entry whose ``column`` is <= target (< target if strict), or -1."""
        lo, hi = 0, self.entries - 1
        if hi < 0:
            return -1
        unpack = self.ENTRY.unpack_from
        mm, size = self._mm, self._entry_size
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
            last_rel, last_pos = self._entry(self.entries - 1)
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
        self.entries = self._largest_lower_bound(offset - self.base_offset, 0, strict=True) + 1

    def truncate_to_position(self, position: int) -> None:
        """Drop entries whose position >= ``position``."""
        self.entries = self._largest_lower_bound(position, 1, strict=True) + 1

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
            last_ts, last_rel = self._entry(self.entries - 1)
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
        self.entries = n

    def sanity_check(self, next_offset: int) -> None:
        self._check_shape()
        if self.entries:
            first_ts, first_rel = self._entry(0)
            last_ts, last_rel = self._entry(self.entries - 1)
            if last_ts < first_ts or first_rel < 0 or last_rel < first_rel or \
                    self.base_offset + last_rel >= max(next_offset, self.base_offset + 1):
                raise CorruptIndexError(f"{self.path}: last entry ({last_ts}, {last_rel}) is impossible")
