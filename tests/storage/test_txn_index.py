"""The ``.txnindex`` (Kafka's TransactionIndex) alone and inside segments and partition logs, and the
producer state's transaction bookkeeping and snapshots."""

from __future__ import annotations

import errno
import os
import struct

import pytest
from storage_helpers import linux_only, open_descriptors

from minibroker.errors import ErrorCode, KafkaError
from minibroker.records import build_records
from minibroker.records.control import build_end_txn_marker
from minibroker.storage.partition_log import PartitionLog
from minibroker.storage.producer_state import ProducerStateTable
from minibroker.storage.topic_config import effective_topic_config
from minibroker.storage.txn_index import ENTRY_SIZE, AbortedTxn, TransactionIndex

ENTRY = struct.Struct(">hqqqq")
NOW = 1_700_000_000_000


def test_entries_are_kafkas_34_bytes_and_the_file_comes_with_the_first(tmp_path):
    path = str(tmp_path / "00000000000000000000.txnindex")
    index = TransactionIndex(path, 0)
    assert index.entries == [] and not os.path.exists(path)
    index.append(AbortedTxn(7, 3, 9, 10))
    index.append(AbortedTxn(8, 5, 12, 13))
    index.flush()
    with open(path, "rb") as f:
        data = f.read()
    assert ENTRY_SIZE == 34
    assert data == ENTRY.pack(0, 7, 3, 9, 10) + ENTRY.pack(0, 8, 5, 12, 13)
    with pytest.raises(ValueError):
        index.append(AbortedTxn(9, 1, 12, 13))  # markers come in offset order
    index.close()
    with open(path, "ab") as f:
        f.write(b"\x00" * 10)  # a torn entry at the end is ignored
    assert TransactionIndex(path, 0).entries == [AbortedTxn(7, 3, 9, 10), AbortedTxn(8, 5, 12, 13)]


@linux_only
def test_no_descriptor_stays_open_between_entries(tmp_path, monkeypatch):
    path = str(tmp_path / "00000000000000000000.txnindex")
    index = TransactionIndex(path, 0)
    index.append(AbortedTxn(7, 3, 9, 10))
    assert open_descriptors(path) == {}
    synced = []
    real_fsync = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: synced.append(fd) or real_fsync(fd))
    index.flush()  # through a descriptor opened for it
    index.flush()  # nothing new
    assert len(synced) == 1 and open_descriptors(path) == {}


def test_collect_filters_as_kafka_and_stops_at_an_lso_past_the_bound(tmp_path):
    index = TransactionIndex(str(tmp_path / "x.txnindex"), 0)
    for txn in (AbortedTxn(1, 0, 4, 5), AbortedTxn(2, 6, 10, 11), AbortedTxn(3, 12, 20, 21)):
        index.append(txn)
    assert index.collect(5, 12) == ([AbortedTxn(2, 6, 10, 11)], True)  # 3's LSO 21 passes 12
    assert index.collect(0, 6) == ([AbortedTxn(1, 0, 4, 5)], True)
    found, complete = index.collect(0, 30)
    assert (len(found), complete) == (3, False)  # later segments may hold more
    assert index.collect(21, 30) == ([], False)


def test_truncate_and_reset(tmp_path):
    path = str(tmp_path / "x.txnindex")
    index = TransactionIndex(path, 0)
    for txn in (AbortedTxn(1, 0, 4, 5), AbortedTxn(2, 6, 10, 11)):
        index.append(txn)
    index.truncate_to(10)
    assert index.entries == [AbortedTxn(1, 0, 4, 5)] and os.path.getsize(path) == ENTRY_SIZE
    index.reset()
    assert index.entries == [] and os.path.getsize(path) == 0
    index.delete()
    assert not os.path.exists(path)


def _config():
    return effective_topic_config(None)


def _append(plog, data: bytes) -> None:
    from minibroker.records.framing import scan_entries

    entries = list(scan_entries(data))
    plog.append(data, first_offset=entries[0].base_offset, last_offset=entries[-1].last_offset,
                max_timestamp=entries[-1].max_timestamp, offset_of_max_timestamp=entries[-1].last_offset,
                record_count=len(entries))


def _log_with_an_aborted_transaction(tmp_path) -> PartitionLog:
    """Producer 5's transactional batch at offset 0, its ABORT marker at 1, and the abort indexed."""
    plog = PartitionLog.create(str(tmp_path / "t-0"), "t", 0, b"\x01" * 16, _config())
    _append(plog, build_records(2, [(0, NOW, None, b"a")], producer_id=5, producer_epoch=0, base_sequence=0,
                                is_transactional=True))
    _append(plog, build_end_txn_marker(commit=False, producer_id=5, producer_epoch=0, coordinator_epoch=0,
                                       timestamp=NOW, base_offset=1))
    plog.add_aborted_txn(AbortedTxn(5, 0, 1, 2))
    return plog


