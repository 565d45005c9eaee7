"""Admin APIs through real clients over real sockets: kafka-python's KafkaAdminClient,
confluent-kafka's AdminClient, and our WireClient for exact error codes at every version."""

from __future__ import annotations

import os
import uuid

import pytest
from kafka import KafkaAdminClient, KafkaProducer, TopicPartition
from kafka.admin import ConfigResource, ConfigResourceType
from kafka.errors import (
    InvalidConfigurationError,
    InvalidPartitionsError,
    InvalidReplicationFactorError,
    InvalidTopicError,
    MessageSizeTooLargeError,
    TopicAlreadyExistsError,
    UnknownTopicOrPartitionError,
)

from minibroker.tools.wire import WireClient

CREATE_TOPICS, DELETE_TOPICS, DELETE_RECORDS, DESCRIBE_CONFIGS = 19, 20, 21, 32
ALTER_CONFIGS, INCREMENTAL_ALTER_CONFIGS, CREATE_PARTITIONS = 33, 44, 37
DESCRIBE_CLUSTER, DESCRIBE_LOG_DIRS, DESCRIBE_PRODUCERS = 60, 35, 61
TOPIC, BROKER = 2, 4


@pytest.fixture
def admin(minibroker):
    client = KafkaAdminClient(bootstrap_servers=minibroker.bootstrap_servers, request_timeout_ms=10000)
    yield client
    client.close()


@pytest.fixture
def wire(minibroker):
    with WireClient(minibroker.host, minibroker.port, timeout=10) as client:
        yield client


def _topic(name, partitions=1, rf=1, configs=None, assignments=()):
    return {
        "name": name,
        "num_partitions": partitions,
        "replication_factor": rf,
        "assignments": [{"partition_index": i, "broker_ids": b} for i, b in assignments],
        "configs": [{"name": k, "value": v} for k, v in (configs or {}).items()],
    }


def _create(wire, version, *topics, validate_only=False):
    r = wire.request(
        CREATE_TOPICS, version, {"topics": list(topics), "timeout_ms": 5000, "validate_only": validate_only}
    )
    return {t.name: t for t in r.topics}


def _topic_configs(wire, name, keys=None, version=4, synonyms=True):
    r = wire.request(
        DESCRIBE_CONFIGS,
        version,
        {
            "resources": [{"resource_type": TOPIC, "resource_name": name, "configuration_keys": keys}],
            "include_synonyms": synonyms,
            "include_documentation": True,
        },
    )
    return r.results[0]


def _partition_counts(admin, name):
    return len(admin.describe_topics([name])[0]["partitions"])


# -- CreateTopics ------------------------------------------------------------------------------


def test_kafka_python_create_topics_with_configs_and_validate_only(admin, wire, topic_name):
    admin.create_topics({topic_name: {"num_partitions": 3, "configs": {"retention.ms": "3600000"}}})
    assert _partition_counts(admin, topic_name) == 3
    entries = {c.name: c for c in _topic_configs(wire, topic_name).configs}
    assert entries["retention.ms"].value == "3600000"
    assert entries["retention.ms"].config_source == 1  # DYNAMIC_TOPIC_CONFIG
    assert entries["segment.bytes"].config_source == 5  # DEFAULT_CONFIG

    admin.create_topics({topic_name + "-v": {"num_partitions": 2}}, validate_only=True)
    assert topic_name + "-v" not in admin.list_topics()
    with pytest.raises(TopicAlreadyExistsError):
        admin.create_topics({topic_name: {}}, validate_only=True)


def test_create_topics_errors(admin, topic_name):
    admin.create_topics({topic_name: {}})
    with pytest.raises(TopicAlreadyExistsError):
        admin.create_topics({topic_name: {}})
    with pytest.raises(InvalidPartitionsError):
        admin.create_topics({topic_name + "-p": {"num_partitions": 0}})
    with pytest.raises(InvalidReplicationFactorError):
        admin.create_topics({topic_name + "-r": {"replication_factor": 3}})
    with pytest.raises(InvalidConfigurationError):
        admin.create_topics({topic_name + "-c": {"configs": {"no.such.config": "1"}}})
    with pytest.raises(InvalidConfigurationError):
        admin.create_topics({topic_name + "-c": {"configs": {"retention.ms": "soon"}}})
    with pytest.raises(InvalidTopicError):
        admin.create_topics({"bad/name": {}})
    assert not {topic_name + s for s in ("-p", "-r", "-c")} & set(admin.list_topics())


@pytest.mark.parametrize("version", range(8))
def test_create_topics_every_version(wire, topic_name, version):
    name = f"{topic_name}-{version}"
    r = _create(wire, version, _topic(name, 2, configs={"cleanup.policy": "compact"}))[name]
    assert r.error_code == 0
    if version >= 5:
        assert (r.num_partitions, r.replication_factor) == (2, 1)
        assert {c.name: c.value for c in r.configs}["cleanup.policy"] == "compact"
    if version >= 7:
        assert r.topic_id != b"\0" * 16
    again = _create(wire, version, _topic(name))[name]
    assert again.error_code == 36
    if version >= 1:
        assert again.error_message == f"Topic '{name}' already exists."


