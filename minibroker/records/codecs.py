"""Compression codecs as Kafka frames them, with bounded decompression.

Codec ids (attribute bits 0-2): 0 none, 1 gzip, 2 snappy, 3 lz4, 4 zstd (magic 2 only).

- gzip: a standard gzip stream (several members are read in sequence); written at zlib level 6,
  the JVM's default.
- snappy: read both the xerial snappy-java framing the Java clients write
  (``\\x82SNAPPY\\x00``, int32 version, int32 compatible version, then int32-length-prefixed raw
  blocks) and raw snappy (librdkafka, kafka-python); written xerial-framed by default.
- lz4: the LZ4 frame format with independent 64 KiB blocks. Magic-0 producers computed the frame
  header checksum over the 4 magic bytes too (KAFKA-3160): on magic-0 input the header
  checksum is not trusted (as Kafka's reader ignores it) and magic-0 output is written with
  that broken checksum, so old consumers can read it.
- zstd: a zstd frame stream.

Every decompression is bounded by ``max_bytes``: output beyond it raises
``KafkaError(RECORD_LIST_TOO_LARGE)`` before more memory is spent; undecodable input raises
``KafkaError(CORRUPT_MESSAGE)``. Codecs that may be missing are behind ``has_*()`` probes; a
missing codec raises ``KafkaError(UNSUPPORTED_COMPRESSION_TYPE)``.
"""

from __future__ import annotations

import struct
import zlib
from enum import IntEnum

from minibroker.errors import ErrorCode, KafkaError

try:
    import snappy as _snappy
except ImportError:  # pragma: no cover - a declared dependency, probed anyway
    _snappy = None
try:
    import lz4.frame as _lz4f
except ImportError:  # pragma: no cover
    _lz4f = None
try:
    import zstandard as _zstd
except ImportError:  # pragma: no cover
    _zstd = None

DEFAULT_MAX_DECOMPRESSED_BYTES = 256 * 1024 * 1024
_CHUNK = 1 << 20


class Compression(IntEnum):
    """Codec id as stored in attribute bits 0-2; ``str()`` gives Kafka's lowercase name."""

    NONE = 0
    GZIP = 1
    SNAPPY = 2
    LZ4 = 3
    ZSTD = 4

    def __str__(self) -> str:
        return self.name.lower()

    @classmethod
    def from_name(cls, name: str) -> Compression:
        try:
            return cls[name.upper()]
        except KeyError:
            raise KafkaError(
                ErrorCode.UNSUPPORTED_COMPRESSION_TYPE, f"unknown compression type {name!r}"
            ) from None


def has_snappy() -> bool:
    return _snappy is not None


def has_lz4() -> bool:
    return _lz4f is not None


def has_zstd() -> bool:
    return _zstd is not None


def _require(codec: Compression) -> None:
    available = {Compression.SNAPPY: has_snappy, Compression.LZ4: has_lz4, Compression.ZSTD: has_zstd}
    probe = available.get(codec)
    if probe is not None and not probe():
        raise KafkaError(ErrorCode.UNSUPPORTED_COMPRESSION_TYPE, f"{codec} support is not installed")


def _corrupt(codec, exc) -> KafkaError:
    return KafkaError(ErrorCode.CORRUPT_MESSAGE, f"cannot decompress {codec} payload: {exc}")


def _too_large(codec, max_bytes: int) -> KafkaError:
    return KafkaError(
        ErrorCode.RECORD_LIST_TOO_LARGE, f"{codec} payload inflates beyond the {max_bytes} byte limit"
    )


# ---------------------------------------------------------------------------------------------
# compress


def compress(codec: int, data, *, magic: int = 2, snappy_framing: str = "xerial") -> bytes:
    """Compress ``data`` (an inner message set or the records of a v2 batch) for ``codec``."""
    codec = Compression(codec)
    _require(codec)
    if codec == Compression.NONE:
        return bytes(data)
    if codec == Compression.GZIP:
        co = zlib.compressobj(6, zlib.DEFLATED, 31)
        return co.compress(data) + co.flush()
    if codec == Compression.SNAPPY:
        if snappy_framing == "raw":
            return _snappy.compress(bytes(data))
        return _xerial_compress(data)
    if codec == Compression.LZ4:
        frame = _lz4f.compress(
            bytes(data),
            block_size=_lz4f.BLOCKSIZE_MAX64KB,
            block_linked=False,
            content_checksum=False,
            store_size=False,
        )
        if magic == 0:
            frame = _lz4_set_header_checksum(bytearray(frame), broken=True)
        return bytes(frame)
    if magic < 2:
        raise KafkaError(ErrorCode.UNSUPPORTED_COMPRESSION_TYPE, "zstd needs magic 2")
    return _zstd.ZstdCompressor(level=3).compress(bytes(data))


