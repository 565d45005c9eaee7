"""TLS listeners (minibroker/security/tls.py): SSL as Kafka configures it, mutual TLS and the principal
a client certificate gives, and record bytes copied through the TLS transport instead of sendfile.

One broker for the module, in this process (the default asyncio loop), with four listeners:
PLAINTEXT, SSL (server authentication only), MTLS (``listener.name.mtls.ssl.client.auth=required``)
and MAPPED (client certificate requested, ``ssl.principal.mapping.rules`` set for that listener).
The uvloop side (what ``minibroker serve`` runs) is covered by a subprocess broker driven by kcat.
Certificates come from ``minibroker certs`` (``generate_test_certs``).
"""

from __future__ import annotations

import asyncio
import os
import re
import socket
import ssl
import subprocess
import sys
import time
from pathlib import Path

import pytest

from minibroker.config import ConfigError, load_config
from minibroker.security.certificates import certificate_subject, rfc2253_name
from minibroker.security.principal import ANONYMOUS, KafkaPrincipal
from minibroker.security.tls import (
    PrincipalMapper,
    TlsConfigError,
    listener_tls,
)
from minibroker.testing import BrokerRunner
from minibroker.tools.certs import generate_test_certs

CLIENT_DN = "CN=client,OU=test,O=minibroker"


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    return generate_test_certs(str(tmp_path_factory.mktemp("certs")))


def _tls_overrides(certs) -> dict[str, str]:
    return {
        "listeners": "PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0,MTLS://127.0.0.1:0,MAPPED://127.0.0.1:0",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SSL:SSL,MTLS:SSL,MAPPED:SSL",
        "ssl.keystore.location": certs["broker_keystore"],
        "ssl.truststore.location": certs["ca"],
        "listener.name.mtls.ssl.client.auth": "required",
        "listener.name.mapped.ssl.client.auth": "requested",
        "listener.name.mapped.ssl.principal.mapping.rules": "RULE:^CN=([^,]*),OU=test,.*$/tls-$1/U,DEFAULT",
    }


@pytest.fixture(scope="module")
def broker(certs):
    runner = BrokerRunner(_tls_overrides(certs))
    runner.start()
    yield runner
    runner.cleanup()


def _port(runner, listener: str) -> int:
    return next(e.port for e in runner.broker.bound if e.listener == listener)


def _address(runner, listener: str) -> str:
    return f"127.0.0.1:{_port(runner, listener)}"


def _on_loop(runner, fn):
    """Run ``fn()`` on the broker's event loop thread and return its result."""
    async def call():
        return fn()

    return asyncio.run_coroutine_threadsafe(call(), runner._loop).result(10)


def _principals(runner, listener: str) -> set[KafkaPrincipal]:
    return _on_loop(runner, lambda: {c.principal for c in runner.broker.connections
                                     if c.listener == listener and not c.closed})


def _kafka_python_ssl(certs, with_cert: bool) -> dict:
    out = {"security_protocol": "SSL", "ssl_cafile": certs["ca"]}
    if with_cert:
        out.update(ssl_certfile=certs["client_cert"], ssl_keyfile=certs["client_key"])
    return out


def _confluent_ssl(certs, with_cert: bool) -> dict:
    out = {"security.protocol": "SSL", "ssl.ca.location": certs["ca"]}
    if with_cert:
        out.update({"ssl.certificate.location": certs["client_cert"],
                    "ssl.key.location": certs["client_key"]})
    return out


def _kcat_ssl(kcat, address: str, certs, with_cert: bool = False) -> list[str]:
    cmd = [kcat, "-b", address, "-X", "security.protocol=ssl", "-X", f"ssl.ca.location={certs['ca']}"]
    if with_cert:
        cmd += ["-X", f"ssl.certificate.location={certs['client_cert']}",
                "-X", f"ssl.key.location={certs['client_key']}"]
    return cmd


# -- real clients over TLS ----------------------------------------------------------------------


@pytest.mark.parametrize("listener", ["SSL", "MTLS"])
def test_kafka_python_produces_and_consumes(broker, certs, listener, topic_name):
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition

    settings = _kafka_python_ssl(certs, with_cert=listener == "MTLS")
    broker.create_topic(topic_name)
    producer = KafkaProducer(bootstrap_servers=_address(broker, listener), **settings)
    try:
        offsets = [producer.send(topic_name, b"v%d" % i).get(30).offset for i in range(5)]
    finally:
        producer.close(5)
    assert offsets == list(range(5))
    consumer = KafkaConsumer(bootstrap_servers=_address(broker, listener), enable_auto_commit=False,
                             **settings)
    try:
        tp = TopicPartition(topic_name, 0)
        consumer.assign([tp])
        consumer.seek_to_beginning(tp)
        got = []
        deadline = time.monotonic() + 20
        while len(got) < 5 and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=200).values():
                got.extend(r.value for r in records)
        assert got == [b"v%d" % i for i in range(5)]
        expected = KafkaPrincipal("User", CLIENT_DN) if listener == "MTLS" else ANONYMOUS
        assert _principals(broker, listener) == {expected}
    finally:
        consumer.close()