def test_create_topics_error_codes_on_the_wire(wire, topic_name):
    n = topic_name
    results = _create(
        wire,
        7,
        _topic(n + ".dot"),
        _topic(n + "_dot"),  # collide with each other once the first exists
        _topic(n + "-zero", 0),
        _topic(n + "-rf", 1, rf=0),
        _topic(n + "-rf3", 1, rf=3),
        _topic(n + "-cfg", configs={"segment.bytes": "1"}),
        _topic(".."),
        _topic("x" * 250),
        _topic(n + "-dup"),
        _topic(n + "-dup"),
        _topic(n + "-asg", -1, -1, assignments=[(0, [1]), (1, [1])]),
        _topic(n + "-asg-broker", -1, -1, assignments=[(0, [7])]),
        _topic(n + "-asg-gap", -1, -1, assignments=[(0, [1]), (2, [1])]),
        _topic(n + "-asg-np", 2, -1, assignments=[(0, [1])]),
        _topic(n + "-default", -1, -1),
    )
    codes = {name: r.error_code for name, r in results.items()}
    assert codes[n + ".dot"] == 0
    assert codes[n + "_dot"] == 17
    assert codes[n + "-zero"] == 37
    assert codes[n + "-rf"] == 38 and codes[n + "-rf3"] == 38
    assert codes[n + "-cfg"] == 40
    assert codes[".."] == 17 and codes["x" * 250] == 17
    assert codes[n + "-dup"] == 42
    assert codes[n + "-asg"] == 0 and results[n + "-asg"].num_partitions == 2
    assert codes[n + "-asg-broker"] == 39 and codes[n + "-asg-gap"] == 39
    assert codes[n + "-asg-np"] == 42
    assert codes[n + "-default"] == 0 and results[n + "-default"].num_partitions == 1


# -- DeleteTopics ------------------------------------------------------------------------------


def test_kafka_python_delete_topics_removes_files(minibroker, admin, topic_name):
    admin.create_topics({topic_name: {"num_partitions": 2}})
    minibroker.produce(topic_name, ["a", "b"], partition=1)
    dirs = [os.path.join(minibroker.data_dir, f"{topic_name}-{p}") for p in range(2)]
    assert all(os.path.isdir(d) for d in dirs)
    admin.delete_topics([topic_name])
    assert topic_name not in admin.list_topics()
    assert not any(os.path.exists(d) for d in dirs)
    with pytest.raises(UnknownTopicOrPartitionError):
        admin.delete_topics([topic_name])
    # the name can be used again, from offset 0
    admin.create_topics({topic_name: {}})
    assert minibroker.produce(topic_name, ["c"]) == [0]


def test_delete_topics_by_id_and_errors(wire, topic_name):
    created = _create(wire, 7, _topic(topic_name), _topic(topic_name + "-2"))
    topic_id = created[topic_name].topic_id
    unknown = uuid.uuid4().bytes
    r = wire.request(
        DELETE_TOPICS,
        6,
        {
            "timeout_ms": 5000,
            "topics": [
                {"name": None, "topic_id": topic_id},
                {"name": None, "topic_id": unknown},
                {"name": topic_name + "-2", "topic_id": created[topic_name + "-2"].topic_id},
                {"name": None, "topic_id": b"\0" * 16},
                {"name": topic_name + "-nope", "topic_id": b"\0" * 16},
            ],
        },
    )
    by_key = {(t.name, t.topic_id): t.error_code for t in r.responses}
    assert by_key[(topic_name, topic_id)] == 0
    assert by_key[(None, unknown)] == 100
    assert by_key[(topic_name + "-2", created[topic_name + "-2"].topic_id)] == 42
    assert by_key[(None, b"\0" * 16)] == 42
    assert by_key[(topic_name + "-nope", b"\0" * 16)] == 3
    r = wire.request(DELETE_TOPICS, 0, {"topic_names": [topic_name, topic_name + "-2"], "timeout_ms": 5000})
    assert {t.name: t.error_code for t in r.responses} == {topic_name: 3, topic_name + "-2": 0}


def test_delete_topic_disabled(minibroker_factory):
    broker = minibroker_factory({"delete.topic.enable": "false"})
    broker.create_topic("keep")
    with WireClient(broker.host, broker.port) as wire:
        assert (
            wire.request(DELETE_TOPICS, 4, {"topic_names": ["keep"], "timeout_ms": 1}).responses[0].error_code
            == 73
        )
        assert (
            wire.request(DELETE_TOPICS, 2, {"topic_names": ["keep"], "timeout_ms": 1}).responses[0].error_code
            == 42
        )


# -- CreatePartitions --------------------------------------------------------------------------


def test_kafka_python_create_partitions(minibroker, admin, topic_name):
    admin.create_topics({topic_name: {"num_partitions": 1}})
    admin.create_partitions({topic_name: 3}, validate_only=True)
    assert _partition_counts(admin, topic_name) == 1
    admin.create_partitions({topic_name: 3})
    assert _partition_counts(admin, topic_name) == 3
    assert minibroker.produce(topic_name, ["x"], partition=2) == [0]
    with pytest.raises(InvalidPartitionsError):
        admin.create_partitions({topic_name: 2})
    with pytest.raises(InvalidPartitionsError):
        admin.create_partitions({topic_name: 3})
    with pytest.raises(UnknownTopicOrPartitionError):
        admin.create_partitions({topic_name + "-nope": 3})


def test_create_partitions_assignment_errors(wire, topic_name):
    _create(wire, 4, _topic(topic_name))
    r = wire.request(
        CREATE_PARTITIONS,
        3,
        {
            "timeout_ms": 1000,
            "validate_only": False,
            "topics": [{"name": topic_name, "count": 3, "assignments": [{"broker_ids": [1]}]}],
        },
    )
    assert r.results[0].error_code == 39
    r = wire.request(
        CREATE_PARTITIONS,
        0,
        {
            "timeout_ms": 1000,
            "validate_only": False,
            "topics": [{"name": topic_name, "count": 2, "assignments": [{"broker_ids": [1]}]}],
        },
    )
    assert r.results[0].error_code == 0


# -- DescribeConfigs / AlterConfigs / IncrementalAlterConfigs ----------------------------------


def test_kafka_python_describe_configs_topic_and_broker(minibroker, admin, topic_name):
    admin.create_topics({topic_name: {"configs": {"max.message.bytes": "2000"}}})
    topic = admin.describe_configs(
        [ConfigResource(ConfigResourceType.TOPIC, topic_name)], include_synonyms=True, config_filter="all"
    )
    entry = topic["topic"][topic_name]["max.message.bytes"]
    assert entry["value"] == "2000" and entry["config_source"] == "DYNAMIC_TOPIC_CONFIG"
    assert [s["name"] for s in entry["synonyms"]][:2] == ["max.message.bytes", "message.max.bytes"]
    node = str(minibroker.broker.node_id)
    broker = admin.describe_configs([ConfigResource(ConfigResourceType.BROKER, node)], config_filter="all")
    entries = broker["broker"][node]
    assert entries["log.segment.bytes"]["value"] == "1073741824"
    assert entries["log.segment.bytes"]["read_only"] is False
    assert entries["log.dirs"]["config_source"] == "STATIC_BROKER_CONFIG"
    assert entries["node.id"]["read_only"] is True


