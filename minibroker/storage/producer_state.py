"""Idempotent and transactional producers: the producer state of one partition log, as Kafka's
ProducerStateManager keeps it beside UnifiedLog.

``ProducerStateTable`` is owned by one partition (through the ReplicaManager) and mutated
only on the event loop between validation and append, with no await in between. It keeps,
per producer id, the epoch and the last five batches' (first seq, last seq, first offset,
last offset), as Kafka does, and decides per incoming batch: new and in sequence, duplicate
of a cached batch (DUPLICATE_SEQUENCE_NUMBER with the original offset), out of order (45) or
fenced epoch (47). A producer the partition does not know may start at any sequence (Kafka since
KIP-360: its state expired, or retention removed its batches). Batches with producer id -1 are not idempotent
(kafka-python and aiokafka send sequence 0 then) and are never checked.

Transactions (Kafka's ProducerAppendInfo / ProducerStateManager): a transactional batch from a
producer with no ongoing transaction starts one at the batch's first offset; an end-transaction
marker (control batch) ends it. The table knows every ongoing transaction, so the partition's
first unstable offset (the last stable offset while one is open) is the smallest first offset
among them. A marker older than the producer's epoch is refused (INVALID_PRODUCER_EPOCH), as is
one from an older coordinator epoch (TRANSACTION_COORDINATOR_FENCED); a non-transactional batch
from a producer in a transaction gets INVALID_TXN_STATE.

Snapshots: ``<20-digit offset>.snapshot`` beside the segments in Kafka's producer snapshot
format (version 1): int16 version, uint32 CRC-32C of the rest, int32 count, then per
producer: int64 id, int16 epoch, int32 last sequence, int64 last offset, int32 offset delta,
int64 timestamp, int32 coordinator epoch, int64 current txn first offset (-1: none). A producer
known only from a marker has last sequence -1 and last offset -1, as in Kafka. The offset in the
name is the log end offset the snapshot covers; the log after it is replayed on load. As Kafka's
``UnifiedLog``, the partition log writes one at every roll (named after the new segment's base
offset) and one at close; the snapshot of a segment goes when the segment is deleted, and at load
the snapshots that match no segment are removed except the latest (the one written at close).

Expiration (Kafka's ``removeExpiredProducers``): a producer whose last batch or marker has a
timestamp ``producer.id.expiration.ms`` or more in the past, and that has no open transaction, is
forgotten: by the periodic check (``remove_expired``) and when a snapshot is loaded.

Loading (``load_producer_state``, on a partition's first use, or at its first roll): the latest
usable snapshot, then the log after it, batch header by batch header; end markers close transactions,
and an abort whose marker lies in a segment that recovery re-read is indexed again in that segment's
``.txnindex``. Producer ids are handed out by minibroker/coordinator/producer_ids.py.
"""

from __future__ import annotations

import collections
import logging
import os
import struct
import time
from typing import NamedTuple

from minibroker.errors import ErrorCode, KafkaError
from minibroker.storage.txn_index import AbortedTxn

# Loading was the replica manager's: its lines keep that logger's name (docs/operations.md)
log = logging.getLogger("minibroker.replica")

_PID_EPOCH_SEQ = struct.Struct(">qhi")
_ATTRIBUTES_LOW_BYTE = 22  # v2 attributes are an int16 at 21: the flags below are in its low byte
_TRANSACTIONAL = 0x10
_CONTROL = 0x20

MAX_CACHED_BATCHES = 5
NO_PRODUCER_ID = -1
INT32_MAX = 2**31 - 1

_SNAP_HEADER = struct.Struct(">hI")
_SNAP_COUNT = struct.Struct(">i")
_SNAP_ENTRY = struct.Struct(">qhiqiqiq")
SNAPSHOT_VERSION = 1
SNAPSHOT_SUFFIX = ".snapshot"
DEFAULT_PRODUCER_ID_EXPIRATION_MS = 86_400_000  # Kafka's producer.id.expiration.ms default


class BatchMeta(NamedTuple):
    first_seq: int
    last_seq: int
    first_offset: int
    last_offset: int
    timestamp: int = -1


class CompletedTxn(NamedTuple):
    """A transaction an end marker closed: its first offset and the marker's offset."""

    producer_id: int
    first_offset: int
    last_offset: int  # the marker's offset
    is_aborted: bool


