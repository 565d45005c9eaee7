"""Transactions (issue 17): the transaction coordinator's state machine without sockets (a stub broker,
an in-memory ``__transaction_state`` and a fake marker writer), the transaction APIs on the wire, and
real clients (kafka-python, confluent-kafka, aiokafka) over real sockets, across restarts."""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from types import SimpleNamespace

import pytest

from minibroker.coordinator.group_records import OffsetCommitValue, encode_offset_commit_key
from minibroker.coordinator.offsets_store import OFFSETS_TOPIC, StoredRecord
from minibroker.coordinator.transaction_coordinator import (
    COORDINATOR_EPOCH,
    TransactionCoordinator,
)
from minibroker.coordinator.transaction_records import (
    TransactionLogValue,
    TransactionState,
    TxnPartitions,
    decode_key,
    decode_value,
    encode_key,
    encode_value,
)
from minibroker.errors import ErrorCode as E
from minibroker.errors import KafkaError
from minibroker.tools.wire import WireClient

S = TransactionState
CONFIG = {
    "transaction.max.timeout.ms": 900000,
    "transactional.id.expiration.ms": 604800000,
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": 10000,
    "transaction.remove.expired.transaction.cleanup.interval.ms": 3600000,
    "transaction.state.log.num.partitions": 50,
}

# kafka-python leaks the socket of a closed producer, reported later by GC
pytestmark = pytest.mark.filterwarnings("ignore::ResourceWarning")


# -- the state machine, without sockets ------------------------------------------------------------


class MemoryTransactionLog:
    """Stands in for TransactionStateTopic: keeps appended (key, value) records in order."""

    def __init__(self, records=None):
        self.records: list[tuple[bytes, bytes | None]] = list(records or [])
        self.fail: E | None = None
        self.num_partitions = 1

    @property
    def exists(self) -> bool:
        return bool(self.records)

    def ensure_topic(self) -> None:
        pass

    def partition_for(self, transactional_id: str) -> int:
        return 0

    def append(self, transactional_id, value) -> None:
        if self.fail is not None:
            raise KafkaError(self.fail)
        self.records.append((encode_key(transactional_id), value))

    def read_partition(self, partition):
        yield from self.records

    def states(self, transactional_id: str) -> list[TransactionState | None]:
        """The states written for one id, in order (None for a tombstone)."""
        return [
            None if v is None else S(decode_value(v).transaction_status)
            for k, v in self.records
            if decode_key(k).transactional_id == transactional_id
        ]


class FakeMarkers:
    """The marker writer: records each marker; ``fail`` makes writes raise that error."""

    def __init__(self):
        self.written: list[tuple[str, int, int, int, int, bool]] = []
        self.fail: E | None = None

    def __call__(self, topic, partition, producer_id, producer_epoch, coordinator_epoch, commit):
        if self.fail is not None:
            raise KafkaError(self.fail)
        self.written.append((topic, partition, producer_id, producer_epoch, coordinator_epoch, commit))


class FakeGroups:
    def __init__(self):
        self.loading = False
        self.completed: list[tuple[int, int, bool]] = []

    def complete_transactional_offsets(self, partition, producer_id, commit):
        self.completed.append((partition, producer_id, commit))


def make_coordinator(records=None, **overrides):
    tasks = set()

    def spawn(coro):
        task = asyncio.ensure_future(coro)
        tasks.add(task)
        return task

    ids = iter(range(1000, 2000))
    topics = {"t": SimpleNamespace(partitions=3), OFFSETS_TOPIC: SimpleNamespace(partitions=50)}
    broker = SimpleNamespace(
        config={**CONFIG, **overrides},
        logs=SimpleNamespace(topics=topics),
        spawn=spawn,
        producer_ids=SimpleNamespace(allocate=lambda: next(ids)),
        groups=FakeGroups(),
        _tasks=tasks,
    )
    markers = FakeMarkers()
    store = MemoryTransactionLog(records)
    coordinator = TransactionCoordinator(broker, marker_writer=markers, store=store)
    coordinator.start()
    return coordinator, store, markers


def code_of(fn, *args) -> E:
    with pytest.raises(KafkaError) as exc:
        fn(*args)
    return exc.value.code


async def test_commit_writes_each_state_then_the_markers():
    tc, store, markers = make_coordinator()
    pid, epoch = tc.init_producer_id("tx", 60000)
    assert (pid, epoch) == (1000, 0)
    tc.add_partitions("tx", pid, epoch, [("t", 0), ("t", 2)])
    tc.add_partitions("tx", pid, epoch, [("t", 0)])  # already in: nothing written
    assert tc.describe("tx").state == "Ongoing" and tc.describe("tx").partitions == (("t", 0), ("t", 2))
    tc.end_transaction("tx", pid, epoch, True)
    assert markers.written == [
        ("t", 0, pid, 0, COORDINATOR_EPOCH, True),
        ("t", 2, pid, 0, COORDINATOR_EPOCH, True),
    ]
    assert store.states("tx") == [S.EMPTY, S.ONGOING, S.PREPARE_COMMIT, S.COMPLETE_COMMIT]
    prepare = decode_value(store.records[2][1])
    assert (
        prepare.transaction_partitions == (TxnPartitions("t", (0, 2)),)
        and prepare.transaction_timeout_ms == 60000
    )
    assert decode_value(store.records[3][1]).transaction_partitions == ()
    tc.end_transaction("tx", pid, epoch, True)  # a retry of the end that completed: fine
    assert code_of(tc.end_transaction, "tx", pid, epoch, False) == E.INVALID_TXN_STATE
    tc.close()


