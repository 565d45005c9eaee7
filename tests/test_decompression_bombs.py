"""Issue 14, item 2, over real sockets: decompression bombs do not stall or bloat the broker.

- a bomb (200 MiB of zeros in one record, a few KB compressed; snappy: as much as max.message.bytes
  holds) gets MESSAGE_TOO_LARGE for its partition, nothing of it is stored, the other partitions
  of the request are appended and the connection answers the next request;
- while a batch is validated in the worker thread, other connections are answered (made
  deterministic: the worker waits on an event until the test has its answers); the deferred batch
  is then appended after what came meanwhile, its offsets rebased, its sequence checked on the loop;
- a connection that goes away while its batch is in the worker: nothing of it is appended;
- large compressed batches from confluent-kafka (validated in the worker) and kafka-python round trip.

Timing figures (other clients' p99 while bombs arrive) are a benchmark: scripts/bench_bombs.py.
"""

from __future__ import annotations

import select
import socket
import struct
import threading
import time

import pytest
from test_hostile_produce import end_offsets, produce  # one raw Produce / ListOffsets helper

from minibroker.handlers import produce as produce_handler
from minibroker.protocol import codec
from minibroker.records import Compression, accelerator, build_records, v2
from minibroker.services import replica_manager
from minibroker.tools.wire import WireClient

from fuzzing.bombs import CODECS, MiB, zero_records  # values of zeros, compressed as a stream

NOW_ISH = int(time.time() * 1000)


def produce_body(topic: str, parts: dict[int, bytes], acks: int = -1) -> dict:
    return {
        "transactional_id": None,
        "acks": acks,
        "timeout_ms": 5000,
        "topic_data": [
            {"name": topic, "partition_data": [{"index": p, "records": r} for p, r in parts.items()]}
        ],
    }


def small(tag: bytes, codec=Compression.NONE) -> bytes:
    return build_records(2, [(0, NOW_ISH, b"k", tag, ())], compression=codec)


class RawConnection:
    """A produce request sent without waiting for its answer, the answer read later."""

    def __init__(self, port: int):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=20)

    def send_produce(self, topic: str, parts: dict[int, bytes], correlation: int = 1) -> None:
        self.sock.sendall(codec.encode_request(0, 9, correlation, produce_body(topic, parts), "bomber"))

    def answered(self) -> bool:
        waiting = select.poll()  # not select(): a long-lived worker's descriptors can pass 1024
        waiting.register(self.sock, select.POLLIN)
        return bool(waiting.poll(0))

    def read_produce(self):
        head = self._read(4)
        frame = self._read(struct.unpack(">i", head)[0])
        _, response = codec.decode_response(0, 9, frame)
        return {p.index: p for p in response.responses[0].partition_responses}

    def _read(self, n: int) -> bytes:
        out = b""
        while len(out) < n:
            chunk = self.sock.recv(n - len(out))
            if not chunk:
                raise ConnectionError("closed")
            out += chunk
        return out

    def close(self) -> None:
        self.sock.close()


@pytest.fixture(scope="module")
def one_record_bombs():
    out = {}
    for c in CODECS:
        out[c] = zero_records(c, [(16 if c == Compression.SNAPPY else 200) * MiB])
    return out


def test_a_bomb_gets_its_error_code_and_nothing_of_it_is_stored(minibroker_factory, one_record_bombs):
    broker = minibroker_factory()
    broker.create_topic("bombs", partitions=3)
    with WireClient("127.0.0.1", broker.port, timeout=20) as client:
        for round_, c in enumerate(CODECS):
            bomb = one_record_bombs[c]
            assert len(bomb) < 1_000_000, (c, len(bomb))  # passes max.message.bytes: it is the inflation
            got = produce(client, "bombs", {0: small(b"a%d" % round_), 1: bomb, 2: small(b"c%d" % round_, c)})
            assert got[1].error_code == 10, (c, got[1])  # MESSAGE_TOO_LARGE
            assert "a record may take" in got[1].error_message and got[1].base_offset == -1
            assert got[0].error_code == 0 and got[0].base_offset == round_
            assert got[2].error_code == 0 and got[2].base_offset == round_
            assert end_offsets(client, "bombs", [0, 1, 2]) == {0: round_ + 1, 1: 0, 2: round_ + 1}
            assert client.request(18, 0, {}).error_code == 0


