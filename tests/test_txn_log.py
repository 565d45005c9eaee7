"""Issue 17, the log side of transactions: transactional batches open a transaction in the partition's
producer state, end markers (``ReplicaManager.write_txn_marker``, what the transaction coordinator
calls) close it, aborts go to the segment's ``.txnindex``; the last stable offset bounds
READ_COMMITTED fetches and ListOffsets, and real clients drop aborted records. Restarts (clean and
kill -9) keep open transactions open and rebuild the txn index recovery emptied."""

from __future__ import annotations

import asyncio
import os
import struct
import threading
import time

import pytest

from minibroker.errors import ErrorCode, KafkaError
from minibroker.records import build_records, v2
from minibroker.records.framing import scan_entries
from minibroker.storage.producer_state import ProducerStateTable, snapshot_files
from minibroker.tools.wire import WireClient

TOPIC = "txns"
TS = int(time.time() * 1000)  # markers carry the time of now: older records would roll a segment
TXN_ENTRY = struct.Struct(">hqqqq")


# -- helpers ----------------------------------------------------------------------------------------


def on_loop(runner, fn, *args, **kwargs):
    """Call ``fn`` on the broker's event loop (thread mode), where the replica manager lives."""

    async def call():
        return fn(*args, **kwargs)

    return asyncio.run_coroutine_threadsafe(call(), runner._loop).result(20)


def marker(runner, pid, *, commit, epoch=0, coordinator_epoch=0, topic=TOPIC, partition=0):
    return on_loop(runner, runner.broker.replicas.write_txn_marker, topic, partition, pid, epoch,
                   coordinator_epoch, commit)


def init_pid(runner) -> int:
    with WireClient("127.0.0.1", runner.port) as c:
        return c.request(22, 4, {"transactional_id": None, "transaction_timeout_ms": 60000}).producer_id


class Producer:
    """One producer id writing v2 batches over the wire, its sequence kept here."""

    def __init__(self, runner, pid=None, epoch=0):
        self.runner = runner
        self.pid = init_pid(runner) if pid is None else pid
        self.epoch = epoch
        self.seq = 0

    def send(self, *values: bytes, transactional=True, topic=TOPIC) -> tuple[int, int]:
        """(error code, base offset)."""
        rows = [(i, TS, None, v) for i, v in enumerate(values)]
        records = build_records(2, rows, producer_id=self.pid, producer_epoch=self.epoch,
                                base_sequence=self.seq, is_transactional=transactional)
        code, offset = produce(self.runner, records, topic)
        if code == 0:
            self.seq += len(values)
        return code, offset


def produce(runner, records: bytes, topic=TOPIC) -> tuple[int, int]:
    with WireClient("127.0.0.1", runner.port) as c:
        body = {"transactional_id": None, "acks": -1, "timeout_ms": 5000,
                "topic_data": [{"name": topic, "partition_data": [{"index": 0, "records": records}]}]}
        r = c.request(0, 9, body).responses[0].partition_responses[0]
        return r.error_code, r.base_offset


def plain(runner, *values: bytes, topic=TOPIC) -> int:
    code, offset = produce(runner, build_records(2, [(i, TS, None, v) for i, v in enumerate(values)]), topic)
    assert code == 0
    return offset


def fetch(runner, offset, *, committed, version=11, max_wait_ms=0, min_bytes=0, topic=TOPIC):
    body = {
        "replica_id": -1, "max_wait_ms": max_wait_ms, "min_bytes": min_bytes, "max_bytes": 1 << 20,
        "isolation_level": 1 if committed else 0, "session_id": 0, "session_epoch": -1,
        "topics": [{"topic": topic, "partitions": [
            {"partition": 0, "fetch_offset": offset, "partition_max_bytes": 1 << 20}]}],
        "forgotten_topics_data": [], "rack_id": "",
    }
    with WireClient("127.0.0.1", runner.port, timeout=15) as c:
        return c.request(1, version, body).responses[0].partitions[0]


