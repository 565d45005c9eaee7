"""Java KeyStore (JKS) files, read with the standard library only: Kafka's default ``ssl.keystore.type``
and ``ssl.truststore.type``, so key stores and trust stores made by ``keytool`` for Kafka work as they are.

The file, big-endian throughout: magic ``0xFEEDFEED``, version (1 or 2), entry count, then each entry
as a tag (1: private key, 2: trusted certificate), its alias (Java's modified UTF-8 with a two-byte
length) and an eight-byte creation time in milliseconds. A private key entry carries the key protected
by Sun's key protector (an ``EncryptedPrivateKeyInfo`` in DER) and its certificate chain; a trusted
certificate entry one certificate. Certificates are a four-byte length and their DER, preceded in
version 2 by their type (``X.509``). The last 20 bytes are the store's integrity digest: SHA-1 over
the store password (UTF-16BE), the words ``Mighty Aphrodite`` and every byte before the digest.

Sun's key protector: the encrypted key is a 20-byte salt, the key XORed with a key stream and a 20-byte
check. The stream is SHA-1 chained from the salt (each block the digest of the password and the block
before); the check is SHA-1 of the password and the plain key, a PKCS#8 ``PrivateKeyInfo``.

JCEKS stores (magic ``0xCECECECE``, keys under PBEWithMD5AndTripleDES) are refused, as is anything
else that is not a JKS store. Malformed input raises ``JksError``, a wrong password its subclass
``JksPasswordError``; nothing else.
"""

from __future__ import annotations

import hashlib
import hmac
import struct
from dataclasses import dataclass, field

from minibroker.security.certificates import _der_items, _oid_text

JKS_MAGIC = 0xFEEDFEED
JCEKS_MAGIC = 0xCECECECE
_HEADER = struct.Struct(">III")  # magic, version, entry count
_U2, _U4, _U8 = struct.Struct(">H"), struct.Struct(">I"), struct.Struct(">Q")
_PRIVATE_KEY_ENTRY, _TRUSTED_CERT_ENTRY = 1, 2
_DIGEST_SIZE = 20  # SHA-1
_INTEGRITY_WORDS = b"Mighty Aphrodite"  # mixed into the store digest by Sun's JavaKeyStore
_KEY_PROTECTOR_OID = "1.3.6.1.4.1.42.2.17.1.1"  # Sun's proprietary key protection
_SEQUENCE, _OID, _OCTET_STRING = 0x30, 0x06, 0x04


class JksError(ValueError):
    """A JKS store that cannot be read: not a JKS store, truncated or malformed, or a wrong password."""


class JksPasswordError(JksError):
    """The store's integrity digest or a key's check does not match the password given."""


def _password_bytes(password: str) -> bytes:
    # Java hashes a char[]: each UTF-16 code unit as two bytes, high byte first
    return password.encode("utf-16-be", "surrogatepass")


@dataclass(frozen=True)
class PrivateKeyEntry:
    """A private key entry: the key as stored (protected) and its chain (DER, the key's certificate
    first)."""

    alias: str
    protected_key: bytes = field(repr=False)
    chain: tuple[bytes, ...]

    def private_key(self, password: str) -> bytes:
        """The key as PKCS#8 DER, unprotected with ``password`` (Kafka's ``ssl.key.password``, or the
        store password when that is unset). Raises JksError on a wrong password."""
        encrypted = _protected_key_bytes(self.protected_key, self.alias)
        if len(encrypted) < 2 * _DIGEST_SIZE:
            raise JksError(f"the protected key of entry {self.alias!r} is too short")
        salt, check = encrypted[:_DIGEST_SIZE], encrypted[-_DIGEST_SIZE:]
        body = encrypted[_DIGEST_SIZE:-_DIGEST_SIZE]
        secret = _password_bytes(password)
        stream = bytearray()
        block = salt
        while len(stream) < len(body):
            block = hashlib.sha1(secret + block).digest()
            stream += block
        mixed = int.from_bytes(body, "big") ^ int.from_bytes(stream[:len(body)], "big")
        plain = mixed.to_bytes(len(body), "big")
        if not hmac.compare_digest(hashlib.sha1(secret + plain).digest(), check):
            raise JksPasswordError(f"cannot recover the key of entry {self.alias!r}: wrong key password")
        return plain


@dataclass(frozen=True)
class JavaKeyStore:
    """The entries of a JKS store, in file order."""

    private_keys: tuple[PrivateKeyEntry, ...]
    certificates: tuple[tuple[str, bytes], ...]  # trusted certificate entries: (alias, DER)

    def trusted_certificates(self) -> list[bytes]:
        """What Java trusts in this store used as a trust store: every trusted certificate entry and
        the first certificate of every private key entry's chain."""
        return [cert for _, cert in self.certificates] + [e.chain[0] for e in self.private_keys if e.chain]


