"""SASL authentication on SASL_PLAINTEXT and SASL_SSL listeners (docs/security.md, "SASL").

- ``authenticator``: the per-connection state machine KafkaConnection asks (SaslAuthenticator), and the
  broker-wide SaslListeners that builds it; failed-authentication logging.
- each listener's mechanisms and their configuration are read and checked by minibroker/config/sasl.py.
- ``plain``, ``scram``, ``oauthbearer``: the mechanisms' server sides (JAAS config text:
  minibroker/config/jaas.py).
SCRAM credentials live in minibroker/security/scram_credentials.py.
"""

from __future__ import annotations

from minibroker.security.sasl.errors import SaslAuthenticationError, SaslCredentialsError, SaslFailure

__all__ = ["SaslAuthenticationError", "SaslCredentialsError", "SaslFailure"]
