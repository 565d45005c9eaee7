"""Recovery follows Kafka's LogLoader rules (docs/storage.md, "Recovery"), on real segment files
loaded through LogManager:

- a damaged segment that recovery was not asked to scan (clean shutdown, or below the recovery
  point) but that fails its load checks is truncated at its own first bad entry; later segments
  are kept, the damaged one stays sealed, and a WARNING names the lost offsets;
- after an unclean shutdown the unflushed segments (the one holding the recovery point and all
  later ones) are re-read, and the first one that is truncated ends the log;
- offsets no segment holds (segment files lost) are logged at load, and reads skip the gap.
"""

from __future__ import annotations

import logging
import os

import pytest
from storage_helpers import append_v2

from minibroker.records.framing import scan_entries
from minibroker.storage import LogManager

# 2 records of 20 bytes per batch: 115-byte batches, 17 per 2000-byte segment, so 60 batches give
# segments based at 0, 34, 68 and 102 and a log end offset of 120. Every batch is indexed.
BROKER = {"log.segment.bytes": 2000, "log.index.interval.bytes": 100}
BASES = [0, 34, 68, 102]
LOGGER = "minibroker.storage.partition_log"


def build(data_dir, batches=60, *, flush_after=None, config=BROKER):
    """A manager with topic t (1 partition) holding ``batches`` 2-record batches. With
    ``flush_after``, the log is flushed and the checkpoints written after that many batches (the
    recovery point checkpoint is then 2 * flush_after)."""
    manager = LogManager([data_dir], config, node_id=1)
    manager.load()
    manager.create_topic("t", 1)
    log = manager.get_log("t", 0)
    for i in range(batches):
        append_v2(log, [1000 + i, 1000 + i])
        if flush_after is not None and i + 1 == flush_after:
            log.flush()
            manager.write_checkpoints()
    return manager, log


def reload(data_dir, caplog, config=BROKER):
    caplog.clear()
    manager = LogManager([data_dir], config, node_id=1)
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        manager.load()
    return manager, manager.get_log("t", 0)


def segment_path(data_dir, base, suffix=".log"):
    return os.path.join(data_dir, "t-0", f"{base:020d}{suffix}")


def warnings_of(caplog):
    return [r.getMessage() for r in caplog.records if r.name == LOGGER and r.levelno >= logging.WARNING]


def assert_reads(log, lost=range(0)):
    """Every offset from the log start to the end reads back in its own 2-record batch (batches
    start at even offsets); an offset in ``lost`` reads the first batch after the lost range."""
    for offset in range(log.log_start_offset, log.log_end_offset):
        piece = log.read(offset, 1)
        (entry,) = scan_entries(piece.region.read())
        if offset in lost:
            assert entry.base_offset == lost.stop, offset
        else:
            assert entry.base_offset == offset - offset % 2 and entry.last_offset == entry.base_offset + 1


def assert_only_last_active(log, damaged_base):
    segments = log.segments
    assert [s.active for s in segments] == [False] * (len(segments) - 1) + [True]
    damaged = next(s for s in segments if s.base_offset == damaged_base)
    for index in (damaged.index, damaged.time_index):  # sealed: trimmed to its entries
        assert os.path.getsize(index.path) == index.entries * index.ENTRY.size


