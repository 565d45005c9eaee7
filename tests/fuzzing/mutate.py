"""Mutators: from seed frames to hostile exchanges.

Every choice goes through a ``Chooser`` (``integer(lo, hi)``), so the same code runs from a seeded
``random.Random`` (``RandomChooser``, scripts/fuzz.py) and from a Hypothesis ``data`` object
(tests/test_fuzz.py, which then shrinks a failing exchange to a small one). Choice 0 is always the
plainest option, so shrinking heads for plain frames.

An ``Exchange`` is the bytes one connection writes (one or more size-prefixed frames, in one write or
several) and a description of what was done to them. Mutations:

- byte level: bit flips, bytes set to boundary values, inserts, deletes, truncation, a duplicated
  slice, a body moved under another frame's header;
- structure aware (from ``walk.walk_request``'s spans): length and count prefixes (int16, int32,
  compact uvarint; -1, 0, off by one, INT_MAX, overlong varints), integers set to boundary values,
  uuids, strings swapped for odd ones (invalid UTF-8, long, the internal topic), tag buffers with
  unknown, duplicated or oversized tags, the header's API key and version out of range, odd client
  ids;
- records: a batch's header fields set to boundary values, its records section mutated (through the
  codec for compressed batches: inflate, mutate, deflate), its compressed payload mutated, its codec
  bits changed, batches dropped, doubled or cut, garbage after the last one; the CRC (CRC-32C for v2,
  CRC-32 for v0/v1) is recomputed after each so that the mutation reaches the record walk, the
  lengths around it (batch length, records field, frame size) are fixed up;
- decompression bombs: a records field replaced by a batch of zeros compressed with gzip, snappy,
  lz4 or zstd (one huge record, many empty records, raw zeros; v2 and a v1 wrapper);
- frame level: the size prefix corrupted (0, negative, too large, off by some), several frames
  pipelined in one write, a frame written a few bytes at a time.
"""

from __future__ import annotations

import random
import struct
import zlib
from dataclasses import dataclass, field

import crc32c

from minibroker.records import Compression, compress, decompress
from minibroker.records.varint import encode_varint

from fuzzing.corpus import SeedFrame
from fuzzing.walk import Span, WalkError, walk_request

INT_MAX = 2**31 - 1
INT_MIN = -(2**31)
LONG_MAX = 2**63 - 1
LONG_MIN = -(2**63)
SMALL_DECOMPRESS_LIMIT = 64 << 20  # what the fuzzer itself inflates when mutating a compressed batch


class Chooser:
    """Choices for the mutators; subclasses implement ``integer``."""

    def integer(self, lo: int, hi: int) -> int:  # pragma: no cover - interface
        raise NotImplementedError

    def index(self, n: int) -> int:
        return self.integer(0, n - 1)

    def choice(self, seq):
        return seq[self.index(len(seq))]

    def chance(self, per_thousand: int) -> bool:
        """True with probability per_thousand / 1000 (False is the shrink target)."""
        return self.integer(0, 999) >= 1000 - per_thousand

    def blob(self, n: int) -> bytes:
        return bytes(self.integer(0, 255) for _ in range(n))


class RandomChooser(Chooser):
    def __init__(self, seed):
        self.rng = random.Random(seed)

    def integer(self, lo: int, hi: int) -> int:
        return self.rng.randint(lo, hi)

    def blob(self, n: int) -> bytes:
        return self.rng.randbytes(n)


class HypothesisChooser(Chooser):
    def __init__(self, data):
        from hypothesis import strategies as st

        self.data = data
        self._st = st

    def integer(self, lo: int, hi: int) -> int:
        return self.data.draw(self._st.integers(lo, hi))

    def blob(self, n: int) -> bytes:
        return self.data.draw(self._st.binary(min_size=n, max_size=n))


@dataclass
class Exchange:
    """What one connection writes: ``chunks`` in order (each one ``sendall``)."""

    chunks: list[bytes]
    notes: list[str] = field(default_factory=list)
    frames: int = 1  # request frames in it (whole, cut or with a broken size)

    @property
    def data(self) -> bytes:
        return b"".join(self.chunks)