async def test_abort_and_the_next_transaction():
    tc, store, markers = make_coordinator()
    pid, epoch = tc.init_producer_id("tx", 60000)
    tc.add_partitions("tx", pid, epoch, [("t", 1)])
    tc.end_transaction("tx", pid, epoch, False)
    assert markers.written == [("t", 1, pid, epoch, 0, False)] and tc.describe("tx").state == "CompleteAbort"
    tc.add_partitions("tx", pid, epoch, [("t", 0)])
    tc.end_transaction("tx", pid, epoch, True)
    assert store.states("tx")[-2:] == [S.PREPARE_COMMIT, S.COMPLETE_COMMIT]
    tc.close()


async def test_request_errors():
    tc, store, _ = make_coordinator()
    assert code_of(tc.init_producer_id, "", 60000) == E.INVALID_REQUEST
    assert code_of(tc.init_producer_id, "tx", 0) == E.INVALID_TRANSACTION_TIMEOUT
    assert code_of(tc.init_producer_id, "tx", 900001) == E.INVALID_TRANSACTION_TIMEOUT
    assert code_of(tc.init_producer_id, "tx", 60000, 5, -1) == E.INVALID_REQUEST
    pid, epoch = tc.init_producer_id("tx", 60000)
    assert code_of(tc.add_partitions, "nope", pid, epoch, [("t", 0)]) == E.INVALID_PRODUCER_ID_MAPPING
    assert code_of(tc.add_partitions, "tx", pid + 1, epoch, [("t", 0)]) == E.INVALID_PRODUCER_ID_MAPPING
    assert code_of(tc.add_partitions, "tx", pid, epoch + 1, [("t", 0)]) == E.PRODUCER_FENCED
    assert code_of(tc.end_transaction, "tx", pid, epoch, True) == E.INVALID_TXN_STATE  # nothing open
    assert code_of(tc.end_transaction, "", pid, epoch, True) == E.INVALID_REQUEST
    store.fail = E.COORDINATOR_NOT_AVAILABLE  # what TransactionStateTopic raises for a failed append
    assert code_of(tc.add_partitions, "tx", pid, epoch, [("t", 0)]) == E.COORDINATOR_NOT_AVAILABLE
    assert tc.describe("tx").state == "Empty"  # nothing changed when the write failed
    assert tc.describe("nope").error == E.TRANSACTIONAL_ID_NOT_FOUND
    tc.close()


async def test_a_failed_marker_is_retried_and_the_transaction_completes_after():
    tc, store, markers = make_coordinator()
    pid, epoch = tc.init_producer_id("tx", 60000)
    tc.add_partitions("tx", pid, epoch, [("t", 0), ("t", 1)])
    markers.fail = E.NOT_LEADER_OR_FOLLOWER
    tc.end_transaction("tx", pid, epoch, True)  # answered: PrepareCommit is written
    assert tc.describe("tx").state == "PrepareCommit"
    assert code_of(tc.end_transaction, "tx", pid, epoch, True) == E.CONCURRENT_TRANSACTIONS
    assert code_of(tc.add_partitions, "tx", pid, epoch, [("t", 0)]) == E.CONCURRENT_TRANSACTIONS
    assert code_of(tc.init_producer_id, "tx", 60000) == E.CONCURRENT_TRANSACTIONS
    assert code_of(tc.end_transaction, "tx", pid, epoch, False) == E.INVALID_TXN_STATE
    markers.fail = None
    await asyncio.sleep(0.3)
    assert tc.describe("tx").state == "CompleteCommit"
    assert sorted(m[1] for m in markers.written) == [0, 1]
    tc.close()


async def test_a_new_instance_fences_the_old_one_and_aborts_its_transaction():
    tc, store, markers = make_coordinator()
    pid, epoch = tc.init_producer_id("tx", 60000)
    tc.add_partitions("tx", pid, epoch, [("t", 0)])
    assert code_of(tc.init_producer_id, "tx", 60000) == E.CONCURRENT_TRANSACTIONS
    assert markers.written == [("t", 0, pid, epoch + 1, 0, False)]  # the abort, at the bumped epoch
    assert store.states("tx")[-2:] == [S.PREPARE_ABORT, S.COMPLETE_ABORT]
    assert tc.init_producer_id("tx", 60000) == (pid, epoch + 2)
    assert code_of(tc.add_partitions, "tx", pid, epoch, [("t", 0)]) == E.PRODUCER_FENCED
    assert code_of(tc.end_transaction, "tx", pid, epoch, True) == E.PRODUCER_FENCED
    tc.close()


async def test_timed_out_transactions_are_aborted_with_an_epoch_bump():
    tc, store, markers = make_coordinator()
    pid, epoch = tc.init_producer_id("tx", 1000)
    tc.add_partitions("tx", pid, epoch, [("t", 2)])
    start = tc.transactions["tx"].start_ms
    assert tc.abort_timed_out_transactions(now=start + 1000) == 0
    assert tc.abort_timed_out_transactions(now=start + 1001) == 1
    assert markers.written == [("t", 2, pid, epoch + 1, 0, False)]
    assert tc.describe("tx").state == "CompleteAbort" and tc.describe("tx").producer_epoch == epoch + 1
    assert code_of(tc.end_transaction, "tx", pid, epoch, True) == E.PRODUCER_FENCED
    tc.close()


