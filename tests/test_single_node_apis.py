"""The single-node admin APIs of issue 20: DescribeTopicPartitions, ElectLeaders, AlterReplicaLogDirs,
DescribeQuorum, partition reassignments, UpdateFeatures, ListConfigResources and the KIP-714 telemetry
APIs, answered as a one-node Kafka 4.3 answers them: through kafka-python's and confluent-kafka's admin
clients, plus wire-level checks of errors, paging and authorization."""

from __future__ import annotations

import os

import pytest

from minibroker.handlers.client_telemetry import subscription_id
from minibroker.protocol.declarations import ZERO_UUID
from minibroker.security.authorizer import STANDARD_AUTHORIZER
from minibroker.services.features import KAFKA_4_3
from minibroker.tools.wire import WireClient

ALTER_REPLICA_LOG_DIRS, DESCRIBE_LOG_DIRS, ELECT_LEADERS = 34, 35, 43
ALTER_REASSIGNMENTS, LIST_REASSIGNMENTS, DESCRIBE_QUORUM, UPDATE_FEATURES = 45, 46, 55, 57
GET_TELEMETRY, PUSH_TELEMETRY, LIST_CONFIG_RESOURCES, DESCRIBE_TOPIC_PARTITIONS = 71, 72, 74, 75
API_VERSIONS = 18

# kafka-python leaks the socket of a closed admin client, reported later by GC
pytestmark = pytest.mark.filterwarnings("ignore::ResourceWarning")


@pytest.fixture
def admin(minibroker):
    kafka_admin = pytest.importorskip("kafka.admin")
    client = kafka_admin.KafkaAdminClient(bootstrap_servers=minibroker.bootstrap_servers,
                                          request_timeout_ms=10000)
    yield client
    client.close()


@pytest.fixture
def wire(minibroker):
    with WireClient(minibroker.host, minibroker.port) as client:
        yield client


def _dtp(wire, topics, limit=2000, cursor=None):
    return wire.request(DESCRIBE_TOPIC_PARTITIONS, 0, {"topics": [{"name": t} for t in topics],
                                                         "response_partition_limit": limit, "cursor": cursor})


# -- DescribeTopicPartitions ------------------------------------------------------------------------

def test_describe_topic_partitions_with_kafka_python(minibroker, admin, topic_name):
    minibroker.create_topic(topic_name, partitions=3)
    node = minibroker.broker.node_id
    result = admin.describe_topic_partitions([topic_name, topic_name + "-missing"])
    assert result["next_cursor"] is None
    found, missing = result["topics"]
    assert (found["name"], found["error_code"], found["is_internal"]) == (topic_name, 0, False)
    assert [(p["partition_index"], p["leader_id"], p["replica_nodes"], p["isr_nodes"], p["error_code"])
            for p in found["partitions"]] == [(i, node, [node], [node], 0) for i in range(3)]
    assert found["topic_authorized_operations"] > 0
    assert (missing["name"], missing["error_code"], missing["partitions"]) == (topic_name + "-missing", 3, [])


def test_describe_topic_partitions_pages_with_the_cursor(minibroker, wire, topic_name):
    first, second = topic_name + "-a", topic_name + "-b"
    minibroker.create_topic(first, partitions=3)
    minibroker.create_topic(second, partitions=2)
    seen, cursor, pages = [], None, 0
    while True:
        r = _dtp(wire, [second, first], limit=2, cursor=cursor)
        pages += 1
        seen += [(t.name, p.partition_index) for t in r.topics for p in t.partitions]
        if r.next_cursor is None:
            break
        cursor = {"topic_name": r.next_cursor.topic_name, "partition_index": r.next_cursor.partition_index}
    assert seen == [(first, 0), (first, 1), (first, 2), (second, 0), (second, 1)]
    assert pages == 3
    # a response filled exactly by one topic points the cursor at the next topic's partition 0
    r = _dtp(wire, [first, second], limit=3)
    assert [t.name for t in r.topics] == [first]
    assert (r.next_cursor.topic_name, r.next_cursor.partition_index) == (second, 0)
    # the limit is at least 1
    r = _dtp(wire, [first], limit=0)
    assert [p.partition_index for p in r.topics[0].partitions] == [0]


