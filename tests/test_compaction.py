"""Log compaction through real clients over real sockets (issue 18): what a consumer reads from a
compacted topic (kafka-python, confluent-kafka, aiokafka, kcat), tombstones, idempotent and
transactional producers across a clean, the header-only batches a clean leaves, kill -9 at each swap
step, the cleaner's /metrics series, DescribeLogDirs sizes and the compacted internal topics.

The storage-level rules are tested in tests/storage/test_cleaner.py; here the broker's own cleaner
task does the work (``log.cleaner.backoff.ms`` small) and the tests wait for it by reading
``cleaner-offset-checkpoint``, as an operator could."""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import time
import urllib.request

import pytest
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition

from minibroker.records.batches import iter_batches
from minibroker.storage import checkpoints as ckpt
from minibroker.storage.cleaner import (
    CLEANER_OFFSET_CHECKPOINT,
    CRASH_AT_ENV,
    CRASH_EXIT_CODE,
    MERGE_SUFFIX,
    SWAP_STEPS,
)

BROKER = {"log.cleaner.backoff.ms": "50", "log.segment.delete.delay.ms": "100"}
SEGMENT_MS = 1500


def _topic(runner, name, **configs) -> None:
    cfg = {
        "cleanup.policy": "compact",
        "segment.bytes": "4096",
        "min.cleanable.dirty.ratio": "0.01",
        "delete.retention.ms": "600000",
        "segment.ms": str(SEGMENT_MS),
        "file.delete.delay.ms": "100",
        **{k.replace("_", "."): str(v) for k, v in configs.items()},
    }
    runner.create_topic(name, 1, cfg)


def _partition_dir(runner, topic, partition=0) -> str:
    return os.path.join(runner.data_dir, f"{topic}-{partition}")


def _segment_files(runner, topic, partition=0) -> list[str]:
    d = _partition_dir(runner, topic, partition)
    return sorted(f for f in os.listdir(d) if re.fullmatch(r"\d{20}\.log", f))


def _file_batches(runner, topic, partition=0, *, active=True) -> list:
    """Every batch in the partition's segment files, in offset order (the active one too unless
    ``active=False``)."""
    names = _segment_files(runner, topic, partition)
    if not active:
        names = names[:-1]
    out = []
    for name in names:
        with open(os.path.join(_partition_dir(runner, topic, partition), name), "rb") as f:
            out += list(iter_batches(f.read()))
    return out


def _file_records(runner, topic, partition=0, *, active=True) -> list[tuple[int, bytes | None, bytes | None]]:
    return [
        (r.offset, r.key, r.value)
        for b in _file_batches(runner, topic, partition, active=active)
        if not b.is_control
        for r in b.records()
    ]


def _cleaner_checkpoint(runner, topic, partition=0) -> int:
    path = os.path.join(runner.data_dir, CLEANER_OFFSET_CHECKPOINT)
    try:
        return ckpt.read_offset_checkpoint(path).get((topic, partition), -1)
    except (FileNotFoundError, ckpt.CheckpointError):
        return -1


def _active_base(runner, topic, partition=0) -> int:
    return int(_segment_files(runner, topic, partition)[-1][:20])


