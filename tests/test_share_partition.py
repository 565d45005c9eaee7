"""SharePartition (KIP-932), without I/O: Kafka's acquisition and acknowledgement rules, and hypothesis
state-machine tests of random interleavings of acquire / acknowledge / expire / release / reload."""

from __future__ import annotations

from typing import NamedTuple

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from minibroker.coordinator.share_partition import (
    ACK_ACCEPT,
    ACK_GAP,
    ACK_REJECT,
    ACK_RELEASE,
    ACK_RENEW,
    AcquiredRecords,
    LogBatch,
    SharePartition,
)
from minibroker.coordinator.share_state import DeliveryState, ShareState, StateBatch, merge_batches
from minibroker.errors import ErrorCode as E
from minibroker.errors import KafkaError

AVAILABLE, ACQUIRED = int(DeliveryState.AVAILABLE), int(DeliveryState.ACQUIRED)
ACKNOWLEDGED, ARCHIVED = int(DeliveryState.ACKNOWLEDGED), int(DeliveryState.ARCHIVED)


class Txn(NamedTuple):  # the fields of AbortedTxn the share partition reads
    producer_id: int
    first_offset: int
    last_offset: int


def states(sp: SharePartition) -> dict[int, tuple[int, int, str | None]]:
    """offset -> (state, delivery count, member) over [start, end)."""
    out = {}
    for run in sp.runs():
        for offset in range(run.first, run.last + 1):
            out[offset] = (run.state, run.count, run.member)
    return out


def acquire(sp, member, batches, *, now=0, lock=1000, max_records=100, strict=False, aborted=None):
    return sp.acquire(member, batches, now_ms=now, lock_ms=lock, max_records=max_records, strict=strict,
                      aborted=aborted)


def ack(sp, member, batches, *, now=0, lock=1000, renew=False):
    return sp.acknowledge(member, batches, now_ms=now, lock_ms=lock, allow_renew=renew)


def code_of(fn, *args, **kwargs) -> E:
    with pytest.raises(KafkaError) as info:
        fn(*args, **kwargs)
    return info.value.code


# -- Kafka's rules, one at a time ---------------------------------------------------------------------

def test_acquire_whole_batches_then_accept_moves_the_start_offset():
    sp = SharePartition(0)
    got = acquire(sp, "a", [LogBatch(0, 4), LogBatch(5, 9)], max_records=3)
    assert got == [AcquiredRecords(0, 4, 1)]  # batch_optimized: the first batch whole, then stop
    assert (sp.start_offset, sp.end_offset) == (0, 5)
    assert ack(sp, "a", [(0, 4, [ACK_ACCEPT])]) is True
    assert (sp.start_offset, sp.end_offset, sp.runs()) == (5, 5, [])
    assert sp.pending_write() == (5, [])


def test_record_limit_mode_never_exceeds_max_records():
    sp = SharePartition(0)
    assert acquire(sp, "a", [LogBatch(0, 9)], max_records=3, strict=True) == [AcquiredRecords(0, 2, 1)]
    assert sp.end_offset == 3
    assert acquire(sp, "b", [LogBatch(0, 9)], max_records=4, strict=True) == [AcquiredRecords(3, 6, 1)]


def test_control_batches_gaps_and_aborted_transactions_are_archived_not_delivered():
    sp = SharePartition(0)
    batches = [LogBatch(0, 1, producer_id=7, is_transactional=True), LogBatch(2, 2, True, 7, True),
               LogBatch(5, 6, producer_id=8, is_transactional=True), LogBatch(7, 7, True, 8, True),
               LogBatch(8, 9)]
    got = acquire(sp, "a", batches, aborted=[Txn(7, 0, 2)])
    assert got == [AcquiredRecords(5, 6, 1), AcquiredRecords(8, 9, 1)]
    # 0-1 aborted, 2 a marker, 3-4 held by no batch: all archived, so the start offset is past them
    assert sp.start_offset == 5
    assert states(sp)[7] == (ARCHIVED, 0, None)
    # read_uncommitted (no aborted list): the aborted records are delivered
    sp2 = SharePartition(0)
    assert acquire(sp2, "a", batches[:2])[0] == AcquiredRecords(0, 1, 1)


