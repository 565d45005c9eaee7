"""Share groups (KIP-932, issue 21): the share-group admin APIs over the wire.

DescribeShareGroupOffsets (start offsets and lag), AlterShareGroupOffsets, DeleteShareGroupOffsets,
DeleteGroups of a share group, topic deletion dropping share state, ``minibroker groups`` listing and
describing share groups, confluent_kafka.admin's view of them, and every API's authorization with an
authorizer on.
"""

from __future__ import annotations

import asyncio
import time

import pytest

from minibroker.errors import ErrorCode as E
from minibroker.protocol.codec import Struct
from minibroker.testing import BrokerRunner
from minibroker.tools.wire import WireClient

pytestmark = pytest.mark.filterwarnings("ignore::ResourceWarning")

SHARE_HEARTBEAT, SHARE_DESCRIBE, DESCRIBE_OFFSETS, ALTER_OFFSETS, DELETE_OFFSETS = 76, 77, 90, 91, 92
FIND_COORDINATOR, LIST_GROUPS, DELETE_GROUPS, CREATE_ACLS, CONSUMER_HEARTBEAT = 10, 16, 42, 30, 68
STANDARD = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"


@pytest.fixture(scope="module")
def broker():
    runner = BrokerRunner({}).start()
    yield runner
    runner.cleanup()


def on_loop(runner, fn, *args):
    """Call ``fn`` on the broker's event loop (the share state's owner) and return its result."""
    async def call():
        return fn(*args)

    return asyncio.run_coroutine_threadsafe(call(), runner._loop).result(10)


def hb(wire, group, member, epoch, topics=None):
    return wire.request(SHARE_HEARTBEAT, 1, Struct(group_id=group, member_id=member, member_epoch=epoch,
                                                   rack_id=None, subscribed_topic_names=topics))


def describe_offsets(wire, group, topics=None, version=1):
    body = Struct(groups=[Struct(group_id=group, topics=None if topics is None else [
        Struct(topic_name=t, partitions=ps) for t, ps in topics.items()])])
    return wire.request(DESCRIBE_OFFSETS, version, body).groups[0]


def offsets(group_answer) -> dict[tuple[str, int], tuple[int, int, int]]:
    return {(t.topic_name, p.partition_index): (p.start_offset, p.lag, p.error_code)
            for t in group_answer.topics for p in t.partitions}


def alter(wire, group, topics):
    return wire.request(ALTER_OFFSETS, 0, Struct(group_id=group, topics=[
        Struct(topic_name=t, partitions=[Struct(partition_index=p, start_offset=o) for p, o in ps.items()])
        for t, ps in topics.items()]))


def delete_offsets(wire, group, topics):
    body = Struct(group_id=group, topics=[Struct(topic_name=t) for t in topics])
    return wire.request(DELETE_OFFSETS, 0, body)


