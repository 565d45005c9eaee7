"""Encode and decode every Kafka message at every version, driven by the generated schema.

Each (message, version) pair is compiled once, on first use, into a reader and a writer: every
struct's plan is written out as the source of one Python function (no loop over the plan per
message), whose code object is shared by every struct with the same source; the
rules of flexible versions (compact strings/arrays/bytes as unsigned varints, tagged fields
at the end of every struct, nullable structs) live here and nowhere else.

Decoded messages are ``Struct`` objects with snake_case attributes; fields a version does
not carry are filled with their declared defaults, so handlers read one shape for every
version. Writers accept ``Struct``s, plain objects or dicts; a missing field is its default.
The ``records`` type is opaque: decoded as a zero-copy memoryview, encoded from bytes-like
objects or ``FileRegion``s, which stay separate parts of the output so the network layer can
send them with sendfile. Sans-I/O: no sockets, no asyncio.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Mapping
from functools import cache
from types import SimpleNamespace
from typing import Any

from minibroker.errors import ProtocolViolation
from minibroker.protocol.declarations import ZERO_UUID, F, Message, in_range
from minibroker.protocol.file_region import FileRegion
from minibroker.protocol.schema import MESSAGES

Struct = SimpleNamespace

_MISSING = object()

# (api_key) -> Message
_REQUEST_NAMES = {key: name for name, kind, key in MESSAGES.kinds() if kind == "request"}
_RESPONSE_NAMES = {key: name for name, kind, key in MESSAGES.kinds() if kind == "response"}
API_NAMES: dict[int, str] = {k: name[: -len("Request")] for k, name in _REQUEST_NAMES.items()}


class _ByApiKey(Mapping):
    """api key -> Message, declarations built on first use."""

    def __init__(self, names: dict[int, str]):
        self._names = names

    def __getitem__(self, api_key: int) -> Message:
        return MESSAGES[self._names[api_key]]

    def __iter__(self):
        return iter(self._names)

    def __len__(self) -> int:
        return len(self._names)


REQUESTS: Mapping[int, Message] = _ByApiKey(_REQUEST_NAMES)
RESPONSES: Mapping[int, Message] = _ByApiKey(_RESPONSE_NAMES)
API_KEYS: dict[str, int] = {v: k for k, v in API_NAMES.items()}

_FIXED = {
    "int8": struct.Struct(">b"),
    "int16": struct.Struct(">h"),
    "uint16": struct.Struct(">H"),
    "int32": struct.Struct(">i"),
    "int64": struct.Struct(">q"),
    "float64": struct.Struct(">d"),
}
_I8, _I16, _I32 = _FIXED["int8"], _FIXED["int16"], _FIXED["int32"]


# ---------------------------------------------------------------------------------------------
# unsigned varints (flexible versions' lengths and tags)


def read_uvarint(buf, pos: int) -> tuple[int, int]:
    result = 0
    shift = 0
    while True:
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos
        shift += 7
        if shift > 35:
            raise ProtocolViolation("unsigned varint longer than 5 bytes")


def write_uvarint(out: bytearray, value: int) -> None:
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)


# ---------------------------------------------------------------------------------------------
# the output: bytes, with file regions kept as separate parts


class Writer:
    """Accumulates encoded bytes; ``FileRegion`` values become parts of their own."""

    __slots__ = ("buf", "parts", "size_of_parts")

    def __init__(self) -> None:
        self.buf = bytearray()
        self.parts: list[bytes | FileRegion] = []
        self.size_of_parts = 0

    def add_region(self, region: FileRegion) -> None:
        if self.buf:
            self.parts.append(bytes(self.buf))
            self.size_of_parts += len(self.buf)
            self.buf = bytearray()
        self.parts.append(region)
        self.size_of_parts += region.size

    def finish(self) -> list[bytes | FileRegion]:
        if self.buf or not self.parts:
            self.parts.append(bytes(self.buf))
            self.size_of_parts += len(self.buf)
            self.buf = bytearray()
        return self.parts

    def __len__(self) -> int:
        return self.size_of_parts + len(self.buf)


Reader = Callable[[Any, int], tuple[Any, int]]
WriteFn = Callable[[Writer, Any], None]


def _need(buf, pos: int, n: int) -> None:
    if n < 0 or pos + n > len(buf):
        raise ProtocolViolation(f"truncated: need {n} bytes at {pos}, have {len(buf) - pos}")


def _type_zero(f: F) -> Any:
    if f.default is not ...:
        return f.default
    t = f.type
    if t.startswith("[]"):
        return []
    return {
        "bool": False,
        "string": "",
        "bytes": b"",
        "records": None,
        "uuid": ZERO_UUID,
        "float64": 0.0,
        "struct": None,
    }.get(t, 0)


def default_value(f: F, version: int) -> Any:
    """The value a field takes when a version does not carry it (or the sender left it out)."""
    if f.type == "struct" and f.default is ...:
        if f.nullable and in_range(version, f.nullable):
            return None
        return _default_struct(f.fields, version)
    value = _type_zero(f)
    return list(value) if isinstance(value, list) else value


def _default_struct(fields: tuple[F, ...], version: int) -> Struct:
    return Struct(**{f.name: default_value(f, version) for f in fields})


# ---------------------------------------------------------------------------------------------
# readers


def _fixed_reader(s: struct.Struct) -> Reader:
    size = s.size
    unpack = s.unpack_from

    def read(buf, pos):
        if pos + size > len(buf):
            raise ProtocolViolation("truncated fixed-size field")
        return unpack(buf, pos)[0], pos + size

    return read


def _read_bool(buf, pos):
    _need(buf, pos, 1)
    return buf[pos] != 0, pos + 1


def _read_uuid(buf, pos):
    _need(buf, pos, 16)
    return bytes(buf[pos : pos + 16]), pos + 16


def _length_reader(compact: bool, wide: bool) -> Reader:
    """Lengths: compact = uvarint(n + 1), 0 is null; else int16 (strings) or int32 (bytes, arrays)."""
    if compact:

        def read(buf, pos):
            b = buf[pos]
            if b < 0x80:  # one byte: every length below 127
                return b - 1, pos + 1
            n, pos = read_uvarint(buf, pos)
            return n - 1, pos

        return read
    return _fixed_reader(_I32 if wide else _I16)


def _utf8(view) -> str:
    try:
        return str(view, "utf-8")
    except UnicodeDecodeError as e:
        raise ProtocolViolation("string is not valid UTF-8") from e


def _sized_reader(compact: bool, nullable: bool, wide: bool, what: str, convert) -> Reader:
    """A length-prefixed value (string, bytes, records): ``convert`` turns its bytes into the value."""
    read_len = _length_reader(compact, wide)

    def read(buf, pos):
        n, pos = read_len(buf, pos)
        if n < 0:
            if not nullable:
                raise ProtocolViolation(f"null for a non-nullable {what}")
            return None, pos
        _need(buf, pos, n)
        return convert(memoryview(buf)[pos : pos + n]), pos + n

    return read


def _string_reader(compact: bool, nullable: bool) -> Reader:
    return _sized_reader(compact, nullable, False, "string", _utf8)


def _bytes_reader(compact: bool, nullable: bool, zero_copy: bool) -> Reader:
    # records stay a view of the request (zero copy); other bytes fields are copied out
    return _sized_reader(compact, nullable, True, "bytes", (lambda view: view) if zero_copy else bytes)


def _array_reader(compact: bool, nullable: bool, elem: Reader) -> Reader:
    read_len = _length_reader(compact, wide=True)

    def read(buf, pos):
        n, pos = read_len(buf, pos)
        if n < 0:
            if not nullable:
                raise ProtocolViolation("null for a non-nullable array")
            return None, pos
        if n > len(buf) - pos:  # every element takes at least one byte: refuse absurd counts early
            raise ProtocolViolation(f"array of {n} elements in {len(buf) - pos} bytes")
        out = []
        append = out.append
        for _ in range(n):
            v, pos = elem(buf, pos)
            append(v)
        return out, pos

    return read


def _primitive_reader(t: str, compact: bool, nullable: bool) -> Reader:
    if t in _FIXED:
        return _fixed_reader(_FIXED[t])
    if t == "bool":
        return _read_bool
    if t == "uuid":
        return _read_uuid
    if t == "string":
        return _string_reader(compact, nullable)
    if t == "bytes":
        return _bytes_reader(compact, nullable, zero_copy=False)
    if t == "records":
        return _bytes_reader(compact, True, zero_copy=True)
    raise ValueError(f"unknown type {t}")


def _field_reader(f: F, version: int, flexible: bool) -> Reader:
    compact = flexible if f.flexible is None else in_range(version, f.flexible)
    nullable = in_range(version, f.nullable)
    if f.type == "struct":
        inner = _struct_reader(f.fields, version, flexible)
        if not nullable:
            return inner

        def read_nullable(buf, pos):
            _need(buf, pos, 1)
            marker = _I8.unpack_from(buf, pos)[0]
            if marker < 0:
                return None, pos + 1
            return inner(buf, pos + 1)

        return read_nullable
    if f.type == "[]struct":
        return _array_reader(compact, nullable, _struct_reader(f.fields, version, flexible))
    if f.type.startswith("[]"):
        return _array_reader(compact, nullable, _primitive_reader(f.type[2:], compact, False))
    return _primitive_reader(f.type, compact, nullable)


def _fixed_format(f: F, version: int) -> str | None:
    """The struct format of a fixed-size field at ``version`` (None for variable-size ones)."""
    if f.tag is not None or not in_range(version, f.versions):
        return None
    return {"int8": "b", "int16": "h", "uint16": "H", "int32": "i", "int64": "q", "float64": "d"}.get(f.type)


def _absent_defaults(absent: list[tuple[str, F]], version: int) -> tuple[dict, list[tuple[str, F]]]:
    """Split defaults into shared immutable values and fields that need a fresh object per message."""
    shared, fresh = {}, []
    for name, f in absent:
        value = default_value(f, version)
        if isinstance(value, (list, Struct)):
            fresh.append((name, f))
        else:
            shared[name] = value
    return shared, fresh


@cache
def _code(source: str):
    """A generated reader's or writer's source, compiled: the same struct at many versions, and
    structs alike, share one compilation (it costs more than the rest of building a codec)."""
    return compile(source, "<minibroker.protocol.codec>", "exec")


def _struct_reader(fields: tuple[F, ...], version: int, flexible: bool) -> Reader:
    # plan entries: (names, reader, n) -- n > 0: one struct.unpack for n consecutive fixed-size fields
    plan: list[tuple] = []
    absent: list[tuple[str, F]] = []
    tagged: dict[int, tuple[str, Reader]] = {}
    run_names: list[str] = []
    run_format = ""

    def close_run():
        nonlocal run_names, run_format
        if run_names:
            packed = struct.Struct(">" + run_format)
            plan.append((tuple(run_names), packed, len(run_names), None))
            run_names, run_format = [], ""

    for f in fields:
        fmt = _fixed_format(f, version)
        if fmt is not None:
            run_names.append(f.name)
            run_format += fmt
            continue
        close_run()
        if not in_range(version, f.versions):
            absent.append((f.name, f))
        elif f.tag is not None:
            absent.append((f.name, f))  # until the tagged section says otherwise
            if flexible:
                tagged[f.tag] = (f.name, _field_reader(f, version, flexible))
        else:  # strings and arrays of structs are read inline (_inline_reader): no reader to build
            reader = None if f.type in _INLINE_TYPES else _field_reader(f, version, flexible)
            plan.append((f.name, reader, 0, f))
    close_run()
    shared_defaults, fresh_defaults = _absent_defaults(absent, version)
    # The plan is compiled into the source of one function (no loop over the plan, no dict per
    # message): decoding is most of a small request's cost in the codec.
    env: dict[str, Any] = {"Struct": Struct, "PV": ProtocolViolation, "read_tags": _read_tags,
                           "TAGGED": tagged, "default_value": default_value, "I16": _I16.unpack_from,
                           "I32": _I32.unpack_from, "read_uvarint": read_uvarint, "utf8": _utf8}
    lines = ["def read(buf, pos):"]
    values: list[tuple[str, str]] = [(name, f"SHARED[{name!r}]") for name in shared_defaults]
    env["SHARED"] = shared_defaults
    for i, (name, f) in enumerate(fresh_defaults):
        env[f"f{i}"] = f
        values.append((name, f"default_value(f{i}, {version})"))
    for i, (name, reader, n, f) in enumerate(plan):
        inline = None if n else _inline_reader(f, version, flexible, f"v{i}", f"e{i}", env)
        if inline is not None:
            lines += inline
            values.append((name, f"v{i}"))
        elif n:
            env[f"u{i}"] = reader.unpack_from
            targets = [f"v{i}_{j}" for j in range(n)]
            lines += [f"    if pos + {reader.size} > len(buf):",
                      "        raise PV('truncated fixed-size fields')",
                      f"    {', '.join(targets)}, = u{i}(buf, pos)",
                      f"    pos += {reader.size}"]
            values += zip(name, targets, strict=True)
        else:
            env[f"r{i}"] = reader
            lines.append(f"    v{i}, pos = r{i}(buf, pos)")
            values.append((name, f"v{i}"))
    lines.append(f"    result = Struct({', '.join(f'{name}={value}' for name, value in values)})")
    if flexible:
        lines += ["    if pos < len(buf) and buf[pos] == 0:  # an empty tag buffer: the common case",
                  "        pos += 1",
                  "    else:",
                  "        pos = read_tags(buf, pos, TAGGED, result.__dict__)"]
    lines.append("    return result, pos")
    exec(_code("\n".join(lines)), env)  # the source is built above from the schema's names only
    return env["read"]


_INLINE_TYPES = ("string", "[]struct")


def _inline_reader(f: F, version: int, flexible: bool, target: str, elem: str, env: dict) -> list[str] | None:
    """Source lines that read field ``f`` into ``target`` in place of a call to its reader, for the
    fields most messages are made of: strings and arrays of structs (whose element reader goes into
    ``env`` as ``elem``). None for any other field. Same checks and messages as the readers above."""
    if f.type not in _INLINE_TYPES:
        return None
    compact = flexible if f.flexible is None else in_range(version, f.flexible)
    nullable = in_range(version, f.nullable)
    what = "string" if f.type == "string" else "array"
    if compact:
        lines = ["    n = buf[pos]",
                 "    if n < 0x80:  # one byte: every length below 127",
                 "        n -= 1",
                 "        pos += 1",
                 "    else:",
                 "        n, pos = read_uvarint(buf, pos)",
                 "        n -= 1"]
    else:
        width, unpack = (2, "I16") if f.type == "string" else (4, "I32")
        lines = [f"    if pos + {width} > len(buf):",
                 "        raise PV('truncated fixed-size field')",
                 f"    n, = {unpack}(buf, pos)",
                 f"    pos += {width}"]
    null = f"{target} = None" if nullable else f"raise PV('null for a non-nullable {what}')"
    lines += ["    if n < 0:", f"        {null}", "    else:"]
    if f.type == "string":
        return [*lines,
                "        if pos + n > len(buf):",
                "            raise PV(f'truncated: need {n} bytes at {pos}, have {len(buf) - pos}')",
                f"        {target} = utf8(memoryview(buf)[pos:pos + n])",
                "        pos += n"]
    env[elem] = _struct_reader(f.fields, version, flexible)
    return [*lines,
            "        if n > len(buf) - pos:  # every element takes at least one byte: refuse absurd counts",
            "            raise PV(f'array of {n} elements in {len(buf) - pos} bytes')",
            f"        {target} = []",
            "        for _ in range(n):",
            f"            x, pos = {elem}(buf, pos)",
            f"            {target}.append(x)"]


def _read_tags(buf, pos: int, tagged: dict[int, tuple[str, Reader]], values: dict) -> int:
    """A struct's tagged fields: the known ones into ``values``, the others skipped."""
    count, pos = read_uvarint(buf, pos)
    for _ in range(count):
        tag, pos = read_uvarint(buf, pos)
        size, pos = read_uvarint(buf, pos)
        _need(buf, pos, size)
        known = tagged.get(tag)
        if known is not None:
            end = pos + size
            values[known[0]], pos = known[1](memoryview(buf)[:end], pos)
            if pos != end:
                raise ProtocolViolation(f"tagged field {tag} size mismatch")
        else:
            pos += size  # unknown tags are skipped, as the protocol requires
    return pos


