"""Share partitions (KIP-932): the in-flight records of one (share group, topic-partition). Sans-I/O.

Owner of: one share partition's share-partition start offset (SPSO, ``start_offset``), end offset (SPEO,
``end_offset``: the next offset never acquired yet) and the state of every offset in between: AVAILABLE,
ACQUIRED (by a member, until a lock deadline), ACKNOWLEDGED or ARCHIVED, each with a delivery count.
Offsets below the SPSO are done; offsets from the SPEO on have never been delivered. The
``SharePartitionManager`` owns the instances and calls them on the event loop; nothing here reads the log,
the clock or the share-state store: the manager hands in the batch spans it read, the time, and persists
what ``pending_write`` gives.

Representation: runs, not one object per offset. ``[start_offset, end_offset)`` is covered by sorted,
contiguous ``Run``s of offsets sharing a state, a count, an owner and a deadline (adjacent equal runs are
merged). A fetch acquires whole log batches, so the runs follow batch boundaries and stay few; a compacted
batch spanning a million offsets, or a gap between batches, is one run rather than a million entries. Every
operation is linear in the number of runs, which ``group.share.partition.max.record.locks`` keeps small.

The rules are Kafka 4.2's (SharePartition.java):

- acquire: the AVAILABLE offsets of the batches read, in offset order, first those already in flight
  (redeliveries), then new ones from the SPEO. Each acquisition adds one to the delivery count; an
  AVAILABLE offset whose count already reached ``delivery_limit`` is ARCHIVED instead. Control batches,
  aborted transactions' batches (read_committed) and offsets no batch holds (compaction, gaps) are
  ARCHIVED when met. ``max_records`` bounds what one call acquires: whole batches may overshoot it
  (batch_optimized), ``strict`` (record_limit) never does. New records are acquired only while
  ``end_offset - start_offset`` is below ``max_in_flight``. A record on its last delivery (count one
  below a limit above 2) is acquired alone, in a fetch of its own.
- acknowledge (all or nothing per partition): GAP and REJECT archive, ACCEPT acknowledges, RELEASE makes
  the offsets AVAILABLE again (ARCHIVED at the delivery limit), RENEW extends the lock. Offsets below the
  SPSO are skipped; every other one must be ACQUIRED by the member (INVALID_RECORD_STATE); ranges past
  the SPEO, unordered or overlapping ranges, and bad type lists are INVALID_REQUEST.
- lock expiry: ACQUIRED past its deadline goes AVAILABLE, or ARCHIVED at the delivery limit.
- releasing a member (its share session closed or its connection dropped): its ACQUIRED offsets go
  AVAILABLE with their delivery count lowered by one, as Kafka does (they were fetched but maybe never
  handed to the application), so they are never archived then.
- the SPSO moves past leading ACKNOWLEDGED/ARCHIVED offsets after every change, and up to the log start
  offset when retention deletes records (``move_start``).

Persistence: ACQUIRED is never persisted (a reload finds such offsets AVAILABLE with their last persisted
count, or not at all when they were new). Every other state change marks its offsets dirty;
``pending_write`` turns the dirty offsets into ``StateBatch`` runs for ``ShareStateCoordinator.write`` with
the current SPSO, ``mark_persisted`` clears them once written, and ``snapshot``/``restore`` undo an
operation whose write failed.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterable, Iterator, Sequence
from typing import NamedTuple

from minibroker.coordinator.share_state import DeliveryState, ShareState, StateBatch
from minibroker.errors import ErrorCode, KafkaError

__all__ = [
    "ACK_ACCEPT", "ACK_GAP", "ACK_REJECT", "ACK_RELEASE", "ACK_RENEW", "AcquiredRecords", "LogBatch", "Run",
    "SharePartition",
]

AVAILABLE = int(DeliveryState.AVAILABLE)
ACQUIRED = int(DeliveryState.ACQUIRED)
ACKNOWLEDGED = int(DeliveryState.ACKNOWLEDGED)
ARCHIVED = int(DeliveryState.ARCHIVED)
_DONE = (ACKNOWLEDGED, ARCHIVED)

# AcknowledgeType ids (ShareFetch/ShareAcknowledge AcknowledgeTypes)
ACK_GAP, ACK_ACCEPT, ACK_RELEASE, ACK_REJECT, ACK_RENEW = range(5)

_DATA, _CONTROL, _ABORTED, _GONE = range(4)  # what the log holds at a span of offsets


class LogBatch(NamedTuple):
    """A batch's span as read from the log (inclusive offsets)."""

    base_offset: int
    last_offset: int
    is_control: bool = False
    producer_id: int = -1
    is_transactional: bool = False


