"""The share group (KIP-932) coordinator: ShareGroupHeartbeat, ShareGroupDescribe and the share-group
admin operations on one node.

Owner of: every ``ShareGroup`` (kept here, beside the classic and consumer groups of the
``GroupCoordinator``, with which they share the group id space, ``__consumer_offsets`` and the event loop)
and its members' session timers. The ``GroupCoordinator`` creates it (``broker.groups.share``), loads its
records in the same pass over ``__consumer_offsets`` and forwards the share side of the APIs every group
type answers (listing, deleting). Everything runs on the broker's event loop; timers are
``loop.call_later`` handles.

A heartbeat follows Kafka's GroupMetadataManager.shareGroupHeartbeat: validate (INVALID_REQUEST), find or
create the group (a group of another type: GROUP_ID_NOT_FOUND), check its size (GROUP_MAX_SIZE_REACHED at
``group.share.max.size``), find or create the member (UNKNOWN_MEMBER_ID, FENCED_MEMBER_EPOCH), update
its subscription; a changed subscription, or a change in the subscribed topics (created, deleted, grown),
bumps the group epoch; a group epoch ahead of the target assignment epoch gives a new target from the
simple assignor (share_assignor.py: partitions spread over the members, sticky), and the member
moves to its target at once. Partitions first assignable are recorded as initializing, then initialized
(ShareGroupStatePartitionMetadata, see ``_initialize_records``). The records describing the change are
appended to ``__consumer_offsets`` before the answer; if the append fails the group is restored and the
error returned.

A member that leaves, or whose session times out (``share.session.timeout.ms``), is removed. The records
it had acquired are not released here, as in Kafka: librdkafka's close() sends the leave heartbeat and the
final ShareAcknowledge (share session epoch -1, carrying its last accepts) at once on two connections, and
a release on leave could win the race and refuse those accepts. The records come back when the member's
share session closes or its connection drops (minibroker/services/share_sessions.py), or when their
locks expire.

The share-partition state itself (start offsets, in-flight records) is not kept here: it belongs to
``broker.share_partitions`` (in memory) and ``broker.share_state`` (durable); the admin operations
(DescribeShareGroupOffsets, AlterShareGroupOffsets, DeleteShareGroupOffsets, DeleteGroups) go through them.
"""

from __future__ import annotations

import hashlib
import logging
from typing import NamedTuple

from minibroker.coordinator.group_records import (
    SHARE_GROUP_CURRENT_MEMBER_ASSIGNMENT,
    SHARE_GROUP_MEMBER_METADATA,
    SHARE_GROUP_METADATA,
    SHARE_GROUP_STATE_PARTITION_METADATA,
    SHARE_GROUP_TARGET_ASSIGNMENT_MEMBER,
    SHARE_GROUP_TARGET_ASSIGNMENT_METADATA,
    ShareCurrentAssignmentValue,
    ShareGroupMetadataValue,
    ShareMemberMetadataValue,
    ShareStatePartitionMetadataValue,
    decode_epoch_value,
    decode_share_current_assignment_value,
    decode_share_group_metadata_value,
    decode_share_member_metadata_value,
    decode_share_state_partition_metadata_value,
    decode_target_assignment_value,
    encode_share_current_assignment_value,
    encode_share_group_key,
    encode_share_group_metadata_value,
    encode_share_member_metadata_value,
    encode_share_state_partition_metadata_value,
)
from minibroker.coordinator.modern_group import (
    GroupChanges,
    HeartbeatResult,
    ModernGroupCoordinator,
    check_member_epoch,
)
from minibroker.coordinator.modern_group import fail as _fail
from minibroker.coordinator.share_assignor import simple_assign
from minibroker.coordinator.share_group import (
    LEAVE_EPOCH,
    STABLE,
    ShareGroup,
    ShareMember,
    TopicAssignment,
    frozen,
)
from minibroker.errors import ErrorCode, KafkaError

