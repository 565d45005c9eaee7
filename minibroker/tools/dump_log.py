"""``minibroker dump-log``: Apache Kafka's ``kafka-dump-log.sh`` (``kafka.tools.DumpLogSegments``, 3.9).

Same options, same output, line for line, for ``.log``, ``.index``, ``.timeindex``, ``.txnindex`` and
``.snapshot`` files:

- ``.log``: ``Log starting offset: N``, then one line per batch (``baseOffset: ... isvalid: ...`` for v2,
  ``offset: <last offset> position: ...`` for a v0/v1 message or wrapper); with ``--deep-iteration`` one
  ``| offset: ...`` line per record (the inner messages of a v0/v1 wrapper included, each with its own
  ``isValid``/``crc``); ``--print-data-log`` adds ``key:``/``payload:`` (UTF-8 text, or decoded with
  ``--offsets-decoder`` / ``--transaction-log-decoder``).
- ``.index`` / ``.timeindex``: one line per entry, each checked against the segment's ``.log`` (offset
  index: the batch at the position ends at the indexed offset; time index: the indexed offset is a
  batch's last offset and the timestamp that batch's largest); ``--verify-index-only`` checks without
  printing entries, ``--index-sanity-check`` runs only the check a broker runs on startup.
- ``.txnindex``: one line per aborted transaction (``version: 0 producerId: ... firstOffset: ... lastOffset:
  ... lastStableOffset: ...``, Kafka's ``dumpTxnIndex``), read with ``minibroker.storage.txn_index``; the
  index options do not apply to it, as in Kafka. Control records of a ``.log`` print their
  ``endTxnMarker: COMMIT|ABORT coordinatorEpoch: N`` with ``--deep-iteration``.
- ``.snapshot`` (producer state): one line per producer, Kafka's ``dumpProducerIdSnapshot``, read with
  ``minibroker.storage.producer_state.parse_snapshot``.
- ``--offsets-decoder`` decodes the KIP-848 consumer group and share group records (types 3-16) with
  ``coordinator_json``, as Kafka's generated JSON converters print them.

What Kafka prints on stderr goes to stderr, after every file: index mismatches, time index errors,
non-consecutive offsets. Where Kafka's tool dies with a stack trace (a corrupt entry, an index entry
whose batch is larger than ``--max-message-size``, a failed sanity check, a missing file), this one
reports the problem and goes on with the rest; a file that cannot be read, a failed sanity check or an
index that ``--verify-index-only`` cannot check (no ``.log`` beside it) make the exit status 1. Kafka's
own quirks are kept where a script may match them (the stray ``}`` after a legacy record's crc).
``--json`` prints one JSON object per line instead (file, batch with its records, index entry). A closed
pipe (``| head``) ends the output quietly, with status 0.

Runs as ``python -m minibroker.tools.dump_log`` too.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import stat
import struct
import sys
from collections.abc import Callable
from dataclasses import dataclass, field

from minibroker.coordinator.record_codec import RecordError
from minibroker.records import legacy, v2
from minibroker.records.batches import Batch, EntryFormatError, iter_batches
from minibroker.records.codecs import Compression
from minibroker.records.record import NO_SEQUENCE, NO_TIMESTAMP, TimestampType
from minibroker.tools import coordinator_json as cj

DEFAULT_MAX_MESSAGE_SIZE = 5 * 1024 * 1024
DEFAULT_MAX_BYTES = 2**31 - 1  # Kafka's Integer.MAX_VALUE: "no limit"
READ_CHUNK = 1 << 20  # a pipe's bytes are read in pieces of this size, up to --max-bytes
RECORD_INDENT = "|"

_OFFSET_ENTRY = struct.Struct(">ii")  # relative offset, position
_TIME_ENTRY = struct.Struct(">qi")  # timestamp, relative offset
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
_MAX_DECOMPRESSED = 256 * 1024 * 1024

# Kafka's ControlRecordType ids 2..6 (KRaft); 0 and 1 are the transaction markers.
_CONTROL_TYPES = {2: "LEADER_CHANGE", 3: "SNAPSHOT_HEADER", 4: "SNAPSHOT_FOOTER", 5: "KRAFT_VERSION",
                  6: "KRAFT_VOTERS"}


def _bool(v: bool) -> str:
    return "true" if v else "false"


def _text(b: bytes) -> str:
    return bytes(b).decode("utf-8", "replace")  # Kafka's StringDecoder


def _json(obj) -> str:
    """Compact, non-ASCII kept: how Jackson's ``ObjectNode.toString`` prints."""
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False)


def base_offset_of(path: str) -> int:
    """Segment base offset from its 20-digit file name (0 when the name is not a number)."""
    stem = os.path.basename(path).split(".")[0]
    return int(stem) if stem.isdigit() else 0


# -- output -------------------------------------------------------------------------------------


class _Out:
    """Text lines (``line``) or JSON objects (``obj``) on stdout, diagnostics (``err``) on stderr."""

    def __init__(self, stream, err_stream, as_json: bool):
        self.stream = stream
        self.err_stream = err_stream
        self.json = as_json

    def line(self, text: str) -> None:
        if not self.json:
            self.stream.write(text + "\n")

    def obj(self, obj: dict) -> None:
        if self.json:
            self.stream.write(_json(obj) + "\n")

    def err(self, text: str) -> None:
        self.stream.flush()  # keep the order of stdout and stderr when both are a terminal
        self.err_stream.write(text + "\n")


UNWRITTEN_INDEX_NOTE = ("harmless: this index has no entry yet. An active segment's indexes are "
                        "preallocated with zeros and get an entry every log.index.interval.bytes of log; "
                        "the first empty slot reads as an entry for the base offset (position 0, "
                        "timestamp 0), which the first batch does not match")


