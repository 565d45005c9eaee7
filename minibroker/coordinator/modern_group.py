"""What the consumer (KIP-848) and share (KIP-932) group coordinators share, as Kafka's ModernGroup does
for ConsumerGroup and ShareGroup.

Both keep, per group, a group epoch, a target assignment at an assignment epoch and members moving
towards their targets; both write the same shapes of records to ``__consumer_offsets`` (a member's
metadata, its target and current assignments, the target's epoch, tombstones for a member that goes),
time members out by their session, and fence a member by removing it and bumping the group epoch.
``ModernGroupCoordinator`` holds that bookkeeping and ``GroupChanges`` the records of one change;
minibroker/coordinator/consumer_group_coordinator.py and share_group_coordinator.py hold what differs
(validation, the assignors, revocation, static members and online migration for consumer groups; the
simple assignor and the share state for share groups). Everything runs on the broker's event loop;
timers are ``loop.call_later`` handles.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import NamedTuple

from minibroker.config import BROKER_CONFIGS
from minibroker.coordinator.group_records import (
    encode_epoch_value,
    encode_group_record_key,
    encode_target_assignment_value,
)
from minibroker.errors import ErrorCode, KafkaError

log = logging.getLogger("minibroker.groups")
E = ErrorCode

TopicAssignment = dict[bytes, set[int]]  # {topic id (16 bytes): partitions}, as Kafka keeps them
LEAVE_EPOCH = -1


class HeartbeatResult(NamedTuple):
    error: ErrorCode
    message: str | None = None
    member_id: str | None = None
    member_epoch: int = 0
    heartbeat_interval_ms: int = 0
    assignment: TopicAssignment | None = None


def fail(code: ErrorCode, message: str | None = None) -> KafkaError:
    return KafkaError(code, message)


def frozen(a: TopicAssignment) -> frozenset:
    return frozenset((t, frozenset(ps)) for t, ps in a.items() if ps)


def same_assignment(a: TopicAssignment, b: TopicAssignment) -> bool:
    return frozen(a) == frozen(b)


def check_member_epoch(member, epoch: int, group_type: str, previous_ok: bool = True) -> None:
    """Kafka's throwIf{Consumer,Share}GroupMemberEpochIsInvalid: an epoch ahead of the member's is fenced,
    and so is one behind it unless it is the previous epoch (the answer that bumped it may have been
    lost) and ``previous_ok``."""
    if epoch > member.member_epoch:
        which = "greater"
    elif epoch < member.member_epoch and (epoch != member.previous_member_epoch or not previous_ok):
        which = "smaller"
    else:
        return
    raise fail(E.FENCED_MEMBER_EPOCH, f"The {group_type} group member has a {which} member epoch ({epoch}) "
               f"than the one known by the group coordinator ({member.member_epoch}). The member must "
               "abandon all its partitions and rejoin.")


class GroupChanges:
    """What one operation changed in a group: the records to append, in Kafka's order. A subclass names
    its group type's record types and writes the values that differ."""

    MEMBER_METADATA = CURRENT_ASSIGNMENT = TARGET_MEMBER = TARGET_METADATA = -1

    def __init__(self) -> None:
        self.member_metadata: set[str] = set()
        self.current: set[str] = set()
        self.target: set[str] = set()
        self.removed: set[str] = set()
        self.group_epoch = False
        self.target_epoch = False

    def member_metadata_value(self, member) -> bytes:
        raise NotImplementedError

    def group_records(self, group) -> list[tuple[bytes, bytes | None]]:
        """The group-level records, written between the members' metadata and the target."""
        raise NotImplementedError

    def current_assignment_value(self, member) -> bytes:
        raise NotImplementedError

    def records(self, group) -> list[tuple[bytes, bytes | None]]:
        gid, key = group.group_id, encode_group_record_key
        out = [(key(self.MEMBER_METADATA, gid, m), self.member_metadata_value(group.members[m]))
               for m in sorted(self.member_metadata - self.removed)]
        out += self.group_records(group)
        for member_id in sorted(self.target - self.removed):
            out.append((key(self.TARGET_MEMBER, gid, member_id),
                        encode_target_assignment_value(group.target.get(member_id, {}))))
        if self.target_epoch:
            out.append((key(self.TARGET_METADATA, gid), encode_epoch_value(group.assignment_epoch)))
        for member_id in sorted(self.current - self.removed):
            out.append((key(self.CURRENT_ASSIGNMENT, gid, member_id),
                        self.current_assignment_value(group.members[member_id])))
        for member_id in sorted(self.removed):  # Kafka's order for a leaving member's tombstones
            for record_type in (self.CURRENT_ASSIGNMENT, self.TARGET_MEMBER, self.MEMBER_METADATA):
                out.append((key(record_type, gid, member_id), None))
        return out