class ProducerEntry:
    """One producer id's epoch and its last few batches (to answer a retried batch as a duplicate),
    its coordinator epoch and the first offset of its ongoing transaction (None: none)."""

    __slots__ = ("producer_id", "epoch", "batches", "coordinator_epoch", "current_txn_first_offset",
                 "last_timestamp")

    def __init__(self, producer_id: int, epoch: int):
        self.producer_id = producer_id
        self.epoch = epoch
        self.batches: collections.deque[BatchMeta] = collections.deque(maxlen=MAX_CACHED_BATCHES)
        self.coordinator_epoch = -1
        self.current_txn_first_offset: int | None = None
        self.last_timestamp = -1

    def __repr__(self) -> str:
        return (f"ProducerEntry({self.producer_id}, epoch {self.epoch}, last seq {self.last_seq}, "
                f"txn from {self.current_txn_first_offset})")

    def bump_epoch(self, epoch: int) -> None:
        """A different epoch: the cached batches belong to the old one (Kafka's maybeUpdateProducerEpoch)."""
        if epoch != self.epoch:
            self.batches.clear()
            self.epoch = epoch

    @property
    def last_seq(self) -> int:
        return self.batches[-1].last_seq if self.batches else -1


def next_sequence(seq: int) -> int:
    return 0 if seq == INT32_MAX else seq + 1


