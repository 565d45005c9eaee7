"""The offset and time indexes' descriptor budget: an idle index holds no file descriptor and no
map; appends open one descriptor (kept until the index is trimmed) and check their order without
a map; the first lookup that reads an entry maps the file, and a resize drops the map. Lookups
themselves are checked against a sorted list in test_properties.py."""

from __future__ import annotations

import errno
import os
import sys

import pytest
from storage_helpers import linux_only
from storage_helpers import open_descriptors as descriptors_under

from minibroker.storage import index as index_module
from minibroker.storage.index import CorruptIndexError, OffsetIndex, TimeIndex


def open_descriptors(path: str) -> int:
    return sum(descriptors_under(path).values())


def filled(path: str, n: int, *, max_bytes: int = 8 * 1024) -> OffsetIndex:
    index = OffsetIndex(path, 100, max_bytes, writable=True)
    for i in range(n):
        index.append(100 + 10 * i + 9, 1000 * i)
    return index


@linux_only
def test_an_index_holds_no_descriptor_until_written_and_none_once_trimmed(tmp_path):
    path = str(tmp_path / "0.index")
    index = OffsetIndex(path, 100, 8 * 1024, writable=True)
    assert os.path.getsize(path) == 8 * 1024  # preallocated, then closed
    assert open_descriptors(path) == 0
    assert index.lookup(150) == (100, 0)  # no entries: the base, without a map
    assert not index.mapped and open_descriptors(path) == 0
    for i in range(20):
        index.append(100 + 10 * i + 9, 1000 * i)
    assert open_descriptors(path) == 1  # the writer, kept while the segment is active
    assert not index.mapped  # appends checked their order against the cached last entry
    index.trim_to_valid_size()
    assert os.path.getsize(path) == 20 * 8
    assert open_descriptors(path) == 1  # kept for the flush: the file may be renamed before it
    index.release_if_idle()
    index.release_if_idle()
    assert open_descriptors(path) == 1  # the sweep leaves it to the flush
    index.flush()
    assert open_descriptors(path) == 0
    index.close()


@linux_only
def test_the_first_lookup_maps_and_a_resize_drops_the_map(tmp_path):
    path = str(tmp_path / "0.index")
    index = filled(path, 20)
    assert index.lookup(125) == (119, 1000)
    assert index.mapped
    index.trim_to_valid_size()
    index.flush()
    assert not index.mapped and open_descriptors(path) == 0
    assert index.lookup(125) == (119, 1000)  # maps the trimmed file
    mapped_descriptors = open_descriptors(path)
    assert mapped_descriptors == (1 if sys.version_info < (3, 13) else 0)  # CPython's dup
    index.resize(8 * 1024)  # active again
    assert not index.mapped and open_descriptors(path) == 0
    index.append(400, 30_000)
    assert index.lookup(10_000) == (400, 30_000)  # the new map covers the grown file
    index.reset()
    assert index.entries == 0 and not index.mapped and index.lookup(10_000) == (100, 0)
    index.close()
    assert open_descriptors(path) == 0


def test_appends_after_truncation_check_against_the_entry_kept(tmp_path):
    index = filled(str(tmp_path / "0.index"), 20)
    index.truncate_to_offset(150)  # keeps the entries for offsets 109 .. 149
    assert index.entries == 5 and index.last_entry() == (149, 4000)
    with pytest.raises(ValueError, match="is not after"):
        index.append(149, 4500)
    index.append(151, 4100)  # before the dropped entries, after the kept one
    assert index.last_entry() == (151, 4100) and index.lookup(160) == (151, 4100)
    index.truncate_to_position(2000)
    index.append(130, 2500)
    assert [index.entry(i) for i in range(index.entries)] == [(109, 0), (119, 1000), (130, 2500)]
    index.close()


def test_a_time_index_appends_without_a_map_and_truncates(tmp_path):
    index = TimeIndex(str(tmp_path / "0.timeindex"), 100, 12 * 100, writable=True)
    assert index.maybe_append(5000, 110)
    assert not index.maybe_append(5000, 120)  # the timestamp did not grow
    assert index.maybe_append(6000, 130) and index.maybe_append(7000, 140)
    assert not index.mapped
    index.truncate_to_offset(135)
    assert index.last_entry() == (6000, 130)
    assert index.maybe_append(6500, 136)
    assert index.lookup(6700) == (6500, 136) and index.lookup_before(6000) == (5000, 110)
    index.close()


def test_a_reopened_index_appends_after_its_last_entry_on_disk(tmp_path):
    path = str(tmp_path / "0.index")
    index = filled(path, 5)
    index.trim_to_valid_size()
    index.close()
    reopened = OffsetIndex(path, 100, 8 * 1024, writable=True)
    assert reopened.entries == 5 and not reopened.mapped
    with pytest.raises(ValueError, match="is not after"):
        reopened.append(149, 4000)  # the last entry, read with pread
    reopened.append(150, 5000)
    assert not reopened.mapped
    reopened.trim_to_valid_size()
    sealed = OffsetIndex(path, 100, 8 * 1024, writable=False)
    sealed.sanity_check(log_size=6000)
    assert [sealed.entry(i)[0] for i in range(sealed.entries)] == [109, 119, 129, 139, 149, 150]
    reopened.close()
    sealed.close()


