"""The share coordinator's state store (issue 21): ``__share_group_state`` records, the merge of state
batches, snapshot cadence and pruning, persistence across a clean restart and a kill -9, append failures,
damaged records on load, and the wire APIs 83-87 with and without an authorizer."""

from __future__ import annotations

import asyncio
import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from minibroker.coordinator.record_codec import RecordError
from minibroker.coordinator.share_state import (
    SHARE_STATE_TOPIC,
    DeliveryState,
    ShareState,
    StateBatch,
    coordinator_key,
    merge_batches,
)
from minibroker.coordinator.share_state_records import (
    ShareSnapshotValue,
    ShareStateKey,
    ShareUpdateValue,
    StateBatchRecord,
    decode_key,
    decode_snapshot_value,
    decode_update_value,
    encode_key,
    encode_snapshot_value,
    encode_update_value,
)
from minibroker.errors import ErrorCode as E
from minibroker.errors import KafkaError
from minibroker.testing import BrokerRunner
from minibroker.tools.wire import WireClient

INITIALIZE, READ, WRITE, DELETE, SUMMARY = 83, 84, 85, 86, 87
STANDARD = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
TOPIC_ID = uuid.UUID("6ba7b810-9dad-11d1-80b4-00c04fd430c8").bytes
STATES = [int(s) for s in DeliveryState]

# -- the record codec ---------------------------------------------------------------------------------

i32 = st.integers(-(2**31), 2**31 - 1)
i64 = st.integers(-(2**63), 2**63 - 1)
batch_records = st.builds(StateBatchRecord, i64, i64, st.integers(-128, 127),
                          st.integers(-(2**15), 2**15 - 1))
tagged = st.lists(st.tuples(st.integers(0, 1000), st.binary(max_size=8)), max_size=3,
                  unique_by=lambda t: t[0]).map(lambda fields: tuple(sorted(fields)))


@settings(max_examples=200, deadline=None)
@given(st.booleans(), st.text(max_size=20), st.binary(min_size=16, max_size=16), i32)
def test_keys_round_trip(snapshot, group, topic_id, partition):
    key = ShareStateKey(snapshot, group, topic_id, partition)
    data = encode_key(key)
    assert data[:2] == (b"\0\0" if snapshot else b"\0\1")  # the key version is the record type
    assert decode_key(data) == key


@settings(max_examples=200, deadline=None)
@given(st.builds(ShareSnapshotValue, i32, i32, i32, i64, i64, i64,
                 st.lists(batch_records, max_size=5).map(tuple), tagged))
def test_snapshot_values_round_trip(value):
    assert decode_snapshot_value(encode_snapshot_value(value)) == value


@settings(max_examples=200, deadline=None)
@given(st.builds(ShareUpdateValue, i32, i32, i64, st.lists(batch_records, max_size=5).map(tuple), tagged))
def test_update_values_round_trip(value):
    assert decode_update_value(encode_update_value(value)) == value


def test_a_snapshot_value_is_laid_out_as_kafka_writes_it():
    value = ShareSnapshotValue(1, 2, 3, 10, 1000, 2000, (StateBatchRecord(10, 12, 2, 1),))
    expected = (b"\0\0" + (1).to_bytes(4, "big") + (2).to_bytes(4, "big") + (3).to_bytes(4, "big")
                + (10).to_bytes(8, "big") + (1000).to_bytes(8, "big") + (2000).to_bytes(8, "big")
                + b"\x02"  # compact array length 1 + 1
                + (10).to_bytes(8, "big") + (12).to_bytes(8, "big") + b"\x02" + (1).to_bytes(2, "big")
                + b"\0"  # the batch's tagged fields
                + b"\0")  # the value's tagged fields
    assert encode_snapshot_value(value) == expected


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=60))
def test_garbage_never_decodes_into_anything_but_a_record_error(data):
    for decode in (decode_key, decode_snapshot_value, decode_update_value):
        try:
            decode(data)
        except RecordError:
            pass


# -- merging state batches ---------------------------------------------------------------------------

