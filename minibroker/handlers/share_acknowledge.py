"""ShareAcknowledge: v1-v2 (KIP-932; v2 KIP-1222).

Behaviour: a share group member accepts (1), releases (2) or rejects (3) the records it acquired with
ShareFetch, by (first offset, last offset, types) batches per partition: types holds one type for the
whole range or one per offset, 0 marking an offset without a record (a gap). The member's share session
(minibroker/services/share_sessions.py) must exist and the request carry its next epoch, which then moves on
by one (SHARE_SESSION_NOT_FOUND 122, INVALID_SHARE_SESSION_EPOCH 123; epoch 0 is always 123, only ShareFetch
opens sessions). Epoch -1 applies the acknowledgements and then closes the session, releasing every
record the member still holds. Each named partition is answered with its own code: INVALID_REQUEST for
malformed batches (unordered, overlapping, first > last, a types list of the wrong length, an unknown
type), INVALID_RECORD_STATE when an offset is not acquired by this member (nothing of that partition is
applied), UNKNOWN_TOPIC_ID, UNKNOWN_TOPIC_OR_PARTITION; the share-partition rules are
minibroker/coordinator/share_partition_manager.py's. Acknowledgements are persisted (``__share_group_state``)
before the answer. AcquisitionLockTimeoutMs (v2) is the group's ``share.record.lock.duration.ms``.
Request checks in Kafka's order: a null or empty group id INVALID_REQUEST, then READ on the group, then
the member id (1 to 36 characters, else INVALID_REQUEST), all top-level. Membership of the group is not
checked (Kafka 4.2 does not either: the session and the locks belong to the member id).
Authorization (with an authorizer): READ on the group (GROUP_AUTHORIZATION_FAILED for the whole
request), READ on each topic (TOPIC_AUTHORIZATION_FAILED for its partitions).
Version notes: v0 was Kafka 4.0's early access and is not served (Kafka 4.1+ serve v1+). v2 adds
IsRenewAck: with it set, type 4 (renew) extends a record's lock and keeps it acquired; without it,
type 4 is INVALID_REQUEST.
CurrentLeader is -1/-1 (Kafka fills it only for NOT_LEADER_OR_FOLLOWER and FENCED_LEADER_EPOCH), NodeEndpoints
empty.
Gaps: no quotas.
"""

from __future__ import annotations

from minibroker.errors import ErrorCode, KafkaError
from minibroker.handlers import share_requests as share
from minibroker.handlers.registry import handles
from minibroker.protocol.codec import Struct
from minibroker.services.share_sessions import FINAL_EPOCH


def _response(code=ErrorCode.NONE, message=None, responses=(), lock_ms=0) -> Struct:
    return Struct(throttle_time_ms=0, error_code=int(code), error_message=message,
                  acquisition_lock_timeout_ms=lock_ms, responses=list(responses), node_endpoints=[])


@handles(79, (1, 2))
def handle_share_acknowledge(broker, header, request):
    if not share.share_groups_served():
        return _response(ErrorCode.UNSUPPORTED_VERSION)
    try:
        group_id, member_id = share.check_group_and_member(broker, header, request)
        sessions = broker.share_sessions
        epoch = request.share_session_epoch
        if epoch == FINAL_EPOCH:
            sessions.existing(group_id, member_id)
        else:
            sessions.next_request(group_id, member_id, epoch)
    except KafkaError as e:  # a ShareRequestError too
        return _response(e.code, e.message)
    acks = share.acknowledgements(request.topics)
    names = share.TopicNames(broker, header)
    names.authorize(t for t, _ in acks)
    allow_renew = header.api_version >= 2 and bool(request.is_renew_ack)
    results = share.apply_acknowledgements(broker, names, group_id, member_id, acks, allow_renew=allow_renew)
    if epoch == FINAL_EPOCH:
        sessions.close(group_id, member_id)
    rows = {key: Struct(partition_index=key[1], error_code=int(code), error_message=message,
                        current_leader=share.current_leader(broker, code, names.name(key[0]), key[1]))
            for key, (code, message) in results.items()}
    return _response(responses=share.grouped(rows), lock_ms=share.lock_timeout_ms(broker, group_id))
