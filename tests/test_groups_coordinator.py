"""The group coordinator's state machine, without sockets: a stub broker and an in-memory offsets topic."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest

from minibroker.coordinator.classic_group import GroupState
from minibroker.coordinator.group_coordinator import GroupCoordinator
from minibroker.coordinator.group_records import (
    GroupMetadataKey,
    OffsetCommitKey,
    OffsetCommitValue,
    decode_group_metadata_value,
    decode_key,
    decode_offset_commit_value,
    encode_offset_commit_key,
)
from minibroker.errors import ErrorCode as E
from minibroker.errors import KafkaError

CONFIG = {
    "group.initial.rebalance.delay.ms": 0,
    "group.min.session.timeout.ms": 100,
    "group.max.session.timeout.ms": 60000,
    "group.max.size": 2**31 - 1,
    "offsets.retention.minutes": 10080,
    "offsets.retention.check.interval.ms": 600000,
    "offset.metadata.max.bytes": 16,
    "offsets.topic.num.partitions": 50,
}


class MemoryOffsetsTopic:
    """Stands in for OffsetsTopic: keeps appended (key, value) records in order."""

    def __init__(self, records=None):
        self.records: list[tuple[bytes, bytes | None]] = list(records or [])
        self.fail: E | None = None
        self.num_partitions = 1

    @property
    def exists(self) -> bool:
        return bool(self.records)

    def ensure_topic(self) -> None:
        pass

    def partition_for(self, group_id: str) -> int:
        return 0

    def append(self, group_id, entries) -> None:
        if self.fail is not None:
            raise KafkaError(self.fail)
        self.records.extend(entries)

    def read_partition(self, partition):
        yield from self.records


def make_coordinator(records=None, **overrides) -> GroupCoordinator:
    tasks = set()

    def spawn(coro):
        task = asyncio.ensure_future(coro)
        tasks.add(task)
        return task

    broker = SimpleNamespace(config={**CONFIG, **overrides}, logs=SimpleNamespace(topics={}), spawn=spawn,
                             _tasks=tasks)
    coordinator = GroupCoordinator(broker)
    coordinator.store = MemoryOffsetsTopic(records)
    coordinator.start()
    return coordinator


SUB = b"\x00\x00\x00\x00\x00\x01\x00\x01t\xff\xff\xff\xff"  # ConsumerProtocolSubscription v0: topics ["t"]


def join(c, group="g", member_id="", instance=None, session=1000, rebalance=1000, protocols=None, version=9):
    return c.join_group(group, member_id, instance, "client", "/127.0.0.1", session, rebalance, "consumer",
                        protocols or [("range", SUB)], require_known_member_id=version >= 4,
                        supports_skip_assignment=version >= 9)


async def join_new(c, group="g", **kw):
    """A dynamic member's two-step join (MEMBER_ID_REQUIRED, then join with the id): returns a task."""
    first = await join(c, group, **kw)
    assert first.error == E.MEMBER_ID_REQUIRED and first.member_id.startswith("client-")
    return asyncio.ensure_future(join(c, group, member_id=first.member_id, **kw))


async def test_single_member_join_sync_heartbeat_leave():
    c = make_coordinator()
    r = await (await join_new(c))
    assert r.error == E.NONE and r.generation_id == 1 and r.leader_id == r.member_id
    assert r.protocol_type == "consumer" and r.protocol_name == "range"
    assert [m[0] for m in r.members] == [r.member_id]
    group = c.groups["g"]
    assert group.state is GroupState.COMPLETING_REBALANCE
    assert c.heartbeat("g", 1, r.member_id, None) == E.NONE
    s = await c.sync_group("g", 1, r.member_id, None, "consumer", "range", [(r.member_id, b"A")])
    assert s.error == E.NONE and s.assignment == b"A"
    assert group.state is GroupState.STABLE
    assert c.heartbeat("g", 0, r.member_id, None) == E.ILLEGAL_GENERATION
    assert c.heartbeat("g", 1, "nobody", None) == E.UNKNOWN_MEMBER_ID
    assert c.heartbeat("other", 1, r.member_id, None) == E.UNKNOWN_MEMBER_ID
    # the group with its assignment was written as group metadata v3
    key, value = c.store.records[-1]
    assert decode_key(key) == GroupMetadataKey("g")
    meta = decode_group_metadata_value(value)
    assert meta.generation == 1 and meta.members[0].assignment == b"A" and meta.members[0].subscription == SUB
    top, members = c.leave_group("g", [(r.member_id, None)])
    assert top == E.NONE and members == [(r.member_id, None, E.NONE)]
    assert group.state is GroupState.EMPTY and group.generation_id == 2
    assert c.describe_group("g").state == "Empty"


