"""down_convert for Fetch v0-v3."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.record import MemoryRecords

from minibroker.errors import ErrorCode, KafkaError
from minibroker.records import (
    Compression,
    TimestampType,
    build_end_txn_marker,
    build_records,
    down_convert,
    iter_batches,
    iter_records,
)
from minibroker.records.codecs import xxh32


def v2_batch(first, n, codec=0, **kw):
    return build_records(
        2, [(first + i, 1000 + i, b"k%d" % i, b"v", [("h", b"1")]) for i in range(n)], compression=codec, **kw
    )


@settings(max_examples=30, deadline=None)
@given(
    n=st.integers(1, 5),
    first=st.integers(0, 2**40),
    codec=st.sampled_from([Compression.NONE, Compression.GZIP, Compression.SNAPPY, Compression.LZ4]),
    to_magic=st.sampled_from([0, 1]),
)
def test_v2_down_converted_keeps_offsets_and_codec(n, first, codec, to_magic):
    out = down_convert(v2_batch(first, n, codec), to_magic)
    batches = list(iter_batches(out))
    assert {b.magic for b in batches} == {to_magic} and {b.compression for b in batches} == {codec}
    assert all(b.is_valid for b in batches)
    assert len(batches) == (n if codec == Compression.NONE else 1)
    recs = list(iter_records(out))
    assert [(r.offset, r.key, r.headers) for r in recs] == [(first + i, b"k%d" % i, ()) for i in range(n)]
    assert [r.timestamp for r in recs] == ([1000 + i for i in range(n)] if to_magic else [-1] * n)
    assert batches[-1].last_offset == first + n - 1  # a wrapper carries its last inner offset
    if not (to_magic == 0 and codec == Compression.LZ4):
        assert [(r.offset, r.key) for b in MemoryRecords(out) for r in b] == [(r.offset, r.key) for r in recs]


def test_lz4_magic0_output_has_kafka_3160_checksum():
    out = down_convert(v2_batch(0, 3, Compression.LZ4), 0)
    # v0 wrapper: offset 8, size 4, crc 4, magic 1, attributes 1, key length 4 (-1), value length 4, value
    value = out[26:]
    assert value[:4] == b"\x04\x22\x4d\x18"
    assert value[6] == (xxh32(value[0:6]) >> 8) & 0xFF  # checksum over magic + descriptor


def test_zstd_cannot_be_down_converted():
    with pytest.raises(KafkaError) as ei:
        down_convert(v2_batch(0, 2, Compression.ZSTD), 1)
    assert ei.value.code == ErrorCode.UNSUPPORTED_COMPRESSION_TYPE


def test_passthrough_control_dropped_first_offset_and_partial_tail():
    old = build_records(1, [(0, 5, b"a", b"x")])
    marker = build_end_txn_marker(
        commit=True, producer_id=1, producer_epoch=0, coordinator_epoch=0, timestamp=9, base_offset=4
    )
    data = old + v2_batch(1, 3) + marker
    out = down_convert(data + data[:20], 1, first_offset=2)
    assert out.startswith(old)
    assert [r.offset for r in iter_records(out)] == [0, 2, 3]
    assert down_convert(data, 2) == data


def test_log_append_time_batch_becomes_log_append_time_wrapper():
    data = v2_batch(0, 2, Compression.GZIP, timestamp_type=TimestampType.LOG_APPEND_TIME, log_append_time=777)
    (b,) = iter_batches(down_convert(data, 1))
    assert (b.timestamp_type, b.max_timestamp) == (TimestampType.LOG_APPEND_TIME, 777)
    assert {r.timestamp for r in iter_records(down_convert(data, 1))} == {777}


def test_v1_to_v0():
    data = build_records(1, [(i, 10, b"k", b"v") for i in range(3)], compression=Compression.SNAPPY)
    out = down_convert(data, 0)
    assert [b.magic for b in iter_batches(out)] == [0]
    assert [r.offset for r in iter_records(out)] == [0, 1, 2]
