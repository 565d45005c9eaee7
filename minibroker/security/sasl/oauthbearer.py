"""SASL/OAUTHBEARER (RFC 7628, KIP-255): the exchange, Kafka's unsecured JWS validator, and a hook for a
real one.

The client's first message is ``n,[a=<authzid>],^Aauth=Bearer <token>^A[<key>=<value>^A...]^A``. The
token is checked by the listener's validator:

- by default Kafka's ``OAuthBearerUnsecuredValidatorCallbackHandler``: an unsecured JWS (header
  ``{"alg":"none"}``, empty signature) whose claims carry the principal (``sub``, or the JAAS option
  ``unsecuredValidatorPrincipalClaimName``) and ``exp``; ``iat`` if present must not be in the future,
  and ``exp`` must be after it; the scope claim (``scope`` or ``unsecuredValidatorScopeClaimName``, a
  string or a list) must hold every element of ``unsecuredValidatorRequiredScope`` (space separated);
  ``unsecuredValidatorAllowableClockSkewMs`` loosens both time checks. These options come from the
  ``OAuthBearerLoginModule`` entry of ``listener.name.<listener>.oauthbearer.sasl.jaas.config``.
- or ``listener.name.<listener>.oauthbearer.sasl.server.callback.handler.class`` =
  ``package.module:function``: ``function(token: str)`` returns ``(principal_name, lifetime_ms)``, the
  token's expiry in milliseconds since the epoch, or raises ``TokenValidationError`` (its status and
  scope go to the client) or any other exception (an internal error: the client gets Kafka's generic
  failure). JWKS and signature checks belong in that function.

A rejected token is answered as KIP-255 says: a challenge ``{"status":"invalid_token"}`` (or
``insufficient_scope`` with the ``scope`` required), to which the client replies ``^A`` and then gets
SASL_AUTHENTICATION_FAILED with that JSON as the message. The principal is ``User:<principal name>``; the
token's expiry bounds the session (KIP-368 re-authentication).
"""

from __future__ import annotations

import base64
import binascii
import json
import logging
import re
import time
from collections.abc import Callable
from typing import NamedTuple

from minibroker.config.sasl import unsecured_validator_options
from minibroker.security.sasl.errors import SaslAuthenticationError, SaslCredentialsError

log = logging.getLogger("minibroker.security.sasl")

_INTERNAL_ERROR = "Authentication could not be performed due to an internal error on the server"


class TokenValidationError(Exception):
    """A token the validator refuses: ``status`` is "invalid_token" or "insufficient_scope" (with the
    required ``scope``), as the KIP-255 error challenge carries them."""

    def __init__(self, message: str, status: str = "invalid_token", scope: str | None = None,
                 openid_configuration: str | None = None):
        super().__init__(message)
        self.status = status
        self.scope = scope
        self.openid_configuration = openid_configuration


class OAuthBearerToken(NamedTuple):
    principal_name: str
    lifetime_ms: int  # expiry, milliseconds since the epoch
    scope: frozenset = frozenset()
    start_time_ms: int | None = None


def _b64url_json(part: str) -> dict:
    try:
        standard = part.replace("-", "+").replace("_", "/") + "=" * (-len(part) % 4)
        raw = base64.b64decode(standard, validate=True)
    except (binascii.Error, ValueError):
        raise TokenValidationError("malformed Base64 URL encoded value") from None
    try:
        value = json.loads(raw)
    except ValueError:
        raise TokenValidationError("malformed JSON") from None
    if not isinstance(value, dict):
        raise TokenValidationError("malformed JSON")
    return value


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


