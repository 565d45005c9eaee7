"""TLS on SSL and SASL_SSL listeners: each listener's ``ssl.SSLContext``, built at start-up from
Kafka's ``ssl.*`` keys and rebuilt when AlterConfigs changes them, and the principal a client
certificate gives.

Owner of: reading key stores and trust stores (PEM files and inline PEM values, private keys plain or
encrypted, with Python's ssl alone; JKS, Kafka's default type, with minibroker/security/jks.py; PKCS12
through the ``cryptography`` package, the ``tls`` extra, whose absence stops start-up with one line
naming it), the TLS versions and cipher suites a listener offers, whether it asks for client
certificates (``ssl.client.auth``), and Kafka's ``ssl.principal.mapping.rules`` (SslPrincipalMapper).
Every key may be set for one listener as ``listener.name.<listener, lower case>.ssl.*``, which wins
over the broker-wide key, as in Kafka.

A key store or trust store that cannot be read stops start-up with ``TlsConfigError``, whose message
names the key, where it was set and the file. At run time (``reload_listener_tls``, called by the
AlterConfigs handlers through the socket server) the same error refuses the change, and so do Kafka's
checks of a reconfigured listener: the certificate keeps its subject (``ssl.allow.dn.changes``) and its
subject alternative names (``ssl.allow.san.changes``; both read by minibroker/security/certificates.py),
and a listener started without a trust store cannot be given one. New connections take the new
context; established ones keep theirs. The connection side lives in minibroker/server/connection.py
(``KafkaConnection.tls``: the principal at ``connection_made``, record bytes copied through the TLS
transport instead of ``sendfile``) and minibroker/server/sockets.py (the handshake, with
``HANDSHAKE_TIMEOUT_S``); a failed handshake sends its TLS alert (``AlertingSSLObject``).
"""

from __future__ import annotations

import base64
import logging
import os
import re
import secrets
import ssl
import tempfile
from contextvars import ContextVar

from minibroker.config import key_to_env_var, listener_key, split_listener_key
from minibroker.config.principal_rules import PrincipalMapper
from minibroker.security.certificates import certificate_alt_names, certificate_subject, pem_certificates
from minibroker.security.jks import JksError, JksPasswordError, read_jks, store_kind
from minibroker.security.principal import ANONYMOUS, KafkaPrincipal, user

log = logging.getLogger("minibroker.security")

TLS_PROTOCOLS = ("SSL", "SASL_SSL")  # listener security protocols that speak TLS
TLS_EXTRA = "pip install 'minibroker[tls]'"  # brings the cryptography package: PKCS12 stores
HANDSHAKE_TIMEOUT_S = 10.0  # at most; connections.max.idle.ms when shorter (Kafka bounds it only by that)
_VERSIONS = {"TLSv1": ssl.TLSVersion.TLSv1, "TLSv1.1": ssl.TLSVersion.TLSv1_1,
             "TLSv1.2": ssl.TLSVersion.TLSv1_2, "TLSv1.3": ssl.TLSVersion.TLSv1_3}
# ssl.protocol names the SSLContext's protocol, as Java's SSLContext.getInstance: the highest version.
_PROTOCOL_CAP = {"TLS": None, "TLSv1.3": None, "TLSv1.2": ssl.TLSVersion.TLSv1_2,
                 "TLSv1.1": ssl.TLSVersion.TLSv1_1, "TLSv1": ssl.TLSVersion.TLSv1}
_CLIENT_AUTH = {"required": ssl.CERT_REQUIRED, "requested": ssl.CERT_OPTIONAL, "none": ssl.CERT_NONE}
# TLS 1.3 suites by their standard names (Java's too): Python's ssl cannot restrict them, so they are
# recognised in ssl.cipher.suites rather than handed to OpenSSL's TLS 1.2 cipher list.
_TLS13_SUITES = frozenset({"TLS_AES_128_GCM_SHA256", "TLS_AES_256_GCM_SHA384", "TLS_CHACHA20_POLY1305_SHA256",
                           "TLS_AES_128_CCM_SHA256", "TLS_AES_128_CCM_8_SHA256"})
