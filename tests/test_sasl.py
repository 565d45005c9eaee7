"""SASL on SASL_PLAINTEXT and SASL_SSL listeners (minibroker/security/sasl): PLAIN, SCRAM-SHA-256/512 and
OAUTHBEARER with real clients, the failure and re-authentication paths on the wire, SCRAM credential
management (AlterUserScramCredentials, DescribeUserScramCredentials, ``minibroker scram``), and unit tests
of the SCRAM server (RFC 7677's test vector), the JAAS parser and the unsecured JWS validator.

One broker for the module, in this process, with five listeners:
SASL_PLAINTEXT (every mechanism), PLAINTEXT, SASL_SSL (every mechanism, certificates from ``minibroker
certs``), REAUTH (SASL_PLAINTEXT with ``connections.max.reauth.ms=1500``) and HOOKED (OAUTHBEARER validated
by ``token_hook`` below). Alice's SCRAM credentials are written with ``minibroker scram --data-dir`` before
the broker starts.
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import select
import socket
import subprocess
import time

import pytest
from waiting import wait_until

from minibroker.cli import main as cli_main
from minibroker.config import ConfigError, load_config
from minibroker.config.jaas import parse_jaas_config
from minibroker.security.principal import KafkaPrincipal
from minibroker.security.sasl.authenticator import FailedAuthenticationLog
from minibroker.security.sasl.errors import SaslAuthenticationError, SaslCredentialsError
from minibroker.security.sasl.oauthbearer import (
    OAuthBearerServer,
    TokenValidationError,
    UnsecuredJwsValidator,
)
from minibroker.security.sasl.scram import (
    SCRAM_SHA_256,
    ScramCredential,
    ScramServer,
    credential_from_password,
)
from minibroker.testing import BrokerRunner
from minibroker.tools.certs import generate_test_certs
from minibroker.tools.wire import WireClient

PASSWORD = "alice-secret"
MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
SASL_HANDSHAKE, SASL_AUTHENTICATE, API_VERSIONS, METADATA = 17, 36, 18, 3
PLAIN_JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" '
              f'password="admin-secret" user_admin="admin-secret" user_alice="{PASSWORD}";')


def token_hook(token: str):
    """HOOKED's OAUTHBEARER validator: trusts any unsecured token but mallory's."""
    claims = json.loads(base64.urlsafe_b64decode(token.split(".")[1] + "=="))
    if claims["sub"] == "mallory":
        raise TokenValidationError("mallory is not welcome")
    return "hooked-" + claims["sub"], int(claims["exp"] * 1000)


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    return generate_test_certs(str(tmp_path_factory.mktemp("certs")))


@pytest.fixture(scope="module")
def broker(certs, tmp_path_factory):
    data_dir = str(tmp_path_factory.mktemp("sasl-data"))
    assert cli_main(["scram", "--data-dir", data_dir, "--alter", "--entity-type", "users",
                     "--entity-name", "alice", "--add-config",
                     f"SCRAM-SHA-256=[iterations=8192,password={PASSWORD}],"
                     f"SCRAM-SHA-512=[password={PASSWORD}]"]) == 0
    overrides = {
        "listeners": "SASL_PLAINTEXT://127.0.0.1:0,PLAINTEXT://127.0.0.1:0,SASL_SSL://127.0.0.1:0,"
                     "REAUTH://127.0.0.1:0,HOOKED://127.0.0.1:0",
        "listener.security.protocol.map": "SASL_PLAINTEXT:SASL_PLAINTEXT,PLAINTEXT:PLAINTEXT,"
                                          "SASL_SSL:SASL_SSL,REAUTH:SASL_PLAINTEXT,HOOKED:SASL_PLAINTEXT",
        "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512,OAUTHBEARER",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": PLAIN_JAAS,
        "listener.name.sasl_ssl.plain.sasl.jaas.config": PLAIN_JAAS,
        "listener.name.sasl_ssl.ssl.keystore.location": certs["broker_keystore"],
        "listener.name.reauth.plain.sasl.jaas.config": PLAIN_JAAS,
        "listener.name.reauth.connections.max.reauth.ms": "1500",
        "listener.name.hooked.sasl.enabled.mechanisms": "OAUTHBEARER",
        "listener.name.hooked.oauthbearer.sasl.server.callback.handler.class": f"{__name__}:token_hook",
    }
    runner = BrokerRunner(overrides, data_dir=data_dir)
    runner.start()
    yield runner
    runner.cleanup()


def _port(runner, listener: str) -> int:
    return next(e.port for e in runner.broker.bound if e.listener == listener)


def _address(runner, listener: str = "SASL_PLAINTEXT") -> str:
    return f"127.0.0.1:{_port(runner, listener)}"


def _on_loop(runner, fn):
    async def call():
        return fn()

    return asyncio.run_coroutine_threadsafe(call(), runner._loop).result(10)


def _connections(runner, listener: str) -> list:
    return _on_loop(runner, lambda: [c for c in runner.broker.connections if c.listener == listener])


def _principals(runner, listener: str) -> set[KafkaPrincipal]:
    return {c.principal for c in _connections(runner, listener)}


def _wire(runner, listener: str = "SASL_PLAINTEXT") -> WireClient:
    return WireClient("127.0.0.1", _port(runner, listener), timeout=5)


def _closed(client: WireClient) -> bool:
    """The broker closed the connection: a request gets no answer."""
    try:
        client.request(API_VERSIONS, 0, {})
    except OSError:
        return True
    return False


def _plain_token(user: str, password: str, authzid: str = "") -> bytes:
    return f"{authzid}\0{user}\0{password}".encode()


def _login(client: WireClient, user: str = "alice", password: str = PASSWORD, mechanism: str = "PLAIN",
           version: int = 1):
    handshake = client.request(SASL_HANDSHAKE, 1, {"mechanism": mechanism})
    assert handshake.error_code == 0
    return client.request(SASL_AUTHENTICATE, version, {"auth_bytes": _plain_token(user, password)})


def _unsecured_jwt(sub: str, lifetime: float = 3600, **claims) -> str:
    def part(obj) -> str:
        return base64.urlsafe_b64encode(json.dumps(obj).encode()).rstrip(b"=").decode()

    now = int(time.time())  # whole seconds, as issuers write them
    return f"{part({'alg': 'none'})}.{part({'sub': sub, 'iat': now, 'exp': now + lifetime, **claims})}."


def _oauth_token(jwt: str) -> bytes:
    return f"n,,\x01auth=Bearer {jwt}\x01\x01".encode()


# -- real clients ------------------------------------------------------------------------------------


def _kafka_python_settings(mechanism: str, password: str = PASSWORD, user: str = "alice", **extra) -> dict:
    protocol = extra.pop("security_protocol", "SASL_PLAINTEXT")
    return {"security_protocol": protocol, "sasl_mechanism": mechanism, "sasl_plain_username": user,
            "sasl_plain_password": password, **extra}


def _kafka_python_round_trip(address: str, topic: str, settings: dict, runner=None, listener=None) -> None:
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition

    producer = KafkaProducer(bootstrap_servers=address, **settings)
    try:
        for i in range(3):
            producer.send(topic, f"m{i}".encode()).get(10)
        if runner is not None:
            assert KafkaPrincipal("User", settings["sasl_plain_username"]) in _principals(runner, listener)
    finally:
        producer.close()
    consumer = KafkaConsumer(bootstrap_servers=address, consumer_timeout_ms=10000, **settings)
    try:
        consumer.assign([TopicPartition(topic, 0)])
        consumer.seek_to_beginning()
        values = [next(consumer).value for _ in range(3)]
    finally:
        consumer.close()
    assert values == [b"m0", b"m1", b"m2"]


def _aiokafka_round_trip(address: str, topic: str, mechanism: str, runner, listener: str = "SASL_PLAINTEXT",
                         cafile: str | None = None) -> None:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
    from aiokafka.helpers import create_ssl_context

    settings = {"security_protocol": listener, "sasl_mechanism": mechanism,
                "sasl_plain_username": "alice", "sasl_plain_password": PASSWORD}
    if cafile is not None:
        settings["ssl_context"] = create_ssl_context(cafile=cafile)

    async def run():
        producer = AIOKafkaProducer(bootstrap_servers=address, **settings)
        await producer.start()
        try:
            for i in range(3):
                await producer.send_and_wait(topic, f"m{i}".encode())
            assert KafkaPrincipal("User", "alice") in _principals(runner, listener)
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(bootstrap_servers=address, auto_offset_reset="earliest", **settings)
        await consumer.start()
        try:
            tp = TopicPartition(topic, 0)
            consumer.assign([tp])
            await consumer.seek_to_beginning(tp)
            values = []
            async with asyncio.timeout(10):
                while len(values) < 3:
                    batch = await consumer.getmany(tp, timeout_ms=1000)
                    values += [r.value for r in batch.get(tp, [])]
        finally:
            await consumer.stop()
        assert values == [b"m0", b"m1", b"m2"]

    asyncio.run(run())


def _confluent_settings(address: str, mechanism: str, **extra) -> dict:
    conf = {"bootstrap.servers": address, "sasl.mechanisms": mechanism,
            "security.protocol": extra.pop("security_protocol", "SASL_PLAINTEXT")}
    if mechanism == "OAUTHBEARER":
        conf.update({"enable.sasl.oauthbearer.unsecure.jwt": True,
                     "sasl.oauthbearer.config": f"principal={extra.pop('principal', 'alice')}"})
    else:
        conf.update({"sasl.username": extra.pop("user", "alice"),
                     "sasl.password": extra.pop("password", PASSWORD)})
    conf.update(extra)
    return conf


def _confluent_round_trip(conf: dict, topic: str, runner, listener: str, principal: str) -> None:
    import confluent_kafka

    producer = confluent_kafka.Producer(conf)
    for i in range(3):
        producer.produce(topic, f"m{i}".encode())
    assert producer.flush(10) == 0
    assert KafkaPrincipal("User", principal) in _principals(runner, listener)
    consumer = confluent_kafka.Consumer({**conf, "group.id": f"g-{topic}", "enable.auto.commit": False})
    try:
        consumer.assign([confluent_kafka.TopicPartition(topic, 0, confluent_kafka.OFFSET_BEGINNING)])
        values = []
        deadline = time.monotonic() + 10
        while len(values) < 3 and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                values.append(msg.value())
    finally:
        consumer.close()
    assert values == [b"m0", b"m1", b"m2"]


@pytest.mark.parametrize("listener", ["SASL_PLAINTEXT", "SASL_SSL"])
@pytest.mark.parametrize("mechanism", MECHANISMS)
@pytest.mark.parametrize("client", ["kafka-python", "aiokafka", "confluent-kafka"])
def test_clients_produce_and_consume(broker, certs, topic_name, client, mechanism, listener):
    address = _address(broker, listener)
    tls = listener == "SASL_SSL"
    if client == "kafka-python":
        settings = _kafka_python_settings(mechanism, security_protocol=listener,
                                          **({"ssl_cafile": certs["ca"]} if tls else {}))
        _kafka_python_round_trip(address, topic_name, settings, broker, listener)
    elif client == "aiokafka":
        _aiokafka_round_trip(address, topic_name, mechanism, broker, listener, certs["ca"] if tls else None)
    else:
        conf = _confluent_settings(address, mechanism, security_protocol=listener,
                                   **({"ssl.ca.location": certs["ca"]} if tls else {}))
        _confluent_round_trip(conf, topic_name, broker, listener, "alice")


def test_confluent_oauthbearer_unsecured(broker, topic_name):
    conf = _confluent_settings(_address(broker), "OAUTHBEARER", principal="alice")
    _confluent_round_trip(conf, topic_name, broker, "SASL_PLAINTEXT", "alice")


def test_oauthbearer_validator_hook(broker, topic_name):
    """HOOKED validates tokens with token_hook: the principal is what it returns; what it refuses is
    answered with KIP-255's JSON challenge, then SASL_AUTHENTICATION_FAILED."""
    conf = _confluent_settings(_address(broker, "HOOKED"), "OAUTHBEARER", principal="bob")
    _confluent_round_trip(conf, topic_name, broker, "HOOKED", "hooked-bob")
    with _wire(broker, "HOOKED") as client:
        assert client.request(SASL_HANDSHAKE, 1, {"mechanism": "PLAIN"}).error_code == 33
    with _wire(broker, "HOOKED") as client:
        assert client.request(SASL_HANDSHAKE, 1, {"mechanism": "OAUTHBEARER"}).mechanisms == ["OAUTHBEARER"]
        token = _oauth_token(_unsecured_jwt("mallory"))
        challenge = client.request(SASL_AUTHENTICATE, 2, {"auth_bytes": token})
        assert (challenge.error_code, bytes(challenge.auth_bytes)) == (0, b'{"status":"invalid_token"}')
        failure = client.request(SASL_AUTHENTICATE, 2, {"auth_bytes": b"\x01"})
        assert (failure.error_code, failure.error_message) == (58, '{"status":"invalid_token"}')
        assert _closed(client)


