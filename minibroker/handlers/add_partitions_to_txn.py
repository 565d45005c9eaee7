"""AddPartitionsToTxn: v0-v5.

Behaviour: adds partitions to the producer's transaction (Empty or Complete* -> Ongoing, the start
time set; already Ongoing: the set grows), written to ``__transaction_state`` before the answer.
Partitions of unknown topics get UNKNOWN_TOPIC_OR_PARTITION 3 and the others of the same transaction
OPERATION_NOT_ATTEMPTED 55, as Kafka answers; so do internal topics from clients (v0-v3), with
TOPIC_AUTHORIZATION_FAILED 29, as Kafka's authorizer check filters them out. Every partition of a
transaction carries its error: INVALID_PRODUCER_ID_MAPPING 49 (unknown transactional id or another
producer id), PRODUCER_FENCED 90 (another epoch), CONCURRENT_TRANSACTIONS 51 (the previous
transaction is completing: retry), COORDINATOR_LOAD_IN_PROGRESS 14, INVALID_REQUEST 42 (empty id).
Version notes: v2 adds PRODUCER_FENCED (v0-v1 get INVALID_PRODUCER_EPOCH 47); v3 flexible; v4+ is
Kafka's broker-to-broker form (several transactions, a top-level error code) with ``verify_only``
(KIP-890: NONE for partitions in the transaction, TRANSACTION_ABORTABLE 120 for the others, nothing
added); v5 adds TRANSACTION_ABORTABLE to the client versions' vocabulary.
Authorization (with an authorizer), as Kafka: v0-v3 (clients) need WRITE on the transactional id (else
every partition TRANSACTIONAL_ID_AUTHORIZATION_FAILED) and on each topic (else TOPIC_AUTHORIZATION_FAILED 29,
the others OPERATION_NOT_ATTEMPTED); v4+ (brokers) CLUSTER_ACTION on the cluster, else the top-level
CLUSTER_AUTHORIZATION_FAILED.
"""

from __future__ import annotations

from minibroker.coordinator.offsets_store import OFFSETS_TOPIC
from minibroker.coordinator.transaction_coordinator import TRANSACTION_STATE_TOPIC, fenced_error_for
from minibroker.errors import ErrorCode, KafkaError
from minibroker.handlers.registry import handles
from minibroker.protocol.codec import Struct
from minibroker.security.acls import AclOperation, ResourceType
from minibroker.security.authorizer import authorize, denied

INTERNAL_TOPICS = frozenset({OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC})


def _results(broker, header, version: int, transactional_id: str, producer_id: int, producer_epoch: int,
             topics, verify_only: bool = False) -> dict[tuple[str, int], ErrorCode]:
    wanted = [(t.name, p) for t in topics for p in t.partitions]
    if version < 4 and not authorize(broker, header, AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID,
                                     transactional_id):
        return {tp: ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED for tp in wanted}
    unwritable = frozenset()
    if version < 4:
        unwritable = denied(broker, header, AclOperation.WRITE, ResourceType.TOPIC, (t.name for t in topics))
    refused: dict[tuple[str, int], ErrorCode] = {}
    for topic, partition in wanted:
        info = broker.logs.topics.get(topic)
        if version < 4 and (topic in INTERNAL_TOPICS or topic in unwritable):
            refused[(topic, partition)] = ErrorCode.TOPIC_AUTHORIZATION_FAILED
        elif info is None or not 0 <= partition < info.partitions:
            refused[(topic, partition)] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    if refused:
        return {tp: refused.get(tp, ErrorCode.OPERATION_NOT_ATTEMPTED) for tp in wanted}
    coordinator = broker.transactions
    if coordinator is None:
        return {tp: ErrorCode.COORDINATOR_NOT_AVAILABLE for tp in wanted}
    if verify_only:
        return coordinator.verify_partitions(transactional_id, producer_id, producer_epoch, wanted)
    try:
        coordinator.add_partitions(transactional_id, producer_id, producer_epoch, wanted)
    except KafkaError as e:
        code = fenced_error_for(e.code, version, 2)
        return {tp: code for tp in wanted}
    return {tp: ErrorCode.NONE for tp in wanted}


def _topic_results(results: dict[tuple[str, int], ErrorCode]) -> list[Struct]:
    by_topic: dict[str, list[Struct]] = {}
    for (topic, partition), code in results.items():
        by_topic.setdefault(topic, []).append(Struct(partition_index=partition,
                                                     partition_error_code=int(code)))
    return [Struct(name=name, results_by_partition=parts) for name, parts in by_topic.items()]


@handles(24, (0, 5))
def handle_add_partitions_to_txn(broker, header, request):
    version = header.api_version
    if version < 4:
        results = _results(broker, header, version, request.v3_and_below_transactional_id,
                           request.v3_and_below_producer_id, request.v3_and_below_producer_epoch,
                           request.v3_and_below_topics)
        return Struct(throttle_time_ms=0, results_by_topic_v3_and_below=_topic_results(results))
    if not authorize(broker, header, AclOperation.CLUSTER_ACTION, ResourceType.CLUSTER):
        return Struct(throttle_time_ms=0, error_code=int(ErrorCode.CLUSTER_AUTHORIZATION_FAILED),
                      results_by_transaction=[])
    return Struct(throttle_time_ms=0, error_code=0, results_by_transaction=[
        Struct(transactional_id=t.transactional_id,
               topic_results=_topic_results(_results(broker, header, version, t.transactional_id,
                                                     t.producer_id,
                                                     t.producer_epoch, t.topics, t.verify_only)))
        for t in request.transactions])
