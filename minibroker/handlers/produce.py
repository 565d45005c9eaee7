"""Produce: v0-v13.

Behaviour: each partition's records are validated, checked against the producer's sequence
state, given offsets and appended (ReplicaManager.append_records); results are per partition,
so one bad partition never fails the others: a partition is appended only if its records passed
validation, and whatever goes wrong for one partition, even an exception no check foresaw
(UNKNOWN_SERVER_ERROR for that partition, logged once per site by report_unexpected), the others
are still appended and the response still comes. acks=0 gets no response at all; acks=1 and
acks=-1 answer alike on one node (the append is done when we answer), so ``timeout_ms`` never
expires. Produce never creates topics: an unknown one is error 3. log_append_time is -1 for
CreateTime topics and the broker's time for LogAppendTime ones. Duplicates of one of a
producer's last five batches get DUPLICATE_SEQUENCE_NUMBER with the original base offset.
Version notes: v3+ needs magic 2 (the validator enforces the format rules); v7+ may carry zstd;
v8+ reports record_errors and error_message; v11 adds TRANSACTION_ABORTABLE to the vocabulary (never
sent here); v12 (KIP-890 part 2): a transactional batch adds its partition to the producer's
transaction itself, as AddPartitionsToTxn would (the coordinator's errors mapped as Kafka's
ReplicaManager maps a failed verification: PRODUCER_FENCED -> INVALID_PRODUCER_EPOCH, a busy or
loading coordinator -> NOT_ENOUGH_REPLICAS, which producers retry); v13 names topics by id (KIP-516):
an id no topic has gets UNKNOWN_TOPIC_ID 100 on each of its partitions.
Validation off the event loop: a partition whose records would take more than
``INLINE_VALIDATION_WORK`` (~5 ms) to validate (a large compressed batch, a decompression bomb) is
validated in the replica manager's worker thread. The handler stays synchronous (the registry
requires it of requests that carry records: they are views of the connection's read buffer,
reused as soon as the request is handled): it copies those partitions' records and returns a
coroutine that waits for the worker and appends them, while the others are appended at once.
The connection answers its requests in order, so that request's answer, and the requests behind
it on that connection, wait; other connections are served meanwhile.
Transactional batches are appended like idempotent ones; the producer state notes where each
producer's open transaction starts (the last stable offset waits for its marker).
Authorization (with an authorizer): WRITE on the transactional id, if any (else every partition gets
TRANSACTIONAL_ID_AUTHORIZATION_FAILED), and WRITE on each topic (else its partitions get
TOPIC_AUTHORIZATION_FAILED, before any existence check), as Kafka checks; idempotent producers need
nothing more here (Kafka checks them at InitProducerId).
Quotas: with a producer_byte_rate quota for the client (minibroker/services/quotas.py), the request's
record bytes are counted; over the quota the records are still appended, the response carries
throttle_time_ms and the connection is muted for it (acks=0 too, without a response), as Kafka does.
Gaps: before v12, no KIP-890 verification that a transactional batch's partition was added to its
transaction (``transaction.partition.verification.enable``): Kafka before 3.6 did none either.
"""

from __future__ import annotations

import logging
import time

from minibroker.errors import ErrorCode, KafkaError
from minibroker.handlers.registry import CloseConnection, handles
from minibroker.protocol.codec import Struct
from minibroker.protocol.declarations import ZERO_UUID
from minibroker.records import v2
from minibroker.records.budget import ValidationDeferred
from minibroker.security.acls import AclOperation, ResourceType
from minibroker.security.authorizer import authorize, denied
from minibroker.services.replica_manager import INLINE_VALIDATION_WORK, report_unexpected

log = logging.getLogger("minibroker.produce")


