"""Validate a produce request's records and assign offsets, like Kafka's LogValidator.

Sans-I/O: ``validate_and_assign`` takes the ``records`` bytes of one partition of a Produce
request and returns the bytes to append (offsets assigned) plus the facts the log, the index
and the idempotence check need. Failures raise ``KafkaError`` with Kafka's code; per-record
problems (Produce v8+ ``record_errors``) ride along as ``record_errors=[(batch_index, message)]``,
where ``batch_index`` is the record's index inside its batch, as in Kafka.

Order of checks, as in Kafka: the produce-version rules (ProduceRequest.validateRecords), then
per entry size and CRC (UnifiedLog.analyzeAndValidateRecords), then the LogValidator proper.

Assignment paths (``AppendResult.path``):

- ``in-place``: the input buffer is patched. v2: baseOffset and partitionLeaderEpoch (outside the
  CRC); maxTimestamp + CRC only under LogAppendTime or when the scanned maximum differs. v0/v1
  uncompressed: each message's offset (v1 timestamp + CRC under LogAppendTime). v1 compressed with
  inner offsets 0..n-1: the wrapper's offset (and timestamp + CRC if it changes); the compressed
  payload is untouched.
- ``recompressed``: same magic, rebuilt: v0 compressed (absolute inner offsets), v1 with
  non-consecutive inner offsets, a v2 batch whose offsets are not 0..n-1, or the topic's
  compression.type differs from the producer's codec.
- ``converted``: the magic changes (v0/v1 input into a magic-2 topic, or the reverse).

Hot path (uncompressed v2, no compaction, unbounded timestamps): header checks, one CRC-32C,
two ``pack_into`` calls. No per-record loop: the record count is checked against lastOffsetDelta
and against the smallest size ``count`` records could take, but the records are not walked
(Kafka walks them). Set ``AppendConfig.deep_validation`` to walk them as Kafka does; a compacted
topic or a finite timestamp bound walks them anyway, because those checks are per record.
Compressed v2 is always decompressed (bounded) and walked, as in Kafka.

If ``records`` is writable (a bytearray or a memoryview of one) in-place assignment patches it and
``data`` is a view of it: no copy. Read-only input is copied once.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from enum import StrEnum
from functools import cached_property

import crc32c

from minibroker.errors import ErrorCode, KafkaError
from minibroker.records import legacy, v2
from minibroker.records.codecs import DEFAULT_MAX_DECOMPRESSED_BYTES, Compression, decompress
from minibroker.records.framing import LOG_OVERHEAD, MAGIC_OFFSET, EntryInfo, scan_entries
from minibroker.records.record import (
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    NO_SEQUENCE,
    NO_TIMESTAMP,
    Record,
    TimestampType,
)

__all__ = ["AppendConfig", "AppendPath", "AppendResult", "BatchFacts", "validate_and_assign"]

_OVERHEAD = struct.Struct(">qi")
_V2_FIELDS = v2.HEADER
_MAX_LONG = 2**63 - 1


@dataclass(frozen=True)
class AppendConfig:
    """Topic-level settings the validator needs (Kafka's property names in the comments)."""

    message_timestamp_type: str = "CreateTime"  # message.timestamp.type: CreateTime | LogAppendTime
    timestamp_before_max_ms: int = _MAX_LONG  # message.timestamp.before.max.ms (or difference.max.ms)
    timestamp_after_max_ms: int = _MAX_LONG  # message.timestamp.after.max.ms
    compacted: bool = False  # cleanup.policy contains compact: null keys are rejected
    compression_type: str = "producer"  # compression.type: producer|uncompressed|gzip|snappy|lz4|zstd
    max_message_bytes: int = 1048588  # max.message.bytes: per batch -> MESSAGE_TOO_LARGE
    max_decompressed_bytes: int = DEFAULT_MAX_DECOMPRESSED_BYTES  # inflating beyond -> RECORD_LIST_TOO_LARGE
    message_format_magic: int = 2  # the magic stored batches must have
    segment_bytes: int = 1 << 30  # segment.bytes: a whole append larger than this -> RECORD_LIST_TOO_LARGE
    deep_validation: bool = False  # walk uncompressed v2 records like Kafka does (slower)

    @cached_property
    def _fast_v2(self) -> bool:
        """Whether an uncompressed v2 batch can take the header-only hot path under this config."""
        return (
            self.message_format_magic == 2
            and self.message_timestamp_type == "CreateTime"
            and not self.compacted
            and not self.deep_validation
            and self.compression_type in ("producer", "uncompressed")
            and self.timestamp_before_max_ms >= _MAX_LONG
            and self.timestamp_after_max_ms >= _MAX_LONG
        )


class AppendPath(StrEnum):
    EMPTY = "empty"
    IN_PLACE = "in-place"
    RECOMPRESSED = "recompressed"
    CONVERTED = "converted"

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True, slots=True)
class BatchFacts:
    """Per stored batch: what the idempotence / transaction bookkeeping needs."""

    producer_id: int
    producer_epoch: int
    base_sequence: int
    last_sequence: int
    first_offset: int
    last_offset: int
    is_transactional: bool
    is_control: bool
    record_count: int
    max_timestamp: int