_XERIAL_HEADER = b"\x82SNAPPY\x00"
_XERIAL_PREFIX = struct.Struct(">8sii")
_XERIAL_BLOCK = 32 * 1024  # snappy-java's default block size


def _xerial_compress(data) -> bytes:
    mv = memoryview(data)
    out = [_XERIAL_PREFIX.pack(_XERIAL_HEADER, 1, 1)]
    for start in range(0, len(mv), _XERIAL_BLOCK):
        block = _snappy.compress(bytes(mv[start : start + _XERIAL_BLOCK]))
        out.append(struct.pack(">i", len(block)))
        out.append(block)
    return b"".join(out)


# ---------------------------------------------------------------------------------------------
# decompress


def decompress(codec: int, data, *, magic: int = 2, max_bytes: int = DEFAULT_MAX_DECOMPRESSED_BYTES) -> bytes:
    """Inflate ``data``; never produce more than ``max_bytes`` (see the module docstring)."""
    codec = Compression(codec)
    _require(codec)
    if codec == Compression.NONE:
        return bytes(data)
    if codec == Compression.GZIP:
        return _gunzip(data, max_bytes)
    if codec == Compression.SNAPPY:
        return _unsnappy(data, max_bytes)
    if codec == Compression.LZ4:
        return _unlz4(data, magic, max_bytes)
    if magic < 2:
        raise KafkaError(ErrorCode.UNSUPPORTED_COMPRESSION_TYPE, "zstd is only valid in magic 2 batches")
    return _unzstd(data, max_bytes)


def _gunzip(data, max_bytes: int) -> bytes:
    out = bytearray()
    rest = bytes(data)
    try:
        while True:
            d = zlib.decompressobj(31)
            chunk = d.decompress(rest, max_bytes - len(out) + 1)
            out += chunk
            if len(out) > max_bytes:
                raise _too_large("gzip", max_bytes)
            while d.unconsumed_tail:
                out += d.decompress(d.unconsumed_tail, max_bytes - len(out) + 1)
                if len(out) > max_bytes:
                    raise _too_large("gzip", max_bytes)
            if not d.eof:
                raise _corrupt("gzip", "truncated stream")
            rest = d.unused_data
            if not rest:
                return bytes(out)
    except zlib.error as exc:
        raise _corrupt("gzip", exc) from None


def _snappy_raw_length(block) -> int:
    """Uncompressed length from a raw snappy block's varint preamble (unsigned, not zig-zag)."""
    result = shift = 0
    for i in range(min(5, len(block))):
        b = block[i]
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result
        shift += 7
    raise _corrupt("snappy", "bad length preamble")


def _unsnappy(data, max_bytes: int) -> bytes:
    data = bytes(data)
    try:
        if not data.startswith(_XERIAL_HEADER):
            if _snappy_raw_length(data) > max_bytes:
                raise _too_large("snappy", max_bytes)
            return _snappy.decompress(data)
        if len(data) < _XERIAL_PREFIX.size:
            raise _corrupt("snappy", "truncated xerial header")
        pos = _XERIAL_PREFIX.size
        out = bytearray()
        while pos < len(data):
            if len(data) - pos < 4:
                raise _corrupt("snappy", "truncated xerial block length")
            (n,) = struct.unpack_from(">i", data, pos)
            pos += 4
            if n < 0 or pos + n > len(data):
                raise _corrupt("snappy", "xerial block runs past the end")
            block = data[pos : pos + n]
            pos += n
            if len(out) + _snappy_raw_length(block) > max_bytes:
                raise _too_large("snappy", max_bytes)
            out += _snappy.decompress(block)
        return bytes(out)
    except KafkaError:
        raise
    except Exception as exc:  # snappy raises its own UncompressError and assorted others
        raise _corrupt("snappy", exc) from None


_LZ4_STEP = 4 << 20


