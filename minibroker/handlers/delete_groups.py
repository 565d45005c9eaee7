"""DeleteGroups: v0-v2.

Behaviour: deletes Empty groups with their committed offsets (tombstones in ``__consumer_offsets``).
Per group: GROUP_ID_NOT_FOUND 69 for an unknown group, NON_EMPTY_GROUP 68 while it has members,
COORDINATOR_LOAD_IN_PROGRESS 14 while loading. Deleting an Empty share group also deletes the share state
of every partition it has read (``broker.share_state``).
Authorization (with an authorizer): DELETE on each group, else GROUP_AUTHORIZATION_FAILED for it, as Kafka.
Version notes: v2 is flexible; nothing else changes.
Gaps: none known.
"""

from __future__ import annotations

from minibroker.errors import ErrorCode
from minibroker.handlers.registry import handles
from minibroker.protocol.codec import Struct
from minibroker.security.acls import AclOperation, ResourceType
from minibroker.security.authorizer import denied


@handles(42, (0, 2))
def handle_delete_groups(broker, header, request):
    refused = denied(broker, header, AclOperation.DELETE, ResourceType.GROUP, request.groups_names)
    results = broker.groups.delete_groups([g for g in request.groups_names if g not in refused])
    results = list(results) + [(g, ErrorCode.GROUP_AUTHORIZATION_FAILED) for g in dict.fromkeys(refused)]
    return Struct(throttle_time_ms=0, results=[Struct(group_id=gid, error_code=int(e)) for gid, e in results])