def test_describe_topic_partitions_errors_on_the_wire(minibroker, wire, topic_name):
    minibroker.create_topic(topic_name)
    r = _dtp(wire, [topic_name, "bad/name"])
    assert {t.name: t.error_code for t in r.topics} == {topic_name: 0, "bad/name": 17}
    # the cursor's topic must be among the named ones, and its partition not negative: INVALID_REQUEST
    r = _dtp(wire, [topic_name], cursor={"topic_name": topic_name + "x", "partition_index": 0})
    assert [(t.name, t.error_code, t.partitions) for t in r.topics] == [(topic_name, 42, [])]
    r = _dtp(wire, [topic_name], cursor={"topic_name": topic_name, "partition_index": -1})
    assert [t.error_code for t in r.topics] == [42]
    # all topics: the cursor skips the topics sorting before it
    r = _dtp(wire, [], cursor={"topic_name": topic_name, "partition_index": 0})
    names = [t.name for t in r.topics]
    assert names[0] == topic_name and names == sorted(names)


def test_confluent_describe_topics(minibroker, topic_name):
    admin_module = pytest.importorskip("confluent_kafka.admin")
    confluent_kafka = pytest.importorskip("confluent_kafka")
    minibroker.create_topic(topic_name, partitions=2)
    admin = admin_module.AdminClient({"bootstrap.servers": minibroker.bootstrap_servers})
    futures = admin.describe_topics(confluent_kafka.TopicCollection([topic_name]), request_timeout=10)
    description = futures[topic_name].result(10)
    assert [p.id for p in description.partitions] == [0, 1]
    assert {p.leader.id for p in description.partitions} == {minibroker.broker.node_id}


# -- ElectLeaders ---------------------------------------------------------------------------------------

def test_elect_leaders_with_kafka_python(minibroker, admin, topic_name):
    minibroker.create_topic(topic_name, partitions=2)
    response = admin.elect_leaders(0, {topic_name: [0, 1]})
    [(topic, partitions)] = [(r.topic, r.partition_result) for r in response.replica_election_results]
    assert topic == topic_name
    assert [(p.partition_id, p.error_code) for p in partitions] == [(0, 84), (1, 84)]


@pytest.mark.parametrize("version", range(3))
def test_elect_leaders_on_the_wire(minibroker, wire, topic_name, version):
    minibroker.create_topic(topic_name)
    body = {"election_type": 1, "timeout_ms": 1000,
            "topic_partitions": [{"topic": topic_name, "partitions": [0, 7]},
                                 {"topic": topic_name + "-no", "partitions": [0]}]}
    r = wire.request(ELECT_LEADERS, version, body)
    assert [(t.topic, [(p.partition_id, p.error_code, p.error_message) for p in t.partition_result])
            for t in r.replica_election_results] == [
        (topic_name, [(0, 84, "Leader election not needed for topic partition."),
                      (7, 3, f"No such partition as {topic_name}-7")]),
        (topic_name + "-no", [(0, 3, f"No such topic as {topic_name}-no")])]
    # every partition: those needing no election are left out, the topics are listed
    r = wire.request(ELECT_LEADERS, version, {"election_type": 0, "timeout_ms": 1000,
                                              "topic_partitions": None})
    listed = {t.topic: t.partition_result for t in r.replica_election_results}
    assert listed[topic_name] == []
    if version >= 1:
        named = [{"topic": topic_name, "partitions": [0]}]
        r = wire.request(ELECT_LEADERS, version, {"election_type": 5, "timeout_ms": 1000,
                                                  "topic_partitions": named})
        assert r.error_code == 42
        assert [p.error_code for p in r.replica_election_results[0].partition_result] == [42]