log = logging.getLogger("minibroker.groups")
E = ErrorCode

MAX_MEMBER_ID_LENGTH = 36  # a client-generated UUID's text


class PartitionOffset(NamedTuple):
    """One partition's answer in DescribeShareGroupOffsets."""

    partition: int
    start_offset: int
    leader_epoch: int
    lag: int
    error: ErrorCode = E.NONE
    message: str | None = None


def _blank(s: str | None) -> bool:
    """Kafka's throwIfEmptyString: non-null and empty once stripped of whitespace."""
    return s is not None and s.strip() == ""


class _Changes(GroupChanges):
    """What one operation changed in a share group: the records to append."""

    MEMBER_METADATA = SHARE_GROUP_MEMBER_METADATA
    CURRENT_ASSIGNMENT = SHARE_GROUP_CURRENT_MEMBER_ASSIGNMENT
    TARGET_MEMBER = SHARE_GROUP_TARGET_ASSIGNMENT_MEMBER
    TARGET_METADATA = SHARE_GROUP_TARGET_ASSIGNMENT_METADATA

    def member_metadata_value(self, m: ShareMember) -> bytes:
        return encode_share_member_metadata_value(ShareMemberMetadataValue(
            m.rack_id, m.client_id, m.client_host, m.subscribed_topic_names))

    def group_records(self, group: ShareGroup) -> list[tuple[bytes, bytes | None]]:
        if not self.group_epoch:
            return []
        value = ShareGroupMetadataValue(group.group_epoch, group.metadata_hash)
        return [(encode_share_group_key(SHARE_GROUP_METADATA, group.group_id),
                 encode_share_group_metadata_value(value))]

    def current_assignment_value(self, m: ShareMember) -> bytes:
        return encode_share_current_assignment_value(ShareCurrentAssignmentValue(
            m.member_epoch, m.previous_member_epoch, m.state, m.assigned))


