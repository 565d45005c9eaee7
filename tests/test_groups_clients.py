"""Consumer groups with real clients over real sockets: kafka-python, aiokafka, confluent-kafka, kcat."""

from __future__ import annotations

import asyncio
import subprocess
import threading
import time

import pytest
from waiting import wait_until

from minibroker.testing import BrokerRunner
from minibroker.tools.wire import WireClient

# kafka-python leaks the socket of a failed connect (seen across broker restarts) and GC reports it later
pytestmark = [pytest.mark.filterwarnings("ignore::ResourceWarning"),
              pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")]

SESSION_MS = 6000


@pytest.fixture
def broker():
    runner = BrokerRunner()
    runner.start()
    yield runner
    runner.cleanup()


def produce_per_partition(broker, topic: str, partitions: int, per_partition: int, tag: str) -> set[str]:
    values = set()
    for p in range(partitions):
        batch = [f"{tag}-{p}-{i}" for i in range(per_partition)]
        broker.produce(topic, batch, partition=p)
        values.update(batch)
    return values


class PythonMember(threading.Thread):
    """A kafka-python group consumer polling on its own thread, committing after every poll."""

    def __init__(self, broker, group: str, topic: str, **config):
        super().__init__(daemon=True)
        from kafka import KafkaConsumer

        self.consumer = KafkaConsumer(topic, bootstrap_servers=broker.bootstrap_servers, group_id=group,
                                      auto_offset_reset="earliest", session_timeout_ms=SESSION_MS,
                                      heartbeat_interval_ms=500, enable_auto_commit=False, **config)
        self.values: list[str] = []
        self.assigned: set[int] = set()
        self.running = True
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            while self.running:
                records = self.consumer.poll(timeout_ms=300)
                for recs in records.values():
                    self.values.extend(r.value.decode() for r in recs)
                self.assigned = {tp.partition for tp in self.consumer.assignment()}
                if records:
                    self.consumer.commit()
        except BaseException as e:  # reported by the test
            self.error = e
        finally:
            self.consumer.close()

    def stop(self) -> None:
        self.running = False
        self.join(15)
        assert self.error is None, self.error


@pytest.mark.slow
def test_kafka_python_three_members_rebalance_and_resume_after_restart(broker):
    from kafka import KafkaAdminClient

    broker.create_topic("orders", 6)
    sent = produce_per_partition(broker, "orders", 6, 10, "a")
    members = [PythonMember(broker, "g3", "orders") for _ in range(3)]
    for m in members:
        m.start()
    wait_until(lambda: sorted(len(m.assigned) for m in members) == [2, 2, 2], what="2/2/2",
               seen=lambda: [m.assigned for m in members])
    assert set().union(*(m.assigned for m in members)) == set(range(6))
    members[0].stop()  # close: LeaveGroup, the others take over within a rebalance
    t0 = time.monotonic()
    wait_until(lambda: sorted(len(m.assigned) for m in members[1:]) == [3, 3], what="3/3",
               seen=lambda: [m.assigned for m in members[1:]])
    assert time.monotonic() - t0 < SESSION_MS / 1000
    sent |= produce_per_partition(broker, "orders", 6, 5, "b")
    wait_until(lambda: set().union(*(m.values for m in members)) >= sent, what="every record")
    for m in members[1:]:
        m.stop()
    seen = [v for m in members for v in m.values]
    assert set(seen) == sent  # nothing lost (a rebalance may redeliver uncommitted records)

    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap_servers)
    try:
        offsets = admin.list_group_offsets({"g3": None})["g3"]
        assert {tp.partition: om.offset for tp, om in offsets.items()} == {p: 15 for p in range(6)}
    finally:
        admin.close()

    broker.restart()
    newer = produce_per_partition(broker, "orders", 6, 2, "c")
    late = PythonMember(broker, "g3", "orders")
    late.start()
    wait_until(lambda: set(late.values) >= newer, what="records after the restart")
    time.sleep(0.5)
    late.stop()
    assert sorted(late.values) == sorted(newer)  # resumed exactly at the committed offsets


