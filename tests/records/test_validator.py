"""validate_and_assign: every path, every error code, property round trips, kafka-python as oracle."""

import struct

import crc32c
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.record import MemoryRecords, MemoryRecordsBuilder

from minibroker.errors import ErrorCode, KafkaError
from minibroker.records import (
    AppendConfig,
    AppendPath,
    Compression,
    TimestampType,
    build_end_txn_marker,
    build_records,
    iter_batches,
    iter_records,
    v2,
    validate_and_assign,
)

NOW = 1_700_000_000_000
CFG = AppendConfig()


def assign(data, *, next_offset=100, config=CFG, version=9, **kw):
    return validate_and_assign(
        data, next_offset=next_offset, now_ms=NOW, config=config, produce_version=version, **kw
    )


def rows(n, *, ts=NOW - 1000, magic=2, key=b"k"):
    return [
        (i, ts + i if magic else -1, key, b"value-%d" % i, [("h", b"x")] if magic == 2 else [])[:5]
        for i in range(n)
    ]


def error_of(fn):
    with pytest.raises(KafkaError) as ei:
        fn()
    return ei.value


def check_offsets(result, n, first=100):
    recs = list(iter_records(result.data))
    assert [r.offset for r in recs] == list(range(first, first + n))
    assert (result.first_offset, result.last_offset, result.record_count) == (first, first + n - 1, n)
    assert all(b.is_valid for b in iter_batches(result.data))
    return recs


# ---------------------------------------------------------------------------------------------- paths


def test_v2_uncompressed_in_place_patches_writable_buffer():
    buf = bytearray(build_records(2, rows(3)))
    crc_before = v2.BatchHeader(buf).crc
    r = assign(buf, leader_epoch=7)
    assert r.path == AppendPath.IN_PLACE == "in-place"
    assert isinstance(r.data, memoryview) and r.data.obj is buf  # no copy
    h = v2.BatchHeader(buf)
    assert (h.base_offset, h.partition_leader_epoch, h.crc) == (100, 7, crc_before)
    assert r.max_timestamp == NOW - 998 and r.offset_of_max_timestamp == 102 and r.log_append_time_ms == -1
    check_offsets(r, 3)
    e = r.entries[0]
    assert (e.position, e.size, e.base_offset, e.last_offset, e.record_count) == (0, len(buf), 100, 102, 3)


def test_v2_read_only_input_is_copied_not_modified():
    data = build_records(2, rows(2))
    r = assign(data)
    assert v2.BatchHeader(data).base_offset == 0 and v2.BatchHeader(r.data).base_offset == 100


@pytest.mark.parametrize("codec", list(Compression))
def test_v2_each_codec_in_place(codec):
    data = bytearray(build_records(2, rows(5), compression=codec))
    payload = bytes(data[61:])
    r = assign(data)
    assert r.path == AppendPath.IN_PLACE and r.source_compression == codec
    assert bytes(r.data[61:]) == payload  # compressed payload untouched
    recs = check_offsets(r, 5)
    assert recs[0].headers == (("h", b"x"),)
    oracle = [(rec.offset, rec.key) for b in MemoryRecords(bytes(r.data)) for rec in b]
    assert oracle == [(100 + i, b"k") for i in range(5)]


@pytest.mark.parametrize("codec", list(Compression))
def test_log_append_time(codec):
    cfg = AppendConfig(message_timestamp_type="LogAppendTime")
    r = assign(build_records(2, rows(3), compression=codec), config=cfg)
    h = v2.BatchHeader(r.data)
    assert h.timestamp_type == TimestampType.LOG_APPEND_TIME and h.max_timestamp == NOW and h.is_valid()
    assert r.log_append_time_ms == NOW and r.max_timestamp == NOW and r.offset_of_max_timestamp == 102
    assert {rec.timestamp for rec in check_offsets(r, 3)} == {NOW}
    for b in MemoryRecords(bytes(r.data)):
        assert b.validate_crc()


@pytest.mark.parametrize("magic", [0, 1])
def test_legacy_uncompressed_is_converted_to_v2(magic):
    r = assign(build_records(magic, rows(3, magic=magic)), version=2)
    assert r.path == AppendPath.CONVERTED
    assert [b.magic for b in iter_batches(r.data)] == [2]
    recs = check_offsets(r, 3)
    assert [x.timestamp for x in recs] == ([NOW - 1000, NOW - 999, NOW - 998] if magic else [-1, -1, -1])


