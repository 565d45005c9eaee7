"""The log cleaner at the storage level: what a pass keeps, the offset map bound, the swap protocol
and its recovery after a crash at each step (storage/cleaner.py)."""

from __future__ import annotations

import logging
import os

import pytest

from minibroker.records import v2
from minibroker.records.batches import iter_batches
from minibroker.records.control import build_end_txn_marker
from minibroker.records.framing import scan_entries
from minibroker.storage import LogManager
from minibroker.storage import cleaner as cleaner_module
from minibroker.storage.cleaner import CLEANER_OFFSET_CHECKPOINT, SWAP_STEPS, OffsetMap
from minibroker.storage.partition_log import PartitionLog
from minibroker.storage.txn_index import AbortedTxn

NOW = 1_700_000_000_000


class Clock:
    def __init__(self):
        self.ms = NOW

    def __call__(self) -> float:
        return self.ms / 1000


def _manager(tmp_path, clock=None, **broker):
    config = {"log.cleaner.backoff.ms": 10, **broker}
    manager = LogManager(str(tmp_path / "data"), config, 1, clock=clock or Clock())
    manager.load()
    return manager


def _topic(manager, name="t", **configs):
    cfg = {"cleanup.policy": "compact", "min.cleanable.dirty.ratio": "0.01", "segment.bytes": "2000",
           "file.delete.delay.ms": "0", **{k.replace("_", "."): str(v) for k, v in configs.items()}}
    manager.create_topic(name, 1, cfg)
    return manager.get_log(name, 0)


def _append(plog, data: bytes) -> None:
    entries = list(scan_entries(data))
    plog.append(data, first_offset=entries[0].base_offset, last_offset=entries[-1].last_offset,
                max_timestamp=entries[-1].max_timestamp, offset_of_max_timestamp=entries[-1].last_offset,
                record_count=len(entries))


def _put(plog, records, *, ts=NOW, **options) -> int:
    """Append one batch of (key, value[, headers]) at the log end; returns its base offset."""
    base = plog.log_end_offset
    rows = [(base + i, ts, r[0], r[1], r[2] if len(r) > 2 else ()) for i, r in enumerate(records)]
    _append(plog, v2.build_batch(rows, base_offset=base, **options))
    return base


def _batches(plog):
    out = []
    for seg in plog.segments:
        with open(seg.log_path, "rb") as f:
            data = f.read()
        out += list(iter_batches(data))
    return out


def _records(plog):
    return [(r.offset, r.key, r.value) for b in _batches(plog) for r in b.records()]


def _latest(rows):
    latest = {}
    for offset, key, value in rows:
        latest[key] = (offset, value)
    return latest


def test_keeps_the_latest_record_per_key_at_its_offset_with_headers_and_producer_fields(tmp_path):
    manager = _manager(tmp_path)
    plog = _topic(manager)
    written = []
    for i in range(300):
        key = f"k{i % 7}".encode()
        value = f"v{i}".encode()
        base = _put(plog, [(key, value, (("h", key),))], producer_id=9, producer_epoch=2, base_sequence=i)
        written.append((base, key, value))
    plog.roll()
    assert manager.cleaner.clean_now(plog)
    rows = _records(plog)
    assert rows == sorted(_latest(written)[k][0:1] + (k, _latest(written)[k][1]) for k in _latest(written))
    assert len(rows) == 7
    for batch in _batches(plog):
        assert batch.is_valid
        if batch.count == 0 and batch.producer_id == -1:
            continue  # a cleaned segment's last-offset placeholder
        assert batch.producer_id == 9 and batch.producer_epoch == 2
        assert batch.base_sequence == batch.base_offset  # sequence i was written at offset i
        assert all(r.headers == (("h", r.key),) for r in batch.records())
    assert plog.log_end_offset == 300
    # reads go through the rebuilt indexes, and skip the gaps
    assert plog.read(rows[0][0], 100).first_offset == rows[0][0]
    assert plog.read(rows[0][0] - 1, 10**6).first_offset <= rows[0][0]
    with open(os.path.join(manager.log_dirs[0], CLEANER_OFFSET_CHECKPOINT)) as f:
        ckpt = f.read().split("\n")
    assert ckpt[:3] == ["0", "1", f"t 0 {plog.segments[-1].base_offset}"]
    names = os.listdir(plog.directory)
    assert not [n for n in names if n.endswith((".cleaned", ".swap", ".deleted"))]
    # a clean restart trusts the cleaned segments; the data is the same
    manager.close()
    again = _manager(tmp_path)
    assert _records(again.get_log("t", 0)) == rows
    again.close()


