"""The consumer (KIP-848) group protocol: ConsumerGroupHeartbeat and ConsumerGroupDescribe on one node.

Owner of: every ``ConsumerGroup`` (kept in ``GroupCoordinator.consumer_groups``, beside the classic
groups, with which they share the id space, ``__consumer_offsets`` and the event loop), the members'
session and rebalance timers. The ``GroupCoordinator`` creates it and forwards the consumer-group side
of the APIs both protocols share (offsets, listing, deleting). Everything runs on the broker's event
loop; timers are ``loop.call_later`` handles.

A heartbeat follows Kafka's GroupMetadataManager: validate the request (INVALID_REQUEST,
UNSUPPORTED_ASSIGNOR, INVALID_REGULAR_EXPRESSION), find or create the group and the member (epoch
checks: FENCED_MEMBER_EPOCH, UNKNOWN_MEMBER_ID, static members: UNRELEASED_INSTANCE_ID,
FENCED_INSTANCE_ID), update its subscription (a change, or a change of the subscribed topics' partition
counts, bumps the group epoch), compute a new target assignment with the server assignor when the group
epoch is ahead of it, then move the member one step towards its target (revoke first; partitions still
owned by others wait). The records that describe the change are appended to ``__consumer_offsets``
before the answer; if the append fails the group is restored and the error returned.
"""

from __future__ import annotations

import logging

from minibroker.config import BROKER_CONFIGS
from minibroker.coordinator import assignors
from minibroker.coordinator.classic_group import GroupState
from minibroker.coordinator.consumer_group import (
    STATIC_LEAVE_EPOCH,
    ConsumerGroup,
    ConsumerMember,
    MemberState,
    is_subset,
    reconcile,
)
from minibroker.coordinator.consumer_protocol import (
    PROTOCOL_TYPE,
    ConsumerProtocolError,
    decode_assignment,
    decode_subscription,
    encode_assignment,
    protocol_version,
)
from minibroker.coordinator.group_records import (
    CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT,
    CONSUMER_GROUP_MEMBER_METADATA,
    CONSUMER_GROUP_METADATA,
    CONSUMER_GROUP_PARTITION_METADATA,
    CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER,
    CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA,
    ClassicMemberMetadata,
    CurrentAssignmentValue,
    MemberMetadataValue,
    encode_consumer_group_key,
    encode_current_assignment_value,
    encode_epoch_value,
    encode_group_metadata_key,
    encode_member_metadata_value,
    encode_offset_commit_key,
    encode_partition_metadata_value,
)
from minibroker.coordinator.modern_group import (
    LEAVE_EPOCH,
    GroupChanges,
    HeartbeatResult,
    ModernGroupCoordinator,
    TopicAssignment,
    check_member_epoch,
    same_assignment,
)
from minibroker.coordinator.modern_group import fail as _fail
from minibroker.coordinator.topic_regex import RegexError, compile_re2
from minibroker.errors import ErrorCode, KafkaError
from minibroker.protocol.uuids import uuid4_text

log = logging.getLogger("minibroker.groups")
E = ErrorCode

INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state"})


class _Changes(GroupChanges):
    """What one operation changed in a consumer group: the records to append."""

    MEMBER_METADATA = CONSUMER_GROUP_MEMBER_METADATA
    CURRENT_ASSIGNMENT = CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT
    TARGET_MEMBER = CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER
    TARGET_METADATA = CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA

    def __init__(self) -> None:
        super().__init__()
        self.partition_metadata = False

    def member_metadata_value(self, m: ConsumerMember) -> bytes:
        return encode_member_metadata_value(MemberMetadataValue(
            m.instance_id, m.rack_id, m.client_id, m.client_host, m.subscribed_topic_names,
            m.subscribed_topic_regex, m.rebalance_timeout_ms, m.server_assignor, m.classic))

    def group_records(self, group: ConsumerGroup) -> list[tuple[bytes, bytes | None]]:
        gid = group.group_id
        out: list[tuple[bytes, bytes | None]] = []
        if self.partition_metadata:
            out.append((encode_consumer_group_key(CONSUMER_GROUP_PARTITION_METADATA, gid),
                        encode_partition_metadata_value(group.subscription_metadata)))
        if self.group_epoch:
            out.append((encode_consumer_group_key(CONSUMER_GROUP_METADATA, gid),
                        encode_epoch_value(group.group_epoch)))
        return out

    def current_assignment_value(self, m: ConsumerMember) -> bytes:
        return encode_current_assignment_value(CurrentAssignmentValue(
            m.member_epoch, m.previous_member_epoch, int(m.state), m.assigned, m.pending_revocation))


