"""Issue 14, items 3 and 4: malformed records from hostile or broken clients.

- ``v2.walk_records`` (the structure-only walk, on by default for uncompressed v2 as in Kafka) agrees
  with the exact record reader on every input, valid or mutated, and never raises anything but
  ``RecordFormatError``;
- every kind of damage inside a batch, uncompressed or compressed with each codec, gets Kafka's code
  (INVALID_RECORD, CORRUPT_MESSAGE, INVALID_TIMESTAMP with record_errors) and leaves the input
  untouched;
- ``validate_and_assign`` raises nothing but ``KafkaError`` for any mutation of a valid input, and
  never through its last-resort mapping (every damage has its own check); that mapping itself turns a
  bug into INVALID_RECORD with the exception attached.
"""

from __future__ import annotations

import struct

import crc32c
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from kafka.record import MemoryRecords, MemoryRecordsBuilder

from minibroker.errors import ErrorCode, KafkaError
from minibroker.records import (
    AppendConfig,
    AppendPath,
    Compression,
    build_records,
    compress,
    iter_records,
    v2,
    validate_and_assign,
)
from minibroker.records import validator as validator_module
from minibroker.records.varint import encode_varint

NOW = 1_700_000_000_000
MAX_LONG = 2**63 - 1
CODECS = list(Compression)  # none, gzip, snappy, lz4, zstd


def raw_batch(
    section: bytes, count: int, *, codec=Compression.NONE, base_ts=NOW, max_ts=None, last_delta=None
):
    """A v2 batch around a hand-made records section, with a correct CRC (what a buggy producer sends)."""
    payload = compress(codec, section) if codec != Compression.NONE else section
    buf = bytearray(v2.HEADER_SIZE + len(payload))
    v2.HEADER.pack_into(
        buf,
        0,
        0,
        len(buf) - 12,
        -1,
        2,
        0,
        int(codec),
        count - 1 if last_delta is None else last_delta,
        base_ts,
        base_ts if max_ts is None else max_ts,
        -1,
        -1,
        -1,
        count,
    )
    buf[v2.HEADER_SIZE :] = payload
    struct.pack_into(">I", buf, v2.CRC_OFFSET, crc32c.crc32c(bytes(buf[v2.ATTRIBUTES_OFFSET :])))
    return bytes(buf)


def record(body: bytes) -> bytes:
    """A record from its body bytes (attributes onwards), with the length varint in front."""
    return encode_varint(len(body)) + body


def good(i: int, ts_delta: int = 0) -> bytes:
    return v2.encode_record(i, ts_delta, b"k%d" % i, b"value-%d" % i)


def assign(data, config=None, version=9):
    config = AppendConfig() if config is None else config
    return validate_and_assign(data, next_offset=10, now_ms=NOW, config=config, produce_version=version)


def error_of(data, **kw) -> KafkaError:
    with pytest.raises(KafkaError) as ei:
        assign(data, **kw)
    assert "unexpected" not in ei.value.details, ei.value.details["unexpected"]
    return ei.value


# ---------------------------------------------------------------------------------------------- damage