@dataclass
class _Report:
    """What Kafka's tool prints on stderr after every file, keyed by absolute path; Kafka keeps some
    of these lists newest first (it prepends), and so prints them."""

    index_mismatches: dict[str, list[tuple[int, object]]] = field(default_factory=dict)
    time_mismatches: dict[str, list[tuple[int, int]]] = field(default_factory=dict)
    time_out_of_order: dict[str, list[tuple[int, int]]] = field(default_factory=dict)
    time_not_found: dict[str, list[tuple[int, int]]] = field(default_factory=dict)
    non_consecutive: dict[str, list[tuple[int, int]]] = field(default_factory=dict)
    # offset indexes with no entry written yet, whose first (zero) slot reads as the base offset at
    # position 0 and so "mismatches" the first batch: an active segment's preallocated index
    unwritten_indexes: set[str] = field(default_factory=set)

    def print(self, out: _Out) -> None:
        for path, entries in self.index_mismatches.items():
            out.err(f"Mismatches in :{path}")
            for index_offset, log_offset in reversed(entries):
                if isinstance(log_offset, int):
                    out.err(f"  Index offset: {index_offset}, log offset: {log_offset}")
                else:  # Kafka dies with an exception here: say why instead
                    out.err(f"  Index offset: {index_offset}, no batch read: {log_offset}")
            out.obj({"file": path, "indexMismatches": [
                {"indexOffset": i, **({"logOffset": lo} if isinstance(lo, int) else {"error": lo})}
                for i, lo in entries], **self._note(path, out)})
        for path, entries in self.time_mismatches.items():
            out.err(f"Found timestamp mismatch in :{path}")
            for index_ts, log_ts in entries:
                out.err(f"  Index timestamp: {index_ts}, log timestamp: {log_ts}")
            out.obj({"file": path, "timestampMismatches": [
                {"indexTimestamp": i, "logTimestamp": lt} for i, lt in entries], **self._note(path, out)})
        for path, entries in self.time_out_of_order.items():
            out.err(f"Found out of order timestamp in :{path}")
            for index_ts, prev_ts in entries:
                out.err(f"  Index timestamp: {index_ts}, Previously indexed timestamp: {prev_ts}")
            out.obj({"file": path, "outOfOrderTimestamps": [
                {"indexTimestamp": i, "previousTimestamp": p} for i, p in entries]})
        for path, entries in self.time_not_found.items():
            out.err("The following indexed offsets are not found in the log.")
            for index_offset, log_offset in entries:
                out.err(f"Indexed offset: {index_offset}, found log offset: {log_offset}")
            out.obj({"file": path, "indexedOffsetsNotFound": [
                {"indexedOffset": i, "logOffset": lo} for i, lo in entries], **self._note(path, out)})
        for path, pairs in self.non_consecutive.items():
            out.err(f"Non-consecutive offsets in {path}")
            for first, second in reversed(pairs):
                out.err(f"  {first} is followed by {second}")
            out.obj({"file": path, "nonConsecutiveOffsets": [list(p) for p in pairs]})

    def _note(self, path: str, out: _Out) -> dict:
        """After a mismatch block: why it is harmless when the index is an unwritten one (Kafka prints the
        mismatch alone; a learner needs the why). Returns the JSON key to add."""
        if path not in self.unwritten_indexes:
            return {}
        out.err(f"  ({UNWRITTEN_INDEX_NOTE})")
        return {"note": UNWRITTEN_INDEX_NOTE}


# -- records ------------------------------------------------------------------------------------


@dataclass(slots=True)
class _Rec:
    """One record as the dump shows it, whatever its format."""

    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple = ()
    sequence: int = NO_SEQUENCE
    crc: int | None = None  # v0/v1: the message's own CRC and whether it holds
    valid: bool | None = None


def _legacy_records(b: Batch) -> list[_Rec]:
    """The records of a v0/v1 entry as Kafka's deep iterator yields them: the message itself, or the
    inner messages of a wrapper (v1: absolute offsets from the wrapper's, which holds the last one;
    v1 inner messages of a LogAppendTime wrapper take the wrapper's timestamp)."""
    buf = memoryview(b.buf)[: b.position + b.size]
    msg = legacy.parse_message(buf, b.position)

    def rec(m: legacy.Message, offset: int, timestamp: int) -> _Rec:
        key = None if m.key is None else bytes(m.key)
        value = None if m.value is None else bytes(m.value)
        return _Rec(offset, timestamp, key, value, crc=m.crc, valid=m.crc_valid)

    if msg.compression == Compression.NONE:
        return [rec(msg, msg.offset, msg.timestamp)]
    if msg.compression == Compression.ZSTD:
        raise ValueError(f"Invalid wrapper compressionType found in legacy deep record iterator {msg.magic}")
    _, inner = legacy.inner_messages(msg, max_decompressed_bytes=_MAX_DECOMPRESSED)
    base = 0
    if msg.magic == 1 and msg.offset != 0:  # 0: a producer (old librdkafka) left it unset
        last = inner[-1].offset
        if msg.offset < last:
            raise ValueError(
                f"Found invalid wrapper offset in compressed v1 message set, wrapper offset '{msg.offset}' "
                f"is less than the last inner message offset '{last}' and it is not zero."
            )
        base = msg.offset - last
    out = []
    for m in inner:
        if m.compression != Compression.NONE:
            raise ValueError("Inner messages must not be compressed")
        timestamp = m.timestamp
        if m.magic == 1 and msg.timestamp_type == TimestampType.LOG_APPEND_TIME:
            timestamp = msg.timestamp
        out.append(rec(m, base + m.offset if msg.magic == 1 else m.offset, timestamp))
    return out


