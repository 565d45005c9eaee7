"""Issue 2: the broker answers real clients' first requests, and bad framing never hurts it."""

from __future__ import annotations

import os
import socket
import struct
import subprocess
import time

import pytest

from minibroker.protocol import codec
from minibroker.server.sockets import listen_socket
from minibroker.tools.wire import WireClient


def _connect(broker) -> socket.socket:
    return socket.create_connection(("127.0.0.1", broker.port), timeout=5)


def _closed_by_peer(sock: socket.socket, timeout: float = 5.0) -> bool:
    sock.settimeout(timeout)
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True


def _alive(broker) -> bool:
    with WireClient("127.0.0.1", broker.port) as c:
        return c.request(18, 0, {}).error_code == 0


def test_kcat_lists_the_broker(minibroker, kcat):
    out = subprocess.run([kcat, "-b", minibroker.bootstrap_servers, "-L", "-m", "10"], capture_output=True,
                         text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    assert f"broker 1 at 127.0.0.1:{minibroker.port}" in out.stdout


def test_kafka_python_describe_cluster(minibroker):
    from kafka import KafkaAdminClient

    admin = KafkaAdminClient(bootstrap_servers=minibroker.bootstrap_servers)
    try:
        cluster = admin.describe_cluster()
    finally:
        admin.close()
    assert cluster["controller_id"] == 1
    assert [b["port"] for b in cluster["brokers"]] == [minibroker.port]
    assert cluster["cluster_id"]


async def test_aiokafka_producer_starts(minibroker):
    from aiokafka import AIOKafkaProducer

    producer = AIOKafkaProducer(bootstrap_servers=minibroker.bootstrap_servers)
    await producer.start()
    await producer.stop()


def test_confluent_admin_list_topics(minibroker, topic_name):
    from confluent_kafka.admin import AdminClient

    minibroker.create_topic(topic_name, partitions=3)
    admin = AdminClient({"bootstrap.servers": minibroker.bootstrap_servers})
    md = admin.list_topics(timeout=10)
    assert list(md.brokers) == [1]
    assert len(md.topics[topic_name].partitions) == 3
    assert md.cluster_id and md.controller_id == 1


def test_api_versions_lists_served_apis_and_rejects_future_version(minibroker):
    with WireClient("127.0.0.1", minibroker.port) as c:
        r = c.request(18, 3, {"client_software_name": "t", "client_software_version": "1"})
        served = {k.api_key: (k.min_version, k.max_version) for k in r.api_keys}
        assert served[18] == (0, 4) and served[3] == (0, 13)
        # ApiVersions v9 does not exist: error 35 in a v0 body with header v0
        frame = struct.pack(">hhih", 18, 9, 77, 1) + b"t" + b"\x00\x00\x00"
        c.sock.sendall(struct.pack(">i", len(frame)) + frame)
        size = struct.unpack(">i", c._read(4))[0]
        corr, body = codec.decode_response(18, 0, c._read(size))
        assert corr == 77 and body.error_code == 35
        assert [(k.api_key, k.min_version, k.max_version) for k in body.api_keys] == [(18, 0, 4)]


@pytest.mark.parametrize("payload", [
    b"\x7f\xff\xff\xff",                      # 2 GiB size prefix: refused before allocating
    b"\xff\xff\xff\xf0",                      # negative size
    b"\x00\x00\x00\x00",                      # empty frame
    b"\x00\x00\x00\x04\x00\x12\x00",          # shorter than a header (padded to size below)
    b"GET / HTTP/1.1\r\nHost: x\r\n\r\n",     # not Kafka at all
    struct.pack(">ihhi", 8, 999, 0, 1),       # unknown API key
    struct.pack(">ihhi", 8, 3, 99, 1),        # Metadata v99
    struct.pack(">ihhih", 10, 3, 5, 1, 100),  # truncated client id
], ids=["huge", "negative", "empty", "short", "http", "unknown-key", "bad-version", "truncated"])
def test_bad_frames_close_only_that_connection(minibroker, payload):
    other = _connect(minibroker)
    sock = _connect(minibroker)
    sock.sendall(payload)
    if payload.startswith(b"\x00\x00\x00\x04"):
        sock.sendall(b"\x00")
    assert _closed_by_peer(sock)
    sock.close()
    other.sendall(codec.encode_request(18, 0, 5, {}))
    other.settimeout(5)
    assert len(other.recv(4)) == 4
    other.close()
    assert _alive(minibroker)


def test_garbage_storm_and_pipelining(minibroker):
    import random

    rng = random.Random(7)
    for _ in range(50):
        s = _connect(minibroker)
        s.sendall(bytes(rng.randrange(256) for _ in range(rng.randint(1, 300))))
        s.close()
    # pipelined requests are answered in order
    with WireClient("127.0.0.1", minibroker.port) as c:
        frames = b"".join(codec.encode_request(18, 0, i, {}) for i in range(1, 11))
        c.sock.sendall(frames)
        seen = []
        for _ in range(10):
            size = struct.unpack(">i", c._read(4))[0]
            seen.append(codec.decode_response(18, 0, c._read(size))[0])
        assert seen == list(range(1, 11))
    assert _alive(minibroker)


def test_metadata_errors_and_auto_create(minibroker_factory):
    broker = minibroker_factory({"auto.create.topics.enable": "false", "num.partitions": "2"})
    with WireClient("127.0.0.1", broker.port) as c:
        r = c.request(3, 12, {"topics": [{"name": "missing"}, {"name": "bad/name"}],
                              "allow_auto_topic_creation": True})
        assert [(t.name, t.error_code) for t in r.topics] == [("missing", 3), ("bad/name", 17)]
    broker2 = minibroker_factory({"num.partitions": "2"})
    with WireClient("127.0.0.1", broker2.port) as c:
        r = c.request(3, 12, {"topics": [{"name": "auto"}], "allow_auto_topic_creation": True})
        t = r.topics[0]
        assert t.error_code == 0 and len(t.partitions) == 2 and t.topic_id != b"\0" * 16
        assert t.partitions[0].leader_id == 1 and t.partitions[0].isr_nodes == [1]
        r = c.request(3, 4, {"topics": [{"name": "auto2"}], "allow_auto_topic_creation": False})
        assert r.topics[0].error_code == 3
        everything = c.request(3, 1, {"topics": None})
        assert [t.name for t in everything.topics] == ["auto"]
        none = c.request(3, 1, {"topics": []})
        assert none.topics == []


def test_cluster_id_and_topic_ids_survive_restart(minibroker_factory):
    broker = minibroker_factory()
    broker.create_topic("kept", 1)
    with WireClient("127.0.0.1", broker.port) as c:
        before = c.request(3, 12, {"topics": None})
    broker.restart()
    with WireClient("127.0.0.1", broker.port) as c:
        after = c.request(3, 12, {"topics": None})
    assert after.cluster_id == before.cluster_id
    assert [(t.name, t.topic_id) for t in after.topics] == [(t.name, t.topic_id) for t in before.topics]


def _blocked_in(pid: int, tid: str) -> str:
    """The kernel function thread ``tid`` waits in (anon_pipe_read, do_epoll_wait, futex_wait...)."""
    deadline = time.monotonic() + 10
    while True:  # a thread just started may not be blocked yet
        with open(f"/proc/{pid}/task/{tid}/wchan") as f:
            where = f.read()
        if where not in ("", "0") or time.monotonic() > deadline:
            return where
        time.sleep(0.01)


def test_process_mode_starts_fast_and_stops_on_sigterm(minibroker_factory):
    t0 = time.monotonic()
    broker = minibroker_factory(mode="process")
    assert _alive(broker)
    proc = broker.process
    # one thread: listeners are resolved before the loop takes them, so no resolver pool idles; besides
    # it only the parent watch of a test's broker (MINIBROKER_PARENT_PIPE_FD), blocked reading its pipe
    others = [t for t in os.listdir(f"/proc/{proc.pid}/task") if t != str(proc.pid)]
    waits = [_blocked_in(proc.pid, t) for t in others]
    assert len(others) == 1 and "pipe_read" in waits[0], f"threads besides the main one, blocked in {waits}"
    t1 = time.monotonic()
    proc.terminate()
    proc.wait(10)
    assert proc.returncode == 0
    assert time.monotonic() - t1 < 5  # a clean, prompt stop (timings belong in benchmarks)
    broker.process = None
    broker._log_file.close()
    assert "minibroker stopped" in broker.log_text()
    assert t1 - t0 < 30


def test_each_listener_advertises_its_own_address(minibroker_factory):
    broker = minibroker_factory({
        "listeners": "INTERNAL://127.0.0.1:0,EXTERNAL://127.0.0.1:0",
        "advertised.listeners": "INTERNAL://broker.internal:0,EXTERNAL://127.0.0.1:0",
        "listener.security.protocol.map": "INTERNAL:PLAINTEXT,EXTERNAL:PLAINTEXT",
        "inter.broker.listener.name": "INTERNAL"})
    ports = {e.listener: e.port for e in broker.broker.bound}
    for name, host in (("INTERNAL", "broker.internal"), ("EXTERNAL", "127.0.0.1")):
        with WireClient("127.0.0.1", ports[name]) as c:
            md = c.request(3, 12, {"topics": None})
            fc = c.request(10, 3, {"key": "g", "key_type": 0})
        assert [(b.host, b.port) for b in md.brokers] == [(host, ports[name])]
        assert (fc.host, fc.port) == (host, ports[name])


@pytest.mark.parametrize("host", ["", "127.0.0.1", "localhost"])
def test_listen_socket_binds_one_address_like_kafka(host):
    sock = listen_socket(host, 0, 16)
    try:
        port = sock.getsockname()[1]
        assert port > 0 and not sock.getblocking()
        if host:  # a name binds its first resolved address only
            targets = [sock.getsockname()[0]]
        else:  # the wildcard, dual-stack where the kernel has IPv6
            targets = ["127.0.0.1"] + (["::1"] if socket.has_dualstack_ipv6() else [])
        for target in targets:
            with socket.create_connection((target, port), timeout=2):
                pass
    finally:
        sock.close()
