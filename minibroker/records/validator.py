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

Hot path (uncompressed v2, no compaction, unbounded timestamps): header checks, one CRC-32C, a
structure-only walk of the records (``v2.walk_records``: every length and varint, as Kafka's record
iterator checks them, nothing decoded), two ``pack_into`` calls; maxTimestamp + CRC only when the
producer's maxTimestamp is not the records' maximum (Kafka corrects it too).
``AppendConfig.skip_record_walk`` (not Kafka's behaviour, off by default) trusts the header
instead; a compacted topic or a finite timestamp bound walks the records anyway. Compressed v2 is
always decompressed (streamed, bounded) and walked, as in Kafka.

Compressed batches are read as streams (issue 14, item 2): decompressed piece by piece as the
records are walked (``codecs.iter_decompress``, ``v2.iter_record_windows``), never whole, as Kafka's
streaming iterator reads them; a rebuild writes its new batch as the records come (``v2.BatchBuilder``).
Whatever a payload inflates to, what is held is about a piece and a record. Bounds: no more records
than the batch declares (and nothing after them but one piece), no record over
``AppendConfig.max_record_bytes`` (MESSAGE_TOO_LARGE; not Kafka's), no more than
``max_decompressed_bytes`` in all. Time is bounded by the caller: ``work_budget`` defers what would
take too long (``ValidationDeferred``) to a worker thread, which validates from offset 0; ``rebase``
then moves the result to the log end offset at append time.

Errors: only ``KafkaError`` leaves ``validate_and_assign``. A record that does not parse is
INVALID_RECORD (Kafka's InvalidRecordException, no record_errors), a bad CRC or an undecodable
compressed payload CORRUPT_MESSAGE, a timestamp out of the topic's bounds or out of int64
INVALID_TIMESTAMP with record_errors. An exception no check foresaw becomes INVALID_RECORD with
``details["unexpected"]`` (see ``validate_and_assign``).

If ``records`` is writable (a bytearray or a memoryview of one) in-place assignment patches it and
``data`` is a view of it: no copy. Read-only input is copied once.
"""

from __future__ import annotations

import contextlib
import struct
from dataclasses import dataclass, field
from enum import StrEnum
from functools import cached_property
from typing import NamedTuple

import crc32c

from minibroker.errors import ErrorCode, KafkaError
from minibroker.records import accelerator, legacy, v2
from minibroker.records.budget import (
    ACCELERATED_WALK_WORK,
    BYTE_WORK,
    REBUILD_WORK,
    RECORD_WORK,
    ValidationCancelled,
    ValidationDeferred,
    Work,
)
from minibroker.records.codecs import (
    DECOMPRESS_CHUNK,
    DEFAULT_MAX_DECOMPRESSED_BYTES,
    Compression,
    iter_decompress,
)
from minibroker.records.framing import LOG_OVERHEAD, MAGIC_OFFSET, EntryInfo, scan_entries
from minibroker.records.record import (
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    NO_SEQUENCE,
    NO_TIMESTAMP,
    TimestampType,
)

__all__ = [
    "AppendConfig",
    "AppendPath",
    "AppendResult",
    "BatchFacts",
    "ValidationCancelled",
    "ValidationDeferred",
    "rebase",
    "validate_and_assign",
]

_OVERHEAD = struct.Struct(">qi")
_V2_FIELDS = v2.HEADER
_MAX_LONG = 2**63 - 1
_MIN_LONG = -(2**63)


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
    # Not Kafka's: the most one record (v2) or inner message (v0/v1) of a compressed batch may declare,
    # in bytes; more -> MESSAGE_TOO_LARGE before its bytes are decompressed. None: max_message_bytes, the
    # largest record the topic takes uncompressed.
    max_record_bytes: int | None = None
    message_format_magic: int = 2  # the magic stored batches must have
    segment_bytes: int = 1 << 30  # segment.bytes: a whole append larger than this -> RECORD_LIST_TOO_LARGE
    # Not Kafka's: trust an uncompressed v2 batch's header (count, lastOffsetDelta, maxTimestamp) and
    # its CRC instead of walking its records as Kafka's LogValidator does. Off by default.
    skip_record_walk: bool = False

    @cached_property
    def record_limit(self) -> int:
        return self.max_message_bytes if self.max_record_bytes is None else self.max_record_bytes

    @cached_property
    def _fast_v2(self) -> bool:
        """Whether an uncompressed v2 batch can take the header-only hot path under this config."""
        return (
            self.message_format_magic == 2
            and self.message_timestamp_type == "CreateTime"
            and not self.compacted
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


class BatchFacts(NamedTuple):
    """Per stored batch: what the idempotence / transaction bookkeeping needs. A NamedTuple: one is
    made per append, and a frozen dataclass's ``__init__`` cost 1.7 us of a small append's ~30."""

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
    headers_dropped: int = 0  # record headers a magic 0/1 topic cannot hold (down-converted on append)


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
        "work",
    )

    def __init__(self, buf, cfg: AppendConfig, now, next_offset, leader_epoch, from_client, work=None):
        self.buf = buf
        self.work = work
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
            f"within [{max(self.now - self.cfg.timestamp_before_max_ms, _MIN_LONG)}, "
            f"{min(self.now + self.cfg.timestamp_after_max_ms, _MAX_LONG)}]"
        )


# record error codes collected per batch
_TS = ErrorCode.INVALID_TIMESTAMP
_REC = ErrorCode.INVALID_RECORD


# record_errors keeps the first this many of a batch's (Kafka lists them all); the code and the count
# in the message still account for every one. A compressed batch can hold tens of millions of records.
MAX_RECORD_ERRORS = 10_000


class _Errors:
    """Per-record errors of one batch: (index, code, message), the first MAX_RECORD_ERRORS kept."""

    __slots__ = ("items", "total", "timestamp")

    def __init__(self, errors=()):
        self.items: list[tuple[int, ErrorCode, str]] = []
        self.total = 0
        self.timestamp = False  # any INVALID_TIMESTAMP: that code wins, as in Kafka
        for err in errors:
            self.add(err)

    def add(self, err: tuple[int, ErrorCode, str]) -> None:
        self.total += 1
        if err[1] == _TS:
            self.timestamp = True
        if len(self.items) < MAX_RECORD_ERRORS:
            self.items.append(err)

    def __bool__(self) -> bool:
        return self.total > 0

    def raise_any(self) -> None:
        if not self.total:
            return
        record_errors = [(i, msg) for i, _, msg in self.items]
        if self.timestamp:
            raise KafkaError(
                _TS,
                "One or more records have been rejected due to invalid timestamp",
                record_errors=record_errors,
            )
        raise KafkaError(
            _REC,
            f"One or more records have been rejected due to {self.total} record errors in total, "
            f"and only showing the first three errors at most: {record_errors[:3]}",
            record_errors=record_errors,
        )


def _raise_record_errors(errors) -> None:
    if errors:
        (errors if isinstance(errors, _Errors) else _Errors(errors)).raise_any()


def _record_error(
    ctx: _Ctx, index: int, ts: int, offset: int, key_is_null: bool, batch_ts_type: TimestampType
) -> tuple[int, ErrorCode, str] | None:
    """Kafka's validateKey + validateTimestamp for one record, plus one check Kafka lacks: a
    CreateTime timestamp must fit int64 (Java wraps ``baseTimestamp + delta`` silently; readers in
    other languages then see another timestamp, and we could not store the maximum)."""
    if ctx.cfg.compacted and key_is_null:
        return (index, _REC, "Compacted topic cannot accept message without key in topic partition")
    if ctx.ts_type == TimestampType.CREATE_TIME and ts != NO_TIMESTAMP:
        if (ctx.check_ts and ctx.bad_timestamp(ts)) or not _MIN_LONG <= ts <= _MAX_LONG:
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


def _v2_walk(buf, start: int, end: int, count: int) -> tuple[int, int, int, bool]:
    """``v2.walk_records`` with its failures as Kafka's INVALID_RECORD."""
    try:
        return v2.walk_records(buf, start, end, count)
    except v2.RecordFormatError as exc:
        raise _invalid(str(exc)) from None


def _v2_record_errors(ctx: _Ctx, fields, windows, walk) -> _Errors | list:
    """Kafka's validateRecord for every record of a v2 batch, given its ``walk`` (``walk_records``'s
    result; None when not walked); ``windows()`` gives its records as ``v2.iter_record_windows``
    does (the whole section as one window when it is not compressed).

    The walk's aggregates (min/max timestamp delta, null keys) say whether any record can fail;
    only then are the records read again one by one (``scan_records``) to say which.
    """
    (base_offset, _, _, _, _, attrs, _, base_ts, max_ts, _, _, _, count) = fields
    lat_batch = bool(attrs & v2.TIMESTAMP_TYPE_MASK)
    batch_ts_type = TimestampType.LOG_APPEND_TIME if lat_batch else TimestampType.CREATE_TIME
    create_time = ctx.ts_type == TimestampType.CREATE_TIME
    if walk is None:
        if create_time or not lat_batch:
            return []
        # a producer-set LogAppendTime on a LogAppendTime topic: every record is refused
        return [_record_error(ctx, i, max_ts, base_offset + i, False, batch_ts_type) for i in range(count)]
    tmin, tmax, nulls, _ = walk
    suspect = (ctx.cfg.compacted and nulls > 0) or (lat_batch and not create_time)
    if create_time and count > 0:
        # records' own timestamps: out of int64 (stored as the deltas, whatever the batch's type bit,
        # which this append clears) or, for a CreateTime batch, outside the topic's bounds
        lo, hi = base_ts + tmin, base_ts + tmax
        suspect = suspect or lo < _MIN_LONG or hi > _MAX_LONG
        if ctx.check_ts:
            if lat_batch:
                suspect = suspect or (max_ts != NO_TIMESTAMP and ctx.bad_timestamp(max_ts))
            else:
                suspect = suspect or ctx.bad_timestamp(lo) or ctx.bad_timestamp(hi)
    if not suspect:
        return []
    errors = _Errors()
    for buf, start, end, first, n in windows():
        scan = v2.scan_records(buf, start, end, n, first)  # the walk passed, so this cannot fail
        nulls = set(scan.null_key_indexes)
        for i, delta, off in zip(
            range(first, first + n), scan.timestamp_deltas, scan.offset_deltas, strict=True
        ):
            ts = max_ts if lat_batch else base_ts + delta
            err = _record_error(ctx, i, ts, base_offset + off, i in nulls, batch_ts_type)
            if err is None and create_time and lat_batch and not _MIN_LONG <= base_ts + delta <= _MAX_LONG:
                err = (i, _TS, ctx.timestamp_error(base_ts + delta, base_offset + off))
            if err:
                errors.add(err)
    return errors


def _walked_max_timestamp(fields, walk) -> int:
    """The batch's maxTimestamp as Kafka's assignOffsetsNonCompressed computes it from the records:
    the largest record timestamp, at least NO_TIMESTAMP (-1); a LogAppendTime-stamped batch's
    records all report its maxTimestamp."""
    attrs, count, base_ts, max_ts = fields[5], fields[12], fields[7], fields[8]
    if count <= 0:
        return NO_TIMESTAMP
    if attrs & v2.TIMESTAMP_TYPE_MASK:
        return max(max_ts, NO_TIMESTAMP)
    return max(base_ts + walk[1], NO_TIMESTAMP)


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
    work_budget: int | None = None,
    cancel=None,
) -> AppendResult:
    """Validate one partition's produce ``records`` and assign offsets from ``next_offset``.

    See the module docstring for the paths and the hot path. Raises ``KafkaError`` and nothing
    else, whatever the bytes: every malformed input has its own check and Kafka's code. Should
    anything else escape the checks (a bug here, or damage no check foresaw), it is answered
    INVALID_RECORD (not retriable: a producer does not resend the same bytes in a loop) and the
    exception rides along as ``details["unexpected"]`` for the caller to log with the partition.

    The work a compressed batch (or a rebuild) takes is bounded in memory, not in time: its records
    are read window by window. With ``work_budget`` (units of ``budget.Work``, about nanoseconds),
    ``ValidationDeferred`` is raised between windows once that much work is done, the input
    untouched: the caller validates it again elsewhere, without a budget (the event loop hands it to
    a worker thread). ``cancel`` (a ``threading.Event``) is looked at between windows too: set,
    ``ValidationCancelled``. Uncompressed v2 batches are never deferred.
    """
    try:
        return _validate_and_assign(
            records, next_offset, now_ms, config, produce_version, leader_epoch, is_from_client, work_budget,
            cancel,
        )
    except (KafkaError, ValidationDeferred, ValidationCancelled):
        raise
    except Exception as exc:  # the last resort the docstring describes
        raise KafkaError(
            ErrorCode.INVALID_RECORD,
            f"Records could not be validated: {type(exc).__name__}: {exc}",
            unexpected=exc,
        ) from exc


def _validate_and_assign(
    records, next_offset, now_ms, config, produce_version, leader_epoch, is_from_client, work_budget=None,
    cancel=None,
) -> AppendResult:
    buf = memoryview(records)
    if buf.format != "B" or buf.ndim != 1:
        buf = buf.cast("B")
    if len(buf) >= v2.HEADER_SIZE and buf[MAGIC_OFFSET] == 2 and is_from_client and config._fast_v2:
        result = _hot_path(buf, next_offset, config, produce_version, leader_epoch)
        if result is not None:
            return result
    entries, valid_end = _frame(buf)
    trimmed = len(buf) - valid_end
    work = Work(work_budget, cancel) if work_budget is not None or cancel is not None else None
    ctx = _Ctx(buf, config, now_ms, next_offset, leader_epoch, is_from_client, work)

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
    """One uncompressed v2 batch from a client under a plain config: header checks, one CRC-32C, the
    structure-only walk of the records (``v2.walk_records``, as Kafka's LogValidator iterates them; not
    with ``skip_record_walk``), two patches, and maxTimestamp + CRC only if the producer's maxTimestamp
    was not the records' maximum. Returns None to fall back to the general path (which also produces
    every error message)."""
    (_, length, _, _, crc, attrs, last_delta, base_ts, max_ts, pid, pepoch, base_seq, count) = (
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
    records_max_ts = max_ts
    if not config.skip_record_walk:
        try:
            tmin, tmax, _, _ = v2.walk_records(buf, v2.HEADER_SIZE, size, count)
        except v2.RecordFormatError:
            return None
        if base_ts + tmin < _MIN_LONG or base_ts + tmax > _MAX_LONG:
            return None  # timestamps out of int64: per-record errors
        records_max_ts = max(base_ts + tmax, NO_TIMESTAMP)
    data = buf if not buf.readonly else bytearray(buf)
    _PATCH_OFFSET.pack_into(data, 0, next_offset)
    _PATCH_EPOCH.pack_into(data, v2.PARTITION_LEADER_EPOCH_OFFSET, leader_epoch)
    if records_max_ts != max_ts:  # Kafka corrects a producer's maxTimestamp (and so the CRC)
        v2.BatchHeader(data, 0).set_max_timestamp(TimestampType.CREATE_TIME, records_max_ts)
        max_ts = records_max_ts
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
        start, end = pos + v2.HEADER_SIZE, pos + size
        walk = None
        if count > 0 and count * v2.MIN_RECORD_SIZE > size - v2.HEADER_SIZE:
            raise _invalid(
                f"Batch declares {count} records, more than its {size - v2.HEADER_SIZE} bytes can hold"
            )
        if (
            not ctx.cfg.skip_record_walk
            or ctx.cfg.compacted
            or (ctx.check_ts and not attrs & v2.TIMESTAMP_TYPE_MASK)
        ):
            walk = _v2_walk(buf, start, end, count)
        _raise_record_errors(_v2_record_errors(ctx, fields, lambda: ((buf, start, end, 0, count),), walk))
        data = _writable(buf, valid_end)
        h = v2.BatchHeader(data, 0)
        last_offset = ctx.next_offset + count - 1
        h.set_base_offset(last_offset - fields[6])
        h.set_partition_leader_epoch(ctx.leader_epoch)
        if ctx.ts_type == TimestampType.LOG_APPEND_TIME:
            h.set_max_timestamp(TimestampType.LOG_APPEND_TIME, ctx.now)
            max_ts = ctx.now
        else:
            # Kafka recomputes maxTimestamp from the records (a producer's wrong value is corrected, and
            # then the CRC); unwalked (skip_record_walk), the producer's value stands
            max_ts = header_max_ts if walk is None else _walked_max_timestamp(fields, walk)
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


@contextlib.contextmanager
def _record_format():
    """What the record readers raise, as Kafka's codes: a v2 record that does not parse is
    INVALID_RECORD, a v0/v1 message CORRUPT_MESSAGE (an inner message declaring more than
    ``AppendConfig.max_record_bytes`` too: Kafka's DataLogInputStream says so of one over its
    limit), a v2 record declaring more than that MESSAGE_TOO_LARGE (not Kafka's: it has no limit)."""
    try:
        yield
    except v2.RecordTooLargeError as exc:
        raise KafkaError(ErrorCode.MESSAGE_TOO_LARGE, str(exc)) from None
    except v2.RecordFormatError as exc:
        raise _invalid(str(exc)) from None
    except legacy.LegacyFormatError as exc:
        raise _corrupt(str(exc)) from None


def _v2_windows(ctx: _Ctx, e: _Entry, count: int, walk: bool = False):
    """The records of the v2 batch ``e`` as ``v2.iter_record_windows`` hands them out: a compressed
    section is decompressed piece by piece as the records are read (Kafka's streaming iterator), so
    at most a piece and a record are held whatever it inflates to, no record may declare more than
    ``AppendConfig.max_record_bytes``, and nothing past its ``count`` records is decompressed but
    one piece; the work is checked against the budget between windows. An uncompressed section is
    one window. ``walk``: each window comes walked (``v2.iter_record_windows``)."""
    start, end = e.pos + v2.HEADER_SIZE, e.pos + e.size
    if e.codec == Compression.NONE:
        if walk:
            yield ctx.buf, start, end, 0, count, v2.walk_records(ctx.buf, start, end, count)
        else:
            yield ctx.buf, start, end, 0, count
        return
    limit = ctx.cfg.record_limit
    pieces = iter_decompress(
        e.codec,
        ctx.buf[start:end],
        magic=2,
        max_bytes=ctx.cfg.max_decompressed_bytes,
        chunk=min(DECOMPRESS_CHUNK, max(limit, 64)),
    )
    work = ctx.work
    byte_work = BYTE_WORK.get(e.codec, 1)
    # a walk by the C accelerator costs a thirtieth of Python's (budget.py)
    record_work = ACCELERATED_WALK_WORK if walk and accelerator.active() else RECORD_WORK
    for window in v2.iter_record_windows(pieces, count, limit, walk=walk):
        if work is not None:
            work.charge((window[2] - window[1]) * byte_work + window[4] * record_work)
        yield window


def _v2_walk_windows(ctx: _Ctx, e: _Entry, count: int, *, until_unordered: bool = False):
    """``walk_records`` over every window of a v2 batch: the same aggregates as one walk of the whole
    section (min and max timestamp delta, null keys, offset deltas in order). ``until_unordered``:
    stop at the first window whose offset deltas are not in order (the batch will be rebuilt, and
    the rebuild reads it all again); the aggregates are then partial, ``in order`` False."""
    tmin = tmax = nulls = 0
    in_order = True
    with _record_format():
        for _, _, _, first, _, (lo, hi, k, ordered) in _v2_windows(ctx, e, count, walk=True):
            if first == 0:
                tmin, tmax = lo, hi
            else:
                tmin, tmax = min(tmin, lo), max(tmax, hi)
            nulls += k
            in_order = in_order and ordered
            if until_unordered and not in_order:
                break
    return tmin, tmax, nulls, in_order


def _v2_records(ctx: _Ctx, e: _Entry, fields):
    """The records of a v2 batch, decoded one window at a time (Kafka's streamingIterator)."""
    (base_offset, _, _, _, _, attrs, _, base_ts, max_ts, _, _, base_seq, count) = fields
    ts_type = TimestampType.LOG_APPEND_TIME if attrs & v2.TIMESTAMP_TYPE_MASK else TimestampType.CREATE_TIME
    with _record_format():
        for buf, start, end, first, n in _v2_windows(ctx, e, count):
            for r in v2.decode_records(
                buf,
                start,
                end,
                n,
                base_offset=base_offset,
                base_timestamp=base_ts,
                timestamp_type=ts_type,
                max_timestamp=max_ts,
                base_sequence=base_seq,
                first=first,
            ):
                yield _Rec(r.offset, r.timestamp, r.key, r.value, r.headers, 2, False, True, ts_type)


def _inner_messages(ctx: _Ctx, msg):
    """A wrapper's inner messages, decompressed as they are read (bounded as ``_v2_windows``)."""
    pieces = iter_decompress(
        msg.compression, msg.value, magic=msg.magic, max_bytes=ctx.cfg.max_decompressed_bytes
    )
    work = ctx.work
    byte_work = BYTE_WORK.get(msg.compression, 1)
    done = 0
    for i, m in enumerate(legacy.iter_message_stream(pieces, ctx.cfg.record_limit)):
        if work is not None:
            done += m.size * byte_work + RECORD_WORK
            if i & 1023 == 1023:
                work.charge(done)
                done = 0
        yield m


def _legacy_records(ctx: _Ctx, e: _Entry):
    """The records of one v0/v1 entry as Kafka's iterators yield them: the message itself, or a
    wrapper's inner messages (decompressed as they are read) with their absolute offsets."""
    with _record_format():
        msg = legacy.parse_message(ctx.buf, e.pos, e.pos + e.size)
        if msg.compression == Compression.NONE:
            yield _Rec(
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
            return
        if msg.value is None:
            raise legacy.LegacyFormatError("compressed wrapper message has a null value")
        base = 0
        if msg.magic == 1 and msg.offset != 0:
            # the wrapper carries the last inner offset: a first pass finds the inner ones' base. A
            # wrapper offset of 0 comes from clients (librdkafka, kafka-python) that leave it unset.
            last = None
            for m in _inner_messages(ctx, msg):
                last = m.offset
            if last is None:
                raise legacy.LegacyFormatError("Found invalid compressed record set with no inner records")
            base = msg.offset - last
            if base < 0:
                raise _invalid(
                    f"Found invalid wrapper offset in compressed v1 message set, wrapper offset "
                    f"'{msg.offset}' is less than the last inner message offset '{last}' and it is not zero."
                )
        log_append = msg.magic == 1 and msg.timestamp_type == TimestampType.LOG_APPEND_TIME
        n = 0
        for m in _inner_messages(ctx, msg):
            n += 1
            if log_append:
                ts, ts_type = msg.timestamp, TimestampType.LOG_APPEND_TIME
            else:
                ts, ts_type = m.timestamp, m.timestamp_type
            yield _Rec(
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
        if not n:
            raise legacy.LegacyFormatError("Found invalid compressed record set with no inner records")


def _b(mv) -> bytes | None:
    return None if mv is None else bytes(mv)


def _check_legacy_entry(ctx: _Ctx, e: _Entry, records, batch_ts_type: TimestampType, take=None):
    """validateRecordCompression + validateRecord for the v0/v1 records of one entry, as they come;
    ``take(record)`` for each one that passes. Returns (records, max timestamp, offsets 0..n-1).
    A bad inner CRC is CORRUPT_MESSAGE whatever else failed (Kafka throws there), else the record
    errors are raised together once the entry is read."""
    errors = _Errors()
    bad_crc = None
    count = 0
    max_ts = None
    in_order = True
    for i, r in enumerate(records):
        count += 1
        if max_ts is None or r.timestamp > max_ts:
            max_ts = r.timestamp
        if r.offset != i:
            in_order = False
        if bad_crc is not None:
            continue
        if ctx.source != Compression.NONE and r.compressed:
            errors.add(
                (
                    i,
                    _REC,
                    "Compressed outer record should not have an inner record with a compression "
                    "attribute set",
                )
            )
            continue
        if r.magic != e.magic:
            errors.add((i, _REC, f"Record's magic {r.magic} does not match outer magic {e.magic}"))
            continue
        if e.codec != Compression.NONE and not r.crc_valid:
            bad_crc = i
            continue
        err = _record_error(ctx, i, r.timestamp, r.offset, r.key is None, batch_ts_type)
        if err:
            errors.add(err)
        elif take is not None and not errors:
            take(r)
    if bad_crc is not None:
        raise _corrupt(f"Record is corrupt (inner message {bad_crc} of the wrapper at position {e.pos})")
    errors.raise_any()
    return count, NO_TIMESTAMP if max_ts is None else max_ts, in_order


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
        # a single v2 batch: walked (structure only: Kafka's skipKeyValueIterator), keys and values not
        # decoded, decompressed as the walk goes
        fields = _validate_v2_batch(ctx, first.pos)
        count = fields[12]
        # Kafka rebuilds batches whose offsets are not 0..n-1 (and so whose baseOffset is not 0). The
        # rebuild reads and checks every record as the walk would, but for one check on a batch stamped
        # LogAppendTime (its records' own timestamps): such a batch is walked to the end first; any other
        # goes to the rebuild as soon as its offsets are known to be out of order, read once, not twice.
        create_time_batch = not fields[5] & v2.TIMESTAMP_TYPE_MASK
        if fields[0] != 0 and create_time_batch:
            in_place = False
        else:
            walk = _v2_walk_windows(ctx, first, count, until_unordered=create_time_batch)
            if walk[3] or not create_time_batch:
                windows = lambda: _v2_windows(ctx, first, count)  # noqa: E731
                with _record_format():
                    _raise_record_errors(_v2_record_errors(ctx, fields, windows, walk))
            if fields[0] != 0 or not walk[3]:
                in_place = False
            else:
                max_ts = _walked_max_timestamp(fields, walk)
                return _in_place_compressed(ctx, first, valid_end, count, max_ts, trimmed)
    if in_place:
        # one v1 wrapper: in place when inner offsets are 0..n-1
        count, max_ts, in_order = _check_legacy_entry(
            ctx, first, _legacy_records(ctx, first), _batch_ts_type(ctx, first)
        )
        if in_order:
            return _in_place_compressed(ctx, first, valid_end, count, max_ts, trimmed)
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


class _Rebuilt:
    """The new batch (or wrapper, or message run) of a rebuild, written as the validated records come:
    Kafka's buildRecordsAndAssignOffsets without holding the records (``v2.BatchBuilder``,
    ``legacy.MessageSetBuilder``). Once anything makes the result unstorable (a timestamp it cannot
    hold) nothing more is written, but every record is still checked: Kafka reports record errors
    first. Record headers converted to magic 0/1 are dropped and counted (``headers_dropped``), as
    Kafka's down-conversion drops them. A batch that grows past max.message.bytes is refused
    at once (MESSAGE_TOO_LARGE; Kafka would read on and report a record error first, if any)."""

    __slots__ = ("ctx", "builder", "to_v2", "offset", "index", "ts_errors", "base_ts", "rows_max",
                 "legacy_max", "legacy_offset_of_max", "headers")

    def __init__(self, ctx: _Ctx, target: Compression, producer):
        self.ctx = ctx
        self.to_v2 = ctx.to_magic == 2
        pid, pepoch, base_seq, is_txn, is_control = producer
        if self.to_v2:
            self.builder = v2.BatchBuilder(
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
        else:
            self.builder = legacy.MessageSetBuilder(
                ctx.to_magic, compression=target, timestamp_type=ctx.ts_type, log_append_time=ctx.now
            )
        self.offset = ctx.next_offset
        self.index = 0  # over every record of the append
        self.ts_errors = _Errors()
        self.base_ts = None
        self.rows_max = None
        self.legacy_max, self.legacy_offset_of_max = NO_TIMESTAMP, -1
        self.headers = 0  # dropped: magic 0/1 messages have no headers

    def take(self, r: _Rec) -> None:
        ctx = self.ctx
        ts = r.timestamp
        if r.magic == 0 and ctx.to_magic > 0:
            ts = NO_TIMESTAMP
        if self.to_v2:
            # the new batch stores each timestamp as a delta from the first: both must fit int64 (Java's
            # builder would wrap them). Only reachable on a LogAppendTime topic or from v0/v1 input.
            if self.base_ts is None:
                self.base_ts = ts
            if not (_MIN_LONG <= ts <= _MAX_LONG and _MIN_LONG <= ts - self.base_ts <= _MAX_LONG):
                self.ts_errors.add((self.index, _TS, ctx.timestamp_error(ts, r.offset)))
        else:
            if r.headers:
                self.headers += len(r.headers)
            if ts > self.legacy_max:
                self.legacy_max, self.legacy_offset_of_max = ts, self.offset
        if self.rows_max is None or ts > self.rows_max:
            self.rows_max = ts
        if not self.ts_errors:
            self.builder.append(self.offset, ts, r.key, r.value, r.headers)
            if self.builder.size > ctx.cfg.max_message_bytes:
                # Kafka finds out once every record is read and built, and says so only if no record
                # failed; here at once, so a batch that rebuilds large is not read to its end
                raise KafkaError(
                    ErrorCode.MESSAGE_TOO_LARGE,
                    f"Message batch size is more than {self.builder.size} bytes in append, which exceeds "
                    f"the maximum configured size of {ctx.cfg.max_message_bytes}.",
                )
        self.offset += 1
        self.index += 1
        if ctx.work is not None and not self.index & 1023:
            ctx.work.charge(1024 * REBUILD_WORK)


def _rebuild(ctx: _Ctx, entries: list[_Entry], trimmed: int, *, compressed_path: bool) -> AppendResult:
    """Kafka's convertAndAssignOffsetsNonCompressed / buildRecordsAndAssignOffsets: read every record
    (streamed: decompressed and decoded as it is read), validate it, and write one new batch (or
    wrapper, or message run) at the target magic and codec as the records come."""
    first = _first_and_maybe_only(entries, ctx.source)
    target = ctx.target if compressed_path else Compression.NONE
    out = None
    for e in entries:
        _check_same_magic(first, e)
        if e.magic == 2:
            fields = _validate_v2_batch(ctx, e.pos)
            if out is None:
                (_, _, _, _, _, attrs, _, _, _, pid, pepoch, base_seq, _) = fields
                is_txn, is_control = bool(attrs & v2.TRANSACTIONAL_MASK), bool(attrs & v2.CONTROL_MASK)
                out = _Rebuilt(ctx, target, (pid, pepoch, base_seq, is_txn, is_control))
            errors = _Errors()
            ts_type = _batch_ts_type(ctx, e)
            for i, r in enumerate(_v2_records(ctx, e, fields)):
                err = _record_error(ctx, i, r.timestamp, r.offset, r.key is None, ts_type)
                if err:
                    errors.add(err)
                elif not errors:
                    out.take(r)
            errors.raise_any()
        else:
            if out is None:
                out = _Rebuilt(ctx, target, (NO_PRODUCER_ID, NO_PRODUCER_EPOCH, NO_SEQUENCE, False, False))
            _check_legacy_entry(ctx, e, _legacy_records(ctx, e), _batch_ts_type(ctx, e), out.take)
    out.ts_errors.raise_any()
    data = out.builder.build()
    offset = out.offset
    if out.to_v2:
        max_ts = (
            ctx.now
            if ctx.ts_type == TimestampType.LOG_APPEND_TIME
            else (NO_TIMESTAMP if out.rows_max is None else out.rows_max)
        )
        offset_of_max = offset - 1
    else:
        max_ts, offset_of_max = NO_TIMESTAMP, -1
        if ctx.to_magic == 1:
            if ctx.ts_type == TimestampType.LOG_APPEND_TIME:
                max_ts, offset_of_max = (
                    ctx.now,
                    (ctx.next_offset if target == Compression.NONE else offset - 1),
                )
            else:
                max_ts, offset_of_max = out.legacy_max, out.legacy_offset_of_max
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
    result = _result_from_data(ctx, data, path, max_ts, offset_of_max, trimmed)
    result.headers_dropped = out.headers
    return result


# ---------------------------------------------------------------------------------------------


def rebase(result: AppendResult, next_offset: int, leader_epoch: int | None = None) -> AppendResult:
    """``result`` (validated from another ``next_offset``: by a worker thread, while appends went on)
    moved to start at ``next_offset``: the offsets in ``data`` are patched (all outside every CRC)
    and so are the facts; with ``leader_epoch``, the v2 batches' partition leader epoch too (also
    outside the CRC: the partition's epoch may have moved on meanwhile). Not for a magic-0 wrapper,
    whose inner offsets are absolute and compressed: a magic-0 topic is validated where it is
    appended."""
    delta = next_offset - result.first_offset
    if (delta == 0 and leader_epoch is None) or result.path == AppendPath.EMPTY:
        return result
    data = result.data
    if isinstance(data, bytes) or (isinstance(data, memoryview) and data.readonly):
        data = bytearray(data)
    entries = []
    for e in result.entries:
        if e.magic == 0 and e.record_count < 0 and delta:
            raise ValueError("a magic-0 wrapper cannot be rebased")
        if e.magic == 2:
            _PATCH_OFFSET.pack_into(data, e.position, e.base_offset + delta)
            if leader_epoch is not None:
                _PATCH_EPOCH.pack_into(data, e.position + v2.PARTITION_LEADER_EPOCH_OFFSET, leader_epoch)
        else:
            legacy.set_offset(data, e.position, e.last_offset + delta)
        entries.append(e._replace(base_offset=e.base_offset + delta, last_offset=e.last_offset + delta))
    batches = [
        BatchFacts(
            b.producer_id,
            b.producer_epoch,
            b.base_sequence,
            b.last_sequence,
            b.first_offset + delta,
            b.last_offset + delta,
            b.is_transactional,
            b.is_control,
            b.record_count,
            b.max_timestamp,
        )
        for b in result.batches
    ]
    offset_of_max = result.offset_of_max_timestamp
    return AppendResult(
        data=data,
        first_offset=result.first_offset + delta,
        last_offset=result.last_offset + delta,
        max_timestamp=result.max_timestamp,
        offset_of_max_timestamp=offset_of_max if offset_of_max < 0 else offset_of_max + delta,
        log_append_time_ms=result.log_append_time_ms,
        record_count=result.record_count,
        path=result.path,
        batches=batches,
        entries=entries,
        source_compression=result.source_compression,
        target_compression=result.target_compression,
        trimmed_bytes=result.trimmed_bytes,
        headers_dropped=result.headers_dropped,
    )
