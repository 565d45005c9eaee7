"""SaslAuthenticate: v0-v2.

Behaviour: carries one SASL token of the mechanism chosen by SaslHandshake v1 to the connection's
SaslAuthenticator (minibroker/security/sasl/authenticator.py) and its answer back. A failed exchange is
SASL_AUTHENTICATION_FAILED (58) with its message, answered after
``connection.failed.authentication.delay.ms``, and the connection is then closed (when the client closes
it, or FAILED_AUTH_LINGER_S later: minibroker/server/connection.py). Once authenticated (and
on PLAINTEXT and SSL listeners), ILLEGAL_SASL_STATE (34) "SaslAuthenticate request received after
successful authentication", as Kafka's request handler answers; the connection stays open.
Version notes: v1+ carries ``session_lifetime_ms`` (KIP-368): the least of ``connections.max.reauth.ms``
and the time left on an expiring credential (an OAUTHBEARER token), 0 when the session does not expire;
v2 flexible.
"""

from __future__ import annotations

from minibroker.errors import ErrorCode
from minibroker.handlers.registry import handles
from minibroker.protocol.codec import Struct

API_KEY = 36
_AFTER_AUTHENTICATION = "SaslAuthenticate request received after successful authentication"


@handles(API_KEY, (0, 2))
def handle_sasl_authenticate(broker, header, request):
    sasl = header.connection.sasl
    if sasl is None:
        return Struct(error_code=ErrorCode.ILLEGAL_SASL_STATE, error_message=_AFTER_AUTHENTICATION,
                      auth_bytes=b"", session_lifetime_ms=0)
    error_code, message, auth_bytes, lifetime_ms = sasl.authenticate(request.auth_bytes)
    return sasl.answer(Struct(error_code=error_code, error_message=message, auth_bytes=auth_bytes,
                              session_lifetime_ms=lifetime_ms))
