"""DescribeCluster: v0-v2.

Behaviour: the cluster id, this broker (advertised host and port of the first listener, rack
from ``broker.rack``) as the only broker and as controller id, as Metadata reports them. When
asked, the cluster's authorized operations are every operation Kafka supports on the CLUSTER
resource the principal is authorized for (all of them without an authorizer; 0 without DESCRIBE on
the cluster), as Kafka answers; the request itself needs no permission.
Version notes: v1 carries endpoint_type: 1 (brokers) is served; 2 (controllers) gets
UNSUPPORTED_ENDPOINT_TYPE 115, as a broker listener answers it.
v2 (KIP-1073) asks for fenced brokers too and marks each broker is_fenced: this node, the only
broker, is never fenced, so the answer is the same either way.
"""

from __future__ import annotations

from minibroker.errors import ErrorCode
from minibroker.handlers.authorized_operations import NOT_ASKED, cluster_operations
from minibroker.handlers.registry import handles
from minibroker.protocol.codec import Struct
from minibroker.security.acls import AclOperation, ResourceType
from minibroker.security.authorizer import authorize

BROKER_ENDPOINT = 1


def _cluster_operations(broker, header) -> int:
    """The principal's operations on the cluster, 0 without DESCRIBE on it (Kafka's AuthHelper)."""
    if not authorize(broker, header, AclOperation.DESCRIBE, ResourceType.CLUSTER):
        return 0
    return cluster_operations(broker, header)


@handles(60, (0, 2))
def handle_describe_cluster(broker, header, request):
    endpoint_type = request.endpoint_type if header.api_version >= 1 else BROKER_ENDPOINT
    if endpoint_type != BROKER_ENDPOINT:
        return Struct(throttle_time_ms=0, error_code=int(ErrorCode.UNSUPPORTED_ENDPOINT_TYPE),
                      error_message="The broker does not support the requested endpoint type",
                      endpoint_type=endpoint_type, cluster_id=broker.cluster_id, controller_id=-1, brokers=[])
    endpoint = broker.endpoint_for(header.listener)
    return Struct(
        throttle_time_ms=0, error_code=0, error_message=None, endpoint_type=BROKER_ENDPOINT,
        cluster_id=broker.cluster_id, controller_id=broker.node_id,
        brokers=[Struct(broker_id=broker.node_id, host=endpoint.host, port=endpoint.port,
                        rack=broker.config["broker.rack"], is_fenced=False)],
        cluster_authorized_operations=_cluster_operations(broker, header)
        if request.include_cluster_authorized_operations else NOT_ASKED,
    )
