"""Where each field of an encoded request lies: the schema walked with byte offsets.

The codec (``minibroker.protocol.codec``) turns bytes into values and keeps no positions; the
fuzzer's structure-aware mutators need the positions: of every length prefix (strings, bytes,
arrays, compact lengths), every fixed-size integer, every ``records`` field and every tag buffer.
``walk_request`` reads a whole frame (header and body, no size prefix) the way the codec does and
returns those spans. It is meant for well-formed frames (the corpus); on anything else it raises
``WalkError``.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from minibroker.protocol import codec
from minibroker.protocol.declarations import F, in_range
from minibroker.protocol.schema import MESSAGES

_WIDTH = {"int8": 1, "int16": 2, "uint16": 2, "int32": 4, "int64": 8, "float64": 8}


class WalkError(ValueError):
    pass


@dataclass(frozen=True, slots=True)
class Span:
    """One field's bytes in a frame.

    kind: ``int`` (fixed-size integer; ``width`` bytes), ``len`` (a length or count prefix;
    ``encoding`` is ``i16``, ``i32`` or ``uvarint``; ``what`` is string, bytes, array or records),
    ``records`` (the record bytes of a records field), ``uuid``, ``string`` (the UTF-8 bytes of a
    string), ``tags`` (the count of a tag buffer, a uvarint).
    """

    kind: str
    offset: int
    size: int
    name: str = ""
    encoding: str = ""
    what: str = ""
    value: int = 0


class _Walker:
    def __init__(self, buf: bytes):
        self.buf = buf
        self.spans: list[Span] = []

    def need(self, pos: int, n: int) -> None:
        if n < 0 or pos + n > len(self.buf):
            raise WalkError(f"truncated at {pos}: need {n}")

    def uvarint(self, pos: int) -> tuple[int, int]:
        start = pos
        result = shift = 0
        while True:
            self.need(pos, 1)
            b = self.buf[pos]
            pos += 1
            result |= (b & 0x7F) << shift
            if not b & 0x80:
                return result, pos
            shift += 7
            if shift > 35 or pos - start > 5:
                raise WalkError("varint too long")

    def length(self, pos: int, compact: bool, wide: bool, name: str, what: str) -> tuple[int, int]:
        if compact:
            n, end = self.uvarint(pos)
            self.spans.append(Span("len", pos, end - pos, name, "uvarint", what, n - 1))
            return n - 1, end
        fmt, size = (">i", 4) if wide else (">h", 2)
        self.need(pos, size)
        n = struct.unpack_from(fmt, self.buf, pos)[0]
        self.spans.append(Span("len", pos, size, name, "i32" if wide else "i16", what, n))
        return n, pos + size

    def primitive(self, t: str, pos: int, compact: bool, nullable: bool, name: str) -> int:
        if t in _WIDTH:
            self.need(pos, _WIDTH[t])
            if t != "float64":
                self.spans.append(Span("int", pos, _WIDTH[t], name))
            return pos + _WIDTH[t]
        if t == "bool":
            self.need(pos, 1)
            return pos + 1
        if t == "uuid":
            self.need(pos, 16)
            self.spans.append(Span("uuid", pos, 16, name))
            return pos + 16
        if t in ("string", "bytes", "records"):
            what = t
            n, pos = self.length(pos, compact, t != "string", name, what)
            if n < 0:
                if not nullable and t != "records":
                    raise WalkError(f"null {t} {name}")
                return pos
            self.need(pos, n)
            if t == "records":
                self.spans.append(Span("records", pos, n, name))
            elif t == "string":
                self.spans.append(Span("string", pos, n, name))
            return pos + n
        raise WalkError(f"unknown type {t}")

    def field(self, f: F, version: int, flexible: bool, pos: int) -> int:
        compact = flexible if f.flexible is None else in_range(version, f.flexible)
        nullable = in_range(version, f.nullable)
        if f.type == "struct":
            if nullable:
                self.need(pos, 1)
                if self.buf[pos] >= 0x80:
                    return pos + 1
                pos += 1
            return self.struct(f.fields, version, flexible, pos)
        if f.type.startswith("[]"):
            n, pos = self.length(pos, compact, True, f.name, "array")
            if n < 0:
                if not nullable:
                    raise WalkError(f"null array {f.name}")
                return pos
            if n > len(self.buf) - pos:
                raise WalkError(f"array {f.name} of {n}")
            for _ in range(n):
                if f.type == "[]struct":
                    pos = self.struct(f.fields, version, flexible, pos)
                else:
                    pos = self.primitive(f.type[2:], pos, compact, False, f.name)
            return pos
        return self.primitive(f.type, pos, compact, nullable, f.name)

    def struct(self, fields, version: int, flexible: bool, pos: int) -> int:
        tagged = {}
        for f in fields:
            if not in_range(version, f.versions):
                continue
            if f.tag is not None:
                tagged[f.tag] = f
                continue
            pos = self.field(f, version, flexible, pos)
        if flexible:
            start = pos
            count, pos = self.uvarint(pos)
            self.spans.append(Span("tags", start, pos - start, "", "uvarint", "tags", count))
            for _ in range(count):
                tag, pos = self.uvarint(pos)
                size, pos = self.uvarint(pos)
                self.need(pos, size)
                f = tagged.get(tag)
                if f is not None:
                    end = self.field(f, version, flexible, pos)
                    if end != pos + size:
                        raise WalkError(f"tag {tag} size mismatch")
                pos += size
        return pos


@dataclass(slots=True)
class Walked:
    api_key: int
    version: int
    header_end: int
    spans: list[Span]
    trailing: int  # bytes after the body (the broker tolerates them, as Kafka does)


def walk_request(frame: bytes) -> Walked:
    """Spans of a whole request frame (header and body, without the size prefix)."""
    if len(frame) < 8:
        raise WalkError("shorter than a header")
    api_key, version = struct.unpack_from(">hh", frame, 0)
    if api_key not in codec.REQUESTS:
        raise WalkError(f"unknown api key {api_key}")
    message = codec.REQUESTS[api_key]
    if not in_range(version, message.valid):
        raise WalkError(f"version {version} outside {message.valid}")
    w = _Walker(frame)
    header_version = codec.request_header_version(api_key, version)
    header = MESSAGES["RequestHeader"]
    pos = w.struct(header.fields, header_version, header_version >= 2, 0)
    header_end = pos
    pos = w.struct(message.fields, version, codec.is_flexible(message, version), pos)
    return Walked(api_key, version, header_end, w.spans, len(frame) - pos)