def _wait_cleaned(runner, topic, partition=0, timeout=30.0, until=None) -> None:
    """Until the cleaner's checkpoint reached the active segment (everything before it cleaned) and
    ``until()`` (if given) holds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if _cleaner_checkpoint(runner, topic, partition) >= _active_base(
                runner, topic, partition
            ) > 0 and (until is None or until()):
                return
        except FileNotFoundError:
            pass
        time.sleep(0.05)
    raise AssertionError(
        f"{topic}-{partition} not cleaned in {timeout} s: checkpoint "
        f"{_cleaner_checkpoint(runner, topic, partition)}, segments "
        f"{_segment_files(runner, topic, partition)}"
    )


def _roll(runner, topic, key=b"roll", value=b"r") -> int:
    """Let segment.ms pass and append one record: the segment before it becomes cleanable."""
    time.sleep(SEGMENT_MS / 1000 + 0.2)
    before = len(_segment_files(runner, topic))
    offset = runner.produce(topic, [value], key=key, partition=0)[0]
    assert len(_segment_files(runner, topic)) == before + 1 and _active_base(runner, topic) == offset
    return offset


# -- the four clients, each reading the partition from ``start`` to its end --------------------------


def _read_kafka_python(
    runner, topic, start=0, **config
) -> list[tuple[int, bytes | None, bytes | None, list]]:
    consumer = KafkaConsumer(bootstrap_servers=runner.bootstrap_servers, enable_auto_commit=False, **config)
    try:
        tp = TopicPartition(topic, 0)
        consumer.assign([tp])
        end = consumer.end_offsets([tp])[tp]
        consumer.seek(tp, start)
        out = []
        deadline = time.monotonic() + 20
        while consumer.position(tp) < end:
            assert time.monotonic() < deadline, f"kafka-python stuck at {consumer.position(tp)} (end {end})"
            for records in consumer.poll(timeout_ms=200).values():
                out += [(r.offset, r.key, r.value, list(r.headers)) for r in records]
        return out
    finally:
        consumer.close()


def _read_confluent(runner, topic, start=0, **config) -> list[tuple[int, bytes | None, bytes | None, list]]:
    import confluent_kafka

    consumer = confluent_kafka.Consumer(
        {
            "bootstrap.servers": runner.bootstrap_servers,
            "group.id": "unused",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            **config,
        }
    )
    try:
        consumer.assign([confluent_kafka.TopicPartition(topic, 0, start)])
        out = []
        deadline = time.monotonic() + 20
        while True:
            assert time.monotonic() < deadline, "confluent-kafka did not reach the partition end"
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            if msg.error():
                if msg.error().code() == confluent_kafka.KafkaError._PARTITION_EOF:
                    return out
                raise AssertionError(msg.error())
            out.append((msg.offset(), msg.key(), msg.value(), list(msg.headers() or [])))
    finally:
        consumer.close()


def _read_aiokafka(runner, topic, start=0, **config) -> list[tuple[int, bytes | None, bytes | None, list]]:
    from aiokafka import AIOKafkaConsumer
    from aiokafka.structs import TopicPartition as AioTP

    async def read():
        consumer = AIOKafkaConsumer(
            bootstrap_servers=runner.bootstrap_servers, enable_auto_commit=False, **config
        )
        await consumer.start()
        try:
            tp = AioTP(topic, 0)
            consumer.assign([tp])
            end = (await consumer.end_offsets([tp]))[tp]
            consumer.seek(tp, start)
            out = []
            async with asyncio.timeout(20):
                while await consumer.position(tp) < end:
                    for records in (await consumer.getmany(timeout_ms=200)).values():
                        out += [(r.offset, r.key, r.value, list(r.headers)) for r in records]
            return out
        finally:
            await consumer.stop()

    return asyncio.run(read())


def _read_kcat(kcat, runner, topic, start=0) -> list[tuple[int, bytes | None, bytes | None]]:
    result = subprocess.run(
        [
            kcat,
            "-b",
            runner.bootstrap_servers,
            "-C",
            "-t",
            topic,
            "-p",
            "0",
            "-o",
            str(start),
            "-e",
            "-q",
            "-Z",
            "-f",
            "%o\t%k\t%s\n",
        ],
        capture_output=True,
        timeout=30,
    )
    assert result.returncode == 0, result.stderr.decode()
    out = []
    for line in result.stdout.decode().splitlines():
        offset, key, value = line.split("\t")
        out.append(
            (
                int(offset),
                None if key == "NULL" else key.encode(),
                None if value == "NULL" else value.encode(),
            )
        )
    return out


def _keyed(rows) -> dict:
    return {r[1]: r for r in rows}


# -- 1. overwrites, read back by every client ---------------------------------------------------------


def test_overwrites_leave_one_record_per_key_at_its_offset_for_every_client(
    minibroker_factory, topic_name, kcat
):
    runner = minibroker_factory(BROKER)
    _topic(runner, topic_name)
    producer = KafkaProducer(bootstrap_servers=runner.bootstrap_servers, linger_ms=5)
    latest = {}
    futures = []
    for i in range(1000):
        key = b"k%02d" % (i % 50)
        value = b"v%04d" % i
        headers = [("h", b"%d" % i), ("even", b"1")] if i % 3 == 0 else []
        futures.append(
            (
                key,
                value,
                headers,
                producer.send(topic_name, key=key, value=value, headers=headers, partition=0),
            )
        )
    producer.flush()
    for key, value, headers, future in futures:
        latest[key] = (future.get(10).offset, key, value, headers)
    producer.close()
    roll = _roll(runner, topic_name)
    _wait_cleaned(runner, topic_name)
    cleaner = runner.broker.logs.cleaner
    assert cleaner.stats.runs >= 1 and cleaner.stats.records_removed >= 900

    expected = sorted(latest.values()) + [(roll, b"roll", b"r", [])]
    assert len(_file_records(runner, topic_name)) == 51  # the files themselves hold one record per key
    got = _read_kafka_python(runner, topic_name)
    assert got == expected
    assert any(h for *_, h in got)  # headers survived the rewrite
    confluent = [(o, k, v, [(hk, hv) for hk, hv in h]) for o, k, v, h in _read_confluent(runner, topic_name)]
    assert confluent == expected
    assert _read_kcat(kcat, runner, topic_name) == [(o, k, v) for o, k, v, _ in expected]
    assert _read_aiokafka(runner, topic_name) == expected


# -- tombstones ---------------------------------------------------------------------------------------


@pytest.mark.slow
def test_tombstones_are_read_until_delete_retention_ms_then_the_key_is_gone(
    minibroker_factory, topic_name, kcat
):
    runner = minibroker_factory(BROKER)
    retention_s = 5.0
    _topic(runner, topic_name, delete_retention_ms=int(retention_s * 1000))
    producer = KafkaProducer(bootstrap_servers=runner.bootstrap_servers)
    offsets = {}
    for round_ in range(3):
        for i in range(10):
            offsets[b"a%d" % i] = (
                producer.send(topic_name, key=b"a%d" % i, value=b"%d-%d" % (i, round_), partition=0)
                .get(10)
                .offset
            )
    for i in range(5):
        offsets[b"a%d" % i] = (
            producer.send(topic_name, key=b"a%d" % i, value=None, partition=0).get(10).offset
        )
    producer.close()
    roll = _roll(runner, topic_name)
    _wait_cleaned(runner, topic_name)
    cleaned_at = time.monotonic()
    with_tombstones = sorted(
        [(offsets[b"a%d" % i], b"a%d" % i, None) for i in range(5)]
        + [(offsets[b"a%d" % i], b"a%d" % i, b"%d-2" % i) for i in range(5, 10)]
    ) + [(roll, b"roll", b"r")]
    expected = [(offsets[b"a%d" % i], b"a%d" % i, b"%d-2" % i) for i in range(5, 10)] + [
        (roll, b"roll", b"r")
    ]

    def read_within_retention(read) -> None:
        """A read that ends within delete.retention.ms of the clean sees the tombstones; one that ends
        later (a starved machine) may see them or not: the next pass may have removed them."""
        rows = [(o, k, v) for o, k, v, _ in read()]
        if time.monotonic() - cleaned_at < retention_s:
            assert rows == with_tombstones
        else:
            assert rows in (with_tombstones, expected)

    read_within_retention(lambda: _read_kafka_python(runner, topic_name))
    read_within_retention(lambda: _read_confluent(runner, topic_name))
    read_within_retention(lambda: [(o, k, v, None) for o, k, v in _read_kcat(kcat, runner, topic_name)])

    # After delete.retention.ms a pass removes the tombstones: the keys are gone.
    _wait_cleaned(
        runner, topic_name, until=lambda: all(v is not None for _, _, v in _file_records(runner, topic_name))
    )
    assert time.monotonic() - cleaned_at >= retention_s - 0.5
    assert [(o, k, v) for o, k, v, _ in _read_kafka_python(runner, topic_name)] == expected
    assert [(o, k, v) for o, k, v, _ in _read_confluent(runner, topic_name)] == expected
    assert _read_kcat(kcat, runner, topic_name) == expected


# -- the header-only batches a clean leaves -----------------------------------------------------------


@pytest.mark.slow
def test_header_only_batches_left_by_a_clean_are_read_past_by_every_client(
    minibroker_factory, topic_name, kcat
):
    """A producer's last batch whose records all went stays as a 61-byte batch without records (its
    sequence state lives in it); so does a cleaned segment's last batch (the placeholder keeping the
    segment's offset range). Every client reads past both, from offset 0, from inside and from after."""
    runner = minibroker_factory(BROKER)
    _topic(runner, topic_name, segment_bytes=1024, min_compaction_lag_ms=2500)
    idempotent = KafkaProducer(
        bootstrap_servers=runner.bootstrap_servers, enable_idempotence=True, linger_ms=100
    )
    futures = [idempotent.send(topic_name, key=b"e%d" % i, value=b"first", partition=0) for i in range(3)]
    idempotent.flush()
    p1_offsets = [f.get(10).offset for f in futures]
    assert p1_offsets == [0, 1, 2]
    idempotent.close()
    plain = KafkaProducer(bootstrap_servers=runner.bootstrap_servers, batch_size=1, linger_ms=0)
    futures = [plain.send(topic_name, key=b"e%d" % i, value=b"second", partition=0) for i in range(3)]
    # Values of 300 bytes: the 5 latest records fill more than a segment, so the superseded segments'
    # placeholders cannot all be merged into the segments of live records.
    futures += [plain.send(topic_name, key=b"k%d" % (i % 5), value=b"%d" % i + b"." * 300, partition=0)
                for i in range(60)]
    plain.flush()
    for f in futures:
        f.get(10)
    plain.close()
    assert len(_segment_files(runner, topic_name)) >= 4
    _roll(runner, topic_name)
    _wait_cleaned(runner, topic_name)

    batches = _file_batches(runner, topic_name, active=False)
    empty = [b for b in batches if b.count == 0]
    assert all(b.size == 61 for b in empty)
    by_producer = [b for b in empty if b.producer_id >= 0]
    placeholders = [b for b in empty if b.producer_id < 0]
    assert [(b.base_offset, b.last_offset) for b in by_producer] == [(0, 2)]
    assert placeholders, [(b.base_offset, b.last_offset, b.count) for b in batches]

    full = _read_kafka_python(runner, topic_name)
    assert len({k for _, k, _, _ in full}) == len(full) == 3 + 5 + 1
    starts = {0, 1, 3}  # the producer's empty batch covers 0..2
    for b in placeholders:
        starts |= {b.base_offset, b.last_offset + 1}
    for start in sorted(starts):
        expected = [r for r in full if r[0] >= start]
        assert _read_kafka_python(runner, topic_name, start) == expected, start
        assert _read_aiokafka(runner, topic_name, start) == expected, start
        assert [(o, k, v) for o, k, v, _ in _read_confluent(runner, topic_name, start)] == [
            (o, k, v) for o, k, v, _ in expected
        ], start
        assert _read_kcat(kcat, runner, topic_name, start) == [(o, k, v) for o, k, v, _ in expected], start
    # A fetch so small that only the empty batch fits must still move the consumers on.
    for b in by_producer + placeholders:
        expected = [r for r in full if r[0] > b.last_offset]
        assert _read_kafka_python(runner, topic_name, b.base_offset, max_partition_fetch_bytes=64) == expected
        assert [
            (o, k, v)
            for o, k, v, _ in _read_confluent(
                runner,
                topic_name,
                b.base_offset,
                **{"max.partition.fetch.bytes": 64, "fetch.max.bytes": 1000, "message.max.bytes": 1000},
            )
        ] == [(o, k, v) for o, k, v, _ in expected]


