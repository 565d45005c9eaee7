"""Retention by time and size, DeleteRecords, the log start offset and the background task."""

from __future__ import annotations

import asyncio
import os

import pytest
from storage_helpers import append_v2, config

from minibroker.errors import ErrorCode, KafkaError
from minibroker.storage import LogManager, PartitionLog


def filled(tmp_path, topic_id, **cfg):
    log = PartitionLog.create(str(tmp_path / "t-0"), "t", 0, topic_id, config(segment_bytes=500, **cfg))
    for i in range(40):
        append_v2(log, [i * 1000, i * 1000 + 1])  # segment i holds timestamps up to ~ (its last batch)
    assert len(log.segments) > 5
    return log


def test_time_retention_deletes_old_segments_never_the_active(tmp_path, topic_id):
    log = filled(tmp_path, topic_id, retention_ms=10_000)
    bases = [s.base_offset for s in log.segments]
    maxes = [s.max_timestamp for s in log.segments]
    now = maxes[2] + 10_001  # segments 0..2 are past retention, 3 is not
    assert log.apply_retention(now) == 3
    assert [s.base_offset for s in log.segments] == bases[3:]
    assert log.log_start_offset == bases[3]
    assert not os.path.exists(os.path.join(log.directory, f"{bases[0]:020d}.log"))
    with pytest.raises(KafkaError) as exc:
        log.read(0, 100)
    assert exc.value.code == ErrorCode.OFFSET_OUT_OF_RANGE
    assert log.apply_retention(10**12) == len(bases) - 4  # everything but the active segment
    assert len(log.segments) == 1 and log.log_end_offset == 80
    assert log.read(log.log_start_offset, 1).region is not None
    log.close()


def test_size_retention(tmp_path, topic_id):
    log = filled(tmp_path, topic_id, retention_bytes=2500)
    sizes = [s.size for s in log.segments]
    log.apply_retention(0)
    assert log.size_bytes <= 2500 + sizes[-1] or len(log.segments) == 1
    assert log.size_bytes + min(sizes) > 2500
    log.close()


def test_compact_policy_keeps_segments(tmp_path, topic_id):
    log = filled(tmp_path, topic_id, retention_ms=1, cleanup_policy="compact")
    n = len(log.segments)
    assert log.apply_retention(10**12) == 0 and len(log.segments) == n
    log.close()


def test_delete_records(tmp_path, topic_id):
    log = filled(tmp_path, topic_id)
    second = log.segments[1].base_offset
    assert log.delete_records_before(second + 1) == second + 1
    assert log.segments[0].base_offset == second  # the segment holding the start offset stays
    assert log.read(second + 1, 1).first_offset == second  # the batch holding it
    with pytest.raises(KafkaError):
        log.read(second, 1)
    assert log.delete_records_before(3) == second + 1  # never moves back
    with pytest.raises(KafkaError) as exc:
        log.delete_records_before(log.log_end_offset + 1)
    assert exc.value.code == ErrorCode.OFFSET_OUT_OF_RANGE
    assert log.delete_records_before(-1) == log.log_end_offset  # -1: up to the high watermark
    assert len(log.segments) == 1
    assert log.read(log.log_end_offset, 100).region is None
    assert log.offset_for_timestamp(0) is None
    log.close()


async def test_background_retention_task_and_persistence(tmp_path):
    d = str(tmp_path / "data")
    broker = {"log.segment.bytes": 1000, "log.retention.check.interval.ms": 20}
    m = LogManager([d], broker, node_id=1)
    m.load()
    m.create_topic("r", 1, {"retention.ms": 60_000})
    log = m.get_log("r", 0)
    for _ in range(40):
        append_v2(log, [1, 2])  # timestamps from 1970: far past retention
    assert len(log.segments) > 3
    task = m.start_retention()
    for _ in range(100):
        await asyncio.sleep(0.02)
        if len(log.segments) == 1:
            break
    assert len(log.segments) == 1 and log.log_start_offset == log.segments[0].base_offset
    assert not log.segments[0].flushed or log.recovery_point >= log.segments[0].base_offset
    start = log.log_start_offset
    await m.aclose()
    assert task.done()
    m = LogManager([d], broker, node_id=1)
    m.load()
    assert m.get_log("r", 0).log_start_offset == start
    m.close()
