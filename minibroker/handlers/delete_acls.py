"""DeleteAcls: v0-v3.

Behaviour: needs ALTER on the cluster (else every filter gets CLUSTER_AUTHORIZATION_FAILED); without an
authorizer every filter gets SECURITY_DISABLED, as Kafka answers. A filter with a resource or pattern type
Kafka does not know gets INVALID_REQUEST "Unknown patternFilter.", an unknown operation or permission
"Unknown entryFilter."; the others are applied together, against the same set of ACLs (as Kafka's
controller applies them atomically): every matching ACL is removed and listed under each filter that
matched it. The change is saved to ``minibroker-acls.json``; a save that fails answers every filter
UNKNOWN_SERVER_ERROR and removes nothing.
Version notes: v0 has no pattern type (LITERAL; ANY is read as LITERAL). A request Kafka cannot parse
closes the connection, as Kafka's does: a v0 filter with another pattern type, or a field set to
UNKNOWN (0).
"""

from __future__ import annotations

import logging

from minibroker.errors import ErrorCode
from minibroker.handlers.describe_acls import refusal, wire_filter
from minibroker.handlers.registry import handles
from minibroker.protocol.codec import Struct
from minibroker.security.acls import AclOperation

log = logging.getLogger("minibroker.security")


def _result(code=0, message=None, matching=()) -> Struct:
    return Struct(error_code=int(code), error_message=message, matching_acls=[
        Struct(error_code=0, error_message=None, resource_type=int(a.resource_type),
               resource_name=a.resource_name, pattern_type=int(a.pattern_type), principal=a.principal,
               host=a.host, operation=int(a.operation), permission_type=int(a.permission))
        for a in matching])


@handles(31, (0, 3))
def handle_delete_acls(broker, header, request):
    version = header.api_version
    filters = [wire_filter(version, f, "DeleteAcls") for f in request.filters]
    refused = refusal(broker, header, AclOperation.ALTER)
    if refused is not None:
        return Struct(throttle_time_ms=0, filter_results=[_result(*refused) for _ in filters])
    results: list = []
    valid = []
    for f in filters:
        if f.pattern_unknown():
            results.append(_result(ErrorCode.INVALID_REQUEST, "Unknown patternFilter."))
        elif f.entry_unknown():
            results.append(_result(ErrorCode.INVALID_REQUEST, "Unknown entryFilter."))
        else:
            valid.append(f)
            results.append(None)
    try:
        matched = iter(broker.authorizer.store.delete(valid))
    except OSError as e:
        log.error("could not save ACLs: %s", e)
        failed = _result(ErrorCode.UNKNOWN_SERVER_ERROR, f"The ACLs could not be saved: {e.strerror or e}")
        return Struct(throttle_time_ms=0, filter_results=[failed if r is None else r for r in results])
    return Struct(throttle_time_ms=0, filter_results=[_result(matching=next(matched)) if r is None else r
                                                      for r in results])