@pytest.mark.parametrize("magic", [0, 1])
@pytest.mark.parametrize("codec", [Compression.GZIP, Compression.SNAPPY, Compression.LZ4])
def test_legacy_compressed_is_converted_to_v2_keeping_codec(magic, codec):
    r = assign(build_records(magic, rows(4, magic=magic), compression=codec), version=2)
    assert r.path == AppendPath.CONVERTED
    (b,) = iter_batches(r.data)
    assert (b.magic, b.compression) == (2, codec)
    check_offsets(r, 4)


@pytest.mark.parametrize("magic", [0, 1])
def test_legacy_uncompressed_same_magic_in_place(magic):
    cfg = AppendConfig(message_format_magic=magic)
    buf = bytearray(build_records(magic, rows(3, magic=magic)))
    r = assign(buf, config=cfg, version=2)
    assert r.path == AppendPath.IN_PLACE and r.data.obj is buf
    check_offsets(r, 3)
    assert len(r.batches) == 3 and r.batches[1].first_offset == 101 == r.batches[1].last_offset
    if magic == 1:
        assert (r.max_timestamp, r.offset_of_max_timestamp) == (NOW - 998, 102)


def test_v1_compressed_in_place_only_wrapper_changes():
    cfg = AppendConfig(message_format_magic=1)
    data = bytearray(build_records(1, rows(4, magic=1), compression=Compression.GZIP))
    value_before = bytes(data[34:])
    r = assign(data, config=cfg, version=2)
    assert r.path == AppendPath.IN_PLACE
    assert struct.unpack_from(">q", r.data, 0)[0] == 103  # wrapper = last inner offset
    assert bytes(r.data[34:]) == value_before
    check_offsets(r, 4)
    lat = assign(
        build_records(1, rows(2, magic=1), compression=1),
        config=AppendConfig(message_format_magic=1, message_timestamp_type="LogAppendTime"),
        version=2,
    )
    assert lat.path == AppendPath.IN_PLACE
    assert {x.timestamp for x in check_offsets(lat, 2)} == {NOW}


def test_v1_compressed_with_inner_gaps_is_recompressed():
    cfg = AppendConfig(message_format_magic=1)
    data = build_records(1, [(0, NOW, b"a", b"1"), (5, NOW, b"b", b"2")], compression=Compression.SNAPPY)
    r = assign(data, config=cfg, version=2)
    assert r.path == AppendPath.RECOMPRESSED
    check_offsets(r, 2)


def test_kafka_python_v1_wrapper_offset_zero_is_in_place():
    b = MemoryRecordsBuilder(1, 1, 1 << 16)
    for i in range(3):
        b.append(timestamp=NOW + i, key=b"k", value=b"v")
    b.close()
    r = assign(bytearray(b.buffer()), config=AppendConfig(message_format_magic=1), version=2)
    assert r.path == AppendPath.IN_PLACE
    check_offsets(r, 3)


@pytest.mark.parametrize("codec", [Compression.GZIP, Compression.LZ4])
def test_v0_compressed_recompressed_with_absolute_offsets(codec):
    cfg = AppendConfig(message_format_magic=0)
    r = assign(build_records(0, rows(3, magic=0), compression=codec), config=cfg, version=0)
    assert r.path == AppendPath.RECOMPRESSED
    assert struct.unpack_from(">q", r.data, 0)[0] == 102
    check_offsets(r, 3)


def test_topic_compression_differs_recompresses():
    r = assign(
        build_records(2, rows(3), compression=Compression.GZIP), config=AppendConfig(compression_type="zstd")
    )
    assert r.path == AppendPath.RECOMPRESSED and r.target_compression == Compression.ZSTD
    assert next(iter_batches(r.data)).compression == Compression.ZSTD
    check_offsets(r, 3)
    r = assign(build_records(2, rows(3)), config=AppendConfig(compression_type="lz4"))
    assert r.path == AppendPath.RECOMPRESSED and next(iter_batches(r.data)).compression == Compression.LZ4
    r = assign(build_records(2, rows(3), compression=1), config=AppendConfig(compression_type="uncompressed"))
    assert next(iter_batches(r.data)).compression == Compression.NONE
    check_offsets(r, 3)