# -- producers across a clean -------------------------------------------------------------------------


def test_an_idempotent_producer_goes_on_after_a_clean_and_a_kill(minibroker_factory, topic_name):
    """Its last batch's records all superseded, the producer's sequence state lives in the header-only
    batch the clean keeps; after a kill -9 the broker rebuilds it from the log, and the producer's
    next batch is accepted with the next sequence (no OUT_OF_ORDER_SEQUENCE / UNKNOWN_PRODUCER_ID)."""
    runner = minibroker_factory(BROKER, mode="process")
    _topic(runner, topic_name, segment_bytes=1024)
    producer = KafkaProducer(
        bootstrap_servers=runner.bootstrap_servers,
        enable_idempotence=True,
        linger_ms=50,
        retries=5,
        reconnect_backoff_ms=50,
    )
    futures = [producer.send(topic_name, key=b"x%d" % i, value=b"old", partition=0) for i in range(3)]
    producer.flush()
    assert [f.get(10).offset for f in futures] == [0, 1, 2]
    runner.produce(topic_name, [b"new"] * 1, key=b"x0", partition=0)
    runner.produce(topic_name, [b"new"], key=b"x1", partition=0)
    runner.produce(topic_name, [b"new"], key=b"x2", partition=0)
    runner.produce(topic_name, [b"%d" % i for i in range(40)], key=b"filler", partition=0)
    _roll(runner, topic_name)
    _wait_cleaned(runner, topic_name)
    first = _file_batches(runner, topic_name)[0]
    assert (first.base_offset, first.last_offset, first.count, first.base_sequence) == (0, 2, 0, 0)
    pid, epoch = first.producer_id, first.producer_epoch
    assert pid >= 0

    runner.kill()
    runner.start()
    offsets = [
        producer.send(topic_name, key=b"x%d" % i, value=b"after", partition=0).get(30).offset
        for i in range(3)
    ]
    producer.close()
    after = [b for b in _file_batches(runner, topic_name) if b.base_offset >= offsets[0]]
    assert [(b.producer_id, b.producer_epoch, b.base_sequence) for b in after] == [
        (pid, epoch, 3),
        (pid, epoch, 4),
        (pid, epoch, 5),
    ]
    rows = _read_kafka_python(runner, topic_name)
    assert [(o, k, v) for o, k, v, _ in rows if k.startswith(b"x") and v == b"after"] == [
        (offsets[i], b"x%d" % i, b"after") for i in range(3)
    ]


