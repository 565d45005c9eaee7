"""SaslAuthenticator: the SASL state of one connection on a SASL_PLAINTEXT or SASL_SSL listener, as
Kafka's SaslServerAuthenticator and KafkaChannel keep it.

States and what each lets through (anything else closes the connection, as Kafka does: "Unexpected
Kafka request of type X during SASL handshake"):

- ``handshake``: ApiVersions and SaslHandshake. A mechanism the listener does not offer is answered
  UNSUPPORTED_SASL_MECHANISM with the offered list, then the connection is closed.
- ``authenticate`` (after SaslHandshake v1): SaslAuthenticate requests carry the mechanism's tokens; a
  SaslHandshake here is answered ILLEGAL_SASL_STATE and closes the connection.
- ``raw`` (after SaslHandshake v0): the client sends bare tokens framed by an int32 size only (no
  request header) and gets bare answers framed the same way, until the mechanism completes.
- ``complete``: the principal (``User:<name>``) is set on the connection and every API is served. A
  SaslHandshake starts re-authentication (KIP-368) when the session has a lifetime
  (``connections.max.reauth.ms`` > 0 or an expiring OAUTHBEARER token) and the last re-authentication
  began a second or more ago; otherwise it, like any SaslAuthenticate, is answered ILLEGAL_SASL_STATE and
  the connection stays open. Re-authentication must keep the mechanism and the principal. Once the
  session lifetime has passed, the next request other than such a SaslHandshake closes the connection.

A failed exchange is answered SASL_AUTHENTICATION_FAILED (58) with its message, after
``connection.failed.authentication.delay.ms``, and the connection is then closed. Before authentication a
frame may not exceed ``sasl.server.max.receive.size``. Failures are logged at INFO by
FailedAuthenticationLog: at most one line per second per client host and ten per second in all, each
line counting what was held back since, so a client failing in a loop cannot flood the log.
"""

from __future__ import annotations

import asyncio
import logging
import struct
import time

from minibroker.config.sasl import OAUTHBEARER, PLAIN, SaslListenerSettings, sasl_listener_settings
from minibroker.errors import ErrorCode
from minibroker.protocol.codec import API_NAMES
from minibroker.security.principal import user
from minibroker.security.sasl.errors import SaslAuthenticationError, SaslCredentialsError, SaslFailure
from minibroker.security.sasl.oauthbearer import OAuthBearerServer, listener_validator
from minibroker.security.sasl.plain import PlainServer
from minibroker.security.sasl.scram import MECHANISMS as SCRAM_MECHANISMS
from minibroker.security.sasl.scram import ScramServer

log = logging.getLogger("minibroker.security.sasl")

SASL_HANDSHAKE, API_VERSIONS, SASL_AUTHENTICATE = 17, 18, 36
HANDSHAKE, AUTHENTICATE, RAW, COMPLETE, FAILED = "handshake", "authenticate", "raw", "complete", "failed"
MIN_REAUTH_INTERVAL = 1.0  # seconds between two re-authentications of one connection (Kafka's)
_SIZE = struct.Struct(">i")


class FailedAuthenticationLog:
    """INFO lines for failed authentications, rate-limited: one line per second per client host at most,
    and ``MAX_LINES_PER_SECOND`` in all; a line says how many failures were held back before it."""

    MAX_LINES_PER_SECOND = 10
    MAX_HOSTS = 4096  # hosts remembered; beyond it the quiet ones are forgotten

    def __init__(self, clock=time.monotonic):
        self._clock = clock
        self._hosts: dict[str, list] = {}  # host -> [time of its last line, failures held back since]
        self._window = 0.0
        self._lines_in_window = 0
        self._held_overall = 0

    def failed(self, host: str, listener: str, mechanism: str | None, reason: str) -> bool:
        """Log (or count) one failure; True when a line was written."""
        now = self._clock()
        entry = self._hosts.get(host)
        if entry is not None and now - entry[0] < 1.0:
            entry[1] += 1
            return False
        if now - self._window >= 1.0:
            self._window, self._lines_in_window = now, 0
        if self._lines_in_window >= self.MAX_LINES_PER_SECOND:
            self._held_overall += 1
            return False
        self._lines_in_window += 1
        held = entry[1] if entry is not None else 0
        if len(self._hosts) >= self.MAX_HOSTS:
            self._hosts = {h: e for h, e in self._hosts.items() if now - e[0] < 1.0}
        self._hosts[host] = [now, 0]
        overall, self._held_overall = self._held_overall, 0
        log.info("Failed authentication with %s on listener %s (mechanism %s): %s%s%s", host, listener,
                 mechanism or "none", reason,
                 f" ({held} more from this host not logged)" if held else "",
                 f" ({overall} more from other hosts not logged)" if overall else "")
        return True


