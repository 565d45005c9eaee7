"""Configuration: properties parsing, env mapping, precedence, synonyms, validation, DescribeConfigs facts."""

from __future__ import annotations

import logging
import pathlib
import subprocess
import sys

import pytest

from minibroker.config import (
    BROKER_CONFIGS,
    REMOVED_BROKER_KEYS,
    REMOVED_TOPIC_KEYS,
    TOPIC_CONFIG_SYNONYMS,
    TOPIC_CONFIGS,
    AlterOp,
    BrokerConfig,
    ConfigError,
    ConfigSource,
    ConfigSynonym,
    ConfigType,
    Listener,
    alter_topic_configs,
    config_reference_markdown,
    describe_topic_configs,
    effective_topic_config,
    env_to_properties,
    env_var_to_key,
    key_to_env_var,
    load_config,
    parse_listeners,
    parse_overrides,
    parse_properties,
    resolve_advertised,
    validate_topic_configs,
)
from minibroker.errors import ErrorCode, KafkaError

ROOT = pathlib.Path(__file__).resolve().parent.parent
LONG_MAX = 2**63 - 1


def cfg(*overrides: str, env: dict[str, str] | None = None, file: str | None = None) -> BrokerConfig:
    return load_config(file, list(overrides), env or {})


# --- .properties parsing


@pytest.mark.parametrize(
    "text, expected",
    [
        ("a=1", {"a": "1"}),
        ("a:1", {"a": "1"}),
        ("a 1", {"a": "1"}),
        ("  a  =  1  ", {"a": "1  "}),  # leading blanks dropped, trailing kept (Java does)
        ("a\t:\t1", {"a": "1"}),
        ("a = b = c", {"a": "b = c"}),
        ("a", {"a": ""}),
        ("a=", {"a": ""}),
        ("# c=1\n! d=2\n\n   # e=3\na=1", {"a": "1"}),
        ("a=x # not a comment", {"a": "x # not a comment"}),
        ("a=1\na=2", {"a": "2"}),
        ("a=one\\\n    two", {"a": "onetwo"}),
        ("a=one \\\n  two \\\n  three", {"a": "one two three"}),
        ("a=x\\\\\nb=y", {"a": "x\\", "b": "y"}),  # an even run of backslashes does not continue
        ("a=x\\\n# not a comment", {"a": "x# not a comment"}),
        ("# comment \\\na=1", {"a": "1"}),  # comment lines never continue
        ("a=x\\", {"a": "x"}),
        ("k\\=ey=v", {"k=ey": "v"}),
        ("k\\:ey:v", {"k:ey": "v"}),
        ("k\\ ey v", {"k ey": "v"}),
        ("\\#k=v", {"#k": "v"}),
        ("a=tab\\there\\nnl", {"a": "tab\there\nnl"}),
        ("a=\\u00e9t\\u00E9", {"a": "été"}),
        ("a=C:\\\\data", {"a": "C:\\data"}),
        ("a=\\q", {"a": "q"}),
        ("a=1\r\nb=2\rc=3", {"a": "1", "b": "2", "c": "3"}),
        ("\f a=1", {"a": "1"}),
    ],
)
def test_parse_properties(text, expected):
    assert parse_properties(text) == expected


def test_parse_properties_bad_unicode_escape():
    with pytest.raises(ConfigError):
        parse_properties("a=\\u12")


def test_properties_file_loaded(tmp_path):
    path = tmp_path / "server.properties"
    path.write_text("# test\nnum.partitions = 4\nlog.retention.hours:24\nlisteners PLAINTEXT://:0\n")
    c = cfg(file=str(path))
    assert c["num.partitions"] == 4
    assert c["log.retention.hours"] == 24
    assert c.listener_endpoints() == [Listener("PLAINTEXT", "", 0)]
    assert c.source_of("num.partitions") == "file"
    assert c.source_of("log.segment.bytes") == "default"


def test_missing_properties_file_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError, match="Cannot read"):
        cfg(file=str(tmp_path / "nope.properties"))


def test_example_server_properties_equals_embedded_defaults():
    c = cfg(file=str(ROOT / "config" / "server.properties"))
    assert not c.unknown
    for key in BROKER_CONFIGS:
        assert c[key] == BROKER_CONFIGS[key].default, key


