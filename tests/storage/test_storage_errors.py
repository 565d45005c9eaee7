"""Write failures (ENOSPC, EIO) injected at the system-call layer: every append is all or nothing,
the log dir goes offline for writes and keeps serving reads, nothing acknowledged is lost.
tests/test_full_disk.py does the same on a real full file system through a real client."""

from __future__ import annotations

import errno
import os

import pytest
from storage_helpers import append_v2

from minibroker.errors import ErrorCode, KafkaError
from minibroker.records.framing import scan_entries
from minibroker.storage import LogManager
from minibroker.storage import index as index_module
from minibroker.storage import segment as segment_module


@pytest.fixture
def data_dir(tmp_path):
    return str(tmp_path / "data")


def open_manager(data_dir):
    m = LogManager([data_dir], {"log.segment.bytes": 3000, "log.index.interval.bytes": 1}, node_id=1)
    m.load()
    return m


class FailingPwrite:
    """``os.pwrite`` that fails with ``code`` on the ``after``-th call from the patched module."""

    def __init__(self, code: int, after: int = 0):
        self.code, self.after, self.calls = code, after, 0
        self.real = os.pwrite

    def __call__(self, fd, data, position):
        self.calls += 1
        if self.calls > self.after:
            raise OSError(self.code, os.strerror(self.code))
        return self.real(fd, data, position)


def all_offsets(log) -> list[int]:
    """Every offset the log serves, read entry by entry across segments."""
    out: list[int] = []
    offset = log.log_start_offset
    while offset < log.log_end_offset:
        region = log.read(offset, 1 << 20).region
        if region is None:
            break
        for entry in scan_entries(region.read()):
            out.extend(range(entry.base_offset, entry.last_offset + 1))
        offset = out[-1] + 1
    return out


def file_sizes(directory: str) -> dict[str, int]:
    return {n: os.path.getsize(os.path.join(directory, n)) for n in sorted(os.listdir(directory))}


@pytest.mark.parametrize("where", ["log", "index"])
def test_a_failed_append_is_cut_back_whole_and_the_dir_goes_offline(data_dir, monkeypatch, where):
    m = open_manager(data_dir)
    m.create_topic("t", 2)
    log = m.get_log("t", 0)
    for i in range(5):
        append_v2(log, [i])
    before = (log.log_end_offset, log.segments[-1].size, log.segments[-1].index.entries)
    log_file = log.segments[-1].log_path
    # index: the .log write goes through, the index entry after it fails
    failing = FailingPwrite(errno.ENOSPC)
    monkeypatch.setattr((segment_module if where == "log" else index_module).os, "pwrite", failing)
    with pytest.raises(KafkaError) as info:
        append_v2(log, [99])
    monkeypatch.undo()
    assert failing.calls == 1
    assert info.value.code == ErrorCode.KAFKA_STORAGE_ERROR
    assert "No space left on device" in str(info.value)
    assert (log.log_end_offset, log.segments[-1].size, log.segments[-1].index.entries) == before
    assert all_offsets(log) == list(range(5))
    assert os.path.getsize(log_file) == before[1]  # the half-written bytes are gone
    # the whole dir is offline for writes: every partition refuses, nothing is written
    assert m.offline_dirs and os.path.abspath(data_dir) in m.offline_dirs
    with pytest.raises(KafkaError) as info:
        append_v2(m.get_log("t", 1), [1])
    assert info.value.code == ErrorCode.KAFKA_STORAGE_ERROR and "offline" in str(info.value)
    with pytest.raises(KafkaError) as info:
        m.create_topic("new", 1)
    assert info.value.code == ErrorCode.KAFKA_STORAGE_ERROR and "new" not in m.topics
    # reads go on
    assert log.read(0, 1 << 20).region.read()[:8] == (0).to_bytes(8, "big")
    sizes = file_sizes(os.path.join(data_dir, "t-0"))
    m.close()
    assert not os.path.exists(os.path.join(data_dir, ".kafka_cleanshutdown"))  # not a clean close
    # offline: close flushed and checkpointed nothing (it only trimmed the preallocated indexes)
    after = file_sizes(os.path.join(data_dir, "t-0"))
    assert {n: v for n, v in after.items() if not n.endswith("index")} == {
        n: v for n, v in sizes.items() if not n.endswith("index")
    }
    # the next start recovers and takes writes again
    m = open_manager(data_dir)
    assert not m.had_clean_shutdown and not m.offline_dirs
    log = m.get_log("t", 0)
    assert log.log_end_offset == before[0]
    append_v2(log, [6])
    assert log.log_end_offset == before[0] + 1
    m.close()


