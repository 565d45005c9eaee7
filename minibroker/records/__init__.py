"""Sans-I/O record layer: Kafka's v0/v1 message sets and v2 record batches, codecs, validation
and offset assignment on append, down-conversion for old fetchers.

Public API for the Produce/Fetch handlers, tools and coordinators:

- ``validate_and_assign(records, *, next_offset, now_ms, config, produce_version, leader_epoch=0,
  is_from_client=True) -> AppendResult`` with ``AppendConfig`` (validator.py)
- ``down_convert(data, to_magic, *, first_offset=0) -> bytes`` (convert.py)
- ``iter_batches(data)`` / ``iter_records(data)`` -> ``Batch`` / ``Record`` (batches.py, record.py)
- builders: ``v2.build_batch``, ``legacy.build_message_set``, ``build_records``
- codecs: ``Compression``, ``compress``, ``decompress``, ``has_snappy/has_lz4/has_zstd``
- ``framing``: the shared entry walker storage uses for recovery and index building
"""

from __future__ import annotations

from minibroker.records import framing, legacy, v2
from minibroker.records.batches import Batch, EntryFormatError, iter_batches, iter_records
from minibroker.records.codecs import Compression, compress, decompress, has_lz4, has_snappy, has_zstd
from minibroker.records.control import ControlType, EndTxnMarker, build_end_txn_marker, parse_control_record
from minibroker.records.convert import down_convert
from minibroker.records.record import Record, TimestampType
from minibroker.records.validator import (
    AppendConfig,
    AppendPath,
    AppendResult,
    BatchFacts,
    validate_and_assign,
)

__all__ = [
    "AppendConfig",
    "AppendPath",
    "AppendResult",
    "Batch",
    "BatchFacts",
    "Compression",
    "ControlType",
    "EndTxnMarker",
    "EntryFormatError",
    "Record",
    "TimestampType",
    "build_end_txn_marker",
    "build_records",
    "compress",
    "decompress",
    "down_convert",
    "framing",
    "has_lz4",
    "has_snappy",
    "has_zstd",
    "iter_batches",
    "iter_records",
    "legacy",
    "parse_control_record",
    "v2",
    "validate_and_assign",
]


def build_records(
    magic: int,
    records,
    *,
    compression: int = Compression.NONE,
    timestamp_type: TimestampType = TimestampType.CREATE_TIME,
    **kw,
) -> bytes:
    """Encode records in any magic: ``records`` yields ``(offset, timestamp, key, value[, headers])``
    or ``Record``; v2 keywords (``base_offset``, ``producer_id``, ...) go to ``v2.build_batch``."""
    if magic == 2:
        rows = [r if isinstance(r, Record) else (tuple(r) + ((),))[:5] for r in records]
        if "base_offset" not in kw and rows:
            kw["base_offset"] = rows[0].offset if isinstance(rows[0], Record) else rows[0][0]
        return v2.build_batch(rows, compression=compression, timestamp_type=timestamp_type, **kw)
    return legacy.build_message_set(
        magic, records, compression=compression, timestamp_type=timestamp_type, **kw
    )
