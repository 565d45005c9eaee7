"""Features minibroker does not serve fail at once, non-retriably, with the answer Kafka gives when the
feature is off and a message naming it: share groups, client-metrics config resources (issue 14, item 5;
group configs are served now, tests/test_group_configs.py). Transactions
used to be here; they are served now (issue 17, tests/test_transactions.py)."""

from __future__ import annotations

import pytest

from minibroker.tools.wire import WireClient

FIND_COORDINATOR, INIT_PRODUCER_ID = 10, 22
DESCRIBE_CONFIGS, ALTER_CONFIGS, INCREMENTAL_ALTER_CONFIGS = 32, 33, 44

# kafka-python leaks the socket of a closed producer, reported later by GC
pytestmark = pytest.mark.filterwarnings("ignore::ResourceWarning")


def test_idempotent_producers_still_get_a_producer_id(minibroker, topic_name):
    confluent_kafka = pytest.importorskip("confluent_kafka")

    minibroker.create_topic(topic_name)
    producer = confluent_kafka.Producer({"bootstrap.servers": minibroker.bootstrap_servers,
                                         "enable.idempotence": True})
    producer.produce(topic_name, b"v")
    assert producer.flush(10) == 0
    minibroker.produce(topic_name, [b"w"], enable_idempotence=True, acks="all")
    assert [r.value for r in minibroker.consume(topic_name, 2)] == [b"v", b"w"]


def _find(wire, version: int, key_type: int, key: str = "k"):
    body = {"key": key, "key_type": key_type, "coordinator_keys": [key, key + "2"]}
    r = wire.request(FIND_COORDINATOR, version, body)
    if version >= 4:
        return [(c.error_code, c.error_message, c.node_id) for c in r.coordinators]
    return [(r.error_code, r.error_message, r.node_id)]


@pytest.mark.parametrize("version", range(1, 7))
def test_find_coordinator_for_unserved_key_types_on_the_wire(minibroker, version):
    with WireClient(minibroker.host, minibroker.port) as wire:
        # share coordinator keys: below v6 refused, from v6 a malformed key ("k") is INVALID_REQUEST
        assert {(e, n) for e, _, n in _find(wire, version, 2)} == {(42, -1)}
        assert {e for e, _, _ in _find(wire, version, 3)} == {42}
        assert {(e, n) for e, _, n in _find(wire, version, 0)} == {(0, minibroker.broker.node_id)}
        assert {(e, n) for e, _, n in _find(wire, version, 1)} == {(0, minibroker.broker.node_id)}  # served


@pytest.mark.parametrize("version", range(6))
def test_init_producer_id_on_the_wire(minibroker, version):
    with WireClient(minibroker.host, minibroker.port) as wire:
        def init(transactional_id):
            body = {"transactional_id": transactional_id, "transaction_timeout_ms": 60000, "producer_id": -1,
                    "producer_epoch": -1}
            r = wire.request(INIT_PRODUCER_ID, version, body)
            return r.error_code, r.producer_id

        assert init("") == (42, -1)  # INVALID_REQUEST, as Kafka's transaction coordinator answers
        error, producer_id = init(None)
        assert error == 0 and producer_id >= 0
        error, producer_id = init(f"tx-{version}")  # served: tests/test_transactions.py
        assert error == 0 and producer_id >= 0


def test_client_metrics_config_resources_fail_fast_naming_the_feature(minibroker):
    # GROUP config resources are served (tests/test_group_configs.py)
    with WireClient(minibroker.host, minibroker.port) as wire:
        resource = {"resource_type": 16, "resource_name": "m", "configs": []}
        for api, body in ((ALTER_CONFIGS, {"resources": [resource], "validate_only": False}),
                          (INCREMENTAL_ALTER_CONFIGS, {"resources": [resource], "validate_only": False})):
            (result,) = wire.request(api, 1, body).responses
            assert result.error_code == 42
            assert result.error_message == ("Unsupported resource type: 16. "
                                            "Client metrics subscriptions are not supported by this broker")
        r = wire.request(DESCRIBE_CONFIGS, 4, {"resources": [{"resource_type": 16, "resource_name": "m",
                                                             "configuration_keys": None}],
                                               "include_synonyms": False, "include_documentation": False})
        assert r.results[0].error_code == 42 and "Client metrics" in r.results[0].error_message
        group = {"resource_type": 32, "resource_name": "g", "configs": [
            {"name": "consumer.session.timeout.ms", "value": "50000"}]}  # served, as in Kafka 4
        (result,) = wire.request(ALTER_CONFIGS, 1, {"resources": [group], "validate_only": True}).responses
        assert result.error_code == 0
