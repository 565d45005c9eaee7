"""InitProducerId: v0-v5.

Behaviour: an idempotent producer (no transactional id) gets a new producer id, unique across
restarts (reserved in blocks in ``producer-id-block``), at epoch 0. A transactional id gets
TRANSACTIONAL_ID_AUTHORIZATION_FAILED (53) at once, as FindCoordinator does for the transaction
coordinator: transactions are not served, and 53 is the answer Kafka gives a producer that may not
use them, fatal in every client (this response has no error message; FindCoordinator's carries
"Transactions are not supported by this broker"). An empty transactional id gets INVALID_REQUEST
(42), as Kafka's transaction coordinator answers it.
Gaps: no transactions.
"""

from __future__ import annotations

import logging

from minibroker.errors import ErrorCode, KafkaError
from minibroker.handlers.find_coordinator import TRANSACTIONS_NOT_SUPPORTED
from minibroker.handlers.registry import handles
from minibroker.protocol.codec import Struct

log = logging.getLogger(__name__)


def _refused(code: ErrorCode) -> Struct:
    return Struct(throttle_time_ms=0, error_code=int(code), producer_id=-1, producer_epoch=-1)


@handles(22, (0, 5))
def handle_init_producer_id(broker, header, request):
    if request.transactional_id == "":
        return _refused(ErrorCode.INVALID_REQUEST)
    if request.transactional_id is not None:
        log.warning("client %s asked for a producer id for transactional id %r: %s", header.client_id,
                    request.transactional_id, TRANSACTIONS_NOT_SUPPORTED)
        return _refused(ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    try:
        producer_id = broker.producer_ids.allocate()
    except KafkaError as e:
        return _refused(e.code)
    return Struct(throttle_time_ms=0, error_code=0, producer_id=producer_id, producer_epoch=0)
