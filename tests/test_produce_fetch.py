"""Issue 5: produce and consume with four real clients, old message formats, bad input."""

from __future__ import annotations

import asyncio
import struct
import subprocess
import sys
import time

import pytest

from minibroker.protocol import codec
from minibroker.records import Compression, build_records, iter_records
from minibroker.tools.wire import WireClient


def kp_consume(bootstrap, topic, count, *, partition=0, start=None, timeout=15.0, **cfg):
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, **cfg)
    tp = TopicPartition(topic, partition)
    consumer.assign([tp])
    if start is None:
        consumer.seek_to_beginning(tp)
    else:
        consumer.seek(tp, start)
    out = []
    deadline = time.monotonic() + timeout
    while len(out) < count and time.monotonic() < deadline:
        for records in consumer.poll(timeout_ms=200).values():
            out.extend(records)
    consumer.close()
    return out


def produce_raw(broker, topic, records: bytes, version=9, partition=0, acks=-1):
    with WireClient("127.0.0.1", broker.port) as c:
        r = c.request(
            0,
            version,
            {
                "transactional_id": None,
                "acks": acks,
                "timeout_ms": 5000,
                "topic_data": [{"name": topic, "partition_data": [{"index": partition, "records": records}]}],
            },
        )
        return r.responses[0].partition_responses[0]


def fetch_body(
    topic, offsets, *, max_wait_ms=0, min_bytes=0, max_bytes=1 << 20, session_id=0, session_epoch=-1
):
    """A Fetch request body (any version) for one topic: ``offsets`` maps partition -> fetch offset."""
    return {
        "replica_id": -1,
        "max_wait_ms": max_wait_ms,
        "min_bytes": min_bytes,
        "max_bytes": max_bytes,
        "isolation_level": 0,
        "session_id": session_id,
        "session_epoch": session_epoch,
        "topics": [
            {
                "topic": topic,
                "partitions": [
                    {"partition": p, "fetch_offset": o, "partition_max_bytes": max_bytes}
                    for p, o in offsets.items()
                ],
            }
        ],
        "forgotten_topics_data": [],
        "rack_id": "",
    }


def end_offset(broker, topic, partition=0):
    with WireClient("127.0.0.1", broker.port) as c:
        r = c.request(
            2,
            7,
            {
                "replica_id": -1,
                "isolation_level": 0,
                "topics": [{"name": topic, "partitions": [{"partition_index": partition, "timestamp": -1}]}],
            },
        )
        return r.topics[0].partitions[0].offset


def test_kafka_python_default_producer_and_consumer(minibroker, topic_name):
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition

    producer = KafkaProducer(bootstrap_servers=minibroker.bootstrap_servers)  # 3.x: idempotent, acks=all
    base_ts = int(time.time() * 1000) - 60_000
    futures = [
        producer.send(
            topic_name,
            key=b"k%d" % i,
            value=b"v%d" % i,
            headers=[("h", b"%d" % i)],
            timestamp_ms=base_ts + i * 1000,
        )
        for i in range(20)
    ]
    producer.flush()
    assert [f.get(10).offset for f in futures] == list(range(20))
    producer.close()

    records = kp_consume(minibroker.bootstrap_servers, topic_name, 20)
    assert [(r.offset, r.key, r.value, r.headers, r.timestamp) for r in records] == [
        (i, b"k%d" % i, b"v%d" % i, [("h", b"%d" % i)], base_ts + i * 1000) for i in range(20)
    ]

    consumer = KafkaConsumer(bootstrap_servers=minibroker.bootstrap_servers)
    tp = TopicPartition(topic_name, 0)
    consumer.assign([tp])
    consumer.seek_to_end(tp)
    assert consumer.position(tp) == 20
    found = consumer.offsets_for_times({tp: base_ts + 7500})
    assert found[tp].offset == 8 and found[tp].timestamp == base_ts + 8000
    assert consumer.offsets_for_times({tp: base_ts + 10**9})[tp] is None
    assert consumer.beginning_offsets([tp])[tp] == 0 and consumer.end_offsets([tp])[tp] == 20
    consumer.close()