_PEM_KEY_RE = re.compile(rb"-----BEGIN ((?:[A-Z0-9]+ )*PRIVATE KEY)-----.*?-----END \1-----", re.DOTALL)


class TlsConfigError(OSError):
    """A listener's TLS settings cannot be used (missing or unreadable key store, wrong password, bad
    protocol list); the message names the key, where it was set and the file."""


# ---------------------------------------------------------------------------------------------------
# Key stores and trust stores.


class ListenerTls:
    """One TLS listener: its SSLContext, principal mapping rules and handshake timeout, and what a
    dynamic change is checked against: the certificate served (DER bytes) and whether a trust store
    is configured."""

    __slots__ = ("listener", "security_protocol", "context", "mapper", "handshake_timeout", "certificate",
                 "has_truststore")

    def __init__(self, listener: str, security_protocol: str, context: ssl.SSLContext,
                 mapper: PrincipalMapper, handshake_timeout: float, certificate=None,
                 has_truststore: bool = False):
        self.listener = listener
        self.security_protocol = security_protocol
        self.context = context
        self.mapper = mapper
        self.handshake_timeout = handshake_timeout
        self.certificate = certificate
        self.has_truststore = has_truststore

    def principal_of(self, transport) -> KafkaPrincipal:
        """The principal an SSL connection authenticates as once its handshake is done: its
        certificate's subject mapped by the rules, ``User:ANONYMOUS`` without a certificate.
        Raises NoMatchingRule (the connection is then closed, as Kafka fails it)."""
        ssl_object = transport.get_extra_info("ssl_object")
        cert = ssl_object.getpeercert(binary_form=True) if ssl_object is not None else None
        if not cert:
            return ANONYMOUS
        return user(self.mapper.name_for(certificate_subject(cert)))


# The socket whose TLS handshake runs in this context: minibroker/server/sockets.py sets it in the task
# that starts a TLS connection, and the event loop runs the handshake in that task's context.
handshake_socket: ContextVar = ContextVar("handshake_socket", default=None)


class AlertingSSLObject(ssl.SSLObject):
    """The SSLObject of a TLS listener's connections (``SSLContext.sslobject_class``): when the handshake
    fails it sends the TLS alert OpenSSL wrote (``certificate_required`` for a client without a
    certificate under ``ssl.client.auth=required``, ``handshake_failure``, ``unknown_ca`` ...) before
    the event loop closes the connection. asyncio's and uvloop's TLS transports close it with the alert
    still in their outgoing buffer, so the client would see a bare disconnect and retry; Kafka's
    SSLEngine sends the alert, and clients fail at once on it."""

    @classmethod
    def _create(cls, incoming, outgoing, *args, **kwargs):
        self = super()._create(incoming, outgoing, *args, **kwargs)
        self._alert_out = outgoing
        return self

    def do_handshake(self) -> None:
        try:
            super().do_handshake()
        except (ssl.SSLWantReadError, ssl.SSLWantWriteError):
            raise
        except ssl.SSLError:
            # only the alert is pending: the transport sent everything before it read the client's
            # last flight, so writing on the socket here keeps the byte order
            alert = self._alert_out.read()
            sock = handshake_socket.get()
            if alert and sock is not None:
                try:
                    sock.send(alert)
                except OSError:  # the client is gone already
                    pass
            raise


class _Settings:
    """The ``ssl.*`` values of one listener, each with the key that gave it (for messages)."""

    def __init__(self, config, listener: str):
        self.config = config
        self.listener = listener

    def key(self, name: str) -> str:
        """The key that sets ``name`` here: the listener-prefixed one when set."""
        if self.config.listener_override(self.listener, name) is not None:
            return listener_key(self.listener, name)
        return name

    def __getitem__(self, name: str):
        return self.config.for_listener(self.listener, name)

    def is_set(self, name: str) -> bool:
        """Whether ``name`` was given (with the listener prefix or without), not left to its default."""
        return self.config.source_of(self.key(name)) != "default"

    def where(self, name: str) -> str:
        """``ssl.keystore.location (from --override)``."""
        key = self.key(name)
        source = self.config.source_of(key)
        if source == "dynamic":
            return f"{key} (a dynamic broker config, set by AlterConfigs)"
        if key != name:
            return key
        if source == "env":
            return f"{key} (from environment {key_to_env_var(key)})"
        where = {"file": "the config file", "override": "--override"}.get(source, source)
        return f"{key} (from {where})" if source != "default" else key


