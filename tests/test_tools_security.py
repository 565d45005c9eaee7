"""minibroker's command-line tools against TLS and SASL listeners through ``--command-config`` (Kafka's
client properties file): topics, produce, consume, groups, transactions and healthcheck on a SASL_SSL
(SCRAM-SHA-256) broker, on an SSL broker that requires client certificates (mutual TLS), and on a
SASL_PLAINTEXT OAUTHBEARER (unsecured token) broker; refused credentials fail at once with one line naming
the mechanism and the user; plus the properties parser and the SASL client mechanisms as units."""

from __future__ import annotations

import base64
import io
import json
import ssl
import sys

import pytest

from minibroker.cli import main
from minibroker.security.sasl.scram import MECHANISMS, ScramServer, credential_from_password
from minibroker.testing import BrokerRunner
from minibroker.tools.client_config import (
    ClientConfigError,
    ClientSecurity,
    client_security_from_properties,
    read_client_config,
)
from minibroker.tools.sasl_client import OAuthBearerClient, ScramClient, unsecured_token

SCRAM_JAAS = 'org.apache.kafka.common.security.scram.ScramLoginModule required username="{}" password="{}";'


class CliResult:
    def __init__(self, code: int, out: bytes, err: str):
        self.code, self.out, self.err = code, out, err

    @property
    def lines(self) -> list[str]:
        return self.out.decode().splitlines()


@pytest.fixture
def cli(monkeypatch, capsys):
    """``main(argv)`` in-process with bytes on stdin: exit code, stdout bytes, stderr text."""

    def run(*argv: str, stdin: bytes = b"") -> CliResult:
        stdout = io.BytesIO()
        monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(stdin)))
        monkeypatch.setattr(sys, "stdout", io.TextIOWrapper(stdout, write_through=True))
        capsys.readouterr()
        code = main(list(argv))
        sys.stdout.flush()
        return CliResult(code, stdout.getvalue(), capsys.readouterr().err)

    return run


def _write(tmp_path_factory, name: str, text: str) -> str:
    path = tmp_path_factory.mktemp("props") / name
    path.write_text(text)
    return str(path)


@pytest.fixture(scope="module")
def sasl_ssl():
    with BrokerRunner(security_protocol="SASL_SSL", sasl_mechanism="SCRAM-SHA-256") as broker:
        yield broker


@pytest.fixture(scope="module")
def mtls():
    with BrokerRunner(security_protocol="SSL", ssl_client_auth="required") as broker:
        yield broker


def _scram_props(broker: BrokerRunner, password: str = "admin-secret") -> str:
    return (f"security.protocol=SASL_SSL\nsasl.mechanism=SCRAM-SHA-256\n"
            f"sasl.jaas.config={SCRAM_JAAS.format('admin', password)}\n"
            f"ssl.truststore.type=PEM\nssl.truststore.location={broker.security.certs['ca']}\n")


@pytest.fixture(scope="module")
def scram_config(sasl_ssl, tmp_path_factory) -> str:
    return _write(tmp_path_factory, "admin.properties", _scram_props(sasl_ssl))


@pytest.fixture(scope="module")
def wrong_password_config(sasl_ssl, tmp_path_factory) -> str:
    return _write(tmp_path_factory, "wrong.properties", _scram_props(sasl_ssl, "not-the-password"))


@pytest.fixture(scope="module")
def mtls_config(mtls, tmp_path_factory) -> str:
    """The PKCS12 stores `minibroker certs` writes (password changeit), as a Java client would use."""
    certs = mtls.security.certs
    return _write(tmp_path_factory, "mtls.properties", (
        "security.protocol=SSL\n"
        f"ssl.truststore.type=PKCS12\nssl.truststore.location={certs['truststore_p12']}\n"
        "ssl.truststore.password=changeit\n"
        f"ssl.keystore.type=PKCS12\nssl.keystore.location={certs['client_p12']}\n"
        "ssl.keystore.password=changeit\n"))


def _args(broker: BrokerRunner, config: str) -> list[str]:
    return ["--bootstrap-server", broker.bootstrap_servers, "--command-config", config, "--timeout", "10"]


