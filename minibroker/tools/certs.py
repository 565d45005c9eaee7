"""``minibroker certs``: a throwaway certificate authority, a broker certificate and a client
certificate for trying TLS listeners (SSL, SASL_SSL) and mutual TLS, as PEM files in one directory.

Made with the ``cryptography`` package (ECDSA P-256 keys, SHA-256 signatures), which the ``tls``
extra installs (``pip install 'minibroker[tls]'``); without it the command says so in one line. The
broker certificate names localhost, 127.0.0.1, ::1 and every ``--host`` as subject alternative names;
the client certificate's subject is ``CN=<--client-cn>,OU=test,O=minibroker``, which a broker with
``ssl.client.auth=required`` maps to the principal ``User:CN=client,OU=test,O=minibroker`` (or what
``ssl.principal.mapping.rules`` makes of it). Keys are written unencrypted, readable by the owner
only: these are test certificates, not a PKI.

Files (``generate_test_certs`` returns their paths by these names):

- ``ca.pem`` (ca), ``ca.key`` (ca_key): the authority; clients trust ``ca.pem``, and the broker trusts it for
  client certificates;
- ``broker.pem`` (broker_keystore): Kafka's PEM key store (the private key, then the chain) for
  ``ssl.keystore.location``; also ``broker.crt`` and ``broker.key`` apart;
- ``client.crt``, ``client.key`` (client_cert, client_key) and ``client.pem`` (client_pem: both in one);
- ``broker.p12``, ``client.p12`` and ``truststore.p12``: the same as PKCS12 stores, password
  ``--password`` (default ``changeit``), for ``ssl.keystore.type=PKCS12`` and Java clients.

Also callable from Python (tests, the pytest plugin): ``generate_test_certs(directory, hosts=...)``,
which raises ImportError naming the extra when the package is missing.
"""

from __future__ import annotations

import argparse
import datetime
import ipaddress
import os
import sys
from collections.abc import Iterable

DEFAULT_HOSTS = ("localhost", "127.0.0.1", "::1")
DEFAULT_PASSWORD = "changeit"
FILES = ("ca.pem", "ca.key", "broker.pem", "broker.crt", "broker.key", "client.crt", "client.key",
         "client.pem", "broker.p12", "client.p12", "truststore.p12")


def _require_cryptography() -> None:
    """Raise ImportError naming the extra to install when the cryptography package is missing."""
    from minibroker.security.tls import TLS_EXTRA

    try:
        from cryptography import x509  # noqa: F401
    except ImportError:
        raise ImportError(f"making certificates needs the cryptography package: {TLS_EXTRA}") from None


def _name(common_name: str, unit: str):
    from cryptography import x509
    from cryptography.x509.oid import NameOID

    # encoded O, OU, CN: Java (and so Kafka's principal) prints it CN=...,OU=...,O=...
    return x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "minibroker"),
                      x509.NameAttribute(NameOID.ORGANIZATIONAL_UNIT_NAME, unit),
                      x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _alt_names(hosts: Iterable[str]):
    from cryptography import x509

    names, seen = [], set()
    for host in hosts:
        host = host.strip().strip("[]")
        if not host or host in seen:
            continue
        seen.add(host)
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            names.append(x509.DNSName(host))
    return names


def _certificate(subject, public_key, issuer, issuer_key, *, ca: bool, days: int, alt_names=(),
                 usage=None):
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes

    now = datetime.datetime.now(datetime.UTC)
    builder = (x509.CertificateBuilder().subject_name(subject).issuer_name(issuer).public_key(public_key)
               .serial_number(x509.random_serial_number())
               .not_valid_before(now - datetime.timedelta(hours=1))
               .not_valid_after(now + datetime.timedelta(days=days))
               .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
               .add_extension(x509.KeyUsage(digital_signature=not ca, content_commitment=False,
                                            key_encipherment=False, data_encipherment=False,
                                            key_agreement=False, key_cert_sign=ca, crl_sign=ca,
                                            encipher_only=False, decipher_only=False), critical=True)
               .add_extension(x509.SubjectKeyIdentifier.from_public_key(public_key), critical=False)
               .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(issuer_key.public_key()),
                              critical=False))
    if alt_names:
        builder = builder.add_extension(x509.SubjectAlternativeName(list(alt_names)), critical=False)
    if usage is not None:
        builder = builder.add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
    return builder.sign(issuer_key, hashes.SHA256())


