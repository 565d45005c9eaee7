"""The share groups' simple assignor (Kafka 4.1+ rules): balance, then stickiness, per pool."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from minibroker.coordinator.share_assignor import simple_assign

T, U = b"t" * 16, b"u" * 16


def _counts(result):
    return {m: sum(len(ps) for ps in a.values()) for m, a in result.items()}


def test_more_partitions_than_members_gives_each_partition_one_member():
    r = simple_assign({"a": [T], "b": [T]}, {T: 5}, {})
    assert sorted(_counts(r).values()) == [2, 3]
    assert r["a"][T] | r["b"][T] == set(range(5)) and not r["a"][T] & r["b"][T]


def test_more_members_than_partitions_shares_every_partition_evenly():
    r = simple_assign({m: [T] for m in "abcde"}, {T: 2}, {})
    holders = {p: sorted(m for m in r if p in r[m].get(T, ())) for p in (0, 1)}
    assert sorted(len(h) for h in holders.values()) == [3, 3]  # ceil(5 / 2) members each
    assert all(_counts(r)[m] >= 1 for m in "abcde")


def test_a_joining_member_takes_partitions_from_the_current_holder_only_as_balance_needs():
    first = simple_assign({"a": [T]}, {T: 4}, {})
    assert first == {"a": {T: {0, 1, 2, 3}}}
    second = simple_assign({"a": [T], "b": [T]}, {T: 4}, first)
    assert second["a"][T] < first["a"][T] and len(second["a"][T]) == 2
    assert second["b"][T] == first["a"][T] - second["a"][T]
    assert simple_assign({"a": [T], "b": [T]}, {T: 4}, second) == second  # stable


def test_heterogeneous_subscriptions_balance_each_topic_over_its_subscribers():
    r = simple_assign({"a": [T], "b": [T, U], "c": [U]}, {T: 4, U: 4}, {})
    assert U not in r["a"] and T not in r["c"]
    assert len(r["a"][T]) == len(r["b"][T]) == 2 and len(r["b"][U]) == len(r["c"][U]) == 2
    # a member that drops a topic loses its partitions of it
    later = simple_assign({"a": [T], "b": [U], "c": [U]}, {T: 4, U: 4}, r)
    assert later["a"][T] == {0, 1, 2, 3} and T not in later["b"]


@given(st.integers(1, 8), st.integers(1, 12), st.data())
def test_balance_and_coverage_from_any_current_assignment(members, partitions, data):
    ids = [f"m{i}" for i in range(members)]
    current = {m: {T: set(data.draw(st.lists(st.integers(0, partitions + 2), max_size=6)))} for m in ids}
    r = simple_assign({m: [T] for m in ids}, {T: partitions}, current)
    sharing = -(-members // partitions)
    held = [sum(p in r[m].get(T, ()) for m in ids) for p in range(partitions)]
    assert all(1 <= h <= sharing for h in held)
    assert all(p < partitions for m in ids for p in r[m].get(T, ()))
    counts = _counts(r).values()
    assert max(counts) - min(counts) <= 1 and min(counts) >= 1