def test_oauthbearer_unsecured_refusals_on_the_wire(broker):
    """An expired token and one lacking `sub` get the invalid_token challenge; the lifetime answered is the
    time left on the token."""
    for jwt in (_unsecured_jwt("alice", lifetime=-10), _unsecured_jwt("")):
        with _wire(broker) as client:
            client.request(SASL_HANDSHAKE, 1, {"mechanism": "OAUTHBEARER"})
            challenge = client.request(SASL_AUTHENTICATE, 1, {"auth_bytes": _oauth_token(jwt)})
            assert json.loads(bytes(challenge.auth_bytes)) == {"status": "invalid_token"}
            assert client.request(SASL_AUTHENTICATE, 1, {"auth_bytes": b"\x01"}).error_code == 58
    with _wire(broker) as client:
        client.request(SASL_HANDSHAKE, 1, {"mechanism": "OAUTHBEARER"})
        token = _oauth_token(_unsecured_jwt("alice", lifetime=60))
        ok = client.request(SASL_AUTHENTICATE, 1, {"auth_bytes": token})
        assert ok.error_code == 0 and 50_000 < ok.session_lifetime_ms <= 60_000


def test_sasl_ssl_kafka_python_scram(broker, certs, topic_name):
    settings = _kafka_python_settings("SCRAM-SHA-256", security_protocol="SASL_SSL", ssl_cafile=certs["ca"])
    _kafka_python_round_trip(_address(broker, "SASL_SSL"), topic_name, settings, broker, "SASL_SSL")


