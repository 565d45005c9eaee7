"""JKS key stores and trust stores (minibroker/security/jks.py, read by minibroker/security/tls.py and the
tools' ``--command-config``), on stores made by the JDK's ``keytool``: the reader's entries, passwords
and refusals as units, then a broker whose mTLS listener takes a JKS key store and trust store serving
confluent-kafka and kafka-python, start-up errors in one line, and the tools with JKS stores.

The stores (``jks_stores``, one keytool run each, a JVM start every time) are built once for the module:
a CA, a broker key store (the key's password differs from the store's, the CA as a trusted entry beside
the key), a client key store, a trust store, a store with two private key entries (RSA and EC, each
with its own password), a JCEKS store, and the client's key and certificate exported to PEM through
openssl for the non-Java clients. JKS needs no cryptography package: one test runs without it.
"""

from __future__ import annotations

import base64
import shutil
import socket
import ssl
import subprocess
import sys

import pytest
from test_tls import _handshake
from test_tls_without_cryptography import no_cryptography  # noqa: F401 (a fixture)

from minibroker.cli import main
from minibroker.config import load_config
from minibroker.security.certificates import certificate_subject
from minibroker.security.jks import JksError, JksPasswordError, read_jks, store_kind
from minibroker.security.tls import TlsConfigError, listener_tls, load_jks_key_store
from minibroker.testing import BrokerRunner
from minibroker.tools.client_config import ClientConfigError, client_security_from_properties

pytestmark = pytest.mark.xdist_group("jks")

KEYTOOL = shutil.which("keytool")
CA_PASSWORD, BROKER_STORE_PASSWORD, BROKER_KEY_PASSWORD = "ca-store-pw", "broker-store-pw", "broker-key-pw"
CLIENT_PASSWORD, TRUST_PASSWORD, MULTI_PASSWORD = "client-store-pw", "trust-store-pw", "multi-store-pw"
CLIENT_DN = "CN=client,OU=test,O=minibroker"


def _keytool(*args: str) -> None:
    # C1 only and the serial collector: each call is a short-lived JVM
    subprocess.run([KEYTOOL, "-J-XX:TieredStopAtLevel=1", "-J-XX:+UseSerialGC", *args], check=True,
                   capture_output=True, timeout=120)


def _signed_key_store(tmp, name: str, dname: str, store_password: str, key_password: str,
                      ca: str, extensions: tuple[str, ...] = ()) -> str:
    """A JKS key store holding ``name``'s EC key with a chain [its certificate signed by the CA, the CA],
    and the CA as a trusted certificate entry."""
    store = str(tmp / f"{name}.jks")
    common = ["-keystore", store, "-storetype", "JKS", "-storepass", store_password]
    _keytool("-genkeypair", *common, "-alias", name, "-keypass", key_password, "-keyalg", "EC",
             "-dname", dname, "-validity", "2")
    _keytool("-certreq", *common, "-alias", name, "-keypass", key_password, "-file", str(tmp / f"{name}.csr"))
    _keytool("-gencert", "-keystore", str(tmp / "ca.jks"), "-storepass", CA_PASSWORD, "-alias", "ca",
             "-infile", str(tmp / f"{name}.csr"), "-outfile", str(tmp / f"{name}.crt"), "-rfc",
             "-validity", "2", *extensions)
    _keytool("-importcert", "-noprompt", *common, "-alias", "ca-root", "-file", ca)
    _keytool("-importcert", "-noprompt", *common, "-alias", name, "-keypass", key_password,
             "-file", str(tmp / f"{name}.crt"))
    return store


