"""Record the request frames real clients send: a recording proxy on loopback.

The broker advertises the proxy's address (``advertised.listeners``), so every connection a client
opens, bootstrap or not, goes through the proxy, which copies bytes both ways and keeps each whole
client-to-broker frame. ``capture_clients`` runs kafka-python, confluent-kafka and aiokafka
producers, consumers (plain and in a group) and admin clients against a fresh broker and returns
their frames; ``scripts/fuzz.py capture`` writes them to the corpus file the fuzzer reads.
"""

from __future__ import annotations

import asyncio
import socket
import struct
import threading
import time

from minibroker.testing import BrokerRunner

CAPTURE_TOPICS = {"fz-a": 3, "fz-b": 1}  # topics the captured requests name; the fuzzer creates them
CAPTURE_GROUP = "fz-group"


class RecordingProxy:
    """A TCP proxy on 127.0.0.1 in its own event-loop thread; ``frames`` holds (label, frame)."""

    def __init__(self) -> None:
        self.frames: list[tuple[str, bytes]] = []
        self.label = "unlabelled"
        self.target_port = 0
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="recording-proxy", daemon=True)
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        self.port = sock.getsockname()[1]
        self._sock = sock
        self._server = None

    def start(self) -> RecordingProxy:
        self._thread.start()
        self._server = asyncio.run_coroutine_threadsafe(
            asyncio.start_server(self._serve, sock=self._sock), self._loop
        ).result(5)
        return self

    def stop(self) -> None:
        async def close():
            self._server.close()
            for task in asyncio.all_tasks():
                if task is not asyncio.current_task():
                    task.cancel()

        asyncio.run_coroutine_threadsafe(close(), self._loop).result(5)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.target_port)
        except OSError:
            writer.close()
            return
        label = self.label

        async def client_to_broker():
            buf = b""
            while True:
                data = await reader.read(65536)
                if not data:
                    break
                up_writer.write(data)
                buf += data
                while len(buf) >= 4:
                    size = struct.unpack_from(">i", buf)[0]
                    if len(buf) < 4 + size:
                        break
                    self.frames.append((label, buf[4 : 4 + size]))
                    buf = buf[4 + size :]
            up_writer.close()

        async def broker_to_client():
            while True:
                data = await up_reader.read(65536)
                if not data:
                    break
                writer.write(data)
                await writer.drain()
            writer.close()

        try:
            await asyncio.gather(client_to_broker(), broker_to_client())
        except (OSError, asyncio.CancelledError):
            writer.close()
            up_writer.close()