def test_sasl_ssl_kcat(broker, certs, kcat, topic_name):
    def kcat_run(password: str, *args: str, stdin: str | None = None):
        cmd = [kcat, "-b", _address(broker, "SASL_SSL"), "-X", "security.protocol=SASL_SSL",
               "-X", "sasl.mechanisms=SCRAM-SHA-256", "-X", "sasl.username=alice",
               "-X", f"sasl.password={password}", "-X", f"ssl.ca.location={certs['ca']}", *args]
        return subprocess.run(cmd, input=stdin, capture_output=True, text=True, timeout=30)

    produced = kcat_run(PASSWORD, "-P", "-t", topic_name, stdin="one\ntwo\n")
    assert produced.returncode == 0, produced.stderr
    consumed = kcat_run(PASSWORD, "-C", "-t", topic_name, "-o", "beginning", "-e", "-q")
    assert consumed.returncode == 0, consumed.stderr
    assert consumed.stdout.split() == ["one", "two"]
    refused = kcat_run("wrong", "-P", "-t", topic_name, stdin="three\n")
    assert refused.returncode != 0 and "Authentication failed" in refused.stderr


# -- failures --------------------------------------------------------------------------------------


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256"])
def test_wrong_password_on_the_wire(broker, mechanism):
    """SASL_AUTHENTICATION_FAILED with its message, then the connection is closed."""
    with _wire(broker) as client:
        assert client.request(SASL_HANDSHAKE, 1, {"mechanism": mechanism}).error_code == 0
        if mechanism == "PLAIN":
            answer = client.request(SASL_AUTHENTICATE, 2, {"auth_bytes": _plain_token("alice", "wrong")})
            assert answer.error_message == "Authentication failed: Invalid username or password"
        else:
            first = client.request(SASL_AUTHENTICATE, 2, {"auth_bytes": b"n,,n=nobody,r=abcdef"})
            answer = first  # an unknown user fails at the first message, as in Kafka
            assert answer.error_message == ("Authentication failed during authentication due to invalid "
                                            "credentials with SASL mechanism SCRAM-SHA-256")
        assert answer.error_code == 58
        assert _closed(client)


def _peer_closed(sock: socket.socket) -> bool:
    """The broker's FIN has arrived (a peek reads EOF); False while the connection is open and idle."""
    waiting = select.poll()  # not select(): a long-lived worker's descriptors can pass 1024
    waiting.register(sock, select.POLLIN)
    return bool(waiting.poll(0)) and sock.recv(1, socket.MSG_PEEK) == b""


def test_a_failed_login_is_answered_before_the_connection_closes(broker):
    """The failure's answer does not arrive with the FIN (kafka-python 3.0 drops the bytes of a read
    that ends in EOF, and reported a lost connection, not the failure, on a loaded machine): the
    connection closes when the client closes it, or FAILED_AUTH_LINGER_S later."""
    from minibroker.server.connection import FAILED_AUTH_LINGER_S

    for client_closes in (True, False):
        with _wire(broker) as client:
            assert _login(client, password="wrong").error_code == 58
            time.sleep(FAILED_AUTH_LINGER_S / 10)  # a FIN sent with the answer has arrived by now
            assert not _peer_closed(client.sock), "the broker closed the connection with its answer"
            before = time.monotonic()
            if client_closes:
                port = client.sock.getsockname()[1]
                client.sock.close()
                wait_until(lambda port=port: all(c.peer[1] != port
                                                for c in _connections(broker, "SASL_PLAINTEXT")),
                          what="the broker to drop the connection the client closed")
            else:
                wait_until(lambda: _peer_closed(client.sock), what="the broker to close after lingering")
                assert time.monotonic() - before < 10 * FAILED_AUTH_LINGER_S