def test_describe_alter_and_delete_offsets(broker):
    broker.create_topic("sa-t", 2)
    broker.produce("sa-t", [b"r%d" % i for i in range(10)], partition=0)
    tid = bytes(broker.broker.logs.topics["sa-t"].id)
    state = broker.broker.share_state
    with WireClient(broker.host, broker.port) as wire:
        assert hb(wire, "g-admin", "m", 0, ["sa-t"]).error_code == 0
        on_loop(broker, state.initialize, "g-admin", tid, 0, 3, 0)
        g = describe_offsets(wire, "g-admin")
        assert g.error_code == 0 and offsets(g) == {("sa-t", 0): (3, 7, 0)}  # null topics: the state's
        assert [t.topic_id for t in g.topics] == [tid]
        g = describe_offsets(wire, "g-admin", {"sa-t": [0, 1], "sa-missing": [0]})
        assert offsets(g) == {("sa-t", 0): (3, 7, 0), ("sa-t", 1): (-1, -1, 0),
                              ("sa-missing", 0): (-1, -1, 0)}
        # no lag in v0
        assert offsets(describe_offsets(wire, "g-admin", version=0)) == {("sa-t", 0): (3, -1, 0)}
        assert offsets(describe_offsets(wire, "g-none", {"sa-t": [0]})) == {("sa-t", 0): (-1, -1, 0)}

        r = alter(wire, "g-admin", {"sa-t": {0: 5}})
        assert (r.error_code, r.responses) == (E.NON_EMPTY_GROUP, [])  # the member is still in
        assert hb(wire, "g-admin", "m", -1).error_code == 0
        r = alter(wire, "g-admin", {"sa-t": {0: 5, 1: 0, 9: 0}, "sa-missing": {0: 1}})
        assert r.error_code == 0
        errors = {(t.topic_name, p.partition_index): p.error_code for t in r.responses for p in t.partitions}
        assert errors == {
            ("sa-t", 0): 0, ("sa-t", 1): 0, ("sa-t", 9): E.UNKNOWN_TOPIC_OR_PARTITION,
            ("sa-missing", 0): E.UNKNOWN_TOPIC_OR_PARTITION}
        assert offsets(describe_offsets(wire, "g-admin")) == {("sa-t", 0): (5, 5, 0), ("sa-t", 1): (0, 0, 0)}
        assert on_loop(broker, state.read, "g-admin", tid, 0).state_epoch == 1  # a new state epoch
        r = alter(wire, "g-admin", {"sa-t": {0: -2}})
        assert r.responses[0].partitions[0].error_code == E.INVALID_REQUEST

        r = delete_offsets(wire, "g-admin", ["sa-t", "sa-missing"])
        assert r.error_code == 0
        assert [(t.topic_name, t.error_code) for t in r.responses] == [
            ("sa-t", 0), ("sa-missing", E.UNKNOWN_TOPIC_OR_PARTITION)]
        assert offsets(describe_offsets(wire, "g-admin")) == {}
        assert on_loop(broker, state.partitions, "g-admin") == []
        assert delete_offsets(wire, "g-nothing", ["sa-t"]).error_code == E.GROUP_ID_NOT_FOUND

        # AlterShareGroupOffsets creates an unknown group, Empty
        assert alter(wire, "g-created", {"sa-t": {0: 2}}).error_code == 0
        listed = wire.request(LIST_GROUPS, 5, Struct(states_filter=[], types_filter=["share"]))
        assert ("g-created", "Empty") in {(x.group_id, x.group_state) for x in listed.groups}
        assert offsets(describe_offsets(wire, "g-created")) == {("sa-t", 0): (2, 8, 0)}


def test_offset_apis_refuse_other_group_types(broker):
    broker.create_topic("sa-types", 1)
    with WireClient(broker.host, broker.port) as wire:
        r = wire.request(CONSUMER_HEARTBEAT, 1, Struct(
            group_id="g-kip848", member_id="c", member_epoch=0, instance_id=None, rack_id=None,
            rebalance_timeout_ms=30000, subscribed_topic_names=["sa-types"], subscribed_topic_regex=None,
            server_assignor=None, topic_partitions=[]))
        assert r.error_code == 0
        g = describe_offsets(wire, "g-kip848")
        assert (g.error_code, g.error_message) == (E.GROUP_ID_NOT_FOUND,
                                                   "Group g-kip848 is not a share group.")
        assert alter(wire, "g-kip848", {"sa-types": {0: 0}}).error_code == E.GROUP_ID_NOT_FOUND
        assert delete_offsets(wire, "g-kip848", ["sa-types"]).error_code == E.GROUP_ID_NOT_FOUND
        assert describe_offsets(wire, "").error_code == E.INVALID_GROUP_ID


def test_delete_groups_deletes_the_share_state(broker):
    broker.create_topic("sa-del", 1)
    tid = bytes(broker.broker.logs.topics["sa-del"].id)
    state = broker.broker.share_state
    with WireClient(broker.host, broker.port) as wire:
        assert hb(wire, "g-del", "m", 0, ["sa-del"]).error_code == 0
        on_loop(broker, state.initialize, "g-del", tid, 0, 0, 0)

        def delete():
            r = wire.request(DELETE_GROUPS, 2, Struct(groups_names=["g-del"]))
            return r.results[0].error_code

        assert delete() == E.NON_EMPTY_GROUP
        fetch = wire.request(78, 1, Struct(  # a share session the deletion must end
            group_id="g-del", member_id="m", share_session_epoch=0, max_wait_ms=0, min_bytes=1,
            max_bytes=1 << 20, max_records=10, batch_size=10,
            topics=[Struct(topic_id=tid, partitions=[Struct(partition_index=0, acknowledgement_batches=[])])],
            forgotten_topics_data=[]))
        assert fetch.error_code == 0
        assert on_loop(broker, broker.broker.share_sessions.get, "g-del", "m") is not None
        assert hb(wire, "g-del", "m", -1).error_code == 0
        assert delete() == 0
        assert on_loop(broker, state.partitions, "g-del") == []
        assert on_loop(broker, broker.broker.share_sessions.get, "g-del", "m") is None
        d = wire.request(SHARE_DESCRIBE, 1, Struct(group_ids=["g-del"], include_authorized_operations=False))
        assert d.groups[0].error_code == E.GROUP_ID_NOT_FOUND
        assert delete() == E.GROUP_ID_NOT_FOUND
        r = hb(wire, "g-del", "m", 0, ["sa-del"])  # the id is free again
        assert (r.error_code, r.member_epoch) == (0, 1)


