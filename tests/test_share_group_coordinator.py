"""Share groups (KIP-932, issue 21): the share group coordinator over the wire.

ShareGroupHeartbeat (joining, epochs, fencing, leaving, session timeouts, the size limit, subscription and
topic changes, group-type conflicts with classic and consumer groups), ShareGroupDescribe, a restart
keeping the group, FindCoordinator's share keys, ListGroups' ``share`` type, the records' codec, and a real
confluent_kafka.ShareConsumer showing up in the group.
"""

from __future__ import annotations

import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from minibroker.coordinator import group_records as gr
from minibroker.errors import ErrorCode as E
from minibroker.protocol.codec import Struct
from minibroker.testing import BrokerRunner
from minibroker.tools.wire import WireClient

pytestmark = pytest.mark.filterwarnings("ignore::ResourceWarning")

SHARE_HEARTBEAT, SHARE_DESCRIBE = 76, 77
FIND_COORDINATOR, JOIN_GROUP, OFFSET_COMMIT, OFFSET_FETCH, DESCRIBE_GROUPS, LIST_GROUPS = 10, 11, 8, 9, 15, 16
API_VERSIONS, CREATE_PARTITIONS, CONSUMER_HEARTBEAT, CONSUMER_DESCRIBE = 18, 37, 68, 69
# a short session so the timeout test is quick; the group config floor allows it
OVERRIDES = {"group.share.session.timeout.ms": "600", "group.share.min.session.timeout.ms": "100"}


@pytest.fixture(scope="module")
def broker():
    runner = BrokerRunner({"group.share.max.size": "3"}).start()
    yield runner
    runner.cleanup()


def hb(wire, group, member, epoch, topics=None, rack=None):
    return wire.request(SHARE_HEARTBEAT, 1, Struct(group_id=group, member_id=member, member_epoch=epoch,
                                                   rack_id=rack, subscribed_topic_names=topics))


def describe(wire, group, ops=False):
    body = Struct(group_ids=[group], include_authorized_operations=ops)
    return wire.request(SHARE_DESCRIBE, 1, body).groups[0]


def assignment(r) -> dict[bytes, list[int]]:
    return {bytes(t.topic_id): list(t.partitions) for t in r.assignment.topic_partitions}


def topic_id(runner, name: str) -> bytes:
    return bytes(runner.broker.logs.topics[name].id)


def set_group_configs(wire, group: str, configs: dict[str, str]) -> None:
    """IncrementalAlterConfigs (44) SET on the GROUP resource (type 32)."""
    r = wire.request(44, 1, Struct(resources=[Struct(resource_type=32, resource_name=group, configs=[
        Struct(name=name, config_operation=0, value=value) for name, value in configs.items()])],
        validate_only=False))
    assert r.responses[0].error_code == 0, r.responses[0].error_message


def poll(condition, timeout=15.0):
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value or time.monotonic() > deadline:
            return value
        time.sleep(0.05)


def test_join_heartbeat_and_leave(broker):
    broker.create_topic("sg-join", 2)
    tid = topic_id(broker, "sg-join")
    with WireClient(broker.host, broker.port) as wire:
        r1 = hb(wire, "g-join", "m1", 0, ["sg-join"])
        assert (r1.error_code, r1.member_id, r1.member_epoch) == (0, "m1", 1)
        assert assignment(r1) == {tid: [0, 1]} and r1.heartbeat_interval_ms == 5000
        r1 = hb(wire, "g-join", "m1", 1)
        assert (r1.error_code, r1.member_epoch, r1.assignment) == (0, 1, None)  # nothing changed
        r2 = hb(wire, "g-join", "m2", 0, ["sg-join"])
        assert (r2.error_code, r2.member_epoch) == (0, 2)
        # the simple assignor (Kafka 4.1+): as many partitions as members, so one each; m1 keeps one
        assert len(assignment(r2)[tid]) == 1
        r1 = hb(wire, "g-join", "m1", 1)
        assert (r1.error_code, r1.member_epoch) == (0, 2)
        assert sorted(assignment(r1)[tid] + assignment(r2)[tid]) == [0, 1]
        d = describe(wire, "g-join")
        assert (d.error_code, d.group_state, d.group_epoch, d.assignment_epoch, d.assignor_name) == \
            (0, "Stable", 2, 2, "simple")
        assert sorted((m.member_id, m.member_epoch) for m in d.members) == [("m1", 2), ("m2", 2)]
        r2 = hb(wire, "g-join", "m2", -1)
        assert (r2.error_code, r2.member_id, r2.member_epoch) == (0, "m2", -1)
        d = describe(wire, "g-join")
        assert [m.member_id for m in d.members] == ["m1"] and d.group_epoch == 3
        assert hb(wire, "g-join", "m2", 2).error_code == E.UNKNOWN_MEMBER_ID
        assert hb(wire, "g-join", "m1", -1).error_code == 0
        d = describe(wire, "g-join")
        assert (d.group_state, d.members) == ("Empty", [])