def _password(value) -> bytes | None:
    if value is None:
        return None
    return str(value).encode()


def _read(settings: _Settings, name: str) -> bytes:
    path = settings[name]
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as e:
        raise TlsConfigError(f"cannot read {settings.where(name)} {path}: {e.strerror or e}") from None


def pkcs12_module(what: str):
    """The cryptography package's PKCS12 reader: Python's ssl reads PEM only. Raises TlsConfigError
    naming the extra that installs it when it is missing; ``what`` names the store."""
    try:
        from cryptography.hazmat.primitives.serialization import pkcs12
    except ImportError:
        raise TlsConfigError(f"{what} is a PKCS12 store, which needs the cryptography package: "
                             f"{TLS_EXTRA} (or give a PEM store)") from None
    return pkcs12


def _load_pkcs12(settings: _Settings, data: bytes, password_key: str, what: str):
    pkcs12 = pkcs12_module(what)
    password = _password(settings[password_key])
    try:
        return pkcs12.load_key_and_certificates(data, password)
    except (ValueError, TypeError) as e:
        raise TlsConfigError(f"{what}: cannot read the PKCS12 store (wrong or missing "
                             f"{settings.key(password_key)}?): {e}") from None


class _KeyPassword:
    """``load_cert_chain``'s password callback: the key's password, or, when none is set and OpenSSL
    finds the key encrypted, TlsConfigError naming the key to set (without a callback OpenSSL would
    prompt on the terminal). Remembers whether OpenSSL asked, to tell a wrong password from a bad file."""

    def __init__(self, password: str | bytes | None, unset_message: str):
        self.password = password.encode() if isinstance(password, str) else password
        self.unset_message = unset_message
        self.asked = False

    def __call__(self) -> bytes:
        self.asked = True
        if self.password is None:
            raise TlsConfigError(self.unset_message)
        return self.password


def _load_from_memory(context: ssl.SSLContext, pem: bytes, password) -> None:
    """``context.load_cert_chain`` from PEM bytes (Python's ssl reads a key from a file only): on Linux
    an anonymous memory file (memfd), so the key reaches no disk; elsewhere a private temporary file,
    removed at once."""
    if hasattr(os, "memfd_create"):
        fd = os.memfd_create("minibroker-keystore", os.MFD_CLOEXEC)
        try:
            with open(fd, "wb", closefd=False) as f:
                f.write(pem)
            path = f"/proc/self/fd/{fd}"
            if os.path.exists(path):  # not without /proc
                context.load_cert_chain(path, password=password)
                return
        finally:
            os.close(fd)
    fd, path = tempfile.mkstemp(prefix="minibroker-keystore-", suffix=".pem")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(pem)
        context.load_cert_chain(path, password=password)
    finally:
        os.unlink(path)


def _pem_chain(pem: bytes, what: str) -> list[bytes]:
    try:
        certs = pem_certificates(pem)
    except ValueError as e:
        raise TlsConfigError(f"{what}: no readable certificate in it ({e})") from None
    if not certs:
        raise TlsConfigError(f"{what}: no readable certificate (-----BEGIN CERTIFICATE-----) in it")
    return certs


def _check_pem_key(pem: bytes, what: str) -> None:
    if _PEM_KEY_RE.search(pem) is None:
        raise TlsConfigError(f"{what}: no private key (-----BEGIN PRIVATE KEY-----) in it")