def test_wrong_password_kafka_python(broker, caplog):
    """kafka-python keeps retrying its bootstrap and raises when its bootstrap timeout ends; the SASL
    failure is what it logs for each attempt."""
    import kafka.errors
    from kafka import KafkaProducer

    caplog.set_level(logging.ERROR, logger="kafka")
    with pytest.raises(kafka.errors.KafkaTimeoutError):
        KafkaProducer(bootstrap_servers=_address(broker), bootstrap_timeout_ms=3000,
                      **_kafka_python_settings("SCRAM-SHA-512", password="wrong"))
    messages = [r.getMessage() for r in caplog.records]
    assert any("SaslAuthenticationFailedError" in m for m in messages), messages


@pytest.mark.slow  # 20 TLS handshakes and failed logins, each answered after the 100 ms delay: 3-4 s
@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256"])
def test_wrong_password_over_sasl_ssl_fails_as_authentication_every_time(minibroker_factory, mechanism):
    """kafka-python drops the bytes of a read that ends in EOF: a broker whose close reached it with the
    SaslAuthenticate answer made it see "socket disconnected" (and retry as if the network had failed)
    instead of the refusal. Over TLS, with a broker of its own process as a user runs it, each of 20
    connections ends with the broker's SaslAuthenticationFailed (Kafka's error 58). Each attempt is
    kafka-python's own connection (its KafkaClient stand-in), whose outcome its bootstrap acts on."""
    import kafka.errors
    from kafka.net.compat import KafkaNetClient

    broker = minibroker_factory(mode="process", security_protocol="SASL_SSL", sasl_mechanism=mechanism)
    settings = dict(broker.client_config("kafka-python", user="alice"), sasl_plain_password="wrong")
    outcomes = []
    for _ in range(20):
        client = KafkaNetClient(**settings)
        try:
            node_id = client.cluster.bootstrap_brokers()[0].node_id
            client.maybe_connect(node_id)
            connection = client._manager._conns[node_id]
            client.poll(timeout_ms=30_000, future=connection.init_future)
            outcomes.append(connection.init_future.exception)
        finally:
            client.close()
    wrong = [repr(e) for e in outcomes if not isinstance(e, kafka.errors.SaslAuthenticationFailedError)]
    assert not wrong, f"{len(wrong)} of 20 attempts did not end in SaslAuthenticationFailed: {wrong}"


def test_wrong_password_aiokafka(broker):
    import aiokafka.errors
    from aiokafka import AIOKafkaProducer

    async def run():
        producer = AIOKafkaProducer(bootstrap_servers=_address(broker), security_protocol="SASL_PLAINTEXT",
                                    sasl_mechanism="PLAIN", sasl_plain_username="alice",
                                    sasl_plain_password="wrong")
        try:
            await producer.start()
        finally:
            await producer.stop()

    with pytest.raises(aiokafka.errors.KafkaConnectionError):
        asyncio.run(asyncio.wait_for(run(), 30))


def test_wrong_password_confluent(broker):
    """librdkafka reports an _AUTHENTICATION error to the error callback (it keeps reconnecting)."""
    import confluent_kafka

    errors = []
    conf = _confluent_settings(_address(broker), "SCRAM-SHA-256", password="wrong", error_cb=errors.append)
    producer = confluent_kafka.Producer(conf)
    authentication = confluent_kafka.KafkaError._AUTHENTICATION
    wait_until(lambda: producer.poll(0.1) is not None and any(e.code() == authentication for e in errors),
              what="an _AUTHENTICATION error")
    assert any("invalid credentials with SASL mechanism SCRAM-SHA-256" in e.str() for e in errors)


CLIENT_SOFTWARE = {"client_software_name": "t", "client_software_version": "1"}


def test_request_before_authentication_closes_the_connection(broker):
    with _wire(broker) as client:
        versions = client.request(API_VERSIONS, 3, CLIENT_SOFTWARE)
        assert {17, 36, 50, 51} <= {k.api_key for k in versions.api_keys}
        with pytest.raises(OSError):
            client.request(METADATA, 1, {"topics": None})
    with _wire(broker) as client:  # SaslAuthenticate before SaslHandshake: closed too
        with pytest.raises(OSError):
            client.request(SASL_AUTHENTICATE, 1, {"auth_bytes": b"x"})
    with _wire(broker) as client:  # after the handshake, only SaslAuthenticate
        client.request(SASL_HANDSHAKE, 1, {"mechanism": "PLAIN"})
        with pytest.raises(OSError):
            client.request(METADATA, 1, {"topics": None})


def test_large_frame_before_authentication_closes_the_connection(broker):
    """sasl.server.max.receive.size (512 KiB) bounds what an unauthenticated client may send."""
    with _wire(broker) as client:
        client.sock.sendall((600_000).to_bytes(4, "big") + b"\0" * 1024)
        try:
            assert client.sock.recv(4) == b""
        except ConnectionResetError:  # closed with our bytes unread: a reset, which is a close too
            pass


def test_unsupported_mechanism_and_second_handshake(broker):
    with _wire(broker) as client:
        answer = client.request(SASL_HANDSHAKE, 1, {"mechanism": "GSSAPI"})
        assert answer.error_code == 33
        assert answer.mechanisms == ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER"]
        assert _closed(client)
    with _wire(broker) as client:
        client.request(SASL_HANDSHAKE, 1, {"mechanism": "PLAIN"})
        assert client.request(SASL_HANDSHAKE, 1, {"mechanism": "PLAIN"}).error_code == 34
        assert _closed(client)


def test_plaintext_listener_answers_illegal_sasl_state(broker):
    with _wire(broker, "PLAINTEXT") as client:
        versions = client.request(API_VERSIONS, 3, CLIENT_SOFTWARE)
        assert {17, 36} <= {k.api_key for k in versions.api_keys}
        handshake = client.request(SASL_HANDSHAKE, 1, {"mechanism": "PLAIN"})
        assert (handshake.error_code, handshake.mechanisms) == (34, [])
        authenticate = client.request(SASL_AUTHENTICATE, 2, {"auth_bytes": b""})
        assert authenticate.error_code == 34
        assert client.request(METADATA, 1, {"topics": None}).brokers  # still open


