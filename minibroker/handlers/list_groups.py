"""ListGroups: v0-v5.

Behaviour: every group the coordinator knows, including Empty ones that only hold offsets
(protocol type "" for groups that never had members).
Authorization (with an authorizer), as Kafka: DESCRIBE on the cluster lists every group; otherwise only
the groups the principal may DESCRIBE are listed.
Version notes: v4 adds the state of each group and a state filter; v5 the group type ("classic",
"consumer" for KIP-848 groups, whose protocol type is "consumer", or "share" for KIP-932 share groups,
protocol type "share", states Empty and Stable) and a type filter. Filters compare case-insensitively;
empty filters keep everything.
Gaps: none known.
"""

from __future__ import annotations

from minibroker.errors import KafkaError
from minibroker.handlers.registry import handles
from minibroker.protocol.codec import Struct
from minibroker.security.acls import AclOperation, ResourceType
from minibroker.security.authorizer import authorize, denied


@handles(16, (0, 5))
def handle_list_groups(broker, header, request):
    try:
        groups = broker.groups.list_groups(request.states_filter, request.types_filter)
    except KafkaError as e:
        return Struct(throttle_time_ms=0, error_code=int(e.code), groups=[])
    if broker.authorizer is not None and not authorize(broker, header, AclOperation.DESCRIBE,
                                                       ResourceType.CLUSTER, log_denied=False):
        hidden = denied(broker, header, AclOperation.DESCRIBE, ResourceType.GROUP, (g[0] for g in groups),
                        log_denied=False)
        groups = [g for g in groups if g[0] not in hidden]
    return Struct(throttle_time_ms=0, error_code=0, groups=[
        Struct(group_id=gid, protocol_type=ptype, group_state=state, group_type=group_type)
        for gid, ptype, state, group_type in groups])