# ---------------------------------------------------------------------------------------------
# writers


def _fixed_writer(s: struct.Struct) -> WriteFn:
    pack = s.pack

    def write(w: Writer, v):
        w.buf += pack(v)

    return write


def _write_bool(w: Writer, v):
    w.buf.append(1 if v else 0)


def _write_uuid(w: Writer, v):
    if hasattr(v, "bytes") and not isinstance(v, (bytes, bytearray)):  # a uuid.UUID
        v = v.bytes
    if v is None:
        v = ZERO_UUID
    if len(v) != 16:
        raise ValueError("uuid must be 16 bytes")
    w.buf += v


def _length_writer(compact: bool, wide: bool) -> WriteFn:
    if compact:

        def write(w: Writer, n: int):
            if n < 126:  # one byte: every length below 126 (and null, -1)
                w.buf.append(n + 1)
            else:
                write_uvarint(w.buf, n + 1)

        return write
    return _fixed_writer(_I32 if wide else _I16)


def _string_writer(compact: bool) -> WriteFn:
    write_len = _length_writer(compact, wide=False)

    def write(w: Writer, v):
        if v is None:
            write_len(w, -1)
            return
        data = v.encode("utf-8")
        write_len(w, len(data))
        w.buf += data

    return write


def _bytes_writer(compact: bool) -> WriteFn:
    write_len = _length_writer(compact, wide=True)

    def write(w: Writer, v):
        if v is None:
            write_len(w, -1)
            return
        if isinstance(v, FileRegion):
            write_len(w, v.size)
            w.add_region(v)
            return
        if isinstance(v, (list, tuple)):  # a sequence of regions/bytes sent back to back
            write_len(w, sum(len(p) for p in v))
            for p in v:
                if isinstance(p, FileRegion):
                    w.add_region(p)
                else:
                    w.buf += p
            return
        write_len(w, len(v))
        w.buf += v

    return write


