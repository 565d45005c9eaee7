"""InitProducerId: v0-v5.

Behaviour: an idempotent producer (no transactional id) gets a new producer id, unique across
restarts (reserved in blocks in ``producer-id-block``), at epoch 0. A transactional id goes to the
transaction coordinator: a new id gets a producer id at epoch 0, a known one the next epoch (which
fences older instances); an ongoing transaction of the id is aborted first and the answer is
CONCURRENT_TRANSACTIONS 51 (the client retries); a transaction completing also answers 51; an
exhausted epoch brings a new producer id. Errors: INVALID_REQUEST 42 (empty transactional id, or only
one of producer id / epoch), INVALID_TRANSACTION_TIMEOUT 50 (outside (0,
``transaction.max.timeout.ms``]), COORDINATOR_LOAD_IN_PROGRESS 14 while ``__transaction_state`` loads.
Authorization (with an authorizer), as Kafka: WRITE on the transactional id, else
TRANSACTIONAL_ID_AUTHORIZATION_FAILED; an idempotent producer (no transactional id) needs IDEMPOTENT_WRITE
on the cluster or WRITE on some topic (KIP-679), else CLUSTER_AUTHORIZATION_FAILED.
Version notes: v3 adds producer id and epoch (KIP-360: a producer resuming after an error keeps its
id when it is still the current one, else PRODUCER_FENCED); v4 adds PRODUCER_FENCED 90, which
v0-v3 get as INVALID_PRODUCER_EPOCH 47; v5 only adds TRANSACTION_ABORTABLE, never sent here.
Gaps: none known.
"""

from __future__ import annotations

from minibroker.coordinator.transaction_coordinator import fenced_error_for
from minibroker.errors import ErrorCode, KafkaError
from minibroker.handlers.registry import handles
from minibroker.protocol.codec import Struct
from minibroker.security.acls import AclOperation, ResourceType
from minibroker.security.authorizer import authorize, authorize_by_resource_type


def _refused(code: ErrorCode) -> Struct:
    return Struct(throttle_time_ms=0, error_code=int(code), producer_id=-1, producer_epoch=-1)


def _authorization_error(broker, header, transactional_id) -> ErrorCode | None:
    """Kafka's checks: WRITE on the transactional id; without one (idempotence), IDEMPOTENT_WRITE on the
    cluster or WRITE on at least one topic (KIP-679)."""
    if transactional_id is not None:
        if not authorize(broker, header, AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, transactional_id):
            return ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
        return None
    if authorize(broker, header, AclOperation.IDEMPOTENT_WRITE, ResourceType.CLUSTER, log_denied=False) \
            or authorize_by_resource_type(broker, header, AclOperation.WRITE, ResourceType.TOPIC):
        return None
    return ErrorCode.CLUSTER_AUTHORIZATION_FAILED


@handles(22, (0, 5))
def handle_init_producer_id(broker, header, request):
    version = header.api_version
    if broker.authorizer is not None:
        refused = _authorization_error(broker, header, request.transactional_id)
        if refused is not None:
            return _refused(refused)
    try:
        if request.transactional_id is None:
            producer_id, epoch = broker.producer_ids.allocate(), 0
        else:
            if broker.transactions is None:
                raise KafkaError(ErrorCode.COORDINATOR_NOT_AVAILABLE)
            given = (request.producer_id, request.producer_epoch) if version >= 3 else (-1, -1)
            producer_id, epoch = broker.transactions.init_producer_id(
                request.transactional_id, request.transaction_timeout_ms, *given)
    except KafkaError as e:
        return _refused(fenced_error_for(e.code, version, 4))
    return Struct(throttle_time_ms=0, error_code=0, producer_id=producer_id, producer_epoch=epoch)
