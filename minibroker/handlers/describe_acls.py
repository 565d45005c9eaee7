"""DescribeAcls: v0-v3.

Behaviour: needs DESCRIBE on the cluster (else CLUSTER_AUTHORIZATION_FAILED); without an authorizer,
SECURITY_DISABLED "No Authorizer is configured on the broker", as Kafka answers. Otherwise every ACL the
filter matches (minibroker/security/acls.py AclFilter: ANY and null fields match anything, pattern type
MATCH finds the literal, wildcard and prefixed ACLs that apply to one name), grouped by resource pattern.
A filter code Kafka does not know (e.g. resource type 99) matches nothing, as in Kafka.
Version notes: v0 has no pattern type: it is LITERAL. A request Kafka cannot parse closes the
connection, as Kafka's does: a filter with a field set to UNKNOWN (0).
"""

from __future__ import annotations

from minibroker.errors import ErrorCode
from minibroker.handlers.registry import CloseConnection, handles
from minibroker.protocol.codec import Struct
from minibroker.security.acls import AclOperation, PatternType, ResourceType, filter_from_wire
from minibroker.security.authorizer import authorize

CLUSTER_AUTHORIZATION_MESSAGE = "Cluster authorization failed."


def refusal(broker, header, operation: AclOperation) -> tuple[ErrorCode, str] | None:
    """Why an ACL API cannot be answered: the cluster operation it needs is denied, or there is no
    authorizer (SECURITY_DISABLED); None when it can. Kafka checks in this order."""
    if not authorize(broker, header, operation, ResourceType.CLUSTER):
        return ErrorCode.CLUSTER_AUTHORIZATION_FAILED, CLUSTER_AUTHORIZATION_MESSAGE
    if broker.authorizer is None:
        return ErrorCode.SECURITY_DISABLED, "No Authorizer is configured."
    return None


def wire_filter(version: int, f, api: str):
    """The AclFilter of a DescribeAcls request or a DeleteAcls filter, validated as Kafka's request
    parser does (CloseConnection where it fails to parse)."""
    pattern = f.pattern_type_filter if version >= 1 else PatternType.LITERAL  # v0 has no pattern field
    if 0 in (pattern, f.resource_type_filter, f.operation, f.permission_type):
        raise CloseConnection(f"{api} filter contains UNKNOWN elements")
    return filter_from_wire(f.resource_type_filter, f.resource_name_filter, pattern, f.principal_filter,
                            f.host_filter, f.operation, f.permission_type)


@handles(29, (0, 3))
def handle_describe_acls(broker, header, request):
    acl_filter = wire_filter(header.api_version, request, "DescribeAcls")
    refused = refusal(broker, header, AclOperation.DESCRIBE)
    if refused is not None:
        if refused[0] == ErrorCode.SECURITY_DISABLED:
            refused = (refused[0], "No Authorizer is configured on the broker")
        return Struct(throttle_time_ms=0, error_code=int(refused[0]), error_message=refused[1], resources=[])
    by_pattern: dict[tuple, list] = {}
    for acl in broker.authorizer.store.matching(acl_filter):
        by_pattern.setdefault((acl.resource_type, acl.resource_name, acl.pattern_type), []).append(acl)
    resources = [
        Struct(resource_type=int(rtype), resource_name=name, pattern_type=int(pattern),
               acls=[Struct(principal=a.principal, host=a.host, operation=int(a.operation),
                            permission_type=int(a.permission))
                     for a in sorted(acls, key=lambda a: (a.principal, a.host, a.operation, a.permission))])
        for (rtype, name, pattern), acls in sorted(by_pattern.items())
    ]
    return Struct(throttle_time_ms=0, error_code=0, error_message=None, resources=resources)
