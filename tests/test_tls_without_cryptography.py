"""TLS on a plain install, without the ``tls`` extra: the cryptography package made unimportable (in this
process by ``sys.modules`` entries of None, in a subprocess by a ``cryptography`` package on PYTHONPATH
that raises ImportError). PEM key stores, plain or with an encrypted private key, file or inline, and
PEM trust stores serve real clients; the dynamic key store checks read the certificate's names without
it; a PKCS12 store, in the broker or in a tool's ``--command-config``, and ``minibroker certs`` say in
one line which extra to install. Certificates are made in this process first, where cryptography is
installed (the test extra brings it)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
import tomllib
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from test_tls import CLIENT_DN, _client_context, _handshake

from minibroker.config import load_config
from minibroker.security.certificates import certificate_subject
from minibroker.security.tls import TLS_EXTRA, TlsConfigError, listener_tls, reload_listener_tls
from minibroker.testing import BrokerRunner
from minibroker.tools.certs import generate_test_certs
from minibroker.tools.client_config import ClientConfigError, client_security_from_properties

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
KEY_PASSWORD = "s3cret pass"


PKCS8, TRADITIONAL = serialization.PrivateFormat.PKCS8, serialization.PrivateFormat.TraditionalOpenSSL


def _key_store_with_encrypted_key(key: str, cert: str, path: Path, key_format=PKCS8) -> Path:
    """A PEM key store at ``path``: the private key of file ``key`` encrypted with KEY_PASSWORD, in PKCS8
    (``BEGIN ENCRYPTED PRIVATE KEY``) or OpenSSL's traditional form (``Proc-Type: 4,ENCRYPTED``), then
    the certificate of file ``cert``."""
    private = serialization.load_pem_private_key(Path(key).read_bytes(), None)
    pem = private.private_bytes(serialization.Encoding.PEM, key_format,
                                serialization.BestAvailableEncryption(KEY_PASSWORD.encode()))
    path.write_bytes(pem + Path(cert).read_bytes())
    return path


def _key_store_forms(certs: dict, directory: Path) -> dict[str, dict[str, str]]:
    """Key store settings by form, each serving the broker certificate of ``certs``."""
    key, cert = certs["broker_key"], certs["broker_cert"]
    pkcs8 = _key_store_with_encrypted_key(key, cert, directory / "broker-pkcs8.pem")
    traditional = _key_store_with_encrypted_key(key, cert, directory / "broker-traditional.pem", TRADITIONAL)
    assert b"Proc-Type: 4,ENCRYPTED" in traditional.read_bytes()
    password = {"ssl.key.password": KEY_PASSWORD}
    return {
        "pem": {"ssl.keystore.location": certs["broker_keystore"]},
        "encrypted-pkcs8": {"ssl.keystore.location": str(pkcs8), **password},
        "encrypted-traditional": {"ssl.keystore.location": str(traditional), **password},
        "inline": {"ssl.keystore.key": Path(certs["broker_key"]).read_text(),
                   "ssl.keystore.certificate.chain": Path(certs["broker_cert"]).read_text()},
        "inline-encrypted": {"ssl.keystore.key": pkcs8.read_text().split("-----BEGIN CERTIFICATE")[0],
                             "ssl.keystore.certificate.chain": Path(certs["broker_cert"]).read_text(),
                             **password},
    }


@pytest.fixture(scope="module")
def certs(tmp_path_factory) -> dict:
    directory = tmp_path_factory.mktemp("certs")
    paths = generate_test_certs(str(directory))
    paths["forms"] = _key_store_forms(paths, directory)
    for name, hosts in (("wide", ["a.example", "b.example"]), ("narrow", ["a.example"]),
                        ("other", ["other.example"])):
        made = generate_test_certs(str(directory / name), hosts=hosts)
        paths[name] = str(_key_store_with_encrypted_key(made["broker_key"], made["broker_cert"],
                                                        directory / f"{name}-encrypted.pem"))
    return paths


@pytest.fixture
def no_cryptography(monkeypatch):
    """cryptography unimportable in this process (an entry of None makes ``import`` raise ImportError)."""
    for name in [n for n in sys.modules if n == "cryptography" or n.startswith("cryptography.")]:
        monkeypatch.setitem(sys.modules, name, None)
    monkeypatch.setitem(sys.modules, "cryptography", None)
    with pytest.raises(ImportError):
        from cryptography.hazmat.primitives.serialization import pkcs12  # noqa: F401


@pytest.fixture(scope="module")
def blocked_env(tmp_path_factory) -> tuple[dict, Path]:
    """An environment whose ``import cryptography`` fails, as on a plain install, and the file that
    blocking package appends to whenever something tries to import it."""
    blocker = tmp_path_factory.mktemp("no-cryptography")
    marker = blocker / "import-attempts"
    (blocker / "cryptography").mkdir()
    (blocker / "cryptography" / "__init__.py").write_text(
        f"with open({str(marker)!r}, 'a') as f:\n    f.write('tried\\n')\n"
        "raise ImportError('cryptography is not installed here')\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "MINIBROKER_"))}
    env["PYTHONPATH"] = os.pathsep.join([str(blocker), ROOT])
    return env, marker


def _overrides(form: dict[str, str]) -> list[str]:
    return [f"{k}={v}" for k, v in form.items()]


def test_cryptography_is_the_tls_extra_not_a_requirement():
    project = tomllib.loads(Path(ROOT, "pyproject.toml").read_text())["project"]
    assert [d for d in project["dependencies"] if "cryptography" in d] == []
    extras = project["optional-dependencies"]
    assert [re.split(r"[<>=!~ ;]", d)[0] for d in extras["tls"]] == ["cryptography"]
    assert "minibroker[tls]" in extras["test"]  # the suite makes certificates


# -- in this process ----------------------------------------------------------------------------


@pytest.mark.parametrize("form", ["pem", "encrypted-pkcs8", "encrypted-traditional", "inline",
                                  "inline-encrypted"])
@pytest.mark.parametrize("trust", ["file", "inline"])
def test_pem_stores_serve_mutual_tls_without_cryptography(certs, no_cryptography, form, trust):
    trusted = (f"ssl.truststore.location={certs['ca']}" if trust == "file"
               else f"ssl.truststore.certificates={Path(certs['ca']).read_text()}")
    config = load_config(None, ["listeners=SSL://127.0.0.1:0", "ssl.client.auth=required", trusted,
                                *_overrides(certs["forms"][form])], {})
    tls = listener_tls(config)["SSL"]
    side = _handshake(tls.context, _client_context(certs, with_cert=True))
    assert certificate_subject(side.getpeercert(binary_form=True)) == CLIENT_DN
    assert certificate_subject(tls.certificate) == "CN=localhost,OU=broker,O=minibroker"


UNSET = "the private key is encrypted and ssl.key.password is not set"


@pytest.mark.parametrize("form, setting, message", [
    ("encrypted-pkcs8", {"ssl.key.password": "wrong"},
     "cannot decrypt the private key (wrong ssl.key.password?)"),
    ("encrypted-traditional", {"ssl.key.password": None}, UNSET),
    ("inline-encrypted", {"ssl.key.password": None}, UNSET),
    ("pem", {}, "the private key does not match the certificate"),
])
def test_a_pem_key_store_that_cannot_load_says_why(certs, tmp_path, no_cryptography, form, setting, message):
    values = {**certs["forms"][form], **setting}
    if form == "pem":  # another (encrypted) key in front of this certificate
        mixed = tmp_path / "mixed.pem"
        other_key = Path(certs["other"]).read_text().split("-----BEGIN CERTIFICATE")[0]
        mixed.write_text(other_key + Path(certs["broker_cert"]).read_text())
        values.update({"ssl.keystore.location": str(mixed), "ssl.key.password": KEY_PASSWORD})
    config = load_config(None, ["listeners=SSL://127.0.0.1:0",
                                *_overrides({k: v for k, v in values.items() if v is not None})], {})
    with pytest.raises(TlsConfigError) as info:
        listener_tls(config)
    assert message in str(info.value)
    assert str(info.value).startswith("listener SSL (SSL): ")


def test_a_reconfigured_key_store_is_checked_without_cryptography(certs, no_cryptography):
    """Kafka's rule for a key store changed at run time, on names read without cryptography: the
    subject stays, and no subject alternative name goes (narrow lacks b.example)."""
    store = "listener.name.ssl.ssl.keystore.location"
    config = load_config(None, ["listeners=SSL://127.0.0.1:0", f"ssl.keystore.location={certs['wide']}",
                                f"ssl.key.password={KEY_PASSWORD}"], {})
    current = listener_tls(config)
    config.set_dynamic(store, certs["other"])
    with pytest.raises(TlsConfigError, match=r"DistinguishedName does not match: existing=\{DN=CN=a.example"):
        reload_listener_tls(config, current)
    config.set_dynamic(store, certs["narrow"])
    with pytest.raises(TlsConfigError, match="SubjectAltNames do not match: the new certificate lacks "
                                             "DNS:b.example "):
        reload_listener_tls(config, current)
    config.set_dynamic(store, certs["wide"])  # the same certificate, read again
    assert reload_listener_tls(config, current)["SSL"].certificate == current["SSL"].certificate


@pytest.mark.parametrize("overrides, named", [
    (["ssl.keystore.type=PKCS12", "ssl.keystore.location={broker_p12}", "ssl.keystore.password=changeit"],
     "ssl.keystore.location (from --override) {broker_p12} is a PKCS12 store"),
    (["ssl.keystore.location={broker_keystore}", "ssl.truststore.type=PKCS12",
      "ssl.truststore.location={truststore_p12}"],
     "ssl.truststore.location (from --override) {truststore_p12} is a PKCS12 store"),
])
def test_a_pkcs12_store_without_cryptography_names_the_extra(certs, no_cryptography, overrides, named):
    config = load_config(None, ["listeners=SSL://127.0.0.1:0", *(o.format(**certs) for o in overrides)], {})
    with pytest.raises(TlsConfigError) as info:
        listener_tls(config)
    message = str(info.value)
    assert named.format(**certs) in message and TLS_EXTRA in message
    assert TLS_EXTRA == "pip install 'minibroker[tls]'" and "\n" not in message


def test_a_tls_fixture_broker_without_cryptography_names_the_extra(no_cryptography):
    """The pytest fixtures' SSL and SASL_SSL brokers make their certificates (docs/testing.md)."""
    with pytest.raises(ImportError, match=r"making certificates needs the cryptography package: "
                                          r"pip install 'minibroker\[tls\]'"):
        BrokerRunner(security_protocol="SSL")