def _round_trip(cli, broker: BrokerRunner, config: str, topic: str) -> None:
    """topics create/list/describe, produce, consume (as a group member), groups list/describe,
    transactions list and healthcheck, all through ``config``."""
    args = _args(broker, config)
    r = cli("topics", "create", "--topic", topic, "--partitions", "2", *args)
    assert (r.code, r.err) == (0, "")
    r = cli("topics", "list", *args)
    assert r.code == 0 and topic in r.lines, r.err
    r = cli("topics", "describe", "--topic", topic, *args)
    assert r.code == 0 and "PartitionCount: 2" in r.out.decode(), r.err
    r = cli("produce", "--topic", topic, "--key-separator", ":", "--partition", "1", *args,
            stdin=b"k1:one\nk2:two\nk3:three\n")
    assert r.code == 0, r.err
    r = cli("consume", "--topic", topic, "--group", f"{topic}-g", "--from-beginning", "--max-messages", "3",
            "-f", r"%p %o %k=%s\n", *args)
    assert r.code == 0, r.err
    assert r.lines == ["1 0 k1=one", "1 1 k2=two", "1 2 k3=three"]
    r = cli("groups", "list", *args)
    assert r.code == 0 and f"{topic}-g" in r.lines, r.err
    r = cli("groups", "describe", "--group", f"{topic}-g", *args)
    assert r.code == 0, r.err
    row = next(line.split() for line in r.lines if line.startswith(f"{topic}-g ") and f" {topic} 1 " in line)
    assert row[3:6] == ["3", "3", "0"]  # current offset, log end offset, lag
    r = cli("transactions", "list", *args)
    assert r.code == 0 and r.lines[0].split() == ["TransactionalId", "Coordinator", "ProducerId",
                                                   "TransactionState"], r.err
    r = cli("healthcheck", *args)
    assert r.code == 0 and r.out.decode().startswith("healthy"), r.err


def test_tools_over_sasl_ssl_scram(cli, sasl_ssl, scram_config, topic_name):
    _round_trip(cli, sasl_ssl, scram_config, topic_name)


def test_tools_over_mutual_tls_with_pkcs12_stores(cli, mtls, mtls_config, topic_name):
    _round_trip(cli, mtls, mtls_config, topic_name)


def test_pem_key_store_and_unchecked_host_name(cli, mtls, tmp_path):
    """A PEM key store (key and chain in one file), and ssl.endpoint.identification.algorithm= empty,
    under which the broker is reached by an address its certificate does not name."""
    certs = mtls.security.certs
    config = tmp_path / "pem.properties"
    config.write_text(f"security.protocol=SSL\nssl.truststore.location={certs['ca']}\n"
                      f"ssl.keystore.type=PEM\nssl.keystore.location={certs['client_pem']}\n")
    assert cli("healthcheck", *_args(mtls, str(config))).code == 0
    # "127.1" is 127.0.0.1 to the resolver but, not being a dotted quad, a host name to TLS that the
    # certificate (localhost, 127.0.0.1, ::1) does not name
    unnamed = ["--bootstrap-server", f"127.1:{mtls.port}", "--command-config"]
    r = cli("healthcheck", *unnamed, str(config))
    assert r.code == 1 and "unhealthy: TLS handshake with 127.1" in r.err and "not trusted" in r.err, r.err
    assert "Hostname mismatch" in r.err or "IP address mismatch" in r.err, r.err
    config.write_text(config.read_text() + "ssl.endpoint.identification.algorithm=\n")
    r = cli("healthcheck", *unnamed, str(config))
    assert r.code == 0, r.err


@pytest.mark.parametrize("tool", [
    ("topics", "list"), ("produce", "--topic", "t"), ("consume", "--topic", "t"), ("groups", "list"),
    ("transactions", "list"), ("healthcheck",)])
def test_wrong_password_fails_at_once_with_one_line(cli, sasl_ssl, wrong_password_config, tool):
    r = cli(*tool, *_args(sasl_ssl, wrong_password_config), stdin=b"x\n")
    assert r.code == 1
    message = [line for line in r.err.splitlines() if "Processed a total" not in line]
    assert len(message) == 1, r.err
    assert "SASL authentication failed (SCRAM-SHA-256 as user 'admin')" in message[0]
    assert sasl_ssl.bootstrap_servers in message[0] and "invalid credentials" in message[0]
    assert "Traceback" not in r.err


def test_tls_failures_are_one_line(cli, mtls, sasl_ssl, tmp_path):
    no_client_cert = tmp_path / "no-cert.properties"
    no_client_cert.write_text(f"security.protocol=SSL\nssl.truststore.location={mtls.security.certs['ca']}\n")
    r = cli("topics", "list", *_args(mtls, str(no_client_cert)))
    assert r.code == 1 and r.err.count("\n") == 1, r.err
    assert f"minibroker topics: TLS connection to {mtls.bootstrap_servers} failed" in r.err or \
        f"minibroker topics: TLS handshake with {mtls.bootstrap_servers} failed" in r.err
    system_trust = tmp_path / "system-trust.properties"  # the test CA is not among the system's
    system_trust.write_text("security.protocol=SSL\n")
    r = cli("topics", "list", *_args(sasl_ssl, str(system_trust)))
    assert r.code == 1 and "the broker's certificate is not trusted" in r.err, r.err
    r = cli("topics", "list", "--bootstrap-server", sasl_ssl.bootstrap_servers, "--timeout", "5")
    assert r.code == 1 and "--command-config" in r.err, r.err  # plaintext to a TLS listener: a hint


