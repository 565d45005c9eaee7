"""Issue 31 item 7: the broker key catalogue as Kafka 4.x has it: every key of Kafka 4.x's broker config
definitions known with Kafka's type (tests/data/kafka4_broker_keys.txt, read from apache/kafka's source),
every key a Kafka 4.3.0 broker logs at start known with its default
(tests/data/kafka43_broker_config_values.txt), and keys Kafka 4 removed still starting a broker (with a
warning naming the removal), through real clients."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from minibroker.config.keys import BROKER_CONFIGS, REMOVED_BROKER_KEYS

KAFKA4_KEYS = Path(__file__).parent / "data" / "kafka4_broker_keys.txt"
KAFKA43_VALUES = Path(__file__).parent / "data" / "kafka43_broker_config_values.txt"
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


def _kafka43_defaults() -> dict[str, str | None]:
    """Each key a Kafka 4.3.0 broker logs, with its default; None where that broker's file set it."""
    values: dict[str, str | None] = {}
    for line in KAFKA43_VALUES.read_text().splitlines():
        if line.startswith("#"):
            continue
        name, _, value = line.partition(" =")
        values[name] = None if line.endswith("# set") else value.strip()
    return values


def _as_kafka_logs_it(value: str | None) -> str | None:
    """A default as Kafka's AbstractConfig.logAll prints it: lists bracketed, classes as "class <name>"."""
    if value is None or value == "null":
        return None
    if value.startswith("[") and value.endswith("]"):
        value = value[1:-1].replace(", ", ",")
    return value.removeprefix("class ")


def _our_kafka_default(name: str) -> str | None:
    from minibroker.config.keys import format_value

    key = BROKER_CONFIGS[name]
    if key.kafka_default is not None:
        return key.kafka_default
    return None if key.default is None else format_value(key.type, key.default)


# kafka-python leaks the socket of a closed client, reported later by GC
pytestmark = pytest.mark.filterwarnings("ignore::ResourceWarning")


def test_removed_keys_are_marked_in_the_catalogue_and_its_docs():
    from minibroker.config.reference import config_reference_markdown

    assert {"zookeeper.connect", "log.message.format.version", "offsets.commit.required.acks"} <= set(
        REMOVED_BROKER_KEYS)
    # "4.x": absent from Kafka 4.3.0, the release that dropped it not pinned down
    assert {BROKER_CONFIGS[name].removed_in for name in REMOVED_BROKER_KEYS} == {"4.0", "4.x"}
    # each one marked, whether declared by minibroker or read with Kafka's other keys (BrokerKeyCatalogue)
    assert {name: key.removed_in for name, key in BROKER_CONFIGS.items() if key.removed_in} == {
        name: release for name, (release, _) in REMOVED_BROKER_KEYS.items()}
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


# Kafka keys of the catalogue that neither data file lists (a Kafka 4.3.0 broker does not log them), and
# why; beyond minibroker's own keys and the keys Kafka 4 removed
NOT_IN_THE_DATA_FILES = {
    # the authorizer's own properties (StandardAuthorizer), not of the broker's ConfigDef
    "allow.everyone.if.no.acl.found": "authorizer", "super.users": "authorizer",
    # QuotaConfig.brokerQuotaConfigs(): dynamic only, outside CONFIG_DEF
    "replica.alter.log.dirs.io.max.bytes.per.second": "dynamic quota",
    "leader.replication.throttled.rate": "dynamic quota",
    "follower.replication.throttled.rate": "dynamic quota",
    # an internal key of Kafka 4.1's ShareGroupConfig (gone by 4.3.0) that minibroker's ShareFetch applies
    "share.fetch.max.fetch.records": "share 4.1",
}


def test_every_catalogue_key_missing_from_the_data_files_is_accounted_for():
    listed = set(_kafka4_keys()) | set(_kafka43_defaults())
    unaccounted = {name for name, key in BROKER_CONFIGS.items()
                   if name not in listed and not key.minibroker_only and name not in REMOVED_BROKER_KEYS}
    assert unaccounted == set(NOT_IN_THE_DATA_FILES)