def test_acknowledge_types_and_release_counts():
    sp = SharePartition(0, delivery_limit=2)
    acquire(sp, "a", [LogBatch(0, 4)])
    ack(sp, "a", [(0, 4, [ACK_GAP, ACK_ACCEPT, ACK_RELEASE, ACK_REJECT, ACK_RELEASE])])
    assert [states(sp)[o][0] for o in range(2, 5)] == [AVAILABLE, ARCHIVED, AVAILABLE]
    assert sp.start_offset == 2
    assert acquire(sp, "b", [LogBatch(0, 4)]) == [AcquiredRecords(2, 2, 2), AcquiredRecords(4, 4, 2)]
    ack(sp, "b", [(2, 2, [ACK_RELEASE]), (4, 4, [ACK_RELEASE])])  # at the delivery limit: archived
    assert (sp.start_offset, sp.runs()) == (5, [])


def test_delivery_limit_reached_by_lock_expiry_archives():
    sp = SharePartition(0, delivery_limit=2)
    acquire(sp, "a", [LogBatch(0, 0)], now=0, lock=100)
    assert sp.next_deadline() == 100
    assert not sp.expire(99)
    assert sp.expire(100)
    assert states(sp)[0] == (AVAILABLE, 1, None)
    assert acquire(sp, "b", [LogBatch(0, 0)], now=200, lock=100) == [AcquiredRecords(0, 0, 2)]
    assert sp.expire(300)
    assert (sp.start_offset, sp.runs()) == (1, [])


def test_renew_extends_the_lock_and_persists_nothing():
    sp = SharePartition(0)
    acquire(sp, "a", [LogBatch(0, 2)], now=0, lock=100)
    assert code_of(ack, sp, "a", [(0, 2, [ACK_RENEW])]) == E.INVALID_REQUEST  # RENEW needs v2
    assert ack(sp, "a", [(0, 2, [ACK_RENEW])], now=50, lock=100, renew=True) is False
    assert sp.next_deadline() == 150 and sp.pending_write() is None
    assert not sp.expire(120)


def test_release_member_lowers_the_count_and_never_archives():
    sp = SharePartition(0, delivery_limit=2)
    acquire(sp, "a", [LogBatch(0, 1)], lock=10)
    sp.expire(10)
    acquire(sp, "a", [LogBatch(0, 1)])  # second delivery: at the limit
    assert sp.release("b") is False
    assert sp.release("a") is True
    assert states(sp) == {0: (AVAILABLE, 1, None), 1: (AVAILABLE, 1, None)}


def test_a_last_delivery_goes_alone():
    sp = SharePartition(0, delivery_limit=3)
    acquire(sp, "a", [LogBatch(0, 3)])
    ack(sp, "a", [(0, 3, [ACK_RELEASE])])
    assert acquire(sp, "a", [LogBatch(0, 3)]) == [AcquiredRecords(0, 3, 2)]
    ack(sp, "a", [(0, 3, [ACK_RELEASE])])
    assert acquire(sp, "b", [LogBatch(0, 3), LogBatch(4, 5)]) == [AcquiredRecords(0, 0, 3)]
    assert acquire(sp, "b", [LogBatch(0, 3), LogBatch(4, 5)]) == [AcquiredRecords(1, 1, 3)]
    assert SharePartition(0, delivery_limit=2).acquire(  # a limit of 2: no isolation, as Kafka
        "a", [LogBatch(0, 3)], now_ms=0, lock_ms=1, max_records=9) == [AcquiredRecords(0, 3, 1)]


@pytest.mark.parametrize(("batches", "code"), [
    ([(3, 2, [1])], E.INVALID_REQUEST),                 # first > last
    ([(0, 1, [1]), (1, 2, [1])], E.INVALID_REQUEST),    # overlapping
    ([(2, 3, [1]), (0, 1, [1])], E.INVALID_REQUEST),    # out of order
    ([(0, 2, [1, 1])], E.INVALID_REQUEST),              # neither one type nor one per offset
    ([(0, 1, [])], E.INVALID_REQUEST),
    ([(0, 1, [5])], E.INVALID_REQUEST),
    ([(0, 1, [-1])], E.INVALID_REQUEST),
    ([(3, 9, [1])], E.INVALID_REQUEST),                 # past the end offset
    ([(9, 9, [1])], E.INVALID_REQUEST),
    ([(4, 4, [1])], E.INVALID_RECORD_STATE),            # not acquired by "a"
    ([(0, 4, [1])], E.INVALID_RECORD_STATE),
])
def test_acknowledge_errors_change_nothing(batches, code):
    sp = SharePartition(0)
    acquire(sp, "a", [LogBatch(0, 3)])
    acquire(sp, "b", [LogBatch(4, 5)])
    before = sp.snapshot()
    assert code_of(ack, sp, "a", batches) == code
    assert sp.snapshot() == before