async def test_join_errors():
    c = make_coordinator()
    assert (await join(c, group="")).error == E.INVALID_GROUP_ID
    assert (await join(c, session=10)).error == E.INVALID_SESSION_TIMEOUT
    assert (await join(c, session=600000)).error == E.INVALID_SESSION_TIMEOUT
    assert (await join(c, member_id="ghost")).error == E.UNKNOWN_MEMBER_ID
    r = await (await join_new(c))
    assert r.error == E.NONE
    other = await c.join_group("g", "", None, "c", "/h", 1000, 1000, "connect", [("x", b"")],
                               require_known_member_id=True)
    assert other.error == E.INCONSISTENT_GROUP_PROTOCOL
    # v3 and below: no MEMBER_ID_REQUIRED, the member joins straight away
    c2 = make_coordinator()
    r = await join(c2, version=3)
    assert r.error == E.NONE and r.member_id


async def test_three_members_then_one_leaves_and_one_times_out():
    c = make_coordinator()
    tasks = [await join_new(c, session=300, rebalance=2000) for _ in range(3)]
    results = await asyncio.gather(*tasks)
    gens = {r.generation_id for r in results}
    assert len(gens) == 1
    leader = next(r for r in results if r.leader_id == r.member_id)
    assert len(leader.members) == 3
    assert all(r.members == [] for r in results if r is not leader)
    gen = leader.generation_id
    syncs = [asyncio.ensure_future(c.sync_group("g", gen, r.member_id, None, "consumer", "range",
                                                [(m[0], m[0].encode()) for m in leader.members]
                                                if r is leader else []))
             for r in results]
    for r, s in zip(results, await asyncio.gather(*syncs), strict=True):
        assert s.error == E.NONE and s.assignment == r.member_id.encode()
    ids = [r.member_id for r in results]
    # member 0 leaves: the others are told by heartbeat, and rejoin
    c.leave_group("g", [(ids[0], None)])
    assert c.groups["g"].state is GroupState.PREPARING_REBALANCE
    assert c.heartbeat("g", gen, ids[1], None) == E.REBALANCE_IN_PROGRESS
    # committing in PreparingRebalance with the current generation is allowed, as in Kafka
    assert c.commit_offsets("g", gen, ids[1], None, {("t", 0): OffsetCommitValue(5)}) == {("t", 0): E.NONE}
    rejoin = [asyncio.ensure_future(join(c, member_id=i, session=300, rebalance=2000)) for i in ids[1:]]
    r1, r2 = await asyncio.gather(*rejoin)
    assert r1.generation_id == r2.generation_id == gen + 1
    # during CompletingRebalance, commits are refused
    with pytest.raises(KafkaError) as e:
        c.commit_offsets("g", gen + 1, ids[1], None, {("t", 0): OffsetCommitValue(6)})
    assert e.value.code == E.REBALANCE_IN_PROGRESS
    # ... after the member and its generation are checked, as Kafka orders them
    for generation, member, code in ((gen, ids[1], E.ILLEGAL_GENERATION), (gen + 1, "x", E.UNKNOWN_MEMBER_ID),
                                     (-1, "", E.UNKNOWN_MEMBER_ID)):
        with pytest.raises(KafkaError) as e:
            c.commit_offsets("g", generation, member, None, {("t", 0): OffsetCommitValue(6)})
        assert e.value.code == code
    leader_id = r1.leader_id
    await asyncio.gather(*(c.sync_group("g", gen + 1, i, None, None, None, []) if i != leader_id else
                           c.sync_group("g", gen + 1, i, None, None, None, []) for i in ids[1:]))
    assert c.groups["g"].state is GroupState.STABLE
    # nobody heartbeats: both sessions expire (300 ms) and the group ends up Empty
    await asyncio.sleep(0.8)
    group = c.groups["g"]
    assert not group.members and group.state is GroupState.EMPTY


