"""Several log dirs through real clients: topics spread over two dirs; kafka-python's
``alter_replica_log_dirs`` moves a partition while a producer keeps writing (DescribeLogDirs shows the
future replica meanwhile), then every acknowledged record is read once and in order from the new dir
and the old dir is gone; a kill -9 at each step of a move (MINIBROKER_MOVE_CRASH_AT) loses nothing;
a restart loads from both dirs."""

from __future__ import annotations

import os
import subprocess
import threading
import time

import pytest

from minibroker.storage.log_dir_move import (
    MOVE_CRASH_AT_ENV,
    MOVE_CRASH_EXIT_CODE,
    MOVE_STEPS,
    MOVED_FROM_FILE,
)

kafka = pytest.importorskip("kafka")
from kafka import KafkaConsumer, KafkaProducer, TopicPartition, TopicPartitionReplica  # noqa: E402
from kafka.admin import KafkaAdminClient  # noqa: E402
from waiting import wait_until  # noqa: E402

from minibroker.tools.wire import WireClient  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::ResourceWarning")


def _broker(minibroker_factory, tmp_path, mode="thread", **overrides):
    dirs = [str(tmp_path / "dir-a"), str(tmp_path / "dir-b")]
    runner = minibroker_factory({"log.dirs": ",".join(dirs), "log.segment.delete.delay.ms": "0",
                                 "log.segment.bytes": "20000", **overrides}, mode=mode, data_dir=dirs[0])
    return runner, dirs


def _placement(runner) -> dict[tuple[str, int, bool], str]:
    """(topic, partition, is_future) -> log dir, from DescribeLogDirs through kafka-python."""
    admin = KafkaAdminClient(bootstrap_servers=runner.bootstrap_servers, request_timeout_ms=10000)
    try:
        answer = admin.describe_log_dirs()
    finally:
        admin.close()
    out = {}
    for broker in answer:
        for d in broker["log_dirs"]:
            assert d["error_code"] == 0, d
            for t in d["topics"]:
                for p in t["partitions"]:
                    out[(t["name"], p["partition_index"], p["is_future_key"])] = d["log_dir"]
    return out


def _move(runner, topic, partition, destination):
    admin = KafkaAdminClient(bootstrap_servers=runner.bootstrap_servers, request_timeout_ms=10000)
    try:
        replica = TopicPartitionReplica(topic, partition, 1)
        result = admin.alter_replica_log_dirs({replica: destination})
    finally:
        admin.close()
    assert result[replica] is kafka.errors.NoError, result


def _read_all(runner, topic, partition=0) -> list[tuple[int, bytes]]:
    consumer = KafkaConsumer(bootstrap_servers=runner.bootstrap_servers, enable_auto_commit=False,
                             consumer_timeout_ms=3000)
    try:
        tp = TopicPartition(topic, partition)
        consumer.assign([tp])
        consumer.seek_to_beginning(tp)
        end = consumer.end_offsets([tp])[tp]
        rows = []
        deadline = time.monotonic() + 30
        while consumer.position(tp) < end:
            assert time.monotonic() < deadline, "could not read up to the end"
            for records in consumer.poll(1000).values():
                rows += [(r.offset, r.value) for r in records]
        return rows
    finally:
        consumer.close()


def _partition_dirs(d):
    return sorted(n for n in os.listdir(d) if os.path.isdir(os.path.join(d, n)))