def _kafka_python(bootstrap: str, proxy: RecordingProxy) -> None:
    from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
    from kafka.admin import ConfigResource, ConfigResourceType, NewPartitions, NewTopic

    proxy.label = "kafka-python producer"
    for compression in (None, "gzip", "snappy", "lz4", "zstd"):
        producer = KafkaProducer(bootstrap_servers=bootstrap, compression_type=compression, linger_ms=5)
        for i in range(4):
            producer.send(
                "fz-a", key=b"k%d" % i, value=b"value-%d" % i, partition=i % 3, headers=[("h", b"x")]
            )
        producer.flush(10)
        producer.close(5)
    for api_version, compression in (
        ((0, 10, 1), "gzip"),
        ((0, 10, 0), None),
        ((0, 9), "snappy"),
        ((0, 9), None),
        ((0, 11), "lz4"),
    ):
        proxy.label = f"kafka-python producer api_version={api_version}"
        producer = KafkaProducer(
            bootstrap_servers=bootstrap, api_version=api_version, compression_type=compression, linger_ms=5
        )
        for i in range(3):
            producer.send("fz-b", key=b"old%d" % i, value=b"old-value-%d" % i)
        producer.flush(10)
        producer.close(5)
        proxy.label = f"kafka-python consumer api_version={api_version}"
        consumer = KafkaConsumer(
            bootstrap_servers=bootstrap,
            api_version=api_version,
            enable_auto_commit=False,
            fetch_max_wait_ms=50,
            consumer_timeout_ms=1500,
        )
        consumer.assign([TopicPartition("fz-b", 0)])
        consumer.seek_to_beginning()
        for _ in consumer:
            pass
        consumer.close()

    proxy.label = "kafka-python consumer"
    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap,
        enable_auto_commit=False,
        fetch_max_wait_ms=50,
        consumer_timeout_ms=1500,
        isolation_level="read_committed",
    )
    consumer.assign([TopicPartition("fz-a", p) for p in range(3)])
    consumer.seek_to_beginning()
    for _ in consumer:
        pass
    consumer.seek(TopicPartition("fz-a", 0), 1)
    consumer.offsets_for_times({TopicPartition("fz-a", 0): 0})
    consumer.end_offsets([TopicPartition("fz-a", 1)])
    consumer.close()

    proxy.label = "kafka-python group consumer"
    consumer = KafkaConsumer(
        "fz-a",
        bootstrap_servers=bootstrap,
        group_id=CAPTURE_GROUP,
        auto_offset_reset="earliest",
        fetch_max_wait_ms=50,
        consumer_timeout_ms=3000,
        heartbeat_interval_ms=200,
        session_timeout_ms=6000,
        max_poll_interval_ms=10000,
    )
    for _ in consumer:
        pass
    consumer.commit()
    consumer.close()

    proxy.label = "kafka-python admin"
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    tp = TopicPartition("fz-scratch", 0)
    calls = [
        lambda: admin.create_topics([NewTopic("fz-scratch", 2, 1, topic_configs={"retention.ms": "600000"})]),
        lambda: admin.create_partitions({"fz-scratch": NewPartitions(3)}),
        lambda: admin.describe_configs(
            [ConfigResource(ConfigResourceType.TOPIC, "fz-a"), ConfigResource(ConfigResourceType.BROKER, "1")]
        ),
        lambda: admin.alter_configs(
            [ConfigResource(ConfigResourceType.TOPIC, "fz-scratch", configs={"retention.ms": "700000"})]
        ),
        lambda: admin.list_groups(),
        lambda: admin.describe_groups([CAPTURE_GROUP]),
        lambda: admin.list_group_offsets({CAPTURE_GROUP: None}),
        lambda: admin.describe_topics(["fz-a"]),
        lambda: admin.describe_cluster(),
        lambda: admin.describe_producers([TopicPartition("fz-a", 0)]),
        lambda: admin.list_partition_offsets({TopicPartition("fz-a", 0): -1}),
        lambda: admin.delete_records({tp: 0}),
        lambda: admin.describe_log_dirs(),
        lambda: admin.delete_group_offsets(CAPTURE_GROUP, [TopicPartition("fz-b", 0)]),
        lambda: admin.delete_topics(["fz-scratch"]),
        lambda: admin.delete_groups([CAPTURE_GROUP + "-gone"]),
    ]
    for call in calls:
        try:
            call()
        except Exception:  # noqa: BLE001 - error answers are fine: only the frames matter
            pass
    admin.close()


