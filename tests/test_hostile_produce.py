"""Issue 14, items 3 and 4, over real sockets: malformed records inside a Produce request.

One Produce request carries several partitions; one of them holds a batch with a malformed record
(uncompressed or compressed with each codec; a broken varint, a timestamp past int64, a wrong record
count, a key length past the end). That partition gets Kafka's error code and nothing of it is
stored; the others are appended; the connection stays open and answers the next request; nothing is
logged at ERROR (no traceback); kafka-python's consumer then reads every partition. The last resorts
(an exception no check foresaw, in validation or after it) answer for their partition alone and log
one traceback per site, not one per request.
"""

from __future__ import annotations

import logging
import struct

import crc32c
import pytest

from minibroker.records import Compression, build_records, compress, v2
from minibroker.records import validator as validator_module
from minibroker.records.varint import encode_varint
from minibroker.services import replica_manager
from minibroker.tools.wire import WireClient

NOW_ISH = 1_700_000_000_000
MAX_LONG = 2**63 - 1


def raw_batch(section: bytes, count: int, *, codec=Compression.NONE, base_ts=NOW_ISH) -> bytes:
    """A v2 batch around a hand-made records section, CRC correct: what a buggy producer sends."""
    payload = compress(codec, section) if codec != Compression.NONE else section
    buf = bytearray(v2.HEADER_SIZE + len(payload))
    v2.HEADER.pack_into(
        buf, 0, 0, len(buf) - 12, -1, 2, 0, int(codec), count - 1, base_ts, base_ts, -1, -1, -1, count
    )
    buf[v2.HEADER_SIZE :] = payload
    struct.pack_into(">I", buf, v2.CRC_OFFSET, crc32c.crc32c(bytes(buf[v2.ATTRIBUTES_OFFSET :])))
    return bytes(buf)


def record(body: bytes) -> bytes:
    return encode_varint(len(body)) + body


def good_record(i: int, value: bytes, ts_delta: int = 0) -> bytes:
    return v2.encode_record(i, ts_delta, b"k", value)


DAMAGE = {
    # (records section, count, base timestamp, expected error code, per-record errors expected)
    "broken varint": (
        good_record(0, b"x") + record(b"\x00" + b"\xff" * 10 + b"\x01\x02\x01\x01\x00"),
        2,
        NOW_ISH,
        87,
        False,
    ),
    "timestamp overflow": (good_record(0, b"x") + good_record(1, b"y", 1000), 2, MAX_LONG - 10, 32, True),
    "wrong record count": (good_record(0, b"x") + good_record(1, b"y"), 3, NOW_ISH, 87, False),
    "key length past the end": (
        good_record(0, b"x") + record(b"\x00\x00\x02" + encode_varint(100) + b"abc"),
        2,
        NOW_ISH,
        87,
        False,
    ),
}
CODECS = [Compression.NONE, Compression.GZIP, Compression.SNAPPY, Compression.LZ4, Compression.ZSTD]


def produce(client: WireClient, topic: str, parts: dict[int, bytes], version: int = 9):
    response = client.request(
        0,
        version,
        {
            "transactional_id": None,
            "acks": -1,
            "timeout_ms": 5000,
            "topic_data": [
                {"name": topic, "partition_data": [{"index": p, "records": r} for p, r in parts.items()]}
            ],
        },
    )
    return {p.index: p for p in response.responses[0].partition_responses}


def end_offsets(client: WireClient, topic: str, partitions) -> dict[int, int]:
    response = client.request(
        2,
        7,
        {
            "replica_id": -1,
            "isolation_level": 0,
            "topics": [
                {"name": topic, "partitions": [{"partition_index": p, "timestamp": -1} for p in partitions]}
            ],
        },
    )
    return {p.partition_index: p.offset for p in response.topics[0].partitions}


def good_batch(codec: Compression, tag: bytes) -> bytes:
    return build_records(
        2, [(0, NOW_ISH, b"k", tag + b"-0", ()), (1, NOW_ISH + 1, b"k", tag + b"-1", ())], compression=codec
    )


def consume_all(bootstrap: str, topic: str, partition: int, count: int):
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap, enable_auto_commit=False, consumer_timeout_ms=10_000
    )
    tp = TopicPartition(topic, partition)
    consumer.assign([tp])
    consumer.seek_to_beginning(tp)
    out = []
    for message in consumer:
        out.append(message)
        if len(out) >= count:
            break
    consumer.close()
    return out


def errors_logged(caplog) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info]