def _records(b: Batch) -> list[_Rec]:
    if b.magic < 2:
        return _legacy_records(b)
    return [
        _Rec(r.offset, r.timestamp, r.key, r.value, r.headers, r.sequence)
        for r in b.records(max_decompressed_bytes=_MAX_DECOMPRESSED)
    ]


def _control(rec: _Rec) -> dict:
    """A control record's fields as Kafka reads them (ControlRecordType, EndTransactionMarker)."""
    key = rec.key or b""
    if len(key) < 4:
        return {"error": "Invalid value size found for end control record key. Must have at least 4 bytes, "
                         f"but found only {len(key)}"}
    version, type_id = struct.unpack_from(">hh", key)
    if version < 0:
        return {"error": f"Invalid version found for control record: {version}. May indicate data corruption"}
    if type_id not in (0, 1):
        return {"controlType": f"{_CONTROL_TYPES.get(type_id, 'UNKNOWN')}({type_id})"}
    value = rec.value or b""
    if len(value) < 6:
        return {"error": "Invalid value size found for end transaction marker. Must have at least 6 bytes, "
                         f"but found only {len(value)}"}
    marker_version, epoch = struct.unpack_from(">hi", value)
    if marker_version < 0:
        return {"error": f"Invalid version found for end transaction marker: {marker_version}. "
                         "May indicate data corruption"}
    return {"endTxnMarker": "COMMIT" if type_id == 1 else "ABORT", "coordinatorEpoch": epoch}


# -- key/value parsers (Kafka's MessageParser): record -> (key, payload), None where nothing prints --

_Parsed = tuple["str | dict | None", "str | dict | None"]


def _string_parser(rec: _Rec) -> _Parsed:
    return (None if rec.key is None else _text(rec.key), None if rec.value is None else _text(rec.value))


def _b64(b: bytes | None) -> str | None:
    return None if b is None else base64.b64encode(bytes(b)).decode("ascii")


def _topic_partitions(items) -> list[dict]:
    return [{"topic": tp.topic, "partitions": list(tp.partitions)} for tp in items or ()]


def _consumer_protocol(kind: str, data: bytes) -> dict | None:
    """A member's subscription or assignment in the consumer protocol, as Kafka's JSON converters print
    it (only the fields of its version); None when it does not parse (Kafka then keeps the bytes)."""
    from minibroker.protocol import codec

    try:
        if len(data) < 2:
            return None
        version = _I16.unpack_from(data)[0]
        if not 0 <= version <= 3:
            return None
        name = "ConsumerProtocolSubscription" if kind == "subscription" else "ConsumerProtocolAssignment"
        msg = codec.decode(name, version, data, 2, exact=False)
        user_data = None if msg.user_data is None else bytes(msg.user_data)
        if kind == "assignment":
            return {"assignedPartitions": _topic_partitions(msg.assigned_partitions),
                    "userData": _b64(user_data)}
        out = {"topics": list(msg.topics), "userData": _b64(user_data)}
        if version >= 1:
            out["ownedPartitions"] = _topic_partitions(msg.owned_partitions)
        if version >= 2:
            out["generationId"] = msg.generation_id
        if version >= 3:
            out["rackId"] = msg.rack_id
        return out
    except Exception:  # noqa: BLE001 - anything that does not parse keeps its bytes, as in Kafka
        return None


def _offset_commit_json(version: int, v) -> dict:
    d = {"offset": v.offset}
    if version >= 3:
        d["leaderEpoch"] = v.leader_epoch
    d["metadata"] = v.metadata
    d["commitTimestamp"] = v.commit_timestamp
    if version == 1:
        d["expireTimestamp"] = v.expire_timestamp
    return d


def _group_metadata_json(version: int, v) -> dict:
    d = {"protocolType": v.protocol_type, "generation": v.generation, "protocol": v.protocol,
         "leader": v.leader}
    if version >= 2:
        d["currentStateTimestamp"] = v.current_state_timestamp
    members = []
    for m in v.members:
        md = {"memberId": m.member_id}
        if version >= 3:
            md["groupInstanceId"] = m.group_instance_id
        md["clientId"] = m.client_id
        md["clientHost"] = m.client_host
        if version >= 1:
            md["rebalanceTimeout"] = m.rebalance_timeout
        md["sessionTimeout"] = m.session_timeout
        for kind, data in (("subscription", m.subscription), ("assignment", m.assignment)):
            decoded = _consumer_protocol(kind, data) if v.protocol_type == "consumer" else None
            md[kind] = decoded if decoded is not None else _b64(data)
        members.append(md)
    d["members"] = members
    return d


def _offsets_parser(rec: _Rec) -> _Parsed:
    """``--offsets-decoder``: Kafka's OffsetsMessageParser. Key ``{"type":"<record type>","data":{...}}``,
    value ``{"version":"<n>","data":{...}}`` or ``<DELETE>`` for a tombstone."""
    from minibroker.coordinator import group_records as gr

    o = rec.offset
    if rec.key is None:
        return (f"Failed to decode message at offset {o} using offset topic decoder (message had a "
                "missing key)"), None
    if len(rec.key) < 2:
        return f"Error at offset {o}, skipping. Could not read version from key's buffer.", None
    record_type = _I16.unpack_from(rec.key)[0]
    if cj.is_group_record(record_type):  # 3-16: KIP-848 consumer group and KIP-932 share group records
        return _group_record(rec, record_type)
    if record_type not in (0, 1, 2):
        return f"Unknown record type {record_type} at offset {o}, skipping.", None
    try:
        k = gr.decode_key(rec.key)
    except Exception as exc:  # noqa: BLE001
        return (f"Error at offset {o}, skipping. Could not read record with version {record_type} from key's "
                f"buffer due to: {exc}."), None
    if isinstance(k, gr.OffsetCommitKey):
        data = {"group": k.group, "topic": k.topic, "partition": k.partition}
        key = {"type": str(record_type), "data": data}
    else:
        key = {"type": str(record_type), "data": {"group": k.group}}
    if rec.value is None:
        return key, "<DELETE>"
    if len(rec.value) < 2:
        return f"Error at offset {o}, skipping. Could not read version from value's buffer.", None
    version = _I16.unpack_from(rec.value)[0]
    name = "OffsetCommitValue" if record_type < 2 else "GroupMetadataValue"
    try:
        if not 0 <= version <= 4:
            raise ValueError(f"Can't read version {version} of {name}")
        if record_type < 2:
            data = _offset_commit_json(version, gr.decode_offset_commit_value(rec.value))
        else:
            data = _group_metadata_json(version, gr.decode_group_metadata_value(rec.value))
    except Exception as exc:  # noqa: BLE001
        return (f"Error at offset {o}, skipping. Could not read record with version {version} from value's "
                f"buffer due to: {exc}."), None
    return key, {"version": str(version), "data": data}