runs = st.lists(st.tuples(st.integers(0, 40), st.integers(0, 6), st.sampled_from(STATES), st.integers(0, 3)),
                max_size=6).map(lambda xs: [StateBatch(a, a + n, s, c) for a, n, s, c in xs])


def _per_offset(batches, start: int) -> dict[int, tuple[int, int]]:
    out: dict[int, tuple[int, int]] = {}
    for b in batches:
        for o in range(b.first_offset, b.last_offset + 1):
            out[o] = (b.delivery_state, b.delivery_count)
    return {o: v for o, v in out.items() if o >= start}


@settings(max_examples=300, deadline=None)
@given(runs, runs, st.integers(0, 30))
def test_merge_is_a_later_batch_wins_overlay_cut_at_the_start_offset(first, second, start):
    current = merge_batches((), first, 0)
    merged = merge_batches(current, second, start)
    assert _per_offset(merged, start) == _per_offset([*first, *second], start)
    for a, b in zip(merged, merged[1:], strict=False):  # sorted, disjoint, adjacent equal runs joined
        assert a.last_offset < b.first_offset
        assert not (a.last_offset + 1 == b.first_offset and a[2:] == b[2:])
    assert all(b.first_offset >= start for b in merged)


def test_delivery_complete_count_counts_acknowledged_and_archived_offsets_from_the_start():
    state = ShareState(0, -1, 5, (StateBatch(5, 9, 2, 1), StateBatch(10, 11, 0, 1), StateBatch(12, 12, 4, 5)),
                       0, 0)
    assert state.delivery_complete_count() == 6


# -- the coordinator in a running broker ---------------------------------------------------------------


def on_loop(runner: BrokerRunner, fn):
    """Run ``fn()`` on the broker's event loop (where broker.share_state lives) and return its result."""
    async def call():
        return fn()

    return asyncio.run_coroutine_threadsafe(call(), runner._loop).result(10)


def wait_loaded(runner: BrokerRunner) -> None:
    async def loaded():
        while not runner.broker.share_state.loaded:  # noqa: ASYNC110 - a flag the load task sets
            await asyncio.sleep(0.01)

    asyncio.run_coroutine_threadsafe(loaded(), runner._loop).result(10)


def records_of(runner: BrokerRunner, group: str, topic_id: bytes, partition: int) -> list[tuple[str, bytes]]:
    """("snapshot" | "update", value) of every record of this share partition in the state topic."""
    def read():
        store = runner.broker.share_state.store
        p = runner.broker.share_state.partition_of(group, topic_id, partition)
        out = []
        for r in store.read_partition(p):
            key = decode_key(r.key)
            if (key.group_id, key.topic_id, key.partition) == (group, topic_id, partition):
                out.append(("snapshot" if key.snapshot else "update", r.value))
        return out

    return on_loop(runner, read)


@pytest.fixture
def runner(tmp_path):
    r = BrokerRunner({"share.coordinator.snapshot.update.records.per.snapshot": "3",
                      "share.coordinator.state.topic.num.partitions": "5"},
                     data_dir=str(tmp_path / "data"), log_level="DEBUG")
    r.start()
    yield r
    r.cleanup()