@pytest.mark.parametrize("listener", ["SSL", "MTLS"])
async def test_aiokafka_produces_and_consumes(broker, certs, listener, topic_name):
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
    from aiokafka.helpers import create_ssl_context

    if listener == "MTLS":
        context = create_ssl_context(cafile=certs["ca"], certfile=certs["client_cert"],
                                     keyfile=certs["client_key"])
    else:
        context = create_ssl_context(cafile=certs["ca"])
    broker.create_topic(topic_name)
    producer = AIOKafkaProducer(bootstrap_servers=_address(broker, listener), security_protocol="SSL",
                                ssl_context=context)
    await producer.start()
    try:
        for i in range(5):
            await producer.send_and_wait(topic_name, b"a%d" % i, partition=0)
    finally:
        await producer.stop()
    consumer = AIOKafkaConsumer(bootstrap_servers=_address(broker, listener), security_protocol="SSL",
                                ssl_context=context, enable_auto_commit=False, auto_offset_reset="earliest")
    await consumer.start()
    try:
        tp = TopicPartition(topic_name, 0)
        consumer.assign([tp])
        await consumer.seek_to_beginning(tp)
        got = []
        async with asyncio.timeout(20):
            while len(got) < 5:
                for records in (await consumer.getmany(timeout_ms=200)).values():
                    got.extend(r.value for r in records)
        assert got == [b"a%d" % i for i in range(5)]
    finally:
        await consumer.stop()


@pytest.mark.parametrize("listener", ["SSL", "MTLS"])
def test_confluent_kafka_produces_and_consumes(broker, certs, listener, topic_name):
    from confluent_kafka import Consumer, Producer, TopicPartition

    settings = {"bootstrap.servers": _address(broker, listener), **_confluent_ssl(certs, listener == "MTLS")}
    broker.create_topic(topic_name)
    producer = Producer(settings)
    delivered = []
    for i in range(5):
        producer.produce(topic_name, b"c%d" % i, partition=0,
                         on_delivery=lambda err, msg: delivered.append(err))
    assert producer.flush(30) == 0
    assert delivered == [None] * 5
    consumer = Consumer({**settings, "group.id": f"g-{topic_name}", "enable.auto.commit": False})
    try:
        consumer.assign([TopicPartition(topic_name, 0, 0)])
        got = []
        deadline = time.monotonic() + 20
        while len(got) < 5 and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                got.append(msg.value())
        assert got == [b"c%d" % i for i in range(5)]
    finally:
        consumer.close()


def test_kcat_produces_and_consumes(broker, certs, kcat, topic_name):
    broker.create_topic(topic_name)
    for listener in ("SSL", "MTLS"):
        cmd = _kcat_ssl(kcat, _address(broker, listener), certs, with_cert=listener == "MTLS")
        out = subprocess.run(cmd + ["-P", "-t", topic_name, "-p", "0"], input=f"{listener}-1\n{listener}-2\n",
                             capture_output=True, text=True, timeout=30)
        assert out.returncode == 0, out.stderr
    out = subprocess.run(_kcat_ssl(kcat, _address(broker, "SSL"), certs)
                         + ["-C", "-t", topic_name, "-o", "beginning", "-e"],
                         capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["SSL-1", "SSL-2", "MTLS-1", "MTLS-2"]


def test_large_fetch_takes_the_chunked_path_intact(broker, certs, topic_name):
    """Several MiB in one fetch response: read from the segment in 64 KiB pieces and written through
    the TLS transport (sendfile on the socket would bypass the encryption)."""
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition

    values = [bytes([i % 251]) * 600_000 for i in range(10)]  # 6 MB
    broker.create_topic(topic_name)
    settings = _kafka_python_ssl(certs, with_cert=False)
    producer = KafkaProducer(bootstrap_servers=_address(broker, "SSL"), max_request_size=2_000_000,
                             **settings)
    try:
        for v in values:
            producer.send(topic_name, v, partition=0)
        producer.flush(30)
    finally:
        producer.close(5)
    consumer = KafkaConsumer(bootstrap_servers=_address(broker, "SSL"), enable_auto_commit=False,
                             fetch_max_bytes=20_000_000, max_partition_fetch_bytes=20_000_000, **settings)
    try:
        tp = TopicPartition(topic_name, 0)
        consumer.assign([tp])
        consumer.seek_to_beginning(tp)
        got = []
        deadline = time.monotonic() + 30
        while len(got) < len(values) and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=500).values():
                got.extend(r.value for r in records)
        assert got == values
    finally:
        consumer.close()


def test_plaintext_and_ssl_listeners_are_each_advertised(broker, certs, topic_name):
    """Metadata answers each client with the endpoint of the listener it came in on."""
    from kafka import KafkaConsumer

    broker.create_topic(topic_name)
    for listener, settings in (("PLAINTEXT", {}), ("SSL", _kafka_python_ssl(certs, with_cert=False))):
        consumer = KafkaConsumer(bootstrap_servers=_address(broker, listener), **settings)
        try:
            assert consumer.partitions_for_topic(topic_name) == {0}
            brokers = consumer._client.cluster.brokers()
            assert [(b.host, b.port) for b in brokers] == [("127.0.0.1", _port(broker, listener))]
        finally:
            consumer.close()


def test_principal_from_a_requested_certificate_is_mapped(broker, certs):
    """MAPPED requests a certificate: with one, the listener's mapping rule names the principal;
    without, User:ANONYMOUS."""
    from kafka import KafkaConsumer

    for with_cert, expected in ((True, KafkaPrincipal("User", "TLS-CLIENT")), (False, ANONYMOUS)):
        consumer = KafkaConsumer(bootstrap_servers=_address(broker, "MAPPED"),
                                 **_kafka_python_ssl(certs, with_cert))
        try:
            consumer.topics()  # connected and answered
            assert _principals(broker, "MAPPED") == {expected}
        finally:
            consumer.close()


# -- refusals: no certificate under mTLS, plaintext on a TLS port, silence ----------------------


def _client_context(certs, with_cert: bool) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=certs["ca"])
    if with_cert:
        context.load_cert_chain(certs["client_cert"], certs["client_key"])
    return context


def _api_versions_over(sock) -> bytes:
    from minibroker.protocol import codec

    sock.sendall(codec.encode_request(18, 0, 7, {}, "tls-test"))
    return sock.recv(4)