def _write(path: str, data: bytes, private: bool = False) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600 if private else 0o644)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    if private:
        os.chmod(path, 0o600)  # the file may have existed with wider permissions


def generate_test_certs(directory: str, hosts: Iterable[str] = (), *, client_cn: str = "client",
                        days: int = 365, password: str = DEFAULT_PASSWORD) -> dict[str, str]:
    """Write a CA, a broker and a client certificate into ``directory`` (created if missing) and return
    the paths by name: ca, ca_key, broker_keystore, broker_cert, broker_key, client_cert, client_key,
    client_pem, broker_p12, client_p12, truststore_p12 (and password: the PKCS12 password). Raises
    ImportError without the cryptography package."""
    _require_cryptography()
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.hazmat.primitives.serialization import pkcs12
    from cryptography.x509.oid import ExtendedKeyUsageOID

    os.makedirs(directory, exist_ok=True)
    pem = serialization.Encoding.PEM
    pkcs8 = serialization.PrivateFormat.PKCS8
    plain = serialization.NoEncryption()

    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = _name("minibroker test CA", "test")
    ca = _certificate(ca_name, ca_key.public_key(), ca_name, ca_key, ca=True, days=days)
    extra_hosts = [h for h in hosts if h]
    broker_key = ec.generate_private_key(ec.SECP256R1())
    broker_cn = extra_hosts[0] if extra_hosts else "localhost"
    broker = _certificate(_name(broker_cn, "broker"), broker_key.public_key(), ca_name, ca_key, ca=False,
                          days=days, alt_names=_alt_names([*DEFAULT_HOSTS, *extra_hosts]),
                          usage=ExtendedKeyUsageOID.SERVER_AUTH)
    client_key = ec.generate_private_key(ec.SECP256R1())
    client = _certificate(_name(client_cn, "test"), client_key.public_key(), ca_name, ca_key, ca=False,
                          days=days, usage=ExtendedKeyUsageOID.CLIENT_AUTH)

    paths = {name: os.path.join(directory, file) for name, file in (
        ("ca", "ca.pem"), ("ca_key", "ca.key"), ("broker_keystore", "broker.pem"),
        ("broker_cert", "broker.crt"), ("broker_key", "broker.key"), ("client_cert", "client.crt"),
        ("client_key", "client.key"), ("client_pem", "client.pem"), ("broker_p12", "broker.p12"),
        ("client_p12", "client.p12"), ("truststore_p12", "truststore.p12"))}
    ca_pem = ca.public_bytes(pem)
    broker_key_pem = broker_key.private_bytes(pem, pkcs8, plain)
    client_key_pem = client_key.private_bytes(pem, pkcs8, plain)
    _write(paths["ca"], ca_pem)
    _write(paths["ca_key"], ca_key.private_bytes(pem, pkcs8, plain), private=True)
    _write(paths["broker_keystore"], broker_key_pem + broker.public_bytes(pem) + ca_pem, private=True)
    _write(paths["broker_cert"], broker.public_bytes(pem) + ca_pem)
    _write(paths["broker_key"], broker_key_pem, private=True)
    _write(paths["client_cert"], client.public_bytes(pem))
    _write(paths["client_key"], client_key_pem, private=True)
    _write(paths["client_pem"], client_key_pem + client.public_bytes(pem), private=True)
    encryption = serialization.BestAvailableEncryption(password.encode())
    _write(paths["broker_p12"], pkcs12.serialize_key_and_certificates(
        b"broker", broker_key, broker, [ca], encryption), private=True)
    _write(paths["client_p12"], pkcs12.serialize_key_and_certificates(
        client_cn.encode(), client_key, client, [ca], encryption), private=True)
    _write(paths["truststore_p12"],
           pkcs12.serialize_key_and_certificates(b"ca", None, None, [ca], encryption))
    paths["password"] = password
    return paths