def test_segment_files_carry_the_txn_index_through_truncation_roll_and_recovery(tmp_path):
    plog = _log_with_an_aborted_transaction(tmp_path)
    path = os.path.join(plog.directory, f"{0:020d}.txnindex")
    assert os.path.getsize(path) == ENTRY_SIZE
    plog.truncate_to(1)  # the marker goes, and its entry with it
    assert os.path.getsize(path) == 0
    assert plog.collect_aborted_transactions(0, 1) == []
    _append(plog, build_end_txn_marker(commit=False, producer_id=5, producer_epoch=0, coordinator_epoch=0,
                                       timestamp=NOW, base_offset=1))
    plog.add_aborted_txn(AbortedTxn(5, 0, 1, 2))
    plog.roll()
    assert plog.collect_aborted_transactions(0, 2) == [AbortedTxn(5, 0, 1, 2)]
    assert plog.collect_aborted_transactions(2, 2) == []
    plog.close()

    # an unclean open re-reads the last segments: their txn index is emptied and flagged for the replay
    reopened = PartitionLog.open(plog.directory, "t", 0, b"\x01" * 16, _config(), recovery_point=0)
    first = reopened.segments[0]
    assert first.txn_index_needs_rebuild and first.txn_index.entries == []
    reopened.close()
    clean = PartitionLog.open(plog.directory, "t", 0, b"\x01" * 16, _config(), clean=True)
    assert not clean.segments[0].txn_index_needs_rebuild
    clean.delete_records_before(2)
    assert not os.path.exists(path)
    clean.close()


def test_producer_state_opens_and_closes_transactions():
    table = ProducerStateTable()
    table.record(1, 0, 0, 1, 10, 11, 100, is_transactional=True)
    table.record(1, 0, 2, 2, 14, 14, 101, is_transactional=True)  # the same transaction
    table.record(2, 0, 0, 0, 12, 12, 102, is_transactional=True)
    table.record(3, 0, 0, 0, 13, 13, 103)  # idempotent only
    assert table.ongoing_transactions() == {1: 10, 2: 12}
    assert table.first_unstable_offset() == 10
    with pytest.raises(KafkaError) as e:
        table.check(1, 0, 3, 3, is_transactional=False)
    assert e.value.code == ErrorCode.INVALID_TXN_STATE
    assert table.check(1, 0, 3, 3, is_transactional=True) is None
    completed = table.complete_txn(1, 0, 4, 15, True, 104)
    assert (completed.first_offset, completed.last_offset, completed.is_aborted) == (10, 15, True)
    assert table.last_stable_offset_after(completed) == 12
    assert table.first_unstable_offset() == 12
    assert table.complete_txn(1, 0, 4, 16, True) is None  # nothing open: nothing closed
    with pytest.raises(KafkaError) as e:
        table.check_end_txn_marker(1, 0, 3)
    assert e.value.code == ErrorCode.TRANSACTION_COORDINATOR_FENCED
    with pytest.raises(KafkaError) as e:
        table.check_end_txn_marker(2, -1, 0)
    assert e.value.code == ErrorCode.INVALID_PRODUCER_EPOCH
    # a new epoch keeps the open transaction (the coordinator bumps epochs only between them)
    table.record(2, 1, 0, 0, 17, 17, 105, is_transactional=True)
    assert table.ongoing_transactions() == {2: 12}
    completed = table.complete_txn(2, 1, 0, 18, False)
    assert table.last_stable_offset_after(completed) == 19


def test_snapshots_keep_open_transactions_coordinator_epochs_and_marker_only_producers(tmp_path):
    table = ProducerStateTable()
    table.record(1, 2, 0, 1, 10, 11, 100, is_transactional=True)
    table.complete_txn(4, 3, 7, 12, True, 106)  # known from a marker only
    table.record(5, 0, 0, 0, 13, 13, 107)
    path = table.write_snapshot(str(tmp_path), 14)
    loaded = ProducerStateTable.read_snapshot(path)
    assert loaded.ongoing_transactions() == {1: 10}
    assert sorted(loaded.active()) == sorted(table.active()) == [
        (1, 2, 1, 11, 100, -1, 10), (4, 3, -1, -1, 106, 7, -1), (5, 0, 0, 13, 107, -1, -1)]
    with open(path, "rb") as f:
        data = f.read()
    # Kafka's layout: version, crc, count, then per producer ... coordinator epoch, current txn first offset
    assert struct.unpack_from(">hIi", data, 0)[::2] == (1, 3)
    assert struct.unpack_from(">iq", data, 10 + 34) == (-1, 10)
    assert loaded.check(4, 3, 0, 0) is None  # a marker-only producer starts at sequence 0


