"""ReadShareGroupStateSummary: v0-v1.

Behaviour: for each (topic id, partition), the summary of the share partition's persisted state from
``broker.share_state.read``: state epoch, leader epoch, start offset, and (v1) the delivery complete count
(offsets at or above the start offset that are acknowledged or archived). A share partition without
state answers start offset -1, state epoch 0, leader epoch -1 and delivery complete count -1.
Errors, per partition: INVALID_REQUEST 42, COORDINATOR_LOAD_IN_PROGRESS 14, UNSUPPORTED_VERSION 35 when
share groups are off.
Authorization (with an authorizer): CLUSTER_ACTION on the cluster, else CLUSTER_AUTHORIZATION_FAILED 31.
Version notes: v1 adds DeliveryCompleteCount; not listed in ApiVersions (unstable in Kafka 4.2),
answered when asked.
Gaps: the request's leader epoch is not checked (Kafka's share coordinator does not either); Kafka also
answers UNKNOWN_TOPIC_OR_PARTITION for a topic id or partition its metadata does not know.
"""

from __future__ import annotations

from minibroker.handlers.registry import handles
from minibroker.handlers.share_state_requests import answer

_UNKNOWN = {"state_epoch": 0, "leader_epoch": -1, "start_offset": -1, "delivery_complete_count": -1}


def _summary(store, group_id: str, topic_id: bytes, p) -> dict:
    state = store.read(group_id, topic_id, p.partition)
    if state is None:
        return dict(_UNKNOWN)
    return {"state_epoch": state.state_epoch, "leader_epoch": state.leader_epoch,
            "start_offset": state.start_offset, "delivery_complete_count": state.delivery_complete_count()}


@handles(87, (0, 1), advertised=False)
def handle_read_share_group_state_summary(broker, header, request):
    return answer(broker, header, request, _summary, dict(_UNKNOWN))