def test_a_batch_keeps_its_base_offset_and_last_offset_delta(tmp_path):
    manager = _manager(tmp_path)
    plog = _topic(manager)
    _put(plog, [(b"a", b"1"), (b"b", b"1"), (b"c", b"1")], producer_id=4, producer_epoch=0, base_sequence=0)
    _put(plog, [(b"a", b"2"), (b"c", b"2")])
    plog.roll()
    manager.cleaner.clean_now(plog)
    first = _batches(plog)[0]
    assert (first.base_offset, first.last_offset, first.count) == (0, 2, 1)
    assert first.last_sequence == 2  # the producer's last sequence survives
    assert [(r.offset, r.key) for r in first.records()] == [(1, b"b")]
    manager.close()


def test_a_producers_last_batch_stays_as_an_empty_batch(tmp_path):
    manager = _manager(tmp_path)
    plog = _topic(manager)
    _put(plog, [(b"a", b"1")], producer_id=4, producer_epoch=1, base_sequence=0)
    _put(plog, [(b"b", b"1")], producer_id=4, producer_epoch=1, base_sequence=1)
    _put(plog, [(b"b", b"2")])  # no producer id: supersedes producer 4's last batch
    plog.roll()
    manager.cleaner.clean_now(plog)
    batches = _batches(plog)
    assert [(b.base_offset, b.count, b.producer_id) for b in batches] == [(0, 1, 4), (1, 0, 4), (2, 1, -1)]
    assert batches[1].base_sequence == 1 and batches[1].is_valid
    manager.close()


def test_tombstones_stay_for_delete_retention_ms_after_the_clean_then_go(tmp_path):
    clock = Clock()
    manager = _manager(tmp_path, clock)
    plog = _topic(manager, delete_retention_ms=1000)
    _put(plog, [(b"a", b"1"), (b"b", b"1")])
    _put(plog, [(b"a", None)])
    plog.roll()
    manager.cleaner.clean_now(plog)
    assert [(o, k, v) for o, k, v in _records(plog)] == [(1, b"b", b"1"), (2, b"a", None)]
    tomb = _batches(plog)[-1]
    assert tomb.attributes & v2.DELETE_HORIZON_MASK
    assert v2.BatchHeader(tomb.buf, tomb.position).base_timestamp == NOW + 1000
    clock.ms += 500
    assert manager.cleaner.grab_filthiest(clock.ms) is None
    manager.cleaner.clean_now(plog)
    assert (2, b"a", None) in _records(plog)
    clock.ms += 600  # past the horizon: the next pass is due without new dirty data and removes it
    assert manager.cleaner.grab_filthiest(clock.ms) is not None
    manager.cleaner.clean_now()
    assert _records(plog) == [(1, b"b", b"1")]
    manager.close()


def test_aborted_transactions_go_and_markers_stay_then_go(tmp_path):
    clock = Clock()
    manager = _manager(tmp_path, clock)
    plog = _topic(manager, delete_retention_ms=1000)
    txn = {"producer_id": 7, "producer_epoch": 0, "is_transactional": True}
    _put(plog, [(b"a", b"aborted")], base_sequence=0, **txn)  # 0
    _append(plog, build_end_txn_marker(commit=False, producer_id=7, producer_epoch=0, coordinator_epoch=0,
                                       timestamp=NOW, base_offset=1))  # 1
    plog.add_aborted_txn(AbortedTxn(7, 0, 1, 2))
    _put(plog, [(b"a", b"committed")], base_sequence=1, **txn)  # 2
    _append(plog, build_end_txn_marker(commit=True, producer_id=7, producer_epoch=0, coordinator_epoch=0,
                                       timestamp=NOW, base_offset=3))  # 3
    _put(plog, [(b"b", b"plain")])  # 4
    plog.roll()
    manager.cleaner.clean_now(plog)
    batches = _batches(plog)
    # the aborted data went; its marker stays (with its txn index entry) while data was just removed
    assert [(b.base_offset, b.is_control) for b in batches] == [(1, True), (2, False), (3, True), (4, False)]
    assert plog.collect_aborted_transactions(0, 5) == [AbortedTxn(7, 0, 1, 2)]
    manager.cleaner.clean_now(plog)  # the abort marker has no data left: its horizon starts
    assert v2.BatchHeader(_batches(plog)[0].buf, _batches(plog)[0].position).has_delete_horizon
    _put(plog, [(b"a", b"later")])  # supersedes the committed record: the commit marker loses its data
    plog.roll()
    manager.cleaner.clean_now(plog)
    clock.ms += 2000
    manager.cleaner.clean_now(plog)
    manager.cleaner.clean_now(plog)
    batches = _batches(plog)
    # producer 7's last data batch stays as an empty batch (its sequence), and, as in Kafka, the commit
    # marker after it stays while that batch does; the abort marker and all other transactional data go
    assert [(b.base_offset, b.is_control, b.count, b.producer_id) for b in batches if b.producer_id >= 0
            or b.count] == [(2, False, 0, 7), (3, True, 1, 7), (4, False, 1, -1), (5, False, 1, -1)]
    assert plog.collect_aborted_transactions(0, 6) == []
    manager.close()


