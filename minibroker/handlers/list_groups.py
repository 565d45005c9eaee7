"""ListGroups: v0-v5.

Behaviour: every group the coordinator knows, including Empty ones that only hold offsets
(protocol type "" for groups that never had members).
Version notes: v4 adds the state of each group and a state filter; v5 the group type ("classic")
and a type filter. Filters compare case-insensitively; empty filters keep everything.
Gaps: no consumer (KIP-848) or share groups, so a type filter without "classic" lists nothing.
"""

from __future__ import annotations

from minibroker.errors import KafkaError
from minibroker.handlers.registry import handles
from minibroker.protocol.codec import Struct


@handles(16, (0, 5))
def handle_list_groups(broker, header, request):
    try:
        groups = broker.groups.list_groups(request.states_filter, request.types_filter)
    except KafkaError as e:
        return Struct(throttle_time_ms=0, error_code=int(e.code), groups=[])
    return Struct(throttle_time_ms=0, error_code=0, groups=[
        Struct(group_id=gid, protocol_type=ptype, group_state=state, group_type="classic")
        for gid, ptype, state in groups])