def batches(records) -> list[tuple[int, int, bool, bool, list[bytes | None]]]:
    """(base offset, last offset, transactional, control, values) of each v2 batch."""
    data = bytes(records or b"")
    out = []
    for entry in scan_entries(data):
        attrs = struct.unpack_from(">h", data, entry.position + 21)[0]
        values = [r.value for r in v2.batch_records(data, entry.position)]
        out.append((entry.base_offset, entry.last_offset, bool(attrs & 0x10), bool(attrs & 0x20), values))
    return out


def list_latest(runner, *, committed, version=7, topic=TOPIC) -> int:
    body = {"replica_id": -1, "isolation_level": 1 if committed else 0, "timeout_ms": 1000,
            "topics": [{"name": topic, "partitions": [
                {"partition_index": 0, "current_leader_epoch": -1, "timestamp": -1, "max_num_offsets": 1}]}]}
    with WireClient("127.0.0.1", runner.port) as c:
        p = c.request(2, version, body).topics[0].partitions[0]
    assert p.error_code == 0
    return p.offset


def txn_index_entries(path) -> list[tuple]:
    with open(path, "rb") as f:
        data = f.read()
    assert len(data) % TXN_ENTRY.size == 0
    return [TXN_ENTRY.unpack_from(data, i) for i in range(0, len(data), TXN_ENTRY.size)]


def partition_dir(runner, topic=TOPIC, partition=0) -> str:
    return os.path.join(runner.data_dir, f"{topic}-{partition}")


def aborted_of(p) -> list[tuple[int, int]]:
    return [(t.producer_id, t.first_offset) for t in p.aborted_transactions]


@pytest.fixture
def broker(minibroker_factory):
    runner = minibroker_factory(mode="thread")
    runner.create_topic(TOPIC)
    return runner


# -- the last stable offset, READ_COMMITTED fetches, the txn index --------------------------------------


def test_read_committed_stops_at_the_lso_and_reports_aborted_transactions(broker):
    a, b = Producer(broker), Producer(broker)
    assert plain(broker, b"p0") == 0
    assert a.send(b"a1", b"a2") == (0, 1)  # a's transaction opens at 1
    assert plain(broker, b"p3") == 3
    replicas = broker.broker.replicas
    assert on_loop(broker, replicas.last_stable_offset, TOPIC, 0) == 1
    assert on_loop(broker, lambda: replicas.producer_state(TOPIC, 0).ongoing_transactions()) == {a.pid: 1}

    p = fetch(broker, 0, committed=True)
    assert [bt[0] for bt in batches(p.records)] == [0]  # nothing at or past the LSO
    assert (p.high_watermark, p.last_stable_offset, aborted_of(p)) == (4, 1, [])
    p = fetch(broker, 1, committed=True)
    assert (batches(p.records), p.last_stable_offset, aborted_of(p)) == ([], 1, [])
    p = fetch(broker, 0, committed=False)
    assert [bt[0] for bt in batches(p.records)] == [0, 1, 3]
    assert (p.last_stable_offset, p.aborted_transactions) == (1, None)
    assert list_latest(broker, committed=True) == 1
    assert list_latest(broker, committed=False) == 4

    assert b.send(b"b1") == (0, 4)
    assert marker(broker, a.pid, commit=False) == 5  # a aborts; b's transaction (4) still holds the LSO
    assert on_loop(broker, replicas.last_stable_offset, TOPIC, 0) == 4
    index = os.path.join(partition_dir(broker), f"{0:020d}.txnindex")
    assert txn_index_entries(index) == [(0, a.pid, 1, 5, 4)]  # the LSO once a's abort was written
    assert marker(broker, b.pid, commit=True) == 6
    assert on_loop(broker, replicas.last_stable_offset, TOPIC, 0) == 7
    assert txn_index_entries(index) == [(0, a.pid, 1, 5, 4)]  # commits are not indexed

    p = fetch(broker, 0, committed=True)
    got = batches(p.records)
    assert [(bt[0], bt[2], bt[3]) for bt in got] == [
        (0, False, False), (1, True, False), (3, False, False), (4, True, False), (5, True, True),
        (6, True, True)]
    assert (p.last_stable_offset, aborted_of(p)) == (7, [(a.pid, 1)])
    assert aborted_of(fetch(broker, 5, committed=True)) == [(a.pid, 1)]
    assert aborted_of(fetch(broker, 6, committed=True)) == []  # the abort's marker is before 6
    assert list_latest(broker, committed=True) == 7

    with WireClient("127.0.0.1", broker.port) as c:
        described = c.request(61, 0, {"topics": [{"name": TOPIC, "partition_indexes": [0]}]})
    producers = {p.producer_id: p for p in described.topics[0].partitions[0].active_producers}
    assert (producers[a.pid].coordinator_epoch, producers[a.pid].current_txn_start_offset) == (0, -1)


