"""CreatePartitions: v0-v3.

Behaviour: raises a topic's partition count to ``count`` at once (new partitions start empty,
on this broker). Errors as the KRaft controller gives them: unknown topic 3, a count not above
the current one 37, a manual assignment whose length is not the number of new partitions or
that names another broker or a broker twice 39, a topic named twice 42 "Duplicate topic name."
``validate_only`` checks and changes nothing. More than 10000 new partitions in one request: 44
POLICY_VIOLATION "Unable to perform excessively large batch operation." for every topic, as Kafka's
controller answers an operation of more than 10000 records (creating that many here would stall
every client).
Authorization (with an authorizer): ALTER on each topic, else TOPIC_AUTHORIZATION_FAILED, as Kafka.
Version notes: v2+ flexible encoding; nothing else differs.
The controller_mutation_rate client quota (KIP-599, minibroker/services/quotas.py) is taken per topic
once its checks pass, one token per new partition (validate_only too, as Kafka's controller counts it):
while the client's bucket is below zero a topic gets 89 THROTTLING_QUOTA_EXCEEDED (v3+; v0-v2 are never
refused), and the response carries the throttle time.
Gaps: no CreateTopicPolicy (44 comes only from the limit above).
"""

from __future__ import annotations

from collections import Counter

from minibroker.errors import ErrorCode, KafkaError
from minibroker.handlers.registry import handles
from minibroker.protocol.codec import Struct
from minibroker.security.acls import AclOperation, ResourceType
from minibroker.security.authorizer import denied
from minibroker.services import mutation_quota
from minibroker.services.topic_admin import check_new_partitions

MAX_RECORDS_PER_USER_OP = 10_000  # Kafka's QuorumController: one new partition is one record


def _new_partitions(broker, topics) -> int:
    """New partitions the topics that pass their checks would add."""
    total = 0
    for t in topics:
        try:
            current = check_new_partitions(broker, t.name, t.count, t.assignments)
        except KafkaError:
            continue
        total += t.count - current
    return total


@handles(37, (0, 3))
def handle_create_partitions(broker, header, request):
    counts = Counter(t.name for t in request.topics)  # a name given twice is refused (INVALID_REQUEST)
    results = []
    unique = [t for t in request.topics if counts[t.name] == 1]
    refused = denied(broker, header, AclOperation.ALTER, ResourceType.TOPIC, (t.name for t in unique))
    if refused:
        results = [Struct(name=t.name, error_code=int(ErrorCode.TOPIC_AUTHORIZATION_FAILED),
                          error_message="The topic authorization is failed.")
                   for t in unique if t.name in refused]
        unique = [t for t in unique if t.name not in refused]
    if _new_partitions(broker, unique) > MAX_RECORDS_PER_USER_OP:
        unique, results = [], [Struct(name=t.name, error_code=int(ErrorCode.POLICY_VIOLATION),
                                      error_message="Unable to perform excessively large batch operation.")
                               for t in unique]
    mutations = mutation_quota(broker, header, strict_since=3)
    for t in unique:
        try:
            current = check_new_partitions(broker, t.name, t.count, t.assignments)
            mutations.take(t.count - current)
            if not request.validate_only:
                broker.logs.add_partitions(t.name, t.count)
        except KafkaError as e:
            results.append(Struct(name=t.name, error_code=int(e.code), error_message=e.message))
        else:
            results.append(Struct(name=t.name, error_code=0, error_message=None))
    for name, n in counts.items():
        if n > 1:
            results.append(Struct(name=name, error_code=int(ErrorCode.INVALID_REQUEST),
                                  error_message="Duplicate topic name."))
    return mutations.finish(header, Struct(throttle_time_ms=0, results=results))
