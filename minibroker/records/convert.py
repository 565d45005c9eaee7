"""Down-conversion for old fetchers (Fetch v0-v3 read magic 0/1 only), like Kafka's RecordsUtil.

Entries already at or below the target magic pass through untouched. Newer ones are decoded
and rebuilt at the target magic with the same codec: one message per record when
uncompressed, one wrapper per batch when compressed (lz4 for magic 0 with Kafka's broken
header checksum). Control batches are dropped (old clients know no transaction markers);
record headers are dropped (magic 0/1 cannot hold them, Kafka drops them too); zstd cannot be
expressed before magic 2, so it fails with UNSUPPORTED_COMPRESSION_TYPE, as Kafka answers. A
trailing partial entry is dropped.
"""

from __future__ import annotations

from minibroker.errors import ErrorCode, KafkaError
from minibroker.records import legacy
from minibroker.records.batches import EntryFormatError, iter_batches
from minibroker.records.codecs import DEFAULT_MAX_DECOMPRESSED_BYTES, Compression
from minibroker.records.record import NO_TIMESTAMP, TimestampType

__all__ = ["down_convert"]


def down_convert(
    data,
    to_magic: int,
    *,
    first_offset: int = 0,
    max_decompressed_bytes: int = DEFAULT_MAX_DECOMPRESSED_BYTES,
) -> bytes:
    """Return ``data`` with every entry newer than ``to_magic`` (0 or 1) converted down.

    ``first_offset`` is the fetch offset: records below it in an *uncompressed* converted batch are
    left out (a compressed batch is converted whole, its wrapper must stay intact), as Kafka does.
    """
    if to_magic not in (0, 1, 2):
        raise ValueError(f"cannot convert to magic {to_magic}")
    mv = memoryview(data)
    out = []
    try:
        for batch in iter_batches(mv):
            if batch.magic <= to_magic:
                out.append(mv[batch.position : batch.position + batch.size])
                continue
            if batch.is_control:
                continue
            if batch.compression == Compression.ZSTD:
                raise KafkaError(
                    ErrorCode.UNSUPPORTED_COMPRESSION_TYPE,
                    f"zstd-compressed data cannot be down-converted to magic {to_magic}",
                )
            records = batch.records(max_decompressed_bytes=max_decompressed_bytes)
            if batch.compression == Compression.NONE:
                records = [r for r in records if r.offset >= first_offset]
            if not records:
                continue
            log_append = batch.timestamp_type == TimestampType.LOG_APPEND_TIME
            out.append(
                legacy.build_message_set(
                    to_magic,
                    records,
                    compression=batch.compression,
                    timestamp_type=TimestampType.LOG_APPEND_TIME if log_append else TimestampType.CREATE_TIME,
                    log_append_time=batch.max_timestamp if log_append else NO_TIMESTAMP,
                )
            )
    except (EntryFormatError, legacy.LegacyFormatError, ValueError) as exc:
        if isinstance(exc, KafkaError):
            raise
        raise KafkaError(ErrorCode.CORRUPT_MESSAGE, f"cannot down-convert: {exc}") from None
    return b"".join(out)
