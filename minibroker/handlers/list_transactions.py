"""ListTransactions: v0-v2.

Behaviour: every transactional id this node coordinates (all of them) with its producer id and
state, filtered by state names (Kafka's: Empty, Ongoing, PrepareCommit, ...; names it does not know
come back in ``unknown_state_filters`` and match nothing) and by producer ids; empty filters match
all. COORDINATOR_LOAD_IN_PROGRESS 14 while ``__transaction_state`` loads.
Version notes: v1 adds ``duration_filter`` (KIP-994): when >= 0, only transactions started longer
ago than that many ms (as in Kafka, an id without a transaction has start time -1 and passes).
Authorization (with an authorizer): only the transactional ids the principal may DESCRIBE are listed, as
Kafka.
v2 adds ``transactional_id_pattern`` (KIP-1152): when neither null nor empty, only ids the regular
expression matches whole are listed (Java's ``Matcher.matches``; Python's ``re`` reads the common
syntax alike); one that does not compile is INVALID_REGULAR_EXPRESSION 128.
"""

from __future__ import annotations

import re

from minibroker.errors import ErrorCode, KafkaError
from minibroker.handlers.registry import handles
from minibroker.protocol.codec import Struct
from minibroker.security.acls import AclOperation, ResourceType
from minibroker.security.authorizer import denied


@handles(66, (0, 2))
def handle_list_transactions(broker, header, request):
    duration = request.duration_filter if header.api_version >= 1 else -1
    pattern = request.transactional_id_pattern if header.api_version >= 2 else None
    try:
        matcher = re.compile(pattern).fullmatch if pattern else None
    except (re.error, RecursionError, OverflowError):
        return Struct(throttle_time_ms=0, error_code=int(ErrorCode.INVALID_REGULAR_EXPRESSION),
                      unknown_state_filters=[], transaction_states=[])
    try:
        if broker.transactions is None:
            raise KafkaError(ErrorCode.COORDINATOR_NOT_AVAILABLE)
        unknown, listed = broker.transactions.list_transactions(request.state_filters or (),
                                                               request.producer_id_filters or (), duration)
    except KafkaError as e:
        return Struct(throttle_time_ms=0, error_code=int(e.code), unknown_state_filters=[],
                      transaction_states=[])
    hidden = denied(broker, header, AclOperation.DESCRIBE, ResourceType.TRANSACTIONAL_ID,
                    (t.transactional_id for t in listed), log_denied=False)
    return Struct(throttle_time_ms=0, error_code=0, unknown_state_filters=unknown, transaction_states=[
        Struct(transactional_id=t.transactional_id, producer_id=t.producer_id, transaction_state=t.state)
        for t in listed
        if t.transactional_id not in hidden and (matcher is None or matcher(t.transactional_id))])