def _partition_error(index: int, e: KafkaError) -> Struct:
    record_errors = [Struct(batch_index=i, batch_index_error_message=msg)
                     for i, msg in e.details.get("record_errors", ())]
    return Struct(index=index, error_code=int(e.code), base_offset=e.details.get("base_offset", -1),
                  log_append_time_ms=-1, log_start_offset=-1, record_errors=record_errors,
                  error_message=e.message)


def _partition_ok(index: int, outcome) -> Struct:
    return Struct(index=index, error_code=0, base_offset=outcome.base_offset,
                  log_append_time_ms=outcome.log_append_time_ms, log_start_offset=outcome.log_start_offset,
                  record_errors=[], error_message=None)


def _failed(topic: str, index: int, e: Exception) -> Struct:
    if isinstance(e, KafkaError):
        if e.code != ErrorCode.DUPLICATE_SEQUENCE_NUMBER:
            log.debug("produce to %s-%d rejected: %s %s", topic, index, e.code.name, e)
        return _partition_error(index, e)
    # a bug: answer it for this partition, never drop the request
    report_unexpected(topic, index, e, ErrorCode.UNKNOWN_SERVER_ERROR.name)
    return _partition_error(index, KafkaError(ErrorCode.UNKNOWN_SERVER_ERROR, f"{type(e).__name__}: {e}"))


# Kafka's ReplicaManager turns the coordinator's answers to a produce's implicit AddPartitionsToTxn into
# errors producers know: retriable ones into NOT_ENOUGH_REPLICAS (no metadata refresh), a fence into
# INVALID_PRODUCER_EPOCH.
_IMPLICIT_ADD_ERRORS = {
    ErrorCode.PRODUCER_FENCED: ErrorCode.INVALID_PRODUCER_EPOCH,
    ErrorCode.CONCURRENT_TRANSACTIONS: ErrorCode.NOT_ENOUGH_REPLICAS,
    ErrorCode.COORDINATOR_LOAD_IN_PROGRESS: ErrorCode.NOT_ENOUGH_REPLICAS,
    ErrorCode.COORDINATOR_NOT_AVAILABLE: ErrorCode.NOT_ENOUGH_REPLICAS,
    ErrorCode.NOT_COORDINATOR: ErrorCode.NOT_ENOUGH_REPLICAS,
}


def _add_to_transaction(broker, transactional_id: str, topic: str, index: int, records) -> None:
    """Produce v12+ (KIP-890 part 2): a transactional batch adds its partition to its producer's
    transaction, with the batch's producer id and epoch, before it is appended."""
    if records is None or len(records) < v2.HEADER_SIZE or records[v2.MAGIC_OFFSET] != 2:
        return  # not a v2 batch: the validator answers it
    batch = v2.BatchHeader(records)
    if not batch.is_transactional or batch.producer_id < 0:
        return
    try:
        broker.replicas.get_log(topic, index)
    except KafkaError:
        return  # no such partition: nothing to add, the append answers it
    try:
        if broker.transactions is None:
            raise KafkaError(ErrorCode.COORDINATOR_NOT_AVAILABLE)
        broker.transactions.add_partitions(transactional_id, batch.producer_id, batch.producer_epoch,
                                           [(topic, index)])
    except KafkaError as e:
        raise KafkaError(_IMPLICIT_ADD_ERRORS.get(e.code, e.code), e.message) from e


def _topic_response(topic, partitions) -> Struct:
    return Struct(name=topic.name, topic_id=topic.topic_id, partition_responses=partitions)


