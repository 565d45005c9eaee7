"""Leader epochs over the wire: a fault rule's bump_leader_epoch starts a real epoch on the partition
(PartitionLog.start_leader_epoch), the batches written after it carry it, every API answers it, and it
survives a restart and a kill -9, as a real election's epoch does."""

from __future__ import annotations

import io
import json
import os

import pytest

from minibroker.errors import ErrorCode
from minibroker.storage.checkpoints import LEADER_EPOCH_CHECKPOINT, read_epoch_checkpoint
from minibroker.tools import dump_log
from minibroker.tools.wire import WireClient


def _wire(broker) -> WireClient:
    host, port = broker.bootstrap_servers.rsplit(":", 1)
    return WireClient(host, int(port), timeout=10)


def bump(broker, topic: str, partition: int = 0) -> None:
    """One leader election, as a test makes it: a ListOffsets answered NOT_LEADER_OR_FOLLOWER with
    ``bump_leader_epoch``."""
    with broker.inject(api="ListOffsets", topic=topic, partition=partition, error="NOT_LEADER_OR_FOLLOWER",
                       bump_leader_epoch=True, count=1) as rule, _wire(broker) as wire:
        wire.request(2, 5, list_offsets(topic, -1, partition=partition))
        assert rule.wait_until_matched(1, timeout=5) == 1


def list_offsets(topic: str, timestamp: int, current_epoch: int = -1, partition: int = 0) -> dict:
    return {"replica_id": -1, "isolation_level": 0, "topics": [{"name": topic, "partitions": [
        {"partition_index": partition, "timestamp": timestamp, "current_leader_epoch": current_epoch}]}]}


def metadata_epochs(wire, topic: str) -> list[int]:
    request = {"topics": [{"name": topic, "topic_id": b"\0" * 16}], "allow_auto_topic_creation": False,
               "include_topic_authorized_operations": False}
    answer = wire.request(3, 12, request)
    return [p.leader_epoch for p in sorted(answer.topics[0].partitions, key=lambda p: p.partition_index)]


def end_offsets(wire, topic: str, *epochs: int, current: int = -1) -> list[tuple[int, int, int]]:
    out = []
    for epoch in epochs:  # a request names a partition once
        request = {"replica_id": -1, "topics": [{"topic": topic, "partitions": [
            {"partition": 0, "current_leader_epoch": current, "leader_epoch": epoch}]}]}
        (p,) = wire.request(23, 4, request).topics[0].partitions
        out.append((p.error_code, p.leader_epoch, p.end_offset))
    return out


def batch_epochs(data_dir: str, topic: str) -> list[tuple[int, int, bool]]:
    """(base offset, partitionLeaderEpoch, is a control batch) of every batch, as the dump tool reads them."""
    directory = os.path.join(data_dir, f"{topic}-0")
    logs = sorted(os.path.join(directory, f) for f in os.listdir(directory) if f.endswith(".log"))
    out = io.StringIO()
    assert dump_log.main(["--json", *logs], stdout=out, stderr=io.StringIO()) == 0
    rows = [json.loads(line) for line in out.getvalue().splitlines()]
    return [(r["baseOffset"], r["partitionLeaderEpoch"], r["isControl"]) for r in rows if "baseOffset" in r]


def checkpoint(data_dir: str, topic: str) -> list[tuple[int, int]]:
    return read_epoch_checkpoint(os.path.join(data_dir, f"{topic}-0", LEADER_EPOCH_CHECKPOINT))


def test_batches_after_a_bump_carry_the_new_epoch(minibroker, topic_name):
    from confluent_kafka import Producer

    minibroker.create_topic(topic_name, 2)
    minibroker.produce(topic_name, [b"a", b"b"], partition=0)
    bump(minibroker, topic_name)
    minibroker.produce(topic_name, [b"c"], partition=0)
    big = [os.urandom(1024) for _ in range(300)]  # 300 KiB of gzip (random bytes): validated off the loop
    minibroker.produce(topic_name, big, partition=0, compression_type="gzip", batch_size=1 << 20,
                       max_request_size=2 << 20)
    bump(minibroker, topic_name)
    producer = Producer({"bootstrap.servers": minibroker.bootstrap_servers, "transactional.id": topic_name})
    producer.init_transactions(10)
    producer.begin_transaction()
    producer.produce(topic_name, b"d", partition=0)
    producer.commit_transaction(10)
    producer.flush(10)
    epochs = batch_epochs(minibroker.data_dir, topic_name)
    assert epochs == [(0, 0, False), (2, 1, False), (3, 1, False), (303, 2, False), (304, 2, True)]
    assert checkpoint(minibroker.data_dir, topic_name) == [(0, 0), (1, 2), (2, 303)]
    with _wire(minibroker) as wire:
        assert metadata_epochs(wire, topic_name) == [2, 0]  # the other partition had no election
        answer = wire.request(75, 0, {"topics": [{"name": topic_name}], "response_partition_limit": 10})
        assert [p.leader_epoch for p in answer.topics[0].partitions] == [2, 0]


