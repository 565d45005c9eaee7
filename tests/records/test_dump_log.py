"""dump-log: Kafka's field names, deep iteration, data, JSON, indexes, corrupt and truncated files."""

import io
import json
import struct

from minibroker.records import build_end_txn_marker, build_records, v2
from minibroker.tools.dump_log import main

NAME = "00000000000000000100"


def run(*argv):
    out = io.StringIO()
    rc = main(list(argv), stdout=out)
    return rc, out.getvalue().splitlines()


def write_log(tmp_path, data):
    p = tmp_path / f"{NAME}.log"
    p.write_bytes(data)
    return str(p)


def sample():
    return (
        v2.build_batch(
            [(100, 1524709879130, b"key", b"value", ())], base_offset=100, partition_leader_epoch=0
        )
        + build_records(1, [(101, 5, b"a", b"b"), (102, 6, None, b"c")], compression=1)
        + build_records(2, [(103, 7, b"k", b"v", [("h1", b"x")])], compression=3)
        + build_end_txn_marker(
            commit=False, producer_id=3, producer_epoch=1, coordinator_epoch=2, timestamp=8, base_offset=104
        )
    )


def test_batch_lines_match_kafka(tmp_path):
    rc, lines = run(write_log(tmp_path, sample()))
    assert rc == 0
    assert lines[0].startswith("Dumping ") and lines[1] == "Log starting offset: 100"
    assert lines[2] == (
        "baseOffset: 100 lastOffset: 100 count: 1 baseSequence: -1 lastSequence: -1 producerId: -1 "
        "producerEpoch: -1 partitionLeaderEpoch: 0 isTransactional: false isControl: false position: 0 "
        "CreateTime: 1524709879130 size: 76 magic: 2 compresscodec: none crc: 2857248333 isvalid: true"
    )
    assert (
        lines[3].startswith("offset: 102 position: 76 CreateTime: 6 size: ")
        and "compresscodec: gzip" in lines[3]
    )
    assert "compresscodec: lz4" in lines[4] and "isControl: true" in lines[5]
    assert len(lines) == 6


def test_deep_iteration_and_data(tmp_path):
    path = write_log(tmp_path, sample())
    _, lines = run(path, "--deep-iteration")
    recs = [ln for ln in lines if ln.startswith("|")]
    assert (
        recs[0]
        == "| offset: 100 CreateTime: 1524709879130 keySize: 3 valueSize: 5 sequence: -1 headerKeys: []"
    )
    assert (
        recs[1].startswith("| offset: 101 CreateTime: 5 keySize: 1 valueSize: 1 crc: ")
        and "isvalid: true" in recs[1]
    )
    assert recs[3].endswith("headerKeys: [h1]")
    assert recs[4].endswith("endTxnMarker: ABORT coordinatorEpoch: 2")
    _, lines = run(path, "--print-data-log")
    recs = [ln for ln in lines if ln.startswith("|")]
    assert recs[0].endswith("key: key payload: value")
    assert recs[2].endswith("payload: c") and "key:" not in recs[2]
    assert recs[3].endswith("key: k payload: v headers: [h1=x]")


def test_json(tmp_path):
    _, lines = run(write_log(tmp_path, sample()), "--json", "--deep-iteration")
    objs = [json.loads(ln) for ln in lines]
    assert objs[0]["file"].endswith(".log")
    assert objs[1]["baseOffset"] == 100 and objs[1]["crc"] == 2857248333 and objs[1]["isvalid"] is True
    assert [r["offset"] for r in objs[2]["records"]] == [101, 102]


def test_corrupt_and_truncated_logs_are_reported(tmp_path):
    data = bytearray(sample())
    data[70] ^= 0xFF  # inside the first batch's records: CRC fails
    rc, lines = run(write_log(tmp_path, bytes(data) + bytes(data[:40])), "--deep-iteration")
    assert rc == 0 and "isvalid: false" in lines[2]
    assert lines[-1] == f"Found 40 invalid bytes at the end of {NAME}.log"
    bad_size = struct.pack(">qi", 0, 3) + b"\0" * 20
    rc, lines = run(write_log(tmp_path, sample() + bad_size))
    assert rc == 0 and lines[-1].startswith(f"Found 32 invalid bytes at position {len(sample())}")
    garbage = bytearray(build_records(2, [(0, 1, b"k", b"v" * 50, ())], compression=1))
    garbage[70:90] = b"\x55" * 20
    rc, lines = run(write_log(tmp_path, bytes(garbage)), "--deep-iteration")
    assert rc == 0 and "isvalid: false" in lines[2] and lines[3].startswith("| error: cannot read records")


def test_indexes_and_missing_files(tmp_path):
    idx = tmp_path / f"{NAME}.index"
    idx.write_bytes(struct.pack(">ii", 0, 0) + struct.pack(">ii", 7, 4096) + b"\0" * 800)
    tix = tmp_path / f"{NAME}.timeindex"
    tix.write_bytes(struct.pack(">qi", 1524709879130, 7) + b"\0" * 120 + b"\1\2")
    rc, lines = run(str(idx), str(tix), str(tmp_path / "missing.log"), str(tmp_path / "x.snapshot"))
    assert rc == 1
    assert lines[1:3] == ["offset: 100 position: 0", "offset: 107 position: 4096"]
    assert lines[4] == "timestamp: 1524709879130 offset: 107"
    assert lines[5] == f"Found 2 invalid bytes at the end of {NAME}.timeindex"
    assert lines[7].startswith("Could not read")
    _, lines = run(str(idx), "--json")
    assert [json.loads(ln) for ln in lines][1:] == [
        {"offset": 100, "position": 0},
        {"offset": 107, "position": 4096},
    ]


def test_runs_as_module(tmp_path):
    import subprocess
    import sys

    path = write_log(tmp_path, sample())
    out = subprocess.run(
        [sys.executable, "-m", "minibroker.tools.dump_log", path], capture_output=True, text=True, check=True
    )
    assert "crc: 2857248333" in out.stdout