def test_a_malformed_partition_fails_alone_and_nothing_of_it_is_stored(minibroker_factory, caplog):
    broker = minibroker_factory()
    broker.create_topic("hostile", partitions=3)
    caplog.set_level(logging.INFO, logger="minibroker")
    expected_values = {0: [], 1: [], 2: []}
    with WireClient("127.0.0.1", broker.port) as client:
        first = produce(client, "hostile", {1: good_batch(Compression.NONE, b"before")})
        assert first[1].error_code == 0 and first[1].base_offset == 0
        expected_values[1] += [b"before-0", b"before-1"]
        for codec in CODECS:
            for name, (section, count, base_ts, code, per_record) in DAMAGE.items():
                tag = f"{codec}-{name}".encode()
                bad = raw_batch(section, count, codec=codec, base_ts=base_ts)
                before = end_offsets(client, "hostile", [0, 1, 2])
                result = produce(
                    client,
                    "hostile",
                    {0: good_batch(codec, tag + b"/0"), 1: bad, 2: good_batch(codec, tag + b"/2")},
                )
                what = (str(codec), name)
                assert result[1].error_code == code, (what, result[1])
                assert result[1].base_offset == -1 and result[1].error_message, what
                if per_record:
                    assert [e.batch_index for e in result[1].record_errors] == [1], what
                else:
                    assert result[1].record_errors == [], what
                for p in (0, 2):  # the other partitions of the same request are appended
                    assert result[p].error_code == 0 and result[p].base_offset == before[p], (what, p)
                    expected_values[p] += [tag + b"/%d-0" % p, tag + b"/%d-1" % p]
                after = end_offsets(client, "hostile", [0, 1, 2])
                assert after == {0: before[0] + 2, 1: before[1], 2: before[2] + 2}, what  # nothing of p1
                # the connection is still open and answers the next request
                assert client.request(18, 0, {}).error_code == 0
        # Produce v7 has no record_errors field: the code still comes back
        section, count, base_ts, code, _ = DAMAGE["timestamp overflow"]
        v7 = produce(client, "hostile", {1: raw_batch(section, count, base_ts=base_ts)}, version=7)
        assert v7[1].error_code == code
        last = produce(client, "hostile", {1: good_batch(Compression.LZ4, b"after")})
        assert last[1].error_code == 0 and last[1].base_offset == 2
        expected_values[1] += [b"after-0", b"after-1"]
    assert errors_logged(caplog) == []
    # kafka-python's consumer reads every partition straight through: contiguous offsets, no bad record
    for p, values in expected_values.items():
        got = consume_all(broker.bootstrap_servers, "hostile", p, len(values))
        assert [(m.offset, m.value) for m in got] == list(enumerate(values)), p


@pytest.fixture
def fresh_sites(monkeypatch):
    monkeypatch.setattr(replica_manager, "_unexpected_sites", {})


def test_an_unforeseen_exception_in_validation_answers_invalid_record_and_logs_one_traceback(
    minibroker_factory, caplog, monkeypatch, fresh_sites
):
    broker = minibroker_factory(mode="thread")  # the patch below must be seen by the broker
    broker.create_topic("bug", partitions=2)
    real = validator_module._validate_and_assign

    def buggy(records, *args):
        if b"BOOM" in bytes(records):
            return {}["no such key"]  # a KeyError deep in validation: a bug, not a malformed input
        return real(records, *args)

    monkeypatch.setattr(validator_module, "_validate_and_assign", buggy)
    caplog.set_level(logging.INFO, logger="minibroker")
    boom = build_records(2, [(0, NOW_ISH, b"k", b"BOOM", ())])
    with WireClient("127.0.0.1", broker.port) as client:
        for attempt in range(3):  # a producer retrying the same batch
            result = produce(client, "bug", {0: good_batch(Compression.NONE, b"ok"), 1: boom})
            assert result[0].error_code == 0 and result[0].base_offset == 2 * attempt
            assert result[1].error_code == 87 and "KeyError" in result[1].error_message
        assert end_offsets(client, "bug", [0, 1]) == {0: 6, 1: 0}
        assert client.request(18, 0, {}).error_code == 0
    logged = errors_logged(caplog)
    assert len(logged) == 1, [r.getMessage() for r in logged]  # once, not once per request
    assert logged[0].exc_info and "bug-1" in logged[0].getMessage() and "KeyError" in logged[0].getMessage()


def test_an_unforeseen_exception_after_validation_answers_for_its_partition_only(
    minibroker_factory, caplog, monkeypatch, fresh_sites
):
    broker = minibroker_factory(mode="thread")
    broker.create_topic("bug2", partitions=3)
    real = replica_manager.ReplicaManager.append_records

    def failing(self, topic, partition, *args, **kwargs):
        if partition == 1:
            raise RuntimeError("storage bug")
        return real(self, topic, partition, *args, **kwargs)

    monkeypatch.setattr(replica_manager.ReplicaManager, "append_records", failing)
    caplog.set_level(logging.INFO, logger="minibroker")
    with WireClient("127.0.0.1", broker.port) as client:
        for _ in range(2):
            result = produce(client, "bug2", {p: good_batch(Compression.GZIP, b"p%d" % p) for p in range(3)})
            assert [result[p].error_code for p in range(3)] == [0, -1, 0]  # UNKNOWN_SERVER_ERROR
        assert end_offsets(client, "bug2", [0, 1, 2]) == {0: 4, 1: 0, 2: 4}
    logged = errors_logged(caplog)
    assert len(logged) == 1 and logged[0].exc_info and "bug2-1" in logged[0].getMessage()