def test_every_api_answers_the_partitions_epoch(minibroker, topic_name):
    minibroker.create_topic(topic_name)
    minibroker.produce(topic_name, [b"a", b"b", b"c"])
    bump(minibroker, topic_name)
    minibroker.produce(topic_name, [b"d", b"e"])
    bump(minibroker, topic_name)
    with _wire(minibroker) as wire:
        assert metadata_epochs(wire, topic_name) == [2]
        # OffsetForLeaderEpoch, from the epoch cache: old epochs end where the next starts, the current
        # one at the log end, an unknown newer one is UNDEFINED
        assert end_offsets(wire, topic_name, 0, 1, 2, 3, -1) == [
            (0, 0, 3), (0, 1, 5), (0, 2, 5), (0, -1, -1), (0, -1, -1)]
        assert end_offsets(wire, topic_name, 0, current=1)[0][0] == ErrorCode.FENCED_LEADER_EPOCH
        assert end_offsets(wire, topic_name, 0, current=3)[0][0] == ErrorCode.UNKNOWN_LEADER_EPOCH
        assert end_offsets(wire, topic_name, 0, current=2) == [(0, 0, 3)]

        def listed(timestamp: int, current: int = -1) -> tuple[int, int, int]:
            (p,) = wire.request(2, 5, list_offsets(topic_name, timestamp, current)).topics[0].partitions
            return p.error_code, p.offset, p.leader_epoch

        # the epoch of the batch holding the answer (Kafka: the earliest offset's epoch, the latest's current)
        assert listed(-2) == (0, 0, 0) and listed(-1) == (0, 5, 2)
        assert listed(-1, current=2) == (0, 5, 2)
        assert listed(-1, current=1)[0] == ErrorCode.FENCED_LEADER_EPOCH
        assert listed(-1, current=5)[0] == ErrorCode.UNKNOWN_LEADER_EPOCH

        def fetched(current: int, offset: int = 3, last_fetched: int = -1):
            request = {"replica_id": -1, "max_wait_ms": 0, "min_bytes": 0, "max_bytes": 1 << 20,
                       "isolation_level": 0, "session_id": 0, "session_epoch": -1, "topics": [
                           {"topic": topic_name, "partitions": [
                               {"partition": 0, "fetch_offset": offset, "current_leader_epoch": current,
                                "last_fetched_epoch": last_fetched, "log_start_offset": -1,
                                "partition_max_bytes": 1 << 20}]}],
                       "forgotten_topics_data": [], "rack_id": ""}
            (p,) = wire.request(1, 12, request).responses[0].partitions
            diverging = p.diverging_epoch
            return p.error_code, len(p.records or b""), (diverging.epoch, diverging.end_offset)

        assert fetched(2)[0] == 0 and fetched(2)[1] > 0 and fetched(-1)[0] == 0
        assert fetched(0)[0] == ErrorCode.FENCED_LEADER_EPOCH
        assert fetched(3)[0] == ErrorCode.UNKNOWN_LEADER_EPOCH
        # the last fetched epoch (v12+): the log's end of it before the fetch offset is a divergence
        error, size, diverging = fetched(2, offset=4, last_fetched=1)  # epoch 1 ends at 5: reads on
        assert (error, diverging) == (0, (-1, -1)) and size > 0
        assert fetched(2, offset=4, last_fetched=0) == (0, 0, (0, 3))  # epoch 0 ended at 3: no records
        assert fetched(2, offset=5, last_fetched=3) == (0, 0, (-1, -1))  # an epoch this log never had


def test_a_deleted_and_recreated_topic_starts_at_epoch_zero(minibroker, topic_name):
    minibroker.create_topic(topic_name)
    minibroker.produce(topic_name, [b"a"])
    bump(minibroker, topic_name)
    with _wire(minibroker) as wire:
        assert metadata_epochs(wire, topic_name) == [1]
        minibroker.delete_topic(topic_name)
        minibroker.create_topic(topic_name)
        assert metadata_epochs(wire, topic_name) == [0]
        assert end_offsets(wire, topic_name, 0, 1) == [(0, 0, 0), (0, -1, -1)]
    minibroker.produce(topic_name, [b"b"])
    assert batch_epochs(minibroker.data_dir, topic_name) == [(0, 0, False)]


