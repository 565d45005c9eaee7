"""The broker's file-descriptor budget (docs/storage.md, "File descriptors"), counted in
``/proc/self/fd`` around an in-process broker driven by real clients: an idle partition holds its
``.log`` and nothing else (Apache Kafka holds the same one), a deleted topic holds nothing, and a
stopped broker leaves the process with the descriptors it had before it started."""

from __future__ import annotations

import gc
import os
import time
import warnings

import pytest
from storage_helpers import linux_only, open_descriptors

from minibroker.testing import BrokerRunner

with warnings.catch_warnings():  # kafka-python's import trips a DeprecationWarning on 3.11
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka import KafkaConsumer

pytestmark = linux_only


def descriptor_count() -> int:
    return len(os.listdir("/proc/self/fd")) - 1  # the listing's own


def wait_for(condition, what: str) -> None:
    """Polled: client threads let their sockets go when they end, the upkeep sweeps on its tick."""
    for _ in range(200):
        gc.collect()
        if condition():
            return
        time.sleep(0.05)
    raise AssertionError(f"never {what}")


def held_by_partition(data_dir: str) -> dict[str, dict[str, int]]:
    """{partition dir: {file name: descriptors}} for the files of each partition dir held open."""
    out: dict[str, dict[str, int]] = {}
    for target, count in open_descriptors(data_dir).items():
        relative = os.path.relpath(target.removesuffix(" (deleted)"), os.path.realpath(data_dir))
        if os.sep in relative:
            directory, name = relative.split(os.sep, 1)
            out.setdefault(directory, {})[name] = count
    return out


def logs_only(data_dir: str) -> dict[str, dict[str, int]]:
    """What each partition dir would hold if only its segments' .log files were open, once each."""
    return {
        d: {n: 1 for n in os.listdir(os.path.join(data_dir, d)) if n.endswith(".log")}
        for d in os.listdir(data_dir)
        if os.path.isdir(os.path.join(data_dir, d)) and "-" in d
    }


@pytest.mark.slow  # the upkeep's ticks must pass (idle maps and writers let go)
def test_idle_partitions_hold_their_logs_only_and_nothing_outlives_a_topic_or_the_broker(tmp_path):
    data_dir = str(tmp_path / "data")
    gc.collect()  # what earlier tests of this process left to the collector goes first
    before = descriptor_count()
    runner = BrokerRunner({"log.segment.bytes": "4000", "log.index.interval.bytes": "200",
                           "log.flush.offset.checkpoint.interval.ms": "100"}, data_dir=data_dir)
    runner.start()
    try:
        runner.create_topic("idle", 40)
        assert held_by_partition(data_dir) == logs_only(data_dir)  # nothing was read or written
        runner.create_topic("busy", 3)
        values = [b"%05d" % i + b"." * 200 for i in range(150)]
        runner.produce("busy", values, batch_size=1000)  # rolls segments, writes index entries
        assert len(runner.consume("busy", len(values))) == len(values)
        consumer = KafkaConsumer("busy", bootstrap_servers=runner.bootstrap_servers, group_id="g",
                                 auto_offset_reset="earliest", enable_auto_commit=False,
                                 consumer_timeout_ms=5000)
        try:
            # values first: zip stops when they run out, before asking the consumer for one more
            read = [message for _, message in zip(values, consumer, strict=False)]
            assert len(read) == len(values)
            consumer.commit()  # creates __consumer_offsets: 50 more partitions
        finally:
            consumer.close()
        logs = logs_only(data_dir)
        assert len(logs) == 40 + 3 + 50 and all(len(logs[f"busy-{p}"]) > 2 for p in range(3))
        # idle now: the upkeep lets the indexes' maps and writers go; every .log stays open (reads
        # need it, as Kafka's FileRecords): 1 descriptor per segment, nothing per index
        wait_for(lambda: held_by_partition(data_dir) == logs_only(data_dir), "down to the .log files")
        runner.stop()
        assert open_descriptors(data_dir) == {}
        wait_for(lambda: descriptor_count() <= before, f"back to {before} descriptors")
        runner.start()
        # loading checked every segment's indexes and let them go; only the group coordinator's
        # load read a log (__consumer_offsets), and the upkeep lets its index map go too
        held, logs = held_by_partition(data_dir), logs_only(data_dir)
        assert {d: held[d] for d in held if d.startswith(("idle-", "busy-"))} == {
            d: logs[d] for d in logs if d.startswith(("idle-", "busy-"))}
        wait_for(lambda: held_by_partition(data_dir) == logs_only(data_dir), "down to the .log files")
        runner.delete_topic("busy")
        runner.delete_topic("idle")
        assert held_by_partition(data_dir) == logs_only(data_dir)
        assert len(logs_only(data_dir)) == 50
        runner.stop()
        assert open_descriptors(data_dir) == {}
        wait_for(lambda: descriptor_count() <= before, f"back to {before} descriptors after a restart")
    finally:
        runner.cleanup()