def test_fetch_v0_to_v3_down_converts_without_the_markers(broker):
    a = Producer(broker)
    a.send(b"a1")
    marker(broker, a.pid, commit=True)
    plain(broker, b"p2")
    from minibroker.records import iter_records

    for version in (1, 3):
        p = fetch(broker, 0, committed=False, version=version)
        assert [r.value for r in iter_records(bytes(p.records))] == [b"a1", b"p2"]


def test_describe_producers_shows_the_open_transaction(broker):
    a = Producer(broker)
    plain(broker, b"p0")
    a.send(b"a1")
    with WireClient("127.0.0.1", broker.port) as c:
        described = c.request(61, 0, {"topics": [{"name": TOPIC, "partition_indexes": [0]}]})
    (p,) = described.topics[0].partitions[0].active_producers
    assert (p.producer_id, p.last_sequence, p.current_txn_start_offset) == (a.pid, 0, 1)
    assert p.coordinator_epoch == -1


def test_marker_checks_epochs_and_a_marker_without_a_transaction_aborts_nothing(broker):
    a = Producer(broker, epoch=3)
    assert a.send(b"a1") == (0, 0)
    with pytest.raises(KafkaError) as e:
        marker(broker, a.pid, commit=False, epoch=2)
    assert e.value.code == ErrorCode.INVALID_PRODUCER_EPOCH
    assert marker(broker, a.pid, commit=False, epoch=3, coordinator_epoch=5) == 1
    with pytest.raises(KafkaError) as e:
        marker(broker, a.pid, commit=True, epoch=3, coordinator_epoch=4)
    assert e.value.code == ErrorCode.TRANSACTION_COORDINATOR_FENCED
    # no transaction open: written all the same (Kafka writes it), nothing indexed
    assert marker(broker, a.pid, commit=False, epoch=3, coordinator_epoch=5) == 2
    stranger = 10_000
    assert marker(broker, stranger, commit=False) == 3
    index = os.path.join(partition_dir(broker), f"{0:020d}.txnindex")
    assert txn_index_entries(index) == [(0, a.pid, 0, 1, 2)]
    assert on_loop(broker, broker.broker.replicas.last_stable_offset, TOPIC, 0) == 4


def test_non_transactional_batch_inside_a_transaction_is_invalid_txn_state(broker):
    a = Producer(broker)
    assert a.send(b"a1") == (0, 0)
    assert a.send(b"a2", transactional=False)[0] == ErrorCode.INVALID_TXN_STATE
    assert a.send(b"a2") == (0, 1)  # the same sequence, transactional: appended
    marker(broker, a.pid, commit=True)
    assert a.send(b"a3", transactional=False) == (0, 3)