async def test_kip_360_producer_id_and_epoch_in_init_producer_id():
    tc, store, _ = make_coordinator()
    pid, epoch = tc.init_producer_id("tx", 60000)
    assert tc.init_producer_id("tx", 60000, pid, epoch) == (pid, epoch + 1)  # resume: bump
    assert tc.init_producer_id("tx", 60000, pid, epoch) == (pid, epoch + 1)  # retry of that bump
    assert code_of(tc.init_producer_id, "tx", 60000, pid + 7, 0) == E.PRODUCER_FENCED
    assert code_of(tc.init_producer_id, "tx", 60000, pid, epoch + 5) == E.PRODUCER_FENCED
    tc.close()


async def test_an_exhausted_epoch_brings_a_new_producer_id():
    tc, store, _ = make_coordinator()
    pid, _ = tc.init_producer_id("tx", 60000)
    tc.transactions["tx"].producer_epoch = 32766
    new_pid, epoch = tc.init_producer_id("tx", 60000)
    assert new_pid != pid and epoch == 0
    assert tc.transactions["tx"].previous_producer_id == pid
    tc.close()


async def test_verify_only_and_offsets_partition_checks():
    tc, store, _ = make_coordinator()
    pid, epoch = tc.init_producer_id("tx", 60000)
    tc.add_partitions("tx", pid, epoch, [("t", 0), (OFFSETS_TOPIC, 7)])
    assert tc.verify_partitions("tx", pid, epoch, [("t", 0), ("t", 1)]) == {
        ("t", 0): E.NONE,
        ("t", 1): E.TRANSACTION_ABORTABLE,
    }
    assert tc.verify_partitions("tx", pid, epoch + 1, [("t", 0)]) == {("t", 0): E.PRODUCER_FENCED}
    tc.ensure_offsets_partition_in_transaction("tx", pid, epoch, 7)
    assert code_of(tc.ensure_offsets_partition_in_transaction, "tx", pid, epoch, 8) == E.INVALID_TXN_STATE
    tc.end_transaction("tx", pid, epoch, True)
    assert tc.broker.groups.completed == [(7, pid, True)]  # the group coordinator learns of the marker
    assert code_of(tc.ensure_offsets_partition_in_transaction, "tx", pid, epoch, 7) == E.INVALID_TXN_STATE
    tc.close()


def _value(state, pid=5, epoch=3, partitions=(), timeout=60000, start=-1, update=1):
    return encode_value(
        TransactionLogValue(
            pid, epoch, timeout, int(state), [TxnPartitions(t, ps) for t, ps in partitions], update, start
        )
    )


async def test_load_completes_preparing_transactions_and_keeps_ongoing_ones():
    now = int(time.time() * 1000)
    records = [
        (encode_key("a"), _value(S.EMPTY, pid=1)),
        (encode_key("a"), _value(S.PREPARE_COMMIT, pid=1, partitions=[("t", (0, 1))], start=now)),
        (encode_key("b"), _value(S.ONGOING, pid=2, partitions=[("t", (2,))], start=now)),
        (encode_key("c"), _value(S.COMPLETE_ABORT, pid=3)),
        (encode_key("c"), None),  # expired
        (
            encode_key("d"),
            _value(S.PREPARE_ABORT, pid=4, partitions=[("t", (0,)), ("gone", (0,))], start=now),
        ),
    ]
    tc, store, markers = make_coordinator(records)
    assert tc.loading
    assert code_of(tc.init_producer_id, "a", 60000) == E.COORDINATOR_LOAD_IN_PROGRESS
    assert tc.describe("a").error == E.COORDINATOR_LOAD_IN_PROGRESS
    await asyncio.gather(*tc.broker._tasks)
    assert not tc.loading
    assert tc.describe("a").state == "CompleteCommit" and tc.describe("d").state == "CompleteAbort"
    assert sorted(markers.written) == [
        ("t", 0, 1, 3, 0, True),
        ("t", 0, 4, 3, 0, False),
        ("t", 1, 1, 3, 0, True),
    ]
    assert tc.describe("b").state == "Ongoing" and tc.describe("b").partitions == (("t", 2),)
    assert tc.describe("c").error == E.TRANSACTIONAL_ID_NOT_FOUND
    assert tc.abort_timed_out_transactions(now=now + 60001) == 1  # "b" times out as usual
    assert tc.describe("b").state == "CompleteAbort"
    tc.close()


async def test_markers_on_consumer_offsets_wait_for_the_group_load():
    now = int(time.time() * 1000)
    records = [
        (encode_key("a"), _value(S.PREPARE_COMMIT, pid=1, partitions=[(OFFSETS_TOPIC, (9,))], start=now))
    ]
    tc, store, markers = make_coordinator(records)
    tc.broker.groups.loading = True
    await asyncio.gather(*tc.broker._tasks)
    assert markers.written == [] and tc.describe("a").state == "PrepareCommit"
    tc.broker.groups.loading = False
    await asyncio.sleep(0.3)
    assert (
        markers.written == [(OFFSETS_TOPIC, 9, 1, 3, 0, True)] and tc.describe("a").state == "CompleteCommit"
    )
    assert tc.broker.groups.completed == [(9, 1, True)]
    tc.close()


