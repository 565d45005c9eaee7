"""Formats: sizes, v2 header view and setters, records, legacy messages, mixed walks; kafka-python oracle."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.record import MemoryRecords, MemoryRecordsBuilder

from minibroker.records import (
    Compression,
    Record,
    TimestampType,
    build_records,
    framing,
    iter_batches,
    iter_records,
    legacy,
    v2,
)
from minibroker.records.varint import encode_varint, read_varint, size_of_varint, skip_varint

FORMATS = [(m, c) for m in (0, 1, 2) for c in Compression if not (c == Compression.ZSTD and m < 2)]


def test_sizes_from_the_contract():
    assert len(build_records(0, [(0, -1, b"key", b"value")])) == 34
    assert len(build_records(1, [(0, 1524709879130, b"key", b"value")])) == 42
    batch = v2.build_batch([(0, 1524709879130, b"key", b"value", ())], partition_leader_epoch=0)
    assert len(batch) == 76
    assert v2.BatchHeader(batch).crc == 2857248333  # the example line of kafka-dump-log in the issue


@settings(max_examples=60, deadline=None)
@given(st.integers(min_value=-(2**63), max_value=2**63 - 1))
def test_varint_round_trip(n):
    enc = encode_varint(n)
    assert len(enc) == size_of_varint(n) <= 10
    assert read_varint(enc + b"\xff", 0) == (n, len(enc))
    assert skip_varint(enc, 0) == len(enc)


def test_varint_known_bytes():
    assert encode_varint(0) == b"\x00" and encode_varint(-1) == b"\x01" and encode_varint(1) == b"\x02"
    assert encode_varint(300) == b"\xd8\x04"


def test_header_view_and_setters():
    batch = bytearray(
        v2.build_batch(
            [(0, 1000, b"k", b"v", ()), (1, 1005, None, b"w", (("h", b"1"),))],
            producer_id=7,
            producer_epoch=2,
            base_sequence=2**31 - 1,
        )
    )
    h = v2.BatchHeader(batch)
    assert (h.base_offset, h.last_offset_delta, h.record_count, h.magic) == (0, 1, 2, 2)
    assert (h.base_timestamp, h.max_timestamp, h.producer_id, h.producer_epoch) == (1000, 1005, 7, 2)
    assert h.last_sequence == 0  # wraps at int32 max, as Kafka's sequence arithmetic
    assert h.is_valid() and h.size == len(batch)
    crc = h.crc
    h.set_base_offset(500)
    h.set_partition_leader_epoch(9)
    assert h.crc == crc and h.is_valid() and h.last_offset == 501 and h.partition_leader_epoch == 9
    assert h.set_max_timestamp(TimestampType.CREATE_TIME, 1005) is False
    assert h.set_max_timestamp(TimestampType.LOG_APPEND_TIME, 9999) is True
    assert h.crc != crc and h.is_valid() and h.timestamp_type == TimestampType.LOG_APPEND_TIME
    assert [r.timestamp for r in v2.batch_records(batch)] == [9999, 9999]
    for name, off in [
        ("BASE_OFFSET_OFFSET", 0),
        ("LENGTH_OFFSET", 8),
        ("PARTITION_LEADER_EPOCH_OFFSET", 12),
        ("MAGIC_OFFSET", 16),
        ("CRC_OFFSET", 17),
        ("ATTRIBUTES_OFFSET", 21),
        ("LAST_OFFSET_DELTA_OFFSET", 23),
        ("BASE_TIMESTAMP_OFFSET", 27),
        ("MAX_TIMESTAMP_OFFSET", 35),
        ("PRODUCER_ID_OFFSET", 43),
        ("PRODUCER_EPOCH_OFFSET", 51),
        ("BASE_SEQUENCE_OFFSET", 53),
        ("RECORDS_COUNT_OFFSET", 57),
        ("RECORDS_OFFSET", 61),
    ]:
        assert getattr(v2, name) == off
    assert v2.HEADER.size == v2.HEADER_SIZE == framing.V2_HEADER_SIZE


keys = st.one_of(st.none(), st.binary(max_size=20))
headers = st.lists(st.tuples(st.text(max_size=5), st.one_of(st.none(), st.binary(max_size=5))), max_size=3)
rows = st.lists(st.tuples(st.integers(0, 2**40), keys, keys, headers), min_size=1, max_size=8)


def _rows(raw, magic, base=0):
    return [
        (base + i, ts if magic else -1, k, v, h if magic == 2 else ()) for i, (ts, k, v, h) in enumerate(raw)
    ]


@settings(max_examples=40, deadline=None)
@given(raw=rows, fmt=st.sampled_from(FORMATS), base=st.integers(0, 2**40))
def test_build_parse_round_trip_and_oracle(raw, fmt, base):
    magic, codec = fmt
    want = _rows(raw, magic, base)
    data = build_records(magic, want, compression=codec)
    got = list(iter_records(data))
    assert [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in got] == [
        (o, t, k, v, tuple(h)) for o, t, k, v, h in want
    ]
    assert all(b.is_valid for b in iter_batches(data))
    if magic == 0 and codec == Compression.LZ4:
        return  # kafka-python needs the xxhash package for magic-0 lz4
    oracle = []
    for batch in MemoryRecords(bytes(data)):
        if magic == 2:
            assert batch.validate_crc()
        oracle.extend((r.offset, r.timestamp if magic else -1, r.key, r.value) for r in batch)
    assert oracle == [(o, t, k, v) for o, t, k, v, _ in want]


@settings(max_examples=30, deadline=None)
@given(raw=rows, fmt=st.sampled_from([f for f in FORMATS if f != (0, Compression.LZ4)]))
def test_kafka_python_batches_parse(raw, fmt):
    magic, codec = fmt
    b = MemoryRecordsBuilder(magic, int(codec), 1 << 20)
    for ts, k, v, h in raw:
        b.append(timestamp=ts if magic else None, key=k, value=v, headers=h if magic == 2 else None)
    b.close()
    data = b.buffer()
    got = [(r.offset, r.key, r.value) for r in iter_records(data)]
    assert got == [(i, k, v) for i, (_, k, v, _) in enumerate(raw)]
    for batch in iter_batches(data):
        assert batch.is_valid


def test_mixed_magic_walk_stops_at_partial_tail():
    data = (
        build_records(0, [(0, -1, b"a", b"1")])
        + build_records(1, [(1, 5, b"b", b"2")], compression=1)
        + build_records(2, [(2, 6, b"c", b"3", ())], compression=3)
    )
    batches = list(iter_batches(data + data[:20]))
    assert [b.magic for b in batches] == [0, 1, 2]
    assert [r.key for r in iter_records(data + data[:20])] == [b"a", b"b", b"c"]
    assert [(e.magic, e.last_offset) for e in framing.scan_entries(data)] == [(0, 0), (1, 1), (2, 2)]


def test_legacy_v1_log_append_time_wrapper_and_setters():
    data = bytearray(
        legacy.build_message_set(
            1,
            [(0, 10, b"k", b"v"), (1, 20, b"k", b"w")],
            compression=1,
            timestamp_type=TimestampType.LOG_APPEND_TIME,
            log_append_time=77,
        )
    )
    recs = list(iter_records(data))
    assert [(r.offset, r.timestamp, r.timestamp_type) for r in recs] == [
        (0, 77, TimestampType.LOG_APPEND_TIME),
        (1, 77, TimestampType.LOG_APPEND_TIME),
    ]
    legacy.set_offset(data, 0, 41)
    assert legacy.set_timestamp(data, 0, TimestampType.CREATE_TIME, 20)
    assert [(r.offset, r.timestamp) for r in iter_records(data)] == [
        (40, 77),
        (41, 77),
    ]  # the builder stamped the inner messages too
    assert next(iter_batches(data)).is_valid


def test_record_type_names():
    assert (
        str(TimestampType.CREATE_TIME) == "CreateTime"
        and str(TimestampType.NO_TIMESTAMP_TYPE) == "NoTimestampType"
    )
    r = Record(1, 2, TimestampType.CREATE_TIME, None, b"v")
    assert r.headers == () and r.sequence == -1


def test_truncated_v2_records_are_format_errors():
    batch = bytearray(v2.build_batch([(0, 1, b"k", b"v", ())]))
    batch[v2.RECORDS_COUNT_OFFSET + 3] = 2
    with pytest.raises(v2.RecordFormatError):
        v2.scan_records(batch, 61, len(batch), 2)
    with pytest.raises(v2.RecordFormatError):
        v2.scan_records(batch, 61, len(batch) + 0, 0)
