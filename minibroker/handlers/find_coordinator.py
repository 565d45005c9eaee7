"""FindCoordinator: v0-v6.

Behaviour: this node coordinates every group (key type 0) and every transactional id (key type 1),
answered with the advertised address of the listener from Metadata. The first group lookup creates
``__consumer_offsets`` (``offsets.topic.num.partitions`` partitions, compacted) if it does not exist
yet. Error message "NONE" on success, as Kafka sends ``Errors.NONE.message()``.
Version notes: v1 adds key_type and error_message; v4+ batches keys into ``coordinators``, one
entry per key. An unknown key type fails the request with INVALID_REQUEST (42).
Gaps: no share-group coordinator (key type 2), no authorization.
"""

from __future__ import annotations

from minibroker.errors import ErrorCode, KafkaError
from minibroker.handlers.registry import handles
from minibroker.protocol.codec import Struct

GROUP, TRANSACTION = 0, 1


def _locate(broker, key_type: int) -> tuple[int, str | None]:
    if key_type not in (GROUP, TRANSACTION):
        return ErrorCode.INVALID_REQUEST, "Unknown coordinator type"
    if key_type == GROUP and broker.groups is not None:
        try:
            broker.groups.store.ensure_topic()
        except KafkaError as e:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE, str(e)
    return ErrorCode.NONE, "NONE"


@handles(10, (0, 6))
def handle_find_coordinator(broker, header, request):
    version = header.api_version
    endpoint = broker.endpoint_for(header.listener)
    key_type = request.key_type if version >= 1 else GROUP
    error, message = _locate(broker, key_type)
    ok = error == ErrorCode.NONE
    node, host, port = (broker.node_id, endpoint.host, endpoint.port) if ok else (-1, "", -1)
    if version >= 4:
        return Struct(throttle_time_ms=0, coordinators=[
            Struct(key=key, node_id=node, host=host, port=port, error_code=int(error), error_message=message)
            for key in request.coordinator_keys])
    return Struct(throttle_time_ms=0, error_code=int(error), error_message=message, node_id=node, host=host,
                  port=port)
