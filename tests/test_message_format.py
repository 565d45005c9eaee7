"""Issue 16, part 1: topics keep the record magic ``message.format.version`` names (0.8/0.9 -> v0,
0.10 -> v1, 0.11+ -> v2), with the classic bytes on disk, and every client reads them.

The segment files are read here with struct and zlib, independently of minibroker's record code."""

from __future__ import annotations

import asyncio
import glob
import gzip
import logging
import os
import struct
import subprocess
import time
import zlib

import pytest

from minibroker.config.message_format import MessageFormatVersion, magic_for_version

# -- reading the classic message format by hand --------------------------------------------------


def segment_bytes(broker, topic: str, partition: int = 0) -> bytes:
    files = sorted(glob.glob(os.path.join(broker.data_dir, f"{topic}-{partition}", "*.log")))
    parts = []
    for f in files:
        with open(f, "rb") as fh:
            parts.append(fh.read())
    return b"".join(parts)


def legacy_messages(data: bytes) -> list[dict]:
    """Parse a v0/v1 message set: offset, size, crc, magic, attributes, [timestamp], key, value."""
    out, pos = [], 0
    while pos + 12 <= len(data):
        offset, size = struct.unpack_from(">qi", data, pos)
        body = data[pos + 12 : pos + 12 + size]
        crc, magic, attrs = struct.unpack_from(">IBB", body, 0)
        assert magic in (0, 1), f"magic {magic} at position {pos}"
        assert zlib.crc32(body[4:]) == crc, f"bad CRC at position {pos}"
        p = 6
        timestamp = None
        if magic == 1:
            (timestamp,) = struct.unpack_from(">q", body, p)
            p += 8
        (klen,) = struct.unpack_from(">i", body, p)
        key = None if klen < 0 else body[p + 4 : p + 4 + klen]
        p += 4 + max(klen, 0)
        (vlen,) = struct.unpack_from(">i", body, p)
        value = None if vlen < 0 else body[p + 4 : p + 4 + vlen]
        out.append({"offset": offset, "size": 12 + size, "magic": magic, "attributes": attrs,
                    "timestamp": timestamp, "key": key, "value": value, "position": pos})
        pos += 12 + size
    assert pos == len(data), "trailing bytes"
    return out


def inner_messages(wrapper: dict) -> list[dict]:
    assert wrapper["attributes"] & 0x07 == 1, "a gzip wrapper"
    return legacy_messages(gzip.decompress(wrapper["value"]))


def kp_producer(broker, api_version, **cfg):
    from kafka import KafkaProducer

    return KafkaProducer(bootstrap_servers=broker.bootstrap_servers, api_version=api_version, **cfg)


def send_all(producer, topic, items):
    futures = [producer.send(topic, key=k, value=v, partition=0) for k, v in items]
    producer.flush()
    return [f.get(10).offset for f in futures]


# -- the setting itself --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "magic", "version"),
    [("0.8.0", 0, "0.8.0"), ("0.8.2.2", 0, "0.8.2"), ("0.9.0", 0, "0.9.0"), ("0.9.0.1", 0, "0.9.0"),
     ("0.10.0", 1, "0.10.0-IV1"), ("0.10.0-IV0", 1, "0.10.0-IV0"), ("0.10.2.1", 1, "0.10.2-IV0"),
     ("0.11.0", 2, "0.11.0-IV2"), ("1.0", 2, "1.0-IV0"), ("2.8.1", 2, "2.8-IV1"), ("3.0-IV1", 2, "3.0-IV1"),
     ("3.9", 2, "3.9-IV0")],
)
def test_versions_name_their_magic(text, magic, version):
    assert magic_for_version(text) == magic
    assert MessageFormatVersion(text).version == version


@pytest.mark.parametrize("text", ["0.10", "0.7.0", "4.0", "banana", "", "3.0-IV9"])
def test_unknown_versions_are_refused(text):
    with pytest.raises(ValueError, match="is not a valid version"):
        magic_for_version(text)