def test_flush_reaches_writes_made_through_a_descriptor_since_closed(tmp_path, monkeypatch):
    synced = []
    real_fsync = os.fsync

    def fsync(fd):
        synced.append(os.readlink(f"/proc/self/fd/{fd}") if sys.platform.startswith("linux") else fd)
        real_fsync(fd)

    path = str(tmp_path / "0.index")
    index = filled(path, 3)
    index.release_if_idle()
    index.release_if_idle()  # the writer is gone, the entries are not yet on disk for sure
    assert open_descriptors(path) == 0
    monkeypatch.setattr(index_module.os, "fsync", fsync)
    index.flush()
    assert len(synced) == 1
    index.flush()  # nothing written since
    assert len(synced) == 1
    index.close()


@linux_only
def test_a_trimmed_index_flushes_through_its_descriptor_after_its_file_was_renamed(tmp_path):
    """The cleaner's swap renames the files of a sealed segment the upkeep has not flushed yet:
    the flush must not open the index by its old path."""
    path = str(tmp_path / "0.index")
    index = filled(path, 3)
    index.trim_to_valid_size()
    os.rename(path, path + ".deleted")
    index.flush()  # ENOENT when the trim had let the descriptor go
    assert open_descriptors(str(tmp_path)) == 0
    index.close()


def test_a_preallocated_index_left_by_a_crash_fails_its_check(tmp_path):
    path = str(tmp_path / "0.index")
    index = filled(path, 3)
    index.close()  # not trimmed: still 8 KiB with a hole after the entries
    reopened = OffsetIndex(path, 100, 8 * 1024, writable=False)
    with open(path, "rb") as f:
        try:
            hole = os.lseek(f.fileno(), 0, os.SEEK_HOLE)
        except OSError:
            hole = 8 * 1024
    if hole >= 8 * 1024:
        reopened.close()
        pytest.skip("this file system reports no holes")
    with pytest.raises(CorruptIndexError, match="never trimmed"):
        reopened.sanity_check(log_size=10_000)
    reopened.close()


def test_a_full_disk_is_enospc_from_pwrite_and_leaves_the_entries(tmp_path, monkeypatch):
    index = filled(str(tmp_path / "0.index"), 3)

    def no_space(fd, data, position):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(index_module.os, "pwrite", no_space)
    with pytest.raises(OSError) as info:
        index.append(200, 9000)
    assert info.value.errno == errno.ENOSPC
    monkeypatch.undo()
    assert index.entries == 3 and index.last_entry() == (129, 2000)
    index.append(200, 9000)
    assert index.lookup(300) == (200, 9000)
    index.close()


@linux_only
def test_in_memory_indexes_read_the_file_once_and_never_write_it(tmp_path):
    path = str(tmp_path / "0.index")
    index = filled(path, 4)
    index.trim_to_valid_size()
    index.close()
    with open(path, "rb") as f:
        before = f.read()
    in_memory = OffsetIndex(path, 100, 8 * 1024, writable=False, in_memory=True)
    assert open_descriptors(path) == 0
    assert in_memory.entries == 4 and in_memory.lookup(135) == (129, 2000)
    in_memory.append(200, 9000)
    in_memory.resize(16 * 1024)
    in_memory.append(300, 10_000)
    assert in_memory.lookup(250) == (200, 9000) and in_memory.last_entry() == (300, 10_000)
    in_memory.flush()
    in_memory.trim_to_valid_size()
    with open(path, "rb") as f:
        assert f.read() == before
    in_memory.close()
    missing = TimeIndex(str(tmp_path / "1.timeindex"), 0, 1200, writable=False, in_memory=True)
    assert missing.entries == 0 and missing.maybe_append(10, 5) and missing.lookup(20) == (10, 5)
    assert not os.path.exists(tmp_path / "1.timeindex")
    missing.close()


@linux_only
def test_the_upkeep_lets_an_unused_map_and_writer_go(tmp_path):
    path = str(tmp_path / "0.index")
    index = filled(path, 20)
    assert index.lookup(125) == (119, 1000)
    index.release_if_idle()  # used since the last sweep: kept
    assert index.mapped and open_descriptors(path) >= 1
    index.release_if_idle()  # not since: both go
    assert not index.mapped and open_descriptors(path) == 0
    index.append(400, 30_000)  # and come back when needed
    assert index.lookup(10_000) == (400, 30_000)
    index.release_if_idle()
    assert index.mapped
    index.close()
