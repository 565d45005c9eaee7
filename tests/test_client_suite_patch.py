"""The one fix scripts/client_suite_kafka_python.py applies to the suite's client code: a Metadata answer
to a request built before the subscription changed must not clear the update the change asked for."""

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