def test_authenticated_connection_answers_illegal_sasl_state(broker):
    """Without a session lifetime there is no re-authentication: Kafka's request handler answers."""
    with _wire(broker) as client:
        assert _login(client).error_code == 0
        assert client.request(SASL_HANDSHAKE, 1, {"mechanism": "PLAIN"}).error_code == 34
        answer = client.request(SASL_AUTHENTICATE, 1, {"auth_bytes": b""})
        assert answer.error_code == 34
        assert answer.error_message == "SaslAuthenticate request received after successful authentication"
        assert client.request(METADATA, 1, {"topics": None}).brokers


def test_plain_authzid_must_be_the_user(broker):
    with _wire(broker) as client:
        client.request(SASL_HANDSHAKE, 1, {"mechanism": "PLAIN"})
        token = _plain_token("alice", PASSWORD, "admin")
        answer = client.request(SASL_AUTHENTICATE, 1, {"auth_bytes": token})
        assert answer.error_code == 58 and "authorization id" in answer.error_message


def test_unframed_v0_flow_kafka_python(broker, topic_name):
    """api_version=(0, 10, 0): SaslHandshake v0, then bare tokens framed by their size only."""
    for mechanism in ("PLAIN", "SCRAM-SHA-256"):
        settings = _kafka_python_settings(mechanism, api_version=(0, 10, 0))
        _kafka_python_round_trip(_address(broker), f"{topic_name}-{mechanism}", settings)
    with _wire(broker) as client:  # a failed bare exchange closes the connection without an answer
        assert client.request(SASL_HANDSHAKE, 0, {"mechanism": "PLAIN"}).error_code == 0
        token = _plain_token("alice", "wrong")
        client.sock.sendall(len(token).to_bytes(4, "big") + token)
        assert client.sock.recv(4) == b""


def test_failed_authentications_are_logged_rate_limited():
    lines = []
    now = [100.0]
    failure_log = FailedAuthenticationLog(clock=lambda: now[0])
    handler = logging.Handler()
    handler.emit = lambda record: lines.append(record.getMessage())
    logger = logging.getLogger("minibroker.security.sasl")
    logger.addHandler(handler)
    old_level = logger.level
    logger.setLevel(logging.INFO)
    try:
        for _ in range(50):  # one host in a loop: one line per second
            failure_log.failed("10.0.0.1", "SASL", "PLAIN", "bad password")
        now[0] += 1.0
        failure_log.failed("10.0.0.1", "SASL", "PLAIN", "bad password")
        assert len(lines) == 2 and "49 more from this host" in lines[1]
        for i in range(30):  # many hosts at once: ten lines a second in all
            failure_log.failed(f"10.0.1.{i}", "SASL", "PLAIN", "bad password")
        assert len(lines) == 11
        now[0] += 1.0
        failure_log.failed("10.0.2.1", "SASL", "PLAIN", "bad password")
        assert "21 more from other hosts" in lines[-1]
    finally:
        logger.removeHandler(handler)
        logger.setLevel(old_level)


# -- re-authentication (KIP-368) -------------------------------------------------------------------


@pytest.mark.slow  # a session lifetime must pass
def test_reauthentication_kafka_python(broker, topic_name):
    """REAUTH answers session_lifetime_ms=1500: kafka-python re-authenticates on the same connection
    before it ends, and keeps producing across re-authentications."""
    from kafka import KafkaProducer

    producer = KafkaProducer(bootstrap_servers=_address(broker, "REAUTH"), **_kafka_python_settings("PLAIN"))
    try:
        producer.send(topic_name, b"before").get(10)
        conns = _connections(broker, "REAUTH")
        assert len(conns) == 1
        conn = conns[0]
        sent = 1
        deadline = time.monotonic() + 20
        while conn.sasl.reauthentications < 2:
            assert time.monotonic() < deadline, "no re-authentication"
            producer.send(topic_name, b"during").get(10)
            sent += 1
            time.sleep(0.05)
        producer.send(topic_name, b"after").get(10)
        assert not conn.closed and _connections(broker, "REAUTH") == [conn]
        assert conn.principal == KafkaPrincipal("User", "alice")
    finally:
        producer.close()


@pytest.mark.slow  # session lifetimes must pass
def test_session_expiry_and_reauthentication_rules_on_the_wire(broker):
    with _wire(broker, "REAUTH") as client:
        answer = _login(client)
        assert (answer.error_code, answer.session_lifetime_ms) == (0, 1500)
        # the first re-authentication may come at once; the next within a second is refused
        assert _login(client).session_lifetime_ms == 1500
        expires = time.monotonic() + 1.5
        assert client.request(SASL_HANDSHAKE, 1, {"mechanism": "PLAIN"}).error_code == 34
        assert client.request(METADATA, 1, {"topics": None}).brokers
        time.sleep(max(0.0, expires + 0.1 - time.monotonic()))  # the session ends with wall-clock time
        with pytest.raises(OSError):
            client.request(METADATA, 1, {"topics": None})
    with _wire(broker, "REAUTH") as client:  # the principal may not change
        _login(client)
        client.request(SASL_HANDSHAKE, 1, {"mechanism": "PLAIN"})
        answer = client.request(SASL_AUTHENTICATE, 1, {"auth_bytes": _plain_token("admin", "admin-secret")})
        assert answer.error_code == 58
        assert answer.error_message == ("Cannot change principals during re-authentication from User.alice: "
                                        "User.admin")
        assert _closed(client)


# -- SCRAM credential management -------------------------------------------------------------------