class ConsumerGroupCoordinator(ModernGroupCoordinator):
    GROUP_TYPE = "consumer"
    HEARTBEAT_API = "ConsumerGroupHeartbeat"
    LEAVE_EPOCHS = (LEAVE_EPOCH, STATIC_LEAVE_EPOCH)

    def __init__(self, groups) -> None:
        super().__init__(groups)
        names = [assignors.assignor_name(a) for a in self.setting("group.consumer.assignors")]
        self.assignors = [n for n in names if n is not None] or [assignors.UNIFORM]
        self.groups: dict[str, ConsumerGroup] = {}
        self._rebalance_timers: dict[tuple[str, str], object] = {}
        self._timer_maps.append(self._rebalance_timers)
        self._regex_cache: dict[str, object] = {}
        self._regex_matches: dict[str, dict[str, bool]] = {}  # pattern -> topic -> matches

    # -- topics ---------------------------------------------------------------------------------

    def _regex(self, pattern: str):
        compiled = self._regex_cache.get(pattern)
        if compiled is None:
            compiled = compile_re2(pattern)
            if len(self._regex_cache) > 1000:
                self._regex_cache.clear()
                self._regex_matches.clear()
            self._regex_cache[pattern] = compiled
        return compiled

    def _member_topics(self, member: ConsumerMember, topics: dict, resolved: set[str]) -> set[str]:
        """The existing topics a member subscribes to: its names, and what its regex matches once the
        group has resolved it."""
        out = {t for t in member.subscribed_topic_names if t in topics}
        pattern = member.subscribed_topic_regex
        if pattern and pattern in resolved:
            matches = self._regex_matches.setdefault(pattern, {})
            if len(matches) > 100_000:
                matches.clear()
            for t in topics:
                hit = matches.get(t)
                if hit is None:
                    hit = matches[t] = t not in INTERNAL_TOPICS and bool(self._regex(pattern).fullmatch(t))
                if hit:
                    out.add(t)
        return out

    def _subscription_metadata(self, group: ConsumerGroup) -> dict[str, tuple[bytes, int]]:
        topics = self._topics()
        names: set[str] = set()
        for m in group.members.values():
            names |= self._member_topics(m, topics, group.resolved_regexes)
        return {t: (topics[t].id, topics[t].partitions) for t in sorted(names)}

    @staticmethod
    def _resolve_regexes(group: ConsumerGroup) -> None:
        """The regexes of the group's members, resolved from now on; the others forgotten. Kafka resolves
        a new regex off the heartbeat that brought it and bumps the group epoch when it is done: here it
        counts from the next heartbeat of any member, which sees the new topics and bumps the epoch. So
        a member subscribing to names and a new regex gets the named topics first, as librdkafka's tests
        expect of Kafka."""
        group.resolved_regexes = {m.subscribed_topic_regex for m in group.members.values()
                                  if m.subscribed_topic_regex}

    # -- validation -----------------------------------------------------------------------------

    def _validate(self, r, version: int) -> None:
        if r.group_id == "":
            raise _fail(E.INVALID_REQUEST, "GroupId can't be empty.")
        if r.instance_id == "":
            raise _fail(E.INVALID_REQUEST, "InstanceId can't be empty.")
        if r.rack_id == "":
            raise _fail(E.INVALID_REQUEST, "RackId can't be empty.")
        if version >= 1 and not r.member_id:
            raise _fail(E.INVALID_REQUEST, "MemberId can't be empty.")
        epoch = r.member_epoch
        if epoch > 0 or epoch == LEAVE_EPOCH:
            if not r.member_id:
                raise _fail(E.INVALID_REQUEST, "MemberId can't be empty.")
        elif epoch == 0:
            if r.rebalance_timeout_ms == -1:
                raise _fail(E.INVALID_REQUEST, "RebalanceTimeoutMs must be provided in first request.")
            if r.topic_partitions is None or r.topic_partitions:
                raise _fail(E.INVALID_REQUEST, "TopicPartitions must be empty when (re-)joining.")
            if not r.subscribed_topic_names and not r.subscribed_topic_regex:
                raise _fail(E.INVALID_REQUEST,
                            "SubscribedTopicNames or SubscribedTopicRegex must be set in first request.")
        elif epoch == STATIC_LEAVE_EPOCH:
            if not r.member_id:
                raise _fail(E.INVALID_REQUEST, "MemberId can't be empty.")
            if r.instance_id is None:
                raise _fail(E.INVALID_REQUEST, "InstanceId can't be null.")
        else:
            raise _fail(E.INVALID_REQUEST, "MemberEpoch is invalid.")
        if r.server_assignor is not None and r.server_assignor not in self.assignors:
            raise _fail(E.UNSUPPORTED_ASSIGNOR, f"ServerAssignor {r.server_assignor} is not supported. "
                        f"Supported assignors: {', '.join(self.assignors)}.")
        if r.subscribed_topic_regex:
            try:
                self._regex(r.subscribed_topic_regex)
            except RegexError as e:
                raise _fail(E.INVALID_REGULAR_EXPRESSION,
                            f"SubscribedTopicRegex `{r.subscribed_topic_regex}` is not a valid regular "
                            f"expression: {e}.") from None
        if any(len(s.encode("utf-8")) > 32767 for s in (r.group_id, r.member_id, r.instance_id or "",
                                                         r.rack_id or "", r.subscribed_topic_regex or "")):
            raise _fail(E.INVALID_REQUEST, "A string is longer than __consumer_offsets can store.")

    # -- ConsumerGroupHeartbeat -----------------------------------------------------------------

    def heartbeat(self, r, version: int, client_id: str, client_host: str) -> HeartbeatResult:
        return self._answer(r, lambda: self._validate(r, version), client_id, client_host)

    def _owned(self, r) -> list[tuple[bytes, list[int]]] | None:
        if r.topic_partitions is None:
            return None
        return [(bytes(tp.topic_id), list(tp.partitions or ())) for tp in r.topic_partitions]

    def _get_or_create_group(self, group_id: str, create: bool
                             ) -> tuple[ConsumerGroup, bool, bool, _Changes | None]:
        """(group, created, replaces a classic group, the records of classic members it took over)."""
        group = self.groups.get(group_id)
        if group is not None:
            return group, False, False, None
        share = getattr(self.gc, "share", None)
        if share is not None and group_id in share.groups:
            raise _fail(E.GROUP_ID_NOT_FOUND, f"Group {group_id} is not a consumer group.")
        classic = self.gc.groups.get(group_id)
        if (classic is not None and create and not classic.is_(GroupState.EMPTY)
                and self._can_upgrade(classic)):
            group, changes = self._from_classic(classic)  # online upgrade
            return group, True, True, changes
        if classic is not None and not (create and classic.is_(GroupState.EMPTY)):
            raise _fail(E.GROUP_ID_NOT_FOUND, f"Group {group_id} is not a consumer group.")
        if not create:
            raise _fail(E.GROUP_ID_NOT_FOUND, f"Consumer group {group_id} not found.")
        group = ConsumerGroup(group_id)
        if classic is not None:  # an Empty classic group (offsets only) becomes a consumer group
            group.offsets = classic.offsets
        return group, True, classic is not None, None

    def _heartbeat(self, r, client_id: str, client_host: str) -> HeartbeatResult:
        epoch = r.member_epoch
        owned = self._owned(r)
        group, created, replaces_classic, converted = self._get_or_create_group(r.group_id, epoch == 0)
        member_id = r.member_id or uuid4_text()
        if (len(group.members) >= self.max_size
                and (not r.member_id or member_id not in group.members)
                and group.static_member(r.instance_id) is None):
            raise _fail(E.GROUP_MAX_SIZE_REACHED, "The consumer group has reached its maximum capacity of "
                        f"{self.max_size} members.")
        snap = None if created else group.snapshot()
        classic_backup = None
        try:  # a failed write (or a bug) leaves the group as it was
            changes = converted or _Changes()
            old = self._find_member(group, member_id, epoch, r.instance_id, owned, changes)
            member = ConsumerMember(member_id) if old is None else _clone(old)
            if r.instance_id is not None:
                member.instance_id = r.instance_id
            if r.rack_id is not None:
                member.rack_id = r.rack_id
            if r.rebalance_timeout_ms != -1:
                member.rebalance_timeout_ms = r.rebalance_timeout_ms
            if r.server_assignor is not None:
                member.server_assignor = r.server_assignor
            if r.subscribed_topic_names is not None:
                member.subscribed_topic_names = list(r.subscribed_topic_names)
            if r.subscribed_topic_regex is not None:
                member.subscribed_topic_regex = r.subscribed_topic_regex or None
            member.client_id = client_id or ""
            member.client_host = client_host or ""
            member = self._apply_member(group, old, member, owned, changes)
            if created:
                self.groups[group.group_id] = group
                classic_backup = self.gc.groups.pop(group.group_id, None)
            entries = changes.records(group)
            if replaces_classic:
                entries.insert(0, (encode_group_metadata_key(group.group_id), None))
            self.gc.store.append(group.group_id, entries)
        except Exception:
            if created:
                self.groups.pop(group.group_id, None)
                if classic_backup is not None:
                    self.gc.groups[group.group_id] = classic_backup
            else:
                group.restore(snap)
            raise
        if converted is not None and classic_backup is not None:
            self.gc.retire_upgraded_group(classic_backup)
            log.info("group %s: classic group with %d members upgraded to a consumer group", group.group_id,
                     len(classic_backup.members))
            for other in group.members:
                if other != member_id:
                    self._schedule_session(group, other)
        self._after_change(group, changes)
        self._resolve_regexes(group)
        if member.state is MemberState.UNREVOKED_PARTITIONS:
            if old is None or old.state is not MemberState.UNREVOKED_PARTITIONS \
                    or old.member_epoch != member.member_epoch:
                self._schedule_rebalance_timeout(group, member)
        else:
            self._cancel((group.group_id, member_id), self._rebalance_timers)
        self._schedule_session(group, member_id)
        full = epoch == 0 or (r.rebalance_timeout_ms != -1 and r.subscribed_topic_names is not None
                              and r.topic_partitions is not None)
        changed = old is None or not same_assignment(old.assigned, member.assigned)
        return HeartbeatResult(E.NONE, None, member_id, member.member_epoch,
                               self.heartbeat_interval(group.group_id),
                               member.assigned if full or changed else None)

    def _apply_member(self, group: ConsumerGroup, old: ConsumerMember | None, member: ConsumerMember,
                      owned, changes: _Changes) -> ConsumerMember:
        """Put the updated ``member`` in the group: a new subscription (or partition count) bumps the
        group epoch, a group epoch ahead of the target gives a new target, and the member takes one step
        towards its target. Returns the member as it now is; ``changes`` collects the records."""
        member_id = member.member_id
        bump = False
        if old is None or member.metadata_key() != old.metadata_key():
            changes.member_metadata.add(member_id)
            if old is None or (member.subscribed_topic_names != old.subscribed_topic_names
                               or member.subscribed_topic_regex != old.subscribed_topic_regex):
                bump = True
        group.put_member(member, old)
        metadata = self._subscription_metadata(group)
        if metadata != group.subscription_metadata:
            group.subscription_metadata = metadata
            changes.partition_metadata = True
            bump = True
        self._advance(group, changes, bump)
        new = reconcile(member, group.assignment_epoch, group.target.get(member_id, {}),
                        group.current_partition_epoch, owned)
        if new is not member:
            group.put_member(new, member)
            member = new
        if old is None or member.assignment_key() != old.assignment_key():
            changes.current.add(member_id)
        return member

    def _find_member(self, group: ConsumerGroup, member_id: str, epoch: int, instance_id: str | None,
                     owned, changes: _Changes) -> ConsumerMember | None:
        """The member a heartbeat is about (None: a new one), after Kafka's epoch and instance checks."""
        if instance_id is None:
            member = group.members.get(member_id)
            if member is None:
                if epoch != 0:
                    raise _fail(E.UNKNOWN_MEMBER_ID, f"Member {member_id} is not a member of group "
                                f"{group.group_id}.")
                return None
            if epoch == 0:
                return self._rejoin(group, member)
            _check_epoch(member, epoch, owned)
            return member
        existing = group.static_member(instance_id)
        if epoch == 0:
            if existing is None:
                member = group.members.get(member_id)
                return self._rejoin(group, member) if member is not None else None
            if existing.member_epoch != STATIC_LEAVE_EPOCH:
                raise _fail(E.UNRELEASED_INSTANCE_ID, f"Static member {member_id} with instance id "
                            f"{instance_id} cannot join the group because the instance id is owned by "
                            f"{existing.member_id} member.")
            # the static member comes back under a new member id: it takes over the old one's
            # assignment and target without a new group epoch
            replacement = _clone(existing)
            replacement.member_id = member_id
            replacement.member_epoch = replacement.previous_member_epoch = 0
            _take_over(group, existing, replacement, changes)
            log.info("group %s: static member %s rejoined as %s", group.group_id, instance_id, member_id)
            return replacement
        if existing is None:
            raise _fail(E.UNKNOWN_MEMBER_ID, f"Instance id {instance_id} is unknown.")
        if existing.member_id != member_id:
            raise _fail(E.FENCED_INSTANCE_ID, f"Static member {member_id} with instance id {instance_id} "
                        f"was fenced by member {existing.member_id}.")
        _check_epoch(existing, epoch, owned)
        return existing

    def _rejoin(self, group: ConsumerGroup, member: ConsumerMember) -> ConsumerMember:
        """A known member (v1 keeps its id) joining again with epoch 0: it owns nothing any more, so its
        partitions are released and it reconciles from scratch."""
        fresh = _clone(member)
        fresh.member_epoch = fresh.previous_member_epoch = 0
        fresh.state = MemberState.STABLE
        fresh.assigned, fresh.pending_revocation = {}, {}
        group.put_member(fresh, member)
        return fresh

    def _update_target(self, group: ConsumerGroup, changes: _Changes) -> None:
        topics = self._topics()
        ids = {name: tid for name, (tid, _count) in group.subscription_metadata.items()}
        counts = {tid: count for tid, count in group.subscription_metadata.values()}
        subscriptions = {m.member_id: frozenset(ids[t] for t in self._member_topics(m, topics,
                                                                                     group.resolved_regexes)
                                                if t in ids)
                         for m in group.members.values()}
        name = group.preferred_assignor(self.assignors[0])
        assign = assignors.ASSIGNORS.get(name, assignors.uniform_assign)
        self._set_target(group, assign(subscriptions, counts, group.target), changes)
        log.info("group %s: new target assignment at epoch %d with the %s assignor", group.group_id,
                 group.assignment_epoch, name)

    def _after_change(self, group: ConsumerGroup, changes: _Changes) -> None:
        for member_id in changes.removed:
            if member_id not in group.members:
                self._cancel_timers(group.group_id, member_id)

    # -- leaving and fencing --------------------------------------------------------------------

    def _leave(self, r) -> HeartbeatResult:
        group = self.groups.get(r.group_id)
        if group is None:
            raise _fail(E.GROUP_ID_NOT_FOUND, f"Consumer group {r.group_id} not found.")
        if r.instance_id is None:
            member = group.members.get(r.member_id)
            if member is None:
                raise _fail(E.UNKNOWN_MEMBER_ID, f"Member {r.member_id} is not a member of group "
                            f"{r.group_id}.")
        else:
            member = group.static_member(r.instance_id)
            if member is None:
                raise _fail(E.UNKNOWN_MEMBER_ID, f"Instance id {r.instance_id} is unknown.")
            if member.member_id != r.member_id:
                raise _fail(E.FENCED_INSTANCE_ID, f"Static member {r.member_id} with instance id "
                            f"{r.instance_id} was fenced by member {member.member_id}.")
            if r.member_epoch == STATIC_LEAVE_EPOCH:
                snap = group.snapshot()
                away = _clone(member)
                away.member_epoch = STATIC_LEAVE_EPOCH
                away.pending_revocation = {}
                group.put_member(away, member)
                changes = _Changes()
                changes.current.add(member.member_id)
                try:
                    self.gc.store.append(group.group_id, changes.records(group))
                except KafkaError:
                    group.restore(snap)
                    raise
                self._cancel((group.group_id, member.member_id), self._rebalance_timers)
                log.info("group %s: static member %s (instance %s) left for now", group.group_id,
                         member.member_id, r.instance_id)
                return HeartbeatResult(E.NONE, None, member.member_id, STATIC_LEAVE_EPOCH, 0, None)
        self.fence(group, member.member_id, "the member left")
        return HeartbeatResult(E.NONE, None, r.member_id, r.member_epoch, 0, None)

    def fence(self, group: ConsumerGroup, member_id: str, reason: str) -> None:
        """Remove a member, bump the group epoch (raises KafkaError when the records cannot be written);
        the last consumer-protocol member of a group of classic members turns it into a classic group."""
        if member_id in group.members and self._can_downgrade(group, member_id):
            self._to_classic(group, member_id, reason)
            return
        super().fence(group, member_id, reason)

    def _changes(self) -> _Changes:
        return _Changes()

    def _remove_member(self, group: ConsumerGroup, member_id: str, changes: _Changes) -> None:
        group.remove_member(member_id)
        self._resolve_regexes(group)
        metadata = self._subscription_metadata(group)
        if metadata != group.subscription_metadata:
            group.subscription_metadata = metadata
            changes.partition_metadata = True

    # -- timers ---------------------------------------------------------------------------------

    def _member_session_timeout(self, group: ConsumerGroup, member_id: str) -> int:
        member = group.members.get(member_id)  # a classic member keeps its JoinGroup session timeout
        return member.classic.session_timeout_ms if member is not None and member.classic is not None \
            else self.session_timeout(group.group_id)

    def _schedule_rebalance_timeout(self, group: ConsumerGroup, member: ConsumerMember) -> None:
        key = (group.group_id, member.member_id)
        self._cancel(key, self._rebalance_timers)
        timeout = member.rebalance_timeout_ms if member.rebalance_timeout_ms >= 0 \
            else self.session_timeout(group.group_id)
        self._rebalance_timers[key] = self.gc._call_later(timeout, self._rebalance_expired, key,
                                                          member.member_epoch)

    def _rebalance_expired(self, key: tuple[str, str], epoch: int) -> None:
        self._rebalance_timers.pop(key, None)
        self._fence_quietly(key[0], key[1], epoch, "it did not revoke its partitions in time")

    # -- online migration: classic members inside a consumer group ---------------------------------

    def _policy(self) -> str:
        try:
            return str(self.broker.config["group.consumer.migration.policy"]).lower()
        except KeyError:  # a partial configuration (unit tests)
            return BROKER_CONFIGS["group.consumer.migration.policy"].default

    def _can_upgrade(self, classic) -> bool:
        """Kafka's validateOnlineUpgrade: the policy allows it, the group speaks the consumer protocol
        and fits in a consumer group."""
        if self._policy() not in ("bidirectional", "upgrade"):
            log.info("group %s: no online upgrade of a classic group (group.consumer.migration.policy=%s)",
                     classic.group_id, self._policy())
            return False
        return classic.protocol_type == PROTOCOL_TYPE and len(classic.members) <= self.max_size

    def _topic_ids(self) -> dict[str, bytes]:
        return {name: info.id for name, info in self._topics().items()}

    def _topic_names(self) -> dict[bytes, str]:
        return {info.id: name for name, info in self._topics().items()}

    def _to_ids(self, by_name) -> TopicAssignment:
        ids = self._topic_ids()
        out: TopicAssignment = {}
        for topic, partitions in by_name:
            if topic in ids:
                out.setdefault(ids[topic], set()).update(partitions)
        return out

    def _from_classic(self, classic) -> tuple[ConsumerGroup, _Changes]:
        """A consumer group holding a classic group's members as classic members, each at the classic
        generation with its last assignment as both current and target (Kafka's fromClassicGroup)."""
        group = ConsumerGroup(classic.group_id)
        group.offsets = classic.offsets
        group.group_epoch = group.assignment_epoch = classic.generation_id
        changes = _Changes()
        try:
            for m in classic.members.values():
                subscription = decode_subscription(m.metadata(classic.protocol_name))
                assigned = self._to_ids(decode_assignment(m.assignment).items())
                member = ConsumerMember(m.member_id)
                member.member_epoch = member.previous_member_epoch = classic.generation_id
                member.instance_id, member.rack_id = m.group_instance_id, subscription.rack_id
                member.client_id, member.client_host = m.client_id, m.client_host
                member.rebalance_timeout_ms = m.rebalance_timeout_ms
                member.subscribed_topic_names = list(subscription.topics)
                member.assigned = assigned
                member.classic = ClassicMemberMetadata(m.session_timeout_ms, tuple(m.protocols))
                group.put_member(member)
                group.target[m.member_id] = {t: set(ps) for t, ps in assigned.items()}
                changes.member_metadata.add(m.member_id)
                changes.target.add(m.member_id)
                changes.current.add(m.member_id)
        except ConsumerProtocolError as e:
            log.warning("group %s: cannot upgrade the classic group: %s", classic.group_id, e)
            raise _fail(E.GROUP_ID_NOT_FOUND, f"Cannot upgrade the classic group {classic.group_id}: {e}.") \
                from None
        group.subscription_metadata = self._subscription_metadata(group)
        changes.partition_metadata = changes.group_epoch = changes.target_epoch = True
        return group, changes

    def _can_downgrade(self, group: ConsumerGroup, leaving_id: str) -> bool:
        """Kafka's validateOnlineDowngradeWithFencedMember: the last consumer-protocol member leaves a
        group whose other members are classic ones."""
        leaving = group.members[leaving_id]
        rest = [m for m in group.members.values() if m.member_id != leaving_id]
        if leaving.classic is not None or not rest or any(m.classic is None for m in rest):
            return False
        if self._policy() not in ("bidirectional", "downgrade"):
            log.info("group %s: no online downgrade to a classic group (group.consumer.migration.policy=%s)",
                     group.group_id, self._policy())
            return False
        return len(rest) <= self.gc.max_group_size

    def _to_classic(self, group: ConsumerGroup, leaving_id: str, reason: str) -> None:
        """Replace the consumer group by a classic group of its classic members, each with its target
        assignment, then rebalance it (Kafka's convertToClassicGroup); raises KafkaError, changing
        nothing, when the records cannot be written."""
        from minibroker.coordinator.classic_group import ClassicGroup, Member

        gid = group.group_id
        classic = ClassicGroup(gid)
        classic.offsets = group.offsets
        classic.generation_id = group.group_epoch
        classic.protocol_type = PROTOCOL_TYPE
        names = self._topic_names()
        for m in group.members.values():
            if m.member_id == leaving_id:
                continue
            protocols = [(name, bytes(meta)) for name, meta in m.classic.protocols]
            target = group.target.get(m.member_id, {})
            assignment = {names[t]: sorted(ps) for t, ps in target.items() if t in names and ps}
            try:
                version = protocol_version(protocols[0][1]) if protocols else 0
            except ConsumerProtocolError:
                version = 0
            classic.add(Member(m.member_id, m.instance_id, m.client_id, m.client_host, m.rebalance_timeout_ms,
                               m.classic.session_timeout_ms, PROTOCOL_TYPE, protocols,
                               encode_assignment(version, assignment)))
        classic.protocol_name = classic.select_protocol()
        classic.state = GroupState.STABLE
        entries: list[tuple[bytes, bytes | None]] = []
        for member_id in sorted(group.members):
            for record_type in (CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT,
                                CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER, CONSUMER_GROUP_MEMBER_METADATA):
                entries.append((encode_consumer_group_key(record_type, gid, member_id), None))
        for record_type in (CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA, CONSUMER_GROUP_PARTITION_METADATA,
                            CONSUMER_GROUP_METADATA):
            entries.append((encode_consumer_group_key(record_type, gid), None))
        entries.append(self.gc.group_metadata_entry(classic))
        self.gc.store.append(gid, entries)
        for member_id in list(group.members):
            self._cancel_timers(gid, member_id)
        self.groups.pop(gid, None)
        log.info("group %s: member %s removed (%s); the %d classic members left make it a classic group",
                 gid, leaving_id, reason, len(classic.members))
        self.gc.adopt_downgraded_group(classic)

    def _supports_classic(self, group: ConsumerGroup, protocol_type: str, protocols) -> bool:
        """Kafka's supportsClassicProtocols: the consumer protocol type, and a protocol every classic
        member supports."""
        if protocol_type != PROTOCOL_TYPE or not protocols:
            return False
        classic = [m for m in group.members.values() if m.classic is not None]
        if not classic:
            return True
        return any(all(name in {n for n, _ in m.classic.protocols} for m in classic) for name, _ in protocols)

    def _classic_member(self, group: ConsumerGroup, member_id: str, instance_id: str | None
                        ) -> ConsumerMember:
        """Kafka's validateConsumerGroupMember and throwIfMemberDoesNotUseClassicProtocol."""
        if instance_id is None:
            member = group.members.get(member_id)
            if member is None:
                raise _fail(E.UNKNOWN_MEMBER_ID, f"Member {member_id} is not a member of group "
                            f"{group.group_id}.")
        else:
            member = group.static_member(instance_id)
            if member is None:
                raise _fail(E.UNKNOWN_MEMBER_ID, f"Member with instance id {instance_id} is not a member of "
                            f"group {group.group_id}.")
            if member.member_id != member_id:
                raise _fail(E.FENCED_INSTANCE_ID, f"Static member {member_id} with instance id {instance_id} "
                            f"was fenced by member {member.member_id}.")
        if member.classic is None:
            raise _fail(E.UNKNOWN_MEMBER_ID, f"Member {member.member_id} does not use the classic protocol.")
        return member

    def classic_join(self, group: ConsumerGroup, member_id: str, instance_id: str | None, client_id: str,
                     client_host: str, session_timeout_ms: int, rebalance_timeout_ms: int, protocol_type: str,
                     protocols: list[tuple[str, bytes]], require_known_member_id: bool
                     ) -> tuple[ErrorCode, str, int, str | None, str | None]:
        """A classic member's JoinGroup into a consumer group with members (Kafka's
        classicGroupJoinToConsumerGroup): answered at once, the member being a follower whose assignment
        SyncGroup gives. (error, member id, generation = member epoch, protocol type, protocol name)."""
        unknown = member_id == ""
        if unknown:
            member_id = uuid4_text()
        try:
            if (len(group.members) >= self.max_size and member_id not in group.members
                    and group.static_member(instance_id) is None):
                raise _fail(E.GROUP_MAX_SIZE_REACHED, "The consumer group has reached its maximum capacity.")
            if not self._supports_classic(group, protocol_type, protocols):
                raise _fail(E.INCONSISTENT_GROUP_PROTOCOL,
                            f"Member {member_id}'s protocols are not supported.")
            if unknown and instance_id is None and require_known_member_id:
                return E.MEMBER_ID_REQUIRED, member_id, -1, None, None
            try:
                subscription = decode_subscription(protocols[0][1])
            except ConsumerProtocolError as e:
                raise _fail(E.INCONSISTENT_GROUP_PROTOCOL, str(e)) from None
            snap = group.snapshot()
            changes = _Changes()
            try:
                old = self._find_classic_member(group, member_id, instance_id, unknown, changes)
                member = ConsumerMember(member_id) if old is None else _clone(old)
                member.instance_id = instance_id
                if subscription.rack_id is not None:
                    member.rack_id = subscription.rack_id
                if rebalance_timeout_ms != -1:
                    member.rebalance_timeout_ms = rebalance_timeout_ms
                member.server_assignor = None
                member.subscribed_topic_names = list(subscription.topics)
                member.client_id, member.client_host = client_id or "", client_host or ""
                member.classic = ClassicMemberMetadata(session_timeout_ms, tuple(protocols))
                owned = [(t, sorted(ps)) for t, ps in self._to_ids(subscription.owned).items()]
                member = self._apply_member(group, old, member, owned, changes)
                self.gc.store.append(group.group_id, changes.records(group))
            except Exception:
                group.restore(snap)
                raise
        except KafkaError as e:
            return e.code, member_id, -1, None, None
        self._after_change(group, changes)
        self._schedule_session(group, member_id)
        if member.state is MemberState.UNREVOKED_PARTITIONS:
            self._schedule_rebalance_timeout(group, member)
        else:
            self._cancel((group.group_id, member_id), self._rebalance_timers)
        log.info("group %s: classic member %s joined at epoch %d", group.group_id, member_id,
                 member.member_epoch)
        return E.NONE, member_id, member.member_epoch, PROTOCOL_TYPE, protocols[0][0]

    def _find_classic_member(self, group: ConsumerGroup, member_id: str, instance_id: str | None,
                             unknown: bool, changes: _Changes) -> ConsumerMember | None:
        if instance_id is None:
            member = group.members.get(member_id)
            if member is not None and member.classic is None:
                raise _fail(E.UNKNOWN_MEMBER_ID, f"Member {member_id} does not use the classic protocol.")
            return member  # None: a new member (also the id MEMBER_ID_REQUIRED handed out)
        existing = group.static_member(instance_id)
        if existing is None:
            return None
        if existing.member_id == member_id:
            return existing
        if not unknown:
            raise _fail(E.FENCED_INSTANCE_ID, f"Static member {member_id} with instance id {instance_id} was "
                        f"fenced by member {existing.member_id}.")
        # the instance restarted: the new member id takes over the old one's assignment and target
        replacement = _clone(existing)
        replacement.member_id = member_id
        _take_over(group, existing, replacement, changes)
        return replacement

    def classic_sync(self, group: ConsumerGroup, member_id: str, instance_id: str | None, generation: int,
                     protocol_type: str | None, protocol_name: str | None
                     ) -> tuple[ErrorCode, str | None, str | None, bytes]:
        """A classic member's SyncGroup in a consumer group: its current assignment in the consumer
        protocol's bytes (Kafka's classicGroupSyncToConsumerGroup)."""
        try:
            member = self._classic_member(group, member_id, instance_id)
            if member.member_epoch != generation:
                raise _fail(E.ILLEGAL_GENERATION, f"The request generation id {generation} is not equal to "
                            f"the member epoch {member.member_epoch} of member {member_id}.")
            name = member.classic.protocols[0][0] if member.classic.protocols else None
            if (protocol_type is not None and protocol_type != PROTOCOL_TYPE) or \
                    (protocol_name is not None and protocol_name != name):
                raise _fail(E.INCONSISTENT_GROUP_PROTOCOL, "The protocol does not match the join response.")
            if (group.group_epoch > member.member_epoch
                    and member.state is not MemberState.UNREVOKED_PARTITIONS):
                raise _fail(E.REBALANCE_IN_PROGRESS,
                            f"A new rebalance is triggered in group {group.group_id}.")
        except KafkaError as e:
            return e.code, None, None, b""
        self._schedule_session(group, member.member_id)
        names = self._topic_names()
        assignment = {names[t]: sorted(ps) for t, ps in member.assigned.items() if t in names and ps}
        try:
            version = protocol_version(member.classic.protocols[0][1])
        except (ConsumerProtocolError, IndexError):
            version = 0
        return E.NONE, protocol_type, protocol_name, encode_assignment(version, assignment)

    def classic_heartbeat(self, group: ConsumerGroup, member_id: str, instance_id: str | None,
                          generation: int) -> ErrorCode:
        """A classic member's Heartbeat in a consumer group: REBALANCE_IN_PROGRESS when it must rejoin to
        move towards its target (Kafka's classicGroupHeartbeatToConsumerGroup)."""
        try:
            member = self._classic_member(group, member_id, instance_id)
            if member.member_epoch != generation:
                raise _fail(E.ILLEGAL_GENERATION, "The generation id does not match the member epoch.")
        except KafkaError as e:
            return e.code
        self._schedule_session(group, member.member_id)
        if member.member_epoch < group.group_epoch or member.state is MemberState.UNREVOKED_PARTITIONS:
            return E.REBALANCE_IN_PROGRESS
        if member.state is MemberState.UNRELEASED_PARTITIONS:
            target = group.target.get(member.member_id, {})
            waiting = any(group.current_partition_epoch(t, p) != -1
                          for t, ps in target.items() for p in ps if p not in member.assigned.get(t, ()))
            if not waiting:
                return E.REBALANCE_IN_PROGRESS
        return E.NONE

    def classic_leave(self, group: ConsumerGroup, leaving: list[tuple[str, str | None]]
                      ) -> list[tuple[str, str | None, ErrorCode]]:
        """Classic members leaving a consumer group (Kafka's classicGroupLeaveToConsumerGroup)."""
        out = []
        for member_id, instance_id in leaving:
            try:
                if instance_id is None:
                    member = self._classic_member(group, member_id, None)
                else:
                    member = group.static_member(instance_id)
                    if member is None:
                        raise _fail(E.UNKNOWN_MEMBER_ID, f"Instance id {instance_id} is unknown.")
                    if member_id and member.member_id != member_id:
                        raise _fail(E.FENCED_INSTANCE_ID, f"Static member {member_id} with instance id "
                                    f"{instance_id} was fenced by member {member.member_id}.")
                    if member.classic is None:
                        raise _fail(E.UNKNOWN_MEMBER_ID,
                                    f"Member {member.member_id} does not use the classic protocol.")
                self.fence(group, member.member_id, "the classic member left")
                out.append((member_id, instance_id, E.NONE))
            except KafkaError as e:
                out.append((member_id, instance_id, e.code))
        return out

    # -- ConsumerGroupDescribe ------------------------------------------------------------------

    def other_type(self, group_id: str) -> str | None:
        """The type of a group of another kind holding ``group_id`` ("classic", "share"), else None."""
        if group_id in self.gc.groups:
            return "classic"
        share = getattr(self.gc, "share", None)
        return "share" if share is not None and group_id in share.groups else None

    def default_assignor(self, group: ConsumerGroup) -> str:
        return group.preferred_assignor(self.assignors[0])

    # -- offsets --------------------------------------------------------------------------------

    def validate_offset_commit(self, group: ConsumerGroup, member_id: str, member_epoch: int,
                               api_version: int) -> None:
        """Kafka's ConsumerGroup.validateOffsetCommit."""
        if member_epoch < 0 and not group.members:
            return
        member = group.members.get(member_id)
        if member is None:
            raise _fail(E.UNKNOWN_MEMBER_ID, f"Member {member_id} is not a member of group {group.group_id}.")
        if member.classic is not None:  # a classic member commits with its generation (= member epoch)
            if member_epoch != member.member_epoch:
                raise _fail(E.ILLEGAL_GENERATION, f"The received generation id {member_epoch} does not match "
                            f"the expected member epoch {member.member_epoch}.")
            return
        if api_version < 9:
            raise _fail(E.UNSUPPORTED_VERSION, "OffsetCommit version 9 or above must be used by members "
                        "using the modern group protocol")
        if member_epoch != member.member_epoch:
            raise _fail(E.STALE_MEMBER_EPOCH, f"The received member epoch {member_epoch} does not match the "
                        f"expected member epoch {member.member_epoch}.")

    def validate_offset_fetch(self, group: ConsumerGroup, member_id: str | None, member_epoch: int) -> None:
        if member_id is None and member_epoch < 0:
            return
        member = group.members.get(member_id or "")
        if member is None:
            raise _fail(E.UNKNOWN_MEMBER_ID, f"Member {member_id} is not a member of group {group.group_id}.")
        if member_epoch != member.member_epoch:
            raise _fail(E.STALE_MEMBER_EPOCH, f"The received member epoch {member_epoch} does not match the "
                        f"expected member epoch {member.member_epoch}.")

    def subscribed_topics(self, group: ConsumerGroup) -> set[str]:
        return set(group.subscription_metadata)

    def delete(self, group: ConsumerGroup, *, keep_offsets: bool = False) -> None:
        """Delete an Empty consumer group: tombstones for its records, and for its offsets unless they
        stay (the group becomes a classic one)."""
        gid = group.group_id
        entries = [] if keep_offsets else [(encode_offset_commit_key(gid, t, p), None)
                                           for t, p in sorted(group.offsets)]
        for record_type in (CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA, CONSUMER_GROUP_PARTITION_METADATA,
                            CONSUMER_GROUP_METADATA):
            entries.append((encode_consumer_group_key(record_type, gid), None))
        self.gc.store.append(gid, entries)
        self.groups.pop(gid, None)

    # -- loading --------------------------------------------------------------------------------

    def load(self, group_id: str, records: dict, offsets: dict) -> None:
        """Rebuild a group from its records as a load left them: {(record type, member id): value}."""
        from minibroker.coordinator import group_records as gr

        epoch_value = records.get((CONSUMER_GROUP_METADATA, ""))
        if epoch_value is None:
            return
        group = ConsumerGroup(group_id)
        group.offsets = dict(offsets)
        group.group_epoch = gr.decode_epoch_value(epoch_value)
        value = records.get((CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA, ""))
        group.assignment_epoch = gr.decode_epoch_value(value) if value is not None else 0
        value = records.get((CONSUMER_GROUP_PARTITION_METADATA, ""))
        group.subscription_metadata = gr.decode_partition_metadata_value(value) if value is not None else {}
        for (record_type, member_id), value in records.items():
            if record_type == CONSUMER_GROUP_MEMBER_METADATA and value is not None:
                meta = gr.decode_member_metadata_value(value)
                member = ConsumerMember(member_id)
                member.instance_id, member.rack_id = meta.instance_id, meta.rack_id
                member.client_id, member.client_host = meta.client_id, meta.client_host
                member.subscribed_topic_names = list(meta.subscribed_topic_names)
                member.subscribed_topic_regex = meta.subscribed_topic_regex
                member.rebalance_timeout_ms = meta.rebalance_timeout_ms
                member.server_assignor = meta.server_assignor
                member.classic = meta.classic
                current = records.get((CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT, member_id))
                if current is not None:
                    cur = gr.decode_current_assignment_value(current)
                    member.member_epoch = cur.member_epoch
                    member.previous_member_epoch = cur.previous_member_epoch
                    try:
                        member.state = MemberState(cur.state)
                    except ValueError:
                        member.state = MemberState.UNKNOWN
                    member.assigned, member.pending_revocation = cur.assigned, cur.pending_revocation
                group.put_member(member)
        for (record_type, member_id), value in records.items():
            if record_type == CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER and value is not None \
                    and member_id in group.members:
                group.target[member_id] = gr.decode_target_assignment_value(value)
        self._resolve_regexes(group)  # resolved before the restart: the records hold the result
        self.groups[group_id] = group
        for member_id in group.members:
            self._schedule_session(group, member_id)


def _check_epoch(member: ConsumerMember, epoch: int, owned) -> None:
    """Kafka's throwIfConsumerGroupMemberEpochIsInvalid: the previous epoch only with no partition the
    member does not own any more."""
    check_member_epoch(member, epoch, "consumer", is_subset(owned, member.assigned))


def _take_over(group: ConsumerGroup, existing: ConsumerMember, replacement: ConsumerMember,
               changes: _Changes) -> None:
    """A static member's new member id (``replacement``) takes over ``existing``'s place and target."""
    target = group.target.get(existing.member_id)
    group.remove_member(existing.member_id)
    changes.removed.add(existing.member_id)  # its timers go once the change is written
    group.put_member(replacement)
    if target is not None:
        group.target[replacement.member_id] = target
    changes.target.add(replacement.member_id)
    changes.member_metadata.add(replacement.member_id)
    changes.current.add(replacement.member_id)


def _clone(member: ConsumerMember) -> ConsumerMember:
    import copy

    new = copy.copy(member)
    new.assigned = {t: set(ps) for t, ps in member.assigned.items()}
    new.pending_revocation = {t: set(ps) for t, ps in member.pending_revocation.items()}
    return new
