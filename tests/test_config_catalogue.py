"""Issue 31 item 7: the dynamic broker config levels Kafka keeps apart (per broker vs the cluster default),
and broker keys that bound the broker's work (connection creation rates, queued requests), through real
clients."""

from __future__ import annotations

import select
import socket
import struct
import time

import pytest

from minibroker.protocol import codec
from minibroker.tools.wire import WireClient

# kafka-python leaks the socket of a closed client, reported later by GC
pytestmark = pytest.mark.filterwarnings("ignore::ResourceWarning")

INVALID_REQUEST = 42
INCREMENTAL_ALTER_CONFIGS, BROKER = 44, 4


def _incremental_set(broker, name: str, key: str, value: str):
    """IncrementalAlterConfigs v1 SET of one broker key on resource ``name`` ("": the cluster default; both
    kafka-python and confluent-kafka refuse an empty broker name, so on the wire); (error code, message)."""
    with WireClient(broker.host, broker.port) as wire:
        response = wire.request(INCREMENTAL_ALTER_CONFIGS, 1, {"validate_only": False, "resources": [{
            "resource_type": BROKER, "resource_name": name,
            "configs": [{"name": key, "config_operation": 0, "value": value}]}]})
    [result] = response.responses
    return result.error_code, result.error_message


def _answered(sock: socket.socket) -> bool:
    sock.sendall(codec.encode_request(18, 0, 1, {}, "catalogue-test"))
    sock.settimeout(10)
    return len(sock.recv(4)) == 4


@pytest.mark.slow  # a throttle window, a long poll
def test_cluster_level_listener_rate_is_accepted_at_the_default_and_throttles_accepts(minibroker_factory):
    # Kafka's ClusterLevelListenerConfigs: a listener's max.connection.creation.rate may be the cluster
    # default (resource name ""), unlike the listener's other keys; accepts over it wait, none is refused
    broker = minibroker_factory({"quota.window.num": "3", "quota.window.size.seconds": "1"})
    listener = broker.broker.config.listener_endpoints()[0].name.lower()
    code, message = _incremental_set(broker, "", f"listener.name.{listener}.ssl.cipher.suites",
                                     "TLS_AES_128_GCM_SHA256")
    assert code == INVALID_REQUEST and "broker id must be specified" in message
    listener_rate = f"listener.name.{listener}.max.connection.creation.rate"
    assert _incremental_set(broker, "", listener_rate, "1") == (0, None)
    # per broker (kafka-python's AlterConfigs v0-2 on the broker id) the broker-wide rate leaves room
    from kafka import KafkaAdminClient
    from kafka.admin import ConfigResource, ConfigResourceType

    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap_servers)
    try:
        response = admin.alter_configs([ConfigResource(ConfigResourceType.BROKER, str(broker.broker.node_id),
                                                       configs={"max.connection.creation.rate": "1000"})])
    finally:
        admin.close()
    assert response == {"broker": {str(broker.broker.node_id): "OK"}}
    rates = broker.broker.socket_server.connection_rates
    before = rates.broker_throttles
    socks = [socket.create_connection((broker.host, broker.port)) for _ in range(4)]
    try:
        assert all(_answered(s) for s in socks)  # delayed, not refused
    finally:
        for s in socks:
            s.close()
    assert rates.broker_throttles > before


def _read_frame(sock: socket.socket) -> int:
    """One whole response frame from ``sock``; its correlation id."""
    def exactly(n: int) -> bytes:
        data = b""
        while len(data) < n:
            chunk = sock.recv(n - len(data))
            assert chunk, "connection closed"
            data += chunk
        return data
    size = struct.unpack(">i", exactly(4))[0]
    return struct.unpack(">i", exactly(size)[:4])[0]


def _arrival_order(broker) -> list[str]:
    """Connection A sends a Fetch that waits 1.5 s for data (a long poll) and pipelines two ApiVersions
    behind it, which wait in its queue; then connection B sends one ApiVersions. The order the first
    answers arrive in: "A" (the fetch) and "B"."""
    broker.create_topic("qmr")
    a = socket.create_connection((broker.host, broker.port))
    b = socket.create_connection((broker.host, broker.port))
    try:
        fetch = {"replica_id": -1, "max_wait_ms": 1500, "min_bytes": 1, "max_bytes": 1 << 20,
                 "isolation_level": 0, "topics": [{"topic": "qmr", "partitions": [
                     {"partition": 0, "fetch_offset": 0, "partition_max_bytes": 1 << 20}]}]}
        a.sendall(codec.encode_request(1, 4, 1, fetch, "qmr") + codec.encode_request(18, 0, 2, {}, "qmr")
                  + codec.encode_request(18, 0, 3, {}, "qmr"))
        time.sleep(0.3)  # A's requests are read (the fetch waiting, the others queued) before B sends
        b.sendall(codec.encode_request(18, 0, 9, {}, "qmr"))
        order, pending = [], {a: "A", b: "B"}
        while pending:
            ready, _, _ = select.select(list(pending), [], [], 10)
            assert ready, "no answer in 10 s"
            for sock in ready:
                _read_frame(sock)
                order.append(pending.pop(sock))
        return order
    finally:
        a.close()
        b.close()


