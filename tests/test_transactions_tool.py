"""``minibroker transactions`` (kafka-transactions.sh) as a subprocess against the session broker, and the
WriteTxnMarkers API its ``abort`` sends, over the wire."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
import uuid

import pytest

from minibroker import cli
from minibroker.coordinator.group_records import partition_for
from minibroker.records import v2
from minibroker.tools.wire import WireClient

PRODUCE, OFFSET_FETCH, FIND_COORDINATOR, INIT_PRODUCER_ID = 0, 9, 10, 22
ADD_OFFSETS, END_TXN, WRITE_TXN_MARKERS, TXN_OFFSET_COMMIT = 25, 26, 27, 28
TWENTY_MINUTES_MS = 20 * 60_000
LIST_HEADERS = ["TransactionalId", "Coordinator", "ProducerId", "TransactionState"]


def tool(bootstrap: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "minibroker", "transactions", *args,
                           "--bootstrap-server", bootstrap], capture_output=True, text=True, timeout=60)


def in_process(bootstrap: str, *args: str) -> int:
    """The exit code of ``tool`` without a process start (for usage errors, found before any request)."""
    try:
        return cli.main(["transactions", *args, "--bootstrap-server", bootstrap])
    except SystemExit as exit:
        return exit.code


def table(stdout: str) -> list[dict[str, str]]:
    """Kafka's tab-separated, space-padded table as one dict per row."""
    lines = stdout.splitlines()
    headers = [h.strip() for h in lines[0].split("\t")[:-1]]
    return [dict(zip(headers, (c.strip() for c in line.split("\t")[:-1]), strict=True)) for line in lines[1:]]


def _init(wire: WireClient, tid: str | None, timeout_ms: int = 900_000) -> tuple[int, int]:
    if tid is not None:
        wire.request(FIND_COORDINATOR, 3, {"key": tid, "key_type": 1})  # creates __transaction_state
    r = wire.request(INIT_PRODUCER_ID, 4, {"transactional_id": tid, "transaction_timeout_ms": timeout_ms,
                                           "producer_id": -1, "producer_epoch": -1})
    assert r.error_code == 0
    return r.producer_id, r.producer_epoch


def _produce_transactional(wire: WireClient, tid: str, topic: str, partition: int, pid: int, epoch: int,
                           timestamp: int, value: bytes = b"hung") -> int:
    """A transactional batch straight to the partition, without AddPartitionsToTxn: the coordinator never
    learns of it, so nothing will ever end it (the classic hanging transaction). Returns its offset."""
    batch = v2.build_batch([(0, timestamp, None, value, ())], producer_id=pid, producer_epoch=epoch,
                           base_sequence=0, is_transactional=True)
    r = wire.request(PRODUCE, 9, {"transactional_id": tid, "acks": -1, "timeout_ms": 5000, "topic_data": [
        {"name": topic, "partition_data": [{"index": partition, "records": batch}]}]})
    answer = r.responses[0].partition_responses[0]
    assert answer.error_code == 0
    return answer.base_offset


def _hung_transaction(broker, topic: str, partition: int = 0, inits: int = 1) -> tuple[str, int, int, int]:
    """(transactional id, producer id, epoch, start offset) of a transaction a raw-protocol producer
    began 20 minutes ago (by its record's timestamp), then abandoned: no client retries or aborts it."""
    tid = f"hung-{uuid.uuid4()}"
    with WireClient(broker.host, broker.port) as wire:
        for _ in range(inits):  # each one bumps the epoch
            pid, epoch = _init(wire, tid)
        offset = _produce_transactional(wire, tid, topic, partition, pid, epoch,
                                        int(time.time() * 1000) - TWENTY_MINUTES_MS)
    return tid, pid, epoch, offset


def _read_committed(bootstrap: str, topic: str, seconds: float) -> list[bytes]:
    from kafka import KafkaConsumer

    consumer = KafkaConsumer(topic, bootstrap_servers=bootstrap, isolation_level="read_committed",
                             auto_offset_reset="earliest", enable_auto_commit=False)
    values: list[bytes] = []
    deadline = time.monotonic() + seconds
    try:
        while time.monotonic() < deadline:
            for records in consumer.poll(200).values():
                values.extend(r.value for r in records)
    finally:
        consumer.close()
    return values


def _markers(wire: WireClient, version: int, *markers: dict) -> list[tuple[int, str, int, int]]:
    """(producer id, topic, partition, error code) of each partition of a WriteTxnMarkers answer."""
    body = {"markers": [{"transaction_result": False, "coordinator_epoch": 0, **m} for m in markers]}
    r = wire.request(WRITE_TXN_MARKERS, version, body)
    return [(m.producer_id, t.name, p.partition_index, p.error_code)
            for m in r.markers for t in m.topics for p in t.partitions]


