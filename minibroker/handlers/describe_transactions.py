"""DescribeTransactions: v0.

Behaviour: for each transactional id, its state (Kafka's names: Empty, Ongoing, PrepareCommit,
PrepareAbort, CompleteCommit, CompleteAbort), timeout, start time (-1 without a transaction),
producer id and epoch and the partitions of the open transaction, by topic. Unknown (or expired)
ids get TRANSACTIONAL_ID_NOT_FOUND 105, an empty id INVALID_REQUEST 42, every id
COORDINATOR_LOAD_IN_PROGRESS 14 while ``__transaction_state`` loads.
Version notes: only v0 exists.
Gaps: no authorization (Kafka answers TRANSACTIONAL_ID_AUTHORIZATION_FAILED without DESCRIBE).
"""

from __future__ import annotations

from minibroker.coordinator.transaction_coordinator import TransactionDescription
from minibroker.errors import ErrorCode
from minibroker.handlers.registry import handles
from minibroker.protocol.codec import Struct


def _state(d: TransactionDescription) -> Struct:
    by_topic: dict[str, list[int]] = {}
    for topic, partition in d.partitions:
        by_topic.setdefault(topic, []).append(partition)
    return Struct(error_code=int(d.error), transactional_id=d.transactional_id, transaction_state=d.state,
                  transaction_timeout_ms=d.timeout_ms, transaction_start_time_ms=d.start_ms,
                  producer_id=d.producer_id, producer_epoch=d.producer_epoch,
                  topics=[Struct(topic=t, partitions=ps) for t, ps in by_topic.items()])


@handles(65, (0, 0))
def handle_describe_transactions(broker, header, request):
    coordinator = broker.transactions
    return Struct(throttle_time_ms=0, transaction_states=[
        _state(coordinator.describe(tid) if coordinator is not None
               else TransactionDescription(ErrorCode.COORDINATOR_NOT_AVAILABLE, tid))
        for tid in request.transactional_ids])
