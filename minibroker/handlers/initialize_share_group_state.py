"""InitializeShareGroupState: v0.

Behaviour: for each (topic id, partition), (re)sets the share partition's persisted state to the request's
start offset and state epoch with no in-flight batches (a ShareSnapshot record in
``__share_group_state``, through ``broker.share_state.initialize``), as Kafka's share coordinator does
when a share partition is first used or its offsets are altered.
Errors, per partition: FENCED_STATE_EPOCH 124 (a state with a newer state epoch exists; a request state
epoch of -1 is not checked), INVALID_REQUEST 42
(empty group id, zero topic id, negative partition, start offset below -1), COORDINATOR_LOAD_IN_PROGRESS
14 while the state topic loads, NOT_COORDINATOR 16 / COORDINATOR_NOT_AVAILABLE 15 when the append fails,
UNSUPPORTED_VERSION 35 when share groups are off (share.version 0).
Authorization (with an authorizer): CLUSTER_ACTION on the cluster, else every partition
CLUSTER_AUTHORIZATION_FAILED 31 (Kafka's inter-broker check).
Version notes: v0 only; not listed in ApiVersions (unstable in Kafka 4.2), answered when asked.
Gaps: Kafka also answers UNKNOWN_TOPIC_OR_PARTITION for a topic id or partition its metadata does not
know.
"""

from __future__ import annotations

from minibroker.handlers.registry import handles
from minibroker.handlers.share_state_requests import answer, check_start_offset, check_state_epoch


def _initialize(store, group_id: str, topic_id: bytes, p) -> dict:
    check_start_offset(p)
    check_state_epoch(store.read(group_id, topic_id, p.partition), p.state_epoch)
    store.initialize(group_id, topic_id, p.partition, p.start_offset, p.state_epoch)
    return {}


@handles(83, (0, 0), advertised=False)
def handle_initialize_share_group_state(broker, header, request):
    return answer(broker, header, request, _initialize, {})
