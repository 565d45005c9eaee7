"""DeleteShareGroupState: v0.

Behaviour: for each (topic id, partition), forgets the share partition's persisted state
(``broker.share_state.delete``: a tombstone of its ShareSnapshot key); a share partition without state
answers NONE, as Kafka.
Errors, per partition: INVALID_REQUEST 42 (empty group id, zero topic id, negative partition),
COORDINATOR_LOAD_IN_PROGRESS 14, NOT_COORDINATOR 16 / COORDINATOR_NOT_AVAILABLE 15 when the append fails,
UNSUPPORTED_VERSION 35 when share groups are off.
Authorization (with an authorizer): CLUSTER_ACTION on the cluster, else CLUSTER_AUTHORIZATION_FAILED 31.
Version notes: v0 only; not listed in ApiVersions (unstable in Kafka 4.2), answered when asked.
Gaps: Kafka also answers UNKNOWN_TOPIC_OR_PARTITION for a topic id or partition its metadata does not
know.
"""

from __future__ import annotations

from minibroker.handlers.registry import handles
from minibroker.handlers.share_state_requests import answer


def _delete(store, group_id: str, topic_id: bytes, p) -> dict:
    store.delete(group_id, topic_id, p.partition)
    return {}


@handles(86, (0, 0), advertised=False)
def handle_delete_share_group_state(broker, header, request):
    return answer(broker, header, request, _delete, {})