async def test_aiokafka_round_trip(minibroker, topic_name):
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

    producer = AIOKafkaProducer(bootstrap_servers=minibroker.bootstrap_servers)
    await producer.start()
    try:
        results = [
            await producer.send_and_wait(topic_name, value=b"a%d" % i, key=b"k", headers=[("x", b"y")])
            for i in range(5)
        ]
        batch = producer.create_batch()
        for i in range(5, 10):
            batch.append(key=None, value=b"a%d" % i, timestamp=None)
        fut = await producer.send_batch(batch, topic_name, partition=0)
        assert (await fut).offset == 5
    finally:
        await producer.stop()
    assert [r.offset for r in results] == [0, 1, 2, 3, 4]
    consumer = AIOKafkaConsumer(bootstrap_servers=minibroker.bootstrap_servers, enable_auto_commit=False)
    await consumer.start()
    try:
        tp = TopicPartition(topic_name, 0)
        consumer.assign([tp])
        await consumer.seek_to_beginning(tp)
        got = []
        async with asyncio.timeout(15):
            while len(got) < 10:
                got.extend((await consumer.getmany(timeout_ms=500)).get(tp, []))
    finally:
        await consumer.stop()
    assert [(r.offset, r.value) for r in got] == [(i, b"a%d" % i) for i in range(10)]
    assert got[0].headers == (("x", b"y"),)


@pytest.mark.parametrize("compression", ["gzip", "snappy", "lz4", "zstd", "none"])
def test_confluent_idempotent_producer_with_each_codec(minibroker, topic_name, compression):
    from confluent_kafka import Consumer, Producer, TopicPartition

    producer = Producer(
        {
            "bootstrap.servers": minibroker.bootstrap_servers,
            "enable.idempotence": True,
            "compression.type": compression,
            "linger.ms": 5,
        }
    )
    delivered = []
    for i in range(200):
        producer.produce(
            topic_name,
            key=b"k%d" % (i % 7),
            value=b"value-%d" % i * 3,
            headers={"n": str(i)},
            on_delivery=lambda err, msg: delivered.append((err, msg.offset())),
        )
    assert producer.flush(30) == 0
    assert all(err is None for err, _ in delivered)
    assert sorted(o for _, o in delivered) == list(range(200))

    consumer = Consumer(
        {
            "bootstrap.servers": minibroker.bootstrap_servers,
            "group.id": f"g-{topic_name}",
            "enable.auto.commit": False,
        }
    )
    consumer.assign([TopicPartition(topic_name, 0, 0)])
    got = []
    deadline = time.monotonic() + 20
    while len(got) < 200 and time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is not None and msg.error() is None:
            got.append(msg)
    consumer.close()
    assert [m.offset() for m in got] == list(range(200))
    assert [m.value() for m in got] == [b"value-%d" % i * 3 for i in range(200)]
    assert got[5].headers() == [("n", b"5")]
    # the stored batches keep the producer's codec (compression.type=producer)
    with WireClient("127.0.0.1", minibroker.port) as c:
        r = c.request(1, 12, fetch_body(topic_name, {0: 0}))
    data = bytes(r.responses[0].partitions[0].records)
    codecs, pos = set(), 0
    while pos + 61 <= len(data):
        codecs.add(struct.unpack_from(">h", data, pos + 21)[0] & 7)
        pos += 12 + struct.unpack_from(">i", data, pos + 8)[0]
    expected = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}[compression]
    # librdkafka sends a batch uncompressed when compression would not shrink it
    assert expected in codecs and codecs <= {0, expected}


