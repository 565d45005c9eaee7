"""CreateTopics: v0-v7.

Behaviour: this broker is the controller, so topics are created at once and ``timeout_ms`` is
never reached (as in KRaft, where the answer waits only for the metadata commit). Each
topic is checked on its own (topic_admin.check_new_topic): illegal name or a '.'/'_' collision 17,
exists 36, partitions 37 (-1 = ``num.partitions``), replication factor 38 (-1 =
``default.replication.factor``; more than one broker is impossible), replica assignment 39 (every
partition on broker ``node.id``, contiguous indexes, and then partitions and replication factor
must be -1, else 42), configs 40. A name given twice gets 42 "Found multiple entries for this
topic." for every entry. ``validate_only`` runs the same checks and answers as a real creation
would, without creating anything.
Authorization (with an authorizer), as Kafka: CREATE on the cluster or on the topic, else
TOPIC_AUTHORIZATION_FAILED "Authorization failed."; a created topic whose configs the principal may not
DESCRIBE_CONFIGS is answered without them, topic_config_error_code TOPIC_AUTHORIZATION_FAILED.
Version notes: v1+ validate_only and error_message; v2+ throttle time; v5+ the partition count,
replication factor and every topic config with its source (as DescribeConfigs would give it);
v7+ the topic id (a fresh random one for validate-only, as the controller does).
A request asking for more than 10000 partitions in all gets 44 POLICY_VIOLATION "Excessively
large number of partitions per request." for every topic, as from Kafka's controller (whose
MAX_PARTITIONS_PER_BATCH guards its memory; here creating that many would stall every client).
The controller_mutation_rate client quota (KIP-599, minibroker/services/quotas.py) is taken per topic
once its checks pass, one token per partition (validate_only too, as Kafka's controller counts it):
while the client's bucket is below zero a topic gets 89 THROTTLING_QUOTA_EXCEEDED "The throttling quota
has been exceeded." (v6+; v0-v5 are never refused), and the response carries the throttle time.
Gaps: no CreateTopicPolicy (44 comes only from the limit above).
"""

from __future__ import annotations

from collections import Counter

from minibroker.config import describe_topic_configs
from minibroker.errors import ErrorCode, KafkaError
from minibroker.handlers.registry import handles
from minibroker.protocol.codec import Struct
from minibroker.protocol.declarations import ZERO_UUID
from minibroker.protocol.uuids import uuid4_bytes
from minibroker.security.acls import AclOperation, ResourceType
from minibroker.security.authorizer import authorize, denied
from minibroker.services import mutation_quota
from minibroker.services.topic_admin import check_new_topic, topic_id_of

MAX_PARTITIONS_PER_REQUEST = 10_000  # Kafka: ReplicationControlManager.MAX_PARTITIONS_PER_BATCH


def requested_partitions(broker, topics) -> int:
    """Partitions a request asks for in all, counted as Kafka's validateTotalNumberOfPartitions does."""
    total = 0
    for t in topics:
        if t.assignments:
            total += len(t.assignments)
        elif t.num_partitions == -1:
            total += broker.config["num.partitions"]
        elif t.num_partitions > 0:
            total += t.num_partitions
    return total


def _error(name: str, code: int, message: str | None) -> Struct:
    return Struct(name=name, topic_id=ZERO_UUID, error_code=int(code), error_message=message,
                  topic_config_error_code=0, num_partitions=-1, replication_factor=-1, configs=[])


def _config_entries(broker, overrides: dict) -> list[Struct]:
    return [Struct(name=e.name, value=e.value, read_only=e.read_only, config_source=int(e.source),
                   is_sensitive=e.sensitive)
            for e in describe_topic_configs(broker.config, overrides, include_synonyms=False,
                                            include_documentation=False)]


@handles(19, (0, 7))
def handle_create_topics(broker, header, request):
    validate_only = bool(request.validate_only)
    counts = Counter(t.name for t in request.topics)  # a name given twice is refused (INVALID_REQUEST)
    results = []
    unique = [t for t in request.topics if counts[t.name] == 1]
    too_many = requested_partitions(broker, unique) > MAX_PARTITIONS_PER_REQUEST
    refused = hidden_configs = frozenset()
    if broker.authorizer is not None:
        if not authorize(broker, header, AclOperation.CREATE, ResourceType.CLUSTER, log_denied=False):
            refused = denied(broker, header, AclOperation.CREATE, ResourceType.TOPIC, counts)
        hidden_configs = denied(broker, header, AclOperation.DESCRIBE_CONFIGS, ResourceType.TOPIC, counts,
                                log_denied=False)
    mutations = mutation_quota(broker, header, strict_since=6)
    for t in unique:
        if refused and t.name in refused:
            results.append(_error(t.name, ErrorCode.TOPIC_AUTHORIZATION_FAILED, "Authorization failed."))
            continue
        if too_many:
            results.append(_error(t.name, ErrorCode.POLICY_VIOLATION,
                                  "Excessively large number of partitions per request."))
            continue
        configs = {c.name: c.value for c in t.configs}
        try:
            if len(configs) != len(t.configs):
                raise KafkaError(ErrorCode.INVALID_REQUEST, "Duplicate config keys in the request.")
            new = check_new_topic(broker, t.name, t.num_partitions, t.replication_factor, configs,
                                  t.assignments)
            mutations.take(new.partitions)
            if validate_only:
                topic_id = uuid4_bytes()
            else:
                topic_id = topic_id_of(broker.logs.create_topic(new.name, new.partitions, new.configs))
        except KafkaError as e:
            results.append(_error(t.name, e.code, e.message))
            continue
        if t.name in hidden_configs:  # created, but its configs are not shown
            results.append(Struct(name=t.name, topic_id=topic_id, error_code=0, error_message=None,
                                  topic_config_error_code=int(ErrorCode.TOPIC_AUTHORIZATION_FAILED),
                                  num_partitions=new.partitions, replication_factor=new.replication_factor,
                                  configs=[]))
            continue
        results.append(Struct(name=t.name, topic_id=topic_id, error_code=0, error_message=None,
                              topic_config_error_code=0, num_partitions=new.partitions,
                              replication_factor=new.replication_factor,
                              configs=_config_entries(broker, new.configs)))
    for name, n in counts.items():
        if n > 1:
            results.append(_error(name, ErrorCode.INVALID_REQUEST, "Found multiple entries for this topic."))
    return mutations.finish(header, Struct(throttle_time_ms=0, topics=results))