@dataclass(slots=True)
class AppendResult:
    data: bytes | bytearray | memoryview  # write this to the log
    first_offset: int
    last_offset: int
    max_timestamp: int
    offset_of_max_timestamp: int  # Kafka's "shallow" offset: last offset of the batch holding it
    log_append_time_ms: int  # -1 unless LogAppendTime
    record_count: int
    path: AppendPath
    batches: list[BatchFacts] = field(default_factory=list)
    entries: list[EntryInfo] = field(default_factory=list)  # positions within ``data`` for the index
    source_compression: Compression = Compression.NONE
    target_compression: Compression = Compression.NONE
    trimmed_bytes: int = 0  # a trailing partial entry Kafka silently drops


# ---------------------------------------------------------------------------------------------


def _invalid(message: str) -> KafkaError:
    return KafkaError(ErrorCode.INVALID_RECORD, message)


def _corrupt(message: str) -> KafkaError:
    return KafkaError(ErrorCode.CORRUPT_MESSAGE, message)


class _Entry:
    """One top-level entry of the request: position, size, magic, codec."""

    __slots__ = ("pos", "size", "magic", "codec")

    def __init__(self, pos, size, magic, codec):
        self.pos, self.size, self.magic, self.codec = pos, size, magic, codec


def _frame(buf) -> tuple[list[_Entry], int]:
    """Split into entries like Kafka's ByteBufferLogInputStream; returns (entries, valid bytes)."""
    entries = []
    n = len(buf)
    pos = 0
    while n - pos >= LOG_OVERHEAD:
        length = _OVERHEAD.unpack_from(buf, pos)[1]
        if length < legacy.RECORD_OVERHEAD_V0:
            raise _corrupt(
                f"Record size {length} is less than the minimum record overhead ({legacy.RECORD_OVERHEAD_V0})"
            )
        if n - pos <= MAGIC_OFFSET:
            break
        magic = buf[pos + MAGIC_OFFSET]
        if magic > 2:
            raise _corrupt(f"Invalid magic found in record: {magic}")
        size = LOG_OVERHEAD + length
        if pos + size > n:
            break
        if magic == 2:
            codec = buf[pos + v2.ATTRIBUTES_OFFSET + 1] & v2.COMPRESSION_MASK if size >= v2.HEADER_SIZE else 0
        else:
            codec = buf[pos + legacy.ATTRIBUTES_OFFSET] & legacy.COMPRESSION_MASK
        entries.append(_Entry(pos, size, magic, codec))
        pos += size
    return entries, pos


def _entry_valid(buf, e: _Entry) -> bool:
    mv = buf
    if e.magic == 2:
        if e.size < v2.HEADER_SIZE:
            return False
        stored = struct.unpack_from(">I", mv, e.pos + v2.CRC_OFFSET)[0]
        return crc32c.crc32c(mv[e.pos + v2.ATTRIBUTES_OFFSET : e.pos + e.size]) == stored
    minimum = legacy.RECORD_OVERHEAD_V1 if e.magic == 1 else legacy.RECORD_OVERHEAD_V0
    if e.size - LOG_OVERHEAD < minimum:
        return False
    import zlib

    stored = struct.unpack_from(">I", mv, e.pos + legacy.CRC_OFFSET)[0]
    return zlib.crc32(mv[e.pos + MAGIC_OFFSET : e.pos + e.size]) == stored


class _Ctx:
    """Everything one validation run needs, so helpers stay small."""

    __slots__ = (
        "buf",
        "cfg",
        "now",
        "next_offset",
        "leader_epoch",
        "from_client",
        "to_magic",
        "ts_type",
        "source",
        "target",
        "check_ts",
    )

    def __init__(self, buf, cfg: AppendConfig, now, next_offset, leader_epoch, from_client):
        self.buf = buf
        self.cfg = cfg
        self.now = now
        self.next_offset = next_offset
        self.leader_epoch = leader_epoch
        self.from_client = from_client
        self.to_magic = cfg.message_format_magic
        if cfg.message_timestamp_type not in ("CreateTime", "LogAppendTime"):
            raise ValueError(f"message.timestamp.type {cfg.message_timestamp_type!r}")
        self.ts_type = TimestampType.from_name(cfg.message_timestamp_type)
        self.check_ts = self.ts_type == TimestampType.CREATE_TIME and (
            cfg.timestamp_before_max_ms < _MAX_LONG or cfg.timestamp_after_max_ms < _MAX_LONG
        )

    def bad_timestamp(self, ts: int) -> bool:
        diff = self.now - ts
        return diff > self.cfg.timestamp_before_max_ms or -diff > self.cfg.timestamp_after_max_ms

    def timestamp_error(self, ts: int, offset: int) -> str:
        return (
            f"Timestamp {ts} of message with offset {offset} is out of range. The timestamp should be "
            f"within [{self.now - self.cfg.timestamp_before_max_ms}, "
            f"{self.now + self.cfg.timestamp_after_max_ms}]"
        )


# record error codes collected per batch
_TS = ErrorCode.INVALID_TIMESTAMP
_REC = ErrorCode.INVALID_RECORD


