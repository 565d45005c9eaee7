"""The transaction coordinator: every transactional id's state, on one node (KIP-98, KIP-360, KIP-447).

Owner of: every ``TransactionMetadata`` (producer id and epoch, state, partitions, timestamps), the
markers still to write and the timers (timed-out transactions, expired transactional ids, marker
retries). Handlers call in and get results or ``KafkaError``; no other code mutates this state.
Everything runs on the broker's event loop, without an await between reading a transaction's state
and writing its next one, so no two requests interleave within a transition.

State machine, as Kafka's ``TransactionMetadata``::

    Empty -> Ongoing (AddPartitionsToTxn / AddOffsetsToTxn)
    Ongoing -> PrepareCommit | PrepareAbort (EndTxn; a timeout or a new producer aborts)
    Prepare* -> CompleteCommit | CompleteAbort (once every partition has its marker)
    Complete* -> Ongoing | Empty (InitProducerId bumps the epoch)
    Ongoing -> PrepareEpochFence -> PrepareAbort (InitProducerId of a new instance, or a timeout)
    Empty / Complete* -> PrepareAbort (EndTxn v5 aborting with no transaction open: KIP-890 part 2)
    Empty / Complete* -> Dead (transactional.id.expiration.ms without use: a tombstone)

Every transition is a record in the compacted internal topic ``__transaction_state`` (Kafka's
``TransactionLogKey`` / ``TransactionLogValue`` v0), written before the answer, as Kafka writes it.
PrepareEpochFence is never written: it only stands between a fence and its PrepareAbort. After
Prepare*, the COMMIT or ABORT marker goes to each partition of the transaction through the log
(``ReplicaManager.write_txn_marker`` with the coordinator epoch); a failed marker write is retried
every ``MARKER_RETRY_BACKOFF_MS`` as Kafka's marker channel does, then Complete* is written. Markers on
``__consumer_offsets`` also tell the group coordinator to materialize (commit) or drop (abort) the
transaction's pending offsets.

KIP-890 part 2 (transaction.version 2, a client ending with EndTxn v5): the end bumps the producer
epoch (Prepare* carries epoch + 1, the markers too, and the answer hands the new epoch to the producer
for its next transaction); an exhausted epoch moves the producer to a new producer id at epoch 0 once
the transaction completes (kept in memory until then: Kafka's TransactionLogValue v1 tagged
NextProducerId is not written, so a restart between Prepare* and Complete* completes on the old id
and the producer must initialize again). A retried end is recognized by the epoch before the bump.

On start ``__transaction_state`` is read to its end in the background; meanwhile transactional
requests get COORDINATOR_LOAD_IN_PROGRESS. Transactions found in Prepare* get their markers and
complete; Ongoing ones time out as usual. This node coordinates every transactional id, so
NOT_COORDINATOR is never returned.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable, Iterator
from typing import NamedTuple

from minibroker.coordinator.internal_topic import InternalTopic, coordinator_append_error
from minibroker.coordinator.offsets_store import OFFSETS_TOPIC
from minibroker.coordinator.record_codec import RecordError
from minibroker.coordinator.transaction_records import (
    TransactionLogValue,
    TransactionState,
    TxnPartitions,
    decode_key,
    decode_value,
    encode_key,
    encode_value,
)
from minibroker.errors import ErrorCode, KafkaError

log = logging.getLogger("minibroker.transactions")

E = ErrorCode
S = TransactionState
TRANSACTION_STATE_TOPIC = "__transaction_state"
NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
SHORT_MAX = 2**15 - 1
# One node leads __transaction_state at leader epoch 0 for ever: the coordinator epoch markers carry.
COORDINATOR_EPOCH = 0
MARKER_RETRY_BACKOFF_MS = 100

# Errors that retrying a marker cannot cure: Kafka's marker handler gives the partition up on them.
_MARKER_GIVE_UP = frozenset({E.INVALID_PRODUCER_EPOCH, E.PRODUCER_FENCED, E.TRANSACTION_COORDINATOR_FENCED,
                             E.CORRUPT_MESSAGE, E.MESSAGE_TOO_LARGE, E.RECORD_LIST_TOO_LARGE,
                             E.INVALID_REQUIRED_ACKS})

# Kafka's TransactionState.validPreviousStates: a transition from elsewhere is a coordinator bug.
_VALID_PREVIOUS: dict[TransactionState, frozenset[TransactionState]] = {
    S.EMPTY: frozenset({S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}),
    S.ONGOING: frozenset({S.ONGOING, S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}),
    S.PREPARE_COMMIT: frozenset({S.ONGOING}),
    S.PREPARE_ABORT: frozenset({S.ONGOING, S.PREPARE_EPOCH_FENCE,
                                S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}),  # the last three: KIP-890
    S.COMPLETE_COMMIT: frozenset({S.PREPARE_COMMIT}),
    S.COMPLETE_ABORT: frozenset({S.PREPARE_ABORT}),
    S.DEAD: frozenset({S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}),
    S.PREPARE_EPOCH_FENCE: frozenset({S.ONGOING}),
}

# The names Kafka prints and ListTransactions filters on.
STATE_NAMES = {s: str(s) for s in TransactionState}
_STATES_BY_NAME = {name: s for s, name in STATE_NAMES.items()}

TopicPartition = tuple[str, int]
MarkerWriter = Callable[[str, int, int, int, int, bool], object]


def now_ms() -> int:
    return int(time.time() * 1000)


def is_epoch_exhausted(epoch: int) -> bool:
    """Kafka keeps the last epoch (Short.MAX_VALUE) for fencing: a producer may use up to MAX - 1."""
    return epoch >= SHORT_MAX - 1


class TransactionMetadata:
    """One transactional id: plain data, mutated only by the coordinator after its record is written."""

    __slots__ = ("transactional_id", "producer_id", "previous_producer_id", "producer_epoch",
                 "last_producer_epoch", "timeout_ms", "state", "partitions", "start_ms", "last_update_ms",
                 "pending_markers", "failed_epoch_fence", "next_producer_id")

    def __init__(self, transactional_id: str, producer_id: int, producer_epoch: int, timeout_ms: int,
                 state: TransactionState = S.EMPTY, partitions: Iterable[TopicPartition] = (),
                 start_ms: int = -1, last_update_ms: int = -1, *, previous_producer_id: int = NO_PRODUCER_ID,
                 last_producer_epoch: int = NO_PRODUCER_EPOCH):
        self.transactional_id = transactional_id
        self.producer_id = producer_id
        self.previous_producer_id = previous_producer_id
        self.producer_epoch = producer_epoch
        self.last_producer_epoch = last_producer_epoch
        self.timeout_ms = timeout_ms
        self.state = state
        self.partitions: set[TopicPartition] = set(partitions)
        self.start_ms = start_ms
        self.last_update_ms = last_update_ms
        self.pending_markers: set[TopicPartition] = set()  # Prepare*: partitions still without a marker
        self.failed_epoch_fence = False  # a fence whose PrepareAbort could not be written: do not bump again
        self.next_producer_id = NO_PRODUCER_ID  # KIP-890 part 2: an exhausted epoch's new id, for Complete*

    def __repr__(self) -> str:
        return (f"TransactionMetadata({self.transactional_id!r}, producer {self.producer_id} epoch "
                f"{self.producer_epoch}, {self.state}, {sorted(self.partitions)})")

    @property
    def is_completing(self) -> bool:
        return self.state in (S.PREPARE_COMMIT, S.PREPARE_ABORT)


class Transition(NamedTuple):
    """The next state of a transaction: written to the log first, applied once written."""

    state: TransactionState
    producer_id: int
    producer_epoch: int
    last_producer_epoch: int
    timeout_ms: int
    partitions: frozenset[TopicPartition]
    start_ms: int
    last_update_ms: int
    previous_producer_id: int = NO_PRODUCER_ID


class TransactionListing(NamedTuple):
    transactional_id: str
    producer_id: int
    state: str


class TransactionDescription(NamedTuple):
    error: ErrorCode
    transactional_id: str
    state: str = ""
    timeout_ms: int = 0
    start_ms: int = -1
    producer_id: int = NO_PRODUCER_ID
    producer_epoch: int = NO_PRODUCER_EPOCH
    partitions: tuple[TopicPartition, ...] = ()


def log_value(t: Transition) -> TransactionLogValue:
    """The ``__transaction_state`` value of a transition (v0; partitions by topic, null when Empty)."""
    by_topic: dict[str, list[int]] = {}
    for topic, partition in sorted(t.partitions):
        by_topic.setdefault(topic, []).append(partition)
    partitions = [TxnPartitions(topic, tuple(ps)) for topic, ps in by_topic.items()]
    return TransactionLogValue(t.producer_id, t.producer_epoch, t.timeout_ms, int(t.state),
                               None if t.state == S.EMPTY else partitions, t.last_update_ms, t.start_ms)


class TransactionStateTopic(InternalTopic):
    """Appends to and reads ``__transaction_state``; creates it on first need (compacted, like Kafka).

    Writes are v2 batches appended through the replica manager with ``from_client=False``,
    synchronously, so a transition is in the log before its answer."""

    plain_base_sequence = -1  # Kafka's TransactionStateManager writes with MemoryRecords.withRecords

    def __init__(self, broker) -> None:
        cfg = broker.config
        super().__init__(broker, TRANSACTION_STATE_TOPIC, lambda: cfg["transaction.state.log.num.partitions"],
                         self._configs, read_chunk=cfg["transaction.state.log.load.buffer.size"], logger=log)

    def _configs(self) -> dict[str, str]:
        cfg = self.broker.config
        # Kafka's TransactionLog topic configs: compacted, uncompressed, unclean election off.
        return {"cleanup.policy": "compact", "compression.type": "uncompressed",
                "min.insync.replicas": str(cfg["transaction.state.log.min.isr"]),
                "unclean.leader.election.enable": "false",
                "segment.bytes": str(cfg["transaction.state.log.segment.bytes"])}

    def map_append_error(self, e: KafkaError) -> KafkaError:
        return coordinator_append_error(e)

    def append(self, transactional_id: str, value: bytes | None) -> None:
        """Write one transactional id's record; raises KafkaError with the code Kafka's coordinator gives
        its client when the append fails."""
        super().append(transactional_id, [(encode_key(transactional_id), value)],
                       what=f"transactional id {transactional_id}")

    def read_partition(self, partition: int) -> Iterator[tuple[bytes, bytes | None]]:
        """Every (key, value) of one partition from its log start to its current end, in order."""
        for record in super().read_partition(partition):
            if record.commit is None:  # transaction markers are not part of this topic's state
                yield record.key, record.value


class TransactionCoordinator:
    def __init__(self, broker, *, marker_writer: MarkerWriter | None = None, store=None) -> None:
        self.broker = broker
        cfg = broker.config
        self.max_timeout_ms = cfg["transaction.max.timeout.ms"]
        self.id_expiration_ms = cfg["transactional.id.expiration.ms"]
        self.abort_interval_ms = cfg["transaction.abort.timed.out.transaction.cleanup.interval.ms"]
        self.expiry_interval_ms = cfg["transaction.remove.expired.transaction.cleanup.interval.ms"]
        self.store = store if store is not None else TransactionStateTopic(broker)
        self._write_marker = marker_writer or self._write_marker_to_log
        self.transactions: dict[str, TransactionMetadata] = {}
        self.loading = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self._abort_timer: asyncio.TimerHandle | None = None
        self._expiry_timer: asyncio.TimerHandle | None = None
        self._marker_retries: dict[str, asyncio.TimerHandle] = {}
        self._closed = False

    # -- lifecycle ------------------------------------------------------------------------------

    def start(self) -> None:
        """Load ``__transaction_state`` if it exists (in the background) and start the timers."""
        self._loop = asyncio.get_running_loop()
        if self.store.exists:
            self.loading = True
            self.broker.spawn(self._load())
        self._abort_timer = self._call_later(self.abort_interval_ms, self._abort_tick)
        self._expiry_timer = self._call_later(self.expiry_interval_ms, self._expiry_tick)

    def close(self) -> None:
        self._closed = True
        for handle in (self._abort_timer, self._expiry_timer, *self._marker_retries.values()):
            if handle is not None:
                handle.cancel()
        self._marker_retries.clear()

    def _call_later(self, delay_ms: int, fn, *args) -> asyncio.TimerHandle:
        loop = self._loop or asyncio.get_running_loop()
        return loop.call_later(max(delay_ms, 0) / 1000.0, fn, *args)

    # -- loading --------------------------------------------------------------------------------

    async def _load(self) -> None:
        loaded: dict[str, TransactionLogValue | None] = {}
        count = 0
        try:
            for partition in range(self.store.num_partitions):
                for key_bytes, value_bytes in self.store.read_partition(partition):
                    count += 1
                    try:
                        key = decode_key(key_bytes)
                        if key is not None:
                            loaded[key.transactional_id] = (None if value_bytes is None
                                                            else decode_value(value_bytes))
                    except (RecordError, UnicodeDecodeError) as e:
                        log.warning("skipping unreadable %s record: %s", TRANSACTION_STATE_TOPIC, e)
                    if count % 1000 == 0:
                        await asyncio.sleep(0)
                await asyncio.sleep(0)
            for transactional_id, value in loaded.items():
                if value is not None and value.transaction_status != S.DEAD:
                    try:  # one id in a state this version does not know costs that id, not the load
                        self.transactions[transactional_id] = self._from_log(transactional_id, value)
                    except RecordError as e:
                        log.warning("skipping %s of %s: %s", transactional_id, TRANSACTION_STATE_TOPIC, e)
            log.info("loaded %d transactional ids from %d records of %s", len(self.transactions), count,
                     TRANSACTION_STATE_TOPIC)
        except Exception:
            log.exception("loading %s failed", TRANSACTION_STATE_TOPIC)
        finally:
            self.loading = False
        for txn in list(self.transactions.values()):
            if txn.is_completing:  # the answer was sent before the crash: finish what it promised
                log.info("completing the transaction of %s, %s after load", txn.transactional_id, txn.state)
                txn.pending_markers = set(txn.partitions)
                self._send_markers(txn)

    @staticmethod
    def _from_log(transactional_id: str, v: TransactionLogValue) -> TransactionMetadata:
        try:
            state = TransactionState(v.transaction_status)
        except ValueError:
            raise RecordError(f"unknown transaction state {v.transaction_status}") from None
        partitions = [(p.topic, pid) for p in v.transaction_partitions or () for pid in p.partition_ids]
        return TransactionMetadata(transactional_id, v.producer_id, v.producer_epoch,
                                   v.transaction_timeout_ms, state, partitions,
                                   v.transaction_start_timestamp_ms, v.transaction_last_update_timestamp_ms,
                                   previous_producer_id=v.previous_producer_id)

    # -- transitions ----------------------------------------------------------------------------

    def _transit(self, txn: TransactionMetadata, t: Transition) -> None:
        """Write ``t`` to ``__transaction_state``, then make it the transaction's state. Raises KafkaError
        (nothing changed) when the write fails."""
        if txn.state not in _VALID_PREVIOUS[t.state]:
            raise RuntimeError(f"{txn.transactional_id}: illegal transition {txn.state} -> {t.state}")
        self.store.append(txn.transactional_id, encode_value(log_value(t)))
        txn.state = t.state
        txn.producer_id = t.producer_id
        txn.producer_epoch = t.producer_epoch
        txn.last_producer_epoch = t.last_producer_epoch
        txn.previous_producer_id = t.previous_producer_id
        txn.timeout_ms = t.timeout_ms
        txn.partitions = set(t.partitions)
        txn.start_ms = t.start_ms
        txn.last_update_ms = t.last_update_ms

    @staticmethod
    def _next(txn: TransactionMetadata, state: TransactionState, **changes) -> Transition:
        fields = dict(state=state, producer_id=txn.producer_id, producer_epoch=txn.producer_epoch,
                      last_producer_epoch=txn.last_producer_epoch, timeout_ms=txn.timeout_ms,
                      partitions=frozenset(txn.partitions), start_ms=txn.start_ms,
                      last_update_ms=now_ms(), previous_producer_id=txn.previous_producer_id)
        fields.update(changes)
        return Transition(**fields)

    def _check_ready(self, transactional_id: str | None) -> None:
        if not transactional_id:
            raise KafkaError(E.INVALID_REQUEST, "Transactional id may not be empty")
        if self.loading:
            raise KafkaError(E.COORDINATOR_LOAD_IN_PROGRESS)

    def _known(self, transactional_id: str, producer_id: int, producer_epoch: int) -> TransactionMetadata:
        """The transaction a request names, checked as Kafka checks AddPartitionsToTxn and EndTxn."""
        txn = self.transactions.get(transactional_id)
        if txn is None or txn.state == S.DEAD or txn.producer_id != producer_id:
            raise KafkaError(E.INVALID_PRODUCER_ID_MAPPING)
        if txn.producer_epoch != producer_epoch:
            raise KafkaError(E.PRODUCER_FENCED, f"producer epoch {producer_epoch} of {transactional_id} is "
                                                f"not the current epoch {txn.producer_epoch}")
        return txn

    # -- InitProducerId -------------------------------------------------------------------------

    def init_producer_id(self, transactional_id: str, timeout_ms: int, producer_id: int = NO_PRODUCER_ID,
                         producer_epoch: int = NO_PRODUCER_EPOCH) -> tuple[int, int]:
        """The producer id and epoch of a transactional producer (starting or recovering, KIP-360).

        Raises KafkaError: INVALID_REQUEST, INVALID_TRANSACTION_TIMEOUT, COORDINATOR_LOAD_IN_PROGRESS,
        PRODUCER_FENCED, CONCURRENT_TRANSACTIONS (a transaction is completing, or an ongoing one was
        just aborted to fence its producer: retry), or an append error."""
        if not transactional_id:
            raise KafkaError(E.INVALID_REQUEST, "Transactional id may not be empty")
        if not 0 < timeout_ms <= self.max_timeout_ms:
            raise KafkaError(E.INVALID_TRANSACTION_TIMEOUT, f"transaction timeout {timeout_ms} ms is not "
                             f"within (0, transaction.max.timeout.ms={self.max_timeout_ms}]")
        if (producer_id == NO_PRODUCER_ID) != (producer_epoch == NO_PRODUCER_EPOCH):
            raise KafkaError(E.INVALID_REQUEST, "Producer id and epoch must both be given, or neither")
        self._check_ready(transactional_id)
        expected = None if producer_id == NO_PRODUCER_ID else (producer_id, producer_epoch)
        txn = self.transactions.get(transactional_id)
        if txn is None or txn.state == S.DEAD:
            txn = TransactionMetadata(transactional_id, self.broker.producer_ids.allocate(),
                                      NO_PRODUCER_EPOCH, timeout_ms, last_update_ms=now_ms())
            self.transactions[transactional_id] = txn
        if expected is not None and not (
                txn.producer_epoch == NO_PRODUCER_EPOCH or expected[0] == txn.producer_id
                or (expected[0] == txn.previous_producer_id and is_epoch_exhausted(expected[1]))):
            raise KafkaError(E.PRODUCER_FENCED, f"producer id {expected[0]} is not the current producer of "
                                                f"{transactional_id}")
        if txn.is_completing:
            raise KafkaError(E.CONCURRENT_TRANSACTIONS)
        if txn.state == S.ONGOING:
            # Fence the current producer: abort its transaction with a bumped epoch, never returned to
            # anyone; the new producer retries (CONCURRENT_TRANSACTIONS) and gets the epoch after it.
            self._fence_and_abort(txn)
            raise KafkaError(E.CONCURRENT_TRANSACTIONS)
        if txn.state not in (S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT):
            raise RuntimeError(f"{transactional_id} found in state {txn.state}")
        if is_epoch_exhausted(txn.producer_epoch) and (expected is None or expected[1] == txn.producer_epoch):
            # a new producer id, epoch 0 (Kafka's prepareProducerIdRotation)
            t = self._next(txn, S.EMPTY, producer_id=self.broker.producer_ids.allocate(), producer_epoch=0,
                           last_producer_epoch=txn.producer_epoch if expected else NO_PRODUCER_EPOCH,
                           previous_producer_id=txn.producer_id, timeout_ms=timeout_ms,
                           partitions=frozenset(), start_ms=-1)
        else:
            epoch, last_epoch = self._bumped_epoch(txn, None if expected is None else expected[1])
            t = self._next(txn, S.EMPTY, producer_epoch=epoch, last_producer_epoch=last_epoch,
                           timeout_ms=timeout_ms, partitions=frozenset(), start_ms=-1)
        self._transit(txn, t)
        log.info("initialized transactional id %s with producer id %d and epoch %d on partition %s-%d",
                 transactional_id, txn.producer_id, txn.producer_epoch, TRANSACTION_STATE_TOPIC,
                 self.store.partition_for(transactional_id))
        return txn.producer_id, txn.producer_epoch

    @staticmethod
    def _bumped_epoch(txn: TransactionMetadata, expected_epoch: int | None) -> tuple[int, int]:
        """(epoch, last epoch) after InitProducerId, as Kafka's prepareIncrementProducerEpoch."""
        bumped = txn.producer_epoch + 1
        if expected_epoch is None:
            return bumped, NO_PRODUCER_EPOCH
        if txn.producer_epoch == NO_PRODUCER_EPOCH or expected_epoch == txn.producer_epoch:
            return bumped, txn.producer_epoch
        if expected_epoch == txn.last_producer_epoch:
            return txn.producer_epoch, txn.last_producer_epoch  # a retry of a bump that succeeded
        raise KafkaError(E.PRODUCER_FENCED, f"expected epoch {expected_epoch} is neither the current epoch "
                                            f"{txn.producer_epoch} nor the previous one")

    def _fence_and_abort(self, txn: TransactionMetadata) -> None:
        """Bump the epoch of an Ongoing transaction and abort it (PrepareEpochFence -> PrepareAbort)."""
        if txn.producer_epoch == SHORT_MAX:
            raise RuntimeError(f"cannot fence {txn.transactional_id}: its epoch is Short.MAX_VALUE")
        epoch = txn.producer_epoch if txn.failed_epoch_fence else txn.producer_epoch + 1
        log.info("fencing producer %d epoch %d of %s: aborting its transaction with epoch %d",
                 txn.producer_id, txn.producer_epoch, txn.transactional_id, epoch)
        txn.state = S.PREPARE_EPOCH_FENCE  # in memory only, until PrepareAbort is written
        try:
            self._transit(txn, self._next(txn, S.PREPARE_ABORT, producer_epoch=epoch,
                                          last_producer_epoch=NO_PRODUCER_EPOCH))
        except KafkaError:
            txn.state = S.ONGOING
            txn.failed_epoch_fence = True  # the bumped epoch was never handed out: reuse it next time
            raise
        txn.failed_epoch_fence = False
        self._start_markers(txn)

    # -- AddPartitionsToTxn / AddOffsetsToTxn ---------------------------------------------------

    def add_partitions(self, transactional_id: str, producer_id: int, producer_epoch: int,
                       partitions: Iterable[TopicPartition]) -> None:
        """Add partitions to the transaction (starting it). Raises KafkaError: INVALID_REQUEST,
        COORDINATOR_LOAD_IN_PROGRESS, INVALID_PRODUCER_ID_MAPPING, PRODUCER_FENCED,
        CONCURRENT_TRANSACTIONS, or an append error."""
        self._check_ready(transactional_id)
        txn = self._known(transactional_id, producer_id, producer_epoch)
        if txn.is_completing:
            raise KafkaError(E.CONCURRENT_TRANSACTIONS)
        wanted = set(partitions)
        if txn.state == S.ONGOING and wanted <= txn.partitions:
            return
        now = now_ms()
        start = now if txn.state in (S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT) else txn.start_ms
        self._transit(txn, self._next(txn, S.ONGOING, partitions=frozenset(txn.partitions | wanted),
                                      start_ms=start, last_update_ms=now))

    def verify_partitions(self, transactional_id: str, producer_id: int, producer_epoch: int,
                          partitions: Iterable[TopicPartition]) -> dict[TopicPartition, ErrorCode]:
        """AddPartitionsToTxn ``verify_only`` (KIP-890): NONE for each partition in the transaction,
        TRANSACTION_ABORTABLE for the others; the transaction's own errors on every partition."""
        partitions = list(partitions)
        try:
            self._check_ready(transactional_id)
            txn = self._known(transactional_id, producer_id, producer_epoch)
            if txn.is_completing:
                raise KafkaError(E.CONCURRENT_TRANSACTIONS)
        except KafkaError as e:
            return {tp: e.code for tp in partitions}
        return {tp: E.NONE if tp in txn.partitions else E.TRANSACTION_ABORTABLE for tp in partitions}

    def ensure_offsets_partition_in_transaction(self, transactional_id: str, producer_id: int,
                                                producer_epoch: int, offsets_partition: int) -> None:
        """TxnOffsetCommit's transaction checks: the group's ``__consumer_offsets`` partition was added
        (AddOffsetsToTxn) to an Ongoing transaction of this producer; INVALID_TXN_STATE otherwise."""
        self._check_ready(transactional_id)
        txn = self._known(transactional_id, producer_id, producer_epoch)
        if txn.state != S.ONGOING or (OFFSETS_TOPIC, offsets_partition) not in txn.partitions:
            raise KafkaError(E.INVALID_TXN_STATE, "AddOffsetsToTxn must come before TxnOffsetCommit")

    # -- EndTxn ---------------------------------------------------------------------------------

    def end_transaction(self, transactional_id: str, producer_id: int, producer_epoch: int,
                        commit: bool) -> None:
        """Commit or abort: PrepareCommit/PrepareAbort is written before this returns; the markers and
        the Complete state follow (at once unless a marker write fails, then retried). Raises KafkaError:
        INVALID_REQUEST, COORDINATOR_LOAD_IN_PROGRESS, INVALID_PRODUCER_ID_MAPPING, PRODUCER_FENCED,
        CONCURRENT_TRANSACTIONS, INVALID_TXN_STATE, or an append error. A retry of an end that already
        completed the same way succeeds."""
        self._check_ready(transactional_id)
        txn = self._known(transactional_id, producer_id, producer_epoch)
        wanted_complete = S.COMPLETE_COMMIT if commit else S.COMPLETE_ABORT
        wanted_prepare = S.PREPARE_COMMIT if commit else S.PREPARE_ABORT
        if txn.state == wanted_complete:
            return
        if txn.state == wanted_prepare:
            raise KafkaError(E.CONCURRENT_TRANSACTIONS)
        if txn.state != S.ONGOING:
            raise KafkaError(E.INVALID_TXN_STATE, f"cannot {'commit' if commit else 'abort'} the transaction "
                                                  f"of {transactional_id} in state {txn.state}")
        self._transit(txn, self._next(txn, wanted_prepare))
        self._start_markers(txn)

    def end_transaction_with_epoch_bump(self, transactional_id: str, producer_id: int, producer_epoch: int,
                                        commit: bool) -> tuple[int, int]:
        """EndTxn v5 (KIP-890 part 2, Kafka's endTransaction with transaction version 2): as
        ``end_transaction``, but the end bumps the producer epoch, an abort is accepted with no
        transaction open (it only bumps), and a retry is recognized by the epoch before the bump.
        Returns the producer id and epoch the producer goes on with."""
        self._check_ready(transactional_id)
        txn = self.transactions.get(transactional_id)
        if txn is None or txn.state == S.DEAD:
            raise KafkaError(E.INVALID_PRODUCER_ID_MAPPING)
        retry_on_bump = txn.producer_epoch == producer_epoch + 1
        retry_on_overflow = (txn.previous_producer_id == producer_id and producer_epoch == SHORT_MAX - 1
                             and txn.producer_epoch == 0)
        if txn.state in (S.PREPARE_COMMIT, S.PREPARE_ABORT):
            valid_epoch = retry_on_bump
        elif txn.state in (S.COMPLETE_COMMIT, S.COMPLETE_ABORT):
            valid_epoch = retry_on_bump or retry_on_overflow or producer_epoch == txn.producer_epoch
        else:
            valid_epoch = producer_epoch == txn.producer_epoch
        if not valid_epoch:
            raise KafkaError(E.PRODUCER_FENCED, f"producer epoch {producer_epoch} of {transactional_id} is "
                                                f"not the current epoch {txn.producer_epoch}")
        if txn.producer_id != producer_id and not retry_on_overflow:
            raise KafkaError(E.INVALID_PRODUCER_ID_MAPPING)
        retry = retry_on_bump or retry_on_overflow
        wanted = "commit" if commit else "abort"
        if txn.state == S.ONGOING:
            self._prepare_with_epoch_bump(txn, commit)
        elif txn.state == (S.PREPARE_COMMIT if commit else S.PREPARE_ABORT):
            raise KafkaError(E.CONCURRENT_TRANSACTIONS)
        elif txn.state == (S.COMPLETE_COMMIT if commit else S.COMPLETE_ABORT) and retry:
            pass  # a retry of the end that completed
        elif not commit and not retry and txn.state in (S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT):
            self._prepare_with_epoch_bump(txn, commit)  # nothing to abort: the epoch is bumped all the same
        else:
            raise KafkaError(E.INVALID_TXN_STATE, f"cannot {wanted} the transaction of {transactional_id} "
                                                  f"in state {txn.state}")
        return txn.producer_id, txn.producer_epoch

    def _prepare_with_epoch_bump(self, txn: TransactionMetadata, commit: bool) -> None:
        """Prepare* at epoch + 1 (the markers carry it), then the markers and Complete*. An exhausted
        epoch goes to Short.MAX_VALUE for the markers and a new producer id is taken for Complete*."""
        next_id = self.broker.producer_ids.allocate() if is_epoch_exhausted(txn.producer_epoch) \
            else NO_PRODUCER_ID
        state = S.PREPARE_COMMIT if commit else S.PREPARE_ABORT
        self._transit(txn, self._next(txn, state, producer_epoch=txn.producer_epoch + 1,
                                      last_producer_epoch=txn.producer_epoch))
        txn.next_producer_id = next_id
        self._start_markers(txn)

    def _abort_on_behalf(self, txn: TransactionMetadata, why: str) -> None:
        """Abort a transaction its producer did not end (timeout): fence the producer first."""
        try:
            self._fence_and_abort(txn)
        except KafkaError as e:
            log.warning("could not abort the transaction of %s (%s): %s", txn.transactional_id, why, e)
        else:
            log.info("aborted the transaction of %s (%s)", txn.transactional_id, why)

    # -- markers --------------------------------------------------------------------------------

    def _start_markers(self, txn: TransactionMetadata) -> None:
        txn.pending_markers = set(txn.partitions)
        self._send_markers(txn)

    def _send_markers(self, txn: TransactionMetadata) -> None:
        """Write the marker to every partition still without one, then the Complete state. What fails
        retriably is tried again after MARKER_RETRY_BACKOFF_MS."""
        self._marker_retries.pop(txn.transactional_id, None)
        if self._closed or self.transactions.get(txn.transactional_id) is not txn or not txn.is_completing:
            return
        commit = txn.state == S.PREPARE_COMMIT
        groups = self.broker.groups
        for topic, partition in sorted(txn.pending_markers):
            if topic == OFFSETS_TOPIC and groups is not None and groups.loading:
                continue  # the marker must find the pending offsets the group load is reading back
            if not self._partition_exists(topic, partition):
                log.info("%s-%d was deleted: no %s marker for %s", topic, partition,
                         "COMMIT" if commit else "ABORT", txn.transactional_id)
                txn.pending_markers.discard((topic, partition))
                continue
            try:
                self._write_marker(topic, partition, txn.producer_id, txn.producer_epoch, COORDINATOR_EPOCH,
                                   commit)
            except Exception as e:  # noqa: BLE001 - whatever fails, the marker is owed: retry it
                if isinstance(e, KafkaError) and e.code in _MARKER_GIVE_UP:
                    log.error("giving up the %s marker of %s on %s-%d: %s", "COMMIT" if commit else "ABORT",
                              txn.transactional_id, topic, partition, e)
                    txn.pending_markers.discard((topic, partition))
                else:
                    log.warning("%s marker of %s on %s-%d failed, will retry: %s",
                                "COMMIT" if commit else "ABORT", txn.transactional_id, topic, partition, e,
                                exc_info=not isinstance(e, KafkaError))
                continue
            txn.pending_markers.discard((topic, partition))
            if topic == OFFSETS_TOPIC and groups is not None:
                groups.complete_transactional_offsets(partition, txn.producer_id, commit)
        if not txn.pending_markers:
            complete = S.COMPLETE_COMMIT if commit else S.COMPLETE_ABORT
            rotation = {}
            if txn.next_producer_id != NO_PRODUCER_ID:  # the epoch overflowed: a new id at epoch 0
                rotation = dict(producer_id=txn.next_producer_id, producer_epoch=0,
                                previous_producer_id=txn.producer_id)
            try:
                self._transit(txn, self._next(txn, complete, partitions=frozenset(), **rotation))
                txn.next_producer_id = NO_PRODUCER_ID
                log.debug("%s of %s: %s", "commit" if commit else "abort", txn.transactional_id, complete)
                return
            except KafkaError as e:
                log.warning("could not write %s of %s, will retry: %s", complete, txn.transactional_id, e)
        self._marker_retries[txn.transactional_id] = self._call_later(MARKER_RETRY_BACKOFF_MS,
                                                                      self._send_markers, txn)

    def _partition_exists(self, topic: str, partition: int) -> bool:
        info = self.broker.logs.topics.get(topic)
        return info is not None and 0 <= partition < info.partitions

    def _write_marker_to_log(self, topic: str, partition: int, producer_id: int, producer_epoch: int,
                             coordinator_epoch: int, commit: bool) -> None:
        self.broker.replicas.write_txn_marker(topic, partition, producer_id, producer_epoch,
                                              coordinator_epoch, commit)

    # -- timers ---------------------------------------------------------------------------------

    def _abort_tick(self) -> None:
        self._abort_timer = self._tick(self.abort_timed_out_transactions, "aborting timed-out transactions",
                                       self.abort_interval_ms, self._abort_tick)

    def _tick(self, work, what: str, interval_ms: int, again):
        """Run a periodic job (its failure logged, never raised) and set its next run; the timer handle,
        None once closed."""
        try:
            work()
        except Exception:
            log.exception("%s failed", what)
        return None if self._closed else self._call_later(interval_ms, again)

    def abort_timed_out_transactions(self, now: int | None = None) -> int:
        """Abort every Ongoing transaction open longer than its timeout; returns how many."""
        if self.loading:
            return 0
        now = now_ms() if now is None else now
        doomed = [t for t in self.transactions.values()
                  if t.state == S.ONGOING and t.start_ms + t.timeout_ms < now]
        for txn in doomed:
            self._abort_on_behalf(txn, f"open longer than its timeout of {txn.timeout_ms} ms")
        return len(doomed)

    def _expiry_tick(self) -> None:
        self._expiry_timer = self._tick(self.expire_transactional_ids, "expiring transactional ids",
                                        self.expiry_interval_ms, self._expiry_tick)

    def expire_transactional_ids(self, now: int | None = None) -> int:
        """Forget transactional ids without a transaction and unused for ``transactional.id.expiration.ms``
        (a tombstone in ``__transaction_state``); returns how many."""
        if self.loading:
            return 0
        now = now_ms() if now is None else now
        expired = 0
        for txn in list(self.transactions.values()):
            if (txn.state in (S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT)
                    and txn.last_update_ms + self.id_expiration_ms <= now):
                try:
                    self.store.append(txn.transactional_id, None)
                except KafkaError:
                    continue
                txn.state = S.DEAD
                del self.transactions[txn.transactional_id]
                expired += 1
        if expired:
            log.info("expired %d transactional ids", expired)
        return expired

    # -- DescribeTransactions / ListTransactions ------------------------------------------------

    def describe(self, transactional_id: str) -> TransactionDescription:
        if self.loading:
            return TransactionDescription(E.COORDINATOR_LOAD_IN_PROGRESS, transactional_id)
        if not transactional_id:
            return TransactionDescription(E.INVALID_REQUEST, transactional_id)
        txn = self.transactions.get(transactional_id)
        if txn is None or txn.state == S.DEAD:
            return TransactionDescription(E.TRANSACTIONAL_ID_NOT_FOUND, transactional_id)
        return TransactionDescription(E.NONE, transactional_id, STATE_NAMES[txn.state], txn.timeout_ms,
                                      txn.start_ms, txn.producer_id, txn.producer_epoch,
                                      tuple(sorted(txn.partitions)))

    def list_transactions(self, states: Iterable[str] = (), producer_ids: Iterable[int] = (),
                          duration_ms: int = -1, now: int | None = None
                          ) -> tuple[list[str], list[TransactionListing]]:
        """(unknown state filters, matching transactions). Empty filters match everything; a duration
        >= 0 keeps transactions started longer ago than it (KIP-994; as in Kafka, the start time of a
        transactional id without a transaction is -1, so it always passes)."""
        if self.loading:
            raise KafkaError(E.COORDINATOR_LOAD_IN_PROGRESS)
        states = list(states)
        unknown = [s for s in states if s not in _STATES_BY_NAME]
        wanted_states = {_STATES_BY_NAME[s] for s in states if s in _STATES_BY_NAME}
        wanted_ids = set(producer_ids)
        now = now_ms() if now is None else now
        out = []
        for txn in self.transactions.values():
            if txn.state == S.DEAD:
                continue
            if states and txn.state not in wanted_states:
                continue
            if wanted_ids and txn.producer_id not in wanted_ids:
                continue
            if duration_ms >= 0 and now - txn.start_ms <= duration_ms:
                continue
            out.append(TransactionListing(txn.transactional_id, txn.producer_id, STATE_NAMES[txn.state]))
        return unknown, out


def fenced_error_for(code: ErrorCode, version: int, first_version_with_fenced: int) -> ErrorCode:
    """PRODUCER_FENCED as a request version knows it: versions before it get INVALID_PRODUCER_EPOCH,
    which older clients handle alike (Kafka's KafkaApis does the same per API)."""
    if code == E.PRODUCER_FENCED and version < first_version_with_fenced:
        return E.INVALID_PRODUCER_EPOCH
    return code