class ProducerStateTable:
    """Sequence state of every idempotent producer writing to one partition."""

    def __init__(self) -> None:
        self.producers: dict[int, ProducerEntry] = {}
        self._ongoing: dict[int, int] = {}  # producer id -> first offset of its open transaction
        # How the last load went (``load_producer_state``): the snapshot's offset (None: none used)
        # and the batches replayed after it.
        self.loaded_snapshot_offset: int | None = None
        self.replayed_batches = 0

    def check(
        self, producer_id: int, epoch: int, first_seq: int, last_seq: int, is_transactional: bool = False,
        *, check_sequence: bool = True,
    ) -> BatchMeta | None:
        """Validate one batch before it is appended.

        Returns the cached metadata of an identical earlier batch (a duplicate the caller answers
        with its original offset), or None when the batch is new and may be appended.
        Raises KafkaError for fenced or out-of-order producers, and INVALID_TXN_STATE for
        a non-transactional batch from a producer whose transaction is open.

        ``check_sequence=False``: an append of the broker's own (Kafka's ``AppendOrigin.COORDINATOR``,
        a transactional offset commit): only the epoch and the transaction state are checked, as
        Kafka's ``ProducerAppendInfo`` checks sequences (and ``UnifiedLog`` looks for duplicates)
        for client appends only. Never a duplicate then.
        """
        if producer_id == NO_PRODUCER_ID:
            return None
        entry = self.producers.get(producer_id)
        if not check_sequence:
            if entry is not None:
                if epoch < entry.epoch:
                    raise KafkaError(
                        ErrorCode.INVALID_PRODUCER_EPOCH,
                        f"Epoch {epoch} of producer {producer_id} is older than {entry.epoch}",
                    )
                self._check_txn_state(entry, is_transactional)
            return None
        if entry is None:
            # Any sequence, as Kafka's ProducerAppendInfo since KIP-360: the producer's state may have
            # expired (producer.id.expiration.ms) or its batches been deleted (retention, DeleteRecords)
            return None
        if epoch < entry.epoch:
            raise KafkaError(
                ErrorCode.INVALID_PRODUCER_EPOCH,
                f"Epoch {epoch} of producer {producer_id} is older than {entry.epoch}",
            )
        if epoch > entry.epoch:
            if first_seq != 0:
                raise KafkaError(
                    ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
                    f"Invalid sequence {first_seq} for new epoch {epoch} of producer {producer_id}",
                )
        else:
            for meta in entry.batches:
                if meta.first_seq == first_seq and meta.last_seq == last_seq:
                    return meta
            if first_seq != next_sequence(entry.last_seq):
                raise KafkaError(
                    ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
                    f"Out of order sequence number for producer {producer_id}: {first_seq} "
                    f"(incoming seq. number), {entry.last_seq} (current end sequence number)",
                )
        self._check_txn_state(entry, is_transactional)
        return None

    @staticmethod
    def _check_txn_state(entry: ProducerEntry, is_transactional: bool) -> None:
        if entry.current_txn_first_offset is not None and not is_transactional:
            raise KafkaError(
                ErrorCode.INVALID_TXN_STATE,
                f"Expected transactional write from producer {entry.producer_id}: its transaction is open "
                f"since offset {entry.current_txn_first_offset}",
            )

    def record(
        self,
        producer_id: int,
        epoch: int,
        first_seq: int,
        last_seq: int,
        first_offset: int,
        last_offset: int,
        timestamp: int = -1,
        is_transactional: bool = False,
    ) -> None:
        """Remember an appended batch (after ``check`` said it was new); a transactional batch from a
        producer with no open transaction opens one at ``first_offset``."""
        if producer_id == NO_PRODUCER_ID:
            return
        entry = self.producers.get(producer_id)
        if entry is None:
            entry = ProducerEntry(producer_id, epoch)
            self.producers[producer_id] = entry
        elif epoch > entry.epoch:
            entry.bump_epoch(epoch)  # the open transaction and coordinator epoch stay, as in Kafka
        entry.batches.append(BatchMeta(first_seq, last_seq, first_offset, last_offset, timestamp))
        entry.last_timestamp = timestamp
        if is_transactional and entry.current_txn_first_offset is None:
            entry.current_txn_first_offset = first_offset
            self._ongoing[producer_id] = first_offset

    # -- transactions ----------------------------------------------------------------------------

    def check_end_txn_marker(self, producer_id: int, epoch: int, coordinator_epoch: int) -> None:
        """Refuse a marker from an older producer epoch or an older coordinator epoch (Kafka's
        ``appendEndTxnMarker`` checks for appends that do not come from replication)."""
        entry = self.producers.get(producer_id)
        if entry is None:
            return
        if epoch < entry.epoch:
            raise KafkaError(
                ErrorCode.INVALID_PRODUCER_EPOCH,
                f"Epoch {epoch} of the marker for producer {producer_id} is older than {entry.epoch}",
            )
        if entry.coordinator_epoch > coordinator_epoch:
            raise KafkaError(
                ErrorCode.TRANSACTION_COORDINATOR_FENCED,
                f"Invalid coordinator epoch for producer {producer_id}: {coordinator_epoch} (zombie), "
                f"{entry.coordinator_epoch} (current)",
            )

    def complete_txn(
        self, producer_id: int, epoch: int, coordinator_epoch: int, marker_offset: int, is_abort: bool,
        timestamp: int = -1,
    ) -> CompletedTxn | None:
        """Apply an appended end marker: the producer's open transaction, if any, is closed and
        returned (None when it had none: such a marker aborts nothing). No checks: call
        ``check_end_txn_marker`` first for a marker not yet in the log."""
        entry = self.producers.get(producer_id)
        if entry is None:
            entry = ProducerEntry(producer_id, epoch)
            self.producers[producer_id] = entry
        completed = None
        if entry.current_txn_first_offset is not None:
            completed = CompletedTxn(producer_id, entry.current_txn_first_offset, marker_offset, is_abort)
            self._ongoing.pop(producer_id, None)
        entry.bump_epoch(epoch)
        entry.coordinator_epoch = coordinator_epoch
        entry.current_txn_first_offset = None
        entry.last_timestamp = timestamp
        return completed

    def last_stable_offset_after(self, completed: CompletedTxn) -> int:
        """The last stable offset once ``completed`` is closed: the first offset of the earliest
        other open transaction, else the offset after the marker (Kafka's ``lastStableOffset``, the
        value its transaction index entries carry)."""
        others = [first for pid, first in self._ongoing.items() if pid != completed.producer_id]
        return min(others) if others else completed.last_offset + 1

    def first_unstable_offset(self) -> int | None:
        """The first offset of the earliest open transaction, None when none is open."""
        return min(self._ongoing.values()) if self._ongoing else None

    def ongoing_transactions(self) -> dict[int, int]:
        """Producer id -> first offset of its open transaction (a copy)."""
        return dict(self._ongoing)

    def active(self) -> list[tuple[int, int, int, int, int, int, int]]:
        """(producer id, epoch, last sequence, last offset, last timestamp, coordinator epoch, first
        offset of the open transaction or -1) for DescribeProducers: every producer the partition
        knows, those known only from a marker with last sequence and last offset -1, as in Kafka."""
        out = []
        for entry in self.producers.values():
            last = entry.batches[-1] if entry.batches else None
            last_seq, last_offset = (last.last_seq, last.last_offset) if last is not None else (-1, -1)
            txn = entry.current_txn_first_offset
            out.append((entry.producer_id, entry.epoch, last_seq, last_offset, entry.last_timestamp,
                        entry.coordinator_epoch, -1 if txn is None else txn))
        return out

    # -- expiration ------------------------------------------------------------------------------

    def remove_expired(self, now_ms: int, expiration_ms: int) -> list[int]:
        """Forget every producer idle for ``expiration_ms`` (by the timestamp of its last batch or
        marker) with no open transaction; returns their ids."""
        expired = [pid for pid, entry in self.producers.items() if is_expired(entry, now_ms, expiration_ms)]
        for pid in expired:
            del self.producers[pid]
        return expired

    # -- snapshots -------------------------------------------------------------------------------

    def write_snapshot(self, directory: str, end_offset: int, *, sync: bool = True) -> str:
        """Write ``<end_offset>.snapshot`` (through a temporary file renamed into place). ``sync``
        False: no fsync (a roll, on the loop; as Kafka, the snapshot is flushed with the segment
        before it, and a torn one fails its CRC at load and is passed over)."""
        body = bytearray(_SNAP_COUNT.pack(len(self.producers)))
        for entry in self.producers.values():
            txn = -1 if entry.current_txn_first_offset is None else entry.current_txn_first_offset
            if entry.batches:
                last = entry.batches[-1]
                last_seq, last_offset = last.last_seq, last.last_offset
                delta = last.last_offset - last.first_offset
            else:  # known from a marker only
                last_seq, last_offset, delta = -1, -1, 0
            body += _SNAP_ENTRY.pack(
                entry.producer_id,
                entry.epoch,
                last_seq,
                last_offset,
                delta,
                entry.last_timestamp,
                entry.coordinator_epoch,
                txn,
            )
        count = (len(body) - 4) // _SNAP_ENTRY.size
        _SNAP_COUNT.pack_into(body, 0, count)
        from crc32c import crc32c  # deferred: ~10 ms to import, not needed to start

        data = _SNAP_HEADER.pack(SNAPSHOT_VERSION, crc32c(body)) + bytes(body)
        path = os.path.join(directory, f"{end_offset:020d}.snapshot")
        tmp = path + ".tmp"
        try:
            with open(tmp, "wb") as f:
                f.write(data)
                if sync:
                    f.flush()
                    os.fsync(f.fileno())
            os.replace(tmp, path)
        except OSError:
            try:  # a full disk: leave no half-written file behind
                os.unlink(tmp)
            except OSError:
                pass
            raise
        return path

    @classmethod
    def read_snapshot(cls, path: str) -> ProducerStateTable:
        with open(path, "rb") as f:
            data = f.read()
        try:
            entries = parse_snapshot(data)
        except ValueError as exc:
            raise ValueError(f"{path}: {exc}") from None
        table = cls()
        for e in entries:
            entry = ProducerEntry(e.producer_id, e.epoch)
            if e.last_offset >= 0:
                first_seq = e.last_seq - e.offset_delta if e.last_seq >= e.offset_delta else 0
                entry.batches.append(BatchMeta(first_seq, e.last_seq, e.last_offset - e.offset_delta,
                                               e.last_offset, e.timestamp))
            entry.last_timestamp, entry.coordinator_epoch = e.timestamp, e.coordinator_epoch
            if e.current_txn_first_offset >= 0:
                entry.current_txn_first_offset = e.current_txn_first_offset
                table._ongoing[e.producer_id] = e.current_txn_first_offset
            table.producers[e.producer_id] = entry
        return table