def test_client_properties_without_cryptography(certs, tmp_path, no_cryptography):
    """The tools' --command-config: PEM stores, an encrypted key included, need no cryptography; a
    PKCS12 one names the extra; an encrypted key without ssl.key.password is refused, never prompted."""
    encrypted = certs["forms"]["encrypted-pkcs8"]["ssl.keystore.location"]
    base = {"security.protocol": "SSL", "ssl.truststore.location": certs["ca"]}
    context = client_security_from_properties({**base, "ssl.keystore.location": encrypted,
                                               "ssl.key.password": KEY_PASSWORD}).ssl_context()
    assert len(context.get_ca_certs()) == 1
    with pytest.raises(ClientConfigError, match=UNSET):
        client_security_from_properties({**base, "ssl.keystore.location": encrypted}).ssl_context()
    with pytest.raises(ClientConfigError, match=r"is a PKCS12 store, .*pip install 'minibroker\[tls\]'"):
        client_security_from_properties({**base, "ssl.keystore.type": "PKCS12",
                                         "ssl.keystore.location": certs["client_p12"],
                                         "ssl.keystore.password": "changeit"}, "c.properties").ssl_context()


# -- `minibroker serve`, `certs` and the tools in a subprocess ---------------------------------------


def _kafka_python_round_trip(runner: BrokerRunner, topic: str) -> list[bytes]:
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition

    settings = runner.client_config("kafka-python")
    producer = KafkaProducer(**settings)
    try:
        for i in range(3):
            producer.send(topic, b"k%d" % i).get(30)
    finally:
        producer.close(5)
    consumer = KafkaConsumer(enable_auto_commit=False, **settings)
    try:
        tp = TopicPartition(topic, 0)
        consumer.assign([tp])
        consumer.seek_to_beginning(tp)
        got: list[bytes] = []
        deadline = time.monotonic() + 20
        while len(got) < 3 and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=200).values():
                got.extend(r.value for r in records)
        return got
    finally:
        consumer.close()