def test_mtls_refuses_a_client_without_certificate_at_the_handshake(broker, certs):
    with socket.create_connection(("127.0.0.1", _port(broker, "MTLS")), timeout=10) as raw:
        with _client_context(certs, with_cert=False).wrap_socket(raw, server_hostname="localhost") as tls:
            # TLS 1.3: the client's handshake ends before the server checks for its certificate; the
            # broker then sends the certificate_required alert (116), as Kafka's SSLEngine does, and
            # closes the connection without answering anything
            with pytest.raises(ssl.SSLError, match="TLSV13_ALERT_CERTIFICATE_REQUIRED"):
                _api_versions_over(tls)
    context = _client_context(certs, with_cert=False)
    context.maximum_version = ssl.TLSVersion.TLSv1_2
    with socket.create_connection(("127.0.0.1", _port(broker, "MTLS")), timeout=10) as raw:
        # TLS 1.2: the handshake itself fails on the handshake_failure alert (40)
        with pytest.raises(ssl.SSLError, match="ALERT_HANDSHAKE_FAILURE"):
            context.wrap_socket(raw, server_hostname="localhost")
    with socket.create_connection(("127.0.0.1", _port(broker, "MTLS")), timeout=10) as raw:
        with _client_context(certs, with_cert=True).wrap_socket(raw, server_hostname="localhost") as tls:
            assert len(_api_versions_over(tls)) == 4


@pytest.mark.slow
def test_clients_without_certificate_fail_within_their_timeout(broker, certs, kcat):
    """Each client reports the refusal as an error within its own timeout, never hangs."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient
    from kafka import KafkaConsumer
    from kafka.errors import KafkaError

    address = _address(broker, "MTLS")
    with pytest.raises(KafkaError):
        KafkaConsumer(bootstrap_servers=address, bootstrap_timeout_ms=3000, **_kafka_python_ssl(certs, False))

    async def aiokafka_start():
        from aiokafka import AIOKafkaProducer
        from aiokafka.errors import KafkaConnectionError
        from aiokafka.helpers import create_ssl_context

        producer = AIOKafkaProducer(bootstrap_servers=address, security_protocol="SSL",
                                    ssl_context=create_ssl_context(cafile=certs["ca"]),
                                    request_timeout_ms=3000)
        try:
            with pytest.raises(KafkaConnectionError):
                await producer.start()
        finally:
            await producer.stop()

    asyncio.run(aiokafka_start())
    admin = AdminClient({"bootstrap.servers": address, "log_level": 0, **_confluent_ssl(certs, False)})
    with pytest.raises(KafkaException):
        admin.list_topics(timeout=3)
    out = subprocess.run(_kcat_ssl(kcat, address, certs) + ["-L", "-m", "3"], capture_output=True, text=True,
                         timeout=30)
    assert out.returncode != 0


def test_confluent_kafka_sees_the_certificate_required_alert_at_once(broker, certs):
    """librdkafka's first error names the TLS alert, not a bare disconnect (it still retries SSL
    errors until its own timeout, as against Kafka)."""
    from confluent_kafka.admin import AdminClient

    errors = []
    admin = AdminClient({"bootstrap.servers": _address(broker, "MTLS"), "log_level": 0,
                         "error_cb": errors.append, **_confluent_ssl(certs, False)})
    deadline = time.monotonic() + 30
    while not errors and time.monotonic() < deadline:
        admin.poll(0.1)
    assert errors, "no error reported"
    assert "certificate required" in errors[0].str(), errors[0].str()


def test_kcat_under_uvloop_sees_the_certificate_required_alert(certs, kcat):
    """The same alert from `minibroker serve` (uvloop if installed): kcat reports it, not an EOF."""
    overrides = {**_tls_overrides(certs), "listeners": "PLAINTEXT://127.0.0.1:0,MTLS://127.0.0.1:0"}
    with BrokerRunner(overrides, mode="process") as runner:
        ready = re.search(r"minibroker ready: .*", runner.log_text()).group(0)
        address = re.search(r"MTLS://([^,\s]+)", ready).group(1)
        out = subprocess.run(_kcat_ssl(kcat, address, certs) + ["-L", "-m", "2"], capture_output=True,
                             text=True, timeout=30)
    assert out.returncode != 0
    assert "alert certificate required" in out.stderr, out.stderr


def test_plaintext_bytes_on_a_tls_port_are_closed(broker, certs):
    from minibroker.protocol import codec

    with socket.create_connection(("127.0.0.1", _port(broker, "SSL")), timeout=10) as sock:
        sock.sendall(codec.encode_request(18, 0, 1, {}, "plaintext"))
        received = b""
        while chunk := sock.recv(100):  # a TLS alert at most (never a Kafka answer), then closed
            received += chunk
            assert len(received) < 100
        assert not received.startswith(b"\x00")  # no Kafka size prefix: a TLS record or nothing
    # the broker goes on serving TLS clients
    with socket.create_connection(("127.0.0.1", _port(broker, "SSL")), timeout=10) as raw:
        with _client_context(certs, with_cert=False).wrap_socket(raw, server_hostname="localhost") as tls:
            assert len(_api_versions_over(tls)) == 4


def test_a_silent_client_is_closed_at_the_handshake_timeout(certs):
    """The handshake is bounded by connections.max.idle.ms (10 s at most) and holds no one else up."""
    runner = BrokerRunner({"listeners": "SSL://127.0.0.1:0",
                           "ssl.keystore.location": certs["broker_keystore"],
                           "connections.max.idle.ms": "300"})
    with runner:
        silent = socket.create_connection(("127.0.0.1", runner.port), timeout=10)
        try:
            with socket.create_connection(("127.0.0.1", runner.port), timeout=10) as raw:
                context = _client_context(certs, with_cert=False)
                with context.wrap_socket(raw, server_hostname="localhost") as tls:
                    assert len(_api_versions_over(tls)) == 4
            assert silent.recv(100) == b""  # closed by the broker, not by our 10 s timeout
            assert _on_loop(runner, lambda: runner.broker.socket_server.total) == 0
        finally:
            silent.close()


# -- start-up: key stores, trust stores, bad ones ------------------------------------------------


def _handshake(server: ssl.SSLContext, client: ssl.SSLContext) -> ssl.SSLObject:
    """A TLS handshake between two contexts in memory; returns the server's side."""
    s_in, s_out, c_in, c_out = ssl.MemoryBIO(), ssl.MemoryBIO(), ssl.MemoryBIO(), ssl.MemoryBIO()
    server_side = server.wrap_bio(s_in, s_out, server_side=True)
    client_side = client.wrap_bio(c_in, c_out, server_hostname="localhost")
    done = {"server": False, "client": False}
    for _ in range(10):
        for name, side in (("client", client_side), ("server", server_side)):
            if not done[name]:
                try:
                    side.do_handshake()
                    done[name] = True
                except ssl.SSLWantReadError:
                    pass
        s_in.write(c_out.read())
        c_in.write(s_out.read())
        if all(done.values()):
            break
    # TLS 1.3: the server sees the client's certificate once it reads the client's last flight
    client_side.write(b"x")
    s_in.write(c_out.read())
    assert server_side.read(1) == b"x"
    return server_side