async def test_member_that_does_not_rejoin_is_removed_after_rebalance_timeout():
    c = make_coordinator()
    a, b = await asyncio.gather(*[await join_new(c, session=5000, rebalance=300) for _ in range(2)])
    gen = a.generation_id
    await asyncio.gather(c.sync_group("g", gen, a.member_id, None, None, None, []),
                         c.sync_group("g", gen, b.member_id, None, None, None, []))
    # a rejoins (e.g. its subscription changed); b never does
    t0 = asyncio.get_running_loop().time()
    r = await join(c, member_id=a.member_id, session=5000, rebalance=300,
                   protocols=[("range", SUB + b"x")])
    waited = asyncio.get_running_loop().time() - t0
    assert r.error == E.NONE and r.generation_id == gen + 1 and [m[0] for m in r.members] == [a.member_id]
    assert 0.25 < waited < 2
    assert c.heartbeat("g", gen, b.member_id, None) == E.UNKNOWN_MEMBER_ID


async def test_initial_rebalance_delay_collects_members():
    c = make_coordinator(**{"group.initial.rebalance.delay.ms": 200})
    t0 = asyncio.get_running_loop().time()
    first = await join_new(c, rebalance=5000)
    await asyncio.sleep(0.1)
    second = await join_new(c, rebalance=5000)
    a, b = await asyncio.gather(first, second)
    assert a.generation_id == b.generation_id == 1
    assert 0.2 <= asyncio.get_running_loop().time() - t0 < 2


async def test_sync_errors_and_lost_join_response():
    c = make_coordinator()
    r = await (await join_new(c))
    assert (await c.sync_group("g", 7, r.member_id, None, None, None, [])).error == E.ILLEGAL_GENERATION
    assert (await c.sync_group("g", 1, "x", None, None, None, [])).error == E.UNKNOWN_MEMBER_ID
    assert (await c.sync_group("g", 1, r.member_id, None, "connect", "range", [])).error == \
        E.INCONSISTENT_GROUP_PROTOCOL
    # a JoinGroup repeated in CompletingRebalance gets the same answer again
    again = await join(c, member_id=r.member_id)
    assert again.generation_id == 1 and again.leader_id == r.member_id and len(again.members) == 1
    # the leader may leave members out: they get an empty assignment
    s = await c.sync_group("g", 1, r.member_id, None, None, None, [])
    assert s.error == E.NONE and s.assignment == b""


async def test_static_member_replaced_without_rebalance():
    c = make_coordinator()
    a = await join(c, instance="i-1")  # static members need no MEMBER_ID_REQUIRED round
    assert a.error == E.NONE and a.member_id.startswith("i-1-")
    await c.sync_group("g", 1, a.member_id, "i-1", None, None, [(a.member_id, b"P")])
    # the same instance restarts: new member id, same generation, old assignment, no rebalance (v9: skip)
    b = await join(c, instance="i-1")
    assert b.error == E.NONE and b.member_id != a.member_id and b.generation_id == 1
    assert b.skip_assignment and b.leader_id == b.member_id
    assert c.groups["g"].state is GroupState.STABLE
    s = await c.sync_group("g", 1, b.member_id, "i-1", None, None, [])
    assert s.assignment == b"P"
    # the old incarnation is fenced
    assert c.heartbeat("g", 1, a.member_id, "i-1") == E.FENCED_INSTANCE_ID
    assert c.leave_group("g", [(a.member_id, "i-1")])[1][0][2] == E.FENCED_INSTANCE_ID
    # v8 and below: the old leader id comes back so that the member does not assign
    d = await join(c, instance="i-1", version=8)
    assert d.leader_id == b.member_id and not d.skip_assignment and d.members == []
    # admin removal by instance id
    assert c.leave_group("g", [("", "i-1")])[1] == [("", "i-1", E.NONE)]
    assert c.groups["g"].state is GroupState.EMPTY


