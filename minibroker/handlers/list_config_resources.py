"""ListConfigResources (v0: ListClientMetricsResources): v0-v1.

Behaviour, as Kafka's handleListConfigResources: v0 lists the client-metrics subscriptions, and
minibroker has none (no KIP-714 subscriptions can be configured), so the list is empty. v1 (KIP-1142)
filters by resource type: an empty list means every type Kafka supports (TOPIC 2, BROKER 4,
BROKER_LOGGER 8, CLIENT_METRICS 16, GROUP 32); any other type fails the whole request with
UNSUPPORTED_VERSION and no resources. Rows come in Kafka's order whatever the filter's: the groups with
a config override (IncrementalAlterConfigs on a GROUP resource, minibroker/coordinator/group_configs.py;
the group itself need not exist, and one without overrides is not listed, as Kafka lists the groups its
metadata holds config records for), client metrics (none), this node as a broker logger, this node as a
broker, then every topic by name (internal ones included).
Authorization (with an authorizer), as Kafka: DESCRIBE_CONFIGS on the cluster, else
CLUSTER_AUTHORIZATION_FAILED.
Version notes: v1 adds the type filter and each resource's type (v0 rows are client metrics).
"""

from __future__ import annotations

from minibroker.errors import ErrorCode
from minibroker.handlers.registry import handles
from minibroker.protocol.codec import Struct
from minibroker.security.acls import AclOperation, ResourceType
from minibroker.security.authorizer import authorize

TOPIC, BROKER, BROKER_LOGGER, CLIENT_METRICS, GROUP = 2, 4, 8, 16, 32
SUPPORTED_TYPES = (TOPIC, BROKER, BROKER_LOGGER, CLIENT_METRICS, GROUP)


@handles(74, (0, 1))
def handle_list_config_resources(broker, header, request):
    if not authorize(broker, header, AclOperation.DESCRIBE_CONFIGS, ResourceType.CLUSTER):
        return Struct(throttle_time_ms=0, error_code=int(ErrorCode.CLUSTER_AUTHORIZATION_FAILED),
                      config_resources=[])
    if header.api_version == 0:
        return Struct(throttle_time_ms=0, error_code=0, config_resources=[])  # no client-metrics resources
    wanted = set(request.resource_types or SUPPORTED_TYPES)
    if not wanted <= set(SUPPORTED_TYPES):
        return Struct(throttle_time_ms=0, error_code=int(ErrorCode.UNSUPPORTED_VERSION), config_resources=[])
    node = str(broker.node_id)
    rows = []
    if GROUP in wanted:
        rows.extend(Struct(resource_name=g, resource_type=GROUP) for g in broker.groups.configs.groups())
    # CLIENT_METRICS: no subscription can be configured here
    if BROKER_LOGGER in wanted:
        rows.append(Struct(resource_name=node, resource_type=BROKER_LOGGER))
    if BROKER in wanted:
        rows.append(Struct(resource_name=node, resource_type=BROKER))
    if TOPIC in wanted:
        rows.extend(Struct(resource_name=name, resource_type=TOPIC) for name in sorted(broker.logs.topics))
    return Struct(throttle_time_ms=0, error_code=0, config_resources=rows)
