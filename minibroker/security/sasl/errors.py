"""How a SASL exchange fails, as Kafka's SaslServer implementations throw.

``SaslAuthenticationError``: the message is meant for the client (Kafka's SaslAuthenticationException)
and goes into the SaslAuthenticate error message. ``SaslCredentialsError``: the reason is for the
broker's log only; the client gets Kafka's generic "Authentication failed during authentication due to
invalid credentials with SASL mechanism X", so nothing about which users exist leaks (SaslException).
"""

from __future__ import annotations


class SaslFailure(Exception):
    """Any failed SASL exchange; the connection is closed after the failure is answered."""


class SaslAuthenticationError(SaslFailure):
    """Failed, with a message the client may see."""


class SaslCredentialsError(SaslFailure):
    """Failed; the message is logged, the client sees a generic one."""