@pytest.mark.parametrize("version", range(5))
def test_describe_configs_every_version(wire, topic_name, version):
    _create(wire, 4, _topic(topic_name, configs={"retention.ms": "1000"}))
    result = _topic_configs(wire, topic_name, ["retention.ms", "segment.ms", "unknown.key"], version=version)
    assert result.error_code == 0
    entries = {c.name: c for c in result.configs}
    assert set(entries) == {"retention.ms", "segment.ms"}
    assert entries["retention.ms"].value == "1000"
    if version == 0:
        assert entries["retention.ms"].is_default is False and entries["segment.ms"].is_default is True
    else:
        assert entries["retention.ms"].config_source == 1
        assert [s.name for s in entries["retention.ms"].synonyms] == ["retention.ms", "log.retention.hours"]
    if version >= 3:
        assert entries["retention.ms"].config_type == 5  # LONG
        assert entries["retention.ms"].documentation


def test_describe_configs_errors(wire, minibroker):
    r = wire.request(
        DESCRIBE_CONFIGS,
        4,
        {
            "include_synonyms": False,
            "include_documentation": False,
            "resources": [
                {"resource_type": TOPIC, "resource_name": "no-such-topic", "configuration_keys": None},
                {"resource_type": TOPIC, "resource_name": "bad name", "configuration_keys": None},
                {"resource_type": BROKER, "resource_name": "99", "configuration_keys": None},
                {"resource_type": BROKER, "resource_name": "", "configuration_keys": None},
                {"resource_type": 1, "resource_name": "x", "configuration_keys": None},
            ],
        },
    )
    assert [x.error_code for x in r.results] == [3, 17, 42, 0, 42]
    # the only cluster-wide dynamic default is the min.insync.replicas ELR keeps (KIP-966)
    assert [(c.name, c.config_source) for c in r.results[3].configs] == [("min.insync.replicas", 3)]


def test_kafka_python_alter_configs_replaces_and_applies_live(minibroker, admin, topic_name):
    admin.create_topics({topic_name: {"configs": {"retention.ms": "5000", "segment.ms": "60000"}}})
    admin.alter_configs(
        [ConfigResource(ConfigResourceType.TOPIC, topic_name, configs={"max.message.bytes": "200"})],
        incremental=False,
    )
    # kafka-python's legacy path re-sends the other overrides itself
    configs = admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, topic_name)])
    assert {k: v["value"] for k, v in configs["topic"][topic_name].items()} == {
        "max.message.bytes": "200",
        "retention.ms": "5000",
        "segment.ms": "60000",
    }
    producer = KafkaProducer(bootstrap_servers=minibroker.bootstrap_servers, retries=0)
    try:
        with pytest.raises(MessageSizeTooLargeError):
            producer.send(topic_name, b"x" * 500).get(10)
        assert producer.send(topic_name, b"small").get(10).offset == 0
    finally:
        producer.close(5)
    result = admin.alter_configs(
        [ConfigResource(ConfigResourceType.TOPIC, topic_name, configs={"retention.ms": "never"})],
        incremental=False,
    )
    assert "InvalidConfiguration" in repr(result["topic"][topic_name])


@pytest.mark.parametrize("version", range(3))
def test_alter_configs_replaces_every_override(wire, topic_name, version):
    _create(wire, 4, _topic(topic_name, configs={"retention.ms": "5000", "segment.ms": "60000"}))

    def alter(configs, validate_only=False, name=topic_name):
        r = wire.request(
            ALTER_CONFIGS,
            version,
            {
                "validate_only": validate_only,
                "resources": [
                    {
                        "resource_type": TOPIC,
                        "resource_name": name,
                        "configs": [{"name": k, "value": v} for k, v in configs],
                    }
                ],
            },
        )
        return r.responses[0].error_code

    assert alter([("segment.bytes", "1000000")], validate_only=True) == 0
    assert alter([("segment.bytes", "1000000")]) == 0
    overrides = {c.name: c.value for c in _topic_configs(wire, topic_name).configs if c.config_source == 1}
    assert overrides == {"segment.bytes": "1000000"}
    assert alter([("segment.bytes", "1")]) == 40
    assert alter([("segment.bytes", None)]) == 42
    assert alter([("segment.bytes", "2000000"), ("segment.bytes", "3000000")]) == 42
    assert alter([("segment.bytes", "2000000")], name=topic_name + "-nope") == 3


def test_kafka_python_incremental_alter_configs(admin, wire, topic_name):
    admin.create_topics({topic_name: {"configs": {"retention.ms": "5000"}}})
    admin.alter_configs(
        [
            ConfigResource(
                ConfigResourceType.TOPIC,
                topic_name,
                configs={
                    "cleanup.policy": ("APPEND", "compact"),
                    "segment.bytes": ("SET", "1048576"),
                    "retention.ms": ("DELETE", None),
                },
            )
        ],
        incremental=True,
    )
    entries = {c.name: c for c in _topic_configs(wire, topic_name).configs}
    assert entries["cleanup.policy"].value == "delete,compact"
    assert entries["segment.bytes"].value == "1048576" and entries["segment.bytes"].config_source == 1
    assert entries["retention.ms"].config_source == 5