class SnapshotEntry(NamedTuple):
    """One producer of a snapshot file, field by field (Kafka's ProducerSnapshot entry)."""

    producer_id: int
    epoch: int
    last_seq: int
    last_offset: int  # -1: known from a marker only
    offset_delta: int
    timestamp: int
    coordinator_epoch: int
    current_txn_first_offset: int  # -1: none


def parse_snapshot(data: bytes) -> list[SnapshotEntry]:
    """The entries of a snapshot file's bytes; ValueError with Kafka's ``CorruptSnapshotException``
    messages when the version, the layout or the CRC is wrong (checked in that order, as Kafka)."""
    try:
        version, crc = _SNAP_HEADER.unpack_from(data, 0)
        if version != SNAPSHOT_VERSION:
            raise ValueError(f"Snapshot contained an unknown file version {version}")
        (count,) = _SNAP_COUNT.unpack_from(data, _SNAP_HEADER.size)
        if count < 0 or _SNAP_HEADER.size + 4 + count * _SNAP_ENTRY.size > len(data):
            raise ValueError(f"Tried to read {count} producer entries, but the snapshot has room for fewer")
    except (ValueError, struct.error) as exc:
        raise ValueError(f"Snapshot failed schema validation: {exc}") from None
    from crc32c import crc32c  # deferred: ~10 ms to import, not needed to start

    computed = crc32c(memoryview(data)[_SNAP_HEADER.size :])
    if computed != crc:
        raise ValueError(f"Snapshot is corrupt (CRC is no longer valid). Stored crc: {crc}. "
                         f"Computed crc: {computed}")
    base = _SNAP_HEADER.size + 4
    return [SnapshotEntry(*_SNAP_ENTRY.unpack_from(data, base + i * _SNAP_ENTRY.size)) for i in range(count)]