def test_kafka_kraft_single_node_file_loads(caplog):
    text = "\n".join([
        "process.roles=broker,controller",
        "node.id=1",
        "controller.quorum.voters=1@localhost:9093",
        "listeners=PLAINTEXT://:9092,CONTROLLER://:9093",
        "inter.broker.listener.name=PLAINTEXT",
        "advertised.listeners=PLAINTEXT://localhost:9092,CONTROLLER://localhost:9093",
        "controller.listener.names=CONTROLLER",
        "listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,SSL:SSL",
        "num.network.threads=3",
        "num.io.threads=8",
        "socket.send.buffer.bytes=102400",
        "socket.receive.buffer.bytes=102400",
        "log.dirs=/tmp/kraft-combined-logs",
        "num.recovery.threads.per.data.dir=1",
        "offsets.topic.replication.factor=1",
        "transaction.state.log.replication.factor=1",
        "transaction.state.log.min.isr=1",
        "share.coordinator.state.topic.replication.factor=1",
        "share.coordinator.state.topic.min.isr=1",
        "log.retention.hours=168",
        "log.segment.bytes=1073741824",
        "log.retention.check.interval.ms=300000",
    ])
    props = parse_properties(text)
    with caplog.at_level(logging.WARNING, logger="minibroker.config"):
        c = cfg(*(f"{k}={v}" for k, v in props.items()))
    assert not caplog.records
    assert c.advertised_endpoints() == [Listener("PLAINTEXT", "localhost", 9092),
                                        Listener("CONTROLLER", "localhost", 9093)]
    assert c.data_dir == "/tmp/kraft-combined-logs"
    assert BROKER_CONFIGS["num.io.threads"].no_effect


# --- environment variables


@pytest.mark.parametrize(
    "var, key",
    [
        ("KAFKA_LISTENERS", "listeners"),
        ("KAFKA_LOG_DIRS", "log.dirs"),
        ("KAFKA_NUM_PARTITIONS", "num.partitions"),
        ("KAFKA_ADVERTISED_LISTENERS", "advertised.listeners"),
        ("KAFKA_LISTENER_SECURITY_PROTOCOL_MAP", "listener.security.protocol.map"),
        ("KAFKA_FOO__BAR", "foo_bar"),
        ("KAFKA_FOO___BAR", "foo-bar"),
        ("KAFKA_A___B__C_D", "a-b_c.d"),
    ],
)
def test_env_var_mapping(var, key):
    assert env_var_to_key(var) == key
    assert key_to_env_var(key) == var


def test_env_skips_non_config_variables():
    env = {
        "KAFKA_HEAP_OPTS": "-Xmx1G", "KAFKA_OPTS": "-Dx", "KAFKA_JMX_OPTS": "x", "KAFKA_JMX_PORT": "9999",
        "KAFKA_LOG4J_OPTS": "x", "KAFKA_LOG4J_ROOT_LOGLEVEL": "INFO", "KAFKA_LOG4J_LOGGERS": "a=INFO",
        "KAFKA_VERSION": "3.9.0", "KAFKA_JVM_PERFORMANCE_OPTS": "x", "KAFKA_GC_LOG_OPTS": "x",
        "KAFKA_TOOLS_LOG4J_LOGLEVEL": "WARN", "KAFKA_JMX_HOSTNAME": "h", "CLUSTER_ID": "abc",
        "PATH": "/bin", "KAFKA_": "x", "KAFKA_NUM_PARTITIONS": "3",
    }
    assert env_to_properties(env) == {"num.partitions": "3"}


def test_env_derives_listeners_from_advertised_like_the_image():
    env = {"KAFKA_ADVERTISED_LISTENERS": "PLAINTEXT://broker.example:19092,OTHER://[::1]:19093"}
    props = env_to_properties(env)
    assert props["listeners"] == "PLAINTEXT://0.0.0.0:19092,OTHER://0.0.0.0:19093"
    env["KAFKA_LISTENERS"] = "PLAINTEXT://:9092"
    assert env_to_properties(env)["listeners"] == "PLAINTEXT://:9092"