def _raise_record_errors(errors: list[tuple[int, ErrorCode, str]]) -> None:
    if not errors:
        return
    record_errors = [(i, msg) for i, _, msg in errors]
    if any(code == _TS for _, code, _ in errors):
        raise KafkaError(
            _TS,
            "One or more records have been rejected due to invalid timestamp",
            record_errors=record_errors,
        )
    raise KafkaError(
        _REC,
        f"One or more records have been rejected due to {len(errors)} record errors in total, "
        f"and only showing the first three errors at most: {record_errors[:3]}",
        record_errors=record_errors,
    )


def _record_error(
    ctx: _Ctx, index: int, ts: int, offset: int, key_is_null: bool, batch_ts_type: TimestampType
) -> tuple[int, ErrorCode, str] | None:
    """Kafka's validateKey + validateTimestamp for one record."""
    if ctx.cfg.compacted and key_is_null:
        return (index, _REC, "Compacted topic cannot accept message without key in topic partition")
    if ctx.ts_type == TimestampType.CREATE_TIME and ts != NO_TIMESTAMP:
        if ctx.check_ts and ctx.bad_timestamp(ts):
            return (index, _TS, ctx.timestamp_error(ts, offset))
    elif batch_ts_type == TimestampType.LOG_APPEND_TIME:
        return (
            index,
            _TS,
            "Invalid timestamp type in message. Producer should not set timestamp type to LogAppendTime.",
        )
    return None


def _validate_v2_batch(ctx: _Ctx, pos: int) -> tuple:
    """Kafka's validateBatch for a v2 batch; returns the unpacked header."""
    fields = _V2_FIELDS.unpack_from(ctx.buf, pos)
    (base_offset, _len, _epoch, _magic, _crc, attrs, last_delta, _bts, _mts, pid, _pe, base_seq, count) = (
        fields
    )
    if ctx.from_client:
        if last_delta + 1 <= 0:
            raise _invalid(f"Batch has an invalid offset range: [{base_offset}, {base_offset + last_delta}]")
        if count <= 0:
            raise _invalid(f"Invalid reported count for record batch: {count}")
        if last_delta + 1 != count:
            raise _invalid(
                f"Inconsistent batch offset range [{base_offset}, {base_offset + last_delta}] and count "
                f"of records {count}"
            )
        if attrs & v2.CONTROL_MASK:
            raise _invalid("Clients are not allowed to write control records")
        if pid >= 0 and base_seq < 0:
            raise _invalid(f"Invalid sequence number {base_seq} in record batch with producerId {pid}")
    if ctx.to_magic < 2:
        if attrs & v2.TRANSACTIONAL_MASK:
            raise KafkaError(
                ErrorCode.UNSUPPORTED_FOR_MESSAGE_FORMAT,
                f"Transactional records cannot be used with magic version {ctx.to_magic}",
            )
        if pid >= 0:
            raise KafkaError(
                ErrorCode.UNSUPPORTED_FOR_MESSAGE_FORMAT,
                f"Idempotent records cannot be used with magic version {ctx.to_magic}",
            )
    return fields


def _v2_scan(ctx: _Ctx, buf, start: int, end: int, count: int):
    try:
        return v2.scan_records(buf, start, end, count)
    except v2.RecordFormatError as exc:
        raise _invalid(str(exc)) from None


def _v2_record_errors(ctx: _Ctx, fields, scan) -> list:
    """Per-record checks of a v2 batch from its scan (or batch-level when that decides it)."""
    (base_offset, _, _, _, _, attrs, _, base_ts, max_ts, _, _, _, count) = fields
    batch_ts_type = (
        TimestampType.LOG_APPEND_TIME if attrs & v2.TIMESTAMP_TYPE_MASK else TimestampType.CREATE_TIME
    )
    errors = []
    nulls = set(scan.null_key_indexes) if (scan is not None and ctx.cfg.compacted) else ()
    if batch_ts_type == TimestampType.LOG_APPEND_TIME:
        timestamps = None  # every record reports max_ts
    elif ctx.check_ts and scan is not None:
        deltas = scan.timestamp_deltas
        if deltas and (ctx.bad_timestamp(base_ts + min(deltas)) or ctx.bad_timestamp(base_ts + max(deltas))):
            timestamps = [base_ts + d for d in deltas]
        else:
            timestamps = None
            if not nulls:
                return errors
    else:
        if not nulls:
            return errors
        timestamps = None
    offsets = scan.offset_deltas if scan is not None else None
    for i in range(count):
        ts = (
            max_ts
            if batch_ts_type == TimestampType.LOG_APPEND_TIME
            else (timestamps[i] if timestamps is not None else NO_TIMESTAMP)
        )
        off = base_offset + (offsets[i] if offsets is not None else i)
        err = _record_error(ctx, i, ts, off, i in nulls, batch_ts_type)
        if err:
            errors.append(err)
    return errors


