"""DeleteRecords: v0-v2.

Behaviour: moves each partition's log start offset up to the given offset (-1 = the high
watermark) and deletes the segments wholly below it (PartitionLog.delete_records_before); the
answer's low watermark is the new log start offset. An offset below the current start changes
nothing. Per partition, as Kafka's ReplicaManager: unknown topic or partition 3, an offset
above the high watermark or negative (other than -1) OFFSET_OUT_OF_RANGE 1, a topic whose
``cleanup.policy`` lacks ``delete`` POLICY_VIOLATION 44, an internal topic 17; the low watermark
is -1 with any error. ``timeout_ms`` is moot: the only replica is here.
Authorization (with an authorizer): DELETE on each topic, else TOPIC_AUTHORIZATION_FAILED, as Kafka.
Version notes: v2 flexible; nothing else differs.
Gaps: none known.
"""

from __future__ import annotations

from minibroker.errors import ErrorCode, KafkaError
from minibroker.handlers.partition_answers import answer_partitions
from minibroker.handlers.registry import handles
from minibroker.protocol.codec import Struct
from minibroker.security.acls import AclOperation, ResourceType
from minibroker.security.authorizer import denied
from minibroker.services.topic_names import is_internal


def _delete(broker, topic: str, partition: int, offset: int) -> int:
    if is_internal(topic):
        raise KafkaError(
            ErrorCode.INVALID_TOPIC_EXCEPTION, f"Cannot delete records of internal topic {topic}"
        )
    plog = broker.replicas.get_log(topic, partition)
    policy = plog.config.get("cleanup.policy", "delete")
    if "delete" not in (policy if isinstance(policy, (list, tuple)) else str(policy).split(",")):
        raise KafkaError(
            ErrorCode.POLICY_VIOLATION,
            f"Records of partition {topic}-{partition} can not be deleted due to the configured policy",
        )
    if offset < 0 and offset != -1:
        raise KafkaError(
            ErrorCode.OFFSET_OUT_OF_RANGE,
            f"The offset {offset} for partition {topic}-{partition} is not valid",
        )
    if offset > plog.high_watermark:
        raise KafkaError(
            ErrorCode.OFFSET_OUT_OF_RANGE,
            f"Cannot increment the log start offset to {offset} of partition {topic}-{partition} "
            f"since it is larger than the high watermark {plog.high_watermark}",
        )
    return plog.delete_records_before(offset)


@handles(21, (0, 2))
def handle_delete_records(broker, header, request):
    refused = denied(broker, header, AclOperation.DELETE, ResourceType.TOPIC,
                     (t.name for t in request.topics))

    def answer(topic: str, p) -> Struct:
        low = _delete(broker, topic, p.partition_index, p.offset)
        return Struct(partition_index=p.partition_index, low_watermark=low, error_code=0)

    def failed(p, code: ErrorCode) -> Struct:
        return Struct(partition_index=p.partition_index, low_watermark=-1, error_code=int(code))

    return Struct(throttle_time_ms=0, topics=[
        Struct(name=t.name, partitions=partitions)
        for t, partitions in answer_partitions(request.topics, refused, answer, failed)])