def test_env_values_are_used_and_marked():
    c = cfg(env={"KAFKA_NUM_PARTITIONS": "6", "KAFKA_AUTO_CREATE_TOPICS_ENABLE": "false",
                 "KAFKA_ADVERTISED_LISTENERS": "PLAINTEXT://localhost:9092"})
    assert c.num_partitions == 6
    assert c.auto_create_topics_enable is False
    assert c.source_of("num.partitions") == "env"
    assert c.listener_endpoints() == [Listener("PLAINTEXT", "0.0.0.0", 9092)]
    assert c.advertised_endpoints() == [Listener("PLAINTEXT", "localhost", 9092)]


# --- precedence


def test_precedence_default_file_env_override(tmp_path):
    path = tmp_path / "p.properties"
    path.write_text("num.partitions=2\nlog.segment.bytes=2000\nmessage.max.bytes=3000\n")
    env = {"KAFKA_LOG_SEGMENT_BYTES": "4000", "KAFKA_MESSAGE_MAX_BYTES": "5000"}
    c = cfg("message.max.bytes=6000", env=env, file=str(path))
    assert (c["num.partitions"], c.source_of("num.partitions")) == (2, "file")
    assert (c["log.segment.bytes"], c.source_of("log.segment.bytes")) == (4000, "env")
    assert (c["message.max.bytes"], c.source_of("message.max.bytes")) == (6000, "override")
    assert (c["offsets.topic.num.partitions"], c.source_of("offsets.topic.num.partitions")) == (50, "default")


def test_later_override_wins_and_value_may_contain_equals():
    assert parse_overrides(["a=1", "b=x=y", "a=2"]) == {"a": "2", "b": "x=y"}
    with pytest.raises(ConfigError, match="key=value"):
        parse_overrides(["novalue"])


def test_unknown_keys_warn_but_do_not_fail(caplog):
    with caplog.at_level(logging.WARNING, logger="minibroker.config"):
        c = cfg("no.such.key=1", env={"KAFKA_ANOTHER_UNKNOWN": "x"})
    assert c.unknown == {"no.such.key": "1", "another.unknown": "x"}
    messages = " ".join(r.getMessage() for r in caplog.records)
    assert "no.such.key" in messages and "another.unknown" in messages


def test_effective_masks_passwords():
    c = cfg("ssl.key.password=hunter2")  # not "secret": key names such as password.encoder.secret hold it
    assert c.effective()["ssl.key.password"] == "[hidden]"
    assert "hunter2" not in repr(c.effective())
    assert c.non_default() == {"ssl.key.password": "[hidden]"}


# --- validation


@pytest.mark.parametrize(
    "override, fragment",
    [
        ("num.partitions=0", "num.partitions"),
        ("log.segment.bytes=abc", "log.segment.bytes"),
        ("log.segment.bytes=3000000000", "log.segment.bytes"),  # beyond a Java int
        ("auto.create.topics.enable=yes", "auto.create.topics.enable"),
        ("log.message.timestamp.type=NowTime", "CreateTime, LogAppendTime"),
        ("compression.type=brotli", "compression.type"),
        ("log.cleanup.policy=delete,archive", "log.cleanup.policy"),
        ("default.replication.factor=3", "default.replication.factor"),
        ("compression.gzip.level=0", "compression.gzip.level"),
        ("metrics.port=70000", "metrics.port"),
        ("listeners=localhost:9092", "listeners"),
        ("listeners=PLAINTEXT://:99999", "listeners"),
        ("listener.security.protocol.map=PLAINTEXT:TLS", "listener.security.protocol.map"),
        ("listeners=FOO://:9093", "listener.security.protocol.map"),
        ("advertised.listeners=PLAINTEXT://0.0.0.0:9092", "non-routable"),
        ("advertised.listeners=OTHER://h:1", "advertised.listeners"),
        ("log.dirs=/a,/b,/a/", "duplicate log directory"),
    ],
)
def test_invalid_values_name_the_key(override, fragment):
    with pytest.raises(ConfigError) as excinfo:
        cfg(override)
    message = str(excinfo.value)
    assert fragment in message
    assert override.split("=", 1)[0] in message
    assert isinstance(excinfo.value, ValueError)


def test_invalid_env_value_names_the_variable():
    with pytest.raises(ConfigError, match="KAFKA_NUM_PARTITIONS.*allowed: \\[1,...\\]"):
        cfg(env={"KAFKA_NUM_PARTITIONS": "-1"})