def _result_from_data(
    ctx: _Ctx, data, path: AppendPath, max_ts: int, offset_of_max: int, trimmed: int
) -> AppendResult:
    entries = list(scan_entries(data))
    facts = []
    first = ctx.next_offset
    for e in entries:
        if e.magic == 2:
            (base, _, _, _, _, attrs, last_delta, _, mts, pid, pepoch, bseq, count) = _V2_FIELDS.unpack_from(
                data, e.position
            )
            lseq = NO_SEQUENCE if bseq == NO_SEQUENCE else v2.increment_sequence(bseq, last_delta)
            facts.append(
                BatchFacts(
                    pid,
                    pepoch,
                    bseq,
                    lseq,
                    base,
                    base + last_delta,
                    bool(attrs & v2.TRANSACTIONAL_MASK),
                    bool(attrs & v2.CONTROL_MASK),
                    count,
                    mts,
                )
            )
        else:
            facts.append(
                BatchFacts(
                    NO_PRODUCER_ID,
                    NO_PRODUCER_EPOCH,
                    NO_SEQUENCE,
                    NO_SEQUENCE,
                    first,
                    e.last_offset,
                    False,
                    False,
                    e.last_offset - first + 1,
                    e.max_timestamp,
                )
            )
        first = facts[-1].last_offset + 1
    last = facts[-1].last_offset if facts else ctx.next_offset - 1
    for f in facts:
        if f.first_offset > f.last_offset:
            raise _invalid("batch assigned an empty offset range")
    return AppendResult(
        data=data,
        first_offset=ctx.next_offset,
        last_offset=last,
        max_timestamp=max_ts,
        offset_of_max_timestamp=offset_of_max,
        log_append_time_ms=ctx.now if ctx.ts_type == TimestampType.LOG_APPEND_TIME else -1,
        record_count=last - ctx.next_offset + 1,
        path=path,
        batches=facts,
        entries=entries,
        source_compression=ctx.source,
        target_compression=ctx.target,
        trimmed_bytes=trimmed,
    )


def _writable(buf, end: int):
    """The bytes to patch: the caller's buffer when writable, else one copy."""
    if not buf.readonly:
        return buf[:end]
    return bytearray(buf[:end])


# ---------------------------------------------------------------------------------------------


def validate_and_assign(
    records,
    *,
    next_offset: int,
    now_ms: int,
    config: AppendConfig,
    produce_version: int,
    leader_epoch: int = 0,
    is_from_client: bool = True,
) -> AppendResult:
    """Validate one partition's produce ``records`` and assign offsets from ``next_offset``.

    See the module docstring for the paths and the hot path. Raises ``KafkaError``.
    """
    buf = memoryview(records)
    if buf.format != "B" or buf.ndim != 1:
        buf = buf.cast("B")
    if len(buf) >= v2.HEADER_SIZE and buf[MAGIC_OFFSET] == 2 and is_from_client and config._fast_v2:
        result = _hot_path(buf, next_offset, config, produce_version, leader_epoch)
        if result is not None:
            return result
    entries, valid_end = _frame(buf)
    trimmed = len(buf) - valid_end
    ctx = _Ctx(buf, config, now_ms, next_offset, leader_epoch, is_from_client)

    # ProduceRequest.validateRecords
    if produce_version >= 3:
        if not entries:
            raise _invalid(
                f"Produce requests with version {produce_version} must have at least one record "
                "batch per partition"
            )
        if entries[0].magic != 2:
            raise _invalid(
                f"Produce requests with version {produce_version} are only allowed to contain record "
                "batches with magic version 2"
            )
        if produce_version < 7 and entries[0].codec == Compression.ZSTD:
            raise KafkaError(
                ErrorCode.UNSUPPORTED_COMPRESSION_TYPE,
                f"Produce requests with version {produce_version} are not allowed to use ZStandard "
                "compression",
            )
        if len(entries) > 1:
            raise _invalid(
                f"Produce requests with version {produce_version} are only allowed to contain exactly "
                "one record batch per partition"
            )
    ctx.source = ctx.target = Compression.NONE
    if not entries:
        return AppendResult(
            data=b"",
            first_offset=-1,
            last_offset=-1,
            max_timestamp=NO_TIMESTAMP,
            offset_of_max_timestamp=-1,
            log_append_time_ms=-1,
            record_count=0,
            path=AppendPath.EMPTY,
            trimmed_bytes=trimmed,
        )

    # UnifiedLog.analyzeAndValidateRecords
    source = Compression.NONE
    for e in entries:
        if e.size > config.max_message_bytes:
            raise KafkaError(
                ErrorCode.MESSAGE_TOO_LARGE,
                f"The record batch size in the append is {e.size} bytes which exceeds the maximum "
                f"configured value of {config.max_message_bytes}.",
            )
        if not _entry_valid(buf, e):
            stored = struct.unpack_from(
                ">I", buf, e.pos + (v2.CRC_OFFSET if e.magic == 2 else legacy.CRC_OFFSET)
            )[0]
            raise _corrupt(f"Record is corrupt (stored crc = {stored})")
        if e.codec > Compression.ZSTD:
            raise _corrupt(f"Unknown compression type id: {e.codec}")
        if e.codec == Compression.ZSTD and (e.magic < 2 or produce_version < 7):
            raise KafkaError(
                ErrorCode.UNSUPPORTED_COMPRESSION_TYPE,
                f"ZStandard compression needs magic 2 and Produce v7+ (got magic {e.magic}, "
                f"Produce v{produce_version})",
            )
        if e.codec != Compression.NONE:
            source = Compression(e.codec)
    if valid_end > config.segment_bytes:
        raise KafkaError(
            ErrorCode.RECORD_LIST_TOO_LARGE,
            f"Message batch size is {valid_end} bytes in append, which exceeds the maximum configured "
            f"segment size of {config.segment_bytes}.",
        )
    ctx.source = source
    ctx.target = (
        source
        if config.compression_type == "producer"
        else (
            Compression.NONE
            if config.compression_type == "uncompressed"
            else Compression.from_name(config.compression_type)
        )
    )
    if ctx.target == Compression.ZSTD and ctx.to_magic < 2:
        raise KafkaError(ErrorCode.UNSUPPORTED_COMPRESSION_TYPE, "zstd needs message format magic 2")

    # LogValidator.validateMessagesAndAssignOffsets
    if source == Compression.NONE and ctx.target == Compression.NONE:
        if all(e.magic == ctx.to_magic for e in entries):
            return _assign_non_compressed(ctx, entries, valid_end, trimmed)
        return _rebuild(ctx, entries, trimmed, compressed_path=False)
    return _compressed(ctx, entries, valid_end, trimmed)


