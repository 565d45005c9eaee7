"""Appends to and reads from the local partition logs, as Kafka's ReplicaManager does on a leader.

Owner of: each partition's producer state table and the waiters of long-polling fetches.
The append path is synchronous from validation to the write (no await between reading the
log end offset and appending), so offsets are assigned exactly once, in order.
"""

from __future__ import annotations

import asyncio
import logging
import struct
import time
from typing import NamedTuple

from minibroker.coordinator.producer_state import ProducerStateTable, snapshot_files
from minibroker.errors import ErrorCode, KafkaError

log = logging.getLogger("minibroker.replica")
append_log = logging.getLogger("minibroker.append")

_PID_EPOCH_SEQ = struct.Struct(">qhi")
REPLAY_CHUNK = 8 << 20


def _validate_and_assign():
    """The validator, imported on first use: codecs (zstd, lz4, snappy) cost startup time."""
    global _validator
    if _validator is None:
        from minibroker.records import validate_and_assign

        _validator = validate_and_assign
    return _validator


_validator = None


class AppendOutcome(NamedTuple):
    base_offset: int
    log_append_time_ms: int
    log_start_offset: int
    duplicate: bool = False
    path: str = ""
    record_count: int = 0


def _timestamp_bound(value) -> int:
    value = int(value)
    return value if value >= 0 else 2**63 - 1


def append_config_for(log_config: dict, broker_config):
    """The validator's view of a topic's effective config (an ``AppendConfig``)."""
    from minibroker.records import AppendConfig  # the record layer loads with the first append

    before = log_config.get(
        "message.timestamp.before.max.ms", log_config.get("message.timestamp.difference.max.ms", 2**63 - 1)
    )
    after = log_config.get(
        "message.timestamp.after.max.ms", log_config.get("message.timestamp.difference.max.ms", 2**63 - 1)
    )
    cleanup = log_config.get("cleanup.policy", "delete")
    if isinstance(cleanup, str):
        cleanup = [c.strip() for c in cleanup.split(",")]
    return AppendConfig(
        message_timestamp_type=log_config.get("message.timestamp.type", "CreateTime"),
        timestamp_before_max_ms=_timestamp_bound(before),
        timestamp_after_max_ms=_timestamp_bound(after),
        compacted="compact" in cleanup,
        compression_type=log_config.get("compression.type", "producer"),
        max_message_bytes=int(log_config.get("max.message.bytes", broker_config["message.max.bytes"])),
    )


