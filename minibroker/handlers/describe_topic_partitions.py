"""DescribeTopicPartitions: v0 (KIP-966; what admin clients' describeTopics uses on Kafka 3.8+).

Behaviour, as Kafka's DescribeTopicPartitionsRequestHandler answers on one node: an empty topic list
means every topic; topics are answered in name order, each partition with this node as leader, sole
replica and ISR (at its log's leader epoch, as Metadata reports), empty eligible-leader-replica and
last-known-ELR lists and no offline replicas. Paging: at most ``response_partition_limit`` partitions
per response, clamped to [1, ``max.request.partition.size.limit``]; when a topic does not fit,
``next_cursor`` names the topic and first partition left out (a topic that would start a response
already full is named with partition 0). A cursor starts at its topic and partition; topics that sort
before the cursor's are skipped. A named topic that does not exist gets UNKNOWN_TOPIC_OR_PARTITION
(INVALID_TOPIC_EXCEPTION for an illegal name), with its topic id if known; an all-topics request leaves
nothing out for errors.
A cursor naming a topic missing from a non-empty topic list, or a negative cursor partition, is
INVALID_REQUEST for every named topic (Kafka's error response).
Topic authorized operations are always filled in (there is no flag asking for them), unknown topics
included; not for topics refused.
Authorization (with an authorizer), as Kafka: DESCRIBE on each topic; a topic the principal may not
describe is left out of an all-topics answer, and answered TOPIC_AUTHORIZATION_FAILED (no id, no
partitions) after the others when named.
"""

from __future__ import annotations

from minibroker.errors import ErrorCode, KafkaError
from minibroker.handlers.authorized_operations import NOT_ASKED, topic_operations
from minibroker.handlers.leader_epochs import leader_epoch_of
from minibroker.handlers.registry import handles
from minibroker.protocol.codec import Struct
from minibroker.protocol.declarations import ZERO_UUID
from minibroker.security.acls import AclOperation, ResourceType
from minibroker.security.authorizer import denied
from minibroker.services.topic_names import is_internal, validate_topic_name


def _error_topic(name, code, internal: bool = False, operations: int = NOT_ASKED) -> Struct:
    return Struct(error_code=int(code), name=name, topic_id=ZERO_UUID, is_internal=internal, partitions=[],
                  topic_authorized_operations=operations)


def _invalid_request(request) -> Struct:
    return Struct(throttle_time_ms=0, next_cursor=None,
                  topics=[Struct(error_code=int(ErrorCode.INVALID_REQUEST), name=t.name, topic_id=ZERO_UUID,
                                 is_internal=False, partitions=[], topic_authorized_operations=NOT_ASKED)
                          for t in request.topics])


def _partition(node: int, index: int, leader_epoch: int) -> Struct:
    return Struct(error_code=0, partition_index=index, leader_id=node, leader_epoch=leader_epoch,
                  replica_nodes=[node],
                  isr_nodes=[node], eligible_leader_replicas=[], last_known_elr=[], offline_replicas=[])


@handles(75, (0, 0))
def handle_describe_topic_partitions(broker, header, request):
    infos = broker.logs.topics
    cursor = request.cursor
    cursor_topic = cursor.topic_name if cursor is not None else ""
    all_topics = not request.topics
    if all_topics:
        names = {name for name in infos if name >= cursor_topic}
    else:
        names = {t.name for t in request.topics if t.name >= cursor_topic}
        if cursor is not None and cursor.topic_name not in names:
            return _invalid_request(request)
    if cursor is not None and cursor.partition_index < 0:
        return _invalid_request(request)
    refused = denied(broker, header, AclOperation.DESCRIBE, ResourceType.TOPIC, names,
                     log_denied=not all_topics)
    limit = max(min(broker.config["max.request.partition.size.limit"], request.response_partition_limit), 1)
    remaining = limit
    node = broker.node_id
    out, next_cursor = [], None
    for name in sorted(names - refused):
        if remaining <= 0:
            next_cursor = Struct(topic_name=name, partition_index=0)
            break
        info = infos.get(name)
        if info is None:
            if not all_topics:
                try:
                    validate_topic_name(name)
                    code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                except KafkaError:
                    code = ErrorCode.INVALID_TOPIC_EXCEPTION
                operations = topic_operations(broker, header, name)
                out.append(_error_topic(name, code, is_internal(name), operations))
            continue
        start = cursor.partition_index if cursor is not None and name == cursor_topic else 0
        end = min(info.partitions, start + remaining)
        partitions = [_partition(node, p, leader_epoch_of(broker, name, p)) for p in range(start, end)]
        out.append(Struct(error_code=0, name=name, topic_id=info.id, is_internal=is_internal(name),
                          partitions=partitions,
                          topic_authorized_operations=topic_operations(broker, header, name)))
        if end < info.partitions:
            next_cursor = Struct(topic_name=name, partition_index=end)
            break
        remaining -= len(partitions)
    if not all_topics:
        out.extend(_error_topic(name, ErrorCode.TOPIC_AUTHORIZATION_FAILED) for name in sorted(refused))
    return Struct(throttle_time_ms=0, topics=out, next_cursor=next_cursor)