def _group_record(rec: _Rec, record_type: int) -> _Parsed:
    """A consumer or share group record (types 3-16): key ``{"type":"<n>","data":{...}}``, value
    ``{"version":"0","data":{...}}`` or ``<DELETE>``, as Kafka's JSON converters print them."""
    o = rec.offset
    try:
        key = {"type": str(record_type), "data": cj.key_json(record_type, rec.key)}
    except (RecordError, ValueError) as exc:
        return (f"Error at offset {o}, skipping. Could not read record with version {record_type} from key's "
                f"buffer due to: {exc}."), None
    if rec.value is None:
        return key, "<DELETE>"
    if len(rec.value) < 2:
        return f"Error at offset {o}, skipping. Could not read version from value's buffer.", None
    version = _I16.unpack_from(rec.value)[0]
    try:
        data = cj.value_json(record_type, rec.value)
    except (RecordError, ValueError) as exc:
        return (f"Error at offset {o}, skipping. Could not read record with version {version} from value's "
                f"buffer due to: {exc}."), None
    return key, {"version": str(version), "data": data}


def _transaction_parser(rec: _Rec) -> _Parsed:
    """``--transaction-log-decoder``: Kafka 3.9's ``TransactionLog.formatRecordKeyAndValue``."""
    from minibroker.coordinator import transaction_records as tr

    o = rec.offset
    if rec.key is None:
        return (f"Failed to decode message at offset {o} using transaction log decoder (message had a "
                "missing key)"), None
    try:
        k = tr.decode_key(rec.key)
        if k is None:
            return f"unknown::version={tr.record_version(rec.key)}", None
    except tr.RecordError as exc:
        return f"Error at offset {o}, skipping. {exc}", None
    key = f"transaction_metadata::transactionalId={k.transactional_id}"
    if rec.value is None:
        return key, "<DELETE>"
    try:
        v = tr.decode_value(rec.value)
        if v.transaction_status not in tr.TransactionState._value2member_map_:
            raise tr.RecordError(f"Unknown transaction state id {v.transaction_status}")
    except tr.RecordError as exc:
        return f"Error at offset {o}, skipping. {exc}", None
    state = tr.TransactionState(v.transaction_status)
    partitions = []
    if state != tr.TransactionState.EMPTY:  # Kafka ignores an Empty transaction's partitions
        partitions = [f"{p.topic}-{pid}" for p in v.transaction_partitions or () for pid in p.partition_ids]
    payload = (f"producerId:{v.producer_id},producerEpoch:{v.producer_epoch},state={state},"
               f"partitions=[{','.join(partitions)}],"
               f"txnLastUpdateTimestamp={v.transaction_last_update_timestamp_ms},"
               f"txnTimeoutMs={v.transaction_timeout_ms}")
    return key, payload


# -- .log ---------------------------------------------------------------------------------------


def _batch_fields(b: Batch, position: int) -> dict:
    d: dict = {}
    if b.magic >= 2:
        attributes = _I16.unpack_from(b.buf, b.position + v2.ATTRIBUTES_OFFSET)[0]
        horizon = None
        if attributes & v2.DELETE_HORIZON_MASK:  # the delete horizon is kept in baseTimestamp
            horizon = _I64.unpack_from(b.buf, b.position + v2.BASE_TIMESTAMP_OFFSET)[0]
        d.update(baseOffset=b.base_offset, lastOffset=b.last_offset, count=b.count,
                 baseSequence=b.base_sequence, lastSequence=b.last_sequence, producerId=b.producer_id,
                 producerEpoch=b.producer_epoch, partitionLeaderEpoch=b.partition_leader_epoch,
                 isTransactional=b.is_transactional, isControl=b.is_control, deleteHorizonMs=horizon)
    else:
        d.update(offset=b.last_offset)
    d.update(position=position, timestampType=str(b.timestamp_type), timestamp=b.max_timestamp, size=b.size,
             magic=b.magic, compresscodec=b.compression_name, crc=b.crc, isvalid=b.is_valid)
    return d


def _batch_line(d: dict) -> str:
    parts = []
    for k, v in d.items():
        if k == "timestampType":
            continue
        if k == "timestamp":
            parts.append(f"{d['timestampType']}: {v}")
        elif k == "deleteHorizonMs":  # Java's OptionalLong.toString
            parts.append(f"deleteHorizonMs: {'OptionalLong.empty' if v is None else f'OptionalLong[{v}]'}")
        else:
            parts.append(f"{k}: {_bool(v) if isinstance(v, bool) else v}")
    return " ".join(parts)