def test_internal_appends_skip_the_sequence_checks_but_not_the_epoch(broker):
    """Kafka's ProducerAppendInfo checks sequences for AppendOrigin.CLIENT only; a coordinator append
    (a TxnOffsetCommit batch) has its epoch and transaction state checked and is recorded all the same."""
    a = Producer(broker, epoch=2)
    assert a.send(b"a1") == (0, 0)  # sequence 0

    def batch(seq, epoch=2, transactional=True):
        return build_records(2, [(0, TS, None, b"x"), (1, TS, None, b"y")], producer_id=a.pid,
                             producer_epoch=epoch, base_sequence=seq, is_transactional=transactional)

    def internal(records):
        return on_loop(broker, broker.broker.replicas.append_records, TOPIC, 0, bytearray(records), 9,
                       from_client=False).base_offset

    assert produce(broker, batch(5)) == (ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER, -1)
    assert internal(batch(5)) == 1  # the same batch, out of order: appended
    assert internal(batch(5)) == 3  # again: not a duplicate either
    assert internal(batch(-1)) == 5  # no sequence at all, as Kafka's coordinators may write
    table = on_loop(broker, broker.broker.replicas.producer_state, TOPIC, 0)
    assert table.producers[a.pid].batches[-1][2:4] == (5, 6)  # recorded: first and last offset
    assert table.ongoing_transactions() == {a.pid: 0}
    assert produce(broker, batch(0)) == (0, 7)  # a client goes on from the recorded sequence (-1)
    with pytest.raises(KafkaError) as e:  # the epoch is still checked
        internal(batch(9, epoch=1))
    assert e.value.code == ErrorCode.INVALID_PRODUCER_EPOCH
    with pytest.raises(KafkaError) as e:  # and the transaction state
        internal(batch(9, transactional=False))
    assert e.value.code == ErrorCode.INVALID_TXN_STATE
    marker(broker, a.pid, commit=True, epoch=2)
    assert internal(batch(7, epoch=3)) == 10  # a new epoch needs no sequence 0 either
    assert produce(broker, batch(7, epoch=4)) == (ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER, -1)
    assert produce(broker, batch(0, epoch=4)) == (0, 12)
    assert [b[:2] for b in batches(fetch(broker, 0, committed=False).records)] == [
        (0, 0), (1, 2), (3, 4), (5, 6), (7, 8), (9, 9), (10, 11), (12, 13)]


def test_a_read_committed_long_poll_wakes_when_a_marker_moves_the_lso(broker):
    a = Producer(broker)
    a.send(b"a1")
    result = {}

    def poll():
        t0 = time.monotonic()
        result["p"] = fetch(broker, 0, committed=True, max_wait_ms=10_000, min_bytes=1)
        result["waited"] = time.monotonic() - t0

    thread = threading.Thread(target=poll)
    thread.start()
    time.sleep(0.5)
    assert "p" not in result  # the open transaction's record is past the LSO
    marker(broker, a.pid, commit=True)
    thread.join(15)
    assert result["waited"] < 5
    # the marker's value: version 0, coordinator epoch 0
    assert [bt[4] for bt in batches(result["p"].records)] == [[b"a1"], [b"\x00" * 6]]
    assert result["p"].last_stable_offset == 2


# -- real clients -------------------------------------------------------------------------------------


def _write_mixed_log(broker) -> list[bytes]:
    """A committed, an aborted and an open transaction between plain records; returns the values a
    READ_COMMITTED reader may see now (the open transaction holds the LSO at 7)."""
    a, b, c = Producer(broker), Producer(broker), Producer(broker)
    plain(broker, b"p0")                                  # 0
    a.send(b"a-commit-1", b"a-commit-2")                  # 1-2
    b.send(b"b-abort")                                    # 3
    marker(broker, a.pid, commit=True)                    # 4
    marker(broker, b.pid, commit=False)                   # 5
    plain(broker, b"p6")                                  # 6
    c.send(b"c-open")                                     # 7
    plain(broker, b"p8")                                  # 8
    broker.c_pid = c.pid
    return [b"p0", b"a-commit-1", b"a-commit-2", b"p6"]