def test_confluent_elect_leaders(minibroker, topic_name):
    admin_module = pytest.importorskip("confluent_kafka.admin")
    confluent_kafka = pytest.importorskip("confluent_kafka")
    if not hasattr(admin_module.AdminClient, "elect_leaders"):
        pytest.skip("this confluent-kafka has no elect_leaders")
    minibroker.create_topic(topic_name)
    admin = admin_module.AdminClient({"bootstrap.servers": minibroker.bootstrap_servers})
    # (confluent-kafka 2.16's elect_leaders fails on any keyword option: none is passed)
    future = admin.elect_leaders(confluent_kafka.ElectionType.PREFERRED,
                                 [confluent_kafka.TopicPartition(topic_name, 0)])
    results = future.result(10)
    [(tp, error)] = results.items()
    assert (tp.topic, tp.partition) == (topic_name, 0)
    assert error.code() == confluent_kafka.KafkaError.ELECTION_NOT_NEEDED


# -- DescribeQuorum ---------------------------------------------------------------------------------

def test_describe_metadata_quorum_with_kafka_python(minibroker, admin):
    result = admin.describe_metadata_quorum()
    [topic] = result["topics"]
    [partition] = topic["partitions"]
    node = minibroker.broker.node_id
    assert topic["topic_name"] == "__cluster_metadata"
    assert (partition["partition_index"], partition["error"]) == (0, None)
    assert partition["leader_id"] == node and partition["leader_epoch"] >= 1
    [voter] = partition["current_voters"]
    assert voter["replica_id"] == node
    assert voter["log_end_offset"] == partition["high_watermark"] > 0
    assert voter["last_fetch_timestamp"] > 0 and voter["last_caught_up_timestamp"] > 0
    assert partition["observers"] == []
    [entry] = result["nodes"]
    endpoint = minibroker.broker.endpoint_for()
    assert entry["node_id"] == node
    assert [(listener["host"], listener["port"]) for listener in entry["listeners"]] == [(endpoint.host,
                                                                                          endpoint.port)]


@pytest.mark.parametrize("version", range(3))
def test_describe_quorum_of_another_partition_on_the_wire(wire, version):
    body = {"topics": [{"topic_name": "__cluster_metadata", "partitions": [{"partition_index": 1}]}]}
    r = wire.request(DESCRIBE_QUORUM, version, body)
    assert r.error_code == 0
    assert [(t.topic_name, [(p.partition_index, p.error_code) for p in t.partitions]) for t in r.topics] == [
        ("__cluster_metadata", [(1, 3)])]


# -- AlterReplicaLogDirs / DescribeLogDirs ----------------------------------------------------------------

def test_alter_replica_log_dirs_with_kafka_python(minibroker, admin, topic_name):
    kafka = pytest.importorskip("kafka")
    minibroker.create_topic(topic_name)
    log_dirs = admin.describe_log_dirs()
    node = minibroker.broker.node_id
    current = log_dirs[0]["log_dirs"][0]["log_dir"]
    here = kafka.TopicPartitionReplica(topic_name, 0, node)
    missing = kafka.TopicPartitionReplica(topic_name + "-missing", 0, node)
    result = admin.alter_replica_log_dirs({here: current, missing: current})
    assert result[here] is kafka.errors.NoError
    assert result[missing] is kafka.errors.ReplicaNotAvailableError
    result = admin.alter_replica_log_dirs({here: os.path.join(current, "elsewhere")})
    assert result[here] is kafka.errors.LogDirNotFoundError


def _alter_dirs(wire, version, moves):
    body = {"dirs": [{"path": path, "topics": [{"name": topic, "partitions": [partition]}]}
                     for path, topic, partition in moves]}
    r = wire.request(ALTER_REPLICA_LOG_DIRS, version, body)
    return {(t.topic_name, p.partition_index): p.error_code for t in r.results for p in t.partitions}