def test_node_id_and_broker_id_follow_each_other():
    assert cfg("broker.id=7").node_id == 7
    assert cfg("node.id=8")["broker.id"] == 8
    assert cfg().node_id == 1
    with pytest.raises(ConfigError, match="node.id"):
        cfg("node.id=1", "broker.id=2")


def test_log_dir_and_log_dirs():
    assert cfg().data_dir == "./minibroker-data"
    assert cfg("log.dir=/x").data_dir == "/x"
    assert cfg("log.dir=/x", "log.dirs=/y").data_dir == "/y"
    assert cfg("log.dirs=/a, /b").log_dirs == ["/a", "/b"]
    assert cfg("log.dirs=/a, /b").data_dir == "/a"


def test_alias_log_segment_index_bytes():
    c = cfg("log.segment.index.bytes=4096")
    assert c["log.index.size.max.bytes"] == 4096
    assert c["log.segment.index.bytes"] == 4096
    assert c.topic_defaults()["segment.index.bytes"] == 4096
    both = cfg("log.segment.index.bytes=4096", "log.index.size.max.bytes=8192")
    assert both["log.index.size.max.bytes"] == 8192


# --- listeners


def test_parse_listeners():
    assert parse_listeners("PLAINTEXT://127.0.0.1:9092") == [("PLAINTEXT", "127.0.0.1", 9092)]
    assert parse_listeners("plaintext://:0, SSL://[::1]:9093") == [
        Listener("PLAINTEXT", "", 0), Listener("SSL", "::1", 9093)]
    with pytest.raises(ValueError, match="more than once"):
        parse_listeners("PLAINTEXT://:1,PLAINTEXT://:2")
    with pytest.raises(ValueError):
        parse_listeners("INTERNAL://:1")
    assert parse_listeners("INTERNAL://:1", {"INTERNAL": "PLAINTEXT"}) == [("INTERNAL", "", 1)]


def test_resolve_advertised_fills_ephemeral_port_and_host():
    adv = [Listener("PLAINTEXT", "", 0), Listener("OTHER", "h", 5)]
    assert resolve_advertised(adv, {"PLAINTEXT": 40123, "OTHER": 9}, "127.0.0.1") == [
        ("PLAINTEXT", "127.0.0.1", 40123), ("OTHER", "h", 5)]


# --- synonyms and topic defaults


def test_retention_synonym_order():
    assert cfg().topic_defaults()["retention.ms"] == 168 * 3_600_000
    assert cfg("log.retention.hours=1").topic_defaults()["retention.ms"] == 3_600_000
    assert cfg("log.retention.hours=1", "log.retention.minutes=2").topic_defaults()["retention.ms"] == 120_000
    c = cfg("log.retention.hours=1", "log.retention.minutes=2", "log.retention.ms=5")
    assert c.topic_defaults()["retention.ms"] == 5
    assert cfg("log.retention.hours=-1").topic_defaults()["retention.ms"] == -1
    assert cfg("log.retention.ms=-5").topic_defaults()["retention.ms"] == -1


def test_roll_and_flush_synonyms():
    assert cfg().topic_defaults()["segment.ms"] == 604_800_000
    assert cfg("log.roll.hours=2").topic_defaults()["segment.ms"] == 7_200_000
    assert cfg("log.roll.hours=2", "log.roll.ms=10").topic_defaults()["segment.ms"] == 10
    assert cfg().topic_defaults()["flush.ms"] == LONG_MAX
    assert cfg("log.flush.scheduler.interval.ms=300").topic_defaults()["flush.ms"] == 300
    c = cfg("log.flush.scheduler.interval.ms=300", "log.flush.interval.ms=7")
    assert c.topic_defaults()["flush.ms"] == 7


def test_topic_defaults_follow_broker_keys():
    c = cfg("log.segment.bytes=1024", "message.max.bytes=2048", "log.cleanup.policy=compact,delete",
            "log.message.timestamp.type=LogAppendTime", "compression.type=zstd", "min.insync.replicas=2")
    d = c.topic_defaults()
    assert d["segment.bytes"] == 1024
    assert d["max.message.bytes"] == 2048
    assert d["cleanup.policy"] == ["compact", "delete"]
    assert d["message.timestamp.type"] == "LogAppendTime"
    assert d["compression.type"] == "zstd"
    assert d["min.insync.replicas"] == 2
    assert d["index.interval.bytes"] == 4096
    assert d["segment.index.bytes"] == 10485760
    assert d["flush.messages"] == LONG_MAX
    assert d["retention.bytes"] == -1
    assert set(d) == set(TOPIC_CONFIGS)