def _hot_path(
    buf, next_offset: int, config: AppendConfig, produce_version: int, leader_epoch: int
) -> AppendResult | None:
    """One uncompressed v2 batch from a client under a plain config: header checks, one CRC-32C, two
    patches. Returns None to fall back to the general path (which also produces every error message)."""
    (_, length, _, _, crc, attrs, last_delta, _, max_ts, pid, pepoch, base_seq, count) = (
        _V2_FIELDS.unpack_from(buf, 0)
    )
    size = LOG_OVERHEAD + length
    if (
        size != len(buf)
        or attrs & (v2.COMPRESSION_MASK | v2.TIMESTAMP_TYPE_MASK | v2.CONTROL_MASK)
        or count <= 0
        or count != last_delta + 1
        or count * v2.MIN_RECORD_SIZE > size - v2.HEADER_SIZE
        or (pid >= 0 and base_seq < 0)
        or size > config.max_message_bytes
        or size > config.segment_bytes
        or crc32c.crc32c(buf[v2.ATTRIBUTES_OFFSET :]) != crc
    ):
        return None
    data = buf if not buf.readonly else bytearray(buf)
    _PATCH_OFFSET.pack_into(data, 0, next_offset)
    _PATCH_EPOCH.pack_into(data, v2.PARTITION_LEADER_EPOCH_OFFSET, leader_epoch)
    last = next_offset + last_delta
    last_seq = NO_SEQUENCE if base_seq == NO_SEQUENCE else v2.increment_sequence(base_seq, last_delta)
    return AppendResult(
        data,
        next_offset,
        last,
        max_ts,
        last,
        -1,
        count,
        AppendPath.IN_PLACE,
        [
            BatchFacts(
                pid,
                pepoch,
                base_seq,
                last_seq,
                next_offset,
                last,
                bool(attrs & v2.TRANSACTIONAL_MASK),
                False,
                count,
                max_ts,
            )
        ],
        [EntryInfo(0, size, 2, next_offset, last, max_ts, count)],
    )


_PATCH_OFFSET = struct.Struct(">q")
_PATCH_EPOCH = struct.Struct(">i")


def _first_and_maybe_only(entries: list[_Entry], source: Compression) -> _Entry:
    first = entries[0]
    if (first.magic >= 2 or source != Compression.NONE) and len(entries) > 1:
        raise _invalid("Compressed outer record has more than one batch")
    return first


def _check_same_magic(first: _Entry, e: _Entry) -> None:
    if e.magic != first.magic:
        raise _invalid(f"Batch magic {e.magic} is not the same as the first batch's magic byte {first.magic}")


