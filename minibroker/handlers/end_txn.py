"""EndTxn: v0-v5.

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
TRANSACTION_ABORTABLE to the vocabulary (never sent here); v5 is KIP-890 part 2 (transaction.version
2), as Kafka decides it by the request's version: every end bumps the producer epoch (the markers carry
the new epoch) and the answer carries the producer id and epoch for the next transaction (a new id at
epoch 0 when the epoch was exhausted); an abort with no transaction open only bumps the epoch; a retry
is the end repeated with the epoch before the bump. Errors answer producer id and epoch -1.
"""

from __future__ import annotations

from minibroker.coordinator.transaction_coordinator import fenced_error_for
from minibroker.errors import ErrorCode, KafkaError
from minibroker.handlers.registry import handles
from minibroker.protocol.codec import Struct
from minibroker.security.acls import AclOperation, ResourceType
from minibroker.security.authorizer import authorize

FIRST_EPOCH_BUMP_VERSION = 5  # KIP-890 part 2


def _answer(code: ErrorCode | int, producer_id: int = -1, producer_epoch: int = -1) -> Struct:
    return Struct(throttle_time_ms=0, error_code=int(code), producer_id=producer_id,
                  producer_epoch=producer_epoch)


@handles(26, (0, 5))
def handle_end_txn(broker, header, request):
    txn_id = request.transactional_id
    if not authorize(broker, header, AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, txn_id):
        return _answer(ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    try:
        if broker.transactions is None:
            raise KafkaError(ErrorCode.COORDINATOR_NOT_AVAILABLE)
        if header.api_version >= FIRST_EPOCH_BUMP_VERSION:
            producer_id, epoch = broker.transactions.end_transaction_with_epoch_bump(
                txn_id, request.producer_id, request.producer_epoch, request.committed)
            return _answer(ErrorCode.NONE, producer_id, epoch)
        broker.transactions.end_transaction(txn_id, request.producer_id, request.producer_epoch,
                                            request.committed)
    except KafkaError as e:
        return _answer(fenced_error_for(e.code, header.api_version, 2))
    return _answer(ErrorCode.NONE)