def test_epochs_are_fenced_as_kafka(broker):
    broker.create_topic("sg-fence", 1)
    with WireClient(broker.host, broker.port) as wire:
        assert hb(wire, "g-fence", "a", 0, ["sg-fence"]).member_epoch == 1
        r = hb(wire, "g-fence", "a", 5)
        assert r.error_code == E.FENCED_MEMBER_EPOCH and "greater member epoch" in r.error_message
        assert hb(wire, "g-fence", "b", 0, ["sg-fence"]).member_epoch == 2
        r = hb(wire, "g-fence", "a", 1)  # "a" has epoch 1 still (it did not heartbeat since)
        assert (r.error_code, r.member_epoch) == (0, 2)
        # the previous epoch is accepted: the answer that bumped it may have been lost
        assert hb(wire, "g-fence", "a", 1).error_code == 0
        r = hb(wire, "g-fence", "b", 3)
        assert r.error_code == E.FENCED_MEMBER_EPOCH
        r = hb(wire, "g-fence", "nobody", 2)
        assert (r.error_code, r.error_message) == (E.UNKNOWN_MEMBER_ID,
                                                   "Member nobody is not a member of group g-fence.")
        r = hb(wire, "g-unknown", "a", 1)
        assert r.error_code == E.GROUP_ID_NOT_FOUND
        # a known member joining again (epoch 0) starts from nothing and gets its assignment again
        r = hb(wire, "g-fence", "a", 0, ["sg-fence"])
        assert r.error_code == 0 and r.member_epoch == 2 and r.assignment is not None


@pytest.mark.parametrize("fields, message", [
    ({"member_id": ""}, "MemberId can't be empty."),
    ({"member_id": "x" * 37}, "MemberId can't be longer than 36 characters."),
    ({"group_id": ""}, "GroupId can't be empty."),
    ({"rack_id": " "}, "RackId can't be empty."),
    ({"subscribed_topic_names": None}, "SubscribedTopicNames must be set in first request."),
    ({"subscribed_topic_names": []}, "SubscribedTopicNames must be set in first request."),
    ({"member_epoch": -2}, "MemberEpoch is invalid."),
])
def test_invalid_heartbeats(broker, fields, message):
    body = {"group_id": "g-invalid", "member_id": "m", "member_epoch": 0, "rack_id": None,
            "subscribed_topic_names": ["t"], **fields}
    with WireClient(broker.host, broker.port) as wire:
        r = wire.request(SHARE_HEARTBEAT, 1, Struct(**body))
    assert (r.error_code, r.error_message) == (E.INVALID_REQUEST, message)


def test_group_max_size(broker):
    broker.create_topic("sg-size", 1)
    with WireClient(broker.host, broker.port) as wire:
        for member in ("a", "b", "c"):
            assert hb(wire, "g-size", member, 0, ["sg-size"]).error_code == 0
        r = hb(wire, "g-size", "d", 0, ["sg-size"])
        assert (r.error_code, r.error_message) == (
            E.GROUP_MAX_SIZE_REACHED, "The share group has reached its maximum capacity of 3 members.")
        assert hb(wire, "g-size", "a", 1).error_code == 0  # members already in still heartbeat
        assert hb(wire, "g-size", "c", -1).error_code == 0
        assert hb(wire, "g-size", "d", 0, ["sg-size"]).error_code == 0