def test_an_open_transaction_bounds_the_cleaning(tmp_path):
    manager = _manager(tmp_path)
    plog = _topic(manager)
    _put(plog, [(b"a", b"1")])
    _put(plog, [(b"a", b"open")], producer_id=3, producer_epoch=0, base_sequence=0, is_transactional=True)
    _put(plog, [(b"a", b"3")])
    plog.roll()
    manager.cleaner.clean_now(plog)
    assert [o for o, _, _ in _records(plog)] == [0, 1, 2]  # nothing at or past offset 1 was cleanable
    manager.close()


def test_a_small_offset_map_cleans_in_several_passes(tmp_path):
    manager = _manager(tmp_path, **{"log.cleaner.dedupe.buffer.size": 24 * 10,
                                    "log.cleaner.io.buffer.load.factor": 1.0})
    plog = _topic(manager, segment_bytes=100_000)
    assert manager.cleaner.settings.dedupe_buffer_size == 240
    written = []
    for round_ in range(3):
        for k in range(35):
            key, value = f"key-{k}".encode(), f"{round_}".encode()
            written.append((_put(plog, [(key, value)]), key, value))
    plog.roll()
    passes = 0
    while manager.cleaner.grab_filthiest() is not None:
        manager.cleaner.clean_now()
        passes += 1
        assert passes < 20
    assert passes >= 4
    latest = _latest(written)
    assert _records(plog) == sorted((o, k, v) for k, (o, v) in latest.items())
    manager.close()


def test_offset_map_bound():
    m = OffsetMap(24 * 100, 0.5)
    assert m.slots == 100 and m.max_entries == 50
    assert m.has_room_for(50) and not m.has_room_for(51)
    m.put(b"x", 3)
    assert m.get(b"x") == 3 and m.get(b"y") == -1


def test_small_segments_are_grouped_up_to_segment_bytes(tmp_path):
    manager = _manager(tmp_path)
    plog = _topic(manager, segment_bytes=400)
    for i in range(40):
        _put(plog, [(f"k{i % 4}".encode(), b"x" * 30)])
    plog.roll()
    before = len(plog.segments)
    swaps = []
    manager.cleaner.crash_hook = lambda step: swaps.append(step)
    manager.cleaner.clean_now(plog)
    # Grouped by the segments' sizes before cleaning, as Kafka (each full segment its own group), then
    # the small cleaned segments merged in the same pass: the placeholders of the superseded segments
    # in one segment, the latest records (400 bytes) in another, and the active one.
    assert before > 5 and len(plog.segments) == 3
    assert swaps.count("swap_done") > before - 1 and swaps.count("swap_done:merge") >= 1
    manager.cleaner.crash_hook = None
    manager.cleaner.clean_now(plog)  # nothing more to merge
    assert len(plog.segments) == 3
    assert [k for _, k, _ in _records(plog)] == [b"k0", b"k1", b"k2", b"k3"]
    assert [k for _, k, _ in _records(plog)] == [b"k0", b"k1", b"k2", b"k3"]
    manager.close()


def test_the_active_segment_is_never_cleaned_and_delete_policy_alone_is_not_compacted(tmp_path):
    manager = _manager(tmp_path)
    plog = _topic(manager)
    for i in range(10):
        _put(plog, [(b"a", str(i).encode())])
    assert manager.cleaner.grab_filthiest() is None
    other = _topic(manager, "d", cleanup_policy="delete")
    for i in range(10):
        _put(other, [(b"a", str(i).encode())])
    other.roll()
    assert manager.cleaner.grab_filthiest() is None
    manager.close()


def test_compact_delete_applies_retention_too(tmp_path):
    clock = Clock()
    manager = _manager(tmp_path, clock)
    plog = _topic(manager, cleanup_policy="compact,delete", retention_ms=1000)
    for i in range(10):
        _put(plog, [(b"a", str(i).encode())])
    plog.roll()
    manager.cleaner.clean_now(plog)
    assert len(_records(plog)) == 1
    clock.ms += 5000
    assert plog.apply_retention(clock.ms) == 1
    manager.close()


def test_v0_v1_logs_are_skipped_with_a_reason(tmp_path, caplog):
    from minibroker.records.legacy import build_message_set

    manager = _manager(tmp_path)
    plog = _topic(manager)
    data = build_message_set(1, [(0, NOW, b"a", b"1"), (1, NOW, b"a", b"2")])
    _append(plog, data)
    plog.roll()
    assert manager.cleaner.clean_now(plog)
    assert "only v2 batches are compacted" in caplog.text
    assert manager.cleaner.grab_filthiest() is None  # not picked again
    manager.close()


