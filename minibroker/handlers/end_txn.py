"""EndTxn: v0-v4.

Behaviour: commits or aborts the producer's Ongoing transaction: PrepareCommit / PrepareAbort is
written to ``__transaction_state`` before the answer; then the COMMIT or ABORT marker goes to every
partition of the transaction and CompleteCommit / CompleteAbort is written (before the answer too,
unless a marker write fails: then it is retried in the background, and until it completes the next
request of the producer gets CONCURRENT_TRANSACTIONS 51). Repeating the end that completed answers
NONE; the same end while it completes CONCURRENT_TRANSACTIONS 51; the other end, or an end with no
transaction, INVALID_TXN_STATE 48. INVALID_PRODUCER_ID_MAPPING 49, PRODUCER_FENCED 90 (the producer
was fenced: a newer instance, or the broker aborted its timed-out transaction),
COORDINATOR_LOAD_IN_PROGRESS 14, INVALID_REQUEST 42 (empty transactional id).
Authorization (with an authorizer): WRITE on the transactional id, else
TRANSACTIONAL_ID_AUTHORIZATION_FAILED, as Kafka.
Version notes: v2 adds PRODUCER_FENCED (v0-v1 get INVALID_PRODUCER_EPOCH 47); v3 flexible; v4 adds
TRANSACTION_ABORTABLE to the vocabulary (never sent here).
Gaps: v5 (KIP-890 part 2, an epoch bump on every transaction, "transaction.version" 2) is not
served, as Kafka 3.9 does not advertise it; clients then stay on the classic protocol.
"""

from __future__ import annotations

from minibroker.coordinator.transaction_coordinator import fenced_error_for
from minibroker.errors import ErrorCode, KafkaError
from minibroker.handlers.registry import handles
from minibroker.protocol.codec import Struct
from minibroker.security.acls import AclOperation, ResourceType
from minibroker.security.authorizer import authorize


@handles(26, (0, 4))
def handle_end_txn(broker, header, request):
    txn_id = request.transactional_id
    if not authorize(broker, header, AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, txn_id):
        return Struct(throttle_time_ms=0, error_code=int(ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED))
    try:
        if broker.transactions is None:
            raise KafkaError(ErrorCode.COORDINATOR_NOT_AVAILABLE)
        broker.transactions.end_transaction(request.transactional_id, request.producer_id,
                                            request.producer_epoch, request.committed)
    except KafkaError as e:
        return Struct(throttle_time_ms=0, error_code=int(fenced_error_for(e.code, header.api_version, 2)))
    return Struct(throttle_time_ms=0, error_code=0)
