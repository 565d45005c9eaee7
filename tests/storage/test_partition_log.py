"""PartitionLog: append, read (KIP-74, bounds, no torn entries), rolls, timestamps, listeners."""

from __future__ import annotations

import os

import pytest
from storage_helpers import append, append_v2, client_batch, config, v2_batch

from minibroker.errors import ErrorCode, KafkaError
from minibroker.records.framing import scan_entries
from minibroker.records.legacy import set_timestamp
from minibroker.records.record import TimestampType
from minibroker.storage import PartitionLog


@pytest.fixture
def plog(tmp_path, topic_id):
    log = PartitionLog.create(str(tmp_path / "t-0"), "t", 0, topic_id, config())
    yield log
    log.close()


def entries_of(region_bytes: bytes):
    entries = list(scan_entries(region_bytes))
    assert sum(e.size for e in entries) == len(region_bytes), "region must hold whole entries only"
    return entries


def test_empty_log(plog):
    assert (plog.log_start_offset, plog.log_end_offset, plog.high_watermark, plog.leader_epoch) == (
        0,
        0,
        0,
        0,
    )
    s = plog.read(0, 1000)
    assert s.region is None and s.high_watermark == 0
    with pytest.raises(KafkaError) as exc:
        plog.read(1, 1000)
    assert exc.value.code == ErrorCode.OFFSET_OUT_OF_RANGE
    assert plog.offset_for_timestamp(0) is None and plog.max_timestamp_entry() is None
    assert plog.read_bytes(0, 100) == b""


def test_append_then_read_every_offset(plog):
    batches = []
    for i in range(100):
        first, last = append_v2(plog, [1000 + i * 10 + k for k in range(i % 4 + 1)])
        batches.append((first, last))
    assert plog.log_end_offset == batches[-1][1] + 1
    assert len(plog.segments) > 2  # 4 KiB segments rolled
    for first, last in batches:
        for offset in range(first, last + 1):
            s = plog.read(offset, 1)  # max_bytes below one entry: KIP-74 gives exactly one
            got = entries_of(s.region.read())
            assert len(got) == 1 and got[0].base_offset == first and got[0].last_offset == last
            assert s.first_offset == first
    assert plog.read(plog.log_end_offset, 100).region is None
    with pytest.raises(KafkaError):
        plog.read(plog.log_end_offset + 1, 100)


