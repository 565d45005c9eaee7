"""Client quotas (issue 19): DescribeClientQuotas / AlterClientQuotas, producer and consumer byte rates,
request_percentage, connection_creation_rate, persistence, and Kafka's precedence order.

Neither kafka-python 3.0.12's KafkaAdminClient nor confluent-kafka's AdminClient has client quota
methods, so the admin calls go through kafka-python's own connection manager with its own request
classes (kafka.protocol.admin.AlterClientQuotasRequest / DescribeClientQuotasRequest), which encode the
wire format independently of ours; the versions are checked on the wire with our WireClient too.

Rates: the brokers measuring them run with quota.window.num=3 (samples of 1 s). Kafka's rate is taken
over at least num - 1 windows, so a client first sends a burst of about that many windows' worth before
it is throttled, and pays it back later (the default 11 windows would make that a 10 s burst); a whole
sample leaving the span makes the rate saw-toothed with a period of about num windows. Rates are
therefore measured over a whole run of 6 s from the first request, where they settle within a few
percent of the quota (producers) or about 10 % (consumers, whose throttled fetches come back empty).
"""

from __future__ import annotations

import socket
import struct
import time

import pytest
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from kafka.protocol.admin import AlterClientQuotasRequest, DescribeClientQuotasRequest

from minibroker.protocol import codec
from minibroker.services.quotas import (
    DEFAULT,
    ClientRateQuota,
    ControllerMutationRateQuota,
    Rate,
    now_ms,
    throttle_ms,
)
from minibroker.tools.wire import WireClient

# kafka-python leaks the socket of a closed client, reported later by GC
pytestmark = pytest.mark.filterwarnings("ignore::ResourceWarning")

DESCRIBE, ALTER = 48, 49
QUOTA = 256 * 1024  # bytes per second
RATE_BROKER = {"quota.window.num": "3", "quota.window.size.seconds": "1"}
RUN_S = 6.0
INVALID_REQUEST, UNSUPPORTED_VERSION = 42, 35


# -- helpers ------------------------------------------------------------------------------------


def _entity(**names):
    """entity(user="alice", client_id=None) -> [(type, name)]; None is the default entity."""
    return [(k.replace("_", "-"), v) for k, v in names.items()]


class KafkaPythonQuotas:
    """AlterClientQuotas / DescribeClientQuotas sent by kafka-python (its request classes and connection)."""

    def __init__(self, bootstrap: str):
        self.admin = KafkaAdminClient(bootstrap_servers=bootstrap)

    def _send(self, request):
        async def send():
            return await self.admin._manager.send(request)

        return self.admin._manager.run(send)

    def alter(self, entity, ops, validate_only=False):
        entry = AlterClientQuotasRequest.EntryData
        request = AlterClientQuotasRequest(entries=[entry(
            entity=[entry.EntityData(entity_type=t, entity_name=n) for t, n in entity],
            ops=[entry.OpData(key=k, value=float(v or 0), remove=v is None) for k, v in ops.items()])],
            validate_only=validate_only)
        (result,) = self._send(request).entries
        return result.error_code, result.error_message

    def describe(self, components=(), strict=False):
        component = DescribeClientQuotasRequest.ComponentData
        request = DescribeClientQuotasRequest(components=[
            component(entity_type=t, match_type=m, match=n) for t, m, n in components], strict=strict)
        response = self._send(request)
        if response.error_code:
            return response.error_code, response.error_message
        return {tuple(sorted((e.entity_type, e.entity_name) for e in entry.entity)):
                {v.key: v.value for v in entry.values} for entry in response.entries}

    def close(self):
        self.admin.close()


@pytest.fixture
def rate_broker(minibroker_factory):
    return minibroker_factory(RATE_BROKER)


@pytest.fixture
def quotas(rate_broker):
    client = KafkaPythonQuotas(rate_broker.bootstrap_servers)
    yield client
    client.close()