def _array_writer(compact: bool, elem: WriteFn) -> WriteFn:
    write_len = _length_writer(compact, wide=True)

    def write(w: Writer, v):
        if v is None:
            write_len(w, -1)
            return
        write_len(w, len(v))
        for item in v:
            elem(w, item)

    return write


def _primitive_writer(t: str, compact: bool) -> WriteFn:
    if t in _FIXED:
        return _fixed_writer(_FIXED[t])
    if t == "bool":
        return _write_bool
    if t == "uuid":
        return _write_uuid
    if t == "string":
        return _string_writer(compact)
    if t in ("bytes", "records"):
        return _bytes_writer(compact)
    raise ValueError(f"unknown type {t}")


def _field_writer(f: F, version: int, flexible: bool) -> WriteFn:
    compact = flexible if f.flexible is None else in_range(version, f.flexible)
    nullable = in_range(version, f.nullable)
    if f.type == "struct":
        inner = _struct_writer(f.fields, version, flexible)
        if not nullable:

            def write_struct(w: Writer, v):
                inner(w, v if v is not None else _default_struct(f.fields, version))

            return write_struct

        def write_nullable(w: Writer, v):
            if v is None:
                w.buf.append(0xFF)
            else:
                w.buf.append(1)
                inner(w, v)

        return write_nullable
    if f.type == "[]struct":
        return _array_writer(compact, _struct_writer(f.fields, version, flexible))
    if f.type.startswith("[]"):
        return _array_writer(compact, _primitive_writer(f.type[2:], compact))
    return _primitive_writer(f.type, compact)