def test_the_catalogue_knows_every_key_a_kafka_4_3_broker_logs():
    kafka43 = _kafka43_defaults()
    assert len(kafka43) > 350 and "unstable.feature.versions.enable" in kafka43  # the whole list was read
    assert sorted(set(kafka43) - set(BROKER_CONFIGS)) == []
    assert sorted(set(kafka43) & set(REMOVED_BROKER_KEYS)) == []


def test_the_catalogue_gives_kafka_4_3_s_defaults():
    kafka43 = _kafka43_defaults()
    differ = {name: (_as_kafka_logs_it(theirs), _our_kafka_default(name)) for name, theirs in kafka43.items()
              if theirs is not None
              and _as_kafka_logs_it(theirs) != _our_kafka_default(name)}
    assert differ == {}


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
        "add.partitions.to.txn.retry.backoff.max.ms": "100",
        "metric.reporters": "org.apache.kafka.common.metrics.JmxReporter",
    }
    assert {name: entries[name].value for name in expected} == expected
    assert {entries[name].source for name in expected} == {ConfigSource.DEFAULT_CONFIG.value}
    # read-only as Kafka has them (group.coordinator.background.threads), or cluster-wide dynamic
    assert entries["group.coordinator.background.threads"].is_read_only
    assert not entries["group.consumer.assignment.interval.ms"].is_read_only


def _describe(bootstrap: str, resource_type, name: str) -> dict:
    from confluent_kafka.admin import AdminClient, ConfigResource

    admin = AdminClient({"bootstrap.servers": bootstrap})
    resource = ConfigResource(resource_type, name)
    return admin.describe_configs([resource])[resource].result(timeout=30)


def test_describe_configs_lists_no_key_kafka_4_removed(minibroker):
    """Issue 31: Kafka 4.x does not define the removed keys, so its DescribeConfigs never answers them:
    neither on the broker, nor as a topic key, nor as a topic key's synonym."""
    from confluent_kafka.admin import ConfigResource

    from minibroker.config.keys import REMOVED_TOPIC_KEYS

    node = str(minibroker.broker.node_id)
    broker = _describe(minibroker.bootstrap_servers, ConfigResource.Type.BROKER, node)
    assert "log.retention.ms" in broker
    assert sorted(set(broker) & set(REMOVED_BROKER_KEYS)) == []
    minibroker.create_topic("described-as-kafka-4", partitions=1)
    topic = _describe(minibroker.bootstrap_servers, ConfigResource.Type.TOPIC, "described-as-kafka-4")
    assert "message.timestamp.after.max.ms" in topic
    assert sorted(set(topic) & set(REMOVED_TOPIC_KEYS)) == []
    synonyms = {syn for entry in topic.values() for syn in entry.synonyms}
    assert "log.message.timestamp.after.max.ms" in synonyms
    assert sorted(synonyms & set(REMOVED_BROKER_KEYS)) == []


def test_a_removed_key_a_broker_was_given_is_described(minibroker_factory):
    """Kafka lists every key its broker was given, defined or not; so does minibroker, which still
    applies log.message.format.version (for teaching)."""
    from confluent_kafka.admin import ConfigResource, ConfigSource

    broker = minibroker_factory({"log.message.format.version": "2.8"})
    entries = _describe(broker.bootstrap_servers, ConfigResource.Type.BROKER, str(broker.broker.node_id))
    given = entries["log.message.format.version"]
    assert (given.value, given.source) == ("2.8", ConfigSource.STATIC_BROKER_CONFIG.value)
    assert "log.message.downconversion.enable" not in entries



def test_share_group_delivery_limits_take_kafka_s_ranges():
    # ShareGroupConfig (4.1+): group.share.max.delivery.count.limit in [5, 25], the group default in [2, 10]
    assert BROKER_CONFIGS["group.share.max.delivery.count.limit"].parse("25") == 25
    for name, value in (("group.share.max.delivery.count.limit", "26"),
                        ("group.share.delivery.count.limit", "11")):
        with pytest.raises(ValueError):
            BROKER_CONFIGS[name].parse(value)
