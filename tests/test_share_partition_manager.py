"""SharePartitionManager (``broker.share_partitions``) inside a real broker: records produced by real clients,
the manager driven directly on the broker's event loop, its state persisted in ``__share_group_state``
across restarts and crashes, lock timers, the delivery limit, read_committed, failing writes."""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import struct
import time

import pytest

from minibroker.coordinator.share_partition import ACK_ACCEPT, ACK_REJECT, ACK_RELEASE, AcquiredRecords
from minibroker.coordinator.share_partition_manager import parse_duration_ms
from minibroker.coordinator.share_state import DeliveryState, StateBatch
from minibroker.errors import ErrorCode as E
from minibroker.errors import KafkaError
from minibroker.storage.checkpoints import CLEAN_SHUTDOWN_FILE
from minibroker.storage.dir_lock import LOCK_FILE
from minibroker.testing import BrokerRunner

FAST = {"group.share.min.record.lock.duration.ms": "1000", "group.share.record.lock.duration.ms": "1000",
        "share.coordinator.state.topic.num.partitions": "3"}


class Shares:
    """Calls into a thread-mode broker's share-partition manager, on its event loop."""

    def __init__(self, runner: BrokerRunner) -> None:
        self.runner = runner
        self.wait_loaded()

    def wait_loaded(self, timeout: float = 10) -> None:
        deadline = time.monotonic() + timeout
        while not self.runner.broker.share_state.loaded:
            assert time.monotonic() < deadline, "__share_group_state did not load"
            time.sleep(0.01)

    def call(self, fn, *args, **kwargs):
        async def run():
            return fn(*args, **kwargs)
        return asyncio.run_coroutine_threadsafe(run(), self.runner._loop).result(10)

    def wait(self, coro_fn, timeout: float = 10):
        return asyncio.run_coroutine_threadsafe(coro_fn(), self.runner._loop).result(timeout)

    @property
    def manager(self):
        return self.runner.broker.share_partitions

    def configure(self, group: str, **configs) -> None:
        """Group configs; locks last a minute unless the test says otherwise, so that no lock runs out
        between two steps of a test on a slow machine."""
        configs.setdefault("share_record_lock_duration_ms", 60000)
        self.call(self.runner.broker.groups.configs.replace, group,
                  {k.replace("_", "."): str(v) for k, v in configs.items()}, False)

    def acquire(self, group, member, topic, *, max_records=500, max_bytes=1 << 20, strict=False):
        return self.call(self.manager.acquire, group, member, topic, 0, max_records=max_records,
                         max_bytes=max_bytes, strict=strict)

    def ack(self, group, member, topic, batches, *, renew=False) -> E:
        return self.call(self.manager.acknowledge, group, member, topic, 0, batches, allow_renew=renew)

    def stored(self, group, topic):
        broker = self.runner.broker
        topic_id = broker.logs.topics[topic].id
        return self.call(broker.share_state.read, group, topic_id, 0)


def batch_spans(records) -> list[tuple[int, int]]:
    """(base offset, last offset) of each v2 batch in a fetch answer's records."""
    data = records.read() if hasattr(records, "read") else bytes(records)
    spans, position = [], 0
    while position + 61 <= len(data):
        base, length = struct.unpack_from(">qi", data, position)
        last_delta = struct.unpack_from(">i", data, position + 23)[0]
        spans.append((base, base + last_delta))
        position += 12 + length
    return spans


def produce(runner: BrokerRunner, topic: str, count: int, **config) -> list[int]:
    return runner.produce(topic, [f"v{i}" for i in range(count)], partition=0, **config)


@pytest.fixture
def shares(minibroker_factory):
    runner = minibroker_factory(FAST, mode="thread")
    return Shares(runner)