class ModernGroupCoordinator:
    """The groups of one type, their members' session timers, and what every change does to them.

    A subclass sets the class attributes and writes the hooks: ``_validate``, ``_heartbeat``, ``_leave``,
    ``_remove_member`` (what removing a member changes besides the member), ``_changes`` and
    ``other_type``."""

    GROUP_TYPE = ""  # "consumer" or "share": its group.coordinator.rebalance.protocols name, its keys
    HEARTBEAT_API = ""  # the API a heartbeat answers, for the log
    MEMBER = "member"  # what the log lines call a member
    GROUP_EPOCH = "group epoch"  # and the group epoch
    LEAVE_EPOCHS: tuple[int, ...] = (LEAVE_EPOCH,)

    def __init__(self, groups) -> None:
        self.gc = groups  # the GroupCoordinator: store, loop, the shared group id space
        self.broker = groups.broker
        kind = self.GROUP_TYPE
        self.enabled = kind in self.setting("group.coordinator.rebalance.protocols")
        self.heartbeat_interval_ms = self.setting(f"group.{kind}.heartbeat.interval.ms")
        self.session_timeout_ms = self.setting(f"group.{kind}.session.timeout.ms")
        self.max_size = self.setting(f"group.{kind}.max.size")
        self.configs = getattr(groups, "configs", None)  # GroupConfigs: per-group overrides
        self.groups: dict = {}
        self._session_timers: dict[tuple[str, str], object] = {}
        self._timer_maps = [self._session_timers]  # every timer map, for close and _cancel_timers

    def setting(self, name: str):
        try:
            return self.broker.config[name]
        except KeyError:  # a partial configuration (unit tests of the classic coordinator)
            return BROKER_CONFIGS[name].default

    def session_timeout(self, group_id: str) -> int:
        """The group's <type>.session.timeout.ms, else the broker's group.<type>.session.timeout.ms."""
        if self.configs is None:
            return self.session_timeout_ms
        return self.configs.value(group_id, f"{self.GROUP_TYPE}.session.timeout.ms")

    def heartbeat_interval(self, group_id: str) -> int:
        if self.configs is None:
            return self.heartbeat_interval_ms
        return self.configs.value(group_id, f"{self.GROUP_TYPE}.heartbeat.interval.ms")

    def close(self) -> None:
        for timers in self._timer_maps:
            for handle in timers.values():
                handle.cancel()
            timers.clear()

    def _topics(self) -> dict:
        return self.broker.logs.topics

    # -- heartbeats -----------------------------------------------------------------------------

    def _answer(self, r, validate: Callable[[], None], client_id: str, client_host: str) -> HeartbeatResult:
        result = self._answer_heartbeat(r, validate, client_id, client_host)
        events = getattr(self.broker, "group_events", None)  # the live view's timeline, while attached
        if events is not None:
            group = self.groups.get(r.group_id)
            member_id = result.member_id or r.member_id
            member = group.members.get(member_id) if group is not None else None
            leaving = r.member_epoch in self.LEAVE_EPOCHS
            events.record(
                r.group_id, "leave" if leaving else "heartbeat", member_id, error=result.error.name,
                api=self.HEARTBEAT_API, asked_epoch=r.member_epoch, member_epoch=result.member_epoch,
                group_epoch=group.group_epoch if group is not None else None,
                assignment_epoch=group.assignment_epoch if group is not None else None,
                current=dict(member.assigned) if member is not None else None,
                target=dict(group.target.get(member_id, {})) if member is not None else None)
        return result

    def _answer_heartbeat(self, r, validate: Callable[[], None], client_id: str,
                          client_host: str) -> HeartbeatResult:
        """A heartbeat's answer: the protocol enabled, the request valid, the groups loaded, then a leave or
        a heartbeat; a KafkaError is the answer's error, anything else a bug answered as Kafka does."""
        try:
            if not self.enabled:
                raise fail(E.UNSUPPORTED_VERSION, f"The {self.GROUP_TYPE} group protocol is not enabled.")
            validate()
            if self.gc.loading:
                raise KafkaError(E.COORDINATOR_LOAD_IN_PROGRESS)
            if r.member_epoch in self.LEAVE_EPOCHS:
                return self._leave(r)
            return self._heartbeat(r, client_id, client_host)
        except KafkaError as e:
            return HeartbeatResult(e.code, e.message)
        except Exception:  # a bug: the group was restored; the client gets Kafka's answer to the unexpected
            log.exception("group %s: %s failed", r.group_id, self.HEARTBEAT_API)
            return HeartbeatResult(E.UNKNOWN_SERVER_ERROR, None)

    def _leave(self, r) -> HeartbeatResult:
        raise NotImplementedError

    def _heartbeat(self, r, client_id: str, client_host: str) -> HeartbeatResult:
        raise NotImplementedError

    def _update_target(self, group, changes: GroupChanges) -> None:
        raise NotImplementedError

    def _advance(self, group, changes: GroupChanges, bump: bool) -> None:
        """Bump the group epoch when ``bump`` (a subscription, or a subscribed topic, changed), then
        compute a new target when the group epoch is ahead of the target's."""
        if bump:
            group.group_epoch += 1
            changes.group_epoch = True
            log.info("group %s: bumped %s to %d", group.group_id, self.GROUP_EPOCH, group.group_epoch)
            events = getattr(self.broker, "group_events", None)
            if events is not None:
                events.record(group.group_id, "rebalance", None, group_epoch=group.group_epoch)
        if group.group_epoch > group.assignment_epoch:
            self._update_target(group, changes)

    def _set_target(self, group, new_target: dict[str, TopicAssignment], changes: GroupChanges) -> None:
        """Make ``new_target`` the group's target at the group epoch; members whose target changed get a
        record."""
        for member_id, assignment in new_target.items():
            previous = group.target.get(member_id)
            if previous is None or not same_assignment(assignment, previous):
                changes.target.add(member_id)
        group.target = new_target
        group.assignment_epoch = group.group_epoch
        changes.target_epoch = True

    # -- fencing --------------------------------------------------------------------------------

    def _changes(self) -> GroupChanges:
        raise NotImplementedError

    def _remove_member(self, group, member_id: str, changes: GroupChanges) -> None:
        raise NotImplementedError

    def fence(self, group, member_id: str, reason: str) -> None:
        """Remove a member and bump the group epoch; raises KafkaError, changing nothing, when the
        group's records cannot be written."""
        if member_id not in group.members:
            return
        snap = group.snapshot()
        changes = self._changes()
        self._remove_member(group, member_id, changes)
        changes.removed.add(member_id)
        group.group_epoch += 1
        changes.group_epoch = True
        try:
            self.gc.store.append(group.group_id, changes.records(group))
        except KafkaError:
            group.restore(snap)
            raise
        self._cancel_timers(group.group_id, member_id)
        log.info("group %s: %s %s removed (%s); group epoch %d", group.group_id, self.MEMBER, member_id,
                 reason, group.group_epoch)
        events = getattr(self.broker, "group_events", None)
        if events is not None:
            events.record(group.group_id, "removed", member_id, reason=reason, group_epoch=group.group_epoch)

    def _fence_quietly(self, group_id: str, member_id: str, epoch: int | None, reason: str) -> None:
        """``fence`` from a timer: not when the member is gone (or, given ``epoch``, at another epoch);
        a failed write is logged and the session timer set again, to try later."""
        group = self.groups.get(group_id)
        if group is None or self.gc._closed:
            return
        member = group.members.get(member_id)
        if member is None or (epoch is not None and member.member_epoch != epoch):
            return
        try:
            self.fence(group, member_id, reason)
        except KafkaError as e:
            log.warning("group %s: could not remove %s %s: %s", group_id, self.MEMBER, member_id, e)
            self._schedule_session(group, member_id)  # try again later

    # -- timers ---------------------------------------------------------------------------------

    def _member_session_timeout(self, group, member_id: str) -> int:
        return self.session_timeout(group.group_id)

    def _schedule_session(self, group, member_id: str) -> None:
        key = (group.group_id, member_id)
        self._cancel(key, self._session_timers)
        self._session_timers[key] = self.gc._call_later(self._member_session_timeout(group, member_id),
                                                        self._session_expired, key)

    def _session_expired(self, key: tuple[str, str]) -> None:
        self._session_timers.pop(key, None)
        self._fence_quietly(key[0], key[1], None, "its session timed out")

    @staticmethod
    def _cancel(key, timers: dict) -> None:
        handle = timers.pop(key, None)
        if handle is not None:
            handle.cancel()

    def _cancel_timers(self, group_id: str, member_id: str) -> None:
        for timers in self._timer_maps:
            self._cancel((group_id, member_id), timers)

    # -- describing -----------------------------------------------------------------------------

    def other_type(self, group_id: str) -> str | None:
        """The type of a group of another kind holding ``group_id``, else None."""
        raise NotImplementedError

    def describe(self, group_id: str):
        """(error, message, group or None) for <Type>GroupDescribe."""
        if self.gc.loading:
            return E.COORDINATOR_LOAD_IN_PROGRESS, None, None
        if not group_id:
            return E.INVALID_GROUP_ID, None, None
        group = self.groups.get(group_id)
        if group is None:
            if self.other_type(group_id) is not None:
                return E.GROUP_ID_NOT_FOUND, f"Group {group_id} is not a {self.GROUP_TYPE} group.", None
            return E.GROUP_ID_NOT_FOUND, f"Group {group_id} not found.", None
        return E.NONE, None, group