def test_incremental_alter_configs_errors_and_validate_only(wire, topic_name):
    _create(wire, 4, _topic(topic_name))

    def alter(resources, validate_only=False):
        r = wire.request(
            INCREMENTAL_ALTER_CONFIGS, 1, {"resources": resources, "validate_only": validate_only}
        )
        return [x.error_code for x in r.responses]

    def res(name, *ops, rtype=TOPIC):
        return {
            "resource_type": rtype,
            "resource_name": name,
            "configs": [{"name": k, "config_operation": op, "value": v} for k, op, v in ops],
        }

    assert alter([res(topic_name, ("retention.ms", 0, "100"))], validate_only=True) == [0]
    assert {c.name: c.config_source for c in _topic_configs(wire, topic_name).configs}["retention.ms"] == 5
    assert alter([res(topic_name, ("retention.ms", 2, "100"))]) == [40]  # APPEND on a non-list key
    assert alter([res(topic_name, ("no.such", 0, "1"))]) == [40]
    assert alter([res(topic_name + "-nope", ("retention.ms", 0, "1"))]) == [3]
    assert alter([res(topic_name, ("retention.ms", 0, "1"), ("retention.ms", 1, None))]) == [42]
    assert alter([res(topic_name, ("retention.ms", 0, None))]) == [42]
    assert alter([res("", ("log.dirs", 0, "/tmp"), rtype=BROKER)]) == [42]  # not dynamic


def test_broker_dynamic_configs_apply_to_topics(minibroker_factory):
    broker = minibroker_factory()
    broker.create_topic("follows")
    broker.create_topic("overrides", config={"max.message.bytes": "100000"})
    node = str(broker.broker.node_id)
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap_servers)
    try:
        admin.alter_configs(
            [ConfigResource(ConfigResourceType.BROKER, node, configs={"message.max.bytes": "300"})],
            incremental=True,
        )
        entries = admin.describe_configs(
            [ConfigResource(ConfigResourceType.BROKER, node)], include_synonyms=True
        )["broker"][node]
        assert entries["message.max.bytes"]["value"] == "300"
        assert entries["message.max.bytes"]["config_source"] == "DYNAMIC_BROKER_CONFIG"
        topic = admin.describe_configs(
            [ConfigResource(ConfigResourceType.TOPIC, "follows")], include_synonyms=True, config_filter="all"
        )["topic"]["follows"]
        assert topic["max.message.bytes"]["value"] == "300"
        assert topic["max.message.bytes"]["config_source"] == "DYNAMIC_BROKER_CONFIG"
    finally:
        admin.close()
    # cluster-wide default, under the empty broker name (kafka-python cannot name it)
    with WireClient(broker.host, broker.port) as wire:
        r = wire.request(
            INCREMENTAL_ALTER_CONFIGS,
            1,
            {
                "validate_only": False,
                "resources": [
                    {
                        "resource_type": BROKER,
                        "resource_name": "",
                        "configs": [{"name": "log.retention.ms", "config_operation": 0, "value": "123456"}],
                    }
                ],
            },
        )
        assert r.responses[0].error_code == 0
        r = wire.request(
            DESCRIBE_CONFIGS,
            4,
            {
                "include_synonyms": True,
                "include_documentation": False,
                "resources": [{"resource_type": BROKER, "resource_name": "", "configuration_keys": None}],
            },
        )
        assert [(c.name, c.value, c.config_source) for c in r.results[0].configs] == [
            ("min.insync.replicas", "1", 3), ("log.retention.ms", "123456", 3)
        ]
        retention = {c.name: c for c in _topic_configs(wire, "follows").configs}["retention.ms"]
        assert (retention.value, retention.config_source) == ("123456", 3)
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap_servers, retries=0)
    try:
        with pytest.raises(MessageSizeTooLargeError):
            producer.send("follows", b"x" * 1000).get(10)
        assert producer.send("overrides", b"x" * 1000).get(10).offset == 0
    finally:
        producer.close(5)
    # both dynamic layers survive a restart, as Kafka keeps them in its metadata
    broker.restart()
    with WireClient(broker.host, broker.port) as wire:
        retention = {c.name: c for c in _topic_configs(wire, "follows").configs}["retention.ms"]
        assert (retention.value, retention.config_source) == ("123456", 3)
        size = {c.name: c for c in _topic_configs(wire, "follows").configs}["max.message.bytes"]
        assert (size.value, size.config_source) == ("300", 2)
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap_servers, retries=0)
    try:  # and the live log applies it
        with pytest.raises(MessageSizeTooLargeError):
            producer.send("follows", b"x" * 1000).get(10)
    finally:
        producer.close(5)


def test_topic_configs_survive_restart(minibroker_factory):
    broker = minibroker_factory()
    broker.create_topic("kept", config={"retention.ms": "1000"})
    with WireClient(broker.host, broker.port) as wire:
        r = wire.request(
            INCREMENTAL_ALTER_CONFIGS,
            1,
            {
                "validate_only": False,
                "resources": [
                    {
                        "resource_type": TOPIC,
                        "resource_name": "kept",
                        "configs": [{"name": "segment.ms", "config_operation": 0, "value": "70000"}],
                    }
                ],
            },
        )
        assert r.responses[0].error_code == 0
    broker.restart()
    with WireClient(broker.host, broker.port) as wire:
        entries = {c.name: c.value for c in _topic_configs(wire, "kept").configs}
    assert (entries["retention.ms"], entries["segment.ms"]) == ("1000", "70000")


# -- DeleteRecords, DescribeCluster, DescribeLogDirs, DescribeProducers ------------------------


def test_kafka_python_delete_records(minibroker, admin, topic_name):
    admin.create_topics({topic_name: {}})
    minibroker.produce(topic_name, [f"v{i}" for i in range(5)])
    result = admin.delete_records({TopicPartition(topic_name, 0): 3})
    assert result[TopicPartition(topic_name, 0)]["low_watermark"] == 3
    assert [r.offset for r in minibroker.consume(topic_name, 2)] == [3, 4]
    assert (
        admin.delete_records({TopicPartition(topic_name, 0): 1})[TopicPartition(topic_name, 0)][
            "low_watermark"
        ]
        == 3
    )  # below the start: nothing changes