def _struct_writer(fields: tuple[F, ...], version: int, flexible: bool) -> WriteFn:
    # plan entries: (names, defaults, writer, packed) -- packed: one struct.pack for consecutive fixed fields
    plan: list[tuple] = []
    tagged: list[tuple[int, str, Any, WriteFn]] = []
    run: list[F] = []
    run_format = ""

    def close_run():
        nonlocal run, run_format
        if run:
            plan.append(
                (
                    tuple(f.name for f in run),
                    tuple(default_value(f, version) for f in run),
                    None,
                    struct.Struct(">" + run_format),
                )
            )
            run, run_format = [], ""

    for f in fields:
        if not in_range(version, f.versions):
            continue
        fmt = _fixed_format(f, version)
        if fmt is not None:
            run.append(f)
            run_format += fmt
            continue
        close_run()
        if f.tag is not None:
            if flexible:
                tagged.append((f.tag, f.name, f, _field_writer(f, version, flexible)))
        else:
            plan.append((f.name, f, _field_writer(f, version, flexible), None))
    close_run()
    tagged.sort(key=lambda t: t[0])
    # defaults computed once: a field equal to its default is not sent (lists compare by value)
    tagged = [(tag, name, default_value(f, version), writer) for tag, name, f, writer in tagged]

    # Compiled into the source of one function, as the reader is. A field's default is computed
    # once: writers never change the values they are given.
    env: dict[str, Any] = {"write_tags": _write_tags, "TAGGED": tagged}
    lines = ["def write(w, obj):",
             "    get = (obj if isinstance(obj, dict) else obj.__dict__).get"]
    for i, (name, f, writer, packed) in enumerate(plan):
        if packed is not None:
            env[f"p{i}"] = packed.pack
            env.update((f"d{i}_{j}", default) for j, default in enumerate(f))
            args = ", ".join(f"get({n!r}, d{i}_{j})" for j, n in enumerate(name))
            lines.append(f"    w.buf += p{i}({args})")
        else:
            env[f"w{i}"] = writer
            env[f"d{i}"] = default_value(f, version)
            lines.append(f"    w{i}(w, get({name!r}, d{i}))")
    if flexible:
        if tagged:
            lines.append("    write_tags(w, get, TAGGED)")
        else:
            lines.append("    w.buf.append(0)  # an empty tag buffer: the common case, no work")
    exec(_code("\n".join(lines)), env)  # the source is built above from the schema's names only
    return env["write"]


