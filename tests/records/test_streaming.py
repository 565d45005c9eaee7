"""Issue 14, item 2, in the record layer: compressed batches are read as streams, never whole.

- ``codecs.iter_decompress`` hands out pieces of at most a chunk for every codec (zstd fed whole
  blocks at a time, its frames walked to find truncation), with the old ``decompress`` errors;
- ``v2.iter_record_windows`` over any cutting of a section agrees with one ``walk_records`` of it,
  and refuses a record declaring more than a record may take before reading its bytes;
- validating a 200 MiB decompression bomb allocates a few MiB at most (tracemalloc), whether it is
  refused (one 200 MiB record) or accepted (200 records of 1 MiB) or rebuilt;
- a legitimate 8 MiB batch still validates for each codec, in place and rebuilt;
- ``work_budget`` defers, ``cancel`` cancels, both leaving the input untouched; ``rebase`` of a
  result validated from offset 0 equals validating from the real offset, on every path.
"""

from __future__ import annotations

import os
import struct
import threading
import tracemalloc

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from minibroker.errors import ErrorCode, KafkaError
from minibroker.records import (
    AppendConfig,
    AppendPath,
    Compression,
    ValidationCancelled,
    ValidationDeferred,
    build_records,
    compress,
    iter_records,
    legacy,
    rebase,
    v2,
    validate_and_assign,
)
from minibroker.records.codecs import StreamCompressor, decompress, iter_decompress

from fuzzing.bombs import CODECS, MiB, build_bomb

NOW = 1_700_000_000_000

pytestmark = pytest.mark.xdist_group("bombs")  # one worker builds the module's bombs (200 MiB each)


DEFAULT = AppendConfig()


def assign(data, config=DEFAULT, version=9, next_offset=0, **kw):
    return validate_and_assign(
        data, next_offset=next_offset, now_ms=NOW, config=config, produce_version=version, **kw
    )


def code_of(fn) -> ErrorCode:
    with pytest.raises(KafkaError) as e:
        fn()
    assert "unexpected" not in e.value.details, e.value.details
    return e.value.code


# ---------------------------------------------------------------------------------------------- codecs


@pytest.mark.parametrize("codec", CODECS)
def test_pieces_are_bounded_and_join_to_the_payload(codec):
    data = os.urandom(300_000).hex().encode() + bytes(3 * MiB)
    blob = compress(codec, data)
    pieces = list(iter_decompress(codec, blob, chunk=64 * 1024))
    # zstd is fed whole blocks: a piece may pass the chunk by less than one block (128 KiB)
    assert max(len(p) for p in pieces) <= 64 * 1024 + 128 * 1024
    assert b"".join(pieces) == data == decompress(codec, blob)


@pytest.mark.parametrize("codec", CODECS)
def test_stream_compressor_output_is_one_stream_of_the_codec(codec):
    c = StreamCompressor(codec)
    data = [os.urandom(5000).hex().encode() for _ in range(40)] + [bytes(200_000)]
    blob = b"".join([c.compress(d) for d in data] + [c.flush()])
    assert decompress(codec, blob) == b"".join(data)


def test_zstd_frames_skippable_frames_and_damage():
    a, b = compress(Compression.ZSTD, b"ab" * 1000), compress(Compression.ZSTD, b"cd")
    skippable = struct.pack("<II", 0x184D2A53, 3) + b"xyz"
    assert decompress(Compression.ZSTD, a + skippable + b) == b"ab" * 1000 + b"cd"
    for bad in (a[:-1], a + b"\x00", a[:10], skippable[:-1] + b):
        assert code_of(lambda bad=bad: decompress(Compression.ZSTD, bad)) == ErrorCode.CORRUPT_MESSAGE


@pytest.mark.parametrize("codec", CODECS)
def test_the_cap_stops_decompression_at_once(codec):
    blob = compress(codec, bytes(4 * MiB))
    pieces = iter_decompress(codec, blob, max_bytes=MiB, chunk=256 * 1024)
    got = 0
    with pytest.raises(KafkaError) as e:
        for piece in pieces:
            got += len(piece)
    assert e.value.code == ErrorCode.RECORD_LIST_TOO_LARGE and got <= MiB


