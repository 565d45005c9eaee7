"""KIP-848 consumer groups: confluent-kafka with group.protocol=consumer over real sockets, wire-level
epochs and errors of ConsumerGroupHeartbeat, and unit tests of the assignors, reconciliation, the RE2/J
translation and the __consumer_offsets records."""

from __future__ import annotations

import re
import time
import uuid

import pytest

from minibroker.coordinator.assignors import range_assign, uniform_assign
from minibroker.coordinator.consumer_group import (
    ConsumerMember,
    MemberState,
    reconcile,
)
from minibroker.coordinator.group_records import (
    CurrentAssignmentValue,
    MemberMetadataValue,
    decode_current_assignment_value,
    decode_key,
    decode_member_metadata_value,
    decode_partition_metadata_value,
    encode_consumer_group_key,
    encode_current_assignment_value,
    encode_member_metadata_value,
    encode_partition_metadata_value,
)
from minibroker.coordinator.topic_regex import PositionSetMatcher, RegexError, compile_re2, translate_re2
from minibroker.errors import ErrorCode as E
from minibroker.protocol.codec import Struct
from minibroker.testing import BrokerRunner
from minibroker.tools.wire import WireClient

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka import Consumer, Producer  # noqa: E402
from confluent_kafka.admin import AdminClient  # noqa: E402

OVERRIDES = {"group.consumer.heartbeat.interval.ms": "300", "group.consumer.session.timeout.ms": "6000"}


@pytest.fixture(scope="module")
def broker():
    runner = BrokerRunner(OVERRIDES).start()
    yield runner
    runner.stop()


def _consumer(runner, group: str, topics: list[str], **extra) -> Consumer:
    c = Consumer({"bootstrap.servers": runner.bootstrap_servers, "group.id": group,
                  "group.protocol": "consumer", "auto.offset.reset": "earliest", **extra})
    c.subscribe(topics)
    return c


def _assigned(c: Consumer) -> set[tuple[str, int]]:
    return {(tp.topic, tp.partition) for tp in c.assignment()}