async def test_transactional_ids_expire():
    tc, store, _ = make_coordinator(**{"transactional.id.expiration.ms": 1000})
    pid, epoch = tc.init_producer_id("idle", 60000)
    tc.init_producer_id("busy", 60000)
    tc.add_partitions("busy", pid + 1, 0, [("t", 0)])
    update = tc.transactions["idle"].last_update_ms
    assert tc.expire_transactional_ids(now=update + 999) == 0
    assert tc.expire_transactional_ids(now=update + 100000) == 1  # "busy" has a transaction open
    assert store.states("idle")[-1] is None and tc.describe("idle").error == E.TRANSACTIONAL_ID_NOT_FOUND
    assert tc.init_producer_id("idle", 60000)[0] != pid  # starts afresh
    tc.close()


async def test_list_transactions_filters():
    tc, store, _ = make_coordinator()
    p1, e1 = tc.init_producer_id("one", 60000)
    p2, _ = tc.init_producer_id("two", 60000)
    tc.add_partitions("one", p1, e1, [("t", 0)])
    unknown, listed = tc.list_transactions()
    assert unknown == [] and {(t.transactional_id, t.state) for t in listed} == {
        ("one", "Ongoing"),
        ("two", "Empty"),
    }
    unknown, listed = tc.list_transactions(["Ongoing", "Bogus"])
    assert unknown == ["Bogus"] and [t.transactional_id for t in listed] == ["one"]
    assert [t.transactional_id for t in tc.list_transactions(producer_ids=[p2])[1]] == ["two"]
    start = tc.transactions["one"].start_ms
    assert "one" not in {
        t.transactional_id for t in tc.list_transactions(duration_ms=5000, now=start + 10)[1]
    }
    assert "one" in {t.transactional_id for t in tc.list_transactions(duration_ms=5000, now=start + 6000)[1]}
    tc.close()


# -- transactional offsets in the group coordinator ------------------------------------------------


async def test_group_coordinator_keeps_transactional_offsets_pending_until_the_marker():
    from test_groups_coordinator import make_coordinator as make_group_coordinator

    gc = make_group_coordinator()
    appended = []
    gc.store.append = lambda group_id, entries, **kw: appended.append((group_id, entries, kw))
    value = OffsetCommitValue(42, "m", 1, -1, -1)
    errors = gc.commit_transactional_offsets("g", 7, 0, -1, "", None, {("t", 0): value})
    assert errors == {("t", 0): E.NONE} and appended[0][2] == {"producer_id": 7, "producer_epoch": 0}
    assert gc.fetch_offsets("g", [("t", 0)]) == {("t", 0): None} and gc.unstable_partitions("g") == {("t", 0)}
    gc.complete_transactional_offsets(gc.partition_for("g"), 7, commit=True)
    assert gc.fetch_offsets("g", [("t", 0)]) == {("t", 0): value} and gc.unstable_partitions("g") == set()
    gc.commit_transactional_offsets("g", 8, 0, -1, "", None, {("t", 0): OffsetCommitValue(99, "", 1, -1, -1)})
    gc.complete_transactional_offsets(gc.partition_for("g"), 8, commit=False)
    assert gc.fetch_offsets("g", [("t", 0)])[("t", 0)].offset == 42  # the abort dropped 99
    with pytest.raises(KafkaError) as exc:
        gc.commit_transactional_offsets("g", 7, 0, 3, "", None, {("t", 0): value})
    assert exc.value.code == E.ILLEGAL_GENERATION
    with pytest.raises(KafkaError) as exc:
        gc.commit_transactional_offsets("g", 7, 0, -1, "someone", None, {("t", 0): value})
    assert exc.value.code == E.UNKNOWN_MEMBER_ID
    gc.close()


async def test_group_load_replays_transactional_offsets_and_markers():
    from test_groups_coordinator import make_coordinator as make_group_coordinator

    from minibroker.coordinator.group_records import encode_offset_commit_value

    def commit(group, offset, producer_id=-1):
        return StoredRecord(
            encode_offset_commit_key(group, "t", 0),
            encode_offset_commit_value(OffsetCommitValue(offset, "", 1, -1, -1)),
            producer_id,
        )

    records = [
        commit("g", 1),
        commit("g", 2, producer_id=5),
        StoredRecord(None, None, 5, True),
        commit("g", 3, producer_id=6),
        StoredRecord(None, None, 6, False),
        commit("h", 4, producer_id=7),
    ]  # still open at load
    gc = make_group_coordinator(records)
    await asyncio.sleep(0.05)
    assert not gc.loading
    assert gc.fetch_offsets("g", [("t", 0)])[("t", 0)].offset == 2
    assert gc.fetch_offsets("h", [("t", 0)]) == {("t", 0): None} and gc.unstable_partitions("h") == {("t", 0)}
    gc.complete_transactional_offsets(gc.partition_for("h"), 7, commit=True)
    assert gc.fetch_offsets("h", [("t", 0)])[("t", 0)].offset == 4
    gc.close()


# -- the APIs on the wire --------------------------------------------------------------------------

FIND_COORDINATOR, OFFSET_FETCH, INIT_PRODUCER_ID = 10, 9, 22
ADD_PARTITIONS, ADD_OFFSETS, END_TXN, TXN_OFFSET_COMMIT = 24, 25, 26, 28
DESCRIBE_TRANSACTIONS, LIST_TRANSACTIONS = 65, 66


def _init(wire, version, tid, pid=-1, epoch=-1, timeout=60000):
    r = wire.request(
        INIT_PRODUCER_ID,
        version,
        {
            "transactional_id": tid,
            "transaction_timeout_ms": timeout,
            "producer_id": pid,
            "producer_epoch": epoch,
        },
    )
    return r.error_code, r.producer_id, r.producer_epoch


