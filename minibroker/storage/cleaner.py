"""The log cleaner: compaction of ``cleanup.policy=compact`` logs, with Kafka's LogCleaner semantics.

A pass over one log (the dirtiest one whose dirty ratio reaches ``min.cleanable.dirty.ratio``, or one
past ``max.compaction.lag.ms``, or one whose retained tombstones' delete horizon has passed):

1. the dirty section, ``[first dirty offset, first uncleanable offset)``, is read into a bounded
   ``OffsetMap`` (key hash -> latest offset). The first dirty offset comes from
   ``cleaner-offset-checkpoint``; the first uncleanable one is the active segment's base, the first
   offset of an open transaction, or the first segment younger than ``min.compaction.lag.ms``. When
   the map fills (``log.cleaner.dedupe.buffer.size``), the pass stops where it filled and the next
   pass goes on from there;
2. every non-active segment from the log start up to there is rewritten, grouped by size
   (``segment.bytes``, ``segment.index.bytes``) into ``<base>.log.cleaned`` segments, then the
   cleaned segments that fit together by their new sizes are merged (see ``_clean``): a record
   stays if it is its key's latest; tombstones stay until their batch's delete horizon
   (written in the batch on the first clean that keeps them: now + ``delete.retention.ms``);
   aborted transactions' batches go; a transaction marker stays until its transaction has no data
   left, then for ``delete.retention.ms``. Batches keep their base offset, last offset delta,
   producer id/epoch/base sequence, flags and records' headers; a producer's last batch is kept as
   a header-only batch when all its records went (the producer's sequence state lives in it);
3. each group is swapped in with Kafka's protocol: ``.cleaned`` -> ``.swap``, old segments ->
   ``.deleted``, ``.swap`` -> final names, then the log's segment list changes in one step on the
   owner's thread (reads see the old segments or the new one, never a mix: ``_swap``);
   ``.deleted`` files are removed after ``file.delete.delay.ms``. ``PartitionLog.open`` completes
   or rolls back an interrupted swap (minibroker/storage/segment_swap.py).

Where the work runs: ``clean_once`` sends the pass's heavy work (reading the non-active segments,
building the offset map, filtering and rewriting batches, writing and fsyncing ``.cleaned`` segments)
as ``_Job`` objects to a worker process (``WorkerProcess``: a child Python started with
``subprocess`` on first need, stopped after ``WORKER_IDLE_SECONDS`` without a job and at ``stop``;
it exits by itself when the broker dies), so that the Python record walk never holds the event
loop's GIL. The offset map stays in the worker between the jobs of a pass. Jobs read only the
segments the loop gave them, by path and size (``_FileRef``), through their own descriptors. On the
loop: choosing the log, the active segment's headers (in ``SLICE_SECONDS`` slices), txn indexes,
the checks that the log still holds the segments cleaned (else the pass is abandoned and its
``.cleaned`` files removed) and each swap's change of the segment list. File work that can block on
a busy disk (a swap's renames, directory fsyncs and opening of the new segment, the checkpoint, the
unlinks of ``.deleted`` files) runs in the loop's default executor (``_Blocking``): measured on a
loaded machine, a swap's renames alone held the loop for ~0.3 s. The offset map reads keys and
offsets only (``v2.record_keys``); batches are decoded only to be rebuilt. ``clean_now`` runs it
all on the caller's thread. See docs/storage.md, "Compaction".

Owner: the event loop thread (through ``LogManager``); not thread-safe. v0/v1 entries are not
compacted: a log holding any is skipped, with the reason logged once.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import os
import pickle
import shutil
import signal
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any, NamedTuple

import crc32c

from minibroker.records import v2
from minibroker.records.control import ControlType, read_end_txn_marker
from minibroker.records.framing import entry_size_at, read_entry, scan_entries
from minibroker.records.record import TimestampType
from minibroker.storage import checkpoints as ckpt
from minibroker.storage.log_dir_move import crash_hook_from_env
from minibroker.storage.partition_log import PartitionLog
from minibroker.storage.producer_state import snapshot_path
from minibroker.storage.segment import LogSegment
from minibroker.storage.segment_swap import remove_files, rename_segment_files, segment_paths
from minibroker.storage.txn_index import AbortedTxn

__all__ = ["CLEANER_OFFSET_CHECKPOINT", "CleanerSettings", "LogCleaner", "OffsetMap", "SWAP_STEPS"]

log = logging.getLogger(__name__)

CLEANER_OFFSET_CHECKPOINT = "cleaner-offset-checkpoint"
SLICE_SECONDS = 0.002  # loop-side work (the active segment's headers) between two yields to the loop
_READ_CHUNK = 1 << 20
_INT32_MAX = 2**31 - 1
_U32 = struct.Struct(">I")
_I32 = struct.Struct(">i")
# Named points of a swap, for crash tests (``LogCleaner.crash_hook(step)``).
SWAP_STEPS = ("cleaned_written", "swap_renamed", "old_deleted", "swap_done")
MERGE_SUFFIX = ":merge"  # "<step>:merge": only at a swap that replaces several old segments
# Test hook: a broker started with MINIBROKER_CLEANER_CRASH_AT=<one of SWAP_STEPS>[:merge] in its
# environment ends its process with os._exit(CRASH_EXIT_CODE) when a swap (with ":merge": a swap of
# several old segments for one) reaches that step (kill -9 tests).
CRASH_AT_ENV = "MINIBROKER_CLEANER_CRASH_AT"
CRASH_EXIT_CODE = 86


class OffsetMap:
    """Key hash (MD5, as Kafka's SkimpyOffsetMap) -> latest offset, bounded to what
    ``memory`` bytes of 24-byte slots hold at ``load_factor``."""

    BYTES_PER_ENTRY = 16 + 8

    def __init__(self, memory: int, load_factor: float = 0.9):
        self.slots = max(1, int(memory) // self.BYTES_PER_ENTRY)
        self.max_entries = max(1, int(self.slots * load_factor))
        self._map: dict[bytes, int] = {}
        self.latest_offset = -1  # last offset read into the map (records or not)

    @staticmethod
    def hash_key(key: bytes) -> bytes:
        return hashlib.md5(key).digest()

    def put(self, key: bytes, offset: int) -> None:
        self._map[self.hash_key(key)] = offset

    def get(self, key: bytes) -> int:
        return self._map.get(self.hash_key(key), -1)

    def has_room_for(self, records: int) -> bool:
        return len(self._map) + records <= self.max_entries

    def __len__(self) -> int:
        return len(self._map)


class CleanerSettings(NamedTuple):
    enable: bool
    threads: int
    backoff_ms: int
    dedupe_buffer_size: int
    io_buffer_load_factor: float
    io_max_bytes_per_second: float

    @classmethod
    def from_config(cls, config: Mapping[str, Any] | None) -> CleanerSettings:
        from minibroker.config import BROKER_CONFIGS

        def value(key):
            raw = (config or {}).get(key) if config is not None else None
            return BROKER_CONFIGS[key].default if raw is None else raw

        enable = value("log.cleaner.enable")
        if isinstance(enable, str):
            enable = enable.strip().lower() == "true"
        threads = max(1, int(value("log.cleaner.threads")))
        return cls(
            bool(enable),
            threads,
            int(value("log.cleaner.backoff.ms")),
            # Kafka splits the buffer between the threads; one pass uses one thread's share.
            int(value("log.cleaner.dedupe.buffer.size")) // threads,
            float(value("log.cleaner.io.buffer.load.factor")),
            float(value("log.cleaner.io.max.bytes.per.second")),
        )


class LogToClean(NamedTuple):
    plog: PartitionLog
    first_dirty: int
    first_uncleanable: int
    clean_bytes: int
    dirty_bytes: int
    needs_compaction_now: bool

    @property
    def ratio(self) -> float:
        total = self.clean_bytes + self.dirty_bytes
        return self.dirty_bytes / total if total else 0.0


class CleanerStats:
    """Counters for /metrics."""

    def __init__(self):
        self.runs = 0
        self.bytes_read = 0
        self.bytes_written = 0
        self.records_removed = 0
        self.aborted_swaps = 0
        self.dirty_ratio: dict[tuple[str, int], float] = {}


class _ProducerSummary(NamedTuple):
    last_data_offset: dict[int, int]  # producer id -> last offset of its last data batch
    last_batch_offset: dict[int, int]  # producer id -> last offset of its last batch (markers too)
    first_unstable_offset: int | None  # first offset of the earliest open transaction


class _Unsupported(Exception):
    """The log holds entries the cleaner does not rewrite (v0/v1)."""


class _SwapAbandoned(Exception):
    """The log changed under the pass (retention, truncation, deletion): its cleaned files go."""


class _TxnTracker:
    """Kafka's CleanedTransactionMetadata for one group: which transactional batches belong to
    aborted transactions, and which markers have no data left."""

    def __init__(self, aborted: list[AbortedTxn]):
        self._pending = sorted(aborted, key=lambda t: t.first_offset)
        self._next = 0
        self._ongoing_aborted: dict[int, list] = {}  # pid -> [AbortedTxn, data seen in this group]
        self._ongoing_committed: set[int] = set()
        self.kept_aborts: list[AbortedTxn] = []  # txn index entries of the cleaned segment

    def _consume_up_to(self, offset: int) -> None:
        while self._next < len(self._pending) and self._pending[self._next].first_offset <= offset:
            txn = self._pending[self._next]
            self._ongoing_aborted[txn.producer_id] = [txn, False]
            self._next += 1

    def on_data_batch(self, h: v2.BatchHeader) -> bool:
        """True when the batch belongs to an aborted transaction."""
        self._consume_up_to(h.last_offset)
        if not h.is_transactional:
            return False
        aborted = self._ongoing_aborted.get(h.producer_id)
        if aborted is not None:
            aborted[1] = True
            return True
        self._ongoing_committed.add(h.producer_id)
        return False

    def on_control_batch(self, h: v2.BatchHeader, buf, position: int) -> bool:
        """True when the marker's transaction has no data left here (the marker may go)."""
        self._consume_up_to(h.last_offset)
        if h.record_count == 0:
            return True  # an emptied control batch: cleaned before
        marker = read_end_txn_marker(buf, position)
        if marker is None:
            return False
        if marker.control_type == ControlType.ABORT:
            aborted = self._ongoing_aborted.pop(h.producer_id, None)
            if aborted is not None and aborted[1]:
                self.kept_aborts.append(aborted[0])
                return False
            return True
        had_data = h.producer_id in self._ongoing_committed
        self._ongoing_committed.discard(h.producer_id)
        return not had_data


def _read_entries(seg_file, size: int) -> Iterator[tuple[bytes, Any]]:
    """(buffer, EntryInfo) of every whole entry of a segment file, ``_READ_CHUNK`` at a time."""
    fd = seg_file.fileno()
    pos = 0
    while pos < size:
        buf = os.pread(fd, min(_READ_CHUNK, size - pos), pos)
        end = 0
        for info in scan_entries(buf):
            yield buf, info
            end = info.position + info.size
        if end == 0:  # one entry larger than the chunk
            need = entry_size_at(buf, 0)
            if need is None or need > size - pos:
                return
            buf = os.pread(fd, need, pos)
            yield buf, read_entry(buf, 0)
            end = need
        pos += end


class _FileRef(NamedTuple):
    """A non-active segment's ``.log`` as the loop saw it when the pass took it: what a job reads
    (``path`` up to ``size``, through its own descriptor: ``_SegmentReader``). Picklable: jobs may run
    in the worker process."""

    base_offset: int
    next_offset: int
    path: str
    size: int
    file_id: tuple[int, int]  # (st_dev, st_ino) of the .log when taken


class _SegmentRef(NamedTuple):
    """A ``_FileRef`` and, for the loop's checks that the log still holds it, its ``LogSegment``
    (which jobs never touch)."""

    segment: LogSegment
    file: _FileRef

    @property
    def base_offset(self) -> int:
        return self.file.base_offset

    @property
    def next_offset(self) -> int:
        return self.file.next_offset

    @property
    def size(self) -> int:
        return self.file.size


def _segment_ref(seg: LogSegment) -> _SegmentRef:
    if seg.file is None:
        raise _SwapAbandoned("a segment was closed")
    st = os.fstat(seg.file.fileno())
    return _SegmentRef(seg, _FileRef(seg.base_offset, seg.next_offset, seg.log_path, seg.size,
                                     (st.st_dev, st.st_ino)))


class _SegmentReader:
    """A job's own read-only descriptor on a ``_FileRef``'s file: the same file the loop saw (else
    ``_SwapAbandoned``), whatever the loop does to its ``LogSegment`` meanwhile."""

    def __init__(self, ref: _FileRef):
        try:
            self._fd = os.open(ref.path, os.O_RDONLY)
        except FileNotFoundError:
            raise _SwapAbandoned(f"{ref.path} went away during the pass") from None
        st = os.fstat(self._fd)
        if (st.st_dev, st.st_ino) != ref.file_id or st.st_size < ref.size:
            os.close(self._fd)
            raise _SwapAbandoned(f"{ref.path} changed during the pass")

    def fileno(self) -> int:
        return self._fd

    def __enter__(self) -> _SegmentReader:
        return self

    def __exit__(self, *exc) -> None:
        os.close(self._fd)


class _Job(NamedTuple):
    """Work of a pass for the worker (``_JOBS[name](*args)``): its result is sent back into the pass.
    It reads only ``_FileRef`` files and writes only ``.cleaned`` ones; name and arguments are
    picklable, so the worker process can run it."""

    name: str
    args: tuple

    def run_here(self):
        return _JOBS[self.name](*self.args)


class _Blocking(NamedTuple):
    """File work of a pass that may block in the kernel (renames, fsyncs, opening a segment and
    mapping its indexes, unlinks, the checkpoint): ``clean_once`` runs it in the loop's default
    executor while the loop goes on, ``clean_now`` on the caller's thread. Its result or exception
    is sent back into the pass. It touches files only, never what the loop reads (the log's list)."""

    fn: Callable
    args: tuple

    def run_here(self):
        return self.fn(*self.args)


class _Counts:
    """What a job read, wrote and dropped, sent back for ``CleanerStats``."""

    def __init__(self):
        self.bytes_read = 0
        self.bytes_written = 0
        self.records_removed = 0


class _Pace:
    """A job's ``log.cleaner.io.max.bytes.per.second`` (as Kafka's Throttler); in the worker process,
    also the check that the broker is still there before each entry (``_parent_pid``)."""

    def __init__(self, rate: float = float("inf")):
        self.rate = rate
        self._start = time.monotonic()
        self._bytes = 0

    def ahead(self, nbytes: int) -> float:
        """Seconds to wait after ``nbytes`` more, to keep to the rate."""
        self._bytes += nbytes
        if self.rate >= 1e300:
            return 0.0
        return self._bytes / self.rate - (time.monotonic() - self._start)

    def add(self, nbytes: int) -> None:
        """In the job, at each entry."""
        if _parent_pid is not None and os.getppid() != _parent_pid:
            os._exit(0)  # the broker died (kill -9): write nothing more, its next start cleans up
        wait = self.ahead(nbytes)
        if wait > 0:
            time.sleep(wait)


class _ProducerScan:
    """Accumulates ``_ProducerSummary`` from batch headers in log order (worker, then loop)."""

    def __init__(self):
        self.last_data: dict[int, int] = {}
        self.last_batch: dict[int, int] = {}
        self.open_txn: dict[int, int] = {}

    def add(self, buf, info) -> None:
        if info.magic != 2:
            raise _Unsupported(f"entry of magic {info.magic} at offset {info.base_offset}; "
                               "only v2 batches are compacted")
        h = v2.BatchHeader(buf, info.position)
        pid = h.producer_id
        if pid < 0:
            return
        self.last_batch[pid] = info.last_offset
        if h.is_control:
            self.open_txn.pop(pid, None)
        else:
            self.last_data[pid] = info.last_offset
            if h.is_transactional:
                self.open_txn.setdefault(pid, info.base_offset)

    def summary(self) -> _ProducerSummary:
        first_unstable = min(self.open_txn.values()) if self.open_txn else None
        return _ProducerSummary(self.last_data, self.last_batch, first_unstable)


def _patch_header(batch: bytearray, last_offset_delta: int) -> bytes:
    """Restore the original last offset delta (the producer's last sequence depends on it, as in
    Kafka's overrideLastOffset) and the CRC."""
    _I32.pack_into(batch, v2.LAST_OFFSET_DELTA_OFFSET, last_offset_delta)
    _U32.pack_into(batch, v2.CRC_OFFSET, crc32c.crc32c(memoryview(batch)[v2.ATTRIBUTES_OFFSET:]))
    return bytes(batch)


def _empty_batch(h: v2.BatchHeader) -> bytes:
    """A header-only batch (Kafka's writeEmptyHeader): keeps a producer's epoch and last sequence."""
    attrs = h.attributes & ~v2.COMPRESSION_MASK & ~v2.DELETE_HORIZON_MASK
    buf = bytearray(v2.HEADER_SIZE)
    v2.HEADER.pack_into(buf, 0, h.base_offset, v2.HEADER_SIZE - 12, h.partition_leader_epoch, 2, 0, attrs,
                        h.last_offset_delta, h.max_timestamp, h.max_timestamp, h.producer_id,
                        h.producer_epoch, h.base_sequence, 0)
    return _patch_header(buf, h.last_offset_delta)


def _placeholder_batch(h: v2.BatchHeader) -> bytes:
    buf = bytearray(v2.HEADER_SIZE)
    v2.HEADER.pack_into(buf, 0, h.base_offset, v2.HEADER_SIZE - 12, h.partition_leader_epoch, 2, 0,
                        h.attributes & v2.TIMESTAMP_TYPE_MASK, h.last_offset_delta, h.max_timestamp,
                        h.max_timestamp, v2.NO_PRODUCER_ID, v2.NO_PRODUCER_EPOCH, v2.NO_SEQUENCE, 0)
    return _patch_header(buf, h.last_offset_delta)


def _rebuild(h: v2.BatchHeader, records, delete_horizon: int | None) -> bytes:
    log_append = h.timestamp_type == TimestampType.LOG_APPEND_TIME
    built = v2.build_batch(
        records,
        base_offset=h.base_offset,
        compression=h.compression,
        timestamp_type=h.timestamp_type,
        log_append_time=h.max_timestamp if log_append else v2.NO_TIMESTAMP,
        producer_id=h.producer_id,
        producer_epoch=h.producer_epoch,
        base_sequence=h.base_sequence,
        is_transactional=h.is_transactional,
        is_control=h.is_control,
        partition_leader_epoch=h.partition_leader_epoch,
        delete_horizon_ms=delete_horizon,
    )
    return _patch_header(bytearray(built), h.last_offset_delta)


# ---- jobs: what the worker runs (module functions of picklable arguments) ----------------------------

# The offset map of the pass in progress, by pass key, in the process that runs the jobs: built by
# one job, read by the next ones (the worker process keeps only the newest; ``_clean`` drops its own
# when it runs them here).
_OFFSET_MAPS: dict[str, OffsetMap] = {}
# Set in the worker process (``worker_main``): the broker's pid, checked at each entry.
_parent_pid: int | None = None


def _job_scan_producers(refs: list[_FileRef], rate: float) -> _ProducerScan:
    """The producer summary's part from the non-active segments' batch headers (the log is the only
    producer state storage may read)."""
    pace, scan = _Pace(rate), _ProducerScan()
    for ref in refs:
        with _SegmentReader(ref) as f:
            for buf, info in _read_entries(f, ref.size):
                pace.add(0)
                scan.add(buf, info)
    return scan


def _job_build_offset_map(pass_key: str, refs: list[_FileRef], aborted: list[AbortedTxn], start: int,
                          stop: int, memory: int, load_factor: float, rate: float) -> tuple[int, _Counts]:
    """Kafka's buildOffsetMap, the keys of ``[start, stop)`` (only keys and offsets: read with
    ``v2.record_keys``, not decoded), into a new map kept as ``_OFFSET_MAPS[pass_key]``; stops early
    when the map is full. Returns the offset the pass cleans up to (exclusive)."""
    offset_map = _OFFSET_MAPS[pass_key] = OffsetMap(memory, load_factor)
    pace, counts = _Pace(rate), _Counts()
    txn = _TxnTracker(aborted)
    put = offset_map.put
    for ref in refs:
        if ref.next_offset <= start or ref.base_offset >= stop:
            continue
        with _SegmentReader(ref) as f:
            for buf, info in _read_entries(f, ref.size):
                if info.last_offset < start:
                    continue
                if info.base_offset >= stop:
                    break
                pace.add(info.size)
                h = v2.BatchHeader(buf, info.position)
                if h.is_control:
                    txn.on_control_batch(h, buf, info.position)
                elif not txn.on_data_batch(h):
                    if len(offset_map) and not offset_map.has_room_for(h.record_count):
                        return offset_map.latest_offset + 1, counts  # full: the next pass goes on from here
                    records, rstart, rend = v2.records_section(h)
                    spans = v2.record_keys(records, rstart, rend, h.record_count)
                    if spans is None:  # not walkable: the full decode says why
                        for record in v2.batch_records(buf, info.position):
                            if record.key is not None and record.offset >= start:
                                put(record.key, record.offset)
                    else:
                        base, view = h.base_offset, memoryview(records)
                        for delta, key_start, key_end, _, _ in spans:
                            if key_start >= 0 and base + delta >= start:
                                put(view[key_start:key_end], base + delta)
                offset_map.latest_offset = info.last_offset
                counts.bytes_read += info.size
    offset_map.latest_offset = max(offset_map.latest_offset, stop - 1)  # the whole section is mapped
    return stop, counts


def _job_clean_group(pass_key: str, directory: str, index_bytes: int, interval: int, refs: list[_FileRef],
                     aborted: list[AbortedTxn], summary: _ProducerSummary, now_ms: int, delete_retention: int,
                     rate: float) -> tuple[list[int], _Counts]:
    """Write the group's ``<base>.log.cleaned`` segment (+ indexes), fsynced and closed, with the
    map ``_OFFSET_MAPS[pass_key]``; returns the delete horizons it keeps. On any failure (a full
    disk) its files are removed."""
    offset_map = _OFFSET_MAPS[pass_key]
    pace, counts = _Pace(rate), _Counts()
    base = refs[0].base_offset
    group_end = refs[-1].next_offset
    horizons: list[int] = []
    txn = _TxnTracker(aborted)
    remove_files(segment_paths(directory, base, ".cleaned"))
    pace.add(0)  # (the broker is still there before a file is made)
    cleaned = None
    try:
        cleaned = LogSegment(directory, base, index_max_bytes=index_bytes, index_interval_bytes=interval,
                             active=True, file_suffix=".cleaned")
        for n, ref in enumerate(refs):
            with _SegmentReader(ref) as f:
                for buf, info in _read_entries(f, ref.size):
                    pace.add(info.size)
                    counts.bytes_read += info.size
                    out, horizon = _filter_batch(buf, info, offset_map, summary, txn, now_ms,
                                                 delete_retention, counts)
                    if horizon is not None:
                        horizons.append(horizon)
                    if out is None and n == len(refs) - 1 and info.last_offset == group_end - 1:
                        # The group's last batch stays as a header without records or producer: the
                        # cleaned segment keeps the group's offset range, which recovery of an
                        # interrupted swap relies on to find every segment it replaced.
                        out = _placeholder_batch(v2.BatchHeader(buf, info.position))
                    if out is None:
                        continue
                    out_info = read_entry(out, 0)
                    cleaned.append(out, first_offset=out_info.base_offset,
                                   last_offset=out_info.last_offset, max_timestamp=out_info.max_timestamp,
                                   offset_of_max_timestamp=out_info.last_offset)
                    counts.bytes_written += len(out)
        for kept in txn.kept_aborts:
            cleaned.txn_index.append(kept)
        cleaned.seal()
        cleaned.flush()  # fsyncs the .log.cleaned and its indexes
        cleaned.close()
        return horizons, counts
    except BaseException:
        if cleaned is not None and cleaned.file is not None:
            try:
                cleaned.close()
            except OSError:
                pass
        remove_files(segment_paths(directory, base, ".cleaned"))
        raise


def _filter_batch(buf, info, offset_map: OffsetMap, summary: _ProducerSummary, txn: _TxnTracker,
                  now_ms: int, delete_retention: int, counts: _Counts) -> tuple[bytes | None, int | None]:
    """The batch to write for the entry (None: drop it) and the delete horizon it carries."""
    if info.magic != 2:
        raise _Unsupported(f"entry of magic {info.magic} at offset {info.base_offset}")
    h = v2.BatchHeader(buf, info.position)
    original = bytes(memoryview(buf)[info.position:info.position + info.size])
    horizon = h.base_timestamp if h.has_delete_horizon else None
    pid = h.producer_id
    # Kafka's retention of a producer's last batch, kept (maybe empty) for its sequence state.
    last_of_producer = pid >= 0 and (
        summary.last_data_offset.get(pid) == info.last_offset
        or (h.is_control and summary.last_batch_offset.get(pid) == info.last_offset)
    )
    if h.is_control:
        can_discard = txn.on_control_batch(h, buf, info.position)
        if can_discard and horizon is not None and horizon <= now_ms:
            return (_empty_batch(h) if last_of_producer else None), None
        if can_discard and horizon is None:  # its transaction is gone: start the marker's horizon
            horizon = now_ms + delete_retention
            records = v2.batch_records(buf, info.position)
            return _rebuild(h, records, horizon), horizon
        return original, horizon if can_discard else None
    if txn.on_data_batch(h):
        counts.records_removed += h.record_count
        return (_empty_batch(h) if last_of_producer else None), None
    # Which records stay, from their keys and offsets only (``v2.record_keys``); the batch is decoded
    # only when it must be rebuilt: some records go, or its tombstones get their horizon.
    data, rstart, rend = v2.records_section(h)
    spans = v2.record_keys(data, rstart, rend, h.record_count)
    if spans is None:  # not walkable: the full decode says why
        decoded = v2.batch_records(buf, info.position)
        deltas = [r.offset - h.base_offset for r in decoded]
        keys = [r.key for r in decoded]
        nulls = [r.value is None for r in decoded]
    else:
        view = memoryview(data)
        deltas = [span[0] for span in spans]
        keys = [view[s:e] if s >= 0 else None for _, s, e, _, _ in spans]
        nulls = [span[3] < 0 for span in spans]
    base, latest = h.base_offset, offset_map.latest_offset
    keep_index, tombstones = [], False
    for i, delta in enumerate(deltas):
        offset, value_null = base + delta, nulls[i]
        if offset > latest:
            keep = True  # past the map: the next pass decides
        elif keys[i] is None:
            keep = False
        else:
            keep = offset_map.get(keys[i]) <= offset and (
                not value_null or horizon is None or now_ms < horizon)
        if keep:
            keep_index.append(i)
            tombstones = tombstones or value_null
    counts.records_removed += len(deltas) - len(keep_index)
    if not keep_index:
        return (_empty_batch(h) if last_of_producer else None), None
    if len(keep_index) == len(deltas) and not (tombstones and horizon is None):
        return original, horizon if tombstones else None
    records = v2.batch_records(buf, info.position)
    kept = [records[i] for i in keep_index]
    if tombstones and horizon is None:
        horizon = now_ms + delete_retention
        return _rebuild(h, kept, horizon), horizon
    return _rebuild(h, kept, horizon), horizon if tombstones else None


def _job_pid() -> int:
    return os.getpid()


_JOBS: dict[str, Callable] = {
    "scan_producers": _job_scan_producers,
    "build_offset_map": _job_build_offset_map,
    "clean_group": _job_clean_group,
    "pid": _job_pid,
}


# ---- where jobs run --------------------------------------------------------------------------------

WORKER_IDLE_SECONDS = 60.0  # a worker process with no job for this long is stopped (started again on need)
_WATCH_PARENT_SECONDS = 0.2
_FRAME = struct.Struct(">I")
_WORKER_BOOT = "from minibroker.storage.cleaner import worker_main; worker_main()"


class WorkerDied(RuntimeError):
    """The worker process went away (killed, out of memory) before answering: the pass fails and the
    next one starts a new worker."""


def worker_main() -> None:
    """The worker process (``python -c _WORKER_BOOT``, started by ``WorkerProcess``): reads pickled
    ``(job name, args)`` frames on stdin, answers ``(ok, result or exception)`` frames on stdout, one
    at a time; exits at EOF and as soon as its parent is gone (a broker killed with -9 leaves no
    worker behind: a watcher thread checks every ``_WATCH_PARENT_SECONDS``, and jobs at each entry)."""
    global _parent_pid
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the broker decides when its worker stops
    _parent_pid = parent = os.getppid()
    replies = os.dup(1)
    os.dup2(2, 1)  # a stray print goes to stderr, never into the replies

    def watch_parent():
        while True:
            time.sleep(_WATCH_PARENT_SECONDS)
            if os.getppid() != parent:
                os._exit(0)

    threading.Thread(target=watch_parent, name="watch-parent", daemon=True).start()
    while True:
        header = _read_exactly(0, _FRAME.size)
        if header is None:
            return
        body = _read_exactly(0, _FRAME.unpack(header)[0])
        if body is None:
            return
        name, args = pickle.loads(body)
        if name == "build_offset_map":
            _OFFSET_MAPS.clear()  # one pass at a time: an abandoned pass's map goes
        try:
            reply = pickle.dumps((True, _JOBS[name](*args)), pickle.HIGHEST_PROTOCOL)
        except BaseException as exc:  # noqa: BLE001 - sent back, raised in the pass
            try:
                reply = pickle.dumps((False, exc), pickle.HIGHEST_PROTOCOL)
            except Exception:
                reply = pickle.dumps((False, RuntimeError(f"{type(exc).__name__}: {exc}")))
        _write_all(replies, _FRAME.pack(len(reply)) + reply)


def _read_exactly(fd: int, n: int) -> bytes | None:
    parts, left = [], n
    while left:
        chunk = os.read(fd, min(left, 1 << 20))
        if not chunk:
            return None
        parts.append(chunk)
        left -= len(chunk)
    return b"".join(parts)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


class WorkerProcess:
    """A child Python process running the pass's jobs (``worker_main``), so that the record walk
    holds another interpreter's GIL, never the event loop's. Started with ``subprocess`` (no fork of
    the broker's process, no re-import of its ``__main__``); requests are written on its stdin (small:
    paths, offsets, the producer summary), replies read on the loop through ``add_reader``. Owner:
    the ``LogCleaner`` on the event loop; one job at a time."""

    def __init__(self):
        started = time.monotonic()
        root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
        self.proc = subprocess.Popen([sys.executable, "-c", _WORKER_BOOT], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, env=env, close_fds=True)
        self.pid = self.proc.pid
        self._out = self.proc.stdout.fileno()
        os.set_blocking(self._out, False)
        self._buf = bytearray()
        self.start_seconds: float | None = None  # process start to its first answer
        self._started = started
        self.last_used = started

    @property
    def alive(self) -> bool:
        return self.proc.poll() is None

    async def run(self, job: _Job):
        loop = asyncio.get_running_loop()
        data = pickle.dumps((job.name, job.args), pickle.HIGHEST_PROTOCOL)
        reply: asyncio.Future = loop.create_future()
        self._buf.clear()
        try:
            _write_all(self.proc.stdin.fileno(), _FRAME.pack(len(data)) + data)
        except OSError as exc:  # a dead worker: EPIPE
            self.kill()
            raise WorkerDied(f"the cleaner worker process {self.pid} is gone ({exc})") from None
        loop.add_reader(self._out, self._readable, reply)
        try:
            ok, value = await reply
        except BaseException:
            self.kill()  # cancelled mid-job (or it died): the job's state is unknown, the process goes
            raise
        finally:
            loop.remove_reader(self._out)
        self.last_used = time.monotonic()
        if self.start_seconds is None:
            self.start_seconds = self.last_used - self._started
        if not ok:
            raise value
        return value

    def _readable(self, reply: asyncio.Future) -> None:
        if reply.done():
            return
        try:
            chunk = os.read(self._out, 1 << 20)
        except BlockingIOError:
            return
        except OSError as exc:
            reply.set_exception(WorkerDied(f"reading from the cleaner worker process {self.pid}: {exc}"))
            return
        if not chunk:
            code = self.proc.poll()
            reply.set_exception(WorkerDied(f"the cleaner worker process {self.pid} exited ({code})"))
            return
        self._buf += chunk
        if len(self._buf) >= _FRAME.size:
            size = _FRAME.unpack_from(self._buf)[0]
            if len(self._buf) >= _FRAME.size + size:
                reply.set_result(pickle.loads(bytes(self._buf[_FRAME.size:_FRAME.size + size])))
                self._buf.clear()

    def kill(self) -> None:
        """SIGKILL and reap it (a job in flight stops where it is; its ``.cleaned`` files are the
        caller's to remove)."""
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        self._close_pipes()

    def close(self) -> None:
        """EOF on its stdin: it exits between jobs; killed if it does not at once."""
        try:
            self.proc.stdin.close()
        except OSError:
            pass
        try:
            self.proc.wait(2)
        except subprocess.TimeoutExpired:
            self.kill()
        self._close_pipes()

    def _close_pipes(self) -> None:
        for pipe in (self.proc.stdin, self.proc.stdout):
            try:
                pipe.close()
            except OSError:
                pass

    def rss_peak_bytes(self) -> int | None:
        """VmHWM of the process (Linux), for the benchmark and /metrics-minded operators."""
        try:
            with open(f"/proc/{self.pid}/status") as f:
                for line in f:
                    if line.startswith("VmHWM:"):
                        return int(line.split()[1]) * 1024
        except OSError:
            pass
        return None


class ThreadWorker:
    """Jobs in one thread of this process (tests; the loop then competes with it for the GIL)."""

    pid = os.getpid()
    alive = True
    start_seconds = 0.0

    def __init__(self):
        from concurrent.futures import ThreadPoolExecutor

        self._executor = ThreadPoolExecutor(1, thread_name_prefix="minibroker-cleaner")
        self.last_used = time.monotonic()

    async def run(self, job: _Job):
        fut = self._executor.submit(job.run_here)
        try:
            return await asyncio.wrap_future(fut)
        except asyncio.CancelledError:
            await asyncio.wait([asyncio.wrap_future(fut)])  # nothing of the pass goes on after a close
            raise
        finally:
            self.last_used = time.monotonic()

    def kill(self) -> None:
        self.close()

    def close(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)

    def rss_peak_bytes(self) -> int | None:
        return None


def group_segments_by_size(segments: list[LogSegment], max_size: int, max_index_size: int,
                           first_offset_after: Callable[[int], int]) -> list[list[LogSegment]]:
    """Kafka's groupSegmentsBySize: consecutive segments whose total log size, offset index size
    and time index size stay within the limits, and whose offsets fit one segment's relative int32."""
    groups = []
    i = 0
    while i < len(segments):
        group = [segments[i]]
        log_size = segments[i].size
        index_size = segments[i].index.entries * 8
        time_size = segments[i].time_index.entries * 12
        i += 1
        while i < len(segments):
            seg = segments[i]
            if (log_size + seg.size > max_size or index_size + seg.index.entries * 8 > max_index_size
                    or time_size + seg.time_index.entries * 12 > max_index_size
                    or first_offset_after(i) - 1 - group[0].base_offset > _INT32_MAX):
                break
            group.append(seg)
            log_size += seg.size
            index_size += seg.index.entries * 8
            time_size += seg.time_index.entries * 12
            i += 1
        groups.append(group)
    return groups


class LogCleaner:
    """Compacts the logs of a ``LogManager``. See the module docstring."""

    def __init__(self, log_manager, config: Mapping[str, Any] | None = None, *, clock=time.time,
                 worker: str = "process"):
        self.log_manager = log_manager
        self.settings = CleanerSettings.from_config(config if config is not None else log_manager.config)
        self._clock = clock
        self.stats = CleanerStats()
        self.crash_hook: Callable[[str], None] | None = _crash_hook_from_env()  # tests: at each SWAP_STEPS
        self._checkpoints: dict[str, dict[tuple[str, int], int]] = {}
        self._delete_horizons: dict[tuple[str, int], int] = {}  # earliest horizon kept by the last pass
        self._skipped: set[tuple[str, int]] = set()  # logs with v0/v1 entries (logged once)
        self._pending_deletes: list[tuple[float, list[str]]] = []
        self._task: asyncio.Task | None = None
        # Where clean_once's jobs run: "process" (WorkerProcess, started on first use, stopped after
        # WORKER_IDLE_SECONDS without a job and at stop) or "thread" (ThreadWorker: tests).
        self.worker_kind = worker
        self.worker_idle_seconds = WORKER_IDLE_SECONDS
        self.worker_start_seconds: float | None = None  # of the last worker started
        self._worker: WorkerProcess | ThreadWorker | None = None
        self._new_worker = False
        self._in_pass = False
        self._passes = 0
        for d in log_manager.log_dirs:
            try:
                self._checkpoints[d] = ckpt.read_offset_checkpoint(os.path.join(d, CLEANER_OFFSET_CHECKPOINT))
            except ckpt.CheckpointError as exc:
                log.warning("ignoring %s", exc)
                self._checkpoints[d] = {}

    # ---- checkpoint ---------------------------------------------------------------------------
    def _dir_of(self, plog: PartitionLog) -> str:
        return os.path.dirname(plog.directory)

    def first_dirty_offset(self, plog: PartitionLog) -> int:
        return self._checkpoints.get(self._dir_of(plog), {}).get((plog.topic, plog.partition), -1)

    def _set_checkpoint(self, plog: PartitionLog, offset: int) -> Iterator[_Blocking]:
        """The table changes here; its file (written, fsynced, renamed) in a ``_Blocking`` step."""
        d = self._dir_of(plog)
        table = self._checkpoints.setdefault(d, {})
        table[(plog.topic, plog.partition)] = offset
        live = {(p.topic, p.partition) for p in self.log_manager.logs()}
        for key in [k for k in table if k not in live]:
            del table[key]  # deleted topics
        path = os.path.join(d, CLEANER_OFFSET_CHECKPOINT)
        yield _Blocking(ckpt.write_offset_checkpoint, (path, dict(table)))

    # ---- choosing a log -----------------------------------------------------------------------
    def cleanable(self, plog: PartitionLog, now_ms: int) -> LogToClean:
        """The log's dirty section and ratio (Kafka's LogCleanerManager.cleanableOffsets)."""
        segments = plog.segments
        active = segments[-1]
        cfg = plog.config
        first_dirty = self.first_dirty_offset(plog)
        if first_dirty < plog.log_start_offset or first_dirty > active.base_offset:
            first_dirty = plog.log_start_offset
        uncleanable = active.base_offset
        min_lag = int(cfg.get("min.compaction.lag.ms", 0))
        dirty = [s for s in segments[:-1] if s.next_offset > first_dirty]
        if min_lag > 0:
            for seg in dirty:
                if seg.largest_timestamp() > now_ms - min_lag:
                    uncleanable = min(uncleanable, seg.base_offset)
                    break
        uncleanable = max(uncleanable, first_dirty)
        clean_bytes = sum(s.size for s in segments if s.next_offset <= first_dirty and s is not active)
        dirty_bytes = sum(s.size for s in dirty if s.base_offset < uncleanable)
        max_lag = int(cfg.get("max.compaction.lag.ms", 2**63 - 1))
        needs_now = False
        if dirty and dirty[0].base_offset < uncleanable and max_lag < 2**63 - 1:
            dirty[0].read_first_batch_timestamp()
            first_ts = dirty[0].first_batch_timestamp
            if first_ts is None or first_ts < 0:
                first_ts = dirty[0].largest_timestamp()
            needs_now = first_ts + max_lag <= now_ms
        return LogToClean(plog, first_dirty, uncleanable, clean_bytes, dirty_bytes, needs_now)

    def _compacted_logs(self) -> Iterator[PartitionLog]:
        for plog in self.log_manager.logs():
            if (plog.closed or plog.offline_reason is not None or plog.read_only
                    or (plog.topic, plog.partition) in self._skipped
                    or self.log_manager.is_moving(plog.topic, plog.partition)  # to another log dir
                    or "compact" not in str(plog.config.get("cleanup.policy", ""))):
                continue
            yield plog

    def dirty_ratios(self, now_ms: int | None = None) -> dict[tuple[str, int], float]:
        """(topic, partition) -> dirty ratio now, of every log the cleaner may compact (/metrics)."""
        now_ms = self._now_ms() if now_ms is None else now_ms
        return {(p.topic, p.partition): self.cleanable(p, now_ms).ratio for p in self._compacted_logs()}

    def grab_filthiest(self, now_ms: int | None = None) -> LogToClean | None:
        now_ms = self._now_ms() if now_ms is None else now_ms
        candidates, horizon_due = [], []
        ratios = {}
        for plog in self._compacted_logs():
            key = (plog.topic, plog.partition)
            ltc = self.cleanable(plog, now_ms)
            ratios[key] = ltc.ratio
            if (ltc.needs_compaction_now and ltc.dirty_bytes > 0) or (
                    ltc.dirty_bytes > 0
                    and ltc.ratio >= float(plog.config.get("min.cleanable.dirty.ratio", 0.5))):
                candidates.append(ltc)
            elif self._delete_horizons.get(key, 2**63) <= now_ms and len(plog.segments) > 1:
                horizon_due.append(ltc)  # tombstones or markers whose horizon passed: remove them
        self.stats.dirty_ratio = ratios
        if candidates:
            return max(candidates, key=lambda ltc: ltc.ratio)
        return horizon_due[0] if horizon_due else None

    def _now_ms(self) -> int:
        return int(self._clock() * 1000)

    # ---- running ------------------------------------------------------------------------------
    def start(self, loop: asyncio.AbstractEventLoop | None = None) -> asyncio.Task | None:
        if not self.settings.enable:
            return None
        if self._task is None or self._task.done():
            loop = loop or asyncio.get_running_loop()
            self._task = loop.create_task(self._run(), name="log-cleaner")
        return self._task

    def stop(self) -> None:
        """Cancel the task and stop the worker (a job in flight in the worker process is killed with
        it; the pass's ``.cleaned`` files are removed when the cancelled task unwinds, else at the
        next start)."""
        if self._task is not None:
            self._task.cancel()
            self._task = None
        self._stop_worker()

    async def aclose(self) -> None:
        """As ``stop``, waiting for the task (which removes the ``.cleaned`` files of a pass cut short)."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self.stop()

    def _stop_worker(self) -> None:
        worker, self._worker = self._worker, None
        if worker is not None:
            worker.kill() if self._in_pass else worker.close()
            log.debug("log cleaner worker %d stopped", worker.pid)

    def _get_worker(self):
        if self._worker is not None and not self._worker.alive:
            log.warning("log cleaner worker process %d is gone; starting another", self._worker.pid)
            self._worker.kill()
            self._worker = None
        if self._worker is None:
            self._worker = ThreadWorker() if self.worker_kind == "thread" else WorkerProcess()
            self._new_worker = True
        return self._worker

    async def _in_worker(self, job: _Job):
        worker = self._get_worker()
        try:
            result = await worker.run(job)
        except WorkerDied:
            self._worker = None
            raise
        if self._new_worker:
            self._new_worker = False
            self.worker_start_seconds = worker.start_seconds
            log.info("log cleaner worker %s %d started in %.3f s", self.worker_kind, worker.pid,
                     worker.start_seconds or 0.0)
        return result

    def _stop_idle_worker(self) -> None:
        worker = self._worker
        if worker is not None and time.monotonic() - worker.last_used >= self.worker_idle_seconds:
            self._stop_worker()

    async def _run(self) -> None:
        while True:
            try:
                due = self._take_due_files()
                if due:  # unlinking big files can block: off the loop
                    await asyncio.get_running_loop().run_in_executor(None, remove_files, due)
                cleaned = await self.clean_once()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("log cleaner pass failed; backing off")
                cleaned = False
            if not cleaned:
                self._stop_idle_worker()
                await asyncio.sleep(self.settings.backoff_ms / 1000)

    async def clean_once(self) -> bool:
        """One pass over the filthiest log: its heavy work in the worker, the rest on the loop in
        cooperative slices; False when nothing was due."""
        ltc = self.grab_filthiest()
        if ltc is None:
            return False
        if self._worker is None or not self._worker.alive:
            # Started (0.3-0.6 s) before the pass takes its "now", which starts delete horizons.
            await self._in_worker(_Job("pid", ()))
        pace = _Pace(self.settings.io_max_bytes_per_second)
        work = self._clean(ltc, pace=pace)
        loop = asyncio.get_running_loop()
        deadline = time.monotonic() + SLICE_SECONDS
        send, value = work.send, None
        self._in_pass = True
        try:
            while True:
                try:
                    step = send(value)
                except StopIteration:
                    return True
                send, value = work.send, None
                if isinstance(step, _Job):
                    try:
                        value = await self._in_worker(step)
                    except asyncio.CancelledError:
                        self._stop_worker()  # killed before its files are removed (work.close)
                        work.close()
                        raise
                    except Exception as exc:  # back into the pass, which abandons it or fails
                        send, value = work.throw, exc
                    deadline = time.monotonic() + SLICE_SECONDS
                    continue
                if isinstance(step, _Blocking):
                    done = loop.run_in_executor(None, step.run_here)
                    try:
                        value = await asyncio.shield(done)
                    except asyncio.CancelledError:
                        await self._finish_blocking_step(work, done)
                        raise
                    except Exception as exc:
                        send, value = work.throw, exc
                    deadline = time.monotonic() + SLICE_SECONDS
                    continue
                ahead = pace.ahead(step)  # log.cleaner.io.max.bytes.per.second, as Kafka's Throttler
                if ahead > 0:
                    await asyncio.sleep(ahead)
                    deadline = time.monotonic() + SLICE_SECONDS
                elif time.monotonic() >= deadline:
                    await asyncio.sleep(0)
                    deadline = time.monotonic() + SLICE_SECONDS
        finally:
            self._in_pass = False

    @staticmethod
    async def _finish_blocking_step(work, done: asyncio.Future) -> None:
        """The pass is cancelled (the cleaner closes) while a ``_Blocking`` step runs in its thread:
        wait for it, so that no file of the pass moves after the close, and give the pass its
        result, so that a swap whose files moved also replaces the segments in the log; then end
        the pass (the cancellation goes on in the caller)."""
        try:
            await asyncio.wait([done])
            if done.exception() is None:
                work.send(done.result())
        except (StopIteration, Exception):
            pass
        finally:
            work.close()

    def clean_now(self, plog: PartitionLog | None = None, now_ms: int | None = None) -> bool:
        """A whole pass synchronously on the caller's thread (tools and tests): over ``plog`` if
        given (whatever its ratio), else the filthiest log. False when there was nothing to clean."""
        now_ms = self._now_ms() if now_ms is None else now_ms
        ltc = self.grab_filthiest(now_ms) if plog is None else self.cleanable(plog, now_ms)
        if ltc is None:
            return False
        work = self._clean(ltc, now_ms)
        send, value = work.send, None
        while True:
            try:
                step = send(value)
            except StopIteration:
                break
            send, value = work.send, None
            if isinstance(step, (_Job, _Blocking)):
                try:
                    value = step.run_here()
                except Exception as exc:
                    send, value = work.throw, exc
        remove_files(self._take_due_files())
        return True

    def _take_due_files(self) -> list[str]:
        """The ``.deleted`` files whose ``file.delete.delay.ms`` has passed, taken off the list."""
        now = time.monotonic()
        due = [path for at, paths in self._pending_deletes if at <= now for path in paths]
        self._pending_deletes = [(at, p) for at, p in self._pending_deletes if at > now]
        return due

    # ---- one pass -----------------------------------------------------------------------------
    def _clean(self, ltc: LogToClean, now_ms: int | None = None, pace: _Pace | None = None
               ) -> Iterator[int | _Job | _Blocking]:
        """The pass as a generator run on the loop (``clean_once``) or by the caller (``clean_now``).
        It yields a ``_Job`` (reading segment files, building the offset map, writing and fsyncing a
        ``.cleaned`` segment: the worker runs it and its result or exception comes back), a
        ``_Blocking`` step (a swap's file work, the checkpoint's write: run in a thread), or bytes
        read on the loop (a point to let the loop run). What touches the log (its segment list,
        configs, txn indexes, the checks) runs here, between two yields; each swap's change of the
        segment list in one synchronous step, after its files moved (``_swap``).

        As Kafka's doClean, the pass rewrites every non-active segment from the log start up to the
        end of what the map covers, in groups of consecutive segments of at most ``segment.bytes``
        (``group_segments_by_size``, by their sizes before cleaning). Then, unlike Kafka, which leaves
        that to the next pass, it regroups the cleaned segments by their new sizes and merges those
        that fit together (the same map: a second filter keeps what the first kept, and drops the
        placeholder batches that kept each old segment's offset range), again until none fit, so a
        log that is cleaned once ends in few segments, not one small segment per old one."""
        plog = ltc.plog
        key = (plog.topic, plog.partition)
        now_ms = self._now_ms() if now_ms is None else now_ms
        pace = pace or _Pace()
        rate = self.settings.io_max_bytes_per_second
        self._passes += 1
        pass_key = f"{os.getpid()}-{id(self)}-{self._passes}"
        self.stats.runs += 1
        started = time.monotonic()
        try:
            if plog.closed or plog.deleted:
                raise _SwapAbandoned("the log was closed")
            active = plog.segments[-1]
            refs = [_segment_ref(s) for s in plog.segments[:-1]]  # what the worker may read
            active_base, active_size = active.base_offset, active.size
            scan = yield _Job("scan_producers", ([r.file for r in refs], rate))
            yield from self._scan_active(active, active_size, scan)  # appended to meanwhile: on the loop
            summary = scan.summary()
            uncleanable = ltc.first_uncleanable
            if summary.first_unstable_offset is not None:
                uncleanable = max(ltc.first_dirty, min(uncleanable, summary.first_unstable_offset))
            self._check_refs(plog, refs)
            start = ltc.first_dirty
            aborted = plog.collect_aborted_transactions(start, uncleanable) if uncleanable > start else []
            end, counts = yield _Job("build_offset_map", (
                pass_key, [r.file for r in refs], aborted, start, uncleanable,
                self.settings.dedupe_buffer_size, self.settings.io_buffer_load_factor, rate))
            self._add_counts(counts)
            cfg = plog.config
            delete_retention = int(cfg.get("delete.retention.ms", 86400000))
            index_bytes, interval = int(cfg["segment.index.bytes"]), int(cfg["index.interval.bytes"])
            segment_bytes = int(cfg["segment.bytes"])
            horizons: list[int] = []
            to_clean = [r for r in refs if r.base_offset < min(end, active_base)]
            merging = False
            while to_clean:
                self._check_refs(plog, to_clean)
                last_base = to_clean[-1].base_offset
                bases = [s.base_offset for s in plog.segments]
                after = dict(zip(bases, bases[1:], strict=False))

                def first_offset_after(i: int, segs=to_clean, after=after) -> int:
                    return after.get(segs[i].base_offset, active_base)

                groups = group_segments_by_size([r.segment for r in to_clean], segment_bytes, index_bytes,
                                                first_offset_after)
                if merging:  # until nothing fits together any more (each round leaves fewer segments)
                    groups = [g for g in groups if len(g) > 1]
                    if not groups:
                        break
                by_segment = {id(r.segment): r for r in to_clean}
                for group in groups:
                    group_refs = [by_segment[id(s)] for s in group]
                    self._check_refs(plog, group_refs)
                    base, group_end = group_refs[0].base_offset, group_refs[-1].next_offset
                    aborted = plog.collect_aborted_transactions(base, group_end) if group_end > base else []
                    try:
                        group_horizons, counts = yield _Job("clean_group", (
                            pass_key, plog.directory, index_bytes, interval, [r.file for r in group_refs],
                            aborted, summary, now_ms, delete_retention, rate))
                        self._add_counts(counts)
                        self._check_refs(plog, group_refs)
                        yield from self._swap(plog, group, base)
                    except BaseException:
                        remove_files(segment_paths(plog.directory, base, ".cleaned"))
                        raise
                    horizons += group_horizons
                # The cleaned segments, by their new sizes: those that fit together are merged.
                merging = True
                to_clean = [_segment_ref(s) for s in plog.segments[:-1] if s.base_offset <= last_base]
                log.debug("%s-%d: %d segments cleaned; merging those that fit in segment.bytes=%d",
                          plog.topic, plog.partition, len(to_clean), segment_bytes)
        except _Unsupported as exc:
            self._skipped.add(key)
            log.warning("%s-%d: not compacted: %s", plog.topic, plog.partition, exc)
            return
        except _SwapAbandoned as exc:
            self.stats.aborted_swaps += 1
            log.info("%s-%d: cleaning pass abandoned: %s", plog.topic, plog.partition, exc)
            return
        finally:
            _OFFSET_MAPS.pop(pass_key, None)  # (jobs run here: clean_now, a thread worker)
        if horizons:
            self._delete_horizons[key] = min(horizons)
        else:
            self._delete_horizons.pop(key, None)
        yield from self._set_checkpoint(plog, end)
        log.info("%s-%d: cleaned up to offset %d in %.3f s (%d segments now)", plog.topic, plog.partition,
                 end, time.monotonic() - started, len(plog.segments))

    def _add_counts(self, counts: _Counts) -> None:
        self.stats.bytes_read += counts.bytes_read
        self.stats.bytes_written += counts.bytes_written
        self.stats.records_removed += counts.records_removed

    @staticmethod
    def _check_refs(plog: PartitionLog, refs: list[_SegmentRef]) -> None:
        """On the loop: the log still holds these segments, non-active and as the pass took them
        (retention, DeleteRecords, truncation or deletion may have removed or cut them since)."""
        if plog.closed or plog.deleted:
            raise _SwapAbandoned("the log was closed or deleted")
        held = {id(s) for s in plog.segments[:-1]}
        for ref in refs:
            seg = ref.segment
            if id(seg) not in held or seg.file is None or seg.size != ref.size:
                raise _SwapAbandoned("the segments changed during the pass")

    def _scan_active(self, active: LogSegment, size: int, scan: _ProducerScan) -> Iterator[int]:
        """Loop, in slices: the summary's part from the active segment, up to its size when the pass
        took it (the loop appends to it meanwhile, so no other thread reads it)."""
        if active.file is None:
            raise _SwapAbandoned("a segment was closed")
        for buf, info in _read_entries(active.file, min(size, active.size)):
            scan.add(buf, info)
            yield info.size
            if active.file is None:
                raise _SwapAbandoned("a segment was closed")


    def _swap(self, plog: PartitionLog, old: list[LogSegment], base: int) -> Iterator[_Blocking]:
        """Kafka's replaceSegments: the ``<base>.*.cleaned`` files take the place of the segments
        ``old`` (one or several). The file steps of the protocol (``_swap_files``: renames, directory
        fsyncs, opening the new segment) run as one ``_Blocking`` step off the loop; the log's
        segment list changes after them in one step on the loop. Until then reads go on through the
        old segments, whose open descriptors and index maps do not care about renames, so a read
        sees the old segments or the new one, never a mix. While the files move the log is pinned
        (``PartitionLog.swap_in_progress``: retention and DeleteRecords leave its segments alone)."""
        current = plog.segments
        if plog.closed or plog.deleted or not old or old[0] not in current:
            raise _SwapAbandoned("the log changed during the pass")
        i = current.index(old[0])
        if current[i:i + len(old)] != old or i + len(old) >= len(current):
            raise _SwapAbandoned("the segments changed during the pass")
        directory = plog.directory
        merge = len(old) > 1
        plog.swap_in_progress = True
        started = time.monotonic()
        try:
            new, doomed = yield _Blocking(self._swap_files, (
                directory, base, old, merge, int(plog.config["segment.index.bytes"]),
                int(plog.config["index.interval.bytes"])))
        except OSError as exc:
            # Some files may have moved while the segment list still names the old ones: the dir goes
            # offline (appends refused, reads served by the open descriptors), as Kafka's cleaner hands an
            # IOException to the LogDirFailureChannel; the next start completes or rolls back the swap.
            plog.storage_error(exc, f"swap of the cleaned segment at {base}")
            raise
        finally:
            plog.swap_in_progress = False
        if plog.closed or plog.deleted:  # meanwhile: the files hold the new segment, the log is gone
            new.close()
            if plog.deleted:  # a rename may have put a file back into the removed directory
                yield _Blocking(shutil.rmtree, (directory, True))
            raise _SwapAbandoned("the log was closed or deleted during the swap")
        moved = time.monotonic()
        plog.replace_segments(old, new)
        for seg in old:
            seg.close()  # regions in flight keep the .log descriptor
        log.debug("%s-%d: swapped %d segments for the cleaned one at %d: files %.1f ms (off the loop), "
                  "segment list %.2f ms (on the loop)", plog.topic, plog.partition, len(old), base,
                  (moved - started) * 1000, (time.monotonic() - moved) * 1000)
        self._step("swap_done", merge)
        # as Kafka's replaceSegments: the producer snapshots of the segments merged away go too, later
        doomed = doomed + [snapshot_path(directory, s.base_offset) for s in old if s.base_offset != base]
        delay = int(plog.config.get("file.delete.delay.ms", 60000))
        if delay <= 0:
            yield _Blocking(remove_files, (doomed,))
        else:
            self._pending_deletes.append((time.monotonic() + delay / 1000, doomed))

    def _swap_files(self, directory: str, base: int, old: list[LogSegment], merge: bool, index_bytes: int,
                    interval: int) -> tuple[LogSegment, list[str]]:
        """A swap's file steps (any thread): ``.cleaned`` -> ``.swap``, the old segments' files ->
        ``.deleted``, ``.swap`` -> final names, with the directory fsyncs between, then the new
        segment opened. Returns it and the ``.deleted`` paths. The old ``LogSegment`` objects are
        only read here (base offsets, txn index entries) and their indexes mapped."""
        try:
            for seg in old:
                # Read now: a txn index not read yet is read by path, which is about to move (a fetch
                # through the old segment until the list changes still needs its aborted transactions).
                seg.txn_index.entries  # noqa: B018
                # Mapped now for the same reason: a lookup would open the index by its name. A lookup
                # on the loop meanwhile may map it too; the map it drops is freed once unused, and the
                # upkeep's sweep leaves a log alone while ``swap_in_progress``.
                seg.map_indexes()
        except OSError as exc:  # out of descriptors, say: nothing has moved, the next pass tries again
            raise _SwapAbandoned(f"cannot read the segments to replace: {exc}") from exc
        self._step("cleaned_written", merge)
        rename_segment_files(directory, base, ".cleaned", ".swap")
        ckpt.fsync_dir(directory)
        self._step("swap_renamed", merge)
        doomed = []
        for seg in old:
            rename_segment_files(directory, seg.base_offset, "", ".deleted")
            doomed += segment_paths(directory, seg.base_offset, ".deleted")
        self._step("old_deleted", merge)
        rename_segment_files(directory, base, ".swap", "")
        ckpt.fsync_dir(directory)
        new = LogSegment(directory, base, index_max_bytes=index_bytes, index_interval_bytes=interval,
                         active=False)
        if not new.load_trusted():
            new.recover()
        return new, doomed

    def _step(self, name: str, merge: bool) -> None:
        """Calls the crash hook with ``name``, and also with ``name:merge`` when the swap replaces
        several old segments."""
        if self.crash_hook is not None:
            self.crash_hook(name)
            if merge:
                self.crash_hook(f"{name}{MERGE_SUFFIX}")


def _crash_hook_from_env() -> Callable[[str], None] | None:
    """The ``MINIBROKER_CLEANER_CRASH_AT`` test hook (docs/storage.md, "Compaction"), or None."""
    return crash_hook_from_env(CRASH_AT_ENV, SWAP_STEPS, "cleaner swap", CRASH_EXIT_CODE, suffix=MERGE_SUFFIX,
                               logger=log)