def test_delete_records_errors(minibroker, wire, topic_name):
    _create(wire, 4, _topic(topic_name), _topic(topic_name + "-c", configs={"cleanup.policy": "compact"}))
    minibroker.produce(topic_name, ["a", "b"])
    r = wire.request(
        DELETE_RECORDS,
        2,
        {
            "timeout_ms": 1000,
            "topics": [
                {
                    "name": topic_name,
                    "partitions": [{"partition_index": 0, "offset": 5}, {"partition_index": 1, "offset": 0}],
                },
                {"name": topic_name + "-c", "partitions": [{"partition_index": 0, "offset": 0}]},
                {"name": topic_name + "-x", "partitions": [{"partition_index": 0, "offset": 0}]},
            ],
        },
    )
    got = [(p.error_code, p.low_watermark) for t in r.topics for p in t.partitions]
    assert got == [(1, -1), (3, -1), (44, -1), (3, -1)]
    r = wire.request(
        DELETE_RECORDS,
        0,
        {
            "timeout_ms": 1000,
            "topics": [{"name": topic_name, "partitions": [{"partition_index": 0, "offset": -1}]}],
        },
    )
    assert (r.topics[0].partitions[0].error_code, r.topics[0].partitions[0].low_watermark) == (0, 2)


def test_kafka_python_describe_cluster_and_log_dirs(minibroker, admin, topic_name):
    cluster = admin.describe_cluster()
    assert cluster["cluster_id"] == minibroker.broker.cluster_id
    assert cluster["controller_id"] == minibroker.broker.node_id
    assert [(b["node_id"] if "node_id" in b else b["broker_id"], b["port"]) for b in cluster["brokers"]] == [
        (minibroker.broker.node_id, minibroker.port)
    ]
    admin.create_topics({topic_name: {"num_partitions": 2}})
    minibroker.produce(topic_name, ["payload"] * 3, partition=1)
    dirs = admin.describe_log_dirs(topic_partitions={topic_name: [0, 1]})
    text = repr(dirs)
    assert os.path.abspath(minibroker.data_dir) in text and topic_name in text


def test_describe_log_dirs_sizes_on_the_wire(minibroker, wire, topic_name):
    _create(wire, 4, _topic(topic_name, 2))
    minibroker.produce(topic_name, ["payload"] * 3, partition=1)
    for version in range(5):
        r = wire.request(
            DESCRIBE_LOG_DIRS, version, {"topics": [{"topic": topic_name, "partitions": [0, 1, 7]}]}
        )
        (result,) = r.results
        assert result.error_code == 0 and result.log_dir == os.path.abspath(minibroker.data_dir)
        sizes = {p.partition_index: p.partition_size for t in result.topics for p in t.partitions}
        assert sizes[0] == 0 and sizes[1] > 0 and 7 not in sizes
        if version >= 4:
            assert result.total_bytes > 0 and result.usable_bytes > 0


def test_describe_cluster_on_the_wire(minibroker, wire):
    r = wire.request(DESCRIBE_CLUSTER, 1, {"include_cluster_authorized_operations": True, "endpoint_type": 1})
    assert r.error_code == 0 and r.cluster_authorized_operations > 0
    assert [(b.broker_id, b.port) for b in r.brokers] == [(minibroker.broker.node_id, minibroker.port)]
    r = wire.request(
        DESCRIBE_CLUSTER, 1, {"include_cluster_authorized_operations": False, "endpoint_type": 2}
    )
    assert r.error_code == 115


def test_kafka_python_describe_producers(minibroker, admin, topic_name):
    admin.create_topics({topic_name: {}})
    minibroker.produce(topic_name, ["a", "b", "c"], enable_idempotence=True, acks="all")
    states = admin.describe_producers([TopicPartition(topic_name, 0)])
    (state,) = states.values()
    producers = state.active_producers if hasattr(state, "active_producers") else state["active_producers"]
    assert len(producers) == 1
    with WireClient(minibroker.host, minibroker.port) as wire:
        resp = wire.request(
            DESCRIBE_PRODUCERS, 0, {"topics": [{"name": topic_name, "partition_indexes": [0, 5]}]}
        )
    p0, p5 = resp.topics[0].partitions
    assert p0.error_code == 0 and p0.active_producers[0].last_sequence == 2
    assert p5.error_code == 3


# -- confluent-kafka ---------------------------------------------------------------------------


def test_confluent_admin_client(minibroker, topic_name):
    confluent_kafka = pytest.importorskip("confluent_kafka")
    from confluent_kafka.admin import (
        AdminClient,
        AlterConfigOpType,
        ConfigEntry,
        ConfigResource,
        NewPartitions,
        NewTopic,
    )

    admin = AdminClient({"bootstrap.servers": minibroker.bootstrap_servers})
    futures = admin.create_topics([NewTopic(topic_name, 2, 1, config={"retention.ms": "7200000"})])
    futures[topic_name].result(10)
    with pytest.raises(confluent_kafka.KafkaException) as exc:
        admin.create_topics([NewTopic(topic_name, 2, 1)])[topic_name].result(10)
    assert exc.value.args[0].code() == confluent_kafka.KafkaError.TOPIC_ALREADY_EXISTS

    admin.create_partitions([NewPartitions(topic_name, 4)])[topic_name].result(10)
    assert len(admin.list_topics(topic_name, timeout=10).topics[topic_name].partitions) == 4

    resource = ConfigResource("topic", topic_name)
    configs = admin.describe_configs([resource])[resource].result(10)
    assert configs["retention.ms"].value == "7200000"
    assert configs["retention.ms"].source == confluent_kafka.admin.ConfigSource.DYNAMIC_TOPIC_CONFIG.value

    change = ConfigResource(
        "topic",
        topic_name,
        incremental_configs=[
            ConfigEntry("retention.ms", "60000", incremental_operation=AlterConfigOpType.SET)
        ],
    )
    admin.incremental_alter_configs([change])[change].result(10)
    assert admin.describe_configs([resource])[resource].result(10)["retention.ms"].value == "60000"

    broker_res = ConfigResource("broker", str(minibroker.broker.node_id))
    broker_configs = admin.describe_configs([broker_res])[broker_res].result(10)
    assert broker_configs["num.partitions"].value == "1"

    minibroker.produce(topic_name, ["a", "b", "c"], partition=0)
    tp = confluent_kafka.TopicPartition(topic_name, 0, 2)
    deleted = admin.delete_records([tp])[tp].result(10)
    assert deleted.low_watermark == 2

    cluster = admin.describe_cluster().result(10)
    assert cluster.cluster_id == minibroker.broker.cluster_id
    assert [n.id for n in cluster.nodes] == [minibroker.broker.node_id]

    admin.delete_topics([topic_name])[topic_name].result(10)
    gone = admin.describe_configs([resource])[resource]
    with pytest.raises(confluent_kafka.KafkaException) as exc:
        gone.result(10)
    assert exc.value.args[0].code() == confluent_kafka.KafkaError.UNKNOWN_TOPIC_OR_PART