def _add_partitions(wire, version, tid, pid, epoch, topic, partitions):
    body = {
        "v3_and_below_transactional_id": tid,
        "v3_and_below_producer_id": pid,
        "v3_and_below_producer_epoch": epoch,
        "v3_and_below_topics": [{"name": topic, "partitions": partitions}],
    }
    r = wire.request(ADD_PARTITIONS, version, body)
    return {
        (t.name, p.partition_index): p.partition_error_code
        for t in r.results_by_topic_v3_and_below
        for p in t.results_by_partition
    }


@pytest.mark.parametrize("version", range(7))
def test_find_coordinator_for_transactional_ids(minibroker, version):
    if version == 0:
        pytest.skip("FindCoordinator v0 has no key type")
    with WireClient(minibroker.host, minibroker.port) as wire:
        body = {"key": "tx", "key_type": 1, "coordinator_keys": ["tx", "tx2"]}
        r = wire.request(FIND_COORDINATOR, version, body)
        answers = (
            [(c.error_code, c.node_id, c.port) for c in r.coordinators]
            if version >= 4
            else [(r.error_code, r.node_id, r.port)]
        )
        assert set(answers) == {(0, minibroker.broker.node_id, minibroker.port)}
    assert "__transaction_state" in minibroker.broker.logs.topics


@pytest.mark.parametrize("version", range(6))
def test_init_producer_id_versions(minibroker, version):
    tid = f"wire-init-{version}-{uuid.uuid4()}"
    with WireClient(minibroker.host, minibroker.port) as wire:
        error, pid, epoch = _init(wire, version, tid)
        assert error == 0 and pid >= 0 and epoch == 0
        assert _init(wire, version, tid)[1:] == (pid, 1)
        assert _init(wire, version, tid, timeout=900001)[0] == 50  # INVALID_TRANSACTION_TIMEOUT
        assert _init(wire, version, "")[0] == 42
        if version >= 3:
            fenced = _init(wire, version, tid, pid + 1000, 0)[0]
            assert fenced == (90 if version >= 4 else 47)  # PRODUCER_FENCED, INVALID_PRODUCER_EPOCH before v4


@pytest.mark.parametrize("version", range(4))
def test_add_partitions_to_txn_versions(minibroker, topic_name, version):
    minibroker.create_topic(topic_name, partitions=2)
    tid = f"wire-add-{version}-{uuid.uuid4()}"
    with WireClient(minibroker.host, minibroker.port) as wire:
        _, pid, epoch = _init(wire, 3, tid)
        assert _add_partitions(wire, version, tid, pid, epoch, topic_name, [0, 1]) == {
            (topic_name, 0): 0,
            (topic_name, 1): 0,
        }
        assert _add_partitions(wire, version, tid, pid, epoch, topic_name, [5]) == {(topic_name, 5): 3}
        assert _add_partitions(wire, version, tid, pid, epoch + 1, topic_name, [0]) == {
            (topic_name, 0): 90 if version >= 2 else 47
        }
        assert _add_partitions(wire, version, tid, pid + 1, epoch, topic_name, [0]) == {(topic_name, 0): 49}
        assert _add_partitions(wire, version, tid, pid, epoch, "__consumer_offsets", [0]) == {
            ("__consumer_offsets", 0): 29
        }  # internal topics: not from clients
        r = wire.request(DESCRIBE_TRANSACTIONS, 0, {"transactional_ids": [tid, "nope-" + tid]})
        described, missing = r.transaction_states
        assert (described.error_code, described.transaction_state, described.producer_id) == (
            0,
            "Ongoing",
            pid,
        )
        assert [(t.topic, sorted(t.partitions)) for t in described.topics] == [(topic_name, [0, 1])]
        assert missing.error_code == 105  # TRANSACTIONAL_ID_NOT_FOUND
        r = wire.request(
            END_TXN,
            version,
            {"transactional_id": tid, "producer_id": pid, "producer_epoch": epoch, "committed": False},
        )
        assert r.error_code == 0
        r = wire.request(
            END_TXN,
            version,
            {"transactional_id": tid, "producer_id": pid, "producer_epoch": epoch, "committed": True},
        )
        assert r.error_code == 48  # INVALID_TXN_STATE: it was aborted


def test_add_partitions_v4_batched_and_verify_only(minibroker, topic_name):
    minibroker.create_topic(topic_name, partitions=2)
    tid = f"wire-v4-{uuid.uuid4()}"
    with WireClient(minibroker.host, minibroker.port) as wire:
        _, pid, epoch = _init(wire, 4, tid)

        def add(verify_only, partitions):
            r = wire.request(
                ADD_PARTITIONS,
                5,
                {
                    "transactions": [
                        {
                            "transactional_id": tid,
                            "producer_id": pid,
                            "producer_epoch": epoch,
                            "verify_only": verify_only,
                            "topics": [{"name": topic_name, "partitions": partitions}],
                        }
                    ]
                },
            )
            assert r.error_code == 0
            (txn,) = r.results_by_transaction
            return {
                p.partition_index: p.partition_error_code
                for t in txn.topic_results
                for p in t.results_by_partition
            }

        assert add(False, [0]) == {0: 0}
        assert add(True, [0, 1]) == {0: 0, 1: 120}  # TRANSACTION_ABORTABLE: not in the transaction