def _scram_login_works(runner, user: str, password: str, mechanism: str = "SCRAM-SHA-256") -> bool:
    """A SCRAM exchange on the wire, with kafka-python's SCRAM client arithmetic."""
    from kafka.net.sasl.scram import ScramClient

    scram = ScramClient(user, password, mechanism)
    with _wire(runner) as client:
        assert client.request(SASL_HANDSHAKE, 1, {"mechanism": mechanism}).error_code == 0
        first = client.request(SASL_AUTHENTICATE, 1, {"auth_bytes": scram.first_message()})
        if first.error_code:
            return False
        scram.process_server_first_message(bytes(first.auth_bytes))
        final = client.request(SASL_AUTHENTICATE, 1, {"auth_bytes": scram.final_message()})
        if final.error_code:
            return False
        scram.process_server_final_message(bytes(final.auth_bytes))  # checks the server's signature
        return client.request(METADATA, 1, {"topics": None}).brokers is not None


def test_kafka_python_admin_alter_and_describe(broker):
    from kafka.admin import KafkaAdminClient, ScramMechanism, UserScramCredentialDeletion
    from kafka.admin import UserScramCredentialUpsertion as Upsertion

    admin = KafkaAdminClient(bootstrap_servers=_address(broker, "PLAINTEXT"))
    try:
        assert admin.alter_user_scram_credentials([Upsertion("bob", "SCRAM-SHA-256", "bob-secret",
                                                             iterations=8192)]) == {"bob": None}
        described = admin.describe_user_scram_credentials(["bob", "nobody"])
        assert described["bob"]["credential_infos"] == [{"mechanism": ScramMechanism.SCRAM_SHA_256,
                                                         "iterations": 8192}]
        assert "does not exist" in described["nobody"]["error"]
        assert "alice" in admin.describe_user_scram_credentials()
        errors = admin.alter_user_scram_credentials([
            Upsertion("carl", "SCRAM-SHA-256", "x", iterations=1000),
            Upsertion("dave", "SCRAM-SHA-512", "x", iterations=20000),
            UserScramCredentialDeletion("bob", "SCRAM-SHA-512")])
        assert errors == {"carl": "Too few iterations", "dave": "Too many iterations",
                          "bob": "Attempt to delete a user credential that does not exist"}
        twice = admin.alter_user_scram_credentials([Upsertion("erin", "SCRAM-SHA-256", "x"),
                                                    Upsertion("erin", "SCRAM-SHA-512", "x")])
        assert twice == {"erin": "A user credential cannot be altered twice in the same request"}
        assert _scram_login_works(broker, "bob", "bob-secret")
        assert not _scram_login_works(broker, "bob", "wrong")
        assert admin.alter_user_scram_credentials([UserScramCredentialDeletion("bob", "SCRAM-SHA-256")]) == {
            "bob": None}
        assert not _scram_login_works(broker, "bob", "bob-secret")
    finally:
        admin.close()


def test_confluent_admin_alter_and_describe(broker):
    import confluent_kafka
    from confluent_kafka.admin import (
        AdminClient,
        ScramCredentialInfo,
        ScramMechanism,
        UserScramCredentialUpsertion,
    )

    admin = AdminClient({"bootstrap.servers": _address(broker, "PLAINTEXT")})
    info = ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096)
    upsertion = UserScramCredentialUpsertion("frank", info, b"frank-secret")
    futures = admin.alter_user_scram_credentials([upsertion])
    assert futures["frank"].result(10) is None
    described = admin.describe_user_scram_credentials(["frank"])["frank"].result(10)
    assert [(i.mechanism, i.iterations) for i in described.scram_credential_infos] == [
        (ScramMechanism.SCRAM_SHA_512, 4096)]
    with pytest.raises(confluent_kafka.KafkaException) as missing:
        admin.describe_user_scram_credentials(["nobody"])["nobody"].result(10)
    assert missing.value.args[0].code() == confluent_kafka.KafkaError.RESOURCE_NOT_FOUND
    assert _scram_login_works(broker, "frank", "frank-secret", "SCRAM-SHA-512")


def test_scram_apis_need_cluster_permissions_under_an_authorizer(tmp_path):
    overrides = {"authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer"}
    with BrokerRunner(overrides, data_dir=str(tmp_path)) as runner, _wire(runner, "PLAINTEXT") as client:
        described = client.request(50, 0, {"users": [{"name": "alice"}]})
        assert described.error_code == 31  # CLUSTER_AUTHORIZATION_FAILED, for User:ANONYMOUS
        upsertion = {"name": "alice", "mechanism": 1, "iterations": 4096, "salt": b"s",
                     "salted_password": b"p"}
        altered = client.request(51, 0, {"deletions": [], "upsertions": [upsertion]})
        assert [(r.user, r.error_code) for r in altered.results] == [("alice", 31)]
        assert runner.broker.scram_credentials.users() == []


def test_scram_credentials_survive_a_restart(tmp_path):
    from kafka.admin import KafkaAdminClient
    from kafka.admin import UserScramCredentialUpsertion as Upsertion

    overrides = {"listeners": "SASL_PLAINTEXT://127.0.0.1:0,PLAINTEXT://127.0.0.1:0",
                 "listener.security.protocol.map": "SASL_PLAINTEXT:SASL_PLAINTEXT,PLAINTEXT:PLAINTEXT",
                 "sasl.enabled.mechanisms": "SCRAM-SHA-256"}
    with BrokerRunner(overrides, data_dir=str(tmp_path)) as first:
        admin = KafkaAdminClient(bootstrap_servers=_address(first, "PLAINTEXT"))
        try:
            upsertion = Upsertion("gina", "SCRAM-SHA-256", "gina-secret")
            assert admin.alter_user_scram_credentials([upsertion]) == {"gina": None}
        finally:
            admin.close()
    with BrokerRunner(overrides, data_dir=str(tmp_path)) as second:
        assert _scram_login_works(second, "gina", "gina-secret")
    saved = json.loads((tmp_path / "minibroker-scram-credentials.json").read_text())
    assert set(saved["users"]["gina"]["SCRAM-SHA-256"]) == {"salt", "stored_key", "server_key", "iterations"}
    assert "gina-secret" not in json.dumps(saved)


