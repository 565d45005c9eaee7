"""FindCoordinator: v0-v6.

Behaviour: this node coordinates every group (key type 0) and every transactional id (key type 1),
answered with the advertised address of the listener from Metadata. The first group lookup creates
``__consumer_offsets`` (``offsets.topic.num.partitions`` partitions, compacted), the first
transactional one ``__transaction_state`` (``transaction.state.log.num.partitions``, compacted), if
they do not exist yet. Error message "NONE" on success, as Kafka sends ``Errors.NONE.message()``.
The share coordinator (key type 2, v6+, KIP-932: what brokers use to find the owner of a share
partition's state) is this node too (the first lookup creates ``__share_group_state``); each key must be
"groupId:topicId:partition" (a non-empty group id, a base64 topic id, a partition >= 0), else
INVALID_REQUEST 42, as Kafka's SharePartitionKey checks it.
Key type 2 below v6 and an unknown key type fail with INVALID_REQUEST (42).
Version notes: v1 adds key_type and error_message; v4+ batches keys into ``coordinators``, one
entry per key, each with its error message.
Authorization (with an authorizer): DESCRIBE on the group (else GROUP_AUTHORIZATION_FAILED) or on the
transactional id (else TRANSACTIONAL_ID_AUTHORIZATION_FAILED), per key, as Kafka checks it first;
CLUSTER_ACTION on the cluster for share coordinator keys (else CLUSTER_AUTHORIZATION_FAILED), as Kafka.
Gaps: none known.
"""

from __future__ import annotations

import base64
import binascii

from minibroker.errors import ErrorCode, KafkaError
from minibroker.handlers.registry import handles
from minibroker.protocol.codec import Struct
from minibroker.security.acls import AclOperation, ResourceType
from minibroker.security.authorizer import authorize

GROUP, TRANSACTION, SHARE = 0, 1, 2
SHARE_KEY_FORMAT = "Invalid key format: expected - groupId:topicId:partition"


def valid_share_key(key: str) -> bool:
    """Kafka's SharePartitionKey.validate of "groupId:topicId:partition"."""
    parts = key.split(":")
    if len(parts) != 3 or not parts[0].strip():
        return False
    topic_id = parts[1].strip()
    try:
        raw = base64.urlsafe_b64decode(topic_id + "=" * (-len(topic_id) % 4))
        partition = int(parts[2].strip())
    except (binascii.Error, ValueError):
        return False
    return len(raw) == 16 and raw != bytes(16) and partition >= 0


def _locate(broker, key_type: int, version: int = 6) -> tuple[int, str | None]:
    if key_type == SHARE:
        if version < 6:
            return ErrorCode.INVALID_REQUEST, "Share coordinator lookups need FindCoordinator v6."
        state = getattr(broker, "share_state", None)
        if state is None:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE, None
        store = getattr(state, "store", None)  # __share_group_state, created on first lookup as Kafka does
        try:
            if store is not None:
                store.ensure_topic()
        except KafkaError as e:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE, str(e)
        return ErrorCode.NONE, "NONE"
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
    """Kafka checks DESCRIBE on the group or transactional id first (CLUSTER_ACTION on the cluster for
    a share key, then its format); (error, message) when refused."""
    if key_type == SHARE:
        if not authorize(broker, header, AclOperation.CLUSTER_ACTION, ResourceType.CLUSTER):
            return ErrorCode.CLUSTER_AUTHORIZATION_FAILED, "Cluster authorization failed."
        if not valid_share_key(key or ""):
            return ErrorCode.INVALID_REQUEST, SHARE_KEY_FORMAT
        return None
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
    error, message = _locate(broker, key_type, version)
    ok = error == ErrorCode.NONE
    node, host, port = (broker.node_id, endpoint.host, endpoint.port) if ok else (-1, "", -1)
    if version >= 4:
        coordinators = []
        for key in request.coordinator_keys:
            refused = _refused(broker, header, key_type, key)
            if refused is not None:  # v4+ carries no message for a denial, as Kafka answers
                coordinators.append(Struct(key=key, node_id=-1, host="", port=-1, error_code=int(refused[0]),
                                           error_message=SHARE_KEY_FORMAT if refused[1] == SHARE_KEY_FORMAT
                                           else None))
            else:
                coordinators.append(Struct(key=key, node_id=node, host=host, port=port, error_code=int(error),
                                           error_message=message))
        return Struct(throttle_time_ms=0, coordinators=coordinators)
    refused = _refused(broker, header, key_type, request.key) if key_type != SHARE else None
    if refused is not None:
        error, message, node, host, port = refused[0], refused[1], -1, "", -1
    return Struct(throttle_time_ms=0, error_code=int(error), error_message=message, node_id=node, host=host,
                  port=port)