def test_acknowledge_below_the_start_offset_is_skipped_and_nothing_in_flight_is_invalid_state():
    sp = SharePartition(10)
    assert ack(sp, "a", [(0, 9, [ACK_ACCEPT])]) is False
    assert code_of(ack, sp, "a", [(10, 10, [ACK_ACCEPT])]) == E.INVALID_RECORD_STATE


def test_in_flight_limit_stops_new_records_but_not_redeliveries():
    sp = SharePartition(0, max_in_flight=4)
    assert acquire(sp, "a", [LogBatch(0, 2), LogBatch(3, 5), LogBatch(6, 7)]) == [AcquiredRecords(0, 5, 1)]
    assert sp.at_capacity() and sp.end_offset == 6
    assert acquire(sp, "b", [LogBatch(6, 7)]) == []
    ack(sp, "a", [(1, 1, [ACK_RELEASE])])
    assert acquire(sp, "b", [LogBatch(0, 2), LogBatch(3, 5)]) == [AcquiredRecords(1, 1, 2)]


def test_from_state_reloads_counts_acquired_as_available_and_gaps_as_new():
    state = ShareState(0, -1, 10, (StateBatch(10, 11, ACKNOWLEDGED, 1), StateBatch(14, 15, AVAILABLE, 2),
                                   StateBatch(16, 16, ACQUIRED, 3)), 0, 0)
    sp = SharePartition.from_state(state, log_start_offset=0)
    assert (sp.start_offset, sp.end_offset) == (12, 17)
    assert states(sp) == {12: (AVAILABLE, 0, None), 13: (AVAILABLE, 0, None), 14: (AVAILABLE, 2, None),
                          15: (AVAILABLE, 2, None), 16: (AVAILABLE, 3, None)}
    assert sp.pending_write() == (12, [])  # the start offset moved past the acknowledged records
    moved = SharePartition.from_state(state, log_start_offset=15)
    assert (moved.start_offset, moved.end_offset) == (15, 17)


def test_log_start_moving_drops_what_lies_below():
    sp = SharePartition(0)
    acquire(sp, "a", [LogBatch(0, 9)])
    sp.move_start(5)
    assert (sp.start_offset, sp.end_offset) == (5, 10)
    assert ack(sp, "a", [(0, 9, [ACK_ACCEPT])]) is True
    assert (sp.start_offset, sp.runs()) == (10, [])


# -- random interleavings -----------------------------------------------------------------------------

MEMBERS = ("a", "b", "c")
LIMIT = 3


@st.composite
def logs(draw):
    """A log of batches with gaps, control batches and transactions, and its aborted transactions."""
    batches, aborted, offset = [], [], draw(st.integers(0, 3))
    for _ in range(draw(st.integers(1, 14))):
        offset += draw(st.sampled_from([0, 0, 0, 1, 2]))  # compaction gaps
        kind = draw(st.sampled_from(["data", "data", "data", "control", "txn"]))
        if kind == "control":
            batches.append(LogBatch(offset, offset, True, 9, True))
            offset += 1
            continue
        size = draw(st.integers(1, 5))
        if kind == "txn":
            batches.append(LogBatch(offset, offset + size - 1, False, 9, True))
            if draw(st.booleans()):
                aborted.append(Txn(9, offset, offset + size))
        else:
            batches.append(LogBatch(offset, offset + size - 1))
        offset += size
    return batches, aborted