def test_every_topic_synonym_names_known_keys():
    for topic_key, synonyms in TOPIC_CONFIG_SYNONYMS.items():
        assert topic_key in TOPIC_CONFIGS
        for broker_key, _ in synonyms:
            assert broker_key in BROKER_CONFIGS
    # the broker default feeds the same topic default as Kafka's topic-level default
    defaults = cfg().topic_defaults()
    for name, key in TOPIC_CONFIGS.items():
        assert defaults[name] == key.default, name


def test_effective_topic_config_with_overrides():
    c = cfg("log.retention.hours=1")
    eff = effective_topic_config(c, {"retention.ms": "1000", "cleanup.policy": "compact"})
    assert eff["retention.ms"] == 1000
    assert eff["cleanup.policy"] == ["compact"]
    assert eff["segment.bytes"] == 1073741824


@pytest.mark.parametrize(
    "configs, fragment",
    [
        ({"no.such.config": "1"}, "Unknown topic config name: no.such.config"),
        ({"log.segment.bytes": "1"}, "Unknown topic config name"),  # broker names are not topic names
        ({"segment.bytes": "10"}, "segment.bytes"),
        ({"retention.ms": "-2"}, "retention.ms"),
        ({"cleanup.policy": "shred"}, "cleanup.policy"),
        ({"message.timestamp.type": "Now"}, "message.timestamp.type"),
        ({"min.cleanable.dirty.ratio": "1.5"}, "min.cleanable.dirty.ratio"),
        ({"max.message.bytes": "x"}, "max.message.bytes"),
    ],
)
def test_topic_validation_uses_invalid_config(configs, fragment):
    with pytest.raises(KafkaError) as excinfo:
        validate_topic_configs(configs)
    assert excinfo.value.code == ErrorCode.INVALID_CONFIG == 40
    assert fragment in str(excinfo.value)


def test_topic_validation_accepts_kafka_forms():
    typed = validate_topic_configs({"cleanup.policy": "compact, delete", "retention.ms": "-1",
                                    "preallocate": "TRUE", "min.cleanable.dirty.ratio": "0.1",
                                    "segment.ms": " 100 ", "compression.type": None})
    assert typed == {"cleanup.policy": ["compact", "delete"], "retention.ms": -1, "preallocate": True,
                     "min.cleanable.dirty.ratio": 0.1, "segment.ms": 100}


def test_incremental_alter():
    cur = {"retention.ms": "1000"}
    assert alter_topic_configs(cur, [("retention.ms", AlterOp.DELETE, None)]) == {}
    assert alter_topic_configs(cur, [("segment.ms", AlterOp.SET, "5")]) == {
        "retention.ms": "1000", "segment.ms": "5"}
    assert alter_topic_configs({}, [("cleanup.policy", AlterOp.APPEND, "compact")]) == {
        "cleanup.policy": "delete,compact"}
    assert alter_topic_configs({"cleanup.policy": "delete,compact"},
                               [("cleanup.policy", AlterOp.SUBTRACT, "delete")]) == {
        "cleanup.policy": "compact"}
    with pytest.raises(KafkaError) as e:
        alter_topic_configs(cur, [("retention.ms", AlterOp.APPEND, "1")])
    assert e.value.code == ErrorCode.INVALID_CONFIG
    with pytest.raises(KafkaError) as e:
        alter_topic_configs(cur, [("retention.ms", 0, "1"), ("retention.ms", 0, "2")])
    assert e.value.code == ErrorCode.INVALID_REQUEST
    with pytest.raises(KafkaError) as e:
        alter_topic_configs(cur, [("segment.ms", AlterOp.SET, "0")])
    assert e.value.code == ErrorCode.INVALID_CONFIG


# --- DescribeConfigs facts


def by_name(entries):
    return {e.name: e for e in entries}


