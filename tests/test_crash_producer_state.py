"""Issue 31, item 2: producer state kept as Kafka keeps it, across kill -9 of a broker process.

Idempotent producers (at the wire, with their own sequence numbers) and a transactional producer
(confluent-kafka) write a partition whose segments roll every few batches; every roll leaves a
``<base offset>.snapshot`` of the producer state. The broker is killed (SIGKILL) and started again:
the first idempotent append finds each producer where it was (a retry of its last batch is a
duplicate answered with the original offset, the next sequence is appended, a gap is out of order),
and the log line of the load shows that the replay started at the snapshot of a segment near the end
of the log, not at offset 0. Deleting segments (DeleteRecords) takes their snapshots along.
Expiry: with ``producer.id.expiration.ms`` short, an idle producer is forgotten by the periodic
check (DescribeProducers no longer lists it, a retry of its last batch is appended again), while a
producer with an open transaction is kept.
"""

from __future__ import annotations

import os
import re
import time

import pytest

from minibroker.testing import BrokerRunner

pytestmark = pytest.mark.slow

TOPIC = "pstate"
SEGMENT_BYTES = 2048  # a roll every ~10 batches of two ~80-byte records
DUPLICATE, OUT_OF_ORDER = 46, 45
REPLAY_LINE = re.compile(
    rf"{TOPIC}-0: producer state rebuilt from (\d+) batches after offset (\d+) \(([^;]*);")
BROKER = {
    # the recovery point follows the flushed segments quickly, as it would over a long run
    "log.flush.offset.checkpoint.interval.ms": "100",
    "log.retention.check.interval.ms": "100",
}


def snapshots(data_dir: str, partition: int = 0) -> list[int]:
    names = os.listdir(os.path.join(data_dir, f"{TOPIC}-{partition}"))
    return sorted(int(n[:20]) for n in names if n.endswith(".snapshot"))


def segment_bases(data_dir: str, partition: int = 0) -> list[int]:
    names = os.listdir(os.path.join(data_dir, f"{TOPIC}-{partition}"))
    return sorted(int(n[:20]) for n in names if n.endswith(".log"))


def wait_for_recovery_point(data_dir: str, at_least: int, timeout: float = 10.0) -> None:
    """Until the recovery-point checkpoint of partition 0 reaches ``at_least``."""
    path = os.path.join(data_dir, "recovery-point-offset-checkpoint")
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with open(path) as f:
                for line in f.read().splitlines()[2:]:
                    topic, partition, offset = line.split()
                    if (topic, partition) == (TOPIC, "0") and int(offset) >= at_least:
                        return
        except (FileNotFoundError, ValueError):
            pass
        time.sleep(0.05)
    raise AssertionError(f"the recovery point of {TOPIC}-0 did not reach {at_least}")


class WireProducer:
    """An idempotent producer at the wire: InitProducerId, then batches with chosen sequences."""

    def __init__(self, broker: BrokerRunner):
        from minibroker.tools.wire import WireClient

        self.broker = broker
        with WireClient("127.0.0.1", broker.port) as c:
            body = {"transactional_id": None, "transaction_timeout_ms": 1000}
            self.pid = c.request(22, 4, body).producer_id

    def send(self, seq: int, n: int = 2) -> tuple[int, int]:
        """(error code, base offset) of a batch of ``n`` records from sequence ``seq``."""
        from minibroker.records import build_records
        from minibroker.tools.wire import WireClient

        ts = int(time.time() * 1000)
        rows = [(i, ts, None, b"%d-%d-" % (self.pid, seq + i) + b"v" * 60) for i in range(n)]
        records = build_records(2, rows, producer_id=self.pid, producer_epoch=0, base_sequence=seq)
        body = {
            "transactional_id": None,
            "acks": -1,
            "timeout_ms": 5000,
            "topic_data": [{"name": TOPIC, "partition_data": [{"index": 0, "records": records}]}],
        }
        with WireClient("127.0.0.1", self.broker.port) as c:
            r = c.request(0, 9, body).responses[0].partition_responses[0]
        return r.error_code, r.base_offset


