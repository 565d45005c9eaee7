"""Property tests: random appends, rolls, clean and unclean reopens, truncations and DeleteRecords
against a model; after every step each offset's lookup returns the batch holding it and time
lookups agree with a brute-force search."""

from __future__ import annotations

import tempfile

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from storage_helpers import append_v2, config

from minibroker.records.framing import scan_entries
from minibroker.storage import PartitionLog
from minibroker.storage.index import OffsetIndex, TimeIndex

TOPIC_ID = bytes(range(16))

ops = st.lists(
    st.one_of(
        st.tuples(
            st.just("append"), st.lists(st.integers(0, 10_000), min_size=1, max_size=6), st.integers(1, 300)
        ),
        st.tuples(st.just("roll")),
        st.tuples(st.just("reopen"), st.booleans()),
        st.tuples(st.just("truncate"), st.floats(0, 1)),
        st.tuples(st.just("delete_records"), st.floats(0, 1)),
    ),
    max_size=40,
)


class Model:
    def __init__(self):
        self.entries: list[tuple[int, int, list[int]]] = []
        self.start = 0
        self.leo = 0

    def truncate(self, offset: int) -> None:
        if offset >= self.leo:
            return
        if offset <= self.start:
            self.entries, self.start, self.leo = [], offset, offset
            return
        self.entries = [e for e in self.entries if e[1] < offset]
        self.leo = self.entries[-1][1] + 1 if self.entries else self.start
        if self.leo < self.start:
            self.entries, self.leo = [], self.start


def check(log: PartitionLog, model: Model) -> None:
    assert (log.log_start_offset, log.log_end_offset) == (model.start, model.leo)
    for first, last, _ in model.entries:
        for offset in range(max(first, model.start), last + 1):
            s = log.read(offset, 1)
            (entry,) = list(scan_entries(s.region.read()))
            assert (entry.base_offset, entry.last_offset) == (first, last), offset
    records = [
        (first + k, ts)
        for first, _, tss in model.entries
        for k, ts in enumerate(tss)
        if first + k >= model.start
    ]
    for target in (-1, 0, 2500, 5000, 7777, 10_000, 10_001):
        expected = next(((o, ts) for o, ts in records if ts >= target), None)
        assert log.offset_for_timestamp(target) == expected, target
    if model.start == 0 and records:
        top = max(ts for _, ts in records)
        offset, ts = log.max_timestamp_entry()
        holder = next(e for e in model.entries if e[0] <= offset <= e[1])
        assert ts == top and top in holder[2]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    ops=ops, index_interval=st.sampled_from([0, 64, 4096]), segment_bytes=st.sampled_from([300, 2000, 10**6])
)
def test_random_operations(ops, index_interval, segment_bytes):
    cfg = config(segment_bytes=segment_bytes, index_interval_bytes=index_interval, segment_index_bytes=120)
    with tempfile.TemporaryDirectory() as d:
        path = d + "/t-0"
        log = PartitionLog.create(path, "t", 0, TOPIC_ID, cfg)
        model = Model()
        for op in ops:
            if op[0] == "append":
                first, last = append_v2(log, op[1], op[2])
                model.entries.append((first, last, op[1]))
                model.leo = last + 1
            elif op[0] == "roll":
                log.roll()
            elif op[0] == "reopen":
                clean = op[1]
                if clean:
                    log.close()
                    recovery_point = log.recovery_point
                else:  # crash: nothing flushed or trimmed; an old recovery point
                    recovery_point = 0
                start = log.log_start_offset
                del log
                log = PartitionLog.open(
                    path,
                    "t",
                    0,
                    TOPIC_ID,
                    cfg,
                    log_start_offset=start,
                    recovery_point=recovery_point,
                    clean=clean,
                )
            elif op[0] == "truncate":
                offset = model.start + int(op[1] * (model.leo - model.start + 1))
                log.truncate_to(offset)
                model.truncate(offset)
            elif op[0] == "delete_records":
                offset = model.start + int(op[1] * (model.leo - model.start))
                assert log.delete_records_before(offset) == max(model.start, offset)
                model.start = max(model.start, offset)
            check(log, model)
        log.close()


@settings(max_examples=100, deadline=None)
@given(
    gaps=st.lists(st.tuples(st.integers(1, 50), st.integers(1, 60)), min_size=0, max_size=200),
    probes=st.lists(st.integers(-10, 20_000), max_size=50),
)
def test_index_lookups_match_a_sorted_list(gaps, probes):
    with tempfile.TemporaryDirectory() as d:
        index = OffsetIndex(d + "/0.index", 1000, 8 * len(gaps) + 8, writable=True)
        tindex = TimeIndex(d + "/0.timeindex", 1000, 12 * len(gaps) + 12, writable=True)
        entries, offset, position = [], 1000, 0
        for doff, dpos in gaps:
            offset += doff
            position += dpos
            index.append(offset, position)
            tindex.maybe_append(position * 10, offset)  # timestamps increasing too
            entries.append((offset, position))
        for probe in probes + [o for o, _ in entries[::5]]:
            target = 1000 + probe
            expected = max((e for e in entries if e[0] <= target), default=(1000, 0))
            assert index.lookup(target) == expected
            by_pos = max((e for e in entries if e[1] <= probe), default=(1000, 0))
            assert index.lookup_position(probe) == by_pos
            ts_expected = max(((p * 10, o) for o, p in entries if p * 10 < probe * 10), default=None)
            assert tindex.lookup_before(probe * 10) == ts_expected
        index.trim_to_valid_size()
        tindex.trim_to_valid_size()
        index.close()
        tindex.close()
        reopened = OffsetIndex(d + "/0.index", 1000, 1 << 20, writable=False)
        assert reopened.entries == len(entries)
        assert [reopened.entry(i) for i in range(reopened.entries)] == entries
        reopened.close()