def _load_pem_key_and_chain(context: ssl.SSLContext, pem: bytes, path: str | None, password,
                            password_key: str, what: str) -> None:
    key_password = _KeyPassword(password, f"{what}: the private key is encrypted and {password_key} is "
                                          "not set")
    try:
        if path is None:
            _load_from_memory(context, pem, key_password)
        else:
            context.load_cert_chain(path, password=key_password)
    except ssl.SSLError as e:
        if "KEY_VALUES_MISMATCH" in str(e):
            reason = "the private key does not match the certificate"
        elif key_password.asked:
            reason = f"cannot decrypt the private key (wrong {password_key}?)"
        else:
            reason = f"cannot load the private key and the certificate: {e}"
        raise TlsConfigError(f"{what}: {reason}") from None
    except ValueError as e:  # a password longer than OpenSSL takes
        raise TlsConfigError(f"{what}: {password_key}: {e}") from None


def load_pem_key_store(context: ssl.SSLContext, pem: bytes, *, path: str | None, password,
                       password_key: str, what: str) -> list[bytes]:
    """Give ``context`` the private key (plain or encrypted with ``password``: PKCS8 or OpenSSL's
    traditional form) and the certificate chain of a PEM key store, with Python's ssl alone; return the
    chain as DER, the certificate served first. ``path``: the file ``pem`` was read from, loaded in
    place (None: through a memory file). ``password_key`` and ``what`` name the password's key and the
    store in messages. Raises TlsConfigError."""
    _check_pem_key(pem, what)
    chain = _pem_chain(pem, what)
    _load_pem_key_and_chain(context, pem, path, password, password_key, what)
    return chain


def load_key_and_chain(context: ssl.SSLContext, key, certs: list, what: str) -> None:
    """Give ``context`` a private key and chain read by the cryptography package (a PKCS12 store), as
    PEM through a memory file (``_load_from_memory``), the key encrypted with a one-time password for
    where that file is a temporary one. Raises TlsConfigError."""
    from cryptography.hazmat.primitives import serialization

    one_time = secrets.token_urlsafe(24).encode()
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                            serialization.BestAvailableEncryption(one_time))
    pem += b"".join(c.public_bytes(serialization.Encoding.PEM) for c in certs)
    try:
        _load_from_memory(context, pem, one_time)
    except ssl.SSLError as e:
        reason = "the private key does not match the certificate" if "KEY_VALUES_MISMATCH" in str(e) else e
        raise TlsConfigError(f"{what}: {reason}") from None


def store_type_of(declared: str, data: bytes, *, explicit: bool) -> str:
    """The type a store file is read as: ``declared``, except a file declared JKS that is a PKCS12 one
    (a DER SEQUENCE, not JKS's magic number: Java's JKS type reads both, and keytool has written PKCS12
    by default since Java 9) and a JKS file whose type was left to minibroker's default, PEM (``explicit``
    False: Kafka's default is JKS, so Kafka configurations often leave the type out)."""
    kind = store_kind(data)
    if declared == "JKS" and kind is None and data[:1] == b"\x30":
        return "PKCS12"
    if declared == "PEM" and not explicit and kind == "JKS":
        return "JKS"
    return declared


def _der_to_pem(label: str, der: bytes) -> bytes:
    body = base64.encodebytes(der).decode("ascii").replace("\n", "")
    lines = "\n".join(body[i:i + 64] for i in range(0, len(body), 64))
    return f"-----BEGIN {label}-----\n{lines}\n-----END {label}-----\n".encode("ascii")