async def test_commit_and_fetch_offsets():
    c = make_coordinator()
    # simple commit: generation -1 creates an Empty group
    assert c.commit_offsets("simple", -1, "", None, {("t", 0): OffsetCommitValue(10, "m", 1, 3)}) == \
        {("t", 0): E.NONE}
    assert c.fetch_offsets("simple", [("t", 0), ("t", 1)]) == {("t", 0): OffsetCommitValue(10, "m", 1, 3),
                                                              ("t", 1): None}
    assert c.fetch_offsets("unknown", [("t", 0)]) == {("t", 0): None}
    assert list(c.fetch_offsets("simple", None)) == [("t", 0)]
    key, value = c.store.records[-1]
    assert decode_key(key) == OffsetCommitKey("simple", "t", 0)
    assert decode_offset_commit_value(value).offset == 10
    # metadata too large (limit 16 bytes in this config)
    res = c.commit_offsets("simple", -1, "", None, {("t", 1): OffsetCommitValue(1, "x" * 17, 1)})
    assert res == {("t", 1): E.OFFSET_METADATA_TOO_LARGE}
    # a generation on an unknown group
    with pytest.raises(KafkaError) as e:
        c.commit_offsets("nogroup", 3, "m", None, {("t", 0): OffsetCommitValue(1)})
    assert e.value.code == E.ILLEGAL_GENERATION
    # members of a group must give the right generation and member id
    r = await (await join_new(c))
    await c.sync_group("g", 1, r.member_id, None, None, None, [])
    for gen, member, code in ((-1, "", E.UNKNOWN_MEMBER_ID), (1, "x", E.UNKNOWN_MEMBER_ID),
                              (2, r.member_id, E.ILLEGAL_GENERATION)):
        with pytest.raises(KafkaError) as e:
            c.commit_offsets("g", gen, member, None, {("t", 0): OffsetCommitValue(1)})
        assert e.value.code == code
    assert c.commit_offsets("g", 1, r.member_id, None, {("t", 0): OffsetCommitValue(1)}) == {("t", 0): E.NONE}
    # a failed write is reported per partition and nothing is remembered
    c.store.fail = E.COORDINATOR_NOT_AVAILABLE
    assert c.commit_offsets("g", 1, r.member_id, None, {("t", 0): OffsetCommitValue(99)}) == \
        {("t", 0): E.COORDINATOR_NOT_AVAILABLE}
    assert c.fetch_offsets("g", [("t", 0)])[("t", 0)].offset == 1


async def test_delete_offsets_and_groups():
    c = make_coordinator()
    r = await (await join_new(c))
    await c.sync_group("g", 1, r.member_id, None, None, None, [])
    c.commit_offsets("g", 1, r.member_id, None,
                     {("t", 0): OffsetCommitValue(1), ("u", 0): OffsetCommitValue(2)})
    # subscribed to "t" (see SUB): its offsets stay
    assert c.delete_offsets("g", [("t", 0), ("u", 0)]) == {("t", 0): E.GROUP_SUBSCRIBED_TO_TOPIC,
                                                         ("u", 0): E.NONE}
    assert c.fetch_offsets("g", [("u", 0)])[("u", 0)] is None
    assert c.delete_groups(["g", "nope"]) == [("g", E.NON_EMPTY_GROUP), ("nope", E.GROUP_ID_NOT_FOUND)]
    c.leave_group("g", [(r.member_id, None)])
    n = len(c.store.records)
    assert c.delete_groups(["g"]) == [("g", E.NONE)]
    tombstones = c.store.records[n:]
    assert [decode_key(k) for k, _ in tombstones] == [OffsetCommitKey("g", "t", 0), GroupMetadataKey("g")]
    assert all(v is None for _, v in tombstones)
    assert "g" not in c.groups and c.describe_group("g").state == "Dead"
    with pytest.raises(KafkaError) as e:
        c.delete_offsets("g", [("t", 0)])
    assert e.value.code == E.GROUP_ID_NOT_FOUND


async def test_list_and_describe():
    c = make_coordinator()
    c.commit_offsets("simple", -1, "", None, {("t", 0): OffsetCommitValue(1)})
    r = await (await join_new(c))
    await c.sync_group("g", 1, r.member_id, None, None, None, [(r.member_id, b"A")])
    assert sorted(c.list_groups()) == [("g", "consumer", "Stable", "classic"),
                                       ("simple", "", "Empty", "classic")]
    assert c.list_groups(["stable"]) == [("g", "consumer", "Stable", "classic")]
    assert c.list_groups(["Empty"], ["classic"]) == [("simple", "", "Empty", "classic")]
    assert c.list_groups(None, ["consumer"]) == []  # "g" is a classic group speaking the consumer protocol
    d = c.describe_group("g")
    assert (d.state, d.protocol_type, d.protocol) == ("Stable", "consumer", "range")
    assert d.members == [(r.member_id, None, "client", "/127.0.0.1", SUB, b"A")]