def _fill(broker, topic: str, n: int = 3000) -> None:
    """n records of 1000 B in 16 KiB batches (a throttled consumer can only take batches smaller than
    what the quota allows in one window)."""
    confluent_kafka = pytest.importorskip("confluent_kafka")
    producer = confluent_kafka.Producer({"bootstrap.servers": broker.bootstrap_servers, "linger.ms": 5,
                                         "batch.size": 16384})
    for i in range(n):
        producer.produce(topic, b"x" * 1000)
        if i % 500 == 0:
            producer.poll(0)
    assert producer.flush(30) == 0


def _assert_rate(nbytes: int, seconds: float) -> None:
    rate = nbytes / seconds
    assert 0.8 * QUOTA <= rate <= 1.2 * QUOTA, f"{rate / 1024:.0f} KiB/s against a quota of {QUOTA // 1024}"


# -- unit: Kafka's precedence order and rate ------------------------------------------------------


def test_precedence_follows_kafkas_table():
    """ClientQuotaManager's documented order: user+client, user+default client, user, default user+client,
    default user+default client, default user, client, default client; most specific first."""
    levels = [(("alice", "app"), ("alice", "app")), (("alice", DEFAULT), ("alice", "app")),
              (("alice", None), ("alice", "")), ((DEFAULT, "app"), ("alice", "app")),
              ((DEFAULT, DEFAULT), ("alice", "app")), ((DEFAULT, None), ("alice", "")),
              ((None, "app"), ("", "app")), ((None, DEFAULT), ("", "app"))]
    quota = ClientRateQuota("producer_byte_rate", 11, 1000.0)
    limits = {entity: float(i + 1) for i, (entity, _) in enumerate(levels)}
    for i, (entity, tags) in enumerate(levels):
        quota.set_limits(limits)
        assert quota.resolve("alice", "app") == (tags, float(i + 1)), entity
        del limits[entity]  # the next level applies once this one is gone
    quota.set_limits(limits)
    assert quota.resolve("alice", "app") is None and not quota.enabled
    # the defaults cover other names; a user level needs a user, a client-id level a client id
    quota.set_limits({(DEFAULT, DEFAULT): 5.0, (None, DEFAULT): 7.0, ("bob", None): 9.0})
    assert quota.resolve("carol", "x") == (("carol", "x"), 5.0)
    assert quota.resolve("bob", "x") == (("bob", ""), 9.0)
    assert quota.resolve("", "x") == (("", "x"), 7.0)
    assert quota.resolve("carol", "") is None  # no user-only entity; client-id levels need a client id
    quota.set_limits({("alice", DEFAULT): 3.0, (None, DEFAULT): 7.0})
    assert quota.resolve("alice", "") is None  # an empty client id matches no client-id level
    assert quota.resolve("ANONYMOUS", "app") == (("", "app"), 7.0)


def test_rate_and_throttle_time_as_kafka_computes_them():
    rate = Rate(11, 1000.0)
    rate.record(100.0, 0.0)
    # at least 10 whole windows: 100 over 10 s is 10 per second
    assert rate.window_size(500.0) == 10500.0
    assert throttle_ms(rate, 10.0, 0.0) == 0
    rate.record(10.0, 0.0)
    assert throttle_ms(rate, 10.0, 0.0) == 1000  # (11 - 10) / 10 * 10 s
    assert throttle_ms(rate, 10.0, 0.0, cap=400.0) == 400
    # samples with no event for num windows are obsolete: the rate falls back to nothing
    assert rate.measure(11_000.0) == 0.0