class AcquiredRecords(NamedTuple):
    """A run of offsets handed to a member, as ShareFetch's AcquiredRecords."""

    first_offset: int
    last_offset: int
    delivery_count: int


class Run(NamedTuple):
    """Offsets ``first``..``last`` (inclusive) sharing a state and delivery count; ``member`` and
    ``deadline`` (ms on the manager's clock) only for ACQUIRED."""

    first: int
    last: int
    state: int
    count: int
    member: str | None = None
    deadline: int = 0

    def same(self, other: Run) -> bool:
        return (self.state, self.count, self.member, self.deadline) == (
            other.state, other.count, other.member, other.deadline)


def _invalid_request(message: str) -> KafkaError:
    return KafkaError(ErrorCode.INVALID_REQUEST, message)


def check_acknowledgement_batches(batches: Sequence[tuple[int, int, Sequence[int]]], *,
                                  allow_renew: bool) -> None:
    """The checks Kafka makes on a partition's acknowledgement batches before touching any state:
    first <= last, ranges in order and not overlapping, one type or one per offset, known types (RENEW
    only where the version allows it). Raises INVALID_REQUEST."""
    highest = ACK_RENEW if allow_renew else ACK_REJECT
    previous_last = -1
    for first, last, types in batches:
        if first < 0 or first > last:
            raise _invalid_request(f"acknowledgement batch {first}-{last}: first offset after last offset")
        if first <= previous_last:
            raise _invalid_request(f"acknowledgement batch {first}-{last} overlaps or precedes the last one")
        if not types or (len(types) > 1 and len(types) != last - first + 1):
            raise _invalid_request(f"acknowledgement batch {first}-{last}: {len(types)} acknowledge types")
        for t in types:
            if not 0 <= t <= highest:
                raise _invalid_request(f"acknowledgement batch {first}-{last}: acknowledge type {t}")
        previous_last = last


def _aborted(batch: LogBatch, aborted: Sequence) -> bool:
    """Whether a transactional batch belongs to an aborted transaction: one of its producer's aborted
    transactions (``AbortedTxn``: producer_id, first_offset, last_offset = the ABORT marker) spans it."""
    for txn in aborted:
        if txn.producer_id == batch.producer_id and txn.first_offset <= batch.base_offset <= txn.last_offset:
            return True
    return False