def test_list_transactions_on_the_wire(minibroker, topic_name):
    minibroker.create_topic(topic_name)
    tid = f"wire-list-{uuid.uuid4()}"
    with WireClient(minibroker.host, minibroker.port) as wire:
        _, pid, epoch = _init(wire, 4, tid)
        _add_partitions(wire, 3, tid, pid, epoch, topic_name, [0])
        for version in (0, 1):
            r = wire.request(
                LIST_TRANSACTIONS,
                version,
                {"state_filters": ["Ongoing", "Nope"], "producer_id_filters": [pid], "duration_filter": -1},
            )
            assert r.error_code == 0 and r.unknown_state_filters == ["Nope"]
            assert [
                (t.transactional_id, t.producer_id, t.transaction_state) for t in r.transaction_states
            ] == [(tid, pid, "Ongoing")]
        r = wire.request(
            LIST_TRANSACTIONS,
            1,
            {"state_filters": [], "producer_id_filters": [pid], "duration_filter": 3_600_000},
        )
        assert r.transaction_states == []  # started less than an hour ago


def test_txn_offset_commit_is_unstable_until_the_commit_marker(minibroker, topic_name):
    minibroker.create_topic(topic_name)
    tid, group = f"wire-offsets-{uuid.uuid4()}", f"g-{uuid.uuid4()}"
    with WireClient(minibroker.host, minibroker.port) as wire:
        _, pid, epoch = _init(wire, 4, tid)

        def commit_offsets(version, offset, epoch=epoch):
            r = wire.request(
                TXN_OFFSET_COMMIT,
                version,
                {
                    "transactional_id": tid,
                    "group_id": group,
                    "producer_id": pid,
                    "producer_epoch": epoch,
                    "generation_id": -1,
                    "member_id": "",
                    "group_instance_id": None,
                    "topics": [
                        {
                            "name": topic_name,
                            "partitions": [
                                {
                                    "partition_index": 0,
                                    "committed_offset": offset,
                                    "committed_leader_epoch": -1,
                                    "committed_metadata": "m",
                                }
                            ],
                        }
                    ],
                },
            )
            return r.topics[0].partitions[0].error_code

        def fetch(require_stable):
            r = wire.request(
                OFFSET_FETCH,
                7,
                {
                    "group_id": group,
                    "require_stable": require_stable,
                    "topics": [{"name": topic_name, "partition_indexes": [0]}],
                },
            )
            p = r.topics[0].partitions[0]
            return p.error_code, p.committed_offset

        def end(committed):
            return wire.request(
                END_TXN,
                3,
                {
                    "transactional_id": tid,
                    "producer_id": pid,
                    "producer_epoch": epoch,
                    "committed": committed,
                },
            ).error_code

        assert commit_offsets(3, 5) == 48  # INVALID_TXN_STATE: AddOffsetsToTxn first
        add = {"transactional_id": tid, "producer_id": pid, "producer_epoch": epoch, "group_id": group}
        assert wire.request(ADD_OFFSETS, 3, add).error_code == 0
        assert commit_offsets(3, 5, epoch=epoch + 1) == 47  # INVALID_PRODUCER_EPOCH
        assert commit_offsets(3, 5) == 0
        assert fetch(True) == (88, -1)  # UNSTABLE_OFFSET_COMMIT
        assert fetch(False) == (0, -1)
        assert end(True) == 0
        assert fetch(True) == (0, 5)
        assert wire.request(ADD_OFFSETS, 3, add).error_code == 0
        assert commit_offsets(0, 9) == 0
        assert end(False) == 0
        assert fetch(True) == (0, 5)  # the aborted 9 never counts


# -- real clients ------------------------------------------------------------------------------------


def _read_committed(bootstrap: str, topic: str, expect: int, timeout: float = 15.0) -> list[bytes]:
    """Every value a read_committed kafka-python consumer sees in ``topic`` (from the start), waiting
    for ``expect`` of them, then half a second more for any that should not be there."""
    from kafka import KafkaConsumer

    consumer = KafkaConsumer(
        topic,
        bootstrap_servers=bootstrap,
        isolation_level="read_committed",
        auto_offset_reset="earliest",
        enable_auto_commit=False,
    )
    values: list[bytes] = []
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            for records in consumer.poll(200).values():
                values.extend(r.value for r in records)
            if len(values) >= expect:
                deadline = min(deadline, time.monotonic() + 0.5)
    finally:
        consumer.close()
    return values


def test_kafka_python_commit_and_abort(minibroker, topic_name):
    from kafka import KafkaProducer

    minibroker.create_topic(topic_name, partitions=2)
    producer = KafkaProducer(
        bootstrap_servers=minibroker.bootstrap_servers, transactional_id=f"kp-{topic_name}"
    )
    try:
        producer.init_transactions()
        producer.begin_transaction()
        for i in range(4):
            producer.send(topic_name, f"committed-{i}".encode(), partition=i % 2)
        producer.commit_transaction()
        producer.begin_transaction()
        producer.send(topic_name, b"aborted", partition=0)
        producer.flush()
        producer.abort_transaction()
        producer.begin_transaction()
        producer.send(topic_name, b"committed-4", partition=1)
        producer.commit_transaction()
    finally:
        producer.close(timeout=5)
    values = _read_committed(minibroker.bootstrap_servers, topic_name, 5)
    assert sorted(values) == [f"committed-{i}".encode() for i in range(5)]