def test_describe_topic_sources_and_synonyms():
    c = cfg("log.retention.hours=24")
    entries = by_name(describe_topic_configs(c, {"segment.bytes": "1048576"}))
    assert set(entries) == set(TOPIC_CONFIGS) - set(REMOVED_TOPIC_KEYS)  # Kafka 4 lists them only when set

    seg = entries["segment.bytes"]
    assert (seg.value, seg.source, seg.is_default, seg.read_only, seg.sensitive) == (
        "1048576", ConfigSource.DYNAMIC_TOPIC_CONFIG, False, False, False)
    assert seg.synonyms == [
        ConfigSynonym("segment.bytes", "1048576", ConfigSource.DYNAMIC_TOPIC_CONFIG),
        ConfigSynonym("log.segment.bytes", "1073741824", ConfigSource.DEFAULT_CONFIG)]
    assert seg.config_type == ConfigType.INT == 3

    ret = entries["retention.ms"]
    assert (ret.value, ret.source, ret.config_type) == (
        "86400000", ConfigSource.STATIC_BROKER_CONFIG, ConfigType.LONG)
    assert ret.synonyms == [
        ConfigSynonym("log.retention.hours", "24", ConfigSource.STATIC_BROKER_CONFIG),
        ConfigSynonym("log.retention.hours", "168", ConfigSource.DEFAULT_CONFIG)]

    pol = entries["cleanup.policy"]
    assert (pol.value, pol.source, pol.is_default, pol.config_type) == (
        "delete", ConfigSource.DEFAULT_CONFIG, True, ConfigType.LIST)
    assert entries["min.cleanable.dirty.ratio"].value == "0.5"
    assert entries["preallocate"].value == "false"
    assert entries["flush.ms"].synonyms == [
        ConfigSynonym("log.flush.scheduler.interval.ms", str(LONG_MAX), ConfigSource.DEFAULT_CONFIG)]
    assert entries["segment.bytes"].documentation


def test_describe_topic_selected_keys_and_no_synonyms():
    entries = describe_topic_configs(cfg(), {}, ["retention.ms", "not.a.key"], include_synonyms=False,
                                     include_documentation=False)
    assert [e.name for e in entries] == ["retention.ms"]
    assert entries[0].synonyms == [] and entries[0].documentation is None
    assert entries[0].value == "604800000"


def test_describe_broker():
    c = cfg("log.retention.minutes=30", "ssl.key.password=secret")
    entries = by_name(c.describe())
    assert set(entries) == set(BROKER_CONFIGS) - set(REMOVED_BROKER_KEYS)  # Kafka 4 lists them only when set

    ms = entries["log.retention.ms"]
    assert ms.value is None  # Kafka reports the key's own value, sourced from its first synonym
    assert ms.source == ConfigSource.STATIC_BROKER_CONFIG
    assert ms.read_only is False
    assert ms.synonyms == [
        ConfigSynonym("log.retention.minutes", "30", ConfigSource.STATIC_BROKER_CONFIG),
        ConfigSynonym("log.retention.hours", "168", ConfigSource.DEFAULT_CONFIG)]
    assert entries["log.retention.hours"].read_only is True
    assert entries["listeners"].read_only is True
    assert entries["listeners"].value == "PLAINTEXT://127.0.0.1:9092"
    assert entries["log.segment.bytes"].is_default
    assert entries["log.cleanup.policy"].config_type == ConfigType.LIST
    assert entries["auto.create.topics.enable"].value == "true"
    assert entries["offsets.topic.replication.factor"].config_type == ConfigType.SHORT

    pw = entries["ssl.key.password"]
    assert (pw.value, pw.sensitive, pw.config_type) == (None, True, ConfigType.PASSWORD)
    assert all(s.value is None for s in pw.synonyms)

    assert entries["advertised.listeners"].value is None
    assert entries["advertised.listeners"].source == ConfigSource.DEFAULT_CONFIG
    assert entries["advertised.listeners"].synonyms == []