def load_jks_key_store(context: ssl.SSLContext, data: bytes, *, store_password, key_password,
                       store_password_key: str, key_password_key: str, what: str) -> list[bytes]:
    """Give ``context`` the private key and chain of a JKS key store, checked with ``store_password``
    (required, as Kafka requires ``ssl.keystore.password``) and unprotected with ``key_password`` (Kafka's
    ``ssl.key.password``; the store password when None); return the chain as DER, the certificate served
    first. The first private key entry is used (a key store made for Kafka holds one). The key reaches
    OpenSSL as PEM through a memory file (``_load_from_memory``), unencrypted: without the cryptography
    package nothing here can encrypt it, so where no memory file exists (not Linux) it passes through a
    private temporary file, removed at once. Raises TlsConfigError."""
    if store_password is None:
        raise TlsConfigError(f"{what}: SSL key store is specified, but key store password is not specified "
                             f"(set {store_password_key})")
    try:
        store = read_jks(data, str(store_password))
    except JksPasswordError as e:
        raise TlsConfigError(f"{what}: {e} (check {store_password_key})") from None
    except JksError as e:
        raise TlsConfigError(f"{what}: cannot read the JKS store: {e}") from None
    if not store.private_keys:
        raise TlsConfigError(f"{what}: the JKS store holds no private key entry (a trust store?)")
    entry = store.private_keys[0]
    if not entry.chain:
        raise TlsConfigError(f"{what}: the private key entry {entry.alias!r} has no certificate chain")
    password, password_key = ((key_password, key_password_key) if key_password is not None
                              else (store_password, store_password_key))
    try:
        key = entry.private_key(str(password))
    except JksError as e:
        raise TlsConfigError(f"{what}: {e} (check {password_key})") from None
    pem = _der_to_pem("PRIVATE KEY", key) + b"".join(_der_to_pem("CERTIFICATE", c) for c in entry.chain)
    _load_pem_key_and_chain(context, pem, None, None, password_key, what)
    return list(entry.chain)


def jks_trusted_certificates(data: bytes, password, password_key: str, what: str) -> list[bytes]:
    """The certificates a JKS trust store trusts, as DER (Java's rule: its trusted certificate entries and
    the certificate of each private key entry). Without ``password`` the store's integrity digest is not
    checked, as Java and Kafka load a trust store given no password. Raises TlsConfigError."""
    try:
        store = read_jks(data, None if password is None else str(password))
    except JksPasswordError as e:
        raise TlsConfigError(f"{what}: {e} (check {password_key})") from None
    except JksError as e:
        raise TlsConfigError(f"{what}: cannot read the JKS store: {e}") from None
    certs = store.trusted_certificates()
    if not certs:
        raise TlsConfigError(f"{what}: the JKS store holds no certificate")
    return certs


def _key_store(settings: _Settings, context: ssl.SSLContext) -> bytes:
    """Load the listener's key store into ``context``; the DER of the certificate it serves."""
    location = settings["ssl.keystore.location"]
    chain_text = settings["ssl.keystore.certificate.chain"]
    key_text = settings["ssl.keystore.key"]
    store_type = str(settings["ssl.keystore.type"]).upper()
    password_key = settings.key("ssl.key.password")
    if chain_text is not None or key_text is not None:
        if location is not None:
            raise TlsConfigError(f"{settings.where('ssl.keystore.location')} and "
                                 f"{settings.key('ssl.keystore.certificate.chain')} are both set; give one")
        if chain_text is None or key_text is None:
            missing = "ssl.keystore.key" if key_text is None else "ssl.keystore.certificate.chain"
            raise TlsConfigError(f"{settings.key(missing)} is not set: an inline key store needs "
                                 f"{settings.key('ssl.keystore.certificate.chain')} and "
                                 f"{settings.key('ssl.keystore.key')}")
        if store_type != "PEM":
            raise TlsConfigError(f"{settings.where('ssl.keystore.type')} is {store_type}: inline key stores "
                                 "(ssl.keystore.certificate.chain, ssl.keystore.key) are PEM")
        what = settings.key("ssl.keystore.certificate.chain")
        chain = _pem_chain(str(chain_text).encode(), what)
        key_pem = str(key_text).encode()
        _check_pem_key(key_pem, settings.key("ssl.keystore.key"))
        _load_pem_key_and_chain(context, key_pem + b"\n" + str(chain_text).encode(), None,
                                settings["ssl.key.password"], password_key, what)
        return chain[0]
    if location is None:
        raise TlsConfigError(f"listener {settings.listener} needs a key store: set "
                             f"{settings.key('ssl.keystore.location')} (or ssl.keystore.certificate.chain "
                             "and ssl.keystore.key), e.g. from `minibroker certs`")
    what = f"{settings.where('ssl.keystore.location')} {location}"
    if store_type == "PKCS12":
        pkcs12_module(what)  # before reading the file: the extra is the first thing to fix
    elif store_type not in ("PEM", "JKS"):
        raise TlsConfigError(f"{settings.where('ssl.keystore.type')} is {store_type}: minibroker reads PEM, "
                             "JKS and PKCS12 key stores")
    data = _read(settings, "ssl.keystore.location")
    store_type = store_type_of(store_type, data, explicit=settings.is_set("ssl.keystore.type"))
    if store_type == "PKCS12":
        pkcs12_module(what)
    if store_type == "PEM":
        return load_pem_key_store(context, data, path=location, password=settings["ssl.key.password"],
                                  password_key=password_key, what=what)[0]
    if store_type == "JKS":
        return load_jks_key_store(context, data, store_password=settings["ssl.keystore.password"],
                                  key_password=settings["ssl.key.password"],
                                  store_password_key=settings.key("ssl.keystore.password"),
                                  key_password_key=password_key, what=what)[0]
    from cryptography.hazmat.primitives.serialization import Encoding

    key, cert, extra = _load_pkcs12(settings, data, "ssl.keystore.password", what)
    if key is None or cert is None:
        raise TlsConfigError(f"{what}: the PKCS12 store holds no private key with its certificate")
    load_key_and_chain(context, key, [cert, *(extra or [])], what)
    return cert.public_bytes(Encoding.DER)


