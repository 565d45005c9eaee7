"""AlterReplicaLogDirs: v1-v2 (Kafka 4 dropped v0).

Behaviour, per partition, checked in Kafka's ReplicaManager order: a topic name too long for the future
replica's directory name (``<topic>-<partition>.<32 hex>-future`` over 255 characters) is
INVALID_TOPIC_EXCEPTION; a destination that is not the absolute path of one of ``log.dirs`` (compared
as sent, as Kafka compares it) is LOG_DIR_NOT_FOUND, an offline one KAFKA_STORAGE_ERROR; a partition
this node does not host is REPLICA_NOT_AVAILABLE, one whose current dir is offline KAFKA_STORAGE_ERROR.
Otherwise NONE, and the move runs in the background as Kafka's: a future replica
``<topic>-<partition>.<32 hex>-future`` in the destination is filled while the partition serves, then
swapped in (appends paused for that step) and the old dir renamed ``-delete`` and removed after
``file.delete.delay.ms`` (LogManager.move_partition, docs/storage.md "Several log dirs"). A partition
already in the destination answers NONE and nothing moves; if it was being moved elsewhere, that move
is cancelled (Kafka drops the future replica). DescribeLogDirs shows the future replica meanwhile.
Results are grouped by topic. When the same partition is named under two dirs, the last one counts, as
Kafka's map does.
Authorization (with an authorizer), as Kafka: ALTER on the cluster, else CLUSTER_AUTHORIZATION_FAILED
for every partition.
A move cut short by a restart is resumed once the logs are loaded, as Kafka resumes it.
Version notes: v2 is flexible.
Gaps: a resumed move copies again from the start (the future dir a crash left is discarded; Kafka goes
on from its future log's end). See docs/admin.md.
"""

from __future__ import annotations

from minibroker.errors import ErrorCode, KafkaError
from minibroker.handlers.registry import handles
from minibroker.protocol.codec import Struct
from minibroker.security.acls import AclOperation, ResourceType
from minibroker.security.authorizer import authorize

# Kafka's future replica directory: "<topic>-<partition>.<32 hex digits>-future"
FUTURE_DIR_EXTRA = len(".") + 32 + len("-future")
MAX_DIR_NAME = 255


def _move(broker, topic: str, partition: int, destination: str) -> int:
    logs = broker.logs
    if len(f"{topic}-{partition}") + FUTURE_DIR_EXTRA > MAX_DIR_NAME:
        return ErrorCode.INVALID_TOPIC_EXCEPTION
    if destination not in logs.log_dirs:  # as sent: Kafka compares the string with each dir's absolute path
        return ErrorCode.LOG_DIR_NOT_FOUND
    if destination in logs.offline_dirs:
        return ErrorCode.KAFKA_STORAGE_ERROR
    try:
        logs.move_partition(topic, partition, destination)
    except KafkaError as e:
        return e.code
    return ErrorCode.NONE


@handles(34, (1, 2))
def handle_alter_replica_log_dirs(broker, header, request):
    wanted: dict[tuple[str, int], str] = {}
    for d in request.dirs:
        for t in d.topics:
            for p in t.partitions:
                wanted[(t.name, p)] = d.path
    allowed = authorize(broker, header, AclOperation.ALTER, ResourceType.CLUSTER)
    by_topic: dict[str, list[Struct]] = {}
    for (topic, partition), path in wanted.items():
        if not allowed:
            code = ErrorCode.CLUSTER_AUTHORIZATION_FAILED
        else:
            code = _move(broker, topic, partition, path)
        by_topic.setdefault(topic, []).append(Struct(partition_index=partition, error_code=int(code)))
    return Struct(throttle_time_ms=0,
                  results=[Struct(topic_name=name, partitions=parts) for name, parts in by_topic.items()])
