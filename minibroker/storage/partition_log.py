"""The log of one partition: an ordered list of ``LogSegment`` in ``<log dir>/<topic>-<partition>/``.

Owner: the event loop thread (through the handlers and ``LogManager``); nothing here awaits, so
reading ``log_end_offset`` and appending happen without a gap. Not thread-safe. The only work
done off the loop is the fsync of sealed segments, driven by ``LogManager`` through
``sealed_unflushed`` / ``mark_flushed``.

Offsets: ``log_start_offset`` <= every readable offset < ``log_end_offset`` (LEO). On one node
the high watermark is the LEO.

Leader epochs (storage/leader_epoch_cache.py, Kafka's ``LeaderEpochFileCache``): ``leader_epoch`` is
the partition's current epoch, stamped by the replica manager into every batch it appends; a new log is
at epoch 0, and ``start_leader_epoch`` begins the next one at the log end offset, as Kafka's
``Partition.makeLeader`` does after an election. The cache (``leader-epoch-checkpoint``) holds where
each epoch started: the current one from its start (epoch 0 from the first append), the older ones as
long as the log holds their offsets (truncated with the log). Recovery after a crash adds the epochs
its re-read batches start, as Kafka's segment recovery does.

Producer state (``producer_state``, storage/producer_state.py): loaded on first use, as Kafka's
``UnifiedLog`` keeps its ``ProducerStateManager``. A snapshot of it is written at every roll, named
after the new segment's base offset (loading it first if need be), and at close; a deleted segment
takes its snapshot along, so recovery after a crash replays at most the segments after the latest
snapshot at or below the recovery point.
"""

from __future__ import annotations

import bisect
import errno
import logging
import os
import random
import shutil
import struct
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any, NamedTuple

from minibroker.errors import ErrorCode, KafkaError
from minibroker.protocol.file_region import FileRegion
from minibroker.records.framing import EntryInfo, scan_entries
from minibroker.storage import checkpoints
from minibroker.storage import producer_state as ps
from minibroker.storage.leader_epoch_cache import LeaderEpochCache
from minibroker.storage.segment import LogSegment
from minibroker.storage.segment_swap import complete_interrupted_swap
from minibroker.storage.timestamps import offset_of_max_timestamp, record_at_or_after
from minibroker.storage.txn_index import AbortedTxn

__all__ = ["FetchSlice", "PartitionLog"]

log = logging.getLogger(__name__)

_NEVER = 2**63 - 1  # Kafka's default for flush.messages / flush.ms


class FetchSlice(NamedTuple):
    """What a read found: a region of whole entries (None when there is nothing to send) and the
    partition's offsets at the time of the read."""

    region: FileRegion | None
    first_offset: int  # base offset of the first entry in the region (the requested offset if empty)
    high_watermark: int
    log_start_offset: int
    log_end_offset: int

    @property
    def size(self) -> int:
        return self.region.size if self.region is not None else 0


