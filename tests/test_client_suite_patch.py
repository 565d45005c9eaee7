"""The one fix scripts/client_suite_kafka_python.py applies to the suite's client code: a Metadata answer
to a request built before the subscription changed must not clear the update the change asked for."""

import importlib.util
import os
import sys
from types import SimpleNamespace

import pytest

kafka_cluster = pytest.importorskip("kafka.cluster")

SCRIPT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "scripts",
                      "client_suite_kafka_python.py")


def load_runner():
    spec = importlib.util.spec_from_file_location("client_suite_kafka_python_under_test", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


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
    # A subclass, so patching it leaves the imported kafka-python untouched for other tests
    return type("ClusterMetadataUnderTest", (kafka_cluster.ClusterMetadata,), {})


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