def test_compressed_v2_with_nonzero_base_offset_is_rebuilt():
    data = build_records(2, [(50 + o, t, k, v, h) for o, t, k, v, h in rows(3)], compression=Compression.GZIP)
    assert v2.BatchHeader(data).base_offset == 50
    r = assign(data)
    assert r.path == AppendPath.RECOMPRESSED
    check_offsets(r, 3)


def test_producer_facts():
    data = build_records(
        2, rows(4), producer_id=42, producer_epoch=3, base_sequence=10, is_transactional=True
    )
    r = assign(data)
    (f,) = r.batches
    assert (f.producer_id, f.producer_epoch, f.base_sequence, f.last_sequence) == (42, 3, 10, 13)
    assert (f.first_offset, f.last_offset, f.is_transactional, f.record_count) == (100, 103, True, 4)


def test_control_batch_from_coordinator_in_place_even_with_topic_codec():
    marker = build_end_txn_marker(
        commit=True, producer_id=1, producer_epoch=0, coordinator_epoch=0, timestamp=NOW
    )
    r = assign(marker, is_from_client=False, config=AppendConfig(compression_type="gzip"))
    assert r.path == AppendPath.IN_PLACE and r.batches[0].is_control


def test_empty_v2_produce():
    assert assign(b"", version=2).path == AppendPath.EMPTY


def test_trailing_partial_entry_is_trimmed_like_kafka():
    data = build_records(2, rows(2))
    r = assign(data + data[:30])
    assert r.trimmed_bytes == 30 and len(r.data) == len(data)


@pytest.mark.parametrize(
    "cfg", [CFG, AppendConfig(compacted=True), AppendConfig(timestamp_after_max_ms=10**9)]
)
def test_records_are_walked_and_a_wrong_max_timestamp_corrected(cfg):
    r = assign(build_records(2, rows(3)), config=cfg)
    assert r.path == AppendPath.IN_PLACE
    # a producer's wrong maxTimestamp is corrected (and the CRC with it), as Kafka does
    bad = bytearray(build_records(2, rows(3)))
    struct.pack_into(">q", bad, v2.MAX_TIMESTAMP_OFFSET, 5)
    v2.BatchHeader(bad).update_crc()
    untouched = bytes(bad)
    r = assign(bad, config=cfg)
    assert v2.BatchHeader(r.data).max_timestamp == NOW - 998 and v2.BatchHeader(r.data).is_valid()
    assert r.max_timestamp == r.batches[0].max_timestamp == r.entries[0].max_timestamp == NOW - 998
    # unless the walk is switched off (not Kafka's behaviour): then the producer's header stands
    r = assign(bytearray(untouched), config=AppendConfig(skip_record_walk=True))
    assert v2.BatchHeader(r.data).max_timestamp == 5 and r.max_timestamp == 5


# ---------------------------------------------------------------------------------------------- errors


def code_of(data, **kw):
    return error_of(lambda: assign(data, **kw)).code


def corrupt_crc(data):
    data = bytearray(data)
    data[-1] ^= 0xFF
    return data


def recrc(buf):
    v2.BatchHeader(buf).update_crc()
    return buf


def test_produce_version_rules():
    legacy1 = build_records(1, rows(1, magic=1))
    assert code_of(legacy1, version=3) == ErrorCode.INVALID_RECORD
    assert (
        code_of(build_records(2, rows(1), compression=Compression.ZSTD), version=6)
        == ErrorCode.UNSUPPORTED_COMPRESSION_TYPE
    )
    assign(build_records(2, rows(1), compression=Compression.ZSTD), version=7)
    two = build_records(2, rows(1)) + build_records(2, rows(1))
    assert code_of(two, version=3) == ErrorCode.INVALID_RECORD
    assert code_of(two, version=2) == ErrorCode.INVALID_RECORD  # v2 batches: one per partition anyway
    assert code_of(b"", version=3) == ErrorCode.INVALID_RECORD