# (name, records section, count, base timestamp, expected code, record_errors expected)
DAMAGE = [
    # an 11-byte timestamp delta: Java's readVarlong stops at 10 ("Found invalid record structure")
    (
        "varint longer than 10 bytes",
        good(0) + record(b"\x00" + b"\xff" * 10 + b"\x01\x02\x01\x01\x00"),
        2,
        NOW,
        ErrorCode.INVALID_RECORD,
        False,
    ),
    # an int32 varint (the offset delta) of 6 bytes: Java's readVarint stops at 5
    (
        "varint longer than 5 bytes",
        good(0) + record(b"\x00\x00" + b"\x82\x80\x80\x80\x80\x00\x01\x01\x00"),
        2,
        NOW,
        ErrorCode.INVALID_RECORD,
        False,
    ),
    # a key length whose 5-byte varint does not fit 32 bits (Java would silently drop the high bits)
    (
        "varint beyond 32 bits",
        good(0) + record(b"\x00\x00\x02\x80\x80\x80\x80\x70\x01\x00"),
        2,
        NOW,
        ErrorCode.INVALID_RECORD,
        False,
    ),
    # the record length itself too long a varint
    ("record length varint too long", good(0) + b"\xff" * 6, 2, NOW, ErrorCode.INVALID_RECORD, False),
    # base timestamp + delta overflows int64: Java wraps it; we refuse it per record
    (
        "timestamp overflow",
        good(0) + good(1, 100) + good(2),
        3,
        MAX_LONG - 50,
        ErrorCode.INVALID_TIMESTAMP,
        True,
    ),
    ("timestamp underflow", good(0) + good(1, -100), 2, -(2**63) + 50, ErrorCode.INVALID_TIMESTAMP, True),
    # the header says one record more than there are
    ("record count too high", good(0) + good(1), 3, NOW, ErrorCode.INVALID_RECORD, False),
    ("record count too low", good(0) + good(1) + good(2), 2, NOW, ErrorCode.INVALID_RECORD, False),
    # the last record's key length runs past the end of the batch
    (
        "key length past the end",
        good(0) + record(b"\x00\x00\x02" + encode_varint(100) + b"abc"),
        2,
        NOW,
        ErrorCode.INVALID_RECORD,
        False,
    ),
    # a record's declared length runs past the end
    (
        "record length past the end",
        good(0) + encode_varint(500) + good(1)[1:],
        2,
        NOW,
        ErrorCode.INVALID_RECORD,
        False,
    ),
    # a record's fields do not fill its declared length exactly
    (
        "record length too long for its fields",
        good(0) + encode_varint(len(good(1))) + good(1)[1:] + b"\x00",
        2,
        NOW,
        ErrorCode.INVALID_RECORD,
        False,
    ),
    (
        "negative header count",
        good(0) + record(b"\x00\x00\x02\x01\x01\x03"),
        2,
        NOW,
        ErrorCode.INVALID_RECORD,
        False,
    ),
    (
        "header count past the end",
        good(0) + record(b"\x00\x00\x02\x01\x01" + encode_varint(10**9)),
        2,
        NOW,
        ErrorCode.INVALID_RECORD,
        False,
    ),
    (
        "null header key",
        good(0) + record(b"\x00\x00\x02\x01\x01\x02\x01\x01"),
        2,
        NOW,
        ErrorCode.INVALID_RECORD,
        False,
    ),
    ("section ends inside a varint", good(0) + b"\x80", 2, NOW, ErrorCode.INVALID_RECORD, False),
]


@pytest.mark.parametrize("codec", CODECS, ids=str)
@pytest.mark.parametrize("name,section,count,base_ts,code,per_record", DAMAGE, ids=[d[0] for d in DAMAGE])
def test_damage_inside_a_batch_gets_kafkas_code_and_leaves_the_input_untouched(
    codec, name, section, count, base_ts, code, per_record
):
    data = bytearray(raw_batch(section, count, codec=codec, base_ts=base_ts))
    before = bytes(data)
    for config in (AppendConfig(), AppendConfig(compacted=True), AppendConfig(timestamp_after_max_ms=10**12)):
        err = error_of(data, config=config)
        assert err.code == code, (name, err)
        if per_record:
            # (with a finite bound every record of a batch so far in the future or past is refused)
            assert [i for i, _ in err.details["record_errors"]] == (
                [1] if config.timestamp_after_max_ms > 10**12 else [0, 1, 2][:count]
            )
            assert "out of range" in err.details["record_errors"][0][1]
        else:
            assert "record_errors" not in err.details  # structural errors: Kafka sends none either
        assert bytes(data) == before  # nothing patched: checks come before any write


def test_the_walk_can_be_switched_off_for_uncompressed_batches_only():
    bad = raw_batch(good(0) + record(b"\x00" + b"\xff" * 10 + b"\x01\x02\x01\x01\x00"), 2)
    off = AppendConfig(skip_record_walk=True)
    assert assign(bad, config=off).path == AppendPath.IN_PLACE  # the documented deviation from Kafka
    assert error_of(bad).code == ErrorCode.INVALID_RECORD
    for codec in CODECS[1:]:  # compressed batches are decompressed and walked whatever the switch
        compressed = raw_batch(
            good(0) + record(b"\x00" + b"\xff" * 10 + b"\x01\x02\x01\x01\x00"), 2, codec=codec
        )
        assert error_of(compressed, config=off).code == ErrorCode.INVALID_RECORD