def test_accepted_stay_accepted_and_released_keep_their_count_across_a_restart(minibroker_factory, caplog):
    caplog.set_level(logging.DEBUG, logger="minibroker.share")  # every DEBUG call of the manager runs
    runner = minibroker_factory(FAST, mode="thread")
    shares = Shares(runner)
    runner.create_topic("orders")
    produce(runner, "orders", 10, linger_ms=50)
    shares.configure("g", share_auto_offset_reset="earliest")  # 7-9 stay acquired until the restart

    got = shares.acquire("g", "m1", "orders")
    assert got.error == E.NONE and got.acquired == [AcquiredRecords(0, 9, 1)]
    spans = batch_spans(got.records)
    assert spans[0][0] == 0 and spans[-1][1] == 9
    assert shares.ack("g", "m1", "orders", [(0, 4, [ACK_ACCEPT]), (5, 6, [ACK_RELEASE])]) == E.NONE
    assert shares.call(shares.manager.start_offset, "g", "orders", 0) == 5
    assert shares.call(shares.manager.lag, "g", "orders", 0) == 5
    assert shares.stored("g", "orders").batches == (StateBatch(5, 6, DeliveryState.AVAILABLE, 1),)
    assert "m1 acquired [(0, 9, 1)]" in caplog.text and "m1 acknowledged" in caplog.text

    runner.restart()
    shares.wait_loaded()
    assert shares.call(shares.manager.start_offset, "g", "orders", 0) == 5  # from the store
    got = shares.acquire("g", "m2", "orders")
    # 5-6 were released (one delivery); 7-9 were still acquired, never persisted: delivered as new
    assert got.acquired == [AcquiredRecords(5, 6, 2), AcquiredRecords(7, 9, 1)]
    assert shares.ack("g", "m2", "orders", [(5, 9, [ACK_ACCEPT])]) == E.NONE
    assert shares.call(shares.manager.lag, "g", "orders", 0) == 0
    assert shares.acquire("g", "m2", "orders").acquired == []


def test_nothing_acknowledged_is_lost_when_the_broker_dies(minibroker_factory, tmp_path):
    """The acknowledgement is appended to __share_group_state before it is answered: a copy of the log
    dirs taken right after the answer, with no clean shutdown (what a SIGKILL leaves), has it."""
    runner = minibroker_factory(FAST, mode="thread")
    shares = Shares(runner)
    runner.create_topic("jobs")
    produce(runner, "jobs", 6)
    shares.configure("g", share_auto_offset_reset="earliest")
    assert shares.acquire("g", "m1", "jobs").acquired == [AcquiredRecords(0, 5, 1)]
    assert shares.ack("g", "m1", "jobs", [(0, 1, [ACK_ACCEPT]), (2, 2, [ACK_REJECT]),
                                          (3, 3, [ACK_RELEASE])]) == E.NONE
    crashed = str(tmp_path / "crashed")
    shutil.copytree(runner.data_dir, crashed, ignore=shutil.ignore_patterns(LOCK_FILE))
    assert not os.path.exists(os.path.join(crashed, CLEAN_SHUTDOWN_FILE))

    revived = minibroker_factory({**FAST, "log.dirs": crashed}, mode="thread")
    again = Shares(revived)
    assert again.call(again.manager.start_offset, "g", "jobs", 0) == 3
    assert again.acquire("g", "m2", "jobs").acquired == [AcquiredRecords(3, 3, 2), AcquiredRecords(4, 5, 1)]