def _trusted_pem(settings: _Settings) -> str | None:
    """The listener's trusted CA certificates as PEM text, None when no trust store is set."""
    location = settings["ssl.truststore.location"]
    inline = settings["ssl.truststore.certificates"]
    store_type = str(settings["ssl.truststore.type"]).upper()
    if inline is not None:
        if location is not None:
            raise TlsConfigError(f"{settings.where('ssl.truststore.location')} and "
                                 f"{settings.key('ssl.truststore.certificates')} are both set; give one")
        certs = _pem_chain(str(inline).encode(), settings.key("ssl.truststore.certificates"))
    elif location is None:
        return None
    else:
        what = f"{settings.where('ssl.truststore.location')} {location}"
        if store_type == "PKCS12":
            pkcs12_module(what)
        elif store_type not in ("PEM", "JKS"):
            raise TlsConfigError(f"{settings.where('ssl.truststore.type')} is {store_type}: minibroker reads "
                                 "PEM, JKS and PKCS12 trust stores")
        data = _read(settings, "ssl.truststore.location")
        store_type = store_type_of(store_type, data, explicit=settings.is_set("ssl.truststore.type"))
        if store_type == "PKCS12":
            pkcs12_module(what)
        if store_type == "PEM":
            certs = _pem_chain(data, what)
        elif store_type == "JKS":
            certs = jks_trusted_certificates(data, settings["ssl.truststore.password"],
                                             settings.key("ssl.truststore.password"), what)
        else:
            from cryptography.hazmat.primitives.serialization import Encoding

            _, cert, extra = _load_pkcs12(settings, data, "ssl.truststore.password", what)
            found = ([cert] if cert is not None else []) + list(extra or [])
            certs = [c.public_bytes(Encoding.DER) for c in found]
            if not certs:
                raise TlsConfigError(f"{what}: the PKCS12 store holds no certificate")
    return "".join(ssl.DER_cert_to_PEM_cert(c) for c in certs)


def _versions(settings: _Settings) -> tuple[ssl.TLSVersion, ssl.TLSVersion | None]:
    enabled = [v.strip() for v in settings["ssl.enabled.protocols"] if v.strip()]
    unknown = [v for v in enabled if v not in _VERSIONS]
    if not enabled or unknown:
        raise TlsConfigError(f"{settings.where('ssl.enabled.protocols')} must list TLS versions among "
                             f"{', '.join(_VERSIONS)}" + (f" (not {', '.join(unknown)})" if unknown else ""))
    protocol = settings["ssl.protocol"]
    if protocol not in _PROTOCOL_CAP:
        raise TlsConfigError(f"{settings.where('ssl.protocol')} is {protocol}: use TLS, TLSv1.2 or TLSv1.3")
    versions = sorted(_VERSIONS[v] for v in enabled)
    cap = _PROTOCOL_CAP[protocol]
    high = versions[-1] if cap is None else min(versions[-1], cap)
    if high < versions[0]:
        raise TlsConfigError(f"{settings.where('ssl.protocol')} ({protocol}) is below every version in "
                             f"{settings.key('ssl.enabled.protocols')}")
    return versions[0], high


