"""Metadata: v0-v13.

Behaviour: one broker (this node, at the advertised address of its first listener) that is the
controller and the leader, sole replica and ISR of every partition, at its log's leader epoch. Null
topics (v1+) means all topics, an empty list none; v0's empty list means all. Unknown topics
are created when ``auto.create.topics.enable`` and the request allow it (always asked on v0-v3),
with ``num.partitions``; otherwise error 3. Illegal names get error 17. Topic ids (v10+) come
from ``partition.metadata``; a request naming an unknown id gets UNKNOWN_TOPIC_ID. Ids are looked
up from v12 on: a v10-v11 request with a null name or a non-zero id gets INVALID_REQUEST for every
topic and no brokers, as Kafka answers it (its error response; the fuzzer found the null name sent
back where v10-v11 cannot carry one).
Authorized operations (v8+), when asked: every operation Kafka supports on a topic (8 of them) for
each named topic, and (v8-v10) on the cluster (7), as Kafka answers without an authorizer;
-2147483648 when not asked and for unknown topic ids.
Authorization (with an authorizer), as Kafka: DESCRIBE on each topic; a topic the principal may not
describe is left out of an all-topics answer and answered TOPIC_AUTHORIZATION_FAILED (with no topic id,
or only the id when asked by id) when named, whether it exists or not; creating an unknown topic needs
CREATE on the cluster or on the topic, else TOPIC_AUTHORIZATION_FAILED. Authorized operations are the
principal's (minibroker/handlers/authorized_operations.py); the cluster's are 0 without DESCRIBE on it.
Version notes: v13 (KIP-1102) adds a top-level error code for a request failing as a whole, which
clients answer by re-bootstrapping; one node never needs that, so it is always 0 (as Kafka sends it).
Gaps: no racks.
"""

from __future__ import annotations

from minibroker.errors import ErrorCode, KafkaError
from minibroker.handlers.authorized_operations import (
    NOT_ASKED,
    TOPIC_OPERATIONS,
    cluster_operations,
    topic_operations,
)
from minibroker.handlers.leader_epochs import leader_epoch_of
from minibroker.handlers.registry import handles
from minibroker.protocol.codec import Struct
from minibroker.protocol.declarations import ZERO_UUID
from minibroker.security.acls import AclOperation, ResourceType
from minibroker.security.authorizer import authorize, denied
from minibroker.services.topic_admin import create_topic
from minibroker.services.topic_names import is_internal, validate_topic_name


def topic_metadata(broker, name: str, info, authorized_operations: int = NOT_ASKED) -> Struct:
    node = broker.node_id
    return Struct(
        error_code=0,
        name=name,
        topic_id=info.id,
        is_internal=is_internal(name),
        partitions=[
            Struct(
                error_code=0,
                partition_index=p,
                leader_id=node,
                leader_epoch=leader_epoch_of(broker, name, p),
                replica_nodes=[node],
                isr_nodes=[node],
                offline_replicas=[],
            )
            for p in range(info.partitions)
        ],
        topic_authorized_operations=authorized_operations,
    )


def _error_topic(name, code, topic_id=ZERO_UUID, authorized_operations: int = NOT_ASKED) -> Struct:
    return Struct(error_code=int(code), name=name, topic_id=topic_id, is_internal=False, partitions=[],
                  topic_authorized_operations=authorized_operations)


def _invalid_request(request) -> Struct:
    """Kafka's answer to topic ids in v10-v11 (names may not be null there, ids are not looked up
    before v12): the request's error response, INVALID_REQUEST for every topic, a null name as ""."""
    topics = [_error_topic(t.name or "", ErrorCode.INVALID_REQUEST, t.topic_id) for t in request.topics]
    return Struct(throttle_time_ms=0, brokers=[], cluster_id=None, controller_id=-1, topics=topics)


@handles(3, (0, 13))
def handle_metadata(broker, header, request):
    version = header.api_version
    topics = broker.logs.topics
    if 10 <= version < 12 and any(t.name is None or t.topic_id != ZERO_UUID for t in request.topics or ()):
        return _invalid_request(request)
    all_topics = request.topics is None or (version == 0 and not request.topics)
    if all_topics:
        wanted = [(name, None) for name in sorted(topics)]
    else:
        wanted = [(t.name, t.topic_id) for t in request.topics]
    auto_create = broker.config["auto.create.topics.enable"] and (
        version < 4 or request.allow_auto_topic_creation
    ) and not all_topics
    authorizer = broker.authorizer
    # Kafka sets them on every named topic it answers for, errors included (not unknown topic ids, not
    # topics the principal may not describe)
    topic_ops = NOT_ASKED
    ops_asked = version >= 8 and request.include_topic_authorized_operations
    if ops_asked:
        topic_ops = TOPIC_OPERATIONS
    cluster_ops = NOT_ASKED
    if 8 <= version <= 10 and request.include_cluster_authorized_operations:
        cluster_ops = cluster_operations(broker, header) \
            if authorize(broker, header, AclOperation.DESCRIBE, ResourceType.CLUSTER) else 0
    resolved = []  # (name or None, topic id, asked by id)
    for name, topic_id in wanted:
        by_id = name is None
        if by_id:
            name = broker.logs.topic_name(topic_id) if topic_id and topic_id != ZERO_UUID else None
        resolved.append((name, topic_id, by_id))
    refused = frozenset()
    may_create_any = True
    if authorizer is not None:
        refused = denied(broker, header, AclOperation.DESCRIBE, ResourceType.TOPIC,
                         (name for name, _, _ in resolved), log_denied=not all_topics)
        may_create_any = authorize(broker, header, AclOperation.CREATE, ResourceType.CLUSTER,
                                   log_denied=False)
    out = []
    for name, topic_id, by_id in resolved:
        if name is None:
            out.append(_error_topic(None, ErrorCode.UNKNOWN_TOPIC_ID, topic_id or ZERO_UUID))
            continue
        if refused and name in refused:
            # not disclosing whether it exists; hidden from an all-topics answer
            if not all_topics:
                out.append(_error_topic(None if by_id else name, ErrorCode.TOPIC_AUTHORIZATION_FAILED,
                                        topic_id if by_id else ZERO_UUID))
            continue
        if authorizer is not None and ops_asked:
            topic_ops = topic_operations(broker, header, name)
        info = topics.get(name)
        if info is None:
            if auto_create and not may_create_any and not authorize(broker, header, AclOperation.CREATE,
                                                                    ResourceType.TOPIC, name):
                out.append(_error_topic(name, ErrorCode.TOPIC_AUTHORIZATION_FAILED))
                continue
            try:
                validate_topic_name(name)
            except KafkaError as e:
                out.append(_error_topic(name, e.code, authorized_operations=topic_ops))
                continue
            if not auto_create:
                out.append(_error_topic(name, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                                        authorized_operations=topic_ops))
                continue
            try:
                info = create_topic(broker, name, -1, -1, {})
            except KafkaError as e:
                out.append(_error_topic(name, e.code, authorized_operations=topic_ops))
                continue
        out.append(topic_metadata(broker, name, info, topic_ops))
    endpoint = broker.endpoint_for(header.listener)
    return Struct(
        throttle_time_ms=0,
        brokers=[Struct(node_id=broker.node_id, host=endpoint.host, port=endpoint.port, rack=None)],
        cluster_id=broker.cluster_id,
        controller_id=broker.node_id,
        topics=out,
        cluster_authorized_operations=cluster_ops,
        error_code=0,
    )