def test_kafka_python_read_committed_sees_committed_records_only(broker):
    from kafka import KafkaConsumer, TopicPartition

    visible = _write_mixed_log(broker)
    consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap_servers, enable_auto_commit=False,
                             isolation_level="read_committed")
    tp = TopicPartition(TOPIC, 0)
    consumer.assign([tp])
    consumer.seek_to_beginning(tp)

    def read(until: float) -> list[bytes]:
        out = []
        while time.monotonic() < until:
            for records in consumer.poll(timeout_ms=200).values():
                out.extend(r.value for r in records)
        return out

    try:
        assert read(time.monotonic() + 3) == visible
        assert consumer.end_offsets([tp])[tp] == 7  # asked with the consumer's isolation level: the LSO
        marker(broker, broker.c_pid, commit=True)     # 9: the LSO moves to the end
        got = []
        deadline = time.monotonic() + 10
        while len(got) < 2 and time.monotonic() < deadline:
            got += read(time.monotonic() + 0.5)
        assert got == [b"c-open", b"p8"]
    finally:
        consumer.close()

    uncommitted = KafkaConsumer(bootstrap_servers=broker.bootstrap_servers, enable_auto_commit=False)
    uncommitted.assign([tp])
    uncommitted.seek_to_beginning(tp)
    seen = []
    deadline = time.monotonic() + 10
    while len(seen) < 7 and time.monotonic() < deadline:
        for records in uncommitted.poll(timeout_ms=200).values():
            seen.extend(r.value for r in records)
    uncommitted.close()
    assert seen == [b"p0", b"a-commit-1", b"a-commit-2", b"b-abort", b"p6", b"c-open", b"p8"]


@pytest.mark.slow
def test_confluent_kafka_read_committed_sees_committed_records_only(broker):
    confluent_kafka = pytest.importorskip("confluent_kafka")

    visible = _write_mixed_log(broker)
    consumer = confluent_kafka.Consumer({
        "bootstrap.servers": broker.bootstrap_servers, "group.id": "txn-reader",
        "isolation.level": "read_committed", "enable.auto.commit": False, "auto.offset.reset": "earliest",
    })

    def read(seconds: float) -> list[bytes]:
        out = []
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            msg = consumer.poll(0.2)
            if msg is not None and not msg.error():
                out.append(msg.value())
        return out

    try:
        consumer.assign([confluent_kafka.TopicPartition(TOPIC, 0, 0)])
        assert read(4) == visible
        low, high = consumer.get_watermark_offsets(confluent_kafka.TopicPartition(TOPIC, 0), timeout=5)
        assert (low, high) == (0, 7)  # librdkafka's read_committed end is the LSO
        marker(broker, broker.c_pid, commit=True)
        got = []
        deadline = time.monotonic() + 10
        while len(got) < 2 and time.monotonic() < deadline:
            got += read(0.5)
        assert got == [b"c-open", b"p8"]
    finally:
        consumer.close()


# -- restarts -----------------------------------------------------------------------------------------


def test_clean_restart_keeps_an_open_transaction_open(minibroker_factory):
    broker = minibroker_factory(mode="thread")
    broker.create_topic(TOPIC)
    a = Producer(broker)
    plain(broker, b"p0")
    a.send(b"a1", b"a2")                                   # 1-2, open
    broker.restart()
    (offset, path), = snapshot_files(partition_dir(broker))
    assert offset == 3
    assert ProducerStateTable.read_snapshot(path).ongoing_transactions() == {a.pid: 1}
    assert on_loop(broker, broker.broker.replicas.last_stable_offset, TOPIC, 0) == 1
    assert fetch(broker, 0, committed=True).last_stable_offset == 1
    assert a.send(b"a3") == (0, 3)                         # the same transaction goes on
    assert marker(broker, a.pid, commit=False) == 4
    index = os.path.join(partition_dir(broker), f"{0:020d}.txnindex")
    assert txn_index_entries(index) == [(0, a.pid, 1, 4, 5)]
    p = fetch(broker, 0, committed=True)
    assert (p.last_stable_offset, aborted_of(p)) == (5, [(a.pid, 1)])