def test_confluent_describe_configs_reports_the_cluster_min_isr_as_kafka_4_1(minibroker_factory, tmp_path):
    # KIP-966: with eligible.leader.replicas.version 1 finalized (as minibroker advertises), Kafka 4.1+
    # keeps a cluster-level min.insync.replicas (the static value, written once) that every topic
    # inherits as DYNAMIC_DEFAULT_BROKER_CONFIG: confluent-kafka-python's test_incremental_alter_configs
    confluent_kafka = pytest.importorskip("confluent_kafka")
    from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic

    data_dir = str(tmp_path / "data")  # made by the broker's first start, which saves the value
    broker = minibroker_factory(data_dir=data_dir)
    with open(os.path.join(data_dir, "minibroker-dynamic-configs.json")) as f:
        assert '"min.insync.replicas": "1"' in f.read()
    admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
    for name in ("ck-cfg-1", "ck-cfg-2"):
        admin.create_topics([NewTopic(name, 2, 1, config={"compression.type": "gzip"})])[name].result(10)

    def non_default(resource):
        configs = admin.describe_configs([resource])[resource].result(10)
        return sorted(str(e) for e in configs.values() if not e.is_default)

    def alter(resource):
        admin.incremental_alter_configs([resource])[resource].result(10)

    res1 = ConfigResource("topic", "ck-cfg-1", incremental_configs=[
        ConfigEntry("cleanup.policy", "compact", incremental_operation=AlterConfigOpType.APPEND),
        ConfigEntry("retention.ms", "10000", incremental_operation=AlterConfigOpType.SET)])
    res2 = ConfigResource("topic", "ck-cfg-2", incremental_configs=[
        ConfigEntry("cleanup.policy", "delete", incremental_operation=AlterConfigOpType.SUBTRACT),
        ConfigEntry("retention.ms", "5000", incremental_operation=AlterConfigOpType.SET)])
    alter(res1)
    alter(res2)
    assert non_default(res1) == ['cleanup.policy="delete,compact"', 'compression.type="gzip"',
                                 'min.insync.replicas="1"', 'retention.ms="10000"']
    assert non_default(res2) == ['cleanup.policy=""', 'compression.type="gzip"', 'min.insync.replicas="1"',
                                 'retention.ms="5000"']
    entry = admin.describe_configs([res1])[res1].result(10)["min.insync.replicas"]
    dynamic_default = confluent_kafka.admin.ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value
    assert entry.source == dynamic_default
    with WireClient(broker.host, broker.port) as wire:  # confluent-kafka keeps one synonym per name
        (entry,) = _topic_configs(wire, "ck-cfg-1", ["min.insync.replicas"]).configs
    assert [(s.value, s.source) for s in entry.synonyms] == [("1", 3), ("1", 5)]

    # the cluster-level value cannot be removed, a broker-level one not set, as Kafka refuses them
    # (confluent-kafka cannot name the cluster's empty broker resource: the wire client does)
    def alter_broker(name, op, value):
        with WireClient(broker.host, broker.port) as wire:
            r = wire.request(INCREMENTAL_ALTER_CONFIGS, 1, {"validate_only": False, "resources": [{
                "resource_type": BROKER, "resource_name": name,
                "configs": [{"name": "min.insync.replicas", "config_operation": op, "value": value}]}]})
        return r.responses[0].error_code, r.responses[0].error_message

    assert alter_broker("", 1, None) == (40, "Cluster-level min.insync.replicas cannot be removed while ELR "
                                             "is enabled.")
    node = str(broker.broker.node_id)
    change = ConfigResource("broker", node, incremental_configs=[
        ConfigEntry("min.insync.replicas", "1", incremental_operation=AlterConfigOpType.SET)])
    with pytest.raises(confluent_kafka.KafkaException) as exc:
        alter(change)
    assert exc.value.args[0].code() == confluent_kafka.KafkaError.INVALID_CONFIG
    assert exc.value.args[0].str() == ("Broker-level min.insync.replicas cannot be altered while ELR is "
                                       "enabled.")
    with WireClient(broker.host, broker.port) as wire:  # the legacy form would drop it: refused too
        r = wire.request(ALTER_CONFIGS, 2, {"validate_only": False, "resources": [{
            "resource_type": BROKER, "resource_name": "",
            "configs": [{"name": "log.retention.ms", "value": "100000"}]}]})
        assert (r.responses[0].error_code, r.responses[0].error_message) == (
            40, "Cluster-level min.insync.replicas cannot be removed while ELR is enabled.")
    assert alter_broker("", 0, "2") == (0, None)  # a SET at cluster level is what changes it
    assert admin.describe_configs([res1])[res1].result(10)["min.insync.replicas"].value == "2"

    # written once: a later start with another static value keeps the cluster-level one, as Kafka does
    broker.stop()
    broker = minibroker_factory({"min.insync.replicas": "3"}, data_dir=data_dir)
    admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
    entry = admin.describe_configs([res2])[res2].result(10)["min.insync.replicas"]
    assert (entry.value, entry.source) == ("2", dynamic_default)
    with WireClient(broker.host, broker.port) as wire:
        (entry,) = _topic_configs(wire, "ck-cfg-2", ["min.insync.replicas"]).configs
    assert [(s.value, s.source) for s in entry.synonyms] == [("2", 3), ("3", 4), ("1", 5)]