@pytest.mark.parametrize("codec", CODECS[1:], ids=str)
def test_undecodable_compressed_payload_is_corrupt_message(codec):
    data = bytearray(raw_batch(good(0) + good(1), 2, codec=codec))
    size = len(data) - v2.HEADER_SIZE
    data[v2.HEADER_SIZE :] = (b"\x00\xff" * size)[:size]
    struct.pack_into(">I", data, v2.CRC_OFFSET, crc32c.crc32c(bytes(data[v2.ATTRIBUTES_OFFSET :])))
    assert error_of(bytes(data)).code == ErrorCode.CORRUPT_MESSAGE
    truncated = bytearray(raw_batch(good(0) + good(1), 2, codec=codec))[:-3]
    struct.pack_into(">i", truncated, v2.LENGTH_OFFSET, len(truncated) - 12)
    struct.pack_into(">I", truncated, v2.CRC_OFFSET, crc32c.crc32c(bytes(truncated[v2.ATTRIBUTES_OFFSET :])))
    assert error_of(bytes(truncated)).code in (ErrorCode.CORRUPT_MESSAGE, ErrorCode.INVALID_RECORD)


def test_what_kafka_accepts_is_accepted():
    # any negative key/value length is a null (Java's readFrom), any attributes byte (unused in v2)
    section = record(b"\x00\x00\x00\x05\x02v\x00") + record(b"\xff\x00\x02\x01\x09\x00")
    r = assign(raw_batch(section, 2))
    assert [(x.key, x.value) for x in iter_records(r.data)] == [(None, b"v"), (None, None)]
    # offset deltas of an uncompressed batch are not checked (Kafka assigns by count, keeps the deltas)
    r = assign(raw_batch(good(0) + good(0), 2))
    assert (r.first_offset, r.last_offset) == (10, 11)
    # negative timestamps are not refused (Kafka's producers refuse them; its broker does not)
    r = assign(raw_batch(good(0, 0) + good(1, -5), 2, base_ts=3))
    assert r.max_timestamp == 3


def test_a_wrong_max_timestamp_from_the_producer_is_corrected_for_each_codec():
    for codec in CODECS:
        data = raw_batch(good(0, 0) + good(1, 70) + good(2, 5), 3, codec=codec, max_ts=NOW + 1)
        r = assign(bytearray(data))
        assert r.max_timestamp == NOW + 70 == v2.BatchHeader(r.data).max_timestamp
        assert v2.BatchHeader(r.data).is_valid()
        assert [b.validate_crc() for b in MemoryRecords(bytes(r.data))] == [True]


def test_timestamp_errors_name_each_record_and_win_over_nothing_else():
    section = good(0) + good(1, 10) + good(2, 20)
    err = error_of(raw_batch(section, 3, base_ts=MAX_LONG - 15))
    assert err.code == ErrorCode.INVALID_TIMESTAMP
    assert [i for i, _ in err.details["record_errors"]] == [2]
    # on a compacted topic a null key is reported too, per record, and the timestamp code wins (Kafka)
    section = good(0) + v2.encode_record(1, 0, None, b"v") + good(2, 20)
    err = error_of(raw_batch(section, 3, base_ts=MAX_LONG - 15), config=AppendConfig(compacted=True))
    assert err.code == ErrorCode.INVALID_TIMESTAMP
    assert [i for i, _ in err.details["record_errors"]] == [1, 2]
    # a LogAppendTime topic stamps its own time: the producer's timestamps do not matter there
    r = assign(
        raw_batch(good(0) + good(1, 100), 2, base_ts=MAX_LONG - 50),
        config=AppendConfig(message_timestamp_type="LogAppendTime"),
    )
    assert r.max_timestamp == NOW


def test_a_bug_becomes_invalid_record_with_the_exception_attached(monkeypatch):
    boom = ZeroDivisionError("a bug")

    def broken(*args, **kwargs):
        raise boom

    monkeypatch.setattr(validator_module, "_validate_and_assign", broken)
    with pytest.raises(KafkaError) as ei:
        assign(raw_batch(good(0), 1))
    assert ei.value.code == ErrorCode.INVALID_RECORD and ei.value.details["unexpected"] is boom
    assert "ZeroDivisionError: a bug" in ei.value.message


# ---------------------------------------------------------------------------------------------- the walk


def walk_or_error(buf, start, end, count):
    try:
        return v2.walk_records(buf, start, end, count)
    except v2.RecordFormatError as e:
        return ("error", str(e))


def scan_or_error(buf, start, end, count):
    """What walk_records must say, from the exact reader."""
    try:
        scan = v2.scan_records(buf, start, end, count)
    except v2.RecordFormatError as e:
        return ("error", str(e))
    if count <= 0:
        return (0, 0, 0, True)
    return (
        min(scan.timestamp_deltas),
        max(scan.timestamp_deltas),
        len(scan.null_key_indexes),
        scan.offset_deltas == list(range(count)),
    )


