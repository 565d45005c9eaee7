"""Online migration between classic and consumer (KIP-848) groups (`group.consumer.migration.policy`):
kafka-python (classic) consumers replaced one by one by confluent-kafka consumers with
group.protocol=consumer and back, with no record lost or consumed twice and the committed offsets kept;
the policy `disabled`; the ClassicMemberMetadata record field."""

from __future__ import annotations

import threading
import time
import uuid

import pytest

from minibroker.coordinator.consumer_protocol import decode_assignment, encode_assignment
from minibroker.coordinator.group_records import (
    ClassicMemberMetadata,
    MemberMetadataValue,
    decode_member_metadata_value,
    encode_member_metadata_value,
)
from minibroker.errors import ErrorCode as E
from minibroker.protocol.codec import Struct
from minibroker.testing import BrokerRunner
from minibroker.tools.wire import WireClient

confluent_kafka = pytest.importorskip("confluent_kafka")
kafka = pytest.importorskip("kafka")
from confluent_kafka import Consumer, Producer  # noqa: E402
from kafka import KafkaConsumer  # noqa: E402
from kafka.errors import CommitFailedError, RebalanceInProgressError  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::ResourceWarning")

OVERRIDES = {"group.consumer.heartbeat.interval.ms": "300", "group.consumer.session.timeout.ms": "6000"}
PARTITIONS = 4


@pytest.fixture(scope="module")
def broker():
    runner = BrokerRunner(OVERRIDES).start()
    yield runner
    runner.stop()


class Seen:
    """Every record consumed, by (partition, offset), and by whom."""

    def __init__(self) -> None:
        self.records: list[tuple[int, int, str]] = []

    def add(self, partition: int, offset: int, who: str) -> None:
        self.records.append((partition, offset, who))


class Polled:
    """A consumer polled in its own thread, as applications do."""

    owned: frozenset[int] = frozenset()
    runner: BrokerRunner
    group: str
    seen: Seen

    def assigned(self) -> frozenset[int]:
        return self.owned

    def start(self) -> None:
        self._stop = threading.Event()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                self.poll()
                self.owned = self.assignment()  # read here: the client is used by this thread only
        except BaseException as e:  # reported by check()
            self._error = e

    def check(self) -> None:
        if self._error is not None:
            raise AssertionError(f"{self.name} failed") from self._error

    def halt(self) -> None:
        self._stop.set()
        self._thread.join(30)
        self.check()


class Classic(Polled):
    """A kafka-python consumer (classic protocol). Auto-commit (with a long interval) is on only for
    kafka-python's synchronous commit before it gives partitions up in a rebalance: a synchronous
    rebalance listener may not block in kafka-python 3.

    The consumer has the topic's metadata before it first joins. kafka-python (3.0.12) otherwise hangs
    for good now and then: a first member joins before its metadata names the topic, so as the group's
    leader it assigns nothing; the metadata then arrives and the leader rejoins by itself (its assignment
    snapshot differs from the metadata). If that JoinGroup/SyncGroup round outlasts the poll that started
    it (100 ms, easily spent on a loaded machine), the next poll finds nothing to rejoin for (the leader's
    assignment already took the new snapshot) and never collects the finished round: no partitions, no
    heartbeat, removed at its session timeout and never back (1 run in 10 with a CPU-bound process on
    one core; kafka-python's log: "coordinator.poll: timeout in ensure_active_group", the SyncGroup
    answer received, then no "Setting newly assigned partitions" and no heartbeat)."""

    def __init__(self, runner, group: str, topic: str, seen: Seen, name: str):
        self.name, self.seen, self.runner, self.group = name, seen, runner, group
        self.consumer = KafkaConsumer(
            topic, bootstrap_servers=runner.bootstrap_servers, group_id=group, enable_auto_commit=True,
            auto_commit_interval_ms=600000, auto_offset_reset="earliest", heartbeat_interval_ms=300,
            session_timeout_ms=6000, max_poll_records=20, client_id=name)
        # a blocking metadata request for every topic, answered (and the coordinator's snapshot taken, by a
        # listener of the same update, on kafka-python's I/O thread) before the first poll sends JoinGroup
        assert topic in self.consumer.topics()
        self.start()

    def poll(self) -> None:
        for tp, records in self.consumer.poll(timeout_ms=100).items():
            for r in records:
                self.seen.add(tp.partition, r.offset, self.name)

    def assignment(self) -> frozenset[int]:
        return frozenset(tp.partition for tp in self.consumer.assignment())

    def close(self) -> None:
        self.halt()
        deadline = time.monotonic() + 20
        while True:  # kafka-python refuses to commit while it rejoins: poll until it has rejoined
            try:
                self.consumer.commit()
                break
            except (RebalanceInProgressError, CommitFailedError) as e:
                if time.monotonic() > deadline:
                    raise AssertionError(f"{self.name} could not commit in 20 s before closing, last: {e!r}; "
                                         f"{_group_view(self.runner, self.group)}") from e
                self.poll()
        self.consumer.close()


