"""Group configs (config resource type GROUP, 32): IncrementalAlterConfigs and DescribeConfigs through
confluent-kafka's and kafka-python's admin clients, Kafka's validation against the broker's bounds,
persistence across a restart, the consumer group coordinator applying the overrides, and authorization."""

from __future__ import annotations

import pytest

from minibroker.coordinator.group_configs import GroupConfigs
from minibroker.errors import ErrorCode
from minibroker.protocol.codec import Struct
from minibroker.testing import BrokerRunner
from minibroker.tools.wire import WireClient

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka.admin import (  # noqa: E402
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    ResourceType,
)

DESCRIBE_CONFIGS, INCREMENTAL_ALTER_CONFIGS, CREATE_ACLS, CONSUMER_GROUP_HEARTBEAT = 32, 44, 30, 68
STANDARD = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"


def _admin(runner) -> AdminClient:
    return AdminClient({"bootstrap.servers": runner.bootstrap_servers})


def _alter(admin, group: str, *entries: tuple):
    resource = ConfigResource(ResourceType.GROUP, group, incremental_configs=[
        ConfigEntry(name, value, incremental_operation=op) for name, value, op in entries])
    return admin.incremental_alter_configs([resource])[resource].result(10)


def _describe(admin, group: str) -> dict:
    resource = ConfigResource(ResourceType.GROUP, group)
    return admin.describe_configs([resource])[resource].result(10)


def _error(call) -> confluent_kafka.KafkaError:
    with pytest.raises(confluent_kafka.KafkaException) as exc:
        call()
    return exc.value.args[0]


SET, DELETE, APPEND = AlterConfigOpType.SET, AlterConfigOpType.DELETE, AlterConfigOpType.APPEND


def test_alter_describe_validate_and_survive_a_restart(tmp_path):
    overrides = {"group.consumer.session.timeout.ms": "30000",
                 "group.consumer.max.heartbeat.interval.ms": "50000"}
    runner = BrokerRunner(overrides, data_dir=str(tmp_path)).start()
    try:
        admin = _admin(runner)
        configs = _describe(admin, "no-such-group")  # a group need not exist
        assert configs["consumer.session.timeout.ms"].value == "30000"  # the broker key's value
        assert configs["consumer.session.timeout.ms"].source == ConfigSource.DEFAULT_CONFIG.value
        assert configs["consumer.heartbeat.interval.ms"].value == "5000"
        assert configs["share.auto.offset.reset"].value == "latest"
        assert configs["share.isolation.level"].value == "read_uncommitted"
        assert configs["share.record.lock.duration.ms"].value == "30000"
        assert {"share.delivery.count.limit", "share.session.timeout.ms", "share.heartbeat.interval.ms",
                "streams.session.timeout.ms"} <= set(configs)

        _alter(admin, "g1", ("consumer.session.timeout.ms", "50000", SET),
               ("share.auto.offset.reset", "by_duration:PT1H30M", SET), ("share.isolation.level",
                                                                          "read_committed", SET))
        configs = _describe(admin, "g1")
        assert configs["consumer.session.timeout.ms"].value == "50000"
        assert configs["consumer.session.timeout.ms"].source == ConfigSource.GROUP_CONFIG.value
        assert configs["share.auto.offset.reset"].value == "by_duration:PT1H30M"
        assert _describe(admin, "g2")["consumer.session.timeout.ms"].value == "30000"

        refused = [
            (("consumer.session.timeout.ms", "44999", SET), "must be in the range 45000 to 60000 inclusive"),
            (("consumer.heartbeat.interval.ms", "50001", SET), "must be in the range 5000 to 50000"),
            (("consumer.session.timeout.ms", "x", SET), "Invalid value x"),
            (("share.delivery.count.limit", "11", SET), "must be in the range 2 to 10"),
            (("share.record.lock.duration.ms", "999", SET), "Value must be at least 1000"),
            (("share.auto.offset.reset", "by_duration:-PT1H", SET), "share.auto.offset.reset"),
            (("share.isolation.level", "READ_COMMITTED", SET), "String must be one of"),
            (("no.such.key", "1", SET), "Unknown group config name: no.such.key"),
            (("consumer.session.timeout.ms", "1", APPEND), "append is not allowed"),
        ]
        for entry, message in refused:
            err = _error(lambda entry=entry: _alter(admin, "g1", entry))
            assert err.code() == confluent_kafka.KafkaError.INVALID_CONFIG, (entry, err)
            assert message in err.str(), (entry, err.str())
        with WireClient(runner.host, runner.port, timeout=10) as wire:  # empty name: 42, as Kafka
            body = {"resources": [{"resource_type": 32, "resource_name": "", "configs": [
                {"name": "consumer.session.timeout.ms", "config_operation": 0, "value": "50000"}]}],
                "validate_only": False}
            (result,) = wire.request(INCREMENTAL_ALTER_CONFIGS, 1, body).responses
            assert result.error_code == ErrorCode.INVALID_REQUEST
            r = wire.request(DESCRIBE_CONFIGS, 4, {"resources": [{"resource_type": 32, "resource_name": "",
                                                                  "configuration_keys": None}],
                                                   "include_synonyms": True, "include_documentation": True})
            assert r.results[0].error_code == ErrorCode.INVALID_REQUEST
            r = wire.request(DESCRIBE_CONFIGS, 4, {"resources": [{
                "resource_type": 32, "resource_name": "g1",
                "configuration_keys": ["consumer.session.timeout.ms"]}],
                "include_synonyms": True, "include_documentation": True})
            (entry,) = r.results[0].configs
            assert (entry.value, entry.config_source, entry.config_type, entry.read_only) == (
                "50000", 8, 3, False)
            assert [(s.name, s.value, s.source) for s in entry.synonyms] == [
                ("consumer.session.timeout.ms", "50000", 8)]
            assert entry.documentation
        # the heartbeat interval must stay below the session timeout, the group's or the broker's
        for entries in ((("consumer.heartbeat.interval.ms", "46000", SET),
                         ("consumer.session.timeout.ms", "45000", SET)),
                        (("consumer.heartbeat.interval.ms", "31000", SET),)):  # the broker's session: 30000
            err = _error(lambda entries=entries: _alter(admin, "g3", *entries))
            assert err.code() == confluent_kafka.KafkaError.INVALID_CONFIG
            assert ("consumer.session.timeout.ms must be greater than consumer.heartbeat.interval.ms"
                    in err.str())
        _alter(admin, "g1", ("share.isolation.level", None, DELETE))
    finally:
        runner.stop()

    runner = BrokerRunner(data_dir=str(tmp_path)).start()
    try:
        configs = _describe(_admin(runner), "g1")
        assert configs["consumer.session.timeout.ms"].value == "50000"
        assert configs["consumer.session.timeout.ms"].source == ConfigSource.GROUP_CONFIG.value
        assert configs["share.isolation.level"].source == ConfigSource.DEFAULT_CONFIG.value
        assert configs["share.auto.offset.reset"].value == "by_duration:PT1H30M"
    finally:
        runner.stop()


