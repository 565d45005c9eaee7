"""Several log dirs (JBOD) in the LogManager: placement, identity checks, checkpoints per dir, a dir
failing alone, and partition moves between dirs (AlterReplicaLogDirs) with appends going on, cut
short, or crashing at each step (the crash cases through a real broker process: tests/test_jbod_clients.py).
"""

from __future__ import annotations

import asyncio
import errno
import itertools
import os
import sys

import pytest
from storage_helpers import append_v2, open_descriptors

from minibroker.errors import ErrorCode, KafkaError
from minibroker.records.framing import scan_entries
from minibroker.storage import LogManager
from minibroker.storage import checkpoints as ckpt
from minibroker.storage import log_dir_move as mv
from minibroker.storage import segment as segment_module
from minibroker.storage.log_manager import LogDirConflictError

CONFIG = {"log.segment.bytes": 3000, "log.index.interval.bytes": 1, "log.segment.delete.delay.ms": 0}


@pytest.fixture
def dirs(tmp_path):
    return [str(tmp_path / "a"), str(tmp_path / "b")]


def open_manager(dirs, **extra):
    m = LogManager(dirs, {**CONFIG, **extra}, node_id=1)
    m.lock()
    m.load()
    return m


def all_offsets(log) -> list[int]:
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


def partition_dirs(d: str) -> list[str]:
    return sorted(n for n in os.listdir(d) if os.path.isdir(os.path.join(d, n)))


def test_partitions_spread_over_the_dirs_and_load_from_both(dirs):
    m = open_manager(dirs)
    m.create_topic("t", 4)
    m.create_topic("u", 1)
    placed = {p: m.log_dir_of("t", p) for p in range(4)}
    assert sorted(placed.values()).count(dirs[0]) == 2 and sorted(placed.values()).count(dirs[1]) == 2
    assert m.log_dir_of("u", 0) == dirs[0]  # fewest partitions, first dir on a tie (Kafka's nextLogDirs)
    for p in range(4):
        append_v2(m.get_log("t", p), [p, p])
    m.close()
    for d in dirs:  # each dir has its own identity and checkpoints, for its own partitions only
        assert ckpt.read_properties(os.path.join(d, ckpt.META_PROPERTIES))["cluster.id"] == m.cluster_id
        held = set(ckpt.read_offset_checkpoint(os.path.join(d, ckpt.RECOVERY_POINT_CHECKPOINT)))
        assert held == {("t", p) for p, where in placed.items() if where == d} | (
            {("u", 0)} if d == dirs[0] else set())
        assert os.path.exists(os.path.join(d, ckpt.CLEAN_SHUTDOWN_FILE))
    m2 = open_manager(dirs)
    assert {p: m2.log_dir_of("t", p) for p in range(4)} == placed
    assert all(m2.get_log("t", p).log_end_offset == 2 for p in range(4))
    m2.close()


def test_a_dir_of_another_cluster_refuses_start_up(dirs):
    m = open_manager(dirs[:1])
    m.close()
    other = LogManager(dirs[1:], CONFIG, node_id=1)
    other.load()
    other.close()
    with pytest.raises(LogDirConflictError, match="different clusters") as info:
        open_manager(dirs)
    assert dirs[0] in str(info.value) and dirs[1] in str(info.value)


def test_a_partition_in_two_dirs_refuses_start_up_naming_both(dirs):
    m = open_manager(dirs)
    m.create_topic("t", 1)
    append_v2(m.get_log("t", 0), [1])
    m.close()
    src = os.path.join(m.log_dir_of("t", 0) or dirs[0], "t-0")
    other = dirs[1] if src.startswith(dirs[0]) else dirs[0]
    import shutil

    shutil.copytree(src, os.path.join(other, "t-0"))
    with pytest.raises(LogDirConflictError) as info:
        open_manager(dirs)
    assert src in str(info.value) and os.path.join(other, "t-0") in str(info.value)


