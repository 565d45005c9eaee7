"""TLS on SSL and SASL_SSL listeners: each listener's ``ssl.SSLContext``, built at start-up from
Kafka's ``ssl.*`` keys and rebuilt when AlterConfigs changes them, and the principal a client
certificate gives.

Owner of: reading key stores and trust stores (PEM files, inline PEM values, PKCS12 through the
``cryptography`` package), the TLS versions and cipher suites a listener offers, whether it asks for
client certificates (``ssl.client.auth``), and Kafka's ``ssl.principal.mapping.rules``
(SslPrincipalMapper). Every key may be set for one listener as
``listener.name.<listener, lower case>.ssl.*``, which wins over the broker-wide key, as in Kafka.

A key store or trust store that cannot be read stops start-up with ``TlsConfigError``, whose message
names the key, where it was set and the file. At run time (``reload_listener_tls``, called by the
AlterConfigs handlers through the socket server) the same error refuses the change, and so do Kafka's
checks of a reconfigured listener: the certificate keeps its subject (``ssl.allow.dn.changes``) and its
subject alternative names (``ssl.allow.san.changes``), and a listener started without a trust store
cannot be given one. New connections take the new context; established ones keep theirs. The
connection side lives in
minibroker/server/connection.py (``KafkaConnection.tls``: the principal at ``connection_made``, record
bytes copied through the TLS transport instead of ``sendfile``) and minibroker/server/sockets.py (the
handshake, with ``HANDSHAKE_TIMEOUT_S``); a failed handshake sends its TLS alert
(``AlertingSSLObject``).
"""

from __future__ import annotations

import logging
import os
import re
import secrets
import ssl
import tempfile
from contextvars import ContextVar

from minibroker.config import key_to_env_var, listener_key, split_listener_key
from minibroker.config.principal_rules import PrincipalMapper
from minibroker.security.principal import ANONYMOUS, KafkaPrincipal, user

log = logging.getLogger("minibroker.security")

TLS_PROTOCOLS = ("SSL", "SASL_SSL")  # listener security protocols that speak TLS
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
# A certificate's subject as Java's X500Principal.getName() prints it (RFC 2253).

# Attribute types RFC 2253 gives a keyword; any other is printed as its dotted OID with the value as
# '#' and the hex of its DER encoding, as Java does.
_RFC2253_KEYWORDS = {
    "2.5.4.3": "CN", "2.5.4.6": "C", "2.5.4.7": "L", "2.5.4.8": "ST", "2.5.4.10": "O", "2.5.4.11": "OU",
    "2.5.4.9": "STREET", "0.9.2342.19200300.100.1.25": "DC", "0.9.2342.19200300.100.1.1": "UID",
}
# Java's DER string types (non-canonical): UTF8String, PrintableString, T61String, IA5String,
# GeneralString, BMPString; other value types are printed in hex.
_STRING_TAGS = {0x0C: "utf-8", 0x13: "utf-8", 0x14: "latin-1", 0x16: "utf-8", 0x1B: "latin-1",
                0x1E: "utf-16-be"}
_RFC2253_ESCAPED = ',=+<>#;"\\'


def _der_items(data: bytes, pos: int = 0, end: int | None = None):
    """(tag, start of contents, end of contents, start of the item) for each DER item in
    ``data[pos:end]``."""
    end = len(data) if end is None else end
    while pos < end:
        start = pos
        tag = data[pos]
        length = data[pos + 1]
        pos += 2
        if length & 0x80:
            count = length & 0x7F
            length = int.from_bytes(data[pos:pos + count], "big")
            pos += count
        if pos + length > end:
            raise ValueError("truncated DER item")
        yield tag, pos, pos + length, start
        pos += length