class SharePartition:
    """The in-flight state of one share partition; see the module docstring. Not thread-safe."""

    def __init__(self, start_offset: int, *, delivery_limit: int = 5, max_in_flight: int = 2000) -> None:
        self.start_offset = start_offset
        self.end_offset = start_offset
        self.delivery_limit = delivery_limit
        self.max_in_flight = max_in_flight
        self._runs: list[Run] = []
        self._firsts: list[int] = []
        self._dirty: list[tuple[int, int]] = []  # offset ranges whose persisted state is stale
        self._persisted_start = start_offset

    @classmethod
    def from_state(cls, state: ShareState, *, log_start_offset: int = 0, delivery_limit: int = 5,
                   max_in_flight: int = 2000) -> SharePartition:
        """A share partition as persisted: ACQUIRED (never written by us) reads as AVAILABLE, offsets
        between the SPSO and the last batch that no batch covers were never delivered (AVAILABLE, count 0),
        and the SPSO moves up to the log start offset."""
        sp = cls(state.start_offset, delivery_limit=delivery_limit, max_in_flight=max_in_flight)
        cursor = state.start_offset
        for b in sorted(state.batches):
            first, last = max(b.first_offset, cursor), b.last_offset
            if last < first:
                continue
            if first > cursor:
                sp._runs.append(Run(cursor, first - 1, AVAILABLE, 0))
            delivery_state = AVAILABLE if b.delivery_state == ACQUIRED else int(b.delivery_state)
            sp._runs.append(Run(first, last, delivery_state, max(int(b.delivery_count), 0)))
            cursor = last + 1
        sp.end_offset = cursor
        sp._normalize()
        if log_start_offset > sp.start_offset:
            sp.move_start(log_start_offset)
        sp._advance_start()
        sp._persisted_start = state.start_offset
        return sp

    # -- reading -----------------------------------------------------------------------------------

    def runs(self) -> list[Run]:
        """The in-flight runs, covering [start_offset, end_offset) in order."""
        return list(self._runs)

    def state_at(self, offset: int) -> Run | None:
        """The run holding ``offset``, None outside [start_offset, end_offset)."""
        if not self.start_offset <= offset < self.end_offset:
            return None
        return self._runs[bisect_right(self._firsts, offset) - 1]

    def next_fetch_offset(self) -> int:
        """Where the next acquisition reads the log: the first AVAILABLE in-flight offset, else the SPEO."""
        for run in self._runs:
            if run.state == AVAILABLE:
                return run.first
        return self.end_offset

    def at_capacity(self) -> bool:
        """No new records can be acquired until the SPSO moves."""
        return self.end_offset - self.start_offset >= self.max_in_flight

    def next_deadline(self) -> int | None:
        deadlines = [run.deadline for run in self._runs if run.state == ACQUIRED]
        return min(deadlines) if deadlines else None

    def delivery_complete_count(self) -> int:
        """In-flight offsets already ACKNOWLEDGED or ARCHIVED (for lag)."""
        return sum(run.last - run.first + 1 for run in self._runs if run.state in _DONE)

    # -- acquiring ---------------------------------------------------------------------------------

    def acquire(self, member: str, batches: Sequence[LogBatch], *, now_ms: int, lock_ms: int,
                max_records: int, strict: bool = False, aborted: Sequence | None = None,
                fetch_offset: int | None = None) -> list[AcquiredRecords]:
        """Acquire for ``member`` the AVAILABLE offsets of ``batches`` (the log's batches read from
        ``fetch_offset``, default ``next_fetch_offset()``, in order), locked until ``now_ms + lock_ms``.
        ``aborted`` (read_committed): the aborted transactions overlapping the read. Returns the acquired
        runs in offset order."""
        if max_records <= 0 or not batches:
            return []
        if fetch_offset is None:
            fetch_offset = self.next_fetch_offset()
        cursor = min(max(fetch_offset, self.start_offset), self.end_offset)
        spans: list[tuple[int, int, int, int]] = []  # first, last, kind, records in the whole batch
        for batch in batches:
            if batch.last_offset < cursor:
                continue
            if batch.base_offset > cursor:
                spans.append((cursor, batch.base_offset - 1, _GONE, 0))
            if batch.is_control:
                kind = _CONTROL
            elif aborted and batch.is_transactional and _aborted(batch, aborted):
                kind = _ABORTED
            else:
                kind = _DATA
            spans.append((max(batch.base_offset, cursor), batch.last_offset, kind,
                          batch.last_offset - batch.base_offset + 1))
            cursor = batch.last_offset + 1
        deadline = now_ms + lock_ms
        out: list[AcquiredRecords] = []
        taken = 0
        stop = False
        for a, b, kind, batch_records in spans:
            batch_cap = self._throttled_cap(a, b, batch_records) if kind == _DATA else None
            if batch_cap is not None:
                if taken:  # a throttled batch is delivered in a fetch of its own
                    break
                max_records = min(max_records, batch_cap)
                stop_after_batch = True
            else:
                stop_after_batch = False
            for run in list(self._logical(a, b)):
                if run.state != AVAILABLE:
                    continue
                first, last = run.first, run.last
                new = first >= self.end_offset
                if new and self.at_capacity():
                    stop = True
                    break
                if kind != _DATA or run.count >= self.delivery_limit:
                    self._assign(Run(first, last, ARCHIVED, run.count))
                    self._mark_dirty((first, last))
                    continue
                if taken >= max_records:
                    stop = True
                    break
                room = max_records - taken
                if new:
                    room = min(room, self.max_in_flight - (self.end_offset - self.start_offset))
                if (strict or batch_cap is not None) and last - first + 1 > room:
                    last = first + room - 1
                    stop = True
                if self.delivery_limit > 2 and run.count == self.delivery_limit - 1:
                    # a last delivery goes alone, so that one poison record does not take the records
                    # delivered with it to the limit (Kafka's acquireSubsetBatchRecords)
                    if taken:
                        stop = True
                        break
                    last, stop = first, True
                count = run.count + 1
                self._assign(Run(first, last, ACQUIRED, count, member, deadline))
                taken += last - first + 1
                if out and out[-1].last_offset == first - 1 and out[-1].delivery_count == count:
                    out[-1] = out[-1]._replace(last_offset=last)
                else:
                    out.append(AcquiredRecords(first, last, count))
                if stop:
                    break
            if stop or (stop_after_batch and taken):
                break
        self._normalize()
        self._advance_start()
        return out

    def _throttled_cap(self, first: int, last: int, batch_records: int) -> int | None:
        """How many records of the log batch [first, last] one fetch may take when its redelivery is
        throttled, else None. As Kafka's SharePartition: once an available record of the batch has been
        delivered ``ceil(limit / 2)`` times (at least 2), the batch goes out in pieces halved at each
        further delivery (``records >> (count - threshold + 1)``, at least 1), so that a poison record
        takes fewer of its neighbours to the delivery limit."""
        threshold = max(2, -(-self.delivery_limit // 2))
        for run in self._logical(first, last):
            if run.state == AVAILABLE and run.count >= threshold:
                return max(1, batch_records >> (run.count - threshold + 1))
        return None

    # -- acknowledging -----------------------------------------------------------------------------

    def acknowledge(self, member: str, batches: Sequence[tuple[int, int, Sequence[int]]], *, now_ms: int,
                    lock_ms: int, allow_renew: bool = False) -> bool:
        """Apply a member's acknowledgements, all or nothing; raises KafkaError (INVALID_REQUEST,
        INVALID_RECORD_STATE) without changing anything. Returns whether any state (not just a lock)
        changed."""
        check_acknowledgement_batches(batches, allow_renew=allow_renew)
        for first, last, _types in batches:
            if last < self.start_offset:
                continue
            if self.start_offset == self.end_offset:
                raise KafkaError(ErrorCode.INVALID_RECORD_STATE,
                                 f"offsets {first}-{last} are not in flight (nothing is)")
            if first >= self.end_offset or last >= self.end_offset:
                raise _invalid_request(f"offsets {first}-{last} go past the acquired records "
                                       f"(end offset {self.end_offset})")
            for run in self._logical(max(first, self.start_offset), last):
                if run.state != ACQUIRED or run.member != member:
                    raise KafkaError(ErrorCode.INVALID_RECORD_STATE,
                                     f"offsets {run.first}-{run.last} are not acquired by this member")
        changed = False
        for first, last, types in batches:
            if last < self.start_offset:
                continue
            low = max(first, self.start_offset)
            if len(types) == 1:
                changed |= self._apply_ack(low, last, types[0], now_ms + lock_ms)
                continue
            index = low - first
            while index < len(types):
                end = index
                while end + 1 < len(types) and types[end + 1] == types[index]:
                    end += 1
                changed |= self._apply_ack(first + index, first + end, types[index], now_ms + lock_ms)
                index = end + 1
        self._normalize()
        self._advance_start()
        return changed

    def _apply_ack(self, first: int, last: int, ack_type: int, renewed_deadline: int) -> bool:
        for run in list(self._logical(first, last)):
            if ack_type == ACK_RENEW:
                self._assign(run._replace(deadline=renewed_deadline))
                continue
            if ack_type == ACK_ACCEPT:
                state = ACKNOWLEDGED
            elif ack_type == ACK_RELEASE:
                state = ARCHIVED if run.count >= self.delivery_limit else AVAILABLE
            else:  # GAP, REJECT
                state = ARCHIVED
            self._assign(Run(run.first, run.last, state, run.count))
        if ack_type == ACK_RENEW:
            return False
        self._mark_dirty((first, last))
        return True

    # -- releasing ---------------------------------------------------------------------------------

    def expire(self, now_ms: int) -> bool:
        """Locks whose deadline passed: AVAILABLE again, or ARCHIVED at the delivery limit."""
        return self._unlock(lambda run: run.deadline <= now_ms, lambda run: Run(
            run.first, run.last, ARCHIVED if run.count >= self.delivery_limit else AVAILABLE, run.count))

    def release(self, member: str) -> bool:
        """Everything ``member`` holds goes AVAILABLE with its delivery count lowered by one (Kafka's
        releaseAcquiredRecords on a share session's close)."""
        return self._unlock(lambda run: run.member == member,
                            lambda run: Run(run.first, run.last, AVAILABLE, max(run.count - 1, 0)))

    def _unlock(self, which, becomes) -> bool:
        """Every ACQUIRED run ``which`` picks takes the state ``becomes`` gives it; True when any did."""
        changed = False
        for run in list(self._runs):
            if run.state == ACQUIRED and which(run):
                self._assign(becomes(run))
                self._mark_dirty((run.first, run.last))
                changed = True
        if changed:
            self._normalize()
            self._advance_start()
        return changed

    def move_start(self, offset: int) -> None:
        """The log start offset moved past the SPSO (retention, DeleteRecords): what lies below is gone."""
        if offset <= self.start_offset:
            return
        keep = [run for run in self._runs if run.last >= offset]
        if keep and keep[0].first < offset:
            keep[0] = keep[0]._replace(first=offset)
        self._runs = keep
        self.start_offset = offset
        self.end_offset = max(self.end_offset, offset)
        self._normalize()
        self._advance_start()

    # -- persistence -------------------------------------------------------------------------------

    def pending_write(self) -> tuple[int, list[StateBatch]] | None:
        """(start offset, batches) bringing the persisted state up to date, or None when it is. ACQUIRED
        offsets are left out: they persist only once they leave that state."""
        batches: list[StateBatch] = []
        for first, last in _merged(self._dirty):
            first, last = max(first, self.start_offset), min(last, self.end_offset - 1)
            if first > last:
                continue
            for run in self._logical(first, last):
                if run.state == ACQUIRED:
                    continue
                if batches and batches[-1].last_offset == run.first - 1 and (
                        batches[-1].delivery_state, batches[-1].delivery_count) == (run.state, run.count):
                    batches[-1] = batches[-1]._replace(last_offset=run.last)
                else:
                    batches.append(StateBatch(run.first, run.last, run.state, run.count))
        if not batches and self.start_offset == self._persisted_start:
            self._dirty = []
            return None
        return self.start_offset, batches

    def mark_persisted(self) -> None:
        self._dirty = []
        self._persisted_start = self.start_offset

    def snapshot(self) -> tuple:
        return self.start_offset, self.end_offset, list(self._runs), list(self._dirty), self._persisted_start

    def restore(self, snapshot: tuple) -> None:
        self.start_offset, self.end_offset, runs, dirty, self._persisted_start = snapshot
        self._runs, self._dirty = list(runs), list(dirty)
        self._firsts = [run.first for run in self._runs]

    # -- runs --------------------------------------------------------------------------------------

    def _logical(self, first: int, last: int) -> Iterator[Run]:
        """The runs over [first, last] clipped to it, offsets from the SPEO on as never-delivered
        AVAILABLE (count 0)."""
        if first < self.end_offset and self._runs:
            i = max(bisect_right(self._firsts, first) - 1, 0)
            while i < len(self._runs) and self._runs[i].first <= last:
                run = self._runs[i]
                if run.last >= first:
                    yield run._replace(first=max(run.first, first), last=min(run.last, last))
                i += 1
        if last >= self.end_offset:
            yield Run(max(first, self.end_offset), last, AVAILABLE, 0)

    def _assign(self, new: Run) -> None:
        """Give ``new.first``..``new.last`` the state of ``new``; extends the SPEO when the range goes past
        it (the range then starts at or below it)."""
        if new.last >= self.end_offset:
            if new.first < self.end_offset:
                self._assign(new._replace(last=self.end_offset - 1))
                new = new._replace(first=self.end_offset)
            self._runs.append(new)
            self._firsts.append(new.first)
            self.end_offset = new.last + 1
            return
        i = bisect_right(self._firsts, new.first) - 1
        j = bisect_right(self._firsts, new.last) - 1
        pieces = []
        if self._runs[i].first < new.first:
            pieces.append(self._runs[i]._replace(last=new.first - 1))
        pieces.append(new)
        if self._runs[j].last > new.last:
            pieces.append(self._runs[j]._replace(first=new.last + 1))
        self._runs[i:j + 1] = pieces
        self._firsts[i:j + 1] = [p.first for p in pieces]

    def _mark_dirty(self, offsets: tuple[int, int]) -> None:
        self._dirty.append(offsets)
        if len(self._dirty) > 64:  # many changes between writes (markers archived by fetches): keep it short
            self._dirty = [r for r in _merged(self._dirty) if r[1] >= self.start_offset]

    def _normalize(self) -> None:
        merged: list[Run] = []
        for run in self._runs:
            if merged and merged[-1].same(run) and merged[-1].last == run.first - 1:
                merged[-1] = merged[-1]._replace(last=run.last)
            else:
                merged.append(run)
        self._runs = merged
        self._firsts = [run.first for run in merged]

    def _advance_start(self) -> None:
        drop = 0
        while drop < len(self._runs) and self._runs[drop].state in _DONE:
            drop += 1
        if drop:
            self.start_offset = self._runs[drop - 1].last + 1
            del self._runs[:drop]
            del self._firsts[:drop]
        if not self._runs:
            self.start_offset = max(self.start_offset, self.end_offset)
            self.end_offset = self.start_offset


def _merged(ranges: Iterable[tuple[int, int]]) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for first, last in sorted(ranges):
        if out and first <= out[-1][1] + 1:
            out[-1] = (out[-1][0], max(out[-1][1], last))
        else:
            out.append((first, last))
    return out