class Modern(Polled):
    """A confluent-kafka consumer with group.protocol=consumer, committing synchronously on revoke."""

    def __init__(self, runner, group: str, topic: str, seen: Seen, name: str):
        self.name, self.seen, self.runner, self.group = name, seen, runner, group
        self.consumer = Consumer({"bootstrap.servers": runner.bootstrap_servers, "group.id": group,
                                  "group.protocol": "consumer", "enable.auto.commit": False,
                                  "auto.offset.reset": "earliest", "client.id": name})

        def on_revoke(consumer, partitions):
            self._commit()

        self.consumer.subscribe([topic], on_revoke=on_revoke)
        self.start()

    def _commit(self) -> None:
        """A commit that races the heartbeat moving this member to a new epoch (another member joined or
        left; this one keeps its partitions) is refused with STALE_MEMBER_EPOCH, as Kafka refuses it:
        librdkafka hands that error to a manual commit (the Java consumer retries it itself) and sends a
        heartbeat at once, whose answer gives the new epoch. Commit again until then."""
        deadline = time.monotonic() + 20
        while True:
            try:
                self.consumer.commit(asynchronous=False)
                return
            except confluent_kafka.KafkaException as e:
                code = e.args[0].code()
                if code == confluent_kafka.KafkaError._NO_OFFSET:
                    return
                if code != confluent_kafka.KafkaError.STALE_MEMBER_EPOCH:
                    raise
                if time.monotonic() > deadline:
                    raise AssertionError(f"{self.name}: commits refused for 20 s, last: {e}; "
                                         f"{_group_view(self.runner, self.group)}") from e
                time.sleep(0.05)

    def poll(self) -> None:
        for msg in self.consumer.consume(num_messages=20, timeout=0.1):
            if msg.error() is None:
                self.seen.add(msg.partition(), msg.offset(), self.name)

    def assignment(self) -> frozenset[int]:
        return frozenset(tp.partition for tp in self.consumer.assignment())

    def close(self) -> None:
        self.halt()
        self._commit()
        self.consumer.close()


def _produce(runner, topic: str, count: int, start: int) -> None:
    p = Producer({"bootstrap.servers": runner.bootstrap_servers})
    for i in range(start, start + count):
        p.produce(topic, value=str(i).encode(), partition=i % PARTITIONS)
    assert p.flush(10) == 0


