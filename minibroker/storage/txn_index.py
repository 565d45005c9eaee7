"""``<base>.txnindex``: the aborted transactions whose ABORT marker lies in one segment.

Format (Kafka's TransactionIndex / AbortedTxn, byte for byte): a plain sequence of 34-byte
entries, no header, no checksum: int16 version (0), int64 producer id, int64 first offset (of the
transaction), int64 last offset (the marker's), int64 last stable offset (the partition's LSO once
that transaction was closed). Entries are appended in marker order, so last offsets increase. The
file is created only with its first entry, as Kafka does: most segments never have one.

A fetch at READ_COMMITTED reads the entries of the segments it overlaps (``collect``) to tell the
client which producers' records in the fetched range to drop. Entries are read from the file once
and kept in memory (they are few: one per aborted transaction of the segment).

Owner: the ``LogSegment`` holding it; not thread-safe. ``in_memory``: for a segment of a log dir that
cannot be written (nothing is written, the file is only read).
"""

from __future__ import annotations

import os
import struct
from typing import NamedTuple

__all__ = ["AbortedTxn", "TransactionIndex", "ENTRY_SIZE"]

_ENTRY = struct.Struct(">hqqqq")
ENTRY_SIZE = _ENTRY.size  # 34
VERSION = 0


class AbortedTxn(NamedTuple):
    producer_id: int
    first_offset: int
    last_offset: int  # the ABORT marker's offset
    last_stable_offset: int


class TransactionIndex:
    """The aborted transactions of one segment. See the module docstring for the format."""

    def __init__(self, path: str, base_offset: int, *, in_memory: bool = False):
        self.path = path
        self.base_offset = base_offset
        self.in_memory = in_memory
        self._entries: list[AbortedTxn] | None = None  # read on first use
        self.flushed = True

    # ---- reading ------------------------------------------------------------------------------
    @property
    def entries(self) -> list[AbortedTxn]:
        if self._entries is None:
            self._entries = self._read_file()
        return self._entries

    def _read_file(self) -> list[AbortedTxn]:
        try:
            with open(self.path, "rb") as f:
                data = f.read()
        except FileNotFoundError:
            return []
        out = []
        # a partial entry at the end (a torn write) is ignored, as Kafka's iterator ignores it
        for pos in range(0, len(data) - ENTRY_SIZE + 1, ENTRY_SIZE):
            version, pid, first, last, lso = _ENTRY.unpack_from(data, pos)
            if version != VERSION:
                raise ValueError(f"{self.path}: unexpected aborted transaction version {version} at {pos}")
            out.append(AbortedTxn(pid, first, last, lso))
        return out

    def collect(self, fetch_offset: int, upper_bound: int) -> tuple[list[AbortedTxn], bool]:
        """Entries overlapping ``[fetch_offset, upper_bound)``, and whether the search is complete (an
        entry's last stable offset reached ``upper_bound``: later segments cannot add any), as
        Kafka's ``collectAbortedTxns``."""
        found = []
        for txn in self.entries:
            if txn.last_offset >= fetch_offset and txn.first_offset < upper_bound:
                found.append(txn)
            if txn.last_stable_offset >= upper_bound:
                return found, True
        return found, False

    # ---- writing ------------------------------------------------------------------------------
    def append(self, txn: AbortedTxn) -> None:
        """Add an entry (its marker after every earlier one); creates the file with the first."""
        entries = self.entries
        if entries and txn.last_offset <= entries[-1].last_offset:
            raise ValueError(
                f"{self.path}: aborted transaction ending at {txn.last_offset} does not follow "
                f"{entries[-1].last_offset}"
            )
        if not self.in_memory:
            data = _ENTRY.pack(VERSION, *txn)
            position = len(entries) * ENTRY_SIZE
            # Opened for each entry and closed again: aborts are rare, and an idle segment then
            # holds no descriptor for its txn index (docs/storage.md, "File descriptors").
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                written = os.pwrite(fd, data, position)
                if written < ENTRY_SIZE:  # a full disk: leave no partial entry behind
                    os.ftruncate(fd, position)
                    raise OSError(28, f"{self.path}: short write of an aborted transaction")
            finally:
                os.close(fd)
            self.flushed = False
        entries.append(txn)

    def truncate_to(self, offset: int) -> None:
        """Drop the entries whose marker is at or after ``offset``."""
        entries = self.entries
        keep = len(entries)
        while keep and entries[keep - 1].last_offset >= offset:
            keep -= 1
        if keep == len(entries):
            return
        del entries[keep:]
        if not self.in_memory:
            os.truncate(self.path, keep * ENTRY_SIZE)
            self.flushed = False

    def reset(self) -> None:
        """Empty it (before recovery rebuilds it); the file, if any, is cut to 0 bytes."""
        self._entries = []
        if not self.in_memory and os.path.exists(self.path):
            os.truncate(self.path, 0)
            self.flushed = False

    def flush(self) -> None:
        if self.flushed or self.in_memory:
            return
        if os.path.exists(self.path):
            fd = os.open(self.path, os.O_RDONLY)  # fsync reaches the writes of descriptors since closed
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        self.flushed = True

    def close(self) -> None:
        """Nothing to release: the file is open only while an entry is written."""

    def delete(self) -> None:
        self.close()
        self._entries = []
        if not self.in_memory:
            try:
                os.unlink(self.path)
            except FileNotFoundError:
                pass

    def __repr__(self) -> str:
        count = len(self._entries) if self._entries is not None else "?"
        return f"TransactionIndex({self.path!r}, {count} entries)"