def test_a_failed_dir_takes_only_its_partitions_offline(dirs, monkeypatch):
    m = open_manager(dirs)
    m.create_topic("t", 2)
    a, b = m.get_log("t", 0), m.get_log("t", 1)
    assert m.log_dir_of("t", 0) != m.log_dir_of("t", 1)
    append_v2(a, [1])
    append_v2(b, [1])
    real = os.pwrite

    def failing(fd, data, position):
        if os.readlink(f"/proc/self/fd/{fd}").startswith(m.log_dir_of("t", 0) + os.sep):
            raise OSError(errno.EIO, os.strerror(errno.EIO))
        return real(fd, data, position)

    monkeypatch.setattr(segment_module.os, "pwrite", failing)
    with pytest.raises(KafkaError) as info:
        append_v2(a, [2])
    assert info.value.code == ErrorCode.KAFKA_STORAGE_ERROR
    append_v2(b, [2])  # the other dir keeps serving appends
    monkeypatch.undo()
    assert set(m.offline_dirs) == {m.log_dir_of("t", 0)}
    assert all_offsets(a) == [0] and all_offsets(b) == [0, 1]
    m.create_topic("u", 2)  # new partitions go to the online dir only
    assert m.log_dir_of("u", 0) == m.log_dir_of("u", 1) == m.log_dir_of("t", 1)
    m.close()
    m2 = open_manager(dirs)  # restart: both dirs serve again
    assert not m2.offline_dirs
    assert all_offsets(m2.get_log("t", 0)) == [0] and all_offsets(m2.get_log("t", 1)) == [0, 1]
    m2.close()


async def until(condition) -> None:
    """Poll ``condition`` while the loop runs the move (10 s at most)."""
    async with asyncio.timeout(10):
        for _ in itertools.count():
            if condition():
                return
            await asyncio.sleep(0.005)


def has_future(d: str) -> bool:
    return any(n.endswith(mv.FUTURE_SUFFIX) for n in partition_dirs(d))


async def test_a_move_while_appends_go_on_keeps_every_record_once(dirs):
    m = open_manager(dirs, **{"log.segment.bytes": 20000})
    m.create_topic("t", 1)
    src = m.log_dir_of("t", 0)
    dest = dirs[1] if src == dirs[0] else dirs[0]
    for i in range(2000):
        append_v2(m.get_log("t", 0), [i])
    m.move_partition("t", 0, dest)
    assert m.is_moving("t", 0)
    assert [f[:3] for f in m.future_replicas()] == [("t", 0, dest)]
    appended = 2000
    while m.is_moving("t", 0):  # appends between the copy rounds, to whichever log serves now
        append_v2(m.get_log("t", 0), [appended])
        appended += 1
        await asyncio.sleep(0.001)
    await until(lambda: m.log_dir_of("t", 0) == dest and not m.is_moving("t", 0))
    assert appended > 2000
    for i in range(10):
        append_v2(m.get_log("t", 0), [i])
        appended += 1
    log = m.get_log("t", 0)
    assert log.directory == os.path.join(dest, "t-0")
    assert all_offsets(log) == list(range(appended))
    assert "t-0" not in partition_dirs(src)  # renamed -delete, then removed (file.delete.delay.ms 0)
    if sys.platform.startswith("linux"):  # the source's files are closed, not only unlinked
        await until(lambda: not partition_dirs(src))  # the -delete dir's removal (in a thread) ends
        assert not [p for p in open_descriptors(src) if not p.endswith(".lock")]
    m.close()
    m2 = open_manager(dirs)
    assert m2.log_dir_of("t", 0) == dest
    assert all_offsets(m2.get_log("t", 0)) == list(range(appended))
    assert not [n for n in partition_dirs(src) + partition_dirs(dest) if n.endswith(("-future", "-delete"))]
    m2.close()
    if sys.platform.startswith("linux"):
        assert open_descriptors(src) == open_descriptors(dest) == {}