# ---------------------------------------------------------------------------------------------- helpers


def interesting_int(c: Chooser, width: int, current: int) -> int:
    bits = width * 8
    lo, hi = -(1 << (bits - 1)), (1 << (bits - 1)) - 1
    options = [
        current + 1,
        current - 1,
        -1,
        0,
        1,
        hi,
        lo,
        hi - 1,
        1 << (bits - 2),
        127,
        255,
        65535,
        1 << 20,
        1 << 24,
    ]
    i = c.index(len(options) + 1)
    if i < len(options):
        v = options[i]
    else:
        v = c.integer(lo, hi)
    return max(lo, min(hi, v))


def _pack_int(width: int, value: int) -> bytes:
    bits = width * 8
    value = (value + (1 << (bits - 1))) % (1 << bits) - (1 << (bits - 1))  # wraps, as a C int would
    return value.to_bytes(width, "big", signed=True)


def _uvarint(n: int) -> bytes:
    out = bytearray()
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _replace(buf: bytes, offset: int, size: int, new: bytes) -> bytes:
    return buf[:offset] + new + buf[offset + size :]


def encode_length(encoding: str, n: int) -> bytes:
    """A length prefix in its encoding; ``n`` is the length (-1 null), compact adds one."""
    if encoding == "i16":
        return _pack_int(2, max(-32768, min(32767, n)))
    if encoding == "i32":
        return _pack_int(4, max(INT_MIN, min(INT_MAX, n)))
    return _uvarint(max(0, n + 1) & 0xFFFFFFFF)


# ------------------------------------------------------------------------------------------ byte level


def m_bitflip(c: Chooser, frame: bytes) -> tuple[bytes, str]:
    buf = bytearray(frame)
    flips = []
    for _ in range(c.integer(1, 4)):
        i = c.index(len(buf))
        bit = c.integer(0, 7)
        buf[i] ^= 1 << bit
        flips.append(f"{i}.{bit}")
    return bytes(buf), "bitflip " + ",".join(flips)


BOUNDARY_BYTES = [0x00, 0xFF, 0x7F, 0x80, 0x01, 0xFE]


def m_byteset(c: Chooser, frame: bytes) -> tuple[bytes, str]:
    buf = bytearray(frame)
    where = []
    for _ in range(c.integer(1, 4)):
        i = c.index(len(buf))
        buf[i] = c.choice(BOUNDARY_BYTES) if not c.chance(300) else c.integer(0, 255)
        where.append(str(i))
    return bytes(buf), "byteset " + ",".join(where)


def m_insert(c: Chooser, frame: bytes) -> tuple[bytes, str]:
    i = c.integer(0, len(frame))
    n = c.integer(1, 16)
    data = bytes([c.choice(BOUNDARY_BYTES)]) * n if not c.chance(400) else c.blob(n)
    return frame[:i] + data + frame[i:], f"insert {n} at {i}"


def m_delete(c: Chooser, frame: bytes) -> tuple[bytes, str]:
    i = c.index(len(frame))
    n = c.integer(1, 16)
    return frame[:i] + frame[i + n :], f"delete {n} at {i}"


def m_truncate(c: Chooser, frame: bytes) -> tuple[bytes, str]:
    i = c.integer(0, len(frame) - 1)
    return frame[:i], f"truncate to {i}"


def m_duplicate(c: Chooser, frame: bytes) -> tuple[bytes, str]:
    i = c.index(len(frame))
    n = c.integer(1, min(64, len(frame) - i))
    times = c.integer(1, 8)
    return frame[: i + n] + frame[i : i + n] * times + frame[i + n :], f"duplicate {n}x{times} at {i}"


# --------------------------------------------------------------------------------------- structure aware


def _spans(frame: bytes, kind: str | None = None) -> list[Span]:
    try:
        spans = walk_request(frame).spans
    except WalkError:
        return []
    return [s for s in spans if kind is None or s.kind == kind]


