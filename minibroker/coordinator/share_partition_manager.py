"""The share partitions of every share group on this broker (KIP-932): ``broker.share_partitions``.

Owner of: the cache of ``SharePartition``s keyed (group id, topic, partition), their lock timers and the
futures of fetches waiting for records to become acquirable. Everything runs on the event loop and is
synchronous; ShareFetch/ShareAcknowledge (B2) and the admin APIs (C) call it.

- First use of a share partition loads its persisted state (``broker.share_state.read``), or, when there
  is none, starts it where the group's ``share.auto.offset.reset`` says (earliest = log start offset,
  latest = log end offset (default), ``by_duration:<ISO-8601 duration>`` = the first offset whose
  timestamp is at least now minus the duration, found as ListOffsets finds it by timestamp, else the log
  end) and persists that start (``initialize``). While the share-state store is still loading, the
  partition answers COORDINATOR_NOT_AVAILABLE (retriable), as Kafka maps a persister still loading.
- ``acquire`` reads the log from the share partition's next fetch offset (the first AVAILABLE in-flight
  offset, else its end offset) up to the high watermark, or the last stable offset for a group with
  ``share.isolation.level=read_committed`` (aborted transactions then come from the ``.txnindex``), lets
  the SharePartition acquire, and answers the file region from the first to the last batch holding an
  acquired offset (batches in between that were not acquired are sent too: the client ignores offsets
  outside AcquiredRecords). When a read finds only control batches, aborted records or gaps it reads on,
  a bounded number of times, rather than answer nothing while records wait behind them.
- ``acknowledge`` applies acknowledgements and persists the changed runs (``share_state.write``) before it
  answers; a failed write rolls the in-memory change back and answers the write's error. As in Kafka, only
  a share partition a fetch loaded can be acknowledged (UNKNOWN_TOPIC_OR_PARTITION otherwise, e.g. for
  records fetched before a restart).
- Lock expiry: one ``loop.call_later`` per share partition for its earliest lock deadline; expiry is also
  applied lazily on every access. Expired records are persisted best effort (Kafka keeps the transition
  even when that write fails) and waiting fetches are woken.
- ``release_member``: a member's acquired records go back (its share session closed or its connection
  dropped; leaving the group does not release, as in Kafka: see share_group_coordinator.py).
- A topic deleted (or deleted and recreated: another topic id) drops its cached share partitions; calls
  then answer UNKNOWN_TOPIC_OR_PARTITION.

Redelivered batches shrink as their delivery count nears the limit, and a last attempt goes alone, as in
Kafka (share_partition.py). AcquiredRecords come as one run per contiguous range with one delivery count;
cutting them to the request's BatchSize is the handler's.
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
import struct
import time
from typing import NamedTuple

from minibroker.coordinator.share_partition import (
    AcquiredRecords,
    LogBatch,
    SharePartition,
    check_acknowledgement_batches,
)
from minibroker.errors import ErrorCode, KafkaError
from minibroker.protocol.file_region import FileRegion

__all__ = ["AcquiredRecords", "PartitionFetch", "SharePartitionManager"]

log = logging.getLogger("minibroker.share")

EMPTY = b""
_MAX_READS = 8  # reads one acquire makes past batches it cannot hand out (control, aborted, gaps)
_HEADER = struct.Struct(">qiibIhiqqqhii")  # v2 batch header: baseOffset ... recordCount (61 bytes)
_OVERHEAD = struct.Struct(">qi")
_CONTROL_MASK, _TRANSACTIONAL_MASK = 0x20, 0x10
_DURATION = re.compile(r"P(?:(\d+)D)?(?:T(?:(\d+)H)?(?:(\d+)M)?(?:(\d+)(?:[.,](\d{0,9}))?S)?)?",
                       re.IGNORECASE)


class PartitionFetch(NamedTuple):
    """What ``acquire`` gives for one partition: an error, or the record bytes (``bytes`` or a
    ``FileRegion``) holding every batch with an acquired offset and the acquired runs."""

    error: ErrorCode
    records: object
    acquired: list[AcquiredRecords]


class _Span(NamedTuple):
    batch: LogBatch
    position: int  # in the segment file
    size: int


class _Entry:
    """A cached share partition and its lock timer."""

    __slots__ = ("key", "topic_id", "sp", "timer")

    def __init__(self, key: tuple[str, str, int], topic_id: bytes, sp: SharePartition) -> None:
        self.key = key
        self.topic_id = topic_id
        self.sp = sp
        self.timer: asyncio.TimerHandle | None = None


def _now_ms() -> int:
    return int(time.monotonic() * 1000)  # the event loop's clock, so call_later agrees


def parse_duration_ms(text: str) -> int:
    """Milliseconds of an ISO-8601 duration as Java's Duration.parse reads it (days, hours, minutes,
    seconds with a fraction); ValueError when it is not one."""
    m = _DURATION.fullmatch(text.strip())
    if m is None or text.strip().upper() in ("P", "PT"):
        raise ValueError(f"not an ISO-8601 duration: {text!r}")
    days, hours, minutes, seconds, fraction = m.groups()
    minutes_total = (int(days or 0) * 24 + int(hours or 0)) * 60 + int(minutes or 0)
    ms = minutes_total * 60_000 + int(seconds or 0) * 1000
    if fraction:
        ms += int((fraction + "000")[:3])
    return ms


def read_spans(region: FileRegion, read_offset: int) -> list[_Span]:
    """The batches of a region read from the log, from their headers (no record is read). A v0/v1 entry
    gives only its last offset; it is taken to start where the previous one ended (the first one at the
    offset read)."""
    spans: list[_Span] = []
    fd = region.file.fileno()
    position, end = region.position, region.position + region.size
    cursor = read_offset
    while position + _OVERHEAD.size <= end:
        head = os.pread(fd, _HEADER.size, position)
        if len(head) < _OVERHEAD.size:
            break
        base, length = _OVERHEAD.unpack_from(head)
        size = _OVERHEAD.size + length
        if length <= 0 or position + size > end:
            break
        magic = head[16] if len(head) > 16 else -1
        if magic == 2 and len(head) == _HEADER.size:
            fields = _HEADER.unpack(head)
            attributes, last_delta, producer_id = fields[5], fields[6], fields[9]
            batch = LogBatch(base, base + last_delta, bool(attributes & _CONTROL_MASK), producer_id,
                             bool(attributes & _TRANSACTIONAL_MASK))
        else:
            batch = LogBatch(min(cursor, base), base)
        spans.append(_Span(batch, position, size))
        cursor = batch.last_offset + 1
        position += size
    return spans


def _covering(region: FileRegion, spans: list[_Span], acquired: list[AcquiredRecords]) -> FileRegion:
    """The part of ``region`` from the first to the last batch holding an acquired offset."""
    low, high = acquired[0].first_offset, acquired[-1].last_offset
    holding = [s for s in spans if s.batch.last_offset >= low and s.batch.base_offset <= high]
    if not holding:
        return region
    start = holding[0].position
    return FileRegion(region.file, start, holding[-1].position + holding[-1].size - start)


class SharePartitionManager:
    """``broker.share_partitions``: see the module docstring."""

    def __init__(self, broker) -> None:
        self.broker = broker
        self._entries: dict[tuple[str, str, int], _Entry] = {}
        self._watchers: dict[tuple[str, str, int], set[asyncio.Future]] = {}
        self._closed = False

    # -- configuration -----------------------------------------------------------------------------

    def _group_config(self, group_id: str, name: str):
        return self.broker.groups.configs.value(group_id, name)

    def lock_duration_ms(self, group_id: str) -> int:
        """The group's record lock duration (AcquisitionLockTimeoutMs)."""
        return int(self._group_config(group_id, "share.record.lock.duration.ms"))

    def _configure(self, group_id: str, sp: SharePartition) -> None:
        sp.delivery_limit = int(self._group_config(group_id, "share.delivery.count.limit"))
        sp.max_in_flight = int(self.broker.config["group.share.partition.max.record.locks"])

    def _read_committed(self, group_id: str) -> bool:
        return str(self._group_config(group_id, "share.isolation.level")).lower() == "read_committed"

    def _initial_offset(self, group_id: str, plog) -> int:
        reset = str(self._group_config(group_id, "share.auto.offset.reset")).strip().lower()
        if reset == "earliest":
            return plog.log_start_offset
        if reset.startswith("by_duration:"):
            try:
                duration = parse_duration_ms(reset.partition(":")[2])
            except ValueError:
                log.warning("group %s: share.auto.offset.reset %r is not valid; starting at the log end",
                            group_id, reset)
                return plog.log_end_offset
            # the first offset whose timestamp is at least the target, as ListOffsets finds it
            found = plog.offset_for_timestamp(max(int(time.time() * 1000) - duration, 0))
            return found[0] if found is not None else plog.log_end_offset
        return plog.log_end_offset

    # -- loading -----------------------------------------------------------------------------------

    def _entry(self, key: tuple[str, str, int]) -> _Entry:
        """The cached share partition, loaded or initialized on first use. Raises KafkaError."""
        group_id, topic, partition = key
        try:
            plog = self.broker.replicas.get_log(topic, partition)
        except KafkaError:
            self._drop(key)
            raise
        topic_id = plog.topic_id
        entry = self._entries.get(key)
        if entry is not None:
            if entry.topic_id == topic_id:
                return entry
            self._drop(key)  # the topic was deleted and created again
        store = self.broker.share_state
        if not store.loaded:
            raise KafkaError(ErrorCode.COORDINATOR_NOT_AVAILABLE, "the share group state is still loading")
        state = store.read(group_id, topic_id, partition)
        if state is None:
            start = self._initial_offset(group_id, plog)
            store.initialize(group_id, topic_id, partition, start, 0)
            sp = SharePartition(start)
            log.debug("share partition %s %s-%d initialized at offset %d", group_id, topic, partition, start)
        else:
            sp = SharePartition.from_state(state, log_start_offset=plog.log_start_offset)
            log.debug("share partition %s %s-%d loaded: start offset %d, end offset %d, %d runs in flight",
                      group_id, topic, partition, sp.start_offset, sp.end_offset, len(sp.runs()))
        self._configure(group_id, sp)
        entry = _Entry(key, topic_id, sp)
        self._entries[key] = entry
        return entry

    def _cached(self, key: tuple[str, str, int]) -> _Entry:
        """The cached share partition; UNKNOWN_TOPIC_OR_PARTITION when no fetch loaded it (Kafka's
        SharePartitionManager acknowledges only share partitions in its cache)."""
        group_id, topic, partition = key
        plog = self.broker.replicas.get_log(topic, partition)
        entry = self._entries.get(key)
        if entry is None or entry.topic_id != plog.topic_id:
            raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                             f"no records of {topic}-{partition} were fetched by share group {group_id} here")
        return entry

    def _drop(self, key: tuple[str, str, int]) -> None:
        entry = self._entries.pop(key, None)
        if entry is not None and entry.timer is not None:
            entry.timer.cancel()
            entry.timer = None

    # -- persistence and timers --------------------------------------------------------------------

    def _persist(self, entry: _Entry) -> None:
        """Write what changed (raises KafkaError; the caller rolls back)."""
        pending = entry.sp.pending_write()
        if pending is None:
            return
        start, batches = pending
        group_id, topic, partition = entry.key
        # with the partition's leader epoch, as Kafka's SharePartition writes its state
        epoch = self.broker.replicas.get_log(topic, partition).leader_epoch
        self.broker.share_state.write(group_id, entry.topic_id, partition, start, batches, leader_epoch=epoch)
        entry.sp.mark_persisted()

    def _expire(self, entry: _Entry, now_ms: int) -> None:
        if not entry.sp.expire(now_ms):
            return
        group_id, topic, partition = entry.key
        log.debug("share partition %s %s-%d: acquisition locks expired; start offset %d",
                  group_id, topic, partition, entry.sp.start_offset)
        try:
            self._persist(entry)
        except KafkaError as e:  # kept in memory all the same, as Kafka does; written with the next change
            log.warning("share partition %s %s-%d: could not persist expired locks: %s",
                        group_id, topic, partition, e)
        self._wake(entry.key)

    def _schedule(self, entry: _Entry) -> None:
        if entry.timer is not None:
            entry.timer.cancel()
            entry.timer = None
        deadline = entry.sp.next_deadline()
        if deadline is None or self._closed:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # no loop (a synchronous caller): expiry happens lazily on the next access
            return
        delay = max(deadline - _now_ms(), 0) / 1000 + 0.001
        entry.timer = loop.call_later(delay, self._on_lock_timer, entry)

    def _on_lock_timer(self, entry: _Entry) -> None:
        entry.timer = None
        if self._entries.get(entry.key) is not entry:
            return
        try:
            topic_id = self.broker.replicas.get_log(entry.key[1], entry.key[2]).topic_id
        except KafkaError:
            topic_id = None
        if topic_id != entry.topic_id:  # the topic is gone: nothing left to release or persist
            self._drop(entry.key)
            return
        self._expire(entry, _now_ms())
        self._schedule(entry)

    # -- the contract --------------------------------------------------------------------------------

    def acquire(self, group_id: str, member_id: str, topic: str, partition: int, *, max_records: int,
                max_bytes: int, strict: bool) -> PartitionFetch:
        """Acquire records of one partition for a member; loads the share partition on first use."""
        key = (group_id, topic, partition)
        try:
            entry = self._entry(key)
            sp = entry.sp
            self._configure(group_id, sp)
            now = _now_ms()
            self._expire(entry, now)
            replicas = self.broker.replicas
            plog = replicas.get_log(topic, partition)
            if plog.log_start_offset > sp.start_offset:
                sp.move_start(plog.log_start_offset)
            committed = self._read_committed(group_id)
            limit = replicas.last_stable_offset(topic, partition) if committed else plog.high_watermark
            max_records = min(max_records, int(self.broker.config["share.fetch.max.fetch.records"]))
            lock_ms = self.lock_duration_ms(group_id)
            for _ in range(_MAX_READS):
                fetch_offset = sp.next_fetch_offset()
                if fetch_offset >= limit or (fetch_offset == sp.end_offset and sp.at_capacity()):
                    break
                fetched = plog.read(fetch_offset, max(max_bytes, 1), min_one_entry=True,
                                    max_offset=limit)
                region = fetched.region
                if region is None or not region.size:
                    break
                spans = read_spans(region, fetch_offset)
                aborted = replicas.aborted_transactions(topic, partition, fetch_offset, fetched) \
                    if committed else None
                acquired = sp.acquire(member_id, [s.batch for s in spans], now_ms=now, lock_ms=lock_ms,
                                      max_records=max_records, strict=strict, aborted=aborted,
                                      fetch_offset=fetch_offset)
                if acquired:
                    self._schedule(entry)
                    log.debug("share partition %s %s-%d: %s acquired %s; start offset %d, end offset %d",
                              group_id, topic, partition, member_id,
                              [(a.first_offset, a.last_offset, a.delivery_count) for a in acquired],
                              sp.start_offset, sp.end_offset)
                    return PartitionFetch(ErrorCode.NONE, _covering(region, spans, acquired), acquired)
                if sp.next_fetch_offset() <= fetch_offset:
                    break
            return PartitionFetch(ErrorCode.NONE, EMPTY, [])
        except KafkaError as e:
            if e.code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
                self._drop(key)
            return PartitionFetch(e.code, EMPTY, [])

    def fetchable_bytes(self, group_id: str, topic: str, partition: int, *, wanted: int) -> int:
        """Bytes of log a fetch could take now, from the next fetch offset to the high watermark (the
        last stable offset under read_committed), counted up to ``wanted``: what a ShareFetch's MinBytes
        is held against before anything is acquired, as Kafka's DelayedShareFetch measures it. An error
        counts as ``wanted``: the fetch answers it at once."""
        key = (group_id, topic, partition)
        try:
            entry = self._entry(key)
            sp = entry.sp
            self._configure(group_id, sp)
            self._expire(entry, _now_ms())
            replicas = self.broker.replicas
            plog = replicas.get_log(topic, partition)
            limit = replicas.last_stable_offset(topic, partition) if self._read_committed(group_id) \
                else plog.high_watermark
            offset = max(sp.next_fetch_offset(), plog.log_start_offset)
            if offset == sp.end_offset and sp.at_capacity():
                return 0
            total = 0
            for _ in range(_MAX_READS):
                if offset >= limit or total >= wanted:
                    break
                region = plog.read(offset, wanted - total, min_one_entry=True, max_offset=limit).region
                if region is None or not region.size:
                    break
                spans = read_spans(region, offset)
                if not spans:
                    break
                total += region.size
                offset = spans[-1].batch.last_offset + 1
            return total
        except KafkaError:
            return wanted

    def acknowledge(self, group_id: str, member_id: str, topic: str, partition: int,
                    batches: list[tuple[int, int, list[int]]], *, allow_renew: bool) -> ErrorCode:
        """Apply a member's acknowledgements of one partition and persist them before answering."""
        key = (group_id, topic, partition)
        try:
            check_acknowledgement_batches(batches, allow_renew=allow_renew)
            entry = self._cached(key)
        except KafkaError as e:
            if e.code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
                self._drop(key)
            return e.code
        sp = entry.sp
        self._configure(group_id, sp)
        now = _now_ms()
        self._expire(entry, now)
        before = sp.snapshot()
        try:
            changed = sp.acknowledge(member_id, batches, now_ms=now, lock_ms=self.lock_duration_ms(group_id),
                                     allow_renew=allow_renew)
        except KafkaError as e:
            log.debug("share partition %s %s-%d: acknowledgement by %s refused: %s",
                      group_id, topic, partition, member_id, e)
            return e.code
        try:
            self._persist(entry)
        except KafkaError as e:
            sp.restore(before)
            log.warning("share partition %s %s-%d: acknowledgement not persisted, rolled back: %s",
                        group_id, topic, partition, e)
            return e.code
        log.debug("share partition %s %s-%d: %s acknowledged %s; start offset %d, end offset %d",
                  group_id, topic, partition, member_id, [(f, la, list(t)) for f, la, t in batches],
                  sp.start_offset, sp.end_offset)
        if changed:
            self._wake(key)
        self._schedule(entry)
        return ErrorCode.NONE

    def release_member(self, group_id: str, member_id: str) -> None:
        """Release everything a member holds in the group (its share session closed or its connection
        dropped). A failed write leaves the records acquired until their locks expire."""
        for key, entry in list(self._entries.items()):
            if key[0] != group_id:
                continue
            sp = entry.sp
            before = sp.snapshot()
            if not sp.release(member_id):
                continue
            try:
                self._persist(entry)
            except KafkaError as e:
                sp.restore(before)
                log.warning("share partition %s %s-%d: release of %s not persisted, left to lock expiry: %s",
                            key[0], key[1], key[2], member_id, e)
                continue
            log.debug("share partition %s %s-%d: released the records of %s", *key, member_id)
            self._wake(key)
            self._schedule(entry)

    def cached_partitions(self, group_id: str) -> list[tuple[str, int, SharePartition]]:
        """(topic, partition, share partition) of ``group_id`` held in memory (for the live view,
        minibroker/tools/live_view.py: read, never changed)."""
        return sorted(((t, p, e.sp) for (g, t, p), e in list(self._entries.items()) if g == group_id),
                      key=lambda row: row[:2])

    def watch(self, keys: list[tuple[str, str, int]]) -> asyncio.Future:
        """A future resolved when records may have become acquirable on one of ``keys`` (group, topic,
        partition): released, expired, or acknowledged so that the start offset moved."""
        fut = asyncio.get_running_loop().create_future()
        for key in keys:
            self._watchers.setdefault(key, set()).add(fut)
        return fut

    def unwatch(self, keys: list[tuple[str, str, int]], fut: asyncio.Future) -> None:
        for key in keys:
            waiting = self._watchers.get(key)
            if waiting is not None:
                waiting.discard(fut)
                if not waiting:
                    del self._watchers[key]

    def _wake(self, key: tuple[str, str, int]) -> None:
        for fut in self._watchers.pop(key, ()):
            if not fut.done():
                fut.set_result(None)

    def forget(self, group_id: str, topic_ids: set[bytes] | None = None) -> None:
        """Drop cached share partitions of a group (all, or those of ``topic_ids``): the next use reloads
        them from the share-state store."""
        for key, entry in list(self._entries.items()):
            if key[0] == group_id and (topic_ids is None or entry.topic_id in topic_ids):
                self._drop(key)
                self._wake(key)

    def _cached_or_stored(self, group_id: str, topic: str, partition: int):
        """(SharePartition or None, ShareState or None, partition log); raises KafkaError."""
        plog = self.broker.replicas.get_log(topic, partition)
        entry = self._entries.get((group_id, topic, partition))
        if entry is not None and entry.topic_id == plog.topic_id:
            return entry.sp, None, plog
        store = self.broker.share_state
        if not store.loaded:
            return None, None, plog
        return None, store.read(group_id, plog.topic_id, partition), plog

    def start_offset(self, group_id: str, topic: str, partition: int) -> int | None:
        """The share-partition start offset, None when the group has no state for the partition."""
        try:
            sp, state, _plog = self._cached_or_stored(group_id, topic, partition)
        except KafkaError:
            return None
        if sp is not None:
            return sp.start_offset
        return state.start_offset if state is not None else None

    def lag(self, group_id: str, topic: str, partition: int) -> int | None:
        """Kafka 4.2's share-partition lag: high watermark - start offset - records already acknowledged
        or archived above the start offset; None without state."""
        try:
            sp, state, plog = self._cached_or_stored(group_id, topic, partition)
        except KafkaError:
            return None
        if sp is not None:
            start, done = sp.start_offset, sp.delivery_complete_count()
        elif state is not None:
            start, done = state.start_offset, state.delivery_complete_count()
        else:
            return None
        return max(plog.high_watermark - start - done, 0)

    def close(self) -> None:
        self._closed = True
        for key in list(self._entries):
            self._drop(key)
        for key in list(self._watchers):
            self._wake(key)
