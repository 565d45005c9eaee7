"""AlterClientQuotas: v0-v1 (KIP-546).

Behaviour: each entry sets or removes quota keys of one entity; an entry is judged on its own, with
its own error code, as Kafka's controller judges it, and all the valid entries are applied together
and saved at once (minibroker-client-quotas.json, loaded at start-up). ``validate_only`` judges without
applying. Entities: ``user`` and/or ``client-id`` (keys producer_byte_rate, consumer_byte_rate,
request_percentage, controller_mutation_rate), or ``ip`` alone (connection_creation_rate); a null name
is the default entity. INVALID_REQUEST for an empty entity, an unknown entity type, an empty name, ip
combined with another type, an ip name that does not resolve, a key not valid for the entity, a key
twice in one entry, the same entity twice in one request (the second is refused), a value <= 0, a
fraction for an integral key, or a value too large for its type. Removing a key that is not set
changes nothing (no error). A failed save answers UNKNOWN_SERVER_ERROR for the entries it would have
applied, and nothing changes. Changes apply to the next request of every client.
Authorization: ALTER_CONFIGS on the cluster (CLUSTER_AUTHORIZATION_FAILED for every entry otherwise).
Version notes: v1 is flexible.
controller_mutation_rate is enforced by CreateTopics, CreatePartitions and DeleteTopics
(minibroker/services/quotas.py, MutationQuota).
"""

from __future__ import annotations

from minibroker.errors import ErrorCode
from minibroker.handlers.registry import handles
from minibroker.protocol.codec import Struct
from minibroker.security.acls import AclOperation, ResourceType
from minibroker.security.authorizer import authorize


def _entity(entry) -> list[Struct]:
    return [Struct(entity_type=e.entity_type, entity_name=e.entity_name) for e in entry.entity]


def error_response(request, code: int, message: str | None) -> Struct:
    """Every entry refused with ``code`` (authorization)."""
    return Struct(throttle_time_ms=0, entries=[
        Struct(error_code=int(code), error_message=message, entity=_entity(e)) for e in request.entries])


@handles(49, (0, 1))
def handle_alter_client_quotas(broker, header, request):
    if not authorize(broker, header, AclOperation.ALTER_CONFIGS, ResourceType.CLUSTER):
        return error_response(request, ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                              "Cluster authorization failed.")
    results = broker.client_quotas.alter(request.entries, request.validate_only)
    return Struct(throttle_time_ms=0, entries=[
        Struct(error_code=code, error_message=message, entity=_entity(entry))
        for entry, (code, message) in zip(request.entries, results, strict=True)])