def test_an_expired_lock_redelivers_with_one_more_delivery_and_wakes_waiters(shares):
    runner = shares.runner
    runner.create_topic("t")
    produce(runner, "t", 3)
    shares.configure("g", share_auto_offset_reset="earliest", share_record_lock_duration_ms=2000)
    assert shares.call(shares.manager.lock_duration_ms, "g") == 2000
    assert shares.acquire("g", "dead", "t").acquired == [AcquiredRecords(0, 2, 1)]
    assert shares.acquire("g", "m2", "t").acquired == []  # locked

    async def woken():
        fut = shares.manager.watch([("g", "t", 0)])
        try:
            await asyncio.wait_for(fut, 10)  # the lock timer, not a fetch, does it
        finally:
            shares.manager.unwatch([("g", "t", 0)], fut)
        return True

    assert shares.wait(woken, timeout=15)
    assert shares.stored("g", "t").batches == (StateBatch(0, 2, DeliveryState.AVAILABLE, 1),)
    assert shares.acquire("g", "m2", "t").acquired == [AcquiredRecords(0, 2, 2)]
    assert shares.ack("g", "dead", "t", [(0, 2, [ACK_ACCEPT])]) == E.INVALID_RECORD_STATE


def test_the_state_is_written_with_the_partitions_leader_epoch(shares):
    runner = shares.runner
    runner.create_topic("t")
    produce(runner, "t", 3)
    shares.configure("g", share_auto_offset_reset="earliest")
    assert shares.acquire("g", "m", "t").acquired == [AcquiredRecords(0, 2, 1)]
    assert shares.ack("g", "m", "t", [(0, 0, [ACK_ACCEPT])]) == E.NONE
    assert shares.stored("g", "t").leader_epoch == 0
    shares.call(runner.broker.replicas.get_log("t", 0).start_leader_epoch)  # an election
    assert shares.ack("g", "m", "t", [(1, 1, [ACK_ACCEPT])]) == E.NONE
    assert shares.stored("g", "t").leader_epoch == 1


def test_the_delivery_limit_archives_and_a_member_release_gives_back_its_delivery(shares):
    runner = shares.runner
    runner.create_topic("t")
    produce(runner, "t", 2)
    shares.configure("g", share_auto_offset_reset="earliest", share_delivery_count_limit=2)
    assert shares.acquire("g", "a", "t").acquired == [AcquiredRecords(0, 1, 1)]
    shares.call(shares.manager.release_member, "g", "a")  # session closed: count back to 0
    assert shares.acquire("g", "b", "t").acquired == [AcquiredRecords(0, 1, 1)]
    assert shares.ack("g", "b", "t", [(0, 1, [ACK_RELEASE])]) == E.NONE
    assert shares.acquire("g", "a", "t").acquired == [AcquiredRecords(0, 1, 2)]
    assert shares.ack("g", "a", "t", [(0, 0, [ACK_RELEASE]), (1, 1, [ACK_ACCEPT])]) == E.NONE
    assert shares.call(shares.manager.start_offset, "g", "t", 0) == 2  # 0 archived at the limit
    assert shares.acquire("g", "b", "t").acquired == []
    assert shares.call(shares.manager.lag, "g", "t", 0) == 0


def test_read_committed_archives_aborted_records_and_stops_at_the_last_stable_offset(shares):
    confluent_kafka = pytest.importorskip("confluent_kafka")
    runner = shares.runner
    runner.create_topic("tx")
    producer = confluent_kafka.Producer({"bootstrap.servers": runner.bootstrap_servers,
                                         "transactional.id": "share-tx"})
    producer.init_transactions(30)

    def transaction(values, end):
        producer.begin_transaction()
        for v in values:
            producer.produce("tx", v, partition=0)
        producer.flush(30)
        if end is not None:
            end(30)

    transaction([b"a0", b"a1", b"a2"], producer.abort_transaction)   # 0-2, ABORT marker at 3
    transaction([b"c0", b"c1"], producer.commit_transaction)         # 4-5, COMMIT marker at 6
    transaction([b"o0", b"o1"], None)                                # 7-8, still open
    shares.configure("rc", share_auto_offset_reset="earliest", share_isolation_level="read_committed")
    shares.configure("ru", share_auto_offset_reset="earliest")

    got = shares.acquire("rc", "m", "tx")
    assert got.acquired == [AcquiredRecords(4, 5, 1)]
    assert all(last < 7 for _, last in batch_spans(got.records))
    assert shares.call(shares.manager.start_offset, "rc", "tx", 0) == 4  # 0-3 archived
    assert shares.acquire("rc", "m", "tx").acquired == []  # the open transaction is past the LSO
    uncommitted = shares.acquire("ru", "m", "tx").acquired
    assert uncommitted == [AcquiredRecords(0, 2, 1), AcquiredRecords(4, 5, 1), AcquiredRecords(7, 8, 1)]

    producer.commit_transaction(30)
    assert shares.acquire("rc", "m2", "tx").acquired == [AcquiredRecords(7, 8, 1)]
    assert shares.ack("rc", "m", "tx", [(4, 5, [ACK_ACCEPT])]) == E.NONE
    assert shares.ack("rc", "m2", "tx", [(7, 8, [ACK_ACCEPT])]) == E.NONE
    assert shares.call(shares.manager.start_offset, "rc", "tx", 0) == 10  # the COMMIT marker at 9 too