@pytest.mark.slow  # a throttle window, a long poll
def test_queued_max_requests_holds_back_new_requests_while_the_queue_is_full(minibroker_factory):
    # Kafka's request channel holds queued.max.requests requests; a full one blocks reading: B's request
    # waits until A's fetch is answered and A's queued requests are taken in
    assert _arrival_order(minibroker_factory({"queued.max.requests": "1"})) == ["A", "B"]
    # room for B: answered while A's fetch still waits
    assert _arrival_order(minibroker_factory({"queued.max.requests": "3"})) == ["B", "A"]


THROTTLING_QUOTA_EXCEEDED = 89


def _set_mutation_rate(broker, client_id: str, rate: float) -> None:
    with WireClient(broker.host, broker.port) as wire:
        response = wire.request(49, 0, {"validate_only": False, "entries": [{
            "entity": [{"entity_type": "client-id", "entity_name": client_id}],
            "ops": [{"key": "controller_mutation_rate", "value": rate, "remove": False}]}]})
    assert [e.error_code for e in response.entries] == [0]


def test_controller_mutation_rate_refuses_topic_changes_over_the_quota(minibroker_factory):
    # KIP-599 as Kafka's ControllerMutationQuotaManager: a token bucket of rate x window.num x window.size
    # (0.5 x 2 x 1 = 1 partition), one token per partition; a change is refused (89) only while the bucket
    # is below zero, so the first, larger than the burst, goes through and takes it to -2 (4 s to refill)
    from kafka import KafkaAdminClient
    from kafka.admin import NewPartitions, NewTopic
    from kafka.errors import ThrottlingQuotaExceededError

    broker = minibroker_factory({"controller.quota.window.num": "2",
                                 "controller.quota.window.size.seconds": "1"})
    broker.create_topic("keep", 1)
    _set_mutation_rate(broker, "mutator", 0.5)

    def admin_call(method, *args, client_id="mutator"):
        # a client per call: a throttled answer pauses kafka-python's connection for the throttle time
        admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap_servers, client_id=client_id)
        try:
            return getattr(admin, method)(*args)
        finally:
            admin.close()

    admin_call("create_topics", [NewTopic("burst", 3, 1)])  # CreateTopics v7: strict
    assert broker.broker.logs.topics["burst"].partitions == 3
    with pytest.raises(ThrottlingQuotaExceededError):
        admin_call("create_topics", [NewTopic("over", 1, 1)])
    with pytest.raises(ThrottlingQuotaExceededError):
        admin_call("create_partitions", {"keep": NewPartitions(2)})
    with pytest.raises(ThrottlingQuotaExceededError):
        admin_call("delete_topics", ["burst"])
    assert "over" not in broker.broker.logs.topics and "burst" in broker.broker.logs.topics
    assert broker.broker.logs.topics["keep"].partitions == 1
    admin_call("create_topics", [NewTopic("not-limited", 2, 1)], client_id="someone-else")  # no quota
    # CreateTopics v5 predates the error: never refused, answered with the throttle time instead
    with WireClient(broker.host, broker.port, client_id="mutator") as wire:
        response = wire.request(19, 5, {"timeout_ms": 5000, "validate_only": False, "topics": [{
            "name": "old-client", "num_partitions": 1, "replication_factor": 1, "assignments": [],
            "configs": []}]})
    assert [t.error_code for t in response.topics] == [0]
    assert response.throttle_time_ms > 0
    assert "old-client" in broker.broker.logs.topics


def test_kafka_4_broker_keys_are_described_and_dynamic_as_in_kafka_4(minibroker_factory):
    # keys Kafka 4.0 added: DescribeConfigs lists them with Kafka's defaults, and the dynamic one
    # (remote.list.offsets.request.timeout.ms, KIP-1075) may be the cluster default
    pytest.importorskip("confluent_kafka")
    from confluent_kafka.admin import AdminClient, ConfigResource

    broker = minibroker_factory()
    admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
    resource = ConfigResource("broker", str(broker.broker.node_id))
    configs = admin.describe_configs([resource])[resource].result(10)
    assert configs["remote.list.offsets.request.timeout.ms"].value == "30000"
    assert not configs["remote.list.offsets.request.timeout.ms"].is_read_only
    assert configs["share.coordinator.state.topic.compression.codec"].value == "0"
    assert configs["share.coordinator.state.topic.compression.codec"].is_read_only
    assert _incremental_set(broker, "", "remote.list.offsets.request.timeout.ms", "60000") == (0, None)
    configs = admin.describe_configs([resource])[resource].result(10)
    assert configs["remote.list.offsets.request.timeout.ms"].value == "60000"