def _assign_non_compressed(ctx: _Ctx, entries: list[_Entry], valid_end: int, trimmed: int) -> AppendResult:
    first = _first_and_maybe_only(entries, Compression.NONE)
    buf = ctx.buf
    if first.magic == 2:
        pos, size = first.pos, first.size
        fields = _validate_v2_batch(ctx, pos)
        attrs, count, header_max_ts = fields[5], fields[12], fields[8]
        need_scan = (
            ctx.cfg.deep_validation
            or ctx.cfg.compacted
            or (ctx.check_ts and not attrs & v2.TIMESTAMP_TYPE_MASK)
        )
        scan = None
        if need_scan:
            scan = _v2_scan(ctx, buf, pos + v2.HEADER_SIZE, pos + size, count)
        elif count > 0 and count * v2.MIN_RECORD_SIZE > size - v2.HEADER_SIZE:
            raise _invalid(
                f"Batch declares {count} records, more than its {size - v2.HEADER_SIZE} bytes can hold"
            )
        _raise_record_errors(_v2_record_errors(ctx, fields, scan))
        data = _writable(buf, valid_end)
        h = v2.BatchHeader(data, 0)
        last_offset = ctx.next_offset + count - 1
        h.set_base_offset(last_offset - fields[6])
        h.set_partition_leader_epoch(ctx.leader_epoch)
        if ctx.ts_type == TimestampType.LOG_APPEND_TIME:
            h.set_max_timestamp(TimestampType.LOG_APPEND_TIME, ctx.now)
            max_ts = ctx.now
        else:
            max_ts = header_max_ts
            if scan is not None and not attrs & v2.TIMESTAMP_TYPE_MASK:
                base_ts = fields[7]
                max_ts = base_ts + max(scan.timestamp_deltas) if scan.timestamp_deltas else NO_TIMESTAMP
            h.set_max_timestamp(TimestampType.CREATE_TIME, max_ts)
        return _result_from_data(ctx, data, AppendPath.IN_PLACE, max_ts, last_offset, trimmed)

    # v0/v1 uncompressed messages: one offset each, in place
    messages = []
    for e in entries:
        _check_same_magic(first, e)
        try:
            messages.append(legacy.parse_message(buf, e.pos, e.pos + e.size))
        except legacy.LegacyFormatError as exc:
            raise _corrupt(str(exc)) from None
    offset = ctx.next_offset
    max_ts, offset_of_max = NO_TIMESTAMP, -1
    for m in messages:
        err = _record_error(ctx, 0, m.timestamp, m.offset, m.key is None, m.timestamp_type)
        _raise_record_errors([err] if err else [])
        if m.magic > 0 and m.timestamp > max_ts:
            max_ts, offset_of_max = m.timestamp, offset
        offset += 1
    data = _writable(buf, valid_end)
    offset = ctx.next_offset
    for m in messages:
        legacy.set_offset(data, m.position, offset)
        if m.magic > 0:
            if ctx.ts_type == TimestampType.LOG_APPEND_TIME:
                legacy.set_timestamp(data, m.position, TimestampType.LOG_APPEND_TIME, ctx.now)
            else:
                legacy.set_timestamp(data, m.position, TimestampType.CREATE_TIME, m.timestamp)
        offset += 1
    if ctx.ts_type == TimestampType.LOG_APPEND_TIME:
        max_ts, offset_of_max = ctx.now, ctx.next_offset
    return _result_from_data(ctx, data, AppendPath.IN_PLACE, max_ts, offset_of_max, trimmed)


class _Rec:
    """A record as the compressed/convert paths see it: Kafka's Record interface, minimal."""

    __slots__ = (
        "offset",
        "timestamp",
        "key",
        "value",
        "headers",
        "magic",
        "compressed",
        "crc_valid",
        "ts_type",
    )

    def __init__(self, offset, timestamp, key, value, headers, magic, compressed, crc_valid, ts_type):
        self.offset, self.timestamp, self.key, self.value, self.headers = (
            offset,
            timestamp,
            key,
            value,
            headers,
        )
        self.magic, self.compressed, self.crc_valid, self.ts_type = magic, compressed, crc_valid, ts_type


def _entry_records(ctx: _Ctx, e: _Entry, decode_values: bool) -> tuple[list[_Rec], tuple | None, object]:
    """Records of one top-level entry as Kafka's iterators yield them; (records, v2 fields, scan)."""
    buf = ctx.buf
    if e.magic == 2:
        fields = _validate_v2_batch(ctx, e.pos)
        (base_offset, _, _, _, _, attrs, _, base_ts, max_ts, _, _, base_seq, count) = fields
        start, end = e.pos + v2.HEADER_SIZE, e.pos + e.size
        section = buf
        if e.codec != Compression.NONE:
            section = decompress(e.codec, buf[start:end], magic=2, max_bytes=ctx.cfg.max_decompressed_bytes)
            start, end = 0, len(section)
        ts_type = (
            TimestampType.LOG_APPEND_TIME if attrs & v2.TIMESTAMP_TYPE_MASK else TimestampType.CREATE_TIME
        )
        if not decode_values:
            scan = _v2_scan(ctx, section, start, end, count)
            return [], fields, scan
        try:
            recs = v2.decode_records(
                section,
                start,
                end,
                count,
                base_offset=base_offset,
                base_timestamp=base_ts,
                timestamp_type=ts_type,
                max_timestamp=max_ts,
                base_sequence=base_seq,
            )
        except v2.RecordFormatError as exc:
            raise _invalid(str(exc)) from None
        return (
            [_Rec(r.offset, r.timestamp, r.key, r.value, r.headers, 2, False, True, ts_type) for r in recs],
            fields,
            None,
        )
    try:
        msg = legacy.parse_message(buf, e.pos, e.pos + e.size)
    except legacy.LegacyFormatError as exc:
        raise _corrupt(str(exc)) from None
    if msg.compression == Compression.NONE:
        return (
            [
                _Rec(
                    msg.offset,
                    msg.timestamp,
                    _b(msg.key),
                    _b(msg.value),
                    (),
                    msg.magic,
                    False,
                    msg.crc_valid,
                    msg.timestamp_type,
                )
            ],
            None,
            None,
        )
    try:
        _, inner = legacy.inner_messages(msg, max_decompressed_bytes=ctx.cfg.max_decompressed_bytes)
    except legacy.LegacyFormatError as exc:
        raise _corrupt(str(exc)) from None
    out = []
    if msg.magic == 0:
        for m in inner:
            out.append(
                _Rec(
                    m.offset,
                    m.timestamp,
                    _b(m.key),
                    _b(m.value),
                    (),
                    m.magic,
                    m.compression != 0,
                    m.crc_valid,
                    m.timestamp_type,
                )
            )
        return out, None, None
    # a wrapper offset of 0 comes from clients (librdkafka, kafka-python) that leave it unset
    base = 0 if msg.offset == 0 else msg.offset - inner[-1].offset
    if base < 0:
        raise _invalid(
            f"Found invalid wrapper offset in compressed v1 message set, wrapper offset '{msg.offset}' "
            f"is less than the last inner message offset '{inner[-1].offset}' and it is not zero."
        )
    log_append = msg.timestamp_type == TimestampType.LOG_APPEND_TIME
    for m in inner:
        ts, ts_type = (
            (msg.timestamp, TimestampType.LOG_APPEND_TIME) if log_append else (m.timestamp, m.timestamp_type)
        )
        out.append(
            _Rec(
                base + m.offset,
                ts,
                _b(m.key),
                _b(m.value),
                (),
                m.magic,
                m.compression != 0,
                m.crc_valid,
                ts_type,
            )
        )
    return out, None, None