@pytest.mark.slow
def test_a_bump_survives_a_restart_and_a_kill(minibroker_factory, topic_name):
    broker = minibroker_factory(mode="process")
    broker.create_topic(topic_name)
    broker.produce(topic_name, [b"a", b"b", b"c"])
    bump(broker, topic_name)
    broker.produce(topic_name, [b"d"])
    bump(broker, topic_name)  # epoch 2: nothing written in it yet
    expected = [(0, 0), (1, 3), (2, 4)]
    broker.restart()
    assert checkpoint(broker.data_dir, topic_name) == expected
    with _wire(broker) as wire:
        assert metadata_epochs(wire, topic_name) == [2]
        assert end_offsets(wire, topic_name, 0, 1, 2) == [(0, 0, 3), (0, 1, 4), (0, 2, 4)]
    broker.produce(topic_name, [b"e"])
    bump(broker, topic_name)
    broker.kill()  # no clean shutdown: the checkpoint written at each bump, the batches, recovery
    broker.start()
    assert checkpoint(broker.data_dir, topic_name) == [*expected, (3, 5)]
    with _wire(broker) as wire:
        assert metadata_epochs(wire, topic_name) == [3]
        assert end_offsets(wire, topic_name, 2, 3) == [(0, 2, 5), (0, 3, 5)]
    broker.produce(topic_name, [b"f"])
    assert batch_epochs(broker.data_dir, topic_name)[-2:] == [(4, 2, False), (5, 3, False)]


def test_a_fetch_session_keeps_the_epochs_its_client_sent(minibroker, topic_name):
    """As Kafka's CachedPartition: an incremental fetch that does not name a partition fetches it with the
    current leader epoch the client last sent for it, so a bump fences it until the client names it again
    with the new epoch."""
    minibroker.create_topic(topic_name)
    minibroker.produce(topic_name, [b"a"])

    def fetch(wire, session_id: int, session_epoch: int, partitions: list[dict]):
        request = {"replica_id": -1, "max_wait_ms": 0, "min_bytes": 0, "max_bytes": 1 << 20,
                   "isolation_level": 0, "session_id": session_id, "session_epoch": session_epoch,
                   "topics": [{"topic": topic_name, "partitions": partitions}] if partitions else [],
                   "forgotten_topics_data": [], "rack_id": ""}
        answer = wire.request(1, 12, request)
        return answer.session_id, [(p.partition_index, p.error_code) for t in answer.responses
                                   for p in t.partitions]

    def named(epoch: int) -> list[dict]:
        return [{"partition": 0, "fetch_offset": 1, "current_leader_epoch": epoch, "last_fetched_epoch": -1,
                 "log_start_offset": -1, "partition_max_bytes": 1 << 20}]

    with _wire(minibroker) as wire:
        session, answers = fetch(wire, 0, 0, named(0))
        assert session and answers == [(0, 0)]
        bump(minibroker, topic_name)
        assert fetch(wire, session, 1, []) == (session, [(0, ErrorCode.FENCED_LEADER_EPOCH)])
        assert fetch(wire, session, 2, named(1)) == (session, [])  # served; nothing new, so left out
        minibroker.produce(topic_name, [b"b"])
        assert fetch(wire, session, 3, []) == (session, [(0, 0)])  # the new epoch is the session's now


def test_delete_records_moves_the_epochs_start(minibroker, topic_name):
    minibroker.create_topic(topic_name)
    minibroker.produce(topic_name, [b"a", b"b", b"c"])
    bump(minibroker, topic_name)
    minibroker.produce(topic_name, [b"d", b"e"])
    bump(minibroker, topic_name)
    minibroker.produce(topic_name, [b"f"])
    with _wire(minibroker) as wire:
        request = {"topics": [{"name": topic_name, "partitions": [{"partition_index": 0, "offset": 4}]}],
                   "timeout_ms": 5000}
        (p,) = wire.request(21, 2, request).topics[0].partitions
        assert (p.error_code, p.low_watermark) == (0, 4)
        assert checkpoint(minibroker.data_dir, topic_name) == [(1, 4), (2, 5)]
        # epoch 0 is older than the log holds now: it ends where the log starts (Kafka's endOffsetFor)
        assert end_offsets(wire, topic_name, 0, 1, 2) == [(0, 0, 4), (0, 1, 5), (0, 2, 6)]
        (p,) = wire.request(2, 5, list_offsets(topic_name, -2)).topics[0].partitions
        assert (p.offset, p.leader_epoch) == (4, 1)