# ---------------------------------------------------------------------------------------------- windows


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    rows=st.lists(
        st.tuples(st.integers(-5, 5), st.booleans(), st.binary(max_size=200), st.booleans()),
        min_size=1,
        max_size=25,
    ),
    edits=st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 255)), max_size=3),
    cut=st.one_of(st.none(), st.integers(0, 10**6)),
    count_change=st.sampled_from([0, 0, 1, -1]),
    cuts=st.lists(st.integers(1, 600), min_size=1, max_size=8),
    most=st.sampled_from([1, 2, 7, 4096]),
)
def test_windows_of_any_cutting_agree_with_one_walk_of_the_section(
    rows, edits, cut, count_change, cuts, most
):
    section = bytearray(
        b"".join(
            v2.encode_record(i, ts, None if null else b"k", value, [("h", b"v")] if header else [])
            for i, (ts, null, value, header) in enumerate(rows)
        )
    )
    for pos, value in edits:
        section[pos % len(section)] = value
    if cut is not None:
        section = section[: cut % (len(section) + 1)]
    section = bytes(section)
    count = len(rows) + count_change
    pieces, pos, i = [], 0, 0
    while pos < len(section):
        pieces.append(section[pos : pos + cuts[i % len(cuts)]])
        pos += cuts[i % len(cuts)]
        i += 1
    try:
        whole = v2.walk_records(section, 0, len(section), count)
    except v2.RecordFormatError:
        whole = None
    for walk in (False, True):
        try:
            walked = None
            for window in v2.iter_record_windows(pieces, count, 10**9, max_records=most, walk=walk):
                buf, start, end, first, n = window[:5]
                assert n <= most
                w = window[5] if walk else v2.walk_records(buf, start, end, n, first)
                if walk:
                    assert w == v2.walk_records(buf, start, end, n, first)
                walked = (
                    w
                    if walked is None
                    else (min(walked[0], w[0]), max(walked[1], w[1]), walked[2] + w[2], walked[3] and w[3])
                )
            windowed = walked or (0, 0, 0, True)
        except v2.RecordFormatError:
            windowed = None
        # the same records pass or fail (an error's wording may differ: a window ends where the whole
        # does not)
        assert windowed == whole, walk


@settings(max_examples=200, deadline=None)
@given(
    sizes=st.lists(st.integers(0, 3000), min_size=1, max_size=12),
    limit=st.integers(64, 4000),
    cuts=st.lists(st.integers(1, 4000), min_size=1, max_size=6),
    walk=st.booleans(),
)
def test_the_record_limit_holds_however_the_pieces_fall(sizes, limit, cuts, walk):
    records = [v2.encode_record(i, 0, None, b"x" * size) for i, size in enumerate(sizes)]
    section = b"".join(records)
    pieces, pos, i = [], 0, 0
    while pos < len(section):  # pieces no larger than the limit, as the validator cuts them
        step = min(cuts[i % len(cuts)], limit)
        pieces.append(section[pos : pos + step])
        pos += step
        i += 1
    too_large = any(v2.declared_record_size(r, 0, len(r))[0] > limit for r in records)
    try:
        got = sum(w[4] for w in v2.iter_record_windows(pieces, len(records), limit, walk=walk))
        assert not too_large and got == len(records)
    except v2.RecordTooLargeError:
        assert too_large


def test_a_record_declaring_too_much_is_refused_before_its_bytes_are_read():
    record = v2.encode_record(0, 0, None, b"x" * 5000)
    read = []

    def pieces():
        for i in range(0, len(record), 100):
            read.append(i)
            yield record[i : i + 100]

    with pytest.raises(v2.RecordTooLargeError):
        list(v2.iter_record_windows(pieces(), 1, 4096))
    assert len(read) == 1  # the length was in the first piece: nothing more was asked for


def test_nothing_is_decompressed_past_the_declared_records_but_one_piece():
    taken = []

    def pieces():
        for i in range(1000):
            taken.append(i)
            yield v2.encode_record(0, 0, None, b"v") * 10 if i == 0 else b"\x00" * 1000

    with pytest.raises(v2.RecordFormatError, match="still remaining"):
        list(v2.iter_record_windows(pieces(), 10, 100))
    assert len(taken) == 2


# ---------------------------------------------------------------------------------------------- bombs


def traced_peak(fn):
    tracemalloc.start()
    try:
        try:
            result = fn()
        except KafkaError as e:
            result = e
        return result, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


@pytest.fixture(scope="module")
def bombs():
    """200 MiB of zeros per codec, as one record and as 200 records of 1 MiB (snappy expands at most
    ~22 times: its bombs are as large as max.message.bytes lets them be, ~1 MB for 20 MiB)."""
    shapes = ("one-record", "many-records")  # scripts/bench_bombs.py's first two
    return {codec: tuple(build_bomb(s, codec, timestamp=NOW) for s in shapes) for codec in CODECS}