@pytest.mark.parametrize("version", (1, 2))
def test_alter_replica_log_dirs_errors_on_the_wire(minibroker, wire, topic_name, version):
    minibroker.create_topic(topic_name)
    current = os.path.abspath(minibroker.broker.logs.log_dirs[0])
    long_name = "x" * 240
    assert _alter_dirs(wire, version, [(current, topic_name, 0), ("relative/dir", topic_name, 5),
                                       (current, long_name, 0), (current, topic_name, 3)]) == {
        (topic_name, 0): 0, (topic_name, 5): 57, (long_name, 0): 17, (topic_name, 3): 9}
    # a partition named under two dirs: the last one counts
    assert _alter_dirs(wire, version, [(current, topic_name, 0), (current + "-other", topic_name, 0)]) == {
        (topic_name, 0): 57}
    assert _alter_dirs(wire, version, [(current + "-other", topic_name, 0), (current, topic_name, 0)]) == {
        (topic_name, 0): 0}


def test_the_log_manager_answers_a_move_to_the_current_dir_and_a_missing_partition(tmp_path):
    """Moves between dirs: tests/storage/test_jbod.py and tests/test_jbod_clients.py."""
    from minibroker.errors import KafkaError
    from minibroker.storage import LogManager

    dirs = [str(tmp_path / "a"), str(tmp_path / "b")]
    logs = LogManager(dirs, {}, node_id=1)
    logs.load()
    try:
        logs.create_topic("spread", 2)
        here = logs.log_dir_of("spread", 0)
        logs.move_partition("spread", 0, here)  # already there: nothing to do
        assert not logs.is_moving("spread", 0) and logs.log_dir_of("spread", 0) == here
        with pytest.raises(KafkaError) as missing:
            logs.move_partition("spread", 9, here)
        assert missing.value.code == 9
    finally:
        logs.close()


# -- partition reassignments ----------------------------------------------------------------------

def test_partition_reassignments_with_kafka_python(minibroker, admin, topic_name):
    kafka = pytest.importorskip("kafka")
    minibroker.create_topic(topic_name, partitions=2)
    node = minibroker.broker.node_id
    tp0, tp1 = kafka.TopicPartition(topic_name, 0), kafka.TopicPartition(topic_name, 1)
    assert admin.alter_partition_reassignments({tp0: [node]}) == {tp0: None}
    result = admin.alter_partition_reassignments({tp0: [node, node + 1], tp1: None})
    assert result == {tp0: kafka.errors.InvalidReplicationAssignmentError,
                      tp1: kafka.errors.NoReassignmentInProgressError}
    assert admin.list_partition_reassignments() == {}
    assert admin.list_partition_reassignments([tp0]) == {}


@pytest.mark.parametrize("version", (0, 1))
def test_alter_partition_reassignments_on_the_wire(minibroker, wire, topic_name, version):
    minibroker.create_topic(topic_name)
    node = minibroker.broker.node_id
    body = {"timeout_ms": 1000, "allow_replication_factor_change": False, "topics": [
        {"name": topic_name, "partitions": [{"partition_index": 0, "replicas": [node, node]},
                                            {"partition_index": 0, "replicas": []},
                                            {"partition_index": 4, "replicas": [node]}]},
        {"name": topic_name + "-no", "partitions": [{"partition_index": 0, "replicas": [node]}]}]}
    r = wire.request(ALTER_REASSIGNMENTS, version, body)
    assert r.error_code == 0
    assert [(t.name, [(p.partition_index, p.error_code) for p in t.partitions]) for t in r.responses] == [
        (topic_name, [(0, 39), (0, 39), (4, 3)]), (topic_name + "-no", [(0, 3)])]
    assert "more than once" in r.responses[0].partitions[0].error_message
    if version >= 1:
        assert r.allow_replication_factor_change is False


# -- UpdateFeatures and what ApiVersions reports --------------------------------------------------

def test_update_features_accepts_only_the_finalized_levels(minibroker, admin):
    kafka = pytest.importorskip("kafka")
    reported = admin.describe_features()
    level = reported["metadata.version"]["finalized"][1]
    assert level == KAFKA_4_3["metadata.version"].finalized
    assert admin.update_features({"metadata.version": level}) == {"metadata.version": "OK"}
    assert admin.update_features({"metadata.version": level}, validate_only=True) == {
        "metadata.version": "OK"}
    with pytest.raises(kafka.errors.InvalidUpdateVersionError):
        admin.update_features({"metadata.version": ("SAFE_DOWNGRADE", level - 1)})
    # every level ApiVersions reports as finalized is accepted as it is; a Kafka feature it leaves out
    # (not served here) only at level 0
    finalized = {name: f["finalized"][1] for name, f in reported.items() if "finalized" in f}
    assert admin.update_features(finalized) == dict.fromkeys(finalized, "OK")
    for name in set(KAFKA_4_3) - set(reported):
        assert admin.update_features({name: 0}) == {name: "OK"}
        with pytest.raises(kafka.errors.InvalidUpdateVersionError):
            admin.update_features({name: 1})


