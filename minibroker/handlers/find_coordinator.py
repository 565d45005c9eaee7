"""FindCoordinator: v0-v6.

Behaviour: this node coordinates every group (key type 0) and every transactional id (key type 1),
answered with the advertised address of the listener from Metadata. The first group lookup creates
``__consumer_offsets`` (``offsets.topic.num.partitions`` partitions, compacted), the first
transactional one ``__transaction_state`` (``transaction.state.log.num.partitions``, compacted), if
they do not exist yet. Error message "NONE" on success, as Kafka sends ``Errors.NONE.message()``.
Share groups (key type 2) fail at once, non-retriably: INVALID_REQUEST 42, "Share groups are not
supported by this broker", as Kafka answers when no share coordinator runs (and below v6).
An unknown key type fails the request with INVALID_REQUEST (42).
Version notes: v1 adds key_type and error_message; v4+ batches keys into ``coordinators``, one
entry per key, each with its error message.
Authorization (with an authorizer): DESCRIBE on the group (else GROUP_AUTHORIZATION_FAILED) or on the
transactional id (else TRANSACTIONAL_ID_AUTHORIZATION_FAILED), per key, as Kafka checks it first.
Gaps: no share coordinator.
"""

from __future__ import annotations

from minibroker.errors import ErrorCode, KafkaError
from minibroker.handlers.registry import handles
from minibroker.protocol.codec import Struct
from minibroker.security.acls import AclOperation, ResourceType
from minibroker.security.authorizer import authorize

GROUP, TRANSACTION, SHARE = 0, 1, 2
SHARE_GROUPS_NOT_SUPPORTED = "Share groups are not supported by this broker"


def _locate(broker, key_type: int) -> tuple[int, str | None]:
    if key_type == SHARE:
        return ErrorCode.INVALID_REQUEST, SHARE_GROUPS_NOT_SUPPORTED
    if key_type not in (GROUP, TRANSACTION):
        return ErrorCode.INVALID_REQUEST, "Unknown coordinator type"
    coordinator = broker.groups if key_type == GROUP else broker.transactions
    if coordinator is None:
        return ErrorCode.COORDINATOR_NOT_AVAILABLE, None
    try:
        coordinator.store.ensure_topic()
    except KafkaError as e:
        return ErrorCode.COORDINATOR_NOT_AVAILABLE, str(e)
    return ErrorCode.NONE, "NONE"


_DENIED = {GROUP: (ResourceType.GROUP, ErrorCode.GROUP_AUTHORIZATION_FAILED, "Group authorization failed."),
           TRANSACTION: (ResourceType.TRANSACTIONAL_ID, ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
                         "Transactional Id authorization failed.")}


def _refused(broker, header, key_type: int, key: str) -> tuple[int, str] | None:
    """Kafka checks DESCRIBE on the group or transactional id first; (error, message) when denied."""
    if broker.authorizer is None or key_type not in _DENIED:
        return None
    resource_type, error, message = _DENIED[key_type]
    if authorize(broker, header, AclOperation.DESCRIBE, resource_type, key):
        return None
    return error, message


@handles(10, (0, 6))
def handle_find_coordinator(broker, header, request):
    version = header.api_version
    endpoint = broker.endpoint_for(header.listener)
    key_type = request.key_type if version >= 1 else GROUP
    error, message = _locate(broker, key_type)
    ok = error == ErrorCode.NONE
    node, host, port = (broker.node_id, endpoint.host, endpoint.port) if ok else (-1, "", -1)
    if version >= 4:
        coordinators = []
        for key in request.coordinator_keys:
            refused = _refused(broker, header, key_type, key)
            if refused is not None:  # v4+ carries no message for it, as Kafka answers
                coordinators.append(Struct(key=key, node_id=-1, host="", port=-1, error_code=int(refused[0]),
                                           error_message=None))
            else:
                coordinators.append(Struct(key=key, node_id=node, host=host, port=port, error_code=int(error),
                                           error_message=message))
        return Struct(throttle_time_ms=0, coordinators=coordinators)
    refused = _refused(broker, header, key_type, request.key)
    if refused is not None:
        error, message, node, host, port = refused[0], refused[1], -1, "", -1
    return Struct(throttle_time_ms=0, error_code=int(error), error_message=message, node_id=node, host=host,
                  port=port)