@pytest.mark.parametrize("codec", CODECS)
def test_a_bomb_of_one_huge_record_is_refused_as_too_large_allocating_little(bombs, codec):
    one, _ = bombs[codec]
    assert len(one) < AppendConfig().max_message_bytes
    data = bytearray(one)
    error, peak = traced_peak(lambda: assign(data))
    assert isinstance(error, KafkaError) and error.code == ErrorCode.MESSAGE_TOO_LARGE, error
    assert "a record may take" in error.message
    assert peak < 4 * MiB, peak
    assert bytes(data) == one  # untouched


@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize("base_offset", [0, 1])  # 1: Kafka's rules rebuild the batch
def test_a_bomb_of_many_acceptable_records_is_validated_allocating_little(bombs, codec, base_offset):
    _, many = bombs[codec]
    if base_offset:
        many = bytearray(many)
        struct.pack_into(">q", many, 0, base_offset)
    data = bytearray(many)
    result, peak = traced_peak(lambda: assign(data, next_offset=7))
    assert not isinstance(result, KafkaError), result
    assert result.record_count == (20 if codec == Compression.SNAPPY else 200)
    assert result.path == (AppendPath.IN_PLACE if not base_offset else AppendPath.RECOMPRESSED)
    assert result.first_offset == 7
    # a record (1 MiB) is held whole, as Kafka's readFrom does, and a rebuild spills to the compressor
    # every MiB: a few MiB in all, against 200 MiB decompressed
    assert peak < 16 * MiB, peak


@pytest.mark.parametrize("codec", [Compression.GZIP, Compression.ZSTD])
def test_the_declared_cap_still_applies_to_streams(bombs, codec):
    _, many = bombs[codec]
    cfg = AppendConfig(max_decompressed_bytes=64 * MiB)
    assert code_of(lambda: assign(bytearray(many), config=cfg)) == ErrorCode.RECORD_LIST_TOO_LARGE


def test_a_smaller_record_limit_can_be_set():
    data = build_records(2, [(0, NOW, b"k", b"x" * 3000, ())], compression=Compression.GZIP)
    assert assign(bytearray(data)).record_count == 1
    cfg = AppendConfig(max_record_bytes=2000)
    assert code_of(lambda: assign(bytearray(data), config=cfg)) == ErrorCode.MESSAGE_TOO_LARGE


@pytest.mark.parametrize("codec", CODECS[:3])  # zstd needs magic 2
def test_legacy_wrapper_bomb_messages_are_bounded_too(codec):
    inner = legacy.encode_message(1, 0, NOW, b"k", bytes(2 * MiB))
    wrapper = legacy.encode_message(1, 0, NOW, None, compress(codec, inner, magic=1), int(codec))
    err = pytest.raises(KafkaError, assign, bytearray(wrapper), version=2).value
    assert err.code == ErrorCode.CORRUPT_MESSAGE and "largest allowable message size" in err.message
    ok = legacy.encode_message(1, 0, NOW, None, compress(codec, inner, magic=1), int(codec))
    big = AppendConfig(max_record_bytes=4 * MiB)
    assert assign(bytearray(ok), config=big, version=2).record_count == 1


# ---------------------------------------------------------------------------------------------- legitimate