def test_controller_mutation_buckets_keep_their_tokens_across_reloads_of_the_limits():
    """As Kafka keeps a sensor's state and changes only its bound: a reload (every AlterClientQuotas,
    whichever key it changed) keeps a drained bucket drained. Rates small enough that the test's own
    time refills nothing that matters."""
    quota = ControllerMutationRateQuota(num_samples=2, window_seconds=1)  # burst: 2 s of the rate
    quota.set_limits({(None, "creator"): 0.01, ("alice", None): 0.01})
    tags, limit = quota.resolve("", "creator")
    bucket = quota.bucket(tags, limit, now_ms())
    bucket.tokens = -3.0  # drained by a CreateTopics of 3 partitions
    other = quota.bucket(*quota.resolve("alice", "x"), now_ms())
    quota.set_limits({(None, "creator"): 0.01, ("alice", None): 0.01})  # the same limits again
    assert quota.buckets[tags] is bucket and bucket.tokens < -2.9
    quota.set_limits({(None, "creator"): 0.02, ("alice", None): 0.01})  # this client's bound changes
    assert quota.buckets[tags] is bucket and (bucket.rate, bucket.burst) == (0.02, 0.04)
    assert bucket.tokens < -2.9
    quota.set_limits({(None, "creator"): 0.02})  # alice's quota goes, and her bucket with it
    assert list(quota.buckets) == [tags] and other not in quota.buckets.values()
    quota.set_limits({(None, "creator"): 0.02, (None, DEFAULT): 1.0})
    assert quota.buckets[tags] is bucket  # another entity's limit: nothing of this bucket changes
    quota.set_limits({(None, DEFAULT): 1.0})  # now the default client-id quota, same tags: a new bound
    assert quota.buckets[tags] is bucket and bucket.rate == 1.0
    quota.set_limits({("bob", None): 1.0})  # no quota for this client any more
    assert quota.buckets == {}


# -- AlterClientQuotas / DescribeClientQuotas -----------------------------------------------------


def test_alter_and_describe_with_kafka_python(quotas):
    assert quotas.alter(_entity(client_id="app"), {"producer_byte_rate": 1024}) == (0, None)
    assert quotas.alter(_entity(user="alice", client_id=None), {"consumer_byte_rate": 2048,
                                                                  "request_percentage": 12.5}) == (0, None)
    assert quotas.alter(_entity(user=None), {"producer_byte_rate": 4096}) == (0, None)
    assert quotas.alter(_entity(ip="127.0.0.1"), {"connection_creation_rate": 100}) == (0, None)
    assert quotas.alter(_entity(ip=None), {"connection_creation_rate": 50}, validate_only=True) == (0, None)
    app, alice, users = (("client-id", "app"),), (("client-id", None), ("user", "alice")), (("user", None),)
    ip = (("ip", "127.0.0.1"),)
    everything = quotas.describe()
    assert everything == {app: {"producer_byte_rate": 1024.0}, users: {"producer_byte_rate": 4096.0},
                          alice: {"consumer_byte_rate": 2048.0, "request_percentage": 12.5},
                          ip: {"connection_creation_rate": 100.0}}  # validate_only changed nothing
    assert set(quotas.describe([("user", 2, None)])) == {alice, users}  # any named or default user
    assert set(quotas.describe([("user", 2, None)], strict=True)) == {users}
    assert set(quotas.describe([("user", 1, None)])) == {users}  # the default user
    assert set(quotas.describe([("user", 0, "alice"), ("client-id", 1, None)])) == {alice}
    assert set(quotas.describe([("client-id", 0, "app")], strict=True)) == {app}
    assert set(quotas.describe([("ip", 2, None)])) == {ip}
    # removing keys; an entity without keys is gone; removing what is not set is no error
    assert quotas.alter(_entity(user="alice", client_id=None), {"consumer_byte_rate": None,
                                                                  "request_percentage": None}) == (0, None)
    assert quotas.alter(_entity(client_id="nobody"), {"producer_byte_rate": None}) == (0, None)
    assert set(quotas.describe()) == {app, users, ip}


