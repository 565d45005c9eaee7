"""Kafka client properties files (``--command-config FILE``) for every minibroker tool that talks to a broker.

The one reader of that file: ``read_client_config(path)`` gives a ``ClientSecurity``, from which
minibroker's own ``WireClient`` takes an ``ssl.SSLContext`` and its SASL credentials, and the tools built on
kafka-python take ``kafka_python_settings()``. The keys are Kafka's client keys:

- ``security.protocol``: PLAINTEXT (default), SSL, SASL_PLAINTEXT or SASL_SSL;
- ``ssl.truststore.location`` with ``ssl.truststore.type`` PEM, JKS (``ssl.truststore.password``, optional
  as in Kafka) or PKCS12 (``ssl.truststore.password``); or ``ssl.truststore.certificates`` (PEM text);
  without any, the system's trusted CAs;
- ``ssl.keystore.location`` with ``ssl.keystore.type`` PEM (the private key and the certificate chain in
  one file, ``ssl.key.password`` if the key is encrypted), JKS (``ssl.keystore.password``, and
  ``ssl.key.password`` when the key's differs) or PKCS12 (``ssl.keystore.password``): the client
  certificate for mutual TLS; PKCS12 stores are read with the cryptography package (the ``tls`` extra),
  PEM and JKS ones without it. A store type left unset is PEM, or JKS (Kafka's default) when the file is
  a JKS store; a PKCS12 file declared JKS is read as PKCS12, as Java does;
- ``ssl.endpoint.identification.algorithm``: ``https`` (Kafka's default) checks the broker certificate's
  host name; empty turns that check off (the certificate chain is still verified);
- ``sasl.mechanism``: PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 or OAUTHBEARER (Kafka's default, GSSAPI, is
  refused); ``sasl.jaas.config``: ``PlainLoginModule`` / ``ScramLoginModule`` with ``username`` and
  ``password``, or ``OAuthBearerLoginModule`` with Kafka's unsecured-token options
  (``unsecuredLoginStringClaim_sub="alice"`` and the other ``unsecuredLogin*`` options), which make an
  unsigned token (for brokers with Kafka's unsecured validator, i.e. tests).

Other keys (``client.id``, ``request.timeout.ms``, ...) are accepted and ignored, as far as security goes.
Errors are ``ClientConfigError`` with a message naming the file and the key.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # ssl is imported by the first TLS connection (0.03-0.09 s of every tool's start)
    import ssl

SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER")
STORE_TYPES = ("PEM", "JKS", "PKCS12")
ENV_VAR = "MINIBROKER_COMMAND_CONFIG"  # the default of --command-config (e.g. for the container healthcheck)


class ClientConfigError(Exception):
    """A client properties file that cannot be used; the message names the file and the key."""


@dataclass(frozen=True)
class ClientSecurity:
    """How a client connects: TLS settings and SASL credentials, from a client properties file."""

    protocol: str = "PLAINTEXT"
    source: str = "defaults"  # the file, for messages
    mechanism: str | None = None
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    oauth_options: dict[str, str] = field(default_factory=dict, repr=False)  # the OAuthBearerLoginModule's
    truststore_location: str | None = None
    truststore_type: str | None = None  # None: not given (PEM, or JKS for a JKS file)
    truststore_password: str | None = field(default=None, repr=False)
    truststore_certificates: str | None = None
    keystore_location: str | None = None
    keystore_type: str | None = None
    keystore_password: str | None = field(default=None, repr=False)
    key_password: str | None = field(default=None, repr=False)
    check_hostname: bool = True

    @property
    def tls(self) -> bool:
        return self.protocol in ("SSL", "SASL_SSL")

    @property
    def sasl(self) -> bool:
        return self.protocol.startswith("SASL_")

    @property
    def who(self) -> str:
        """``SCRAM-SHA-256 as user 'alice'``, for messages about an authentication."""
        if self.mechanism == "OAUTHBEARER":
            from minibroker.tools.sasl_client import oauth_principal

            return f"OAUTHBEARER as principal {oauth_principal(self.oauth_options)!r}"
        return f"{self.mechanism} as user {self.username!r}"

    def ssl_context(self) -> ssl.SSLContext:
        """A client SSLContext: the trust store (or the system's CAs), the key store when given, the host
        name checked unless ``ssl.endpoint.identification.algorithm`` is empty. Raises ClientConfigError."""
        import ssl

        context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        context.minimum_version = ssl.TLSVersion.TLSv1_2  # Kafka's clients enable TLSv1.2 and TLSv1.3
        context.check_hostname = self.check_hostname
        context.verify_mode = ssl.CERT_REQUIRED
        try:
            self._load_trust(context)
            self._load_key_store(context)
        except OSError as e:  # unreadable files, and the server TLS module's TlsConfigError
            raise ClientConfigError(f"{self.source}: {e.strerror or e}") from None
        except ssl.SSLError as e:
            raise ClientConfigError(f"{self.source}: {e}") from None
        return context

    def _load_trust(self, context: ssl.SSLContext) -> None:
        import ssl

        if self.truststore_certificates is not None:
            context.load_verify_locations(cadata=self.truststore_certificates)
        elif self.truststore_location is None:
            context.load_default_certs(ssl.Purpose.SERVER_AUTH)
        elif (store_type := self._store_type(self.truststore_type, self.truststore_location,
                                             "ssl.truststore.location")) == "PEM":
            context.load_verify_locations(cafile=self.truststore_location)
        elif store_type == "JKS":
            from minibroker.security.tls import jks_trusted_certificates

            certs = jks_trusted_certificates(_must_read(self.truststore_location, "ssl.truststore.location"),
                                             self.truststore_password, "ssl.truststore.password",
                                             f"ssl.truststore.location {self.truststore_location}")
            context.load_verify_locations(cadata="".join(ssl.DER_cert_to_PEM_cert(c) for c in certs))
        else:
            _, cert, extra = self._pkcs12(self.truststore_location, self.truststore_password,
                                          "ssl.truststore.location", "ssl.truststore.password")
            certs = ([cert] if cert is not None else []) + list(extra or [])
            if not certs:
                raise ClientConfigError(f"{self.source}: ssl.truststore.location {self.truststore_location}: "
                                        "the PKCS12 store holds no certificate")
            from cryptography.hazmat.primitives.serialization import Encoding

            pem = "".join(c.public_bytes(Encoding.PEM).decode() for c in certs)
            context.load_verify_locations(cadata=pem)

    def _load_key_store(self, context: ssl.SSLContext) -> None:
        if self.keystore_location is None:
            return
        from minibroker.security.tls import load_jks_key_store, load_key_and_chain, load_pem_key_store

        what = f"ssl.keystore.location {self.keystore_location}"
        store_type = self._store_type(self.keystore_type, self.keystore_location, "ssl.keystore.location")
        if store_type == "PEM":  # one file: the private key (plain or encrypted) and the chain
            data = _must_read(self.keystore_location, "ssl.keystore.location")
            load_pem_key_store(context, data, path=self.keystore_location, password=self.key_password,
                               password_key="ssl.key.password", what=what)
            return
        if store_type == "JKS":
            load_jks_key_store(context, _must_read(self.keystore_location, "ssl.keystore.location"),
                               store_password=self.keystore_password, key_password=self.key_password,
                               store_password_key="ssl.keystore.password",
                               key_password_key="ssl.key.password", what=what)
            return
        key, cert, extra = self._pkcs12(self.keystore_location, self.keystore_password,
                                        "ssl.keystore.location", "ssl.keystore.password")
        if key is None or cert is None:
            raise ClientConfigError(f"{self.source}: {what}: the PKCS12 store holds no private key with its "
                                    "certificate")
        load_key_and_chain(context, key, [cert, *(extra or [])], what)

    @staticmethod
    def _store_type(declared: str | None, location: str, location_key: str) -> str:
        """The type the store at ``location`` is read as (``store_type_of``)."""
        from minibroker.security.tls import store_type_of

        data = _must_read(location, location_key)
        return store_type_of(declared or "PEM", data, explicit=declared is not None)

    def _pkcs12(self, location: str, password: str | None, location_key: str, password_key: str):
        from minibroker.security.tls import pkcs12_module

        pkcs12 = pkcs12_module(f"{location_key} {location}")  # names the extra when cryptography is missing
        data = _must_read(location, location_key)
        try:
            return pkcs12.load_key_and_certificates(data, None if password is None else password.encode())
        except (ValueError, TypeError) as e:
            raise ClientConfigError(f"{self.source}: {location_key} {location}: cannot read the PKCS12 store "
                                    f"(wrong or missing {password_key}?): {e}") from None

    def kafka_python_settings(self) -> dict:
        """The same as kafka-python keyword arguments (KafkaProducer, KafkaConsumer, KafkaAdminClient)."""
        out: dict = {"security_protocol": self.protocol}
        if self.tls:
            out["ssl_context"] = self.ssl_context()
        if self.sasl:
            out["sasl_mechanism"] = self.mechanism
            if self.mechanism == "OAUTHBEARER":
                from minibroker.tools.sasl_client import kafka_python_token_provider

                out["sasl_oauth_token_provider"] = kafka_python_token_provider(self.oauth_options)
            else:
                out["sasl_plain_username"] = self.username
                out["sasl_plain_password"] = self.password
        return out


def _must_read(path: str, key: str) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as e:
        raise ClientConfigError(f"cannot read {key} {path}: {e.strerror or e}") from None


def _upper(props: dict[str, str], key: str, default: str) -> str:
    return props.get(key, default).strip().upper() or default


def client_security_from_properties(props: dict[str, str], source: str = "client properties"
                                    ) -> ClientSecurity:
    """A ClientSecurity from parsed client properties; checks what the tools cannot use."""

    def fail(message: str):
        raise ClientConfigError(f"{source}: {message}")

    protocol = _upper(props, "security.protocol", "PLAINTEXT")
    if protocol not in SECURITY_PROTOCOLS:
        fail(f"security.protocol={protocol}: use one of {', '.join(SECURITY_PROTOCOLS)}")
    values: dict = {"protocol": protocol, "source": source}
    for key, attr in (("ssl.truststore.type", "truststore_type"), ("ssl.keystore.type", "keystore_type")):
        if not props.get(key, "").strip():
            continue
        store_type = _upper(props, key, "PEM")
        if store_type not in STORE_TYPES:
            fail(f"{key}={store_type}: minibroker's tools read {', '.join(STORE_TYPES)} stores")
        values[attr] = store_type
    for key, attr in (("ssl.truststore.location", "truststore_location"),
                      ("ssl.truststore.password", "truststore_password"),
                      ("ssl.truststore.certificates", "truststore_certificates"),
                      ("ssl.keystore.location", "keystore_location"),
                      ("ssl.keystore.password", "keystore_password"),
                      ("ssl.key.password", "key_password")):
        if key in props:
            values[attr] = props[key].strip() if key.endswith(".location") else props[key]
    if "ssl.truststore.location" in props and "ssl.truststore.certificates" in props:
        fail("ssl.truststore.location and ssl.truststore.certificates are both set; give one")
    for key in ("ssl.keystore.certificate.chain", "ssl.keystore.key"):
        if key in props:
            fail(f"{key} (an inline key store) is not read by minibroker's tools; put the key and chain in a "
                 "PEM file and give ssl.keystore.location")
    values["check_hostname"] = props.get("ssl.endpoint.identification.algorithm", "https").strip() != ""
    if protocol.startswith("SASL_"):
        mechanism = props.get("sasl.mechanism", "GSSAPI").strip().upper()
        if mechanism not in SASL_MECHANISMS:
            fail(f"sasl.mechanism={mechanism}: minibroker's tools speak {', '.join(SASL_MECHANISMS)}")
        values["mechanism"] = mechanism
        if "sasl.jaas.config" not in props:
            fail(f"sasl.jaas.config is not set: {_jaas_example(mechanism)}")
        from minibroker.config.jaas import parse_jaas_config

        try:
            options = parse_jaas_config(props["sasl.jaas.config"])[0].options
        except ValueError as e:
            fail(f"sasl.jaas.config: {e}")
        if mechanism == "OAUTHBEARER":
            from minibroker.tools.sasl_client import oauth_principal

            values["oauth_options"] = dict(options)
            try:
                oauth_principal(options)
            except ValueError as e:
                fail(f"sasl.jaas.config: {e}")
        else:
            missing = [k for k in ("username", "password") if k not in options]
            if missing:
                fail(f"sasl.jaas.config: {mechanism} needs {' and '.join(missing)} "
                     f"({_jaas_example(mechanism)})")
            values["username"], values["password"] = options["username"], options["password"]
    return ClientSecurity(**values)


def _jaas_example(mechanism: str) -> str:
    if mechanism == "OAUTHBEARER":
        return ("e.g. sasl.jaas.config=org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule "
                'required unsecuredLoginStringClaim_sub="alice";')
    module = ("org.apache.kafka.common.security.plain.PlainLoginModule" if mechanism == "PLAIN"
              else "org.apache.kafka.common.security.scram.ScramLoginModule")
    return f'e.g. sasl.jaas.config={module} required username="alice" password="alice-secret";'


def read_client_config(path: str | None) -> ClientSecurity:
    """The ClientSecurity of a client properties file; PLAINTEXT defaults when ``path`` is None."""
    if path is None:
        return ClientSecurity()
    from minibroker.config import parse_properties

    try:
        with open(path, encoding="utf-8") as f:
            props = parse_properties(f.read())
    except (OSError, UnicodeDecodeError) as e:
        raise ClientConfigError(f"cannot read --command-config {path}: {getattr(e, 'strerror', None) or e}"
                                ) from None
    return client_security_from_properties(props, source=path)


def kafka_python_settings(path: str | None) -> dict:
    """kafka-python keyword arguments from a client properties file ({} without one)."""
    if path is None:
        return {}
    return read_client_config(path).kafka_python_settings()


def add_command_config_argument(parser) -> None:
    """``--command-config FILE`` (default: $MINIBROKER_COMMAND_CONFIG) on a tool's parser."""
    parser.add_argument("--command-config", metavar="FILE", default=os.environ.get(ENV_VAR) or None,
                        help="Kafka client properties: security.protocol, ssl.*, sasl.mechanism, "
                             f"sasl.jaas.config (env {ENV_VAR})")