@pytest.mark.slow
@pytest.mark.parametrize("codec", CODECS)
def test_a_legitimate_8_mib_batch_validates_for_each_codec(codec):
    rows = [(i, NOW + i, b"key-%d" % i, os.urandom(50).hex().encode(), ()) for i in range(8 * MiB // 120)]
    data = build_records(2, rows, compression=codec)
    cfg = AppendConfig(max_message_bytes=16 * MiB)
    r = assign(bytearray(data), config=cfg, next_offset=100)
    assert r.path == AppendPath.IN_PLACE and r.record_count == len(rows) and r.max_timestamp == rows[-1][1]
    got = list(iter_records(bytes(r.data)))
    assert [(x.offset, x.value) for x in got[:3]] == [(100 + i, rows[i][3]) for i in range(3)]
    assert len(got) == len(rows)
    # rebuilt with another codec, spilling to the stream compressor: the same records come out
    other = Compression.ZSTD if codec != Compression.ZSTD else Compression.GZIP
    cfg2 = AppendConfig(max_message_bytes=16 * MiB, compression_type=str(other))
    r2 = assign(bytearray(data), config=cfg2, next_offset=100)
    assert r2.path == AppendPath.RECOMPRESSED and r2.target_compression == other
    assert [(x.offset, x.key, x.value) for x in iter_records(bytes(r2.data))] == [
        (x.offset, x.key, x.value) for x in got
    ]


# ---------------------------------------------------------------------------------------------- budget


def test_work_budget_defers_and_cancel_cancels_leaving_the_input_untouched(bombs):
    _, many = bombs[Compression.ZSTD]
    data = bytearray(many)
    with pytest.raises(ValidationDeferred):
        assign(data, work_budget=0)
    assert bytes(data) == many
    cancel = threading.Event()
    cancel.set()
    with pytest.raises(ValidationCancelled):
        assign(data, cancel=cancel)
    assert bytes(data) == many
    # a small batch is done long before its budget; an uncompressed one never looks at it
    small = build_records(2, [(0, NOW, b"k", b"v", ())], compression=Compression.LZ4)
    assert assign(bytearray(small), work_budget=10**6).record_count == 1
    assert assign(bytearray(build_records(2, [(0, NOW, b"k", b"v", ())])), work_budget=0).record_count == 1


CASES = [
    # (magic, codec, config)
    (2, Compression.ZSTD, AppendConfig()),
    (2, Compression.GZIP, AppendConfig(compression_type="lz4")),
    (2, Compression.NONE, AppendConfig(compression_type="snappy")),
    (2, Compression.LZ4, AppendConfig(message_timestamp_type="LogAppendTime")),
    (1, Compression.GZIP, AppendConfig()),
    (1, Compression.NONE, AppendConfig()),
    (1, Compression.SNAPPY, AppendConfig(message_format_magic=1)),
    (1, Compression.NONE, AppendConfig(message_format_magic=1)),
    (0, Compression.NONE, AppendConfig(message_format_magic=1)),
    (2, Compression.LZ4, AppendConfig(message_format_magic=1, compression_type="gzip")),
]


def five_records(magic: int, codec) -> bytes:
    rows = [(i, NOW + i * 7, b"k%d" % i, b"v" * i)[: 5 if magic == 2 else 4] for i in range(5)]
    if magic == 2:
        rows = [r + ((),) for r in rows]
    return build_records(magic, rows, compression=codec)


@pytest.mark.parametrize("magic, codec, config", CASES)
def test_rebase_equals_validating_at_the_real_offset(magic, codec, config):
    data = five_records(magic, codec)
    version = 9 if magic == 2 else 2
    direct = assign(bytearray(data), config=config, version=version, next_offset=1234)
    moved = rebase(assign(bytearray(data), config=config, version=version, next_offset=0), 1234)
    assert bytes(moved.data) == bytes(direct.data)
    for name in (
        "first_offset",
        "last_offset",
        "max_timestamp",
        "offset_of_max_timestamp",
        "record_count",
        "path",
        "batches",
        "entries",
    ):
        assert getattr(moved, name) == getattr(direct, name), name


@pytest.mark.parametrize("magic, codec, config", CASES)
@pytest.mark.parametrize("next_offset", [0, 1234])
def test_rebase_stamps_a_leader_epoch_begun_during_validation(magic, codec, config, next_offset):
    data = five_records(magic, codec)
    version = 9 if magic == 2 else 2
    direct = assign(bytearray(data), config=config, version=version, next_offset=next_offset, leader_epoch=3)
    validated = assign(bytearray(data), config=config, version=version, next_offset=0, leader_epoch=2)
    assert bytes(rebase(validated, next_offset, 3).data) == bytes(direct.data)


def test_a_magic_0_wrapper_is_not_rebased():
    data = build_records(0, [(0, -1, b"k", b"v"), (1, -1, b"k", b"w")], compression=Compression.GZIP)
    r = assign(bytearray(data), config=AppendConfig(message_format_magic=0), version=2)
    with pytest.raises(ValueError):
        rebase(r, 10)


def test_walking_keeps_no_buffer_alive():
    """The walk's slow-path signal is one exception instance: raised again and again, its traceback
    would chain every frame it was raised in, each holding the buffer it walked (a leak of every
    produce buffer with a record off the fast path, and of every window of a compressed batch)."""
    import gc
    import weakref

    class Buf(bytearray):
        pass

    section = b"".join(v2.encode_record(i, 0, None, b"x" * 200, [("h", b"v")] * 70) for i in range(20))
    buf = Buf(section)
    ref = weakref.ref(buf)
    v2.walk_records(buf, 0, len(buf), 20)
    del buf
    gc.collect()
    assert ref() is None
