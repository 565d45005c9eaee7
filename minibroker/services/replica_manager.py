"""Appends to and reads from the local partition logs, as Kafka's ReplicaManager does on a leader.

Owner of: the waiters of long-polling fetches and the worker thread that validates what would hold
the event loop too long. Each partition's producer state table is its log's (``PartitionLog.producer_state``).

Transactions, on the log side: ``write_txn_marker`` appends an end-transaction marker for the
transaction coordinator (Kafka's coordinator-origin append: no client validation), closes the
producer's transaction in the partition's producer state and, for an abort, adds the transaction
to the ``.txnindex`` of the segment holding the marker. ``last_stable_offset`` is the first offset
of the earliest open transaction, else the high watermark. The producer state is loaded lazily by the
partition log, with minibroker/storage/producer_state.py (the latest snapshot, then the log after it;
after an unclean shutdown that load also refills the txn indexes that recovery emptied).

The append path is synchronous from reading the log end offset to the write (no await between
them), so offsets are assigned exactly once, in order. Validation is part of that step for
almost every batch; a compressed batch whose decompression and record walk would take more
than ``INLINE_VALIDATION_WORK`` (~5 ms: a large one, or a decompression bomb) is validated in a
worker thread instead (``append_records_in_worker``: zlib, lz4, zstd and snappy release the GIL
while they work), against offsets from 0, and then rebased to the log end offset, checked
against the producer's sequence and appended back on the loop, in one synchronous step.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import struct
import sys
import threading
import time
from typing import NamedTuple

from minibroker.config.message_format import DEFAULT_MESSAGE_FORMAT_VERSION, magic_for_version
from minibroker.errors import ErrorCode, KafkaError
from minibroker.records import accelerator
from minibroker.storage.producer_state import ProducerStateTable, aborted_txn

log = logging.getLogger("minibroker.replica")
append_log = logging.getLogger("minibroker.append")
# At DEBUG: each append's bytes as the producer sent them and as stored, in hex (for `minibroker explain`)
append_bytes_log = logging.getLogger("minibroker.append.bytes")
APPEND_TRACE_BYTES = 4096  # at most this much of each side is logged


# Validation a produce request may do on the event loop, per partition, before the rest of it goes to
# the worker thread: in units of records.budget (about nanoseconds of work here; counted in work, not
# time, see there), 5,000,000 ~ 5 ms. The records are checked window by window: the overshoot is at
# most a window, ~2-3 ms. A deferred batch is validated again from its start, so what can be foreseen
# goes to the worker at once, wasting nothing: a compressed batch of DEFER_COMPRESSED_BYTES or more,
# or declaring DEFER_RECORDS records or more (the walk costs ~0.7 us a record: a 1 MiB batch of
# 100 B records takes 7-13 ms). Left to the budget is what a batch does not declare: how much it
# inflates to (a bomb). One thread: the record walk holds the GIL, and every thread holding it makes
# the event loop wait longer for it.
INLINE_VALIDATION_WORK = 5_000_000
DEFER_COMPRESSED_BYTES = 256 * 1024
DEFER_RECORDS = 4000
# Where the record layer's C accelerator walks the records (issue 29: ~15 ns a record, and the GIL
# released for large windows), an lz4 or zstd v2 batch's cost is its decompression, about a
# nanosecond a byte: one of up to 1 MiB (max.message.bytes' default) is validated inline, and the
# budget still stops what inflates too far. Measured with kcat's 1 MB batches: broker CPU -35% (lz4)
# and -17% (zstd) against the worker (docs/benchmarks.md). gzip (3 units a byte) and snappy keep the
# bounds above.
ACCELERATED_INLINE_CODECS = (3, 4)  # lz4, zstd
DEFER_COMPRESSED_BYTES_ACCELERATED = 1024 * 1024 + 1024
DEFER_RECORDS_ACCELERATED = 100_000
VALIDATION_THREADS = 1
GIL_SWITCH_INTERVAL = 0.001  # set once the worker starts (see ReplicaManager._workers)


def _validate_and_assign():
    """The validator, imported on first use: codecs (zstd, lz4, snappy) cost startup time."""
    global _validator
    if _validator is None:
        from minibroker.records import validate_and_assign

        _validator = validate_and_assign
    return _validator


_validator = None


def _foreseeably_long(records) -> bool:
    """Whether ``records`` starts with a compressed entry (any magic) whose validation will take long
    whatever it inflates to: ``DEFER_COMPRESSED_BYTES`` or more, or a v2 batch declaring
    ``DEFER_RECORDS`` records or more (an lz4 or zstd v2 batch: the ``_ACCELERATED`` bounds where
    the C accelerator walks the records)."""
    if len(records) < 61:
        return False
    if records[16] != 2:
        return bool(records[17] & 0x07) and len(records) >= DEFER_COMPRESSED_BYTES
    if not records[22] & 0x07:
        return False
    if records[22] & 0x07 in ACCELERATED_INLINE_CODECS and accelerator.active():
        big, many = DEFER_COMPRESSED_BYTES_ACCELERATED, DEFER_RECORDS_ACCELERATED
    else:
        big, many = DEFER_COMPRESSED_BYTES, DEFER_RECORDS
    return len(records) >= big or _I32.unpack_from(records, 57)[0] >= many


_I32 = struct.Struct(">i")


# Exceptions that escaped the checks, by site: (type name, file, line) -> [unreported count, last report]
_unexpected_sites: dict[tuple[str, str, int], list] = {}
UNEXPECTED_REPORT_INTERVAL = 60.0


def report_unexpected(topic: str, partition: int, exc: BaseException, answered: str) -> None:
    """Log an exception that escaped the record checks or the append (a broker bug, or damage no check
    foresaw) and was answered ``answered`` for that partition alone.

    The first one from a site (its type and the line that raised it) is logged at ERROR with its
    traceback; later ones from that site at most once a minute, one line with how many there were.
    A client that resends the same bad batch in a loop cannot fill the log with tracebacks."""
    tb = exc.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    site = (type(exc).__name__, tb.tb_frame.f_code.co_filename if tb else "", tb.tb_lineno if tb else 0)
    now = time.monotonic()
    seen = _unexpected_sites.get(site)
    if seen is None:
        _unexpected_sites[site] = [0, now]
        log.error(
            "%s-%d: unexpected %s in the append path, answered %s (a broker bug: please report it): %s",
            topic,
            partition,
            type(exc).__name__,
            answered,
            exc,
            exc_info=(type(exc), exc, exc.__traceback__),
        )
        return
    seen[0] += 1
    if now - seen[1] >= UNEXPECTED_REPORT_INTERVAL:
        log.error(
            "%s-%d: unexpected %s in the append path again, answered %s: %s (%d times since the last "
            "report; the first one was logged with its traceback)",
            topic,
            partition,
            type(exc).__name__,
            answered,
            exc,
            seen[0],
        )
        seen[0], seen[1] = 0, now


PRODUCE_VERSION_FOR_MARKERS = 11  # markers are v2 batches: any Produce version >= 3 validates them alike


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
        message_format_magic=magic_for_version(
            log_config.get("message.format.version", DEFAULT_MESSAGE_FORMAT_VERSION)
        ),
    )


def _write(plog, result) -> None:
    """Append a validated ``AppendResult`` (offsets assigned) to the partition log."""
    plog.append(
        result.data,
        first_offset=result.first_offset,
        last_offset=result.last_offset,
        max_timestamp=result.max_timestamp,
        offset_of_max_timestamp=result.offset_of_max_timestamp,
        record_count=result.record_count,
    )


def _sent_bytes(records) -> tuple[bytes, int] | None:
    """The head of the records before validation patches them in place (only for the byte trace)."""
    if not append_bytes_log.isEnabledFor(logging.DEBUG):
        return None
    return bytes(records[:APPEND_TRACE_BYTES]), len(records)


def _log_append(topic: str, partition: int, result, produce_version: int, sent) -> None:
    """The append log: which path ran (in-place, recompressed, converted), and at DEBUG on
    ``minibroker.append.bytes`` the bytes before and after (``minibroker explain --append-log``)."""
    magic = result.entries[0].magic if result.entries else -1
    dropped = f", {result.headers_dropped} record headers dropped" if result.headers_dropped else ""
    append_log.debug(
        "%s-%d: %d records at offsets %d..%d, %s (%s -> %s, magic %d, produce v%d, %d bytes%s)",
        topic, partition, result.record_count, result.first_offset, result.last_offset, result.path,
        result.source_compression.name.lower(), result.target_compression.name.lower(), magic,
        produce_version, len(result.data), dropped,
    )
    if sent is not None and append_bytes_log.isEnabledFor(logging.DEBUG):
        head, sent_len = sent
        append_bytes_log.debug(
            "%s-%d: offsets %d..%d path=%s sent_len=%d stored_len=%d sent=%s stored=%s",
            topic, partition, result.first_offset, result.last_offset, result.path, sent_len,
            len(result.data), head.hex(), bytes(result.data[:APPEND_TRACE_BYTES]).hex(),
        )


class ReplicaManager:
    def __init__(self, broker) -> None:
        self.broker = broker
        self.logs = broker.logs
        self._waiters: dict[tuple[str, int], set[asyncio.Future]] = {}
        self._append_configs: dict[tuple[str, int], tuple] = {}
        self._executor = None  # the validation worker (append_records_in_worker), started on first use
        self._cancels: set[threading.Event] = set()

    # -- lookup ---------------------------------------------------------------------------------

    def get_log(self, topic: str, partition: int):
        return self.logs.get_log(topic, partition)  # raises UNKNOWN_TOPIC_OR_PARTITION

    def producer_state(self, topic: str, partition: int) -> ProducerStateTable:
        """The partition's producer state (its log loads it on first use)."""
        return self.get_log(topic, partition).producer_state

    def forget_partition(self, topic: str, partition: int) -> None:
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
        work_budget: int | None = None,
    ) -> AppendOutcome:
        """Validate, check idempotence, assign offsets and append one partition's records.

        With ``work_budget`` (the Produce handler's ``INLINE_VALIDATION_WORK``), a
        batch whose validation would take longer raises ``ValidationDeferred`` (from
        ``minibroker.records``) with nothing appended and ``records`` untouched: hand a copy of them
        to ``append_records_in_worker``. A compressed batch that will take long (large, or with many
        records) raises it at once."""
        plog = self.get_log(topic, partition)
        if records is None or len(records) == 0:
            raise KafkaError(ErrorCode.INVALID_RECORD, "Produce request carried no records")
        if now_ms is None:
            now_ms = int(time.time() * 1000)
        config = self._append_config(topic, partition, plog)
        if work_budget is not None:
            if config.message_format_magic == 0:
                work_budget = None  # a magic-0 wrapper's offsets cannot be rebased: validated here
            elif _foreseeably_long(records):
                from minibroker.records import ValidationDeferred

                raise ValidationDeferred()
        sent = _sent_bytes(records)
        try:
            # validation comes first and raises only KafkaError: nothing is appended unless it passed
            result = _validate_and_assign()(
                records,
                next_offset=plog.log_end_offset,
                now_ms=now_ms,
                config=config,
                produce_version=produce_version,
                leader_epoch=plog.leader_epoch,
                is_from_client=from_client,
                work_budget=work_budget,
            )
        except KafkaError as e:
            unexpected = e.details.get("unexpected")
            if unexpected is not None:
                report_unexpected(topic, partition, unexpected, e.code.name)
            raise
        return self._append_validated(topic, partition, plog, result, produce_version, sent,
                                      from_client=from_client, sent_len=len(records))

    async def append_records_in_worker(
        self,
        topic: str,
        partition: int,
        records: bytearray,
        produce_version: int,
        now_ms: int,
        *,
        from_client: bool = True,
    ) -> AppendOutcome:
        """``append_records`` with the validation in the worker thread, for a batch whose validation
        was deferred. ``records`` must be the caller's own copy (it is patched in place), not a view
        of a connection's read buffer, which is reused once the request is handled.

        The worker validates against offsets from 0; back on the loop, in one synchronous step, the
        result is rebased to the log end offset of that moment, checked against the producer's
        sequence state and appended. Appends from other requests may come in between, as they
        would with any interleaving of requests: each append is whole. Cancelled (the connection
        went away, the broker stops), the worker gives up at its next window."""
        from minibroker.records import ValidationCancelled, rebase

        plog = self.get_log(topic, partition)
        config = self._append_config(topic, partition, plog)
        sent = _sent_bytes(records)
        epoch = plog.leader_epoch
        cancel = threading.Event()
        work = functools.partial(
            _validate_and_assign(),
            records,
            next_offset=0,
            now_ms=now_ms,
            config=config,
            produce_version=produce_version,
            leader_epoch=epoch,
            is_from_client=from_client,
            cancel=cancel,
        )
        self._cancels.add(cancel)
        try:
            result = await asyncio.get_running_loop().run_in_executor(self._workers(), work)
        except KafkaError as e:
            unexpected = e.details.get("unexpected")
            if unexpected is not None:
                report_unexpected(topic, partition, unexpected, e.code.name)
            raise
        except ValidationCancelled:
            raise KafkaError(ErrorCode.REQUEST_TIMED_OUT, "the broker is stopping") from None
        finally:
            cancel.set()  # cancelled or done: either way the worker need not go on
            self._cancels.discard(cancel)
        plog = self.get_log(topic, partition)  # deleted meanwhile: UNKNOWN_TOPIC_OR_PARTITION
        moved_on = plog.leader_epoch if plog.leader_epoch != epoch else None  # a new epoch began meanwhile
        return self._append_validated(topic, partition, plog,
                                      rebase(result, plog.log_end_offset, moved_on),
                                      produce_version, sent, from_client=from_client,
                                      sent_len=len(records))

    def _workers(self):
        if self._executor is None:
            from concurrent.futures import ThreadPoolExecutor

            self._executor = ThreadPoolExecutor(VALIDATION_THREADS, thread_name_prefix="minibroker-validate")
            # The record walk is Python: while it runs, the event loop waits for the GIL up to the switch
            # interval each time it wakes (5 ms by default; measured: other clients' p99 21 ms at 5 ms,
            # 7 ms at 1 ms, docs/benchmarks.md). Process-wide, and only ever lowered.
            if sys.getswitchinterval() > GIL_SWITCH_INTERVAL:
                sys.setswitchinterval(GIL_SWITCH_INTERVAL)
            on_close = getattr(self.broker, "on_close", None)
            if on_close is not None:
                on_close(self.close)
        return self._executor

    def close(self) -> None:
        """Stop the worker thread: what it is validating is given up at its next window."""
        for cancel in list(self._cancels):
            cancel.set()
        if self._executor is not None:
            self._executor.shutdown(wait=False, cancel_futures=True)
            self._executor = None

    def _append_validated(
        self, topic: str, partition: int, plog, result, produce_version: int, sent=None, *,
        from_client: bool = True, sent_len: int = -1,
    ) -> AppendOutcome:
        """Check idempotence and append a validated ``result`` whose offsets start at the log end.
        ``sent``: (the first bytes of the records as the producer sent them, their whole length), for
        the byte trace at DEBUG (``_sent_bytes``); ``sent_len``: their length (for the live view's
        feed, ``broker.append_feed``). An append not ``from_client`` (Kafka's
        ``AppendOrigin.COORDINATOR``) has its producer epoch and transaction state checked, not its
        sequence numbers, and is never a duplicate; its batches are recorded in the producer state all
        the same."""
        if not result.record_count and not result.data:  # a partial message only (v0-v2): as Kafka, no append
            return AppendOutcome(-1, -1, plog.log_start_offset, path=str(result.path))
        table = None
        for batch in result.batches:
            if batch.producer_id < 0:
                continue
            if table is None:
                table = self.producer_state(topic, partition)
            duplicate = table.check(
                batch.producer_id, batch.producer_epoch, batch.base_sequence, batch.last_sequence,
                batch.is_transactional, check_sequence=from_client,
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
        _write(plog, result)
        feed = self.broker.append_feed
        if feed is not None:  # a live-view page is open (minibroker/tools/live_view.py)
            feed(topic, partition, result, produce_version, sent_len)
        if append_log.isEnabledFor(logging.DEBUG):  # what happened to the batch: for teaching and tracing
            _log_append(topic, partition, result, produce_version, sent)
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
                    batch.is_transactional,
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

    # -- transactions ---------------------------------------------------------------------------

    def write_txn_marker(
        self,
        topic: str,
        partition: int,
        producer_id: int,
        producer_epoch: int,
        coordinator_epoch: int,
        commit: bool,
        now_ms: int | None = None,
    ) -> int:
        """Append a COMMIT or ABORT marker for ``producer_id`` at the log end and close its transaction
        (for the transaction coordinator; Kafka's append with origin COORDINATOR). Returns the
        marker's offset. An abort of an open transaction is added to the txn index; a marker for a
        producer with no open transaction is written all the same and closes nothing.

        Raises KafkaError: INVALID_PRODUCER_EPOCH for an epoch older than the producer's,
        TRANSACTION_COORDINATOR_FENCED for an older coordinator epoch, UNSUPPORTED_FOR_MESSAGE_FORMAT
        for a topic kept in magic 0/1, and the log's own errors (unknown partition, storage)."""
        from minibroker.records.control import build_end_txn_marker

        plog = self.get_log(topic, partition)
        table = self.producer_state(topic, partition)
        table.check_end_txn_marker(producer_id, producer_epoch, coordinator_epoch)
        config = self._append_config(topic, partition, plog)
        if config.message_format_magic < 2:
            raise KafkaError(ErrorCode.UNSUPPORTED_FOR_MESSAGE_FORMAT, f"transaction markers need magic 2; "
                             f"{topic} is kept in magic {config.message_format_magic}")
        if now_ms is None:
            now_ms = int(time.time() * 1000)
        marker = build_end_txn_marker(commit=commit, producer_id=producer_id, producer_epoch=producer_epoch,
                                      coordinator_epoch=coordinator_epoch, timestamp=now_ms)
        # Not from a client: the validator lets the control batch through and assigns its offset (and
        # LogAppendTime on such topics), as Kafka's LogValidator does for the coordinator.
        result = _validate_and_assign()(
            bytearray(marker), next_offset=plog.log_end_offset, now_ms=now_ms, config=config,
            produce_version=PRODUCE_VERSION_FOR_MARKERS, leader_epoch=plog.leader_epoch, is_from_client=False,
        )
        _write(plog, result)
        feed = self.broker.append_feed
        if feed is not None:  # a live-view page is open: the marker is an append like the others
            feed(topic, partition, result, PRODUCE_VERSION_FOR_MARKERS, len(marker))
        offset = result.first_offset
        completed = table.complete_txn(producer_id, producer_epoch, coordinator_epoch, offset, not commit,
                                       result.max_timestamp)
        try:
            if completed is not None and completed.is_aborted:
                plog.add_aborted_txn(aborted_txn(table, completed))
        finally:
            self.wake(topic, partition)  # the last stable offset moved: read_committed fetches wake
        append_log.debug("%s-%d: %s marker for producer %d (epoch %d, coordinator epoch %d) at offset %d%s",
                         topic, partition, "COMMIT" if commit else "ABORT", producer_id, producer_epoch,
                         coordinator_epoch, offset,
                         f", closing its transaction from {completed.first_offset}" if completed else "")
        return offset

    def last_stable_offset(self, topic: str, partition: int) -> int:
        """The first offset of the earliest open transaction, else the high watermark (never below the
        log start offset: records deleted under an open transaction cannot be read anyway)."""
        plog = self.get_log(topic, partition)
        first_unstable = self.producer_state(topic, partition).first_unstable_offset()
        if first_unstable is None:
            return plog.high_watermark
        return max(min(first_unstable, plog.high_watermark), plog.log_start_offset)

    def aborted_transactions(self, topic: str, partition: int, fetch_offset: int, fetched) -> list:
        """The aborted transactions a READ_COMMITTED fetch of ``fetched`` (a ``FetchSlice`` read from
        ``fetch_offset``) must report: ``AbortedTxn`` entries overlapping the fetched offsets."""
        plog = self.get_log(topic, partition)
        self.producer_state(topic, partition)  # loaded first: it refills txn indexes after a recovery
        return plog.collect_aborted_transactions(fetch_offset, plog.fetch_upper_bound(fetched))

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