def _confluent_round_trip(runner: BrokerRunner, topic: str) -> list[bytes]:
    from confluent_kafka import Consumer, Producer, TopicPartition

    settings = runner.client_config("confluent-kafka")
    producer = Producer(settings)
    for i in range(3):
        producer.produce(topic, b"k%d" % i, partition=0)
    assert producer.flush(30) == 0
    consumer = Consumer({**settings, "group.id": f"g-{topic}", "enable.auto.commit": False})
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        got: list[bytes] = []
        deadline = time.monotonic() + 20
        while len(got) < 3 and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                got.append(msg.value())
        return got
    finally:
        consumer.close()


@pytest.mark.parametrize("protocol, client_auth, form, client", [
    ("SASL_SSL", "none", "encrypted-pkcs8", "kafka-python"),
    ("SASL_SSL", "none", "pem", "confluent-kafka"),
    ("SSL", "required", "inline-encrypted", "kafka-python"),
])
def test_minibroker_serve_without_cryptography_serves_real_clients(blocked_env, monkeypatch, tmp_path,
                                                                   topic_name, protocol, client_auth, form,
                                                                   client):
    env, marker = blocked_env
    monkeypatch.setenv("PYTHONPATH", env["PYTHONPATH"])  # the broker's process inherits it
    runner = BrokerRunner(mode="process", security_protocol=protocol, sasl_mechanism="SCRAM-SHA-256",
                          ssl_client_auth=client_auth)
    try:
        forms = _key_store_forms(runner.security.certs, tmp_path)
        runner.overrides.pop("ssl.keystore.location")
        runner.overrides.update(forms[form])
        runner.start()
        runner.create_topic(topic_name)
        round_trip = _kafka_python_round_trip if client == "kafka-python" else _confluent_round_trip
        assert round_trip(runner, topic_name) == [b"k0", b"k1", b"k2"]
    finally:
        runner.cleanup()
    assert not marker.exists(), "the broker tried to import cryptography"


