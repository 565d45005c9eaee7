"""Round trips of every message at every version, headers, framing edge cases, and the generator."""

from __future__ import annotations

import os
import random
import subprocess
import sys

import pytest

from minibroker.errors import ProtocolViolation
from minibroker.protocol import codec
from minibroker.protocol.declarations import in_range
from minibroker.protocol.schema import MESSAGES

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHARED = os.path.join(os.path.dirname(ROOT), "shared")


def sample_value(f, version, flexible, rng):
    """A random value for field ``f`` as sent at ``version`` (None where the version allows it)."""
    if in_range(version, f.nullable) and rng.random() < 0.2:
        return None
    t = f.type
    if t == "struct":
        return sample_struct(f.fields, version, flexible, rng)
    if t.startswith("[]"):
        n = rng.randint(0, 3)
        if t == "[]struct":
            return [sample_struct(f.fields, version, flexible, rng) for _ in range(n)]
        elem = t[2:]
        return [sample_primitive(elem, rng) for _ in range(n)]
    return sample_primitive(t, rng)


def sample_primitive(t, rng):
    bits = {"int8": 8, "int16": 16, "int32": 32, "int64": 64}
    if t in bits:
        b = bits[t]
        return rng.randint(-(1 << (b - 1)), (1 << (b - 1)) - 1)
    if t == "uint16":
        return rng.randint(0, 65535)
    if t == "float64":
        return rng.random() * 1e6
    if t == "bool":
        return rng.random() < 0.5
    if t == "string":
        return "".join(rng.choice("abcé_-.日") for _ in range(rng.randint(0, 12)))
    if t in ("bytes", "records"):
        return bytes(rng.randrange(256) for _ in range(rng.randint(0, 20)))
    if t == "uuid":
        return bytes(rng.randrange(256) for _ in range(16))
    raise AssertionError(t)


def sample_struct(fields, version, flexible, rng):
    out = {}
    for f in fields:
        present = in_range(version, f.versions) and (f.tag is None or flexible)
        out[f.name] = sample_value(f, version, flexible, rng) if present else codec.default_value(f, version)
    return out


def normalize(value):
    if isinstance(value, codec.Struct):
        return {k: normalize(v) for k, v in vars(value).items()}
    if isinstance(value, dict):
        return {k: normalize(v) for k, v in value.items()}
    if isinstance(value, list):
        return [normalize(v) for v in value]
    if isinstance(value, memoryview):
        return bytes(value)
    return value


CASES = [(name, v) for name, m in sorted(MESSAGES.items()) if m.kind in ("request", "response", "data")
         for v in range(m.valid[0], m.valid[1] + 1)]


@pytest.mark.parametrize("name,version", CASES, ids=[f"{n}-v{v}" for n, v in CASES])
def test_round_trip_every_version(name, version):
    message = MESSAGES[name]
    flexible = codec.is_flexible(message, version)
    rng = random.Random(f"{name}/{version}")
    for _ in range(3):
        value = sample_struct(message.fields, version, flexible, rng)
        data = codec.encode(name, version, value)
        decoded = codec.decode(name, version, data)
        assert normalize(decoded) == normalize(value)
        assert codec.encode(name, version, decoded) == data
        if len(data) > 1:
            with pytest.raises(ProtocolViolation):
                codec.decode(name, version, data[:-1])


def test_every_api_key_has_request_and_response():
    requests = {m.api_key for m in MESSAGES.values() if m.kind == "request"}
    responses = {m.api_key for m in MESSAGES.values() if m.kind == "response"}
    assert requests == responses and {0, 1, 2, 3, 18} <= requests


def test_known_bytes_api_versions_v0_request_and_response():
    frame = codec.encode_request(18, 0, 1, {}, client_id="c")
    assert frame == b"\x00\x00\x00\x0b" + b"\x00\x12\x00\x00\x00\x00\x00\x01\x00\x01c"
    parts = codec.encode_response(18, 0, 1, {"error_code": 0, "api_keys": [
        {"api_key": 0, "min_version": 0, "max_version": 11}]})
    assert b"".join(parts) == bytes.fromhex("00000010" "00000001" "0000" "00000001" "0000" "0000" "000b")


def test_flexible_header_and_tagged_fields():
    frame = codec.encode_request(18, 3, 9, {"client_software_name": "x", "client_software_version": "1"},
                                 client_id=None)
    header, pos = codec.decode_request_header(frame[4:])
    assert (header.api_key, header.api_version, header.correlation_id, header.client_id) == (18, 3, 9, None)
    # header v2: the client id stays a classic int16 string (-1 = null), then an empty tag buffer
    assert frame[4 + 8: 4 + 11] == b"\xff\xff\x00"
    body = codec.decode("ApiVersionsRequest", 3, frame[4:], pos)
    assert body.client_software_name == "x"
    response = {"error_code": 0, "api_keys": [], "finalized_features_epoch": 7}
    data = codec.encode("ApiVersionsResponse", 3, response)
    assert codec.decode("ApiVersionsResponse", 3, data).finalized_features_epoch == 7
    plain = codec.decode("ApiVersionsResponse", 3, codec.encode("ApiVersionsResponse", 3, {"api_keys": []}))
    assert plain.finalized_features_epoch == -1  # the declared default when the tag is absent


def test_unknown_tagged_fields_are_skipped():
    data = bytearray(codec.encode("ApiVersionsRequest", 3, {"client_software_name": "a",
                                                            "client_software_version": "b"}))
    assert data[-1] == 0
    data[-1:] = b"\x01\x63\x02zz"  # one tagged field, tag 99, two bytes
    assert codec.decode("ApiVersionsRequest", 3, bytes(data)).client_software_version == "b"


def test_records_field_is_zero_copy_and_regions_stay_parts(tmp_path):
    from minibroker.protocol.file_region import FileRegion

    path = tmp_path / "seg"
    path.write_bytes(b"0123456789")
    with open(path, "rb") as f:
        region = FileRegion(f, 2, 5)
        parts = codec.encode_response(1, 4, 3, {"responses": [{"topic": "t", "partitions": [
            {"partition_index": 0, "records": region}]}]})
        assert region in parts
        whole = b"".join(p.read() if isinstance(p, FileRegion) else p for p in parts)
        assert int.from_bytes(whole[:4], "big") == len(whole) - 4
        _, body = codec.decode_response(1, 4, whole[4:])
        records = body.responses[0].partitions[0].records
        assert isinstance(records, memoryview) and bytes(records) == b"23456"


def test_absurd_array_count_is_rejected_before_allocating():
    data = codec.encode("MetadataRequest", 1, {"topics": []})
    bad = b"\x7f\xff\xff\xff" + data[4:]
    with pytest.raises(ProtocolViolation):
        codec.decode("MetadataRequest", 1, bad)


@pytest.mark.skipif(not os.path.isdir(SHARED), reason="../shared (Kafka's schemas) not present")
def test_regenerating_declarations_is_a_no_op():
    result = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "gen_protocol.py"), "--check",
                             "--shared", SHARED], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