def test_transactions_aborted_records_are_cleaned_away(minibroker_factory, topic_name):
    runner = minibroker_factory(BROKER)
    _topic(runner, topic_name)
    producer = KafkaProducer(bootstrap_servers=runner.bootstrap_servers, transactional_id="compaction-txn")
    producer.init_transactions()
    expected = {}

    def txn(keys, value, commit):
        producer.begin_transaction()
        futures = [(k, producer.send(topic_name, key=k, value=value, partition=0)) for k in keys]
        producer.flush()
        placed = {k: f.get(10).offset for k, f in futures}
        (producer.commit_transaction if commit else producer.abort_transaction)()
        if commit:
            expected.update({k: (placed[k], value) for k in keys})

    keys = [b"t%d" % i for i in range(10)]
    txn(keys[:5], b"committed-1", True)
    txn(keys, b"aborted-1", False)
    txn(keys[5:8], b"committed-2", True)
    txn(keys[:3], b"committed-3", True)
    txn(keys[2:9], b"aborted-2", False)
    producer.close()
    roll = _roll(runner, topic_name)
    _wait_cleaned(runner, topic_name)

    want = sorted((o, k, v) for k, (o, v) in expected.items()) + [(roll, b"roll", b"r")]
    for isolation in ("read_committed", "read_uncommitted"):
        rows = _read_kafka_python(runner, topic_name, isolation_level=isolation)
        assert [(o, k, v) for o, k, v, _ in rows] == want, isolation
    values = [v for _, _, v in _file_records(runner, topic_name)]
    assert not [v for v in values if v.startswith(b"aborted")]
    assert sorted(values) == sorted([v for _, _, v in want])


