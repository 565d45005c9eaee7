"""DescribeUserScramCredentials: v0.

Behaviour: the mechanisms and iteration counts of each user's SCRAM credentials (never salts or keys),
as Kafka's ScramImage answers: null or empty ``users`` lists every user with a credential; a user
without one is RESOURCE_NOT_FOUND (91) "Attempt to describe a user credential that does not exist: <user>";
a user named twice DUPLICATE_RESOURCE (92). Needs DESCRIBE on the cluster when an authorizer is configured
(else CLUSTER_AUTHORIZATION_FAILED at the top level and for each user asked).
Version notes: v0 only (flexible).
"""

from __future__ import annotations

from minibroker.errors import ErrorCode
from minibroker.handlers.registry import handles
from minibroker.protocol.codec import Struct
from minibroker.security.acls import AclOperation, ResourceType
from minibroker.security.authorizer import authorize

API_KEY = 50
CLUSTER_AUTHORIZATION_MESSAGE = "Cluster authorization failed."


@handles(API_KEY, (0, 0))
def handle_describe_user_scram_credentials(broker, header, request):
    asked = None if request.users is None else [u.name for u in request.users]
    if not authorize(broker, header, AclOperation.DESCRIBE, ResourceType.CLUSTER):
        code, message = ErrorCode.CLUSTER_AUTHORIZATION_FAILED, CLUSTER_AUTHORIZATION_MESSAGE
        return Struct(throttle_time_ms=0, error_code=code, error_message=message, results=[
            Struct(user="", error_code=code, error_message=message, credential_infos=[])
            for _ in asked or ()])
    return Struct(throttle_time_ms=0, error_code=0, error_message=None, results=[
        Struct(user=d.user, error_code=d.error_code, error_message=d.error_message,
               credential_infos=[Struct(mechanism=m, iterations=i) for m, i in d.credentials])
        for d in broker.scram_credentials.describe(asked)])