@pytest.fixture
def gated_worker(monkeypatch):
    """The worker thread waits for ``release`` before validating; ``entered`` says it got there.
    Every compressed batch is deferred to it (an inline budget of 0)."""
    from minibroker.records import validate_and_assign

    entered, release = threading.Event(), threading.Event()
    outcomes = []  # what each validation in the worker ended with

    def gated(records, **kw):
        if kw.get("cancel") is None:  # on the event loop
            return validate_and_assign(records, **kw)
        entered.set()
        release.wait(20)
        try:
            result = validate_and_assign(records, **kw)
        except Exception as e:
            outcomes.append(type(e).__name__)
            raise
        outcomes.append("done")
        return result

    monkeypatch.setattr(replica_manager, "_validator", gated)
    monkeypatch.setattr(produce_handler, "INLINE_VALIDATION_WORK", 0)
    yield entered, release, outcomes
    release.set()


def test_other_connections_are_answered_while_a_batch_is_in_the_worker(minibroker_factory, gated_worker):
    entered, release, outcomes = gated_worker
    broker = minibroker_factory(mode="thread")  # the patches must be seen by the broker
    broker.create_topic("busy", partitions=2)
    heavy = zero_records(Compression.ZSTD, [MiB - 64] * 16)  # 16 MiB inflated: valid, stored in place
    bomber = RawConnection(broker.port)
    try:
        bomber.send_produce("busy", {0: heavy, 1: small(b"inline")})
        assert entered.wait(20)  # the heavy batch is in the worker, which waits
        with WireClient("127.0.0.1", broker.port) as other:
            # answered now, to the same partition too, with the worker held (uncompressed: with an inline
            # budget of 0 a compressed batch would wait in the worker's queue behind the held one)
            for i in range(3):
                got = produce(other, "busy", {0: small(b"other-%d" % i)})
                assert got[0].error_code == 0 and got[0].base_offset == i
            assert other.request(18, 0, {}).error_code == 0
            # partition 1 of the bomber's request was appended at once; its answer waits for partition 0
            assert end_offsets(other, "busy", [0, 1]) == {0: 3, 1: 1}
            assert not bomber.answered()
            release.set()
            got = bomber.read_produce()
            # appended after the three that came meanwhile: offsets assigned on the loop, at append time
            assert got[0].error_code == 0 and got[0].base_offset == 3
            assert got[1].error_code == 0 and got[1].base_offset == 0
            assert end_offsets(other, "busy", [0, 1]) == {0: 19, 1: 1}
            assert outcomes == ["done"]
    finally:
        bomber.close()


def test_a_connection_gone_while_its_batch_is_in_the_worker_appends_nothing(minibroker_factory, gated_worker):
    entered, release, outcomes = gated_worker
    broker = minibroker_factory(mode="thread")
    broker.create_topic("gone")
    bomber = RawConnection(broker.port)
    bomber.send_produce("gone", {0: zero_records(Compression.GZIP, [MiB - 64] * 4)})
    assert entered.wait(20)
    bomber.close()
    with WireClient("127.0.0.1", broker.port) as other:
        deadline = time.monotonic() + 10
        while broker_connections(broker) > 1 and time.monotonic() < deadline:  # the close seen
            time.sleep(0.01)
        release.set()
        deadline = time.monotonic() + 10
        while not outcomes and time.monotonic() < deadline:
            time.sleep(0.01)
        assert outcomes == ["ValidationCancelled"]  # given up at its first window
        assert end_offsets(other, "gone", [0]) == {0: 0}
        got = produce(other, "gone", {0: small(b"after")})
        assert got[0].error_code == 0 and got[0].base_offset == 0


def broker_connections(runner) -> int:
    return len(runner.broker.connections)


def test_deferred_batches_keep_idempotence(minibroker_factory, monkeypatch):
    monkeypatch.setattr(produce_handler, "INLINE_VALIDATION_WORK", 0)
    broker = minibroker_factory(mode="thread")
    broker.create_topic("idem")
    with WireClient("127.0.0.1", broker.port) as client:
        init = client.request(
            22,
            4,
            {
                "transactional_id": None,
                "transaction_timeout_ms": 60000,
                "producer_id": -1,
                "producer_epoch": -1,
            },
        )
        pid, epoch = init.producer_id, init.producer_epoch

        def batch(seq: int, n: int) -> bytes:
            rows = [(i, NOW_ISH, b"k", b"v%d" % (seq + i), ()) for i in range(n)]
            return build_records(
                2,
                rows,
                compression=Compression.ZSTD,
                producer_id=pid,
                producer_epoch=epoch,
                base_sequence=seq,
            )

        assert produce(client, "idem", {0: batch(0, 3)})[0].base_offset == 0
        assert produce(client, "idem", {0: batch(3, 2)})[0].base_offset == 3
        dup = produce(client, "idem", {0: batch(3, 2)})[0]
        assert dup.error_code == 46 and dup.base_offset == 3  # DUPLICATE_SEQUENCE_NUMBER, the original's
        gap = produce(client, "idem", {0: batch(9, 1)})[0]
        assert gap.error_code == 45  # OUT_OF_ORDER_SEQUENCE_NUMBER
        assert end_offsets(client, "idem", [0]) == {0: 5}


