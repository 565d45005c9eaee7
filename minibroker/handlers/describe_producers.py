"""DescribeProducers: v0.

Behaviour: for each asked partition, the idempotent producers the partition's producer state
knows: id, epoch, last sequence and the timestamp of their last batch (or marker), the
coordinator epoch of their last end marker (-1 before any) and the first offset of their open
transaction (-1 when none). A producer known only from a marker has last sequence -1, as in
Kafka. Unknown topic or partition 3.
Authorization (with an authorizer): READ on each topic, else TOPIC_AUTHORIZATION_FAILED, as Kafka.
Version notes: only v0 exists.
Gaps: none known.
"""

from __future__ import annotations

from minibroker.errors import ErrorCode, KafkaError
from minibroker.handlers.registry import handles
from minibroker.protocol.codec import Struct
from minibroker.security.acls import AclOperation, ResourceType
from minibroker.security.authorizer import denied


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
                coordinator_epoch=coordinator_epoch,
                current_txn_start_offset=txn_start,
            )
            for pid, epoch, last_seq, _last_offset, ts, coordinator_epoch, txn_start in active
        ],
    )


@handles(61, (0, 0))
def handle_describe_producers(broker, header, request):
    refused = denied(broker, header, AclOperation.READ, ResourceType.TOPIC, (t.name for t in request.topics))
    return Struct(
        throttle_time_ms=0,
        topics=[
            Struct(name=t.name, partitions=[
                _denied(p) if refused and t.name in refused else _partition(broker, t.name, p)
                for p in t.partition_indexes])
            for t in request.topics
        ],
    )


def _denied(index: int) -> Struct:
    return Struct(partition_index=index, error_code=int(ErrorCode.TOPIC_AUTHORIZATION_FAILED),
                  error_message="Topic authorization failed.", active_producers=[])
