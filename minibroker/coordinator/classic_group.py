"""One classic-protocol group: its state, members, generation and committed offsets.

Plain data with the rules that only look at the group itself (legal transitions, protocol
selection, who has rejoined); timers, waiting requests and writes to ``__consumer_offsets``
belong to ``GroupCoordinator``, the only code that mutates a ``ClassicGroup``. Not thread-safe:
used on the broker's event loop only.
"""

from __future__ import annotations

import asyncio
import time
from enum import Enum

from minibroker.coordinator.group_records import OffsetCommitValue


class GroupState(Enum):
    """Kafka's classic group states; ``value`` is the name DescribeGroups and ListGroups report."""

    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


# Kafka's valid previous states of each state.
_VALID_PREVIOUS = {
    GroupState.PREPARING_REBALANCE: {GroupState.STABLE, GroupState.COMPLETING_REBALANCE, GroupState.EMPTY},
    GroupState.COMPLETING_REBALANCE: {GroupState.PREPARING_REBALANCE},
    GroupState.STABLE: {GroupState.COMPLETING_REBALANCE},
    GroupState.EMPTY: {GroupState.PREPARING_REBALANCE},
    GroupState.DEAD: {GroupState.STABLE, GroupState.PREPARING_REBALANCE, GroupState.COMPLETING_REBALANCE,
                      GroupState.EMPTY, GroupState.DEAD},
}


def now_ms() -> int:
    return int(time.time() * 1000)


class Member:
    """A member of a group; ``protocols`` is [(name, metadata)] in the member's order of preference."""

    __slots__ = ("member_id", "group_instance_id", "client_id", "client_host", "rebalance_timeout_ms",
                 "session_timeout_ms", "protocol_type", "protocols", "assignment", "join_future",
                 "sync_future", "is_new", "heartbeat_timer")

    def __init__(self, member_id: str, group_instance_id: str | None, client_id: str, client_host: str,
                 rebalance_timeout_ms: int, session_timeout_ms: int, protocol_type: str,
                 protocols: list[tuple[str, bytes]], assignment: bytes = b"", is_new: bool = False):
        self.member_id = member_id
        self.group_instance_id = group_instance_id
        self.client_id = client_id
        self.client_host = client_host
        self.rebalance_timeout_ms = rebalance_timeout_ms
        self.session_timeout_ms = session_timeout_ms
        self.protocol_type = protocol_type
        self.protocols = protocols
        self.assignment = assignment
        self.join_future: asyncio.Future | None = None  # a JoinGroup waiting for the rebalance to complete
        self.sync_future: asyncio.Future | None = None  # a SyncGroup waiting for the leader's assignment
        self.is_new = is_new  # joined during the current rebalance (KIP-394)
        self.heartbeat_timer: asyncio.TimerHandle | None = None

    def __repr__(self) -> str:
        return f"Member({self.member_id!r}, instance={self.group_instance_id!r}, client={self.client_id!r})"

    @property
    def is_awaiting_join(self) -> bool:
        return self.join_future is not None

    @property
    def is_awaiting_sync(self) -> bool:
        return self.sync_future is not None

    @property
    def is_static(self) -> bool:
        return self.group_instance_id is not None

    def protocol_names(self) -> list[str]:
        return [name for name, _ in self.protocols]

    def metadata(self, protocol: str | None) -> bytes:
        for name, meta in self.protocols:
            if name == protocol:
                return meta
        return b""

    def matches(self, protocols: list[tuple[str, bytes]]) -> bool:
        return [(n, bytes(m)) for n, m in protocols] == [(n, bytes(m)) for n, m in self.protocols]


