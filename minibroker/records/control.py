"""Control records (transaction markers) in v2 control batches.

Key: int16 version (0) + int16 type (0 abort, 1 commit). Value of an end-transaction marker:
int16 version (0) + int32 coordinator epoch.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from enum import IntEnum

from minibroker.records import v2
from minibroker.records.record import Record, TimestampType

_KEY = struct.Struct(">hh")
_MARKER = struct.Struct(">hi")


class ControlType(IntEnum):
    ABORT = 0
    COMMIT = 1

    def __str__(self) -> str:
        return self.name


@dataclass(frozen=True)
class EndTxnMarker:
    control_type: ControlType
    coordinator_epoch: int


def parse_control_record(record: Record) -> EndTxnMarker | None:
    """The marker a control record carries, or None for an unknown control type."""
    if record.key is None or len(record.key) < 4:
        return None
    _, ctype = _KEY.unpack_from(record.key)
    if ctype not in (0, 1) or record.value is None or len(record.value) < 6:
        return None
    _, epoch = _MARKER.unpack_from(record.value)
    return EndTxnMarker(ControlType(ctype), epoch)


def build_end_txn_marker(
    *,
    commit: bool,
    producer_id: int,
    producer_epoch: int,
    coordinator_epoch: int,
    timestamp: int,
    base_offset: int = 0,
    partition_leader_epoch: int = -1,
) -> bytes:
    """One transactional control batch holding a COMMIT or ABORT marker."""
    key = _KEY.pack(0, ControlType.COMMIT if commit else ControlType.ABORT)
    value = _MARKER.pack(0, coordinator_epoch)
    return v2.build_batch(
        [(base_offset, timestamp, key, value, ())],
        base_offset=base_offset,
        timestamp_type=TimestampType.CREATE_TIME,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        is_transactional=True,
        is_control=True,
        partition_leader_epoch=partition_leader_epoch,
    )


def read_end_txn_marker(buf, position: int = 0) -> EndTxnMarker | None:
    """The marker of the control batch at ``position`` (its first record, as Kafka reads it), or None
    for an empty batch or an unknown control type."""
    records = v2.batch_records(buf, position)
    return parse_control_record(records[0]) if records else None