def _b(mv) -> bytes | None:
    return None if mv is None else bytes(mv)


def _check_legacy_records(ctx: _Ctx, e: _Entry, recs: list[_Rec], batch_ts_type: TimestampType) -> None:
    """validateRecordCompression + validateRecord for v0/v1 records of one entry."""
    errors = []
    for i, r in enumerate(recs):
        if ctx.source != Compression.NONE and r.compressed:
            errors.append(
                (
                    i,
                    _REC,
                    "Compressed outer record should not have an inner record with a compression "
                    "attribute set",
                )
            )
            continue
        if r.magic != e.magic:
            errors.append((i, _REC, f"Record's magic {r.magic} does not match outer magic {e.magic}"))
            continue
        if e.codec != Compression.NONE and not r.crc_valid:
            raise _corrupt(f"Record is corrupt (inner message {i} of the wrapper at position {e.pos})")
        err = _record_error(ctx, i, r.timestamp, r.offset, r.key is None, batch_ts_type)
        if err:
            errors.append(err)
    _raise_record_errors(errors)


def _batch_ts_type(ctx: _Ctx, e: _Entry) -> TimestampType:
    if e.magic == 2:
        attrs = ctx.buf[e.pos + v2.ATTRIBUTES_OFFSET + 1]
        return TimestampType.LOG_APPEND_TIME if attrs & v2.TIMESTAMP_TYPE_MASK else TimestampType.CREATE_TIME
    if e.magic == 0:
        return TimestampType.NO_TIMESTAMP_TYPE
    attrs = ctx.buf[e.pos + legacy.ATTRIBUTES_OFFSET]
    return TimestampType.LOG_APPEND_TIME if attrs & legacy.TIMESTAMP_TYPE_MASK else TimestampType.CREATE_TIME


def _compressed(ctx: _Ctx, entries: list[_Entry], valid_end: int, trimmed: int) -> AppendResult:
    first = _first_and_maybe_only(entries, ctx.source)
    in_place = ctx.source == ctx.target
    if first.magic != ctx.to_magic or ctx.to_magic == 0:
        in_place = False
    first_is_control = first.magic == 2 and bool(
        ctx.buf[first.pos + v2.ATTRIBUTES_OFFSET + 1] & v2.CONTROL_MASK
    )
    if ctx.source == Compression.NONE and first_is_control:
        in_place = True
    if in_place and first.magic == 2:
        # a single v2 batch: walk without decoding keys and values
        _, fields, scan = _entry_records(ctx, first, decode_values=False)
        _raise_record_errors(_v2_record_errors(ctx, fields, scan))
        base_offset, attrs, base_ts = fields[0], fields[5], fields[7]
        if base_offset != 0 or any(d != i for i, d in enumerate(scan.offset_deltas)):
            in_place = False  # Kafka rebuilds batches whose offsets are not 0..n-1
        else:
            max_ts = NO_TIMESTAMP
            if not attrs & v2.TIMESTAMP_TYPE_MASK and scan.timestamp_deltas:
                max_ts = base_ts + max(scan.timestamp_deltas)
            elif attrs & v2.TIMESTAMP_TYPE_MASK:
                max_ts = fields[8]
            return _in_place_compressed(ctx, first, valid_end, scan.count, max_ts, trimmed)
    if in_place:
        # one v1 wrapper: in place when inner offsets are 0..n-1
        recs, _, _ = _entry_records(ctx, first, decode_values=True)
        _check_legacy_records(ctx, first, recs, _batch_ts_type(ctx, first))
        max_ts = max((r.timestamp for r in recs), default=NO_TIMESTAMP)
        if all(r.offset == i for i, r in enumerate(recs)):
            return _in_place_compressed(ctx, first, valid_end, len(recs), max_ts, trimmed)
    return _rebuild(ctx, entries, trimmed, compressed_path=True)


