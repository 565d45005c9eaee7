"""DescribeLogDirs: v0-v5.

Behaviour: one result per configured log dir (absolute path, even when it holds nothing), each
listing the asked partitions it holds (null topics = every partition) with their size in bytes
(all segment files), offset lag 0 and is_future_key false. A partition being moved to another dir
(AlterReplicaLogDirs) is also listed under its destination as the future replica, as Kafka lists it:
is_future_key true, the bytes copied so far, and as offset lag the offsets not yet copied. Asked
partitions that do not exist are left out, as Kafka does.
Authorization (with an authorizer): DESCRIBE on the cluster, else CLUSTER_AUTHORIZATION_FAILED (v3+; no
results before), as Kafka.
Version notes: v2+ flexible; v3+ top-level error code; v4+ total and usable bytes of the file
system holding each dir; v5+ is_cordoned (KIP-1066), always false: dirs cannot be cordoned here.
A dir taken offline by a failed write (full disk, I/O error; docs/reliability.md) answers
KAFKA_STORAGE_ERROR (56) with no topics, as Kafka answers for an offline dir; its partitions still
serve reads. A missing dir makes the sizes -1.
"""

from __future__ import annotations

import os
import shutil

from minibroker.errors import ErrorCode, KafkaError
from minibroker.handlers.registry import handles
from minibroker.protocol.codec import Struct
from minibroker.security.acls import AclOperation, ResourceType
from minibroker.security.authorizer import authorize


def _wanted(broker, topics):
    infos = broker.logs.topics
    if topics is None:
        return [(name, p) for name, info in sorted(infos.items()) for p in range(info.partitions)]
    return [
        (t.topic, p)
        for t in topics
        if t.topic in infos
        for p in t.partitions
        if 0 <= p < infos[t.topic].partitions
    ]


@handles(35, (0, 5))
def handle_describe_log_dirs(broker, header, request):
    if not authorize(broker, header, AclOperation.DESCRIBE, ResourceType.CLUSTER):
        return Struct(throttle_time_ms=0, error_code=int(ErrorCode.CLUSTER_AUTHORIZATION_FAILED), results=[])
    log_dirs = [os.path.abspath(d) for d in broker.logs.log_dirs]
    by_dir: dict[str, dict[str, list[Struct]]] = {d: {} for d in log_dirs}
    wanted = _wanted(broker, request.topics)
    for topic, partition in wanted:
        try:
            plog = broker.logs.get_log(topic, partition)
        except KafkaError:
            continue
        d = os.path.dirname(os.path.abspath(plog.directory))
        by_dir.setdefault(d, {}).setdefault(topic, []).append(
            Struct(
                partition_index=partition, partition_size=plog.size_bytes, offset_lag=0, is_future_key=False
            )
        )
    moving = set(wanted)
    for topic, partition, destination, size, lag in broker.logs.future_replicas():
        if (topic, partition) in moving:
            by_dir.setdefault(destination, {}).setdefault(topic, []).append(
                Struct(partition_index=partition, partition_size=size, offset_lag=lag, is_future_key=True)
            )
    results = []
    offline = broker.logs.offline_dirs
    for d, topics in by_dir.items():
        if d in offline:
            results.append(Struct(error_code=ErrorCode.KAFKA_STORAGE_ERROR, log_dir=d, total_bytes=-1,
                                  usable_bytes=-1, topics=[]))
            continue
        try:
            usage = shutil.disk_usage(d)
            total, usable = usage.total, usage.free
        except OSError:
            total = usable = -1
        results.append(
            Struct(
                error_code=0,
                log_dir=d,
                total_bytes=total,
                usable_bytes=usable,
                topics=[Struct(name=name, partitions=parts) for name, parts in topics.items()],
            )
        )
    return Struct(throttle_time_ms=0, error_code=0, results=results)