# -- 2. kill -9 at each step of a swap ----------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("step", [*SWAP_STEPS, *(step + MERGE_SUFFIX for step in SWAP_STEPS)])
def test_a_kill_at_each_swap_step_loses_and_duplicates_nothing(
    minibroker_factory, topic_name, monkeypatch, step
):
    """The broker process exits (os._exit, as kill -9) when a swap reaches ``step``
    (MINIBROKER_CLEANER_CRASH_AT), twice in a row (the restarted broker cleans again and dies again);
    ``<step>:merge``: at a swap of several old segments for one (the pass merging its small cleaned
    segments; after a restart that completed the merge, the next pass may have nothing to merge);
    then it starts without the hook and the cleaner off: recovery left no .cleaned/.swap/.deleted
    file, every key's latest value is read at its offset, and every record read is one produced, once."""
    monkeypatch.setenv(CRASH_AT_ENV, step)
    runner = minibroker_factory(BROKER, mode="process")
    # min.compaction.lag.ms: no pass before every record is written (a pass would kill the broker).
    _topic(runner, topic_name, segment_bytes=2048, min_compaction_lag_ms=2000)
    producer = KafkaProducer(bootstrap_servers=runner.bootstrap_servers, linger_ms=2, batch_size=300)
    sent = [
        (
            b"k%02d" % (i % 30),
            b"v%04d" % i,
            producer.send(topic_name, key=b"k%02d" % (i % 30), value=b"v%04d" % i, partition=0),
        )
        for i in range(400)
    ]
    producer.flush(20)
    produced = {f.get(10).offset: (k, v) for k, v, f in sent}
    producer.close(5)
    assert len(_segment_files(runner, topic_name)) > 3
    assert runner.process.wait(30) == CRASH_EXIT_CODE
    suffixes = {f.rsplit(".", 1)[-1] for f in os.listdir(_partition_dir(runner, topic_name))}
    assert (
        suffixes
        >= {
            "cleaned_written": {"cleaned"},
            "swap_renamed": {"swap"},
            "old_deleted": {"swap", "deleted"},
            "swap_done": {"deleted"},
        }[step.removesuffix(MERGE_SUFFIX)]
    )
    runner.kill()
    runner.start()  # the hook is still set: recovery, then the cleaner dies again at the same step
    if step.endswith(MERGE_SUFFIX):
        # When recovery completed the merge, what is left may have nothing more to merge: the pass
        # then ends without a second exit.
        deadline = time.monotonic() + 30
        while runner.process.poll() is None and _cleaner_checkpoint(runner, topic_name) < 0:
            assert time.monotonic() < deadline, "neither an exit nor a clean"
            time.sleep(0.05)
        assert runner.process.poll() in (None, CRASH_EXIT_CODE)
    else:
        assert runner.process.wait(30) == CRASH_EXIT_CODE
    runner.kill()

    monkeypatch.delenv(CRASH_AT_ENV)
    runner.overrides["log.cleaner.enable"] = "false"
    runner.start()
    left = [
        f
        for f in os.listdir(_partition_dir(runner, topic_name))
        if f.endswith((".cleaned", ".swap", ".deleted"))
    ]
    assert left == []
    rows = _read_kafka_python(runner, topic_name)
    offsets = [o for o, *_ in rows]
    assert offsets == sorted(set(offsets))
    assert all(produced[o] == (k, v) for o, k, v, _ in rows)
    latest = {k: (o, v) for o, (k, v) in sorted(produced.items())}
    assert {k: (o, v) for o, k, v, _ in rows} == latest

    runner.overrides.pop("log.cleaner.enable")  # and with the cleaner on again, it finishes the job
    runner.restart()
    _roll(runner, topic_name)  # (the active segment's records supersede nothing: Kafka's rule)
    _wait_cleaned(runner, topic_name)
    latest[b"roll"] = (max(produced) + 1, b"r")
    rows = _read_kafka_python(runner, topic_name)
    assert sorted((o, k, v) for k, (o, v) in latest.items()) == [(o, k, v) for o, k, v, _ in rows]


