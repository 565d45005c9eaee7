"""CreatePartitions: v0-v3.

Behaviour: raises a topic's partition count to ``count`` at once (new partitions start empty,
on this broker). Errors as the KRaft controller gives them: unknown topic 3, a count not above
the current one 37, a manual assignment whose length is not the number of new partitions or
that names another broker or a broker twice 39, a topic named twice 42 "Duplicate topic name."
``validate_only`` checks and changes nothing.
Version notes: v2+ flexible encoding; nothing else differs.
Gaps: none known (no CreateTopicPolicy/quotas, so 44 and 89 never appear).
"""

from __future__ import annotations

from collections import Counter

from minibroker.errors import ErrorCode, KafkaError
from minibroker.handlers.registry import handles
from minibroker.protocol.codec import Struct
from minibroker.topic_admin import check_new_partitions


@handles(37, (0, 3))
def handle_create_partitions(broker, header, request):
    counts = Counter(t.name for t in request.topics)  # a name given twice is refused (INVALID_REQUEST)
    results = []
    for t in request.topics:
        if counts[t.name] > 1:
            continue
        try:
            check_new_partitions(broker, t.name, t.count, t.assignments)
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
    return Struct(throttle_time_ms=0, results=results)
