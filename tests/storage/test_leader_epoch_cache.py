"""Leader epochs in storage (storage/leader_epoch_cache.py, PartitionLog.start_leader_epoch): Kafka's
LeaderEpochFileCache rules, the checkpoint across clean and unclean restarts, and the cache following the
log's truncations (DeleteRecords, retention, truncate_to)."""

from __future__ import annotations

import os
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from storage_helpers import append, config, v2_batch

from minibroker.records.framing import scan_entries
from minibroker.storage import PartitionLog
from minibroker.storage.checkpoints import LEADER_EPOCH_CHECKPOINT, read_epoch_checkpoint
from minibroker.storage.leader_epoch_cache import LeaderEpochCache


def stamped(base_offset: int, count: int, epoch: int) -> bytes:
    """A v2 batch of ``count`` records carrying partition leader epoch ``epoch`` (bytes 12-15, outside
    the CRC), as the validator stamps it."""
    data = bytearray(v2_batch(base_offset, [1000 + i for i in range(count)]))
    struct.pack_into(">i", data, 12, epoch)
    return bytes(data)


def append_in_epoch(log: PartitionLog, count: int) -> None:
    append(log, stamped(log.log_end_offset, count, log.leader_epoch))


def checkpoint_of(log: PartitionLog) -> list[tuple[int, int]]:
    return read_epoch_checkpoint(os.path.join(log.directory, LEADER_EPOCH_CHECKPOINT))


def batch_epochs(log: PartitionLog) -> list[tuple[int, int]]:
    """(base offset, partition leader epoch) of every batch in the log, read from the segment files."""
    out = []
    for segment in log.segments:
        with open(segment.log_path, "rb") as f:
            data = f.read()
        for e in scan_entries(data):
            out.append((e.base_offset, struct.unpack_from(">i", data, e.position + 12)[0]))
    return out


def two_epochs(directory: str, topic_id: bytes) -> PartitionLog:
    log = PartitionLog.create(directory, "t", 0, topic_id, config())
    append_in_epoch(log, 3)
    log.start_leader_epoch()
    append_in_epoch(log, 2)
    return log


@pytest.fixture
def directory(tmp_path):
    return str(tmp_path / "t-0")


def reopen(log: PartitionLog, topic_id: bytes, *, clean: bool) -> PartitionLog:
    end, start = log.log_end_offset, log.log_start_offset
    if clean:
        log.close()
    else:  # what kill -9 leaves: no close, so no checkpoint written at close
        for segment in log.segments:
            segment.close()
    return PartitionLog.open(log.directory, "t", 0, topic_id, config(), clean=clean, log_start_offset=start,
                             recovery_point=end if clean else 0)


# -- the cache, as Kafka's LeaderEpochFileCache --------------------------------------------------------------


def test_end_offset_for_follows_kafka():
    cache = LeaderEpochCache("unused", [(0, 0), (2, 10), (5, 30)])
    assert cache.end_offset_for(5, 42) == (5, 42)  # the latest epoch ends at the log end
    assert cache.end_offset_for(2, 42) == (2, 30)  # an older one where the next starts
    assert cache.end_offset_for(3, 42) == (2, 30)  # unknown in between: the floor epoch, the next start
    assert cache.end_offset_for(0, 42) == (0, 10)
    assert cache.end_offset_for(6, 42) == (-1, -1)  # newer than any
    assert cache.end_offset_for(-1, 42) == (-1, -1)
    truncated = LeaderEpochCache("unused", [(2, 10), (5, 30)])
    assert truncated.end_offset_for(1, 42) == (1, 10)  # older than every entry: the requested epoch
    assert [cache.epoch_for_offset(o) for o in (0, 9, 10, 29, 30, 99)] == [0, 0, 2, 2, 5, 5]
    assert truncated.epoch_for_offset(3) == -1