class UnsecuredJwsValidator:
    """Kafka's unsecured validator, configured from the login module's options."""

    def __init__(self, options: dict[str, str], clock: Callable[[], float] = time.time):
        """``options``: the OAuthBearerLoginModule's (minibroker/config/sasl.py reads them); raises
        ValueError."""
        self.principal_claim, self.scope_claim, self.required_scope, self.clock_skew_ms = \
            unsecured_validator_options(options)
        self._clock = clock

    def __call__(self, token: str) -> OAuthBearerToken:
        if ".." in token:
            raise TokenValidationError("Malformed compact serialization contains '..'")
        parts = token.split(".")
        if len(parts) != 3:
            raise TokenValidationError(
                "Unsecured JWS compact serializations must have 3 dot-separated Base64URL-encoded values")
        header, claims = _b64url_json(parts[0]), _b64url_json(parts[1])
        if header.get("alg") != "none":
            raise TokenValidationError("Unsecured JWS must have 'none' for an algorithm")
        if parts[2]:
            raise TokenValidationError("Unsecured JWS must not contain a digital signature")
        scope = self._scope(claims.get(self.scope_claim))
        exp = claims.get("exp")
        if exp is None:
            raise TokenValidationError("No expiration time in JWT")
        if not _is_number(exp):
            raise TokenValidationError(f"The 'exp' claim was not of type Number: {type(exp).__name__}")
        principal = claims.get(self.principal_claim)
        if principal is None or (isinstance(principal, str) and not principal.strip()):
            raise TokenValidationError(f"No principal name in JWT claim: {self.principal_claim}")
        if not isinstance(principal, str):
            raise TokenValidationError(f"The {self.principal_claim} claim had the incorrect type: "
                                       f"{type(principal).__name__}")
        iat = claims.get("iat")
        if iat is not None and not _is_number(iat):
            raise TokenValidationError(f"The 'iat' claim was not of type Number: {type(iat).__name__}")
        now_ms = int(self._clock() * 1000)
        if iat is not None and 1000 * iat > now_ms + self.clock_skew_ms:
            raise TokenValidationError(f"The Issued At value ({iat} seconds) was after the indicated time "
                                       f"({now_ms} ms) plus allowable clock skew ({self.clock_skew_ms} ms)")
        if now_ms - self.clock_skew_ms >= 1000 * exp:
            raise TokenValidationError(f"The indicated time ({now_ms} ms) minus allowable clock skew "
                                       f"({self.clock_skew_ms} ms) was on or after the Expiration Time value "
                                       f"({exp} seconds)")
        if iat is not None and exp <= iat:
            raise TokenValidationError(f"The Expiration Time time ({exp} seconds) was not after the Issued "
                                       f"At time ({iat} seconds)")
        for element in self.required_scope:
            if element not in scope:
                raise TokenValidationError(
                    f"The provided scope ({sorted(scope)}) was missing a required scope ({element}). All "
                    f"required scope elements: {self.required_scope}", status="insufficient_scope",
                    scope="[" + ", ".join(self.required_scope) + "]")
        return OAuthBearerToken(principal, round(exp * 1000), scope,
                                None if iat is None else round(iat * 1000))

    @staticmethod
    def _scope(value) -> frozenset:
        if value is None:
            return frozenset()
        if isinstance(value, str):
            return frozenset([value.strip()]) if value.strip() else frozenset()
        if isinstance(value, list):
            return frozenset(str(v).strip() for v in value if str(v).strip())
        raise TokenValidationError(f"The scope claim was not of type List: {type(value).__name__}")


def listener_validator(settings) -> Callable[[str], OAuthBearerToken]:
    """The token validator of a listener's SaslListenerSettings (minibroker/config/sasl.py): its server
    callback handler's function, else Kafka's unsecured validator with the login module's options."""
    if settings.oauth_hook is not None:
        return hook_validator(settings.oauth_hook_spec, settings.oauth_hook)
    return UnsecuredJwsValidator(settings.oauth_options)