def _protected_key_bytes(der: bytes, alias: str) -> bytes:
    """The encrypted bytes of an EncryptedPrivateKeyInfo protected by Sun's key protector."""
    try:
        outer = list(_der_items(der))
        if len(outer) != 1 or outer[0][0] != _SEQUENCE:
            raise ValueError("not a SEQUENCE")
        parts = list(_der_items(der, outer[0][1], outer[0][2]))
        if len(parts) != 2 or parts[0][0] != _SEQUENCE or parts[1][0] != _OCTET_STRING:
            raise ValueError("not an algorithm and an OCTET STRING")
        algorithm = list(_der_items(der, parts[0][1], parts[0][2]))
        if not algorithm or algorithm[0][0] != _OID:
            raise ValueError("no algorithm OID")
    except ValueError as e:
        raise JksError(f"the protected key of entry {alias!r} is not an EncryptedPrivateKeyInfo: {e}"
                       ) from None
    oid = _oid_text(der[algorithm[0][1]:algorithm[0][2]])
    if oid != _KEY_PROTECTOR_OID:
        raise JksError(f"the key of entry {alias!r} is protected with algorithm {oid}, not Sun's JKS key "
                       "protector")
    return der[parts[1][1]:parts[1][2]]


class _Reader:
    """Bounds-checked reads over the store bytes (the digest excluded)."""

    def __init__(self, data: bytes, end: int):
        self.data = data
        self.pos = 0
        self.end = end

    def take(self, count: int, what: str) -> bytes:
        if count > self.end - self.pos:
            raise JksError(f"truncated store: {what} at byte {self.pos} runs past the end")
        out = self.data[self.pos:self.pos + count]
        self.pos += count
        return out

    def unpack(self, fmt: struct.Struct, what: str) -> int:
        return fmt.unpack(self.take(fmt.size, what))[0]

    def utf(self, what: str) -> str:
        # Java's modified UTF-8 differs from UTF-8 only for NUL and characters beyond the BMP
        return self.take(self.unpack(_U2, what), what).decode("utf-8", "replace")

    def certificate(self, version: int, alias: str) -> bytes:
        if version == 2:
            cert_type = self.utf(f"certificate type of entry {alias!r}")
            if cert_type != "X.509":
                raise JksError(f"entry {alias!r} holds a {cert_type} certificate, not X.509")
        return self.take(self.unpack(_U4, f"certificate length of entry {alias!r}"),
                         f"certificate of entry {alias!r}")


def store_kind(data: bytes) -> str | None:
    """``"JKS"`` or ``"JCEKS"`` by the file's magic number, None for anything else."""
    if len(data) < 4:
        return None
    return {JKS_MAGIC: "JKS", JCEKS_MAGIC: "JCEKS"}.get(_U4.unpack_from(data)[0])


def read_jks(data: bytes, password: str | None) -> JavaKeyStore:
    """The entries of a JKS store. With ``password`` the integrity digest is checked first (a wrong
    password fails there, as in Java); without one it is not, as Java loads a store given no password
    (Kafka's trust store without ``ssl.truststore.password``). Raises JksError."""
    kind = store_kind(data)
    if kind == "JCEKS":
        raise JksError("a JCEKS store, which minibroker does not read (keytool -importkeystore "
                       "-deststoretype PKCS12 converts it)")
    if kind != "JKS":
        raise JksError("not a JKS store (no 0xFEEDFEED magic number)")
    if len(data) < _HEADER.size + _DIGEST_SIZE:
        raise JksError("truncated store: no room for its header and digest")
    end = len(data) - _DIGEST_SIZE
    if password is not None:
        expected = hashlib.sha1(_password_bytes(password) + _INTEGRITY_WORDS + data[:end]).digest()
        if not hmac.compare_digest(expected, data[end:]):
            raise JksPasswordError("Keystore was tampered with, or password was incorrect")
    _, version, count = _HEADER.unpack_from(data)
    if version not in (1, 2):
        raise JksError(f"unknown JKS version {version}")
    reader = _Reader(data, end)
    reader.pos = _HEADER.size
    keys: list[PrivateKeyEntry] = []
    certs: list[tuple[str, bytes]] = []
    for number in range(count):
        tag = reader.unpack(_U4, f"tag of entry {number}")
        alias = reader.utf(f"alias of entry {number}")
        reader.take(_U8.size, f"creation time of entry {alias!r}")
        if tag == _PRIVATE_KEY_ENTRY:
            key_length = reader.unpack(_U4, f"key length of entry {alias!r}")
            protected = reader.take(key_length, f"key of entry {alias!r}")
            chain_length = reader.unpack(_U4, f"chain length of entry {alias!r}")
            chain = tuple(reader.certificate(version, alias) for _ in range(chain_length))
            keys.append(PrivateKeyEntry(alias, protected, chain))
        elif tag == _TRUSTED_CERT_ENTRY:
            certs.append((alias, reader.certificate(version, alias)))
        else:
            raise JksError(f"entry {alias!r} has tag {tag}, neither a private key (1) nor a trusted "
                           "certificate (2)")
    if reader.pos != end:
        raise JksError(f"{end - reader.pos} bytes after the last entry")
    return JavaKeyStore(tuple(keys), tuple(certs))