class SaslListeners:
    """The broker's SASL side: each SASL listener's settings, the SCRAM credentials, the failure log.
    Built at start-up (minibroker/services/__init__.py); hands each new connection its authenticator."""

    def __init__(self, config, credentials):
        self.settings = sasl_listener_settings(config)
        self.oauth_validators = {name: listener_validator(s) for name, s in self.settings.items()
                                 if OAUTHBEARER in s.mechanisms}
        self.credentials = credentials  # ScramCredentialStore
        self.failure_log = FailedAuthenticationLog()
        self.failed_delay = config["connection.failed.authentication.delay.ms"] / 1000

    def authenticator(self, conn) -> SaslAuthenticator:
        return SaslAuthenticator(self, self.settings[conn.listener], conn)


class SaslAuthenticator:
    """The SASL state of one connection (see the module docstring); used from the event loop only."""

    def __init__(self, listeners: SaslListeners, settings: SaslListenerSettings, conn):
        self._listeners = listeners
        self.settings = settings
        self._conn = conn
        self.state = HANDSHAKE
        self.mechanism: str | None = None
        self._server = None
        self.failed = False
        self.session_expires_at: float | None = None  # time.monotonic() after which the session is over
        self._reauth_started_at: float | None = None
        self._reauthenticating = False
        self._bad_reauth_mechanism: str | None = None
        self.reauthentications = 0  # successful re-authentications of this connection
        self._max_request_size = conn.max_request_size
        conn.max_request_size = min(conn.max_request_size, settings.max_receive_size)

    @property
    def authenticated(self) -> bool:
        return self.state == COMPLETE

    @property
    def expects_raw_token(self) -> bool:
        return self.state == RAW

    # -- the connection's gate ------------------------------------------------------------------

    def refusal(self, api_key: int) -> str | None:
        """Why a request with ``api_key`` closes the connection now, or None to handle it."""
        if self.state == COMPLETE:
            expires = self.session_expires_at
            if expires is not None and time.monotonic() > expires:
                if api_key == SASL_HANDSHAKE and self._may_reauthenticate():
                    return None
                return "SASL session expired without re-authentication"
            return None
        if self.state == HANDSHAKE and api_key in (API_VERSIONS, SASL_HANDSHAKE):
            return None
        if self.state == AUTHENTICATE and api_key in (SASL_HANDSHAKE, SASL_AUTHENTICATE):
            return None
        phase = "handshake" if self.state == HANDSHAKE else "authentication"
        reason = f"Unexpected Kafka request of type {API_NAMES.get(api_key, api_key)} during SASL {phase}"
        self._fail(reason)
        return reason

    def _may_reauthenticate(self) -> bool:
        started = self._reauth_started_at
        return (self.session_expires_at is not None
                and (started is None or time.monotonic() - started >= MIN_REAUTH_INTERVAL))

    # -- SaslHandshake and SaslAuthenticate (minibroker/handlers) -------------------------------

    def handshake(self, mechanism: str, version: int) -> tuple[int, list[str]]:
        """(error code, mechanisms) of the SaslHandshake answer."""
        offered = list(self.settings.mechanisms)
        if self.state == COMPLETE:
            if not self._may_reauthenticate():
                return ErrorCode.ILLEGAL_SASL_STATE, []  # what Kafka's request handler answers
            self._reauth_started_at = time.monotonic()
            self._reauthenticating = True
            previous = self.mechanism
            self.state = HANDSHAKE
            if mechanism in offered and mechanism != previous:
                self._bad_reauth_mechanism = (f"SASL mechanism '{mechanism}' requested by client is not "
                                              f"supported for re-authentication of mechanism '{previous}'")
        elif self.state != HANDSHAKE:
            self._fail(f"Unexpected Kafka request of type SaslHandshake during SASL {self._what()}")
            return ErrorCode.ILLEGAL_SASL_STATE, []
        if mechanism not in offered:
            self._fail(f"Unsupported SASL mechanism {mechanism}", mechanism)
            return ErrorCode.UNSUPPORTED_SASL_MECHANISM, offered
        self.mechanism = mechanism
        self._server = self._new_server(mechanism)
        self.state = AUTHENTICATE if version >= 1 else RAW
        return ErrorCode.NONE, offered

    def authenticate(self, auth_bytes: bytes) -> tuple[int, str | None, bytes, int]:
        """(error code, error message, auth bytes, session lifetime ms) of the SaslAuthenticate answer."""
        if self.state == COMPLETE:
            return (ErrorCode.ILLEGAL_SASL_STATE, "SaslAuthenticate request received after successful "
                    "authentication", b"", 0)
        try:
            challenge, lifetime_ms = self._evaluate(bytes(auth_bytes))
        except SaslFailure as e:
            return ErrorCode.SASL_AUTHENTICATION_FAILED, self._client_message(e), b"", 0
        return ErrorCode.NONE, None, challenge, lifetime_ms

    def answer(self, response):
        """What a handler returns: ``response``, held back ``connection.failed.authentication.delay.ms``
        when the exchange failed (the connection closes once it is written)."""
        if self.failed and self._listeners.failed_delay > 0:
            return _after(self._listeners.failed_delay, response)
        return response

    # -- SaslHandshake v0's unframed tokens ------------------------------------------------------

    def raw_token(self, token: bytes) -> None:
        """One bare token after SaslHandshake v0: answered bare (int32 size, bytes), or, on failure, the
        connection is closed without an answer after the failed-authentication delay, as Kafka does."""
        conn = self._conn
        try:
            challenge, _ = self._evaluate(bytes(token))
        except SaslFailure:
            conn.transport.pause_reading()
            asyncio.get_running_loop().call_later(self._listeners.failed_delay, conn.close)
            return
        conn.transport.write(_SIZE.pack(len(challenge)) + challenge)

    # -- the exchange ---------------------------------------------------------------------------

    def _new_server(self, mechanism: str):
        if mechanism == PLAIN:
            return PlainServer(self.settings.plain_users)
        if mechanism == OAUTHBEARER:
            return OAuthBearerServer(self._listeners.oauth_validators[self.settings.listener])
        credentials = self._listeners.credentials
        return ScramServer(SCRAM_MECHANISMS[mechanism], lambda name: credentials.get(name, mechanism))

    def _evaluate(self, token: bytes) -> tuple[bytes, int]:
        """The mechanism's answer to ``token`` and, once complete, the session lifetime; raises SaslFailure
        (after logging it and marking the connection failed)."""
        try:
            if self._bad_reauth_mechanism is not None:
                raise SaslAuthenticationError(self._bad_reauth_mechanism)
            challenge = self._server.evaluate(token)
            lifetime_ms = self._complete() if self._server.complete else 0
        except SaslFailure as e:
            self._fail(str(e), self.mechanism)
            raise
        return challenge, lifetime_ms

    def _complete(self) -> int:
        server, conn = self._server, self._conn
        principal = user(server.authorization_id)
        if self._reauthenticating and principal != conn.principal:
            old = conn.principal
            raise SaslAuthenticationError(
                f"Cannot change principals during re-authentication from {old.principal_type}.{old.name}: "
                f"{principal.principal_type}.{principal.name}")
        lifetime_ms = self._session_lifetime_ms(server.lifetime_ms)
        conn.principal = principal
        conn.max_request_size = self._max_request_size
        log.debug("%s authenticated as %s with %s on listener %s%s", conn.peer, principal, self.mechanism,
                  self.settings.listener, f", session lifetime {lifetime_ms} ms" if lifetime_ms else "")
        self.state = COMPLETE
        if self._reauthenticating:
            self.reauthentications += 1
            self._reauthenticating = False
        self._server = None
        return lifetime_ms

    def _session_lifetime_ms(self, credential_expiry_ms: int | None) -> int:
        """Kafka's rule (KIP-368): the least of connections.max.reauth.ms (when > 0) and the time left
        until the credential expires (a token's ``exp``); 0, and no expiry, when neither applies."""
        max_reauth = self.settings.max_reauth_ms.get(self.mechanism, 0)
        if credential_expiry_ms is None and max_reauth <= 0:
            self.session_expires_at = None
            return 0
        candidates = [max_reauth] if max_reauth > 0 else []
        if credential_expiry_ms is not None:
            candidates.append(credential_expiry_ms - int(time.time() * 1000))
        lifetime_ms = max(0, min(candidates))
        self.session_expires_at = time.monotonic() + lifetime_ms / 1000
        return lifetime_ms

    def _what(self) -> str:
        return "re-authentication" if self._reauthenticating else "authentication"

    def _client_message(self, e: SaslFailure) -> str:
        if isinstance(e, SaslCredentialsError):  # the reason stays in our log, as Kafka keeps it
            return (f"Authentication failed during {self._what()} due to invalid credentials with SASL "
                    f"mechanism {self.mechanism}")
        return str(e)

    def _fail(self, reason: str, mechanism: str | None = None) -> None:
        self.failed = True
        self.state = FAILED
        conn = self._conn
        host = conn.address or (conn.peer[0] if conn.peer else "unknown")
        self._listeners.failure_log.failed(host, self.settings.listener, mechanism,
                                           f"{self._what()}: {reason}")


async def _after(delay: float, response):
    await asyncio.sleep(delay)
    return response
