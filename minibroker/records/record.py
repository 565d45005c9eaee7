"""The decoded record every format reads into: what tools, tests and coordinators look at."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import IntEnum

NO_TIMESTAMP = -1
NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
NO_SEQUENCE = -1
NO_PARTITION_LEADER_EPOCH = -1


class TimestampType(IntEnum):
    """``str()`` gives the name Kafka's tools print."""

    NO_TIMESTAMP_TYPE = -1
    CREATE_TIME = 0
    LOG_APPEND_TIME = 1

    def __str__(self) -> str:
        return {-1: "NoTimestampType", 0: "CreateTime", 1: "LogAppendTime"}[self.value]

    @classmethod
    def from_name(cls, name: str) -> TimestampType:
        return {"CreateTime": cls.CREATE_TIME, "LogAppendTime": cls.LOG_APPEND_TIME}[name]


Header = tuple[str, "bytes | None"]


@dataclass(frozen=True, slots=True)
class Record:
    """One decoded record, whatever magic it was stored in.

    ``offset`` is absolute; ``timestamp`` is the effective one (a LogAppendTime batch's records all
    report the batch's time); ``headers`` is empty for magic 0/1; ``sequence`` is -1 outside
    idempotent v2 batches; ``is_control`` marks records of a control batch (transaction markers).
    """

    offset: int
    timestamp: int
    timestamp_type: TimestampType
    key: bytes | None
    value: bytes | None
    headers: tuple[Header, ...] = ()
    sequence: int = NO_SEQUENCE
    is_control: bool = False
    size: int = field(default=-1, compare=False)  # bytes the record takes in its batch (-1 unknown)