class SharePartitionMachine(RuleBasedStateMachine):
    """Drives a SharePartition and a model of what each member was handed; the persisted state is
    replayed with the share-state store's merge rules (batches replace the states of the offsets they
    cover, the start offset drops what lies below it)."""

    @initialize(log=logs(), start=st.integers(0, 3), committed=st.booleans(),
                max_in_flight=st.integers(3, 40))
    def setup(self, log, start, committed, max_in_flight):
        self.batches, aborted = log
        self.aborted = aborted if committed else None
        self.sp = SharePartition(start, delivery_limit=LIMIT, max_in_flight=max_in_flight)
        self.max_in_flight = max_in_flight
        self.now = 0
        self.held: dict[int, str] = {}  # offset -> member, as the members were told
        self.highest_start = start
        self.persisted_start = start
        self.persisted: tuple[StateBatch, ...] = ()
        self.handed: set[int] = set()  # every offset ever handed to a member
        self.deliverable = set()
        for b in self.batches:
            if b.is_control or (b.is_transactional and any(
                    t.producer_id == b.producer_id and t.first_offset <= b.base_offset <= t.last_offset
                    for t in self.aborted or ())):
                continue
            self.deliverable.update(range(max(b.base_offset, start), b.last_offset + 1))

    # -- helpers --

    def _persist(self, fail: bool) -> bool:
        pending = self.sp.pending_write()
        if pending is None:
            return True
        if fail:
            return False
        start, batches = pending
        assert all(b.delivery_state != ACQUIRED for b in batches)
        if start != -1:
            self.persisted_start = start
        self.persisted = merge_batches(self.persisted, batches, self.persisted_start)
        self.sp.mark_persisted()
        self._check_persisted()
        return True

    def _check_persisted(self):
        assert self.persisted_start == self.sp.start_offset
        persisted = {o: (b.delivery_state, b.delivery_count)
                     for b in self.persisted for o in range(b.first_offset, b.last_offset + 1)}
        for offset, (state, count, _member) in states(self.sp).items():
            if state == ACQUIRED:
                continue
            assert persisted.get(offset, (AVAILABLE, 0)) == (state, count), offset

    def _read_from(self, offset, how_many):
        return [b for b in self.batches if b.last_offset >= offset][:how_many]

    # -- rules --

    @rule(member=st.sampled_from(MEMBERS), max_records=st.integers(1, 12), strict=st.booleans(),
          how_many=st.integers(1, 6))
    def acquire(self, member, max_records, strict, how_many):
        fetch_offset = self.sp.next_fetch_offset()
        batches = self._read_from(fetch_offset, how_many)
        start_before = self.sp.start_offset
        got = self.sp.acquire(member, batches, now_ms=self.now, lock_ms=100, max_records=max_records,
                              strict=strict, aborted=self.aborted, fetch_offset=fetch_offset)
        taken = sum(a.last_offset - a.first_offset + 1 for a in got)
        if strict:
            assert taken <= max_records
        previous_last = -1
        for a in got:
            assert a.first_offset > previous_last and a.first_offset <= a.last_offset
            previous_last = a.last_offset
            assert 1 <= a.delivery_count <= LIMIT
            for offset in range(a.first_offset, a.last_offset + 1):
                assert offset not in self.held, f"{offset} to {member}, held by {self.held.get(offset)}"
                assert offset >= start_before
                assert offset in self.deliverable, f"{offset} is a marker, aborted or not in the log"
                self.held[offset] = member
                self.handed.add(offset)

    @rule(member=st.sampled_from(MEMBERS), data=st.data(), fail=st.booleans(), renew=st.booleans())
    def acknowledge(self, member, data, fail, renew):
        mine = sorted(o for o, m in self.held.items() if m == member)
        if mine and data.draw(st.booleans()):
            chosen = sorted(data.draw(st.sets(st.sampled_from(mine), min_size=1)))
            ranges = []
            for offset in chosen:
                if ranges and ranges[-1][1] == offset - 1:
                    ranges[-1][1] = offset
                else:
                    ranges.append([offset, offset])
            top = ACK_RENEW if renew else ACK_REJECT
            batches = []
            for first, last in ranges:
                if data.draw(st.booleans()):
                    types = [data.draw(st.integers(0, top))]
                else:
                    types = [data.draw(st.integers(0, top)) for _ in range(last - first + 1)]
                batches.append((first, last, types))
            valid = True
        else:
            first = data.draw(st.integers(0, 60))
            batches = [(first, first + data.draw(st.integers(0, 5)), [data.draw(st.integers(0, 4))])]
            valid = False
        before = self.sp.snapshot()
        try:
            self.sp.acknowledge(member, batches, now_ms=self.now, lock_ms=100, allow_renew=renew)
        except KafkaError as e:
            assert not valid, f"valid acknowledgement refused: {e}"
            assert e.code in (E.INVALID_REQUEST, E.INVALID_RECORD_STATE)
            assert self.sp.snapshot() == before
            return
        if not self._persist(fail):
            self.sp.restore(before)
            assert self.sp.snapshot() == before
            return
        for first, last, types in batches:
            for offset in range(first, last + 1):
                kind = types[0] if len(types) == 1 else types[offset - first]
                if offset in self.held and kind != ACK_RENEW:
                    del self.held[offset]

    @rule(step=st.integers(1, 150), fail=st.booleans())
    def expire(self, step, fail):
        self.now += step
        self.sp.expire(self.now)
        self._persist(fail)  # expiry stays in memory even when the write fails
        self.held = {o: m for o, m in self.held.items()
                     if (r := self.sp.state_at(o)) is not None and r.state == ACQUIRED}

    @rule(member=st.sampled_from(MEMBERS), fail=st.booleans())
    def release(self, member, fail):
        before = self.sp.snapshot()
        self.sp.release(member)
        if not self._persist(fail):
            self.sp.restore(before)
            return
        self.held = {o: m for o, m in self.held.items() if m != member}

    @precondition(lambda self: self.sp.pending_write() is None)
    @rule(log_start=st.integers(0, 5))
    def reload(self, log_start):
        """A restart: the persisted state, read back, gives the same non-acquired state."""
        state = ShareState(0, -1, self.persisted_start, self.persisted, 0, 0)
        reloaded = SharePartition.from_state(state, delivery_limit=LIMIT, max_in_flight=self.max_in_flight)
        old = states(self.sp)
        new = states(reloaded)
        assert reloaded.start_offset == self.sp.start_offset
        for offset, (state_, count, _member) in old.items():
            if state_ == ACQUIRED:
                assert new.get(offset, (AVAILABLE, 0, None))[0] == AVAILABLE
            else:
                assert new.get(offset, (AVAILABLE, 0, None)) == (state_, count, None)
        assert reloaded.end_offset <= self.sp.end_offset
        self.sp = reloaded
        self.held = {}
        if log_start > self.sp.start_offset:  # retention deleted records meanwhile
            self.sp.move_start(log_start)
            self.deliverable -= set(range(log_start))

    # -- invariants --

    @invariant()
    def runs_cover_the_in_flight_window(self):
        sp = self.sp
        runs = sp.runs()
        assert sp.start_offset <= sp.end_offset
        if runs:
            assert runs[0].first == sp.start_offset and runs[-1].last == sp.end_offset - 1
            assert runs[0].state not in (ACKNOWLEDGED, ARCHIVED)
        else:
            assert sp.start_offset == sp.end_offset
        for left, right in zip(runs, runs[1:], strict=False):
            assert left.last + 1 == right.first
            assert not left.same(right)
        for run in runs:
            assert run.count <= LIMIT
            assert (run.member is not None) == (run.state == ACQUIRED)

    @invariant()
    def start_offset_only_moves_forward(self):
        assert self.sp.start_offset >= self.highest_start
        self.highest_start = self.sp.start_offset

    @invariant()
    def no_offset_lost(self):
        """Every deliverable offset below the start offset was handed out (then accepted, rejected or
        archived at the delivery limit: it is no longer held); the members hold exactly the partition's
        ACQUIRED offsets, so no offset is held by two."""
        acquired = {o: m for o, (s, _c, m) in states(self.sp).items() if s == ACQUIRED}
        assert acquired == self.held
        for offset in self.deliverable:
            if offset < self.sp.start_offset:
                assert offset in self.handed, f"{offset} passed by the start offset, never delivered"

    @invariant()
    def in_flight_stays_bounded(self):
        # whole batches may overshoot the limit by one batch (at most 5 offsets here, plus gaps)
        assert self.sp.end_offset - self.sp.start_offset <= self.max_in_flight + 8


SharePartitionMachine.TestCase.settings = settings(
    max_examples=60, stateful_step_count=25, deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
test_share_partition_state_machine = SharePartitionMachine.TestCase


def test_throttled_redelivery_halves_the_batch_from_half_the_limit_on():
    """share.delivery.count.limit 10: the threshold is 5 deliveries; then 16 >> 1, >> 2, >> 3, and the
    last delivery alone; the rest of the batch follows in later fetches, one piece at a time."""
    sp = SharePartition(0, delivery_limit=10)
    batches = [LogBatch(0, 15), LogBatch(16, 31)]
    pieces = []
    for now in range(0, 110, 11):
        got = sp.acquire("m", batches, now_ms=now, lock_ms=10, max_records=500)
        pieces.append([(a.first_offset, a.last_offset, a.delivery_count) for a in got])
        sp.expire(now + 11)
    assert pieces == [[(0, 31, 1)], [(0, 31, 2)], [(0, 31, 3)], [(0, 31, 4)], [(0, 31, 5)],
                      [(0, 7, 6)], [(0, 3, 7)], [(0, 1, 8)], [(0, 0, 9)], [(0, 0, 10)]]
