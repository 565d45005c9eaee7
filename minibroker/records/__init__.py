"""Sans-I/O record layer: Kafka's v0/v1 message sets and v2 record batches, codecs, validation
and offset assignment on append, down-conversion for old fetchers.

Public API for the Produce/Fetch handlers, tools and coordinators:

- ``validate_and_assign(records, *, next_offset, now_ms, config, produce_version, leader_epoch=0,
  is_from_client=True, work_budget=None, cancel=None) -> AppendResult`` with ``AppendConfig``;
  ``ValidationDeferred`` / ``ValidationCancelled`` and ``rebase(result, next_offset, leader_epoch=None)``
  for validation away from the event loop (validator.py)
- ``down_convert(data, to_magic, *, first_offset=0) -> bytes`` (convert.py)
- ``iter_batches(data)`` / ``iter_records(data)`` -> ``Batch`` / ``Record`` (batches.py, record.py)
- builders: ``v2.build_batch``, ``legacy.build_message_set``, ``build_records``
- codecs: ``Compression``, ``compress``, ``decompress``, ``has_snappy/has_lz4/has_zstd``
- ``framing``: the shared entry walker storage uses for recovery and index building
"""

from __future__ import annotations

import importlib

# Public names -> the module defining them. Loaded on first use (PEP 562): storage imports only
# ``framing`` at startup, and the codecs' libraries (zstd, lz4, snappy) load with the validator.
_EXPORTS = {
    "Batch": "batches",
    "EntryFormatError": "batches",
    "iter_batches": "batches",
    "iter_records": "batches",
    "Compression": "codecs",
    "compress": "codecs",
    "decompress": "codecs",
    "has_lz4": "codecs",
    "has_snappy": "codecs",
    "has_zstd": "codecs",
    "ControlType": "control",
    "EndTxnMarker": "control",
    "build_end_txn_marker": "control",
    "parse_control_record": "control",
    "down_convert": "convert",
    "Record": "record",
    "TimestampType": "record",
    "AppendConfig": "validator",
    "AppendPath": "validator",
    "AppendResult": "validator",
    "BatchFacts": "validator",
    "ValidationCancelled": "budget",
    "ValidationDeferred": "budget",
    "rebase": "validator",
    "validate_and_assign": "validator",
}
_SUBMODULES = {"framing", "legacy", "v2"}


def __getattr__(name: str):
    if name in _SUBMODULES:
        return importlib.import_module(f"minibroker.records.{name}")
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'minibroker.records' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"minibroker.records.{module}"), name)
    globals()[name] = value
    return value


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
    "ValidationCancelled",
    "ValidationDeferred",
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
    "rebase",
    "v2",
    "validate_and_assign",
]


def build_records(magic: int, records, *, compression: int = 0, timestamp_type: int = 0, **kw) -> bytes:
    """Encode records in any magic: ``records`` yields ``(offset, timestamp, key, value[, headers])``
    or ``Record``; v2 keywords (``base_offset``, ``producer_id``, ...) go to ``v2.build_batch``.
    ``compression`` is a ``Compression`` (0 none), ``timestamp_type`` a ``TimestampType`` (0 CreateTime)."""
    from minibroker.records import legacy, v2
    from minibroker.records.codecs import Compression
    from minibroker.records.record import Record, TimestampType

    compression, timestamp_type = Compression(compression), TimestampType(timestamp_type)
    if magic == 2:
        rows = [r if isinstance(r, Record) else (tuple(r) + ((),))[:5] for r in records]
        if "base_offset" not in kw and rows:
            kw["base_offset"] = rows[0].offset if isinstance(rows[0], Record) else rows[0][0]
        return v2.build_batch(rows, compression=compression, timestamp_type=timestamp_type, **kw)
    return legacy.build_message_set(
        magic, records, compression=compression, timestamp_type=timestamp_type, **kw
    )