async def test_reload_restores_stable_group_and_offsets():
    c = make_coordinator()
    a = await join(c, instance="i-1", session=5000)
    await c.sync_group("g", 1, a.member_id, "i-1", None, None, [(a.member_id, b"P")])
    c.commit_offsets("g", 1, a.member_id, "i-1", {("t", 0): OffsetCommitValue(7, "x", 1, 2)})
    c.commit_offsets("gone", -1, "", None, {("t", 0): OffsetCommitValue(1)})
    c.delete_groups(["gone"])
    c.close()
    d = make_coordinator(records=c.store.records)
    assert d.loading
    assert (await join(d, instance="i-1")).error == E.COORDINATOR_LOAD_IN_PROGRESS
    for _ in range(5):
        await asyncio.sleep(0)
    assert not d.loading
    assert set(d.groups) == {"g"}
    group = d.groups["g"]
    assert group.state is GroupState.STABLE and group.generation_id == 1
    assert d.heartbeat("g", 1, a.member_id, "i-1") == E.NONE
    assert d.fetch_offsets("g", [("t", 0)])[("t", 0)] == OffsetCommitValue(7, "x", 1, 2)
    s = await d.sync_group("g", 1, a.member_id, "i-1", None, None, [])
    assert s.assignment == b"P"
    d.close()


async def test_offsets_retention_of_empty_and_simple_groups():
    c = make_coordinator()
    c.commit_offsets("simple", -1, "", None, {("t", 0): OffsetCommitValue(1, "", 1000)})
    r = await (await join_new(c))
    await c.sync_group("g", 1, r.member_id, None, None, None, [])
    c.commit_offsets("g", 1, r.member_id, None, {("t", 0): OffsetCommitValue(1, "", 1000),
                                                 ("other", 0): OffsetCommitValue(1, "", 1000)})
    week = 10080 * 60_000
    # stable group: only offsets of topics it does not subscribe to expire
    assert c.expire_offsets(now=1000 + week) == 2  # simple's t-0 and g's other-0
    assert "simple" not in c.groups
    assert set(c.groups["g"].offsets) == {("t", 0)}
    c.leave_group("g", [(r.member_id, None)])
    empty_since = c.groups["g"].state_timestamp_ms
    assert c.expire_offsets(now=empty_since + week - 1) == 0
    assert c.expire_offsets(now=empty_since + week) == 1
    assert "g" not in c.groups
    assert decode_key(c.store.records[-1][0]) == GroupMetadataKey("g") and c.store.records[-1][1] is None


async def test_load_skips_an_unreadable_offsets_record():
    c = make_coordinator()
    c.commit_offsets("g", -1, "", None, {("t", 0): OffsetCommitValue(7)})
    c.close()
    d = make_coordinator(records=[(encode_offset_commit_key("bad", "t", 0), b"\x00\x09garbage"),
                                  *c.store.records])
    for _ in range(5):
        await asyncio.sleep(0)
    assert not d.loading and "bad" not in d.groups
    assert d.fetch_offsets("g", [("t", 0)])[("t", 0)].offset == 7
    d.close()


@pytest.mark.parametrize("code, answered", [
    ("KAFKA_STORAGE_ERROR", "NOT_COORDINATOR"),  # a full or failed log dir
    ("MESSAGE_TOO_LARGE", "INVALID_COMMIT_OFFSET_SIZE"),
    ("PRODUCER_FENCED", "PRODUCER_FENCED"),  # a transactional commit's producer sees why
    ("CORRUPT_MESSAGE", "COORDINATOR_NOT_AVAILABLE"),
])
def test_an_offsets_append_failure_answers_a_group_error(code, answered):
    from types import SimpleNamespace

    from minibroker.coordinator.offsets_store import OFFSETS_TOPIC, OffsetsTopic

    def fail(*args, **kwargs):
        raise KafkaError(E[code], "refused")

    topics = {OFFSETS_TOPIC: SimpleNamespace(partitions=1)}
    broker = SimpleNamespace(config={}, logs=SimpleNamespace(topics=topics),
                             replicas=SimpleNamespace(append_records=fail))
    with pytest.raises(KafkaError) as info:
        OffsetsTopic(broker).append("g", [(b"k", b"v")], producer_id=5, producer_epoch=0)
    assert info.value.code == E[answered]
