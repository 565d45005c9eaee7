"""The share groups' ``simple`` assignor, as Kafka 4.1+'s (KIP-932; ``SimpleHomogeneousAssignmentBuilder``
and ``SimpleHeterogeneousAssignmentBuilder`` of apache/kafka's group coordinator).

Balance first, then stickiness. Each partition wants ``ceil(members / partitions)`` members (its
*sharing*: 1 while there are at least as many partitions as members, so each partition goes to one member;
more once members outnumber partitions, so every partition keeps being read), and member ``i`` (in the
group's member order) wants ``ceil(x * (i + 1)) - ceil(x * i)`` assignments, ``x`` being ``sharing *
partitions / members``: the counts differ by one at most, and the earlier members take the larger ones.
From the current assignment a member keeps what it may still read, minus what makes it overfilled or a
partition over-shared; what is left is offered partition by partition to the members still short.

When every member subscribes to the same topics their partitions form one pool; otherwise each topic is
balanced on its own over the members subscribed to it (a member of two topics gets its share of each).

Tie-breaks are Kafka's, which are those of Java's hash maps and sets (minibroker/coordinator/
java_hash_order.py): the member order is the iteration order of the ``HashMap`` of member ids the
coordinator builds the group spec with; a full member gives up the partitions its hash set of them yields
first; short members are offered partitions by ascending member number. One approximation: two member ids
in one bucket of that map are taken in join order (Kafka takes them in the order its own member table
yields them). Pure functions over plain data: {member id: {topic id: set of partitions}}.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from minibroker.coordinator.java_hash_order import (
    JavaHashMap,
    integer_hash,
    java_hash_set,
    string_hash,
    topic_partition_hash,
    uuid_hash,
)

TopicPartition = tuple[bytes, int]
Assignment = dict[bytes, set[int]]


def _desired_counts(members: int, partitions: int) -> tuple[int, list[int]]:
    """(sharing, the assignment count each of ``members`` wants), in Kafka's double arithmetic."""
    if partitions == 0:
        return 0, [0] * members
    sharing = (members + partitions - 1) // partitions
    precise = sharing * partitions / members
    return sharing, [math.ceil(precise * (i + 1)) - math.ceil(precise * i) for i in range(members)]


def _member_order(member_ids: Sequence[str]) -> list[str]:
    """The members as Kafka's group spec yields them: a default ``HashMap`` keyed by member id."""
    spec = JavaHashMap(string_hash)
    for member_id in member_ids:
        spec.put(member_id)
    return spec.keys()


def _iteration_of(assignment: Assignment) -> list[tuple[bytes, list[int]]]:
    """A member's current assignment as Java walks its ``Map<Uuid, Set<Integer>>``."""
    topics = java_hash_set(uuid_hash, assignment)
    return [(t, java_hash_set(integer_hash, sorted(assignment[t])).keys()) for t in topics]


class _Targets:
    """The new assignments, copied from the old one on a member's first change (Kafka's
    ``newGroupAssignment`` over ``oldGroupAssignment``)."""

    def __init__(self, old: list[Assignment]):
        self.old = old
        self.new: dict[int, Assignment] = {}

    def of(self, member: int) -> Assignment:
        if member not in self.new:
            self.new[member] = {t: set(ps) for t, ps in self.old[member].items()}
        return self.new[member]

    def result(self, member: int) -> Assignment:
        return {t: set(ps) for t, ps in self.new.get(member, self.old[member]).items() if ps}


def _offer_to_short_members(by_partition: JavaHashMap, by_member: JavaHashMap, short: JavaHashMap,
                            sharing: int, desired: list[int], give, key_hash) -> None:
    """Kafka's ``assignRemainingPartitions``: one pass over the partitions, each short of members offered
    to the short members in turn (a member leaves the turn once it has its count). ``give(member, key)``
    records an assignment; ``key_hash`` hashes the keys of ``by_partition``."""
    if not len(short):
        return
    turn, at, gave_this_round = short.keys(), 0, False
    for key, holders in by_partition.items():
        if len(holders) < sharing:
            to_make = sharing - len(holders)
            while to_make > 0:
                while at < len(turn) and turn[at] not in short:
                    at += 1
                if at >= len(turn):
                    if not gave_this_round or not len(short):
                        break
                    turn, at, gave_this_round = short.keys(), 0, False
                member = turn[at]
                at += 1
                if member not in holders:  # Kafka does not add the member to holders here either
                    give(member, key)
                    by_member.setdefault(member, lambda: java_hash_set(key_hash)).add(key)
                    to_make -= 1
                    gave_this_round = True
                    if len(by_member[member]) >= desired[member]:
                        short.remove(member)
        if not len(short):
            break


def _shed_over_shared(by_partition: JavaHashMap, by_member: JavaHashMap, sharing: int, out: _Targets,
                      topic_partition, short: JavaHashMap | None) -> None:
    """Kafka's ``revokeOversharedPartitions``: a partition held by more members than its sharing drops
    the holders its set yields first. ``topic_partition(key)`` is the (topic, partition) of a key of
    ``by_partition``; ``short`` (homogeneous builder only) takes each member that lost one."""
    for key, holders in by_partition.items():
        count = len(holders)
        if count <= sharing:
            continue
        t, p = topic_partition(key)
        for m in holders.keys():
            partitions = out.of(m).get(t)
            if partitions is not None and p in partitions:
                partitions.discard(p)
                count -= 1
                holders.remove(m)
                by_member[m].remove(key)
                if short is not None:
                    short.add(m)
            if count <= sharing:
                break


