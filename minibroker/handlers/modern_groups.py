"""What the handlers of the consumer (KIP-848) and share (KIP-932) groups share: the heartbeat answer and
the describe loop (minibroker/coordinator/modern_group.py is the coordinators' side).

Not a handler itself: ConsumerGroupHeartbeat, ShareGroupHeartbeat, ConsumerGroupDescribe and
ShareGroupDescribe (one module each) say their versions, behaviour and gaps.
"""

from __future__ import annotations

from collections.abc import Callable

from minibroker.coordinator.modern_group import HeartbeatResult
from minibroker.errors import ErrorCode
from minibroker.handlers.authorized_operations import NOT_ASKED, group_operations
from minibroker.protocol.codec import Struct
from minibroker.security.acls import AclOperation, ResourceType
from minibroker.security.authorizer import authorize


def heartbeat_response(result: HeartbeatResult) -> Struct:
    """A <Type>GroupHeartbeat answer: the member's epoch, the interval and, when there is one, its
    assignment by topic id."""
    assignment = None
    if result.assignment is not None:
        assignment = Struct(topic_partitions=[Struct(topic_id=topic_id, partitions=sorted(partitions))
                                              for topic_id, partitions in sorted(result.assignment.items())
                                              if partitions])
    return Struct(throttle_time_ms=0, error_code=int(result.error), error_message=result.message,
                  member_id=result.member_id, member_epoch=result.member_epoch,
                  heartbeat_interval_ms=result.heartbeat_interval_ms, assignment=assignment)


def failed_heartbeat(code: ErrorCode, message: str | None = None) -> Struct:
    return heartbeat_response(HeartbeatResult(code, message))


def _failed_group(group_id: str, code: ErrorCode, message: str | None = None) -> Struct:
    return Struct(error_code=int(code), error_message=message, group_id=group_id, group_state="",
                  group_epoch=0, assignment_epoch=0, assignor_name="", members=[],
                  authorized_operations=NOT_ASKED)


def describe_groups(broker, header, request, coordinator, members: Callable[[object], list[Struct]],
                    assignor_name: Callable[[object], str],
                    refuse: Callable[[object], ErrorCode | None] = lambda group: None) -> Struct:
    """A <Type>GroupDescribe answer: DESCRIBE on each group (else GROUP_AUTHORIZATION_FAILED), the
    coordinator's lookup, ``refuse`` (an error answering the whole group, or None), then the group with
    ``members(group)`` and the authorized operations when asked."""
    out = []
    for group_id in request.group_ids or ():
        if not authorize(broker, header, AclOperation.DESCRIBE, ResourceType.GROUP, group_id):
            out.append(_failed_group(group_id, ErrorCode.GROUP_AUTHORIZATION_FAILED))
            continue
        error, message, group = coordinator.describe(group_id)
        if group is None:
            out.append(_failed_group(group_id, error, message))
            continue
        refused = refuse(group)
        if refused is not None:
            out.append(_failed_group(group_id, refused))
            continue
        listed = members(group)
        asked = request.include_authorized_operations
        ops = group_operations(broker, header, group_id) if asked else NOT_ASKED
        out.append(Struct(error_code=0, error_message=None, group_id=group_id, group_state=group.state,
                          group_epoch=group.group_epoch, assignment_epoch=group.assignment_epoch,
                          assignor_name=assignor_name(group), members=listed, authorized_operations=ops))
    return Struct(throttle_time_ms=0, groups=out)
