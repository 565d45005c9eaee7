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
    node = str(broker.broker.node_id)
    assert _incremental_set(broker, node, "max.connection.creation.rate", "1000") == (0, None)
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


def test_queued_max_requests_holds_back_new_requests_while_the_queue_is_full(minibroker_factory):
    # Kafka's request channel holds queued.max.requests requests; a full one blocks reading: B's request
    # waits until A's fetch is answered and A's queued requests are taken in
    assert _arrival_order(minibroker_factory({"queued.max.requests": "1"})) == ["A", "B"]
    # room for B: answered while A's fetch still waits
    assert _arrival_order(minibroker_factory({"queued.max.requests": "3"})) == ["B", "A"]