def test_corruption_codes():
    assert code_of(corrupt_crc(build_records(2, rows(2)))) == ErrorCode.CORRUPT_MESSAGE
    assert code_of(corrupt_crc(build_records(1, rows(2, magic=1))), version=2) == ErrorCode.CORRUPT_MESSAGE
    assert code_of(struct.pack(">qi", 0, 5) + b"\0" * 5) == ErrorCode.CORRUPT_MESSAGE
    bad_magic = bytearray(build_records(2, rows(1)))
    bad_magic[16] = 3
    assert code_of(bad_magic) == ErrorCode.CORRUPT_MESSAGE
    codec7 = bytearray(build_records(2, rows(1)))
    codec7[22] |= 7
    assert code_of(recrc(codec7)) == ErrorCode.CORRUPT_MESSAGE
    garbage = bytearray(build_records(2, rows(3), compression=Compression.GZIP))
    garbage[70:80] = b"\xaa" * 10
    assert code_of(recrc(garbage)) == ErrorCode.CORRUPT_MESSAGE


def test_bad_inner_crc_in_legacy_wrapper_is_corrupt():
    from minibroker.records import compress, legacy

    inner = bytearray(legacy.build_message_set(1, [(0, NOW, b"k", b"v"), (1, NOW, b"k", b"w")]))
    inner[-1] ^= 1
    wrapper = legacy.encode_message(1, 1, NOW, None, compress(Compression.GZIP, inner), 1)
    assert code_of(wrapper, version=2) == ErrorCode.CORRUPT_MESSAGE


def test_size_limits():
    big = build_records(2, [(0, NOW, b"k", b"x" * 2000, ())])
    assert code_of(big, config=AppendConfig(max_message_bytes=1000)) == ErrorCode.MESSAGE_TOO_LARGE
    assert code_of(big, config=AppendConfig(segment_bytes=1000)) == ErrorCode.RECORD_LIST_TOO_LARGE
    bomb = build_records(2, [(0, NOW, b"k", b"\0" * 100_000, ())], compression=Compression.ZSTD)
    assert (
        code_of(bomb, config=AppendConfig(max_decompressed_bytes=50_000)) == ErrorCode.RECORD_LIST_TOO_LARGE
    )
    # recompression that makes a batch grow beyond the limit is caught after the rebuild too
    small = build_records(2, [(i, NOW, b"k", b"\0" * 500, ()) for i in range(10)], compression=1)
    cfg = AppendConfig(compression_type="uncompressed", max_message_bytes=len(small) + 10)
    assert code_of(small, config=cfg) == ErrorCode.MESSAGE_TOO_LARGE


def test_count_and_offset_consistency():
    data = bytearray(build_records(2, rows(3)))
    struct.pack_into(">i", data, v2.RECORDS_COUNT_OFFSET, 2)
    assert code_of(recrc(data)) == ErrorCode.INVALID_RECORD  # lastOffsetDelta 2 vs count 2
    struct.pack_into(">i", data, v2.LAST_OFFSET_DELTA_OFFSET, 1)
    # header self-consistent but lies about the records: the walk sees it (Kafka: "records still remaining")
    err = error_of(lambda: assign(recrc(data)))
    assert err.code == ErrorCode.INVALID_RECORD and "still remaining" in err.message
    assert "record_errors" not in err.details  # a structural error: Kafka sends no record_errors for it
    # only with the walk switched off (not Kafka's behaviour) does the header's word stand
    unwalked = assign(recrc(bytearray(data)), config=AppendConfig(skip_record_walk=True))
    assert unwalked.path == AppendPath.IN_PLACE
    data2 = bytearray(build_records(2, rows(3), compression=Compression.LZ4))
    struct.pack_into(">i", data2, v2.RECORDS_COUNT_OFFSET, 2)
    struct.pack_into(">i", data2, v2.LAST_OFFSET_DELTA_OFFSET, 1)
    assert code_of(recrc(data2)) == ErrorCode.INVALID_RECORD  # compressed: always walked
    absurd = bytearray(build_records(2, rows(1)))
    struct.pack_into(">i", absurd, v2.RECORDS_COUNT_OFFSET, 1000)
    struct.pack_into(">i", absurd, v2.LAST_OFFSET_DELTA_OFFSET, 999)
    assert code_of(recrc(absurd)) == ErrorCode.INVALID_RECORD  # cannot fit: caught without a walk
    zero = bytearray(build_records(2, rows(1)))
    struct.pack_into(">i", zero, v2.RECORDS_COUNT_OFFSET, 0)
    struct.pack_into(">i", zero, v2.LAST_OFFSET_DELTA_OFFSET, -1)
    assert code_of(recrc(zero)) == ErrorCode.INVALID_RECORD