def test_unusable_command_config_is_a_usage_error(cli, sasl_ssl, tmp_path):
    bad = tmp_path / "bad.properties"
    bad.write_text("security.protocol=SASL_SSL\nsasl.mechanism=GSSAPI\n")
    for tool in (("topics", "list"), ("groups", "list"), ("consume", "--topic", "t")):
        r = cli(*tool, *_args(sasl_ssl, str(bad)))
        assert r.code == 2 and "sasl.mechanism=GSSAPI" in r.err and str(bad) in r.err, r.err
    r = cli("healthcheck", *_args(sasl_ssl, str(tmp_path / "missing.properties")))
    assert r.code == 1 and r.err.startswith("unhealthy: cannot read --command-config"), r.err


def test_command_config_from_the_environment(cli, sasl_ssl, scram_config, monkeypatch):
    monkeypatch.setenv("MINIBROKER_COMMAND_CONFIG", scram_config)
    r = cli("healthcheck", "--bootstrap-server", sasl_ssl.bootstrap_servers)
    assert r.code == 0, r.err


def test_oauthbearer_unsecured_token(cli, tmp_path):
    with BrokerRunner(security_protocol="SASL_PLAINTEXT", sasl_mechanism="OAUTHBEARER") as broker:
        config = tmp_path / "oauth.properties"
        config.write_text("security.protocol=SASL_PLAINTEXT\nsasl.mechanism=OAUTHBEARER\nsasl.jaas.config="
                          "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required "
                          'unsecuredLoginStringClaim_sub="alice";\n')
        args = _args(broker, str(config))
        r = cli("topics", "create", "--topic", "oauth", *args)
        assert r.code == 0, r.err
        r = cli("produce", "--topic", "oauth", *args, stdin=b"hello\n")
        assert r.code == 0, r.err
        r = cli("consume", "--topic", "oauth", "--from-beginning", "--max-messages", "1", *args)
        assert (r.code, r.lines) == (0, ["hello"]), r.err
        config.write_text(config.read_text().replace("alice", "alice\" unsecuredLoginLifetimeSeconds=\"-10"))
        r = cli("healthcheck", *args)  # an expired token: the broker's JSON challenge, then its refusal
        assert r.code == 1 and "OAUTHBEARER as principal 'alice'" in r.err and "invalid_token" in r.err, r.err


# -- units -----------------------------------------------------------------------------------------


def test_properties_parser(tmp_path):
    path = tmp_path / "client.properties"
    path.write_text("# Kafka client properties\n"
                    "security.protocol = sasl_ssl\n"
                    "sasl.mechanism=SCRAM-SHA-512\n"
                    "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required \\\n"
                    '    username="bob" password="p=s ;s";\n'
                    "ssl.truststore.location=/certs/ca.pem\n"
                    "ssl.endpoint.identification.algorithm=\n"
                    "client.id=ignored\n")
    security = read_client_config(str(path))
    assert (security.protocol, security.mechanism, security.username, security.password) == (
        "SASL_SSL", "SCRAM-SHA-512", "bob", "p=s ;s")
    assert (security.tls, security.sasl, security.check_hostname) == (True, True, False)
    assert (security.truststore_location, security.truststore_type) == ("/certs/ca.pem", None)  # not given
    assert "p=" not in repr(security)  # passwords stay out of reprs
    assert read_client_config(None) == ClientSecurity()
    plain = client_security_from_properties({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
                                             "sasl.jaas.config": SCRAM_JAAS.format("al", "pw")})
    settings = plain.kafka_python_settings()
    assert settings == {"security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": "PLAIN",
                        "sasl_plain_username": "al", "sasl_plain_password": "pw"}
    assert client_security_from_properties({"security.protocol": "SSL"}).check_hostname


@pytest.mark.parametrize(("props", "message"), [
    ({"security.protocol": "TLS"}, "security.protocol=TLS"),
    ({"security.protocol": "SASL_SSL"}, "sasl.mechanism=GSSAPI"),
    ({"security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN"}, "sasl.jaas.config is not set"),
    ({"security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN", "sasl.jaas.config": "x required"},
     "semi-colon"),
    ({"security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN",
      "sasl.jaas.config": "x required username=a;"}, "needs password"),
    ({"security.protocol": "SASL_SSL", "sasl.mechanism": "OAUTHBEARER", "sasl.jaas.config": "x required;"},
     "unsecuredLoginStringClaim_sub"),
    ({"security.protocol": "SSL", "ssl.truststore.type": "JCEKS"}, "ssl.truststore.type=JCEKS"),
    ({"security.protocol": "SSL", "ssl.keystore.key": "k"}, "ssl.keystore.key"),
])
def test_properties_parser_refusals(props, message):
    with pytest.raises(ClientConfigError, match=message):
        client_security_from_properties(props, "f.properties")


