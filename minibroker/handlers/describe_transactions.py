"""DescribeTransactions: v0.

Behaviour: for each transactional id, its state (Kafka's names: Empty, Ongoing, PrepareCommit,
PrepareAbort, CompleteCommit, CompleteAbort), timeout, start time (-1 without a transaction),
producer id and epoch and the partitions of the open transaction, by topic. Unknown (or expired)
ids get TRANSACTIONAL_ID_NOT_FOUND 105, an empty id INVALID_REQUEST 42, every id
COORDINATOR_LOAD_IN_PROGRESS 14 while ``__transaction_state`` loads.
Version notes: only v0 exists.
Authorization (with an authorizer), as Kafka: DESCRIBE on each transactional id, else
TRANSACTIONAL_ID_AUTHORIZATION_FAILED; partitions of topics the principal may not DESCRIBE are left out.
Gaps: none known.
"""

from __future__ import annotations

from minibroker.coordinator.transaction_coordinator import TransactionDescription
from minibroker.errors import ErrorCode
from minibroker.handlers.registry import handles
from minibroker.protocol.codec import Struct
from minibroker.security.acls import AclOperation, ResourceType
from minibroker.security.authorizer import authorize, denied


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
    states = []
    for tid in request.transactional_ids:
        if not authorize(broker, header, AclOperation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, tid):
            refused = TransactionDescription(ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, tid)
            states.append(_state(refused))
            continue
        state = _state(coordinator.describe(tid) if coordinator is not None
                       else TransactionDescription(ErrorCode.COORDINATOR_NOT_AVAILABLE, tid))
        if broker.authorizer is not None:  # only the partitions of topics the principal may describe
            hidden = denied(broker, header, AclOperation.DESCRIBE, ResourceType.TOPIC,
                            (t.topic for t in state.topics), log_denied=False)
            state.topics = [t for t in state.topics if t.topic not in hidden]
        states.append(state)
    return Struct(throttle_time_ms=0, transaction_states=states)