def test_control_and_sequence_rules():
    marker = build_end_txn_marker(
        commit=False, producer_id=1, producer_epoch=0, coordinator_epoch=0, timestamp=NOW
    )
    assert code_of(marker) == ErrorCode.INVALID_RECORD
    no_seq = build_records(2, rows(1), producer_id=5, producer_epoch=0, base_sequence=-1)
    assert code_of(no_seq) == ErrorCode.INVALID_RECORD
    idem = build_records(2, rows(1), producer_id=5, producer_epoch=0, base_sequence=0)
    assert (
        code_of(idem, config=AppendConfig(message_format_magic=1)) == ErrorCode.UNSUPPORTED_FOR_MESSAGE_FORMAT
    )
    txn = build_records(2, rows(1), is_transactional=True)
    assert (
        code_of(txn, config=AppendConfig(message_format_magic=1)) == ErrorCode.UNSUPPORTED_FOR_MESSAGE_FORMAT
    )


def test_mixed_magic_is_invalid():
    data = build_records(0, rows(1, magic=0)) + build_records(1, rows(1, magic=1))
    assert code_of(data, version=2) == ErrorCode.INVALID_RECORD


@pytest.mark.parametrize("codec", [Compression.NONE, Compression.GZIP])
def test_timestamp_bounds_report_record_errors(codec):
    cfg = AppendConfig(timestamp_before_max_ms=60_000, timestamp_after_max_ms=1000)
    data = build_records(
        2,
        [(0, NOW, b"k", b"v", ()), (1, NOW - 120_000, b"k", b"v", ()), (2, NOW + 5000, b"k", b"v", ())],
        compression=codec,
    )
    err = error_of(lambda: assign(data, config=cfg))
    assert err.code == ErrorCode.INVALID_TIMESTAMP
    assert [i for i, _ in err.details["record_errors"]] == [1, 2]
    assign(build_records(2, rows(3, ts=NOW - 100), compression=codec), config=cfg)
    legacy_err = error_of(
        lambda: assign(build_records(1, [(0, NOW - 120_000, b"k", b"v")]), config=cfg, version=2)
    )
    assert legacy_err.code == ErrorCode.INVALID_TIMESTAMP


@pytest.mark.parametrize("magic,codec", [(2, 0), (2, 1), (1, 0), (1, 2), (0, 3)])
def test_compacted_topic_rejects_null_keys(magic, codec):
    data = build_records(magic, [(0, NOW, b"k", b"v"), (1, NOW, None, b"v")], compression=codec)
    err = error_of(lambda: assign(data, config=AppendConfig(compacted=True), version=2 if magic < 2 else 9))
    assert err.code == ErrorCode.INVALID_RECORD
    assert err.details["record_errors"][0][0] == (1 if (magic == 2 or codec) else 0)


def test_producer_set_log_append_time_is_rejected_on_log_append_time_topic():
    data = build_records(2, rows(2), timestamp_type=TimestampType.LOG_APPEND_TIME, log_append_time=NOW)
    err = error_of(lambda: assign(data, config=AppendConfig(message_timestamp_type="LogAppendTime")))
    assert err.code == ErrorCode.INVALID_TIMESTAMP and len(err.details["record_errors"]) == 2
    assign(data)  # CreateTime topic: only range-checked, and the type bit is cleared
    r = assign(bytearray(data))
    assert (
        v2.BatchHeader(r.data).timestamp_type == TimestampType.CREATE_TIME
        and v2.BatchHeader(r.data).is_valid()
    )


# ---------------------------------------------------------------------------------------------- properties

FORMATS = [(m, c) for m in (0, 1, 2) for c in Compression if not (c == Compression.ZSTD and m < 2)]
keys = st.one_of(st.none(), st.binary(max_size=12))
raw_rows = st.lists(st.tuples(st.integers(NOW - 10**6, NOW), keys, keys), min_size=1, max_size=6)