def _drive(members, until, what: str, timeout: float = 45.0) -> None:
    """Wait until ``until()`` holds while every member polls in its thread; on timeout, say what the
    members and the broker last had."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for m in members:
            m.check()
        if until():
            return
        time.sleep(0.05)  # the members' threads poll; this only re-checks the condition
    m = members[0]
    raise AssertionError(
        f"timed out after {timeout:.0f} s waiting for {what}: "
        + ", ".join(f"{m.name}={sorted(m.assigned())}" for m in members)
        + f"; {len(m.seen.records)} records consumed; {_group_view(m.runner, m.group)}")


def _group_view(runner, group: str) -> str:
    """The broker's view of a group, for failure messages: type, state and each member's partitions."""
    def parts(assignment) -> list[int]:
        return [p for t in assignment.topic_partitions for p in t.partitions]

    try:
        with WireClient(runner.host, runner.port, timeout=10) as wire:
            listed = wire.request(16, 5, Struct(states_filter=[], types_filter=[])).groups
            g = next((g for g in listed if g.group_id == group), None)
            if g is None:
                return f"broker: no group {group}"
            if g.group_type == "consumer":
                d = wire.request(69, 1, Struct(group_ids=[group], include_authorized_operations=False))
                d = d.groups[0]
                epochs = f"group epoch {d.group_epoch}, assignment epoch {d.assignment_epoch}"
                members = [f"{m.client_id}{' (classic)' if m.member_type == 0 else ''} at epoch "
                           f"{m.member_epoch} owns {parts(m.assignment)}, target {parts(m.target_assignment)}"
                           for m in d.members]
            else:
                d = wire.request(15, 5, Struct(groups=[group], include_authorized_operations=False))
                d = d.groups[0]
                epochs = f"protocol {d.protocol_data}"
                members = [f"{m.client_id} owns "
                           f"{decode_assignment(m.member_assignment) if m.member_assignment else {}}"
                           for m in d.members]
        members_text = "; ".join(members) or "none"
        return f"broker: {g.group_type} group {g.group_state}, {epochs}, members: {members_text}"
    except Exception as e:  # a failure message must not hide the failure
        return f"broker: no view of the group ({e!r})"


def _split(members) -> bool:
    """Every partition assigned to exactly one member, and every member has one."""
    owned = [p for m in members for p in m.assigned()]
    return sorted(owned) == list(range(PARTITIONS)) and all(m.assigned() for m in members)


def _group_type(runner, group: str) -> str:
    with WireClient(runner.host, runner.port, timeout=10) as wire:
        listed = wire.request(16, 5, Struct(states_filter=[], types_filter=[]))
    return {g.group_id: g.group_type for g in listed.groups}[group]


def _committed(runner, group: str, topic: str) -> dict[int, int]:
    c = Consumer({"bootstrap.servers": runner.bootstrap_servers, "group.id": group})
    try:
        parts = c.committed([confluent_kafka.TopicPartition(topic, p) for p in range(PARTITIONS)], timeout=10)
        return {tp.partition: tp.offset for tp in parts}
    finally:
        c.close()


def test_upgrade_and_downgrade_one_consumer_at_a_time(broker):
    topic, group = f"mig-{uuid.uuid4().hex[:6]}", f"mig-g-{uuid.uuid4().hex[:6]}"
    broker.create_topic(topic, PARTITIONS)
    seen, produced = Seen(), 0
    _produce(broker, topic, 40, produced)
    produced += 40
    k1, k2 = Classic(broker, group, topic, seen, "k1"), Classic(broker, group, topic, seen, "k2")
    members = [k1, k2]
    _drive(members, lambda: _split(members), "the classic group to split the partitions")
    assert _group_type(broker, group) == "classic"

    # upgrade: a consumer-protocol member joins the classic group, then the classic ones leave
    c1 = Modern(broker, group, topic, seen, "c1")
    members.append(c1)
    _drive(members, lambda: _split(members), "c1 to get partitions from the classic members")
    assert _group_type(broker, group) == "consumer"
    _produce(broker, topic, 40, produced)
    produced += 40
    k1.close()
    members.remove(k1)
    c2 = Modern(broker, group, topic, seen, "c2")
    members.append(c2)
    _drive(members, lambda: _split(members), "c2 to join the upgraded group")
    k2.close()
    members.remove(k2)
    _drive(members, lambda: _split(members), "the consumer members to take k2's partitions")
    _produce(broker, topic, 40, produced)
    produced += 40
    _drive(members, lambda: len(seen.records) >= produced, "the records so far")

    # downgrade: classic members join the consumer group, then the consumer-protocol ones leave
    k3 = Classic(broker, group, topic, seen, "k3")
    members.append(k3)
    _drive(members, lambda: _split(members), "k3 to join the consumer group as a classic member")
    c1.close()
    members.remove(c1)
    k4 = Classic(broker, group, topic, seen, "k4")
    members.append(k4)
    _drive(members, lambda: _split(members), "k4 to join")
    assert _group_type(broker, group) == "consumer"
    c2.close()
    members.remove(c2)
    _drive(members, lambda: _split(members) and _group_type(broker, group) == "classic",
           "the group to turn classic again")
    _produce(broker, topic, 40, produced)
    produced += 40
    _drive(members, lambda: len(seen.records) >= produced, "every record")
    for m in members:
        m.close()

    offsets = sorted((p, o) for p, o, _ in seen.records)
    assert len(offsets) == len(set(offsets)) == produced, "a record was lost or consumed twice"
    assert _committed(broker, group, topic) == {p: produced // PARTITIONS for p in range(PARTITIONS)}


def _heartbeat(wire, group: str, member_id: str, topic: str = "pol") -> Struct:
    return wire.request(68, 1, Struct(
        group_id=group, member_id=member_id, member_epoch=0, instance_id=None, rack_id=None,
        rebalance_timeout_ms=30000, subscribed_topic_names=[topic], subscribed_topic_regex=None,
        server_assignor=None, topic_partitions=[]))


def test_policy_disabled_refuses_online_upgrade_and_downgrade():
    runner = BrokerRunner({**OVERRIDES, "group.consumer.migration.policy": "disabled"}).start()
    try:
        runner.create_topic("pol", 2)
        seen = Seen()
        k1 = Classic(runner, "pol-classic", "pol", seen, "k1")
        _drive([k1], lambda: k1.assigned() == {0, 1}, "the classic member's assignment")
        with WireClient(runner.host, runner.port, timeout=10) as wire:
            r = _heartbeat(wire, "pol-classic", "m1")  # a classic group with members: no upgrade
            assert r.error_code == E.GROUP_ID_NOT_FOUND
            assert r.error_message == "Group pol-classic is not a consumer group."
        k1.close()
        # a consumer group: a classic member may join it (Kafka serves that whatever the policy), but
        # when the last consumer-protocol member leaves the group stays a consumer group
        c1 = Modern(runner, "pol-consumer", "pol", seen, "c1")
        _drive([c1], lambda: c1.assigned() == {0, 1}, "the consumer member's assignment")
        k2 = Classic(runner, "pol-consumer", "pol", seen, "k2")
        _drive([c1, k2], lambda: c1.assigned() and k2.assigned(), "the classic member to join")
        c1.close()
        _drive([k2], lambda: k2.assigned() == {0, 1}, "the classic member to take every partition")
        assert _group_type(runner, "pol-consumer") == "consumer"
        k2.close()
    finally:
        runner.stop()


def test_classic_member_metadata_round_trips_in_the_member_record():
    classic = ClassicMemberMetadata(45000, (("range", b"\x00\x01meta"), ("roundrobin", b"")))
    value = MemberMetadataValue("i", None, "client", "/127.0.0.1", ["a", "b"], None, 30000, None, classic)
    assert decode_member_metadata_value(encode_member_metadata_value(value)) == value
    plain = value._replace(classic=None)
    assert decode_member_metadata_value(encode_member_metadata_value(plain)) == plain


@pytest.mark.parametrize("version", [0, 1, 3])
def test_consumer_protocol_assignment_round_trips(version):
    data = encode_assignment(version, {"b": [2, 0], "a": [1]})
    assert int.from_bytes(data[:2], "big") == version
    assert decode_assignment(data) == {"a": [1], "b": [0, 2]}


def _subscription(topics: list[str]) -> bytes:
    from minibroker.protocol import codec

    return (1).to_bytes(2, "big") + codec.encode("ConsumerProtocolSubscription", 1, Struct(
        topics=topics, user_data=None, owned_partitions=[]))


def _describe_members(wire, group: str) -> dict[str, int]:
    deadline = time.monotonic() + 30
    while True:  # after a restart, until __consumer_offsets is loaded
        d = wire.request(69, 1, Struct(group_ids=[group], include_authorized_operations=False))
        if d.groups[0].error_code != E.COORDINATOR_LOAD_IN_PROGRESS or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert d.groups[0].error_code == 0
    return {m.member_id: m.member_type for m in d.groups[0].members}


def test_classic_members_of_an_upgraded_group_survive_a_restart(tmp_path):
    runner = BrokerRunner(OVERRIDES, data_dir=str(tmp_path)).start()
    group = "wire-mig"
    try:
        runner.create_topic("wm", 2)
        with WireClient(runner.host, runner.port, timeout=10) as wire:
            join = Struct(group_id=group, session_timeout_ms=30000, rebalance_timeout_ms=30000, member_id="",
                          group_instance_id=None, protocol_type="consumer",
                          protocols=[Struct(name="range", metadata=_subscription(["wm"]))], reason=None)
            r = wire.request(11, 5, join)
            assert r.error_code == E.MEMBER_ID_REQUIRED
            join.member_id = classic_id = r.member_id
            r = wire.request(11, 5, join)
            assert (r.error_code, r.generation_id, r.leader) == (0, 1, classic_id)
            mine = encode_assignment(1, {"wm": [0, 1]})
            r = wire.request(14, 3, Struct(group_id=group, generation_id=1, member_id=classic_id,
                                           group_instance_id=None,
                                           assignments=[Struct(member_id=classic_id, assignment=mine)]))
            assert r.error_code == 0
            # a consumer-protocol member upgrades the group; the classic member is told to rejoin
            r = _heartbeat(wire, group, "modern-1", "wm")
            assert r.error_code == 0
            assert _describe_members(wire, group) == {classic_id: 0, "modern-1": 1}
            heartbeat = Struct(group_id=group, generation_id=1, member_id=classic_id, group_instance_id=None)
            assert wire.request(12, 3, heartbeat).error_code == E.REBALANCE_IN_PROGRESS
    finally:
        runner.stop()
    runner = BrokerRunner(OVERRIDES, data_dir=str(tmp_path)).start()
    try:
        with WireClient(runner.host, runner.port, timeout=10) as wire:
            assert _describe_members(wire, group) == {classic_id: 0, "modern-1": 1}
            r = wire.request(11, 5, join)  # the classic member rejoins: it gives up a partition
            assert r.error_code == 0 and r.leader == "" and r.protocol_name == "range"
            r = wire.request(14, 3, Struct(group_id=group, generation_id=r.generation_id,
                                           member_id=classic_id, group_instance_id=None, assignments=[]))
            assert r.error_code == 0 and len(decode_assignment(r.assignment)["wm"]) == 1
            r = wire.request(13, 3, Struct(group_id=group, members=[Struct(member_id=classic_id,
                                                                           group_instance_id=None)]))
            assert r.error_code == 0 and r.members[0].error_code == 0
            assert _describe_members(wire, group) == {"modern-1": 1}
    finally:
        runner.stop()


def test_a_group_with_classic_members_is_described_as_kafka_4_describes_it(broker):
    # Kafka 4.x's DescribeGroups answers only classic groups: a consumer group, with classic members or
    # without, is "Dead" (v6: GROUP_ID_NOT_FOUND, "... is not a classic group."); ConsumerGroupDescribe,
    # which confluent-kafka's describe_consumer_groups uses, lists every member of either protocol
    from confluent_kafka.admin import AdminClient
    from kafka import KafkaAdminClient

    topic, group = f"mixed-{uuid.uuid4().hex[:6]}", f"g-{uuid.uuid4().hex[:6]}"
    broker.create_topic(topic, PARTITIONS)
    classic = Consumer({"bootstrap.servers": broker.bootstrap_servers, "group.id": group,
                        "group.protocol": "classic", "partition.assignment.strategy": "cooperative-sticky"})
    modern = Consumer({"bootstrap.servers": broker.bootstrap_servers, "group.id": group,
                       "group.protocol": "consumer"})
    admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
    try:
        classic.subscribe([topic])
        deadline = time.monotonic() + 20
        while not classic.assignment() and time.monotonic() < deadline:
            classic.poll(0.1)
        modern.subscribe([topic])
        while time.monotonic() < deadline and (len(classic.assignment()), len(modern.assignment())) != (2, 2):
            classic.poll(0.05)
            modern.poll(0.05)
        assert (len(classic.assignment()), len(modern.assignment())) == (2, 2)
        described = admin.describe_consumer_groups([group])[group].result(10)
        assert described.type == confluent_kafka.ConsumerGroupType.CONSUMER
        assert sorted(len(m.assignment.topic_partitions) for m in described.members) == [2, 2]
        python_admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap_servers)
        try:
            answer = python_admin.describe_groups([group])[group]
        finally:
            python_admin.close()
        assert (answer["group_state"], answer["members"]) == ("Dead", [])
        assert answer["error"] == f"[Error 69] GroupIdNotFoundError: Group {group} is not a classic group."
        with WireClient(broker.host, broker.port) as wire:
            r = wire.request(15, 5, {"groups": [group], "include_authorized_operations": False})
        assert (r.groups[0].error_code, r.groups[0].group_state, r.groups[0].members) == (0, "Dead", [])
    finally:
        classic.close()
        modern.close()