@pytest.mark.parametrize("entity, ops, message", [
    ([], {"producer_byte_rate": 1}, "empty"),
    (_entity(group="g"), {"producer_byte_rate": 1}, "entity type"),
    (_entity(client_id=""), {"producer_byte_rate": 1}, "Empty client-id"),
    (_entity(ip="127.0.0.1", user="u"), {"connection_creation_rate": 1}, "combination"),
    (_entity(ip="not a host name."), {"connection_creation_rate": 1}, "not a valid IP"),
    (_entity(client_id="a"), {"connection_creation_rate": 1}, "Invalid configuration key"),
    (_entity(ip=None), {"producer_byte_rate": 1}, "Invalid configuration key"),
    (_entity(client_id="a"), {"no_such_key": 1}, "Invalid configuration key"),
    (_entity(client_id="a"), {"producer_byte_rate": 0}, "greater than 0"),
    (_entity(client_id="a"), {"producer_byte_rate": -5}, "greater than 0"),
    (_entity(client_id="a"), {"producer_byte_rate": 1.5}, "fractional"),
    (_entity(ip=None), {"connection_creation_rate": 2.0**31}, "too large"),
])
def test_alter_refuses_what_kafka_refuses(quotas, entity, ops, message):
    code, text = quotas.alter(entity, ops)
    assert code == INVALID_REQUEST and message in text
    assert quotas.describe() == {}


def test_wire_versions_and_errors(rate_broker):
    def entry(entity, *ops):
        return {"entity": [{"entity_type": t, "entity_name": n} for t, n in entity],
                "ops": [{"key": k, "value": v, "remove": r} for k, v, r in ops]}

    with WireClient(rate_broker.host, rate_broker.port) as wire:
        for version in (0, 1):
            app = entry(_entity(client_id=f"v{version}"), ("producer_byte_rate", 100.0, False))
            dup_key = entry(_entity(client_id="d"), ("producer_byte_rate", 1.0, False),
                            ("producer_byte_rate", 2.0, False))
            r = wire.request(ALTER, version, {"entries": [app, dup_key, app], "validate_only": False})
            assert [e.error_code for e in r.entries] == [0, INVALID_REQUEST, INVALID_REQUEST]
            echoed = [(x.entity_type, x.entity_name) for x in r.entries[0].entity]
            assert echoed == [("client-id", f"v{version}")]
            r = wire.request(DESCRIBE, version, {"components": [
                {"entity_type": "client-id", "match_type": 0, "match": f"v{version}"}], "strict": True})
            assert r.error_code == 0 and [(v.key, v.value) for v in r.entries[0].values] == [
                ("producer_byte_rate", 100.0)]
        for components, code in [
            ([{"entity_type": "", "match_type": 2, "match": None}], INVALID_REQUEST),
            ([{"entity_type": "user", "match_type": 2, "match": None}] * 2, INVALID_REQUEST),
            ([{"entity_type": "user", "match_type": 0, "match": None}], INVALID_REQUEST),
            ([{"entity_type": "user", "match_type": 1, "match": "x"}], INVALID_REQUEST),
            ([{"entity_type": "user", "match_type": 2, "match": "x"}], INVALID_REQUEST),
            ([{"entity_type": "user", "match_type": 7, "match": None}], INVALID_REQUEST),
            ([{"entity_type": "ip", "match_type": 2, "match": None},
              {"entity_type": "user", "match_type": 2, "match": None}], INVALID_REQUEST),
            ([{"entity_type": "topic", "match_type": 2, "match": None}], UNSUPPORTED_VERSION),
        ]:
            r = wire.request(DESCRIBE, 1, {"components": components, "strict": False})
            assert (r.error_code, r.entries) == (code, None), components
            assert r.error_message


def test_quotas_survive_a_restart(minibroker_factory):
    broker = minibroker_factory(RATE_BROKER)
    client = KafkaPythonQuotas(broker.bootstrap_servers)
    try:
        assert client.alter(_entity(user="u1", client_id="c1"), {"producer_byte_rate": 1000}) == (0, None)
        assert client.alter(_entity(ip=None), {"connection_creation_rate": 1000}) == (0, None)
    finally:
        client.close()
    broker.restart()
    client = KafkaPythonQuotas(broker.bootstrap_servers)
    try:
        assert client.describe() == {(("client-id", "c1"), ("user", "u1")): {"producer_byte_rate": 1000.0},
                                     (("ip", None),): {"connection_creation_rate": 1000.0}}
    finally:
        client.close()
    assert broker.broker.client_quotas.produce.resolve("u1", "c1")[1] == 1000.0