def _context(certs, *overrides: str, listener: str = "SSL") -> ssl.SSLContext:
    config = load_config(None, [f"listeners={listener}://127.0.0.1:0", *overrides], {})
    return listener_tls(config)[listener].context


def test_key_store_forms_all_load(certs, tmp_path):
    """PEM file, PKCS12, inline PEM values, an encrypted PEM key: each makes a working context."""
    from cryptography.hazmat.primitives import serialization

    key_pem = Path(certs["broker_key"]).read_bytes()
    key = serialization.load_pem_private_key(key_pem, None)
    encrypted = tmp_path / "encrypted.pem"
    encrypted.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                            serialization.BestAvailableEncryption(b"s3cret"))
                          + Path(certs["broker_cert"]).read_bytes())
    forms = {
        "pem": [f"ssl.keystore.location={certs['broker_keystore']}"],
        "pkcs12": ["ssl.keystore.type=PKCS12", f"ssl.keystore.location={certs['broker_p12']}",
                   f"ssl.keystore.password={certs['password']}"],
        "inline": [f"ssl.keystore.certificate.chain={Path(certs['broker_cert']).read_text()}",
                   f"ssl.keystore.key={key_pem.decode()}"],
        "encrypted": [f"ssl.keystore.location={encrypted}", "ssl.key.password=s3cret"],
    }
    client = _client_context(certs, with_cert=True)
    for form, overrides in forms.items():
        for trust in ([f"ssl.truststore.location={certs['ca']}"],
                      ["ssl.truststore.type=PKCS12", f"ssl.truststore.location={certs['truststore_p12']}",
                       f"ssl.truststore.password={certs['password']}"],
                      [f"ssl.truststore.certificates={Path(certs['ca']).read_text()}"]):
            server = _context(certs, *overrides, *trust, "ssl.client.auth=required")
            side = _handshake(server, client)
            assert certificate_subject(side.getpeercert(binary_form=True)) == CLIENT_DN, form


def test_tls_versions_and_ciphers(certs):
    client = _client_context(certs, with_cert=False)
    side = _handshake(_context(certs, f"ssl.keystore.location={certs['broker_keystore']}"), client)
    assert side.version() == "TLSv1.3"
    tls12 = _context(certs, f"ssl.keystore.location={certs['broker_keystore']}",
                     "ssl.enabled.protocols=TLSv1.2",
                     "ssl.cipher.suites=ECDHE-ECDSA-AES128-GCM-SHA256")
    side = _handshake(tls12, client)
    assert side.version() == "TLSv1.2" and side.cipher()[0] == "ECDHE-ECDSA-AES128-GCM-SHA256"
    capped = _context(certs, f"ssl.keystore.location={certs['broker_keystore']}", "ssl.protocol=TLSv1.2")
    assert _handshake(capped, client).version() == "TLSv1.2"


def test_listener_prefixed_keys_win(certs, tmp_path):
    bad = str(tmp_path / "missing.pem")
    config = load_config(None, ["listeners=A://127.0.0.1:0,B://127.0.0.1:0",
                                "listener.security.protocol.map=A:SSL,B:SSL",
                                f"ssl.keystore.location={bad}",
                                f"listener.name.a.ssl.keystore.location={certs['broker_keystore']}",
                                f"listener.name.b.ssl.keystore.location={certs['broker_keystore']}",
                                "listener.name.b.ssl.client.auth=required"], {})
    assert config.for_listener("A", "ssl.keystore.location") == certs["broker_keystore"]
    assert config.for_listener("A", "ssl.client.auth") == "none"
    tls = listener_tls(config)
    assert tls["A"].context.verify_mode == ssl.CERT_NONE
    assert tls["B"].context.verify_mode == ssl.CERT_REQUIRED


def test_sasl_ssl_takes_ssl_client_auth_only_with_the_listener_prefix(certs):
    base = ["listeners=SASL_SSL://127.0.0.1:0", f"ssl.keystore.location={certs['broker_keystore']}",
            "sasl.enabled.mechanisms=SCRAM-SHA-256"]
    broad = listener_tls(load_config(None, [*base, "ssl.client.auth=required"], {}))
    assert broad["SASL_SSL"].context.verify_mode == ssl.CERT_NONE
    prefixed = listener_tls(load_config(None, [*base, "listener.name.sasl_ssl.ssl.client.auth=required"], {}))
    assert prefixed["SASL_SSL"].context.verify_mode == ssl.CERT_REQUIRED


