"""KafkaPrincipal: who a connection is, as Kafka's authorizer and quotas see it.

A connection starts as ``User:ANONYMOUS`` (PLAINTEXT, and SSL without a client certificate, as Kafka's
DefaultKafkaPrincipalBuilder answers); an SSL client certificate (mapped by
``ssl.principal.mapping.rules``) or a SASL login replaces it.
"""

from __future__ import annotations

from typing import NamedTuple

USER_TYPE = "User"


class KafkaPrincipal(NamedTuple):
    principal_type: str
    name: str

    def __str__(self) -> str:
        return f"{self.principal_type}:{self.name}"

    @classmethod
    def parse(cls, text: str) -> KafkaPrincipal:
        """``User:alice`` -> KafkaPrincipal("User", "alice"); the name may itself hold colons."""
        principal_type, sep, name = text.partition(":")
        if not sep or not principal_type:
            raise ValueError(f"principal {text!r} is not of the form Type:name")
        return cls(principal_type, name)


ANONYMOUS = KafkaPrincipal(USER_TYPE, "ANONYMOUS")


def user(name: str) -> KafkaPrincipal:
    return KafkaPrincipal(USER_TYPE, name)