def test_scram_tool_online_and_offline(broker, tmp_path, capsys):
    command_config = tmp_path / "client.properties"
    command_config.write_text(
        "security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\nsasl.jaas.config="
        "org.apache.kafka.common.security.plain.PlainLoginModule required "
        f'username="alice" password="{PASSWORD}";\n')
    online = ["scram", "--bootstrap-server", _address(broker), "--command-config", str(command_config)]
    assert cli_main(online + ["--alter", "--entity-type", "users", "--entity-name", "hank", "--add-config",
                              "SCRAM-SHA-256=[iterations=8192,password=hank-secret],"
                              "SCRAM-SHA-512=[password=hank-secret]"]) == 0
    assert "Completed updating config for user hank." in capsys.readouterr().out
    assert cli_main(online + ["--describe", "--entity-name", "hank"]) == 0
    assert capsys.readouterr().out.strip() == ("SCRAM credential configs for user-principal 'hank' are "
                                               "SCRAM-SHA-256=iterations=8192, SCRAM-SHA-512=iterations=4096")
    assert _scram_login_works(broker, "hank", "hank-secret", "SCRAM-SHA-512")
    assert cli_main(online + ["--alter", "--entity-name", "hank", "--delete-config", "SCRAM-SHA-512"]) == 0
    assert cli_main(online + ["--describe", "--entity-name", "hank"]) == 0
    assert capsys.readouterr().out.strip().endswith("are SCRAM-SHA-256=iterations=8192")
    assert cli_main(online + ["--alter", "--entity-name", "hank", "--add-config",
                              "SCRAM-SHA-256=[iterations=100,password=x]"]) == 1
    assert cli_main(["scram", "--bootstrap-server", _address(broker, "PLAINTEXT"), "--describe",
                     "--entity-name", "nobody"]) == 1
    assert "does not exist" in capsys.readouterr().err
    # offline: refused while the broker holds its directory
    assert cli_main(["scram", "--data-dir", broker.data_dir, "--alter", "--entity-name", "ivy",
                     "--add-config", "SCRAM-SHA-256=[password=x]"]) == 1
    assert "Failed to acquire lock" in capsys.readouterr().err
    assert cli_main(["scram", "--data-dir", str(tmp_path / "fresh"), "--describe"]) == 0


# -- configuration ---------------------------------------------------------------------------------


def _load(**overrides) -> None:
    base = {"listeners": "SASL_PLAINTEXT://127.0.0.1:0"}
    load_config(None, [f"{k}={v}" for k, v in {**base, **overrides}.items()], {})


def test_configuration_errors_name_the_key():
    with pytest.raises(ConfigError, match="sasl.enabled.mechanisms.*GSSAPI.*not served"):
        _load()  # Kafka's default: GSSAPI only
    with pytest.raises(ConfigError, match="listener.name.sasl_plaintext.plain.sasl.jaas.config is not set"):
        _load(**{"sasl.enabled.mechanisms": "PLAIN", "sasl.jaas.config": PLAIN_JAAS})
    with pytest.raises(ConfigError, match="listener.name.sasl_plaintext.plain.sasl.jaas.config.*semi-colon"):
        _load(**{"sasl.enabled.mechanisms": "PLAIN",
                 "listener.name.sasl_plaintext.plain.sasl.jaas.config": PLAIN_JAAS.rstrip(";")})
    with pytest.raises(ConfigError, match="oauthbearer.sasl.server.callback.handler.class.*cannot import"):
        hook_key = "listener.name.sasl_plaintext.oauthbearer.sasl.server.callback.handler.class"
        _load(**{"sasl.enabled.mechanisms": "OAUTHBEARER", hook_key: "no_such_mod:f"})
    with pytest.raises(ConfigError, match="OAUTHBEARER only"):
        _load(**{"sasl.enabled.mechanisms": "SCRAM-SHA-256",
                 "listener.name.sasl_plaintext.scram-sha-256.sasl.server.callback.handler.class": "x:y"})
    _load(**{"sasl.enabled.mechanisms": "GSSAPI,SCRAM-SHA-512"})  # GSSAPI beside others: warned, not offered
    _load(**{"listener.name.sasl_plaintext.sasl.enabled.mechanisms": "OAUTHBEARER"})


# -- units -----------------------------------------------------------------------------------------


