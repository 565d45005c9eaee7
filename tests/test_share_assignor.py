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


ZERO_TOPIC = bytes(16)  # Uuid 0: Objects.hash(topicId, p) = 961 + p, so Java yields its partitions in order


def test_java_hash_order_follows_java_s_hashes_and_buckets():
    from minibroker.coordinator.java_hash_order import JavaHashMap, integer_hash, java_hash_set, string_hash

    assert string_hash("hello") == 99162322
    assert string_hash("polygenelubricants") == -(2**31)  # Java's well-known Integer.MIN_VALUE hash
    assert string_hash("Aa") == string_hash("BB") == 2112
    # a default HashSet<Integer>: 16 buckets, one bucket's entries in insertion order
    assert java_hash_set(integer_hash, [16, 1, 0]).keys() == [16, 0, 1]
    grown = java_hash_set(integer_hash, range(12, -1, -1))  # the 13th entry doubles the table to 32
    assert grown.keys() == list(range(13))
    assert java_hash_set(integer_hash, [17, 1]).keys() == [17, 1]
    assert JavaHashMap.expected(integer_hash, 5)._table == 16  # (int) ((5 + 1) / 0.75f + 1) = 9 -> 16


def test_uneven_counts_go_to_the_members_java_s_hash_map_yields_first():
    # Kafka numbers members in the order its HashMap of member ids yields them ("a" bucket 1, "x" 8,
    # "Z" 10), not by join order; with 5 partitions over 3 members the first two want 2, the last 1;
    # the partitions are offered one by one to the short members in that order
    r = simple_assign({"x": [ZERO_TOPIC], "a": [ZERO_TOPIC], "Z": [ZERO_TOPIC]}, {ZERO_TOPIC: 5}, {})
    assert r == {"a": {ZERO_TOPIC: {0, 3}}, "x": {ZERO_TOPIC: {1, 4}}, "Z": {ZERO_TOPIC: {2}}}


def test_an_overfilled_member_gives_up_what_its_hash_set_yields_first():
    current = {"a": {ZERO_TOPIC: {0, 1, 2, 3}}}
    r = simple_assign({"a": [ZERO_TOPIC], "b": [ZERO_TOPIC]}, {ZERO_TOPIC: 4}, current)
    assert r == {"a": {ZERO_TOPIC: {2, 3}}, "b": {ZERO_TOPIC: {0, 1}}}


def test_heterogeneous_ties_as_kafka_s_own_test_expects():
    # apache/kafka SimpleAssignorTest's
    # testAssignWithThreeMembersThreeTopicsHeterogeneousWithNonAssignableTopic: T3 has nothing to
    # assign; T2 (3 partitions) over A and C gives A two, C one
    t1, t2, t3 = b"\x01" * 16, b"\x02" * 16, b"\x03" * 16
    r = simple_assign({"A": [t1, t2], "B": [t3], "C": [t2, t3]}, {t1: 3, t2: 3, t3: 0}, {})
    assert r == {"A": {t1: {0, 1, 2}, t2: {0, 2}}, "B": {}, "C": {t2: {1}}}