def test_kill_9_keeps_the_transaction_open_and_rebuilds_a_deleted_txn_index(minibroker_factory, tmp_path):
    data_dir = str(tmp_path / "data")
    first = minibroker_factory(mode="thread", data_dir=data_dir)
    first.create_topic(TOPIC)
    a, b = Producer(first), Producer(first)
    plain(first, b"p0")                                    # 0
    a.send(b"a1")                                          # 1
    marker(first, a.pid, commit=False)                     # 2: aborted, indexed
    b.send(b"b1")                                          # 3: b's transaction opens
    first.stop()                                           # clean: snapshot at 4, b open

    crashing = minibroker_factory(mode="process", data_dir=data_dir)
    c = Producer(crashing)
    assert c.send(b"c1") == (0, 4)                         # c's transaction opens in the process
    plain(crashing, b"p5")
    crashing.kill()
    index = os.path.join(data_dir, f"{TOPIC}-0", f"{0:020d}.txnindex")
    assert txn_index_entries(index) == [(0, a.pid, 1, 2, 3)]
    os.unlink(index)

    broker = minibroker_factory(mode="thread", data_dir=data_dir)  # unclean: the active segment is re-read
    replicas = broker.broker.replicas
    ongoing = on_loop(broker, lambda: replicas.producer_state(TOPIC, 0).ongoing_transactions())
    assert ongoing == {b.pid: 3, c.pid: 4}
    assert txn_index_entries(index) == [(0, a.pid, 1, 2, 3)]  # rebuilt by the replay from the log start
    assert on_loop(broker, replicas.last_stable_offset, TOPIC, 0) == 3
    assert marker(broker, b.pid, commit=False) == 6        # LSO after it: c's first offset
    assert marker(broker, c.pid, commit=True) == 7
    assert txn_index_entries(index) == [(0, a.pid, 1, 2, 3), (0, b.pid, 3, 6, 4)]
    p = fetch(broker, 0, committed=True)
    assert (p.last_stable_offset, aborted_of(p)) == (8, [(a.pid, 1), (b.pid, 3)])
    assert [bt[4] for bt in batches(p.records) if not bt[3]] == [[b"p0"], [b"a1"], [b"b1"], [b"c1"], [b"p5"]]


# -- txn index files follow their segments --------------------------------------------------------------


def test_delete_records_and_retention_remove_txn_indexes_with_their_segments(broker):
    replicas = broker.broker.replicas
    a = Producer(broker)
    a.send(b"a1")                                          # 0
    marker(broker, a.pid, commit=False)                    # 1: indexed in segment 0
    on_loop(broker, lambda: replicas.get_log(TOPIC, 0).roll())
    a.send(b"a2")                                          # 2
    marker(broker, a.pid, commit=False)                    # 3: indexed in segment 2
    on_loop(broker, lambda: replicas.get_log(TOPIC, 0).roll())
    plain(broker, b"p4")                                   # 4
    directory = partition_dir(broker)
    first, second = (os.path.join(directory, f"{base:020d}.txnindex") for base in (0, 2))
    assert txn_index_entries(first) == [(0, a.pid, 0, 1, 2)]
    assert txn_index_entries(second) == [(0, a.pid, 2, 3, 4)]
    assert not os.path.exists(os.path.join(directory, f"{4:020d}.txnindex"))  # created with an entry only

    with WireClient("127.0.0.1", broker.port) as c:
        topics = [{"name": TOPIC, "partitions": [{"partition_index": 0, "offset": 2}]}]
        r = c.request(21, 2, {"topics": topics, "timeout_ms": 5000})
    assert r.topics[0].partitions[0].error_code == 0
    assert not os.path.exists(first) and os.path.exists(second)
    assert aborted_of(fetch(broker, 2, committed=True)) == [(a.pid, 2)]

    on_loop(broker, lambda: replicas.get_log(TOPIC, 0).update_config(
        {**replicas.get_log(TOPIC, 0).config, "retention.bytes": "0"}))
    assert on_loop(broker, lambda: replicas.get_log(TOPIC, 0).apply_retention()) == 1
    assert not os.path.exists(second)
    assert aborted_of(fetch(broker, 4, committed=True)) == []