def test_every_security_protocol_is_accepted_by_config():
    config = load_config(None, ["listeners=A://:0,B://:0,C://:0,D://:0",
                                "listener.security.protocol.map=A:PLAINTEXT,B:SSL,C:SASL_PLAINTEXT,D:SASL_SSL",
                                "inter.broker.listener.name=A", "sasl.enabled.mechanisms=SCRAM-SHA-256"], {})
    assert config.security_protocol_map() == {"A": "PLAINTEXT", "B": "SSL", "C": "SASL_PLAINTEXT",
                                              "D": "SASL_SSL"}
    with pytest.raises(ConfigError, match="ssl.principal.mapping.rules"):
        load_config(None, ["ssl.principal.mapping.rules=RULE:^CN=(.*?)$/$1/LU"], {})
    with pytest.raises(ConfigError, match="ssl.client.auth"):
        load_config(None, ["listener.name.plaintext.ssl.client.auth=always"], {})


@pytest.mark.parametrize("overrides, named", [
    (["ssl.keystore.location=/nonexistent/broker.pem"],
     "ssl.keystore.location (from --override) /nonexistent"),
    ([], "ssl.keystore.location"),
    (["ssl.keystore.type=PKCS12", "ssl.keystore.location={broker_p12}", "ssl.keystore.password=wrong"],
     "ssl.keystore.password"),
    (["ssl.keystore.location={ca}"], "no private key"),
    (["ssl.keystore.location={broker_keystore}", "ssl.truststore.location=/nonexistent/ca.pem"],
     "ssl.truststore.location"),
    (["ssl.keystore.location={broker_keystore}", "ssl.enabled.protocols=SSLv3"], "ssl.enabled.protocols"),
])
def test_a_bad_key_store_stops_start_up_before_the_logs(certs, tmp_path, overrides, named):
    runner = BrokerRunner({"listeners": "PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0",
                           **dict(o.format(**certs).split("=", 1) for o in overrides)},
                          data_dir=str(tmp_path / "data"))
    with pytest.raises(TlsConfigError, match="listener SSL") as info:
        runner.start()
    assert named in str(info.value)
    assert not (tmp_path / "data").exists()  # nothing locked, bound or written