def test_dynamic_broker_layers():
    c = cfg("log.segment.bytes=2048")
    c.set_dynamic("log.segment.bytes", "4096", cluster_default=True)
    assert c["log.segment.bytes"] == 4096
    assert c.source_of("log.segment.bytes") == "dynamic-default"
    c.set_dynamic("log.segment.bytes", "8192")
    assert c["log.segment.bytes"] == 8192
    assert c.topic_defaults()["segment.bytes"] == 8192
    entry = by_name(c.describe(["log.segment.bytes"]))["log.segment.bytes"]
    assert entry.source == ConfigSource.DYNAMIC_BROKER_CONFIG
    assert [s.source for s in entry.synonyms] == [
        ConfigSource.DYNAMIC_BROKER_CONFIG, ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG,
        ConfigSource.STATIC_BROKER_CONFIG, ConfigSource.DEFAULT_CONFIG]
    assert c.dynamic_values() == {"log.segment.bytes": "8192"}
    c.set_dynamic("log.segment.bytes", None)
    assert c["log.segment.bytes"] == 4096

    with pytest.raises(KafkaError) as e:
        c.set_dynamic("listeners", "PLAINTEXT://:1")
    assert e.value.code == ErrorCode.INVALID_REQUEST
    with pytest.raises(KafkaError) as e:
        c.set_dynamic("log.segment.bytes", "tiny")
    assert e.value.code == ErrorCode.INVALID_CONFIG
    with pytest.raises(KafkaError) as e:
        c.set_dynamic("nope", "1")
    assert e.value.code == ErrorCode.INVALID_CONFIG


def test_config_types_match_kafka_numbers():
    assert [t.value for t in (ConfigType.BOOLEAN, ConfigType.STRING, ConfigType.INT, ConfigType.SHORT,
                              ConfigType.LONG, ConfigType.DOUBLE, ConfigType.LIST, ConfigType.CLASS,
                              ConfigType.PASSWORD)] == list(range(1, 10))
    assert [s.value for s in (ConfigSource.DYNAMIC_TOPIC_CONFIG, ConfigSource.DYNAMIC_BROKER_CONFIG,
                              ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG, ConfigSource.STATIC_BROKER_CONFIG,
                              ConfigSource.DEFAULT_CONFIG)] == [1, 2, 3, 4, 5]


@pytest.mark.parametrize(
    "key, default",
    [
        ("message.max.bytes", 1048588), ("socket.request.max.bytes", 104857600),
        ("log.segment.bytes", 1073741824), ("log.index.interval.bytes", 4096),
        ("log.index.size.max.bytes", 10485760), ("log.roll.hours", 168), ("log.retention.hours", 168),
        ("log.retention.bytes", -1), ("log.retention.check.interval.ms", 300000),
        ("log.flush.interval.messages", LONG_MAX), ("log.flush.interval.ms", None),
        ("log.message.timestamp.type", "CreateTime"), ("group.initial.rebalance.delay.ms", 0),
        ("group.min.session.timeout.ms", 6000), ("group.max.session.timeout.ms", 1800000),
        ("offsets.topic.num.partitions", 50), ("offsets.retention.minutes", 10080),
        ("offset.metadata.max.bytes", 4096), ("delete.topic.enable", True), ("compression.type", "producer"),
        ("log.cleanup.policy", ["delete"]), ("min.insync.replicas", 1), ("fetch.max.bytes", 57671680),
        ("max.incremental.fetch.session.cache.slots", 1000), ("num.partitions", 1),
        ("auto.create.topics.enable", True), ("default.replication.factor", 1), ("metrics.port", None),
        ("log.message.downconversion.enable", True), ("transaction.state.log.num.partitions", 50),
        # Kafka's shipped server.properties, not its code defaults (3000, 3, 3, 2, 3, 2): issue 15
        ("offsets.topic.replication.factor", 1), ("transaction.state.log.replication.factor", 1),
        ("transaction.state.log.min.isr", 1), ("share.coordinator.state.topic.replication.factor", 1),
        ("share.coordinator.state.topic.min.isr", 1),
    ],
)
def test_defaults(key, default):
    assert cfg()[key] == default


# --- docs and start-up cost


def test_docs_configuration_md_is_generated():
    assert (ROOT / "docs" / "configuration.md").read_text() == config_reference_markdown(), (
        "regenerate: python -c 'from minibroker.config import config_reference_markdown as m; "
        "open(\"docs/configuration.md\", \"w\").write(m())'")


def test_reference_lists_every_key():
    text = config_reference_markdown()
    for key in list(BROKER_CONFIGS) + list(TOPIC_CONFIGS):
        assert f"`{key}`" in text


def test_import_is_light():
    code = "import sys, minibroker.config; print(' '.join(sorted(sys.modules)))"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    out = proc.stdout.split()
    for heavy in ("asyncio", "dataclasses", "inspect", "socket", "json", "ssl"):
        assert heavy not in out, heavy