@pytest.fixture(scope="module")
def jks_stores(tmp_path_factory):
    if KEYTOOL is None or shutil.which("openssl") is None:
        pytest.skip("needs the JDK's keytool and openssl")
    tmp = tmp_path_factory.mktemp("jks")
    ca = str(tmp / "ca.pem")
    _keytool("-genkeypair", "-keystore", str(tmp / "ca.jks"), "-storetype", "JKS", "-storepass", CA_PASSWORD,
             "-alias", "ca", "-keyalg", "EC", "-dname", "CN=jks-test-ca", "-ext", "bc:c", "-validity", "2")
    _keytool("-exportcert", "-keystore", str(tmp / "ca.jks"), "-storepass", CA_PASSWORD, "-alias", "ca",
             "-rfc", "-file", ca)
    broker = _signed_key_store(tmp, "broker", "CN=localhost", BROKER_STORE_PASSWORD, BROKER_KEY_PASSWORD, ca,
                               ("-ext", "SAN=dns:localhost,ip:127.0.0.1"))
    client = _signed_key_store(tmp, "client", CLIENT_DN, CLIENT_PASSWORD, CLIENT_PASSWORD, ca)
    truststore = str(tmp / "truststore.jks")
    _keytool("-importcert", "-noprompt", "-keystore", truststore, "-storetype", "JKS", "-storepass",
             TRUST_PASSWORD, "-alias", "ca", "-file", ca)
    multi = str(tmp / "multi.jks")  # two private key entries, each with its own password, and a CA
    for alias, algorithm in (("rsa-key", "RSA"), ("ec-key", "EC")):
        _keytool("-genkeypair", "-keystore", multi, "-storetype", "JKS", "-storepass", MULTI_PASSWORD,
                 "-alias", alias, "-keypass", f"{alias}-pw", "-keyalg", algorithm, "-dname", f"CN={alias}",
                 "-validity", "2")
    _keytool("-importcert", "-noprompt", "-keystore", multi, "-storetype", "JKS",
             "-storepass", MULTI_PASSWORD, "-alias", "ca", "-file", ca)
    jceks = str(tmp / "store.jceks")
    _keytool("-genkeypair", "-keystore", jceks, "-storetype", "JCEKS", "-storepass", "jceks-pw", "-keypass",
             "jceks-pw", "-alias", "k", "-keyalg", "EC", "-dname", "CN=jceks")
    # the client's key and certificate as PEM, for confluent-kafka and kafka-python
    client_p12 = str(tmp / "client.p12")
    _keytool("-importkeystore", "-srckeystore", client, "-srcstoretype", "JKS",
             "-srcstorepass", CLIENT_PASSWORD, "-srcalias", "client", "-destkeystore", client_p12,
             "-deststoretype", "PKCS12",
             "-deststorepass", CLIENT_PASSWORD)
    client_pem = str(tmp / "client.pem")
    subprocess.run(["openssl", "pkcs12", "-in", client_p12, "-passin", f"pass:{CLIENT_PASSWORD}", "-nodes",
                    "-out", client_pem], check=True, capture_output=True, timeout=60)
    return {"dir": tmp, "ca": ca, "broker": broker, "client": client, "truststore": truststore,
            "jceks": jceks, "multi": multi, "client_pem": client_pem, "client_p12": client_p12}


def _bytes(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


# -- the reader -------------------------------------------------------------------------------------


def test_entries_of_a_key_store_with_a_trusted_entry(jks_stores):
    store = read_jks(_bytes(jks_stores["broker"]), BROKER_STORE_PASSWORD)
    ca_der = ssl.PEM_cert_to_DER_cert(_bytes(jks_stores["ca"]).decode())
    assert [e.alias for e in store.private_keys] == ["broker"]
    assert store.certificates == (("ca-root", ca_der),)
    (entry,) = store.private_keys
    assert [certificate_subject(c) for c in entry.chain] == ["CN=localhost", "CN=jks-test-ca"]
    assert entry.chain[1] == ca_der
    assert sorted(store.trusted_certificates()) == sorted([ca_der, entry.chain[0]])  # Java's trust rule


def test_the_key_is_recovered_with_the_key_password_only(jks_stores):
    (entry,) = read_jks(_bytes(jks_stores["broker"]), BROKER_STORE_PASSWORD).private_keys
    with pytest.raises(JksPasswordError, match="wrong key password"):
        entry.private_key(BROKER_STORE_PASSWORD)
    key = entry.private_key(BROKER_KEY_PASSWORD)
    assert key[:1] == b"\x30"  # a PKCS#8 SEQUENCE
    # OpenSSL takes the key with the chain only when the key is the certificate's
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    chain = load_jks_key_store(context, _bytes(jks_stores["broker"]), store_password=BROKER_STORE_PASSWORD,
                               key_password=BROKER_KEY_PASSWORD, store_password_key="ssl.keystore.password",
                               key_password_key="ssl.key.password", what="broker.jks")
    assert chain == list(entry.chain)


def test_several_key_entries_each_with_its_own_password(jks_stores, tmp_path):
    store = read_jks(_bytes(jks_stores["multi"]), MULTI_PASSWORD)
    assert sorted(e.alias for e in store.private_keys) == ["ec-key", "rsa-key"]
    assert [alias for alias, _ in store.certificates] == ["ca"]
    for entry in store.private_keys:
        other = "ec-key" if entry.alias == "rsa-key" else "rsa-key"
        with pytest.raises(JksPasswordError):
            entry.private_key(f"{other}-pw")
        key = base64.encodebytes(entry.private_key(f"{entry.alias}-pw")).decode()
        pem = tmp_path / f"{entry.alias}.pem"
        pem.write_text(f"-----BEGIN PRIVATE KEY-----\n{key}-----END PRIVATE KEY-----\n"
                       + ssl.DER_cert_to_PEM_cert(entry.chain[0]))
        # OpenSSL takes the pair only when the recovered key is the certificate's
        ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER).load_cert_chain(str(pem))
        assert certificate_subject(entry.chain[0]) == f"CN={entry.alias}"


