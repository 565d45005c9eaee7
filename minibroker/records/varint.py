"""Zig-zag varints as Kafka's v2 records use them (protobuf-style base-128, sign folded in bit 0).

Decoders take any buffer supporting integer indexing (bytes, bytearray, memoryview of 'B')
and return ``(value, next_position)``. Malformed input raises ``ValueError`` (or
``IndexError`` when the buffer ends inside a varint); callers map that to a Kafka error.
"""

from __future__ import annotations

VARINT_MAX_BYTES = 5  # int32
VARLONG_MAX_BYTES = 10  # int64


def read_varint(buf, pos: int) -> tuple[int, int]:
    """Decode one zig-zag varint (up to 10 bytes) at ``pos``."""
    b = buf[pos]
    if b < 0x80:
        return (b >> 1) ^ -(b & 1), pos + 1
    result = b & 0x7F
    shift = 7
    pos += 1
    while True:
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return (result >> 1) ^ -(result & 1), pos
        shift += 7
        if shift >= 70:
            raise ValueError("varint longer than 10 bytes")


def skip_varint(buf, pos: int) -> int:
    """Position after the varint at ``pos`` without decoding it."""
    while buf[pos] & 0x80:
        pos += 1
    return pos + 1


def encode_varint(value: int) -> bytes:
    """Encode a signed 64-bit integer as a zig-zag varint."""
    z = ((value << 1) ^ (value >> 63)) & 0xFFFFFFFFFFFFFFFF
    if z < 0x80:
        return bytes((z,))
    out = bytearray()
    while z >= 0x80:
        out.append((z & 0x7F) | 0x80)
        z >>= 7
    out.append(z)
    return bytes(out)


def size_of_varint(value: int) -> int:
    """Bytes ``encode_varint(value)`` takes."""
    z = ((value << 1) ^ (value >> 63)) & 0xFFFFFFFFFFFFFFFF
    n = 1
    while z >= 0x80:
        z >>= 7
        n += 1
    return n