def test_state_merges_snapshots_every_n_updates_and_survives_a_restart(runner):
    ss = lambda: runner.broker.share_state  # noqa: E731 - the broker object changes on restart
    wait_loaded(runner)
    on_loop(runner, lambda: ss().initialize("g", TOPIC_ID, 0, 100, 1))
    assert on_loop(runner, lambda: ss().read("g", TOPIC_ID, 0)).start_offset == 100
    on_loop(runner, lambda: ss().write("g", TOPIC_ID, 0, -1, [StateBatch(100, 109, 0, 1)], leader_epoch=3))
    on_loop(runner, lambda: ss().write("g", TOPIC_ID, 0, -1, [StateBatch(103, 104, 2, 1)]))
    on_loop(runner, lambda: ss().write("g", TOPIC_ID, 0, 101, [StateBatch(90, 99, 4, 2)]))  # wholly below
    state = on_loop(runner, lambda: ss().read("g", TOPIC_ID, 0))
    assert (state.state_epoch, state.leader_epoch, state.start_offset) == (1, 3, 101)
    assert state.batches == (StateBatch(101, 102, 0, 1), StateBatch(103, 104, 2, 1),
                             StateBatch(105, 109, 0, 1))
    kinds = [kind for kind, _ in records_of(runner, "g", TOPIC_ID, 0)]
    assert kinds == ["snapshot", "update", "update", "update"]

    # the fourth update is a snapshot of the merged state; the records before it are pruned
    on_loop(runner, lambda: ss().write("g", TOPIC_ID, 0, 105, [StateBatch(105, 105, 2, 1)]))
    kinds = records_of(runner, "g", TOPIC_ID, 0)
    assert [kind for kind, _ in kinds] == ["snapshot"]
    snapshot = decode_snapshot_value(kinds[0][1])
    assert snapshot.start_offset == 105 and snapshot.snapshot_epoch == 1
    assert snapshot.batches == (StateBatchRecord(105, 105, 2, 1), StateBatchRecord(106, 109, 0, 1))
    on_loop(runner, lambda: ss().write("g", TOPIC_ID, 0, -1, [StateBatch(106, 106, 4, 1)]))
    on_loop(runner, lambda: ss().initialize("g", TOPIC_ID, 1, 0, 0))
    before = on_loop(runner, lambda: (ss().read("g", TOPIC_ID, 0), ss().read("g", TOPIC_ID, 1)))
    assert on_loop(runner, lambda: ss().partitions("g")) == [(TOPIC_ID, 0), (TOPIC_ID, 1)]
    assert "wrote ShareUpdate" in runner.log_text()  # DEBUG logging of this path

    runner.restart()
    wait_loaded(runner)
    assert on_loop(runner, lambda: (ss().read("g", TOPIC_ID, 0), ss().read("g", TOPIC_ID, 1))) == before
    on_loop(runner, lambda: ss().delete("g", TOPIC_ID, 0))
    assert on_loop(runner, lambda: ss().read("g", TOPIC_ID, 0)) is None
    runner.restart()
    wait_loaded(runner)
    assert on_loop(runner, lambda: ss().read("g", TOPIC_ID, 0)) is None
    assert on_loop(runner, lambda: ss().partitions("g")) == [(TOPIC_ID, 1)]


def test_state_goes_to_the_partition_of_its_coordinator_key(runner):
    from minibroker.coordinator.group_records import partition_for
    from minibroker.storage.checkpoints import uuid_to_str

    wait_loaded(runner)
    assert coordinator_key("g", TOPIC_ID, 7) == f"g:{uuid_to_str(TOPIC_ID)}:7"
    on_loop(runner, lambda: runner.broker.share_state.initialize("g", TOPIC_ID, 7, 0, 0))
    expected = partition_for(f"g:{uuid_to_str(TOPIC_ID)}:7", 5)
    plog = runner.broker.logs.get_log(SHARE_STATE_TOPIC, expected)
    assert plog is not None and plog.log_end_offset == 1
    assert runner.broker.logs.topics[SHARE_STATE_TOPIC].partitions == 5