def test_a_failing_state_write_rolls_the_acknowledgement_back(shares):
    runner = shares.runner
    runner.create_topic("t")
    produce(runner, "t", 4)
    shares.configure("g", share_auto_offset_reset="earliest")
    assert shares.acquire("g", "m", "t").acquired == [AcquiredRecords(0, 3, 1)]
    store = runner.broker.share_state

    def failing_write(*args, **kwargs):
        raise KafkaError(E.COORDINATOR_NOT_AVAILABLE, "the log dir is full")

    shares.call(setattr, store, "write", failing_write)
    try:
        assert shares.ack("g", "m", "t", [(0, 3, [ACK_ACCEPT])]) == E.COORDINATOR_NOT_AVAILABLE
        assert shares.call(shares.manager.start_offset, "g", "t", 0) == 0
        shares.call(shares.manager.release_member, "g", "m")  # not persisted: the records stay locked
        assert shares.acquire("g", "other", "t").acquired == []
    finally:
        shares.call(delattr, store, "write")
    assert shares.ack("g", "m", "t", [(0, 1, [ACK_ACCEPT])]) == E.NONE  # still m's, as before the failure
    assert shares.call(shares.manager.start_offset, "g", "t", 0) == 2
    assert shares.stored("g", "t").start_offset == 2


def test_errors_unloaded_state_deleted_topic_and_bad_acknowledgements(shares):
    runner = shares.runner
    runner.create_topic("t")
    produce(runner, "t", 2)
    shares.configure("g", share_auto_offset_reset="earliest")
    store = runner.broker.share_state
    shares.call(setattr, store, "loaded", False)
    try:
        assert shares.acquire("g", "m", "t").error == E.COORDINATOR_NOT_AVAILABLE
    finally:
        shares.call(setattr, store, "loaded", True)
    # as Kafka: only a share partition a fetch loaded takes acknowledgements
    assert shares.ack("g", "m", "t", [(0, 0, [ACK_ACCEPT])]) == E.UNKNOWN_TOPIC_OR_PARTITION
    assert shares.acquire("g", "m", "nope").error == E.UNKNOWN_TOPIC_OR_PARTITION
    assert shares.acquire("g", "m", "t").acquired == [AcquiredRecords(0, 1, 1)]
    assert shares.ack("g", "m", "t", [(1, 0, [ACK_ACCEPT])]) == E.INVALID_REQUEST
    assert shares.ack("g", "m", "t", [(0, 1, [4])]) == E.INVALID_REQUEST  # RENEW needs v2
    assert shares.ack("g", "m", "t", [(0, 1, [4])], renew=True) == E.NONE
    assert shares.ack("g", "x", "t", [(0, 1, [ACK_ACCEPT])]) == E.INVALID_RECORD_STATE
    assert shares.ack("g", "m", "t", [(0, 5, [ACK_ACCEPT])]) == E.INVALID_REQUEST
    runner.delete_topic("t")
    assert shares.acquire("g", "m", "t").error == E.UNKNOWN_TOPIC_OR_PARTITION
    assert shares.call(shares.manager.start_offset, "g", "t", 0) is None
    assert ("g", "t", 0) not in shares.manager._entries