@pytest.mark.parametrize("version", range(3))
def test_update_features_errors_on_the_wire(wire, version):
    def update(name, level, upgrade_type=1, allow_downgrade=False):
        body = {"timeout_ms": 1000, "validate_only": False, "feature_updates": [
            {"feature": name, "max_version_level": level, "allow_downgrade": allow_downgrade,
             "upgrade_type": upgrade_type}]}
        return wire.request(UPDATE_FEATURES, version, body)

    mv = KAFKA_4_3["metadata.version"]
    r = update("metadata.version", mv.max_supported + 1)
    assert r.error_code == 95 and "only supports versions" in r.error_message
    r = update("metadata.version", mv.finalized - 1)
    assert r.error_code == 95 and "Can't downgrade" in r.error_message
    r = update("no.such.feature", 1)
    assert r.error_code == 95 and "does not support this feature" in r.error_message
    r = update("metadata.version", mv.finalized)
    assert (r.error_code, r.error_message) == (0, None)
    assert [res.feature for res in r.results] == (["metadata.version"] if version <= 1 else [])
    if version >= 1:
        assert update("metadata.version", mv.finalized, upgrade_type=7).error_code == 95


def test_telemetry_apis_are_answered_but_not_advertised(wire):
    advertised = {k.api_key for k in wire.request(API_VERSIONS, 3, {"client_software_name": "t",
                                                                    "client_software_version": "1"}).api_keys}
    assert {ALTER_REPLICA_LOG_DIRS, ELECT_LEADERS, DESCRIBE_QUORUM, UPDATE_FEATURES, LIST_CONFIG_RESOURCES,
            DESCRIBE_TOPIC_PARTITIONS, ALTER_REASSIGNMENTS, LIST_REASSIGNMENTS} <= advertised
    assert not {GET_TELEMETRY, PUSH_TELEMETRY} & advertised
    r = wire.request(GET_TELEMETRY, 0, {"client_instance_id": ZERO_UUID})
    assert r.error_code == 0 and r.client_instance_id != ZERO_UUID
    assert (r.requested_metrics, r.push_interval_ms) == ([], 300000)
    assert r.accepted_compression_types == [4, 3, 1, 2]
    assert r.subscription_id == subscription_id(r.client_instance_id)
    instance = r.client_instance_id
    # again within the push interval: throttled
    assert wire.request(GET_TELEMETRY, 0, {"client_instance_id": instance}).error_code == 89

    def push(**fields):
        body = {"client_instance_id": instance, "subscription_id": r.subscription_id, "terminating": False,
                "compression_type": 0, "metrics": b"", **fields}
        return wire.request(PUSH_TELEMETRY, 0, body).error_code

    assert push(subscription_id=r.subscription_id + 1) == 117  # right after the Get: accepted, then checked
    assert push() == 89  # a second push within the interval
    assert push(terminating=True) == 0
    assert push(terminating=True) == 42  # nothing after a terminating push
    assert push(client_instance_id=ZERO_UUID) == 42


# -- ListConfigResources ----------------------------------------------------------------------------

def test_list_config_resources(minibroker, admin, wire, topic_name):
    minibroker.create_topic(topic_name)
    node = str(minibroker.broker.node_id)
    result = admin.list_config_resources()
    assert result["broker"] == [node] and result["broker_logger"] == [node]
    assert topic_name in result["topic"] and result["topic"] == sorted(result["topic"])
    r = wire.request(LIST_CONFIG_RESOURCES, 1, {"resource_types": [2, 4]})
    assert [(c.resource_type, c.resource_name) for c in r.config_resources][0] == (4, node)
    assert wire.request(LIST_CONFIG_RESOURCES, 1, {"resource_types": [4, 64]}).error_code == 35
    r = wire.request(LIST_CONFIG_RESOURCES, 0, {})
    assert (r.error_code, r.config_resources) == (0, [])