# -- enforcement ----------------------------------------------------------------------------------


def _kafka_python_produce(broker, topic: str, client_id: str):
    """Produce 1000 B records as fast as the broker lets us for RUN_S; (bytes acked, seconds from the
    first send to the last ack, producer metrics)."""
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap_servers, client_id=client_id, linger_ms=5)
    acked: list[float] = []
    sent = 0
    start = time.monotonic()
    while time.monotonic() - start < RUN_S:
        if sent - len(acked) > 200:  # bounded backlog: kafka-python 3's buffer has no limit
            time.sleep(0.002)
            continue
        producer.send(topic, b"x" * 1000).add_callback(lambda _: acked.append(time.monotonic()))
        sent += 1
    producer.flush(30)
    metrics = {k: v for group in producer.metrics().values() for k, v in group.items()}
    producer.close()
    return len(acked) * 1000, max(acked) - start, metrics


@pytest.mark.slow
def test_kafka_python_producer_is_throttled_to_its_client_id_quota(rate_broker, quotas, topic_name):
    rate_broker.create_topic(topic_name)
    assert quotas.alter(_entity(client_id="slow-producer"), {"producer_byte_rate": QUOTA}) == (0, None)
    nbytes, seconds, metrics = _kafka_python_produce(rate_broker, topic_name, "slow-producer")
    assert metrics["throttle-time-max"] > 0
    _assert_rate(nbytes, seconds)
    assert rate_broker.broker.client_quotas.produce.throttled > 0
    # removing the quota unthrottles: another run is not throttled at all
    assert quotas.alter(_entity(client_id="slow-producer"), {"producer_byte_rate": None}) == (0, None)
    throttled = rate_broker.broker.client_quotas.produce.throttled
    producer = KafkaProducer(bootstrap_servers=rate_broker.bootstrap_servers, client_id="slow-producer")
    for _ in range(2000):
        producer.send(topic_name, b"x" * 1000)
    producer.flush(30)
    metrics = {k: v for group in producer.metrics().values() for k, v in group.items()}
    producer.close()
    assert metrics["throttle-time-max"] == 0
    assert rate_broker.broker.client_quotas.produce.throttled == throttled


@pytest.mark.slow
def test_confluent_producer_is_throttled_by_the_default_user_quota(rate_broker, quotas, topic_name):
    """PLAINTEXT clients are User:ANONYMOUS, which the <default> user quota covers (as in Kafka)."""
    confluent_kafka = pytest.importorskip("confluent_kafka")
    rate_broker.create_topic(topic_name)
    assert quotas.alter(_entity(user=None), {"producer_byte_rate": QUOTA}) == (0, None)
    throttles: list[float] = []
    producer = confluent_kafka.Producer({
        "bootstrap.servers": rate_broker.bootstrap_servers, "linger.ms": 5, "batch.size": 16384,
        "queue.buffering.max.kbytes": 256,
        "throttle_cb": lambda event: throttles.append(event.throttle_time)})
    acked: list[float] = []

    def delivered(err, msg):
        assert err is None
        acked.append(time.monotonic())

    start = time.monotonic()
    while time.monotonic() - start < RUN_S:
        try:
            producer.produce(topic_name, b"x" * 1000, on_delivery=delivered)
        except BufferError:  # queue.buffering.max.kbytes: wait for deliveries
            producer.poll(0.01)
        producer.poll(0)
    assert producer.flush(30) == 0
    assert throttles and max(throttles) > 0
    _assert_rate(len(acked) * 1000, max(acked) - start)
    assert rate_broker.broker.client_quotas.produce.resolve("ANONYMOUS", "rdkafka")[1] == QUOTA