def test_auto_offset_reset_latest_by_default_and_by_duration(shares):
    from kafka import KafkaProducer

    runner = shares.runner
    runner.create_topic("t")
    old = int(time.time() * 1000) - 2 * 3600_000
    producer = KafkaProducer(**runner.client_config())
    try:
        for i in range(3):
            producer.send("t", f"old{i}".encode(), partition=0, timestamp_ms=old)
        producer.flush(30)
        for i in range(2):
            producer.send("t", f"new{i}".encode(), partition=0)
        producer.flush(30)
    finally:
        producer.close(5)
    assert shares.acquire("latest", "m", "t").acquired == []  # starts at the log end
    assert shares.call(shares.manager.start_offset, "latest", "t", 0) == 5
    shares.configure("recent", share_auto_offset_reset="by_duration:PT1H")
    assert shares.acquire("recent", "m", "t").acquired == [AcquiredRecords(3, 4, 1)]
    produce(runner, "t", 1)
    assert shares.acquire("latest", "m", "t").acquired == [AcquiredRecords(5, 5, 1)]


def test_record_limit_mode_and_max_bytes(shares):
    runner = shares.runner
    runner.create_topic("t")
    produce(runner, "t", 10, linger_ms=100)  # one batch
    shares.configure("g", share_auto_offset_reset="earliest")
    got = shares.acquire("g", "a", "t", max_records=3, strict=True)
    assert got.acquired == [AcquiredRecords(0, 2, 1)]
    assert batch_spans(got.records) == [(0, 9)]  # the whole batch goes; the client ignores 3-9
    assert shares.acquire("g", "b", "t", max_records=3).acquired == [AcquiredRecords(3, 9, 1)]
    for _ in range(3):  # one batch each
        produce(runner, "t", 1)
    got = shares.acquire("g", "c", "t", max_bytes=1)  # at least one batch, whatever max_bytes says
    assert got.acquired == [AcquiredRecords(10, 10, 1)]
    assert batch_spans(got.records) == [(10, 10)]


def test_a_broker_killed_after_answering_an_acknowledgement_keeps_it(minibroker_factory):
    """kill -9 of the broker process right after ShareAcknowledge answered: after the restart, the accepted
    records are never delivered again and every other one is."""
    confluent_kafka = pytest.importorskip("confluent_kafka")
    from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource

    runner = minibroker_factory(FAST, mode="process")
    runner.create_topic("k")
    values = [f"k{i}".encode() for i in range(8)]
    producer = confluent_kafka.Producer({"bootstrap.servers": runner.bootstrap_servers})
    for v in values:
        producer.produce("k", v, partition=0)
    producer.flush(30)
    admin = AdminClient({"bootstrap.servers": runner.bootstrap_servers})
    group = ConfigResource(ConfigResource.Type.GROUP, "g", incremental_configs=[
        ConfigEntry("share.auto.offset.reset", "earliest", incremental_operation=AlterConfigOpType.SET)])
    for f in admin.incremental_alter_configs([group]).values():
        f.result(30)

    def consumer():
        c = confluent_kafka.ShareConsumer({"bootstrap.servers": runner.bootstrap_servers, "group.id": "g",
                                           "share.acknowledgement.mode": "explicit"})
        c.subscribe(["k"])
        return c

    first = consumer()
    accepted: set[bytes] = set()
    delivered = 0
    deadline = time.monotonic() + 30
    while not accepted and time.monotonic() < deadline:
        for m in first.poll(timeout=0.5):
            if m.error() is None:
                # every other one accepted, the rest released: records must come back after the restart,
                # or a lost acknowledgement would go unseen (accepted ones would simply never be asked for)
                accept = delivered % 2 == 0
                first.acknowledge(m, confluent_kafka.AcknowledgeType.ACCEPT if accept
                                  else confluent_kafka.AcknowledgeType.RELEASE)
                if accept:
                    accepted.add(m.value())
                delivered += 1
    assert accepted, "nothing was delivered"
    first.commit_sync()  # the ShareAcknowledge is answered: the accepts are on disk
    runner.kill()
    runner.start()
    first.close()  # whatever it fetched again from the restarted broker goes back
    second = consumer()
    rest: list[bytes] = []
    try:
        deadline = time.monotonic() + 30
        while len(accepted) + len(rest) < len(values) and time.monotonic() < deadline:
            for m in second.poll(timeout=0.5):
                if m.error() is None:
                    second.acknowledge(m, confluent_kafka.AcknowledgeType.ACCEPT)
                    rest.append(m.value())
        second.commit_sync()
    finally:
        second.close()
    assert rest, "no record came back after the restart: the test would not see a lost acknowledgement"
    assert accepted.isdisjoint(rest), f"accepted records delivered again: {accepted & set(rest)}"
    assert sorted(accepted | set(rest)) == sorted(values)