def is_expired(entry: ProducerEntry, now_ms: int, expiration_ms: int) -> bool:
    """Kafka's ``isProducerExpired``: no open transaction and idle for ``expiration_ms``."""
    return entry.current_txn_first_offset is None and now_ms - entry.last_timestamp >= expiration_ms


def snapshot_path(directory: str, offset: int) -> str:
    return os.path.join(directory, f"{offset:020d}{SNAPSHOT_SUFFIX}")


def snapshot_files(directory: str) -> list[tuple[int, str]]:
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return []
    out = []
    for name in names:
        stem, dot, ext = name.partition(".")
        if dot and ext == "snapshot" and stem.isdigit():
            out.append((int(stem), os.path.join(directory, name)))
    return sorted(out)


def delete_snapshot(directory: str, offset: int) -> None:
    """Remove the snapshot at ``offset``, if there is one (its segment was deleted)."""
    try:
        os.unlink(snapshot_path(directory, offset))
    except FileNotFoundError:
        pass


def remove_stray_snapshots(directory: str, segment_bases: list[int]) -> list[int]:
    """Kafka's ``removeStraySnapshots``: remove every snapshot whose offset is no segment's base,
    except the latest of them when it is past the last segment's base (written at close). Returns
    the offsets removed."""
    bases = set(segment_bases)
    strays = [(offset, path) for offset, path in snapshot_files(directory) if offset not in bases]
    if strays and segment_bases and strays[-1][0] > max(segment_bases):
        strays.pop()
    for _, path in strays:
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass
    return [offset for offset, _ in strays]


# ---------------------------------------------------------------------------------------------------
# Loading: the latest snapshot, then the log after it (Kafka's UnifiedLog.loadProducerState).