def test_subscription_change_and_topic_changes_bump_the_epoch(broker):
    broker.create_topic("sg-sub-a", 1)
    a = topic_id(broker, "sg-sub-a")
    with WireClient(broker.host, broker.port) as wire:
        r = hb(wire, "g-sub", "m", 0, ["sg-sub-a", "sg-sub-later"])
        assert (r.member_epoch, assignment(r)) == (1, {a: [0]})  # the missing topic is left out
        broker.create_topic("sg-sub-later", 2)
        later = topic_id(broker, "sg-sub-later")
        r = hb(wire, "g-sub", "m", 1)
        assert (r.member_epoch, assignment(r)) == (2, {a: [0], later: [0, 1]})
        grow = {"topics": [{"name": "sg-sub-later", "count": 3, "assignments": None}], "timeout_ms": 5000,
                "validate_only": False}
        assert wire.request(CREATE_PARTITIONS, 3, grow).results[0].error_code == 0
        r = hb(wire, "g-sub", "m", 2)
        assert (r.member_epoch, assignment(r)) == (3, {a: [0], later: [0, 1, 2]})
        r = hb(wire, "g-sub", "m", 3, ["sg-sub-later"])
        assert (r.member_epoch, assignment(r)) == (4, {later: [0, 1, 2]})
        broker.delete_topic("sg-sub-later")
        r = hb(wire, "g-sub", "m", 4)
        assert (r.error_code, r.member_epoch, assignment(r)) == (0, 5, {})
        d = describe(wire, "g-sub")
        assert d.members[0].subscribed_topic_names == ["sg-sub-later"]


def test_group_types_do_not_mix(broker):
    broker.create_topic("sg-types", 1)
    with WireClient(broker.host, broker.port) as wire:
        consumer = wire.request(CONSUMER_HEARTBEAT, 1, Struct(
            group_id="g-consumer", member_id="c1", member_epoch=0, instance_id=None, rack_id=None,
            rebalance_timeout_ms=30000, subscribed_topic_names=["sg-types"], subscribed_topic_regex=None,
            server_assignor=None, topic_partitions=[]))
        assert consumer.error_code == 0
        r = hb(wire, "g-consumer", "s1", 0, ["sg-types"])
        not_share = (E.GROUP_ID_NOT_FOUND, "Group g-consumer is not a share group.")
        assert (r.error_code, r.error_message) == not_share
        d = describe(wire, "g-consumer")
        assert (d.error_code, d.error_message) == not_share

        assert hb(wire, "g-shared", "s1", 0, ["sg-types"]).error_code == 0
        consumer = wire.request(CONSUMER_HEARTBEAT, 1, Struct(
            group_id="g-shared", member_id="c1", member_epoch=0, instance_id=None, rack_id=None,
            rebalance_timeout_ms=30000, subscribed_topic_names=["sg-types"], subscribed_topic_regex=None,
            server_assignor=None, topic_partitions=[]))
        assert (consumer.error_code, consumer.error_message) == (
            E.GROUP_ID_NOT_FOUND, "Group g-shared is not a consumer group.")
        d = wire.request(CONSUMER_DESCRIBE, 1, Struct(group_ids=["g-shared"],
                                                      include_authorized_operations=False))
        assert d.groups[0].error_code == E.GROUP_ID_NOT_FOUND
        join = wire.request(JOIN_GROUP, 9, Struct(
            group_id="g-shared", session_timeout_ms=10000, rebalance_timeout_ms=10000, member_id="",
            group_instance_id=None, protocol_type="consumer", protocols=[Struct(name="range", metadata=b"")],
            reason=None))
        assert join.error_code == E.INCONSISTENT_GROUP_PROTOCOL
        commit = wire.request(OFFSET_COMMIT, 8, Struct(
            group_id="g-shared", generation_id_or_member_epoch=-1, member_id="", group_instance_id=None,
            retention_time_ms=-1, topics=[Struct(name="sg-types", partitions=[Struct(
                partition_index=0, committed_offset=1, committed_leader_epoch=-1, committed_metadata="")])]))
        assert commit.topics[0].partitions[0].error_code == E.GROUP_ID_NOT_FOUND
        fetch = wire.request(OFFSET_FETCH, 8, Struct(groups=[Struct(group_id="g-shared", topics=None)],
                                                     require_stable=False))
        assert fetch.groups[0].error_code == E.GROUP_ID_NOT_FOUND
        delete = wire.request(47, 0, Struct(group_id="g-shared", topics=[
            Struct(name="sg-types", partitions=[Struct(partition_index=0)])]))
        assert delete.error_code == E.GROUP_ID_NOT_FOUND
        body = Struct(groups=["g-shared"], include_authorized_operations=False)
        old = wire.request(DESCRIBE_GROUPS, 5, body)
        assert (old.groups[0].error_code, old.groups[0].group_state, old.groups[0].members) == (0, "Dead", [])
        new = wire.request(DESCRIBE_GROUPS, 6, body)
        assert (new.groups[0].error_code, new.groups[0].error_message) == (
            E.GROUP_ID_NOT_FOUND, "Group g-shared is not a classic group.")


