"""One consumer (KIP-848) group: members, epochs, the target assignment and reconciliation rules.

Plain data plus the rules that look only at the group: a member's next assignment towards the target
(Kafka's CurrentAssignmentBuilder: revoke before assign, partitions pending revocation, partitions
still owned by another member are "unreleased"), the group state (Empty, Assigning, Reconciling,
Stable) and the partition epochs (which member epoch owns each partition).
``ConsumerGroupCoordinator`` is the only code that mutates a ``ConsumerGroup``. Not thread-safe: used
on the broker's event loop only.

Assignments are {topic id (16 bytes): set of partitions}, as Kafka keeps them.
"""

from __future__ import annotations

import copy
from enum import IntEnum

from minibroker.coordinator.group_records import ClassicMemberMetadata, OffsetCommitValue
from minibroker.coordinator.modern_group import TopicAssignment
from minibroker.coordinator.modern_group import frozen as _frozen

STATIC_LEAVE_EPOCH = -2


class MemberState(IntEnum):
    """Kafka's member states; the value is what CurrentMemberAssignment records store."""

    STABLE = 0
    UNREVOKED_PARTITIONS = 1
    UNRELEASED_PARTITIONS = 2
    UNKNOWN = 127


class ConsumerMember:
    """A member of a consumer group; plain attributes, mutated only by the coordinator."""

    def __init__(self, member_id: str):
        self.member_id = member_id
        self.instance_id: str | None = None
        self.rack_id: str | None = None
        self.client_id = ""
        self.client_host = ""
        self.subscribed_topic_names: list[str] = []
        self.subscribed_topic_regex: str | None = None
        self.rebalance_timeout_ms = -1
        self.server_assignor: str | None = None
        self.member_epoch = 0
        self.previous_member_epoch = 0
        self.state = MemberState.STABLE
        self.assigned: TopicAssignment = {}
        self.pending_revocation: TopicAssignment = {}
        # a member speaking the classic protocol inside this group (online migration), else None
        self.classic: ClassicMemberMetadata | None = None

    def __repr__(self) -> str:
        return f"ConsumerMember({self.member_id!r}, epoch={self.member_epoch}, {self.state.name})"

    def metadata_key(self) -> tuple:
        """What a MemberMetadata record holds: a change is written."""
        return (self.instance_id, self.rack_id, self.client_id, self.client_host,
                tuple(self.subscribed_topic_names), self.subscribed_topic_regex, self.rebalance_timeout_ms,
                self.server_assignor, self.classic)

    def assignment_key(self) -> tuple:
        """What a CurrentMemberAssignment record holds."""
        return (self.member_epoch, self.previous_member_epoch, int(self.state), _frozen(self.assigned),
                _frozen(self.pending_revocation))

    def is_reconciled_to(self, epoch: int) -> bool:
        return self.state is MemberState.STABLE and self.member_epoch == epoch