@dataclass
class _Options:
    deep: bool
    print_data: bool
    parser: Callable[[_Rec], _Parsed]
    skip_metadata: bool
    max_bytes: int
    max_message_size: int
    index_sanity_only: bool
    verify_only: bool


def _record_output(b: Batch, rec: _Rec, opts: _Options) -> tuple[str, dict]:
    """One record's line, as DumpLogSegments builds it, and its JSON object."""
    key_size = -1 if rec.key is None else len(rec.key)
    value_size = -1 if rec.value is None else len(rec.value)
    d: dict = {"offset": rec.offset, "timestampType": str(b.timestamp_type), "timestamp": rec.timestamp,
               "keySize": key_size, "valueSize": value_size}
    text = ""
    prefix = f"{RECORD_INDENT} "
    if not opts.skip_metadata:
        text = (f"{prefix}offset: {rec.offset} {b.timestamp_type}: {rec.timestamp} keySize: {key_size} "
                f"valueSize: {value_size}")
        prefix = " "
        if b.magic >= 2:
            keys = [k for k, _ in rec.headers]
            text += f" sequence: {rec.sequence} headerKeys: [{','.join(keys)}]"
            d.update(sequence=rec.sequence, headerKeys=keys)
        else:
            # Kafka 3.9 prints a stray "}" after the crc of every v0/v1 record; kept, for scripts that
            # parse Kafka's output.
            text += f" isValid: {_bool(rec.valid)} crc: {rec.crc}}}"
            d.update(crc=rec.crc, isvalid=rec.valid)
        if b.is_control:
            control = _control(rec)
            d.update(control)
            if "endTxnMarker" in control:
                text += (f" endTxnMarker: {control['endTxnMarker']} "
                         f"coordinatorEpoch: {control['coordinatorEpoch']}")
            elif "controlType" in control:
                text += f" controlType: {control['controlType']}"
            else:
                text += f" error: {control['error']}"
    if opts.print_data and not b.is_control:
        key, payload = opts.parser(rec)
        if key is not None:
            text += f"{prefix}key: {key if isinstance(key, str) else _json(key)}"
            prefix = " "
            d["key"] = key
        if payload is not None:
            text += f" payload: {payload if isinstance(payload, str) else _json(payload)}"
            d["payload"] = payload
        if rec.headers and opts.parser is _string_parser:
            d["headers"] = {k: None if v is None else _text(v) for k, v in rec.headers}
    return text, d


def dump_log_segment(path: str, data, out: _Out, opts: _Options, report: _Report) -> None:
    out.line(f"Log starting offset: {base_offset_of(path)}")
    name = os.path.basename(path)
    valid_bytes = 0
    last_offset = -1
    pairs: list[tuple[int, int]] = []
    try:
        for b in iter_batches(data):
            fields = _batch_fields(b, valid_bytes)
            out.line(_batch_line(fields))
            if opts.deep:
                records = []
                try:
                    recs = _records(b)
                except Exception as exc:  # noqa: BLE001 - a batch that cannot be read is reported, not raised
                    recs = []
                    out.line(f"{RECORD_INDENT} error: cannot read records: {exc}")
                    records.append({"error": f"cannot read records: {exc}"})
                for rec in recs:
                    if last_offset != -1 and rec.offset != last_offset + 1:
                        pairs.append((last_offset, rec.offset))
                    last_offset = rec.offset
                    text, d = _record_output(b, rec, opts)
                    out.line(text)
                    records.append(d)
                fields["records"] = records
            out.obj(fields)
            valid_bytes = b.position + b.size
    except EntryFormatError as exc:  # Kafka dies here (CorruptRecordException); we say where and stop
        invalid = len(data) - exc.position
        out.line(f"Found {invalid} invalid bytes at position {exc.position} of {name}: {exc}")
        out.obj({"error": str(exc), "position": exc.position, "invalidBytes": invalid})
        valid_bytes = len(data)
    finally:
        if pairs:
            report.non_consecutive.setdefault(os.path.abspath(path), []).extend(pairs)
    trailing = len(data) - valid_bytes
    if trailing > 0 and opts.max_bytes == DEFAULT_MAX_BYTES:
        out.line(f"Found {trailing} invalid bytes at the end of {name}")
        out.obj({"error": "truncated entry at the end of the file", "position": valid_bytes,
                 "invalidBytes": trailing})


# -- .index / .timeindex ------------------------------------------------------------------------


def _segment_file(path: str, suffix: str) -> str:
    directory = os.path.dirname(os.path.abspath(path))
    return os.path.join(directory, os.path.basename(path).split(".")[0] + suffix)


def _read(path: str, limit: int | None = None) -> bytes:
    with open(path, "rb") as f:
        if limit is None:
            return f.read()
        info = os.fstat(f.fileno())
        if stat.S_ISREG(info.st_mode):
            return f.read(min(info.st_size, limit))  # one buffer of the file's size, not of --max-bytes
        # A pipe or FIFO reports size 0: read what it brings, up to the limit, until its writer is done
        chunks, taken = [], 0
        while taken < limit:
            chunk = f.read(min(READ_CHUNK, limit - taken))
            if not chunk:
                break
            chunks.append(chunk)
            taken += len(chunk)
        return b"".join(chunks)