def _ciphers(settings: _Settings, context: ssl.SSLContext, high: ssl.TLSVersion) -> bool:
    """Apply ``ssl.cipher.suites``; True when it names TLS 1.3 suites only (TLS 1.2 then has none)."""
    ciphers = [c.strip() for c in settings["ssl.cipher.suites"] if c.strip()]
    tls12 = [c for c in ciphers if c not in _TLS13_SUITES]
    if ciphers and not tls12:
        if high < ssl.TLSVersion.TLSv1_3:
            raise TlsConfigError(f"{settings.where('ssl.cipher.suites')} names TLS 1.3 suites only, and "
                                 f"TLS 1.3 is not enabled ({settings.key('ssl.enabled.protocols')}, "
                                 f"{settings.key('ssl.protocol')})")
        return True
    if tls12:
        try:
            context.set_ciphers(":".join(tls12))
        except ssl.SSLError:
            raise TlsConfigError(f"{settings.where('ssl.cipher.suites')}: OpenSSL knows none of "
                                 f"{', '.join(tls12)} (give OpenSSL names, e.g. "
                                 "ECDHE-RSA-AES128-GCM-SHA256)") from None
    return False


def _build(config, listener: str, security_protocol: str, handshake_timeout: float) -> ListenerTls:
    """The ListenerTls of one SSL or SASL_SSL listener from ``config`` as it is now. Raises
    TlsConfigError."""
    settings = _Settings(config, listener)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.sslobject_class = AlertingSSLObject
    low, high = _versions(settings)
    if _ciphers(settings, context, high):
        low = ssl.TLSVersion.TLSv1_3
    try:
        context.minimum_version = low
        context.maximum_version = high
    except ValueError as e:
        raise TlsConfigError(f"{settings.where('ssl.enabled.protocols')}: {e}") from None
    certificate = _key_store(settings, context)
    # Kafka applies ssl.client.auth to a SASL_SSL listener only when set with the listener prefix.
    if security_protocol == "SASL_SSL":
        client_auth = config.listener_override(listener, "ssl.client.auth") or "none"
        if client_auth == "none" and config["ssl.client.auth"] != "none":
            log.warning("ssl.client.auth applies to SSL listeners only; set %s to ask for client "
                        "certificates on SASL_SSL listener %s",
                        f"listener.name.{listener.lower()}.ssl.client.auth", listener)
    else:
        client_auth = settings["ssl.client.auth"]
    context.verify_mode = _CLIENT_AUTH[client_auth]
    trusted = _trusted_pem(settings)
    if trusted is not None:
        try:
            context.load_verify_locations(cadata=trusted)
        except ssl.SSLError as e:
            raise TlsConfigError(f"{settings.where('ssl.truststore.location')}: {e}") from None
    elif client_auth != "none":
        context.load_default_certs(ssl.Purpose.CLIENT_AUTH)
    mapper = PrincipalMapper(config.for_listener(listener, "ssl.principal.mapping.rules"))
    return ListenerTls(listener, security_protocol, context, mapper, handshake_timeout, certificate,
                       trusted is not None)


def server_context(config, listener: str, security_protocol: str) -> ssl.SSLContext:
    """The SSLContext of one SSL or SASL_SSL listener. Raises TlsConfigError."""
    return _build(config, listener, security_protocol, HANDSHAKE_TIMEOUT_S).context


