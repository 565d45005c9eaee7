"""Issue 31 item 7: the broker key catalogue as Kafka 4.x has it: every key of Kafka 4.x's broker config
definitions known with Kafka's type (tests/data/kafka4_broker_keys.txt, read from apache/kafka's source),
the new ones described with Kafka's defaults, and keys Kafka 4.0 removed still starting a broker (with a
warning naming the removal), through real clients."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from minibroker.config.keys import BROKER_CONFIGS, REMOVED_BROKER_KEYS

KAFKA4_KEYS = Path(__file__).parent / "data" / "kafka4_broker_keys.txt"
# Keys Kafka 4.x declares as lists that minibroker still types as strings (its listener and log dir
# parsing reads the text); DescribeConfigs reports them as STRING.
STRING_WHERE_KAFKA_4_HAS_LIST = {"listeners", "advertised.listeners", "log.dir", "log.dirs"}


def _kafka4_keys() -> dict[str, str]:
    keys = {}
    for line in KAFKA4_KEYS.read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            name, type_name = line.split()
            keys[name] = type_name
    return keys


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


def test_the_catalogue_knows_every_kafka_4_broker_key_with_kafka_s_type():
    kafka4 = _kafka4_keys()
    assert len(kafka4) > 200  # the whole list was read, not a truncated file
    assert sorted(set(kafka4) - set(BROKER_CONFIGS)) == []
    assert not set(kafka4) & set(REMOVED_BROKER_KEYS), "a key Kafka 4 defines is marked removed"
    ours = {name: BROKER_CONFIGS[name].type.name.lower() for name in kafka4}
    wrong_type = {name: (theirs, ours[name]) for name, theirs in kafka4.items()
                  if theirs != "?" and ours[name] != theirs}
    assert set(wrong_type) == STRING_WHERE_KAFKA_4_HAS_LIST, wrong_type


# Catalogue keys the data file does not list, and why (beyond minibroker's own keys, the keys Kafka 4.0
# removed, and the prefixes of Kafka files the data file does not cover)
NOT_IN_THE_DATA_FILE = {
    # the authorizer's own properties (StandardAuthorizer), not of the broker's ConfigDef
    "allow.everyone.if.no.acl.found": "authorizer", "super.users": "authorizer",
    # BrokerSecurityConfigs, not read
    "connections.max.reauth.ms": "security", "principal.builder.class": "security",
    "security.providers": "security",
    # defineInternal() keys: accepted by Kafka, left out of its reference
    "producer.id.expiration.check.interval.ms": "internal", "unstable.api.versions.enable": "internal",
    "share.coordinator.cold.partition.snapshot.interval.ms": "internal",
    "share.coordinator.state.topic.prune.interval.ms": "internal",
    # QuotaConfig.brokerQuotaConfigs(): dynamic only, outside CONFIG_DEF
    "replica.alter.log.dirs.io.max.bytes.per.second": "dynamic quota",
    # newer than the stored ShareGroupConfig (4.1+ share group keys)
    "group.share.max.delivery.count.limit": "share 4.1+", "group.share.max.share.sessions": "share 4.1+",
    "group.share.min.delivery.count.limit": "share 4.1+", "share.fetch.max.fetch.records": "share 4.1+",
    # the stored ReplicationConfigs has no define() calls to check them against
    "eligible.leader.replicas.enable": "unchecked",
}


def test_every_catalogue_key_missing_from_the_data_file_is_accounted_for():
    kafka4 = _kafka4_keys()
    unaccounted = {name for name, key in BROKER_CONFIGS.items()
                   if name not in kafka4 and not key.minibroker_only and name not in REMOVED_BROKER_KEYS
                   and not name.startswith(("remote.", "ssl.", "sasl.", "delegation.token.", "log.local."))}
    assert unaccounted == set(NOT_IN_THE_DATA_FILE)


def test_describe_configs_reports_kafka_4_keys_with_kafka_s_defaults(minibroker):
    from confluent_kafka.admin import AdminClient, ConfigResource, ConfigSource

    admin = AdminClient({"bootstrap.servers": minibroker.bootstrap_servers})
    resource = ConfigResource(ConfigResource.Type.BROKER, str(minibroker.broker.node_id))
    entries = admin.describe_configs([resource])[resource].result(timeout=30)
    expected = {
        "group.coordinator.cached.buffer.max.bytes": "1048588",
        "group.consumer.assignment.interval.ms": "1000",
        "group.streams.max.size": "2147483647",
        "share.fetch.purgatory.purge.interval.requests": "1000",
        "add.partitions.to.txn.max.timeout.ms": "100",
        "metric.reporters": "org.apache.kafka.common.metrics.JmxReporter",
    }
    assert {name: entries[name].value for name in expected} == expected
    assert {entries[name].source for name in expected} == {ConfigSource.DEFAULT_CONFIG.value}
    # read-only as Kafka has them (group.coordinator.background.threads), or cluster-wide dynamic
    assert entries["group.coordinator.background.threads"].is_read_only
    assert not entries["group.consumer.assignment.interval.ms"].is_read_only