def test_kafka_python_admin_describes_group_configs(minibroker):
    from kafka.admin import ConfigResource as KConfigResource
    from kafka.admin import ConfigResourceType, KafkaAdminClient

    _alter(_admin(minibroker), "kp-group", ("consumer.session.timeout.ms", "50000", SET))
    admin = KafkaAdminClient(bootstrap_servers=minibroker.bootstrap_servers)
    try:
        resource = KConfigResource(ConfigResourceType.GROUP, "kp-group")
        configs = admin.describe_configs([resource], config_filter="all")["group"]["kp-group"]
        assert configs["consumer.heartbeat.interval.ms"]["config_source"] == "DEFAULT_CONFIG"
        assert configs["consumer.session.timeout.ms"]["value"] == "50000"
        assert configs["consumer.session.timeout.ms"]["config_source"] == "DYNAMIC_GROUP_CONFIG"  # 8
        modified = admin.describe_configs([resource])["group"]["kp-group"]  # the default filter
        assert set(modified) == {"consumer.session.timeout.ms"}
        # kafka-python's alter_configs sends IncrementalAlterConfigs (SET); with incremental=False it
        # merges the described overrides into a legacy AlterConfigs
        for incremental, interval in ((None, "7000"), (False, "6000")):
            admin.alter_configs([KConfigResource(ConfigResourceType.GROUP, "kp-group",
                                                 configs={"consumer.heartbeat.interval.ms": interval})],
                                incremental=incremental)
            modified = admin.describe_configs([resource])["group"]["kp-group"]
            assert {k: v["value"] for k, v in modified.items()} == {
                "consumer.heartbeat.interval.ms": interval, "consumer.session.timeout.ms": "50000"}
    finally:
        admin.close()
    with WireClient(minibroker.host, minibroker.port, timeout=10) as wire:  # the legacy form replaces all
        (result,) = wire.request(33, 2, {"resources": [{"resource_type": 32, "resource_name": "kp-group",
                                                        "configs": [{"name": "share.isolation.level",
                                                                     "value": "read_committed"}]}],
                                         "validate_only": False}).responses
        assert result.error_code == 0
    admin = KafkaAdminClient(bootstrap_servers=minibroker.bootstrap_servers)
    try:
        modified = admin.describe_configs([resource])["group"]["kp-group"]
        assert {k: v["value"] for k, v in modified.items()} == {"share.isolation.level": "read_committed"}
    finally:
        admin.close()


