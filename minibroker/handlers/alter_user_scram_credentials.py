"""AlterUserScramCredentials: v0.

Behaviour: upsertions and deletions of SCRAM credentials (minibroker/security/scram_credentials.py),
checked as Kafka's controller does: one alteration per user per request (DUPLICATE_RESOURCE 92), an
empty user name or iterations outside [4096, 16384] UNACCEPTABLE_CREDENTIAL (93), a mechanism other than
1 (SCRAM-SHA-256) or 2 (SCRAM-SHA-512) UNSUPPORTED_SASL_MECHANISM (33), deleting a credential that does
not exist RESOURCE_NOT_FOUND (91). The client sends the salted password; the broker keeps StoredKey and
ServerKey derived from it. Accepted changes are saved together; a failed save answers them
UNKNOWN_SERVER_ERROR and changes nothing. Needs ALTER on the cluster when an authorizer is configured
(else CLUSTER_AUTHORIZATION_FAILED for every user named).
Version notes: v0 only (flexible).
"""

from __future__ import annotations

from minibroker.errors import ErrorCode
from minibroker.handlers.registry import handles
from minibroker.protocol.codec import Struct
from minibroker.security.acls import AclOperation, ResourceType
from minibroker.security.authorizer import authorize
from minibroker.security.scram_credentials import Deletion, Upsertion

API_KEY = 51
CLUSTER_AUTHORIZATION_MESSAGE = "Cluster authorization failed."


@handles(API_KEY, (0, 0))
def handle_alter_user_scram_credentials(broker, header, request):
    if not authorize(broker, header, AclOperation.ALTER, ResourceType.CLUSTER):
        users = sorted({d.name for d in request.deletions} | {u.name for u in request.upsertions})
        return Struct(throttle_time_ms=0, results=[
            Struct(user=name, error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                   error_message=CLUSTER_AUTHORIZATION_MESSAGE) for name in users])
    results = broker.scram_credentials.alter(
        [Deletion(d.name, d.mechanism) for d in request.deletions],
        [Upsertion(u.name, u.mechanism, u.iterations, bytes(u.salt), bytes(u.salted_password))
         for u in request.upsertions])
    return Struct(throttle_time_ms=0, results=[
        Struct(user=r.user, error_code=r.error_code, error_message=r.error_message) for r in results])
