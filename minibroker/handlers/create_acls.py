"""CreateAcls: v0-v3.

Behaviour: needs ALTER on the cluster (else every creation gets CLUSTER_AUTHORIZATION_FAILED); without an
authorizer every creation gets SECURITY_DISABLED, as Kafka answers. Each creation is validated on its own
(INVALID_REQUEST with Kafka's message: a CLUSTER resource not named ``kafka-cluster``, an empty name, a
resource type UNKNOWN/ANY, a pattern type other than LITERAL/PREFIXED, an operation UNKNOWN/ANY, a
permission other than ALLOW/DENY; and a principal that is not ``Type:name``); the valid ones are added
together (one already present is a success and no change) and saved to ``minibroker-acls.json``. A save
that fails (disk full) answers those creations UNKNOWN_SERVER_ERROR and changes nothing.
Version notes: v0 has no pattern type (LITERAL). A request Kafka cannot parse closes the connection, as
Kafka's does: a creation with a field set to UNKNOWN (0).
"""

from __future__ import annotations

import logging

from minibroker.errors import ErrorCode, KafkaError
from minibroker.handlers.describe_acls import refusal
from minibroker.handlers.registry import CloseConnection, handles
from minibroker.protocol.codec import Struct
from minibroker.security.acls import AclOperation, PatternType, binding_from_wire, validate_new_binding

log = logging.getLogger("minibroker.security")


def _result(code=0, message=None) -> Struct:
    return Struct(error_code=int(code), error_message=message)


@handles(30, (0, 3))
def handle_create_acls(broker, header, request):
    version = header.api_version
    for c in request.creations:
        pattern = c.resource_pattern_type if version >= 1 else PatternType.LITERAL  # v0 has no pattern field
        if 0 in (pattern, c.resource_type, c.permission_type, c.operation):
            raise CloseConnection("CreateAcls creations contain unknown elements")
    refused = refusal(broker, header, AclOperation.ALTER)
    if refused is not None:
        return Struct(throttle_time_ms=0, results=[_result(*refused) for _ in request.creations])
    results = []
    valid = []
    for c in request.creations:
        pattern = c.resource_pattern_type if version >= 1 else PatternType.LITERAL
        binding = binding_from_wire(c.resource_type, c.resource_name, pattern, c.principal, c.host,
                                    c.operation, c.permission_type)
        try:
            validate_new_binding(binding)
        except KafkaError as e:
            results.append(_result(e.code, e.message))
            continue
        valid.append(binding)
        results.append(None)
    try:
        broker.authorizer.store.create(valid)
        saved = _result()
    except OSError as e:
        log.error("could not save ACLs: %s", e)
        saved = _result(ErrorCode.UNKNOWN_SERVER_ERROR, f"The ACLs could not be saved: {e.strerror or e}")
    return Struct(throttle_time_ms=0, results=[saved if r is None else r for r in results])