@pytest.mark.parametrize("compression", ["gzip", "snappy", "lz4", "zstd"])
def test_large_compressed_batches_from_clients_round_trip(minibroker_factory, monkeypatch, compression):
    """librdkafka's batches of 1 KiB records reach several hundred KB compressed: validated in the
    worker, but for lz4 and zstd where the record layer's C accelerator runs (issue 29): inline."""
    import os

    from confluent_kafka import Producer
    from kafka import KafkaConsumer, TopicPartition

    in_worker = []
    real = replica_manager.ReplicaManager.append_records_in_worker

    async def counted(self, *args, **kwargs):
        in_worker.append(args[0])
        return await real(self, *args, **kwargs)

    monkeypatch.setattr(replica_manager.ReplicaManager, "append_records_in_worker", counted)
    minibroker = minibroker_factory(mode="thread")
    topic_name = "large-" + compression
    minibroker.create_topic(topic_name)

    values = [os.urandom(512).hex().encode() for _ in range(3000)]
    producer = Producer(
        {
            "bootstrap.servers": minibroker.bootstrap_servers,
            "compression.type": compression,
            "linger.ms": 50,
            "batch.size": 1_000_000,
            "enable.idempotence": True,
        }
    )
    delivered = []
    for v in values:
        producer.produce(topic_name, v, on_delivery=lambda err, msg: delivered.append((err, msg.offset())))
    assert producer.flush(60) == 0
    assert all(err is None for err, _ in delivered) and sorted(o for _, o in delivered) == list(range(3000))
    consumer = KafkaConsumer(
        bootstrap_servers=minibroker.bootstrap_servers,
        enable_auto_commit=False,
        consumer_timeout_ms=15_000,
        max_partition_fetch_bytes=4 * MiB,
    )
    consumer.assign([TopicPartition(topic_name, 0)])
    consumer.seek_to_beginning(TopicPartition(topic_name, 0))
    got = []
    for message in consumer:
        got.append((message.offset, message.value))
        if len(got) == len(values):
            break
    consumer.close()
    assert got == list(enumerate(values))
    if compression in ("lz4", "zstd") and accelerator.active():
        assert not in_worker  # validated inline: decompression is the cost, the walk takes microseconds
    else:
        assert in_worker  # some of them went through the worker


def test_kafka_python_compressed_produce_still_works(minibroker, topic_name):
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition

    for compression in ("gzip", "lz4", "zstd", "snappy"):
        producer = KafkaProducer(
            bootstrap_servers=minibroker.bootstrap_servers,
            compression_type=compression,
            linger_ms=20,
            batch_size=1 << 20,
        )
        for i in range(500):
            producer.send(topic_name, b"%s-%d" % (compression.encode(), i) * 20)
        producer.flush(30)
        producer.close()
    consumer = KafkaConsumer(
        bootstrap_servers=minibroker.bootstrap_servers, enable_auto_commit=False, consumer_timeout_ms=15_000
    )
    consumer.assign([TopicPartition(topic_name, 0)])
    consumer.seek_to_beginning(TopicPartition(topic_name, 0))
    got = [m.value for _, m in zip(range(2000), consumer, strict=False)]
    consumer.close()
    codecs = ("gzip", "lz4", "zstd", "snappy")
    assert got == [b"%s-%d" % (c.encode(), i) * 20 for c in codecs for i in range(500)]


def test_acks_0_deferred_batches_are_appended_or_close_the_connection(minibroker_factory, monkeypatch):
    monkeypatch.setattr(produce_handler, "INLINE_VALIDATION_WORK", 0)
    broker = minibroker_factory(mode="thread")
    broker.create_topic("quiet")
    heavy = zero_records(Compression.LZ4, [MiB - 64] * 4)
    bad = bytearray(heavy)
    struct.pack_into(">i", bad, v2.RECORDS_COUNT_OFFSET, 5)  # one record more than it holds
    struct.pack_into(">i", bad, v2.LAST_OFFSET_DELTA_OFFSET, 4)
    import crc32c

    struct.pack_into(">I", bad, v2.CRC_OFFSET, crc32c.crc32c(bytes(bad[v2.ATTRIBUTES_OFFSET :])))
    with socket.create_connection(("127.0.0.1", broker.port), timeout=20) as sock:
        sock.sendall(codec.encode_request(0, 9, 1, produce_body("quiet", {0: heavy}, acks=0), "q"))
        sock.sendall(codec.encode_request(0, 9, 2, produce_body("quiet", {0: bytes(bad)}, acks=0), "q"))
        assert sock.recv(100) == b""  # no answer to either; closed after the second (INVALID_RECORD)
    with WireClient("127.0.0.1", broker.port) as client:
        assert end_offsets(client, "quiet", [0]) == {0: 4}