# -- 3, 4. /metrics and DescribeLogDirs -----------------------------------------------------------------


def _scrape(runner) -> dict[str, float]:
    with urllib.request.urlopen(
        f"http://127.0.0.1:{runner.broker.metrics_http.port}/metrics", timeout=5
    ) as resp:
        text = resp.read().decode()
    assert "# TYPE minibroker_log_cleaner_runs_total counter" in text
    assert "# TYPE minibroker_log_cleaner_dirty_ratio gauge" in text
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            out[name] = float(value)
    return out


def _log_dir_size(runner, topic) -> int:
    admin = KafkaAdminClient(bootstrap_servers=runner.bootstrap_servers)
    try:
        answer = admin.describe_log_dirs({topic: [0]})
    finally:
        admin.close()
    text = repr(answer)
    sizes = [int(s) for s in re.findall(r"partition_size'?[:=] ?(\d+)", text)]
    assert len(sizes) == 1, text
    return sizes[0]


def test_metrics_and_describe_log_dirs_show_the_clean(minibroker_factory, topic_name):
    runner = minibroker_factory({**BROKER, "metrics.port": "0"})
    _topic(runner, topic_name, cleanup_policy="delete")  # compact from the AlterConfigs below on
    runner.produce(topic_name, [b"x" * 100] * 1, key=b"only", partition=0)
    futures_producer = KafkaProducer(bootstrap_servers=runner.bootstrap_servers, linger_ms=5)
    for i in range(300):
        futures_producer.send(topic_name, key=b"k%d" % (i % 10), value=b"%0100d" % i, partition=0)
    futures_producer.flush()
    futures_producer.close()
    _roll(runner, topic_name)
    label = f'{{topic="{topic_name}",partition="0"}}'
    before = _scrape(runner)
    assert "minibroker_log_cleaner_dirty_ratio" + label not in before  # not a compacted log yet
    size_before = _log_dir_size(runner, topic_name)
    assert size_before == sum(
        os.path.getsize(os.path.join(_partition_dir(runner, topic_name), f))
        for f in _segment_files(runner, topic_name)
    )

    admin = KafkaAdminClient(bootstrap_servers=runner.bootstrap_servers)
    try:
        from kafka.admin import ConfigResource, ConfigResourceType

        admin.alter_configs(
            [
                ConfigResource(
                    ConfigResourceType.TOPIC,
                    topic_name,
                    configs={
                        "cleanup.policy": "compact",
                        "segment.bytes": "4096",
                        "min.cleanable.dirty.ratio": "0.01",
                        "delete.retention.ms": "600000",
                        "segment.ms": str(SEGMENT_MS),
                        "file.delete.delay.ms": "100",
                    },
                )
            ]
        )
    finally:
        admin.close()
    _wait_cleaned(runner, topic_name)
    after = _scrape(runner)
    assert after["minibroker_log_cleaner_runs_total"] >= before["minibroker_log_cleaner_runs_total"] + 1
    assert (
        after["minibroker_log_cleaner_bytes_read_total"] >= size_before - 200
    )  # the active segment is not read
    assert 0 < after["minibroker_log_cleaner_bytes_written_total"] < size_before / 5
    assert after["minibroker_log_cleaner_records_removed_total"] >= 280
    assert after["minibroker_log_cleaner_dirty_ratio" + label] == 0.0
    assert _log_dir_size(runner, topic_name) < size_before / 4