def test_create_topic_with_a_bad_version_is_invalid_config(minibroker, topic_name):
    with pytest.raises(RuntimeError, match="INVALID_CONFIG"):
        minibroker.create_topic(topic_name, config={"message.format.version": "0.10"})


# -- classic bytes on disk -----------------------------------------------------------------------


def test_v0_topic_keeps_the_34_byte_message(minibroker, topic_name):
    minibroker.create_topic(topic_name, config={"message.format.version": "0.9.0"})
    p = kp_producer(minibroker, (0, 9))
    try:
        assert send_all(p, topic_name, [(b"key", b"value"), (None, b"value")]) == [0, 1]
    finally:
        p.close()
    data = segment_bytes(minibroker, topic_name)
    msgs = legacy_messages(data)
    assert [(m["offset"], m["size"], m["magic"], m["key"], m["value"]) for m in msgs] == [
        (0, 34, 0, b"key", b"value"), (1, 31, 0, None, b"value")]
    assert len(data) == 65


def test_v1_topic_keeps_the_42_byte_message(minibroker, topic_name):
    minibroker.create_topic(topic_name, config={"message.format.version": "0.10.0"})
    before = int(time.time() * 1000)
    p = kp_producer(minibroker, (0, 10, 0))
    try:
        assert send_all(p, topic_name, [(b"key", b"value")]) == [0]
    finally:
        p.close()
    (msg,) = legacy_messages(segment_bytes(minibroker, topic_name))
    assert (msg["size"], msg["magic"], msg["key"], msg["value"]) == (42, 1, b"key", b"value")
    assert before - 1000 <= msg["timestamp"] <= time.time() * 1000 + 1000  # the producer's CreateTime


def test_v2_topic_keeps_the_76_byte_batch(minibroker, topic_name):
    minibroker.create_topic(topic_name, config={"message.format.version": "3.0-IV1"})
    p = kp_producer(minibroker, (0, 11))
    try:
        send_all(p, topic_name, [(b"key", b"value")])
    finally:
        p.close()
    data = segment_bytes(minibroker, topic_name)
    assert len(data) == 76 and data[16] == 2


def test_v0_compressed_wrapper_gets_absolute_inner_offsets(minibroker, topic_name):
    minibroker.create_topic(topic_name, config={"message.format.version": "0.9.0"})
    p = kp_producer(minibroker, (0, 9))
    try:
        send_all(p, topic_name, [(b"k", b"first")])  # so absolute and relative offsets differ
    finally:
        p.close()
    p = kp_producer(minibroker, (0, 9), compression_type="gzip", linger_ms=200)
    try:
        assert send_all(p, topic_name, [(b"k%d" % i, b"v%d" % i) for i in range(4)]) == [1, 2, 3, 4]
    finally:
        p.close()
    first, wrapper = legacy_messages(segment_bytes(minibroker, topic_name))
    assert first["offset"] == 0 and wrapper["magic"] == 0
    assert wrapper["offset"] == 4  # the wrapper carries its LAST inner offset
    inner = inner_messages(wrapper)
    assert [m["offset"] for m in inner] == [1, 2, 3, 4]  # v0: absolute, assigned by the broker
    assert [m["value"] for m in inner] == [b"v0", b"v1", b"v2", b"v3"]


def test_v1_compressed_wrapper_keeps_relative_inner_offsets(minibroker, topic_name):
    minibroker.create_topic(topic_name, config={"message.format.version": "0.10.0"})
    p = kp_producer(minibroker, (0, 10, 0))
    try:
        send_all(p, topic_name, [(b"k", b"first")])
    finally:
        p.close()
    p = kp_producer(minibroker, (0, 10, 0), compression_type="gzip", linger_ms=200)
    try:
        assert send_all(p, topic_name, [(b"k%d" % i, b"v%d" % i) for i in range(4)]) == [1, 2, 3, 4]
    finally:
        p.close()
    first, wrapper = legacy_messages(segment_bytes(minibroker, topic_name))
    assert wrapper["magic"] == 1 and wrapper["offset"] == 4
    inner = inner_messages(wrapper)
    assert [m["offset"] for m in inner] == [0, 1, 2, 3]  # v1: relative, as the producer wrote them
    assert wrapper["timestamp"] == max(m["timestamp"] for m in inner)