def _write_tags(w: Writer, get, tagged: list[tuple[int, str, Any, WriteFn]]) -> None:
    """A struct's tagged fields: those set to other than their default, in tag order."""
    present = []
    for tag, name, default, writer in tagged:
        v = get(name, _MISSING)
        if v is _MISSING or v is None or v == default:
            continue
        sub = Writer()
        writer(sub, v)
        present.append((tag, sub.finish()))
    write_uvarint(w.buf, len(present))
    for tag, parts in present:
        write_uvarint(w.buf, tag)
        write_uvarint(w.buf, sum(len(p) for p in parts))
        for p in parts:
            if isinstance(p, FileRegion):
                w.add_region(p)
            else:
                w.buf += p


# ---------------------------------------------------------------------------------------------
# compiled codecs per message and version


class UnsupportedVersion(ProtocolViolation):
    """A version outside the schema's valid range."""


def is_flexible(message: Message, version: int) -> bool:
    return in_range(version, message.flexible)


def _message(name: str, version: int) -> Message:
    message = MESSAGES[name]
    if not in_range(version, message.valid):
        raise UnsupportedVersion(f"{name} v{version} is outside {message.valid}")
    return message


# Reader and writer built apart, each on its first use: a broker decodes requests and encodes
# responses, never the other way round, and building one costs its source's compilation.
@cache
def _reader(name: str, version: int) -> Reader:
    message = _message(name, version)
    return _struct_reader(message.fields, version, is_flexible(message, version))


