"""SCRAM-SHA-256 and SCRAM-SHA-512 (RFC 5802, RFC 7677): the server side of the exchange and the
credential arithmetic, with hashlib and hmac only.

A credential is what Kafka stores (``ScramCredential``): salt, StoredKey = H(HMAC(SaltedPassword,
"Client Key")), ServerKey = HMAC(SaltedPassword, "Server Key") and the iteration count; never the
password. The exchange, as Kafka's ScramSaslServer runs it:

1. client-first ``n,[a=<authzid>],n=<user>,r=<client nonce>[,<ext>=<value>...]``: only the "n" GS2
   header (no channel binding); an authzid other than the user fails; an unknown user, or a credential
   under the mechanism's minimum iterations (4096), fails at once. Answer server-first
   ``r=<client nonce><server nonce>,s=<base64 salt>,i=<iterations>``.
2. client-final ``c=<base64 GS2 header>,r=<nonce>[,ext],p=<base64 proof>``: the nonce must end with the
   combined one (as Kafka checks it) and the proof must give back StoredKey (compared in constant time).
   Answer
   server-final ``v=<base64 ServerSignature>``.

Delegation tokens (the ``tokenauth=true`` extension) are not served.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import re
import secrets
from collections.abc import Callable
from typing import NamedTuple

from minibroker.security.sasl.errors import SaslAuthenticationError, SaslCredentialsError

MAX_ITERATIONS = 16384  # Kafka's controller refuses more (ScramControlManager)


class ScramMechanism(NamedTuple):
    name: str  # SCRAM-SHA-256
    hash_name: str  # hashlib's name: sha256
    type: int  # the wire's int8 in Alter/DescribeUserScramCredentials
    min_iterations: int

    def digest(self, data: bytes) -> bytes:
        return hashlib.new(self.hash_name, data).digest()

    def hmac(self, key: bytes, data: bytes) -> bytes:
        return hmac.new(key, data, self.hash_name).digest()


SCRAM_SHA_256 = ScramMechanism("SCRAM-SHA-256", "sha256", 1, 4096)
SCRAM_SHA_512 = ScramMechanism("SCRAM-SHA-512", "sha512", 2, 4096)
MECHANISMS: dict[str, ScramMechanism] = {m.name: m for m in (SCRAM_SHA_256, SCRAM_SHA_512)}
MECHANISMS_BY_TYPE: dict[int, ScramMechanism] = {m.type: m for m in MECHANISMS.values()}


class ScramCredential(NamedTuple):
    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int


def salted_password(mechanism: ScramMechanism, password: str, salt: bytes, iterations: int) -> bytes:
    """Hi(password, salt, i) of RFC 5802: PBKDF2 with the mechanism's HMAC. Kafka does not SASLprep the
    password; nor do we (UTF-8 as is)."""
    return hashlib.pbkdf2_hmac(mechanism.hash_name, password.encode("utf-8"), salt, iterations)


def credential_from_salted_password(mechanism: ScramMechanism, salt: bytes, salted: bytes,
                                    iterations: int) -> ScramCredential:
    client_key = mechanism.hmac(salted, b"Client Key")
    server_key = mechanism.hmac(salted, b"Server Key")
    return ScramCredential(salt, mechanism.digest(client_key), server_key, iterations)


def xor_bytes(a: bytes, b: bytes) -> bytes:
    """ClientProof = ClientKey XOR ClientSignature, and back (RFC 5802); equal lengths."""
    return bytes(x ^ y for x, y in zip(a, b, strict=True))


def new_salt() -> bytes:
    return secrets.token_bytes(32)


def credential_from_password(mechanism: ScramMechanism, password: str, iterations: int,
                             salt: bytes | None = None) -> ScramCredential:
    salt = new_salt() if salt is None else salt
    salted = salted_password(mechanism, password, salt, iterations)
    return credential_from_salted_password(mechanism, salt, salted, iterations)


def username_from_saslname(saslname: str) -> str:
    """RFC 5802's escaping: ``=2C`` is ",", ``=3D`` is "="; any other "=" is malformed."""
    if "=" in saslname.replace("=2C", "").replace("=3D", ""):
        raise SaslCredentialsError(f"Invalid username: {saslname}")
    return saslname.replace("=2C", ",").replace("=3D", "=")


def saslname_from_username(username: str) -> str:
    return username.replace("=", "=3D").replace(",", "=2C")


# any character but NUL, "," and "=" (Kafka allows ASCII only; RFC 5802 UTF-8), or =2C / =3D
_SASLNAME = r"(?:[\x01-\x2b\x2d-\x3c\x3e-\U0010ffff]|=2C|=3D)+"
_PRINTABLE = r"[\x21-\x2b\x2d-\x7e]+"  # printable ASCII but ","
_VALUE = r"[\x01-\x2b\x2d-\x7f]+"
_BASE64 = r"(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{3}=|[A-Za-z0-9+/]{2}==)?"
_EXTENSIONS = rf"(?:,[A-Za-z]+={_VALUE})*"
_CLIENT_FIRST = re.compile(
    rf"(?P<gs2>n,(?:a=(?P<authzid>{_SASLNAME}))?,)(?P<bare>(?:m={_VALUE},)?n=(?P<saslname>{_SASLNAME}),"
    rf"r=(?P<nonce>{_PRINTABLE})(?P<extensions>{_EXTENSIONS}))")
