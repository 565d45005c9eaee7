"""Issue 29: the C accelerator of the record layer against its reference, the pure-Python code.

The same bytes go to both: valid sections, truncated ones, bit-flipped ones and hostile ones (varints
of every length up to too long, negative lengths, header counts and record counts that lie), whole or
as a window of a section still arriving (``partial``), alone or inside a bigger buffer. Checked:

- what the C function decides equals what the Python function returns, and where Python raises the C
  function declines (returns None, the caller then runs Python, which says what is wrong);
- on every valid section the C function does decide (a test that passed because C always declined
  would prove nothing);
- through the record layer's entry points, both paths give the same results and the same errors.

Where the accelerator is not built (no compiler) these tests skip; the rest of the record tests run on
the pure-Python path then (tests/records/conftest.py).
"""

from __future__ import annotations

import array

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from minibroker.records import accelerator, v2
from minibroker.records.varint import encode_varint

fast = accelerator.extension
pytestmark = pytest.mark.skipif(
    fast is None, reason=f"the C accelerator is not built: {accelerator.describe()}"
)

EXAMPLES = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def outcome(fn, *args):
    """fn's result, or its error as ("error", type, message)."""
    try:
        return fn(*args)
    except Exception as e:  # noqa: BLE001 - any exception is an outcome to compare
        return ("error", type(e).__name__, str(e))


def check_walk(buf, start, end, count, first=0, partial=False, *, ordinary=True):
    """The C walk against the Python walk on one input; returns the Python outcome. ``ordinary``:
    arguments as the record layer passes them, where C must decide every valid section."""
    expected = outcome(v2.walk_records_python, buf, start, end, count, first, partial)
    got = fast.walk_records(buf, start, end, count, first, partial)
    if got is not None:
        assert got == expected
        assert [type(x) for x in got] == [type(x) for x in expected]  # bools stay bools
    elif ordinary and expected[0] != "error":  # C declines only errors and the counts it leaves to Python
        assert count <= 0 or first < 0 or first >= 2**31 or count >= 2**31
    # and through v2.walk_records, the path the record layer takes, with the accelerator on and off
    for on in (True, False):
        was = accelerator.use_accelerator(on)
        try:
            assert outcome(v2.walk_records, buf, start, end, count, first, partial) == expected
        finally:
            accelerator.use_accelerator(was)
    return expected


def check_whole(buf, pos, end, most, max_record_bytes):
    expected = outcome(v2._whole_records_python, buf, pos, end, most, max_record_bytes)
    got = fast.whole_records(buf, pos, end, most, max_record_bytes)
    assert got == expected
    return expected


# ------------------------------------------------------------------------------------------- the inputs

lengths = st.sampled_from([0, 1, 2, 62, 63, 64, 127, 128, 8191, 8192, 9000])
fields = st.one_of(st.none(), lengths.map(lambda n: b"x" * n))
deltas = st.one_of(
    st.integers(-70, 70),
    st.integers(-(2**21), 2**21),
    st.integers(-(2**31), 2**31 - 1),
    st.integers(-(2**63), 2**63 - 1),
)
headers = st.lists(st.tuples(st.sampled_from(["", "h", "ключ"]), fields), max_size=3)
rows_strategy = st.lists(
    st.tuples(st.sampled_from([0, 0, 0, 1, -1, 2**31 - 1]), deltas, fields, fields, headers),
    min_size=1,
    max_size=30,
)


def section_of(rows, first=0) -> bytes:
    """Records ``first`` ...; each row's first item moves its offset delta off its index."""
    return b"".join(
        v2.encode_record(max(-(2**31), min(2**31 - 1, first + i + skew)), ts, key, value, hdrs)
        for i, (skew, ts, key, value, hdrs) in enumerate(rows)
    )


# Varints no encoder writes, and lengths that lie: each a replacement for one field of a record
HOSTILE_VARINTS = [
    b"\x80" * 4 + b"\x0f",  # 5 bytes, the most an int32 takes
    b"\x80" * 4 + b"\x10",  # 5 bytes with a bit beyond 32
    b"\x80" * 4 + b"\x7f",
    b"\x80" * 5 + b"\x00",  # 6 bytes: too long for an int32
    b"\xff" * 9 + b"\x01",  # 10 bytes, the most an int64 takes
    b"\xff" * 9 + b"\x02",  # 10 bytes with a bit beyond 64
    b"\xff" * 10 + b"\x00",  # 11 bytes
    b"\xff" * 4 + b"\x0f",  # zig-zag -2^31
    b"\xfe" + b"\xff" * 3 + b"\x0f",  # 2^31 - 1
    encode_varint(-1),
    encode_varint(-2),
    encode_varint(-(2**31)),
    encode_varint(2**31 - 1),
    encode_varint(0),
    encode_varint(1),
    encode_varint(1000),
    b"\x80",  # cut short
    b"",
]