def test_kafka_python_consume_transform_produce(minibroker, topic_name):
    from kafka import KafkaConsumer, KafkaProducer, OffsetAndMetadata, TopicPartition

    source, sink, group = f"{topic_name}-in", f"{topic_name}-out", f"{topic_name}-group"
    minibroker.create_topic(source)
    minibroker.create_topic(sink)
    minibroker.produce(source, [f"v{i}".encode() for i in range(6)])
    consumer = KafkaConsumer(
        source,
        bootstrap_servers=minibroker.bootstrap_servers,
        group_id=group,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        isolation_level="read_committed",
    )
    producer = KafkaProducer(
        bootstrap_servers=minibroker.bootstrap_servers, transactional_id=f"ctp-{topic_name}"
    )
    try:
        producer.init_transactions()
        done = 0
        rounds = 0
        deadline = time.monotonic() + 30
        while done < 6 and time.monotonic() < deadline:
            batch = [r for records in consumer.poll(500, max_records=3).values() for r in records]
            if not batch:
                continue
            producer.begin_transaction()
            for r in batch:
                producer.send(sink, r.value.upper())
            tp = TopicPartition(source, 0)
            producer.send_offsets_to_transaction(
                {tp: OffsetAndMetadata(batch[-1].offset + 1, "", -1)}, consumer.group_metadata()
            )
            if rounds == 0:  # the first round is aborted: its output never shows, its offsets do not count
                producer.abort_transaction()
                consumer.seek(tp, batch[0].offset)
            else:
                producer.commit_transaction()
                done += len(batch)
            rounds += 1
    finally:
        producer.close(timeout=5)
        consumer.close()
    assert done == 6
    assert sorted(_read_committed(minibroker.bootstrap_servers, sink, 6)) == [
        f"V{i}".encode() for i in range(6)
    ]
    with WireClient(minibroker.host, minibroker.port) as wire:
        r = wire.request(
            OFFSET_FETCH,
            7,
            {
                "group_id": group,
                "require_stable": True,
                "topics": [{"name": source, "partition_indexes": [0]}],
            },
        )
        assert (r.topics[0].partitions[0].error_code, r.topics[0].partitions[0].committed_offset) == (0, 6)


def _confluent_producer(bootstrap: str, tid: str, **extra):
    confluent_kafka = pytest.importorskip("confluent_kafka")
    return confluent_kafka.Producer({"bootstrap.servers": bootstrap, "transactional.id": tid, **extra})


def test_confluent_commit_abort_and_send_offsets(minibroker, topic_name):
    confluent_kafka = pytest.importorskip("confluent_kafka")

    source, sink, group = f"{topic_name}-in", f"{topic_name}-out", f"{topic_name}-group"
    minibroker.create_topic(source)
    minibroker.create_topic(sink)
    minibroker.produce(source, [b"a", b"b", b"c"])
    consumer = confluent_kafka.Consumer(
        {
            "bootstrap.servers": minibroker.bootstrap_servers,
            "group.id": group,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "isolation.level": "read_committed",
        }
    )
    producer = _confluent_producer(minibroker.bootstrap_servers, f"cf-{topic_name}")
    try:
        producer.init_transactions(15)
        producer.begin_transaction()
        producer.produce(sink, b"aborted")
        producer.abort_transaction(15)
        consumer.subscribe([source])
        seen = []
        deadline = time.monotonic() + 20
        while len(seen) < 3 and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                seen.append(msg)
        assert [m.value() for m in seen] == [b"a", b"b", b"c"]
        producer.begin_transaction()
        for m in seen:
            producer.produce(sink, m.value() * 2)
        producer.send_offsets_to_transaction(
            [confluent_kafka.TopicPartition(source, 0, seen[-1].offset() + 1)],
            consumer.consumer_group_metadata(),
            15,
        )
        producer.commit_transaction(15)
        committed = consumer.committed([confluent_kafka.TopicPartition(source, 0)], 10)
        assert committed[0].offset == 3
    finally:
        consumer.close()
    assert sorted(_read_committed(minibroker.bootstrap_servers, sink, 3)) == [b"aa", b"bb", b"cc"]


def test_confluent_fencing_by_a_second_instance(minibroker, topic_name):
    confluent_kafka = pytest.importorskip("confluent_kafka")

    minibroker.create_topic(topic_name)
    tid = f"fence-{topic_name}"
    first = _confluent_producer(minibroker.bootstrap_servers, tid)
    first.init_transactions(15)
    first.begin_transaction()
    first.produce(topic_name, b"zombie")
    first.flush(10)
    second = _confluent_producer(minibroker.bootstrap_servers, tid)
    second.init_transactions(15)  # aborts the first one's transaction
    second.begin_transaction()
    second.produce(topic_name, b"current")
    second.commit_transaction(15)
    with pytest.raises(confluent_kafka.KafkaException) as exc:
        first.commit_transaction(15)
    error = exc.value.args[0]
    assert error.fatal() and error.code() in (
        confluent_kafka.KafkaError._FENCED,
        confluent_kafka.KafkaError.PRODUCER_FENCED,
        confluent_kafka.KafkaError.INVALID_PRODUCER_EPOCH,
    )
    assert _read_committed(minibroker.bootstrap_servers, topic_name, 1) == [b"current"]