def test_modern_batches_are_down_converted_on_append(minibroker, topic_name, caplog):
    minibroker.create_topic(topic_name, config={"message.format.version": "0.10.0"})
    p = kp_producer(minibroker, None, enable_idempotence=False)
    with caplog.at_level(logging.DEBUG, logger="minibroker.append"):
        try:
            futures = [p.send(topic_name, key=b"key", value=b"value", headers=[("h", b"x")], partition=0)]
            futures.append(p.send(topic_name, key=b"key", value=b"value", partition=0))
            p.flush()
            assert [f.get(10).offset for f in futures] == [0, 1]
        finally:
            p.close()
    msgs = legacy_messages(segment_bytes(minibroker, topic_name))
    assert [(m["magic"], m["size"]) for m in msgs] == [(1, 42), (1, 42)]  # the header is gone
    lines = [r.getMessage() for r in caplog.records
             if r.name == "minibroker.append" and r.getMessage().startswith(f"{topic_name}-0:")]
    if minibroker.mode == "thread":  # a broker in this process: its log records reach caplog
        assert lines and "converted" in lines[0] and "magic 1" in lines[0]
        assert "1 record headers dropped" in lines[0]


def test_idempotent_producer_into_a_v1_topic_is_unsupported(minibroker, topic_name):
    from kafka.errors import UnsupportedForMessageFormatError

    minibroker.create_topic(topic_name, config={"message.format.version": "0.10.0"})
    p = kp_producer(minibroker, None)  # kafka-python 3's default: idempotent
    try:
        future = p.send(topic_name, b"value", partition=0)
        with pytest.raises(UnsupportedForMessageFormatError):
            future.get(10)
    finally:
        p.close()
    assert segment_bytes(minibroker, topic_name) == b""


def test_confluent_idempotent_producer_into_a_v0_topic_fails_fast(minibroker, topic_name):
    from confluent_kafka import Producer

    minibroker.create_topic(topic_name, config={"message.format.version": "0.9.0"})
    errors = []
    p = Producer({"bootstrap.servers": minibroker.bootstrap_servers, "enable.idempotence": True,
                  "message.timeout.ms": 10000})
    p.produce(topic_name, b"value", partition=0, on_delivery=lambda err, msg: errors.append(err))
    start = time.monotonic()
    p.flush(15)
    assert errors and errors[0] is not None
    assert errors[0].code() != 0 and time.monotonic() - start < 10  # not retried until the timeout


# -- every client reads the old formats ----------------------------------------------------------


@pytest.fixture(scope="module")
def legacy_topics(minibroker):
    """A v0 and a v1 topic, each: 1 plain message, a gzip wrapper of 4 (offsets 1..4), 1 plain."""
    made = {}
    for fmt, api in (("0.9.0", (0, 9)), ("0.10.0", (0, 10, 0))):
        topic = f"legacy-{fmt.replace('.', '-')}-{os.getpid()}"
        minibroker.create_topic(topic, config={"message.format.version": fmt})
        wrapped = [(b"k%d" % i, b"v%d" % i) for i in range(1, 5)]
        for comp, items in ((None, [(b"k0", b"v0")]), ("gzip", wrapped), (None, [(b"k5", b"v5")])):
            p = kp_producer(minibroker, api, compression_type=comp, linger_ms=200)
            try:
                send_all(p, topic, items)
            finally:
                p.close()
        made[fmt] = topic
    wrappers = {fmt: [m["offset"] for m in legacy_messages(segment_bytes(minibroker, t))]
                for fmt, t in made.items()}
    assert wrappers == {"0.9.0": [0, 4, 5], "0.10.0": [0, 4, 5]}
    return made


