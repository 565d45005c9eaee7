"""The one fix scripts/client_suite_kafka_python.py applies to the suite's client code: a Metadata answer
to a request built before the subscription changed must not clear the update the change asked for."""

import time
from types import SimpleNamespace

import pytest
from client_fixes import kafka_python_suite_runner

kafka_cluster = pytest.importorskip("kafka.cluster")


def load_runner():
    return kafka_python_suite_runner()


def answer_without_topics():
    """A Metadata v1 answer naming the broker and no topic: what a broker says to a request for none."""
    return SimpleNamespace(API_VERSION=1, brokers=[(0, "127.0.0.1", 9092, None)], controller_id=0, topics=[])


def subscribe_while_request_in_flight(cluster_class):
    """What KafkaConsumer(topic) does when its IO thread builds the bootstrap request first."""
    cluster = cluster_class()
    cluster.metadata_request()  # built with no topics: nothing is subscribed yet
    cluster.set_topics(["orders"])  # the caller's thread subscribes; an update is flagged
    cluster.update_metadata(answer_without_topics())  # the answer to the older request arrives
    return cluster


@pytest.fixture
def cluster_class():
    """kafka-python's ClusterMetadata as released: tests/conftest.py patches the class itself for the
    whole suite (tests/client_fixes.py), so a subclass puts the released methods back."""
    released = dict(getattr(kafka_cluster.ClusterMetadata, "_minibroker_unpatched", {}))
    return type("ClusterMetadataUnderTest", (kafka_cluster.ClusterMetadata,), released)


def test_the_suite_runs_with_the_fix_applied():
    assert "_minibroker_unpatched" in vars(kafka_cluster.ClusterMetadata)


def test_unpatched_client_loses_the_subscription_update(cluster_class):
    # The race the patch exists for; if kafka-python fixes it, this fails and the patch can go
    assert subscribe_while_request_in_flight(cluster_class).need_update is False


def test_patched_client_asks_again_for_the_subscribed_topics(cluster_class):
    load_runner().patch_stale_metadata_response(cluster_class)
    cluster = subscribe_while_request_in_flight(cluster_class)
    assert cluster.need_update is True
    assert cluster.ttl() <= cluster.config["retry_backoff_ms"]


def test_patched_client_does_not_ask_again_when_the_answer_matches(cluster_class):
    load_runner().patch_stale_metadata_response(cluster_class)
    cluster = cluster_class()
    cluster.metadata_request()  # asks for no topics, and nothing is subscribed meanwhile
    cluster.update_metadata(answer_without_topics())
    assert cluster.need_update is False


def test_patch_refuses_a_client_it_does_not_know():
    with pytest.raises(RuntimeError, match="cannot patch"):
        load_runner().patch_stale_metadata_response(type("Other", (), {}))


# -- the join that completes between two polls (patch_join_completed_between_polls) ---------------------

kafka_coordinator = pytest.importorskip("kafka.coordinator.consumer")


@pytest.fixture
def released_coordinator(monkeypatch):
    """kafka-python's group coordinator as released, for one test: conftest patches the classes for the
    whole suite, so the released methods are put back (and the patched ones restored afterwards)."""
    from kafka.coordinator.base import BaseCoordinator
    from kafka.coordinator.consumer import ConsumerCoordinator

    for cls in (BaseCoordinator, ConsumerCoordinator):
        for name, method in vars(cls).get("_minibroker_unpatched", {}).items():
            monkeypatch.setattr(cls, name, method)


@pytest.fixture
def faulty_broker():
    from minibroker.testing import BrokerRunner

    runner = BrokerRunner({"fault.injection.enable": "true"})
    runner.start()
    yield runner
    runner.cleanup()


def _classic_group(broker, group: str):
    """The group as the broker's coordinator holds it (read from the test's thread: two attributes)."""
    return broker.broker.groups.groups[group]


def join_completing_between_polls(broker) -> tuple[set[int], object]:
    """A lone kafka-python member leads its group on a 3-partition topic; the topic grows to 6, the
    leader's metadata check asks for a rejoin, and the JoinGroup it sends is held by a fault rule until
    the consumer has stopped polling. Released, the join and the sync finish on the client's IO thread
    with no poll() awaiting them. Returns the partitions the consumer holds after polling again, and
    the consumer's coordinator."""
    from kafka import KafkaConsumer

    from minibroker.tools.topics import TopicAdmin

    broker.create_topic("grows", 3)
    consumer = KafkaConsumer("grows", bootstrap_servers=broker.bootstrap_servers, group_id="between",
                             session_timeout_ms=6000, heartbeat_interval_ms=500, metadata_max_age_ms=300,
                             enable_auto_commit=False)
    try:
        deadline = time.monotonic() + 20
        while len(consumer.assignment()) != 3:
            assert time.monotonic() < deadline, f"first assignment: {consumer.assignment()}"
            consumer.poll(timeout_ms=100)
        generation = _classic_group(broker, "between").generation_id
        held = broker.inject(api="JoinGroup", group="between", hold=True, count=1)
        with TopicAdmin(broker.bootstrap_servers) as admin:
            assert admin.create_partitions("grows", 6)[0] == 0
        while not held.matched:  # the rejoin's JoinGroup reached the broker and waits there
            assert time.monotonic() < deadline, "the leader never rejoined after the topic grew"
            consumer.poll(timeout_ms=50)
        held.release()
        while not (_classic_group(broker, "between").generation_id > generation
                   and _classic_group(broker, "between").state.name == "STABLE"):
            assert time.monotonic() < deadline, "the held join did not complete"
            time.sleep(0.02)  # no poll(): the join and the leader's sync finish on the IO thread
        for _ in range(10):
            consumer.poll(timeout_ms=100)
        return {tp.partition for tp in consumer.assignment()}, consumer._coordinator
    finally:
        consumer.close()


@pytest.mark.usefixtures("released_coordinator")
def test_released_client_drops_a_join_completed_between_polls(faulty_broker):
    # The race the patch exists for; if kafka-python fixes it, this fails and the patch can go
    partitions, coordinator = join_completing_between_polls(faulty_broker)
    assert len(partitions) == 3  # the new assignment (6 partitions) was never taken up
    assert not coordinator._heartbeat_enabled  # and the member no longer heartbeats


def test_patched_client_takes_up_a_join_completed_between_polls(faulty_broker):
    partitions, coordinator = join_completing_between_polls(faulty_broker)
    assert partitions == set(range(6))
    assert coordinator._heartbeat_enabled


def test_join_patch_refuses_a_client_it_does_not_know():
    with pytest.raises(RuntimeError, match="cannot patch"):
        load_runner().patch_join_completed_between_polls(type("Base", (), {}), type("Consumer", (), {}))