def test_a_saved_broker_level_min_isr_gives_way_to_the_cluster_level_one(minibroker_factory, tmp_path):
    # Kafka enabling ELR removes every broker-level min.insync.replicas and keeps (or writes) the
    # cluster-level one: a data dir saved by a broker without ELR starts the same way
    import json

    data_dir = tmp_path / "data"
    data_dir.mkdir()
    saved = data_dir / "minibroker-dynamic-configs.json"
    saved.write_text(json.dumps({"broker": {"min.insync.replicas": "2", "message.max.bytes": "5000"},
                                 "cluster_default": {}}))
    broker = minibroker_factory({"min.insync.replicas": "3"}, data_dir=str(data_dir))
    assert json.loads(saved.read_text()) == {"broker": {"message.max.bytes": "5000"},
                                             "cluster_default": {"min.insync.replicas": "3"}}
    node = str(broker.broker.node_id)
    with WireClient(broker.host, broker.port) as wire:
        resource = {"resource_type": BROKER, "resource_name": node,
                    "configuration_keys": ["min.insync.replicas"]}
        r = wire.request(DESCRIBE_CONFIGS, 4, {"include_synonyms": True, "include_documentation": False,
                                               "resources": [resource]})
    (entry,) = r.results[0].configs
    assert (entry.value, entry.config_source) == ("3", 3)
    assert [(s.value, s.source) for s in entry.synonyms] == [("3", 3), ("3", 4), ("1", 5)]


def test_empty_cleanup_policy_is_accepted(minibroker, wire, topic_name):
    # Kafka's ValidList accepts an empty cleanup.policy (nothing deleted, nothing compacted):
    # CreateTopics, SET "" and SUBTRACT of the last value all succeed, through confluent-kafka
    confluent_kafka = pytest.importorskip("confluent_kafka")
    from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic

    admin = AdminClient({"bootstrap.servers": minibroker.bootstrap_servers})
    admin.create_topics([NewTopic(topic_name, 1, 1, config={"cleanup.policy": ""})])[topic_name].result(10)
    resource = ConfigResource("topic", topic_name)
    entry = admin.describe_configs([resource])[resource].result(10)["cleanup.policy"]
    assert (entry.value, entry.source) == ("", confluent_kafka.admin.ConfigSource.DYNAMIC_TOPIC_CONFIG.value)

    def alter(op, value):
        change = ConfigResource("topic", topic_name, incremental_configs=[
            ConfigEntry("cleanup.policy", value, incremental_operation=op)])
        admin.incremental_alter_configs([change])[change].result(10)
        return admin.describe_configs([resource])[resource].result(10)["cleanup.policy"].value

    assert alter(AlterConfigOpType.SET, "compact,delete") == "compact,delete"
    assert alter(AlterConfigOpType.SUBTRACT, "compact") == "delete"
    assert alter(AlterConfigOpType.SUBTRACT, "delete") == ""
    assert alter(AlterConfigOpType.SET, "delete") == "delete"
    assert alter(AlterConfigOpType.SET, "") == ""
    with pytest.raises(confluent_kafka.KafkaException) as exc:
        alter(AlterConfigOpType.SET, "delete,nope")
    assert exc.value.args[0].code() == confluent_kafka.KafkaError.INVALID_CONFIG
    # an empty policy deletes nothing by age and refuses DeleteRecords, as Kafka's
    plog = minibroker.broker.replicas.get_log(topic_name, 0)
    assert plog.config["cleanup.policy"] == []
    r = wire.request(DELETE_RECORDS, 2, {"topics": [{"name": topic_name, "partitions": [
        {"partition_index": 0, "offset": 0}]}], "timeout_ms": 1000})
    assert r.topics[0].partitions[0].error_code == 44  # POLICY_VIOLATION


def test_authorized_operations_as_kafka_without_an_authorizer(minibroker, wire, admin, topic_name):
    # no authorizer: every operation Kafka supports on the resource type, when asked for
    confluent_kafka = pytest.importorskip("confluent_kafka")
    from confluent_kafka import TopicCollection
    from confluent_kafka.admin import AclOperation as Op
    from confluent_kafka.admin import AdminClient

    minibroker.create_topic(topic_name)
    topic_ops = {Op.READ, Op.WRITE, Op.CREATE, Op.DELETE, Op.ALTER, Op.DESCRIBE, Op.DESCRIBE_CONFIGS,
                 Op.ALTER_CONFIGS}
    cluster_ops = {Op.CREATE, Op.ALTER, Op.DESCRIBE, Op.CLUSTER_ACTION, Op.DESCRIBE_CONFIGS, Op.ALTER_CONFIGS,
                   Op.IDEMPOTENT_WRITE}
    group_ops = {Op.READ, Op.DESCRIBE, Op.DELETE, Op.DESCRIBE_CONFIGS, Op.ALTER_CONFIGS}
    client = AdminClient({"bootstrap.servers": minibroker.bootstrap_servers})
    topic = client.describe_topics(TopicCollection([topic_name]), include_authorized_operations=True)
    assert set(topic[topic_name].result(10).authorized_operations) == topic_ops
    cluster = client.describe_cluster(include_authorized_operations=True).result(10)
    assert set(cluster.authorized_operations) == cluster_ops
    group = f"{topic_name}-g"
    consumer = confluent_kafka.Consumer({"bootstrap.servers": minibroker.bootstrap_servers,
                                         "group.id": group})
    consumer.commit(offsets=[confluent_kafka.TopicPartition(topic_name, 0, 0)], asynchronous=False)
    consumer.close()
    described = client.describe_consumer_groups([group], include_authorized_operations=True)[group].result(10)
    assert set(described.authorized_operations) == group_ops
    (python_topic,) = admin.describe_topics([topic_name])
    assert set(python_topic["authorized_operations"]) == {op.name for op in topic_ops}

    # on the wire: Metadata v10 carries the cluster's (dropped in v11), unknown topic ids none
    def metadata(version, topics, cluster):
        body = {"topics": topics, "allow_auto_topic_creation": False,
                "include_cluster_authorized_operations": cluster, "include_topic_authorized_operations": True}
        return wire.request(3, version, body)

    r = metadata(10, [{"name": topic_name, "topic_id": b"\0" * 16}, {"name": "no-such-" + topic_name,
                                                                    "topic_id": b"\0" * 16}], True)
    assert bin(r.cluster_authorized_operations).count("1") == 7
    counts = [(t.error_code, bin(t.topic_authorized_operations).count("1")) for t in r.topics]
    assert counts == [(0, 8), (3, 8)]
    r = metadata(12, [{"name": None, "topic_id": b"\1" * 16}], False)
    assert [(t.error_code, t.topic_authorized_operations) for t in r.topics] == [(100, -2147483648)]
    r = metadata(9, None, False)
    assert r.cluster_authorized_operations == -2147483648
    r = wire.request(15, 5, {"groups": [group], "include_authorized_operations": False})
    assert r.groups[0].authorized_operations == -2147483648