def test_a_partition_moves_while_a_producer_writes(minibroker_factory, tmp_path, topic_name):
    # The copy is paced so that the move is seen in progress (a few hundred ms).
    runner, dirs = _broker(minibroker_factory, tmp_path,
                           **{"replica.alter.log.dirs.io.max.bytes.per.second": "400000"})
    runner.create_topic(topic_name, partitions=4)
    placed = _placement(runner)
    assert sorted(placed[(topic_name, p, False)] for p in range(4)) == sorted(dirs * 2)  # spread
    source = placed[(topic_name, 0, False)]
    destination = next(d for d in dirs if d != source)

    producer = KafkaProducer(bootstrap_servers=runner.bootstrap_servers, acks="all", linger_ms=2,
                             retries=2**31 - 1, max_in_flight_requests_per_connection=1)
    acked: list[tuple[int, bytes]] = []
    for i in range(2000):  # ~200 KB before the move starts
        producer.send(topic_name, value=b"before-%06d-" % i + b"x" * 80, partition=0)
    producer.flush(30)
    stop = threading.Event()
    errors: list[BaseException] = []

    def write():
        i = 0
        try:
            while not stop.is_set():
                value = b"during-%06d" % i
                acked.append((producer.send(topic_name, value=value, partition=0).get(30).offset, value))
                i += 1
        except BaseException as exc:  # reported by the test
            errors.append(exc)

    writer = threading.Thread(target=write)
    writer.start()
    try:
        wait_until(lambda: len(acked) > 20, "the producer's first acks", seen=lambda: len(acked))
        _move(runner, topic_name, 0, destination)
        during_move = _placement(runner)
        assert during_move.get((topic_name, 0, True)) == destination  # the future replica
        assert during_move[(topic_name, 0, False)] == source
        wait_until(lambda: (topic_name, 0, True) not in _placement(runner), "the move to finish",
                   seen=lambda: _placement(runner))
        written_at_swap = len(acked)
        wait_until(lambda: len(acked) > written_at_swap + 20, "acks after the move", seen=lambda: len(acked))
    finally:
        stop.set()
        writer.join(60)
        producer.close(10)
    assert not errors, errors
    assert _placement(runner)[(topic_name, 0, False)] == destination
    assert f"{topic_name}-0" in _partition_dirs(destination)
    wait_until(lambda: not [n for n in _partition_dirs(source) if n.startswith(f"{topic_name}-0")],
               "the old dir's removal", seen=lambda: _partition_dirs(source))
    rows = _read_all(runner, topic_name)
    offsets = [o for o, _ in rows]
    assert offsets == list(range(len(rows)))  # once each, in order
    by_offset = dict(rows)
    assert all(by_offset[o] == v for o, v in acked)  # every acknowledged record, at its offset
    assert len(rows) == 2000 + len(acked)

    runner.restart()  # loads from both dirs
    placed_again = _placement(runner)
    assert placed_again[(topic_name, 0, False)] == destination
    assert {placed_again[(topic_name, p, False)] for p in range(1, 4)} == set(dirs)
    assert _read_all(runner, topic_name) == rows


@pytest.mark.slow
@pytest.mark.parametrize("step", MOVE_STEPS)
def test_a_kill_at_each_move_step_loses_nothing(minibroker_factory, tmp_path, topic_name, monkeypatch, step):
    """The broker exits (os._exit, as kill -9) when a move reaches ``step``; restarted without the
    hook, the partition ends in its destination, whole, with no future, -delete dir or marker left:
    from future_renamed on the move had committed; before, the restart starts it again, as Kafka
    resumes a future replica it finds at start-up."""
    monkeypatch.setenv(MOVE_CRASH_AT_ENV, step)
    runner, dirs = _broker(minibroker_factory, tmp_path, mode="process")
    runner.create_topic(topic_name, partitions=1)
    source = _placement(runner)[(topic_name, 0, False)]
    destination = next(d for d in dirs if d != source)
    producer = KafkaProducer(bootstrap_servers=runner.bootstrap_servers, acks="all", linger_ms=2)
    futures = [producer.send(topic_name, value=b"v%05d" % i, partition=0) for i in range(1500)]
    producer.flush(30)
    produced = {f.get(10).offset: b"v%05d" % i for i, f in enumerate(futures)}
    producer.close(5)
    _move(runner, topic_name, 0, destination)
    assert runner.process.wait(30) == MOVE_CRASH_EXIT_CODE
    runner.kill()
    name = f"{topic_name}-0"
    left_in_source, left_in_dest = _partition_dirs(source), _partition_dirs(destination)
    if step in ("future_created", "copied", "future_complete"):
        assert left_in_source == [name] and [n.endswith("-future") for n in left_in_dest] == [True]
        marker = os.path.join(destination, left_in_dest[0], MOVED_FROM_FILE)
        assert os.path.exists(marker) == (step == "future_complete")
    elif step == "future_renamed":
        assert left_in_source == left_in_dest == [name]
        assert os.path.exists(os.path.join(destination, name, MOVED_FROM_FILE))
    else:
        assert left_in_dest == [name] and [n.endswith("-delete") for n in left_in_source] == [True]
        assert os.path.exists(os.path.join(destination, name, MOVED_FROM_FILE)) == (step == "source_renamed")
    monkeypatch.delenv(MOVE_CRASH_AT_ENV)
    runner.start()
    # without being asked again: a move that had not committed is resumed
    wait_until(lambda: _placement(runner).get((topic_name, 0, False)) == destination
               and (topic_name, 0, True) not in _placement(runner), "the move to resume and finish",
               seen=lambda: _placement(runner))
    wait_until(lambda: _partition_dirs(source) == [], f"{source} to be emptied",
               seen=lambda: _partition_dirs(source))
    assert _partition_dirs(destination) == [f"{topic_name}-0"]
    assert not os.path.exists(os.path.join(destination, f"{topic_name}-0", MOVED_FROM_FILE))
    rows = _read_all(runner, topic_name)
    assert dict(rows) == produced and [o for o, _ in rows] == sorted(produced)