def _unlz4(data, magic: int, max_bytes: int) -> bytes:
    data = bytearray(data)
    try:
        if magic == 0:
            _lz4_set_header_checksum(data, broken=False)
        out = bytearray()
        rest = bytes(data)
        while rest:
            d = _lz4f.LZ4FrameDecompressor()
            # in steps of at most 4 MiB: python-lz4 allocates max_length up front, and a 256 MiB
            # bound per call cost more than decompressing a 1 MB batch
            out += d.decompress(rest, max_length=min(max_bytes - len(out) + 1, _LZ4_STEP))
            while not d.eof and not d.needs_input and len(out) <= max_bytes:
                out += d.decompress(b"", max_length=min(max_bytes - len(out) + 1, _LZ4_STEP))
            if len(out) > max_bytes:
                raise _too_large("lz4", max_bytes)
            if not d.eof:
                raise _corrupt("lz4", "truncated frame")
            rest = d.unused_data
        return bytes(out)
    except KafkaError:
        raise
    except Exception as exc:  # lz4 raises RuntimeError for bad frames
        raise _corrupt("lz4", exc) from None


def _unzstd(data, max_bytes: int) -> bytes:
    # Input is fed in slices small enough that even zstd's worst expansion (about 32768:1, RLE blocks)
    # cannot overshoot the cap by more than the cap itself.
    data = memoryview(bytes(data))
    out = bytearray()
    pos = 0
    try:
        while pos < len(data):
            d = _zstd.ZstdDecompressor().decompressobj()
            while not d.eof:
                if pos >= len(data):
                    raise _corrupt("zstd", "truncated frame")
                step = max(1024, (max_bytes - len(out)) // 32768)
                chunk = data[pos : pos + step]
                pos += len(chunk)
                out += d.decompress(chunk)
                if len(out) > max_bytes:
                    raise _too_large("zstd", max_bytes)
            pos -= len(d.unused_data)
        return bytes(out)
    except KafkaError:
        raise
    except _zstd.ZstdError as exc:
        raise _corrupt("zstd", exc) from None


# ---------------------------------------------------------------------------------------------
# lz4 frame header checksum (KAFKA-3160)

_P1, _P2, _P3, _P4, _P5 = 2654435761, 2246822519, 3266489917, 668265263, 374761393
_M32 = 0xFFFFFFFF


def _rotl(x: int, r: int) -> int:
    return ((x << r) | (x >> (32 - r))) & _M32


def xxh32(data, seed: int = 0) -> int:
    """XXH32 of a short byte string (used only for the 2-15 byte lz4 frame descriptor)."""
    data = bytes(data)
    n = len(data)
    i = 0
    if n >= 16:
        v = [(seed + _P1 + _P2) & _M32, (seed + _P2) & _M32, seed & _M32, (seed - _P1) & _M32]
        while i + 16 <= n:
            for j in range(4):
                lane = int.from_bytes(data[i : i + 4], "little")
                v[j] = (_rotl((v[j] + lane * _P2) & _M32, 13) * _P1) & _M32
                i += 4
        acc = (_rotl(v[0], 1) + _rotl(v[1], 7) + _rotl(v[2], 12) + _rotl(v[3], 18)) & _M32
    else:
        acc = (seed + _P5) & _M32
    acc = (acc + n) & _M32
    while i + 4 <= n:
        acc = (_rotl((acc + int.from_bytes(data[i : i + 4], "little") * _P3) & _M32, 17) * _P4) & _M32
        i += 4
    while i < n:
        acc = (_rotl((acc + data[i] * _P5) & _M32, 11) * _P1) & _M32
        i += 1
    acc ^= acc >> 15
    acc = (acc * _P2) & _M32
    acc ^= acc >> 13
    acc = (acc * _P3) & _M32
    acc ^= acc >> 16
    return acc


_LZ4_MAGIC = b"\x04\x22\x4d\x18"


def _lz4_set_header_checksum(frame: bytearray, *, broken: bool) -> bytearray:
    """Rewrite the frame descriptor checksum byte: correct, or Kafka's magic-0 variant."""
    if len(frame) < 7 or frame[:4] != _LZ4_MAGIC:
        raise _corrupt("lz4", "not an lz4 frame")
    flg = frame[4]
    hc_pos = 6 + (8 if flg & 0x08 else 0) + (4 if flg & 0x01 else 0)
    if len(frame) <= hc_pos:
        raise _corrupt("lz4", "truncated frame header")
    covered = frame[0:hc_pos] if broken else frame[4:hc_pos]
    frame[hc_pos] = (xxh32(covered) >> 8) & 0xFF
    return frame