def test_serve_with_a_pkcs12_key_store_stops_in_one_line(blocked_env, certs, tmp_path):
    env, _ = blocked_env
    data = tmp_path / "data"
    out = subprocess.run([sys.executable, "-m", "minibroker", "serve",
                          "--override", "listeners=SSL://127.0.0.1:0", "--override", f"log.dirs={data}",
                          "--override", "ssl.keystore.type=PKCS12",
                          "--override", f"ssl.keystore.location={certs['broker_p12']}",
                          "--override", "ssl.keystore.password=changeit"],
                         capture_output=True, text=True, env=env, timeout=60)
    assert out.returncode == 1  # as any other unusable TLS setting (tests/test_tls.py)
    errors = [line for line in out.stderr.splitlines() if line.startswith("minibroker:")]
    assert errors == [f"minibroker: listener SSL (SSL): ssl.keystore.location (from --override) "
                      f"{certs['broker_p12']} is a PKCS12 store, which needs the cryptography package: "
                      "pip install 'minibroker[tls]' (or give a PEM store)"]
    assert "Traceback" not in out.stderr
    assert not data.exists()  # stopped before the log dirs


def test_certs_without_cryptography_names_the_extra(blocked_env, tmp_path):
    env, _ = blocked_env
    target = tmp_path / "certs"
    out = subprocess.run([sys.executable, "-m", "minibroker", "certs", "--dir", str(target)],
                         capture_output=True, text=True, env=env, timeout=60)
    assert (out.returncode, out.stdout) == (1, "")
    assert out.stderr == ("minibroker certs: making certificates needs the cryptography package: "
                          "pip install 'minibroker[tls]'\n")
    assert not target.exists()


def test_a_tool_without_cryptography_on_an_ssl_broker(blocked_env, certs, tmp_path, topic_name):
    """`minibroker topics` through --command-config: a PEM key store with an encrypted key connects to a
    mutual TLS broker; a PKCS12 trust store stops it with one line naming the extra."""
    env, _ = blocked_env
    runner = BrokerRunner(security_protocol="SSL", ssl_client_auth="required")
    try:
        runner.start()
        runner.create_topic(topic_name)
        client = runner.security.certs
        client_pem = _key_store_with_encrypted_key(client["client_key"], client["client_cert"],
                                                   tmp_path / "client-encrypted.pem")
        pem_props = tmp_path / "pem.properties"
        pem_props.write_text(f"security.protocol=SSL\nssl.truststore.location={client['ca']}\n"
                             f"ssl.keystore.location={client_pem}\nssl.key.password={KEY_PASSWORD}\n")
        p12_props = tmp_path / "p12.properties"
        p12_props.write_text(f"security.protocol=SSL\nssl.truststore.type=PKCS12\n"
                             f"ssl.truststore.location={client['truststore_p12']}\n"
                             "ssl.truststore.password=changeit\n")

        def topics(props: Path) -> subprocess.CompletedProcess:
            return subprocess.run([sys.executable, "-m", "minibroker", "topics", "list", "--bootstrap-server",
                                   runner.bootstrap_servers, "--command-config", str(props)],
                                  capture_output=True, text=True, env=env, timeout=60)

        listed = topics(pem_props)
        assert listed.returncode == 0, listed.stderr
        assert topic_name in listed.stdout.split()
        refused = topics(p12_props)
        assert refused.returncode == 2 and refused.stdout == ""
        assert refused.stderr == (f"minibroker topics: {p12_props}: ssl.truststore.location "
                                  f"{client['truststore_p12']} is a PKCS12 store, which needs the "
                                  f"cryptography package: {TLS_EXTRA} (or give a PEM store)\n")
    finally:
        runner.cleanup()