@pytest.mark.parametrize(("code", "raised"), [
    (E.KAFKA_STORAGE_ERROR, E.NOT_COORDINATOR),
    (E.CORRUPT_MESSAGE, E.COORDINATOR_NOT_AVAILABLE),
    (E.NOT_ENOUGH_REPLICAS, E.COORDINATOR_NOT_AVAILABLE),
])
def test_a_failed_append_changes_nothing_and_raises_the_mapped_error(runner, monkeypatch, code, raised):
    ss = runner.broker.share_state
    wait_loaded(runner)
    on_loop(runner, lambda: ss.initialize("g", TOPIC_ID, 0, 0, 0))
    on_loop(runner, lambda: ss.write("g", TOPIC_ID, 0, -1, [StateBatch(0, 4, 0, 1)]))
    before = on_loop(runner, lambda: ss.read("g", TOPIC_ID, 0))

    def refuse(*args, **kwargs):
        raise KafkaError(code, "refused")

    monkeypatch.setattr(runner.broker.replicas, "append_records", refuse)
    for change in (lambda: ss.write("g", TOPIC_ID, 0, 3, [StateBatch(0, 2, 2, 1)]),
                   lambda: ss.write("g", TOPIC_ID, 0, -1, [StateBatch(4, 4, 2, 1)]),
                   lambda: ss.initialize("g", TOPIC_ID, 0, 9, 1),
                   lambda: ss.delete("g", TOPIC_ID, 0),
                   lambda: ss.write("g", TOPIC_ID, 5, 0, [])):
        with pytest.raises(KafkaError) as info:
            on_loop(runner, change)
        assert info.value.code == raised
    assert on_loop(runner, lambda: ss.read("g", TOPIC_ID, 0)) == before
    assert on_loop(runner, lambda: ss.read("g", TOPIC_ID, 5)) is None
    monkeypatch.undo()
    on_loop(runner, lambda: ss.write("g", TOPIC_ID, 0, -1, [StateBatch(4, 4, 2, 1)]))
    assert on_loop(runner, lambda: ss.read("g", TOPIC_ID, 0)).batches[-1] == StateBatch(4, 4, 2, 1)


def test_unreadable_records_are_skipped_on_load(runner):
    ss = lambda: runner.broker.share_state  # noqa: E731
    wait_loaded(runner)
    on_loop(runner, lambda: ss().initialize("g", TOPIC_ID, 0, 10, 2))
    p = on_loop(runner, lambda: ss().partition_of("g", TOPIC_ID, 0))
    good_key = encode_key(ShareStateKey(False, "g", TOPIC_ID, 0))
    other_key = encode_key(ShareStateKey(True, "h", TOPIC_ID, 0))
    on_loop(runner, lambda: ss().store.append_to(p, [
        (b"\x00\x09unknown key version", b"x"),
        (good_key, b"\x00\x00\x00"),  # an update cut short
        (other_key, b"\x00\x07" + bytes(40)),  # a value version nobody knows
        (b"\x00", None),  # a key cut short
    ], what="test"))
    on_loop(runner, lambda: ss().write("g", TOPIC_ID, 0, -1, [StateBatch(10, 11, 2, 1)]))
    runner.restart()
    wait_loaded(runner)
    state = on_loop(runner, lambda: ss().read("g", TOPIC_ID, 0))
    assert (state.state_epoch, state.start_offset, state.batches) == (2, 10, (StateBatch(10, 11, 2, 1),))
    assert on_loop(runner, lambda: ss().read("h", TOPIC_ID, 0)) is None
    assert runner.log_text().count("skipping unreadable __share_group_state record") == 4


# -- the wire APIs -----------------------------------------------------------------------------------


def _partitions(group, partitions, **fields):
    return {"group_id": group, "topics": [{"topic_id": TOPIC_ID, "partitions": [
        {"partition": p, **fields} for p in partitions]}]}


def _write(state_epoch, leader_epoch, start_offset, batches=(), group="g", partitions=(0,)):
    return _partitions(group, partitions, state_epoch=state_epoch, leader_epoch=leader_epoch,
                       start_offset=start_offset, state_batches=list(batches))


def _batches(p) -> list[tuple[int, int, int, int]]:
    return [(b.first_offset, b.last_offset, b.delivery_state, b.delivery_count) for b in p.state_batches]


def _only(response):
    [topic] = response.results
    assert bytes(topic.topic_id) == TOPIC_ID
    return topic.partitions