def test_list_groups_type_filter(broker):
    broker.create_topic("sg-list", 1)
    with WireClient(broker.host, broker.port) as wire:
        assert hb(wire, "g-list", "m", 0, ["sg-list"]).error_code == 0

        def listed(types, states=()):
            r = wire.request(LIST_GROUPS, 5, Struct(states_filter=list(states), types_filter=list(types)))
            return {(g.group_id, g.protocol_type, g.group_state, g.group_type) for g in r.groups}

        assert ("g-list", "share", "Stable", "share") in listed(["share"])
        assert ("g-list", "share", "Stable", "share") in listed(["Share"], ["stable"])
        assert not any(g[0] == "g-list" for g in listed(["consumer", "classic"]))
        assert not any(g[0] == "g-list" for g in listed(["share"], ["empty"]))
        assert ("g-list", "share", "Stable", "share") in listed([])


def test_describe_details_and_authorized_operations(broker):
    broker.create_topic("sg-desc", 2)
    with WireClient(broker.host, broker.port, client_id="describer") as wire:
        assert hb(wire, "g-desc", "m", 0, ["sg-desc"], rack="r1").error_code == 0
        d = describe(wire, "g-desc", ops=True)
        m = d.members[0]
        assert (m.member_id, m.rack_id, m.member_epoch, m.client_id, m.subscribed_topic_names) == \
            ("m", "r1", 1, "describer", ["sg-desc"])
        assert m.client_host.endswith("127.0.0.1")
        assert [(t.topic_name, t.partitions) for t in m.assignment.topic_partitions] == [("sg-desc", [0, 1])]
        assert d.authorized_operations > 0
        assert describe(wire, "g-desc").authorized_operations == -2147483648
        assert describe(wire, "").error_code == E.INVALID_GROUP_ID


def test_share_api_versions_and_find_coordinator(broker):
    with WireClient(broker.host, broker.port) as wire:
        ranges = {k.api_key: (k.min_version, k.max_version) for k in wire.request(API_VERSIONS, 3, Struct(
            client_software_name="t", client_software_version="1")).api_keys}
        assert ranges[SHARE_HEARTBEAT] == (1, 1) and ranges[SHARE_DESCRIBE] == (1, 1)
        assert ranges[90] == (0, 1) and ranges[91] == (0, 0) and ranges[92] == (0, 0)
        good = "grp:" + "AAAAAAAAAAAAAAAAAAAAAQ" + ":3"  # base64 of a non-zero 16-byte topic id
        keys = [good, "grp:not-a-topic-id:0", "only:two", ":AAAAAAAAAAAAAAAAAAAAAQ:0",
                "grp:AAAAAAAAAAAAAAAAAAAAAQ:-1", "grp:AAAAAAAAAAAAAAAAAAAAAA:0"]
        r = wire.request(FIND_COORDINATOR, 6, Struct(key_type=2, coordinator_keys=keys))
        answers = [(c.key, c.error_code, c.node_id) for c in r.coordinators]
        assert answers[0] == (good, 0, broker.broker.node_id)
        assert [a[1:] for a in answers[1:]] == [(E.INVALID_REQUEST, -1)] * 5
        r = wire.request(FIND_COORDINATOR, 5, Struct(key_type=2, coordinator_keys=[good]))
        assert r.coordinators[0].error_code == E.INVALID_REQUEST  # share keys need v6


def test_disabled_share_protocol_answers_unsupported_version(minibroker_factory):
    runner = minibroker_factory({"group.coordinator.rebalance.protocols": "classic,consumer"})
    runner.create_topic("sg-off", 1)
    with WireClient(runner.host, runner.port) as wire:
        r = hb(wire, "g-off", "m", 0, ["sg-off"])
    assert r.error_code == E.UNSUPPORTED_VERSION