def test_kcat_produce_and_consume(minibroker, topic_name, kcat):
    lines = "\n".join(f"key{i}:value{i}" for i in range(30)) + "\n"
    out = subprocess.run(
        [kcat, "-b", minibroker.bootstrap_servers, "-P", "-t", topic_name, "-K:", "-p", "0", "-H", "hk=hv"],
        input=lines,
        text=True,
        capture_output=True,
        timeout=30,
    )
    assert out.returncode == 0, out.stderr
    out = subprocess.run(
        [
            kcat,
            "-b",
            minibroker.bootstrap_servers,
            "-C",
            "-t",
            topic_name,
            "-o",
            "beginning",
            "-e",
            "-f",
            "%o %k %s %h\\n",
        ],
        text=True,
        capture_output=True,
        timeout=30,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == [f"{i} key{i} value{i} hk=hv" for i in range(30)]
    # and a kafka-python consumer sees the same
    assert [r.value for r in kp_consume(minibroker.bootstrap_servers, topic_name, 30)] == [
        b"value%d" % i for i in range(30)
    ]


@pytest.mark.parametrize(
    "api_version,compression",
    [
        ((0, 9), None),
        ((0, 9), "gzip"),
        ((0, 9), "snappy"),
        ((0, 10, 0), None),
        ((0, 10, 0), "gzip"),
        ((0, 10, 0), "lz4"),
    ],
)
def test_old_formats_are_stored_by_the_rules_and_read_by_modern_clients(
    minibroker, topic_name, api_version, compression
):
    from kafka import KafkaProducer

    minibroker.produce(topic_name, [b"first"])  # offset 0, a modern v2 batch
    old = KafkaProducer(
        bootstrap_servers=minibroker.bootstrap_servers,
        api_version=api_version,
        compression_type=compression,
        linger_ms=50,
        acks=1,
    )
    futures = [old.send(topic_name, key=b"k", value=b"old-%d" % i, partition=0) for i in range(8)]
    old.flush()
    offsets = [f.get(10).offset for f in futures]
    old.close()
    assert offsets == list(range(1, 9))
    records = kp_consume(minibroker.bootstrap_servers, topic_name, 9)
    assert [(r.offset, r.value) for r in records] == [(0, b"first")] + [
        (i, b"old-%d" % (i - 1)) for i in range(1, 9)
    ]
    # a seek into the middle of the (possibly compressed) old batch
    mid = kp_consume(minibroker.bootstrap_servers, topic_name, 4, start=5)
    assert [r.offset for r in mid] == [5, 6, 7, 8]
    # and an old consumer reads the modern batch, down-converted
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(
        bootstrap_servers=minibroker.bootstrap_servers, api_version=api_version, enable_auto_commit=False
    )
    tp = TopicPartition(topic_name, 0)
    consumer.assign([tp])
    consumer.seek(tp, 0)
    got = []
    deadline = time.monotonic() + 15
    while len(got) < 9 and time.monotonic() < deadline:
        for recs in consumer.poll(timeout_ms=200).values():
            got.extend(recs)
    consumer.close()
    assert [(r.offset, r.value) for r in got] == [(0, b"first")] + [
        (i, b"old-%d" % (i - 1)) for i in range(1, 9)
    ]


@pytest.mark.parametrize(
    "compression", [Compression.NONE, Compression.GZIP, Compression.LZ4, Compression.ZSTD]
)
def test_seek_into_the_middle_of_a_v2_batch(minibroker, topic_name, compression):
    minibroker.create_topic(topic_name)
    batch = build_records(
        2, [(i, 1_700_000_000_000 + i, None, b"r%d" % i) for i in range(10)], compression=compression
    )
    assert produce_raw(minibroker, topic_name, batch).error_code == 0
    got = kp_consume(minibroker.bootstrap_servers, topic_name, 6, start=4)
    assert [(r.offset, r.value) for r in got] == [(i, b"r%d" % i) for i in range(4, 10)]


def _v2(n=3, **kw):
    return bytearray(build_records(2, [(i, 1_700_000_000_000, b"k", b"v%d" % i) for i in range(n)], **kw))


def test_bad_produce_input_gets_kafka_error_codes_and_appends_nothing(minibroker_factory):
    broker = minibroker_factory({"message.max.bytes": "2000"})
    broker.create_topic("bad")
    assert produce_raw(broker, "bad", bytes(_v2())).error_code == 0

    corrupt_crc = _v2()
    corrupt_crc[-1] ^= 0xFF
    truncated = _v2()[:-5]
    lying_count = _v2()
    struct.pack_into(">i", lying_count, 57, 5)  # recordCount: 5, but 3 records
    lying_count[17:21] = struct.pack(">I", __import__("crc32c").crc32c(bytes(lying_count[21:])))
    too_large = build_records(2, [(0, 1_700_000_000_000, None, b"x" * 5000)])

    cases = [
        (bytes(corrupt_crc), 2),  # CORRUPT_MESSAGE
        (bytes(truncated), 87),  # a batch cut short: "at least one record batch" (INVALID_RECORD)
        (bytes(lying_count), 87),  # record count does not match the records: INVALID_RECORD
        (too_large, 10),  # MESSAGE_TOO_LARGE
    ]
    for data, expected in cases:
        result = produce_raw(broker, "bad", data)
        assert result.error_code == expected, (expected, result)
    assert produce_raw(broker, "nope", bytes(_v2())).error_code == 3
    assert produce_raw(broker, "bad", bytes(_v2()), partition=7).error_code == 3
    assert end_offset(broker, "bad") == 3  # nothing of the bad batches was appended
    assert produce_raw(broker, "bad", bytes(_v2())).base_offset == 3  # connection and broker fine


def test_produce_v8_reports_record_errors(minibroker_factory):
    broker = minibroker_factory()
    broker.create_topic("compacted", config={"cleanup.policy": "compact"})
    data = build_records(2, [(0, 1_700_000_000_000, b"k", b"v"), (1, 1_700_000_000_000, None, b"v")])
    result = produce_raw(broker, "compacted", data, version=9)
    assert result.error_code == 87
    assert [e.batch_index for e in result.record_errors] == [1]


def test_fetch_returns_exactly_the_requested_partitions(minibroker, topic_name):
    minibroker.create_topic(topic_name, partitions=3)
    minibroker.produce(topic_name, [b"a", b"b"], partition=1)
    with WireClient("127.0.0.1", minibroker.port) as c:
        r = c.request(1, 11, fetch_body(topic_name, {2: 0, 0: 0, 1: 0}, max_wait_ms=10, min_bytes=1))
    parts = r.responses[0].partitions
    assert [p.partition_index for p in parts] == [2, 0, 1]
    assert [bytes(p.records) == b"" for p in parts] == [True, True, False]
    assert parts[2].high_watermark == 2 and parts[2].last_stable_offset == 2
    assert parts[0].preferred_read_replica == -1 and r.session_id == 0
    assert [rec.value for rec in iter_records(bytes(parts[2].records))] == [b"a", b"b"]


def test_fetch_long_poll_is_woken_by_an_append(minibroker, topic_name):
    import threading

    minibroker.create_topic(topic_name)
    threading.Timer(0.3, lambda: minibroker.produce(topic_name, [b"late"])).start()
    t0 = time.monotonic()
    with WireClient("127.0.0.1", minibroker.port, timeout=20) as c:
        r = c.request(1, 4, fetch_body(topic_name, {0: 0}, max_wait_ms=10000, min_bytes=1))
    waited = time.monotonic() - t0
    assert [rec.value for rec in iter_records(bytes(r.responses[0].partitions[0].records))] == [b"late"]
    assert waited < 8  # woken by the append, not by max_wait_ms


def test_an_append_right_after_the_fetch_handler_returns_still_wakes_its_long_poll(minibroker, topic_name):
    """The long poll a Fetch handler returns starts a loop iteration later; a Produce handled in
    between (another connection's data in the same iteration) must still wake it."""
    from minibroker.handlers.fetch import handle_fetch

    minibroker.create_topic(topic_name)
    broker = minibroker.broker
    request = codec.decode("FetchRequest", 4, codec.encode("FetchRequest", 4, fetch_body(
        topic_name, {0: 0}, max_wait_ms=10_000, min_bytes=1)))
    header = codec.RequestHeader(api_key=1, api_version=4, correlation_id=1, client_id="t",
                                 peer="test", listener="PLAINTEXT")

    async def race():
        poll = handle_fetch(broker, header, request)
        assert asyncio.iscoroutine(poll)  # nothing to read yet: a long poll
        broker.replicas.append_records(topic_name, 0, _v2(2), 9)  # before the poll first runs
        return await asyncio.wait_for(poll, 5)  # woken by that append, not by max_wait_ms

    response = asyncio.run_coroutine_threadsafe(race(), minibroker._loop).result(10)
    records = bytes(response.responses[0].partitions[0].records.read())
    assert [r.value for r in iter_records(records)] == [b"v0", b"v1"]


def test_fetch_sessions_incremental(minibroker, topic_name):
    minibroker.create_topic(topic_name, partitions=2)
    minibroker.produce(topic_name, [b"x"], partition=0)

    def fetch(c, session_id, epoch, parts, forgotten=()):
        return c.request(
            1,
            12,
            {
                "replica_id": -1,
                "max_wait_ms": 0,
                "min_bytes": 0,
                "max_bytes": 1 << 20,
                "isolation_level": 0,
                "session_id": session_id,
                "session_epoch": epoch,
                "topics": [
                    {
                        "topic": topic_name,
                        "partitions": [
                            {"partition": p, "fetch_offset": o, "partition_max_bytes": 1 << 20}
                            for p, o in parts
                        ],
                    }
                ]
                if parts
                else [],
                "forgotten_topics_data": [{"topic": topic_name, "partitions": list(forgotten)}]
                if forgotten
                else [],
                "rack_id": "",
            },
        )

    with WireClient("127.0.0.1", minibroker.port) as c:
        full = fetch(c, 0, 0, [(0, 0), (1, 0)])
        assert full.error_code == 0 and full.session_id > 0
        assert len(full.responses[0].partitions) == 2
        sid = full.session_id
        incr = fetch(c, sid, 1, [(0, 1)])  # moved past the record: nothing changed
        assert incr.error_code == 0 and incr.session_id == sid and incr.responses == []
        minibroker.produce(topic_name, [b"y"], partition=1)
        incr = fetch(c, sid, 2, [])
        assert [p.partition_index for t in incr.responses for p in t.partitions] == [1]
        assert fetch(c, sid, 7, []).error_code == 71  # INVALID_FETCH_SESSION_EPOCH
        assert fetch(c, 123456789, 1, []).error_code == 70  # FETCH_SESSION_ID_NOT_FOUND
        closed = fetch(c, sid, -1, [(0, 0)])
        assert closed.session_id == 0 and closed.error_code == 0


def test_fetch_by_topic_id_and_unknown_topic_id(minibroker, topic_name):
    minibroker.create_topic(topic_name)
    minibroker.produce(topic_name, [b"z"])
    with WireClient("127.0.0.1", minibroker.port) as c:
        md = c.request(3, 12, {"topics": [{"name": topic_name}], "allow_auto_topic_creation": False})
        tid = md.topics[0].topic_id
        body = {
            "replica_id": -1,
            "max_wait_ms": 0,
            "min_bytes": 0,
            "max_bytes": 1 << 20,
            "isolation_level": 0,
            "session_id": 0,
            "session_epoch": -1,
            "topics": [
                {
                    "topic_id": t,
                    "partitions": [{"partition": 0, "fetch_offset": 0, "partition_max_bytes": 1 << 20}],
                }
                for t in (tid, b"\x01" * 16)
            ],
            "forgotten_topics_data": [],
            "rack_id": "",
        }
        r = c.request(1, 16, body)
    assert r.responses[0].topic_id == tid and r.responses[0].partitions[0].error_code == 0
    assert [rec.value for rec in iter_records(bytes(r.responses[0].partitions[0].records))] == [b"z"]
    assert r.responses[1].partitions[0].error_code == 100  # UNKNOWN_TOPIC_ID


def test_out_of_range_and_list_offsets(minibroker, topic_name):
    minibroker.create_topic(topic_name)
    # one batch with rising timestamps: a client's send() may split records into batches whose
    # equal timestamps would make the max-timestamp answer (first batch wins a tie) run-dependent
    ts = 1_700_000_000_000
    batch = build_records(2, [(i, ts + i, None, b"%d" % (i + 1)) for i in range(3)])
    assert produce_raw(minibroker, topic_name, bytes(batch)).error_code == 0
    with WireClient("127.0.0.1", minibroker.port) as c:
        r = c.request(1, 4, fetch_body(topic_name, {0: 99}, max_bytes=1000))
        assert r.responses[0].partitions[0].error_code == 1  # OFFSET_OUT_OF_RANGE
        lo = c.request(
            2,
            0,
            {
                "replica_id": -1,
                "topics": [
                    {
                        "name": topic_name,
                        "partitions": [{"partition_index": 0, "timestamp": -1, "max_num_offsets": 1}],
                    }
                ],
            },
        )
        assert lo.topics[0].partitions[0].old_style_offsets == [3]
        lo = c.request(
            2,
            9,
            {
                "replica_id": -1,
                "isolation_level": 1,
                "topics": [
                    {
                        "name": topic_name,
                        "partitions": [
                            {"partition_index": 0, "timestamp": t, "current_leader_epoch": -1}
                            for t in (-2, -1, -3)
                        ],
                    }
                ],
            },
        )
        assert [(p.offset, p.leader_epoch) for p in lo.topics[0].partitions] == [(0, 0), (3, 0), (2, 0)]
        ep = c.request(
            23,
            4,
            {
                "replica_id": -1,
                "topics": [
                    {
                        "topic": topic_name,
                        "partitions": [{"partition": 0, "current_leader_epoch": 0, "leader_epoch": 0}],
                    }
                ],
            },
        )
        assert (ep.topics[0].partitions[0].leader_epoch, ep.topics[0].partitions[0].end_offset) == (0, 3)


def test_idempotent_duplicates_and_sequence_errors(minibroker, topic_name):
    minibroker.create_topic(topic_name)
    with WireClient("127.0.0.1", minibroker.port) as c:
        pid = c.request(
            22,
            4,
            {
                "transactional_id": None,
                "transaction_timeout_ms": 1000,
                "producer_id": -1,
                "producer_epoch": -1,
            },
        ).producer_id

    def batch(seq, n=2, epoch=0):
        return build_records(
            2,
            [(i, 1_700_000_000_000, None, b"s%d" % (seq + i)) for i in range(n)],
            producer_id=pid,
            producer_epoch=epoch,
            base_sequence=seq,
        )

    assert produce_raw(minibroker, topic_name, batch(0)).base_offset == 0
    assert produce_raw(minibroker, topic_name, batch(2)).base_offset == 2
    dup = produce_raw(minibroker, topic_name, batch(0))
    assert (dup.error_code, dup.base_offset) == (46, 0)
    assert produce_raw(minibroker, topic_name, batch(9)).error_code == 45
    assert produce_raw(minibroker, topic_name, batch(4)).base_offset == 4
    other = build_records(
        2, [(0, 1_700_000_000_000, None, b"q")], producer_id=pid + 1000, producer_epoch=0, base_sequence=5
    )
    # a producer the partition does not know starts at any sequence (Kafka's ProducerAppendInfo since
    # KIP-360: its state may have expired), and is then held to it
    assert produce_raw(minibroker, topic_name, other).base_offset == 6
    assert produce_raw(minibroker, topic_name, other).error_code == 46
    assert end_offset(minibroker, topic_name) == 7


def test_producer_state_survives_restart(minibroker_factory):
    broker = minibroker_factory()
    broker.create_topic("idem")
    with WireClient("127.0.0.1", broker.port) as c:
        pid = c.request(22, 4, {"transactional_id": None, "transaction_timeout_ms": 1000}).producer_id
    # a timestamp of now: a producer whose last batch is older than producer.id.expiration.ms (a day)
    # is left out when the snapshot is loaded, as in Kafka
    b0 = build_records(
        2, [(0, int(time.time() * 1000), None, b"a")], producer_id=pid, producer_epoch=0, base_sequence=0
    )
    assert produce_raw(broker, "idem", b0).base_offset == 0
    broker.restart()
    dup = produce_raw(broker, "idem", b0)
    assert (dup.error_code, dup.base_offset) == (46, 0)
    with WireClient("127.0.0.1", broker.port) as c:
        assert c.request(22, 4, {"transactional_id": None, "transaction_timeout_ms": 1000}).producer_id > pid


def test_acks_zero_gets_no_response_and_errors_close_the_connection(minibroker, topic_name):
    minibroker.create_topic(topic_name)
    with WireClient("127.0.0.1", minibroker.port) as c:
        body = {
            "transactional_id": None,
            "acks": 0,
            "timeout_ms": 1000,
            "topic_data": [{"name": topic_name, "partition_data": [{"index": 0, "records": bytes(_v2())}]}],
        }
        c.sock.sendall(codec.encode_request(0, 9, 1, body))
        assert c.request(18, 0, {}).error_code == 0  # the next answer is ApiVersions': none for acks=0
        body["topic_data"][0]["name"] = "missing-topic-for-acks0"
        c.sock.sendall(codec.encode_request(0, 9, 5, body))
        c.sock.settimeout(5)
        assert c.sock.recv(10) == b""
    assert end_offset(minibroker, topic_name) == 3


def test_a_client_that_never_reads_does_not_stall_others(minibroker, topic_name):
    """Back-pressure: a connection whose responses pile up stops being read; others go on."""
    import socket

    minibroker.create_topic(topic_name)
    minibroker.produce(topic_name, [b"v" * 100_000 for _ in range(20)])  # ~2 MB
    fetch = codec.encode_request(1, 4, 1, fetch_body(topic_name, {0: 0}, max_bytes=50 << 20))
    hog = socket.create_connection(("127.0.0.1", minibroker.port))
    hog.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    hog.setblocking(False)
    sent = 0
    try:
        for _ in range(200):  # far more response bytes than any socket buffer holds
            try:
                sent += hog.send(fetch)
            except BlockingIOError:
                break
        t0 = time.monotonic()
        got = kp_consume(minibroker.bootstrap_servers, topic_name, 20)
        assert len(got) == 20 and time.monotonic() - t0 < 20
        if minibroker.broker is not None:  # in-process: what the hog costs stays bounded
            for conn in list(minibroker.broker.connections):
                # requests: at most one socket read's worth beyond the 5 queued; responses: at most the
                # one being written (reading and handling stop while the transport cannot write)
                assert sum(len(f) for f in conn._queue) < 1 << 20
                assert conn.transport.get_write_buffer_size() < 3 << 20
    finally:
        hog.close()
    assert sent > 0


def test_large_fetch_under_uvloop_in_a_subprocess(minibroker_factory, kcat):
    """Zero-copy fetch (os.sendfile on the socket) under the loop a real deployment uses."""
    broker = minibroker_factory({"log.segment.bytes": "2000000"}, mode="process")  # --loop auto: uvloop
    values = [bytes([i % 251]) * 50_000 for i in range(200)]  # 10 MB over several segments
    broker.produce("big", values, max_request_size=2_000_000)
    got = kp_consume(broker.bootstrap_servers, "big", 200, timeout=30, max_partition_fetch_bytes=3_000_000)
    assert [r.value for r in got] == values
    out = subprocess.run(
        [kcat, "-b", broker.bootstrap_servers, "-C", "-t", "big", "-o", "beginning", "-e", "-f", "%o\\n"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.stdout.split() == [str(i) for i in range(200)]


def test_dump_log_shows_the_offsets_the_broker_assigned(minibroker_factory):
    """What the teaching tools show: batches written by a real client, offsets given by the broker."""
    from kafka import KafkaProducer

    broker = minibroker_factory()
    broker.create_topic("teach")
    for api_version, compression in (((0, 10, 0), "gzip"), (None, None)):
        kw = {"api_version": api_version} if api_version else {}
        p = KafkaProducer(
            bootstrap_servers=broker.bootstrap_servers, compression_type=compression, linger_ms=20, **kw
        )
        for i in range(3):
            p.send("teach", b"v%d" % i, partition=0)
        p.flush()
        p.close()
    log = f"{broker.data_dir}/teach-0/00000000000000000000.log"
    out = subprocess.run(
        [sys.executable, "-m", "minibroker", "dump-log", log], capture_output=True, text=True, timeout=30
    )
    assert out.returncode == 0, out.stderr
    batches = [line for line in out.stdout.splitlines() if line.startswith("baseOffset")]
    # the 0.10-style gzip wrapper (magic 1) was up-converted to the topic's magic 2, codec kept
    assert "baseOffset: 0 lastOffset: 2 count: 3" in batches[0]
    assert "magic: 2" in batches[0] and "compresscodec: gzip" in batches[0]
    assert "baseOffset: 3 lastOffset: 5" in batches[1] and "magic: 2" in batches[1]


def test_each_append_says_what_happened_to_the_batch(minibroker, topic_name, caplog):
    """The teaching log: offsets given, and whether the batch was patched in place or rebuilt."""
    import logging

    from kafka import KafkaProducer

    minibroker.create_topic(topic_name)
    with caplog.at_level(logging.DEBUG, logger="minibroker.append"):
        for kw in ({"api_version": (0, 10, 0), "compression_type": "gzip"}, {}):
            p = KafkaProducer(bootstrap_servers=minibroker.bootstrap_servers, linger_ms=20, **kw)
            for i in range(3):
                p.send(topic_name, b"v%d" % i, partition=0)
            p.flush()
            p.close()
    lines = [
        r.getMessage()
        for r in caplog.records
        if r.name == "minibroker.append" and topic_name in r.getMessage()
    ]
    assert lines[0].startswith(f"{topic_name}-0: 3 records at offsets 0..2, converted (gzip -> gzip")
    assert lines[1].startswith(f"{topic_name}-0: 3 records at offsets 3..5, in-place (none -> none")


def test_pipelined_produce_requests_in_one_write_each_keep_their_records(minibroker, topic_name):
    """Requests handled straight from the read buffer: each sees its own bytes, none a neighbour's."""
    minibroker.create_topic(topic_name)
    frames = b"".join(
        codec.encode_request(
            0,
            9,
            corr,
            {
                "transactional_id": None,
                "acks": -1,
                "timeout_ms": 5000,
                "topic_data": [
                    {
                        "name": topic_name,
                        "partition_data": [{"index": 0, "records": bytes(_v2(n=2 + corr % 3))}],
                    }
                ],
            },
        )
        for corr in range(1, 41)
    )
    with WireClient("127.0.0.1", minibroker.port) as c:
        c.sock.sendall(frames)  # 40 requests in one write: several land in one read
        bases = []
        for corr in range(1, 41):
            size = struct.unpack(">i", c._read(4))[0]
            got, body = codec.decode_response(0, 9, c._read(size))
            assert got == corr
            part = body.responses[0].partition_responses[0]
            assert part.error_code == 0
            bases.append(part.base_offset)
    expected, offset = [], 0
    for corr in range(1, 41):
        expected.append(offset)
        offset += 2 + corr % 3
    assert bases == expected
    records = kp_consume(minibroker.bootstrap_servers, topic_name, offset)
    assert [r.offset for r in records] == list(range(offset))
    assert [r.value for r in records] == [b"v%d" % i for corr in range(1, 41) for i in range(2 + corr % 3)]
