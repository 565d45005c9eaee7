"""DescribeGroups: v0-v6.

Behaviour: state, protocol type, and members of each group. In Stable the selected protocol and each
member's metadata and assignment are included; in other states the protocol is "" and member
metadata and assignments are empty, as Kafka does. An unknown group is reported as state "Dead"
with no error before v6; v6+ (KIP-1043) answers it GROUP_ID_NOT_FOUND 69 with an error message.
Authorization (with an authorizer): DESCRIBE on each group, else GROUP_AUTHORIZATION_FAILED for it, as Kafka.
Version notes: v3 authorized operations: when asked, the operations the principal may do on the group of
those Kafka supports (READ, DESCRIBE, DELETE, DESCRIBE_CONFIGS, ALTER_CONFIGS; all of them without an
authorizer), for each group described without error; -2147483648 otherwise. v4 group.instance.id of
members; v5 flexible.
A consumer (KIP-848) or share (KIP-932) group is answered as Kafka 4.x does: state "Dead" and no members
(v6+: GROUP_ID_NOT_FOUND, "Group <id> is not a classic group."), classic members in it or not;
ConsumerGroupDescribe or ShareGroupDescribe describes it.
Gaps: client_host as for JoinGroup.
"""

from __future__ import annotations

from minibroker.errors import ErrorCode
from minibroker.handlers.authorized_operations import NOT_ASKED, group_operations
from minibroker.handlers.registry import handles
from minibroker.protocol.codec import Struct
from minibroker.security.acls import AclOperation, ResourceType
from minibroker.security.authorizer import authorize

DEAD = "Dead"  # the state the coordinator reports for a group it does not know


@handles(15, (0, 6))
def handle_describe_groups(broker, header, request):
    asked = header.api_version >= 3 and request.include_authorized_operations
    out = []
    for group_id in request.groups:
        if not authorize(broker, header, AclOperation.DESCRIBE, ResourceType.GROUP, group_id):
            out.append(Struct(error_code=int(ErrorCode.GROUP_AUTHORIZATION_FAILED), group_id=group_id,
                              group_state="", protocol_type="", protocol_data="",
                              authorized_operations=NOT_ASKED, members=[]))
            continue
        s = broker.groups.describe_group(group_id)
        if header.api_version >= 6 and s.error == ErrorCode.NONE and s.state == DEAD:
            out.append(Struct(error_code=int(ErrorCode.GROUP_ID_NOT_FOUND),
                              error_message=(f"Group {group_id} is not a classic group."
                                             if group_id in broker.groups.consumer.groups
                                             or group_id in broker.groups.share.groups
                                             else f"Group {group_id} not found."), group_id=group_id,
                              group_state=DEAD, protocol_type="", protocol_data="",
                              authorized_operations=NOT_ASKED, members=[]))
            continue
        ops = group_operations(broker, header, group_id) if asked and s.error == ErrorCode.NONE else NOT_ASKED
        out.append(Struct(
            error_code=int(s.error), group_id=s.group_id, group_state=s.state, protocol_type=s.protocol_type,
            protocol_data=s.protocol, authorized_operations=ops,
            members=[Struct(member_id=mid, group_instance_id=iid, client_id=cid, client_host=host,
                            member_metadata=meta, member_assignment=assign)
                     for mid, iid, cid, host, meta, assign in s.members]))
    return Struct(throttle_time_ms=0, groups=out)