def _check_reconfiguration(config, old: ListenerTls, new: ListenerTls) -> None:
    """Kafka's checks of a listener's new TLS settings against the ones serving (SslFactory): the
    certificate keeps its subject and subject alternative names unless allowed, and a trust store
    cannot be added to a listener started without one. Raises TlsConfigError."""
    settings = _Settings(config, old.listener)
    if new.has_truststore and not old.has_truststore:
        raise TlsConfigError("Cannot add SSL truststore to an existing listener for which no truststore was "
                             f"configured ({settings.key('ssl.truststore.location')}); restart the broker "
                             "to add one")
    if old.certificate is None:
        return
    try:
        old_dn, new_dn = certificate_subject(old.certificate), certificate_subject(new.certificate)
        old_sans, new_sans = certificate_alt_names(old.certificate), certificate_alt_names(new.certificate)
    except ValueError as e:
        raise TlsConfigError(f"cannot read the names of the new or the serving certificate: {e}") from None
    if not settings["ssl.allow.dn.changes"] and old_dn.lower() != new_dn.lower():
        allow = settings.key("ssl.allow.dn.changes")
        raise TlsConfigError(f"Keystore DistinguishedName does not match: existing={{DN={old_dn}}}, "
                             f"new={{DN={new_dn}}} (a broker started with {allow}=true allows it)")
    if not settings["ssl.allow.san.changes"] and not old_sans <= new_sans:
        missing = ", ".join(f"{kind}:{value}" for kind, value in sorted(old_sans - new_sans))
        allow = settings.key("ssl.allow.san.changes")
        raise TlsConfigError(f"Keystore SubjectAltNames do not match: the new certificate lacks {missing} "
                             f"(a broker started with {allow}=true allows it)")


def reload_listener_tls(config, current: dict[str, ListenerTls]) -> dict[str, ListenerTls]:
    """A new ListenerTls for every listener of ``current``, from ``config`` as it is now (after a dynamic
    change), each checked against the one serving. Key stores and trust stores are read again even
    when their settings are unchanged (Kafka reloads a file altered to the same path). Raises
    TlsConfigError naming the listener; nothing is changed here."""
    out: dict[str, ListenerTls] = {}
    for name, old in current.items():
        try:
            new = _build(config, name, old.security_protocol, old.handshake_timeout)
            _check_reconfiguration(config, old, new)
        except TlsConfigError as e:
            raise TlsConfigError(f"listener {name} ({old.security_protocol}): {e}") from None
        out[name] = new
    return out


def is_tls_key(key: str) -> bool:
    """An ``ssl.*`` broker key, or its ``listener.name.<listener>.`` form: changing it rebuilds the TLS
    listeners it applies to."""
    per_listener = split_listener_key(key)
    return (per_listener[2] if per_listener is not None else key).startswith("ssl.")


def listeners_of(keys, listener_names) -> list[str]:
    """The listeners among ``listener_names`` whose TLS settings the altered ``keys`` may change: all for
    a plain ``ssl.*`` key, one for its ``listener.name.<listener, lower case>.`` form (Kafka reads no
    other spelling)."""
    out = []
    for name in listener_names:
        for key in keys:
            per_listener = split_listener_key(key)
            if is_tls_key(key) and (per_listener is None or per_listener[0] == name.lower()):
                out.append(name)
                break
    return out


def listener_tls(config) -> dict[str, ListenerTls]:
    """A ``ListenerTls`` for each SSL and SASL_SSL listener, by listener name. Raises TlsConfigError
    naming the listener's key (the broker then stops before its logs are loaded)."""
    protocols = config.security_protocol_map()
    idle_ms = config["connections.max.idle.ms"]
    timeout = HANDSHAKE_TIMEOUT_S if idle_ms < 0 else max(0.1, min(HANDSHAKE_TIMEOUT_S, idle_ms / 1000))
    out: dict[str, ListenerTls] = {}
    for endpoint in config.listener_endpoints():
        protocol = protocols.get(endpoint.name, "PLAINTEXT")
        if protocol not in TLS_PROTOCOLS:
            continue
        try:
            out[endpoint.name] = _build(config, endpoint.name, protocol, timeout)
        except TlsConfigError as e:
            raise TlsConfigError(f"listener {endpoint.name} ({protocol}): {e}") from None
    return out