def _heartbeat(wire, group: str) -> Struct:
    return wire.request(CONSUMER_GROUP_HEARTBEAT, 1, Struct(
        group_id=group, member_id="m-" + group, member_epoch=0, instance_id=None, rack_id=None,
        rebalance_timeout_ms=30000, subscribed_topic_names=["gc-topic"], subscribed_topic_regex=None,
        server_assignor=None, topic_partitions=[]))


def test_the_consumer_group_coordinator_applies_the_group_overrides(minibroker):
    minibroker.create_topic("gc-topic", 1)
    admin = _admin(minibroker)
    _alter(admin, "gc-tuned", ("consumer.heartbeat.interval.ms", "7000", SET))
    with WireClient(minibroker.host, minibroker.port, timeout=10) as wire:
        tuned = _heartbeat(wire, "gc-tuned")
        plain = _heartbeat(wire, "gc-plain")
    assert tuned.error_code == 0 and tuned.heartbeat_interval_ms == 7000
    assert plain.error_code == 0 and plain.heartbeat_interval_ms == 5000


def test_group_overrides_set_the_session_timer():
    from types import SimpleNamespace

    from minibroker.coordinator.consumer_group_coordinator import ConsumerGroupCoordinator

    delays = []
    store = SimpleNamespace(append=lambda group_id, entries: None)
    configs = GroupConfigs({}, None)
    configs.alter("slow", [("consumer.session.timeout.ms", _op_set(), "55000")], False)
    gc = SimpleNamespace(broker=SimpleNamespace(config={}, logs=SimpleNamespace(topics={
        "t": SimpleNamespace(id=b"\x01" * 16, partitions=1)})), groups={}, loading=False, store=store,
        _closed=False, configs=configs,
        _call_later=lambda ms, fn, *args: delays.append(ms) or SimpleNamespace(cancel=lambda: None))
    coordinator = ConsumerGroupCoordinator(gc)
    for group in ("slow", "fast"):
        r = coordinator.heartbeat(SimpleNamespace(
            group_id=group, member_id="m", member_epoch=0, instance_id=None, rack_id=None,
            rebalance_timeout_ms=30000, subscribed_topic_names=["t"], subscribed_topic_regex=None,
            server_assignor=None, topic_partitions=[]), 1, "c", "/h")
        assert r.error == ErrorCode.NONE
    assert delays == [55000, 45000]


def _op_set():
    from minibroker.config import AlterOp

    return AlterOp.SET


def test_a_failed_save_is_an_error_and_changes_nothing(tmp_path):
    blocked = tmp_path / "not-a-dir"
    blocked.write_text("")
    configs = GroupConfigs({}, str(blocked))  # the file cannot be written under a regular file
    with pytest.raises(Exception) as exc:
        configs.alter("g", [("consumer.session.timeout.ms", _op_set(), "50000")], False)
    assert getattr(exc.value, "code", None) == ErrorCode.UNKNOWN_SERVER_ERROR
    assert configs.overrides("g") == {}


def test_group_configs_are_authorized_on_the_group(minibroker_factory):
    broker = minibroker_factory({"authorizer.class.name": STANDARD, "allow.everyone.if.no.acl.found": "true"})
    with WireClient(broker.host, broker.port, timeout=10) as wire:
        # alice alone may describe and alter the configs of group "locked"
        creations = [{"resource_type": 3, "resource_name": "locked", "resource_pattern_type": 3,
                      "principal": "User:alice", "host": "*", "operation": op, "permission_type": 3}
                     for op in (10, 11)]
        created = wire.request(CREATE_ACLS, 3, {"creations": creations}).results
        assert [x.error_code for x in created] == [0, 0]

        def describe(group):
            return wire.request(DESCRIBE_CONFIGS, 4, {"resources": [{
                "resource_type": 32, "resource_name": group, "configuration_keys": None}],
                "include_synonyms": False, "include_documentation": False}).results[0].error_code

        def alter(group):
            (result,) = wire.request(INCREMENTAL_ALTER_CONFIGS, 1, {"resources": [{
                "resource_type": 32, "resource_name": group, "configs": [
                    {"name": "consumer.session.timeout.ms", "config_operation": 0, "value": "50000"}]}],
                "validate_only": True}).responses
            return result.error_code

        assert describe("locked") == alter("locked") == ErrorCode.GROUP_AUTHORIZATION_FAILED
        assert describe("open") == alter("open") == 0