def _poll_until(consumers, condition, what: str, timeout=20.0, seen=None, last=None):
    """Poll the consumers until ``condition()`` holds; on timeout, say what they (and ``last()``, if
    given) last had."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for c in consumers:
            m = c.poll(0.05)
            if m is not None and not m.error() and seen is not None:
                seen.append((m.topic(), m.partition(), m.offset()))
        if condition():
            return
    raise AssertionError(
        f"timed out after {timeout:.0f} s waiting for {what}: assignments "
        f"{[sorted(_assigned(c)) for c in consumers]}"
        + (f", {len(seen)} records consumed" if seen is not None else "")
        + (f", {last()}" if last is not None else ""))


def _produce(runner, topic: str, partitions: int, per_partition: int) -> None:
    p = Producer({"bootstrap.servers": runner.bootstrap_servers})
    for part in range(partitions):
        for i in range(per_partition):
            p.produce(topic, value=b"%d" % i, partition=part)
    assert p.flush(10) == 0


def _cli(capsys, *argv: str) -> tuple[int, str]:
    from minibroker.cli import main

    capsys.readouterr()
    code = main(list(argv))
    return code, capsys.readouterr().out


def test_members_split_rebalance_incrementally_and_leave(broker, capsys):
    topic, group = f"kip848-{uuid.uuid4().hex[:6]}", f"g-{uuid.uuid4().hex[:6]}"
    broker.create_topic(topic, 4)
    _produce(broker, topic, 4, 5)
    a, b = _consumer(broker, group, [topic]), _consumer(broker, group, [topic])
    seen: list = []
    try:
        _poll_until([a, b], lambda: len(_assigned(a)) == 2 and len(_assigned(b)) == 2 and len(seen) >= 20,
                    "a and b to split the partitions and consume the 20 records", seen=seen)
        assert _assigned(a) | _assigned(b) == {(topic, p) for p in range(4)}
        before_a, before_b = _assigned(a), _assigned(b)
        c = _consumer(broker, group, [topic])
        # each old member keeps what it is not asked to give up: at most one partition moves per member
        _poll_until([a, b, c], lambda: _assigned(c) and len(_assigned(a) | _assigned(b) | _assigned(c)) == 4
                    and not (_assigned(a) & _assigned(c)) and not (_assigned(b) & _assigned(c)),
                    "c to get partitions the others gave up")
        assert len(_assigned(a) & before_a) >= 1 and len(_assigned(b) & before_b) >= 1
        assert _assigned(a) <= before_a and _assigned(b) <= before_b
        # the old members keep consuming their unchanged partitions
        _produce(broker, topic, 4, 1)
        seen.clear()
        kept = (_assigned(a) & before_a) | (_assigned(b) & before_b)
        _poll_until([a, b, c], lambda: kept <= {(t, p) for t, p, _ in seen},
                    f"records of the kept partitions {sorted(kept)}", seen=seen,
                    last=lambda: f"from partitions {sorted({(t, p) for t, p, _ in seen})}")
        c.close()  # leaves with epoch -1: its partitions go back to the others
        _poll_until([a, b], lambda: len(_assigned(a) | _assigned(b)) == 4, "a and b to take c's partitions")
        admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
        described = []

        def stable():
            # A client sees its new partitions before its next heartbeat tells the broker it took them: the
            # group is Reconciling (UNKNOWN to this client's enum) until then.
            described[:] = [admin.describe_consumer_groups([group])[group].result(timeout=10)]
            return described[0].state.name == "STABLE"

        def last_described() -> str:
            if not described:
                return "never described"
            members = [(m.member_id, sorted(tp.partition for tp in m.assignment.topic_partitions))
                       for m in described[0].members]
            return f"last described {described[0].state.name} with members {members}"

        _poll_until([a, b], stable, "the group to be Stable", last=last_described)
        desc = described[0]
        assert desc.type.name == "CONSUMER"
        assert len(desc.members) == 2
        assert str(desc.state.name) == "STABLE"
        listed = admin.list_consumer_groups().result(timeout=10)
        assert group in {g.group_id for g in listed.valid if g.type.name == "CONSUMER"}
        # the CLI: the type in the list, the members of a consumer group in describe
        code, listing = _cli(capsys, "groups", "list", "--type", "--state", "--bootstrap-server",
                             broker.bootstrap_servers)
        assert code == 0 and re.search(rf"^{group}\s+consumer\s+Stable$", listing, re.M)
        code, text = _cli(capsys, "groups", "describe", "--group", group, "--bootstrap-server",
                          broker.bootstrap_servers)
        assert code == 0 and "GROUP STATE: Stable" in text
        owner_column = {line.split()[1:3][0] + ":" + line.split()[2]: line.split()[6]
                        for line in text.splitlines() if line.startswith(group)}
        assert len(owner_column) == 4 and "-" not in owner_column.values()
    finally:
        a.close()
        b.close()


def test_regex_subscription_picks_up_new_topic(broker):
    prefix = f"rx{uuid.uuid4().hex[:6]}"
    broker.create_topic(f"{prefix}-a", 1)
    c = _consumer(broker, f"g-{prefix}", [f"^{prefix}-.*"])
    try:
        _poll_until([c], lambda: _assigned(c) == {(f"{prefix}-a", 0)}, "the regex's first topic")
        broker.create_topic(f"{prefix}-b", 2)
        _poll_until([c], lambda: _assigned(c) == {(f"{prefix}-a", 0), (f"{prefix}-b", 0), (f"{prefix}-b", 1)},
                    "the new topic the regex matches", timeout=30)
    finally:
        c.close()


class _RebalanceEvents:
    """A consumer's rebalance callbacks as librdkafka's tests 0033 and 0045 see them: each ASSIGN or
    REVOKE event with its partitions, awaited one at a time."""

    def __init__(self, consumer: Consumer):
        self.consumer = consumer
        self.events: list[tuple[str, set[tuple[str, int]]]] = []

    def subscribe(self, topics: list[str]) -> None:
        self.consumer.subscribe(topics, on_assign=self._assign, on_revoke=self._revoke)

    def _assign(self, consumer, partitions) -> None:
        self.events.append(("assign", {(tp.topic, tp.partition) for tp in partitions}))
        consumer.incremental_assign(partitions)

    def _revoke(self, consumer, partitions) -> None:
        self.events.append(("revoke", {(tp.topic, tp.partition) for tp in partitions}))
        consumer.incremental_unassign(partitions)

    def next(self, timeout: float = 30.0) -> tuple[str, set[tuple[str, int]]]:
        deadline = time.monotonic() + timeout
        while not self.events and time.monotonic() < deadline:
            self.consumer.poll(0.1)
        assert self.events, f"no rebalance event in {timeout:.0f} s"
        return self.events.pop(0)

    def quiet(self, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            self.consumer.poll(0.1)
        assert self.events == [], f"unexpected rebalance events {self.events}"


def _partitions(*topics: tuple[str, int]) -> set[tuple[str, int]]:
    return {(t, p) for t, count in topics for p in range(count)}


@pytest.mark.slow  # one heartbeat interval or more per step, and a quiet spell
def test_librdkafka_0033_regex_subscribe(broker):
    # librdkafka's tests/0033-regex_subscribe.c do_test, one consumer through every subscription
    gid = f"g{uuid.uuid4().hex[:8]}"
    topics = [f"regex_subscribe_TOPIC_0001_UNO_{gid}", f"regex_subscribe_topic_0002_dup_{gid}",
              f"regex_subscribe_TOOTHPIC_0003_3_{gid}"]
    for t in topics:
        broker.create_topic(t, 1)
    nonexistent = f"regex_subscribe_NONEXISTENT_0004_IV#!_{gid}"
    events = _RebalanceEvents(Consumer({"bootstrap.servers": broker.bootstrap_servers, "group.id": gid,
                                        "group.protocol": "consumer"}))
    cases = [
        ([topics[0], topics[1]], [topics[0], topics[1]]),
        ([nonexistent], []),
        ([f"^.*_{gid}"], topics),
        ([f"^.*[tToOpPiIcC]_0+[12]_[^_]+_{gid}"], [topics[0], topics[1]]),
        ([f"^.*TOOTHPIC_000._._{gid}"], [topics[2]]),
        ([f"^.*_000[34]_..?_{gid}"], [topics[2]]),
        # sent as one SubscribedTopicRegex, (^.*regex_subscribe_to.*)|(^.*regex_subscribe_TOO.*)
        (["^.*regex_subscribe_to.*", "^.*regex_subscribe_TOO.*"], [topics[1], topics[2]]),
    ]
    try:
        for subscription, expected in cases:
            events.subscribe(subscription)
            if expected:
                assert events.next() == ("assign", _partitions(*((t, 1) for t in expected))), subscription
            else:
                events.quiet(2)
            events.consumer.unsubscribe()
            if expected:
                assert events.next()[0] == "revoke", subscription
        with pytest.raises(confluent_kafka.KafkaException) as exc:  # a broken regex: refused locally
            events.subscribe(["^.*[0"])
        assert exc.value.args[0].code() == confluent_kafka.KafkaError._INVALID_ARG
    finally:
        events.consumer.close()


@pytest.mark.slow  # a heartbeat interval or more per step
def test_librdkafka_0045_resubscribe_with_regex(broker):
    # librdkafka's tests/0045-subscribe_update.c do_test_resubscribe_with_regex, KIP-848 branch: a
    # new regex is resolved after the heartbeat that brings it, so the named topic comes first
    prefix = f"r{uuid.uuid4().hex[:8]}"
    topic1, topic2, topic_a = f"{prefix}_topic_regex1", f"{prefix}_topic_regex2", f"{prefix}_topic_a"
    broker.create_topic(topic1, 4)
    broker.create_topic(topic2, 4)
    broker.create_topic(topic_a, 2)
    regex = f"^{prefix}.*topic_regex.*"
    events = _RebalanceEvents(Consumer({"bootstrap.servers": broker.bootstrap_servers,
                                        "group.id": f"group_test_sub_regex_{prefix}",
                                        "group.protocol": "consumer"}))
    steps = [
        ([topic1], [_partitions((topic1, 4))]),
        ([topic2], [_partitions((topic2, 4))]),
        ([regex], [_partitions((topic1, 4), (topic2, 4))]),
        ([regex, topic_a], [_partitions((topic_a, 2)), _partitions((topic1, 4), (topic2, 4))]),
    ]
    try:
        for subscription, assignments in steps:
            events.subscribe(subscription)
            for expected in assignments:
                assert events.next() == ("assign", expected), subscription
            events.consumer.unsubscribe()
            assert events.next()[0] == "revoke", subscription
    finally:
        events.consumer.close()


def test_committed_offsets_survive_restart(tmp_path):
    runner = BrokerRunner(OVERRIDES, mode="process", data_dir=str(tmp_path)).start()
    try:
        topic, group = "kip848-restart", "g-restart"
        runner.create_topic(topic, 2)
        _produce(runner, topic, 2, 3)
        c = _consumer(runner, group, [topic], **{"enable.auto.commit": False})
        seen: list = []
        _poll_until([c], lambda: len(seen) >= 6, "the 6 records", seen=seen)
        c.commit(asynchronous=False)
        committed = {(tp.partition, tp.offset) for tp in c.committed(list(c.assignment()), timeout=10)}
        assert committed == {(0, 3), (1, 3)}
        c.close()
        runner.restart()
        with WireClient(runner.host, runner.port, timeout=10) as client:
            deadline = time.monotonic() + 20
            while True:  # until __consumer_offsets is loaded
                d = client.request(69, 0, Struct(group_ids=[group], include_authorized_operations=False))
                if d.groups[0].error_code != E.COORDINATOR_LOAD_IN_PROGRESS or time.monotonic() > deadline:
                    break
                time.sleep(0.05)
        assert d.groups[0].error_code == 0 and d.groups[0].group_state == "Empty"
        admin = AdminClient({"bootstrap.servers": runner.bootstrap_servers})
        desc = admin.describe_consumer_groups([group])[group].result(timeout=10)
        assert desc.type.name == "CONSUMER"
        c = _consumer(runner, group, [topic])
        try:
            _poll_until([c], lambda: len(_assigned(c)) == 2, "both partitions after the restart")
            got = c.committed(list(c.assignment()), timeout=10)
            assert {(tp.partition, tp.offset) for tp in got} == {(0, 3), (1, 3)}
        finally:
            c.close()
    finally:
        runner.stop()


# -- wire level -----------------------------------------------------------------------------------


def _hb(client, group, member_id, epoch, *, topics=("wire",), owned=(), rebalance=30000, instance=None,
        regex=None, assignor=None, version=1):
    body = Struct(group_id=group, member_id=member_id, member_epoch=epoch, instance_id=instance,
                  rack_id=None, rebalance_timeout_ms=rebalance,
                  subscribed_topic_names=list(topics) if topics is not None else None,
                  subscribed_topic_regex=regex, server_assignor=assignor,
                  topic_partitions=None if owned is None else list(owned))
    return client.request(68, version, body)


def test_wire_epochs_and_errors(broker):
    broker.create_topic("wire", 2)
    group = f"w-{uuid.uuid4().hex[:6]}"
    with WireClient(broker.host, broker.port, timeout=10) as client:
        r = _hb(client, group, "m1", 0)
        assert r.error_code == 0 and r.member_epoch == 1 and r.heartbeat_interval_ms == 300
        assert sorted(r.assignment.topic_partitions[0].partitions) == [0, 1]
        topic_id = r.assignment.topic_partitions[0].topic_id
        # a steady heartbeat: same epoch, no assignment repeated
        r = _hb(client, group, "m1", 1, topics=None, owned=[Struct(topic_id=topic_id, partitions=[0, 1])],
                rebalance=-1)
        assert r.error_code == 0 and r.member_epoch == 1 and r.assignment is None
        assert _hb(client, group, "m1", 5, topics=None, owned=None, rebalance=-1).error_code == \
            E.FENCED_MEMBER_EPOCH
        assert _hb(client, group, "nobody", 1, topics=None, owned=None).error_code == E.UNKNOWN_MEMBER_ID
        assert _hb(client, group, "m2", 0, rebalance=-1).error_code == E.INVALID_REQUEST
        assert _hb(client, group, "m2", 0, topics=()).error_code == E.INVALID_REQUEST
        assert _hb(client, group, "m2", 7 - 10).error_code == E.INVALID_REQUEST
        assert _hb(client, group, "", 0).error_code == E.INVALID_REQUEST  # v1: the client names itself
        assert _hb(client, group, "m2", 0, assignor="sticky").error_code == E.UNSUPPORTED_ASSIGNOR
        bad_regex = _hb(client, group, "m2", 0, topics=(), regex="(?=x)")
        assert bad_regex.error_code == E.INVALID_REGULAR_EXPRESSION
        # m2 joins: m1 must revoke one partition before m2 gets it
        r2 = _hb(client, group, "m2", 0, assignor="range")
        assert r2.error_code == 0 and r2.member_epoch == 2 and r2.assignment.topic_partitions == []
        r = _hb(client, group, "m1", 1, topics=None, owned=[Struct(topic_id=topic_id, partitions=[0, 1])],
                rebalance=-1)
        assert r.member_epoch == 1 and [tp.partitions for tp in r.assignment.topic_partitions] == [[0]]
        r2 = _hb(client, group, "m2", 2, topics=None, owned=[], rebalance=-1)
        assert r2.assignment is None  # partition 1 is not released yet
        r = _hb(client, group, "m1", 1, topics=None, owned=[Struct(topic_id=topic_id, partitions=[0])],
                rebalance=-1)
        assert r.member_epoch == 2
        r2 = _hb(client, group, "m2", 2, topics=None, owned=[], rebalance=-1)
        assert [tp.partitions for tp in r2.assignment.topic_partitions] == [[1]]
        # offsets: a member commits at its epoch; a stale epoch is refused
        commit = Struct(group_id=group, generation_id_or_member_epoch=1, member_id="m2",
                        group_instance_id=None, retention_time_ms=-1, topics=[
                            Struct(name="wire", topic_id=topic_id, partitions=[
                                Struct(partition_index=1, committed_offset=0, committed_leader_epoch=-1,
                                       commit_timestamp=-1, committed_metadata="")])])
        assert client.request(8, 9, commit).topics[0].partitions[0].error_code == E.STALE_MEMBER_EPOCH
        commit.generation_id_or_member_epoch = 2
        assert client.request(8, 9, commit).topics[0].partitions[0].error_code == 0
        commit.member_id = "stranger"
        assert client.request(8, 9, commit).topics[0].partitions[0].error_code == E.UNKNOWN_MEMBER_ID
        # a classic member joining a consumer group with members is served (online migration,
        # tests/test_group_migration.py): first MEMBER_ID_REQUIRED, as Kafka; another protocol type is 23
        join = Struct(group_id=group, session_timeout_ms=10000, rebalance_timeout_ms=10000, member_id="",
                      group_instance_id=None, protocol_type="consumer",
                      protocols=[Struct(name="range", metadata=bytes(8))], reason=None)
        assert client.request(11, 5, join).error_code == E.MEMBER_ID_REQUIRED
        join.protocol_type = "connect"
        assert client.request(11, 5, join).error_code == E.INCONSISTENT_GROUP_PROTOCOL
        # ListGroups v5 and ConsumerGroupDescribe
        listed = client.request(16, 5, Struct(states_filter=[], types_filter=["consumer"]))
        assert (group, "consumer", "consumer") in {(g.group_id, g.protocol_type, g.group_type)
                                                  for g in listed.groups}
        d = client.request(69, 0, Struct(group_ids=[group, "no-such-group"],
                                         include_authorized_operations=False))
        assert d.groups[0].error_code == 0 and d.groups[0].group_epoch == 2
        assert d.groups[0].assignor_name == "range"
        assert {m.member_id for m in d.groups[0].members} == {"m1", "m2"}
        d1 = client.request(69, 1, Struct(group_ids=[group], include_authorized_operations=False))
        assert [m.member_type for m in d1.groups[0].members] == [1, 1]
        assert d.groups[1].error_code == E.GROUP_ID_NOT_FOUND
        # leaving: epoch -1 answers -1 and bumps the group epoch
        r = _hb(client, group, "m1", -1, topics=None, owned=None, rebalance=-1)
        assert r.error_code == 0 and r.member_epoch == -1
        d = client.request(69, 0, Struct(group_ids=[group], include_authorized_operations=False))
        assert d.groups[0].group_epoch == 3 and [m.member_id for m in d.groups[0].members] == ["m2"]


def test_wire_static_members(broker):
    broker.create_topic("wire-static", 1)
    group = f"s-{uuid.uuid4().hex[:6]}"
    with WireClient(broker.host, broker.port, timeout=10) as client:
        r = _hb(client, group, "a1", 0, topics=("wire-static",), instance="i1")
        assert r.error_code == 0 and r.member_epoch == 1
        assert _hb(client, group, "a2", 0, topics=("wire-static",), instance="i1").error_code == \
            E.UNRELEASED_INSTANCE_ID
        assert _hb(client, group, "a2", 1, topics=None, owned=None, instance="i1").error_code == \
            E.FENCED_INSTANCE_ID
        r = _hb(client, group, "a1", -2, topics=None, owned=None, instance="i1", rebalance=-1)
        assert r.error_code == 0 and r.member_epoch == -2
        # the same instance comes back under a new id and gets its partition back without a new epoch
        r = _hb(client, group, "a2", 0, topics=("wire-static",), instance="i1")
        assert r.error_code == 0 and r.member_epoch == 1
        assert [tp.partitions for tp in r.assignment.topic_partitions] == [[0]]


def test_silent_member_is_removed_after_its_session_timeout():
    runner = BrokerRunner({"group.consumer.session.timeout.ms": "400"}).start()
    try:
        runner.create_topic("expiry", 2)
        with WireClient(runner.host, runner.port, timeout=10) as client:
            assert _hb(client, "gx", "quiet", 0, topics=("expiry",)).error_code == 0
            r = _hb(client, "gx", "alive", 0, topics=("expiry",))
            deadline = time.monotonic() + 20
            while True:  # keep "alive" heartbeating until "quiet" has been removed
                r = _hb(client, "gx", "alive", r.member_epoch, topics=None, rebalance=-1,
                        owned=[Struct(topic_id=t.topic_id, partitions=t.partitions)
                               for t in (r.assignment.topic_partitions if r.assignment else [])])
                assert r.error_code == 0
                d = client.request(69, 0, Struct(group_ids=["gx"], include_authorized_operations=False))
                if [m.member_id for m in d.groups[0].members] == ["alive"] or time.monotonic() > deadline:
                    break
                time.sleep(0.05)
            assert [m.member_id for m in d.groups[0].members] == ["alive"]
            assert _hb(client, "gx", "quiet", 1, topics=None, owned=None).error_code == E.UNKNOWN_MEMBER_ID
    finally:
        runner.stop()


def _members(described) -> dict:
    return {m.member_id: (m.member_epoch, m.instance_id,
                          [t.partitions for t in m.assignment.topic_partitions],
                          [t.partitions for t in m.target_assignment.topic_partitions])
            for m in described.members}


def _describe_when_loaded(client, group):
    deadline = time.monotonic() + 20
    while True:
        d = client.request(69, 1, Struct(group_ids=[group], include_authorized_operations=False)).groups[0]
        if d.error_code != E.COORDINATOR_LOAD_IN_PROGRESS or time.monotonic() > deadline:
            return d
        time.sleep(0.05)


def test_members_epochs_and_assignments_survive_restart(tmp_path):
    runner = BrokerRunner(OVERRIDES, data_dir=str(tmp_path)).start()
    try:
        runner.create_topic("persist", 2)
        with WireClient(runner.host, runner.port, timeout=10) as client:
            r1 = _hb(client, "gp", "p1", 0, topics=("persist",))
            tid = r1.assignment.topic_partitions[0].topic_id
            _hb(client, "gp", "p2", 0, topics=("persist",), instance="inst-2")
            owned = [Struct(topic_id=tid, partitions=[0, 1])]
            r1 = _hb(client, "gp", "p1", 1, topics=None, owned=owned, rebalance=-1)  # revokes one
            kept = r1.assignment.topic_partitions[0].partitions
            r1 = _hb(client, "gp", "p1", 1, topics=None, owned=[Struct(topic_id=tid, partitions=kept)],
                     rebalance=-1)
            before = _describe_when_loaded(client, "gp")
        runner.restart()
        with WireClient(runner.host, runner.port, timeout=10) as client:
            after = _describe_when_loaded(client, "gp")
            assert (after.group_epoch, after.assignment_epoch, after.group_state) == \
                (before.group_epoch, before.assignment_epoch, before.group_state)
            assert _members(after) == _members(before)
            # the member carries on at its epoch; then leaves, which a restart remembers (tombstones)
            r1 = _hb(client, "gp", "p1", r1.member_epoch, topics=None, rebalance=-1,
                     owned=[Struct(topic_id=tid, partitions=kept)])
            assert r1.error_code == 0
            assert _hb(client, "gp", "p1", -1, topics=None, owned=None, rebalance=-1).error_code == 0
        runner.restart()
        with WireClient(runner.host, runner.port, timeout=10) as client:
            after = _describe_when_loaded(client, "gp")
            assert [m.member_id for m in after.members] == ["p2"]
            assert after.group_epoch == before.group_epoch + 1
    finally:
        runner.stop()


def test_member_that_does_not_revoke_is_removed_after_its_rebalance_timeout(broker):
    broker.create_topic("wire-revoke", 2)
    group = f"r-{uuid.uuid4().hex[:6]}"
    with WireClient(broker.host, broker.port, timeout=10) as client:
        r = _hb(client, group, "slow", 0, topics=("wire-revoke",), rebalance=300)
        tid = r.assignment.topic_partitions[0].topic_id
        _hb(client, group, "new", 0, topics=("wire-revoke",))
        r = _hb(client, group, "slow", 1, topics=None, rebalance=-1,
                owned=[Struct(topic_id=tid, partitions=[0, 1])])
        assert r.member_epoch == 1 and len(r.assignment.topic_partitions[0].partitions) == 1  # must revoke
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:  # "slow" never confirms the revocation
            d = client.request(69, 0, Struct(group_ids=[group], include_authorized_operations=False))
            if [m.member_id for m in d.groups[0].members] == ["new"]:
                break
            time.sleep(0.05)
        assert [m.member_id for m in d.groups[0].members] == ["new"]
        r = _hb(client, group, "new", 2, topics=None, owned=[], rebalance=-1)
        assert r.error_code == 0 and r.member_epoch == 3
        assert sorted(r.assignment.topic_partitions[0].partitions) == [0, 1]


# -- units ----------------------------------------------------------------------------------------


def _coordinator(topics: dict[str, int]):
    from types import SimpleNamespace

    from minibroker.coordinator.consumer_group_coordinator import ConsumerGroupCoordinator

    infos = {name: SimpleNamespace(id=bytes([i + 1]) * 16, partitions=n)
             for i, (name, n) in enumerate(topics.items())}
    store = SimpleNamespace(records=[])
    store.append = lambda group_id, entries: store.records.extend(entries)
    gc = SimpleNamespace(broker=SimpleNamespace(config={}, logs=SimpleNamespace(topics=infos)), groups={},
                         loading=False, store=store, _closed=False,
                         _call_later=lambda ms, fn, *args: SimpleNamespace(cancel=lambda: None))
    return ConsumerGroupCoordinator(gc)


def _request(member_id, epoch, owned=None, *, join=False, **fields):
    from types import SimpleNamespace

    fields.setdefault("group_id", "sim")
    return SimpleNamespace(
        member_id=member_id, member_epoch=epoch, instance_id=None, rack_id=None,
        rebalance_timeout_ms=30000 if join else -1, subscribed_topic_names=["a", "b"] if join else None,
        subscribed_topic_regex=None, server_assignor=None,
        topic_partitions=[] if join else [SimpleNamespace(topic_id=t, partitions=sorted(ps))
                                          for t, ps in (owned or {}).items()], **fields)


@pytest.mark.parametrize("seed", range(20))
def test_random_joins_leaves_and_heartbeats_never_share_a_partition(seed):
    import random

    rnd = random.Random(seed)
    coordinator = _coordinator({"a": 5, "b": 3})
    clients: dict[str, tuple[int, dict]] = {}  # member id -> (epoch, owned {topic id: partitions})

    def heartbeat(member_id, join=False):
        epoch, owned = clients.get(member_id, (0, {}))
        r = coordinator.heartbeat(_request(member_id, 0 if join else epoch, owned, join=join), 1, "c", "/h")
        assert r.error == E.NONE, (r.error, r.message)
        if r.assignment is not None:  # the client drops what is gone and takes what is given
            owned = {t: set(ps) for t, ps in r.assignment.items() if ps}
        clients[member_id] = (r.member_epoch, owned)
        seen: set = set()
        for _, (_, parts) in clients.items():
            for t, ps in parts.items():
                for p in ps:
                    assert (t, p) not in seen, f"partition {(t, p)} owned twice"
                    seen.add((t, p))

    for step in range(60):
        action = rnd.random()
        if action < 0.2 and len(clients) < 6:
            heartbeat(f"m{step}", join=True)
        elif action < 0.3 and len(clients) > 1:
            gone = rnd.choice(sorted(clients))
            r = coordinator.heartbeat(_request(gone, -1), 1, "c", "/h")
            assert r.error == E.NONE
            del clients[gone]
        elif clients:
            heartbeat(rnd.choice(sorted(clients)))
    for _ in range(6):  # everyone heartbeats until the group is reconciled
        for member_id in sorted(clients):
            heartbeat(member_id)
    group = coordinator.groups["sim"]
    assert group.state == "Stable"
    counts = [sum(len(ps) for ps in owned.values()) for _, owned in clients.values()]
    assert sum(counts) == 8 and max(counts) - min(counts) <= 1


def test_failed_write_leaves_the_group_as_it_was():
    from minibroker.errors import KafkaError

    coordinator = _coordinator({"a": 2, "b": 1})
    assert coordinator.heartbeat(_request("m1", 0, join=True), 1, "c", "/h").member_epoch == 1
    group = coordinator.groups["sim"]

    def state():
        return group.group_epoch, group.assignment_epoch, sorted(group.members), dict(group.partition_epochs)

    before = state()

    def refuse(group_id, entries):
        raise KafkaError(E.NOT_COORDINATOR, "disk full")

    coordinator.gc.store.append = refuse
    r = coordinator.heartbeat(_request("m2", 0, join=True), 1, "c", "/h")
    assert r.error == E.NOT_COORDINATOR
    assert state() == before
    fresh = coordinator.heartbeat(_request("x", 0, join=True, group_id="other"), 1, "c", "/h")
    assert fresh.error == E.NOT_COORDINATOR and "other" not in coordinator.groups


def test_uniform_assignor_is_balanced_and_sticky():
    members = {"a": {"t"}, "b": {"t"}}
    first = uniform_assign(members, {"t": 4})
    assert sorted(len(first[m]["t"]) for m in members) == [2, 2]
    second = uniform_assign({**members, "c": {"t"}}, {"t": 4}, first)
    assert sorted(sum(len(ps) for ps in second[m].values()) for m in "abc") == [1, 1, 2]
    for m in "ab":  # previous owners keep partitions
        assert second[m]["t"] <= first[m]["t"] and second[m]["t"]
    hetero = uniform_assign({"a": {"x"}, "b": {"x", "y"}}, {"x": 2, "y": 2})
    assert hetero["a"] == {"x": {0, 1}} and hetero["b"] == {"y": {0, 1}}


def test_range_assignor():
    out = range_assign({"b": {"t"}, "a": {"t"}}, {"t": 5})
    assert out == {"a": {"t": {0, 1, 2}}, "b": {"t": {3, 4}}}


def test_reconcile_revokes_before_assigning():
    m = ConsumerMember("m")
    m.member_epoch, m.assigned = 1, {b"t" * 8 * 2: {0, 1}}
    tid = b"t" * 16
    nxt = reconcile(m, 2, {tid: {0}}, lambda t, p: -1, [(tid, [0, 1])])
    assert nxt.state is MemberState.UNREVOKED_PARTITIONS and nxt.member_epoch == 1
    assert nxt.assigned == {tid: {0}} and nxt.pending_revocation == {tid: {1}}
    done = reconcile(nxt, 2, {tid: {0}}, lambda t, p: -1, [(tid, [0])])
    assert done.state is MemberState.STABLE and done.member_epoch == 2 and done.previous_member_epoch == 1
    newcomer = ConsumerMember("n")
    waiting = reconcile(newcomer, 2, {tid: {1}}, lambda t, p: 1, [])
    assert waiting.state is MemberState.UNRELEASED_PARTITIONS and waiting.assigned == {}


@pytest.mark.parametrize("pattern,matches,misses", [
    ("orders-.*", ["orders-1"], ["xorders-1", "orders"]),
    ("\\Qa.b\\E.*", ["a.b", "a.bc"], ["axb"]),
    ("[[:digit:]]+", ["123"], ["12a"]),
    ("(?<name>ab)c", ["abc"], ["ab"]),
    ("(?i)topic", ["TOPIC"], ["topics"]),
    # RE2 takes flags anywhere, for the rest of the group, alternatives included
    ("x(?i)y", ["xY"], ["XY"]),
    ("(a(?i)b|c)d", ["aBd", "Cd"], ["ABd", "aBD"]),
    ("a{,3}", ["a{,3}"], ["aaa"]),  # not a repetition in RE2: literal
])
def test_re2_translation(pattern, matches, misses):
    regex = compile_re2(pattern)
    assert all(regex.fullmatch(t) for t in matches)
    assert not any(regex.fullmatch(t) for t in misses)


@pytest.mark.parametrize("pattern", ["(?=a)", "(?<!a)b", "(a)\\1", "a++", "(?>a)", "(", "[a", "a{1001}",
                                     "a{2,1001}", "\\Z", "\\pQ", "\\p{Greekish}", "(?-)a"])
def test_re2_rejects(pattern):
    with pytest.raises(RegexError):
        compile_re2(pattern)


@pytest.mark.parametrize("pattern,matches,misses", [
    # RE2/J takes these; Python's engine could backtrack on them for long, so they are matched by walking
    # position sets (INVALID_REGULAR_EXPRESSION before)
    ("(^.*aa.*)|(^.*bb.*)", ["xaay", "bb"], ["ab", "abab"]),
    ("(a+)+b", ["aab"], ["a" * 60]),
    ("(a|aa)*b", ["aaab", "b"], ["a" * 60 + "c"]),
    ("a*b*c*d*", ["", "abcd", "aacd"], ["dcba"]),
    (".*a.*b.*c.*d.*e", ["abcde", "xaxbxcxdxe"], ["x" * 240 + "abcd"]),
    ("(?U)a+b", ["aab"], ["ba"]),
    ("\\pL+[\\p{Nd}_]\\PL", ["ab_1", "Q99"], ["ab_c", "1_1"]),
    ("(?i)(TOP|sub)\\b.*", ["top", "SUB.x"], ["topx"]),
    ("(a?){60}a{60}c", ["a" * 60 + "c"], ["a" * 120 + "b"]),  # the classic exponential one
    ("(.*a){20}c", ["a" * 20 + "c"], ["a" * 200 + "b"]),
    ("(a|aa)(a|aa)(a|aa)(a|aa)c", ["aaaac", "aaaaaaaac"], ["a" * 9 + "c", "a" * 200]),
])
def test_re2_patterns_python_would_backtrack_on(pattern, matches, misses):
    regex = compile_re2(pattern)
    assert all(regex.fullmatch(t) for t in matches)
    assert not any(regex.fullmatch(t) for t in misses)


def test_position_sets_agree_with_python_re():
    # the non-backtracking matcher answers as Python's engine on the same translated source
    patterns = ["a*b", "(a|b)*c?", "x{2,3}y", "[^a-c]+", "(?i)ab[cd]", "^a.c$", "\\bfoo\\B.*", "(ab|a)(bc|c)",
                "[\\w.-]{1,5}", "(?:a{0,2}b)+", "\\d+\\D\\s?", "(a*)*", "(x|xy)z*?"]
    names = ["", "a", "b", "ab", "abc", "aab", "xxy", "xxxy", "ABC", "Abd", "abcc", "foo", "foox", "foo.x",
             "a.c", "ac", "abcz", "a-b.c", "12x", "12 ", "aabab", "xyzz", "bbbc", "dd"]
    for pattern in patterns:
        source, _ = translate_re2(pattern)
        walked, backtracked = PositionSetMatcher(source), re.compile(source, re.ASCII)
        for name in names:
            assert bool(walked.fullmatch(name)) == bool(backtracked.fullmatch(name)), (pattern, name)


def test_position_sets_agree_with_python_re_on_random_patterns():
    # small random patterns over a two-letter alphabet, every name up to five letters: both engines agree
    import itertools
    import random

    rng = random.Random(848)

    def pattern(depth: int) -> str:
        roll = rng.random()
        if depth == 0 or roll < 0.3:
            return rng.choice(["a", "b", ".", "[ab]", "[^a]", "^", "$", "\\b"])
        if roll < 0.55:
            return pattern(depth - 1) + pattern(depth - 1)
        if roll < 0.7:
            return f"({pattern(depth - 1)}|{pattern(depth - 1)})"
        atom = f"(?:{pattern(depth - 1)})"
        return atom + rng.choice(["*", "+", "?", "{2}", "{0,2}", "{1,}", "*?"])

    names = ["".join(letters) for size in range(6) for letters in itertools.product("ab", repeat=size)]
    for _ in range(300):
        source = pattern(4)
        walked, backtracked = PositionSetMatcher(source), re.compile(source, re.ASCII)
        for name in names:
            assert bool(walked.fullmatch(name)) == bool(backtracked.fullmatch(name)), (source, name)


def test_consumer_group_records_round_trip():
    tid = bytes(range(16))
    assert decode_key(encode_consumer_group_key(8, "g", "m")) == (8, "g", "m")
    assert decode_key(encode_consumer_group_key(3, "g")) == (3, "g", "")
    meta = MemberMetadataValue("i", None, "c", "/1.2.3.4", ["a", "b"], "x.*", 300000, "range")
    assert decode_member_metadata_value(encode_member_metadata_value(meta)) == meta
    cur = CurrentAssignmentValue(3, 2, 1, {tid: {0, 2}}, {tid: {1}})
    assert decode_current_assignment_value(encode_current_assignment_value(cur)) == cur
    partitions = {"t": (tid, 4)}
    assert decode_partition_metadata_value(encode_partition_metadata_value(partitions)) == partitions