def replay_lines(log_text: str) -> list[tuple[int, int, str]]:
    return [(int(m[1]), int(m[2]), m[3]) for m in REPLAY_LINE.finditer(log_text)]


def transactional_producer(broker: BrokerRunner, txn_id: str):
    from confluent_kafka import Producer

    producer = Producer({**broker.client_config("confluent-kafka"), "transactional.id": txn_id,
                         "linger.ms": 0, "log_level": 0})
    producer.init_transactions(15)
    return producer


def read_committed(broker: BrokerRunner, count: int, timeout: float = 10.0) -> list[bytes]:
    """The values of partition 0 a read_committed consumer (confluent-kafka) gets, from the start."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    consumer = Consumer({**broker.client_config("confluent-kafka"), "group.id": "pstate-reader",
                         "isolation.level": "read_committed", "enable.auto.commit": False, "log_level": 0})
    try:
        consumer.assign([TopicPartition(TOPIC, 0, OFFSET_BEGINNING)])
        values: list[bytes] = []
        deadline = time.monotonic() + timeout
        while len(values) < count and time.monotonic() < deadline:
            msg = consumer.poll(0.2)
            if msg is not None and not msg.error():
                values.append(msg.value())
        return values
    finally:
        consumer.close()


def commit_transaction(producer, values: list[bytes]) -> None:
    producer.begin_transaction()
    for v in values:
        producer.produce(TOPIC, v, partition=0)
    producer.commit_transaction(15)


def test_kill_9_restores_producer_state_from_the_snapshot_of_a_late_roll(tmp_path):
    data_dir = str(tmp_path / "data")
    broker = BrokerRunner(BROKER, data_dir=data_dir, mode="process", log_level="INFO")
    try:
        broker.start()
        broker.create_topic(TOPIC, 1, {"segment.bytes": SEGMENT_BYTES})
        a, b = WireProducer(broker), WireProducer(broker)
        txn = transactional_producer(broker, "pstate-txn")
        offsets: dict[tuple[int, int], int] = {}
        seq_a = seq_b = 0
        for round_ in range(12):  # ~60 batches: several rolls, producers interleaved
            for _ in range(3):
                code, offsets[a.pid, seq_a] = a.send(seq_a)
                assert code == 0
                seq_a += 2
            code, offsets[b.pid, seq_b] = b.send(seq_b, 3)
            assert code == 0
            seq_b += 3
            commit_transaction(txn, [b"txn-%d" % round_])
        txn.flush(5)
        bases = segment_bases(data_dir)
        assert len(bases) >= 5, bases
        # a snapshot for every roll, named after the segment it starts
        assert set(bases[1:]) <= set(snapshots(data_dir)), (bases, snapshots(data_dir))
        wait_for_recovery_point(data_dir, bases[-1])  # the upkeep flushed the sealed segments
        broker.kill()
        assert not [o for o in snapshots(data_dir) if o not in bases]  # no close: no snapshot at the end

        broker.start()
        last_a, last_b = seq_a - 2, seq_b - 3
        assert a.send(last_a) == (DUPLICATE, offsets[a.pid, last_a])  # a retry of the last batch
        assert b.send(last_b, 3) == (DUPLICATE, offsets[b.pid, last_b])
        assert a.send(seq_a + 2)[0] == OUT_OF_ORDER  # a gap
        code, _ = a.send(seq_a)
        assert code == 0  # the next sequence
        assert b.send(seq_b, 3)[0] == 0

        loads = replay_lines(broker.log_text())
        assert loads, broker.log_text()[-3000:]
        replayed, start, snapshot = loads[-1]
        # the replay starts at the snapshot of a segment near the end, not at the log start
        assert start in bases and start >= bases[-2], (loads, bases)
        assert snapshot == f"the snapshot at offset {start}"
        assert 0 < replayed < 25, loads  # the last segment or two, not the ~80 batches of the log

        # the transactional id goes on: its state came back too (a new producer fences the old one)
        txn2 = transactional_producer(broker, "pstate-txn")
        commit_transaction(txn2, [b"txn-after"])
        values = read_committed(broker, 200, timeout=5)
        txn_values = [v for v in values if v.startswith(b"txn-")]
        assert txn_values == [b"txn-%d" % i for i in range(12)] + [b"txn-after"]
        assert len(values) == len(set(values))  # nothing written twice
    finally:
        broker.cleanup()


def test_deleted_segments_take_their_snapshots_along(tmp_path):
    from kafka.admin import KafkaAdminClient
    from kafka.structs import TopicPartition

    data_dir = str(tmp_path / "data")
    broker = BrokerRunner(BROKER, data_dir=data_dir, mode="process")
    try:
        broker.start()
        broker.create_topic(TOPIC, 1, {"segment.bytes": SEGMENT_BYTES})
        a = WireProducer(broker)
        for seq in range(0, 120, 2):
            assert a.send(seq)[0] == 0
        bases = segment_bases(data_dir)
        assert len(bases) >= 4 and set(bases[1:]) <= set(snapshots(data_dir))
        cut = bases[3]
        admin = KafkaAdminClient(**broker.client_config())
        try:
            admin.delete_records({TopicPartition(TOPIC, 0): cut})
        finally:
            admin.close()
        deadline = time.monotonic() + 10
        while segment_bases(data_dir)[0] < cut and time.monotonic() < deadline:
            time.sleep(0.1)
        assert segment_bases(data_dir)[0] == cut
        assert min(snapshots(data_dir)) == cut  # those of the deleted segments went with them
        assert a.send(120)[0] == 0  # the producer is still known
    finally:
        broker.cleanup()


def active_producers(broker: BrokerRunner) -> dict[int, int]:
    """DescribeProducers of partition 0: producer id -> first offset of its open transaction (-1)."""
    from minibroker.tools.wire import WireClient

    with WireClient("127.0.0.1", broker.port) as c:
        r = c.request(61, 0, {"topics": [{"name": TOPIC, "partition_indexes": [0]}]})
    partition = r.topics[0].partitions[0]
    assert partition.error_code == 0
    return {p.producer_id: p.current_txn_start_offset for p in partition.active_producers}


def test_idle_producers_expire_and_open_transactions_keep_theirs(tmp_path):
    # idle must outlive no check (its last write opens the window), busy must never wait as long
    # between writes: 3 s against writes every 0.5 s, and the set-up (a librdkafka transactional
    # producer) done before either writes, so a loaded machine's slow start does not expire them
    overrides = dict(BROKER, **{"producer.id.expiration.ms": "3000",
                                "producer.id.expiration.check.interval.ms": "200"})
    broker = BrokerRunner(overrides, data_dir=str(tmp_path / "data"), mode="process")
    try:
        broker.start()
        broker.create_topic(TOPIC, 1)
        txn = transactional_producer(broker, "pstate-open")
        txn.begin_transaction()
        txn.produce(TOPIC, b"open", partition=0)
        txn.flush(5)
        idle, busy = WireProducer(broker), WireProducer(broker)
        assert idle.send(0) == (0, 1) and busy.send(0) == (0, 3)
        known = active_producers(broker)
        assert {idle.pid, busy.pid} < set(known) and len(known) == 3
        txn_pid = next(pid for pid in known if pid not in (idle.pid, busy.pid))
        assert known[txn_pid] == 0  # its open transaction starts there
        for seq in range(2, 20, 2):  # busy keeps writing for ~4.5 s; idle and txn say nothing
            time.sleep(0.5)
            assert busy.send(seq)[0] == 0
        known = active_producers(broker)
        assert idle.pid not in known  # expired
        assert busy.pid in known and known[txn_pid] == 0  # kept: recent, or in a transaction
        assert "producer ids expired" in broker.log_text()
        # forgotten, idle's retry of its last batch is no longer a duplicate: appended again (Kafka
        # accepts any sequence from a producer it does not know), busy's retry still is
        code, offset = idle.send(0)
        assert code == 0 and offset > 3
        assert busy.send(18)[0] == DUPLICATE
        assert idle.send(0)[0] == DUPLICATE  # known again from that batch on
        txn.commit_transaction(15)
        values = read_committed(broker, 20, timeout=5)
        assert b"open" in values
    finally:
        broker.cleanup()
