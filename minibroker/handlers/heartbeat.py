"""Heartbeat: v0-v4.

Behaviour: resets the member's session timer. REBALANCE_IN_PROGRESS 27 while the group prepares a
rebalance (the member must rejoin); NONE in CompletingRebalance and Stable; UNKNOWN_MEMBER_ID 25 for
an unknown member or group (or an Empty group), ILLEGAL_GENERATION 22 for another generation,
FENCED_INSTANCE_ID 82 for a replaced static member.
Version notes: v3 group.instance.id.
Gaps: none known.
"""

from __future__ import annotations

from minibroker.handlers.registry import handles
from minibroker.protocol.codec import Struct


@handles(12, (0, 4))
def handle_heartbeat(broker, header, request):
    error = broker.groups.heartbeat(request.group_id, request.generation_id, request.member_id,
                                    request.group_instance_id)
    return Struct(throttle_time_ms=0, error_code=int(error))