def test_serve_exits_naming_the_key(tmp_path):
    out = subprocess.run([sys.executable, "-m", "minibroker", "serve", "--override", "listeners=SSL://127.0.0.1:0",
                          "--override", f"log.dirs={tmp_path}", "--override",
                          "ssl.keystore.location=/nonexistent/broker.pem"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 1
    assert "ssl.keystore.location (from --override) /nonexistent/broker.pem" in out.stderr


# -- uvloop: the loop `minibroker serve` runs ------------------------------------------------------


def test_under_uvloop_in_a_subprocess(certs, kcat, tmp_path):
    """kcat produces and consumes several MiB over mTLS against `minibroker serve` (uvloop if installed)."""
    overrides = {**_tls_overrides(certs), "listeners": "PLAINTEXT://127.0.0.1:0,MTLS://127.0.0.1:0"}
    runner = BrokerRunner(overrides, mode="process")
    with runner:
        ready = re.search(r"minibroker ready: .*", runner.log_text()).group(0)
        address = re.search(r"MTLS://([^,\s]+)", ready).group(1)
        runner.create_topic("big")
        lines = [b"%06d" % i + bytes([97 + i % 26]) * 3000 for i in range(2000)]  # 6 MB
        cmd = _kcat_ssl(kcat, address, certs, with_cert=True)
        out = subprocess.run(cmd + ["-P", "-t", "big", "-p", "0"], input=b"\n".join(lines) + b"\n",
                             capture_output=True, timeout=60)
        assert out.returncode == 0, out.stderr
        out = subprocess.run(cmd + ["-C", "-t", "big", "-o", "beginning", "-e",
                                    "-X", "fetch.message.max.bytes=20000000"],
                                    capture_output=True, timeout=60)
        assert out.returncode == 0, out.stderr
        assert out.stdout.split(b"\n")[:-1] == lines


# -- the chunked send, without a socket -----------------------------------------------------------


class _Transport:
    def __init__(self):
        self.written = []

    def write(self, data):
        self.written.append(bytes(data))

    def get_write_buffer_size(self):
        return 0


def test_chunked_send_closes_on_a_file_that_shrank(tmp_path):
    from minibroker.protocol.file_region import FileRegion
    from minibroker.server.connection import TLS_CHUNK, KafkaConnection

    path = tmp_path / "segment"
    path.write_bytes(bytes(range(256)) * 1024)  # 256 KiB
    conn = KafkaConnection(broker=None, max_request_size=1 << 20, tls=object())
    conn.transport = _Transport()
    with open(path, "rb") as f:
        asyncio.run(conn._send_region_copied(FileRegion(f, 100, 200_000)))
        assert b"".join(conn.transport.written) == path.read_bytes()[100:200_100]
        assert max(len(w) for w in conn.transport.written) <= TLS_CHUNK
        os.truncate(path, 150_000)
        conn.transport = _Transport()
        with pytest.raises(ConnectionResetError, match="shorter"):
            asyncio.run(conn._send_region_copied(FileRegion(f, 100, 200_000)))


# -- names: Java's RFC 2253 form, Kafka's mapping rules --------------------------------------------


def _name_der(*rdns) -> bytes:
    from cryptography import x509
    from cryptography.x509.oid import NameOID

    oids = {"CN": NameOID.COMMON_NAME, "OU": NameOID.ORGANIZATIONAL_UNIT_NAME, "O": NameOID.ORGANIZATION_NAME,
            "C": NameOID.COUNTRY_NAME, "E": NameOID.EMAIL_ADDRESS, "DC": NameOID.DOMAIN_COMPONENT,
            "SERIAL": NameOID.SERIAL_NUMBER}
    return x509.Name([x509.RelativeDistinguishedName([x509.NameAttribute(oids[k], v) for k, v in rdn])
                      for rdn in rdns]).public_bytes()


def test_subject_names_print_as_java_does():
    assert rfc2253_name(_name_der([("O", "minibroker")], [("OU", "test")], [("CN", "client")])) == CLIENT_DN
    # special characters are escaped, leading and trailing blanks too
    assert rfc2253_name(_name_der([("CN", "Tkac, Adam")])) == "CN=Tkac\\, Adam"
    assert rfc2253_name(_name_der([("CN", " a=b+c#d ")])) == "CN=\\ a\\=b\\+c\\#d\\ "
    # a multi-valued RDN joins with '+'; types without an RFC 2253 keyword are OID=#hex of the DER value
    assert rfc2253_name(_name_der([("DC", "com")], [("CN", "x"), ("OU", "y")])) == "CN=x+OU=y,DC=com"
    assert rfc2253_name(_name_der([("E", "a@b")])) == "1.2.840.113549.1.9.1=#1603614062"
    assert rfc2253_name(_name_der([("SERIAL", "42")])) == "2.5.4.5=#13023432"


def test_mapping_rules_as_kafka_tests_them():
    mapper = PrincipalMapper(", ".join([
        "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/L",
        "RULE:^CN=(.*?),OU=(.*?),O=(.*?),L=(.*?),ST=(.*?),C=(.*?)$/$1@$2/L",
        "RULE:^cn=(.*?),ou=(.*?),dc=(.*?),dc=(.*?)$/$1@$2/U",
        "RULE:^.*[Cc][Nn]=([a-zA-Z0-9.]*).*$/$1/U",
        "DEFAULT",
    ]))
    assert mapper.name_for("CN=Duke,OU=ServiceUsers,O=Org,C=US") == "duke"
    assert mapper.name_for("CN=Duke,OU=SME,O=mycp,L=Fulton,ST=MD,C=US") == "duke@sme"
    assert mapper.name_for("cn=duke,ou=sme,dc=mycp,dc=com") == "DUKE@SME"
    assert mapper.name_for("cN=duke,OU=JavaSoft,O=Sun Microsystems") == "DUKE"
    assert mapper.name_for("OU=JavaSoft,O=Sun Microsystems,C=US") == "OU=JavaSoft,O=Sun Microsystems,C=US"
    escaped = PrincipalMapper("RULE:^CN=((\\\\, *|\\w)+)(,.*|$)/$1/,DEFAULT")
    assert escaped.name_for("CN=Tkac\\, Adam,OU=ITZ,DC=geodis,DC=cz") == "Tkac\\, Adam"
    # a back reference past the groups is a literal; no rule that matches: the connection fails
    assert PrincipalMapper("RULE:^CN=(.*)$/$1-$2/").name_for("CN=x") == "x-$2"
    with pytest.raises(ValueError, match="No rules apply"):
        PrincipalMapper("RULE:^CN=(.*)$/$1/").name_for("OU=x")


@pytest.mark.parametrize("rules, expected", [
    ("", []), ("DEFAULT", ["DEFAULT"]), ("RULE://", ["RULE://"]), ("RULE:/.*/L", ["RULE:/.*/L"]),
    ("  RULE:// ,  DEFAULT  ", ["RULE://", "DEFAULT"]),
    ("  RULE:([A-Z]*)/$1/U   ,RULE:([a-z]+)/$1/,   DEFAULT  ",
     ["RULE:([A-Z]*)/$1/U", "RULE:([a-z]+)/$1/", "DEFAULT"]),
    (",   , , ,      , , ,   ", []), (",,RULE://,,,DEFAULT,,", ["RULE://", "DEFAULT"]),
    ("RULE:,RULE:,/,RULE:,\\//U,RULE:,/RULE:,/,RULE:,RULE:,/L,RULE:,/L,RULE:, DEFAULT, /DEFAULT/,DEFAULT",
     ["RULE:,RULE:,/,RULE:,\\//U", "RULE:,/RULE:,/", "RULE:,RULE:,/L,RULE:,/L", "RULE:, DEFAULT, /DEFAULT/",
      "DEFAULT"]),
])
def test_mapping_rules_split_as_kafka_splits_them(rules, expected):
    assert [repr(r) for r in PrincipalMapper(rules).rules] == expected


@pytest.mark.parametrize("rules", ["default", "DEFAUL", "DEFAULT/L", "RULE:CN=(.*?),OU=ServiceUsers.*/$1",
                                   "rule:^CN=(.*?),OU=ServiceUsers.*$/$1/", "RULE:^CN=(.*?),OU=S.*$/$1/L/U",
                                   "RULE:^CN=(.*?),OU=ServiceUsers.*$/L",
                                   "RULE:^CN=(.*?),OU=ServiceUsers.*$/LU"])
def test_bad_mapping_rules_are_refused(rules):
    with pytest.raises(ValueError, match="Invalid rule"):
        PrincipalMapper(rules)


# -- TLS keys altered at run time (AlterConfigs) -------------------------------------------------------


def _peer_certificate(port: int, cafile: str) -> bytes:
    """The DER certificate a new connection to ``port`` is served, verified against ``cafile`` only
    (raises ssl.SSLCertVerificationError when it does not chain to it)."""
    context = ssl.create_default_context(cafile=cafile)
    with socket.create_connection(("127.0.0.1", port), timeout=10) as raw, \
            context.wrap_socket(raw, server_hostname="127.0.0.1") as tls:
        return tls.getpeercert(binary_form=True)


def _incremental(admin, node: str, changes: dict, validate_only: bool = False):
    """IncrementalAlterConfigs SET on the broker; the error (confluent_kafka.KafkaError) or None."""
    import confluent_kafka
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource

    resource = ConfigResource("broker", node, incremental_configs=[
        ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET) for k, v in changes.items()])
    try:
        admin.incremental_alter_configs([resource], validate_only=validate_only)[resource].result(10)
    except confluent_kafka.KafkaException as e:
        return e.args[0]
    return None


def test_a_key_store_altered_at_run_time_serves_new_connections(tmp_path):
    """Kafka's certificate rotation: listener.name.ssl.ssl.keystore.location (and the trust store) set
    by AlterConfigs serve the next connections, established ones keep the old certificate, a key store
    that cannot be read is refused and changes nothing, and the change survives a restart."""
    confluent_kafka = pytest.importorskip("confluent_kafka")
    from confluent_kafka.admin import AdminClient, ConfigResource
    from kafka.admin import ConfigResource as PyResource
    from kafka.admin import ConfigResourceType, KafkaAdminClient

    runner = BrokerRunner(security_protocol="SSL")
    runner.start()
    established = None
    try:
        old = runner.security.certs
        new = generate_test_certs(str(tmp_path / "rotated"), hosts=[runner.host])  # another CA, same names
        node = str(runner.broker.node_id)
        old_der = _peer_certificate(runner.port, old["ca"])
        established = _client_context(old, with_cert=False).wrap_socket(
            socket.create_connection(("127.0.0.1", runner.port), timeout=10), server_hostname="127.0.0.1")
        admin = AdminClient(runner.client_config("confluent-kafka"))
        store, trust = "listener.name.ssl.ssl.keystore.location", "listener.name.ssl.ssl.truststore.location"

        error = _incremental(admin, node, {"ssl.keystore.location": new["broker_keystore"]})
        assert error.name() == "INVALID_REQUEST" and "only per-listener" in error.str()
        missing = str(tmp_path / "missing.pem")
        for validate_only in (True, False):
            error = _incremental(admin, node, {store: missing}, validate_only=validate_only)
            assert error.name() == "INVALID_CONFIG", error
            assert store in error.str() and missing in error.str()
        rotation = {store: new["broker_keystore"], trust: new["ca"]}
        assert _incremental(admin, node, rotation, validate_only=True) is None
        assert _peer_certificate(runner.port, old["ca"]) == old_der  # refused or validated: nothing changed
        assert runner.broker.config.dynamic_values() == {}

        python_admin = KafkaAdminClient(**runner.client_config("kafka-python"))
        try:  # the legacy AlterConfigs (the client checks names against described dynamic keys: not yet set)
            legacy = PyResource(ConfigResourceType.BROKER, node, configs=rotation)
            result = python_admin.alter_configs([legacy], raise_on_unknown=False, incremental=False)
            assert result == {"broker": {node: "OK"}}
        finally:
            python_admin.close()
        new_der = _peer_certificate(runner.port, new["ca"])
        assert new_der != old_der
        with pytest.raises(ssl.SSLCertVerificationError):
            _peer_certificate(runner.port, old["ca"])
        with established:  # accepted before the change: keeps its certificate and still answers
            assert established.getpeercert(binary_form=True) == old_der
            assert len(_api_versions_over(established)) == 4
        fresh = AdminClient({**runner.client_config("confluent-kafka"), "ssl.ca.location": new["ca"]})
        described = fresh.describe_configs([ConfigResource("broker", node)])
        entry = described[ConfigResource("broker", node)].result(10)[store]
        assert entry.value == new["broker_keystore"]
        assert entry.source == confluent_kafka.admin.ConfigSource.DYNAMIC_BROKER_CONFIG.value
        assert [s.name for s in entry.synonyms.values()][:2] == [store, "ssl.keystore.location"]

        runner.restart()
        assert _peer_certificate(runner.port, new["ca"]) == new_der
        with pytest.raises(ssl.SSLCertVerificationError):
            _peer_certificate(runner.port, old["ca"])
        runner.stop()  # a saved key store that went away stops the next start, naming where it is kept
        os.unlink(new["broker_keystore"])
        with pytest.raises(TlsConfigError, match=f"{store} .*minibroker-dynamic-configs.json"):
            runner.start()
    finally:
        if established is not None:
            established.close()
        runner.cleanup()


def _dynamic_config(certs, *overrides: str):
    config = load_config(None, ["listeners=SSL://127.0.0.1:0", *overrides], {})
    return config, listener_tls(config)


def test_a_reconfigured_listener_keeps_its_certificate_names(certs, tmp_path):
    """As Kafka's SslFactory: another subject needs ssl.allow.dn.changes, dropped subject alternative
    names need ssl.allow.san.changes, and no trust store can be added to a listener started without."""
    from minibroker.security.tls import reload_listener_tls

    other = generate_test_certs(str(tmp_path / "other"), hosts=["other.example"])
    store = "listener.name.ssl.ssl.keystore.location"
    config, current = _dynamic_config(certs, f"ssl.keystore.location={certs['broker_keystore']}")
    config.set_dynamic(store, other["broker_keystore"])
    with pytest.raises(TlsConfigError, match="DistinguishedName does not match: existing={DN=CN=localhost"):
        reload_listener_tls(config, current)
    config.set_dynamic(store, None)
    config.set_dynamic("listener.name.ssl.ssl.truststore.location", certs["ca"])
    with pytest.raises(TlsConfigError, match="Cannot add SSL truststore"):
        reload_listener_tls(config, current)

    config, current = _dynamic_config(certs, f"ssl.keystore.location={certs['broker_keystore']}",
                                      "listener.name.ssl.ssl.allow.dn.changes=true")
    config.set_dynamic(store, other["broker_keystore"])
    assert certificate_subject(reload_listener_tls(config, current)["SSL"].certificate).startswith(
        "CN=other.example")

    wide = generate_test_certs(str(tmp_path / "wide"), hosts=["a.example", "b.example"])
    narrow = generate_test_certs(str(tmp_path / "narrow"), hosts=["a.example"])
    config, current = _dynamic_config(certs, f"ssl.keystore.location={wide['broker_keystore']}")
    config.set_dynamic(store, narrow["broker_keystore"])
    with pytest.raises(TlsConfigError, match="SubjectAltNames do not match: .*b.example"):
        reload_listener_tls(config, current)


def test_dynamic_tls_keys_follow_kafkas_levels():
    from minibroker.errors import ErrorCode, KafkaError

    config = load_config(None, ["listeners=PLAINTEXT://127.0.0.1:0"], {})
    refused = [
        ("ssl.keystore.location", "/k.pem", False, ErrorCode.INVALID_REQUEST, "only per-listener"),
        ("ssl.truststore.password", "x", False, ErrorCode.INVALID_REQUEST, "only per-listener"),
        ("ssl.client.auth", "required", True, ErrorCode.INVALID_REQUEST, "default cluster level"),
        ("listener.name.ssl.ssl.keystore.location", "/k.pem", True, ErrorCode.INVALID_REQUEST,
         "default cluster level"),
        ("listener.name.ssl.ssl.principal.mapping.rules", "DEFAULT", False, ErrorCode.INVALID_REQUEST,
         "Cannot update these configs dynamically"),
        ("listener.name.ssl.ssl.client.auth", "always", False, ErrorCode.INVALID_CONFIG, "Invalid value"),
    ]
    for key, value, cluster_default, code, message in refused:
        with pytest.raises(KafkaError, match=message) as e:
            config.set_dynamic(key, value, cluster_default=cluster_default)
        assert e.value.code == code, key
    config.set_dynamic("ssl.cipher.suites", "TLS_AES_128_GCM_SHA256")
    config.set_dynamic("listener.name.ssl.ssl.keystore.password", "s3cret")
    config.set_dynamic("listener.name.ssl.ssl.enabled.protocols", "TLSv1.3")
    assert config.for_listener("SSL", "ssl.keystore.password") == "s3cret"
    assert config.for_listener("SSL", "ssl.enabled.protocols") == ["TLSv1.3"]
    assert config.dynamic_values() == {"ssl.cipher.suites": "TLS_AES_128_GCM_SHA256",
                                       "listener.name.ssl.ssl.keystore.password": "s3cret",
                                       "listener.name.ssl.ssl.enabled.protocols": "TLSv1.3"}
    (password,) = config.describe(["listener.name.ssl.ssl.keystore.password"])
    assert password.sensitive and password.value is None and not password.read_only
    # which listeners a change rebuilds: a plain key all of them, a listener form its own listener only
    from minibroker.security.tls import listeners_of

    assert listeners_of(["ssl.cipher.suites"], ["A", "B"]) == ["A", "B"]
    assert listeners_of(["listener.name.b.ssl.keystore.location", "log.segment.bytes"], ["A", "B"]) == ["B"]
    assert listeners_of(["log.segment.bytes", "listener.name.B.ssl.keystore.location"], ["A", "B"]) == []


def test_tls13_suite_names_are_accepted_in_cipher_suites(certs):
    store = f"ssl.keystore.location={certs['broker_keystore']}"
    only13 = _context(certs, store, "ssl.cipher.suites=TLS_AES_128_GCM_SHA256")
    assert only13.minimum_version == ssl.TLSVersion.TLSv1_3
    assert _handshake(only13, _client_context(certs, with_cert=False)).version() == "TLSv1.3"
    mixed = _context(certs, store, "ssl.cipher.suites=TLS_AES_128_GCM_SHA256,ECDHE-ECDSA-AES128-GCM-SHA256")
    assert mixed.minimum_version == ssl.TLSVersion.TLSv1_2
    with pytest.raises(TlsConfigError, match="TLS 1.3 suites only"):
        _context(certs, store, "ssl.cipher.suites=TLS_AES_128_GCM_SHA256", "ssl.enabled.protocols=TLSv1.2")


# -- minibroker certs ---------------------------------------------------------------------------------


def test_certs_tool_writes_files_and_prints_settings(tmp_path, capsys):
    from minibroker.cli import main

    target = tmp_path / "certs"
    assert main(["certs", "--dir", str(target), "--host", "broker.example", "--client-cn", "alice"]) == 0
    printed = capsys.readouterr().out
    assert f"ssl.keystore.location={target / 'broker.pem'}" in printed
    assert "security_protocol=\"SSL\"" in printed and "-X security.protocol=ssl" in printed
    from cryptography import x509

    broker_cert = x509.load_pem_x509_certificate((target / "broker.crt").read_bytes())
    names = broker_cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert {str(n.value) for n in names} == {"localhost", "127.0.0.1", "::1", "broker.example"}
    client_der = x509.load_pem_x509_certificate((target / "client.crt").read_bytes()).public_bytes(
        __import__("cryptography.hazmat.primitives.serialization", fromlist=["Encoding"]).Encoding.DER)
    assert certificate_subject(client_der) == "CN=alice,OU=test,O=minibroker"
    assert oct((target / "client.key").stat().st_mode & 0o777) == oct(0o600)
    assert main(["certs", "--dir", str(target)]) == 1  # never replaces certificates silently
    assert "--force" in capsys.readouterr().err