def test_aiokafka_group(broker):
    from aiokafka import AIOKafkaConsumer

    broker.create_topic("aio", 4)
    sent = produce_per_partition(broker, "aio", 4, 5, "x")

    async def run() -> tuple[list[set[int]], list[str]]:
        consumers = [AIOKafkaConsumer("aio", bootstrap_servers=broker.bootstrap_servers, group_id="ga",
                                      auto_offset_reset="earliest", session_timeout_ms=SESSION_MS,
                                      heartbeat_interval_ms=500, enable_auto_commit=False) for _ in range(2)]
        for c in consumers:
            await c.start()
        got: list[str] = []
        try:
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                for c in consumers:
                    batches = await c.getmany(timeout_ms=200)
                    for recs in batches.values():
                        got.extend(r.value.decode() for r in recs)
                    if batches:
                        await c.commit()
                if (sorted(len(c.assignment()) for c in consumers) == [2, 2] and set(got) >= sent):
                    break
            return [{tp.partition for tp in c.assignment()} for c in consumers], got
        finally:
            for c in consumers:
                await c.stop()

    assignments, got = asyncio.run(run())
    assert sorted(len(a) for a in assignments) == [2, 2] and set().union(*assignments) == set(range(4))
    assert set(got) == sent
    with WireClient(broker.host, broker.port) as c:
        r = c.request(9, 7, {"group_id": "ga", "topics": None, "require_stable": False})
    assert r.error_code == 0
    assert {p.partition_index: p.committed_offset for t in r.topics for p in t.partitions} == \
        {p: 5 for p in range(4)}


def _confluent_consumer(broker, group: str, **extra):
    from confluent_kafka import Consumer

    return Consumer({"bootstrap.servers": broker.bootstrap_servers, "group.id": group,
                     "auto.offset.reset": "earliest", "session.timeout.ms": SESSION_MS,
                     "heartbeat.interval.ms": 500, "enable.auto.commit": False, **extra})


class ConfluentMember(threading.Thread):
    def __init__(self, broker, group: str, topic: str, **extra):
        super().__init__(daemon=True)
        self.consumer = _confluent_consumer(broker, group, **extra)
        self.consumer.subscribe([topic])
        self.values: list[str] = []
        self.assigned: set[int] = set()
        self.running = True

    def run(self) -> None:
        try:
            while self.running:
                msg = self.consumer.poll(0.2)
                if msg is not None and msg.error() is None:
                    self.values.append(msg.value().decode())
                    self.consumer.commit(message=msg, asynchronous=False)
                self.assigned = {tp.partition for tp in self.consumer.assignment()}
        finally:
            self.consumer.close()

    def stop(self) -> None:
        self.running = False
        self.join(15)


def test_confluent_kafka_group(broker):
    broker.create_topic("cf", 4)
    sent = produce_per_partition(broker, "cf", 4, 5, "y")
    members = [ConfluentMember(broker, "gc", "cf") for _ in range(2)]
    for m in members:
        m.start()
    wait_until(lambda: sorted(len(m.assigned) for m in members) == [2, 2], what="2/2",
               seen=lambda: [m.assigned for m in members])
    wait_until(lambda: set(members[0].values + members[1].values) >= sent, what="every record",
               seen=lambda: sent - set(members[0].values + members[1].values))
    members[1].stop()
    wait_until(lambda: len(members[0].assigned) == 4, what="the survivor owns all partitions")
    members[0].stop()
    assert set(members[0].values + members[1].values) == sent


def test_mixed_group(broker):
    """kafka-python, aiokafka (roundrobin only) and librdkafka agree on roundrobin, 2 partitions each."""
    from aiokafka import AIOKafkaConsumer

    broker.create_topic("mixed", 6)
    sent = produce_per_partition(broker, "mixed", 6, 3, "m")
    py = PythonMember(broker, "gm", "mixed")
    cf = ConfluentMember(broker, "gm", "mixed")
    aio_state = {"assigned": set(), "values": [], "run": True}

    def aio_thread():
        async def run():
            c = AIOKafkaConsumer("mixed", bootstrap_servers=broker.bootstrap_servers, group_id="gm",
                                 auto_offset_reset="earliest", session_timeout_ms=SESSION_MS,
                                 heartbeat_interval_ms=500, enable_auto_commit=False)
            await c.start()
            try:
                while aio_state["run"]:
                    batches = await c.getmany(timeout_ms=200)
                    for recs in batches.values():
                        aio_state["values"].extend(r.value.decode() for r in recs)
                    if batches:
                        await c.commit()
                    aio_state["assigned"] = {tp.partition for tp in c.assignment()}
            finally:
                await c.stop()
        asyncio.run(run())

    aio = threading.Thread(target=aio_thread, daemon=True)
    for t in (py, cf, aio):
        t.start()
    try:
        wait_until(lambda: sorted(map(len, (py.assigned, cf.assigned, aio_state["assigned"]))) == [2, 2, 2],
                   timeout=40, what="2/2/2 across three client libraries",
                   seen=lambda: {"kafka-python": py.assigned, "confluent-kafka": cf.assigned,
                                 "aiokafka": aio_state["assigned"]})
        wait_until(lambda: set(py.values + cf.values + aio_state["values"]) >= sent, what="every record")
        from kafka import KafkaAdminClient

        admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap_servers)
        try:
            described = admin.describe_groups(["gm"])["gm"]
            assert described["group_state"] == "Stable" and described["protocol_data"] == "roundrobin"
            assert len(described["members"]) == 3
        finally:
            admin.close()
    finally:
        aio_state["run"] = False
        py.stop()
        cf.stop()
        aio.join(15)


