"""DeleteTopics: v0-v6.

Behaviour: topics are deleted at once (this broker is the controller): the log manager drops
them from its topics file and removes their partition directories, the producer state of their
partitions is forgotten and long-polling fetches on them are woken. Unknown names get 3, unknown
ids (v6) 100. As the KRaft controller does: a v6 entry with both a name and an id, or neither,
gets 42; a name or id given twice gets 42 "Duplicate topic name."/"Duplicate topic id."; a name
whose id was also given gets 42. With ``delete.topic.enable=false`` every topic gets
TOPIC_DELETION_DISABLED 73 (v3+) or INVALID_REQUEST 42 (v0-v2, which cannot carry 73).
Authorization (with an authorizer), as Kafka: DELETE on each topic, else TOPIC_AUTHORIZATION_FAILED (before
telling whether it exists); a topic named by id also needs DESCRIBE, else it is answered without its name.
The controller_mutation_rate client quota (KIP-599, minibroker/services/quotas.py) is taken per topic
before it is deleted, one token per partition: while the client's bucket is below zero a topic gets 89
THROTTLING_QUOTA_EXCEEDED (v5+; v0-v4 are never refused), and the response carries the throttle time.
Version notes: v1+ throttle time; v5+ error messages; v6 topics by name or id, answered with both.
Gaps: committed group offsets of a deleted topic are kept until groups exist to drop them.
"""

from __future__ import annotations

from minibroker.errors import ErrorCode, KafkaError
from minibroker.handlers.registry import handles
from minibroker.protocol.codec import Struct
from minibroker.protocol.declarations import ZERO_UUID
from minibroker.security.acls import AclOperation, ResourceType
from minibroker.security.authorizer import authorize
from minibroker.services import mutation_quota
from minibroker.services.topic_admin import delete_topic, topic_id_of, topic_name_for_id

TOPIC_DENIED = "Topic authorization failed."


def _result(name, topic_id, code=0, message=None) -> Struct:
    return Struct(name=name, topic_id=topic_id or ZERO_UUID, error_code=int(code), error_message=message)


@handles(20, (0, 6))
def handle_delete_topics(broker, header, request):
    version = header.api_version
    if version >= 6:
        wanted = [(t.name, t.topic_id or ZERO_UUID) for t in request.topics]
    else:
        wanted = [(name, ZERO_UUID) for name in request.topic_names]
    results = []
    if not broker.config["delete.topic.enable"]:
        code = ErrorCode.TOPIC_DELETION_DISABLED if version >= 3 else ErrorCode.INVALID_REQUEST
        return Struct(throttle_time_ms=0, responses=[
            _result(n, i, code, "Topic deletion is disabled.") for n, i in wanted])

    names: dict[str, int] = {}
    ids: dict[bytes, int] = {}
    for name, topic_id in wanted:
        if name is None and topic_id == ZERO_UUID:
            results.append(_result(None, ZERO_UUID, ErrorCode.INVALID_REQUEST,
                                   "Neither topic name nor id were specified."))
        elif name is not None and topic_id != ZERO_UUID:
            results.append(_result(name, topic_id, ErrorCode.INVALID_REQUEST,
                                   "You may not specify both topic name and topic id."))
        elif name is not None:
            names[name] = names.get(name, 0) + 1
        else:
            ids[topic_id] = ids.get(topic_id, 0) + 1

    to_delete: dict[str, bytes] = {}  # name -> id, in request order
    for topic_id, n in ids.items():
        if n > 1:
            results.append(_result(None, topic_id, ErrorCode.INVALID_REQUEST, "Duplicate topic id."))
            continue
        name = topic_name_for_id(broker, topic_id)
        if name is None:
            results.append(_result(None, topic_id, ErrorCode.UNKNOWN_TOPIC_ID,
                                   "This server does not host this topic ID."))
        elif not authorize(broker, header, AclOperation.DESCRIBE, ResourceType.TOPIC, name):
            results.append(_result(None, topic_id, ErrorCode.TOPIC_AUTHORIZATION_FAILED, TOPIC_DENIED))
        elif not authorize(broker, header, AclOperation.DELETE, ResourceType.TOPIC, name):
            results.append(_result(name, topic_id, ErrorCode.TOPIC_AUTHORIZATION_FAILED, TOPIC_DENIED))
        else:
            to_delete[name] = topic_id
    topics = broker.logs.topics
    for name, n in names.items():
        if n > 1:
            results.append(_result(name, ZERO_UUID, ErrorCode.INVALID_REQUEST, "Duplicate topic name."))
            continue
        if not authorize(broker, header, AclOperation.DELETE, ResourceType.TOPIC, name):
            results.append(_result(name, ZERO_UUID, ErrorCode.TOPIC_AUTHORIZATION_FAILED, TOPIC_DENIED))
            continue
        info = topics.get(name)
        if info is None:
            results.append(_result(name, ZERO_UUID, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                                   "This server does not host this topic-partition."))
        elif name in to_delete:
            del to_delete[name]
            results.append(_result(name, topic_id_of(info), ErrorCode.INVALID_REQUEST,
                                   "The provided topic name maps to an ID that was already supplied."))
        else:
            to_delete[name] = topic_id_of(info)
    mutations = mutation_quota(broker, header, strict_since=5)
    for name, topic_id in to_delete.items():
        try:
            mutations.take(topics[name].partitions)
            delete_topic(broker, name)
        except KafkaError as e:
            results.append(_result(name, topic_id, e.code, e.message))
        else:
            results.append(_result(name, topic_id))
    return mutations.finish(header, Struct(throttle_time_ms=0, responses=results))
