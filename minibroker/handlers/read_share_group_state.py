"""ReadShareGroupState: v0.

Behaviour: for each (topic id, partition), the share partition's persisted state from
``broker.share_state.read``: state epoch, start offset and the state batches (first/last offset, delivery
state, delivery count). A request leader epoch newer than the recorded one is recorded (a ShareUpdate
with no batches), as Kafka's share coordinator does on a read.
Errors, per partition: INVALID_REQUEST 42 for a share partition never initialized (Kafka's "Read
operation on uninitialized share partition not allowed"), an empty group id, a zero topic id or a negative
partition; FENCED_LEADER_EPOCH 74 (leader epoch older than the recorded one, -1 included),
COORDINATOR_LOAD_IN_PROGRESS 14, NOT_COORDINATOR 16 / COORDINATOR_NOT_AVAILABLE 15 (the leader-epoch
record could not be written), UNSUPPORTED_VERSION 35 when share groups are off.
Authorization (with an authorizer): CLUSTER_ACTION on the cluster, else CLUSTER_AUTHORIZATION_FAILED 31.
Version notes: v0 only; not listed in ApiVersions (unstable in Kafka 4.2), answered when asked.
Gaps: Kafka also answers UNKNOWN_TOPIC_OR_PARTITION for a topic id or partition its metadata does not
know; here the state of any topic id can be read.
"""

from __future__ import annotations

from minibroker.handlers.registry import handles
from minibroker.handlers.share_state_requests import answer, check_leader_epoch, require_state
from minibroker.protocol.codec import Struct


def _read(store, group_id: str, topic_id: bytes, p) -> dict:
    state = require_state(store.read(group_id, topic_id, p.partition), "Read")
    check_leader_epoch(state, p.leader_epoch)
    if p.leader_epoch > state.leader_epoch:
        store.write(group_id, topic_id, p.partition, -1, [], leader_epoch=p.leader_epoch)
    return {"state_epoch": state.state_epoch, "start_offset": state.start_offset,
            "state_batches": [Struct(first_offset=b.first_offset, last_offset=b.last_offset,
                                     delivery_state=b.delivery_state, delivery_count=b.delivery_count)
                              for b in state.batches]}


@handles(84, (0, 0), advertised=False)
def handle_read_share_group_state(broker, header, request):
    return answer(broker, header, request, _read, {"state_epoch": 0, "start_offset": -1, "state_batches": []})
