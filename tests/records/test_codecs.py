"""Codecs: round trips, Kafka's framings, bounded decompression, interop with kafka-python's codecs."""

import os
import struct
import zlib

import pytest
import snappy
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka import codec as kcodec

from minibroker.errors import ErrorCode, KafkaError
from minibroker.records.codecs import Compression, compress, decompress, has_lz4, has_snappy, has_zstd, xxh32

CODEC_MAGICS = [(c, m) for c in Compression for m in (0, 1, 2) if not (c == Compression.ZSTD and m < 2)]


def test_probes():
    assert has_snappy() and has_lz4() and has_zstd()


def test_names():
    assert str(Compression.LZ4) == "lz4"
    assert Compression.from_name("zstd") == Compression.ZSTD
    with pytest.raises(KafkaError) as ei:
        Compression.from_name("brotli")
    assert ei.value.code == ErrorCode.UNSUPPORTED_COMPRESSION_TYPE


@settings(max_examples=25, deadline=None)
@given(data=st.binary(max_size=3000), which=st.sampled_from(CODEC_MAGICS))
def test_round_trip(data, which):
    codec, magic = which
    assert decompress(codec, compress(codec, data, magic=magic), magic=magic) == data


@pytest.mark.parametrize("codec", [Compression.GZIP, Compression.SNAPPY, Compression.LZ4, Compression.ZSTD])
def test_bounded(codec):
    bomb = compress(codec, b"\0" * 200_000)
    assert decompress(codec, bomb, max_bytes=200_000) == b"\0" * 200_000
    with pytest.raises(KafkaError) as ei:
        decompress(codec, bomb, max_bytes=199_999)
    assert ei.value.code == ErrorCode.RECORD_LIST_TOO_LARGE


@pytest.mark.parametrize("codec", [Compression.GZIP, Compression.SNAPPY, Compression.LZ4, Compression.ZSTD])
def test_garbage_is_corrupt(codec):
    with pytest.raises(KafkaError) as ei:
        decompress(codec, b"\x82SNAPPY\x00garbage" if codec == Compression.SNAPPY else os.urandom(64) + b"x")
    assert ei.value.code == ErrorCode.CORRUPT_MESSAGE


@pytest.mark.parametrize("codec", [Compression.GZIP, Compression.LZ4, Compression.ZSTD])
def test_truncated_is_corrupt(codec):
    blob = compress(codec, os.urandom(5000))
    with pytest.raises(KafkaError) as ei:
        decompress(codec, blob[: len(blob) // 2])
    assert ei.value.code == ErrorCode.CORRUPT_MESSAGE


def test_lz4_read_a_feed_at_a_time_agrees_with_the_whole_frame_read():
    """_unlz4_pieces feeds the decoder LZ4_FEED bytes at a time (issue 29): frames larger than a feed,
    several frames one after the other and every buffer type read whole; a frame cut anywhere (where
    python-lz4's whole-frame decoder fails too) is CORRUPT_MESSAGE."""
    import lz4.frame

    from minibroker.records.codecs import LZ4_FEED, iter_decompress

    data = os.urandom(3 * LZ4_FEED).hex().encode()  # compressible 2:1, a frame of three feeds
    one = compress(Compression.LZ4, data)
    assert len(one) > 2 * LZ4_FEED
    two = one + compress(Compression.LZ4, b"tail")
    for blob, expected in ((one, data), (two, data + b"tail")):
        for kind in (bytes, bytearray, memoryview):
            pieces = list(iter_decompress(Compression.LZ4, kind(blob), chunk=50_000))
            assert b"".join(pieces) == expected and max(map(len, pieces)) <= 50_000
    assert decompress(Compression.LZ4, two[: len(one)]) == data
    for cut in (1, 7, LZ4_FEED - 1, LZ4_FEED, LZ4_FEED + 1, len(one) - 4, len(one) - 1, len(one) + 3):
        with pytest.raises(RuntimeError):  # python-lz4 on its own: the frame is cut short
            lz4.frame.decompress(two[:cut] if cut < len(one) else two[len(one) : cut])
        with pytest.raises(KafkaError) as ei:
            decompress(Compression.LZ4, two[:cut])
        assert ei.value.code == ErrorCode.CORRUPT_MESSAGE, cut


def test_gzip_multiple_members():
    assert decompress(Compression.GZIP, compress(1, b"ab") + compress(1, b"cd")) == b"abcd"


def test_snappy_xerial_and_raw():
    data = os.urandom(100) * 1000  # > one 32 KiB xerial block
    framed = compress(Compression.SNAPPY, data)
    assert framed.startswith(b"\x82SNAPPY\x00") and struct.unpack_from(">ii", framed, 8) == (1, 1)
    assert decompress(Compression.SNAPPY, framed) == data
    raw = compress(Compression.SNAPPY, data, snappy_framing="raw")
    assert raw == snappy.compress(data)
    assert decompress(Compression.SNAPPY, raw) == data
    # kafka-python reads ours and we read its xerial output
    assert kcodec.snappy_decode(framed) == data
    assert decompress(Compression.SNAPPY, kcodec.snappy_encode(data, xerial_compatible=True)) == data


def test_xxh32_known_values():
    assert xxh32(b"") == 0x02CC5D05
    assert xxh32(b"a") == 0x550D7456
    assert xxh32(b"abc") == 0x32D153FF
    assert xxh32(b"Nobody inspects the spammish repetition") == 0xE2293B2F


def test_lz4_kafka_3160_header_checksum():
    data = b"hello kafka" * 50
    good = compress(Compression.LZ4, data, magic=1)
    broken = compress(Compression.LZ4, data, magic=0)
    assert good[:6] == broken[:6] and good[6] != broken[6]
    assert broken[6] == (xxh32(broken[0:6]) >> 8) & 0xFF  # checksum over magic + descriptor
    assert good[6] == (xxh32(good[4:6]) >> 8) & 0xFF
    assert decompress(Compression.LZ4, broken, magic=0) == data
    assert decompress(Compression.LZ4, good, magic=0) == data  # magic 0 readers ignore the checksum
    with pytest.raises(KafkaError):
        decompress(Compression.LZ4, broken, magic=1)
    assert kcodec.lz4_decode(good) == data
    assert decompress(Compression.LZ4, kcodec.lz4_encode(data), magic=2) == data


def test_gzip_interop():
    data = os.urandom(300)
    assert kcodec.gzip_decode(compress(Compression.GZIP, data)) == data
    assert decompress(Compression.GZIP, kcodec.gzip_encode(data)) == data
    assert zlib.decompress(compress(Compression.GZIP, data), 31) == data


def test_zstd_interop_and_magic():
    data = os.urandom(300) * 3
    assert kcodec.zstd_decode(compress(Compression.ZSTD, data)) == data
    assert decompress(Compression.ZSTD, kcodec.zstd_encode(data)) == data
    with pytest.raises(KafkaError) as ei:
        decompress(Compression.ZSTD, compress(Compression.ZSTD, data), magic=1)
    assert ei.value.code == ErrorCode.UNSUPPORTED_COMPRESSION_TYPE
