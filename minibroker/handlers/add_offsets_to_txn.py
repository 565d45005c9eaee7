"""AddOffsetsToTxn: v0-v4.

Behaviour: adds the group's ``__consumer_offsets`` partition (``abs(hashCode(group)) %
offsets.topic.num.partitions``) to the producer's transaction, as AddPartitionsToTxn adds a
partition, so the transaction's marker reaches the offsets TxnOffsetCommit writes there; creates
``__consumer_offsets`` first if needed. Errors as AddPartitionsToTxn's: INVALID_PRODUCER_ID_MAPPING 49,
PRODUCER_FENCED 90, CONCURRENT_TRANSACTIONS 51, COORDINATOR_LOAD_IN_PROGRESS 14, INVALID_REQUEST 42.
Version notes: v2 adds PRODUCER_FENCED (v0-v1 get INVALID_PRODUCER_EPOCH 47); v3 flexible; v4 adds
TRANSACTION_ABORTABLE to the vocabulary (never sent here).
Authorization (with an authorizer), as Kafka: WRITE on the transactional id (else
TRANSACTIONAL_ID_AUTHORIZATION_FAILED), then READ on the group (else GROUP_AUTHORIZATION_FAILED).
Gaps: none known.
"""

from __future__ import annotations

from minibroker.coordinator.offsets_store import OFFSETS_TOPIC
from minibroker.coordinator.transaction_coordinator import fenced_error_for
from minibroker.errors import ErrorCode, KafkaError
from minibroker.handlers.registry import handles
from minibroker.protocol.codec import Struct
from minibroker.security.acls import AclOperation, ResourceType
from minibroker.security.authorizer import authorize


@handles(25, (0, 4))
def handle_add_offsets_to_txn(broker, header, request):
    txn_id = request.transactional_id
    if not authorize(broker, header, AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, txn_id):
        return Struct(throttle_time_ms=0, error_code=int(ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED))
    if not authorize(broker, header, AclOperation.READ, ResourceType.GROUP, request.group_id):
        return Struct(throttle_time_ms=0, error_code=int(ErrorCode.GROUP_AUTHORIZATION_FAILED))
    try:
        if broker.transactions is None or broker.groups is None:
            raise KafkaError(ErrorCode.COORDINATOR_NOT_AVAILABLE)
        broker.groups.store.ensure_topic()  # the partition must exist to take the marker
        partition = broker.groups.partition_for(request.group_id)
        broker.transactions.add_partitions(request.transactional_id, request.producer_id,
                                           request.producer_epoch, [(OFFSETS_TOPIC, partition)])
    except KafkaError as e:
        return Struct(throttle_time_ms=0, error_code=int(fenced_error_for(e.code, header.api_version, 2)))
    return Struct(throttle_time_ms=0, error_code=0)