async def test_moving_back_to_the_current_dir_cancels_the_move(dirs):
    m = open_manager(dirs, **{"replica.alter.log.dirs.io.max.bytes.per.second": 2000})
    m.create_topic("t", 1)
    src = m.log_dir_of("t", 0)
    dest = dirs[1] if src == dirs[0] else dirs[0]
    for i in range(100):
        append_v2(m.get_log("t", 0), [i])
    m.move_partition("t", 0, dest)
    await until(lambda: has_future(dest))
    m.move_partition("t", 0, src)
    assert not m.is_moving("t", 0)
    await until(lambda: not has_future(dest))
    assert m.log_dir_of("t", 0) == src and all_offsets(m.get_log("t", 0)) == list(range(100))
    m.close()


async def test_deleting_a_topic_during_its_move_removes_the_copy(dirs):
    m = open_manager(dirs, **{"replica.alter.log.dirs.io.max.bytes.per.second": 2000})
    m.create_topic("t", 1)
    dest = dirs[1] if m.log_dir_of("t", 0) == dirs[0] else dirs[0]
    for i in range(100):
        append_v2(m.get_log("t", 0), [i])
    m.move_partition("t", 0, dest)
    await until(lambda: has_future(dest))
    m.delete_topic("t")
    await until(lambda: not partition_dirs(dest))
    m.close()


async def test_a_write_failure_in_the_destination_leaves_the_partition_in_its_source(dirs, monkeypatch):
    m = open_manager(dirs)
    m.create_topic("t", 1)
    src = m.log_dir_of("t", 0)
    dest = dirs[1] if src == dirs[0] else dirs[0]
    for i in range(50):
        append_v2(m.get_log("t", 0), [i])

    def failing(fd, data, position):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(mv.os, "pwrite", failing)
    m.move_partition("t", 0, dest)
    await until(lambda: not m.is_moving("t", 0))
    monkeypatch.undo()
    assert set(m.offline_dirs) == {dest}
    assert m.log_dir_of("t", 0) == src
    append_v2(m.get_log("t", 0), [50])  # the source dir serves on
    assert all_offsets(m.get_log("t", 0)) == list(range(51))
    with pytest.raises(KafkaError) as info:
        m.move_partition("t", 0, dest)
    assert info.value.code == ErrorCode.KAFKA_STORAGE_ERROR
    m.close()


@pytest.mark.parametrize("case", ["future", "committed", "marker_left", "source_written_since"])
def test_start_up_settles_what_a_crashed_move_left(dirs, case):
    """What each crash point leaves, made by hand: an uncommitted future dir is discarded (the source
    serves), a committed move (marker naming the source and its last segment) wins over the source
    copy, a lone marker goes; a source appended to after the marker was written refuses start-up."""
    m = open_manager(dirs)
    m.create_topic("t", 1)
    for i in range(20):
        append_v2(m.get_log("t", 0), [i])
    m.close()
    src = m.log_dir_of("t", 0)
    dest = dirs[1] if src == dirs[0] else dirs[0]
    import shutil

    if case == "future":
        future = os.path.join(dest, mv.future_dir_name("t", 0, "0" * 32))
        shutil.copytree(os.path.join(src, "t-0"), future)
        with open(os.path.join(future, "00000000000000000000.log"), "r+b") as f:
            f.truncate(100)  # half copied
        expected_dir = src
    else:
        shutil.copytree(os.path.join(src, "t-0"), os.path.join(dest, "t-0"))
        last = os.path.join(src, "t-0", "00000000000000000000.log")
        with open(os.path.join(dest, "t-0", mv.MOVED_FROM_FILE), "w") as f:
            f.write(f"{src}\n0 {os.path.getsize(last)}\n")
        if case == "marker_left":
            shutil.rmtree(os.path.join(src, "t-0"))
        if case == "source_written_since":
            with open(last, "ab") as f:
                f.write(b"\0" * 10)
            with pytest.raises(LogDirConflictError, match="several log dirs"):
                open_manager(dirs)
            return
        expected_dir = dest
    m2 = open_manager(dirs)
    assert m2.log_dir_of("t", 0) == expected_dir
    assert all_offsets(m2.get_log("t", 0)) == list(range(20))
    assert partition_dirs(expected_dir) == ["t-0"]
    assert partition_dirs(dest if expected_dir == src else src) == []
    assert not os.path.exists(os.path.join(expected_dir, "t-0", mv.MOVED_FROM_FILE))
    m2.close()