def _oid_text(body: bytes) -> str:
    parts: list[int] = []
    value = 0
    for byte in body:
        value = (value << 7) | (byte & 0x7F)
        if not byte & 0x80:
            parts.append(value)
            value = 0
    if not parts:
        return ""
    first = parts[0]
    head = [min(first // 40, 2), first - 40 * min(first // 40, 2)]
    return ".".join(str(p) for p in head + parts[1:])


def _escape_rfc2253(text: str) -> str:
    out = []
    for c in text:
        if c in _RFC2253_ESCAPED:
            out.append("\\" + c)
        elif c == "\0":
            out.append("\\00")
        else:
            out.append(c)
    chars = "".join(out)
    lead = len(chars) - len(chars.lstrip(" \r"))
    trail = len(chars.rstrip(" \r"))
    return "".join("\\" + c if i < lead or i >= trail else c for i, c in enumerate(chars))


def rfc2253_name(name_der: bytes) -> str:
    """A DER-encoded X.501 Name as Java's ``X500Principal.getName()`` prints it: the last RDN first,
    RDNs joined by ``,`` and multi-valued ones by ``+``, RFC 2253 keywords (CN, OU, O, L, ST, C,
    STREET, DC, UID), other types as OID=#hex, special characters escaped with a backslash."""
    items = list(_der_items(name_der))
    if len(items) != 1 or items[0][0] != 0x30:
        raise ValueError("not a DER Name")
    _, start, end, _ = items[0]
    rdns = []
    for set_tag, set_start, set_end, _ in _der_items(name_der, start, end):
        if set_tag != 0x31:
            raise ValueError("RDN is not a SET")
        avas = []
        for seq_tag, seq_start, seq_end, _ in _der_items(name_der, set_start, set_end):
            if seq_tag != 0x30:
                raise ValueError("attribute is not a SEQUENCE")
            (oid_tag, oid_start, oid_end, _), (value_tag, value_start, value_end, value_item) = \
                list(_der_items(name_der, seq_start, seq_end))[:2]
            oid = _oid_text(name_der[oid_start:oid_end])
            keyword = _RFC2253_KEYWORDS.get(oid)
            encoding = _STRING_TAGS.get(value_tag)
            if keyword is None or encoding is None:
                avas.append(f"{keyword or oid}=#{name_der[value_item:value_end].hex()}")
            else:
                value = name_der[value_start:value_end].decode(encoding, "replace")
                avas.append(f"{keyword}={_escape_rfc2253(value)}")
        rdns.append("+".join(avas))
    return ",".join(reversed(rdns))


def certificate_subject(cert_der: bytes) -> str:
    """The subject of a DER certificate in Java's RFC 2253 form (see ``rfc2253_name``)."""
    (_, cert_start, cert_end, _), = list(_der_items(cert_der))[:1]
    (_, tbs_start, tbs_end, _) = next(_der_items(cert_der, cert_start, cert_end))
    fields = list(_der_items(cert_der, tbs_start, tbs_end))
    if fields and fields[0][0] == 0xA0:  # [0] version
        fields = fields[1:]
    # serialNumber, signature, issuer, validity, subject
    _, _, subject_end, subject_item = fields[4]
    return rfc2253_name(cert_der[subject_item:subject_end])


# ---------------------------------------------------------------------------------------------------
# Key stores and trust stores.


class ListenerTls:
    """One TLS listener: its SSLContext, principal mapping rules and handshake timeout, and what a
    dynamic change is checked against: the certificate served (a ``cryptography`` x509 certificate)
    and whether a trust store is configured."""

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


def _load_pem_key(settings: _Settings, pem: bytes, what: str):
    from cryptography.hazmat.primitives import serialization

    m = _PEM_KEY_RE.search(pem)
    if m is None:
        raise TlsConfigError(f"{what}: no private key (-----BEGIN PRIVATE KEY-----) in it")
    password = _password(settings["ssl.key.password"])
    encrypted = b"ENCRYPTED" in m.group(1) or b"Proc-Type: 4,ENCRYPTED" in m.group(0)
    if encrypted and password is None:
        raise TlsConfigError(f"{what}: the private key is encrypted and {settings.key('ssl.key.password')} "
                             "is not set")
    try:
        return serialization.load_pem_private_key(m.group(0), password if encrypted else None)
    except (ValueError, TypeError) as e:
        hint = f" (wrong {settings.where('ssl.key.password')}?)" if encrypted else ""
        raise TlsConfigError(f"{what}: cannot read the private key{hint}: {e}") from None


def _load_pem_certs(pem: bytes, what: str) -> list:
    from cryptography import x509

    try:
        certs = x509.load_pem_x509_certificates(pem)
    except ValueError as e:
        raise TlsConfigError(f"{what}: no readable certificate in it ({e})") from None
    return certs


def _load_pkcs12(settings: _Settings, data: bytes, password_key: str, what: str):
    from cryptography.hazmat.primitives.serialization import pkcs12

    password = _password(settings[password_key])
    try:
        return pkcs12.load_key_and_certificates(data, password)
    except (ValueError, TypeError) as e:
        raise TlsConfigError(f"{what}: cannot read the PKCS12 store (wrong or missing "
                             f"{settings.key(password_key)}?): {e}") from None


def _key_store(settings: _Settings) -> tuple[object, list, str]:
    """(private key, certificate chain, what) of the listener's key store."""
    location = settings["ssl.keystore.location"]
    chain_text = settings["ssl.keystore.certificate.chain"]
    key_text = settings["ssl.keystore.key"]
    store_type = str(settings["ssl.keystore.type"]).upper()
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
        certs = _load_pem_certs(str(chain_text).encode(), what)
        key = _load_pem_key(settings, str(key_text).encode(), settings.key("ssl.keystore.key"))
        return key, certs, what
    if location is None:
        raise TlsConfigError(f"listener {settings.listener} needs a key store: set "
                             f"{settings.key('ssl.keystore.location')} (or ssl.keystore.certificate.chain "
                             "and ssl.keystore.key), e.g. from `minibroker certs`")
    what = f"{settings.where('ssl.keystore.location')} {location}"
    data = _read(settings, "ssl.keystore.location")
    if store_type == "PEM":
        return _load_pem_key(settings, data, what), _load_pem_certs(data, what), what
    if store_type == "PKCS12":
        key, cert, extra = _load_pkcs12(settings, data, "ssl.keystore.password", what)
        if key is None or cert is None:
            raise TlsConfigError(f"{what}: the PKCS12 store holds no private key with its certificate")
        return key, [cert, *(extra or [])], what
    raise TlsConfigError(f"{settings.where('ssl.keystore.type')} is {store_type}: minibroker reads PEM and "
                         "PKCS12 key stores (keytool -importkeystore -deststoretype PKCS12 converts JKS)")


def _trusted_pem(settings: _Settings) -> str | None:
    """The listener's trusted CA certificates as PEM text, None when no trust store is set."""
    from cryptography.hazmat.primitives.serialization import Encoding

    location = settings["ssl.truststore.location"]
    inline = settings["ssl.truststore.certificates"]
    store_type = str(settings["ssl.truststore.type"]).upper()
    if inline is not None:
        if location is not None:
            raise TlsConfigError(f"{settings.where('ssl.truststore.location')} and "
                                 f"{settings.key('ssl.truststore.certificates')} are both set; give one")
        certs = _load_pem_certs(str(inline).encode(), settings.key("ssl.truststore.certificates"))
    elif location is None:
        return None
    else:
        what = f"{settings.where('ssl.truststore.location')} {location}"
        data = _read(settings, "ssl.truststore.location")
        if store_type == "PEM":
            certs = _load_pem_certs(data, what)
        elif store_type == "PKCS12":
            _, cert, extra = _load_pkcs12(settings, data, "ssl.truststore.password", what)
            certs = ([cert] if cert is not None else []) + list(extra or [])
            if not certs:
                raise TlsConfigError(f"{what}: the PKCS12 store holds no certificate")
        else:
            raise TlsConfigError(f"{settings.where('ssl.truststore.type')} is {store_type}: minibroker reads "
                                 "PEM and PKCS12 trust stores")
    return "".join(c.public_bytes(Encoding.PEM).decode() for c in certs)


def _load_chain(context: ssl.SSLContext, key, certs: list, what: str) -> None:
    """Give ``context`` the key and chain. Python's ssl loads them from a file only: a private
    temporary file, the key encrypted in it with a one-time password, removed at once."""
    from cryptography.hazmat.primitives import serialization

    one_time = secrets.token_urlsafe(24).encode()
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                            serialization.BestAvailableEncryption(one_time))
    pem += b"".join(c.public_bytes(serialization.Encoding.PEM) for c in certs)
    fd, path = tempfile.mkstemp(prefix="minibroker-keystore-", suffix=".pem")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(pem)
        context.load_cert_chain(path, password=one_time)
    except ssl.SSLError as e:
        reason = "the private key does not match the certificate" if "KEY_VALUES_MISMATCH" in str(e) else e
        raise TlsConfigError(f"{what}: {reason}") from None
    finally:
        os.unlink(path)


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
    key, certs, what = _key_store(settings)
    _load_chain(context, key, certs, what)
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
    return ListenerTls(listener, security_protocol, context, mapper, handshake_timeout, certs[0],
                       trusted is not None)


def server_context(config, listener: str, security_protocol: str) -> ssl.SSLContext:
    """The SSLContext of one SSL or SASL_SSL listener. Raises TlsConfigError."""
    return _build(config, listener, security_protocol, HANDSHAKE_TIMEOUT_S).context


def _subject_alt_names(certificate) -> set:
    from cryptography import x509

    try:
        return set(certificate.extensions.get_extension_for_class(x509.SubjectAlternativeName).value)
    except x509.ExtensionNotFound:
        return set()


def _check_reconfiguration(config, old: ListenerTls, new: ListenerTls) -> None:
    """Kafka's checks of a listener's new TLS settings against the ones serving (SslFactory): the
    certificate keeps its subject and subject alternative names unless allowed, and a trust store
    cannot be added to a listener started without one. Raises TlsConfigError."""
    from cryptography.hazmat.primitives.serialization import Encoding

    settings = _Settings(config, old.listener)
    if new.has_truststore and not old.has_truststore:
        raise TlsConfigError("Cannot add SSL truststore to an existing listener for which no truststore was "
                             f"configured ({settings.key('ssl.truststore.location')}); restart the broker "
                             "to add one")
    if old.certificate is None:
        return
    old_dn = certificate_subject(old.certificate.public_bytes(Encoding.DER))
    new_dn = certificate_subject(new.certificate.public_bytes(Encoding.DER))
    if not settings["ssl.allow.dn.changes"] and old_dn.lower() != new_dn.lower():
        allow = settings.key("ssl.allow.dn.changes")
        raise TlsConfigError(f"Keystore DistinguishedName does not match: existing={{DN={old_dn}}}, "
                             f"new={{DN={new_dn}}} (a broker started with {allow}=true allows it)")
    old_sans, new_sans = _subject_alt_names(old.certificate), _subject_alt_names(new.certificate)
    if not settings["ssl.allow.san.changes"] and not old_sans <= new_sans:
        missing = ", ".join(sorted(str(getattr(n, "value", n)) for n in old_sans - new_sans))
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