class ConsumerGroup:
    """A consumer group; plain attributes, mutated only by ``ConsumerGroupCoordinator``."""

    def __init__(self, group_id: str):
        self.group_id = group_id
        self.group_epoch = 0
        self.assignment_epoch = 0
        self.members: dict[str, ConsumerMember] = {}
        self.static_members: dict[str, str] = {}  # instance id -> member id
        self.target: dict[str, TopicAssignment] = {}  # member id -> target assignment
        # topic name -> (topic id, partition count) of the subscribed topics that exist
        self.subscription_metadata: dict[str, tuple[bytes, int]] = {}
        self.partition_epochs: dict[tuple[bytes, int], int] = {}
        self.offsets: dict[tuple[str, int], OffsetCommitValue] = {}
        # the subscription regexes resolved for this group: a member's regex counts from the heartbeat
        # after the one that brought it (Kafka resolves a new regex asynchronously)
        self.resolved_regexes: set[str] = set()

    def __repr__(self) -> str:
        return f"ConsumerGroup({self.group_id!r}, {self.state}, epoch {self.group_epoch})"

    @property
    def state(self) -> str:
        """Kafka's ConsumerGroupState name."""
        if not self.members:
            return "Empty"
        if self.group_epoch > self.assignment_epoch:
            return "Assigning"
        if any(not m.is_reconciled_to(self.assignment_epoch) for m in self.members.values()):
            return "Reconciling"
        return "Stable"

    def snapshot(self) -> ConsumerGroup:
        """A copy of everything but the offsets, to restore when a write fails."""
        offsets, self.offsets = self.offsets, {}
        try:
            return copy.deepcopy(self)
        finally:
            self.offsets = offsets

    def restore(self, snap: ConsumerGroup) -> None:
        offsets = self.offsets
        self.__dict__.update(snap.__dict__)
        self.offsets = offsets

    def static_member(self, instance_id: str | None) -> ConsumerMember | None:
        member_id = self.static_members.get(instance_id) if instance_id is not None else None
        return self.members.get(member_id) if member_id is not None else None

    def current_partition_epoch(self, topic_id: bytes, partition: int) -> int:
        return self.partition_epochs.get((topic_id, partition), -1)

    def _drop_epochs(self, member: ConsumerMember) -> None:
        for assignment in (member.assigned, member.pending_revocation):
            for t, ps in assignment.items():
                for p in ps:
                    self.partition_epochs.pop((t, p), None)

    def _add_epochs(self, member: ConsumerMember) -> None:
        for assignment in (member.assigned, member.pending_revocation):
            for t, ps in assignment.items():
                for p in ps:
                    self.partition_epochs[(t, p)] = member.member_epoch

    def put_member(self, member: ConsumerMember, old: ConsumerMember | None = None) -> None:
        """Add or update a member (``old`` is its previous state, whose partitions it no longer owns)."""
        if old is not None:
            self._drop_epochs(old)
            if old.instance_id is not None and self.static_members.get(old.instance_id) == old.member_id:
                del self.static_members[old.instance_id]
        self.members[member.member_id] = member
        if member.instance_id is not None:
            self.static_members[member.instance_id] = member.member_id
        self._add_epochs(member)

    def remove_member(self, member_id: str) -> ConsumerMember | None:
        member = self.members.pop(member_id, None)
        if member is None:
            return None
        self._drop_epochs(member)
        if member.instance_id is not None and self.static_members.get(member.instance_id) == member_id:
            del self.static_members[member.instance_id]
        self.target.pop(member_id, None)
        return member

    def preferred_assignor(self, default: str) -> str:
        """The server assignor most members ask for (Kafka's rule), else ``default``."""
        votes: dict[str, int] = {}
        for m in self.members.values():
            if m.server_assignor:
                votes[m.server_assignor] = votes.get(m.server_assignor, 0) + 1
        if not votes:
            return default
        best = max(votes.values())
        return min(name for name, n in votes.items() if n == best)


def owns_any(owned: list[tuple[bytes, list[int]]] | None, assignment: TopicAssignment) -> bool:
    """Whether the partitions a member reports owning include any of ``assignment`` (None: unknown, so
    assumed yes, as Kafka does)."""
    if owned is None:
        return True
    return any(p in assignment.get(t, ()) for t, ps in owned for p in ps)


def is_subset(owned: list[tuple[bytes, list[int]]] | None, assignment: TopicAssignment) -> bool:
    if owned is None:
        return False
    return all(p in assignment.get(t, ()) for t, ps in owned for p in ps)


def reconcile(member: ConsumerMember, target_epoch: int, target: TopicAssignment, partition_epoch,
              owned: list[tuple[bytes, list[int]]] | None) -> ConsumerMember:
    """The member's next state towards ``target`` (Kafka's CurrentAssignmentBuilder); returns a new
    member object, or ``member`` itself when nothing changes."""
    if member.state is MemberState.STABLE:
        if member.member_epoch == target_epoch:
            return member
        return _next_assignment(member, member.member_epoch, target_epoch, target, partition_epoch, owned)
    if member.state is MemberState.UNREVOKED_PARTITIONS:
        if owns_any(owned, member.pending_revocation):
            return member
        return _next_assignment(member, member.member_epoch + 1, target_epoch, target, partition_epoch, owned)
    return _next_assignment(member, member.member_epoch, target_epoch, target, partition_epoch, owned)


def _next_assignment(member, epoch, target_epoch, target, partition_epoch, owned) -> ConsumerMember:
    unreleased = False
    assigned: TopicAssignment = {}
    revoking: TopicAssignment = {}
    pending: TopicAssignment = {}
    for t in set(target) | set(member.assigned):
        want = target.get(t, set())
        have = member.assigned.get(t, set())
        keep = have & want
        if keep:
            assigned[t] = set(keep)
        if have - keep:
            revoking[t] = have - keep
        to_add = {p for p in want - keep if partition_epoch(t, p) == -1}
        if len(to_add) < len(want - keep):
            unreleased = True
        if to_add:
            pending[t] = to_add
    new = copy.copy(member)
    new.previous_member_epoch = member.member_epoch
    if revoking and owns_any(owned, revoking):
        new.state = MemberState.UNREVOKED_PARTITIONS
        new.member_epoch = epoch
        new.assigned, new.pending_revocation = assigned, revoking
        return new
    for t, ps in pending.items():
        assigned.setdefault(t, set()).update(ps)
    new.state = MemberState.UNRELEASED_PARTITIONS if unreleased else MemberState.STABLE
    new.member_epoch = target_epoch
    new.assigned, new.pending_revocation = assigned, {}
    return new
