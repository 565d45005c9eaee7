"""The share groups' ``simple`` assignor, with Kafka 4.1+'s rules (KIP-932).

Balance first, then stickiness. Each partition wants ``ceil(members / partitions)`` members (its
*sharing*: 1 while there are at least as many partitions as members, so each partition goes to one member;
more once members outnumber partitions, so every partition keeps being read), and each member wants its
share of ``sharing * partitions`` assignments, spread so that two members differ by one at most. From the
current assignment a member keeps what it may still read, minus what makes it overfilled or a partition
over-shared; what is left goes round the members still short of their share.

When every member subscribes to the same topics their partitions form one pool; otherwise each topic is
balanced on its own over the members subscribed to it (a member of two topics gets its share of each).
Pure functions over plain data: {member id: {topic id: set of partitions}}.
"""

from __future__ import annotations

from collections.abc import Sequence

TopicPartition = tuple[bytes, int]
Assignment = dict[bytes, set[int]]


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def _balance(partitions: Sequence[TopicPartition], members: Sequence[str],
             current: dict[str, set[TopicPartition]]) -> dict[str, set[TopicPartition]]:
    """One pool: ``partitions`` over ``members`` (in a fixed order), keeping what ``current`` allows."""
    out: dict[str, set[TopicPartition]] = {m: set() for m in members}
    if not partitions or not members:
        return out
    sharing = _ceil_div(len(members), len(partitions))
    total = sharing * len(partitions)
    # member i wants ceil(total*(i+1)/M) - ceil(total*i/M): the counts differ by one at most, sum to total
    want = {m: _ceil_div(total * (i + 1), len(members)) - _ceil_div(total * i, len(members))
            for i, m in enumerate(members)}
    pool = set(partitions)
    holders: dict[TopicPartition, list[str]] = {tp: [] for tp in partitions}
    for m in members:  # keep what is still assignable, up to the member's share
        for tp in sorted(current.get(m, set()) & pool):
            if len(out[m]) < want[m]:
                out[m].add(tp)
                holders[tp].append(m)
    for tp, held in holders.items():  # a partition shared more than wanted gives up its last holders
        while len(held) > sharing:
            out[held.pop()].discard(tp)
    short = [m for m in members if len(out[m]) < want[m]]
    turn = 0
    for tp in partitions:
        missing = sharing - len(holders[tp])
        tried = 0
        while missing > 0 and short and tried < len(short):
            m = short[turn % len(short)]
            if tp in out[m]:
                turn += 1
                tried += 1
                continue
            out[m].add(tp)
            holders[tp].append(m)
            missing -= 1
            tried = 0
            if len(out[m]) >= want[m]:
                short.remove(m)
            else:
                turn += 1
    return out


def simple_assign(subscriptions: dict[str, list[bytes]], partition_counts: dict[bytes, int],
                  current: dict[str, Assignment]) -> dict[str, Assignment]:
    """The target assignment of every member.

    ``subscriptions``: member id -> the ids of its subscribed topics that exist, members in a fixed order
    (join order); ``partition_counts``: topic id -> partitions; ``current``: each member's assignment now.
    """
    flat = {m: {(t, p) for t, ps in a.items() for p in ps} for m, a in current.items()}
    result: dict[str, set[TopicPartition]] = {m: set() for m in subscriptions}
    topic_sets = {frozenset(ts) for ts in subscriptions.values()}
    if len(topic_sets) == 1:
        topics = sorted(next(iter(topic_sets)))
        pool = [(t, p) for t in topics for p in range(partition_counts.get(t, 0))]
        result.update(_balance(pool, list(subscriptions), flat))
    else:
        for t in sorted({t for ts in subscriptions.values() for t in ts}):
            members = [m for m, ts in subscriptions.items() if t in ts]
            pool = [(t, p) for p in range(partition_counts.get(t, 0))]
            mine = {m: {tp for tp in flat.get(m, ()) if tp[0] == t} for m in members}
            for m, tps in _balance(pool, members, mine).items():
                result[m] |= tps
    out: dict[str, Assignment] = {}
    for m, tps in result.items():
        a: Assignment = {}
        for t, p in tps:
            a.setdefault(t, set()).add(p)
        out[m] = a
    return out