def hook_validator(spec: str, function: Callable) -> Callable[[str], OAuthBearerToken]:
    """A validator calling ``function`` (the hook ``spec`` names) and checking what it returns."""

    def validate(token: str) -> OAuthBearerToken:
        result = function(token)
        try:
            principal, lifetime_ms = result
        except (TypeError, ValueError):
            raise SaslCredentialsError(f"{_INTERNAL_ERROR}: {spec} returned {result!r}, not "
                                       "(principal_name, lifetime_ms)") from None
        if not isinstance(principal, str) or not principal or not isinstance(lifetime_ms, int):
            raise SaslCredentialsError(f"{_INTERNAL_ERROR}: {spec} returned {result!r}, not "
                                       "(principal_name: str, lifetime_ms: int)")
        return OAuthBearerToken(principal, lifetime_ms)

    return validate


_SASLNAME = r"(?:[\x01-\x2b\x2d-\x3c\x3e-\x7f]|=2C|=3D)+"
_KEY = r"[A-Za-z]+"
_VALUE = r"[\x21-\x7e \t\r\n]+"
_INITIAL_RESPONSE = re.compile(
    rf"n,(?:a=(?P<authzid>{_SASLNAME}))?,\x01(?P<kvpairs>(?:{_KEY}={_VALUE}\x01)*)\x01")
_AUTH = re.compile(r"(?P<scheme>\w+) +(?P<token>[-_~+/.a-zA-Z0-9]+=*)")


class OAuthBearerServer:
    """One OAUTHBEARER exchange; ``validate(token)`` returns an OAuthBearerToken or raises
    TokenValidationError."""

    def __init__(self, validate: Callable[[str], OAuthBearerToken]):
        self._validate = validate
        self._error_challenge: str | None = None
        self.complete = False
        self.authorization_id: str | None = None
        self.lifetime_ms: int | None = None
        self.extensions: dict[str, str] = {}

    def evaluate(self, token: bytes) -> bytes:
        if token == b"\x01" and self._error_challenge is not None:
            raise SaslAuthenticationError(self._error_challenge)  # the client acknowledged our error
        self._error_challenge = None
        message = token.decode("utf-8", "replace")
        m = _INITIAL_RESPONSE.fullmatch(message)
        if m is None:
            raise SaslCredentialsError("Invalid OAUTHBEARER client first message")
        pairs = dict(item.split("=", 1) for item in m["kvpairs"].split("\x01") if item)
        auth = pairs.pop("auth", None)
        if auth is None:
            raise SaslCredentialsError("Invalid OAUTHBEARER client first message: 'auth' not specified")
        a = _AUTH.fullmatch(auth)
        if a is None:
            raise SaslCredentialsError("Invalid OAUTHBEARER client first message: invalid 'auth' format")
        if a["scheme"].lower() != "bearer":
            raise SaslCredentialsError(f"Invalid scheme in OAUTHBEARER client first message: {a['scheme']}")
        try:
            validated = self._validate(a["token"])
        except TokenValidationError as e:
            log.debug("OAUTHBEARER token refused: %s", e)
            self._error_challenge = self._json_error(e)
            return self._error_challenge.encode("utf-8")
        except SaslCredentialsError:
            raise
        except Exception as e:  # the hook failed: Kafka's internal-error answer
            raise SaslCredentialsError(f"{_INTERNAL_ERROR}: {type(e).__name__}: {e}") from e
        authzid = m["authzid"]
        if authzid and authzid != validated.principal_name:
            raise SaslAuthenticationError(
                f"Authentication failed: Client requested an authorization id ({authzid}) that is different "
                f"from the token's principal name ({validated.principal_name})")
        self.extensions = pairs  # the unsecured validator accepts every extension, as Kafka's does
        self.authorization_id = validated.principal_name
        self.lifetime_ms = validated.lifetime_ms
        self.complete = True
        return b""

    @staticmethod
    def _json_error(e: TokenValidationError) -> str:
        # Kafka's exact layout: {"status":"x", "scope":"y", "openid-configuration":"z"}
        out = '{"status":' + json.dumps(e.status)
        if e.scope is not None:
            out += ', "scope":' + json.dumps(e.scope)
        if e.openid_configuration is not None:
            out += ', "openid-configuration":' + json.dumps(e.openid_configuration)
        return out + "}"