@cache
def _writer(name: str, version: int) -> WriteFn:
    message = _message(name, version)
    return _struct_writer(message.fields, version, is_flexible(message, version))


def decode(name: str, version: int, buf, pos: int = 0, *, exact: bool = True) -> Struct:
    """Decode message ``name`` at ``version`` from ``buf[pos:]``."""
    reader = _reader(name, version)
    try:
        value, end = reader(buf, pos)
    except (IndexError, struct.error) as e:
        raise ProtocolViolation(f"{name} v{version}: truncated ({e})") from e
    if exact and end != len(buf):
        raise ProtocolViolation(f"{name} v{version}: {len(buf) - end} trailing bytes")
    return value


def encode_into(w: Writer, name: str, version: int, obj: Any) -> None:
    _writer(name, version)(w, obj)


def encode(name: str, version: int, obj: Any) -> bytes:
    """Encode to bytes (file regions are read; for tests, tools and clients)."""
    w = Writer()
    encode_into(w, name, version, obj)
    return b"".join(p.read() if isinstance(p, FileRegion) else p for p in w.finish())


# ---------------------------------------------------------------------------------------------
# headers and frames

_HEADER_FIXED = struct.Struct(">hhi")


class RequestHeader(SimpleNamespace):
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None


_REQUEST_FLEXIBLE = {key: MESSAGES.flexible_versions(name) for key, name in _REQUEST_NAMES.items()}
_RESPONSE_FLEXIBLE = {key: MESSAGES.flexible_versions(name) for key, name in _RESPONSE_NAMES.items()}
_CORRELATION = struct.Struct(">ii")  # size placeholder, correlation id