_CLIENT_FINAL = re.compile(
    rf"(?P<without_proof>c=(?P<channel>{_BASE64}),r=(?P<nonce>{_PRINTABLE}){_EXTENSIONS}),p=(?P<proof>{_BASE64})")


def _decode(token: bytes, what: str) -> str:
    try:
        return token.decode("utf-8")
    except UnicodeDecodeError:
        raise SaslCredentialsError(f"Invalid SCRAM {what}: not UTF-8") from None


class ScramServer:
    """One SCRAM exchange on one connection. ``credential_of(user)`` looks the user's credential for
    this mechanism up (the ScramCredentialStore), None when there is none."""

    def __init__(self, mechanism: ScramMechanism, credential_of: Callable[[str], ScramCredential | None]):
        self.mechanism = mechanism
        self._credential_of = credential_of
        self._state = "first"
        self._gs2_header = ""
        self._client_first_bare = ""
        self._server_first = ""
        self._nonce = ""
        self._credential: ScramCredential | None = None
        self.authorization_id: str | None = None  # the user, once complete
        self.lifetime_ms: int | None = None  # SCRAM credentials do not expire (no delegation tokens)

    @property
    def complete(self) -> bool:
        return self._state == "complete"

    def evaluate(self, token: bytes) -> bytes:
        try:
            if self._state == "first":
                return self._client_first(token)
            if self._state == "final":
                return self._client_final(token)
            raise SaslCredentialsError(f"Unexpected challenge in SASL server state {self._state}")
        except Exception:
            self._state = "failed"
            self._credential = None
            raise

    def _client_first(self, token: bytes) -> bytes:
        message = _decode(token, "client first message")
        m = _CLIENT_FIRST.fullmatch(message)
        if m is None:
            raise SaslCredentialsError(f"Invalid SCRAM client first message format: {message!r}")
        extensions = dict(item.split("=", 1) for item in m["extensions"].split(",")[1:])
        if extensions.get("tokenauth", "").lower() == "true":
            raise SaslCredentialsError("Token authentication (delegation tokens) is not served")
        username = username_from_saslname(m["saslname"])
        credential = self._credential_of(username)
        if credential is None:
            raise SaslCredentialsError(f"Authentication failed: Invalid user credentials for {username!r}")
        authzid = m["authzid"]
        if authzid and username_from_saslname(authzid) != username:
            raise SaslAuthenticationError(
                "Authentication failed: Client requested an authorization id that is different from username")
        if credential.iterations < self.mechanism.min_iterations:
            raise SaslCredentialsError(f"Iterations {credential.iterations} is less than the minimum "
                                       f"{self.mechanism.min_iterations} for {self.mechanism.name}")
        self._credential = credential
        self._gs2_header = m["gs2"]
        self._client_first_bare = m["bare"]
        self._nonce = m["nonce"] + secrets.token_urlsafe(24)
        self._server_first = (f"r={self._nonce},s={base64.b64encode(credential.salt).decode('ascii')},"
                              f"i={credential.iterations}")
        self.authorization_id = username
        self._state = "final"
        return self._server_first.encode("ascii")

    def _client_final(self, token: bytes) -> bytes:
        message = _decode(token, "client final message")
        m = _CLIENT_FINAL.fullmatch(message)
        if m is None:
            raise SaslCredentialsError(f"Invalid SCRAM client final message format: {message!r}")
        # Kafka accepts a nonce that only ends with the combined one: older librdkafka (2.0.2, kcat 1.7 in
        # Debian) sends its own nonce again in front of it. The proof still covers what was sent.
        if not m["nonce"].endswith(self._nonce):
            raise SaslCredentialsError("Invalid client nonce in the final client message.")
        try:
            channel = base64.b64decode(m["channel"], validate=True)
            proof = base64.b64decode(m["proof"], validate=True)
        except binascii.Error:
            raise SaslCredentialsError("Invalid SCRAM client final message: bad base64") from None
        if channel != self._gs2_header.encode("utf-8"):
            raise SaslCredentialsError("Invalid SCRAM client final message: channel binding differs from the "
                                       "GS2 header of the first message")
        credential = self._credential
        auth_message = f"{self._client_first_bare},{self._server_first},{m['without_proof']}".encode()
        client_signature = self.mechanism.hmac(credential.stored_key, auth_message)
        if len(proof) != len(client_signature):
            raise SaslCredentialsError("Invalid client credentials")
        client_key = xor_bytes(proof, client_signature)
        if not hmac.compare_digest(self.mechanism.digest(client_key), credential.stored_key):
            raise SaslCredentialsError("Invalid client credentials")
        server_signature = self.mechanism.hmac(credential.server_key, auth_message)
        self._credential = None
        self._state = "complete"
        return b"v=" + base64.b64encode(server_signature)