class ReplicaManager:
    def __init__(self, broker) -> None:
        self.broker = broker
        self.logs = broker.logs
        self._producer_states: dict[tuple[str, int], ProducerStateTable] = {}
        self._waiters: dict[tuple[str, int], set[asyncio.Future]] = {}
        self._append_configs: dict[tuple[str, int], tuple] = {}

    # -- lookup ---------------------------------------------------------------------------------

    def get_log(self, topic: str, partition: int):
        return self.logs.get_log(topic, partition)  # raises UNKNOWN_TOPIC_OR_PARTITION

    def producer_state(self, topic: str, partition: int) -> ProducerStateTable:
        key = (topic, partition)
        table = self._producer_states.get(key)
        if table is None:
            table = self._load_producer_state(self.get_log(topic, partition))
            self._producer_states[key] = table
        return table

    def _load_producer_state(self, plog) -> ProducerStateTable:
        """Latest usable snapshot, then the log after it replayed batch header by batch header."""
        table = ProducerStateTable()
        start = plog.log_start_offset
        for offset, path in reversed(snapshot_files(plog.directory)):
            if offset > plog.log_end_offset:
                continue
            try:
                table = ProducerStateTable.read_snapshot(path)
                start = max(offset, plog.log_start_offset)
                break
            except (OSError, ValueError, struct.error) as e:
                log.warning("ignoring producer snapshot %s: %s", path, e)
        replayed = 0
        for data, entry in plog.iter_entries(start, REPLAY_CHUNK):
            if entry.magic != 2:
                continue
            pid, epoch, base_seq = _PID_EPOCH_SEQ.unpack_from(data, entry.position + 43)
            if pid >= 0 and base_seq >= 0:
                delta = entry.last_offset - entry.base_offset
                table.record(pid, epoch, base_seq, base_seq + delta, entry.base_offset, entry.last_offset,
                             entry.max_timestamp)
                replayed += 1
        if replayed:
            log.debug("%s: producer state rebuilt from %d batches after offset %d", plog.dir, replayed, start)
        return table

    def write_snapshots(self) -> None:
        for (topic, partition), table in self._producer_states.items():
            try:
                plog = self.logs.get_log(topic, partition)
            except KafkaError:
                continue  # deleted since
            if table.producers and not plog.closed:
                try:
                    table.write_snapshot(plog.directory, plog.log_end_offset)
                except OSError as e:
                    log.warning("could not write producer snapshot for %s-%d: %s", topic, partition, e)

    def forget_partition(self, topic: str, partition: int) -> None:
        self._producer_states.pop((topic, partition), None)
        self._append_configs.pop((topic, partition), None)

    def _append_config(self, topic: str, partition: int, plog):
        key = (topic, partition)
        version = id(plog.config)
        cached = self._append_configs.get(key)
        if cached is None or cached[0] != version:
            cached = (version, append_config_for(plog.config, self.broker.config))
            self._append_configs[key] = cached
        return cached[1]

    # -- append ---------------------------------------------------------------------------------

    def append_records(
        self,
        topic: str,
        partition: int,
        records,
        produce_version: int,
        now_ms: int | None = None,
        *,
        from_client: bool = True,
    ) -> AppendOutcome:
        """Validate, check idempotence, assign offsets and append one partition's records."""
        plog = self.get_log(topic, partition)
        if records is None or len(records) == 0:
            raise KafkaError(ErrorCode.INVALID_RECORD, "Produce request carried no records")
        if now_ms is None:
            now_ms = int(time.time() * 1000)
        config = self._append_config(topic, partition, plog)
        result = _validate_and_assign()(
            records,
            next_offset=plog.log_end_offset,
            now_ms=now_ms,
            config=config,
            produce_version=produce_version,
            leader_epoch=0,
            is_from_client=from_client,
        )
        table = None
        for batch in result.batches:
            if batch.producer_id < 0:
                continue
            if table is None:
                table = self.producer_state(topic, partition)
            duplicate = table.check(
                batch.producer_id, batch.producer_epoch, batch.base_sequence, batch.last_sequence
            )
            if duplicate is not None:
                if len(result.batches) == 1:
                    raise KafkaError(
                        ErrorCode.DUPLICATE_SEQUENCE_NUMBER,
                        "duplicate batch",
                        base_offset=duplicate.first_offset,
                    )
                raise KafkaError(
                    ErrorCode.DUPLICATE_SEQUENCE_NUMBER, "duplicate batch in a multi-batch request"
                )
        plog.append(
            result.data,
            first_offset=result.first_offset,
            last_offset=result.last_offset,
            max_timestamp=result.max_timestamp,
            offset_of_max_timestamp=result.offset_of_max_timestamp,
            record_count=result.record_count,
        )
        if append_log.isEnabledFor(logging.DEBUG):  # what happened to the batch: for teaching and tracing
            append_log.debug(
                "%s-%d: %d records at offsets %d..%d, %s (%s -> %s, produce v%d, %d bytes)",
                topic,
                partition,
                result.record_count,
                result.first_offset,
                result.last_offset,
                result.path,
                result.source_compression.name.lower(),
                result.target_compression.name.lower(),
                produce_version,
                len(result.data),
            )
        if table is not None:
            for batch in result.batches:
                table.record(
                    batch.producer_id,
                    batch.producer_epoch,
                    batch.base_sequence,
                    batch.last_sequence,
                    batch.first_offset,
                    batch.last_offset,
                    result.max_timestamp,
                )
        self.broker.metrics.bytes_in += len(result.data)
        self.wake(topic, partition)
        return AppendOutcome(
            result.first_offset,
            result.log_append_time_ms,
            plog.log_start_offset,
            path=str(result.path),
            record_count=result.record_count,
        )

    # -- long-poll waiters ----------------------------------------------------------------------

    def wake(self, topic: str, partition: int) -> None:
        waiters = self._waiters.pop((topic, partition), None)
        if waiters:
            for fut in waiters:
                if not fut.done():
                    fut.set_result(None)

    def watch_appends(self, keys) -> asyncio.Future:
        """A future completed by the next append to any of ``keys`` (topic, partition).

        Registered at once, so an append that happens before the caller gets to await it (a
        coroutine returned by a handler starts a loop iteration later) still completes it.
        Pair with ``wait_for_append`` or ``unwatch``.
        """
        fut = asyncio.get_running_loop().create_future()
        for key in keys:
            self._waiters.setdefault(key, set()).add(fut)
        return fut

    def unwatch(self, keys, fut: asyncio.Future) -> None:
        for key in keys:
            waiters = self._waiters.get(key)
            if waiters is not None:
                waiters.discard(fut)
                if not waiters:
                    self._waiters.pop(key, None)

    async def wait_for_append(self, keys, watch: asyncio.Future, seconds: float) -> bool:
        """Wait until ``watch`` (from ``watch_appends(keys)``) sees an append, or ``seconds`` pass;
        True when there was an append. Unwatches either way."""
        try:
            if watch.done():
                return True
            if seconds <= 0:
                return False
            async with asyncio.timeout(seconds):
                await watch
            return True
        except TimeoutError:
            return False
        finally:
            self.unwatch(keys, watch)