class ClassicGroup:
    """A classic group; plain attributes, mutated only by ``GroupCoordinator``."""

    def __init__(self, group_id: str):
        self.group_id = group_id
        self.state = GroupState.EMPTY
        self.state_timestamp_ms = now_ms()
        self.protocol_type: str | None = None
        self.protocol_name: str | None = None
        self.generation_id = 0
        self.leader_id: str | None = None
        self.members: dict[str, Member] = {}
        self.static_members: dict[str, str] = {}  # group.instance.id -> member id
        self.pending_members: set[str] = set()  # ids handed out with MEMBER_ID_REQUIRED
        self.pending_sync: set[str] = set()  # members yet to SyncGroup this generation
        self.offsets: dict[tuple[str, int], OffsetCommitValue] = {}
        self.new_member_added = False
        self.subscribed_topics: set[str] | None = None  # None: unknown (not the consumer protocol)

    def __repr__(self) -> str:
        return f"ClassicGroup({self.group_id!r}, {self.state.value}, generation {self.generation_id})"

    # -- state ----------------------------------------------------------------------------------

    def is_(self, state: GroupState) -> bool:
        return self.state is state

    def transition_to(self, state: GroupState) -> None:
        if self.state not in _VALID_PREVIOUS[state]:
            raise RuntimeError(f"group {self.group_id}: illegal transition "
                               f"{self.state.value} -> {state.value}")
        self.state = state
        self.state_timestamp_ms = now_ms()

    def can_rebalance(self) -> bool:
        return self.state in _VALID_PREVIOUS[GroupState.PREPARING_REBALANCE]

    # -- members --------------------------------------------------------------------------------

    def has(self, member_id: str) -> bool:
        return member_id in self.members

    def is_pending(self, member_id: str) -> bool:
        return member_id in self.pending_members

    def is_leader(self, member_id: str) -> bool:
        return self.leader_id == member_id

    def add(self, member: Member) -> None:
        if not self.members:
            self.protocol_type = member.protocol_type
        self.members[member.member_id] = member
        if member.group_instance_id is not None:
            self.static_members[member.group_instance_id] = member.member_id
        if self.leader_id is None:
            self.leader_id = member.member_id
        self.pending_members.discard(member.member_id)

    def remove(self, member_id: str) -> Member | None:
        member = self.members.pop(member_id, None)
        if member is None:
            return None
        instance_id = member.group_instance_id
        if instance_id is not None and self.static_members.get(instance_id) == member_id:
            del self.static_members[instance_id]
        self.pending_sync.discard(member_id)
        if self.leader_id == member_id:
            # Kafka prefers a member already waiting in JoinGroup as the next leader.
            waiting = [m.member_id for m in self.members.values() if m.is_awaiting_join]
            self.leader_id = waiting[0] if waiting else next(iter(self.members), None)
        return member

    def static_member_id(self, instance_id: str | None) -> str | None:
        return None if instance_id is None else self.static_members.get(instance_id)

    def is_fenced(self, member_id: str, instance_id: str | None) -> bool:
        """A static member whose id is not the one the group knows for its instance id."""
        if instance_id is None:
            return False
        known = self.static_members.get(instance_id)
        return known is not None and known != member_id

    def awaiting_join_count(self) -> int:
        return sum(1 for m in self.members.values() if m.is_awaiting_join)

    def has_all_members_joined(self) -> bool:
        return len(self.members) == self.awaiting_join_count() and not self.pending_members

    def not_yet_rejoined(self) -> list[Member]:
        return [m for m in self.members.values() if not m.is_awaiting_join]

    def max_rebalance_timeout_ms(self) -> int:
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    # -- protocols ------------------------------------------------------------------------------

    def candidate_protocols(self) -> set[str]:
        """Protocols every member supports."""
        members = list(self.members.values())
        if not members:
            return set()
        out = set(members[0].protocol_names())
        for m in members[1:]:
            out &= set(m.protocol_names())
        return out

    def supports_protocols(self, protocol_type: str, protocols: list[str]) -> bool:
        if not self.members:
            return bool(protocol_type) and bool(protocols)
        return protocol_type == self.protocol_type and bool(self.candidate_protocols() & set(protocols))

    def select_protocol(self) -> str:
        """Each member votes for its most preferred candidate; most votes wins (ties: first voter's)."""
        candidates = self.candidate_protocols()
        if not candidates:
            raise RuntimeError(f"group {self.group_id}: no protocol common to all members")
        votes: dict[str, int] = {}
        for m in self.members.values():
            choice = next(n for n in m.protocol_names() if n in candidates)
            votes[choice] = votes.get(choice, 0) + 1
        best = max(votes.values())
        return next(name for name in votes if votes[name] == best)

    # -- offsets --------------------------------------------------------------------------------

    def is_subscribed_to(self, topic: str) -> bool:
        return True if self.subscribed_topics is None else topic in self.subscribed_topics
