"""SaslHandshake: v0-v1.

Behaviour: on a SASL_PLAINTEXT or SASL_SSL listener the connection's SaslAuthenticator
(minibroker/security/sasl/authenticator.py) answers: the offered mechanisms, with error 0 when the
client's is one of them, else UNSUPPORTED_SASL_MECHANISM (33) and the connection closes after the
answer. On an authenticated connection a handshake starts re-authentication (KIP-368) when the session
has a lifetime, else it is answered ILLEGAL_SASL_STATE (34), as Kafka's request handler answers it. On
PLAINTEXT and SSL listeners: ILLEGAL_SASL_STATE with no mechanisms, the connection stays open (Kafka).
Version notes: v0 makes the following SASL tokens travel unframed (an int32 size, no request header),
which the connection hands to the authenticator; v1 sends them in SaslAuthenticate requests.
"""

from __future__ import annotations

from minibroker.errors import ErrorCode
from minibroker.handlers.registry import handles
from minibroker.protocol.codec import Struct

API_KEY = 17


@handles(API_KEY, (0, 1))
def handle_sasl_handshake(broker, header, request):
    sasl = header.connection.sasl
    if sasl is None:
        return Struct(error_code=ErrorCode.ILLEGAL_SASL_STATE, mechanisms=[])
    error_code, mechanisms = sasl.handshake(request.mechanism, header.api_version)
    return sasl.answer(Struct(error_code=error_code, mechanisms=mechanisms))