def test_assign_removes_what_it_contradicts():
    cache = LeaderEpochCache("unused", [(0, 0), (2, 10), (5, 30)])
    assert not cache.assign(5, 35)  # the latest epoch from a later offset: already known
    assert cache.assign(4, 20)  # a lower epoch: entries at or above it, or starting after it, go
    assert cache.entries == [(0, 0), (2, 10), (4, 20)]
    assert cache.assign(6, 15)
    assert cache.entries == [(0, 0), (2, 10), (6, 15)]
    with pytest.raises(ValueError):
        cache.assign(-1, 3)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 60), min_size=1, max_size=8, unique=True).map(sorted),
       st.integers(0, 70), st.integers(0, 70))
def test_truncations_match_a_model(starts, log_start, log_end):
    entries = [(epoch * 2, start) for epoch, start in enumerate(starts)]
    cache = LeaderEpochCache("unused", entries)
    cache.truncate_from_start(log_start)
    below = [e for e in entries if e[1] <= log_start]
    model = ([(below[-1][0], log_start)] if below else []) + [e for e in entries if e[1] > log_start]
    assert cache.entries == model
    cache.truncate_from_end(log_end)
    model = [e for e in model if e[1] < log_end]
    assert cache.entries == model
    for offset in range(0, 72):  # epoch_for_offset: the last entry starting at or below the offset
        held = [e for e in model if e[1] <= offset]
        assert cache.epoch_for_offset(offset) == (held[-1][0] if held else -1)


# -- the partition log's epoch ------------------------------------------------------------------------------


def test_a_new_epoch_starts_at_the_log_end_and_is_checkpointed(directory, topic_id):
    log = PartitionLog.create(directory, "t", 0, topic_id, config())
    assert (log.leader_epoch, log.leader_epochs, checkpoint_of(log)) == (0, [], [])
    append_in_epoch(log, 3)
    assert checkpoint_of(log) == [(0, 0)]  # epoch 0 from the first append
    assert log.start_leader_epoch() == 1
    assert checkpoint_of(log) == [(0, 0), (1, 3)]  # written before any batch of the epoch
    assert log.end_offset_for_epoch(0) == (0, 3) and log.end_offset_for_epoch(1) == (1, 3)
    append_in_epoch(log, 2)
    assert log.start_leader_epoch(4) == 4  # epochs may skip, as a controller's do
    append_in_epoch(log, 1)
    assert batch_epochs(log) == [(0, 0), (3, 1), (5, 4)]
    assert log.leader_epochs == checkpoint_of(log) == [(0, 0), (1, 3), (4, 5)]
    assert [log.end_offset_for_epoch(e) for e in range(6)] == [(0, 3), (1, 5), (1, 5), (1, 5), (4, 6),
                                                                (-1, -1)]
    assert [log.epoch_for_offset(o) for o in range(7)] == [0, 0, 0, 1, 1, 4, 4]
    with pytest.raises(ValueError):
        log.start_leader_epoch(4)
    log.close()


@pytest.mark.parametrize("clean", [True, False], ids=["clean", "kill-9"])
def test_the_epoch_survives_a_restart(directory, topic_id, clean):
    log = two_epochs(directory, topic_id)  # epoch 0: offsets 0-2, epoch 1: 3-4
    log.start_leader_epoch()  # epoch 2, nothing written in it yet
    log = reopen(log, topic_id, clean=clean)
    assert log.leader_epoch == 2
    assert log.leader_epochs == checkpoint_of(log) == [(0, 0), (1, 3), (2, 5)]
    append_in_epoch(log, 1)
    assert batch_epochs(log)[-1] == (5, 2)
    log.close()


def test_recovery_rebuilds_the_cache_from_the_batches(directory, topic_id):
    log = two_epochs(directory, topic_id)  # epoch 0: offsets 0-2, epoch 1: 3-4
    path = os.path.join(directory, LEADER_EPOCH_CHECKPOINT)
    with open(path, "w") as f:  # a checkpoint behind the log (as if written before epoch 1 began)
        f.write("0\n1\n0 0\n")
    log = reopen(log, topic_id, clean=False)
    assert (log.leader_epoch, log.leader_epochs) == (1, [(0, 0), (1, 3)])
    assert checkpoint_of(log) == [(0, 0), (1, 3)]  # corrected at load
    log.close()
    os.unlink(path)  # no checkpoint at all: learnt from every batch, even after a clean stop
    log = PartitionLog.open(directory, "t", 0, topic_id, config(), clean=True, recovery_point=5)
    assert (log.leader_epoch, log.leader_epochs) == (1, [(0, 0), (1, 3)])
    log.close()