@pytest.mark.slow
def test_kafka_python_consumer_is_throttled(rate_broker, quotas, topic_name):
    rate_broker.create_topic(topic_name)
    _fill(rate_broker, topic_name)
    assert quotas.alter(_entity(client_id="slow-consumer"), {"consumer_byte_rate": QUOTA}) == (0, None)
    consumer = KafkaConsumer(bootstrap_servers=rate_broker.bootstrap_servers, client_id="slow-consumer",
                             fetch_max_bytes=65536, max_partition_fetch_bytes=65536)
    consumer.assign([TopicPartition(topic_name, 0)])
    consumer.seek(TopicPartition(topic_name, 0), 0)
    nbytes = 0
    start = time.monotonic()
    while time.monotonic() - start < RUN_S:
        for records in consumer.poll(timeout_ms=100).values():
            nbytes += sum(len(r.value) for r in records)
    seconds = time.monotonic() - start
    metrics = {k: v for group in consumer.metrics().values() for k, v in group.items()}
    consumer.close()
    assert metrics["throttle-time-max"] > 0
    _assert_rate(nbytes, seconds)
    assert rate_broker.broker.client_quotas.fetch.throttled > 0


@pytest.mark.slow
def test_confluent_consumer_is_throttled(rate_broker, quotas, topic_name):
    confluent_kafka = pytest.importorskip("confluent_kafka")
    rate_broker.create_topic(topic_name)
    _fill(rate_broker, topic_name)
    assert quotas.alter(_entity(user="ANONYMOUS", client_id="slow-rdkafka"),
                        {"consumer_byte_rate": QUOTA}) == (0, None)
    throttles: list[float] = []
    consumer = confluent_kafka.Consumer({
        "bootstrap.servers": rate_broker.bootstrap_servers, "client.id": "slow-rdkafka",
        "group.id": topic_name,
        "enable.auto.commit": False, "fetch.max.bytes": 65536, "max.partition.fetch.bytes": 65536,
        "message.max.bytes": 65536, "receive.message.max.bytes": 70000,
        "throttle_cb": lambda event: throttles.append(event.throttle_time)})
    consumer.assign([confluent_kafka.TopicPartition(topic_name, 0, 0)])
    nbytes = 0
    start = time.monotonic()
    while time.monotonic() - start < RUN_S:
        message = consumer.poll(0.1)
        if message is not None and not message.error():
            nbytes += len(message.value())
    seconds = time.monotonic() - start
    consumer.close()
    assert throttles and max(throttles) > 0
    _assert_rate(nbytes, seconds)


def test_request_percentage_throttles_and_mutes(rate_broker, quotas):
    # 0.001 % of the loop: any request takes more than 10 us of it
    assert quotas.alter(_entity(client_id="busy"), {"request_percentage": 0.001}) == (0, None)
    with WireClient(rate_broker.host, rate_broker.port, client_id="busy") as wire:
        first = wire.request(3, 12, {"topics": None, "allow_auto_topic_creation": False,
                                     "include_topic_authorized_operations": False})
        assert 0 < first.throttle_time_ms <= 1000  # capped at one window, as Kafka caps request time
        # muted until the throttle time has passed: checked before the next request is sent
        assert any(c.throttled for c in list(rate_broker.broker.connections))
        second = wire.request(18, 3, {"client_software_name": "t", "client_software_version": "1"})
        assert second.error_code == 0 and second.throttle_time_ms > 0
    assert rate_broker.broker.client_quotas.request.throttled >= 2
    assert quotas.alter(_entity(client_id="busy"), {"request_percentage": None}) == (0, None)
    with WireClient(rate_broker.host, rate_broker.port, client_id="busy") as wire:
        assert wire.request(18, 3, {"client_software_name": "t", "client_software_version": "1"}
                            ).throttle_time_ms == 0


