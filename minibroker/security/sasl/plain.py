"""SASL/PLAIN (RFC 4616) against the users of the listener's JAAS configuration.

Users are the ``user_<name>="<password>"`` options of the ``PlainLoginModule`` entry in
``listener.name.<listener>.plain.sasl.jaas.config``, as Kafka's PlainServerCallbackHandler reads them.
The token is ``[authzid] NUL authcid NUL password``; an authzid other than the user fails, as in Kafka.
Passwords are compared in constant time.
"""

from __future__ import annotations

import hmac

from minibroker.security.sasl.errors import SaslAuthenticationError


class PlainServer:
    """One PLAIN exchange: a single client token, an empty answer."""

    lifetime_ms = None  # passwords do not expire

    def __init__(self, users: dict[str, str]):
        self._users = users
        self.complete = False
        self.authorization_id: str | None = None

    def evaluate(self, token: bytes) -> bytes:
        text = token.decode("utf-8", "replace")
        parts = text.split("\0")
        if len(parts) != 3:  # Kafka counts up to 4
            raise SaslAuthenticationError(
                f"Invalid SASL/PLAIN response: expected 3 tokens, got {min(len(parts), 4)}")
        authzid, username, password = parts
        if not username:
            raise SaslAuthenticationError("Authentication failed: username not specified")
        if not password:
            raise SaslAuthenticationError("Authentication failed: password not specified")
        expected = self._users.get(username)
        # compare even for an unknown user, so the time taken does not say whether the user exists
        matches = hmac.compare_digest((expected or "\0").encode("utf-8"), password.encode("utf-8"))
        if expected is None or not matches:
            raise SaslAuthenticationError("Authentication failed: Invalid username or password")
        if authzid and authzid != username:
            raise SaslAuthenticationError(
                "Authentication failed: Client requested an authorization id that is different from username")
        self.authorization_id = username
        self.complete = True
        return b""
