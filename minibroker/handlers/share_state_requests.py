"""What the share-group state APIs (keys 83-87) share: authorization, checks, per-partition answers.

Not a handler module: initialize_share_group_state.py, read_share_group_state.py,
write_share_group_state.py, delete_share_group_state.py and read_share_group_state_summary.py register
the APIs. Each is thin over ``broker.share_state`` (minibroker/coordinator/share_state.py).

Kafka's brokers send these to the share coordinator (its persister); here the share-partition manager
calls ``broker.share_state`` in-process, so the wire callers are tools and tests. Kafka 4.2 marks their
versions unstable (``latestVersionUnstable``) and so leaves them out of ApiVersions unless
``unstable.api.versions.enable``; they are served here when asked and not advertised, the same.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from minibroker.errors import ErrorCode, KafkaError
from minibroker.protocol.codec import Struct
from minibroker.security.acls import AclOperation, ResourceType
from minibroker.security.authorizer import authorize

log = logging.getLogger("minibroker.share_state")

ZERO_UUID = b"\0" * 16


class PartitionError(KafkaError):
    """One partition's answer is this error (its other fields at their defaults), with its own message
    (a KafkaError from below answers with its text)."""


def served() -> bool:
    """share.version 1 is served; else every partition answers UNSUPPORTED_VERSION."""
    from minibroker.handlers.api_versions import served_level

    return served_level("share.version", 1) >= 1


def answer(broker, header, request, per_partition: Callable, error_fields: dict) -> Struct:
    """The ``results`` answer: ``per_partition(store, group_id, topic_id, partition_request)`` gives a
    partition's success fields (a dict) from ``broker.share_state``; a PartitionError or KafkaError it
    raises becomes that partition's error with ``error_fields`` for the rest. CLUSTER_ACTION on the
    cluster is needed (Kafka's inter-broker check)."""
    if not served():
        top = ErrorCode.UNSUPPORTED_VERSION, "Share groups are not enabled."
    elif not authorize(broker, header, AclOperation.CLUSTER_ACTION, ResourceType.CLUSTER):
        top = ErrorCode.CLUSTER_AUTHORIZATION_FAILED, None
    elif not request.group_id:
        top = ErrorCode.INVALID_REQUEST, "A group id is required."
    else:
        top = None

    def one(topic_id: bytes, p) -> Struct:
        code, message = top if top is not None else (ErrorCode.NONE, None)
        if top is None:
            try:
                if bytes(topic_id) == ZERO_UUID:
                    raise PartitionError(ErrorCode.INVALID_REQUEST, "A topic id is required.")
                if p.partition < 0:
                    raise PartitionError(ErrorCode.INVALID_REQUEST, f"Invalid partition {p.partition}.")
                return Struct(partition=p.partition, error_code=0, error_message=None,
                              **per_partition(broker.share_state, request.group_id, bytes(topic_id), p))
            except (PartitionError, KafkaError) as e:
                code = e.code
                message = e.message if isinstance(e, PartitionError) else (str(e) or None)
                log.debug("share state request for %s %r-%d: %s %s", request.group_id, bytes(topic_id),
                          p.partition, code.name, message)
        return Struct(partition=p.partition, error_code=int(code), error_message=message, **error_fields)

    return Struct(results=[
        Struct(topic_id=t.topic_id, partitions=[one(t.topic_id, p) for p in t.partitions])
        for t in request.topics])


def require_state(state, what: str):
    """Kafka's share coordinator refuses to read or write a share partition that was never initialized."""
    if state is None:
        raise PartitionError(ErrorCode.INVALID_REQUEST,
                             f"{what} operation on uninitialized share partition not allowed.")
    return state


def check_leader_epoch(state, leader_epoch: int) -> None:
    """FENCED_LEADER_EPOCH when the request's leader epoch is older than the one recorded (a read checks
    any epoch, -1 included; a write only a given one, as Kafka's share coordinator)."""
    if state is not None and state.leader_epoch > leader_epoch:
        raise PartitionError(ErrorCode.FENCED_LEADER_EPOCH,
                             f"Leader epoch {leader_epoch} is older than {state.leader_epoch}.")


def check_start_offset(p) -> None:
    """A start offset of -1 (the log start) or more."""
    if p.start_offset < -1:
        raise PartitionError(ErrorCode.INVALID_REQUEST, f"Invalid start offset {p.start_offset}.")


def check_state_epoch(state, state_epoch: int) -> None:
    """FENCED_STATE_EPOCH when the request's state epoch (-1: not checked) is older than the one recorded."""
    if state is not None and state_epoch != -1 and state.state_epoch > state_epoch:
        raise PartitionError(ErrorCode.FENCED_STATE_EPOCH,
                             f"State epoch {state_epoch} is older than {state.state_epoch}.")