lengths = st.sampled_from([0, 1, 3, 62, 63, 64, 100, 8191, 8192, 9000])
fields = st.one_of(st.none(), lengths.map(lambda n: b"x" * n))
deltas = st.one_of(st.integers(-70, 70), st.integers(-(2**21), 2**21), st.integers(-(2**63) + 1, 2**63 - 1))
headers = st.lists(st.tuples(st.sampled_from(["", "h", "ключ"]), fields), max_size=2)
rows_strategy = st.lists(st.tuples(st.booleans(), deltas, fields, fields, headers), min_size=1, max_size=40)


def section_of(rows) -> tuple[bytes, int]:
    parts = []
    for i, (in_order, ts_delta, key, value, hdrs) in enumerate(rows):
        parts.append(v2.encode_record(i if in_order else i + 7, ts_delta, key, value, hdrs))
    return b"".join(parts), len(rows)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rows=rows_strategy)
@pytest.mark.slow
def test_walk_of_a_valid_section_is_exact(rows):
    section, count = section_of(rows)
    got = v2.walk_records(memoryview(section), 0, len(section), count)
    ts = [r[1] for r in rows]
    nulls = sum(1 for r in rows if r[2] is None)
    assert got == (min(ts), max(ts), nulls, all(r[0] for r in rows))
    assert got == scan_or_error(section, 0, len(section), count)
    # inside a bigger buffer (a batch with a header, a trailing partial entry) it reads only its part
    padded = b"\x05" * 61 + section + b"\xff" * 20
    assert v2.walk_records(padded, 61, 61 + len(section), count) == got


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    rows=rows_strategy,
    edits=st.lists(
        st.tuples(st.integers(0, 10**6), st.sampled_from([0, 1, 0x7F, 0x80, 0xFF, 0x0E])), max_size=4
    ),
    cut=st.one_of(st.none(), st.integers(0, 10**6)),
    count_change=st.sampled_from([0, 0, 0, -1, 1]),
)
@pytest.mark.slow
def test_walk_of_a_mutated_section_agrees_with_the_exact_reader(rows, edits, cut, count_change):
    section, count = section_of(rows)
    data = bytearray(section)
    for pos, value in edits:
        data[pos % len(data)] = value
    if cut is not None:
        data = data[: cut % (len(data) + 1)]
    count += count_change
    # walk_records must raise nothing but RecordFormatError, and say what the exact reader says
    expected = scan_or_error(data, 0, len(data), count)
    assert walk_or_error(memoryview(data), 0, len(data), count) == expected
    # also when the buffer goes on past the section (a batch followed by more bytes): never read as records
    padded = bytes(data) + bytes(section[: len(section) // 2]) + b"\x00" * 16
    assert walk_or_error(memoryview(padded), 0, len(data), count) == expected


def test_walk_names_the_record_that_runs_past_the_section_when_the_buffer_goes_on():
    section = b"".join(v2.encode_record(i, 0, b"k", b"v" * 70) for i in range(3))
    end = len(section) - 5  # the last record runs 5 bytes past the end; the buffer goes on
    buf = section + b"\x00" * 50
    for count in (3, 4):  # 4: the walk reads on past the end before it finds out
        with pytest.raises(v2.RecordFormatError) as walked:
            v2.walk_records(buf, 0, end, count)
        with pytest.raises(v2.RecordFormatError) as scanned:
            v2.scan_records(buf, 0, end, count)
        assert str(walked.value) == str(scanned.value) and "(record 2)" in str(walked.value)


def test_walk_refuses_huge_declared_counts_quickly():
    section = good(0) + record(b"\x00\x00\x02\x01\x01" + encode_varint(2**31 - 1))
    with pytest.raises(v2.RecordFormatError, match="number of record headers"):
        v2.walk_records(section, 0, len(section), 2)
    with pytest.raises(v2.RecordFormatError, match="premature EOF"):
        v2.walk_records(good(0) + good(1), 0, len(good(0) + good(1)), 2**31 - 1)


# ---------------------------------------------------------------------------------------------- no escape

FORMATS = [(m, c) for m in (0, 1, 2) for c in CODECS if not (c == Compression.ZSTD and m < 2)]
CONFIGS = [
    AppendConfig(),
    AppendConfig(compacted=True),
    AppendConfig(message_timestamp_type="LogAppendTime"),
    AppendConfig(timestamp_before_max_ms=10**6, timestamp_after_max_ms=10**6),
    AppendConfig(compression_type="gzip"),
    AppendConfig(compression_type="uncompressed"),
    AppendConfig(message_format_magic=1),
    AppendConfig(message_format_magic=0),
    AppendConfig(skip_record_walk=True),
]


def recrc(buf: bytearray, magic: int) -> None:
    import zlib

    if magic == 2 and len(buf) >= v2.HEADER_SIZE:
        struct.pack_into(">I", buf, v2.CRC_OFFSET, crc32c.crc32c(bytes(buf[v2.ATTRIBUTES_OFFSET :])))
    elif magic < 2 and len(buf) >= 26:
        struct.pack_into(">I", buf, 12, zlib.crc32(bytes(buf[16:])))


def mutate_inside(data: bytes, codec: Compression, edits, cut) -> bytearray:
    """Damage the (decompressed) records of a v2 batch and wrap them again: damage a CRC cannot catch."""
    from minibroker.records.codecs import decompress

    section = bytearray(data[v2.HEADER_SIZE :] if codec == 0 else decompress(codec, data[v2.HEADER_SIZE :]))
    for pos, value in edits:
        if section:
            section[pos % len(section)] = value
    if cut is not None:
        section = section[: cut % (len(section) + 1)]
    payload = bytes(section) if codec == 0 else compress(codec, bytes(section))
    out = bytearray(data[: v2.HEADER_SIZE]) + payload
    struct.pack_into(">i", out, v2.LENGTH_OFFSET, len(out) - 12)
    return out


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    fmt=st.sampled_from(FORMATS),
    n=st.integers(1, 12),
    keyed=st.booleans(),
    config=st.sampled_from(CONFIGS),
    inside=st.booleans(),
    edits=st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 255)), min_size=1, max_size=4),
    cut=st.one_of(st.none(), st.integers(0, 10**6)),
    header_edit=st.one_of(
        st.none(),
        st.tuples(st.sampled_from([27, 35, 57, 23]), st.sampled_from([0, -1, 1, 2**31 - 1, 2**62, MAX_LONG])),
    ),
    fix_crc=st.booleans(),
    writable=st.booleans(),
)
def test_any_damage_raises_only_kafka_errors_from_their_own_checks(
    fmt, n, keyed, config, inside, edits, cut, header_edit, fix_crc, writable
):
    magic, codec = fmt
    rows = [
        (
            i,
            NOW + i * 37 if magic else -1,
            b"k%d" % i if keyed or i % 2 else None,
            b"v" * (i * 13),
            [("h", b"x")],
        )[: 5 if magic == 2 else 4]
        for i in range(n)
    ]
    data = bytearray(build_records(magic, rows, compression=codec))
    if magic == 2 and inside:
        data = mutate_inside(bytes(data), codec, edits, cut)
    else:
        for pos, value in edits:
            data[pos % len(data)] = value
        if cut is not None:
            data = data[: cut % (len(data) + 1)]
    if header_edit is not None and magic == 2 and len(data) >= v2.HEADER_SIZE:
        offset, value = header_edit
        if offset in (27, 35):
            struct.pack_into(">q", data, offset, value)
        else:
            struct.pack_into(">i", data, offset, max(min(value, 2**31 - 1), -(2**31)))
    if fix_crc or inside:
        recrc(data, magic)
    version = 9 if magic == 2 else 2
    try:
        r = assign(data if writable else bytes(data), config=config, version=version)
    except KafkaError as e:
        assert "unexpected" not in e.details, repr(e.details["unexpected"])
        return
    # accepted: what is stored reads back, every record with an int64 timestamp (unless the walk was off)
    assume(not config.skip_record_walk)
    got = list(iter_records(r.data))
    assert len(got) == r.record_count and all(-(2**63) <= x.timestamp <= MAX_LONG for x in got)


# ---------------------------------------------------------------------------------------------- clients


@settings(max_examples=40, deadline=None)
@given(
    raw=st.lists(
        st.tuples(st.integers(0, 10**5), st.one_of(st.none(), st.binary(max_size=300))),
        min_size=1,
        max_size=200,
    ),
    codec=st.sampled_from([0, 1, 2, 3, 4]),
)
def test_real_client_batches_pass_the_walk(raw, codec):
    builder = MemoryRecordsBuilder(2, codec, 1 << 22)
    for ts, value in raw:
        builder.append(
            timestamp=NOW + ts, key=None, value=value, headers=[("n", b"1")] if ts % 3 == 0 else []
        )
    builder.close()
    data = bytearray(builder.buffer())
    r = assign(data)
    assert r.path == AppendPath.IN_PLACE and r.record_count == len(raw)
    assert r.max_timestamp == NOW + max(ts for ts, _ in raw)