def test_silent_member_is_removed_after_its_session_timeout(minibroker_factory):
    """Removed from the group, but its acquired records are left to their locks (or its share session's end):
    a release on leave would race librdkafka's final ShareAcknowledge at close."""
    runner = minibroker_factory(OVERRIDES)
    runner.create_topic("sg-expiry", 1)
    released = []
    partitions = runner.broker.share_partitions
    original = partitions.release_member

    def release(group_id, member_id):
        released.append((group_id, member_id))
        return original(group_id, member_id)

    partitions.release_member = release
    with WireClient(runner.host, runner.port) as wire:
        assert hb(wire, "g-expiry", "quiet", 0, ["sg-expiry"]).error_code == 0
        r = hb(wire, "g-expiry", "alive", 0, ["sg-expiry"])

        def quiet_gone():
            nonlocal r
            r = hb(wire, "g-expiry", "alive", r.member_epoch)
            assert r.error_code == 0
            return [m.member_id for m in describe(wire, "g-expiry").members] == ["alive"]

        assert poll(quiet_gone)
        assert released == []
        assert hb(wire, "g-expiry", "quiet", 1).error_code == E.UNKNOWN_MEMBER_ID


def test_group_config_session_timeout_applies(minibroker_factory):
    """share.session.timeout.ms of the group (IncrementalAlterConfigs on resource type GROUP, 32)."""
    runner = minibroker_factory({"group.share.min.session.timeout.ms": "100",
                                 "group.share.min.heartbeat.interval.ms": "50"})
    runner.create_topic("sg-gconf", 1)
    with WireClient(runner.host, runner.port) as wire:
        set_group_configs(wire, "g-gconf", {"share.session.timeout.ms": "300",
                                            "share.heartbeat.interval.ms": "100"})
        r = hb(wire, "g-gconf", "m", 0, ["sg-gconf"])
        assert r.heartbeat_interval_ms == 100
        assert poll(lambda: describe(wire, "g-gconf").members == [])


def _describe_when_loaded(wire, group):
    return poll(lambda: (lambda d: d if d.error_code != E.COORDINATOR_LOAD_IN_PROGRESS else None)(
        describe(wire, group)))


def test_restart_keeps_members_epochs_and_assignments(tmp_path):
    runner = BrokerRunner({}, data_dir=str(tmp_path)).start()
    try:
        runner.create_topic("sg-persist", 2)
        with WireClient(runner.host, runner.port) as wire:
            hb(wire, "g-persist", "p1", 0, ["sg-persist"], rack="r")
            hb(wire, "g-persist", "p2", 0, ["sg-persist"])
            hb(wire, "g-persist", "p3", 0, ["sg-persist"])
            assert hb(wire, "g-persist", "p3", -1).error_code == 0
            before = describe(wire, "g-persist")
        initialized = runner.broker.groups.share.groups["g-persist"].initialized
        assert initialized == {topic_id(runner, "sg-persist"): ("sg-persist", {0, 1})}
        runner.restart()
        with WireClient(runner.host, runner.port) as wire:
            after = _describe_when_loaded(wire, "g-persist")

            def members(d):
                return sorted((m.member_id, m.rack_id, m.member_epoch, m.subscribed_topic_names,
                               [(t.topic_name, t.partitions) for t in m.assignment.topic_partitions])
                              for m in d.members)

            assert (after.group_state, after.group_epoch, after.assignment_epoch) == \
                (before.group_state, before.group_epoch, before.assignment_epoch) == ("Stable", 4, 3)
            assert members(after) == members(before)
            assert [m[0] for m in members(after)] == ["p1", "p2"]
            assert runner.broker.groups.share.groups["g-persist"].initialized == initialized
            r = hb(wire, "g-persist", "p1", 1)  # p1 carries on from its epoch
            assert (r.error_code, r.member_epoch) == (0, 4)
    finally:
        runner.cleanup()