def test_the_store_password_is_checked_by_the_integrity_digest(jks_stores):
    data = _bytes(jks_stores["truststore"])
    with pytest.raises(JksPasswordError, match="Keystore was tampered with, or password was incorrect"):
        read_jks(data, "not-the-password")
    with_password = read_jks(data, TRUST_PASSWORD)
    assert read_jks(data, None) == with_password  # no password: read without the check, as Java does
    assert [alias for alias, _ in with_password.certificates] == ["ca"]


def test_a_corrupted_store_raises_only_jks_errors(jks_stores):
    data = _bytes(jks_stores["broker"])
    for end in range(0, len(data), 7):  # every truncation is refused, checked or not
        with pytest.raises(JksError):
            read_jks(data[:end], None)
    for pos in range(0, len(data) - 20, 5):
        flipped = data[:pos] + bytes([data[pos] ^ 0x5A]) + data[pos + 1:]
        # the magic number is read first (not a JKS store); any other byte fails the digest
        with pytest.raises(JksPasswordError if pos >= 4 else JksError):
            read_jks(flipped, BROKER_STORE_PASSWORD)
        try:  # unchecked, a flipped byte is either refused or read as other bytes; never another error
            read_jks(flipped, None)
        except JksError:
            pass


def test_jceks_and_other_files_are_refused_by_name(jks_stores):
    assert store_kind(_bytes(jks_stores["jceks"])) == "JCEKS"
    with pytest.raises(JksError, match="a JCEKS store, which minibroker does not read"):
        read_jks(_bytes(jks_stores["jceks"]), "jceks-pw")
    with pytest.raises(JksError, match="not a JKS store"):
        read_jks(_bytes(jks_stores["ca"]), None)


# -- a broker with JKS stores -----------------------------------------------------------------------


def _broker_overrides(jks_stores, **changes: str) -> dict[str, str]:
    out = {
        "listeners": "PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0",
        "ssl.client.auth": "required",
        "ssl.keystore.type": "JKS",
        "ssl.keystore.location": jks_stores["broker"],
        "ssl.keystore.password": BROKER_STORE_PASSWORD,
        "ssl.key.password": BROKER_KEY_PASSWORD,
        "ssl.truststore.type": "JKS",
        "ssl.truststore.location": jks_stores["truststore"],
        "ssl.truststore.password": TRUST_PASSWORD,
    }
    out.update({k.replace("_", "."): v for k, v in changes.items()})
    return out


@pytest.fixture(scope="module")
def jks_broker(jks_stores):
    runner = BrokerRunner(_broker_overrides(jks_stores))
    runner.start()
    yield runner
    runner.cleanup()


def _ssl_address(runner) -> str:
    return f"127.0.0.1:{next(e.port for e in runner.broker.bound if e.listener == 'SSL')}"


