"""Authorized operations: the bit fields Metadata v8+ (topics; cluster up to v10), DescribeCluster and
DescribeGroups v3+ carry when a request asks for them.

Kafka's ``AuthHelper.authorizedOperations``: for each operation the resource type supports
(``AclEntry.supportedOperations``) that the principal is authorized for, bit ``n`` for the
``AclOperation`` with code ``n``. Without an authorizer every supported operation is set; with one
(minibroker/security/authorizer.py) the ACLs decide. A request that does not ask gets ``NOT_ASKED``
(INT32_MIN, the schemas' default).
"""

from __future__ import annotations

from minibroker.security.acls import ResourceType
from minibroker.security.authorizer import ALL_SUPPORTED_BITS, authorized_operations

NOT_ASKED = -2147483648

# what is answered without an authorizer
TOPIC_OPERATIONS = ALL_SUPPORTED_BITS[ResourceType.TOPIC]
GROUP_OPERATIONS = ALL_SUPPORTED_BITS[ResourceType.GROUP]
CLUSTER_OPERATIONS = ALL_SUPPORTED_BITS[ResourceType.CLUSTER]


def topic_operations(broker, header, name: str) -> int:
    return authorized_operations(broker, header, ResourceType.TOPIC, name)


def group_operations(broker, header, group_id: str) -> int:
    return authorized_operations(broker, header, ResourceType.GROUP, group_id)


def cluster_operations(broker, header) -> int:
    return authorized_operations(broker, header, ResourceType.CLUSTER)
