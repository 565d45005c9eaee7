"""Produce: v0-v11.

Behaviour: each partition's records are validated, checked against the producer's sequence
state, given offsets and appended (ReplicaManager.append_records); results are per partition,
so one bad partition never fails the others. acks=0 gets no response at all; acks=1 and
acks=-1 answer alike on one node (the append is done when we answer), so ``timeout_ms`` never
expires. Produce never creates topics: an unknown one is error 3. log_append_time is -1 for
CreateTime topics and the broker's time for LogAppendTime ones. Duplicates of one of a
producer's last five batches get DUPLICATE_SEQUENCE_NUMBER with the original base offset.
Version notes: v3+ needs magic 2 (the validator enforces the format rules); v7+ may carry zstd;
v8+ reports record_errors and error_message.
Gaps: transactional produce (transactions are not served, so no client gets that far).
"""

from __future__ import annotations

import logging
import time

from minibroker.errors import ErrorCode, KafkaError
from minibroker.handlers.registry import CloseConnection, handles
from minibroker.protocol.codec import Struct

log = logging.getLogger("minibroker.produce")


def _partition_error(index: int, e: KafkaError) -> Struct:
    record_errors = [Struct(batch_index=i, batch_index_error_message=msg)
                     for i, msg in e.details.get("record_errors", ())]
    return Struct(index=index, error_code=int(e.code), base_offset=e.details.get("base_offset", -1),
                  log_append_time_ms=-1, log_start_offset=-1, record_errors=record_errors,
                  error_message=e.message)


@handles(0, (0, 11))
def handle_produce(broker, header, request):
    version = header.api_version
    replicas = broker.replicas
    now_ms = int(time.time() * 1000)
    responses = []
    for topic in request.topic_data:
        partitions = []
        for pdata in topic.partition_data:
            try:
                if request.transactional_id is not None:
                    raise KafkaError(ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
                                     "transactions are not supported by this broker")
                outcome = replicas.append_records(topic.name, pdata.index, pdata.records, version, now_ms)
                partitions.append(Struct(index=pdata.index, error_code=0, base_offset=outcome.base_offset,
                                         log_append_time_ms=outcome.log_append_time_ms,
                                         log_start_offset=outcome.log_start_offset, record_errors=[],
                                         error_message=None))
            except KafkaError as e:
                if e.code != ErrorCode.DUPLICATE_SEQUENCE_NUMBER:
                    log.debug("produce to %s-%d rejected: %s %s", topic.name, pdata.index, e.code.name, e)
                partitions.append(_partition_error(pdata.index, e))
        responses.append(Struct(name=topic.name, partition_responses=partitions))
    if request.acks == 0:
        # No response to carry an error: Kafka closes the connection so the producer notices.
        if any(p.error_code for t in responses for p in t.partition_responses):
            raise CloseConnection("acks=0 produce failed")
        return None
    return Struct(responses=responses, throttle_time_ms=0)