def test_a_failed_roll_leaves_the_log_readable(data_dir, monkeypatch):
    m = open_manager(data_dir)
    m.create_topic("t", 1)
    log = m.get_log("t", 0)
    while len(log.segments) == 1:
        append_v2(log, [1], value_size=200)
    while log.segments[-1].size + 300 <= 3000:
        append_v2(log, [1], value_size=200)
    end = log.log_end_offset

    def no_room(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(segment_module.LogSegment, "create", classmethod(no_room))
    with pytest.raises(KafkaError) as info:
        append_v2(log, [1], value_size=200)  # does not fit: rolls, and the new segment fails
    monkeypatch.undo()
    assert info.value.code == ErrorCode.KAFKA_STORAGE_ERROR
    assert log.log_end_offset == end
    assert all_offsets(log) == list(range(end))
    m.close()


def rolled(data_dir, segments: int):
    """A manager and its one partition's log, rolled until it has ``segments`` segments."""
    m = open_manager(data_dir)
    m.create_topic("t", 1)
    log = m.get_log("t", 0)
    while len(log.segments) < segments:
        append_v2(log, [1], value_size=200)
    return m, log


def test_failed_fsync_of_a_rolled_segment_takes_the_dir_offline(data_dir, monkeypatch):
    import asyncio

    from minibroker.storage import log_manager

    m, log = rolled(data_dir, 3)
    point = log.recovery_point

    def eio(fd):
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(log_manager.os, "fsync", eio)
    asyncio.run(m.flush_sealed_segments())
    monkeypatch.undo()
    assert log.recovery_point == point  # an fsync error means the data may not be on disk
    assert m.offline_dirs
    with pytest.raises(KafkaError) as info:
        append_v2(log, [1])
    assert info.value.code == ErrorCode.KAFKA_STORAGE_ERROR
    m.close()


def test_restart_on_a_disk_that_cannot_take_a_rebuilt_index_opens_read_only(data_dir, monkeypatch, caplog):
    m = open_manager(data_dir)
    m.create_topic("t", 1)
    log = m.get_log("t", 0)
    for i in range(40):
        append_v2(log, [i], value_size=100)
    end = log.log_end_offset
    m.close()
    part = os.path.join(data_dir, "t-0")
    for name in os.listdir(part):  # lost indexes must be rebuilt, and the disk cannot take them
        if name.endswith((".index", ".timeindex")):
            os.unlink(os.path.join(part, name))
    with open(os.path.join(part, sorted(n for n in os.listdir(part) if n.endswith(".log"))[-1]), "ab") as f:
        f.write(b"\x00\x01torn")  # and a torn tail that read-only recovery must leave on disk
    sizes = file_sizes(part)
    monkeypatch.setattr(index_module.os, "pwrite", FailingPwrite(errno.ENOSPC))
    m = open_manager(data_dir)
    monkeypatch.undo()
    assert m.offline_dirs
    assert "opened read-only" in caplog.text
    log = m.get_log("t", 0)
    assert log.log_end_offset == end
    assert all_offsets(log) == list(range(40))
    with pytest.raises(KafkaError):
        append_v2(log, [1])
    m.close()
    # the torn tail is still on disk (read-only recovery cuts nothing) and no .log was touched;
    # the failed writable attempt left index files, which the next start finds unwritten
    assert {n: v for n, v in file_sizes(part).items() if not n.endswith("index")} == sizes
    m = open_manager(data_dir)  # room again: recovered for real, writable
    assert not m.offline_dirs and m.get_log("t", 0).log_end_offset == end
    append_v2(m.get_log("t", 0), [1])
    m.close()


def test_a_roll_whose_producer_snapshot_hits_a_full_disk(data_dir, monkeypatch):
    """The snapshot a roll writes (Kafka's takeSnapshot) fails with ENOSPC: the append that rolled
    answers KAFKA_STORAGE_ERROR, the dir goes offline, the new segment is the log's (no file on disk
    that the log does not own, no half-written snapshot), and the next start rebuilds the producer
    state from the snapshot before and the log."""
    from minibroker.records import v2
    from minibroker.storage import producer_state

    m = open_manager(data_dir)
    m.create_topic("t", 1)
    log = m.get_log("t", 0)
    sequence = 0

    def put(count: int = 1) -> None:
        nonlocal sequence
        base = log.log_end_offset
        rows = [(base + i, 1_700_000_000_000, b"k", b"v" * 200, ()) for i in range(count)]
        batch = v2.build_batch(rows, base_offset=base, producer_id=9, producer_epoch=0,
                               base_sequence=sequence)
        log.append(batch, first_offset=base, last_offset=base + count - 1, max_timestamp=rows[-1][1],
                   offset_of_max_timestamp=base + count - 1, record_count=count)
        sequence += count

    while len(log.segments) == 1:
        put()
    while log.segments[-1].size + 300 <= 3000:
        put()
    end, segments = log.log_end_offset, len(log.segments)

    last_sequence = sequence - 1

    class FullDisk:
        """``open`` for the producer_state module: a file whose write stops half-way, full."""

        def __init__(self, path, mode):
            self.file = open(path, mode)

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.file.close()

        def write(self, data):
            self.file.write(data[: len(data) // 2])
            raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(producer_state, "open", FullDisk, raising=False)
    with pytest.raises(KafkaError) as info:
        put(2)  # does not fit: rolls, and the roll's snapshot fails
    monkeypatch.undo()
    assert info.value.code == ErrorCode.KAFKA_STORAGE_ERROR
    assert m.offline_dirs
    assert log.log_end_offset == end and all_offsets(log) == list(range(end))
    assert len(log.segments) == segments + 1 and log.segments[-1].base_offset == end
    names = os.listdir(os.path.join(data_dir, "t-0"))
    assert not [n for n in names if n.endswith(".tmp")], names
    assert sorted(n for n in names if n.endswith(".log")) == sorted(
        os.path.basename(s.log_path) for s in log.segments)
    m.close()

    m = open_manager(data_dir)
    log = m.get_log("t", 0)
    assert log.log_end_offset == end and not m.offline_dirs
    assert log.producer_state.producers[9].last_seq == last_sequence  # the failed append is not there
    m.close()


def test_a_sealed_segment_renamed_by_a_cleaner_swap_before_its_flush_keeps_the_dir_online(data_dir):
    """The cleaner's swap renames the old segments' files (in a worker thread) while the log still
    lists them; the upkeep's next flush of them must not open an index by its old name (ENOENT
    took the whole dir offline)."""
    import asyncio

    m, log = rolled(data_dir, 2)
    sealed = log.segments[0]
    assert log.sealed_unflushed() == [sealed]
    for index in (sealed.index, sealed.time_index):  # as _swap_files renames them, the upkeep between
        os.rename(index.path, index.path + ".deleted")
    asyncio.run(m.flush_sealed_segments())
    assert not m.offline_dirs
    assert sealed.flushed and log.recovery_point == log.segments[1].base_offset
    append_v2(log, [1])
    m.close()


def test_the_upkeep_flushes_no_log_while_its_cleaner_swap_moves_files(data_dir):
    import asyncio

    m, log = rolled(data_dir, 2)
    point = log.recovery_point
    log.swap_in_progress = True
    asyncio.run(m.flush_sealed_segments())
    assert log.recovery_point == point and not log.segments[0].flushed  # left for the next tick
    log.swap_in_progress = False
    asyncio.run(m.flush_sealed_segments())
    assert log.segments[0].flushed and log.recovery_point == log.segments[1].base_offset
    m.close()