def _fill(plog, rounds=4, keys=12):
    written = []
    for round_ in range(rounds):
        for k in range(keys):
            key, value = f"key-{k}".encode(), f"{round_}-{k}".encode()
            written.append((_put(plog, [(key, value)]), key, value))
    return written


class Crash(Exception):
    pass


@pytest.mark.parametrize("step", [*SWAP_STEPS, *(step + ":merge" for step in SWAP_STEPS)])
def test_a_crash_at_each_swap_step_leaves_old_or_new_segments(tmp_path, step):
    """``<step>:merge``: at a swap of several old (small cleaned) segments for one."""
    for attempt in range(3):  # repeated: each restart must find a consistent log and clean again
        data = tmp_path / f"run{attempt}"
        data.mkdir()
        manager = _manager(data)
        plog = _topic(manager, segment_bytes=600)
        written = _fill(plog)
        plog.roll()
        written += _fill(plog, rounds=1)
        plog.roll()
        expected = _latest(written)

        def crash(name, step=step):
            if name == step:
                raise Crash(name)

        manager.cleaner.crash_hook = crash
        with pytest.raises(Crash):
            manager.cleaner.clean_now(plog)
        # kill -9: nothing closed, no clean-shutdown marker; the next start recovers from the files
        reopened = _manager(data)
        plog2 = reopened.get_log("t", 0)
        names = os.listdir(plog2.directory)
        assert not [n for n in names if n.endswith((".cleaned", ".swap", ".deleted"))], names
        rows = _records(plog2)
        offsets = [o for o, _, _ in rows]
        assert offsets == sorted(set(offsets))  # no record twice
        assert {k: (o, v) for k, (o, v) in _latest(rows).items()} == expected  # every latest value
        assert {(o, k, v) for o, k, v in rows} <= set(written)
        reopened.cleaner.clean_now(plog2)
        assert _records(plog2) == sorted((o, k, v) for k, (o, v) in expected.items())
        reopened.close()


def test_recovery_completes_a_swap_whose_old_segments_were_not_yet_renamed(tmp_path):
    manager = _manager(tmp_path)
    plog = _topic(manager, segment_bytes=600)
    written = _fill(plog)
    plog.roll()

    def crash(name):
        if name == "swap_renamed":
            raise Crash(name)

    manager.cleaner.crash_hook = crash
    with pytest.raises(Crash):
        manager.cleaner.clean_now(plog)
    assert [n for n in os.listdir(plog.directory) if n.endswith(".swap")]
    reopened = PartitionLog.open(plog.directory, "t", 0, plog.topic_id, plog.config)
    rows = _records(reopened)  # the swap was completed: segment 0's records (all superseded) are gone
    assert rows[0][0] == 7 and len(rows) == len(written) - 7
    assert _latest(_records(reopened)) == _latest(written)
    reopened.close()


# ---- the worker (clean_once) and the key walk -------------------------------------------------------


def _compacted(tmp_path, worker="process"):
    manager = _manager(tmp_path)
    plog = _topic(manager, segment_bytes=600)
    manager.cleaner.worker_kind = worker  # made with the first compacted topic
    written = _fill(plog)
    plog.roll()
    return manager, plog, written


def _alive(pid: int) -> bool:
    """The process exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_clean_once_runs_the_jobs_in_a_worker_process_and_swaps_on_the_loop(tmp_path):
    import threading

    manager, plog, written = _compacted(tmp_path)
    cleaner = manager.cleaner
    swaps, swap = set(), cleaner._swap

    def on_swap(*args):
        swaps.add(threading.get_ident())
        return swap(*args)

    cleaner._swap = on_swap

    async def main():
        assert await cleaner.clean_once()
        worker = cleaner._worker
        assert isinstance(worker, cleaner_module.WorkerProcess) and worker.pid != os.getpid()
        assert _alive(worker.pid) and cleaner.worker_start_seconds > 0
        assert await cleaner._in_worker(cleaner_module._Job("pid", ())) == worker.pid
        await cleaner.aclose()
        assert cleaner._worker is None and not _alive(worker.pid)

    asyncio_run(main())
    assert swaps == {threading.get_ident()}
    assert _records(plog) == sorted((o, k, v) for k, (o, v) in _latest(written).items())
    assert not [n for n in os.listdir(plog.directory) if n.endswith((".cleaned", ".swap"))]
    manager.close()


def test_an_idle_worker_process_is_stopped_and_a_dead_one_replaced(tmp_path):
    manager, plog, written = _compacted(tmp_path)
    cleaner = manager.cleaner

    async def main():
        assert await cleaner.clean_once()
        first = cleaner._worker
        cleaner.worker_idle_seconds = 0
        cleaner._stop_idle_worker()
        assert cleaner._worker is None and not _alive(first.pid)
        second = cleaner._get_worker()
        second.proc.kill()  # as the OOM killer would
        second.proc.wait()
        third = await cleaner._in_worker(cleaner_module._Job("pid", ()))  # another worker answers
        assert third not in (first.pid, second.pid) and _alive(third)
        await cleaner.aclose()

    asyncio_run(main())
    manager.close()


def test_the_worker_process_exits_when_the_broker_is_killed(tmp_path):
    """A broker killed with -9 in the middle of a pass (the worker paced to a crawl by
    log.cleaner.io.max.bytes.per.second) leaves no worker running."""
    import subprocess
    import sys
    import time

    script = f"""
