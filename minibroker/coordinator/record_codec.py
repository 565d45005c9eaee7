"""The field encoding shared by the coordinators' internal-topic records.

The keys and values of ``__consumer_offsets`` (``group_records``) and ``__transaction_state``
(``transaction_records``) are Kafka protocol structs after an int16 version: big-endian fixed-width ints,
and strings, bytes and arrays with an int16 (strings) or int32 length, -1 for null. Flexible versions
(KIP-482) use compact lengths instead (unsigned varint of length + 1, 0 for null) and end each struct
with a tagged-field section: a count, then per field its tag, its size and its bytes, as unsigned varints.

Sans-I/O: bytes in, values out.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from typing import TypeVar

I8 = struct.Struct(">b")
I16 = struct.Struct(">h")
I32 = struct.Struct(">i")
I64 = struct.Struct(">q")

_T = TypeVar("_T")


class RecordError(ValueError):
    """A key or value of an internal topic that no known version describes, or cut short."""


# -- writing ------------------------------------------------------------------------------------


def write_uvarint(out: bytearray, n: int) -> None:
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)


def _write_length(out: bytearray, n: int | None, flexible: bool, fixed: struct.Struct) -> None:
    """A length, None for null: compact when ``flexible``, else ``fixed`` with -1 for null."""
    if flexible:
        write_uvarint(out, 0 if n is None else n + 1)
    else:
        out += fixed.pack(-1 if n is None else n)


def write_string(out: bytearray, s: str | None, flexible: bool = False) -> None:
    if s is None:
        _write_length(out, None, flexible, I16)
        return
    b = s.encode("utf-8")
    if not flexible and len(b) > 0x7FFF:
        raise ValueError("string longer than 32767 bytes")  # what an int16 length can say
    _write_length(out, len(b), flexible, I16)
    out += b


def write_bytes(out: bytearray, b: bytes | None, flexible: bool = False) -> None:
    _write_length(out, None if b is None else len(b), flexible, I32)
    if b is not None:
        out += b


def write_array_len(out: bytearray, n: int | None, flexible: bool = False) -> None:
    """An array's element count, None for a null array."""
    _write_length(out, n, flexible, I32)


def write_tagged_fields(out: bytearray, fields: Iterable[tuple[int, bytes]]) -> None:
    """A tagged-field section of (tag, raw bytes) pairs; Kafka requires them in ascending tag order."""
    fields = sorted(fields, key=lambda field: field[0])
    write_uvarint(out, len(fields))
    for tag, data in fields:
        write_uvarint(out, tag)
        write_uvarint(out, len(data))
        out += data


# -- reading ------------------------------------------------------------------------------------


class RecordReader:
    """Reads fields from ``pos`` on; ``flexible`` selects compact lengths and tagged fields. A read past
    the end, or a malformed field, raises RecordError."""

    __slots__ = ("buf", "pos", "flexible")

    def __init__(self, buf, pos: int = 0, flexible: bool = False):
        self.buf = memoryview(buf)
        self.pos = pos
        self.flexible = flexible

    def _fixed(self, st: struct.Struct) -> int:
        if self.pos + st.size > len(self.buf):
            raise RecordError("record truncated")
        (v,) = st.unpack_from(self.buf, self.pos)
        self.pos += st.size
        return v

    def i8(self) -> int:
        return self._fixed(I8)

    def i16(self) -> int:
        return self._fixed(I16)

    def i32(self) -> int:
        return self._fixed(I32)

    def i64(self) -> int:
        return self._fixed(I64)

    def uvarint(self) -> int:
        result = shift = 0
        while True:
            if self.pos >= len(self.buf):
                raise RecordError("record truncated")
            if shift > 28:  # Kafka's lengths and tags are 32-bit: at most 5 bytes
                raise RecordError("varint longer than 5 bytes")
            b = self.buf[self.pos]
            self.pos += 1
            result |= (b & 0x7F) << shift
            if not b & 0x80:
                return result
            shift += 7

    def raw(self, n: int) -> bytes:
        if n < 0 or self.pos + n > len(self.buf):
            raise RecordError("record truncated")
        b = bytes(self.buf[self.pos : self.pos + n])
        self.pos += n
        return b

    def _length(self, fixed: struct.Struct) -> int | None:
        """A compact or ``fixed`` length; None for null (any negative length)."""
        n = self.uvarint() - 1 if self.flexible else self._fixed(fixed)
        return None if n < 0 else n

    def nullable_string(self, field: str) -> str | None:
        n = self._length(I16)
        if n is None:
            return None
        try:
            return self.raw(n).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise RecordError(f"field {field} is not UTF-8: {exc}") from None

    def string(self, field: str) -> str:
        return _required(field, self.nullable_string(field))

    def nullable_bytes(self) -> bytes | None:
        n = self._length(I32)
        return None if n is None else self.raw(n)

    def nullable_array_len(self) -> int | None:
        return self._length(I32)

    def array_len(self, field: str) -> int:
        return _required(field, self.nullable_array_len())

    def tagged_fields(self) -> list[tuple[int, bytes]]:
        """A struct's tagged fields as (tag, raw bytes) in the order written; none when not flexible."""
        if not self.flexible:
            return []
        return [(self.uvarint(), self.raw(self.uvarint())) for _ in range(self.uvarint())]

    def skip_tagged_fields(self) -> None:
        self.tagged_fields()


def _required(field: str, value: _T | None) -> _T:
    if value is None:
        raise RecordError(f"non-nullable field {field} was serialized as null")
    return value