def test_kcat_balanced_consumer(broker, kcat):
    broker.create_topic("kc", 3)
    sent = produce_per_partition(broker, "kc", 3, 4, "k")
    out = subprocess.run([kcat, "-b", broker.bootstrap_servers, "-G", "gk", "-o", "beginning", "-e", "-q",
                          "-f", "%s\\n", "-X", f"session.timeout.ms={SESSION_MS}", "kc"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert sorted(out.stdout.split()) == sorted(sent)
    # kcat committed on the way out: a second run has nothing left to read
    wait_until(lambda: _committed(broker, "gk", "kc", 3) == {p: 4 for p in range(3)}, timeout=10,
               what="kcat's commits")


def _committed(broker, group: str, topic: str, partitions: int) -> dict[int, int]:
    with WireClient(broker.host, broker.port) as c:
        r = c.request(9, 8, {"groups": [{"group_id": group, "topics": [
            {"name": topic, "partition_indexes": list(range(partitions))}]}], "require_stable": False})
    return {p.partition_index: p.committed_offset for t in r.groups[0].topics for p in t.partitions}


@pytest.mark.slow
def test_static_members_survive_broker_restart_and_member_restart(broker):
    broker.create_topic("st", 4)
    members = [PythonMember(broker, "gs", "st", group_instance_id=f"inst-{i}") for i in range(2)]
    for m in members:
        m.start()
    wait_until(lambda: sorted(len(m.assigned) for m in members) == [2, 2], what="2/2",
               seen=lambda: [m.assigned for m in members])
    group = broker.broker.groups.groups["gs"]
    generation = group.generation_id
    before = [set(m.assigned) for m in members]

    broker.restart()
    wait_until(lambda: not broker.broker.groups.loading, what="the group loaded")
    time.sleep(2.5)  # several heartbeat intervals across the reconnect
    group = broker.broker.groups.groups["gs"]
    assert group.state.value == "Stable" and group.generation_id == generation
    assert [set(m.assigned) for m in members] == before

    # a static member restarts (no LeaveGroup for static members): same generation, same partitions
    members[0].stop()
    again = PythonMember(broker, "gs", "st", group_instance_id="inst-0")
    again.start()
    wait_until(lambda: again.assigned == before[0], what="the restarted static member's partitions")
    assert broker.broker.groups.groups["gs"].generation_id == generation
    again.stop()
    members[1].stop()


def test_admin_list_describe_offsets_delete(broker):
    from kafka import KafkaAdminClient, KafkaConsumer, TopicPartition
    from kafka.structs import OffsetAndMetadata

    broker.create_topic("adm", 2)
    broker.produce("adm", ["a", "b", "c"], partition=0)
    # a simple (group-less) commit
    simple = KafkaConsumer(bootstrap_servers=broker.bootstrap_servers, group_id="simple-g",
                           enable_auto_commit=False)
    simple.commit({TopicPartition("adm", 0): OffsetAndMetadata(2, "meta", -1)})
    simple.close()
    member = PythonMember(broker, "active-g", "adm")
    member.start()
    wait_until(lambda: len(member.assigned) == 2, what="assignment")
    wait_until(lambda: len(member.values) == 3, what="records")
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap_servers)
    try:
        groups = {g["group_id"]: g for g in admin.list_groups()}
        assert (groups["simple-g"]["protocol_type"], groups["simple-g"]["group_state"]) == ("", "Empty")
        active_row = groups["active-g"]
        assert (active_row["protocol_type"], active_row["group_state"]) == ("consumer", "Stable")
        assert {g["group_id"] for g in admin.list_groups(states_filter=["Empty"])} >= {"simple-g"}
        assert "active-g" not in {g["group_id"] for g in admin.list_groups(states_filter=["Empty"])}
        described = admin.describe_groups(["active-g", "simple-g", "missing-g"])
        active, simple_d = described["active-g"], described["simple-g"]
        assert (active["group_state"], active["protocol_type"], active["protocol_data"]) == \
            ("Stable", "consumer", "range")
        assert len(active["members"]) == 1 and active["error"] is None
        (m,) = active["members"]
        assert m["member_metadata"]["topics"] == ["adm"]
        assigned = m["member_assignment"]["assigned_partitions"]
        assert [(a["topic"], sorted(a["partitions"])) for a in assigned] == [("adm", [0, 1])]
        assert (simple_d["group_state"], simple_d["protocol_type"], simple_d["members"]) == ("Empty", "", [])
        assert described["missing-g"]["group_state"] == "Dead"
        offsets = admin.list_group_offsets({"simple-g": None})["simple-g"]
        assert offsets[TopicPartition("adm", 0)].offset == 2
        assert offsets[TopicPartition("adm", 0)].metadata == "meta"
        tp0 = TopicPartition("adm", 0)
        wait_until(lambda: tp0 in admin.list_group_offsets({"active-g": None})["active-g"],
                   what="the member's commit")
        deleted = dict(admin.delete_groups(["simple-g", "active-g", "missing-g"]))
        assert deleted == {"simple-g": "OK", "active-g": "NonEmptyGroupError",
                           "missing-g": "GroupIdNotFoundError"}
        assert "simple-g" not in {g["group_id"] for g in admin.list_groups()}
    finally:
        admin.close()
        member.stop()


def _wire_join(c, group: str, member_id: str = "") -> object:
    return c.request(11, 1, {"group_id": group, "session_timeout_ms": 30000, "rebalance_timeout_ms": 30000,
                             "member_id": member_id, "protocol_type": "consumer",
                             "protocols": [{"name": "range", "metadata": b""}]})


def _wire_commit(c, group: str, generation: int, member_id: str, topic: str) -> int:
    r = c.request(8, 2, {"group_id": group, "generation_id_or_member_epoch": generation,
                         "member_id": member_id, "retention_time_ms": -1,
                         "topics": [{"name": topic, "partitions": [
                             {"partition_index": 0, "committed_offset": 1, "committed_metadata": ""}]}]})
    return r.topics[0].partitions[0].error_code


def test_commit_while_completing_rebalance_checks_member_then_generation(broker):
    # Kafka checks an OffsetCommit's member, then its generation, and only then the group state: a
    # commit racing a rebalance gets UNKNOWN_MEMBER_ID 25 or ILLEGAL_GENERATION 22 (rejoin), not
    # REBALANCE_IN_PROGRESS 27 (which says the sender is a member of the current generation)
    from confluent_kafka import Consumer, KafkaError, KafkaException
    from confluent_kafka import TopicPartition as CTP
    from kafka import KafkaConsumer, TopicPartition
    from kafka.errors import CommitFailedError, UnknownMemberIdError
    from kafka.structs import OffsetAndMetadata

    broker.create_topic("race")
    with WireClient("127.0.0.1", broker.port, timeout=30) as w1, \
            WireClient("127.0.0.1", broker.port, timeout=30) as w2:
        first = _wire_join(w1, "rg")
        assert first.error_code == 0
        w1.request(14, 1, {"group_id": "rg", "generation_id": first.generation_id,
                           "member_id": first.member_id, "assignments": []})
        # a second member joins; the group waits for the first to rejoin, then completes the join and
        # stays CompletingRebalance while the leader (w1) holds back its SyncGroup
        joined = {}
        thread = threading.Thread(target=lambda: joined.setdefault("w2", _wire_join(w2, "rg")))
        thread.start()
        wait_until(lambda: broker.broker.groups.groups["rg"].state.value == "PreparingRebalance",
                   what="the rebalance")
        again = _wire_join(w1, "rg", first.member_id)
        thread.join(10)
        second = joined["w2"]
        assert again.generation_id == second.generation_id == first.generation_id + 1
        assert broker.broker.groups.groups["rg"].state.value == "CompletingRebalance"
        # real clients committing by hand (assign(), no membership) into the rebalancing group
        consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap_servers, group_id="rg",
                                 enable_auto_commit=False)
        try:
            consumer.assign([TopicPartition("race", 0)])
            with pytest.raises(CommitFailedError) as exc:
                consumer.commit({TopicPartition("race", 0): OffsetAndMetadata(1, "", -1)})
            assert isinstance(exc.value.args[0], UnknownMemberIdError)
        finally:
            consumer.close()
        ck = Consumer({"bootstrap.servers": broker.bootstrap_servers, "group.id": "rg",
                       "enable.auto.commit": False})
        try:
            ck.assign([CTP("race", 0, 1)])
            with pytest.raises(KafkaException) as exc:
                ck.commit(offsets=[CTP("race", 0, 1)], asynchronous=False)
            assert exc.value.args[0].code() == KafkaError.UNKNOWN_MEMBER_ID
        finally:
            ck.close()

        # on the wire: a member of the previous generation, an unknown member, a current member
        with WireClient("127.0.0.1", broker.port) as c:
            assert _wire_commit(c, "rg", first.generation_id, second.member_id, "race") == 22
            assert _wire_commit(c, "rg", second.generation_id, "nobody", "race") == 25
            assert _wire_commit(c, "rg", second.generation_id, second.member_id, "race") == 27