def test_confluent_kafka_over_mtls_with_jks_stores(jks_broker, jks_stores, topic_name):
    confluent_kafka = pytest.importorskip("confluent_kafka")
    settings = {"bootstrap.servers": _ssl_address(jks_broker), "security.protocol": "SSL",
                "ssl.ca.location": jks_stores["ca"], "ssl.certificate.location": jks_stores["client_pem"],
                "ssl.key.location": jks_stores["client_pem"]}
    producer = confluent_kafka.Producer(settings)
    for i in range(5):
        producer.produce(topic_name, f"v{i}".encode())
    assert producer.flush(30) == 0
    consumer = confluent_kafka.Consumer({**settings, "group.id": topic_name, "auto.offset.reset": "earliest"})
    consumer.subscribe([topic_name])
    values = []
    try:
        for _ in range(60):
            message = consumer.poll(1.0)
            if message is not None and message.error() is None:
                values.append(message.value())
            if len(values) == 5:
                break
    finally:
        consumer.close()
    assert values == [f"v{i}".encode() for i in range(5)]


def test_a_client_without_a_certificate_is_refused(jks_broker, jks_stores):
    """The JKS trust store is what the client certificate is checked against: without one, the
    handshake fails."""
    context = ssl.create_default_context(cafile=jks_stores["ca"])
    with socket.create_connection(("127.0.0.1", int(_ssl_address(jks_broker).rsplit(":", 1)[1])), 10) as raw:
        with pytest.raises((ssl.SSLError, ConnectionError)):
            with context.wrap_socket(raw, server_hostname="localhost") as tls:
                tls.sendall(b"\0\0\0\x0b\0\x12\0\0\0\0\0\x01\0\x01x")
                if not tls.recv(4):
                    raise ConnectionError("closed")


def test_kafka_python_with_a_client_certificate(jks_broker, jks_stores, topic_name):
    kafka = pytest.importorskip("kafka")
    settings = {"bootstrap_servers": _ssl_address(jks_broker), "security_protocol": "SSL",
                "ssl_cafile": jks_stores["ca"], "ssl_certfile": jks_stores["client_pem"],
                "ssl_keyfile": jks_stores["client_pem"]}
    producer = kafka.KafkaProducer(**settings)
    producer.send(topic_name, b"over-jks").get(timeout=30)
    producer.close()
    consumer = kafka.KafkaConsumer(topic_name, auto_offset_reset="earliest", consumer_timeout_ms=20000,
                                   **settings)
    try:
        assert next(consumer).value == b"over-jks"
    finally:
        consumer.close()


def test_a_jks_store_with_its_type_left_to_the_default_is_read(jks_stores):
    """Kafka's default store type is JKS: a configuration that leaves it out gives a JKS file."""
    overrides = _broker_overrides(jks_stores)
    del overrides["ssl.keystore.type"], overrides["ssl.truststore.type"]
    config_lines = [f"{k}={v}" for k, v in overrides.items()]
    tls = listener_tls(load_config(None, config_lines, {}))
    assert certificate_subject(tls["SSL"].certificate) == "CN=localhost" and tls["SSL"].has_truststore


@pytest.mark.parametrize("changes, message", [
    ({"ssl_keystore_password": "wrong-password"},
     "Keystore was tampered with, or password was incorrect (check ssl.keystore.password)"),
    ({"ssl_key_password": "wrong-password"}, "wrong key password (check ssl.key.password)"),
    ({"ssl_truststore_password": "wrong-password"}, "check ssl.truststore.password"),
    ({"ssl_keystore_location": "{jceks}"}, "a JCEKS store, which minibroker does not read"),
    ({"ssl_keystore_location": "{truststore}", "ssl_keystore_password": TRUST_PASSWORD},
     "holds no private key entry"),
])
def test_a_bad_jks_setting_stops_start_up_in_one_line(jks_stores, tmp_path, changes, message):
    overrides = _broker_overrides(jks_stores, **{k: v.format(**jks_stores) for k, v in changes.items()})
    runner = BrokerRunner(overrides, data_dir=str(tmp_path / "data"))
    with pytest.raises(TlsConfigError, match="listener SSL") as info:
        runner.start()
    assert message in str(info.value) and "\n" not in str(info.value)


def test_keystore_password_is_required_as_kafka_requires_it(jks_stores, tmp_path):
    overrides = _broker_overrides(jks_stores)
    del overrides["ssl.keystore.password"]
    runner = BrokerRunner(overrides, data_dir=str(tmp_path / "data"))
    with pytest.raises(TlsConfigError, match="key store password is not specified"):
        runner.start()