def test_share_group_records_round_trip():
    key = gr.encode_share_group_key(gr.SHARE_GROUP_MEMBER_METADATA, "g", "m")
    assert gr.decode_key(key) == gr.ShareGroupKey(10, "g", "m")
    assert gr.decode_key(gr.encode_share_group_key(gr.SHARE_GROUP_METADATA, "g")) == gr.ShareGroupKey(11, "g")
    meta = gr.ShareMemberMetadataValue("rack", "client", "/1.2.3.4", ["a", "b"])
    assert gr.decode_share_member_metadata_value(gr.encode_share_member_metadata_value(meta)) == meta
    epoch = gr.ShareGroupMetadataValue(7, -123456789)
    assert gr.decode_share_group_metadata_value(gr.encode_share_group_metadata_value(epoch)) == epoch
    assert gr.decode_share_group_metadata_value(gr.encode_epoch_value(3)) == (3, 0)  # Kafka 4.0's layout
    current = gr.ShareCurrentAssignmentValue(3, 2, 0, {b"\1" * 16: {0, 2}})
    encoded = gr.encode_share_current_assignment_value(current)
    assert gr.decode_share_current_assignment_value(encoded) == current
    # byte for byte as Kafka's ShareGroupCurrentMemberAssignmentValue v0: epochs, state, compact arrays
    assert gr.encode_share_current_assignment_value(gr.ShareCurrentAssignmentValue(1, 0, 0, {})) == \
        b"\0\0" + b"\0\0\0\1" + b"\0\0\0\0" + b"\0" + b"\1" + b"\0"


def test_confluent_share_consumer_joins_the_group(broker):
    confluent_kafka = pytest.importorskip("confluent_kafka")
    broker.create_topic("sg-client", 2)
    with WireClient(broker.host, broker.port) as wire:  # the record produced below, whenever it lands
        set_group_configs(wire, "g-client", {"share.auto.offset.reset": "earliest"})
    consumer = confluent_kafka.ShareConsumer({"bootstrap.servers": broker.bootstrap_servers,
                                              "group.id": "g-client", "client.id": "share-client"})
    try:
        consumer.subscribe(["sg-client"])
        with WireClient(broker.host, broker.port) as wire:
            def joined():
                consumer.poll(0.1)
                d = describe(wire, "g-client")
                return d if d.error_code == 0 and d.members else None

            d = poll(joined, 20)
            assert d, "the share consumer never joined"
            m = d.members[0]
            assert (m.client_id, m.subscribed_topic_names, m.member_epoch) == \
                ("share-client", ["sg-client"], 1)
            assert [(t.topic_name, t.partitions) for t in m.assignment.topic_partitions] == \
                [("sg-client", [0, 1])]
            assert len(m.member_id) <= 36
        # The member is described once the broker has handled its join, maybe before the consumer has
        # read the answer; librdkafka's close() sends no leave while its join is unanswered (the member
        # then stays until share.session.timeout.ms, as with Kafka). A record it reads proves it has.
        broker.produce("sg-client", [b"read"], partition=0)
        read = poll(lambda: [m.value() for m in consumer.poll(timeout=0.2) if m.error() is None], 20)
        assert read == [b"read"], "the share consumer read nothing"
    finally:
        consumer.close()
    with WireClient(broker.host, broker.port) as wire:
        assert poll(lambda: describe(wire, "g-client").group_state == "Empty")  # close() left the group


def _state_partition_metadata(runner, group: str) -> list[tuple[dict, dict, dict]]:
    """The group's ShareGroupStatePartitionMetadata records (type 15) in ``__consumer_offsets``, in order,
    as ({topic: partitions initializing}, {... initialized}, {deleting topic ids: name}); None for a
    tombstone."""
    import glob
    import os

    from minibroker.records.batches import iter_batches

    out = []
    pattern = os.path.join(runner.data_dir, "__consumer_offsets-*", "*.log")
    for path in sorted(glob.glob(pattern)):
        with open(path, "rb") as f:
            data = f.read()
        for batch in iter_batches(data):
            for r in batch.records():
                key = gr.decode_key(r.key) if r.key else None
                if isinstance(key, gr.ShareGroupKey) and key.group == group and key.record_type == 15:
                    if r.value is None:
                        out.append(None)
                        continue
                    v = gr.decode_share_state_partition_metadata_value(r.value)
                    out.append(({n: sorted(ps) for n, ps in v.initializing.values()},
                                {n: sorted(ps) for n, ps in v.initialized.values()}, v.deleting))
    return out