import asyncio, sys
sys.path[:0] = {sys.path!r}
import test_cleaner as t
manager, plog, _ = t._compacted(__import__("pathlib").Path({str(tmp_path)!r}))
manager.cleaner.settings = manager.cleaner.settings._replace(io_max_bytes_per_second=10.0)
async def main():
    task = asyncio.ensure_future(manager.cleaner.clean_once())
    while manager.cleaner._worker is None:
        await asyncio.sleep(0.01)
    print(manager.cleaner._worker.pid, flush=True)
    await task
asyncio.run(main())
"""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([os.path.dirname(__file__), *sys.path])}
    broker = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, env=env)
    try:
        worker_pid = int(broker.stdout.readline())
        assert _alive(worker_pid)
        broker.kill()
        broker.wait()
        deadline = time.monotonic() + 10
        while _alive(worker_pid) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert not _alive(worker_pid)
    finally:
        broker.kill()
        broker.wait()
        broker.stdout.close()
    # the next start removes what the worker left
    reopened = _manager(tmp_path)
    names = os.listdir(reopened.get_log("t", 0).directory)
    assert not [n for n in names if n.endswith((".cleaned", ".swap", ".deleted"))], names
    reopened.close()


def _pause_first_group(after=False):
    """Hold the (thread) worker before (``after``: once it wrote) the first group's cleaned segment,
    until ``proceed``."""
    import threading

    reached, proceed = threading.Event(), threading.Event()
    clean_group = cleaner_module._JOBS["clean_group"]

    def job(*args):
        if reached.is_set():
            return clean_group(*args)
        out = clean_group(*args) if after else None
        reached.set()
        proceed.wait(10)
        return out if after else clean_group(*args)

    return reached, proceed, job


@pytest.fixture
def paused_jobs(monkeypatch):
    def pause(after=False):
        reached, proceed, job = _pause_first_group(after)
        monkeypatch.setitem(cleaner_module._JOBS, "clean_group", job)
        return reached, proceed

    return pause


async def _until(event):
    import asyncio

    for _ in range(5000):
        if event.is_set():
            return
        await asyncio.sleep(0.001)
    raise AssertionError("the worker never got there")


@pytest.mark.parametrize("after", [False, True], ids=["while-reading", "before-the-swap"])
def test_a_pass_whose_segments_go_meanwhile_is_abandoned_and_its_cleaned_files_removed(tmp_path, after,
                                                                                      paused_jobs):
    manager, plog, written = _compacted(tmp_path, worker="thread")
    cleaner = manager.cleaner
    before = _records(plog)
    second = plog.segments[1].base_offset
    reached, proceed = paused_jobs(after)

    async def main():
        import asyncio

        task = asyncio.create_task(cleaner.clean_once())
        await _until(reached)
        assert bool([n for n in os.listdir(plog.directory) if n.endswith(".cleaned")]) == after
        plog.delete_records_before(second)  # on the loop, while the worker cleans: segment 0 goes
        proceed.set()
        assert await task
        await cleaner.aclose()

    asyncio_run(main())
    assert cleaner.stats.aborted_swaps == 1
    assert _records(plog) == [r for r in before if r[0] >= second]  # nothing swapped in
    assert cleaner.first_dirty_offset(plog) == -1  # no checkpoint: the next pass starts over
    assert not [n for n in os.listdir(plog.directory) if n.endswith((".cleaned", ".swap"))]
    manager.close()


def test_closing_the_cleaner_kills_the_worker_and_removes_its_cleaned_files(tmp_path):
    manager, plog, written = _compacted(tmp_path)
    cleaner = manager.cleaner
    before = _records(plog)
    # paced to a crawl: the first group's job is still writing its .cleaned segment when closed
    cleaner.settings = cleaner.settings._replace(io_max_bytes_per_second=2000.0)

    async def main():
        import asyncio

        task = cleaner.start()  # its first pass takes the log
        for _ in range(5000):
            if [n for n in os.listdir(plog.directory) if n.endswith(".cleaned")]:
                break
            await asyncio.sleep(0.002)
        else:
            raise AssertionError("no .cleaned file seen")
        worker = cleaner._worker
        await cleaner.aclose()
        assert task.cancelled() and not _alive(worker.pid)

    asyncio_run(main())
    assert cleaner._worker is None
    assert _records(plog) == before
    assert not [n for n in os.listdir(plog.directory) if n.endswith((".cleaned", ".swap"))]
    manager.close()


def test_the_worker_reads_only_the_file_the_loop_gave_it(tmp_path):
    from minibroker.storage.cleaner import _segment_ref, _SegmentReader, _SwapAbandoned

    manager, plog, _ = _compacted(tmp_path)
    ref = _segment_ref(plog.segments[0]).file
    with _SegmentReader(ref) as f:
        assert os.pread(f.fileno(), 8, 0) == bytes(8)  # base offset 0
    os.rename(ref.path, ref.path + ".moved")  # another file now at that path
    with open(ref.path, "wb") as f:
        f.write(b"\0" * ref.size)
    with pytest.raises(_SwapAbandoned):
        _SegmentReader(ref)
    os.unlink(ref.path)
    with pytest.raises(_SwapAbandoned):
        _SegmentReader(ref)
    os.rename(ref.path + ".moved", ref.path)
    manager.close()


def test_the_swaps_file_work_runs_off_the_loop_and_the_list_changes_on_it(tmp_path, monkeypatch):
    """Renames, fsyncs, opens and unlinks of a pass (its swaps, the checkpoint, the removal of
    ``.deleted`` files after ``file.delete.delay.ms``) can each block on a busy disk: none runs on the
    loop's thread; the change of the log's segment list does."""
    import asyncio
    import threading

    manager = _manager(tmp_path)
    plog = _topic(manager, segment_bytes=600, file_delete_delay_ms=1)
    manager.cleaner.worker_kind = "thread"  # made with the first compacted topic
    written = _fill(plog)
    plog.roll()
    cleaner = manager.cleaner
    calls: list[tuple[str, int]] = []
    recording = threading.Event()

    def spy(name, fn):
        def call(*args, **kwargs):
            if recording.is_set():
                calls.append((name, threading.get_ident()))
            return fn(*args, **kwargs)
        return call

    for name in ("fsync", "rename", "replace", "unlink", "open"):
        monkeypatch.setattr(os, name, spy(name, getattr(os, name)))
    replace_segments = plog.replace_segments
    monkeypatch.setattr(plog, "replace_segments", spy("replace_segments", replace_segments))

    async def main():
        loop_thread = threading.get_ident()
        recording.set()
        cleaner.start()
        for _ in range(5000):  # until the pass checkpointed and its .deleted files are gone
            if cleaner.first_dirty_offset(plog) > 0 and not [
                    n for n in os.listdir(plog.directory) if n.endswith(".deleted")]:
                break
            await asyncio.sleep(0.002)
        else:
            raise AssertionError("the cleaner did not finish")
        await cleaner.aclose()
        recording.clear()
        return loop_thread

    loop_thread = asyncio_run(main())
    on_loop = {name for name, thread in calls if thread == loop_thread}
    assert on_loop == {"replace_segments"}, calls
    assert {name for name, _ in calls} >= {"fsync", "rename", "replace", "unlink", "open", "replace_segments"}
    assert _records(plog) == sorted((o, k, v) for k, (o, v) in _latest(written).items())
    manager.close()


def test_reads_during_a_swap_see_the_old_segments_until_the_list_changes(tmp_path):
    """The swap held in its thread with the old segments' files renamed to ``.deleted`` and the new
    ones not yet in place: reads on the loop (the records, the aborted transactions) see the old
    segments whole, truncation is refused and retention waits; after the swap the log reads
    cleaned."""
    import asyncio
    import threading

    manager = _manager(tmp_path)
    plog = _topic(manager, index_interval_bytes=0)  # every entry but the first indexed: lookups map
    txn = {"producer_id": 7, "producer_epoch": 0, "is_transactional": True}
    _put(plog, [(b"a", b"aborted")], base_sequence=0, **txn)  # 0
    _append(plog, build_end_txn_marker(commit=False, producer_id=7, producer_epoch=0, coordinator_epoch=0,
                                       timestamp=NOW, base_offset=1))  # 1
    plog.add_aborted_txn(AbortedTxn(7, 0, 1, 2))
    for i in range(3):
        _put(plog, [(b"b", b"%d" % i)])  # 2, 3, 4
    plog.roll()
    cleaner = manager.cleaner
    cleaner.worker_kind = "thread"
    old_segments = plog.segments
    before = plog.read_bytes(0, 1 << 20)
    each = [plog.read_bytes(offset, 1 << 20) for offset in range(5)]
    plog.release_idle_descriptors()
    plog.release_idle_descriptors()  # idle since the last sweep: the index maps went
    assert not old_segments[0].index.mapped
    reached, proceed = threading.Event(), threading.Event()

    def hold(step):
        if step == "old_deleted":
            reached.set()
            proceed.wait(10)

    cleaner.crash_hook = hold

    async def main():
        task = asyncio.create_task(cleaner.clean_once())
        await _until(reached)
        names = os.listdir(plog.directory)
        assert f"{0:020d}.log.deleted" in names and f"{0:020d}.log" not in names  # files half-moved
        assert plog.segments == old_segments and plog.swap_in_progress
        assert plog.read_bytes(0, 1 << 20) == before
        plog.release_idle_descriptors()
        plog.release_idle_descriptors()  # a sweep meanwhile lets go of nothing the old segments need
        # index lookups of the old segments (their files renamed or replaced by now)
        assert [plog.read_bytes(offset, 1 << 20) for offset in range(5)] == each
        assert plog.collect_aborted_transactions(0, 5) == [AbortedTxn(7, 0, 1, 2)]
        assert plog.apply_retention() == 0
        with pytest.raises(RuntimeError):
            plog.truncate_to(3)
        proceed.set()
        assert await task
        await cleaner.aclose()

    asyncio_run(main())
    assert not plog.swap_in_progress and plog.segments[0] is not old_segments[0]
    assert [o for o, _, _ in _records(plog)] == [1, 4]  # the abort marker and b's latest
    assert plog.collect_aborted_transactions(0, 5) == [AbortedTxn(7, 0, 1, 2)]  # the marker's entry
    manager.close()


def test_closing_the_cleaner_during_a_swaps_file_steps_waits_for_them_and_completes_the_swap(tmp_path):
    """aclose while a swap's files move in the executor: the close waits for that step, the log's
    list then takes the new segment (the list and the files agree), and the pass ends there."""
    import asyncio
    import threading

    manager, plog, written = _compacted(tmp_path, worker="thread")
    cleaner = manager.cleaner
    first = plog.segments[0]
    reached, proceed, finishing = threading.Event(), threading.Event(), threading.Event()

    def hold(step):
        if step == "old_deleted" and not reached.is_set():
            reached.set()
            proceed.wait(10)

    cleaner.crash_hook = hold
    finish = cleaner._finish_blocking_step

    async def on_finish(work, done):
        finishing.set()
        await finish(work, done)

    cleaner._finish_blocking_step = on_finish

    async def main():
        task = cleaner.start()
        await _until(reached)
        closing = asyncio.create_task(cleaner.aclose())
        await _until(finishing)  # cancelled while the step still runs
        assert not closing.done()
        proceed.set()
        await closing
        assert task.cancelled()

    asyncio_run(main())
    assert not plog.swap_in_progress
    names = os.listdir(plog.directory)
    assert not [n for n in names if n.endswith((".cleaned", ".swap"))], names
    for seg in plog.segments:  # each segment of the list is the file at its name
        st, held = os.stat(seg.log_path), os.fstat(seg.file.fileno())
        assert (st.st_dev, st.st_ino) == (held.st_dev, held.st_ino)
    assert plog.segments[0] is not first  # the first swap's segment
    assert _latest(_records(plog)) == _latest(written)
    manager.close()


@pytest.mark.parametrize("codec", [0, 1, 2, 3, 4])
def test_the_key_walk_gives_what_the_full_decode_gives(codec):
    import random

    rnd = random.Random(codec)
    for _ in range(40):
        rows = []
        for i in range(rnd.randint(1, 30)):
            key = None if rnd.random() < 0.2 else os.urandom(rnd.choice([0, 1, 5, 100, 300]))
            value = None if rnd.random() < 0.2 else b"x" * rnd.choice([0, 3, 200, 5000, 70000])
            headers = tuple((f"h{j}", b"v" * rnd.choice([0, 10, 300])) for j in range(rnd.choice([0, 2])))
            rows.append((500 + i, NOW + rnd.randrange(-10**6, 10**9), key, value, headers))
        data = v2.build_batch(rows, base_offset=500, compression=codec)
        h = v2.BatchHeader(data, 0)
        buf, start, end = v2.records_section(h)
        spans = v2.record_keys(buf, start, end, h.record_count)
        decoded = v2.batch_records(data, 0)
        assert [(500 + d, None if ks < 0 else bytes(buf[ks:ke]), None if vs < 0 else bytes(buf[vs:ve]))
                for d, ks, ke, vs, ve in spans] == [(r.offset, r.key, r.value) for r in decoded]
        assert v2.record_keys(buf, start, end - 1, h.record_count) is None  # cut short: decode instead
        assert v2.record_keys(buf, start, end, h.record_count + 1) is None


def asyncio_run(coro):
    import asyncio

    return asyncio.run(coro)


# ---- a full disk, and every cleaner path at DEBUG ----------------------------------------------------


class _FormattingHandler(logging.Handler):
    """Formats every record at DEBUG (as tests/test_logging_calls.py's StrictHandler) and keeps them;
    a record that does not format is a failure."""

    def __init__(self):
        super().__init__(logging.DEBUG)
        self.messages: list[str] = []
        self.failures: list[str] = []

    def emit(self, record):
        try:
            self.messages.append(self.format(record))
        except Exception as exc:
            self.failures.append(f"{record.pathname}:{record.lineno}: {exc!r}")


@pytest.fixture
def debug_log():
    logger = logging.getLogger("minibroker")
    handler, level = _FormattingHandler(), logger.level
    logger.setLevel(logging.DEBUG)
    logger.addHandler(handler)
    try:
        yield handler
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
    assert not handler.failures, handler.failures


def test_a_full_disk_fails_the_pass_keeps_the_log_and_the_cleaner_retries(tmp_path, monkeypatch, debug_log):
    """ENOSPC while writing a .cleaned segment (injected at pwrite, as tests/storage/test_storage_errors.py
    does): the pass fails and says so, its .cleaned files go, the log is as it was and readable, the
    dir stays online, and the cleaner task (at DEBUG: every cleaner line formatted) cleans once the
    disk has room again."""
    import asyncio
    import errno

    from minibroker.storage import segment as segment_module

    manager, plog, written = _compacted(tmp_path, worker="thread")  # the injection is in this process
    cleaner = manager.cleaner
    before = _records(plog)
    calls = []

    def full(fd, data, position):
        calls.append(position)
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(segment_module.os, "pwrite", full)

    async def main():
        with pytest.raises(OSError, match="No space left"):
            await cleaner.clean_once()
        assert calls and not [n for n in os.listdir(plog.directory) if n.endswith((".cleaned", ".swap"))]
        assert _records(plog) == before and plog.read(0, 1 << 20).region is not None
        assert not manager.offline_dirs and cleaner.first_dirty_offset(plog) == -1
        task = cleaner.start()  # backs off 10 ms after each failed pass, and tries again
        for _ in range(5000):
            if sum("log cleaner pass failed" in m for m in debug_log.messages) >= 2:
                break
            await asyncio.sleep(0.002)
        else:
            raise AssertionError("the cleaner did not retry")
        monkeypatch.undo()  # room again
        for _ in range(5000):
            if cleaner.first_dirty_offset(plog) > 0:
                break
            await asyncio.sleep(0.002)
        else:
            raise AssertionError("the cleaner did not clean once the disk had room")
        assert not task.done()
        await cleaner.aclose()

    asyncio_run(main())
    assert _records(plog) == sorted((o, k, v) for k, (o, v) in _latest(written).items())
    assert not [n for n in os.listdir(plog.directory) if n.endswith((".cleaned", ".swap"))]
    assert any("merging those that fit" in m for m in debug_log.messages)
    assert any("log cleaner worker thread" in m for m in debug_log.messages)
    manager.close()


def test_an_io_error_in_the_middle_of_a_swap_takes_the_dir_offline_and_a_restart_recovers(tmp_path,
                                                                                          monkeypatch):
    """EIO on the third rename of a swap (some files moved, the segment list still the old one): the dir
    goes offline as Kafka's LogDirFailureChannel does (appends answer KAFKA_STORAGE_ERROR), reads go on
    from the open descriptors, and the next start completes or rolls back the swap: every key's latest
    value is there, at its offset, once."""
    import errno

    from minibroker.errors import ErrorCode, KafkaError
    from minibroker.storage import cleaner as cleaner_module

    manager, plog, written = _compacted(tmp_path, worker="thread")
    before = _records(plog)
    renames = []
    real_rename = os.rename

    def failing_rename(src, dst):
        renames.append(src)
        if len(renames) == 3:
            raise OSError(errno.EIO, "Input/output error")
        real_rename(src, dst)

    monkeypatch.setattr(cleaner_module.os, "rename", failing_rename)

    async def main():
        with pytest.raises(OSError, match="Input/output error"):
            await manager.cleaner.clean_once()

    asyncio_run(main())
    monkeypatch.undo()
    assert len(renames) == 3 and manager.offline_dirs
    with pytest.raises(KafkaError) as refused:
        _put(plog, [(b"k-new", b"more")])
    assert refused.value.code == ErrorCode.KAFKA_STORAGE_ERROR
    assert _records(plog) == before  # still read through the segments the log had
    manager.close()

    reopened = _manager(tmp_path)
    try:
        rows = _records(reopened.get_log("t", 0))
        assert len({offset for offset, _, _ in rows}) == len(rows)
        assert _latest(rows) == _latest(written)
    finally:
        reopened.close()