@handles(0, (0, 13))
def handle_produce(broker, header, request):
    version = header.api_version
    replicas = broker.replicas
    now_ms = int(time.time() * 1000)
    responses = []
    deferred = []  # (partition list, slot, topic, partition, own copy of the records)
    if version >= 13:
        for topic in request.topic_data:
            topic.name = broker.logs.topic_name(topic.topic_id) if topic.topic_id != ZERO_UUID else None
    adds_partitions = version >= 12 and request.transactional_id is not None
    refused = _refused(broker, header, request) if broker.authorizer is not None else None
    for topic in request.topic_data:
        partitions = []
        if topic.name is None:
            partitions = [_partition_error(p.index, KafkaError(ErrorCode.UNKNOWN_TOPIC_ID))
                          for p in topic.partition_data]
            responses.append(_topic_response(topic, partitions))
            continue
        if refused is not None and (refused[0] or topic.name in refused[1]):
            error = refused[0] or ErrorCode.TOPIC_AUTHORIZATION_FAILED
            partitions = [_partition_error(p.index, KafkaError(error)) for p in topic.partition_data]
            responses.append(_topic_response(topic, partitions))
            continue
        for pdata in topic.partition_data:
            try:
                key = (topic.name, pdata.index)
                if adds_partitions:
                    _add_to_transaction(broker, request.transactional_id, topic.name, pdata.index,
                                        pdata.records)
                if deferred and pdata.records and key in {(d[2], d[3]) for d in deferred}:
                    # the same partition again: after the deferred one (null records are refused now,
                    # appending nothing, so their order does not matter)
                    raise ValidationDeferred()
                outcome = replicas.append_records(topic.name, pdata.index, pdata.records, version, now_ms,
                                                  work_budget=INLINE_VALIDATION_WORK)
                partitions.append(_partition_ok(pdata.index, outcome))
            except ValidationDeferred:
                # copied now: ``pdata.records`` is a view of the read buffer, reused once we return
                own = bytearray(pdata.records)
                deferred.append((partitions, len(partitions), topic.name, pdata.index, own))
                partitions.append(None)
            except Exception as e:
                partitions.append(_failed(topic.name, pdata.index, e))
        responses.append(_topic_response(topic, partitions))
    throttle_ms = 0
    quotas = vars(broker).get("client_quotas")  # None until a client quota is set
    if quotas is not None and quotas.produce.enabled:  # producer_byte_rate: the record bytes count
        throttle_ms = quotas.charge_produce(header, sum(
            len(p.records) for t in request.topic_data for p in t.partition_data if p.records is not None))
    if deferred:
        return _finish_in_worker(replicas, version, now_ms, request.acks, responses, deferred, throttle_ms)
    return _answer(request.acks, responses, throttle_ms)


def _refused(broker, header, request) -> tuple[ErrorCode | None, frozenset[str]]:
    """Kafka's checks before appending: WRITE on the transactional id when there is one (else every
    partition is TRANSACTIONAL_ID_AUTHORIZATION_FAILED), then WRITE on each topic."""
    transactional_id = request.transactional_id if header.api_version >= 3 else None
    if transactional_id is not None and not authorize(broker, header, AclOperation.WRITE,
                                                      ResourceType.TRANSACTIONAL_ID, transactional_id):
        return ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, frozenset()
    return None, denied(broker, header, AclOperation.WRITE, ResourceType.TOPIC,
                        (t.name for t in request.topic_data if t.name is not None))


async def _finish_in_worker(replicas, version: int, now_ms: int, acks: int, responses, deferred,
                            throttle_ms: int = 0):
    """The deferred partitions, validated in the worker one after another and each appended as soon as
    it is back (``ReplicaManager.append_records_in_worker``), then the answer to the whole request."""
    for partitions, slot, topic, index, records in deferred:
        try:
            outcome = await replicas.append_records_in_worker(topic, index, records, version, now_ms)
            partitions[slot] = _partition_ok(index, outcome)
        except Exception as e:
            partitions[slot] = _failed(topic, index, e)
    return _answer(acks, responses, throttle_ms)


def _answer(acks: int, responses, throttle_ms: int = 0):
    if acks == 0:
        # No response to carry an error: Kafka closes the connection so the producer notices.
        if any(p.error_code for t in responses for p in t.partition_responses):
            raise CloseConnection("acks=0 produce failed")
        return None
    return Struct(responses=responses, throttle_time_ms=throttle_ms)
