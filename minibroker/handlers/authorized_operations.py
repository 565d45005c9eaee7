"""Authorized operations, as Kafka answers them when no authorizer is configured.

Kafka's ``AuthHelper.authorizedOperations`` without an authorizer allows every operation the resource
type supports (``AclEntry.supportedOperations``) and sends them as a bit field, bit ``n`` for the
``AclOperation`` with code ``n``. minibroker has no ACLs, so this is always its answer when a request
asks (Metadata v8+, DescribeGroups v3+, DescribeCluster); a request that does not ask gets
``NOT_ASKED`` (INT32_MIN, the schemas' default).
"""

from __future__ import annotations

NOT_ASKED = -2147483648

# AclOperation codes
READ, WRITE, CREATE, DELETE, ALTER, DESCRIBE = 3, 4, 5, 6, 7, 8
CLUSTER_ACTION, DESCRIBE_CONFIGS, ALTER_CONFIGS, IDEMPOTENT_WRITE = 9, 10, 11, 12


def _bits(*operations: int) -> int:
    return sum(1 << op for op in operations)


TOPIC_OPERATIONS = _bits(READ, WRITE, CREATE, DESCRIBE, DELETE, ALTER, DESCRIBE_CONFIGS, ALTER_CONFIGS)
# Kafka 4.0 added DESCRIBE_CONFIGS and ALTER_CONFIGS to groups (group configs, KIP-848)
GROUP_OPERATIONS = _bits(READ, DESCRIBE, DELETE, DESCRIBE_CONFIGS, ALTER_CONFIGS)
CLUSTER_OPERATIONS = _bits(CREATE, CLUSTER_ACTION, DESCRIBE_CONFIGS, ALTER_CONFIGS, IDEMPOTENT_WRITE, ALTER,
                           DESCRIBE)