def test_the_state_apis_over_the_wire(runner):
    wait_loaded(runner)
    with WireClient(runner.host, runner.port) as wire:
        [p0] = _only(wire.request(INITIALIZE, 0, _partitions("g", [0], state_epoch=1, start_offset=5)))
        assert (p0.partition, p0.error_code) == (0, 0)
        [p0] = _only(wire.request(READ, 0, _partitions("g", [0], leader_epoch=0)))
        assert (p0.error_code, p0.state_epoch, p0.start_offset, list(p0.state_batches)) == (0, 1, 5, [])
        batches = [{"first_offset": 5, "last_offset": 7, "delivery_state": 2, "delivery_count": 1},
                   {"first_offset": 8, "last_offset": 9, "delivery_state": 0, "delivery_count": 2}]
        [p0] = _only(wire.request(WRITE, 0, _write(1, 2, -1, batches)))
        assert p0.error_code == 0
        [p0] = _only(wire.request(READ, 0, _partitions("g", [0], leader_epoch=2)))
        assert _batches(p0) == [(5, 7, 2, 1), (8, 9, 0, 2)]
        for version in (0, 1):
            [p0] = _only(wire.request(SUMMARY, version, _partitions("g", [0], leader_epoch=2)))
            assert (p0.error_code, p0.state_epoch, p0.leader_epoch, p0.start_offset) == (0, 1, 2, 5)
            if version == 1:
                assert p0.delivery_complete_count == 3

        # older epochs are fenced; a newer state epoch wins
        [p0] = _only(wire.request(WRITE, 0, _write(0, 2, -1, [])))
        assert p0.error_code == E.FENCED_STATE_EPOCH
        [p0] = _only(wire.request(WRITE, 0, _write(1, 1, -1, [])))
        assert p0.error_code == E.FENCED_LEADER_EPOCH
        [p0] = _only(wire.request(READ, 0, _partitions("g", [0], leader_epoch=1)))
        assert p0.error_code == E.FENCED_LEADER_EPOCH
        [p0] = _only(wire.request(INITIALIZE, 0, _partitions("g", [0], state_epoch=0, start_offset=0)))
        assert p0.error_code == E.FENCED_STATE_EPOCH
        [p0] = _only(wire.request(INITIALIZE, 0, _partitions("g", [0], state_epoch=2, start_offset=0)))
        assert p0.error_code == 0

        # bad input is INVALID_REQUEST, per partition
        bad = {"first_offset": 5, "last_offset": 4, "delivery_state": 0, "delivery_count": 1}
        [p0] = _only(wire.request(WRITE, 0, _write(2, 2, -1, [bad])))
        assert p0.error_code == E.INVALID_REQUEST
        bad = {"first_offset": 5, "last_offset": 5, "delivery_state": 3, "delivery_count": 1}
        [p0] = _only(wire.request(WRITE, 0, _write(2, 2, -1, [bad])))
        assert p0.error_code == E.INVALID_REQUEST
        [p_neg] = _only(wire.request(READ, 0, _partitions("g", [-1], leader_epoch=0)))
        assert p_neg.error_code == E.INVALID_REQUEST
        [p0] = _only(wire.request(READ, 0, _partitions("", [0], leader_epoch=0)))
        assert p0.error_code == E.INVALID_REQUEST
        r = wire.request(READ, 0, {"group_id": "g", "topics": [{"topic_id": b"\0" * 16, "partitions": [
            {"partition": 0, "leader_epoch": 0}]}]})
        assert r.results[0].partitions[0].error_code == E.INVALID_REQUEST

        # a write checks the leader epoch but does not record it (a read does); -1 epochs are not checked
        [p0] = _only(wire.request(WRITE, 0, _write(-1, 5, -1, [])))
        assert p0.error_code == 0
        [p0] = _only(wire.request(SUMMARY, 0, _partitions("g", [0], leader_epoch=0)))
        assert (p0.state_epoch, p0.leader_epoch) == (2, 2)
        [p0] = _only(wire.request(WRITE, 0, _write(2, -1, -1, [])))
        assert p0.error_code == 0
        [p0] = _only(wire.request(READ, 0, _partitions("g", [0], leader_epoch=-1)))
        assert p0.error_code == E.FENCED_LEADER_EPOCH

        # no state: reads and writes are refused as Kafka's share coordinator does; delete; the summary
        [p3] = _only(wire.request(READ, 0, _partitions("g", [3], leader_epoch=0)))
        assert p3.error_code == E.INVALID_REQUEST
        [p3] = _only(wire.request(WRITE, 0, _write(0, 0, 0, [], partitions=(3,))))
        assert p3.error_code == E.INVALID_REQUEST
        assert on_loop(runner, lambda: runner.broker.share_state.read("g", TOPIC_ID, 3)) is None
        [p0, p3] = _only(wire.request(DELETE, 0, _partitions("g", [0, 3])))
        assert (p0.error_code, p3.error_code) == (0, 0)
        [p0] = _only(wire.request(SUMMARY, 1, _partitions("g", [0], leader_epoch=0)))
        assert (p0.error_code, p0.start_offset, p0.delivery_complete_count) == (0, -1, -1)

        # while the state topic loads: COORDINATOR_LOAD_IN_PROGRESS (retriable)
        on_loop(runner, lambda: setattr(runner.broker.share_state, "loaded", False))
        try:
            for api, body in ((READ, _partitions("g", [0], leader_epoch=0)),
                              (WRITE, _write(2, 2, -1, []))):
                [p0] = _only(wire.request(api, 0, body))
                assert p0.error_code == E.COORDINATOR_LOAD_IN_PROGRESS
        finally:
            on_loop(runner, lambda: setattr(runner.broker.share_state, "loaded", True))