def test_scram_sha_256_rfc7677_test_vector(monkeypatch):
    server_nonce = "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0"
    monkeypatch.setattr("minibroker.security.sasl.scram.secrets.token_urlsafe", lambda n: server_nonce)
    salt = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
    credential = credential_from_password(SCRAM_SHA_256, "pencil", 4096, salt=salt)
    server = ScramServer(SCRAM_SHA_256, lambda user: credential if user == "user" else None)
    assert server.evaluate(b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO") == (
        b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096")
    final = server.evaluate(b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
                            b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=")
    assert final == b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="
    assert server.complete and server.authorization_id == "user"


PROOF = b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="


@pytest.mark.parametrize("first, final, error", [
    (b"n,,n=user,r=abc", b"c=biws,r=abc%hvYD," + PROOF, SaslCredentialsError),  # wrong proof
    (b"n,,n=user,r=abc", b"c=eSws,r=abc%hvYD," + PROOF, SaslCredentialsError),  # channel binding "y,,"
    (b"n,,n=user,r=abc", b"c=biws,r=abc," + PROOF, SaslCredentialsError),  # not the server's nonce
    (b"n,a=other,n=user,r=abc", None, SaslAuthenticationError),
    (b"y,,n=user,r=abc", None, SaslCredentialsError),
    (b"n,,n=user,r=abc,tokenauth=true", None, SaslCredentialsError),
    (b"n,,n=nobody,r=abc", None, SaslCredentialsError),
    (b"n,,n=us=er,r=abc", None, SaslCredentialsError),
])
def test_scram_server_refusals(monkeypatch, first, final, error):
    monkeypatch.setattr("minibroker.security.sasl.scram.secrets.token_urlsafe", lambda n: "%hvYD")
    credential = credential_from_password(SCRAM_SHA_256, "pencil", 4096)
    server = ScramServer(SCRAM_SHA_256, {"user": credential}.get)
    with pytest.raises(error):
        server.evaluate(first)
        server.evaluate(final)
    assert not server.complete


def test_scram_credential_under_the_minimum_iterations_is_refused():
    weak = ScramCredential(b"s", b"k" * 32, b"k" * 32, 1024)
    with pytest.raises(SaslCredentialsError, match="less than the minimum"):
        ScramServer(SCRAM_SHA_256, lambda user: weak).evaluate(b"n,,n=user,r=abc")


def test_jaas_parser():
    [entry] = parse_jaas_config(PLAIN_JAAS)
    assert entry.login_module == "org.apache.kafka.common.security.plain.PlainLoginModule"
    assert entry.control_flag == "required"
    assert entry.options == {"username": "admin", "password": "admin-secret", "user_admin": "admin-secret",
                             "user_alice": PASSWORD}
    text = ('// a comment\nFirst REQUIRED a="x\\"y\\\\z\\n\\101" b=\'single;quoted\'\n'
            'c=plain-word_1 /* more */ ;\nSecond optional;')
    first, second = parse_jaas_config(text)
    assert first.options == {"a": 'x"y\\z\nA', "b": "single;quoted", "c": "plain-word_1"}
    assert (second.login_module, second.control_flag, second.options) == ("Second", "optional", {})
    for bad, reason in [("", "not specified"), ("Module", "control flag not specified"),
                        ("Module sometimes;", "Invalid login module control flag"),
                        ("Module required key;", "Value not specified for key 'key'"),
                        ('Module required key="v"', "not terminated by semi-colon")]:
        with pytest.raises(ValueError, match=reason):
            parse_jaas_config(bad)


def test_unsecured_jws_validator():
    now = time.time()
    validator = UnsecuredJwsValidator({"unsecuredValidatorRequiredScope": "read write"})
    token = validator(_unsecured_jwt("alice", lifetime=60, scope=["read", "write", "x"]))
    assert token.principal_name == "alice" and token.scope == {"read", "write", "x"}
    with pytest.raises(TokenValidationError) as scope:
        validator(_unsecured_jwt("alice", scope="read"))
    assert (scope.value.status, scope.value.scope) == ("insufficient_scope", "[read, write]")
    expired = UnsecuredJwsValidator({}, clock=lambda: now + 10)
    with pytest.raises(TokenValidationError, match="Expiration Time"):
        expired(_unsecured_jwt("alice", lifetime=5))
    skewed = UnsecuredJwsValidator({"unsecuredValidatorAllowableClockSkewMs": "6000"}, clock=lambda: now + 10)
    assert skewed(_unsecured_jwt("alice", lifetime=5)).principal_name == "alice"
    custom = UnsecuredJwsValidator({"unsecuredValidatorPrincipalClaimName": "user"})
    assert custom(_unsecured_jwt("ignored", user="carol")).principal_name == "carol"
    none, hs256 = (base64.urlsafe_b64encode(header).rstrip(b"=").decode()
                   for header in (b'{"alg": "none"}', b'{"alg": "HS256"}'))
    signed = _unsecured_jwt("alice") + "signature"
    for bad in ("a.b", "e30..", signed, _unsecured_jwt("alice").replace(none, hs256)):
        with pytest.raises(TokenValidationError):
            UnsecuredJwsValidator({})(bad)
    with pytest.raises(ValueError, match="negative"):
        UnsecuredJwsValidator({"unsecuredValidatorAllowableClockSkewMs": "-1"})


def test_oauthbearer_server_messages():
    server = OAuthBearerServer(UnsecuredJwsValidator({}))
    assert server.evaluate(_oauth_token(_unsecured_jwt("alice"))) == b"" and server.complete
    assert server.authorization_id == "alice"
    with pytest.raises(SaslCredentialsError):
        OAuthBearerServer(UnsecuredJwsValidator({})).evaluate(b"n,,\x01auth=Basic abc\x01\x01")
    with pytest.raises(SaslAuthenticationError, match="authorization id"):
        OAuthBearerServer(UnsecuredJwsValidator({})).evaluate(
            f"n,a=bob,\x01auth=Bearer {_unsecured_jwt('alice')}\x01\x01".encode())


def test_a_failed_credentials_save_changes_nothing(tmp_path, monkeypatch):
    # fault path: the credentials file cannot be written (ENOSPC): every accepted alteration is answered
    # UNKNOWN_SERVER_ERROR and neither memory nor disk changes
    from minibroker.errors import ErrorCode
    from minibroker.security import scram_credentials as sc

    store = sc.ScramCredentialStore(str(tmp_path))
    ok = store.alter([], [sc.Upsertion("ann", 1, 4096, b"salt", b"s" * 32)])
    assert [r.error_code for r in ok] == [0]
    before = (tmp_path / sc.CREDENTIALS_FILE).read_bytes()

    def full_disk(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(sc, "save_metadata", full_disk)
    failed = store.alter([sc.Deletion("ann", 1)], [sc.Upsertion("bo", 1, 4096, b"salt", b"s" * 32)])
    assert {r.user: r.error_code for r in failed} == {"ann": ErrorCode.UNKNOWN_SERVER_ERROR,
                                                      "bo": ErrorCode.UNKNOWN_SERVER_ERROR}
    assert store.users() == ["ann"] and store.get("ann", "SCRAM-SHA-256") is not None
    assert (tmp_path / sc.CREDENTIALS_FILE).read_bytes() == before


def test_a_damaged_credentials_file_keeps_what_it_can(tmp_path):
    # fault path: a hand-edited or damaged credentials file: unreadable entries are skipped, the rest load
    from minibroker.security import scram_credentials as sc

    good = {"salt": "c2FsdA==", "stored_key": "a2V5", "server_key": "a2V5", "iterations": 4096}
    (tmp_path / sc.CREDENTIALS_FILE).write_text(json.dumps({"version": 1, "users": {
        "ann": {"SCRAM-SHA-256": good, "SCRAM-SHA-1": good},
        "bo": {"SCRAM-SHA-256": {"salt": "not base64!", "iterations": 4096}},
        "cy": "garbage"}}))
    store = sc.ScramCredentialStore(str(tmp_path))
    assert store.users() == ["ann"] and store.get("ann", "SCRAM-SHA-256").salt == b"salt"
    (tmp_path / sc.CREDENTIALS_FILE).write_text(json.dumps(["not", "a", "dict"]))
    assert sc.ScramCredentialStore(str(tmp_path)).users() == []