@pytest.fixture
def small_disk(tmp_path):
    """A 2 MiB tmpfs (needs root, as tests/test_full_disk.py)."""
    mount_point = tmp_path / "small-disk"
    mount_point.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mount_point)],
                          capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here (needs root): {done.stderr.strip()}")
    try:
        yield str(mount_point)
    finally:
        subprocess.run(["umount", "-l", str(mount_point)], check=False)


def test_a_full_dir_takes_only_its_partitions_offline(minibroker_factory, tmp_path, small_disk, topic_name):
    dirs = [str(tmp_path / "big"), small_disk]
    runner = minibroker_factory({"log.dirs": ",".join(dirs), "log.segment.bytes": "200000"},
                                data_dir=dirs[0])
    runner.create_topic(topic_name, partitions=2)
    placed = _placement(runner)
    on_small = next(p for p in range(2) if placed[(topic_name, p, False)] == small_disk)
    on_big = 1 - on_small
    producer = KafkaProducer(bootstrap_servers=runner.bootstrap_servers, acks="all", retries=0,
                             linger_ms=5)
    acked = {0: [], 1: []}
    failed = []
    try:
        values = [b"%06d" % i + b"x" * 1000 for i in range(3000)]  # 3 MB cannot fit in 2 MiB
        futures = [producer.send(topic_name, value=value, partition=on_small) for value in values]
        producer.flush(30)
        for value, future in zip(values, futures, strict=True):
            try:
                acked[on_small].append((future.get(10).offset, value))
            except kafka.errors.KafkaStorageError as exc:
                failed.append(exc)
        assert failed and acked[on_small]
        for i in range(50):  # the other dir takes appends as before
            value = b"big-%06d" % i
            acked[on_big].append((producer.send(topic_name, value=value, partition=on_big).get(10).offset,
                                  value))
    finally:
        producer.close(5)
    with WireClient(runner.host, runner.port) as wire:
        answer = wire.request(35, 1, {"topics": None})
    codes = {r.log_dir: r.error_code for r in answer.results}
    assert codes == {dirs[0]: 0, small_disk: 56}
    assert _read_all(runner, topic_name, on_small) == acked[on_small]  # reads go on
    assert _read_all(runner, topic_name, on_big) == acked[on_big]
    runner.restart()  # loads from both dirs, the full one too
    assert _read_all(runner, topic_name, on_small) == acked[on_small]
    assert _read_all(runner, topic_name, on_big) == acked[on_big]


def test_a_dir_of_another_cluster_refuses_start_up(minibroker_factory, tmp_path):
    dirs = [str(tmp_path / "dir-a"), str(tmp_path / "dir-b")]
    os.makedirs(dirs[1])
    with open(os.path.join(dirs[1], "meta.properties"), "w") as f:
        f.write("cluster.id=AAAAAAAAAAAAAAAAAAAAAA\nnode.id=1\nversion=1\n")
    first = minibroker_factory({"log.dirs": dirs[0]}, data_dir=dirs[0])  # dir-a: a cluster of its own
    first.stop()
    with pytest.raises(OSError, match="different clusters") as info:
        minibroker_factory({"log.dirs": ",".join(dirs)}, data_dir=dirs[0])
    assert dirs[0] in str(info.value) and dirs[1] in str(info.value)
    assert sorted(os.listdir(dirs[1])) == [".lock", "meta.properties"]  # nothing written there