def test_topic_deletion_drops_every_groups_share_state(broker):
    broker.create_topic("sa-gone", 1)
    broker.create_topic("sa-stays", 1)
    gone, stays = (bytes(broker.broker.logs.topics[t].id) for t in ("sa-gone", "sa-stays"))
    state = broker.broker.share_state
    with WireClient(broker.host, broker.port) as wire:
        for group in ("g-gone-1", "g-gone-2"):
            assert hb(wire, group, "m", 0, ["sa-gone", "sa-stays"]).error_code == 0
            on_loop(broker, state.initialize, group, gone, 0, 0, 0)
            on_loop(broker, state.initialize, group, stays, 0, 0, 0)
    broker.delete_topic("sa-gone")
    for group in ("g-gone-1", "g-gone-2"):
        assert on_loop(broker, state.partitions, group) == [(stays, 0)]


def _cli(capsys, *argv: str) -> tuple[int, str]:
    """Exit code, and stdout followed by stderr."""
    from minibroker.cli import main

    capsys.readouterr()
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out + captured.err


def test_minibroker_groups_lists_and_describes_share_groups(broker, capsys):
    broker.create_topic("sa-cli", 2)
    broker.produce("sa-cli", [b"x"] * 4, partition=1)
    tid = bytes(broker.broker.logs.topics["sa-cli"].id)
    with WireClient(broker.host, broker.port, client_id="cli-member") as wire:
        assert hb(wire, "g-cli", "member-1", 0, ["sa-cli"]).error_code == 0
        on_loop(broker, broker.broker.share_state.initialize, "g-cli", tid, 1, 1, 0)
        code, out = _cli(capsys, "groups", "list", "--type", "--state", "--bootstrap-server",
                         broker.bootstrap_servers)
        assert code == 0
        assert ["g-cli", "share", "Stable"] in [line.split() for line in out.splitlines()]
        code, out = _cli(capsys, "groups", "describe", "--group", "g-cli", "--bootstrap-server",
                         broker.bootstrap_servers)
        assert code == 0, out
        lines = [line.split() for line in out.splitlines()]
        assert ["GROUP", "STATE:", "Stable"] in lines
        assert ["GROUP", "TOPIC", "PARTITION", "START-OFFSET", "LAG"] in lines
        assert ["g-cli", "sa-cli", "0", "-", "-"] in lines  # assigned, no state yet
        assert ["g-cli", "sa-cli", "1", "1", "3"] in lines
        assert ["g-cli", "member-1", "/127.0.0.1", "cli-member", "2", "sa-cli:0,sa-cli:1"] in lines
        reset = ("groups", "reset-offsets", "--group", "g-cli", "--topic", "sa-cli:1", "--to-earliest",
                 "--bootstrap-server", broker.bootstrap_servers)
        code, out = _cli(capsys, *reset, "--execute")
        assert code == 1 and "is not empty" in out
        assert hb(wire, "g-cli", "member-1", -1).error_code == 0
        code, out = _cli(capsys, "groups", "describe", "--group", "g-cli", "--bootstrap-server",
                         broker.bootstrap_servers)
        assert code == 0 and "Share group 'g-cli' has no active members." in out
        assert ["g-cli", "sa-cli", "1", "1", "3"] in [line.split() for line in out.splitlines()]
        code, out = _cli(capsys, *reset)  # a dry run by default
        assert code == 0 and ["g-cli", "sa-cli", "1", "0"] in [line.split() for line in out.splitlines()]
        assert offsets(describe_offsets(wire, "g-cli")) == {("sa-cli", 1): (1, 3, 0)}
        code, out = _cli(capsys, *reset, "--execute")
        assert code == 0
        assert offsets(describe_offsets(wire, "g-cli")) == {("sa-cli", 1): (0, 4, 0)}
        code, out = _cli(capsys, "groups", "delete", "--group", "g-cli", "--bootstrap-server",
                         broker.bootstrap_servers)
        assert code == 0


