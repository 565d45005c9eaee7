"""Errors with Kafka's codes: one exception type that carries a code.

Storage, records and coordinators raise ``KafkaError``; handlers turn it into the
per-partition (or per-group) error code of their response, so one bad partition never
fails a whole request. Framing violations are ``ProtocolViolation`` and close the connection.
"""

from __future__ import annotations

from minibroker.protocol.error_codes import ErrorCode

__all__ = ["ErrorCode", "KafkaError", "ProtocolViolation"]


class KafkaError(Exception):
    """A failure the client should see as a Kafka error code."""

    def __init__(self, code: ErrorCode, message: str | None = None, **details):
        super().__init__(message or code.name)
        self.code = ErrorCode(code)
        self.message = message
        self.details = details  # e.g. record_errors for Produce v8+, original offset for duplicates


class ProtocolViolation(Exception):
    """The peer broke framing or sent an undecodable request: close its connection."""