# -- list, describe, describe-producers ---------------------------------------------------------------


def test_list_describe_and_describe_producers_show_an_open_transaction(minibroker, topic_name):
    from kafka import KafkaProducer

    minibroker.create_topic(topic_name, partitions=2)
    tid = f"tool-{topic_name}"
    producer = KafkaProducer(bootstrap_servers=minibroker.bootstrap_servers, transactional_id=tid,
                             transaction_timeout_ms=120_000)
    try:
        producer.init_transactions()
        producer.begin_transaction()
        producer.send(topic_name, b"open", partition=1).get(timeout=10)
        before = int(time.time() * 1000)

        listed = tool(minibroker.bootstrap_servers, "list")
        assert listed.returncode == 0, listed.stderr
        assert listed.stdout.split("\n")[0].split() == LIST_HEADERS
        row = next(r for r in table(listed.stdout) if r["TransactionalId"] == tid)
        assert row["Coordinator"] == "1" and row["TransactionState"] == "Ongoing"
        pid = row["ProducerId"]
        longer = tool(minibroker.bootstrap_servers, "list", "--duration-filter", "3600000")
        assert longer.returncode == 0 and tid not in longer.stdout  # open for less than an hour

        described = tool(minibroker.bootstrap_servers, "describe", "--transactional-id", tid)
        assert described.returncode == 0, described.stderr
        [d] = table(described.stdout)
        assert d["CoordinatorId"] == "1" and d["TransactionalId"] == tid and d["ProducerId"] == pid
        assert d["ProducerEpoch"] == "0" and d["TransactionState"] == "Ongoing"
        assert d["TransactionTimeoutMs"] == "120000" and d["TopicPartitions"] == f"{topic_name}-1"
        assert 0 <= before - int(d["CurrentTransactionStartTimeMs"]) < 60_000
        assert 0 <= int(d["TransactionDurationMs"]) < 60_000

        producers = tool(minibroker.bootstrap_servers, "describe-producers", "--topic", topic_name,
                         "--partition", "1")
        assert producers.returncode == 0, producers.stderr
        assert producers.stdout.split("\n")[0].split() == [
            "ProducerId", "ProducerEpoch", "LatestCoordinatorEpoch", "LastSequence", "LastTimestamp",
            "CurrentTransactionStartOffset"]
        [p] = table(producers.stdout)
        assert (p["ProducerId"], p["ProducerEpoch"], p["LatestCoordinatorEpoch"], p["LastSequence"],
                p["CurrentTransactionStartOffset"]) == (pid, "0", "-1", "0", "0")
        on_broker = tool(minibroker.bootstrap_servers, "describe-producers", "--topic", topic_name,
                         "--partition", "1", "--broker-id", "1")
        assert table(on_broker.stdout) == [p]

        # the coordinator will end this one: find-hanging leaves it out even at a 0-minute timeout
        hanging = tool(minibroker.bootstrap_servers, "find-hanging", "--topic", topic_name,
                       "--max-transaction-timeout", "0")
        assert hanging.returncode == 0 and table(hanging.stdout) == []

        producer.commit_transaction()
        done = tool(minibroker.bootstrap_servers, "describe-producers", "--topic", topic_name,
                    "--partition", "1")
        [p] = table(done.stdout)
        assert p["CurrentTransactionStartOffset"] == "None" and p["LatestCoordinatorEpoch"] == "0"
        described = tool(minibroker.bootstrap_servers, "describe", "--transactional-id", tid)
        [d] = table(described.stdout)
        assert d["TransactionState"] == "CompleteCommit" and d["TopicPartitions"] == ""
    finally:
        producer.close(timeout=5)


def test_errors_are_named_and_usage_errors_exit_2(minibroker, topic_name):
    minibroker.create_topic(topic_name)
    missing = tool(minibroker.bootstrap_servers, "describe", "--transactional-id", f"nope-{uuid.uuid4()}")
    assert missing.returncode == 1 and "TRANSACTIONAL_ID_NOT_FOUND" in missing.stderr
    unknown = tool(minibroker.bootstrap_servers, "describe-producers", "--topic", f"{topic_name}-x",
                   "--partition", "0")
    assert unknown.returncode == 1 and "UNKNOWN_TOPIC_OR_PARTITION" in unknown.stderr
    nothing = tool(minibroker.bootstrap_servers, "abort", "--topic", topic_name, "--partition", "0",
                   "--start-offset", "0")
    assert nothing.returncode == 1
    assert (f"Could not find any open transactions starting at offset 0 on partition {topic_name}-0"
            in nothing.stderr)
    for args in (["abort", "--topic", topic_name, "--partition", "0"],
                 ["abort", "--topic", topic_name, "--partition", "0", "--producer-id", "5"],
                 ["find-hanging"], ["find-hanging", "--partition", "0", "--broker-id", "1"],
                 ["describe"]):
        assert in_process(minibroker.bootstrap_servers, *args) == 2, args
    unreachable = tool("127.0.0.1:1", "list")
    assert unreachable.returncode == 1 and "cannot reach" in unreachable.stderr