def test_list_config_resources_lists_groups_with_configs(minibroker_factory):
    # KIP-1142: GROUP rows are the groups with a config override, first, in name order; a group without
    # one (or whose last override is deleted) is not listed
    from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource
    from kafka import KafkaAdminClient

    runner = minibroker_factory()
    admin = AdminClient({"bootstrap.servers": runner.bootstrap_servers})

    def set_group(group, op, value):
        change = ConfigResource("group", group, incremental_configs=[
            ConfigEntry("consumer.session.timeout.ms", value, incremental_operation=op)])
        admin.incremental_alter_configs([change])[change].result(10)

    set_group("g-b", AlterConfigOpType.SET, "50000")
    set_group("g-a", AlterConfigOpType.SET, "50000")
    set_group("g-c", AlterConfigOpType.SET, "50000")
    set_group("g-c", AlterConfigOpType.DELETE, None)
    python_admin = KafkaAdminClient(bootstrap_servers=runner.bootstrap_servers)
    try:
        assert python_admin.list_config_resources()["group"] == ["g-a", "g-b"]
    finally:
        python_admin.close()
    with WireClient(runner.host, runner.port) as wire:
        r = wire.request(LIST_CONFIG_RESOURCES, 1, {"resource_types": []})
        assert [(c.resource_type, c.resource_name) for c in r.config_resources][:3] == [
            (32, "g-a"), (32, "g-b"), (8, str(runner.broker.node_id))]
        r = wire.request(LIST_CONFIG_RESOURCES, 1, {"resource_types": [2, 32]})
        assert [c.resource_name for c in r.config_resources if c.resource_type == 32] == ["g-a", "g-b"]


# -- authorization ----------------------------------------------------------------------------------

def test_cluster_permissions_are_checked(minibroker_factory, topic_name):
    # ANONYMOUS has no ACL at all: every check fails (the topic need not exist: checked first)
    runner = minibroker_factory({"authorizer.class.name": STANDARD_AUTHORIZER, "super.users": "User:admin"})
    with WireClient(runner.host, runner.port) as wire:
        r = wire.request(ELECT_LEADERS, 2, {"election_type": 0, "timeout_ms": 1000,
                                            "topic_partitions": [{"topic": topic_name, "partitions": [0]}]})
        assert (r.error_code, r.replica_election_results[0].partition_result[0].error_code) == (31, 31)
        r = wire.request(DESCRIBE_QUORUM, 2, {"topics": [{"topic_name": "__cluster_metadata",
                                                          "partitions": [{"partition_index": 0}]}]})
        assert (r.error_code, r.topics) == (31, [])
        log_dir = runner.broker.logs.log_dirs[0]
        assert _alter_dirs(wire, 2, [(log_dir, topic_name, 0)]) == {(topic_name, 0): 31}
        assert wire.request(LIST_REASSIGNMENTS, 0, {"timeout_ms": 1000, "topics": None}).error_code == 31
        r = wire.request(ALTER_REASSIGNMENTS, 0, {"timeout_ms": 1000, "topics": [
            {"name": topic_name, "partitions": [{"partition_index": 0, "replicas": [0]}]}]})
        assert (r.error_code, r.responses[0].partitions[0].error_code) == (31, 31)
        assert wire.request(UPDATE_FEATURES, 1, {"timeout_ms": 1000, "feature_updates": []}).error_code == 31
        assert wire.request(LIST_CONFIG_RESOURCES, 1, {"resource_types": []}).error_code == 31
        r = _dtp(wire, [topic_name])
        assert [(t.name, t.error_code) for t in r.topics] == [(topic_name, 29)]
        assert _dtp(wire, []).topics == []  # all topics: the ones not describable are left out