def damage(path, how):
    """Damage a 1955-byte middle segment of 17 batches (offsets base..base+33)."""
    size = os.path.getsize(path)
    with open(path, "r+b") as f:
        if how == "cut-10-bytes":  # the last batch loses its end
            f.truncate(size - 10)
        elif how == "cut-to-half":  # shorter than the last index entry points
            f.truncate(size // 2)
        elif how == "cut-to-nothing":
            f.truncate(0)
        elif how == "garbled-64-bytes":  # the end of batch 8 and the header of batch 9
            f.seek(8 * 115 + 80)
            f.write(b"\xab" * 64)
        else:  # a few bytes inside the records of batch 11: only a CRC check sees it
            f.seek(11 * 115 + 80)
            f.write(b"\xab" * 8)


# How much of segment 34 each damage costs: offsets from the first bad batch to the next segment.
LOST = {
    "cut-10-bytes": range(66, 68),
    "cut-to-half": range(50, 68),
    "cut-to-nothing": range(34, 68),
    "garbled-64-bytes": range(50, 68),
}


@pytest.mark.parametrize("how", sorted(LOST))
def test_clean_shutdown_damaged_middle_segment_loses_only_its_tail(tmp_path, caplog, how):
    data_dir = str(tmp_path / "data")
    manager, log = build(data_dir)
    assert [s.base_offset for s in log.segments] == BASES
    manager.close()
    damage(segment_path(data_dir, 34), how)

    manager, log = reload(data_dir, caplog)
    assert manager.had_clean_shutdown
    lost = LOST[how]
    assert [s.base_offset for s in log.segments] == BASES
    assert log.log_end_offset == 120
    assert log.segments[1].next_offset == lost.start
    assert_reads(log, lost)
    assert_only_last_active(log, 34)
    messages = warnings_of(caplog)
    if how == "cut-to-nothing":  # nothing left to truncate: the gap is what is reported
        assert any("offsets 34..67 missing: segment 34 is empty" in m for m in messages), messages
    else:
        assert any(
            f"segment 34: kept {(lost.start - 34) // 2} entries" in m
            and f"lost offsets {lost.start}..{lost.stop - 1}; later segments kept" in m
            for m in messages
        ), messages
    assert append_v2(log, [7, 8]) == (120, 121)
    manager.close()

    # The next start trusts the (now shorter, sealed) segment and reports the gap it left.
    manager, log = reload(data_dir, caplog)
    assert [s.base_offset for s in log.segments] == BASES and log.log_end_offset == 122
    assert_reads(log, lost)
    messages = warnings_of(caplog)
    assert [m for m in messages if "truncated" in m] == []
    assert any(f"offsets {lost.start}..{lost.stop - 1} missing" in m for m in messages), messages
    manager.close()


def test_clean_shutdown_garbled_tail_after_the_last_index_entry(tmp_path, caplog):
    """With sparser index entries, garbage in a batch header past the last index entry trips the
    header scan of the clean load; that segment is re-read, later ones are kept."""
    config = {"log.segment.bytes": 2000, "log.index.interval.bytes": 1000}
    data_dir = str(tmp_path / "data")
    manager, log = build(data_dir, config=config)
    victim = log.segments[1]
    last_indexed = victim.index.last_entry()[1]
    entries = list(victim.iter_entries(0))
    bad = next(e for e in entries if e.position > last_indexed + 115)
    manager.close()
    with open(victim.log_path, "r+b") as f:  # an impossible (negative) size, and the batch before
        f.seek(bad.position - 30)
        f.write(b"\xab" * 64)

    manager, log = reload(data_dir, caplog, config)
    lost = range(bad.base_offset - 2, 68)  # the batch before loses its CRC too
    assert [s.base_offset for s in log.segments] == BASES and log.log_end_offset == 120
    assert_reads(log, lost)
    assert_only_last_active(log, 34)
    assert any(f"lost offsets {lost.start}..67; later segments kept" in m for m in warnings_of(caplog))
    manager.close()


def test_unclean_damage_below_recovery_point_keeps_later_segments(tmp_path, caplog):
    """Segment 34 is wholly below the recovery point (80): it is not scanned, but a cut .log fails
    its load checks, so it alone is recovered; the unflushed segments 68 and 102 are re-read and
    kept."""
    data_dir = str(tmp_path / "data")
    _, log = build(data_dir, flush_after=40)  # crash: never closed
    assert [s.base_offset for s in log.segments] == BASES
    with open(os.path.join(data_dir, "recovery-point-offset-checkpoint")) as f:
        assert f.read().splitlines()[-1] == "t 0 80"
    damage(segment_path(data_dir, 34), "cut-10-bytes")

    manager, log = reload(data_dir, caplog)
    assert not manager.had_clean_shutdown
    assert [s.base_offset for s in log.segments] == BASES
    assert log.log_end_offset == 120
    assert_reads(log, range(66, 68))
    assert_only_last_active(log, 34)
    assert any("lost offsets 66..67; later segments kept" in m for m in warnings_of(caplog))
    manager.close()


def test_unclean_crc_damage_below_recovery_point_is_not_scanned(tmp_path, caplog):
    data_dir = str(tmp_path / "data")
    build(data_dir, flush_after=40)  # crash: never closed
    damage(segment_path(data_dir, 34), "records")
    manager, log = reload(data_dir, caplog)
    assert [s.base_offset for s in log.segments] == BASES and log.log_end_offset == 120
    assert warnings_of(caplog) == []
    manager.close()


@pytest.mark.parametrize("how", ["cut-10-bytes", "records"])
def test_unclean_damage_at_recovery_point_ends_the_log(tmp_path, caplog, how):
    """Segment 68 holds the recovery point (80): it is re-read, and its truncation deletes the
    later unflushed segment 102, as Kafka's recoverLog does."""
    data_dir = str(tmp_path / "data")
    build(data_dir, flush_after=40)  # crash: never closed
    damage(segment_path(data_dir, 68), how)

    manager, log = reload(data_dir, caplog)
    end = 100 if how == "cut-10-bytes" else 90  # batch 11 of segment 68 starts at 90
    assert [s.base_offset for s in log.segments] == BASES[:3]
    assert log.log_end_offset == end
    assert not os.path.exists(segment_path(data_dir, 102))
    assert_reads(log)
    assert log.segments[-1].active
    assert any(
        "corruption found in unflushed segment 68" in m
        and f"lost offsets from {end} on, deleting 1 later segments [102]" in m
        for m in warnings_of(caplog)
    ), warnings_of(caplog)
    assert append_v2(log, [1]) == (end, end)
    manager.close()


def test_middle_segment_file_deleted_under_the_broker(tmp_path, caplog):
    data_dir = str(tmp_path / "data")
    manager, log = build(data_dir)
    os.unlink(segment_path(data_dir, 34))  # the broker keeps running and shuts down cleanly
    manager.close()

    manager, log = reload(data_dir, caplog)
    assert [s.base_offset for s in log.segments] == [0, 68, 102]
    assert not os.path.exists(segment_path(data_dir, 34, ".index"))
    assert log.log_end_offset == 120
    assert any("offsets 34..67 missing" in m for m in warnings_of(caplog)), warnings_of(caplog)
    assert_reads(log, range(34, 68))
    assert log.read(50, 10000).first_offset == 68
    assert [e.base_offset for _, e in log.iter_entries(30, 4096)][:3] == [30, 32, 68]
    manager.close()


def test_first_segment_file_deleted_under_the_broker(tmp_path, caplog):
    data_dir = str(tmp_path / "data")
    manager, log = build(data_dir)
    os.unlink(segment_path(data_dir, 0))
    manager.close()

    manager, log = reload(data_dir, caplog)
    assert [s.base_offset for s in log.segments] == BASES[1:]
    assert (log.log_start_offset, log.log_end_offset) == (34, 120)
    assert any("offsets 0..33 missing" in m for m in warnings_of(caplog)), warnings_of(caplog)
    assert_reads(log)
    manager.close()


def test_last_segment_file_deleted_under_the_broker(tmp_path, caplog):
    data_dir = str(tmp_path / "data")
    manager, log = build(data_dir)
    os.unlink(segment_path(data_dir, 102))
    manager.close()  # recovery point checkpoint: 120

    manager, log = reload(data_dir, caplog)
    assert [s.base_offset for s in log.segments] == BASES[:3]
    assert log.log_end_offset == 102 and log.segments[-1].active
    assert any("offsets 102..119 missing" in m for m in warnings_of(caplog)), warnings_of(caplog)
    assert_reads(log)
    assert append_v2(log, [1]) == (102, 102)
    manager.close()


def test_producer_snapshots_past_the_recovered_log_end_are_removed(tmp_path, caplog):
    data_dir = str(tmp_path / "data")
    manager, log = build(data_dir, batches=10)  # log end offset 20
    manager.close()
    part = os.path.join(data_dir, "t-0")
    for offset in (0, 12, 20, 21, 500):  # as if written before an earlier run's tail was cut
        with open(os.path.join(part, f"{offset:020d}.snapshot"), "wb") as f:
            f.write(b"x")
    manager, log = reload(data_dir, caplog)
    snapshots = sorted(n for n in os.listdir(part) if n.endswith(".snapshot"))
    # 0: the segment's own (its roll's); 20: the latest, past the last segment's base (a close's);
    # 12 matches no segment: a stray, removed as Kafka's removeStraySnapshots does
    assert snapshots == [f"{0:020d}.snapshot", f"{20:020d}.snapshot"]
    assert any("removing producer snapshot" in w and f"{500:020d}" in w for w in warnings_of(caplog))
    manager.close()