def test_mutation_quota_token_bucket_as_kafka(monkeypatch):
    # unit: Kafka's TokenBucket and Strict/PermissiveControllerMutationQuota on a fixed clock
    from types import SimpleNamespace as NS

    from minibroker.errors import KafkaError
    from minibroker.services import quotas as q

    clock = [1_000_000.0]
    monkeypatch.setattr(q, "now_ms", lambda: clock[0])
    rate = q.ControllerMutationRateQuota(num_samples=2, window_seconds=1)  # burst: 2 s of the rate
    rate.set_limits({(None, "app"): 2.0})  # 2 partitions/s, 4 at once
    header = NS(principal=None, client_id="app", api_version=7, connection=None)

    strict = q.MutationQuota(rate, header, strict=True)
    strict.take(6)  # allowed from a full bucket (4), leaving -2
    assert strict.throttle_ms == 0
    with pytest.raises(KafkaError) as refused:
        strict.take(1)
    assert refused.value.code == THROTTLING_QUOTA_EXCEEDED
    assert strict.throttle_ms == 1000  # -(-2) / 2 per second
    clock[0] += 500  # half refilled: -1, still refused, bucket unchanged by the refusal
    with pytest.raises(KafkaError):
        q.MutationQuota(rate, header, strict=True).take(1)
    clock[0] += 600  # +1.2: above zero again
    q.MutationQuota(rate, header, strict=True).take(1)

    permissive = q.MutationQuota(rate, header, strict=False)
    permissive.take(10)  # never refused, throttled by the debt
    assert permissive.throttle_ms > 0
    other = NS(principal=None, client_id="no-quota", api_version=7, connection=None)
    unlimited = q.MutationQuota(rate, other, strict=True)
    unlimited.take(10_000)
    assert unlimited.throttle_ms == 0
    response = NS(throttle_time_ms=0)
    assert strict.finish(header, response).throttle_time_ms == 0  # 1000 ms measured 1.1 s ago


def test_the_throttle_rates_a_reassignment_sets_are_accepted_as_kafka_accepts_them(minibroker):
    """kafka-reassign-partitions --throttle sets QuotaConfig's dynamic broker keys on each broker (or as
    the cluster default); Kafka 4.3's cordoned.log.dirs is per broker only."""
    from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource

    admin = AdminClient({"bootstrap.servers": minibroker.bootstrap_servers})
    node = str(minibroker.broker.node_id)
    for key in ("leader.replication.throttled.rate", "cordoned.log.dirs"):
        change = ConfigResource(ConfigResource.Type.BROKER, node, incremental_configs=[
            ConfigEntry(key, "10485760" if key.endswith("rate") else "*",
                        incremental_operation=AlterConfigOpType.SET)])
        admin.incremental_alter_configs([change])[change].result(timeout=30)
    assert _incremental_set(minibroker, "", "follower.replication.throttled.rate", "10485760") == (0, None)
    code, message = _incremental_set(minibroker, "", "cordoned.log.dirs", "*")
    assert code == INVALID_REQUEST and "broker id must be specified" in message
    resource = ConfigResource(ConfigResource.Type.BROKER, node)
    try:
        entries = admin.describe_configs([resource])[resource].result(timeout=30)
        assert entries["leader.replication.throttled.rate"].value == "10485760"
        assert entries["follower.replication.throttled.rate"].value == "10485760"
        assert entries["cordoned.log.dirs"].value == "*"
    finally:  # the session's broker: test_describe_configs_errors expects no other cluster default
        config = minibroker.broker.config
        config.set_dynamic("follower.replication.throttled.rate", None, cluster_default=True)
        for key in ("leader.replication.throttled.rate", "cordoned.log.dirs"):
            config.set_dynamic(key, None)


def test_a_key_kafka_4_removed_cannot_be_set_dynamically(minibroker):
    """Kafka 4 does not know log.message.timestamp.difference.max.ms (KIP-937): setting it is an unknown
    config, as for any name Kafka does not define; deleting a value an older broker stored still works."""
    import confluent_kafka
    from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource

    admin = AdminClient({"bootstrap.servers": minibroker.bootstrap_servers})
    node = str(minibroker.broker.node_id)

    def alter(op: AlterConfigOpType, value: str | None):
        change = ConfigResource(ConfigResource.Type.BROKER, node, incremental_configs=[
            ConfigEntry("log.message.timestamp.difference.max.ms", value, incremental_operation=op)])
        return admin.incremental_alter_configs([change])[change].result(timeout=30)

    with pytest.raises(confluent_kafka.KafkaException) as refused:
        alter(AlterConfigOpType.SET, "1000")
    assert refused.value.args[0].code() == confluent_kafka.KafkaError.INVALID_CONFIG
    alter(AlterConfigOpType.DELETE, None)