def test_max_bytes_bounds_and_min_one_entry(plog):
    for i in range(30):
        append_v2(plog, [i], value_size=40)
    size = len(v2_batch(0, [0], value_size=40))
    for max_bytes in (size - 1, size, size + 1, 3 * size - 1, 3 * size, 1000):
        s = plog.read(0, max_bytes)
        got = entries_of(s.region.read())
        assert s.region.size <= max(max_bytes, size)
        assert len(got) == max(1, max_bytes // size) or s.region.size + size > max_bytes
    assert plog.read(0, size - 1, min_one_entry=False).region is None
    # a read never crosses a segment boundary
    s = plog.read(0, 10**9)
    assert s.region.size == plog.segments[0].size


def test_max_offset_excludes_straddling_entries(plog):
    append_v2(plog, [1, 2, 3])  # 0..2
    append_v2(plog, [4, 5])  # 3..4
    assert entries_of(plog.read(0, 10000, max_offset=3).region.read())[-1].last_offset == 2
    assert plog.read(0, 10000, max_offset=2).region is None
    assert plog.read(3, 10000, max_offset=5).first_offset == 3


def test_file_region_is_the_segment_file(plog):
    append_v2(plog, [1])
    region = plog.read(0, 1000).region
    assert os.fstat(region.file.fileno()).st_size == region.size
    assert region.position == 0


def test_append_asserts_log_end_offset(plog):
    with pytest.raises(AssertionError):
        plog.append(
            v2_batch(5, [1]),
            first_offset=5,
            last_offset=5,
            max_timestamp=1,
            offset_of_max_timestamp=5,
            record_count=1,
        )


def test_roll_on_index_full_and_time(tmp_path, topic_id):
    log = PartitionLog.create(
        str(tmp_path / "t-0"),
        "t",
        0,
        topic_id,
        config(segment_bytes=10**6, index_interval_bytes=0, segment_index_bytes=80),
    )
    for i in range(30):
        append_v2(log, [i])
    assert len(log.segments) >= 3  # 10 index entries per segment
    assert all(s.index.entries <= 10 for s in log.segments)
    log.close()
    log = PartitionLog.create(str(tmp_path / "u-0"), "u", 0, topic_id, config(segment_ms=1000))
    append_v2(log, [10_000])
    append_v2(log, [10_500])
    assert len(log.segments) == 1
    append_v2(log, [11_001])  # more than segment.ms after the first batch's timestamp
    assert [s.base_offset for s in log.segments] == [0, 2]
    log.close()


def test_legacy_and_compressed_entries(plog):
    append(plog, client_batch(0, [100, 200, 300], magic=1))  # three v1 messages, one entry each
    append(plog, client_batch(3, [400, 500], magic=1, codec=1))  # gzip wrapper, offset = last (4)
    append(plog, client_batch(5, [600], magic=0))
    append(plog, client_batch(6, [700, 800, 900], magic=2, codec=3))  # lz4 v2
    assert plog.log_end_offset == 9
    assert plog.read(1, 1).first_offset == 1
    assert plog.read(3, 1).first_offset == 4  # the wrapper holding 3..4 says 4
    assert plog.read(7, 1).first_offset == 6
    assert plog.offset_for_timestamp(250) == (2, 300)
    assert plog.offset_for_timestamp(750) == (7, 800)  # inside the lz4 batch
    assert plog.max_timestamp_entry() == (8, 900)


def v1_wrapper(base_offset: int, timestamps: list[int]) -> bytes:
    """A gzip v1 wrapper whose timestamp is its records' max, as the broker stores it."""
    data = bytearray(client_batch(base_offset, timestamps, magic=1, codec=1))
    set_timestamp(data, 0, TimestampType.CREATE_TIME, max(timestamps))
    return bytes(data)


@pytest.mark.parametrize("reopen", [None, "clean", "unclean"])
def test_max_timestamp_answers_the_record_not_its_batch(tmp_path, topic_id, reopen):
    # KAFKA-16310: ListOffsets -3 answers the offset of the record with the largest timestamp, not
    # the last offset of its batch; the indexes and recovery only know batches, so the batch is read
    directory = str(tmp_path / "t-0")
    log = PartitionLog.create(directory, "t", 0, topic_id, config())
    append_v2(log, [50, 60])
    append(log, v2_batch(2, [100, 400, 200]))  # passes the batch's last offset (4), as Produce does
    append(log, v1_wrapper(5, [300, 390, 350]))
    assert log.max_timestamp_entry() == (3, 400)
    if reopen is not None:
        end = log.log_end_offset
        log.close()
        log = PartitionLog.open(directory, "t", 0, topic_id, config(), clean=reopen == "clean",
                                recovery_point=end if reopen == "clean" else 0)
        assert log.max_timestamp_entry() == (3, 400)
    log.delete_records_before(4)
    assert log.max_timestamp_entry() == (4, 400)  # never below the log start offset
    log.close()
    log = PartitionLog.create(str(tmp_path / "u-0"), "u", 0, topic_id, config())
    append(log, v1_wrapper(0, [300, 390, 350]))
    append_v2(log, [10, 20])
    assert log.max_timestamp_entry() == (1, 390)  # inside the v1 wrapper
    log.close()


def test_offset_for_timestamp_matches_brute_force(plog):
    import random

    rnd = random.Random(7)
    records = []  # (offset, ts)
    for _ in range(120):
        tss = [rnd.randrange(0, 5000) for _ in range(rnd.randrange(1, 5))]
        first, _ = append_v2(plog, tss)
        records += [(first + k, ts) for k, ts in enumerate(tss)]
    for target in list(range(-5, 5100, 37)) + [ts for _, ts in records[::7]]:
        expected = next(((o, ts) for o, ts in records if ts >= target), None)
        assert plog.offset_for_timestamp(target) == expected, target
    top = max(ts for _, ts in records)
    assert plog.max_timestamp_entry() == next((o, ts) for o, ts in records if ts == top)


def test_listeners_and_read_bytes(plog):
    seen = []

    def listener(log):
        seen.append(log.log_end_offset)

    plog.add_append_listener(listener)
    append_v2(plog, [1, 2])
    plog.add_append_listener(lambda log: 1 / 0)  # a broken listener does not break appends
    append_v2(plog, [3])
    plog.remove_append_listener(listener)
    append_v2(plog, [4])
    assert seen == [2, 3]
    data = plog.read_bytes(0, 10**6)
    assert [e.base_offset for e in entries_of(data)] == [0, 2, 3]


def test_flush_messages_advances_recovery_point(tmp_path, topic_id):
    log = PartitionLog.create(str(tmp_path / "t-0"), "t", 0, topic_id, config(flush_messages=3))
    append_v2(log, [1, 2])
    assert log.recovery_point == 0
    append_v2(log, [3])
    assert log.recovery_point == 3
    log.close()


def test_truncate_to(plog):
    for i in range(40):
        append_v2(plog, [i, i])
    plog.truncate_to(51)  # batch 50..51 goes whole
    assert plog.log_end_offset == 50
    append_v2(plog, [99])
    assert plog.read(50, 1).first_offset == 50
    plog.truncate_to(0)
    assert plog.log_end_offset == 0 and len(plog.segments) == 1
    append_v2(plog, [1])
    assert plog.read(0, 100).first_offset == 0


def test_many_small_legacy_entries_every_offset(tmp_path, topic_id):
    log = PartitionLog.create(
        str(tmp_path / "t-0"), "t", 0, topic_id, config(segment_bytes=3000, index_interval_bytes=100)
    )
    for i in range(60):
        magic = i % 2
        append(
            log,
            client_batch(
                log.log_end_offset, [1000 + i, 1001 + i, 1002 + i], magic=magic, value=b"v" * (i % 7)
            ),
        )
    append(log, v2_batch(log.log_end_offset, [5000]))
    for offset in range(log.log_end_offset):
        (entry,) = entries_of(log.read(offset, 1).region.read())
        assert entry.base_offset <= offset <= entry.last_offset
        assert len(entries_of(log.read(offset, 700).region.read())) >= 1
    log.close()
    reopened = PartitionLog.open(
        str(tmp_path / "t-0"), "t", 0, topic_id, config(segment_bytes=3000, index_interval_bytes=100)
    )
    assert reopened.log_end_offset == 181
    reopened.close()