@pytest.mark.parametrize(("text", "ms"), [("PT1H", 3_600_000), ("P1D", 86_400_000), ("pt0.25s", 250),
                                          ("P1DT2H3M4.5S", 93_784_500), ("PT90M", 5_400_000)])
def test_by_duration_reads_iso_8601_durations(text, ms):
    assert parse_duration_ms(text) == ms


@pytest.mark.parametrize("text", ["", "P", "PT", "1H", "PT-1H", "P1H"])
def test_by_duration_refuses_what_is_not_a_duration(text):
    with pytest.raises(ValueError):
        parse_duration_ms(text)


@pytest.mark.slow
def test_an_acknowledgement_the_full_disk_refuses_is_undone(minibroker_factory, tmp_path):
    """A real full disk (a small tmpfs): the state write fails, the acknowledgement is answered with the
    write's error and undone; after a restart with room again the record comes back, never accepted."""
    import subprocess

    disk = tmp_path / "disk"
    disk.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(disk)],
                             capture_output=True, text=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here (needs root): {mounted.stderr.strip()}")
    try:
        overrides = {**FAST, "log.dirs": str(disk), "log.segment.bytes": "1048576",
                     "log.index.size.max.bytes": "4096", "offsets.topic.num.partitions": "1",
                     "transaction.state.log.num.partitions": "1",
                     "share.coordinator.state.topic.num.partitions": "1",
                     "share.coordinator.state.topic.segment.bytes": "1048576"}
        runner = minibroker_factory(overrides, mode="thread", data_dir=str(disk))
        shares = Shares(runner)
        runner.create_topic("t")
        produce(runner, "t", 300, linger_ms=100)
        shares.configure("g", share_auto_offset_reset="earliest")
        assert shares.acquire("g", "m", "t").acquired == [AcquiredRecords(0, 299, 1)]
        fd = os.open(disk / "ballast", os.O_WRONLY | os.O_CREAT)  # take every free byte
        try:
            while True:
                os.write(fd, b"\0" * 4096)
        except OSError:
            pass
        finally:
            os.close(fd)
        # each acknowledgement appends a small record: the segment's last page takes a few more
        for refused in range(300):
            code = shares.ack("g", "m", "t", [(refused, refused, [ACK_ACCEPT])])
            if code != E.NONE:
                break
        assert code in (E.COORDINATOR_NOT_AVAILABLE, E.NOT_COORDINATOR), code
        assert shares.call(shares.manager.start_offset, "g", "t", 0) == refused  # undone
        runner.stop()
        os.unlink(disk / "ballast")
        runner.start()
        shares.wait_loaded()
        got = shares.acquire("g", "m2", "t").acquired
        assert got[0].first_offset == refused, got  # the refused one back; the ones before it kept
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=False)