def settings_text(paths: dict[str, str], bootstrap: str = "localhost:9093") -> str:
    """What to put in the broker's config and in each client's, for these files."""
    ca, cert, key, pem = paths["ca"], paths["client_cert"], paths["client_key"], paths["client_pem"]
    return f"""\
# broker (server.properties, or --override each line); add ssl.client.auth=required for mutual TLS
listeners=PLAINTEXT://localhost:9092,SSL://localhost:9093
ssl.keystore.type=PEM
ssl.keystore.location={paths["broker_keystore"]}
ssl.truststore.type=PEM
ssl.truststore.location={ca}
# or as PKCS12 stores:
# ssl.keystore.type=PKCS12
# ssl.keystore.location={paths["broker_p12"]}
# ssl.keystore.password={paths["password"]}

# kafka-python
KafkaProducer(bootstrap_servers="{bootstrap}", security_protocol="SSL", ssl_cafile="{ca}",
              ssl_certfile="{cert}", ssl_keyfile="{key}")  # cert and key: for mutual TLS only

# aiokafka
from aiokafka.helpers import create_ssl_context
AIOKafkaProducer(bootstrap_servers="{bootstrap}", security_protocol="SSL",
                 ssl_context=create_ssl_context(cafile="{ca}", certfile="{cert}", keyfile="{key}"))

# confluent-kafka (librdkafka)
{{"bootstrap.servers": "{bootstrap}", "security.protocol": "SSL", "ssl.ca.location": "{ca}",
 "ssl.certificate.location": "{cert}", "ssl.key.location": "{key}"}}

# kcat
kcat -b {bootstrap} -X security.protocol=ssl -X ssl.ca.location={ca} \\
     -X ssl.certificate.location={cert} -X ssl.key.location={key} -L

# Java clients (client.properties)
security.protocol=SSL
ssl.truststore.type=PEM
ssl.truststore.location={ca}
ssl.keystore.type=PEM
ssl.keystore.location={pem}
"""


def add_parser(sub) -> argparse.ArgumentParser:
    p = sub.add_parser(
        "certs", help="write a throwaway CA, broker and client certificate for TLS listeners",
        description="Write a throwaway certificate authority, a broker certificate (localhost, 127.0.0.1, "
                    "::1 and each --host) and a client certificate for mutual TLS, as PEM files (and PKCS12 "
                    "stores) in --dir, then print the broker's and each client's settings. For tests and "
                    "local work only: the keys are not encrypted.")
    p.add_argument("--dir", default="minibroker-certs",
                   help="where to write the files (default: %(default)s)")
    p.add_argument("--host", action="append", default=[], metavar="NAME|IP",
                   help="another name or address for the broker certificate (repeatable)")
    p.add_argument("--client-cn", default="client",
                   help="the client certificate's common name (default: %(default)s)")
    p.add_argument("--days", type=int, default=365, help="validity in days (default: %(default)s)")
    p.add_argument("--password", default=DEFAULT_PASSWORD,
                   help="password of the PKCS12 stores (default: %(default)s)")
    p.add_argument("--force", action="store_true", help="replace certificates already in --dir")
    p.set_defaults(func=run)
    return p


def run(args) -> int:
    try:
        _require_cryptography()
    except ImportError as e:
        print(f"minibroker certs: {e}", file=sys.stderr)
        return 1
    existing = [f for f in FILES if os.path.exists(os.path.join(args.dir, f))]
    if existing and not args.force:
        print(f"minibroker certs: {args.dir} already holds {', '.join(existing)}; use --force to replace "
              "them (brokers and clients using them will need the new ones)", file=sys.stderr)
        return 1
    if args.days < 1:
        print("minibroker certs: --days must be at least 1", file=sys.stderr)
        return 2
    try:
        paths = generate_test_certs(args.dir, args.host, client_cn=args.client_cn, days=args.days,
                                    password=args.password)
    except OSError as e:
        print(f"minibroker certs: cannot write to {args.dir}: {e.strerror or e}", file=sys.stderr)
        return 1
    absolute = {k: (os.path.abspath(v) if k != "password" else v) for k, v in paths.items()}
    print(f"wrote {', '.join(FILES)} to {os.path.abspath(args.dir)}")
    print()
    print(settings_text(absolute), end="")
    return 0