def test_serve_with_a_corrupted_store_exits_with_one_line(jks_stores, tmp_path):
    data = bytearray(_bytes(jks_stores["broker"]))
    data[len(data) // 2] ^= 0xFF
    corrupted = tmp_path / "corrupted.jks"
    corrupted.write_bytes(bytes(data))
    overrides = _broker_overrides(jks_stores, ssl_keystore_location=str(corrupted))
    args = [f"{k}={v}" for k, v in overrides.items()]
    out = subprocess.run([sys.executable, "-m", "minibroker", "serve", "--override", f"log.dirs={tmp_path}",
                          *[a for arg in args for a in ("--override", arg)]],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 1
    errors = [line for line in out.stderr.splitlines() if str(corrupted) in line and " INFO " not in line]
    assert len(errors) == 1, out.stderr  # the start-up log names the file too, at INFO
    assert f"ssl.keystore.location (from --override) {corrupted}: Keystore was tampered with, or password " \
           "was incorrect" in errors[0]


def test_jks_stores_need_no_cryptography(jks_stores, no_cryptography):  # noqa: F811
    """On a plain install (no ``tls`` extra) a JKS key store and trust store serve mutual TLS, in the
    broker and in the tools."""
    config = load_config(None, [f"{k}={v}" for k, v in _broker_overrides(jks_stores).items()], {})
    client = ssl.create_default_context(cafile=jks_stores["ca"])
    client.load_cert_chain(jks_stores["client_pem"])
    server_side = _handshake(listener_tls(config)["SSL"].context, client)
    assert certificate_subject(server_side.getpeercert(binary_form=True)) == CLIENT_DN
    tools = client_security_from_properties(_client_properties(jks_stores)).ssl_context()
    assert [c["subject"] for c in tools.get_ca_certs()] == [((("commonName", "jks-test-ca"),),)]


# -- the tools' --command-config ----------------------------------------------------------------------


def _client_properties(jks_stores, **extra: str) -> dict[str, str]:
    return {"security.protocol": "SSL", "ssl.truststore.type": "JKS",
            "ssl.truststore.location": jks_stores["truststore"], "ssl.truststore.password": TRUST_PASSWORD,
            "ssl.keystore.type": "JKS", "ssl.keystore.location": jks_stores["client"],
            "ssl.keystore.password": CLIENT_PASSWORD, **extra}


def test_tools_talk_to_the_broker_with_jks_stores(jks_broker, jks_stores, tmp_path, capsys):
    props = tmp_path / "client.properties"
    props.write_text("".join(f"{k}={v}\n" for k, v in _client_properties(jks_stores).items()))
    args = ["--bootstrap-server", _ssl_address(jks_broker), "--command-config", str(props), "--timeout", "10"]
    assert main(["topics", "create", "--topic", "jks-tool-topic", "--partitions", "2", *args]) == 0
    capsys.readouterr()
    assert main(["topics", "list", *args]) == 0
    assert "jks-tool-topic" in capsys.readouterr().out.split()


def test_tools_refuse_a_wrong_jks_password_in_one_line(jks_stores):
    security = client_security_from_properties(
        _client_properties(jks_stores, **{"ssl.truststore.password": "wrong-password"}), "client.properties")
    with pytest.raises(ClientConfigError, match="check ssl.truststore.password") as info:
        security.ssl_context()
    assert "\n" not in str(info.value)
    # a trust store without a password is read unchecked, as Kafka's clients read it
    unchecked = _client_properties(jks_stores)
    del unchecked["ssl.truststore.password"]
    context = client_security_from_properties(unchecked).ssl_context()
    assert [c["subject"] for c in context.get_ca_certs()] == [((("commonName", "jks-test-ca"),),)]


def test_a_pkcs12_file_declared_jks_is_read_as_java_reads_it(jks_broker, jks_stores, tmp_path, capsys):
    pytest.importorskip("cryptography")
    props = tmp_path / "client.properties"
    settings = _client_properties(jks_stores, **{"ssl.keystore.location": jks_stores["client_p12"]})
    props.write_text("".join(f"{k}={v}\n" for k, v in settings.items()))
    assert main(["topics", "list", "--bootstrap-server", _ssl_address(jks_broker), "--command-config",
                 str(props), "--timeout", "10"]) == 0, capsys.readouterr().err

