"""A full disk, for real: a small tmpfs holds the log dir, producers fill it, index pages included.

The broker must never die (no SIGBUS through a memory-mapped index, no traceback), producers get
KAFKA_STORAGE_ERROR, reads go on, DescribeLogDirs reports the dir offline, a restart on the
still-full disk starts, and once there is room again every acknowledged record is there.
Needs root to mount a tmpfs (CI runs as root); skipped with the reason elsewhere.
"""

from __future__ import annotations

import os
import subprocess
import uuid

import pytest
from kafka import KafkaProducer
from kafka.errors import KafkaError as ClientError
from kafka.errors import KafkaStorageError

from minibroker.testing import BrokerRunner
from minibroker.tools.wire import WireClient

pytestmark = pytest.mark.slow

DESCRIBE_LOG_DIRS = 35
DISK_BYTES = 2 << 20
VALUE = 1500  # bytes per record: one batch per record, an index entry per batch


@pytest.fixture
def small_disk(tmp_path):
    mount_point = tmp_path / "disk"
    mount_point.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={DISK_BYTES}", "tmpfs", str(mount_point)],
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here (needs root): {done.stderr.strip()}")
    (mount_point / "ballast").touch()
    try:
        yield str(mount_point)
    finally:
        subprocess.run(["umount", "-l", str(mount_point)], check=False)


def grow(mount_point: str, size: int) -> None:
    subprocess.run(["mount", "-o", f"remount,size={size}", mount_point], check=True)


def fill(mount_point: str) -> None:
    """Take every free byte of the disk with the ballast file (made by ``small_disk``: a full disk
    may have no room for a new one), as another program would."""
    fd = os.open(os.path.join(mount_point, "ballast"), os.O_WRONLY | os.O_APPEND)
    try:
        while True:
            os.write(fd, b"\0" * 4096)
    except OSError:
        pass
    finally:
        os.close(fd)


def producer(runner: BrokerRunner) -> KafkaProducer:
    # No retries: each send answers at once, acknowledged or with the broker's error.
    return KafkaProducer(
        bootstrap_servers=runner.bootstrap_servers,
        acks="all",
        retries=0,
        enable_idempotence=False,
        linger_ms=0,
        max_in_flight_requests_per_connection=1,
        request_timeout_ms=5000,
    )


def send_until_full(runner: BrokerRunner, prefix: str, limit: int = 20000) -> tuple[list[bytes], Exception]:
    """Send numbered records one at a time until the broker refuses one; returns the acknowledged
    values and the error."""
    acked: list[bytes] = []
    p = producer(runner)
    try:
        for i in range(limit):
            value = f"{prefix}-{i:06d}-".encode().ljust(VALUE, b"x")
            try:
                p.send("filled", value, partition=i % 2).get(10)
            except ClientError as exc:
                return acked, exc
            acked.append(value)
        raise AssertionError(f"{limit} records fit on a {DISK_BYTES}-byte disk")
    finally:
        p.close(5)


def describe_log_dir(runner: BrokerRunner):
    with WireClient(runner.host, runner.port, timeout=10) as wire:
        (result,) = wire.request(DESCRIBE_LOG_DIRS, 4, {"topics": None}).results
    return result


def read_all(runner: BrokerRunner, expected: int) -> list[bytes]:
    """Every record of the topic (the log ends must say ``expected``: no duplicate, none extra)."""
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=runner.bootstrap_servers)
    try:
        tps = [TopicPartition("filled", p) for p in sorted(consumer.partitions_for_topic("filled"))]
        assert sum(consumer.end_offsets(tps).values()) == expected
    finally:
        consumer.close()
    records = runner.consume("filled", expected, timeout=30) if expected else []
    return sorted(r.value for r in records)


def assert_alive(runner: BrokerRunner) -> None:
    assert runner.process is not None and runner.process.poll() is None, runner.log_text()[-3000:]
    text = runner.log_text()
    assert "Traceback" not in text and "--- Logging error ---" not in text, text[-3000:]


