"""The client side of SASL for minibroker's tools: PLAIN, SCRAM-SHA-256/512 (RFC 5802) and OAUTHBEARER
(RFC 7628) with Kafka's unsecured tokens. Sans-I/O: each mechanism turns the broker's challenges into the
next token; ``WireClient`` (minibroker/tools/wire.py) carries them in SaslAuthenticate requests.

The SCRAM arithmetic (salted password, stored and server keys) is the broker's own, from
minibroker/security/sasl/scram.py; only the client's half of the exchange is here. An unsecured
OAUTHBEARER token is what Kafka's ``OAuthBearerUnsecuredLoginCallbackHandler`` makes from the
``unsecuredLogin*`` options of the ``OAuthBearerLoginModule`` JAAS entry: header ``{"alg":"none"}``, the
claims (``iat`` and ``exp`` from ``unsecuredLoginLifetimeSeconds``), an empty signature.
"""

from __future__ import annotations

import base64
import binascii
import hmac
import json
import secrets
import time

from minibroker.security.sasl.scram import (
    MECHANISMS as SCRAM_MECHANISMS,
)
from minibroker.security.sasl.scram import (
    credential_from_salted_password,
    salted_password,
    saslname_from_username,
    xor_bytes,
)

_STRING_CLAIM, _NUMBER_CLAIM, _LIST_CLAIM = ("unsecuredLoginStringClaim_", "unsecuredLoginNumberClaim_",
                                             "unsecuredLoginListClaim_")
_EXTENSION = "unsecuredLoginExtension_"


class SaslClientError(Exception):
    """The broker's answer does not fit the mechanism (or fails its proof)."""


class PlainClient:
    """PLAIN (RFC 4616): one message, ``\\0user\\0password``."""

    def __init__(self, username: str, password: str):
        self._message = b"\0" + username.encode() + b"\0" + password.encode()

    def initial(self) -> bytes:
        return self._message

    def evaluate(self, challenge: bytes) -> bytes | None:
        return None


class ScramClient:
    """SCRAM-SHA-256 / SCRAM-SHA-512 without channel binding (GS2 header ``n,,``), as Kafka's clients."""

    def __init__(self, mechanism_name: str, username: str, password: str, nonce: str | None = None):
        self.mechanism = SCRAM_MECHANISMS[mechanism_name]
        self._password = password
        self._nonce = nonce or secrets.token_urlsafe(24)
        self._client_first_bare = f"n={saslname_from_username(username)},r={self._nonce}"
        self._server_signature: bytes | None = None
        self._state = "first"

    def initial(self) -> bytes:
        return b"n,," + self._client_first_bare.encode()

    def evaluate(self, challenge: bytes) -> bytes | None:
        if self._state == "first":
            self._state = "final"
            return self._client_final(challenge)
        if self._state == "final":
            self._state = "complete"
            self._verify(challenge)
            return None
        raise SaslClientError(f"unexpected SCRAM challenge in state {self._state}")

    def _client_final(self, server_first: bytes) -> bytes:
        text = server_first.decode("utf-8", "replace")
        attrs = _attributes(text)
        try:
            nonce, salt, iterations = attrs["r"], base64.b64decode(attrs["s"], validate=True), int(attrs["i"])
        except (KeyError, ValueError, binascii.Error):
            raise SaslClientError(f"invalid SCRAM server first message {text!r}") from None
        if not nonce.startswith(self._nonce) or nonce == self._nonce:
            raise SaslClientError("the broker's SCRAM nonce does not extend the client's")
        if iterations < self.mechanism.min_iterations:
            raise SaslClientError(f"the broker asks for {iterations} iterations, fewer than "
                                  f"{self.mechanism.min_iterations} ({self.mechanism.name})")
        salted = salted_password(self.mechanism, self._password, salt, iterations)
        credential = credential_from_salted_password(self.mechanism, salt, salted, iterations)
        without_proof = f"c={base64.b64encode(b'n,,').decode()},r={nonce}"
        auth_message = f"{self._client_first_bare},{text},{without_proof}".encode()
        client_key = self.mechanism.hmac(salted, b"Client Key")
        proof = xor_bytes(client_key, self.mechanism.hmac(credential.stored_key, auth_message))
        self._server_signature = self.mechanism.hmac(credential.server_key, auth_message)
        return f"{without_proof},p={base64.b64encode(proof).decode()}".encode()

    def _verify(self, server_final: bytes) -> None:
        attrs = _attributes(server_final.decode("utf-8", "replace"))
        if "e" in attrs:
            raise SaslClientError(f"the broker refused: {attrs['e']}")
        try:
            signature = base64.b64decode(attrs["v"], validate=True)
        except (KeyError, binascii.Error):
            raise SaslClientError("invalid SCRAM server final message") from None
        if self._server_signature is None or not hmac.compare_digest(signature, self._server_signature):
            raise SaslClientError("the broker's SCRAM server signature is wrong (not the broker that holds "
                                  "this user's credential)")