class ShareGroupCoordinator(ModernGroupCoordinator):
    GROUP_TYPE = "share"
    HEARTBEAT_API = "ShareGroupHeartbeat"
    MEMBER = "share member"
    GROUP_EPOCH = "share group epoch"

    def __init__(self, groups) -> None:
        super().__init__(groups)
        self.groups: dict[str, ShareGroup] = {}

    def is_member(self, group_id: str, member_id: str) -> bool:
        group = self.groups.get(group_id)
        return group is not None and member_id in group.members

    # -- topics ---------------------------------------------------------------------------------

    def _metadata_hash(self, group: ShareGroup) -> int:
        """A hash of the subscribed topics that exist (name, id, partition count): it changes when one
        is created, deleted or grows, which bumps the group epoch at the next heartbeat."""
        topics = self._topics()
        h = hashlib.blake2b(digest_size=8)
        for name in sorted(group.subscribed_topic_names()):
            info = topics.get(name)
            if info is not None:
                h.update(name.encode("utf-8") + b"\0" + bytes(info.id) + info.partitions.to_bytes(4, "big"))
        return int.from_bytes(h.digest(), "big", signed=True) if group.members else 0

    def _simple_assignment(self, group: ShareGroup) -> dict[str, TopicAssignment]:
        """The simple assignor (share_assignor.py) over the subscribed topics that exist, sticky to the
        current target."""
        topics = self._topics()
        subscriptions: dict[str, list[bytes]] = {}
        counts: dict[bytes, int] = {}
        for m in group.members.values():
            ids = subscriptions[m.member_id] = []
            for name in m.subscribed_topic_names:
                info = topics.get(name)
                if info is not None and info.partitions > 0:
                    ids.append(bytes(info.id))
                    counts[bytes(info.id)] = info.partitions
        return simple_assign(subscriptions, counts, group.target)

    # -- ShareGroupHeartbeat --------------------------------------------------------------------

    def _validate(self, r) -> None:
        if _blank(r.member_id) or not r.member_id:
            raise _fail(E.INVALID_REQUEST, "MemberId can't be empty.")
        if len(r.member_id) > MAX_MEMBER_ID_LENGTH:
            raise _fail(E.INVALID_REQUEST,
                        f"MemberId can't be longer than {MAX_MEMBER_ID_LENGTH} characters.")
        if _blank(r.group_id) or not r.group_id:
            raise _fail(E.INVALID_REQUEST, "GroupId can't be empty.")
        if _blank(r.rack_id):
            raise _fail(E.INVALID_REQUEST, "RackId can't be empty.")
        if r.member_epoch == 0:
            if not r.subscribed_topic_names:
                raise _fail(E.INVALID_REQUEST, "SubscribedTopicNames must be set in first request.")
        elif r.member_epoch < LEAVE_EPOCH:
            raise _fail(E.INVALID_REQUEST, "MemberEpoch is invalid.")
        if any(not isinstance(t, str) for t in r.subscribed_topic_names or ()):
            raise _fail(E.INVALID_REQUEST, "SubscribedTopicNames can't contain null.")
        strings = [r.group_id, r.member_id, r.rack_id or "", *(r.subscribed_topic_names or ())]
        if any(len(s.encode("utf-8")) > 32767 for s in strings):
            raise _fail(E.INVALID_REQUEST, "A string is longer than __consumer_offsets can store.")

    def heartbeat(self, r, client_id: str, client_host: str) -> HeartbeatResult:
        return self._answer(r, lambda: self._validate(r), client_id, client_host)

    def other_type(self, group_id: str) -> str | None:
        """The type of a group of another kind holding ``group_id`` ("classic", "consumer"), else None."""
        if group_id in self.gc.consumer.groups:
            return "consumer"
        classic = self.gc.groups.get(group_id)
        if classic is not None and classic.state.value != "Dead":
            return "classic"
        return None

    def _get_or_create_group(self, group_id: str, create: bool) -> tuple[ShareGroup, bool]:
        group = self.groups.get(group_id)
        if group is not None:
            return group, False
        if self.other_type(group_id) is not None:
            raise _fail(E.GROUP_ID_NOT_FOUND, f"Group {group_id} is not a share group.")
        if not create:
            raise _fail(E.GROUP_ID_NOT_FOUND, f"Share group {group_id} not found.")
        return ShareGroup(group_id), True

    def _heartbeat(self, r, client_id: str, client_host: str) -> HeartbeatResult:
        epoch = r.member_epoch
        member_id = r.member_id
        group, created = self._get_or_create_group(r.group_id, epoch == 0)
        if len(group.members) >= self.max_size and member_id not in group.members:
            raise _fail(E.GROUP_MAX_SIZE_REACHED, "The share group has reached its maximum capacity of "
                        f"{self.max_size} members.")
        old = group.members.get(member_id)
        if old is None and epoch != 0:
            raise _fail(E.UNKNOWN_MEMBER_ID, f"Member {member_id} is not a member of group {group.group_id}.")
        if old is not None and epoch != 0:
            _check_epoch(old, epoch)
        snap = None if created else group.snapshot()
        changes = _Changes()
        try:  # a failed write (or a bug) leaves the group as it was
            member = ShareMember(member_id)
            if old is not None:
                member.__dict__.update(old.__dict__)
                member.assigned = {t: set(ps) for t, ps in old.assigned.items()}
                member.subscribed_topic_names = list(old.subscribed_topic_names)
                if epoch == 0:  # a known member joining again: it starts from nothing, as a new one
                    member.member_epoch = member.previous_member_epoch = 0
                    member.assigned = {}
            if r.rack_id is not None:
                member.rack_id = r.rack_id
            if r.subscribed_topic_names is not None:
                member.subscribed_topic_names = list(r.subscribed_topic_names)
            member.client_id = client_id or ""
            member.client_host = client_host or ""
            bump = False
            if old is None or member.metadata_key() != old.metadata_key():
                changes.member_metadata.add(member_id)
                if old is None or member.subscribed_topic_names != old.subscribed_topic_names:
                    bump = True
            group.members[member_id] = member
            metadata_hash = self._metadata_hash(group)
            if metadata_hash != group.metadata_hash:
                group.metadata_hash = metadata_hash
                bump = True
            self._advance(group, changes, bump)
            target = group.target.get(member_id, {})
            if member.member_epoch != group.assignment_epoch or frozen(member.assigned) != frozen(target):
                member.previous_member_epoch = member.member_epoch
                member.member_epoch = group.assignment_epoch
                member.assigned = {t: set(ps) for t, ps in target.items()}
                member.state = STABLE
            if old is None or member.assignment_key() != old.assignment_key() or epoch == 0:
                changes.current.add(member_id)
            if created:
                self.groups[group.group_id] = group
            self.gc.store.append(group.group_id, changes.records(group) + self._initialize_records(group))
        except Exception:
            if created:
                self.groups.pop(group.group_id, None)
            else:
                group.restore(snap)
            raise
        if old is None:
            log.info("group %s: member %s joined the share group at epoch %d", group.group_id, member_id,
                     member.member_epoch)
        self._schedule_session(group, member_id)
        changed = old is None or frozen(old.assigned) != frozen(member.assigned)
        return HeartbeatResult(E.NONE, None, member_id, member.member_epoch,
                               self.heartbeat_interval(group.group_id),
                               member.assigned if epoch == 0 or changed else None)

    # -- share-partition state initialization ------------------------------------------------------

    def _state_metadata_record(self, group: ShareGroup, initializing=None, deleting=None
                               ) -> tuple[bytes, bytes]:
        value = ShareStatePartitionMetadataValue(initializing or {}, group.initialized, deleting or {})
        return (encode_share_group_key(SHARE_GROUP_STATE_PARTITION_METADATA, group.group_id),
                encode_share_state_partition_metadata_value(value))

    def _initialize_records(self, group: ShareGroup) -> list[tuple[bytes, bytes | None]]:
        """The partitions of the members' subscribed topics whose share state the group has not
        initialized yet are initialized now, as Kafka's group coordinator does when they are first
        assignable: a ShareGroupStatePartitionMetadata record listing them as initializing, the
        initialization, then one listing them as initialized. Here the share coordinator is in-process
        and its initialization of a partition with no state is "start where share.auto.offset.reset
        says at the first fetch" (Kafka's start offset -1), which a partition without a
        ``__share_group_state`` entry already means; so both records go in the heartbeat's append."""
        topics = self._topics()
        pending: dict[bytes, tuple[str, set[int]]] = {}
        for name in sorted(group.subscribed_topic_names()):
            info = topics.get(name)
            if info is None or info.partitions <= 0:
                continue
            topic_id = bytes(info.id)
            done = group.initialized.get(topic_id, (name, set()))[1]
            missing = set(range(info.partitions)) - done
            if missing:
                pending[topic_id] = (name, missing)
        if not pending:
            return []
        records = [self._state_metadata_record(group, initializing=pending)]
        for topic_id, (name, partitions) in pending.items():
            done = group.initialized.get(topic_id, (name, set()))[1]
            group.initialized[topic_id] = (name, done | partitions)
        records.append(self._state_metadata_record(group))
        log.info("group %s: share state initialized for %s", group.group_id,
                 {name: sorted(ps) for name, ps in pending.values()})
        return records

    def _uninitialize(self, group: ShareGroup, topic_ids: set[bytes]) -> list[tuple[bytes, bytes | None]]:
        """Topics whose share state is deleted leave the initialized set: a record listing them as
        deleting, then one without them (Kafka's DeletingTopics, cleared once the deletion is done)."""
        deleting = {t: group.initialized[t][0] for t in topic_ids if t in group.initialized}
        if not deleting:
            return []
        first = self._state_metadata_record(group, deleting=deleting)
        for topic_id in deleting:
            del group.initialized[topic_id]
        return [first, self._state_metadata_record(group)]

    def _update_target(self, group: ShareGroup, changes: _Changes) -> None:
        self._set_target(group, self._simple_assignment(group), changes)
        log.info("group %s: new share target assignment at epoch %d", group.group_id, group.assignment_epoch)

    # -- leaving and fencing --------------------------------------------------------------------

    def _leave(self, r) -> HeartbeatResult:
        group = self.groups.get(r.group_id)
        if group is None:
            if self.other_type(r.group_id) is not None:
                raise _fail(E.GROUP_ID_NOT_FOUND, f"Group {r.group_id} is not a share group.")
            raise _fail(E.GROUP_ID_NOT_FOUND, f"Share group {r.group_id} not found.")
        if r.member_id not in group.members:
            raise _fail(E.UNKNOWN_MEMBER_ID, f"Member {r.member_id} is not a member of group {r.group_id}.")
        self.fence(group, r.member_id, "the member left")
        return HeartbeatResult(E.NONE, None, r.member_id, LEAVE_EPOCH, 0, None)

    def _changes(self) -> _Changes:
        return _Changes()

    def _remove_member(self, group: ShareGroup, member_id: str, changes: _Changes) -> None:
        """The records the member holds stay acquired (see the module docstring)."""
        del group.members[member_id]
        group.target.pop(member_id, None)
        group.metadata_hash = self._metadata_hash(group)

    # -- deleting -------------------------------------------------------------------------------

    def delete(self, group: ShareGroup) -> None:
        """DeleteGroups of an Empty share group: its share-partition state, then its records."""
        gid = group.group_id
        if getattr(self.broker, "share_state", None) is not None:  # absent only in unit tests
            state = self._share_state()
            for topic_id, partition in self._state_partitions(gid):
                state.delete(gid, topic_id, partition)
        # only those built (minibroker/services/__init__.py builds them on first use): one never built
        # holds nothing of the group
        partitions = vars(self.broker).get("share_partitions")
        if partitions is not None:
            partitions.forget(gid)
        sessions = vars(self.broker).get("share_sessions")
        if sessions is not None:  # an Empty group's members may still hold share sessions
            sessions.forget_group(gid)
        entries = []
        for member_id in sorted(group.members):  # none for an Empty group; kept for completeness
            for record_type in (SHARE_GROUP_CURRENT_MEMBER_ASSIGNMENT, SHARE_GROUP_TARGET_ASSIGNMENT_MEMBER,
                                SHARE_GROUP_MEMBER_METADATA):
                entries.append((encode_share_group_key(record_type, gid, member_id), None))
        for record_type in (SHARE_GROUP_STATE_PARTITION_METADATA, SHARE_GROUP_TARGET_ASSIGNMENT_METADATA,
                            SHARE_GROUP_METADATA):
            entries.append((encode_share_group_key(record_type, gid), None))
        self.gc.store.append(gid, entries)
        self.groups.pop(gid, None)
        log.info("share group %s deleted", gid)

    def topic_deleted(self, topic_id: bytes) -> None:
        """A topic was deleted: every group's share state of it goes (as Kafka's share coordinator
        does), and the share partitions forget it."""
        state = vars(self.broker).get("share_state")  # only if built: one never built holds nothing
        partitions = vars(self.broker).get("share_partitions")
        for group_id in list(self.groups):
            if state is not None and getattr(state, "loaded", True):
                for tid, partition in state.partitions(group_id):
                    if tid == topic_id:
                        try:
                            state.delete(group_id, tid, partition)
                        except KafkaError as e:
                            log.warning("group %s: could not delete the share state of a deleted topic: %s",
                                        group_id, e)
            if partitions is not None:
                partitions.forget(group_id, {topic_id})
            self._append_uninitialized(self.groups[group_id], {topic_id})

    def _append_uninitialized(self, group: ShareGroup, topic_ids: set[bytes]) -> None:
        snap = dict(group.initialized)
        try:
            records = self._uninitialize(group, topic_ids)
            if records:
                self.gc.store.append(group.group_id, records)
        except KafkaError as e:
            group.initialized = snap
            log.warning("group %s: could not write its share state metadata: %s", group.group_id, e)

    # -- share-group offsets (admin) ------------------------------------------------------------

    def _share_state(self):
        state = getattr(self.broker, "share_state", None)
        if state is None:
            raise _fail(E.COORDINATOR_NOT_AVAILABLE, "The share coordinator is not available.")
        if not getattr(state, "loaded", True):
            raise KafkaError(E.COORDINATOR_LOAD_IN_PROGRESS)
        return state

    def _state_partitions(self, group_id: str) -> list[tuple[bytes, int]]:
        return sorted(self._share_state().partitions(group_id))

    def check_admin_group(self, group_id: str, *, must_exist: bool, must_be_empty: bool) -> ShareGroup | None:
        """The group-level checks of the share-group offset APIs; raises KafkaError."""
        if self.gc.loading:
            raise KafkaError(E.COORDINATOR_LOAD_IN_PROGRESS)
        if not group_id:
            raise _fail(E.INVALID_GROUP_ID, "The group id is invalid.")
        group = self.groups.get(group_id)
        if group is None:
            if self.other_type(group_id) is not None:
                raise _fail(E.GROUP_ID_NOT_FOUND, f"Group {group_id} is not a share group.")
            if must_exist:
                raise _fail(E.GROUP_ID_NOT_FOUND, f"Group {group_id} not found.")
        elif must_be_empty and group.members:
            raise _fail(E.NON_EMPTY_GROUP, "The group is not empty.")
        return group

    def state_topics(self, group_id: str) -> dict[str, list[int]]:
        """{topic name: partitions} with share state, for DescribeShareGroupOffsets with null topics."""
        names = {info.id: name for name, info in self._topics().items()}
        out: dict[str, list[int]] = {}
        for topic_id, partition in self._state_partitions(group_id):
            name = names.get(topic_id)
            if name is not None:
                out.setdefault(name, []).append(partition)
        return out

    def describe_offsets(self, group_id: str, topic: str, partitions: list[int]) -> list[PartitionOffset]:
        """Start offset (SPSO), leader epoch and lag of each partition; -1 where there is no state."""
        info = self._topics().get(topic)
        state = self._share_state()
        share_partitions = getattr(self.broker, "share_partitions", None)
        out = []
        for p in partitions:
            if info is None or not 0 <= p < info.partitions or group_id not in self.groups:
                out.append(PartitionOffset(p, -1, -1, -1))  # as Kafka: no data, not an error
                continue
            stored = state.read(group_id, bytes(info.id), p)
            start = lag = None
            if share_partitions is not None:
                start = share_partitions.start_offset(group_id, topic, p)
                if start is not None:
                    lag = share_partitions.lag(group_id, topic, p)
            elif stored is not None:
                start = stored.start_offset
            out.append(PartitionOffset(p, -1 if start is None else start,
                                       stored.leader_epoch if stored is not None else -1,
                                       -1 if lag is None else lag))
        return out

    def ensure_group(self, group_id: str) -> ShareGroup:
        """The share group, created Empty (a ShareGroupMetadata record) when it does not exist, as
        AlterShareGroupOffsets does in Kafka."""
        group = self.groups.get(group_id)
        if group is not None:
            return group
        group = ShareGroup(group_id)
        self.gc.store.append(group_id, [(encode_share_group_key(SHARE_GROUP_METADATA, group_id),
                                         encode_share_group_metadata_value(ShareGroupMetadataValue(0, 0)))])
        self.groups[group_id] = group
        return group

    def alter_offset(self, group_id: str, topic: str, partition: int, start_offset: int) -> ErrorCode:
        """Set a partition's start offset: its state starts again there, at the next state epoch."""
        info = self._topics().get(topic)
        if info is None or not 0 <= partition < info.partitions:
            return E.UNKNOWN_TOPIC_OR_PARTITION
        state = self._share_state()
        topic_id = bytes(info.id)
        current = state.read(group_id, topic_id, partition)
        state_epoch = current.state_epoch + 1 if current is not None else 0
        state.initialize(group_id, topic_id, partition, start_offset, state_epoch)
        group = self.groups.get(group_id)
        if group is not None and partition not in group.initialized.get(topic_id, ("", set()))[1]:
            name, done = group.initialized.get(topic_id, (topic, set()))
            group.initialized[topic_id] = (name, done | {partition})
            try:
                self.gc.store.append(group_id, [self._state_metadata_record(group)])
            except KafkaError as e:
                group.initialized[topic_id] = (name, done)
                log.warning("group %s: could not write its share state metadata: %s", group_id, e)
        return E.NONE

    def forget(self, group_id: str, topic_ids: set[bytes]) -> None:
        partitions = vars(self.broker).get("share_partitions")  # only if built
        if partitions is not None and topic_ids:
            partitions.forget(group_id, topic_ids)

    def delete_offsets(self, group_id: str, topic: str) -> ErrorCode:
        """Delete the share state of every partition of ``topic`` in the group."""
        info = self._topics().get(topic)
        if info is None:
            return E.UNKNOWN_TOPIC_OR_PARTITION
        topic_id = bytes(info.id)
        state = self._share_state()
        for tid, partition in self._state_partitions(group_id):
            if tid == topic_id:
                state.delete(group_id, tid, partition)
        self.forget(group_id, {topic_id})
        group = self.groups.get(group_id)
        if group is not None:
            self._append_uninitialized(group, {topic_id})
        return E.NONE

    # -- loading --------------------------------------------------------------------------------

    def load(self, group_id: str, records: dict) -> None:
        """Rebuild a group from its records as a load left them: {(record type, member id): value}."""
        value = records.get((SHARE_GROUP_METADATA, ""))
        if value is None:
            return
        group = ShareGroup(group_id)
        meta = decode_share_group_metadata_value(value)
        group.group_epoch, group.metadata_hash = meta.epoch, meta.metadata_hash
        value = records.get((SHARE_GROUP_TARGET_ASSIGNMENT_METADATA, ""))
        group.assignment_epoch = decode_epoch_value(value) if value is not None else 0
        value = records.get((SHARE_GROUP_STATE_PARTITION_METADATA, ""))
        if value is not None:
            group.initialized = decode_share_state_partition_metadata_value(value).initialized
        for (record_type, member_id), value in records.items():
            if record_type != SHARE_GROUP_MEMBER_METADATA or value is None:
                continue
            meta = decode_share_member_metadata_value(value)
            member = ShareMember(member_id)
            member.rack_id, member.client_id = meta.rack_id, meta.client_id
            member.client_host = meta.client_host
            member.subscribed_topic_names = list(meta.subscribed_topic_names)
            current = records.get((SHARE_GROUP_CURRENT_MEMBER_ASSIGNMENT, member_id))
            if current is not None:
                cur = decode_share_current_assignment_value(current)
                member.member_epoch = cur.member_epoch
                member.previous_member_epoch = cur.previous_member_epoch
                member.state, member.assigned = cur.state, cur.assigned
            group.members[member_id] = member
            target = records.get((SHARE_GROUP_TARGET_ASSIGNMENT_MEMBER, member_id))
            if target is not None:
                group.target[member_id] = decode_target_assignment_value(target)
        self.groups[group_id] = group
        for member_id in group.members:  # members must heartbeat again within a session
            self._schedule_session(group, member_id)


def _check_epoch(member: ShareMember, epoch: int) -> None:
    """Kafka's throwIfShareGroupMemberEpochIsInvalid: the previous epoch is accepted (the answer that
    bumped it may have been lost)."""
    check_member_epoch(member, epoch, "share")