def load_producer_state(plog, *, now_ms: int | None = None,
                        expiration_ms: int = DEFAULT_PRODUCER_ID_EXPIRATION_MS) -> ProducerStateTable:
    """Latest usable snapshot, then the log after it replayed batch header by batch header (and
    the end markers' control records). Segments that recovery re-read have an empty txn index:
    the replay then starts no later than the first of them (a snapshot at or below its base, else
    the log start), and the aborted transactions whose markers lie in them are indexed again,
    as Kafka's ``LogSegment.recover`` does with the producer state rebuilt up to the segment.
    Producers of the snapshot expired at ``now_ms`` are left out, as Kafka's ``loadFromSnapshot``
    does. The table's ``loaded_snapshot_offset`` and ``replayed_batches`` say how it went."""
    started = time.monotonic()
    if now_ms is None:
        now_ms = int(time.time() * 1000)
    rebuild = [s for s in plog.segments if s.txn_index_needs_rebuild]
    rebuild_from = rebuild[0].base_offset if rebuild else None
    table = ProducerStateTable()
    start = plog.log_start_offset
    for offset, path in reversed(snapshot_files(plog.directory)):
        if offset > plog.log_end_offset or (rebuild_from is not None and offset > rebuild_from):
            continue
        try:
            table = ProducerStateTable.read_snapshot(path)
        except (OSError, ValueError, struct.error) as e:
            log.warning("ignoring producer snapshot %s: %s", path, e)
            continue
        table.remove_expired(now_ms, expiration_ms)
        table.loaded_snapshot_offset = offset
        start = max(offset, plog.log_start_offset)
        break
    replayed = 0
    reindexed: list = []  # [(segment, AbortedTxn)]: written once the replay is whole
    # headers only: a 1 GiB segment of 1 MiB batches is 1,000 small reads, not 1 GiB read back
    for segment, header, at, entry in plog.iter_entry_headers(start):
        if entry.magic != 2:
            continue
        pid, epoch, base_seq = _PID_EPOCH_SEQ.unpack_from(header, at + 43)
        if pid < 0:
            continue
        attributes = header[at + _ATTRIBUTES_LOW_BYTE]
        if attributes & _CONTROL:  # the end marker is the batch's record
            whole = segment.read_entry_bytes(entry)
            completed = _replay_marker(plog, table, whole, entry._replace(position=0), pid, epoch)
            if completed is not None and completed.is_aborted and rebuild:
                reindexed += _reindexed_abort(rebuild, table, completed)
            replayed += 1
        else:  # sequence -1 too (an internal append may write one), as Kafka replays any producer's batch
            delta = entry.last_offset - entry.base_offset
            last_seq = base_seq + delta if base_seq >= 0 else -1
            table.record(pid, epoch, base_seq, last_seq, entry.base_offset, entry.last_offset,
                         entry.max_timestamp, is_transactional=bool(attributes & _TRANSACTIONAL))
            replayed += 1
    _write_reindexed(rebuild, reindexed)
    table.replayed_batches = replayed
    if replayed or table.loaded_snapshot_offset is not None and table.producers:
        snapshot = "no snapshot" if table.loaded_snapshot_offset is None else \
            f"the snapshot at offset {table.loaded_snapshot_offset}"
        log.info(
            "%s: producer state rebuilt from %d batches after offset %d (%s; %d producers) in %.1f ms",
            plog.directory, replayed, start, snapshot, len(table.producers),
            (time.monotonic() - started) * 1000,
        )
    return table


def _replay_marker(plog, table, data, entry, pid: int, epoch: int) -> CompletedTxn | None:
    from minibroker.records.control import ControlType, read_end_txn_marker  # the record layer: on first use

    try:
        marker = read_end_txn_marker(data, entry.position)
    except ValueError as e:
        log.warning("%s: unreadable control batch at offset %d: %s", plog.directory, entry.base_offset, e)
        return None
    if marker is None:  # an empty control batch, or a control type other than an end marker
        return None
    return table.complete_txn(pid, epoch, marker.coordinator_epoch, entry.base_offset,
                              marker.control_type == ControlType.ABORT, entry.max_timestamp)


def aborted_txn(table: ProducerStateTable, completed: CompletedTxn) -> AbortedTxn:
    """The ``.txnindex`` entry of an aborted transaction its marker closed."""
    return AbortedTxn(completed.producer_id, completed.first_offset, completed.last_offset,
                      table.last_stable_offset_after(completed))


def _reindexed_abort(rebuild: list, table: ProducerStateTable, completed: CompletedTxn) -> list:
    """[(segment, entry)] for a replayed abort whose marker lies in a segment being rebuilt
    (``rebuild``: segments in offset order), else []."""
    for segment in reversed(rebuild):
        if segment.base_offset <= completed.last_offset:
            if completed.last_offset < segment.next_offset:
                return [(segment, aborted_txn(table, completed))]
            return []
    return []


def _write_reindexed(rebuild: list, reindexed: list) -> None:
    """Write the aborts a whole replay found into the rebuilt segments' txn indexes, then clear their
    flags. Only after the replay: one cut by an error (EMFILE, EIO) leaves the flags set and writes
    nothing, and its retry appends the same entries. Each index is emptied first, since a write that
    failed midway may have left some of them (nothing else writes to it before the state is loaded)."""
    for segment in rebuild:
        if segment.txn_index.entries:
            segment.txn_index.reset()
    for segment, txn in reindexed:
        segment.txn_index.append(txn)
        segment.flushed = False
    for segment in rebuild:
        segment.txn_index_needs_rebuild = False