def _confluent(bootstrap: str, proxy: RecordingProxy) -> None:
    from confluent_kafka import (
        Consumer,
        ConsumerGroupTopicPartitions,
        Producer,
        TopicCollection,
        TopicPartition,
    )
    from confluent_kafka.admin import (
        AdminClient,
        AlterConfigOpType,
        ConfigEntry,
        ConfigResource,
        NewPartitions,
        NewTopic,
        OffsetSpec,
    )

    for compression in ("none", "gzip", "snappy", "lz4", "zstd"):
        proxy.label = f"confluent-kafka producer {compression}"
        producer = Producer(
            {
                "bootstrap.servers": bootstrap,
                "compression.type": compression,
                "enable.idempotence": compression in ("lz4", "none"),
                "linger.ms": 5,
            }
        )
        for i in range(4):
            producer.produce(
                "fz-a", key=b"ck%d" % i, value=b"cvalue-%d" % i, partition=i % 3, headers=[("h", b"y")]
            )
        producer.flush(10)
        del producer

    proxy.label = "confluent-kafka consumer"
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": CAPTURE_GROUP + "-c",
            "enable.auto.commit": False,
            "fetch.wait.max.ms": 50,
            "auto.offset.reset": "earliest",
        }
    )
    consumer.assign([TopicPartition("fz-a", p, 0) for p in range(3)])
    deadline = time.monotonic() + 2
    while time.monotonic() < deadline:
        consumer.poll(0.1)
    consumer.get_watermark_offsets(TopicPartition("fz-a", 0))
    consumer.offsets_for_times([TopicPartition("fz-a", 0, 0)])
    consumer.close()

    proxy.label = "confluent-kafka group consumer"
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": CAPTURE_GROUP,
            "auto.offset.reset": "earliest",
            "fetch.wait.max.ms": 50,
            "session.timeout.ms": 6000,
            "heartbeat.interval.ms": 200,
        }
    )
    consumer.subscribe(["fz-a", "fz-b"])
    deadline = time.monotonic() + 4
    while time.monotonic() < deadline:
        consumer.poll(0.1)
    consumer.commit(asynchronous=False)
    consumer.committed([TopicPartition("fz-a", 0)])
    consumer.close()

    proxy.label = "confluent-kafka admin"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    calls = [
        lambda: admin.create_topics([NewTopic("fz-scratch2", 2, 1, config={"cleanup.policy": "delete"})]),
        lambda: admin.create_partitions([NewPartitions("fz-scratch2", 3)]),
        lambda: admin.describe_configs([ConfigResource("topic", "fz-a"), ConfigResource("broker", "1")]),
        lambda: admin.incremental_alter_configs(
            [
                ConfigResource(
                    "topic",
                    "fz-scratch2",
                    incremental_configs=[
                        ConfigEntry("retention.ms", "800000", incremental_operation=AlterConfigOpType.SET)
                    ],
                )
            ]
        ),
        lambda: admin.list_consumer_groups(),
        lambda: admin.describe_consumer_groups([CAPTURE_GROUP]),
        lambda: admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(CAPTURE_GROUP)]),
        lambda: admin.describe_cluster(),
        lambda: admin.describe_topics(TopicCollection(["fz-a"])),
        lambda: admin.delete_records([TopicPartition("fz-scratch2", 0, 0)]),
        lambda: admin.list_offsets({TopicPartition("fz-a", 0): OffsetSpec.latest()}),
        lambda: admin.delete_consumer_groups([CAPTURE_GROUP + "-gone"]),
        lambda: admin.delete_topics(["fz-scratch2"]),
    ]
    for call in calls:
        try:
            futures = call()
            for f in futures.values() if isinstance(futures, dict) else [futures]:
                f.result(10)
        except Exception:  # noqa: BLE001 - error answers are fine: only the frames matter
            pass
    admin.list_topics(timeout=5)


def _aiokafka(bootstrap: str, proxy: RecordingProxy) -> None:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

    async def run():
        proxy.label = "aiokafka producer"
        producer = AIOKafkaProducer(
            bootstrap_servers=bootstrap, compression_type="gzip", enable_idempotence=True
        )
        await producer.start()
        for i in range(3):
            await producer.send_and_wait("fz-a", b"aio-%d" % i, key=b"a", partition=i % 3)
        await producer.stop()
        proxy.label = "aiokafka group consumer"
        consumer = AIOKafkaConsumer(
            "fz-b",
            bootstrap_servers=bootstrap,
            group_id=CAPTURE_GROUP + "-aio",
            auto_offset_reset="earliest",
            fetch_max_wait_ms=50,
            heartbeat_interval_ms=200,
            session_timeout_ms=6000,
        )
        await consumer.start()
        try:
            await consumer.getmany(timeout_ms=1500)
            await consumer.commit()
        finally:
            await consumer.stop()

    asyncio.run(run())


def capture_clients() -> tuple[list[tuple[str, bytes]], dict[str, bytes]]:
    """(label, frame) of every request the clients sent, and the topic ids they saw (name -> id)."""
    from minibroker.tools.topics import TopicAdmin

    proxy = RecordingProxy()
    runner = BrokerRunner({"advertised.listeners": f"PLAINTEXT://127.0.0.1:{proxy.port}"})
    runner.start()
    proxy.target_port = runner.port
    proxy.start()
    try:
        for name, partitions in CAPTURE_TOPICS.items():
            runner.create_topic(name, partitions)
        bootstrap = f"127.0.0.1:{proxy.port}"
        _kafka_python(bootstrap, proxy)
        _confluent(bootstrap, proxy)
        _aiokafka(bootstrap, proxy)
        time.sleep(0.5)
        with TopicAdmin(runner.bootstrap_servers) as admin:
            ids = {t.name: bytes(t.topic_id) for t in admin.metadata(list(CAPTURE_TOPICS)).topics}
    finally:
        proxy.stop()
        runner.cleanup()
    return list(proxy.frames), ids