def _attributes(text: str) -> dict[str, str]:
    out = {}
    for item in text.split(","):
        key, sep, value = item.partition("=")
        if sep and len(key) == 1:
            out.setdefault(key, value)
    return out


def oauth_principal(options: dict[str, str]) -> str:
    """The principal an unsecured token made from these JAAS options names; ValueError when none."""
    claim = options.get("unsecuredLoginPrincipalClaimName", "sub").strip() or "sub"
    value = options.get(_STRING_CLAIM + claim)
    if not value:
        raise ValueError(f"OAuthBearerLoginModule needs {_STRING_CLAIM}{claim}=\"<principal>\" (an unsecured "
                         "token names its principal)")
    return value


def unsecured_token(options: dict[str, str], now: float | None = None) -> str:
    """An unsigned JWS (``alg`` none) with the claims of Kafka's ``unsecuredLogin*`` options."""
    now = time.time() if now is None else now
    oauth_principal(options)
    try:
        lifetime = int(options.get("unsecuredLoginLifetimeSeconds", "3600"))
    except ValueError:
        raise ValueError("unsecuredLoginLifetimeSeconds must be a number") from None
    claims: dict = {"iat": int(now), "exp": int(now) + lifetime}
    for key, value in options.items():
        if key.startswith(_STRING_CLAIM):
            claims[key[len(_STRING_CLAIM):]] = value
        elif key.startswith(_NUMBER_CLAIM):
            try:
                claims[key[len(_NUMBER_CLAIM):]] = json.loads(value)
            except ValueError:
                raise ValueError(f"{key}: {value!r} is not a number") from None
        elif key.startswith(_LIST_CLAIM):  # the first character is the separator: ",a,b"
            claims[key[len(_LIST_CLAIM):]] = [v for v in value[1:].split(value[:1])] if value else []

    def part(data: dict) -> str:
        return base64.urlsafe_b64encode(json.dumps(data, separators=(",", ":")).encode()).decode().rstrip("=")

    return f"{part({'alg': 'none'})}.{part(claims)}."


def oauth_extensions(options: dict[str, str]) -> dict[str, str]:
    return {k[len(_EXTENSION):]: v for k, v in options.items() if k.startswith(_EXTENSION)}


class OAuthBearerClient:
    """OAUTHBEARER: ``n,,^Aauth=Bearer <token>^A<extensions>^A``. A rejected token comes back as a JSON
    challenge, answered with ``^A`` (RFC 7628); the broker's error follows."""

    def __init__(self, options: dict[str, str]):
        self._options = options
        self.rejection: str | None = None  # the broker's JSON challenge, if any

    def initial(self) -> bytes:
        extensions = "".join(f"{k}={v}\x01" for k, v in oauth_extensions(self._options).items())
        return f"n,,\x01auth=Bearer {unsecured_token(self._options)}\x01{extensions}\x01".encode()

    def evaluate(self, challenge: bytes) -> bytes | None:
        if not challenge:
            return None
        self.rejection = challenge.decode("utf-8", "replace")
        return b"\x01"


def client_mechanism(security):
    """The mechanism object for a ClientSecurity (minibroker/tools/client_config.py)."""
    if security.mechanism == "PLAIN":
        return PlainClient(security.username, security.password)
    if security.mechanism == "OAUTHBEARER":
        return OAuthBearerClient(security.oauth_options)
    return ScramClient(security.mechanism, security.username, security.password)


def kafka_python_token_provider(options: dict[str, str]):
    """kafka-python's ``sasl_oauth_token_provider`` giving unsecured tokens from the JAAS options."""
    try:
        from kafka.net.sasl.oauth import AbstractTokenProvider  # kafka-python 3
    except ImportError:  # kafka-python 2
        from kafka.sasl.oauth import AbstractTokenProvider

    class UnsecuredTokenProvider(AbstractTokenProvider):
        def token(self) -> str:
            return unsecured_token(options)

        def extensions(self) -> dict[str, str]:
            return oauth_extensions(options)

    return UnsecuredTokenProvider()
