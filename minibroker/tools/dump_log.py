"""``minibroker dump-log FILE...``: Kafka's kafka-dump-log.sh for .log, .index and .timeindex files.

One line per batch with Kafka's field names; ``--deep-iteration`` adds one ``| offset: ...`` line
per record (inner messages of v0/v1 wrappers included); ``--print-data-log`` adds keys, values
and headers (and implies deep iteration, as in Kafka); ``--json`` prints one JSON object per
line instead. Corrupt or truncated files are reported, never crashed on. Exit status: 0, or 1
when a file cannot be read at all.

Runs as ``python -m minibroker.tools.dump_log`` too.
"""

from __future__ import annotations

import argparse
import json
import os
import struct
import sys

from minibroker.errors import KafkaError
from minibroker.records import legacy
from minibroker.records.batches import Batch, EntryFormatError, iter_batches
from minibroker.records.codecs import Compression
from minibroker.records.control import parse_control_record
from minibroker.records.record import Record, TimestampType

_OFFSET_ENTRY = struct.Struct(">ii")  # relative offset, position
_TIME_ENTRY = struct.Struct(">qi")  # timestamp, relative offset
_MAX_DECOMPRESSED = 256 * 1024 * 1024


def _bool(v: bool) -> str:
    return "true" if v else "false"


def _text(b: bytes | None) -> str:
    return "null" if b is None else b.decode("utf-8", "replace")


def base_offset_of(path: str) -> int:
    """Segment base offset from its 20-digit file name (0 when the name is not a number)."""
    stem = os.path.basename(path).split(".")[0]
    return int(stem) if stem.isdigit() else 0


class _Out:
    def __init__(self, stream, as_json: bool):
        self.stream = stream
        self.json = as_json

    def line(self, text: str) -> None:
        if not self.json:
            self.stream.write(text + "\n")

    def obj(self, obj: dict) -> None:
        if self.json:
            self.stream.write(json.dumps(obj, separators=(",", ":")) + "\n")


def _batch_fields(b: Batch, position: int) -> dict:
    d = {}
    if b.magic >= 2:
        d.update(
            baseOffset=b.base_offset,
            lastOffset=b.last_offset,
            count=b.count,
            baseSequence=b.base_sequence,
            lastSequence=b.last_sequence,
            producerId=b.producer_id,
            producerEpoch=b.producer_epoch,
            partitionLeaderEpoch=b.partition_leader_epoch,
            isTransactional=b.is_transactional,
            isControl=b.is_control,
        )
    else:
        d.update(offset=b.last_offset)
    d.update(
        position=position,
        timestampType=str(b.timestamp_type),
        timestamp=b.max_timestamp,
        size=b.size,
        magic=b.magic,
        compresscodec=b.compression_name,
        crc=b.crc,
        isvalid=b.is_valid,
    )
    return d


def _batch_line(d: dict) -> str:
    parts = []
    for k, v in d.items():
        if k == "timestampType":
            continue
        if k == "timestamp":
            parts.append(f"{d['timestampType']}: {v}")
        else:
            parts.append(f"{k}: {_bool(v) if isinstance(v, bool) else v}")
    return " ".join(parts)


def _legacy_inner(b: Batch) -> list[tuple[Record, int, bool]]:
    """Records of a v0/v1 entry with each message's own CRC and validity."""
    buf = memoryview(b.buf)[: b.position + b.size]
    msg = legacy.parse_message(buf, b.position)
    recs = legacy.message_records(buf, b.position, max_decompressed_bytes=_MAX_DECOMPRESSED)
    if msg.compression == Compression.NONE:
        return [(recs[0], msg.crc, msg.crc_valid)]
    _, inner = legacy.inner_messages(msg, max_decompressed_bytes=_MAX_DECOMPRESSED)
    return [(r, m.crc, m.crc_valid) for r, m in zip(recs, inner, strict=True)]


def _record_fields(b: Batch, r: Record, crc: int | None, valid: bool | None, print_data: bool) -> dict:
    d = {
        "offset": r.offset,
        "timestampType": str(r.timestamp_type if b.magic else TimestampType.NO_TIMESTAMP_TYPE),
        "timestamp": r.timestamp,
        "keySize": -1 if r.key is None else len(r.key),
        "valueSize": -1 if r.value is None else len(r.value),
    }
    if b.magic >= 2:
        d["sequence"] = r.sequence
        d["headerKeys"] = [k for k, _ in r.headers]
    else:
        d["crc"] = crc
        d["isvalid"] = valid
    if b.is_control:
        marker = parse_control_record(r)
        if marker is not None:
            d["endTxnMarker"] = str(marker.control_type)
            d["coordinatorEpoch"] = marker.coordinator_epoch
        else:
            d["controlType"] = "unknown"
    elif print_data:
        if r.key is not None:
            d["key"] = _text(r.key)
        if r.value is not None:
            d["payload"] = _text(r.value)
        if r.headers:
            d["headers"] = {k: _text(v) for k, v in r.headers}
    return d