def m_length(c: Chooser, frame: bytes) -> tuple[bytes, str] | None:
    spans = _spans(frame, "len")
    if not spans:
        return None
    s = c.choice(spans)
    if s.encoding == "uvarint":
        options = [
            _uvarint(0),  # null
            _uvarint(1),  # empty
            _uvarint(max(0, s.value + 2)),  # one more
            _uvarint(max(0, s.value)),  # one less
            b"\xff\xff\xff\xff\x0f",  # 2^32 - 1
            b"\xff\xff\xff\xff\x07",  # INT_MAX
            b"\x80\x80\x80\x80\x00",  # overlong zero
            b"\xff\xff\xff\xff\xff\x01",  # six bytes
            _uvarint(s.value + 1)[:-1] + bytes([_uvarint(s.value + 1)[-1] | 0x80]) + b"\x00",  # overlong
            _uvarint(1 << 20),
        ]
        i = c.index(len(options))
        return _replace(frame, s.offset, s.size, options[i]), f"len {s.name} uvarint option {i}"
    width = 2 if s.encoding == "i16" else 4
    v = interesting_int(c, width, s.value)
    if c.chance(200):
        v = -2
    return _replace(frame, s.offset, s.size, _pack_int(width, v)), f"len {s.name} {s.encoding} {s.value}->{v}"


def m_int(c: Chooser, frame: bytes) -> tuple[bytes, str] | None:
    spans = _spans(frame, "int")
    if not spans:
        return None
    s = c.choice(spans)
    current = int.from_bytes(frame[s.offset : s.offset + s.size], "big", signed=True)
    v = interesting_int(c, s.size, current)
    return _replace(frame, s.offset, s.size, _pack_int(s.size, v)), f"int {s.name} {current}->{v}"


def m_uuid(c: Chooser, frame: bytes) -> tuple[bytes, str] | None:
    spans = _spans(frame, "uuid")
    if not spans:
        return None
    s = c.choice(spans)
    new = c.choice([bytes(16), b"\xff" * 16, b"\x00" * 15 + b"\x01"]) if not c.chance(300) else c.blob(16)
    return _replace(frame, s.offset, 16, new), f"uuid {s.name}"


ODD_STRINGS = [
    b"",
    b"__consumer_offsets",
    b"..",
    b".",
    b"a" * 249,
    b"a" * 250,
    b"b" * 1000,
    b"\xff\xfe\xfd",  # not UTF-8
    b"\xc3",  # a cut UTF-8 sequence
    b"nul\x00byte",
    "t\u00e9st-\u2603".encode(),
    b"fz-a",
    b"fz-b",
    b"with space",
    b"../../etc",
    b"-1",
]


