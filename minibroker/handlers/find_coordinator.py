"""FindCoordinator: v0-v6.

Behaviour: this node coordinates every group (key type 0), answered with the advertised address of
the listener from Metadata. The first group lookup creates ``__consumer_offsets``
(``offsets.topic.num.partitions`` partitions, compacted) if it does not exist yet. Error message
"NONE" on success, as Kafka sends ``Errors.NONE.message()``.
Unserved key types fail at once, non-retriably, with a message naming the missing feature:
- transaction (1): TRANSACTIONAL_ID_AUTHORIZATION_FAILED 53, "Transactions are not supported by this
  broker". It is what Kafka answers a producer that may not use transactions, and the one answer
  every client treats as fatal here: kafka-python, aiokafka and librdkafka give up at once (librdkafka
  shows the message), where COORDINATOR_NOT_AVAILABLE made them retry until their timeouts and
  INVALID_REQUEST or UNSUPPORTED_VERSION make librdkafka retry too.
- share (2): INVALID_REQUEST 42, as Kafka answers when no share coordinator runs (and below v6).
An unknown key type fails the request with INVALID_REQUEST (42).
Version notes: v1 adds key_type and error_message; v4+ batches keys into ``coordinators``, one
entry per key, each with its error message.
Gaps: no transaction or share coordinator, no authorization.
"""

from __future__ import annotations

import logging

from minibroker.errors import ErrorCode, KafkaError
from minibroker.handlers.registry import handles
from minibroker.protocol.codec import Struct

log = logging.getLogger(__name__)

GROUP, TRANSACTION, SHARE = 0, 1, 2
TRANSACTIONS_NOT_SUPPORTED = "Transactions are not supported by this broker"
SHARE_GROUPS_NOT_SUPPORTED = "Share groups are not supported by this broker"


def _locate(broker, key_type: int) -> tuple[int, str | None]:
    if key_type == TRANSACTION:
        return ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, TRANSACTIONS_NOT_SUPPORTED
    if key_type == SHARE:
        return ErrorCode.INVALID_REQUEST, SHARE_GROUPS_NOT_SUPPORTED
    if key_type != GROUP:
        return ErrorCode.INVALID_REQUEST, "Unknown coordinator type"
    if broker.groups is not None:
        try:
            broker.groups.store.ensure_topic()
        except KafkaError as e:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE, str(e)
    return ErrorCode.NONE, "NONE"


@handles(10, (0, 6))
def handle_find_coordinator(broker, header, request):
    version = header.api_version
    endpoint = broker.endpoint_for(header.listener)
    key_type = request.key_type if version >= 1 else GROUP
    error, message = _locate(broker, key_type)
    if key_type == TRANSACTION:
        keys = request.coordinator_keys if version >= 4 else [request.key]
        log.warning("client %s asked for the transaction coordinator of %s: %s", header.client_id,
                    ", ".join(map(repr, keys)), TRANSACTIONS_NOT_SUPPORTED)
    ok = error == ErrorCode.NONE
    node, host, port = (broker.node_id, endpoint.host, endpoint.port) if ok else (-1, "", -1)
    if version >= 4:
        return Struct(throttle_time_ms=0, coordinators=[
            Struct(key=key, node_id=node, host=host, port=port, error_code=int(error), error_message=message)
            for key in request.coordinator_keys])
    return Struct(throttle_time_ms=0, error_code=int(error), error_message=message, node_id=node, host=host,
                  port=port)