@settings(max_examples=60, deadline=None)
@given(
    raw=raw_rows,
    fmt=st.sampled_from(FORMATS),
    target_magic=st.sampled_from([0, 1, 2, 2, 2]),
    topic_codec=st.sampled_from(["producer", "producer", "uncompressed", "gzip", "lz4", "snappy"]),
    ts_type=st.sampled_from(["CreateTime", "LogAppendTime"]),
    next_offset=st.integers(0, 2**40),
    writable=st.booleans(),
)
def test_build_assign_parse_assign_again(raw, fmt, target_magic, topic_codec, ts_type, next_offset, writable):
    magic, codec = fmt
    if codec == Compression.ZSTD and target_magic < 2 and topic_codec == "producer":
        with pytest.raises(KafkaError) as ei:
            validate_and_assign(
                build_records(2, [(0, NOW, b"k", b"v")], compression=codec),
                next_offset=0,
                now_ms=NOW,
                config=AppendConfig(message_format_magic=target_magic),
                produce_version=9,
            )
        assert ei.value.code == ErrorCode.UNSUPPORTED_COMPRESSION_TYPE
        return
    records = [(i, ts if magic else -1, k, v) for i, (ts, k, v) in enumerate(raw)]
    data = build_records(magic, records, compression=codec)
    cfg = AppendConfig(
        message_format_magic=target_magic, compression_type=topic_codec, message_timestamp_type=ts_type
    )
    version = 9 if magic == 2 else 2
    r = validate_and_assign(
        bytearray(data) if writable else data,
        next_offset=next_offset,
        now_ms=NOW,
        config=cfg,
        produce_version=version,
    )
    got = check_offsets(r, len(raw), first=next_offset)
    assert [(x.key, x.value) for x in got] == [(k, v) for _, _, k, v in records]
    batches = list(iter_batches(r.data))
    assert {b.magic for b in batches} == {target_magic}
    if target_magic and ts_type == "LogAppendTime":
        assert {x.timestamp for x in got} == {NOW}
    elif target_magic and magic:
        assert [x.timestamp for x in got] == [ts for _, ts, _, _ in records]
    assert [(e.position, e.size) for e in r.entries] == [(b.position, b.size) for b in batches]
    if not (target_magic == 0 and any(b.compression == Compression.LZ4 for b in batches)):
        oracle = [(x.offset, x.key, x.value) for b in MemoryRecords(bytes(r.data)) for x in b]
        assert oracle == [(x.offset, x.key, x.value) for x in got]
    # what we stored is acceptable input again (e.g. for a replay), with the same records
    # (a LogAppendTime-stamped batch is only acceptable again on a CreateTime topic, as in Kafka)
    cfg = AppendConfig(message_format_magic=target_magic, compression_type=topic_codec)
    again = validate_and_assign(
        bytes(r.data),
        next_offset=next_offset + 1000,
        now_ms=NOW,
        config=cfg,
        produce_version=9 if target_magic == 2 else 2,
        is_from_client=False,
    )
    assert [(x.key, x.value) for x in iter_records(again.data)] == [(x.key, x.value) for x in got]
    assert again.first_offset == next_offset + 1000


@settings(max_examples=30, deadline=None)
@given(raw=raw_rows, codec=st.sampled_from([0, 1, 2, 3, 4]), pid=st.sampled_from([-1, 77]))
def test_kafka_python_producer_batches(raw, codec, pid):
    b = MemoryRecordsBuilder(
        2,
        codec,
        1 << 20,
        producer_id=pid,
        producer_epoch=0 if pid > 0 else -1,
        base_sequence=5 if pid > 0 else -1,
    )
    for ts, k, v in raw:
        b.append(timestamp=ts, key=k, value=v)
    b.close()
    r = assign(bytearray(b.buffer()))
    assert r.path == AppendPath.IN_PLACE
    check_offsets(r, len(raw))
    assert r.batches[0].producer_id == pid
    for batch in MemoryRecords(bytes(r.data)):
        assert batch.validate_crc() and batch.base_offset == 100
    stored = bytes(r.data)
    assert crc32c.crc32c(stored[21:]) == struct.unpack_from(">I", stored, 17)[0]