def test_full_disk_during_produce_loses_nothing_acknowledged(small_disk):
    data_dir = os.path.join(small_disk, "data")
    runner = BrokerRunner(
        {"log.index.interval.bytes": "100", "log.segment.bytes": "262144"},
        data_dir=data_dir,
        mode="process",
    )
    runner.start()
    try:
        runner.create_topic("filled", partitions=2)
        acked, error = send_until_full(runner, "a")
        assert isinstance(error, KafkaStorageError), error
        assert len(acked) > 500
        assert_alive(runner)

        # offline for writes, still serving reads
        result = describe_log_dir(runner)
        assert result.error_code == 56 and result.log_dir == os.path.abspath(data_dir)
        assert read_all(runner, len(acked)) == sorted(acked)
        more, error = send_until_full(runner, "b")
        assert more == [] and isinstance(error, KafkaStorageError)

        # A clean stop on the full disk, then a start: the log opens (recovery rewrites the
        # index pages it had), takes what still fits in allocated pages, then refuses again.
        runner.stop()
        fill(small_disk)  # whatever the stop freed (trimmed index pages)
        runner.start()
        assert_alive(runner)
        assert read_all(runner, len(acked)) == sorted(acked)
        more, error = send_until_full(runner, "c")
        acked += more
        assert isinstance(error, KafkaStorageError) and len(more) < 10
        assert describe_log_dir(runner).error_code == 56

        # kill -9 and lost indexes on the full disk: recovery cannot write the rebuilt indexes, so
        # the dir starts offline and its partitions open read-only, indexes in memory
        runner.kill()
        for part in ("filled-0", "filled-1"):
            for name in os.listdir(os.path.join(data_dir, part)):
                if name.endswith((".index", ".timeindex")):
                    os.unlink(os.path.join(data_dir, part, name))
        fill(small_disk)
        runner.start()
        assert_alive(runner)
        assert "opened read-only" in runner.log_text()
        assert describe_log_dir(runner).error_code == 56
        assert read_all(runner, len(acked)) == sorted(acked)
        more, error = send_until_full(runner, "e")
        assert more == [] and isinstance(error, KafkaStorageError)

        # room again: a restart takes the dir back, everything acknowledged is there, writes go on
        runner.kill()
        os.unlink(os.path.join(small_disk, "ballast"))
        grow(small_disk, 64 << 20)
        runner.start()
        assert describe_log_dir(runner).error_code == 0
        assert read_all(runner, len(acked)) == sorted(acked)
        p = producer(runner)
        try:
            tail = [f"d-{uuid.uuid4()}".encode() for _ in range(20)]
            for i, value in enumerate(tail):
                p.send("filled", value, partition=i % 2).get(10)
        finally:
            p.close(5)
        assert read_all(runner, len(acked) + len(tail)) == sorted(acked + tail)
        assert_alive(runner)
    finally:
        runner.cleanup()


def test_a_new_topic_on_a_full_disk_is_refused_with_a_storage_error(small_disk):
    data_dir = os.path.join(small_disk, "data")
    runner = BrokerRunner({"log.index.interval.bytes": "100"}, data_dir=data_dir, mode="process")
    runner.start()
    try:
        runner.create_topic("filled")
        fill(small_disk)
        with pytest.raises(RuntimeError, match="KAFKA_STORAGE_ERROR|56"):
            runner.create_topic("another", partitions=3)
        assert_alive(runner)
        with WireClient(runner.host, runner.port, timeout=10) as wire:
            topics = {t.name for t in wire.request(3, 1, {"topics": None}).topics}
        assert topics == {"filled"}  # nothing half made
        assert not [n for n in os.listdir(data_dir) if n.startswith("another")]
        # reads of what is there still work
        assert read_all(runner, 0) == []
    finally:
        runner.cleanup()


def test_an_index_page_the_full_disk_cannot_back_is_a_storage_error_not_sigbus(small_disk):
    """The page this append's index entry needs is the one the disk cannot back, while its
    batch still fits in the .log's last page: through a writable memory map that store was a
    SIGBUS that killed the broker; now it is ENOSPC, answered as KAFKA_STORAGE_ERROR."""
    data_dir = os.path.join(small_disk, "data")
    # every batch after the first gets an offset index entry: 8 bytes, 512 to a 4 KiB page
    runner = BrokerRunner({"log.index.interval.bytes": "0"}, data_dir=data_dir, mode="process")
    runner.start()
    try:
        runner.create_topic("filled")
        p = producer(runner)
        try:
            acked = []
            for i in range(513):  # index entries 0..511: its first page is full
                value = f"{i:08d}".encode().ljust(30, b".")
                p.send("filled", value).get(10)
                acked.append(value)
            log_size = os.path.getsize(os.path.join(data_dir, "filled-0", f"{0:020d}.log"))
            assert 4096 - log_size % 4096 > 200  # the next batch fits in the .log's last page
            fill(small_disk)
            with pytest.raises(KafkaStorageError):
                p.send("filled", b"one more".ljust(30, b".")).get(10)
        finally:
            p.close(5)
        assert_alive(runner)
        assert read_all(runner, len(acked)) == sorted(acked)
    finally:
        runner.cleanup()