EXPECTED = [(i, b"k%d" % i, b"v%d" % i) for i in range(6)]


@pytest.mark.parametrize("fmt", ["0.9.0", "0.10.0"])
@pytest.mark.parametrize("start", [0, 2])
def test_kafka_python_reads_legacy_topics(minibroker, legacy_topics, fmt, start):
    from kafka import KafkaConsumer, TopicPartition

    c = KafkaConsumer(bootstrap_servers=minibroker.bootstrap_servers, enable_auto_commit=False)
    tp = TopicPartition(legacy_topics[fmt], 0)
    c.assign([tp])
    c.seek(tp, start)  # 2 is in the middle of the wrapper 1..4
    got = []
    deadline = time.monotonic() + 15
    while len(got) < 6 - start and time.monotonic() < deadline:
        for recs in c.poll(200).values():
            got.extend((r.offset, r.key, r.value) for r in recs)
    c.close()
    assert got == EXPECTED[start:]


@pytest.mark.parametrize("fmt", ["0.9.0", "0.10.0"])
def test_old_fetchers_read_legacy_topics(minibroker, legacy_topics, fmt):
    """kafka-python pinned to 0.9 / 0.10 fetches with Fetch v0 / v2 (magic 0 / 1 only)."""
    from kafka import KafkaConsumer, TopicPartition

    for api in ((0, 9), (0, 10, 0)):
        c = KafkaConsumer(bootstrap_servers=minibroker.bootstrap_servers, enable_auto_commit=False,
                          api_version=api)
        tp = TopicPartition(legacy_topics[fmt], 0)
        c.assign([tp])
        c.seek(tp, 3)
        got = []
        deadline = time.monotonic() + 15
        while len(got) < 3 and time.monotonic() < deadline:
            for recs in c.poll(200).values():
                got.extend((r.offset, r.key, r.value) for r in recs)
        c.close()
        assert got == EXPECTED[3:], api


@pytest.mark.parametrize("fmt", ["0.9.0", "0.10.0"])
def test_aiokafka_reads_legacy_topics(minibroker, legacy_topics, fmt):
    from aiokafka import AIOKafkaConsumer, TopicPartition

    async def run():
        c = AIOKafkaConsumer(bootstrap_servers=minibroker.bootstrap_servers, enable_auto_commit=False)
        await c.start()
        try:
            tp = TopicPartition(legacy_topics[fmt], 0)
            c.assign([tp])
            c.seek(tp, 3)
            got = []
            while len(got) < 3:
                batch = await asyncio.wait_for(c.getmany(tp, timeout_ms=500), 15)
                got.extend((r.offset, r.key, r.value) for r in batch.get(tp, []))
            return got
        finally:
            await c.stop()

    assert asyncio.run(run()) == EXPECTED[3:]


@pytest.mark.parametrize("fmt", ["0.9.0", "0.10.0"])
def test_confluent_kafka_reads_legacy_topics(minibroker, legacy_topics, fmt):
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": minibroker.bootstrap_servers, "group.id": f"g-legacy-{fmt}",
                  "enable.auto.commit": False})
    try:
        c.assign([TopicPartition(legacy_topics[fmt], 0, 2)])
        got = []
        deadline = time.monotonic() + 15
        while len(got) < 4 and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is not None and not m.error():
                got.append((m.offset(), m.key(), m.value()))
    finally:
        c.close()
    assert got == EXPECTED[2:]


@pytest.mark.parametrize("fmt", ["0.9.0", "0.10.0"])
def test_kcat_reads_legacy_topics(minibroker, legacy_topics, fmt, kcat):
    out = subprocess.run(
        [kcat, "-b", minibroker.bootstrap_servers, "-C", "-t", legacy_topics[fmt], "-p", "0", "-o", "3", "-e",
         "-f", "%o %k %s\\n"], capture_output=True, timeout=30, check=True).stdout
    assert out.decode().splitlines() == [f"{i} k{i} v{i}" for i in range(3, 6)]