# -- find-hanging and abort ------------------------------------------------------------------------


@pytest.mark.slow
def test_find_hanging_then_abort_by_start_offset_unblocks_read_committed(minibroker, topic_name):
    minibroker.create_topic(topic_name, partitions=2)
    tid, pid, epoch, start = _hung_transaction(minibroker, topic_name, partition=0)
    minibroker.produce(topic_name, [b"after"], partition=0)
    # a live transaction on partition 1, which its coordinator knows: never listed as hanging
    confluent_kafka = pytest.importorskip("confluent_kafka")
    live = confluent_kafka.Producer({"bootstrap.servers": minibroker.bootstrap_servers,
                                     "transactional.id": f"live-{topic_name}",
                                     "transaction.timeout.ms": 120_000})
    live.init_transactions(10)
    live.begin_transaction()
    live.produce(topic_name, b"live", partition=1)
    live.flush(10)
    try:
        assert _read_committed(minibroker.bootstrap_servers, topic_name, 2) == []  # stuck at the LSO 0

        found = tool(minibroker.bootstrap_servers, "find-hanging", "--broker-id", "1")
        assert found.returncode == 0, found.stderr
        assert found.stdout.split("\n")[0].split() == [
            "Topic", "Partition", "ProducerId", "ProducerEpoch", "CoordinatorEpoch", "StartOffset",
            "LastTimestamp", "Duration(min)"]
        rows = [r for r in table(found.stdout) if r["Topic"] == topic_name]
        assert len(rows) == 1
        row = rows[0]
        assert (row["Partition"], row["ProducerId"], row["ProducerEpoch"], row["CoordinatorEpoch"],
                row["StartOffset"]) == ("0", str(pid), str(epoch), "-1", str(start))
        assert int(row["Duration(min)"]) >= 19
        everything = tool(minibroker.bootstrap_servers, "find-hanging", "--topic", topic_name,
                          "--max-transaction-timeout", "0")
        assert [(r["Partition"], r["ProducerId"]) for r in table(everything.stdout)] == [("0", str(pid))]

        aborted = tool(minibroker.bootstrap_servers, "abort", "--topic", topic_name, "--partition", "0",
                       "--start-offset", str(start))
        assert aborted.returncode == 0, aborted.stderr
        assert aborted.stdout == ""  # silent on success, as Kafka's tool
        assert _read_committed(minibroker.bootstrap_servers, topic_name, 2) == [b"after"]
        after = tool(minibroker.bootstrap_servers, "find-hanging", "--topic", topic_name, "--partition", "0")
        assert table(after.stdout) == []
        producers = tool(minibroker.bootstrap_servers, "describe-producers", "--topic", topic_name,
                         "--partition", "0")
        [p] = [r for r in table(producers.stdout) if r["ProducerId"] == str(pid)]
        assert p["CurrentTransactionStartOffset"] == "None" and p["LatestCoordinatorEpoch"] == "0"
        again = tool(minibroker.bootstrap_servers, "abort", "--topic", topic_name, "--partition", "0",
                     "--start-offset", str(start))
        assert again.returncode == 1 and "Could not find any open transactions" in again.stderr
        live.commit_transaction(10)
    finally:
        threading.Thread(target=live.flush, args=(1,), daemon=True).start()


def test_abort_with_producer_id_epoch_and_coordinator_epoch(minibroker, topic_name):
    minibroker.create_topic(topic_name)
    _tid, pid, epoch, _start = _hung_transaction(minibroker, topic_name, inits=2)
    assert epoch == 1
    minibroker.produce(topic_name, [b"after"])
    stale = tool(minibroker.bootstrap_servers, "abort", "--topic", topic_name, "--partition", "0",
                 "--producer-id", str(pid), "--producer-epoch", str(epoch - 1), "--coordinator-epoch", "-1")
    assert stale.returncode == 1 and "INVALID_PRODUCER_EPOCH" in stale.stderr
    aborted = tool(minibroker.bootstrap_servers, "abort", "--topic", topic_name, "--partition", "0",
                   "--producer-id", str(pid), "--producer-epoch", str(epoch), "--coordinator-epoch", "-1")
    assert aborted.returncode == 0, aborted.stderr
    assert _read_committed(minibroker.bootstrap_servers, topic_name, 2) == [b"after"]


# -- WriteTxnMarkers on the wire ---------------------------------------------------------------------