# -- 5. internal topics ---------------------------------------------------------------------------------

INTERNAL = {
    **BROKER,
    "offsets.topic.num.partitions": "1",
    "offsets.topic.segment.bytes": "4096",
    "transaction.state.log.num.partitions": "1",
    "transaction.state.log.segment.bytes": "4096",
    "log.cleaner.min.cleanable.ratio": "0.01",
    "log.roll.ms": str(SEGMENT_MS),
    "log.cleaner.delete.retention.ms": "2000",
}


def _on_loop(runner, fn):
    """``fn()`` on the in-process broker's event loop thread (the coordinators' owner)."""

    async def call():
        return fn()

    return asyncio.run_coroutine_threadsafe(call(), runner._loop).result(10)


def _offsets_records(runner):
    from minibroker.coordinator.group_records import decode_key

    return [(o, decode_key(k), v) for o, k, v in _file_records(runner, "__consumer_offsets")]


def _commit(runner, group, topic, offsets) -> None:
    from kafka.structs import OffsetAndMetadata

    consumer = KafkaConsumer(
        bootstrap_servers=runner.bootstrap_servers, group_id=group, enable_auto_commit=False
    )
    try:
        tp = TopicPartition(topic, 0)
        consumer.assign([tp])
        for offset in offsets:
            consumer.commit({tp: OffsetAndMetadata(offset, "", -1)})
    finally:
        consumer.close()