def test_ssl_context_from_files(mtls, tmp_path):
    certs = mtls.security.certs
    context = client_security_from_properties({
        "security.protocol": "SSL", "ssl.truststore.location": certs["ca"],
        "ssl.keystore.location": certs["client_pem"]}).ssl_context()
    assert context.check_hostname and context.verify_mode == ssl.CERT_REQUIRED
    assert len(context.get_ca_certs()) == 1
    with pytest.raises(ClientConfigError, match="wrong or missing ssl.keystore.password"):
        client_security_from_properties({"security.protocol": "SSL", "ssl.keystore.type": "PKCS12",
                                         "ssl.keystore.location": certs["client_p12"],
                                         "ssl.keystore.password": "wrong"}).ssl_context()
    with pytest.raises(ClientConfigError, match="cannot read ssl.truststore.location"):
        client_security_from_properties({"security.protocol": "SSL",
                                         "ssl.truststore.location": str(tmp_path / "none.pem")}).ssl_context()


def test_scram_client_rfc7677_test_vector():
    client = ScramClient("SCRAM-SHA-256", "user", "pencil", nonce="rOprNGfwEbeRWgbNEkqO")
    assert client.initial() == b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO"
    final = client.evaluate(b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
                            b"s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096")
    assert final == (b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
                     b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=")
    assert client.evaluate(b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=") is None


@pytest.mark.parametrize("name", sorted(MECHANISMS))
def test_scram_client_against_the_broker_side(name):
    mechanism = MECHANISMS[name]
    credential = credential_from_password(mechanism, "s3cret, with=signs", 4096)
    server = ScramServer(mechanism, lambda user: credential if user == "a,b=c" else None)
    client = ScramClient(name, "a,b=c", "s3cret, with=signs")
    server_final = server.evaluate(client.evaluate(server.evaluate(client.initial())))
    assert server.complete and server.authorization_id == "a,b=c"
    assert client.evaluate(server_final) is None
    from minibroker.tools.sasl_client import SaslClientError

    forged = ScramClient(name, "a,b=c", "s3cret, with=signs")
    forged.evaluate(ScramServer(mechanism, lambda user: credential).evaluate(forged.initial()))
    with pytest.raises(SaslClientError, match="server signature"):
        forged.evaluate(b"v=" + base64.b64encode(bytes(len(mechanism.digest(b"")))))


def test_unsecured_oauthbearer_token():
    options = {"unsecuredLoginStringClaim_sub": "alice", "unsecuredLoginNumberClaim_n": "7",
               "unsecuredLoginListClaim_scope": "|read|write", "unsecuredLoginLifetimeSeconds": "60",
               "unsecuredLoginExtension_traceId": "abc"}
    header, claims, signature = unsecured_token(options, now=1000.0).split(".")
    decode = lambda part: json.loads(base64.urlsafe_b64decode(part + "=" * (-len(part) % 4)))  # noqa: E731
    assert decode(header) == {"alg": "none"} and signature == ""
    assert decode(claims) == {"iat": 1000, "exp": 1060, "sub": "alice", "n": 7, "scope": ["read", "write"]}
    message = OAuthBearerClient(options).initial()
    assert message.startswith(b"n,,\x01auth=Bearer ") and message.endswith(b"\x01traceId=abc\x01\x01")


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-512", "OAUTHBEARER"])
def test_runner_properties_drive_the_tools(cli, tmp_path, topic_name, mechanism):
    """BrokerRunner.client_config("properties") is a working --command-config for each mechanism, and the
    runner's own create_topic goes through the same wire client."""
    with BrokerRunner(security_protocol="SASL_SSL", sasl_mechanism=mechanism) as broker:
        broker.create_topic(topic_name, 2)
        props = broker.client_config("properties", user="alice")
        assert props["security.protocol"] == "SASL_SSL" and props["sasl.mechanism"] == mechanism
        config = tmp_path / "client.properties"
        config.write_text("".join(f"{k}={v}\n" for k, v in props.items() if k != "bootstrap.servers"))
        r = cli("topics", "describe", "--topic", topic_name, *_args(broker, str(config)))
        assert r.code == 0 and "PartitionCount: 2" in r.out.decode(), r.err
