"""TxnOffsetCommit: v0-v5.

Behaviour: offsets committed inside a transaction (consume-transform-produce). The transaction must
be Ongoing with the group's ``__consumer_offsets`` partition in it (AddOffsetsToTxn first, else
INVALID_TXN_STATE 48); the producer id must be the transactional id's (INVALID_PRODUCER_ID_MAPPING 49)
at its current epoch (INVALID_PRODUCER_EPOCH 47, which every client treats as fenced). Then the group
checks of KIP-447: FENCED_INSTANCE_ID 82, a member id that is given must be in the group
(UNKNOWN_MEMBER_ID 25), a generation that is given (>= 0) must be the group's (ILLEGAL_GENERATION 22;
also for an unknown group). The offsets are written at once as records of the producer's
transaction and stay pending until the marker: a commit makes them the group's offsets, an abort
drops them; OffsetFetch with ``require_stable`` answers UNSTABLE_OFFSET_COMMIT 88 meanwhile.
Partitions of unknown topics get UNKNOWN_TOPIC_OR_PARTITION 3, metadata longer than
``offset.metadata.max.bytes`` OFFSET_METADATA_TOO_LARGE 12; errors of the whole request go to every
partition (COORDINATOR_LOAD_IN_PROGRESS 14, INVALID_GROUP_ID 24).
Version notes: v2 adds the committed leader epoch (v0-v1 get COORDINATOR_NOT_AVAILABLE 15 for
COORDINATOR_LOAD_IN_PROGRESS, as Kafka answers pre-2.0 clients); v3 generation, member id and group
instance id (KIP-447) and flexible; v4 adds TRANSACTION_ABORTABLE to the vocabulary (never sent); v5
(KIP-890 part 2) adds the group's ``__consumer_offsets`` partition to the transaction itself, as
AddOffsetsToTxn would (so a v5 commit needs no AddOffsetsToTxn before it).
Authorization (with an authorizer), as Kafka: WRITE on the transactional id (else every partition
TRANSACTIONAL_ID_AUTHORIZATION_FAILED), READ on the group (else GROUP_AUTHORIZATION_FAILED), READ on each
topic (else TOPIC_AUTHORIZATION_FAILED).
Gaps: none known.
"""

from __future__ import annotations

import time

from minibroker.coordinator.group_records import OffsetCommitValue
from minibroker.coordinator.offsets_store import OFFSETS_TOPIC
from minibroker.errors import ErrorCode, KafkaError
from minibroker.handlers.offset_commit import commit_response, known_partitions
from minibroker.handlers.registry import handles
from minibroker.security.acls import AclOperation, ResourceType
from minibroker.security.authorizer import authorize


def _commit(broker, version: int, request, wanted) -> dict[tuple[str, int], ErrorCode]:
    if broker.transactions is None or broker.groups is None:
        raise KafkaError(ErrorCode.COORDINATOR_NOT_AVAILABLE)
    offsets_partition = broker.groups.partition_for(request.group_id)
    try:
        if version >= 5:
            broker.transactions.add_partitions(request.transactional_id, request.producer_id,
                                               request.producer_epoch, [(OFFSETS_TOPIC, offsets_partition)])
        else:
            broker.transactions.ensure_offsets_partition_in_transaction(
                request.transactional_id, request.producer_id, request.producer_epoch, offsets_partition)
    except KafkaError as e:
        if e.code == ErrorCode.PRODUCER_FENCED:  # what a stale epoch's append gets: all versions know it
            raise KafkaError(ErrorCode.INVALID_PRODUCER_EPOCH, e.message) from e
        raise
    generation = request.generation_id if version >= 3 else -1
    member_id = request.member_id if version >= 3 else ""
    instance_id = request.group_instance_id if version >= 3 else None
    return broker.groups.commit_transactional_offsets(request.group_id, request.producer_id,
                                                      request.producer_epoch, generation, member_id,
                                                      instance_id, wanted)


@handles(28, (0, 5))
def handle_txn_offset_commit(broker, header, request):
    version = header.api_version
    now = int(time.time() * 1000)
    errors: dict[tuple[str, int], ErrorCode] = {}
    wanted: dict[tuple[str, int], OffsetCommitValue] = {}
    for operation, resource_type, name, code in (
            (AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, request.transactional_id,
             ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED),
            (AclOperation.READ, ResourceType.GROUP, request.group_id, ErrorCode.GROUP_AUTHORIZATION_FAILED)):
        if not authorize(broker, header, operation, resource_type, name):
            return commit_response(request, {(t.name, p.partition_index): code
                                             for t in request.topics for p in t.partitions})
    for tp, p in known_partitions(broker, request, errors, header):
        leader_epoch = p.committed_leader_epoch if version >= 2 else -1
        wanted[tp] = OffsetCommitValue(p.committed_offset, p.committed_metadata or "", now, leader_epoch, -1)
    if wanted:
        try:
            errors.update(_commit(broker, version, request, wanted))
        except KafkaError as e:
            errors.update({tp: e.code for tp in wanted})
    if version < 2:
        errors = {tp: ErrorCode.COORDINATOR_NOT_AVAILABLE if code == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
                  else code for tp, code in errors.items()}
    return commit_response(request, errors)