def _in_place_compressed(
    ctx: _Ctx, e: _Entry, valid_end: int, count: int, max_ts: int, trimmed: int
) -> AppendResult:
    data = _writable(ctx.buf, valid_end)
    last_offset = ctx.next_offset + count - 1
    if ctx.ts_type == TimestampType.LOG_APPEND_TIME:
        max_ts = ctx.now
    if e.magic == 2:
        h = v2.BatchHeader(data, e.pos)
        h.set_base_offset(last_offset - h.last_offset_delta)
        h.set_max_timestamp(ctx.ts_type, max_ts)
        h.set_partition_leader_epoch(ctx.leader_epoch)
    else:
        legacy.set_offset(data, e.pos, last_offset)
        legacy.set_timestamp(data, e.pos, ctx.ts_type, max_ts)
    return _result_from_data(ctx, data, AppendPath.IN_PLACE, max_ts, last_offset, trimmed)


def _rebuild(ctx: _Ctx, entries: list[_Entry], trimmed: int, *, compressed_path: bool) -> AppendResult:
    """Kafka's convertAndAssignOffsetsNonCompressed / buildRecordsAndAssignOffsets: decode every record,
    validate it, then write one new batch (or wrapper, or message run) at the target magic and codec."""
    first = _first_and_maybe_only(entries, ctx.source)
    validated: list[_Rec] = []
    first_fields = None
    expected = 0
    for e in entries:
        _check_same_magic(first, e)
        recs, fields, _ = _entry_records(ctx, e, decode_values=True)
        if first_fields is None and fields is not None:
            first_fields = fields
        if e.magic == 2:
            errors = []
            ts_type = _batch_ts_type(ctx, e)
            for i, r in enumerate(recs):
                err = _record_error(ctx, i, r.timestamp, r.offset, r.key is None, ts_type)
                if err:
                    errors.append(err)
            _raise_record_errors(errors)
        else:
            _check_legacy_records(ctx, e, recs, _batch_ts_type(ctx, e))
        expected += len(recs)
        validated.extend(recs)
    if first_fields is not None:
        (_, _, _, _, _, attrs, _, _, _, pid, pepoch, base_seq, _) = first_fields
        is_txn, is_control = bool(attrs & v2.TRANSACTIONAL_MASK), bool(attrs & v2.CONTROL_MASK)
    else:
        pid, pepoch, base_seq, is_txn, is_control = (
            NO_PRODUCER_ID,
            NO_PRODUCER_EPOCH,
            NO_SEQUENCE,
            False,
            False,
        )
    target = ctx.target if compressed_path else Compression.NONE
    rows = []
    offset = ctx.next_offset
    for r in validated:
        ts = r.timestamp
        if r.magic == 0 and ctx.to_magic > 0:
            ts = NO_TIMESTAMP
        rows.append(Record(offset, ts, TimestampType.CREATE_TIME, r.key, r.value, r.headers))
        offset += 1
    if ctx.to_magic == 2:
        data = v2.build_batch(
            rows,
            base_offset=ctx.next_offset,
            compression=target,
            timestamp_type=ctx.ts_type,
            log_append_time=ctx.now,
            producer_id=pid,
            producer_epoch=pepoch,
            base_sequence=base_seq,
            is_transactional=is_txn,
            is_control=is_control,
            partition_leader_epoch=ctx.leader_epoch,
        )
        max_ts = (
            ctx.now
            if ctx.ts_type == TimestampType.LOG_APPEND_TIME
            else max((r.timestamp for r in rows), default=NO_TIMESTAMP)
        )
        offset_of_max = offset - 1
    else:
        if any(r.headers for r in rows):
            raise KafkaError(
                ErrorCode.UNSUPPORTED_FOR_MESSAGE_FORMAT,
                f"Magic v{ctx.to_magic} does not support record headers",
            )
        data = legacy.build_message_set(
            ctx.to_magic, rows, compression=target, timestamp_type=ctx.ts_type, log_append_time=ctx.now
        )
        max_ts, offset_of_max = NO_TIMESTAMP, -1
        if ctx.to_magic == 1:
            if ctx.ts_type == TimestampType.LOG_APPEND_TIME:
                max_ts, offset_of_max = (
                    ctx.now,
                    (ctx.next_offset if target == Compression.NONE else offset - 1),
                )
            else:
                for r in rows:
                    if r.timestamp > max_ts:
                        max_ts, offset_of_max = r.timestamp, r.offset
                if target != Compression.NONE:
                    offset_of_max = offset - 1
    for info in scan_entries(data):
        if info.size > ctx.cfg.max_message_bytes:
            raise KafkaError(
                ErrorCode.MESSAGE_TOO_LARGE,
                f"Message batch size is {info.size} bytes in append, which exceeds the maximum "
                f"configured size of {ctx.cfg.max_message_bytes}.",
            )
    path = AppendPath.CONVERTED if first.magic != ctx.to_magic else AppendPath.RECOMPRESSED
    return _result_from_data(ctx, data, path, max_ts, offset_of_max, trimmed)