def test_a_replay_that_fails_midway_leaves_no_abort_indexed_and_the_retry_serves(tmp_path, monkeypatch):
    """After an unclean start the producer-state replay indexes the aborts of the segments recovery
    re-read. A replay cut by an OS error (EMFILE, EIO) after such an abort must leave nothing
    appended: the retry once the error clears appends it again and would find it there."""
    plog = _log_with_an_aborted_transaction(tmp_path)
    _append(plog, build_records(2, [(2, NOW, None, b"b")]))
    # crash: never closed; the unclean open empties the re-read segment's txn index
    reopened = PartitionLog.open(plog.directory, "t", 0, b"\x01" * 16, _config(), recovery_point=0)
    assert reopened.segments[0].txn_index_needs_rebuild
    failed, real_headers = [], reopened.iter_entry_headers

    def headers_failing_once_after_the_marker(start):
        for item in real_headers(start):
            if item[3].base_offset == 2 and not failed:  # the batch after the abort's marker
                failed.append(2)
                raise OSError(errno.EMFILE, os.strerror(errno.EMFILE))
            yield item

    monkeypatch.setattr(reopened, "iter_entry_headers", headers_failing_once_after_the_marker)
    with pytest.raises(KafkaError) as info:
        reopened.producer_state  # noqa: B018
    assert info.value.code == ErrorCode.KAFKA_STORAGE_ERROR
    assert reopened.collect_aborted_transactions(0, 3) == []  # nothing half-indexed
    assert reopened.producer_state.ongoing_transactions() == {}  # the retry serves the partition
    assert reopened.collect_aborted_transactions(0, 3) == [AbortedTxn(5, 0, 1, 2)]
    reopened.close()
    again = PartitionLog.open(plog.directory, "t", 0, b"\x01" * 16, _config(), clean=True)
    assert again.collect_aborted_transactions(0, 3) == [AbortedTxn(5, 0, 1, 2)]  # on disk once
    again.close()


def test_the_replay_reads_batch_headers_not_records_across_segments(tmp_path, monkeypatch):
    """The producer-state replay after a restart reads each batch's header and a marker's record, not
    the records of data batches: batches larger than a scan chunk, an idempotent producer and an
    aborted transaction over two segments, and no snapshot, give the state the appends left, from
    reads of a small part of the log."""
    plog = PartitionLog.create(str(tmp_path / "t-0"), "t", 0, b"\x01" * 16, _config())
    big = b"x" * 200_000  # a batch of one is twelve times the 16 KiB scan chunk
    _append(plog, build_records(2, [(0, NOW, None, big), (1, NOW, None, big)], producer_id=7,
                                producer_epoch=1, base_sequence=0))
    _append(plog, build_records(2, [(2, NOW, None, big)]))  # no producer id: not replayed
    _append(plog, build_records(2, [(3, NOW + 1, None, big)], producer_id=5, producer_epoch=0,
                                base_sequence=0, is_transactional=True))
    plog.roll()
    _append(plog, build_end_txn_marker(commit=False, producer_id=5, producer_epoch=0, coordinator_epoch=0,
                                       timestamp=NOW + 2, base_offset=4))
    plog.add_aborted_txn(AbortedTxn(5, 3, 4, 5))
    _append(plog, build_records(2, [(5, NOW + 3, None, big)], producer_id=7, producer_epoch=1,
                                base_sequence=2))
    log_bytes = sum(s.size for s in plog.segments)
    plog.close()
    for name in os.listdir(plog.directory):  # the replay starts from the log start
        if name.endswith(".snapshot"):
            os.unlink(os.path.join(plog.directory, name))
    reopened = PartitionLog.open(plog.directory, "t", 0, b"\x01" * 16, _config(), clean=True)
    read, real_pread = [], os.pread
    monkeypatch.setattr(os, "pread", lambda fd, n, at: read.append(n) or real_pread(fd, n, at))
    table = reopened.producer_state
    assert table.loaded_snapshot_offset is None and table.replayed_batches == 4
    assert table.check(7, 1, 2, 2) is not None  # producer 7's batch in the second segment: a duplicate
    assert table.check(7, 1, 3, 3) is None  # and its next sequence is 3
    assert table.ongoing_transactions() == {}  # the marker closed producer 5's transaction
    assert sorted(p[:4] for p in table.active()) == [(5, 0, 0, 3), (7, 1, 2, 5)]
    assert sum(read) < log_bytes / 8  # a whole read is log_bytes and more
    reopened.close()