def test_confluent_admin_sees_share_groups(broker):
    confluent_kafka = pytest.importorskip("confluent_kafka")
    from confluent_kafka.admin import AdminClient

    broker.create_topic("sa-confluent", 1)
    with WireClient(broker.host, broker.port) as wire:
        assert hb(wire, "g-confluent", "m", 0, ["sa-confluent"]).error_code == 0
    admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
    listed = admin.list_consumer_groups().result(10)
    # librdkafka asks ListGroups v5 for the consumer and classic types only: no share group comes back
    assert "g-confluent" not in {g.group_id for g in listed.valid} and not listed.errors
    # ConsumerGroupDescribe answers GROUP_ID_NOT_FOUND, so librdkafka falls back to DescribeGroups v5,
    # which reports a group of another type as Dead, as a Kafka 4.2 broker does
    described = admin.describe_consumer_groups(["g-confluent"])["g-confluent"].result(10)
    assert (described.state, described.members) == (confluent_kafka.ConsumerGroupState.DEAD, [])
    deleted = admin.delete_consumer_groups(["g-confluent"])["g-confluent"]
    with pytest.raises(confluent_kafka.KafkaException) as e:
        deleted.result(10)
    assert e.value.args[0].code() == confluent_kafka.KafkaError.NON_EMPTY_GROUP


# -- authorization ------------------------------------------------------------------------------


def _deny(wire, resource_type: int, name: str, operation: int) -> None:
    r = wire.request(CREATE_ACLS, 3, {"creations": [{
        "resource_type": resource_type, "resource_name": name, "resource_pattern_type": 3,
        "principal": "User:ANONYMOUS", "host": "*", "operation": operation, "permission_type": 2}]})
    assert r.results[0].error_code == 0


TOPIC, GROUP, CLUSTER = 2, 3, 4
READ, DELETE, DESCRIBE, CLUSTER_ACTION = 3, 6, 8, 9


def test_authorization_as_kafka(minibroker_factory):
    runner = minibroker_factory({"authorizer.class.name": STANDARD, "allow.everyone.if.no.acl.found": "true"})
    for topic in ("az-ok", "az-secret", "az-noread", "az-later"):
        runner.create_topic(topic, 1)
    with WireClient(runner.host, runner.port) as wire:
        _deny(wire, GROUP, "g-noread", READ)
        _deny(wire, GROUP, "g-nodescribe", DESCRIBE)
        _deny(wire, GROUP, "g-nodelete", DELETE)
        _deny(wire, TOPIC, "az-secret", DESCRIBE)
        _deny(wire, TOPIC, "az-noread", READ)

        assert hb(wire, "g-noread", "m", 0, ["az-ok"]).error_code == E.GROUP_AUTHORIZATION_FAILED
        r = hb(wire, "g-ok", "m", 0, ["az-ok", "az-secret"])
        assert (r.error_code, r.error_message) == (E.TOPIC_AUTHORIZATION_FAILED,
                                                   "Unauthorized topics: az-secret")
        assert hb(wire, "g-ok", "m", 0, ["az-ok", "az-later"]).error_code == 0

        def share_describe(group):
            return wire.request(SHARE_DESCRIBE, 1, Struct(group_ids=[group],
                                                          include_authorized_operations=True)).groups[0]

        assert share_describe("g-ok").error_code == 0
        assert share_describe("g-nodescribe").error_code == E.GROUP_AUTHORIZATION_FAILED
        _deny(wire, TOPIC, "az-later", DESCRIBE)  # an assigned topic the caller may not see: all redacted
        d = share_describe("g-ok")
        assert (d.error_code, d.members, d.group_state) == (E.TOPIC_AUTHORIZATION_FAILED, [], "")

        assert describe_offsets(wire, "g-nodescribe").error_code == E.GROUP_AUTHORIZATION_FAILED
        g = describe_offsets(wire, "g-ok", {"az-secret": [0], "az-ok": [0]})
        assert offsets(g) == {("az-secret", 0): (-1, -1, E.TOPIC_AUTHORIZATION_FAILED),
                              ("az-ok", 0): (-1, -1, 0)}

        assert hb(wire, "g-ok", "m", -1).error_code == 0
        assert alter(wire, "g-noread", {"az-ok": {0: 0}}).error_code == E.GROUP_AUTHORIZATION_FAILED
        r = alter(wire, "g-ok", {"az-noread": {0: 0}, "az-ok": {0: 0}})
        assert {t.topic_name: t.partitions[0].error_code for t in r.responses} == {
            "az-noread": E.TOPIC_AUTHORIZATION_FAILED, "az-ok": 0}
        g = describe_offsets(wire, "g-ok")  # null topics: the ones it may not describe are left out
        assert offsets(g) == {("az-ok", 0): (0, 0, 0)}

        assert delete_offsets(wire, "g-nodelete", ["az-ok"]).error_code == E.GROUP_AUTHORIZATION_FAILED
        r = delete_offsets(wire, "g-ok", ["az-noread", "az-ok"])
        assert [(t.topic_name, t.error_code) for t in r.responses] == [
            ("az-noread", E.TOPIC_AUTHORIZATION_FAILED), ("az-ok", 0)]

        key = "g-ok:AAAAAAAAAAAAAAAAAAAAAQ:0"
        r = wire.request(FIND_COORDINATOR, 6, Struct(key_type=2, coordinator_keys=[key]))
        assert r.coordinators[0].error_code == 0
        _deny(wire, CLUSTER, "kafka-cluster", CLUSTER_ACTION)
        r = wire.request(FIND_COORDINATOR, 6, Struct(key_type=2, coordinator_keys=[key]))
        assert r.coordinators[0].error_code == E.CLUSTER_AUTHORIZATION_FAILED