class PartitionLog:
    """Segmented append-only log of one partition. See the module docstring for ownership."""

    def __init__(
        self,
        directory: str,
        topic: str,
        partition: int,
        topic_id: bytes,
        config: Mapping[str, Any],
        segments: list[LogSegment],
        *,
        log_start_offset: int,
        recovery_point: int,
        epoch_entries: list[tuple[int, int]],
        clock=time.time,
    ):
        self.directory = directory
        self._topic = topic
        self._partition = partition
        self._topic_id = topic_id
        self._clock = clock
        self._segments = segments
        self._bases = [s.base_offset for s in segments]
        self._leo = segments[-1].next_offset
        self._log_start = max(log_start_offset, segments[0].base_offset)
        self._recovery_point = min(recovery_point, self._leo)
        self._epochs = LeaderEpochCache(os.path.join(directory, checkpoints.LEADER_EPOCH_CHECKPOINT),
                                        epoch_entries)
        # The current leader epoch; never lowered by a truncation of the cache (an election's epoch stays).
        self._leader_epoch = max(self._epochs.latest_epoch, 0)
        self._listeners: list[Callable[[PartitionLog], None]] = []
        self._unflushed_messages = 0
        self._last_flush_ms = self._now_ms()
        self._roll_jitter: dict[int, int] = {}
        self.on_log_start_offset_change: Callable[[PartitionLog], None] | None = None
        # A write in this log's dir failed (see LogManager.dir_failed): appends answer
        # KAFKA_STORAGE_ERROR with this reason; reads go on.
        self.offline_reason: str | None = None
        self.on_storage_error: Callable[[PartitionLog, BaseException], None] | None = None
        self.read_only = False  # opened without writing its dir (indexes in memory)
        self.closed = False
        self.deleted = False
        # Set by the log cleaner while a swap's files move (LogCleaner._swap, off the loop): segments
        # are then neither deleted (retention, DeleteRecords: the next retention check does it) nor
        # truncated, so that the swap finds on the loop the segments whose files it moved.
        self.swap_in_progress = False
        self._producer_state: ps.ProducerStateTable | None = None
        # producer.id.expiration.ms, a broker setting (the LogManager keeps it current)
        self.producer_id_expiration_ms = ps.DEFAULT_PRODUCER_ID_EXPIRATION_MS
        self.update_config(config)

    # ---- construction -------------------------------------------------------------------------
    @classmethod
    def create(
        cls,
        directory: str,
        topic: str,
        partition: int,
        topic_id: bytes,
        config: Mapping[str, Any],
        *,
        clock=time.time,
    ) -> PartitionLog:
        """A new, empty partition directory (replacing any leftover one)."""
        if os.path.exists(directory):
            shutil.rmtree(directory)
        os.makedirs(directory)
        checkpoints.write_partition_metadata(
            os.path.join(directory, checkpoints.PARTITION_METADATA), topic_id
        )
        segment = LogSegment.create(
            directory,
            0,
            index_max_bytes=int(config["segment.index.bytes"]),
            index_interval_bytes=int(config["index.interval.bytes"]),
            clock=clock,
        )
        return cls(
            directory,
            topic,
            partition,
            topic_id,
            config,
            [segment],
            log_start_offset=0,
            recovery_point=0,
            epoch_entries=[],
            clock=clock,
        )

    @classmethod
    def open(
        cls,
        directory: str,
        topic: str,
        partition: int,
        topic_id: bytes,
        config: Mapping[str, Any],
        *,
        log_start_offset: int = 0,
        recovery_point: int = 0,
        clean: bool = False,
        read_only: bool = False,
        clock=time.time,
    ) -> PartitionLog:
        """Load an existing partition directory, following Kafka's LogLoader (docs/storage.md,
        "Recovery").

        Segments "unflushed" are those that may hold offsets >= ``recovery_point``: the one holding
        it and every later one (so always the last). After an unclean shutdown (``clean`` False)
        each unflushed segment is re-read (sizes, offsets, CRCs; a bad tail truncated, indexes
        rebuilt), and the first one that has to be truncated ends the log: the unflushed segments
        after it are deleted, as in Kafka's ``recoverLog``. Every other segment (all of them after a
        clean shutdown) is trusted after cheap checks (``_load_trusted``); one that fails them is
        re-read and truncated at its own first bad entry, and later segments are kept, as in
        Kafka's ``loadSegmentFiles``: such a middle segment stays sealed and leaves a gap that reads
        skip. Every loss is logged at WARNING with its offset range, as are gaps between segments,
        a first segment above the checkpointed log start, and a log ending below the recovery
        point (segment files lost while the broker ran).

        ``read_only``: for a log dir that cannot be written (a full disk): nothing in the directory
        is changed. Indexes are read or rebuilt in memory, a damaged tail is left on disk but not
        served, nothing is deleted; the log serves reads and refuses appends.
        """
        name = f"{topic}-{partition}"
        meta_path = os.path.join(directory, checkpoints.PARTITION_METADATA)
        if not read_only and checkpoints.read_partition_metadata(meta_path) != topic_id:
            checkpoints.write_partition_metadata(meta_path, topic_id)
        index_bytes = int(config["segment.index.bytes"])
        interval = int(config["index.interval.bytes"])
        if not read_only:  # a cleaner's swap cut short: complete or roll back, as Kafka's LogLoader
            complete_interrupted_swap(name, directory)
        bases = []
        for fname in os.listdir(directory):
            stem, ext = os.path.splitext(fname)
            if ext in (".deleted", ".cleaned", ".swap", ".tmp"):
                if not read_only:
                    _remove(os.path.join(directory, fname))
            elif ext == ".log" and stem.isdigit() and len(stem) == 20:
                bases.append(int(stem))
        for fname in os.listdir(directory):  # indexes without a log
            stem, ext = os.path.splitext(fname)
            orphan = stem.isdigit() and int(stem) not in bases
            if ext in (".index", ".timeindex", ".txnindex") and orphan and not read_only:
                _remove(os.path.join(directory, fname))
        bases.sort()
        segments: list[LogSegment] = []
        recovered = truncated_total = 0
        recovered_epochs: list[tuple[int, int]] = []  # (epoch, start) seen in the re-read batches
        reported_tails: set[int] = set()  # bases of segments whose lost tail is already logged
        for i, base in enumerate(bases):
            next_base = bases[i + 1] if i + 1 < len(bases) else None
            # Every segment is loaded sealed (indexes mapped as they are on disk, so an index left
            # preallocated is seen as such); the one that ends up last is made active below.
            segment = LogSegment(
                directory,
                base,
                index_max_bytes=index_bytes,
                index_interval_bytes=interval,
                active=False,
                read_only=read_only,
                clock=clock,
            )
            if segments and base < segments[-1].next_offset:
                log.error(
                    "%s: segment %d overlaps its predecessor (ends at %d); dropping it and later ones",
                    name,
                    base,
                    segments[-1].next_offset,
                )
                if not read_only:
                    segment.delete()
                    _drop_segments(directory, bases[i + 1 :], index_bytes, interval, clock)
                break
            unflushed = not clean and (next_base is None or next_base > recovery_point)
            if not unflushed and _load_trusted(name, segment):
                segments.append(segment)
                continue
            result = segment.recover()  # and seals it (trimmed indexes)
            recovered += 1
            recovered_epochs.extend(result.epoch_starts)
            segments.append(segment)
            if not result.truncated_bytes:
                continue
            truncated_total += result.truncated_bytes
            segment.flush()
            kept = f"kept {result.entries} entries ({result.valid_bytes} bytes)"
            cut = f"truncated {result.truncated_bytes} bytes ({result.reason})"
            if unflushed and next_base is not None:
                # Kafka's recoverLog: the first unflushed segment with corruption ends the log, and
                # the unflushed segments after it (every later one) are deleted.
                later = bases[i + 1 :]
                log.warning(
                    "%s: corruption found in unflushed segment %d: %s, %s; lost offsets from %d on, "
                    "deleting %d later segments %s",
                    name,
                    base,
                    kept,
                    cut,
                    segment.next_offset,
                    len(later),
                    later,
                )
                if not read_only:
                    _drop_segments(directory, later, index_bytes, interval, clock)
                segment.make_active()
                break
            if next_base is None:
                lost = f"lost offsets from {segment.next_offset} on"
            else:
                lost = f"lost {_offset_range(segment.next_offset, next_base - 1)}; later segments kept"
                reported_tails.add(base)
            log.warning("%s: segment %d: %s, %s; %s", name, base, kept, cut, lost)
        if segments and not segments[-1].active:
            segments[-1].make_active()
        if read_only and (not segments or log_start_offset > segments[-1].next_offset):
            raise OSError(errno.EROFS, f"{name}: the log would restart empty, but {directory} is read-only")
        if segments and log_start_offset > segments[-1].next_offset:
            log.warning(
                "%s: log start offset %d is past the end of the log (%d): starting empty there",
                name,
                log_start_offset,
                segments[-1].next_offset,
            )
            for segment in segments:
                segment.delete()
            segments = []
        if segments and "compact" not in str(config.get("cleanup.policy", "")):  # compaction leaves gaps
            _warn_missing_offsets(name, segments, log_start_offset, reported_tails)
        if segments:
            if not truncated_total and recovery_point > segments[-1].next_offset:
                log.warning(
                    "%s: %s missing: the recovery point checkpoint is %d but the log ends at %d "
                    "(segment files lost?)",
                    name,
                    _offset_range(segments[-1].next_offset, recovery_point - 1),
                    recovery_point,
                    segments[-1].next_offset,
                )
        if not segments:
            segments = [
                LogSegment.create(
                    directory,
                    max(log_start_offset, 0),
                    index_max_bytes=index_bytes,
                    index_interval_bytes=interval,
                    clock=clock,
                )
            ]
        if recovered:
            log.info(
                "%s: recovered %d segments, truncated %d bytes; log end offset %d",
                name,
                recovered,
                truncated_total,
                segments[-1].next_offset,
            )
        if not read_only:
            _remove_snapshots_past(name, directory, segments[-1].next_offset)
            ps.remove_stray_snapshots(directory, [s.base_offset for s in segments])
        epoch_path = os.path.join(directory, checkpoints.LEADER_EPOCH_CHECKPOINT)
        try:
            epochs = checkpoints.read_epoch_checkpoint(epoch_path)
        except checkpoints.CheckpointError as exc:
            log.warning("%s: ignoring %s", name, exc)
            epochs = []
        if not epochs and segments[-1].next_offset > segments[0].base_offset:
            # no checkpoint (lost, damaged) for a log with batches: learn the epochs from every batch
            recovered_epochs = [start for segment in segments for start in segment.leader_epoch_starts()]
        self = cls(
            directory,
            topic,
            partition,
            topic_id,
            config,
            segments,
            log_start_offset=log_start_offset,
            # After an unclean start the checkpoint stands (re-read segments were not fsynced), as
            # in Kafka; __init__ caps it at the log end.
            recovery_point=recovery_point,
            epoch_entries=epochs,
            clock=clock,
        )
        if clean:
            self._recovery_point = self._leo
        self.read_only = read_only
        for epoch, start in recovered_epochs:  # as Kafka's recovery: only epochs above the latest known
            if epoch > self._epochs.latest_epoch:
                self._epochs.assign(epoch, start)
        self._leader_epoch = max(self._epochs.latest_epoch, self._leader_epoch)
        self._fix_epoch_entries()
        if self._epochs.entries != epochs and not read_only:  # corrected: a crash left it behind
            self._write_epoch_checkpoint()
        return self

    # ---- properties ---------------------------------------------------------------------------
    @property
    def topic(self) -> str:
        return self._topic

    @property
    def partition(self) -> int:
        return self._partition

    @property
    def topic_id(self) -> bytes:
        return self._topic_id

    @property
    def log_start_offset(self) -> int:
        return self._log_start

    @property
    def log_end_offset(self) -> int:
        return self._leo

    @property
    def high_watermark(self) -> int:
        return self._leo

    @property
    def leader_epoch(self) -> int:
        """The partition's current leader epoch (stamped into every appended batch)."""
        return self._leader_epoch

    @property
    def leader_epochs(self) -> list[tuple[int, int]]:
        """(epoch, start offset) of each epoch the log holds, oldest first (the checkpoint's entries)."""
        return self._epochs.entries

    def start_leader_epoch(self, epoch: int | None = None) -> int:
        """Begin leader epoch ``epoch`` (the next one by default) at the log end offset, as Kafka's
        ``Partition.makeLeader`` after an election: the cache records it and the checkpoint is written
        (fsynced) before this returns, so the epoch survives a restart or a crash. Returns the epoch."""
        epoch = self._leader_epoch + 1 if epoch is None else epoch
        if epoch <= self._leader_epoch:
            raise ValueError(f"leader epoch {epoch} is not above {self._leader_epoch}")
        self._check_writable()
        if self.read_only:
            raise KafkaError(ErrorCode.KAFKA_STORAGE_ERROR, f"{self._topic}-{self._partition} is read-only")
        self._epochs.assign(epoch, self._leo)
        self._leader_epoch = epoch
        try:
            self._write_epoch_checkpoint()
        except OSError as exc:
            raise self.storage_error(exc, "write leader-epoch-checkpoint") from exc
        log.info("%s-%d: leader epoch %d starts at offset %d", self._topic, self._partition, epoch, self._leo)
        return epoch

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        """OffsetForLeaderEpoch: (epoch, end offset) as Kafka's ``endOffsetFor`` (leader_epoch_cache.py)."""
        if self._epochs.latest_epoch != self._leader_epoch:  # epoch 0 before the first append
            if epoch == self._leader_epoch:
                return epoch, self._leo
        return self._epochs.end_offset_for(epoch, self._leo)

    def epoch_for_offset(self, offset: int) -> int:
        """The leader epoch the batch holding ``offset`` was written in (-1 when the cache does not reach
        back to it); at or past the log end, the current epoch."""
        if offset >= self._leo:
            return self._leader_epoch
        return self._epochs.epoch_for_offset(offset)

    @property
    def recovery_point(self) -> int:
        return self._recovery_point

    @property
    def config(self) -> dict[str, Any]:
        return self._config

    @property
    def producer_state(self) -> ps.ProducerStateTable:
        """The partition's producer state, loaded on first use (the latest snapshot, then the log
        after it: ``producer_state.load_producer_state``). Owned by the event loop like the log."""
        if self._producer_state is None:
            try:
                self._producer_state = ps.load_producer_state(
                    self, now_ms=self._now_ms(), expiration_ms=self.producer_id_expiration_ms
                )
            except (OSError, ValueError, struct.error) as exc:  # EMFILE, EIO: this partition's error
                raise KafkaError(
                    ErrorCode.KAFKA_STORAGE_ERROR,
                    f"loading the producer state of {self._topic}-{self._partition}: {exc}",
                ) from exc
        return self._producer_state

    @property
    def loaded_producer_state(self) -> ps.ProducerStateTable | None:
        """The producer state if it is loaded, else None (nothing is read)."""
        return self._producer_state

    def adopt_producer_state(self, table: ps.ProducerStateTable | None) -> None:
        """Take over the loaded producer state of this partition's previous log object (a move between
        log dirs reopens the log)."""
        if table is not None and self._producer_state is None:
            self._producer_state = table

    def remove_expired_producers(self, now_ms: int | None = None) -> list[int]:
        """Forget the producers idle for ``producer_id_expiration_ms`` without an open transaction
        (Kafka's periodic check); a state not loaded is left alone (its snapshot is filtered when it
        is loaded). Returns the ids forgotten."""
        if self._producer_state is None:
            return []
        now_ms = self._now_ms() if now_ms is None else now_ms
        expired = self._producer_state.remove_expired(now_ms, self.producer_id_expiration_ms)
        if expired:
            log.info("%s-%d: %d producer ids expired (idle for producer.id.expiration.ms=%d)",
                     self._topic, self._partition, len(expired), self.producer_id_expiration_ms)
        return expired

    def write_producer_snapshot(self, offset: int | None = None, *, sync: bool = True) -> str | None:
        """Write the loaded producer state as ``<offset>.snapshot`` (the log end by default); None
        when it is not loaded or the log cannot be written."""
        if self._producer_state is None or self.read_only or self.offline_reason is not None:
            return None
        return self._producer_state.write_snapshot(
            self.directory, self._leo if offset is None else offset, sync=sync
        )

    @property
    def segments(self) -> list[LogSegment]:
        return list(self._segments)

    @property
    def size_bytes(self) -> int:
        return sum(s.size for s in self._segments)

    def update_config(self, config: Mapping[str, Any]) -> None:
        """Apply new effective topic settings (AlterConfigs); they take effect from the next append."""
        self._config = dict(config)
        c = self._config
        self._segment_bytes = int(c["segment.bytes"])
        self._segment_ms = int(c["segment.ms"])
        self._segment_jitter_ms = int(c.get("segment.jitter.ms", 0))
        self._index_bytes = int(c["segment.index.bytes"])
        self._index_interval = int(c["index.interval.bytes"])
        self._flush_messages = int(c["flush.messages"])
        self._flush_ms = int(c["flush.ms"])
        self._retention_ms = int(c["retention.ms"])
        self._retention_bytes = int(c["retention.bytes"])
        self._delete_policy = "delete" in str(c.get("cleanup.policy", "delete"))
        for segment in self._segments:
            segment.index_interval_bytes = self._index_interval

    def __repr__(self) -> str:
        return (
            f"PartitionLog({self._topic}-{self._partition}, start={self._log_start}, "
            f"end={self._leo}, segments={len(self._segments)})"
        )

    def _now_ms(self) -> int:
        return int(self._clock() * 1000)

    def _check_open(self) -> None:
        if self.closed:
            raise KafkaError(ErrorCode.KAFKA_STORAGE_ERROR, f"log {self._topic}-{self._partition} is closed")

    def _check_writable(self) -> None:
        self._check_open()
        if self.offline_reason is not None:
            raise KafkaError(ErrorCode.KAFKA_STORAGE_ERROR, self.offline_reason)

    def storage_error(self, exc: OSError, doing: str) -> KafkaError:
        """A write failed: report it (the LogManager takes the dir offline) and say so to the caller."""
        if self.on_storage_error is not None:
            self.on_storage_error(self, exc)
        reason = self.offline_reason or f"{self._topic}-{self._partition}: {doing}: {exc}"
        return KafkaError(ErrorCode.KAFKA_STORAGE_ERROR, reason)

    # ---- append -------------------------------------------------------------------------------
    def append(
        self,
        data,
        *,
        first_offset: int,
        last_offset: int,
        max_timestamp: int,
        offset_of_max_timestamp: int,
        record_count: int,
    ) -> None:
        """Append entries whose offsets are already assigned, starting at the log end offset.

        Rolls first when the entries would overflow ``segment.bytes``, an index is full, the offset
        span no longer fits the segment's relative offsets, or ``segment.ms`` has passed. Flushes
        per ``flush.messages`` / ``flush.ms``. Then calls the append listeners.
        """
        if self.offline_reason is not None or self.closed:
            self._check_writable()
        assert first_offset == self._leo, f"append at {first_offset}, log end offset is {self._leo}"
        if last_offset < first_offset:
            raise ValueError(f"last offset {last_offset} < first offset {first_offset}")
        segment = self._segments[-1]
        try:
            if segment.size and self._should_roll(segment, len(data), last_offset, max_timestamp):
                segment = self.roll()
            segment.append(  # all or nothing: a failed write leaves the segment as it was
                data,
                first_offset=first_offset,
                last_offset=last_offset,
                max_timestamp=max_timestamp,
                offset_of_max_timestamp=offset_of_max_timestamp,
            )
        except OSError as exc:
            raise self.storage_error(exc, f"append to {segment.log_path}") from exc
        self._leo = last_offset + 1
        self._unflushed_messages += record_count if record_count > 0 else last_offset - first_offset + 1
        try:  # the records are in the log; a failure from here on still answers an error, as in Kafka
            if self._epochs.latest_epoch != self._leader_epoch:  # the first append of the epoch
                self._epochs.assign(self._leader_epoch, first_offset)
                self._write_epoch_checkpoint()
            if self._unflushed_messages >= self._flush_messages or (
                self._flush_ms < _NEVER and self._now_ms() - self._last_flush_ms >= self._flush_ms
            ):
                self.flush()
        except OSError as exc:
            if self._listeners:
                self._notify()
            raise self.storage_error(exc, "flush after append") from exc
        if self._listeners:
            self._notify()

    def _should_roll(self, segment: LogSegment, size: int, last_offset: int, max_timestamp: int) -> bool:
        if (
            segment.size + size > self._segment_bytes
            or segment.indexes_full
            or not segment.can_hold(last_offset)
        ):
            return True
        segment.read_first_batch_timestamp()
        first_ts = segment.first_batch_timestamp
        if first_ts is not None and first_ts >= 0 and max_timestamp >= 0:
            waited = max_timestamp - first_ts
        else:
            waited = self._now_ms() - segment.created_ms
        jitter = self._roll_jitter.get(segment.base_offset, 0)
        return waited > self._segment_ms - jitter

    def roll(self) -> LogSegment:
        """Seal the active segment and start a new one at the log end offset (no-op if empty)."""
        old = self._segments[-1]
        if old.size == 0:
            return old
        # loaded before the new segment exists (it covers the log so far), and before the old one is
        # sealed: a load that fails (KafkaError) leaves the log as it was
        state = self.producer_state
        old.seal()
        new = LogSegment.create(
            self.directory,
            self._leo,
            index_max_bytes=self._index_bytes,
            index_interval_bytes=self._index_interval,
            clock=self._clock,
        )
        self._segments.append(new)  # in the list before anything else can fail: it is on disk
        self._bases.append(new.base_offset)
        if self._segment_jitter_ms > 0:
            self._roll_jitter[new.base_offset] = random.randrange(self._segment_jitter_ms)
        # Kafka's roll: a snapshot named after the new segment, so that recovering the new segment
        # starts from it. Not fsynced here (on the loop): LogManager's flush of the sealed segment
        # fsyncs it (``snapshot_path`` of the next base). A failure (a full disk) fails the append
        # that rolled, and the dir goes offline, as in Kafka; recovery replays from the snapshot before.
        state.write_snapshot(self.directory, new.base_offset, sync=False)
        return new

    def replace_segments(self, old: list[LogSegment], new: LogSegment) -> None:
        """The log cleaner's swap: ``new`` (sealed, at its final file names) takes the place of the
        consecutive non-active segments ``old``, whose files the cleaner has renamed away."""
        i = self._segments.index(old[0])
        assert self._segments[i : i + len(old)] == old and i + len(old) < len(self._segments)
        self._segments[i : i + len(old)] = [new]
        self._bases[i : i + len(old)] = [new.base_offset]

    # ---- listeners ----------------------------------------------------------------------------
    def add_append_listener(self, callback: Callable[[PartitionLog], None]) -> None:
        """``callback(log)`` runs (on the owner's thread) after every append, and once when the log
        is deleted (``log.deleted`` is then True). Listeners are kept until removed."""
        self._listeners.append(callback)

    def remove_append_listener(self, callback: Callable[[PartitionLog], None]) -> None:
        try:
            self._listeners.remove(callback)
        except ValueError:
            pass

    def _notify(self) -> None:
        for callback in tuple(self._listeners):
            try:
                callback(self)
            except Exception:  # one broken waiter must not fail the append
                log.exception("append listener %r failed", callback)

    # ---- read ---------------------------------------------------------------------------------
    def _out_of_range(self, offset: int) -> KafkaError:
        return KafkaError(
            ErrorCode.OFFSET_OUT_OF_RANGE,
            f"offset {offset} is outside [{self._log_start}, {self._leo}] of {self._topic}-{self._partition}",
            log_start_offset=self._log_start,
            log_end_offset=self._leo,
        )

    def read(
        self, offset: int, max_bytes: int, *, min_one_entry: bool = True, max_offset: int | None = None
    ) -> FetchSlice:
        """Whole entries from the one holding ``offset``, at most ``max_bytes`` unless the first entry
        alone is larger and ``min_one_entry`` (KIP-74). Only entries whose last offset is below
        ``max_offset`` (exclusive bound, e.g. a last stable offset) are returned. Never crosses a
        segment boundary. ``offset == log_end_offset`` gives an empty slice; an offset outside
        ``[log_start_offset, log_end_offset]`` raises OFFSET_OUT_OF_RANGE."""
        self._check_open()
        leo = self._leo
        if offset < self._log_start or offset > leo:
            raise self._out_of_range(offset)
        limit_offset = leo if max_offset is None else min(max_offset, leo)
        empty = FetchSlice(None, offset, leo, self._log_start, leo)
        if offset >= limit_offset:
            return empty
        try:
            return self._read(offset, max_bytes, min_one_entry, limit_offset, empty)
        except (OSError, ValueError, struct.error) as exc:
            raise KafkaError(
                ErrorCode.KAFKA_STORAGE_ERROR, f"reading {self._topic}-{self._partition} at {offset}: {exc}"
            ) from exc

    def _read(
        self, offset: int, max_bytes: int, min_one_entry: bool, limit_offset: int, empty: FetchSlice
    ) -> FetchSlice:
        leo = self._leo
        i = bisect.bisect_right(self._bases, offset) - 1
        info = None
        while i < len(self._segments):
            segment = self._segments[i]
            info = segment.translate_offset(offset)
            if info is not None:
                break
            i += 1
        if info is None:
            return empty
        start = info.position
        max_position = segment.size
        if limit_offset < segment.next_offset:
            stop = segment.translate_offset(limit_offset, start)
            max_position = stop.position if stop is not None else segment.size
        if max_position <= start:
            return empty
        if info.size > max_bytes:
            if not min_one_entry:
                return empty
            end = start + info.size
        else:
            end, _ = segment.end_position_within(start, min(start + max_bytes, max_position))
        return FetchSlice(
            FileRegion(segment.file, start, end - start), info.base_offset, leo, self._log_start, leo
        )

    # ---- aborted transactions (.txnindex) --------------------------------------------------------
    def add_aborted_txn(self, txn: AbortedTxn) -> None:
        """Record an aborted transaction in the txn index of the segment holding its marker
        (``txn.last_offset``, already appended)."""
        self._check_writable()
        segment = self._segments[bisect.bisect_right(self._bases, txn.last_offset) - 1]
        try:
            segment.txn_index.append(txn)
        except OSError as exc:
            raise self.storage_error(exc, f"append to {segment.txn_index.path}") from exc
        segment.flushed = False

    def fetch_upper_bound(self, fetched: FetchSlice) -> int:
        """The offset just past what ``fetched`` holds: the next entry's offset (one header read), the
        segment's next offset at its end; ``fetched.first_offset`` when it holds nothing."""
        region = fetched.region
        if region is None or not region.size:
            return fetched.first_offset
        i = bisect.bisect_right(self._bases, fetched.first_offset) - 1
        segment = self._segments[i]
        end = region.position + region.size
        if segment.file is not region.file or end >= segment.size:
            return segment.next_offset if segment.file is region.file else self._leo
        try:
            header = os.pread(region.file.fileno(), 8, end)
        except OSError as exc:
            raise KafkaError(
                ErrorCode.KAFKA_STORAGE_ERROR, f"reading {self._topic}-{self._partition} at {end}: {exc}"
            ) from exc
        return struct.unpack(">q", header)[0] if len(header) == 8 else segment.next_offset

    def collect_aborted_transactions(self, fetch_offset: int, upper_bound: int) -> list[AbortedTxn]:
        """Aborted transactions overlapping ``[fetch_offset, upper_bound)``: those whose marker is at
        or after ``fetch_offset`` and whose first offset is below ``upper_bound``, from the segment
        holding ``fetch_offset`` on, until an entry's last stable offset reaches ``upper_bound`` (as
        Kafka's ``collectAbortedTransactions``)."""
        found: list[AbortedTxn] = []
        if upper_bound <= fetch_offset:
            return found
        i = max(bisect.bisect_right(self._bases, fetch_offset) - 1, 0)
        try:
            for segment in self._segments[i:]:
                txns, complete = segment.txn_index.collect(fetch_offset, upper_bound)
                found.extend(txns)
                if complete:
                    break
        except (OSError, ValueError) as exc:
            raise KafkaError(
                ErrorCode.KAFKA_STORAGE_ERROR,
                f"reading the txn index of {self._topic}-{self._partition}: {exc}",
            ) from exc
        return found

    def read_bytes(self, offset: int, max_bytes: int) -> bytes:
        """A copy of whole entries from ``offset`` (for internal readers such as the group
        coordinator loading ``__consumer_offsets``); b"" at the log end."""
        region = self.read(offset, max_bytes).region
        return region.read() if region is not None else b""

    def iter_entries(self, start: int, chunk_bytes: int) -> Iterator[tuple[bytes, EntryInfo]]:
        """(chunk, entry) for every entry holding offsets from ``start`` to the log end as it is
        now, read ``chunk_bytes`` at a time: for internal readers (``__consumer_offsets`` loading,
        producer-state replay). The first entry may begin before ``start``."""
        offset, end = start, self._leo
        while offset < end:
            data = self.read_bytes(offset, chunk_bytes)
            if not data:
                return
            last = offset - 1
            for entry in scan_entries(data):
                last = entry.last_offset
                if last >= offset:
                    yield data, entry
            if last < offset:  # nothing whole in the chunk: stop rather than spin
                return
            offset = last + 1

    def iter_entry_headers(self, start: int) -> Iterator[tuple[LogSegment, bytes, int, EntryInfo]]:
        """(segment, chunk, where the entry starts in the chunk, entry) for every entry holding offsets
        from ``start`` to the log end as it is now, reading each entry's header and not its records
        (``LogSegment.iter_headers``; ``entry.position`` is its position in the segment's file): for the
        producer-state replay, which needs the records of control batches only
        (``LogSegment.read_entry_bytes``). The first entry may begin before ``start``."""
        self._check_open()
        if start < self._log_start or start > self._leo:
            raise self._out_of_range(start)
        i = bisect.bisect_right(self._bases, start) - 1
        for segment in self._segments[i:]:
            first = segment.translate_offset(start)
            if first is None:
                continue
            for buf, at, info in segment.iter_headers(first.position, segment.size):
                yield segment, buf, at, info

    def offset_for_timestamp(self, timestamp: int) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record whose timestamp >= ``timestamp`` at or after the
        log start offset (ListOffsets by time), or None when there is none."""
        self._check_open()
        for segment in self._segments:
            if segment.max_timestamp < timestamp or segment.next_offset <= self._log_start:
                continue
            start = self._log_start
            while (info := segment.find_offset_by_timestamp(timestamp, start)) is not None:
                found = record_at_or_after(segment, info, timestamp, self._log_start)
                if found is not None:
                    return found
                start = info.last_offset + 1
        return None

    def max_timestamp_entry(self) -> tuple[int, int] | None:
        """(offset, timestamp) of the record with the largest timestamp (ListOffsets -3), or None.

        As Kafka since KAFKA-16310: the first segment holding the largest max timestamp, its first
        entry carrying it, and in that entry the first record with that timestamp (the entry is
        decoded: the indexes and recovery know entries, not records). Offsets below the log start
        offset are not answered; the log start offset is."""
        self._check_open()
        best = None
        for segment in self._segments:
            if segment.max_timestamp >= 0 and (best is None or segment.max_timestamp > best.max_timestamp):
                best = segment
        if best is None:
            return None
        info = best.max_timestamp_entry()
        offset = offset_of_max_timestamp(best, info) if info is not None else best.offset_of_max_timestamp
        if offset is None:
            return None
        return max(offset, self._log_start), best.max_timestamp

    # ---- flush --------------------------------------------------------------------------------
    def flush(self) -> None:
        """fsync every segment written since the last flush; the recovery point becomes the LEO."""
        for segment in self._segments:
            if not segment.flushed:
                segment.flush()
        self._recovery_point = self._leo
        self._unflushed_messages = 0
        self._last_flush_ms = self._now_ms()

    def flush_if_due(self) -> None:
        if self._unflushed_messages and self._now_ms() - self._last_flush_ms >= self._flush_ms:
            if self.offline_reason is not None:
                return
            try:
                self.flush()
            except OSError as exc:
                self.storage_error(exc, "flush")

    def sealed_unflushed(self) -> list[LogSegment]:
        """Sealed segments not yet fsynced (for a flush off the loop: fsync ``seg.file`` of each)."""
        if self.offline_reason is not None:
            return []
        return [s for s in self._segments[:-1] if not s.flushed]

    def mark_flushed(self, segments: list[LogSegment]) -> None:
        """The ``.log`` files of ``segments`` (from ``sealed_unflushed``) have been fsynced."""
        for segment in segments:
            if segment in self._segments and segment.file is not None:
                segment.index.flush()
                segment.time_index.flush()
                segment.txn_index.flush()
                segment.flushed = True
        point = next((s.base_offset for s in self._segments if not s.flushed), self._leo)
        self._recovery_point = max(self._recovery_point, point)

    def release_idle_descriptors(self) -> None:
        """The upkeep's sweep: index maps and writers unused since the last sweep are let go, so
        that an idle partition holds its ``.log`` descriptors only (docs/storage.md, "File
        descriptors"). Not during a cleaner's swap, whose old segments' maps must stay."""
        if self.swap_in_progress:
            return
        for segment in self._segments:
            segment.release_if_idle()

    # ---- start offset, retention, truncation ----------------------------------------------------
    def delete_records_before(self, offset: int) -> int:
        """DeleteRecords: move the log start offset to ``offset`` (-1 = the high watermark) and drop
        segments wholly below it. Returns the new log start offset."""
        self._check_writable()
        if offset == -1:
            offset = self._leo
        if offset < 0 or offset > self._leo:
            raise self._out_of_range(offset)
        if offset > self._log_start:
            self._log_start = offset
            if not self.swap_in_progress:
                self._delete_below_start()
            self._start_offset_changed()
        return self._log_start

    def _delete_below_start(self) -> int:
        doomed = []
        for i, segment in enumerate(self._segments[:-1]):
            if self._segments[i + 1].base_offset <= self._log_start:
                doomed.append(segment)
            else:
                break
        self._delete_segments(doomed, "below the log start offset")
        return len(doomed)

    def apply_retention(self, now_ms: int | None = None) -> int:
        """Delete whole non-active segments past ``retention.ms`` (by their max timestamp) or beyond
        ``retention.bytes``, oldest first, when ``cleanup.policy`` includes delete; also segments
        below the log start offset. Returns the number of segments deleted."""
        self._check_open()
        if self.offline_reason is not None:
            return 0  # an offline dir is left as it is until the broker restarts
        if self.swap_in_progress:
            return 0  # the next check deletes what is due
        deleted = self._delete_below_start()
        if not self._delete_policy:
            return deleted
        now_ms = self._now_ms() if now_ms is None else now_ms
        if self._retention_ms >= 0:
            doomed = []
            for segment in self._segments[:-1]:
                if now_ms - segment.largest_timestamp() > self._retention_ms:
                    doomed.append(segment)
                else:
                    break
            self._delete_segments(doomed, f"older than retention.ms={self._retention_ms}")
            deleted += len(doomed)
        if self._retention_bytes >= 0:
            excess = self.size_bytes - self._retention_bytes
            doomed = []
            for segment in self._segments[:-1]:
                if excess - segment.size >= 0:
                    doomed.append(segment)
                    excess -= segment.size
                else:
                    break
            self._delete_segments(doomed, f"beyond retention.bytes={self._retention_bytes}")
            deleted += len(doomed)
        return deleted

    def _delete_segments(self, doomed: list[LogSegment], reason: str) -> None:
        if not doomed:
            return
        for segment in doomed:
            segment.delete()
            ps.delete_snapshot(self.directory, segment.base_offset)  # as Kafka's deleteProducerSnapshots
        del self._segments[: len(doomed)]
        del self._bases[: len(doomed)]
        log.info(
            "%s-%d: deleted %d segments (%s), bases %s",
            self._topic,
            self._partition,
            len(doomed),
            reason,
            [s.base_offset for s in doomed],
        )
        first = self._segments[0].base_offset
        if first > self._log_start:
            self._log_start = first
            self._start_offset_changed()

    def _start_offset_changed(self) -> None:
        if self._epochs.truncate_from_start(self._log_start):
            self._try_write_epoch_checkpoint()
        if self.on_log_start_offset_change is not None:
            self.on_log_start_offset_change(self)

    def _fix_epoch_entries(self) -> bool:
        """The cache after the log's ends moved (Kafka's truncateFromEnd, truncateFromStart); the
        current epoch, if above 0 and lost with the truncated entries, starts again at the log end (an
        election's epoch is not undone by a truncation). True when the entries changed."""
        before = self._epochs.entries
        self._epochs.truncate_from_end(self._leo)
        self._epochs.truncate_from_start(self._log_start)
        if self._leader_epoch > 0 and self._epochs.latest_epoch < self._leader_epoch:
            self._epochs.assign(self._leader_epoch, self._leo)
        return self._epochs.entries != before

    def _write_epoch_checkpoint(self) -> None:
        if not self.read_only:
            self._epochs.write()

    def _try_write_epoch_checkpoint(self) -> None:
        """After a truncation: a failed write is the dir's failure, reported; the next start corrects a
        checkpoint left behind (Kafka flushes these asynchronously for the same reason)."""
        if self.offline_reason is not None:
            return
        try:
            self._write_epoch_checkpoint()
        except OSError as exc:
            self.storage_error(exc, "write leader-epoch-checkpoint")

    def truncate_to(self, offset: int) -> int:
        """Remove every entry whose last offset >= ``offset`` (a straddling batch goes whole); at or
        below the log start offset the log is emptied and restarts at ``offset``. Returns the new
        log end offset. For tests and tools; a single node never needs it."""
        self._check_open()
        if self.swap_in_progress:
            raise RuntimeError(f"{self._topic}-{self._partition}: truncation during a cleaner swap")
        if offset >= self._leo:
            return self._leo
        if offset <= self._log_start:
            self._truncate_fully(max(offset, 0))
        else:
            self._producer_state = None  # reloaded from the snapshots left (Kafka's truncateAndReload)
            while len(self._segments) > 1 and self._segments[-1].base_offset >= offset:
                self._segments.pop().delete()
                self._bases.pop()
            segment = self._segments[-1]
            if not segment.active:
                segment.make_active()
            segment.truncate_to(offset)
            if segment.next_offset < self._log_start:  # the batch holding the start offset went
                self._truncate_fully(self._log_start)
        self._leo = self._segments[-1].next_offset
        self._recovery_point = min(self._recovery_point, self._leo)
        for snapshot_offset, path in ps.snapshot_files(self.directory):
            if snapshot_offset > self._leo:
                _remove(path)
        if self._fix_epoch_entries():
            self._try_write_epoch_checkpoint()
        return self._leo

    def _truncate_fully(self, start: int) -> None:
        """Empty the log and restart it at ``start``."""
        for segment in self._segments:
            segment.delete()
        for _, path in ps.snapshot_files(self.directory):  # Kafka's truncateFullyAndStartAt
            _remove(path)
        if self._producer_state is not None:
            self._producer_state = ps.ProducerStateTable()
        self._segments = [
            LogSegment.create(
                self.directory,
                start,
                index_max_bytes=self._index_bytes,
                index_interval_bytes=self._index_interval,
                clock=self._clock,
            )
        ]
        self._bases = [start]
        self._log_start = start
        self._leo = start
        self._start_offset_changed()

    # ---- checkpoints and lifecycle --------------------------------------------------------------
    def write_leader_epoch_checkpoint(self) -> None:
        self._epochs.write()

    def close(self) -> None:
        """Flush, trim the active segment's indexes, release files. Regions in flight stay valid."""
        if self.closed:
            return
        try:
            if self.offline_reason is None:  # an offline dir is not written: its next start recovers
                self.flush()
                self.write_leader_epoch_checkpoint()
                # As Kafka at close: the next start replays nothing before it. Written when empty too,
                # so that a restart does not replay a whole log to learn that no producer is known.
                self.write_producer_snapshot()
        finally:
            for segment in self._segments:
                segment.close()
            self.closed = True

    def delete(self) -> None:
        """Remove the partition directory and everything in it; wakes the listeners."""
        for segment in self._segments:
            segment.delete()
        self.closed = True
        self.deleted = True
        shutil.rmtree(self.directory, ignore_errors=True)
        self._notify()
        self._listeners.clear()


def _remove(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def _drop_segments(directory: str, bases: list[int], index_bytes: int, interval: int, clock) -> None:
    for base in bases:
        for suffix in (".log", ".index", ".timeindex", ".txnindex"):
            _remove(os.path.join(directory, f"{base:020d}{suffix}"))


def _remove_snapshots_past(name: str, directory: str, log_end_offset: int) -> None:
    """Producer-state snapshots (``<offset>.snapshot``) describe the log up to their offset: one past
    a log end that recovery cut back would be believed again once appends pass it, so it goes (as
    Kafka truncates its producer state to the recovered log)."""
    for fname in os.listdir(directory):
        stem, _, ext = fname.partition(".")
        if ext == "snapshot" and len(stem) == 20 and stem.isdigit() and int(stem) > log_end_offset:
            log.warning("%s: removing producer snapshot %s, past the log end %d", name, fname, log_end_offset)
            _remove(os.path.join(directory, fname))


def _offset_range(first: int, last: int) -> str:
    return f"offsets {first}..{last}" if last >= first else "no offsets"


def _load_trusted(name: str, segment: LogSegment) -> bool:
    """``segment.load_trusted()``, with garbage that trips the header scan counted as a failure."""
    try:
        return segment.load_trusted()
    except (ValueError, struct.error) as exc:
        log.warning(
            "%s: segment %d fails its load checks (%s); re-reading it", name, segment.base_offset, exc
        )
        return False


def _warn_missing_offsets(
    name: str, segments: list[LogSegment], log_start_offset: int, reported_tails: set[int]
) -> None:
    """Log offsets that no segment holds: below the first segment (from the checkpointed log start
    offset) and between consecutive segments, except tails already logged as truncated."""
    first = segments[0].base_offset
    if log_start_offset < first:
        log.warning(
            "%s: %s missing: the checkpointed log start offset is %d but the first segment starts at %d",
            name,
            _offset_range(log_start_offset, first - 1),
            log_start_offset,
            first,
        )
    for prev, nxt in zip(segments, segments[1:], strict=False):
        if prev.next_offset < nxt.base_offset and prev.base_offset not in reported_tails:
            held = f"ends at {prev.next_offset - 1}" if prev.next_offset > prev.base_offset else "is empty"
            log.warning(
                "%s: %s missing: segment %d %s, the next one starts at %d; reads skip the gap",
                name,
                _offset_range(prev.next_offset, nxt.base_offset - 1),
                prev.base_offset,
                held,
                nxt.base_offset,
            )