def test_every_kafka_broker_config_name_is_known(minibroker_factory):
    # Kafka accepts every name of its broker configuration definition, used by minibroker or not:
    # loaded without a warning, described with Kafka's default, altered when Kafka allows it at run time
    confluent_kafka = pytest.importorskip("confluent_kafka")
    from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry
    from confluent_kafka.admin import ConfigResource as CkResource

    broker = minibroker_factory({"zookeeper.session.timeout.ms": "20000", "ssl.client.auth": "required"})
    assert not broker.broker.config.unknown
    admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
    node = str(broker.broker.node_id)
    resource = CkResource("broker", node)
    described = admin.describe_configs([resource])[resource].result(10)
    assert described["sasl.kerberos.min.time.before.relogin"].value == "60000"
    assert described["sasl.kerberos.min.time.before.relogin"].is_default
    assert described["log.cleaner.io.max.bytes.per.second"].value == "1.7976931348623157E308"
    assert described["zookeeper.session.timeout.ms"].value == "20000"
    assert described["zookeeper.session.timeout.ms"].is_read_only
    assert described["ssl.keystore.key"].is_sensitive and described["ssl.keystore.key"].value is None

    def alter(name, value):
        change = CkResource("broker", node, incremental_configs=[
            ConfigEntry(name, value, incremental_operation=AlterConfigOpType.SET)])
        admin.incremental_alter_configs([change])[change].result(10)

    alter("sasl.kerberos.min.time.before.relogin", "120000")  # dynamic in Kafka (per broker)
    entry = admin.describe_configs([resource])[resource].result(10)["sasl.kerberos.min.time.before.relogin"]
    dynamic_broker = confluent_kafka.admin.ConfigSource.DYNAMIC_BROKER_CONFIG.value
    assert (entry.value, entry.source) == ("120000", dynamic_broker)
    python_admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap_servers)
    try:  # the legacy AlterConfigs, through kafka-python
        suites = ConfigResource(ConfigResourceType.BROKER, node,
                                configs={"ssl.cipher.suites": "TLS_AES_128_GCM_SHA256"})
        result = python_admin.alter_configs([suites], incremental=False)
        assert result == {"broker": {node: "OK"}}
    finally:
        python_admin.close()
    assert broker.broker.config["ssl.cipher.suites"] == ["TLS_AES_128_GCM_SHA256"]
    for name, value, code in (("zookeeper.session.timeout.ms", "30000", "INVALID_CONFIG"),  # Kafka 4: unknown
                              ("group.share.delivery.count.limit", "11", "INVALID_REQUEST"),  # read-only
                              ("log.cleaner.io.buffer.size", "-1", "INVALID_CONFIG"),  # [0,...]
                              ("no.such.broker.key", "1", "INVALID_CONFIG")):
        with pytest.raises(confluent_kafka.KafkaException) as exc:
            alter(name, value)
        assert exc.value.args[0].name() == code, name


def test_list_offsets_max_timestamp_answers_the_record(minibroker_factory, topic_name):
    # KAFKA-16310: ListOffsets MAX_TIMESTAMP (-3) answers the offset of the record holding the largest
    # timestamp, not the last offset of its batch: t+100, t+400, t+200 in one batch answer offset 1,
    # also after a clean restart and after a kill (the indexes and recovery only know batches)
    confluent_kafka = pytest.importorskip("confluent_kafka")
    from confluent_kafka.admin import AdminClient, OffsetSpec

    from minibroker.records.framing import scan_entries

    broker = minibroker_factory(mode="process")
    broker.create_topic(topic_name)
    # One batch whatever the machine's load: linger outlasts any pause between the three produce() calls,
    # and flush() sends at once (500 ms made two batches once on a loaded machine)
    producer = confluent_kafka.Producer({"bootstrap.servers": broker.bootstrap_servers, "linger.ms": 60_000})
    t = 1_700_000_000_000
    for delta in (100, 400, 200):
        producer.produce(topic_name, b"v%d" % delta, partition=0, timestamp=t + delta)
    assert producer.flush(10) == 0
    with open(os.path.join(broker.data_dir, f"{topic_name}-0", f"{0:020d}.log"), "rb") as f:
        assert [e.record_count for e in scan_entries(f.read())] == [3]  # one batch

    def max_timestamp():
        admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
        tp = confluent_kafka.TopicPartition(topic_name, 0)
        info = admin.list_offsets({tp: OffsetSpec.max_timestamp()})[tp].result(10)
        return info.offset, info.timestamp

    assert max_timestamp() == (1, t + 400)
    broker.restart()
    assert max_timestamp() == (1, t + 400)
    broker.kill()
    broker.start()
    assert max_timestamp() == (1, t + 400)
