"""One share (KIP-932) group: its members, epochs and assignments, as plain data.

A share group has no revocation step: every member may read every partition it is assigned at once,
because records, not partitions, are what members hold (each record is acquired by one member for a
time; see share_partition.py). So a member moves straight to its target assignment at its next
heartbeat, taking the target's epoch. The group's state is Empty (no members) or Stable, as Kafka's
ShareGroup reports it; Dead is what a deleted group answers.

``ShareGroupCoordinator`` is the only code that mutates a ``ShareGroup``. Not thread-safe: used on the
broker's event loop only. Assignments are {topic id (16 bytes): set of partitions}, as Kafka keeps them.
"""

from __future__ import annotations

import copy

from minibroker.coordinator.modern_group import LEAVE_EPOCH, TopicAssignment, frozen

__all__ = ["LEAVE_EPOCH", "STABLE", "ShareGroup", "ShareMember", "TopicAssignment", "frozen"]

STABLE = 0  # the member state ShareGroupCurrentMemberAssignment records hold (Kafka's MemberState)
SIMPLE_ASSIGNOR = "simple"
PROTOCOL_TYPE = "share"
GROUP_TYPE = "share"


class ShareMember:
    """A member of a share group; plain attributes, mutated only by the coordinator."""

    def __init__(self, member_id: str):
        self.member_id = member_id
        self.rack_id: str | None = None
        self.client_id = ""
        self.client_host = ""
        self.subscribed_topic_names: list[str] = []
        self.member_epoch = 0
        self.previous_member_epoch = 0
        self.state = STABLE
        self.assigned: TopicAssignment = {}

    def __repr__(self) -> str:
        return f"ShareMember({self.member_id!r}, epoch={self.member_epoch})"

    def metadata_key(self) -> tuple:
        """What a ShareGroupMemberMetadata record holds: a change is written."""
        return self.rack_id, self.client_id, self.client_host, tuple(self.subscribed_topic_names)

    def assignment_key(self) -> tuple:
        """What a ShareGroupCurrentMemberAssignment record holds."""
        return self.member_epoch, self.previous_member_epoch, self.state, frozen(self.assigned)


class ShareGroup:
    """A share group; plain attributes, mutated only by ``ShareGroupCoordinator``."""

    def __init__(self, group_id: str):
        self.group_id = group_id
        self.group_epoch = 0
        self.assignment_epoch = 0
        self.metadata_hash = 0  # of the subscribed topics that exist: ids and partition counts
        self.members: dict[str, ShareMember] = {}
        self.target: dict[str, TopicAssignment] = {}  # member id -> target assignment
        # topic id -> (name, partitions) whose share state is initialized (ShareGroupStatePartitionMetadata)
        self.initialized: dict[bytes, tuple[str, set[int]]] = {}

    def __repr__(self) -> str:
        return f"ShareGroup({self.group_id!r}, {self.state}, epoch {self.group_epoch})"

    @property
    def state(self) -> str:
        """Kafka's ShareGroupState name."""
        return "Stable" if self.members else "Empty"

    def subscribed_topic_names(self) -> set[str]:
        out: set[str] = set()
        for m in self.members.values():
            out.update(m.subscribed_topic_names)
        return out

    def snapshot(self) -> ShareGroup:
        """A copy to restore when a write fails."""
        return copy.deepcopy(self)

    def restore(self, snap: ShareGroup) -> None:
        self.__dict__.update(snap.__dict__)