def request_header_version(api_key: int, api_version: int) -> int:
    if in_range(api_version, _REQUEST_FLEXIBLE.get(api_key)):
        return 2
    if api_key == 7 and api_version == 0:  # ControlledShutdown v0 predates client ids
        return 0
    return 1


def response_header_version(api_key: int, api_version: int) -> int:
    if api_key == 18:  # ApiVersions answers with header v0 always, so clients can read errors
        return 0
    return 1 if in_range(api_version, _RESPONSE_FLEXIBLE.get(api_key)) else 0


def decode_request_header(buf) -> tuple[RequestHeader, int]:
    """Read the request header at the start of ``buf``; returns it and where the body starts."""
    if len(buf) < 8:
        raise ProtocolViolation("request shorter than its header")
    api_key, api_version, correlation_id = _HEADER_FIXED.unpack_from(buf, 0)
    header_version = request_header_version(api_key, api_version)
    try:
        header, end = _reader("RequestHeader", header_version)(buf, 0)
    except (IndexError, struct.error) as e:
        raise ProtocolViolation(f"truncated request header ({e})") from e
    return RequestHeader(
        api_key=api_key, api_version=api_version, correlation_id=correlation_id, client_id=header.client_id
    ), end


def encode_request(
    api_key: int, api_version: int, correlation_id: int, body: Any, client_id: str | None = "minibroker"
) -> bytes:
    """A whole size-prefixed request frame (for our own tools, the healthcheck and tests)."""
    w = Writer()
    header = {
        "request_api_key": api_key,
        "request_api_version": api_version,
        "correlation_id": correlation_id,
        "client_id": client_id,
    }
    encode_into(w, "RequestHeader", request_header_version(api_key, api_version), header)
    encode_into(w, REQUESTS[api_key].name, api_version, body)
    data = b"".join(p.read() if isinstance(p, FileRegion) else p for p in w.finish())
    return _I32.pack(len(data)) + data


def encode_response(
    api_key: int, api_version: int, correlation_id: int, body: Any
) -> list[bytes | FileRegion]:
    """A whole size-prefixed response frame as parts; file regions stay separate for sendfile."""
    w = Writer()
    w.buf += _CORRELATION.pack(0, correlation_id)  # size patched below; header v0 is the correlation id
    if response_header_version(api_key, api_version):
        w.buf.append(0)  # header v1: an empty tag buffer
    encode_into(w, _RESPONSE_NAMES[api_key], api_version, body)
    total = len(w) - 4
    if not w.parts:  # one part: patch the size in place
        _I32.pack_into(w.buf, 0, total)
        return w.finish()
    parts = w.finish()
    first = bytearray(parts[0])
    _I32.pack_into(first, 0, total)
    parts[0] = bytes(first)
    return parts


def decode_response(api_key: int, api_version: int, frame) -> tuple[int, Struct]:
    """Decode a response frame (without its size prefix) -> (correlation_id, body)."""
    header_version = response_header_version(api_key, api_version)
    reader = _reader("ResponseHeader", header_version)
    header, pos = reader(frame, 0)
    return header.correlation_id, decode(RESPONSES[api_key].name, api_version, frame, pos)


def uuid_from_bytes(b: bytes):
    import uuid

    return uuid.UUID(bytes=bytes(b))
