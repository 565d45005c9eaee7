"""Recovery: torn tails, corrupt CRCs, clobbered or missing indexes, clean vs unclean starts."""

from __future__ import annotations

import logging
import os

import pytest
from storage_helpers import append_v2, config, linux_only, open_descriptors

from minibroker.records.framing import scan_entries
from minibroker.storage import LogManager, PartitionLog

CFG = config(segment_bytes=2000, index_interval_bytes=100)


def build(path, topic_id, batches=60):
    log = PartitionLog.create(path, "t", 0, topic_id, CFG)
    for i in range(batches):
        append_v2(log, [1000 + i, 1000 + i])
    return log


def reopen(path, topic_id, *, clean, recovery_point=0, log_start_offset=0):
    return PartitionLog.open(path, "t", 0, topic_id, CFG, clean=clean, recovery_point=recovery_point,
                             log_start_offset=log_start_offset)


def assert_readable(log):
    offset = log.log_start_offset
    while offset < log.log_end_offset:
        (entry,) = scan_entries(log.read(offset, 1).region.read())
        assert entry.base_offset <= offset <= entry.last_offset
        offset = entry.last_offset + 1


def test_torn_tail_is_truncated_and_logged(tmp_path, topic_id, caplog):
    path = str(tmp_path / "t-0")
    build(path, topic_id)  # crash: never closed
    active = sorted(f for f in os.listdir(path) if f.endswith(".log"))[-1]
    from storage_helpers import v2_batch
    half = v2_batch(120, [5, 6, 7], 50)
    with open(os.path.join(path, active), "ab") as f:
        f.write(half[: len(half) // 2])
    with caplog.at_level(logging.WARNING):
        log = reopen(path, topic_id, clean=False)
    assert log.log_end_offset == 120
    assert any("truncated" in r.message and "partial entry" in r.message for r in caplog.records)
    assert_readable(log)
    assert append_v2(log, [9]) == (120, 120)
    log.close()


def test_corrupt_crc_mid_log_truncates_there_and_drops_later_segments(tmp_path, topic_id):
    path = str(tmp_path / "t-0")
    log = build(path, topic_id)
    bases = [s.base_offset for s in log.segments]
    assert len(bases) >= 3
    victim = log.segments[1]
    entries = list(victim.iter_entries(0))
    bad = entries[3]
    log.close()
    with open(victim.log_path, "r+b") as f:  # flip a byte inside the records of the 4th batch
        f.seek(bad.position + bad.size - 3)
        byte = f.read(1)
        f.seek(-1, 1)
        f.write(bytes([byte[0] ^ 0xFF]))
    # A clean start trusts segments (index sanity checks only): nothing is cut.
    trusted = reopen(path, topic_id, clean=True, recovery_point=120)
    assert trusted.log_end_offset == 120
    trusted.close()
    # An unclean start re-reads everything after the recovery point and cuts at the bad batch.
    log = reopen(path, topic_id, clean=False, recovery_point=0)
    assert log.log_end_offset == bad.base_offset
    assert [s.base_offset for s in log.segments] == bases[:2]
    assert_readable(log)
    append_v2(log, [1])
    assert log.read(bad.base_offset, 1).first_offset == bad.base_offset
    log.close()


def test_segments_before_recovery_point_are_not_reread(tmp_path, topic_id):
    path = str(tmp_path / "t-0")
    log = build(path, topic_id)
    bases = [s.base_offset for s in log.segments]
    first = log.segments[0]
    log.flush()
    with open(first.log_path, "r+b") as f:  # corrupt a batch body in the first segment
        f.seek(200)
        f.write(b"\xff\xff")
    log = reopen(path, topic_id, clean=False, recovery_point=bases[1])
    assert log.log_end_offset == 120  # the first segment was trusted, the rest re-read
    log.close()


@pytest.mark.parametrize("damage", ["garbage", "zeros", "missing", "truncated"])
@pytest.mark.parametrize("clean", [True, False])
def test_bad_index_is_rebuilt(tmp_path, topic_id, damage, clean):
    path = str(tmp_path / "t-0")
    log = build(path, topic_id)
    seg = log.segments[0]
    expected = seg.index.entries
    assert expected > 3
    index_path = seg.index.path
    if clean:
        log.close()
    if damage == "missing":
        os.unlink(index_path)
    else:
        with open(index_path, "r+b") as f:
            if damage == "truncated":
                f.truncate(12)
            else:
                f.seek(8)
                f.write(os.urandom(16) if damage == "garbage" else bytes(16))
    log = reopen(path, topic_id, clean=clean, recovery_point=120 if clean else 0)
    assert log.log_end_offset == 120
    assert log.segments[0].index.entries == expected
    assert_readable(log)
    log.close()


def test_clean_shutdown_marker_and_checkpoints(tmp_path):
    d = str(tmp_path / "data")
    m = LogManager([d], {"log.segment.bytes": 2000}, node_id=3)
    m.load()
    assert not m.had_clean_shutdown
    m.create_topic("a", 2)
    for _ in range(50):
        append_v2(m.get_log("a", 1), [1, 2])
    m.get_log("a", 1).delete_records_before(10)
    m.close()
    assert os.path.exists(os.path.join(d, ".kafka_cleanshutdown"))
    with open(os.path.join(d, "recovery-point-offset-checkpoint")) as f:
        assert f.read() == "0\n2\na 0 0\na 1 100\n"
    with open(os.path.join(d, "log-start-offset-checkpoint")) as f:
        assert f.read() == "0\n2\na 0 0\na 1 10\n"
    m = LogManager([d], {"log.segment.bytes": 2000}, node_id=3)
    m.load()
    assert m.had_clean_shutdown
    assert not os.path.exists(os.path.join(d, ".kafka_cleanshutdown"))
    log = m.get_log("a", 1)
    assert (log.log_start_offset, log.log_end_offset) == (10, 100)
    # crash now (no close): the next start is unclean and still finds everything
    append_v2(log, [3])
    m2 = LogManager([d], {"log.segment.bytes": 2000}, node_id=3)
    m2.load()
    assert not m2.had_clean_shutdown
    assert m2.get_log("a", 1).log_end_offset == 101
    m2.close()


@linux_only
def test_segments_re_read_by_an_unclean_start_hold_their_logs_only(tmp_path, topic_id):
    """Their rebuilt indexes are trimmed and not flushed (the recovery point stands, as Kafka's):
    no writer is kept for a flush that never comes."""
    path = str(tmp_path / "t-0")
    build(path, topic_id)  # crash: never closed
    log = reopen(path, topic_id, clean=False)
    assert len(log.segments) > 2
    held = {os.path.basename(p): n for p, n in open_descriptors(path).items()}
    assert held == {os.path.basename(s.log_path): 1 for s in log.segments}
    log.close()