def _homogeneous(members: list[str], topics: set[bytes], counts: dict[bytes, int],
                 current: list[Assignment]) -> list[Assignment]:
    targets = [(t, p) for t in java_hash_set(uuid_hash, sorted(topics)) for p in range(counts[t])]
    sharing, desired = _desired_counts(len(members), len(targets))
    out = _Targets(current)
    by_partition = JavaHashMap.expected(topic_partition_hash, len(targets))
    by_member = JavaHashMap.expected(integer_hash, len(members))
    short = JavaHashMap.expected(integer_hash, len(members))
    over = JavaHashMap.expected(integer_hash, len(members))

    for m in range(len(members)):  # keep what is still subscribed; count who is short or over
        held = 0
        for t, partitions in _iteration_of(current[m]):
            if t not in topics:
                out.of(m).pop(t, None)
                continue
            for p in partitions:
                held += 1
                by_partition.setdefault((t, p), lambda: java_hash_set(integer_hash)).add(m)
                by_member.setdefault(m, lambda: java_hash_set(topic_partition_hash)).add((t, p))
        if held < desired[m]:
            short.add(m)
        elif held > desired[m]:
            over.add(m)

    for m in over:  # an overfilled member gives up what its set yields first
        mine = by_member[m]
        for t, p in mine.keys():
            if len(mine) <= desired[m]:
                break
            out.of(m)[t].discard(p)
            by_partition[(t, p)].remove(m)
            mine.remove((t, p))

    _shed_over_shared(by_partition, by_member, sharing, out, lambda key: key, short)

    for key in targets:
        by_partition.setdefault(key, lambda: java_hash_set(integer_hash))

    def give(m: int, key: TopicPartition) -> None:
        out.of(m).setdefault(key[0], set()).add(key[1])

    _offer_to_short_members(by_partition, by_member, short, sharing, desired, give, topic_partition_hash)
    return [out.result(m) for m in range(len(members))]


def _heterogeneous(members: list[str], subscribed: list[set[bytes]], counts: dict[bytes, int],
                   current: list[Assignment]) -> list[Assignment]:
    out = _Targets(current)
    for t in {t for ts in subscribed for t in ts}:  # each topic on its own: the order does not matter
        readers = [m for m in range(len(members)) if t in subscribed[m]]
        sharing, wanted = _desired_counts(len(readers), counts[t])
        desired = [0] * len(members)
        for k, m in enumerate(readers):
            desired[m] = wanted[k]
        by_partition = JavaHashMap.expected(integer_hash, counts[t])
        by_member = JavaHashMap.expected(integer_hash, len(readers))
        for m in range(len(members)):
            for p in java_hash_set(integer_hash, sorted(current[m].get(t, ()))):
                by_partition.setdefault(p, lambda: java_hash_set(integer_hash)).add(m)
                by_member.setdefault(m, lambda: java_hash_set(integer_hash)).add(p)

        for m, mine in by_member.items():  # an overfilled member gives up what its set yields first
            for p in mine.keys():
                if len(mine) <= desired[m]:
                    break
                by_partition[p].remove(m)
                mine.remove(p)
                out.of(m)[t].discard(p)

        _shed_over_shared(by_partition, by_member, sharing, out, lambda p, t=t: (t, p), None)

        for p in range(counts[t]):
            if p not in by_partition:
                by_partition.put(p, JavaHashMap.expected(integer_hash, len(readers)))
        short = JavaHashMap.expected(integer_hash, len(members))
        for m in readers:
            if len(by_member.get(m, ())) < desired[m]:
                short.add(m)

        def give(m: int, p: int, t: bytes = t) -> None:
            out.of(m).setdefault(t, set()).add(p)

        _offer_to_short_members(by_partition, by_member, short, sharing, desired, give, integer_hash)
    return [out.result(m) for m in range(len(members))]


def simple_assign(subscriptions: dict[str, list[bytes]], partition_counts: dict[bytes, int],
                  current: dict[str, Assignment]) -> dict[str, Assignment]:
    """The target assignment of every member.

    ``subscriptions``: member id -> the ids of its subscribed topics that exist, members in join order;
    ``partition_counts``: topic id -> partitions; ``current``: each member's assignment now.
    """
    if not subscriptions:
        return {}
    members = _member_order(list(subscriptions))
    # Kafka never sees a partition beyond a topic's count (topics do not shrink); minibroker drops any
    # such leftover, and every topic no member reads any longer (which Kafka's per-topic heterogeneous
    # builders never visit), before assigning
    now = [{t: {p for p in ps if p < partition_counts[t]}
            for t, ps in current.get(m, {}).items() if t in partition_counts} for m in members]
    topic_sets = [set(subscriptions[m]) for m in members]
    if all(ts == topic_sets[0] for ts in topic_sets):
        if not topic_sets[0]:
            return {m: {} for m in members}
        result = _homogeneous(members, topic_sets[0], partition_counts, now)
    else:
        result = _heterogeneous(members, topic_sets, partition_counts, now)
    return dict(zip(members, result, strict=True))