@pytest.mark.parametrize("version", [0, 1])
def test_write_txn_markers_error_codes(minibroker, topic_name, version):
    minibroker.create_topic(topic_name, partitions=2)
    pid = 10**12 + version  # a producer no partition knows: its first marker closes nothing
    with WireClient(minibroker.host, minibroker.port) as wire:
        assert _markers(wire, version, {"producer_id": pid, "producer_epoch": 3, "coordinator_epoch": 5,
                                        "topics": [{"name": topic_name, "partition_indexes": [0, 1, 7]},
                                                   {"name": f"{topic_name}-x", "partition_indexes": [0]}]},
                        {"producer_id": pid + 2, "producer_epoch": 0,
                         "topics": [{"name": topic_name, "partition_indexes": [1]}]}) == [
            (pid, topic_name, 0, 0), (pid, topic_name, 1, 0),
            (pid, topic_name, 7, 3),  # UNKNOWN_TOPIC_OR_PARTITION
            (pid, f"{topic_name}-x", 0, 3),
            (pid + 2, topic_name, 1, 0)]
        on_0 = {"name": topic_name, "partition_indexes": [0]}
        assert _markers(wire, version, {"producer_id": pid, "producer_epoch": 2, "coordinator_epoch": 5,
                                        "topics": [on_0]}) == [(pid, topic_name, 0, 47)]  # stale epoch
        assert _markers(wire, version, {"producer_id": pid, "producer_epoch": 3, "coordinator_epoch": 4,
                                        "topics": [on_0]}) == [(pid, topic_name, 0, 52)]  # COORDINATOR_FENCED
        assert _markers(wire, version, {"producer_id": pid, "producer_epoch": 4, "coordinator_epoch": 5,
                                        "transaction_result": True, "topics": [on_0]}) == [
            (pid, topic_name, 0, 0)]
        assert wire.request(WRITE_TXN_MARKERS, version, {"markers": []}).markers == []


def test_write_txn_markers_refuse_a_magic_1_topic(minibroker, topic_name):
    minibroker.create_topic(topic_name, config={"message.format.version": "0.10.2-IV0"})
    with WireClient(minibroker.host, minibroker.port) as wire:
        assert _markers(wire, 1, {"producer_id": 10**12 + 7, "producer_epoch": 0, "topics": [
            {"name": topic_name, "partition_indexes": [0]}]}) == [(10**12 + 7, topic_name, 0, 43)]


def test_a_commit_marker_on_consumer_offsets_commits_pending_transactional_offsets(minibroker, topic_name):
    minibroker.create_topic(topic_name)
    tid, group = f"offsets-{uuid.uuid4()}", f"g-{uuid.uuid4()}"
    with WireClient(minibroker.host, minibroker.port) as wire:
        pid, epoch = _init(wire, tid)
        wire.request(FIND_COORDINATOR, 3, {"key": group, "key_type": 0})  # creates __consumer_offsets
        add = {"transactional_id": tid, "producer_id": pid, "producer_epoch": epoch, "group_id": group}
        assert wire.request(ADD_OFFSETS, 3, add).error_code == 0
        r = wire.request(TXN_OFFSET_COMMIT, 3, {
            "transactional_id": tid, "group_id": group, "producer_id": pid, "producer_epoch": epoch,
            "generation_id": -1, "member_id": "", "group_instance_id": None, "topics": [
                {"name": topic_name, "partitions": [{
                    "partition_index": 0, "committed_offset": 5, "committed_leader_epoch": -1,
                    "committed_metadata": ""}]}]})
        assert r.topics[0].partitions[0].error_code == 0

        def fetch():
            r = wire.request(OFFSET_FETCH, 7, {"group_id": group, "require_stable": True,
                                               "topics": [{"name": topic_name, "partition_indexes": [0]}]})
            p = r.topics[0].partitions[0]
            return p.error_code, p.committed_offset

        assert fetch() == (88, -1)  # UNSTABLE_OFFSET_COMMIT
        md = wire.request(3, 1, {"topics": [{"name": "__consumer_offsets"}]})
        offsets_partition = partition_for(group, len(md.topics[0].partitions))
        assert _markers(wire, 1, {"producer_id": pid, "producer_epoch": epoch, "transaction_result": True,
                                  "topics": [{"name": "__consumer_offsets",
                                              "partition_indexes": [offsets_partition]}]}) == [
            (pid, "__consumer_offsets", offsets_partition, 0)]
        assert fetch() == (0, 5)
        end = {"transactional_id": tid, "producer_id": pid, "producer_epoch": epoch, "committed": False}
        assert wire.request(END_TXN, 3, end).error_code == 0  # the coordinator's own ABORT finds nothing
        assert fetch() == (0, 5)