@st.composite
def hostile_records(draw):
    """A record built field by field, each field either sound or one of HOSTILE_VARINTS."""

    def field(sound: bytes) -> bytes:
        return draw(st.one_of(st.just(sound), st.sampled_from(HOSTILE_VARINTS)))

    key = draw(st.sampled_from([b"", b"k", b"x" * 70]))
    value = draw(st.sampled_from([b"", b"v", b"y" * 200]))
    nh = draw(st.integers(0, 3))
    body = b"\x00" + field(encode_varint(draw(deltas))) + field(encode_varint(draw(st.integers(0, 40))))
    body += field(encode_varint(len(key))) + key + field(encode_varint(len(value))) + value
    body += field(encode_varint(nh))
    for _ in range(nh):
        body += field(encode_varint(1)) + b"h" + field(encode_varint(2)) + b"hv"
    body += draw(st.sampled_from([b"", b"", b"\x00", b"\xff\xff"]))  # bytes a length does not cover
    return field(encode_varint(len(body))) + body


@st.composite
def sections(draw):
    """(bytes, count) : a valid section, then maybe damaged; the count may lie."""
    kind = draw(st.sampled_from(["valid", "valid", "cut", "flip", "edit", "hostile", "random"]))
    if kind == "random":
        data = bytearray(draw(st.binary(max_size=300)))
        return data, draw(st.integers(0, 20))
    if kind == "hostile":
        data = bytearray(b"".join(draw(st.lists(hostile_records(), min_size=1, max_size=6))))
        count = draw(st.integers(1, 8))
    else:
        rows = draw(rows_strategy)
        data, count = bytearray(section_of(rows)), len(rows)
    if kind == "cut":
        data = data[: draw(st.integers(0, len(data)))]
    elif kind == "flip":
        for pos, bit in draw(
            st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 7)), min_size=1, max_size=4)
        ):
            data[pos % len(data)] ^= 1 << bit
    elif kind == "edit":
        for pos, value in draw(
            st.lists(st.tuples(st.integers(0, 10**6), st.sampled_from([0, 1, 0x7F, 0x80, 0xFF])), max_size=4)
        ):
            data[pos % len(data)] = value
    count += draw(st.sampled_from([0, 0, 0, -1, 1, 2**31 - 1 - count]))
    return data, count


buffer_kinds = st.sampled_from([bytes, bytearray, memoryview])


# ---------------------------------------------------------------------------------------------- the walk


@EXAMPLES
@given(rows=rows_strategy)
def test_the_c_walk_decides_every_valid_section_as_python_does(rows):
    section = section_of(rows)
    expected = check_walk(section, 0, len(section), len(rows))
    assert expected[0] != "error"
    assert fast.walk_records(section, 0, len(section), len(rows)) is not None
    padded = b"\x05" * 61 + section + b"\xff" * 20  # inside a batch, bytes after it
    assert check_walk(memoryview(padded), 61, 61 + len(section), len(rows)) == expected


@EXAMPLES
@given(sample=sections(), kind=buffer_kinds, pad=st.sampled_from([0, 0, 7]), tail=st.binary(max_size=40))
def test_the_c_walk_agrees_with_python_on_damaged_and_hostile_sections(sample, kind, pad, tail):
    data, count = sample
    buf = kind(bytes(pad) + bytes(data) + tail)
    check_walk(buf, pad, pad + len(data), count)


@EXAMPLES
@given(
    rows=rows_strategy,
    first=st.sampled_from([0, 1, 5, 2**31 - 2]),
    cut=st.integers(0, 10**6),
    most=st.integers(1, 40),
    damage=st.one_of(st.none(), st.tuples(st.integers(0, 10**6), st.integers(0, 7))),
)
def test_the_c_walk_agrees_on_windows_of_a_section_still_arriving(rows, first, cut, most, damage):
    """partial: the walk stops before the first record that is not whole yet (iter_record_windows)."""
    data = bytearray(section_of(rows, first))
    if damage is not None:
        data[damage[0] % len(data)] ^= 1 << damage[1]
    data = bytes(data[: cut % (len(data) + 1)])
    for start in (0, min(3, len(data))):
        check_walk(data, start, len(data), most, first, True)


