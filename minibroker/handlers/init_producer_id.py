"""InitProducerId: v0-v5.

Behaviour: an idempotent producer (no transactional id) gets a new producer id, unique across
restarts (reserved in blocks in ``producer-id-block``), at epoch 0. A transactional id gets
COORDINATOR_NOT_AVAILABLE: transactions are not served yet, and that is the answer clients
retry on rather than fail.
"""

from __future__ import annotations

from minibroker.errors import ErrorCode
from minibroker.handlers.registry import handles
from minibroker.protocol.codec import Struct


@handles(22, (0, 5))
def handle_init_producer_id(broker, header, request):
    if request.transactional_id is not None:
        return Struct(
            throttle_time_ms=0,
            error_code=int(ErrorCode.COORDINATOR_NOT_AVAILABLE),
            producer_id=-1,
            producer_epoch=-1,
        )
    return Struct(
        throttle_time_ms=0, error_code=0, producer_id=broker.producer_ids.allocate(), producer_epoch=0
    )