def test_confluent_transaction_left_open_is_aborted_by_the_broker(minibroker_factory, topic_name):
    confluent_kafka = pytest.importorskip("confluent_kafka")

    broker = minibroker_factory({"transaction.abort.timed.out.transaction.cleanup.interval.ms": "200"})
    broker.create_topic(topic_name)
    producer = _confluent_producer(
        broker.bootstrap_servers, f"open-{topic_name}", **{"transaction.timeout.ms": 1000}
    )
    producer.init_transactions(15)
    producer.begin_transaction()
    producer.produce(topic_name, b"never committed")
    producer.flush(10)
    deadline = time.monotonic() + 10
    while "aborted the transaction of open-" not in broker.log_text() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert "open longer than its timeout of 1000 ms" in broker.log_text()
    with pytest.raises(confluent_kafka.KafkaException):
        producer.commit_transaction(15)
    broker.produce(topic_name, [b"after"])
    assert _read_committed(broker.bootstrap_servers, topic_name, 1) == [b"after"]  # the LSO moved on


def test_aiokafka_transactional_producer(minibroker, topic_name):
    from aiokafka import AIOKafkaProducer

    minibroker.create_topic(topic_name)

    async def run():
        producer = AIOKafkaProducer(
            bootstrap_servers=minibroker.bootstrap_servers, transactional_id=f"aio-{topic_name}"
        )
        await producer.start()
        try:
            async with producer.transaction():
                await producer.send_and_wait(topic_name, b"one")
                await producer.send_and_wait(topic_name, b"two")
            with pytest.raises(RuntimeError):
                async with producer.transaction():
                    await producer.send_and_wait(topic_name, b"aborted")
                    raise RuntimeError("roll back")
            async with producer.transaction():
                await producer.send_and_wait(topic_name, b"three")
        finally:
            await producer.stop()

    asyncio.run(asyncio.wait_for(run(), 60))
    assert _read_committed(minibroker.bootstrap_servers, topic_name, 3) == [b"one", b"two", b"three"]


def _open_transaction(bootstrap: str, topic: str, tid: str):
    """A kafka-python producer with a flushed, uncommitted record in ``topic``."""
    from kafka import KafkaProducer

    producer = KafkaProducer(bootstrap_servers=bootstrap, transactional_id=tid, transaction_timeout_ms=3000)
    producer.init_transactions()
    producer.begin_transaction()
    producer.send(topic, b"open")
    producer.flush()
    return producer


@pytest.mark.parametrize("how", ["clean", "kill"])
@pytest.mark.slow
def test_restart_in_the_middle_of_a_transaction(minibroker_factory, topic_name, how):
    from kafka import KafkaProducer

    broker = minibroker_factory(
        {"transaction.abort.timed.out.transaction.cleanup.interval.ms": "200"},
        mode="process" if how == "kill" else "thread",
    )
    broker.create_topic(topic_name)
    done = KafkaProducer(bootstrap_servers=broker.bootstrap_servers, transactional_id=f"done-{how}")
    done.init_transactions()
    done.begin_transaction()
    done.send(topic_name, b"committed")
    done.commit_transaction()
    done.close(timeout=5)
    zombie = _open_transaction(broker.bootstrap_servers, topic_name, f"open-{how}")
    if how == "kill":
        broker.kill()
        broker.start()
    else:
        broker.restart()
    threading.Thread(target=zombie.close, kwargs={"timeout": 1}, daemon=True).start()
    broker.produce(topic_name, [b"after restart"])
    # the open transaction times out (3 s) and is aborted: the LSO moves past it
    assert _read_committed(broker.bootstrap_servers, topic_name, 2, timeout=20) == [
        b"committed",
        b"after restart",
    ]
    with WireClient(broker.host, broker.port) as wire:
        r = wire.request(DESCRIBE_TRANSACTIONS, 0, {"transactional_ids": [f"done-{how}", f"open-{how}"]})
        assert [s.transaction_state for s in r.transaction_states] == ["CompleteCommit", "CompleteAbort"]


async def test_a_marker_refused_for_good_is_given_up_and_the_transaction_completes():
    tc, store, markers = make_coordinator()
    pid, epoch = tc.init_producer_id("tx", 60000)
    tc.add_partitions("tx", pid, epoch, [("t", 0)])
    markers.fail = E.PRODUCER_FENCED  # in _MARKER_GIVE_UP: no retry
    tc.end_transaction("tx", pid, epoch, True)
    assert tc.describe("tx").state == "CompleteCommit" and markers.written == []
    assert not tc._marker_retries
    tc.close()


async def test_load_skips_an_unreadable_transaction_log_record():
    records = [(encode_key("a"), b"\x00\x09garbage"), (encode_key("b"), _value(S.EMPTY, pid=2))]
    tc, store, markers = make_coordinator(records)
    await asyncio.gather(*tc.broker._tasks)
    assert tc.describe("a").error == E.TRANSACTIONAL_ID_NOT_FOUND
    assert tc.describe("b").state == "Empty"
    tc.close()


async def test_load_skips_a_transactional_id_in_an_unknown_state():
    """A state this version does not know (a record of a newer broker) costs that id, not the whole load."""
    records = [(encode_key("a"), encode_value(TransactionLogValue(7, 0, 60000, 42, [], 1, -1))),
               (encode_key("b"), _value(S.EMPTY, pid=2))]
    tc, store, markers = make_coordinator(records)
    await asyncio.gather(*tc.broker._tasks)
    assert tc.describe("a").error == E.TRANSACTIONAL_ID_NOT_FOUND
    assert tc.describe("b").state == "Empty"
    tc.close()
