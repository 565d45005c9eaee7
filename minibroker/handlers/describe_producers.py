"""DescribeProducers: v0.

Behaviour: for each asked partition, the idempotent producers the partition's producer state
knows (those with a batch among the retained ones): id, epoch, last sequence and the timestamp
of their last batch; coordinator epoch and transaction start offset -1 (no transactions).
Unknown topic or partition 3.
Version notes: only v0 exists.
Gaps: transactional producers (no transactions yet).
"""

from __future__ import annotations

from minibroker.errors import KafkaError
from minibroker.handlers.registry import handles
from minibroker.protocol.codec import Struct


def _partition(broker, topic: str, index: int) -> Struct:
    try:
        active = broker.replicas.producer_state(topic, index).active()
    except KafkaError as e:
        return Struct(
            partition_index=index, error_code=int(e.code), error_message=e.message, active_producers=[]
        )
    return Struct(
        partition_index=index,
        error_code=0,
        error_message=None,
        active_producers=[
            Struct(
                producer_id=pid,
                producer_epoch=epoch,
                last_sequence=last_seq,
                last_timestamp=ts,
                coordinator_epoch=-1,
                current_txn_start_offset=-1,
            )
            for pid, epoch, last_seq, _last_offset, ts in active
        ],
    )


@handles(61, (0, 0))
def handle_describe_producers(broker, header, request):
    return Struct(
        throttle_time_ms=0,
        topics=[
            Struct(name=t.name, partitions=[_partition(broker, t.name, p) for p in t.partition_indexes])
            for t in request.topics
        ],
    )