def m_string(c: Chooser, frame: bytes) -> tuple[bytes, str] | None:
    """A string's value replaced (its length prefix rewritten to match)."""
    try:
        spans = walk_request(frame).spans
    except WalkError:
        return None
    strings = [
        (i, s) for i, s in enumerate(spans) if s.kind == "string" and i > 0 and spans[i - 1].kind == "len"
    ]
    if not strings:
        return None
    i, s = c.choice(strings)
    prefix = spans[i - 1]
    new = c.choice(ODD_STRINGS) if not c.chance(200) else c.blob(c.integer(1, 40))
    if c.chance(300):  # same length, so the prefix stays: bytes changed in place
        new = (new * (s.size // max(1, len(new)) + 1))[: s.size] if new else b"\xff" * s.size
        return _replace(frame, s.offset, s.size, new), f"string {s.name} in place"
    out = _replace(frame, s.offset, s.size, new)
    return _replace(
        out, prefix.offset, prefix.size, encode_length(prefix.encoding, len(new))
    ), f"string {s.name}"


def m_tags(c: Chooser, frame: bytes, valid: bool = False) -> tuple[bytes, str] | None:
    """A tag buffer given an unknown tag (``valid``: well formed, to be skipped), a known tag with
    garbage, a tag twice, an oversized tag or a count larger than the tags there are."""
    spans = _spans(frame, "tags")
    if not spans:
        return None
    s = c.choice(spans)
    # Tagged fields go right after the count; this writes a new count and one extra field first.
    if valid:
        tag = c.choice([1000, 10, 127, 128, 0x7FFF, 0xFFFFFFF])
        payload = c.blob(c.integer(0, 8))
        new = _uvarint(s.value + 1) + _uvarint(tag) + _uvarint(len(payload)) + payload
        return _replace(frame, s.offset, s.size, new), f"tags at {s.offset}: unknown tag {tag}"
    tag = c.choice([1000, 0, 1, 2, 3, 0x7FFFFFFF, 127, 128])
    size = c.choice([3, 0, 1 << 20, 0xFFFFFFFF, 2])
    payload = c.blob(3) if size != 0 else b""
    i = c.index(3)
    if i == 0:
        extra = _uvarint(tag) + _uvarint(size) + payload
        new = _uvarint(s.value + 1) + extra
    elif i == 1:
        new = _uvarint(s.value + c.choice([1, 2, 100, 1 << 28]))  # more tags than there are
    else:
        new = _uvarint(s.value + 2) + (_uvarint(tag) + _uvarint(3) + b"abc") * 2  # a tag twice
    return _replace(frame, s.offset, s.size, new), f"tags at {s.offset} option {i} tag {tag} size {size}"


UNSERVED_KEYS = [-1, 4, 5, 6, 7, 17, 24, 25, 26, 36, 50, 57, 67, 68, 74, 75, 90, 1000, 32767, -32768]


def m_header(c: Chooser, frame: bytes) -> tuple[bytes, str] | None:
    if len(frame) < 8:
        return None
    api_key, version = struct.unpack_from(">hh", frame, 0)
    i = c.index(6)
    if i == 0:
        v = c.choice([-1, version + 1, version + 2, 32767, -32768, c.integer(0, 20)])
        return frame[:2] + _pack_int(2, v) + frame[4:], f"version {version}->{v}"
    if i == 1:
        k = c.choice(UNSERVED_KEYS)
        return _pack_int(2, k) + frame[2:], f"api key {api_key}->{k}"
    if i == 2:
        k = c.choice(
            [
                0,
                1,
                2,
                3,
                8,
                9,
                10,
                11,
                12,
                13,
                14,
                15,
                16,
                18,
                19,
                20,
                21,
                22,
                23,
                32,
                33,
                35,
                37,
                42,
                44,
                47,
                60,
                61,
            ]
        )
        return _pack_int(2, k) + frame[2:], f"api key {api_key}->{k} (served, body of {api_key})"
    if i == 3:
        corr = c.choice([0, -1, INT_MAX, INT_MIN])
        return frame[:4] + _pack_int(4, corr) + frame[8:], f"correlation {corr}"
    # client id oddities (header v1/v2: int16 length + bytes right after the correlation id)
    if len(frame) < 10:
        return frame, "client id (frame too short)"
    old_len = struct.unpack_from(">h", frame, 8)[0]
    rest = frame[10 + max(0, old_len) :] if old_len >= 0 and 10 + old_len <= len(frame) else frame[10:]
    options = [
        (-1, b""),  # null
        (0, b""),
        (32767, b"x"),  # longer than the frame
        (3, b"\xff\xfe\xfd"),  # not UTF-8
        (5000, b"c" * 5000),
        (4, b"a\x00b\x00"),
        (-2, b""),
    ]
    n, data = c.choice(options)
    return frame[:8] + _pack_int(2, n) + data + rest, f"client id length {n}"


def m_transplant(c: Chooser, frame: bytes, seeds: list[SeedFrame]) -> tuple[bytes, str]:
    """This frame's header in front of another seed frame's body."""
    other = c.choice(seeds)
    try:
        w = walk_request(frame)
        ow = walk_request(other.frame)
    except WalkError:
        return frame, "transplant (no walk)"
    return frame[: w.header_end] + other.frame[
        ow.header_end :
    ], f"transplant body of {other.api_key} v{other.version}"


# ------------------------------------------------------------------------------------------------ records


def v2_crc_fix(batch: bytearray) -> None:
    if len(batch) >= 21:
        struct.pack_into(">I", batch, 17, crc32c.crc32c(bytes(batch[21:])))


def legacy_crc_fix(entry: bytearray) -> None:
    if len(entry) >= 16:
        struct.pack_into(">I", entry, 12, zlib.crc32(bytes(entry[16:])) & 0xFFFFFFFF)


def split_entries(records: bytes) -> tuple[list[bytes], bytes]:
    """Batches / messages by their size fields, and any bytes after the last whole one."""
    out, pos = [], 0
    while pos + 12 <= len(records):
        size = struct.unpack_from(">i", records, pos + 8)[0]
        if size < 0 or pos + 12 + size > len(records):
            break
        out.append(records[pos : pos + 12 + size])
        pos += 12 + size
    return out, records[pos:]


def _mutate_bytes(c: Chooser, data: bytes) -> tuple[bytes, str]:
    if not data:
        return b"\x00", "empty->one byte"
    op = c.index(5)
    if op == 0:
        return m_bitflip(c, data)
    if op == 1:
        return m_byteset(c, data)
    if op == 2:
        return m_insert(c, data)
    if op == 3:
        return m_delete(c, data)
    # a varint in the records section made overlong or huge
    i = c.index(len(data))
    junk = c.choice(
        [
            b"\xff" * 10 + b"\x01",
            b"\x80\x80\x80\x80\x80\x80\x80\x80\x80\x80\x00",
            b"\xfe\xff\xff\xff\x0f",
            b"\x01",
            b"\x7f",
        ]
    )
    return data[:i] + junk + data[i + 1 :], f"varint junk at {i}"


V2_FIELDS = [  # (name, offset, width)
    ("baseOffset", 0, 8),
    ("batchLength", 8, 4),
    ("partitionLeaderEpoch", 12, 4),
    ("magic", 16, 1),
    ("attributes", 21, 2),
    ("lastOffsetDelta", 23, 4),
    ("baseTimestamp", 27, 8),
    ("maxTimestamp", 35, 8),
    ("producerId", 43, 8),
    ("producerEpoch", 51, 2),
    ("baseSequence", 53, 4),
    ("recordsCount", 57, 4),
]


def mutate_v2_batch(c: Chooser, batch: bytes) -> tuple[bytes, str]:
    buf = bytearray(batch)
    if len(buf) < 61:
        out, note = _mutate_bytes(c, batch)
        return out, "short v2 batch: " + note
    codec = struct.unpack_from(">h", buf, 21)[0] & 0x07
    op = c.index(5)
    fix_length = True
    if op == 0:  # a header field
        name, off, width = c.choice(V2_FIELDS)
        current = int.from_bytes(buf[off : off + width], "big", signed=True)
        v = interesting_int(c, width, current)
        buf[off : off + width] = _pack_int(width, v)
        note = f"v2 {name} {current}->{v}"
        fix_length = name != "batchLength"
    elif op == 1 and codec in (1, 2, 3, 4):  # through the codec
        try:
            plain = decompress(codec, bytes(buf[61:]), max_bytes=SMALL_DECOMPRESS_LIMIT)
        except Exception:  # noqa: BLE001 - a payload mutated earlier: mutate the raw bytes instead
            plain = None
        if plain is None:
            payload, note = _mutate_bytes(c, bytes(buf[61:]))
            note = "v2 compressed payload (not inflatable) " + note
        else:
            mutated, note = _mutate_bytes(c, plain)
            payload = compress(codec, mutated)
            note = f"v2 inflated records ({Compression(codec)}) " + note
        buf = buf[:61] + payload
    elif op == 2:  # the records section (compressed bytes as they are)
        payload, note = _mutate_bytes(c, bytes(buf[61:]))
        buf = buf[:61] + payload
        note = "v2 records section " + note
    elif op == 3:  # the codec bits
        new = c.choice([0, 1, 2, 3, 4, 5, 6, 7])
        attrs = (struct.unpack_from(">h", buf, 21)[0] & ~0x07) | new
        struct.pack_into(">h", buf, 21, attrs)
        note = f"v2 codec {codec}->{new}"
    else:  # control / transactional bits, timestamp type
        bit = c.choice([3, 4, 5, 6])
        attrs = struct.unpack_from(">h", buf, 21)[0] ^ (1 << bit)
        struct.pack_into(">h", buf, 21, attrs)
        note = f"v2 attribute bit {bit}"
    if fix_length:
        struct.pack_into(">i", buf, 8, len(buf) - 12)
    v2_crc_fix(buf)
    return bytes(buf), note


def mutate_legacy_entry(c: Chooser, entry: bytes) -> tuple[bytes, str]:
    buf = bytearray(entry)
    if len(buf) < 26:
        out, note = _mutate_bytes(c, entry)
        return out, "short legacy entry: " + note
    magic = buf[16]
    codec = buf[17] & 0x07
    key_at = 18 + (8 if magic == 1 else 0)
    op = c.index(4)
    fix_size = True
    if op == 0:
        fields = [
            ("offset", 0, 8),
            ("size", 8, 4),
            ("magic", 16, 1),
            ("attributes", 17, 1),
            ("keyLength", key_at, 4),
        ]
        if magic == 1:
            fields.append(("timestamp", 18, 8))
        name, off, width = c.choice(fields)
        if off + width > len(buf):
            return bytes(buf), "legacy field past the end"
        current = int.from_bytes(buf[off : off + width], "big", signed=True)
        v = interesting_int(c, width, current)
        buf[off : off + width] = _pack_int(width, v)
        note = f"v{magic} {name} {current}->{v}"
        fix_size = name != "size"
    elif op == 1 and codec in (1, 2, 3):  # the wrapper's inner message set, through the codec
        key_len = struct.unpack_from(">i", buf, key_at)[0]
        value_at = key_at + 4 + max(0, key_len)
        if value_at + 4 > len(buf):
            return bytes(buf), "legacy wrapper too short"
        value = bytes(buf[value_at + 4 :])
        try:
            plain = decompress(codec, value, magic=magic, max_bytes=SMALL_DECOMPRESS_LIMIT)
            mutated, note = _mutate_bytes(c, plain)
            value = compress(codec, mutated, magic=magic)
            note = f"v{magic} inner messages ({Compression(codec)}) " + note
        except Exception:  # noqa: BLE001
            value, note = _mutate_bytes(c, value)
            note = f"v{magic} wrapper value " + note
        buf = buf[:value_at] + _pack_int(4, len(value)) + value
    elif op == 2:
        body, note = _mutate_bytes(c, bytes(buf[key_at:]))
        buf = buf[:key_at] + body
        note = f"v{magic} key/value bytes " + note
    else:
        new = c.choice([0, 1, 2, 3, 4, 7, 8])
        buf[17] = (buf[17] & ~0x0F) | new
        note = f"v{magic} attributes codec/timestamp {codec}->{new}"
    if fix_size:
        struct.pack_into(">i", buf, 8, len(buf) - 12)
    legacy_crc_fix(buf)
    return bytes(buf), note


def mutate_records(c: Chooser, records: bytes) -> tuple[bytes, str]:
    entries, rest = split_entries(records)
    if not entries:
        out, note = _mutate_bytes(c, records)
        return out, "records (no whole entry) " + note
    op = c.index(6)
    if op <= 2:
        i = c.index(len(entries))
        entry = entries[i]
        magic = entry[16] if len(entry) > 16 else 2
        new, note = (mutate_v2_batch if magic >= 2 else mutate_legacy_entry)(c, entry)
        entries[i] = new
        return b"".join(entries) + rest, f"entry {i}: {note}"
    if op == 3:
        i = c.index(len(entries))
        return b"".join(entries + [entries[i]] * c.integer(1, 3)) + rest, f"entry {i} repeated"
    if op == 4:
        whole = b"".join(entries)
        cut = c.integer(1, max(1, len(whole) - 1))
        return whole[:cut], f"records cut at {cut}"
    junk = c.choice([b"\x00" * 12, b"\xff" * 12, b"\x00" * 8 + b"\x7f\xff\xff\xff", c.blob(c.integer(1, 30))])
    return b"".join(entries) + rest + junk, "garbage after the last entry"


# ------------------------------------------------------------------------------------------------- bombs


class Bombs:
    """Decompression bombs, built once per (shape, codec, size) and kept."""

    SHAPES = ("one-record", "many-records", "zeros", "v1-wrapper")
    MANY_RECORDS_BYTES = 128 << 10

    def __init__(self, max_bytes: int):
        self.max_bytes = max_bytes
        self._cache: dict[tuple, bytes] = {}

    def get(self, shape: str, codec: Compression, size: int) -> bytes:
        key = (shape, codec, size)
        if key not in self._cache:
            self._cache[key] = self._build(shape, codec, size)
        return self._cache[key]

    @staticmethod
    def _build(shape: str, codec: Compression, size: int) -> bytes:
        from minibroker.records import v2 as v2mod

        if shape == "v1-wrapper":
            codec = Compression(min(int(codec), 3)) or Compression.GZIP
            inner_value = bytes(size)
            inner = bytearray(struct.pack(">qiIbbq", 0, 0, 0, 1, 0, 1_700_000_000_000))
            inner += struct.pack(">i", -1) + struct.pack(">i", len(inner_value)) + inner_value
            struct.pack_into(">i", inner, 8, len(inner) - 12)
            legacy_crc_fix(inner)
            value = compress(codec, bytes(inner), magic=1)
            wrapper = bytearray(struct.pack(">qiIbbq", 0, 0, 0, 1, int(codec), 1_700_000_000_000))
            wrapper += struct.pack(">i", -1) + struct.pack(">i", len(value)) + value
            struct.pack_into(">i", wrapper, 8, len(wrapper) - 12)
            legacy_crc_fix(wrapper)
            return bytes(wrapper)
        if shape == "one-record":
            body = b"\x00" + encode_varint(0) + encode_varint(0) + encode_varint(-1) + encode_varint(size)
            section = encode_varint(len(body) + size + 1) + body
            count = 1
            plain_parts = [section, bytes(size), b"\x00"]
        elif shape == "many-records":
            # attributes, timestamp delta 0, offset delta 0 (all alike: the broker rebuilds the batch, as
            # Kafka does for clients with wrong inner offsets), key and value null, no headers
            one = b"\x00\x00\x00\x01\x01\x00"
            record = encode_varint(len(one)) + one
            count = max(1, size // len(record))
            plain_parts = [record * count]
        else:
            count = 1
            plain_parts = [bytes(size)]
        plain = b"".join(plain_parts)
        payload = compress(codec, plain)
        buf = bytearray(v2mod.HEADER_SIZE) + payload
        v2mod.HEADER.pack_into(
            buf,
            0,
            0,
            len(buf) - 12,
            -1,
            2,
            0,
            int(codec),
            count - 1,
            1_700_000_000_000,
            1_700_000_000_000,
            -1,
            -1,
            -1,
            count,
        )
        v2_crc_fix(buf)
        return bytes(buf)

    def random(self, c: Chooser) -> tuple[bytes, str]:
        shape = c.choice(self.SHAPES)
        codec = c.choice([Compression.GZIP, Compression.SNAPPY, Compression.LZ4, Compression.ZSTD])
        sizes = sorted({min(self.max_bytes, s) for s in (1 << 20, 4 << 20, self.max_bytes)})
        size = c.choice(sizes)
        if shape == "many-records":
            # a valid batch, appended when it fits: its record walk costs the broker about a second per
            # 100k records (and a later down-converting Fetch as much again); kept small
            size = min(size, self.MANY_RECORDS_BYTES)
        return self.get(shape, codec, size), f"bomb {shape} {codec} {size >> 20} MiB"


def m_records(c: Chooser, frame: bytes, bombs: Bombs | None) -> tuple[bytes, str] | None:
    try:
        spans = walk_request(frame).spans
    except WalkError:
        return None
    records = [(i, s) for i, s in enumerate(spans) if s.kind == "records"]
    if not records:
        return None
    i, s = c.choice(records)
    prefix = spans[i - 1]
    old = frame[s.offset : s.offset + s.size]
    if bombs is not None and c.chance(150):
        new, note = bombs.random(c)
    else:
        new, note = mutate_records(c, old)
    out = _replace(frame, s.offset, s.size, new)
    if not c.chance(50):  # almost always: the records field's length follows
        out = _replace(out, prefix.offset, prefix.size, encode_length(prefix.encoding, len(new)))
    return out, f"records {s.name}: {note}"


# ------------------------------------------------------------------------------------------------ frames


@dataclass
class MutationConfig:
    bombs: Bombs | None = None
    max_mutations: int = 3
    pipeline_per_thousand: int = 80
    split_per_thousand: int = 40
    size_prefix_per_thousand: int = 40
    max_request_size: int = 104857600


def mutate_frame(
    c: Chooser, seed: SeedFrame, seeds: list[SeedFrame], cfg: MutationConfig
) -> tuple[bytes, list[str]]:
    frame = seed.frame
    notes = [f"seed {seed.label} key {seed.api_key} v{seed.version}"]
    # The structure-aware mutators come first (they need a frame that still walks); their weights
    # favour records, lengths and integers, where parsers break.
    n = c.integer(1, cfg.max_mutations) if c.chance(950) else 0
    # Two modes: values only (the frame still decodes, so the odd values reach the handlers), or
    # anything (lengths, header, bytes: the codec and the connection layer).
    values_only = c.chance(600)
    for _ in range(n):
        result = None
        if values_only:
            op = c.index(8)
            if op <= 2 or (seed.api_key == 0 and c.chance(500)):
                result = m_records(c, frame, cfg.bombs)
            elif op <= 4:
                result = m_int(c, frame)
            elif op == 5:
                result = m_string(c, frame)
            elif op == 6:
                result = m_uuid(c, frame)
            else:
                result = m_tags(c, frame, valid=True)
            if result is not None and result[0]:
                frame, note = result
                notes.append(note)
            continue
        op = c.index(14)
        if seed.api_key == 0 and c.chance(500):  # Produce: mostly its records, where the record walk is
            op = 0
        if op <= 2:
            result = m_records(c, frame, cfg.bombs)
        elif op <= 4:
            result = m_length(c, frame)
        elif op <= 6:
            result = m_int(c, frame)
        elif op == 7:
            result = m_string(c, frame)
        elif op == 8:
            result = m_tags(c, frame)
        elif op == 9:
            result = m_header(c, frame)
        elif op == 10:
            result = m_uuid(c, frame)
        elif op == 11:
            result = m_transplant(c, frame, seeds)
        if result is None and frame:
            byte_op = c.index(6)
            result = (m_bitflip, m_byteset, m_insert, m_delete, m_truncate, m_duplicate)[byte_op](c, frame)
        if result is not None and result[0]:
            frame, note = result
            notes.append(note)
    return frame, notes


def size_prefix(c: Chooser, frame: bytes, cfg: MutationConfig) -> tuple[bytes, str | None]:
    if not c.chance(cfg.size_prefix_per_thousand):
        return struct.pack(">i", len(frame)), None
    n = len(frame)
    v = c.choice(
        [0, -1, INT_MIN, INT_MAX, n - 1, n + 1, n + 100, cfg.max_request_size + 1, max(1, n // 2), 1]
    )
    return struct.pack(">i", v), f"size prefix {n}->{v}"


def make_exchange(c: Chooser, seeds: list[SeedFrame], cfg: MutationConfig) -> Exchange:
    count = 1 if not c.chance(cfg.pipeline_per_thousand) else c.integer(2, 5)
    stream = bytearray()
    notes = []
    produce = [s for s in seeds if s.api_key == 0]
    for k in range(count):
        seed = c.choice(produce) if produce and c.chance(250) else c.choice(seeds)
        frame, frame_notes = (
            mutate_frame(c, seed, seeds, cfg)
            if (k == 0 or c.chance(500))
            else (seed.frame, [f"seed {seed.label} key {seed.api_key} v{seed.version} (unmutated)"])
        )
        prefix, note = size_prefix(c, frame, cfg)
        if note:
            frame_notes.append(note)
        stream += prefix + frame
        notes.append(f"frame {k}: " + "; ".join(frame_notes))
    data = bytes(stream)
    chunks = [data]
    if c.chance(cfg.split_per_thousand) and len(data) > 1:
        chunks, pos = [], 0
        while pos < len(data) and len(chunks) < 50:  # a few small pieces, then the rest
            step = c.integer(1, 7)
            chunks.append(data[pos : pos + step])
            pos += step
        if pos < len(data):
            chunks.append(data[pos:])
        notes.append(f"written in {len(chunks)} pieces")
    return Exchange(chunks, notes, count)
