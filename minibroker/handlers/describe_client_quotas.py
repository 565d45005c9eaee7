"""DescribeClientQuotas: v0-v1 (KIP-546).

Behaviour: the entities whose quotas match every filter component are listed with all their values.
A component matches its entity type by exact name (match type 0), as the default entity (1, name null)
or by any name (2); with ``strict``, only entities made of exactly the filtered types match. An empty
filter lists every entity. Errors answer the whole request, with entries null: INVALID_REQUEST for an
empty or repeated entity type, a match string where the match type takes none (or none where it needs
one), an unknown match type, and an ip component beside a user or client-id one; UNSUPPORTED_VERSION for
an entity type other than user, client-id and ip, as Kafka answers.
Authorization: DESCRIBE_CONFIGS on the cluster (CLUSTER_AUTHORIZATION_FAILED otherwise).
Version notes: v1 is flexible.
"""

from __future__ import annotations

from minibroker.errors import ErrorCode, KafkaError
from minibroker.handlers.registry import handles
from minibroker.protocol.codec import Struct
from minibroker.security.acls import AclOperation, ResourceType
from minibroker.security.authorizer import authorize


def error_response(code: int, message: str | None) -> Struct:
    return Struct(throttle_time_ms=0, error_code=int(code), error_message=message, entries=None)


@handles(48, (0, 1))
def handle_describe_client_quotas(broker, header, request):
    if not authorize(broker, header, AclOperation.DESCRIBE_CONFIGS, ResourceType.CLUSTER):
        return error_response(ErrorCode.CLUSTER_AUTHORIZATION_FAILED, "Cluster authorization failed.")
    try:
        found = broker.client_quotas.describe(request.components, request.strict)
    except KafkaError as e:
        return error_response(e.code, e.message)
    entries = [Struct(entity=[Struct(entity_type=t, entity_name=n) for t, n in entity],
                      values=[Struct(key=k, value=v) for k, v in sorted(values.items())])
               for entity, values in found]
    return Struct(throttle_time_ms=0, error_code=0, error_message=None, entries=entries)
