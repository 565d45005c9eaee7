"""Issue 31 item 7: the broker key catalogue as Kafka 4.x has it: keys Kafka 4.0 removed still start a
broker (with a warning naming the removal), through a real client."""

from __future__ import annotations

import logging

import pytest

from minibroker.config.keys import BROKER_CONFIGS, REMOVED_BROKER_KEYS

# kafka-python leaks the socket of a closed client, reported later by GC
pytestmark = pytest.mark.filterwarnings("ignore::ResourceWarning")


def test_removed_keys_are_marked_in_the_catalogue_and_its_docs():
    from minibroker.config.reference import config_reference_markdown

    assert {"zookeeper.connect", "log.message.format.version", "offsets.commit.required.acks"} <= set(
        REMOVED_BROKER_KEYS)
    assert all(BROKER_CONFIGS[name].removed_in == "4.0" for name in REMOVED_BROKER_KEYS)
    rows = {line.split(" | ")[0].strip("| `"): line for line in config_reference_markdown().splitlines()
            if line.startswith("| `")}
    assert "Removed in Kafka 4.0" in rows["zookeeper.connect"]
    assert "Removed in Kafka 4.0" not in rows["log.retention.ms"]


def test_a_key_kafka_4_removed_warns_at_start_and_the_broker_serves(minibroker_factory, caplog):
    with caplog.at_level(logging.WARNING, logger="minibroker.config"):
        broker = minibroker_factory({"zookeeper.connect": "zk:2181", "offsets.commit.required.acks": "-1"})
    removals = [r.getMessage() for r in caplog.records if "removed in Apache Kafka 4.0" in r.getMessage()]
    assert [m.split()[1] for m in removals] == ["offsets.commit.required.acks", "zookeeper.connect"]
    from kafka import KafkaAdminClient

    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap_servers)
    try:
        from kafka.admin import NewTopic

        admin.create_topics([NewTopic("after-removed-keys", 1, 1)])
        assert "after-removed-keys" in admin.list_topics()
    finally:
        admin.close()