def test_groups_survive_restart_after_alter(tmp_path):
    """An Empty share group made by AlterShareGroupOffsets is a ShareGroupMetadata record: it is still
    there, and still a share group, after a restart."""
    runner = BrokerRunner({}, data_dir=str(tmp_path)).start()
    try:
        runner.create_topic("sa-restart", 1)
        with WireClient(runner.host, runner.port) as wire:
            assert alter(wire, "g-restart", {"sa-restart": {0: 0}}).error_code == 0
        runner.restart()
        with WireClient(runner.host, runner.port) as wire:
            deadline = time.monotonic() + 15
            while True:
                r = wire.request(LIST_GROUPS, 5, Struct(states_filter=[], types_filter=["share"]))
                if r.error_code != E.COORDINATOR_LOAD_IN_PROGRESS or time.monotonic() > deadline:
                    break
                time.sleep(0.05)
            assert [(g.group_id, g.group_state, g.group_type) for g in r.groups] == [
                ("g-restart", "Empty", "share")]
    finally:
        runner.cleanup()


def test_share_consumer_offsets_lag_and_alter_end_to_end(broker):
    """A real share consumer moves the start offset; AlterShareGroupOffsets moves it back and the next
    consumer gets those records again."""
    confluent_kafka = pytest.importorskip("confluent_kafka")
    from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource

    broker.create_topic("sa-e2e", 1)
    broker.produce("sa-e2e", [b"v%d" % i for i in range(5)], partition=0)
    admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
    config = ConfigResource(ConfigResource.Type.GROUP, "g-e2e", incremental_configs=[
        ConfigEntry("share.auto.offset.reset", "earliest", incremental_operation=AlterConfigOpType.SET)])
    for future in admin.incremental_alter_configs([config]).values():
        future.result(10)

    def consume(count: int, acknowledged_to: int) -> list[bytes]:
        consumer = confluent_kafka.ShareConsumer({"bootstrap.servers": broker.bootstrap_servers,
                                                  "group.id": "g-e2e"})
        got: list[bytes] = []
        try:
            consumer.subscribe(["sa-e2e"])
            deadline = time.monotonic() + 20
            while len(got) < count and time.monotonic() < deadline:
                got += [m.value() for m in consumer.poll(0.2) if m.error() is None]
            with WireClient(broker.host, broker.port) as wire:  # the next poll accepts them (implicit mode)
                while time.monotonic() < deadline:
                    consumer.poll(0.2)
                    if offsets(describe_offsets(wire, "g-e2e"))[("sa-e2e", 0)][0] == acknowledged_to:
                        break
        finally:
            consumer.close()
        return got

    assert consume(5, 5) == [b"v%d" % i for i in range(5)]
    with WireClient(broker.host, broker.port) as wire:
        assert offsets(describe_offsets(wire, "g-e2e")) == {("sa-e2e", 0): (5, 0, 0)}
        broker.produce("sa-e2e", [b"v5", b"v6"], partition=0)
        assert offsets(describe_offsets(wire, "g-e2e")) == {("sa-e2e", 0): (5, 2, 0)}

        def empty():
            return wire.request(SHARE_DESCRIBE, 1, Struct(
                group_ids=["g-e2e"], include_authorized_operations=False)).groups[0].group_state == "Empty"

        deadline = time.monotonic() + 15
        while not empty() and time.monotonic() < deadline:  # close() left the group
            time.sleep(0.05)
        assert alter(wire, "g-e2e", {"sa-e2e": {0: 3}}).responses[0].partitions[0].error_code == 0
        assert offsets(describe_offsets(wire, "g-e2e")) == {("sa-e2e", 0): (3, 4, 0)}
    assert consume(4, 7) == [b"v3", b"v4", b"v5", b"v6"]
    with WireClient(broker.host, broker.port) as wire:
        assert offsets(describe_offsets(wire, "g-e2e")) == {("sa-e2e", 0): (7, 0, 0)}
