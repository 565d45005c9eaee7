"""The documented examples (docs/testing.md): one test per client, using only the plugin's fixtures."""

from __future__ import annotations

import asyncio


def test_kafka_python_example(minibroker):
    from kafka import KafkaConsumer, KafkaProducer

    minibroker.create_topic("kp-orders", partitions=3)
    producer = KafkaProducer(bootstrap_servers=minibroker.bootstrap_servers)
    producer.send("kp-orders", key=b"customer-1", value=b"order-1").get(timeout=10)
    producer.close()

    consumer = KafkaConsumer("kp-orders", bootstrap_servers=minibroker.bootstrap_servers,
                             auto_offset_reset="earliest", consumer_timeout_ms=10_000)
    assert next(iter(consumer)).value == b"order-1"
    consumer.close()


async def test_aiokafka_example(minibroker):
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

    producer = AIOKafkaProducer(bootstrap_servers=minibroker.bootstrap_servers)
    await producer.start()
    await producer.send_and_wait("aio-events", b"hello")
    await producer.stop()

    consumer = AIOKafkaConsumer("aio-events", bootstrap_servers=minibroker.bootstrap_servers,
                                auto_offset_reset="earliest")
    await consumer.start()
    try:
        message = await asyncio.wait_for(consumer.getone(), 10)
    finally:
        await consumer.stop()
    assert message.value == b"hello"


def test_confluent_kafka_example(minibroker):
    from confluent_kafka import Consumer, Producer

    producer = Producer({"bootstrap.servers": minibroker.bootstrap_servers})
    producer.produce("ck-events", value=b"hello")
    producer.flush(10)

    consumer = Consumer({"bootstrap.servers": minibroker.bootstrap_servers, "group.id": "example",
                         "auto.offset.reset": "earliest"})
    consumer.subscribe(["ck-events"])
    message = None
    for _ in range(100):
        message = consumer.poll(0.2)
        if message is not None and message.error() is None:
            break
    consumer.close()
    assert message is not None and message.value() == b"hello"


def test_factory_example(minibroker_factory):
    broker = minibroker_factory({"num.partitions": "4", "log.segment.bytes": "1048576"})
    broker.produce("auto-created", [b"x"])  # auto-created with num.partitions
    from kafka import KafkaConsumer

    consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap_servers)
    assert consumer.partitions_for_topic("auto-created") == {0, 1, 2, 3}
    consumer.close()


def test_secure_broker_example(minibroker_factory):
    from confluent_kafka import Producer
    from kafka import KafkaConsumer

    broker = minibroker_factory(security_protocol="SASL_SSL", sasl_mechanism="SCRAM-SHA-256",
                                users={"alice": "alice-secret"})
    producer = Producer(broker.client_config("confluent-kafka", user="alice"))
    producer.produce("secure-events", value=b"hello")
    assert producer.flush(10) == 0

    consumer = KafkaConsumer("secure-events", auto_offset_reset="earliest", consumer_timeout_ms=10_000,
                             **broker.client_config("kafka-python", user="alice"))
    assert next(iter(consumer)).value == b"hello"
    consumer.close()


async def test_secure_broker_aiokafka_example(minibroker_factory):
    from aiokafka import AIOKafkaProducer

    broker = minibroker_factory(security_protocol="SSL", ssl_client_auth="required")
    producer = AIOKafkaProducer(**broker.client_config("aiokafka"))
    await producer.start()
    try:
        metadata = await producer.send_and_wait("mtls-events", b"hello")
    finally:
        await producer.stop()
    assert metadata.offset == 0