def _entries(data: bytes, entry: struct.Struct, base: int, time_index: bool) -> list[tuple[int, int]]:
    """Whole entries as (offset, position) or (timestamp, offset), stopping, as Kafka does, at the first
    entry after the first whose offset is the base offset: the unwritten tail of a preallocated index."""
    out = []
    for i in range(len(data) // entry.size):
        a, b = entry.unpack_from(data, i * entry.size)
        offset = base + (b if time_index else a)
        if offset == base and i > 0:
            break
        out.append((a, base + b) if time_index else (base + a, b))
    return out


def _sanity_check(path: str, data: bytes, base: int, time_index: bool) -> str | None:
    """Kafka's ``OffsetIndex.sanityCheck`` / ``TimeIndex.sanityCheck``: the error, or None."""
    abspath = os.path.abspath(path)
    entry = _TIME_ENTRY if time_index else _OFFSET_ENTRY
    n = len(data) // entry.size
    if time_index:
        if n:
            first_ts = entry.unpack_from(data, 0)[0]
            last_ts, last_rel = entry.unpack_from(data, (n - 1) * entry.size)
            if last_ts < first_ts:
                return (f"Corrupt time index found, time index file ({abspath}) has non-zero size but the "
                        f"last timestamp is {last_ts} which is less than the first timestamp {first_ts}")
            if base + last_rel < base:
                return (f"Corrupt time index found, time index file ({abspath}) has non-zero size but the "
                        f"last offset is {base + last_rel} which is less than the first offset {base}")
        if len(data) % entry.size:
            return (f"Time index file {abspath} is corrupt, found {len(data)} bytes which is neither "
                    f"positive nor a multiple of {entry.size}")
        return None
    if n:
        last = base + entry.unpack_from(data, (n - 1) * entry.size)[0]
        if last < base:
            return (f"Corrupt index found, index file {abspath} has non-zero size but the last offset is "
                    f"{last} which is less than the base offset {base}")
    if len(data) % entry.size:
        return (f"Index file {abspath} is corrupt, found {len(data)} bytes which is neither positive nor a "
                f"multiple of {entry.size}")
    return None


def _batch_at(log: bytes, position: int, max_size: int) -> Batch | str:
    """The batch at ``position``, read within ``max_size`` bytes (Kafka's ``slice(position, max)``), or why
    there is none."""
    if position < 0 or position > len(log):
        return f"position {position} is outside the log ({len(log)} bytes)"
    window = memoryview(log)[position : position + max_size]
    try:
        batch = next(iter_batches(window), None)
    except EntryFormatError as exc:
        return f"no batch at position {position}: {exc}"
    if batch is not None:
        return batch
    if len(window) >= 12:
        size = 12 + _I32.unpack_from(window, 8)[0]
        if position + size > len(log):
            return (f"the entry at position {position} would be {size} bytes, past the end of the log "
                    f"({len(log)} bytes)")
        if size > max_size:
            return (f"the batch at position {position} is {size} bytes, more than --max-message-size "
                    f"{max_size}")
    return f"no whole batch at position {position} (the log has {len(log)} bytes)"


def dump_offset_index(path: str, data: bytes, out: _Out, opts: _Options, report: _Report) -> bool:
    base = base_offset_of(path)
    if len(data) // _OFFSET_ENTRY.size == 0:
        out.line(f"{path} is empty.")
        out.obj({"file": path, "entries": 0})
        return True
    if opts.index_sanity_only:
        return _report_sanity(path, data, base, False, out)
    log_path = _segment_file(path, ".log")
    try:
        log = _read(log_path)
    except OSError as exc:
        out.err(f"Could not read {log_path} to check {path} against: {exc.strerror or exc}")
        log = None
    mismatches = []
    for offset, position in _entries(data, _OFFSET_ENTRY, base, False):
        if log is not None:
            batch = _batch_at(log, position, opts.max_message_size)
            if isinstance(batch, str):
                mismatches.append((offset, batch))
            elif batch.last_offset != offset:
                mismatches.append((offset, batch.last_offset))
        if not opts.verify_only:
            out.line(f"offset: {offset} position: {position}")
            out.obj({"offset": offset, "position": position})
    if mismatches:
        report.index_mismatches.setdefault(os.path.abspath(path), []).extend(mismatches)
        if not any(data[:_OFFSET_ENTRY.size]):  # the one "entry" is the first unwritten slot
            report.unwritten_indexes.add(os.path.abspath(path))
    _stray_bytes(path, data, _OFFSET_ENTRY.size, out)
    return log is not None or not opts.verify_only


def _offset_index_lookup(entries: list[tuple[int, int]], target: int) -> int:
    """Position of the largest index entry with offset <= target (0 when none): ``OffsetIndex.lookup``."""
    lo, hi, found = 0, len(entries) - 1, 0
    while lo <= hi:
        mid = (lo + hi) // 2
        if entries[mid][0] <= target:
            found, lo = entries[mid][1], mid + 1
        else:
            hi = mid - 1
    return found


def dump_time_index(path: str, data: bytes, out: _Out, opts: _Options, report: _Report) -> bool:
    base = base_offset_of(path)
    if opts.index_sanity_only:
        return _report_sanity(path, data, base, True, out)
    log_path = _segment_file(path, ".log")
    try:
        log = _read(log_path)
    except OSError as exc:
        out.err(f"Could not read {log_path} to check {path} against: {exc.strerror or exc}")
        log = None
    try:
        offset_entries = _entries(_read(_segment_file(path, ".index")), _OFFSET_ENTRY, base, False)
    except OSError:
        offset_entries = []  # scan the log from its start
    abspath = os.path.abspath(path)
    prev_ts = NO_TIMESTAMP
    for timestamp, offset in _entries(data, _TIME_ENTRY, base, True):
        if log is not None:
            found = None
            try:
                for b in iter_batches(log, _offset_index_lookup(offset_entries, offset)):
                    if b.last_offset >= offset:
                        found = b
                        break
            except EntryFormatError:
                pass
            if found is None:
                report.time_not_found.setdefault(abspath, []).append((offset, -1))
            elif found.last_offset != offset:
                report.time_not_found.setdefault(abspath, []).append((offset, found.last_offset))
            else:
                try:
                    max_ts = max((r.timestamp for r in _records(found)), default=NO_TIMESTAMP)
                except Exception as exc:  # noqa: BLE001
                    out.err(f"Could not read the records of the batch at position {found.position} of "
                            f"{log_path} to check the time index entry for offset {offset}: {exc}")
                    max_ts = None
                if max_ts is not None and max_ts != timestamp:
                    report.time_mismatches.setdefault(abspath, []).append((timestamp, max_ts))
                if prev_ts >= timestamp:
                    report.time_out_of_order.setdefault(abspath, []).append((timestamp, prev_ts))
        if not opts.verify_only:
            out.line(f"timestamp: {timestamp} offset: {offset}")
            out.obj({"timestamp": timestamp, "offset": offset})
        prev_ts = timestamp
    mismatched = abspath in report.time_not_found or abspath in report.time_mismatches
    if mismatched and not any(data[:_TIME_ENTRY.size]):  # the one "entry" is the first unwritten slot
        report.unwritten_indexes.add(abspath)
    _stray_bytes(path, data, _TIME_ENTRY.size, out)
    return log is not None or not opts.verify_only


def _report_sanity(path: str, data: bytes, base: int, time_index: bool, out: _Out) -> bool:
    error = _sanity_check(path, data, base, time_index)
    if error is None:
        out.line(f"{path} passed sanity check.")
        out.obj({"file": path, "sanityCheck": "passed"})
        return True
    out.err(f"CorruptIndexException: {error}")  # Kafka: the exception ends the tool, status 1
    out.obj({"file": path, "sanityCheck": "failed", "error": error})
    return False


def _stray_bytes(path: str, data: bytes, entry_size: int, out: _Out) -> None:
    stray = len(data) % entry_size
    if stray:  # Kafka ignores a partial entry; its sanity check fails on one
        out.err(f"Found {stray} invalid bytes at the end of {os.path.basename(path)} (a partial index entry)")
        out.obj({"file": path, "error": "partial index entry", "invalidBytes": stray})


# -- .txnindex ----------------------------------------------------------------------------------


def dump_txn_index(path: str, data: bytes, out: _Out) -> bool:
    """Kafka's ``dumpTxnIndex``: every entry, whole entries only, with no check against the log; False when
    an entry has a version this reader does not know (Kafka's iterator throws then, before any line)."""
    from minibroker.storage.txn_index import ENTRY_SIZE, VERSION, TransactionIndex

    try:
        entries = TransactionIndex(path, base_offset_of(path), in_memory=True).entries
    except ValueError as exc:
        out.err(f"Could not read {path}: {exc}")
        out.obj({"file": path, "error": str(exc)})
        return False
    except OSError as exc:  # gone since it was read
        out.err(f"Could not read {path}: {exc.strerror or exc}")
        out.obj({"file": path, "error": exc.strerror or str(exc)})
        return False
    for txn in entries:
        out.line(f"version: {VERSION} producerId: {txn.producer_id} firstOffset: {txn.first_offset} "
                 f"lastOffset: {txn.last_offset} lastStableOffset: {txn.last_stable_offset}")
        out.obj({"version": VERSION, "producerId": txn.producer_id, "firstOffset": txn.first_offset,
                 "lastOffset": txn.last_offset, "lastStableOffset": txn.last_stable_offset})
    _stray_bytes(path, data, ENTRY_SIZE, out)
    return True


# -- .snapshot ----------------------------------------------------------------------------------


def _decrement_sequence(sequence: int, decrement: int) -> int:
    """Kafka's DefaultRecordBatch.decrementSequence: sequences wrap at Integer.MAX_VALUE."""
    return 2**31 - 1 - (decrement - sequence) + 1 if sequence < decrement else sequence - decrement


def dump_producer_snapshot(path: str, data: bytes, out: _Out) -> bool:
    """Kafka's ``dumpProducerIdSnapshot``: one line per producer (its last batch's fields after
    ``lastTimestamp`` when it has one); a corrupt file gets Kafka's message on stderr, status 1."""
    from minibroker.storage.producer_state import parse_snapshot

    try:
        entries = parse_snapshot(data)
    except ValueError as exc:
        out.err(str(exc))
        out.obj({"file": path, "error": str(exc)})
        return False
    for e in entries:
        txn = "OptionalLong.empty" if e.current_txn_first_offset < 0 else \
            f"OptionalLong[{e.current_txn_first_offset}]"
        line = (f"producerId: {e.producer_id} producerEpoch: {e.epoch} "
                f"coordinatorEpoch: {e.coordinator_epoch} currentTxnFirstOffset: {txn} "
                f"lastTimestamp: {e.timestamp} ")
        txn_first = None if e.current_txn_first_offset < 0 else e.current_txn_first_offset
        obj = {"producerId": e.producer_id, "producerEpoch": e.epoch, "coordinatorEpoch": e.coordinator_epoch,
               "currentTxnFirstOffset": txn_first, "lastTimestamp": e.timestamp}
        if e.last_offset >= 0:  # Kafka keeps the batch metadata of a producer that wrote data
            first = _decrement_sequence(e.last_seq, e.offset_delta)
            line += (f"firstSequence: {first} lastSequence: {e.last_seq} lastOffset: {e.last_offset} "
                     f"offsetDelta: {e.offset_delta} timestamp: {e.timestamp}")
            obj.update(firstSequence=first, lastSequence=e.last_seq, lastOffset=e.last_offset,
                       offsetDelta=e.offset_delta, timestamp=e.timestamp)
        out.line(line)
        out.obj(obj)
    return True


# -- command line -------------------------------------------------------------------------------


class _HelpFormatter(argparse.HelpFormatter):
    """Wide enough that every option's help fits on one line."""

    def __init__(self, prog: str):
        super().__init__(prog, max_help_position=34, width=120)


def build_parser() -> argparse.ArgumentParser:
    from minibroker import __version__

    parser = argparse.ArgumentParser(
        prog="minibroker dump-log",
        usage="%(prog)s [options] --files FILE1,FILE2,... | FILE...",
        description="Parse Kafka log segments (.log), their indexes (.index, .timeindex, .txnindex) and "
        "producer snapshots (.snapshot) and "
        "print what they hold, to see how records are stored or to debug a segment that looks corrupt. The "
        "options are kafka-dump-log.sh's; they may come before or after the files.",
        epilog="Exit status: 0; 1 when a file cannot be read or fails --index-sanity-check; 2 on a usage "
        "error.",
        formatter_class=_HelpFormatter,
    )
    parser.add_argument("paths", nargs="*", metavar="FILE", help="a file to dump, as with --files")
    parser.add_argument("--files", action="append", default=[], metavar="FILE1,FILE2,...",
                        help="REQUIRED (or FILE): comma-separated data and index files to dump; repeatable")
    parser.add_argument("--deep-iteration", action="store_true",
                        help="print every record, not only batches; set by --print-data-log")
    parser.add_argument("--print-data-log", action="store_true",
                        help="print each record's key and payload; set by the decoder options")
    parser.add_argument("--offsets-decoder", action="store_true",
                        help="decode records as __consumer_offsets offset commits and group records")
    parser.add_argument("--transaction-log-decoder", action="store_true",
                        help="decode records as __transaction_state transaction metadata")
    parser.add_argument("--skip-record-metadata", action="store_true",
                        help="leave out each record's offset, timestamp, sizes and sequence")
    parser.add_argument("--index-sanity-check", action="store_true",
                        help="only run on each index the sanity check a broker runs on startup")
    parser.add_argument("--verify-index-only", action="store_true",
                        help="check each index entry against the log without printing the entries")
    parser.add_argument("--max-message-size", type=_positive, default=DEFAULT_MAX_MESSAGE_SIZE,
                        metavar="SIZE", help="largest batch read when checking an index entry (default "
                        f"{DEFAULT_MAX_MESSAGE_SIZE})")
    parser.add_argument("--max-bytes", type=_positive, default=DEFAULT_MAX_BYTES, metavar="SIZE",
                        help="read at most SIZE bytes of each .log file (default: all of it)")
    parser.add_argument("--json", action="store_true",
                        help="one JSON object per line (file, batch with its records, index entry)")
    parser.add_argument("--version", action="version", version=f"minibroker {__version__}",
                        help="print the version and exit")
    return parser


def _positive(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if n <= 0 or n > DEFAULT_MAX_BYTES:
        raise argparse.ArgumentTypeError(f"must be between 1 and {DEFAULT_MAX_BYTES}: {text}")
    return n


def main(argv: list[str] | None = None, *, stdout=None, stderr=None) -> int:
    parser = build_parser()
    args = parser.parse_intermixed_args(argv)
    files = [f for group in args.files for f in group.split(",") if f] + args.paths
    if not files:
        parser.error("no file to dump: give --files FILE1,FILE2,... or FILE arguments")
    decoder = _offsets_parser if args.offsets_decoder else \
        _transaction_parser if args.transaction_log_decoder else _string_parser
    print_data = args.print_data_log or args.offsets_decoder or args.transaction_log_decoder
    opts = _Options(
        deep=args.deep_iteration or print_data,
        print_data=print_data,
        parser=decoder,
        skip_metadata=args.skip_record_metadata,
        max_bytes=args.max_bytes,
        max_message_size=args.max_message_size,
        index_sanity_only=args.index_sanity_check,
        verify_only=args.verify_index_only,
    )
    out = _Out(stdout or sys.stdout, stderr or sys.stderr, args.json)
    report = _Report()
    status = 0
    for path in files:
        if not _dump_file(path, out, opts, report):
            status = 1
    report.print(out)
    return status


def _dump_file(path: str, out: _Out, opts: _Options, report: _Report) -> bool:
    out.line(f"Dumping {path}")
    name = os.path.basename(path)
    suffix = name[name.rfind("."):] if "." in name else ""
    known = suffix in (".log", ".index", ".timeindex", ".txnindex", ".snapshot")
    try:
        if known:
            data = _read(path, opts.max_bytes if suffix == ".log" else None)
        else:
            open(path, "rb").close()  # readable (not missing, not a directory), then ignored as Kafka does
    except OSError as exc:  # only the read: a closed stdout (BrokenPipeError) must not land here
        error = exc.strerror or str(exc)
    else:
        error = None
    if error is not None:
        out.err(f"Could not read {path}: {error}")
        out.obj({"file": path, "error": error})
        return False
    out.obj({"file": path})
    if suffix == ".log":
        dump_log_segment(path, data, out, opts, report)
        return True
    if suffix == ".index":
        return dump_offset_index(path, data, out, opts, report)
    if suffix == ".timeindex":
        return dump_time_index(path, data, out, opts, report)
    if suffix == ".txnindex":
        return dump_txn_index(path, data, out)
    if suffix == ".snapshot":
        return dump_producer_snapshot(path, data, out)
    out.err(f"Ignoring unknown file {path}")
    out.obj({"file": path, "error": "unknown file type"})
    return True


def run(argv: list[str] | None = None) -> int:
    """``main`` for a console: a reader that goes away (``| head``) ends the dump quietly, status 0."""
    try:
        status = main(argv)
        sys.stdout.flush()
        return status
    except BrokenPipeError:
        # Python's advice (docs, "Note on SIGPIPE"): point stdout at devnull so that the flush at exit
        # does not raise again.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 0


if __name__ == "__main__":
    sys.exit(run())