def _record_line(d: dict) -> str:
    parts = ["|"]
    for k, v in d.items():
        if k == "timestampType":
            continue
        if k == "timestamp":
            parts.append(f"{d['timestampType']}: {v}")
        elif k == "headerKeys":
            parts.append(f"headerKeys: [{','.join(v)}]")
        elif k == "headers":
            parts.append("headers: [" + ",".join(f"{hk}={hv}" for hk, hv in v.items()) + "]")
        else:
            parts.append(f"{k}: {_bool(v) if isinstance(v, bool) else v}")
    return " ".join(parts)


def dump_log_file(path: str, data: bytes, out: _Out, *, deep: bool, print_data: bool) -> None:
    out.line(f"Log starting offset: {base_offset_of(path)}")
    position = 0
    try:
        for b in iter_batches(data):
            position = b.position
            fields = _batch_fields(b, b.position)
            records = []
            if deep:
                try:
                    if b.magic >= 2:
                        records = [
                            _record_fields(b, r, None, None, print_data)
                            for r in b.records(max_decompressed_bytes=_MAX_DECOMPRESSED)
                        ]
                    else:
                        records = [_record_fields(b, r, c, v, print_data) for r, c, v in _legacy_inner(b)]
                except (KafkaError, ValueError) as exc:
                    records = [{"error": f"cannot read records: {exc}"}]
            out.line(_batch_line(fields))
            for rd in records:
                out.line(f"| error: {rd['error']}" if "error" in rd else _record_line(rd))
            if deep:
                fields["records"] = records
            out.obj(fields)
            position = b.position + b.size
    except EntryFormatError as exc:
        position = exc.position
        out.line(
            f"Found {len(data) - position} invalid bytes at position {position} of {os.path.basename(path)}: "
            f"{exc}"
        )
        out.obj({"error": str(exc), "position": position, "invalidBytes": len(data) - position})
        return
    if position < len(data):
        out.line(f"Found {len(data) - position} invalid bytes at the end of {os.path.basename(path)}")
        out.obj(
            {
                "error": "truncated entry at the end of the file",
                "position": position,
                "invalidBytes": len(data) - position,
            }
        )


def _index_entries(data: bytes, entry: struct.Struct) -> tuple[list[tuple[int, int]], int]:
    """Whole entries without the trailing all-zero ones of a preallocated index; plus stray bytes."""
    n = len(data) // entry.size
    stray = len(data) - n * entry.size
    while n > 0 and not any(data[(n - 1) * entry.size : n * entry.size]):
        n -= 1
    return [entry.unpack_from(data, i * entry.size) for i in range(n)], stray


def dump_index_file(path: str, data: bytes, out: _Out, *, time_index: bool) -> None:
    base = base_offset_of(path)
    entries, stray = _index_entries(data, _TIME_ENTRY if time_index else _OFFSET_ENTRY)
    for a, b in entries:
        if time_index:
            out.line(f"timestamp: {a} offset: {base + b}")
            out.obj({"timestamp": a, "offset": base + b})
        else:
            out.line(f"offset: {base + a} position: {b}")
            out.obj({"offset": base + a, "position": b})
    if stray:
        out.line(f"Found {stray} invalid bytes at the end of {os.path.basename(path)}")
        out.obj({"error": "partial index entry", "invalidBytes": stray})


def main(argv: list[str] | None = None, *, stdout=None) -> int:
    parser = argparse.ArgumentParser(
        prog="minibroker dump-log", description="Print Kafka .log, .index and .timeindex files."
    )
    parser.add_argument("files", nargs="+", metavar="FILE")
    parser.add_argument("--deep-iteration", action="store_true", help="one line per record")
    parser.add_argument(
        "--print-data-log",
        action="store_true",
        help="print keys, values and headers (implies --deep-iteration)",
    )
    parser.add_argument("--json", action="store_true", help="one JSON object per batch / index entry")
    args = parser.parse_args(argv)
    out = _Out(stdout or sys.stdout, args.json)
    status = 0
    for path in args.files:
        out.line(f"Dumping {path}")
        try:
            with open(path, "rb") as f:
                data = f.read()
        except OSError as exc:
            out.line(f"Could not read {path}: {exc.strerror or exc}")
            out.obj({"file": path, "error": str(exc)})
            status = 1
            continue
        out.obj({"file": path})
        if path.endswith(".log"):
            dump_log_file(
                path,
                data,
                out,
                deep=args.deep_iteration or args.print_data_log,
                print_data=args.print_data_log,
            )
        elif path.endswith(".index"):
            dump_index_file(path, data, out, time_index=False)
        elif path.endswith(".timeindex"):
            dump_index_file(path, data, out, time_index=True)
        else:
            out.line(f"Ignoring unknown file {path}")
            out.obj({"file": path, "error": "unknown file type"})
    return status


if __name__ == "__main__":
    try:
        sys.exit(main())
    except BrokenPipeError:  # e.g. piped into head
        sys.exit(0)