def test_the_c_walk_agrees_on_each_hostile_field():
    """Every hostile varint in every field of one record, then of the second of two records."""
    sound = [
        b"\x00",
        encode_varint(5),
        encode_varint(0),
        encode_varint(1),
        b"k",
        encode_varint(1),
        b"v",
        encode_varint(1),
        encode_varint(1),
        b"h",
        encode_varint(1),
        b"w",
    ]
    varint_fields = [1, 2, 3, 5, 7, 8, 10]
    checked = 0
    for f in varint_fields:
        for hostile in HOSTILE_VARINTS:
            body = b"".join(hostile if i == f else part for i, part in enumerate(sound))
            for length in (
                encode_varint(len(body)),
                encode_varint(len(body) + 1),
                encode_varint(len(body) - 1),
            ):
                rec = length + body
                second = v2.encode_record(0, 0, b"a", b"b") + rec
                for data, count in ((rec, 1), (rec, 2), (second, 2), (second + b"\x00", 2)):
                    for partial in (False, True):
                        check_walk(data, 0, len(data), count, 0, partial)
                        checked += 1
    assert checked == len(varint_fields) * len(HOSTILE_VARINTS) * 3 * 4 * 2


def test_the_c_walk_agrees_on_counts_that_lie():
    section = b"".join(v2.encode_record(i, i, b"k", b"v") for i in range(5))
    for count in (-1, 0, 1, 4, 5, 6, 2**31 - 1, 2**31, 2**63 - 1, 2**64):
        for partial in (False, True):
            check_walk(section, 0, len(section), count, 0, partial)
            check_walk(b"", 0, 0, count, 0, partial)


def test_the_c_walk_leaves_unusual_arguments_to_python():
    """Arguments no caller passes: C declines, so both paths do what the Python code does."""
    section = v2.encode_record(0, 0, b"k", b"v")
    n = len(section)
    for args in (
        (section, -1, n, 1),  # a start before the buffer
        (section, 0, n + 1, 1),  # an end past it
        (section, 2, 1, 1),  # start after end
        (section, 0, n, 1, -1),  # a window numbered from below 0
        (section, 0, n, 1, 2**40),
        (section + b"\x00", 0, n, 1, 0, True),  # a window that ends before its buffer does
        (section, 0.0, n, 1),  # not ints
        (array.array("i", [1, 2, 3]), 0, 3, 1),  # items wider than a byte
        (memoryview(section).cast("b"), 0, n, 1),
        (memoryview(section)[::2], 0, n // 2, 1),  # not contiguous
        ("text", 0, 4, 1),  # no buffer
    ):
        check_walk(*args, ordinary=False)
    assert fast.walk_records(section + b"\x00", 0, n, 1, 0, True) is None
    assert fast.walk_records(memoryview(section).cast("b"), 0, n, 1) is None
    assert fast.walk_records(section, 0, n, 1) is not None


def test_a_large_walk_releases_the_gil_and_gives_the_same_answer():
    section = b"".join(v2.encode_record(i, -i, None if i % 3 else b"k", b"v" * 100) for i in range(2000))
    previous = fast.set_release_gil_bytes(0)
    try:
        released = check_walk(section, 0, len(section), 2000)
        fast.set_release_gil_bytes(len(section) + 1)
        held = check_walk(section, 0, len(section), 2000)
    finally:
        fast.set_release_gil_bytes(previous)
    assert released == held == (-1999, 0, 1333, True)


# ---------------------------------------------------------------------------- the record-boundary scan


@EXAMPLES
@given(
    sample=sections(),
    kind=buffer_kinds,
    pos=st.integers(0, 20),
    most=st.sampled_from([0, 1, 3, 1000, -1]),
    max_record_bytes=st.sampled_from([0, 10, 100, 2**20, -1, 2**70]),
)
def test_the_c_scan_of_record_boundaries_agrees_with_python(sample, kind, pos, most, max_record_bytes):
    data = kind(bytes(sample[0]))
    pos = min(pos, len(data))
    for end in (len(data), max(pos, len(data) - 3)):
        check_whole(data, pos, end, most, max_record_bytes)


def test_the_c_scan_agrees_on_each_hostile_length():
    for hostile in HOSTILE_VARINTS:
        for tail in (b"", b"x" * 5, b"x" * 2000):
            data = v2.encode_record(0, 0, b"k", b"v") + hostile + tail
            for end in range(len(data) + 1):
                check_whole(data, 0, end, 5, 1000)
                check_whole(data, 0, end, 5, 2**31)


# ---------------------------------------------------------------------------------- the start-up line


def test_describe_names_the_path_that_runs():
    assert accelerator.describe().startswith("C accelerator (_accelerator.")
    was = accelerator.use_accelerator(False)
    try:
        assert accelerator.describe() == "pure Python (the C accelerator is loaded but switched off)"
        assert not accelerator.active()
    finally:
        accelerator.use_accelerator(was)
