"""The server-side assignors of consumer (KIP-848) groups: ``uniform`` and ``range``.

An assignor maps a group's members to partitions: ``assign(members, partition_counts, current)``
where ``members`` is {member id: subscribed topic names}, ``partition_counts`` {topic: partitions}
of the subscribed topics that exist, and ``current`` the previous target assignment {member id:
{topic: set of partitions}}. It returns the new target assignment in the same shape, with every
member present (possibly empty). Pure functions: no I/O, no state.

- ``uniform`` (Kafka's UniformAssignor, the default): every partition of a subscribed topic goes to
  one member subscribed to it, the members' counts differ by at most one where their subscriptions
  allow it, and a partition stays with its previous owner whenever balance permits (sticky).
- ``range`` (Kafka's RangeAssignor): per topic, the members subscribed to it in member id order get
  consecutive ranges; the first ``partitions % members`` get one more. Co-partitioned topics land
  on the same member.

Racks (KIP-848 rack-aware assignment) are accepted by the group and not used here.
"""

from __future__ import annotations

from collections.abc import Mapping

Assignment = dict[str, dict[str, set[int]]]

UNIFORM = "uniform"
RANGE = "range"
# Kafka's class names for the same assignors, accepted in group.consumer.assignors
CLASS_NAMES = {
    "org.apache.kafka.coordinator.group.assignor.UniformAssignor": UNIFORM,
    "org.apache.kafka.coordinator.group.assignor.RangeAssignor": RANGE,
}


def assignor_name(configured: str) -> str | None:
    """The short name of a ``group.consumer.assignors`` entry; None when no such assignor exists."""
    name = CLASS_NAMES.get(configured.strip(), configured.strip())
    return name if name in ASSIGNORS else None


def _empty(members: Mapping[str, object]) -> Assignment:
    return {m: {} for m in members}


def range_assign(members: Mapping[str, frozenset[str] | set[str]], partition_counts: Mapping[str, int],
                 current: Mapping[str, Mapping[str, set[int]]] | None = None) -> Assignment:
    out = _empty(members)
    for topic in sorted(partition_counts):
        subscribers = sorted(m for m, topics in members.items() if topic in topics)
        if not subscribers:
            continue
        count = partition_counts[topic]
        per, extra = divmod(count, len(subscribers))
        start = 0
        for i, member in enumerate(subscribers):
            n = per + (1 if i < extra else 0)
            if n:
                out[member][topic] = set(range(start, start + n))
            start += n
    return out


def uniform_assign(members: Mapping[str, frozenset[str] | set[str]], partition_counts: Mapping[str, int],
                   current: Mapping[str, Mapping[str, set[int]]] | None = None) -> Assignment:
    current = current or {}
    out = _empty(members)
    if not members:
        return out
    all_partitions = [(t, p) for t in sorted(partition_counts) for p in range(partition_counts[t])]
    eligible = {tp: [m for m in members if tp[0] in members[m]] for tp in all_partitions}
    eligible = {tp: ms for tp, ms in eligible.items() if ms}
    if not eligible:
        return out
    # Quotas when every member could take every partition: the balanced shares, with the larger
    # shares kept by the members that already hold the most (fewer moves).
    total = len(eligible)
    per, extra = divmod(total, len(members))
    held = {m: sum(1 for t, ps in current.get(m, {}).items() for p in ps if (t, p) in eligible
                   and m in eligible[(t, p)]) for m in members}
    order = sorted(members, key=lambda m: (-held[m], m))
    quota = {m: per + (1 if i < extra else 0) for i, m in enumerate(order)}
    counts = dict.fromkeys(members, 0)
    owner: dict[tuple[str, int], str] = {}
    # 1. stickiness: keep previous owners up to their quota
    for m in sorted(members):
        for t in sorted(current.get(m, {})):
            for p in sorted(current[m][t]):
                tp = (t, p)
                if tp in eligible and tp not in owner and m in eligible[tp] and counts[m] < quota[m]:
                    owner[tp] = m
                    counts[m] += 1
    # 2. the rest to the least loaded eligible member (quota first, then anyone eligible)
    for tp in all_partitions:
        if tp not in eligible or tp in owner:
            continue
        candidates = eligible[tp]
        under = [m for m in candidates if counts[m] < quota[m]]
        pick = min(under or candidates, key=lambda m: (counts[m], m))
        owner[tp] = pick
        counts[pick] += 1
    # 3. with heterogeneous subscriptions quotas can be missed: move partitions from the most to the
    # least loaded eligible member while that narrows the gap
    moved = True
    while moved:
        moved = False
        for tp in sorted(owner, key=lambda tp: (-counts[owner[tp]], tp)):
            m = owner[tp]
            target = min(eligible[tp], key=lambda x: (counts[x], x))
            if counts[m] - counts[target] > 1:
                owner[tp] = target
                counts[m] -= 1
                counts[target] += 1
                moved = True
    for (t, p), m in owner.items():
        out[m].setdefault(t, set()).add(p)
    return out


ASSIGNORS = {UNIFORM: uniform_assign, RANGE: range_assign}