def test_share_state_is_initialized_on_assignment(minibroker_factory):
    """Kafka 4.1+'s ShareGroupStatePartitionMetadata: when a share consumer's subscribed partitions first
    become assignable, the group records them initializing, then initialized; a grown topic adds its new
    partitions the same way, and deleting the group writes a tombstone."""
    confluent_kafka = pytest.importorskip("confluent_kafka")
    # the grown topic is assigned at the member's next heartbeat: 0.5 s apart, not the default 5 s
    broker = minibroker_factory({"group.share.heartbeat.interval.ms": "500",
                                 "group.share.min.heartbeat.interval.ms": "500"})
    broker.create_topic("sg-init", 2)
    consumer = confluent_kafka.ShareConsumer({"bootstrap.servers": broker.bootstrap_servers,
                                              "group.id": "g-init"})
    try:
        consumer.subscribe(["sg-init"])
        with WireClient(broker.host, broker.port) as wire:
            def joined():
                consumer.poll(0.1)
                return describe(wire, "g-init").members
            assert poll(joined, 20), "the share consumer never joined"
            assert _state_partition_metadata(broker, "g-init") == [
                ({"sg-init": [0, 1]}, {}, {}), ({}, {"sg-init": [0, 1]}, {})]
            grown = wire.request(CREATE_PARTITIONS, 3, {"topics": [{"name": "sg-init", "count": 3,
                                                                    "assignments": None}],
                                                        "timeout_ms": 5000, "validate_only": False})
            assert grown.results[0].error_code == 0

            def assigned_three():
                consumer.poll(0.1)
                m = describe(wire, "g-init").members
                return m and sorted(p for t in m[0].assignment.topic_partitions for p in t.partitions)
            assert poll(lambda: assigned_three() == [0, 1, 2], 20)
            assert _state_partition_metadata(broker, "g-init")[2:] == [
                ({"sg-init": [2]}, {"sg-init": [0, 1]}, {}), ({}, {"sg-init": [0, 1, 2]}, {})]
    finally:
        consumer.close()
    with WireClient(broker.host, broker.port) as wire:
        assert poll(lambda: describe(wire, "g-init").group_state == "Empty")
        r = wire.request(42, 2, {"groups_names": ["g-init"]})  # DeleteGroups
        assert r.results[0].error_code == 0
    assert _state_partition_metadata(broker, "g-init")[-1] is None


def test_a_failed_append_leaves_the_group_as_it_was(minibroker_factory, monkeypatch):
    from minibroker.errors import KafkaError

    runner = minibroker_factory()
    runner.create_topic("sg-fail-a", 1)
    runner.create_topic("sg-fail-b", 1)
    store = runner.broker.groups.store
    real_append = store.append

    def full_disk(*args, **kwargs):
        raise KafkaError(E.NOT_COORDINATOR, "the append failed")

    with WireClient(runner.host, runner.port) as wire:
        assert hb(wire, "g-fail", "m1", 0, ["sg-fail-a"]).error_code == 0
        before = describe(wire, "g-fail")
        monkeypatch.setattr(store, "append", full_disk)
        assert hb(wire, "g-fail-new", "m", 0, ["sg-fail-a"]).error_code == E.NOT_COORDINATOR
        assert describe(wire, "g-fail-new").error_code == E.GROUP_ID_NOT_FOUND  # not created
        assert hb(wire, "g-fail", "m2", 0, ["sg-fail-a"]).error_code == E.NOT_COORDINATOR
        assert hb(wire, "g-fail", "m1", 1, ["sg-fail-b"]).error_code == E.NOT_COORDINATOR
        assert hb(wire, "g-fail", "m1", -1).error_code == E.NOT_COORDINATOR
        after = describe(wire, "g-fail")
        assert (after.group_epoch, after.assignment_epoch) == (before.group_epoch, before.assignment_epoch)
        assert [(m.member_id, m.member_epoch, m.subscribed_topic_names) for m in after.members] == \
            [("m1", 1, ["sg-fail-a"])]
        monkeypatch.setattr(store, "append", real_append)
        r = hb(wire, "g-fail", "m1", 1, ["sg-fail-b"])
        assert (r.error_code, r.member_epoch) == (0, 2)


# -- the coordinator alone: random histories, replayed from their records ------------------------------

class _Topic:
    def __init__(self, topic_id: bytes, partitions: int):
        self.id, self.partitions = topic_id, partitions


class _Handle:
    def cancel(self) -> None:
        pass


class _FakeGroups:
    """What ShareGroupCoordinator needs of the GroupCoordinator: a store that records the appends, the
    other group types' maps, timers that never fire."""

    def __init__(self, topics: dict):
        from types import SimpleNamespace

        self.broker = SimpleNamespace(config={}, logs=SimpleNamespace(topics=topics))
        self.appended: list[tuple[bytes, bytes | None]] = []
        self.store = SimpleNamespace(append=lambda group_id, entries: self.appended.extend(entries))
        self.groups: dict = {}
        self.consumer = SimpleNamespace(groups={})
        self.loading = self._closed = False

    def _call_later(self, delay_ms, fn, *args):
        return _Handle()


