"""Per-partition answers (the house rule: one bad partition never fails the request): each partition of
each named topic answered on its own, a KafkaError becoming that partition's error code, a topic the
principal may not use answered TOPIC_AUTHORIZATION_FAILED for all its partitions.

Not a handler module: ListOffsets, OffsetForLeaderEpoch and DeleteRecords use it.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable
from operator import attrgetter

from minibroker.errors import ErrorCode, KafkaError
from minibroker.protocol.codec import Struct


def answer_partitions(topics: Iterable, refused: Collection[str], answer: Callable, failed: Callable,
                      name: Callable = attrgetter("name")) -> list[tuple[object, list[Struct]]]:
    """(topic request, its partitions' answers) for each topic: ``answer(topic name, partition request)``,
    or ``failed(partition request, error code)`` when it raises KafkaError or the topic is ``refused``."""
    out = []
    for topic in topics:
        topic_name = name(topic)
        partitions = []
        for p in topic.partitions:
            try:
                if refused and topic_name in refused:
                    raise KafkaError(ErrorCode.TOPIC_AUTHORIZATION_FAILED)
                partitions.append(answer(topic_name, p))
            except KafkaError as e:
                partitions.append(failed(p, e.code))
        out.append((topic, partitions))
    return out