@pytest.mark.slow
def test_consumer_offsets_is_compacted_and_group_tombstones_are_written(minibroker_factory, topic_name):
    runner = minibroker_factory(INTERNAL)
    runner.create_topic(topic_name)
    _commit(runner, "busy", topic_name, range(300))
    time.sleep(SEGMENT_MS / 1000 + 0.2)
    _commit(runner, "busy", topic_name, [300])  # rolls __consumer_offsets-0
    _wait_cleaned(runner, "__consumer_offsets")
    commits = [(o, k, v) for o, k, v in _offsets_records(runner) if getattr(k, "group", None) == "busy"]
    assert len(commits) <= 3, commits  # 301 commits: the latest of the cleaned part, the active segment's
    assert runner.broker.groups.fetch_offsets("busy", None)[(topic_name, 0)].offset == 300

    # The tombstones each way of forgetting offsets writes (group_coordinator.py).
    for group in ("deleted-offsets", "deleted-group", "expired"):
        _commit(runner, group, topic_name, [7])
    admin = KafkaAdminClient(bootstrap_servers=runner.bootstrap_servers)
    try:
        admin.delete_group_offsets("deleted-offsets", [TopicPartition(topic_name, 0)])
        admin.delete_groups(["deleted-group"])
    finally:
        admin.close()
    coordinator = runner.broker.groups
    retention = coordinator.offsets_retention_ms
    removed = _on_loop(
        runner, lambda: coordinator.expire_offsets(now=int(time.time() * 1000) + retention + 60_000)
    )
    assert removed >= 1  # "expired" (and "busy", "deleted-offsets", whose offsets are as old)
    tombstones = {(type(k).__name__, k.group) for o, k, v in _offsets_records(runner) if v is None}
    assert ("OffsetCommitKey", "deleted-offsets") in tombstones  # OffsetDelete
    assert {
        ("OffsetCommitKey", "deleted-group"),
        ("GroupMetadataKey", "deleted-group"),
    } <= tombstones  # DeleteGroups
    assert ("OffsetCommitKey", "expired") in tombstones  # offset expiry
    assert ("GroupMetadataKey", "expired") in tombstones  # ... and the emptied group with it

    # After log.cleaner.delete.retention.ms the cleaner removes the tombstones and the keys are gone.
    time.sleep(SEGMENT_MS / 1000 + 0.2)
    _commit(runner, "roller", topic_name, [1])

    def gone():
        groups = {k.group for _, k, _ in _offsets_records(runner)[:-3]}
        return not groups & {"deleted-offsets", "deleted-group", "expired"}

    _wait_cleaned(runner, "__consumer_offsets", until=gone, timeout=20)


def test_transaction_state_is_compacted(minibroker_factory, topic_name):
    runner = minibroker_factory(INTERNAL)
    runner.create_topic(topic_name)
    producer = KafkaProducer(bootstrap_servers=runner.bootstrap_servers, transactional_id="many-txns")
    producer.init_transactions()

    def one_txn():
        producer.begin_transaction()
        producer.send(topic_name, b"v", key=b"k", partition=0)
        producer.commit_transaction()

    for _ in range(60):
        one_txn()
    time.sleep(SEGMENT_MS / 1000 + 0.2)
    one_txn()  # rolls __transaction_state-0
    producer.close()
    _wait_cleaned(runner, "__transaction_state")
    written = runner.broker.logs.get_log("__transaction_state", 0).log_end_offset
    assert written >= 120  # each transaction wrote its state changes (ongoing, prepare, complete)
    assert len(_file_records(runner, "__transaction_state", active=False)) <= 1  # one key: its latest
    assert len(_file_records(runner, "__transaction_state")) <= 5