def _request(member: str, epoch: int, topics=None):
    from types import SimpleNamespace

    return SimpleNamespace(group_id="g", member_id=member, member_epoch=epoch, rack_id=None,
                           subscribed_topic_names=topics)


def _view(coordinator) -> dict:
    group = coordinator.groups.get("g")
    if group is None:
        return {}
    return {"epochs": (group.group_epoch, group.assignment_epoch, group.metadata_hash),
            "members": {m.member_id: (m.member_epoch, m.previous_member_epoch, m.subscribed_topic_names,
                                      m.client_id, {t: sorted(ps) for t, ps in m.assigned.items()})
                        for m in group.members.values()},
            "target": {k: {t: sorted(ps) for t, ps in v.items()} for k, v in group.target.items()},
            "initialized": {t: (n, sorted(ps)) for t, (n, ps) in group.initialized.items()}}


_TOPIC_NAMES = ["a", "b", "c"]
_OPS = st.lists(st.one_of(
    st.tuples(st.just("join"), st.sampled_from(["m1", "m2", "m3"]),
              st.lists(st.sampled_from(_TOPIC_NAMES), min_size=1, max_size=3, unique=True)),
    st.tuples(st.just("beat"), st.sampled_from(["m1", "m2", "m3"]),
              st.none() | st.lists(st.sampled_from(_TOPIC_NAMES), max_size=3, unique=True)),
    st.tuples(st.just("leave"), st.sampled_from(["m1", "m2", "m3"]), st.none()),
    st.tuples(st.just("grow"), st.sampled_from(_TOPIC_NAMES), st.none()),
    st.tuples(st.just("drop"), st.sampled_from(_TOPIC_NAMES), st.none()),
), max_size=25)


@settings(max_examples=60, deadline=None)
@given(_OPS)
def test_random_histories_replay_from_their_records(ops):
    """Whatever happens, the records written describe the group exactly (a restart loads the same group),
    and every heartbeat moves a member to its target: partitions of its subscribed topics that exist only."""
    from minibroker.coordinator.group_coordinator import GroupCoordinator
    from minibroker.coordinator.share_group_coordinator import ShareGroupCoordinator

    topics = {"a": _Topic(b"\1" * 16, 1), "b": _Topic(b"\2" * 16, 2)}
    gc = _FakeGroups(topics)
    coordinator = ShareGroupCoordinator(gc)
    epochs: dict[str, int] = {}
    group_epochs = [0]
    for op, name, arg in ops:
        if op in ("join", "beat", "leave"):
            if op == "join":
                r = coordinator.heartbeat(_request(name, 0, arg), "client", "/host")
            elif op == "beat":
                r = coordinator.heartbeat(_request(name, epochs.get(name, 1), arg), "client", "/host")
            else:
                r = coordinator.heartbeat(_request(name, -1), "client", "/host")
            assert op != "join" or not r.error  # joining always works here (no size limit reached)
            if op == "leave" or r.error:  # a member that left, or was never in, is unknown
                continue
            epochs[name] = r.member_epoch
            member = coordinator.groups["g"].members[name]
            readable = {(topics[t].id, p) for t in member.subscribed_topic_names if t in topics
                        for p in range(topics[t].partitions)}
            assert {(t, p) for t, ps in member.assigned.items() for p in ps} <= readable
            assert member.assigned == coordinator.groups["g"].target.get(name, {})
            assert r.member_epoch == coordinator.groups["g"].assignment_epoch
        elif op == "grow":
            if name in topics:
                topics[name].partitions += 1
            else:
                topics[name] = _Topic(bytes([ord(name)]) * 16, 1)
        else:
            topics.pop(name, None)
        if "g" in coordinator.groups:
            assert coordinator.groups["g"].group_epoch >= group_epochs[-1]  # epochs never go back
            group_epochs.append(coordinator.groups["g"].group_epoch)
    # replay the records as a restart does
    share: dict = {}
    for key, value in gc.appended:
        GroupCoordinator._apply_record(key, value, {}, {}, {}, share)
    replayed = ShareGroupCoordinator(_FakeGroups(topics))
    for group_id, records in share.items():
        replayed.load(group_id, records)
    assert _view(replayed) == _view(coordinator)
