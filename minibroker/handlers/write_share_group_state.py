"""WriteShareGroupState: v0.

Behaviour: for each (topic id, partition), merges the request's state batches into the share partition's
persisted state through ``broker.share_state.write``: start offset -1 keeps the recorded one, a batch
replaces the states of the offsets it covers, batches below the start offset are dropped; a ShareUpdate
record (a ShareSnapshot every share.coordinator.snapshot.update.records.per.snapshot updates). As in
Kafka, a write does not change the recorded leader epoch (a read with a newer one does); it is only
checked.
Errors, per partition: INVALID_REQUEST 42 for a share partition never initialized (Kafka's "Write
operation on uninitialized share partition not allowed"), an empty group id, a zero topic id, a negative
partition, a start offset below -1, a batch with a negative first offset or first > last or a delivery
state other than 0, 1, 2, 4, or a negative delivery count; FENCED_LEADER_EPOCH 74 (a leader epoch other
than -1 older than the recorded one), FENCED_STATE_EPOCH 124 (a state epoch other than -1 older than the
recorded one), COORDINATOR_LOAD_IN_PROGRESS 14, NOT_COORDINATOR 16 / COORDINATOR_NOT_AVAILABLE 15 when the
append fails, UNSUPPORTED_VERSION 35 when share groups are off.
Authorization (with an authorizer): CLUSTER_ACTION on the cluster, else CLUSTER_AUTHORIZATION_FAILED 31.
Version notes: v0 only (Kafka 4.2's); not listed in ApiVersions (unstable in Kafka 4.2), answered when
asked.
Gaps: Kafka also answers UNKNOWN_TOPIC_OR_PARTITION for a topic id or partition its metadata does not
know; the batch checks are ours (Kafka's coordinator takes batches as they come).
"""

from __future__ import annotations

from minibroker.coordinator.share_state import DeliveryState, StateBatch
from minibroker.errors import ErrorCode
from minibroker.handlers.registry import handles
from minibroker.handlers.share_state_requests import (
    PartitionError,
    answer,
    check_leader_epoch,
    check_start_offset,
    check_state_epoch,
    require_state,
)

_STATES = frozenset(int(s) for s in DeliveryState)


def _batches(p) -> list[StateBatch]:
    out = []
    for b in p.state_batches:
        if (b.first_offset < 0 or b.last_offset < b.first_offset or b.delivery_state not in _STATES
                or b.delivery_count < 0):
            raise PartitionError(ErrorCode.INVALID_REQUEST,
                                 f"Invalid state batch {b.first_offset}-{b.last_offset} state "
                                 f"{b.delivery_state} count {b.delivery_count}.")
        out.append(StateBatch(b.first_offset, b.last_offset, b.delivery_state, b.delivery_count))
    return out


def _write(store, group_id: str, topic_id: bytes, p) -> dict:
    check_start_offset(p)
    batches = _batches(p)
    state = require_state(store.read(group_id, topic_id, p.partition), "Write")
    if p.leader_epoch != -1:
        check_leader_epoch(state, p.leader_epoch)
    check_state_epoch(state, p.state_epoch)
    store.write(group_id, topic_id, p.partition, p.start_offset, batches)
    return {}


@handles(85, (0, 0), advertised=False)
def handle_write_share_group_state(broker, header, request):
    return answer(broker, header, request, _write, {})