def test_a_crash_that_loses_the_epochs_batches_keeps_the_epoch(directory, topic_id):
    log = PartitionLog.create(directory, "t", 0, topic_id, config())
    append_in_epoch(log, 3)
    log.flush()
    log.start_leader_epoch()
    append_in_epoch(log, 2)
    segment = log.segments[-1]
    os.truncate(segment.log_path, segment.size - 10)  # the tail never reached the disk
    log = reopen(log, topic_id, clean=False)
    # the batch at 3 is gone; epoch 1 was started all the same (its checkpoint was fsynced): it starts
    # again at the log end, as a leader re-elected at the same epoch would
    assert log.log_end_offset == 3
    assert (log.leader_epoch, log.leader_epochs) == (1, [(0, 0), (1, 3)])
    log.close()


# -- truncation --------------------------------------------------------------------------------------------


def test_delete_records_and_retention_truncate_from_start(directory, topic_id):
    log = PartitionLog.create(directory, "t", 0, topic_id, config())
    for _ in range(3):
        append_in_epoch(log, 2)
        log.start_leader_epoch()
        log.roll()  # a segment per epoch: 0-1, 2-3, 4-5, then 6-7
    append_in_epoch(log, 2)
    assert log.leader_epochs == [(0, 0), (1, 2), (2, 4), (3, 6)]
    assert [s.base_offset for s in log.segments] == [0, 2, 4, 6]
    log.delete_records_before(3)
    assert log.leader_epochs == checkpoint_of(log) == [(1, 3), (2, 4), (3, 6)]
    assert log.end_offset_for_epoch(0) == (0, 3)  # older than the log holds: ends at the first entry
    log.update_config(config(retention_ms=-1, retention_bytes=log.segments[-1].size + log.segments[-2].size))
    assert log.apply_retention() == 1  # the segment at 2 goes: the log starts at 4
    assert log.log_start_offset == 4
    assert log.leader_epochs == checkpoint_of(log) == [(2, 4), (3, 6)]
    log.delete_records_before(-1)  # everything: the current epoch stays, at the new start
    assert log.leader_epochs == checkpoint_of(log) == [(3, 8)]
    log = reopen(log, topic_id, clean=True)
    assert (log.leader_epoch, log.leader_epochs) == (3, [(3, 8)])
    log.close()


def test_truncate_to_drops_later_epochs_but_not_the_current_one(directory, topic_id):
    log = two_epochs(directory, topic_id)  # epoch 0: offsets 0-2, epoch 1: 3-4
    log.start_leader_epoch()
    append_in_epoch(log, 2)
    log.truncate_to(4)
    assert log.log_end_offset == 3  # the batch at 3-4 went whole
    assert log.leader_epochs == checkpoint_of(log) == [(0, 0), (2, 3)]
    assert log.leader_epoch == 2
    log.truncate_to(0)
    assert log.leader_epochs == checkpoint_of(log) == [(2, 0)]
    append_in_epoch(log, 1)
    assert batch_epochs(log) == [(0, 2)]
    log.close()


def test_a_new_log_at_epoch_zero_checkpoints_on_its_first_append(directory, topic_id):
    log = PartitionLog.create(directory, "t", 0, topic_id, config())
    append_in_epoch(log, 2)
    log.truncate_to(0)
    assert (log.leader_epoch, log.leader_epochs) == (0, [])
    assert log.end_offset_for_epoch(0) == (0, 0) and log.end_offset_for_epoch(1) == (-1, -1)
    append_in_epoch(log, 1)
    assert log.leader_epochs == [(0, 0)]
    log.close()