# -- changing it ---------------------------------------------------------------------------------


def test_describe_and_alter_the_format(minibroker, topic_name):
    from kafka.admin import ConfigResource, ConfigResourceType, KafkaAdminClient

    minibroker.create_topic(topic_name, config={"message.format.version": "0.10.0"})
    admin = KafkaAdminClient(bootstrap_servers=minibroker.bootstrap_servers)
    try:
        res = ConfigResource(ConfigResourceType.TOPIC, topic_name)

        def described():
            answer = admin.describe_configs([res], config_filter="all")
            return answer["topic"][topic_name]["message.format.version"]["value"]

        assert described() == "0.10.0"
        p = kp_producer(minibroker, (0, 10, 0))
        try:
            send_all(p, topic_name, [(b"a", b"1")])
            admin.alter_configs([ConfigResource(ConfigResourceType.TOPIC, topic_name,
                                                configs={"message.format.version": "2.8"})])
            assert described() == "2.8"
            send_all(p, topic_name, [(b"b", b"2")])  # a v1 message, up-converted on append now
        finally:
            p.close()
    finally:
        admin.close()
    data = segment_bytes(minibroker, topic_name)
    first_size = 12 + struct.unpack_from(">i", data, 8)[0]
    assert data[16] == 1 and len(legacy_messages(data[:first_size])) == 1
    assert data[first_size + 16] == 2  # the second append is a v2 batch
    from kafka import KafkaConsumer, TopicPartition

    c = KafkaConsumer(bootstrap_servers=minibroker.bootstrap_servers, enable_auto_commit=False)
    tp = TopicPartition(topic_name, 0)
    c.assign([tp])
    c.seek(tp, 0)
    got = []
    deadline = time.monotonic() + 15
    while len(got) < 2 and time.monotonic() < deadline:
        for recs in c.poll(200).values():
            got.extend((r.offset, r.value) for r in recs)
    c.close()
    assert got == [(0, b"1"), (1, b"2")]


def test_broker_default_format_and_its_warning(minibroker_factory):
    broker = minibroker_factory({"log.message.format.version": "0.10.0"})
    assert ("log.message.format.version with value `0.10.0` was deprecated in Kafka 3.0 and removed in "
            "Apache Kafka 4.0") in broker.log_text()
    broker.create_topic("plain")
    p = kp_producer(broker, (0, 10, 0))
    try:
        send_all(p, "plain", [(b"key", b"value")])
    finally:
        p.close()
    (msg,) = legacy_messages(segment_bytes(broker, "plain"))
    assert (msg["magic"], msg["size"]) == (1, 42)


def test_console_producer_to_a_0_9_topic_writes_v0(minibroker, topic_name):
    """The tool sends v2 batches; the topic's message.format.version makes the broker store v0. The tool
    is idempotent by default, as Kafka's producers are, and idempotent records have no v0 form: that
    send is refused with Kafka's code, a plain one is converted."""
    import sys

    minibroker.create_topic(topic_name, config={"message.format.version": "0.9.0"})
    command = [sys.executable, "-m", "minibroker", "produce", "--bootstrap-server",
               minibroker.bootstrap_servers, "--topic", topic_name, "--key-separator", ":",
               "--partition", "0"]
    refused = subprocess.run(command, input=b"key:value\n", capture_output=True, timeout=60)
    assert refused.returncode == 1 and b"UNSUPPORTED_FOR_MESSAGE_FORMAT" in refused.stderr, refused.stderr
    done = subprocess.run(command + ["--producer-property", "enable.idempotence=false"],
                          input=b"key:value\n", capture_output=True, timeout=60)
    assert done.returncode == 0, done.stderr
    (msg,) = legacy_messages(segment_bytes(minibroker, topic_name))
    assert (msg["size"], msg["magic"], msg["key"], msg["value"]) == (34, 0, b"key", b"value")