def test_the_state_apis_are_served_but_not_advertised(runner):
    with WireClient(runner.host, runner.port) as wire:
        r = wire.request(18, 3, {"client_software_name": "t", "client_software_version": "1"})
    assert not {k.api_key for k in r.api_keys} & {INITIALIZE, READ, WRITE, DELETE, SUMMARY}


def test_the_state_apis_need_cluster_action(minibroker_factory):
    denied = minibroker_factory({"authorizer.class.name": STANDARD})  # no ACLs: User:ANONYMOUS denied
    with WireClient(denied.host, denied.port) as wire:
        for api, version, fields in ((INITIALIZE, 0, {"state_epoch": 0, "start_offset": 0}),
                                     (READ, 0, {"leader_epoch": 0}),
                                     (WRITE, 0, {"state_epoch": 0, "leader_epoch": 0, "start_offset": 0,
                                                 "state_batches": []}),
                                     (DELETE, 0, {}), (SUMMARY, 1, {"leader_epoch": 0})):
            parts = _only(wire.request(api, version, _partitions("g", [0, 1], **fields)))
            assert [p.error_code for p in parts] == [E.CLUSTER_AUTHORIZATION_FAILED] * 2
    assert denied.broker.share_state.states == {}
    allowed = minibroker_factory({"authorizer.class.name": STANDARD,
                                  "allow.everyone.if.no.acl.found": "true"})
    with WireClient(allowed.host, allowed.port) as wire:
        [p0] = _only(wire.request(INITIALIZE, 0, _partitions("g", [0], state_epoch=0, start_offset=0)))
        assert p0.error_code == 0


def test_state_written_over_the_wire_survives_kill_9(tmp_path):
    runner = BrokerRunner({"share.coordinator.snapshot.update.records.per.snapshot": "2"},
                          data_dir=str(tmp_path / "data"), mode="process")
    runner.start()
    try:
        with WireClient(runner.host, runner.port) as wire:
            for p in (0, 1):
                _only(wire.request(INITIALIZE, 0, _partitions("g", [p], state_epoch=1, start_offset=0)))
            for i in range(5):  # snapshots and updates both
                [p0] = _only(wire.request(WRITE, 0, _partitions("g", [0], state_epoch=1, leader_epoch=0,
                                                                start_offset=i, state_batches=[
                    {"first_offset": i, "last_offset": i + 1, "delivery_state": 2, "delivery_count": i}])))
                assert p0.error_code == 0
        runner.kill()
        runner.start()
        with WireClient(runner.host, runner.port) as wire:
            for _ in range(500):  # the load runs in the background: retriable until it is done
                [p0, p1] = _only(wire.request(READ, 0, _partitions("g", [0, 1], leader_epoch=0)))
                if p0.error_code != E.COORDINATOR_LOAD_IN_PROGRESS:
                    break
        assert (p0.error_code, p0.state_epoch, p0.start_offset) == (0, 1, 4)
        assert _batches(p0) == [(4, 5, 2, 4)]
        assert (p1.error_code, p1.start_offset, list(p1.state_batches)) == (0, 0, [])
    finally:
        runner.cleanup()