def test_a_client_throttled_on_create_topics_stays_throttled_after_an_unrelated_alter(rate_broker, quotas):
    """Each AlterClientQuotas reloads every key's limits; the controller mutation buckets keep their
    tokens through it (they were all refilled: a throttled client could create topics again). At 0.01
    partitions per second the 3 taken are not paid back while the test runs."""
    from kafka.admin import NewTopic
    from kafka.errors import ThrottlingQuotaExceededError

    assert quotas.alter(_entity(client_id="mutator"), {"controller_mutation_rate": 0.01}) == (0, None)

    def create(name: str, partitions: int) -> None:
        # a client per call: a throttled answer pauses kafka-python's connection for the throttle time
        admin = KafkaAdminClient(bootstrap_servers=rate_broker.bootstrap_servers, client_id="mutator")
        try:
            admin.create_topics([NewTopic(name, partitions, 1)])  # CreateTopics v7: a strict quota
        finally:
            admin.close()

    create("burst", 3)
    with pytest.raises(ThrottlingQuotaExceededError):
        create("over", 1)
    assert quotas.alter(_entity(user="someone-else"), {"producer_byte_rate": 1024}) == (0, None)
    with pytest.raises(ThrottlingQuotaExceededError):
        create("over", 1)
    assert "over" not in rate_broker.broker.logs.topics


def _api_versions_answered(sock: socket.socket) -> bool:
    """Send ApiVersions v0; True if answered, False if the broker closes the connection unanswered."""
    sock.sendall(codec.encode_request(18, 0, 1, {}, "rate-test"))
    sock.settimeout(10)
    try:
        head = sock.recv(4)
    except ConnectionResetError:
        return False
    if not head:
        return False
    size = struct.unpack(">i", head)[0]
    assert size > 0
    return True


def test_connection_creation_rate_per_ip(rate_broker, quotas):
    """Over its connection_creation_rate an address's new connection is held unanswered, then closed."""
    assert quotas.alter(_entity(ip="127.0.0.1"), {"connection_creation_rate": 1}) == (0, None)
    socks = [socket.create_connection((rate_broker.host, rate_broker.port)) for _ in range(4)]
    try:
        answered = [_api_versions_answered(s) for s in socks]
    finally:
        for s in socks:
            s.close()
    # 1 per second over the 2 s minimum span (quota.window.num=3): the third and fourth are over it
    assert answered == [True, True, False, False]
    assert rate_broker.broker.socket_server.connection_rates.address_throttles == 2
    assert quotas.alter(_entity(ip="127.0.0.1"), {"connection_creation_rate": None}) == (0, None)


def test_broker_wide_connection_creation_rate_delays_accepting(minibroker_factory):
    broker = minibroker_factory({**RATE_BROKER, "max.connection.creation.rate": "1"})
    socks = [socket.create_connection((broker.host, broker.port)) for _ in range(3)]
    try:
        # all are served in the end: over the rate the broker waits before accepting, it does not refuse
        assert all(_api_versions_answered(s) for s in socks)
    finally:
        for s in socks:
            s.close()
    assert broker.broker.socket_server.connection_rates.broker_throttles >= 1


def test_a_failed_quota_save_changes_nothing(tmp_path, monkeypatch):
    # fault path: minibroker-client-quotas cannot be written (ENOSPC): UNKNOWN_SERVER_ERROR, nothing applied
    from types import SimpleNamespace as NS

    import minibroker.storage.metadata_file as metadata_file
    from minibroker.errors import ErrorCode
    from minibroker.services.quotas import ClientQuotas

    quotas = ClientQuotas(str(tmp_path))
    quotas.load()

    def full_disk(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(metadata_file, "save_metadata", full_disk)
    entry = NS(entity=[NS(entity_type="client-id", entity_name="app")],
               ops=[NS(key="producer_byte_rate", value=1024.0, remove=False)])
    [(code, message)] = quotas.alter([entry], validate_only=False)
    assert code == ErrorCode.UNKNOWN_SERVER_ERROR and "could not be saved" in message
    assert quotas.entities == {}
